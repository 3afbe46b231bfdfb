# Sourced by the scripts that run a pinned PyPI tool from a venv of its own
# (scripts/k8s-validate.sh, scripts/bench-cluster.sh).
#
# pip_tool_install VENV PACKAGE VERSION WHO
#   Creates VENV and installs PACKAGE==VERSION into it, unless that version
#   is there already. WHO names the calling script in messages.
pip_tool_install() {
    local venv=$1 package=$2 version=$3 who=$4
    # (Not `pip show | grep -q`: with pipefail, grep's early exit fails the pipe.)
    if [ -x "$venv/bin/pip" ] && [ "$("$venv/bin/pip" show "$package" 2>/dev/null | sed -n 's/^Version: //p')" = "$version" ]; then
        return
    fi
    echo "$who: installing $package==$version into $venv" >&2
    mkdir -p "$(dirname "$venv")"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
        echo "$who: python3 -m venv failed; install python3-venv (scripts/install-deps.sh does)" >&2
        exit 1
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$package==$version" >&2
}

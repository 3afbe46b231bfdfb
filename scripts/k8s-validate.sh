#!/usr/bin/env bash
# Validates the Kubernetes manifests against the Kubernetes API schema with
# kubernetes-validate (PyPI, pinned; it ships the schemas, so no cluster and
# no network at check time), strictly: unknown fields are errors too.
#
#   scripts/k8s-validate.sh [FILE...]   # default: deploy/kubernetes/*.yaml
#   scripts/k8s-validate.sh install     # only create the venv
#
# The venv lives in $WEIR_K8S_VENV (default ~/.cache/weir/k8s-validate-venv).
# Exit 0 when every file validates, 1 when one does not (each failure named).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=1.37.0
KUBERNETES=1.37.0
VENV=${WEIR_K8S_VENV:-$HOME/.cache/weir/k8s-validate-venv}

install() {
    if [ -x "$VENV/bin/kubernetes-validate" ] && [ "$("$VENV/bin/pip" show kubernetes-validate 2>/dev/null | sed -n 's/^Version: //p')" = "$VERSION" ]; then
        return
    fi
    echo "k8s-validate.sh: installing kubernetes-validate==$VERSION into $VENV" >&2
    mkdir -p "$(dirname "$VENV")"
    if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
        echo "k8s-validate.sh: python3 -m venv failed; install python3-venv (scripts/install-deps.sh does)" >&2
        exit 1
    fi
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$VERSION" >&2
}

install
[ "${1:-}" = install ] && exit 0
[ $# -gt 0 ] || set -- deploy/kubernetes/*.yaml
exec "$VENV/bin/kubernetes-validate" --strict --no-warn --kubernetes-version "$KUBERNETES" "$@"

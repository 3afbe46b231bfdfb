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

source scripts/lib/venv.sh
install() { pip_tool_install "$VENV" kubernetes-validate "$VERSION" k8s-validate.sh; }

install
[ "${1:-}" = install ] && exit 0
[ $# -gt 0 ] || set -- deploy/kubernetes/*.yaml
exec "$VENV/bin/kubernetes-validate" --strict --no-warn --kubernetes-version "$KUBERNETES" "$@"

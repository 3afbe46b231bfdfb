#!/usr/bin/env bash
# Installs what building and testing weir needs on a fresh Debian machine.
# Idempotent: packages already present are not touched. Needs root (or sudo).
#
#   scripts/install-deps.sh             everything the tests need
#   scripts/install-deps.sh --minimal   only what a build without the
#                                       optional features needs (the quickstart)
set -euo pipefail
minimal=false
[ "${1:-}" = "--minimal" ] && minimal=true

# A C and C++ toolchain for crates that build C code (librdkafka, RocksDB);
# libclang for the bindgen step of RocksDB's bindings; procps for `kill`,
# which the end-to-end tests use to send SIGTERM; python3 for the test
# broker's and S3 server's scripts (free ports) and, with its venv module, for
# the pinned PyPI tools (scripts/lib/venv.sh); patch for the test broker
# (scripts/kafka-broker.sh applies scripts/noida-patches to its source);
# prometheus (and its promtool) for the test that lets a real Prometheus
# scrape weir's metrics endpoint (scripts/prometheus.sh); tmux for the tests
# that run weir in a real terminal and read its screen (tests/e2e/terminal.rs);
# systemd for `systemd-analyze verify` of deploy/systemd/ (tests/e2e/restart.rs);
# postgresql (server and psql) for the PostgreSQL sink's tests, which start
# their own server (scripts/postgres.sh); chromium (headless) for the test
# that loads the web page in a real browser (tests/e2e/web.rs).
packages=(build-essential pkg-config libclang-dev procps python3 python3-venv patch prometheus tmux systemd postgresql chromium)
# The quickstart's build (no RocksDB, Kafka or S3) needs a C toolchain only.
$minimal && packages=(build-essential pkg-config)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "Installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
  # The package enables a system Prometheus on :9090; the tests start their
  # own (scripts/prometheus.sh), so one we just installed is switched off.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1; then
    $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
  # Likewise the cluster Debian's package creates and starts on :5432.
  if [[ " ${missing[*]} " == *" postgresql "* ]]; then
    command -v systemctl >/dev/null 2>&1 && $sudo systemctl disable --now postgresql >/dev/null 2>&1 || true
    command -v pg_lsclusters >/dev/null 2>&1 && pg_lsclusters -h | while read -r version cluster _; do
      $sudo pg_ctlcluster "$version" "$cluster" stop >/dev/null 2>&1 || true
    done
  fi
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found. Install a Rust toolchain >= 1.88 (https://rustup.rs) and rerun." >&2
  exit 1
fi
$minimal && exit 0

# The S3-compatible test server (s3s-fs, pinned), built once with cargo into
# ~/.cache/weir/s3s-fs (a few minutes cold; nothing when cached).
"$(dirname "$0")/s3-server.sh" install

# The Kafka test broker (noida-db from crates.io, pinned, with
# scripts/noida-patches), built once with cargo into
# ~/.cache/weir/noida-<version>-<patch hash> (about 3 minutes cold on 2 cores;
# nothing when cached).
"$(dirname "$0")/kafka-broker.sh" install

# DuckDB (PyPI, pinned, in a venv): the independent reader the Parquet
# sink's tests read its files with (scripts/read-parquet.sh).
"$(dirname "$0")/read-parquet.sh" install

# The Kubernetes schema validator (kubernetes-validate, pinned, in a venv)
# for the test that checks deploy/kubernetes/.
"$(dirname "$0")/k8s-validate.sh" install

#!/usr/bin/env bash
# Set up and run every test: unit tests and end-to-end tests of the real
# binary. One build, in the release profile, serves the binary and the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo test --release "$@"

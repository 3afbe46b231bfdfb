#!/usr/bin/env bash
# Set up and run the quickstart pipeline (no external services needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --release
target/release/weir run pipelines/quickstart.yaml "$@"
echo "Output: $(ls out/quickstart/ | wc -l) part file(s) in out/quickstart/"

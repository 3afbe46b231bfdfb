#!/usr/bin/env bash
# Set up and run the quickstart pipeline (no external services needed).
# Builds weir without the optional RocksDB, Kafka and S3 features: their C/C++
# libraries and HTTP/TLS stack are most of a cold build, and the quickstart
# needs none of them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --minimal
cargo build --release --no-default-features
"${CARGO_TARGET_DIR:-target}"/release/weir run pipelines/quickstart.yaml "$@"
echo "Output: $(ls out/quickstart/ | wc -l) part file(s) in out/quickstart/"
echo "This weir has no RocksDB state, Kafka connectors or S3 storage; \`cargo build --release\` builds everything."

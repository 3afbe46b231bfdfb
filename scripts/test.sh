#!/usr/bin/env bash
# Set up and run every test: unit tests and end-to-end tests of the real
# binary. One build, in the release profile, serves the binary and the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The Kafka tests use the broker named by KAFKA_BOOTSTRAP, the S3 tests
# (tests/e2e/s3.rs) the server the AWS variables name (AWS_ENDPOINT_URL or
# WEIR_S3_ENDPOINT, with AWS_ACCESS_KEY_ID, ...); without them the test broker
# and the S3 test server are started here and stopped when the tests end.
source scripts/lib/services.sh
cargo test --release --workspace "$@"

# The quickstart as the README runs it (scripts/quickstart.sh: a build
# without the rocksdb and kafka features), so that path keeps compiling and
# running. Its own target dir: sharing target/ would leave a weir without
# RocksDB and Kafka in target/release/ after the tests and rebuild weir on
# every switch; a separate one costs one cold build of the Rust dependencies
# (4 min on the 2-core CI machine against 18 min for the full build, so far
# from doubling it) and, warm, only weir itself.
CARGO_TARGET_DIR=target/quickstart scripts/quickstart.sh
ls out/quickstart/part-*.jsonl > /dev/null

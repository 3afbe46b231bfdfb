#!/usr/bin/env bash
# Set up and run every test: unit tests and end-to-end tests of the real
# binary. One build, in the release profile, serves the binary and the tests.
#
# The Kafka tests use the broker named by KAFKA_BOOTSTRAP; without it this
# script starts the test broker (scripts/kafka-broker.sh) on a fresh data
# directory and stops it when the tests end, whatever their outcome; the
# same for the S3 test server (below).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cleanups=()
trap 'for c in "${cleanups[@]}"; do eval "$c"; done' EXIT
if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
  broker_dir=$(mktemp -d "${TMPDIR:-/tmp}/weir-kafka-test.XXXXXX")
  cleanups+=('scripts/kafka-broker.sh stop --data-dir "$broker_dir"; rm -rf "$broker_dir"')
  KAFKA_BOOTSTRAP=$(scripts/kafka-broker.sh start --data-dir "$broker_dir")
  # The chaos harness stops and continues this broker (outages).
  KAFKA_BROKER_DIR=$broker_dir
  export KAFKA_BOOTSTRAP KAFKA_BROKER_DIR
  echo "Test broker: $KAFKA_BOOTSTRAP (data in $broker_dir)"
fi
# The S3 tests (tests/e2e/s3.rs) use the server the AWS variables name
# (AWS_ENDPOINT_URL or WEIR_S3_ENDPOINT, with AWS_ACCESS_KEY_ID, ...); without
# one this script starts the test server (scripts/s3-server.sh, built once
# into ~/.cache/weir) and stops it when the tests end.
if [ -z "${AWS_ENDPOINT_URL:-}" ] && [ -z "${WEIR_S3_ENDPOINT:-}" ]; then
  s3_dir=$(mktemp -d "${TMPDIR:-/tmp}/weir-s3-test.XXXXXX")
  cleanups+=('scripts/s3-server.sh stop --data-dir "$s3_dir"; rm -rf "$s3_dir"')
  eval "$(scripts/s3-server.sh start --data-dir "$s3_dir")"
  echo "Test S3 server: $AWS_ENDPOINT_URL (data in $s3_dir)"
fi
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

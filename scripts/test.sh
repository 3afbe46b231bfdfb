#!/usr/bin/env bash
# Set up and run every test: unit tests and end-to-end tests of the real
# binary. One build, in the release profile, serves the binary and the tests.
#
# The Kafka tests use the broker named by KAFKA_BOOTSTRAP; without it this
# script starts the test broker (scripts/kafka-broker.sh) on a fresh data
# directory and stops it when the tests end, whatever their outcome.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
  broker_dir=$(mktemp -d "${TMPDIR:-/tmp}/weir-kafka-test.XXXXXX")
  trap 'scripts/kafka-broker.sh stop --data-dir "$broker_dir"; rm -rf "$broker_dir"' EXIT
  KAFKA_BOOTSTRAP=$(scripts/kafka-broker.sh start --data-dir "$broker_dir")
  # The chaos harness stops and continues this broker (outages).
  KAFKA_BROKER_DIR=$broker_dir
  export KAFKA_BOOTSTRAP KAFKA_BROKER_DIR
  echo "Test broker: $KAFKA_BOOTSTRAP (data in $broker_dir)"
fi
cargo test --release "$@"

# The quickstart as the README runs it (scripts/quickstart.sh: a build
# without the rocksdb and kafka features), so that path keeps compiling and
# running. Its own target dir: sharing target/ would leave a weir without
# RocksDB and Kafka in target/release/ after the tests and rebuild weir on
# every switch; a separate one costs one cold build of the Rust dependencies
# (4 min on the 2-core CI machine against 18 min for the full build, so far
# from doubling it) and, warm, only weir itself.
CARGO_TARGET_DIR=target/quickstart scripts/quickstart.sh
ls out/quickstart/part-*.jsonl > /dev/null

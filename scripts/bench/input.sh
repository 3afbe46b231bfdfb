# Sourced by the bench scripts: `bench_input DEFAULT_ROWS` builds weir (one
# release build), sets $weir and $rows, exports BENCH_ROWS and BENCH_DATA,
# and generates the benchmark input (scripts/bench/gen.yaml) into
# target/bench/data-ROWS once per size.
bench_input() {
  rows=${BENCH_ROWS:-$1}
  export BENCH_ROWS=$rows
  export BENCH_DATA=$PWD/target/bench/data-$rows
  cargo build --release -q
  weir=target/release/weir
  if [ ! -f "$BENCH_DATA/.complete" ]; then
    rm -rf "$BENCH_DATA"
    echo "Generating $rows rows into $BENCH_DATA ..." >&2
    $weir run --no-progress --log-level warn scripts/bench/gen.yaml
    touch "$BENCH_DATA/.complete"
  fi
}

# `bench_broker`: the broker KAFKA_BOOTSTRAP names, or else a fresh local
# test broker (scripts/kafka-broker.sh, stopped when the script exits) whose
# pid goes into BROKER_PID (empty for a broker of one's own). Exports both.
bench_broker() {
  BROKER_PID=
  if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
    bench_broker_dir=$(mktemp -d "${TMPDIR:-/tmp}/weir-kafka-bench.XXXXXX")
    trap 'scripts/kafka-broker.sh stop --data-dir "$bench_broker_dir"; rm -rf "$bench_broker_dir"' EXIT
    KAFKA_BOOTSTRAP=$(scripts/kafka-broker.sh start --data-dir "$bench_broker_dir")
    BROKER_PID=$(ss -ltnpH "sport = :${KAFKA_BOOTSTRAP##*:}" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1)
  fi
  export KAFKA_BOOTSTRAP BROKER_PID
}

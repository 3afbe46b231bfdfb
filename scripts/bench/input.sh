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

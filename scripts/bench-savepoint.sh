#!/usr/bin/env bash
# Savepoint benchmark: time and size of a savepoint of 1 M and 10 M keys
# (dedup over distinct ids; memory or RocksDB state), and the restore time at the same and at
# another parallelism. Prints a Markdown table on stdout.
#
#   scripts/bench-savepoint.sh                 # 1 M and 10 M keys
#   SP_KEY_COUNTS="100000" scripts/bench-savepoint.sh
#   SP_BACKEND=rocksdb scripts/bench-savepoint.sh   # state in RocksDB (default memory)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
weir=$PWD/target/release/weir
pipeline=scripts/bench/savepoint.yaml
export BENCH_STATE=$PWD/target/bench/sp-state
backend=${SP_BACKEND:-memory}
ms() { date +%s%3N; }
secs() { awk "BEGIN { printf \"%.2f\", ($2 - $1) / 1000 }"; }

echo "| keys in state | savepoint s | savepoint MiB | stop-with-savepoint s | restore p=2 -> 2 ms | restore p=2 -> 1 ms | restore p=2 -> 4 ms |"
echo "|---|---|---|---|---|---|---|"
for keys in ${SP_KEY_COUNTS:-1000000 10000000}; do
  export SP_KEYS=$keys
  rm -rf "$BENCH_STATE" target/bench/sp-*.d
  log=$(mktemp)
  $weir run --no-progress --log-level info "$pipeline" --set state.backend="$backend" 2>"$log" >>"$log" &
  pid=$!
  until [ -S "$BENCH_STATE/control.sock" ]; do sleep 0.2; done
  # Until every id is in state (at >= 250 K ids/s); the summary checks it.
  sleep $(( keys / 250000 + 2 ))
  t0=$(ms); $weir savepoint trigger "$pipeline" --target "$PWD/target/bench/sp-mid.d" >/dev/null; t1=$(ms)
  $weir savepoint trigger "$pipeline" --stop --target "$PWD/target/bench/sp-stop.d" >/dev/null; t2=$(ms)
  wait $pid
  stored=$(sed -n 's/.*unique [0-9]* in\/\([0-9]*\) out.*/\1/p' "$log")
  size=$(du -sm target/bench/sp-stop.d | cut -f1)
  restore_ms() {
    rm -rf "$BENCH_STATE"
    # The ids are all read and tick stops at once: the run restores and ends.
    $weir restore target/bench/sp-stop.d "$pipeline" --no-progress --log-level info -p "$1" --set sources.tick.rows=1 \
      --set state.backend="$backend" 2>&1 |
      sed -n 's/.*restore_ms=\([0-9]*\).*/\1/p'
  }
  echo "| $stored | $(secs "$t0" "$t1") | $size | $(secs "$t1" "$t2") | $(restore_ms 2) | $(restore_ms 1) | $(restore_ms 4) |"
  rm -f "$log"
done
echo
echo "$(nproc) cores, $(uname -m); $backend backend; keys are integer ids."

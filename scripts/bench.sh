#!/usr/bin/env bash
# Throughput benchmark: keyed count+sum, 10 s tumbling count and dedup over a
# JSON-lines file, memory state, blackhole sink, at parallelism 1 and 2.
# Prints records/s and peak RSS per run, as a Markdown table on stdout.
#
#   scripts/bench.sh            # 10 M rows (generated once into target/bench/)
#   BENCH_ROWS=1000000 scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${BENCH_ROWS:-10000000}
export BENCH_ROWS=$rows
export BENCH_DATA=$PWD/target/bench/data-$rows
command -v /usr/bin/time >/dev/null || { echo "bench.sh needs GNU time: apt-get install time" >&2; exit 1; }
cargo build --release -q
weir=target/release/weir

if [ ! -f "$BENCH_DATA/.complete" ]; then
  rm -rf "$BENCH_DATA"
  echo "Generating $rows rows into $BENCH_DATA ..." >&2
  $weir run --no-progress --log-level warn scripts/bench/gen.yaml
  touch "$BENCH_DATA/.complete"
fi
bytes=$(cat "$BENCH_DATA"/part-* | wc -c)

echo "| job | parallelism | records | seconds | records/s | peak RSS (MiB) |"
echo "|---|---|---|---|---|---|"
for job in count tumbling dedup; do
  for p in 1 2; do
    out=$( { /usr/bin/time -f 'rss_kb=%M' $weir run --no-progress --log-level warn -p "$p" "scripts/bench/$job.yaml" ; } 2>&1 )
    # The summary line: "Finished in 3.21s, 3115264 records/s: ..."
    secs=$(sed -n 's/^Finished in \([0-9.]*\)s.*/\1/p' <<<"$out")
    rate=$(sed -n 's/^Finished in [0-9.]*s, \([0-9]*\) records\/s.*/\1/p' <<<"$out")
    rss=$(sed -n 's/^rss_kb=//p' <<<"$out")
    if [ -z "$rate" ]; then
      echo "run failed: $job p=$p" >&2
      echo "$out" >&2
      exit 1
    fi
    echo "| $job | $p | $rows | $secs | $rate | $((rss / 1024)) |"
  done
done
echo
echo "Input: $rows rows, $((bytes / rows)) bytes/row, $(nproc) cores, $(uname -m)."

# What checkpoints cost: keyed count with 1 s aligned checkpoints vs none,
# alternated in the same session so machine noise hits both alike.
export BENCH_STATE=$PWD/target/bench/state
echo
echo "| keyed count, p=1 | run | records/s |"
echo "|---|---|---|"
best_plain=0; best_ckpt=0
for i in 1 2 3; do
  for job in count count_checkpointed; do
    rm -rf "$BENCH_STATE"
    out=$($weir run --no-progress --log-level warn -p 1 "scripts/bench/$job.yaml" 2>&1)
    rate=$(sed -n 's/^Finished in [0-9.]*s, \([0-9]*\) records\/s.*/\1/p' <<<"$out")
    [ -n "$rate" ] || { echo "run failed: $job" >&2; echo "$out" >&2; exit 1; }
    echo "| $job | $i | $rate |"
    if [ "$job" = count ]; then [ "$rate" -gt "$best_plain" ] && best_plain=$rate
    else [ "$rate" -gt "$best_ckpt" ] && best_ckpt=$rate; fi
  done
done
echo
echo "Best of 3: with checkpoints / without = $(python3 -c "print(f'{$best_ckpt/$best_plain:.3f}')")"

# Checkpoint duration under backpressure: aligned vs unaligned.
echo
echo "| backpressure (slow sink) | checkpoints | median duration ms | max duration ms |"
echo "|---|---|---|---|"
for a in aligned unaligned; do
  rm -rf "$BENCH_STATE"
  log=$(mktemp)
  ALIGNMENT=$a $weir run --no-progress --log-level info scripts/bench/backpressure.yaml 2>"$log" &
  pid=$!
  sleep 8
  kill -TERM $pid; wait $pid || true
  durations=$(sed -n 's/.*Checkpoint complete.*duration_ms=\([0-9]*\).*/\1/p' "$log" | sort -n)
  n=$(wc -l <<<"$durations")
  median=$(sed -n "$(( (n + 1) / 2 ))p" <<<"$durations")
  echo "| $a | $n | $median | $(tail -1 <<<"$durations") |"
  rm -f "$log"
done

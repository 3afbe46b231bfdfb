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

#!/usr/bin/env bash
# What `filter` and `map` cost (issue 16): file -> filter (50 % pass) -> map
# (one computed field) -> keyed count + sum (scripts/bench/transform.yaml)
# against the plain keyed count + sum (scripts/bench/count.yaml), p=1, memory
# state, blackhole sink, alternated RUNS times in one session so machine
# noise hits both alike. Rows per CPU-second counts the rows read (user +
# system CPU of the weir process, GNU time). Prints a Markdown table and the
# ratio of the best runs (goal: at least 0.8).
#
#   scripts/bench-transform.sh                       # 10 M rows (generated once into target/bench/)
#   BENCH_ROWS=2000000 RUNS=3 scripts/bench-transform.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench/input.sh
bench_input 10000000
runs=${RUNS:-3}
command -v /usr/bin/time >/dev/null || { echo "bench-transform.sh needs GNU time: apt-get install time" >&2; exit 1; }

# One run of a job; prints "records/s cpu_seconds".
run() {
  local out rate cpu
  out=$( { /usr/bin/time -f 'cpu_s=%U+%S' $weir run --no-progress --log-level warn -p 1 "scripts/bench/$1.yaml" ; } 2>&1 )
  rate=$(sed -n 's/^Finished in [0-9.]*s, \([0-9]*\) records\/s.*/\1/p' <<<"$out")
  cpu=$(sed -n 's/^cpu_s=//p' <<<"$out" | bc -l)
  [ -n "$rate" ] || { echo "run failed ($1):" >&2; echo "$out" >&2; exit 1; }
  echo "$rate $cpu"
}

echo "| p=1, $rows rows | run | records/s | CPU s | rows per CPU-second |"
echo "|---|---|---|---|---|"
best_count=0; best_transform=0
for i in $(seq "$runs"); do
  for job in count transform; do
    read -r rate cpu <<<"$(run $job)"
    per_cpu=$(printf '%.0f' "$(bc -l <<<"$rows / $cpu")")
    echo "| $job | $i | $rate | $cpu | $per_cpu |"
    if [ "$job" = count ] && [ "$per_cpu" -gt "$best_count" ]; then best_count=$per_cpu; fi
    if [ "$job" = transform ] && [ "$per_cpu" -gt "$best_transform" ]; then best_transform=$per_cpu; fi
  done
done
echo
echo "Best rows per CPU-second: count $best_count, filter + map + count $best_transform, ratio $(printf '%.3f' "$(bc -l <<<"$best_transform / $best_count")")."

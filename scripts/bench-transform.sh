#!/usr/bin/env bash
# What `filter` and `map` cost (issue 16): file -> filter (50 % pass) -> map
# (one computed field) -> keyed count + sum (scripts/bench/transform.yaml)
# against the plain keyed count + sum (scripts/bench/count.yaml), p=1, memory
# state, blackhole sink, alternated RUNS times in one session so machine
# noise hits both alike. Rows per CPU-second counts the rows read (user +
# system CPU of the weir process, GNU time). Prints a Markdown table and the
# ratio of the best runs (goal: at least 0.8).
#
# BASE_WEIR=path/to/another/weir adds that binary's runs of both jobs,
# alternated with this tree's (new vs base in one session).
#
#   scripts/bench-transform.sh                       # 10 M rows (generated once into target/bench/)
#   BENCH_ROWS=2000000 RUNS=3 scripts/bench-transform.sh
#   BASE_WEIR=/tmp/weir-main BENCH_ROWS=1000000 scripts/bench-transform.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench/input.sh
bench_input 10000000
runs=${RUNS:-3}
command -v /usr/bin/time >/dev/null || { echo "bench-transform.sh needs GNU time: apt-get install time" >&2; exit 1; }
builds=(new)
[ -n "${BASE_WEIR:-}" ] && builds+=(base)

# One run of a job with a build; prints "records/s cpu_seconds".
run() {
  local bin=$weir out rate cpu
  [ "$1" = base ] && bin=$BASE_WEIR
  out=$( { /usr/bin/time -f 'cpu_s=%U+%S' "$bin" run --no-progress --log-level warn -p 1 "scripts/bench/$2.yaml" ; } 2>&1 )
  rate=$(sed -n 's/^Finished in [0-9.]*s, \([0-9]*\) records\/s.*/\1/p' <<<"$out")
  cpu=$(sed -n 's/^cpu_s=//p' <<<"$out" | bc -l)
  [ -n "$rate" ] || { echo "run failed ($1 $2):" >&2; echo "$out" >&2; exit 1; }
  echo "$rate $cpu"
}

echo "| p=1, $rows rows | build | run | records/s | CPU s | rows per CPU-second |"
echo "|---|---|---|---|---|---|"
declare -A best
for i in $(seq "$runs"); do
  for build in "${builds[@]}"; do
    for job in count transform; do
      read -r rate cpu <<<"$(run "$build" "$job")"
      per_cpu=$(printf '%.0f' "$(bc -l <<<"$rows / $cpu")")
      echo "| $job | $build | $i | $rate | $cpu | $per_cpu |"
      if [ "$per_cpu" -gt "${best[$build.$job]:-0}" ]; then best[$build.$job]=$per_cpu; fi
    done
  done
done
echo
for build in "${builds[@]}"; do
  c=${best[$build.count]} t=${best[$build.transform]}
  echo "Best rows per CPU-second ($build): count $c, filter + map + count $t, ratio $(printf '%.3f' "$(bc -l <<<"$t / $c")")."
done

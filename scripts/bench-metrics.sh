#!/usr/bin/env bash
# What the metrics endpoint costs: keyed count + sum (scripts/bench/count.yaml,
# memory state, blackhole sink, p=1) with `--metrics-addr` and a client
# scraping /metrics every SCRAPE seconds, against the same job without the
# endpoint, alternated RUNS times in one session so machine noise hits both
# alike. Prints a Markdown table: records/s of the whole run and records per
# CPU-second (user + system of the weir process, from GNU time), best of the
# runs, and the ratio on/off.
#
#   scripts/bench-metrics.sh                 # 10 M rows (generated once into target/bench/)
#   BENCH_ROWS=5000000 RUNS=3 SCRAPE=1 scripts/bench-metrics.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench/input.sh
bench_input 10000000
runs=${RUNS:-3}
scrape=${SCRAPE:-1}
command -v /usr/bin/time >/dev/null || { echo "bench-metrics.sh needs GNU time: apt-get install time" >&2; exit 1; }
command -v curl >/dev/null || { echo "bench-metrics.sh needs curl" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# One run; prints "records/s cpu_seconds scrapes".
run() {
  local out scraper="" scrapes=0 count
  count=$(mktemp)
  if [ "$1" = on ]; then
    ( n=0; while sleep "$scrape"; do curl -s -o /dev/null "http://127.0.0.1:$port/metrics" && n=$((n + 1)) && echo $n >"$count"; done ) &
    scraper=$!
    out=$( { /usr/bin/time -f 'cpu_s=%U+%S' $weir run --no-progress --log-level warn -p 1 --metrics-addr "127.0.0.1:$port" scripts/bench/count.yaml ; } 2>&1 )
    kill "$scraper" 2>/dev/null; wait "$scraper" 2>/dev/null || true
    scrapes=$(cat "$count"); scrapes=${scrapes:-0}
  else
    out=$( { /usr/bin/time -f 'cpu_s=%U+%S' $weir run --no-progress --log-level warn -p 1 scripts/bench/count.yaml ; } 2>&1 )
  fi
  rm -f "$count"
  local rate cpu
  rate=$(sed -n 's/^Finished in [0-9.]*s, \([0-9]*\) records\/s.*/\1/p' <<<"$out")
  cpu=$(sed -n 's/^cpu_s=//p' <<<"$out" | bc -l)
  [ -n "$rate" ] || { echo "run failed (metrics $1):" >&2; echo "$out" >&2; exit 1; }
  echo "$rate $cpu $scrapes"
}

echo "| keyed count, p=1, $rows rows | run | records/s | CPU s | records per CPU-second | scrapes |"
echo "|---|---|---|---|---|---|"
best_off=0; best_on=0; best_off_cpu=0; best_on_cpu=0
for i in $(seq "$runs"); do
  for m in off on; do
    read -r rate cpu scrapes <<<"$(run $m)"
    per_cpu=$(printf '%.0f' "$(bc -l <<<"$rows / $cpu")")
    echo "| metrics $m | $i | $rate | $cpu | $per_cpu | $([ $m = on ] && echo "$scrapes" || echo -) |"
    if [ $m = off ]; then
      [ "$rate" -gt "$best_off" ] && best_off=$rate
      [ "$per_cpu" -gt "$best_off_cpu" ] && best_off_cpu=$per_cpu
    else
      [ "$rate" -gt "$best_on" ] && best_on=$rate
      [ "$per_cpu" -gt "$best_on_cpu" ] && best_on_cpu=$per_cpu
    fi
  done
done
echo
echo "| best of $runs | records/s | records per CPU-second |"
echo "|---|---|---|"
echo "| metrics off | $best_off | $best_off_cpu |"
echo "| metrics on, scraped every ${scrape}s | $best_on | $best_on_cpu |"
echo "| ratio on/off | $(printf '%.3f' "$(bc -l <<<"$best_on / $best_off")") | $(printf '%.3f' "$(bc -l <<<"$best_on_cpu / $best_off_cpu")") |"

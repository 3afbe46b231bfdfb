#!/usr/bin/env bash
# Kafka throughput: file -> Kafka (at_least_once vs exactly_once) and
# Kafka -> keyed count -> blackhole, at parallelism 1 and 2. Prints records/s
# and the CPU seconds the broker used during each run (it shares the cores).
#
#   scripts/bench-kafka.sh                      # 1 M rows, a fresh local broker
#   BENCH_ROWS=200000 KAFKA_BOOTSTRAP=host:port scripts/bench-kafka.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench/input.sh
bench_input 1000000
export BENCH_STATE=$PWD/target/bench/kafka-state

bench_broker

# CPU seconds (user + system) of the broker so far.
broker_cpu() {
  if [ -n "$BROKER_PID" ]; then
    awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f", ($14 + $15) / hz}' "/proc/$BROKER_PID/stat"
  else
    echo "?"
  fi
}

rate_of() { sed -n 's/^Finished in [0-9.]*s, \([0-9]*\) records\/s.*/\1/p' <<<"$1"; }
secs_of() { sed -n 's/^Finished in \([0-9.]*\)s.*/\1/p' <<<"$1"; }

echo "| job | parallelism | records | seconds | records/s | broker CPU s |"
echo "|---|---|---|---|---|---|"
for p in 1 2; do
  for delivery in at_least_once exactly_once; do
    export DELIVERY=$delivery BENCH_TOPIC=bench-$delivery-p$p-$$
    rm -rf "$BENCH_STATE"
    before=$(broker_cpu)
    out=$($weir run --no-progress --log-level warn -p "$p" scripts/bench/kafka_produce.yaml 2>&1) || { echo "$out" >&2; exit 1; }
    after=$(broker_cpu)
    cpu=$([ "$before" = "?" ] && echo "?" || python3 -c "print(f'{$after - $before:.1f}')")
    echo "| file -> kafka $delivery | $p | $rows | $(secs_of "$out") | $(rate_of "$out") | $cpu |"
  done
  export BENCH_TOPIC=bench-at_least_once-p$p-$$
  before=$(broker_cpu)
  out=$($weir run --no-progress --log-level warn -p "$p" scripts/bench/kafka_count.yaml 2>&1) || { echo "$out" >&2; exit 1; }
  after=$(broker_cpu)
  cpu=$([ "$before" = "?" ] && echo "?" || python3 -c "print(f'{$after - $before:.1f}')")
  echo "| kafka -> keyed count -> blackhole | $p | $rows | $(secs_of "$out") | $(rate_of "$out") | $cpu |"
done
echo
echo "Broker: $KAFKA_BOOTSTRAP ($([ -n "$BROKER_PID" ] && echo "noida-db 0.2.3 with scripts/noida-patches, pid $BROKER_PID" || echo "external")), $(nproc) cores, $(uname -m)."

#!/usr/bin/env bash
# Throughput and latency of 1, 2 and 3 weir instances on this machine
# (issue 15, docs/scaling.md "Measured"): Kafka (6 partitions) -> dedup ->
# running count per user -> Kafka exactly-once, each N with its own
# repartition topics. Prints a table (scripts/bench/cluster.py says how
# each column is measured). Needs python3; the Kafka client goes into a venv
# of its own (~/.cache/weir/bench-venv, once).
#
#   scripts/bench-cluster.sh                        # 500 K rows, a fresh local broker
#   BENCH_ROWS=200000 BENCH_INSTANCES_LIST="1 2" KAFKA_BOOTSTRAP=host:port scripts/bench-cluster.sh
#   BASE_WEIR=/tmp/weir-base scripts/bench-cluster.sh  # each job with that binary too, alternated
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench/input.sh
bench_input 500000

venv=$HOME/.cache/weir/bench-venv
source scripts/lib/venv.sh
pip_tool_install "$venv" confluent-kafka 2.16.1 bench-cluster.sh

bench_broker
export WEIR=${WEIR:-$weir}
mkdir -p target/bench/cluster
"$venv/bin/python" scripts/bench/cluster.py

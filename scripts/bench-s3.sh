#!/usr/bin/env bash
# What checkpoints on S3 cost, in one run: dedup over BENCH_ROWS distinct ids
# (default 2 M) with RocksDB state and 1 s incremental checkpoints, with the
# checkpoints in the state directory vs on a local S3 server
# (scripts/s3-server.sh, s3s-fs); then a restore from S3 with and without the
# local copy (`--restore latest`, the state directory deleted for the latter).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench/input.sh
bench_input 2000000
command -v /usr/bin/time >/dev/null || { echo "bench-s3.sh needs GNU time: apt-get install time" >&2; exit 1; }
export BENCH_STATE=$PWD/target/bench/state-s3
s3_dir=$(mktemp -d "${TMPDIR:-/tmp}/weir-s3-bench.XXXXXX")
trap 'scripts/s3-server.sh stop --data-dir "$s3_dir"; rm -rf "$s3_dir"' EXIT
eval "$(scripts/s3-server.sh start --data-dir "$s3_dir")"
url=s3://$WEIR_S3_BUCKET/bench-$$

rate_of() { sed -n 's/^Finished in [0-9.]*s, \([0-9]*\) records\/s.*/\1/p' <<<"$1"; }
echo "| checkpoints in | records/s | checkpoints | median duration ms | max ms |"
echo "|---|---|---|---|---|"
for where in local s3; do
  rm -rf "$BENCH_STATE"
  set_storage=()
  [ "$where" = s3 ] && set_storage=(--set "checkpoint.storage=$url")
  log=$(mktemp)
  out=$(CHECKPOINT_INTERVAL=1s $weir run --no-progress --log-level info "${set_storage[@]}" scripts/bench/dedup_rocks.yaml 2>"$log")
  out="$out
$(cat "$log")"
  d=$(grep 'Checkpoint complete' "$log" | sed -n 's/.* duration_ms=\([0-9]*\).*/\1/p' | sort -n)
  n=$(grep -c . <<<"$d" || true)
  echo "| $where | $(rate_of "$out") | $n | $(sed -n "$(( (n + 1) / 2 ))p" <<<"$d") | $(tail -1 <<<"$d") |"
  rm -f "$log"
done
echo
echo "| restore from S3 ($rows keys) | whole restore run (s) |"
echo "|---|---|"
t() { /usr/bin/time -f 'wall_s=%e' "$@" 2>&1 >/dev/null | sed -n 's/^wall_s=//p'; }
echo "| local copy matches (local recovery) | $(t $weir run --no-progress --log-level warn --set "checkpoint.storage=$url" scripts/bench/dedup_rocks.yaml --restore latest) |"
rm -rf "$BENCH_STATE"
echo "| state directory deleted (download) | $(t $weir run --no-progress --log-level warn --set "checkpoint.storage=$url" scripts/bench/dedup_rocks.yaml --restore latest) |"

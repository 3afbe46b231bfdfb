#!/usr/bin/env bash
# What checkpoints on S3 cost, in one run: dedup over BENCH_ROWS distinct ids
# (default 2 M) with RocksDB state and 1 s incremental checkpoints, with the
# checkpoints in the state directory vs on a local S3 server
# (scripts/s3-server.sh, s3s-fs); then a restore from S3 with and without the
# local copy (`--restore latest`, the state directory deleted for the latter).
#
# BENCH_S3_PARTS=restore skips the throughput comparison: one run with a
# single (final) checkpoint on S3, then the two restores, e.g.
#   BENCH_ROWS=10000000 BENCH_S3_PARTS=restore scripts/bench-s3.sh
# A restore's time is given twice: until `Pipeline started.` (the restore
# itself: list, validate, download or reuse, rebuild the DB) and the whole
# run (which adds the final checkpoint of the restored DB and the exit).
set -euo pipefail
# The timings below read each "Checkpoint complete." line.
export WEIR_CHECKPOINT_LOG=each
cd "$(dirname "$0")/.."
source scripts/bench/input.sh
bench_input 2000000
command -v /usr/bin/time >/dev/null || { echo "bench-s3.sh needs GNU time: apt-get install time" >&2; exit 1; }
export BENCH_STATE=$PWD/target/bench/state-s3
s3_dir=$(mktemp -d "${TMPDIR:-/tmp}/weir-s3-bench.XXXXXX")
trap 'scripts/s3-server.sh stop --data-dir "$s3_dir"; rm -rf "$s3_dir"' EXIT
eval "$(scripts/s3-server.sh start --data-dir "$s3_dir")"
url=s3://$WEIR_S3_BUCKET/bench-$$

parts=${BENCH_S3_PARTS:-throughput restore}
rate_of() { sed -n 's/^Finished in [0-9.]*s, \([0-9]*\) records\/s.*/\1/p' <<<"$1"; }
if [[ " $parts " != *" throughput "* ]]; then
  rm -rf "$BENCH_STATE"
  echo "Writing one checkpoint of $rows keys to $url ..." >&2
  $weir run --no-progress --log-level warn --set "checkpoint.storage=$url" scripts/bench/dedup_rocks.yaml >/dev/null
else
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
fi
echo
objects=$(python3 - "$s3_dir/data/$WEIR_S3_BUCKET/bench-$$" <<'PY'
import os, sys
n = b = 0
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        n += 1; b += os.path.getsize(os.path.join(d, f))
print(f"{n} objects, {b / 1e6:.1f} MB")
PY
)
echo "| restore from S3 ($rows keys; the store holds $objects) | until \`Pipeline started.\` (s) | whole restore run (s) |"
echo "|---|---|---|"
# Milliseconds from the start of the command to `Pipeline started.`, and the whole run.
restore() {
  local log t0 t1 started
  log=$(mktemp)
  t0=$(date +%s%N)
  $weir run --no-progress --log-level info --set "checkpoint.storage=$url" scripts/bench/dedup_rocks.yaml --restore latest \
    >/dev/null 2> >(while IFS= read -r line; do printf '%s %s\n' "$(date +%s%N)" "$line"; done >"$log")
  t1=$(date +%s%N)
  sleep 0.2
  started=$(grep -m1 'Pipeline started.' "$log" | cut -d' ' -f1)
  grep -q 'Restoring from checkpoint' "$log" || { echo "no restore in the log:" >&2; cat "$log" >&2; exit 1; }
  grep -E 'local recovery|Downloaded the checkpoint' "$log" | sed 's/^[0-9]* /  /' >&2
  awk -v a="$t0" -v s="$started" -v b="$t1" 'BEGIN { printf "%.2f | %.2f", (s - a) / 1e9, (b - a) / 1e9 }'
  rm -f "$log"
}
echo "| local copy matches (local recovery) | $(restore) |"
rm -rf "$BENCH_STATE"
echo "| state directory deleted (download) | $(restore) |"

#!/usr/bin/env bash
# How promptly a bounded run ends (issue 13: from the end of input to exit
# within 50 ms plus the final checkpoint's own duration). Runs the keyed
# count+sum with 1 s aligned checkpoints, memory and RocksDB, RUNS times each
# on BENCH_ROWS rows (default 200 K), and prints per job the medians of:
#
#   wall, cpu        the whole process, launch to exit (cpu: GNU time's user + system)
#   drain            the source read its last byte -> every task processed
#                    all its input ("Input exhausted"): work still queued in
#                    the channels and the aggregate's end-of-input output
#   wait             "Input exhausted" -> the final checkpoint's trigger (a
#                    periodic checkpoint still running is waited for); 0 when
#                    the running one covers all input and became the final
#                    one (`adopted`: how many runs; its duration then began
#                    before the end, so `end - final` can be below 0)
#   final            the final checkpoint's duration_ms
#   teardown         "Final checkpoint complete." -> the process has exited
#   end - final      "Input exhausted" -> exit, minus `final` (the goal: <= 50)
#
# Timestamps come from the DEBUG log (UTC, microseconds) and bash's
# EPOCHREALTIME after the process is reaped.
#
#   scripts/bench/ending.sh                # 200 K rows, 5 runs per job
#   RUNS=9 BENCH_ROWS=1000000 scripts/bench/ending.sh
#   WEIR_BIN=/tmp/old-weir scripts/bench/ending.sh   # another build (drain
#       needs the DEBUG line "Source read to the end of its input.": "-" without)
set -euo pipefail
# The timings below read each "Checkpoint complete." line.
export WEIR_CHECKPOINT_LOG=each
cd "$(dirname "$0")/../.."
source scripts/bench/input.sh
bench_input 200000
command -v /usr/bin/time >/dev/null || { echo "ending.sh needs GNU time: apt-get install time" >&2; exit 1; }
runs=${RUNS:-5}
weir=${WEIR_BIN:-$weir}
export BENCH_STATE=$PWD/target/bench/state-ending

# Seconds since midnight UTC of a log line's timestamp (2026-12-01T21:49:26.156176Z).
tod() { sed -n 's/^[0-9-]*T\([0-9]*\):\([0-9]*\):\([0-9.]*\)Z.*/\1 \2 \3/p' | awk '{printf "%.6f\n", $1*3600 + $2*60 + $3}'; }
median() { sort -n | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "-"}'; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.0f\n", (b - a) * 1000}'; }

echo "| job ($rows rows, 1 s aligned checkpoints) | runs | adopted | wall ms | cpu ms | drain ms | wait ms | final ms | teardown ms | end - final ms (goal <= 50) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for job in count_checkpointed count_users_rocks; do
  declare -a wall=() cpu=() drain=() wait=() final=() teardown=() over=()
  adopted=0
  for _ in $(seq "$runs"); do
    rm -rf "$BENCH_STATE"
    log=$(mktemp)
    launched=$EPOCHREALTIME
    CHECKPOINT_INTERVAL=1s /usr/bin/time -f 'cpu_s=%U %S' -o "$log.time" \
      $weir run --no-progress --log-level debug scripts/bench/$job.yaml 2>"$log"
    now=$EPOCHREALTIME
    exited=$(awk -v t="${now/,/.}" 'BEGIN {printf "%.6f\n", t % 86400}')
    src_end=$( (grep 'Source read to the end of its input' "$log" || true) | tail -1 | tod)
    exhausted=$(grep 'Input exhausted' "$log" | tod)
    id=$(sed -n 's/.*Final checkpoint complete. checkpoint=\([0-9]*\).*/\1/p' "$log")
    triggered=$(grep "Checkpoint triggered. checkpoint=$id\$" "$log" | tod)
    completed=$(grep 'Final checkpoint complete' "$log" | tod)
    dur=$(sed -n "s/.*Checkpoint complete. checkpoint=$id duration_ms=\([0-9]*\).*/\1/p" "$log")
    started=$(awk -v t="${launched/,/.}" 'BEGIN {printf "%.6f\n", t % 86400}')
    [ -n "$exhausted" ] && [ -n "$dur" ] || { echo "run failed: $job" >&2; tail -20 "$log" >&2; exit 1; }
    wall+=("$(ms "$started" "$exited")")
    cpu+=("$(awk '{printf "%.0f\n", ($1 + $2) * 1000}' < <(sed -n 's/^cpu_s=//p' "$log.time"))")
    [ -z "$src_end" ] || drain+=("$(ms "$src_end" "$exhausted")")
    w=$(ms "$exhausted" "$triggered")
    if [ "$w" -lt 0 ]; then adopted=$((adopted + 1)); w=0; fi
    wait+=("$w")
    final+=("$dur")
    teardown+=("$(ms "$completed" "$exited")")
    over+=("$(( $(ms "$exhausted" "$exited") - dur ))")
    rm -f "$log" "$log.time"
  done
  m() { [ $# -gt 0 ] && printf '%s\n' "$@" | median || echo -; }
  echo "| $job | $runs | $adopted | $(m "${wall[@]}") | $(m "${cpu[@]}") | $(m ${drain[@]+"${drain[@]}"}) | $(m "${wait[@]}") | $(m "${final[@]}") | $(m "${teardown[@]}") | $(m "${over[@]}") (max $(printf '%s\n' "${over[@]}" | sort -n | tail -1)) |"
done
rm -rf "$BENCH_STATE"

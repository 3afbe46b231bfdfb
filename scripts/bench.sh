#!/usr/bin/env bash
# Throughput benchmark: keyed count+sum, 10 s tumbling count and dedup over a
# JSON-lines file, memory state, blackhole sink, at parallelism 1 and 2; then
# the RocksDB backend: keyed count and dedup over 10 M distinct ids, checkpoint
# size and duration (incremental vs full) and restore time.
# Prints records/s and peak RSS per run, as Markdown tables on stdout.
#
#   scripts/bench.sh            # 10 M rows (generated once into target/bench/)
#   BENCH_ROWS=1000000 scripts/bench.sh
#   BENCH_ONLY=rocksdb scripts/bench.sh   # only the RocksDB part
#   BENCH_ONLY=cpu BENCH_BASELINE=/tmp/old-weir scripts/bench.sh
#       # rows per CPU-second of the issue's jobs (1 s aligned checkpoints),
#       # this build and an older binary alternated in the same run;
#       # BENCH_JOBS picks jobs (scripts/bench/NAME.yaml), BENCH_P="1 2"
#       # parallelisms, BENCH_REPEAT=3 runs each pair three times (CPU
#       # seconds depend on how many 1 s checkpoints a run takes, so on
#       # the machine's load: compare the best or the median of a few)
#   BENCH_ONLY=cpu BENCH_JOBS="distinct distinct_rocks approx_distinct" scripts/bench.sh
#       # count_distinct (exact: memory, RocksDB; approximate) over ONE key
#       # holding BENCH_ROWS distinct values, datagen input of BENCH_ROWS rows
set -euo pipefail
# The timings below read each "Checkpoint complete." line.
export WEIR_CHECKPOINT_LOG=each
cd "$(dirname "$0")/.."
source scripts/bench/input.sh
bench_input 10000000
command -v /usr/bin/time >/dev/null || { echo "bench.sh needs GNU time: apt-get install time" >&2; exit 1; }

bytes=$(cat "$BENCH_DATA"/part-* | wc -c)
export BENCH_STATE=$PWD/target/bench/state

# The `Finished in 3.21s, 3115264 records/s: ...` summary of a run's output.
rate_of() { sed -n 's/^Finished in [0-9.]*s, \([0-9]*\) records\/s.*/\1/p' <<<"$1"; }
secs_of() { sed -n 's/^Finished in \([0-9.]*\)s.*/\1/p' <<<"$1"; }

rocksdb_bench() {
  local restore_note=""
  echo "| job (rocksdb, no checkpoints) | parallelism | records | seconds | records/s | peak RSS (MiB) |"
  echo "|---|---|---|---|---|---|"
  for job in count_rocks dedup_rocks; do
    for p in 1 2; do
      rm -rf "$BENCH_STATE"
      out=$( { /usr/bin/time -f 'rss_kb=%M' $weir run --no-progress --log-level warn -p "$p" "scripts/bench/$job.yaml" ; } 2>&1 )
      rate=$(rate_of "$out"); rss=$(sed -n 's/^rss_kb=//p' <<<"$out")
      [ -n "$rate" ] || { echo "run failed: $job p=$p" >&2; echo "$out" >&2; exit 1; }
      echo "| $job | $p | $rows | $(secs_of "$out") | $rate | $((rss / 1024)) |"
    done
  done
  echo
  echo "| dedup, rocksdb, 1 s checkpoints | parallelism | records/s | checkpoints | median ms | max ms | max pause ms | median bytes | final checkpoint bytes (new + reused) | peak RSS (MiB) |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for p in 1 2; do
    for inc in true false; do
      rm -rf "$BENCH_STATE"
      log=$(mktemp)
      out=$( { INCREMENTAL=$inc CHECKPOINT_INTERVAL=1s /usr/bin/time -f 'rss_kb=%M' $weir run --no-progress --log-level info -p "$p" scripts/bench/dedup_rocks.yaml 2>"$log" ; } 2>&1 )
      out="$out
$(cat "$log")"
      rate=$(rate_of "$out"); rss=$(sed -n 's/^rss_kb=//p' <<<"$out")
      [ -n "$rate" ] || { echo "run failed: dedup_rocks incremental=$inc p=$p" >&2; tail -20 "$log" >&2; exit 1; }
      lines=$(grep 'Checkpoint complete' "$log" || true)
      field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$lines"; }
      n=$(grep -c . <<<"$lines")
      med() { sort -n | sed -n "$(( (n + 1) / 2 ))p"; }
      last_bytes=$(field bytes | tail -1); last_reused=$(field reused_bytes | tail -1)
      name=$([ "$inc" = true ] && echo incremental || echo full)
      echo "| $name | $p | $rate | $n | $(field duration_ms | med) | $(field duration_ms | sort -n | tail -1) | $(field pause_ms | sort -n | tail -1) | $(field bytes | med) | $last_bytes + $last_reused | $((rss / 1024)) |"
      if [ "$inc" = true ]; then
        # Restore the final checkpoint (all 10 M keys) from the local checkpoint.
        rout=$( { /usr/bin/time -f 'wall_s=%e' $weir run --no-progress --log-level info -p "$p" scripts/bench/dedup_rocks.yaml --restore latest ; } 2>&1 )
        rebuilt=$(sed -n 's/.*Rebuilt the bundle.s RocksDB.* ms=\([0-9]*\).*/\1/p' <<<"$rout" | sort -n | tail -1)
        from=$(sed -n 's/.*Rebuilt the bundle.s RocksDB.* from="\{0,1\}\([a-z ]*\)"\{0,1\} .*/\1/p' <<<"$rout" | head -1)
        restore_note="$restore_note
| dedup p=$p | $from | $rebuilt | $(sed -n 's/^wall_s=//p' <<<"$rout") |"
      fi
      rm -f "$log"
    done
  done
  echo
  echo "| restore of $rows keys (final checkpoint) | rebuilt from | DB rebuild ms (max over bundles) | whole restore run, s |"
  echo "|---|---|---|---|"
  echo "${restore_note#?}"
}

# One run of `bin` on `job` at parallelism `p` (env from the caller): a
# table row with rows/s, rows per CPU-second (user + system of the whole
# process), peak RSS and the checkpoints' count and median duration.
cpu_row() {
  local bin=$1 job=$2 p=$3 log out rate u s rss n med
  rm -rf "$BENCH_STATE"
  log=$(mktemp)
  /usr/bin/time -o "$log.time" -f '%U %S %M' "$bin" run --no-progress --log-level info -p "$p" "scripts/bench/$job.yaml" 2>"$log" >/dev/null || true
  rate=$(sed -n 's/^Finished in [0-9.]*s, \([0-9]*\) records\/s.*/\1/p' "$log")
  [ -n "$rate" ] || { echo "run failed: $bin $job p=$p" >&2; tail -20 "$log" >&2; exit 1; }
  read -r u s rss <"$log.time"
  n=$(grep -c 'Checkpoint complete' "$log" || true)
  med=""
  [ "$n" -eq 0 ] || med=$(sed -n 's/.*Checkpoint complete.* duration_ms=\([0-9]*\).*/\1/p' "$log" | sort -n | sed -n "$(( (n + 1) / 2 ))p")
  echo "| $job | $(basename "$bin") | $p | $rate | $(python3 -c "print(int($rows / max($u + $s, 0.01)))") | $((rss / 1024)) | $n | ${med:--} |"
  rm -f "$log" "$log.time"
}

# The issue's per-core table: every job with 1 s aligned checkpoints.
cpu_bench() {
  echo "| job | binary | parallelism | rows/s | rows per CPU-s | peak RSS (MiB) | checkpoints | median checkpoint ms |"
  echo "|---|---|---|---|---|---|---|---|"
  for job in ${BENCH_JOBS:-passthrough count_checkpointed dedup_checkpointed tumbling_checkpointed count_users_rocks tumbling_rocks dedup_rocks}; do
    for p in ${BENCH_P:-1}; do
      for _ in $(seq 1 "${BENCH_REPEAT:-1}"); do
        for bin in $weir ${BENCH_BASELINE:-}; do
          CHECKPOINT_INTERVAL=1s cpu_row "$bin" "$job" "$p"
        done
      done
    done
  done
}

if [ "${BENCH_ONLY:-}" = cpu ]; then
  cpu_bench
  exit 0
fi

if [ "${BENCH_ONLY:-}" = rocksdb ]; then
  rocksdb_bench
  exit 0
fi

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

echo
rocksdb_bench

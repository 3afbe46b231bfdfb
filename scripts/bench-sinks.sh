#!/usr/bin/env bash
# What a sink costs (issue 29): the benchmark input (scripts/bench/gen.yaml,
# ~60-byte JSON rows) read at p=1 with 1 s aligned checkpoints into a
# blackhole (scripts/bench/passthrough.yaml), the JSON-lines file sink
# (sink_file.yaml) and the Parquet sink with zstd and snappy
# (sink_parquet.yaml), alternated RUNS times in one session. Prints rows per
# CPU-second of the whole process (user + system, GNU time) and of the
# sink's own work: rows / (CPU of the job - CPU of the blackhole job of the
# same round). Goal for Parquet: >= 2 M rows per CPU-second of its own work.
# Then the PostgreSQL sink (sink_postgres.yaml, exactly once, append and
# upsert by id into a fresh table) on a server of its own
# (scripts/postgres.sh): rows per CPU-second of weir's own work, and of
# weir's and the server's together (the server's CPU read from its
# postmaster's /proc stat, which counts the backends it reaped).
#
#   scripts/bench-sinks.sh                        # 10 M rows
#   BENCH_ROWS=2000000 RUNS=3 scripts/bench-sinks.sh
#   BENCH_SINKS=postgres BENCH_ROWS=1000000 scripts/bench-sinks.sh   # only PostgreSQL (or: files)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench/input.sh
bench_input 10000000
runs=${RUNS:-3}
command -v /usr/bin/time >/dev/null || { echo "bench-sinks.sh needs GNU time: apt-get install time" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/weir-bench-sinks.XXXXXX")
trap 'rm -rf "$work"' EXIT
sinks=${BENCH_SINKS:-files postgres}

# One run; prints its CPU seconds.
run() {
  local job=$1 compression=${2:-zstd} out
  rm -rf "$work/state" "$work/out"
  out=$( { BENCH_STATE=$work/state BENCH_OUT=$work/out BENCH_COMPRESSION=$compression \
    /usr/bin/time -f 'cpu_s=%U+%S' "$weir" run --no-progress --log-level warn -p 1 "scripts/bench/$job.yaml"; } 2>&1 )
  grep -q '^Finished in' <<<"$out" || { echo "run failed ($job):" >&2; echo "$out" >&2; exit 1; }
  sed -n 's/^cpu_s=//p' <<<"$out" | bc -l
}

if [[ " $sinks " == *" files "* ]]; then
echo "| p=1, $rows rows, 1 s checkpoints | round | CPU s | rows per CPU-second | rows per CPU-second of the sink's own work |"
echo "|---|---|---|---|---|"
for i in $(seq "$runs"); do
  base=$(run passthrough)
  printf '| blackhole | %d | %.2f | %.0f | - |\n' "$i" "$base" "$(bc -l <<<"$rows / $base")"
  for job in sink_file "sink_parquet zstd" "sink_parquet snappy"; do
    cpu=$(run $job)
    own=$(bc -l <<<"$cpu - $base")
    per_own=$( (( $(bc <<<"$own > 0") )) && printf '%.0f' "$(bc -l <<<"$rows / $own")" || echo "(within noise)")
    printf '| %s | %d | %.2f | %.0f | %s |\n' "${job/sink_/}" "$i" "$cpu" "$(bc -l <<<"$rows / $cpu")" "$per_own"
  done
done
fi

[[ " $sinks " == *" postgres "* ]] || exit 0
pg=$work/pg
chmod 755 "$work"   # the server runs as the postgres user
eval "$(scripts/postgres.sh start --data-dir "$pg")"
export WEIR_PG_URL PGPASSWORD
trap 'scripts/postgres.sh stop --data-dir "$pg"; rm -rf "$work"' EXIT
postmaster=$(head -1 "$pg/cluster/postmaster.pid")
tck=$(getconf CLK_TCK)
# CPU seconds of the server so far: its own and its reaped backends'.
server_cpu() { awk -v t="$tck" '{ print ($14 + $15 + $16 + $17) / t }' "/proc/$postmaster/stat"; }
psql_q() { scripts/postgres.sh psql --data-dir "$pg" -- -X -q -tA -c "$1"; }
echo
echo "| PostgreSQL, p=1, $rows rows, 1 s checkpoints, exactly once | round | weir CPU s | server CPU s | rows per CPU-second of weir's own work | rows per CPU-second, weir's own + server |"
echo "|---|---|---|---|---|---|"
for i in $(seq "$runs"); do
  base=$(run passthrough)
  for mode in append upsert; do
    pk=$([ "$mode" = upsert ] && echo ", PRIMARY KEY (id)" || true)
    psql_q "DROP TABLE IF EXISTS bench_rows; CREATE TABLE bench_rows (id bigint NOT NULL, \"user\" text, amount bigint, ts bigint$pk)"
    before=$(server_cpu)
    key=$([ "$mode" = upsert ] && echo "[id]" || echo null)
    cpu=$(BENCH_PG_MODE=$mode BENCH_PG_KEY=$key run sink_postgres)
    server=$(bc -l <<<"$(server_cpu) - $before")
    n=$(psql_q "SELECT count(*) FROM bench_rows")
    [ "$n" = "$rows" ] || { echo "bench_rows holds $n rows, want $rows" >&2; exit 1; }
    own=$(bc -l <<<"$cpu - $base")
    per_own=$( (( $(bc <<<"$own > 0") )) && printf '%.0f' "$(bc -l <<<"$rows / $own")" || echo "(within noise)")
    printf '| %s | %d | %.2f | %.2f | %s | %.0f |\n' "$mode" "$i" "$cpu" "$server" "$per_own" "$(bc -l <<<"$rows / ($own + $server)")"
  done
done

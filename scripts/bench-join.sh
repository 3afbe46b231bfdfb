#!/usr/bin/env bash
# Join benchmark (issue 28): the interval, window and temporal joins
# (scripts/bench/join_*.yaml) over BENCH_ROWS orders and as many payments
# (100 K users), and the temporal join against a changelog of BENCH_ROWS / 10
# + 100 K versions of those users; each on memory and RocksDB state, into a
# blackhole. Then, unless BENCH_FLINK=0, the same three joins in Flink SQL
# (PyFlink 2.3.0 from PyPI, a mini-cluster at parallelism 1, installed into
# ~/.cache/weir/pyflink-venv on first use; needs java) over the same files,
# with the rows each system outputs compared on the first repeat.
#
# Prints a Markdown table: joined input rows (both sides) per CPU-second of
# the process (weir: its rusage; Flink: the JVM's and Python's CPU, and the
# same net of the mini-cluster's fixed cost, measured with an empty job).
# Both run alternately, BENCH_REPEAT times (default 1), in the same run.
#
#   scripts/bench-join.sh                       # 10 M rows a side
#   BENCH_ROWS=1000000 BENCH_REPEAT=3 scripts/bench-join.sh
#   BENCH_FLINK=0 BENCH_JOBS="interval" scripts/bench-join.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/venv.sh
rows=${BENCH_ROWS:-10000000}
repeat=${BENCH_REPEAT:-1}
jobs=${BENCH_JOBS:-interval window temporal}
users=$((rows / 10 + 100000))
command -v /usr/bin/time >/dev/null || { echo "bench-join.sh needs GNU time: apt-get install time" >&2; exit 1; }
cargo build --release -q
weir=$PWD/target/release/weir
export BENCH_ROWS=$rows BENCH_USERS=$users BENCH_JOIN_DATA=$PWD/target/bench/join-$rows
export BENCH_STATE=$PWD/target/bench/join-state
# The changelog spans the orders' event time: one version every
# rows / users milliseconds (at least 1).
export BENCH_USERS_INTERVAL=$(( rows / users > 0 ? rows / users : 1 ))ms
if [ ! -f "$BENCH_JOIN_DATA/.complete" ]; then
  rm -rf "$BENCH_JOIN_DATA"
  echo "Generating $rows orders, $rows payments and $users user versions into $BENCH_JOIN_DATA ..." >&2
  $weir run --no-progress --log-level warn scripts/bench/join_gen.yaml >/dev/null
  touch "$BENCH_JOIN_DATA/.complete"
fi

flink=${BENCH_FLINK:-1}
if [ "$flink" = 1 ]; then
  command -v java >/dev/null || { echo "bench-join.sh: Flink needs java (apt-get install default-jre-headless), or set BENCH_FLINK=0" >&2; exit 1; }
  venv=$HOME/.cache/weir/pyflink-venv
  pip_tool_install "$venv" apache-flink 2.3.0 bench-join.sh
  py=$venv/bin/python
fi

right_of() { [ "$1" = temporal ] && echo "$users" || echo "$rows"; }
# `cpu_s out`: weir's CPU seconds (user + sys) and its output rows.
weir_run() {
  local job=$1 backend=$2 out
  rm -rf "$BENCH_STATE"
  out=$( { /usr/bin/time -f 'cpu_s=%U+%S' "$weir" run --no-progress --log-level warn --set "state.backend=$backend" "scripts/bench/join_$job.yaml" ; } 2>&1 ) \
    || { echo "weir failed: $job $backend" >&2; echo "$out" >&2; exit 1; }
  local cpu sink
  cpu=$(sed -n 's/^cpu_s=//p' <<<"$out" | awk -F+ '{ print $1 + $2 }')
  sink=$(sed -n 's/.*, out \([0-9]*\) in.*/\1/p' <<<"$out")
  echo "$cpu $sink"
}
flink_cpu() { "$py" scripts/bench/flink_join.py "$1" "$BENCH_JOIN_DATA" 2>/dev/null | sed -n 's/^cpu_s=\([0-9.]*\).*/\1/p'; }
per_cpu() { awk -v n="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.0f", n / s; else print "-" }'; }

fixed=""
[ "$flink" = 1 ] && fixed=$(flink_cpu empty) && echo "Flink mini-cluster fixed cost: $fixed CPU-s (an empty job)" >&2
echo "| job | run | input rows | weir memory | weir RocksDB | Flink SQL | Flink SQL net of its fixed cost | weir memory / Flink net | output rows (weir, Flink) |"
echo "|---|---|---|---|---|---|---|---|---|"
for job in $jobs; do
  input=$((rows + $(right_of "$job")))
  for r in $(seq 1 "$repeat"); do
    read -r mem_cpu mem_out < <(weir_run "$job" memory)
    read -r rocks_cpu rocks_out < <(weir_run "$job" rocksdb)
    [ "$mem_out" = "$rocks_out" ] || { echo "$job: memory output $mem_out rows, RocksDB $rocks_out" >&2; exit 1; }
    flink_cell="-" net_cell="-" ratio="-" counted=""
    if [ "$flink" = 1 ]; then
      f=$(flink_cpu "$job")
      flink_cell=$(per_cpu "$input" "$f")
      net=$(awk -v f="$f" -v x="$fixed" 'BEGIN { printf "%.2f", f - x }')
      net_cell=$(per_cpu "$input" "$net")
      ratio=$(awk -v w="$(per_cpu "$input" "$mem_cpu")" -v n="$net_cell" 'BEGIN { if (n > 0) printf "%.1f", w / n; else print "-" }')
      if [ "$r" = 1 ]; then
        counted=$("$py" scripts/bench/flink_join.py "$job" "$BENCH_JOIN_DATA" --count 2>/dev/null | sed -n 's/^rows=//p')
        [ "$counted" = "$mem_out" ] || echo "warning: $job: weir output $mem_out rows, Flink $counted" >&2
      fi
    fi
    echo "| $job | $r | $input | $(per_cpu "$input" "$mem_cpu") | $(per_cpu "$input" "$rocks_cpu") | $flink_cell | $net_cell | $ratio | $mem_out${counted:+, $counted} |"
  done
done

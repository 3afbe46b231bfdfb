#!/usr/bin/env bash
# Run the chaos harness (tests/chaos) for longer than CI does and print its
# table: cases, kill points, faults injected by kind, records checked, lost,
# doubled, refusals, failures (each with its seed and reproduction dir).
#
#   scripts/chaos.sh --minutes 60            # as many cases as fit in an hour
#   scripts/chaos.sh --cases 200 --seed 5000 # cases with seeds 5000..5199
#   scripts/chaos.sh --cases 1 --seed 5123   # replay one case
#   scripts/chaos.sh --cluster --minutes 100 # cluster cases only
#
# Cluster cases (tests/chaos/cluster.rs) run after the single-process ones,
# for as long again (CHAOS_CLUSTER_SECONDS overrides), with their own table
# (instance kill points counted apart); `--cluster` runs only them. The
# broker and S3 server are those the environment names (KAFKA_BOOTSTRAP,
# AWS_ENDPOINT_URL), else the test ones, started here and stopped at the end
# (scripts/lib/services.sh).
#
# Failing cases keep their directory under $CHAOS_DIR (default
# ${TMPDIR:-/tmp}/weir-chaos/seed-N) with REPRODUCE.md and commands.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: $0 [--cases N | --minutes M] [--seed S] [--cluster]" >&2; exit 2; }
cases="" minutes="" seed="" filter=chaos
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) cases="${2:?}"; shift 2 ;;
    --minutes) minutes="${2:?}"; shift 2 ;;
    --seed) seed="${2:?}"; shift 2 ;;
    --cluster) filter=cluster_chaos; shift ;;
    *) usage ;;
  esac
done
if [ -n "$cases" ]; then
  export CHAOS_CASES="$cases" CHAOS_SECONDS="${CHAOS_SECONDS:-1000000000}"
fi
if [ -n "$minutes" ]; then
  export CHAOS_SECONDS=$((minutes * 60))
  export CHAOS_CLUSTER_SECONDS="${CHAOS_CLUSTER_SECONDS:-$((minutes * 60))}"
fi
if [ -n "$cases" ]; then
  export CHAOS_CLUSTER_CASES="${CHAOS_CLUSTER_CASES:-$cases}" CHAOS_CLUSTER_SECONDS="${CHAOS_CLUSTER_SECONDS:-1000000000}"
fi
# A fresh first seed each long run unless given (printed, and in the table).
export CHAOS_SEED="${seed:-$(( $(date +%s) % 1000000 * 1000 ))}"
source scripts/lib/services.sh
report=$(mktemp "${TMPDIR:-/tmp}/weir-chaos-report.XXXXXX")
cluster_report=$(mktemp "${TMPDIR:-/tmp}/weir-chaos-cluster-report.XXXXXX")
cleanups+=('rm -f "$report" "$cluster_report"')
export CHAOS_REPORT="$report" CHAOS_CLUSTER_REPORT="$cluster_report"
status=0
cargo test --release --test chaos -- --nocapture --test-threads 1 "$filter" || status=$?
echo
cat "$report" 2>/dev/null || true
echo
cat "$cluster_report" 2>/dev/null || true
exit $status

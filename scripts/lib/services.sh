# Sourced by scripts/test.sh and scripts/chaos.sh: start the test broker
# (scripts/kafka-broker.sh), the S3 test server (scripts/s3-server.sh) and
# PostgreSQL (scripts/postgres.sh),
# each on a fresh data directory, unless the environment already names one
# (KAFKA_BOOTSTRAP; AWS_ENDPOINT_URL or WEIR_S3_ENDPOINT; WEIR_PG_URL). Each is stopped
# and its directory removed when the sourcing script exits, whatever its
# outcome. Run from the repository's root.
cleanups=()
trap 'for c in "${cleanups[@]}"; do eval "$c"; done' EXIT
if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
  broker_dir=$(mktemp -d "${TMPDIR:-/tmp}/weir-kafka-test.XXXXXX")
  cleanups+=('scripts/kafka-broker.sh stop --data-dir "$broker_dir"; rm -rf "$broker_dir"')
  KAFKA_BOOTSTRAP=$(scripts/kafka-broker.sh start --data-dir "$broker_dir")
  # The chaos harness stops and continues this broker (outages).
  KAFKA_BROKER_DIR=$broker_dir
  export KAFKA_BOOTSTRAP KAFKA_BROKER_DIR
  echo "Test broker: $KAFKA_BOOTSTRAP (data in $broker_dir)"
fi
if [ -z "${AWS_ENDPOINT_URL:-}" ] && [ -z "${WEIR_S3_ENDPOINT:-}" ]; then
  s3_dir=$(mktemp -d "${TMPDIR:-/tmp}/weir-s3-test.XXXXXX")
  cleanups+=('scripts/s3-server.sh stop --data-dir "$s3_dir"; rm -rf "$s3_dir"')
  eval "$(scripts/s3-server.sh start --data-dir "$s3_dir")"
  echo "Test S3 server: $AWS_ENDPOINT_URL (data in $s3_dir)"
fi
if [ -z "${WEIR_PG_URL:-}" ]; then
  pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/weir-pg-test.XXXXXX")
  cleanups+=('scripts/postgres.sh stop --data-dir "$pg_dir"; rm -rf "$pg_dir"')
  eval "$(scripts/postgres.sh start --data-dir "$pg_dir")"
  export WEIR_PG_URL PGPASSWORD
  echo "Test PostgreSQL: $WEIR_PG_URL (data in $pg_dir)"
fi

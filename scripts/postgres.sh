#!/usr/bin/env bash
# A real PostgreSQL on 127.0.0.1 for tests and benchmarks: Debian's
# `postgresql` package (installed by scripts/install-deps.sh), a fresh
# cluster in a directory of its own, prepared transactions allowed
# (max_prepared_transactions=64, which the exactly-once sink needs).
#
#   scripts/postgres.sh start [--data-dir DIR] [--port PORT] [--max-prepared N]
#       Creates the cluster in DIR if it is not there (user `weir`,
#       password `weir-test`, database `weir`), starts the server, waits
#       until it accepts connections, and prints the line to `eval`:
#       export WEIR_PG_URL=postgres://weir@127.0.0.1:PORT/weir PGPASSWORD=weir-test
#       Without --port a free port is picked (kept in DIR for a restart).
#       --max-prepared: max_prepared_transactions (default 64; 0 refuses PREPARE).
#   scripts/postgres.sh stop [--data-dir DIR] [--kill]   # fast shutdown, or SIGKILL
#   scripts/postgres.sh status [--data-dir DIR]          # exit 0 if it runs
#   scripts/postgres.sh psql [--data-dir DIR] -- ARGS... # psql on that server
#
# The default directory is ${TMPDIR:-/tmp}/weir-postgres. The server runs
# as the `postgres` user when started by root (it refuses to run as root).
# fsync is off: these are throw-away test clusters (a killed server still
# loses nothing the kernel has; only a machine crash would).
set -euo pipefail

DATA_DIR=${TMPDIR:-/tmp}/weir-postgres
PORT=
KILL=false
MAX_PREPARED=64
PASSWORD=weir-test
START_TIMEOUT=${WEIR_PG_START_TIMEOUT:-60}

cmd=${1:-}
[ $# -gt 0 ] && shift
PSQL_ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --data-dir) DATA_DIR=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        --kill) KILL=true; shift ;;
        --max-prepared) MAX_PREPARED=$2; shift 2 ;;
        --) shift; PSQL_ARGS=("$@"); break ;;
        *) echo "postgres.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$BIN" ] || [ ! -x "$BIN/postgres" ]; then
    echo "postgres.sh: no PostgreSQL server in /usr/lib/postgresql (apt-get install postgresql, or run scripts/install-deps.sh)" >&2
    exit 1
fi
CLUSTER=$DATA_DIR/cluster

# Run as the server's owner: `postgres` when we are root.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

port_file() { echo "$DATA_DIR/port"; }

running() {
    [ -f "$CLUSTER/postmaster.pid" ] && as_owner "$BIN/pg_ctl" status -D "$CLUSTER" >/dev/null 2>&1
}

exports() {
    echo "export WEIR_PG_URL=postgres://weir@127.0.0.1:$1/weir PGPASSWORD=$PASSWORD"
}

case "$cmd" in
    start)
        mkdir -p "$DATA_DIR"
        if [ ! -f "$CLUSTER/PG_VERSION" ]; then
            if [ "$(id -u)" -eq 0 ]; then
                chmod 755 "$DATA_DIR"; chown postgres: "$DATA_DIR"
                runuser -u postgres -- test -x "$DATA_DIR" || {
                    echo "postgres.sh: the postgres user cannot reach $DATA_DIR (a parent directory is closed to it); use a directory it can reach" >&2
                    exit 1
                }
            fi
            pwfile=$DATA_DIR/pwfile
            echo "$PASSWORD" >"$pwfile"
            [ "$(id -u)" -eq 0 ] && chown postgres: "$pwfile"
            as_owner "$BIN/initdb" -D "$CLUSTER" -U weir --pwfile="$pwfile" --auth-host=scram-sha-256 --auth-local=trust \
                --no-sync -E UTF8 --locale=C.UTF-8 >"$DATA_DIR/initdb.log" 2>&1 \
                || { cat "$DATA_DIR/initdb.log" >&2; exit 1; }
            rm -f "$pwfile"
        fi
        if running; then
            exports "$(cat "$(port_file)")"
            exit 0
        fi
        [ -n "$PORT" ] || PORT=$(cat "$(port_file)" 2>/dev/null || free_port)
        echo "$PORT" >"$(port_file)"
        # setsid: a test's process-group signals never reach the server.
        as_owner setsid "$BIN/postgres" -D "$CLUSTER" -p "$PORT" -k "$DATA_DIR" \
            -c listen_addresses=127.0.0.1 -c max_prepared_transactions="$MAX_PREPARED" -c max_connections=100 \
            -c fsync=off -c full_page_writes=off -c shared_buffers=32MB \
            >>"$DATA_DIR/server.log" 2>&1 </dev/null &
        deadline=$((SECONDS + START_TIMEOUT))
        until as_owner "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; do
            if [ $SECONDS -ge $deadline ]; then
                echo "postgres.sh: PostgreSQL on 127.0.0.1:$PORT does not accept connections" >&2
                tail -30 "$DATA_DIR/server.log" >&2
                exit 1
            fi
            sleep 0.2
        done
        if ! as_owner "$BIN/psql" -h "$DATA_DIR" -p "$PORT" -U weir -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'weir'" | grep -q 1; then
            as_owner "$BIN/psql" -q -h "$DATA_DIR" -p "$PORT" -U weir -d postgres -c "CREATE DATABASE weir" >/dev/null
        fi
        exports "$PORT"
        ;;
    stop)
        if running; then
            if $KILL; then
                pid=$(head -1 "$CLUSTER/postmaster.pid")
                kill -9 "$pid" 2>/dev/null || true
                # Its children go with it once they see the postmaster gone.
                for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            else
                as_owner "$BIN/pg_ctl" stop -D "$CLUSTER" -m fast -w >/dev/null
            fi
        fi
        ;;
    status)
        running && exports "$(cat "$(port_file)")"
        ;;
    psql)
        as_owner "$BIN/psql" -h "$DATA_DIR" -p "$(cat "$(port_file)")" -U weir -d weir "${PSQL_ARGS[@]}"
        ;;
    *)
        echo "usage: scripts/postgres.sh start|stop|status|psql [--data-dir DIR] [--port PORT] [--kill] [-- PSQL ARGS]" >&2
        exit 2
        ;;
esac

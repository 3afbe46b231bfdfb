#!/usr/bin/env bash
# A real S3-compatible server on 127.0.0.1 for tests and benchmarks:
# s3s-fs (crates.io, pinned; an S3 server over a local directory, with
# conditional puts `If-None-Match: *`, multipart uploads and ListObjectsV2,
# which weir's checkpoint storage needs), built once with cargo and cached.
#
#   scripts/s3-server.sh start [--data-dir DIR] [--port PORT] [--bucket NAME]
#       Starts the server (installing it first if needed) on a fresh or
#       existing DIR, creates the bucket (default `weir`), waits until it
#       accepts connections, and prints the lines to `eval` on stdout:
#       export AWS_ENDPOINT_URL=http://127.0.0.1:PORT AWS_ACCESS_KEY_ID=...
#       Without --port a free port is picked.
#   scripts/s3-server.sh stop [--data-dir DIR]      # the data stays in DIR
#   scripts/s3-server.sh status [--data-dir DIR]    # exit 0 if it runs
#   scripts/s3-server.sh install                    # only build the server
#
# The binary lives in $WEIR_S3_ROOT/bin (default ~/.cache/weir/s3s-fs); the
# default data directory is ${TMPDIR:-/tmp}/weir-s3. The credentials are
# test ones, for this local server only.
set -euo pipefail

S3S_VERSION=0.14.1
ROOT=${WEIR_S3_ROOT:-$HOME/.cache/weir/s3s-fs}
DATA_DIR=${TMPDIR:-/tmp}/weir-s3
PORT=
BUCKET=weir
START_TIMEOUT=${WEIR_S3_START_TIMEOUT:-30}
ACCESS_KEY=weir-test
SECRET_KEY=weir-test-secret

cmd=${1:-}
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
    case "$1" in
        --data-dir) DATA_DIR=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        --bucket) BUCKET=$2; shift 2 ;;
        *) echo "s3-server.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

BIN=$ROOT/bin/s3s-fs

install() {
    if [ -x "$BIN" ] && [ "$(cat "$ROOT/version" 2>/dev/null)" = "$S3S_VERSION" ]; then
        return
    fi
    echo "s3-server.sh: building s3s-fs $S3S_VERSION into $ROOT (once)" >&2
    mkdir -p "$ROOT"
    cargo install --quiet --locked s3s-fs --version "$S3S_VERSION" --features binary --root "$ROOT" >&2
    echo "$S3S_VERSION" >"$ROOT/version"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

accepts() {
    python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()' "$1" 2>/dev/null
}

pid_file() { echo "$DATA_DIR/.weir-s3-pid"; }
port_file() { echo "$DATA_DIR/.weir-s3-port"; }

running() {
    [ -f "$(pid_file)" ] && kill -0 "$(cat "$(pid_file)")" 2>/dev/null
}

exports() {
    echo "export AWS_ENDPOINT_URL=http://127.0.0.1:$1 AWS_ACCESS_KEY_ID=$ACCESS_KEY AWS_SECRET_ACCESS_KEY=$SECRET_KEY AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true WEIR_S3_BUCKET=$BUCKET"
}

case "$cmd" in
    install)
        install
        ;;
    start)
        install
        mkdir -p "$DATA_DIR/data/$BUCKET"
        if running; then
            exports "$(cat "$(port_file)")"
            exit 0
        fi
        [ -n "$PORT" ] || PORT=$(free_port)
        # Its own log; setsid so that a test's process group signals never reach it.
        setsid "$BIN" --host 127.0.0.1 --port "$PORT" --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" "$DATA_DIR/data" \
            >"$DATA_DIR/server.log" 2>&1 </dev/null &
        echo $! >"$(pid_file)"
        echo "$PORT" >"$(port_file)"
        deadline=$((SECONDS + START_TIMEOUT))
        until accepts "$PORT"; do
            if ! running || [ $SECONDS -ge $deadline ]; then
                echo "s3-server.sh: s3s-fs on 127.0.0.1:$PORT does not accept connections" >&2
                cat "$DATA_DIR/server.log" >&2
                exit 1
            fi
            sleep 0.1
        done
        exports "$PORT"
        ;;
    stop)
        if running; then
            pid=$(cat "$(pid_file)")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$(pid_file)"
        ;;
    status)
        running && accepts "$(cat "$(port_file)")" && exports "$(cat "$(port_file)")"
        ;;
    *)
        echo "usage: scripts/s3-server.sh start|stop|status|install [--data-dir DIR] [--port PORT] [--bucket NAME]" >&2
        exit 2
        ;;
esac

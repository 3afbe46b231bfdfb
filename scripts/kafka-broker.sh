#!/usr/bin/env bash
# A single-node Kafka-compatible broker on 127.0.0.1 for tests, examples and
# benchmarks: the PyPI package noida-db (pinned), in a venv of its own.
#
#   scripts/kafka-broker.sh start [--data-dir DIR] [--port PORT]
#       Starts the broker (installing it first if needed), waits until it
#       accepts connections, and prints its bootstrap address on stdout
#       (127.0.0.1:PORT). Without --port a free port is picked. Data is kept
#       in memory and snapshotted to DIR: use a fresh DIR per test run.
#   scripts/kafka-broker.sh stop [--data-dir DIR]
#   scripts/kafka-broker.sh status [--data-dir DIR]   # exit 0 if it runs
#   scripts/kafka-broker.sh install                    # only create the venv
#
# The venv lives in $WEIR_BROKER_VENV (default ~/.cache/weir/noida-venv).
# The default data directory is ${TMPDIR:-/tmp}/weir-kafka.
#
# Quirk: on Debian 12 (glibc 2.36) the noida-db binary prints
# "weak version `GLIBC_2.39' not found" on every start; it is harmless and
# filtered out here.
set -euo pipefail

NOIDA_VERSION=0.2.3
VENV=${WEIR_BROKER_VENV:-$HOME/.cache/weir/noida-venv}
DATA_DIR=${TMPDIR:-/tmp}/weir-kafka
PORT=
START_TIMEOUT=${WEIR_BROKER_START_TIMEOUT:-60}

cmd=${1:-}
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
    case "$1" in
        --data-dir) DATA_DIR=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        *) echo "kafka-broker.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

quiet() { grep -v "GLIBC_2.39' not found" >&2 || true; }

source "$(dirname "$0")/lib/venv.sh"
install() { pip_tool_install "$VENV" noida-db "$NOIDA_VERSION" kafka-broker.sh; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

accepts() {
    python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()' "$1" 2>/dev/null
}

port_file() { echo "$DATA_DIR/weir-kafka-port"; }

case "$cmd" in
    install)
        install
        ;;
    start)
        install
        mkdir -p "$DATA_DIR"
        [ -n "$PORT" ] || PORT=$(free_port)
        # The server runs in the background; its own stdout/stderr go to its log.
        "$VENV/bin/noida-db" up --only kafka --kafka-port "$PORT" --host 127.0.0.1 --data-dir "$DATA_DIR" >"$DATA_DIR/up.out" 2>&1 </dev/null ||
            { quiet <"$DATA_DIR/up.out"; echo "kafka-broker.sh: noida-db up failed" >&2; exit 1; }
        echo "$PORT" >"$(port_file)"
        deadline=$((SECONDS + START_TIMEOUT))
        until accepts "$PORT"; do
            if [ $SECONDS -ge $deadline ]; then
                echo "kafka-broker.sh: broker on 127.0.0.1:$PORT does not accept connections after ${START_TIMEOUT}s" >&2
                quiet <"$DATA_DIR/up.out"
                exit 1
            fi
            sleep 0.2
        done
        echo "127.0.0.1:$PORT"
        ;;
    stop)
        if [ -x "$VENV/bin/noida-db" ] && [ -d "$DATA_DIR" ]; then
            "$VENV/bin/noida-db" down --data-dir "$DATA_DIR" 2>&1 | quiet
        fi
        ;;
    status)
        [ -f "$(port_file)" ] && accepts "$(cat "$(port_file)")" && echo "127.0.0.1:$(cat "$(port_file)")"
        ;;
    *)
        echo "usage: scripts/kafka-broker.sh start|stop|status|install [--data-dir DIR] [--port PORT]" >&2
        exit 2
        ;;
esac

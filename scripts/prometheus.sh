#!/usr/bin/env bash
# A Prometheus server on 127.0.0.1 that scrapes weir's metrics endpoint, for
# tests and demos: Debian's `prometheus` package (scripts/install-deps.sh
# installs it), run in the background with its own data directory.
#
#   scripts/prometheus.sh start --target HOST:PORT[,HOST:PORT...] [--data-dir DIR] [--port PORT] [--interval D] [--rules FILE]
#       Writes DIR/prometheus.yml (job `weir`, the targets, scrape and
#       evaluation interval D, default 1s, and with --rules the alert rules
#       FILE, e.g. deploy/prometheus/alerts.yml), starts Prometheus, waits until
#       /-/ready answers, and prints its address (127.0.0.1:PORT) on stdout.
#       Without --port a free port is picked. Use a fresh DIR per run.
#   scripts/prometheus.sh stop [--data-dir DIR]
#   scripts/prometheus.sh status [--data-dir DIR]   # exit 0 if it runs
#
# The default data directory is ${TMPDIR:-/tmp}/weir-prometheus.
set -euo pipefail

DATA_DIR=${TMPDIR:-/tmp}/weir-prometheus
PORT=
TARGETS=
INTERVAL=1s
RULES=
START_TIMEOUT=${WEIR_PROMETHEUS_START_TIMEOUT:-30}

cmd=${1:-}
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
    case "$1" in
        --data-dir) DATA_DIR=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        --target) TARGETS=$2; shift 2 ;;
        --interval) INTERVAL=$2; shift 2 ;;
        --rules) RULES=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
        *) echo "prometheus.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ready() {
    python3 - "$1" <<'EOF' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen("http://127.0.0.1:%s/-/ready" % sys.argv[1], timeout=1).read()
EOF
}

pid_file() { echo "$DATA_DIR/prometheus.pid"; }

running() {
    [ -f "$(pid_file)" ] && kill -0 "$(cat "$(pid_file)")" 2>/dev/null
}

case "$cmd" in
    start)
        command -v prometheus >/dev/null || { echo "prometheus.sh: prometheus not found; run scripts/install-deps.sh" >&2; exit 1; }
        [ -n "$TARGETS" ] || { echo "prometheus.sh: start needs --target HOST:PORT" >&2; exit 2; }
        if running; then
            echo "prometheus.sh: already running in $DATA_DIR (pid $(cat "$(pid_file)"))" >&2
            exit 1
        fi
        mkdir -p "$DATA_DIR/tsdb"
        [ -n "$PORT" ] || PORT=$(free_port)
        list=$(echo "$TARGETS" | sed "s/[^,][^,]*/'&'/g")
        cat >"$DATA_DIR/prometheus.yml" <<EOF
global:
  scrape_interval: $INTERVAL
  evaluation_interval: $INTERVAL
scrape_configs:
  - job_name: weir
    static_configs:
      - targets: [$list]
EOF
        [ -z "$RULES" ] || printf "rule_files: ['%s']\n" "$RULES" >>"$DATA_DIR/prometheus.yml"
        prometheus --config.file="$DATA_DIR/prometheus.yml" --storage.tsdb.path="$DATA_DIR/tsdb" \
            --web.listen-address="127.0.0.1:$PORT" >"$DATA_DIR/prometheus.log" 2>&1 </dev/null &
        echo $! >"$(pid_file)"
        deadline=$((SECONDS + START_TIMEOUT))
        until ready "$PORT"; do
            if ! running || [ $SECONDS -ge $deadline ]; then
                echo "prometheus.sh: Prometheus on 127.0.0.1:$PORT is not ready; its log:" >&2
                tail -20 "$DATA_DIR/prometheus.log" >&2
                exit 1
            fi
            sleep 0.2
        done
        echo "127.0.0.1:$PORT"
        ;;
    stop)
        if running; then
            pid=$(cat "$(pid_file)")
            kill -TERM "$pid"
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
        fi
        rm -f "$(pid_file)"
        ;;
    status)
        running
        ;;
    *)
        echo "usage: scripts/prometheus.sh start --target HOST:PORT [--data-dir DIR] [--port PORT] [--interval D] [--rules FILE] | stop [--data-dir DIR] | status [--data-dir DIR]" >&2
        exit 2
        ;;
esac

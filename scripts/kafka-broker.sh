#!/usr/bin/env bash
# A single-node Kafka-compatible broker on 127.0.0.1 for tests, examples and
# benchmarks: noida-db (pinned, its Rust source from crates.io) with the
# patches in scripts/noida-patches/ (docs/scaling.md, "The test broker"),
# built once with cargo and cached.
#
#   scripts/kafka-broker.sh start [--data-dir DIR] [--port PORT]
#       Starts the broker (building it first if needed), waits until it
#       accepts connections, and prints its bootstrap address on stdout
#       (127.0.0.1:PORT). Without --port a free port is picked. Data is kept
#       in memory and snapshotted to DIR: use a fresh DIR per test run.
#   scripts/kafka-broker.sh stop [--data-dir DIR]
#   scripts/kafka-broker.sh status [--data-dir DIR]   # exit 0 if it runs
#   scripts/kafka-broker.sh install                    # only build the broker
#
# The binary lives in $WEIR_BROKER_ROOT/bin (default
# ~/.cache/weir/noida-VERSION-PATCHHASH, PATCHHASH from the patch files, so
# a changed patch set builds a new broker and an unchanged one never
# rebuilds: offline once built). The build takes noida-db's source from
# crates.io through cargo (a scratch package depending on it, `cargo fetch`),
# applies the patches in name order and runs `cargo install --locked` with
# only the `kafka` feature. The default data directory is
# ${TMPDIR:-/tmp}/weir-kafka.
set -euo pipefail

NOIDA_VERSION=0.2.3
PATCHES=$(cd "$(dirname "$0")" && pwd)/noida-patches
PATCH_HASH=$(cat "$PATCHES"/*.patch | sha256sum | cut -c1-12)
ROOT=${WEIR_BROKER_ROOT:-$HOME/.cache/weir/noida-$NOIDA_VERSION-$PATCH_HASH}
BIN=$ROOT/bin/noida-db
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

# The unpacked crate source of noida-db $NOIDA_VERSION (downloaded by cargo
# into its registry cache if it is not there yet), printed as a directory.
crate_source() {
    local scratch=$ROOT/fetch
    mkdir -p "$scratch/src"
    cat >"$scratch/Cargo.toml" <<EOF
[package]
name = "weir-noida-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
noida-db = { version = "=$NOIDA_VERSION", default-features = false, features = ["kafka"] }
EOF
    : >"$scratch/src/lib.rs"
    cargo fetch --quiet --manifest-path "$scratch/Cargo.toml" >&2
    cargo metadata --format-version 1 --manifest-path "$scratch/Cargo.toml" |
        python3 -c 'import json,os,sys; m=json.load(sys.stdin); print(os.path.dirname(next(p["manifest_path"] for p in m["packages"] if p["name"]=="noida-db")))'
}

install() {
    [ -x "$BIN" ] && return
    echo "kafka-broker.sh: building noida-db $NOIDA_VERSION with scripts/noida-patches into $ROOT (once)" >&2
    mkdir -p "$ROOT"
    local src
    src=$(crate_source)
    rm -rf "$ROOT/src"
    cp -r "$src" "$ROOT/src"
    chmod -R u+w "$ROOT/src"
    for p in "$PATCHES"/*.patch; do
        patch --quiet --forward --batch -p1 -d "$ROOT/src" <"$p" >&2 ||
            { echo "kafka-broker.sh: $p does not apply to noida-db $NOIDA_VERSION" >&2; exit 1; }
    done
    # The crate's own Cargo.lock (--locked); its target dir is removed after.
    cargo install --quiet --locked --path "$ROOT/src" --target-dir "$ROOT/target" \
        --no-default-features --features kafka --root "$ROOT" >&2
    rm -rf "$ROOT/target" "$ROOT/fetch"
}

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
        "$BIN" up --only kafka --kafka-port "$PORT" --host 127.0.0.1 --data-dir "$DATA_DIR" >"$DATA_DIR/up.out" 2>&1 </dev/null ||
            { cat "$DATA_DIR/up.out" >&2; echo "kafka-broker.sh: noida-db up failed" >&2; exit 1; }
        echo "$PORT" >"$(port_file)"
        deadline=$((SECONDS + START_TIMEOUT))
        until accepts "$PORT"; do
            if [ $SECONDS -ge $deadline ]; then
                echo "kafka-broker.sh: broker on 127.0.0.1:$PORT does not accept connections after ${START_TIMEOUT}s" >&2
                cat "$DATA_DIR/up.out" >&2
                exit 1
            fi
            sleep 0.2
        done
        echo "127.0.0.1:$PORT"
        ;;
    stop)
        if [ -x "$BIN" ] && [ -d "$DATA_DIR" ]; then
            "$BIN" down --data-dir "$DATA_DIR" >&2
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

#!/usr/bin/env bash
# Reads Parquet files with DuckDB (PyPI, pinned), an independent reader for
# the tests of weir's Parquet sink: prints every row of the files as one
# JSON object per line (DuckDB's own rendering of each value; DECIMAL as
# its exact text, TIMESTAMP as `YYYY-MM-DD HH:MM:SS[.f]` in UTC, DATE as
# YYYY-MM-DD), in no order.
#
#   scripts/read-parquet.sh GLOB              # e.g. 'out/lake/**/*.parquet'
#   scripts/read-parquet.sh --schema GLOB     # column name and DuckDB type, one per line
#   scripts/read-parquet.sh install           # only create the venv
#
# The venv lives in $WEIR_DUCKDB_VENV (default ~/.cache/weir/duckdb-venv).
set -euo pipefail

VERSION=1.4.2
VENV=${WEIR_DUCKDB_VENV:-$HOME/.cache/weir/duckdb-venv}

source "$(dirname "$0")/lib/venv.sh"
pip_tool_install "$VENV" duckdb "$VERSION" read-parquet.sh
[ "${1:-}" = install ] && exit 0
mode=rows
if [ "${1:-}" = --schema ]; then mode=schema; shift; fi
[ $# -eq 1 ] || { echo "usage: scripts/read-parquet.sh [--schema] GLOB" >&2; exit 2; }
exec "$VENV/bin/python" - "$mode" "$1" <<'PY'
import json, sys
import duckdb
mode, glob = sys.argv[1], sys.argv[2]
con = duckdb.connect()
# Hive partition directories are not read as columns: the files hold every column.
rel = con.sql("SELECT * FROM read_parquet(?, hive_partitioning = false)", params=[glob])
if mode == "schema":
    for name, kind in zip(rel.columns, rel.types):
        print(f"{name} {kind}")
    sys.exit(0)
# Exact text for what JSON has no type for: decimals, dates, timestamps
# (UTC, without the zone; no time-zone module needed).
def shown(name, kind):
    q = '"' + name.replace('"', '""') + '"'
    kind = str(kind)
    if kind.startswith("TIMESTAMP"):
        return f"CAST(CAST({q} AS TIMESTAMP) AS VARCHAR) AS {q}" if "TIME ZONE" in kind else f"CAST({q} AS VARCHAR) AS {q}"
    if kind.startswith("DECIMAL") or kind in ("DATE", "HUGEINT"):
        return f"CAST({q} AS VARCHAR) AS {q}"
    return q
names = rel.columns
rel = rel.select(", ".join(shown(n, k) for n, k in zip(rel.columns, rel.types)))
for row in rel.fetchall():
    print(json.dumps(dict(zip(names, row)), sort_keys=True))
PY

#!/usr/bin/env python3
"""Regenerate testdata/inputs/ deterministically (python3 stdlib only).

    python3 scripts/gen_testdata.py

Files:
  orders.jsonl          orders, ts epoch ms, bounded disorder <= 2 s, ~10% exact duplicate lines
  orders_rfc3339.jsonl  the same lines with ts as an RFC 3339 UTC string
  orders_offset.jsonl   a few orders with RFC 3339 offsets (+02:00, -05:30)
  orders_bad.jsonl      good orders with malformed / missing-key lines between them
  orders_parts/         the first orders split into three part files (glob and directory sources)

The e2e tests compute expected results from these files with their own
reference implementation; nothing here is an expected output.
"""

import datetime
import json
import os
import random

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "testdata", "inputs")

BASE_TS = 1_700_000_000_000  # 2023-11-14T22:13:20Z
N_ORDERS = 2500
STEP_MS = 100
JITTER_MS = 1500  # plus duplicates re-emitted up to 5 lines later: disorder <= 2000 ms
# Session gaps used by pipelines: no two consecutive records of a user may be
# exactly this far apart (whether touching sessions merge is not specified).
SESSION_GAPS_MS = (3000,)


def order_records(rng):
    records = []
    for i in range(N_ORDERS):
        r = {
            "order_id": f"o{i:06d}",
            "user": f"u{rng.randrange(50):02d}",
            "amount": rng.randrange(1, 500),
            "price": rng.randrange(0, 400) / 4,  # exact in binary: float sums are exact
            "ts": BASE_TS + i * STEP_MS + rng.randrange(0, JITTER_MS + 1),
        }
        roll = rng.random()
        if roll < 0.03:
            r["amount"] = None
        elif roll < 0.05:
            del r["amount"]
        if i % 125 == 7:
            # A user whose amounts are always null: sum/min/max/avg are null.
            r["user"] = "nobody"
            r["amount"] = None
        records.append(r)
    avoid_exact_gaps(records)
    return records


def avoid_exact_gaps(records):
    changed = True
    while changed:
        changed = False
        by_user = {}
        for r in records:
            by_user.setdefault(r["user"], []).append(r)
        for rs in by_user.values():
            rs.sort(key=lambda r: r["ts"])
            for a, b in zip(rs, rs[1:]):
                if b["ts"] - a["ts"] in SESSION_GAPS_MS:
                    b["ts"] += 1
                    changed = True


def with_duplicates(lines, rng):
    """~10% of lines are followed by an exact copy of a line at most 5 back."""
    out = []
    for i, line in enumerate(lines):
        out.append(line)
        if rng.random() < 0.10:
            out.append(lines[rng.randrange(max(0, i - 5), i + 1)])
    return out


def dumps(r):
    return json.dumps(r, separators=(",", ":"))


def rfc3339(ms, offset_minutes=0):
    tz = datetime.timezone(datetime.timedelta(minutes=offset_minutes))
    t = datetime.datetime.fromtimestamp(ms / 1000, tz)
    text = t.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}"
    if offset_minutes == 0:
        return text + "Z"
    sign = "+" if offset_minutes > 0 else "-"
    m = abs(offset_minutes)
    return text + f"{sign}{m // 60:02d}:{m % 60:02d}"


def bad_lines(rng):
    """(text or bytes) lines with a reason each; blank lines are not bad."""
    return [
        '{"order_id":"b1","user":"u01","amount":5,"ts":17000',  # truncated
        '{"user":"u01","amount":3,"ts":1700000001000}',  # missing key
        '{"order_id":{"x":1},"user":"u02","amount":3,"ts":1700000001000}',  # key not scalar
        '{"order_id":["a"],"user":"u02","amount":3,"ts":1700000001000}',  # key not scalar
        '{"order_id":"b2","user":"u03","amount":3}',  # missing event time
        '{"order_id":"b3","user":"u03","amount":3,"ts":"yesterday"}',  # bad event time
        '{"order_id":"b4","user":"u03","amount":3,"ts":true}',  # bad event time
        "[1,2,3]",  # not an object
        "not json at all",
        '{"order_id":"b5","user":"u04","amount":1,"ts":1700000002000} trailing',
        b'{"order_id":"b6\xff","user":"u04","amount":1,"ts":1700000002000}',  # not UTF-8
        "",  # blank: ignored, not bad
        "   ",  # whitespace only: ignored, not bad
    ]


def write_lines(path, lines):
    with open(path, "wb") as f:
        for line in lines:
            f.write(line if isinstance(line, bytes) else line.encode())
            f.write(b"\n")


def main():
    rng = random.Random(20240601)
    os.makedirs(OUT, exist_ok=True)
    records = order_records(rng)

    dup_rng = random.Random(7)
    lines = with_duplicates([dumps(r) for r in records], dup_rng)
    write_lines(os.path.join(OUT, "orders.jsonl"), lines)

    def as_rfc(line):
        r = json.loads(line)
        r["ts"] = rfc3339(r["ts"])
        return dumps(r)

    write_lines(os.path.join(OUT, "orders_rfc3339.jsonl"), [as_rfc(l) for l in lines])

    offset_lines = []
    for k, r in enumerate(records[:60]):
        r = dict(r)
        r["ts"] = rfc3339(r["ts"], [120, -330, 0][k % 3])
        offset_lines.append(dumps(r))
    write_lines(os.path.join(OUT, "orders_offset.jsonl"), offset_lines)

    # Bad file: unique good orders (ids b-prefixed elsewhere never collide)
    # with a bad line after every ~15 good ones; one good order has a null key.
    good = [dumps(r) for r in records[:200]]
    good[50] = dumps({**json.loads(good[50]), "order_id": None})
    bad = bad_lines(rng)
    mixed = []
    for i, line in enumerate(good):
        mixed.append(line)
        if i % 15 == 14 and bad:
            mixed.append(bad.pop(0))
    mixed.extend(bad)
    write_lines(os.path.join(OUT, "orders_bad.jsonl"), mixed)

    parts = os.path.join(OUT, "orders_parts")
    os.makedirs(parts, exist_ok=True)
    first = lines[:900]
    for p in range(3):
        write_lines(os.path.join(parts, f"orders-{p}.jsonl"), first[p * 300 : (p + 1) * 300])


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes testdata/inputs/join/{orders,payments,users}/*.jsonl: orders and
the payments of some of them (none, one or two each, some outside the join's
interval, some for unknown orders), and the changelog of the orders' users
(versions from some time on, deletions `"op":"d"`, two versions at one time
now and then, users with no version before their first orders), a little
out of order within each file (at most 1.5 s), and a few lines far behind
(late at 2 s of out-of-orderness). Deterministic: rerunning it writes the
same files."""
import json, os, random

random.seed(28)
BASE = 1_700_000_000_000
root = os.path.join(os.path.dirname(__file__), "..", "testdata", "inputs", "join")

orders, payments = [], []
for i in range(400):
    ts = BASE + i * 250
    orders.append({"order_id": f"o{i:04d}", "user": f"u{random.randrange(30):02d}", "amount": random.randrange(1, 500), "ts": ts})
    n = random.choices([0, 1, 2], [15, 65, 20])[0]
    for k in range(n):
        payments.append({"pay_id": f"p{i:04d}{k}", "order": f"o{i:04d}", "paid": random.randrange(1, 500), "ts": ts + random.randrange(-3000, 14000)})
for k in range(30):
    payments.append({"pay_id": f"x{k:03d}", "order": f"x{k:04d}", "paid": 1, "ts": BASE + random.randrange(0, 100_000)})


def write(name, records, files):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    parts = [[] for _ in range(files)]
    for j, r in enumerate(records):
        parts[j % files].append(r)
    for n, part in enumerate(parts):
        # Out of order by at most 1.5 s: sort by a jittered time.
        part.sort(key=lambda r: r["ts"] + random.randrange(0, 1500))
        lines = [json.dumps(r, separators=(",", ":")) for r in part]
        # A few copies far behind the file's time: late.
        for _ in range(4):
            at = random.randrange(len(part) // 2, len(part))
            r = dict(part[at])
            r["ts"] -= 6000
            r["late"] = True
            lines.insert(at + 1, json.dumps(r, separators=(",", ":")))
        with open(os.path.join(d, f"{name}-{n}.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")


write("orders", orders, 3)
write("payments", payments, 2)

# The users' changelog, after the other files so that they stay as they were.
users = []
for u in range(30):
    ts = BASE + random.randrange(-5000, 20_000)
    while ts < BASE + 105_000:
        if random.random() < 0.12:
            users.append({"user": f"u{u:02d}", "op": "d", "ts": ts})
        else:
            users.append({"user": f"u{u:02d}", "op": "u", "tier": random.choice(["bronze", "silver", "gold"]), "ts": ts})
            if random.random() < 0.06:
                # Another version at the same time: the last by text counts.
                users.append({"user": f"u{u:02d}", "op": "u", "tier": random.choice(["bronze", "silver", "gold"]), "note": "tie", "ts": ts})
        ts += random.randrange(3000, 20_000)
write("users", users, 2)

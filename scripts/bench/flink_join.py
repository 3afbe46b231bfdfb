"""Flink SQL's side of scripts/bench-join.sh: the same three joins as
scripts/bench/join_{interval,window,temporal}.yaml over the same JSON-lines
files, in a PyFlink mini-cluster at parallelism 1, into a blackhole sink.

    python flink_join.py JOB DATA_DIR [--count]

JOB is interval, window, temporal or empty (a query over one literal row:
the mini-cluster's fixed cost). Prints `cpu_s=... wall_s=...`: the CPU time
of this process and of every process it started (the JVM), read from /proc
while they still run, and the wall time. With --count the job's output rows
are counted instead (`rows=N`), to check that both systems join alike.
"""

import os
import resource
import sys
import time

from pyflink.table import EnvironmentSettings, TableEnvironment

TABLES = {
    "orders": "id BIGINT, `user` STRING, amount BIGINT, ts BIGINT",
    "payments": "pay BIGINT, `user` STRING, paid BIGINT, ts BIGINT",
    "users": "version BIGINT, `user` STRING, tier BIGINT, ts BIGINT",
}

QUERIES = {
    "interval": """
        SELECT o.id, o.amount, p.pay, p.paid FROM orders o, payments p
        WHERE o.`user` = p.`user` AND p.rt BETWEEN o.rt AND o.rt + INTERVAL '1' MINUTE""",
    "window": """
        SELECT l.id, l.amount, r.pay, r.paid
        FROM (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(rt), INTERVAL '10' SECONDS))) l
        JOIN (SELECT * FROM TABLE(TUMBLE(TABLE payments, DESCRIPTOR(rt), INTERVAL '10' SECONDS))) r
        ON l.`user` = r.`user` AND l.window_start = r.window_start AND l.window_end = r.window_end""",
    "temporal": """
        SELECT o.id, o.amount, u.version, u.tier FROM orders o
        JOIN users_versioned FOR SYSTEM_TIME AS OF o.rt AS u ON o.`user` = u.`user`""",
    "empty": "SELECT CAST(1 AS BIGINT), CAST(1 AS BIGINT), CAST(1 AS BIGINT), CAST(1 AS BIGINT)",
}


def descendants_cpu():
    """CPU seconds of every live descendant of this process."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(pid)] = int(fields[1])
        cpu[int(pid)] = (int(fields[11]) + int(fields[12])) / tick
    mine, total = {os.getpid()}, 0.0
    grew = True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                total += cpu[pid]
                grew = True
    return total


def main():
    job, data = sys.argv[1], sys.argv[2]
    count = "--count" in sys.argv[3:]
    started = time.monotonic()
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", "1")
    for name, columns in TABLES.items():
        env.execute_sql(f"""
            CREATE TABLE {name} ({columns},
                rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '2' SECOND)
            WITH ('connector' = 'filesystem', 'path' = '{data}/{name}', 'format' = 'json')""")
    # A versioned view of the users' changelog: the latest row per user
    # by event time, which Flink's temporal join reads as of a time.
    env.execute_sql("""
        CREATE VIEW users_versioned AS SELECT `user`, version, tier, rt FROM (
            SELECT *, ROW_NUMBER() OVER (PARTITION BY `user` ORDER BY rt DESC) AS rn FROM users)
        WHERE rn = 1""")
    env.execute_sql("CREATE TABLE sink (a BIGINT, b BIGINT, c BIGINT, d BIGINT) WITH ('connector' = 'blackhole')")
    if count:
        with env.execute_sql(f"SELECT COUNT(*) FROM ({QUERIES[job]})").collect() as rows:
            n = 0
            for row in rows:
                n = row[0]
        print(f"rows={n}")
        return
    env.execute_sql(f"INSERT INTO sink {QUERIES[job]}").wait()
    own = resource.getrusage(resource.RUSAGE_SELF)
    cpu = own.ru_utime + own.ru_stime + descendants_cpu()
    print(f"cpu_s={cpu:.2f} wall_s={time.monotonic() - started:.2f}")


if __name__ == "__main__":
    main()

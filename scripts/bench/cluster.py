"""Driver of scripts/bench-cluster.sh: throughput of 1, 2 and 3 weir
instances of scripts/bench/cluster.yaml on this machine, and the
end-to-end latency of one record through the cluster.

For each N: a fresh pipeline name (so fresh repartition topics) and state
directory; N `weir run --instance I/N` processes read the input topic (six
partitions, ROWS rows already in it, every id distinct); the run is done
when the aggregate has received every row, summed over the instances from
their /metrics. Then, with the cluster idle, LATENCY_PROBES single records
(new id, new user) are produced one at a time and each is timed until a
read_committed consumer of the output sees its count. CPU seconds of the
weir processes and of the broker come from /proc.

Then, on the one-instance input topic, the Kafka -> keyed count job of
scripts/bench-kafka.sh (scripts/bench/kafka_count.yaml: one process, no
repartition topics, read to the end offsets and exit), its CPU seconds
from the rusage of the exited process.

With BASE_WEIR set, every job runs with that binary too, right after the
same job with WEIR, on a fresh pipeline name and input topic of its own:
a before/after table from one run.
"""
import json, os, re, signal, socket, statistics, subprocess, sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BROKERS = os.environ["KAFKA_BOOTSTRAP"]
WEIR = os.environ.get("WEIR", "target/release/weir")
BASE_WEIR = os.environ.get("BASE_WEIR") or None
DATA = os.environ["BENCH_DATA"]
ROWS = int(os.environ["BENCH_ROWS"])
COUNTS = [int(n) for n in os.environ.get("BENCH_INSTANCES_LIST", "1 2 3").split()]
PROBES = int(os.environ.get("LATENCY_PROBES", "5"))
BROKER_PID = os.environ.get("BROKER_PID") or None
WORK = os.environ.get("BENCH_WORK", "target/bench/cluster")
TICK = os.sysconf("SC_CLK_TCK")
RUN = f"{os.getpid()}"


def cpu_seconds(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def create(topic, partitions):
    admin = AdminClient({"bootstrap.servers": BROKERS})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result()


def fill(topic):
    p = Producer({"bootstrap.servers": BROKERS, "linger.ms": 20, "batch.num.messages": 10000, "queue.buffering.max.messages": 1000000})
    n = 0
    for name in sorted(os.listdir(DATA)):
        if not name.endswith(".jsonl"):
            continue
        for line in open(os.path.join(DATA, name), "rb"):
            while True:
                try:
                    p.produce(topic, value=line.rstrip(b"\n"), partition=n % 6)
                    break
                except BufferError:
                    p.poll(0.05)
            n += 1
            if n == ROWS:
                break
    p.flush(120)
    return n


def records_in(port, operator):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            body = b""
            while chunk := s.recv(65536):
                body += chunk
    except OSError:
        return 0
    total = 0
    for m in re.finditer(rb'^weir_records_in_total\{([^}]*)\} (\d+)', body, re.M):
        if b'operator="%s"' % operator.encode() in m.group(1):
            total += int(m.group(2))
    return total


def run(weir, tag, n, topic):
    name = f"bench_cluster_{RUN}_{tag}_{n}"
    out = f"bench-cluster-out-{RUN}-{tag}-{n}"
    create(out, 1)
    state = os.path.join(WORK, name)
    env = dict(os.environ, BENCH_NAME=name, BENCH_STATE=state, BENCH_INSTANCES=str(n), BENCH_TOPIC=topic, BENCH_OUT=out)
    ports = [free_port() for _ in range(n)]
    broker0 = cpu_seconds(BROKER_PID) if BROKER_PID else None
    start = time.time()
    procs = [
        subprocess.Popen(
            [weir, "run", "scripts/bench/cluster.yaml", "--no-progress", "--log-level", "warn", "--metrics-addr", f"127.0.0.1:{ports[i]}"],
            env=dict(env, WEIR_INSTANCE=str(i)),
            stdout=subprocess.DEVNULL,
        )
        for i in range(n)
    ]
    deadline = start + 1800
    while sum(records_in(p, "per_user") for p in ports) < ROWS:
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            for p in procs:
                p.kill()
            sys.exit(f"N={n}: the cluster did not process {ROWS} rows (exited or timed out)")
        time.sleep(0.1)
    elapsed = time.time() - start
    weir_cpu = sum(cpu_seconds(p.pid) for p in procs)
    broker_cpu = cpu_seconds(BROKER_PID) - broker0 if BROKER_PID else None
    # Latency: one record at a time through the idle cluster, until its
    # count is committed in the output.
    reader = Consumer({"bootstrap.servers": BROKERS, "group.id": f"bench-{name}", "isolation.level": "read_committed", "enable.auto.commit": False})
    reader.assign([TopicPartition(out, 0, 0)])
    lat = []
    prod = Producer({"bootstrap.servers": BROKERS, "linger.ms": 0})
    seen = set()
    for k in range(PROBES):
        user = f"probe-{k}"
        rec = json.dumps({"id": 10**12 + k, "user": user, "amount": 1, "ts": 0})
        t0 = time.time()
        prod.produce(topic, value=rec.encode(), partition=k % 6)
        prod.flush(10)
        while user not in seen and time.time() - t0 < 60:
            m = reader.poll(0.05)
            if m is not None and not m.error():
                seen.add(json.loads(m.value()).get("user"))
        if user not in seen:
            print(f"N={n}: probe {k} not in the output after 60 s; instances left running for BENCH_HOLD seconds", file=sys.stderr)
            time.sleep(float(os.environ.get("BENCH_HOLD", "0")))
            for p in procs:
                p.kill()
            sys.exit(1)
        lat.append(time.time() - t0)
    reader.close()
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(120)
    return elapsed, weir_cpu, broker_cpu, lat


def keyed_count(weir, topic):
    """Kafka -> keyed count -> blackhole, one process: (seconds, CPU s, broker CPU s)."""
    env = dict(os.environ, BENCH_TOPIC=topic)
    broker0 = cpu_seconds(BROKER_PID) if BROKER_PID else None
    start = time.time()
    p = subprocess.Popen([weir, "run", "scripts/bench/kafka_count.yaml", "--no-progress", "--log-level", "warn"], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.time() - start
    if p.returncode != 0:
        sys.exit(f"keyed count: weir exited {p.returncode}")
    broker_cpu = cpu_seconds(BROKER_PID) - broker0 if BROKER_PID else None
    return elapsed, usage.ru_utime + usage.ru_stime, broker_cpu


def main():
    builds = [("new", WEIR)] + ([("base", BASE_WEIR)] if BASE_WEIR else [])
    print("| job | build | instances | rows | seconds | rows/s | weir CPU s | rows per weir CPU-s | broker CPU s | latency median s (min..max) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in COUNTS:
        for tag, weir in builds:
            # Each run reads an input topic of its own (the probes of one
            # run are not rows of the next).
            topic = f"bench-cluster-in-{RUN}-{tag}-{n}"
            create(topic, 6)
            t = time.time()
            got = fill(topic)
            print(f"Input: {got} rows in 6 partitions ({time.time() - t:.1f} s to produce)", file=sys.stderr)
            elapsed, cpu, broker, lat = run(weir, tag, n, topic)
            b = f"{broker:.1f}" if broker is not None else "?"
            print(
                f"| dedup -> count -> Kafka | {tag} | {n} | {got} | {elapsed:.1f} | {got / elapsed:,.0f} | {cpu:.1f} | {got / cpu:,.0f} | {b} | {statistics.median(lat):.2f} ({min(lat):.2f}..{max(lat):.2f}) |",
                flush=True,
            )
    if os.environ.get("BENCH_KEYED_COUNT", "1") != "0":
        for tag, weir in builds:
            # The rows only (no probes): a fresh topic, as above.
            topic = f"bench-cluster-count-{RUN}-{tag}"
            create(topic, 6)
            got = fill(topic)
            elapsed, cpu, broker = keyed_count(weir, topic)
            b = f"{broker:.1f}" if broker is not None else "?"
            print(f"| Kafka -> keyed count -> blackhole | {tag} | 1 | {got} | {elapsed:.1f} | {got / elapsed:,.0f} | {cpu:.2f} | {got / cpu:,.0f} | {b} | |", flush=True)


main()

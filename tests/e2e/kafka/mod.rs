//! Kafka source and sink against a real broker.
//!
//! The broker is the one `KAFKA_BOOTSTRAP` names (scripts/test.sh starts
//! one); without it the first Kafka test starts `scripts/kafka-broker.sh` on
//! a fresh temporary data directory, and a watchdog process stops it when
//! this test process exits, however it exits. Every test uses topics of its
//! own, so the tests run in parallel on one broker.

use std::collections::{BTreeSet, HashMap};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use super::ckpt::{checkpoint_dirs, kill_after, reference_output, restored_from, write_pipeline, Rng, INPUTS};
use super::records::{assert_same_multiset, assert_same_records, canonical, parse};
use super::util::{control_request, input_lines, repo, tmp, wait_until, weir, weir_run, Outcome, Weir, RUN_TIMEOUT};

mod broker;
mod exactly_once;
mod offsets;
mod outage;
mod sink;

/// The bootstrap address of the test broker.
pub fn broker() -> &'static str {
    static BROKER: OnceLock<String> = OnceLock::new();
    BROKER.get_or_init(|| match std::env::var("KAFKA_BOOTSTRAP") {
        Ok(b) if !b.trim().is_empty() => b,
        _ => start_script_broker().0,
    })
}

/// Start `scripts/kafka-broker.sh` on a fresh data dir; a watchdog stops it
/// and removes the dir once this process is gone. Returns (address, dir).
pub fn start_script_broker() -> (String, String) {
    let dir = tmp().keep();
    let dir = dir.display().to_string();
    let script = repo().join("scripts/kafka-broker.sh");
    let out = Command::new(&script).args(["start", "--data-dir", &dir]).stderr(Stdio::inherit()).output().expect("running kafka-broker.sh");
    assert!(out.status.success(), "scripts/kafka-broker.sh start failed");
    let addr = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let watchdog = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; '{script}' stop --data-dir '{dir}' >/dev/null 2>&1; rm -rf '{dir}'",
        pid = std::process::id(),
        script = script.display()
    );
    // Deliberately not waited for: it outlives this process to stop the broker.
    #[allow(clippy::zombie_processes)]
    let _ = Command::new("sh")
        .args(["-c", &watchdog])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the broker watchdog");
    eprintln!("Test broker {addr} (data in {dir})");
    (addr, dir)
}

fn stop_script_broker(dir: &str) {
    let script = repo().join("scripts/kafka-broker.sh");
    let st = Command::new(script).args(["stop", "--data-dir", dir]).status().expect("running kafka-broker.sh");
    assert!(st.success());
}

/// A topic name of its own for each test and run.
pub fn topic(what: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("weir-{what}-{}-{nanos}", std::process::id())
}

fn config(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    c
}

pub fn create_topic(brokers: &str, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = config(brokers).create().expect("admin client");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let res = rt.block_on(admin.create_topics(&[NewTopic::new(name, partitions, TopicReplication::Fixed(1))], &opts));
    for r in res.expect("create_topics") {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
    }
}

/// Delete `name` and create it again with `partitions` (retrying while the
/// broker still finishes the deletion).
fn recreate_topic(brokers: &str, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = config(brokers).create().expect("admin client");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for r in rt.block_on(admin.delete_topics(&[name], &opts)).expect("delete_topics") {
        r.unwrap_or_else(|(t, e)| panic!("deleting topic {t}: {e}"));
    }
    let start = Instant::now();
    loop {
        let res = rt.block_on(admin.create_topics(&[NewTopic::new(name, partitions, TopicReplication::Fixed(1))], &opts));
        match res.expect("create_topics").remove(0) {
            Ok(_) => break,
            Err((t, e)) if start.elapsed() < Duration::from_secs(20) => eprintln!("creating {t} again: {e}; retrying"),
            Err((t, e)) => panic!("creating topic {t} again: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Produce `lines` (each keyed by its `id` field) and wait for every ack.
fn produce(brokers: &str, topic: &str, lines: &[String]) {
    let p: ThreadedProducer<DefaultProducerContext> = config(brokers).set("linger.ms", "5").create().expect("producer");
    for l in lines {
        let key = parse(l)["id"].to_string();
        let mut rec = BaseRecord::to(topic).payload(l.as_str()).key(key.as_str());
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    std::thread::sleep(Duration::from_millis(5));
                    rec = back;
                }
            }
        }
    }
    p.flush(Duration::from_secs(30)).expect("flushing test input");
}

/// Everything a `read_committed` consumer sees in `topic`, partition by
/// partition up to the end, waiting at most `limit` for the topic to exist.
pub fn read_committed(brokers: &str, topic: &str, limit: Duration) -> Vec<String> {
    read_topic(brokers, topic, limit, "read_committed")
}

/// The same with `isolation.level` `isolation` (`read_uncommitted` also
/// sees the records of open transactions).
fn read_topic(brokers: &str, topic: &str, limit: Duration, isolation: &str) -> Vec<String> {
    let consumer: BaseConsumer = config(brokers)
        .set("group.id", format!("weir-test-reader-{}", std::process::id()))
        .set("isolation.level", isolation)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "1000")
        .create()
        .expect("consumer");
    let start = Instant::now();
    let partitions = loop {
        if let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)) {
            let n = md.topics().first().map(|t| t.partitions().len()).unwrap_or(0);
            if n > 0 {
                break n as i32;
            }
        }
        assert!(start.elapsed() < limit, "topic {topic} does not exist after {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut at_end = std::collections::HashSet::new();
    let mut out = Vec::new();
    while at_end.len() < partitions as usize {
        assert!(start.elapsed() < limit, "reading {topic}: not at the end of every partition after {limit:?}");
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                out.push(String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap());
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => eprintln!("test consumer: {e}"),
            None => {}
        }
    }
    out
}

/// The test input: the events of the checkpoint tests (with redelivered
/// copies, keyed by id so copies share a partition), both files merged in
/// event-time order as a producer would write them (each file spans the
/// whole time range: one after the other, the second would be all late).
fn events() -> Vec<String> {
    let mut all: Vec<String> = INPUTS.iter().flat_map(|f| input_lines(f)).collect();
    all.sort_by_key(|l| parse(l)["ts"].as_i64().expect("ts"));
    all
}

/// A Kafka pipeline of one test: its own dirs and topics.
struct KJob {
    dir: tempfile::TempDir,
    pipeline: String,
    input: String,
    output: String,
}

impl KJob {
    /// Input topic (3 partitions) filled with the events; the pipeline file
    /// made from `yaml` with @NAME@, @IN@, @OUT@ and @BROKERS@ replaced.
    fn new(what: &str, yaml: &str, fill: bool) -> KJob {
        let b = broker();
        let (input, output) = (topic(&format!("{what}-in")), topic(&format!("{what}-out")));
        create_topic(b, &input, 3);
        if fill {
            produce(b, &input, &events());
        }
        let dir = tmp();
        // The pipeline name makes the transactional ids: one per test, or
        // concurrent tests would fence each other's producers.
        let name = format!("{}-{}", what, std::process::id());
        let text = yaml.replace("@BROKERS@", b).replace("@IN@", &input).replace("@OUT@", &output).replace("@NAME@", &name);
        let pipeline = write_pipeline(dir.path(), what, &text);
        KJob { dir, pipeline, input, output }
    }

    fn cmd(&self) -> Weir {
        self.cmd_p(2)
    }

    fn cmd_p(&self, p: u32) -> Weir {
        self.cmd_in("state", p)
    }

    /// A run on the state directory `state` (under the job's dir).
    fn cmd_in(&self, state: &str, p: u32) -> Weir {
        weir_run(&self.pipeline, p).set("state.dir", self.dir.path().join(state))
    }

    fn restore(&self) -> Weir {
        self.cmd().arg("--restore").arg("latest")
    }

    fn output(&self) -> Vec<String> {
        read_committed(broker(), &self.output, Duration::from_secs(30))
    }
}

/// Kafka -> dedup by id -> 500 ms tumbling count/sum per user -> Kafka.
const WINDOWED: &str = r#"name: @NAME@
parallelism: 2
state: {dir: unused}
checkpoint: {interval: 150ms}
sources:
  - name: events
    type: kafka
    brokers: @BROKERS@
    topics: [@IN@]
    bounded: true
    rate_limit: 700
    broker_timeout: 10s
    event_time: {field: ts, max_out_of_orderness: 1s}
    properties: {session.timeout.ms: 6000, heartbeat.interval.ms: 1000}
operators:
  - {name: unique, type: dedup, input: events, key: [id], ttl: 1h}
  - name: per_user
    type: aggregate
    input: unique
    key: [user]
    window: {type: tumbling, size: 500ms}
    aggregates: [{fn: count, as: n}, {fn: sum, field: amount, as: total}]
sinks:
  - {name: out, type: kafka, input: per_user, brokers: @BROKERS@, topic: @OUT@, key: [user], delivery: exactly_once}
"#;

fn canon(lines: &[String]) -> Vec<String> {
    lines.iter().map(|l| canonical(&parse(l))).collect()
}

/// The clean run of the windowed pipeline, checked against the reference.
fn clean_windowed() -> &'static [String] {
    static CLEAN: OnceLock<Vec<String>> = OnceLock::new();
    CLEAN.get_or_init(|| {
        let job = KJob::new("clean", WINDOWED, true);
        job.cmd().set("sources.events.rate_limit", "1000000000").ok();
        let lines = job.output();
        assert_same_records("kafka clean run vs reference", &lines, &reference_output());
        lines
    })
}

/// Datagen -> exactly-once Kafka sink: rows flow all the time, so every
/// checkpoint stages a transaction in both subtasks.
const GEN_TO_KAFKA: &str = r#"name: @NAME@
parallelism: 2
state: {dir: unused}
checkpoint: {interval: 200ms}
sources:
  - {name: gen, type: datagen, rows: 3000, rate_limit: 3000, fields: {id: {kind: sequence}}}
sinks:
  - {name: out, type: kafka, input: gen, brokers: @BROKERS@, topic: @OUT@, key: [id], delivery: exactly_once}
"#;

/// How often each datagen id is in `lines`.
fn id_counts(lines: &[String]) -> HashMap<i64, usize> {
    lines.iter().fold(HashMap::new(), |mut m, l| {
        *m.entry(parse(l)["id"].as_i64().expect("id")).or_default() += 1;
        m
    })
}

#[track_caller]
fn assert_each_id(what: &str, lines: &[String], rows: i64, times: usize) {
    let counts = id_counts(lines);
    let wrong: Vec<(i64, usize)> = (0..rows).map(|id| (id, counts.get(&id).copied().unwrap_or(0))).filter(|(_, n)| *n != times).collect();
    assert!(
        wrong.is_empty() && counts.len() == rows as usize,
        "{what}: {} records; {} of {rows} ids not there {times} times, e.g. (id, times) {:?}",
        lines.len(),
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// Produce `lines` to partition `partition` of `topic`.
pub fn produce_to(brokers: &str, topic: &str, partition: i32, lines: &[String]) {
    let p: ThreadedProducer<DefaultProducerContext> = config(brokers).create().expect("producer");
    for l in lines {
        let rec: BaseRecord<'_, (), str> = BaseRecord::to(topic).payload(l.as_str()).partition(partition);
        p.send(rec).map_err(|(e, _)| e).expect("queue");
    }
    p.flush(Duration::from_secs(30)).expect("flushing");
}

/// Kafka (unbounded) -> exactly-once Kafka, at parallelism 1.
const PASSTHROUGH: &str = r#"name: @NAME@
parallelism: 1
state: {dir: unused}
checkpoint: {interval: 200ms}
sources:
  - {name: events, type: kafka, brokers: @BROKERS@, topics: [@IN@],
     properties: {session.timeout.ms: 6000, heartbeat.interval.ms: 1000}}
sinks:
  - {name: out, type: kafka, input: events, brokers: @BROKERS@, topic: @OUT@, delivery: exactly_once}
"#;

fn lines_of(generation: u32, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{{\"id\":{i},\"generation\":{generation}}}")).collect()
}

/// Run `cmd` until the output holds `n` records, then stop it with SIGTERM.
#[track_caller]
fn run_until_output(job: &KJob, cmd: Weir, n: usize) -> Outcome {
    let run = cmd.spawn();
    let reached = wait_until(Duration::from_secs(30), || job.output().len() >= n);
    run.terminate();
    let o = run.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    assert!(reached, "the output never reached {n} records; log:\n{}", o.stderr);
    o
}

/// Produce lines without keys.
fn produce_raw(brokers: &str, topic: &str, lines: &[String]) {
    let p: ThreadedProducer<DefaultProducerContext> = config(brokers).create().expect("producer");
    for l in lines {
        let rec: BaseRecord<'_, (), str> = BaseRecord::to(topic).payload(l.as_str());
        p.send(rec).map_err(|(e, _)| e).expect("queue");
    }
    p.flush(Duration::from_secs(30)).expect("flushing");
}

/// The process id of the test broker serving `dir`.
fn broker_pid(dir: &str) -> String {
    let o = Command::new("pgrep").args(["-f", &format!("noida-db start.*--data-dir {dir}$")]).output().unwrap();
    let pid = String::from_utf8(o.stdout).unwrap().lines().next().map(str::to_string);
    pid.unwrap_or_else(|| panic!("no broker process for {dir}"))
}

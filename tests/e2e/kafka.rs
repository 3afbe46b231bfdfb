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

#[test]
fn kafka_windowed_clean_run_matches_the_reference() {
    assert!(!clean_windowed().is_empty());
}

#[test]
fn kafka_crash_loop_read_committed_sees_exactly_the_clean_result() {
    let want = canon(clean_windowed());
    let job = KJob::new("crash", WINDOWED, true);
    let mut rng = Rng::from_env("kafka crash loop");
    let mut kills = 0;
    for i in 0..5 {
        let mut run = if i == 0 { job.cmd() } else { job.restore() }.spawn();
        if !kill_after(&mut run, rng.millis(300, 1200)) {
            run.wait_for(RUN_TIMEOUT).expect_code(0);
            break;
        }
        kills += 1;
    }
    let last = job.restore().ok();
    eprintln!("kafka crash loop: {kills} kills, last run restored from {:?}", restored_from(&last.stderr));
    assert!(kills >= 2, "the crash loop must actually crash");
    assert_same_multiset(&format!("kafka crash loop after {kills} kills"), canon(&job.output()), want);
}

/// Crash at the `n`th `point`, restore, and compare with the clean run.
fn kafka_crash_at(point: &str, n: u32) -> Outcome {
    kafka_crash_at_then_restore_with(point, n, 2)
}

/// The same, restoring at parallelism `p` (the crashed run had 2).
fn kafka_crash_at_then_restore_with(point: &str, n: u32, p: u32) -> Outcome {
    let want = canon(clean_windowed());
    let job = KJob::new(&format!("crash-{}-p{p}", point.replace('_', "-")), WINDOWED, true);
    let crashed = job.cmd().env("WEIR_FAULTS", format!("crash={point}:{n}")).run();
    assert!(!crashed.status.success(), "crash={point}:{n} did not crash:\n{}", crashed.stderr);
    crashed.expect_stderr_contains(&format!("injected crash at {point}"));
    let restored = job.cmd_p(p).arg("--restore").arg("latest").ok();
    assert_same_multiset(&format!("kafka crash={point}:{n}, then --restore latest"), canon(&job.output()), want);
    restored
}

#[test]
fn kafka_crash_after_metadata_sends_the_lost_transaction_again() {
    // `_metadata` of checkpoint n exists, its transaction was never
    // committed: the restart's init_transactions aborts it, and the sink
    // sends its records again from state.
    // Checkpoint n holds a transaction only if a window fired since n-1
    // (timing): try a few n; each must be exactly-once, and the repair must
    // have run at least once.
    const REPAIRED: &str = "was not committed before the crash: sent again and committed";
    let mut tried = Vec::new();
    for n in [6, 10, 14, 18] {
        tried.push(n);
        if kafka_crash_at("after_metadata", n).stderr.contains(REPAIRED) {
            return;
        }
    }
    panic!("after crash=after_metadata:{tried:?} no restore repaired a transaction (log line {REPAIRED:?})");
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

#[test]
fn kafka_fresh_state_dir_reusing_the_pipeline_name_loses_no_transaction() {
    // Run 1 (state dir A) commits markers up to its last checkpoint id; run
    // 2, same pipeline name, fresh state dir B, counts checkpoints from 1
    // again and crashes after `_metadata` of 1. The restore must not take
    // run 1's marker for run 2's commit of checkpoint 1.
    let job = KJob::new("reuse", GEN_TO_KAFKA, false);
    job.cmd_in("state-a", 2).ok();
    let crashed = job.cmd_in("state-b", 2).env("WEIR_FAULTS", "crash=after_metadata:1").run();
    crashed.expect_stderr_contains("injected crash at after_metadata");
    let restored = job.cmd_in("state-b", 2).arg("--restore").arg("latest").ok();
    restored.expect_stderr_contains("was not committed before the crash: sent again and committed");
    assert_each_id("two runs of 3000 rows, the second crashed and restored", &job.output(), 3000, 2);
}

#[test]
fn kafka_crash_after_metadata_then_restore_at_parallelism_1_is_exactly_once() {
    // Subtask 1 is gone after the restore: its staged transaction is ended
    // (fenced) and repaired by subtask 0 under subtask 1's marker; the source
    // takes both old subtasks' rows. Rows flow all the time, so checkpoint 2
    // holds a staged transaction of subtask 1 (no timing luck needed).
    let job = KJob::new("rescale-repair", GEN_TO_KAFKA, false);
    let crashed = job.cmd().env("WEIR_FAULTS", "crash=after_metadata:2").run();
    crashed.expect_stderr_contains("injected crash at after_metadata");
    let restored = job.cmd_p(1).arg("--restore").arg("latest").ok();
    assert!(
        restored.stderr.lines().any(|l| l.contains("Transaction of the restored checkpoint") && l.contains("origin=1")),
        "no restore found a transaction staged by the vanished subtask 1:\n{}",
        restored.stderr
    );
    assert_each_id("crash after _metadata at p=2, restore at p=1", &job.output(), 3000, 1);
}

#[test]
fn kafka_crash_after_metadata_at_4_then_restore_at_3_fences_no_live_producer() {
    // Old subtask 2's staged transaction sits at key group 64, which new
    // subtask 1 (of 3) owns; transactional id 2 belongs to the live new
    // subtask 2. The repair must not fence it (found by the chaos harness:
    // "This instance has been fenced by a newer instance", exit 1).
    let job = KJob::new("rescale-4-3", GEN_TO_KAFKA, false);
    let crashed = job.cmd_p(4).env("WEIR_FAULTS", "crash=after_metadata:2").run();
    crashed.expect_stderr_contains("injected crash at after_metadata");
    let restored = job.cmd_p(3).arg("--restore").arg("latest").ok();
    assert!(
        restored.stderr.lines().any(|l| l.contains("Transaction of the restored checkpoint") && l.contains("origin=2")),
        "no restore found a transaction staged by old subtask 2:\n{}",
        restored.stderr
    );
    assert_each_id("crash after _metadata at p=4, restore at p=3", &job.output(), 3000, 1);
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

#[test]
fn kafka_restore_at_lower_parallelism_ends_the_open_transaction_of_a_vanished_subtask() {
    // Subtask 1 has an open transaction that no checkpoint staged (records
    // after the last completed checkpoint) when the process is killed; the
    // restore at parallelism 1 has no staged transaction of subtask 1 to
    // repair, yet must end that one at once (not after the broker's
    // transaction.timeout.ms, here 5 min) or `read_committed` readers of the
    // output never get past it.
    let yaml = r#"name: @NAME@
parallelism: 2
state: {dir: unused}
checkpoint: {interval: 3s}
sources:
  - {name: events, type: kafka, brokers: @BROKERS@, topics: [@IN@],
     properties: {session.timeout.ms: 6000, heartbeat.interval.ms: 1000}}
sinks:
  - {name: out, type: kafka, input: events, brokers: @BROKERS@, topic: @OUT@, delivery: exactly_once,
     properties: {transaction.timeout.ms: 300000}}
"#;
    let job = KJob::new("vanished-open", yaml, false);
    let state = job.dir.path().join("state");
    let mut run = job.cmd().spawn();
    let first = state.join("checkpoints/chk-0000001/_metadata");
    assert!(wait_until(Duration::from_secs(30), || first.exists()), "checkpoint 1 never completed");
    // Partitions are dealt sorted and round-robin: partition 1 is subtask 1's.
    let lines: Vec<String> = (0..50).map(|i| format!("{{\"id\":{i}}}")).collect();
    produce_to(broker(), &job.input, 1, &lines);
    let sent = wait_until(Duration::from_secs(20), || {
        read_topic(broker(), &job.output, Duration::from_secs(20), "read_uncommitted").len() >= lines.len()
    });
    assert!(sent, "subtask 1 never sent the records into its transaction");
    assert!(kill_after(&mut run, Duration::ZERO), "weir exited by itself");
    let done: Vec<_> = checkpoint_dirs(&state).into_iter().filter(|d| d.join("_metadata").exists()).collect();
    assert_eq!(done.len(), 1, "a second checkpoint completed before the kill (it would stage the records): {done:?}");
    let restored = job.cmd_p(1).arg("--restore").arg("latest").spawn();
    let all = wait_until(Duration::from_secs(30), || job.output().len() >= lines.len());
    restored.terminate();
    let o = restored.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    assert!(all, "read_committed never saw the {} records; restore log:\n{}", lines.len(), o.stderr);
    o.expect_stderr_contains("Fenced the transactional id of a subtask that no longer exists.");
    let mut got = job.output();
    got.sort();
    let mut want = lines.clone();
    want.sort();
    assert_eq!(got, want, "each record once");
}

#[test]
fn kafka_start_at_lower_parallelism_after_a_crash_without_checkpoints_ends_the_old_open_transactions() {
    // No checkpoint completes before the kill, so no `_metadata` says the
    // crashed run had 2 subtasks: the sink's own record in Kafka must.
    let yaml = r#"name: @NAME@
parallelism: 2
state: {dir: unused}
checkpoint: {interval: 30s, timeout: 30s}
sources:
  - {name: events, type: kafka, brokers: @BROKERS@, topics: [@IN@],
     properties: {session.timeout.ms: 6000, heartbeat.interval.ms: 1000}}
sinks:
  - {name: out, type: kafka, input: events, brokers: @BROKERS@, topic: @OUT@, delivery: exactly_once,
     properties: {transaction.timeout.ms: 300000}}
"#;
    let job = KJob::new("vanished-nockpt", yaml, false);
    let mut run = job.cmd().spawn();
    let lines: Vec<String> = (0..50).map(|i| format!("{{\"id\":{i}}}")).collect();
    // Partition 1 is subtask 1's.
    produce_to(broker(), &job.input, 1, &lines);
    let sent = wait_until(Duration::from_secs(30), || {
        read_topic(broker(), &job.output, Duration::from_secs(20), "read_uncommitted").len() >= lines.len()
    });
    assert!(sent, "subtask 1 never sent the records into its transaction");
    assert!(kill_after(&mut run, Duration::ZERO), "weir exited by itself");
    assert!(checkpoint_dirs(&job.dir.path().join("state")).iter().all(|d| !d.join("_metadata").exists()), "a checkpoint completed");
    let o = run_until_output(&job, job.cmd_p(1).set("checkpoint.interval", "200ms").arg("--restore").arg("latest"), lines.len());
    o.expect_stderr_contains("Fenced the transactional id of a subtask that no longer exists.");
    let mut got = job.output();
    got.sort();
    let mut want = lines.clone();
    want.sort();
    assert_eq!(got, want, "each record once");
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

#[test]
fn kafka_restored_offset_past_the_end_of_a_recreated_topic_is_not_skipped_silently() {
    // The checkpoint holds offset 100 of partition 0; the topic is then
    // recreated with 30 records. Reading from 100 would skip all of them
    // (and 70 more to come) without a word.
    let job = KJob::new("recreated", PASSTHROUGH, false);
    let first = lines_of(1, 100);
    produce_to(broker(), &job.input, 0, &first);
    run_until_output(&job, job.cmd_p(1), first.len());
    recreate_topic(broker(), &job.input, 3);
    let second = lines_of(2, 30);
    produce_to(broker(), &job.input, 0, &second);
    // Default `fail`: exit 1 naming topic, partition, offset and range.
    let refused = job.cmd_p(1).arg("--restore").arg("latest").spawn().wait_for(Duration::from_secs(60));
    refused.expect_code(1);
    refused.expect_stderr_contains(&format!("restored offset 100 of {}/0 is out of the partition's range 0..=30", job.input));
    // `earliest`: the recreated partition is read from its start.
    let o = run_until_output(
        &job,
        job.cmd_p(1).arg("--restore").arg("latest").set("sources.events.on_offset_out_of_range", "earliest"),
        first.len() + second.len(),
    );
    o.expect_stderr_contains("Kafka offset out of range");
    let mut got = job.output();
    got.sort();
    let mut want: Vec<String> = first.iter().chain(&second).cloned().collect();
    want.sort();
    assert_eq!(got, want, "each record once");
}

#[test]
fn kafka_topic_recreated_while_running_is_not_skipped_silently() {
    // While running at offset 100, the topic is recreated with 30 records:
    // the fetch at 100 is out of range. librdkafka would jump to the start
    // and the source drop everything below 100; with `earliest` it is
    // reported and read.
    let job = KJob::new("recreated-live", PASSTHROUGH, false);
    let first = lines_of(1, 100);
    produce_to(broker(), &job.input, 0, &first);
    let run = job.cmd_p(1).set("sources.events.on_offset_out_of_range", "earliest").spawn();
    assert!(wait_until(Duration::from_secs(30), || job.output().len() >= first.len()), "the first records never arrived");
    recreate_topic(broker(), &job.input, 3);
    let second = lines_of(2, 30);
    produce_to(broker(), &job.input, 0, &second);
    let reached = wait_until(Duration::from_secs(40), || job.output().len() >= first.len() + second.len());
    run.terminate();
    let o = run.wait_for(Duration::from_secs(30));
    assert!(reached, "the recreated topic's records never arrived; log:\n{}", o.stderr);
    o.expect_code(0);
    o.expect_stderr_contains("Kafka offset out of range");
    assert_eq!(job.output().len(), first.len() + second.len());
}

#[test]
fn kafka_crash_before_sink_commit_is_exactly_once() {
    kafka_crash_at("before_sink_commit", 3);
}

#[test]
fn kafka_at_least_once_loses_nothing() {
    let yaml = r#"name: @NAME@
parallelism: 2
state: {dir: unused}
checkpoint: {interval: 150ms, mode: at_least_once}
sources:
  - {name: events, type: kafka, brokers: @BROKERS@, topics: [@IN@], bounded: true, rate_limit: 700,
     properties: {session.timeout.ms: 6000, heartbeat.interval.ms: 1000}}
operators:
  - {name: unique, type: dedup, input: events, key: [id], ttl: 1h}
sinks:
  - {name: out, type: kafka, input: unique, brokers: @BROKERS@, topic: @OUT@, key: [id], delivery: at_least_once}
"#;
    let job = KJob::new("alo", yaml, true);
    let mut rng = Rng::from_env("kafka at least once");
    let mut kills = 0;
    for i in 0..4 {
        let mut run = if i == 0 { job.cmd() } else { job.restore() }.spawn();
        if !kill_after(&mut run, rng.millis(300, 1200)) {
            run.wait_for(RUN_TIMEOUT).expect_code(0);
            break;
        }
        kills += 1;
    }
    job.restore().ok();
    let got: BTreeSet<String> = job.output().iter().map(|l| parse(l)["id"].to_string()).collect();
    let want: BTreeSet<String> = events().iter().map(|l| parse(l)["id"].to_string()).collect();
    let missing: Vec<_> = want.difference(&got).collect();
    assert!(
        missing.is_empty(),
        "at least once after {kills} kills: {} ids lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

#[test]
fn kafka_broker_down_at_start_names_the_brokers() {
    let dir = tmp();
    let port = crate::metrics::free_port();
    let yaml = format!(
        "name: down\nsources:\n  - {{name: in, type: kafka, brokers: 127.0.0.1:{port}, topics: [t], broker_timeout: 2s}}\nsinks:\n  - {{name: out, type: blackhole, input: in}}\n"
    );
    let pipeline = write_pipeline(dir.path(), "down", &yaml);
    let start = Instant::now();
    let o = weir_run(&pipeline, 1).run();
    o.expect_code(1);
    o.expect_stderr_contains(&format!("cannot reach Kafka brokers `127.0.0.1:{port}` within 2s"));
    assert!(start.elapsed() < Duration::from_secs(20), "the wait is bounded: {:?}", start.elapsed());
}

/// Signals during the start: the pipeline is being built (its Kafka source
/// waits up to broker_timeout for unreachable brokers) when two SIGINTs
/// come. The first is kept for the engine; the second exits 130 at once,
/// not when the wait ends. Needs no broker.
#[test]
fn kafka_a_second_sigint_while_connecting_at_start_exits_at_once() {
    let dir = tmp();
    let state = dir.path().join("state");
    let port = crate::metrics::free_port();
    let yaml = format!(
        "name: connecting\nstate: {{dir: {state}}}\ncheckpoint: {{interval: 1s}}\n\
         sources:\n  - {{name: in, type: kafka, brokers: 127.0.0.1:{port}, topics: [t], broker_timeout: 30s}}\n\
         sinks:\n  - {{name: out, type: blackhole, input: in}}\n",
        state = state.display()
    );
    let pipeline = write_pipeline(dir.path(), "connecting", &yaml);
    let run = weir_run(&pipeline, 1).spawn();
    // The PID goes into LOCK once the start is decided: the handlers are
    // installed by then, and the source is about to connect.
    let pid = run.child.id().to_string();
    let lock = state.join("LOCK");
    let decided = wait_until(Duration::from_secs(20), || std::fs::read_to_string(&lock).is_ok_and(|t| t.trim() == pid));
    assert!(decided, "the run never got past its lock");
    std::thread::sleep(Duration::from_millis(200));
    run.interrupt();
    std::thread::sleep(Duration::from_millis(20));
    run.interrupt();
    let o = run.wait_for(Duration::from_secs(60));
    o.expect_code(130);
    o.expect_stderr_contains("Stop requested");
    assert!(o.elapsed < Duration::from_secs(2), "the second SIGINT took {:?}", o.elapsed);
}

#[test]
fn kafka_broker_gone_mid_run_retries_then_fails() {
    // A broker of its own, stopped while the pipeline reads from it.
    let (addr, dir) = start_script_broker();
    let input = topic("gone-in");
    create_topic(&addr, &input, 1);
    produce(&addr, &input, &events()[..100]);
    let tmpd = tmp();
    let yaml = format!(
        "name: gone\nsources:\n  - {{name: in, type: kafka, brokers: '{addr}', topics: [{input}], broker_timeout: 4s}}\nsinks:\n  - {{name: out, type: blackhole, input: in}}\n"
    );
    let pipeline = write_pipeline(tmpd.path(), "gone", &yaml);
    let run = weir_run(&pipeline, 1).spawn();
    std::thread::sleep(Duration::from_secs(2));
    stop_script_broker(&dir);
    let o = run.wait_for(Duration::from_secs(40));
    o.expect_code(1);
    o.expect_stderr_contains("Kafka brokers unreachable; librdkafka keeps reconnecting with backoff.");
    o.expect_stderr_contains(&format!("Kafka brokers `{addr}` unreachable for"));
}

/// The broker stops under an exactly-once sink whose subtasks then sit in
/// blocking producer calls (flush, commit) for up to broker_timeout: the
/// control socket still answers `status` and a second SIGTERM exits 130 at
/// once. Both sink subtasks are chained into the source tasks, so with
/// those calls on the runtime's two workers nothing else would run.
#[test]
fn kafka_broker_down_status_answers_and_a_second_sigterm_exits_at_once() {
    let (addr, dir) = start_script_broker();
    let output = topic("down-status-out");
    create_topic(&addr, &output, 2);
    let tmpd = tmp();
    let state = tmpd.path().join("state");
    let yaml = format!(
        "name: down-status-{pid}\nparallelism: 2\nstate: {{dir: {state}}}\ncheckpoint: {{interval: 200ms}}\n\
         sources:\n  - {{name: gen, type: datagen, rate_limit: 2000, fields: {{id: {{kind: sequence}}}}}}\n\
         sinks:\n  - {{name: out, type: kafka, input: gen, brokers: '{addr}', topic: {output}, key: [id], delivery: exactly_once, broker_timeout: 60s}}\n",
        pid = std::process::id(),
        state = state.display()
    );
    let pipeline = write_pipeline(tmpd.path(), "down_status", &yaml);
    let run = weir_run(&pipeline, 2).spawn();
    let socket = state.join("control.sock");
    let checkpointed = wait_until(Duration::from_secs(30), || {
        control_request(&socket, r#"{"status": {}}"#, Duration::from_secs(2))
            .is_ok_and(|s| s["last_checkpoint"].as_u64().is_some_and(|c| c >= 2))
    });
    assert!(checkpointed, "no checkpoint committed while the broker was up");
    stop_script_broker(&dir);
    // Long enough for the next barrier to reach both sinks, which then wait
    // for the brokers (there is nothing to poll for from outside).
    std::thread::sleep(Duration::from_millis(1500));
    let asked = Instant::now();
    let status = control_request(&socket, r#"{"status": {}}"#, Duration::from_secs(5));
    let waited = asked.elapsed();
    run.terminate();
    std::thread::sleep(Duration::from_millis(20));
    run.terminate();
    let o = run.wait_for(Duration::from_secs(90));
    let status = status.unwrap_or_else(|e| panic!("status with the broker down: {e}; log:\n{}", o.stderr));
    assert_eq!(status["ok"].as_bool(), Some(true), "{status}");
    assert!(waited < Duration::from_secs(2), "status took {waited:?} with the broker down");
    o.expect_code(130);
    o.expect_stderr_contains("Stop requested");
    assert!(o.elapsed < Duration::from_secs(2), "the second SIGTERM took {:?} with the broker down", o.elapsed);
}

#[test]
fn kafka_restore_from_savepoint_resumes_at_the_recorded_offsets() {
    // Unbounded passthrough: half the input, stop with a savepoint, the
    // other half, restore: every record exactly once.
    let yaml = r#"name: @NAME@
parallelism: 2
state: {dir: unused}
checkpoint: {interval: 200ms}
sources:
  - {name: events, type: kafka, brokers: @BROKERS@, topics: [@IN@],
     properties: {session.timeout.ms: 6000, heartbeat.interval.ms: 1000}}
sinks:
  - {name: out, type: kafka, input: events, brokers: @BROKERS@, topic: @OUT@, delivery: exactly_once}
"#;
    let job = KJob::new("savepoint", yaml, false);
    let all = events();
    let (first, second) = all.split_at(all.len() / 2);
    produce(broker(), &job.input, first);
    let run = job.cmd().spawn();
    let sock = job.dir.path().join("state/control.sock");
    assert!(wait_until(Duration::from_secs(20), || sock.exists()), "no control socket");
    assert!(
        wait_until(Duration::from_secs(30), || read_committed(broker(), &job.output, Duration::from_secs(30)).len() >= first.len()),
        "the first half never reached the output"
    );
    let target = job.dir.path().join("sps");
    let trig = weir(&["savepoint", "trigger", &job.pipeline, "--stop", "--target", &target.display().to_string()])
        .set("state.dir", job.dir.path().join("state"))
        .run();
    let target = super::savepoint::savepoint_path(&trig);
    run.wait_for(Duration::from_secs(30)).expect_code(0);
    produce(broker(), &job.input, second);
    let resumed = weir(&["restore", &target.display().to_string(), &job.pipeline, "--no-progress", "-p", "2"])
        .set("state.dir", job.dir.path().join("state"))
        .spawn();
    let total = all.len();
    let done = wait_until(Duration::from_secs(30), || read_committed(broker(), &job.output, Duration::from_secs(30)).len() >= total);
    resumed.terminate();
    let o = resumed.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    assert!(done, "output never reached {total} records; log:\n{}", o.stderr);
    let mut got = job.output();
    let mut want = all.clone();
    got.sort();
    want.sort();
    assert_eq!(got.len(), want.len(), "each record exactly once across the savepoint");
    assert_eq!(got, want);
}

#[test]
fn kafka_example_pipeline_runs_against_the_test_broker() {
    // pipelines/kafka.yaml reads `orders` and writes `order_totals`; run it
    // on topics of its own.
    let b = broker();
    let (input, output) = (topic("example-in"), topic("example-out"));
    create_topic(b, &input, 2);
    let orders = input_lines("testdata/inputs/orders.jsonl");
    produce_raw(b, &input, &orders);
    let dir = tmp();
    let o = weir_run("pipelines/kafka.yaml", 2)
        .set("state.dir", dir.path().join("state"))
        .set("sources.orders.brokers", b)
        .set("sources.orders.topics.0", &input)
        .set("sources.orders.bounded", "true")
        .set("sinks.totals.brokers", b)
        .set("sinks.totals.topic", &output)
        .run();
    o.expect_code(0);
    let got = read_committed(b, &output, Duration::from_secs(30));
    assert!(!got.is_empty(), "no output; log:\n{}", o.stderr);
    let by_user: HashMap<String, usize> = got.iter().fold(HashMap::new(), |mut m, l| {
        *m.entry(parse(l)["user"].to_string()).or_default() += 1;
        m
    });
    assert!(by_user.len() > 1, "{by_user:?}");
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

#[test]
fn kafka_a_second_run_on_the_state_dir_neither_fences_nor_disturbs_the_running_one() {
    // The newcomer's producers would fence the running pipeline's (same
    // transactional ids): it must be refused before opening any connector.
    let want = canon(clean_windowed());
    let job = KJob::new("second-run", WINDOWED, true);
    let first = job.cmd().spawn();
    let state = job.dir.path().join("state");
    assert!(wait_until(Duration::from_secs(30), || state.join("control.sock").exists()), "the first run did not start");
    let o = job.cmd().run();
    o.expect_code(2);
    o.expect_stderr_contains(&format!("is in use by weir process {}", first.child.id()));
    let done = first.wait_for(RUN_TIMEOUT);
    done.expect_code(0);
    assert!(!done.stderr.contains("Checkpoint aborted."), "{}", done.stderr);
    assert_same_multiset("kafka, a second run refused while the first ran", canon(&job.output()), want);
}

/// `1500054` as `1 500 054`, as the sink's errors write sizes.
fn grouped(n: usize) -> String {
    let s = n.to_string();
    s.chars().enumerate().fold(String::new(), |mut out, (i, c)| {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
        out
    })
}

#[test]
fn kafka_sink_record_over_message_max_bytes_follows_on_error_and_names_both_sizes() {
    let dir = tmp();
    let input = dir.path().join("in.jsonl");
    let big = format!(r#"{{"id":2,"blob":"{}"}}"#, "x".repeat(1_500_000));
    std::fs::write(&input, format!("{{\"id\":1}}\n{big}\n{{\"id\":3}}\n")).unwrap();
    let dead = dir.path().join("refused.jsonl");
    let yaml = |on_error: &str| {
        format!(
            "name: @NAME@\nparallelism: 1\nstate: {{dir: unused}}\ncheckpoint: {{interval: 200ms}}\nsources:\n  - {{name: rows, type: file, path: {}}}\nsinks:\n  - {{name: out, type: kafka, input: rows, brokers: @BROKERS@, topic: @OUT@{on_error}}}\n",
            input.display()
        )
    };
    // key and value plus librdkafka's 36 bytes of record framing.
    let want = format!("record of {} bytes", grouped(big.len() + 36));

    // fail (the default): decided before sending, naming the size and the limit.
    let job = KJob::new("toolarge-fail", &yaml(""), false);
    let o = job.cmd_p(1).run();
    assert_ne!(o.code(), Some(0), "a refused record must fail the pipeline:\n{}", o.stderr);
    assert!(o.stderr.contains(&want) && o.stderr.contains("message.max.bytes 1 000 000"), "{}", o.stderr);

    // dead_letter: the other records are written, the refused one is in the file.
    let on_error = format!(", on_error: dead_letter, dead_letter: {}", dead.display());
    let job = KJob::new("toolarge-dl", &yaml(&on_error), false);
    job.cmd_p(1).ok();
    let ids: BTreeSet<String> = job.output().iter().map(|l| parse(l)["id"].to_string()).collect();
    assert_eq!(ids, BTreeSet::from(["1".to_string(), "3".to_string()]));
    let letters = std::fs::read_to_string(&dead).unwrap();
    let letters: Vec<serde_json::Value> = letters.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(letters.len(), 1, "{letters:?}");
    let reason = letters[0]["reason"].as_str().unwrap();
    assert!(reason.contains(&want) && reason.contains("message.max.bytes 1 000 000"), "{reason}");
    assert_eq!(letters[0]["record"].as_str(), Some(big.as_str()));

    // skip, with a lower limit set in properties: only what fits is written.
    let small = format!(", on_error: skip, properties: {{message.max.bytes: {}}}", 10_000);
    let job = KJob::new("toolarge-skip", &yaml(&small), false);
    job.cmd_p(1).ok();
    let ids: BTreeSet<String> = job.output().iter().map(|l| parse(l)["id"].to_string()).collect();
    assert_eq!(ids, BTreeSet::from(["1".to_string(), "3".to_string()]));
}

/// The metrics endpoint reports each assigned partition's lag from the
/// consumer's statistics: above 0 while a rate-limited source is behind,
/// 0 once it has read everything.
#[test]
fn kafka_consumer_lag_per_partition_is_exported_and_falls_to_zero() {
    use super::metrics::{free_port, scrape, value};
    let input = topic("lag");
    create_topic(broker(), &input, 2);
    let lines = lines_of(1, 2000);
    produce(broker(), &input, &lines);
    let dir = tmp();
    let pipeline = dir.path().join("p.yaml");
    std::fs::write(
        &pipeline,
        format!(
            "name: lagging\nstate: {{dir: {}}}\nsources:\n  - {{name: events, type: kafka, brokers: {}, topics: [{input}], rate_limit: 300, broker_timeout: 10s}}\nsinks:\n  - {{name: out, type: blackhole, input: events}}\n",
            dir.path().join("st").display(),
            broker()
        ),
    )
    .unwrap();
    let port = free_port();
    let run = weir_run(pipeline.to_str().unwrap(), 1).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).spawn();
    let lag = |t: &str, p: u32| value(t, "weir_kafka_consumer_lag", &[&format!(r#"topic="{input}""#), &format!(r#"partition="{p}""#)]);
    let mut behind = None;
    let saw_lag = wait_until(Duration::from_secs(30), || {
        behind = scrape(port).filter(|t| lag(t, 0).is_some() && lag(t, 1).is_some() && lag(t, 0).unwrap() + lag(t, 1).unwrap() > 0.0);
        behind.is_some()
    });
    // `weir status` says it too (this pipeline has no checkpoints): the
    // source's lag and its most lagging partition.
    let status = || {
        let o = weir(&["status", pipeline.to_str().unwrap(), "--json"]).run();
        serde_json::from_str::<serde_json::Value>(o.stdout.trim()).unwrap_or_default()
    };
    let mut doc = serde_json::Value::Null;
    let status_lag = wait_until(Duration::from_secs(10), || {
        doc = status();
        doc["live"]["kafka_lag"][0]["records"].as_i64() > Some(0)
    });
    assert!(status_lag, "no lag in `weir status --json`: {doc}");
    assert_eq!(doc["live"]["kafka_lag"][0]["operator"], "events", "{doc}");
    assert_eq!(doc["live"]["kafka_lag"][0]["worst"]["topic"], input.as_str(), "{doc}");
    let mut last = String::new();
    let caught_up = wait_until(Duration::from_secs(30), || {
        last = scrape(port).unwrap_or_default();
        value(&last, "weir_records_out_total", &[r#"operator="events""#]) == Some(2000.0)
            && lag(&last, 0) == Some(0.0)
            && lag(&last, 1) == Some(0.0)
    });
    run.terminate();
    let o = run.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    assert!(saw_lag, "no lag above 0 on both partitions within 30 s; log:\n{}", o.stderr);
    let behind = behind.unwrap();
    assert!(behind.contains(r#"operator="events",subtask="0""#), "{behind}");
    assert!(lag(&behind, 0).unwrap() + lag(&behind, 1).unwrap() <= 2000.0, "{behind}");
    assert!(caught_up, "lag not 0 after reading everything; last scrape:\n{last}");
}

/// An exactly-once sink's committed records, open and pending transactions
/// on the metrics endpoint: what it counted as committed a read_committed
/// reader sees.
#[test]
fn kafka_sink_committed_records_and_transactions_are_exported() {
    use super::metrics::{free_port, scrape, value};
    let out = topic("committed");
    create_topic(broker(), &out, 1);
    let dir = tmp();
    let pipeline = dir.path().join("p.yaml");
    std::fs::write(
        &pipeline,
        format!(
            "name: committing\nstate: {{dir: {}}}\ncheckpoint: {{interval: 300ms}}\nsources:\n  - {{name: gen, type: datagen, rate_limit: 1000, fields: {{id: {{kind: sequence}}}}}}\nsinks:\n  - {{name: out, type: kafka, input: gen, brokers: {}, topic: {out}, key: [id], delivery: exactly_once}}\n",
            dir.path().join("st").display(),
            broker()
        ),
    )
    .unwrap();
    let port = free_port();
    let run = weir_run(pipeline.to_str().unwrap(), 1).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).spawn();
    let committed = |t: &str| value(t, "weir_sink_records_committed_total", &[r#"operator="out""#, r#"subtask="0""#]);
    let mut text = String::new();
    let seen = wait_until(Duration::from_secs(30), || {
        text = scrape(port).unwrap_or_default();
        committed(&text) >= Some(300.0)
    });
    run.terminate();
    let o = run.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    assert!(seen, "300 committed records not seen within 30 s; last scrape:\n{text}\nlog:\n{}", o.stderr);
    for gauge in ["weir_sink_transactions_open", "weir_sink_transactions_pending"] {
        let v = value(&text, gauge, &[r#"operator="out""#]).unwrap_or_else(|| panic!("no {gauge} in:\n{text}"));
        assert!(v == 0.0 || v == 1.0, "{gauge} {v}");
    }
    // Committed means visible: the final checkpoint committed more since.
    let visible = read_committed(broker(), &out, Duration::from_secs(30)).len() as f64;
    let counted = committed(&text).unwrap();
    assert!(counted <= visible && visible > 0.0, "counted {counted} committed, {visible} visible");
}

/// An at-least-once sink's committed records are those the broker
/// acknowledged by the barrier of a checkpoint that completed. After a
/// bounded run: every record, the topic's count. After a kill -9 and a
/// restore, the restored run counts (from zero) what it sent, all of it
/// covered by its final checkpoint; the records after the restored
/// checkpoint are in the topic twice, nothing is missing.
#[test]
fn kafka_at_least_once_sink_counts_what_completed_checkpoints_cover_as_committed() {
    use super::metrics::{summary_committed, summary_count};
    const ROWS: usize = 1500;
    let pipeline = |dir: &std::path::Path, out: &str| {
        let path = dir.join("p.yaml");
        std::fs::write(
            &path,
            format!(
                "name: alo_committed\nstate: {{dir: {}}}\ncheckpoint: {{interval: 100ms}}\nsources:\n  - {{name: gen, type: datagen, rows: {ROWS}, rate_limit: 3000, fields: {{id: {{kind: sequence}}}}}}\nsinks:\n  - {{name: out, type: kafka, input: gen, brokers: {}, topic: {out}, key: [id], delivery: at_least_once}}\n",
                dir.join("st").display(),
                broker()
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let ids = |lines: &[String]| lines.iter().map(|l| parse(l)["id"].to_string()).collect::<BTreeSet<_>>();
    // A bounded run.
    let (dir, out) = (tmp(), topic("alo-committed"));
    create_topic(broker(), &out, 1);
    let o = weir_run(&pipeline(dir.path(), &out), 1).ok();
    let in_topic = read_topic(broker(), &out, Duration::from_secs(30), "read_uncommitted");
    assert_eq!(summary_committed(&o.stderr, "out"), ROWS as u64, "{}", o.stderr);
    assert_eq!(in_topic.len(), ROWS);
    // Killed after its first checkpoint completed, then restored.
    let (dir, out) = (tmp(), topic("alo-committed-restored"));
    create_topic(broker(), &out, 1);
    let p = pipeline(dir.path(), &out);
    let mut first = weir_run(&p, 1).spawn();
    let checkpointed =
        wait_until(Duration::from_secs(30), || checkpoint_dirs(&dir.path().join("st")).iter().any(|c| c.join("_metadata").exists()));
    assert!(checkpointed, "no checkpoint completed within 30 s");
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let o = weir_run(&p, 1).arg("--restore").arg("latest").ok();
    let (committed, given) = (summary_committed(&o.stderr, "out"), summary_count(&o.stderr, "out", "in"));
    assert!(given > 0 && (given as usize) < ROWS, "the restored run resumes midway: {}", o.stderr);
    assert_eq!(committed, given, "{}", o.stderr);
    let in_topic = read_topic(broker(), &out, Duration::from_secs(30), "read_uncommitted");
    assert_eq!(ids(&in_topic).len(), ROWS, "nothing lost");
    // The first run's records up to the restored position were acknowledged before its barrier.
    assert!(in_topic.len() >= ROWS - given as usize + committed as usize, "{} records in the topic", in_topic.len());
}

/// What the cluster's repartition topics rely on (docs/scaling.md, "The
/// test broker"): a `read_committed` consumer that was waiting on an open
/// transaction, which then aborts (its producer restarts and fences it, as
/// after a `kill -9` of an instance), goes on to see the same producer's
/// later committed records. Apache Kafka returns an aborted transaction to
/// a fetch only while the fetch range still overlaps it; noida-db 0.2.3
/// returned it to later fetches too, so librdkafka took every later batch
/// of that producer id for aborted and skipped it: a fresh consumer read
/// them all (the "fresh reader" assertion), the live reader never got them.
/// It fails on the unpatched noida-db; scripts/noida-patches/0001 fixes it.
#[test]
fn broker_live_read_committed_reader_sees_commits_after_an_abort_of_the_same_producer() {
    let b = broker();
    let t = topic("abort-then-commit");
    create_topic(b, &t, 1);
    let reader: BaseConsumer = config(b)
        .set("group.id", format!("weir-test-live-{}", std::process::id()))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&t, 0, Offset::Beginning).unwrap();
    reader.assign(&tpl).unwrap();
    let read_for = |c: &BaseConsumer, d: Duration| {
        let (start, mut out) = (Instant::now(), Vec::new());
        while start.elapsed() < d {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
                out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
            }
        }
        out
    };
    let txn = |id: &str| -> rdkafka::producer::BaseProducer {
        let p: rdkafka::producer::BaseProducer = config(b).set("transactional.id", id).create().expect("producer");
        p.init_transactions(Duration::from_secs(10)).expect("init_transactions");
        p
    };
    let id = format!("weir-test-{t}");
    // A transaction left open, as by a killed producer; the reader waits on it.
    let dead = txn(&id);
    dead.begin_transaction().unwrap();
    dead.send(BaseRecord::<str, str>::to(&t).payload("aborted")).map_err(|(e, _)| e).unwrap();
    dead.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(read_for(&reader, Duration::from_secs(1)), Vec::<String>::new(), "an open transaction is not read");
    // The restarted producer fences it (an abort) and commits.
    let live = txn(&id);
    live.begin_transaction().unwrap();
    live.send(BaseRecord::<str, str>::to(&t).payload("committed")).map_err(|(e, _)| e).unwrap();
    live.commit_transaction(Duration::from_secs(10)).unwrap();
    drop(dead);
    let fresh = read_committed(b, &t, Duration::from_secs(10));
    assert_eq!(fresh, ["committed"], "a fresh reader");
    assert_eq!(read_for(&reader, Duration::from_secs(3)), ["committed"], "the reader that waited on the aborted transaction");
}

/// The test broker is stopped (`scripts/kafka-broker.sh stop`) and started
/// again on the same data directory and port while one transactional
/// producer commits transactions in a loop and another holds a transaction
/// open (a record produced before, one after, then the commit): every
/// transaction whose commit succeeded is read back whole by a
/// `read_committed` consumer, none other is, and no producer fails.
/// noida-db 0.2.3 lost the transactions committed while its shutdown save
/// was being written (the looping producer then failed with
/// OUT_OF_ORDER_SEQUENCE_NUMBER) and the one open at the stop (its commit
/// succeeded, its records stayed aborted); scripts/noida-patches/0003
/// fixes both. A broker of its own, whatever `KAFKA_BOOTSTRAP` names: it is
/// a test of the test broker.
#[test]
fn broker_restart_keeps_every_committed_transaction() {
    let (addr, dir) = start_script_broker();
    let t = topic("restart-txn");
    create_topic(&addr, &t, 2);
    let port = addr.rsplit(':').next().unwrap().to_string();
    let held: ThreadedProducer<DefaultProducerContext> =
        config(&addr).set("transactional.id", format!("weir-test-held-{t}")).create().expect("producer");
    held.init_transactions(Duration::from_secs(10)).expect("init_transactions");
    held.begin_transaction().expect("begin_transaction");
    held.send(BaseRecord::<str, str>::to(&t).payload("held-before").partition(0)).map_err(|(e, _)| e).unwrap();
    held.flush(Duration::from_secs(10)).expect("flush");
    let producer: ThreadedProducer<DefaultProducerContext> =
        config(&addr).set("transactional.id", format!("weir-test-{t}")).set("linger.ms", "5").create().expect("producer");
    producer.init_transactions(Duration::from_secs(10)).expect("init_transactions");
    let restarted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let restart = {
        let (dir, port, restarted) = (dir.clone(), port.clone(), restarted.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            stop_script_broker(&dir);
            let script = repo().join("scripts/kafka-broker.sh");
            let out = Command::new(script).args(["start", "--data-dir", &dir, "--port", &port]).stderr(Stdio::inherit()).output().unwrap();
            assert!(out.status.success(), "restarting the broker failed");
            restarted.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    // Transactions until 2 s after the restart and at least 5 committed
    // after it.
    let (mut committed, mut aborted, mut committed_after) = (BTreeSet::new(), 0, 0);
    let mut after_restart = None;
    for n in 0u64.. {
        let up_again = restarted.load(std::sync::atomic::Ordering::SeqCst);
        if up_again && after_restart.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(2) && committed_after >= 5 {
            break;
        }
        producer.begin_transaction().expect("begin_transaction");
        for i in 0..10 {
            let v = format!("{n}-{i}");
            let mut rec = BaseRecord::<str, str>::to(&t).payload(&v).partition(i % 2);
            while let Err((_, back)) = producer.send(rec) {
                std::thread::sleep(Duration::from_millis(5));
                rec = back;
            }
        }
        match producer.commit_transaction(Duration::from_secs(30)) {
            Ok(()) => {
                committed.insert(n);
                committed_after += u32::from(up_again);
            }
            Err(KafkaError::Transaction(e)) if e.txn_requires_abort() => {
                producer.abort_transaction(Duration::from_secs(30)).expect("abort_transaction");
                aborted += 1;
            }
            Err(e) => panic!("transaction {n}: {e} (committed before: {})", committed.len()),
        }
    }
    restart.join().unwrap();
    held.send(BaseRecord::<str, str>::to(&t).payload("held-after").partition(1)).map_err(|(e, _)| e).unwrap();
    held.commit_transaction(Duration::from_secs(30)).expect("committing the transaction held open across the restart");
    let (mut seen, mut held_seen): (HashMap<u64, usize>, Vec<String>) = (HashMap::new(), Vec::new());
    for v in read_committed(&addr, &t, Duration::from_secs(30)) {
        match v.split('-').next().unwrap().parse() {
            Ok(n) => *seen.entry(n).or_default() += 1,
            Err(_) => held_seen.push(v),
        }
    }
    held_seen.sort();
    assert_eq!(held_seen, ["held-after", "held-before"], "the transaction held open across the restart");
    let lost: Vec<_> = committed.iter().filter(|n| seen.get(n) != Some(&10)).map(|n| (n, seen.get(n).copied().unwrap_or(0))).collect();
    let extra: Vec<_> = seen.keys().filter(|n| !committed.contains(n)).collect();
    assert!(lost.is_empty(), "committed transactions not read back whole (transaction, records): {lost:?}");
    assert!(extra.is_empty(), "records of transactions not committed: {extra:?}");
    eprintln!("{} transactions committed across the restart, {aborted} aborted", committed.len());
    stop_script_broker(&dir);
}

/// An idle `read_committed` consumer does not make the broker answer a
/// stream of empty fetches: like Kafka, the broker holds a fetch with
/// nothing to return for `fetch.wait.max.ms` (500 ms), so a second of idle
/// reading costs about two fetches. noida-db 0.2.3 answered at once, so
/// librdkafka fetched several times a millisecond;
/// scripts/noida-patches/0002 fixes it. Counted by librdkafka's own
/// statistics (requests sent per type), over 3 s.
#[test]
fn broker_holds_an_empty_fetch_for_its_max_wait() {
    use rdkafka::client::ClientContext;
    use rdkafka::consumer::ConsumerContext;
    use rdkafka::statistics::Statistics;
    struct Fetches(std::sync::Mutex<Option<i64>>);
    impl ClientContext for Fetches {
        fn stats(&self, s: Statistics) {
            *self.0.lock().unwrap() = Some(s.brokers.values().filter_map(|b| b.req.get("Fetch")).sum());
        }
    }
    impl ConsumerContext for Fetches {}
    let b = broker();
    let t = topic("idle-fetch");
    create_topic(b, &t, 1);
    let consumer: BaseConsumer<Fetches> = config(b)
        .set("group.id", format!("weir-test-idle-{}", std::process::id()))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "500")
        .set("statistics.interval.ms", "250")
        .create_with_context(Fetches(std::sync::Mutex::new(None)))
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&t, 0, Offset::Beginning).unwrap();
    consumer.assign(&tpl).unwrap();
    let poll_for = |d: Duration| {
        let start = Instant::now();
        while start.elapsed() < d {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
                panic!("a record in an empty topic at offset {}", m.offset());
            }
        }
        consumer.context().0.lock().unwrap().expect("no statistics from librdkafka")
    };
    let before = poll_for(Duration::from_secs(2));
    let fetches = poll_for(Duration::from_secs(3)) - before;
    assert!(fetches <= 30, "{fetches} fetches in 3 s of an idle consumer (fetch.wait.max.ms 500: about 6)");
}

/// A frozen broker (SIGSTOP: its connections stay open, so librdkafka sees
/// no outage) under an exactly-once sink: the wait is logged when it
/// begins, every 10 s while it lasts and when it ends, not once a second;
/// after it the run goes on and every record is committed once.
#[test]
fn kafka_a_frozen_broker_is_logged_when_it_goes_while_it_lasts_and_when_it_returns() {
    let (addr, dir) = start_script_broker();
    let output = topic("frozen-out");
    create_topic(&addr, &output, 1);
    let rows = 3000;
    let tmpd = tmp();
    let yaml = format!(
        "name: frozen\nstate: {{dir: '{state}'}}\ncheckpoint: {{interval: 500ms, timeout: 20s, tolerable_failures: 10}}\n\
         sources:\n  - {{name: gen, type: datagen, rows: {rows}, rate_limit: 200, fields: {{id: {{kind: sequence}}}}}}\n\
         sinks:\n  - {{name: out, type: kafka, input: gen, brokers: '{addr}', topic: {output}, delivery: exactly_once, broker_timeout: 40s}}\n",
        state = tmpd.path().join("state").display()
    );
    let pipeline = write_pipeline(tmpd.path(), "frozen", &yaml);
    let run = weir_run(&pipeline, 1).spawn();
    std::thread::sleep(Duration::from_secs(4));
    let pid = broker_pid(&dir);
    let signal = |sig: &str| assert!(Command::new("kill").arg(format!("-{sig}")).arg(&pid).status().unwrap().success());
    signal("STOP");
    std::thread::sleep(Duration::from_secs(14));
    signal("CONT");
    let o = run.wait_for(Duration::from_secs(90));
    o.expect_code(0);
    let waiting = o.stderr.lines().filter(|l| l.contains("Kafka flush is waiting for the brokers")).count();
    assert!((1..=2).contains(&waiting), "{waiting} waiting lines for a 14 s freeze (one at once, one after 10 s):\n{}", o.stderr);
    o.expect_stderr_contains("Kafka flush done: the brokers acknowledged again.");
    let got = read_committed(&addr, &output, Duration::from_secs(20));
    let ids: BTreeSet<i64> = got.iter().map(|l| parse(l)["id"].as_i64().unwrap()).collect();
    assert_eq!((got.len(), ids.len()), (rows, rows), "every record committed once");
}

/// The process id of the test broker serving `dir`.
fn broker_pid(dir: &str) -> String {
    let o = Command::new("pgrep").args(["-f", &format!("noida-db start.*--data-dir {dir}$")]).output().unwrap();
    let pid = String::from_utf8(o.stdout).unwrap().lines().next().map(str::to_string);
    pid.unwrap_or_else(|| panic!("no broker process for {dir}"))
}

//! The sink's limits, and what the metrics endpoint reports of Kafka sources and sinks: message size, consumer lag, committed records, transactions.

use super::*;

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
    use crate::metrics::{free_port, scrape, value};
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
    use crate::metrics::{free_port, scrape, value};
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
    use crate::metrics::{summary_committed, summary_count};
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

//! Exactly once through Kafka: crash loops, crashes at protocol points, restores at other parallelisms (fencing the vanished subtasks' transactions), savepoints, the example pipeline, a second run on the state directory.

use super::*;

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
    let target = crate::savepoint::savepoint_path(&trig);
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

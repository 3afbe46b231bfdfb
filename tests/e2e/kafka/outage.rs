//! Brokers down at start, gone mid-run, frozen: what the run logs, how it fails, and that signals and status still work.

use super::*;

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

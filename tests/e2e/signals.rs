//! Stopping an unbounded pipeline with SIGTERM: a clean drain, exit 0.

use std::time::Duration;

use super::ckpt::write_pipeline;
use super::util::{hidden_files, part_files, sink_lines, tmp, wait_until, weir_run, Running};

/// Wait until the sink has started writing (a hidden in-progress part file
/// exists), so the stop interrupts a pipeline that is moving data.
#[track_caller]
pub fn wait_for_output(run: &Running, dir: &std::path::Path) {
    let started = wait_until(Duration::from_secs(20), || !hidden_files(dir).is_empty() || !part_files(dir).is_empty());
    assert!(started, "no output in {} within 20 s (pid {})", dir.display(), run.child.id());
}

#[test]
fn sigterm_drains_and_leaves_only_complete_part_files() {
    for p in [1, 2] {
        let dir = tmp();
        let out = dir.path().join("out");
        let run = weir_run("pipelines/unbounded.yaml", p).set("sinks.out.path", &out).spawn();
        wait_for_output(&run, &out);
        run.terminate();
        let o = run.wait_for(Duration::from_secs(10));
        o.expect_code(0);
        assert!(o.elapsed < Duration::from_secs(5), "stopping took {:?}", o.elapsed);
        assert!(hidden_files(&out).is_empty(), "in-progress files left: {:?}", hidden_files(&out));
        let lines = sink_lines(&out);
        assert!(!lines.is_empty(), "the drained part files hold the records");
        let mut seqs = Vec::new();
        for l in &lines {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("torn line ({e}): {l:?}"));
            assert!(v["device"].as_str().is_some_and(|d| d.starts_with("dev-")), "{l}");
            seqs.push(v["n"].as_u64().expect("n is the row number"));
        }
        assert_no_gaps(&mut seqs, p as u64);
    }
}

/// Datagen subtask i of p emits rows i, i+p, ...: whatever a subtask emitted
/// before the stop must all be in the output, with no row twice.
fn assert_no_gaps(seqs: &mut [u64], p: u64) {
    seqs.sort_unstable();
    for r in 0..p {
        let mine: Vec<u64> = seqs.iter().copied().filter(|n| n % p == r).collect();
        let want: Vec<u64> = (0..mine.len() as u64).map(|k| r + k * p).collect();
        assert!(mine == want, "subtask {r}/{p}: rows lost or repeated in the drain (got {} rows, last {:?})", mine.len(), mine.last());
    }
}

#[test]
fn windows_fire_on_the_watermark_before_the_input_ends() {
    // 1 row per ms of event time: every fired 1 s window holds 1000 rows over
    // all devices. A stop does not fire open windows, so every window in the
    // output must be complete.
    for p in [1, 2] {
        let dir = tmp();
        let out = dir.path().join("out");
        let run = weir_run("pipelines/live_windows.yaml", p).set("sinks.out.path", &out).set("sinks.out.max_file_bytes", "1").spawn();
        let fired = wait_until(Duration::from_secs(20), || sink_lines(&out).len() >= 10);
        assert!(fired, "-p {p}: no window results published while running");
        run.terminate();
        run.wait_for(Duration::from_secs(10)).expect_code(0);
        let mut per_window: std::collections::BTreeMap<i64, i64> = Default::default();
        for l in sink_lines(&out) {
            let o = super::records::parse(&l);
            assert_eq!(o.keys().collect::<Vec<_>>(), ["device", "window_start", "window_end", "n", "total"], "{l}");
            *per_window.entry(o["window_start"].as_i64().unwrap()).or_default() += o["n"].as_i64().unwrap();
        }
        for (start, n) in per_window {
            assert_eq!(n, 1000, "-p {p}: window at {start} has {n} rows over all devices");
        }
    }
}

/// Two SIGTERMs a few milliseconds apart while the stop's final checkpoint
/// is held up (a stalled subtask): the second one exits 130 at once. The
/// handlers are installed once for the whole run, so no signal is lost
/// between the first being handled and the next being awaited.
#[test]
fn a_second_sigterm_right_after_the_first_exits_at_once() {
    for gap_ms in [10, 40] {
        let dir = tmp();
        let out = dir.path().join("out");
        let pipeline = dir.path().join("p.yaml");
        let yaml = format!(
            "name: two_signals\nparallelism: 1\nstate: {{dir: {state}}}\ncheckpoint: {{interval: 1h}}\n\
             sources:\n  - {{name: gen, type: datagen, rate_limit: 2000, fields: {{n: {{kind: sequence}}}}}}\n\
             operators:\n  - {{name: unique, type: dedup, input: gen, key: [n]}}\n\
             sinks:\n  - {{name: out, type: file, input: unique, path: {out}}}\n",
            state = dir.path().join("state").display(),
            out = out.display()
        );
        std::fs::write(&pipeline, yaml).unwrap();
        let run = weir_run(pipeline.to_str().unwrap(), 1).env("WEIR_FAULTS", "stall=unique:0:30s").spawn();
        wait_for_output(&run, &out);
        run.terminate();
        std::thread::sleep(Duration::from_millis(gap_ms));
        run.terminate();
        let o = run.wait_for(Duration::from_secs(20));
        o.expect_code(130);
        assert!(o.elapsed < Duration::from_secs(5), "gap {gap_ms} ms: the second SIGTERM took {:?}", o.elapsed);
    }
}

/// A restore that takes long (every task's state restore stalls 30 s, as a
/// large RocksDB state would) must not hold signals up: the restores run
/// off the runtime's workers (two on two cores, fewer than the four tasks
/// restoring here), and the second SIGINT exits 130 from its handler.
#[test]
fn a_second_sigint_during_a_slow_restore_exits_at_once() {
    let dir = tmp();
    let state = dir.path().join("state");
    let yaml = format!(
        "name: slow_restore\nparallelism: 2\nstate: {{dir: {state}, backend: rocksdb}}\ncheckpoint: {{interval: 50ms}}\n\
         sources:\n  - {{name: gen, type: datagen, rows: 2000, fields: {{n: {{kind: sequence}}}}}}\n\
         operators:\n  - {{name: unique, type: dedup, input: gen, key: [n]}}\n\
         sinks:\n  - {{name: out, type: file, input: unique, path: {out}}}\n",
        state = state.display(),
        out = dir.path().join("out").display()
    );
    let pipeline = write_pipeline(dir.path(), "slow_restore", &yaml);
    weir_run(&pipeline, 2).ok();
    let run = weir_run(&pipeline, 2).arg("--restore").arg("latest").env("WEIR_FAULTS", "restore_stall=30s").spawn();
    // The socket is bound just before the tasks start restoring.
    let socket = state.join("control.sock");
    assert!(wait_until(Duration::from_secs(20), || socket.exists()), "the restoring run never started");
    std::thread::sleep(Duration::from_millis(200));
    run.interrupt();
    std::thread::sleep(Duration::from_millis(20));
    run.interrupt();
    let o = run.wait_for(Duration::from_secs(40));
    o.expect_code(130);
    o.expect_stderr_contains("Injected restore stall.");
    assert!(o.elapsed < Duration::from_secs(2), "the second SIGINT took {:?}", o.elapsed);
}

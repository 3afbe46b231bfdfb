//! The metrics endpoint (`metrics.address`, `--metrics-addr`): `/metrics`
//! scraped over plain TCP while the real binary runs, its values checked
//! against the end-of-run summary and the "Checkpoint complete." lines;
//! `/healthz` and `/ready`; a taken port refuses the run.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use super::util::{part_files, sink_lines, tmp, wait_until, weir, weir_run, Running};

/// A port that was free a moment ago (the kernel picks it).
/// A port nothing listens on now and no other test of this process was
/// given: tests run in parallel, and two given one port would talk to each
/// other's weir.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0").expect("binding a probe port").local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// `GET path` with a hand-written HTTP/1.1 request: (status, body), or None
/// if nothing listens (yet).
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// The body of `/metrics` (200), or None if it does not answer.
pub fn scrape(port: u16) -> Option<String> {
    match get(port, "/metrics")? {
        (200, body) => Some(body),
        _ => None,
    }
}

/// The sum of the samples of `name` whose labels include every `want`
/// (`key="value"`); None if there is none.
pub fn value(text: &str, name: &str, want: &[&str]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, v)) = line.rsplit_once(' ') else { continue };
        let (n, labels) = series.split_once('{').unwrap_or((series, ""));
        if n != name || !want.iter().all(|w| labels.contains(w)) {
            continue;
        }
        *found.get_or_insert(0.0) += v.parse::<f64>().unwrap_or_else(|_| panic!("not a number: {line}"));
    }
    found
}

#[track_caller]
fn must(text: &str, name: &str, want: &[&str]) -> f64 {
    value(text, name, want).unwrap_or_else(|| panic!("no {name}{want:?} in:\n{text}"))
}

fn write_pipeline(dir: &Path, body: &str) -> String {
    let path = dir.join("p.yaml");
    std::fs::write(&path, format!("state: {{dir: {}}}\n{body}", dir.join("st").display())).unwrap();
    path.display().to_string()
}

/// Datagen → keyed dedup → blackhole, `rows` rows (omitted: unbounded).
fn datagen_pipeline(checkpoint: &str, rows: Option<u64>) -> String {
    let rows = rows.map_or(String::new(), |r| format!("    rows: {r}\n"));
    format!(
        "name: metered\n{checkpoint}sources:\n  - name: events\n    type: datagen\n{rows}    rate_limit: 4000\n    fields:\n      n: {{kind: sequence}}\n      device: {{kind: key, cardinality: 50, prefix: dev-}}\noperators:\n  - {{name: unique, type: dedup, input: events, key: [n]}}\nsinks:\n  - {{name: out, type: blackhole, input: unique}}\n"
    )
}

#[track_caller]
fn wait_scrape(run: &Running, port: u16, what: &str, mut cond: impl FnMut(&str) -> bool) -> String {
    let mut last = String::new();
    let ok = wait_until(Duration::from_secs(30), || match scrape(port) {
        Some(t) => {
            let hit = cond(&t);
            last = t;
            hit
        }
        None => false,
    });
    assert!(ok, "{what} not seen within 30 s (pid {}); last scrape:\n{last}", run.child.id());
    last
}

/// The per-node counts of the summary line (`events 5000 out, unique 5000
/// in/5000 out, out 5000 in`).
pub fn summary_count(stderr: &str, node: &str, dir: &str) -> u64 {
    let line = stderr.lines().find(|l| l.starts_with("Finished in") || l.starts_with("Stopped in")).expect("a summary line");
    let part = line.split_once(": ").unwrap().1.split(", ").find(|p| p.starts_with(&format!("{node} "))).expect("node in summary");
    let rest = &part[node.len() + 1..];
    let n = match (dir, rest.split_once('/')) {
        ("in", Some((i, _))) => i.trim_end_matches(" in"),
        ("out", Some((_, o))) => o.trim_end_matches(" out"),
        (_, None) => rest.split_whitespace().next().unwrap(),
        _ => unreachable!(),
    };
    n.parse().unwrap_or_else(|_| panic!("count of {node} {dir} in {line:?}"))
}

#[test]
fn record_counters_per_subtask_equal_the_input_and_the_summary_at_the_end() {
    const ROWS: u64 = 3000;
    let dir = tmp();
    let pipeline = write_pipeline(dir.path(), &datagen_pipeline("checkpoint: {interval: 1h}\n", Some(ROWS)));
    let port = free_port();
    // The dedup (the sink is chained into its task) stalls at its first
    // barrier, the final checkpoint's, taken once every task processed all
    // its input: the counters are final and the process still serves them.
    let run = weir_run(&pipeline, 2).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).env("WEIR_FAULTS", "stall=unique:0:3s").spawn();
    let text = wait_scrape(&run, port, "all records at the sink", |t| {
        value(t, "weir_records_in_total", &[r#"operator="out""#]) == Some(ROWS as f64)
    });
    let o = run.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    // (Without the stall the scrape would only catch the end by luck.)
    o.expect_stderr_contains("Injected stall.");
    for (node, name, dir) in [
        ("events", "weir_records_out_total", "out"),
        ("unique", "weir_records_in_total", "in"),
        ("unique", "weir_records_out_total", "out"),
        ("out", "weir_records_in_total", "in"),
    ] {
        let op = format!(r#"operator="{node}""#);
        let total = must(&text, name, &[&op]);
        assert_eq!(total, ROWS as f64, "{name} of {node}");
        assert_eq!(total as u64, summary_count(&o.stderr, node, dir), "{name} of {node} vs the summary:\n{}", o.stderr);
        // One series per subtask, labelled with the pipeline.
        let per: Vec<f64> = (0..2).map(|s| must(&text, name, &[&op, &format!(r#"subtask="{s}""#), r#"pipeline="metered""#])).collect();
        assert_eq!(per.iter().sum::<f64>(), ROWS as f64, "{name} of {node} per subtask: {per:?}");
    }
    // Sources have no records in, sinks no records out: nothing is reported twice.
    assert_eq!(value(&text, "weir_records_in_total", &[r#"operator="events""#]), None);
    assert_eq!(value(&text, "weir_records_out_total", &[r#"operator="out""#]), None);
    assert!(must(&text, "weir_source_bytes_in_total", &[r#"operator="events""#]) > 0.0);
    assert_eq!(must(&text, "weir_records_dropped_total", &[]), 0.0);
}

#[test]
fn checkpoint_metrics_match_the_checkpoint_complete_lines() {
    let dir = tmp();
    let pipeline = write_pipeline(dir.path(), &datagen_pipeline("checkpoint: {interval: 300ms, retain: 100}\n", None));
    let port = free_port();
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let run = weir_run(&pipeline, 2).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).spawn();
    let text = wait_scrape(&run, port, "3 completed checkpoints", |t| value(t, "weir_checkpoints_completed_total", &[]) >= Some(3.0));
    assert_eq!(get(port, "/healthz").map(|r| r.0), Some(200));
    let (status, body) = get(port, "/ready").expect("/ready answers");
    assert_eq!(status, 200, "{body}");
    run.terminate();
    let o = run.wait_for(Duration::from_secs(20));
    o.expect_code(0);

    let completed = must(&text, "weir_checkpoints_completed_total", &[r#"pipeline="metered""#]) as u64;
    let last = must(&text, "weir_checkpoint_last_completed_id", &[]) as u64;
    let size = must(&text, "weir_checkpoint_last_size_bytes", &[]) as u64;
    assert_eq!(must(&text, "weir_checkpoints_failed_total", &[]), 0.0);
    assert_eq!(must(&text, "weir_checkpoint_restored_id", &[]), 0.0);
    // A fresh run numbers its checkpoints 1, 2, ... and none failed.
    assert_eq!(last, completed, "{text}");
    // The scraped checkpoint is the one the log reports, with its size, and its directory is on disk.
    let line = o
        .stderr
        .lines()
        .find(|l| l.contains("Checkpoint complete.") && l.contains(&format!(" checkpoint={last} ")))
        .unwrap_or_else(|| panic!("no log line of checkpoint {last}:\n{}", o.stderr));
    assert!(line.contains(&format!(" bytes={size} ")), "size {size} vs {line}");
    assert!(size > 0);
    let logged = o.stderr.lines().filter(|l| l.contains("Checkpoint complete.")).count() as u64;
    assert!(logged >= completed, "{logged} log lines, {completed} counted");
    assert!(dir.path().join(format!("st/checkpoints/chk-{last:07}/_metadata")).is_file());
    let at = must(&text, "weir_checkpoint_last_completed_timestamp_seconds", &[]);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(at >= started - 1.0 && at <= now + 1.0, "timestamp {at} not within the run ({started}..{now})");
    let duration = must(&text, "weir_checkpoint_last_duration_seconds", &[]);
    assert!((0.0..30.0).contains(&duration), "{duration}");
    assert_eq!(must(&text, "weir_checkpoint_interval_seconds", &[]), 0.3);
}

#[test]
fn ready_is_503_while_checkpoints_fail_and_healthz_stays_200() {
    let dir = tmp();
    let ck = "checkpoint: {interval: 100ms, tolerable_failures: 10000}\n";
    // This time from the pipeline file.
    let port = free_port();
    let pipeline = write_pipeline(dir.path(), &format!("metrics: {{address: '127.0.0.1:{port}'}}\n{}", datagen_pipeline(ck, None)));
    let run = weir_run(&pipeline, 1).env("WEIR_FAULTS", "state_write_fail=1").spawn();
    let text = wait_scrape(&run, port, "2 failed checkpoints", |t| value(t, "weir_checkpoints_failed_total", &[]) >= Some(2.0));
    assert_eq!(must(&text, "weir_checkpoints_completed_total", &[]), 0.0);
    // A failed state write is a task declining; no other reason is counted.
    let declined = must(&text, "weir_checkpoints_failed_total", &[r#"reason="declined""#]);
    assert_eq!(must(&text, "weir_checkpoints_failed_total", &[]), declined, "{text}");
    assert_eq!(must(&text, "weir_checkpoints_failed_total", &[r#"reason="timeout""#]), 0.0);
    assert!(must(&text, "weir_checkpoints_aborted_total", &[]) >= declined);
    assert_eq!(must(&text, "weir_savepoints_failed_total", &[]), 0.0);
    // Nothing completes, so every failure is consecutive.
    assert!(must(&text, "weir_checkpoints_consecutive_failures", &[]) >= 2.0, "{text}");
    assert_eq!(must(&text, "weir_checkpoint_tolerable_failures", &[]), 10000.0);
    assert_eq!(must(&text, "weir_pipeline_running", &[]), 1.0);
    let (status, body) = get(port, "/ready").expect("/ready answers");
    assert_eq!((status, body.as_str()), (503, "not ready: no checkpoint completed yet\n"));
    assert_eq!(get(port, "/healthz"), Some((200, "ok\n".into())));
    assert_eq!(get(port, "/nope").map(|r| r.0), Some(404));
    drop(run);
}

/// `/live`: 200 while checkpoints complete; 503 once a wedged subtask (a
/// stall at its first barrier) kept every checkpoint from completing for
/// 3 × (timeout + interval) since the start; 200 again once it goes on.
#[test]
fn live_fails_while_checkpoints_make_no_progress_and_recovers() {
    let dir = tmp();
    let ck = "checkpoint: {interval: 100ms, timeout: 300ms, tolerable_failures: 10000}\n";
    let pipeline = write_pipeline(dir.path(), &datagen_pipeline(ck, None));
    let port = free_port();
    let run = weir_run(&pipeline, 1).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).env("WEIR_FAULTS", "stall=unique:0:6s").spawn();
    assert!(wait_until(Duration::from_secs(20), || get(port, "/live").is_some_and(|r| r.0 == 503)), "/live stayed 200");
    let (_, body) = get(port, "/live").unwrap();
    assert!(body.starts_with("not live: no checkpoint completed for ") && body.ends_with("(1.2s)\n"), "{body}");
    assert_eq!(get(port, "/healthz").map(|r| r.0), Some(200));
    wait_scrape(&run, port, "a completed checkpoint", |t| value(t, "weir_checkpoints_completed_total", &[]) >= Some(1.0));
    assert_eq!(get(port, "/live"), Some((200, "live\n".into())));
    drop(run);
}

/// Unaligned checkpoints behind a slow sink (the channels fill, so barriers
/// overtake records), sources that hold each barrier 300 ms, and a dedup
/// subtask stalled 2 s at its first barrier, longer than the timeout.
#[test]
fn checkpoint_start_delay_in_flight_bytes_timeouts_and_in_progress_are_reported() {
    let dir = tmp();
    let ck = "checkpoint: {interval: 200ms, timeout: 1s, alignment: unaligned, tolerable_failures: 100}\n";
    let body = datagen_pipeline(ck, None).replace("type: blackhole, input: unique}", "type: blackhole, input: unique, rate_limit: 300}");
    assert!(body.contains("rate_limit: 300"));
    let pipeline = write_pipeline(dir.path(), &body);
    let port = free_port();
    let run = weir_run(&pipeline, 2)
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{port}"))
        .env("WEIR_FAULTS", "barrier_delay=300ms,stall=unique:0:2s")
        .spawn();
    let busy = wait_scrape(&run, port, "a checkpoint in progress", |t| value(t, "weir_checkpoints_in_progress", &[]) == Some(1.0));
    assert!(must(&busy, "weir_checkpoint_in_progress_id", &[]) >= 1.0, "{busy}");
    let text = wait_scrape(&run, port, "a timeout, then 2 completed checkpoints", |t| {
        value(t, "weir_checkpoints_failed_total", &[r#"reason="timeout""#]) >= Some(1.0)
            && value(t, "weir_checkpoints_completed_total", &[]) >= Some(2.0)
    });
    drop(run);
    // The trigger reaches the sources at once; the operators see the first
    // barrier once a source let it go, 300 ms later.
    let delay = must(&text, "weir_checkpoint_last_start_delay_seconds", &[r#"pipeline="metered""#]);
    assert!((0.3..10.0).contains(&delay), "start delay {delay}");
    let in_flight = must(&text, "weir_checkpoint_last_in_flight_size_bytes", &[]);
    let size = must(&text, "weir_checkpoint_last_size_bytes", &[]);
    assert!(in_flight > 0.0 && in_flight <= size, "in-flight {in_flight} of {size} bytes");
    // The stall outlasted one checkpoint's timeout and nothing else failed.
    assert_eq!(must(&text, "weir_checkpoints_failed_total", &[r#"reason="declined""#]), 0.0, "{text}");
    assert_eq!(must(&text, "weir_checkpoints_consecutive_failures", &[]), 0.0, "a completion resets it");
}

/// A bounded file source beside an unbounded datagen, a keyed dedup on
/// RocksDB, a file sink: the file's size and how much of it was read, the
/// part files published, and RocksDB's own figures for every bundle.
/// The records a sink committed, from the summary line (`out 3000 in (3000 committed)`).
pub fn summary_committed(stderr: &str, node: &str) -> u64 {
    let line = stderr.lines().find(|l| l.starts_with("Finished in") || l.starts_with("Stopped in")).expect("a summary line");
    let part = line.split_once(": ").unwrap().1.split(", ").find(|p| p.starts_with(&format!("{node} "))).expect("node in summary");
    let n = part.split_once(" in (").and_then(|(_, r)| r.split_once(" committed)")).map(|(n, _)| n);
    n.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no committed count of {node} in {line:?}"))
}

/// Lines of the published parts in `dir` not in `before`.
fn lines_of_new_parts(dir: &Path, before: &[std::path::PathBuf]) -> usize {
    let new = part_files(dir).into_iter().filter(|f| !before.contains(f));
    new.map(|f| std::fs::read_to_string(f).unwrap().lines().count()).sum()
}

/// Datagen (`rows`, paced) → file sink `out` at parallelism 2, checkpoints every 100 ms.
fn file_sink_pipeline(dir: &Path, rows: u64) -> String {
    write_pipeline(
        dir,
        &format!(
            "name: committing\ncheckpoint: {{interval: 100ms}}\nsources:\n  - name: events\n    type: datagen\n    rows: {rows}\n    rate_limit: 3000\n    fields:\n      n: {{kind: sequence}}\nsinks:\n  - {{name: out, type: file, input: events, path: {}, max_file_bytes: 2000}}\n",
            dir.join("out").display()
        ),
    )
}

#[test]
fn file_sink_records_committed_equal_the_lines_it_published_in_a_bounded_run() {
    const ROWS: u64 = 1500;
    let dir = tmp();
    let pipeline = file_sink_pipeline(dir.path(), ROWS);
    let port = free_port();
    let run = weir_run(&pipeline, 2).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).spawn();
    let text = wait_scrape(&run, port, "records committed by the file sink", |t| {
        value(t, "weir_sink_records_committed_total", &[r#"operator="out""#]) > Some(0.0)
    });
    let o = run.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    // One series per subtask; what it counted then was published then.
    for s in 0..2 {
        must(&text, "weir_sink_records_committed_total", &[r#"operator="out""#, &format!(r#"subtask="{s}""#)]);
    }
    assert_eq!(summary_committed(&o.stderr, "out"), ROWS, "{}", o.stderr);
    assert_eq!(sink_lines(&dir.path().join("out")).len() as u64, ROWS);
}

/// After a kill -9 (and a crash between `_metadata` and the sink's commit,
/// whose parts the restore publishes, counted from their lines), the
/// restored run counts what it published: the lines of the part files that
/// appeared during it. Counters start from zero; the output is exact.
#[test]
fn file_sink_records_committed_after_a_crash_and_restore_are_what_the_restored_run_published() {
    const ROWS: u64 = 3000;
    for (how, faults) in [("kill -9", None), ("crash after _metadata", Some("crash=after_metadata:3"))] {
        let dir = tmp();
        let out = dir.path().join("out");
        let pipeline = file_sink_pipeline(dir.path(), ROWS);
        let mut first = weir_run(&pipeline, 2);
        if let Some(f) = faults {
            first = first.env("WEIR_FAULTS", f);
        }
        let mut first = first.spawn();
        match faults {
            None => {
                let published = wait_until(Duration::from_secs(30), || part_files(&out).len() >= 2);
                assert!(published, "{how}: no parts published within 30 s");
                first.child.kill().unwrap();
                first.child.wait().unwrap();
            }
            Some(_) => assert_ne!(first.wait_for(Duration::from_secs(30)).code(), Some(0), "{how}: the run must crash"),
        }
        let before = part_files(&out);
        let before_lines = sink_lines(&out).len() as u64;
        assert!(before_lines < ROWS, "{how}: the first run must not have published everything");
        let o = weir_run(&pipeline, 2).arg("--restore").arg("latest").ok();
        let committed = summary_committed(&o.stderr, "out");
        assert_eq!(committed, lines_of_new_parts(&out, &before) as u64, "{how}: {}", o.stderr);
        assert_eq!(before_lines + committed, ROWS, "{how}: exactly once");
        let mut lines = sink_lines(&out);
        lines.sort();
        lines.dedup();
        assert_eq!(lines.len() as u64, ROWS, "{how}: every record once");
    }
}

#[test]
fn file_progress_parts_published_and_rocksdb_properties_are_exported() {
    let dir = tmp();
    let input = dir.path().join("in.jsonl");
    let lines: String = (0..500).map(|i| format!("{{\"id\": {i}}}\n")).collect();
    std::fs::write(&input, &lines).unwrap();
    let body = format!(
        "name: metered\nbundles: {{size: 1}}\ncheckpoint: {{interval: 200ms}}\nsources:\n  - {{name: lines, type: file, path: {}}}\n  - name: events\n    type: datagen\n    rate_limit: 2000\n    fields:\n      n: {{kind: sequence}}\noperators:\n  - {{name: unique, type: dedup, input: events, key: [n]}}\nsinks:\n  - {{name: out, type: file, input: unique, path: {}}}\n  - {{name: drop, type: blackhole, input: lines}}\n",
        input.display(),
        dir.path().join("out").display()
    );
    let pipeline = dir.path().join("p.yaml");
    std::fs::write(&pipeline, format!("state: {{backend: rocksdb, dir: {}}}\n{body}", dir.path().join("st").display())).unwrap();
    let pipeline = pipeline.display().to_string();
    let port = free_port();
    let run = weir_run(&pipeline, 2).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).spawn();
    let size = lines.len() as f64;
    let text = wait_scrape(&run, port, "the file read, parts published, keys in RocksDB", |t| {
        value(t, "weir_source_bytes_in_total", &[r#"operator="lines""#]) == Some(size)
            && value(t, "weir_sink_parts_published_total", &[r#"operator="out""#]) >= Some(1.0)
            && value(t, "weir_rocksdb_estimate_num_keys", &[]) > Some(0.0)
    });
    drop(run);
    assert_eq!(must(&text, "weir_source_input_size_bytes", &[r#"operator="lines""#]), size);
    assert_eq!(value(&text, "weir_source_input_size_bytes", &[r#"operator="events""#]), None, "unbounded: no total");
    assert_eq!(value(&text, "weir_sink_parts_published_total", &[r#"operator="drop""#]), None, "only file sinks publish parts");
    let published =
        std::fs::read_dir(dir.path().join("out")).unwrap().flatten().filter(|e| !e.file_name().to_string_lossy().starts_with('.')).count();
    assert!(published as f64 >= must(&text, "weir_sink_parts_published_total", &[]), "{published} part files on disk");
    let lines = sink_lines(&dir.path().join("out")).len() as f64;
    assert!(lines >= must(&text, "weir_sink_records_committed_total", &[r#"operator="out""#]), "{lines} lines on disk");
    assert_eq!(value(&text, "weir_sink_records_committed_total", &[r#"operator="drop""#]), None, "a blackhole commits nothing");
    // Two bundles (bundles.size 1 at parallelism 2), one column family: the dedup's.
    for bundle in ["0", "1"] {
        let at = [format!(r#"bundle="{bundle}""#), r#"operator="unique""#.to_string(), r#"pipeline="metered""#.to_string()];
        let at: Vec<&str> = at.iter().map(String::as_str).collect();
        for name in [
            "weir_rocksdb_estimate_num_keys",
            "weir_rocksdb_size_all_mem_tables_bytes",
            "weir_rocksdb_estimate_pending_compaction_bytes",
            "weir_rocksdb_actual_delayed_write_rate",
            "weir_rocksdb_block_cache_usage_bytes",
            "weir_rocksdb_live_sst_files_size_bytes",
        ] {
            must(&text, name, &at);
        }
        assert_eq!(must(&text, "weir_rocksdb_is_write_stopped", &at), 0.0);
        assert!(must(&text, "weir_rocksdb_estimate_num_keys", &at) > 0.0, "each bundle holds some of the keys");
    }
    // docs/metrics.md lists every series this run (RocksDB, checkpoints, file source and sink) exports.
    let documented = documented_metrics();
    let exported: std::collections::BTreeSet<&str> =
        text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split(['{', ' ']).next()).collect();
    let undocumented: Vec<&&str> = exported.iter().filter(|n| !documented.contains(**n) && !is_histogram_series(&documented, n)).collect();
    assert!(undocumented.is_empty(), "not in docs/metrics.md: {undocumented:?}");
}

#[test]
fn ready_without_checkpoints_is_200_while_running() {
    let dir = tmp();
    let pipeline = write_pipeline(dir.path(), &datagen_pipeline("", None));
    let port = free_port();
    let run = weir_run(&pipeline, 1).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).spawn();
    let text = wait_scrape(&run, port, "records flowing", |t| value(t, "weir_records_in_total", &[r#"operator="out""#]) > Some(0.0));
    // Without checkpoints there are no checkpoint series.
    assert_eq!(value(&text, "weir_checkpoints_completed_total", &[]), None);
    assert_eq!(get(port, "/ready").map(|r| r.0), Some(200));
    run.terminate();
    run.wait_for(Duration::from_secs(20)).expect_code(0);
    // The endpoint ends with the run.
    assert_eq!(get(port, "/healthz"), None);
}

#[test]
fn restored_run_reports_its_checkpoint_and_counts_from_zero() {
    const ROWS: u64 = 1000;
    let dir = tmp();
    let pipeline = write_pipeline(dir.path(), &datagen_pipeline("checkpoint: {interval: 1h}\n", Some(ROWS)));
    let first = weir_run(&pipeline, 1).ok();
    let id: u64 = first
        .stderr
        .lines()
        .find_map(|l| l.split_once("Final checkpoint complete. checkpoint=").map(|(_, id)| id.trim().parse().unwrap()))
        .expect("a final checkpoint");
    let port = free_port();
    let run = weir_run(&pipeline, 1)
        .arg("--restore")
        .arg("latest")
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{port}"))
        .env("WEIR_FAULTS", "stall=unique:0:3s,restore_stall=300ms")
        .spawn();
    // Known once every task has its state back.
    let text = wait_scrape(&run, port, "the restore duration", |t| value(t, "weir_restore_duration_seconds", &[]).is_some());
    run.wait_for(Duration::from_secs(30)).expect_code(0);
    assert_eq!(must(&text, "weir_checkpoint_restored_id", &[]), id as f64);
    let took = must(&text, "weir_restore_duration_seconds", &[r#"pipeline="metered""#]);
    assert!((0.3..30.0).contains(&took), "every task's restore stalls 300 ms, the restore took {took} s");
    // Counters are this process's: the input was all read before the restore.
    assert_eq!(must(&text, "weir_records_out_total", &[r#"operator="events""#]), 0.0);
}

#[test]
fn taken_metrics_port_is_exit_2_and_nothing_is_written() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    for how in ["flag", "yaml"] {
        let dir = tmp();
        let out = dir.path().join("out");
        let metrics = if how == "yaml" { format!("metrics: {{address: '127.0.0.1:{port}'}}\n") } else { String::new() };
        let body = format!(
            "{metrics}name: refused\ncheckpoint: {{interval: 1s}}\nsources:\n  - {{name: events, type: datagen, rows: 10, fields: {{n: {{kind: sequence}}}}}}\nsinks:\n  - {{name: out, type: file, input: events, path: {}}}\n",
            out.display()
        );
        let pipeline = write_pipeline(dir.path(), &body);
        let mut w = weir_run(&pipeline, 1);
        if how == "flag" {
            w = w.arg("--metrics-addr").arg(format!("127.0.0.1:{port}"));
        }
        let o = w.run();
        o.expect_code(2);
        o.expect_stderr_contains(&format!("metrics address 127.0.0.1:{port}"));
        o.expect_stderr_contains("Address already in use");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("p.yaml")], "{how}: a refused run wrote {left:?}");
    }
    drop(taken);
}

#[test]
fn metrics_address_errors_are_located() {
    let dir = tmp();
    let path = dir.path().join("p.yaml");
    let body = "name: bad\nmetrics:\n  address: localhost\nsources:\n  - {name: events, type: datagen, rows: 1, fields: {n: {kind: sequence}}}\nsinks:\n  - {name: out, type: blackhole, input: events}\n";
    std::fs::write(&path, body).unwrap();
    let o = weir(&["validate", path.to_str().unwrap()]).run();
    o.expect_code(2);
    o.expect_stderr_contains(&format!("{}:3:12: `address` must be IP:PORT", path.display()));
    std::fs::write(&path, body.replace("address: localhost", "addr: '127.0.0.1:1'")).unwrap();
    let o = weir(&["validate", path.to_str().unwrap()]).run();
    o.expect_code(2);
    o.expect_stderr_contains(&format!("{}:3:3:", path.display()));
    let o = weir(&["run", path.to_str().unwrap(), "--metrics-addr", "nohost"]).run();
    o.expect_code(2);
    o.expect_stderr_contains("must be IP:PORT");
}

#[test]
fn slow_and_oversized_requests_do_not_stop_the_endpoint() {
    let dir = tmp();
    let pipeline = write_pipeline(dir.path(), &datagen_pipeline("", None));
    let port = free_port();
    let run = weir_run(&pipeline, 1).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).spawn();
    wait_scrape(&run, port, "the endpoint", |_| true);
    // Idle clients hold no more than their slots (16): with 20 silent
    // connections a further client is turned away at once (a 503, or a
    // reset when its request was still unread), never left hanging.
    let idle: Vec<TcpStream> =
        (0..20).map(|i| TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("idle client {i}: {e}"))).collect();
    let t = Instant::now();
    let busy = get(port, "/healthz");
    assert!(busy.as_ref().is_none_or(|b| b.0 == 503), "{busy:?}");
    assert!(t.elapsed() < Duration::from_secs(4), "a client over the limit waited {:?}", t.elapsed());
    drop(idle);
    // Their slots free up as soon as they hang up.
    assert!(wait_until(Duration::from_secs(10), || get(port, "/healthz").map(|r| r.0) == Some(200)), "slots not freed");
    // A request head over 64 KiB is refused without reading it all.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(format!("GET /metrics HTTP/1.1\r\nX: {}\r\n", "a".repeat(70 * 1024)).as_bytes());
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 431 "), "{reply:.200}");
    assert!(wait_until(Duration::from_secs(10), || get(port, "/healthz").map(|r| r.0) == Some(200)));
    run.terminate();
    run.wait_for(Duration::from_secs(20)).expect_code(0);
}

/// Stops the Prometheus of `scripts/prometheus.sh start` when the test ends.
struct Prometheus {
    dir: std::path::PathBuf,
    port: u16,
}

impl Prometheus {
    /// None when Debian's `prometheus` package is not installed.
    fn start(dir: &Path, targets: &[u16]) -> Option<Prometheus> {
        Self::start_with(dir, targets, &[])
    }

    /// With more options of `scripts/prometheus.sh start` (`--rules FILE`).
    fn start_with(dir: &Path, targets: &[u16], more: &[&str]) -> Option<Prometheus> {
        if std::process::Command::new("prometheus").arg("--version").output().is_err() {
            return None;
        }
        let targets: Vec<String> = targets.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = std::process::Command::new(super::util::repo().join("scripts/prometheus.sh"))
            .args(["start", "--data-dir", dir.to_str().unwrap(), "--interval", "500ms", "--target", &targets.join(",")])
            .args(more)
            .output()
            .expect("running scripts/prometheus.sh");
        assert!(out.status.success(), "prometheus.sh start failed: {}", String::from_utf8_lossy(&out.stderr));
        let addr = String::from_utf8(out.stdout).unwrap();
        let port = addr.trim().rsplit(':').next().unwrap().parse().expect("prometheus.sh prints its address");
        Some(Prometheus { dir: dir.to_path_buf(), port })
    }

    /// An instant query through the HTTP API: (labels, value) per series.
    fn query(&self, promql: &str) -> Vec<(serde_json::Value, f64)> {
        let encoded: String = promql
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        let Some((200, body)) = get(self.port, &format!("/api/v1/query?query={encoded}")) else { return Vec::new() };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(v["status"], "success", "{body}");
        let series = v["data"]["result"].as_array().cloned().unwrap_or_default();
        series.into_iter().map(|s| (s["metric"].clone(), s["value"][1].as_str().unwrap().parse().unwrap())).collect()
    }

    /// The one value of `promql`, if it has one series.
    fn scalar(&self, promql: &str) -> Option<f64> {
        match self.query(promql).as_slice() {
            [(_, v)] => Some(*v),
            _ => None,
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = std::process::Command::new(super::util::repo().join("scripts/prometheus.sh"))
            .args(["stop", "--data-dir", self.dir.to_str().unwrap()])
            .status();
    }
}

#[test]
fn prometheus_scrapes_weir_checkpoints_rise_and_records_equal_the_summary() {
    const ROWS: u64 = 3000;
    let dir = tmp();
    let (live, bounded) = (free_port(), free_port());
    let Some(prom) = Prometheus::start(&dir.path().join("prometheus"), &[live, bounded]) else {
        eprintln!("skipped: `prometheus` is not installed (scripts/install-deps.sh installs it)");
        return;
    };
    let wait = |what: &str, mut cond: Box<dyn FnMut() -> bool + '_>| {
        assert!(wait_until(Duration::from_secs(30), &mut *cond), "{what} not seen in Prometheus within 30 s");
    };

    // An unbounded run: Prometheus sees the completed checkpoints rise.
    let run_dir = dir.path().join("live");
    std::fs::create_dir(&run_dir).unwrap();
    let pipeline = write_pipeline(&run_dir, &datagen_pipeline("checkpoint: {interval: 200ms}\n", None));
    let run = weir_run(&pipeline, 2).arg("--metrics-addr").arg(format!("127.0.0.1:{live}")).spawn();
    let completed = format!(r#"weir_checkpoints_completed_total{{instance="127.0.0.1:{live}",pipeline="metered"}}"#);
    let mut first = 0.0;
    wait(
        "a completed checkpoint",
        Box::new(|| {
            first = prom.scalar(&completed).unwrap_or(0.0);
            first >= 1.0
        }),
    );
    wait("more completed checkpoints", Box::new(|| prom.scalar(&completed).is_some_and(|v| v > first)));
    // The text it scraped passes Prometheus' own linter.
    let text = scrape(live).expect("a scrape");
    let mut lint = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool comes with prometheus");
    lint.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let lint = lint.wait_with_output().unwrap();
    assert!(
        lint.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
    run.terminate();
    run.wait_for(Duration::from_secs(20)).expect_code(0);

    // A bounded run held at its final checkpoint (the dedup, with the sink
    // chained into its task, stalls at its first barrier): Prometheus'
    // per-operator sums equal the summary.
    let run_dir = dir.path().join("bounded");
    std::fs::create_dir(&run_dir).unwrap();
    let pipeline = write_pipeline(&run_dir, &datagen_pipeline("checkpoint: {interval: 1h}\n", Some(ROWS)));
    let run =
        weir_run(&pipeline, 2).arg("--metrics-addr").arg(format!("127.0.0.1:{bounded}")).env("WEIR_FAULTS", "stall=unique:0:8s").spawn();
    let sum = |name: &str, op: &str| prom.scalar(&format!(r#"sum(weir_{name}_total{{instance="127.0.0.1:{bounded}",operator="{op}"}})"#));
    // Scraped every 500 ms (a scrape times out after one interval) while
    // the dedup stalls 8 s, so a loaded machine still gets several in.
    let at_sink = wait_until(Duration::from_secs(30), || sum("records_in", "out") == Some(ROWS as f64));
    if !at_sink {
        let up = prom.query(&format!(r#"up{{instance="127.0.0.1:{bounded}"}}"#));
        let last = sum("records_in", "out");
        let o = run.wait_for(Duration::from_secs(30));
        panic!("all records at the sink not seen in Prometheus within 30 s (last {last:?}, up {up:?}); weir:\n{}", o.stderr);
    }
    let seen = [
        ("events", "out", sum("records_out", "events")),
        ("unique", "in", sum("records_in", "unique")),
        ("unique", "out", sum("records_out", "unique")),
        ("out", "in", sum("records_in", "out")),
    ];
    let o = run.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    o.expect_stderr_contains("Injected stall.");
    for (node, dir, v) in seen {
        assert_eq!(v, Some(summary_count(&o.stderr, node, dir) as f64), "{node} {dir}:\n{}", o.stderr);
        assert_eq!(v, Some(ROWS as f64));
    }
}

/// `promtool`, or None (with a note) when it is not installed.
fn promtool() -> Option<std::process::Command> {
    if std::process::Command::new("promtool").arg("--version").output().is_err() {
        eprintln!("skipped: `promtool` is not installed (scripts/install-deps.sh installs prometheus)");
        return None;
    }
    let mut c = std::process::Command::new("promtool");
    c.current_dir(super::util::repo().join("deploy/prometheus"));
    Some(c)
}

#[test]
fn alert_rules_pass_promtool_check_and_their_recorded_series_tests() {
    for args in [["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]] {
        let Some(mut c) = promtool() else { return };
        let out = c.args(args).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "promtool {args:?}:\n{text}");
        assert!(text.contains("SUCCESS"), "promtool {args:?}:\n{text}");
    }
}

/// The metric names docs/metrics.md lists (first column of its tables).
fn documented_metrics() -> std::collections::BTreeSet<String> {
    let doc = std::fs::read_to_string(super::util::repo().join("docs/metrics.md")).unwrap();
    let names: std::collections::BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| name.to_string())
        .filter(|n| n.starts_with("weir_") || n.starts_with("process_"))
        .collect();
    assert!(names.len() > 30, "{names:?}");
    names
}

/// A series of a documented histogram: it is documented by its name and
/// exports `_bucket`, `_sum` and `_count`.
fn is_histogram_series(documented: &std::collections::BTreeSet<String>, name: &str) -> bool {
    ["_bucket", "_sum", "_count"].iter().any(|s| name.strip_suffix(s).is_some_and(|h| documented.contains(h)))
}

/// Every `weir_*` and `process_*` name in `text`.
fn metric_names_in(text: &str) -> std::collections::BTreeSet<String> {
    let re = regex::Regex::new(r"\b(?:weir|process)_[a-z0-9_]+").unwrap();
    re.find_iter(text).map(|m| m.as_str().to_string()).collect()
}

/// The `expr:` of each rule (one line, or a `|` block of deeper lines).
fn rule_exprs(yaml: &str) -> Vec<String> {
    let mut exprs = Vec::new();
    let mut lines = yaml.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim_start().strip_prefix("expr:") else { continue };
        if rest.trim() != "|" {
            exprs.push(rest.trim().to_string());
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let mut block = String::new();
        while let Some(next) = lines.next_if(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent) {
            block.push_str(next.trim());
            block.push('\n');
        }
        exprs.push(block);
    }
    exprs
}

#[test]
fn dashboard_and_alert_rules_name_only_documented_metrics() {
    let documented = documented_metrics();
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(super::util::repo().join("deploy/grafana/weir.json")).unwrap()).unwrap();
    // Every query: the panels' targets and the variables' queries.
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            queries.push(t["expr"].as_str().expect("a target with an expr").to_string());
        }
    }
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["definition"].as_str() {
            queries.push(q.to_string());
        }
    }
    assert!(queries.len() > 30, "{queries:?}");
    let exprs = rule_exprs(&std::fs::read_to_string(super::util::repo().join("deploy/prometheus/alerts.yml")).unwrap());
    assert_eq!(exprs.len(), 14, "{exprs:?}");
    assert!(
        exprs
            .iter()
            .any(|e| e.contains("time() - weir_checkpoint_last_completed_timestamp_seconds") && e.contains("weir_pipeline_running")),
        "{exprs:?}"
    );
    let rules = std::fs::read_to_string(super::util::repo().join("deploy/prometheus/alerts.yml")).unwrap();
    let rules = rule_exprs(&rules).join("\n");
    for (what, text) in [("deploy/grafana/weir.json", queries.join("\n")), ("deploy/prometheus/alerts.yml", rules)] {
        let named = metric_names_in(&text);
        assert!(named.len() > 5, "{what}: {named:?}");
        let unknown: Vec<&String> = named.iter().filter(|n| !documented.contains(*n) && !is_histogram_series(&documented, n)).collect();
        assert!(unknown.is_empty(), "{what} names metrics docs/metrics.md does not list: {unknown:?}");
    }
}

/// A subtask stalled at its first barrier for longer than the test: every
/// checkpoint times out, and Prometheus, evaluating deploy/prometheus/alerts.yml,
/// reports WeirCheckpointRepeatedFailure firing.
#[test]
fn prometheus_fires_the_repeated_failure_alert_while_a_stalled_subtask_fails_checkpoints() {
    let dir = tmp();
    let port = free_port();
    let rules = super::util::repo().join("deploy/prometheus/alerts.yml");
    let Some(prom) = Prometheus::start_with(&dir.path().join("prometheus"), &[port], &["--rules", rules.to_str().unwrap()]) else {
        eprintln!("skipped: `prometheus` is not installed (scripts/install-deps.sh installs it)");
        return;
    };
    let ck = "checkpoint: {interval: 100ms, timeout: 300ms, tolerable_failures: 10000}\n";
    let pipeline = write_pipeline(dir.path(), &datagen_pipeline(ck, None));
    let run =
        weir_run(&pipeline, 1).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).env("WEIR_FAULTS", "stall=unique:0:120s").spawn();
    let firing = r#"ALERTS{alertname="WeirCheckpointRepeatedFailure",alertstate="firing",pipeline="metered"}"#;
    let fired = wait_until(Duration::from_secs(40), || prom.scalar(firing) == Some(1.0));
    let failed = prom.query(r#"weir_checkpoints_failed_total{reason="timeout"}"#);
    let completed = scrape(port).map(|t| must(&t, "weir_checkpoints_completed_total", &[]));
    drop(run);
    assert!(fired, "the alert did not fire within 40 s; failures by timeout in Prometheus: {failed:?}");
    assert_eq!(completed, Some(0.0), "the stalled subtask let no checkpoint complete");
    // The other rules stay quiet (WeirNoCheckpointCompleted waits for 5 intervals and 1m).
    let others = prom.query(r#"ALERTS{alertstate="firing",alertname!="WeirCheckpointRepeatedFailure"}"#);
    assert!(others.is_empty(), "{others:?}");
}

/// Memory state figures: after a bounded running count has taken all its
/// input (the final checkpoint's barrier stalls it, so the process still
/// serves), `weir_state_keys` of the aggregate summed over its subtasks is
/// the number of distinct keys of the input (the accumulators; the dirty
/// marks were cleared by the final emission), and stateless nodes have none.
#[test]
fn memory_state_keys_equal_the_distinct_keys_of_the_input_after_a_bounded_count() {
    const ROWS: usize = 3000;
    let dir = tmp();
    let input = dir.path().join("in.jsonl");
    let mut text = String::new();
    let mut distinct = std::collections::BTreeSet::new();
    let mut x = 0x9e3779b9u32;
    for i in 0..ROWS {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let user = format!("u{}", x % 700);
        text.push_str(&format!("{{\"i\": {i}, \"user\": \"{user}\"}}\n"));
        distinct.insert(user);
    }
    std::fs::write(&input, text).unwrap();
    let pipeline = write_pipeline(
        dir.path(),
        &format!(
            "name: counted\ncheckpoint: {{interval: 1h}}\nsources:\n  - {{name: events, type: file, path: {}}}\noperators:\n  - {{name: per_user, type: aggregate, input: events, key: [user], aggregates: [{{fn: count, as: n}}]}}\nsinks:\n  - {{name: out, type: blackhole, input: per_user}}\n",
            input.display()
        ),
    );
    let port = free_port();
    let run =
        weir_run(&pipeline, 2).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).env("WEIR_FAULTS", "stall=per_user:0:3s").spawn();
    let op = r#"operator="per_user""#;
    let want = distinct.len() as f64;
    let text = wait_scrape(&run, port, "the count's state of all its input", |t| {
        value(t, "weir_records_in_total", &[op]) == Some(ROWS as f64) && value(t, "weir_state_keys", &[op]) == Some(want)
    });
    let o = run.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    o.expect_stderr_contains("Injected stall.");
    assert_eq!(summary_count(&o.stderr, "per_user", "in"), ROWS as u64, "{}", o.stderr);
    // One series per subtask; the keys split between them by key group.
    let per: Vec<f64> = (0..2).map(|s| must(&text, "weir_state_keys", &[op, &format!(r#"subtask="{s}""#)])).collect();
    assert!(per.iter().all(|&k| k > 0.0), "{per:?}");
    assert_eq!(per.iter().sum::<f64>(), want);
    // Key and value bytes: every entry has a non-empty key and an accumulator.
    let bytes = must(&text, "weir_state_size_bytes", &[op, r#"pipeline="counted""#]);
    assert!(bytes > 2.0 * want, "{bytes} bytes for {want} keys");
    assert_eq!(value(&text, "weir_state_keys", &[r#"operator="out""#]), None, "a stateless sink has no state series");
}

/// `GET /status` serves the document `weir status --json` prints (the
/// control socket's answer), with and without checkpoints; and the
/// checkpoint histograms count every completed checkpoint.
#[test]
fn status_document_over_http_equals_weir_status_json_and_histograms_count_checkpoints() {
    let dir = tmp();
    let pipeline = write_pipeline(dir.path(), &datagen_pipeline("checkpoint: {interval: 200ms}\n", None));
    let port = free_port();
    let run = weir_run(&pipeline, 2).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).spawn();
    let text = wait_scrape(&run, port, "3 completed checkpoints", |t| value(t, "weir_checkpoints_completed_total", &[]) >= Some(3.0));
    let completed = must(&text, "weir_checkpoints_completed_total", &[]);
    // Read after the counter, in the same scrape: one more may have completed in between.
    for h in ["weir_checkpoint_duration_seconds", "weir_checkpoint_alignment_duration_seconds", "weir_checkpoint_size_bytes"] {
        let count = must(&text, &format!("{h}_count"), &[]);
        assert!(count == completed || count == completed + 1.0, "{h}: {count} for {completed} completed:\n{text}");
        assert_eq!(must(&text, &format!("{h}_bucket"), &[r#"le="+Inf""#]), count, "{h}:\n{text}");
    }
    assert!(must(&text, "weir_checkpoint_size_bytes_sum", &[]) > 0.0);
    let (code, body) = get(port, "/status").expect("/status answers");
    assert_eq!(code, 200, "{body}");
    let http: serde_json::Value = serde_json::from_str(&body).unwrap();
    let cli = weir(&["status", &pipeline, "--json"]).ok();
    let socket: serde_json::Value = serde_json::from_str(cli.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", cli.stdout));
    // The same document: the same keys at every level, the same pipeline and operators.
    let keys = |v: &serde_json::Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    assert_eq!(keys(&http), keys(&socket));
    assert_eq!(keys(&http["live"]), keys(&socket["live"]));
    assert_eq!(
        (&http["ok"], &http["pipeline"], &http["parallelism"]),
        (&serde_json::json!(true), &serde_json::json!("metered"), &serde_json::json!(2))
    );
    let names = |v: &serde_json::Value| v["live"]["operators"].as_array().unwrap().iter().map(|o| o["name"].clone()).collect::<Vec<_>>();
    assert_eq!(names(&http), names(&socket));
    assert_eq!(names(&http), [serde_json::json!("events"), serde_json::json!("unique"), serde_json::json!("out")]);
    assert!(http["last_checkpoint"].as_u64() >= Some(3), "{http}");
    // The state directory alone finds it, from another working directory.
    let elsewhere = tmp();
    let by_dir = weir(&["status", dir.path().join("st").to_str().unwrap(), "--json"]).cwd(elsewhere.path()).ok();
    let by_dir: serde_json::Value = serde_json::from_str(by_dir.stdout.trim()).unwrap();
    assert_eq!(by_dir["pipeline"], "metered");
    run.terminate();
    run.wait_for(Duration::from_secs(20)).expect_code(0);

    // Without checkpoints: the engine's sample alone.
    let other = tmp();
    let pipeline = write_pipeline(other.path(), &datagen_pipeline("", None));
    let run = weir_run(&pipeline, 1).arg("--metrics-addr").arg(format!("127.0.0.1:{port}")).spawn();
    wait_scrape(&run, port, "records flowing", |t| value(t, "weir_records_in_total", &[r#"operator="out""#]) > Some(0.0));
    let (code, body) = get(port, "/status").expect("/status answers");
    assert_eq!(code, 200, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((&doc["last_checkpoint"], &doc["running"]), (&serde_json::json!(0), &serde_json::Value::Null), "{doc}");
    assert!(doc["live"]["records"].as_u64() > Some(0), "{doc}");
    // `weir status` reaches it too (issue 35 #17): its control socket is
    // opened in the state directory, made for it and removed at the end.
    let cli = weir(&["status", &pipeline, "--json"]).ok();
    let socket: serde_json::Value = serde_json::from_str(cli.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", cli.stdout));
    assert_eq!(keys(&doc), keys(&socket));
    assert_eq!((&socket["pipeline"], &socket["last_checkpoint"]), (&serde_json::json!("metered"), &serde_json::json!(0)), "{socket}");
    let state = other.path().join("st");
    assert!(state.join("control.sock").exists());
    // A second run of the same pipeline leaves the first one's socket alone.
    let second = weir_run(&pipeline, 1).spawn();
    std::thread::sleep(Duration::from_millis(1500));
    second.terminate();
    let o = second.wait_for(Duration::from_secs(20));
    o.expect_code(0);
    o.expect_stderr_contains("Another run of this pipeline answers on the control socket");
    assert!(weir(&["status", &pipeline, "--json"]).ok().stdout.contains("\"metered\""), "the first run still answers");
    run.terminate();
    run.wait_for(Duration::from_secs(20)).expect_code(0);
    assert!(!state.exists(), "the state directory made for the socket is removed");
}

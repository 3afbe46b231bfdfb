//! Event-time results that must not depend on how weir runs a pipeline:
//! chained or not (one task or two), parallelism, `rate_limit` (where the
//! source's watermarks fall). Each test writes its input and pipeline to a
//! temp dir and compares the output with an oracle computed here.

use std::collections::BTreeMap;
use std::path::Path;

use super::records::{canonical, parse};
use super::util::{sink_lines, tmp, weir, Outcome};

/// Run `yaml` (written to `dir/pipeline.yaml`) at parallelism `p`; exit 0.
fn run(dir: &Path, yaml: &str, p: u32) -> Outcome {
    let path = dir.join("pipeline.yaml");
    std::fs::write(&path, yaml).unwrap();
    let o = weir(&["run", path.to_str().unwrap(), "--no-progress", "-p", &p.to_string()]).run();
    o.expect_code(0);
    o
}

/// The sink's records, canonical and sorted (order across subtasks is free).
fn sorted_output(dir: &Path) -> Vec<String> {
    let mut lines: Vec<String> = sink_lines(dir).iter().map(|l| canonical(&parse(l))).collect();
    lines.sort();
    lines
}

fn write_lines(path: &Path, lines: impl IntoIterator<Item = String>) {
    let text: String = lines.into_iter().map(|l| l + "\n").collect();
    std::fs::write(path, text).unwrap();
}

/// Nothing was late anywhere: no "dropped" in the summary, no dead letter.
#[track_caller]
fn assert_nothing_late(o: &Outcome, dead_letter: &Path, what: &str) {
    assert!(!o.stderr.contains("dropped"), "{what}: records were dropped:\n{}", o.stderr);
    let dl = std::fs::read_to_string(dead_letter).unwrap_or_default();
    assert!(dl.is_empty(), "{what}: dead-lettered:\n{dl}");
}

/// `a` (tumbling `a_ms`, `allowed_lateness`) feeds `b` (tumbling `b_ms`);
/// `fan_out` adds a second consumer of `a`, so a and b run in two tasks
/// joined by a channel instead of chained in one.
fn chained_windows_yaml(dir: &Path, source: &str, a_ms: u64, lateness_ms: u64, b_ms: u64, fan_out: bool) -> String {
    let d = dir.display();
    let extra = if fan_out { "  - {name: side, type: blackhole, input: a}\n" } else { "" };
    format!(
        "name: chained\nsources:\n{source}\noperators:\n\
         \x20 - {{name: a, type: aggregate, input: src, key: [k], window: {{type: tumbling, size: {a_ms}ms}}, \
         allowed_lateness: {lateness_ms}ms, aggregates: [{{fn: count, as: n}}], dead_letter: {d}/late-a.jsonl}}\n\
         \x20 - {{name: b, type: aggregate, input: a, key: [k], window: {{type: tumbling, size: {b_ms}ms}}, \
         aggregates: [{{fn: sum, field: n, as: n}}, {{fn: count, as: windows}}], dead_letter: {d}/late-b.jsonl}}\n\
         sinks:\n  - {{name: out, type: file, input: b, path: {d}/out}}\n{extra}"
    )
}

/// What `b` must output for records (key, ts): per key and `b` window, the
/// record count and the number of distinct `a` windows holding records.
fn chained_windows_oracle(records: &[(String, i64)], a_ms: i64, b_ms: i64) -> Vec<String> {
    let mut per: BTreeMap<(String, i64), (i64, std::collections::BTreeSet<i64>)> = BTreeMap::new();
    for (k, ts) in records {
        let e = per.entry((k.clone(), ts.div_euclid(b_ms) * b_ms)).or_default();
        e.0 += 1;
        e.1.insert(ts.div_euclid(a_ms));
    }
    let mut out: Vec<String> = per
        .into_iter()
        .map(|((k, start), (n, windows))| {
            let line = format!(r#"{{"k":"{k}","window_start":{start},"window_end":{},"n":{n},"windows":{}}}"#, start + b_ms, windows.len());
            canonical(&parse(&line))
        })
        .collect();
    out.sort();
    out
}

/// NEW-1: b's input is a's results, emitted on a watermark; chained, they
/// used to be processed under that same watermark and most were late.
#[test]
fn chained_windows_match_the_unchained_pipeline_and_the_oracle() {
    // Three keys, 5 ms apart, neighbours swapped (disorder 5 ms < 20 ms bound).
    let mut records: Vec<(String, i64)> = (0..900).map(|i| (format!("k{}", i % 3), i * 5)).collect();
    for pair in records.chunks_mut(2) {
        pair.swap(0, 1);
    }
    let want = chained_windows_oracle(&records, 50, 200);
    for p in [1, 2] {
        for fan_out in [false, true] {
            let dir = tmp();
            let input = dir.path().join("in.jsonl");
            write_lines(&input, records.iter().map(|(k, ts)| format!(r#"{{"k":"{k}","ts":{ts}}}"#)));
            // rate_limit: batches of 50 records, so many watermarks come by.
            let source = format!(
                "  - {{name: src, type: file, path: {}, rate_limit: 6000, event_time: {{field: ts, max_out_of_orderness: 20ms}}}}",
                input.display()
            );
            let what = format!("p={p} fan_out={fan_out}");
            let o = run(dir.path(), &chained_windows_yaml(dir.path(), &source, 50, 0, 200, fan_out), p);
            assert_nothing_late(&o, &dir.path().join("late-b.jsonl"), &what);
            assert_eq!(sorted_output(&dir.path().join("out")), want, "{what}");
        }
    }
}

/// Issue 18 #4: a's results are emitted at `end - 1 + allowed_lateness` but
/// stamped `end - 1`; a's watermark is held back by the lateness so they are
/// not late for b, chained or not, at any parallelism.
#[test]
fn allowed_lateness_upstream_keeps_its_results_on_time_downstream() {
    // Two keys, in order, ts 0..99 each.
    let records: Vec<(String, i64)> = (0..100).flat_map(|ts| ["x", "y"].map(|k| (k.to_string(), ts))).collect();
    let want = chained_windows_oracle(&records, 10, 20);
    for p in [1, 2] {
        for fan_out in [false, true] {
            let dir = tmp();
            let input = dir.path().join("in.jsonl");
            write_lines(&input, records.iter().map(|(k, ts)| format!(r#"{{"k":"{k}","ts":{ts}}}"#)));
            let source = format!(
                "  - {{name: src, type: file, path: {}, rate_limit: 400, event_time: {{field: ts, max_out_of_orderness: 0ms}}}}",
                input.display()
            );
            let what = format!("p={p} fan_out={fan_out}");
            let o = run(dir.path(), &chained_windows_yaml(dir.path(), &source, 10, 5, 20, fan_out), p);
            assert_nothing_late(&o, &dir.path().join("late-a.jsonl"), &what);
            assert_nothing_late(&o, &dir.path().join("late-b.jsonl"), &what);
            assert_eq!(sorted_output(&dir.path().join("out")), want, "{what}");
        }
    }
}

/// Issue 18 #2: records exactly `gap` apart are two sessions, whether or not
/// a watermark fired the first session before the second record came.
#[test]
fn session_results_do_not_depend_on_parallelism_or_rate() {
    let dir = tmp();
    let input = dir.path().join("in.jsonl");
    write_lines(
        &input,
        [r#"{"k":"x","ts":-100}"#, r#"{"k":"a","ts":0}"#, r#"{"k":"b","ts":10}"#, r#"{"k":"a","ts":10}"#].map(String::from),
    );
    let mut want: Vec<String> = [
        r#"{"k":"x","window_start":-100,"window_end":-90,"n":1}"#,
        r#"{"k":"a","window_start":0,"window_end":10,"n":1}"#,
        r#"{"k":"a","window_start":10,"window_end":20,"n":1}"#,
        r#"{"k":"b","window_start":10,"window_end":20,"n":1}"#,
    ]
    .iter()
    .map(|l| canonical(&parse(l)))
    .collect();
    want.sort();
    for p in [1, 2] {
        for rate in ["", ", rate_limit: 20"] {
            let d = dir.path().join(format!("p{p}{}", rate.len()));
            std::fs::create_dir_all(&d).unwrap();
            let yaml = format!(
                "name: sessions\nsources:\n  - {{name: src, type: file, path: {}{rate}, event_time: {{field: ts, max_out_of_orderness: 0ms}}}}\n\
                 operators:\n  - {{name: s, type: aggregate, input: src, key: [k], window: {{type: session, gap: 10ms}}, \
                 aggregates: [{{fn: count, as: n}}], dead_letter: {}/late.jsonl}}\n\
                 sinks:\n  - {{name: out, type: file, input: s, path: {}/out}}\n",
                input.display(),
                d.display(),
                d.display()
            );
            let what = format!("p={p}{rate}");
            let o = run(&d, &yaml, p);
            assert_nothing_late(&o, &d.join("late.jsonl"), &what);
            assert_eq!(sorted_output(&d.join("out")), want, "{what}");
        }
    }
}

/// Issue 18 #3: `{"id":1,"ts":105}` is within the TTL of `{"id":1,"ts":100}`;
/// it must not pass as new after the watermark (from ts 200) cleaned up id 1.
#[test]
fn dedup_never_passes_a_late_duplicate_after_its_key_expired() {
    let dir = tmp();
    let input = dir.path().join("in.jsonl");
    write_lines(&input, [r#"{"id":1,"ts":100}"#, r#"{"id":2,"ts":200}"#, r#"{"id":1,"ts":105}"#].map(String::from));
    let want = vec![canonical(&parse(r#"{"id":1,"ts":100}"#)), canonical(&parse(r#"{"id":2,"ts":200}"#))];
    for p in [1, 2] {
        for rate in ["", ", rate_limit: 20"] {
            let d = dir.path().join(format!("p{p}{}", rate.len()));
            std::fs::create_dir_all(&d).unwrap();
            let yaml = format!(
                "name: dedup\nsources:\n  - {{name: src, type: file, path: {}{rate}, event_time: {{field: ts, max_out_of_orderness: 0ms}}}}\n\
                 operators:\n  - {{name: u, type: dedup, input: src, key: [id], ttl: 10ms}}\n\
                 sinks:\n  - {{name: out, type: file, input: u, path: {}/out}}\n",
                input.display(),
                d.display()
            );
            run(&d, &yaml, p);
            assert_eq!(sorted_output(&d.join("out")), want, "p={p}{rate}");
        }
    }
}

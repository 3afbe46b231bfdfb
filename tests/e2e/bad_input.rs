//! `on_error: fail | skip | dead_letter` on a file source with bad lines.

use super::records::assert_same_multiset;
use super::reference::classify;
use super::util::{repo, sink_lines, tmp, weir_run};

const BAD: &str = "testdata/inputs/orders_bad.jsonl";
const PIPELINE: &str = "pipelines/dead_letter.yaml";

/// `on_error: fail | skip` cannot have a `dead_letter` path, so those runs
/// use the dedup example (same key and event time) on the bad input.
fn run_bad_input(on_error: &str, p: u32, input: &std::path::Path, out: &std::path::Path) -> super::util::Outcome {
    weir_run("pipelines/dedup.yaml", p)
        .set("sources.orders.path", input)
        .set("sources.orders.on_error", on_error)
        .set("sinks.out.path", out)
        .run()
}

/// (1-based line number, raw bytes, good?) of every non-blank line.
fn classified() -> Vec<(usize, Vec<u8>, bool)> {
    let bytes = std::fs::read(repo().join(BAD)).unwrap();
    let lines = bytes.split(|&b| b == b'\n').enumerate();
    let out: Vec<_> = lines.filter_map(|(i, l)| classify(l, &["order_id"], Some("ts")).map(|good| (i + 1, l.to_vec(), good))).collect();
    assert!(out.iter().filter(|(_, _, good)| !good).count() >= 10, "test data must have bad lines");
    out
}

fn good_lines() -> Vec<String> {
    classified().into_iter().filter(|(_, _, g)| *g).map(|(_, l, _)| String::from_utf8(l).unwrap()).collect()
}

#[test]
fn on_error_fail_exits_1_naming_file_line_and_reason() {
    let first_bad = classified().into_iter().find(|(_, _, g)| !g).unwrap().0;
    for p in [1, 2] {
        let dir = tmp();
        let o = run_bad_input("fail", p, std::path::Path::new(BAD), &dir.path().join("out"));
        o.expect_code(1);
        // The first bad line is truncated JSON.
        o.expect_stderr_contains(&format!("{BAD}:{first_bad}"));
        o.expect_stderr_contains("invalid JSON");
        // A runtime failure names the operator that failed.
        o.expect_stderr_contains("`orders`");
    }
}

#[test]
fn on_error_fail_reports_a_missing_key_field() {
    // Only the lines from the first missing-key line on: that line is line 1.
    let dir = tmp();
    let bytes = std::fs::read(repo().join(BAD)).unwrap();
    let from = bytes.windows(13).position(|w| w == br#"{"user":"u01""#).expect("test data has a missing-key line");
    let file = dir.path().join("missing_key.jsonl");
    std::fs::write(&file, &bytes[from..]).unwrap();
    let o = run_bad_input("fail", 1, &file, &dir.path().join("out"));
    o.expect_code(1);
    o.expect_stderr_contains(&format!("{}:1", file.display()));
    o.expect_stderr_contains("missing key field `order_id`");
}

#[test]
fn on_error_skip_drops_bad_lines_only() {
    for p in [1, 2, 3] {
        let dir = tmp();
        let out = dir.path().join("out");
        run_bad_input("skip", p, std::path::Path::new(BAD), &out).expect_code(0);
        assert_same_multiset(&format!("skip -p {p}"), sink_lines(&out), good_lines());
    }
}

#[test]
fn on_error_dead_letter_writes_each_bad_line_with_origin_and_reason() {
    let bad: Vec<(usize, Vec<u8>)> = classified().into_iter().filter(|(_, _, g)| !g).map(|(n, l, _)| (n, l)).collect();
    for p in [1, 3] {
        let dir = tmp();
        let out = dir.path().join("out");
        let dead = dir.path().join("dead.jsonl");
        weir_run(PIPELINE, p).set("sources.orders.dead_letter", &dead).set("sinks.out.path", &out).ok();
        assert_same_multiset(&format!("dead_letter -p {p}: accepted"), sink_lines(&out), good_lines());

        let text = std::fs::read_to_string(&dead).expect("dead letter file written");
        let mut entries: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).expect("dead letter lines are JSON")).collect();
        assert_eq!(entries.len(), bad.len(), "one dead letter per bad line:\n{text}");
        for (line_no, raw) in &bad {
            let record = String::from_utf8_lossy(raw).into_owned();
            let at = entries
                .iter()
                .position(|e| e["record"] == record.trim_end())
                .unwrap_or_else(|| panic!("no dead letter for line {line_no}: {record}\n{text}"));
            let e = entries.remove(at);
            let origin = e["origin"].as_str().expect("origin is a string");
            assert!(origin.contains(&format!("{BAD}:{line_no}")), "origin {origin:?} should name {BAD}:{line_no}");
            assert!(!e["reason"].as_str().expect("reason is a string").is_empty());
        }
    }
}

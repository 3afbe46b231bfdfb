//! `count_distinct`, `first`, `last` and `collect` (issue 16) through the
//! real binary: every window type and running aggregates at parallelism
//! 1, 2 and 3, and a crash restored at another parallelism with both state
//! backends, each compared with the reference implementation.

use std::collections::BTreeMap;

use super::ckpt::{abs, both_backends, kill_after, restored_from, write_pipeline, Backend};
use super::records::{assert_same_records, parse, Obj};
use super::reference::{self, Agg, Func::*, Window};
use super::util::{input_lines, sink_lines, tmp, weir_run};

const ORDERS: &str = "testdata/inputs/orders.jsonl";
const EXAMPLE: &str = "pipelines/distinct.yaml";

/// pipelines/distinct.yaml's aggregates.
const AGGS: &[Agg] = &[
    (Count, None, "n"),
    (CountDistinct, Some("order_id"), "orders"),
    (First, Some("price"), "first_price"),
    (Last, Some("price"), "last_price"),
    (Collect(3), Some("order_id"), "some_orders"),
];

/// The example with its window line replaced (`""`: a running aggregate), written to `dir`.
fn example_with_window(dir: &std::path::Path, window: &str) -> String {
    let text = std::fs::read_to_string(abs(EXAMPLE)).unwrap();
    let line = "    window: {type: tumbling, size: 10s}\n";
    assert!(text.contains(line));
    let text = text.replace(line, &if window.is_empty() { String::new() } else { format!("    window: {window}\n") });
    write_pipeline(dir, "distinct", &text.replace("path: testdata/inputs/orders.jsonl", &format!("path: {}", abs(ORDERS))))
}

fn run(pipeline: &str, p: u32) -> Vec<String> {
    let dir = tmp();
    let out = dir.path().join("out");
    weir_run(pipeline, p).set("sinks.out.path", &out).ok();
    sink_lines(&out)
}

/// The last line per key (a running aggregate's final values).
fn last_per_user(lines: Vec<String>) -> Vec<String> {
    let mut last = BTreeMap::new();
    for l in lines {
        last.insert(parse(&l)["user"].to_string(), l);
    }
    last.into_values().collect()
}

#[track_caller]
fn check_every_parallelism(pipeline: &str, expected: &[Obj], running: bool) {
    // The data must exercise the functions: repeated ids, more than 3 orders a group.
    assert!(expected.iter().any(|o| o["orders"].as_i64() < o["n"].as_i64()), "no repeated order in a group");
    assert!(expected.iter().any(|o| o["n"].as_i64() > Some(3)), "no group with more than max_items values");
    for p in [1, 2, 3] {
        let lines = run(pipeline, p);
        let lines = if running { last_per_user(lines) } else { lines };
        assert_same_records(&format!("{pipeline} -p {p}"), &lines, expected);
    }
}

#[test]
fn distinct_first_last_collect_in_tumbling_windows() {
    let expected = reference::aggregate(&input_lines(ORDERS), &["user"], "ts", Some(Window::Tumbling { size: 10_000 }), AGGS);
    check_every_parallelism(EXAMPLE, &expected, false);
}

#[test]
fn distinct_first_last_collect_in_sliding_and_session_windows() {
    let dir = tmp();
    let cases = [
        ("{type: sliding, size: 30s, slide: 10s}", Window::Sliding { size: 30_000, slide: 10_000 }),
        ("{type: session, gap: 3s}", Window::Session { gap: 3_000 }),
    ];
    for (yaml, window) in cases {
        let expected = reference::aggregate(&input_lines(ORDERS), &["user"], "ts", Some(window), AGGS);
        check_every_parallelism(&example_with_window(dir.path(), yaml), &expected, false);
    }
}

#[test]
fn distinct_first_last_collect_in_a_running_aggregate() {
    let dir = tmp();
    let expected = reference::aggregate(&input_lines(ORDERS), &["user"], "ts", None, AGGS);
    check_every_parallelism(&example_with_window(dir.path(), ""), &expected, true);
}

/// Events (with redelivered copies) -> session per user with every new
/// function -> exactly-once file sink; checkpoints every 100 ms.
fn crash_pipeline(dir: &std::path::Path) -> String {
    let yaml = format!(
        r#"name: value_aggs
state: {{dir: {state}}}
checkpoint: {{interval: 100ms, mode: exactly_once, alignment: aligned}}
sources:
  - name: events
    type: file
    path: {input}
    rate_limit: 300
    event_time: {{field: ts, max_out_of_orderness: 1s}}
operators:
  - name: per_user
    type: aggregate
    input: events
    key: [user]
    window: {{type: session, gap: 300ms}}
    aggregates:
      - {{fn: count_distinct, field: id, as: ids}}
      - {{fn: first, field: amount, as: first}}
      - {{fn: last, field: amount, as: last}}
      - {{fn: collect, field: id, max_items: 4, as: some}}
sinks:
  - {{name: out, type: file, input: per_user, path: {out}}}
"#,
        state = dir.join("state").display(),
        input = abs("testdata/inputs/events/*.jsonl"),
        out = dir.join("out").display(),
    );
    write_pipeline(dir, "value_aggs", &yaml)
}

both_backends! {
    fn crash_at_parallelism_2_restored_at_3_is_exactly_the_reference(backend: Backend) {
        let dir = tmp();
        let pipeline = crash_pipeline(dir.path());
        // An incremental RocksDB checkpoint is tied to its subtasks: restoring at another parallelism needs a canonical one.
        let configure = |w| match backend {
            Backend::RocksDb => backend.apply(w).set("state.incremental", "false"),
            Backend::Memory => backend.apply(w),
        };
        let mut first = configure(weir_run(&pipeline, 2)).spawn();
        // A third of the input or less at 300 rows/s, several checkpoints.
        assert!(kill_after(&mut first, std::time::Duration::from_millis(2000)), "the run ended before the kill");
        let o = configure(weir_run(&pipeline, 3).arg("--restore").arg("latest")).ok();
        assert!(restored_from(&o.stderr).is_some(), "no checkpoint to restore from: {}", o.stderr);
        let mut lines = Vec::new();
        for f in crate::ckpt::INPUTS {
            lines.extend(input_lines(f));
        }
        let aggs: &[Agg] =
            &[(CountDistinct, Some("id"), "ids"), (First, Some("amount"), "first"), (Last, Some("amount"), "last"), (Collect(4), Some("id"), "some")];
        let expected = reference::aggregate(&lines, &["user"], "ts", Some(Window::Session { gap: 300 }), aggs);
        assert!(expected.iter().any(|o| o["some"].as_array().unwrap().len() == 4));
        assert_same_records(&format!("crash at p=2, restored at p=3, {backend:?}"), &sink_lines(&dir.path().join("out")), &expected);
    }
}

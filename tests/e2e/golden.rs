//! Golden runs: each operator and window type at parallelism 1, 2 and 3,
//! compared exactly with the reference implementation.
//!
//! The inputs are out of order by at most 2 s and every pipeline allows 5 s,
//! so no record is late and the result may not depend on parallelism.

use std::collections::BTreeMap;

use super::records::{assert_same_multiset, assert_same_records, parse, Obj};
use super::reference::{self, Agg, Func::*, Window};
use super::util::{hidden_files, input_lines, sink_lines, tmp, weir_run, Weir};

const ORDERS: &str = "testdata/inputs/orders.jsonl";
const PARALLELISMS: [u32; 3] = [1, 2, 3];

/// Run `pipeline` with its sink `out` redirected to a temp dir; the lines written.
fn run_to_sink(pipeline: &str, p: u32, extra: impl FnOnce(Weir) -> Weir) -> Vec<String> {
    let dir = tmp();
    let out = dir.path().join("out");
    extra(weir_run(pipeline, p).set("sinks.out.path", &out)).ok();
    assert!(hidden_files(&out).is_empty(), "{pipeline} -p {p}: in-progress files left: {:?}", hidden_files(&out));
    sink_lines(&out)
}

/// The aggregate golden test shape: same records as the reference at every parallelism.
fn check_aggregate(pipeline: &str, expected: &[Obj], extra: impl Fn(Weir) -> Weir) {
    assert!(!expected.is_empty());
    for p in PARALLELISMS {
        let lines = run_to_sink(pipeline, p, &extra);
        assert_same_records(&format!("{pipeline} -p {p}"), &lines, expected);
    }
}

const TUMBLING_AGGS: &[Agg] = &[
    (Count, None, "n"),
    (Count, Some("amount"), "n_amount"),
    (Sum, Some("amount"), "total"),
    (Min, Some("amount"), "smallest"),
    (Max, Some("amount"), "largest"),
    (Avg, Some("amount"), "mean"),
    (Sum, Some("price"), "revenue"),
];

fn tumbling_10s(lines: &[String], aggs: &[Agg]) -> Vec<Obj> {
    reference::aggregate(lines, &["user"], "ts", Some(Window::Tumbling { size: 10_000 }), aggs)
}

#[test]
fn dedup_passes_the_first_copy_of_each_order_unchanged() {
    let orders = input_lines(ORDERS);
    let expected = reference::dedup(&orders, &["order_id"]);
    assert!(expected.len() < orders.len(), "test data must contain duplicates");
    for p in PARALLELISMS {
        let got = run_to_sink("pipelines/dedup.yaml", p, |w| w);
        assert_same_multiset(&format!("dedup -p {p}"), got, expected.clone());
    }
}

#[test]
fn tumbling_window_every_function_with_nulls() {
    let expected = tumbling_10s(&input_lines(ORDERS), TUMBLING_AGGS);
    // The data has a user whose amounts are all null: sum/min/max/avg are null.
    assert!(expected.iter().any(|o| o["user"] == "nobody" && o["total"].is_null() && o["n_amount"] == 0));
    check_aggregate("pipelines/tumbling.yaml", &expected, |w| w);
}

#[test]
fn tumbling_window_over_rfc3339_event_times() {
    let rfc = "testdata/inputs/orders_rfc3339.jsonl";
    let expected = tumbling_10s(&input_lines(rfc), TUMBLING_AGGS);
    // The same orders with integer timestamps give the same windows.
    assert_eq!(expected, tumbling_10s(&input_lines(ORDERS), TUMBLING_AGGS));
    check_aggregate("pipelines/tumbling.yaml", &expected, |w| w.set("sources.orders.path", rfc));
}

#[test]
fn rfc3339_event_times_with_utc_offsets() {
    // RFC 3339 allows any offset, not only `Z`.
    let file = "testdata/inputs/orders_offset.jsonl";
    let expected = tumbling_10s(&input_lines(file), &[(Count, None, "n"), (Sum, Some("amount"), "total")]);
    for p in [1, 2] {
        let dir = tmp();
        let out = dir.path().join("out");
        weir_run("pipelines/glob.yaml", p).set("sources.orders.path", file).set("sinks.out.path", &out).ok();
        assert_same_records(&format!("offset timestamps -p {p}"), &sink_lines(&out), &expected);
    }
}

#[test]
fn sliding_window() {
    let aggs: &[Agg] = &[(Count, None, "n"), (Sum, Some("amount"), "total"), (Max, Some("price"), "top_price")];
    let window = Window::Sliding { size: 30_000, slide: 10_000 };
    let expected = reference::aggregate(&input_lines(ORDERS), &["user"], "ts", Some(window), aggs);
    check_aggregate("pipelines/sliding.yaml", &expected, |w| w);
}

#[test]
fn session_window() {
    let aggs: &[Agg] = &[(Count, None, "n"), (Sum, Some("amount"), "total"), (Min, Some("amount"), "smallest")];
    let window = Window::Session { gap: 3_000 };
    let expected = reference::aggregate(&input_lines(ORDERS), &["user"], "ts", Some(window), aggs);
    assert!(expected.iter().any(|o| o["n"].as_i64() > Some(1)), "sessions should merge records");
    check_aggregate("pipelines/session.yaml", &expected, |w| w);
}

#[test]
fn running_aggregate_last_value_per_key() {
    let aggs: &[Agg] = &[(Count, None, "n"), (Sum, Some("amount"), "total"), (Avg, Some("price"), "avg_price")];
    let expected = reference::aggregate(&input_lines(ORDERS), &["user"], "ts", None, aggs);
    for p in PARALLELISMS {
        let lines = run_to_sink("pipelines/running.yaml", p, |w| w);
        // Keep the last emission per user (a key lives in one subtask, whose
        // part files are read in order).
        let mut last: BTreeMap<String, String> = BTreeMap::new();
        for l in lines {
            last.insert(parse(&l)["user"].to_string(), l);
        }
        let last: Vec<String> = last.into_values().collect();
        assert_same_records(&format!("running -p {p}"), &last, &expected);
    }
}

#[test]
fn dedup_then_tumbling_aggregate() {
    let unique = reference::dedup(&input_lines(ORDERS), &["order_id"]);
    let expected = tumbling_10s(&unique, &[(Count, None, "orders"), (Sum, Some("amount"), "revenue")]);
    check_aggregate("pipelines/orders.yaml", &expected, |w| w);
}

fn parts_lines() -> Vec<String> {
    (0..3).flat_map(|i| input_lines(&format!("testdata/inputs/orders_parts/orders-{i}.jsonl"))).collect()
}

#[test]
fn glob_source_reads_every_matching_file() {
    let expected = tumbling_10s(&parts_lines(), &[(Count, None, "n"), (Sum, Some("amount"), "total")]);
    check_aggregate("pipelines/glob.yaml", &expected, |w| w);
}

#[test]
fn directory_source_reads_every_file() {
    let expected = tumbling_10s(&parts_lines(), &[(Count, None, "n"), (Sum, Some("amount"), "total")]);
    check_aggregate("pipelines/glob.yaml", &expected, |w| w.set("sources.orders.path", "testdata/inputs/orders_parts"));
}

#[test]
fn stdout_sink_prints_one_line_per_result() {
    let aggs: &[Agg] = &[(Count, None, "n"), (Max, Some("amount"), "largest")];
    let expected = reference::aggregate(&input_lines(ORDERS), &["user"], "ts", Some(Window::Tumbling { size: 60_000 }), aggs);
    for p in PARALLELISMS {
        let o = weir_run("pipelines/stdout.yaml", p).ok();
        let lines: Vec<String> = o.stdout.lines().map(String::from).collect();
        assert_same_records(&format!("stdout -p {p}"), &lines, &expected);
    }
}

/// quickstart.yaml with its sink reading the datagen source directly (and
/// no operators), written to `dir`: the raw generated rows.
fn quickstart_rows_pipeline(dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string(super::util::repo().join("pipelines/quickstart.yaml")).unwrap();
    let mut doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    doc.as_mapping_mut().unwrap().remove("operators");
    doc["sinks"][0]["input"] = "clicks".into();
    let path = dir.join("quickstart_rows.yaml");
    std::fs::write(&path, serde_yaml::to_string(&doc).unwrap()).unwrap();
    path.display().to_string()
}

#[test]
fn datagen_rows_and_windows_do_not_depend_on_parallelism() {
    // The raw rows at parallelism 1 are the reference input; they must be
    // the same rows at 2 and 3.
    let dir = tmp();
    let rows_pipeline = quickstart_rows_pipeline(dir.path());
    let raw = |p| run_to_sink(&rows_pipeline, p, |w| w);
    let rows = raw(1);
    assert_eq!(rows.len(), 20_000);
    for p in [2, 3] {
        assert_same_multiset(&format!("datagen rows -p {p}"), raw(p), rows.clone());
    }
    let aggs: &[Agg] = &[(Count, None, "clicks"), (Sum, Some("amount"), "total"), (Avg, Some("amount"), "avg_amount")];
    let expected = tumbling_10s(&rows, aggs);
    check_aggregate("pipelines/quickstart.yaml", &expected, |w| w);
}

#[test]
fn one_subtask_reading_files_of_the_same_time_range_one_after_another_drops_nothing() {
    // The two event files cover the same event times. At parallelism 1 one
    // subtask reads them one after the other: the watermark must wait for
    // the second file instead of making all of it late.
    let state = tmp();
    let lines = run_to_sink(super::ckpt::PIPELINE, 1, |w| super::ckpt::fast(w).set("state.dir", state.path()));
    assert_same_records("checkpointed.yaml -p 1", &lines, &super::ckpt::reference_output());
}

const NESTED: &str = "testdata/inputs/nested.jsonl";

#[test]
fn nested_field_paths_as_keys_and_aggregated_fields() {
    let aggs: &[Agg] = &[(Count, None, "orders"), (Sum, Some("items[0].qty"), "first_qty"), (Max, Some("amount"), "largest")];
    let key = ["user.country", "items[0].sku", "\"shop.region\""];
    let expected = reference::aggregate(&input_lines(NESTED), &key, "ts", Some(Window::Tumbling { size: 10_000 }), aggs);
    assert!(expected[0].contains_key("shop.region") && expected[0].contains_key("items[0].sku"), "{:?}", expected[0]);
    check_aggregate("pipelines/nested.yaml", &expected, |w| w);
}

/// pipelines/filter.yaml's `where`, written from its text.
fn big_abroad(o: &Obj) -> bool {
    o["amount"].as_i64().unwrap() > 100 && o["user"]["country"] != "DE"
}

#[test]
fn filter_passes_the_matching_records_unchanged() {
    let lines = input_lines(NESTED);
    let expected: Vec<String> = lines.iter().filter(|l| big_abroad(&parse(l))).cloned().collect();
    assert!(!expected.is_empty() && expected.len() < lines.len());
    for p in PARALLELISMS {
        let got = run_to_sink("pipelines/filter.yaml", p, |w| w);
        assert_same_multiset(&format!("filter -p {p}"), got, expected.clone());
    }
}

/// pipelines/map.yaml's `map`, written from its documentation: rename, set, drop.
fn shaped(o: &Obj) -> Obj {
    let mut out = o.clone();
    let uid = out["user"].as_object_mut().unwrap().remove("id").unwrap();
    out.insert("uid".into(), uid);
    let eur = o["amount"].as_i64().unwrap() as f64 * 0.92;
    out.insert("total_eur".into(), serde_json::Number::from_f64(eur).unwrap().into());
    out.insert("first_sku".into(), o["items"][0]["sku"].clone());
    out.shift_remove("items");
    out.shift_remove("debug");
    out
}

#[test]
fn map_then_windowed_aggregate_by_a_renamed_field() {
    let mapped: Vec<String> = input_lines(NESTED).iter().map(|l| serde_json::to_string(&shaped(&parse(l))).unwrap()).collect();
    let aggs: &[Agg] = &[(Count, None, "orders"), (Sum, Some("total_eur"), "revenue_eur")];
    let expected = reference::aggregate(&mapped, &["uid"], "ts", Some(Window::Tumbling { size: 10_000 }), aggs);
    check_aggregate("pipelines/map.yaml", &expected, |w| w);
}

#[test]
fn filter_map_dedup_aggregate_chain_at_every_parallelism() {
    // Filter and map chain into the source's task; the dedup and aggregate
    // read fields the map's output carries (projected from it).
    let dir = tmp();
    let pipeline = dir.path().join("chain.yaml");
    let input = super::util::repo().join(NESTED);
    std::fs::write(
        &pipeline,
        format!(
            r#"name: chain
sources:
  - {{name: orders, type: file, path: "{}", event_time: {{field: ts, max_out_of_orderness: 5s}}}}
operators:
  - {{name: big, type: filter, input: orders, where: "amount > 100 && user.country != 'DE'"}}
  - name: shaped
    type: map
    input: big
    rename: {{uid: user.id}}
    set: {{total_eur: "double(amount) * 0.92", first_sku: "items[0].sku"}}
    drop: [items, debug]
  - {{name: unique, type: dedup, input: shaped, key: [first_sku, uid]}}
  - name: per_sku
    type: aggregate
    input: unique
    key: [first_sku]
    window: {{type: tumbling, size: 10s}}
    aggregates: [{{fn: count, as: n}}, {{fn: max, field: total_eur, as: top}}, {{fn: sum, field: user.id, as: none}}]
sinks:
  - {{name: out, type: file, input: per_sku, path: out}}
"#,
            input.display()
        ),
    )
    .unwrap();
    let kept: Vec<String> =
        input_lines(NESTED).iter().map(|l| parse(l)).filter(big_abroad).map(|o| serde_json::to_string(&shaped(&o)).unwrap()).collect();
    let unique = reference::dedup(&kept, &["first_sku", "uid"]);
    let aggs: &[Agg] = &[(Count, None, "n"), (Max, Some("total_eur"), "top"), (Sum, Some("user.id"), "none")];
    let expected = reference::aggregate(&unique, &["first_sku"], "ts", Some(Window::Tumbling { size: 10_000 }), aggs);
    assert!(expected.iter().all(|o| o["none"].is_null()), "the renamed field is gone");
    for p in PARALLELISMS {
        let lines = run_to_sink(pipeline.to_str().unwrap(), p, |w| w);
        assert_same_records(&format!("chain -p {p}"), &lines, &expected);
    }
}

#[test]
fn a_map_that_adds_fields_keeps_each_records_text_at_every_parallelism() {
    // A `map` with only new top-level fields appends them to the flat
    // input's JSON text; the expected lines are built here from the input.
    let dir = tmp();
    let pipeline = dir.path().join("append.yaml");
    let input = super::util::repo().join(ORDERS);
    std::fs::write(
        &pipeline,
        format!(
            r#"name: append
sources:
  - {{name: orders, type: file, path: "{}"}}
operators:
  - {{name: some, type: filter, input: orders, where: "amount % 3 != 0", on_error: skip}}
  - name: tagged
    type: map
    input: some
    set: {{amount_x2: "amount * 2", day: "timestamp(ts / 1000).getDayOfWeek()", dear: "double(price) > 50.0", who: "user.matches('^u0')"}}
    on_error: skip
sinks:
  - {{name: out, type: file, input: tagged, path: out}}
"#,
            input.display()
        ),
    )
    .unwrap();
    let expected: Vec<String> = input_lines(ORDERS)
        .iter()
        .filter_map(|line| {
            let o = parse(line);
            // Without an integer amount the filter skips the record, without a numeric price the map.
            let amount = o.get("amount").and_then(|a| a.as_i64())?;
            if amount % 3 == 0 || !o.get("price").is_some_and(|p| p.is_number()) {
                return None;
            }
            // 1970-01-01 was a Thursday (CEL counts from Sunday = 0).
            let day = (o["ts"].as_i64().unwrap().div_euclid(1000).div_euclid(86_400) + 4).rem_euclid(7);
            let dear = o["price"].as_f64().unwrap() > 50.0;
            let who = o["user"].as_str().unwrap().starts_with("u0");
            let body = line.trim_end().strip_suffix('}').unwrap();
            Some(format!(r#"{body},"amount_x2":{},"day":{day},"dear":{dear},"who":{who}}}"#, amount * 2))
        })
        .collect();
    assert!(expected.len() > 100);
    for p in PARALLELISMS {
        let got = run_to_sink(pipeline.to_str().unwrap(), p, |w| w);
        assert_same_multiset(&format!("append -p {p}"), got, expected.clone());
    }
}

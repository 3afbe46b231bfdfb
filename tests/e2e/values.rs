//! Numeric, key and event-time values through the real binary (issue 18
//! #5–#10): exact integer sums, exact number keys, `count` of any field,
//! flooring of times before 1970, and event times outside the supported
//! range as bad records. (Refused spans and a key named like a window bound
//! are in `testdata/invalid/event_time_limits.yaml`.)

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::util::{sink_lines, tmp, weir_run, Outcome};

/// What one run wrote: the output lines and the dead letters.
struct Run {
    outcome: Outcome,
    out: Vec<String>,
    dead: Vec<Value>,
}

/// Run `operator` (YAML flow mapping without `name`/`input`) over `input`
/// lines from a file source (with `event_time: {field: ts}` if `event_time`),
/// writing to a file sink, at parallelism `p`.
fn run(operator: &str, input: &[&str], event_time: bool, p: u32) -> Run {
    let dir = tmp();
    let d = dir.path();
    let file = d.join("in.jsonl");
    std::fs::write(&file, input.join("\n") + "\n").unwrap();
    let time = if event_time { "event_time: {field: ts}, " } else { "" };
    let yaml = format!(
        "name: values\nstate: {{dir: {state}}}\nsources:\n  - {{name: in, type: file, path: {file}, {time}on_error: dead_letter, dead_letter: {dead}}}\n\
         operators:\n  - {{name: op, input: in, {operator}}}\nsinks:\n  - {{name: out, type: file, input: op, path: {out}}}\n",
        state = d.join("state").display(),
        file = file.display(),
        dead = d.join("dead.jsonl").display(),
        out = d.join("out").display(),
    );
    let pipeline = d.join("values.yaml");
    std::fs::write(&pipeline, yaml).unwrap();
    let outcome = weir_run(&pipeline.display().to_string(), p).run();
    let dead = std::fs::read_to_string(d.join("dead.jsonl")).unwrap_or_default();
    let dead = dead.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    Run { outcome, out: sink_lines(&d.join("out")), dead }
}

/// The last output record of each key (`field`), as JSON values.
fn last_per_key(lines: &[String], field: &str) -> BTreeMap<String, Value> {
    let mut last = BTreeMap::new();
    for l in lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        last.insert(v[field].to_string(), v);
    }
    last
}

fn ok(r: &Run) {
    r.outcome.expect_code(0);
}

#[test]
fn integer_sums_are_exact_in_any_order_and_float_overflow_says_so() {
    let max = i64::MAX;
    let two53 = 1i64 << 53;
    let xs: Vec<(&str, String)> = [
        // Issue 18 #5: `MAX, 1, -5` was a lossy float, `1, -5, MAX` exact.
        ("a", vec![max.to_string(), "1".into(), "-5".into()]),
        ("b", vec!["1".into(), "-5".into(), max.to_string()]),
        ("big", vec![max.to_string(), max.to_string()]),
        ("inf", vec!["1e308".into(), "1e308".into()]),
        ("zero", vec!["-0".into()]),
        ("mean", vec![two53.to_string(), "1".into(), "1".into(), "1".into(), "1".into()]),
    ]
    .into_iter()
    .flat_map(|(k, xs)| xs.into_iter().map(move |x| (k, x)))
    .collect();
    let lines: Vec<String> = xs.iter().map(|(k, x)| format!(r#"{{"k":"{k}","x":{x}}}"#)).collect();
    let input: Vec<&str> = lines.iter().map(String::as_str).collect();
    let op = "type: aggregate, key: [k], aggregates: [{fn: sum, field: x, as: total}, {fn: avg, field: x, as: mean}]";
    for p in [1, 2] {
        let r = run(op, &input, false, p);
        ok(&r);
        let last = last_per_key(&r.out, "k");
        let total = |k: &str| last[&format!("\"{k}\"")]["total"].clone();
        assert_eq!(total("a"), json!(max - 4), "p={p}");
        assert_eq!(total("b"), json!(max - 4), "p={p}");
        assert_eq!(total("big"), json!(2 * (max as u64)), "an exact integer beyond i64, p={p}");
        assert_eq!(total("inf"), json!("Infinity"), "overflow is not `null`, p={p}");
        assert_eq!(total("zero"), json!(0), "p={p}");
        assert_eq!(last["\"mean\""]["mean"], json!(1801439850948199.2), "p={p}");
        // Exact text, not only the same f64.
        assert!(r.out.iter().any(|l| l.contains(r#""total":9223372036854775803,"#)), "{:?}", r.out);
        assert!(r.out.iter().any(|l| l.contains(r#""total":0,"#)), "JSON -0 sums to 0, not -0.0: {:?}", r.out);
    }
}

#[test]
fn number_keys_compare_by_exact_value() {
    // Issue 18 #6: keys beyond i64 collapsed; `9000000000000000` and `9e15` were two keys.
    let ids = [
        "18446744073709551614",
        "18446744073709551615",
        "12345678901234567891",
        "12345678901234567890",
        "9000000000000000",
        "9e15",
        "1",
        "1.0",
        "18446744073709551614",
    ];
    let lines: Vec<String> = ids.iter().map(|id| format!(r#"{{"id":{id}}}"#)).collect();
    let input: Vec<&str> = lines.iter().map(String::as_str).collect();
    for p in [1, 2] {
        let r = run("type: dedup, key: [id]", &input, false, p);
        ok(&r);
        assert_eq!(r.out.len(), 6, "six distinct values, p={p}: {:?}", r.out);
        if p == 1 {
            // One reader: the first of each value passes.
            let want: Vec<String> = [0, 1, 2, 3, 4, 6].iter().map(|&i| lines[i].clone()).collect();
            assert_eq!(r.out, want);
        }
    }
    let users = ["9223372036854775808", "9223372036854775809", "9223372036854775810", "9223372036854775808", "2.0", "2"];
    let lines: Vec<String> = users.iter().map(|u| format!(r#"{{"user":{u}}}"#)).collect();
    let input: Vec<&str> = lines.iter().map(String::as_str).collect();
    let r = run("type: aggregate, key: [user], aggregates: [{fn: count, as: n}]", &input, false, 2);
    ok(&r);
    let mut out = r.out.clone();
    out.sort();
    // Keys print normalised: an integral value as an integer.
    let want = [
        r#"{"user":2,"n":2}"#,
        r#"{"user":9223372036854775808,"n":2}"#,
        r#"{"user":9223372036854775809,"n":1}"#,
        r#"{"user":9223372036854775810,"n":1}"#,
    ];
    assert_eq!(out, want);
}

#[test]
fn count_of_a_string_field_counts_its_non_null_values() {
    // Issue 18 #8: n=2 and 2 dead letters, instead of n=4, with_email=2.
    let input =
        [r#"{"k":"a","email":"x@example.com"}"#, r#"{"k":"a","email":null}"#, r#"{"k":"a"}"#, r#"{"k":"a","email":"y@example.com"}"#];
    let r = run("type: aggregate, key: [k], aggregates: [{fn: count, as: n}, {fn: count, field: email, as: with_email}]", &input, false, 1);
    ok(&r);
    assert!(r.dead.is_empty(), "{:?}", r.dead);
    assert_eq!(r.out.last().map(String::as_str), Some(r#"{"k":"a","n":4,"with_email":2}"#), "{:?}", r.out);
}

/// Issue 34 #1, #5, #6: ties across types, integers past i128 and float
/// cancellations give one result in any order and at any parallelism.
#[test]
fn min_max_sum_and_avg_do_not_depend_on_order_or_parallelism() {
    let e40 = "10000000000000000000000000000000000000000";
    let rows: Vec<String> = [
        ("a", "9007199254740993"),
        ("a", "9007199254740992.0"),
        ("a", "9223372036854775807"),
        ("a", "9223372036854775808"),
        ("a", "0"),
        ("a", "-0.0"),
        ("a", "0.0"),
        ("a", "100"),
        ("a", "1e2"),
        ("b", "1e308"),
        ("b", "1e308"),
        ("b", "-1e308"),
        ("b", "-1e308"),
        ("b", "1.0"),
        ("c", &format!("-{e40}")),
        ("c", e40),
        ("c", "5"),
        ("d", "170141183460469231731687303715884105727"),
        ("d", "1"),
        ("d", "-1"),
    ]
    .iter()
    .map(|(k, v)| format!(r#"{{"k":"{k}","v":{v}}}"#))
    .collect();
    let op = "type: aggregate, key: [k], aggregates: [{fn: min, field: v, as: lo}, {fn: max, field: v, as: hi}, {fn: sum, field: v, as: s}, {fn: avg, field: v, as: m}]";
    let want = [
        // Checked with Python's exact `Fraction`: float(sum) and float(sum / 9).
        r#"{"k":"a","lo":0,"hi":9223372036854775808,"s":1.8464758472219034e+19,"m":2.0516398302465592e+18}"#,
        r#"{"k":"b","lo":-1e+308,"hi":1e+308,"s":1.0,"m":0.2}"#,
        r#"{"k":"c","lo":-1e40,"hi":1e40,"s":5,"m":1.6666666666666667}"#,
        r#"{"k":"d","lo":-1,"hi":170141183460469231731687303715884105727,"s":170141183460469231731687303715884105727,"m":5.671372782015641e+37}"#,
    ];
    let mut reversed = rows.clone();
    reversed.reverse();
    for (input, p) in [(&rows, 1), (&reversed, 1), (&rows, 2), (&reversed, 3)] {
        let input: Vec<&str> = input.iter().map(String::as_str).collect();
        let r = run(op, &input, false, p);
        ok(&r);
        // The lines as written (a JSON parser would round the big numbers).
        let got: Vec<&str> = ["a", "b", "c", "d"]
            .iter()
            .filter_map(|k| r.out.iter().rev().find(|l| l.starts_with(&format!(r#"{{"k":"{k}""#))))
            .map(String::as_str)
            .collect();
        assert_eq!(got, want, "p={p}, first row {}", input[0]);
    }
}

#[test]
fn count_of_a_field_counts_arrays_and_objects_too() {
    // Issue 34 #3: n=3, nv=1 and 3 dead letters ("must be a scalar"), instead of n=6, nv=4.
    let input = [
        r#"{"k":"a","v":[1,2]}"#,
        r#"{"k":"a","v":{"a":1}}"#,
        r#"{"k":"a","v":[]}"#,
        r#"{"k":"a","v":1}"#,
        r#"{"k":"a","v":null}"#,
        r#"{"k":"a"}"#,
    ];
    let r = run("type: aggregate, key: [k], aggregates: [{fn: count, as: n}, {fn: count, field: v, as: nv}]", &input, false, 1);
    ok(&r);
    assert!(r.dead.is_empty(), "{:?}", r.dead);
    assert_eq!(r.out.last().map(String::as_str), Some(r#"{"k":"a","n":6,"nv":4}"#), "{:?}", r.out);
}

#[test]
fn a_nested_key_follows_the_last_of_duplicate_members() {
    // Issue 34 #2: grouped under u.id = "early" although the last `u` has no `id`.
    let input = [r#"{"u":{"id":"early"},"u":5}"#, r#"{"u":5,"u":{"id":"late"}}"#, r#"{"k":[1],"k":"x","u":{"id":"late"}}"#];
    let r = run("type: aggregate, key: [u.id], aggregates: [{fn: count, as: n}, {fn: count, field: k, as: nk}]", &input, false, 1);
    ok(&r);
    assert_eq!(r.dead.len(), 1, "{:?}", r.dead);
    assert!(r.dead[0].to_string().contains("missing key field `u.id`"), "{:?}", r.dead);
    assert_eq!(r.out.last().map(String::as_str), Some(r#"{"u.id":"late","n":2,"nk":1}"#), "{:?}", r.out);
}

#[test]
fn times_before_1970_floor_like_floats_do() {
    // Issue 18 #9: the RFC 3339 time landed in [0, 1) while the float -0.5 floored into [-1, 0).
    let input = [r#"{"k":"a","ts":"1969-12-31T23:59:59.9995Z"}"#, r#"{"k":"a","ts":-0.5}"#];
    let r = run("type: aggregate, key: [k], window: {type: tumbling, size: 1ms}, aggregates: [{fn: count, as: n}]", &input, true, 1);
    ok(&r);
    assert_eq!(r.out, [r#"{"k":"a","window_start":-1,"window_end":0,"n":2}"#]);
}

#[test]
fn event_times_outside_the_supported_range_are_bad_records() {
    // Issue 18 #10: i64::MIN was always late, windows at the i64 ends
    // overlapped or were empty, a u64 was silently clamped.
    let input = [
        r#"{"k":"a","ts":-9223372036854775808}"#,
        r#"{"k":"a","ts":-9223372036854775800}"#,
        r#"{"k":"a","ts":9223372036854775807}"#,
        r#"{"k":"a","ts":18446744073709551615}"#,
        r#"{"k":"a","ts":"0000-01-01T00:00:00Z"}"#,
        r#"{"k":"a","ts":253402300799999}"#,
    ];
    let op = "type: aggregate, key: [k], window: {type: tumbling, size: 10ms}, aggregates: [{fn: count, as: n}]";
    let r = run(op, &input, true, 1);
    ok(&r);
    let reasons: Vec<&str> = r.dead.iter().map(|d| d["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert!(reasons.iter().all(|r| r.contains("outside the supported range")), "{reasons:?}");
    let mut out = r.out.clone();
    out.sort();
    assert_eq!(
        out,
        [
            r#"{"k":"a","window_start":-62167219200000,"window_end":-62167219199990,"n":1}"#,
            r#"{"k":"a","window_start":253402300799990,"window_end":253402300800000,"n":1}"#,
        ]
    );
}

//! `filter` and `map` on records their expressions fail on: each
//! `on_error` policy, always counted (issue 16).

use std::path::Path;

use super::util::{tmp, weir_run};

const INPUT: &str = r#"{"id": 1, "amount": 150, "user": {"country": "FR"}}
{"id": 2, "amount": "lots", "user": {"country": "FR"}}
{"id": 3, "amount": 50, "user": {"country": "NL"}}
{"id": 4, "user": {"country": "NL"}}
"#;

/// A pipeline src -> `operator` (named `op`) -> file sink `out`, whose directory is emptied.
fn pipeline(dir: &Path, operator: &str) -> String {
    let _ = std::fs::remove_dir_all(dir.join("out"));
    std::fs::write(dir.join("in.jsonl"), INPUT).unwrap();
    let path = dir.join("p.yaml");
    std::fs::write(
        &path,
        format!(
            "name: t\nsources:\n  - {{name: src, type: file, path: {}}}\noperators:\n  - {operator}\nsinks:\n  - {{name: out, type: file, input: op, path: {}}}\n",
            dir.join("in.jsonl").display(),
            dir.join("out").display()
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn filter_errors_fail_skip_or_go_to_the_dead_letter_always_counted() {
    let dir = tmp();
    let d = dir.path();
    let filter = |on_error: &str| format!("{{name: op, type: filter, input: src, where: \"amount > 100\", {on_error}}}");

    let o = weir_run(&pipeline(d, &filter("on_error: fail")), 1).run();
    o.expect_code(1);
    o.expect_stderr_contains("operator `op` failed on a record");
    o.expect_stderr_contains(r#""amount": "lots""#);

    let o = weir_run(&pipeline(d, &filter("on_error: skip")), 2).run();
    o.expect_code(0);
    assert_eq!(super::util::sink_lines(&d.join("out")), [r#"{"id": 1, "amount": 150, "user": {"country": "FR"}}"#]);
    o.expect_stderr_contains("(2 dropped: 2 bad)");

    let dl = d.join("dead.jsonl");
    let o = weir_run(&pipeline(d, &filter(&format!("on_error: dead_letter, dead_letter: {}", dl.display()))), 2).run();
    o.expect_code(0);
    o.expect_stderr_contains("(2 dropped: 2 bad, all written to the dead letter)");
    let entries: Vec<serde_json::Value> = std::fs::read_to_string(&dl).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut ids: Vec<i64> = entries
        .iter()
        .map(|e| {
            assert_eq!(e["origin"], "op");
            serde_json::from_str::<serde_json::Value>(e["record"].as_str().unwrap()).unwrap()["id"].as_i64().unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, [2, 4], "{entries:?}");
    assert!(entries.iter().any(|e| e["reason"].as_str().unwrap().contains("amount")), "{entries:?}");
}

#[test]
fn map_errors_follow_on_error_and_unchanged_records_keep_their_text() {
    let dir = tmp();
    let d = dir.path();
    let map = "{name: op, type: map, input: src, set: {double: \"amount * 2\"}, drop: [nothing], on_error: skip}";
    let o = weir_run(&pipeline(d, map), 1).run();
    o.expect_code(0);
    let mut lines = super::util::sink_lines(&d.join("out"));
    lines.sort();
    assert_eq!(
        lines,
        [r#"{"id":1,"amount":150,"user":{"country": "FR"},"double":300}"#, r#"{"id":3,"amount":50,"user":{"country": "NL"},"double":100}"#]
    );
    o.expect_stderr_contains("(2 dropped: 2 bad)");
    // A map that changes nothing in a record passes its text as it was.
    let o = weir_run(&pipeline(d, "{name: op, type: map, input: src, drop: [nothing], rename: {x: y}}"), 1).run();
    o.expect_code(0);
    let mut lines = super::util::sink_lines(&d.join("out"));
    lines.sort();
    let mut want: Vec<&str> = INPUT.lines().collect();
    want.sort();
    assert_eq!(lines, want);
}

#[test]
fn a_chain_reads_the_same_from_the_values_its_source_hands_on_as_from_the_text() {
    // Issue 16: a file source reads once for the whole chain and hands the
    // expressions' values on (filter -> map -> filter -> map); a datagen
    // source hands none on, so every operator reads the text. The same rows
    // through both give the same results, at p=1 and p=2.
    let dir = tmp();
    let d = dir.path();
    let rows = d.join("rows");
    let gen = |sink: &str| {
        format!(
            "name: t\nsources:\n  - name: src\n    type: datagen\n    seed: 7\n    rows: 3000\n    fields:\n      id: {{kind: sequence}}\n      user: {{kind: key, cardinality: 7, prefix: u}}\n      amount: {{kind: int, min: -5, max: 100}}\n"
        ) + sink
    };
    std::fs::write(d.join("gen.yaml"), gen(&format!("sinks:\n  - {{name: out, type: file, input: src, path: {}}}\n", rows.display())))
        .unwrap();
    weir_run(&d.join("gen.yaml").display().to_string(), 1).ok();
    let chain = |out: &Path| {
        format!(
            "operators:
  - {{name: f1, type: filter, input: src, where: \"amount % 3 != 1 && user != 'u0'\"}}
  - {{name: m1, type: map, input: f1, set: {{double: \"amount * 2\", size: \"amount > 50 ? 'big' : 'small'\"}}}}
  - {{name: f2, type: filter, input: m1, where: \"double > -4 && size in ['big', 'small']\"}}
  - {{name: m2, type: map, input: f2, set: {{half: \"double(double) / 4.0\"}}, drop: [id]}}
  - name: agg
    type: aggregate
    input: m2
    key: [user, size]
    aggregates: [{{fn: count, as: n}}, {{fn: sum, field: double, as: total}}, {{fn: max, field: half, as: top}}, {{fn: count_distinct, field: amount, as: amounts}}]
sinks:
  - {{name: out, type: file, input: agg, path: {}}}
",
            out.display()
        )
    };
    for p in [1, 2] {
        let (a, b) = (d.join(format!("a{p}")), d.join(format!("b{p}")));
        std::fs::write(d.join("datagen.yaml"), gen(&chain(&a))).unwrap();
        let file_source = format!("name: t\nsources:\n  - {{name: src, type: file, path: {}}}\n", rows.display());
        std::fs::write(d.join("file.yaml"), file_source + &chain(&b)).unwrap();
        weir_run(&d.join("datagen.yaml").display().to_string(), p).ok();
        weir_run(&d.join("file.yaml").display().to_string(), p).ok();
        let (mut x, mut y) = (super::util::sink_lines(&a), super::util::sink_lines(&b));
        x.sort();
        y.sort();
        assert!(x.len() >= 10, "{x:?}");
        assert_eq!(x, y, "p={p}");
    }
}

//! Comparing output records as multisets, with a readable diff.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde_json::Value;

/// One JSON object with its fields in file order.
pub type Obj = IndexMap<String, Value>;

#[track_caller]
pub fn parse(line: &str) -> Obj {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("output line is not a JSON object ({e}): {line}"))
}

/// A canonical text for an output record: fields in their order, each value
/// tagged with its JSON type (an integer 3 and a float 3.0 differ), floats
/// rounded so that summation order cannot matter.
pub fn canonical(o: &Obj) -> String {
    let mut s = String::from("{");
    for (i, (k, v)) in o.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(k);
        s.push('=');
        s.push_str(&canonical_value(v));
    }
    s.push('}');
    s
}

fn canonical_value(v: &Value) -> String {
    match v {
        Value::Number(n) if n.is_f64() => format!("{:.6}f", n.as_f64().unwrap()),
        Value::Number(n) => format!("{n}i"),
        other => other.to_string(),
    }
}

/// Assert that two collections hold the same lines, ignoring order.
#[track_caller]
pub fn assert_same_multiset(what: &str, actual: Vec<String>, expected: Vec<String>) {
    let count = |v: &[String]| {
        let mut m: BTreeMap<String, i64> = BTreeMap::new();
        for s in v {
            *m.entry(s.clone()).or_default() += 1;
        }
        m
    };
    let (a, e) = (count(&actual), count(&expected));
    if a == e {
        return;
    }
    let mut missing = Vec::new();
    let mut unexpected = Vec::new();
    for (k, n) in &e {
        let got = a.get(k).copied().unwrap_or(0);
        if got < *n {
            missing.push(format!("  {k}  (x{})", n - got));
        }
    }
    for (k, n) in &a {
        let want = e.get(k).copied().unwrap_or(0);
        if want < *n {
            unexpected.push(format!("  {k}  (x{})", n - want));
        }
    }
    let show = |v: &[String]| v.iter().take(15).cloned().collect::<Vec<_>>().join("\n");
    panic!(
        "{what}: got {} records, want {}.\n{} missing (first 15):\n{}\n{} unexpected (first 15):\n{}",
        actual.len(),
        expected.len(),
        missing.len(),
        show(&missing),
        unexpected.len(),
        show(&unexpected)
    );
}

/// Compare aggregate outputs: parse each line, canonicalise, compare multisets.
#[track_caller]
pub fn assert_same_records(what: &str, actual_lines: &[String], expected: &[Obj]) {
    let actual = actual_lines.iter().map(|l| canonical(&parse(l))).collect();
    let expected = expected.iter().map(canonical).collect();
    assert_same_multiset(what, actual, expected);
}

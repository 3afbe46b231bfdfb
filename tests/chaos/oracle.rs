//! What each node of a shape must emit, computed from the input with the
//! naive reference model of tests/e2e/reference.rs, never from a weir run.
//! Lateness follows docs/pipeline-reference.md: a record carries the
//! watermark of its input split (the split's highest event time so far minus
//! `max_out_of_orderness` minus 1), through dedup; dedup and windowed
//! aggregates drop what is late by it; aggregate results are never late.

use std::collections::BTreeMap;

use super::input::SourceInput;
use super::records::{parse, Obj};
use super::reference::{self, Agg, Func, JoinSide, Window as RefWindow};
use super::shape::{JoinHow, OpKind, Shape, ValueFn, Window, OUT_OF_ORDERNESS_MS};

/// The records one node emits over the whole input.
#[derive(Clone, Default)]
pub struct Expected {
    /// Raw lines (sources and dedup only) with their split's watermark:
    /// what downstream operators read.
    lines: Vec<(String, i64)>,
    /// Parsed records, in no particular order.
    pub records: Vec<Obj>,
    /// A running aggregate: its final record per key instead of a fixed output.
    pub running: bool,
}

impl Expected {
    /// A running aggregate's final record per `user`.
    pub fn finals(&self) -> BTreeMap<String, Obj> {
        self.records.iter().map(|r| (r["user"].to_string(), r.clone())).collect()
    }
}

/// Expected output of every node (sources and operators) of `shape`.
pub fn expected(shape: &Shape, inputs: &BTreeMap<String, SourceInput>) -> BTreeMap<String, Expected> {
    let mut out: BTreeMap<String, Expected> = BTreeMap::new();
    for (name, input) in inputs {
        out.insert(name.clone(), raw(reference::split_watermarks(&input.splits, "ts", OUT_OF_ORDERNESS_MS)));
    }
    // Operators are declared after their input (the shape draws them so).
    for op in &shape.operators {
        let up = out[&op.input].clone();
        // The functions over values this aggregate adds to its fixed ones.
        let rollup = matches!(op.kind, OpKind::Rollup { .. });
        let values: Vec<Agg> = op.values.iter().map(|f| value_agg(*f, rollup)).collect();
        let with = |fixed: &[Agg]| -> Vec<Agg> { fixed.iter().cloned().chain(values.iter().cloned()).collect() };
        let e = match &op.kind {
            OpKind::Dedup => {
                let on_time = reference::on_time_for_dedup(&up.lines, "ts");
                // The first of identical lines passes, with its watermark.
                let mut first: BTreeMap<&str, i64> = BTreeMap::new();
                for (l, wm) in &up.lines {
                    if reference::event_time(&parse(l), "ts").is_some_and(|t| t > *wm) {
                        first.entry(l.as_str()).or_insert(*wm);
                    }
                }
                let passed = reference::dedup(&on_time, &["id"]);
                raw(passed.iter().map(|l| (l.clone(), first[l.as_str()])).collect())
            }
            OpKind::Windowed(w) => {
                let window = Some(match *w {
                    Window::Tumbling { size } => RefWindow::Tumbling { size },
                    Window::Sliding { size, slide } => RefWindow::Sliding { size, slide },
                    Window::Session { gap } => RefWindow::Session { gap },
                });
                let aggs = [
                    (Func::Count, None, "n"),
                    (Func::Sum, Some("amount"), "total"),
                    (Func::Min, Some("amount"), "lo"),
                    (Func::Max, Some("amount"), "hi"),
                ];
                records(reference::aggregate_late(&up.lines, &["user"], "ts", window, 0, &with(&aggs)).0)
            }
            OpKind::Rollup { size } => {
                // A windowed result carries event time window_end - 1.
                let stamped: Vec<String> = up
                    .records
                    .iter()
                    .map(|r| {
                        let mut r = r.clone();
                        let end = r["window_end"].as_i64().expect("window_end");
                        r.insert("__ts".into(), (end - 1).into());
                        serde_json::to_string(&r).unwrap()
                    })
                    .collect();
                let aggs = [(Func::Sum, Some("n"), "n"), (Func::Sum, Some("total"), "total"), (Func::Count, None, "windows")];
                records(reference::aggregate(&stamped, &["user"], "__ts", Some(RefWindow::Tumbling { size: *size }), &with(&aggs)))
            }
            // The reference of the expressions in `Shape::yaml`.
            OpKind::Filter => raw(up.lines.iter().filter(|(l, _)| amount(l) % 3 != 1).cloned().collect()),
            OpKind::Map => raw(up
                .lines
                .iter()
                .map(|(l, wm)| {
                    let mut r = parse(l);
                    r.insert("amount".into(), (amount(l) * 2).into());
                    r.insert("tag".into(), "m".into());
                    (serde_json::to_string(&r).unwrap(), *wm)
                })
                .collect()),
            OpKind::Join { right, how, kind } => {
                // Each side's records under its node's name (the default `as`).
                let left = JoinSide { lines: &up.lines, key: &["user"], ts: "ts", name: &op.input };
                let right = JoinSide { lines: &out[right].lines, key: &["user"], ts: "ts", name: right };
                records(match *how {
                    JoinHow::Interval { lower, upper } => reference::interval_join(&left, &right, lower, upper, *kind),
                    JoinHow::Window { size } => reference::window_join(&left, &right, size, size, *kind),
                    JoinHow::Temporal { ttl } => reference::temporal_join(&left, &right, *kind, &|_| false, ttl),
                })
            }
            OpKind::Running { .. } => {
                let aggs = [(Func::Count, None, "n"), (Func::Sum, Some("amount"), "total")];
                let lines: Vec<String> = up.lines.iter().map(|(l, _)| l.clone()).collect();
                Expected { running: true, ..records(reference::aggregate(&lines, &["user"], "ts", None, &with(&aggs))) }
            }
        };
        out.insert(op.name.clone(), e);
    }
    out
}

/// The reference of a function over values, as `Shape::yaml` writes it.
fn value_agg(f: ValueFn, rollup: bool) -> Agg {
    let (_, field, alias) = f.spec(rollup);
    let func = match f {
        ValueFn::CountDistinct => Func::CountDistinct,
        ValueFn::First => Func::First,
        ValueFn::Last => Func::Last,
        ValueFn::Collect { max_items } => Func::Collect(max_items),
    };
    (func, Some(field), alias)
}

/// The integer `amount` of a raw record (every generated record has one).
fn amount(line: &str) -> i64 {
    parse(line)["amount"].as_i64().expect("generated records have an integer amount")
}

fn raw(lines: Vec<(String, i64)>) -> Expected {
    Expected { records: lines.iter().map(|(l, _)| parse(l)).collect(), lines, running: false }
}

fn records(records: Vec<Obj>) -> Expected {
    Expected { records, ..Expected::default() }
}

//! What each node of a shape must emit, computed from the input with the
//! naive reference model of tests/e2e/reference.rs, never from a weir run.

use std::collections::BTreeMap;

use super::input::SourceInput;
use super::records::{parse, Obj};
use super::reference::{self, Func, Window as RefWindow};
use super::shape::{OpKind, Shape, Window};

/// The records one node emits over the whole input.
#[derive(Clone, Default)]
pub struct Expected {
    /// Raw lines (sources and dedup only): what downstream operators read.
    lines: Vec<String>,
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
        out.insert(name.clone(), raw(input.good.clone()));
    }
    // Operators are declared after their input (the shape draws them so).
    for op in &shape.operators {
        let up = out[&op.input].clone();
        let e = match &op.kind {
            OpKind::Dedup => raw(reference::dedup(&up.lines, &["id"])),
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
                records(reference::aggregate(&up.lines, &["user"], "ts", window, &aggs))
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
                records(reference::aggregate(&stamped, &["user"], "__ts", Some(RefWindow::Tumbling { size: *size }), &aggs))
            }
            OpKind::Running { .. } => {
                let aggs = [(Func::Count, None, "n"), (Func::Sum, Some("amount"), "total")];
                Expected { running: true, ..records(reference::aggregate(&up.lines, &["user"], "ts", None, &aggs)) }
            }
        };
        out.insert(op.name.clone(), e);
    }
    out
}

fn raw(lines: Vec<String>) -> Expected {
    Expected { records: lines.iter().map(|l| parse(l)).collect(), lines, running: false }
}

fn records(records: Vec<Obj>) -> Expected {
    Expected { records, ..Expected::default() }
}

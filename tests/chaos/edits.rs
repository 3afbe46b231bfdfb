//! Topology edits between restores: a sink's input changed, a sink or an
//! operator (with its sink) added, a leaf operator removed (its sinks read
//! its input instead; needs `--allow-non-restored-state`). Upstream of an
//! untouched sink nothing ever changes, so its output stays exact; a touched
//! sink may hold records of its old and its new input, each at most once.

use super::faults::EditKind;
use super::rng::Rng;
use super::shape::{Emits, OpKind, Operator, Shape, Sink, SinkKind};

pub struct Edit {
    pub shape: Shape,
    /// Sinks whose input changed or that are new.
    pub touched: Vec<String>,
    /// A removed operator: the first restore without the flag must be refused.
    pub removed: Option<String>,
    pub what: String,
}

/// Apply `kind` to `shape` if the shape allows it (None otherwise).
pub fn apply(kind: &EditKind, shape: &Shape, rng: &mut Rng, serial: usize) -> Option<Edit> {
    let mut s = shape.clone();
    let room = |s: &Shape| -> Vec<String> { s.nodes().into_iter().filter(|n| s.consumers(n) < 3).collect() };
    match kind {
        EditKind::SinkInput => {
            // A sink may leave a node only if the node keeps another consumer.
            let movable: Vec<String> = s.file_sinks().filter(|k| s.consumers(&k.input) >= 2).map(|k| k.name.clone()).collect();
            if movable.is_empty() {
                return None;
            }
            let sink = rng.pick(&movable).clone();
            let from = s.sinks.iter().find(|k| k.name == sink).unwrap().input.clone();
            let targets: Vec<String> = room(&s).into_iter().filter(|n| *n != from && s.emits(n) != Emits::Updates).collect();
            if targets.is_empty() || s.emits(&from) == Emits::Updates {
                return None;
            }
            let to = rng.pick(&targets).clone();
            s.sinks.iter_mut().find(|k| k.name == sink).unwrap().input = to.clone();
            Some(Edit { shape: s, what: format!("sink {sink}: input {from} -> {to}"), touched: vec![sink], removed: None })
        }
        EditKind::AddSink => {
            let nodes: Vec<String> = room(&s).into_iter().filter(|n| s.emits(n) != Emits::Updates).collect();
            if nodes.is_empty() {
                return None;
            }
            let on = rng.pick(&nodes).clone();
            let name = format!("added{serial}");
            s.sinks.push(Sink { name: name.clone(), input: on.clone(), kind: SinkKind::File });
            Some(Edit { shape: s, what: format!("new sink {name} on {on}"), touched: vec![name], removed: None })
        }
        EditKind::AddOperator => {
            // A new dedup starts empty: it passes a subset of what a dedup
            // over the whole input would, each record once.
            let nodes: Vec<String> = room(&s).into_iter().filter(|n| s.emits(n) == Emits::Raw).collect();
            if nodes.is_empty() {
                return None;
            }
            let on = rng.pick(&nodes).clone();
            let (op, sink) = (format!("added_op{serial}"), format!("added{serial}"));
            s.operators.push(Operator { name: op.clone(), input: on.clone(), kind: OpKind::Dedup, values: Vec::new() });
            s.sinks.push(Sink { name: sink.clone(), input: op.clone(), kind: SinkKind::File });
            Some(Edit { shape: s, what: format!("new operator {op} (dedup) on {on} with sink {sink}"), touched: vec![sink], removed: None })
        }
        EditKind::RemoveOperator => {
            let leaves: Vec<String> = s
                .operators
                .iter()
                .filter(|o| !matches!(o.kind, OpKind::Running { .. }) && !s.operators.iter().any(|x| x.reads(&o.name)))
                .filter(|o| s.emits(&o.input) != Emits::Updates)
                .map(|o| o.name.clone())
                .collect();
            if leaves.is_empty() {
                return None;
            }
            let op = rng.pick(&leaves).clone();
            let input = s.operator(&op).unwrap().input.clone();
            s.operators.retain(|o| o.name != op);
            let mut touched = Vec::new();
            for k in s.sinks.iter_mut().filter(|k| k.input == op) {
                k.input = input.clone();
                touched.push(k.name.clone());
            }
            Some(Edit { shape: s, what: format!("operator {op} removed, its sinks {touched:?} read {input}"), touched, removed: Some(op) })
        }
    }
}

//! Per-node counters, shared between the running tasks and the CLI.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::operators::OperatorMetrics;

#[derive(Debug, Clone)]
pub struct NodeMetrics {
    pub name: String,
    pub kind: &'static str,
    pub subtasks: Vec<Arc<OperatorMetrics>>,
}

/// A point-in-time sum over a node's subtasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub records_in: u64,
    pub records_out: u64,
    pub records_dropped: u64,
    pub bytes_in: u64,
}

impl NodeMetrics {
    pub fn new(name: &str, kind: &'static str, parallelism: u16) -> Self {
        NodeMetrics { name: name.into(), kind, subtasks: (0..parallelism).map(|_| Arc::default()).collect() }
    }

    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for m in &self.subtasks {
            t.records_in += m.records_in.load(Ordering::Relaxed);
            t.records_out += m.records_out.load(Ordering::Relaxed);
            t.records_dropped += m.records_dropped.load(Ordering::Relaxed);
            t.bytes_in += m.bytes_in.load(Ordering::Relaxed);
        }
        t
    }
}

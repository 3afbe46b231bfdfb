//! A test harness that drives one operator directly over a `MemoryState`,
//! with the watermark and the clock under the test's control.

use std::ops::Range;
use std::sync::Arc;

use super::{Context, OpResult, Operator, OperatorMetrics, SubtaskInfo};
use crate::state::memory::MemoryState;
use crate::types::{KeyGroup, Millis, Record};

pub(crate) struct Harness<O> {
    pub op: O,
    pub info: SubtaskInfo,
    pub state: MemoryState,
    pub metrics: Arc<OperatorMetrics>,
    pub watermark: Millis,
    pub now: Millis,
}

impl<O: Operator> Harness<O> {
    /// `op` as subtask 0 owning `key_groups` of `max_parallelism`.
    pub fn new(op: O, name: &str, key_groups: Range<KeyGroup>, max_parallelism: u16) -> Self {
        let state = MemoryState::new(&op.tables(), key_groups);
        let info = SubtaskInfo { operator: name.into(), index: 0, parallelism: 1, max_parallelism };
        Harness { op, info, state, metrics: Arc::default(), watermark: Millis::MIN, now: 0 }
    }

    /// Call one hook with a fresh context; returns what the operator emitted.
    pub fn run(&mut self, f: impl FnOnce(&mut O, &mut Context<'_>, &mut Vec<Record>) -> OpResult) -> Vec<Record> {
        let mut ctx =
            Context { info: &self.info, state: &mut self.state, metrics: &self.metrics, watermark: self.watermark, now: self.now };
        let mut out = Vec::new();
        f(&mut self.op, &mut ctx, &mut out).unwrap();
        out
    }
}

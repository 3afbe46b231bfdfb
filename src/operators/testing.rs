//! A test harness that drives one operator directly over a `MemoryState`
//! (or any keyed state), with the watermark and the clock under the test's
//! control.

use std::ops::Range;
use std::sync::Arc;

use super::{Context, OpError, OpResult, Operator, OperatorMetrics, SubtaskInfo};
use crate::state::memory::MemoryState;
use crate::state::KeyedState;
use crate::types::{KeyGroup, Millis, Record};

pub(crate) struct Harness<O> {
    pub op: O,
    pub info: SubtaskInfo,
    pub state: Box<dyn KeyedState>,
    pub metrics: Arc<OperatorMetrics>,
    pub watermark: Millis,
    pub now: Millis,
}

impl<O: Operator> Harness<O> {
    /// `op` as subtask 0 owning `key_groups` of `max_parallelism`.
    pub fn new(op: O, name: &str, key_groups: Range<KeyGroup>, max_parallelism: u16) -> Self {
        let state = Box::new(MemoryState::new(&op.tables(), key_groups));
        Self::with_state(op, name, state, max_parallelism)
    }

    /// `op` over `state` (which owns the key groups).
    pub fn with_state(op: O, name: &str, state: Box<dyn KeyedState>, max_parallelism: u16) -> Self {
        let info = SubtaskInfo { operator: name.into(), index: 0, parallelism: 1, max_parallelism };
        Harness { op, info, state, metrics: Arc::default(), watermark: Millis::MIN, now: 0 }
    }

    /// Call one hook with a fresh context; returns what the operator emitted.
    pub fn run(&mut self, f: impl FnOnce(&mut O, &mut Context<'_>, &mut Vec<Record>) -> OpResult) -> Vec<Record> {
        self.try_run(f).unwrap()
    }

    /// `run` for a hook that may fail: its error instead of a panic.
    pub fn try_run(&mut self, f: impl FnOnce(&mut O, &mut Context<'_>, &mut Vec<Record>) -> OpResult) -> Result<Vec<Record>, OpError> {
        let mut ctx =
            Context { info: &self.info, state: self.state.as_mut(), metrics: &self.metrics, watermark: self.watermark, now: self.now };
        let mut out = Vec::new();
        f(&mut self.op, &mut ctx, &mut out)?;
        Ok(out)
    }
}

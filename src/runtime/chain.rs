//! A chain: the operators one task runs back to back (Flink's operator
//! chaining). Records emitted by operator i go straight into operator i+1;
//! what the last one emits leaves the task through its `Output`.
//!
//! A chain behaves exactly like the same operators joined by channels: each
//! operator has its own watermark, and what operator i emits in response to
//! watermark W (or a tick, or end of input) reaches operator i+1 before i+1
//! sees W. Operator i+1's watermark is operator i's output watermark
//! (`Operator::output_watermark`), as a channel would carry it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::codec::Dec;
use crate::operators::{Context, OpError, Operator, OperatorMetrics, SubtaskInfo};
use crate::state::rocks::native::NATIVE_MARKER;
use crate::state::{snapshot, KeyedState, StateSnapshot, TableSpec};
use crate::types::{Millis, Record, MIN_WATERMARK};

/// A task failed: which operator, which subtask, and why.
#[derive(Debug, thiserror::Error)]
#[error("operator `{operator}` (subtask {subtask}/{parallelism}) failed")]
pub struct TaskError {
    pub operator: String,
    pub subtask: u16,
    pub parallelism: u16,
    #[source]
    pub source: OpError,
}

impl TaskError {
    pub fn new(info: &SubtaskInfo, source: OpError) -> Self {
        TaskError { operator: info.operator.clone(), subtask: info.index, parallelism: info.parallelism, source }
    }
}

pub struct ChainOp {
    pub op: Box<dyn Operator>,
    pub tables: Vec<TableSpec>,
    pub state: Box<dyn KeyedState>,
    pub info: SubtaskInfo,
    pub metrics: Arc<OperatorMetrics>,
    /// Next processing-time tick, for operators that want ticks.
    next_tick: Option<Instant>,
    /// This operator's input watermark: the chain's for the first, the
    /// previous operator's output watermark for the others.
    watermark: Millis,
}

impl ChainOp {
    pub fn new(op: Box<dyn Operator>, state: Box<dyn KeyedState>, info: SubtaskInfo, metrics: Arc<OperatorMetrics>) -> Self {
        let next_tick = op.tick_interval().map(|d| Instant::now() + d);
        let tables = op.tables();
        ChainOp { op, tables, state, info, metrics, next_tick, watermark: MIN_WATERMARK }
    }
}

pub struct Chain {
    pub ops: Vec<ChainOp>,
    /// The chain's input watermark (what the task received).
    watermark: Millis,
}

/// Wall-clock time in epoch milliseconds.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as Millis).unwrap_or(0)
}

/// Which hook to call on one operator.
#[derive(Clone, Copy)]
enum Hook {
    Tick,
    EndOfInput,
}

impl Chain {
    pub fn new(ops: Vec<ChainOp>) -> Self {
        Chain { ops, watermark: MIN_WATERMARK }
    }

    /// Run `batch` through operators `from..`; returns what the last emits.
    pub fn process(&mut self, from: usize, mut batch: Vec<Record>) -> Result<Vec<Record>, TaskError> {
        let now = now_ms();
        for op in &mut self.ops[from..] {
            if batch.is_empty() {
                break;
            }
            OperatorMetrics::add(&op.metrics.records_in, batch.len() as u64);
            let mut out = Vec::new();
            let mut ctx = Context { info: &op.info, state: op.state.as_mut(), metrics: &op.metrics, watermark: op.watermark, now };
            op.op.process(batch, &mut ctx, &mut out).map_err(|e| TaskError::new(&op.info, e))?;
            OperatorMetrics::add(&op.metrics.records_out, out.len() as u64);
            batch = out;
        }
        Ok(batch)
    }

    /// Run a batch of the task's input `side` (0; a join's right input: 1)
    /// through the chain; returns what the last operator emits.
    pub fn process_input(&mut self, side: usize, batch: Vec<Record>) -> Result<Vec<Record>, TaskError> {
        if side == 0 || batch.is_empty() {
            return self.process(0, batch);
        }
        let Some(op) = self.ops.first_mut() else { return Ok(batch) };
        OperatorMetrics::add(&op.metrics.records_in, batch.len() as u64);
        OperatorMetrics::add(&op.metrics.right_in, batch.len() as u64);
        let mut out = Vec::new();
        let mut ctx = Context { info: &op.info, state: op.state.as_mut(), metrics: &op.metrics, watermark: op.watermark, now: now_ms() };
        op.op.process_right(batch, &mut ctx, &mut out).map_err(|e| TaskError::new(&op.info, e))?;
        OperatorMetrics::add(&op.metrics.records_out, out.len() as u64);
        self.process(1, out)
    }

    /// Publish each operator's state figures (memory state only) to its
    /// metrics: plain counts the state kept, stored once per call; the task
    /// calls it once per batch or event, never per record.
    pub fn publish_state(&self) {
        for op in &self.ops {
            if let Some(stats) = op.state.stats() {
                let right = op.op.right_tables().iter().filter_map(|&t| op.state.table_stats(t)).map(|t| t.keys).sum();
                op.metrics.set_state(stats, right);
            }
        }
    }

    /// The input watermark advanced: each operator in turn takes its new
    /// watermark and fires, and what it emits passes through the operators
    /// after it while they still hold their old watermark (a channel would
    /// deliver those records before the watermark).
    pub fn advance_watermark(&mut self, wm: Millis) -> Result<Vec<Record>, TaskError> {
        self.watermark = self.watermark.max(wm);
        let now = now_ms();
        let mut emitted = Vec::new();
        let mut input = self.watermark;
        for i in 0..self.ops.len() {
            let op = &mut self.ops[i];
            if input <= op.watermark {
                // Not advanced for this operator, so not for the ones after it.
                break;
            }
            op.watermark = input;
            input = op.op.output_watermark(input);
            let mut out = Vec::new();
            let mut ctx = Context { info: &op.info, state: op.state.as_mut(), metrics: &op.metrics, watermark: op.watermark, now };
            op.op.on_watermark(&mut ctx, &mut out).map_err(|e| TaskError::new(&op.info, e))?;
            OperatorMetrics::add(&op.metrics.records_out, out.len() as u64);
            emitted.extend(self.process(i + 1, out)?);
        }
        Ok(emitted)
    }

    /// Processing-time ticks for the operators whose period has elapsed.
    pub fn tick(&mut self) -> Result<Vec<Record>, TaskError> {
        let now = Instant::now();
        let due: Vec<bool> = self.ops.iter().map(|op| op.next_tick.is_some_and(|t| t <= now)).collect();
        for op in &mut self.ops {
            if let (Some(t), Some(period)) = (op.next_tick, op.op.tick_interval()) {
                if t <= now {
                    op.next_tick = Some(now + period);
                }
            }
        }
        self.call_all(Hook::Tick, |i| due[i])
    }

    /// The longest pause any operator asks for before more input.
    pub fn throttle(&mut self) -> Option<Duration> {
        self.ops.iter_mut().filter_map(|op| op.op.throttle()).max()
    }

    /// How long until the next operator wants a tick.
    pub fn next_tick_in(&self) -> Option<Duration> {
        let now = Instant::now();
        self.ops.iter().filter_map(|op| op.next_tick).min().map(|t| t.saturating_duration_since(now))
    }

    pub fn end_of_input(&mut self) -> Result<Vec<Record>, TaskError> {
        self.call_all(Hook::EndOfInput, |_| true)
    }

    /// The chain's input watermark (the task's, as checkpointed).
    pub fn watermark(&self) -> Millis {
        self.watermark
    }

    /// The watermark the task forwards: the last operator's output watermark.
    pub fn output_watermark(&self) -> Millis {
        self.ops.last().map_or(self.watermark, |op| op.op.output_watermark(op.watermark))
    }

    /// Each operator's input and output watermark, in chain order.
    pub fn op_watermarks(&self) -> impl Iterator<Item = (Millis, Millis)> + '_ {
        self.ops.iter().map(|op| (op.watermark, op.op.output_watermark(op.watermark)))
    }

    /// Give each operator the watermark the chain's input watermark implies
    /// (after a restore, without firing: the checkpoint was taken after the
    /// hooks for it ran).
    fn set_watermarks(&mut self) {
        let mut input = self.watermark;
        for op in &mut self.ops {
            op.watermark = op.watermark.max(input);
            input = op.op.output_watermark(op.watermark);
        }
    }

    /// The synchronous part of checkpoint `id`: let each operator stage its
    /// side effects, then take its keyed state's snapshot (copied into bytes,
    /// or pinned by the backend; written later, off the task, while records
    /// keep flowing).
    ///
    /// `native`: the bundle's native checkpoint captures the state of
    /// operators whose state is native; they record only a marker.
    pub fn snapshot(&mut self, id: u64, native: bool) -> Result<Vec<(String, StateSnapshot)>, TaskError> {
        // A sink flushes or fsyncs here (a Kafka producer waits for acks).
        crate::blocking::call(|| self.snapshot_now(id, native))
    }

    fn snapshot_now(&mut self, id: u64, native: bool) -> Result<Vec<(String, StateSnapshot)>, TaskError> {
        let now = now_ms();
        let mut states = Vec::with_capacity(self.ops.len());
        for op in &mut self.ops {
            let mut ctx = Context { info: &op.info, state: op.state.as_mut(), metrics: &op.metrics, watermark: op.watermark, now };
            op.op.on_checkpoint(id, &mut ctx).map_err(|e| TaskError::new(&op.info, e))?;
            // Held-back writes first: the native checkpoint captures the DB as it is.
            op.state.flush().map_err(|e| TaskError::new(&op.info, e.into()))?;
            let snap = if native && op.state.is_native() {
                StateSnapshot::Bytes(NATIVE_MARKER.to_vec())
            } else {
                op.state.snapshot(&op.tables).map_err(|e| TaskError::new(&op.info, e.into()))?
            };
            states.push((op.info.operator.clone(), snap));
        }
        Ok(states)
    }

    /// Whether any operator keeps its state in a bundle DB (a member of the
    /// bundle's rendezvous for native checkpoints).
    pub fn has_native_state(&self) -> bool {
        self.ops.iter().any(|op| op.state.is_native())
    }

    /// Load the operators' state from a checkpoint taken at `id` (matched by
    /// operator name; an operator without an entry starts empty), then let
    /// them finish what that checkpoint staged.
    pub fn restore(&mut self, id: u64, watermark: Millis, states: &[(String, Vec<u8>)]) -> Result<(), TaskError> {
        // Loading keyed state (into RocksDB, maybe gigabytes) and repairing
        // what the checkpoint staged (Kafka transactions) can take long.
        crate::blocking::call(|| self.restore_now(id, watermark, states))
    }

    fn restore_now(&mut self, id: u64, watermark: Millis, states: &[(String, Vec<u8>)]) -> Result<(), TaskError> {
        if let Some(d) = crate::faults::get().restore_stall {
            tracing::warn!(?d, "Injected restore stall.");
            std::thread::sleep(d);
        }
        self.watermark = self.watermark.max(watermark);
        self.set_watermarks();
        for op in &mut self.ops {
            for (_, bytes) in states.iter().filter(|(name, _)| *name == op.info.operator) {
                if bytes.starts_with(NATIVE_MARKER) {
                    // In the bundle DB, which was rebuilt from the checkpoint's files.
                    if !op.state.is_native() {
                        let e = OpError::Data(
                            "the checkpoint holds this operator's state in a RocksDB checkpoint; it restores only into `backend: rocksdb`"
                                .into(),
                        );
                        return Err(TaskError::new(&op.info, e));
                    }
                    continue;
                }
                snapshot::read(&mut Dec::new(bytes), &op.tables, op.state.as_mut())
                    .map_err(|e| TaskError::new(&op.info, OpError::Data(format!("restoring state: {e}"))))?;
            }
        }
        let now = now_ms();
        for op in &mut self.ops {
            let mut ctx = Context { info: &op.info, state: op.state.as_mut(), metrics: &op.metrics, watermark: op.watermark, now };
            op.op.on_restore(id, &mut ctx).map_err(|e| TaskError::new(&op.info, e))?;
        }
        Ok(())
    }

    /// Checkpoint `id` is complete: operators commit what they staged.
    pub fn notify_complete(&mut self, id: u64) -> Result<(), TaskError> {
        // Commits: a Kafka transaction, renames and fsyncs of part files.
        crate::blocking::call(|| self.notify_complete_now(id))
    }

    fn notify_complete_now(&mut self, id: u64) -> Result<(), TaskError> {
        let now = now_ms();
        for op in &mut self.ops {
            let mut ctx = Context { info: &op.info, state: op.state.as_mut(), metrics: &op.metrics, watermark: op.watermark, now };
            op.op.on_checkpoint_complete(id, &mut ctx).map_err(|e| TaskError::new(&op.info, e))?;
        }
        Ok(())
    }

    /// Close every operator (flush sinks), first to last.
    pub fn close(&mut self) -> Result<(), TaskError> {
        // Sinks flush (or abort a Kafka transaction) here.
        crate::blocking::call(|| self.close_now())
    }

    fn close_now(&mut self) -> Result<(), TaskError> {
        let now = now_ms();
        for op in &mut self.ops {
            let mut ctx = Context { info: &op.info, state: op.state.as_mut(), metrics: &op.metrics, watermark: op.watermark, now };
            op.op.close(&mut ctx).map_err(|e| TaskError::new(&op.info, e))?;
        }
        Ok(())
    }

    fn call_all(&mut self, hook: Hook, selected: impl Fn(usize) -> bool) -> Result<Vec<Record>, TaskError> {
        let now = now_ms();
        let mut emitted = Vec::new();
        for i in 0..self.ops.len() {
            if !selected(i) {
                continue;
            }
            let op = &mut self.ops[i];
            let mut out = Vec::new();
            let mut ctx = Context { info: &op.info, state: op.state.as_mut(), metrics: &op.metrics, watermark: op.watermark, now };
            let r = match hook {
                Hook::Tick => op.op.on_tick(&mut ctx, &mut out),
                Hook::EndOfInput => op.op.on_end_of_input(&mut ctx, &mut out),
            };
            r.map_err(|e| TaskError::new(&op.info, e))?;
            OperatorMetrics::add(&op.metrics.records_out, out.len() as u64);
            // What operator i emits reaches the later operators before they fire.
            emitted.extend(self.process(i + 1, out)?);
        }
        Ok(emitted)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::operators::OpResult;
    use crate::state::memory::MemoryState;
    use crate::types::MAX_WATERMARK;

    /// What an operator saw, in order: `("record", ts, watermark)` per
    /// processed record, `("watermark", _, watermark)` per watermark.
    type Log = Arc<Mutex<Vec<(&'static str, Millis, Millis)>>>;

    /// Logs what it sees; on a watermark emits one record stamped with it
    /// (as a window result would be) and passes on `watermark - hold_back`.
    struct Probe {
        log: Log,
        hold_back: Millis,
    }

    impl Operator for Probe {
        fn process(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
            for r in batch {
                self.log.lock().unwrap().push(("record", r.event_time.unwrap(), ctx.watermark));
                out.push(r);
            }
            Ok(())
        }

        fn on_watermark(&mut self, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
            self.log.lock().unwrap().push(("watermark", 0, ctx.watermark));
            if ctx.watermark < MAX_WATERMARK {
                out.push(Record::new(Vec::new(), "{}".into(), Some(ctx.watermark - self.hold_back)));
            }
            Ok(())
        }

        fn output_watermark(&self, input: Millis) -> Millis {
            if input == MAX_WATERMARK {
                input
            } else {
                input.saturating_sub(self.hold_back)
            }
        }
    }

    fn chain(hold_backs: &[Millis]) -> (Chain, Vec<Log>) {
        let mut logs = Vec::new();
        let ops = hold_backs
            .iter()
            .enumerate()
            .map(|(i, &hold_back)| {
                let log = Log::default();
                logs.push(log.clone());
                let info = SubtaskInfo { operator: format!("op{i}"), index: 0, parallelism: 1, max_parallelism: 1 };
                ChainOp::new(Box::new(Probe { log, hold_back }), Box::new(MemoryState::new(&[], 0..1)), info, Arc::default())
            })
            .collect();
        (Chain::new(ops), logs)
    }

    #[test]
    fn records_emitted_on_a_watermark_reach_the_next_operator_before_it() {
        let (mut c, logs) = chain(&[0, 0]);
        c.advance_watermark(9).unwrap();
        // op1 gets op0's result (stamped 9) under its old watermark, then 9,
        // exactly as a channel between two tasks would deliver them.
        let op1 = logs[1].lock().unwrap().clone();
        assert_eq!(op1, [("record", 9, MIN_WATERMARK), ("watermark", 0, 9)]);
        assert_eq!(c.output_watermark(), 9);
    }

    #[test]
    fn each_operator_gets_the_watermark_the_one_before_passes_on() {
        let (mut c, logs) = chain(&[5, 0, 0]);
        let out = c.advance_watermark(14).unwrap();
        let op1 = logs[1].lock().unwrap().clone();
        assert_eq!(op1, [("record", 9, MIN_WATERMARK), ("watermark", 0, 9)]);
        assert_eq!(c.watermark(), 14, "the chain's input watermark is what it checkpoints");
        assert_eq!(c.output_watermark(), 9);
        // op0's result reached the end, followed by op1's and op2's.
        assert_eq!(out.iter().map(|r| r.event_time.unwrap()).collect::<Vec<_>>(), [9, 9, 9]);
        // A restore gives each operator its derived watermark without firing.
        let (mut r, logs) = chain(&[5, 0]);
        r.restore(1, 14, &[]).unwrap();
        r.process(0, vec![Record::new(Vec::new(), "{}".into(), Some(20))]).unwrap();
        assert_eq!(logs[0].lock().unwrap().clone(), [("record", 20, 14)]);
        assert_eq!(logs[1].lock().unwrap().clone(), [("record", 20, 9)]);
        assert_eq!(r.output_watermark(), 9);
        c.advance_watermark(MAX_WATERMARK).unwrap();
        assert_eq!(c.output_watermark(), MAX_WATERMARK);
    }
}

//! Operators: the code that runs inside a subtask.
//!
//! This module holds the `Operator` trait, what every operator shares (the
//! context, metrics, errors, dead letters) and the keyed operators (`dedup`,
//! `aggregate`). Sources and sinks, the code that talks to an external
//! system, live in `crate::connectors` and build on this module, never the
//! other way round.
//!
//! Every operator implements `Operator` (one required method, every other
//! hook defaulted). Operators are synchronous and never see config, channels
//! or tokio: the runtime feeds them batches and watermarks and routes what
//! they emit. All their memory of the past lives in `Context::state`.

pub mod aggregate;
pub mod dead_letter;
pub mod dedup;
pub mod filter;
pub mod join;
pub mod map;
pub mod staged_files;
#[cfg(test)]
pub(crate) mod testing;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::state::{KeyedState, StateError, TableSpec};
use crate::types::{Millis, Record};

pub use dead_letter::DeadLetter;

/// Where an operator instance runs.
#[derive(Debug, Clone)]
pub struct SubtaskInfo {
    pub operator: String,
    pub index: u16,
    pub parallelism: u16,
    pub max_parallelism: u16,
}

/// Live counters of one operator subtask, read by progress and the summary.
#[derive(Debug, Default)]
pub struct OperatorMetrics {
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
    /// Records that were dropped for a reason (late, bad input), always counted.
    pub records_dropped: AtomicU64,
    /// Of those: late (the rest were bad input).
    pub dropped_late: AtomicU64,
    /// Dropped records written to a dead letter.
    pub dead_lettered: AtomicU64,
    /// A join: of `records_in`, those of its right input; of
    /// `dropped_late`, the right input's; of `records_out`, the records
    /// emitted without a partner (outer joins).
    pub right_in: AtomicU64,
    pub right_late: AtomicU64,
    pub unmatched_out: AtomicU64,
    /// Bytes consumed (sources only).
    pub bytes_in: AtomicU64,
    /// Part files published (file sinks only).
    pub parts_published: AtomicU64,
    /// Exactly-once Kafka sinks: records in committed transactions.
    pub records_committed: AtomicU64,
    /// Exactly-once Kafka sinks: 1 while a transaction is open (records
    /// sent, not committed), and 1 while one is staged in a checkpoint
    /// that has not completed yet (pending). Gauges, set once per call.
    pub transactions_open: AtomicU64,
    pub transactions_pending: AtomicU64,
    /// Memory-backed keyed state as of the task's last batch: entries and
    /// their key + value bytes, over all the operator's tables. Set by the
    /// owning task alone, once per batch (`Chain::publish_state`).
    pub state_keys: AtomicU64,
    pub state_bytes: AtomicU64,
    /// Of `state_keys`, the entries of the right input's tables (joins).
    pub right_state_keys: AtomicU64,
    /// Set once the task published the figures above (memory state with tables).
    pub state_counted: std::sync::atomic::AtomicBool,
}

impl OperatorMetrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Publish the state figures (the owning task, once per batch).
    pub fn set_state(&self, stats: crate::state::StateStats, right_keys: u64) {
        self.state_keys.store(stats.keys, Ordering::Relaxed);
        self.right_state_keys.store(right_keys, Ordering::Relaxed);
        self.state_bytes.store(stats.bytes, Ordering::Relaxed);
        self.state_counted.store(true, Ordering::Relaxed);
    }

    /// A record dropped because it came too late (rare: per record).
    pub fn late(&self) {
        Self::add(&self.records_dropped, 1);
        Self::add(&self.dropped_late, 1);
    }
}

/// What an operator gets on every call.
pub struct Context<'a> {
    pub info: &'a SubtaskInfo,
    pub state: &'a mut dyn KeyedState,
    pub metrics: &'a Arc<OperatorMetrics>,
    /// The current watermark of this subtask's input (MIN before any).
    pub watermark: Millis,
    /// Wall-clock time in epoch ms, for processing-time operators.
    pub now: Millis,
}

impl Context<'_> {
    /// The names staged in point table `table` of a two-phase writer (file
    /// sink parts, dead-letter segments) with the checkpoint id each was
    /// staged under (0: closed, not staged yet) and its key group, sorted.
    /// New names go to the first owned key group; after a rescale, names
    /// other old subtasks staged arrive in the other key groups this one owns.
    pub fn staged_names(&self, table: usize) -> Result<Vec<(String, u64, crate::types::KeyGroup)>, OpError> {
        let mut names = Vec::new();
        for kg in self.state.key_groups() {
            self.state.scan_all(table, kg, &mut |k, v| {
                let id = v.try_into().map(u64::from_be_bytes).unwrap_or(0);
                names.push((String::from_utf8_lossy(k).into_owned(), id, kg));
                std::ops::ControlFlow::Continue(())
            })?;
        }
        names.sort();
        Ok(names)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Data(String),
}

impl OpError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        OpError::Io { context: context.into(), source }
    }
}

pub type OpResult = Result<(), OpError>;

/// A dataflow operator (keyed or not; sinks are operators that emit nothing).
pub trait Operator: Send {
    /// The state tables this operator keeps, by name.
    fn tables(&self) -> Vec<TableSpec> {
        Vec::new()
    }

    /// Of `tables`, those holding the right input's state (a join's): its
    /// state entries are then reported per side.
    fn right_tables(&self) -> &'static [crate::state::TableId] {
        &[]
    }

    /// Process one batch; append emitted records to `out`. A join: a batch
    /// of its left input.
    fn process(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult;

    /// Process one batch of a join's right input (other operators have one
    /// input and never get one).
    fn process_right(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        self.process(batch, ctx, out)
    }

    /// The input watermark advanced to `ctx.watermark`: fire what is due.
    fn on_watermark(&mut self, _ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        Ok(())
    }

    /// The watermark this operator passes on when its input watermark is
    /// `input`. An operator that emits results stamped behind the input
    /// watermark (a window with `allowed_lateness`) holds it back, so that
    /// its own results are never late for the operators after it.
    fn output_watermark(&self, input: Millis) -> Millis {
        input
    }

    /// How often `on_tick` wants to run (processing time), if at all.
    fn tick_interval(&self) -> Option<Duration> {
        None
    }

    /// Periodic processing-time callback; `ctx.now` is the wall clock.
    fn on_tick(&mut self, _ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        Ok(())
    }

    /// Every input reached the end of bounded data (after the final
    /// watermark). Not called when the pipeline is stopped by a signal.
    fn on_end_of_input(&mut self, _ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        Ok(())
    }

    /// How long the task should wait before giving this operator more input
    /// (a rate-limited sink); None to go on at once.
    fn throttle(&mut self) -> Option<Duration> {
        None
    }

    /// Checkpoint `id`'s barrier reached this operator, just before its
    /// state is snapshotted: make pending side effects durable and record in
    /// state what must be committed once `id` completes (two-phase commit).
    fn on_checkpoint(&mut self, _id: u64, _ctx: &mut Context<'_>) -> OpResult {
        Ok(())
    }

    /// Checkpoint `id` is complete (its `_metadata` exists): commit what was
    /// staged for checkpoints up to `id`.
    fn on_checkpoint_complete(&mut self, _id: u64, _ctx: &mut Context<'_>) -> OpResult {
        Ok(())
    }

    /// State was just restored from checkpoint `id`: finish the commits it
    /// staged and clean up what a crash left behind.
    fn on_restore(&mut self, _id: u64, _ctx: &mut Context<'_>) -> OpResult {
        Ok(())
    }

    /// The subtask is shutting down (end of input or stop): release and
    /// flush external resources. Without checkpoints, sinks publish their
    /// output here; with checkpoints, only completed checkpoints publish.
    fn close(&mut self, _ctx: &mut Context<'_>) -> OpResult {
        Ok(())
    }
}

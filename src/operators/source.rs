//! The source side of the dataflow: something that produces records.

use crate::types::Record;

use super::{OpError, OperatorMetrics};

/// What a poll found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcePoll {
    /// Records were produced (maybe zero); poll again.
    More,
    /// Nothing available right now (unbounded input); poll again later.
    Pending,
    /// Bounded input is exhausted.
    Finished,
}

/// How much bounded input there is, for progress bars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    Bytes(u64),
    Rows(u64),
}

/// One subtask of a source. Synchronous: reads are short and bounded by `max`.
pub trait Source: Send {
    /// Append up to `max` records to `out`. Bad input is handled here
    /// (`on_error`), so every record appended is well-formed.
    fn poll(&mut self, max: usize, out: &mut Vec<Record>, metrics: &OperatorMetrics) -> Result<SourcePoll, OpError>;

    /// The total amount of input of this subtask, if bounded.
    fn extent(&self) -> Option<Extent>;

    /// Where reading would resume: recorded in every checkpoint.
    fn position(&self) -> Vec<u8>;

    /// Resume from a position taken by `position` (same subtask layout).
    fn restore(&mut self, position: &[u8]) -> Result<(), String>;

    /// For a source that tracks event time per partition: the greatest
    /// event time every active partition has reached (idle and finished
    /// partitions do not count). The task derives the watermark from it
    /// instead of from the largest event time of each batch, so one
    /// partition read ahead does not make the others late. None: not tracked.
    fn event_time_progress(&self) -> Option<crate::types::Millis> {
        None
    }

    /// Checkpoint `id` just recorded `position()`.
    fn on_checkpoint(&mut self, _id: u64) {}

    /// Checkpoint `id` is complete (the Kafka source may commit its offsets
    /// to a consumer group, for monitoring).
    fn on_checkpoint_complete(&mut self, _id: u64) {}
}

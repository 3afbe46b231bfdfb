//! What travels on a channel between two subtasks: data and signals in one
//! ordered stream, so signals (watermarks, end of input and, later,
//! checkpoint barriers) stay in order with the records around them.

use crate::types::Kind;
use crate::types::{Millis, Record};

#[derive(Debug)]
pub enum Message {
    Batch(Vec<Record>),
    /// No more records with event time <= this will come on this channel.
    Watermark(Millis),
    /// The sender has no data for a while: don't hold the watermark back.
    Idle,
    /// Checkpoint (or savepoint) `n`: everything before it on this channel
    /// belongs to n. The kind tells tasks how to snapshot: a savepoint is
    /// always canonical, a checkpoint may be native (RocksDB incremental).
    Barrier(u64, Kind),
    /// Bounded input is exhausted: no records follow (barriers still may,
    /// until the final checkpoint is taken and the channel closes).
    EndOfInput,
}

//! The source side of the dataflow: something that produces records.

use crate::types::{Millis, Record};

use crate::operators::{OpError, OperatorMetrics};

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

    /// A subtask reading several inputs one after another (files, Kafka
    /// partitions) must not let the watermark run ahead of an input it has
    /// not finished: this is the lowest of their highest event times so far
    /// (`Millis::MIN` for one not started). None: no such bound.
    fn event_time_bound(&self) -> Option<Millis> {
        None
    }

    /// The input carries watermarks (a repartition topic, written by the
    /// upstream instances): `event_time_bound` is then the watermark itself,
    /// and each record's event time and `split_watermark` come with it.
    fn carries_watermarks(&self) -> bool {
        false
    }

    /// Resume from the positions every subtask of this source recorded in
    /// the restored checkpoint, which may have run at another parallelism:
    /// each source takes the part of the input it now owns.
    fn restore(&mut self, restored: &RestoredPositions) -> Result<(), String>;

    /// Checkpoint `id` just recorded `position()`.
    fn on_checkpoint(&mut self, _id: u64) {}

    /// A Kafka consumer's statistics (per-partition lag), for the metrics endpoint.
    fn client_stats(&self) -> Option<std::sync::Arc<ClientStats>> {
        None
    }

    /// Checkpoint `id` is complete (the Kafka source may commit its offsets
    /// to a consumer group, for monitoring).
    fn on_checkpoint_complete(&mut self, _id: u64) {}
}

/// The positions of one source, as the restored checkpoint recorded them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoredPositions {
    /// The parallelism the checkpoint was taken at.
    pub parallelism: u16,
    /// `position()` of each old subtask, by old subtask index.
    pub by_subtask: Vec<Vec<u8>>,
}

impl RestoredPositions {
    /// Same parallelism: this subtask's own position, unchanged layout.
    pub fn own(&self, subtask: u16, parallelism: u16) -> Option<&[u8]> {
        (self.parallelism == parallelism).then(|| self.by_subtask.get(subtask as usize).map(Vec::as_slice)).flatten()
    }

    /// One subtask's position, for tests and single-subtask callers.
    pub fn single(position: Vec<u8>) -> Self {
        RestoredPositions { parallelism: 1, by_subtask: vec![position] }
    }
}

/// Deal `items` (in a deterministic order) round-robin over `parallelism`
/// subtasks; returns those of `subtask`.
pub fn deal<T>(items: impl IntoIterator<Item = T>, parallelism: u16, subtask: u16) -> Vec<T> {
    items.into_iter().enumerate().filter(|(i, _)| *i % parallelism as usize == subtask as usize).map(|(_, t)| t).collect()
}

/// The newest statistics JSON a client library emitted (librdkafka's
/// `statistics.interval.ms`), kept as it came: copying it costs the task
/// thread that delivers it a memcpy; the metrics endpoint parses it at
/// scrape time.
#[derive(Debug, Default)]
pub struct ClientStats(std::sync::Mutex<Vec<u8>>);

impl ClientStats {
    pub fn store(&self, json: &[u8]) {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        v.clear();
        v.extend_from_slice(json);
    }

    /// A copy of the newest statistics (empty: none yet).
    pub fn latest(&self) -> Vec<u8> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Each assigned partition's lag in the newest statistics (see `consumer_lags`).
    pub fn consumer_lags(&self) -> Vec<(String, i64, i64)> {
        consumer_lags(&self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A Kafka source subtask's lag per assigned partition, from librdkafka's
/// statistics: the partition's end (`ls_offset`, the last stable offset a
/// `read_committed` consumer can reach, else `hi_offset`) minus the offset
/// after the last record handed to the source (`app_offset`). librdkafka's
/// own `consumer_lag` counts from committed offsets, which weir keeps in
/// checkpoints instead. A partition the source has taken nothing from yet
/// has no `app_offset` and is left out. (topic, partition, lag), sorted;
/// nothing from a document that does not parse.
pub fn consumer_lags(json: &[u8]) -> Vec<(String, i64, i64)> {
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(json) else { return Vec::new() };
    let mut out = Vec::new();
    for (topic, t) in doc["topics"].as_object().into_iter().flatten() {
        for p in t["partitions"].as_object().into_iter().flat_map(|m| m.values()) {
            let field = |k: &str| p[k].as_i64().unwrap_or(-1);
            let end = if field("ls_offset") >= 0 { field("ls_offset") } else { field("hi_offset") };
            let (partition, taken) = (field("partition"), field("app_offset"));
            // -1: librdkafka's internal unassigned partition; offsets below 0 are unknown.
            if partition >= 0 && taken >= 0 && end >= 0 {
                out.push((topic.clone(), partition, end.saturating_sub(taken).max(0)));
            }
        }
    }
    out.sort();
    out
}

//! Per-node counters and checkpoint figures, shared between the running
//! tasks, the checkpoint driver, the CLI summary and the metrics endpoint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::operators::OperatorMetrics;

#[derive(Debug, Clone)]
pub struct NodeMetrics {
    pub name: String,
    pub kind: &'static str,
    pub subtasks: Vec<Arc<OperatorMetrics>>,
    /// Load, watermarks and channel fill, by subtask (runtime/gauges.rs).
    pub gauges: Vec<Arc<super::gauges::SubtaskGauges>>,
    /// A sink that counts the records it committed (file, Kafka, Parquet
    /// and PostgreSQL sinks).
    pub commits: bool,
    /// The node it reads (its index among the nodes), for naming a bottleneck.
    pub input: Option<usize>,
    /// A join's right input.
    pub right: Option<usize>,
}

/// A point-in-time sum over a node's subtasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub records_in: u64,
    pub records_out: u64,
    pub records_dropped: u64,
    /// Of the dropped: late ones (the rest were bad input).
    pub dropped_late: u64,
    /// Dropped records written to a dead letter.
    pub dead_lettered: u64,
    pub bytes_in: u64,
    pub records_committed: u64,
}

impl NodeMetrics {
    pub fn new(name: &str, kind: &'static str, parallelism: u16) -> Self {
        NodeMetrics {
            name: name.into(),
            kind,
            subtasks: (0..parallelism).map(|_| Arc::default()).collect(),
            gauges: (0..parallelism).map(|_| Arc::default()).collect(),
            commits: false,
            input: None,
            right: None,
        }
    }

    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for m in &self.subtasks {
            let s = Totals::of(m);
            t.records_in += s.records_in;
            t.records_out += s.records_out;
            t.records_dropped += s.records_dropped;
            t.dropped_late += s.dropped_late;
            t.dead_lettered += s.dead_lettered;
            t.bytes_in += s.bytes_in;
            t.records_committed += s.records_committed;
        }
        t
    }
}

impl Totals {
    /// One subtask's counters, now.
    pub fn of(m: &OperatorMetrics) -> Totals {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Totals {
            records_in: load(&m.records_in),
            records_out: load(&m.records_out),
            records_dropped: load(&m.records_dropped),
            dropped_late: load(&m.dropped_late),
            dead_lettered: load(&m.dead_lettered),
            bytes_in: load(&m.bytes_in),
            records_committed: load(&m.records_committed),
        }
    }
}

/// What the checkpoint driver reports about completed and failed
/// checkpoints: the numbers of its "Checkpoint complete." line, kept for
/// the metrics endpoint. Written once per checkpoint by the driver alone.
#[derive(Debug, Default)]
pub struct CheckpointMetrics {
    pub completed: AtomicU64,
    /// Aborted checkpoints and savepoints (declined, timed out, failed writes).
    pub failed: AtomicU64,
    /// Aborted checkpoints (not savepoints) by [`FailureReason`].
    pub failed_by: [AtomicU64; FailureReason::ALL.len()],
    /// Aborted savepoints.
    pub savepoints_failed: AtomicU64,
    /// The coordinator's count of consecutive failures (reset by a completion).
    pub consecutive_failures: AtomicU64,
    /// The configured `tolerable_failures`.
    pub tolerable_failures: AtomicU64,
    /// Id of the checkpoint or savepoint in progress (0: none).
    pub in_progress: AtomicU64,
    /// Of the newest completed checkpoint: the longest time from the trigger
    /// to the first barrier at a task.
    pub last_start_delay_ms: AtomicU64,
    /// Of the newest completed checkpoint: bytes of in-flight records
    /// (unaligned channel state) it persisted.
    pub last_in_flight_bytes: AtomicU64,
    /// Set once a restore has brought back every task's state.
    pub restore: std::sync::OnceLock<Arc<super::restore_clock::RestoreClock>>,
    pub savepoints_completed: AtomicU64,
    /// Of the newest completed checkpoint (0 before the first).
    pub last_id: AtomicU64,
    /// `_metadata`'s `created_ms` of the newest completed checkpoint.
    pub last_completed_ms: AtomicU64,
    pub last_duration_ms: AtomicU64,
    pub last_sync_ms: AtomicU64,
    pub last_async_ms: AtomicU64,
    pub last_alignment_ms: AtomicU64,
    pub last_pause_ms: AtomicU64,
    /// Bytes written by the checkpoint (state files, in-flight records).
    pub last_bytes: AtomicU64,
    /// Shared files referenced from earlier checkpoints (incremental RocksDB).
    pub last_reused_bytes: AtomicU64,
    /// The checkpoint or savepoint this run restored from (0: none).
    pub restored_id: AtomicU64,
    /// When this process saw its newest checkpoint complete (for `/ready`).
    last_seen: std::sync::Mutex<Option<std::time::Instant>>,
    /// When the checkpoint driver started, and its `checkpoint.timeout` (for `/live`).
    started: std::sync::Mutex<Option<std::time::Instant>>,
    pub timeout_ms: AtomicU64,
    /// Every completed checkpoint's duration, size and alignment, so that
    /// one slow checkpoint between two scrapes is not lost (the `last_*`
    /// gauges only hold the newest).
    pub duration_histogram: Histogram,
    pub size_histogram: Histogram,
    pub alignment_histogram: Histogram,
    /// The latest that ended, for the status document.
    pub history: super::checkpoint_history::History,
}

/// Bucket bounds of the duration histograms, in microseconds: 5 ms to 10 min.
pub const DURATION_BOUNDS_US: [u64; 16] = [
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    30_000_000,
    60_000_000,
    120_000_000,
    300_000_000,
    600_000_000,
];

/// Bucket bounds of the size histogram, in bytes: 1 KiB to 1 TiB by fours.
pub const SIZE_BOUNDS: [u64; 16] = {
    let mut b = [0u64; 16];
    let mut i = 0;
    while i < 16 {
        b[i] = 1024 << (2 * i);
        i += 1;
    }
    b
};

/// A Prometheus histogram of whole units (microseconds, bytes) over 16
/// fixed bounds, lock-free.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative): values up to its bound and above the
    /// previous one; the last holds those above every bound.
    counts: [AtomicU64; 17],
    sum: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, bounds: &[u64; 16], v: u64) {
        let i = bounds.iter().position(|&b| v <= b).unwrap_or(bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let _ = self.sum.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| Some(s.saturating_add(v)));
    }

    /// (sum, count, per-bucket counts with their bounds, the last +Inf),
    /// the values times `scale` (1e-6: microseconds to seconds).
    pub fn read(&self, bounds: &[u64; 16], scale: f64) -> (f64, u64, Vec<(f64, u64)>) {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let buckets = bounds.iter().map(|&b| b as f64 * scale).chain([f64::INFINITY]).zip(counts.iter().copied()).collect();
        (self.sum.load(Ordering::Relaxed) as f64 * scale, counts.iter().sum(), buckets)
    }
}

/// The "Checkpoint complete." numbers of one checkpoint.
#[derive(Debug, Clone, Copy, Default)]
pub struct Completed {
    pub id: u64,
    pub created_ms: u64,
    pub duration: std::time::Duration,
    pub sync: std::time::Duration,
    pub write: std::time::Duration,
    pub alignment: std::time::Duration,
    pub pause: std::time::Duration,
    pub bytes: u64,
    pub reused_bytes: u64,
    pub start_delay: std::time::Duration,
    pub in_flight_bytes: u64,
}

/// Why a checkpoint failed: the `reason` label of `weir_checkpoints_failed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// A task voted to abort (its snapshot or upload failed).
    Declined,
    /// Not every bundle committed within `checkpoint.timeout`.
    Timeout,
    /// Writing a bundle MANIFEST or `_metadata` failed.
    Write,
    /// A newer checkpoint's vote arrived first.
    Superseded,
    /// Two subtasks wrote the same state file.
    Conflict,
}

impl FailureReason {
    pub const ALL: [FailureReason; 5] =
        [FailureReason::Declined, FailureReason::Timeout, FailureReason::Write, FailureReason::Superseded, FailureReason::Conflict];

    pub fn label(self) -> &'static str {
        match self {
            FailureReason::Declined => "declined",
            FailureReason::Timeout => "timeout",
            FailureReason::Write => "write",
            FailureReason::Superseded => "superseded",
            FailureReason::Conflict => "conflict",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl CheckpointMetrics {
    pub fn on_completed(&self, c: &Completed) {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let set = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        set(&self.last_id, c.id);
        set(&self.last_completed_ms, c.created_ms);
        set(&self.last_duration_ms, ms(c.duration));
        set(&self.last_sync_ms, ms(c.sync));
        set(&self.last_async_ms, ms(c.write));
        set(&self.last_alignment_ms, ms(c.alignment));
        set(&self.last_pause_ms, ms(c.pause));
        set(&self.last_bytes, c.bytes);
        set(&self.last_reused_bytes, c.reused_bytes);
        set(&self.last_start_delay_ms, ms(c.start_delay));
        set(&self.last_in_flight_bytes, c.in_flight_bytes);
        let us = |d: std::time::Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.duration_histogram.observe(&DURATION_BOUNDS_US, us(c.duration));
        self.alignment_histogram.observe(&DURATION_BOUNDS_US, us(c.alignment));
        self.size_histogram.observe(&SIZE_BOUNDS, c.bytes);
        self.completed.fetch_add(1, Ordering::Relaxed);
        self.history.push(super::checkpoint_history::Entry {
            id: c.id,
            kind: "checkpoint".into(),
            status: "completed".into(),
            ended_ms: super::checkpoint_history::now_ms(),
            duration_ms: ms(c.duration),
            sync_ms: ms(c.sync),
            async_ms: ms(c.write),
            alignment_ms: ms(c.alignment),
            bytes: c.bytes,
            reused_bytes: c.reused_bytes,
            in_flight_bytes: c.in_flight_bytes,
            ..Default::default()
        });
        *self.last_seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
    }

    /// A savepoint completed.
    pub fn on_savepoint_completed(&self, id: u64, duration: std::time::Duration) {
        self.savepoints_completed.fetch_add(1, Ordering::Relaxed);
        self.history.push(super::checkpoint_history::Entry {
            id,
            kind: "savepoint".into(),
            status: "completed".into(),
            ended_ms: super::checkpoint_history::now_ms(),
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            ..Default::default()
        });
    }

    /// Checkpoint (`savepoint` false) or savepoint `id` aborted for `reason`, said as `text`.
    pub fn on_failed(&self, id: u64, savepoint: bool, reason: FailureReason, text: &str) {
        self.history.push(super::checkpoint_history::Entry {
            id,
            kind: if savepoint { "savepoint" } else { "checkpoint" }.into(),
            status: "failed".into(),
            ended_ms: super::checkpoint_history::now_ms(),
            reason_class: Some(reason.label().into()),
            reason: Some(text.into()),
            ..Default::default()
        });
        self.failed.fetch_add(1, Ordering::Relaxed);
        match savepoint {
            true => self.savepoints_failed.fetch_add(1, Ordering::Relaxed),
            false => self.failed_by[reason.index()].fetch_add(1, Ordering::Relaxed),
        };
    }

    /// How long ago this process saw a checkpoint complete (None: never).
    pub fn since_last(&self) -> Option<std::time::Duration> {
        self.last_seen.lock().unwrap_or_else(|p| p.into_inner()).map(|t| t.elapsed())
    }

    /// The driver starts now, with this `checkpoint.timeout`.
    pub fn on_started(&self, timeout: std::time::Duration) {
        self.timeout_ms.store(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
        *self.started.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
    }

    /// How long checkpoints have made no progress: since the newest one
    /// completed, or since the driver started if none has (None: not started).
    pub fn without_progress(&self) -> Option<std::time::Duration> {
        self.since_last().or_else(|| self.started.lock().unwrap_or_else(|p| p.into_inner()).map(|t| t.elapsed()))
    }
}

/// What the metrics endpoint reads besides the counters, fixed when the
/// pipeline is built.
#[derive(Debug, Clone, Default)]
pub struct Details {
    /// Each bundle's working RocksDB (empty: memory state). Weak: the
    /// endpoint must not keep a DB (and its directory) past its run.
    pub state_dbs: Vec<std::sync::Weak<crate::state::rocks::BundleDb>>,
    /// The column families of those DBs: the keyed operators' names.
    pub column_families: Vec<String>,
    /// The bounded input of each source subtask: (source, subtask, extent).
    pub source_extents: Vec<(String, u16, crate::connectors::source::Extent)>,
    /// The file sinks, whose subtasks count the part files they publish.
    pub file_sinks: Vec<String>,
    /// The sinks that count records committed: file, Kafka, Parquet and PostgreSQL sinks.
    pub committing_sinks: Vec<String>,
    /// The Kafka and PostgreSQL sinks with `delivery: exactly_once` (transactions).
    pub transactional_sinks: Vec<String>,
    /// Each Kafka source subtask's consumer statistics: (source, subtask, stats).
    pub kafka_sources: Vec<(String, u16, Arc<crate::connectors::source::ClientStats>)>,
}

/// Everything the metrics endpoint reads, live while the engine runs.
#[derive(Debug, Clone)]
pub struct Exported {
    pub pipeline: String,
    pub nodes: Vec<NodeMetrics>,
    /// None: checkpointing is off.
    pub checkpoints: Option<Arc<CheckpointMetrics>>,
    pub checkpoint_interval: std::time::Duration,
    /// Set while the tasks run (after the build and restore, until the end).
    pub running: Arc<std::sync::atomic::AtomicBool>,
    /// Restarts of the pipeline in this process (`restart:`), set by the CLI.
    pub restarts: Arc<std::sync::atomic::AtomicU64>,
    pub details: Arc<Details>,
}

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
        NodeMetrics {
            name: name.into(),
            kind,
            subtasks: (0..parallelism).map(|_| Arc::default()).collect(),
            gauges: (0..parallelism).map(|_| Arc::default()).collect(),
        }
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

/// What the checkpoint driver reports about completed and failed
/// checkpoints: the numbers of its "Checkpoint complete." line, kept for
/// the metrics endpoint. Written once per checkpoint by the driver alone.
#[derive(Debug, Default)]
pub struct CheckpointMetrics {
    pub completed: AtomicU64,
    /// Aborted checkpoints (declined, timed out, failed writes).
    pub failed: AtomicU64,
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
        self.completed.fetch_add(1, Ordering::Relaxed);
        *self.last_seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
    }

    pub fn on_failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// How long ago this process saw a checkpoint complete (None: never).
    pub fn since_last(&self) -> Option<std::time::Duration> {
        self.last_seen.lock().unwrap_or_else(|p| p.into_inner()).map(|t| t.elapsed())
    }
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
}

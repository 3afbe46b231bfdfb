//! How long a restore takes: from loading the checkpoint until the last
//! task has its state back (the `weir_restore_*` metrics and the log line).

use crate::types::CheckpointId;

/// Times the restore of all tasks: from loading the checkpoint until the
/// last task has its state back.
#[derive(Debug)]
pub struct RestoreClock {
    id: CheckpointId,
    started: std::time::Instant,
    remaining: std::sync::atomic::AtomicUsize,
    /// Set when the last task has its state back.
    took: std::sync::OnceLock<std::time::Duration>,
}

impl RestoreClock {
    /// How long the restore took, once every task has its state back.
    pub fn took(&self) -> Option<std::time::Duration> {
        self.took.get().copied()
    }

    pub fn new(id: CheckpointId, started: std::time::Instant, tasks: usize) -> Self {
        RestoreClock { id, started, remaining: tasks.into(), took: std::sync::OnceLock::new() }
    }

    pub fn task_done(&self) {
        if self.remaining.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            let took = self.started.elapsed();
            let _ = self.took.set(took);
            let ms = took.as_millis() as u64;
            tracing::info!(checkpoint = self.id, restore_ms = ms, "State restored.");
        }
    }
}

//! A task's side of checkpointing: the channels to the checkpoint driver,
//! and the asynchronous part of a snapshot (encode, write, fsync, vote).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::rendezvous::{Arrival, Rendezvous};
use crate::checkpoint::disk;
use crate::checkpoint::layout::Layout;
use crate::checkpoint::manifest::TaskId;
use crate::checkpoint::task_snapshot::{self, TaskSnapshot};
use crate::faults;
use crate::protocol::arbiter::Vote;
use crate::state::StateSnapshot;
use crate::types::Kind;
use crate::types::{BundleId, CheckpointId};

/// How long a snapshot took, for the checkpoint log line and metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct SnapshotStats {
    /// The synchronous part, while the task does not process records.
    pub sync: Duration,
    /// From the first barrier to the snapshot (aligned checkpoints).
    pub alignment: Duration,
    /// The asynchronous part: encoding, writing and fsyncing the file,
    /// while the task goes on processing records.
    pub write: Duration,
    /// Bytes this checkpoint wrote (task files; for a native checkpoint
    /// also the SSTs copied into `shared/` and the DB's private files).
    pub bytes: u64,
    /// Native checkpoints: bytes of SSTs referenced that earlier checkpoints copied.
    pub reused_bytes: u64,
    /// Native checkpoints: how long the task waited at its bundle's rendezvous.
    pub pause: Duration,
    /// When the first barrier reached the task (a source: when it took the trigger).
    pub barrier_at: Option<Instant>,
    /// Bytes of in-flight records (unaligned channel state) in the task's file.
    pub in_flight_bytes: u64,
}

/// A task's part in its bundle's native checkpoint.
pub struct NativePart {
    pub rendezvous: Arc<Rendezvous>,
    pub arrival: Result<Arrival, String>,
}

/// From tasks to the checkpoint driver.
#[derive(Debug)]
pub enum Event {
    Vote {
        bundle: BundleId,
        vote: Vote,
        stats: SnapshotStats,
    },
    /// A task processed the end of its bounded input (and sent everything
    /// it emitted downstream); `source`: a source task (its barriers from
    /// now on follow its end of input).
    Finished {
        source: bool,
    },
}

/// From the driver to source tasks.
#[derive(Debug, Clone, Copy)]
pub enum Control {
    /// Record the position, emit Barrier(id). With `then_stop`, produce no
    /// more records afterwards (a final checkpoint on stop).
    /// With `drain` (only with `then_stop`), advance event time to the end
    /// before the barrier, so every window fires into this checkpoint.
    Trigger { id: CheckpointId, kind: Kind, then_stop: bool, drain: bool },
}

/// Everything a task needs to take part in checkpoints.
pub struct TaskCheckpointing {
    pub task: TaskId,
    pub bundle: BundleId,
    pub layout: Layout,
    pub events: mpsc::UnboundedSender<Event>,
    /// The newest completed checkpoint (0: none yet).
    pub completed: watch::Receiver<CheckpointId>,
    /// Set when no further checkpoint will be taken: the task may exit.
    pub done: watch::Receiver<bool>,
    /// The newest completion the chain was told about.
    pub notified: CheckpointId,
}

impl TaskCheckpointing {
    /// The asynchronous part: write the snapshot file, then vote. Runs on
    /// the blocking pool so the task goes on processing records.
    pub fn write_and_vote(
        &self,
        id: CheckpointId,
        mut snap: TaskSnapshot,
        states: Vec<(String, StateSnapshot)>,
        mut stats: SnapshotStats,
        native: Option<NativePart>,
    ) {
        let dir = self.layout.bundle_dir(id, self.bundle);
        let shared_dir = self.layout.shared_dir();
        let (task, bundle, events) = (self.task, self.bundle, self.events.clone());
        tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let mut native_files = Vec::new();
            if let Some(part) = native {
                let abort = |reason: String, stats: SnapshotStats| {
                    let vote = Vote::Abort { id, voter: task, reason };
                    let _ = events.send(Event::Vote { bundle, vote, stats });
                };
                let arrival = match part.arrival {
                    Ok(a) => a,
                    Err(e) => return abort(e, stats),
                };
                stats.pause = arrival.pause;
                if arrival.creator {
                    let uploaded = part.rendezvous.uploader.lock().expect("uploader lock").upload(&arrival.local, &dir, &shared_dir);
                    match uploaded {
                        Ok((files, up)) => {
                            stats.bytes += up.new_bytes;
                            stats.reused_bytes += up.reused_bytes;
                            native_files = files;
                        }
                        Err(e) => return abort(format!("copying the RocksDB checkpoint of bundle {bundle}: {e}"), stats),
                    }
                }
            }
            let mut pools = Vec::new();
            for (name, state) in states {
                match state.finish_pooled() {
                    Ok((bytes, pool)) => {
                        pools.extend(pool.map(|p| (snap.operators.len(), p)));
                        snap.operators.push((name, bytes));
                    }
                    Err(e) => {
                        let vote = Vote::Abort { id, voter: task, reason: format!("snapshot of `{name}`: {e}") };
                        let _ = events.send(Event::Vote { bundle, vote, stats });
                        return;
                    }
                }
            }
            let (parts, in_flight) = snap.encode_parts();
            stats.bytes += parts.iter().map(|p| p.len() as u64).sum::<u64>();
            stats.in_flight_bytes += in_flight as u64;
            let name = task_snapshot::file_name(task);
            let vote = if faults::get().fail_state_write() {
                Vote::Abort { id, voter: task, reason: format!("injected failure writing {}", dir.join(&name).display()) }
            } else {
                match disk::write_state_file_parts_in_existing_dir(&dir, &name, &parts) {
                    Ok(entry) => {
                        native_files.push(entry);
                        Vote::Prepared { id, voter: task, files: native_files }
                    }
                    Err(e) => Vote::Abort { id, voter: task, reason: e.to_string() },
                }
            };
            drop(parts);
            // Written (or abandoned): the buffers may hold the next snapshots.
            for (i, pool) in pools {
                if let Some((_, bytes)) = snap.operators.get_mut(i) {
                    pool.give(std::mem::take(bytes));
                }
            }
            stats.write = started.elapsed();
            if matches!(vote, Vote::Prepared { .. }) {
                faults::get().crash_point("after_prepare");
            }
            let _ = events.send(Event::Vote { bundle, vote, stats });
        });
    }

    pub fn abort(&self, id: CheckpointId, reason: String) {
        let vote = Vote::Abort { id, voter: self.task, reason };
        let _ = self.events.send(Event::Vote { bundle: self.bundle, vote, stats: SnapshotStats::default() });
    }

    /// A completion the chain has not been told about yet.
    pub fn newly_completed(&mut self) -> Option<CheckpointId> {
        let c = *self.completed.borrow_and_update();
        (c > self.notified).then(|| {
            self.notified = c;
            c
        })
    }

    pub async fn wait_done(&mut self) {
        let _ = self.done.wait_for(|d| *d).await;
    }
}

/// A new checkpoint completed. Never returns once the driver is gone (it
/// ended: `done` is set and says what to do next).
pub async fn completed_changed(completed: &mut watch::Receiver<CheckpointId>) {
    if completed.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A snapshot whose synchronous part is taken, waiting for the last barrier
/// (unaligned) before it is written.
pub struct PendingSnapshot {
    pub id: CheckpointId,
    pub unaligned: bool,
    /// Without the operators' state, which is in `states`.
    pub snapshot: TaskSnapshot,
    pub states: Vec<(String, StateSnapshot)>,
    pub stats: SnapshotStats,
    /// The operators' native state is in the bundle's native checkpoint.
    pub native: bool,
    /// Native: what the rendezvous gave back (None: not reached yet).
    pub arrival: Option<Result<Arrival, String>>,
}

impl PendingSnapshot {
    pub fn take(
        id: CheckpointId,
        unaligned: bool,
        snapshot: TaskSnapshot,
        states: Vec<(String, StateSnapshot)>,
        sync_started: Instant,
        first_barrier: Instant,
    ) -> Self {
        let stats = SnapshotStats {
            sync: sync_started.elapsed(),
            alignment: sync_started.duration_since(first_barrier),
            barrier_at: Some(first_barrier),
            ..SnapshotStats::default()
        };
        PendingSnapshot { id, unaligned, snapshot, states, stats, native: false, arrival: None }
    }
}

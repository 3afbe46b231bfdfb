//! The rendezvous of a bundle's stateful tasks for a native (incremental)
//! RocksDB checkpoint.
//!
//! The subtasks of a bundle share one DB, and RocksDB's checkpoint (flush +
//! hard links) captures the whole DB at one moment: it is a consistent cut
//! only if no subtask has written anything after its barrier. So each
//! stateful task, at its synchronous point, after forwarding its barrier
//! downstream (forwarding first: a downstream task of the same bundle must
//! get the barrier, or it could never arrive), waits here without blocking
//! a runtime thread until every stateful task of the bundle arrived at the
//! same checkpoint. The last to arrive creates the DB checkpoint (on the
//! blocking pool), then all resume; the wait is logged as the pause.
//!
//! Only with aligned (or at-least-once) barriers: an unaligned task
//! snapshots at its first barrier while records from upstreams that have
//! not reached theirs are still queued for it, and a member upstream of it
//! could then wait forever on a full channel into a paused task.
//!
//! A checkpoint aborted anywhere is cancelled here by the driver, so nobody
//! waits for a member that will never come (it aborted, or it saw a newer
//! barrier first).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::state::rocks::native::{self, LocalCheckpoint, Uploader};
use crate::state::rocks::BundleDb;
use crate::types::{BundleId, CheckpointId};

/// What the members of checkpoint `id` learn when it is released.
#[derive(Debug, Clone)]
struct Released {
    id: CheckpointId,
    result: Result<Arc<LocalCheckpoint>, String>,
    /// The member that created the checkpoint (it uploads it).
    creator: usize,
}

#[derive(Debug)]
struct Round {
    id: CheckpointId,
    arrived: usize,
    cancelled: bool,
}

/// What a member gets back.
pub struct Arrival {
    pub local: Arc<LocalCheckpoint>,
    /// This member created the local checkpoint: its vote carries the files.
    pub creator: bool,
    /// How long this member waited.
    pub pause: Duration,
}

pub struct Rendezvous {
    pub bundle: BundleId,
    pub db: Arc<BundleDb>,
    members: usize,
    round: Mutex<Round>,
    released: watch::Sender<Option<Released>>,
    /// Copies local checkpoints into storage; used by the creator's vote.
    pub uploader: Mutex<Uploader>,
    next_ticket: std::sync::atomic::AtomicUsize,
}

impl Rendezvous {
    pub fn new(bundle: BundleId, db: Arc<BundleDb>, members: usize, uploader: Uploader) -> Arc<Self> {
        Arc::new(Rendezvous {
            bundle,
            db,
            members,
            round: Mutex::new(Round { id: 0, arrived: 0, cancelled: false }),
            released: watch::channel(None).0,
            uploader: Mutex::new(uploader),
            next_ticket: Default::default(),
        })
    }

    /// A member's identity for `creator` (one per member task).
    pub fn ticket(&self) -> usize {
        self.next_ticket.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Member `ticket` reached checkpoint `id`; wait for the others and the
    /// DB checkpoint. Err: the checkpoint was aborted or creating it failed.
    pub async fn arrive(self: &Arc<Self>, ticket: usize, id: CheckpointId) -> Result<Arrival, String> {
        let started = Instant::now();
        let mut rx = self.released.subscribe();
        let last = {
            let mut r = self.round.lock().expect("rendezvous lock");
            if id < r.id || (id == r.id && r.cancelled) {
                return Err(format!("checkpoint {id} was aborted before bundle {} paused for it", self.bundle));
            }
            if id > r.id {
                *r = Round { id, arrived: 0, cancelled: false };
            }
            r.arrived += 1;
            r.arrived == self.members
        };
        if last {
            let db = self.db.clone();
            let result = tokio::task::spawn_blocking(move || db.local_checkpoint(id))
                .await
                .unwrap_or_else(|e| Err(crate::state::StateError::Backend(format!("checkpoint thread: {e}"))));
            let result = result.map(Arc::new).map_err(|e| e.to_string());
            tracing::debug!(
                bundle = self.bundle,
                checkpoint = id,
                ms = started.elapsed().as_millis() as u64,
                "Bundle DB checkpoint created."
            );
            self.released.send_if_modified(|cur| {
                if cur.as_ref().is_some_and(|c| c.id >= id) {
                    return false;
                }
                *cur = Some(Released { id, result: result.clone(), creator: ticket });
                true
            });
        }
        let released =
            rx.wait_for(|r| r.as_ref().is_some_and(|r| r.id >= id)).await.map_err(|_| "the checkpoint driver is gone".to_string())?;
        let r = released.as_ref().expect("checked by wait_for");
        if r.id != id {
            return Err(format!("checkpoint {id} was superseded by {}", r.id));
        }
        let local = r.result.clone()?;
        Ok(Arrival { local, creator: r.creator == ticket, pause: started.elapsed() })
    }

    /// Checkpoint `id` was aborted: release whoever waits for it, refuse
    /// late arrivals, and drop its local checkpoint.
    pub fn cancel(&self, id: CheckpointId, reason: &str) {
        {
            let mut r = self.round.lock().expect("rendezvous lock");
            if r.id < id {
                *r = Round { id, arrived: 0, cancelled: true };
            } else if r.id == id {
                r.cancelled = true;
            }
        }
        let reason = format!("checkpoint {id} aborted: {reason}");
        self.released.send_if_modified(|cur| {
            if cur.as_ref().is_some_and(|c| c.id > id || (c.id == id && c.result.is_err())) {
                return false;
            }
            *cur = Some(Released { id, result: Err(reason.clone()), creator: usize::MAX });
            true
        });
        let _ = std::fs::remove_dir_all(self.db.local_root().join(crate::checkpoint::layout::checkpoint_dir_name(id)));
    }

    /// Checkpoint `id` completed: local checkpoints older than it go.
    pub fn completed(&self, id: CheckpointId) {
        native::retain_local(&self.db.local_root(), Some(id), id);
    }
}

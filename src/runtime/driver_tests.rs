//! The checkpoint driver (`checkpointing.rs`) on its own, with the test
//! playing its one task and holding the storage: the driver triggers,
//! the "task" writes its snapshot file and votes, and what the driver
//! commits, retains and deletes is read back from the directory and the
//! store. The store can refuse writes, as an object store that fails does.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::checkpointing::{Driver, DriverSetup};
use super::metrics::{CheckpointMetrics, FailureReason};
use super::task_checkpoint::{Control, Event, SnapshotStats};
use crate::checkpoint::layout::Layout;
use crate::checkpoint::manifest::{FileEntry, TaskId};
use crate::checkpoint::storage::{LocalStorage, Object, Storage, StorageError};
use crate::config::{Alignment, CheckpointSpec};
use crate::protocol::arbiter::Vote;
use crate::types::{CheckpointId, Kind};

/// A directory as the store, whose next `fail_puts` writes fail.
#[derive(Debug)]
struct FlakyStore {
    inner: LocalStorage,
    fail_puts: AtomicUsize,
}

impl FlakyStore {
    fn refuse(&self, key: &str) -> Result<(), StorageError> {
        let failing = self.fail_puts.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        match failing {
            true => Err(StorageError::Failed { op: "put", url: self.url(key), message: "injected failure".into() }),
            false => Ok(()),
        }
    }
}

impl Storage for FlakyStore {
    fn root(&self) -> String {
        self.inner.root()
    }
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        self.refuse(key)?;
        self.inner.put(key, bytes)
    }
    fn put_file(&self, key: &str, from: &Path) -> Result<(), StorageError> {
        self.refuse(key)?;
        self.inner.put_file(key, from)
    }
    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        self.refuse(key)?;
        self.inner.put_if_absent(key, bytes)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        self.inner.get(key)
    }
    fn get_to_file(&self, key: &str, to: &Path) -> Result<(), StorageError> {
        self.inner.get_to_file(key, to)
    }
    fn list(&self, prefix: &str) -> Result<Vec<Object>, StorageError> {
        self.inner.list(prefix)
    }
    fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key)
    }
    fn get_versioned(&self, key: &str) -> Result<(Vec<u8>, String), StorageError> {
        self.inner.get_versioned(key)
    }
    fn put_conditional(&self, key: &str, bytes: &[u8], expected: Option<&str>) -> Result<String, StorageError> {
        self.inner.put_conditional(key, bytes, expected)
    }
}

const TASK: TaskId = TaskId { chain: 0, subtask: 0 };
const GENERATION: u64 = 7;

fn setup(state: &Path, storage: Option<Arc<dyn Storage>>, retain: usize, metrics: Arc<CheckpointMetrics>) -> DriverSetup {
    DriverSetup {
        spec: CheckpointSpec {
            interval: Duration::from_millis(20),
            alignment: Alignment::Aligned,
            timeout: Duration::from_secs(10),
            min_pause: Duration::ZERO,
            retain: std::num::NonZeroUsize::new(retain).expect("retain >= 1"),
            tolerable_failures: 100,
            storage: None,
        },
        layout: Layout::new(state),
        pipeline: "driver".into(),
        parallelism: 1,
        max_parallelism: 128,
        operators: vec!["src".into()],
        keys: Default::default(),
        cluster: None,
        bundles: vec![vec![TASK]],
        task_names: [(TASK, "src[0]".to_string())].into(),
        first_id: 1,
        retained: Vec::new(),
        retained_stored: Vec::new(),
        storage_generation: if storage.is_some() { GENERATION } else { 0 },
        ownership: None,
        storage,
        rendezvous: Vec::new(),
        source_tasks: 1,
        metrics,
    }
}

/// Run the driver, answering its triggers as the one task does, until
/// `completions` checkpoints completed; then stop it (a final checkpoint)
/// and wait for its end. Returns the ids the task voted for.
async fn drive(setup: DriverSetup, completions: CheckpointId) -> Vec<CheckpointId> {
    drive_voting(setup, completions, |_| true).await
}

/// `drive`, the task voting to abort the checkpoints `prepare` refuses.
async fn drive_voting(setup: DriverSetup, completions: CheckpointId, prepare: impl Fn(CheckpointId) -> bool) -> Vec<CheckpointId> {
    let layout = setup.layout.clone();
    let (events_tx, events) = mpsc::unbounded_channel();
    let (control_tx, mut controls) = mpsc::unbounded_channel();
    let (completed_tx, mut completed) = watch::channel(0);
    let (done_tx, _done) = watch::channel(false);
    let (stop_tx, stop) = watch::channel(false);
    let driver = Driver::new(setup, events, vec![control_tx], completed_tx, done_tx, stop, None);
    let run = tokio::spawn(driver.run());
    let mut voted = Vec::new();
    let mut stopping = false;
    loop {
        tokio::select! {
            control = controls.recv() => {
                let Some(Control::Trigger { id, kind, .. }) = control else { break };
                assert_eq!(kind, Kind::Checkpoint);
                voted.push(id);
                let vote = match prepare(id) {
                    true => Vote::Prepared { id, voter: TASK, files: write_snapshot(&layout, id) },
                    false => {
                        // Half-written, as a task that failed leaves it.
                        write_snapshot(&layout, id);
                        Vote::Abort { id, voter: TASK, reason: "injected".into() }
                    }
                };
                if events_tx.send(Event::Vote { bundle: 0, vote, stats: SnapshotStats::default() }).is_err() {
                    break;
                }
            }
            _ = completed.changed(), if !stopping => {
                if *completed.borrow() >= completions {
                    stopping = true;
                    let _ = stop_tx.send(true);
                }
            }
            _ = tokio::time::sleep(Duration::from_secs(20)) => panic!("the driver made no progress"),
        }
        if run.is_finished() {
            break;
        }
    }
    tokio::time::timeout(Duration::from_secs(10), run).await.expect("the driver ends").expect("no panic").expect("no failure");
    voted
}

/// The task's snapshot of checkpoint `id`: one file in its bundle directory.
fn write_snapshot(layout: &Layout, id: CheckpointId) -> Vec<FileEntry> {
    let dir = layout.bundle_dir(id, 0);
    std::fs::create_dir_all(&dir).unwrap();
    let bytes = format!("snapshot of checkpoint {id}").into_bytes();
    std::fs::write(dir.join("task-000-0000.snapshot"), &bytes).unwrap();
    vec![FileEntry { name: "task-000-0000.snapshot".into(), size: bytes.len() as u64, crc32c: crc32c::crc32c(&bytes), shared: false }]
}

/// The checkpoint directories under `checkpoints/` (or top-level names in
/// the store) that hold a `_metadata`.
fn committed(keys: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    keys.into_iter().filter_map(|k| k.strip_suffix("/_metadata").map(str::to_string)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_checkpoints_commit_and_only_the_retained_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(CheckpointMetrics::default());
    let voted = drive(setup(dir.path(), None, 2, metrics.clone()), 5).await;
    let last = *voted.last().unwrap();
    let layout = Layout::new(dir.path());
    let names = std::fs::read_dir(layout.checkpoints_dir()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap());
    let kept: BTreeSet<String> = names.filter(|n| n.starts_with("chk-")).collect();
    let expected: BTreeSet<String> = [last - 1, last].iter().map(|&id| crate::checkpoint::layout::checkpoint_dir_name(id)).collect();
    assert_eq!(kept, expected, "the two newest, nothing else");
    for id in [last - 1, last] {
        crate::checkpoint::validate::validate_dir(&layout.checkpoint_dir(id)).unwrap_or_else(|e| panic!("chk {id}: {e}"));
    }
    assert_eq!(metrics.completed.load(Ordering::Relaxed), last, "every checkpoint the task voted for completed");
}

/// Writes to the store fail for a while: those checkpoints abort (counted
/// as write failures) and leave nothing committed in the store; the later
/// ones commit, and the store keeps exactly the retained ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_writes_aborts_those_checkpoints_and_later_ones_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FlakyStore { inner: LocalStorage::new(store_dir.path()), fail_puts: AtomicUsize::new(0) });
    let metrics = Arc::new(CheckpointMetrics::default());
    // Fail from the first checkpoint on: the first few writes (files, MANIFEST, _metadata) are refused.
    store.fail_puts.store(5, Ordering::SeqCst);
    let voted = drive(setup(dir.path(), Some(store.clone()), 2, metrics.clone()), 10).await;
    let failed_writes =
        metrics.failed_by[FailureReason::ALL.iter().position(|r| *r == FailureReason::Write).unwrap()].load(Ordering::Relaxed);
    assert!(failed_writes >= 1, "the refused writes failed a checkpoint (voted {voted:?})");
    assert_eq!(store.fail_puts.load(Ordering::SeqCst), 0, "every injected failure was met");
    let keys: Vec<String> = store.list("").unwrap().into_iter().map(|o| o.key).collect();
    let in_store = committed(keys.clone());
    let last = *voted.last().unwrap();
    let name = |id| crate::checkpoint::generation::StoredId::new(id, GENERATION).name();
    assert_eq!(in_store, [name(last - 1), name(last)].into(), "the store keeps the two newest: {keys:?}");
    // Nothing of an aborted or deleted checkpoint is left behind.
    let tops: BTreeSet<&str> = keys.iter().filter_map(|k| k.split('/').next()).filter(|t| t.starts_with("chk-")).collect();
    assert_eq!(tops, in_store.iter().map(String::as_str).collect(), "objects of checkpoints that are not committed: {keys:?}");
}

/// The task votes to abort two checkpoints: they are counted as declined,
/// their directories are removed, and the checkpoints around them commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_votes_abort_declines_the_checkpoint_and_its_directory_goes() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(CheckpointMetrics::default());
    let voted = drive_voting(setup(dir.path(), None, 10, metrics.clone()), 5, |id| id != 2 && id != 3).await;
    let declined =
        metrics.failed_by[FailureReason::ALL.iter().position(|r| *r == FailureReason::Declined).unwrap()].load(Ordering::Relaxed);
    assert_eq!(declined, 2, "voted {voted:?}");
    let layout = Layout::new(dir.path());
    for id in voted {
        let exists = layout.checkpoint_dir(id).exists();
        assert_eq!(exists, id != 2 && id != 3, "chk {id}: kept iff it committed");
        if exists {
            crate::checkpoint::validate::validate_dir(&layout.checkpoint_dir(id)).unwrap_or_else(|e| panic!("chk {id}: {e}"));
        }
    }
}

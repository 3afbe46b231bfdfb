//! Choosing and loading the checkpoint a run starts from, and preparing the
//! state directory, in three phases:
//!
//! 1. **Lock** the directory (`checkpoint::lock`): a second process is
//!    refused before it reads or writes anything, and before any connector
//!    is opened.
//! 2. **Decide**, reading only: who owns the directory, which checkpoint
//!    (`latest` within the current lineage, see `checkpoint::lineage`, or
//!    the given path, validated by `BundleStateValidator`), every check
//!    that can refuse it, and its state loaded.
//! 3. **Commit**: claim the directory, record the lineage, remove
//!    unfinished checkpoints, orphaned bundle directories and unreferenced
//!    shared files.
//!
//! So a refused start changes nothing on disk; with a fresh `state.dir`
//! the directory is not even created.

pub mod cluster;
pub mod plan;
pub mod remote;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::checkpoint::disk;
use crate::checkpoint::generation::{self, Generation, Origin, StoredId};
use crate::checkpoint::layout::{Layout, METADATA_FILE};
use crate::checkpoint::lineage::{self, Lineage};
use crate::checkpoint::lock::{self, StateDirLock};
use crate::checkpoint::manifest::{BundleManifest, FileEntry, Metadata, TaskId};
use crate::checkpoint::task_snapshot::{self, ChannelId, TaskSnapshot};
use crate::checkpoint::validate::{self, BundleStateValidator, FindError, ValidCheckpoint};
use crate::config::Backend;
use crate::config::Pipeline;
use crate::connectors::source::RestoredPositions;
use crate::features::{missing_reason, Feature, Features};
use crate::plan::Plan;
use crate::state::rocks::native::DB_SUBDIR;
use crate::types::BundleId;
use crate::types::CheckpointId;
use crate::types::Kind;
use crate::types::Millis;

/// What `--restore` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreFrom {
    Latest,
    Path(PathBuf),
    /// A rescale: one stop-with-savepoint of every instance of a cluster
    /// (`--restore` given several times), see docs/scaling.md.
    Set(Vec<PathBuf>),
}

/// A refusal the user must act on (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("cannot restore from {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("{0} (use --force to take the directory over)")]
    OtherPipeline(String),
    #[error("checkpoint {id} was taken with {what} {found}, this pipeline has {expected}; the {what} must match")]
    Mismatch { id: CheckpointId, what: &'static str, found: String, expected: String },
    #[error("checkpoint {id} holds state of operators this pipeline does not have: {}; rerun with --allow-non-restored-state to drop it", .operators.join(", "))]
    NotRestored { id: CheckpointId, operators: Vec<String> },
    #[error("checkpoint {id}: operator `{operator}` was {found}, this pipeline has it {expected}; its state cannot be restored under other keys (rename the operator to start it empty)")]
    KeyChanged { id: CheckpointId, operator: String, found: String, expected: String },
    #[error("checkpoint {id} is unaligned and holds in-flight records of the old layout; it can only be restored at parallelism {parallelism} (take a savepoint to rescale)")]
    InFlight { id: CheckpointId, parallelism: u16 },
    #[error("checkpoint {id} is unaligned and holds in-flight records on the channel {channel}, which this pipeline does not have: {reason}; restore it with the topology it was taken with and take a savepoint (always aligned) to change the topology")]
    InFlightUnmapped { id: CheckpointId, channel: String, reason: String },
    #[error("checkpoint {id} is an incremental RocksDB checkpoint: {reason}; to change that, restore it as it was taken, trigger a savepoint (always canonical) and restore the savepoint")]
    Native { id: CheckpointId, reason: String },
    #[error("--restore latest: the history of this state directory began with a restore of {kind} {id} from {}, and no checkpoint completed since; it cannot be used again ({reason}). Restore it from where it is now with --restore PATH, or another checkpoint or savepoint, or start without --restore", .path.display())]
    LineageGone { id: CheckpointId, kind: &'static str, path: PathBuf, reason: String },
    #[error("--restore latest: {0}")]
    Lineage(#[from] lineage::LineageError),
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error("checkpoint storage: {0}")]
    Store(#[from] disk::StoreError),
    #[error("checkpoint storage: {0}")]
    Storage(String),
    /// The store could not be read (a network fault, the server down): a
    /// failure, not a refusal of the user's input; the next start may succeed.
    #[error("checkpoint storage unreachable: {0}")]
    Unreachable(String),
    #[error(transparent)]
    Owner(#[from] crate::checkpoint::lease::OwnerError),
    #[error("checkpoint storage: {0}")]
    Generation(#[from] generation::GenerationError),
    #[error("cannot restore the savepoint set: {0}; nothing was changed")]
    Set(String),
    #[error("the start was decided but committing it failed: {0}; what it wrote does not count: start again")]
    Committing(Box<RestoreError>),
}

impl RestoreError {
    /// Whether the start was refused before it wrote anything (exit 2).
    /// False when committing its decision failed (exit 1): what it wrote by
    /// then (a generation record whose lease ran out meanwhile, say) does
    /// not count, but the directory or the bucket has changed; and when the
    /// store could not be read (exit 1, as for brokers unreachable at the
    /// start: nothing is wrong with the input).
    pub fn is_refusal(&self) -> bool {
        !matches!(self, RestoreError::Committing(_) | RestoreError::Unreachable(_))
    }
}

/// Where a run starts from, and where its checkpoints continue.
pub struct StartPoint {
    pub restored: Option<RestoredState>,
    pub first_id: CheckpointId,
    /// Completed checkpoints on disk (or in the store), oldest first.
    pub retained: Vec<CheckpointId>,
    /// With `checkpoint.storage`: the stored names of `retained` (a
    /// deposed owner's checkpoint may share an id with another), and the
    /// storage generation this start began (`checkpoint::generation`; 0:
    /// none, local checkpoints).
    pub retained_stored: Vec<StoredId>,
    pub storage_generation: Generation,
    /// `checkpoint.storage` opened (None: checkpoints stay in the state directory).
    pub storage: Option<std::sync::Arc<dyn crate::checkpoint::storage::Storage>>,
    /// The ownership of `storage` (the run stops when it is lost).
    pub ownership: Option<crate::checkpoint::lease::Ownership>,
    /// In a cluster: the generation of its repartition producers
    /// (`plan::cluster::generation`, from what this start restores; not the
    /// storage's generation above).
    pub cluster_generation: u64,
}

pub struct RestoredState {
    pub id: CheckpointId,
    pub dir: PathBuf,
    /// The parallelism the checkpoint was taken at.
    pub parallelism: u16,
    /// Same parallelism as the checkpoint: each operator subtask takes back
    /// its own state, and each channel its in-flight records.
    same_parallelism: bool,
    /// The old tasks' snapshots (keyed by the old task, which names nothing
    /// on restore: state is matched by operator name and subtask).
    tasks: HashMap<TaskId, TaskSnapshot>,
    /// Each source's positions by old subtask, by source name.
    positions: HashMap<String, RestoredPositions>,
    /// When loading began.
    pub started: std::time::Instant,
    /// The bundle MANIFESTs, in bundle order.
    pub manifests: Vec<BundleManifest>,
    /// The downloads `dir` (and the rest of a set) are in, removed with it
    /// (none: local directories).
    _download: Vec<crate::checkpoint::publish::TempDir>,
}

impl RestoredState {
    /// The files of bundle `b`'s native RocksDB checkpoint (shared SSTs and
    /// `db/` private files), if the bundle has one.
    pub fn native_files(&self, b: BundleId) -> Option<Vec<FileEntry>> {
        native_files(self.manifests.iter().find(|m| m.bundle == b)?)
    }
}

/// The native RocksDB files a bundle MANIFEST lists (None: none).
fn native_files(m: &BundleManifest) -> Option<Vec<FileEntry>> {
    let files: Vec<FileEntry> = m.files.iter().filter(|f| f.shared || f.name.starts_with(&format!("{DB_SUBDIR}/"))).cloned().collect();
    (!files.is_empty()).then_some(files)
}

/// How strict a restore is.
#[derive(Debug, Clone, Copy, Default)]
pub struct RestorePolicy {
    /// Take over a state directory written by another pipeline.
    pub force: bool,
    /// Drop the state of operators the pipeline no longer has.
    pub allow_non_restored_state: bool,
}

/// A prepared start and the lock (and, with `checkpoint.storage`, the
/// ownership lease of the store) that must be held while the run lasts.
pub struct Prepared {
    pub start: StartPoint,
    pub lock: StateDirLock,
    pub lease: Option<crate::checkpoint::lease::Lease>,
}

/// Lock the state directory, resolve `restore` and run every check that
/// can refuse it, and only then write (see the module comment).
pub fn prepare(pipeline: &Pipeline, restore: Option<&RestoreFrom>, policy: RestorePolicy) -> Result<Prepared, RestoreError> {
    let layout = Layout::new(&pipeline.state.dir);
    let opened = match pipeline.checkpoint.as_ref().and_then(|c| c.storage.as_ref()) {
        Some(spec) => Some(remote::open(spec)?),
        None => None,
    };
    let storage = opened.as_deref();
    let empty_before = is_empty_or_absent(layout.state_dir())?;
    let locked = StateDirLock::lock_existing(&layout)?;
    let decision = decide(pipeline, &layout, storage, restore, policy)?;
    // The store's owner, after every check that can refuse the start and
    // before anything is written (here or in the state directory).
    let lease = match (&opened, pipeline.checkpoint.as_ref().and_then(|c| c.storage.as_ref())) {
        (Some(s), Some(spec)) => Some(own(s.clone(), pipeline, &layout, locked.is_some(), spec.lease)?),
        _ => None,
    };
    let opened = lease.as_ref().map(|l| l.guard()).or(opened);
    let storage = opened.as_deref();
    let (mut lock, decision) = match locked {
        Some(lock) => (lock, decision),
        None => {
            // No lock file yet: decided unlocked, so nothing was created for
            // a refusal. The decision stands if the directory was empty and
            // holds nothing but the new lock file; else decide again.
            let lock = StateDirLock::lock_creating(&layout)?;
            if empty_before && holds_only_the_lock(&layout)? {
                (lock, decision)
            } else {
                drop(decision);
                (lock, decide(pipeline, &layout, storage, restore, policy)?)
            }
        }
    };
    // Decided before the lease, so that a refusal writes nothing; a
    // checkpoint the old owner completed in the meantime (its lease had
    // not run out yet) must not be missed: decide again if the store changed.
    let decision = match storage.filter(|_| lease.is_some()) {
        Some(s) if decision.view.as_ref() != Some(&StoreView::read(s)?) => {
            tracing::info!("The checkpoint storage changed while this start decided; deciding again.");
            drop(decision);
            decide(pipeline, &layout, storage, restore, policy)?
        }
        _ => decision,
    };
    // The first write: from here on the start is decided.
    lock.record_pid()?;
    let mut start = commit(pipeline, &layout, storage, decision).map_err(|e| RestoreError::Committing(Box::new(e)))?;
    start.storage = opened.clone();
    start.ownership = lease.as_ref().map(|l| l.ownership());
    Ok(Prepared { start, lock, lease })
}

/// Become the owner of the checkpoint storage (`checkpoint::lease`).
fn own(
    storage: std::sync::Arc<dyn crate::checkpoint::storage::Storage>,
    pipeline: &Pipeline,
    layout: &Layout,
    state_dir_locked: bool,
    lease: std::time::Duration,
) -> Result<crate::checkpoint::lease::Lease, RestoreError> {
    use crate::checkpoint::lease::{self, Acquired, Claim};
    let dir = layout.state_dir();
    let state_dir = std::fs::canonicalize(dir).or_else(|_| std::path::absolute(dir)).unwrap_or_else(|_| dir.to_path_buf());
    let claim = Claim { pipeline: pipeline.name.clone(), state_dir: state_dir.display().to_string(), state_dir_locked, lease };
    let root = storage.root();
    let (held, how) = lease::acquire(storage, &claim)?;
    match how {
        Acquired::Free => tracing::info!(storage = %root, "Owning the checkpoint storage."),
        Acquired::Gone { pid } => {
            tracing::info!(storage = %root, previous_pid = pid, "Took the checkpoint storage over from a weir process of this host that is gone.")
        }
        Acquired::Expired { pid, host, age_ms } => tracing::warn!(
            storage = %root, previous_pid = pid, previous_host = %host, age_ms,
            "Took the checkpoint storage over: its owner's lease expired."
        ),
    }
    Ok(held)
}

/// Everything a start needs, decided without writing.
struct Decision {
    owner: Owner,
    /// The lineage this start begins (None: it continues the current one).
    lineage: Option<Lineage>,
    restored: Option<RestoredState>,
    first_id: CheckpointId,
    /// The restored checkpoint, if it is one of this directory's: kept by cleanup.
    keep: Vec<CheckpointId>,
    /// What the store held when deciding, and what the new generation
    /// records as its origin (with `checkpoint.storage`).
    view: Option<StoreView>,
    origin: Origin,
    /// The generation of the cluster's repartition producers (`plan::cluster::generation`).
    cluster_generation: u64,
}

/// The checkpoints and generation records of a store, as one start saw them.
#[derive(Debug)]
struct StoreView {
    stored: std::collections::BTreeMap<StoredId, bool>,
    records: Vec<generation::Record>,
}

impl StoreView {
    fn read(s: &dyn crate::checkpoint::storage::Storage) -> Result<StoreView, RestoreError> {
        let stored = crate::checkpoint::publish::checkpoints(s).map_err(|e| RestoreError::Unreachable(e.to_string()))?;
        let records = generation::read_all(s).map_err(|e| match e {
            generation::GenerationError::Storage(e) => RestoreError::Unreachable(e.to_string()),
            e => RestoreError::Generation(e),
        })?;
        Ok(StoreView { stored, records })
    }

    fn complete(&self) -> std::collections::BTreeSet<StoredId> {
        self.stored.iter().filter(|(_, done)| **done).map(|(s, _)| *s).collect()
    }
}

/// Equal when a decision made on one holds for the other: the same
/// complete checkpoints and records (unfinished objects landing meanwhile,
/// a deposed owner's, change nothing a start decides).
impl PartialEq for StoreView {
    fn eq(&self, other: &StoreView) -> bool {
        self.complete() == other.complete() && self.records == other.records
    }
}

/// What `--restore latest` found.
enum Resolved {
    Chosen(Chosen),
    /// The lineage began with this savepoint set and no checkpoint completed since.
    Set(Vec<PathBuf>),
    Nothing,
}

enum Owner {
    Ours,
    Unclaimed,
    /// `--force` over the directory of the named pipeline.
    TakeOver(String),
}

/// Phase 2, reading only. Every check that can refuse the start runs here,
/// before anything is written: the owner, validation, compatibility,
/// native RocksDB and in-flight records at another layout (in `load`).
fn decide(
    pipeline: &Pipeline,
    layout: &Layout,
    storage: Option<&dyn crate::checkpoint::storage::Storage>,
    restore: Option<&RestoreFrom>,
    policy: RestorePolicy,
) -> Result<Decision, RestoreError> {
    let owner = check_owner(layout, &pipeline.name, policy.force)?;
    let mut ids = disk::list_checkpoint_ids(layout)?;
    let view = storage.map(StoreView::read).transpose()?;
    if let Some(v) = &view {
        // Ids continue past everything in the store too (finished or not).
        ids.extend(v.stored.keys().map(|s| s.id));
        ids.sort_unstable();
    }
    let next_id = ids.last().map_or(1, |m| m + 1);
    let (resolved, begins_lineage) = match restore {
        Some(RestoreFrom::Path(p)) => (Resolved::Chosen(validate_path(pipeline, p)?), true),
        Some(RestoreFrom::Latest) => (resolve_latest(pipeline, layout, storage, view.as_ref())?, false),
        Some(RestoreFrom::Set(paths)) => (Resolved::Set(paths.clone()), true),
        None => (Resolved::Nothing, true),
    };
    let mut set = Vec::new();
    let mut cluster_generation = crate::plan::cluster::generation(pipeline, crate::plan::cluster::Start::Fresh);
    let (restored, lineage_origin, origin) = match resolved {
        Resolved::Chosen(c) => {
            cluster_generation = crate::plan::cluster::generation(pipeline, crate::plan::cluster::Start::Restored(&c.valid.metadata));
            let (id, kind) = (c.valid.metadata.checkpoint_id, c.valid.metadata.kind);
            let origin = match c.stored {
                Some(checkpoint) => Origin::Continues { checkpoint },
                None => Origin::Restored { path: origin_text(&c.origin), checkpoint_id: id, checkpoint_kind: kind },
            };
            let lineage_origin = (c.origin.clone(), id, kind);
            let mut r = load(pipeline, c.valid, policy)?;
            r._download.extend(c.download);
            (Some(r), Some(lineage_origin), origin)
        }
        Resolved::Set(paths) => {
            let (r, first, of_set) = load_set(pipeline, &paths, policy)?;
            cluster_generation = of_set;
            // Both lineages keep the whole set, so a start that finds no
            // checkpoint of it (here, or on a new machine) restores the set again.
            set = paths.iter().map(|p| PathBuf::from(origin_text(p))).collect();
            (Some(r), Some(first), Origin::Set { paths: set.iter().map(|p| p.display().to_string()).collect() })
        }
        Resolved::Nothing => (None, None, Origin::Beginning),
    };
    // Further checks of the restored state against the pipeline belong
    // here: nothing has been written yet.
    let first_id = next_id.max(restored.as_ref().map_or(1, |r| r.id + 1));
    let keep = restored.as_ref().filter(|r| is_checkpoint_of(layout, r)).map(|r| r.id).into_iter().collect();
    let lineage = begins_lineage.then(|| {
        let from = lineage_origin.map(|(dir, checkpoint_id, kind)| lineage::RestoredFrom {
            path: if is_url(&dir) { dir } else { lineage::record_path(layout, &dir) },
            checkpoint_id,
            kind,
        });
        Lineage { set, ..Lineage::new(&pipeline.name, first_id, from) }
    });
    Ok(Decision { owner, lineage, restored, first_id, keep, view, origin, cluster_generation })
}

/// A restored path as a generation record keeps it: a URL as it is, a
/// local path absolute (it names a place on this machine only).
fn origin_text(path: &Path) -> String {
    if is_url(path) {
        return path.display().to_string();
    }
    std::fs::canonicalize(path).or_else(|_| std::path::absolute(path)).unwrap_or_else(|_| path.to_path_buf()).display().to_string()
}

/// Phase 3: the writes, under the lock.
fn commit(
    pipeline: &Pipeline,
    layout: &Layout,
    storage: Option<&dyn crate::checkpoint::storage::Storage>,
    d: Decision,
) -> Result<StartPoint, RestoreError> {
    // Before anything else is written, here or in the store: from here on
    // what this start writes carries its generation, and its lineage is in
    // the store (a refusal here has written nothing).
    let generation = match storage {
        Some(s) => begin_generation(s, pipeline, &d)?,
        None => 0,
    };
    match &d.owner {
        Owner::Ours => {}
        Owner::Unclaimed => disk::write_owner(layout, &pipeline.name)?,
        Owner::TakeOver(previous) => {
            let dir = layout.state_dir().display();
            tracing::warn!(dir = %dir, previous = %previous, "Taking over a state directory of another pipeline (--force).");
            disk::write_owner(layout, &pipeline.name)?;
        }
    }
    if let Some(l) = &d.lineage {
        lineage::write(layout, l)?;
    }
    let validator = BundleStateValidator::new(layout.clone(), pipeline.name.clone());
    let report = validator.cleanup(&d.keep)?;
    for id in &report.removed_checkpoints {
        tracing::info!(checkpoint = id, "Removed an unfinished checkpoint.");
    }
    for dir in &report.removed_bundle_dirs {
        tracing::info!(dir = %dir.display(), "Removed an orphaned bundle directory.");
    }
    match crate::checkpoint::shared::collect_garbage(layout, true) {
        Ok(removed) if !removed.is_empty() => tracing::info!(files = removed.len(), "Removed shared files no checkpoint references."),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "Cannot clean up shared checkpoint files; keeping them all."),
    }
    let mut retained = disk::list_checkpoint_ids(layout)?;
    let mut retained_stored = Vec::new();
    if let Some(s) = storage {
        let storage_err = |e: crate::checkpoint::storage::StorageError| RestoreError::Storage(e.to_string());
        for stored in crate::checkpoint::publish::remove_unfinished(s).map_err(storage_err)? {
            tracing::info!(checkpoint = %stored, url = %s.url(&stored.name()), "Removed an unfinished checkpoint from the store.");
        }
        // An older owner's checkpoint with an id this generation writes
        // was committed after this start listed the store: on no lineage.
        for (stored, _) in crate::checkpoint::publish::checkpoints(s).map_err(storage_err)? {
            if stored.generation < generation && stored.id >= d.first_id {
                tracing::warn!(checkpoint = %stored, url = %s.url(&stored.name()), "Removed a checkpoint a deposed owner committed after this start listed the store.");
                crate::checkpoint::publish::remove(s, &stored.name()).map_err(storage_err)?;
            }
        }
        match crate::checkpoint::publish::collect_shared_garbage(s) {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!(objects = removed.len(), "Removed shared objects no checkpoint in the store references.")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "Cannot clean up shared objects in the store; keeping them all."),
        }
        // The store decides what is retained; local copies go with them.
        let stored = crate::checkpoint::publish::checkpoints(s).map_err(storage_err)?;
        retained_stored = stored.into_iter().filter(|&(id, done)| done && id.id < d.first_id).map(|(id, _)| id).collect();
        retained = retained_stored.iter().map(|s| s.id).collect();
        retained.dedup();
    }
    retained.sort_unstable();
    retained.dedup();
    Ok(StartPoint {
        restored: d.restored,
        first_id: d.first_id,
        retained,
        retained_stored,
        storage_generation: generation,
        storage: None,
        ownership: None,
        cluster_generation: d.cluster_generation,
    })
}

/// Record the generation this start begins (see `checkpoint::generation`):
/// one past every recorded one, created only if no other process did.
fn begin_generation(s: &dyn crate::checkpoint::storage::Storage, pipeline: &Pipeline, d: &Decision) -> Result<Generation, RestoreError> {
    let last = generation::list(s).map_err(|e| RestoreError::Storage(e.to_string()))?.last().copied().unwrap_or(0);
    let record = generation::Record::new(&pipeline.name, last + 1, d.first_id, d.origin.clone());
    generation::create(s, &record)?;
    tracing::info!(generation = record.generation, first_checkpoint = d.first_id, url = %s.url(&generation::key(record.generation)), "Began a generation of the checkpoint storage.");
    Ok(record.generation)
}

/// Refuse a directory of another pipeline unless `force`. Reads only.
fn check_owner(layout: &Layout, pipeline: &str, force: bool) -> Result<Owner, RestoreError> {
    match disk::state_dir_owner(layout)? {
        None => Ok(Owner::Unclaimed),
        Some(found) if found == pipeline => Ok(Owner::Ours),
        Some(found) if force => Ok(Owner::TakeOver(found)),
        Some(found) => {
            let e = disk::StoreError::PipelineMismatch { path: layout.pipeline_file(), expected: pipeline.into(), found };
            Err(RestoreError::OtherPipeline(e.to_string()))
        }
    }
}

/// `--restore latest`: the newest valid checkpoint of the current lineage;
/// with none, where the lineage began (the beginning, or the same
/// checkpoint or savepoint again).
fn resolve_latest(
    pipeline: &Pipeline,
    layout: &Layout,
    storage: Option<&dyn crate::checkpoint::storage::Storage>,
    view: Option<&StoreView>,
) -> Result<Resolved, RestoreError> {
    // A record of another pipeline (before a take-over with --force) says
    // nothing about this one.
    let current = lineage::read(layout)?.filter(|l| l.pipeline == pipeline.name);
    let first_id = current.as_ref().map_or(0, |l| l.first_id);
    if let (Some(s), Some(view)) = (storage, view) {
        // The store's lineage, when it has one, is the truth: the state
        // directory may be new (another machine) or stale.
        if let Some(c) = generation::candidates(&view.records, &view.complete(), &pipeline.name) {
            if let Some(f) = remote::first_valid(s, layout, &pipeline.name, &c.checkpoints)? {
                return Ok(Resolved::Chosen(Chosen {
                    origin: PathBuf::from(f.url),
                    valid: f.valid,
                    download: f.download,
                    stored: f.stored,
                }));
            }
            return match c.origin {
                Origin::Restored { path, checkpoint_id, checkpoint_kind } => {
                    Ok(Resolved::Chosen(restore_again(pipeline, &pipeline.name, Path::new(&path), checkpoint_id, checkpoint_kind)?))
                }
                Origin::Set { paths } => {
                    tracing::info!(
                        savepoints = paths.len(),
                        "No checkpoint completed since this storage's lineage began with a savepoint set; restoring the set again."
                    );
                    Ok(Resolved::Set(paths.into_iter().map(PathBuf::from).collect()))
                }
                Origin::Beginning | Origin::Continues { .. } => {
                    tracing::info!("No complete checkpoint to restore; starting from the beginning.");
                    Ok(Resolved::Nothing)
                }
            };
        }
        let candidates = remote::without_generations(s, first_id)?;
        if let Some(f) = remote::first_valid(s, layout, &pipeline.name, &candidates)? {
            return Ok(Resolved::Chosen(Chosen { origin: PathBuf::from(f.url), valid: f.valid, download: f.download, stored: f.stored }));
        }
    } else {
        let validator = BundleStateValidator::new(layout.clone(), pipeline.name.clone());
        let skipped = match validator.find_latest_from(first_id) {
            Ok(latest) => {
                log_skipped(&latest.skipped);
                return Ok(Resolved::Chosen(Chosen::local(latest.checkpoint)));
            }
            Err(FindError::NoneValid { skipped, .. }) => skipped,
            Err(FindError::Store(e)) => return Err(e.into()),
        };
        log_skipped(&skipped);
    }
    if let Some(l) = current.as_ref().filter(|l| !l.set.is_empty()) {
        tracing::info!(
            savepoints = l.set.len(),
            "No checkpoint completed since this state directory was restored from a savepoint set; restoring the set again."
        );
        return Ok(Resolved::Set(l.set.clone()));
    }
    let Some((l, from)) = current.as_ref().and_then(|l| l.restored.as_ref().map(|r| (l, r))) else {
        tracing::info!("No complete checkpoint to restore; starting from the beginning.");
        return Ok(Resolved::Nothing);
    };
    let path = if is_url(&from.path) { from.path.clone() } else { l.restored_dir(layout).unwrap_or_default() };
    Ok(Resolved::Chosen(restore_again(pipeline, &l.pipeline, &path, from.checkpoint_id, from.kind)?))
}

/// The checkpoint or savepoint a lineage began with (a URL or a local
/// directory), when no checkpoint completed since: validated again, and
/// refused when it is gone or now holds something else.
fn restore_again(pipeline: &Pipeline, of: &str, path: &Path, checkpoint_id: CheckpointId, kind: Kind) -> Result<Chosen, RestoreError> {
    if is_url(path) {
        let options = pipeline.checkpoint.as_ref().and_then(|c| c.storage.as_ref()).map(|s| s.options.clone()).unwrap_or_default();
        let f = remote::by_url(&path.to_string_lossy(), &options)?;
        tracing::info!(checkpoint = checkpoint_id, url = %f.url, "No checkpoint completed since the lineage began with it; restoring it again.");
        return Ok(Chosen { origin: path.to_path_buf(), valid: f.valid, download: f.download, stored: None });
    }
    let kind = match kind {
        Kind::Checkpoint => "checkpoint",
        Kind::Savepoint => "savepoint",
    };
    let gone = |reason: String| RestoreError::LineageGone { id: checkpoint_id, kind, path: path.to_path_buf(), reason };
    let valid = validate::validate_dir(path).map_err(|e| gone(e.to_string()))?;
    if valid.metadata.checkpoint_id != checkpoint_id || valid.metadata.pipeline != of {
        let md = &valid.metadata;
        return Err(gone(format!("it now holds checkpoint {} of pipeline `{}`", md.checkpoint_id, md.pipeline)));
    }
    tracing::info!(checkpoint = checkpoint_id, dir = %path.display(), "No checkpoint completed since the lineage began with it; restoring it again.");
    Ok(Chosen::local(valid))
}

/// The checkpoint a start restores, and where it came from.
struct Chosen {
    /// Its directory, or its URL in the store (what the lineage records).
    origin: PathBuf,
    valid: ValidCheckpoint,
    download: Option<crate::checkpoint::publish::TempDir>,
    /// Which checkpoint of the pipeline's own store it is, if it is one.
    stored: Option<StoredId>,
}

impl Chosen {
    fn local(valid: ValidCheckpoint) -> Chosen {
        Chosen { origin: valid.dir.clone(), valid, download: None, stored: None }
    }
}

fn is_url(path: &Path) -> bool {
    path.to_str().is_some_and(crate::checkpoint::remote::is_url)
}

fn log_skipped(skipped: &[(CheckpointId, validate::Invalid)]) {
    for (id, why) in skipped {
        match why.is_unfinished() {
            // The normal leftover of a crash: the cleanup removes it (and says so).
            true => tracing::info!(checkpoint = id, "Skipping a checkpoint that was not finished (no _metadata); it is removed."),
            false => tracing::warn!(checkpoint = id, reason = %why, "Skipping an invalid checkpoint."),
        }
    }
}

/// Whether `r` is this directory's `chk-<id>` (not a savepoint, nor
/// another directory's checkpoint of the same id).
fn is_checkpoint_of(layout: &Layout, r: &RestoredState) -> bool {
    match (std::fs::canonicalize(&r.dir), std::fs::canonicalize(layout.checkpoint_dir(r.id))) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn is_empty_or_absent(dir: &Path) -> Result<bool, RestoreError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(source) => Err(disk::StoreError::Io { op: "list", path: dir.to_path_buf(), source }.into()),
    }
}

fn holds_only_the_lock(layout: &Layout) -> Result<bool, RestoreError> {
    let dir = layout.state_dir();
    let io = |source| disk::StoreError::Io { op: "list", path: dir.to_path_buf(), source };
    for entry in std::fs::read_dir(dir).map_err(io)? {
        if entry.map_err(io)?.file_name() != crate::checkpoint::layout::LOCK_FILE {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `--restore PATH`: a checkpoint directory or its `_metadata` file.
fn validate_path(pipeline: &Pipeline, path: &Path) -> Result<Chosen, RestoreError> {
    if let Some(url) = path.to_str().filter(|p| crate::checkpoint::remote::is_url(p)) {
        let options = pipeline.checkpoint.as_ref().and_then(|c| c.storage.as_ref()).map(|s| s.options.clone()).unwrap_or_default();
        let f = remote::by_url(url, &options)?;
        return Ok(Chosen { origin: PathBuf::from(&f.url), valid: f.valid, download: f.download, stored: None });
    }
    validate_local_path(path).map(Chosen::local)
}

fn validate_local_path(path: &Path) -> Result<ValidCheckpoint, RestoreError> {
    let dir = if path.file_name().is_some_and(|n| n == METADATA_FILE) { path.parent().unwrap_or(path) } else { path };
    validate::validate_dir(dir).map_err(|e| {
        let mut reason = e.reason.to_string();
        // A savepoint target (`--target`, `savepoint.dir`) named instead of one of its savepoints.
        if let Some(child) = a_savepoint_in(dir) {
            reason.push_str(&format!("; it holds savepoints: restore one of them, e.g. {}", child.display()));
        }
        RestoreError::Invalid { path: e.path.clone(), reason }
    })
}

/// The last (by name) child of `dir` with a `_metadata`, if `dir` has none itself.
fn a_savepoint_in(dir: &Path) -> Option<PathBuf> {
    if dir.join(METADATA_FILE).exists() {
        return None;
    }
    let entries = std::fs::read_dir(dir).ok()?;
    let visible = entries.flatten().filter(|e| !e.file_name().to_string_lossy().starts_with('.'));
    visible.map(|e| e.path()).filter(|p| p.join(METADATA_FILE).is_file()).max()
}

/// Refuse a checkpoint or savepoint of another pipeline or
/// `max_parallelism`, one holding state of operators the pipeline lacks
/// (unless allowed), or one whose operators were keyed differently. The
/// parallelism may differ: key groups and source positions are dealt anew.
fn check_compatible(pipeline: &Pipeline, md: &Metadata, policy: RestorePolicy, same_cluster: bool) -> Result<(), RestoreError> {
    let id = md.checkpoint_id;
    if md.pipeline != pipeline.name {
        return Err(RestoreError::Mismatch { id, what: "pipeline", found: md.pipeline.clone(), expected: pipeline.name.clone() });
    }
    if md.max_parallelism != pipeline.max_parallelism {
        let (found, expected) = (md.max_parallelism.to_string(), pipeline.max_parallelism.to_string());
        return Err(RestoreError::Mismatch { id, what: "max_parallelism", found, expected });
    }
    // A checkpoint holds the key groups and partitions of one instance of
    // one cluster shape: never restored alone into another (a rescale goes
    // through a savepoint set, checked by `check_set`).
    let expected = pipeline.cluster_record();
    let same_shape = match (&md.cluster, &expected) {
        (Some(found), Some(expected)) => found.same_shape(expected),
        (found, expected) => found.is_none() && expected.is_none(),
    };
    if same_cluster && !same_shape {
        let show =
            |c: &Option<crate::checkpoint::manifest::ClusterRecord>| c.as_ref().map_or("a single instance".to_string(), |c| c.to_string());
        return Err(RestoreError::Mismatch { id, what: "cluster", found: show(&md.cluster), expected: show(&expected) });
    }
    let dropped: Vec<String> = md.operators.iter().filter(|o| !pipeline.nodes.iter().any(|n| &n.name == *o)).cloned().collect();
    if !dropped.is_empty() {
        if !policy.allow_non_restored_state {
            return Err(RestoreError::NotRestored { id, operators: dropped });
        }
        tracing::warn!(checkpoint = id, operators = %dropped.join(", "), "Dropping the state of operators this pipeline does not have.");
    }
    let keys = pipeline.state_keys();
    for (op, found) in &md.keys {
        match keys.get(op) {
            Some(expected) if expected != found => {
                let (operator, found, expected) = (op.clone(), found.clone(), expected.clone());
                return Err(RestoreError::KeyChanged { id, operator, found, expected });
            }
            None if pipeline.nodes.iter().any(|n| &n.name == op) => {
                let (operator, found, expected) = (op.clone(), found.clone(), "without keyed state".to_string());
                return Err(RestoreError::KeyChanged { id, operator, found, expected });
            }
            _ => {}
        }
    }
    for n in pipeline.nodes.iter().filter(|n| !md.operators.contains(&n.name)) {
        tracing::info!(checkpoint = id, operator = %n.name, "New operator: it starts with empty state.");
    }
    Ok(())
}

/// A checkpoint with native RocksDB bundles restores only into RocksDB with
/// the same bundles (its DBs hold fixed key-group ranges of fixed subtasks).
fn check_native(pipeline: &Pipeline, valid: &ValidCheckpoint) -> Result<(), RestoreError> {
    if !valid.manifests.iter().any(|m| native_files(m).is_some()) {
        return Ok(());
    }
    let id = valid.metadata.checkpoint_id;
    if !Features::COMPILED.rocksdb {
        let reason = format!("restoring it {}", missing_reason(Feature::RocksDb));
        return Err(RestoreError::Native { id, reason });
    }
    if !matches!(pipeline.state.backend, Backend::RocksDb(_)) {
        return Err(RestoreError::Native { id, reason: "it restores only into `state.backend: rocksdb`".into() });
    }
    let (found, expected) = (valid.metadata.bundles.len(), pipeline.bundles() as usize);
    if found != expected || valid.metadata.parallelism != pipeline.parallelism {
        let reason = format!(
            "it was taken at parallelism {} in {found} bundles and restores only with the same parallelism and bundle size; this pipeline has parallelism {} in {expected} bundles",
            valid.metadata.parallelism, pipeline.parallelism
        );
        return Err(RestoreError::Native { id, reason });
    }
    let names: Vec<&String> = pipeline.nodes.iter().map(|n| &n.name).collect();
    if valid.metadata.operators.iter().collect::<Vec<_>>() != names {
        let reason = format!(
            "it holds operators {}, this pipeline has {}",
            valid.metadata.operators.join(", "),
            pipeline.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ")
        );
        return Err(RestoreError::Native { id, reason });
    }
    Ok(())
}

/// Read every task's snapshot of a valid checkpoint.
fn load(pipeline: &Pipeline, valid: ValidCheckpoint, policy: RestorePolicy) -> Result<RestoredState, RestoreError> {
    let started = std::time::Instant::now();
    check_compatible(pipeline, &valid.metadata, policy, true)?;
    check_native(pipeline, &valid)?;
    let md = &valid.metadata;
    let id = md.checkpoint_id;
    let tasks = read_tasks(&valid)?;
    check_mappable(md, &tasks, &Plan::new(pipeline.clone()))?;
    let same_parallelism = md.parallelism == pipeline.parallelism;
    let mut positions: HashMap<String, RestoredPositions> = HashMap::new();
    for (task, snap) in &tasks {
        if let Some((source, bytes)) = &snap.source_position {
            let p = positions.entry(source.clone()).or_insert_with(|| RestoredPositions {
                parallelism: md.parallelism,
                by_subtask: vec![Vec::new(); md.parallelism as usize],
            });
            if let Some(slot) = p.by_subtask.get_mut(task.subtask as usize) {
                *slot = bytes.clone();
            }
        }
    }
    if md.parallelism != pipeline.parallelism {
        tracing::info!(
            checkpoint = id,
            from = md.parallelism,
            to = pipeline.parallelism,
            "Rescaling: key groups and source positions are dealt anew."
        );
    }
    let in_flight: usize = tasks.values().flat_map(|t| t.output_channels.iter().chain(&t.input_channels)).map(|c| c.records.len()).sum();
    tracing::info!(checkpoint = id, dir = %valid.dir.display(), tasks = tasks.len(), in_flight, "Restoring from checkpoint.");
    Ok(RestoredState {
        id,
        dir: valid.dir,
        parallelism: md.parallelism,
        same_parallelism,
        tasks,
        positions,
        started,
        manifests: valid.manifests,
        _download: Vec::new(),
    })
}

/// Every task's snapshot of a valid checkpoint, by task.
fn read_tasks(valid: &ValidCheckpoint) -> Result<HashMap<TaskId, TaskSnapshot>, RestoreError> {
    let mut tasks = HashMap::new();
    for m in &valid.manifests {
        let bundle_dir = valid.dir.join(crate::checkpoint::layout::bundle_dir_name(m.bundle));
        for voter in &m.voters {
            let path = bundle_dir.join(task_snapshot::file_name(*voter));
            let bytes = disk::read_regular(&path).map_err(|e| RestoreError::Invalid { path: path.clone(), reason: e.to_string() })?;
            if let Some(reason) = task_snapshot::older_format(&bytes) {
                return Err(RestoreError::Invalid { path, reason });
            }
            let snap = TaskSnapshot::decode(&bytes).map_err(|e| RestoreError::Invalid { path: path.clone(), reason: e.to_string() })?;
            tasks.insert(*voter, snap);
        }
    }
    Ok(tasks)
}

/// Refuse a set that is not exactly one savepoint of each instance of one
/// cluster of this pipeline (reads nothing but the metadata).
fn check_set(pipeline: &Pipeline, set: &[(String, &Metadata)]) -> Result<(), RestoreError> {
    let refuse = |why: String| Err(RestoreError::Set(why));
    let Some((first_place, first)) = set.first() else { return refuse("no savepoint given".into()) };
    for (place, md) in set {
        if md.kind != Kind::Savepoint {
            return refuse(format!("{place} is a checkpoint: a rescale restores a stop-with-savepoint of every instance (`weir savepoint trigger P --instance I/N --stop`)"));
        }
        let Some(c) = &md.cluster else {
            return refuse(format!(
                "{place} was written by a single-instance run of pipeline `{}`, not by an instance of a cluster",
                md.pipeline
            ));
        };
        if md.pipeline != first.pipeline
            || md.cluster.as_ref().map(|c| (&c.identity, c.instances)) != first.cluster.as_ref().map(|c| (&c.identity, c.instances))
        {
            let show = |md: &Metadata| {
                format!("{} of pipeline `{}`", md.cluster.as_ref().map_or("a single instance".into(), |c| c.to_string()), md.pipeline)
            };
            return refuse(format!("it mixes pipelines or cluster shapes: {first_place} is {}, {place} is {}", show(first), show(md)));
        }
        if md.pipeline != pipeline.name {
            return refuse(format!("{place} is of pipeline `{}`, this is pipeline `{}`", md.pipeline, pipeline.name));
        }
        if let Some(expected) = pipeline.cluster_record().filter(|e| e.identity != c.identity) {
            return refuse(format!(
                "{place} has pipeline identity {}, this pipeline has {} (its name, `max_parallelism` and the keys of its repartitioned operators must stay as they were)",
                c.identity, expected.identity
            ));
        }
    }
    let n = first.cluster.as_ref().map_or(1, |c| c.instances);
    let mut by_index: Vec<Vec<&str>> = vec![Vec::new(); n as usize];
    for (place, md) in set {
        if let Some(slot) = md.cluster.as_ref().and_then(|c| by_index.get_mut(c.index as usize)) {
            slot.push(place);
        }
    }
    let m = pipeline.max_parallelism;
    for (i, places) in by_index.iter().enumerate() {
        match places.len() {
            1 => {}
            0 => {
                let kg = crate::types::key_group_range(i as u16, n, m);
                return refuse(format!(
                    "it is incomplete: no savepoint of instance {i} of {n}, so nothing holds its key groups {}..{} nor its Kafka partitions (give one savepoint of every instance 0..{n})",
                    kg.start, kg.end
                ));
            }
            _ => {
                return refuse(format!(
                    "it holds {} savepoints of instance {i} of {n} ({}): give exactly one",
                    places.len(),
                    places.join(", ")
                ))
            }
        }
    }
    let topics: Vec<String> = first
        .operators
        .iter()
        .filter_map(|o| o.strip_suffix(crate::plan::cluster::RECEIVE_SUFFIX))
        .map(|o| crate::plan::cluster::topic_name(&first.pipeline, o))
        .collect();
    if !pipeline.cluster.is_cluster() && !topics.is_empty() {
        // Reading the hand-off that waits in the topics into a process
        // without them is not built (docs/scaling.md, "Not built yet").
        return refuse(format!(
            "a cluster of {n} instances with repartition topics cannot be restored into one instance: records one instance handed over to another and the other had not read yet wait in {}, and one instance has no repartition topics, so they would be lost. Restore the set into 2 instances instead; both may run on this host with the same file: `weir run P --instance 0/2 --restore ...` and `weir run P --instance 1/2 --restore ...`, each with the whole set",
            topics.join(", ")
        ));
    }
    Ok(())
}

/// `--restore` of a set: one stop-with-savepoint of every old instance. This
/// instance takes, from every savepoint, the state of the key groups it
/// owns now and the offsets of every Kafka partition (sources and
/// repartition topics): each Kafka source keeps those of its own
/// partitions. Every check runs before anything is written. Also the
/// generation of the new cluster (`plan::cluster::generation`).
fn load_set(
    pipeline: &Pipeline,
    paths: &[PathBuf],
    policy: RestorePolicy,
) -> Result<(RestoredState, (PathBuf, CheckpointId, Kind), u64), RestoreError> {
    let started = std::time::Instant::now();
    let chosen: Vec<Chosen> = paths.iter().map(|p| validate_path(pipeline, p)).collect::<Result<_, _>>()?;
    let places: Vec<(String, &Metadata)> = chosen.iter().map(|c| (c.origin.display().to_string(), &c.valid.metadata)).collect();
    check_set(pipeline, &places)?;
    let set: Vec<&Metadata> = places.iter().map(|(_, md)| *md).collect();
    let generation = crate::plan::cluster::generation(pipeline, crate::plan::cluster::Start::Set(&set));
    let m = pipeline.max_parallelism;
    let keep = match pipeline.cluster_record() {
        Some(c) => crate::types::key_group_range(c.index, c.instances, m),
        None => 0..m,
    };
    let mut tasks = HashMap::new();
    let mut positions: HashMap<String, RestoredPositions> = HashMap::new();
    let mut parallelism = 0;
    for (n, c) in chosen.iter().enumerate() {
        let md = &c.valid.metadata;
        check_compatible(pipeline, md, policy, false)?;
        if c.valid.manifests.iter().any(|m| native_files(m).is_some()) {
            return Err(RestoreError::Set(format!("{} holds native RocksDB files; a savepoint never does", c.origin.display())));
        }
        parallelism = parallelism.max(md.parallelism);
        let invalid = |reason: String| RestoreError::Invalid { path: c.valid.dir.clone(), reason };
        for (task, mut snap) in read_tasks(&c.valid)? {
            if snap.output_channels.iter().chain(&snap.input_channels).any(|ch| !ch.records.is_empty()) {
                return Err(invalid("it holds in-flight records; a savepoint never does".into()));
            }
            for (_, bytes) in snap.operators.iter_mut() {
                *bytes = crate::state::snapshot::retain_key_groups(bytes, &keep).map_err(|e| invalid(format!("reading its state: {e}")))?;
            }
            if let Some((source, position)) = &snap.source_position {
                positions.entry(source.clone()).or_default().by_subtask.push(position.clone());
            }
            // Old tasks of different instances share ids: keep them apart.
            tasks.insert(TaskId { chain: ((n as u32) << 16) | (task.chain & 0xffff), subtask: task.subtask }, snap);
        }
    }
    // Kafka sources take the union of all positions (their own partitions).
    for p in positions.values_mut() {
        p.parallelism = p.by_subtask.len().min(u16::MAX as usize) as u16;
    }
    let first = &chosen[0].valid;
    let id = chosen.iter().map(|c| c.valid.metadata.checkpoint_id).max().unwrap_or(first.metadata.checkpoint_id);
    let old = first.metadata.cluster.as_ref().map_or(1, |c| c.instances);
    tracing::info!(
        savepoints = chosen.len(),
        from_instances = old,
        to_instances = pipeline.cluster.instances.max(1),
        key_groups = %format!("{}..{}", keep.start, keep.end),
        "Rescaling from a savepoint set: this instance's key groups and partitions are taken from every savepoint."
    );
    let origin = (chosen[0].origin.clone(), first.metadata.checkpoint_id, first.metadata.kind);
    let dir = first.dir.clone();
    let download = chosen.into_iter().filter_map(|c| c.download).collect();
    let r = RestoredState {
        id,
        dir,
        parallelism,
        same_parallelism: false,
        tasks,
        positions,
        started,
        manifests: Vec::new(),
        _download: download,
    };
    Ok((r, origin, generation))
}

/// Refuse a checkpoint whose state the new plan cannot take back whole.
///
/// Operator state, sink staging and source positions are matched by
/// operator name and subtask, so they find their owner whatever the
/// chaining. In-flight records (unaligned checkpoints) belong to a channel:
/// each one with records must exist in the new plan as it was (same
/// producer and consumer, a channel and not a chain, the same
/// partitioning, the same parallelism), or the restore is refused.
///
/// Pure: reads nothing and writes nothing, so it can run before the state
/// directory is touched.
pub fn check_mappable(md: &Metadata, tasks: &HashMap<TaskId, TaskSnapshot>, plan: &Plan) -> Result<(), RestoreError> {
    let id = md.checkpoint_id;
    let mut channels: Vec<&ChannelId> = tasks
        .values()
        .flat_map(|t| t.output_channels.iter().chain(&t.input_channels))
        .filter(|c| !c.records.is_empty())
        .map(|c| &c.channel)
        .collect();
    if channels.is_empty() {
        return Ok(());
    }
    if md.parallelism != plan.pipeline.parallelism {
        return Err(RestoreError::InFlight { id, parallelism: md.parallelism });
    }
    channels.sort();
    channels.dedup();
    for c in channels {
        if let Some(reason) = unmapped_because(c, plan) {
            return Err(RestoreError::InFlightUnmapped { id, channel: c.to_string(), reason });
        }
    }
    Ok(())
}

/// Why the channel `c` does not exist in `plan` (None: it does).
fn unmapped_because(c: &ChannelId, plan: &Plan) -> Option<String> {
    let nodes = &plan.pipeline.nodes;
    let Some(consumer) = nodes.iter().position(|n| n.name == c.consumer) else {
        return Some(format!("`{}` is gone", c.consumer));
    };
    let input = nodes[consumer].input.map(|i| nodes[i].name.as_str());
    // A join's right input: its own edge.
    if nodes[consumer].right.is_some_and(|r| nodes[r].name == c.producer) {
        return match plan.right_partitioning(consumer) {
            Some(p) if p == c.partitioning => None,
            p => Some(format!("the edge is now {}", p.unwrap_or_else(|| "none".into()))),
        };
    }
    if input != Some(c.producer.as_str()) {
        return Some(match input {
            Some(other) => format!("`{}` now reads `{other}`", c.consumer),
            None => format!("`{}` is now a source", c.consumer),
        });
    }
    if !plan.is_chain_head(consumer) {
        return Some(format!("`{}` is now chained to `{}` (no channel between them)", c.consumer, c.producer));
    }
    match plan.partitioning(consumer) {
        Some(p) if p == c.partitioning => None,
        p => Some(format!("the edge is now {}", p.unwrap_or_else(|| "none".into()))),
    }
}

/// Remove and return the items of `v` that match `f`, keeping the order of both.
fn take_where<T>(v: &mut Vec<T>, f: impl Fn(&T) -> bool) -> Vec<T> {
    let (taken, kept): (Vec<T>, Vec<T>) = std::mem::take(v).into_iter().partition(|t| f(t));
    *v = kept;
    taken
}

impl RestoredState {
    /// What the new task `task` restores: `chain` are the names of the
    /// nodes chained in it, head (the source, if it has one) to tail;
    /// `commits` the operators it runs besides them (dead-letter commits).
    ///
    /// In-flight records belong to the chain's ends, never to an operator
    /// run after the tail: the tail produces every output channel.
    pub fn for_task(
        &mut self,
        task: TaskId,
        chain: &[String],
        commits: &[String],
        source: Option<&str>,
    ) -> (TaskSnapshot, Option<RestoredPositions>) {
        let positions = source.and_then(|s| self.positions.get(s).cloned());
        let (head, tail) = (chain.first(), chain.last());
        let mut snap = TaskSnapshot::default();
        let mut lowest: Option<Millis> = None;
        for (old_task, old) in self.tasks.iter_mut() {
            let holds = |name: &String| chain.contains(name) || commits.contains(name);
            let mut any = old.source_position.as_ref().is_some_and(|(s, _)| holds(s));
            if self.same_parallelism {
                // Each operator subtask takes back its own state (moved: it
                // has exactly one owner), whichever old task ran it.
                if old_task.subtask != task.subtask {
                    continue;
                }
                let mine = take_where(&mut old.operators, |(name, _)| holds(name));
                any |= !mine.is_empty();
                snap.operators.extend(mine);
                // In-flight records go to the task at their channel's end:
                // output to the producer's, input to the consumer's
                // (`check_mappable` made sure those are chain ends).
                snap.output_channels.extend(take_where(&mut old.output_channels, |c| Some(&c.channel.producer) == tail));
                snap.input_channels.extend(take_where(&mut old.input_channels, |c| Some(&c.channel.consumer) == head));
            } else {
                // Another parallelism: every old snapshot of these
                // operators, each filtered to the new task's key groups
                // when it is read.
                for (name, state) in old.operators.iter().filter(|(name, _)| holds(name)) {
                    snap.operators.push((name.clone(), state.clone()));
                    any = true;
                }
            }
            // The lowest watermark of the old subtasks that ran these
            // operators: nothing they had not yet seen is taken as late.
            if any {
                lowest = Some(lowest.map_or(old.watermark, |w| w.min(old.watermark)));
            }
        }
        snap.watermark = lowest.unwrap_or(crate::types::MIN_WATERMARK);
        (snap, positions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::task_snapshot::ChannelState;
    use crate::operators::dead_letter::commit_operator_name;
    use crate::types::Kind;
    use crate::types::{Record, Value};

    /// gen → unique (hash) → s1, s2; all at parallelism 2.
    const PIPELINE: &str = r#"
name: p
parallelism: 2
sources:
  - {name: gen, type: datagen, rows: 10, fields: {id: {kind: sequence}}}
operators:
  - {name: unique, type: dedup, input: gen, key: [id]}
sinks:
  - {name: s1, type: blackhole, input: unique}
  - {name: s2, type: blackhole, input: unique}
"#;

    fn plan(yaml: &str, overrides: &[&str]) -> Plan {
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        Plan::new(crate::config::load_str(yaml, "t.yaml", &o).expect("valid pipeline"))
    }

    fn metadata(plan: &Plan) -> Metadata {
        Metadata {
            version: crate::checkpoint::manifest::FORMAT_VERSION,
            pipeline: plan.pipeline.name.clone(),
            checkpoint_id: 7,
            kind: Kind::Checkpoint,
            created_ms: 0,
            parallelism: plan.pipeline.parallelism,
            max_parallelism: plan.pipeline.max_parallelism,
            bundles: vec![0],
            operators: plan.pipeline.nodes.iter().map(|n| n.name.clone()).collect(),
            keys: plan.pipeline.state_keys(),
            cluster: plan.pipeline.cluster_record(),
            on_sigterm: false,
            crc32c: 0,
        }
    }

    fn channel(producer: &str, consumer: &str, to: u16, partitioning: &str) -> ChannelId {
        ChannelId {
            producer: producer.into(),
            producer_subtask: 0,
            consumer: consumer.into(),
            consumer_subtask: to,
            partitioning: partitioning.into(),
        }
    }

    fn state(c: ChannelId, n: usize) -> ChannelState {
        ChannelState { channel: c, records: (0..n as i64).map(|i| Record::new(vec![Value::Int(i)], "{}".into(), None)).collect() }
    }

    /// One old task holding output channel state on `c`.
    fn tasks_with(c: ChannelId, n: usize) -> HashMap<TaskId, TaskSnapshot> {
        let snap = TaskSnapshot { output_channels: vec![state(c, n)], ..TaskSnapshot::default() };
        HashMap::from([(TaskId { chain: 1, subtask: 0 }, snap)])
    }

    #[test]
    fn in_flight_state_maps_onto_the_same_channels() {
        let old = plan(PIPELINE, &[]);
        let md = metadata(&old);
        assert_eq!(old.partitioning(1).as_deref(), Some("hash(id)"));
        for c in [channel("gen", "unique", 1, "hash(id)"), channel("unique", "s1", 0, "forward")] {
            check_mappable(&md, &tasks_with(c.clone(), 3), &old).unwrap_or_else(|e| panic!("{c}: {e}"));
        }
        // An unrelated edit keeps every channel of the checkpoint.
        let added = plan(PIPELINE, &["sinks.s2.type=blackhole", "sinks.s2.rate_limit=10"]);
        check_mappable(&md, &tasks_with(channel("unique", "s1", 0, "forward"), 3), &added).unwrap();
    }

    #[test]
    fn in_flight_state_of_a_changed_channel_is_refused() {
        let old = plan(PIPELINE, &[]);
        let md = metadata(&old);
        // s2 reads gen: unique → s2 is gone, and s1, unique's only consumer
        // now, is chained to it (no channel).
        let moved = plan(PIPELINE, &["sinks.s2.input=gen"]);
        let cases = [
            (channel("unique", "s2", 0, "forward"), "`s2` now reads `gen`"),
            (channel("unique", "s1", 1, "forward"), "`s1` is now chained to `unique`"),
        ];
        for (c, reason) in cases {
            match check_mappable(&md, &tasks_with(c.clone(), 2), &moved) {
                Err(RestoreError::InFlightUnmapped { id: 7, channel, reason: why }) => {
                    assert_eq!(channel, c.to_string());
                    assert!(why.contains(reason), "{c}: {why}");
                }
                other => panic!("{c}: {other:?}"),
            }
        }
        // The same channels without records map trivially.
        check_mappable(&md, &tasks_with(channel("unique", "s2", 0, "forward"), 0), &moved).unwrap();
        // A consumer that is gone, another partitioning, another parallelism.
        let c = channel("unique", "gone", 0, "forward");
        assert!(matches!(check_mappable(&md, &tasks_with(c, 1), &old), Err(RestoreError::InFlightUnmapped { .. })));
        let c = channel("gen", "unique", 0, "forward");
        let e = check_mappable(&md, &tasks_with(c, 1), &old).unwrap_err();
        assert!(e.to_string().contains("the edge is now hash(id)"), "{e}");
        let rescaled = plan(PIPELINE, &["parallelism=3"]);
        let c = channel("gen", "unique", 0, "hash(id)");
        assert!(matches!(check_mappable(&md, &tasks_with(c, 1), &rescaled), Err(RestoreError::InFlight { parallelism: 2, .. })));
    }

    /// The old tasks of PIPELINE: gen, unique, s1, s2 (chains 0..4), two
    /// subtasks each, every operator's state tagged with its subtask.
    fn old_tasks() -> HashMap<TaskId, TaskSnapshot> {
        let mut tasks = HashMap::new();
        for (chain, name) in ["gen", "unique", "s1", "s2"].into_iter().enumerate() {
            for subtask in 0..2u16 {
                let mut snap = TaskSnapshot { watermark: 100 + chain as i64, ..TaskSnapshot::default() };
                match name {
                    "gen" => snap.source_position = Some((name.into(), vec![subtask as u8])),
                    _ => snap.operators.push((name.into(), vec![subtask as u8])),
                }
                if name == "unique" {
                    let mut c = channel("unique", "s1", subtask, "forward");
                    c.producer_subtask = subtask;
                    snap.output_channels.push(state(c, 2));
                }
                tasks.insert(TaskId { chain: chain as u32, subtask }, snap);
            }
        }
        tasks
    }

    #[test]
    fn state_is_matched_by_operator_and_subtask_whatever_the_chaining() {
        let restored = |tasks| RestoredState {
            id: 7,
            dir: PathBuf::new(),
            parallelism: 2,
            same_parallelism: true,
            tasks,
            positions: HashMap::new(),
            started: std::time::Instant::now(),
            manifests: Vec::new(),
            _download: Vec::new(),
        };
        // New chaining (s2 reads gen): [gen], [unique, s1], [s2].
        let mut r = restored(old_tasks());
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (mut snap, _) = r.for_task(TaskId { chain: 1, subtask: 1 }, &names(&["unique", "s1"]), &[], None);
        snap.operators.sort();
        assert_eq!(snap.operators, vec![("s1".to_string(), vec![1]), ("unique".to_string(), vec![1])]);
        assert_eq!(snap.watermark, 101, "the lowest of the old tasks that ran these operators");
        assert!(snap.output_channels.is_empty(), "unique is no longer a chain end");
        let (snap, _) = r.for_task(TaskId { chain: 2, subtask: 0 }, &names(&["s2"]), &[], None);
        assert_eq!(snap.operators, vec![("s2".to_string(), vec![0])]);
        // Same chaining: in-flight records go to the producer's task, once.
        let mut r = restored(old_tasks());
        let (snap, _) = r.for_task(TaskId { chain: 1, subtask: 0 }, &names(&["unique"]), &[], None);
        assert_eq!(snap.output_channels.len(), 1);
        assert_eq!(snap.output_channels[0].channel.consumer_subtask, 0);
        let (again, _) = r.for_task(TaskId { chain: 1, subtask: 0 }, &names(&["unique"]), &[], None);
        assert!(again.output_channels.is_empty() && again.operators.is_empty(), "state is handed out once");
    }

    /// The savepoint set of a rescale: exactly one stop-with-savepoint of
    /// every instance of one cluster of this pipeline, else refused.
    #[test]
    fn a_savepoint_set_must_be_complete_and_of_one_cluster() {
        let yaml = r#"
name: p
max_parallelism: 12
checkpoint: {interval: 1s}
cluster: {instances: 3, index: 0}
sources:
  - {name: orders, type: kafka, brokers: "b:9092", topics: [in]}
operators:
  - {name: unique, type: dedup, input: orders, key: [id]}
sinks:
  - {name: out, type: kafka, input: unique, brokers: "b:9092", topic: out}
"#;
        let new = crate::plan::cluster::lay_out(crate::config::load_str(yaml, "t.yaml", &[]).unwrap()).unwrap();
        let old =
            crate::plan::cluster::lay_out(crate::config::load_str(&yaml.replace("instances: 3", "instances: 2"), "t.yaml", &[]).unwrap())
                .unwrap();
        let sp = |i: u16| {
            let mut md = metadata(&Plan::new(old.clone()));
            md.kind = Kind::Savepoint;
            md.cluster.as_mut().unwrap().index = i;
            (format!("sp{i}"), md)
        };
        let check = |set: Vec<(String, Metadata)>, into: &Pipeline| {
            let refs: Vec<(String, &Metadata)> = set.iter().map(|(p, m)| (p.clone(), m)).collect();
            check_set(into, &refs).err().map(|e| e.to_string())
        };
        assert_eq!(check(vec![sp(0), sp(1)], &new), None, "2 -> 3");
        assert_eq!(check(vec![sp(1), sp(0)], &new), None, "in any order");
        let e = check(vec![sp(1)], &new).unwrap();
        assert!(e.contains("it is incomplete: no savepoint of instance 0 of 2, so nothing holds its key groups 0..6"), "{e}");
        let e = check(vec![sp(0), sp(1), sp(1)], &new).unwrap();
        assert!(e.contains("it holds 2 savepoints of instance 1 of 2 (sp1, sp1)"), "{e}");
        let mut other = sp(1);
        other.1.pipeline = "q".into();
        let e = check(vec![sp(0), other], &new).unwrap();
        assert!(e.contains("it mixes pipelines or cluster shapes"), "{e}");
        let mut shape = sp(1);
        shape.1.cluster.as_mut().unwrap().instances = 3;
        assert!(check(vec![sp(0), shape], &new).unwrap().contains("it mixes pipelines or cluster shapes"));
        let mut rekeyed = new.clone();
        rekeyed.cluster.identity = "0000000000000001".into();
        assert!(check(vec![sp(0), sp(1)], &rekeyed).unwrap().contains("has pipeline identity"));
        let mut chk = sp(1);
        chk.1.kind = Kind::Checkpoint;
        assert!(check(vec![sp(0), chk], &new).unwrap().contains("sp1 is a checkpoint"));
        let mut single = sp(1);
        single.1.cluster = None;
        assert!(check(vec![sp(0), single], &new).unwrap().contains("single-instance run"));
        // One instance would not read what waits in the repartition topics.
        let one =
            crate::plan::cluster::lay_out(crate::config::load_str(&yaml.replace("instances: 3", "instances: 1"), "t.yaml", &[]).unwrap())
                .unwrap();
        assert!(check(vec![sp(0), sp(1)], &one).unwrap().contains("cannot be restored into one instance"));
    }

    /// A source with `on_error: dead_letter` runs the dead letter's commit
    /// operator after its chain: the records its barrier overtook still go
    /// back to its task (the channel's producer is the source, not the
    /// last operator of the task).
    #[test]
    fn in_flight_records_of_a_source_with_a_dead_letter_go_back_to_it() {
        let mut old = old_tasks();
        let gen = old.get_mut(&TaskId { chain: 0, subtask: 1 }).unwrap();
        let mut c = channel("gen", "unique", 0, "hash(id)");
        c.producer_subtask = 1;
        gen.output_channels.push(state(c, 3));
        gen.operators.push((commit_operator_name("gen"), vec![9]));
        let mut r = RestoredState {
            id: 7,
            dir: PathBuf::new(),
            parallelism: 2,
            same_parallelism: true,
            tasks: old,
            positions: HashMap::new(),
            started: std::time::Instant::now(),
            manifests: Vec::new(),
            _download: Vec::new(),
        };
        let (chain, commits) = (["gen".to_string()], [commit_operator_name("gen")]);
        let (snap, _) = r.for_task(TaskId { chain: 0, subtask: 1 }, &chain, &commits, Some("gen"));
        assert_eq!(snap.operators, vec![(commit_operator_name("gen"), vec![9])]);
        assert_eq!(snap.output_channels.len(), 1, "the overtaken records of gen[1]: {:?}", snap.output_channels);
        assert_eq!(snap.output_channels[0].records.len(), 3);
    }
}

//! Choosing and loading the checkpoint a run starts from, and preparing the
//! state directory: claim it for this pipeline, pick `latest` or the given
//! path (validated by `BundleStateValidator`), remove unfinished checkpoints
//! and orphaned bundle directories, and find the next checkpoint id.
//!
//! An explicit path that fails validation changes nothing on disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::snapshot::{self, TaskSnapshot};
use crate::checkpoint::layout::{Layout, METADATA_FILE};
use crate::checkpoint::manifest::{BundleManifest, FileEntry, Metadata, TaskId};
use crate::checkpoint::validate::{self, BundleStateValidator, FindError, ValidCheckpoint};
use crate::checkpoint::BundleId;
use crate::checkpoint::{store, CheckpointId};
use crate::config::Backend;
use crate::config::Pipeline;
use crate::operators::source::RestoredPositions;
use crate::state::rocks::native::DB_SUBDIR;
use crate::types::Millis;

/// What `--restore` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreFrom {
    Latest,
    Path(PathBuf),
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
    #[error("checkpoint {id} is unaligned and holds in-flight records of the old layout; it can only be restored at parallelism {parallelism} with the same operators (take a savepoint to rescale)")]
    InFlight { id: CheckpointId, parallelism: u16 },
    #[error("checkpoint {id} is an incremental RocksDB checkpoint: {reason}; to change that, restore it as it was taken, trigger a savepoint (always canonical) and restore the savepoint")]
    Native { id: CheckpointId, reason: String },
    #[error("checkpoint storage: {0}")]
    Store(#[from] store::StoreError),
}

/// Where a run starts from, and where its checkpoints continue.
pub struct StartPoint {
    pub restored: Option<RestoredState>,
    pub first_id: CheckpointId,
    /// Completed checkpoints on disk, oldest first.
    pub retained: Vec<CheckpointId>,
}

pub struct RestoredState {
    pub id: CheckpointId,
    pub dir: PathBuf,
    /// The parallelism the checkpoint was taken at.
    pub parallelism: u16,
    /// Same parallelism and operators as the checkpoint: each task takes
    /// back its own snapshot, in-flight records included.
    same_layout: bool,
    tasks: HashMap<TaskId, TaskSnapshot>,
    /// Each source's positions by old subtask, by source name.
    positions: HashMap<String, RestoredPositions>,
    /// When loading began.
    pub started: std::time::Instant,
    /// The bundle MANIFESTs, in bundle order.
    pub manifests: Vec<BundleManifest>,
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

/// Prepare the state directory and resolve `restore`.
pub fn prepare(pipeline: &Pipeline, restore: Option<&RestoreFrom>, policy: RestorePolicy) -> Result<StartPoint, RestoreError> {
    let force = policy.force;
    let layout = Layout::new(&pipeline.state.dir);
    // An explicit path is validated before anything on disk is touched.
    let explicit = match restore {
        Some(RestoreFrom::Path(p)) => {
            let valid = validate_path(p)?;
            check_compatible(pipeline, &valid.metadata, policy)?;
            check_native(pipeline, &valid)?;
            Some(valid)
        }
        _ => None,
    };
    claim(&layout, &pipeline.name, force)?;
    let validator = BundleStateValidator::new(layout.clone(), pipeline.name.clone());
    let chosen = match (restore, explicit) {
        (_, Some(valid)) => Some(valid),
        (Some(RestoreFrom::Latest), None) => match validator.find_latest() {
            Ok(latest) => {
                for (id, why) in &latest.skipped {
                    tracing::warn!(checkpoint = id, reason = %why, "Skipping an invalid checkpoint.");
                }
                Some(latest.checkpoint)
            }
            Err(FindError::NoneValid { skipped, .. }) => {
                for (id, why) in &skipped {
                    tracing::warn!(checkpoint = id, reason = %why, "Skipping an invalid checkpoint.");
                }
                tracing::info!("No complete checkpoint to restore; starting from the beginning.");
                None
            }
            Err(FindError::Store(e)) => return Err(e.into()),
        },
        (_, None) => None,
    };
    let ids = store::list_checkpoint_ids(&layout)?;
    let first_id = ids.iter().max().map_or(1, |m| m + 1).max(chosen.as_ref().map_or(1, |c| c.metadata.checkpoint_id + 1));
    let keep: Vec<CheckpointId> = chosen.iter().map(|c| c.metadata.checkpoint_id).filter(|id| ids.contains(id)).collect();
    let report = validator.cleanup(&keep)?;
    for id in &report.removed_checkpoints {
        tracing::info!(checkpoint = id, "Removed an unfinished checkpoint.");
    }
    for dir in &report.removed_bundle_dirs {
        tracing::info!(dir = %dir.display(), "Removed an orphaned bundle directory.");
    }
    match crate::checkpoint::shared::collect_garbage(&layout, true) {
        Ok(removed) if !removed.is_empty() => tracing::info!(files = removed.len(), "Removed shared files no checkpoint references."),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "Cannot clean up shared checkpoint files; keeping them all."),
    }
    let mut retained = store::list_checkpoint_ids(&layout)?;
    retained.sort_unstable();
    let restored = match chosen {
        Some(valid) => Some(load(pipeline, valid, policy)?),
        None => None,
    };
    Ok(StartPoint { restored, first_id, retained })
}

fn claim(layout: &Layout, pipeline: &str, force: bool) -> Result<(), RestoreError> {
    match store::claim_state_dir(layout, pipeline) {
        Ok(()) => Ok(()),
        Err(store::StoreError::PipelineMismatch { .. }) if force => {
            tracing::warn!(dir = %layout.state_dir().display(), "Taking over a state directory of another pipeline (--force).");
            std::fs::write(layout.pipeline_file(), format!("{pipeline}\n")).map_err(|source| store::StoreError::Io {
                op: "write",
                path: layout.pipeline_file(),
                source,
            })?;
            Ok(())
        }
        Err(e @ store::StoreError::PipelineMismatch { .. }) => Err(RestoreError::OtherPipeline(e.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// `--restore PATH`: a checkpoint directory or its `_metadata` file.
fn validate_path(path: &Path) -> Result<ValidCheckpoint, RestoreError> {
    let dir = if path.file_name().is_some_and(|n| n == METADATA_FILE) { path.parent().unwrap_or(path) } else { path };
    validate::validate_dir(dir).map_err(|e| RestoreError::Invalid { path: e.path.clone(), reason: e.reason.to_string() })
}

/// Refuse a checkpoint or savepoint of another pipeline or
/// `max_parallelism`, one holding state of operators the pipeline lacks
/// (unless allowed), or one whose operators were keyed differently. The
/// parallelism may differ: key groups and source positions are dealt anew.
fn check_compatible(pipeline: &Pipeline, md: &Metadata, policy: RestorePolicy) -> Result<(), RestoreError> {
    let id = md.checkpoint_id;
    if md.pipeline != pipeline.name {
        return Err(RestoreError::Mismatch { id, what: "pipeline", found: md.pipeline.clone(), expected: pipeline.name.clone() });
    }
    if md.max_parallelism != pipeline.max_parallelism {
        let (found, expected) = (md.max_parallelism.to_string(), pipeline.max_parallelism.to_string());
        return Err(RestoreError::Mismatch { id, what: "max_parallelism", found, expected });
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
    check_compatible(pipeline, &valid.metadata, policy)?;
    check_native(pipeline, &valid)?;
    let md = &valid.metadata;
    let id = md.checkpoint_id;
    let mut tasks = HashMap::new();
    for m in &valid.manifests {
        let bundle_dir = valid.dir.join(crate::checkpoint::layout::bundle_dir_name(m.bundle));
        for voter in &m.voters {
            let path = bundle_dir.join(snapshot::file_name(*voter));
            let bytes = std::fs::read(&path).map_err(|e| RestoreError::Invalid { path: path.clone(), reason: e.to_string() })?;
            let snap = TaskSnapshot::decode(&bytes).map_err(|e| RestoreError::Invalid { path: path.clone(), reason: e.to_string() })?;
            tasks.insert(*voter, snap);
        }
    }
    let names: Vec<String> = pipeline.nodes.iter().map(|n| n.name.clone()).collect();
    let same_layout = md.parallelism == pipeline.parallelism && md.operators == names;
    let in_flight = tasks.values().any(|t: &TaskSnapshot| !t.output_records.is_empty() || !t.input_records.is_empty());
    if !same_layout && in_flight {
        return Err(RestoreError::InFlight { id, parallelism: md.parallelism });
    }
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
    tracing::info!(checkpoint = id, dir = %valid.dir.display(), tasks = tasks.len(), "Restoring from checkpoint.");
    let parallelism = md.parallelism;
    Ok(RestoredState { id, dir: valid.dir, parallelism, same_layout, tasks, positions, started, manifests: valid.manifests })
}

/// Times the restore of all tasks: from loading the checkpoint until the
/// last task has its state back.
#[derive(Debug)]
pub struct RestoreClock {
    id: CheckpointId,
    started: std::time::Instant,
    remaining: std::sync::atomic::AtomicUsize,
}

impl RestoreClock {
    pub fn new(id: CheckpointId, started: std::time::Instant, tasks: usize) -> Self {
        RestoreClock { id, started, remaining: tasks.into() }
    }

    pub fn task_done(&self) {
        if self.remaining.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            let ms = self.started.elapsed().as_millis() as u64;
            tracing::info!(checkpoint = self.id, restore_ms = ms, "State restored.");
        }
    }
}

impl RestoredState {
    /// What the new task `task` restores: `nodes` are the names of the
    /// operators chained in it, the source first if it has one.
    pub fn for_task(&mut self, task: TaskId, nodes: &[String], source: Option<&str>) -> (TaskSnapshot, Option<RestoredPositions>) {
        let positions = source.and_then(|s| self.positions.get(s).cloned());
        if self.same_layout {
            return (self.tasks.remove(&task).unwrap_or_default(), positions);
        }
        // Another layout: every old snapshot of these operators, each
        // filtered to the new task's key groups when it is read.
        let mut snap = TaskSnapshot::default();
        let mut lowest: Option<Millis> = None;
        for old in self.tasks.values() {
            let holds = |name: &String| nodes.contains(name);
            let mine = old.operators.iter().filter(|(name, _)| holds(name));
            let mut any = old.source_position.as_ref().is_some_and(|(s, _)| holds(s));
            for (name, state) in mine {
                snap.operators.push((name.clone(), state.clone()));
                any = true;
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

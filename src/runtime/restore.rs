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
use crate::state::rocks::native::DB_SUBDIR;

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
    #[error("checkpoint {id} was taken at {what} {found}, this pipeline has {expected}; restoring with a different {what} is not supported yet: run with the same {what}")]
    Mismatch { id: CheckpointId, what: &'static str, found: String, expected: String },
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
    pub tasks: HashMap<TaskId, TaskSnapshot>,
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

/// Prepare the state directory and resolve `restore`.
pub fn prepare(pipeline: &Pipeline, restore: Option<&RestoreFrom>, force: bool) -> Result<StartPoint, RestoreError> {
    let layout = Layout::new(&pipeline.state.dir);
    // An explicit path is validated before anything on disk is touched.
    let explicit = match restore {
        Some(RestoreFrom::Path(p)) => {
            let valid = validate_path(p)?;
            check_compatible(pipeline, &valid.metadata)?;
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
        Some(valid) => Some(load(pipeline, valid)?),
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

/// Refuse a checkpoint or savepoint of another pipeline, parallelism,
/// `max_parallelism` or operator list.
fn check_compatible(pipeline: &Pipeline, md: &Metadata) -> Result<(), RestoreError> {
    let id = md.checkpoint_id;
    if md.pipeline != pipeline.name {
        return Err(RestoreError::Mismatch { id, what: "pipeline", found: md.pipeline.clone(), expected: pipeline.name.clone() });
    }
    if md.parallelism != pipeline.parallelism {
        let (found, expected) = (md.parallelism.to_string(), pipeline.parallelism.to_string());
        return Err(RestoreError::Mismatch { id, what: "parallelism", found, expected });
    }
    if md.max_parallelism != pipeline.max_parallelism {
        let (found, expected) = (md.max_parallelism.to_string(), pipeline.max_parallelism.to_string());
        return Err(RestoreError::Mismatch { id, what: "max_parallelism", found, expected });
    }
    let names: Vec<String> = pipeline.nodes.iter().map(|n| n.name.clone()).collect();
    if md.operators != names {
        let (found, expected) = (md.operators.join(", "), names.join(", "));
        return Err(RestoreError::Mismatch { id, what: "operators", found, expected });
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
    if found != expected {
        let reason = format!(
            "it has {found} bundles and restores only with the same parallelism and bundle size; this pipeline has {expected} bundles"
        );
        return Err(RestoreError::Native { id, reason });
    }
    Ok(())
}

/// Read every task's snapshot of a valid checkpoint.
fn load(pipeline: &Pipeline, valid: ValidCheckpoint) -> Result<RestoredState, RestoreError> {
    check_compatible(pipeline, &valid.metadata)?;
    check_native(pipeline, &valid)?;
    let id = valid.metadata.checkpoint_id;
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
    tracing::info!(checkpoint = id, dir = %valid.dir.display(), tasks = tasks.len(), "Restoring from checkpoint.");
    Ok(RestoredState { id, dir: valid.dir, tasks, manifests: valid.manifests })
}

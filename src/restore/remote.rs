//! Restoring from checkpoints and savepoints on object storage
//! (`checkpoint.storage: s3://...`, `--restore s3://...`).
//!
//! The store is the truth: `latest` lists the `_metadata` objects there
//! (S3 lists are strongly consistent), newest first. Each candidate is
//! validated as a local checkpoint is, on a local copy: the one the run
//! that wrote it left in `checkpoints/chk-n/` when its `_metadata` and
//! MANIFESTs are the stored ones byte for byte (local recovery), else a
//! download into a temp directory that goes when the restore is done. A
//! refusal names the object (its URL), and nothing in the store or the
//! state directory has changed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::RestoreError;
use crate::checkpoint::generation::StoredId;
use crate::checkpoint::layout::{Layout, METADATA_FILE};
use crate::checkpoint::publish::{self, TempDir};
use crate::checkpoint::remote::{self, ObjectStorage};
use crate::checkpoint::storage::{Storage, StorageError};
use crate::checkpoint::validate::{self, Invalid, ValidCheckpoint};
use crate::config::RemoteStorage;
use crate::types::CheckpointId;

/// A validated checkpoint and the download holding it (None: the local copy).
pub struct Fetched {
    pub valid: ValidCheckpoint,
    /// Where it came from: the URL of its directory in the store.
    pub url: String,
    pub download: Option<TempDir>,
    /// Which checkpoint of the pipeline's own store it is (None: one given by URL).
    pub stored: Option<StoredId>,
}

/// Open the checkpoint storage of a pipeline.
pub fn open(spec: &RemoteStorage) -> Result<Arc<dyn Storage>, RestoreError> {
    let s = ObjectStorage::open(&spec.url, &spec.options).map_err(RestoreError::Storage)?;
    Ok(Arc::new(s))
}

/// A store that could not be read is unreachable (exit 1); the local disk
/// under a download is the machine's (exit 2, as a state directory).
fn storage_error(e: StorageError) -> RestoreError {
    match e {
        StorageError::Local(_) => RestoreError::Storage(e.to_string()),
        e => RestoreError::Unreachable(e.to_string()),
    }
}

/// The first of `candidates` (stored checkpoints, best first) that
/// validates; the ones before it are logged with the reason. A store that
/// cannot be read fails the start (falling back past a checkpoint that
/// only could not be read would restore older state).
pub fn first_valid(
    storage: &dyn Storage,
    layout: &Layout,
    pipeline: &str,
    candidates: &[StoredId],
) -> Result<Option<Fetched>, RestoreError> {
    for &stored in candidates {
        match checkpoint(storage, layout, pipeline, stored)? {
            Ok(fetched) => return Ok(Some(fetched)),
            Err(why) => tracing::warn!(checkpoint = %stored, reason = %why, "Skipping an invalid checkpoint."),
        }
    }
    Ok(None)
}

/// The complete checkpoints of a store written before generations, with
/// an id of at least `first_id` (the local lineage's), newest first.
pub fn without_generations(storage: &dyn Storage, first_id: CheckpointId) -> Result<Vec<StoredId>, RestoreError> {
    let complete = publish::checkpoints(storage).map_err(storage_error)?;
    Ok(complete.into_iter().rev().filter(|&(s, done)| done && s.id >= first_id).map(|(s, _)| s).collect())
}

/// Checkpoint `stored` of the store, validated (Err inside: why it is invalid).
fn checkpoint(storage: &dyn Storage, layout: &Layout, pipeline: &str, stored: StoredId) -> Result<Result<Fetched, Invalid>, RestoreError> {
    let (id, prefix) = (stored.id, stored.name());
    let url = storage.url(&prefix);
    let local = layout.checkpoint_dir(id);
    if publish::local_copy_matches(storage, &prefix, &local).map_err(storage_error)? {
        if let Ok(valid) = validate::validate_dir(&local) {
            tracing::info!(checkpoint = id, dir = %local.display(), "Local copy matches the store; restoring from it (local recovery).");
            return Ok(check_id(valid, id, pipeline, &url, &local).map(|valid| Fetched {
                valid,
                url,
                download: None,
                stored: Some(stored),
            }));
        }
    }
    let (valid, download) = match download(storage, &prefix)? {
        (Ok(valid), tmp) => (valid, tmp),
        (Err(why), _) => return Ok(Err(why)),
    };
    tracing::info!(checkpoint = id, url = %url, "Downloaded the checkpoint from the store.");
    let dir = valid.dir.clone();
    Ok(check_id(valid, id, pipeline, &url, &dir).map(|valid| Fetched { valid, url, download: Some(download), stored: Some(stored) }))
}

fn check_id(valid: ValidCheckpoint, id: CheckpointId, pipeline: &str, url: &str, _dir: &Path) -> Result<ValidCheckpoint, Invalid> {
    let path = PathBuf::from(format!("{url}/{METADATA_FILE}"));
    let md = &valid.metadata;
    if md.checkpoint_id != id {
        return Err(Invalid { path, reason: validate::Reason::WrongCheckpointId { expected: id, found: md.checkpoint_id } });
    }
    if md.pipeline != pipeline {
        return Err(Invalid { path, reason: validate::Reason::WrongPipeline { expected: pipeline.into(), found: md.pipeline.clone() } });
    }
    Ok(valid)
}

/// Download `prefix` into a temp directory (as `TMP/<prefix>`, so a
/// checkpoint's `shared/` sits next to it) and validate it there; an
/// invalid one names the object's URL (`inspect` and `savepoint list`
/// use it too).
pub fn download(storage: &dyn Storage, prefix: &str) -> Result<(Result<ValidCheckpoint, Invalid>, TempDir), RestoreError> {
    let tmp = TempDir::new("restore").map_err(storage_error)?;
    let name = prefix.rsplit('/').next().unwrap_or(prefix);
    let dir = tmp.path().join(name);
    match publish::fetch(storage, prefix, &dir) {
        Ok(()) => {}
        Err(StorageError::NotFound { url }) => {
            return Ok((Err(Invalid { path: url.into(), reason: validate::Reason::Missing }), tmp));
        }
        Err(e) => return Err(storage_error(e)),
    }
    let valid = validate::validate_dir(&dir).map_err(|mut why| {
        // The temp directory mirrors the store: `<prefix>/...` and `shared/...`.
        if let Ok(rel) = why.path.strip_prefix(&dir) {
            why.path = PathBuf::from(storage.url(&format!("{prefix}/{}", rel.display())));
        } else if let Ok(rel) = why.path.strip_prefix(tmp.path()) {
            why.path = PathBuf::from(storage.url(&rel.display().to_string()));
        }
        why
    });
    Ok((valid, tmp))
}

/// A checkpoint or savepoint URL (`s3://bucket/prefix/NAME`, or its
/// `_metadata`) as the storage of its parent, NAME and the URL without
/// `_metadata`. Sends no request.
pub fn open_parent(url: &str, options: &[(String, String)]) -> Result<(ObjectStorage, String, String), String> {
    let trimmed = url.trim_end_matches('/');
    let trimmed = trimmed.strip_suffix(&format!("/{METADATA_FILE}")).unwrap_or(trimmed);
    let (bucket, prefix) = remote::parse_url(trimmed)?;
    let Some((parent, name)) = prefix
        .rsplit_once('/')
        .map(|(p, n)| (p.to_string(), n.to_string()))
        .or_else(|| (!prefix.is_empty()).then(|| (String::new(), prefix.clone())))
    else {
        return Err("names a bucket, not a checkpoint or savepoint in it".into());
    };
    let root = if parent.is_empty() { format!("s3://{bucket}") } else { format!("s3://{bucket}/{parent}") };
    let storage = ObjectStorage::open(&root, options)?;
    Ok((storage, name, trimmed.to_string()))
}

/// `--restore s3://bucket/prefix/NAME` (or `.../NAME/_metadata`): the
/// checkpoint or savepoint there, validated.
pub fn by_url(url: &str, options: &[(String, String)]) -> Result<Fetched, RestoreError> {
    let invalid = |reason: String| RestoreError::Invalid { path: PathBuf::from(url), reason };
    let (storage, name, trimmed) = open_parent(url, options).map_err(invalid)?;
    let (valid, tmp) = download(&storage, &name)?;
    let valid = valid.map_err(|why| RestoreError::Invalid { path: why.path.clone(), reason: why.reason.to_string() })?;
    tracing::info!(url = %trimmed, checkpoint = valid.metadata.checkpoint_id, "Downloaded from the store.");
    Ok(Fetched { valid, url: trimmed, download: Some(tmp), stored: None })
}

//! The commit protocol over a [`Storage`], one piece of code for the local
//! file system and for object storage.
//!
//! A checkpoint (or savepoint) is first written into a local directory
//! (the state directory's `checkpoints/chk-n/`, or a savepoint's temp
//! directory). [`commit`] then puts every state file, then every bundle
//! MANIFEST, then `_metadata` with a conditional put (never replacing one):
//! that put is the commit point. On the local file system the files are
//! already where they belong and only `_metadata` is written. A failure
//! before the commit point leaves objects without `_metadata`, which
//! [`remove`] (on abort) or [`remove_unfinished`] (at the next start)
//! deletes; it is never a checkpoint.
//!
//! [`fetch`] brings a stored checkpoint into a local directory for the
//! validator and the restore; [`local_copy_matches`] tells whether the
//! local copy left by the run that wrote it can be used instead (its
//! `_metadata` and MANIFESTs are the stored ones byte for byte; the
//! validator then checks every file against the MANIFESTs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::generation::StoredId;
use super::layout::{self, MANIFEST_FILE, METADATA_FILE};
use super::manifest::{BundleManifest, Document};
use super::storage::{Storage, StorageError};
use super::validate;

/// `chk-0000007/_metadata`.
pub fn metadata_key(prefix: &str) -> String {
    format!("{prefix}/{METADATA_FILE}")
}

/// Files below `dir` as (key under `prefix`, path), `_metadata` left out,
/// MANIFESTs last.
fn local_files(dir: &Path, prefix: &str) -> Result<Vec<(String, PathBuf)>, StorageError> {
    let local = super::storage::LocalStorage::new(dir);
    let mut files: Vec<(String, PathBuf)> =
        local.list("")?.into_iter().filter(|o| o.key != METADATA_FILE).map(|o| (format!("{prefix}/{}", o.key), dir.join(&o.key))).collect();
    files.sort_by_key(|(key, _)| (key.ends_with(MANIFEST_FILE), key.clone()));
    Ok(files)
}

/// Put the checkpoint written in `dir` under `prefix` and commit it with
/// `metadata`. The shared files its MANIFESTs reference (SSTs of an
/// incremental RocksDB checkpoint, in `dir/../shared/`) that the store
/// does not have yet are put first, to `shared/NAME`: each SST is uploaded
/// once and referenced by every MANIFEST that needs it. On failure before
/// the commit point, what was put under `prefix` is deleted again (best
/// effort: the next start removes the rest; unreferenced shared objects go
/// with the next [`collect_shared_garbage`]).
pub fn commit(storage: &dyn Storage, dir: &Path, prefix: &str, metadata: &[u8]) -> Result<(), StorageError> {
    let files = local_files(dir, prefix)?;
    let (manifests, state): (Vec<_>, Vec<_>) = files.into_iter().partition(|(k, _)| k.ends_with(MANIFEST_FILE));
    let result = put_shared(storage, dir, &manifests)
        .and_then(|()| put_all(storage, state))
        .and_then(|()| put_all(storage, manifests))
        .and_then(|()| storage.put_if_absent(&metadata_key(prefix), metadata));
    if let Err(e) = &result {
        if !matches!(e, StorageError::AlreadyExists { .. }) {
            if let Err(cleanup) = remove_objects(storage, prefix, false) {
                tracing::debug!(prefix, error = %cleanup, "Cannot remove the objects of a failed commit yet.");
            }
        }
    }
    result
}

fn put_all(storage: &dyn Storage, files: Vec<(String, PathBuf)>) -> Result<(), StorageError> {
    storage.put_many(files)
}

/// The shared file names the MANIFEST files at `paths` reference.
fn shared_names(paths: impl IntoIterator<Item = PathBuf>) -> Result<BTreeSet<String>, StorageError> {
    let mut names = BTreeSet::new();
    for path in paths {
        let bytes = super::disk::read_regular(&path)
            .map_err(|source| StorageError::Local(super::disk::StoreError::Io { op: "read", path: path.clone(), source }))?;
        // An unreadable MANIFEST is the validator's to report.
        if let Ok(m) = BundleManifest::from_bytes(&bytes) {
            names.extend(m.files.into_iter().filter(|f| f.shared).map(|f| f.name));
        }
    }
    Ok(names)
}

/// Put the shared files the checkpoint's MANIFESTs reference that the store lacks.
fn put_shared(storage: &dyn Storage, dir: &Path, manifests: &[(String, PathBuf)]) -> Result<(), StorageError> {
    let wanted = shared_names(manifests.iter().map(|(_, p)| p.clone()))?;
    if wanted.is_empty() {
        return Ok(());
    }
    let stored: BTreeSet<String> = storage.list(SHARED_PREFIX)?.into_iter().map(|o| o.key[SHARED_PREFIX.len()..].to_string()).collect();
    let local = validate::shared_dir_of(dir);
    let missing: Vec<(String, PathBuf)> =
        wanted.difference(&stored).map(|name| (format!("{SHARED_PREFIX}{name}"), local.join(name))).collect();
    if !missing.is_empty() {
        tracing::debug!(files = missing.len(), reused = wanted.len() - missing.len(), "Uploading shared files.");
    }
    storage.put_many(missing)
}

/// `shared/`: where the SSTs of incremental checkpoints are stored.
pub const SHARED_PREFIX: &str = "shared/";

/// Delete the shared objects no complete checkpoint in the store
/// references; returns their keys. Run only while no checkpoint is being
/// uploaded (between checkpoints, and at start after
/// [`remove_unfinished`]).
pub fn collect_shared_garbage(storage: &dyn Storage) -> Result<Vec<String>, StorageError> {
    let objects = storage.list("")?;
    let shared: Vec<&str> = objects.iter().map(|o| o.key.as_str()).filter(|k| k.starts_with(SHARED_PREFIX)).collect();
    if shared.is_empty() {
        return Ok(Vec::new());
    }
    let complete: BTreeSet<&str> =
        objects.iter().filter_map(|o| o.key.strip_suffix(&format!("/{METADATA_FILE}"))).filter(|d| StoredId::parse(d).is_some()).collect();
    let mut referenced = BTreeSet::new();
    for o in objects.iter().filter(|o| o.key.ends_with(&format!("/{MANIFEST_FILE}"))) {
        if !o.key.split('/').next().is_some_and(|d| complete.contains(d)) {
            continue;
        }
        // A MANIFEST that cannot be read keeps everything: deleting on a guess could break a checkpoint.
        let m = BundleManifest::from_bytes(&storage.get(&o.key)?).map_err(|e| StorageError::Failed {
            op: "read",
            url: storage.url(&o.key),
            message: e.to_string(),
        })?;
        referenced.extend(m.files.into_iter().filter(|f| f.shared).map(|f| f.name));
    }
    let doomed: Vec<String> = shared.into_iter().filter(|k| !referenced.contains(&k[SHARED_PREFIX.len()..])).map(str::to_string).collect();
    for key in &doomed {
        storage.delete(key)?;
    }
    Ok(doomed)
}

/// Delete a checkpoint or savepoint: `_metadata` first, so that a crash
/// midway leaves an unfinished one (removed at the next start), never a
/// torn one that still looks complete.
pub fn remove(storage: &dyn Storage, prefix: &str) -> Result<(), StorageError> {
    remove_objects(storage, prefix, true)
}

fn remove_objects(storage: &dyn Storage, prefix: &str, metadata_first: bool) -> Result<(), StorageError> {
    if metadata_first {
        storage.delete(&metadata_key(prefix))?;
    }
    for o in storage.list(&format!("{prefix}/"))? {
        storage.delete(&o.key)?;
    }
    Ok(())
}

/// The checkpoints in the store: id and generation → whether its
/// `_metadata` exists.
pub fn checkpoints(storage: &dyn Storage) -> Result<BTreeMap<StoredId, bool>, StorageError> {
    let mut out = BTreeMap::new();
    for o in storage.list("chk-")? {
        let Some((dir, rest)) = o.key.split_once('/') else { continue };
        let Some(id) = StoredId::parse(dir) else { continue };
        let complete = out.entry(id).or_insert(false);
        *complete |= rest == METADATA_FILE;
    }
    Ok(out)
}

/// Delete the objects of checkpoints without `_metadata` (a crash or a
/// failed upload, or a deposed owner's late requests, left them); returns
/// them.
pub fn remove_unfinished(storage: &dyn Storage) -> Result<Vec<StoredId>, StorageError> {
    let unfinished: Vec<StoredId> = checkpoints(storage)?.into_iter().filter(|(_, done)| !done).map(|(id, _)| id).collect();
    for id in &unfinished {
        remove_objects(storage, &id.name(), false)?;
    }
    Ok(unfinished)
}

/// Download everything under `prefix` into the new directory `to`, as it
/// is laid out in the store, and the shared files its MANIFESTs reference
/// into `to/../shared/` (a missing one is left for the validator to name).
pub fn fetch(storage: &dyn Storage, prefix: &str, to: &Path) -> Result<(), StorageError> {
    let objects = storage.list(&format!("{prefix}/"))?;
    if objects.is_empty() {
        return Err(StorageError::NotFound { url: storage.url(&metadata_key(prefix)) });
    }
    let mut manifests = Vec::new();
    let mut files = Vec::new();
    for o in objects {
        let rel = &o.key[prefix.len() + 1..];
        if !layout::is_safe_relative(rel) {
            continue;
        }
        if rel.ends_with(MANIFEST_FILE) {
            manifests.push(to.join(rel));
        }
        files.push((o.key.clone(), to.join(rel)));
    }
    storage.get_many(files)?;
    // The shared files the MANIFESTs name that the store has (a missing
    // one is the validator's to name).
    let shared = validate::shared_dir_of(to);
    let stored: BTreeSet<String> = match shared_names(manifests)? {
        names if names.is_empty() => BTreeSet::new(),
        names => {
            let there: BTreeSet<String> = storage.list(SHARED_PREFIX)?.into_iter().map(|o| o.key).collect();
            names
                .into_iter()
                .filter(|n| layout::is_safe_relative(n) && !n.contains('/'))
                .filter(|n| there.contains(&format!("{SHARED_PREFIX}{n}")))
                .collect()
        }
    };
    storage.get_many(stored.into_iter().map(|name| (format!("{SHARED_PREFIX}{name}"), shared.join(&name))).collect())
}

/// Whether the local directory `dir` holds the stored checkpoint `prefix`:
/// its `_metadata` and every MANIFEST are the stored ones, byte for byte
/// (state files are then checked against the MANIFESTs by the validator).
pub fn local_copy_matches(storage: &dyn Storage, prefix: &str, dir: &Path) -> Result<bool, StorageError> {
    let docs: Vec<String> = storage
        .list(&format!("{prefix}/"))?
        .into_iter()
        .map(|o| o.key)
        .filter(|k| k.ends_with(&format!("/{METADATA_FILE}")) || k.ends_with(&format!("/{MANIFEST_FILE}")))
        .collect();
    if !docs.iter().any(|k| k == &metadata_key(prefix)) {
        return Ok(false);
    }
    for key in docs {
        let local = dir.join(&key[prefix.len() + 1..]);
        match super::disk::read_regular(&local) {
            Ok(bytes) if bytes == storage.get(&key)? => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// A directory that is removed when dropped (a downloaded checkpoint).
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh directory under the system's temp directory
    /// (`weir-<tag>-<pid>-<n>`). Those a killed process of this host left
    /// (its PID no longer runs) are removed first, once per process: a
    /// crash-looping restore must not fill the disk with downloads.
    pub fn new(tag: &str) -> Result<TempDir, StorageError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| sweep_left_behind(&std::env::temp_dir(), tag));
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("weir-{tag}-{}-{n}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(super::disk::StoreError::Io { op: "create directory", path, source }.into()),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// Remove `dir/weir-<tag>-<pid>-<n>` of every PID that no longer runs.
fn sweep_left_behind(dir: &Path, tag: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let prefix = format!("weir-{tag}-");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(&prefix)).and_then(|rest| rest.split_once('-')).map(|(p, _)| p) else {
            continue;
        };
        let gone = pid.parse::<u32>().is_ok_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists());
        if gone && entry.file_type().is_ok_and(|t| t.is_dir()) {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => tracing::info!(dir = %entry.path().display(), "Removed a download a killed weir process left."),
                Err(e) => {
                    tracing::debug!(dir = %entry.path().display(), error = %e, "Cannot remove a download a killed weir process left.")
                }
            }
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::storage::LocalStorage;
    use std::fs;

    fn written(dir: &Path) {
        crate::checkpoint::disk::write_state_file(&dir.join("bundle-000"), "task.snapshot", b"state").unwrap();
        crate::checkpoint::disk::write_atomic(&dir.join("bundle-000/MANIFEST"), b"manifest").unwrap();
    }

    #[test]
    fn a_commit_puts_files_then_metadata_and_fetch_brings_it_back() {
        let tmp = tempfile::tempdir().unwrap();
        let (local, store) = (tmp.path().join("chk"), LocalStorage::new(tmp.path().join("store")));
        written(&local);
        commit(&store, &local, "chk-0000003", b"md").unwrap();
        assert_eq!(checkpoints(&store).unwrap(), BTreeMap::from([(StoredId::new(3, 0), true)]));
        let to = tmp.path().join("fetched");
        fetch(&store, "chk-0000003", &to).unwrap();
        assert_eq!(fs::read(to.join("bundle-000/task.snapshot")).unwrap(), b"state");
        assert!(!local_copy_matches(&store, "chk-0000003", &local).unwrap(), "no local _metadata yet");
        fs::write(local.join("_metadata"), b"md").unwrap();
        assert!(local_copy_matches(&store, "chk-0000003", &local).unwrap());
        fs::write(local.join("bundle-000/MANIFEST"), b"other").unwrap();
        assert!(!local_copy_matches(&store, "chk-0000003", &local).unwrap());
        // A second commit of the same id never replaces the first.
        assert!(matches!(commit(&store, &local, "chk-0000003", b"md2"), Err(StorageError::AlreadyExists { .. })));
        remove(&store, "chk-0000003").unwrap();
        assert!(checkpoints(&store).unwrap().is_empty());
    }

    #[test]
    fn downloads_of_dead_processes_are_swept_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        // PID 0 never names a process; this one's own are kept too.
        let dead = tmp.path().join("weir-restore-0-3");
        let own = tmp.path().join(format!("weir-restore-{}-0", std::process::id()));
        let other_tag = tmp.path().join("weir-savepoint-0-1");
        for d in [&dead, &own, &other_tag] {
            fs::create_dir_all(d.join("chk")).unwrap();
        }
        fs::write(tmp.path().join("weir-restore-0-9"), b"a file, not a download").unwrap();
        sweep_left_behind(tmp.path(), "restore");
        assert!(!dead.exists() && own.exists() && other_tag.exists());
        assert!(tmp.path().join("weir-restore-0-9").exists());
    }

    #[test]
    fn unfinished_checkpoints_are_removed_complete_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalStorage::new(tmp.path());
        store.put("chk-0000004/bundle-000/MANIFEST", b"m").unwrap();
        store.put("chk-0000005/_metadata", b"md").unwrap();
        store.put("chk-0000005-g000002/bundle-000/MANIFEST", b"m").unwrap();
        store.put("chk-0000006-g000002/_metadata", b"md").unwrap();
        assert_eq!(remove_unfinished(&store).unwrap(), vec![StoredId::new(4, 0), StoredId::new(5, 2)]);
        let expected = BTreeMap::from([(StoredId::new(5, 0), true), (StoredId::new(6, 2), true)]);
        assert_eq!(checkpoints(&store).unwrap(), expected);
    }
}

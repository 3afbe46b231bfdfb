//! `BundleStateValidator`: decides which checkpoint a restore may trust, and
//! removes what no restore may ever use.
//!
//! This is the seed's cure for bundle inconsistency at restore time: a
//! checkpoint is accepted only when `_metadata`, every bundle MANIFEST it
//! lists and every file those list are present with the recorded size and
//! CRC32C. One missing piece refuses the whole checkpoint, so every subtask
//! restores from the same checkpoint, never a mix of old and new bundles.

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::disk::{self, StoreError};
use super::layout::{self, Layout};
use super::manifest::{BundleManifest, DocError, Document, Metadata};
use crate::types::CheckpointId;

/// A checkpoint that passed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidCheckpoint {
    pub dir: PathBuf,
    pub metadata: Metadata,
    /// In the order of `metadata.bundles`.
    pub manifests: Vec<BundleManifest>,
}

/// Why a checkpoint was refused: the first bad file found, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct Invalid {
    pub path: PathBuf,
    pub reason: Reason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    Missing,
    /// A FIFO, symbolic link, directory, ...: only regular files are state files.
    NotRegular(&'static str),
    Unreadable(String),
    BadDocument(DocError),
    WrongCheckpointId {
        expected: CheckpointId,
        found: CheckpointId,
    },
    WrongBundle {
        expected: u32,
        found: u32,
    },
    WrongPipeline {
        expected: String,
        found: String,
    },
    DuplicateBundle(u32),
    DuplicateFile(String),
    UnsafeName(String),
    SizeMismatch {
        expected: u64,
        found: u64,
    },
    CrcMismatch {
        expected: u32,
        found: u32,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Missing => write!(f, "missing"),
            Reason::NotRegular(kind) => write!(f, "is {kind}, not a regular file"),
            Reason::Unreadable(e) => write!(f, "unreadable: {e}"),
            Reason::BadDocument(e) => write!(f, "{e}"),
            Reason::WrongCheckpointId { expected, found } => {
                write!(f, "belongs to checkpoint {found}, expected {expected}")
            }
            Reason::WrongBundle { expected, found } => {
                write!(f, "belongs to bundle {found}, expected {expected}")
            }
            Reason::WrongPipeline { expected, found } => {
                write!(f, "written by pipeline `{found}`, expected `{expected}`")
            }
            Reason::DuplicateBundle(b) => write!(f, "lists bundle {b} twice"),
            Reason::DuplicateFile(n) => write!(f, "lists file {n:?} twice"),
            Reason::UnsafeName(n) => write!(f, "names a file outside its bundle directory: {n:?}"),
            Reason::SizeMismatch { expected, found } => {
                write!(f, "size is {found} bytes, the manifest says {expected}")
            }
            Reason::CrcMismatch { expected, found } => write!(f, "CRC32C is {found:#010x}, the manifest says {expected:#010x}"),
        }
    }
}

impl Invalid {
    /// No `_metadata`: a checkpoint the run did not finish (it stopped or
    /// crashed while taking it), not a damaged one.
    pub fn is_unfinished(&self) -> bool {
        self.reason == Reason::Missing && self.path.file_name().is_some_and(|n| n == layout::METADATA_FILE)
    }
}

fn invalid(path: impl Into<PathBuf>, reason: Reason) -> Invalid {
    Invalid { path: path.into(), reason }
}

/// Validate the checkpoint or savepoint in `dir` (any name: also used for
/// an explicit `--restore PATH` and `weir inspect`).
pub fn validate_dir(dir: &Path) -> Result<ValidCheckpoint, Invalid> {
    let metadata: Metadata = read_document(&dir.join(layout::METADATA_FILE))?;
    let mut seen = BTreeSet::new();
    let mut manifests = Vec::with_capacity(metadata.bundles.len());
    for &bundle in &metadata.bundles {
        if !seen.insert(bundle) {
            return Err(invalid(dir.join(layout::METADATA_FILE), Reason::DuplicateBundle(bundle)));
        }
        manifests.push(validate_bundle(dir, &metadata, bundle)?);
    }
    Ok(ValidCheckpoint { dir: dir.to_path_buf(), metadata, manifests })
}

fn validate_bundle(dir: &Path, metadata: &Metadata, bundle: u32) -> Result<BundleManifest, Invalid> {
    let bundle_dir = dir.join(layout::bundle_dir_name(bundle));
    let path = bundle_dir.join(layout::MANIFEST_FILE);
    let manifest: BundleManifest = read_document(&path)?;
    if manifest.checkpoint_id != metadata.checkpoint_id {
        let reason = Reason::WrongCheckpointId { expected: metadata.checkpoint_id, found: manifest.checkpoint_id };
        return Err(invalid(path, reason));
    }
    if manifest.bundle != bundle {
        return Err(invalid(path, Reason::WrongBundle { expected: bundle, found: manifest.bundle }));
    }
    // Names first: a MANIFEST naming files outside its bundle is refused whole.
    let mut names = BTreeSet::new();
    for entry in &manifest.files {
        if !layout::is_safe_relative(&entry.name) {
            return Err(invalid(&path, Reason::UnsafeName(entry.name.clone())));
        }
        if !names.insert(entry.name.as_str()) {
            return Err(invalid(&path, Reason::DuplicateFile(entry.name.clone())));
        }
    }
    let shared_dir = shared_dir_of(dir);
    for entry in &manifest.files {
        if entry.shared && entry.name.contains('/') {
            return Err(invalid(&path, Reason::UnsafeName(entry.name.clone())));
        }
        check_file(if entry.shared { &shared_dir } else { &bundle_dir }, entry)?;
    }
    Ok(manifest)
}

/// Where the shared files of the checkpoint in `dir` live: `shared/` next
/// to it (a checkpoint is `checkpoints/chk-n`). Savepoints have none.
pub fn shared_dir_of(dir: &Path) -> PathBuf {
    dir.parent().unwrap_or(Path::new(".")).join(layout::SHARED_DIR)
}

fn check_file(bundle_dir: &Path, entry: &super::manifest::FileEntry) -> Result<(), Invalid> {
    let path = bundle_dir.join(&entry.name);
    // Opened once, as a regular file only (a FIFO would block the read forever).
    let (mut file, size) = disk::open_regular(&path).map_err(|e| io_reason(&path, e))?;
    // Size first: cheap, and catches truncation without reading the file.
    if size != entry.size {
        return Err(invalid(path, Reason::SizeMismatch { expected: entry.size, found: size }));
    }
    let (size, crc32c) = disk::checksum(&mut file).map_err(|e| io_reason(&path, e))?;
    if size != entry.size {
        return Err(invalid(path, Reason::SizeMismatch { expected: entry.size, found: size }));
    }
    if crc32c != entry.crc32c {
        return Err(invalid(path, Reason::CrcMismatch { expected: entry.crc32c, found: crc32c }));
    }
    Ok(())
}

fn read_document<T: Document>(path: &Path) -> Result<T, Invalid> {
    let bytes = disk::read_regular(path).map_err(|e| io_reason(path, e))?;
    T::from_bytes(&bytes).map_err(|e| invalid(path, Reason::BadDocument(e)))
}

fn io_reason(path: &Path, e: io::Error) -> Invalid {
    if let Some(not) = disk::NotRegular::of(&e) {
        return invalid(path, Reason::NotRegular(not.kind));
    }
    match e.kind() {
        io::ErrorKind::NotFound => invalid(path, Reason::Missing),
        _ => invalid(path, Reason::Unreadable(e.to_string())),
    }
}

/// The newest valid checkpoint, and why each newer one was passed over.
#[derive(Debug)]
pub struct Latest {
    pub checkpoint: ValidCheckpoint,
    /// Newest first.
    pub skipped: Vec<(CheckpointId, Invalid)>,
}

#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error("no valid checkpoint in {dir} ({} refused)", skipped.len())]
    NoneValid { dir: PathBuf, skipped: Vec<(CheckpointId, Invalid)> },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What [`BundleStateValidator::cleanup`] removed and left.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CleanupReport {
    /// Checkpoints without valid `_metadata`, removed whole.
    pub removed_checkpoints: Vec<CheckpointId>,
    /// Bundle directories not listed in their checkpoint's `_metadata`.
    pub removed_bundle_dirs: Vec<PathBuf>,
    /// Kept checkpoints without valid `_metadata`: left as they are.
    pub kept_unfinished: Vec<CheckpointId>,
}

/// Validates the checkpoints of one pipeline's state directory.
pub struct BundleStateValidator {
    layout: Layout,
    pipeline: String,
}

impl BundleStateValidator {
    pub fn new(layout: Layout, pipeline: impl Into<String>) -> Self {
        BundleStateValidator { layout, pipeline: pipeline.into() }
    }

    /// Validate checkpoint `id`: all of [`validate_dir`], plus the id and
    /// pipeline recorded in `_metadata` must be this directory's.
    pub fn validate(&self, id: CheckpointId) -> Result<ValidCheckpoint, Invalid> {
        let valid = validate_dir(&self.layout.checkpoint_dir(id))?;
        let path = self.layout.metadata(id);
        let md = &valid.metadata;
        if md.checkpoint_id != id {
            return Err(invalid(path, Reason::WrongCheckpointId { expected: id, found: md.checkpoint_id }));
        }
        if md.pipeline != self.pipeline {
            let reason = Reason::WrongPipeline { expected: self.pipeline.clone(), found: md.pipeline.clone() };
            return Err(invalid(path, reason));
        }
        Ok(valid)
    }

    /// The newest valid checkpoint (`--restore latest`), with the reason
    /// each newer one was refused, so the caller can log them.
    pub fn find_latest(&self) -> Result<Latest, FindError> {
        self.find_latest_from(0)
    }

    /// The newest valid checkpoint with an id of at least `first_id` (the
    /// current lineage's); older ones are not even looked at.
    pub fn find_latest_from(&self, first_id: CheckpointId) -> Result<Latest, FindError> {
        let mut skipped = Vec::new();
        for id in disk::list_checkpoint_ids(&self.layout)?.into_iter().rev().filter(|&id| id >= first_id) {
            match self.validate(id) {
                Ok(checkpoint) => return Ok(Latest { checkpoint, skipped }),
                Err(why) => skipped.push((id, why)),
            }
        }
        Err(FindError::NoneValid { dir: self.layout.checkpoints_dir(), skipped })
    }

    /// Remove unfinished checkpoints (no valid `_metadata`) and orphaned
    /// bundle dirs (not listed in their checkpoint's `_metadata`). Nothing a
    /// checkpoint in `keep` lists is touched, and a kept checkpoint is never
    /// removed. Run at start, before any checkpoint is triggered: an
    /// in-progress checkpoint has no `_metadata` yet and would be removed.
    pub fn cleanup(&self, keep: &[CheckpointId]) -> Result<CleanupReport, StoreError> {
        let mut report = CleanupReport::default();
        for id in disk::list_checkpoint_ids(&self.layout)? {
            let dir = self.layout.checkpoint_dir(id);
            match read_document::<Metadata>(&dir.join(layout::METADATA_FILE)) {
                Ok(md) => report.removed_bundle_dirs.extend(remove_orphan_bundles(&dir, &md)?),
                Err(_) if keep.contains(&id) => report.kept_unfinished.push(id),
                Err(_) => {
                    disk::remove_checkpoint_dir(&dir)?;
                    report.removed_checkpoints.push(id);
                }
            }
        }
        Ok(report)
    }
}

/// Remove `bundle-NNN` dirs of `dir` that `md` does not list; other entries stay.
fn remove_orphan_bundles(dir: &Path, md: &Metadata) -> Result<Vec<PathBuf>, StoreError> {
    let entries = fs::read_dir(dir).map_err(|source| StoreError::Io { op: "list", path: dir.into(), source })?;
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| StoreError::Io { op: "list", path: dir.into(), source })?;
        let bundle = entry.file_name().to_str().and_then(layout::parse_bundle_dir_name);
        if bundle.is_some_and(|b| !md.bundles.contains(&b)) {
            disk::remove_dir_all(&entry.path())?;
            removed.push(entry.path());
        }
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::disk::{write_atomic, write_state_file};
    use crate::checkpoint::manifest::tests::metadata;
    use crate::checkpoint::manifest::{BundleManifest, TaskId};

    /// Write a complete checkpoint `id` with two bundles of two files each,
    /// the way arbiters and the coordinator do; returns every file written.
    fn write_checkpoint(l: &Layout, id: CheckpointId) -> Vec<PathBuf> {
        let mut paths = Vec::new();
        for bundle in [0, 1] {
            let dir = l.bundle_dir(id, bundle);
            let mut files = Vec::new();
            for (i, name) in ["op-unique.bin", "db/000007.sst"].iter().enumerate() {
                let body = format!("state of checkpoint {id} bundle {bundle} file {i}").repeat(i + 1);
                files.push(write_state_file(&dir, name, body.as_bytes()).unwrap());
                paths.push(dir.join(name));
            }
            let voters = vec![TaskId { chain: 0, subtask: bundle as u16 }];
            let manifest = BundleManifest::new(id, bundle, voters, files);
            write_atomic(&l.manifest(id, bundle), &manifest.to_bytes()).unwrap();
            paths.push(l.manifest(id, bundle));
        }
        write_atomic(&l.metadata(id), &metadata(id, vec![0, 1]).to_bytes()).unwrap();
        paths.push(l.metadata(id));
        paths
    }

    fn setup() -> (tempfile::TempDir, Layout, BundleStateValidator) {
        let tmp = tempfile::tempdir().unwrap();
        let l = Layout::new(tmp.path());
        let v = BundleStateValidator::new(l.clone(), "orders");
        (tmp, l, v)
    }

    type Damage = fn(&Path);
    const DAMAGES: [(&str, Damage); 4] = [
        ("delete", |p| fs::remove_file(p).unwrap()),
        ("truncate to half", |p| {
            let b = fs::read(p).unwrap();
            fs::write(p, &b[..b.len() / 2]).unwrap()
        }),
        ("truncate to empty", |p| fs::write(p, b"").unwrap()),
        ("flip a byte", |p| {
            let mut b = fs::read(p).unwrap();
            let mid = b.len() / 2;
            b[mid] ^= 0x01;
            fs::write(p, b).unwrap()
        }),
    ];

    #[test]
    fn a_complete_checkpoint_validates() {
        let (_tmp, l, v) = setup();
        write_checkpoint(&l, 5);
        let valid = v.validate(5).unwrap();
        assert_eq!(valid.metadata.checkpoint_id, 5);
        assert_eq!(valid.manifests.iter().map(|m| m.bundle).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(valid.manifests[1].files.len(), 2);
    }

    #[test]
    fn each_damaged_file_is_named_and_latest_falls_back() {
        let (_tmp, l, v) = setup();
        write_checkpoint(&l, 1);
        let files = write_checkpoint(&l, 2);
        for file in &files {
            for (what, damage) in DAMAGES {
                let original = fs::read(file).unwrap();
                damage(file);
                let err = v.validate(2).unwrap_err();
                assert_eq!(&err.path, file, "{what} {}: {err}", file.display());
                let latest = v.find_latest().unwrap();
                assert_eq!(latest.checkpoint.metadata.checkpoint_id, 1, "{what} {}", file.display());
                assert_eq!(latest.skipped, vec![(2, err)]);
                fs::write(file, original).unwrap();
                v.validate(2).unwrap();
            }
        }
    }

    #[test]
    fn every_bit_flip_of_every_file_is_caught() {
        let (_tmp, l, v) = setup();
        for file in write_checkpoint(&l, 3) {
            let original = fs::read(&file).unwrap();
            for i in 0..original.len() {
                let mut b = original.clone();
                b[i] ^= 1 << (i % 8);
                fs::write(&file, &b).unwrap();
                assert_eq!(v.validate(3).unwrap_err().path, file, "byte {i}");
            }
            fs::write(&file, original).unwrap();
        }
    }

    #[test]
    fn reasons_say_what_is_wrong() {
        let (_tmp, l, v) = setup();
        let files = write_checkpoint(&l, 4);
        let sst = &files[1];
        fs::write(sst, b"x").unwrap();
        let err = v.validate(4).unwrap_err();
        assert!(matches!(err.reason, Reason::SizeMismatch { found: 1, .. }), "{err}");
        assert!(err.to_string().contains("000007.sst"), "{err}");
        fs::remove_file(l.manifest(4, 1)).unwrap();
        // The first problem in bundle order is reported.
        assert_eq!(v.validate(4).unwrap_err().path, *sst);
        fs::remove_file(l.metadata(4)).unwrap();
        assert_eq!(v.validate(4).unwrap_err(), invalid(l.metadata(4), Reason::Missing));
    }

    #[test]
    fn a_bundle_listed_but_absent_refuses_the_checkpoint() {
        let (_tmp, l, v) = setup();
        write_checkpoint(&l, 6);
        write_atomic(&l.metadata(6), &metadata(6, vec![0, 1, 2]).to_bytes()).unwrap();
        assert_eq!(v.validate(6).unwrap_err(), invalid(l.manifest(6, 2), Reason::Missing));
        write_atomic(&l.metadata(6), &metadata(6, vec![0, 0]).to_bytes()).unwrap();
        assert_eq!(v.validate(6).unwrap_err().reason, Reason::DuplicateBundle(0));
    }

    #[test]
    fn documents_from_elsewhere_are_refused() {
        let (_tmp, l, v) = setup();
        write_checkpoint(&l, 7);
        write_checkpoint(&l, 8);
        // A MANIFEST copied from another checkpoint.
        fs::copy(l.manifest(7, 1), l.manifest(8, 1)).unwrap();
        assert_eq!(v.validate(8).unwrap_err().reason, Reason::WrongCheckpointId { expected: 8, found: 7 });
        // A MANIFEST copied from another bundle.
        fs::copy(l.manifest(7, 0), l.manifest(7, 1)).unwrap();
        assert_eq!(v.validate(7).unwrap_err().reason, Reason::WrongBundle { expected: 1, found: 0 });
        // _metadata of another id or pipeline.
        write_checkpoint(&l, 7);
        write_atomic(&l.metadata(7), &metadata(8, vec![]).to_bytes()).unwrap();
        assert_eq!(v.validate(7).unwrap_err().reason, Reason::WrongCheckpointId { expected: 7, found: 8 });
        let other = Metadata { pipeline: "payments".into(), ..metadata(7, vec![0, 1]) };
        write_atomic(&l.metadata(7), &other.to_bytes()).unwrap();
        assert!(matches!(v.validate(7).unwrap_err().reason, Reason::WrongPipeline { .. }));
    }

    #[test]
    fn manifests_may_not_point_outside_or_repeat() {
        let (_tmp, l, v) = setup();
        write_checkpoint(&l, 9);
        let mut m = BundleManifest::from_bytes(&fs::read(l.manifest(9, 0)).unwrap()).unwrap();
        m.files[0].name = "../../PIPELINE".into();
        write_atomic(&l.manifest(9, 0), &m.to_bytes()).unwrap();
        assert!(matches!(v.validate(9).unwrap_err().reason, Reason::UnsafeName(_)));
        m.files[0].name = m.files[1].name.clone();
        write_atomic(&l.manifest(9, 0), &m.to_bytes()).unwrap();
        assert!(matches!(v.validate(9).unwrap_err().reason, Reason::DuplicateFile(_)));
    }

    fn mkfifo(path: &Path) {
        let made = std::process::Command::new("mkfifo").arg(path).status().unwrap();
        assert!(made.success(), "mkfifo {}", path.display());
    }

    /// `f()` on a thread, failing the test if it has not returned within 10 s.
    fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap_or_else(|_| panic!("{what}: blocked"))
    }

    #[test]
    fn a_fifo_or_symlink_in_place_of_a_state_file_is_refused_without_blocking() {
        let (_tmp, l, v) = setup();
        write_checkpoint(&l, 1);
        write_checkpoint(&l, 2);
        // A crafted MANIFEST entry naming a FIFO (size 0 passes the size check).
        let fifo = l.bundle_dir(2, 1).join("fifo");
        mkfifo(&fifo);
        let mut m = BundleManifest::from_bytes(&fs::read(l.manifest(2, 1)).unwrap()).unwrap();
        m.files.push(crate::checkpoint::manifest::FileEntry::private("fifo", 0, 0));
        write_atomic(&l.manifest(2, 1), &m.to_bytes()).unwrap();
        let l2 = l.clone();
        let latest = bounded("validating a FIFO", move || BundleStateValidator::new(l2, "orders").find_latest().unwrap());
        assert_eq!(latest.checkpoint.metadata.checkpoint_id, 1);
        assert_eq!(latest.skipped, vec![(2, invalid(&fifo, Reason::NotRegular("a FIFO")))]);
        assert!(latest.skipped[0].1.to_string().ends_with("fifo: is a FIFO, not a regular file"), "{}", latest.skipped[0].1);

        // The MANIFEST itself, and `_metadata`, as FIFOs.
        fs::remove_file(l.manifest(2, 1)).unwrap();
        mkfifo(&l.manifest(2, 1));
        let dir = l.checkpoint_dir(2);
        let err = bounded("a FIFO MANIFEST", move || validate_dir(&dir).unwrap_err());
        assert_eq!(err, invalid(l.manifest(2, 1), Reason::NotRegular("a FIFO")));
        fs::remove_file(l.metadata(2)).unwrap();
        mkfifo(&l.metadata(2));
        let dir = l.checkpoint_dir(2);
        let err = bounded("a FIFO _metadata", move || validate_dir(&dir).unwrap_err());
        assert_eq!(err, invalid(l.metadata(2), Reason::NotRegular("a FIFO")));
        // Cleanup reads `_metadata` too: it does not block, and removes the unfinished checkpoint.
        let l2 = l.clone();
        let report = bounded("cleanup", move || BundleStateValidator::new(l2, "orders").cleanup(&[]).unwrap());
        assert_eq!(report.removed_checkpoints, vec![2]);

        // A symbolic link to a file with the right content is no state file either.
        let file = l.bundle_dir(1, 0).join("op-unique.bin");
        let moved = l.state_dir().join("elsewhere.bin");
        fs::rename(&file, &moved).unwrap();
        std::os::unix::fs::symlink(&moved, &file).unwrap();
        assert_eq!(v.validate(1).unwrap_err(), invalid(&file, Reason::NotRegular("a symbolic link")));
    }

    #[test]
    fn latest_without_any_valid_checkpoint() {
        let (_tmp, l, v) = setup();
        assert!(matches!(v.find_latest(), Err(FindError::NoneValid { skipped, .. }) if skipped.is_empty()));
        write_checkpoint(&l, 1);
        fs::remove_file(l.metadata(1)).unwrap();
        let Err(FindError::NoneValid { skipped, .. }) = v.find_latest() else { panic!("found one") };
        assert_eq!(skipped, vec![(1, invalid(l.metadata(1), Reason::Missing))]);
    }

    #[test]
    fn latest_from_an_id_ignores_older_checkpoints() {
        let (_tmp, l, v) = setup();
        for id in [3, 5, 8] {
            write_checkpoint(&l, id);
        }
        assert_eq!(v.find_latest_from(4).unwrap().checkpoint.metadata.checkpoint_id, 8);
        fs::remove_file(l.metadata(8)).unwrap();
        assert_eq!(v.find_latest_from(5).unwrap().checkpoint.metadata.checkpoint_id, 5);
        let Err(FindError::NoneValid { skipped, .. }) = v.find_latest_from(6) else { panic!("went back before the lineage") };
        assert_eq!(skipped.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![8]);
    }

    #[test]
    fn latest_skips_several_newer_ones_newest_first() {
        let (_tmp, l, v) = setup();
        for id in 1..=4 {
            write_checkpoint(&l, id);
        }
        fs::remove_file(l.metadata(4)).unwrap();
        fs::write(l.bundle_dir(3, 1).join("op-unique.bin"), b"torn").unwrap();
        let latest = v.find_latest().unwrap();
        assert_eq!(latest.checkpoint.metadata.checkpoint_id, 2);
        assert_eq!(latest.skipped.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![4, 3]);
    }

    #[test]
    fn cleanup_removes_unfinished_and_orphans_only() {
        let (_tmp, l, v) = setup();
        let kept = write_checkpoint(&l, 1);
        write_checkpoint(&l, 2);
        // 3: bundles committed, _metadata never written (crash before the commit point).
        write_checkpoint(&l, 3);
        fs::remove_file(l.metadata(3)).unwrap();
        // 4: torn _metadata.
        write_checkpoint(&l, 4);
        fs::write(l.metadata(4), b"{\"vers").unwrap();
        // An orphaned bundle dir inside a complete checkpoint, and an unrelated entry.
        write_state_file(&l.bundle_dir(1, 5), "leftover", b"x").unwrap();
        fs::write(l.checkpoint_dir(1).join("notes"), b"keep me").unwrap();
        fs::create_dir_all(l.checkpoints_dir().join("shared")).unwrap();

        let report = v.cleanup(&[1]).unwrap();
        assert_eq!(report.removed_checkpoints, vec![3, 4]);
        assert_eq!(report.removed_bundle_dirs, vec![l.bundle_dir(1, 5)]);
        assert!(report.kept_unfinished.is_empty());
        assert_eq!(disk::list_checkpoint_ids(&l).unwrap(), vec![1, 2]);
        assert!(kept.iter().all(|p| p.exists()));
        assert!(l.checkpoint_dir(1).join("notes").exists());
        assert!(l.checkpoints_dir().join("shared").exists());
        v.validate(1).unwrap();
        v.validate(2).unwrap();
        // Idempotent.
        assert_eq!(v.cleanup(&[1]).unwrap(), CleanupReport::default());
    }

    #[test]
    fn cleanup_never_removes_a_kept_checkpoint() {
        let (_tmp, l, v) = setup();
        let files = write_checkpoint(&l, 7);
        fs::remove_file(l.metadata(7)).unwrap();
        let report = v.cleanup(&[7]).unwrap();
        assert_eq!(report.kept_unfinished, vec![7]);
        assert!(files[..files.len() - 1].iter().all(|p| p.exists()));
    }
}

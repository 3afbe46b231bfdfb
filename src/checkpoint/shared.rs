//! Shared files of incremental checkpoints (`checkpoints/shared/`) and when
//! they may be deleted.
//!
//! A shared file (an SST of a bundle's RocksDB) is copied there once and
//! then referenced by name from the MANIFEST of every checkpoint that needs
//! it. Its reference count is derived, never stored: the files referenced
//! by the bundle MANIFESTs of the checkpoint directories on disk. There is
//! no separate count that could disagree with the manifests.
//!
//! Garbage collection runs only at points where no upload is in flight for
//! a checkpoint that could still complete: after a checkpoint completed
//! (and its subsumed ones were removed), after a checkpoint aborted (its
//! directory removed), and at start. An upload a late task finishes after
//! such a point is unreferenced and goes at the next one; an uploader never
//! trusts its memory that a file was uploaded, it checks the file is there.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::Path;

use super::disk::{self, StoreError};
use super::layout::{self, Layout};
use super::manifest::{BundleManifest, Document};

/// The shared files `manifests` reference.
pub fn referenced<'a>(manifests: impl IntoIterator<Item = &'a BundleManifest>) -> BTreeSet<String> {
    manifests.into_iter().flat_map(|m| m.files.iter().filter(|f| f.shared).map(|f| f.name.clone())).collect()
}

/// The files of `present` nobody references: the ones to delete.
pub fn unreferenced(present: &BTreeSet<String>, referenced: &BTreeSet<String>) -> Vec<String> {
    present.difference(referenced).cloned().collect()
}

/// The bundle MANIFESTs of every checkpoint directory on disk, complete or
/// not (a MANIFEST is only ever written for a bundle that committed; being
/// conservative keeps what a checkpoint being finished may need).
pub fn manifests_on_disk(layout: &Layout) -> Result<Vec<BundleManifest>, StoreError> {
    let mut out = Vec::new();
    for id in disk::list_checkpoint_ids(layout)? {
        let dir = layout.checkpoint_dir(id);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => return Err(StoreError::Io { op: "list", path: dir, source }),
        };
        for entry in entries.flatten() {
            let is_bundle = entry.file_name().to_str().and_then(layout::parse_bundle_dir_name).is_some();
            if !is_bundle {
                continue;
            }
            let path = entry.path().join(layout::MANIFEST_FILE);
            match disk::read_regular(&path) {
                Ok(bytes) => match BundleManifest::from_bytes(&bytes) {
                    Ok(m) => out.push(m),
                    // A damaged MANIFEST: its checkpoint is invalid, but the
                    // files may still serve a valid one; keep everything.
                    Err(e) => {
                        return Err(StoreError::Io { op: "read", path, source: io::Error::new(io::ErrorKind::InvalidData, e.to_string()) })
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => return Err(StoreError::Io { op: "read", path, source }),
            }
        }
    }
    Ok(out)
}

/// The names in `shared/` (`with_temp`: also hidden temp files of copies).
fn present(shared: &Path, with_temp: bool) -> Result<BTreeSet<String>, StoreError> {
    let entries = match fs::read_dir(shared) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(source) => return Err(StoreError::Io { op: "list", path: shared.to_path_buf(), source }),
    };
    let mut names = BTreeSet::new();
    for entry in entries {
        let entry = entry.map_err(|source| StoreError::Io { op: "list", path: shared.to_path_buf(), source })?;
        if let Some(name) = entry.file_name().to_str() {
            if with_temp || !name.starts_with('.') {
                names.insert(name.to_string());
            }
        }
    }
    Ok(names)
}

/// Delete the shared files no checkpoint on disk references; returns their
/// names. `at_start`: also temp files of copies a crash interrupted (at run
/// time one may be an upload in progress, so they are left alone).
pub fn collect_garbage(layout: &Layout, at_start: bool) -> Result<Vec<String>, StoreError> {
    let shared = layout.shared_dir();
    let present = present(&shared, at_start)?;
    if present.is_empty() {
        return Ok(Vec::new());
    }
    let manifests = manifests_on_disk(layout)?;
    let doomed = unreferenced(&present, &referenced(&manifests));
    for name in &doomed {
        let path = shared.join(name);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(StoreError::Io { op: "remove", path, source: e }),
            _ => {}
        }
    }
    if !doomed.is_empty() {
        disk::fsync_dir(&shared)?;
    }
    Ok(doomed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::disk::write_atomic;
    use crate::checkpoint::manifest::{FileEntry, TaskId};
    use crate::types::CheckpointId;
    use std::collections::{BTreeMap, VecDeque};

    /// A splitmix64 stream, seeded.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn upload(layout: &Layout, name: &str) {
        fs::create_dir_all(layout.shared_dir()).unwrap();
        fs::write(layout.shared_dir().join(name), name.as_bytes()).unwrap();
    }

    fn write_manifest(layout: &Layout, id: CheckpointId, files: &BTreeSet<String>) {
        let entries = files.iter().map(|n| FileEntry { name: n.clone(), size: n.len() as u64, crc32c: 0, shared: true }).collect();
        let m = BundleManifest::new(id, 0, vec![TaskId { chain: 1, subtask: 0 }], entries);
        write_atomic(&layout.manifest(id, 0), &m.to_bytes()).unwrap();
    }

    /// Random sequences of complete / abort / retain over one bundle whose
    /// live SST set changes a little each time: after every collection, no
    /// file a retained checkpoint references is gone, and no file is left
    /// that none references (subsumed and aborted uploads are deleted).
    #[test]
    fn random_complete_abort_retain_sequences_never_delete_a_referenced_file() {
        for seed in 0..40 {
            let tmp = tempfile::tempdir().unwrap();
            let layout = Layout::new(tmp.path());
            let mut rng = Rng(seed);
            let retain = 1 + rng.below(3) as usize;
            let mut live: BTreeSet<String> = BTreeSet::new();
            let mut next_sst = 0;
            let mut retained: VecDeque<CheckpointId> = VecDeque::new();
            let mut refs: BTreeMap<CheckpointId, BTreeSet<String>> = BTreeMap::new();
            for id in 1..=60u64 {
                // Compaction: drop some live SSTs, add new ones.
                live.retain(|_| rng.below(4) != 0);
                for _ in 0..1 + rng.below(3) {
                    next_sst += 1;
                    live.insert(format!("b000-{seed:016x}-{next_sst:06}.sst"));
                }
                // The uploader copies what is missing (it checks the disk).
                for f in &live {
                    if !layout.shared_dir().join(f).exists() {
                        upload(&layout, f);
                    }
                }
                fs::create_dir_all(layout.bundle_dir(id, 0)).unwrap();
                if rng.below(4) == 0 {
                    // Abort: the directory goes, then the garbage.
                    disk::remove_checkpoint(&layout, id).unwrap();
                } else {
                    write_manifest(&layout, id, &live);
                    write_atomic(&layout.metadata(id), b"{}").unwrap();
                    refs.insert(id, live.clone());
                    retained.push_back(id);
                    while retained.len() > retain {
                        let old = retained.pop_front().unwrap();
                        disk::remove_checkpoint(&layout, old).unwrap();
                        refs.remove(&old);
                    }
                }
                let deleted = collect_garbage(&layout, false).unwrap();
                let wanted: BTreeSet<String> = refs.values().flatten().cloned().collect();
                for d in &deleted {
                    assert!(!wanted.contains(d), "seed {seed} checkpoint {id}: deleted {d}, which a retained checkpoint references");
                }
                for f in &wanted {
                    assert!(layout.shared_dir().join(f).exists(), "seed {seed} checkpoint {id}: {f} is referenced but gone");
                }
                let on_disk = present(&layout.shared_dir(), true).unwrap();
                let extra: Vec<_> = on_disk.difference(&wanted).collect();
                assert!(extra.is_empty(), "seed {seed} checkpoint {id}: unreferenced files left: {extra:?}");
            }
        }
    }

    #[test]
    fn temp_files_of_copies_go_only_at_start() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = Layout::new(tmp.path());
        upload(&layout, ".b000-x-000001.sst.tmp-1-0");
        upload(&layout, "b000-x-000002.sst");
        assert_eq!(collect_garbage(&layout, false).unwrap(), vec!["b000-x-000002.sst".to_string()]);
        assert!(layout.shared_dir().join(".b000-x-000001.sst.tmp-1-0").exists());
        assert_eq!(collect_garbage(&layout, true).unwrap().len(), 1);
        assert!(collect_garbage(&layout, true).unwrap().is_empty());
    }
}

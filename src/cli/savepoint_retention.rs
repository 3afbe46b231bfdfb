//! `savepoint.on_sigterm_keep`: after a savepoint taken on SIGTERM, the
//! older ones of the pipeline in the same directory are disposed, all but
//! the newest `keep`. Only savepoints whose `_metadata` says `on_sigterm`
//! are ever touched: what a person triggered is theirs to dispose.
//! Without this, every rollout of a StatefulSet would leave one more
//! savepoint per pod behind.

use std::path::{Path, PathBuf};

use crate::checkpoint::disk;
use crate::checkpoint::layout::METADATA_FILE;
use crate::checkpoint::manifest::{Document, Metadata};
use crate::types::Kind;

use super::savepoint::{dispose, dispose_url};

/// What retention did: the savepoints disposed, and those it could not.
#[derive(Debug, Default)]
pub struct Retired {
    pub disposed: Vec<PathBuf>,
    pub failed: Vec<String>,
}

/// Dispose the savepoints of `pipeline` taken on SIGTERM next to `taken`
/// (the one just completed, a directory or an `s3://` URL), all but the
/// newest `keep`; `taken` itself is never disposed. `options` are the
/// pipeline's `storage_options`.
pub fn retire(taken: &Path, pipeline: &str, keep: usize, options: &[(String, String)]) -> Retired {
    let mut out = Retired::default();
    let found = match taken.to_str().filter(|p| crate::checkpoint::remote::is_url(p)) {
        Some(url) => stored(url, options),
        None => on_disk(taken),
    };
    let (taken_name, found) = match found {
        Ok(f) => f,
        Err(why) => {
            out.failed.push(why);
            return out;
        }
    };
    for (location, _) in doomed(&found, &taken_name, pipeline, keep) {
        let result = match location.to_str().filter(|p| crate::checkpoint::remote::is_url(p)) {
            Some(url) => dispose_url(url, options),
            None => dispose(location),
        };
        match result {
            Ok(p) => out.disposed.push(p),
            Err(e) => out.failed.push(e.to_string()),
        }
    }
    out
}

/// The savepoints to dispose of `found` (location → its `_metadata`): of
/// `pipeline`'s savepoints taken on SIGTERM, all but the newest `keep`
/// (by creation time, then id), never `taken`.
fn doomed<'a>(found: &'a [(PathBuf, Metadata)], taken: &Path, pipeline: &str, keep: usize) -> Vec<&'a (PathBuf, Metadata)> {
    let mut ours: Vec<&(PathBuf, Metadata)> =
        found.iter().filter(|(_, md)| md.kind == Kind::Savepoint && md.on_sigterm && md.pipeline == pipeline).collect();
    ours.sort_by_key(|(p, md)| (std::cmp::Reverse(md.created_ms), std::cmp::Reverse(md.checkpoint_id), p.clone()));
    // `taken` counts as kept whatever its clock said.
    let taken_kept = usize::from(ours.iter().any(|(p, _)| p == taken));
    let mut kept = taken_kept;
    ours.into_iter()
        .filter(|(p, _)| {
            if p == taken {
                return false;
            }
            if kept < keep.max(1) {
                kept += 1;
                return false;
            }
            true
        })
        .collect()
}

/// The savepoint directories next to `taken` with a readable `_metadata`.
fn on_disk(taken: &Path) -> Result<(PathBuf, Vec<(PathBuf, Metadata)>), String> {
    let parent = taken.parent().ok_or_else(|| format!("{} has no parent directory", taken.display()))?;
    let entries = std::fs::read_dir(parent).map_err(|e| format!("listing {}: {e}", parent.display()))?;
    let mut found = Vec::new();
    for entry in entries.flatten() {
        // Hidden names are savepoints being written or disposed.
        if entry.file_name().to_str().is_none_or(|n| n.starts_with('.')) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(bytes) = disk::read_regular(&entry.path().join(METADATA_FILE)) else { continue };
        if let Ok(md) = Metadata::from_bytes(&bytes) {
            found.push((entry.path(), md));
        }
    }
    Ok((taken.to_path_buf(), found))
}

/// The savepoints in object storage next to the `taken` URL with a
/// readable `_metadata`, as URLs.
fn stored(taken: &str, options: &[(String, String)]) -> Result<(PathBuf, Vec<(PathBuf, Metadata)>), String> {
    use crate::checkpoint::storage::Storage;
    let taken = taken.trim_end_matches('/');
    let (parent, _) = taken.rsplit_once('/').filter(|(r, _)| r.len() > "s3://".len()).ok_or_else(|| format!("{taken} has no parent"))?;
    let storage = crate::checkpoint::remote::ObjectStorage::open(parent, options).map_err(|e| format!("opening {parent}: {e}"))?;
    let objects = storage.list("").map_err(|e| format!("listing {parent}: {e}"))?;
    let suffix = format!("/{METADATA_FILE}");
    let mut found = Vec::new();
    for name in objects.iter().filter_map(|o| o.key.strip_suffix(&suffix)).filter(|n| !n.contains('/')) {
        let Ok(bytes) = storage.get(&crate::checkpoint::publish::metadata_key(name)) else { continue };
        if let Ok(md) = Metadata::from_bytes(&bytes) {
            found.push((PathBuf::from(storage.url(name)), md));
        }
    }
    Ok((PathBuf::from(taken), found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::manifest::tests::metadata;

    fn sp(name: &str, created_ms: i64, id: u64, on_sigterm: bool) -> (PathBuf, Metadata) {
        let md = Metadata { kind: Kind::Savepoint, created_ms, checkpoint_id: id, on_sigterm, ..metadata(id, vec![0]) };
        (PathBuf::from(name), md)
    }

    fn names(d: Vec<&(PathBuf, Metadata)>) -> Vec<String> {
        d.into_iter().map(|(p, _)| p.display().to_string()).collect()
    }

    #[test]
    fn all_but_the_newest_sigterm_savepoints_go_and_nothing_else() {
        let found = vec![
            sp("a", 100, 1, true),
            sp("b", 200, 2, true),
            sp("manual", 250, 3, false),
            sp("c", 300, 4, true),
            sp("d", 400, 5, true),
            (PathBuf::from("other"), Metadata { pipeline: "payments".into(), ..sp("x", 50, 9, true).1 }),
            (PathBuf::from("chk"), Metadata { kind: Kind::Checkpoint, ..sp("x", 60, 9, true).1 }),
        ];
        assert_eq!(names(doomed(&found, Path::new("d"), "orders", 2)), ["b", "a"]);
        assert_eq!(names(doomed(&found, Path::new("d"), "orders", 1)), ["c", "b", "a"]);
        assert!(doomed(&found, Path::new("d"), "orders", 10).is_empty());
        // 0 is refused by the config; here it means 1.
        assert_eq!(names(doomed(&found, Path::new("d"), "orders", 0)), ["c", "b", "a"]);
    }

    #[test]
    fn the_savepoint_just_taken_is_kept_even_if_its_clock_was_behind() {
        let found = vec![sp("old", 100, 1, true), sp("skewed", 50, 7, true), sp("newer", 300, 6, true)];
        assert_eq!(names(doomed(&found, Path::new("skewed"), "orders", 2)), ["old"]);
        assert_eq!(names(doomed(&found, Path::new("skewed"), "orders", 1)), ["newer", "old"]);
        // Equal times: the higher id is newer.
        let tie = vec![sp("x", 100, 1, true), sp("y", 100, 2, true)];
        assert_eq!(names(doomed(&tie, Path::new("y"), "orders", 1)), ["x"]);
    }
}

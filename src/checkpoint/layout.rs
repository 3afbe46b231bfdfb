//! Every on-disk path of a state directory, built in one place so that the
//! writer (coordinator, arbiters, backends), the validator and the CLI can
//! never disagree about where something lives.
//!
//! ```text
//! <state_dir>/PIPELINE                                 name of the owning pipeline
//! <state_dir>/LOCK                                     flock of the running process (its PID inside)
//! <state_dir>/LINEAGE                                  where the current history began (see `lineage`)
//! <state_dir>/control.sock                             control socket of the running process
//! <state_dir>/checkpoints/chk-0000007/_metadata        written last: the commit point
//! <state_dir>/checkpoints/chk-0000007/bundle-003/MANIFEST
//! <state_dir>/checkpoints/chk-0000007/bundle-003/<state files>
//! <state_dir>/checkpoints/shared/b003-<incarnation>-000012.sst   SSTs of incremental checkpoints
//! <state_dir>/savepoints/
//! <state_dir>/local/bundle-003/db/                     working RocksDB of a bundle
//! <state_dir>/local/bundle-003/chk-0000007/             its RocksDB checkpoint (hard links) for checkpoint 7
//! ```

use std::path::{Component, Path, PathBuf};

use crate::types::{BundleId, CheckpointId};

pub const PIPELINE_FILE: &str = "PIPELINE";
pub const LOCK_FILE: &str = "LOCK";
pub const LINEAGE_FILE: &str = "LINEAGE";
pub const CONTROL_SOCKET: &str = "control.sock";
pub const CHECKPOINTS_DIR: &str = "checkpoints";
pub const SAVEPOINTS_DIR: &str = "savepoints";
pub const LOCAL_DIR: &str = "local";
pub const SHARED_DIR: &str = "shared";
pub const METADATA_FILE: &str = "_metadata";
pub const MANIFEST_FILE: &str = "MANIFEST";

const CHECKPOINT_PREFIX: &str = "chk-";
const BUNDLE_PREFIX: &str = "bundle-";

/// The paths of one state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    state_dir: PathBuf,
}

impl Layout {
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Layout { state_dir: state_dir.into() }
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Holds the pipeline name, to refuse a directory written by another pipeline.
    pub fn pipeline_file(&self) -> PathBuf {
        self.state_dir.join(PIPELINE_FILE)
    }

    /// Locked by the process running on the directory (`checkpoint::lock`).
    pub fn lock_file(&self) -> PathBuf {
        self.state_dir.join(LOCK_FILE)
    }

    /// Where the current history of checkpoints began (`checkpoint::lineage`).
    pub fn lineage_file(&self) -> PathBuf {
        self.state_dir.join(LINEAGE_FILE)
    }

    pub fn control_socket(&self) -> PathBuf {
        self.state_dir.join(CONTROL_SOCKET)
    }

    pub fn checkpoints_dir(&self) -> PathBuf {
        self.state_dir.join(CHECKPOINTS_DIR)
    }

    pub fn savepoints_dir(&self) -> PathBuf {
        self.state_dir.join(SAVEPOINTS_DIR)
    }

    /// `checkpoints/shared/`: files referenced by several checkpoints.
    pub fn shared_dir(&self) -> PathBuf {
        self.checkpoints_dir().join(SHARED_DIR)
    }

    /// Working state of the running process (RocksDB), never restored from directly.
    pub fn local_dir(&self) -> PathBuf {
        self.state_dir.join(LOCAL_DIR)
    }

    /// `local/bundle-003`: the working RocksDB of a bundle and its local checkpoints.
    pub fn local_bundle_dir(&self, bundle: BundleId) -> PathBuf {
        self.local_dir().join(bundle_dir_name(bundle))
    }

    pub fn checkpoint_dir(&self, id: CheckpointId) -> PathBuf {
        self.checkpoints_dir().join(checkpoint_dir_name(id))
    }

    pub fn metadata(&self, id: CheckpointId) -> PathBuf {
        self.checkpoint_dir(id).join(METADATA_FILE)
    }

    pub fn bundle_dir(&self, id: CheckpointId, bundle: BundleId) -> PathBuf {
        self.checkpoint_dir(id).join(bundle_dir_name(bundle))
    }

    pub fn manifest(&self, id: CheckpointId, bundle: BundleId) -> PathBuf {
        self.bundle_dir(id, bundle).join(MANIFEST_FILE)
    }
}

/// `chk-0000007`.
pub fn checkpoint_dir_name(id: CheckpointId) -> String {
    format!("{CHECKPOINT_PREFIX}{id:07}")
}

/// `bundle-003`.
pub fn bundle_dir_name(bundle: BundleId) -> String {
    format!("{BUNDLE_PREFIX}{bundle:03}")
}

/// The id of a `chk-NNNNNNN` name; None for anything else, including names
/// that would not be written back the same way (`chk-7`, `chk-00000007`).
pub fn parse_checkpoint_dir_name(name: &str) -> Option<CheckpointId> {
    let id = parse_padded(name.strip_prefix(CHECKPOINT_PREFIX)?)?;
    (checkpoint_dir_name(id) == name).then_some(id)
}

/// The bundle of a `bundle-NNN` name; None for anything else.
pub fn parse_bundle_dir_name(name: &str) -> Option<BundleId> {
    let digits = name.strip_prefix(BUNDLE_PREFIX)?;
    let bundle = BundleId::try_from(parse_padded(digits)?).ok()?;
    (bundle_dir_name(bundle) == name).then_some(bundle)
}

fn parse_padded(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// True if `name` (a file named in a MANIFEST) stays inside the bundle dir:
/// relative, non-empty, only normal components (no `..`, no root, no `.`).
pub fn is_safe_relative(name: &str) -> bool {
    let path = Path::new(name);
    !name.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_where_the_design_says() {
        let l = Layout::new("/s");
        assert_eq!(l.pipeline_file(), Path::new("/s/PIPELINE"));
        assert_eq!(l.control_socket(), Path::new("/s/control.sock"));
        assert_eq!(l.lock_file(), Path::new("/s/LOCK"));
        assert_eq!(l.lineage_file(), Path::new("/s/LINEAGE"));
        assert_eq!(l.savepoints_dir(), Path::new("/s/savepoints"));
        assert_eq!(l.metadata(7), Path::new("/s/checkpoints/chk-0000007/_metadata"));
        assert_eq!(l.manifest(7, 3), Path::new("/s/checkpoints/chk-0000007/bundle-003/MANIFEST"));
        assert_eq!(l.state_dir(), Path::new("/s"));
        assert_eq!(l.local_bundle_dir(3), Path::new("/s/local/bundle-003"));
    }

    #[test]
    fn checkpoint_names_round_trip() {
        for id in [0, 7, 9_999_999, 10_000_000, u64::MAX] {
            assert_eq!(parse_checkpoint_dir_name(&checkpoint_dir_name(id)), Some(id));
        }
        assert_eq!(checkpoint_dir_name(12_345_678), "chk-12345678");
    }

    #[test]
    fn foreign_names_are_not_checkpoints() {
        for name in ["chk-7", "chk-00000007", "chk-", "chk-000000a", "chk-+000007", "shared", "x-0000007", "chk-0000007.tmp"] {
            assert_eq!(parse_checkpoint_dir_name(name), None, "{name}");
        }
        assert_eq!(parse_checkpoint_dir_name("chk-99999999999999999999"), None);
    }

    #[test]
    fn bundle_names_round_trip() {
        assert_eq!(parse_bundle_dir_name("bundle-003"), Some(3));
        assert_eq!(parse_bundle_dir_name(&bundle_dir_name(1234)), Some(1234));
        for name in ["bundle-3", "bundle-0003", "bundle-", "MANIFEST", "bundle-99999999999"] {
            assert_eq!(parse_bundle_dir_name(name), None, "{name}");
        }
    }

    #[test]
    fn only_names_inside_the_bundle_are_safe() {
        assert!(is_safe_relative("state-0.bin"));
        assert!(is_safe_relative("db/000012.sst"));
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "./x"] {
            assert!(!is_safe_relative(bad), "{bad}");
        }
    }
}

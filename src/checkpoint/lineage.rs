//! `<state.dir>/LINEAGE`: where the current history of a state directory
//! began, so that `--restore latest` never goes back before it.
//!
//! Every run that does not resume `latest` starts a new lineage: from the
//! beginning, or from the checkpoint or savepoint it was given. Its
//! checkpoints get ids from `first_id` on; checkpoints with lower ids belong
//! to earlier lineages (the run before a savepoint restore, or the run a
//! fresh start replaced) and are never picked by `latest`. When no
//! checkpoint of the lineage is valid, `latest` starts where the lineage
//! did: from the beginning, or from the same savepoint again (refused if it
//! was moved or disposed). This is what Flink does by adding the restored
//! savepoint to the job's checkpoint history.
//!
//! The file is written atomically, with a checksum, before the run's first
//! checkpoint can exist; a damaged one refuses `latest` (exit 2).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::disk::{self, StoreError};
use super::layout::Layout;
use super::manifest::{DocError, Document, FORMAT_VERSION};
use crate::types::CheckpointId;
use crate::types::Kind;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lineage {
    pub version: u32,
    pub pipeline: String,
    /// The first checkpoint id of the run that began the lineage.
    pub first_id: CheckpointId,
    /// What that run restored; None: it started from the beginning.
    pub restored: Option<RestoredFrom>,
    /// A savepoint set (a rescale): every path of it (`restored` names
    /// the first); `latest` restores the set again while no checkpoint of
    /// the lineage completed. Absent in records of older weirs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<PathBuf>,
    pub crc32c: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoredFrom {
    /// Relative to the state directory when inside it (so the directory
    /// may be moved), else absolute.
    pub path: PathBuf,
    pub checkpoint_id: CheckpointId,
    pub kind: Kind,
}

impl Document for Lineage {
    fn crc_field(&mut self) -> &mut u32 {
        &mut self.crc32c
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LineageError {
    #[error("{path}: {source}; restore a checkpoint or savepoint by path (or start without --restore) to begin a new lineage")]
    Damaged { path: PathBuf, source: DocError },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Lineage {
    pub fn new(pipeline: &str, first_id: CheckpointId, restored: Option<RestoredFrom>) -> Self {
        Lineage { version: FORMAT_VERSION, pipeline: pipeline.into(), first_id, restored, set: Vec::new(), crc32c: 0 }
    }

    /// The restored directory, resolved against the state directory.
    pub fn restored_dir(&self, layout: &Layout) -> Option<PathBuf> {
        self.restored.as_ref().map(|r| layout.state_dir().join(&r.path))
    }
}

/// Read the lineage record (None: there is none, e.g. a directory written
/// by an older weir).
pub fn read(layout: &Layout) -> Result<Option<Lineage>, LineageError> {
    let path = layout.lineage_file();
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StoreError::Io { op: "read", path, source }.into()),
    };
    Lineage::from_bytes(&bytes).map(Some).map_err(|source| LineageError::Damaged { path, source })
}

pub fn write(layout: &Layout, lineage: &Lineage) -> Result<(), StoreError> {
    disk::write_atomic(&layout.lineage_file(), &lineage.to_bytes())
}

/// How a restored directory is recorded: relative when inside the state
/// directory, else absolute (both made canonical when they exist).
pub fn record_path(layout: &Layout, dir: &Path) -> PathBuf {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()));
    match std::fs::canonicalize(layout.state_dir()) {
        Ok(state) => dir.strip_prefix(&state).map(Path::to_path_buf).unwrap_or(dir),
        Err(_) => dir,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lineage_round_trips_and_damage_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Layout::new(tmp.path());
        assert_eq!(read(&l).unwrap(), None);
        let from = RestoredFrom { path: "savepoints/sp-0000007".into(), checkpoint_id: 7, kind: Kind::Savepoint };
        let lineage = Lineage::new("orders", 11, Some(from));
        write(&l, &lineage).unwrap();
        let back = read(&l).unwrap().unwrap();
        assert_eq!(Lineage { crc32c: 0, ..back.clone() }, lineage);
        assert_eq!(back.restored_dir(&l).unwrap(), tmp.path().join("savepoints/sp-0000007"));
        let text = std::fs::read_to_string(l.lineage_file()).unwrap().replace("11", "12");
        std::fs::write(l.lineage_file(), text).unwrap();
        assert!(matches!(read(&l), Err(LineageError::Damaged { .. })));
    }

    #[test]
    fn paths_inside_the_state_dir_are_relative() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Layout::new(tmp.path().join("state"));
        std::fs::create_dir_all(l.savepoints_dir().join("sp-0000003")).unwrap();
        assert_eq!(record_path(&l, &l.savepoints_dir().join("sp-0000003")), Path::new("savepoints/sp-0000003"));
        let outside = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        assert_eq!(record_path(&l, &outside), std::fs::canonicalize(&outside).unwrap());
    }
}

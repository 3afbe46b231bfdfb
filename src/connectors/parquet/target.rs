//! Where a Parquet sink's files go and how they become visible.
//!
//! A file is written and staged under a hidden name in the staging area,
//! `.staging/` of the output (a directory, or a key prefix on S3), which
//! Hive, Spark, Trino, Athena and DuckDB's Hive partitioning skip as they
//! skip every name starting with `.` or `_`. Publishing moves it to its
//! final name: a rename in a local directory (atomic); on S3 a server-side
//! copy, then the staged object is deleted. A staged file that is gone was
//! published (the copy came before the delete), so publishing again is a
//! no-op: that makes a restore idempotent.
//!
//! Locally a file is written where it is staged, then fsynced; on S3 it is
//! built in memory and uploaded when staged (one object per file: keep
//! `max_file_bytes` within what the process may hold per open file).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::part::Out;
use crate::checkpoint::storage::Storage;

pub const STAGING: &str = ".staging";

pub enum Target {
    Local { dir: PathBuf },
    Remote { store: Arc<dyn Storage> },
}

impl Target {
    pub fn open(path: &str, options: &[(String, String)]) -> Result<Target, String> {
        if crate::checkpoint::remote::is_url(path) {
            let store = crate::checkpoint::remote::ObjectStorage::open(path, options)?;
            return Ok(Target::Remote { store: Arc::new(store) });
        }
        let dir = PathBuf::from(path);
        let staging = dir.join(STAGING);
        fs::create_dir_all(&staging).map_err(|e| format!("creating {}: {e}", staging.display()))?;
        Ok(Target::Local { dir })
    }

    /// Where `rel` (a final name, or a staged one) is, for messages.
    pub fn show(&self, rel: &str) -> String {
        match self {
            Target::Local { dir } => dir.join(rel).display().to_string(),
            Target::Remote { store } => store.url(rel),
        }
    }

    fn staged_path(dir: &Path, hidden: &str) -> PathBuf {
        dir.join(STAGING).join(hidden)
    }

    /// A new output for the staged file `hidden`; None when the name is taken.
    pub fn create(&self, hidden: &str) -> Result<Option<Out>, String> {
        match self {
            Target::Local { dir } => {
                let path = Self::staged_path(dir, hidden);
                match fs::File::create_new(&path) {
                    Ok(f) => Ok(Some(Out::File(io::BufWriter::with_capacity(1 << 20, f)))),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
                    Err(e) => Err(format!("creating {}: {e}", path.display())),
                }
            }
            Target::Remote { .. } => Ok(Some(Out::Memory(Vec::new()))),
        }
    }

    /// Make the finished file `hidden` durable in the staging area.
    pub fn stage(&self, hidden: &str, out: Out) -> Result<(), String> {
        match (self, out) {
            (Target::Local { dir }, Out::File(w)) => {
                let path = Self::staged_path(dir, hidden);
                let file = w.into_inner().map_err(|e| format!("writing {}: {}", path.display(), e.error()))?;
                file.sync_all().map_err(|e| format!("syncing {}: {e}", path.display()))
            }
            (Target::Remote { store }, Out::Memory(bytes)) => {
                let key = format!("{STAGING}/{hidden}");
                store.put(&key, &bytes).map_err(|e| e.to_string())
            }
            _ => unreachable!("outputs are made by `create` of the same target"),
        }
    }

    /// Move staged `hidden` to `final_name`. False when it is not staged
    /// (published before: the final file may since have been moved away).
    pub fn publish(&self, hidden: &str, final_name: &str) -> Result<bool, String> {
        match self {
            Target::Local { dir } => {
                let (from, to) = (Self::staged_path(dir, hidden), dir.join(final_name));
                if let Some(parent) = to.parent() {
                    fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
                }
                match fs::rename(&from, &to) {
                    Ok(()) => {
                        if let Some(parent) = to.parent() {
                            sync_dir(parent)?;
                        }
                        Ok(true)
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound && !from.exists() => Ok(false),
                    Err(e) => Err(format!("publishing {}: {e}", to.display())),
                }
            }
            Target::Remote { store } => {
                let key = format!("{STAGING}/{hidden}");
                match store.copy(&key, final_name) {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => return Ok(false),
                    Err(e) => return Err(e.to_string()),
                }
                store.delete(&key).map_err(|e| e.to_string())?;
                Ok(true)
            }
        }
    }

    /// Write a finished file straight to its final name (no checkpoints).
    pub fn publish_now(&self, hidden: &str, out: Out, final_name: &str) -> Result<(), String> {
        match (self, out) {
            (Target::Remote { store }, Out::Memory(bytes)) => store.put(final_name, &bytes).map_err(|e| e.to_string()),
            (_, out) => {
                self.stage(hidden, out)?;
                self.publish(hidden, final_name).map(|_| ())
            }
        }
    }

    /// The names in the staging area.
    pub fn staged(&self) -> Result<Vec<String>, String> {
        match self {
            Target::Local { dir } => {
                let staging = dir.join(STAGING);
                let entries = fs::read_dir(&staging).map_err(|e| format!("listing {}: {e}", staging.display()))?;
                Ok(entries.flatten().filter_map(|e| e.file_name().into_string().ok()).collect())
            }
            Target::Remote { store } => {
                let prefix = format!("{STAGING}/");
                let objects = store.list(&prefix).map_err(|e| e.to_string())?;
                Ok(objects.into_iter().filter_map(|o| o.key.strip_prefix(&prefix).map(str::to_string)).collect())
            }
        }
    }

    /// Delete the staged `hidden` (gone already is fine).
    pub fn discard(&self, hidden: &str) -> Result<(), String> {
        match self {
            Target::Local { dir } => match fs::remove_file(Self::staged_path(dir, hidden)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(format!("removing {}: {e}", self.show(hidden))),
                _ => Ok(()),
            },
            Target::Remote { store } => store.delete(&format!("{STAGING}/{hidden}")).map_err(|e| e.to_string()),
        }
    }
}

fn sync_dir(dir: &Path) -> Result<(), String> {
    crate::checkpoint::disk::sync_dir(dir).map_err(|e| format!("syncing directory {}: {e}", dir.display()))
}

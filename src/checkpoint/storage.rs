//! The storage under checkpoints: one small trait with a local file system
//! and an S3-compatible object store implementation (`remote`), so that the
//! commit protocol above it (`publish`) is one piece of code.
//!
//! Keys are `/`-separated and relative to the storage's root: the
//! `checkpoints/` directory of a state directory, or `s3://bucket/prefix`.
//! `chk-0000007/_metadata` is the commit point: it is put last, with
//! [`Storage::put_if_absent`] (a hard link on a file system,
//! `If-None-Match: *` on S3), so a checkpoint exists iff its `_metadata`
//! does. Local writes keep the durability rules of `disk` (temp file,
//! fsync, rename or link, fsync of the directory); reads open regular files
//! only, never through a symbolic link.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::disk::{self, StoreError};
use super::layout;

/// One object (or file) under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub key: String,
    pub size: u64,
}

/// A storage failure, naming the object (URL or path) it concerns.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{url} does not exist")]
    NotFound { url: String },
    #[error("{url} exists already")]
    AlreadyExists { url: String },
    #[error("{url} changed meanwhile (it is not the version expected)")]
    Conflict { url: String },
    #[error("cannot {op} {url}: {message}")]
    Failed { op: &'static str, url: String, message: String },
    #[error(transparent)]
    Local(#[from] StoreError),
}

impl StorageError {
    pub fn is_not_found(&self) -> bool {
        match self {
            StorageError::NotFound { .. } => true,
            StorageError::Local(StoreError::Io { source, .. }) => source.kind() == io::ErrorKind::NotFound,
            _ => false,
        }
    }
}

/// Where checkpoints (or savepoints) are stored. Blocking calls: callers
/// run them off the task threads (`spawn_blocking`, `blocking::call`).
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// The root, for messages and the lineage record (`s3://bucket/prefix`,
    /// or a directory). Never holds a credential.
    fn root(&self) -> String;

    /// Where `key` is, for messages.
    fn url(&self, key: &str) -> String {
        format!("{}/{key}", self.root().trim_end_matches('/'))
    }

    /// Put `bytes` at `key`, replacing what is there, atomically.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError>;

    /// Put the content of the local regular file `from` at `key`.
    fn put_file(&self, key: &str, from: &Path) -> Result<(), StorageError>;

    /// Put many local files (a storage may run them concurrently); the
    /// first failure ends the batch.
    fn put_many(&self, files: Vec<(String, PathBuf)>) -> Result<(), StorageError> {
        files.iter().try_for_each(|(key, path)| self.put_file(key, path))
    }

    /// Put `bytes` at `key` unless something is there (then
    /// [`StorageError::AlreadyExists`]): the commit point.
    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError>;

    fn get(&self, key: &str) -> Result<Vec<u8>, StorageError>;

    /// Copy the object at `key` into the new local file `to`, fsynced.
    fn get_to_file(&self, key: &str, to: &Path) -> Result<(), StorageError>;

    /// Copy many objects into new local files (a storage may run them
    /// concurrently); the first failure ends the batch.
    fn get_many(&self, files: Vec<(String, PathBuf)>) -> Result<(), StorageError> {
        files.iter().try_for_each(|(key, to)| self.get_to_file(key, to))
    }

    /// Every object whose key starts with `prefix`, in key order.
    fn list(&self, prefix: &str) -> Result<Vec<Object>, StorageError>;

    /// Delete `key`; a missing object is not an error.
    fn delete(&self, key: &str) -> Result<(), StorageError>;

    /// Copy the object at `from` to `to`, replacing what is there;
    /// [`StorageError::NotFound`] when `from` is missing. (S3: a copy on the
    /// server, no bytes through this process.)
    fn copy(&self, from: &str, to: &str) -> Result<(), StorageError> {
        let bytes = self.get(from)?;
        self.put(to, &bytes)
    }

    /// The bytes at `key` and their version (the ETag on S3), for
    /// [`Storage::put_conditional`].
    fn get_versioned(&self, key: &str) -> Result<(Vec<u8>, String), StorageError>;

    /// Put the small `bytes` at `key` only if the object is as expected:
    /// absent (`expected` None, else [`StorageError::AlreadyExists`]) or
    /// still at version `expected` (else [`StorageError::Conflict`]);
    /// returns the new version. The ownership lease (`lease`) is built on it.
    fn put_conditional(&self, key: &str, bytes: &[u8], expected: Option<&str>) -> Result<String, StorageError>;
}

/// A directory of the local file system (today's `checkpoints/`).
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
}

impl LocalStorage {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalStorage { root: root.into() }
    }

    /// The path of `key`; refused unless it stays under the root.
    pub fn path(&self, key: &str) -> Result<PathBuf, StorageError> {
        if !layout::is_safe_relative(key) {
            return Err(StoreError::UnsafeName { path: self.root.clone(), name: key.into() }.into());
        }
        Ok(self.root.join(key))
    }
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StorageError + 'a {
    move |source| StorageError::Local(StoreError::io(op, path)(source))
}

impl Storage for LocalStorage {
    fn root(&self) -> String {
        self.root.display().to_string()
    }

    fn url(&self, key: &str) -> String {
        self.root.join(key).display().to_string()
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        Ok(disk::write_atomic(&self.path(key)?, bytes)?)
    }

    fn put_file(&self, key: &str, from: &Path) -> Result<(), StorageError> {
        let to = self.path(key)?;
        // The state directory's own checkpoint files are written in place
        // (fsynced by `StateFileWriter`): nothing to copy.
        if to == from {
            return Ok(());
        }
        let bytes = disk::read_regular(from).map_err(io_err("read", from))?;
        self.put(key, &bytes)
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let path = self.path(key)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
        // Written and fsynced under a temp name, then linked to its name:
        // link(2) never replaces, so an existing `_metadata` is never taken.
        let tmp = dir.join(format!(".{}.tmp-{}", path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(), std::process::id()));
        let _ = fs::remove_file(&tmp);
        let written = (|| {
            let mut f = fs::File::create(&tmp).map_err(io_err("create", &tmp))?;
            io::Write::write_all(&mut f, bytes).map_err(io_err("write", &tmp))?;
            f.sync_all().map_err(io_err("fsync", &tmp))?;
            match fs::hard_link(&tmp, &path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(StorageError::AlreadyExists { url: path.display().to_string() }),
                Err(e) => Err(io_err("link into", &path)(e)),
            }
        })();
        let _ = fs::remove_file(&tmp);
        written?;
        Ok(disk::fsync_dir(dir)?)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        let path = self.path(key)?;
        disk::read_regular(&path).map_err(io_err("read", &path))
    }

    fn get_to_file(&self, key: &str, to: &Path) -> Result<(), StorageError> {
        let bytes = self.get(key)?;
        write_new_file(to, &bytes)
    }

    fn list(&self, prefix: &str) -> Result<Vec<Object>, StorageError> {
        // Only below the directory part of the prefix (`chk-0000007/`, `shared/`).
        let dir = prefix.rfind('/').map_or("", |i| &prefix[..i]);
        if !dir.is_empty() && !layout::is_safe_relative(dir) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        walk(&self.root.join(dir), dir, &mut out)?;
        out.retain(|o| o.key.starts_with(prefix));
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        let path = self.path(key)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(disk::fsync_dir(path.parent().unwrap_or(Path::new(".")))?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove", &path)(e)),
        }
    }

    fn get_versioned(&self, key: &str) -> Result<(Vec<u8>, String), StorageError> {
        let bytes = self.get(key)?;
        let version = local_version(&bytes);
        Ok((bytes, version))
    }

    /// Compare and replace are two steps here: on a file system the state
    /// directory's `flock` keeps a second process away, not this.
    fn put_conditional(&self, key: &str, bytes: &[u8], expected: Option<&str>) -> Result<String, StorageError> {
        match expected {
            None => self.put_if_absent(key, bytes)?,
            Some(v) => {
                let url = self.url(key);
                match self.get_versioned(key) {
                    Ok((_, now)) if now == v => self.put(key, bytes)?,
                    Ok(_) => return Err(StorageError::Conflict { url }),
                    Err(e) if e.is_not_found() => return Err(StorageError::Conflict { url }),
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(local_version(bytes))
    }
}

/// A file's version: its checksum and length.
fn local_version(bytes: &[u8]) -> String {
    format!("{:08x}-{}", crc32c::crc32c(bytes), bytes.len())
}

/// Regular files below `dir` (hidden temp files skipped), keys relative to the root.
fn walk(dir: &Path, rel: &str, out: &mut Vec<Object>) -> Result<(), StorageError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("list", dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err("list", dir))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
        if name.starts_with('.') {
            continue;
        }
        let key = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
        let meta = fs::symlink_metadata(entry.path()).map_err(io_err("list", dir))?;
        if meta.is_dir() {
            walk(&entry.path(), &key, out)?;
        } else if meta.is_file() {
            out.push(Object { key, size: meta.len() });
        }
    }
    Ok(())
}

/// Create `to` (and its parents) with `bytes`, fsynced; never replaces a file.
pub fn write_new_file(to: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let dir = to.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
    let mut f = fs::OpenOptions::new().write(true).create_new(true).open(to).map_err(io_err("create", to))?;
    io::Write::write_all(&mut f, bytes).map_err(io_err("write", to))?;
    f.sync_all().map_err(io_err("fsync", to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_point_is_never_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(tmp.path());
        s.put_if_absent("chk-0000001/_metadata", b"one").unwrap();
        let err = s.put_if_absent("chk-0000001/_metadata", b"two").unwrap_err();
        assert!(matches!(err, StorageError::AlreadyExists { .. }), "{err}");
        assert_eq!(s.get("chk-0000001/_metadata").unwrap(), b"one");
        let names: Vec<_> = fs::read_dir(tmp.path().join("chk-0000001")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec!["_metadata"], "no temp file is left");
    }

    #[test]
    fn list_get_delete_round_trip_and_keys_stay_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(tmp.path());
        s.put("chk-0000002/bundle-000/MANIFEST", b"m").unwrap();
        s.put("chk-0000002/_metadata", b"md").unwrap();
        s.put("shared/a.sst", b"sst").unwrap();
        let keys: Vec<_> = s.list("chk-").unwrap().into_iter().map(|o| o.key).collect();
        assert_eq!(keys, vec!["chk-0000002/_metadata", "chk-0000002/bundle-000/MANIFEST"]);
        s.delete("chk-0000002/_metadata").unwrap();
        s.delete("chk-0000002/_metadata").unwrap();
        assert!(s.get("chk-0000002/_metadata").unwrap_err().is_not_found());
        assert!(s.put("../escape", b"x").is_err());
        let to = tmp.path().join("copy/sst");
        s.get_to_file("shared/a.sst", &to).unwrap();
        assert_eq!(fs::read(&to).unwrap(), b"sst");
        assert!(s.get_to_file("shared/a.sst", &to).is_err(), "an existing file is never replaced");
    }
}

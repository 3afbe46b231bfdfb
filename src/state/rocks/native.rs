//! Native (incremental) checkpoints of a bundle's DB.
//!
//! - [`BundleDb::local_checkpoint`]: RocksDB's checkpoint (flush + hard
//!   links) of the whole DB into `local/bundle-BBB/chk-N`. Consistent only
//!   if no subtask of the bundle writes meanwhile: the runtime's rendezvous
//!   guarantees that.
//! - [`Uploader::upload`]: copies the SST files not yet in
//!   `checkpoints/shared/` there once, under a name no other DB incarnation
//!   can produce (`b<bundle>-<incarnation>-<sst>`), and the small private
//!   files (MANIFEST-*, CURRENT, OPTIONS-*) into the checkpoint's bundle
//!   directory under `db/`; returns every file's entry (size, CRC32C) for
//!   the bundle MANIFEST.
//! - [`restore`]: rebuilds the working DB from a checkpoint: SSTs hard-linked
//!   from the local checkpoint when it matches (local recovery) or else from
//!   `shared/`, private files copied.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::checkpoint::Checkpoint;

use super::{BundleDb, RocksOptions};
use crate::checkpoint::disk::{self, StoreError};
use crate::checkpoint::layout::checkpoint_dir_name;
use crate::checkpoint::manifest::FileEntry;
use crate::faults;
use crate::state::StateError;
use crate::types::{BundleId, CheckpointId};

pub use crate::state::native_format::{remove_other_bundles, DB_SUBDIR, NATIVE_MARKER};

/// A RocksDB checkpoint in `local/bundle-BBB/chk-N`.
#[derive(Debug)]
pub struct LocalCheckpoint {
    pub id: CheckpointId,
    pub dir: PathBuf,
}

impl BundleDb {
    /// RocksDB's checkpoint of the whole DB (every column family) into
    /// `<local bundle dir>/chk-N`: memtables are flushed, SSTs hard-linked.
    pub fn local_checkpoint(&self, id: CheckpointId) -> Result<LocalCheckpoint, StateError> {
        let dir = self.local_root().join(checkpoint_dir_name(id));
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(super::backend_error("cannot remove", &dir, e)),
            _ => {}
        }
        let cp = Checkpoint::new(&self.db).map_err(|e| super::backend_error("cannot checkpoint", &self.path, e))?;
        cp.create_checkpoint(&dir).map_err(|e| super::backend_error("cannot create the RocksDB checkpoint", &dir, e))?;
        Ok(LocalCheckpoint { id, dir })
    }

    /// `local/bundle-BBB`: the working DB's parent, holding the local checkpoints.
    pub fn local_root(&self) -> PathBuf {
        self.path.parent().map(Path::to_path_buf).unwrap_or_else(|| self.path.clone())
    }
}

/// Remove the local checkpoints of a bundle other than `keep`, older than
/// `below`, and any RocksDB checkpoint a crash left half made (`*.tmp`).
pub fn retain_local(local_root: &Path, keep: Option<CheckpointId>, below: CheckpointId) {
    let Ok(entries) = fs::read_dir(local_root) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let unfinished = name.starts_with("chk-") && name.ends_with(".tmp");
        let old = crate::checkpoint::layout::parse_checkpoint_dir_name(name).is_some_and(|id| Some(id) != keep && id < below);
        if unfinished || old {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// A shared file the bundle's DB uses: its name in `shared/`, size and CRC.
#[derive(Debug, Clone)]
struct Shared {
    name: String,
    size: u64,
    crc32c: u32,
}

/// What one upload copied.
#[derive(Debug, Default, Clone, Copy)]
pub struct UploadStats {
    /// Bytes newly copied into `shared/` and into the bundle directory.
    pub new_bytes: u64,
    pub new_files: u64,
    /// Bytes of SSTs an earlier checkpoint had already copied.
    pub reused_bytes: u64,
}

/// Copies a bundle's local checkpoints into checkpoint storage, each SST once.
pub struct Uploader {
    bundle: BundleId,
    /// Unique per opened DB: SST numbers repeat across incarnations.
    incarnation: String,
    /// Local SST name (`000123.sst`) -> its shared file.
    known: HashMap<String, Shared>,
}

/// A name unique to this process start (time in ns and pid, hex).
fn new_incarnation() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:016x}", (nanos as u64) ^ ((std::process::id() as u64) << 48))
}

/// The local SST name inside a shared name `b000-<incarnation>-000123.sst`.
pub fn local_name(shared: &str) -> Option<&str> {
    let mut parts = shared.splitn(3, '-');
    let (b, inc, local) = (parts.next()?, parts.next()?, parts.next()?);
    (b.starts_with('b') && !inc.is_empty() && local.ends_with(".sst")).then_some(local)
}

impl Uploader {
    pub fn new(bundle: BundleId) -> Self {
        Uploader { bundle, incarnation: new_incarnation(), known: HashMap::new() }
    }

    /// Copy what `local` needs into storage: SSTs into `shared_dir` (those
    /// not there yet), private files into `bundle_dir/db/`. `bundle_dir`
    /// must exist (an aborted checkpoint's directory is not brought back).
    pub fn upload(
        &mut self,
        local: &LocalCheckpoint,
        bundle_dir: &Path,
        shared_dir: &Path,
    ) -> Result<(Vec<FileEntry>, UploadStats), StoreError> {
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { op, path, source }
        };
        let private_dir = bundle_dir.join(DB_SUBDIR);
        fs::create_dir(&private_dir).map_err(io("create", &private_dir))?;
        fs::create_dir_all(shared_dir).map_err(io("create", shared_dir))?;
        let mut names: Vec<String> = Vec::new();
        for e in fs::read_dir(&local.dir).map_err(io("list", &local.dir))? {
            let e = e.map_err(io("list", &local.dir))?;
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        let mut entries = Vec::with_capacity(names.len());
        let mut stats = UploadStats::default();
        for name in names {
            let src = local.dir.join(&name);
            if name.ends_with(".sst") {
                let size = fs::metadata(&src).map_err(io("stat", &src))?.len();
                let there = self.known.get(&name).filter(|s| s.size == size && file_size(&shared_dir.join(&s.name)) == Some(size));
                let shared = match there {
                    Some(s) => {
                        stats.reused_bytes += size;
                        s.clone()
                    }
                    None => {
                        let shared_name = format!("b{:03}-{}-{name}", self.bundle, self.incarnation);
                        if faults::get().fail_shared_copy() {
                            let e = io::Error::other("injected failure (shared_copy_fail)");
                            return Err(io("copy into", &shared_dir.join(&shared_name))(e));
                        }
                        let (size, crc32c) = copy_synced(&src, &shared_dir.join(&shared_name), true)?;
                        stats.new_bytes += size;
                        stats.new_files += 1;
                        let s = Shared { name: shared_name, size, crc32c };
                        self.known.insert(name.clone(), s.clone());
                        s
                    }
                };
                entries.push(FileEntry { name: shared.name, size: shared.size, crc32c: shared.crc32c, shared: true });
            } else {
                let (size, crc32c) = copy_synced(&src, &private_dir.join(&name), false)?;
                stats.new_bytes += size;
                stats.new_files += 1;
                entries.push(FileEntry::private(format!("{DB_SUBDIR}/{name}"), size, crc32c));
            }
        }
        disk::fsync_dir(&private_dir)?;
        disk::fsync_dir(shared_dir)?;
        // SSTs no longer live are not needed by later checkpoints of this run.
        let live: std::collections::HashSet<&str> =
            entries.iter().filter(|e| e.shared).filter_map(|e| local_name(&e.name)).collect::<std::collections::HashSet<_>>();
        self.known.retain(|k, _| live.contains(k.as_str()));
        Ok((entries, stats))
    }
}

/// The size of a regular file (None: missing, or a FIFO, link, ...).
fn file_size(path: &Path) -> Option<u64> {
    fs::symlink_metadata(path).ok().filter(|m| m.is_file()).map(|m| m.len())
}

/// Whether `path` is a regular file of `size` bytes with CRC32C `crc`
/// (the size first: no read of a file that cannot match).
fn same_file(path: &Path, size: u64, crc: u32) -> bool {
    if file_size(path) != Some(size) {
        return false;
    }
    let Ok((mut f, _)) = disk::open_regular(path) else { return false };
    let mut buf = vec![0u8; 1 << 20];
    let (mut read, mut sum) = (0u64, 0u32);
    loop {
        match f.read(&mut buf) {
            Ok(0) => return read == size && sum == crc,
            Ok(n) => {
                sum = crc32c::crc32c_append(sum, &buf[..n]);
                read += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// Copy a regular file (only: a FIFO named in a MANIFEST must not block the restore).
fn copy_regular(from: &Path, to: &Path) -> io::Result<u64> {
    let (mut src, _) = disk::open_regular(from)?;
    let mut dst = File::create(to)?;
    io::copy(&mut src, &mut dst)
}

/// Copy `from` to `to` (via a temp file renamed into place when `atomic`),
/// fsynced; returns size and CRC32C of what was written.
fn copy_synced(from: &Path, to: &Path, atomic: bool) -> Result<(u64, u32), StoreError> {
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Io { op, path, source }
    };
    let target = if atomic {
        let name = to.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        to.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
    } else {
        to.to_path_buf()
    };
    let (mut src, _) = disk::open_regular(from).map_err(io("open", from))?;
    let mut dst = File::create(&target).map_err(io("create", &target))?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut size, mut crc) = (0u64, 0u32);
    let copied = (|| loop {
        let n = src.read(&mut buf).map_err(io("read", from))?;
        if n == 0 {
            dst.sync_all().map_err(io("fsync", &target))?;
            return Ok(());
        }
        dst.write_all(&buf[..n]).map_err(io("write", &target))?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        size += n as u64;
    })();
    if let Err(e) = copied {
        let _ = fs::remove_file(&target);
        return Err(e);
    }
    if atomic {
        fs::rename(&target, to).map_err(io("rename into", to))?;
    }
    Ok((size, crc))
}

/// How a working DB was rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreSource {
    /// From the bundle's own local checkpoint (hard links).
    Local,
    /// From the checkpoint's files (`shared/` hard-linked, or copied).
    Checkpoint,
}

/// The native checkpoint of one bundle, as its MANIFEST lists it.
pub struct NativeCheckpoint<'a> {
    pub id: CheckpointId,
    pub bundle: BundleId,
    /// The native files of the bundle MANIFEST (shared SSTs, `db/` files).
    pub files: &'a [FileEntry],
    /// The checkpoint's bundle directory and its `shared/` directory.
    pub bundle_dir: &'a Path,
    pub shared_dir: &'a Path,
}

/// Rebuild the working DB at `db_path` from a native checkpoint; returns
/// it with an uploader that knows which SSTs are already shared.
pub fn restore(
    from: &NativeCheckpoint<'_>,
    db_path: &Path,
    column_families: &[String],
    options: &RocksOptions,
) -> Result<(Arc<BundleDb>, Uploader, RestoreSource), StateError> {
    let NativeCheckpoint { id, bundle, files, bundle_dir, shared_dir } = *from;
    let err = |what: &str, path: &Path, e: &dyn std::fmt::Display| super::backend_error(what, path, e);
    let local_root = db_path.parent().unwrap_or(db_path).to_path_buf();
    let local = local_root.join(checkpoint_dir_name(id));
    // The local checkpoint matches if it holds every file with the recorded
    // size and CRC32C: a local file damaged in place (same size) would
    // otherwise be opened as the state. Reading it costs less than the copy
    // from the checkpoint it saves.
    let local_name_of = |f: &FileEntry| -> Option<String> {
        if f.shared {
            local_name(&f.name).map(str::to_string)
        } else {
            f.name.strip_prefix(&format!("{DB_SUBDIR}/")).map(str::to_string)
        }
    };
    let matches = files.iter().all(|f| local_name_of(f).is_some_and(|n| same_file(&local.join(n), f.size, f.crc32c)));
    let source = if matches { RestoreSource::Local } else { RestoreSource::Checkpoint };
    match fs::remove_dir_all(db_path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(err("cannot remove", db_path, &e)),
        _ => {}
    }
    fs::create_dir_all(db_path).map_err(|e| err("cannot create", db_path, &e))?;
    let mut uploader = Uploader::new(bundle);
    for f in files {
        let name = local_name_of(f)
            .ok_or_else(|| StateError::Backend(format!("checkpoint {id}: unexpected file {:?} in a native bundle", f.name)))?;
        let from = match (source, f.shared) {
            (RestoreSource::Local, _) => local.join(&name),
            (RestoreSource::Checkpoint, true) => shared_dir.join(&f.name),
            (RestoreSource::Checkpoint, false) => bundle_dir.join(&f.name),
        };
        let to = db_path.join(&name);
        if f.shared {
            // SSTs are immutable: a hard link is a copy that costs nothing.
            // A link only to a regular file (a link to a FIFO would block RocksDB).
            if file_size(&from).is_none() || fs::hard_link(&from, &to).is_err() {
                copy_regular(&from, &to).map_err(|e| err("cannot copy", &from, &e))?;
            }
            uploader.known.insert(name, Shared { name: f.name.clone(), size: f.size, crc32c: f.crc32c });
        } else {
            // RocksDB may append to its MANIFEST: a private copy.
            copy_regular(&from, &to).map_err(|e| err("cannot copy", &from, &e))?;
        }
    }
    let db = BundleDb::open(db_path, column_families, options)?;
    Ok((db, uploader, source))
}

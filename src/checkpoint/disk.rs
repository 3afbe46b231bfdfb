//! File-system I/O of checkpoint storage, the edge under the pure
//! coordinator and arbiters.
//!
//! Durability rules: a document is written to a temp file in the same
//! directory, fsynced, renamed over its final name, and the directory is
//! fsynced, so a crash leaves either the old state or the new, never a torn
//! file. State files are fsynced with their CRC32C computed while writing;
//! they only count once a MANIFEST (written atomically) lists them.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::layout::{self, Layout};
use super::manifest::FileEntry;
use crate::types::CheckpointId;

/// A storage failure, always with the path it concerns.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot {op} {path}: {source}")]
    Io { op: &'static str, path: PathBuf, source: io::Error },
    #[error("{path} names a state file outside its bundle directory: {name:?}")]
    UnsafeName { path: PathBuf, name: String },
    #[error("state directory {path} belongs to pipeline `{found}`, not `{expected}`")]
    PipelineMismatch { path: PathBuf, expected: String, found: String },
}

impl StoreError {
    /// `map_err(StoreError::io("read", path))`: an I/O error with what was
    /// being done and to which path.
    pub fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
        move |source| StoreError::Io { op, path: path.to_path_buf(), source }
    }
}

/// Write `bytes` to `path` atomically: temp file, fsync, rename, fsync dir.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = parent_of(path);
    fs::create_dir_all(dir).map_err(StoreError::io("create directory", dir))?;
    let tmp = temp_path(path);
    let written = write_synced(&tmp, bytes).and_then(|()| fs::rename(&tmp, path).map_err(StoreError::io("rename into", path)));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    fsync_dir(dir)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let mut f = File::create(path).map_err(StoreError::io("create", path))?;
    f.write_all(bytes).map_err(StoreError::io("write", path))?;
    f.sync_all().map_err(StoreError::io("fsync", path))
}

/// `dir/.name.tmp-<pid>-<n>`: same directory (so rename is atomic), unique per writer.
fn temp_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    parent_of(path).join(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Make a directory's entries (created, renamed, removed files) durable.
pub fn fsync_dir(dir: &Path) -> Result<(), StoreError> {
    sync_dir(dir).map_err(StoreError::io("fsync directory", dir))
}

/// [`fsync_dir`] for callers with errors of their own: the one place a
/// directory is synced.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Streams one state file into a bundle dir, computing size and CRC32C as it goes.
pub struct StateFileWriter {
    file: File,
    path: PathBuf,
    entry: FileEntry,
}

impl StateFileWriter {
    /// Create `dir/name` (and its parent dirs); `name` must stay inside `dir`.
    pub fn create(dir: &Path, name: &str) -> Result<Self, StoreError> {
        if !layout::is_safe_relative(name) {
            return Err(StoreError::UnsafeName { path: dir.to_path_buf(), name: name.into() });
        }
        let path = dir.join(name);
        let parent = parent_of(&path);
        fs::create_dir_all(parent).map_err(StoreError::io("create directory", parent))?;
        let file = File::create(&path).map_err(StoreError::io("create", &path))?;
        Ok(StateFileWriter { file, path, entry: FileEntry::private(name, 0, 0) })
    }

    pub fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.file.write_all(bytes).map_err(StoreError::io("write", &self.path))?;
        self.entry.crc32c = crc32c::crc32c_append(self.entry.crc32c, bytes);
        self.entry.size += bytes.len() as u64;
        Ok(())
    }

    /// fsync the file and its directory; the entry to put in the MANIFEST.
    pub fn finish(self) -> Result<FileEntry, StoreError> {
        self.file.sync_all().map_err(StoreError::io("fsync", &self.path))?;
        fsync_dir(parent_of(&self.path))?;
        Ok(self.entry)
    }
}

/// Write one whole state file into an existing directory, never creating
/// it: a task finishing late must not bring back the directory of a
/// checkpoint that was aborted and removed meanwhile.
pub fn write_state_file_in_existing_dir(dir: &Path, name: &str, bytes: &[u8]) -> Result<FileEntry, StoreError> {
    write_state_file_parts_in_existing_dir(dir, name, &[bytes])
}

/// `write_state_file_in_existing_dir` of the concatenation of `parts`,
/// without building it in memory.
pub fn write_state_file_parts_in_existing_dir<B: AsRef<[u8]>>(dir: &Path, name: &str, parts: &[B]) -> Result<FileEntry, StoreError> {
    if !layout::is_safe_relative(name) || name.contains('/') {
        return Err(StoreError::UnsafeName { path: dir.to_path_buf(), name: name.into() });
    }
    let path = dir.join(name);
    let file = File::create(&path).map_err(StoreError::io("create", &path))?;
    let mut w = StateFileWriter { file, path, entry: FileEntry::private(name, 0, 0) };
    for part in parts {
        w.write(part.as_ref())?;
    }
    w.finish()
}

/// Write one whole state file; see [`StateFileWriter`].
pub fn write_state_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<FileEntry, StoreError> {
    let mut w = StateFileWriter::create(dir, name)?;
    w.write(bytes)?;
    w.finish()
}

/// Size and CRC32C of an existing file `dir/name` (e.g. one a backend
/// produced by hard links), read in chunks. Only a regular file qualifies.
pub fn describe_file(dir: &Path, name: &str) -> Result<FileEntry, StoreError> {
    if !layout::is_safe_relative(name) {
        return Err(StoreError::UnsafeName { path: dir.to_path_buf(), name: name.into() });
    }
    let path = dir.join(name);
    let (mut f, _) = open_regular(&path).map_err(StoreError::io("open", &path))?;
    let (size, crc) = checksum(&mut f).map_err(StoreError::io("read", &path))?;
    Ok(FileEntry::private(name, size, crc))
}

/// Bytes read and their CRC32C, from the current position to the end.
pub fn checksum(f: &mut impl Read) -> io::Result<(u64, u32)> {
    let mut buf = vec![0u8; 64 * 1024];
    let (mut size, mut crc) = (0u64, 0u32);
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok((size, crc));
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        size += n as u64;
    }
}

/// A path that is not a regular file where a state file (or document) was
/// expected: a FIFO would block a reader forever, a symbolic link could
/// lead anywhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("is {kind}, not a regular file")]
pub struct NotRegular {
    pub kind: &'static str,
}

impl NotRegular {
    /// The `NotRegular` inside an I/O error from [`open_regular`], if that is what it is.
    pub fn of(e: &io::Error) -> Option<&NotRegular> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<NotRegular>())
    }
}

/// What a file type is, in words.
pub fn kind_of(t: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_file() {
        "a regular file"
    } else {
        "of an unknown file type"
    }
}

fn not_regular(t: &fs::FileType) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, NotRegular { kind: kind_of(t) })
}

/// Open a state file or document for reading, with its size: only a
/// regular file, never through a symbolic link at the last component, and
/// without blocking (`O_NONBLOCK`: opening a FIFO does not wait for a
/// writer). The type is checked on the open descriptor, so it cannot change
/// between the check and the read.
pub fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let file = match opened {
        Ok(f) => f,
        // ELOOP (a symlink under O_NOFOLLOW), ENXIO (a socket): say what it is.
        Err(e) => {
            return Err(match fs::symlink_metadata(path) {
                Ok(m) if !m.is_file() => not_regular(&m.file_type()),
                _ => e,
            })
        }
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(&meta.file_type()));
    }
    Ok((file, meta.len()))
}

/// The whole content of a regular file; see [`open_regular`].
pub fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    let (mut f, len) = open_regular(path)?;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(64 << 20));
    f.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Remove a checkpoint: `_metadata` first (made durable), so a crash midway
/// leaves an unfinished checkpoint that cleanup removes, never a torn one
/// that still looks complete. A missing checkpoint is not an error.
pub fn remove_checkpoint(layout: &Layout, id: CheckpointId) -> Result<(), StoreError> {
    remove_checkpoint_dir(&layout.checkpoint_dir(id))
}

pub(crate) fn remove_checkpoint_dir(dir: &Path) -> Result<(), StoreError> {
    let metadata = dir.join(layout::METADATA_FILE);
    match fs::remove_file(&metadata) {
        Ok(()) => fsync_dir(dir)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(StoreError::io("remove", &metadata)(e)),
    }
    remove_dir_all(dir)
}

pub(crate) fn remove_dir_all(dir: &Path) -> Result<(), StoreError> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(StoreError::io("remove", dir)(e)),
        _ => Ok(()),
    }
}

/// Ids of the `chk-NNNNNNN` directories, ascending, whatever their state.
/// Other entries (temp files, `shared/`) are ignored; no directory is empty.
pub fn list_checkpoint_ids(layout: &Layout) -> Result<Vec<CheckpointId>, StoreError> {
    let dir = layout.checkpoints_dir();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io("list", &dir)(e)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StoreError::io("list", &dir))?;
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        if let Some(id) = entry.file_name().to_str().and_then(layout::parse_checkpoint_dir_name) {
            if is_dir {
                ids.push(id);
            }
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Claim a state directory for `pipeline`: create it and write `PIPELINE`
/// on first use; refuse it if another pipeline wrote it.
pub fn claim_state_dir(layout: &Layout, pipeline: &str) -> Result<(), StoreError> {
    match state_dir_owner(layout)? {
        Some(found) if found == pipeline => Ok(()),
        Some(found) => Err(StoreError::PipelineMismatch { path: layout.pipeline_file(), expected: pipeline.into(), found }),
        None => write_owner(layout, pipeline),
    }
}

/// The pipeline named in `PIPELINE` (None: the directory was never
/// claimed). Reads only.
pub fn state_dir_owner(layout: &Layout) -> Result<Option<String>, StoreError> {
    let path = layout.pipeline_file();
    match fs::read(&path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).trim_end().to_string())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io("read", &path)(e)),
    }
}

/// Write `PIPELINE` (atomically): first use, or a take-over (`--force`).
pub fn write_owner(layout: &Layout, pipeline: &str) -> Result<(), StoreError> {
    write_atomic(&layout.pipeline_file(), format!("{pipeline}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_and_leaves_no_temp_files() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a/b/_metadata");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec!["_metadata"]);
    }

    #[test]
    fn write_atomic_failure_names_the_path() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("is-a-dir");
        fs::create_dir_all(target.join("child")).unwrap();
        let err = write_atomic(&target, b"x").unwrap_err();
        assert!(err.to_string().contains("is-a-dir"), "{err}");
        // The temp file is gone again.
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn state_files_carry_size_and_crc() {
        let tmp = tempfile::tempdir().unwrap();
        let e = write_state_file(tmp.path(), "db/000001.sst", b"hello world").unwrap();
        assert_eq!(e, FileEntry::private("db/000001.sst", 11, crc32c::crc32c(b"hello world")));
        assert_eq!(describe_file(tmp.path(), "db/000001.sst").unwrap(), e);

        let mut w = StateFileWriter::create(tmp.path(), "streamed").unwrap();
        w.write(b"hello ").unwrap();
        w.write(b"world").unwrap();
        assert_eq!(w.finish().unwrap().crc32c, e.crc32c);
    }

    #[test]
    fn state_file_names_must_stay_in_the_bundle() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(matches!(write_state_file(tmp.path(), "../escape", b"x"), Err(StoreError::UnsafeName { .. })));
        assert!(matches!(describe_file(tmp.path(), "/etc/passwd"), Err(StoreError::UnsafeName { .. })));
        let err = describe_file(tmp.path(), "missing").unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn only_regular_files_are_read_and_a_fifo_never_blocks() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        std::os::unix::net::UnixListener::bind(tmp.path().join("sock")).unwrap();
        fs::write(tmp.path().join("file"), b"data").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("file"), tmp.path().join("link")).unwrap();
        fs::create_dir(tmp.path().join("dir")).unwrap();
        for (name, kind) in [("fifo", "a FIFO"), ("sock", "a socket"), ("link", "a symbolic link"), ("dir", "a directory")] {
            let e = read_regular(&tmp.path().join(name)).unwrap_err();
            assert_eq!(NotRegular::of(&e), Some(&NotRegular { kind }), "{name}: {e}");
            let e = describe_file(tmp.path(), name).unwrap_err();
            assert!(e.to_string().contains(&format!("is {kind}, not a regular file")), "{name}: {e}");
        }
        let e = read_regular(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(NotRegular::of(&e), Some(&NotRegular { kind: "a character device" }));
        assert_eq!(read_regular(&tmp.path().join("file")).unwrap(), b"data");
        assert_eq!(read_regular(&tmp.path().join("missing")).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn listing_sees_only_checkpoint_dirs() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Layout::new(tmp.path());
        assert_eq!(list_checkpoint_ids(&l).unwrap(), Vec::<u64>::new());
        for id in [12, 3, 7] {
            fs::create_dir_all(l.checkpoint_dir(id)).unwrap();
        }
        fs::create_dir_all(l.checkpoints_dir().join("shared")).unwrap();
        fs::write(l.checkpoints_dir().join("chk-0000009"), b"a file").unwrap();
        assert_eq!(list_checkpoint_ids(&l).unwrap(), vec![3, 7, 12]);
    }

    #[test]
    fn remove_checkpoint_is_idempotent() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Layout::new(tmp.path());
        write_atomic(&l.metadata(4), b"{}").unwrap();
        write_state_file(&l.bundle_dir(4, 0), "s", b"x").unwrap();
        remove_checkpoint(&l, 4).unwrap();
        assert!(!l.checkpoint_dir(4).exists());
        remove_checkpoint(&l, 4).unwrap();
    }

    #[test]
    fn a_state_dir_belongs_to_one_pipeline() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Layout::new(tmp.path().join("state"));
        claim_state_dir(&l, "orders").unwrap();
        claim_state_dir(&l, "orders").unwrap();
        assert_eq!(fs::read_to_string(l.pipeline_file()).unwrap(), "orders\n");
        let err = claim_state_dir(&l, "payments").unwrap_err();
        assert!(matches!(&err, StoreError::PipelineMismatch { found, .. } if found == "orders"), "{err}");
    }
}

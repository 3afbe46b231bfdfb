//! The exclusive lock of a state directory: `<state.dir>/LOCK`, held with
//! `flock` by the one process that runs on the directory, for its whole
//! life (the kernel releases it when the process ends, however it ends).
//!
//! It is taken before anything in the directory is read for a decision or
//! written, and before any connector is opened, so a second process never
//! removes the first one's checkpoints nor fences its Kafka producers: it
//! fails naming the holder's PID. The PID comes from the kernel's lock table
//! (`/proc/locks`) when it can be read, else from the file, where a holder
//! writes its PID once its start is decided (so a refused run changes
//! nothing). The file is never removed: removing a lock file lets two
//! processes lock two different files of the same name.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use super::layout::Layout;

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("state directory {dir} is in use by {} (it holds {lock}); stop it first, or give this run another `state.dir`", holder(.pid))]
    Held { dir: PathBuf, lock: PathBuf, pid: Option<u32> },
    #[error("cannot {op} {path}: {source}")]
    Io { op: &'static str, path: PathBuf, source: io::Error },
}

fn holder(pid: &Option<u32>) -> String {
    match pid {
        Some(pid) => format!("weir process {pid}"),
        None => "another weir process".into(),
    }
}

/// The held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct StateDirLock {
    file: File,
    path: PathBuf,
}

impl StateDirLock {
    /// Lock the directory if it has a lock file; None if it (or the whole
    /// directory) does not exist yet. Creates nothing.
    pub fn lock_existing(layout: &Layout) -> Result<Option<StateDirLock>, LockError> {
        let path = layout.lock_file();
        match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => lock(file, path, layout.state_dir()).map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(LockError::Io { op: "open the lock file", path, source }),
        }
    }

    /// Create the directory and its lock file as needed, then lock it.
    pub fn lock_creating(layout: &Layout) -> Result<StateDirLock, LockError> {
        let dir = layout.state_dir();
        fs::create_dir_all(dir).map_err(|source| LockError::Io { op: "create the state directory", path: dir.to_path_buf(), source })?;
        let path = layout.lock_file();
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(|source| LockError::Io {
            op: "create the lock file",
            path: path.clone(),
            source,
        })?;
        lock(file, path, dir)
    }

    /// Write this process's PID into the lock file (for whoever finds it held).
    pub fn record_pid(&mut self) -> Result<(), LockError> {
        let io = |source| LockError::Io { op: "write", path: self.path.clone(), source };
        self.file.set_len(0).map_err(io)?;
        self.file.rewind().map_err(io)?;
        self.file.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(io)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn lock(file: File, path: PathBuf, dir: &Path) -> Result<StateDirLock, LockError> {
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {
            check_writable(dir)?;
            Ok(StateDirLock { file, path })
        }
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            let pid = holder_pid(&file);
            Err(LockError::Held { dir: dir.to_path_buf(), lock: path, pid })
        }
        Err(e) => Err(LockError::Io { op: "lock", path, source: e.into() }),
    }
}

/// Checkpoints are written into the directory and `checkpoints/`: find out
/// now (a read-only file system, no permission), not at the first
/// checkpoint. Asks the kernel, writes nothing.
fn check_writable(dir: &Path) -> Result<(), LockError> {
    let checkpoints = dir.join(super::layout::CHECKPOINTS_DIR);
    for d in [dir, checkpoints.as_path()] {
        if let Err(e) = rustix::fs::access(d, rustix::fs::Access::WRITE_OK) {
            if e != rustix::io::Errno::NOENT {
                return Err(LockError::Io { op: "write to", path: d.to_path_buf(), source: e.into() });
            }
        }
    }
    Ok(())
}

/// The PID holding `file`'s lock: the kernel's lock table, else the PID
/// the holder wrote into the file.
fn holder_pid(file: &File) -> Option<u32> {
    if let Some(pid) = fs::read_to_string("/proc/locks").ok().and_then(|table| pid_in_lock_table(&table, file)) {
        return Some(pid);
    }
    let mut text = String::new();
    let mut f = file;
    f.rewind().ok()?;
    f.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok().filter(|&pid| pid != 0)
}

/// Lines such as `3: FLOCK  ADVISORY  WRITE 2007 fe:00:5308656 0 EOF`
/// (a waiter's line has `->` after the number and is skipped).
fn pid_in_lock_table(table: &str, file: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let md = file.metadata().ok()?;
    let (major, minor, inode) = (rustix::fs::major(md.dev()), rustix::fs::minor(md.dev()), md.ino());
    parse_lock_table(table).find(|l| l.major == major && l.minor == minor && l.inode == inode).map(|l| l.pid)
}

struct LockLine {
    pid: u32,
    major: u32,
    minor: u32,
    inode: u64,
}

fn parse_lock_table(table: &str) -> impl Iterator<Item = LockLine> + '_ {
    table.lines().filter_map(|line| {
        let mut words = line.split_whitespace().skip(1);
        let kind = words.next()?;
        if kind != "FLOCK" {
            return None;
        }
        let (_mode, _rw) = (words.next()?, words.next()?);
        let pid: u32 = words.next()?.parse().ok().filter(|&p| p != 0)?;
        let mut id = words.next()?.split(':');
        let major = u32::from_str_radix(id.next()?, 16).ok()?;
        let minor = u32::from_str_radix(id.next()?, 16).ok()?;
        let inode = id.next()?.parse().ok()?;
        Some(LockLine { pid, major, minor, inode })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_this_process() {
        let tmp = tempfile::tempdir().unwrap();
        let l = Layout::new(tmp.path().join("state"));
        assert!(StateDirLock::lock_existing(&l).unwrap().is_none());
        assert!(!l.state_dir().exists(), "looking for the lock created the directory");
        let mut held = StateDirLock::lock_creating(&l).unwrap();
        held.record_pid().unwrap();
        assert_eq!(fs::read_to_string(l.lock_file()).unwrap(), format!("{}\n", std::process::id()));
        // A second open file description conflicts like another process.
        let err = StateDirLock::lock_existing(&l).unwrap_err();
        assert!(matches!(err, LockError::Held { pid: Some(p), .. } if p == std::process::id()), "{err}");
        assert!(err.to_string().contains(&format!("weir process {}", std::process::id())), "{err}");
        assert!(StateDirLock::lock_creating(&l).is_err());
        drop(held);
        let again = StateDirLock::lock_existing(&l).unwrap().expect("the lock file stays");
        assert_eq!(again.path(), l.lock_file());
    }

    #[test]
    fn lock_table_lines_are_parsed_and_waiters_skipped() {
        let table = "1: FLOCK  ADVISORY  WRITE 2007 fe:00:5308656 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 3001 fe:00:5308656 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 12 08:01:77 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 0 08:01:78 0 EOF\n";
        let lines: Vec<_> = parse_lock_table(table).map(|l| (l.pid, l.major, l.minor, l.inode)).collect();
        assert_eq!(lines, vec![(2007, 0xfe, 0, 5308656)]);
    }
}

//! Where a savepoint goes, and how it gets there without ever taking or
//! removing a directory this process did not create.
//!
//! A savepoint target (`--target DIR`, `savepoint.dir`) is a *parent*
//! directory: each savepoint is a new child of it, named from the pipeline
//! and the checkpoint id ([`child_name`]), so one parent takes any number of
//! savepoints (Flink's `savepoint-<job>-<id>`). Without a target the parent
//! is the state directory's `savepoints/` and the child `sp-<id>`.
//!
//! A savepoint is built in a fresh hidden directory in the parent
//! (`.NAME.weir-tmp-PID-N`, made with mkdir, so it is ours), filled there
//! (a rename of the committed checkpoint directory, or a copy from another
//! file system), given its `_metadata`, and only then renamed to its name
//! with RENAME_NOREPLACE: an existing child (even an empty one) is never
//! taken; the next free name (`NAME-1`, `NAME-2`, ...) is. A failure
//! removes the temp directory and the parents this savepoint created, and
//! nothing else. The check at request time only gives an early answer.
//!
//! Parents inside the state directory are refused, except its own
//! `savepoints/` and what is below: retention and cleanup delete what is in
//! `checkpoints/` and `local/`, and the rest is weir's.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::disk::{self, StoreError};
use super::layout::{Layout, METADATA_FILE};
use crate::types::CheckpointId;

/// Why a savepoint target is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NotAbsolute,
    /// Inside (or equal to) a folder weir manages; the folder.
    Managed(PathBuf),
    /// The target, or the existing path on the way to it, is not a directory.
    NotADirectory(PathBuf),
    /// This process may not create entries in the directory.
    NotWritable(PathBuf),
    Unusable(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("target {}: {reason}", target.display())]
pub struct TargetError {
    pub target: PathBuf,
    pub reason: Refusal,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotAbsolute => write!(f, "must be an absolute path"),
            Refusal::Managed(dir) => write!(
                f,
                "is or is inside {}, which weir manages (retention and cleanup delete what is there); choose a directory outside the state directory, or its savepoints/",
                dir.display()
            ),
            Refusal::NotADirectory(p) if p.as_os_str().is_empty() => write!(f, "is not a directory"),
            Refusal::NotADirectory(p) => write!(f, "{} is not a directory (the target is the directory savepoints are created in)", p.display()),
            Refusal::NotWritable(p) => write!(f, "cannot create a savepoint in {}: permission denied", p.display()),
            Refusal::Unusable(e) => write!(f, "{e}"),
        }
    }
}

/// The name of the savepoint of checkpoint `id` of `pipeline` in a target:
/// `savepoint-orders-0000012` (pipeline names are letters, digits, `_`,
/// `.` and `-`, so it is one plain path component).
pub fn child_name(pipeline: &str, id: CheckpointId) -> String {
    format!("savepoint-{pipeline}-{id:07}")
}

/// Whether `name` is one [`child_name`] (or its `-N` successor) gives
/// `pipeline`: what `savepoint list` shows of a target shared by pipelines.
pub fn is_child_name(pipeline: &str, name: &str) -> bool {
    let Some(rest) = name.strip_prefix("savepoint-").and_then(|r| r.strip_prefix(pipeline)).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    let (id, suffix) = rest.split_once('-').unwrap_or((rest, "1"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    id.len() >= 7 && digits(id) && digits(suffix)
}

/// `path` made absolute with every symbolic link and `..` resolved: the
/// longest existing prefix is canonicalized, the rest (which does not
/// exist yet) is appended with `.` and `..` applied lexically.
pub fn resolve(path: &Path) -> io::Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    let mut existing = abs.as_path();
    let mut rest = Vec::new();
    let base = loop {
        match existing.canonicalize() {
            Ok(c) => break c,
            Err(_) => match (existing.parent(), existing.components().next_back()) {
                (Some(parent), Some(last)) => {
                    rest.push(last);
                    existing = parent;
                }
                _ => break existing.to_path_buf(),
            },
        }
    };
    let mut out = base;
    for c in rest.into_iter().rev() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    Ok(out)
}

/// Check the savepoint target (parent directory) `target` of the pipeline
/// whose state is in `layout`; returns it resolved (where its savepoints
/// will be created). It may be missing (it is created with the first
/// savepoint); what exists of it must be a directory this process may
/// write in. The final word is the write in [`Staging`]; this is the early
/// answer, and it changes nothing on disk.
pub fn check(layout: &Layout, target: &Path) -> Result<PathBuf, TargetError> {
    let refuse = |reason| TargetError { target: target.to_path_buf(), reason };
    if !target.is_absolute() {
        return Err(refuse(Refusal::NotAbsolute));
    }
    let unusable = |e: io::Error| refuse(Refusal::Unusable(e.to_string()));
    let resolved = resolve(target).map_err(unusable)?;
    let state = resolve(layout.state_dir()).map_err(unusable)?;
    let inside = [state.join(super::layout::CHECKPOINTS_DIR), state.join(super::layout::LOCAL_DIR)];
    if let Some(dir) = inside.iter().find(|d| resolved.starts_with(d)) {
        return Err(refuse(Refusal::Managed(dir.clone())));
    }
    // Elsewhere in the state directory, savepoints would sit among its files.
    if resolved.starts_with(&state) && !resolved.starts_with(state.join(super::layout::SAVEPOINTS_DIR)) {
        return Err(refuse(Refusal::Managed(state)));
    }
    // The nearest existing directory on the way is where mkdir happens.
    let mut existing = resolved.as_path();
    loop {
        match fs::metadata(existing) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                let shown = if existing == resolved { PathBuf::new() } else { existing.to_path_buf() };
                return Err(refuse(Refusal::NotADirectory(shown)));
            }
            // Missing, or below a file (ENOTDIR): look one step up.
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => match existing.parent() {
                Some(p) => existing = p,
                None => return Err(unusable(e)),
            },
            Err(e) => return Err(unusable(e)),
        }
    }
    if !may_create_in(existing) {
        return Err(refuse(Refusal::NotWritable(existing.to_path_buf())));
    }
    Ok(resolved)
}

/// access(2) with W_OK|X_OK: whether entries may be created in `dir`.
fn may_create_in(dir: &Path) -> bool {
    use rustix::fs::Access;
    rustix::fs::access(dir, Access::WRITE_OK | Access::EXEC_OK).is_ok()
}

/// A savepoint being built in its parent directory. Dropped without
/// [`commit`](Staging::commit), it removes its temp directory and the
/// parents it created (and only those).
#[derive(Debug)]
pub struct Staging {
    tmp: PathBuf,
    parent: PathBuf,
    name: String,
    /// Parents created by `begin`, outermost first.
    created: Vec<PathBuf>,
    committed: bool,
}

/// How many `-N` successors of a taken name are tried.
const MAX_SUFFIX: u32 = 100;

impl Staging {
    /// Create `parent` (and its missing parents) and a fresh temp directory
    /// in it for the savepoint `name`.
    pub fn begin(parent: &Path, name: &str) -> Result<Staging, StoreError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut staging =
            Staging { tmp: PathBuf::new(), parent: parent.to_path_buf(), name: name.to_string(), created: Vec::new(), committed: false };
        let missing: Vec<&Path> = parent.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.is_dir()).collect();
        for dir in missing.into_iter().rev() {
            match fs::create_dir(dir) {
                Ok(()) => staging.created.push(dir.to_path_buf()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
                Err(e) => return Err(StoreError::io("create directory", dir)(e)),
            }
        }
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let tmp = parent.join(format!(".{name}.weir-tmp-{}-{n}", std::process::id()));
            match fs::create_dir(&tmp) {
                Ok(()) => {
                    staging.tmp = tmp;
                    return Ok(staging);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(StoreError::io("create directory", &tmp)(e)),
            }
        }
    }

    /// The temp directory (it holds the savepoint until the commit).
    pub fn dir(&self) -> &Path {
        &self.tmp
    }

    /// Move the committed checkpoint directory `from` in: a rename onto the
    /// (empty, own) temp directory on the same file system, else a copy of
    /// its directories and regular files, then `from` is removed.
    pub fn fill_from(&self, from: &Path) -> Result<(), StoreError> {
        if fs::rename(from, &self.tmp).is_ok() {
            return Ok(());
        }
        copy_tree(from, &self.tmp).map_err(StoreError::io("copy into", &self.tmp))?;
        disk::remove_dir_all(from)
    }

    /// Copy the committed checkpoint directory `from` in, leaving it as it
    /// is (it stays a checkpoint): every state file hard-linked where the
    /// file system allows (they are never written again), else copied;
    /// its own `_metadata` is not taken (the savepoint gets its own).
    pub fn copy_from(&self, from: &Path) -> Result<(), StoreError> {
        link_or_copy_tree(from, &self.tmp, true).map_err(StoreError::io("copy into", &self.tmp))
    }

    /// Write `_metadata` (durably), then rename the temp directory to its
    /// name in the parent, or to the first free `NAME-N` when the name is
    /// taken; returns the savepoint's path.
    pub fn commit(mut self, metadata: &[u8]) -> Result<PathBuf, StoreError> {
        disk::write_atomic(&self.tmp.join(METADATA_FILE), metadata)?;
        disk::fsync_dir(&self.tmp)?;
        for n in 0..=MAX_SUFFIX {
            let name = if n == 0 { self.name.clone() } else { format!("{}-{n}", self.name) };
            let to = self.parent.join(&name);
            match rename_noreplace(&self.tmp, &to) {
                Ok(()) => {
                    self.committed = true;
                    disk::fsync_dir(&self.parent)?;
                    for dir in &self.created {
                        disk::fsync_dir(dir.parent().unwrap_or(Path::new("/")))?;
                    }
                    return Ok(to);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    tracing::info!(path = %to.display(), "Savepoint name taken; trying the next.");
                }
                Err(e) => return Err(StoreError::io("rename into", &to)(e)),
            }
        }
        let e = io::Error::new(io::ErrorKind::AlreadyExists, format!("{} and its successors up to -{MAX_SUFFIX} are all taken", self.name));
        Err(StoreError::io("rename into", &self.parent)(e))
    }
}

/// rename(2) that fails with `AlreadyExists` when `to` exists (as anything).
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{renameat_with, RenameFlags, CWD};
        match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(()),
            // A file system without RENAME_NOREPLACE: the fallback below.
            Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {}
            Err(e) => return Err(e.into()),
        }
    }
    // rename(2) replaces an empty directory: the check narrows that window,
    // and a non-empty one fails the rename anyway.
    if fs::symlink_metadata(to).is_ok() {
        return Err(io::Error::from(io::ErrorKind::AlreadyExists));
    }
    fs::rename(from, to).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOTEMPTY | libc::EEXIST) => io::Error::from(io::ErrorKind::AlreadyExists),
        _ => e,
    })
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        if !self.tmp.as_os_str().is_empty() {
            if let Err(e) = fs::remove_dir_all(&self.tmp) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(dir = %self.tmp.display(), error = %e, "Cannot remove a savepoint's temp directory.");
                }
            }
        }
        // Only while empty: someone else may have put something there since.
        for dir in self.created.iter().rev() {
            if fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }
}

/// Copy a checkpoint directory: directories and regular files only.
fn link_or_copy_tree(from: &Path, to: &Path, top: bool) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let (src, dest) = (entry.path(), to.join(entry.file_name()));
        let t = entry.file_type()?;
        if top && entry.file_name() == METADATA_FILE {
            continue;
        }
        if t.is_dir() {
            fs::create_dir(&dest)?;
            link_or_copy_tree(&src, &dest, false)?;
        } else if t.is_file() {
            if fs::hard_link(&src, &dest).is_err() {
                let (mut file, _) = disk::open_regular(&src).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", src.display())))?;
                let mut out = fs::OpenOptions::new().write(true).create_new(true).open(&dest)?;
                io::copy(&mut file, &mut out)?;
                out.sync_all()?;
            }
        } else {
            return Err(io::Error::other(format!("{}: not a regular file or directory", src.display())));
        }
    }
    disk::sync_dir(to)
}

fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let (src, dest) = (entry.path(), to.join(entry.file_name()));
        let t = entry.file_type()?;
        if t.is_dir() {
            fs::create_dir(&dest)?;
            copy_tree(&src, &dest)?;
        } else {
            let (mut file, _) = disk::open_regular(&src).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", src.display())))?;
            let mut out = fs::OpenOptions::new().write(true).create_new(true).open(&dest)?;
            io::copy(&mut file, &mut out)?;
            out.sync_all()?;
        }
    }
    disk::sync_dir(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A committed checkpoint directory, as the arbiters leave it.
    fn checkpoint_dir(root: &Path, tag: &str) -> PathBuf {
        let dir = root.join(format!("chk-{tag}"));
        disk::write_state_file(&dir.join("bundle-000"), "task-000-0000.snapshot", tag.as_bytes()).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn savepoints_into_one_parent_get_fresh_children_an_existing_one_is_never_taken() {
        let tmp = tempfile::tempdir().unwrap();
        let parent = tmp.path().join("sps");
        // Both passed the early check; both savepoints are named alike.
        let (a, b) = (Staging::begin(&parent, "savepoint-p-0000007").unwrap(), Staging::begin(&parent, "savepoint-p-0000007").unwrap());
        a.fill_from(&checkpoint_dir(tmp.path(), "a")).unwrap();
        b.fill_from(&checkpoint_dir(tmp.path(), "b")).unwrap();
        let (pa, pb) = (a.commit(b"metadata a").unwrap(), b.commit(b"metadata b").unwrap());
        assert_eq!((pa.clone(), pb.clone()), (parent.join("savepoint-p-0000007"), parent.join("savepoint-p-0000007-1")));
        assert_eq!(fs::read(pa.join(METADATA_FILE)).unwrap(), b"metadata a");
        assert_eq!(fs::read(pb.join("bundle-000/task-000-0000.snapshot")).unwrap(), b"b");
        // An empty directory of that name is someone's: it is left alone too.
        fs::create_dir(parent.join("savepoint-p-0000008")).unwrap();
        let c = Staging::begin(&parent, "savepoint-p-0000008").unwrap();
        c.fill_from(&checkpoint_dir(tmp.path(), "c")).unwrap();
        assert_eq!(c.commit(b"md").unwrap(), parent.join("savepoint-p-0000008-1"));
        assert!(names(&parent.join("savepoint-p-0000008")).is_empty());
        let all = ["savepoint-p-0000007", "savepoint-p-0000007-1", "savepoint-p-0000008", "savepoint-p-0000008-1"];
        assert_eq!(names(&parent), all);
    }

    /// A stop-with-savepoint copies its checkpoint out and leaves it whole:
    /// same files (linked or copied), its own `_metadata` not taken along.
    #[test]
    fn copy_from_leaves_the_checkpoint_in_place_and_takes_no_metadata() {
        let tmp = tempfile::tempdir().unwrap();
        let chk = checkpoint_dir(tmp.path(), "k");
        disk::write_atomic(&chk.join(METADATA_FILE), b"checkpoint md").unwrap();
        let s = Staging::begin(&tmp.path().join("sps"), "savepoint-p-0000009").unwrap();
        s.copy_from(&chk).unwrap();
        let sp = s.commit(b"savepoint md").unwrap();
        assert_eq!(fs::read(sp.join(METADATA_FILE)).unwrap(), b"savepoint md");
        assert_eq!(fs::read(sp.join("bundle-000/task-000-0000.snapshot")).unwrap(), b"k");
        assert_eq!(fs::read(chk.join(METADATA_FILE)).unwrap(), b"checkpoint md", "the checkpoint keeps its own");
        assert_eq!(fs::read(chk.join("bundle-000/task-000-0000.snapshot")).unwrap(), b"k");
        // Removing one (retention, dispose) leaves the other whole.
        fs::remove_dir_all(&chk).unwrap();
        assert_eq!(fs::read(sp.join("bundle-000/task-000-0000.snapshot")).unwrap(), b"k");
    }

    #[test]
    fn a_failed_savepoint_removes_its_temp_dir_and_the_parents_it_made_only() {
        let tmp = tempfile::tempdir().unwrap();
        // Dropped before the commit (a failure midway), into a new parent.
        let parent = tmp.path().join("new/deeper");
        let s = Staging::begin(&parent, "sp").unwrap();
        s.fill_from(&checkpoint_dir(tmp.path(), "x")).unwrap();
        assert!(parent.is_dir());
        drop(s);
        assert_eq!(names(tmp.path()), Vec::<String>::new(), "the parents it created are gone");

        // Into an existing parent with the user's files: those stay.
        let user = tmp.path().join("user");
        fs::create_dir(&user).unwrap();
        fs::write(user.join("theirs"), b"keep").unwrap();
        let s = Staging::begin(&user, "sp").unwrap();
        s.fill_from(&checkpoint_dir(tmp.path(), "y")).unwrap();
        drop(s);
        assert_eq!(names(&user), vec!["theirs"]);
        assert_eq!(names(tmp.path()), vec!["user"]);

        // A parent under a file: refused, nothing created.
        let err = Staging::begin(&user.join("theirs/sub"), "sp").unwrap_err();
        assert!(err.to_string().contains("create directory"), "{err}");
        assert_eq!(names(&user), vec!["theirs"]);
    }

    #[test]
    fn child_names_are_recognised_per_pipeline() {
        assert_eq!(child_name("orders", 12), "savepoint-orders-0000012");
        for (p, n, yes) in [
            ("orders", "savepoint-orders-0000012", true),
            ("orders", "savepoint-orders-0000012-3", true),
            ("orders", "savepoint-orders-12345678", true),
            ("orders", "savepoint-orders-v2-0000012", false),
            ("orders-v2", "savepoint-orders-v2-0000012", true),
            ("orders", "savepoint-orders-0000012-", false),
            ("orders", "savepoint-orders-12", false),
            ("orders", "sp-0000012", false),
            ("orders", ".savepoint-orders-0000012.weir-tmp-1-0", false),
        ] {
            assert_eq!(is_child_name(p, n), yes, "{p} {n}");
        }
    }

    #[test]
    fn a_copy_takes_directories_and_regular_files_only() {
        let tmp = tempfile::tempdir().unwrap();
        let from = checkpoint_dir(tmp.path(), "c");
        let to = tmp.path().join("to");
        fs::create_dir(&to).unwrap();
        copy_tree(&from, &to).unwrap();
        assert_eq!(fs::read(to.join("bundle-000/task-000-0000.snapshot")).unwrap(), b"c");
        std::os::unix::fs::symlink("/etc/passwd", from.join("bundle-000/link")).unwrap();
        let to = tmp.path().join("to2");
        fs::create_dir(&to).unwrap();
        let err = copy_tree(&from, &to).unwrap_err();
        assert!(err.to_string().contains("is a symbolic link, not a regular file"), "{err}");
    }

    #[test]
    fn targets_inside_the_managed_folders_are_refused_after_resolving() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        let l = Layout::new(&state);
        fs::create_dir_all(l.checkpoints_dir()).unwrap();
        fs::create_dir_all(l.local_dir()).unwrap();
        std::os::unix::fs::symlink(l.checkpoints_dir(), tmp.path().join("via-link")).unwrap();
        for t in [
            l.checkpoints_dir(),
            l.checkpoints_dir().join("chk-0000009"),
            l.checkpoints_dir().join("mine/deeper"),
            l.local_dir(),
            l.local_dir().join("sp"),
            tmp.path().join("via-link/sp"),
            state.join("savepoints/../checkpoints/sp"),
            tmp.path().join("elsewhere/../state/local/x"),
            state.clone(),
            state.join("savepoints/.."),
            state.join("mine"),
        ] {
            let err = check(&l, &t).unwrap_err();
            assert!(matches!(err.reason, Refusal::Managed(_)), "{}: {err}", t.display());
        }
        // Parents of savepoints: savepoints/, below it, around the state dir, elsewhere.
        for t in [l.savepoints_dir(), l.savepoints_dir().join("mine"), tmp.path().to_path_buf(), tmp.path().join("out/sps")] {
            assert_eq!(check(&l, &t).unwrap(), resolve(&t).unwrap(), "{}", t.display());
        }
        // A link to a directory is followed (the children go where it leads).
        std::os::unix::fs::symlink(tmp.path().join("out"), tmp.path().join("link")).unwrap();
        fs::create_dir_all(tmp.path().join("out")).unwrap();
        assert_eq!(check(&l, &tmp.path().join("link")).unwrap(), resolve(&tmp.path().join("out")).unwrap());
        assert_eq!(check(&l, Path::new("rel")).unwrap_err().reason, Refusal::NotAbsolute);
        let file = tmp.path().join("file");
        fs::write(&file, b"x").unwrap();
        assert_eq!(check(&l, &file).unwrap_err().reason, Refusal::NotADirectory(PathBuf::new()));
        let under = check(&l, &file.join("a/b")).unwrap_err();
        assert_eq!(under.reason, Refusal::NotADirectory(file.canonicalize().unwrap()), "{under}");
    }
}

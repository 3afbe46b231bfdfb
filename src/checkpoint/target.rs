//! Where a savepoint may go (`--target`), and how it gets there without
//! ever taking or removing a directory this process did not create.
//!
//! A savepoint is built in a fresh hidden directory next to its target
//! (`.NAME.weir-tmp-PID-N`, made with mkdir, so it is ours), filled there
//! (a rename of the committed checkpoint directory, or a copy from another
//! file system), given its `_metadata`, and only then renamed onto the
//! target. rename(2) onto a missing name or an empty directory succeeds
//! atomically and fails on a non-empty one, so when several savepoints race
//! for one target exactly one wins; a loser removes only its own temp
//! directory. The check at request time only gives an early answer.
//!
//! Targets inside the state directory's managed folders (`checkpoints/`,
//! `local/`, or the state directory and `savepoints/` themselves) are
//! refused: retention and cleanup delete what is there.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::layout::{Layout, METADATA_FILE};
use super::store::{self, StoreError};

/// Why a savepoint target is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NotAbsolute,
    /// Inside (or equal to) a folder weir manages; the folder.
    Managed(PathBuf),
    SymbolicLink,
    NotEmpty,
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
                "is or holds {}, which weir manages (retention and cleanup delete what is there); choose a directory outside the state directory's checkpoints/ and local/, or one under savepoints/",
                dir.display()
            ),
            Refusal::SymbolicLink => write!(f, "is a symbolic link"),
            Refusal::NotEmpty => write!(f, "exists and is not an empty directory"),
            Refusal::Unusable(e) => write!(f, "{e}"),
        }
    }
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

/// Check a savepoint target of the pipeline whose state is in `layout`;
/// returns it resolved (where the savepoint will be written). The final
/// word is the rename in [`Staging::commit`]; this is the early answer.
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
    let savepoints = state.join(super::layout::SAVEPOINTS_DIR);
    if resolved == state || resolved == savepoints || state.starts_with(&resolved) {
        return Err(refuse(Refusal::Managed(state)));
    }
    // The link itself, not where it leads: rename would replace the link.
    match fs::symlink_metadata(target) {
        Ok(m) if m.file_type().is_symlink() => Err(refuse(Refusal::SymbolicLink)),
        Ok(m) if !m.is_dir() => Err(refuse(Refusal::NotEmpty)),
        Ok(_) => match fs::read_dir(target) {
            Ok(mut entries) => match entries.next() {
                None => Ok(resolved),
                Some(_) => Err(refuse(Refusal::NotEmpty)),
            },
            Err(e) => Err(unusable(e)),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(resolved),
        Err(e) => Err(unusable(e)),
    }
}

/// A savepoint being built next to its target. Dropped without
/// [`commit`](Staging::commit), it removes its temp directory (and only that).
#[derive(Debug)]
pub struct Staging {
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io { op, path: path.to_path_buf(), source }
}

impl Staging {
    /// Create a fresh temp directory next to `target` (and `target`'s parents).
    pub fn begin(target: &Path) -> Result<Staging, StoreError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let parent = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        fs::create_dir_all(parent).map_err(io_err("create directory", parent))?;
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let tmp = parent.join(format!(".{name}.weir-tmp-{}-{n}", std::process::id()));
            match fs::create_dir(&tmp) {
                Ok(()) => return Ok(Staging { tmp, target: target.to_path_buf(), committed: false }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_err("create directory", &tmp)(e)),
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
        copy_tree(from, &self.tmp).map_err(io_err("copy into", &self.tmp))?;
        store::remove_dir_all(from)
    }

    /// Write `_metadata` (durably), then rename the temp directory onto the
    /// target: it succeeds only if the target is missing or empty.
    pub fn commit(mut self, metadata: &[u8]) -> Result<PathBuf, StoreError> {
        store::write_atomic(&self.tmp.join(METADATA_FILE), metadata)?;
        store::fsync_dir(&self.tmp)?;
        match fs::rename(&self.tmp, &self.target) {
            Ok(()) => {
                self.committed = true;
                let parent = self.target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
                store::fsync_dir(parent)?;
                Ok(self.target.clone())
            }
            Err(e) => {
                let taken = matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST | libc::ENOTDIR | libc::EISDIR));
                let e = if taken {
                    io::Error::new(e.kind(), "the target is not empty any more (another savepoint took it?); it was left as it is")
                } else {
                    e
                };
                Err(io_err("rename into", &self.target)(e))
            }
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            if let Err(e) = fs::remove_dir_all(&self.tmp) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(dir = %self.tmp.display(), error = %e, "Cannot remove a savepoint's temp directory.");
                }
            }
        }
    }
}

/// Copy a checkpoint directory: directories and regular files only.
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let (src, dest) = (entry.path(), to.join(entry.file_name()));
        let t = entry.file_type()?;
        if t.is_dir() {
            fs::create_dir(&dest)?;
            copy_tree(&src, &dest)?;
        } else {
            let (mut file, _) = store::open_regular(&src).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", src.display())))?;
            let mut out = fs::OpenOptions::new().write(true).create_new(true).open(&dest)?;
            io::copy(&mut file, &mut out)?;
            out.sync_all()?;
        }
    }
    fs::File::open(to)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A committed checkpoint directory, as the arbiters leave it.
    fn checkpoint_dir(root: &Path, tag: &str) -> PathBuf {
        let dir = root.join(format!("chk-{tag}"));
        store::write_state_file(&dir.join("bundle-000"), "task-000-0000.snapshot", tag.as_bytes()).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn of_two_savepoints_racing_for_one_target_exactly_one_wins_and_stays() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("sp");
        // Both passed the early check while the target was missing.
        let (a, b) = (Staging::begin(&target).unwrap(), Staging::begin(&target).unwrap());
        a.fill_from(&checkpoint_dir(tmp.path(), "a")).unwrap();
        b.fill_from(&checkpoint_dir(tmp.path(), "b")).unwrap();
        assert_eq!(a.commit(b"metadata a").unwrap(), target);
        let err = b.commit(b"metadata b").unwrap_err();
        assert!(err.to_string().contains("not empty any more"), "{err}");
        // The winner's savepoint is whole; the loser left nothing behind.
        assert_eq!(fs::read(target.join(METADATA_FILE)).unwrap(), b"metadata a");
        assert_eq!(fs::read(target.join("bundle-000/task-000-0000.snapshot")).unwrap(), b"a");
        assert_eq!(names(tmp.path()), vec!["sp"]);
    }

    #[test]
    fn an_empty_directory_is_taken_a_failed_savepoint_leaves_the_target_as_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("empty");
        fs::create_dir(&target).unwrap();
        let s = Staging::begin(&target).unwrap();
        s.fill_from(&checkpoint_dir(tmp.path(), "x")).unwrap();
        s.commit(b"md").unwrap();
        assert_eq!(names(&target), vec![METADATA_FILE, "bundle-000"]);

        // Dropped before the commit (a failure midway): only its temp dir goes.
        let user = tmp.path().join("user");
        fs::create_dir(&user).unwrap();
        let s = Staging::begin(&user).unwrap();
        s.fill_from(&checkpoint_dir(tmp.path(), "y")).unwrap();
        drop(s);
        assert!(user.is_dir() && names(&user).is_empty(), "the user's empty directory stays");
        assert_eq!(names(tmp.path()), vec!["empty", "user"]);

        // A target filled meanwhile by someone else is left untouched.
        let s = Staging::begin(&user).unwrap();
        s.fill_from(&checkpoint_dir(tmp.path(), "z")).unwrap();
        fs::write(user.join("theirs"), b"keep").unwrap();
        assert!(s.commit(b"md").is_err());
        assert_eq!(names(&user), vec!["theirs"]);
        assert_eq!(names(tmp.path()), vec!["empty", "user"]);
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
            l.checkpoints_dir().join("chk-0000009"),
            l.checkpoints_dir().join("mine/deeper"),
            l.local_dir().join("sp"),
            tmp.path().join("via-link/sp"),
            state.join("savepoints/../checkpoints/sp"),
            tmp.path().join("elsewhere/../state/local/x"),
        ] {
            let err = check(&l, &t).unwrap_err();
            assert!(matches!(err.reason, Refusal::Managed(_)), "{}: {err}", t.display());
        }
        for t in [state.clone(), l.savepoints_dir(), tmp.path().to_path_buf()] {
            assert!(matches!(check(&l, &t).unwrap_err().reason, Refusal::Managed(_)), "{}", t.display());
        }
        assert_eq!(check(&l, &l.savepoints_dir().join("mine")).unwrap(), resolve(&l.savepoints_dir().join("mine")).unwrap());
        let out = tmp.path().join("out/sp");
        assert_eq!(check(&l, &out).unwrap(), resolve(&out).unwrap());
        assert_eq!(check(&l, Path::new("rel")).unwrap_err().reason, Refusal::NotAbsolute);
        fs::create_dir_all(tmp.path().join("full/x")).unwrap();
        assert_eq!(check(&l, &tmp.path().join("full")).unwrap_err().reason, Refusal::NotEmpty);
        std::os::unix::fs::symlink(tmp.path().join("out"), tmp.path().join("link")).unwrap();
        assert_eq!(check(&l, &tmp.path().join("link")).unwrap_err().reason, Refusal::SymbolicLink);
    }
}

//! `weir savepoint trigger|dispose|list`: the client of a running
//! pipeline's control socket, and the savepoints on disk.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::checkpoint::layout::{self, Layout, METADATA_FILE};
use crate::checkpoint::manifest::{Document, Metadata};
use crate::checkpoint::{disk, validate};
use crate::runtime::control::{Request, SavepointRequest, Status, StatusRequest};
use crate::types::Kind;

/// Why a savepoint command failed; `Refused` is exit 2, `Failed` exit 1.
#[derive(Debug, thiserror::Error)]
pub enum SavepointError {
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
}

/// What the pipeline does after the savepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    KeepRunning,
    Stop,
    /// Fire every window first (event time to the end), then stop.
    StopAndDrain,
}

/// Ask the process running on the state directory of `layout` (through its
/// control socket) for a savepoint; returns its path. `parent` is the
/// directory to create it in (`--target` or `savepoint.dir`; None:
/// `<state.dir>/savepoints/`). A parent the process would refuse (inside
/// `checkpoints/`, not a directory, not writable, ...) is refused here
/// first, without contacting it and without touching the disk.
pub fn trigger(layout: &Layout, pipeline: &str, parent: Option<&Path>, end: Ending, timeout: Duration) -> Result<PathBuf, SavepointError> {
    let socket = layout.control_socket();
    let dir = check_target(layout, parent)?;
    let (stop, drain) = match end {
        Ending::KeepRunning => (false, false),
        Ending::Stop => (true, false),
        Ending::StopAndDrain => (true, true),
    };
    let request = Request::Savepoint(SavepointRequest { dir, stop, drain, on_sigterm: false });
    let response = call(&socket, pipeline, &request, timeout)?;
    match response.get("path").and_then(|p| p.as_str()) {
        Some(path) if response["ok"] == true => Ok(PathBuf::from(path)),
        _ => Err(SavepointError::Failed(format!("savepoint failed: {}", error_of(&response)))),
    }
}

/// The savepoint parent `parent` as the process is sent it (absolute),
/// refused if the process would refuse it; reads only.
pub fn check_target(layout: &Layout, parent: Option<&Path>) -> Result<Option<PathBuf>, SavepointError> {
    Ok(match parent {
        // Object storage: the running process checks it when it uploads.
        Some(t) if t.to_str().is_some_and(crate::checkpoint::remote::is_url) => Some(t.to_path_buf()),
        Some(t) => {
            let abs = std::path::absolute(t).map_err(|e| SavepointError::Failed(format!("target {}: {e}", t.display())))?;
            crate::checkpoint::savepoint::check(layout, &abs).map_err(|e| SavepointError::Refused(e.to_string()))?;
            Some(abs)
        }
        None => None,
    })
}

/// Ask the process running on the state directory of `layout` how it is
/// doing (the `status` request of the control socket).
pub fn status(layout: &Layout, pipeline: &str, timeout: Duration) -> Result<Status, SavepointError> {
    let response = call(&layout.control_socket(), pipeline, &Request::Status(StatusRequest {}), timeout)?;
    if response["ok"] != true {
        return Err(SavepointError::Failed(format!("status failed: {}", error_of(&response))));
    }
    serde_json::from_value(response).map_err(|e| SavepointError::Failed(format!("unreadable status: {e}")))
}

/// One request, one response line.
fn call(socket: &Path, pipeline: &str, request: &Request, timeout: Duration) -> Result<serde_json::Value, SavepointError> {
    let failed = SavepointError::Failed;
    let no_process = |e: std::io::Error| {
        failed(format!("no running weir process for pipeline `{pipeline}`: cannot connect to {} ({e})", socket.display()))
    };
    let addr = crate::serve::control::SocketPath::new(socket).map_err(no_process)?;
    let mut stream = UnixStream::connect(addr.path()).map_err(no_process)?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| failed(e.to_string()))?;
    let mut line = serde_json::to_string(request).map_err(|e| failed(e.to_string()))?;
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(|e| failed(format!("sending the request: {e}")))?;
    let mut answer = String::new();
    match BufReader::new(&stream).read_line(&mut answer) {
        Ok(0) => Err(failed("the pipeline closed the connection without answering".into())),
        Ok(_) => serde_json::from_str(&answer).map_err(|e| failed(format!("unreadable answer {answer:?}: {e}"))),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            Err(failed(format!("no answer within {} (the savepoint may still complete)", humantime::format_duration(timeout))))
        }
        Err(e) => Err(failed(format!("reading the answer: {e}"))),
    }
}

fn error_of(response: &serde_json::Value) -> String {
    response.get("error").and_then(|e| e.as_str()).unwrap_or("no reason given").to_string()
}

/// Remove the savepoint at `path` (its directory or `_metadata`), and only
/// that: a directory named by its own name (no `.` or `..` to resolve, not
/// a symbolic link, with or without a trailing slash) that is exactly a
/// savepoint root. Everything is checked before anything is deleted.
pub fn dispose(path: &Path) -> Result<PathBuf, SavepointError> {
    if let Some(url) = path.to_str().filter(|p| crate::checkpoint::remote::is_url(p)) {
        return dispose_url(url, &[]);
    }
    let refused = |why: String| SavepointError::Refused(format!("not disposing {}: {why}", path.display()));
    let (parent, name) = split_savepoint_path(path).map_err(refused)?;
    // The parent is resolved once; the last component is never followed.
    let parent = parent.canonicalize().map_err(|e| refused(format!("{}: {e}", parent.display())))?;
    let dir = parent.join(&name);
    let checked = savepoint_root(&dir).map_err(refused)?;
    // Out of reach under a private name first, then checked again: what is
    // deleted is what was checked, even if the path changed meanwhile.
    let doomed = parent.join(format!(".{}.weir-dispose-{}", name.to_string_lossy(), std::process::id()));
    std::fs::rename(&dir, &doomed).map_err(|e| SavepointError::Failed(format!("moving {} out of the way: {e}", dir.display())))?;
    match savepoint_root(&doomed) {
        Ok(again) if again == checked => {}
        other => {
            let _ = std::fs::rename(&doomed, &dir);
            let why = other.err().unwrap_or_else(|| "it was replaced while being disposed".into());
            return Err(refused(why));
        }
    }
    std::fs::remove_dir_all(&doomed).map_err(|e| SavepointError::Failed(format!("removing {}: {e}", doomed.display())))?;
    Ok(dir)
}

/// Remove the savepoint at `url` in object storage (`s3://.../NAME` or its
/// `_metadata`): only when its `_metadata` says savepoint; `_metadata`
/// goes first, so an interrupted dispose leaves no savepoint that looks
/// complete, and the name's claim last. Credentials come from the AWS
/// environment and `options` (the pipeline's `storage_options`).
pub(super) fn dispose_url(url: &str, options: &[(String, String)]) -> Result<PathBuf, SavepointError> {
    use crate::checkpoint::storage::Storage;
    let refused = |why: String| SavepointError::Refused(format!("not disposing {url}: {why}"));
    let trimmed = url.trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/_metadata").unwrap_or(trimmed);
    let Some((root, name)) = trimmed.rsplit_once('/').filter(|(r, _)| r.len() > "s3://".len()) else {
        return Err(refused("names a bucket, not a savepoint in it".into()));
    };
    let storage = crate::checkpoint::remote::ObjectStorage::open(root, options).map_err(refused)?;
    let bytes = storage.get(&crate::checkpoint::publish::metadata_key(name)).map_err(|e| refused(e.to_string()))?;
    let md: crate::checkpoint::manifest::Metadata =
        crate::checkpoint::manifest::Document::from_bytes(&bytes).map_err(|e| refused(format!("its _metadata: {e}")))?;
    if md.kind != crate::types::Kind::Savepoint {
        return Err(refused("its _metadata says checkpoint, not savepoint".into()));
    }
    let failed = |e: crate::checkpoint::storage::StorageError| SavepointError::Failed(e.to_string());
    crate::checkpoint::publish::remove(&storage, name).map_err(failed)?;
    // The claim that reserved the name for its writer (`upload_savepoint`).
    storage.delete(&format!("{name}.claim")).map_err(failed)?;
    Ok(PathBuf::from(trimmed))
}

/// The directory a dispose `path` names, as (parent, last component),
/// lexically: a trailing slash and a last `_metadata` are dropped; `..`
/// anywhere and a last `.` are refused (`sp/bundle-000/..` and `.` must not
/// stand for a savepoint: say its name).
fn split_savepoint_path(path: &Path) -> Result<(PathBuf, std::ffi::OsString), String> {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // Empty segments are repeated, leading or trailing slashes.
    let mut segs: Vec<&[u8]> = bytes.split(|&c| c == b'/').filter(|s| !s.is_empty()).collect();
    if segs.contains(&&b".."[..]) {
        return Err("`..` in the path is refused; name the savepoint directory itself".into());
    }
    if !bytes.ends_with(b"/") && segs.last() == Some(&METADATA_FILE.as_bytes()) {
        if segs.len() == 1 {
            return Err(format!("name the savepoint directory, not a bare `{METADATA_FILE}`"));
        }
        segs.pop();
    }
    let name = match segs.pop() {
        None => return Err("the root directory is not a savepoint".into()),
        Some(b".") => return Err("`.` is refused; name the savepoint directory itself".into()),
        Some(n) => OsStr::from_bytes(n).to_os_string(),
    };
    let joined = segs.join(&b'/');
    let parent = match (bytes.starts_with(b"/"), joined.is_empty()) {
        (true, _) => PathBuf::from("/").join(OsStr::from_bytes(&joined)),
        (false, true) => PathBuf::from("."),
        (false, false) => PathBuf::from(OsStr::from_bytes(&joined)),
    };
    Ok((parent, name))
}

/// Check that `dir` is exactly a savepoint root: a real directory (not a
/// link) whose `_metadata` says savepoint and validates, holding nothing but
/// `_metadata` and `bundle-NNN` directories of regular files. Returns its
/// identity (device, inode).
fn savepoint_root(dir: &Path) -> Result<(u64, u64), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if meta.file_type().is_symlink() {
        return Err("it is a symbolic link".into());
    }
    if !meta.is_dir() {
        return Err("it is not a directory".into());
    }
    let md_path = dir.join(METADATA_FILE);
    let bytes = disk::read_regular(&md_path).map_err(|e| format!("no readable {METADATA_FILE} ({e}), so it is not a weir savepoint"))?;
    let md = Metadata::from_bytes(&bytes).map_err(|e| format!("{}: {e}", md_path.display()))?;
    if md.kind != Kind::Savepoint {
        return Err(format!("its {METADATA_FILE} says it is a {:?}, not a savepoint", md.kind).to_lowercase());
    }
    let list = |d: &Path| -> Result<Vec<(String, std::fs::FileType)>, String> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(d).map_err(|e| format!("{}: {e}", d.display()))? {
            let entry = entry.map_err(|e| format!("{}: {e}", d.display()))?;
            let t = entry.file_type().map_err(|e| format!("{}: {e}", entry.path().display()))?;
            out.push((entry.file_name().to_string_lossy().into_owned(), t));
        }
        Ok(out)
    };
    for (name, t) in list(dir)? {
        let is_bundle = layout::parse_bundle_dir_name(&name).is_some() && t.is_dir();
        if !(name == METADATA_FILE && t.is_file()) && !is_bundle {
            return Err(format!("it holds `{name}` ({}), which is not part of a savepoint", disk::kind_of(&t)));
        }
        if is_bundle {
            if let Some((inner, t)) = list(&dir.join(&name))?.into_iter().find(|(_, t)| !t.is_file()) {
                return Err(format!("it holds `{name}/{inner}`, which is {}, not a state file", disk::kind_of(&t)));
            }
        }
    }
    Ok((meta.dev(), meta.ino()))
}

/// A table of the savepoints of `pipeline`: every directory in the state
/// directory's `savepoints/`, then its children (`savepoint-<pipeline>-<id>`)
/// in each of `parents` (`savepoint.dir`, `--target`; directories or
/// `s3://` URLs, opened with `options`, the pipeline's `storage_options`);
/// a parent that does not exist yet holds none.
pub fn list(layout: &Layout, pipeline: &str, parents: &[PathBuf], options: &[(String, String)]) -> Result<String, SavepointError> {
    let mut dirs = children(&layout.savepoints_dir(), |_| true)?;
    let mut seen = vec![crate::checkpoint::savepoint::resolve(&layout.savepoints_dir()).unwrap_or_else(|_| layout.savepoints_dir())];
    let mut stored = Vec::new();
    for parent in parents {
        if let Some(url) = parent.to_str().filter(|p| crate::checkpoint::remote::is_url(p)) {
            stored.extend(stored_rows(url.trim_end_matches('/'), pipeline, options)?);
            continue;
        }
        let resolved = crate::checkpoint::savepoint::resolve(parent).unwrap_or_else(|_| parent.clone());
        if !seen.contains(&resolved) {
            seen.push(resolved);
            dirs.extend(children(parent, |name| crate::checkpoint::savepoint::is_child_name(pipeline, name))?);
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "{:<10} {:<24} {:>12}  {:<40}  VALID", "ID", "CREATED (UTC)", "BYTES", "PATH");
    for d in dirs {
        let (id, created, bytes, valid) = match validate::validate_dir(&d) {
            Ok(v) => {
                let bytes: u64 = v.manifests.iter().flat_map(|m| &m.files).map(|f| f.size).sum();
                (v.metadata.checkpoint_id.to_string(), super::inspect::time(v.metadata.created_ms), bytes.to_string(), "yes".to_string())
            }
            Err(e) => ("?".into(), "?".into(), "?".into(), format!("no: {e}")),
        };
        let _ = writeln!(out, "{id:<10} {created:<24} {bytes:>12}  {:<40}  {valid}", d.display());
    }
    for row in stored {
        out.push_str(&row);
    }
    Ok(out)
}

/// The rows of `list` for the savepoints of `pipeline` under the object
/// storage parent `url` (`savepoint.dir: s3://...`, `--target s3://...`):
/// each child `savepoint-<pipeline>-<id>` with a `_metadata`, downloaded
/// into a temp directory and validated there.
fn stored_rows(url: &str, pipeline: &str, options: &[(String, String)]) -> Result<Vec<String>, SavepointError> {
    use crate::checkpoint::storage::Storage;
    let failed = |e: String| SavepointError::Failed(format!("listing {url}: {e}"));
    let storage = crate::checkpoint::remote::ObjectStorage::open(url, options).map_err(failed)?;
    let objects = storage.list("").map_err(|e| failed(e.to_string()))?;
    let mut rows = Vec::new();
    let names = objects.iter().filter_map(|o| o.key.strip_suffix(&format!("/{METADATA_FILE}")));
    for name in names.filter(|n| !n.contains('/') && crate::checkpoint::savepoint::is_child_name(pipeline, n)) {
        let verdict = crate::restore::remote::download(&storage, name).map_err(|e| failed(e.to_string()))?.0;
        let (id, created, bytes, valid) = match verdict {
            Ok(v) => {
                let bytes: u64 = v.manifests.iter().flat_map(|m| &m.files).map(|f| f.size).sum();
                (v.metadata.checkpoint_id.to_string(), super::inspect::time(v.metadata.created_ms), bytes.to_string(), "yes".to_string())
            }
            Err(e) => ("?".into(), "?".into(), "?".into(), format!("no: {e}")),
        };
        rows.push(format!("{id:<10} {created:<24} {bytes:>12}  {:<40}  {valid}\n", storage.url(name)));
    }
    Ok(rows)
}

/// The directories in `dir` whose name `keep`s, sorted; none if it is missing.
fn children(dir: &Path, keep: impl Fn(&str) -> bool) -> Result<Vec<PathBuf>, SavepointError> {
    let mut dirs: Vec<PathBuf> = match std::fs::read_dir(dir) {
        // Hidden names are savepoints being written or disposed.
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(|n| !n.starts_with('.') && keep(n)))
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(SavepointError::Failed(format!("listing {}: {e}", dir.display()))),
    };
    dirs.sort();
    Ok(dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispose_paths_name_the_directory_itself() {
        let ok = |p: &str| split_savepoint_path(Path::new(p)).map(|(d, n)| (d.display().to_string(), n.to_string_lossy().into_owned()));
        let pair = |d: &str, n: &str| Ok((d.to_string(), n.to_string()));
        assert_eq!(ok("sp"), pair(".", "sp"));
        assert_eq!(ok("sp/"), pair(".", "sp"));
        assert_eq!(ok("./sp//"), pair(".", "sp"));
        assert_eq!(ok("sp/_metadata"), pair(".", "sp"));
        assert_eq!(ok("/a/b/sp/_metadata"), pair("/a/b", "sp"));
        assert_eq!(ok("/sp"), pair("/", "sp"));
        assert_eq!(ok("a//b/sp"), pair("a/b", "sp"));
        // `sp/_metadata/` names a directory called `_metadata` (then refused as no savepoint).
        assert_eq!(ok("sp/_metadata/"), pair("sp", "_metadata"));
        for bad in [".", "./", "sp/.", "sp/bundle-000/..", "..", "../sp", "a/../sp", "/", "", "_metadata", "sp/./_metadata"] {
            assert!(ok(bad).is_err(), "{bad:?} was accepted: {:?}", ok(bad));
        }
    }
}

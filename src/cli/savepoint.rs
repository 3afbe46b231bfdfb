//! `weir savepoint trigger|dispose|list`: the client of a running
//! pipeline's control socket, and the savepoints on disk.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::checkpoint::layout::{self, Layout, METADATA_FILE};
use crate::checkpoint::manifest::{Document, Kind, Metadata};
use crate::checkpoint::validate;
use crate::runtime::control::{Request, SavepointRequest};

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

/// Ask the process listening on `socket` for a savepoint; returns its path.
pub fn trigger(socket: &Path, pipeline: &str, target: Option<&Path>, end: Ending, timeout: Duration) -> Result<PathBuf, SavepointError> {
    let target = match target {
        Some(t) => Some(std::path::absolute(t).map_err(|e| SavepointError::Failed(format!("target {}: {e}", t.display())))?),
        None => None,
    };
    let (stop, drain) = match end {
        Ending::KeepRunning => (false, false),
        Ending::Stop => (true, false),
        Ending::StopAndDrain => (true, true),
    };
    let request = Request::Savepoint(SavepointRequest { target, stop, drain });
    let response = call(socket, pipeline, &request, timeout)?;
    match response.get("path").and_then(|p| p.as_str()) {
        Some(path) if response["ok"] == true => Ok(PathBuf::from(path)),
        _ => Err(SavepointError::Failed(format!("savepoint failed: {}", error_of(&response)))),
    }
}

/// One request, one response line.
fn call(socket: &Path, pipeline: &str, request: &Request, timeout: Duration) -> Result<serde_json::Value, SavepointError> {
    let failed = SavepointError::Failed;
    let no_process = |e: std::io::Error| {
        failed(format!("no running weir process for pipeline `{pipeline}`: cannot connect to {} ({e})", socket.display()))
    };
    let addr = crate::runtime::control::SocketPath::new(socket).map_err(no_process)?;
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

/// Remove the savepoint at `path` (its directory or `_metadata`), and only that.
pub fn dispose(path: &Path) -> Result<PathBuf, SavepointError> {
    let refused = |why: String| SavepointError::Refused(format!("not disposing {}: {why}", path.display()));
    let dir = if path.file_name().is_some_and(|n| n == METADATA_FILE) { path.parent().unwrap_or(path) } else { path };
    let meta = std::fs::symlink_metadata(dir).map_err(|e| refused(e.to_string()))?;
    if meta.file_type().is_symlink() {
        return Err(refused("it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(refused("it is not a directory".into()));
    }
    let md_path = dir.join(METADATA_FILE);
    let bytes =
        std::fs::read(&md_path).map_err(|e| refused(format!("no readable {METADATA_FILE} ({e}), so it is not a weir savepoint")))?;
    let md = Metadata::from_bytes(&bytes).map_err(|e| refused(format!("{}: {e}", md_path.display())))?;
    if md.kind != Kind::Savepoint {
        return Err(refused(format!("its {METADATA_FILE} says it is a {:?}, not a savepoint", md.kind).to_lowercase()));
    }
    for entry in std::fs::read_dir(dir).map_err(|e| refused(e.to_string()))? {
        let name = entry.map_err(|e| refused(e.to_string()))?.file_name();
        let name = name.to_string_lossy();
        if name != METADATA_FILE && layout::parse_bundle_dir_name(&name).is_none() {
            return Err(refused(format!("it holds `{name}`, which is not part of a savepoint")));
        }
    }
    std::fs::remove_dir_all(dir).map_err(|e| SavepointError::Failed(format!("removing {}: {e}", dir.display())))?;
    Ok(dir.to_path_buf())
}

/// A table of the savepoints under the state directory.
pub fn list(layout: &Layout) -> Result<String, SavepointError> {
    let dir = layout.savepoints_dir();
    let mut dirs: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(SavepointError::Failed(format!("listing {}: {e}", dir.display()))),
    };
    dirs.sort();
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
    Ok(out)
}

//! The control socket of a running pipeline: `<state.dir>/control.sock`, a
//! Unix socket only its owner may use (mode 0600), speaking JSON lines.
//!
//! Each request line gets one response line. Requests go to the checkpoint
//! driver over a channel with a oneshot reply; this module only does the
//! I/O. The protocol is documented in docs/checkpoints.md (Savepoints).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::checkpoint::CheckpointId;

/// A request line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Savepoint(SavepointRequest),
    Status(StatusRequest),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavepointRequest {
    /// Where to write the savepoint (absolute); None: `<state.dir>/savepoints/sp-<id>`.
    #[serde(default)]
    pub target: Option<PathBuf>,
    /// Stop-with-savepoint: the savepoint is the final checkpoint.
    #[serde(default)]
    pub stop: bool,
    /// With `stop`: advance event time to the end first, so every window
    /// fires and is committed with the savepoint.
    #[serde(default)]
    pub drain: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRequest {}

/// What the driver knows about the running pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub pipeline: String,
    pub parallelism: u16,
    /// The newest completed checkpoint (0: none yet).
    pub last_checkpoint: CheckpointId,
    /// The checkpoint or savepoint in progress, if any.
    pub running: Option<CheckpointId>,
    pub savepoint_in_progress: bool,
    pub stopping: bool,
}

/// A response line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Response {
    Savepoint {
        ok: bool,
        path: PathBuf,
    },
    Status {
        ok: bool,
        #[serde(flatten)]
        status: Status,
    },
    Error {
        ok: bool,
        error: String,
    },
}

impl Response {
    pub fn error(e: impl Into<String>) -> Response {
        Response::Error { ok: false, error: e.into() }
    }
}

/// A request for the checkpoint driver, with where to send its answer.
#[derive(Debug)]
pub enum Command {
    Savepoint { request: SavepointRequest, reply: oneshot::Sender<Result<PathBuf, String>> },
    Status { reply: oneshot::Sender<Status> },
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control socket {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// The listening socket; `shutdown` stops it and removes the socket file.
pub struct ControlServer {
    path: PathBuf,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// How long open connections may still finish after the pipeline ended.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

impl ControlServer {
    /// Bind `path` and serve until `shutdown`. The caller holds the state
    /// directory's lock, so a socket already there is stale (its process
    /// is gone) and is replaced.
    pub async fn start(path: &Path, commands: mpsc::UnboundedSender<Command>) -> Result<ControlServer, ControlError> {
        let io = |source| ControlError::Io { path: path.to_path_buf(), source };
        if std::fs::symlink_metadata(path).is_ok() {
            std::fs::remove_file(path).map_err(io)?;
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let addr = SocketPath::new(path).map_err(io)?;
        let listener = UnixListener::bind(addr.path()).map_err(io)?;
        set_owner_only(path).map_err(io)?;
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(serve(listener, commands, stop_rx));
        tracing::debug!(socket = %path.display(), "Control socket listening.");
        Ok(ControlServer { path: path.to_path_buf(), stop, task })
    }

    /// Stop accepting, let open connections answer (briefly), remove the socket.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_millis(500), self.task).await;
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The longest path a Unix socket address holds (`sun_path` is 108 bytes
/// on Linux, with the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// A path to bind or connect a socket file by: the file's own path, or,
/// when that is too long for a socket address, the same name reached
/// through an open handle of its directory (`/proc/self/fd/N/control.sock`),
/// so any state directory can have its socket. Keep it alive while binding
/// or connecting.
pub struct SocketPath {
    path: PathBuf,
    _dir: Option<std::fs::File>,
}

impl SocketPath {
    pub fn new(path: &Path) -> std::io::Result<SocketPath> {
        if path.as_os_str().len() <= MAX_SOCKET_PATH {
            return Ok(SocketPath { path: path.to_path_buf(), _dir: None });
        }
        let too_long = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path is too long for a Unix socket");
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return Err(too_long()) };
        let dir = std::fs::File::open(if dir.as_os_str().is_empty() { Path::new(".") } else { dir })?;
        let short = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&dir))).join(name);
        if short.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(too_long());
        }
        Ok(SocketPath { path: short, _dir: Some(dir) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn set_owner_only(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

async fn serve(listener: UnixListener, commands: mpsc::UnboundedSender<Command>, mut stop: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    conns.spawn(connection(stream, commands.clone()));
                }
                Err(e) => tracing::warn!(error = %e, "Control socket accept failed."),
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        conns.abort_all();
    }
}

/// Answer every request line of one connection.
async fn connection(stream: UnixStream, commands: mpsc::UnboundedSender<Command>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        let response = answer(&line, &commands).await;
        let mut out = serde_json::to_string(&response).unwrap_or_else(|_| r#"{"ok":false,"error":"encoding"}"#.into());
        out.push('\n');
        if write.write_all(out.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn answer(line: &str, commands: &mpsc::UnboundedSender<Command>) -> Response {
    let request: Request = match serde_json::from_str(line) {
        Ok(r) => r,
        Err(e) => return Response::error(format!("bad request: {e}")),
    };
    let gone = || Response::error("the pipeline is shutting down");
    match request {
        Request::Savepoint(request) => {
            let (reply, rx) = oneshot::channel();
            if commands.send(Command::Savepoint { request, reply }).is_err() {
                return gone();
            }
            match rx.await {
                Ok(Ok(path)) => Response::Savepoint { ok: true, path },
                Ok(Err(e)) => Response::error(e),
                Err(_) => Response::error("the pipeline ended before the savepoint completed"),
            }
        }
        Request::Status(_) => {
            let (reply, rx) = oneshot::channel();
            if commands.send(Command::Status { reply }).is_err() {
                return gone();
            }
            match rx.await {
                Ok(status) => Response::Status { ok: true, status },
                Err(_) => gone(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_as_documented() {
        let r: Request = serde_json::from_str(r#"{"savepoint": {"target": null, "stop": true}}"#).unwrap();
        assert_eq!(r, Request::Savepoint(SavepointRequest { target: None, stop: true, drain: false }));
        let r: Request = serde_json::from_str(r#"{"savepoint": {"target": "/tmp/sp"}}"#).unwrap();
        assert_eq!(r, Request::Savepoint(SavepointRequest { target: Some("/tmp/sp".into()), stop: false, drain: false }));
        let r: Request = serde_json::from_str(r#"{"savepoint": {"stop": true, "drain": true}}"#).unwrap();
        assert_eq!(r, Request::Savepoint(SavepointRequest { target: None, stop: true, drain: true }));
        assert_eq!(serde_json::from_str::<Request>(r#"{"status": {}}"#).unwrap(), Request::Status(StatusRequest {}));
        assert!(serde_json::from_str::<Request>(r#"{"savepoint": {"stopp": true}}"#).is_err());
    }

    #[test]
    fn responses_encode_as_documented() {
        let ok = serde_json::to_string(&Response::Savepoint { ok: true, path: "/s/sp-1".into() }).unwrap();
        assert_eq!(ok, r#"{"ok":true,"path":"/s/sp-1"}"#);
        assert_eq!(serde_json::to_string(&Response::error("no")).unwrap(), r#"{"ok":false,"error":"no"}"#);
        let status = Status {
            pipeline: "p".into(),
            parallelism: 2,
            last_checkpoint: 7,
            running: None,
            savepoint_in_progress: false,
            stopping: false,
        };
        let s: serde_json::Value = serde_json::to_value(Response::Status { ok: true, status }).unwrap();
        assert_eq!((s["ok"].as_bool(), s["pipeline"].as_str(), s["last_checkpoint"].as_u64()), (Some(true), Some("p"), Some(7)));
    }
}

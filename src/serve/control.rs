//! The control socket of a running pipeline: `<state.dir>/control.sock`, a
//! Unix socket only its owner may use (mode 0600), speaking JSON lines.
//!
//! Each request line gets one response line. Requests go to the checkpoint
//! driver over a channel with a oneshot reply; this module only does the
//! I/O. The protocol is documented in docs/checkpoints.md (Savepoints).
//!
//! Every client is bounded ([`Limits`]): a request line is read up to a cap
//! and never buffered beyond it, only so many connections are served at
//! once, a connection without a complete request for too long is closed,
//! and failed accepts (EMFILE) back off with a rate-limited warning, so a
//! misbehaving client can cost the pipeline neither memory nor descriptors
//! nor a flood of log lines.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot, watch};

use crate::runtime::control::{Command, Request, Response, Status};
use crate::runtime::status::Snapshot;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control socket {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// The listening socket; `shutdown` stops it and removes the socket file.
pub struct ControlServer {
    path: PathBuf,
    /// Directories created for the socket, deepest first.
    made: Vec<PathBuf>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// How long open connections may still finish after the pipeline ended.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// What one client may cost the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest request line in bytes (without its newline).
    pub max_request: usize,
    /// Connections served at once; further ones get an error line and are closed.
    pub max_clients: usize,
    /// How long a connection may go without a complete request.
    pub idle: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_request: 64 * 1024, max_clients: 16, idle: Duration::from_secs(30) }
    }
}

/// The read buffer of a connection: what may be read past `max_request`.
const READ_BUFFER: usize = 8 * 1024;

impl ControlServer {
    /// Bind `path` and serve until `shutdown`. The caller holds the state
    /// directory's lock, so a socket already there is stale (its process
    /// is gone) and is replaced.
    pub async fn start(
        path: &Path,
        commands: mpsc::UnboundedSender<Command>,
        live: watch::Receiver<Snapshot>,
    ) -> Result<ControlServer, ControlError> {
        ControlServer::start_with(path, Handles { commands: Some(commands), live: Some(live), parallelism: 0 }, Limits::default()).await
    }

    /// The socket of a pipeline without checkpoints, which holds no lock on
    /// its state directory: status only. None, leaving it alone, when a
    /// running process answers on `path` already (another run of the same
    /// pipeline); a socket nobody answers on is stale and replaced.
    pub async fn start_status_only(path: &Path, status: &StatusSource) -> Result<Option<ControlServer>, ControlError> {
        if SocketPath::new(path).is_ok_and(|a| std::os::unix::net::UnixStream::connect(a.path()).is_ok()) {
            return Ok(None);
        }
        let handles = Handles { commands: None, live: Some(status.live.clone()), parallelism: status.parallelism };
        ControlServer::start_with(path, handles, Limits::default()).await.map(Some)
    }

    /// [`ControlServer::start`] with other limits (tests use short ones).
    async fn start_with(path: &Path, handles: Handles, limits: Limits) -> Result<ControlServer, ControlError> {
        let io = |source| ControlError::Io { path: path.to_path_buf(), source };
        if std::fs::symlink_metadata(path).is_ok() {
            std::fs::remove_file(path).map_err(io)?;
        }
        // The directories made for the socket (a run without checkpoints
        // may have no state directory yet), removed again at the end.
        let mut made = Vec::new();
        if let Some(dir) = path.parent() {
            made = dir.ancestors().take_while(|d| !d.as_os_str().is_empty() && !d.exists()).map(Path::to_path_buf).collect();
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let addr = SocketPath::new(path).map_err(io)?;
        let listener = UnixListener::bind(addr.path()).map_err(io)?;
        set_owner_only(path).map_err(io)?;
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(serve(listener, handles, stop_rx, limits));
        tracing::debug!(socket = %path.display(), "Control socket listening.");
        Ok(ControlServer { path: path.to_path_buf(), made, stop, task })
    }

    /// Stop accepting, let open connections answer (briefly), remove the socket.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_millis(500), self.task).await;
        let _ = std::fs::remove_file(&self.path);
        // Deepest first; one that holds anything now stays.
        for dir in &self.made {
            let _ = std::fs::remove_dir(dir);
        }
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

/// Where requests are answered from: the driver (None without
/// checkpoints), and the engine's status.
#[derive(Clone)]
struct Handles {
    commands: Option<mpsc::UnboundedSender<Command>>,
    live: Option<watch::Receiver<Snapshot>>,
    /// The pipeline's parallelism, for a status without a driver.
    parallelism: u16,
}

/// Where the status document comes from: the checkpoint driver (with
/// checkpoints) and the engine's newest sample. The control socket
/// (`weir status`, `--json`) and `GET /status` answer with this one document.
#[derive(Clone)]
pub struct StatusSource {
    commands: Option<mpsc::UnboundedSender<Command>>,
    live: watch::Receiver<Snapshot>,
    parallelism: u16,
}

impl StatusSource {
    pub fn new(commands: Option<mpsc::UnboundedSender<Command>>, live: watch::Receiver<Snapshot>, parallelism: u16) -> StatusSource {
        StatusSource { commands, live, parallelism }
    }

    /// The document, as the control socket's response line has it.
    pub async fn document(&self) -> Response {
        let snapshot = self.live.borrow().clone();
        match &self.commands {
            Some(commands) => driver_status(commands, Some(snapshot)).await,
            None => engine_status(snapshot, self.parallelism),
        }
    }
}

/// The status without a checkpoint driver: what the engine's sample knows.
fn engine_status(snapshot: Snapshot, parallelism: u16) -> Response {
    let status = Status {
        pipeline: snapshot.pipeline.clone(),
        parallelism,
        last_checkpoint: 0,
        running: None,
        savepoint_in_progress: false,
        stopping: snapshot.state == "stopping",
        live: Some(snapshot),
    };
    Response::Status { ok: true, status }
}

/// Ask the driver for its status, and add the engine's sample to it.
async fn driver_status(commands: &mpsc::UnboundedSender<Command>, live: Option<Snapshot>) -> Response {
    let (reply, rx) = oneshot::channel();
    if commands.send(Command::Status { reply }).is_err() {
        return Response::error("the pipeline is shutting down");
    }
    match rx.await {
        Ok(mut status) => {
            status.live = live;
            Response::Status { ok: true, status }
        }
        Err(_) => Response::error("the pipeline is shutting down"),
    }
}

async fn serve(listener: UnixListener, handles: Handles, mut stop: watch::Receiver<bool>, limits: Limits) {
    let mut conns = super::accept::accept_loop(
        &listener,
        "control socket",
        limits.max_clients,
        &mut stop,
        |stream| refuse(stream, limits.max_clients),
        |stream| {
            let (read, write) = stream.into_split();
            connection(read, write, handles.clone(), limits)
        },
    )
    .await;
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        conns.abort_all();
    }
}

/// Answer a client over the limit with one error line, without waiting
/// for it, and close.
fn refuse(stream: UnixStream, max_clients: usize) {
    let mut line = serde_json::to_string(&Response::error(format!("too many control clients (at most {max_clients})")))
        .unwrap_or_else(|_| r#"{"ok":false,"error":"too many control clients"}"#.into());
    line.push('\n');
    let _ = stream.try_write(line.as_bytes());
}

/// What reading one request line gave.
#[derive(Debug, PartialEq, Eq)]
enum Read {
    Line(Vec<u8>),
    /// Longer than the cap; what was read of it is dropped.
    TooLarge,
    Eof,
}

/// Read up to a newline, holding at most `max + 1` bytes of the line (plus
/// the reader's buffer): a longer line is `TooLarge` as soon as that is known.
async fn read_request<R: AsyncBufRead + Unpin>(reader: &mut R, max: usize) -> std::io::Result<Read> {
    let mut line = Vec::new();
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if line.is_empty() { Read::Eof } else { Read::Line(line) });
        }
        let room = (max + 1 - line.len()).min(buf.len());
        if let Some(i) = buf[..room].iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&buf[..i]);
            reader.consume(i + 1);
            return Ok(Read::Line(line));
        }
        line.extend_from_slice(&buf[..room]);
        reader.consume(room);
        if line.len() > max {
            return Ok(Read::TooLarge);
        }
    }
}

/// Answer every request line of one connection, within `limits`.
async fn connection<R, W>(read: R, mut write: W, handles: Handles, limits: Limits)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = BufReader::with_capacity(READ_BUFFER, read);
    loop {
        let response = match tokio::time::timeout(limits.idle, read_request(&mut reader, limits.max_request)).await {
            Err(_) => {
                tracing::debug!(idle_ms = limits.idle.as_millis() as u64, "Control socket client idle too long; closing.");
                return;
            }
            Ok(Err(_)) | Ok(Ok(Read::Eof)) => return,
            Ok(Ok(Read::TooLarge)) => {
                tracing::debug!(max_bytes = limits.max_request, "Control socket request too large; closing.");
                let _ = send(&mut write, &Response::error("request too large")).await;
                return;
            }
            Ok(Ok(Read::Line(line))) => match std::str::from_utf8(&line) {
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => answer(line, &handles).await,
                Err(e) => Response::error(format!("bad request: {e}")),
            },
        };
        if send(&mut write, &response).await.is_err() {
            return;
        }
    }
}

async fn send<W: AsyncWrite + Unpin>(write: &mut W, response: &Response) -> std::io::Result<()> {
    let mut out = serde_json::to_string(response).unwrap_or_else(|_| r#"{"ok":false,"error":"encoding"}"#.into());
    out.push('\n');
    write.write_all(out.as_bytes()).await?;
    write.flush().await
}

async fn answer(line: &str, handles: &Handles) -> Response {
    let request: Request = match serde_json::from_str(line) {
        Ok(r) => r,
        Err(e) => return Response::error(format!("bad request: {e}")),
    };
    let gone = || Response::error("the pipeline is shutting down");
    let Some(commands) = &handles.commands else {
        return match (request, &handles.live) {
            (Request::Status(_), Some(live)) => engine_status(live.borrow().clone(), handles.parallelism),
            (Request::Status(_), None) => gone(),
            (Request::Savepoint(_), _) => Response::error("this pipeline has no `checkpoint:` section, so it takes no savepoints"),
        };
    };
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
        Request::Status(_) => driver_status(commands, handles.live.as_ref().map(|l| l.borrow().clone())).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::control::*;
    use std::time::Instant;

    #[test]
    fn requests_parse_as_documented() {
        let r: Request = serde_json::from_str(r#"{"savepoint": {"dir": null, "stop": true}}"#).unwrap();
        assert_eq!(r, Request::Savepoint(SavepointRequest { dir: None, stop: true, drain: false, on_sigterm: false }));
        let r: Request = serde_json::from_str(r#"{"savepoint": {"dir": "/tmp/sps"}}"#).unwrap();
        assert_eq!(r, Request::Savepoint(SavepointRequest { dir: Some("/tmp/sps".into()), stop: false, drain: false, on_sigterm: false }));
        let r: Request = serde_json::from_str(r#"{"savepoint": {"stop": true, "drain": true}}"#).unwrap();
        assert_eq!(r, Request::Savepoint(SavepointRequest { dir: None, stop: true, drain: true, on_sigterm: false }));
        // `target` (it named the savepoint itself) is gone: refused, not misread.
        assert!(serde_json::from_str::<Request>(r#"{"savepoint": {"target": "/tmp/sp"}}"#).is_err());
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
            live: None,
        };
        let s: serde_json::Value = serde_json::to_value(Response::Status { ok: true, status }).unwrap();
        assert_eq!((s["ok"].as_bool(), s["pipeline"].as_str(), s["last_checkpoint"].as_u64()), (Some(true), Some("p"), Some(7)));
    }

    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncReadExt, ReadBuf};

    /// Serves `bytes` of `x` without a newline, counting what was read.
    struct Endless {
        left: usize,
        read: Arc<AtomicUsize>,
    }

    impl AsyncRead for Endless {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
            let n = self.left.min(buf.remaining()).min(4096);
            buf.put_slice(&vec![b'x'; n]);
            self.left -= n;
            self.read.fetch_add(n, Ordering::SeqCst);
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn oversize_request_is_refused_having_read_at_most_the_cap() {
        let limits = Limits { max_request: 64 * 1024, ..Limits::default() };
        let read = Arc::new(AtomicUsize::new(0));
        let mut out = Vec::new();
        let (commands, _rx) = mpsc::unbounded_channel();
        connection(
            Endless { left: 1 << 20, read: read.clone() },
            &mut out,
            Handles { commands: Some(commands), live: None, parallelism: 1 },
            limits,
        )
        .await;
        assert_eq!(String::from_utf8(out).unwrap(), "{\"ok\":false,\"error\":\"request too large\"}\n");
        let read = read.load(Ordering::SeqCst);
        assert!(read <= limits.max_request + 1 + READ_BUFFER, "read {read} bytes of an oversize line");
    }

    #[tokio::test]
    async fn a_line_of_exactly_the_cap_is_still_a_request() {
        let mut input = vec![b' '; 100];
        input.push(b'\n');
        let mut reader = BufReader::with_capacity(16, &input[..]);
        assert_eq!(read_request(&mut reader, 100).await.unwrap(), Read::Line(vec![b' '; 100]));
        assert_eq!(read_request(&mut reader, 100).await.unwrap(), Read::Eof);
        let mut reader = BufReader::with_capacity(16, &input[..]);
        assert_eq!(read_request(&mut reader, 99).await.unwrap(), Read::TooLarge);
    }

    /// A server on a socket in a temp dir whose driver answers every status request.
    async fn server(limits: Limits) -> (tempfile::TempDir, PathBuf, ControlServer) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(command) = rx.recv().await {
                if let Command::Status { reply } = command {
                    let status = Status {
                        pipeline: "p".into(),
                        parallelism: 1,
                        last_checkpoint: 0,
                        running: None,
                        savepoint_in_progress: false,
                        stopping: false,
                        live: None,
                    };
                    let _ = reply.send(status);
                }
            }
        });
        let server = ControlServer::start_with(&path, Handles { commands: Some(tx), live: None, parallelism: 1 }, limits).await.unwrap();
        (dir, path, server)
    }

    /// Send `request` and read one line back (bounded wait).
    async fn ask(stream: &mut UnixStream, request: &[u8]) -> String {
        // A refused client may be closed already: its answer is still there to read.
        let _ = stream.write_all(request).await;
        read_line(stream).await
    }

    async fn read_line(stream: &mut UnixStream) -> String {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        let read = async {
            while let Ok(1) = stream.read(&mut byte).await {
                if byte[0] == b'\n' {
                    break;
                }
                line.push(byte[0]);
            }
        };
        tokio::time::timeout(Duration::from_secs(5), read).await.expect("no answer within 5 s");
        String::from_utf8(line).unwrap()
    }

    /// True when the server closed the connection (EOF or reset) within 5 s.
    async fn closed(stream: &mut UnixStream) -> bool {
        let mut buf = [0u8; 1024];
        let until_closed = async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(5), until_closed).await.is_ok()
    }

    #[tokio::test]
    async fn oversize_request_on_the_socket_gets_an_error_and_is_closed() {
        let (_dir, path, server) = server(Limits::default()).await;
        let stream = UnixStream::connect(&path).await.unwrap();
        let (mut read, mut write) = stream.into_split();
        // The server stops reading at the cap: the rest may never be taken.
        let writer = tokio::spawn(async move {
            let chunk = vec![b'x'; 64 * 1024];
            for _ in 0..16 {
                if write.write_all(&chunk).await.is_err() {
                    break;
                }
            }
        });
        let mut answer = String::new();
        let mut reader = BufReader::new(&mut read);
        tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut answer)).await.unwrap().unwrap();
        assert_eq!(answer, "{\"ok\":false,\"error\":\"request too large\"}\n");
        let mut rest = Vec::new();
        let end = tokio::time::timeout(Duration::from_secs(5), reader.read_to_end(&mut rest)).await.expect("not closed");
        assert!(end.is_err() || rest.is_empty(), "{end:?} {rest:?}");
        tokio::time::timeout(Duration::from_secs(5), writer).await.expect("writer blocked").unwrap();
        server.shutdown().await;
    }

    #[tokio::test]
    async fn clients_over_the_limit_are_refused_until_one_leaves() {
        let limits = Limits { max_clients: 2, ..Limits::default() };
        let (_dir, path, server) = server(limits).await;
        let status = b"{\"status\": {}}\n";
        let mut a = UnixStream::connect(&path).await.unwrap();
        let mut b = UnixStream::connect(&path).await.unwrap();
        assert!(ask(&mut a, status).await.contains("\"ok\":true"));
        assert!(ask(&mut b, status).await.contains("\"ok\":true"));
        let mut c = UnixStream::connect(&path).await.unwrap();
        assert_eq!(read_line(&mut c).await, "{\"ok\":false,\"error\":\"too many control clients (at most 2)\"}");
        assert!(closed(&mut c).await);
        // The server notices `a` is gone when it reads its EOF: poll briefly.
        drop(a);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut d = UnixStream::connect(&path).await.unwrap();
            let answer = ask(&mut d, status).await;
            if answer.contains("\"ok\":true") {
                break;
            }
            assert!(Instant::now() < deadline, "still refused: {answer}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ask(&mut b, status).await.contains("\"ok\":true"));
        server.shutdown().await;
    }

    #[tokio::test]
    async fn idle_clients_are_closed_after_the_idle_time() {
        let limits = Limits { idle: Duration::from_millis(200), ..Limits::default() };
        let (_dir, path, server) = server(limits).await;
        let started = Instant::now();
        let mut silent = UnixStream::connect(&path).await.unwrap();
        // An incomplete request does not keep a connection open either.
        let mut trickle = UnixStream::connect(&path).await.unwrap();
        trickle.write_all(b"{\"status\"").await.unwrap();
        assert!(closed(&mut silent).await, "a silent client was never closed");
        assert!(closed(&mut trickle).await, "a client with half a request was never closed");
        assert!(started.elapsed() >= Duration::from_millis(200));
        // A client that keeps asking stays.
        let mut busy = UnixStream::connect(&path).await.unwrap();
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(120)).await;
            assert!(ask(&mut busy, b"{\"status\": {}}\n").await.contains("\"ok\":true"));
        }
        server.shutdown().await;
    }
}

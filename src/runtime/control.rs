//! What the control socket (`serve::control`) speaks: its request and
//! response lines (JSON), and the commands they become for the checkpoint
//! driver. The protocol is documented in docs/checkpoints.md (Savepoints).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::status::Snapshot;
use crate::types::CheckpointId;

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
    /// The directory to create the savepoint in (absolute), as a new child
    /// `savepoint-<pipeline>-<id>`; None: `<state.dir>/savepoints/sp-<id>`.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Stop-with-savepoint: the savepoint is the final checkpoint.
    #[serde(default)]
    pub stop: bool,
    /// With `stop`: advance event time to the end first, so every window
    /// fires and is committed with the savepoint.
    #[serde(default)]
    pub drain: bool,
    /// Taken because of SIGTERM (`savepoint.on_sigterm`), so marked for
    /// retention. Never read from the socket: only the process itself asks.
    #[serde(skip)]
    pub on_sigterm: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRequest {}

/// What the driver knows about the running pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub pipeline: String,
    pub parallelism: u16,
    /// The newest completed checkpoint (0: none yet).
    pub last_checkpoint: CheckpointId,
    /// The checkpoint or savepoint in progress, if any.
    pub running: Option<CheckpointId>,
    pub savepoint_in_progress: bool,
    pub stopping: bool,
    /// Rates, operators, watermark and checkpoints (runtime/status.rs),
    /// added by the server from the engine's newest sample.
    #[serde(default)]
    pub live: Option<Snapshot>,
}

/// A response line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

//! Running the real `weir` binary (as a `weir_test_support::process`) and
//! reading what it wrote.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use weir_test_support::process::{Ended as Outcome, Process as Running};

/// A hang fails the test instead of blocking CI.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `weir ARGS...` with cwd = repository root, so pipeline paths resolve.
pub struct Weir {
    cmd: Command,
    line: Vec<String>,
}

pub fn weir<S: AsRef<str>>(args: &[S]) -> Weir {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.current_dir(repo());
    // Tests read each "Checkpoint complete." line (the default without a
    // terminal is a line per minute).
    cmd.env("WEIR_CHECKPOINT_LOG", "each");
    let mut w = Weir { cmd, line: vec!["weir".into()] };
    for a in args {
        w = w.arg(a.as_ref());
    }
    w
}

/// `weir run PIPELINE -p N --no-progress`.
pub fn weir_run(pipeline: &str, parallelism: u32) -> Weir {
    weir(&["run", pipeline, "--no-progress", "-p", &parallelism.to_string()])
}

impl Weir {
    pub fn arg(mut self, a: impl AsRef<str>) -> Self {
        self.cmd.arg(a.as_ref());
        self.line.push(a.as_ref().to_string());
        self
    }

    /// `--set KEY=VALUE`.
    pub fn set(self, key: &str, value: impl AsRef<Path>) -> Self {
        self.arg("--set").arg(format!("{key}={}", value.as_ref().display()))
    }

    /// Run in `dir` instead of the repository root.
    pub fn cwd(mut self, dir: impl AsRef<Path>) -> Self {
        self.cmd.current_dir(dir.as_ref());
        self
    }

    pub fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.env(k, v);
        self
    }

    pub fn env_remove(mut self, k: &str) -> Self {
        self.cmd.env_remove(k);
        self
    }

    pub fn spawn(self) -> Running {
        Running::spawn(self.cmd, self.line.join(" "))
    }

    /// Run to completion (or kill after RUN_TIMEOUT and fail).
    #[track_caller]
    pub fn run(self) -> Outcome {
        self.spawn().wait_for(RUN_TIMEOUT)
    }

    /// Run and insist on exit 0.
    #[track_caller]
    pub fn ok(self) -> Outcome {
        let o = self.run();
        o.expect_code(0);
        o
    }
}

/// A temporary directory that is removed when the test ends.
pub fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("weir-e2e-").tempdir().expect("creating a temp dir")
}

/// The visible part files of a sink directory (hidden in-progress files are
/// not output), in name order.
pub fn part_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("reading sink dir").path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    files.sort();
    files
}

/// Names in `dir` that start with '.' (files still being written).
pub fn hidden_files(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries.map(|e| e.expect("reading sink dir").file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with('.')).collect()
}

/// Every line of every visible part file of a sink, in file order.
pub fn sink_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for f in part_files(dir) {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("reading {}: {e}", f.display()));
        lines.extend(text.lines().map(String::from));
    }
    lines
}

/// The lines of a repository file, as text.
pub fn input_lines(rel: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"));
    text.lines().map(String::from).collect()
}

pub use super::wait::wait_until;

/// One request line to a control socket and its JSON answer, or why there
/// was none within `limit` (a starved server times out instead of hanging).
pub fn control_request(socket: &Path, request: &str, limit: Duration) -> Result<serde_json::Value, String> {
    use std::io::{BufRead, Write};
    let s = std::os::unix::net::UnixStream::connect(socket).map_err(|e| format!("connecting to {}: {e}", socket.display()))?;
    s.set_read_timeout(Some(limit)).and_then(|()| s.set_write_timeout(Some(limit))).map_err(|e| e.to_string())?;
    (&s).write_all(format!("{request}\n").as_bytes()).map_err(|e| format!("sending: {e}"))?;
    let mut line = String::new();
    std::io::BufReader::new(&s).read_line(&mut line).map_err(|e| format!("no answer within {limit:?}: {e}"))?;
    serde_json::from_str(&line).map_err(|e| format!("answer {line:?}: {e}"))
}

//! Dead-letter files: bad or late records, one JSON line each with the reason.
//!
//! One writer per path is shared by all subtasks of the pipeline, so the file
//! is opened once and lines never interleave.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[derive(Clone)]
pub struct DeadLetter {
    path: Arc<PathBuf>,
    out: Arc<Mutex<BufWriter<File>>>,
}

impl DeadLetter {
    /// Write one entry: `{"origin":..., "reason":..., "record":...}`.
    /// `record` is the raw input text, kept as a string (it may not be JSON).
    pub fn write(&self, origin: &str, reason: &str, record: &str) -> std::io::Result<()> {
        let line = serde_json::json!({ "origin": origin, "reason": reason, "record": record });
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")
    }

    pub fn flush(&self) -> std::io::Result<()> {
        self.out.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A bad input record at `place` (file:line, topic/partition@offset): count
/// it, then fail naming it, skip it, or dead-letter it as `who@place`.
pub fn reject(
    on_error: &crate::config::OnError,
    dead_letter: Option<&DeadLetter>,
    (who, place): (&str, &str),
    text: &str,
    reason: &str,
    metrics: &super::OperatorMetrics,
) -> Result<(), super::OpError> {
    use crate::config::OnError;
    super::OperatorMetrics::add(&metrics.records_dropped, 1);
    match on_error {
        OnError::Fail => Err(super::OpError::Data(format!("bad record at {place}: {reason}: {}", truncate(text, 200)))),
        OnError::Skip => Ok(()),
        OnError::DeadLetter(_) => {
            let dl = dead_letter.expect("dead letter opened for on_error: dead_letter");
            dl.write(&format!("{who}@{place}"), reason, text)
                .map_err(|e| super::OpError::io(format!("writing dead letter {}", dl.path().display()), e))
        }
    }
}

/// At most `max` characters of `s`, for error messages.
fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Opens each dead-letter path once (appending) and hands out shared writers.
#[derive(Default)]
pub struct DeadLetters {
    open: HashMap<PathBuf, DeadLetter>,
}

impl DeadLetters {
    pub fn get(&mut self, path: &Path) -> std::io::Result<DeadLetter> {
        if let Some(d) = self.open.get(path) {
            return Ok(d.clone());
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let d = DeadLetter { path: Arc::new(path.to_path_buf()), out: Arc::new(Mutex::new(BufWriter::new(file))) };
        self.open.insert(path.to_path_buf(), d.clone());
        Ok(d)
    }
}

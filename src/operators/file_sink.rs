//! The file sink: JSON lines into rolling part files in a directory.
//!
//! A part file is written under a hidden name (`.part-…inprogress`) and
//! renamed to its final name only when finished, so a reader of the
//! directory only ever sees complete files.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{Context, OpError, OpResult, Operator};
use crate::types::Record;

pub struct FileSink {
    dir: PathBuf,
    max_file_bytes: u64,
    subtask: u16,
    /// Sequence number of the next part file of this subtask.
    next_seq: u64,
    current: Option<Part>,
}

struct Part {
    writer: BufWriter<File>,
    hidden: PathBuf,
    final_path: PathBuf,
    bytes: u64,
}

/// Final name of part `seq` of `subtask`.
pub fn part_name(subtask: u16, seq: u64) -> String {
    format!("part-{subtask:04}-{seq:06}.jsonl")
}

/// The hidden name a part has while it is written.
pub fn in_progress_name(final_name: &str) -> String {
    format!(".{final_name}.inprogress")
}

impl FileSink {
    pub fn new(dir: &Path, max_file_bytes: u64, subtask: u16) -> Result<Self, OpError> {
        fs::create_dir_all(dir).map_err(|e| OpError::io(format!("creating output directory {}", dir.display()), e))?;
        let next_seq = next_free_seq(dir, subtask).map_err(|e| OpError::io(format!("listing {}", dir.display()), e))?;
        Ok(FileSink { dir: dir.to_path_buf(), max_file_bytes, subtask, next_seq, current: None })
    }

    fn open_part(&mut self) -> Result<&mut Part, OpError> {
        if self.current.is_none() {
            let name = part_name(self.subtask, self.next_seq);
            self.next_seq += 1;
            let hidden = self.dir.join(in_progress_name(&name));
            let file = File::create(&hidden).map_err(|e| OpError::io(format!("creating {}", hidden.display()), e))?;
            self.current =
                Some(Part { writer: BufWriter::with_capacity(1 << 20, file), hidden, final_path: self.dir.join(name), bytes: 0 });
        }
        Ok(self.current.as_mut().expect("just opened"))
    }

    /// Flush, fsync and publish the current part under its final name.
    fn finish_part(&mut self) -> OpResult {
        let Some(mut part) = self.current.take() else { return Ok(()) };
        let ctx = |what: &str, p: &Path| format!("{what} {}", p.display());
        part.writer.flush().map_err(|e| OpError::io(ctx("writing", &part.hidden), e))?;
        part.writer.get_ref().sync_all().map_err(|e| OpError::io(ctx("syncing", &part.hidden), e))?;
        fs::rename(&part.hidden, &part.final_path).map_err(|e| OpError::io(ctx("publishing", &part.final_path), e))
    }
}

/// One past the highest part number this subtask already has in `dir`, so
/// a new run never overwrites earlier output.
fn next_free_seq(dir: &Path, subtask: u16) -> std::io::Result<u64> {
    let prefix = format!("part-{subtask:04}-");
    let mut next = 0;
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        let name = name.trim_start_matches('.');
        if let Some(seq) = name.strip_prefix(&prefix).and_then(|r| r.split('.').next()).and_then(|s| s.parse::<u64>().ok()) {
            next = next.max(seq + 1);
        }
    }
    Ok(next)
}

impl Operator for FileSink {
    fn process(&mut self, batch: Vec<Record>, _ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        for r in &batch {
            let max = self.max_file_bytes;
            let part = self.open_part()?;
            let res = part.writer.write_all(r.raw.as_bytes()).and_then(|_| part.writer.write_all(b"\n"));
            res.map_err(|e| OpError::io(format!("writing {}", part.hidden.display()), e))?;
            part.bytes += r.raw.len() as u64 + 1;
            if part.bytes >= max {
                self.finish_part()?;
            }
        }
        Ok(())
    }

    fn close(&mut self, _ctx: &mut Context<'_>) -> OpResult {
        self.finish_part()
    }
}

//! The file source: JSON lines from one or more files, streamed.
//!
//! Files are cut into byte-range splits so one large file is still read in
//! parallel; a line belongs to the split holding its first byte. Each split
//! tracks its byte offset, which a checkpoint can record as the position.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::PathBuf;

use super::source::{Extent, Source, SourcePoll};
use super::{DeadLetter, OpError, OperatorMetrics};
use crate::config::OnError;
use crate::format::json::JsonParser;
use crate::types::Record;

/// Below this size a file is not split further.
const MIN_SPLIT_BYTES: u64 = 1 << 20;

/// A byte range of one file: lines starting in `start..end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub path: PathBuf,
    pub start: u64,
    pub end: u64,
}

/// Cut `files` into splits and deal them to `parallelism` subtasks; returns
/// the splits of `subtask`, in file order.
///
/// With `whole_files` every file is one split. Event-time sources use it: a
/// file is usually ordered by time, and byte ranges of it read side by side
/// would be far apart in event time, holding the watermark back to the
/// slowest range while every window of the others piles up in state.
pub fn splits_for(files: &[(PathBuf, u64)], parallelism: u16, subtask: u16, whole_files: bool) -> Vec<Split> {
    let p = parallelism as u64;
    let per_file = if !whole_files && (files.len() as u64) < p { p.div_ceil(files.len().max(1) as u64) } else { 1 };
    let mut all = Vec::new();
    for (path, size) in files {
        let k = per_file.min(size / MIN_SPLIT_BYTES).max(1);
        for i in 0..k {
            all.push(Split { path: path.clone(), start: size * i / k, end: size * (i + 1) / k });
        }
    }
    all.into_iter().enumerate().filter(|(i, _)| *i as u64 % p == subtask as u64).map(|(_, s)| s).collect()
}

pub struct FileSource {
    name: String,
    splits: Vec<Split>,
    current: Option<OpenSplit>,
    next_split: usize,
    parser: JsonParser,
    on_error: OnError,
    dead_letter: Option<DeadLetter>,
    line: Vec<u8>,
}

struct OpenSplit {
    reader: BufReader<File>,
    /// Offset of the next unread byte.
    offset: u64,
    end: u64,
}

impl FileSource {
    pub fn new(name: &str, splits: Vec<Split>, parser: JsonParser, on_error: OnError, dead_letter: Option<DeadLetter>) -> Self {
        FileSource { name: name.into(), splits, current: None, next_split: 0, parser, on_error, dead_letter, line: Vec::new() }
    }

    fn open(&self, split: &Split) -> Result<OpenSplit, OpError> {
        let ctx = || format!("source `{}`: reading {}", self.name, split.path.display());
        let file = File::open(&split.path).map_err(|e| OpError::io(ctx(), e))?;
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let mut offset = split.start;
        if split.start > 0 {
            // Skip the line that began in the previous split: resume after the
            // first newline at or after start-1.
            reader.seek(SeekFrom::Start(split.start - 1)).map_err(|e| OpError::io(ctx(), e))?;
            let mut skipped = Vec::new();
            let n = reader.read_until(b'\n', &mut skipped).map_err(|e| OpError::io(ctx(), e))?;
            offset = split.start - 1 + n as u64;
        }
        Ok(OpenSplit { reader, offset, end: split.end })
    }

    /// A bad line: fail, skip or dead-letter it, as configured.
    fn bad_record(&self, split: usize, line_start: u64, text: &str, reason: &str, metrics: &OperatorMetrics) -> Result<(), OpError> {
        OperatorMetrics::add(&metrics.records_dropped, 1);
        let path = &self.splits[split].path;
        let line_no = line_number(path, line_start).map(|n| n.to_string()).unwrap_or_else(|_| format!("byte {line_start}"));
        let place = format!("{}:{line_no}", path.display());
        match &self.on_error {
            OnError::Fail => Err(OpError::Data(format!("bad record at {place}: {reason}: {}", truncate(text, 200)))),
            OnError::Skip => Ok(()),
            OnError::DeadLetter(_) => {
                let dl = self.dead_letter.as_ref().expect("dead letter opened for on_error: dead_letter");
                dl.write(&format!("{}@{place}", self.name), reason, text)
                    .map_err(|e| OpError::io(format!("writing dead letter {}", dl.path().display()), e))
            }
        }
    }
}

impl Source for FileSource {
    fn poll(&mut self, max: usize, out: &mut Vec<Record>, metrics: &OperatorMetrics) -> Result<SourcePoll, OpError> {
        let mut produced = 0;
        while produced < max {
            let Some(cur) = self.current.as_mut() else {
                if self.next_split == self.splits.len() {
                    return Ok(SourcePoll::Finished);
                }
                self.current = Some(self.open(&self.splits[self.next_split])?);
                self.next_split += 1;
                continue;
            };
            if cur.offset >= cur.end {
                self.current = None;
                continue;
            }
            self.line.clear();
            let start = cur.offset;
            let n = cur.reader.read_until(b'\n', &mut self.line).map_err(|e| {
                OpError::io(format!("source `{}`: reading {}", self.name, self.splits[self.next_split - 1].path.display()), e)
            })?;
            if n == 0 {
                self.current = None;
                continue;
            }
            cur.offset += n as u64;
            OperatorMetrics::add(&metrics.bytes_in, n as u64);
            let split = self.next_split - 1;
            let line = std::mem::take(&mut self.line);
            let result = match std::str::from_utf8(&line) {
                Ok(text) => {
                    let text = text.trim_end_matches(['\n', '\r']);
                    if text.trim().is_empty() {
                        Ok(None)
                    } else {
                        match self.parser.parse(text) {
                            Ok(r) => Ok(Some(r)),
                            Err(reason) => self.bad_record(split, start, text, &reason, metrics).map(|_| None),
                        }
                    }
                }
                Err(e) => {
                    let text = String::from_utf8_lossy(&line).into_owned();
                    self.bad_record(split, start, text.trim_end(), &format!("not UTF-8: {e}"), metrics).map(|_| None)
                }
            };
            self.line = line;
            if let Some(r) = result? {
                out.push(r);
                produced += 1;
            }
        }
        Ok(SourcePoll::More)
    }

    fn extent(&self) -> Option<Extent> {
        Some(Extent::Bytes(self.splits.iter().map(|s| s.end - s.start).sum()))
    }

    /// (index of the split being read, byte offset of its next line).
    fn position(&self) -> Vec<u8> {
        let (split, offset) = match &self.current {
            Some(cur) => (self.next_split - 1, cur.offset),
            None if self.next_split < self.splits.len() => (self.next_split, self.splits[self.next_split].start),
            None => (self.splits.len(), 0),
        };
        let mut p = (split as u64).to_be_bytes().to_vec();
        p.extend_from_slice(&offset.to_be_bytes());
        p
    }

    fn restore(&mut self, position: &[u8]) -> Result<(), String> {
        let bad = || format!("file source position of {} bytes is not 16", position.len());
        let split = u64::from_be_bytes(position.get(..8).ok_or_else(bad)?.try_into().map_err(|_| bad())?) as usize;
        let offset = u64::from_be_bytes(position.get(8..16).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        if split > self.splits.len() {
            return Err(format!("position names split {split}, but this subtask has {}", self.splits.len()));
        }
        self.current = None;
        self.next_split = split;
        if split < self.splits.len() {
            let s = &self.splits[split];
            if offset < s.start {
                return Err(format!("offset {offset} is before split {}..{} of {}", s.start, s.end, s.path.display()));
            }
            // The offset is the start of a line: open there, skipping nothing.
            let ctx = |e| OpError::io(format!("source `{}`: reading {}", self.name, s.path.display()), e).to_string();
            let file = File::open(&s.path).map_err(ctx)?;
            let mut reader = BufReader::with_capacity(1 << 20, file);
            reader.seek(SeekFrom::Start(offset)).map_err(ctx)?;
            self.current = Some(OpenSplit { reader, offset, end: s.end });
            self.next_split = split + 1;
        }
        Ok(())
    }
}

/// The 1-based line number of the line starting at `offset` (counted only
/// when a bad record is reported, so the hot path never counts lines).
fn line_number(path: &std::path::Path, offset: u64) -> std::io::Result<u64> {
    let mut r = BufReader::new(File::open(path)?).take(offset);
    let mut buf = [0u8; 1 << 16];
    let mut lines = 1;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok(lines);
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::json::FieldNeed;

    fn read_all(path: &std::path::Path, p: u16) -> Vec<String> {
        let size = std::fs::metadata(path).unwrap().len();
        let mut lines = Vec::new();
        for s in 0..p {
            let parser = JsonParser::new(vec![("k".into(), FieldNeed { required: true, numeric: false })], None);
            let mut src = FileSource::new("t", splits_for(&[(path.into(), size)], p, s, false), parser, OnError::Fail, None);
            let m = OperatorMetrics::default();
            let mut out = Vec::new();
            while src.poll(7, &mut out, &m).unwrap() != SourcePoll::Finished {}
            lines.extend(out.into_iter().map(|r| r.raw.to_string()));
        }
        lines.sort();
        lines
    }

    #[test]
    fn splits_read_every_line_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        let mut text = String::new();
        for i in 0..50_000 {
            text.push_str(&format!("{{\"k\":{i},\"pad\":\"{}\"}}\n", "x".repeat(i % 37)));
        }
        std::fs::write(&path, &text).unwrap();
        let mut want: Vec<String> = text.lines().map(String::from).collect();
        want.sort();
        for p in [1, 2, 3, 5] {
            assert_eq!(read_all(&path, p), want, "parallelism {p}");
        }
    }

    #[test]
    fn resumes_exactly_where_the_position_was_taken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        let text: String = (0..5000).map(|i| format!("{{\"k\":{i}}}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let files = [(path.clone(), text.len() as u64)];
        let parser = || JsonParser::new(vec![("k".into(), FieldNeed { required: true, numeric: false })], None);
        let m = OperatorMetrics::default();
        for cut in [0, 1, 777, 4999, 5000] {
            let mut a = FileSource::new("t", splits_for(&files, 1, 0, false), parser(), OnError::Fail, None);
            let mut first = Vec::new();
            if cut > 0 {
                a.poll(cut, &mut first, &m).unwrap();
            }
            let mut b = FileSource::new("t", splits_for(&files, 1, 0, false), parser(), OnError::Fail, None);
            b.restore(&a.position()).unwrap();
            let mut rest = Vec::new();
            while b.poll(100, &mut rest, &m).unwrap() != SourcePoll::Finished {}
            assert_eq!(first.len() + rest.len(), 5000, "cut {cut}");
            assert_eq!(rest.first().map(|r| r.raw.to_string()), text.lines().nth(cut).map(String::from));
        }
    }

    #[test]
    fn whole_files_are_never_cut() {
        let files = [(PathBuf::from("a"), 50 << 20), (PathBuf::from("b"), 50 << 20)];
        // Cut: 2 files, 4 subtasks: each file in 2 ranges, one range each.
        assert_eq!(splits_for(&files, 4, 0, false), vec![Split { path: "a".into(), start: 0, end: 25 << 20 }]);
        assert_eq!(splits_for(&files, 4, 0, true), vec![Split { path: "a".into(), start: 0, end: 50 << 20 }]);
        assert_eq!(splits_for(&files, 4, 3, true), vec![], "more subtasks than files: some read nothing");
    }

    #[test]
    fn fail_names_file_line_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "{\"k\":1}\n\n{\"x\":2}\n").unwrap();
        let parser = JsonParser::new(vec![("k".into(), FieldNeed { required: true, numeric: false })], None);
        let mut src = FileSource::new("t", splits_for(&[(path.clone(), 17)], 1, 0, false), parser, OnError::Fail, None);
        let err = src.poll(10, &mut Vec::new(), &OperatorMetrics::default()).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:3: missing key field `k`", path.display())), "{err}");
    }
}

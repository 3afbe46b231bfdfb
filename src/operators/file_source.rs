//! The file source: JSON lines from one or more files, streamed.
//!
//! Files are cut into byte-range splits so one large file is still read in
//! parallel; a line belongs to the split holding its first byte. The
//! position a checkpoint records is the list of byte ranges still to read,
//! so a restore at another parallelism deals those ranges out anew.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::PathBuf;

use super::dead_letter::reject;
use super::source::{deal, Extent, RestoredPositions, Source, SourcePoll};
use super::{DeadLetter, OpError, OperatorMetrics};
use crate::codec::{Dec, Enc};
use crate::config::OnError;
use crate::format::json::JsonParser;
use crate::types::{Millis, Record};

/// Below this size a file is not split further.
const MIN_SPLIT_BYTES: u64 = 1 << 20;

/// A byte range of one file: lines starting in `start..end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub path: PathBuf,
    pub start: u64,
    pub end: u64,
    /// `start` is known to begin a line (file start, or a resumed
    /// position); otherwise the line it falls in belongs to the split before.
    pub at_line_start: bool,
}

impl Split {
    fn new(path: PathBuf, start: u64, end: u64) -> Self {
        Split { path, start, end, at_line_start: start == 0 }
    }
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
            all.push(Split::new(path.clone(), size * i / k, size * (i + 1) / k));
        }
    }
    deal(all, parallelism, subtask)
}

pub struct FileSource {
    name: String,
    subtask: u16,
    parallelism: u16,
    splits: Vec<Split>,
    /// The highest event time read from each split so far.
    split_max_ts: Vec<Millis>,
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
    /// A source reading `splits` as `subtask` of `parallelism`.
    pub fn new(
        name: &str,
        (subtask, parallelism): (u16, u16),
        splits: Vec<Split>,
        parser: JsonParser,
        on_error: OnError,
        dead_letter: Option<DeadLetter>,
    ) -> Self {
        FileSource {
            name: name.into(),
            subtask,
            parallelism,
            split_max_ts: vec![Millis::MIN; splits.len()],
            splits,
            current: None,
            next_split: 0,
            parser,
            on_error,
            dead_letter,
            line: Vec::new(),
        }
    }

    /// The ranges not read yet, in reading order.
    fn remaining(&self) -> Vec<Split> {
        let mut rest = Vec::new();
        if let Some(cur) = self.current.as_ref().filter(|c| c.offset < c.end) {
            let s = &self.splits[self.next_split - 1];
            rest.push(Split { path: s.path.clone(), start: cur.offset, end: s.end, at_line_start: true });
        }
        rest.extend(self.splits[self.next_split..].iter().cloned());
        rest
    }

    fn open(&self, split: &Split) -> Result<OpenSplit, OpError> {
        let ctx = || format!("source `{}`: reading {}", self.name, split.path.display());
        let file = File::open(&split.path).map_err(|e| OpError::io(ctx(), e))?;
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let mut offset = split.start;
        if split.at_line_start {
            reader.seek(SeekFrom::Start(split.start)).map_err(|e| OpError::io(ctx(), e))?;
        } else {
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
        let path = &self.splits[split].path;
        let line_no = line_number(path, line_start).map(|n| n.to_string()).unwrap_or_else(|_| format!("byte {line_start}"));
        let place = format!("{}:{line_no}", path.display());
        reject(&self.on_error, self.dead_letter.as_ref(), (&self.name, &place), text, reason, metrics)
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
                if let Some(t) = r.event_time {
                    let max = &mut self.split_max_ts[split];
                    *max = (*max).max(t);
                }
                out.push(r);
                produced += 1;
            }
        }
        Ok(SourcePoll::More)
    }

    fn extent(&self) -> Option<Extent> {
        Some(Extent::Bytes(self.splits.iter().map(|s| s.end - s.start).sum()))
    }

    /// Splits are read one after another: one not finished yet holds the
    /// watermark at the highest event time read from it (none yet: MIN), so
    /// a second file is not late just because the first was read first.
    fn event_time_bound(&self) -> Option<Millis> {
        let first_unfinished = match &self.current {
            Some(_) => self.next_split - 1,
            None => self.next_split,
        };
        if self.splits.len() < 2 || first_unfinished >= self.splits.len() {
            return None;
        }
        self.split_max_ts[first_unfinished..].iter().copied().min()
    }

    /// The ranges still to read: (path, start, end, starts a line) each.
    fn position(&self) -> Vec<u8> {
        let rest = self.remaining();
        let mut p = Vec::new();
        p.put_u32(rest.len() as u32);
        for s in &rest {
            p.put_str(&s.path.to_string_lossy());
            p.put_u64(s.start);
            p.put_u64(s.end);
            p.put_u8(s.at_line_start as u8);
        }
        p
    }

    fn restore(&mut self, restored: &RestoredPositions) -> Result<(), String> {
        let ranges = match restored.own(self.subtask, self.parallelism) {
            // Same layout: keep reading what this subtask was reading.
            Some(own) => decode_ranges(own)?,
            None => {
                let mut all = Vec::new();
                for p in &restored.by_subtask {
                    all.extend(decode_ranges(p)?);
                }
                deal(all, self.parallelism, self.subtask)
            }
        };
        self.split_max_ts = vec![Millis::MIN; ranges.len()];
        self.splits = ranges;
        self.current = None;
        self.next_split = 0;
        Ok(())
    }
}

fn decode_ranges(position: &[u8]) -> Result<Vec<Split>, String> {
    let mut d = Dec::new(position);
    let err = |e: crate::codec::DecodeError| format!("file source position: {e}");
    let n = d.u32("range count").map_err(err)?;
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let path = PathBuf::from(d.str("path").map_err(err)?);
        let (start, end) = (d.u64("start").map_err(err)?, d.u64("end").map_err(err)?);
        let at_line_start = d.u8("line flag").map_err(err)? != 0 || start == 0;
        if start > end {
            return Err(format!("file source position: range {start}..{end} of {} is backwards", path.display()));
        }
        out.push(Split { path, start, end, at_line_start });
    }
    if !d.is_empty() {
        return Err("file source position: trailing bytes".into());
    }
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::json::FieldNeed;

    fn read_all(path: &std::path::Path, p: u16) -> Vec<String> {
        let size = std::fs::metadata(path).unwrap().len();
        let mut lines = Vec::new();
        for s in 0..p {
            let parser = JsonParser::new(vec![("k".into(), FieldNeed { required: true, numeric: false })], None);
            let mut src = FileSource::new("t", (s, p), splits_for(&[(path.into(), size)], p, s, false), parser, OnError::Fail, None);
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
            let mut a = FileSource::new("t", (0, 1), splits_for(&files, 1, 0, false), parser(), OnError::Fail, None);
            let mut first = Vec::new();
            if cut > 0 {
                a.poll(cut, &mut first, &m).unwrap();
            }
            let mut b = FileSource::new("t", (0, 1), splits_for(&files, 1, 0, false), parser(), OnError::Fail, None);
            b.restore(&RestoredPositions::single(a.position())).unwrap();
            let mut rest = Vec::new();
            while b.poll(100, &mut rest, &m).unwrap() != SourcePoll::Finished {}
            assert_eq!(first.len() + rest.len(), 5000, "cut {cut}");
            assert_eq!(rest.first().map(|r| r.raw.to_string()), text.lines().nth(cut).map(String::from));
        }
    }

    #[test]
    fn restore_at_another_parallelism_reads_the_rest_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        let mut want = Vec::new();
        for f in 0..2 {
            let path = dir.path().join(format!("in-{f}.jsonl"));
            let text: String = (0..40_000).map(|i| format!("{{\"k\":\"{f}-{i}\",\"pad\":\"{}\"}}\n", "y".repeat(i % 29))).collect();
            want.extend(text.lines().map(String::from));
            std::fs::write(&path, &text).unwrap();
            files.push((path, text.len() as u64));
        }
        want.sort();
        let parser = || JsonParser::new(vec![("k".into(), FieldNeed { required: true, numeric: false })], None);
        let m = OperatorMetrics::default();
        for (old_p, new_p) in [(3, 2), (1, 4), (4, 1), (2, 5)] {
            let mut got = Vec::new();
            let mut positions = Vec::new();
            for s in 0..old_p {
                let mut src = FileSource::new("t", (s, old_p), splits_for(&files, old_p, s, false), parser(), OnError::Fail, None);
                let mut out = Vec::new();
                src.poll(1_000 + 7_777 * s as usize, &mut out, &m).unwrap();
                got.extend(out.into_iter().map(|r| r.raw.to_string()));
                positions.push(src.position());
            }
            let restored = RestoredPositions { parallelism: old_p, by_subtask: positions };
            for s in 0..new_p {
                let mut src = FileSource::new("t", (s, new_p), splits_for(&files, new_p, s, false), parser(), OnError::Fail, None);
                src.restore(&restored).unwrap();
                let mut out = Vec::new();
                while src.poll(500, &mut out, &m).unwrap() != SourcePoll::Finished {}
                got.extend(out.into_iter().map(|r| r.raw.to_string()));
            }
            got.sort();
            assert_eq!(got, want, "{old_p} -> {new_p}");
        }
    }

    #[test]
    fn whole_files_are_never_cut() {
        let files = [(PathBuf::from("a"), 50 << 20), (PathBuf::from("b"), 50 << 20)];
        // Cut: 2 files, 4 subtasks: each file in 2 ranges, one range each.
        assert_eq!(splits_for(&files, 4, 0, false), vec![Split::new("a".into(), 0, 25 << 20)]);
        assert_eq!(splits_for(&files, 4, 0, true), vec![Split::new("a".into(), 0, 50 << 20)]);
        assert_eq!(splits_for(&files, 4, 3, true), vec![], "more subtasks than files: some read nothing");
    }

    #[test]
    fn fail_names_file_line_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "{\"k\":1}\n\n{\"x\":2}\n").unwrap();
        let parser = JsonParser::new(vec![("k".into(), FieldNeed { required: true, numeric: false })], None);
        let mut src = FileSource::new("t", (0, 1), splits_for(&[(path.clone(), 17)], 1, 0, false), parser, OnError::Fail, None);
        let err = src.poll(10, &mut Vec::new(), &OperatorMetrics::default()).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:3: missing key field `k`", path.display())), "{err}");
    }
}

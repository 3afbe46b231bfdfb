//! The file source: JSON lines from one or more files, streamed.
//!
//! Files are cut into byte-range splits so one large file is still read in
//! parallel; a line belongs to the split holding its first byte. The
//! position a checkpoint records is the list of byte ranges still to read,
//! so a restore at another parallelism deals those ranges out anew.
//!
//! Line numbers (for bad-line reports) are counted as lines are read, from
//! the line number where the split began; that one is known at a file's
//! start and otherwise counted once, when the split's first bad line needs
//! it, from the nearest offset whose line is already known (`LineIndex`).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::codec::{Dec, Enc};
use crate::config::OnError;
use crate::connectors::source::{deal, Extent, RestoredPositions, Source, SourcePoll};
use crate::format::json::JsonParser;
use crate::operators::dead_letter::reject;
use crate::operators::{DeadLetter, OpError, OperatorMetrics};
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
    lines: LineIndex,
}

struct OpenSplit {
    reader: BufReader<File>,
    /// Offset of the next unread byte.
    offset: u64,
    end: u64,
    /// Where reading began (a line start) and its line number, if known yet.
    opened_at: u64,
    first_line: Option<u64>,
    /// Lines read since `opened_at`.
    lines_read: u64,
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
            lines: LineIndex::default(),
        }
    }

    /// The ranges not read yet, in reading order, each with the highest
    /// event time read from its split so far.
    fn remaining(&self) -> Vec<(Split, Millis)> {
        let mut rest = Vec::new();
        if let Some(cur) = self.current.as_ref().filter(|c| c.offset < c.end) {
            let s = &self.splits[self.next_split - 1];
            let split = Split { path: s.path.clone(), start: cur.offset, end: s.end, at_line_start: true };
            rest.push((split, self.split_max_ts[self.next_split - 1]));
        }
        rest.extend(self.splits[self.next_split..].iter().cloned().zip(self.split_max_ts[self.next_split..].iter().copied()));
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
        let first_line = self.lines.known(&split.path, offset);
        Ok(OpenSplit { reader, offset, end: split.end, opened_at: offset, first_line, lines_read: 0 })
    }

    /// A bad line (the `nth` line read in the open split, starting at byte
    /// `line_start`): fail, skip or dead-letter it, as configured.
    fn bad_record(&mut self, (nth, line_start): (u64, u64), text: &str, reason: &str, metrics: &OperatorMetrics) -> Result<(), OpError> {
        // Skipping names no place: no line number to find.
        let place = match self.on_error {
            OnError::Skip => String::new(),
            _ => {
                let line_no = match self.line_number(nth) {
                    Ok(n) => n.to_string(),
                    Err(_) => format!("byte {line_start}"),
                };
                format!("{}:{line_no}", self.splits[self.next_split - 1].path.display())
            }
        };
        reject(&self.on_error, self.dead_letter.as_ref(), (&self.name, &place), text, reason, metrics)
    }

    /// `poll`, with the bytes read added to `bytes`.
    fn poll_lines(&mut self, max: usize, out: &mut Vec<Record>, metrics: &OperatorMetrics, bytes: &mut u64) -> Result<SourcePoll, OpError> {
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
                // Where this split ended is a known line for the next split
                // of the file this subtask reads.
                if let Some(first) = cur.first_line {
                    self.lines.note(&self.splits[self.next_split - 1].path, cur.offset, first + cur.lines_read);
                }
                self.current = None;
                continue;
            }
            self.line.clear();
            let start = cur.offset;
            let nth = cur.lines_read;
            let n = cur.reader.read_until(b'\n', &mut self.line).map_err(|e| {
                OpError::io(format!("source `{}`: reading {}", self.name, self.splits[self.next_split - 1].path.display()), e)
            })?;
            if n == 0 {
                self.current = None;
                continue;
            }
            cur.offset += n as u64;
            cur.lines_read += 1;
            *bytes += n as u64;
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
                            Err(reason) => self.bad_record((nth, start), text, &reason, metrics).map(|_| None),
                        }
                    }
                }
                Err(e) => {
                    let text = String::from_utf8_lossy(&line).into_owned();
                    self.bad_record((nth, start), text.trim_end(), &format!("not UTF-8: {e}"), metrics).map(|_| None)
                }
            };
            self.line = line;
            if let Some(mut r) = result? {
                if let Some(t) = r.event_time {
                    let max = &mut self.split_max_ts[split];
                    *max = (*max).max(t);
                    // The source task turns the split's highest time into its watermark.
                    r.split_watermark = *max;
                }
                out.push(r);
                produced += 1;
            }
        }
        Ok(SourcePoll::More)
    }

    /// The 1-based line number of the `nth` line read in the open split.
    fn line_number(&mut self, nth: u64) -> std::io::Result<u64> {
        let Some(cur) = self.current.as_mut() else { return Err(std::io::Error::other("no open split")) };
        let first = match cur.first_line {
            Some(l) => l,
            None => {
                let l = self.lines.line_at(&self.splits[self.next_split - 1].path, cur.opened_at)?;
                cur.first_line = Some(l);
                l
            }
        };
        Ok(first + nth)
    }
}

impl Source for FileSource {
    fn poll(&mut self, max: usize, out: &mut Vec<Record>, metrics: &OperatorMetrics) -> Result<SourcePoll, OpError> {
        let mut bytes = 0;
        let status = self.poll_lines(max, out, metrics, &mut bytes);
        // Once per poll, not per line: the counter is shared with the metrics readers.
        OperatorMetrics::add(&metrics.bytes_in, bytes);
        status
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

    /// The ranges still to read: (path, start, end, starts a line) each,
    /// then each one's highest event time so far (so a split's lateness
    /// goes on after a restore, wherever the split is dealt, as if no
    /// restore had happened).
    fn position(&self) -> Vec<u8> {
        let rest = self.remaining();
        let mut p = Vec::new();
        p.put_u32(rest.len() as u32);
        for (s, _) in &rest {
            // Absolute: a restore may run in another working directory.
            let path = std::path::absolute(&s.path).unwrap_or_else(|_| s.path.clone());
            p.put_str(&path.to_string_lossy());
            p.put_u64(s.start);
            p.put_u64(s.end);
            p.put_u8(s.at_line_start as u8);
        }
        for (_, max) in &rest {
            p.put_i64(*max);
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
        (self.splits, self.split_max_ts) = ranges.into_iter().unzip();
        self.current = None;
        self.next_split = 0;
        Ok(())
    }
}

/// The ranges of a position, each with its split's highest event time so
/// far (`Millis::MIN` in positions written before it was recorded).
fn decode_ranges(position: &[u8]) -> Result<Vec<(Split, Millis)>, String> {
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
        out.push((Split { path, start, end, at_line_start }, Millis::MIN));
    }
    if !d.is_empty() {
        for (_, max) in &mut out {
            *max = d.i64("highest event time").map_err(err)?;
        }
    }
    if !d.is_empty() {
        return Err("file source position: trailing bytes".into());
    }
    Ok(out)
}

/// Known line numbers of the files a source reads: (offset, line) anchors,
/// the line number of the byte at each offset. A lookup counts newlines
/// only from the nearest anchor below, and leaves anchors every
/// `ANCHOR_EVERY` bytes on the way, so a later lookup below it counts little
/// too: all lookups of one subtask together read each file at most about
/// once.
#[derive(Debug, Default)]
struct LineIndex {
    files: HashMap<PathBuf, BTreeMap<u64, u64>>,
    /// Bytes read to count lines (to test that counting stays linear).
    counted: u64,
}

const ANCHOR_EVERY: u64 = 1 << 20;

impl LineIndex {
    fn anchors(&mut self, path: &Path) -> &mut BTreeMap<u64, u64> {
        if !self.files.contains_key(path) {
            self.files.insert(path.to_path_buf(), BTreeMap::from([(0, 1)]));
        }
        self.files.get_mut(path).expect("inserted above")
    }

    /// The line at `offset` if it is known without counting.
    fn known(&self, path: &Path, offset: u64) -> Option<u64> {
        match self.files.get(path) {
            Some(anchors) => anchors.get(&offset).copied(),
            None => (offset == 0).then_some(1),
        }
    }

    fn note(&mut self, path: &Path, offset: u64, line: u64) {
        self.anchors(path).insert(offset, line);
    }

    /// The 1-based number of the line holding byte `offset` of `path`.
    fn line_at(&mut self, path: &Path, offset: u64) -> std::io::Result<u64> {
        let (from, mut line) = self.anchors(path).range(..=offset).next_back().map_or((0, 1), |(&o, &l)| (o, l));
        if from == offset {
            return Ok(line);
        }
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(from))?;
        let mut r = file.take(offset - from);
        let mut buf = vec![0u8; 1 << 16];
        let (mut pos, mut last_anchor) = (from, from);
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            line += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
            pos += n as u64;
            self.counted += n as u64;
            if pos - last_anchor >= ANCHOR_EVERY {
                self.note(path, pos, line);
                last_anchor = pos;
            }
        }
        if pos != offset {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file became shorter while it was read"));
        }
        self.note(path, offset, line);
        Ok(line)
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
            let parser = JsonParser::new(vec![("k".into(), FieldNeed { required: true, ..FieldNeed::default() })], None);
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

    /// Each record carries its own file's highest event time so far, also
    /// after a restore at another parallelism: a file's lateness must not
    /// depend on the files read before it or on the restore.
    #[test]
    fn split_times_are_per_file_and_survive_a_restore() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        std::fs::write(&a, "{\"ts\":500}\n{\"ts\":100}\n").unwrap();
        std::fs::write(&b, "{\"ts\":10}\n{\"ts\":30}\n{\"ts\":20}\n").unwrap();
        let files = [(a.clone(), 24), (b.clone(), 33)];
        let parser = || JsonParser::new(Vec::new(), Some("ts".into()));
        let m = OperatorMetrics::default();
        let mut src = FileSource::new("t", (0, 1), splits_for(&files, 1, 0, true), parser(), OnError::Fail, None);
        let mut out = Vec::new();
        src.poll(4, &mut out, &m).unwrap();
        let marks: Vec<Millis> = out.iter().map(|r| r.split_watermark).collect();
        assert_eq!(marks, [500, 500, 10, 30], "b's records do not see a's 500");
        for p in [1, 2] {
            let restored = RestoredPositions::single(src.position());
            let mut rest = Vec::new();
            for s in 0..p {
                let mut r = FileSource::new("t", (s, p), Vec::new(), parser(), OnError::Fail, None);
                r.restore(&restored).unwrap();
                while r.poll(10, &mut rest, &m).unwrap() != SourcePoll::Finished {}
            }
            let rest: Vec<(Option<Millis>, Millis)> = rest.iter().map(|r| (r.event_time, r.split_watermark)).collect();
            assert_eq!(rest, [(Some(20), 30)], "restored at -p {p}: b's highest time so far came along");
        }
    }

    #[test]
    fn resumes_exactly_where_the_position_was_taken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        let text: String = (0..5000).map(|i| format!("{{\"k\":{i}}}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let files = [(path.clone(), text.len() as u64)];
        let parser = || JsonParser::new(vec![("k".into(), FieldNeed { required: true, ..FieldNeed::default() })], None);
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
        let parser = || JsonParser::new(vec![("k".into(), FieldNeed { required: true, ..FieldNeed::default() })], None);
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

    /// A file of ~3.4 MB where every 10th line is bad: (path, size, the
    /// 1-based numbers of the bad lines).
    fn ten_percent_bad(dir: &Path) -> (PathBuf, u64, Vec<u64>) {
        let path = dir.join("in.jsonl");
        let mut text = String::new();
        let mut bad = Vec::new();
        for i in 0..60_000u64 {
            if i % 10 == 7 {
                text.push_str("not json\n");
                bad.push(i + 1);
            } else {
                text.push_str(&format!("{{\"k\":{i},\"pad\":\"{}\"}}\n", "x".repeat((i % 97) as usize)));
            }
        }
        std::fs::write(&path, &text).unwrap();
        (path, text.len() as u64, bad)
    }

    /// The line numbers named in a dead-letter file's `origin`s, sorted.
    fn dead_lettered_lines(dl: &Path) -> Vec<u64> {
        let mut lines: Vec<u64> = std::fs::read_to_string(dl)
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["origin"].as_str().unwrap().rsplit(':').next().unwrap().parse().unwrap()
            })
            .collect();
        lines.sort();
        lines
    }

    /// Bad-line numbers were found by re-reading the file from byte 0 for
    /// every bad line (quadratic). They are counted as lines are read; a
    /// split starting mid-file counts its first line number once.
    #[test]
    fn bad_line_numbers_are_right_in_every_split_and_counted_once() {
        let dir = tempfile::tempdir().unwrap();
        let (path, size, bad) = ten_percent_bad(dir.path());
        let parser = || JsonParser::new(vec![("k".into(), FieldNeed { required: true, ..FieldNeed::default() })], None);
        for p in [1u16, 2, 3] {
            let dl_path = dir.path().join(format!("dl-{p}.jsonl"));
            let dl = crate::operators::dead_letter::DeadLetters::default().get(&dl_path).unwrap();
            let on_error = OnError::DeadLetter(dl_path.clone());
            let mut counted = 0;
            for s in 0..p {
                let splits = splits_for(&[(path.clone(), size)], p, s, false);
                let mut src = FileSource::new("t", (s, p), splits, parser(), on_error.clone(), Some(dl.clone()));
                let m = OperatorMetrics::default();
                while src.poll(100, &mut Vec::new(), &m).unwrap() != SourcePoll::Finished {}
                // Linear: a subtask counts at most the bytes before its splits.
                assert!(src.lines.counted <= size, "p {p} subtask {s}: counted {} of {size} bytes", src.lines.counted);
                counted += src.lines.counted;
            }
            dl.flush().unwrap();
            assert_eq!(dead_lettered_lines(&dl_path), bad, "parallelism {p}");
            assert!(p > 1 || counted == 0, "one split from byte 0 counts nothing");
        }
    }

    /// A restored position starts mid-file: its first bad line is still
    /// numbered from the start of the file.
    #[test]
    fn bad_line_numbers_are_right_after_a_restore_mid_file() {
        let dir = tempfile::tempdir().unwrap();
        let (path, size, bad) = ten_percent_bad(dir.path());
        let parser = || JsonParser::new(vec![("k".into(), FieldNeed { required: true, ..FieldNeed::default() })], None);
        let dl_path = dir.path().join("dl.jsonl");
        let dl = crate::operators::dead_letter::DeadLetters::default().get(&dl_path).unwrap();
        let on_error = OnError::DeadLetter(dl_path.clone());
        let files = [(path.clone(), size)];
        let m = OperatorMetrics::default();
        let mut a = FileSource::new("t", (0, 1), splits_for(&files, 1, 0, false), parser(), on_error.clone(), Some(dl.clone()));
        a.poll(12_345, &mut Vec::new(), &m).unwrap();
        let mut b = FileSource::new("t", (0, 1), splits_for(&files, 1, 0, false), parser(), on_error, Some(dl.clone()));
        b.restore(&RestoredPositions::single(a.position())).unwrap();
        while b.poll(100, &mut Vec::new(), &m).unwrap() != SourcePoll::Finished {}
        dl.flush().unwrap();
        // `a` dead-lettered the bad lines before its position, `b` the rest.
        assert_eq!(dead_lettered_lines(&dl_path), bad);
        assert!(b.lines.counted > 0 && b.lines.counted < size);
    }

    #[test]
    fn line_index_counts_from_the_nearest_anchor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let text: String = (0..400_000).map(|i| format!("{i}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let offset_of_line = |n: usize| text.split_inclusive('\n').take(n - 1).map(str::len).sum::<usize>() as u64;
        let mut ix = LineIndex::default();
        let far = offset_of_line(390_000);
        assert_eq!(ix.line_at(&path, far).unwrap(), 390_000);
        let first = ix.counted;
        assert_eq!(first, far);
        // Below the first lookup: counted from an anchor left on the way.
        assert_eq!(ix.line_at(&path, offset_of_line(200_000)).unwrap(), 200_000);
        assert!(ix.counted - first <= ANCHOR_EVERY, "{}", ix.counted - first);
        assert_eq!(ix.line_at(&path, 0).unwrap(), 1);
        assert!(ix.line_at(&path, text.len() as u64 + 10).is_err(), "past the end");
    }

    #[test]
    fn fail_names_file_line_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "{\"k\":1}\n\n{\"x\":2}\n").unwrap();
        let parser = JsonParser::new(vec![("k".into(), FieldNeed { required: true, ..FieldNeed::default() })], None);
        let mut src = FileSource::new("t", (0, 1), splits_for(&[(path.clone(), 17)], 1, 0, false), parser, OnError::Fail, None);
        let err = src.poll(10, &mut Vec::new(), &OperatorMetrics::default()).unwrap_err().to_string();
        assert!(err.contains(&format!("{}:3: missing key field `k`", path.display())), "{err}");
    }
}

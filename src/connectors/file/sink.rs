//! The file sink: JSON lines into rolling part files in a directory.
//!
//! A part file is written under a hidden name (`.part-SUBTASK-SEQ-RUN.jsonl
//! .inprogress`) and renamed to its published name
//! (`part-CHECKPOINT-SUBTASK-SEQ-RUN.jsonl`) only when it may be seen, so a
//! reader of the directory only ever sees complete files.
//!
//! CHECKPOINT (10 digits; 0 without checkpoints) is the id of the checkpoint
//! the part was staged in, so the names sort in commit order: a key's later
//! updates (a running aggregate's) sort after its earlier ones even when a
//! restore at another parallelism moved the key to another subtask.
//!
//! RUN is the run id of the sink instance that wrote the part: a checkpoint
//! stages parts by name, and a later run that is discarded (it crashed
//! before its first checkpoint) must never write a part under a name a
//! checkpoint staged, or restoring that checkpoint would publish the
//! discarded run's records — the sequence alone repeats once a consumer has
//! moved the published parts away.
//!
//! Without checkpoints a part is published when it rolls or at close. With
//! checkpoints the sink takes part in the two-phase commit: on a barrier the
//! open part is flushed, fsynced and closed, and every closed part is staged
//! in state under that checkpoint's id; when the checkpoint completes, the
//! staged parts are renamed to their final names. On restore the parts the
//! restored checkpoint staged are published (the crash may have come between
//! `_metadata` and the rename). Any other hidden part of this subtask is a
//! leftover of the crashed run, deleted once the first checkpoint after the
//! restore completes: its records are produced again from the restored
//! position. Waiting for that checkpoint matters after a rescale, when the
//! parts another old subtask staged are published by whichever new subtask
//! now owns that key group — by the time a checkpoint completes, every
//! subtask has finished its restore. A start with no checkpoint to restore
//! (the crash came before the first one completed) removes the crashed
//! run's hidden parts the same way.
//!
//! Records committed (the metrics endpoint's `weir_sink_records_committed_total`)
//! are the lines of the parts this process published. A part this instance
//! wrote has its count in memory; a part another process staged (published
//! here on restore, or after a rescale) is counted by reading its lines
//! once, so the state format carries no count and every older checkpoint
//! and savepoint restores as before.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::faults;
use crate::operators::staged_files;
use crate::operators::{Context, OpError, OpResult, Operator, OperatorMetrics};
use crate::state::{TableKind, TableSpec};
use crate::types::Record;

/// Staged parts: hidden file name → checkpoint id (0 = closed, not staged yet).
const PARTS: usize = 0;

pub struct FileSink {
    dir: PathBuf,
    max_file_bytes: u64,
    subtask: u16,
    /// Publish only parts of completed checkpoints.
    transactional: bool,
    /// Sequence number of the next part file of this subtask.
    next_seq: u64,
    /// This instance's run id, in every part name it writes.
    run: String,
    current: Option<Part>,
    /// After a restore: hidden parts of this subtask numbered below this are
    /// leftovers, removed when the next checkpoint completes.
    leftovers_below: Option<u64>,
    /// Records of each part this instance closed and has not published yet,
    /// by hidden file name.
    unpublished: HashMap<String, u64>,
}

struct Part {
    writer: BufWriter<File>,
    hidden: PathBuf,
    /// `part-SUBTASK-SEQ-RUN.jsonl`: the hidden name without its dot and suffix.
    stem: String,
    bytes: u64,
    records: u64,
}

/// The stem of part `seq` of `subtask`, written by run `run`.
pub fn part_stem(subtask: u16, seq: u64, run: &str) -> String {
    format!("part-{subtask:04}-{seq:06}-{run}.jsonl")
}

/// The hidden name a part has while it is written.
pub fn in_progress_name(stem: &str) -> String {
    format!(".{stem}.inprogress")
}

fn stem_of(hidden: &str) -> Option<&str> {
    hidden.strip_prefix('.')?.strip_suffix(".inprogress")
}

/// The name part `stem` is published under when staged in `checkpoint`.
pub fn published_name(checkpoint: u64, stem: &str) -> String {
    let rest = stem.strip_prefix("part-").unwrap_or(stem);
    format!("part-{checkpoint:010}-{rest}")
}

impl FileSink {
    pub fn new(dir: &Path, max_file_bytes: u64, subtask: u16, transactional: bool) -> Result<Self, OpError> {
        fs::create_dir_all(dir).map_err(|e| OpError::io(format!("creating output directory {}", dir.display()), e))?;
        let next_seq = next_free_seq(dir, subtask).map_err(|e| OpError::io(format!("listing {}", dir.display()), e))?;
        // Without a restore (none asked for, or none complete), no checkpoint
        // of this run will publish the hidden parts already there.
        let leftovers_below = transactional.then_some(next_seq);
        let run = crate::run_id::draw_short();
        Ok(FileSink {
            dir: dir.to_path_buf(),
            max_file_bytes,
            subtask,
            transactional,
            next_seq,
            run,
            current: None,
            leftovers_below,
            unpublished: HashMap::new(),
        })
    }

    fn open_part(&mut self) -> Result<&mut Part, OpError> {
        if self.current.is_none() {
            // A name already taken (a run id drawn twice) is skipped, never overwritten.
            let (stem, hidden, file) = loop {
                let stem = part_stem(self.subtask, self.next_seq, &self.run);
                self.next_seq += 1;
                let hidden = self.dir.join(in_progress_name(&stem));
                if !self.transactional && self.dir.join(published_name(0, &stem)).exists() {
                    continue;
                }
                match File::create_new(&hidden) {
                    Ok(file) => break (stem, hidden, file),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(OpError::io(format!("creating {}", hidden.display()), e)),
                }
            };
            self.current = Some(Part { writer: BufWriter::with_capacity(1 << 20, file), hidden, stem, bytes: 0, records: 0 });
        }
        Ok(self.current.as_mut().expect("just opened"))
    }

    /// Flush and fsync the open part; publish it now, or stage it in state
    /// (transactional) to be published when a checkpoint completes.
    fn close_part(&mut self, ctx: &mut Context<'_>) -> OpResult {
        let Some(mut part) = self.current.take() else { return Ok(()) };
        let ctx_msg = |what: &str, p: &Path| format!("{what} {}", p.display());
        part.writer.flush().map_err(|e| OpError::io(ctx_msg("writing", &part.hidden), e))?;
        part.writer.get_ref().sync_all().map_err(|e| OpError::io(ctx_msg("syncing", &part.hidden), e))?;
        if self.transactional {
            let name = part.hidden.file_name().expect("part has a name").to_string_lossy().into_owned();
            ctx.state.put(PARTS, ctx.state.key_groups().start, name.as_bytes(), &0u64.to_be_bytes())?;
            self.unpublished.insert(name, part.records);
            Ok(())
        } else {
            let to = self.dir.join(published_name(0, &part.stem));
            fs::rename(&part.hidden, &to).map_err(|e| OpError::io(ctx_msg("publishing", &to), e))?;
            OperatorMetrics::add(&ctx.metrics.parts_published, 1);
            OperatorMetrics::add(&ctx.metrics.records_committed, part.records);
            Ok(())
        }
    }

    /// Publish every part staged for a checkpoint <= `id`.
    fn publish_up_to(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        let due = staged_files::due(ctx, PARTS, id)?;
        if due.is_empty() {
            return Ok(());
        }
        faults::get().crash_point("before_sink_commit");
        for (hidden, staged_in, kg) in &due {
            let Some(stem) = stem_of(hidden) else { continue };
            let (from, to) = (self.dir.join(hidden), self.dir.join(published_name(*staged_in, stem)));
            let written_here = self.unpublished.remove(hidden);
            match fs::rename(&from, &to) {
                Ok(()) => {
                    OperatorMetrics::add(&ctx.metrics.parts_published, 1);
                    let records = written_here.unwrap_or_else(|| lines_of(&to));
                    OperatorMetrics::add(&ctx.metrics.records_committed, records);
                }
                // A staged part of a completed checkpoint leaves its hidden
                // name only by this rename: it was published before a crash
                // (the final file may since have been moved away by a
                // consumer, or this is a new output directory).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !from.exists() => {
                    tracing::info!(part = %to.display(), checkpoint = id, "Part already published.");
                }
                Err(e) => return Err(OpError::io(format!("publishing {}", to.display()), e)),
            }
            ctx.state.delete(PARTS, *kg, hidden.as_bytes())?;
        }
        crate::checkpoint::disk::sync_dir(&self.dir).map_err(|e| OpError::io(format!("syncing directory {}", self.dir.display()), e))
    }
}

/// How many published parts `dir` holds (0 when it does not exist): a run
/// that starts afresh adds its own next to them.
pub fn published_parts(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries.flatten().filter(|e| e.file_name().to_str().is_some_and(|n| parse_part_name(n).is_some())).count()
}

/// (subtask, sequence number) of a part name: published
/// `part-CHECKPOINT-SUBTASK-SEQ-RUN`, a hidden part's stem
/// `part-SUBTASK-SEQ-RUN`, or `part-SUBTASK-SEQ` as weir 0.1 named them.
fn parse_part_name(name: &str) -> Option<(u16, u64)> {
    let rest = name.strip_prefix("part-")?.strip_suffix(".jsonl")?;
    let fields: Vec<&str> = rest.split('-').collect();
    let digits = |f: &str, width: usize| f.len() >= width && f.bytes().all(|b| b.is_ascii_digit());
    let (subtask, seq) = match fields[..] {
        [chk, subtask, seq, run] if digits(chk, 10) && crate::run_id::is_short(run) => (subtask, seq),
        [subtask, seq, run] if crate::run_id::is_short(run) => (subtask, seq),
        [subtask, seq] => (subtask, seq),
        _ => return None,
    };
    if !digits(subtask, 4) || !digits(seq, 6) {
        return None;
    }
    Some((subtask.parse().ok()?, seq.parse().ok()?))
}

/// The records (lines) of a part another process wrote, for the
/// committed-records counter; a part that cannot be read counts 0 (it is
/// published all the same: counting must not fail the commit).
fn lines_of(part: &Path) -> u64 {
    let counted = File::open(part).and_then(|f| {
        let mut reader = BufReader::with_capacity(1 << 16, f);
        let mut lines = 0u64;
        loop {
            let buf = reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(lines);
            }
            lines += buf.iter().filter(|&&b| b == b'\n').count() as u64;
            let n = buf.len();
            reader.consume(n);
        }
    });
    counted.unwrap_or_else(|e| {
        tracing::warn!(part = %part.display(), error = %e, "Cannot count the records of a published part.");
        0
    })
}

/// (subtask, sequence) of a hidden or published part's name.
fn part_of(name: &str) -> Option<(u16, u64)> {
    parse_part_name(stem_of(name).unwrap_or(name))
}

/// One past the highest part number this subtask already has in `dir`, so
/// a new run never overwrites earlier output.
fn next_free_seq(dir: &Path, subtask: u16) -> std::io::Result<u64> {
    staged_files::next_free_seq(dir, subtask, part_of)
}

impl Operator for FileSink {
    fn tables(&self) -> Vec<TableSpec> {
        vec![TableSpec { name: "parts", kind: TableKind::Point }]
    }

    fn process(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        for r in &batch {
            let max = self.max_file_bytes;
            let part = self.open_part()?;
            let res = part.writer.write_all(r.raw.as_bytes()).and_then(|_| part.writer.write_all(b"\n"));
            res.map_err(|e| OpError::io(format!("writing {}", part.hidden.display()), e))?;
            part.bytes += r.raw.len() as u64 + 1;
            part.records += 1;
            if part.bytes >= max {
                self.close_part(ctx)?;
            }
        }
        Ok(())
    }

    fn on_checkpoint(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        self.close_part(ctx)?;
        for (hidden, staged, kg) in ctx.staged_names(PARTS)? {
            if staged == 0 {
                ctx.state.put(PARTS, kg, hidden.as_bytes(), &id.to_be_bytes())?;
            }
        }
        Ok(())
    }

    fn on_checkpoint_complete(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        self.publish_up_to(id, ctx)?;
        if let Some(below) = self.leftovers_below.take() {
            // Hidden parts only: a published one is output.
            let hidden = |name: &str| stem_of(name).and_then(parse_part_name);
            staged_files::remove_leftovers(&self.dir, self.subtask, below, ctx.info.parallelism, hidden)
                .map_err(|e| OpError::io(format!("removing leftover parts in {}", self.dir.display()), e))?;
        }
        Ok(())
    }

    fn on_restore(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        self.publish_up_to(id, ctx)?;
        self.next_seq = next_free_seq(&self.dir, self.subtask).map_err(|e| OpError::io(format!("listing {}", self.dir.display()), e))?;
        self.leftovers_below = Some(self.next_seq);
        Ok(())
    }

    fn close(&mut self, ctx: &mut Context<'_>) -> OpResult {
        if self.transactional {
            // Only checkpoints publish. An open part holds records after the
            // last barrier; it stays hidden and a restore removes it.
            if let Some(mut part) = self.current.take() {
                let _ = part.writer.flush();
            }
            Ok(())
        } else {
            self.close_part(ctx)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::testing::Harness;
    use crate::types::Value;

    /// The names in `dir`, sorted, without their run ids.
    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir).unwrap().map(|e| without_run(&e.unwrap().file_name().to_string_lossy())).collect();
        v.sort();
        v
    }

    /// `name` without its run id and (published parts) checkpoint id.
    fn without_run(name: &str) -> String {
        let Some(at) = name.find(".jsonl") else { return name.to_string() };
        let (head, tail) = name.split_at(at);
        let mut fields: Vec<&str> = head.split('-').collect();
        if fields.last().is_some_and(|r| crate::run_id::is_short(r)) {
            fields.pop();
        }
        if fields.len() == 4 && fields[1].len() == 10 {
            fields.remove(1);
        }
        format!("{}{tail}", fields.join("-"))
    }

    /// The file in `dir` shown as `shown` by `names`.
    fn file(dir: &Path, shown: &str) -> PathBuf {
        let found =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).find(|p| without_run(&p.file_name().unwrap().to_string_lossy()) == shown);
        found.unwrap_or_else(|| panic!("no {shown} in {}", dir.display()))
    }

    fn read(dir: &Path, shown: &str) -> String {
        fs::read_to_string(file(dir, shown)).unwrap()
    }

    fn rec(s: &str) -> Record {
        Record::new(vec![Value::Null], s.into(), None)
    }

    fn sink(dir: &Path) -> FileSink {
        FileSink::new(dir, 1 << 20, 0, true).unwrap()
    }

    #[test]
    fn transactional_parts_appear_only_when_their_checkpoint_completes() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = Harness::new(sink(dir.path()), "out", 0..4, 4);
        h.run(|s, ctx, out| s.process(vec![rec("a")], ctx, out));
        h.run(|s, ctx, _| s.on_checkpoint(1, ctx));
        h.run(|s, ctx, out| s.process(vec![rec("b")], ctx, out));
        assert_eq!(names(dir.path()), [".part-0000-000000.jsonl.inprogress", ".part-0000-000001.jsonl.inprogress"]);
        h.run(|s, ctx, _| s.on_checkpoint_complete(1, ctx));
        assert_eq!(names(dir.path()), [".part-0000-000001.jsonl.inprogress", "part-0000-000000.jsonl"]);
        // A crash now, then a restore from checkpoint 1: the open part is a
        // leftover, removed when the first checkpoint after the restore completes.
        h.op = sink(dir.path());
        h.run(|s, ctx, _| s.on_restore(1, ctx));
        h.run(|s, ctx, out| s.process(vec![rec("c")], ctx, out));
        h.run(|s, ctx, _| s.on_checkpoint(2, ctx));
        assert_eq!(
            names(dir.path()),
            [".part-0000-000001.jsonl.inprogress", ".part-0000-000002.jsonl.inprogress", "part-0000-000000.jsonl"]
        );
        h.run(|s, ctx, _| s.on_checkpoint_complete(2, ctx));
        assert_eq!(names(dir.path()), ["part-0000-000000.jsonl", "part-0000-000002.jsonl"]);
        assert_eq!(read(dir.path(), "part-0000-000000.jsonl"), "a\n");
    }

    #[test]
    fn restore_publishes_what_the_checkpoint_staged() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = Harness::new(sink(dir.path()), "out", 0..1, 1);
        h.run(|s, ctx, out| s.process(vec![rec("x")], ctx, out));
        h.run(|s, ctx, _| s.on_checkpoint(7, ctx));
        // Crash between `_metadata` and the rename: a new sink over the
        // restored state finishes it.
        h.op = sink(dir.path());
        h.run(|s, ctx, _| s.on_restore(7, ctx));
        assert_eq!(names(dir.path()), ["part-0000-000000.jsonl"]);
        h.run(|s, ctx, _| s.on_restore(7, ctx));
        assert_eq!(names(dir.path()), ["part-0000-000000.jsonl"], "idempotent");
    }

    #[test]
    fn after_a_rescale_parts_staged_by_other_subtasks_are_published_and_orphans_removed() {
        use crate::codec::Dec;
        use crate::state::{memory::MemoryState, snapshot};
        let dir = tempfile::tempdir().unwrap();
        // Old layout, parallelism 2: subtask 1 owns key groups 2..4 of 4.
        let mut old = Harness::new(FileSink::new(dir.path(), 1 << 20, 1, true).unwrap(), "out", 2..4, 4);
        old.info.index = 1;
        old.info.parallelism = 2;
        old.run(|s, ctx, out| s.process(vec![rec("staged")], ctx, out));
        old.run(|s, ctx, _| s.on_checkpoint(5, ctx));
        old.run(|s, ctx, out| s.process(vec![rec("after the barrier")], ctx, out));
        let tables = old.op.tables();
        let mut bytes = Vec::new();
        snapshot::write(old.state.as_ref(), &tables, &mut bytes).unwrap();
        assert_eq!(names(dir.path()), [".part-0001-000000.jsonl.inprogress", ".part-0001-000001.jsonl.inprogress"]);
        // Restored at parallelism 1: subtask 0 owns every key group.
        let mut new = Harness::new(sink(dir.path()), "out", 0..4, 4);
        new.state = Box::new(MemoryState::new(&tables, 0..4));
        snapshot::read(&mut Dec::new(&bytes), &tables, new.state.as_mut()).unwrap();
        new.run(|s, ctx, _| s.on_restore(5, ctx));
        assert_eq!(names(dir.path()), [".part-0001-000001.jsonl.inprogress", "part-0001-000000.jsonl"]);
        new.run(|s, ctx, _| s.on_checkpoint(6, ctx));
        new.run(|s, ctx, _| s.on_checkpoint_complete(6, ctx));
        assert_eq!(names(dir.path()), ["part-0001-000000.jsonl"], "the orphan of old subtask 1 is gone");
        assert_eq!(read(dir.path(), "part-0001-000000.jsonl"), "staged\n");
    }

    /// State as a checkpoint taken now would hold it.
    fn snapshot_of(h: &Harness<FileSink>) -> Vec<u8> {
        let mut bytes = Vec::new();
        crate::state::snapshot::write(h.state.as_ref(), &h.op.tables(), &mut bytes).unwrap();
        bytes
    }

    fn restored(op: FileSink, bytes: &[u8]) -> Harness<FileSink> {
        let mut h = Harness::new(op, "out", 0..1, 1);
        crate::state::snapshot::read(&mut crate::codec::Dec::new(bytes), &h.op.tables(), h.state.as_mut()).unwrap();
        h
    }

    #[test]
    fn a_published_part_moved_away_is_not_published_again_on_restore() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = Harness::new(sink(dir.path()), "out", 0..1, 1);
        h.run(|s, ctx, out| s.process(vec![rec("x")], ctx, out));
        h.run(|s, ctx, _| s.on_checkpoint(3, ctx));
        let chk3 = snapshot_of(&h);
        h.run(|s, ctx, _| s.on_checkpoint_complete(3, ctx));
        // A consumer picks the published part up; then a crash, and a restore
        // from checkpoint 3, which still lists the part as staged.
        let away = tempfile::tempdir().unwrap();
        fs::rename(file(dir.path(), "part-0000-000000.jsonl"), away.path().join("p")).unwrap();
        for _ in 0..2 {
            let mut h = restored(sink(dir.path()), &chk3);
            h.run(|s, ctx, _| s.on_restore(3, ctx));
            assert!(names(dir.path()).is_empty(), "nothing published twice: {:?}", names(dir.path()));
        }
        // A savepoint restored into a new, empty output directory.
        let fresh = tempfile::tempdir().unwrap();
        let mut h = restored(sink(fresh.path()), &chk3);
        h.run(|s, ctx, _| s.on_restore(3, ctx));
        h.run(|s, ctx, out| s.process(vec![rec("y")], ctx, out));
        h.run(|s, ctx, _| s.on_checkpoint(4, ctx));
        h.run(|s, ctx, _| s.on_checkpoint_complete(4, ctx));
        assert_eq!(names(fresh.path()), ["part-0000-000000.jsonl"]);
        assert_eq!(read(fresh.path(), "part-0000-000000.jsonl"), "y\n");
    }

    #[test]
    fn a_discarded_run_never_writes_a_part_under_a_name_the_restored_checkpoint_staged() {
        let dir = tempfile::tempdir().unwrap();
        let away = tempfile::tempdir().unwrap();
        let mut h = Harness::new(sink(dir.path()), "out", 0..1, 1);
        h.run(|s, ctx, out| s.process(vec![rec("before")], ctx, out));
        h.run(|s, ctx, _| s.on_checkpoint(1, ctx));
        let chk1 = snapshot_of(&h);
        h.run(|s, ctx, _| s.on_checkpoint_complete(1, ctx));
        // A consumer takes the published part; the directory is empty again.
        fs::rename(file(dir.path(), "part-0000-000000.jsonl"), away.path().join("1")).unwrap();
        // A run restored from checkpoint 1 writes a part and dies before its
        // first checkpoint: its records come again from the restored position.
        let mut crashed = restored(sink(dir.path()), &chk1);
        crashed.run(|s, ctx, _| s.on_restore(1, ctx));
        crashed.run(|s, ctx, out| s.process(vec![rec("discarded")], ctx, out));
        crashed.run(|s, ctx, _| s.close(ctx));
        // The next restore of checkpoint 1 must not publish it as the part
        // checkpoint 1 staged.
        let mut h = restored(sink(dir.path()), &chk1);
        h.run(|s, ctx, _| s.on_restore(1, ctx));
        assert_eq!(names(dir.path()), [".part-0000-000000.jsonl.inprogress"], "only the discarded run's hidden part");
        h.run(|s, ctx, out| s.process(vec![rec("again")], ctx, out));
        h.run(|s, ctx, _| s.on_checkpoint(2, ctx));
        h.run(|s, ctx, _| s.on_checkpoint_complete(2, ctx));
        assert_eq!(names(dir.path()), ["part-0000-000001.jsonl"]);
        assert_eq!(read(dir.path(), "part-0000-000001.jsonl"), "again\n");
    }

    /// A running aggregate's updates of one key move to another subtask when
    /// a restore changes the parallelism: the names must still sort them in
    /// the order they were committed.
    #[test]
    fn published_names_sort_in_commit_order_across_subtasks() {
        let dir = tempfile::tempdir().unwrap();
        // Subtask 3 commits the key's first update in checkpoint 9 (it has
        // written many parts before), subtask 0 the next in checkpoint 10.
        for (subtask, id, line) in [(3u16, 9u64, "first"), (0, 10, "second")] {
            let mut sink = FileSink::new(dir.path(), 1 << 20, subtask, true).unwrap();
            sink.next_seq = if subtask == 3 { 999_999 } else { 0 };
            let mut h = Harness::new(sink, "out", 0..1, 1);
            h.run(|s, ctx, out| s.process(vec![rec(line)], ctx, out));
            h.run(|s, ctx, _| s.on_checkpoint(id, ctx));
            h.run(|s, ctx, _| s.on_checkpoint_complete(id, ctx));
        }
        let mut names: Vec<String> =
            fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        let lines: Vec<String> = names.iter().map(|n| fs::read_to_string(dir.path().join(n)).unwrap()).collect();
        assert_eq!(lines, ["first\n", "second\n"], "{names:?}");
        assert!(names[0].starts_with("part-0000000009-0003-999999-"), "{names:?}");
    }

    #[test]
    fn part_names_of_weir_0_1_and_of_other_files_are_told_apart() {
        assert_eq!(parse_part_name("part-0003-000012.jsonl"), Some((3, 12)));
        assert_eq!(parse_part_name("part-0003-000012-0a1b2c3d.jsonl"), Some((3, 12)));
        assert_eq!(parse_part_name("part-0000000007-0003-000012-0a1b2c3d.jsonl"), Some((3, 12)));
        assert_eq!(parse_part_name("part-0003-000012-notarun.jsonl"), None);
        assert_eq!(parse_part_name("part-0003.jsonl"), None);
        assert_eq!(parse_part_name("part-7-0003-000012-0a1b2c3d.jsonl"), None);
        let dir = tempfile::tempdir().unwrap();
        for name in ["part-0001-000004.jsonl", ".part-0001-000009-0a1b2c3d.jsonl.inprogress", "part-0000000003-0001-000008-0a1b2c3d.jsonl"]
        {
            fs::write(dir.path().join(name), "").unwrap();
        }
        assert_eq!(next_free_seq(dir.path(), 1).unwrap(), 10);
    }

    fn committed(h: &Harness<FileSink>) -> u64 {
        h.metrics.records_committed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records committed are the lines of the parts published here: counted
    /// in memory for parts this instance wrote, read back for a part the
    /// crashed process staged (state holds no count, so older checkpoints
    /// restore unchanged), and never for a part found already published.
    #[test]
    fn records_committed_are_the_lines_of_the_parts_published_here_also_those_another_process_staged() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = Harness::new(FileSink::new(dir.path(), 8, 0, true).unwrap(), "out", 0..1, 1);
        // Parts roll at 8 bytes: "a\nbbbbbbb\n" is one part, "c\n" the next.
        h.run(|s, ctx, out| s.process(vec![rec("a"), rec("bbbbbbb"), rec("c")], ctx, out));
        assert_eq!(committed(&h), 0, "nothing published yet");
        h.run(|s, ctx, _| s.on_checkpoint(1, ctx));
        h.run(|s, ctx, _| s.on_checkpoint_complete(1, ctx));
        assert_eq!(committed(&h), 3);
        h.run(|s, ctx, out| s.process(vec![rec("d"), rec("e")], ctx, out));
        h.run(|s, ctx, _| s.on_checkpoint(2, ctx));
        let chk2 = snapshot_of(&h);
        assert_eq!(committed(&h), 3, "staged in 2, not committed");
        // A crash between `_metadata` of 2 and the rename: the restore publishes it.
        let mut r = restored(sink(dir.path()), &chk2);
        r.run(|s, ctx, _| s.on_restore(2, ctx));
        assert_eq!(committed(&r), 2, "the part of checkpoint 2, counted by its lines");
        // A second restore finds it published: nothing more is counted.
        let mut again = restored(sink(dir.path()), &chk2);
        again.run(|s, ctx, _| s.on_restore(2, ctx));
        assert_eq!(committed(&again), 0);
        let lines: usize = fs::read_dir(dir.path()).unwrap().map(|e| fs::read_to_string(e.unwrap().path()).unwrap().lines().count()).sum();
        assert_eq!(lines, 5);
    }

    #[test]
    fn without_checkpoints_a_part_counts_its_records_when_it_rolls_and_at_close() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = Harness::new(FileSink::new(dir.path(), 4, 0, false).unwrap(), "out", 0..1, 1);
        h.run(|s, ctx, out| s.process(vec![rec("aaaa"), rec("b")], ctx, out));
        assert_eq!(committed(&h), 1, "the first part rolled");
        h.run(|s, ctx, _| s.close(ctx));
        assert_eq!(committed(&h), 2);
    }

    #[test]
    fn a_start_without_a_restored_checkpoint_removes_the_crashed_runs_hidden_parts() {
        let dir = tempfile::tempdir().unwrap();
        // Left by a run at parallelism 4 that died before its first checkpoint.
        for name in [".part-0000-000000.jsonl.inprogress", ".part-0003-000000.jsonl.inprogress"] {
            fs::write(dir.path().join(name), "lost\n").unwrap();
        }
        let mut h = Harness::new(sink(dir.path()), "out", 0..4, 4);
        h.run(|s, ctx, out| s.process(vec![rec("a")], ctx, out));
        h.run(|s, ctx, _| s.on_checkpoint(1, ctx));
        h.run(|s, ctx, _| s.on_checkpoint_complete(1, ctx));
        assert_eq!(names(dir.path()), ["part-0000-000001.jsonl"]);
        assert_eq!(read(dir.path(), "part-0000-000001.jsonl"), "a\n");
    }
}

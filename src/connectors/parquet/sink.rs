//! The Parquet sink operator: records to rows of a declared schema, rows to
//! Parquet files (one open file per partition directory), files published
//! in the two-phase commit of checkpoints, as the file sink publishes its
//! part files (see `connectors::file::sink` for the protocol and why each
//! step is where it is).
//!
//! A file is written under a hidden name in the staging area
//! (`.staging/.part-SUBTASK-SEQ-RUN.parquet.inprogress`, see `target`). With
//! checkpoints, a barrier finishes every open file (a Parquet file is
//! readable only once its footer is written), makes it durable in the
//! staging area and stages it in state under the checkpoint's id, keyed by
//! `PARTITION/HIDDEN`; when the checkpoint completes, each staged file is
//! published as `PARTITION/part-CHECKPOINT-SUBTASK-SEQ-RUN.parquet`. A
//! restore publishes what the restored checkpoint staged; every other
//! staged file of this subtask (or of an old subtask beyond the new
//! parallelism that maps here) is a leftover of the crashed run, removed
//! when the first checkpoint after the restore completes. Without
//! checkpoints a file is published when it rolls and at the end.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parquet::file::properties::WriterProperties;
use parquet::schema::types::TypePtr;

use super::cells::{cell, Cell};
use super::part::{properties, schema, PartWriter};
use super::target::Target;
use crate::config::{ParquetSinkSpec, ParquetType, TimeBucket};
use crate::faults;
use crate::format::json::{FieldNeed, JsonParser};
use crate::operators::dead_letter::reject;
use crate::operators::{Context, DeadLetter, OpError, OpResult, Operator, OperatorMetrics};
use crate::state::{TableKind, TableSpec};
use crate::types::{Millis, Record, Value};

/// Staged files: `PARTITION/HIDDEN` → checkpoint id (0 = finished, not staged yet).
const FILES: usize = 0;

pub struct ParquetSink {
    name: String,
    spec: ParquetSinkSpec,
    target: Target,
    /// Where each column's value is in a record's fields (None: parse its text).
    slots: Option<Vec<usize>>,
    /// Whether a slot feeds two columns (then values are copied, not moved).
    shared_slots: bool,
    parser: JsonParser,
    /// The row being built (reused).
    row: Vec<Cell>,
    schema: TypePtr,
    props: Arc<WriterProperties>,
    subtask: u16,
    transactional: bool,
    next_seq: u64,
    run: String,
    /// Open files by partition directory ("" without partitions).
    open: BTreeMap<String, Open>,
    /// After a restore: staged files of this subtask numbered below this
    /// are leftovers, removed when the next checkpoint completes.
    leftovers_below: Option<u64>,
    /// Rows of each file this instance finished and has not published, by state key.
    unpublished: HashMap<String, u64>,
    dead_letter: Option<DeadLetter>,
}

struct Open {
    writer: PartWriter,
    hidden: String,
}

fn hidden_name(subtask: u16, seq: u64, run: &str) -> String {
    format!(".part-{subtask:04}-{seq:06}-{run}.parquet.inprogress")
}

/// (subtask, sequence) of a staged file's hidden name.
fn parse_hidden(name: &str) -> Option<(u16, u64)> {
    let rest = name.strip_prefix(".part-")?.strip_suffix(".parquet.inprogress")?;
    let mut fields = rest.split('-');
    let (subtask, seq, run) = (fields.next()?, fields.next()?, fields.next()?);
    let digits = |f: &str, width: usize| f.len() >= width && f.bytes().all(|b| b.is_ascii_digit());
    if fields.next().is_some() || !digits(subtask, 4) || !digits(seq, 6) || !crate::run_id::is_short(run) {
        return None;
    }
    Some((subtask.parse().ok()?, seq.parse().ok()?))
}

/// The final name of staged `key` (`PARTITION/HIDDEN`) staged in `checkpoint`.
fn final_name(key: &str, checkpoint: u64) -> Option<String> {
    let (dir, hidden) = key.rsplit_once('/').map_or(("", key), |(d, h)| (d, h));
    let stem = hidden.strip_prefix(".part-")?.strip_suffix(".inprogress")?;
    let file = format!("part-{checkpoint:010}-{stem}");
    Some(if dir.is_empty() { file } else { format!("{dir}/{file}") })
}

fn hidden_of(key: &str) -> &str {
    key.rsplit_once('/').map_or(key, |(_, h)| h)
}

/// A partition directory's name for `value`: Hive's escaping (every byte
/// but letters, digits, `.`, `_` and `-` as `%XX`), and its name for null.
fn partition_value(cell: &Cell, kind: ParquetType) -> String {
    let text = match cell {
        Cell::Null => return "__HIVE_DEFAULT_PARTITION__".into(),
        // A date names its directory as Hive writes it, `YYYY-MM-DD`.
        Cell::Int32(days) if kind == ParquetType::Date => match time::OffsetDateTime::from_unix_timestamp(i64::from(*days) * 86_400) {
            Ok(t) => format!("{:04}-{:02}-{:02}", t.year(), u8::from(t.month()), t.day()),
            Err(_) => days.to_string(),
        },
        Cell::Int32(i) => i.to_string(),
        Cell::Int64(i) => i.to_string(),
        Cell::Bool(b) => b.to_string(),
        Cell::Bytes(s) if s.is_empty() => return "__HIVE_DEFAULT_PARTITION__".into(),
        Cell::Bytes(s) => s.to_string(),
        Cell::Double(_) | Cell::Wide(_) => unreachable!("validated: partition columns are int, utf8, bool or date"),
    };
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `dt=YYYY-MM-DD` (and `/hr=HH`) of epoch milliseconds `t`.
fn time_partition(t: Millis, bucket: TimeBucket) -> Option<String> {
    let at = time::OffsetDateTime::from_unix_timestamp(t.div_euclid(1000)).ok()?;
    let (y, m, d) = (at.year(), u8::from(at.month()), at.day());
    Some(match bucket {
        TimeBucket::Day => format!("dt={y:04}-{m:02}-{d:02}"),
        TimeBucket::Hour => format!("dt={y:04}-{m:02}-{d:02}/hr={:02}", at.hour()),
    })
}

impl ParquetSink {
    /// `slots`: where records hold each column's value, when known.
    pub fn new(
        name: &str,
        spec: &ParquetSinkSpec,
        subtask: u16,
        transactional: bool,
        slots: Option<Vec<usize>>,
        dead_letter: Option<DeadLetter>,
    ) -> Result<Self, String> {
        let target = Target::open(&spec.path, &spec.storage_options.0)?;
        let fields = spec.columns.iter().map(|c| (c.path.clone(), FieldNeed::default())).collect();
        let mut sink = ParquetSink {
            name: name.to_string(),
            schema: schema(&spec.columns)?,
            props: properties(&spec.columns, spec.compression),
            parser: JsonParser::new(fields, None),
            shared_slots: slots.as_ref().is_some_and(|s| (1..s.len()).any(|i| s[..i].contains(&s[i]))),
            slots,
            row: Vec::with_capacity(spec.columns.len()),
            spec: spec.clone(),
            target,
            subtask,
            transactional,
            next_seq: 0,
            run: crate::run_id::draw_short(),
            open: BTreeMap::new(),
            leftovers_below: None,
            unpublished: HashMap::new(),
            dead_letter,
        };
        sink.next_seq = sink.next_free_seq()?;
        // Without a restore (none asked for, or none complete), no checkpoint
        // of this run will publish the staged files already there.
        sink.leftovers_below = transactional.then_some(sink.next_seq);
        Ok(sink)
    }

    fn next_free_seq(&self) -> Result<u64, String> {
        let staged = self.target.staged()?;
        let ours = staged.iter().filter_map(|n| parse_hidden(n)).filter(|(s, _)| *s == self.subtask);
        Ok(ours.map(|(_, seq)| seq.saturating_add(1)).max().unwrap_or(0))
    }

    /// The row of `r` into `self.row` (its values moved out of `r`), and
    /// its partition directory; or why it does not fit.
    fn row_of(&mut self, r: &mut Record) -> Result<String, String> {
        self.row.clear();
        let parsed;
        let values: &mut [Value] = match &self.slots {
            Some(_) => &mut r.fields,
            None => {
                parsed = self.parser.fields(&r.raw)?;
                r.fields = parsed;
                &mut r.fields
            }
        };
        for (i, c) in self.spec.columns.iter().enumerate() {
            let slot = self.slots.as_ref().map_or(i, |s| s[i]);
            let v = values.get_mut(slot).ok_or("the record has fewer fields than its layout says")?;
            let v = if self.shared_slots { v.clone() } else { std::mem::replace(v, Value::Null) };
            self.row.push(cell(c, v)?);
        }
        let row = &self.row;
        let mut dir = String::new();
        for &i in &self.spec.partition_columns {
            if !dir.is_empty() {
                dir.push('/');
            }
            dir.push_str(&self.spec.columns[i].name);
            dir.push('=');
            dir.push_str(&partition_value(&row[i], self.spec.columns[i].kind));
        }
        if let Some(bucket) = self.spec.partition_time {
            let t = r
                .event_time
                .ok_or("the record has no event time to partition by (`partition.event_time` needs the source's `event_time`)")?;
            let part = time_partition(t, bucket).ok_or_else(|| format!("event time {t} is out of range for a date"))?;
            if !dir.is_empty() {
                dir.push('/');
            }
            dir.push_str(&part);
        }
        Ok(dir)
    }

    fn writer_for(&mut self, dir: &str) -> Result<&mut Open, OpError> {
        if !self.open.contains_key(dir) {
            let (hidden, out) = loop {
                let hidden = hidden_name(self.subtask, self.next_seq, &self.run);
                self.next_seq += 1;
                // A name already taken (a run id drawn twice) is skipped, never overwritten.
                if let Some(out) = self.target.create(&hidden).map_err(OpError::Data)? {
                    break (hidden, out);
                }
            };
            let writer = PartWriter::new(out, &self.spec.columns, self.schema.clone(), self.props.clone(), self.spec.row_group_rows)
                .map_err(|e| OpError::Data(format!("starting {}: {e}", self.target.show(&hidden))))?;
            self.open.insert(dir.to_string(), Open { writer, hidden });
        }
        Ok(self.open.get_mut(dir).expect("just opened"))
    }

    /// Finish the open file of `dir`: publish it now, or stage it (transactional).
    fn finish(&mut self, dir: &str, ctx: &mut Context<'_>) -> OpResult {
        let Some(open) = self.open.remove(dir) else { return Ok(()) };
        let rows = open.writer.rows;
        let shown = self.target.show(&format!("{}/{}", super::target::STAGING, open.hidden));
        let out = open.writer.finish().map_err(|e| OpError::Data(format!("writing {shown}: {e}")))?;
        let key = if dir.is_empty() { open.hidden.clone() } else { format!("{dir}/{}", open.hidden) };
        if self.transactional {
            self.target.stage(&open.hidden, out).map_err(OpError::Data)?;
            ctx.state.put(FILES, ctx.state.key_groups().start, key.as_bytes(), &0u64.to_be_bytes())?;
            self.unpublished.insert(key, rows);
            OperatorMetrics::add(&ctx.metrics.transactions_pending, 1);
        } else {
            let to = final_name(&key, 0).expect("our own hidden name");
            self.target.publish_now(&open.hidden, out, &to).map_err(OpError::Data)?;
            OperatorMetrics::add(&ctx.metrics.parts_published, 1);
            OperatorMetrics::add(&ctx.metrics.records_committed, rows);
        }
        Ok(())
    }

    fn finish_all(&mut self, ctx: &mut Context<'_>) -> OpResult {
        let dirs: Vec<String> = self.open.keys().cloned().collect();
        dirs.iter().try_for_each(|d| self.finish(d, ctx))
    }

    /// Publish every file staged for a checkpoint <= `id`.
    fn publish_up_to(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        let due = crate::operators::staged_files::due(ctx, FILES, id)?;
        if due.is_empty() {
            return Ok(());
        }
        faults::get().crash_point("before_sink_commit");
        for (key, staged_in, kg) in &due {
            let Some(to) = final_name(key, *staged_in) else { continue };
            let written_here = self.unpublished.remove(key);
            if self.target.publish(hidden_of(key), &to).map_err(OpError::Data)? {
                OperatorMetrics::add(&ctx.metrics.parts_published, 1);
                // A file another process staged is counted by its footer.
                let rows = written_here.unwrap_or_else(|| self.rows_of(&to));
                OperatorMetrics::add(&ctx.metrics.records_committed, rows);
            } else {
                tracing::info!(file = %self.target.show(&to), checkpoint = id, "Parquet file already published.");
            }
            if written_here.is_some() {
                ctx.metrics.transactions_pending.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
            ctx.state.delete(FILES, *kg, key.as_bytes())?;
        }
        Ok(())
    }

    /// The rows of a published file by its footer (0, with a warning, when unreadable).
    fn rows_of(&self, published: &str) -> u64 {
        let Target::Local { dir } = &self.target else { return 0 };
        let rows = std::fs::File::open(dir.join(published)).map_err(|e| e.to_string()).and_then(|f| {
            use parquet::file::reader::FileReader;
            let reader = parquet::file::reader::SerializedFileReader::new(f).map_err(|e| e.to_string())?;
            Ok(reader.metadata().file_metadata().num_rows().max(0) as u64)
        });
        rows.unwrap_or_else(|e| {
            tracing::warn!(file = %self.target.show(published), error = %e, "Cannot count the rows of a published Parquet file.");
            0
        })
    }

    fn remove_leftovers(&self, below: u64, parallelism: u16) -> Result<(), String> {
        for name in self.target.staged()? {
            let Some(numbered) = parse_hidden(&name) else { continue };
            if crate::operators::staged_files::is_leftover(numbered, self.subtask, below, parallelism) {
                self.target.discard(&name)?;
            }
        }
        Ok(())
    }
}

impl Operator for ParquetSink {
    fn tables(&self) -> Vec<TableSpec> {
        vec![TableSpec { name: "files", kind: TableKind::Point }]
    }

    fn process(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        for mut r in batch {
            let dir = match self.row_of(&mut r) {
                Ok(dir) => dir,
                Err(reason) => {
                    let place = format!("sink `{}`", self.name);
                    reject(&self.spec.on_error, self.dead_letter.as_ref(), (&self.name, &place), &r.raw, &reason, ctx.metrics)?;
                    continue;
                }
            };
            let max = self.spec.max_file_bytes;
            let mut row = std::mem::take(&mut self.row);
            let open = self.writer_for(&dir)?;
            let (pushed, full) = (open.writer.push(&mut row), open.writer.bytes() >= max);
            self.row = row;
            if let Err(e) = pushed {
                let hidden = &self.open[&dir].hidden;
                return Err(OpError::Data(format!("writing {}: {e}", self.target.show(&format!("{}/{hidden}", super::target::STAGING)))));
            }
            if full {
                self.finish(&dir, ctx)?;
            }
        }
        Ok(())
    }

    fn on_checkpoint(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        self.finish_all(ctx)?;
        for (key, staged, kg) in ctx.staged_names(FILES)? {
            if staged == 0 {
                ctx.state.put(FILES, kg, key.as_bytes(), &id.to_be_bytes())?;
            }
        }
        Ok(())
    }

    fn on_checkpoint_complete(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        self.publish_up_to(id, ctx)?;
        if let Some(below) = self.leftovers_below.take() {
            self.remove_leftovers(below, ctx.info.parallelism).map_err(|e| OpError::Data(format!("removing leftover files: {e}")))?;
        }
        Ok(())
    }

    fn on_restore(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        self.publish_up_to(id, ctx)?;
        self.next_seq = self.next_free_seq().map_err(OpError::Data)?;
        self.leftovers_below = Some(self.next_seq);
        Ok(())
    }

    fn close(&mut self, ctx: &mut Context<'_>) -> OpResult {
        if self.transactional {
            // What is open is published by the final checkpoint, or produced
            // again from the restored position.
            self.open.clear();
            Ok(())
        } else {
            self.finish_all(ctx)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_partition_values_are_escaped_as_hive_does() {
        let hidden = hidden_name(3, 12, "0a1b2c3d");
        assert_eq!(parse_hidden(&hidden), Some((3, 12)));
        assert_eq!(parse_hidden("part-0003-000012-0a1b2c3d.parquet"), None);
        assert_eq!(
            final_name(&format!("dt=2026-12-03/{hidden}"), 7).unwrap(),
            "dt=2026-12-03/part-0000000007-0003-000012-0a1b2c3d.parquet"
        );
        assert_eq!(final_name(&hidden, 0).unwrap(), "part-0000000000-0003-000012-0a1b2c3d.parquet");
        assert_eq!(partition_value(&Cell::Bytes("a/b=c d".into()), ParquetType::Utf8), "a%2Fb%3Dc%20d");
        assert_eq!(partition_value(&Cell::Bytes("..".into()), ParquetType::Utf8), "..");
        assert_eq!(partition_value(&Cell::Bytes("".into()), ParquetType::Utf8), "__HIVE_DEFAULT_PARTITION__");
        assert_eq!(partition_value(&Cell::Null, ParquetType::Int64), "__HIVE_DEFAULT_PARTITION__");
        assert_eq!(partition_value(&Cell::Int32(20_790), ParquetType::Date), "2026-12-03");
        assert_eq!(partition_value(&Cell::Int32(-5), ParquetType::Int32), "-5");
        assert_eq!(time_partition(1_764_745_200_000, TimeBucket::Hour).unwrap(), "dt=2025-12-03/hr=07");
        assert_eq!(time_partition(-1, TimeBucket::Day).unwrap(), "dt=1969-12-31");
    }
}

//! Keyed aggregation: windowed (tumbling, sliding, session) on event time,
//! or running (no window).
//!
//! Output records carry `spec.output_fields()`: the key fields, then
//! `window_start` and `window_end` (epoch ms) when windowed, then one value
//! per aggregate alias; `raw` is the JSON object of exactly those fields.
//!
//! **Windowed.** Each record is added to its windows. A window `[s, e)` fires
//! once, when the watermark reaches `e - 1 + allowed_lateness`: it is emitted
//! (event time `e - 1`) and its state deleted. The watermark passed on is
//! the input watermark minus `allowed_lateness`, so a result is never late
//! for a windowed operator after this one. Lateness is judged by the
//! record's split watermark (`Record::lateness_watermark`), never by when
//! this operator's watermark came: a record whose windows would all have
//! fired at it is late: it is counted in `records_dropped` and written to
//! the dead letter, if any. Sliding windows take a record in every window
//! still open at it. Session windows: a record opens `[ts, ts + gap)`;
//! sessions of a key that overlap merge (with their accumulators); sessions
//! that only touch (records exactly `gap` apart) stay apart, since the first
//! may have fired at `e - 1` before a record at `e` arrives. A record is
//! late if `ts + allowed_lateness` is at or before its split watermark
//! (`window::session_is_late`), so it never meets a fired session and its
//! fate does not depend on which sessions other splits opened first.
//! Windows fire in order of (window end, key group, key bytes).
//!
//! **Running (no window).** One accumulator per key, never expired. Every
//! change marks the key dirty; every `emit_interval` (`on_tick`) and at the
//! end of bounded input, each dirty key's current value is emitted (key
//! fields + aliases, no event time), in (key group, key bytes) order, and the
//! dirty marks are cleared. Keys unchanged since the last emission are not
//! re-emitted. Watermarks are ignored.
//!
//! State (tables in this order):
//! - tumbling, sliding: `windows` (point): key ++ start ++ end →
//!   accumulators; `timers` (ordered): fire time ++ key ++ start ++ end → empty.
//! - session: `sessions` (point): key → the key's open sessions sorted by
//!   start, each start ++ end ++ accumulators (one read and write per record
//!   even when the session grows); `timers` as above.
//! - running: `accumulators` (point): key → accumulators ++ dirty flag
//!   (one byte: 1 if the key is in `dirty`, 0 if not); `dirty` (point):
//!   key → empty. The flag spares the `dirty` table a lookup per record:
//!   only a key that turns dirty is written there. Entries written before
//!   the flag (accumulators alone) are read too (`take_flag`): whether
//!   such a key is dirty is then known only to `dirty`, so the next record
//!   of it writes its mark again (an idempotent put) and the flag.
//!
//! - with `count_distinct` or `collect`, a third table after those:
//!   `entries` (ordered): one entry per distinct value of each
//!   `count_distinct` set, one per item of each `collect` list (see
//!   `entries.rs`, `collect.rs`); a window's entries go when it fires.
//!
//! Keys are `Value::encode_key` bytes (decoded back with `decode_key` when
//! firing); times are sign-flipped big-endian (8 bytes); accumulators use the
//! layout of `accumulator.rs`: fixed-width unless the spec has a
//! variable-width function (`count_distinct`, `first`, `last`, `collect`),
//! whose session entries are then found by walking the list
//! (`session_spans`).

pub mod accumulator;
mod collect;
mod entries;
mod exact;
mod hll;
mod variable;
pub mod window;

use std::ops::ControlFlow;
use std::time::Duration;

use super::dedup::{decode_time, duration_ms, encode_time, resolve_fields, BatchKeys, KeyList};
use super::{Context, DeadLetter, OpError, OpResult, Operator, OperatorMetrics};
use crate::config::{AggregateSpec, WindowSpec};
use crate::state::{TableId, TableKind, TableSpec};
use crate::types::{decode_key_into, encode_key, KeyGroup, Millis, Record, Value, MAX_WATERMARK};
use accumulator::Accumulators;
use window::Window;

// Windowed tables.
const WINDOWS: TableId = 0;
const SESSIONS: TableId = 0;
const TIMERS: TableId = 1;
// Running tables.
const ACCS: TableId = 0;
const DIRTY: TableId = 1;
/// Every mode, when the spec has `count_distinct` or `collect`: their values (`entries.rs`).
const ENTRIES: TableId = 2;

/// The last byte of a running accumulator entry: whether its key has a
/// mark in `dirty`.
const CLEAN: u8 = 0;
const MARKED: u8 = 1;

/// Above this many sliding windows per record, the spec is refused: each
/// record would cost that many state updates (`validate` refuses it first).
const MAX_WINDOWS_PER_RECORD: Millis = crate::config::MAX_WINDOWS_PER_RECORD;

#[derive(Debug, Clone, Copy)]
enum Assigner {
    Tumbling { size: Millis },
    Sliding { size: Millis, slide: Millis },
    Session { gap: Millis },
}

/// How output records are built: the aggregates and the JSON field names.
struct Output {
    accs: Accumulators,
    /// `{"name":` for the first field, `,"name":` for the others.
    json_names: Vec<Box<[u8]>>,
    /// Per output field: a string holding JSON text to write as is (`collect`).
    raw_json: Vec<bool>,
}

impl Output {
    /// Build one output record from an encoded key, optional window and accumulators.
    fn emit(&self, kg: KeyGroup, key: &[u8], window: Option<Window>, acc: &[u8], json: &mut Vec<u8>, out: &mut Vec<Record>) -> OpResult {
        let mut fields = Vec::with_capacity(self.json_names.len());
        if !decode_key_into(key, &mut fields) {
            return Err(corrupt("key"));
        }
        if let Some(w) = window {
            fields.push(Value::Int(w.start));
            fields.push(Value::Int(w.end));
        }
        let mut adopted;
        let acc = if self.accs.is_valid(acc) {
            acc
        } else {
            adopted = acc.to_vec();
            if !self.accs.adopt(&mut adopted) {
                return Err(corrupt("accumulator"));
            }
            &adopted[..]
        };
        self.accs.finish(acc, &mut fields);
        json.clear();
        if self.json_names.is_empty() {
            json.push(b'{');
        }
        for ((name, value), &raw) in self.json_names.iter().zip(&fields).zip(&self.raw_json) {
            json.extend_from_slice(name);
            match value {
                Value::Str(text) if raw => json.extend_from_slice(text.as_bytes()),
                _ => value.write_json(json),
            }
        }
        json.push(b'}');
        let raw = String::from_utf8_lossy(json).into_owned().into_boxed_str();
        // A result is never late downstream (see `output_watermark`): no split watermark.
        let mut r = Record::new(fields, raw, window.map(|w| w.end.saturating_sub(1)));
        r.key_group = kg;
        out.push(r);
        Ok(())
    }
}

pub struct Aggregate {
    key_indices: Vec<usize>,
    window: Option<Assigner>,
    lateness: Millis,
    emit_interval: Duration,
    dead_letter: Option<DeadLetter>,
    output: Output,
    /// Where the `count_distinct` and `collect` values live, if the spec has any.
    sets: Option<entries::Sets>,
    // Scratch buffers, reused across records.
    key: Vec<u8>,
    wkey: Vec<u8>,
    timer: Vec<u8>,
    acc: Vec<u8>,
    other: Vec<u8>,
    /// An `entries` key.
    entry: Vec<u8>,
    json: Vec<u8>,
    windows: Vec<Window>,
    sessions: Vec<Window>,
    /// Where each of `sessions` keeps its accumulators in the loaded list (`other`).
    spans: Vec<std::ops::Range<usize>>,
    due: KeyList,
    /// The encoded keys of the batch being processed.
    batch_keys: BatchKeys,
    /// Every timer below this fire time is gone: scans for due windows
    /// start here, never walking over deleted timers (RocksDB tombstones).
    /// Lowered by every timer computed; MIN after a restore.
    timers_from: Millis,
}

fn corrupt(what: &str) -> OpError {
    OpError::Data(format!("aggregate: corrupt {what} in state"))
}

/// A record whose windows i64 cannot hold (sources refuse event times
/// outside the supported range, so only a bug upstream gets here).
fn out_of_range(ts: Millis) -> OpError {
    OpError::Data(format!("aggregate: {}", crate::types::event_time_out_of_range(ts)))
}

fn positive_ms(d: Duration, what: &str) -> Result<Millis, String> {
    match duration_ms(d) {
        _ if d.subsec_nanos() % 1_000_000 != 0 => Err(format!("window {what} must be a whole number of milliseconds")),
        ms if (1..=crate::types::MAX_TIME_SPAN).contains(&ms) => Ok(ms),
        _ => Err(format!("window {what} must be between 1ms and 10000 years")),
    }
}

/// Fold `fields` into the accumulators at `key` (created empty if absent),
/// in one state lookup. Returns (created, false if the stored value is corrupt).
fn add_to_accumulator(
    accs: &Accumulators,
    table: TableId,
    kg: KeyGroup,
    key: &[u8],
    record: &Record,
    ctx: &mut Context<'_>,
) -> Result<(bool, bool), OpError> {
    let (mut created, mut ok) = (false, true);
    ctx.state.update(table, kg, key, &mut |acc, found| {
        if !found {
            accs.init(acc);
            created = true;
        } else if !accs.adopt(acc) {
            ok = false;
            return false;
        }
        accs.add(acc, &record.fields, record.event_time);
        true
    })?;
    Ok((created, ok))
}

/// Split a running entry into its accumulators (left in `v`, in the
/// current layout) and its dirty flag: `Some(marked)`, or None for an
/// entry written before the flag (then `dirty` alone knows); Err if `v` is
/// neither. Unambiguous: a flagged entry is one byte longer than a
/// well-formed set (the legacy layout is never longer than the current one),
/// and a well-formed variable-width set is never one once its last byte
/// is cut off.
fn take_flag(accs: &Accumulators, v: &mut Vec<u8>) -> Result<Option<bool>, OpError> {
    if let Some((&flag, set)) = v.split_last() {
        let current = flag <= MARKED && if accs.is_fixed() { set.len() == accs.width() } else { accs.is_valid(set) };
        if current {
            v.pop();
            return Ok(Some(flag == MARKED));
        }
        if flag <= MARKED && accs.is_known(set) {
            // A set of an older layout, flagged: upgraded like an unflagged one.
            v.pop();
            if !accs.adopt(v) {
                return Err(corrupt("accumulator"));
            }
            return Ok(Some(flag == MARKED));
        }
    }
    if accs.adopt(v) {
        Ok(None)
    } else {
        Err(corrupt("accumulator"))
    }
}

/// Make `list` a session list of the current accumulator layout: true if it
/// is one, or is one of an older layout (each set upgraded in place). The
/// layouts are tried newest first, each read only if its windows are
/// well-formed (each start < end, sorted, not overlapping).
fn adopt_sessions(accs: &Accumulators, list: &mut Vec<u8>) -> bool {
    if accs.is_fixed() {
        // Counts alone: one layout in every version.
        return list.len() % (16 + accs.width()) == 0 && spans_by(list, |_| Some(accs.width())).is_some();
    }
    if session_spans(accs, list, &mut Vec::new()) {
        return true;
    }
    let older = spans_by(list, |set| accs.v2_len(set)).or_else(|| spans_by(list, |_| Some(accs.legacy_width())));
    let Some(spans) = older else { return false };
    let mut upgraded = Vec::with_capacity(list.len() * 2);
    for span in spans {
        let mut acc = list[span.clone()].to_vec();
        if !accs.adopt(&mut acc) {
            return false;
        }
        upgraded.extend_from_slice(&list[span.start - 16..span.start]);
        upgraded.extend_from_slice(&acc);
    }
    *list = upgraded;
    true
}

/// The sets of a session list whose set lengths `len_of` reads, if the
/// list is well-formed that way.
fn spans_by(list: &[u8], len_of: impl Fn(&[u8]) -> Option<usize>) -> Option<Vec<std::ops::Range<usize>>> {
    let (mut spans, mut at, mut prev_end) = (Vec::new(), 0, Millis::MIN);
    while at < list.len() {
        let head = list.get(at..at + 16)?;
        let (start, end) = (decode_time(&head[..8]), decode_time(&head[8..]));
        let len = len_of(&list[at + 16..]).filter(|&l| l > 0 && at + 16 + l <= list.len())?;
        if !(prev_end <= start && start < end) {
            return None;
        }
        prev_end = end;
        spans.push(at + 16..at + 16 + len);
        at += 16 + len;
    }
    Some(spans)
}

/// The byte range of each session's accumulators in a session list of a
/// spec with variable-width functions (entries: start ++ end ++ set), into
/// `spans`; false if the list is malformed or not well-formed windows.
fn session_spans(accs: &Accumulators, list: &[u8], spans: &mut Vec<std::ops::Range<usize>>) -> bool {
    spans.clear();
    let (mut at, mut prev_end) = (0, Millis::MIN);
    while at < list.len() {
        let Some(head) = list.get(at..at + 16) else { return false };
        let (start, end) = (decode_time(&head[..8]), decode_time(&head[8..]));
        let Some(len) = accs.encoded_len(&list[at + 16..]) else { return false };
        if !(prev_end <= start && start < end) || !accs.is_valid(&list[at + 16..at + 16 + len]) {
            return false;
        }
        prev_end = end;
        spans.push(at + 16..at + 16 + len);
        at += 16 + len;
    }
    true
}

/// `key ++ start ++ end`, the `windows` key (and the tail of the timer key).
fn window_key(key: &[u8], w: Window, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(key);
    out.extend_from_slice(&encode_time(w.start));
    out.extend_from_slice(&encode_time(w.end));
}

/// Split a `windows` key into the encoded key and the window.
fn split_window_key(wkey: &[u8]) -> Option<(&[u8], Window)> {
    let split = wkey.len().checked_sub(16)?;
    let (key, times) = wkey.split_at(split);
    Some((key, Window::new(decode_time(&times[..8]), decode_time(&times[8..]))))
}

impl Aggregate {
    pub fn new(spec: &AggregateSpec, input_fields: &[String], dead_letter: Option<DeadLetter>) -> Result<Aggregate, String> {
        let key_indices = resolve_fields(&spec.key, input_fields)?;
        let accs = Accumulators::new(&spec.aggregates, input_fields)?;
        let window = match spec.window {
            None => None,
            Some(WindowSpec::Tumbling { size }) => Some(Assigner::Tumbling { size: positive_ms(size, "size")? }),
            Some(WindowSpec::Sliding { size, slide }) => {
                let (size, slide) = (positive_ms(size, "size")?, positive_ms(slide, "slide")?);
                if size / slide > MAX_WINDOWS_PER_RECORD {
                    return Err(format!("sliding window: size / slide must be at most {MAX_WINDOWS_PER_RECORD} windows per record"));
                }
                Some(Assigner::Sliding { size, slide })
            }
            Some(WindowSpec::Session { gap }) => Some(Assigner::Session { gap: positive_ms(gap, "gap")? }),
        };
        let mut raw_json = vec![false; spec.output_fields().len() - spec.aggregates.len()];
        raw_json.extend(accs.json_outputs());
        let json_names = spec
            .output_fields()
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut b = vec![if i == 0 { b'{' } else { b',' }];
                let name = match crate::format::path::FieldPath::parse(name) {
                    Ok(p) if i < spec.key.len() => p.output_name().to_string(),
                    _ => name.clone(),
                };
                let _ = serde_json::to_writer(&mut b, &name);
                b.push(b':');
                b.into_boxed_slice()
            })
            .collect();
        let sessions = matches!(window, Some(Assigner::Session { .. }));
        let sets = accs.has_entries().then_some(entries::Sets { table: ENTRIES, sessions });
        Ok(Aggregate {
            sets,
            key_indices,
            window,
            lateness: duration_ms(spec.allowed_lateness),
            emit_interval: spec.emit_interval.max(Duration::from_millis(1)),
            dead_letter,
            output: Output { raw_json, accs, json_names },
            key: Vec::new(),
            wkey: Vec::new(),
            timer: Vec::new(),
            acc: Vec::new(),
            other: Vec::new(),
            entry: Vec::new(),
            json: Vec::new(),
            windows: Vec::new(),
            sessions: Vec::new(),
            spans: Vec::new(),
            due: KeyList::default(),
            batch_keys: BatchKeys::default(),
            timers_from: Millis::MIN,
        })
    }

    fn fired(&self, w: Window, watermark: Millis) -> bool {
        window::has_fired(w.end, self.lateness, watermark)
    }

    /// Count a late record and write it to the dead letter. `watermark` is
    /// the one its lateness was judged by (its split's, normally: the
    /// entry is then the same whenever the watermark came).
    fn late(&self, record: &Record, w: Window, watermark: Millis, ctx: &mut Context<'_>) -> OpResult {
        ctx.metrics.late();
        if let Some(dl) = &self.dead_letter {
            let reason = format!("late record: window [{}, {}) closed at watermark {watermark}", w.start, w.end);
            dl.write(&ctx.info.operator, &reason, &record.raw)
                .map_err(|e| OpError::io(format!("{}: writing dead letter {}", ctx.info.operator, dl.path().display()), e))?;
            OperatorMetrics::add(&ctx.metrics.dead_lettered, 1);
        }
        Ok(())
    }

    /// Add `fields` to window `w` of the current key (`self.key`), creating
    /// the window and its timer if new.
    fn add_to_window(&mut self, kg: KeyGroup, w: Window, record: &Record, ctx: &mut Context<'_>) -> OpResult {
        window_key(&self.key, w, &mut self.wkey);
        let created = match self.sets {
            Some(sets) => self.add_with_sets(sets, kg, record, ctx)?,
            None => {
                let (created, ok) = add_to_accumulator(&self.output.accs, WINDOWS, kg, &self.wkey, record, ctx)?;
                if !ok {
                    return Err(corrupt("accumulator"));
                }
                created
            }
        };
        if created {
            self.put_timer(kg, w, ctx)?;
        }
        Ok(())
    }

    /// Fold `record` into the window at `self.wkey` (created empty if
    /// absent) and its distinct values into their sets. Returns whether the
    /// window was created.
    fn add_with_sets(&mut self, sets: entries::Sets, kg: KeyGroup, record: &Record, ctx: &mut Context<'_>) -> Result<bool, OpError> {
        let (accs, acc, wkey) = (&self.output.accs, &mut self.acc, &self.wkey);
        let found = ctx.state.get(WINDOWS, kg, wkey, acc)?;
        if !found {
            accs.init(acc);
        } else if !accs.adopt(acc) {
            return Err(corrupt("accumulator"));
        } else {
            sets.upgrade(accs, acc, wkey, 0, &mut *ctx.state, kg)?;
        }
        sets.add(accs, acc, wkey, 0, &record.fields, record.event_time, &mut *ctx.state, kg, &mut self.entry)?;
        accs.add(acc, &record.fields, record.event_time);
        ctx.state.put(WINDOWS, kg, wkey, acc)?;
        Ok(!found)
    }

    /// Fold `record` into the session accumulators in `self.acc` (upgraded)
    /// of the session starting at `start`, its values into their sets.
    fn fold_into_session(&mut self, start: Millis, kg: KeyGroup, record: &Record, ctx: &mut Context<'_>) -> OpResult {
        let accs = &self.output.accs;
        if let Some(sets) = self.sets {
            let (fields, ts) = (&record.fields, record.event_time);
            sets.add(accs, &mut self.acc, &self.key, start, fields, ts, &mut *ctx.state, kg, &mut self.entry)?;
        }
        accs.add(&mut self.acc, &record.fields, record.event_time);
        Ok(())
    }

    /// Timer key for window `w` of the key whose window key is in `self.wkey`.
    fn timer_key(&mut self, w: Window) {
        let fire = window::fire_time(w.end, self.lateness);
        self.timers_from = self.timers_from.min(fire);
        self.timer.clear();
        self.timer.extend_from_slice(&encode_time(fire));
        self.timer.extend_from_slice(&self.wkey);
    }

    fn put_timer(&mut self, kg: KeyGroup, w: Window, ctx: &mut Context<'_>) -> OpResult {
        self.timer_key(w);
        ctx.state.put(TIMERS, kg, &self.timer, &[])?;
        Ok(())
    }

    /// Load the sessions of `self.key`: windows into `self.sessions`, the
    /// encoded list into `self.other`, where each session's accumulators
    /// are into `self.spans`.
    fn load_sessions(&mut self, kg: KeyGroup, ctx: &mut Context<'_>) -> OpResult {
        self.sessions.clear();
        self.spans.clear();
        if ctx.state.get(SESSIONS, kg, &self.key, &mut self.other)? {
            if !adopt_sessions(&self.output.accs, &mut self.other) {
                return Err(corrupt("session list"));
            }
            let accs = &self.output.accs;
            if accs.is_fixed() {
                let stride = 16 + accs.width();
                self.spans.extend((0..self.other.len() / stride).map(|i| i * stride + 16..(i + 1) * stride));
            } else if !session_spans(accs, &self.other, &mut self.spans) {
                return Err(corrupt("session list"));
            }
            let other = &self.other;
            self.sessions
                .extend(self.spans.iter().map(|r| Window::new(decode_time(&other[r.start - 16..]), decode_time(&other[r.start - 8..]))));
        } else {
            self.other.clear();
        }
        Ok(())
    }

    fn save_sessions(&mut self, kg: KeyGroup, ctx: &mut Context<'_>) -> OpResult {
        if self.other.is_empty() {
            ctx.state.delete(SESSIONS, kg, &self.key)?;
        } else {
            ctx.state.put(SESSIONS, kg, &self.key, &self.other)?;
        }
        Ok(())
    }

    /// The timer of session `w` of `self.key`, into `self.timer`.
    fn session_timer(&mut self, w: Window) {
        window_key(&self.key, w, &mut self.wkey);
        self.timer_key(w);
    }

    fn add_to_session(&mut self, record: &Record, ts: Millis, gap: Millis, ctx: &mut Context<'_>) -> OpResult {
        let kg = record.key_group;
        let new = window::session(ts, gap).ok_or_else(|| out_of_range(ts))?;
        let wm = record.lateness_watermark(ctx.watermark);
        if window::session_is_late(ts, self.lateness, wm) {
            return self.late(record, new, wm, ctx);
        }
        self.load_sessions(kg, ctx)?;
        let (range, merged) = window::merge_session(&self.sessions, new);
        let accs = &self.output.accs;
        if range.len() == 1 && self.sessions[range.start] == merged {
            // The record falls inside an open session: update it in place.
            let span = self.spans[range.start].clone();
            if accs.is_fixed() {
                accs.add_in_place(&mut self.other[span], &record.fields);
            } else {
                self.acc.clear();
                self.acc.extend_from_slice(&self.other[span.clone()]);
                if let Some(sets) = self.sets {
                    sets.upgrade(accs, &mut self.acc, &self.key, merged.start, &mut *ctx.state, kg)?;
                }
                self.fold_into_session(merged.start, kg, record, ctx)?;
                self.other.splice(span, self.acc.iter().copied());
            }
            return self.save_sessions(kg, ctx);
        }
        // Replace the overlapped sessions (maybe none) by one holding them and the record.
        accs.init(&mut self.acc);
        for i in range.clone() {
            match self.sets {
                Some(sets) => {
                    let accs = &self.output.accs;
                    let mut from = self.other[self.spans[i].clone()].to_vec();
                    sets.upgrade(accs, &mut from, &self.key, self.sessions[i].start, &mut *ctx.state, kg)?;
                    accs.merge(&mut self.acc, &from);
                    sets.merge(accs, &mut self.acc, &from, &self.key, &mut *ctx.state, kg)?;
                }
                None => self.output.accs.merge(&mut self.acc, &self.other[self.spans[i].clone()]),
            }
            self.session_timer(self.sessions[i]);
            ctx.state.delete(TIMERS, kg, &self.timer)?;
        }
        self.fold_into_session(merged.start, kg, record, ctx)?;
        // The overlapped entries' bytes: from the first's start to the last's end, or the insertion point.
        let from = self.spans.get(range.start).map_or(self.other.len(), |r| r.start - 16);
        let to = if range.is_empty() { from } else { self.spans[range.end - 1].end };
        let entry = encode_time(merged.start).into_iter().chain(encode_time(merged.end)).chain(self.acc.iter().copied());
        self.other.splice(from..to, entry);
        self.session_timer(merged);
        ctx.state.put(TIMERS, kg, &self.timer, &[])?;
        self.save_sessions(kg, ctx)
    }

    fn process_windowed(&mut self, assigner: Assigner, record: &Record, ctx: &mut Context<'_>) -> OpResult {
        let ts = record.event_time.ok_or_else(|| OpError::Data("windowed aggregate: record without event time".into()))?;
        encode_key(&record.fields, &self.key_indices, &mut self.key);
        let kg = record.key_group;
        match assigner {
            Assigner::Tumbling { size } => {
                let w = window::tumbling(ts, size).ok_or_else(|| out_of_range(ts))?;
                let wm = record.lateness_watermark(ctx.watermark);
                if self.fired(w, wm) {
                    return self.late(record, w, wm, ctx);
                }
                self.add_to_window(kg, w, record, ctx)
            }
            Assigner::Sliding { size, slide } => {
                let mut windows = std::mem::take(&mut self.windows);
                if window::sliding(ts, size, slide, &mut windows).is_none() {
                    self.windows = windows;
                    return Err(out_of_range(ts));
                }
                let mut added = false;
                let wm = record.lateness_watermark(ctx.watermark);
                for &w in &windows {
                    // Judged per window by the split's watermark: the windows a record joins do not depend on when watermarks came.
                    if !self.fired(w, wm) {
                        self.add_to_window(kg, w, record, ctx)?;
                        added = true;
                    }
                }
                let result = match windows.last() {
                    Some(&last) if !added => self.late(record, last, wm, ctx),
                    _ => Ok(()),
                };
                self.windows = windows;
                result
            }
            Assigner::Session { gap } => self.add_to_session(record, ts, gap, ctx),
        }
    }

    /// Fold `record` (whose encoded key is `key`) into its key's running
    /// accumulators: one state lookup, plus a write of the dirty mark when
    /// the key turns dirty.
    fn process_running(accs: &Accumulators, record: &Record, key: &[u8], ctx: &mut Context<'_>) -> OpResult {
        let kg = record.key_group;
        let (mut result, mut mark) = (Ok(()), false);
        ctx.state.update(ACCS, kg, key, &mut |v, found| {
            let marked = if found {
                match take_flag(accs, v) {
                    Ok(flag) => flag == Some(true),
                    Err(e) => {
                        result = Err(e);
                        return false;
                    }
                }
            } else {
                accs.init(v);
                false
            };
            accs.add(v, &record.fields, record.event_time);
            v.push(MARKED);
            mark = !marked;
            true
        })?;
        result?;
        if mark {
            ctx.state.put(DIRTY, kg, key, &[])?;
        }
        Ok(())
    }

    /// `process_running` for a spec with `count_distinct`: the values go to
    /// their sets first, so the accumulators are read and written apart.
    fn process_running_with_sets(
        accs: &Accumulators,
        sets: entries::Sets,
        record: &Record,
        key: &[u8],
        ctx: &mut Context<'_>,
        acc: &mut Vec<u8>,
        entry: &mut Vec<u8>,
    ) -> OpResult {
        let kg = record.key_group;
        let marked = if ctx.state.get(ACCS, kg, key, acc)? {
            let marked = take_flag(accs, acc)? == Some(true);
            sets.upgrade(accs, acc, key, 0, &mut *ctx.state, kg)?;
            marked
        } else {
            accs.init(acc);
            false
        };
        sets.add(accs, acc, key, 0, &record.fields, record.event_time, &mut *ctx.state, kg, entry)?;
        accs.add(acc, &record.fields, record.event_time);
        acc.push(MARKED);
        ctx.state.put(ACCS, kg, key, acc)?;
        if !marked {
            ctx.state.put(DIRTY, kg, key, &[])?;
        }
        Ok(())
    }

    /// Fire every window whose fire time is <= `watermark`.
    fn fire(&mut self, watermark: Millis, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        if watermark < self.timers_from {
            return Ok(());
        }
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        let (from, to) = (encode_time(self.timers_from), encode_time(watermark.saturating_add(1)));
        let to = (watermark < Millis::MAX).then_some(&to[..]);
        for kg in ctx.state.key_groups() {
            ctx.state.scan_range(TIMERS, kg, &from, to, &mut |k, _| {
                if k.len() < 8 || decode_time(k) > watermark {
                    return ControlFlow::Break(());
                }
                due.push(kg, k);
                ControlFlow::Continue(())
            })?;
        }
        // Fire time orders like window end; ties broken by key group, then key.
        due.sort_by(|(ka, a), (kb, b)| a[..8].cmp(&b[..8]).then(ka.cmp(&kb)).then_with(|| a[8..].cmp(&b[8..])));
        let sessions = matches!(self.window, Some(Assigner::Session { .. }));
        let mut result = Ok(());
        for i in 0..due.len() {
            let (kg, timer) = due.get(i);
            result = self.fire_one(kg, timer, sessions, ctx, out);
            if result.is_err() {
                break;
            }
        }
        due.clear();
        self.due = due;
        if result.is_ok() {
            self.timers_from = self.timers_from.max(watermark.saturating_add(1));
        }
        result
    }

    fn fire_one(&mut self, kg: KeyGroup, timer: &[u8], sessions: bool, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        ctx.state.delete(TIMERS, kg, timer)?;
        let wkey = &timer[8..];
        let (key, w) = split_window_key(wkey).ok_or_else(|| corrupt("timer"))?;
        if sessions {
            self.key.clear();
            self.key.extend_from_slice(key);
            self.load_sessions(kg, ctx)?;
            let i = self.sessions.iter().position(|s| *s == w).ok_or_else(|| corrupt("timer without session"))?;
            let span = self.spans[i].clone();
            self.acc.clear();
            self.acc.extend(self.other.drain(span.start - 16..span.end).skip(16));
            self.save_sessions(kg, ctx)?;
            if let Some(sets) = self.sets {
                sets.materialize(&self.output.accs, &mut self.acc, key, &mut *ctx.state, kg, true)?;
                sets.clear(&self.output.accs, &self.acc, key, &mut *ctx.state, kg)?;
            }
        } else {
            if !ctx.state.take(WINDOWS, kg, wkey, &mut self.acc)? {
                return Err(corrupt("timer without window"));
            }
            if let Some(sets) = self.sets {
                if !self.output.accs.is_valid(&self.acc) && !self.output.accs.adopt(&mut self.acc) {
                    return Err(corrupt("accumulator"));
                }
                sets.materialize(&self.output.accs, &mut self.acc, wkey, &mut *ctx.state, kg, true)?;
                sets.clear(&self.output.accs, &self.acc, wkey, &mut *ctx.state, kg)?;
            }
        }
        self.output.emit(kg, key, Some(w), &self.acc, &mut self.json, out)
    }

    /// Emit the current value of every dirty key and clear the marks.
    fn emit_dirty(&mut self, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        for kg in ctx.state.key_groups() {
            ctx.state.scan_all(DIRTY, kg, &mut |k, _| {
                due.push(kg, k);
                ControlFlow::Continue(())
            })?;
        }
        // A point table has no order: sort so output order is deterministic.
        due.sort_by(|(ka, a), (kb, b)| ka.cmp(&kb).then_with(|| a.cmp(b)));
        let mut result = Ok(());
        for i in 0..due.len() {
            let (kg, key) = due.get(i);
            result = self.emit_running(kg, key, ctx, out);
            if result.is_err() {
                break;
            }
        }
        due.clear();
        self.due = due;
        result
    }

    /// Emit a dirty key's value; its mark goes, its flag is cleared.
    fn emit_running(&mut self, kg: KeyGroup, key: &[u8], ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        ctx.state.delete(DIRTY, kg, key)?;
        let (accs, acc) = (&self.output.accs, &mut self.acc);
        let mut result = Err(corrupt("dirty mark without accumulator"));
        ctx.state.update(ACCS, kg, key, &mut |v, found| {
            if !found {
                return false;
            }
            result = take_flag(accs, v).map(|_| ());
            if result.is_err() {
                return false;
            }
            acc.clear();
            acc.extend_from_slice(v);
            v.push(CLEAN);
            true
        })?;
        result?;
        if let Some(sets) = self.sets {
            sets.materialize(&self.output.accs, &mut self.acc, key, &mut *ctx.state, kg, false)?;
        }
        self.output.emit(kg, key, None, &self.acc, &mut self.json, out)
    }
}

impl Operator for Aggregate {
    fn tables(&self) -> Vec<TableSpec> {
        let mut tables = match self.window {
            None => vec![TableSpec { name: "accumulators", kind: TableKind::Point }, TableSpec { name: "dirty", kind: TableKind::Point }],
            Some(Assigner::Session { .. }) => {
                vec![TableSpec { name: "sessions", kind: TableKind::Point }, TableSpec { name: "timers", kind: TableKind::Ordered }]
            }
            Some(_) => vec![TableSpec { name: "windows", kind: TableKind::Point }, TableSpec { name: "timers", kind: TableKind::Ordered }],
        };
        if self.sets.is_some() {
            tables.push(TableSpec { name: "entries", kind: TableKind::Ordered });
        }
        tables
    }

    fn process(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        let Some(assigner) = self.window else {
            // Encode every key once, and touch its entry: the memory waits
            // of the batch's lookups overlap instead of coming one by one.
            let keys = &mut self.batch_keys;
            keys.encode(&batch, &self.key_indices);
            // A loop of its own: the shorter each turn, the more of them
            // (and their cache misses) the CPU runs at once.
            for (r, key) in batch.iter().zip(keys.iter()) {
                ctx.state.prefetch(ACCS, r.key_group, key);
            }
            let accs = &self.output.accs;
            match self.sets {
                Some(sets) => {
                    let (acc, entry) = (&mut self.acc, &mut self.entry);
                    for (r, key) in batch.iter().zip(keys.iter()) {
                        Self::process_running_with_sets(accs, sets, r, key, ctx, acc, entry)?;
                    }
                }
                None => {
                    for (r, key) in batch.iter().zip(keys.iter()) {
                        Self::process_running(accs, r, key, ctx)?;
                    }
                }
            }
            return Ok(());
        };
        batch.iter().try_for_each(|r| self.process_windowed(assigner, r, ctx))
    }

    fn on_watermark(&mut self, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        match self.window {
            Some(_) => self.fire(ctx.watermark, ctx, out),
            None => Ok(()),
        }
    }

    /// Held back by `allowed_lateness`: a window fires at `e - 1 + L` but
    /// its result is stamped `e - 1`, which must stay ahead of the watermark
    /// the operators after this one see.
    fn output_watermark(&self, input: Millis) -> Millis {
        match self.window {
            Some(_) if input < MAX_WATERMARK => input.saturating_sub(self.lateness),
            _ => input,
        }
    }

    fn tick_interval(&self) -> Option<Duration> {
        self.window.is_none().then_some(self.emit_interval)
    }

    fn on_tick(&mut self, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        match self.window {
            Some(_) => Ok(()),
            None => self.emit_dirty(ctx, out),
        }
    }

    fn on_end_of_input(&mut self, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        match self.window {
            // The final watermark fired everything already; this only guards
            // against a runtime that ends without it.
            Some(_) => self.fire(MAX_WATERMARK, ctx, out),
            None => self.emit_dirty(ctx, out),
        }
    }
}

#[cfg(test)]
mod tests;

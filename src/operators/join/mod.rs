//! `join` (issue 28): the interval join, the window join and the temporal
//! join (`temporal`), a keyed operator with two inputs.
//!
//! Both inputs are hashed by their own key fields into the same key groups,
//! so the records of one key from either side meet in one subtask. Each
//! side's records wait in keyed state (`buffer`) until the watermark — the
//! minimum over both inputs' channels — passes the last time they can
//! match (`interval`). A record is matched against the other side's buffer
//! when it arrives; every pair is so emitted exactly once, by whichever of
//! the two arrives second. An outer join emits a record that never matched
//! when it leaves state, i.e. when the watermark says no partner can come,
//! never because of timing.
//!
//! A record is late when its time is at or before its split's watermark
//! (`Record::lateness_watermark`), as for every other operator: it is
//! dropped and counted, and matches nothing. A record that is not late
//! finds every partner that arrived before it still in state (a partner
//! leaves only once the watermark passed this record's time too), so which
//! pairs are emitted depends on the input alone.
//!
//! The output is one JSON object per match: `{"<left as>": <left record>,
//! "<right as>": <right record>}`, an unmatched record without the other
//! member. Its event time is the later of the two (an unmatched record's
//! own). The output watermark trails the input's by `Interval::hold`.
//!
//! The window join (`windows`) keeps both sides the same way but matches
//! nothing on arrival: when a window fires (the watermark reaches its
//! last millisecond) every pair of its records of one key is emitted, or for an outer
//! side each record the window holds no partner for, with the window's
//! bounds, stamped `end - 1` like an aggregate's result.

pub mod buffer;
pub mod interval;
pub mod temporal;
pub mod windows;

use std::collections::BTreeMap;

use crate::config::{JoinKind, JoinSpec};
use crate::format::json::{FieldNeed, JsonParser};
use crate::state::{TableKind, TableSpec};
use crate::types::{encode_key, KeyGroup, Millis, Record, Value, MIN_WATERMARK};

use super::{Context, DeadLetter, OpError, OpResult, Operator, OperatorMetrics};
use buffer::{Buffered, Keys, Scratch, Tables};
use interval::{Interval, Side};
use temporal::Table;
use windows::Windows;

const LEFT: Tables = Tables { records: 0, times: 1 };
const RIGHT: Tables = Tables { records: 2, times: 3 };

fn tables(side: Side) -> Tables {
    match side {
        Side::Left => LEFT,
        Side::Right => RIGHT,
    }
}

pub struct Join {
    name: String,
    interval: Interval,
    /// A window join's windows (None: the interval join).
    windows: Option<Windows>,
    /// Window join: the watermark its windows fired at (MIN; after a
    /// restore, the restored watermark, whose windows had fired).
    fired_through: Millis,
    /// A temporal join's table settings (None: another join).
    table: Option<Table>,
    kind: JoinKind,
    /// Key field indices in each side's records.
    keys: [Vec<usize>; 2],
    /// The output member names, JSON-quoted.
    members: [String; 2],
    /// The fields the operators after the join need, read from its output
    /// text (None: none are needed).
    projection: Option<JsonParser>,
    /// Late records go here besides being counted.
    dead_letter: Option<DeadLetter>,
    /// Unmatched records output since the last watermark (counted into
    /// `unmatched_out` there: only a watermark emits them).
    unmatched: std::cell::Cell<u64>,
    /// Per side: every buffered record below this time is gone, so removal
    /// scans start here (MIN after a restore).
    removed_below: [Millis; 2],
    // Scratch buffers.
    key: Vec<u8>,
    prefix: Vec<u8>,
    scratch: Scratch,
    /// Partners to mark matched.
    marks: Keys,
}

impl Join {
    /// `left_key` / `right_key`: the key fields' indices in each side's records.
    pub fn new(
        name: &str,
        spec: &JoinSpec,
        left_key: Vec<usize>,
        right_key: Vec<usize>,
        projection: Vec<(String, FieldNeed)>,
    ) -> Result<Join, String> {
        let quote = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""));
        let table = spec.temporal.as_ref().map(Table::new).transpose().map_err(|why| format!("join `{name}`: {why}"))?;
        Ok(Join {
            name: name.to_string(),
            interval: Interval { lower: spec.lower, upper: spec.upper },
            windows: spec.window.as_ref().and_then(Windows::of_spec),
            fired_through: Millis::MIN,
            table,
            kind: spec.kind,
            keys: [left_key, right_key],
            members: [quote(&spec.left_as), quote(&spec.right_as)],
            projection: (!projection.is_empty()).then(|| JsonParser::new(projection, None)),
            removed_below: [Millis::MIN; 2],
            unmatched: std::cell::Cell::new(0),
            dead_letter: None,
            key: Vec::new(),
            prefix: Vec::new(),
            scratch: Scratch::default(),
            marks: Keys::default(),
        })
    }

    pub fn with_dead_letter(mut self, dead_letter: Option<DeadLetter>) -> Join {
        self.dead_letter = dead_letter;
        self
    }

    /// Count a late record and write it to the dead letter. `watermark` is
    /// the one its lateness was judged by (its split's, normally: the entry
    /// is then the same whenever the watermark came).
    fn late(&self, side: Side, record: &Record, watermark: Millis, ctx: &mut Context<'_>) -> OpResult {
        ctx.metrics.late();
        if side == Side::Right {
            OperatorMetrics::add(&ctx.metrics.right_late, 1);
        }
        if let Some(dl) = &self.dead_letter {
            let reason = match self.windows {
                Some(_) => format!("late record: every window holding it closed at watermark {watermark}"),
                None => format!("late record: at or before watermark {watermark}"),
            };
            dl.write(&ctx.info.operator, &reason, &record.raw)
                .map_err(|e| OpError::io(format!("{}: writing dead letter {}", ctx.info.operator, dl.path().display()), e))?;
            OperatorMetrics::add(&ctx.metrics.dead_lettered, 1);
        }
        Ok(())
    }

    fn process_side(&mut self, side: Side, batch: Vec<Record>, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        if self.table.is_some() {
            return self.temporal_side(side, batch, ctx, out);
        }
        let mut s = std::mem::take(&mut self.scratch);
        let mut marks = std::mem::take(&mut self.marks);
        let done = self.match_side(side, batch, ctx, out, &mut s, &mut marks);
        self.scratch = s;
        self.marks = marks;
        done
    }

    fn match_side(
        &mut self,
        side: Side,
        batch: Vec<Record>,
        ctx: &mut Context<'_>,
        out: &mut Vec<Record>,
        s: &mut Scratch,
        marks: &mut Keys,
    ) -> OpResult {
        let (mine, theirs) = (tables(side), tables(side.other()));
        let mut scratch = Vec::new();
        // Only an outer side needs to know it matched.
        let mark = self.kind.emits_unmatched(side.other().index());
        for r in batch {
            let t = r.event_time.ok_or_else(|| OpError::Data(format!("join `{}`: a record without event time", self.name)))?;
            self.key.clear();
            encode_key(&r.fields, &self.keys[side.index()], &mut self.key);
            buffer::prefix(&self.key, &mut self.prefix);
            self.removed_below[side.index()] = self.removed_below[side.index()].min(t);
            if let Some(w) = self.windows {
                // A window join matches when windows fire; a record joins
                // only the windows still open at its split's watermark.
                let wm = r.lateness_watermark(ctx.watermark);
                let Some(since) = w.since(t, wm, &mut scratch) else {
                    self.late(side, &r, wm, ctx)?;
                    continue;
                };
                let new = buffer::New { time: t, matched: false, since, raw: &r.raw };
                buffer::insert(ctx.state, mine, r.key_group, &self.prefix, new, s)?;
                continue;
            }
            // Judged by the record's split watermark: whether it is late does
            // not depend on when this operator's watermark came.
            let wm = r.lateness_watermark(ctx.watermark);
            if t <= wm {
                self.late(side, &r, wm, ctx)?;
                continue;
            }
            let this = &*self;
            let mut partners = 0usize;
            marks.clear();
            buffer::scan(ctx.state, theirs, r.key_group, &this.prefix, this.interval.partners(side, t), s, &mut |p| {
                partners += 1;
                let (l, rt) = match side {
                    Side::Left => ((r.raw.as_ref(), t), (p.raw, p.time)),
                    Side::Right => ((p.raw, p.time), (r.raw.as_ref(), t)),
                };
                out.push(this.output(None, Some(l.0), Some(rt.0), l.1.max(rt.1))?);
                if mark && !p.matched {
                    marks.push(p.entry);
                }
                Ok(())
            })?;
            for i in 0..marks.len() {
                buffer::mark_matched(ctx.state, theirs, r.key_group, marks.get(i))?;
            }
            let new = buffer::New { time: t, matched: partners > 0, since: Millis::MIN, raw: &r.raw };
            buffer::insert(ctx.state, mine, r.key_group, &self.prefix, new, s)?;
        }
        Ok(())
    }

    /// The output record of a match (both) or an unmatched record (one),
    /// after the window's bounds in a window join.
    fn output(&self, window: Option<(Millis, Millis)>, left: Option<&str>, right: Option<&str>, time: Millis) -> Result<Record, OpError> {
        self.output_at(window, left, right, Some(time))
    }

    /// `output`, stamped `time` (None: a processing-time lookup of a left
    /// record without event time).
    fn output_at(
        &self,
        window: Option<(Millis, Millis)>,
        left: Option<&str>,
        right: Option<&str>,
        time: Option<Millis>,
    ) -> Result<Record, OpError> {
        if left.is_none() || right.is_none() {
            self.unmatched.set(self.unmatched.get() + 1);
        }
        let mut text = String::with_capacity(left.map_or(0, str::len) + right.map_or(0, str::len) + 64);
        text.push('{');
        if let Some((start, end)) = window {
            text.push_str(&format!("\"{}\":{start},\"{}\":{end}", crate::config::WINDOW_START, crate::config::WINDOW_END));
        }
        for (member, raw) in self.members.iter().zip([left, right]) {
            let Some(raw) = raw else { continue };
            if text.len() > 1 {
                text.push(',');
            }
            text.push_str(member);
            text.push(':');
            text.push_str(raw);
        }
        text.push('}');
        let fields = match &self.projection {
            Some(p) => p.fields(&text).map_err(|why| OpError::Data(format!("join `{}`: output {text}: {why}", self.name)))?,
            None => Vec::<Value>::new(),
        };
        let mut r = Record::new(fields, text.into_boxed_str(), time);
        r.split_watermark = MIN_WATERMARK;
        Ok(r)
    }

    /// Remove what the watermark passed on `side`, emitting the unmatched
    /// records of an outer side.
    fn remove_done(&mut self, side: Side, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        let bound = self.interval.done_up_to(side, ctx.watermark);
        let from = self.removed_below[side.index()];
        if bound < from {
            return Ok(());
        }
        let emit = self.kind.emits_unmatched(side.index());
        let mut s = std::mem::take(&mut self.scratch);
        let this = &*self;
        let mut done = Ok(());
        for kg in ctx.state.key_groups() {
            done = buffer::remove_up_to(ctx.state, tables(side), kg, (from, bound), &mut s, &mut |b| {
                if emit && !b.matched {
                    let (l, r) = match side {
                        Side::Left => (Some(b.raw), None),
                        Side::Right => (None, Some(b.raw)),
                    };
                    out.push(this.output(None, l, r, b.time)?);
                }
                Ok(())
            });
            if done.is_err() {
                break;
            }
        }
        self.scratch = s;
        done?;
        self.removed_below[side.index()] = bound.saturating_add(1);
        Ok(())
    }

    /// Window join: fire the windows whose end - 1 the watermark passed
    /// since the last call, then remove the records all of whose windows
    /// have fired.
    fn fire_windows(&mut self, w: Windows, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        let (from, to) = (self.fired_through, ctx.watermark);
        if to <= from {
            return Ok(());
        }
        // (window end, key group, key) → each side's records in the window.
        let mut groups: BTreeMap<(Millis, KeyGroup, Vec<u8>), [Vec<Buffered>; 2]> = BTreeMap::new();
        let mut scratch = Vec::new();
        // Only records in a window that fires now are read: none when no
        // window's end - 1 is in (from, to], else those from the first such
        // window's start on (not every record still buffered, again at every
        // watermark).
        let first_start = w.first_start_firing_after(from);
        let fires = first_start.saturating_add(w.size) - 1 <= to;
        for side in [Side::Left, Side::Right].into_iter().filter(|_| fires) {
            let lo = self.removed_below[side.index()].max(first_start);
            for kg in ctx.state.key_groups() {
                buffer::up_to(ctx.state, tables(side), kg, (lo, to), &mut self.scratch, &mut |b| {
                    w.of(b.time, &mut scratch);
                    let prefix = buffer::key_prefix(b.entry)?.to_vec();
                    for win in scratch.iter().filter(|win| win.end - 1 > from && win.end - 1 <= to && win.end >= b.since) {
                        groups.entry((win.end, kg, prefix.clone())).or_default()[side.index()].push(b.to_owned());
                    }
                    Ok(())
                })?;
            }
        }
        for ((end, _, _), [ls, rs]) in groups {
            let window = Some((end - w.size, end));
            if !ls.is_empty() && !rs.is_empty() {
                for l in &ls {
                    for r in &rs {
                        out.push(self.output(window, Some(&l.raw), Some(&r.raw), end - 1)?);
                    }
                }
            } else if self.kind.emits_unmatched(Side::Left.index()) && rs.is_empty() {
                for l in &ls {
                    out.push(self.output(window, Some(&l.raw), None, end - 1)?);
                }
            } else if self.kind.emits_unmatched(Side::Right.index()) && ls.is_empty() {
                for r in &rs {
                    out.push(self.output(window, None, Some(&r.raw), end - 1)?);
                }
            }
        }
        let bound = w.done_up_to(to);
        for side in [Side::Left, Side::Right] {
            let below = self.removed_below[side.index()];
            for kg in ctx.state.key_groups() {
                buffer::remove_up_to(ctx.state, tables(side), kg, (below, bound), &mut self.scratch, &mut |_| Ok(()))?;
            }
            self.removed_below[side.index()] = below.max(bound.saturating_add(1));
        }
        self.fired_through = to;
        Ok(())
    }
}

impl Operator for Join {
    fn tables(&self) -> Vec<TableSpec> {
        let ordered = |name| TableSpec { name, kind: TableKind::Ordered };
        vec![ordered("left"), ordered("left_times"), ordered("right"), ordered("right_times")]
    }

    fn right_tables(&self) -> &'static [crate::state::TableId] {
        &[RIGHT.records, RIGHT.times]
    }

    fn process(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        self.process_side(Side::Left, batch, ctx, out)
    }

    fn process_right(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        self.process_side(Side::Right, batch, ctx, out)
    }

    fn on_watermark(&mut self, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        let done = if self.table.is_some() {
            self.temporal_watermark(ctx, out)
        } else if let Some(w) = self.windows {
            self.fire_windows(w, ctx, out)
        } else {
            self.remove_done(Side::Left, ctx, out).and_then(|()| self.remove_done(Side::Right, ctx, out))
        };
        OperatorMetrics::add(&ctx.metrics.unmatched_out, self.unmatched.take());
        done
    }

    fn output_watermark(&self, input: Millis) -> Millis {
        match (&self.windows, &self.table) {
            // Results are stamped end - 1 when the watermark reaches it, a
            // temporal join's with their left record's time when the
            // watermark reaches that.
            (Some(_), _) | (_, Some(_)) => input,
            (None, None) => self.interval.output_watermark(input),
        }
    }

    fn on_restore(&mut self, _id: u64, ctx: &mut Context<'_>) -> OpResult {
        // The windows up to the restored watermark fired before the checkpoint.
        self.fired_through = ctx.watermark;
        Ok(())
    }
}

#[cfg(test)]
mod tests;

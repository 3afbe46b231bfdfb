//! The temporal join (Flink's event-time `FOR SYSTEM_TIME AS OF`): the
//! right input is a changelog, each record the new version of its key from
//! its event time on (or its deletion, when `delete_when` says so); each
//! left record at `t` is emitted once, with the version of its key valid
//! at `t`: the latest at or before `t`.
//!
//! A left record waits in state until the watermark (the minimum over both
//! inputs) reaches `t`: no version at or before `t` can come after that (it
//! would be late, and is dropped like a late left record). Then it is
//! emitted and leaves state, and the versions the watermark passed are
//! settled (`buffer::settle_versions`): per key only the latest of them
//! stays. So the output depends on the input alone, and the table keeps
//! only the versions the watermark still needs.
//!
//! Two versions of one key at one time: the one whose JSON text sorts last
//! is kept, a rule of the input alone (arrival order across splits is not).
//!
//! With a `ttl`, a version is valid for at most `ttl` after its time: a left
//! record later than that finds none (a rule of event times alone, not of
//! when the state was cleaned), and a settled version the watermark has
//! moved more than `ttl` past leaves state, so a key never updated again
//! does not stay for ever.

use crate::expr::Expression;
use crate::operators::{Context, OpError, OpResult, OperatorMetrics};
use crate::types::{encode_key, Millis, Record};

use super::buffer::{self, Buffered};
use super::interval::Side;
use super::{tables, Join, LEFT, RIGHT};

/// A temporal join's table settings.
pub struct Table {
    /// True for the right records that delete their key.
    delete_when: Option<Expression>,
    /// How long a version is valid after its time, in ms (None: for ever).
    ttl: Option<Millis>,
    /// Every settled version below this time has expired (MIN after a
    /// restore: expiry scans start over).
    expired_below: Millis,
    /// `as_of: processing_time`: one version per key, the latest to
    /// arrive, looked up when a left record arrives (`lookup_side`).
    pub(super) processing_time: bool,
}

impl Table {
    /// `delete_when`: the validated expression's source (`validate`
    /// compiled it; a failure here is an error all the same).
    pub fn new(spec: &crate::config::TemporalSpec) -> Result<Table, String> {
        let delete_when = match &spec.delete_when {
            Some(source) => Some(Expression::compile(source).map_err(|why| format!("`temporal.delete_when` `{source}`: {why}"))?),
            None => None,
        };
        let ttl = spec.ttl.map(|d| Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX));
        Ok(Table { delete_when, ttl, expired_below: Millis::MIN, processing_time: spec.processing_time })
    }

    /// Whether a version at `version` is still valid at `at` (>= it).
    fn valid(&self, version: Millis, at: Millis) -> bool {
        self.ttl.is_none_or(|ttl| at.saturating_sub(version) <= ttl)
    }

    fn deletes(&self, join: &str, r: &Record) -> Result<bool, OpError> {
        let Some(e) = &self.delete_when else { return Ok(false) };
        let shown = || r.raw.chars().take(200).collect::<String>();
        e.eval_text(&r.raw)
            .and_then(|v| v.as_bool("`temporal.delete_when`"))
            .map_err(|why| OpError::Data(format!("join `{join}`: `temporal.delete_when` failed on a right record: {why}: {}", shown())))
    }
}

impl Join {
    /// A batch of one side: left records wait for the watermark, right
    /// records become versions. Late records of either side are dropped.
    pub(super) fn temporal_side(&mut self, side: Side, batch: Vec<Record>, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        if self.table.as_ref().is_some_and(|t| t.processing_time) {
            return self.lookup_side(side, batch, ctx, out);
        }
        for r in batch {
            let t = r.event_time.ok_or_else(|| OpError::Data(format!("join `{}`: a record without event time", self.name)))?;
            let wm = r.lateness_watermark(ctx.watermark);
            if t <= wm {
                self.late(side, &r, wm, ctx)?;
                continue;
            }
            self.key.clear();
            encode_key(&r.fields, &self.keys[side.index()], &mut self.key);
            buffer::prefix(&self.key, &mut self.prefix);
            self.removed_below[side.index()] = self.removed_below[side.index()].min(t);
            let deletes = match (side, &self.table) {
                (Side::Right, Some(table)) => table.deletes(&self.name, &r)?,
                _ => false,
            };
            if side == Side::Right {
                // One version per key and time: the last by text.
                let mut newer = false;
                let mut same = std::mem::take(&mut self.marks);
                same.clear();
                buffer::scan(ctx.state, RIGHT, r.key_group, &self.prefix, (t, t), &mut self.scratch, &mut |v| {
                    newer |= *v.raw >= *r.raw;
                    same.push(v.entry);
                    Ok(())
                })?;
                if !newer {
                    for i in 0..same.len() {
                        buffer::remove(ctx.state, RIGHT, r.key_group, same.get(i), &mut self.scratch)?;
                    }
                }
                self.marks = same;
                if newer {
                    continue;
                }
            }
            let new = buffer::New { time: t, matched: deletes, since: Millis::MIN, raw: &r.raw };
            buffer::insert(ctx.state, tables(side), r.key_group, &self.prefix, new, &mut self.scratch)?;
        }
        Ok(())
    }

    /// `as_of: processing_time`: a right record replaces its key's version
    /// (or deletes it); a left record is output at once with the version
    /// current now. No event time is needed and none is judged late.
    fn lookup_side(&mut self, side: Side, batch: Vec<Record>, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        let mut s = std::mem::take(&mut self.scratch);
        let done = (|| {
            for r in batch {
                self.key.clear();
                encode_key(&r.fields, &self.keys[side.index()], &mut self.key);
                buffer::prefix(&self.key, &mut self.prefix);
                if side == Side::Right {
                    let deletes = match &self.table {
                        Some(table) => table.deletes(&self.name, &r)?,
                        None => false,
                    };
                    buffer::set_current(ctx.state, RIGHT, r.key_group, &self.prefix, (!deletes).then_some(&*r.raw), &mut s)?;
                    continue;
                }
                match buffer::current(ctx.state, RIGHT, r.key_group, &self.prefix, &mut s)? {
                    Some(version) => out.push(self.output_at(None, Some(&r.raw), Some(version), r.event_time)?),
                    None if self.kind.emits_unmatched(Side::Left.index()) => {
                        out.push(self.output_at(None, Some(&r.raw), None, r.event_time)?)
                    }
                    None => {}
                }
            }
            Ok(())
        })();
        self.scratch = s;
        // No watermark may come (no event time): count unmatched here.
        OperatorMetrics::add(&ctx.metrics.unmatched_out, self.unmatched.take());
        done
    }

    /// Emit the left records the watermark reached, each with its version,
    /// then settle the versions it passed.
    pub(super) fn temporal_watermark(&mut self, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        if self.table.as_ref().is_some_and(|t| t.processing_time) {
            // Nothing waits for the watermark.
            return Ok(());
        }
        let w = ctx.watermark;
        let [left_from, right_from] = self.removed_below;
        for kg in ctx.state.key_groups() {
            let mut due: Vec<Buffered> = Vec::new();
            if w >= left_from {
                buffer::remove_up_to(ctx.state, LEFT, kg, (left_from, w), &mut self.scratch, &mut |b| {
                    due.push(b.to_owned());
                    Ok(())
                })?;
            }
            for l in due {
                let mut s = std::mem::take(&mut self.scratch);
                let version = buffer::last_at_or_before(ctx.state, RIGHT, kg, buffer::key_prefix(&l.entry)?, l.time, &mut s)?;
                let valid = |v: &buffer::Found<'_>| !v.matched && self.table.as_ref().is_none_or(|t| t.valid(v.time, l.time));
                let emitted = match version.filter(valid) {
                    Some(v) => self.output(None, Some(&l.raw), Some(v.raw), l.time).map(Some),
                    None if self.kind.emits_unmatched(Side::Left.index()) => self.output(None, Some(&l.raw), None, l.time).map(Some),
                    None => Ok(None),
                };
                self.scratch = s;
                out.extend(emitted?);
            }
            let ttl = self.table.as_ref().and_then(|t| t.ttl);
            buffer::settle_versions(ctx.state, RIGHT, kg, (right_from, w), ttl.is_some(), &mut self.scratch)?;
            // Versions more than `ttl` before the watermark are valid for no
            // left record still to come (all are after the watermark).
            if let (Some(table), Some(bound)) = (&self.table, expiry_bound(w, ttl)) {
                buffer::expire_versions(ctx.state, RIGHT, kg, (table.expired_below, bound), &mut self.scratch)?;
            }
        }
        if let Some(table) = &mut self.table {
            if let Some(bound) = expiry_bound(w, table.ttl) {
                table.expired_below = table.expired_below.max(bound.saturating_add(1));
            }
        }
        for below in &mut self.removed_below {
            *below = (*below).max(w.saturating_add(1));
        }
        Ok(())
    }
}

/// The latest version time that has expired at watermark `w`: a version at
/// `v` is valid for no left record after `w` once `v + ttl < w`.
fn expiry_bound(w: Millis, ttl: Option<Millis>) -> Option<Millis> {
    w.checked_sub(ttl?)?.checked_sub(1)
}

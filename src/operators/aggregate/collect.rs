//! `collect(max_items)` items as entries of their own in the `entries`
//! table, so a record costs a lookup or two instead of a rewrite of every
//! item its key or window keeps (which made large lists quadratic).
//!
//! An entry's key is `set prefix ++ !item` (every byte of the item
//! inverted), its value the item's multiplicity (u32 big-endian): equal
//! items (the same event time and JSON text) are one entry. Items are never
//! a proper prefix of one another (`variable::single`: the text ends at a
//! 0x00 byte, equal texts have equal values), so inverting reverses their
//! order: a list's first entry is its largest item. A full list rejects an
//! item that is not below it with one lookup; a smaller one takes its
//! place. The payload holds the number of items and the set id, as
//! `count_distinct`'s does (`variable::external`). The set prefix is the
//! one of `entries.rs`.
//!
//! Output needs the items in order: `materialize` reads them back into the
//! payload's legacy list, which `variable::finish` prints.

use std::ops::ControlFlow;

use super::accumulator::Accumulators;
use super::entries::Sets;
use super::variable::{self, external, read_external, Kind};
use super::{corrupt, OpResult};
use crate::state::KeyedState;
use crate::types::{KeyGroup, Millis, Value};

fn invert(item: &[u8], out: &mut Vec<u8>) {
    out.extend(item.iter().map(|b| !b));
}

fn multiplicity(v: &[u8]) -> u32 {
    v.try_into().map(u32::from_be_bytes).unwrap_or(1)
}

impl Sets {
    /// Move every legacy item list of a `collect` slot of `acc` to entries.
    pub(super) fn collect_upgrade(
        &self,
        accs: &Accumulators,
        acc: &mut Vec<u8>,
        base: &[u8],
        start: Millis,
        state: &mut dyn KeyedState,
        kg: KeyGroup,
    ) -> OpResult {
        for (i, _, _) in accs.collect_slots() {
            let p = accs.var_payload(acc, i).ok_or_else(|| corrupt("accumulator"))?;
            if p.is_empty() || read_external(p).is_some() {
                continue;
            }
            let items: Vec<Vec<u8>> = variable::items(p).ok_or_else(|| corrupt("accumulator"))?.into_iter().map(<[u8]>::to_vec).collect();
            let id = if self.sessions { start } else { 0 };
            let mut entry = Vec::new();
            for item in &items {
                self.prefix(base, id, i, &mut entry);
                invert(item, &mut entry);
                self.bump(state, kg, &entry, 1)?;
            }
            accs.set_var_payload(acc, i, &external(items.len() as u64, id));
        }
        Ok(())
    }

    /// Add the record's values to the `collect` lists of `acc` (upgraded).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn collect_add(
        &self,
        accs: &Accumulators,
        acc: &mut Vec<u8>,
        base: &[u8],
        start: Millis,
        fields: &[Value],
        ts: Option<Millis>,
        state: &mut dyn KeyedState,
        kg: KeyGroup,
        entry: &mut Vec<u8>,
    ) -> OpResult {
        let mut one = Vec::new();
        for (i, input, limit) in accs.collect_slots() {
            let v = match fields.get(input) {
                None | Some(Value::Null) => continue,
                Some(v) => v,
            };
            let (_, count, id) = self.opened(accs, acc, i, start)?;
            // Without event time (a running aggregate's input may have none) items order by their JSON text alone.
            variable::single(Kind::Collect(limit), v, ts.unwrap_or(Millis::MIN), &mut one);
            let item = one.get(4..).ok_or_else(|| corrupt("collect item"))?;
            self.prefix(base, id, i, entry);
            let prefix_len = entry.len();
            invert(item, entry);
            let count = if (count as usize) < limit {
                self.bump(state, kg, entry, 1)?;
                count + 1
            } else {
                let Some((largest, _)) = self.first(state, kg, &entry[..prefix_len])? else { return Err(corrupt("collect list")) };
                // Inverted: a key above the largest's is an item below it.
                if entry[..] <= largest[..] {
                    continue;
                }
                self.bump(state, kg, entry, 1)?;
                self.bump(state, kg, &largest, -1)?;
                count
            };
            accs.set_var_payload(acc, i, &external(count, id));
        }
        Ok(())
    }

    /// Unite the `collect` lists of `from` (a session's, upgraded, about to
    /// be dropped) into those of `into`, the smaller's entries moved into
    /// the larger, then cut to `max_items`.
    pub(super) fn collect_merge(
        &self,
        accs: &Accumulators,
        into: &mut Vec<u8>,
        from: &[u8],
        base: &[u8],
        state: &mut dyn KeyedState,
        kg: KeyGroup,
    ) -> OpResult {
        for (i, _, limit) in accs.collect_slots() {
            let of = |acc: &[u8]| accs.var_payload(acc, i).and_then(read_external).filter(|&(count, _)| count > 0);
            let Some((from_count, from_id)) = of(from) else { continue };
            let Some((into_count, into_id)) = of(into) else {
                accs.set_var_payload(into, i, &external(from_count, from_id));
                continue;
            };
            let (big_id, small_id) = if into_count >= from_count { (into_id, from_id) } else { (from_id, into_id) };
            let (mut small, mut big) = (Vec::new(), Vec::new());
            self.prefix(base, small_id, i, &mut small);
            self.prefix(base, big_id, i, &mut big);
            let big_len = big.len();
            self.drain(&small, state, kg, &mut |state, inverted, v| {
                big.truncate(big_len);
                big.extend_from_slice(inverted);
                self.bump(state, kg, &big, i64::from(multiplicity(v)))
            })?;
            let mut count = into_count.saturating_add(from_count);
            big.truncate(big_len);
            while count as usize > limit {
                let Some((largest, _)) = self.first(state, kg, &big)? else { return Err(corrupt("collect list")) };
                self.bump(state, kg, &largest, -1)?;
                count -= 1;
            }
            accs.set_var_payload(into, i, &external(count, big_id));
        }
        Ok(())
    }

    /// Replace each `collect` slot's payload in `acc` by the item list its
    /// entries hold (in item order), for output; `delete` removes the
    /// entries too (the window fired).
    pub(super) fn materialize(
        &self,
        accs: &Accumulators,
        acc: &mut Vec<u8>,
        base: &[u8],
        state: &mut dyn KeyedState,
        kg: KeyGroup,
        delete: bool,
    ) -> OpResult {
        let mut prefix = Vec::new();
        for (i, _, limit) in accs.collect_slots() {
            let Some((count, id)) = accs.var_payload(acc, i).and_then(read_external) else { continue };
            let mut items: Vec<(Vec<u8>, u32)> = Vec::new();
            if count > 0 {
                self.prefix(base, id, i, &mut prefix);
                let uninverted = |inverted: &[u8]| inverted.iter().map(|b| !b).collect::<Vec<u8>>();
                if delete {
                    self.drain(&prefix, state, kg, &mut |_, inverted, v| {
                        items.push((uninverted(inverted), multiplicity(v)));
                        Ok(())
                    })?;
                } else {
                    let to = self.successor(&prefix)?;
                    state.scan_range(self.table, kg, &prefix, Some(&to), &mut |k, v| {
                        items.push((uninverted(&k[prefix.len()..]), multiplicity(v)));
                        ControlFlow::Continue(())
                    })?;
                }
            }
            // Stored largest first; at most `max_items` (a merge cuts to it).
            let mut list = Vec::new();
            let expanded = items.iter().rev().flat_map(|(item, n)| std::iter::repeat_n(item, *n as usize));
            for item in expanded.take(limit) {
                list.extend_from_slice(&(item.len() as u32).to_le_bytes());
                list.extend_from_slice(item);
            }
            accs.set_var_payload(acc, i, &list);
        }
        Ok(())
    }

    /// The first entry (key, value) under `prefix`, if any.
    fn first(&self, state: &mut dyn KeyedState, kg: KeyGroup, prefix: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>, super::OpError> {
        let to = self.successor(prefix)?;
        let mut found = None;
        state.scan_range(self.table, kg, prefix, Some(&to), &mut |k, v| {
            found = Some((k.to_vec(), v.to_vec()));
            ControlFlow::Break(())
        })?;
        Ok(found)
    }

    /// Change the multiplicity of the entry `key` by `by` (deleting it at 0).
    fn bump(&self, state: &mut dyn KeyedState, kg: KeyGroup, key: &[u8], by: i64) -> OpResult {
        let mut old = Vec::new();
        let had = if state.get(self.table, kg, key, &mut old)? { i64::from(multiplicity(&old)) } else { 0 };
        let now = had.saturating_add(by);
        if now <= 0 {
            state.delete(self.table, kg, key)?;
        } else {
            let n = u32::try_from(now).map_err(|_| corrupt("collect multiplicity"))?;
            state.put(self.table, kg, key, &n.to_be_bytes())?;
        }
        Ok(())
    }
}

//! `count_distinct` values as entries of their own in the aggregate's
//! ordered `entries` table (`collect` items too: `collect.rs`), so a record costs one lookup of its value
//! instead of a rewrite of every value its key or window holds.
//!
//! An entry's key is `set prefix ++ value key encoding` (value: empty),
//! where the set prefix is the accumulator's state key (running: the key;
//! tumbling and sliding: key ++ start ++ end), then for sessions the set id
//! (8 bytes, sign-flipped big-endian), then the slot (u32 big-endian, the
//! index among the variable-width slots). Encoded keys are self-delimiting,
//! so one set's entries are exactly one range of the table. The count lives
//! in the accumulator (`variable::external`): a value is counted when its
//! entry is inserted.
//!
//! Session windows change as they grow and merge, so their sets are named by
//! an id instead of the window: the start of the session the set was first
//! given a value in. A session's id is always a time inside it, and open
//! sessions of a key are disjoint, so two open sessions never share one.
//! When sessions merge, the smaller sets' entries move into the largest
//! (which keeps its id): each value moves O(log n) times at most.
//!
//! Sets written by older builds hold their values in the payload (the
//! legacy item list); `upgrade` moves them to entries the first time the
//! set is read for a record.

use std::ops::ControlFlow;

use super::accumulator::Accumulators;
use super::variable::{self, external, read_external, EXTERNAL_LEN};
use super::OpResult;
use crate::operators::dedup::encode_time;
use crate::state::{KeyedState, TableId};
use crate::types::{KeyGroup, Millis, Value};

/// Entries visited per scan when a set is cleared or moved: bounds the
/// memory of one step whatever the set's size.
const CHUNK: usize = 4096;

/// Where a spec's distinct sets live.
#[derive(Debug, Clone, Copy)]
pub struct Sets {
    pub table: TableId,
    /// Session windows: sets are named by an id.
    pub sessions: bool,
}

impl Sets {
    /// The prefix of set `id` of slot `slot` under the state key `base`, into `out`.
    pub(super) fn prefix(&self, base: &[u8], id: i64, slot: usize, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(base);
        if self.sessions {
            out.extend_from_slice(&encode_time(id));
        }
        out.extend_from_slice(&(slot as u32).to_be_bytes());
    }

    /// Move every legacy value list of `acc` (a set read from state, of
    /// the current layout) to entries. `start`: the session's start (its
    /// set id), for sessions.
    pub fn upgrade(
        &self,
        accs: &Accumulators,
        acc: &mut Vec<u8>,
        base: &[u8],
        start: Millis,
        state: &mut dyn KeyedState,
        kg: KeyGroup,
    ) -> OpResult {
        for (i, _) in accs.distinct_slots() {
            let p = accs.var_payload(acc, i).ok_or_else(|| super::corrupt("accumulator"))?;
            if p.is_empty() || read_external(p).is_some() {
                continue;
            }
            let items: Vec<Vec<u8>> =
                variable::items(p).ok_or_else(|| super::corrupt("accumulator"))?.into_iter().map(<[u8]>::to_vec).collect();
            let id = if self.sessions { start } else { 0 };
            let mut entry = Vec::new();
            let mut count = 0u64;
            for item in &items {
                self.prefix(base, id, i, &mut entry);
                entry.extend_from_slice(item);
                count += state.put_if_absent(self.table, kg, &entry, &[])? as u64;
            }
            accs.set_var_payload(acc, i, &external(count, id));
        }
        self.collect_upgrade(accs, acc, base, start, state, kg)
    }

    /// Add the record's values to the distinct sets of `acc` (upgraded),
    /// counting the new ones, and to its `collect` lists (`ts`: the
    /// record's event time). `start`: the session's start, for sessions
    /// (the id of a set that has none yet).
    #[allow(clippy::too_many_arguments)]
    pub fn add(
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
        for (i, input) in accs.distinct_slots() {
            let v = match fields.get(input) {
                None | Some(Value::Null) => continue,
                Some(v) => v,
            };
            let (range, mut count, id) = self.opened(accs, acc, i, start)?;
            self.prefix(base, id, i, entry);
            v.encode_key(entry);
            if state.put_if_absent(self.table, kg, entry, &[])? {
                count = count.saturating_add(1);
            }
            let p = external(count, id);
            if range.len() == EXTERNAL_LEN {
                acc[range].copy_from_slice(&p);
            } else {
                accs.set_var_payload(acc, i, &p);
            }
        }
        self.collect_add(accs, acc, base, start, fields, ts, state, kg, entry)
    }

    /// Where variable slot `i`'s payload is in `acc`, and the (count, id)
    /// of its set: 0 and a new id (`start` for sessions) if it has none yet.
    pub(super) fn opened(
        &self,
        accs: &Accumulators,
        acc: &[u8],
        i: usize,
        start: Millis,
    ) -> Result<(std::ops::Range<usize>, u64, i64), super::OpError> {
        let range = accs.var_range(acc, i).ok_or_else(|| super::corrupt("accumulator"))?;
        let (count, id) = match read_external(&acc[range.clone()]) {
            Some((count, id)) if count > 0 => (count, id),
            _ => (0, if self.sessions { start } else { 0 }),
        };
        Ok((range, count, id))
    }

    /// Delete the entries of every distinct set and `collect` list of `acc` (its window fired).
    pub fn clear(&self, accs: &Accumulators, acc: &[u8], base: &[u8], state: &mut dyn KeyedState, kg: KeyGroup) -> OpResult {
        let mut prefix = Vec::new();
        let slots = accs.distinct_slots().map(|(i, _)| i).chain(accs.collect_slots().map(|(i, _, _)| i));
        for i in slots {
            let Some((count, id)) = accs.var_payload(acc, i).and_then(read_external) else { continue };
            if count > 0 {
                self.prefix(base, id, i, &mut prefix);
                self.drain(&prefix, state, kg, &mut |_, _, _| Ok(()))?;
            }
        }
        Ok(())
    }

    /// Unite the distinct sets of `from` (a session's set, upgraded, about
    /// to be dropped) into those of `into`: the smaller set's entries move
    /// into the larger, whose id the union keeps. Sessions only.
    pub fn merge(
        &self,
        accs: &Accumulators,
        into: &mut Vec<u8>,
        from: &[u8],
        base: &[u8],
        state: &mut dyn KeyedState,
        kg: KeyGroup,
    ) -> OpResult {
        for (i, _) in accs.distinct_slots() {
            let of = |acc: &[u8]| accs.var_payload(acc, i).and_then(read_external).filter(|&(count, _)| count > 0);
            let Some((from_count, from_id)) = of(from) else { continue };
            let Some((into_count, into_id)) = of(into) else {
                accs.set_var_payload(into, i, &external(from_count, from_id));
                continue;
            };
            let ((big_count, big_id), small_id) =
                if into_count >= from_count { ((into_count, into_id), from_id) } else { ((from_count, from_id), into_id) };
            let (mut small, mut big) = (Vec::new(), Vec::new());
            self.prefix(base, small_id, i, &mut small);
            self.prefix(base, big_id, i, &mut big);
            let (table, big_len, mut added) = (self.table, big.len(), 0u64);
            self.drain(&small, state, kg, &mut |state, value, _| {
                big.truncate(big_len);
                big.extend_from_slice(value);
                added += state.put_if_absent(table, kg, &big, &[])? as u64;
                Ok(())
            })?;
            accs.set_var_payload(into, i, &external(big_count.saturating_add(added), big_id));
        }
        self.collect_merge(accs, into, from, base, state, kg)
    }

    /// The first key after every key under `prefix` (a set prefix, whose
    /// last 4 bytes are the slot, below u32::MAX).
    pub(super) fn successor(&self, prefix: &[u8]) -> Result<Vec<u8>, super::OpError> {
        let mut to = prefix.to_vec();
        let Some(last) = to.len().checked_sub(4) else { return Err(super::corrupt("entry set")) };
        let slot = u32::from_be_bytes([to[last], to[last + 1], to[last + 2], to[last + 3]]);
        let next = slot.checked_add(1).ok_or_else(|| super::corrupt("entry set"))?;
        to[last..].copy_from_slice(&next.to_be_bytes());
        Ok(to)
    }

    /// Delete every entry under `prefix`, a chunk at a time, calling `f`
    /// with each one's key after the prefix and its value before.
    pub(super) fn drain(
        &self,
        prefix: &[u8],
        state: &mut dyn KeyedState,
        kg: KeyGroup,
        f: &mut dyn FnMut(&mut dyn KeyedState, &[u8], &[u8]) -> OpResult,
    ) -> OpResult {
        let to = self.successor(prefix)?;
        let mut from = prefix.to_vec();
        let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        loop {
            entries.clear();
            state.scan_range(self.table, kg, &from, Some(&to), &mut |k, v| {
                entries.push((k.to_vec(), v.to_vec()));
                if entries.len() == CHUNK {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
            for (k, v) in &entries {
                f(state, &k[prefix.len()..], v)?;
                state.delete(self.table, kg, k)?;
            }
            match entries.last() {
                Some((k, _)) if entries.len() == CHUNK => {
                    // Resume after the last key: never over its tombstone again.
                    from.clear();
                    from.extend_from_slice(k);
                    from.push(0);
                }
                _ => return Ok(()),
            }
        }
    }
}

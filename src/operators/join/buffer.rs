//! How a join keeps the records of one side in keyed state: two ordered
//! tables per side, so checkpoints, incremental RocksDB, savepoints and
//! rescaling by key group carry them like any other keyed state.
//!
//! - records: `len(key) u32 BE ++ key ++ time ++ seq u64 BE` → `matched u8
//!   ++ since i64 BE ++ the record's JSON text` (`since`: a window join's
//!   first window end the record may join; MIN for the interval join). A
//!   key's records sort by time, so the partners of a record are one range
//!   scan.
//! - times: `time ++ len(key) ++ key ++ seq` → empty: the records in time
//!   order, for removing those the watermark passed.
//!
//! A temporal join keeps its right side's versions in the same tables: the
//! `matched` byte marks a version that deletes its key, and a version's
//! `times` entry is removed once it is settled (the latest of its key at or
//! before the watermark; `settle_versions`), so that only the versions the
//! watermark has not passed are scanned again. With a TTL, a settled
//! version keeps its `times` entry until it expires or is replaced: the
//! index below the settled bound is then the expiry order.
//!
//! `time` is `encode_time` (byte order is numeric order). `seq` tells apart
//! records of one key and time: a hash of the record's text (high 32 bits)
//! and the next free number under that key, time and hash, found in state,
//! so it needs no counter that a restore would lose, and finding it costs
//! a scan of the copies of the same text only, not of every record of the
//! key and time.

use std::ops::ControlFlow;

use crate::operators::dedup::{decode_time, encode_time};
use crate::operators::OpError;
use crate::state::{KeyedState, TableId};
use crate::types::{KeyGroup, Millis};

/// A buffered record, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffered {
    /// The key of its `records` entry.
    pub entry: Vec<u8>,
    pub time: Millis,
    pub matched: bool,
    pub since: Millis,
    pub raw: String,
}

/// A buffered record as a scan visits it, borrowed from state (or from the
/// scratch buffer it was read into): no copy of its key or text.
#[derive(Debug, Clone, Copy)]
pub struct Found<'a> {
    pub entry: &'a [u8],
    pub time: Millis,
    pub matched: bool,
    pub since: Millis,
    pub raw: &'a str,
}

impl Found<'_> {
    pub fn to_owned(&self) -> Buffered {
        Buffered { entry: self.entry.to_vec(), time: self.time, matched: self.matched, since: self.since, raw: self.raw.to_string() }
    }
}

/// Byte strings in one buffer (the keys a scan collects before they are
/// deleted), reused from call to call.
#[derive(Debug, Default)]
pub struct Keys {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Keys {
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    pub fn push(&mut self, k: &[u8]) {
        self.bytes.extend_from_slice(k);
        self.ends.push(self.bytes.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
}

/// The buffers the functions here build keys and read values into, kept
/// by the join so that a record's state work allocates nothing of its own.
#[derive(Debug, Default)]
pub struct Scratch {
    lo: Vec<u8>,
    hi: Vec<u8>,
    value: Vec<u8>,
    keys: Keys,
    older: Keys,
}

/// The two tables of one side.
#[derive(Debug, Clone, Copy)]
pub struct Tables {
    pub records: TableId,
    pub times: TableId,
}

fn corrupt(what: &str) -> OpError {
    OpError::Data(format!("join: corrupt state entry ({what})"))
}

/// `len(key) ++ key`: no key's prefix is another key's.
pub fn prefix(key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
}

/// Bytes after the key prefix: time and seq.
const TAIL: usize = 16;

/// `out` = the `records` key of `prefix`, `time`, `seq`.
fn entry_key(out: &mut Vec<u8>, prefix: &[u8], time: Millis, seq: u64) {
    out.clear();
    out.extend_from_slice(prefix);
    out.extend_from_slice(&encode_time(time));
    out.extend_from_slice(&seq.to_be_bytes());
}

/// `out` = the `times` key of a `records` key: the time moved to the front.
fn time_key(out: &mut Vec<u8>, entry: &[u8]) -> Result<(), OpError> {
    let (prefix, time, seq) = split_entry(entry)?;
    out.clear();
    out.extend_from_slice(time);
    out.extend_from_slice(prefix);
    out.extend_from_slice(seq);
    Ok(())
}

/// The parts of a `records` key: prefix, time, seq.
type Parts<'a> = (&'a [u8], &'a [u8], &'a [u8]);

fn split_entry(entry: &[u8]) -> Result<Parts<'_>, OpError> {
    let len = entry.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok()).ok_or_else(|| corrupt("short key"))?;
    let end = 4usize.saturating_add(u32::from_be_bytes(len) as usize);
    if entry.len() != end + TAIL {
        return Err(corrupt("key length"));
    }
    Ok((&entry[..end], &entry[end..end + 8], &entry[end + 8..]))
}

/// `out` = the `records` key of a `times` key.
fn entry_of_time_key(out: &mut Vec<u8>, k: &[u8]) -> Result<(), OpError> {
    if k.len() < 4 + TAIL {
        return Err(corrupt("short time key"));
    }
    let (time, rest) = k.split_at(8);
    let (prefix, seq) = rest.split_at(rest.len() - 8);
    out.clear();
    out.extend_from_slice(prefix);
    out.extend_from_slice(time);
    out.extend_from_slice(seq);
    Ok(())
}

/// (matched, since, text) of a `records` value.
fn decode_value(v: &[u8]) -> Result<(bool, Millis, &str), OpError> {
    let (&flag, rest) = v.split_first().ok_or_else(|| corrupt("empty value"))?;
    let since = rest.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(i64::from_be_bytes).ok_or_else(|| corrupt("short value"))?;
    let raw = std::str::from_utf8(&rest[8..]).map_err(|_| corrupt("record text"))?;
    Ok((flag != 0, since, raw))
}

/// A `records` entry read back, borrowed.
fn found<'a>(entry: &'a [u8], time: Millis, value: &'a [u8]) -> Result<Found<'a>, OpError> {
    let (matched, since, raw) = decode_value(value)?;
    Ok(Found { entry, time, matched, since, raw })
}

fn encode_value(out: &mut Vec<u8>, matched: bool, since: Millis, raw: &str) {
    out.clear();
    out.reserve(raw.len() + 9);
    out.push(u8::from(matched));
    out.extend_from_slice(&since.to_be_bytes());
    out.extend_from_slice(raw.as_bytes());
}

/// A record to store: its time, whether it matched, `since`, its text.
pub struct New<'a> {
    pub time: Millis,
    pub matched: bool,
    pub since: Millis,
    pub raw: &'a str,
}

/// Store a record of key `prefix` at `time`.
pub fn insert(state: &mut dyn KeyedState, t: Tables, kg: KeyGroup, prefix: &[u8], new: New, s: &mut Scratch) -> Result<(), OpError> {
    let time = new.time;
    let base = u64::from(xxhash_rust::xxh3::xxh3_64(new.raw.as_bytes()) as u32) << 32;
    encode_value(&mut s.value, new.matched, new.since, new.raw);
    // Nearly always the text's first copy under its key and time: one
    // search stores it.
    entry_key(&mut s.lo, prefix, time, base);
    if state.put_if_absent(t.records, kg, &s.lo, &s.value)? {
        // A new record's time key is new too.
        time_key(&mut s.hi, &s.lo)?;
        state.put_if_absent(t.times, kg, &s.hi, &[])?;
        return Ok(());
    }
    // Else the next seq under (key, time, hash of the text): one past the
    // last one there (the text's earlier copies, or a rare hash collision).
    entry_key(&mut s.hi, prefix, time, base | u64::from(u32::MAX));
    let mut last: Option<u64> = None;
    state.scan_range(t.records, kg, &s.lo, Some(&s.hi), &mut |k, _| {
        last = k.get(k.len().saturating_sub(8)..).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(u64::from_be_bytes);
        ControlFlow::Continue(())
    })?;
    let seq = match last {
        None => base,
        Some(s) if s & u64::from(u32::MAX) < u64::from(u32::MAX) - 1 => s + 1,
        Some(_) => return Err(OpError::Data("join: more than 4 billion copies of one record of one key and time".into())),
    };
    entry_key(&mut s.lo, prefix, time, seq);
    state.put(t.records, kg, &s.lo, &s.value)?;
    time_key(&mut s.hi, &s.lo)?;
    state.put_if_absent(t.times, kg, &s.hi, &[])?;
    Ok(())
}

/// Visit the records of key `prefix` with `lo <= time <= hi`, in time
/// order, until `f` fails.
pub fn scan(
    state: &dyn KeyedState,
    t: Tables,
    kg: KeyGroup,
    prefix: &[u8],
    (lo, hi): (Millis, Millis),
    s: &mut Scratch,
    f: &mut dyn FnMut(Found<'_>) -> Result<(), OpError>,
) -> Result<(), OpError> {
    if lo > hi {
        return Ok(());
    }
    entry_key(&mut s.lo, prefix, lo, 0);
    entry_key(&mut s.hi, prefix, hi, u64::MAX);
    // Inclusive of seq u64::MAX: scan to the byte string right after it.
    s.hi.push(0);
    let mut bad = None;
    state.scan_range(t.records, kg, &s.lo, Some(&s.hi), &mut |k, v| {
        let done = match k.len().checked_sub(TAIL) {
            Some(at) => found(k, decode_time(&k[at..]), v).and_then(|b| f(b)),
            None => Err(corrupt("short key")),
        };
        match done {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                bad = Some(e);
                ControlFlow::Break(())
            }
        }
    })?;
    bad.map_or(Ok(()), Err)
}

/// The records of key `prefix` with `lo <= time <= hi`, in time order.
pub fn range(state: &dyn KeyedState, t: Tables, kg: KeyGroup, prefix: &[u8], lo: Millis, hi: Millis) -> Result<Vec<Buffered>, OpError> {
    let mut found = Vec::new();
    scan(state, t, kg, prefix, (lo, hi), &mut Scratch::default(), &mut |b| {
        found.push(b.to_owned());
        Ok(())
    })?;
    Ok(found)
}

/// Mark the buffered record whose `records` key is `entry` as matched (in
/// place: its first byte).
pub fn mark_matched(state: &mut dyn KeyedState, t: Tables, kg: KeyGroup, entry: &[u8]) -> Result<(), OpError> {
    state.update(t.records, kg, entry, &mut |v, found| match v.first_mut() {
        Some(flag) if found && *flag == 0 => {
            *flag = 1;
            true
        }
        _ => false,
    })?;
    Ok(())
}

/// Remove every record with `time <= bound` in key group `kg` (times from
/// `from` on: none below it is left), calling `f` on each removed one.
pub fn remove_up_to(
    state: &mut dyn KeyedState,
    t: Tables,
    kg: KeyGroup,
    (from, bound): (Millis, Millis),
    s: &mut Scratch,
    f: &mut dyn FnMut(Found<'_>) -> Result<(), OpError>,
) -> Result<(), OpError> {
    take_time_keys(state, t, kg, from, bound, &mut s.keys)?;
    let Scratch { lo: entry, value, keys, .. } = s;
    for i in 0..keys.len() {
        let k = keys.get(i);
        entry_of_time_key(entry, k)?;
        if state.take(t.records, kg, entry, value)? {
            f(found(entry, decode_time(k), value)?)?;
        }
    }
    Ok(())
}

/// `keys` = the keys of the time index of key group `kg` with `from <=
/// time <= bound`, in order (none when `bound < from`).
fn time_keys(state: &dyn KeyedState, t: Tables, kg: KeyGroup, from: Millis, bound: Millis, keys: &mut Keys) -> Result<(), OpError> {
    keys.clear();
    let Some((lo, hi)) = time_range(from, bound) else { return Ok(()) };
    state.scan_range(t.times, kg, &lo, hi.as_ref().map(|h| &h[..]), &mut |k, _| {
        keys.push(k);
        ControlFlow::Continue(())
    })?;
    Ok(())
}

/// The time-index bounds of `from <= time <= bound` (upper exclusive,
/// None: unbounded); None when the range is empty.
fn time_range(from: Millis, bound: Millis) -> Option<([u8; 8], Option<[u8; 8]>)> {
    (bound >= from).then(|| (encode_time(from), (bound < Millis::MAX).then(|| encode_time(bound.saturating_add(1)))))
}

/// `time_keys`, removed from the time index.
fn take_time_keys(
    state: &mut dyn KeyedState,
    t: Tables,
    kg: KeyGroup,
    from: Millis,
    bound: Millis,
    keys: &mut Keys,
) -> Result<(), OpError> {
    keys.clear();
    let Some((lo, hi)) = time_range(from, bound) else { return Ok(()) };
    state.drain_range(t.times, kg, &lo, hi.as_ref().map(|h| &h[..]), &mut |k, _| keys.push(k))?;
    Ok(())
}

/// Visit every record of key group `kg` with `from <= time <= bound`, in
/// time order (records of one time: by key), left in state.
pub fn up_to(
    state: &dyn KeyedState,
    t: Tables,
    kg: KeyGroup,
    (from, bound): (Millis, Millis),
    s: &mut Scratch,
    f: &mut dyn FnMut(Found<'_>) -> Result<(), OpError>,
) -> Result<(), OpError> {
    time_keys(state, t, kg, from, bound, &mut s.keys)?;
    let Scratch { lo: entry, value, keys, .. } = s;
    for i in 0..keys.len() {
        let k = keys.get(i);
        entry_of_time_key(entry, k)?;
        if state.get(t.records, kg, entry, value)? {
            f(found(entry, decode_time(k), value)?)?;
        }
    }
    Ok(())
}

/// The last record of key `prefix` with `time <= at` (None: there is none).
pub fn last_at_or_before<'s>(
    state: &dyn KeyedState,
    t: Tables,
    kg: KeyGroup,
    prefix: &[u8],
    at: Millis,
    s: &'s mut Scratch,
) -> Result<Option<Found<'s>>, OpError> {
    entry_key(&mut s.lo, prefix, Millis::MIN, 0);
    entry_key(&mut s.hi, prefix, at, u64::MAX);
    s.hi.push(0);
    let mut any = false;
    let Scratch { lo, hi, value, keys, .. } = s;
    keys.clear();
    state.scan_range(t.records, kg, lo, Some(hi), &mut |k, v| {
        if any {
            keys.clear();
        }
        keys.push(k);
        value.clear();
        value.extend_from_slice(v);
        any = true;
        ControlFlow::Continue(())
    })?;
    if !any {
        return Ok(None);
    }
    let entry = keys.get(0);
    let (_, time, _) = split_entry(entry)?;
    Ok(Some(found(entry, decode_time(time), value)?))
}

/// Remove the buffered record whose `records` key is `entry` from both tables.
pub fn remove(state: &mut dyn KeyedState, t: Tables, kg: KeyGroup, entry: &[u8], s: &mut Scratch) -> Result<(), OpError> {
    state.delete(t.records, kg, entry)?;
    time_key(&mut s.hi, entry)?;
    state.delete(t.times, kg, &s.hi)?;
    Ok(())
}

/// Settle the versions of key group `kg` with `from <= time <= bound`, in
/// time order: each replaces the older versions of its key (all at or
/// before it); one that deletes its key leaves too. What stays of a key at
/// or before `bound` is its latest version, the one valid for every time
/// from it up to the key's next version. A settled version leaves the time
/// index, unless `expires` (a table with a TTL: `expire_versions` finds it
/// there); the versions it replaces then leave the time index with it.
pub fn settle_versions(
    state: &mut dyn KeyedState,
    t: Tables,
    kg: KeyGroup,
    (from, bound): (Millis, Millis),
    expires: bool,
    s: &mut Scratch,
) -> Result<(), OpError> {
    if expires {
        time_keys(state, t, kg, from, bound, &mut s.keys)?;
    } else {
        take_time_keys(state, t, kg, from, bound, &mut s.keys)?;
    }
    let Scratch { lo, hi: entry, value, keys, older } = s;
    let mut index_key = Vec::new();
    for i in 0..keys.len() {
        let k = keys.get(i);
        entry_of_time_key(entry, k)?;
        let (prefix, _, _) = split_entry(entry)?;
        entry_key(lo, prefix, Millis::MIN, 0);
        older.clear();
        state.scan_range(t.records, kg, lo, Some(entry), &mut |k, _| {
            older.push(k);
            ControlFlow::Continue(())
        })?;
        for o in 0..older.len() {
            state.delete(t.records, kg, older.get(o))?;
            if expires {
                time_key(&mut index_key, older.get(o))?;
                state.delete(t.times, kg, &index_key)?;
            }
        }
        if state.get(t.records, kg, entry, value)? && value.first() == Some(&1) {
            state.delete(t.records, kg, entry)?;
            if expires {
                state.delete(t.times, kg, k)?;
            }
        }
    }
    Ok(())
}

/// Remove the settled versions of key group `kg` with `from <= time <=
/// bound` (a table with a TTL: their time has passed). Only settled
/// versions are in the time index at or below the settled bound, each the
/// latest of its key.
pub fn expire_versions(
    state: &mut dyn KeyedState,
    t: Tables,
    kg: KeyGroup,
    (from, bound): (Millis, Millis),
    s: &mut Scratch,
) -> Result<(), OpError> {
    take_time_keys(state, t, kg, from, bound, &mut s.keys)?;
    let Scratch { lo: entry, keys, .. } = s;
    for i in 0..keys.len() {
        entry_of_time_key(entry, keys.get(i))?;
        state.delete(t.records, kg, entry)?;
    }
    Ok(())
}

/// A processing-time table's one version of key `prefix` (None: deleted):
/// a `records` entry at time MIN, seq 0, with no time index.
pub fn set_current(
    state: &mut dyn KeyedState,
    t: Tables,
    kg: KeyGroup,
    prefix: &[u8],
    raw: Option<&str>,
    s: &mut Scratch,
) -> Result<(), OpError> {
    entry_key(&mut s.lo, prefix, Millis::MIN, 0);
    match raw {
        Some(raw) => {
            encode_value(&mut s.value, false, Millis::MIN, raw);
            state.put(t.records, kg, &s.lo, &s.value)?;
        }
        None => {
            state.delete(t.records, kg, &s.lo)?;
        }
    }
    Ok(())
}

/// The version `set_current` stored for key `prefix`.
pub fn current<'s>(state: &dyn KeyedState, t: Tables, kg: KeyGroup, prefix: &[u8], s: &'s mut Scratch) -> Result<Option<&'s str>, OpError> {
    entry_key(&mut s.lo, prefix, Millis::MIN, 0);
    if !state.get(t.records, kg, &s.lo, &mut s.value)? {
        return Ok(None);
    }
    Ok(Some(decode_value(&s.value)?.2))
}

/// The key prefix (`prefix`) of a `records` key.
pub fn key_prefix(entry: &[u8]) -> Result<&[u8], OpError> {
    Ok(split_entry(entry)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryState;
    use crate::state::{TableKind, TableSpec};

    const T: Tables = Tables { records: 0, times: 1 };

    fn state() -> MemoryState {
        let spec = |name| TableSpec { name, kind: TableKind::Ordered };
        MemoryState::new(&[spec("records"), spec("times")], 0..4)
    }

    fn p(key: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        prefix(key, &mut out);
        out
    }

    #[test]
    fn a_range_holds_one_key_s_records_within_the_times() {
        let mut s = state();
        for (key, time, raw) in [(&b"a"[..], 5, "a5"), (b"a", 5, "a5'"), (b"a", 9, "a9"), (b"ab", 6, "ab6"), (b"a", -3, "a-3")] {
            insert(&mut s, T, 1, &p(key), New { time, matched: false, since: Millis::MIN, raw }, &mut Scratch::default()).unwrap();
        }
        let raws = |lo, hi| range(&s, T, 1, &p(b"a"), lo, hi).unwrap().into_iter().map(|b| b.raw).collect::<Vec<_>>();
        assert_eq!(raws(-3, 9), ["a-3", "a5", "a5'", "a9"]);
        assert_eq!(raws(5, 5), ["a5", "a5'"], "two records of one key and time both stay");
        assert_eq!(raws(6, 8), Vec::<String>::new(), "`ab` is another key");
        assert_eq!(raws(9, 3), Vec::<String>::new());
    }

    #[test]
    fn records_leave_in_time_order_with_their_matched_flag() {
        let mut s = state();
        for time in [7, 3, 5] {
            insert(&mut s, T, 2, &p(b"k"), New { time, matched: false, since: time, raw: &format!("r{time}") }, &mut Scratch::default())
                .unwrap();
        }
        let b = range(&s, T, 2, &p(b"k"), 5, 5).unwrap();
        mark_matched(&mut s, T, 2, &b[0].entry).unwrap();
        let mut gone = Vec::new();
        remove_up_to(&mut s, T, 2, (Millis::MIN, 5), &mut Scratch::default(), &mut |b| {
            gone.push((b.time, b.matched, b.raw.to_string()));
            Ok(())
        })
        .unwrap();
        assert_eq!(gone, [(3, false, "r3".to_string()), (5, true, "r5".to_string())]);
        let mut left = Vec::new();
        up_to(&s, T, 2, (Millis::MIN, 100), &mut Scratch::default(), &mut |b| {
            left.push(b.to_owned());
            Ok(())
        })
        .unwrap();
        assert_eq!(left.iter().map(|b| (b.time, b.since)).collect::<Vec<_>>(), [(7, 7)]);
        assert_eq!(key_prefix(&left[0].entry).unwrap(), p(b"k"));
        assert_eq!(range(&s, T, 2, &p(b"k"), Millis::MIN, Millis::MAX).unwrap().len(), 1);
        assert_eq!(s.len(T.times), 1);
    }
}

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
//! watermark has not passed are scanned again.
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

fn entry_key(prefix: &[u8], time: Millis, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + TAIL);
    k.extend_from_slice(prefix);
    k.extend_from_slice(&encode_time(time));
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The `times` key of a `records` key: the time moved to the front.
fn time_key(entry: &[u8]) -> Result<Vec<u8>, OpError> {
    let (prefix, time, seq) = split_entry(entry)?;
    let mut k = Vec::with_capacity(entry.len());
    k.extend_from_slice(time);
    k.extend_from_slice(prefix);
    k.extend_from_slice(seq);
    Ok(k)
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

/// The `records` key of a `times` key.
fn entry_of_time_key(k: &[u8]) -> Result<Vec<u8>, OpError> {
    if k.len() < 4 + TAIL {
        return Err(corrupt("short time key"));
    }
    let (time, rest) = k.split_at(8);
    let (prefix, seq) = rest.split_at(rest.len() - 8);
    let mut e = Vec::with_capacity(k.len());
    e.extend_from_slice(prefix);
    e.extend_from_slice(time);
    e.extend_from_slice(seq);
    Ok(e)
}

/// (matched, since, text) of a `records` value.
fn decode_value(v: &[u8]) -> Result<(bool, Millis, String), OpError> {
    let (&flag, rest) = v.split_first().ok_or_else(|| corrupt("empty value"))?;
    let since = rest.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(i64::from_be_bytes).ok_or_else(|| corrupt("short value"))?;
    let raw = std::str::from_utf8(&rest[8..]).map_err(|_| corrupt("record text"))?;
    Ok((flag != 0, since, raw.to_string()))
}

fn encode_value(matched: bool, since: Millis, raw: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(raw.len() + 9);
    v.push(u8::from(matched));
    v.extend_from_slice(&since.to_be_bytes());
    v.extend_from_slice(raw.as_bytes());
    v
}

/// A record to store: its time, whether it matched, `since`, its text.
pub struct New<'a> {
    pub time: Millis,
    pub matched: bool,
    pub since: Millis,
    pub raw: &'a str,
}

/// Store a record of key `prefix` at `time`; returns its entry key.
pub fn insert(state: &mut dyn KeyedState, t: Tables, kg: KeyGroup, prefix: &[u8], new: New) -> Result<Vec<u8>, OpError> {
    let time = new.time;
    let base = u64::from(xxhash_rust::xxh3::xxh3_64(new.raw.as_bytes()) as u32) << 32;
    let value = encode_value(new.matched, new.since, new.raw);
    // Nearly always the text's first copy under its key and time: one
    // search stores it.
    let first = entry_key(prefix, time, base);
    if state.put_if_absent(t.records, kg, &first, &value)? {
        state.put(t.times, kg, &time_key(&first)?, &[])?;
        return Ok(first);
    }
    // Else the next seq under (key, time, hash of the text): one past the
    // last one there (the text's earlier copies, or a rare hash collision).
    let (from, to) = (first, entry_key(prefix, time, base | u64::from(u32::MAX)));
    let mut last: Option<u64> = None;
    state.scan_range(t.records, kg, &from, Some(&to), &mut |k, _| {
        last = k.get(k.len().saturating_sub(8)..).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(u64::from_be_bytes);
        ControlFlow::Continue(())
    })?;
    let seq = match last {
        None => base,
        Some(s) if s & u64::from(u32::MAX) < u64::from(u32::MAX) - 1 => s + 1,
        Some(_) => return Err(OpError::Data("join: more than 4 billion copies of one record of one key and time".into())),
    };
    let entry = entry_key(prefix, time, seq);
    state.put(t.records, kg, &entry, &value)?;
    state.put(t.times, kg, &time_key(&entry)?, &[])?;
    Ok(entry)
}

/// The records of key `prefix` with `lo <= time <= hi`, in time order.
pub fn range(state: &dyn KeyedState, t: Tables, kg: KeyGroup, prefix: &[u8], lo: Millis, hi: Millis) -> Result<Vec<Buffered>, OpError> {
    let mut found = Vec::new();
    if lo > hi {
        return Ok(found);
    }
    let from = entry_key(prefix, lo, 0);
    let mut to = entry_key(prefix, hi, u64::MAX);
    // Inclusive of seq u64::MAX: scan to the byte string right after it.
    to.push(0);
    let mut bad = None;
    state.scan_range(t.records, kg, &from, Some(&to), &mut |k, v| {
        let time = k.len().checked_sub(TAIL).map(|at| decode_time(&k[at..]));
        match (time, decode_value(v)) {
            (Some(time), Ok((matched, since, raw))) => found.push(Buffered { entry: k.to_vec(), time, matched, since, raw }),
            (_, Err(e)) => {
                bad = Some(e);
                return ControlFlow::Break(());
            }
            (None, _) => {
                bad = Some(corrupt("short key"));
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    })?;
    match bad {
        Some(e) => Err(e),
        None => Ok(found),
    }
}

/// Mark a buffered record as matched.
pub fn mark_matched(state: &mut dyn KeyedState, t: Tables, kg: KeyGroup, b: &Buffered) -> Result<(), OpError> {
    state.put(t.records, kg, &b.entry, &encode_value(true, b.since, &b.raw))?;
    Ok(())
}

/// Remove every record with `time <= bound` in key group `kg` (times from
/// `from` on: none below it is left), calling `f` on each removed one.
pub fn remove_up_to(
    state: &mut dyn KeyedState,
    t: Tables,
    kg: KeyGroup,
    from: Millis,
    bound: Millis,
    f: &mut dyn FnMut(Buffered) -> Result<(), OpError>,
) -> Result<(), OpError> {
    let mut value = Vec::new();
    for k in time_keys(state, t, kg, from, bound)? {
        state.delete(t.times, kg, &k)?;
        let entry = entry_of_time_key(&k)?;
        if state.take(t.records, kg, &entry, &mut value)? {
            let (matched, since, raw) = decode_value(&value)?;
            f(Buffered { time: decode_time(&k), entry, matched, since, raw })?;
        }
    }
    Ok(())
}

/// The keys of the time index of key group `kg` with `from <= time <=
/// bound`, in order (none when `bound < from`).
fn time_keys(state: &dyn KeyedState, t: Tables, kg: KeyGroup, from: Millis, bound: Millis) -> Result<Vec<Vec<u8>>, OpError> {
    let mut keys = Vec::new();
    if bound < from {
        return Ok(keys);
    }
    let lo = encode_time(from);
    let hi = (bound < Millis::MAX).then(|| encode_time(bound.saturating_add(1)));
    state.scan_range(t.times, kg, &lo, hi.as_ref().map(|h| &h[..]), &mut |k, _| {
        keys.push(k.to_vec());
        ControlFlow::Continue(())
    })?;
    Ok(keys)
}

/// Every record of key group `kg` with `from <= time <= bound`, in time
/// order (records of one time: by key), left in state.
pub fn up_to(state: &dyn KeyedState, t: Tables, kg: KeyGroup, from: Millis, bound: Millis) -> Result<Vec<Buffered>, OpError> {
    let mut found = Vec::new();
    let mut value = Vec::new();
    for k in time_keys(state, t, kg, from, bound)? {
        let entry = entry_of_time_key(&k)?;
        if state.get(t.records, kg, &entry, &mut value)? {
            let (matched, since, raw) = decode_value(&value)?;
            found.push(Buffered { time: decode_time(&k), entry, matched, since, raw });
        }
    }
    Ok(found)
}

/// The last record of key `prefix` with `time <= at` (None: there is none).
pub fn last_at_or_before(state: &dyn KeyedState, t: Tables, kg: KeyGroup, prefix: &[u8], at: Millis) -> Result<Option<Buffered>, OpError> {
    let from = entry_key(prefix, Millis::MIN, 0);
    let mut to = entry_key(prefix, at, u64::MAX);
    to.push(0);
    let mut last: Option<(Vec<u8>, Vec<u8>)> = None;
    state.scan_range(t.records, kg, &from, Some(&to), &mut |k, v| {
        match &mut last {
            Some((lk, lv)) => {
                lk.clear();
                lk.extend_from_slice(k);
                lv.clear();
                lv.extend_from_slice(v);
            }
            None => last = Some((k.to_vec(), v.to_vec())),
        }
        ControlFlow::Continue(())
    })?;
    let Some((entry, value)) = last else { return Ok(None) };
    let (matched, since, raw) = decode_value(&value)?;
    let (_, time, _) = split_entry(&entry)?;
    Ok(Some(Buffered { time: decode_time(time), entry, matched, since, raw }))
}

/// Remove a buffered record from both tables.
pub fn remove(state: &mut dyn KeyedState, t: Tables, kg: KeyGroup, b: &Buffered) -> Result<(), OpError> {
    state.delete(t.records, kg, &b.entry)?;
    state.delete(t.times, kg, &time_key(&b.entry)?)?;
    Ok(())
}

/// Settle the versions of key group `kg` with `from <= time <= bound`, in
/// time order: each leaves the time index and replaces the older versions
/// of its key (all at or before it); one that deletes its key leaves too.
/// What stays of a key at or before `bound` is its latest version, the one
/// valid for every time from it up to the key's next version.
pub fn settle_versions(state: &mut dyn KeyedState, t: Tables, kg: KeyGroup, from: Millis, bound: Millis) -> Result<(), OpError> {
    for k in time_keys(state, t, kg, from, bound)? {
        state.delete(t.times, kg, &k)?;
        let entry = entry_of_time_key(&k)?;
        let (prefix, _, _) = split_entry(&entry)?;
        let mut older = Vec::new();
        state.scan_range(t.records, kg, &entry_key(prefix, Millis::MIN, 0), Some(&entry), &mut |k, _| {
            older.push(k.to_vec());
            ControlFlow::Continue(())
        })?;
        for o in older {
            state.delete(t.records, kg, &o)?;
        }
        let mut value = Vec::new();
        if state.get(t.records, kg, &entry, &mut value)? && value.first() == Some(&1) {
            state.delete(t.records, kg, &entry)?;
        }
    }
    Ok(())
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
            insert(&mut s, T, 1, &p(key), New { time, matched: false, since: Millis::MIN, raw }).unwrap();
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
            insert(&mut s, T, 2, &p(b"k"), New { time, matched: false, since: time, raw: &format!("r{time}") }).unwrap();
        }
        let b = range(&s, T, 2, &p(b"k"), 5, 5).unwrap();
        mark_matched(&mut s, T, 2, &b[0]).unwrap();
        let mut gone = Vec::new();
        remove_up_to(&mut s, T, 2, Millis::MIN, 5, &mut |b| {
            gone.push((b.time, b.matched, b.raw));
            Ok(())
        })
        .unwrap();
        assert_eq!(gone, [(3, false, "r3".to_string()), (5, true, "r5".to_string())]);
        let left = up_to(&s, T, 2, Millis::MIN, 100).unwrap();
        assert_eq!(left.iter().map(|b| (b.time, b.since)).collect::<Vec<_>>(), [(7, 7)]);
        assert_eq!(key_prefix(&left[0].entry).unwrap(), p(b"k"));
        assert_eq!(range(&s, T, 2, &p(b"k"), Millis::MIN, Millis::MAX).unwrap().len(), 1);
        assert_eq!(s.len(T.times), 1);
    }
}

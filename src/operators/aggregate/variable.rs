//! The variable-width accumulators: `count_distinct`, `first`, `last`,
//! `collect` and `approx_count_distinct`.
//!
//! Each keeps a payload: a list of items, each `u32 LE length ++ bytes`,
//! sorted by their bytes (`approx_count_distinct`: a sketch, `hll.rs`). Adding a value merges a one-item list into it;
//! merging two accumulators (sessions) merges their lists. Every function is
//! a pure function of the multiset of its inputs (the sorted union, then
//! cut), so neither arrival order nor parallelism changes a result.
//!
//! - `count_distinct`: its values are entries of their own in the
//!   aggregate's `distinct` table (`distinct.rs`); the payload is the
//!   *external* form `FF FF FF FF ++ u64 LE count ++ i64 LE set id` (20
//!   bytes), or empty (no value yet). No item list starts with `FF FF FF FF`
//!   (an item of 4 GiB), so the form is told apart from the *legacy* one
//!   older builds wrote, still read: the values' key encodings
//!   (`Value::encode_key`: `1` and `1.0` are one value, as for keys) as
//!   items, without duplicates. `distinct::upgrade` moves a legacy list's
//!   items to entries the first time its set is touched.
//! - `first`, `last`, `collect`: the items are entries
//!   `event time (sign-flipped big-endian) ++ JSON text ++ 0x00 ++ value`,
//!   so byte order is (event time, JSON text of the value): JSON text never
//!   holds a 0x00 byte, and a shorter text ends first. `first` keeps the
//!   first item, `last` the last, `collect` the first `max_items`.
//!   `value` is the exact value (`encode_value`), so the output keeps the
//!   input's type (`1.0` stays a float).

use std::cmp::Ordering;

use crate::types::{Millis, Value};

/// What a variable-width slot keeps of the sorted list of its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Distinct,
    First,
    Last,
    Collect(usize),
    Approx,
}

/// The first bytes of an external `count_distinct` payload.
const EXTERNAL: [u8; 4] = [0xFF; 4];
/// The length of an external `count_distinct` payload.
pub const EXTERNAL_LEN: usize = 20;

/// An external `count_distinct` payload: `count` values, kept as entries
/// under set id `id`.
pub fn external(count: u64, id: i64) -> [u8; EXTERNAL_LEN] {
    let mut p = [0u8; EXTERNAL_LEN];
    p[..4].copy_from_slice(&EXTERNAL);
    p[4..12].copy_from_slice(&count.to_le_bytes());
    p[12..].copy_from_slice(&id.to_le_bytes());
    p
}

/// The (count, set id) of an external `count_distinct` payload.
pub fn read_external(p: &[u8]) -> Option<(u64, i64)> {
    if p.len() != EXTERNAL_LEN || p[..4] != EXTERNAL {
        return None;
    }
    Some((u64::from_le_bytes(p[4..12].try_into().ok()?), i64::from_le_bytes(p[12..].try_into().ok()?)))
}

/// Whether `p` is a well-formed payload of a slot of `kind`.
pub fn is_payload(kind: Kind, p: &[u8]) -> bool {
    match kind {
        Kind::Distinct => read_external(p).is_some() || items(p).is_some(),
        Kind::Approx => super::hll::is_valid(p),
        Kind::Collect(_) => read_external(p).is_some() || items(p).is_some(),
        Kind::First | Kind::Last => items(p).is_some(),
    }
}

/// The items of a payload, or None if it is malformed.
pub fn items(mut p: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    while !p.is_empty() {
        let len = u32::from_le_bytes(p.get(..4)?.try_into().ok()?) as usize;
        out.push(p.get(4..4 + len)?);
        p = &p[4 + len..];
    }
    Some(out)
}

fn push_item(item: &[u8], out: &mut Vec<u8>) {
    // An item is one scalar of one record: far below 4 GiB (records are bounded).
    out.extend_from_slice(&(item.len() as u32).to_le_bytes());
    out.extend_from_slice(item);
}

/// Append to `out` the payload holding what `kind` keeps of the items of
/// `a` and `b`; false (and `out` unspecified) if either is malformed.
pub fn merge(kind: Kind, a: &[u8], b: &[u8], out: &mut Vec<u8>) -> bool {
    if kind == Kind::Approx {
        return super::hll::merge(a, b, out);
    }
    if matches!(kind, Kind::Distinct | Kind::Collect(_)) && (read_external(a).is_some() || read_external(b).is_some()) {
        // Entries of their own: `entries::Sets::merge` unites them and sets the payload.
        out.extend_from_slice(a);
        return true;
    }
    let (Some(a), Some(b)) = (items(a), items(b)) else { return false };
    if kind == Kind::Last {
        // The last of the union is the larger of the two lasts.
        if let Some(last) = a.last().into_iter().chain(b.last()).max() {
            push_item(last, out);
        }
        return true;
    }
    let limit = match kind {
        Kind::First => 1,
        Kind::Collect(n) => n,
        Kind::Distinct | Kind::Last | Kind::Approx => usize::MAX,
    };
    let (mut i, mut j, mut kept) = (0, 0, 0);
    while kept < limit && (i < a.len() || j < b.len()) {
        let next = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => match x.cmp(y) {
                Ordering::Less => {
                    i += 1;
                    x
                }
                Ordering::Greater => {
                    j += 1;
                    y
                }
                Ordering::Equal if kind == Kind::Distinct => {
                    i += 1;
                    j += 1;
                    x
                }
                Ordering::Equal => {
                    i += 1;
                    x
                }
            },
            (Some(x), None) => {
                i += 1;
                x
            }
            (None, Some(y)) => {
                j += 1;
                y
            }
            (None, None) => break,
        };
        push_item(next, out);
        kept += 1;
    }
    true
}

/// The item a value adds to a slot of `kind`, framed as a one-item payload
/// (not called for `Approx`, whose payload is a sketch).
pub fn single(kind: Kind, v: &Value, ts: Millis, out: &mut Vec<u8>) {
    let mut item = Vec::new();
    match kind {
        Kind::Distinct | Kind::Approx => v.encode_key(&mut item),
        Kind::First | Kind::Last | Kind::Collect(_) => {
            item.extend_from_slice(&((ts as u64) ^ (1 << 63)).to_be_bytes());
            v.write_json(&mut item);
            item.push(0);
            encode_value(v, &mut item);
        }
    }
    out.clear();
    push_item(&item, out);
}

/// The output of a slot of `kind` over the (well-formed) `payload`.
pub fn finish(kind: Kind, payload: &[u8]) -> Value {
    if let (Kind::Distinct, Some((count, _))) = (kind, read_external(payload)) {
        return Value::Int(count.min(i64::MAX as u64) as i64);
    }
    if kind == Kind::Approx {
        return Value::Int(super::hll::estimate(payload).min(i64::MAX as u64) as i64);
    }
    let items = items(payload).unwrap_or_default();
    match kind {
        Kind::Distinct | Kind::Approx => Value::Int(items.len().min(i64::MAX as usize) as i64),
        Kind::First | Kind::Last => items.first().and_then(|e| entry(e)).map_or(Value::Null, |(_, v)| v),
        Kind::Collect(_) => {
            let mut json = String::from("[");
            for (i, (text, _)) in items.iter().filter_map(|e| entry(e)).enumerate() {
                if i > 0 {
                    json.push(',');
                }
                json.push_str(text);
            }
            json.push(']');
            Value::Str(json.into())
        }
    }
}

/// An entry's JSON text and value.
fn entry(e: &[u8]) -> Option<(&str, Value)> {
    let rest = e.get(8..)?;
    let nul = rest.iter().position(|&b| b == 0)?;
    Some((std::str::from_utf8(&rest[..nul]).ok()?, decode_value(&rest[nul + 1..])?))
}

// Exact value tags: the value's own type, unlike key encodings (`1.0` is a Float).
const NULL: u8 = 0;
const BOOL: u8 = 1;
const INT: u8 = 2;
const FLOAT: u8 = 3;
const DECIMAL: u8 = 4;
const STR: u8 = 5;

/// A value as tag ++ payload (the rest of the bytes).
fn encode_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(NULL),
        Value::Bool(b) => out.extend_from_slice(&[BOOL, *b as u8]),
        Value::Int(i) => {
            out.push(INT);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Float(f) => {
            out.push(FLOAT);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Decimal(d) => {
            out.push(DECIMAL);
            out.extend_from_slice(d.as_bytes());
        }
        Value::Str(s) => {
            out.push(STR);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

fn decode_value(b: &[u8]) -> Option<Value> {
    let (&tag, rest) = b.split_first()?;
    let text = || std::str::from_utf8(rest).ok().map(Box::<str>::from);
    let eight = || rest.try_into().ok().map(u64::from_le_bytes);
    Some(match tag {
        NULL if rest.is_empty() => Value::Null,
        BOOL if rest.len() == 1 => Value::Bool(rest[0] != 0),
        INT => Value::Int(eight()? as i64),
        FLOAT => Value::Float(f64::from_bits(eight()?)),
        DECIMAL => Value::Decimal(text()?),
        STR => Value::Str(text()?),
        _ => return None,
    })
}

//! The variable-width accumulators: `count_distinct`, `first`, `last` and
//! `collect`.
//!
//! Each keeps a payload: a list of items, each `u32 LE length ++ bytes`,
//! sorted by their bytes. Adding a value merges a one-item list into it;
//! merging two accumulators (sessions) merges their lists. Every function is
//! a pure function of the multiset of its inputs (the sorted union, then
//! cut), so neither arrival order nor parallelism changes a result.
//!
//! - `count_distinct`: the items are the values' key encodings
//!   (`Value::encode_key`: `1` and `1.0` are one value, as for keys), without
//!   duplicates. The values are stored, not hashes: the count is exact.
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
        Kind::Distinct | Kind::Last => usize::MAX,
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

/// The item a value adds to a slot of `kind`, framed as a one-item payload.
pub fn single(kind: Kind, v: &Value, ts: Millis, out: &mut Vec<u8>) {
    let mut item = Vec::new();
    match kind {
        Kind::Distinct => v.encode_key(&mut item),
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
    let items = items(payload).unwrap_or_default();
    match kind {
        Kind::Distinct => Value::Int(items.len().min(i64::MAX as usize) as i64),
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

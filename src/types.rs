//! Shared vocabulary: values, records, keys, key groups and time.
//!
//! Everything here is plain data, used by every layer from the plan down to
//! state. Nothing here knows about YAML, tokio or files.

use std::fmt;
use std::io::Write;

/// Milliseconds since the Unix epoch (event time and processing time alike).
pub type Millis = i64;

/// The watermark before any data: nothing is known yet.
pub const MIN_WATERMARK: Millis = i64::MIN;
/// The watermark at the end of bounded input: every window may fire.
pub const MAX_WATERMARK: Millis = i64::MAX;

/// A key group: the unit in which keyed state is partitioned, snapshotted and
/// redistributed. `kg = stable_hash(key) % max_parallelism`.
pub type KeyGroup = u16;

/// A scalar field value, as parsed from JSON once at the source.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Box<str>),
}

impl Value {
    /// The value as a number, or None for null and non-numbers.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// Append the JSON text of this value.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Value::Null => out.extend_from_slice(b"null"),
            Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Value::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Value::Float(f) if f.is_finite() => {
                // serde_json prints the shortest text that reads back as the same f64.
                let _ = serde_json::to_writer(&mut *out, f);
            }
            Value::Float(_) => out.extend_from_slice(b"null"),
            Value::Str(s) => {
                let _ = serde_json::to_writer(&mut *out, &**s);
            }
        }
    }

    /// Append a stable, unambiguous binary encoding of this value, used for
    /// keys (hashing, state keys). Never change it: state written by one
    /// version must be found by the next.
    pub fn encode_key(&self, out: &mut Vec<u8>) {
        match self {
            Value::Null => out.push(0),
            Value::Bool(b) => out.extend_from_slice(&[1, *b as u8]),
            Value::Int(i) => {
                out.push(2);
                out.extend_from_slice(&i.to_be_bytes());
            }
            Value::Float(f) => {
                // Integral floats key like ints, so `1` and `1.0` are one key.
                if f.fract() == 0.0 && f.abs() < 9.0e15 {
                    out.push(2);
                    out.extend_from_slice(&(*f as i64).to_be_bytes());
                } else {
                    out.push(3);
                    out.extend_from_slice(&f.to_bits().to_be_bytes());
                }
            }
            Value::Str(s) => {
                out.push(4);
                out.extend_from_slice(&(s.len() as u32).to_be_bytes());
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = Vec::new();
        self.write_json(&mut buf);
        f.write_str(&String::from_utf8_lossy(&buf))
    }
}

/// One record travelling through the dataflow.
///
/// `fields` holds only the fields the pipeline uses, in the order of the
/// stream's schema (see `plan::Schema`); `raw` is the record's JSON text,
/// which sinks write unchanged (pass-through without re-serialising).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub fields: Vec<Value>,
    pub raw: Box<str>,
    pub event_time: Option<Millis>,
    /// Set by hash routing; read by the keyed operator that receives it.
    pub key_group: KeyGroup,
}

impl Record {
    pub fn new(fields: Vec<Value>, raw: Box<str>, event_time: Option<Millis>) -> Self {
        Record { fields, raw, event_time, key_group: 0 }
    }
}

/// Parse an RFC 3339 timestamp (any UTC offset) into epoch milliseconds.
pub fn parse_rfc3339_ms(s: &str) -> Result<Millis, String> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("`{s}` is not an RFC 3339 timestamp: {e}"))?;
    Ok((t.unix_timestamp_nanos() / 1_000_000) as Millis)
}

/// Encode the key made of `indices` of `fields` into `out` (cleared first).
pub fn encode_key(fields: &[Value], indices: &[usize], out: &mut Vec<u8>) {
    out.clear();
    for &i in indices {
        fields[i].encode_key(out);
    }
}

/// Decode a key written by `encode_key` back into its values.
///
/// Integral floats come back as `Int` (they were keyed as ints). Malformed
/// trailing bytes end the decoding: keys written by `encode_key` never have any.
pub fn decode_key(key: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    decode_key_into(key, &mut out);
    out
}

/// Append the values of an encoded key to `out`; false if `key` is malformed
/// (the values decoded before the bad byte are kept).
pub fn decode_key_into(mut key: &[u8], out: &mut Vec<Value>) -> bool {
    fn be8(b: &[u8]) -> Option<[u8; 8]> {
        b.get(..8).and_then(|s| s.try_into().ok())
    }
    while let Some((&tag, rest)) = key.split_first() {
        let (value, used) = match tag {
            0 => (Value::Null, 0),
            1 => match rest.first() {
                Some(&b) => (Value::Bool(b != 0), 1),
                None => return false,
            },
            2 => match be8(rest) {
                Some(b) => (Value::Int(i64::from_be_bytes(b)), 8),
                None => return false,
            },
            3 => match be8(rest) {
                Some(b) => (Value::Float(f64::from_bits(u64::from_be_bytes(b))), 8),
                None => return false,
            },
            4 => {
                let Some(len) = rest.get(..4).and_then(|s| <[u8; 4]>::try_from(s).ok()) else { return false };
                let len = u32::from_be_bytes(len) as usize;
                let Some(text) = rest.get(4..4 + len) else { return false };
                match std::str::from_utf8(text) {
                    Ok(t) => (Value::Str(t.into()), 4 + len),
                    Err(_) => return false,
                }
            }
            _ => return false,
        };
        out.push(value);
        key = &rest[used..];
    }
    true
}

/// The fixed key hash. xxh3-64 with seed 0: stable across versions, machines
/// and endianness, so state can be restored anywhere at any parallelism.
pub fn stable_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The key group of an encoded key.
pub fn key_group_of(key: &[u8], max_parallelism: u16) -> KeyGroup {
    (stable_hash(key) % max_parallelism as u64) as KeyGroup
}

/// The subtask that owns a key group (Flink's contiguous-range assignment).
pub fn subtask_for_key_group(kg: KeyGroup, parallelism: u16, max_parallelism: u16) -> u16 {
    ((kg as u32 * parallelism as u32) / max_parallelism as u32) as u16
}

/// The contiguous range of key groups owned by `subtask`, as `start..end`.
pub fn key_group_range(subtask: u16, parallelism: u16, max_parallelism: u16) -> std::ops::Range<KeyGroup> {
    let (i, p, m) = (subtask as u32, parallelism as u32, max_parallelism as u32);
    let start = (i * m).div_ceil(p);
    let end = ((i + 1) * m).div_ceil(p);
    start as KeyGroup..end as KeyGroup
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_hash_constant_vectors() {
        // These numbers are a contract: changing them orphans all saved state.
        assert_eq!(stable_hash(b""), 0x2d06800538d394c2);
        let mut k = Vec::new();
        encode_key(&[Value::Str("user-1".into())], &[0], &mut k);
        assert_eq!(k, b"\x04\x00\x00\x00\x06user-1");
        assert_eq!(key_group_of(&k, 128), KG_USER_1);
        encode_key(&[Value::Int(42)], &[0], &mut k);
        assert_eq!(key_group_of(&k, 128), KG_INT_42);
    }
    const KG_USER_1: KeyGroup = 52;
    const KG_INT_42: KeyGroup = 19;

    #[test]
    fn key_group_ranges_partition_and_agree_with_assignment() {
        for m in [1u16, 7, 128, 1000] {
            for p in 1..=m.min(16) {
                let mut next = 0;
                for s in 0..p {
                    let r = key_group_range(s, p, m);
                    assert_eq!(r.start, next, "m={m} p={p} s={s}");
                    next = r.end;
                    for kg in r {
                        assert_eq!(subtask_for_key_group(kg, p, m), s, "m={m} p={p} kg={kg}");
                    }
                }
                assert_eq!(next, m);
            }
        }
    }

    #[test]
    fn decode_key_round_trips() {
        let values = vec![
            Value::Null,
            Value::Bool(true),
            Value::Int(-7),
            Value::Float(2.5),
            Value::Str("ü\"x".into()),
            Value::Str("".into()),
            Value::Int(i64::MIN),
        ];
        let mut k = Vec::new();
        encode_key(&values, &(0..values.len()).collect::<Vec<_>>(), &mut k);
        assert_eq!(decode_key(&k), values);
        // Integral floats were keyed as ints.
        encode_key(&[Value::Float(3.0)], &[0], &mut k);
        assert_eq!(decode_key(&k), vec![Value::Int(3)]);
        // Malformed input never panics.
        let mut out = Vec::new();
        assert!(!decode_key_into(&[2, 0, 0], &mut out));
        assert!(!decode_key_into(&[4, 0, 0, 0, 9, b'a'], &mut out));
        assert!(!decode_key_into(&[9], &mut out));
        assert!(decode_key_into(&[], &mut out));
    }

    #[test]
    fn rfc3339_with_offsets() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Ok(1500));
        assert_eq!(parse_rfc3339_ms("1970-01-01T05:30:00+05:30"), Ok(0));
        assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59Z"), Ok(-1000));
        assert!(parse_rfc3339_ms("yesterday").is_err());
    }

    #[test]
    fn integral_floats_key_like_ints() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        Value::Int(3).encode_key(&mut a);
        Value::Float(3.0).encode_key(&mut b);
        assert_eq!(a, b);
    }
}

//! Shared vocabulary: values, records, keys, key groups and time.
//!
//! Everything here is plain data, used by every layer from the plan down to
//! state. Nothing here knows about YAML, tokio or files.

use std::fmt;
use std::io::Write;

/// A checkpoint (or savepoint) id. Strictly increasing across restarts.
pub type CheckpointId = u64;

/// A bundle: a group of subtasks sharing one state backend and one arbiter.
pub type BundleId = u32;

/// What a snapshot is: a checkpoint (the runtime's, retained by policy) or
/// a savepoint (the user's, never deleted by weir).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Checkpoint,
    Savepoint,
}

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
    /// A number neither `Int` nor `Float` holds exactly (an integer beyond
    /// i64, or more digits than an f64 keeps), as its canonical decimal text
    /// (see `number`).
    Decimal(Box<str>),
    Str(Box<str>),
}

impl Value {
    /// The value as a number, or None for null and non-numbers.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            Value::Decimal(d) => d.parse().ok(),
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
            // JSON has no infinity: the strings of the proto3 JSON mapping.
            Value::Float(f) if f.is_nan() => out.extend_from_slice(b"\"NaN\""),
            Value::Float(f) if *f > 0.0 => out.extend_from_slice(b"\"Infinity\""),
            Value::Float(_) => out.extend_from_slice(b"\"-Infinity\""),
            Value::Decimal(d) => out.extend_from_slice(d.as_bytes()),
            Value::Str(s) => {
                let _ = serde_json::to_writer(&mut *out, &**s);
            }
        }
    }

    /// Append a stable, unambiguous binary encoding of this value, used for
    /// keys (hashing, state keys). Never change the bytes of a value: state
    /// written by one version must be found by the next.
    ///
    /// Numbers encode their exact value, a `Float` standing for its shortest
    /// round-trip decimal (how it prints): an integer value that fits an i64
    /// is tag 2 whatever its form (`1`, `1.0`, `9e15`), other floats tag 3
    /// (f64 bits), other numbers tag 5 (canonical text).
    pub fn encode_key(&self, out: &mut Vec<u8>) {
        fn int(i: i64, out: &mut Vec<u8>) {
            out.push(2);
            out.extend_from_slice(&i.to_be_bytes());
        }
        fn text(tag: u8, s: &str, out: &mut Vec<u8>) {
            out.push(tag);
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        match self {
            Value::Null => out.push(0),
            Value::Bool(b) => out.extend_from_slice(&[1, *b as u8]),
            Value::Int(i) => int(*i, out),
            Value::Float(f) => match crate::number::f64_as_i64(*f) {
                Some(i) => int(i, out),
                None => {
                    out.push(3);
                    out.extend_from_slice(&f.to_bits().to_be_bytes());
                }
            },
            Value::Decimal(d) => match crate::number::decimal_key(d) {
                Some(Ok(i)) => int(i, out),
                Some(Err(x)) => Value::Float(x).encode_key(out),
                None => text(5, d, out),
            },
            Value::Str(s) => text(4, s, out),
        }
    }
}

impl From<crate::number::Number> for Value {
    fn from(n: crate::number::Number) -> Value {
        use crate::number::Number;
        match n {
            Number::Int(i) => Value::Int(i),
            Number::Float(f) => Value::Float(f),
            Number::Decimal(d) => Value::Decimal(d),
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
    /// The watermark of the input split (file, Kafka partition, datagen
    /// row sequence) this record was read from, as it stood with this
    /// record: a source sets it, operators pass it on. Lateness is decided
    /// against it (or the operator's own watermark, if that is higher), so
    /// which records are late is a function of the input, not of when
    /// watermarks arrived. `MIN_WATERMARK`: none (results of aggregates).
    pub split_watermark: Millis,
}

impl Record {
    pub fn new(fields: Vec<Value>, raw: Box<str>, event_time: Option<Millis>) -> Self {
        Record { fields, raw, event_time, key_group: 0, split_watermark: MIN_WATERMARK }
    }

    /// The watermark this record's lateness is judged by at an operator
    /// whose own watermark is `watermark`. The operator's watermark is at
    /// most the split's (it is a minimum over splits, and what a split
    /// promised reaches the operator no earlier than the split's records),
    /// so normally this is the split's; it is higher only after an input
    /// was idle, where no determinism is promised.
    pub fn lateness_watermark(&self, watermark: Millis) -> Millis {
        self.split_watermark.max(watermark)
    }
}

/// Parse an RFC 3339 timestamp (any UTC offset) into epoch milliseconds.
pub fn parse_rfc3339_ms(s: &str) -> Result<Millis, String> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("`{s}` is not an RFC 3339 timestamp: {e}"))?;
    // Floor, like Java's `toEpochMilli`: 23:59:59.9995 before 1970 is -1 ms, not 0.
    let ms = t.unix_timestamp_nanos().div_euclid(1_000_000);
    Millis::try_from(ms).map_err(|_| event_time_out_of_range(s)).and_then(check_event_time)
}

/// The first and last event time weir accepts (RFC 3339's years 0000 to
/// 9999, in epoch ms). Far from the ends of i64, so windows, watermarks and
/// lateness never overflow; a record outside is a bad record.
pub const MIN_EVENT_TIME: Millis = -62_167_219_200_000;
pub const MAX_EVENT_TIME: Millis = 253_402_300_799_999;
/// The longest time span a window, lateness or out-of-orderness may cover:
/// the whole event-time range.
pub const MAX_TIME_SPAN: Millis = MAX_EVENT_TIME - MIN_EVENT_TIME + 1;

/// `ts` if it is in the event-time range, else why not.
pub fn check_event_time(ts: Millis) -> Result<Millis, String> {
    if (MIN_EVENT_TIME..=MAX_EVENT_TIME).contains(&ts) {
        Ok(ts)
    } else {
        Err(event_time_out_of_range(ts))
    }
}

/// Why an event time (shown as written) is refused.
pub fn event_time_out_of_range(shown: impl fmt::Display) -> String {
    format!("event time {shown} is outside the supported range {MIN_EVENT_TIME}..={MAX_EVENT_TIME} ms (years 0000 to 9999)")
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
/// Integral numbers come back as `Int` (they were keyed as ints). Malformed
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
            4 | 5 => {
                let Some(len) = rest.get(..4).and_then(|s| <[u8; 4]>::try_from(s).ok()) else { return false };
                let len = u32::from_be_bytes(len) as usize;
                let Some(text) = rest.get(4..4 + len) else { return false };
                match std::str::from_utf8(text) {
                    Ok(t) if tag == 4 => (Value::Str(t.into()), 4 + len),
                    Ok(t) => (Value::Decimal(t.into()), 4 + len),
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

/// The key groups a process deals to the subtasks of a keyed operator: all
/// of them (one instance), or, as instance I of a cluster of N, its own
/// contiguous share `key_group_range(I, N, max_parallelism)`. The share is
/// cut as if the subtasks of all N instances were one operator of
/// N × parallelism subtasks (instance I's are I×p .. I×p+p-1), so every
/// subtask of every instance gets about the same number of key groups and
/// the union of an instance's subtask ranges is exactly its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGroupShare {
    pub instance: u16,
    pub instances: u16,
}

impl KeyGroupShare {
    /// One process owns every key group.
    pub const WHOLE: KeyGroupShare = KeyGroupShare { instance: 0, instances: 1 };

    /// The key groups of `subtask` of `parallelism` in this share.
    pub fn range(self, subtask: u16, parallelism: u16, max_parallelism: u16) -> std::ops::Range<KeyGroup> {
        let total = self.instances as u64 * parallelism as u64;
        let i = self.instance as u64 * parallelism as u64 + subtask as u64;
        let m = max_parallelism as u64;
        let start = (i * m).div_ceil(total);
        let end = ((i + 1) * m).div_ceil(total);
        start as KeyGroup..end as KeyGroup
    }

    /// The subtask of `parallelism` that owns key group `kg` of this share
    /// (a key group outside the share, which never reaches this process's
    /// keyed operators, goes to the nearest end).
    pub fn subtask(self, kg: KeyGroup, parallelism: u16, max_parallelism: u16) -> u16 {
        let p = parallelism as u64;
        let total = self.instances as u64 * p;
        let global = kg as u64 * total / max_parallelism.max(1) as u64;
        let first = self.instance as u64 * p;
        global.clamp(first, first + p.max(1) - 1).saturating_sub(first) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_share_is_cut_evenly_among_its_subtasks_and_agrees_with_routing() {
        for m in [1u16, 7, 12, 128] {
            for n in 1..=m.min(5) {
                for p in 1..=6u16 {
                    let mut next = 0;
                    for i in 0..n {
                        let share = KeyGroupShare { instance: i, instances: n };
                        let own = key_group_range(i, n, m);
                        assert_eq!(own.start, next, "m={m} n={n} i={i}");
                        let mut sub_next = own.start;
                        for s in 0..p {
                            let r = share.range(s, p, m);
                            assert_eq!(r.start, sub_next, "m={m} n={n} i={i} p={p} s={s}");
                            sub_next = r.end;
                            // No subtask holds more than its fair share, rounded up.
                            assert!(r.len() as u32 <= (m as u32).div_ceil(n as u32 * p as u32), "m={m} n={n} p={p}: {r:?}");
                            for kg in r {
                                assert_eq!(share.subtask(kg, p, m), s, "m={m} n={n} i={i} p={p} kg={kg}");
                            }
                        }
                        assert_eq!(sub_next, own.end, "the subtasks of instance {i} cover its share exactly");
                        next = own.end;
                    }
                    assert_eq!(next, m);
                }
            }
        }
        // One instance: the ranges and routing of a single process.
        for s in 0..3 {
            assert_eq!(KeyGroupShare::WHOLE.range(s, 3, 128), key_group_range(s, 3, 128));
        }
        for kg in 0..128 {
            assert_eq!(KeyGroupShare::WHOLE.subtask(kg, 3, 128), subtask_for_key_group(kg, 3, 128));
        }
        // A key group outside the share goes to an end, never out of range.
        let share = KeyGroupShare { instance: 1, instances: 3 };
        assert_eq!((share.subtask(0, 2, 12), share.subtask(11, 2, 12)), (0, 1));
    }

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
            Value::Decimal("18446744073709551614".into()),
            Value::Decimal("1.0000000000000000001e-1".into()),
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
    fn rfc3339_fractions_floor_before_1970() {
        // Issue 18 #9: truncating toward zero put 23:59:59.9995 in [0, 1).
        assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59.9995Z"), Ok(-1));
        assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59.999999999Z"), Ok(-1));
        assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59.001Z"), Ok(-999));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00.0005Z"), Ok(0));
    }

    #[test]
    fn event_times_outside_years_0000_to_9999_are_refused() {
        assert_eq!(parse_rfc3339_ms("0000-01-01T00:00:00Z"), Ok(MIN_EVENT_TIME));
        assert_eq!(parse_rfc3339_ms("9999-12-31T23:59:59.999Z"), Ok(MAX_EVENT_TIME));
        let err = parse_rfc3339_ms("0000-01-01T00:00:00+00:01").unwrap_err();
        assert!(err.contains("outside the supported range"), "{err}");
        assert!(check_event_time(i64::MIN).is_err());
        assert!(check_event_time(MAX_EVENT_TIME + 1).is_err());
        assert!(MIN_WATERMARK < MIN_EVENT_TIME, "no record in range is late at the initial watermark");
    }

    fn number_key(text: &str) -> Vec<u8> {
        let mut k = Vec::new();
        Value::from(crate::number::parse(text).unwrap_or_else(|| panic!("{text}"))).encode_key(&mut k);
        k
    }

    #[test]
    fn number_keys_compare_by_exact_value() {
        // Issue 18 #6: integers beyond i64 collapsed into one float key, and
        // `9e15` differed from `9000000000000000` while `1` and `1.0` were one key.
        assert_eq!(number_key("9000000000000000"), number_key("9e15"));
        assert_eq!(number_key("1"), number_key("1.0"));
        assert_eq!(number_key("-0"), number_key("0.0"));
        for (a, b) in [
            ("9223372036854775808", "9223372036854775809"),
            ("9223372036854775809", "9223372036854775810"),
            ("18446744073709551614", "18446744073709551615"),
            ("18446744073709551614", "18446744073709551616"),
            ("12345678901234567891", "12345678901234567890"),
            ("0.1", "0.10000000000000000001"),
        ] {
            assert_ne!(number_key(a), number_key(b), "{a} vs {b}");
        }
        assert_eq!(number_key("9223372036854775808"), number_key("9.223372036854775808e18"));
        assert_eq!(number_key("1152921504606846976"), number_key("1152921504606846976.0"));
        assert_eq!(number_key("1152921504606847000"), number_key("1.152921504606847e18"), "a float is its shortest decimal");
        assert_eq!(number_key("18446744073709551614"), number_key("1.8446744073709551614e19"));
        assert_eq!(number_key("100000000000000000000"), number_key("1e20"), "an integer Decimal that is also the f64 1e20");
        // Decoding gives the normalised value: integers as integers, the rest exact.
        assert_eq!(decode_key(&number_key("9e15")), vec![Value::Int(9_000_000_000_000_000)]);
        assert_eq!(decode_key(&number_key("18446744073709551614")), vec![Value::Decimal("18446744073709551614".into())]);
    }

    #[test]
    fn ordinary_keys_keep_their_bytes() {
        // State written before exact number keys must still be found.
        assert_eq!(number_key("42"), [2, 0, 0, 0, 0, 0, 0, 0, 42]);
        assert_eq!(number_key("3.0"), number_key("3"));
        assert_eq!(number_key("-8999999999999999.0"), number_key("-8999999999999999"));
        assert_eq!(number_key("2.5"), [&[3u8][..], &2.5f64.to_bits().to_be_bytes()].concat());
        assert_eq!(number_key("1e300"), [&[3u8][..], &1e300f64.to_bits().to_be_bytes()].concat());
        let mut k = Vec::new();
        Value::Float(f64::INFINITY).encode_key(&mut k);
        assert_eq!(k, [&[3u8][..], &f64::INFINITY.to_bits().to_be_bytes()].concat());
    }

    #[test]
    fn integral_floats_key_like_ints() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        Value::Int(3).encode_key(&mut a);
        Value::Float(3.0).encode_key(&mut b);
        assert_eq!(a, b);
    }
}

//! JSON-lines parsing with projection: each line is parsed once, and only the
//! fields the pipeline uses are kept as values; the line itself travels on as
//! the record's raw text for pass-through sinks.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::path::{descend, FieldPath};
use crate::types::{check_event_time, event_time_out_of_range, parse_rfc3339_ms, Millis, Record, Value, MAX_EVENT_TIME, MIN_EVENT_TIME};

/// What the pipeline needs of one projected field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FieldNeed {
    /// A key field: must be present (it may be `null`).
    pub required: bool,
    /// An aggregated field: must be a number or null when present.
    pub numeric: bool,
    /// Only whether it is present and not null matters (every use is a
    /// `count` of the field): an array or object counts like any value.
    pub presence: bool,
}

/// A parser for one source's records.
#[derive(Debug, Clone)]
pub struct JsonParser {
    fields: Vec<(String, FieldNeed)>,
    event_time: Option<String>,
    /// Per field: its top-level key, when its path is one key.
    keys: Vec<Option<String>>,
    /// The event time's top-level key, when its path is one key.
    time_key: Option<String>,
    /// Paths into nested values: the field slot (None: the event time) and the path.
    nested: Vec<(Option<usize>, FieldPath)>,
    /// Top-level keys read leniently after the fields (see `with_extras`).
    extra_values: Vec<String>,
    extra_presence: Vec<String>,
    /// `extras_tag` of those.
    extras_tag: i64,
}

/// The tag that heads the extras of a record (see `JsonParser::with_extras`):
/// a hash of the keys, so that a reader finds out whether a record holds the
/// extras it expects (a record restored from a checkpoint taken before the
/// pipeline changed may hold others).
pub fn extras_tag(values: &[String], presence: &[String]) -> i64 {
    // FNV-1a: the same for the same keys in every run and version.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (kind, keys) in [(b'v', values), (b'p', presence)] {
        for k in keys {
            for b in [kind].iter().chain(k.as_bytes()).chain(&[0xff]) {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    h as i64
}

impl JsonParser {
    /// Field names and the event-time field are field paths
    /// (`crate::format::path`), validated by `config`; a name that is not a
    /// path is taken as one top-level key.
    pub fn new(fields: Vec<(String, FieldNeed)>, event_time: Option<String>) -> Self {
        let path = |name: &str| FieldPath::parse(name).unwrap_or_else(|_| FieldPath::key(name));
        let mut nested = Vec::new();
        let mut keys = Vec::with_capacity(fields.len());
        for (i, (name, _)) in fields.iter().enumerate() {
            let p = path(name);
            keys.push(p.is_top_level().then(|| p.head().to_string()));
            if !p.is_top_level() {
                nested.push((Some(i), p));
            }
        }
        let time_key = event_time.as_deref().map(path).and_then(|p| {
            if p.is_top_level() {
                return Some(p.head().to_string());
            }
            nested.push((None, p));
            None
        });
        JsonParser { fields, event_time, keys, time_key, nested, extra_values: Vec::new(), extra_presence: Vec::new(), extras_tag: 0 }
    }

    /// Also read, after the fields, the top-level keys `values` (each a
    /// scalar as the fields are read; null when absent, null or not a
    /// scalar), then whether each key of `presence` is present (a bool),
    /// all after a tag (`extras_tag`, an int). Never an error: for the
    /// values `filter` and `map` evaluate and pass on, so that the record is
    /// scanned once (see `plan::Extras`).
    pub fn with_extras(mut self, values: Vec<String>, presence: Vec<String>) -> Self {
        self.extras_tag = extras_tag(&values, &presence);
        self.extra_values = values;
        self.extra_presence = presence;
        self
    }

    /// The number of values after the fields: the tag and the extras.
    fn extras_len(&self) -> usize {
        match self.extra_values.len() + self.extra_presence.len() {
            0 => 0,
            n => n + 1,
        }
    }

    /// Whether `key` is one of the extras.
    fn is_extra(&self, key: &str) -> bool {
        (!self.extra_values.is_empty() || !self.extra_presence.is_empty())
            && (self.extra_values.iter().any(|k| k == key) || self.extra_presence.iter().any(|k| k == key))
    }

    /// Store the extras of `key` (`v`: its scalar value; None if it has none).
    fn store_extras(&self, key: &str, v: Option<Value>, values: &mut [Value]) {
        let base = self.fields.len() + 1;
        if let Some(j) = self.extra_values.iter().position(|k| k == key) {
            values[base + j] = v.unwrap_or(Value::Null);
        }
        if let Some(j) = self.extra_presence.iter().position(|k| k == key) {
            values[base + self.extra_values.len() + j] = Value::Bool(true);
        }
    }

    /// Parse one line into a record, or say why it is bad.
    pub fn parse(&self, line: &str) -> Result<Record, String> {
        self.parse_with(line, true)
    }

    /// The projected values of `line` alone, checked as `parse` checks them
    /// (without copying the line into a record).
    pub fn fields(&self, line: &str) -> Result<Vec<Value>, String> {
        self.read(line, true).map(|(fields, _)| fields)
    }

    fn parse_with(&self, line: &str, use_scanner: bool) -> Result<Record, String> {
        let (fields, event_time) = self.read(line, use_scanner)?;
        Ok(Record::new(fields, line.into(), event_time))
    }

    /// The projected values and the event time of `line`.
    fn read(&self, line: &str, use_scanner: bool) -> Result<(Vec<Value>, Option<Millis>), String> {
        // Not `vec![Value::Null; n]`: that clones the element (a call per
        // line even when nothing is projected).
        let n = self.fields.len() + self.extras_len();
        let mut fields = Vec::with_capacity(n);
        fields.resize_with(n, || Value::Null);
        let mut seen = Seen::new(self.fields.len());
        let mut event_time = None;
        // The scanner takes the common flat lines; anything else (escapes,
        // nesting, errors) is parsed again by serde_json.
        if !use_scanner || scan(self, line, &mut fields, &mut seen, &mut event_time).is_none() {
            fields.fill(Value::Null);
            seen = Seen::new(self.fields.len());
            event_time = None;
            let mut de = serde_json::Deserializer::from_str(line);
            let seed = RecordSeed { parser: self, values: &mut fields, seen: &mut seen, event_time: &mut event_time };
            seed.deserialize(&mut de).map_err(|e| format!("invalid JSON: {e}"))?;
            de.end().map_err(|e| format!("invalid JSON: {e}"))?;
        }
        if self.extras_len() > 0 {
            fields[self.fields.len()] = Value::Int(self.extras_tag);
            for v in &mut fields[self.fields.len() + 1 + self.extra_values.len()..] {
                if *v == Value::Null {
                    *v = Value::Bool(false);
                }
            }
        }

        for (i, ((name, need), v)) in self.fields.iter().zip(&fields).enumerate() {
            if seen.get(i) {
                if need.numeric && !matches!(v, Value::Int(_) | Value::Float(_) | Value::Decimal(_) | Value::Null) {
                    return Err(format!("field `{name}` must be a number, found {v}"));
                }
            } else if need.required {
                return Err(format!("missing key field `{name}`"));
            }
        }
        if let Some(name) = &self.event_time {
            match event_time {
                Some(Ok(t)) => return Ok((fields, Some(t))),
                Some(Err(e)) => return Err(format!("event-time field `{name}`: {e}")),
                None => return Err(format!("missing event-time field `{name}`")),
            }
        }
        Ok((fields, None))
    }

    /// The fast scanner alone, for flat lines (top-level scalars, strings
    /// without escapes): the projected values and whether each was present;
    /// None where it declines (nested values, escapes, invalid JSON), and
    /// for projections of nested paths.
    pub fn scan_flat(&self, line: &str) -> Option<(Vec<Value>, Vec<bool>)> {
        if !self.nested.is_empty() {
            return None;
        }
        let mut fields = vec![Value::Null; self.fields.len() + self.extras_len()];
        let mut seen = Seen::new(self.fields.len());
        let mut event_time = None;
        scan(self, line, &mut fields, &mut seen, &mut event_time)?;
        fields.truncate(self.fields.len());
        let present = (0..self.fields.len()).map(|i| seen.get(i)).collect();
        Some((fields, present))
    }

    /// The projection slot of a top-level key, and whether it is the event-time field.
    fn lookup(&self, key: &str) -> (Option<usize>, bool) {
        let slot = self.keys.iter().position(|k| k.as_deref() == Some(key));
        (slot, self.time_key.as_deref() == Some(key))
    }

    /// Whether a nested path starts at top-level key `key`.
    fn is_head(&self, key: &str) -> bool {
        !self.nested.is_empty() && self.nested.iter().any(|(_, p)| p.head() == key)
    }

    /// The value of field `name` (projection `slot`) from its raw text: a
    /// scalar, or for a field only counted (`FieldNeed::presence`) a
    /// marker (`true`) for any other value.
    fn value_of(&self, raw: &str, name: &str, slot: Option<usize>, is_time: bool) -> Result<Value, String> {
        scalar::<serde_json::Error>(raw, name).map_err(|e| e.to_string()).or_else(|e| match slot {
            Some(i) if !is_time && self.fields[i].1.presence => Ok(Value::Bool(true)),
            _ => Err(e),
        })
    }

    /// A member for `slot` and/or the event time: of duplicate members the
    /// last counts, so what an earlier one stored (or its error) is
    /// replaced, by nothing if this one lacks the field.
    #[allow(clippy::too_many_arguments)]
    fn replace(
        &self,
        slot: Option<usize>,
        is_time: bool,
        v: Result<Option<Value>, String>,
        values: &mut [Value],
        seen: &mut Seen,
        event_time: &mut Option<Result<Millis, String>>,
        pending: &mut Vec<(Option<usize>, bool, String)>,
    ) {
        pending.retain(|(s, t, _)| !((slot.is_some() && *s == slot) || (is_time && *t)));
        if is_time {
            *event_time = None;
        }
        if let Some(i) = slot {
            values[i] = Value::Null;
            seen.unset(i);
        }
        match v {
            Ok(Some(v)) => self.store_at(slot, is_time, v, values, seen, event_time),
            Ok(None) => {}
            Err(e) => pending.push((slot, is_time, e)),
        }
    }

    fn store_at(
        &self,
        slot: Option<usize>,
        is_time: bool,
        v: Value,
        values: &mut [Value],
        seen: &mut Seen,
        event_time: &mut Option<Result<Millis, String>>,
    ) {
        if is_time {
            *event_time = Some(parse_event_time(&v));
        }
        if let Some(i) = slot {
            values[i] = v;
            seen.set(i);
        }
    }
}

/// Which projected fields were present.
enum Seen {
    Bits(u64),
    Many(Vec<bool>),
}

impl Seen {
    fn new(n: usize) -> Self {
        if n <= 64 {
            Seen::Bits(0)
        } else {
            Seen::Many(vec![false; n])
        }
    }

    fn set(&mut self, i: usize) {
        match self {
            Seen::Bits(b) => *b |= 1 << i,
            Seen::Many(v) => v[i] = true,
        }
    }

    fn unset(&mut self, i: usize) {
        match self {
            Seen::Bits(b) => *b &= !(1 << i),
            Seen::Many(v) => v[i] = false,
        }
    }

    fn get(&self, i: usize) -> bool {
        match self {
            Seen::Bits(b) => b & (1 << i) != 0,
            Seen::Many(v) => v[i],
        }
    }
}

/// The fast path: a flat JSON object whose strings have no escapes and whose
/// numbers are integers of at most 18 digits. Accepts only what serde_json
/// accepts, with the same values; None for anything else.
fn scan(
    parser: &JsonParser,
    line: &str,
    values: &mut [Value],
    seen: &mut Seen,
    event_time: &mut Option<Result<Millis, String>>,
) -> Option<()> {
    let b = line.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return (skip_ws(b, i + 1) == b.len()).then_some(());
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let end = string_end(b, i + 1)?;
        let key = &line[i + 1..end];
        i = skip_ws(b, end + 1);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        let (slot, is_time) = parser.lookup(key);
        let extra = parser.is_extra(key);
        let wanted = slot.is_some() || is_time || extra;
        let (value, next) = match *b.get(i)? {
            b'"' => {
                let end = string_end(b, i + 1)?;
                (wanted.then(|| Value::Str(line[i + 1..end].into())), end + 1)
            }
            b'-' | b'0'..=b'9' => {
                let (v, next) = number(line, i)?;
                (Some(v), next)
            }
            b't' if b[i..].starts_with(b"true") => (Some(Value::Bool(true)), i + 4),
            b'f' if b[i..].starts_with(b"false") => (Some(Value::Bool(false)), i + 5),
            b'n' if b[i..].starts_with(b"null") => (Some(Value::Null), i + 4),
            _ => return None,
        };
        if let (true, Some(v)) = (wanted, value) {
            match (slot.is_some() || is_time, extra) {
                (true, true) => {
                    parser.store_extras(key, Some(v.clone()), values);
                    parser.store_at(slot, is_time, v, values, seen, event_time);
                }
                (true, false) => parser.store_at(slot, is_time, v, values, seen, event_time),
                (false, _) => parser.store_extras(key, Some(v), values),
            }
        }
        i = skip_ws(b, next);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return (skip_ws(b, i + 1) == b.len()).then_some(()),
            _ => return None,
        }
    }
}

/// JSON whitespace.
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// The index of the quote closing a string whose text starts at `i`; None
/// on an escape or a control character (or no closing quote).
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    for (j, &c) in b.iter().enumerate().skip(i) {
        match c {
            b'"' => return Some(j),
            b'\\' | 0..=0x1f => return None,
            _ => {}
        }
    }
    None
}

/// The number at `i` and the index after it. Integers that surely fit an
/// i64 are read here; other forms by their exact value (`number::parse`),
/// as on the slow path.
fn number(line: &str, i: usize) -> Option<(Value, usize)> {
    if let Some((n, end)) = integer(line.as_bytes(), i) {
        return Some((Value::Int(n), end));
    }
    let rest = &line.as_bytes()[i..];
    let len = rest.iter().position(|c| !matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')).unwrap_or(rest.len());
    Some((crate::number::parse(&line[i..i + len])?.into(), i + len))
}

/// A JSON integer at `i` that fits an i64 for sure (at most 18 digits), and
/// the index after it. None for fractions, exponents, `-0` and invalid forms.
fn integer(b: &[u8], i: usize) -> Option<(i64, usize)> {
    let neg = b[i] == b'-';
    let start = i + neg as usize;
    let mut j = start;
    let mut n: i64 = 0;
    while let Some(&c @ b'0'..=b'9') = b.get(j) {
        if j - start == 18 {
            return None;
        }
        n = n * 10 + (c - b'0') as i64;
        j += 1;
    }
    let digits = j - start;
    // `0` alone is fine, a leading zero or `-0` is left to serde_json.
    if digits == 0 || (b[start] == b'0' && (digits > 1 || neg)) {
        return None;
    }
    if let Some(b'.' | b'e' | b'E') = b.get(j) {
        return None;
    }
    Some((if neg { -n } else { n }, j))
}

/// Parse an event time: epoch milliseconds (a fraction is floored) or an
/// RFC 3339 string, within the event-time range.
pub fn parse_event_time(v: &Value) -> Result<Millis, String> {
    match v {
        Value::Int(ms) => check_event_time(*ms),
        Value::Float(f) if (MIN_EVENT_TIME as f64..MAX_EVENT_TIME as f64 + 1.0).contains(f) => check_event_time(f.floor() as Millis),
        Value::Float(f) if f.is_finite() => Err(event_time_out_of_range(v)),
        Value::Decimal(_) => Err(event_time_out_of_range(v)),
        Value::Str(s) => parse_rfc3339_ms(s),
        other => Err(format!("expected epoch milliseconds or an RFC 3339 timestamp, found {other}")),
    }
}

struct RecordSeed<'a> {
    parser: &'a JsonParser,
    values: &'a mut [Value],
    seen: &'a mut Seen,
    event_time: &'a mut Option<Result<Millis, String>>,
}

impl<'de> DeserializeSeed<'de> for RecordSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RecordSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Of duplicate members the last counts, at every level: an earlier
        // member's value, or why it could not be read, is replaced by the
        // last one's (`replace`); the errors that stand end the record.
        let mut pending = Vec::new();
        let p = self.parser;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let (slot, is_time) = p.lookup(&key);
            let head = p.is_head(&key);
            let extra = p.is_extra(&key);
            if slot.is_none() && !is_time && !head && !extra {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let raw = map.next_value::<&'de RawValue>()?;
            if extra {
                // Not a scalar (or a number beyond f64): null, no error.
                p.store_extras(&key, scalar::<A::Error>(raw.get(), &key).ok(), self.values);
            }
            if slot.is_some() || is_time {
                let v = p.value_of(raw.get(), &key, slot, is_time).map(Some);
                p.replace(slot, is_time, v, self.values, self.seen, self.event_time, &mut pending);
            }
            if head {
                for (target, path) in p.nested.iter().filter(|(_, path)| path.head() == key) {
                    let v = match descend(raw, path.rest()).map_err(de::Error::custom)? {
                        Some(found) => p.value_of(found.get(), path.text(), *target, target.is_none()).map(Some),
                        None => Ok(None),
                    };
                    p.replace(*target, target.is_none(), v, self.values, self.seen, self.event_time, &mut pending);
                }
            }
        }
        match pending.into_iter().next() {
            Some((_, _, e)) => Err(de::Error::custom(e)),
            None => Ok(()),
        }
    }
}

/// The scalar value of field `name` from its raw text; the text, so a
/// number keeps its exact value (serde would round it to f64).
fn scalar<E: de::Error>(raw: &str, name: &str) -> Result<Value, E> {
    match raw.as_bytes().first() {
        Some(b'-' | b'0'..=b'9') => {
            crate::number::parse(raw).map(Value::from).ok_or_else(|| E::custom(format!("field `{name}`: number {raw} is out of range")))
        }
        _ => serde_json::from_str::<Scalar>(raw)
            .map_err(E::custom)?
            .0
            .map_err(|kind| E::custom(format!("field `{name}` must be a scalar, found {kind}"))),
    }
}

/// A scalar JSON value, or the kind of non-scalar found instead.
struct Scalar(Result<Value, &'static str>);

impl<'de> serde::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Scalar, E> {
        Ok(Scalar(Ok(Value::Null)))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
        Ok(Scalar(Ok(Value::Bool(v))))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
        Ok(Scalar(Ok(Value::Int(v))))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar(Ok(i64::try_from(v).map(Value::Int).unwrap_or(Value::Float(v as f64)))))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
        Ok(Scalar(Ok(Value::Float(v))))
    }
    fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
        Ok(Scalar(Ok(Value::Str(v.into()))))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar(Err("an array")))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar(Err("an object")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parser() -> JsonParser {
        JsonParser::new(
            vec![
                ("user".into(), FieldNeed { required: true, ..FieldNeed::default() }),
                ("amount".into(), FieldNeed { numeric: true, ..FieldNeed::default() }),
            ],
            Some("ts".into()),
        )
    }

    #[test]
    fn projects_needed_fields_and_keeps_raw() {
        let line = r#"{"ts": 1000, "user": "a\"b", "amount": 2.5, "other": {"x": [1]}}"#;
        let r = parser().parse(line).unwrap();
        assert_eq!(r.fields, vec![Value::Str("a\"b".into()), Value::Float(2.5)]);
        assert_eq!(r.event_time, Some(1000));
        assert_eq!(&*r.raw, line);
    }

    #[test]
    fn optional_numeric_defaults_to_null_and_rfc3339_times_parse() {
        let r = parser().parse(r#"{"user": 7, "ts": "1970-01-01T00:00:01.5Z"}"#).unwrap();
        assert_eq!(r.fields, vec![Value::Int(7), Value::Null]);
        assert_eq!(r.event_time, Some(1500));
    }

    #[test]
    fn bad_records_say_why() {
        let p = parser();
        let cases = [
            (r#"{"ts": 1, "amount": 1}"#, "missing key field `user`"),
            (r#"{"user": "a", "amount": "x", "ts": 1}"#, "field `amount` must be a number"),
            (r#"{"user": {"a": 1}, "ts": 1}"#, "field `user` must be a scalar, found an object"),
            (r#"{"user": "a"}"#, "missing event-time field `ts`"),
            (r#"{"user": "a", "ts": true}"#, "event-time field `ts`"),
            (r#"{"user": "a", "ts": -9223372036854775808}"#, "outside the supported range"),
            (r#"{"user": "a", "ts": 18446744073709551615}"#, "event time 18446744073709551615 is outside the supported range"),
            (r#"{"user": "a", "ts": 1e300}"#, "event time 1e+300 is outside the supported range"),
            (r#"{"user": "a", "ts": 1e400}"#, "out of range"),
            (r#"{"user": "a\n", "ts": 1e400}"#, "field `ts`: number 1e400 is out of range"),
            (r#"{"user": "a", "ts": 1"#, "invalid JSON"),
            (r#"{"user": "a", "ts": 1} x"#, "invalid JSON"),
            ("[1,2]", "invalid JSON"),
        ];
        for (line, want) in cases {
            let err = p.parse(line).unwrap_err();
            assert!(err.contains(want), "{line}: got {err}, want {want}");
        }
    }

    /// Issue 34 #2: of duplicate members the last counts, for nested paths
    /// too: an earlier duplicate neither lends its nested value nor its
    /// error to the record.
    #[test]
    fn the_last_of_duplicate_members_counts_at_every_level() {
        let need = FieldNeed { required: true, ..FieldNeed::default() };
        let nested = JsonParser::new(vec![("u.id".into(), need)], None);
        let err = nested.parse(r#"{"u":{"id":"early"},"u":5}"#).unwrap_err();
        assert!(err.contains("missing key field `u.id`"), "{err}");
        assert_eq!(nested.parse(r#"{"u":5,"u":{"id":"late"}}"#).unwrap().fields, vec![Value::Str("late".into())]);
        assert_eq!(nested.parse(r#"{"u":{"id":[1]},"u":{"id":2}}"#).unwrap().fields, vec![Value::Int(2)]);
        let err = nested.parse(r#"{"u":{"id":2},"u":{"id":[1]}}"#).unwrap_err();
        assert!(err.contains("must be a scalar"), "{err}");
        let flat = JsonParser::new(vec![("k".into(), need)], Some("t".into()));
        assert_eq!(flat.parse(r#"{"k":[1],"k":"x","t":1}"#).unwrap().fields, vec![Value::Str("x".into())]);
        assert!(flat.parse(r#"{"k":"x","k":{},"t":1}"#).unwrap_err().contains("field `k` must be a scalar"));
        assert_eq!(flat.parse(r#"{"k":1,"t":"no","t":5}"#).unwrap().event_time, Some(5));
        let timed = JsonParser::new(vec![("k".into(), need)], Some("m.t".into()));
        assert!(timed.parse(r#"{"k":1,"m":{"t":5},"m":{}}"#).unwrap_err().contains("missing event-time field `m.t`"));
    }

    /// Issue 34 #3: a field only counted is present with any value, arrays
    /// and objects too; used otherwise as well, it must be a scalar.
    #[test]
    fn a_counted_field_may_hold_any_value() {
        let counted = FieldNeed { presence: true, ..FieldNeed::default() };
        let p = JsonParser::new(vec![("v".into(), counted), ("w.x".into(), counted)], None);
        for line in [r#"{"v":[1,2],"w":{"x":{"a":1}}}"#, r#"{"v":{"a":1},"w":{"x":[]}}"#, r#"{"v":[],"w":{"x":1e999}}"#] {
            let r = p.parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(r.fields.iter().all(|v| *v != Value::Null), "{line}: {:?}", r.fields);
        }
        assert_eq!(p.parse(r#"{"v":null}"#).unwrap().fields, vec![Value::Null, Value::Null]);
        let used = JsonParser::new(vec![("v".into(), FieldNeed::default())], None);
        assert!(used.parse(r#"{"v":[1]}"#).unwrap_err().contains("must be a scalar"));
    }

    /// Parse with the scanner and with serde_json alone: same result, and
    /// whether the scanner took the line.
    fn both(p: &JsonParser, line: &str) -> (Result<Record, String>, bool) {
        let fast = p.parse(line);
        let slow = p.parse_with(line, false);
        assert_eq!(fast, slow, "{line}");
        let mut fields = vec![Value::Null; p.fields.len() + p.extras_len()];
        let took = scan(p, line, &mut fields, &mut Seen::new(p.fields.len()), &mut None).is_some();
        (fast, took)
    }

    #[test]
    fn extras_are_read_leniently_after_the_fields() {
        // Issue 16: values for filters and maps, and presence of a map's new keys.
        let plain = parser();
        let p = parser().with_extras(vec!["amount".into(), "x".into(), "user".into()], vec!["x".into(), "n".into()]);
        let tag = Value::Int(extras_tag(&["amount".into(), "x".into(), "user".into()], &["x".into(), "n".into()]));
        let cases = [
            (
                r#"{"user":"u","ts":1,"amount":2,"x":"s"}"#,
                [Value::Int(2), Value::Str("s".into()), Value::Str("u".into()), Value::Bool(true), Value::Bool(false)],
            ),
            (
                r#"{"user":"u","ts":1,"x":{"y":[1]},"n":null}"#,
                [Value::Null, Value::Null, Value::Str("u".into()), Value::Bool(true), Value::Bool(true)],
            ),
            (
                r#"{"user":"\u0075","ts":1,"x":1e400,"x":2.5}"#,
                [Value::Null, Value::Float(2.5), Value::Str("u".into()), Value::Bool(true), Value::Bool(false)],
            ),
            (
                r#"{"user":"u","ts":1,"x":2.5,"x":[]}"#,
                [Value::Null, Value::Null, Value::Str("u".into()), Value::Bool(true), Value::Bool(false)],
            ),
        ];
        for (line, want) in cases {
            let r = both(&p, line).0.unwrap();
            assert_eq!(r.fields[..2], plain.parse(line).unwrap().fields[..], "{line}");
            assert_eq!(r.fields[2], tag, "{line}");
            assert_eq!(r.fields[3..], want, "{line}");
        }
        // Never a refusal the plain parser would not make, and the same reason.
        for line in [r#"{"user":"u","ts":1,"amount":"text"}"#, r#"{"ts":1,"x":2}"#, r#"{"user":"u","ts":1,"x":2"#, r#"{"user":"u"}"#] {
            assert_eq!(p.parse(line).map(|r| r.fields[..2].to_vec()), plain.parse(line).map(|r| r.fields), "{line}");
        }
    }

    #[test]
    fn scanner_agrees_with_serde_json() {
        let p = parser();
        let cases = [
            // Taken by the scanner.
            (r#"{"user":"u1","amount":7,"ts":1000}"#, true),
            (" {\t\"user\" :\r\n\"u1\" , \"ts\":-12 } ", true),
            (r#"{"ts":0,"user":"ünï €😀","other":"x","b":true,"c":false,"n":null}"#, true),
            (r#"{"user":"a","ts":1,"user":"b","amount":null}"#, true),
            (r#"{"user":"a","ts":"1970-01-01T00:00:01Z","amount":1.5e3}"#, true),
            (r#"{"user":"a","ts":1,"amount":-0}"#, true),
            (r#"{"user":"a","ts":1,"amount":123456789012345678901}"#, true),
            (r#"{"user":"a","ts":1,"amount":-9223372036854775808}"#, true),
            (r#"{"user":"a","ts":1,"amount":9223372036854775808}"#, true),
            (r#"{"user":1.0,"ts":1.7}"#, true),
            (r#"{"user":"a","ts":1,"x":"\u001f"}"#, false),
            // Left to serde_json.
            (r#"{"user":"a\"b","ts":1}"#, false),
            (r#"{"user":"\u00fc\n","ts":1}"#, false),
            (r#"{"us\u0065r":"a","ts":1}"#, false),
            (r#"{"user":"a","ts":1,"nested":{"x":[1,{"y":"}"}]}}"#, false),
            (r#"{"user":"a","ts":1,"list":[1,2]}"#, false),
            (r#"{"user":[1],"ts":1}"#, false),
            // Invalid JSON: serde_json says why.
            ("{\"user\":\"a\tb\",\"ts\":1}", false),
            (r#"{"user":"a","ts":01}"#, false),
            (r#"{"user":"a","ts":1.}"#, false),
            (r#"{"user":"a","ts":-}"#, false),
            (r#"{"user":"a","ts":1,}"#, false),
            (r#"{"user":"a" "ts":1}"#, false),
            (r#"{"user":"a","ts":1}}"#, false),
            (r#"{"user":"a","ts":tru}"#, false),
            (r#"{"user":"a","ts":1"#, false),
            (r#"{"user":"a"#, false),
            (r#"{"user":"a","ts":+1}"#, false),
            ("{}", true),
            ("", false),
        ];
        for (line, scanned) in cases {
            assert_eq!(both(&p, line).1, scanned, "{line}");
        }
        // Numbers read exactly as serde_json reads them.
        let (r, _) = both(&p, r#"{"user":"a","ts":1,"amount":0.1}"#);
        assert_eq!(r.unwrap().fields[1], Value::Float(0.1));
        let (r, _) = both(&p, r#"{"user":"a","ts":1,"amount":-9223372036854775808}"#);
        assert_eq!(r.unwrap().fields[1], Value::Int(i64::MIN));
        let (r, _) = both(&p, r#"{"user":"a","ts":1,"amount":18446744073709551616}"#);
        assert_eq!(r.unwrap().fields[1], Value::Decimal("18446744073709551616".into()));
        // Exact values on both paths, also where serde_json alone would round to f64.
        for (line, want) in [
            (r#"{"user":18446744073709551614,"ts":1}"#, Value::Decimal("18446744073709551614".into())),
            (r#"{"user":"\u0061","ts":1,"amount":0.10000000000000000001}"#, Value::Decimal("1.0000000000000000001e-1".into())),
            (r#"{"user":"\u0061","ts":1,"amount":-0}"#, Value::Int(0)),
            (r#"{"user":9e15,"ts":1,"amount":2.0}"#, Value::Float(2.0)),
        ] {
            let r = both(&p, line).0.unwrap();
            let got = if line.starts_with(r#"{"user":1"#) { &r.fields[0] } else { &r.fields[1] };
            assert_eq!(got, &want, "{line}");
        }
        let (r, _) = both(&p, r#"{"user":"ü😀","ts":1}"#);
        assert_eq!(r.unwrap().fields[0], Value::Str("ü😀".into()));
    }

    #[test]
    fn event_times_floor_and_stay_in_range() {
        // Issue 18 #9 and #10: floats and RFC 3339 fractions floor; a u64 is not clamped.
        let p = parser();
        for (ts, want) in [("-0.5", -1), ("0.5", 0), ("\"1969-12-31T23:59:59.9995Z\"", -1), ("253402300799999", 253402300799999)] {
            let r = both(&p, &format!(r#"{{"user":"a","ts":{ts}}}"#)).0.unwrap();
            assert_eq!(r.event_time, Some(want), "{ts}");
        }
    }

    #[test]
    fn many_projected_fields() {
        let names: Vec<String> = (0..70).map(|i| format!("f{i}")).collect();
        let p = JsonParser::new(names.iter().map(|n| (n.clone(), FieldNeed { required: true, ..FieldNeed::default() })).collect(), None);
        let line = format!("{{{}}}", names.iter().enumerate().map(|(i, n)| format!("\"{n}\":{i}")).collect::<Vec<_>>().join(","));
        let (r, took) = both(&p, &line);
        assert!(took);
        assert_eq!(r.unwrap().fields[69], Value::Int(69));
        let err = p.parse(r#"{"f0":1}"#).unwrap_err();
        assert!(err.contains("missing key field `f1`"), "{err}");
    }

    /// Seeded random bytes, truncated and mutated records, extreme numbers:
    /// the parser never panics, a refusal always says why, and the scanner
    /// always agrees with serde_json.
    #[test]
    fn json_reader_fuzz_never_panics_and_agrees_with_serde_json() {
        use crate::config::fuzz_tests::Rng;
        const NUMBERS: &[&str] = &[
            "0",
            "-0",
            "1e400",
            "-1e400",
            "1e-400",
            "0.1e1",
            "1E+2",
            "-1.5e-7",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "18446744073709551615",
            "18446744073709551616",
            "123456789012345678",
            "1234567890123456789",
            "99999999999999999999999999999999999999",
            "1.7976931348623157e308",
            "5e-324",
            "00",
            "01",
            "1.",
            ".5",
            "+1",
            "--1",
            "1e",
            "1e+",
            "NaN",
            "Infinity",
        ];
        const BITS: &[&str] = &[
            "\"",
            "\\",
            "\\u0000",
            "\\ud800",
            "\\uDFFF\\uD800",
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            " ",
            "\t",
            "\u{0}",
            "é",
            "😀",
            "\u{7f}",
            "null",
            "true",
            "tru",
            "\"ts\"",
            "\"user\"",
        ];
        let valid = [
            r#"{"user":"u1","amount":7,"ts":1000}"#,
            r#"{"ts":"2024-01-01T00:00:00Z","user":"a\"b","amount":2.5,"other":{"x":[1,{"y":null}]}}"#,
            r#"{"user":"ü😀","ts":-12,"amount":null,"flag":true}"#,
            r#"{"user":1.5,"ts":1.7e3}"#,
        ];
        let p = parser();
        let mut rng = Rng::new(0x1503);
        let mut lines: Vec<String> = Vec::new();
        for case in 0..12_000u64 {
            let base = *rng.pick(&valid);
            let line = match case % 4 {
                // Random bytes (made text as a file source would meet them).
                0 => {
                    let bytes: Vec<u8> = (0..rng.below(80)).map(|_| rng.next() as u8).collect();
                    String::from_utf8_lossy(&bytes).into_owned()
                }
                // A valid record cut anywhere.
                1 => {
                    let mut at = rng.below(base.len() + 1);
                    while !base.is_char_boundary(at) {
                        at -= 1;
                    }
                    base[..at].to_string()
                }
                // Numbers replaced by extremes.
                2 => {
                    let mut out = String::new();
                    let mut rest = base;
                    while let Some(i) = rest.find(|c: char| c.is_ascii_digit()) {
                        let end = rest[i..].find(|c: char| !(c.is_ascii_digit() || ".eE+-".contains(c))).map_or(rest.len(), |e| i + e);
                        out.push_str(&rest[..i]);
                        out.push_str(*rng.pick(NUMBERS));
                        rest = &rest[end..];
                    }
                    out.push_str(rest);
                    out
                }
                // Pieces inserted, deleted or nested deep.
                _ => {
                    let mut line = base.to_string();
                    for _ in 0..1 + rng.below(4) {
                        let mut at = rng.below(line.len() + 1);
                        while !line.is_char_boundary(at) {
                            at -= 1;
                        }
                        match rng.below(4) {
                            0 => line.insert_str(at, *rng.pick(BITS)),
                            1 => {
                                let mut end = (at + 1 + rng.below(5)).min(line.len());
                                while !line.is_char_boundary(end) {
                                    end += 1;
                                }
                                line.replace_range(at..end, "");
                            }
                            2 => {
                                let depth = rng.below(300);
                                line = format!(r#"{{"user":"a","ts":1,"deep":{}1{}}}"#, "[".repeat(depth), "]".repeat(depth));
                            }
                            _ => line.insert_str(at, &format!(r#","{}":{}"#, rng.pick(&["user", "ts", "amount", "x"]), rng.pick(NUMBERS))),
                        }
                    }
                    line
                }
            };
            lines.push(line);
        }
        let mut failures = Vec::new();
        for (case, line) in lines.iter().enumerate() {
            let outcome = std::panic::catch_unwind(|| (p.parse(line), p.parse_with(line, false)));
            match outcome {
                Err(_) => failures.push(format!("case {case}: panicked on {line:?}")),
                Ok((fast, slow)) if fast != slow => {
                    failures.push(format!("case {case}: scanner {fast:?} != serde_json {slow:?} on {line:?}"))
                }
                Ok((Err(e), _)) if e.is_empty() => failures.push(format!("case {case}: refused without a reason: {line:?}")),
                Ok(_) => {}
            }
        }
        assert!(failures.is_empty(), "{} failures, first ones:\n{}", failures.len(), failures[..failures.len().min(5)].join("\n"));
    }
}

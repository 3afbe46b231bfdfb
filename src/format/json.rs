//! JSON-lines parsing with projection: each line is parsed once, and only the
//! fields the pipeline uses are kept as values; the line itself travels on as
//! the record's raw text for pass-through sinks.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::types::{parse_rfc3339_ms, Millis, Record, Value};

/// What the pipeline needs of one projected field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FieldNeed {
    /// A key field: must be present (it may be `null`).
    pub required: bool,
    /// An aggregated field: must be a number or null when present.
    pub numeric: bool,
}

/// A parser for one source's records.
#[derive(Debug, Clone)]
pub struct JsonParser {
    fields: Vec<(String, FieldNeed)>,
    event_time: Option<String>,
}

impl JsonParser {
    pub fn new(fields: Vec<(String, FieldNeed)>, event_time: Option<String>) -> Self {
        JsonParser { fields, event_time }
    }

    /// Parse one line into a record, or say why it is bad.
    pub fn parse(&self, line: &str) -> Result<Record, String> {
        let mut values = vec![None; self.fields.len()];
        let mut event_time = None;
        let mut de = serde_json::Deserializer::from_str(line);
        let seed = RecordSeed { parser: self, values: &mut values, event_time: &mut event_time };
        seed.deserialize(&mut de).map_err(|e| format!("invalid JSON: {e}"))?;
        de.end().map_err(|e| format!("invalid JSON: {e}"))?;

        let mut fields = Vec::with_capacity(values.len());
        for ((name, need), v) in self.fields.iter().zip(values) {
            match v {
                Some(v) => {
                    if need.numeric && !matches!(v, Value::Int(_) | Value::Float(_) | Value::Null) {
                        return Err(format!("field `{name}` must be a number, found {v}"));
                    }
                    fields.push(v);
                }
                None if need.required => return Err(format!("missing key field `{name}`")),
                None => fields.push(Value::Null),
            }
        }
        if let Some(name) = &self.event_time {
            match event_time {
                Some(Ok(t)) => {
                    return Ok(Record::new(fields, line.into(), Some(t)));
                }
                Some(Err(e)) => return Err(format!("event-time field `{name}`: {e}")),
                None => return Err(format!("missing event-time field `{name}`")),
            }
        }
        Ok(Record::new(fields, line.into(), None))
    }
}

/// Parse an event time: integer epoch milliseconds or an RFC 3339 string.
pub fn parse_event_time(v: &Value) -> Result<Millis, String> {
    match v {
        Value::Int(ms) => Ok(*ms),
        Value::Float(f) if f.is_finite() => Ok(f.floor() as Millis),
        Value::Str(s) => parse_rfc3339_ms(s),
        other => Err(format!("expected epoch milliseconds or an RFC 3339 timestamp, found {other}")),
    }
}

struct RecordSeed<'a> {
    parser: &'a JsonParser,
    values: &'a mut [Option<Value>],
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
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let slot = self.parser.fields.iter().position(|(n, _)| *n == key);
            let is_time = self.parser.event_time.as_deref() == Some(&*key);
            match (slot, is_time) {
                (None, false) => {
                    map.next_value::<IgnoredAny>()?;
                }
                (slot, _) => {
                    let v = map.next_value::<Scalar>()?.0;
                    let v = v.map_err(|kind| de::Error::custom(format!("field `{key}` must be a scalar, found {kind}")))?;
                    if is_time {
                        *self.event_time = Some(parse_event_time(&v));
                    }
                    if let Some(i) = slot {
                        self.values[i] = Some(v);
                    }
                }
            }
        }
        Ok(())
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
                ("user".into(), FieldNeed { required: true, numeric: false }),
                ("amount".into(), FieldNeed { required: false, numeric: true }),
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
            (r#"{"user": "a", "ts": 1"#, "invalid JSON"),
            (r#"{"user": "a", "ts": 1} x"#, "invalid JSON"),
            ("[1,2]", "invalid JSON"),
        ];
        for (line, want) in cases {
            let err = p.parse(line).unwrap_err();
            assert!(err.contains(want), "{line}: got {err}, want {want}");
        }
    }
}

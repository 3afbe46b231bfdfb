//! Field paths: how a pipeline names a field inside nested JSON.
//!
//! A path is a top-level key followed by object keys (`.key`) and array
//! indexes (`[0]`): `user.id`, `items[0].sku`, `a[1][2]`. A key is written
//! bare (any characters but `.`, `[`, `]` and `"`) or quoted, with `\"` and
//! `\\` as the only escapes, for keys holding those characters:
//! `"user.id"` is the top-level key `user.id`, `meta."a.b"[0]` a nested one.
//! Paths are parsed once, when the pipeline is validated; every spelling of
//! a path has one canonical text (`"user".id` is `user.id`), which is the
//! field's name in schemas, checkpoints and output. Following a path into a
//! record reads only the raw text on the way (no tree is built).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// An object member.
    Key(String),
    /// An array element (0-based).
    Index(usize),
}

/// A parsed field path: at least one segment, the first a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    segments: Vec<Segment>,
    text: String,
}

/// Why a path does not parse, and the 1-based character column in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathError {
    pub column: usize,
    pub message: String,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (column {} of the path)", self.message, self.column)
    }
}

impl FieldPath {
    /// Parse `text` (see the module doc for the syntax).
    pub fn parse(text: &str) -> Result<FieldPath, PathError> {
        let chars: Vec<char> = text.chars().collect();
        let err = |i: usize, message: String| PathError { column: i + 1, message };
        let mut segments = Vec::new();
        let mut i = 0;
        if chars.is_empty() {
            return Err(err(0, "empty field path: expected a field name such as `user` or `user.id`".into()));
        }
        // Before each key: at the start, or after a `.`.
        let mut want_key = true;
        while i < chars.len() {
            if want_key {
                match chars[i] {
                    '"' => {
                        let mut key = String::new();
                        let start = i;
                        i += 1;
                        loop {
                            match chars.get(i) {
                                None => return Err(err(start, "unterminated quoted key: expected a closing `\"`".into())),
                                Some('"') => break,
                                Some('\\') => match chars.get(i + 1) {
                                    Some(c @ ('"' | '\\')) => {
                                        key.push(*c);
                                        i += 2;
                                        continue;
                                    }
                                    _ => return Err(err(i, "bad escape in a quoted key: only `\\\"` and `\\\\` are allowed".into())),
                                },
                                Some(c) => key.push(*c),
                            }
                            i += 1;
                        }
                        i += 1;
                        segments.push(Segment::Key(key));
                    }
                    '.' | '[' | ']' => {
                        let what =
                            if segments.is_empty() { "a path must start with a field name" } else { "expected a field name after `.`" };
                        return Err(err(i, format!("{what}, found `{}`", chars[i])));
                    }
                    _ => {
                        let start = i;
                        while i < chars.len() && !matches!(chars[i], '.' | '[' | ']' | '"') {
                            i += 1;
                        }
                        if chars.get(i) == Some(&'"') {
                            return Err(err(i, "a `\"` may only open a quoted key, e.g. `a.\"b.c\"`".into()));
                        }
                        segments.push(Segment::Key(chars[start..i].iter().collect()));
                    }
                }
                want_key = false;
                continue;
            }
            match chars[i] {
                '.' => {
                    want_key = true;
                    i += 1;
                    if i == chars.len() {
                        return Err(err(i - 1, "the path ends with `.`: expected a field name after it".into()));
                    }
                }
                '[' => {
                    let start = i;
                    let digits_at = i + 1;
                    i = digits_at;
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                    if i == digits_at || chars.get(i) != Some(&']') {
                        return Err(err(start, "expected an array index such as `[0]`".into()));
                    }
                    let digits: String = chars[digits_at..i].iter().collect();
                    let n = digits.parse::<usize>().map_err(|_| err(digits_at, format!("array index {digits} is too large")))?;
                    segments.push(Segment::Index(n));
                    i += 1;
                }
                c => return Err(err(i, format!("expected `.` or `[` after a path segment, found `{c}`"))),
            }
        }
        let text = canonical(&segments);
        Ok(FieldPath { segments, text })
    }

    /// The canonical text: bare keys where possible, `[n]` indexes.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The top-level key.
    pub fn head(&self) -> &str {
        match &self.segments[0] {
            Segment::Key(k) => k,
            Segment::Index(_) => unreachable!("a path starts with a key"),
        }
    }

    /// The segments after the top-level key.
    pub fn rest(&self) -> &[Segment] {
        &self.segments[1..]
    }

    /// All segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// A single top-level key.
    pub fn is_top_level(&self) -> bool {
        self.segments.len() == 1
    }

    /// The member name of this key field in an aggregate's output: a
    /// top-level key as itself (`"a.b"` is the member `a.b`), a nested path
    /// by its canonical text (`a.b`). So two spellings may share a name.
    pub fn output_name(&self) -> &str {
        if self.is_top_level() {
            self.head()
        } else {
            self.text()
        }
    }

    /// A path of one top-level key, taken as it is (no syntax).
    pub fn key(name: &str) -> FieldPath {
        let segments = vec![Segment::Key(name.to_string())];
        FieldPath { text: canonical(&segments), segments }
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn bare(key: &str) -> bool {
    !key.is_empty() && !key.contains(['.', '[', ']', '"'])
}

fn canonical(segments: &[Segment]) -> String {
    let mut out = String::new();
    for (i, s) in segments.iter().enumerate() {
        match s {
            Segment::Key(k) => {
                if i > 0 {
                    out.push('.');
                }
                if bare(k) {
                    out.push_str(k);
                } else {
                    out.push('"');
                    for c in k.chars() {
                        if matches!(c, '"' | '\\') {
                            out.push('\\');
                        }
                        out.push(c);
                    }
                    out.push('"');
                }
            }
            Segment::Index(n) => {
                out.push('[');
                out.push_str(&n.to_string());
                out.push(']');
            }
        }
    }
    out
}

/// The canonical text of a path written as `text`, or why it is not one.
pub fn canonical_text(text: &str) -> Result<String, PathError> {
    FieldPath::parse(text).map(|p| p.text)
}

/// Follow `rest` from the raw JSON value `raw`: the value it reaches, or
/// None when a step is missing (no such key, an index past the end, or a
/// step into a value that is not an object or array). Of duplicate keys the
/// last counts, as for top-level fields.
pub fn descend<'a>(mut raw: &'a RawValue, rest: &[Segment]) -> Result<Option<&'a RawValue>, serde_json::Error> {
    for seg in rest {
        let mut de = serde_json::Deserializer::from_str(raw.get());
        match (Step { seg }).deserialize(&mut de)? {
            Some(next) => raw = next,
            None => return Ok(None),
        }
    }
    Ok(Some(raw))
}

struct Step<'s> {
    seg: &'s Segment,
}

impl<'de> DeserializeSeed<'de> for Step<'_> {
    type Value = Option<&'de RawValue>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Step<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match self.seg {
                Segment::Key(k) if *k == *key => found = Some(map.next_value::<&'de RawValue>()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        let mut n = 0usize;
        loop {
            let hit = matches!(self.seg, Segment::Index(i) if *i == n);
            if hit {
                match seq.next_element::<&'de RawValue>()? {
                    Some(v) => found = Some(v),
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            n = n.saturating_add(1);
        }
        Ok(found)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_to_one_canonical_text() {
        for (text, want) in [
            ("user", "user"),
            ("user.id", "user.id"),
            ("items[0].sku", "items[0].sku"),
            ("\"user\".id", "user.id"),
            ("\"user.id\"", "\"user.id\""),
            ("meta.\"a\\\"b\"[2][10]", "meta.\"a\\\"b\"[2][10]"),
            ("my field", "my field"),
        ] {
            assert_eq!(FieldPath::parse(text).unwrap().text(), want, "{text}");
        }
        let p = FieldPath::parse("items[0].sku").unwrap();
        assert_eq!(p.head(), "items");
        assert_eq!(p.rest(), [Segment::Index(0), Segment::Key("sku".into())]);
        assert_eq!(FieldPath::parse("\"user.id\"").unwrap().head(), "user.id");
        assert!(FieldPath::parse("\"user.id\"").unwrap().is_top_level());
    }

    #[test]
    fn bad_paths_name_the_column() {
        for (text, column, want) in [
            ("", 1, "empty field path"),
            (".a", 1, "must start with a field name"),
            ("a.", 2, "ends with `.`"),
            ("a..b", 3, "expected a field name after `.`"),
            ("a[x]", 2, "expected an array index"),
            ("a[1", 2, "expected an array index"),
            ("a]", 2, "expected `.` or `[`"),
            ("\"a", 1, "unterminated quoted key"),
            ("a\"b\"", 2, "may only open a quoted key"),
            ("\"a\"b", 4, "expected `.` or `[`"),
            ("\"a\\n\"", 3, "bad escape"),
            ("[0]", 1, "must start with a field name"),
            ("a[99999999999999999999999]", 3, "too large"),
        ] {
            let e = FieldPath::parse(text).unwrap_err();
            assert!(e.message.contains(want), "{text}: {e}");
            assert_eq!(e.column, column, "{text}: {e}");
        }
    }

    fn get(json: &str, path: &str) -> Option<String> {
        let p = FieldPath::parse(path).unwrap();
        let raw: &RawValue = serde_json::from_str(json).unwrap();
        let mut all = vec![Segment::Key(p.head().to_string())];
        all.extend_from_slice(p.rest());
        descend(raw, &all).unwrap().map(|v| v.get().to_string())
    }

    #[test]
    fn descend_follows_keys_and_indexes() {
        let doc = r#"{"user": {"id": 7, "tags": ["a", {"x": 1}]}, "user.id": 9, "items": [{"sku": "A"}, {"sku": "B"}], "s": "x"}"#;
        assert_eq!(get(doc, "user.id").as_deref(), Some("7"));
        assert_eq!(get(doc, "\"user.id\"").as_deref(), Some("9"));
        assert_eq!(get(doc, "items[1].sku").as_deref(), Some("\"B\""));
        assert_eq!(get(doc, "user.tags[1].x").as_deref(), Some("1"));
        assert_eq!(get(doc, "items[2].sku"), None);
        assert_eq!(get(doc, "user.nope"), None);
        assert_eq!(get(doc, "s.x"), None, "a step into a string is missing");
        assert_eq!(get(doc, "s[0]"), None);
        assert_eq!(get(r#"{"a": {"b": 1, "b": 2}}"#, "a.b").as_deref(), Some("2"), "the last duplicate counts");
    }
}

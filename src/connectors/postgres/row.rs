//! A record's row: each mapped column's value read from the record's JSON
//! at its field path and checked against the column's type, as the text
//! PostgreSQL parses (the statement casts it to the column's type).
//!
//! The checks make a wrong value a bad record of its own — handled by the
//! sink's `on_error`, the same on every run — rather than a failed batch:
//! a missing field, an object for a number column, a fraction for an
//! integer column, an integer out of the column's range. What only the
//! server can parse (a timestamp, a uuid) is passed as written.

use serde_json::value::RawValue;

use crate::format::path::{descend, FieldPath};

/// What a column accepts, from its type (`pg_type.typname`, `typcategory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// int2, int4, int8: a JSON integer within the range.
    Integer {
        min: i64,
        max: i64,
    },
    /// float, numeric: any JSON number.
    Number,
    Bool,
    /// json, jsonb: any JSON value, as its text.
    Json,
    /// Strings (a number or boolean is taken as its text).
    Text,
    /// timestamp, timestamptz: a string as written, or a number of
    /// milliseconds since the epoch (what weir's window bounds are), as UTC.
    Timestamp,
    /// Anything else the server parses from text (dates, uuid, …): a
    /// JSON string or number, as written.
    Parsed,
}

impl ColumnKind {
    /// The kind of a column of type `typname` in category `category`; None
    /// for arrays and composite types, which have no JSON text form here.
    pub fn of(typname: &str, category: &str) -> Option<ColumnKind> {
        Some(match (typname, category) {
            ("int2", _) => ColumnKind::Integer { min: i16::MIN.into(), max: i16::MAX.into() },
            ("int4", _) => ColumnKind::Integer { min: i32::MIN.into(), max: i32::MAX.into() },
            ("int8", _) => ColumnKind::Integer { min: i64::MIN, max: i64::MAX },
            ("json" | "jsonb", _) => ColumnKind::Json,
            ("timestamp" | "timestamptz", _) => ColumnKind::Timestamp,
            (_, "N") => ColumnKind::Number,
            (_, "B") => ColumnKind::Bool,
            (_, "S") => ColumnKind::Text,
            (_, "A" | "C" | "P" | "X") => return None,
            _ => ColumnKind::Parsed,
        })
    }
}

/// A column to fill: its name, where its value is, what it accepts.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    /// None: the whole record (`$`).
    pub path: Option<FieldPath>,
    pub kind: ColumnKind,
    /// Part of the upsert key: NULL is refused (it never conflicts).
    pub key: bool,
}

/// One row: each column's text, None for NULL.
pub type Row = Vec<Option<String>>;

/// `row` as bytes, for rows kept in state: per column a tag (0 NULL, 1
/// text) and, for text, its length (u32, big-endian) and bytes.
pub fn encode(row: &Row) -> Vec<u8> {
    let mut out = Vec::with_capacity(row.iter().map(|v| v.as_ref().map_or(1, |t| 5 + t.len())).sum());
    for v in row {
        match v {
            None => out.push(0),
            Some(t) => {
                out.push(1);
                out.extend_from_slice(&(t.len() as u32).to_be_bytes());
                out.extend_from_slice(t.as_bytes());
            }
        }
    }
    out
}

/// The row `encode` wrote, of `columns` columns; None when `bytes` is not one.
pub fn decode(mut bytes: &[u8], columns: usize) -> Option<Row> {
    let mut row = Vec::with_capacity(columns);
    for _ in 0..columns {
        let (&tag, rest) = bytes.split_first()?;
        bytes = rest;
        match tag {
            0 => row.push(None),
            1 => {
                let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
                let text = std::str::from_utf8(bytes.get(4..4usize.checked_add(len)?)?).ok()?;
                row.push(Some(text.to_string()));
                bytes = &bytes[4 + len..];
            }
            _ => return None,
        }
    }
    bytes.is_empty().then_some(row)
}

/// The row of the record whose JSON text is `json`, or why it has none.
pub fn extract(json: &str, columns: &[Column]) -> Result<Row, String> {
    let raw: &RawValue = serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
    let mut row = Vec::with_capacity(columns.len());
    for c in columns {
        let field = c.path.as_ref().map_or("$", |p| p.text());
        let found = descend(raw, c.path.as_ref().map_or(&[], |p| p.segments())).map_err(|e| format!("not JSON: {e}"))?;
        let Some(value) = found else {
            return Err(format!("no field `{field}` for column `{}`", c.name));
        };
        let text = match (&c.path, c.kind) {
            // The whole record into a text column: its JSON text.
            (None, ColumnKind::Text) => Some(value.get().to_string()),
            _ => convert(value.get(), c.kind).map_err(|why| format!("column `{}` (field `{field}`): {why}", c.name))?,
        };
        if c.key && text.is_none() {
            return Err(format!("key column `{}` (field `{field}`) is null", c.name));
        }
        row.push(text);
    }
    Ok(row)
}

/// The text of JSON value `v` for a column of kind `kind`.
fn convert(v: &str, kind: ColumnKind) -> Result<Option<String>, String> {
    let first = v.as_bytes()[0];
    if v == "null" {
        return Ok(None);
    }
    let is_number = first == b'-' || first.is_ascii_digit();
    let is_string = first == b'"';
    let shown = || shorten(v, 60);
    let text = match kind {
        ColumnKind::Json => v.to_string(),
        ColumnKind::Integer { min, max } if is_number => {
            let n: i64 = v.parse().map_err(|_| format!("expected an integer, got {}", shown()))?;
            if !(min..=max).contains(&n) {
                return Err(format!("{n} is out of the column's range {min}..={max}"));
            }
            v.to_string()
        }
        ColumnKind::Number if is_number => v.to_string(),
        ColumnKind::Bool if v == "true" || v == "false" => v.to_string(),
        ColumnKind::Text if is_string => unquote(v)?,
        ColumnKind::Text if is_number || v == "true" || v == "false" => v.to_string(),
        ColumnKind::Timestamp | ColumnKind::Parsed if is_string => unquote(v)?,
        ColumnKind::Timestamp if is_number => epoch_ms_text(v)?,
        ColumnKind::Parsed if is_number => v.to_string(),
        ColumnKind::Integer { .. } => return Err(format!("expected an integer, got {}", shown())),
        ColumnKind::Number => return Err(format!("expected a number, got {}", shown())),
        ColumnKind::Bool => return Err(format!("expected true or false, got {}", shown())),
        ColumnKind::Timestamp => return Err(format!("expected a timestamp (a string, or milliseconds since the epoch), got {}", shown())),
        ColumnKind::Text | ColumnKind::Parsed => return Err(format!("expected a string, got {}", shown())),
    };
    if text.contains('\0') {
        return Err("PostgreSQL text cannot hold a NUL character".into());
    }
    Ok(Some(text))
}

/// Epoch milliseconds `v` (a JSON integer) as `YYYY-MM-DD HH:MM:SS.mmm+00`.
fn epoch_ms_text(v: &str) -> Result<String, String> {
    let ms: i64 = v.parse().map_err(|_| format!("expected whole milliseconds since the epoch, got {}", shorten(v, 60)))?;
    let at = time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .map_err(|_| format!("{ms} ms since the epoch is out of range for a timestamp"))?;
    let (y, mo, d) = (at.year(), u8::from(at.month()), at.day());
    Ok(format!("{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}.{:03}+00", at.hour(), at.minute(), at.second(), ms.rem_euclid(1000)))
}

/// At most `max` bytes of `s` (on a character boundary), marked when cut.
fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let end = (0..=max).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    format!("{}…", &s[..end])
}

fn unquote(v: &str) -> Result<String, String> {
    serde_json::from_str(v).map_err(|e| format!("bad string: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, path: &str, kind: ColumnKind) -> Column {
        let path = (path != "$").then(|| FieldPath::parse(path).unwrap());
        Column { name: name.into(), path, kind, key: false }
    }

    fn int4() -> ColumnKind {
        ColumnKind::of("int4", "N").unwrap()
    }

    #[test]
    fn values_are_read_at_their_paths_as_the_text_the_server_parses() {
        let cols = [
            col("id", "user.id", int4()),
            col("name", "user.name", ColumnKind::Text),
            col("score", "score", ColumnKind::Number),
            col("ok", "ok", ColumnKind::Bool),
            col("doc", "user", ColumnKind::Json),
            col("at", "at", ColumnKind::Parsed),
            col("gone", "tags[1]", ColumnKind::Text),
        ];
        let json = r#"{"user":{"id":7,"name":"a\tb\u00e9"},"score":-1.5e3,"ok":true,"at":"2024-01-01T00:00:00Z","tags":["x",null]}"#;
        let row = extract(json, &cols).unwrap();
        let texts: Vec<Option<&str>> = row.iter().map(|v| v.as_deref()).collect();
        assert_eq!(
            texts,
            [
                Some("7"),
                Some("a\tbé"),
                Some("-1.5e3"),
                Some("true"),
                Some(r#"{"id":7,"name":"a\tb\u00e9"}"#),
                Some("2024-01-01T00:00:00Z"),
                None
            ]
        );
    }

    #[test]
    fn a_missing_field_or_a_value_of_the_wrong_type_is_a_bad_record_with_its_reason() {
        let id = [col("id", "id", int4())];
        assert_eq!(extract(r#"{"x":1}"#, &id).unwrap_err(), "no field `id` for column `id`");
        assert_eq!(extract(r#"{"id":1.5}"#, &id).unwrap_err(), "column `id` (field `id`): expected an integer, got 1.5");
        assert_eq!(extract(r#"{"id":"7"}"#, &id).unwrap_err(), "column `id` (field `id`): expected an integer, got \"7\"");
        assert_eq!(
            extract(r#"{"id":3000000000}"#, &id).unwrap_err(),
            "column `id` (field `id`): 3000000000 is out of the column's range -2147483648..=2147483647"
        );
        let flag = [col("ok", "ok", ColumnKind::Bool)];
        assert!(extract(r#"{"ok":1}"#, &flag).unwrap_err().contains("expected true or false"));
        let name = [col("n", "n", ColumnKind::Text)];
        assert!(extract(r#"{"n":{"a":1}}"#, &name).unwrap_err().contains("expected a string"));
        assert!(extract(r#"{"n":"a\u0000b"}"#, &name).unwrap_err().contains("NUL"));
        let key = [Column { key: true, ..col("id", "id", int4()) }];
        assert_eq!(extract(r#"{"id":null}"#, &key).unwrap_err(), "key column `id` (field `id`) is null");
        assert_eq!(extract(r#"{"id":null}"#, &id).unwrap(), vec![None], "null is NULL outside the key");
    }

    #[test]
    fn a_timestamp_column_takes_epoch_milliseconds_as_utc() {
        let at = [col("at", "at", ColumnKind::Timestamp)];
        assert_eq!(extract(r#"{"at":1700000000123}"#, &at).unwrap(), vec![Some("2023-11-14 22:13:20.123+00".to_string())]);
        assert_eq!(extract(r#"{"at":-1}"#, &at).unwrap(), vec![Some("1969-12-31 23:59:59.999+00".to_string())]);
        assert_eq!(extract(r#"{"at":"2024-01-01T00:00:00Z"}"#, &at).unwrap(), vec![Some("2024-01-01T00:00:00Z".to_string())]);
        assert!(extract(r#"{"at":1.5}"#, &at).unwrap_err().contains("whole milliseconds"));
        assert!(extract(r#"{"at":9223372036854775807}"#, &at).unwrap_err().contains("out of range"));
        assert!(extract(r#"{"at":true}"#, &at).unwrap_err().contains("expected a timestamp"));
    }

    #[test]
    fn the_whole_record_fills_a_json_or_text_column() {
        let cols = [col("doc", "$", ColumnKind::Json), col("line", "$", ColumnKind::Text), col("id", "id", ColumnKind::Number)];
        let json = r#"{"id":1,"u":{"a":[1,2]}}"#;
        assert_eq!(extract(json, &cols).unwrap(), vec![Some(json.to_string()), Some(json.to_string()), Some("1".to_string())]);
        assert!(extract(json, &[col("n", "$", ColumnKind::Number)]).unwrap_err().contains("column `n` (field `$`): expected a number"));
    }

    #[test]
    fn a_kept_row_reads_back_and_damage_is_refused() {
        let row = vec![Some("a\u{e9}".to_string()), None, Some(String::new())];
        let bytes = encode(&row);
        assert_eq!(decode(&bytes, 3), Some(row));
        assert_eq!(decode(&bytes, 2), None, "bytes left over");
        assert_eq!(decode(&bytes[..bytes.len() - 1], 3), None, "cut short");
        assert_eq!(decode(&[1, 255, 255, 255, 255], 1), None, "a length past the end");
    }

    #[test]
    fn column_kinds_follow_the_type_and_arrays_are_refused() {
        assert_eq!(ColumnKind::of("int8", "N"), Some(ColumnKind::Integer { min: i64::MIN, max: i64::MAX }));
        assert_eq!(ColumnKind::of("numeric", "N"), Some(ColumnKind::Number));
        assert_eq!(ColumnKind::of("varchar", "S"), Some(ColumnKind::Text));
        assert_eq!(ColumnKind::of("jsonb", "U"), Some(ColumnKind::Json));
        assert_eq!(ColumnKind::of("timestamptz", "D"), Some(ColumnKind::Timestamp));
        assert_eq!(ColumnKind::of("date", "D"), Some(ColumnKind::Parsed));
        assert_eq!(ColumnKind::of("_int4", "A"), None);
    }
}

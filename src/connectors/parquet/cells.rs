//! One record's values as the cells of a declared schema, checked: a value
//! that does not fit its column (wrong type, out of range, digits a decimal
//! would lose, a null in a column that is not nullable) is an error naming
//! the column and the value, never a silent conversion.

use crate::config::{ParquetColumn, ParquetType, TimeUnit};
use crate::types::Value;

/// A value ready for its column (Null only in a nullable one).
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int32(i32),
    Int64(i64),
    Double(f64),
    Bool(bool),
    Bytes(Box<str>),
    /// A wide decimal's unscaled value, as 16 big-endian bytes.
    Wide(i128),
}

/// The cell of `column` for `value` (Null when the field is missing).
pub fn cell(column: &ParquetColumn, value: Value) -> Result<Cell, String> {
    if matches!(value, Value::Null) {
        return if column.nullable {
            Ok(Cell::Null)
        } else {
            Err(format!("column `{}` is not nullable, and field `{}` is missing or null", column.name, column.path))
        };
    }
    let wrong = |v: &Value| format!("column `{}` is {}, and field `{}` is {v}", column.name, expected(column.kind), column.path);
    match column.kind {
        ParquetType::Int32 => integer(&value).and_then(|i| i32::try_from(i).ok()).map(Cell::Int32).ok_or_else(|| wrong(&value)),
        ParquetType::Int64 => integer(&value).map(Cell::Int64).ok_or_else(|| wrong(&value)),
        ParquetType::Double => value.as_f64().map(Cell::Double).ok_or_else(|| wrong(&value)),
        ParquetType::Bool => match value {
            Value::Bool(b) => Ok(Cell::Bool(b)),
            other => Err(wrong(&other)),
        },
        ParquetType::Utf8 => match value {
            Value::Str(s) => Ok(Cell::Bytes(s)),
            other => Err(wrong(&other)),
        },
        ParquetType::Date => match &value {
            Value::Str(s) => days_of(s).map(Cell::Int32).ok_or_else(|| wrong(&value)),
            _ => Err(wrong(&value)),
        },
        ParquetType::Timestamp(unit) => timestamp(&value, unit).map(Cell::Int64).ok_or_else(|| wrong(&value)),
        ParquetType::Decimal { precision, scale } => {
            let text = match &value {
                Value::Int(i) => i.to_string(),
                // The shortest text that reads back as this f64: what the JSON said.
                Value::Float(f) if f.is_finite() => f.to_string(),
                Value::Decimal(d) | Value::Str(d) => d.to_string(),
                _ => return Err(wrong(&value)),
            };
            let unscaled = unscaled(&text, precision, scale).map_err(|why| {
                format!("column `{}` is decimal({precision}, {scale}), and field `{}` is {value}: {why}", column.name, column.path)
            })?;
            Ok(match precision {
                1..=9 => Cell::Int32(unscaled as i32),
                10..=18 => Cell::Int64(unscaled as i64),
                _ => Cell::Wide(unscaled),
            })
        }
    }
}

fn expected(kind: ParquetType) -> &'static str {
    match kind {
        ParquetType::Int32 => "int32 (an integer from -2147483648 to 2147483647)",
        ParquetType::Int64 => "int64 (an integer that fits 64 bits)",
        ParquetType::Double => "double (a number)",
        ParquetType::Utf8 => "utf8 (a string)",
        ParquetType::Bool => "bool (true or false)",
        ParquetType::Date => "date (a string `YYYY-MM-DD`)",
        ParquetType::Timestamp(_) => {
            "a timestamp (integer epoch time in the column's unit, or an RFC 3339 string, in years 1678 to 2261 for unit ns)"
        }
        ParquetType::Decimal { .. } => "decimal",
    }
}

/// An integer, also when written `3.0`; None past 64 bits or with a fraction.
fn integer(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        // Below 2^63 in magnitude, every integral f64 is an exact i64.
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.223_372_036_854_775_807e18 => Some(*f as i64),
        _ => None,
    }
}

fn timestamp(v: &Value, unit: TimeUnit) -> Option<i64> {
    if let Value::Str(s) = v {
        let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
        let per = match unit {
            TimeUnit::Millis => 1_000_000,
            TimeUnit::Micros => 1_000,
            TimeUnit::Nanos => 1,
        };
        return i64::try_from(t.unix_timestamp_nanos().div_euclid(per)).ok();
    }
    integer(v)
}

/// Days since 1970-01-01 of a `YYYY-MM-DD` date.
fn days_of(text: &str) -> Option<i32> {
    let b = text.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num =
        |r: std::ops::Range<usize>| text.get(r)?.bytes().try_fold(0i64, |n, c| c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0')));
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&m) || d < 1 || d > month_days[(m - 1) as usize] {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm), March-based years.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    i32::try_from(era * 146_097 + doe - 719_468).ok()
}

/// The unscaled integer of decimal `text` at `scale`, or why it does not fit
/// `precision` digits (digits past the scale are refused unless zeros).
pub fn unscaled(text: &str, precision: u8, scale: u8) -> Result<i128, String> {
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], body[at + 1..].parse::<i32>().map_err(|_| "not a decimal number".to_string())?),
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit()) {
        return Err("not a decimal number".into());
    }
    // digits × 10^(exponent − frac.len()), shifted to `scale` places.
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let shift = i64::from(exponent) - frac.len() as i64 + i64::from(scale);
    let (kept, dropped) = if shift >= 0 {
        (digits.to_string() + &"0".repeat(shift.min(64) as usize), "")
    } else {
        let cut = digits.len().saturating_sub(shift.unsigned_abs() as usize);
        (digits[..cut].to_string(), &digits[cut..])
    };
    if dropped.bytes().any(|c| c != b'0') {
        return Err(format!("it has more than {scale} digits after the point"));
    }
    let kept = kept.trim_start_matches('0');
    if kept.len() > usize::from(precision) {
        return Err(format!("it has more than {} digits before the point", precision - scale));
    }
    // At most 38 digits: fits an i128.
    let n: i128 = if kept.is_empty() { 0 } else { kept.parse().map_err(|_| "not a decimal number".to_string())? };
    Ok(if negative { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(kind: ParquetType, nullable: bool) -> ParquetColumn {
        ParquetColumn { name: "c".into(), path: "f".into(), kind, nullable }
    }

    #[test]
    fn integers_fit_their_width_or_are_refused() {
        let c = col(ParquetType::Int32, true);
        assert_eq!(cell(&c, Value::Int(7)), Ok(Cell::Int32(7)));
        assert_eq!(cell(&c, Value::Float(3.0)), Ok(Cell::Int32(3)));
        assert!(cell(&c, Value::Int(1 << 40)).unwrap_err().contains("int32"));
        assert!(cell(&c, Value::Float(1.5)).is_err());
        assert!(cell(&c, Value::Str("7".into())).is_err());
        let c = col(ParquetType::Int64, false);
        assert_eq!(cell(&c, Value::Int(i64::MIN)), Ok(Cell::Int64(i64::MIN)));
        assert!(cell(&c, Value::Decimal("9223372036854775808".into())).is_err());
        assert!(cell(&c, Value::Float(9.3e18)).is_err());
        assert!(cell(&c, Value::Null).unwrap_err().contains("not nullable"));
        assert_eq!(cell(&col(ParquetType::Int64, true), Value::Null), Ok(Cell::Null));
    }

    #[test]
    fn decimals_are_exact_or_refused() {
        assert_eq!(unscaled("12.5", 5, 2), Ok(1250));
        assert_eq!(unscaled("-0.01", 5, 2), Ok(-1));
        assert_eq!(unscaled("1.2300", 5, 2), Ok(123));
        assert_eq!(unscaled("1e2", 5, 2), Ok(10000));
        assert_eq!(unscaled("125e-2", 5, 2), Ok(125));
        assert_eq!(unscaled("0", 1, 0), Ok(0));
        assert!(unscaled("1.234", 5, 2).unwrap_err().contains("more than 2 digits after"));
        assert!(unscaled("1000", 5, 2).unwrap_err().contains("more than 3 digits before"));
        assert!(unscaled("1e99999", 38, 0).is_err());
        assert!(unscaled("abc", 5, 2).is_err());
        assert!(unscaled(".", 5, 2).is_err());
        assert_eq!(unscaled("99999999999999999999999999999999999999", 38, 0), Ok(99_999_999_999_999_999_999_999_999_999_999_999_999));
        let wide = col(ParquetType::Decimal { precision: 30, scale: 3 }, true);
        assert_eq!(cell(&wide, Value::Decimal("123456789012345678901.5".into())), Ok(Cell::Wide(123_456_789_012_345_678_901_500)));
        let narrow = col(ParquetType::Decimal { precision: 9, scale: 2 }, true);
        assert_eq!(cell(&narrow, Value::Float(0.1)), Ok(Cell::Int32(10)));
        assert_eq!(cell(&narrow, Value::Str("19.99".into())), Ok(Cell::Int32(1999)));
    }

    #[test]
    fn dates_and_timestamps() {
        assert_eq!(days_of("1970-01-01"), Some(0));
        assert_eq!(days_of("2026-12-03"), Some(20_790));
        assert_eq!(days_of("1969-12-31"), Some(-1));
        assert_eq!(days_of("2024-02-29"), Some(19_782));
        assert_eq!(days_of("2023-02-29"), None);
        assert_eq!(days_of("2023-13-01"), None);
        assert_eq!(days_of("2023-1-01"), None);
        let us = col(ParquetType::Timestamp(TimeUnit::Micros), true);
        assert_eq!(cell(&us, Value::Str("1970-01-01T00:00:01.5Z".into())), Ok(Cell::Int64(1_500_000)));
        assert_eq!(cell(&us, Value::Int(42)), Ok(Cell::Int64(42)));
        let ns = col(ParquetType::Timestamp(TimeUnit::Nanos), true);
        assert!(cell(&ns, Value::Str("9999-01-01T00:00:00Z".into())).is_err(), "past what i64 nanoseconds hold");
        assert!(cell(&us, Value::Str("yesterday".into())).is_err());
    }
}

//! Durations as written in pipeline files: `500ms`, `10s`, `2m`, `1h 30m`.

use std::time::Duration;

/// Parse a human-written duration such as `500ms`, `10s`, `2m`, `1h` or
/// `1h 30m`. A bare number is refused: the unit must always be written.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    const EXPECTED: &str = "expected a number with a unit, e.g. `500ms`, `10s`, `1h 30m`";
    let t = s.trim();
    if t.is_empty() {
        return Err(format!("empty duration: {EXPECTED}"));
    }
    humantime::parse_duration(t).map_err(|e| format!("invalid duration `{s}` ({e}): {EXPECTED}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration(" 0s "), Ok(Duration::ZERO));
    }

    #[test]
    fn refuses_missing_or_unknown_units() {
        assert!(parse_duration("10").unwrap_err().contains("expected a number with a unit"));
        assert!(parse_duration("10 parsecs").unwrap_err().contains("invalid duration `10 parsecs`"));
        assert!(parse_duration("").unwrap_err().starts_with("empty duration"));
        assert!(parse_duration("-1s").is_err());
    }
}

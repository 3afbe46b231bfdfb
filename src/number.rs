//! Exact JSON numbers: which `Value` a number literal becomes, and the
//! canonical decimal text of the numbers neither an i64 nor an f64 holds.
//!
//! A literal is read by its exact decimal value. An integer literal (no
//! fraction, no exponent) is an `Int` if it fits an i64, else a `Decimal`
//! of its digits, so integers stay integers at any size. Any other literal
//! is a `Float` when its value is the shortest round-trip decimal of the f64
//! nearest to it (`0.1`, `1.5e300`, `2.0`); otherwise it is a `Decimal`
//! holding its canonical text (`0.10000000000000000001`). A `Float` stands
//! for its shortest decimal (which is how it prints), so keys, which encode
//! that exact value (`Value::encode_key`), are equal exactly when the
//! values are.

/// An exact number as a literal reads: the integer, the f64 whose shortest
/// decimal it is, or else its canonical decimal text. (`types::Value` has
/// one variant for each.)
#[derive(Debug, Clone, PartialEq)]
pub enum Number {
    Int(i64),
    Float(f64),
    Decimal(Box<str>),
}

/// Nonzero literals with a decimal exponent beyond this are refused (out of
/// range): they would be infinite or zero as f64 anyway.
const MAX_EXPONENT: i64 = 1_000_000;
/// Integers up to this many digits print as plain digits, longer values in
/// scientific notation.
const PLAIN_DIGITS: i64 = 40;

/// A number literal: value = (-1 if neg) × digits × 10^exp, `digits` without
/// leading or trailing zeros (empty for zero).
struct Parts<'a> {
    neg: bool,
    int: &'a [u8],
    frac: &'a [u8],
    exp: i64,
}

/// Split a literal written in strict JSON number grammar; None otherwise.
fn parts(text: &str) -> Option<Parts<'_>> {
    let b = text.as_bytes();
    let mut i = 0;
    let neg = b.first() == Some(&b'-');
    i += neg as usize;
    let digits = |i: usize| b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    let n = digits(i);
    if n == 0 || (n > 1 && b[i] == b'0') {
        return None;
    }
    let int = &b[i..i + n];
    i += n;
    let mut frac: &[u8] = &[];
    if b.get(i) == Some(&b'.') {
        let n = digits(i + 1);
        if n == 0 {
            return None;
        }
        frac = &b[i + 1..i + 1 + n];
        i += 1 + n;
    }
    let mut exp: i64 = 0;
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        let eneg = b.get(i) == Some(&b'-');
        if let Some(b'-' | b'+') = b.get(i) {
            i += 1;
        }
        let n = digits(i);
        if n == 0 {
            return None;
        }
        for &c in &b[i..i + n] {
            exp = (exp * 10 + (c - b'0') as i64).min(10 * MAX_EXPONENT);
        }
        if eneg {
            exp = -exp;
        }
        i += n;
    }
    (i == b.len()).then_some(Parts { neg, int, frac, exp })
}

/// The canonical text of a literal's value: plain digits for an integer of
/// at most `PLAIN_DIGITS` digits, `d.ddde±N` otherwise; `0` for zero.
/// Equal values give equal text. None if the exponent is out of range.
fn canonical(p: &Parts) -> Option<String> {
    let all: Vec<u8> = p.int.iter().chain(p.frac).copied().collect();
    let lead = all.iter().take_while(|&&c| c == b'0').count();
    let trail = all.iter().rev().take_while(|&&c| c == b'0').count();
    if lead == all.len() {
        return Some("0".into());
    }
    let sig = &all[lead..all.len() - trail];
    // value = sig × 10^exp
    let exp = p.exp - p.frac.len() as i64 + trail as i64;
    if exp.abs() > MAX_EXPONENT {
        return None;
    }
    let mut s = String::with_capacity(sig.len() + 8);
    if p.neg {
        s.push('-');
    }
    if exp >= 0 && sig.len() as i64 + exp <= PLAIN_DIGITS {
        s.extend(sig.iter().map(|&c| c as char));
        s.extend(std::iter::repeat_n('0', exp as usize));
    } else {
        s.push(sig[0] as char);
        if sig.len() > 1 {
            s.push('.');
            s.extend(sig[1..].iter().map(|&c| c as char));
        }
        s.push('e');
        s.push_str(&(exp + sig.len() as i64 - 1).to_string());
    }
    Some(s)
}

/// The canonical text of the shortest decimal that reads back as `x`.
pub fn canonical_f64(x: f64) -> String {
    let text = format!("{x:e}");
    parts(&text).and_then(|p| canonical(&p)).unwrap_or(text)
}

/// The value of a JSON number literal; None if it is not one, or out of range
/// (an f64 would be infinite, or the exponent is absurd).
pub fn parse(text: &str) -> Option<Number> {
    let p = parts(text)?;
    let x: f64 = text.parse().ok()?;
    if !x.is_finite() {
        return None;
    }
    if p.frac.is_empty() && text.len() == p.int.len() + p.neg as usize {
        return Some(match text.parse::<i64>() {
            Ok(i) => Number::Int(i),
            Err(_) => Number::Decimal(canonical(&p)?.into()),
        });
    }
    // Up to 15 significant digits always read back from the nearest normal
    // f64 (DBL_DIG): the common case needs no comparison.
    let sig = p.int.iter().chain(p.frac).skip_while(|&&c| c == b'0').count();
    if sig <= 15 && (x.is_normal() || sig == 0) {
        return Some(Number::Float(x));
    }
    let text = canonical(&p)?;
    Some(if text == canonical_f64(x) { Number::Float(x) } else { Number::Decimal(text.into()) })
}

/// The `Number` of an exact integer (e.g. an integer sum): `Int` when it
/// fits an i64, else the `Decimal` of its digits (as the literal reads).
pub fn from_i128(i: i128) -> Number {
    match i64::try_from(i) {
        Ok(i) => Number::Int(i),
        Err(_) => Number::Decimal(i.to_string().into()),
    }
}

/// How a `Decimal` (canonical text) is keyed: Some(i) if it is an integer
/// that fits an i64, else Some(x) as `Err` if it is the shortest decimal of
/// the f64 `x` (keyed like that `Float`), else None (keyed by its text).
pub fn decimal_key(text: &str) -> Option<Result<i64, f64>> {
    if let Some(i) = canonical_i64(text) {
        return Some(Ok(i));
    }
    let x: f64 = text.parse().ok()?;
    (x.is_finite() && canonical_f64(x) == text).then_some(Err(x))
}

/// The integer a canonical text stands for, if it is one that fits an i64.
pub fn canonical_i64(text: &str) -> Option<i64> {
    text.parse().ok()
}

/// The integer an f64 stands for (its shortest decimal), if that is an
/// integer that fits an i64: `9e15` is 9000000000000000, `2^60` as an f64
/// prints (and so is) 1152921504606847000.
pub fn f64_as_i64(x: f64) -> Option<i64> {
    if x.fract() != 0.0 || !x.is_finite() {
        return None;
    }
    // Below 1e16 an integral f64 is its own shortest decimal.
    if x.abs() < 1.0e16 {
        return Some(x as i64);
    }
    canonical_i64(&canonical_f64(x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Number::{Decimal as D, Float as F, Int as I};

    fn v(text: &str) -> Number {
        parse(text).unwrap_or_else(|| panic!("{text} should parse"))
    }

    #[test]
    fn literals_become_int_float_or_decimal_by_exact_value() {
        assert_eq!(v("1"), I(1));
        assert_eq!(v("-0"), I(0), "an integer -0 is the integer 0, not -0.0");
        assert_eq!(v("-9223372036854775808"), I(i64::MIN));
        assert_eq!(v("1.0"), F(1.0));
        assert_eq!(v("0.1"), F(0.1));
        assert_eq!(v("9e15"), F(9e15));
        assert_eq!(v("1e20"), F(1e20));
        assert_eq!(v("100000000000000000000"), D("100000000000000000000".into()), "integers stay integers");
        assert_eq!(v("9223372036854775808"), D("9223372036854775808".into()));
        assert_eq!(v("18446744073709551614"), D("18446744073709551614".into()));
        assert_eq!(v("18446744073709551616"), D("18446744073709551616".into()));
        assert_eq!(v("18446744073709551616.0"), D("18446744073709551616".into()), "2^64, but not the shortest decimal of the f64 2^64");
        assert_eq!(v("1.8446744073709552e19"), F(18446744073709551616.0));
        assert_eq!(v("0.10000000000000000001"), D("1.0000000000000000001e-1".into()));
        assert_eq!(v("12345678901234567890123456789012345678901234567"), D("1.2345678901234567890123456789012345678901234567e46".into()));
        assert_eq!(v("1e-400"), D("1e-400".into()), "underflows to 0.0 but is not zero");
        assert_eq!(v("0e-400"), F(0.0));
        assert_eq!(v("-0.0"), F(-0.0));
    }

    #[test]
    fn equal_values_have_equal_canonical_text() {
        let same = [
            ["18446744073709551614", "1.8446744073709551614e19", "184467440737095516140e-1"],
            ["0.10000000000000000001", "1.0000000000000000001E-1", "0.100000000000000000010"],
        ];
        for group in same {
            let first = v(group[0]);
            for t in group {
                assert_eq!(v(t), first, "{t}");
            }
        }
        assert_ne!(v("9223372036854775808"), v("9223372036854775809"));
    }

    #[test]
    fn invalid_or_out_of_range_literals_are_refused() {
        for t in ["", "-", "01", "1.", ".5", "+1", "1e", "1e+", "0x10", "1 ", "inf", "NaN", "1e400", "-1e309", "1e-99999999999"] {
            assert_eq!(parse(t), None, "{t}");
        }
    }

    #[test]
    fn integer_sums_beyond_i64_stay_exact() {
        assert_eq!(from_i128(5), I(5));
        assert_eq!(from_i128(i64::MAX as i128 + 1), D("9223372036854775808".into()));
        assert_eq!(from_i128(i128::MIN), D(i128::MIN.to_string().into()));
    }
}

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

use std::cmp::Ordering;

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

/// The total order on numbers (`Int`, `Float`, `Decimal` as `Number`s):
/// by exact value first (a `Float` stands for its shortest decimal), then,
/// for equal values, by type: `Int` < `Decimal` < `Float`, and `-0.0` <
/// `0.0`. So `max(100, 1e2)` is `1e2` and `min(0, -0.0, 0.0)` is `0`
/// whatever the order of the inputs.
pub fn total_cmp(a: &Number, b: &Number) -> Ordering {
    value_cmp(a, b).then_with(|| rank(a).cmp(&rank(b))).then_with(|| match (a, b) {
        (Number::Float(x), Number::Float(y)) => x.is_sign_positive().cmp(&y.is_sign_positive()),
        _ => Ordering::Equal,
    })
}

fn rank(n: &Number) -> u8 {
    match n {
        Number::Int(_) => 0,
        Number::Decimal(_) => 1,
        Number::Float(_) => 2,
    }
}

/// The f64 nearest to a number (a `Decimal` is within the f64 range).
fn approx(n: &Number) -> f64 {
    match n {
        Number::Int(i) => *i as f64,
        Number::Float(x) => *x,
        Number::Decimal(d) => d.parse().unwrap_or(0.0),
    }
}

/// The order of exact values. Rounding to f64 is monotone, so unequal
/// approximations decide; equal ones compare the canonical decimals.
fn value_cmp(a: &Number, b: &Number) -> Ordering {
    match (a, b) {
        (Number::Int(x), Number::Int(y)) => return x.cmp(y),
        (Number::Float(x), Number::Float(y)) => return x.partial_cmp(y).unwrap_or(Ordering::Equal),
        _ => {}
    }
    let (x, y) = (approx(a), approx(b));
    if x != y {
        return x.partial_cmp(&y).unwrap_or(Ordering::Equal);
    }
    canonical_cmp(&canonical_of(a), &canonical_of(b))
}

fn canonical_of(n: &Number) -> String {
    match n {
        Number::Int(i) => i.to_string(),
        Number::Float(x) => canonical_f64(*x),
        Number::Decimal(d) => d.to_string(),
    }
}

/// Compare two canonical decimal texts (`0`, plain digits, `d.ddde±N`) by value.
fn canonical_cmp(a: &str, b: &str) -> Ordering {
    let (an, ad, ae) = sci(a);
    let (bn, bd, be) = sci(b);
    let (a_zero, b_zero) = (ad.is_empty(), bd.is_empty());
    let sign = |neg: bool, zero: bool| {
        if zero {
            0
        } else if neg {
            -1
        } else {
            1
        }
    };
    let (sa, sb) = (sign(an, a_zero), sign(bn, b_zero));
    if sa != sb || sa == 0 {
        return sa.cmp(&sb);
    }
    // Same sign: magnitude by the leading digit's exponent, then the digits
    // (no trailing zeros, so a proper prefix is smaller).
    let magnitude = ae.cmp(&be).then_with(|| ad.cmp(&bd));
    if sa < 0 {
        magnitude.reverse()
    } else {
        magnitude
    }
}

/// (negative, significant digits without trailing zeros, exponent of the
/// leading digit) of a canonical text; no digits for zero.
fn sci(t: &str) -> (bool, Vec<u8>, i64) {
    let (neg, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let (mant, exp) = match t.split_once('e') {
        Some((m, e)) => (m, e.parse::<i64>().unwrap_or(0)),
        None => (t, t.len() as i64 - 1),
    };
    let mut digits: Vec<u8> = mant.bytes().filter(u8::is_ascii_digit).collect();
    while digits.last() == Some(&b'0') {
        digits.pop();
    }
    if digits.first() == Some(&b'0') {
        digits.clear();
    }
    (neg, digits, exp)
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
    fn numbers_have_one_total_order() {
        // Issue 34 #1: exact value first, then Int < Decimal < Float, -0.0 < 0.0.
        let ascending = [
            v("-1e300"),
            v("-9223372036854775809"),
            I(i64::MIN),
            v("-1"),
            v("-1.0"),
            v("-0.10000000000000000001"),
            v("-0.1"),
            v("-1e-400"),
            I(0),
            F(-0.0),
            F(0.0),
            v("1e-400"),
            v("0.1"),
            v("0.10000000000000000001"),
            I(100),
            F(100.0),
            I(9007199254740992),
            F(9007199254740992.0),
            I(9007199254740993),
            I(i64::MAX),
            v("9223372036854775808"),
            v("9223372036854775809"),
            // 2^63 as an f64 prints (and is) 9223372036854776000.
            F(9223372036854775808.0),
            v("1e300"),
        ];
        for (i, a) in ascending.iter().enumerate() {
            for (j, b) in ascending.iter().enumerate() {
                assert_eq!(total_cmp(a, b), i.cmp(&j), "{a:?} vs {b:?}");
            }
        }
        // A Float stands for its shortest decimal: 2^60 as an f64 is 1152921504606847000.
        assert_eq!(total_cmp(&I(1152921504606846976), &F(1152921504606846976.0)), Ordering::Less);
    }

    #[test]
    fn integer_sums_beyond_i64_stay_exact() {
        assert_eq!(from_i128(5), I(5));
        assert_eq!(from_i128(i64::MAX as i128 + 1), D("9223372036854775808".into()));
        assert_eq!(from_i128(i128::MIN), D(i128::MIN.to_string().into()));
    }
}

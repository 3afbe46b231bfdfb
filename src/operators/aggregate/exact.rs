//! Exact arithmetic for sums: a float part that keeps the exact sum of its
//! f64 inputs in 16 bytes while their exponents stay close, and an exact
//! value of any size (`Exact`) for what does not fit (kept in the
//! accumulator's exact tail, see `accumulator.rs`).
//!
//! Every finite f64 is m × 2^e with integers |m| < 2^53 and e ≥ -1074, and
//! every integer input is such a value with e = 0, so sums of them are exact
//! in this form; the result is rounded once, to nearest (ties to even),
//! whatever the order of the inputs.

use num_bigint::{BigInt, Sign};

/// The float part of a sum: n × 2^e with |n| < `N_LIMIT`, in 16 bytes
/// (n as 14-byte LE two's complement, e as i16). `e == NON_FINITE`: an
/// infinite or NaN input was seen; n's low 8 bytes are the f64 of the
/// non-finite sum (finite inputs no longer change it).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FloatPart {
    n: i128,
    e: i16,
}

/// |n| stays below this, so n fits 14 bytes (i112) with room to add once more.
const N_LIMIT: i128 = 1 << 110;
const NON_FINITE: i16 = i16::MIN;

/// x = m × 2^e exactly (x finite).
fn decompose(x: f64) -> (i128, i16) {
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i16;
    let frac = (bits & ((1 << 52) - 1)) as i128;
    let (m, e) = if exp == 0 { (frac, -1074) } else { (frac | (1 << 52), exp - 1075) };
    (if x.is_sign_negative() { -m } else { m }, e)
}

impl FloatPart {
    pub fn read(b: &[u8]) -> FloatPart {
        let mut n = [0u8; 16];
        n[..14].copy_from_slice(&b[..14]);
        // Sign-extend the 14-byte integer.
        let n = i128::from_le_bytes(n) << 16 >> 16;
        FloatPart { n, e: i16::from_le_bytes([b[14], b[15]]) }
    }

    pub fn write(self, b: &mut [u8]) {
        b[..14].copy_from_slice(&self.n.to_le_bytes()[..14]);
        b[14..16].copy_from_slice(&self.e.to_le_bytes());
    }

    fn non_finite(&self) -> Option<f64> {
        (self.e == NON_FINITE).then(|| f64::from_bits(self.n as u64))
    }

    /// Add `x`; Some(v) when this part could not hold the sum: v (the part's
    /// old value) goes to the exact tail, and the part restarts with `x`.
    pub fn add(&mut self, x: f64) -> Option<Exact> {
        if let Some(s) = self.non_finite() {
            self.n = (s + x).to_bits() as i128;
            return None;
        }
        if !x.is_finite() {
            *self = FloatPart { n: x.to_bits() as i128, e: NON_FINITE };
            return None;
        }
        if x == 0.0 {
            return None;
        }
        let (m, e) = decompose(x);
        self.add_scaled(m, e)
    }

    /// Add m × 2^e (|m| < 2^110).
    fn add_scaled(&mut self, m: i128, e: i16) -> Option<Exact> {
        if self.n == 0 {
            *self = FloatPart { n: m, e };
            return None;
        }
        if e >= self.e {
            let shift = (e - self.e) as u32;
            if shift < 57 && m.unsigned_abs() < (1u128 << 53) {
                let n = self.n + (m << shift);
                if n.abs() < N_LIMIT {
                    self.n = n;
                    return None;
                }
            }
        } else {
            let shift = (self.e - e) as u32;
            if shift < 110 && self.n.unsigned_abs() < (N_LIMIT as u128) >> shift {
                let n = (self.n << shift) + m;
                if n.abs() < N_LIMIT {
                    *self = FloatPart { n, e };
                    return None;
                }
            }
        }
        let out = self.exact();
        *self = FloatPart { n: m, e };
        Some(out)
    }

    /// Add another float part (a merge); Some as for `add`.
    pub fn merge(&mut self, other: FloatPart) -> Option<Exact> {
        match (self.non_finite(), other.non_finite()) {
            (Some(a), Some(b)) => self.n = (a + b).to_bits() as i128,
            (None, Some(_)) => *self = other,
            (Some(_), None) => {}
            (None, None) if other.n == 0 => {}
            (None, None) => {
                if other.n.unsigned_abs() < (1u128 << 53) {
                    return self.add_scaled(other.n, other.e);
                }
                return Some(other.exact());
            }
        }
        None
    }

    /// The exact finite value (0 for a non-finite part).
    pub fn exact(&self) -> Exact {
        if self.e == NON_FINITE || self.n == 0 {
            return Exact::zero();
        }
        Exact { n: BigInt::from(self.n), e: self.e as i32 }
    }

    /// The f64 of a part that saw an infinite or NaN input.
    pub fn non_finite_value(&self) -> Option<f64> {
        self.non_finite()
    }

    /// The part holding x (for adopting a sum written as f64s).
    pub fn of(x: f64) -> (FloatPart, Option<Exact>) {
        let mut p = FloatPart::default();
        let spill = p.add(x);
        (p, spill)
    }
}

/// An exact value n × 2^e (e ≥ -1074; integers have e ≥ 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Exact {
    n: BigInt,
    e: i32,
}

impl Exact {
    pub fn zero() -> Exact {
        Exact { n: BigInt::ZERO, e: 0 }
    }

    pub fn is_zero(&self) -> bool {
        self.n.sign() == Sign::NoSign
    }

    pub fn int(i: i128) -> Exact {
        Exact { n: BigInt::from(i), e: 0 }
    }

    /// The integer a canonical decimal text stands for (`12`, `1.5e40`), if
    /// it is one (numbers read from JSON are below 2^1024).
    pub fn parse_integer(text: &str) -> Option<Exact> {
        let (neg, t) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let n = match t.split_once('e') {
            None => BigInt::parse_bytes(t.as_bytes(), 10)?,
            Some((mant, exp)) => {
                let exp: i64 = exp.parse().ok()?;
                let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
                let zeros = u32::try_from(exp - frac.len() as i64).ok().filter(|&z| z <= 400)?;
                let digits = format!("{int}{frac}");
                BigInt::parse_bytes(digits.as_bytes(), 10)? * BigInt::from(10u8).pow(zeros)
            }
        };
        Some(Exact { n: if neg { -n } else { n }, e: 0 })
    }

    pub fn add(&mut self, other: &Exact) {
        if other.is_zero() {
            return;
        }
        if self.is_zero() {
            *self = other.clone();
            return;
        }
        let e = self.e.min(other.e);
        let a = std::mem::take(&mut self.n) << (self.e - e) as usize;
        let b = other.n.clone() << (other.e - e) as usize;
        *self = Exact { n: a + b, e };
    }

    /// The value as an integer, if it is one.
    pub fn as_integer(&self) -> Option<BigInt> {
        if self.e >= 0 {
            return Some(self.n.clone() << self.e as usize);
        }
        let shift = (-self.e) as u64;
        (self.is_zero() || self.n.trailing_zeros().is_some_and(|z| z >= shift)).then(|| self.n.clone() >> shift as usize)
    }

    /// The f64 nearest to the value (ties to even); infinite beyond the
    /// f64 range.
    pub fn to_f64(&self) -> f64 {
        let (sign, mag) = (self.n.sign(), self.n.magnitude());
        let bits = mag.bits() as i64;
        if bits == 0 {
            return 0.0;
        }
        // The lowest bit of `mag` an f64 can keep: 53 significant bits, and
        // nothing below 2^-1074.
        let keep = (bits - 53).max(-1074 - self.e as i64);
        let (q, exp) = if keep <= 0 {
            (mag.clone(), self.e as i64)
        } else {
            let k = keep as u64;
            let q = mag >> k;
            let rem = mag - (&q << k);
            let half = num_bigint::BigUint::from(1u8) << (k - 1);
            let up = rem > half || (rem == half && q.bit(0));
            (if up { q + 1u8 } else { q }, self.e as i64 + keep)
        };
        // q ≤ 2^53: exact as an f64.
        let q = q.to_u64_digits().first().copied().unwrap_or(0) as f64;
        let x = ldexp(q, exp);
        if sign == Sign::Minus {
            -x
        } else {
            x
        }
    }

    /// Payload bytes: e (i32 LE) ++ n (signed LE bytes); empty for zero.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if self.is_zero() {
            return;
        }
        out.extend_from_slice(&self.e.to_le_bytes());
        out.extend_from_slice(&self.n.to_signed_bytes_le());
    }

    /// None if `b` is not a payload `encode` writes.
    pub fn decode(b: &[u8]) -> Option<Exact> {
        if b.is_empty() {
            return Some(Exact::zero());
        }
        let e = i32::from_le_bytes(b.get(..4)?.try_into().ok()?);
        let n = BigInt::from_signed_bytes_le(b.get(4..).filter(|r| !r.is_empty())?);
        Some(Exact { n, e })
    }
}

/// q × 2^exp for a q the result can hold exactly (or infinity beyond).
fn ldexp(mut q: f64, mut exp: i64) -> f64 {
    while exp > 0 {
        let s = exp.min(1000);
        q *= f64::powi(2.0, s as i32);
        exp -= s;
    }
    while exp < 0 {
        // Steps that stay normal until the last, so only the last rounds
        // (and the value was cut to what it can hold).
        let s = exp.max(-1000);
        q *= f64::powi(2.0, s as i32);
        exp -= s;
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(xs: &[f64]) -> f64 {
        let (mut p, mut tail) = (FloatPart::default(), Exact::zero());
        for &x in xs {
            if let Some(spill) = p.add(x) {
                tail.add(&spill);
            }
        }
        let mut b = [0u8; 16];
        p.write(&mut b);
        assert_eq!(FloatPart::read(&b), p, "the part round-trips its bytes");
        if let Some(v) = p.non_finite_value() {
            return v;
        }
        tail.add(&p.exact());
        tail.to_f64()
    }

    #[test]
    fn float_sums_are_exact_then_rounded_once_in_any_order() {
        // Issue 34 #6: Infinity, -Infinity or 1.0 depending on the order.
        let xs = [1e308, 1e308, -1e308, -1e308, 1.0];
        let orders = [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [0, 2, 1, 3, 4], [2, 3, 0, 1, 4], [0, 1, 4, 2, 3]];
        for o in orders {
            assert_eq!(sum(&o.map(|i| xs[i])), 1.0, "{o:?}");
        }
        assert_eq!(sum(&[0.1, 0.2, 0.3]), sum(&[0.3, 0.2, 0.1]));
        assert_eq!(sum(&[0.1, 0.2, 0.3]), 0.6);
        assert_eq!(sum(&[1e16, 1.0, -1e16, 1.0]), 2.0);
        assert_eq!(sum(&[1e308, 1e308]), f64::INFINITY);
        assert_eq!(sum(&[-1e308, -1e308]), f64::NEG_INFINITY);
        assert_eq!(sum(&[5e-324, 5e-324, -5e-324]), 5e-324, "subnormals are exact");
        assert_eq!(sum(&[1e-320, 1e300, -1e300]), 1e-320);
        assert_eq!(sum(&[f64::INFINITY, 1.0]), f64::INFINITY);
        assert!(sum(&[f64::INFINITY, f64::NEG_INFINITY]).is_nan());
        // Ties round to even: 2^53 + 1 is halfway between 2^53 and 2^53 + 2.
        assert_eq!(sum(&[9007199254740992.0, 1.0]), 9007199254740992.0);
        assert_eq!(sum(&[9007199254740992.0, 1.0, 1.0]), 9007199254740994.0);
    }

    #[test]
    fn a_random_sum_equals_the_exact_rational_sum_rounded() {
        // Against an independent exact sum: every input scaled to an integer
        // multiple of 2^-1074 as a BigInt, then rounded by `to_f64`.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..300 {
            let xs: Vec<f64> = (0..(next() % 40) as usize)
                .map(|_| {
                    let x = f64::from_bits(next());
                    if x.is_finite() {
                        x
                    } else {
                        (next() % 1000) as f64 - 500.5
                    }
                })
                .collect();
            let mut reference = Exact::zero();
            for &x in &xs {
                let (m, e) = decompose(x);
                reference.add(&Exact { n: BigInt::from(m), e: e as i32 });
            }
            let mut reversed = xs.clone();
            reversed.reverse();
            assert_eq!(sum(&xs).to_bits(), reference.to_f64().to_bits(), "{xs:?}");
            assert_eq!(sum(&reversed).to_bits(), reference.to_f64().to_bits(), "{xs:?}");
        }
    }

    #[test]
    fn exact_values_round_trip_and_parse_integers() {
        for text in ["0", "5", "-170141183460469231731687303715884105728", "1.5e40", "-1.2345678901234567890123e60"] {
            let v = Exact::parse_integer(text).unwrap();
            let mut b = Vec::new();
            v.encode(&mut b);
            assert_eq!(Exact::decode(&b), Some(v.clone()), "{text}");
        }
        assert_eq!(Exact::parse_integer("1.5e40").unwrap().as_integer().unwrap().to_string(), format!("15{}", "0".repeat(39)));
        assert_eq!(Exact::parse_integer("1.25e1"), None, "12.5 is no integer");
        assert_eq!(Exact::decode(&[1, 0, 0]), None);
    }
}

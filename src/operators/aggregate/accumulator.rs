//! Aggregate accumulators, kept and updated directly in their byte encoding.
//!
//! A key's (or window's) accumulators are one byte string: one fixed-width
//! slot per aggregate function, in the order of `spec.aggregates`. All-zero
//! bytes are the empty state of every slot, so a new accumulator is just
//! `width()` zeros. The layout is fixed (no version byte); changing it
//! orphans saved state. Numbers are little-endian.
//!
//! | function | width | layout |
//! |---|---|---|
//! | count | 8 | u64 count |
//! | sum, min, max | 9 | tag u8 (0 = no value yet, 1 = Int, 2 = Float) + i64 or f64 bits |
//! | avg | 16 | u64 count + f64 sum |
//!
//! Semantics: count counts records (with a field: its non-null values); sum
//! stays Int while every input is an integer and nothing overflows, then
//! turns Float; min/max keep the input's type (Int stays Int); avg is Float.
//! Nulls and non-numbers are skipped; over no values the result is Null
//! (count gives 0).

use crate::config::{AggFunc, AggregateFn};
use crate::types::Value;

/// The slots of one aggregate spec: where each function reads and writes.
#[derive(Debug, Clone)]
pub struct Accumulators {
    slots: Vec<Slot>,
    width: usize,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    func: AggFunc,
    /// Index of the input field; None for `count` of records.
    input: Option<usize>,
    offset: usize,
}

/// A number read from input or from a slot.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn of(v: &Value) -> Option<Num> {
        match v {
            Value::Int(i) => Some(Num::Int(*i)),
            Value::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }

    fn f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    fn value(self) -> Value {
        match self {
            Num::Int(i) => Value::Int(i),
            Num::Float(f) => Value::Float(f),
        }
    }

    /// True if `self` is strictly less than `other`.
    fn lt(self, other: Num) -> bool {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a < b,
            (a, b) => a.f64() < b.f64(),
        }
    }
}

// Slot tags; 0 (all-zero bytes) means no value yet.
const TAG_INT: u8 = 1;
const TAG_FLOAT: u8 = 2;

fn width_of(func: AggFunc) -> usize {
    match func {
        AggFunc::Count => 8,
        AggFunc::Sum | AggFunc::Min | AggFunc::Max => 9,
        AggFunc::Avg => 16,
    }
}

fn rd_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn wr_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn rd_num(b: &[u8], at: usize) -> Option<Num> {
    let bits = rd_u64(b, at + 1);
    match b[at] {
        TAG_INT => Some(Num::Int(bits as i64)),
        TAG_FLOAT => Some(Num::Float(f64::from_bits(bits))),
        _ => None,
    }
}

fn wr_num(b: &mut [u8], at: usize, n: Num) {
    let (tag, bits) = match n {
        Num::Int(i) => (TAG_INT, i as u64),
        Num::Float(f) => (TAG_FLOAT, f.to_bits()),
    };
    b[at] = tag;
    wr_u64(b, at + 1, bits);
}

fn sum(acc: Option<Num>, n: Num) -> Num {
    match (acc, n) {
        (None, n) => n,
        (Some(Num::Int(a)), Num::Int(b)) => match a.checked_add(b) {
            Some(s) => Num::Int(s),
            None => Num::Float(a as f64 + b as f64),
        },
        (Some(a), b) => Num::Float(a.f64() + b.f64()),
    }
}

impl Accumulators {
    /// Resolve each function's input field in `input_fields`.
    pub fn new(aggregates: &[AggregateFn], input_fields: &[String]) -> Result<Accumulators, String> {
        let mut slots = Vec::with_capacity(aggregates.len());
        let mut width = 0;
        for a in aggregates {
            let input = match &a.field {
                Some(f) => {
                    Some(input_fields.iter().position(|n| n == f).ok_or_else(|| format!("aggregate `{}`: unknown field `{f}`", a.alias))?)
                }
                None if a.func == AggFunc::Count => None,
                None => return Err(format!("aggregate `{}`: {:?} needs a field", a.alias, a.func)),
            };
            slots.push(Slot { func: a.func, input, offset: width });
            width += width_of(a.func);
        }
        Ok(Accumulators { slots, width })
    }

    /// The byte length of an encoded accumulator set.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Reset `buf` to the empty accumulators.
    pub fn init(&self, buf: &mut Vec<u8>) {
        buf.clear();
        buf.resize(self.width, 0);
    }

    /// Fold one record's fields into `acc` (of length `width()`).
    pub fn add(&self, acc: &mut [u8], fields: &[Value]) {
        for s in &self.slots {
            let input = s.input.and_then(|i| fields.get(i));
            let at = s.offset;
            match s.func {
                AggFunc::Count => {
                    let counts = s.input.is_none() || !matches!(input, None | Some(Value::Null));
                    if counts {
                        wr_u64(acc, at, rd_u64(acc, at).wrapping_add(1));
                    }
                }
                func => {
                    if let Some(n) = input.and_then(Num::of) {
                        self.fold(func, acc, at, n, 1);
                    }
                }
            }
        }
    }

    /// Merge the accumulators `from` into `into` (both of length `width()`).
    pub fn merge(&self, into: &mut [u8], from: &[u8]) {
        for s in &self.slots {
            let at = s.offset;
            match s.func {
                AggFunc::Count => wr_u64(into, at, rd_u64(into, at).wrapping_add(rd_u64(from, at))),
                AggFunc::Avg => {
                    let count = rd_u64(from, at);
                    if count > 0 {
                        self.fold(AggFunc::Avg, into, at, Num::Float(f64::from_bits(rd_u64(from, at + 8))), count);
                    }
                }
                func => {
                    if let Some(n) = rd_num(from, at) {
                        self.fold(func, into, at, n, 1);
                    }
                }
            }
        }
    }

    /// Fold the number `n` (for avg: a sum over `count` values) into a slot.
    fn fold(&self, func: AggFunc, acc: &mut [u8], at: usize, n: Num, count: u64) {
        match func {
            AggFunc::Count => wr_u64(acc, at, rd_u64(acc, at).wrapping_add(count)),
            AggFunc::Sum => wr_num(acc, at, sum(rd_num(acc, at), n)),
            AggFunc::Min => match rd_num(acc, at) {
                Some(cur) if !n.lt(cur) => {}
                _ => wr_num(acc, at, n),
            },
            AggFunc::Max => match rd_num(acc, at) {
                Some(cur) if !cur.lt(n) => {}
                _ => wr_num(acc, at, n),
            },
            AggFunc::Avg => {
                wr_u64(acc, at, rd_u64(acc, at).wrapping_add(count));
                wr_u64(acc, at + 8, (f64::from_bits(rd_u64(acc, at + 8)) + n.f64()).to_bits());
            }
        }
    }

    /// Append one output value per function, in spec order.
    pub fn finish(&self, acc: &[u8], out: &mut Vec<Value>) {
        for s in &self.slots {
            let at = s.offset;
            out.push(match s.func {
                AggFunc::Count => Value::Int(rd_u64(acc, at).min(i64::MAX as u64) as i64),
                AggFunc::Sum | AggFunc::Min | AggFunc::Max => rd_num(acc, at).map_or(Value::Null, Num::value),
                AggFunc::Avg => match rd_u64(acc, at) {
                    0 => Value::Null,
                    n => Value::Float(f64::from_bits(rd_u64(acc, at + 8)) / n as f64),
                },
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accs(fns: &[(AggFunc, Option<&str>)]) -> Accumulators {
        let spec: Vec<AggregateFn> = fns
            .iter()
            .enumerate()
            .map(|(i, (func, field))| AggregateFn { func: *func, field: field.map(String::from), alias: format!("a{i}") })
            .collect();
        Accumulators::new(&spec, &["x".into(), "y".into()]).unwrap()
    }

    fn run(a: &Accumulators, xs: &[Value]) -> Vec<Value> {
        let mut acc = Vec::new();
        a.init(&mut acc);
        for x in xs {
            a.add(&mut acc, &[x.clone(), Value::Null]);
        }
        let mut out = Vec::new();
        a.finish(&acc, &mut out);
        out
    }

    use AggFunc::*;
    use Value::{Float as F, Int as I, Null};

    #[test]
    fn every_function_over_ints_floats_and_nulls() {
        let a = accs(&[(Count, None), (Count, Some("x")), (Sum, Some("x")), (Min, Some("x")), (Max, Some("x")), (Avg, Some("x"))]);
        assert_eq!(a.width(), 8 + 8 + 9 + 9 + 9 + 16);
        assert_eq!(run(&a, &[I(3), Null, I(-2), I(5)]), vec![I(4), I(3), I(6), I(-2), I(5), F(2.0)]);
        assert_eq!(run(&a, &[I(3), F(0.5), Null]), vec![I(3), I(2), F(3.5), F(0.5), I(3), F(1.75)]);
        // No non-null values: Null everywhere, counts 0 (count of records still counts).
        assert_eq!(run(&a, &[Null, Null]), vec![I(2), I(0), Null, Null, Null, Null]);
        assert_eq!(run(&a, &[]), vec![I(0), I(0), Null, Null, Null, Null]);
    }

    #[test]
    fn min_max_keep_the_input_type() {
        let a = accs(&[(Min, Some("x")), (Max, Some("x"))]);
        assert_eq!(run(&a, &[F(2.5), I(2), I(7), F(6.5)]), vec![I(2), I(7)]);
        assert_eq!(run(&a, &[I(i64::MAX), I(i64::MAX - 1)]), vec![I(i64::MAX - 1), I(i64::MAX)], "ints compare exactly");
    }

    #[test]
    fn int_sum_turns_float_on_overflow() {
        let a = accs(&[(Sum, Some("x"))]);
        assert_eq!(run(&a, &[I(i64::MAX - 1), I(1)]), vec![I(i64::MAX)]);
        assert_eq!(run(&a, &[I(i64::MAX), I(1), I(-5)]), vec![F(i64::MAX as f64 + 1.0 - 5.0)]);
        assert_eq!(run(&a, &[I(i64::MIN), I(-1)]), vec![F(i64::MIN as f64 - 1.0)]);
    }

    #[test]
    fn merge_equals_adding_everything_to_one() {
        let a = accs(&[(Count, None), (Count, Some("x")), (Sum, Some("x")), (Min, Some("x")), (Max, Some("x")), (Avg, Some("x"))]);
        let (left, right) = ([I(4), Null, F(1.5)], [I(-3), I(10), Null]);
        let (mut l, mut r) = (Vec::new(), Vec::new());
        a.init(&mut l);
        a.init(&mut r);
        left.iter().for_each(|x| a.add(&mut l, std::slice::from_ref(x)));
        right.iter().for_each(|x| a.add(&mut r, std::slice::from_ref(x)));
        a.merge(&mut l, &r);
        let mut merged = Vec::new();
        a.finish(&l, &mut merged);
        let all: Vec<Value> = left.iter().chain(&right).cloned().collect();
        assert_eq!(merged, run(&a, &all));
        // Merging an empty accumulator changes nothing.
        let mut e = Vec::new();
        a.init(&mut e);
        a.merge(&mut l, &e);
        let mut again = Vec::new();
        a.finish(&l, &mut again);
        assert_eq!(again, merged);
    }

    #[test]
    fn missing_or_unknown_fields_are_errors() {
        let f = |func, field: Option<&str>| vec![AggregateFn { func, field: field.map(String::from), alias: "a".into() }];
        assert!(Accumulators::new(&f(Sum, None), &["x".into()]).is_err());
        assert!(Accumulators::new(&f(Max, Some("nope")), &["x".into()]).is_err());
        assert!(Accumulators::new(&f(Count, None), &[]).is_ok());
    }
}

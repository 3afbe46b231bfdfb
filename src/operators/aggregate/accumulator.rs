//! Aggregate accumulators, kept and updated directly in their byte encoding.
//!
//! A key's (or window's) accumulators are one byte string: one fixed-width
//! slot per aggregate function, in the order of `spec.aggregates`. All-zero
//! bytes are the empty state of every slot, so a new accumulator is just
//! `width()` zeros. The layout is fixed (no version byte); the one layout
//! before it (`legacy_width()`, 9-byte sums and 16-byte avgs) is still read
//! and upgraded by `adopt`. Numbers are little-endian.
//!
//! | function | width | layout |
//! |---|---|---|
//! | count | 8 | u64 count |
//! | min, max | 9 | tag u8 (0 = no value yet, 1 = Int, 2 = Float) + i64 or f64 bits |
//! | sum | 33 | tag u8 (0 = no value yet, 1 = integers only, 2 = a float seen) + `Sum` |
//! | avg | 40 | u64 count + `Sum` |
//!
//! `Sum` (32 bytes) is an i128 sum of the integer inputs (exact: no order of
//! inputs can overflow it) + an f64 sum of the other inputs and its
//! Neumaier compensation (f64 bits).
//!
//! Semantics: count counts records (with a field: its non-null values, of
//! any type); sum is an exact integer while every input is an integer (an
//! `Int` if it fits an i64, else an exact `Decimal`), otherwise the float
//! nearest to the integer part plus the compensated float sum; min/max keep
//! the input's type (Int stays Int); avg is Float (exact integer sum divided
//! once). Nulls and non-numbers are skipped; over no values the result is
//! Null (count gives 0). A float sum outside the f64 range is infinite
//! (printed as the string `"Infinity"` or `"-Infinity"`).
//!
//! **Variable-width functions** (`count_distinct`, `first`, `last`,
//! `collect`; see `variable.rs`) come after the fixed slots, each as
//! `u64 LE length ++ payload`, in spec order. A spec with none of them has
//! exactly the fixed layout above (and its fast paths); with some, the
//! empty state is still all zeros (`width()` bytes: each length 0). Such
//! specs are newer than the legacy layout, so `adopt` only checks them.

use super::variable::{self, Kind};
use crate::config::{AggFunc, AggregateFn};
use crate::types::{Millis, Value};

/// The slots of one aggregate spec: where each function reads and writes.
#[derive(Debug, Clone)]
pub struct Accumulators {
    slots: Vec<Slot>,
    /// The bytes of the fixed slots.
    fixed: usize,
    /// The variable-width slots, in spec order: (kind, input field).
    vars: Vec<(Kind, usize)>,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    func: AggFunc,
    /// Index of the input field; None for `count` of records.
    input: Option<usize>,
    /// Byte offset of a fixed slot; index in `vars` of a variable one.
    offset: usize,
}

fn kind_of(func: AggFunc) -> Option<Kind> {
    match func {
        AggFunc::CountDistinct => Some(Kind::Distinct),
        AggFunc::First => Some(Kind::First),
        AggFunc::Last => Some(Kind::Last),
        AggFunc::Collect { max_items } => Some(Kind::Collect(max_items as usize)),
        AggFunc::Count | AggFunc::Sum | AggFunc::Min | AggFunc::Max | AggFunc::Avg => None,
    }
}

/// The payload at `at` of a variable tail and the offset after it.
fn payload_at(acc: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let len = usize::try_from(u64::from_le_bytes(acc.get(at..at + 8)?.try_into().ok()?)).ok()?;
    let end = (at + 8).checked_add(len)?;
    Some((acc.get(at + 8..end)?, end))
}

/// A number read from input or from a min/max slot.
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
            Value::Decimal(_) => v.as_f64().map(Num::Float),
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

/// What a sum or avg adds: integers exactly, everything else as f64.
enum Addend {
    Int(i128),
    Float(f64),
}

impl Addend {
    fn of(v: &Value) -> Option<Addend> {
        match v {
            Value::Int(i) => Some(Addend::Int(*i as i128)),
            Value::Float(f) => Some(Addend::Float(*f)),
            Value::Decimal(d) => match d.parse::<i128>() {
                Ok(i) => Some(Addend::Int(i)),
                Err(_) => v.as_f64().map(Addend::Float),
            },
            _ => None,
        }
    }
}

/// The `Sum` part of a sum or avg slot: exact integer part, compensated float part.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sum {
    int: i128,
    float: f64,
    comp: f64,
}

const SUM_WIDTH: usize = 32;

impl Sum {
    fn read(b: &[u8], at: usize) -> Sum {
        let mut i = [0u8; 16];
        i.copy_from_slice(&b[at..at + 16]);
        Sum { int: i128::from_le_bytes(i), float: f64::from_bits(rd_u64(b, at + 16)), comp: f64::from_bits(rd_u64(b, at + 24)) }
    }

    fn write(self, b: &mut [u8], at: usize) {
        b[at..at + 16].copy_from_slice(&self.int.to_le_bytes());
        wr_u64(b, at + 16, self.float.to_bits());
        wr_u64(b, at + 24, self.comp.to_bits());
    }

    /// Neumaier's compensated addition of `x` to the float part.
    fn add_float(&mut self, x: f64) {
        let t = self.float + x;
        if !t.is_finite() {
            // Overflow (or an infinite input): the compensation means nothing any more.
            self.float = t;
            self.comp = 0.0;
            return;
        }
        if self.float.abs() >= x.abs() {
            self.comp += (self.float - t) + x;
        } else {
            self.comp += (x - t) + self.float;
        }
        self.float = t;
    }

    fn add(&mut self, a: Addend) {
        match a {
            // 2^64 inputs of at most 2^63 each stay below 2^127: never saturates.
            Addend::Int(i) => self.int = self.int.saturating_add(i),
            Addend::Float(f) => self.add_float(f),
        }
    }

    fn merge(&mut self, other: Sum) {
        self.int = self.int.saturating_add(other.int);
        self.add_float(other.float);
        self.add_float(other.comp);
    }

    /// The f64 nearest to the whole sum (float part rounded once more).
    fn total(self) -> f64 {
        let hi = self.int as f64;
        let lo = (self.int - hi as i128) as f64;
        let mut s = Sum { int: 0, float: self.float, comp: self.comp };
        s.add_float(hi);
        s.add_float(lo);
        s.float + s.comp
    }

    /// The mean over `n` values.
    fn mean(self, n: u64) -> f64 {
        let n128 = n as i128;
        if self.float == 0.0 && self.comp == 0.0 {
            // Integers only: divide exactly, round once.
            let (q, r) = (self.int / n128, self.int % n128);
            return q as f64 + r as f64 / n as f64;
        }
        self.total() / n as f64
    }
}

// Slot tags; 0 (all-zero bytes) means no value yet.
const TAG_INT: u8 = 1;
const TAG_FLOAT: u8 = 2;

fn width_of(func: AggFunc) -> usize {
    match func {
        // Variable: the empty payload's length.
        AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } => 0,
        AggFunc::Count => 8,
        AggFunc::Min | AggFunc::Max => 9,
        AggFunc::Sum => 1 + SUM_WIDTH,
        AggFunc::Avg => 8 + SUM_WIDTH,
    }
}

/// The width of a slot in the layout before exact sums.
fn legacy_width_of(func: AggFunc) -> usize {
    match func {
        // Never in the legacy layout.
        AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } => 0,
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

impl Accumulators {
    /// Resolve each function's input field in `input_fields`.
    pub fn new(aggregates: &[AggregateFn], input_fields: &[String]) -> Result<Accumulators, String> {
        let mut slots = Vec::with_capacity(aggregates.len());
        let mut width = 0;
        let mut vars = Vec::new();
        for a in aggregates {
            let input = match &a.field {
                Some(f) => {
                    Some(input_fields.iter().position(|n| n == f).ok_or_else(|| format!("aggregate `{}`: unknown field `{f}`", a.alias))?)
                }
                None if a.func == AggFunc::Count => None,
                None => return Err(format!("aggregate `{}`: {:?} needs a field", a.alias, a.func)),
            };
            match (kind_of(a.func), input) {
                (Some(kind), Some(i)) => {
                    slots.push(Slot { func: a.func, input, offset: vars.len() });
                    vars.push((kind, i));
                }
                _ => {
                    slots.push(Slot { func: a.func, input, offset: width });
                    width += width_of(a.func);
                }
            }
        }
        Ok(Accumulators { slots, fixed: width, vars })
    }

    /// The byte length of the empty accumulator set; of every set when
    /// `is_fixed()`.
    pub fn width(&self) -> usize {
        self.fixed + 8 * self.vars.len()
    }

    /// True if every set has the same length (no variable-width function).
    pub fn is_fixed(&self) -> bool {
        self.vars.is_empty()
    }

    /// Which outputs (in spec order) are JSON text to write as is (`collect`'s arrays).
    pub fn json_outputs(&self) -> Vec<bool> {
        self.slots.iter().map(|s| matches!(s.func, AggFunc::Collect { .. })).collect()
    }

    /// The length of the accumulator set at the start of `bytes`, or None
    /// if it cannot be one.
    pub fn encoded_len(&self, bytes: &[u8]) -> Option<usize> {
        let mut at = self.fixed;
        if bytes.len() < at {
            return None;
        }
        for _ in &self.vars {
            at = payload_at(bytes, at)?.1;
        }
        Some(at)
    }

    /// True if `acc` is exactly one well-formed set of this layout.
    pub fn is_valid(&self, acc: &[u8]) -> bool {
        if self.is_fixed() {
            return acc.len() == self.fixed;
        }
        let mut at = self.fixed;
        for _ in &self.vars {
            match payload_at(acc, at) {
                Some((p, next)) if variable::items(p).is_some() => at = next,
                _ => return false,
            }
        }
        at == acc.len() && acc.len() >= self.fixed
    }

    /// Reset `buf` to the empty accumulators.
    pub fn init(&self, buf: &mut Vec<u8>) {
        buf.clear();
        buf.resize(self.width(), 0);
    }

    /// Fold one record (its fields and event time) into the well-formed set `acc`.
    pub fn add(&self, acc: &mut Vec<u8>, fields: &[Value], ts: Option<Millis>) {
        self.add_in_place(&mut acc[..], fields);
        if self.vars.is_empty() {
            return;
        }
        // Without event time (a running aggregate's input may have none) values order by their JSON text alone.
        let ts = ts.unwrap_or(Millis::MIN);
        let (mut tail, mut one, mut at) = (Vec::with_capacity(acc.len() - self.fixed + 64), Vec::new(), self.fixed);
        for &(kind, input) in &self.vars {
            let Some((payload, next)) = payload_at(acc, at) else { return };
            let len_at = tail.len();
            tail.extend_from_slice(&[0; 8]);
            match fields.get(input) {
                None | Some(Value::Null) => tail.extend_from_slice(payload),
                Some(v) => {
                    variable::single(kind, v, ts, &mut one);
                    if !variable::merge(kind, payload, &one, &mut tail) {
                        return;
                    }
                }
            }
            let len = (tail.len() - len_at - 8) as u64;
            tail[len_at..len_at + 8].copy_from_slice(&len.to_le_bytes());
            at = next;
        }
        acc.truncate(self.fixed);
        acc.extend_from_slice(&tail);
    }

    /// Fold one record's fields into the fixed slots of `acc`: all of it
    /// when `is_fixed()`, which may then be a slice of a session list.
    pub fn add_in_place(&self, acc: &mut [u8], fields: &[Value]) {
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
                AggFunc::Sum => {
                    if let Some(a) = input.and_then(Addend::of) {
                        acc[at] = acc[at].max(if matches!(a, Addend::Int(_)) { TAG_INT } else { TAG_FLOAT });
                        let mut sum = Sum::read(acc, at + 1);
                        sum.add(a);
                        sum.write(acc, at + 1);
                    }
                }
                AggFunc::Avg => {
                    if let Some(a) = input.and_then(Addend::of) {
                        wr_u64(acc, at, rd_u64(acc, at).wrapping_add(1));
                        let mut sum = Sum::read(acc, at + 8);
                        sum.add(a);
                        sum.write(acc, at + 8);
                    }
                }
                AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } => {}
                func => {
                    if let Some(n) = input.and_then(Num::of) {
                        self.fold(func, acc, at, n);
                    }
                }
            }
        }
    }

    /// Merge the well-formed sets `from` into `into`.
    pub fn merge(&self, into: &mut Vec<u8>, from: &[u8]) {
        self.merge_fixed(&mut into[..], from);
        if self.vars.is_empty() {
            return;
        }
        let (mut tail, mut at, mut from_at) = (Vec::new(), self.fixed, self.fixed);
        for &(kind, _) in &self.vars {
            let (Some((a, next)), Some((b, from_next))) = (payload_at(into, at), payload_at(from, from_at)) else { return };
            let len_at = tail.len();
            tail.extend_from_slice(&[0; 8]);
            if !variable::merge(kind, a, b, &mut tail) {
                return;
            }
            let len = (tail.len() - len_at - 8) as u64;
            tail[len_at..len_at + 8].copy_from_slice(&len.to_le_bytes());
            (at, from_at) = (next, from_next);
        }
        into.truncate(self.fixed);
        into.extend_from_slice(&tail);
    }

    fn merge_fixed(&self, into: &mut [u8], from: &[u8]) {
        for s in &self.slots {
            let at = s.offset;
            match s.func {
                AggFunc::Count => wr_u64(into, at, rd_u64(into, at).wrapping_add(rd_u64(from, at))),
                AggFunc::Sum => {
                    into[at] = into[at].max(from[at]);
                    let mut sum = Sum::read(into, at + 1);
                    sum.merge(Sum::read(from, at + 1));
                    sum.write(into, at + 1);
                }
                AggFunc::Avg => {
                    wr_u64(into, at, rd_u64(into, at).wrapping_add(rd_u64(from, at)));
                    let mut sum = Sum::read(into, at + 8);
                    sum.merge(Sum::read(from, at + 8));
                    sum.write(into, at + 8);
                }
                AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } => {}
                func => {
                    if let Some(n) = rd_num(from, at) {
                        self.fold(func, into, at, n);
                    }
                }
            }
        }
    }

    /// Fold the number `n` into a min or max slot.
    fn fold(&self, func: AggFunc, acc: &mut [u8], at: usize, n: Num) {
        match func {
            AggFunc::Min => match rd_num(acc, at) {
                Some(cur) if !n.lt(cur) => {}
                _ => wr_num(acc, at, n),
            },
            AggFunc::Max => match rd_num(acc, at) {
                Some(cur) if !cur.lt(n) => {}
                _ => wr_num(acc, at, n),
            },
            _ => {}
        }
    }

    /// The byte length of an accumulator set written in the layout before
    /// exact sums (9-byte sum, 16-byte avg).
    pub fn legacy_width(&self) -> usize {
        self.slots.iter().map(|s| legacy_width_of(s.func)).sum()
    }

    /// Make `acc` an accumulator set of this layout: true if it is one, or
    /// was one of the legacy layout (upgraded in place); false otherwise.
    pub fn adopt(&self, acc: &mut Vec<u8>) -> bool {
        if !self.is_fixed() {
            return self.is_valid(acc);
        }
        if acc.len() == self.fixed {
            return true;
        }
        if acc.len() != self.legacy_width() {
            return false;
        }
        let old = std::mem::take(acc);
        self.init(acc);
        let mut from = 0;
        for s in &self.slots {
            let at = s.offset;
            match s.func {
                AggFunc::Count => acc[at..at + 8].copy_from_slice(&old[from..from + 8]),
                AggFunc::Min | AggFunc::Max => acc[at..at + 9].copy_from_slice(&old[from..from + 9]),
                AggFunc::Sum => {
                    let sum = match rd_num(&old, from) {
                        None => (0, Sum::default()),
                        Some(Num::Int(i)) => (TAG_INT, Sum { int: i as i128, ..Sum::default() }),
                        Some(Num::Float(f)) => (TAG_FLOAT, Sum { float: f, ..Sum::default() }),
                    };
                    acc[at] = sum.0;
                    sum.1.write(acc, at + 1);
                }
                AggFunc::Avg => {
                    acc[at..at + 8].copy_from_slice(&old[from..from + 8]);
                    Sum { float: f64::from_bits(rd_u64(&old, from + 8)), ..Sum::default() }.write(acc, at + 8);
                }
                AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } => {}
            }
            from += legacy_width_of(s.func);
        }
        true
    }

    /// Append one output value per function, in spec order.
    pub fn finish(&self, acc: &[u8], out: &mut Vec<Value>) {
        let mut payloads = Vec::with_capacity(self.vars.len());
        let mut at = self.fixed;
        for _ in &self.vars {
            let (p, next) = payload_at(acc, at).unwrap_or((&[][..], at));
            payloads.push(p);
            at = next;
        }
        for s in &self.slots {
            let at = s.offset;
            if let Some(kind) = kind_of(s.func) {
                out.push(variable::finish(kind, payloads.get(at).copied().unwrap_or_default()));
                continue;
            }
            out.push(match s.func {
                AggFunc::Count => Value::Int(rd_u64(acc, at).min(i64::MAX as u64) as i64),
                AggFunc::Min | AggFunc::Max => rd_num(acc, at).map_or(Value::Null, Num::value),
                AggFunc::Sum => match acc[at] {
                    TAG_INT => crate::number::from_i128(Sum::read(acc, at + 1).int).into(),
                    TAG_FLOAT => Value::Float(Sum::read(acc, at + 1).total()),
                    _ => Value::Null,
                },
                AggFunc::Avg => match rd_u64(acc, at) {
                    0 => Value::Null,
                    n => Value::Float(Sum::read(acc, at + 8).mean(n)),
                },
                AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } => Value::Null,
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
            a.add(&mut acc, &[x.clone(), Value::Null], None);
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
        assert_eq!(a.width(), 8 + 8 + 33 + 9 + 9 + 40);
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
    fn int_sum_is_exact_whatever_the_order() {
        // Issue 18 #5: `MAX, 1, -5` turned into a lossy float, `1, -5, MAX` did not.
        let a = accs(&[(Sum, Some("x")), (Avg, Some("x"))]);
        let want = vec![I(i64::MAX - 4), F((i64::MAX - 4) as f64 / 3.0)];
        for xs in [[I(i64::MAX), I(1), I(-5)], [I(1), I(-5), I(i64::MAX)], [I(-5), I(i64::MAX), I(1)]] {
            assert_eq!(run(&a, &xs), want, "{xs:?}");
        }
        // Beyond i64 the sum stays an exact integer.
        assert_eq!(run(&a, &[I(i64::MAX), I(1)])[0], Value::Decimal("9223372036854775808".into()));
        assert_eq!(run(&a, &[I(i64::MIN), I(-1)])[0], Value::Decimal("-9223372036854775809".into()));
        assert_eq!(run(&a, &[Value::Decimal("18446744073709551614".into()), I(-18)])[0], Value::Decimal("18446744073709551596".into()));
        assert_eq!(run(&a, &[I(0), I(0)])[0], I(0));
    }

    #[test]
    fn avg_divides_the_exact_integer_sum() {
        let a = accs(&[(Avg, Some("x"))]);
        let two53 = 1i64 << 53;
        assert_eq!(run(&a, &[I(two53), I(1), I(1), I(1), I(1)]), vec![F(1801439850948199.2)]);
        assert_eq!(run(&a, &[I(1), I(two53), I(1), I(1), I(1)]), vec![F(1801439850948199.2)]);
        assert_eq!(run(&a, &[I(-7), I(2)]), vec![F(-2.5)]);
    }

    #[test]
    fn float_sums_are_compensated_and_overflow_to_infinity() {
        let a = accs(&[(Sum, Some("x"))]);
        assert_eq!(run(&a, &[F(1e16), F(1.0), F(-1e16), F(1.0)]), vec![F(2.0)], "no cancellation loss");
        assert_eq!(run(&a, &[F(0.1), F(0.2), F(0.3)]), run(&a, &[F(0.3), F(0.2), F(0.1)]));
        assert_eq!(run(&a, &[I(1 << 60), F(0.5), I(1)]), run(&a, &[F(0.5), I(1), I(1 << 60)]));
        // 1e308 + 1e308 is out of the f64 range: infinite, printed as such (not `null`).
        let out = run(&a, &[F(1e308), F(1e308)]);
        assert_eq!(out, vec![F(f64::INFINITY)]);
        assert_eq!(out[0].to_string(), "\"Infinity\"");
        assert_eq!(run(&a, &[F(-1e308), F(-1e308)])[0].to_string(), "\"-Infinity\"");
    }

    #[test]
    fn legacy_accumulators_are_adopted() {
        // The layout before exact sums: count 8, sum 9 (tag + i64/f64), max 9, avg 16 (count + f64 sum).
        let a = accs(&[(Count, None), (Sum, Some("x")), (Max, Some("x")), (Avg, Some("x")), (Sum, Some("y"))]);
        assert_eq!(a.legacy_width(), 8 + 9 + 9 + 16 + 9);
        let mut old = Vec::new();
        old.extend_from_slice(&3u64.to_le_bytes());
        old.push(TAG_INT);
        old.extend_from_slice(&(-4i64).to_le_bytes());
        old.push(TAG_INT);
        old.extend_from_slice(&7i64.to_le_bytes());
        old.extend_from_slice(&2u64.to_le_bytes());
        old.extend_from_slice(&5.0f64.to_bits().to_le_bytes());
        old.push(TAG_FLOAT);
        old.extend_from_slice(&1.5f64.to_bits().to_le_bytes());
        assert!(a.adopt(&mut old));
        assert_eq!(old.len(), a.width());
        a.add(&mut old, &[I(1), F(0.5)], None);
        let mut out = Vec::new();
        a.finish(&old, &mut out);
        assert_eq!(out, vec![I(4), I(-3), I(7), F(2.0), F(2.0)]);
        assert!(!a.adopt(&mut vec![0; 5]));
    }

    #[test]
    fn merge_equals_adding_everything_to_one() {
        let a = accs(&[(Count, None), (Count, Some("x")), (Sum, Some("x")), (Min, Some("x")), (Max, Some("x")), (Avg, Some("x"))]);
        let (left, right) = ([I(4), Null, F(1.5)], [I(-3), I(10), Null]);
        let (mut l, mut r) = (Vec::new(), Vec::new());
        a.init(&mut l);
        a.init(&mut r);
        left.iter().for_each(|x| a.add(&mut l, std::slice::from_ref(x), None));
        right.iter().for_each(|x| a.add(&mut r, std::slice::from_ref(x), None));
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

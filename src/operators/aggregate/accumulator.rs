//! Aggregate accumulators, kept and updated directly in their byte encoding.
//!
//! A key's (or window's) accumulators are one byte string: one fixed-width
//! slot per aggregate function, in the order of `spec.aggregates`, then the
//! variable payloads, then the exact tails (below). All-zero bytes are the
//! empty state of every part, so a new accumulator is just `width()` zeros.
//! There is no version byte: the two layouts before this one are told apart
//! by length and still read (`adopt`). Numbers are little-endian.
//!
//! | function | width | layout |
//! |---|---|---|
//! | count | 8 | u64 count |
//! | min, max | 9 | tag u8 (0 = no value yet, 1 = Int, 2 = Float, 3 = Decimal: its text in the exact tail) + i64 or f64 bits (a Decimal's nearest f64) |
//! | sum | 33 | tag u8 (0 = no value yet, 1 = integers only, 2 = a float seen) + `Sum` |
//! | avg | 40 | u64 count + `Sum` |
//!
//! `Sum` (32 bytes) is an i128 sum of the integer inputs + the float part
//! (`exact::FloatPart`: the exact sum of the other inputs while it fits 16
//! bytes). What does not fit either goes to the slot's exact tail, so the
//! whole sum is exact: an integer at any size while every input is an
//! integer, else the f64 nearest to the exact sum (rounded once, whatever
//! the order). min/max keep the input's type and pick by the total order on
//! numbers (`number::total_cmp`); avg is Float (the exact sum divided
//! once). Nulls and non-numbers are skipped; over no values the result is
//! Null (count gives 0). A float sum outside the f64 range is infinite
//! (printed as the string `"Infinity"` or `"-Infinity"`).
//!
//! **Variable-width functions** (`count_distinct`, `first`, `last`,
//! `collect`; see `variable.rs`) come after the fixed slots, each as
//! `u64 LE length ++ payload`, in spec order. **Exact tails** follow, one per
//! sum, avg, min and max in spec order, framed the same way: empty, or a
//! sum's overflow (`exact::Exact`), or a min/max Decimal's canonical text.
//!
//! Older layouts (`adopt`): before exact tails ("v2") the same fixed slots
//! and variable payloads with nothing after them, and the float part was an
//! f64 sum and its Neumaier compensation; before that ("v1", fixed slots
//! only) a sum was 9 bytes and an avg 16 (`legacy_width()`).

use super::exact::{Exact, FloatPart};
use super::variable::{self, Kind};
use crate::config::{AggFunc, AggregateFn};
use crate::number::{total_cmp, Number};
use crate::types::{Millis, Value};

/// The slots of one aggregate spec: where each function reads and writes.
#[derive(Debug, Clone)]
pub struct Accumulators {
    slots: Vec<Slot>,
    /// The bytes of the fixed slots.
    fixed: usize,
    /// The variable-width slots, in spec order: (kind, input field).
    vars: Vec<(Kind, usize)>,
    /// How many slots have an exact tail (sum, avg, min, max).
    exact: usize,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    func: AggFunc,
    /// Index of the input field; None for `count` of records.
    input: Option<usize>,
    /// Byte offset of a fixed slot; index in `vars` of a variable one.
    offset: usize,
    /// Index of its exact tail (sum, avg, min, max).
    tail: usize,
}

fn kind_of(func: AggFunc) -> Option<Kind> {
    match func {
        AggFunc::CountDistinct => Some(Kind::Distinct),
        AggFunc::First => Some(Kind::First),
        AggFunc::Last => Some(Kind::Last),
        AggFunc::Collect { max_items } => Some(Kind::Collect(max_items as usize)),
        AggFunc::ApproxCountDistinct => Some(Kind::Approx),
        AggFunc::Count | AggFunc::Sum | AggFunc::Min | AggFunc::Max | AggFunc::Avg => None,
    }
}

fn has_tail(func: AggFunc) -> bool {
    matches!(func, AggFunc::Sum | AggFunc::Avg | AggFunc::Min | AggFunc::Max)
}

/// The payload at `at` of a variable tail and the offset after it.
fn payload_at(acc: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let len = usize::try_from(u64::from_le_bytes(acc.get(at..at + 8)?.try_into().ok()?)).ok()?;
    let end = (at + 8).checked_add(len)?;
    Some((acc.get(at + 8..end)?, end))
}

fn push_payload(p: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(p.len() as u64).to_le_bytes());
    out.extend_from_slice(p);
}

/// What a sum or avg adds: integers exactly (beyond i128 as `Exact`), floats as f64.
enum Addend {
    Int(i128),
    Big(Exact),
    Float(f64),
}

impl Addend {
    fn of(v: &Value) -> Option<Addend> {
        match v {
            Value::Int(i) => Some(Addend::Int(*i as i128)),
            Value::Float(f) => Some(Addend::Float(*f)),
            Value::Decimal(d) => match d.parse::<i128>() {
                Ok(i) => Some(Addend::Int(i)),
                Err(_) => match Exact::parse_integer(d) {
                    Some(e) => Some(Addend::Big(e)),
                    // A fraction with more digits than an f64 holds: its nearest f64.
                    None => v.as_f64().map(Addend::Float),
                },
            },
            _ => None,
        }
    }

    fn is_int(&self) -> bool {
        !matches!(self, Addend::Float(_))
    }
}

/// The `Sum` part of a sum or avg slot.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sum {
    int: i128,
    float: FloatPart,
}

const SUM_WIDTH: usize = 32;

impl Sum {
    fn read(b: &[u8], at: usize) -> Sum {
        let mut i = [0u8; 16];
        i.copy_from_slice(&b[at..at + 16]);
        Sum { int: i128::from_le_bytes(i), float: FloatPart::read(&b[at + 16..at + 32]) }
    }

    fn write(self, b: &mut [u8], at: usize) {
        b[at..at + 16].copy_from_slice(&self.int.to_le_bytes());
        self.float.write(&mut b[at + 16..at + 32]);
    }

    /// Add `a`; what does not fit goes to `spill` (the exact tail).
    fn add(&mut self, a: Addend, spill: &mut Option<Exact>) {
        match a {
            Addend::Int(i) => match self.int.checked_add(i) {
                Some(s) => self.int = s,
                None => {
                    add_spill(spill, Exact::int(self.int));
                    self.int = i;
                }
            },
            Addend::Big(e) => add_spill(spill, e),
            Addend::Float(f) => {
                if let Some(e) = self.float.add(f) {
                    add_spill(spill, e);
                }
            }
        }
    }

    fn merge(&mut self, other: Sum, spill: &mut Option<Exact>) {
        self.add(Addend::Int(other.int), spill);
        if let Some(e) = self.float.merge(other.float) {
            add_spill(spill, e);
        }
    }

    /// The exact total with the tail `tail` (Err: the f64 of a non-finite float part).
    fn total(self, tail: &[u8]) -> Result<Exact, f64> {
        if let Some(x) = self.float.non_finite_value() {
            return Err(x);
        }
        let mut t = Exact::decode(tail).unwrap_or_else(Exact::zero);
        t.add(&Exact::int(self.int));
        t.add(&self.float.exact());
        Ok(t)
    }
}

fn add_spill(spill: &mut Option<Exact>, e: Exact) {
    match spill {
        Some(s) => s.add(&e),
        None => *spill = Some(e),
    }
}

// Slot tags; 0 (all-zero bytes) means no value yet.
const TAG_INT: u8 = 1;
const TAG_FLOAT: u8 = 2;
const TAG_DECIMAL: u8 = 3;

fn width_of(func: AggFunc) -> usize {
    match func {
        // Variable: the empty payload's length.
        AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } | AggFunc::ApproxCountDistinct => 0,
        AggFunc::Count => 8,
        AggFunc::Min | AggFunc::Max => 9,
        AggFunc::Sum => 1 + SUM_WIDTH,
        AggFunc::Avg => 8 + SUM_WIDTH,
    }
}

/// The width of a slot in the v1 layout.
fn legacy_width_of(func: AggFunc) -> usize {
    match func {
        // Never in the legacy layout.
        AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } | AggFunc::ApproxCountDistinct => 0,
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

/// The number in a min/max slot (a Decimal's text read from its tail).
fn rd_num(b: &[u8], at: usize, tail: &[u8]) -> Option<Number> {
    let bits = rd_u64(b, at + 1);
    match b[at] {
        TAG_INT => Some(Number::Int(bits as i64)),
        TAG_FLOAT => Some(Number::Float(f64::from_bits(bits))),
        TAG_DECIMAL => Some(Number::Decimal(std::str::from_utf8(tail).ok()?.into())),
        _ => None,
    }
}

/// A number from input.
fn num_of(v: &Value) -> Option<Number> {
    match v {
        Value::Int(i) => Some(Number::Int(*i)),
        Value::Float(f) => Some(Number::Float(*f)),
        Value::Decimal(d) => Some(Number::Decimal(d.clone())),
        _ => None,
    }
}

/// What a record or merge changes in the exact tails, by tail index.
#[derive(Default)]
struct TailEdits(Vec<(usize, TailEdit)>);

enum TailEdit {
    /// Add to a sum's exact value.
    Add(Exact),
    /// Replace a min/max tail (a Decimal's text, or empty).
    Set(Box<[u8]>),
}

impl TailEdits {
    fn add(&mut self, tail: usize, e: Option<Exact>) {
        if let Some(e) = e {
            self.0.push((tail, TailEdit::Add(e)));
        }
    }

    /// The tail `i` after the edits, from its old payload.
    fn apply(&self, i: usize, old: &[u8], out: &mut Vec<u8>) {
        let mut value: Option<Exact> = None;
        let mut bytes: &[u8] = old;
        for (t, edit) in &self.0 {
            if *t != i {
                continue;
            }
            match edit {
                TailEdit::Add(e) => {
                    let v = value.get_or_insert_with(|| Exact::decode(old).unwrap_or_else(Exact::zero));
                    v.add(e);
                }
                TailEdit::Set(b) => bytes = b,
            }
        }
        match value {
            Some(v) => {
                let mut p = Vec::new();
                v.encode(&mut p);
                push_payload(&p, out);
            }
            None => push_payload(bytes, out),
        }
    }
}

impl Accumulators {
    /// Resolve each function's input field in `input_fields`.
    pub fn new(aggregates: &[AggregateFn], input_fields: &[String]) -> Result<Accumulators, String> {
        let mut slots = Vec::with_capacity(aggregates.len());
        let (mut width, mut exact) = (0, 0);
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
                    slots.push(Slot { func: a.func, input, offset: vars.len(), tail: 0 });
                    vars.push((kind, i));
                }
                _ => {
                    slots.push(Slot { func: a.func, input, offset: width, tail: exact });
                    width += width_of(a.func);
                    exact += has_tail(a.func) as usize;
                }
            }
        }
        Ok(Accumulators { slots, fixed: width, vars, exact })
    }

    /// The byte length of the empty accumulator set; of every set when
    /// `is_fixed()`.
    pub fn width(&self) -> usize {
        self.fixed + 8 * (self.vars.len() + self.exact)
    }

    /// The variable-width slots that are `count_distinct`: (index among
    /// the variable slots, input field).
    pub fn distinct_slots(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.vars.iter().enumerate().filter(|(_, (k, _))| *k == Kind::Distinct).map(|(i, &(_, input))| (i, input))
    }

    /// The variable-width slots that are `collect`: (index among the
    /// variable slots, input field, max_items).
    pub fn collect_slots(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        self.vars.iter().enumerate().filter_map(|(i, &(k, input))| match k {
            Kind::Collect(limit) => Some((i, input, limit)),
            _ => None,
        })
    }

    /// Whether any slot keeps its values as entries of their own in the
    /// `entries` table (`count_distinct`, `collect`).
    pub fn has_entries(&self) -> bool {
        self.vars.iter().any(|(k, _)| matches!(k, Kind::Distinct | Kind::Collect(_)))
    }

    /// The payload of variable slot `i` of the well-formed set `acc`.
    pub fn var_payload<'a>(&self, acc: &'a [u8], i: usize) -> Option<&'a [u8]> {
        let mut at = self.fixed;
        for _ in 0..i {
            at = payload_at(acc, at)?.1;
        }
        payload_at(acc, at).map(|(p, _)| p)
    }

    /// The byte range of the payload of variable slot `i` of the well-formed set `acc`.
    pub fn var_range(&self, acc: &[u8], i: usize) -> Option<std::ops::Range<usize>> {
        let mut at = self.fixed;
        for _ in 0..i {
            at = payload_at(acc, at)?.1;
        }
        let (_, end) = payload_at(acc, at)?;
        Some(at + 8..end)
    }

    /// Replace the payload of variable slot `i` of the well-formed set `acc` by `p`.
    pub fn set_var_payload(&self, acc: &mut Vec<u8>, i: usize, p: &[u8]) {
        let mut at = self.fixed;
        for _ in 0..i {
            let Some((_, next)) = payload_at(acc, at) else { return };
            at = next;
        }
        let Some((_, end)) = payload_at(acc, at) else { return };
        let mut framed = Vec::with_capacity(8 + p.len());
        push_payload(p, &mut framed);
        acc.splice(at..end, framed);
    }

    /// True if every set has the same length (count alone).
    pub fn is_fixed(&self) -> bool {
        self.vars.is_empty() && self.exact == 0
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
        for _ in 0..self.vars.len() + self.exact {
            at = payload_at(bytes, at)?.1;
        }
        Some(at)
    }

    /// The length of a set of the v2 layout (no exact tails) at the start of `bytes`.
    pub fn v2_len(&self, bytes: &[u8]) -> Option<usize> {
        let mut at = self.fixed;
        if bytes.len() < at {
            return None;
        }
        for &(kind, _) in &self.vars {
            let (p, next) = payload_at(bytes, at)?;
            if !variable::is_payload(kind, p) {
                return None;
            }
            at = next;
        }
        Some(at)
    }

    /// True if `acc` is exactly one well-formed set of this layout.
    pub fn is_valid(&self, acc: &[u8]) -> bool {
        if self.is_fixed() {
            return acc.len() == self.fixed;
        }
        let mut at = self.fixed;
        for &(kind, _) in &self.vars {
            match payload_at(acc, at) {
                Some((p, next)) if variable::is_payload(kind, p) => at = next,
                _ => return false,
            }
        }
        for s in self.slots.iter().filter(|s| has_tail(s.func)) {
            match payload_at(acc, at) {
                Some((p, next)) if tail_is_valid(s.func, p) => at = next,
                _ => return false,
            }
        }
        at == acc.len() && acc.len() >= self.fixed
    }

    /// True if `acc` is one set of this layout or of an older one (`adopt` takes it).
    pub fn is_known(&self, acc: &[u8]) -> bool {
        self.is_valid(acc) || self.v2_len(acc) == Some(acc.len()) || (self.vars.is_empty() && acc.len() == self.legacy_width())
    }

    /// The payload of each exact tail of `acc` (a well-formed set).
    fn tails<'a>(&self, acc: &'a [u8]) -> Vec<&'a [u8]> {
        let mut at = self.fixed;
        for _ in &self.vars {
            at = payload_at(acc, at).map_or(acc.len(), |(_, next)| next);
        }
        let mut out = Vec::with_capacity(self.exact);
        for _ in 0..self.exact {
            let (p, next) = payload_at(acc, at).unwrap_or((&[][..], acc.len()));
            out.push(p);
            at = next;
        }
        out
    }

    /// Reset `buf` to the empty accumulators.
    pub fn init(&self, buf: &mut Vec<u8>) {
        buf.clear();
        buf.resize(self.width(), 0);
    }

    /// Fold one record (its fields and event time) into the well-formed set `acc`.
    pub fn add(&self, acc: &mut Vec<u8>, fields: &[Value], ts: Option<Millis>) {
        let mut edits = TailEdits::default();
        {
            let (fixed, rest) = acc.split_at_mut(self.fixed);
            self.add_fixed(fixed, rest, fields, &mut edits);
        }
        if self.vars.is_empty() && edits.0.is_empty() {
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
                Some(v) if kind == Kind::Approx => super::hll::add(payload, v, &mut tail),
                // Counted by `distinct::add`, which keeps the values.
                Some(_) if matches!(kind, Kind::Distinct | Kind::Collect(_)) && variable::read_external(payload).is_some() => {
                    tail.extend_from_slice(payload)
                }
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
        for i in 0..self.exact {
            let Some((payload, next)) = payload_at(acc, at) else { return };
            edits.apply(i, payload, &mut tail);
            at = next;
        }
        acc.truncate(self.fixed);
        acc.extend_from_slice(&tail);
    }

    /// Fold one record's fields into the fixed slots of `acc` (count
    /// alone: `is_fixed()`), which may then be a slice of a session list.
    pub fn add_in_place(&self, acc: &mut [u8], fields: &[Value]) {
        let mut edits = TailEdits::default();
        self.add_fixed(acc, &[], fields, &mut edits);
    }

    /// Fold one record into the fixed slots; `rest`: the set after them
    /// (read for min/max Decimals); what the tails must take, into `edits`.
    fn add_fixed(&self, acc: &mut [u8], rest: &[u8], fields: &[Value], edits: &mut TailEdits) {
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
                        acc[at] = acc[at].max(if a.is_int() { TAG_INT } else { TAG_FLOAT });
                        let (mut sum, mut spill) = (Sum::read(acc, at + 1), None);
                        sum.add(a, &mut spill);
                        sum.write(acc, at + 1);
                        edits.add(s.tail, spill);
                    }
                }
                AggFunc::Avg => {
                    if let Some(a) = input.and_then(Addend::of) {
                        wr_u64(acc, at, rd_u64(acc, at).wrapping_add(1));
                        let (mut sum, mut spill) = (Sum::read(acc, at + 8), None);
                        sum.add(a, &mut spill);
                        sum.write(acc, at + 8);
                        edits.add(s.tail, spill);
                    }
                }
                AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } | AggFunc::ApproxCountDistinct => {}
                AggFunc::Min | AggFunc::Max => {
                    if let Some(n) = input.and_then(num_of) {
                        self.fold(s, acc, rest, n, edits);
                    }
                }
            }
        }
    }

    /// Fold the number `n` into the min or max slot `s`.
    fn fold(&self, s: &Slot, acc: &mut [u8], rest: &[u8], n: Number, edits: &mut TailEdits) {
        let at = s.offset;
        let keep = match acc[at] {
            0 => false,
            TAG_DECIMAL => {
                let cur = rd_num(acc, at, self.tail_in_rest(rest, s.tail));
                cur.is_some_and(|cur| self.keeps(s.func, &cur, &n))
            }
            _ => rd_num(acc, at, &[]).is_some_and(|cur| self.keeps(s.func, &cur, &n)),
        };
        if keep {
            return;
        }
        let (tag, bits) = match &n {
            Number::Int(i) => (TAG_INT, *i as u64),
            Number::Float(f) => (TAG_FLOAT, f.to_bits()),
            Number::Decimal(d) => (TAG_DECIMAL, d.parse::<f64>().unwrap_or(0.0).to_bits()),
        };
        let had_text = acc[at] == TAG_DECIMAL;
        acc[at] = tag;
        wr_u64(acc, at + 1, bits);
        match n {
            Number::Decimal(d) => edits.0.push((s.tail, TailEdit::Set(d.as_bytes().into()))),
            _ if had_text => edits.0.push((s.tail, TailEdit::Set(Box::default()))),
            _ => {}
        }
    }

    /// True if the current value `cur` stays (min: not above `n`; max: not below).
    fn keeps(&self, func: AggFunc, cur: &Number, n: &Number) -> bool {
        let o = total_cmp(n, cur);
        match func {
            AggFunc::Min => o.is_ge(),
            _ => o.is_le(),
        }
    }

    /// Exact tail `i` in `rest`, the bytes of a set after its fixed slots.
    fn tail_in_rest<'a>(&self, rest: &'a [u8], i: usize) -> &'a [u8] {
        let mut at = 0;
        for _ in &self.vars {
            at = payload_at(rest, at).map_or(rest.len(), |(_, next)| next);
        }
        for _ in 0..i {
            at = payload_at(rest, at).map_or(rest.len(), |(_, next)| next);
        }
        payload_at(rest, at).map_or(&[][..], |(p, _)| p)
    }

    /// Merge the well-formed sets `from` into `into`.
    pub fn merge(&self, into: &mut Vec<u8>, from: &[u8]) {
        let mut edits = TailEdits::default();
        let from_tails = self.tails(from);
        {
            let (fixed, rest) = into.split_at_mut(self.fixed);
            self.merge_fixed(fixed, rest, from, &from_tails, &mut edits);
        }
        if self.is_fixed() {
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
        for i in 0..self.exact {
            let Some((payload, next)) = payload_at(into, at) else { return };
            edits.apply(i, payload, &mut tail);
            at = next;
        }
        into.truncate(self.fixed);
        into.extend_from_slice(&tail);
    }

    fn merge_fixed(&self, into: &mut [u8], rest: &[u8], from: &[u8], from_tails: &[&[u8]], edits: &mut TailEdits) {
        for s in &self.slots {
            let at = s.offset;
            let from_tail = from_tails.get(s.tail).copied().unwrap_or_default();
            match s.func {
                AggFunc::Count => wr_u64(into, at, rd_u64(into, at).wrapping_add(rd_u64(from, at))),
                AggFunc::Sum | AggFunc::Avg => {
                    let sum_at = if s.func == AggFunc::Sum { at + 1 } else { at + 8 };
                    if s.func == AggFunc::Sum {
                        into[at] = into[at].max(from[at]);
                    } else {
                        wr_u64(into, at, rd_u64(into, at).wrapping_add(rd_u64(from, at)));
                    }
                    let (mut sum, mut spill) = (Sum::read(into, sum_at), None);
                    sum.merge(Sum::read(from, sum_at), &mut spill);
                    sum.write(into, sum_at);
                    edits.add(s.tail, spill);
                    if let Some(e) = Exact::decode(from_tail).filter(|e| !e.is_zero()) {
                        edits.add(s.tail, Some(e));
                    }
                }
                AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } | AggFunc::ApproxCountDistinct => {}
                AggFunc::Min | AggFunc::Max => {
                    if let Some(n) = rd_num(from, at, from_tail) {
                        self.fold(s, into, rest, n, edits);
                    }
                }
            }
        }
    }

    /// The byte length of an accumulator set of the v1 layout (9-byte sum,
    /// 16-byte avg).
    pub fn legacy_width(&self) -> usize {
        self.slots.iter().map(|s| legacy_width_of(s.func)).sum()
    }

    /// Make `acc` an accumulator set of this layout: true if it is one, or
    /// was one of an older layout (upgraded in place); false otherwise.
    pub fn adopt(&self, acc: &mut Vec<u8>) -> bool {
        if self.is_valid(acc) {
            return true;
        }
        if self.vars.is_empty() && acc.len() == self.legacy_width() && self.legacy_width() != self.fixed {
            self.v1_to_v2(acc);
        }
        if self.v2_len(acc) != Some(acc.len()) {
            return false;
        }
        self.v2_to_v3(acc);
        true
    }

    /// A v1 set (fixed slots only) as a v2 one: sums and avgs widened.
    fn v1_to_v2(&self, acc: &mut Vec<u8>) {
        let old = std::mem::take(acc);
        acc.resize(self.fixed, 0);
        let mut from = 0;
        for s in &self.slots {
            let at = s.offset;
            match s.func {
                AggFunc::Count => acc[at..at + 8].copy_from_slice(&old[from..from + 8]),
                AggFunc::Min | AggFunc::Max => acc[at..at + 9].copy_from_slice(&old[from..from + 9]),
                AggFunc::Sum => {
                    let bits = rd_u64(&old, from + 1);
                    let (tag, int, float) = match old[from] {
                        TAG_INT => (TAG_INT, bits as i64 as i128, 0.0),
                        TAG_FLOAT => (TAG_FLOAT, 0, f64::from_bits(bits)),
                        _ => (0, 0, 0.0),
                    };
                    acc[at] = tag;
                    write_v2_sum(acc, at + 1, int, float);
                }
                AggFunc::Avg => {
                    acc[at..at + 8].copy_from_slice(&old[from..from + 8]);
                    write_v2_sum(acc, at + 8, 0, f64::from_bits(rd_u64(&old, from + 8)));
                }
                AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } | AggFunc::ApproxCountDistinct => {}
            }
            from += legacy_width_of(s.func);
        }
    }

    /// A v2 set as this layout: each float part (an f64 sum and its
    /// compensation) made exact, and the exact tails appended.
    fn v2_to_v3(&self, acc: &mut Vec<u8>) {
        let mut tails = vec![None; self.exact];
        for s in &self.slots {
            let sum_at = match s.func {
                AggFunc::Sum => s.offset + 1,
                AggFunc::Avg => s.offset + 8,
                _ => continue,
            };
            let (float, comp) = (f64::from_bits(rd_u64(acc, sum_at + 16)), f64::from_bits(rd_u64(acc, sum_at + 24)));
            let (mut part, mut spill) = FloatPart::of(float);
            if let Some(e) = part.add(comp) {
                add_spill(&mut spill, e);
            }
            part.write(&mut acc[sum_at + 16..sum_at + 32]);
            tails[s.tail] = spill;
        }
        for t in tails {
            let mut p = Vec::new();
            if let Some(e) = t {
                e.encode(&mut p);
            }
            push_payload(&p, acc);
        }
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
        let tails = self.tails(acc);
        for s in &self.slots {
            let at = s.offset;
            if let Some(kind) = kind_of(s.func) {
                out.push(variable::finish(kind, payloads.get(at).copied().unwrap_or_default()));
                continue;
            }
            let tail = tails.get(s.tail).copied().unwrap_or_default();
            out.push(match s.func {
                AggFunc::Count => Value::Int(rd_u64(acc, at).min(i64::MAX as u64) as i64),
                AggFunc::Min | AggFunc::Max => rd_num(acc, at, tail).map_or(Value::Null, Value::from),
                AggFunc::Sum => match (acc[at], Sum::read(acc, at + 1).total(tail)) {
                    (0, _) => Value::Null,
                    (_, Err(x)) => Value::Float(x),
                    (TAG_INT, Ok(t)) => integer_value(&t),
                    (_, Ok(t)) => Value::Float(t.to_f64()),
                },
                AggFunc::Avg => match (rd_u64(acc, at), Sum::read(acc, at + 8).total(tail)) {
                    (0, _) => Value::Null,
                    (n, Err(x)) => Value::Float(x / n as f64),
                    (n, Ok(t)) => Value::Float(mean(&t, n)),
                },
                AggFunc::CountDistinct | AggFunc::First | AggFunc::Last | AggFunc::Collect { .. } | AggFunc::ApproxCountDistinct => {
                    Value::Null
                }
            });
        }
    }
}

/// Whether `p` can be the exact tail of a slot of `func`: a sum's exact
/// value, or a min/max Decimal's text (empty: none).
fn tail_is_valid(func: AggFunc, p: &[u8]) -> bool {
    p.is_empty()
        || match func {
            AggFunc::Min | AggFunc::Max => std::str::from_utf8(p).is_ok_and(|t| crate::number::parse(t).is_some()),
            _ => Exact::decode(p).is_some(),
        }
}

/// The v2 `Sum`: i128 ++ f64 sum ++ f64 compensation (zero).
fn write_v2_sum(b: &mut [u8], at: usize, int: i128, float: f64) {
    b[at..at + 16].copy_from_slice(&int.to_le_bytes());
    wr_u64(b, at + 16, float.to_bits());
    wr_u64(b, at + 24, 0);
}

/// An exact integer as a value: `Int` when it fits an i64, else the `Decimal` of its digits.
fn integer_value(t: &Exact) -> Value {
    match t.as_integer() {
        Some(i) => crate::number::parse(&i.to_string()).map_or(Value::Null, Value::from),
        None => Value::Float(t.to_f64()),
    }
}

/// The mean of `n` values summing to `t`: an integer sum divided exactly
/// and rounded once; otherwise the rounded sum divided.
fn mean(t: &Exact, n: u64) -> f64 {
    match t.as_integer().and_then(|i| i128::try_from(i).ok()) {
        // Both exact as f64s: one correctly rounded division.
        Some(int) if int.unsigned_abs() < 1 << 53 && n < 1 << 53 => int as f64 / n as f64,
        Some(int) => {
            let n128 = n as i128;
            let (q, r) = (int / n128, int % n128);
            q as f64 + r as f64 / n as f64
        }
        _ => t.to_f64() / n as f64,
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
        assert_eq!(a.width(), 8 + 8 + 33 + 9 + 9 + 40 + 4 * 8, "and an empty exact tail per sum, min, max, avg");
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

    /// Every order of `xs` (up to 6 values).
    fn orders(xs: &[Value]) -> Vec<Vec<Value>> {
        if xs.len() <= 1 {
            return vec![xs.to_vec()];
        }
        let mut out = Vec::new();
        for i in 0..xs.len() {
            let mut rest = xs.to_vec();
            let x = rest.remove(i);
            for mut o in orders(&rest) {
                o.insert(0, x.clone());
                out.push(o);
            }
        }
        out
    }

    /// The same result in every order, and merged from any split.
    #[track_caller]
    fn same_in_every_order(a: &Accumulators, xs: &[Value], want: &[Value]) {
        for o in orders(xs) {
            assert_eq!(run(a, &o), want, "{o:?}");
            for cut in 0..=o.len() {
                let (mut l, mut r) = (Vec::new(), Vec::new());
                a.init(&mut l);
                a.init(&mut r);
                o[..cut].iter().for_each(|x| a.add(&mut l, &[x.clone(), Null], None));
                o[cut..].iter().for_each(|x| a.add(&mut r, &[x.clone(), Null], None));
                a.merge(&mut l, &r);
                assert!(a.is_valid(&l));
                let mut out = Vec::new();
                a.finish(&l, &mut out);
                assert_eq!(out, want, "{o:?} merged at {cut}");
            }
        }
    }

    fn dec(t: &str) -> Value {
        crate::number::parse(t).unwrap().into()
    }

    #[test]
    fn min_max_follow_the_total_order_on_numbers() {
        // Issue 34 #1: ties across types went to the first to arrive.
        let a = accs(&[(Min, Some("x")), (Max, Some("x"))]);
        same_in_every_order(&a, &[I(9007199254740993), F(9007199254740992.0)], &[F(9007199254740992.0), I(9007199254740993)]);
        same_in_every_order(&a, &[I(i64::MAX), dec("9223372036854775808")], &[I(i64::MAX), dec("9223372036854775808")]);
        same_in_every_order(&a, &[I(0), F(-0.0), F(0.0)], &[I(0), F(0.0)]);
        same_in_every_order(&a, &[I(100), F(100.0)], &[I(100), F(100.0)]);
        // Decimals are kept exactly, and give way to a later winner.
        same_in_every_order(&a, &[dec("0.10000000000000000001"), F(0.1), dec("1e-400")], &[dec("1e-400"), dec("0.10000000000000000001")]);
        same_in_every_order(
            &a,
            &[dec("-1e-400"), dec("123456789012345678901234567890"), I(-1), I(5)],
            &[I(-1), dec("123456789012345678901234567890")],
        );
    }

    #[test]
    fn integer_sums_are_exact_beyond_i128() {
        // Issue 34 #5: saturated at i128::MAX, or turned into a float.
        let a = accs(&[(Sum, Some("x")), (Avg, Some("x"))]);
        let e38 = dec("100000000000000000000000000000000000000");
        same_in_every_order(&a, &[e38.clone(), e38.clone()], &[dec("200000000000000000000000000000000000000"), F(1e38)]);
        let max = dec(&i128::MAX.to_string());
        same_in_every_order(&a, &[max.clone(), I(1), I(-1)], &[max.clone(), F((i128::MAX / 3) as f64 + 1.0 / 3.0)]);
        let e40 = "10000000000000000000000000000000000000000";
        same_in_every_order(&a, &[dec(&format!("-{e40}")), dec(e40), I(5)], &[I(5), F(5.0 / 3.0)]);
        let big = "1500000000000000000000000000000000000000000000000000000001";
        same_in_every_order(
            &a,
            &[dec(big), dec(&format!("-{big}")), I(i64::MIN), I(i64::MIN)],
            &[dec("-18446744073709551616"), F(-4611686018427387904.0)],
        );
    }

    #[test]
    fn float_sums_are_the_exact_sum_rounded_once() {
        // Issue 34 #6: Infinity, -Infinity or 1.0 depending on the order.
        let a = accs(&[(Sum, Some("x")), (Avg, Some("x"))]);
        same_in_every_order(&a, &[F(1e308), F(1e308), F(-1e308), F(-1e308), F(1.0)], &[F(1.0), F(0.2)]);
        same_in_every_order(&a, &[F(0.1), F(0.2), F(0.3), I(1)], &[F(1.6), F(0.4)]);
        same_in_every_order(&a, &[F(1e-300), F(1e300), I(7), F(-1e300)], &[F(7.0), F(1.75)]);
    }

    #[test]
    fn sets_without_exact_tails_are_adopted() {
        // The v2 layout: sum = tag + i128 + f64 sum + f64 compensation; max 9; no tails.
        let a = accs(&[(Sum, Some("x")), (Max, Some("x")), (Count, None)]);
        let mut v2 = vec![TAG_FLOAT];
        v2.extend_from_slice(&5i128.to_le_bytes());
        v2.extend_from_slice(&1e16f64.to_bits().to_le_bytes());
        v2.extend_from_slice(&1.0f64.to_bits().to_le_bytes());
        v2.push(TAG_INT);
        v2.extend_from_slice(&9i64.to_le_bytes());
        v2.extend_from_slice(&3u64.to_le_bytes());
        assert!(!a.is_valid(&v2) && a.is_known(&v2));
        assert!(a.adopt(&mut v2));
        assert!(a.is_valid(&v2));
        a.add(&mut v2, &[F(-1e16), Null], None);
        let mut out = Vec::new();
        a.finish(&v2, &mut out);
        assert_eq!(out, vec![F(6.0), I(9), I(4)]);
        assert!(!a.is_known(&v2[..v2.len() - 1]), "a set with its last byte cut is no set");
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

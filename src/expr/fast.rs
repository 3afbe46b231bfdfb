//! A native evaluator for the simple CEL expressions most filters and maps
//! are: literals (int, double, string, bool, null), a record's top-level
//! fields, `+ - * / %`, unary `-` and `!`, comparisons, `==`, `!=`, `&&`,
//! `||`, `c ? a : b`, `x in [literals]`, and `double()`, `int()`,
//! `string()` and `size()`. It evaluates over the record's values without a
//! CEL context and without boxing them.
//!
//! Where it gives a value it is cel-rust's value (same type and value);
//! wherever cel-rust would fail (int overflow, division by zero, int and
//! double mixed in arithmetic, a condition that is not a bool, a NaN
//! compared) or the value is outside what it handles (a null field, a
//! nested value, a uint), it gives up, and cel-rust evaluates the
//! expression and says why. `tests::agrees_with_cel_rust` compares the two
//! on random expressions and records.

use std::borrow::Cow;
use std::cmp::Ordering;

use cel::common::ast::{operators as op, Expr, LiteralValue};
use cel::IdedExpr;

use crate::types::Value;

/// A value of the fast path: CEL's `null_type`, `bool`, `int`, `double`, `string`.
#[derive(Clone, Debug, PartialEq)]
pub enum V<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(Cow<'a, str>),
}

/// The fast path cannot decide: cel-rust evaluates (and may fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bail;

type R<'a> = Result<V<'a>, Bail>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Double,
    Int,
    String,
    Size,
}

/// A compiled expression of the fast path.
#[derive(Clone, Debug)]
pub enum Node {
    Lit(V<'static>),
    /// The expression's variable `i` (its index in `Expression::variables`).
    Var(usize),
    Not(Box<Node>),
    Neg(Box<Node>),
    Arith(Arith, Box<Node>, Box<Node>),
    Cmp(Cmp, Box<Node>, Box<Node>),
    /// `==` (false) or `!=` (true).
    Eq(bool, Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    In(Box<Node>, Vec<V<'static>>),
    Call(Func, Box<Node>),
}

/// Where the fast path reads variable `i` from.
pub trait Vars<'a> {
    /// The value of variable `i`, or Bail where the fast path has none (a
    /// field unknown here, null, nested, or a number beyond i64 and f64).
    fn var(&self, i: usize) -> R<'a>;
}

/// Variables from a record's projected values: `slots[i]` is where variable
/// `i` is in `fields` (None: not projected); slots from `limit` on are not
/// to be trusted (`plan::Layout::trusted`).
pub struct Slots<'a> {
    pub fields: &'a [Value],
    pub slots: &'a [Option<usize>],
    pub limit: usize,
}

impl<'a> Vars<'a> for Slots<'a> {
    #[inline]
    fn var(&self, i: usize) -> R<'a> {
        let slot = self.slots.get(i).copied().flatten().filter(|&s| s < self.limit).ok_or(Bail)?;
        match self.fields.get(slot).ok_or(Bail)? {
            Value::Bool(b) => Ok(V::Bool(*b)),
            Value::Int(n) => Ok(V::Int(*n)),
            Value::Float(f) => Ok(V::Double(*f)),
            Value::Str(s) => Ok(V::Str(Cow::Borrowed(s))),
            // Null stands for "not known here" in a projection: absent,
            // nested, or null; the record's text decides.
            Value::Null | Value::Decimal(_) => Err(Bail),
        }
    }
}

impl Node {
    /// Compile `e` if the fast path covers all of it; `variables` are the
    /// expression's variables (sorted).
    pub fn compile(e: &IdedExpr, variables: &[String]) -> Option<Node> {
        let sub = |x: &IdedExpr| Node::compile(x, variables).map(Box::new);
        Some(match &e.expr {
            Expr::Literal(l) => Node::Lit(literal(l)?),
            Expr::Ident(name) => Node::Var(variables.iter().position(|v| v == name)?),
            Expr::Call(c) => {
                let a = &c.args;
                match (c.func_name.as_str(), &c.target, a.len()) {
                    (op::LOGICAL_NOT, None, 1) => Node::Not(sub(&a[0])?),
                    (op::NEGATE, None, 1) => Node::Neg(sub(&a[0])?),
                    (op::CONDITIONAL, None, 3) => Node::Cond(sub(&a[0])?, sub(&a[1])?, sub(&a[2])?),
                    (op::IN, None, 2) => {
                        let Expr::List(list) = &a[1].expr else { return None };
                        let items = list.elements.iter().map(|x| match &x.expr {
                            Expr::Literal(l) => literal(l),
                            _ => None,
                        });
                        let items = items.collect::<Option<Vec<_>>>()?;
                        // `[x]?` optional elements are not plain literals.
                        if !list.optional_indices.is_empty() {
                            return None;
                        }
                        Node::In(sub(&a[0])?, items)
                    }
                    (name, None, 2) => {
                        let (l, r) = (sub(&a[0])?, sub(&a[1])?);
                        match name {
                            op::ADD => Node::Arith(Arith::Add, l, r),
                            op::SUBSTRACT => Node::Arith(Arith::Sub, l, r),
                            op::MULTIPLY => Node::Arith(Arith::Mul, l, r),
                            op::DIVIDE => Node::Arith(Arith::Div, l, r),
                            op::MODULO => Node::Arith(Arith::Rem, l, r),
                            op::LESS => Node::Cmp(Cmp::Lt, l, r),
                            op::LESS_EQUALS => Node::Cmp(Cmp::Le, l, r),
                            op::GREATER => Node::Cmp(Cmp::Gt, l, r),
                            op::GREATER_EQUALS => Node::Cmp(Cmp::Ge, l, r),
                            op::EQUALS => Node::Eq(false, l, r),
                            op::NOT_EQUALS => Node::Eq(true, l, r),
                            op::LOGICAL_AND => Node::And(l, r),
                            op::LOGICAL_OR => Node::Or(l, r),
                            _ => return None,
                        }
                    }
                    ("double", None, 1) => Node::Call(Func::Double, sub(&a[0])?),
                    ("int", None, 1) => Node::Call(Func::Int, sub(&a[0])?),
                    ("string", None, 1) => Node::Call(Func::String, sub(&a[0])?),
                    ("size", None, 1) => Node::Call(Func::Size, sub(&a[0])?),
                    ("size", Some(t), 0) => Node::Call(Func::Size, sub(t)?),
                    _ => return None,
                }
            }
            _ => return None,
        })
    }

    /// Evaluate over `vars`.
    pub fn eval<'a>(&'a self, vars: &impl Vars<'a>) -> R<'a> {
        match self {
            Node::Lit(v) => Ok(match v {
                V::Str(s) => V::Str(Cow::Borrowed(s.as_ref())),
                other => other.clone(),
            }),
            Node::Var(i) => vars.var(*i),
            Node::Not(a) => match a.eval(vars)? {
                V::Bool(b) => Ok(V::Bool(!b)),
                _ => Err(Bail),
            },
            Node::Neg(a) => match a.eval(vars)? {
                V::Int(i) => i.checked_neg().map(V::Int).ok_or(Bail),
                V::Double(d) => Ok(V::Double(-d)),
                _ => Err(Bail),
            },
            Node::Arith(op, a, b) => arith(*op, a.eval(vars)?, b.eval(vars)?),
            Node::Cmp(op, a, b) => {
                let o = compare(&a.eval(vars)?, &b.eval(vars)?)?;
                Ok(V::Bool(match op {
                    Cmp::Lt => o == Ordering::Less,
                    Cmp::Le => o != Ordering::Greater,
                    Cmp::Gt => o == Ordering::Greater,
                    Cmp::Ge => o != Ordering::Less,
                }))
            }
            Node::Eq(negated, a, b) => Ok(V::Bool(equals(&a.eval(vars)?, &b.eval(vars)?) != *negated)),
            Node::And(a, b) => junction(a, b, false, vars),
            Node::Or(a, b) => junction(a, b, true, vars),
            Node::Cond(c, a, b) => match c.eval(vars)? {
                V::Bool(true) => a.eval(vars),
                V::Bool(false) => b.eval(vars),
                _ => Err(Bail),
            },
            Node::In(a, items) => {
                let x = a.eval(vars)?;
                Ok(V::Bool(items.iter().any(|i| equals(i, &x))))
            }
            Node::Call(f, a) => call(*f, a.eval(vars)?),
        }
    }
}

fn literal(l: &LiteralValue) -> Option<V<'static>> {
    Some(match l {
        LiteralValue::Boolean(b) => V::Bool(*b.inner()),
        LiteralValue::Int(i) => V::Int(*i.inner()),
        LiteralValue::Double(d) => V::Double(*d.inner()),
        LiteralValue::String(s) => V::Str(Cow::Owned(s.inner().to_string())),
        LiteralValue::Null => V::Null,
        LiteralValue::Bytes(_) | LiteralValue::UInt(_) => return None,
    })
}

fn arith<'a>(op: Arith, l: V<'a>, r: V<'a>) -> R<'a> {
    match (l, r) {
        (V::Int(a), V::Int(b)) => match op {
            Arith::Add => a.checked_add(b),
            Arith::Sub => a.checked_sub(b),
            Arith::Mul => a.checked_mul(b),
            // checked_div and checked_rem are None for 0 and for MIN / -1.
            Arith::Div => a.checked_div(b),
            Arith::Rem => a.checked_rem(b),
        }
        .map(V::Int)
        .ok_or(Bail),
        (V::Double(a), V::Double(b)) => match op {
            Arith::Add => Ok(V::Double(a + b)),
            Arith::Sub => Ok(V::Double(a - b)),
            Arith::Mul => Ok(V::Double(a * b)),
            Arith::Div => Ok(V::Double(a / b)),
            // CEL has no `%` on doubles.
            Arith::Rem => Err(Bail),
        },
        (V::Str(a), V::Str(b)) if op == Arith::Add => {
            let mut s = String::with_capacity(a.len() + b.len());
            s.push_str(&a);
            s.push_str(&b);
            Ok(V::Str(Cow::Owned(s)))
        }
        _ => Err(Bail),
    }
}

/// cel-rust's ordering: numbers across int and double (an int as its
/// nearest double), strings by bytes, bools; NaN and other pairs fail.
fn compare(l: &V, r: &V) -> Result<Ordering, Bail> {
    match (l, r) {
        (V::Int(a), V::Int(b)) => Ok(a.cmp(b)),
        (V::Int(a), V::Double(b)) => (*a as f64).partial_cmp(b).ok_or(Bail),
        (V::Double(a), V::Int(b)) => a.partial_cmp(&(*b as f64)).ok_or(Bail),
        (V::Double(a), V::Double(b)) => a.partial_cmp(b).ok_or(Bail),
        (V::Str(a), V::Str(b)) => Ok(a.as_bytes().cmp(b.as_bytes())),
        (V::Bool(a), V::Bool(b)) => Ok(a.cmp(b)),
        _ => Err(Bail),
    }
}

/// cel-rust's equality: never fails; values of different kinds are unequal
/// except numbers, which compare as `compare` does (NaN equals nothing).
fn equals(l: &V, r: &V) -> bool {
    match (l, r) {
        (V::Null, V::Null) => true,
        (V::Bool(a), V::Bool(b)) => a == b,
        (V::Str(a), V::Str(b)) => a == b,
        (V::Int(_) | V::Double(_), V::Int(_) | V::Double(_)) => compare(l, r) == Ok(Ordering::Equal),
        _ => false,
    }
}

fn call(f: Func, x: V<'_>) -> R<'_> {
    match (f, x) {
        (Func::Double, V::Double(d)) => Ok(V::Double(d)),
        (Func::Double, V::Int(i)) => Ok(V::Double(i as f64)),
        (Func::Int, V::Int(i)) => Ok(V::Int(i)),
        // CEL's range: (MIN, MAX) exclusive, so `as` never saturates.
        (Func::Int, V::Double(d)) if d > i64::MIN as f64 && d < i64::MAX as f64 => Ok(V::Int(d as i64)),
        (Func::String, V::Str(s)) => Ok(V::Str(s)),
        (Func::String, V::Int(i)) => Ok(V::Str(Cow::Owned(i.to_string()))),
        (Func::String, V::Bool(b)) => Ok(V::Str(Cow::Borrowed(if b { "true" } else { "false" }))),
        (Func::Size, V::Str(s)) => Ok(V::Int(s.chars().count() as i64)),
        _ => Err(Bail),
    }
}

impl V<'_> {
    /// The same value, owning its string.
    pub fn into_owned(self) -> V<'static> {
        match self {
            V::Null => V::Null,
            V::Bool(b) => V::Bool(b),
            V::Int(i) => V::Int(i),
            V::Double(d) => V::Double(d),
            V::Str(s) => V::Str(Cow::Owned(s.into_owned())),
        }
    }

    /// As cel-rust's value.
    pub fn to_cel(&self) -> cel::Value {
        match self {
            V::Null => cel::Value::Null,
            V::Bool(b) => cel::Value::Bool(*b),
            V::Int(i) => cel::Value::Int(*i),
            V::Double(d) => cel::Value::Float(*d),
            V::Str(s) => cel::Value::String(std::sync::Arc::new(s.to_string())),
        }
    }

    /// As a projected value (what the source's parser reads from the JSON
    /// text `write_json` gives); None for a double JSON cannot hold.
    pub fn to_value(&self) -> Option<Value> {
        Some(match self {
            V::Null => Value::Null,
            V::Bool(b) => Value::Bool(*b),
            V::Int(i) => Value::Int(*i),
            V::Double(d) if d.is_finite() => Value::Float(*d),
            V::Double(_) => return None,
            V::Str(s) => Value::Str(s.as_ref().into()),
        })
    }

    /// Append the JSON text (as `to_json` writes cel-rust's value); None
    /// for a double JSON cannot hold.
    pub fn write_json(&self, out: &mut String) -> Option<()> {
        use std::fmt::Write as _;
        match self {
            V::Null => out.push_str("null"),
            V::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            V::Int(i) => {
                let _ = write!(out, "{i}");
            }
            V::Double(d) => out.push_str(&serde_json::Number::from_f64(*d)?.to_string()),
            V::Str(s) => out.push_str(&serde_json::to_string(s.as_ref()).ok()?),
        }
        Some(())
    }
}

/// `&&` (`dominant` false) and `||` (`dominant` true) as cel-rust has them:
/// the dominant value if either side is it (whatever the other gives, an
/// error included; the right side is not evaluated when the left is), the
/// other value if both sides are it, else an error.
fn junction<'a>(a: &'a Node, b: &'a Node, dominant: bool, vars: &impl Vars<'a>) -> R<'a> {
    let l = a.eval(vars);
    if l == Ok(V::Bool(dominant)) {
        return l;
    }
    match (l, b.eval(vars)) {
        (_, Ok(V::Bool(r))) if r == dominant => Ok(V::Bool(dominant)),
        (Ok(V::Bool(l)), Ok(V::Bool(r))) if l == r => Ok(V::Bool(l)),
        _ => Err(Bail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{Expression, Vars as CelVars};
    use crate::format::json::JsonParser;
    use crate::plan::{Extras, Layout};

    /// A small deterministic generator (no dependency on test crates).
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.0 >> 33) % n as u64) as usize
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[self.below(xs.len())]
        }
    }

    const VARS: &[&str] = &["a", "b", "c", "s", "t"];
    const LITERALS: &[&str] = &[
        "0",
        "1",
        "-1",
        "2",
        "3",
        "7",
        "9223372036854775807",
        "-9223372036854775807",
        "4611686018427387904",
        "0.0",
        "1.5",
        "-2.5",
        "1e308",
        "0.1",
        "2.0",
        "''",
        "'x'",
        "'ab'",
        "'é'",
        "true",
        "false",
        "null",
    ];
    const FIELD_VALUES: &[&str] = &[
        "0",
        "1",
        "-1",
        "-0",
        "2",
        "5",
        "9223372036854775807",
        "-9223372036854775808",
        "3037000500",
        "0.5",
        "-0.0",
        "2.0",
        "1e308",
        "1.5e300",
        "\"\"",
        "\"x\"",
        "\"é😀\"",
        "true",
        "false",
        "null",
        "[1]",
        "{\"k\": 1}",
        "18446744073709551615",
    ];

    fn expr(rng: &mut Rng, depth: usize) -> String {
        if depth == 0 || rng.below(4) == 0 {
            return if rng.below(2) == 0 { rng.pick(VARS).to_string() } else { rng.pick(LITERALS).to_string() };
        }
        let mut sub = || expr(rng, depth - 1);
        let (x, y) = (sub(), sub());
        match rng.below(10) {
            0 => format!("!({x})"),
            1 => format!("-({x})"),
            2 => {
                let z = expr(rng, depth - 1);
                format!("({x}) ? ({y}) : ({z})")
            }
            3 => {
                let items: Vec<&str> = (0..rng.below(3)).map(|_| rng.pick(LITERALS)).collect();
                format!("({x}) in [{}]", items.join(", "))
            }
            4 => format!("{}({x})", rng.pick(&["double", "int", "string", "size"])),
            5 => format!("({x}).size()"),
            _ => {
                let op = rng.pick(&["+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||"]);
                format!("({x}) {op} ({y})")
            }
        }
    }

    /// Same CEL value: the same type and value (NaN equal to NaN, 0.0 and -0.0 apart).
    fn same(a: &cel::Value, b: &cel::Value) -> bool {
        match (a, b) {
            (cel::Value::Float(x), cel::Value::Float(y)) => x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
            (cel::Value::Int(x), cel::Value::Int(y)) => x == y,
            (cel::Value::Float(_) | cel::Value::Int(_), _) | (_, cel::Value::Float(_) | cel::Value::Int(_)) => false,
            _ => a == b,
        }
    }

    #[test]
    fn agrees_with_cel_rust() {
        // Random expressions over random records: where the fast path gives
        // a value, cel-rust gives the same; where cel-rust fails, the fast
        // path gives up. And `eval_record` (fast, else cel-rust) is cel-rust.
        let mut rng = Rng(16);
        let names: Vec<String> = VARS.iter().map(|v| v.to_string()).collect();
        let parser = JsonParser::new(vec![], None).with_extras(names.clone(), vec![]);
        let layout = Layout::new(vec![], Extras { values: names.clone(), presence: vec![] });
        let (mut decided, mut total, mut compiled) = (0, 0, 0);
        for case in 0..6000 {
            let source = expr(&mut rng, 1 + case % 4);
            let e = Expression::compile(&source).unwrap_or_else(|err| panic!("{source}: {err}"));
            compiled += e.is_fast() as usize;
            let slots: Vec<Option<usize>> = e.variables().iter().map(|v| layout.value(v)).collect();
            for _ in 0..8 {
                let mut members = Vec::new();
                for v in VARS {
                    if rng.below(6) > 0 {
                        members.push(format!("\"{v}\": {}", rng.pick(FIELD_VALUES)));
                    }
                }
                let line = format!("{{{}}}", members.join(", "));
                let record = parser.parse(&line).unwrap();
                let vars = Slots { fields: &record.fields, slots: &slots, limit: layout.trusted(&record.fields) };
                let cel = e.eval(&CelVars::from_json(&line, e.variables()).unwrap());
                total += 1;
                if let Some(f) = &e.fast {
                    if let Ok(v) = f.eval(&vars) {
                        decided += 1;
                        match &cel {
                            Ok(c) => assert!(same(&v.to_cel(), c), "{source} over {line}: fast {v:?}, cel-rust {c:?}"),
                            Err(err) => panic!("{source} over {line}: fast {v:?}, cel-rust fails: {err}"),
                        }
                    }
                }
                let both = e.eval_record(&vars, &line).map(|o| o.into_cel());
                let text = e.eval_text(&line).map(|o| o.into_cel());
                for (how, got) in [("eval_record", &both), ("eval_text", &text)] {
                    match (got, &cel) {
                        (Ok(x), Ok(y)) => assert!(same(x, y), "{source} over {line}: {how} {x:?} != {y:?}"),
                        (Err(x), Err(y)) => assert_eq!(x, y, "{source} over {line}: {how}"),
                        _ => panic!("{source} over {line}: {how} {got:?}, cel-rust {cel:?}"),
                    }
                }
            }
        }
        // The test means something: most expressions compile, and the fast
        // path decides a good share of the evaluations.
        assert!(compiled > 5000, "{compiled} of 6000 compiled");
        assert!(decided * 4 > total, "the fast path decided {decided} of {total}");
    }

    #[test]
    fn compiles_the_simple_and_leaves_the_rest() {
        let vars = |e: &Expression| e.variables().to_vec();
        for simple in [
            "amount % 2 == 0",
            "amount * 2",
            "double(amount) * 0.92",
            "a > 1 && s != 'x' || !t",
            "s in ['a', 'b']",
            "size(s) + s.size()",
            "t ? 1 : 2",
        ] {
            let e = Expression::compile(simple).unwrap();
            assert!(Node::compile(e.program.expression(), &vars(&e)).is_some(), "{simple}");
        }
        for other in [
            "user.country == 'DE'",
            "has(a.b)",
            "timestamp(ts).getDayOfWeek()",
            "a > 1u",
            "[1, 2].exists(x, x > 1)",
            "s.startsWith('x')",
            "a in [1, b]",
            "{'a': 1}['a']",
        ] {
            let e = Expression::compile(other).unwrap();
            assert!(Node::compile(e.program.expression(), &vars(&e)).is_none(), "{other}");
        }
    }
}

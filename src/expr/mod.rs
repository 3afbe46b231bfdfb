//! CEL expressions (the Common Expression Language, through the `cel`
//! crate) of the `filter` and `map` operators: compiled once when the
//! pipeline is validated, evaluated per record without parsing again.
//!
//! A record's top-level fields are the expression's variables (`amount`,
//! `user.country`, `items[0].sku`, `size(items)`); only the fields an
//! expression names are read from the record's JSON. A field the record
//! lacks is an evaluation error (CEL has no implicit null), as is a type
//! mismatch; `has(user.country)` tests for presence.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr};
use cel::common::types::{CelBool, CelDouble, CelInt, CelNull, CelString};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, Env, IdedExpr, Program, Value};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::format::json::{FieldNeed, JsonParser};

pub mod fast;
pub use fast::{Slots, V};

/// A compiled expression.
#[derive(Clone)]
pub struct Expression {
    source: String,
    program: Arc<Program>,
    /// The top-level fields it reads, sorted.
    variables: Vec<String>,
    /// Reads them as scalars with the source's parser (its scanner takes
    /// flat lines); anything it refuses is read again by `Vars::from_json`.
    scalars: JsonParser,
    /// The native evaluator, if the expression is simple enough.
    fast: Option<Arc<fast::Node>>,
    /// Variable i in slot i (of what `scalars` reads).
    every_slot: Vec<Option<usize>>,
}

/// The value of an expression: from the fast path, or from cel-rust.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<'a> {
    Fast(V<'a>),
    Cel(Value),
}

impl Outcome<'_> {
    /// As cel-rust's value.
    pub fn into_cel(self) -> Value {
        match self {
            Outcome::Fast(v) => v.to_cel(),
            Outcome::Cel(v) => v,
        }
    }

    /// The bool a condition gives, or why it is none.
    pub fn as_bool(&self, what: &str) -> Result<bool, String> {
        match self {
            Outcome::Fast(V::Bool(b)) => Ok(*b),
            Outcome::Cel(Value::Bool(b)) => Ok(*b),
            Outcome::Fast(v) => Err(format!("{what} gave a {}, expected a bool", v.to_cel().type_of())),
            Outcome::Cel(v) => Err(format!("{what} gave a {}, expected a bool", v.type_of())),
        }
    }

    /// Append the JSON text, or say why there is none (`source`: the expression).
    pub fn write_json(&self, out: &mut String, source: &str) -> Result<(), String> {
        if let Outcome::Fast(v) = self {
            if v.write_json(out).is_some() {
                return Ok(());
            }
        }
        let json = to_json(&self.clone().into_cel()).map_err(|why| format!("`{source}`: {why}"))?;
        out.push_str(&json.to_string());
        Ok(())
    }

    /// As JSON, or why it has none.
    pub fn to_json(&self, source: &str) -> Result<serde_json::Value, String> {
        to_json(&self.clone().into_cel()).map_err(|why| format!("`{source}`: {why}"))
    }

    /// The value the source's parser reads back from the JSON text of this
    /// value, if it is a scalar (None: read the text).
    pub fn to_value(&self) -> Option<crate::types::Value> {
        use crate::types::Value as T;
        match self {
            Outcome::Fast(v) => v.to_value(),
            Outcome::Cel(v) => match v {
                Value::Null => Some(T::Null),
                Value::Bool(b) => Some(T::Bool(*b)),
                Value::Int(i) => Some(T::Int(*i)),
                Value::UInt(u) => crate::number::parse(&u.to_string()).map(T::from),
                Value::Float(f) if f.is_finite() => Some(T::Float(*f)),
                Value::String(s) => Some(T::Str(s.as_str().into())),
                // Timestamps and durations are written as strings.
                Value::Timestamp(_) | Value::Duration(_) => match to_json(v) {
                    Ok(serde_json::Value::String(s)) => Some(T::Str(s.into())),
                    _ => None,
                },
                _ => None,
            },
        }
    }
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Expression({:?})", self.source)
    }
}

/// Why an expression does not compile: the message and where in the
/// expression (1-based line and character column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 1 {
            write!(f, "{} (line {}, column {} of the expression)", self.message, self.line, self.column)
        } else {
            write!(f, "{} (column {} of the expression)", self.message, self.column)
        }
    }
}

/// The standard CEL environment, built once.
fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib()))
}

/// Whether the environment declares a function `name` (global or member):
/// a declared name cannot be registered again as a context function.
fn is_declared(name: &str) -> bool {
    let mut probe = Context::with_env(Arc::clone(env()));
    probe.add_function(name, |a: i64| a).is_err()
}

/// A call's node is placed at its `(`: the character offset of the name before it.
fn name_start(source: &str, offset: usize) -> usize {
    let chars: Vec<char> = source.chars().collect();
    let mut i = offset.min(chars.len());
    if chars.get(i) != Some(&'(') {
        return i;
    }
    while i > 0 && chars[i - 1].is_whitespace() {
        i -= 1;
    }
    while i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        i -= 1;
    }
    i
}

/// 1-based line and column of character offset `offset` in `source`.
fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let mut line = 1;
    let mut column = 1;
    for c in source.chars().take(offset) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

impl Expression {
    /// Compile `source`: a syntax error, or a call of a function CEL does
    /// not have, is an error with its place in `source`.
    pub fn compile(source: &str) -> Result<Expression, ExprError> {
        if source.trim().is_empty() {
            return Err(ExprError { line: 1, column: 1, message: "empty expression".into() });
        }
        // The parser's positions are 1-based lines and columns.
        let program = env().compile(source).map_err(|e| match e.errors.first() {
            Some(first) => ExprError {
                line: first.pos.0.max(1) as usize,
                column: first.pos.1.max(1) as usize,
                message: match first.msg.get(..12) {
                    Some(p) if p.eq_ignore_ascii_case("syntax error") => first.msg.clone(),
                    _ => format!("syntax error: {}", first.msg),
                },
            },
            None => ExprError { line: 1, column: 1, message: "syntax error".into() },
        })?;
        let mut calls = Vec::new();
        collect_calls(program.expression(), &mut calls);
        for (id, name) in calls {
            // Operators (`_+_`, `!_`, `@in`, `_[_]`) are the parser's own.
            if name.starts_with(['_', '@', '!', '-']) || is_declared(&name) {
                continue;
            }
            let offset = program.source_info().offset_for(id).map_or(0, |(start, _)| start as usize);
            let (line, column) = line_col(source, name_start(source, offset));
            return Err(ExprError { line, column, message: format!("unknown function `{name}`") });
        }
        let mut variables: Vec<String> = program.references().variables().into_iter().map(str::to_string).collect();
        variables.sort();
        variables.dedup();
        let needs = variables.iter().map(|v| (v.clone(), FieldNeed { required: true, ..FieldNeed::default() })).collect();
        let scalars = JsonParser::new(needs, None);
        let fast = fast::Node::compile(program.expression(), &variables).map(Arc::new);
        let every_slot = (0..variables.len()).map(Some).collect();
        Ok(Expression { source: source.to_string(), program: Arc::new(program), variables, scalars, fast, every_slot })
    }

    /// Whether the native evaluator takes this expression.
    pub fn is_fast(&self) -> bool {
        self.fast.is_some()
    }

    /// Evaluate over one record: `slots` holds its projected values (see
    /// `plan::Layout`), `raw` its text. The fast path where it decides; else
    /// cel-rust over the projected values if they hold every variable, else
    /// over the fields read from the text.
    pub fn eval_record<'a>(&'a self, slots: &Slots<'a>, raw: &str) -> Result<Outcome<'a>, String> {
        if let Some(f) = &self.fast {
            if let Ok(v) = f.eval(slots) {
                return Ok(Outcome::Fast(v));
            }
        }
        match self.vars_from(slots) {
            Some(vars) => self.eval(&vars).map(Outcome::Cel),
            None => self.eval_text(raw),
        }
    }

    /// Evaluate over the fields read from the JSON object `raw` (a record
    /// whose source handed on none of them): the fast path where it
    /// decides, else cel-rust.
    pub fn eval_text(&self, raw: &str) -> Result<Outcome<'static>, String> {
        // The source's scanner reads present scalars; anything else (a
        // missing field, a nested value, a number beyond i64 and f64) is
        // read again by `Vars::from_json`.
        if let Ok(fields) = self.scalars.fields(raw) {
            let slots = Slots { fields: &fields, slots: &self.every_slot, limit: usize::MAX };
            if let Some(f) = &self.fast {
                if let Ok(v) = f.eval(&slots) {
                    return Ok(Outcome::Fast(v.into_owned()));
                }
            }
            if let Some(vars) = self.vars_from(&slots) {
                return self.eval(&vars).map(Outcome::Cel);
            }
        }
        let vars = Vars::from_json(raw, &self.variables)?;
        self.eval(&vars).map(Outcome::Cel)
    }

    /// The variables from projected values, if they hold all of them.
    fn vars_from(&self, slots: &Slots<'_>) -> Option<Vars<'_>> {
        use fast::Vars as _;
        let mut vars = Vars { values: Vec::with_capacity(self.variables.len()), unreadable: Vec::new() };
        for (i, name) in self.variables.iter().enumerate() {
            let val: Box<dyn Val> = match slots.var(i).ok()? {
                V::Null => Box::new(CelNull),
                V::Bool(b) => Box::new(CelBool::from(b)),
                V::Int(i) => Box::new(CelInt::from(i)),
                V::Double(d) => Box::new(CelDouble::from(d)),
                V::Str(s) => Box::new(CelString::from(s.into_owned())),
            };
            vars.values.push((name, val));
        }
        Some(vars)
    }

    /// The variables of this expression from the JSON object `line`.
    pub fn read(&self, line: &str) -> Result<Vars<'_>, String> {
        // The fast path takes records whose fields it reads are all present
        // scalars of the same value in both readings; a missing field, a
        // nested value, a number beyond i64 or f64, invalid JSON: the full
        // reading decides.
        if let Ok(fields) = self.scalars.fields(line) {
            if let Some(vars) = Vars::from_scalars(&self.variables, fields) {
                return Ok(vars);
            }
        }
        Vars::from_json(line, &self.variables)
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The top-level fields the expression reads.
    pub fn variables(&self) -> &[String] {
        &self.variables
    }

    /// Evaluate against `vars` (the fields of one record).
    pub fn eval(&self, vars: &Vars<'_>) -> Result<Value, String> {
        // The record's fields are looked up through a resolver over `vars`:
        // no map of variables (and no copy of their names) per evaluation.
        let mut ctx = Context::with_env(Arc::clone(env()));
        ctx.set_variable_resolver(vars);
        self.program.execute(&ctx).map_err(|e| {
            // A field the record holds but that has no CEL value fails
            // where it is needed, with why.
            if let cel::ExecutionError::UndeclaredReference(name) = &e {
                if let Some((_, why)) = vars.unreadable.iter().find(|(n, _)| *n == name.as_str()) {
                    return why.clone();
                }
            }
            format!("`{}`: {e}", self.source)
        })
    }
}

/// Every function call in `e`, with its node id.
fn collect_calls(e: &IdedExpr, out: &mut Vec<(u64, String)>) {
    match &e.expr {
        Expr::Call(c) => {
            out.push((e.id, c.func_name.clone()));
            if let Some(t) = &c.target {
                collect_calls(t, out);
            }
            c.args.iter().for_each(|a| collect_calls(a, out));
        }
        Expr::Comprehension(c) => {
            for x in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                collect_calls(x, out);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|x| collect_calls(x, out)),
        Expr::Map(m) => m.entries.iter().for_each(|x| entry_calls(&x.expr, out)),
        Expr::Struct(s) => s.entries.iter().for_each(|x| entry_calls(&x.expr, out)),
        Expr::Select(s) => collect_calls(&s.operand, out),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry_calls(e: &EntryExpr, out: &mut Vec<(u64, String)>) {
    match e {
        EntryExpr::StructField(f) => collect_calls(&f.value, out),
        EntryExpr::MapEntry(m) => {
            collect_calls(&m.key, out);
            collect_calls(&m.value, out);
        }
    }
}

/// The variables of one evaluation: some top-level fields of a record,
/// already in CEL's value form, named by the expression's own strings.
#[derive(Default)]
pub struct Vars<'n> {
    values: Vec<(&'n str, Box<dyn Val>)>,
    /// Fields the record holds that have no CEL value (a number beyond
    /// f64), with why: an error only if the evaluation needs them, as it
    /// is for a field read from the source's values.
    unreadable: Vec<(&'n str, String)>,
}

impl VariableResolver for Vars<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        // A handful of variables: a scan beats any map.
        self.values.iter().find(|(n, _)| *n == variable).map(|(_, v)| CowVal::Borrowed(v.as_ref()))
    }
}

impl<'n> Vars<'n> {
    /// The scalars the source's scanner read for `names` (in order), or
    /// None if one has no exact CEL form here (a decimal beyond f64 and i64).
    pub fn from_scalars(names: &'n [String], fields: Vec<crate::types::Value>) -> Option<Vars<'n>> {
        let mut vars = Vars { values: Vec::with_capacity(fields.len()), unreadable: Vec::new() };
        for (name, v) in names.iter().zip(fields) {
            vars.bind_scalar(name, v)?;
        }
        Some(vars)
    }

    /// Bind `name` to a scalar the scanner read; None for a decimal beyond
    /// f64 and i64 (no exact CEL form here).
    pub fn bind_scalar(&mut self, name: &'n str, v: crate::types::Value) -> Option<()> {
        use crate::types::Value as V;
        let val: Box<dyn Val> = match v {
            V::Null => Box::new(CelNull),
            V::Bool(b) => Box::new(CelBool::from(b)),
            V::Int(i) => Box::new(CelInt::from(i)),
            V::Float(f) => Box::new(CelDouble::from(f)),
            V::Str(s) => Box::new(CelString::from(s.into_string())),
            V::Decimal(_) => return None,
        };
        self.values.push((name, val));
        Some(())
    }

    /// Read the fields named in `names` (sorted) from the JSON object
    /// `line`; fields the record lacks stay unbound.
    pub fn from_json(line: &str, names: &'n [String]) -> Result<Vars<'n>, String> {
        let mut vars = Vars::default();
        if names.is_empty() {
            // Still a JSON object, as a source would require.
            let mut de = serde_json::Deserializer::from_str(line);
            serde::de::IgnoredAny::deserialize(&mut de).map_err(|e| format!("invalid JSON: {e}"))?;
            return Ok(vars);
        }
        let mut de = serde_json::Deserializer::from_str(line);
        let mut raw: Vec<(usize, &RawValue)> = Vec::new();
        (Pick { names, found: &mut raw }).deserialize(&mut de).map_err(|e| format!("invalid JSON: {e}"))?;
        de.end().map_err(|e| format!("invalid JSON: {e}"))?;
        // Of duplicate keys the last counts.
        let mut last: HashMap<usize, &RawValue> = HashMap::new();
        for (i, r) in raw {
            last.insert(i, r);
        }
        let mut picked: Vec<(usize, &RawValue)> = last.into_iter().collect();
        picked.sort_by_key(|(i, _)| *i);
        for (i, r) in picked {
            if let Err(why) = vars.bind_raw(&names[i], r.get()) {
                vars.unreadable.push((&names[i], why));
            }
        }
        Ok(vars)
    }

    /// Bind `name` to the JSON text `raw` of a top-level field. A number is
    /// read as the source's parser reads it (`-0` is the int 0), so both
    /// readings of a record give the same values.
    pub fn bind_raw(&mut self, name: &'n str, raw: &str) -> Result<(), String> {
        use crate::types::Value as T;
        if let Some(b'-' | b'0'..=b'9') = raw.as_bytes().first() {
            if let Some(v @ (T::Int(_) | T::Float(_))) = crate::number::parse(raw).map(T::from) {
                if self.bind_scalar(name, v).is_some() {
                    return Ok(());
                }
            }
        }
        let v: serde_json::Value = serde_json::from_str(raw).map_err(|e| format!("invalid JSON: {e}"))?;
        self.bind(name, &v)
    }

    /// Bind `name` to a JSON value.
    pub fn bind(&mut self, name: &'n str, v: &serde_json::Value) -> Result<(), String> {
        let val: Box<dyn Val> = to_cel(v).try_into().map_err(|e| format!("field `{name}`: {e}"))?;
        self.values.push((name, val));
        Ok(())
    }
}

use serde::Deserialize;

struct Pick<'n, 'f, 'de> {
    names: &'n [String],
    found: &'f mut Vec<(usize, &'de RawValue)>,
}

impl<'de> DeserializeSeed<'de> for Pick<'_, '_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Pick<'_, '_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match self.names.binary_search_by(|n| n.as_str().cmp(&key)) {
                Ok(i) => self.found.push((i, map.next_value::<&'de RawValue>()?)),
                Err(_) => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A JSON value as a CEL value: integers that fit are `int` (else `uint`,
/// else `double`), other numbers `double`.
pub fn to_cel(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(a) => Value::List(Arc::new(a.iter().map(to_cel).collect())),
        serde_json::Value::Object(o) => {
            let map: HashMap<String, Value> = o.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            Value::from(map)
        }
    }
}

/// A CEL value as JSON, or why it has none (a non-finite number, bytes, a
/// map with non-string keys, ...).
pub fn to_json(v: &Value) -> Result<serde_json::Value, String> {
    Ok(match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => (*i).into(),
        Value::UInt(u) => (*u).into(),
        Value::Float(f) => match serde_json::Number::from_f64(*f) {
            Some(n) => serde_json::Value::Number(n),
            None => return Err(format!("the result {f} is not a finite number")),
        },
        Value::String(s) => serde_json::Value::String(s.to_string()),
        Value::List(l) => serde_json::Value::Array(l.iter().map(to_json).collect::<Result<_, _>>()?),
        Value::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m.map.iter() {
                let key = match k {
                    cel::objects::Key::String(s) => s.to_string(),
                    cel::objects::Key::Int(i) => i.to_string(),
                    cel::objects::Key::Uint(u) => u.to_string(),
                    cel::objects::Key::Bool(b) => b.to_string(),
                };
                out.insert(key, to_json(v)?);
            }
            serde_json::Value::Object(out)
        }
        // CEL's JSON forms (those of protobuf's Timestamp and Duration).
        Value::Timestamp(t) => serde_json::Value::String(t.to_rfc3339()),
        Value::Duration(d) => serde_json::Value::String(duration_text(d.num_seconds(), d.subsec_nanos())),
        other => return Err(format!("the result is a {}, which has no JSON form", other.type_of())),
    })
}

/// A duration of `secs` and `nanos` (both of its sign, as chrono gives
/// them) as seconds with a fraction and an `s` (`-1.5s`, `3600s`).
fn duration_text(secs: i64, nanos: i32) -> String {
    let sign = if secs < 0 || nanos < 0 { "-" } else { "" };
    let (secs, nanos) = (secs.unsigned_abs(), nanos.unsigned_abs());
    if nanos == 0 {
        return format!("{sign}{secs}s");
    }
    let fraction = format!("{nanos:09}");
    format!("{sign}{secs}.{}s", fraction.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(src: &str, line: &str) -> Result<Value, String> {
        let e = Expression::compile(src).map_err(|e| e.to_string())?;
        let slow = e.eval(&Vars::from_json(line, e.variables())?);
        assert_eq!(e.eval(&e.read(line)?), slow, "both readings agree on {line}");
        slow
    }

    #[test]
    fn evaluates_over_nested_fields() {
        let line = r#"{"amount": 150, "user": {"id": 7, "country": "FR"}, "items": [{"sku": "A"}], "x": 1}"#;
        assert_eq!(eval("amount > 100 && user.country != 'DE'", line), Ok(Value::Bool(true)));
        assert_eq!(eval("items[0].sku == 'A' && size(items) == 1", line), Ok(Value::Bool(true)));
        assert_eq!(eval("amount * 2", line), Ok(Value::Int(300)));
        assert_eq!(eval("double(amount) * 0.5", line), Ok(Value::Float(75.0)));
        assert_eq!(eval("has(user.country)", line), Ok(Value::Bool(true)));
        let ts = r#"{"ts": "2026-12-02T10:00:00Z", "name": "alice"}"#;
        assert_eq!(eval("timestamp(ts).getDayOfWeek()", ts), Ok(Value::Int(3)), "a Wednesday");
        assert_eq!(eval("name.matches('^al') && !name.matches('z')", ts), Ok(Value::Bool(true)));
        assert_eq!(eval("timestamp(ts) + duration('1h') > timestamp('2026-12-02T10:30:00Z')", ts), Ok(Value::Bool(true)));
        let e = Expression::compile("amount > 1 && user.id == 7").unwrap();
        assert_eq!(e.variables(), ["amount", "user"]);
    }

    #[test]
    fn missing_fields_and_type_mismatches_are_errors() {
        assert!(eval("nope > 1", r#"{"a": 1}"#).unwrap_err().contains("nope"));
        assert!(eval("a > 'x'", r#"{"a": 1}"#).is_err());
        assert!(eval("a > 1", r#"{"a": 1"#).unwrap_err().contains("invalid JSON"));
        assert_eq!(eval("a == null && b == 'x' && c == 1.5 && d", r#"{"a": null, "b": "x", "c": 1.5, "d": true}"#), Ok(Value::Bool(true)));
        assert_eq!(eval("a > 1u", r#"{"a": 18446744073709551615}"#), Ok(Value::Bool(true)), "beyond i64: a uint");
        assert_eq!(eval("a + 1", r#"{"a": 1, "a": 5}"#), Ok(Value::Int(6)), "the last duplicate counts");
        // A number with no CEL value fails only where it is needed.
        assert_eq!(eval("a == 1 || b > 0", r#"{"a": 1, "b": 1e400}"#), Ok(Value::Bool(true)));
        assert!(eval("b > 0", r#"{"a": 1, "b": 1e400}"#).unwrap_err().contains("out of range"));
        // `-0` is the int 0 in flat and nested records alike, as keys read it.
        assert_eq!(eval("a + 1", r#"{"a": -0}"#), Ok(Value::Int(1)));
        assert_eq!(eval("a + 1", r#"{"a": -0, "n": {"x": [1]}}"#), Ok(Value::Int(1)));
        assert_eq!(eval("-a", r#"{"a": 3}"#), Ok(Value::Int(-3)));
    }

    #[test]
    fn compile_errors_say_where() {
        let e = Expression::compile("amount >").unwrap_err();
        assert!(e.message.to_lowercase().starts_with("syntax error"), "{e}");
        assert_eq!((e.line, e.column), (1, 9), "{e}");
        let e = Expression::compile("a > 1 && frobnicate(a)").unwrap_err();
        assert_eq!(e.message, "unknown function `frobnicate`");
        assert_eq!((e.line, e.column), (1, 10), "{e}");
        let e = Expression::compile("a > 1 &&\n  b.nope()").unwrap_err();
        assert_eq!(e.message, "unknown function `nope`");
        assert_eq!(e.line, 2, "{e}");
        for ok in [
            "-a",
            "-(a + 1) * 2",
            "!(a > 1)",
            "size(a) > 0",
            "a.startsWith('x')",
            "string(a) + 'x'",
            "int(a) + 1",
            "[1, 2].exists(x, x > 1)",
            "a in [1, 2]",
        ] {
            Expression::compile(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn json_round_trips() {
        let v: serde_json::Value = serde_json::from_str(r#"{"a": [1, -2, 1.5, "s", null, true, {"b": 18446744073709551615}]}"#).unwrap();
        assert_eq!(to_json(&to_cel(&v)).unwrap(), v);
        assert!(to_json(&Value::Float(f64::INFINITY)).is_err());
        let line = r#"{"ts": "2026-12-02T10:00:00Z", "ms": 1764669600000}"#;
        let json = |src: &str| to_json(&eval(src, line).unwrap()).unwrap();
        assert_eq!(json("timestamp(ts) + duration('90m')"), serde_json::json!("2026-12-02T11:30:00+00:00"));
        assert_eq!(json("timestamp(ms / 1000) == timestamp('2025-12-02T10:00:00Z')"), serde_json::json!(true));
        assert_eq!(json("duration('-1.5s')"), serde_json::json!("-1.5s"));
        assert_eq!(json("timestamp(ts) - timestamp('2026-12-02T09:00:00Z')"), serde_json::json!("3600s"));
    }
}

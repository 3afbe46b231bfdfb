//! `map`: renames, then sets (CEL expressions, all evaluated over the input
//! record), then drops fields. The output is the new JSON object: the
//! top-level members it does not touch keep their raw text and their order,
//! renamed and set members come last unless they replace one in place, and
//! a nested object it changes is written again (its members in key order).
//! A record nothing changes passes with its raw text as it was. The fields
//! the operators after it need are projected from the output, as a source
//! projects them. A record an expression fails on, or whose output lacks a
//! field needed downstream, follows `on_error`. Stateless: chained into the
//! task of its input.

use indexmap::IndexMap;
use serde_json::value::RawValue;
use serde_json::Value as Json;

use super::filter::refuse;
use super::{Context, DeadLetter, OpResult, Operator};
use crate::config::{MapSpec, OnError};
use crate::expr::{to_json, Expression, Vars};
use crate::format::json::{FieldNeed, JsonParser};
use crate::format::path::{FieldPath, Segment};
use crate::types::Record;

/// A path of object keys.
type Keys = Vec<String>;

pub struct Map {
    name: String,
    rename: Vec<(Keys, Keys)>,
    set: Vec<(Keys, Expression)>,
    drop: Vec<Keys>,
    /// The top-level fields the expressions read, sorted.
    variables: Vec<String>,
    on_error: OnError,
    dead_letter: Option<DeadLetter>,
    /// The fields needed downstream (None: none are).
    projection: Option<JsonParser>,
    /// The fast path of a map that only sets new top-level fields.
    appending: Option<Appending>,
}

/// A map with only `set`, of top-level keys none of its expressions reads:
/// a flat record that lacks all of them gets the new members appended to
/// its raw text, read by the source's scanner instead of being rebuilt.
struct Appending {
    /// The map's variables, then its set keys (for their presence).
    reader: JsonParser,
    /// Each set key as JSON text (`"k"`).
    keys: Vec<String>,
}

/// A top-level member: its raw text, or a value the map has touched.
enum Member<'a> {
    Raw(&'a RawValue),
    Value(Json),
}

impl Member<'_> {
    fn value(&mut self) -> Result<&mut Json, String> {
        if let Member::Raw(r) = self {
            *self = Member::Value(serde_json::from_str(r.get()).map_err(|e| format!("invalid JSON: {e}"))?);
        }
        match self {
            Member::Value(v) => Ok(v),
            Member::Raw(_) => unreachable!("made a value above"),
        }
    }
}

fn keys(path: &str) -> Keys {
    let p = FieldPath::parse(path).unwrap_or_else(|_| FieldPath::key(path));
    p.segments()
        .iter()
        .map(|s| match s {
            Segment::Key(k) => k.clone(),
            Segment::Index(i) => i.to_string(), // validated: keys only
        })
        .collect()
}

impl Map {
    pub fn new(name: &str, spec: &MapSpec, projection: Vec<(String, FieldNeed)>, dead_letter: Option<DeadLetter>) -> Self {
        let mut variables: Vec<String> = spec.set.iter().flat_map(|(_, e)| e.variables().iter().cloned()).collect();
        variables.sort();
        variables.dedup();
        let appending = Appending::new(spec, &variables);
        Map {
            appending,
            name: name.to_string(),
            rename: spec.rename.iter().map(|(new, old)| (keys(new), keys(old))).collect(),
            set: spec.set.iter().map(|(p, e)| (keys(p), e.clone())).collect(),
            drop: spec.drop.iter().map(|p| keys(p)).collect(),
            variables,
            on_error: spec.on_error.clone(),
            dead_letter,
            projection: (!projection.is_empty()).then(|| JsonParser::new(projection, None)),
        }
    }

    /// The output text of `raw`, or None when nothing changes.
    fn apply(&self, raw: &str) -> Result<Option<String>, String> {
        if let Some(out) = self.append(raw) {
            return out.map(Some);
        }
        self.rebuild(raw)
    }

    /// The fast path (`Appending`), or None where it does not apply: the
    /// record is not flat, holds a set key already (it is replaced in
    /// place), or a value has no exact form in the scanner's reading.
    fn append(&self, raw: &str) -> Option<Result<String, String>> {
        let fast = self.appending.as_ref()?;
        let (values, present) = fast.reader.scan_flat(raw)?;
        let n = self.variables.len();
        if present[n..].iter().any(|&p| p) {
            return None;
        }
        let mut vars = Vars::default();
        for ((name, v), here) in self.variables.iter().zip(values).zip(&present) {
            if *here {
                vars.bind_scalar(name, v)?;
            }
        }
        // The scanner checked the object: it ends with `}` and whitespace.
        let close = raw.rfind('}')?;
        let body = raw[..close].trim_end();
        let mut out = String::with_capacity(raw.len() + 32);
        out.push_str(body);
        let mut first = body.ends_with('{');
        for ((_, e), key) in self.set.iter().zip(&fast.keys) {
            let value = match e.eval(&vars).and_then(|v| to_json(&v).map_err(|why| format!("`{}`: {why}", e.source()))) {
                Ok(v) => v,
                Err(why) => return Some(Err(why)),
            };
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(key);
            out.push(':');
            out.push_str(&value.to_string());
        }
        out.push('}');
        Some(Ok(out))
    }

    /// The general path: parse the top-level members, rename, set, drop,
    /// and write the object again.
    fn rebuild(&self, raw: &str) -> Result<Option<String>, String> {
        let obj: IndexMap<String, &RawValue> = serde_json::from_str(raw).map_err(|e| format!("invalid JSON: {e}"))?;
        let mut vars = Vars::default();
        for name in &self.variables {
            if let Some(r) = obj.get(name) {
                let v: Json = serde_json::from_str(r.get()).map_err(|e| format!("invalid JSON: {e}"))?;
                vars.bind(name, &v)?;
            }
        }
        let mut computed = Vec::with_capacity(self.set.len());
        for (_, e) in &self.set {
            computed.push(to_json(&e.eval(&vars)?).map_err(|why| format!("`{}`: {why}", e.source()))?);
        }
        let mut members: IndexMap<String, Member> = obj.into_iter().map(|(k, v)| (k, Member::Raw(v))).collect();
        let mut changed = false;
        for (new, old) in &self.rename {
            if let Some(v) = remove(&mut members, old)? {
                insert(&mut members, new, v)?;
                changed = true;
            }
        }
        for ((path, _), v) in self.set.iter().zip(computed) {
            insert(&mut members, path, v)?;
            changed = true;
        }
        for path in &self.drop {
            changed |= remove(&mut members, path)?.is_some();
        }
        if !changed {
            return Ok(None);
        }
        let mut out = String::with_capacity(raw.len() + 32);
        out.push('{');
        for (i, (k, m)) in members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(k).map_err(|e| e.to_string())?);
            out.push(':');
            match m {
                Member::Raw(r) => out.push_str(r.get()),
                Member::Value(v) => out.push_str(&serde_json::to_string(v).map_err(|e| e.to_string())?),
            }
        }
        out.push('}');
        Ok(Some(out))
    }

    fn process_one(&self, r: Record) -> Result<Record, (Record, String)> {
        let text = match self.apply(&r.raw) {
            Ok(Some(t)) => t.into_boxed_str(),
            Ok(None) => r.raw.clone(),
            Err(why) => return Err((r, why)),
        };
        let fields = match &self.projection {
            Some(p) => match p.fields(&text) {
                Ok(fields) => fields,
                Err(why) => return Err((r, format!("output {text}: {why}"))),
            },
            None => Vec::new(),
        };
        Ok(Record { fields, raw: text, event_time: r.event_time, key_group: r.key_group, split_watermark: r.split_watermark })
    }
}

impl Appending {
    fn new(spec: &MapSpec, variables: &[String]) -> Option<Appending> {
        if !spec.rename.is_empty() || !spec.drop.is_empty() || spec.set.is_empty() {
            return None;
        }
        let mut targets = Vec::with_capacity(spec.set.len());
        for (path, _) in &spec.set {
            let k = keys(path);
            if k.len() != 1 || variables.contains(&k[0]) {
                return None;
            }
            targets.push(k.into_iter().next().expect("one key"));
        }
        let need = FieldNeed { required: false, numeric: false };
        let fields = variables.iter().chain(&targets).map(|k| (FieldPath::key(k).to_string(), need)).collect();
        let keys = targets.iter().map(|k| Json::String(k.clone()).to_string()).collect();
        Some(Appending { reader: JsonParser::new(fields, None), keys })
    }
}

/// Take the value at `path` out of `members` (None: not there).
fn remove(members: &mut IndexMap<String, Member>, path: &[String]) -> Result<Option<Json>, String> {
    let (head, rest) = path.split_first().expect("a path has a key");
    if rest.is_empty() {
        return match members.shift_remove(head) {
            Some(mut m) => Ok(Some(m.value()?.take())),
            None => Ok(None),
        };
    }
    let Some(m) = members.get_mut(head) else { return Ok(None) };
    let mut v = m.value()?;
    for k in &rest[..rest.len() - 1] {
        match v.get_mut(k.as_str()) {
            Some(next) => v = next,
            None => return Ok(None),
        }
    }
    Ok(v.as_object_mut().and_then(|o| o.remove(rest.last().expect("non-empty"))))
}

/// Put `value` at `path`, making the objects on the way.
fn insert(members: &mut IndexMap<String, Member>, path: &[String], value: Json) -> Result<(), String> {
    let (head, rest) = path.split_first().expect("a path has a key");
    if rest.is_empty() {
        members.insert(head.clone(), Member::Value(value));
        return Ok(());
    }
    let mut v = members.entry(head.clone()).or_insert_with(|| Member::Value(Json::Object(Default::default()))).value()?;
    for (i, k) in rest.iter().enumerate() {
        let Some(obj) = v.as_object_mut() else {
            return Err(format!("cannot set `{}`: `{}` is not an object", path.join("."), path[..=i].join(".")));
        };
        if i == rest.len() - 1 {
            obj.insert(k.clone(), value);
            return Ok(());
        }
        v = obj.entry(k.clone()).or_insert_with(|| Json::Object(Default::default()));
    }
    unreachable!("the loop returns at the last key")
}

impl Operator for Map {
    fn process(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        for r in batch {
            match self.process_one(r) {
                Ok(r) => out.push(r),
                Err((r, why)) => refuse(&self.name, &self.on_error, self.dead_letter.as_ref(), &r.raw, &why, ctx.metrics)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Value;

    fn map(set: &[(&str, &str)], drop: &[&str], rename: &[(&str, &str)], projection: Vec<(String, FieldNeed)>) -> Map {
        let spec = MapSpec {
            rename: rename.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            set: set.iter().map(|(p, e)| (p.to_string(), Expression::compile(e).unwrap())).collect(),
            drop: drop.iter().map(|d| d.to_string()).collect(),
            on_error: OnError::Skip,
        };
        Map::new("m", &spec, projection, None)
    }

    #[test]
    fn sets_renames_and_drops_keeping_untouched_members_raw() {
        let m = map(&[("total_eur", "double(amount) * 0.5"), ("user.tier", "'gold'")], &["debug"], &[("uid", "user.id")], vec![]);
        let out = m.apply(r#"{"amount": 10, "user": {"id": 7, "c": "DE"}, "debug": [1], "x": 1.50}"#).unwrap().unwrap();
        assert_eq!(out, r#"{"amount":10,"user":{"c":"DE","tier":"gold"},"x":1.50,"uid":7,"total_eur":5.0}"#);
    }

    #[test]
    fn raw_text_passes_unchanged_when_nothing_changes() {
        let m = map(&[], &["nope", "a.b"], &[("x", "missing")], vec![]);
        assert_eq!(m.apply(r#"{"a": 1,  "z": 2}"#).unwrap(), None);
        let r = m.process_one(Record::new(vec![], r#"{"a": 1,  "z": 2}"#.into(), Some(5))).ok().unwrap();
        assert_eq!(&*r.raw, r#"{"a": 1,  "z": 2}"#);
        assert_eq!(r.event_time, Some(5));
    }

    #[test]
    fn output_is_projected_for_downstream_and_errors_are_refused() {
        let need = vec![("uid".to_string(), FieldNeed { required: true, numeric: false })];
        let m = map(&[], &[], &[("uid", "user.id")], need);
        let r = m.process_one(Record::new(vec![], r#"{"user": {"id": "u7"}}"#.into(), None)).ok().unwrap();
        assert_eq!(r.fields, vec![Value::Str("u7".into())]);
        let (_, why) = m.process_one(Record::new(vec![], r#"{"user": 3}"#.into(), None)).err().unwrap();
        assert!(why.contains("missing key field `uid`"), "{why}");
        let bad = map(&[("y", "x + 1")], &[], &[], vec![]);
        assert!(bad.apply(r#"{"x": "s"}"#).is_err());
        let clash = map(&[("a.b", "1")], &[], &[], vec![]);
        assert!(clash.apply(r#"{"a": 5}"#).unwrap_err().contains("`a` is not an object"));
    }

    #[test]
    fn a_map_that_only_adds_fields_appends_them_to_the_raw_text() {
        let m = map(&[("c", "a + 1"), ("d", "b + '!'")], &[], &[], vec![]);
        assert!(m.appending.is_some());
        assert_eq!(m.apply(r#"{"a": 1, "b": "x"}  "#).unwrap().unwrap(), r#"{"a": 1, "b": "x","c":2,"d":"x!"}"#);
        let only = map(&[("c", "1")], &[], &[], vec![]);
        assert_eq!(only.apply("{ }").unwrap().unwrap(), r#"{"c":1}"#);
        // A record that holds a set key has it replaced in place (the general path).
        assert_eq!(only.apply(r#"{"c": 0, "z": 1}"#).unwrap().unwrap(), r#"{"c":1,"z":1}"#);
        // Errors are the same on both paths.
        assert!(m.apply(r#"{"a": 1}"#).unwrap_err().contains('b'), "b is missing");
        assert!(m.apply(r#"{"a": "s", "b": "x"}"#).is_err());
        // Not for maps that rename or drop, set nested keys, or set a field they read.
        for m in [
            map(&[("c", "1")], &["x"], &[], vec![]),
            map(&[("c", "1")], &[], &[("y", "x")], vec![]),
            map(&[("c.d", "1")], &[], &[], vec![]),
            map(&[("a", "a + 1")], &[], &[], vec![]),
        ] {
            assert!(m.appending.is_none());
        }
    }

    #[test]
    fn appending_and_rebuilding_give_the_same_object() {
        let m = map(&[("n", "size(s) + a"), ("t", "s + 'x'")], &[], &[], vec![]);
        let mut seed = 7u64;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..2000 {
            let mut members = Vec::new();
            for k in ["a", "s", "n", "q", "t"] {
                if next(4) == 0 {
                    continue;
                }
                let v = match (k, next(7)) {
                    ("a", 0) => "1.5".to_string(),
                    ("a", 1) => "\"1\"".to_string(),
                    ("a", _) => format!("{}", next(1000) as i64 - 500),
                    (_, 0) => "{\"x\": [1]}".to_string(),
                    (_, 1) => "\"e\\u00e9\"".to_string(),
                    (_, 2) => "null".to_string(),
                    (_, _) => format!("\"v{}\"", next(100)),
                };
                members.push(format!("\"{k}\": {v}"));
            }
            let raw = format!("{{{}}}", members.join(", "));
            let fast = m.apply(&raw);
            let general = m.rebuild(&raw);
            match (fast, general) {
                (Ok(Some(f)), Ok(Some(g))) => {
                    let (f, g): (Json, Json) = (serde_json::from_str(&f).unwrap(), serde_json::from_str(&g).unwrap());
                    assert_eq!(f, g, "{raw}");
                }
                (Err(_), Err(_)) => {}
                (f, g) => panic!("{raw}: appending {f:?}, rebuilding {g:?}"),
            }
        }
    }
}

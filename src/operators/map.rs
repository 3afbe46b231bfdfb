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
        Map {
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
        let obj: IndexMap<String, &RawValue> = serde_json::from_str(raw).map_err(|e| format!("invalid JSON: {e}"))?;
        let mut vars = Vars::default();
        for name in &self.variables {
            if let Some(r) = obj.get(name) {
                let v: Json = serde_json::from_str(r.get()).map_err(|e| format!("invalid JSON: {e}"))?;
                vars.bind(name, &v);
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
            Some(p) => match p.parse(&text) {
                Ok(projected) => projected.fields,
                Err(why) => return Err((r, format!("output {text}: {why}"))),
            },
            None => Vec::new(),
        };
        Ok(Record { fields, raw: text, event_time: r.event_time, key_group: r.key_group, split_watermark: r.split_watermark })
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
}

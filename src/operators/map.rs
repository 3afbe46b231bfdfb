//! `map`: renames, then sets (CEL expressions, all evaluated over the input
//! record), then drops fields. The output is the new JSON object: the
//! top-level members it does not touch keep their raw text and their order,
//! renamed and set members come last unless they replace one in place, and
//! a nested object it changes is written again (its members in key order).
//! A record nothing changes passes with its raw text as it was. A record an
//! expression fails on, or whose output lacks a field needed downstream,
//! follows `on_error`. Stateless: chained into the task of its input.
//!
//! One scan per record: the expressions read the values the source
//! projected for them (`plan::Extras`), a map that only adds top-level
//! fields appends them to the text when the source saw none of them, and
//! the values the operators after it need are handed on (the new fields'
//! values, the untouched fields' input values); the output text is read
//! only for what neither gives (a renamed or nested field, a null).

use indexmap::IndexMap;
use serde_json::value::RawValue;
use serde_json::Value as Json;

use super::filter::refuse;
use super::{Context, DeadLetter, OpResult, Operator};
use crate::config::{MapSpec, OnError};
use crate::expr::{Expression, Outcome, Slots};
use crate::format::json::{FieldNeed, JsonParser};
use crate::format::path::{FieldPath, Segment};
use crate::plan::{map_touches, Extras, Layout};
use crate::types::{Record, Value};

/// A path of object keys.
type Keys = Vec<String>;

pub struct Map {
    name: String,
    rename: Vec<(Keys, Keys)>,
    set: Vec<(Keys, Expression)>,
    /// Per set expression, per variable: where the input records hold it.
    set_slots: Vec<Vec<Option<usize>>>,
    drop: Vec<Keys>,
    on_error: OnError,
    dead_letter: Option<DeadLetter>,
    /// The fields needed downstream, read from the output text where the
    /// map cannot hand them on (None: none are needed).
    projection: Option<JsonParser>,
    /// Their needs, in order.
    needs: Vec<FieldNeed>,
    /// Per value of an output record (the needed fields, then the extras
    /// of the operators after it): where it comes from.
    out: Vec<Origin>,
    /// The fast path of a map that only sets new top-level fields.
    appending: Option<Appending>,
    input: Layout,
    /// Per output value: an input value no other output takes (moved).
    movable: Vec<bool>,
}

/// Where a value of the output record comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The value set expression `j` computed.
    Set(usize),
    /// The input record's value in slot `k` (a member the map does not touch).
    Input(usize),
    /// Known presence of a key.
    Present(bool),
    /// The tag of the extras (`plan::Extras::tag`).
    Tag(i64),
    /// Not known here: read from the output text (needed fields) or null
    /// (extras, which then read the text themselves).
    Unknown,
}

/// A map with only `set`, of top-level keys none of its expressions reads:
/// a record that lacks all of them gets the new members appended to its
/// raw text instead of being rebuilt.
struct Appending {
    /// Per set key: where the input records say whether they hold it.
    presence: Vec<Option<usize>>,
    /// Reads the set keys' presence of a flat record the source did not
    /// tell about.
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
    /// `projection`: the fields the operators after it need; `input`: where
    /// the records it reads hold their values; `extras`: what the filters
    /// and maps after it want (`plan::Extras`).
    pub fn new(
        name: &str,
        spec: &MapSpec,
        projection: Vec<(String, FieldNeed)>,
        input: &Layout,
        extras: &Extras,
        dead_letter: Option<DeadLetter>,
    ) -> Self {
        let set: Vec<(Keys, Expression)> = spec.set.iter().map(|(p, e)| (keys(p), e.clone())).collect();
        let drop: Vec<Keys> = spec.drop.iter().map(|p| keys(p)).collect();
        let touched = map_touches(spec);
        let dropped = |k: &str| drop.iter().any(|d| d.len() == 1 && d[0] == k);
        // The set expression that gives top-level key `k` its output value:
        // none if another set or a drop changes `k` after it.
        let changed_after = |k: &str| set.iter().filter(|(p, _)| p[0] == k).count() > 1 || drop.iter().any(|d| d[0] == k);
        let set_here = |k: &str| set.iter().position(|(p, _)| p.len() == 1 && p[0] == k).filter(|_| !changed_after(k));
        // A value of the output (under top-level key `head`): a new
        // top-level field, else an input value the map does not touch.
        let value_of = |head: &str, top_level: bool, slot: Option<usize>| match set_here(head) {
            Some(j) if top_level => Origin::Set(j),
            _ if touched.iter().any(|t| t == head) => Origin::Unknown,
            _ => slot.map_or(Origin::Unknown, Origin::Input),
        };
        let mut out = Vec::new();
        for (path, _) in &projection {
            let p = FieldPath::parse(path).unwrap_or_else(|_| FieldPath::key(path));
            out.push(value_of(p.head(), p.is_top_level(), input.field(path)));
        }
        if !extras.is_empty() {
            out.push(Origin::Tag(extras.tag()));
        }
        for key in &extras.values {
            out.push(value_of(key, true, input.value(key)));
        }
        for key in &extras.presence {
            out.push(if dropped(key) {
                Origin::Present(false)
            } else if set_here(key).is_some() {
                Origin::Present(true)
            } else if !touched.contains(key) {
                input.presence(key).map_or(Origin::Unknown, Origin::Input)
            } else {
                Origin::Unknown
            });
        }
        let set_slots = set.iter().map(|(_, e)| e.variables().iter().map(|v| input.value(v)).collect()).collect();
        Map {
            appending: Appending::new(spec, input),
            name: name.to_string(),
            rename: spec.rename.iter().map(|(new, old)| (keys(new), keys(old))).collect(),
            set,
            set_slots,
            drop,
            on_error: spec.on_error.clone(),
            dead_letter,
            needs: projection.iter().map(|(_, n)| *n).collect(),
            projection: (!projection.is_empty()).then(|| JsonParser::new(projection, None)),
            movable: out
                .iter()
                .map(|o| matches!(o, Origin::Input(k) if out.iter().filter(|p| **p == Origin::Input(*k)).count() == 1))
                .collect(),
            out,
            input: input.clone(),
        }
    }

    /// The values of the set expressions over record `r`.
    fn compute<'a>(&'a self, r: &'a Record, limit: usize) -> Result<Vec<Outcome<'a>>, String> {
        let mut computed = Vec::with_capacity(self.set.len());
        for ((_, e), slots) in self.set.iter().zip(&self.set_slots) {
            computed.push(e.eval_record(&Slots { fields: &r.fields, slots, limit }, &r.raw)?);
        }
        Ok(computed)
    }

    /// The output text of `r` (None: unchanged), given the set values.
    fn apply(&self, r: &Record, computed: &[Outcome], limit: usize) -> Result<Option<String>, String> {
        if let Some(fast) = &self.appending {
            if let Some(absent) = fast.lacks_all(r, limit) {
                if absent {
                    return self.append(&r.raw, computed, fast).map(Some);
                }
            }
        }
        self.rebuild(&r.raw, computed)
    }

    /// The fast path (`Appending`): `raw` lacks every set key.
    fn append(&self, raw: &str, computed: &[Outcome], fast: &Appending) -> Result<String, String> {
        // A record's text is a JSON object (a source checked it, or an
        // operator wrote it): it ends with `}` and whitespace.
        let close = raw.rfind('}').ok_or_else(|| format!("invalid JSON: not an object: {raw}"))?;
        let body = raw[..close].trim_end();
        let mut out = String::with_capacity(raw.len() + 32);
        out.push_str(body);
        let mut first = body.ends_with('{');
        for (((_, e), key), value) in self.set.iter().zip(&fast.keys).zip(computed) {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(key);
            out.push(':');
            value.write_json(&mut out, e.source())?;
        }
        out.push('}');
        Ok(out)
    }

    /// The general path: parse the top-level members, rename, set, drop,
    /// and write the object again.
    fn rebuild(&self, raw: &str, computed: &[Outcome]) -> Result<Option<String>, String> {
        let obj: IndexMap<String, &RawValue> = serde_json::from_str(raw).map_err(|e| format!("invalid JSON: {e}"))?;
        let mut values = Vec::with_capacity(self.set.len());
        for ((_, e), v) in self.set.iter().zip(computed) {
            values.push(v.to_json(e.source())?);
        }
        let mut members: IndexMap<String, Member> = obj.into_iter().map(|(k, v)| (k, Member::Raw(v))).collect();
        let mut changed = false;
        for (new, old) in &self.rename {
            if let Some(v) = remove(&mut members, old)? {
                insert(&mut members, new, v)?;
                changed = true;
            }
        }
        for ((path, _), v) in self.set.iter().zip(values) {
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

    /// The output text (None: unchanged) and values of `r`; the values of
    /// the outputs in the returned mask are still to be moved from `r`'s.
    fn output(&self, r: &Record) -> Result<(Option<String>, Vec<Value>, u64), String> {
        let limit = self.input.trusted(&r.fields);
        let computed = self.compute(r, limit)?;
        let text = self.apply(r, &computed, limit)?;
        let mut fields = Vec::with_capacity(self.out.len());
        let mut read_text = false;
        let mut moves = 0u64;
        for (i, from) in self.out.iter().enumerate() {
            let need = self.needs.get(i);
            let fits = |v: &Value| {
                need.is_none_or(|n| !n.numeric || matches!(v, Value::Int(_) | Value::Float(_) | Value::Decimal(_) | Value::Null))
            };
            let v = match *from {
                Origin::Set(j) => computed[j].to_value(),
                // Null in a projection may stand for "not known".
                Origin::Input(k) => match r.fields.get(k).filter(|v| k < limit && **v != Value::Null) {
                    // Moved out of the input record when it is done with.
                    Some(v) if i < 64 && self.movable[i] => {
                        read_text |= !fits(v);
                        moves |= 1 << i;
                        fields.push(Value::Null);
                        continue;
                    }
                    other => other.cloned(),
                },
                Origin::Present(b) => Some(Value::Bool(b)),
                Origin::Tag(t) => Some(Value::Int(t)),
                Origin::Unknown => None,
            };
            read_text |= match &v {
                Some(v) => !fits(v),
                None => need.is_some(),
            };
            fields.push(v.unwrap_or(Value::Null));
        }
        if read_text {
            // The needed fields come from the text, not from the input.
            let n = self.needs.len();
            moves &= if n >= 64 { 0 } else { !((1u64 << n) - 1) };
            // The parser says why a needed field is missing or wrong.
            let text = text.as_deref().unwrap_or(&r.raw);
            if let Some(p) = &self.projection {
                let read = p.fields(text).map_err(|why| format!("output {text}: {why}"))?;
                for (slot, v) in fields.iter_mut().zip(read) {
                    *slot = v;
                }
            }
        }
        Ok((text, fields, moves))
    }

    fn process_one(&self, r: Record) -> Result<Record, (Record, String)> {
        match self.output(&r) {
            Ok((text, mut fields, moves)) => {
                let mut input = r.fields;
                for (i, from) in self.out.iter().enumerate().take(64) {
                    if let (Origin::Input(k), true) = (*from, moves & (1 << i) != 0) {
                        fields[i] = std::mem::replace(&mut input[k], Value::Null);
                    }
                }
                let raw = match text {
                    Some(t) => t.into_boxed_str(),
                    None => r.raw,
                };
                Ok(Record { fields, raw, event_time: r.event_time, key_group: r.key_group, split_watermark: r.split_watermark })
            }
            Err(why) => Err((r, why)),
        }
    }
}

impl Appending {
    fn new(spec: &MapSpec, input: &Layout) -> Option<Appending> {
        if !spec.rename.is_empty() || !spec.drop.is_empty() || spec.set.is_empty() {
            return None;
        }
        let read: Vec<&String> = spec.set.iter().flat_map(|(_, e)| e.variables()).collect();
        let mut targets = Vec::with_capacity(spec.set.len());
        for (path, _) in &spec.set {
            let k = keys(path);
            if k.len() != 1 || read.contains(&&k[0]) {
                return None;
            }
            targets.push(k.into_iter().next().expect("one key"));
        }
        let need = FieldNeed::default();
        let fields = targets.iter().map(|k| (FieldPath::key(k).to_string(), need)).collect();
        let keys = targets.iter().map(|k| Json::String(k.clone()).to_string()).collect();
        let presence = targets.iter().map(|k| input.presence(k)).collect();
        Some(Appending { presence, reader: JsonParser::new(fields, None), keys })
    }

    /// Whether `r` lacks every set key (None: not known; nested or odd
    /// text the scanner leaves to the general path).
    fn lacks_all(&self, r: &Record, limit: usize) -> Option<bool> {
        let told = |slot: &Option<usize>| match slot.filter(|&k| k < limit).and_then(|k| r.fields.get(k)) {
            Some(Value::Bool(b)) => Some(*b),
            _ => None,
        };
        let mut any = false;
        for slot in &self.presence {
            match told(slot) {
                Some(present) => any |= present,
                // The source did not say: read the text.
                None => return Some(!self.reader.scan_flat(&r.raw)?.1.iter().any(|&p| p)),
            }
        }
        Some(!any)
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
        Map::new("m", &spec, projection, &Layout::default(), &Extras::default(), None)
    }

    /// The output text of `raw` (None: unchanged).
    fn apply(m: &Map, raw: &str) -> Result<Option<String>, String> {
        let r = Record::new(vec![], raw.into(), None);
        let computed = m.compute(&r, 0)?;
        m.apply(&r, &computed, 0)
    }

    /// The same by the general path.
    fn rebuild(m: &Map, raw: &str) -> Result<Option<String>, String> {
        let r = Record::new(vec![], raw.into(), None);
        let computed = m.compute(&r, 0)?;
        m.rebuild(raw, &computed)
    }

    #[test]
    fn sets_renames_and_drops_keeping_untouched_members_raw() {
        let m = map(&[("total_eur", "double(amount) * 0.5"), ("user.tier", "'gold'")], &["debug"], &[("uid", "user.id")], vec![]);
        let out = apply(&m, r#"{"amount": 10, "user": {"id": 7, "c": "DE"}, "debug": [1], "x": 1.50}"#).unwrap().unwrap();
        assert_eq!(out, r#"{"amount":10,"user":{"c":"DE","tier":"gold"},"x":1.50,"uid":7,"total_eur":5.0}"#);
    }

    #[test]
    fn raw_text_passes_unchanged_when_nothing_changes() {
        let m = map(&[], &["nope", "a.b"], &[("x", "missing")], vec![]);
        assert_eq!(apply(&m, r#"{"a": 1,  "z": 2}"#).unwrap(), None);
        let r = m.process_one(Record::new(vec![], r#"{"a": 1,  "z": 2}"#.into(), Some(5))).ok().unwrap();
        assert_eq!(&*r.raw, r#"{"a": 1,  "z": 2}"#);
        assert_eq!(r.event_time, Some(5));
    }

    #[test]
    fn output_is_projected_for_downstream_and_errors_are_refused() {
        let need = vec![("uid".to_string(), FieldNeed { required: true, ..FieldNeed::default() })];
        let m = map(&[], &[], &[("uid", "user.id")], need);
        let r = m.process_one(Record::new(vec![], r#"{"user": {"id": "u7"}}"#.into(), None)).ok().unwrap();
        assert_eq!(r.fields, vec![Value::Str("u7".into())]);
        let (_, why) = m.process_one(Record::new(vec![], r#"{"user": 3}"#.into(), None)).err().unwrap();
        assert!(why.contains("missing key field `uid`"), "{why}");
        let bad = map(&[("y", "x + 1")], &[], &[], vec![]);
        assert!(apply(&bad, r#"{"x": "s"}"#).is_err());
        let clash = map(&[("a.b", "1")], &[], &[], vec![]);
        assert!(apply(&clash, r#"{"a": 5}"#).unwrap_err().contains("`a` is not an object"));
    }

    #[test]
    fn a_map_that_only_adds_fields_appends_them_to_the_raw_text() {
        let m = map(&[("c", "a + 1"), ("d", "b + '!'")], &[], &[], vec![]);
        assert!(m.appending.is_some());
        assert_eq!(apply(&m, r#"{"a": 1, "b": "x"}  "#).unwrap().unwrap(), r#"{"a": 1, "b": "x","c":2,"d":"x!"}"#);
        let only = map(&[("c", "1")], &[], &[], vec![]);
        assert_eq!(apply(&only, "{ }").unwrap().unwrap(), r#"{"c":1}"#);
        // A record that holds a set key has it replaced in place (the general path).
        assert_eq!(apply(&only, r#"{"c": 0, "z": 1}"#).unwrap().unwrap(), r#"{"c":1,"z":1}"#);
        // Errors are the same on both paths.
        assert!(apply(&m, r#"{"a": 1}"#).unwrap_err().contains('b'), "b is missing");
        assert!(apply(&m, r#"{"a": "s", "b": "x"}"#).is_err());
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
            let fast = apply(&m, &raw);
            let general = rebuild(&m, &raw);
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

#[cfg(test)]
mod one_scan {
    //! Issue 16: a source projecting the values a chain of filters and maps
    //! needs (`plan::Extras`), and maps handing their values on, give the
    //! same records (text, values, refusals) as reading each record's text.

    use super::*;
    use crate::config::{load_str, NodeKind};
    use crate::operators::filter::Filter;
    use crate::plan::Plan;

    const PIPELINE: &str = r#"
name: p
sources:
  - {name: src, type: file, path: PATH}
operators:
  - {name: f, type: filter, input: src, where: "a % 3 != 1 || s == 'x'"}
  - {name: m, type: map, input: f, set: {n: "a * 2", s2: "s + '!'"}}
  - {name: g, type: filter, input: m, where: "n > 0 && s2 != 'x!' && size(u) > 0"}
  - {name: m2, type: map, input: g, set: {d: "double(n) / 4.0"}, drop: [z], rename: {w: v}}
  - name: agg
    type: aggregate
    input: m2
    key: [u]
    aggregates: [{fn: sum, field: n, as: total}, {fn: max, field: d, as: top}, {fn: count, field: s2, as: c}, {fn: count, field: w, as: ws}]
sinks:
  - {name: out, type: blackhole, input: agg}
"#;

    enum Op {
        Filter(Filter),
        Map(Map),
    }

    /// The source's parser and the chain's operators, with the plan's
    /// extras (`one_scan`) or without (each reads the record's text).
    fn chain(plan: &Plan, one_scan: bool) -> (JsonParser, Vec<(String, Op)>) {
        let mut parser = JsonParser::new(plan.projections[0].clone(), None);
        if one_scan {
            parser = parser.with_extras(plan.extras[0].values.clone(), plan.extras[0].presence.clone());
        }
        let mut ops = Vec::new();
        for (id, node) in plan.pipeline.nodes.iter().enumerate() {
            let input = match one_scan {
                true => plan.input_layout(id),
                false => plan.stream_head(id).map(|h| Layout::new(plan.schemas[h].clone(), Extras::default())).unwrap_or_default(),
            };
            let extras = if one_scan { plan.extras[id].clone() } else { Extras::default() };
            match &node.kind {
                NodeKind::Filter(f) => ops.push((node.name.clone(), Op::Filter(Filter::new(&node.name, f, &input, None)))),
                NodeKind::Map(m) => {
                    ops.push((node.name.clone(), Op::Map(Map::new(&node.name, m, plan.projections[id].clone(), &input, &extras, None))))
                }
                _ => {}
            }
        }
        (parser, ops)
    }

    /// What the chain makes of `line`: the record reaching the aggregate
    /// (its text and schema values), or where and why it stopped.
    fn run(parser: &JsonParser, ops: &[(String, Op)], line: &str, schema_len: usize) -> Result<(String, Vec<Value>), String> {
        let mut r = parser.parse(line).map_err(|e| format!("source: {e}"))?;
        for (name, op) in ops {
            match op {
                Op::Filter(f) => {
                    if !f.test(&r).map_err(|e| format!("{name}: {e}"))? {
                        return Err(format!("{name}: dropped"));
                    }
                }
                Op::Map(m) => r = m.process_one(r).map_err(|(_, e)| format!("{name}: {e}"))?,
            }
        }
        Ok((r.raw.to_string(), r.fields[..schema_len].to_vec()))
    }

    /// `PIPELINE` planned over an empty input file (kept in the directory returned).
    fn plan_of_pipeline() -> (tempfile::TempDir, Plan) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "").unwrap();
        let plan = Plan::new(load_str(&PIPELINE.replace("PATH", &path.display().to_string()), "t.yaml", &[]).unwrap());
        (dir, plan)
    }

    #[test]
    fn the_chain_gives_what_reading_each_text_gives() {
        let (_dir, plan) = plan_of_pipeline();
        assert!(!plan.extras[0].values.is_empty() && !plan.extras[0].presence.is_empty(), "{:?}", plan.extras);
        let (fast_parser, fast) = chain(&plan, true);
        let (plain_parser, plain) = chain(&plan, false);
        let schema_len = plan.schemas[4].len();
        let values =
            ["1", "2", "3", "-0", "2.5", "null", "\"x\"", "\"y\"", "\"\"", "[1]", "{\"q\": 1}", "true", "9223372036854775807", "1e400"];
        let mut seed = 16u64;
        let mut next = move |n: usize| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 33) % n as u64) as usize
        };
        let (mut passed, mut by_values) = (0, 0);
        for _ in 0..20_000 {
            let mut members = Vec::new();
            for k in ["a", "s", "u", "z", "v", "n", "d", "s2", "a"] {
                if next(3) > 0 {
                    // Mostly values the chain takes, sometimes anything.
                    let v = match (k, next(4)) {
                        ("a", 0..=2) => values[next(3)],
                        ("s" | "u", 0..=2) => values[6 + next(3)],
                        _ => values[next(values.len())],
                    };
                    members.push(format!("\"{k}\": {v}"));
                }
            }
            let line = format!("{{{}}}", members.join(", "));
            let (got, want) = (run(&fast_parser, &fast, &line, schema_len), run(&plain_parser, &plain, &line, schema_len));
            assert_eq!(got, want, "{line}");
            passed += got.is_ok() as usize;
            by_values += fast_parser.parse(&line).is_ok_and(|r| r.fields.iter().any(|v| *v != Value::Null)) as usize;
        }
        assert!(passed > 1000 && by_values > 10_000, "{passed} passed, {by_values} with values");
    }

    #[test]
    fn records_of_another_layout_are_read_from_their_text() {
        // A record restored from a checkpoint of another pipeline may hold
        // other extras: the tag tells, and the text decides.
        let (_dir, plan) = plan_of_pipeline();
        let (parser, ops) = chain(&plan, true);
        let Op::Filter(f) = &ops[0].1 else { panic!("the filter first") };
        let line = r#"{"a": 1, "s": "x", "u": "u1"}"#;
        let mut r = parser.parse(line).unwrap();
        assert!(f.test(&r).unwrap());
        // The same values under another tag, with `s` made a lie: not trusted.
        let n = plan.schemas[0].len();
        r.fields[n] = Value::Int(7);
        let s = plan.input_layout(1).value("s").unwrap();
        r.fields[s] = Value::Str("y".into());
        assert!(f.test(&r).unwrap(), "read from the text, where s is 'x'");
        r.fields[n] = Value::Int(plan.extras[0].tag());
        assert!(!f.test(&r).unwrap(), "trusted, s = 'y' and a % 3 == 1");
    }
}

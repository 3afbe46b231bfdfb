//! The YAML tree typed into `raw` structs, reporting every shape error.
//!
//! The top-level scalars and each element of `sources`, `operators` and
//! `sinks` are deserialized on their own, so one bad element does not hide
//! the errors of the others. Within a unit, the offending entry is removed
//! and the unit tried again, to report several errors of one element too.
//!
//! Locating a serde error: serde_path_to_error gives the path where it can,
//! but every element is an internally tagged enum (`type: ...`), which serde
//! buffers before deserializing, so the path inside it is lost. There the
//! culprit is found by trial: the one entry whose removal changes the error
//! (or, for a missing field, the one mapping where adding it does).

use serde::de::DeserializeOwned;
use serde_yaml::{Mapping, Value};

use super::locate::{child, item, show, Locator, Seg, YPath};
use super::raw::{RawOperator, RawPipeline, RawSink, RawSource};
use super::ConfigError;

/// Bounds the retries within one unit (each retry removes one entry).
const MAX_ERRORS_PER_UNIT: usize = 16;
/// Tag keys are read first by serde, so removing them always changes the
/// error: they are tried last.
const TAGS: [&str; 2] = ["type", "kind"];

/// Which list of the pipeline an element belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Sources,
    Operators,
    Sinks,
}

impl Section {
    pub const ALL: [Section; 3] = [Section::Sources, Section::Operators, Section::Sinks];

    pub fn key(self) -> &'static str {
        match self {
            Section::Sources => "sources",
            Section::Operators => "operators",
            Section::Sinks => "sinks",
        }
    }
}

/// An element that could not be typed: only what compile needs to avoid
/// follow-on errors (its name exists; it reads its input).
#[derive(Debug, Clone)]
pub(crate) struct Broken {
    pub section: Section,
    pub index: usize,
    pub name: Option<String>,
    pub input: Option<String>,
}

/// The typed pipeline plus where each element came from.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub raw: RawPipeline,
    /// False when `name` was missing (already reported).
    pub name_ok: bool,
    /// YAML index of each element of `raw.sources`, `raw.operators`, `raw.sinks`.
    pub at: [Vec<usize>; 3],
    pub broken: Vec<Broken>,
}

/// Type `doc` as a `RawPipeline`, pushing every error found.
pub(crate) fn deserialize(doc: &Value, loc: &Locator, errors: &mut Vec<ConfigError>) -> Option<Parsed> {
    let Value::Mapping(top) = doc else {
        let what = if doc.is_null() { "an empty document" } else { "not a mapping" };
        errors.push(loc.at(&[], format!("the pipeline is {what}: expected a mapping with `name`, `sources`, `operators` and `sinks`")));
        return None;
    };
    let mut top = top.clone();
    let name_ok = top.contains_key("name");
    if !name_ok {
        errors.push(loc.at(&[], "missing field `name`: every pipeline needs a name"));
        top.insert("name".into(), Value::from(""));
    }
    // Lists are typed element by element below; an ill-shaped list stays for
    // serde to report.
    let mut lists: [Vec<Value>; 3] = Default::default();
    for (s, list) in Section::ALL.iter().zip(lists.iter_mut()) {
        if let Some(Value::Sequence(items)) = top.get_mut(s.key()) {
            *list = std::mem::take(items);
        }
    }
    // The lists were taken out above, so `raw` starts with empty ones.
    let raw: RawPipeline = de_unit(&Value::Mapping(top), &[], loc, errors)?;
    let mut parsed = Parsed { raw, name_ok, at: Default::default(), broken: vec![] };
    for (section, items) in Section::ALL.into_iter().zip(lists) {
        for (index, value) in items.into_iter().enumerate() {
            let path = item(&[Seg::Key(section.key().into())], index);
            let ok = match section {
                Section::Sources => de_unit::<RawSource>(&value, &path, loc, errors).map(|v| parsed.raw.sources.push(v)),
                Section::Operators => de_unit::<RawOperator>(&value, &path, loc, errors).map(|v| parsed.raw.operators.push(v)),
                Section::Sinks => de_unit::<RawSink>(&value, &path, loc, errors).map(|v| parsed.raw.sinks.push(v)),
            };
            match ok {
                Some(()) => parsed.at[section as usize].push(index),
                None => parsed.broken.push(Broken {
                    section,
                    index,
                    name: text_of(&value, "name"),
                    input: text_of(&value, "input").or_else(|| text_of(&value, "left")),
                }),
            }
        }
    }
    Some(parsed)
}

fn text_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// Type one unit at `path`, reporting each error and retrying without the
/// offending entry. None when it cannot be typed at all.
fn de_unit<T: DeserializeOwned>(value: &Value, path: &[Seg], loc: &Locator, errors: &mut Vec<ConfigError>) -> Option<T> {
    let mut value = value.clone();
    let mut removed: Vec<String> = Vec::new();
    for _ in 0..MAX_ERRORS_PER_UNIT {
        let (message, hint) = match check::<T>(&value) {
            Ok(t) => return Some(t),
            Err(e) => e,
        };
        if let Some(field) = missing_field(&message) {
            // Missing because we removed it: already reported as wrong.
            if !removed.iter().any(|r| r == field) {
                let at = find_missing::<T>(&value, field, &message);
                let mut full = path.to_vec();
                full.extend(at.iter().cloned());
                errors.push(loc.at(&full, format!("{message} in `{}`", show(&full))));
            }
            return None;
        }
        let at = culprit::<T>(&value, &message, hint);
        let mut full = path.to_vec();
        full.extend(at.iter().cloned());
        let message = readable(&message);
        errors.push(if message.starts_with("unknown field") { loc.at_key(&full, message) } else { loc.at(&full, message) });
        match at.last() {
            Some(Seg::Key(k)) => removed.push(k.clone()),
            Some(Seg::Idx(_)) => {}
            None => return None,
        }
        value = remove(&value, &at);
    }
    None
}

/// Deserialize, returning serde's message and serde_path_to_error's path.
fn check<T: DeserializeOwned>(value: &Value) -> Result<T, (String, YPath)> {
    serde_path_to_error::deserialize(value.clone()).map_err(|e| {
        let mut path = YPath::new();
        for seg in e.path().iter() {
            match seg {
                serde_path_to_error::Segment::Seq { index } => path.push(Seg::Idx(*index)),
                serde_path_to_error::Segment::Map { key } => path.push(Seg::Key(key.clone())),
                serde_path_to_error::Segment::Enum { .. } => {}
                serde_path_to_error::Segment::Unknown => break,
            }
        }
        (e.into_inner().to_string(), path)
    })
}

fn fails_with<T: DeserializeOwned>(value: &Value) -> Option<String> {
    check::<T>(value).err().map(|(m, _)| m)
}

fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// The entry an error (other than a missing field) is about, relative to `value`.
fn culprit<T: DeserializeOwned>(value: &Value, message: &str, hint: YPath) -> YPath {
    let unknown = message.strip_prefix("unknown field `").and_then(|r| r.split('`').next());
    if !hint.is_empty() && get(value, &hint).is_some() {
        let mut at = hint;
        if let Some(field) = unknown {
            if at.last() != Some(&Seg::Key(field.to_string())) && get(value, &child(&at, field)).is_some() {
                at.push(Seg::Key(field.to_string()));
            }
        }
        return at;
    }
    probe::<T>(value, Vec::new(), message)
}

/// Descend to the entry whose removal changes the error.
fn probe<T: DeserializeOwned>(root: &Value, at: YPath, message: &str) -> YPath {
    let children: Vec<Seg> = match get(root, &at) {
        Some(Value::Mapping(m)) => {
            let mut keys: Vec<Seg> = m.keys().map(|k| Seg::Key(key_text(k))).collect();
            keys.sort_by_key(|s| matches!(s, Seg::Key(k) if TAGS.contains(&k.as_str())));
            keys
        }
        Some(Value::Sequence(items)) => (0..items.len()).map(Seg::Idx).collect(),
        _ => return at,
    };
    for c in children {
        let mut next = at.clone();
        next.push(c);
        if fails_with::<T>(&remove(root, &next)).as_deref() != Some(message) {
            return probe::<T>(root, next, message);
        }
    }
    at
}

/// The mapping that lacks `field`: the one where adding it changes the error
/// into anything but "unknown field" (every struct denies unknown fields).
fn find_missing<T: DeserializeOwned>(root: &Value, field: &str, message: &str) -> YPath {
    let unknown = format!("unknown field `{field}`");
    let mut candidates = Vec::new();
    mappings(root, YPath::new(), &mut candidates);
    candidates
        .into_iter()
        .find(|at| {
            let mut trial = root.clone();
            if let Some(Value::Mapping(m)) = get_mut(&mut trial, at) {
                if m.contains_key(field) {
                    return false;
                }
                m.insert(Value::from(field), Value::Null);
            }
            match fails_with::<T>(&trial) {
                None => true,
                Some(m) => m != message && !m.starts_with(&unknown),
            }
        })
        .unwrap_or_default()
}

/// Every mapping under `v`, in document order.
fn mappings(v: &Value, at: YPath, out: &mut Vec<YPath>) {
    match v {
        Value::Mapping(m) => {
            out.push(at.clone());
            for (k, child_v) in m {
                mappings(child_v, child(&at, &key_text(k)), out);
            }
        }
        Value::Sequence(items) => {
            for (i, child_v) in items.iter().enumerate() {
                mappings(child_v, item(&at, i), out);
            }
        }
        _ => {}
    }
}

fn key_text(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => "?".to_string(),
    }
}

fn map_entry<'m>(m: &'m Mapping, key: &str) -> Option<&'m Value> {
    m.iter().find(|(k, _)| key_text(k) == key).map(|(_, v)| v)
}

fn get<'v>(v: &'v Value, path: &[Seg]) -> Option<&'v Value> {
    path.iter().try_fold(v, |v, seg| match (seg, v) {
        (Seg::Key(k), Value::Mapping(m)) => map_entry(m, k),
        (Seg::Idx(i), Value::Sequence(items)) => items.get(*i),
        _ => None,
    })
}

fn get_mut<'v>(v: &'v mut Value, path: &[Seg]) -> Option<&'v mut Value> {
    path.iter().try_fold(v, |v, seg| match (seg, v) {
        (Seg::Key(k), Value::Mapping(m)) => m.iter_mut().find(|(key, _)| key_text(key) == *k).map(|(_, v)| v),
        (Seg::Idx(i), Value::Sequence(items)) => items.get_mut(*i),
        _ => None,
    })
}

/// A copy of `root` without the entry at `path`.
fn remove(root: &Value, path: &[Seg]) -> Value {
    let mut out = root.clone();
    let Some((last, parent)) = path.split_last() else {
        return out;
    };
    match (get_mut(&mut out, parent), last) {
        (Some(Value::Mapping(m)), Seg::Key(k)) => m.retain(|key, _| key_text(key) != *k),
        (Some(Value::Sequence(items)), Seg::Idx(i)) if *i < items.len() => {
            items.remove(*i);
        }
        _ => {}
    }
    out
}

/// serde's message with our Rust type names replaced by what users write.
fn readable(message: &str) -> String {
    const NAMES: [(&str, &str); 9] = [
        ("internally tagged enum RawSource", "a source (a mapping with `type`)"),
        ("internally tagged enum RawOperator", "an operator (a mapping with `type`)"),
        ("internally tagged enum RawSink", "a sink (a mapping with `type`)"),
        ("internally tagged enum RawWindow", "a window (a mapping with `type`)"),
        ("internally tagged enum RawGenField", "a generated field (a mapping with `kind`)"),
        ("struct RawEventTime", "a mapping with `field`"),
        ("struct RawAggregate", "a mapping with `fn` and `as`"),
        ("struct RawPipeline", "a mapping"),
        ("variant identifier", "a type name"),
    ];
    NAMES.iter().fold(message.to_string(), |m, (from, to)| m.replace(from, to))
}

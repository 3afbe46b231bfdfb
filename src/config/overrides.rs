//! `--set KEY=VALUE` overrides, applied to the YAML tree before it is typed.
//!
//! KEY is a dotted path: `parallelism`, `sources.0.path`, or a list element
//! by its `name`: `sources.orders.rate_limit`. Missing keys of mappings are
//! created (`state.backend=rocksdb` on a pipeline without `state:`); list
//! elements must exist. VALUE is read as a YAML scalar, so `4` is a number
//! and `true` a boolean.

use serde_yaml::{Mapping, Value};

use super::locate::{Seg, YPath};
use super::ConfigError;

/// Apply every override to `doc`. Returns the path each one replaced (with
/// the override's origin, for locating later errors) and the failures.
pub(crate) fn apply(doc: &mut Value, overrides: &[String]) -> (Vec<(YPath, String)>, Vec<ConfigError>) {
    let mut applied = Vec::new();
    let mut errors = Vec::new();
    for spec in overrides {
        let origin = format!("--set {spec}");
        match apply_one(doc, spec) {
            Ok(path) => applied.push((path, origin)),
            Err(message) => errors.push(ConfigError { origin, line: 0, col: 0, message }),
        }
    }
    (applied, errors)
}

fn apply_one(doc: &mut Value, spec: &str) -> Result<YPath, String> {
    let (key, raw) = spec.split_once('=').ok_or("expected KEY=VALUE, e.g. `parallelism=4`")?;
    let steps: Vec<&str> = key.split('.').collect();
    if steps.iter().any(|s| s.is_empty()) {
        return Err(format!("`{key}` is not a valid key: expected dotted names, e.g. `sources.0.path`"));
    }
    let mut path = YPath::new();
    let mut node = doc;
    let mut first_created = None;
    for (i, step) in steps.iter().enumerate() {
        let here = steps[..i].join(".");
        if node.is_null() {
            // `state:` with nothing under it, or a mapping created below.
            *node = Value::Mapping(Mapping::new());
        }
        node = match node {
            Value::Mapping(m) => {
                path.push(Seg::Key(step.to_string()));
                let mut created = false;
                let next = map_step(m, step, &mut created);
                if created && first_created.is_none() {
                    first_created = Some(path.len());
                }
                next
            }
            Value::Sequence(items) => {
                let at = list_index(items, step).ok_or_else(|| {
                    format!("`{here}` has no element `{step}`: expected an index below {} or the `name` of an element", items.len())
                })?;
                path.push(Seg::Idx(at));
                &mut items[at]
            }
            _ => return Err(format!("`{here}` is a single value, so `{key}` does not exist")),
        };
    }
    *node = scalar(raw);
    // What this override created is its own: an error anywhere in it (an
    // unknown section name) is blamed on the override.
    path.truncate(first_created.unwrap_or(path.len()));
    Ok(path)
}

/// The value at `step` of a mapping, created (null) if absent: a missing
/// section (`state.backend` without `state:`) is created on the way, and an
/// unknown name is then refused by validation like one in the file.
fn map_step<'v>(m: &'v mut Mapping, step: &str, created: &mut bool) -> &'v mut Value {
    let key = Value::String(step.to_string());
    *created = !m.contains_key(&key);
    m.entry(key).or_insert(Value::Null)
}

/// A list element by position (`0`) or by its `name` field (`orders`).
fn list_index(items: &[Value], step: &str) -> Option<usize> {
    if let Ok(i) = step.parse::<usize>() {
        return (i < items.len()).then_some(i);
    }
    items.iter().position(|v| v.get("name").and_then(Value::as_str) == Some(step))
}

/// VALUE as a YAML scalar; anything else (e.g. `a: b`) stays a plain string.
fn scalar(raw: &str) -> Value {
    match serde_yaml::from_str::<Value>(raw) {
        Ok(v @ (Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_))) => v,
        _ => Value::String(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        serde_yaml::from_str("name: p\nsources:\n  - {name: orders, type: file, path: a}\n").unwrap()
    }

    fn set(spec: &str) -> Result<Value, String> {
        let mut d = doc();
        let (_, errs) = apply(&mut d, &[spec.to_string()]);
        match errs.into_iter().next() {
            Some(e) => Err(e.to_string()),
            None => Ok(d),
        }
    }

    #[test]
    fn sets_numbers_by_index_and_by_name() {
        assert_eq!(set("parallelism=4").unwrap()["parallelism"], Value::from(4));
        assert_eq!(set("sources.0.path=x").unwrap()["sources"][0]["path"], Value::from("x"));
        assert_eq!(set("sources.orders.rate_limit=100").unwrap()["sources"][0]["rate_limit"], Value::from(100));
        assert_eq!(set("name=a: b").unwrap()["name"], Value::from("a: b"));
    }

    #[test]
    fn reports_paths_that_do_not_exist() {
        let e = set("sources.nope.path=x").unwrap_err();
        assert_eq!(e, "--set sources.nope.path=x: `sources` has no element `nope`: expected an index below 1 or the `name` of an element");
        assert!(set("name.x=1").unwrap_err().contains("`name` is a single value"));
        assert!(set("parallelism").unwrap_err().contains("expected KEY=VALUE"));
    }

    #[test]
    fn creates_missing_sections() {
        // Issue 34 #7: `state.backend=rocksdb` failed without a `state:` section.
        let d = set("state.backend=rocksdb").unwrap();
        assert_eq!(d["state"]["backend"], Value::from("rocksdb"));
        let d = set("checkpoint.storage.options.region=eu").unwrap();
        assert_eq!(d["checkpoint"]["storage"]["options"]["region"], Value::from("eu"));
        let mut d: Value = serde_yaml::from_str("name: p\nstate:\n").unwrap();
        apply(&mut d, &["state.dir=/x".to_string()]);
        assert_eq!(d["state"]["dir"], Value::from("/x"), "an empty section is a mapping to fill");
    }

    #[test]
    fn returns_the_resolved_path() {
        let mut d = doc();
        let (applied, _) = apply(&mut d, &["sources.orders.path=x".to_string()]);
        let want = vec![Seg::Key("sources".into()), Seg::Idx(0), Seg::Key("path".into())];
        assert_eq!(applied, vec![(want, "--set sources.orders.path=x".to_string())]);
    }
}

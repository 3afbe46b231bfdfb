//! Loading a pipeline: read, expand `${VAR}`, parse, apply `--set`, type,
//! compile. Every step reports all it finds; the errors come back sorted.

use std::path::Path;

use serde_yaml::Value;

use super::compile::compile;
use super::deser::deserialize;
use super::env::{expand, position_of};
use super::locate::Locator;
use super::overrides;
use super::pipeline::Pipeline;
use super::{ConfigError, ConfigErrors};

/// Load and validate the pipeline file at `path`, with `--set KEY=VALUE`
/// overrides applied. Errors name `path` as given.
pub fn load_file(path: &Path, overrides: &[String]) -> Result<Pipeline, ConfigErrors> {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => load_str(&text, &origin, overrides),
        Err(e) => Err(ConfigErrors(vec![ConfigError {
            origin,
            line: 0,
            col: 0,
            message: format!("cannot read the pipeline file: {e}"),
        }])),
    }
}

/// Load and validate pipeline `text`; `origin` names it in errors.
pub fn load_str(text: &str, origin: &str, overrides: &[String]) -> Result<Pipeline, ConfigErrors> {
    load_with_env(text, origin, overrides, &|name| std::env::var(name).ok())
}

pub(crate) fn load_with_env(
    text: &str,
    origin: &str,
    overrides: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Pipeline, ConfigErrors> {
    let at = |offset: usize, message: String| {
        let (line, col) = position_of(text, offset);
        ConfigError {
            origin: origin.to_string(),
            line,
            col,
            message,
        }
    };
    let expanded = expand(text, env).map_err(|errs| {
        ConfigErrors(errs.into_iter().map(|e| at(e.offset, e.message)).collect())
    })?;
    let mut doc: Value = serde_yaml::from_str(&expanded.text).map_err(|e| {
        let (line, col, message) = match e.location() {
            Some(l) => {
                let (line, col) = expanded.to_source(l.line(), l.column());
                let own = format!(" at line {} column {}", l.line(), l.column());
                (line, col, e.to_string().replacen(&own, "", 1))
            }
            None => (0, 0, e.to_string()),
        };
        ConfigErrors(vec![ConfigError {
            origin: origin.to_string(),
            line,
            col,
            message: format!("invalid YAML: {message}"),
        }])
    })?;
    let (applied, mut errors) = overrides::apply(&mut doc, overrides);
    let loc = Locator::new(origin, &expanded, applied);
    let pipeline =
        deserialize(&doc, &loc, &mut errors).and_then(|parsed| compile(&parsed, &loc, &mut errors));
    match pipeline {
        Some(p) if errors.is_empty() => Ok(p),
        _ => {
            // Stable: errors on one line keep the order they were found in.
            errors.sort_by_key(|e| (e.line, e.col));
            Err(ConfigErrors(errors))
        }
    }
}

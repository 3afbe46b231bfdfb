//! Loading a pipeline: read, expand `${VAR}`, parse, apply `--set`, type,
//! compile. Every step reports all it finds; the errors come back sorted.

use std::path::Path;

use serde_yaml::Value;

use super::compile::compile;
use super::deser::deserialize;
use super::env::{expand, position_of};
use super::features::Features;
use super::locate::{unplaced_error_position, Locator};
use super::overrides;
use super::pipeline::Pipeline;
use super::{ConfigError, ConfigErrors, MAX_PIPELINE_BYTES};

/// Load and validate the pipeline file at `path`, with `--set KEY=VALUE`
/// overrides applied. Errors name `path` as given.
pub fn load_file(path: &Path, overrides: &[String]) -> Result<Pipeline, ConfigErrors> {
    load_file_as(path, overrides, None)
}

/// `load_file` for instance `instance` of a cluster (`--instance I/N`),
/// which takes the place of the file's `cluster.index` and `cluster.instances`.
pub fn load_file_as(path: &Path, overrides: &[String], instance: Option<Instance>) -> Result<Pipeline, ConfigErrors> {
    let origin = path.display().to_string();
    let whole = |message: String| ConfigErrors(vec![ConfigError { origin: origin.clone(), line: 0, col: 0, message }]);
    let text = read_capped(path, MAX_PIPELINE_BYTES).map_err(whole)?;
    load_with(&text, &origin, overrides, instance, &|name| std::env::var(name).ok(), Features::COMPILED)
}

/// `--instance I/N`: instance `index` of `instances` (checked with the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance {
    pub index: u64,
    pub instances: u64,
}

impl std::str::FromStr for Instance {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("expected I/N (instance I of N, 0 <= I < N), e.g. `0/3`, got `{s}`");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        Ok(Instance { index: i.trim().parse().map_err(|_| bad())?, instances: n.trim().parse().map_err(|_| bad())? })
    }
}

impl std::fmt::Display for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.instances)
    }
}

/// Put `instance` into the tree as `cluster.index` and `cluster.instances`;
/// returns the paths set, for locating errors at `--instance`.
fn set_instance(doc: &mut Value, instance: Instance) -> Vec<(super::locate::YPath, String)> {
    use super::locate::Seg;
    let Value::Mapping(top) = doc else { return Vec::new() };
    let key = Value::String("cluster".into());
    if !matches!(top.get(&key), Some(Value::Mapping(_))) {
        top.insert(key.clone(), Value::Mapping(Default::default()));
    }
    let Some(Value::Mapping(cluster)) = top.get_mut(&key) else { return Vec::new() };
    cluster.insert(Value::String("index".into()), Value::from(instance.index));
    cluster.insert(Value::String("instances".into()), Value::from(instance.instances));
    let origin = format!("--instance {instance}");
    ["index", "instances"].iter().map(|k| (vec![Seg::Key("cluster".into()), Seg::Key(k.to_string())], origin.clone())).collect()
}

/// Read at most `cap` bytes of `path` as UTF-8 text; more is an error. Reads
/// through a limit, so a device or FIFO without end (`/dev/zero`) costs at
/// most `cap + 1` bytes.
fn read_capped(path: &Path, cap: u64) -> Result<String, String> {
    use std::io::Read;
    let cannot = |e: std::io::Error| format!("cannot read the pipeline file: {e}");
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > cap {
        return Err(format!("the pipeline file is larger than {} MiB: expected a YAML pipeline, not data", cap >> 20));
    }
    String::from_utf8(bytes).map_err(|e| format!("cannot read the pipeline file: not UTF-8 text ({e})"))
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
    load_with(text, origin, overrides, None, env, Features::COMPILED)
}

/// `load_str` as a weir built with `features` would do it.
#[cfg(test)]
pub(crate) fn load_with_features(text: &str, origin: &str, features: Features) -> Result<Pipeline, ConfigErrors> {
    load_with(text, origin, &[], None, &|_| None, features)
}

fn load_with(
    text: &str,
    origin: &str,
    overrides: &[String],
    instance: Option<Instance>,
    env: &dyn Fn(&str) -> Option<String>,
    features: Features,
) -> Result<Pipeline, ConfigErrors> {
    if text.len() as u64 > MAX_PIPELINE_BYTES {
        let message = format!("the pipeline is larger than {} MiB: expected a YAML pipeline, not data", MAX_PIPELINE_BYTES >> 20);
        return Err(ConfigErrors(vec![ConfigError { origin: origin.to_string(), line: 1, col: 1, message }]));
    }
    let at = |offset: usize, message: String| {
        let (line, col) = position_of(text, offset);
        ConfigError { origin: origin.to_string(), line, col, message }
    };
    let expanded = expand(text, env).map_err(|errs| ConfigErrors(errs.into_iter().map(|e| at(e.offset, e.message)).collect()))?;
    let mut doc: Value = serde_yaml::from_str(&expanded.text).map_err(|e| {
        let (line, col, message) = match e.location() {
            Some(l) => {
                let (line, col) = expanded.to_source(l.line(), l.column());
                let own = format!(" at line {} column {}", l.line(), l.column());
                (line, col, e.to_string().replacen(&own, "", 1))
            }
            None => {
                let pos = unplaced_error_position(&expanded.text);
                let (line, col) = expanded.to_source(pos.line.max(1), pos.col.max(1));
                (line, col, e.to_string())
            }
        };
        ConfigErrors(vec![ConfigError { origin: origin.to_string(), line, col, message: format!("invalid YAML: {message}") }])
    })?;
    let (mut applied, mut errors) = overrides::apply(&mut doc, overrides);
    if let Some(i) = instance {
        applied.extend(set_instance(&mut doc, i));
    }
    let loc = Locator::new(origin, &expanded, applied);
    let pipeline = deserialize(&doc, &loc, &mut errors).and_then(|parsed| compile(&parsed, &loc, features, &mut errors));
    match pipeline {
        Some(p) if errors.is_empty() => Ok(p),
        _ => {
            // Stable: errors on one line keep the order they were found in.
            errors.sort_by_key(|e| (e.line, e.col));
            Err(ConfigErrors(errors))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::env::position_of;
    use crate::config::{AggFunc, NodeKind, OnError, SinkSpec, SourceKind, WindowSpec};

    const DATAGEN: &str = "\
name: p
sources:
  - name: gen
    type: datagen
    fields: {user: {kind: key, cardinality: 10}, ts: {kind: timestamp}, amount: {kind: int, min: 0, max: 9}}
    event_time: {field: ts}
";

    fn errors(text: &str) -> Vec<String> {
        errors_with(text, &[])
    }

    fn errors_with(text: &str, sets: &[&str]) -> Vec<String> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        match load_with_env(text, "t.yaml", &sets, &test_env) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    fn test_env(name: &str) -> Option<String> {
        (name == "OUT").then(|| "out-dir".to_string())
    }

    /// The pipeline text with `rest` (operators and sinks) appended.
    fn with(rest: &str) -> String {
        format!("{DATAGEN}{rest}")
    }

    #[track_caller]
    fn assert_one(text: &str, want: &str) {
        let errs = errors(text);
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(errs[0].starts_with(want), "{:?} does not start with {want:?}", errs[0]);
    }

    const SINK: &str = "sinks:\n  - {name: out, type: stdout, input: gen}\n";

    #[test]
    fn minimal_pipeline_loads() {
        let p = load_with_env(&with(SINK), "t.yaml", &[], &test_env).unwrap();
        assert_eq!((p.parallelism, p.max_parallelism), (1, 128));
        assert_eq!(p.nodes.len(), 2);
    }

    #[test]
    fn yaml_syntax_error_is_located() {
        assert_one("name: p\nsources: [a\n", "t.yaml:3:1: invalid YAML: ");
    }

    #[test]
    fn unknown_field_points_at_the_key() {
        let text = with(SINK).replace("event_time: {field: ts}\n", "event_time: {field: ts}\n    colour: red\n");
        assert_one(&text, "t.yaml:7:5: unknown field `colour`");
    }

    #[test]
    fn unknown_top_level_field_and_type() {
        assert_one(&format!("{}parallelism_x: 3\n", with(SINK)), "t.yaml:9:1: unknown field `parallelism_x`");
        assert_one(&with("sinks:\n  - {name: out, type: pulsar, input: gen}\n"), "t.yaml:8:23: unknown variant `pulsar`");
    }

    #[test]
    fn wrong_type_inside_a_tagged_element() {
        let text = with("operators:\n  - {name: a, type: aggregate, input: gen, key: [user], window: {type: tumbling, size: 10}, aggregates: [{fn: count, as: n}]}\nsinks:\n  - {name: out, type: stdout, input: a}\n");
        assert_one(&text, "t.yaml:8:88: invalid type: integer `10`, expected a string");
    }

    #[test]
    fn missing_field_points_at_the_mapping() {
        let text = with("operators:\n  - name: d\n    type: dedup\n    key: [user]\nsinks:\n  - {name: out, type: stdout, input: d}\n");
        assert_one(&text, "t.yaml:8:5: missing field `input` in `operators[0]`");
        let text = with("operators:\n  - {name: a, type: aggregate, input: gen, key: [user], window: {type: sliding, size: 10s}, aggregates: [{fn: count, as: n}]}\nsinks:\n  - {name: out, type: stdout, input: a}\n");
        assert_one(&text, "t.yaml:8:65: missing field `slide` in `operators[0].window`");
    }

    #[test]
    fn graph_errors() {
        assert_one(&with("sinks:\n  - {name: out, type: stdout, input: nope}\n"), "t.yaml:8:38: input `nope` is not a source or operator");
        assert_one(
            &with("sinks:\n  - {name: gen, type: stdout, input: gen}\n"),
            "t.yaml:8:12: duplicate name `gen`: already used by the source on line 3",
        );
        let cycle = with("operators:\n  - {name: a, type: dedup, input: b, key: [user]}\n  - {name: b, type: dedup, input: a, key: [user]}\nsinks:\n  - {name: out, type: stdout, input: gen}\n");
        assert_one(&cycle, "t.yaml:8:35: inputs form a cycle: `a` reads `b` reads `a`");
        assert_one(&with(""), "t.yaml:1:1: the pipeline has no sink");
        let unread =
            with("operators:\n  - {name: d, type: dedup, input: gen, key: [user]}\nsinks:\n  - {name: out, type: stdout, input: gen}\n");
        assert_one(&unread, "t.yaml:8:12: `d` is not read by any operator or sink");
        assert_one(&with("sinks:\n  - {name: out, type: stdout, input: out}\n"), "t.yaml:8:38: input `out` is a sink");
    }

    #[test]
    fn parallelism_limits() {
        assert_one(&format!("{}parallelism: 200\n", with(SINK)), "t.yaml:9:14: `parallelism` (200) exceeds `max_parallelism` (128)");
        assert_one(&format!("{}max_parallelism: 40000\n", with(SINK)), "t.yaml:9:18: `max_parallelism` must be between 1 and 32768");
        assert_one(&format!("{}parallelism: 0\n", with(SINK)), "t.yaml:9:14: `parallelism` must be at least 1");
    }

    #[test]
    fn window_needs_event_time_upstream() {
        let text = DATAGEN.replace("    event_time: {field: ts}\n", "")
            + "operators:\n  - {name: a, type: aggregate, input: gen, key: [user], window: {type: tumbling, size: 10s}, aggregates: [{fn: count, as: n}]}\nsinks:\n  - {name: out, type: stdout, input: a}\n";
        assert_one(&text, "t.yaml:7:65: a `window` needs event time, but source `gen` has no `event_time`");
        let running = with("operators:\n  - {name: r, type: aggregate, input: gen, key: [user], aggregates: [{fn: count, as: n}]}\n  - {name: w, type: aggregate, input: r, key: [user], window: {type: session, gap: 1s}, aggregates: [{fn: sum, field: n, as: t}]}\nsinks:\n  - {name: out, type: stdout, input: w}\n");
        assert_one(&running, "t.yaml:9:63: a `window` needs event time, but `r` is a running aggregate");
    }

    #[test]
    fn fields_downstream_of_an_aggregate() {
        let text = with("operators:\n  - {name: a, type: aggregate, input: gen, key: [user], window: {type: tumbling, size: 10s}, aggregates: [{fn: count, as: n}]}\n  - {name: d, type: dedup, input: a, key: [amount]}\nsinks:\n  - {name: out, type: stdout, input: d}\n");
        assert_one(&text, "t.yaml:9:44: field `amount` is not in the output of `a`, which has: user, window_start, window_end, n");
    }

    /// `restart:` defaults, and what it refuses: no checkpoints to restart
    /// from, zero attempts, a maximum wait shorter than the first.
    #[test]
    fn restart_policy() {
        let ck = "checkpoint: {interval: 1s}\n";
        let p = load_with_env(&format!("{}{ck}restart: {{}}\n", with(SINK)), "t.yaml", &[], &test_env).unwrap();
        let want = crate::config::RestartPolicy {
            attempts: 3,
            backoff: std::time::Duration::from_secs(1),
            max_backoff: std::time::Duration::from_secs(60),
            window: std::time::Duration::from_secs(600),
        };
        assert_eq!(p.restart, Some(want));
        let p =
            load_with_env(&format!("{}{ck}restart: {{attempts: 5, backoff: 200ms, window: 1h}}\n", with(SINK)), "t.yaml", &[], &test_env)
                .unwrap();
        assert_eq!(p.restart.map(|r| (r.attempts, r.backoff.as_millis(), r.window.as_secs())), Some((5, 200, 3600)));
        assert_eq!(load_with_env(&with(SINK), "t.yaml", &[], &test_env).unwrap().restart, None);
        let text = format!("{}restart: {{attempts: 2}}\n", with(SINK));
        assert_one(&text, &format!("{}: `restart` needs a `checkpoint:` section", place_of(&text, "restart:")));
        let text = format!("{}{ck}restart: {{attempts: 0}}\n", with(SINK));
        let (line, col) = position_of(&text, text.find("attempts: 0").unwrap() + "attempts: ".len());
        assert_one(&text, &format!("t.yaml:{line}:{col}: `attempts` must be between 1 and 1000000, got 0"));
        let text = format!("{}{ck}restart: {{backoff: 2m, max_backoff: 1m}}\n", with(SINK));
        assert_one(&text, &format!("{}: `max_backoff` must not be shorter than `backoff`", place_of(&text, "1m}")));
    }

    #[test]
    fn duration_and_setting_errors() {
        let text = with("operators:\n  - {name: d, type: dedup, input: gen, key: [user], ttl: 10 parsecs}\nsinks:\n  - {name: out, type: stdout, input: d}\n");
        assert_one(&text, "t.yaml:8:58: invalid duration `10 parsecs`");
        let text = with("operators:\n  - {name: a, type: aggregate, input: gen, key: [user], window: {type: sliding, size: 1s, slide: 2s}, aggregates: [{fn: sum, as: s}]}\nsinks:\n  - {name: out, type: stdout, input: a}\n");
        let errs = errors(&text);
        assert_eq!(errs.len(), 2, "{errs:#?}");
        assert!(errs[0].starts_with("t.yaml:8:98: `slide` (2s) is longer than `size` (1s)"), "{errs:#?}");
        assert!(errs[1].starts_with("t.yaml:8:116: `fn: sum` needs a `field`"), "{errs:#?}");
    }

    /// `where` (a unique snippet of `text`) as `t.yaml:LINE:COL`.
    fn place_of(text: &str, needle: &str) -> String {
        assert_eq!(text.matches(needle).count(), 1, "{needle:?} must be unique in {text}");
        let (line, col) = position_of(text, text.find(needle).unwrap());
        format!("t.yaml:{line}:{col}")
    }

    /// Each class of number a pipeline sets is refused outside its range,
    /// at the value, naming the range; the largest allowed value passes.
    /// (`checkpoint: {interval: 300000000000y}` validated, then panicked.)
    #[test]
    fn every_value_class_is_range_checked_with_its_location() {
        let ck = |c: &str| format!("{}checkpoint: {{{c}}}\n", with(SINK));
        let agg = |w: &str, extra: &str| {
            with(&format!("operators:\n  - {{name: a, type: aggregate, input: gen, key: [user], window: {w}{extra}, aggregates: [{{fn: count, as: n}}]}}\nsinks:\n  - {{name: out, type: stdout, input: a}}\n"))
        };
        let run = |e: &str| {
            with(&format!("operators:\n  - {{name: r, type: aggregate, input: gen, key: [user], {e}, aggregates: [{{fn: count, as: n}}]}}\nsinks:\n  - {{name: out, type: stdout, input: r}}\n"))
        };
        let rocks = |r: &str| format!("{}state: {{backend: rocksdb, rocksdb: {{{r}}}}}\n", with(SINK));
        let src =
            |extra: &str| with(SINK).replace("    event_time: {field: ts}\n", &format!("    event_time: {{field: ts}}\n    {extra}\n"));
        let dedup = |ttl: &str| {
            with(&format!("operators:\n  - {{name: d, type: dedup, input: gen, key: [user], ttl: {ttl}}}\nsinks:\n  - {{name: out, type: stdout, input: d}}\n"))
        };
        let cases: Vec<(String, &str, &str)> = vec![
            (ck("interval: 300000000000y"), "300000000000y", "`interval` must be between 1ms and 7days"),
            (ck("timeout: 8d"), "8d", "`timeout` must be between 1ms and 7days"),
            (ck("min_pause: 8d"), "8d", "`min_pause` must be between 0s and 7days"),
            (ck("aligned_timeout: 500us"), "500us", "`aligned_timeout` must be between 1ms and 7days"),
            (ck("retain: 1001"), "1001", "`retain` must be between 1 and 1000"),
            (ck("tolerable_failures: 10001"), "10001", "`tolerable_failures` must be between 0 and 10000"),
            (format!("{}bundles: {{size: 32769}}\n", with(SINK)), "32769", "`bundles.size` must be between 1 and 32768"),
            (src("rate_limit: 1e-30"), "1e-30", "`rate_limit` must be between 0.001 and 1e9 records per second, got 1e-30"),
            (src("rows: 9223372036854775808"), "9223372036854775808", "`rows` must be between 0 and 9223372036854775807"),
            (src("start_time: 253402300800000"), "253402300800000", "invalid `start_time` `253402300800000`: expected an RFC 3339 time"),
            (src("interval: 101y"), "101y", "`interval` must be between 0s and 100years"),
            (
                with(SINK).replace("{kind: int, min: 0, max: 9}", "{kind: float, min: -1e308, max: 1e308}"),
                "-1e308",
                "`min` (-1e308) must be less than `max` (1e308), both finite and `max - min` finite",
            ),
            (
                with(SINK).replace("{kind: timestamp}", "{kind: timestamp, jitter: 101y}"),
                "101y",
                "`jitter` must be between 0s and 100years",
            ),
            (
                with(SINK).replace("event_time: {field: ts}", "event_time: {field: ts, max_out_of_orderness: 106751991168d}"),
                "106751991168d",
                "`max_out_of_orderness` must be at most 10000 years (the range of event time)",
            ),
            (
                with(SINK).replace("event_time: {field: ts}", "event_time: {field: ts, idle_timeout: 8d}"),
                "8d",
                "`idle_timeout` must be between 1ms and 7days",
            ),
            (dedup("20000y"), "20000y", "`ttl` must be at most 10000 years (the range of event time)"),
            (dedup("1500us"), "1500us", "`ttl` must be a whole number of milliseconds (the unit of event time)"),
            (agg("{type: tumbling, size: 500us}", ""), "500us", "`size` must be a whole number of milliseconds"),
            (agg("{type: session, gap: 20000y}", ""), "20000y", "`gap` must be at most 10000 years"),
            (agg("{type: sliding, size: 1d, slide: 1ms}", ""), "1ms", "`size` / `slide` (1d / 1ms) puts each record in more than 10000 windows"),
            (agg("{type: tumbling, size: 1s}", ", allowed_lateness: 20000y"), "20000y", "`allowed_lateness` must be at most 10000 years"),
            (run("emit_interval: 8d"), "8d", "`emit_interval` must be between 1ms and 7days"),
            (
                with("sinks:\n  - {name: out, type: file, input: gen, path: o, max_file_bytes: 1099511627777}\n"),
                "1099511627777",
                "`max_file_bytes` must be between 1B and 1TiB",
            ),
            (
                with("sinks:\n  - {name: out, type: blackhole, input: gen, rate_limit: 1e10}\n"),
                "1e10",
                "`rate_limit` must be between 0.001 and 1e9 records per second, got 1e10",
            ),
            (
                with("sinks:\n  - {name: out, type: kafka, input: gen, brokers: 'h:1', topic: t, delivery: at_least_once, broker_timeout: 8d}\n"),
                "8d",
                "`broker_timeout` must be between 1ms and 7days",
            ),
            (rocks("write_buffer: 1KiB"), "1KiB", "`write_buffer` must be between 64KiB and 64GiB, got 1024 bytes"),
            (rocks("block_cache: 2TiB"), "2TiB", "`block_cache` must be between 1B and 1TiB"),
            (rocks("write_cache: 2TiB"), "2TiB", "`write_cache` must be between 0B and 1TiB"),
        ];
        for (text, value, want) in &cases {
            assert_one(text, &format!("{}: {want}", place_of(text, value)));
        }
        // The largest allowed values pass.
        let largest = [
            ck("interval: 7d, timeout: 7d, min_pause: 7d, retain: 1000, tolerable_failures: 10000"),
            src("rate_limit: 1e9"),
            src("rate_limit: 0.001"),
            src("rows: 9223372036854775807"),
            src("start_time: 253402300799999"),
            dedup("100y"),
            agg("{type: sliding, size: 10s, slide: 1ms}", ", allowed_lateness: 100y"),
            rocks("write_buffer: 64GiB, block_cache: 1TiB, write_cache: 1TiB"),
            rocks("write_cache: 0"),
        ];
        for text in &largest {
            assert_eq!(errors(text), Vec::<String>::new(), "{text}");
        }
    }

    /// Two file sinks with one `path` passed validation and, with
    /// checkpoints, lost half the output: every pair of colliding outputs
    /// is refused, naming both places.
    #[test]
    fn colliding_outputs_are_refused_with_both_locations() {
        let two = |a: &str, b: &str| {
            with(&format!(
                "sinks:\n  - {{name: s1, type: file, input: gen, path: {a}}}\n  - {{name: s2, type: file, input: gen, path: {b}}}\n"
            ))
        };
        let text = two("out/x", "./out//x/");
        let first = place_of(&text, "out/x}");
        assert_one(
            &text,
            &format!(
                "{}: the output directory of sink `s2` `./out//x/` is also the output directory of sink `s1` `out/x` (at {first})",
                place_of(&text, "./out//x/")
            ),
        );
        assert!(errors(&two("out/x", "out/x/../x/y"))[0].contains("is inside the output directory of sink `s1`"));
        assert!(errors(&two("out/x", "out/xy")).is_empty(), "siblings sharing a prefix are fine");
        // A dead letter inside a sink's directory, or one that is a sink's path.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("in.jsonl"), "{}\n").unwrap();
        let in_path = dir.path().join("in.jsonl");
        let file_src = |dl: &str, sink: &str| {
            format!("name: p\nsources:\n  - {{name: f, type: file, path: {}, on_error: dead_letter, dead_letter: {dl}}}\nsinks:\n  - {{name: s, type: file, input: f, path: {sink}}}\n", in_path.display())
        };
        let e = errors(&file_src("out/bad.jsonl", "out"));
        assert!(
            e.len() == 1 && e[0].contains("the output directory of sink `s` `out` contains the dead-letter file of source `f`"),
            "{e:?}"
        );
        let e = errors(&file_src("out", "out"));
        assert!(e.len() == 1 && e[0].contains("is also the dead-letter file of source `f`"), "{e:?}");
        // A source reading a sink's directory or its own dead letter.
        let e = errors(&file_src("bad.jsonl", &dir.path().display().to_string()));
        assert!(e.len() == 1 && e[0].contains("`, read by source `f` (at t.yaml:3:33): a pipeline must not read its own output"), "{e:?}");
        let e = errors(&file_src(&in_path.display().to_string(), "out"));
        assert!(e.len() == 1 && e[0].contains("in.jsonl` is read by source `f` (at t.yaml:3:33)"), "{e:?}");
        // Dead letters may share one file; a sink inside the state directory may not.
        let shared = with("operators:\n  - {name: a, type: aggregate, input: gen, key: [user], window: {type: tumbling, size: 1s}, aggregates: [{fn: count, as: n}], dead_letter: dl.jsonl}\n  - {name: b, type: aggregate, input: gen, key: [user], window: {type: tumbling, size: 2s}, aggregates: [{fn: count, as: n}], dead_letter: ./dl.jsonl}\nsinks:\n  - {name: o1, type: stdout, input: a}\n  - {name: o2, type: stdout, input: b}\n");
        assert_eq!(errors(&shared), Vec::<String>::new());
        let e = errors(&two("state/p/out", "o"));
        assert!(e.len() == 1 && e[0].contains("is inside the default state directory (from `name`) `state/p`"), "{e:?}");
    }

    #[test]
    fn a_pipeline_file_over_the_cap_is_refused_unread() {
        let e = load_file(Path::new("/dev/zero"), &[]).unwrap_err();
        assert_eq!(e.0.len(), 1);
        assert_eq!(e.0[0].to_string(), "/dev/zero: the pipeline file is larger than 16 MiB: expected a YAML pipeline, not data");
        let big = format!("name: p\n#{}\n", "x".repeat(MAX_PIPELINE_BYTES as usize));
        assert!(errors(&big)[0].starts_with("t.yaml:1:1: the pipeline is larger than 16 MiB"));
    }

    #[test]
    fn env_expansion() {
        let text = with("sinks:\n  - {name: out, type: file, input: gen, path: \"${OUT}/x\"}\n");
        let p = load_with_env(&text, "t.yaml", &[], &test_env).unwrap();
        assert!(matches!(&p.nodes[1].kind, NodeKind::Sink(SinkSpec::File { dir, .. }) if dir.to_str() == Some("out-dir/x")));
        let text = with("sinks:\n  - {name: out, type: file, input: gen, path: \"${NOPE:d}/x\"}\n");
        assert!(load_with_env(&text, "t.yaml", &[], &test_env).is_ok());
        let text = with("sinks:\n  - {name: out, type: file, input: gen, path: \"${NOPE}/x\"}\n");
        assert_one(&text, "t.yaml:8:48: environment variable `NOPE` is not set");
        // A later error is still located in the file's own columns.
        let text = with("sinks:\n  - {name: out, type: file, input: gen, path: \"${OUT}\", max_file_bytes: 0}\n");
        assert_one(&text, "t.yaml:8:73: `max_file_bytes` must be between 1B and 1TiB, got 0");
    }

    #[test]
    fn overrides() {
        let p = load_with_env(&with(SINK), "t.yaml", &["parallelism=4".into(), "sources.gen.rate_limit=5".into()], &test_env).unwrap();
        assert_eq!(p.parallelism, 4);
        assert!(matches!(&p.nodes[0].kind, NodeKind::Source(s) if s.rate_limit == Some(5.0)));
        let p = load_with_env(&with(SINK), "t.yaml", &["sources.0.seed=7".into()], &test_env).unwrap();
        assert!(matches!(&p.nodes[0].kind, NodeKind::Source(s) if matches!(&s.kind, SourceKind::Datagen(g) if g.seed == 7)));
        assert_eq!(
            errors_with(&with(SINK), &["sinks.nope.path=x"]),
            vec!["--set sinks.nope.path=x: `sinks` has no element `nope`: expected an index below 1 or the `name` of an element"]
        );
        // Errors in an overridden value are blamed on the override.
        assert_eq!(errors_with(&with(SINK), &["parallelism=0"]), vec!["--set parallelism=0: `parallelism` must be at least 1, got 0"]);
        // Issue 34 #7: a section the file lacks is created; a misspelt one is refused.
        let p = load_with_env(&with(SINK), "t.yaml", &["state.backend=rocksdb".into(), "state.dir=s".into()], &test_env).unwrap();
        assert!(
            matches!(p.state.backend, crate::config::Backend::RocksDb(_)) && p.state.dir == std::path::Path::new("s"),
            "--set made the `state` section"
        );
        let errs = errors_with(&with(SINK), &["sate.backend=rocksdb"]);
        assert!(errs.len() == 1 && errs[0].starts_with("--set sate.backend=rocksdb:") && errs[0].contains("state"), "{errs:?}");
    }

    #[test]
    fn all_errors_are_reported_together() {
        let text = "\
name: bad name
sources:
  - {name: gen, type: datagen, fields: {ts: {kind: timestamp}}, event_time: {field: ts}, colour: red}
  - {name: f, type: datagen, fields: {x: {kind: int, min: 5, max: 1}}}
operators:
  - {name: d, type: dedup, input: f, key: [x], ttl: 0s}
sinks:
  - {name: out, type: stdout, input: d}
  - {name: all, type: blackhole, input: gen}
";
        let errs = errors(text);
        assert_eq!(
            errs,
            vec![
                "t.yaml:1:7: the pipeline name `bad name` is invalid: expected only letters, digits, `_`, `.` and `-`",
                "t.yaml:3:90: unknown field `colour`, expected one of `name`, `seed`, `rows`, `rate_limit`, `batch_size`, `start_time`, `interval`, `fields`, `event_time`",
                "t.yaml:4:59: `min` (5) is greater than `max` (1): expected min <= max",
                "t.yaml:6:53: `ttl` must be greater than 0, got `0s`",
            ],
        );
    }

    #[test]
    fn full_pipeline_compiles_with_expected_values() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["b.jsonl", "a.jsonl", ".hidden"] {
            std::fs::write(dir.path().join(f), "{}\n").unwrap();
        }
        let text = format!(
            "\
name: orders
parallelism: 2
max_parallelism: 64
sources:
  - {{name: orders, type: file, path: {dir}, format: json, on_error: dead_letter, dead_letter: bad.jsonl,
     rate_limit: 10, event_time: {{field: ts, max_out_of_orderness: 5s, idle_timeout: 1m}}}}
  - {{name: gen, type: datagen, seed: 3, rows: 100, start_time: 1000, interval: 10ms,
     fields: {{id: {{kind: sequence}}, ts: {{kind: timestamp, jitter: 5ms}}}}, event_time: {{field: ts}}}}
operators:
  - name: per_user
    type: aggregate
    input: unique
    key: [user]
    window: {{type: sliding, size: 10s, slide: 5s}}
    allowed_lateness: 1s
    aggregates: [{{fn: count, as: n}}, {{fn: sum, field: amount, as: total}}]
  - {{name: unique, type: dedup, input: orders, key: [order_id], ttl: 1h}}
  - {{name: running, type: aggregate, input: gen, key: [id], aggregates: [{{fn: max, field: ts, as: last}}]}}
sinks:
  - {{name: out, type: file, input: per_user, path: out/}}
  - {{name: log, type: stdout, input: running}}
",
            dir = dir.path().display()
        );
        let p = load_with_env(&text, "t.yaml", &[], &test_env).unwrap();
        assert_eq!((p.name.as_str(), p.parallelism, p.max_parallelism), ("orders", 2, 64));
        let names: Vec<&str> = p.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["orders", "gen", "unique", "per_user", "running", "out", "log"]);
        let inputs: Vec<Option<usize>> = p.nodes.iter().map(|n| n.input).collect();
        assert_eq!(inputs, [None, None, Some(0), Some(2), Some(1), Some(3), Some(4)]);
        let NodeKind::Source(src) = &p.nodes[0].kind else { panic!("not a source") };
        let SourceKind::File { files } = &src.kind else { panic!("not a file source") };
        assert_eq!(files, &[dir.path().join("a.jsonl"), dir.path().join("b.jsonl")]);
        assert_eq!(src.on_error, OnError::DeadLetter("bad.jsonl".into()));
        assert_eq!(src.rate_limit, Some(10.0));
        let et = src.event_time.as_ref().unwrap();
        assert_eq!((et.max_out_of_orderness, et.idle_timeout), (Duration::from_secs(5), Some(Duration::from_secs(60))));
        let NodeKind::Source(gen) = &p.nodes[1].kind else { panic!("not a source") };
        let SourceKind::Datagen(g) = &gen.kind else { panic!("not datagen") };
        assert_eq!((g.seed, g.rows, g.start_time, g.interval_ms), (3, Some(100), 1000, 10));
        assert_eq!(gen.on_error, OnError::Fail);
        let NodeKind::Aggregate(agg) = &p.nodes[3].kind else { panic!("not an aggregate") };
        assert_eq!(agg.window, Some(WindowSpec::Sliding { size: Duration::from_secs(10), slide: Duration::from_secs(5) }));
        assert_eq!(agg.allowed_lateness, Duration::from_secs(1));
        assert_eq!(agg.aggregates[1].func, AggFunc::Sum);
        assert_eq!(agg.output_fields(), ["user", "window_start", "window_end", "n", "total"]);
        let NodeKind::Aggregate(run) = &p.nodes[4].kind else { panic!("not an aggregate") };
        assert_eq!((run.emit_interval, run.output_fields()), (Duration::from_secs(1), vec!["id".to_string(), "last".to_string()]));
        assert!(matches!(&p.nodes[5].kind, NodeKind::Sink(SinkSpec::File { max_file_bytes: 134217728, .. })));
    }

    #[test]
    fn unreadable_file_is_one_error_at_line_0() {
        let e = load_file(Path::new("testdata/does-not-exist.yaml"), &[]).unwrap_err();
        assert_eq!(e.0.len(), 1);
        assert_eq!(e.0[0].line, 0);
        assert!(e.0[0].to_string().starts_with("testdata/does-not-exist.yaml: cannot read the pipeline file"));
    }

    /// Every file in testdata/invalid states the errors it must produce in
    /// `# expect: LINE:COL: substring` lines; exactly those are reported.
    #[test]
    fn invalid_testdata_files() {
        let mut files: Vec<_> = std::fs::read_dir("testdata/invalid").unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        assert!(files.len() >= 10, "{files:?}");
        // Every file is checked before failing, to see all mismatches at once.
        let mut failures = Vec::new();
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            let expect: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# expect: ")).collect();
            let shown: Vec<String> = match load_file(&path, &[]) {
                Ok(_) => Vec::new(),
                Err(e) => e.0.iter().map(ToString::to_string).collect(),
            };
            let found = |want: &&str| {
                let (place, fragment) = want.split_once(": ").unwrap_or((want, ""));
                let prefix = format!("{}:{place}: ", path.display());
                shown.iter().any(|e| e.starts_with(&prefix) && e.contains(fragment))
            };
            if expect.is_empty() || !expect.iter().all(found) || shown.len() != expect.len() {
                failures.push(format!("{}: expected {expect:#?}\ngot {shown:#?}", path.display()));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn kafka_source_and_sink_load() {
        let text = "name: k\ncheckpoint: {interval: 1s, timeout: 10s}\nsources:\n  - {name: in, type: kafka, brokers: 'h:1', topics: [a, b], start: latest, key_field: k,\n     event_time: {message_timestamp: true, idle_timeout: 5s}, properties: {fetch.min.bytes: 1, check.crcs: true}}\nsinks:\n  - {name: out, type: kafka, input: in, brokers: 'h:1', topic: o, key: [user]}\n";
        let p = load_with_env(text, "t.yaml", &[], &test_env).unwrap();
        let NodeKind::Source(src) = &p.nodes[0].kind else { panic!("not a source") };
        let SourceKind::Kafka(k) = &src.kind else { panic!("not kafka") };
        assert_eq!(k.topics, crate::config::KafkaTopics::Names(vec!["a".into(), "b".into()]));
        assert_eq!(k.start, crate::config::KafkaStart::Latest);
        assert!(k.message_timestamp && !k.bounded);
        assert_eq!(k.properties, vec![("fetch.min.bytes".to_string(), "1".to_string()), ("check.crcs".to_string(), "true".to_string())]);
        let NodeKind::Sink(SinkSpec::Kafka(s)) = &p.nodes[1].kind else { panic!("not a kafka sink") };
        assert_eq!((s.key.as_slice(), s.delivery), (&["user".to_string()][..], crate::config::Delivery::ExactlyOnce));
    }

    #[test]
    fn kafka_settings_that_cannot_work_are_refused() {
        let src = "sources:\n  - {name: in, type: kafka, brokers: 'h:1', topics: [a]}\n";
        let sink = |extra: &str| format!("sinks:\n  - {{name: out, type: kafka, input: in, brokers: 'h:1', topic: o{extra}}}\n");
        // Exactly-once commits per checkpoint: no checkpoints, no transactions.
        assert_one(&format!("name: k\n{src}{}", sink("")), "t.yaml:5:");
        let err = errors(&format!("name: k\n{src}{}", sink("")));
        assert!(err[0].contains("needs a `checkpoint:` section"), "{err:?}");
        // A transaction must outlive a checkpoint interval plus its timeout.
        let text =
            format!("name: k\ncheckpoint: {{interval: 1s, timeout: 60s}}\n{src}{}", sink(", properties: {transaction.timeout.ms: 30000}"));
        let err = errors(&text);
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(err[0].contains("`transaction.timeout.ms` (30000) must exceed checkpoint `interval` + `timeout` (61000 ms)"), "{err:?}");
        assert!(errors(&text.replace("30000", "62000")).is_empty());
        // A transaction timeout below the default message timeout (the
        // broker timeout, 30 s) is what the producer gets; a message timeout
        // above it the client would refuse, so validate does, where it is.
        let short =
            format!("name: k\ncheckpoint: {{interval: 1s, timeout: 10s}}\n{src}{}", sink(", properties: {transaction.timeout.ms: 20000}"));
        assert!(errors(&short).is_empty(), "{:?}", errors(&short));
        let text = short.replace("20000}", "20000, message.timeout.ms: 25000}");
        assert_one(
            &text,
            &format!("{}: `message.timeout.ms` (25000) must not exceed `transaction.timeout.ms` (20000)", place_of(&text, "25000")),
        );
        // Both or neither of topics and topic_pattern; weir's own settings stay weir's.
        let both = "name: k\nsources:\n  - {name: in, type: kafka, brokers: 'h:1', topics: [a], topic_pattern: 'a.*', properties: {enable.auto.commit: true}}\nsinks:\n  - {name: out, type: stdout, input: in}\n";
        let err = errors(both);
        assert_eq!(err.len(), 2, "{err:?}");
        assert!(err.iter().any(|e| e.contains("exclude each other")) && err.iter().any(|e| e.contains("set by weir")), "{err:?}");
        // message_timestamp is for Kafka only.
        let file = with(SINK).replace("event_time: {field: ts}", "event_time: {message_timestamp: true}");
        assert!(errors(&file).iter().any(|e| e.contains("only for kafka sources")), "{:?}", errors(&file));
    }
}

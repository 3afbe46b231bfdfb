//! Semantic checks over the whole graph: a typed `RawPipeline` becomes a
//! validated `Pipeline`, or every problem is reported together.
//!
//! Graph checks live here (names, inputs, cycles, reachability, the fields
//! and event time that flow along edges, node order); the checks of a single
//! node's settings live in `specs`.

use std::collections::HashMap;

use super::deser::{Parsed, Section};
use super::features::{self, Feature, Features, Need};
use super::locate::{child, item, Locator, Seg, YPath};
use super::outputs::{self, Place, Role};
use super::pipeline::{Backend, CheckpointSpec, Delivery, Node, NodeKind, OnError, Pipeline, SinkSpec, SourceKind, StateSpec};
use super::raw::{RawOperator, RawPipeline, RawSink, RawSource};
use super::specs::{self, Cx};
use super::ConfigError;

const DEFAULT_MAX_PARALLELISM: u32 = 128;
const MAX_MAX_PARALLELISM: u32 = 32768;
const NAME_CHARS: &str = "letters, digits, `_`, `.` and `-`";

enum Body<'a> {
    Source(&'a RawSource),
    Operator(&'a RawOperator),
    Sink(&'a RawSink),
    /// Could not be typed (already reported): known only by name and input.
    Broken,
}

/// One source, operator or sink, in YAML order within its section.
struct Item<'a> {
    section: Section,
    path: YPath,
    name: Option<&'a str>,
    input: Option<&'a str>,
    /// A join's right input.
    right: Option<&'a str>,
    body: Body<'a>,
}

/// Check `parsed` and build the pipeline; None if anything was wrong.
pub(crate) fn compile(parsed: &Parsed, loc: &Locator, features: Features, errors: &mut Vec<ConfigError>) -> Option<Pipeline> {
    let mut cx = Cx { loc, errors: Vec::new() };
    let raw = &parsed.raw;
    if parsed.name_ok {
        check_name(&mut cx, &[Seg::Key("name".into())], &raw.name, "the pipeline name");
    }
    let (parallelism, max_parallelism) = parallelism(&mut cx, raw);
    let state = specs::state(&mut cx, raw);
    let checkpoint = raw.checkpoint.as_ref().and_then(|c| specs::checkpoint(&mut cx, c));
    let savepoint_dir = specs::savepoint_dir(&mut cx, raw);
    let savepoint_on_sigterm_keep = specs::on_sigterm_keep(&mut cx, raw);
    let bundle_size = specs::bundle_size(&mut cx, raw, parallelism);
    let restart = specs::restart(&mut cx, raw);
    let metrics = raw.metrics.as_ref().and_then(|m| specs::metrics(&mut cx, m));
    let items = items(parsed);
    check_names(&mut cx, &items);
    let inputs = resolve_inputs(&mut cx, &items, |it| it.input, "input");
    let rights = resolve_inputs(&mut cx, &items, |it| it.right, "right");
    require_source_and_sink(&mut cx, &items);
    let in_cycle = find_cycles(&mut cx, &items, &inputs);
    check_read(&mut cx, &items, &inputs, &rights, &in_cycle);
    let mut kinds: Vec<Option<NodeKind>> = items.iter().map(|it| body_kind(&mut cx, it)).collect();
    let cluster = super::cluster::apply(specs::cluster(&mut cx, raw), &mut kinds);
    let in_cluster: Vec<super::cluster::ClusterNode> =
        items.iter().zip(&kinds).filter_map(|(it, k)| Some(super::cluster::ClusterNode { path: &it.path, kind: k.as_ref()? })).collect();
    super::cluster::check(&mut cx, &cluster, checkpoint.as_ref(), &in_cluster);
    check_kafka_transactions(&mut cx, &items, &kinds, checkpoint.as_ref());
    for (it, kind) in items.iter().zip(&kinds) {
        if let (Some(NodeKind::Sink(SinkSpec::Postgres(pg))), Some(name)) = (kind, it.name) {
            super::postgres::check_gid_length(&mut cx, &child(&it.path, "name"), &raw.name, name, pg);
        }
    }
    for (at, message) in features::unmet(&needs(&state, checkpoint.as_ref(), savepoint_dir.as_deref(), &items, &kinds), features) {
        cx.err(at, message);
    }
    outputs::check(&mut cx, &places(raw, &state, savepoint_dir.as_deref(), &items, &kinds));
    let order = topological_order(&items, &inputs, &rights);
    check_right_cycles(&mut cx, &items, &inputs, &rights, &in_cycle, &order);
    check_flow(&mut cx, &items, &inputs, &rights, &kinds, &order);
    errors.extend(cx.errors);
    if !errors.is_empty() {
        return None;
    }
    let mut id = vec![0; items.len()];
    for (node_id, &i) in order.iter().enumerate() {
        id[i] = node_id;
    }
    let nodes = order
        .iter()
        .map(|&i| {
            Some(Node {
                name: items[i].name.unwrap_or_default().to_string(),
                input: inputs[i].map(|j| id[j]),
                right: rights[i].map(|j| id[j]),
                kind: kinds[i].clone()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Pipeline {
        name: raw.name.clone(),
        parallelism,
        max_parallelism,
        nodes,
        state,
        checkpoint,
        savepoint_dir,
        savepoint_on_sigterm: raw.savepoint.as_ref().is_some_and(|s| s.on_sigterm),
        savepoint_on_sigterm_keep,
        restart,
        bundle_size,
        metrics,
        cluster,
    })
}

fn items(parsed: &Parsed) -> Vec<Item<'_>> {
    let raw = &parsed.raw;
    let mut all = Vec::new();
    for section in Section::ALL {
        let base = [Seg::Key(section.key().into())];
        type Entry<'a> = (Option<&'a str>, Option<&'a str>, Body<'a>);
        let typed: Vec<(usize, Option<&str>, Option<&str>, Body)> = match section {
            Section::Sources => raw.sources.iter().map(|s| (Some(s.name()), None, Body::Source(s))).collect::<Vec<Entry>>(),
            Section::Operators => raw.operators.iter().map(|o| (Some(o.name()), Some(o.input()), Body::Operator(o))).collect(),
            Section::Sinks => raw.sinks.iter().map(|s| (Some(s.name()), Some(s.input()), Body::Sink(s))).collect(),
        }
        .into_iter()
        .zip(&parsed.at[section as usize])
        .map(|((name, input, body), &index)| (index, name, input, body))
        .collect();
        let broken = parsed.broken.iter().filter(|b| b.section == section).map(|b| {
            let input = if section == Section::Sources { None } else { b.input.as_deref() };
            (b.index, b.name.as_deref(), input, Body::Broken)
        });
        let mut list: Vec<_> = typed.into_iter().chain(broken).collect();
        list.sort_by_key(|e| e.0);
        all.extend(list.into_iter().map(|(index, name, input, body)| {
            let right = match body {
                Body::Operator(o) => o.right(),
                _ => None,
            };
            Item { section, path: item(&base, index), name, input, right, body }
        }));
    }
    all
}

fn check_name(cx: &mut Cx, path: &[Seg], name: &str, what: &str) -> bool {
    let ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if name.is_empty() {
        cx.err(path, format!("{what} is empty: expected {NAME_CHARS}"));
    } else if !ok {
        cx.err(path, format!("{what} `{name}` is invalid: expected only {NAME_CHARS}"));
    }
    ok
}

fn parallelism(cx: &mut Cx, raw: &RawPipeline) -> (u16, u16) {
    let p = raw.parallelism.unwrap_or(1);
    let m = raw.max_parallelism.unwrap_or(DEFAULT_MAX_PARALLELISM);
    let p_at = [Seg::Key("parallelism".into())];
    let m_at = [Seg::Key("max_parallelism".into())];
    let m_ok = (1..=MAX_MAX_PARALLELISM).contains(&m);
    if !m_ok {
        cx.err(&m_at, format!("`max_parallelism` must be between 1 and {MAX_MAX_PARALLELISM}, got {m}"));
    }
    if p == 0 {
        cx.err(&p_at, "`parallelism` must be at least 1, got 0");
    } else if m_ok && p > m {
        let at: &[Seg] = if raw.parallelism.is_some() { &p_at } else { &m_at };
        cx.err(at, format!("`parallelism` ({p}) exceeds `max_parallelism` ({m}): expected 1 <= parallelism <= max_parallelism <= {MAX_MAX_PARALLELISM}"));
    }
    (p.try_into().unwrap_or(u16::MAX), m.try_into().unwrap_or(u16::MAX))
}

fn section_word(s: Section) -> &'static str {
    match s {
        Section::Sources => "source",
        Section::Operators => "operator",
        Section::Sinks => "sink",
    }
}

/// Names are valid and unique across sources, operators and sinks.
fn check_names(cx: &mut Cx, items: &[Item]) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, it) in items.iter().enumerate() {
        let Some(name) = it.name else { continue };
        let at = child(&it.path, "name");
        let what = format!("the {} name", section_word(it.section));
        if !check_name(cx, &at, name, &what) {
            continue;
        }
        match seen.get(name) {
            Some(&first) => {
                let line = cx.loc.line_of(&child(&items[first].path, "name"));
                let kind = section_word(items[first].section);
                cx.err(&at, format!("duplicate name `{name}`: already used by the {kind} on line {line} (names must be unique across sources, operators and sinks)"));
            }
            None => {
                seen.insert(name, i);
            }
        }
    }
}

/// The item each operator and sink reads (`input`, or a join's `right`),
/// by its first definition.
fn resolve_inputs<'a>(cx: &mut Cx, items: &[Item<'a>], of: impl Fn(&Item<'a>) -> Option<&'a str>, key: &str) -> Vec<Option<usize>> {
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (i, it) in items.iter().enumerate() {
        if let Some(name) = it.name {
            by_name.entry(name).or_insert(i);
        }
    }
    let readable: Vec<&str> = items.iter().filter(|it| it.section != Section::Sinks).filter_map(|it| it.name).collect();
    items
        .iter()
        .map(|it| {
            let input = of(it)?;
            let at = child(&it.path, key);
            match by_name.get(input) {
                Some(&j) if items[j].section == Section::Sinks => {
                    cx.err(&at, format!("{key} `{input}` is a sink: expected a source or an operator"));
                    None
                }
                Some(&j) => Some(j),
                None => {
                    let known = if readable.is_empty() { "none".to_string() } else { readable.join(", ") };
                    cx.err(&at, format!("{key} `{input}` is not a source or operator of this pipeline (known: {known})"));
                    None
                }
            }
        })
        .collect()
}

fn require_source_and_sink(cx: &mut Cx, items: &[Item]) {
    for (section, what) in [(Section::Sources, "source"), (Section::Sinks, "sink")] {
        if !items.iter().any(|it| it.section == section) {
            let key = section.key();
            cx.err(&[Seg::Key(key.into())], format!("the pipeline has no {what}: expected at least one entry under `{key}`"));
        }
    }
}

/// Reports each cycle of inputs once; returns which items are on one.
fn find_cycles(cx: &mut Cx, items: &[Item], inputs: &[Option<usize>]) -> Vec<bool> {
    const NEW: u8 = 0;
    const ON_PATH: u8 = 1;
    const DONE: u8 = 2;
    let mut state = vec![NEW; items.len()];
    let mut in_cycle = vec![false; items.len()];
    for start in 0..items.len() {
        let mut chain = Vec::new();
        let mut cur = Some(start);
        while let Some(c) = cur {
            match state[c] {
                NEW => {
                    state[c] = ON_PATH;
                    chain.push(c);
                    cur = inputs[c];
                }
                ON_PATH => {
                    let from = chain.iter().position(|&x| x == c).unwrap_or(0);
                    report_cycle(cx, items, &chain[from..]);
                    chain[from..].iter().for_each(|&m| in_cycle[m] = true);
                    break;
                }
                _ => break,
            }
        }
        chain.iter().for_each(|&c| state[c] = DONE);
    }
    in_cycle
}

/// `members` follow input edges (each reads the next, the last the first).
fn report_cycle(cx: &mut Cx, items: &[Item], members: &[usize]) {
    let first = members.iter().enumerate().min_by_key(|(_, &m)| m).map_or(0, |(k, _)| k);
    let mut names: Vec<String> =
        (0..=members.len()).map(|k| format!("`{}`", items[members[(first + k) % members.len()]].name.unwrap_or("?"))).collect();
    names.dedup();
    let at = child(&items[members[first]].path, "input");
    cx.err(&at, format!("inputs form a cycle: {} (expected data to flow from sources to sinks without loops)", names.join(" reads ")));
}

fn check_read(cx: &mut Cx, items: &[Item], inputs: &[Option<usize>], rights: &[Option<usize>], in_cycle: &[bool]) {
    // A reader whose input is unknown (misspelt, or its element broken) may
    // have meant any node: saying which are unread would only add noise.
    let unresolved = items.iter().zip(inputs).any(|(it, input)| it.section != Section::Sources && input.is_none())
        || items.iter().zip(rights).any(|(it, right)| it.right.is_some() && right.is_none());
    let no_sink = !items.iter().any(|it| it.section == Section::Sinks);
    if unresolved || no_sink {
        return;
    }
    let mut readers = vec![0usize; items.len()];
    inputs.iter().chain(rights).flatten().for_each(|&j| readers[j] += 1);
    for (i, it) in items.iter().enumerate() {
        if it.section == Section::Sinks || readers[i] > 0 || in_cycle[i] || matches!(it.body, Body::Broken) {
            continue;
        }
        let Some(name) = it.name else { continue };
        cx.err(
            &child(&it.path, "name"),
            format!("`{name}` is not read by any operator or sink: every source and operator must lead to a sink"),
        );
    }
}

fn body_kind(cx: &mut Cx, it: &Item) -> Option<NodeKind> {
    Some(match it.body {
        Body::Source(s) => NodeKind::Source(specs::source(cx, &it.path, s)),
        Body::Operator(o) => specs::operator(cx, &it.path, o),
        Body::Sink(s) => NodeKind::Sink(specs::sink(cx, &it.path, s)),
        Body::Broken => return None,
    })
}

/// Sources in YAML order, then operators (each as soon as its input is
/// placed, earliest in YAML first), then sinks. Items on a cycle or with an
/// unresolved input are left out (they were reported).
fn topological_order(items: &[Item], inputs: &[Option<usize>], rights: &[Option<usize>]) -> Vec<usize> {
    let mut placed = vec![false; items.len()];
    let mut order = Vec::with_capacity(items.len());
    let is = |i: usize, s: Section| items[i].section == s;
    let right_ok = |i: usize, placed: &[bool]| items[i].right.is_none() || rights[i].is_some_and(|j| placed[j]);
    let ready = |i: usize, placed: &[bool]| !placed[i] && inputs[i].is_some_and(|j| placed[j]) && right_ok(i, placed);
    for i in (0..items.len()).filter(|&i| is(i, Section::Sources)) {
        placed[i] = true;
        order.push(i);
    }
    while let Some(i) = (0..items.len()).find(|&i| is(i, Section::Operators) && ready(i, &placed)) {
        placed[i] = true;
        order.push(i);
    }
    for i in (0..items.len()).filter(|&i| is(i, Section::Sinks)) {
        if ready(i, &placed) {
            placed[i] = true;
            order.push(i);
        }
    }
    order
}

/// A cycle through a join's `right` (the walk of `find_cycles` follows
/// `input` only): a join that reads, through inputs and rights, itself.
fn check_right_cycles(cx: &mut Cx, items: &[Item], inputs: &[Option<usize>], rights: &[Option<usize>], in_cycle: &[bool], order: &[usize]) {
    for (i, it) in items.iter().enumerate() {
        if it.right.is_none() || in_cycle[i] || order.contains(&i) {
            continue;
        }
        let mut seen = vec![false; items.len()];
        let mut stack: Vec<usize> = inputs[i].into_iter().chain(rights[i]).collect();
        let mut cyclic = false;
        while let Some(j) = stack.pop() {
            if j == i {
                cyclic = true;
                break;
            }
            if !std::mem::replace(&mut seen[j], true) {
                stack.extend(inputs[j].into_iter().chain(rights[j]));
            }
        }
        if cyclic {
            cx.err(
                &child(&it.path, "right"),
                format!(
                    "inputs form a cycle through `{}` (expected data to flow from sources to sinks without loops)",
                    it.name.unwrap_or("?")
                ),
            );
        }
    }
}

fn check_flow(
    cx: &mut Cx,
    items: &[Item],
    inputs: &[Option<usize>],
    rights: &[Option<usize>],
    kinds: &[Option<NodeKind>],
    order: &[usize],
) {
    let mut flows = vec![specs::Flow::unknown(); items.len()];
    for &i in order {
        let upstream = inputs[i].map(|j| (items[j].name.unwrap_or("?"), &flows[j]));
        let name = items[i].name.unwrap_or("?");
        let flow = match &kinds[i] {
            Some(NodeKind::Join(j)) => {
                let unknown = specs::Flow::unknown();
                let side = |k: Option<usize>| k.map_or(("?", &unknown), |k| (items[k].name.unwrap_or("?"), &flows[k]));
                super::join::flow(cx, &items[i].path, j, side(inputs[i]), side(rights[i]))
            }
            Some(kind) => specs::flow(cx, &items[i].path, name, kind, upstream),
            None => specs::Flow::unknown(),
        };
        flows[i] = flow;
    }
}

/// What the pipeline uses that a build may lack (`config::features`).
fn needs(
    state: &StateSpec,
    checkpoint: Option<&CheckpointSpec>,
    savepoint_dir: Option<&std::path::Path>,
    items: &[Item],
    kinds: &[Option<NodeKind>],
) -> Vec<Need> {
    let mut needs = Vec::new();
    let storage = checkpoint.and_then(|c| c.storage.as_ref()).map(|s| (["checkpoint", "storage"], s.url.clone()));
    let savepoints = savepoint_dir.and_then(|d| d.to_str()).filter(|d| crate::checkpoint::remote::is_url(d));
    for (at, url) in storage.into_iter().chain(savepoints.map(|d| (["savepoint", "dir"], d.to_string()))) {
        let what = format!("{}.{}: {url}", at[0], at[1]);
        needs.push(Need { at: at.iter().map(|k| Seg::Key((*k).into())).collect(), what, feature: Feature::S3 });
    }
    if matches!(state.backend, Backend::RocksDb(_)) {
        let at = vec![Seg::Key("state".into()), Seg::Key("backend".into())];
        needs.push(Need { at, what: "state.backend: rocksdb".into(), feature: Feature::RocksDb });
    }
    for (it, kind) in items.iter().zip(kinds) {
        let Some(NodeKind::Sink(SinkSpec::Parquet(p))) = kind else { continue };
        let name = it.name.unwrap_or_default();
        needs.push(Need { at: child(&it.path, "type"), what: format!("sink `{name}`: type: parquet"), feature: Feature::Parquet });
        if p.is_remote() {
            needs.push(Need { at: child(&it.path, "path"), what: format!("sink `{name}`: path: {}", p.path), feature: Feature::S3 });
        }
    }
    for (it, kind) in items.iter().zip(kinds) {
        let role = match kind {
            Some(NodeKind::Source(s)) if matches!(s.kind, SourceKind::Kafka(_)) => "source",
            Some(NodeKind::Sink(SinkSpec::Kafka(_))) => "sink",
            Some(NodeKind::Sink(SinkSpec::Postgres(_))) => {
                let what = format!("sink `{}`: type: postgres", it.name.unwrap_or_default());
                needs.push(Need { at: child(&it.path, "type"), what, feature: Feature::Postgres });
                continue;
            }
            _ => continue,
        };
        let what = format!("{role} `{}`: type: kafka", it.name.unwrap_or_default());
        needs.push(Need { at: child(&it.path, "type"), what, feature: Feature::Kafka });
    }
    needs
}

/// A transaction of an exactly-once Kafka sink stays open from the first
/// record after one commit until the next checkpoint completes: at most a
/// checkpoint interval plus the checkpoint timeout. A broker aborts it past
/// `transaction.timeout.ms`, which would lose its records: refuse a setting
/// that cannot hold a transaction that long.
fn check_kafka_transactions(cx: &mut Cx, items: &[Item], kinds: &[Option<NodeKind>], checkpoint: Option<&CheckpointSpec>) {
    for (it, kind) in items.iter().zip(kinds) {
        let Some(NodeKind::Sink(SinkSpec::Kafka(k))) = kind else { continue };
        if k.delivery != Delivery::ExactlyOnce {
            continue;
        }
        let Some(c) = checkpoint else {
            cx.err(
                &child(&it.path, "delivery"),
                "`delivery: exactly_once` commits a Kafka transaction per checkpoint and needs a `checkpoint:` section (or use `delivery: at_least_once`)",
            );
            continue;
        };
        let needed = c.interval.saturating_add(c.timeout).as_millis();
        let Some((_, v)) = k.properties.iter().find(|(name, _)| name == "transaction.timeout.ms") else {
            if needed >= 900_000 {
                cx.err(
                    &child(&it.path, "delivery"),
                    format!("checkpoint `interval` + `timeout` ({needed} ms) reach the 15 min default maximum of Kafka transactions: set `properties: {{transaction.timeout.ms: ...}}` above it (and the broker's transaction.max.timeout.ms), or shorten the checkpoint timeout"),
                );
            }
            continue;
        };
        let at = child(&child(&it.path, "properties"), "transaction.timeout.ms");
        let message = k.properties.iter().find(|(name, _)| name == "message.timeout.ms").and_then(|(_, m)| m.parse::<u128>().ok());
        match v.parse::<u128>() {
            Ok(ms) if message.is_some_and(|m| m > ms) => cx.err(
                &child(&child(&it.path, "properties"), "message.timeout.ms"),
                format!(
                    "`message.timeout.ms` ({}) must not exceed `transaction.timeout.ms` ({ms}): the Kafka client refuses a transactional producer configured so",
                    message.unwrap_or_default()
                ),
            ),
            Ok(ms) if ms > needed => {}
            Ok(ms) => cx.err(
                &at,
                format!(
                    "`transaction.timeout.ms` ({ms}) must exceed checkpoint `interval` + `timeout` ({needed} ms): a transaction stays open that long, and the broker would abort it and lose its records"
                ),
            ),
            Err(_) => cx.err(&at, format!("`transaction.timeout.ms` must be a number of milliseconds, got `{v}`")),
        }
    }
}

/// Every place the pipeline writes (state directory, file sinks, dead
/// letters) or reads (file sources), in file order.
fn places(
    raw: &RawPipeline,
    state: &StateSpec,
    savepoint_dir: Option<&std::path::Path>,
    items: &[Item],
    kinds: &[Option<NodeKind>],
) -> Vec<Place> {
    let state_at = match raw.state.as_ref().and_then(|s| s.dir.as_ref()) {
        Some(_) => vec![Seg::Key("state".into()), Seg::Key("dir".into())],
        None => vec![Seg::Key("name".into())],
    };
    let what = if state_at.len() == 2 { "the state directory" } else { "the default state directory (from `name`)" };
    let mut out = vec![Place { path: state.dir.clone(), role: Role::State, what: what.into(), at: state_at }];
    if let Some(dir) = savepoint_dir {
        let at = vec![Seg::Key("savepoint".into()), Seg::Key("dir".into())];
        out.push(Place { path: dir.to_path_buf(), role: Role::Savepoints, what: "the savepoint directory".into(), at });
    }
    for (it, kind) in items.iter().zip(kinds) {
        let name = it.name.unwrap_or("?");
        let dead_letter = |path: &std::path::Path, what: &str| Place {
            path: path.to_path_buf(),
            role: Role::DeadLetter,
            what: format!("the dead-letter file of {what} `{name}`"),
            at: child(&it.path, "dead_letter"),
        };
        match kind {
            Some(NodeKind::Source(s)) => {
                if let SourceKind::File { files } = &s.kind {
                    out.extend(files.iter().map(|f| Place {
                        path: f.clone(),
                        role: Role::Input,
                        what: format!("source `{name}`"),
                        at: child(&it.path, "path"),
                    }));
                }
                if let OnError::DeadLetter(path) = &s.on_error {
                    out.push(dead_letter(path, "source"));
                }
            }
            Some(NodeKind::Aggregate(a)) => out.extend(a.dead_letter.as_deref().map(|p| dead_letter(p, "aggregate"))),
            Some(NodeKind::Join(j)) => out.extend(j.dead_letter.as_deref().map(|p| dead_letter(p, "join"))),
            Some(NodeKind::Filter(crate::config::FilterSpec { on_error: OnError::DeadLetter(path), .. }))
            | Some(NodeKind::Map(crate::config::MapSpec { on_error: OnError::DeadLetter(path), .. })) => {
                out.push(dead_letter(path, "operator"))
            }
            Some(NodeKind::Sink(SinkSpec::Kafka(k))) => {
                if let OnError::DeadLetter(path) = &k.on_error {
                    out.push(dead_letter(path, "sink"));
                }
            }
            Some(NodeKind::Sink(SinkSpec::Postgres(pg))) => {
                if let OnError::DeadLetter(path) = &pg.on_error {
                    out.push(dead_letter(path, "sink"));
                }
            }
            Some(NodeKind::Sink(SinkSpec::File { dir, .. })) => out.push(Place {
                path: dir.clone(),
                role: Role::Dir,
                what: format!("the output directory of sink `{name}`"),
                at: child(&it.path, "path"),
            }),
            _ => {}
        }
    }
    out
}

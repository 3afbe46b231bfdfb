//! The plan: the validated pipeline laid out for parallel execution.
//!
//! For every node it fixes the schema of the records it emits, how its
//! input is partitioned (forward or hashed by key), and which nodes are
//! chained into one task (Flink's operator chaining: a forward edge to a
//! node's only consumer needs no channel).

pub mod cluster;

use crate::config::{AggFunc, NodeId, NodeKind, Pipeline};
use crate::format::json::FieldNeed;
use crate::format::path::FieldPath;

/// How records reach a node from its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edge {
    /// Subtask i feeds subtask i.
    Forward,
    /// Records go to the subtask owning their key group; the key is made of
    /// these fields of the input schema, by index.
    Hash { key: Vec<usize> },
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub pipeline: Pipeline,
    /// Per node: the field names of the records it emits (`Record::fields`).
    pub schemas: Vec<Vec<String>>,
    /// Per node: the edge from its input (None for sources).
    pub edges: Vec<Option<Edge>>,
    /// Per node: the edge from a join's right input (None for other nodes).
    pub right_edges: Vec<Option<Edge>>,
    /// Per source and `map` node: the fields to extract when parsing (a
    /// map: its output), with what they need.
    pub projections: Vec<Vec<(String, FieldNeed)>>,
    /// Groups of nodes run as one task, each chain in dataflow order. The
    /// head reads from channels (or is a source); the rest are chained.
    pub chains: Vec<Vec<NodeId>>,
    /// Per source and `map` node: what the filters and maps reading its
    /// stream want read with the projection, so that a record's text is
    /// scanned once for the whole chain.
    pub extras: Vec<Extras>,
}

/// Top-level keys a source (or map) reads leniently after its projection
/// (`Record::fields` holds the schema's values, then one per `values`, then
/// one per `presence`): the variables of the filters' and maps' expressions
/// and the fields a map passes through unchanged, as scalars (null when
/// absent, null or nested: the consumer then reads the record's text), and
/// whether a map's new keys are present (a bool). Never an error at the
/// source. Datagen sources fill none of them (a consumer finds no value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extras {
    pub values: Vec<String>,
    pub presence: Vec<String>,
}

/// Where the records a filter or map reads hold the values it wants: the
/// schema's fields, then (if there are extras) the tag, the extra values
/// and the presence bools (`JsonParser::with_extras`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// The schema's field names (paths).
    schema: Vec<String>,
    extras: Extras,
    /// `extras.tag()`.
    tag: i64,
}

impl Layout {
    pub fn new(schema: Vec<String>, extras: Extras) -> Layout {
        Layout { schema, tag: extras.tag(), extras }
    }

    /// The slot of top-level key `key`'s value (a projected field of that
    /// one key, or an extra value), if the records hold it.
    pub fn value(&self, key: &str) -> Option<usize> {
        let path = FieldPath::key(key).to_string();
        self.field(&path).or_else(|| self.extras.values.iter().position(|k| k == key).map(|j| self.schema.len() + 1 + j))
    }

    /// The slot of the projected field `path` (a field path's text).
    pub fn field(&self, path: &str) -> Option<usize> {
        self.schema.iter().position(|n| n == path)
    }

    /// The slot of whether top-level key `key` is present (a bool).
    pub fn presence(&self, key: &str) -> Option<usize> {
        let at = self.schema.len() + 1 + self.extras.values.len();
        self.extras.presence.iter().position(|k| k == key).map(|j| at + j)
    }

    /// The slots of `fields` (a record's values) that may be trusted: all,
    /// or the schema's alone when the record does not carry this layout's
    /// extras (a record restored from a checkpoint of another pipeline).
    #[inline]
    pub fn trusted(&self, fields: &[crate::types::Value]) -> usize {
        let n = self.schema.len();
        if self.extras.values.is_empty() && self.extras.presence.is_empty() {
            return n;
        }
        match fields.get(n) {
            Some(crate::types::Value::Int(t)) if *t == self.tag => usize::MAX,
            _ => n,
        }
    }
}

impl Extras {
    /// The tag heading these extras in a record.
    pub fn tag(&self) -> i64 {
        crate::format::json::extras_tag(&self.values, &self.presence)
    }

    /// The number of values they take in a record (the tag included).
    pub fn len(&self) -> usize {
        match self.values.len() + self.presence.len() {
            0 => 0,
            n => n + 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Plan {
    pub fn new(pipeline: Pipeline) -> Plan {
        let n = pipeline.nodes.len();
        let mut projections = vec![Vec::new(); n];
        // Fields are needed by every keyed node reading a source's (or a
        // map's) stream, through dedups and filters (which pass records
        // through) up to an aggregate.
        for id in 0..n {
            for (source, needs) in field_needs(&pipeline, id) {
                merge_needs(&mut projections[source], needs);
            }
        }
        let mut schemas: Vec<Vec<String>> = vec![Vec::new(); n];
        let mut edges = vec![None; n];
        let mut right_edges = vec![None; n];
        for (id, node) in pipeline.nodes.iter().enumerate() {
            schemas[id] = match &node.kind {
                NodeKind::Source(_) | NodeKind::Map(_) | NodeKind::Join(_) => projections[id].iter().map(|(f, _)| f.clone()).collect(),
                NodeKind::Aggregate(a) => a.output_fields(),
                NodeKind::Dedup(_) | NodeKind::Filter(_) | NodeKind::Sink(_) => {
                    schemas[node.input.expect("non-source has an input")].clone()
                }
            };
            if let NodeKind::Join(j) = &node.kind {
                // Each side is hashed by its own key fields into the same key
                // groups (equal values encode alike), always through a channel.
                let hash = |input: Option<NodeId>, key: &[String]| {
                    input.map(|i| Edge::Hash {
                        key: key
                            .iter()
                            .map(|f| schemas[i].iter().position(|s| s == f).expect("validated: key field in input schema"))
                            .collect(),
                    })
                };
                edges[id] = hash(node.input, &j.left_key);
                right_edges[id] = hash(node.right, &j.right_key);
            } else if let Some(input) = node.input {
                edges[id] = Some(edge_for(&pipeline, &schemas[input], input, id));
            }
        }
        let chains = chains(&pipeline, &edges);
        let extras = extras(&pipeline, &projections);
        Plan { pipeline, schemas, edges, right_edges, projections, chains, extras }
    }

    /// The source (or map) whose records node `id` reads, through filters
    /// and dedups (None: records an aggregate made).
    pub fn stream_head(&self, id: NodeId) -> Option<NodeId> {
        stream_head(&self.pipeline, id)
    }

    /// Where the records node `id` reads hold their values (empty where
    /// they come from an aggregate).
    pub fn input_layout(&self, id: NodeId) -> Layout {
        self.stream_head(id).map(|h| self.layout(h)).unwrap_or_default()
    }

    /// The layout of the records source (or map) `head` emits.
    pub fn layout(&self, head: NodeId) -> Layout {
        Layout::new(self.schemas[head].clone(), self.extras[head].clone())
    }

    /// How node `id` reads its input, as channel state names it: `forward`,
    /// or `hash(f, …)` with the key's field names (None for sources).
    pub fn partitioning(&self, id: NodeId) -> Option<String> {
        self.partitioning_of(self.edges[id].as_ref()?, self.pipeline.nodes[id].input?)
    }

    /// How a join reads its right input, as `partitioning` says it.
    pub fn right_partitioning(&self, id: NodeId) -> Option<String> {
        self.partitioning_of(self.right_edges[id].as_ref()?, self.pipeline.nodes[id].right?)
    }

    fn partitioning_of(&self, edge: &Edge, input: NodeId) -> Option<String> {
        match edge {
            Edge::Forward => Some("forward".into()),
            Edge::Hash { key } => {
                let input = &self.schemas[input];
                let fields: Vec<&str> = key.iter().map(|&k| input.get(k).map_or("?", String::as_str)).collect();
                Some(format!("hash({})", fields.join(", ")))
            }
        }
    }

    /// Whether node `id` heads a chain (reads from channels, or is a source).
    pub fn is_chain_head(&self, id: NodeId) -> bool {
        self.chains.iter().any(|c| c.first() == Some(&id))
    }

    /// The chain whose tail is `id`, and the chains that read from it.
    pub fn chain_of(&self, id: NodeId) -> usize {
        self.chains.iter().position(|c| c.contains(&id)).expect("every node is in a chain")
    }
}

/// The key fields a node partitions by, if it is keyed.
fn key_of(kind: &NodeKind) -> Option<&[String]> {
    match kind {
        NodeKind::Dedup(d) => Some(&d.key),
        NodeKind::Aggregate(a) => Some(&a.key),
        // An upsert sink: one subtask per key, or two would wait on each
        // other's row locks (and a rescale would move held rows away from
        // their key's records).
        NodeKind::Sink(crate::config::SinkSpec::Postgres(pg)) if !pg.key_fields.is_empty() => Some(&pg.key_fields),
        _ => None,
    }
}

/// The key the records leaving `id` are already partitioned by, if any. A
/// filter passes records unchanged, so they stay partitioned as its input's.
fn partitioned_by(p: &Pipeline, id: NodeId) -> Option<&[String]> {
    match (&p.nodes[id].kind, p.nodes[id].input) {
        (NodeKind::Filter(_), Some(input)) => partitioned_by(p, input),
        (kind, _) => key_of(kind),
    }
}

fn edge_for(p: &Pipeline, input_schema: &[String], input: NodeId, id: NodeId) -> Edge {
    match key_of(&p.nodes[id].kind) {
        // Already partitioned by the same key (same values, same key groups).
        Some(key) if partitioned_by(p, input) == Some(key) => Edge::Forward,
        Some(key) => Edge::Hash {
            key: key.iter().map(|f| input_schema.iter().position(|s| s == f).expect("validated: key field in input schema")).collect(),
        },
        None => Edge::Forward,
    }
}

/// For a keyed node fed (through dedups) by a source: that source and the
/// fields this node needs of its records (a join: one pair per side).
fn field_needs(p: &Pipeline, id: NodeId) -> Vec<(NodeId, Vec<(String, FieldNeed)>)> {
    let node = &p.nodes[id];
    let required =
        |key: &[String]| key.iter().map(|k| (k.clone(), FieldNeed { required: true, ..FieldNeed::default() })).collect::<Vec<_>>();
    if let NodeKind::Join(j) = &node.kind {
        let sides = [(node.input, required(&j.left_key)), (node.right, required(&j.right_key))];
        return sides.into_iter().filter_map(|(input, needs)| Some((head_above(p, input?)?, needs))).collect();
    }
    field_needs_one(p, id).into_iter().collect()
}

/// The stream head at or above `up`, through dedups and filters.
fn head_above(p: &Pipeline, mut up: NodeId) -> Option<NodeId> {
    loop {
        match &p.nodes[up].kind {
            NodeKind::Source(_) | NodeKind::Map(_) | NodeKind::Join(_) => return Some(up),
            NodeKind::Dedup(_) | NodeKind::Filter(_) => up = p.nodes[up].input?,
            _ => return None,
        }
    }
}

fn field_needs_one(p: &Pipeline, id: NodeId) -> Option<(NodeId, Vec<(String, FieldNeed)>)> {
    let node = &p.nodes[id];
    let mut needs: Vec<(String, FieldNeed)> = Vec::new();
    match &node.kind {
        NodeKind::Dedup(d) => {
            merge_needs(&mut needs, d.key.iter().map(|k| (k.clone(), FieldNeed { required: true, ..FieldNeed::default() })).collect())
        }
        NodeKind::Aggregate(a) => {
            merge_needs(&mut needs, a.key.iter().map(|k| (k.clone(), FieldNeed { required: true, ..FieldNeed::default() })).collect());
            // `count` counts non-null values of any type (SQL `COUNT(field)`),
            // arrays and objects too; count_distinct, first, last and collect
            // take any scalar; the other functions need numbers.
            let fields = a.aggregates.iter().filter_map(|f| Some((f.field.clone()?, f.func)));
            let need = |func: AggFunc| FieldNeed { numeric: func.needs_number(), presence: func == AggFunc::Count, ..FieldNeed::default() };
            merge_needs(&mut needs, fields.map(|(f, func)| (f, need(func))).collect());
        }
        NodeKind::Sink(crate::config::SinkSpec::Kafka(k)) => {
            merge_needs(&mut needs, k.key.iter().map(|k| (k.clone(), FieldNeed::default())).collect())
        }
        NodeKind::Sink(crate::config::SinkSpec::Postgres(pg)) if !pg.key_fields.is_empty() => {
            merge_needs(&mut needs, pg.key_fields.iter().map(|k| (k.clone(), FieldNeed::default())).collect())
        }
        // Parsed once at the source, not again by the sink.
        NodeKind::Sink(crate::config::SinkSpec::Parquet(s)) => {
            merge_needs(&mut needs, s.columns.iter().map(|c| (c.path.clone(), FieldNeed::default())).collect())
        }
        _ => return None,
    }
    Some((head_above(p, node.input?)?, needs))
}

/// The source, map or join emitting the records node `id` reads, through
/// filters and dedups (which pass records on unchanged). A join reads two
/// streams: this is its left one's.
fn stream_head(p: &Pipeline, id: NodeId) -> Option<NodeId> {
    head_above(p, p.nodes[id].input?)
}

/// What each stream head reads for the filters and maps after it (see
/// `Extras`). Consumers come after their input, so a map's own extras are
/// complete (its consumers seen) before it asks its head for the values it
/// passes through.
fn extras(p: &Pipeline, projections: &[Vec<(String, FieldNeed)>]) -> Vec<Extras> {
    let mut extras = vec![Extras::default(); p.nodes.len()];
    for id in (0..p.nodes.len()).rev() {
        let Some(head) = stream_head(p, id) else { continue };
        let mut values: Vec<String> = Vec::new();
        let mut presence: Vec<String> = Vec::new();
        match &p.nodes[id].kind {
            NodeKind::Filter(f) => values.extend(f.condition.variables().iter().cloned()),
            NodeKind::Map(m) => {
                values.extend(m.set.iter().flat_map(|(_, e)| e.variables().iter().cloned()));
                let touched = map_touches(m);
                // Its new top-level keys: whether the record has them already.
                presence.extend(m.set.iter().filter_map(|(path, _)| top_level_key(path)));
                // What the operators after it want and it passes on unchanged.
                let wanted = projections[id].iter().filter_map(|(path, _)| top_level_key(path)).chain(extras[id].values.iter().cloned());
                values.extend(wanted.filter(|k| !touched.contains(k)));
                presence.extend(extras[id].presence.iter().filter(|k| !touched.contains(*k)).cloned());
            }
            _ => continue,
        }
        let projected: Vec<&str> = projections[head].iter().map(|(f, _)| f.as_str()).collect();
        let e = &mut extras[head];
        for k in values {
            if !projected.contains(&FieldPath::key(&k).to_string().as_str()) && !e.values.contains(&k) {
                e.values.push(k);
            }
        }
        for k in presence {
            if !e.presence.contains(&k) {
                e.presence.push(k);
            }
        }
    }
    extras
}

/// The top-level key a field path names, if it is one key.
fn top_level_key(path: &str) -> Option<String> {
    let p = FieldPath::parse(path).unwrap_or_else(|_| FieldPath::key(path));
    p.is_top_level().then(|| p.head().to_string())
}

/// The top-level keys a map changes (renamed from or to, set, dropped).
pub fn map_touches(m: &crate::config::MapSpec) -> Vec<String> {
    let head = |path: &str| FieldPath::parse(path).unwrap_or_else(|_| FieldPath::key(path)).head().to_string();
    let renamed = m.rename.iter().flat_map(|(new, old)| [head(new), head(old)]);
    renamed.chain(m.set.iter().map(|(path, _)| head(path))).chain(m.drop.iter().map(|path| head(path))).collect()
}

fn merge_needs(into: &mut Vec<(String, FieldNeed)>, needs: Vec<(String, FieldNeed)>) {
    for (f, need) in needs {
        match into.iter_mut().find(|(g, _)| *g == f) {
            Some((_, n)) => {
                n.required |= need.required;
                n.numeric |= need.numeric;
                // A marker stands for the value only if every use is a count.
                n.presence &= need.presence;
            }
            None => into.push((f, need)),
        }
    }
}

/// Chain a node into its input's task when the edge is forward and it is
/// the input's only consumer.
fn chains(p: &Pipeline, edges: &[Option<Edge>]) -> Vec<Vec<NodeId>> {
    let mut chain_of: Vec<Option<usize>> = vec![None; p.nodes.len()];
    let mut chains: Vec<Vec<NodeId>> = Vec::new();
    for (id, node) in p.nodes.iter().enumerate() {
        let chained = match (node.input, &edges[id]) {
            (Some(input), Some(Edge::Forward)) if p.consumers(input).count() == 1 => chain_of[input],
            _ => None,
        };
        match chained {
            Some(c) => {
                chains[c].push(id);
                chain_of[id] = Some(c);
            }
            None => {
                chain_of[id] = Some(chains.len());
                chains.push(vec![id]);
            }
        }
    }
    chains
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn plan(yaml: &str) -> Plan {
        Plan::new(load_str(yaml, "t.yaml", &[]).expect("valid pipeline"))
    }

    const PIPELINE: &str = r#"
name: p
parallelism: 2
sources:
  - {name: src, type: datagen, rows: 10, fields: {id: {kind: sequence}, user: {kind: key, cardinality: 3}, amount: {kind: int, min: 0, max: 9}}}
operators:
  - {name: unique, type: dedup, input: src, key: [id]}
  - {name: again, type: dedup, input: unique, key: [id]}
  - {name: per_user, type: aggregate, input: again, key: [user], aggregates: [{fn: sum, field: amount, as: total}]}
sinks:
  - {name: out, type: blackhole, input: per_user}
"#;

    #[test]
    fn an_upsert_sink_reads_its_input_hashed_by_its_key_unless_keyed_alike() {
        let pg = |input: &str, key: &str| {
            PIPELINE.replace(
                "  - {name: out, type: blackhole, input: per_user}",
                &format!("  - {{name: out, type: blackhole, input: per_user}}\n  - {{name: db, type: postgres, input: {input}, url: \"postgres://u@h/d\", table: t, mode: upsert, key: [k], columns: {{k: {key}}}}}"),
            )
        };
        let p = plan(&pg("per_user", "user"));
        assert_eq!(p.edges[5], Some(Edge::Forward), "the aggregate is keyed by user already");
        let p = plan(&pg("src", "id"));
        let id = p.schemas[0].iter().position(|f| f == "id").unwrap();
        assert_eq!(p.edges[5], Some(Edge::Hash { key: vec![id] }), "one subtask writes each key");
    }

    #[test]
    fn hash_edges_only_where_the_key_changes_and_forward_edges_chain() {
        let p = plan(PIPELINE);
        let names: Vec<&str> = p.pipeline.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["src", "unique", "again", "per_user", "out"]);
        assert_eq!(p.edges[1], Some(Edge::Hash { key: vec![0] }), "source → dedup repartitions by id");
        assert_eq!(p.edges[2], Some(Edge::Forward), "same key: already partitioned");
        assert!(matches!(p.edges[3], Some(Edge::Hash { .. })), "new key: repartition");
        assert_eq!(p.edges[4], Some(Edge::Forward));
        assert_eq!(p.chains, vec![vec![0], vec![1, 2], vec![3, 4]]);
    }

    #[test]
    fn sources_project_the_fields_used_downstream() {
        let p = plan(PIPELINE);
        let fields: Vec<(&str, FieldNeed)> = p.projections[0].iter().map(|(f, n)| (f.as_str(), *n)).collect();
        assert_eq!(
            fields,
            [
                ("id", FieldNeed { required: true, ..FieldNeed::default() }),
                ("user", FieldNeed { required: true, ..FieldNeed::default() }),
                ("amount", FieldNeed { numeric: true, ..FieldNeed::default() }),
            ]
        );
        assert_eq!(p.schemas[3], ["user", "total"], "an aggregate emits its own schema");
    }

    #[test]
    fn filters_and_maps_chain_and_maps_project_for_downstream() {
        // Issue 16: stateless operators run in their input's task; a filter
        // keeps its input's partitioning, a map's output is projected anew.
        let yaml = r#"
name: p
parallelism: 2
sources:
  - {name: src, type: datagen, rows: 10, fields: {id: {kind: sequence}, user: {kind: key, cardinality: 3}, amount: {kind: int, min: 0, max: 9}}}
operators:
  - {name: unique, type: dedup, input: src, key: [id]}
  - {name: big, type: filter, input: unique, where: "amount > 2"}
  - {name: again, type: dedup, input: big, key: [id]}
  - {name: shaped, type: map, input: again, rename: {who: user}, set: {double: "amount * 2"}}
  - {name: per_user, type: aggregate, input: shaped, key: [who], aggregates: [{fn: sum, field: double, as: total}]}
sinks:
  - {name: out, type: blackhole, input: per_user}
"#;
        let p = plan(yaml);
        let names: Vec<&str> = p.pipeline.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["src", "unique", "big", "again", "shaped", "per_user", "out"]);
        assert_eq!(p.edges[2], Some(Edge::Forward));
        assert_eq!(p.edges[3], Some(Edge::Forward), "through a filter: still partitioned by id");
        assert_eq!(p.chains, vec![vec![0], vec![1, 2, 3, 4], vec![5, 6]]);
        let src: Vec<&str> = p.projections[0].iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(src, ["id"], "fields after the map come from the map's output");
        let map: Vec<(&str, FieldNeed)> = p.projections[4].iter().map(|(f, n)| (f.as_str(), *n)).collect();
        assert_eq!(
            map,
            [
                ("who", FieldNeed { required: true, ..FieldNeed::default() }),
                ("double", FieldNeed { numeric: true, ..FieldNeed::default() })
            ]
        );
        assert_eq!(p.schemas[4], ["who", "double"]);
    }

    #[test]
    fn a_source_reads_what_the_filters_and_maps_after_it_evaluate_and_pass_on() {
        // Issue 16: one scan per record for the whole chain.
        let yaml = r#"
name: p
sources:
  - {name: src, type: datagen, rows: 10, fields: {id: {kind: sequence}, user: {kind: key, cardinality: 3}, amount: {kind: int, min: 0, max: 9}}}
operators:
  - {name: even, type: filter, input: src, where: "amount % 2 == 0 && id > 0"}
  - {name: unique, type: dedup, input: even, key: [id]}
  - {name: doubled, type: map, input: unique, set: {amount2: "amount * 2"}, drop: [ts]}
  - {name: big, type: filter, input: doubled, where: "amount2 > 4 && note != 'x'"}
  - {name: per_user, type: aggregate, input: big, key: [user], aggregates: [{fn: sum, field: amount2, as: total}]}
sinks:
  - {name: out, type: blackhole, input: per_user}
"#;
        let p = plan(yaml);
        // The source projects `id` for the dedup; the filter's `amount`, the
        // map's `amount`, and `user` and `note`, which the map passes on
        // untouched to the aggregate and the second filter, come after it.
        let src: Vec<&str> = p.projections[0].iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(src, ["id"]);
        let mut values = p.extras[0].values.clone();
        values.sort();
        assert_eq!(values, ["amount", "note", "user"]);
        assert_eq!(p.extras[0].presence, ["amount2"], "whether the map's new key is there");
        assert_eq!(p.extras[3], Extras { values: vec!["note".into()], presence: vec![] }, "the map's output: its projection has the rest");
        let even = p.input_layout(1);
        assert_eq!(even.value("id"), Some(0), "a projected field");
        assert_eq!(even.value("amount"), Some(2 + p.extras[0].values.iter().position(|k| k == "amount").unwrap()), "after the tag");
        assert_eq!(even.presence("amount2"), Some(5));
        assert_eq!(p.input_layout(4), p.layout(3), "through the filter to the map");
        assert_eq!(p.input_layout(5).value("amount2"), Some(1));
        assert_eq!(p.stream_head(6), None, "a sink after an aggregate");
    }

    #[test]
    fn a_join_hashes_each_side_by_its_own_key_and_heads_the_stream_after_it() {
        let yaml = r#"
name: p
parallelism: 2
sources:
  - {name: a, type: datagen, rows: 10, fields: {id: {kind: sequence}, ts: {kind: timestamp}}, event_time: {field: ts}}
  - {name: b, type: datagen, rows: 10, fields: {n: {kind: int, min: 0, max: 9}, oid: {kind: sequence}, ts: {kind: timestamp}}, event_time: {field: ts}}
operators:
  - {name: j, type: join, left: a, right: b, on: {left: [id], right: [oid]}, interval: {lower: 0s, upper: 1s}}
  - {name: per, type: aggregate, input: j, key: [b.n], aggregates: [{fn: count, as: c}]}
sinks:
  - {name: out, type: blackhole, input: per}
"#;
        let p = plan(yaml);
        let names: Vec<&str> = p.pipeline.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "j", "per", "out"]);
        assert_eq!(p.schemas[0], ["id"]);
        assert_eq!(p.schemas[1], ["oid"]);
        assert_eq!((p.edges[2].clone(), p.right_edges[2].clone()), (Some(Edge::Hash { key: vec![0] }), Some(Edge::Hash { key: vec![0] })));
        assert_eq!((p.partitioning(2).unwrap(), p.right_partitioning(2).unwrap()), ("hash(id)".to_string(), "hash(oid)".to_string()));
        assert_eq!(p.schemas[2], ["b.n"], "the join's output is projected for the aggregate");
        assert_eq!(p.stream_head(3), Some(2));
        assert_eq!(p.chains, vec![vec![0], vec![1], vec![2], vec![3, 4]]);
        assert_eq!(p.pipeline.consumers(1).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn count_of_a_field_needs_no_number() {
        // Issue 18 #8: `count` of a string field rejected the records that had one.
        let yaml = PIPELINE.replace(
            "{fn: sum, field: amount, as: total}",
            "{fn: count, field: user, as: n}, {fn: count, field: amount, as: m}, {fn: max, field: amount, as: top}",
        );
        let p = plan(&yaml);
        let needs: Vec<(&str, FieldNeed)> = p.projections[0].iter().map(|(f, n)| (f.as_str(), *n)).collect();
        assert!(needs.contains(&("user", FieldNeed { required: true, ..FieldNeed::default() })), "{needs:?}");
        assert!(needs.contains(&("amount", FieldNeed { numeric: true, ..FieldNeed::default() })), "max needs a number: {needs:?}");
    }
}

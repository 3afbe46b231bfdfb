//! A pipeline shape drawn from a seed, and its YAML.
//!
//! Sources: datagen (sequence ids, one row every `STEP_MS` of event time) or
//! generated JSON-line files (with redelivered copies and bad lines sent to a
//! dead letter). Operators: dedup by `id`, windowed aggregates (tumbling,
//! sliding, session; a second tumbling level over a first) and running
//! aggregates, each reading one node; a node has 1–3 consumers (fan-out),
//! and every hash edge from many upstream subtasks is a fan-in. Sinks: a file
//! sink on every leaf, sometimes a second file sink (fan-out) and a slow
//! blackhole (backpressure); a `filter` or `map` spliced into some edges
//! that carry raw records. Aggregates add some of the functions over values
//! (`count_distinct`, `first`, `last`, `collect` with `max_items`) to their
//! fixed ones. Some shapes join two raw nodes by `user` (interval, window
//! or temporal join, any kind), each side from its own source when there
//! are two (of different speeds), else a source and a filter of it.
//! Event times are multiples of `STEP_MS` and
//! session gaps are not, so no record is ever exactly `gap` from another.

use std::fmt::Write as _;
use std::path::Path;

use super::reference::JoinKind;
use super::rng::Rng;

/// Event-time step between generated records (ms).
pub const STEP_MS: i64 = 10;
/// Event time of record 0.
pub const START_MS: i64 = 1_700_000_000_000;
/// Bounded disorder of file inputs stays well below this.
pub const OUT_OF_ORDERNESS_MS: i64 = 300;
/// `broker_timeout` of Kafka sources and sinks: broker outages are drawn
/// both shorter and longer than this.
pub const BROKER_TIMEOUT_S: u64 = 6;

#[derive(Clone, Debug)]
pub enum SourceKind {
    /// Rows 0..rows: id = n, user = key of (seed, n), amount, ts = START + n*STEP.
    Datagen { rows: u64, seed: u64, users: u64 },
    /// `records` records over `files` files (plus copies, `bad` bad lines,
    /// and `late` records far behind their file, late for some operators).
    File { files: usize, records: usize, users: u64, bad: usize, late: usize },
}

#[derive(Clone, Debug)]
pub struct Source {
    pub name: String,
    pub kind: SourceKind,
    pub rate: u64,
    /// A file source whose files are produced into this topic instead, one
    /// partition per file in the file's order: the same input through the
    /// Kafka source.
    pub via_kafka: Option<Topic>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Topic {
    pub brokers: String,
    pub topic: String,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Window {
    Tumbling { size: i64 },
    Sliding { size: i64, slide: i64 },
    Session { gap: i64 },
}

#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// Key `[id]`, ttl 1h: drops the redelivered copies.
    Dedup,
    /// Key `[user]` over raw records: n, total, lo, hi.
    Windowed(Window),
    /// Key `[user]` over a windowed aggregate's output (tumbling): n, total, windows.
    Rollup { size: i64 },
    /// Key `[user]`, no window: n, total, emitted every `emit_ms`.
    Running { emit_ms: u64 },
    /// `where: "amount % 3 != 1"`: passes raw records unchanged.
    Filter,
    /// `set: {amount: "amount * 2", tag: "'m'"}`: raw records, reshaped.
    Map,
    /// Key `[user]` on both sides: the operator's `input` (left) with `right`.
    Join { right: String, how: JoinHow, kind: JoinKind },
}

/// Which join (issue 28) a `Join` is. Bounds and windows are a few steps
/// of event time, so that a record has a handful of partners.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum JoinHow {
    Interval {
        lower: i64,
        upper: i64,
    },
    /// Tumbling windows of `size` ms.
    Window {
        size: i64,
    },
    /// The right side is the changelog: each record a new version of its
    /// user, valid for `ttl` ms (None: for ever).
    Temporal {
        ttl: Option<i64>,
    },
}

/// What a node emits, which decides what may read it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Emits {
    /// Input records (raw JSON lines): source or dedup.
    Raw,
    /// Windowed aggregate results, stamped `window_end - 1`.
    Windows,
    /// Running aggregate updates (no event time).
    Updates,
    /// A join's output: one object per match, each side under its node's name.
    Joined,
}

/// A function over values (issue 16) an aggregate adds to its fixed ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValueFn {
    CountDistinct,
    First,
    Last,
    Collect { max_items: usize },
}

impl ValueFn {
    /// Its `fn`, the field it reads on the aggregate's input (raw records,
    /// or a windowed aggregate's results for a rollup) and its output name.
    pub fn spec(self, rollup: bool) -> (&'static str, &'static str, &'static str) {
        match (self, rollup) {
            (ValueFn::CountDistinct, false) => ("count_distinct", "amount", "distinct"),
            (ValueFn::CountDistinct, true) => ("count_distinct", "total", "distinct"),
            (ValueFn::First, false) => ("first", "id", "first"),
            (ValueFn::First, true) => ("first", "n", "first"),
            (ValueFn::Last, false) => ("last", "amount", "last"),
            (ValueFn::Last, true) => ("last", "total", "last"),
            (ValueFn::Collect { .. }, false) => ("collect", "id", "some"),
            (ValueFn::Collect { .. }, true) => ("collect", "total", "some"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Operator {
    pub name: String,
    pub input: String,
    pub kind: OpKind,
    /// An aggregate's functions over values, after its fixed ones.
    pub values: Vec<ValueFn>,
}

impl Operator {
    /// Does it read `node` (a join: as either side)?
    pub fn reads(&self, node: &str) -> bool {
        self.input == node || matches!(&self.kind, OpKind::Join { right, .. } if right == node)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum SinkKind {
    File,
    Blackhole {
        rate: u64,
    },
    /// Exactly-once (at-least-once in an at-least-once pipeline) into its own topic.
    Kafka {
        brokers: String,
        topic: String,
    },
    /// Each record's JSON text written to a table of its own, exactly once
    /// (at least once in an at-least-once pipeline), in batches of `batch`:
    /// appended, or upserted by `user` (a running aggregate's updates: the
    /// table ends with each key's final record).
    Postgres {
        url: String,
        table: String,
        batch: u64,
        upsert: bool,
    },
}

#[derive(Clone, Debug)]
pub struct Sink {
    pub name: String,
    pub input: String,
    pub kind: SinkKind,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Alignment {
    Aligned,
    Unaligned,
    AlignedTimeout { ms: u64 },
    AtLeastOnce,
}

#[derive(Clone, Debug)]
pub struct Shape {
    pub name: String,
    pub parallelism: u32,
    pub rocksdb: bool,
    pub incremental: bool,
    pub bundle: u32,
    pub alignment: Alignment,
    pub interval_ms: u64,
    pub retain: u32,
    /// `restart:` in the pipeline (a failed run restarts in the process);
    /// drawn from a stream of its own so that older seeds draw as before.
    pub restart: bool,
    /// The seed of that stream (also for the `fail=` faults of the attempts).
    pub side_seed: u64,
    pub sources: Vec<Source>,
    pub operators: Vec<Operator>,
    pub sinks: Vec<Sink>,
}

/// Mixed into a case's seed for draws added later (their own stream).
const SIDE_STREAM: u64 = 0x7265_7374_6172_7421;

impl Shape {
    pub fn draw(rng: &mut Rng, seed: u64) -> Shape {
        let parallelism = rng.range(1, 4) as u32;
        let alignment = match rng.range(0, 3) {
            0 => Alignment::Aligned,
            1 => Alignment::Unaligned,
            2 => Alignment::AlignedTimeout { ms: rng.range(1, 30) },
            _ => Alignment::AtLeastOnce,
        };
        let mut shape = Shape {
            name: format!("chaos-{seed}"),
            parallelism,
            rocksdb: rng.chance(0.4),
            incremental: rng.chance(0.6),
            bundle: rng.range(1, parallelism as u64) as u32,
            alignment,
            interval_ms: rng.range(60, 300),
            retain: rng.range(1, 3) as u32,
            restart: Rng::new(seed ^ SIDE_STREAM).chance(0.5),
            side_seed: seed ^ SIDE_STREAM,
            sources: Vec::new(),
            operators: Vec::new(),
            sinks: Vec::new(),
        };
        let n_sources = if rng.chance(0.3) { 2 } else { 1 };
        for i in 0..n_sources {
            let users = rng.range(3, 40);
            let kind = if rng.chance(0.5) {
                SourceKind::Datagen { rows: rng.range(1500, 4000), seed: rng.range(0, 1000), users }
            } else {
                let bad = if rng.chance(0.7) { rng.range(1, 30) as usize } else { 0 };
                let late = if rng.chance(0.4) { rng.range(1, 20) as usize } else { 0 };
                SourceKind::File { files: rng.range(1, 4) as usize, records: rng.range(1500, 4000) as usize, users, bad, late }
            };
            // 2.5–4 s for a run through all of it: kills land in the middle.
            let records = match kind {
                SourceKind::Datagen { rows, .. } => rows,
                SourceKind::File { records, .. } => records as u64,
            };
            let rate = records * 1000 / rng.range(2500, 4000);
            shape.sources.push(Source { name: format!("src{i}"), kind, rate, via_kafka: None });
        }
        let n_ops = rng.range(0, 3);
        for i in 0..n_ops {
            shape.add_random_operator(rng, format!("op{i}"));
        }
        // Every leaf gets a file sink; then fan-out: an extra file sink, a slow blackhole.
        let leaves: Vec<String> = shape.nodes().into_iter().filter(|n| shape.consumers(n) == 0).collect();
        for leaf in leaves {
            let name = format!("out{}", shape.sinks.len());
            shape.sinks.push(Sink { name, input: leaf, kind: SinkKind::File });
        }
        if rng.chance(0.4) {
            if let Some(node) = shape.random_node_with_room(rng) {
                let name = format!("out{}", shape.sinks.len());
                shape.sinks.push(Sink { name, input: node, kind: SinkKind::File });
            }
        }
        shape.splice_stateless(seed);
        shape.draw_value_functions(seed);
        shape.splice_join(seed);
        if rng.chance(0.3) {
            if let Some(node) = shape.random_node_with_room(rng) {
                // Slower than its source: backpressure builds up behind it.
                let root = shape.root_of(&node);
                let source_rate = shape.sources.iter().find(|s| s.name == root).map_or(1000, |s| s.rate);
                let rate = (source_rate * rng.range(50, 90) / 100).max(1);
                shape.sinks.push(Sink { name: "slow".into(), input: node, kind: SinkKind::Blackhole { rate } });
            }
        }
        shape
    }

    /// Put a `filter` or `map` (issue 16) on some edges that carry raw
    /// records, drawn from their own stream of the seed so that the rest of
    /// a seed's shape stays as it was before these existed.
    fn splice_stateless(&mut self, seed: u64) {
        let mut rng = Rng::new(seed ^ 0x5eed_f11e);
        let n = rng.range(0, 2);
        for i in 0..n {
            // Edges into an operator or sink from a node emitting raw records.
            let mut edges: Vec<(bool, usize)> = Vec::new();
            edges.extend((0..self.operators.len()).filter(|&j| self.emits(&self.operators[j].input) == Emits::Raw).map(|j| (true, j)));
            edges.extend((0..self.sinks.len()).filter(|&j| self.emits(&self.sinks[j].input) == Emits::Raw).map(|j| (false, j)));
            if edges.is_empty() {
                return;
            }
            let (is_op, j) = *rng.pick(&edges);
            let kind = if rng.chance(0.5) { OpKind::Filter } else { OpKind::Map };
            let name = format!("st{i}");
            let input = if is_op { &mut self.operators[j].input } else { &mut self.sinks[j].input };
            let upstream = std::mem::replace(input, name.clone());
            // Declared right before its consumer (operators) or last: after its input either way.
            let at = if is_op { j } else { self.operators.len() };
            self.operators.insert(at, Operator { name, input: upstream, kind, values: Vec::new() });
        }
    }

    /// Join two raw nodes (issue 28), with a file sink of its own, from a
    /// stream of its own of the seed (as `splice_stateless`).
    fn splice_join(&mut self, seed: u64) {
        let mut rng = Rng::new(seed ^ 0x001a_1101);
        if !rng.chance(0.35) {
            return;
        }
        let raw: Vec<String> = self.nodes().into_iter().filter(|n| self.emits(n) == Emits::Raw && self.consumers(n) < 3).collect();
        let sources: Vec<&String> = raw.iter().filter(|n| self.operator(n).is_none()).collect();
        let (mut left, mut right) = match (sources.len(), raw.len()) {
            (2.., _) => (sources[0].clone(), sources[1].clone()),
            (_, 2..) => {
                let l = rng.range(0, raw.len() as u64 - 1) as usize;
                let r = (l + rng.range(1, raw.len() as u64 - 1) as usize) % raw.len();
                (raw[l].clone(), raw[r].clone())
            }
            (_, 1) => {
                // One raw node: the other side is a filter of it.
                self.operators.push(Operator { name: "jf".into(), input: raw[0].clone(), kind: OpKind::Filter, values: Vec::new() });
                (raw[0].clone(), "jf".to_string())
            }
            _ => return,
        };
        if rng.chance(0.5) {
            std::mem::swap(&mut left, &mut right);
        }
        let four = [JoinKind::Inner, JoinKind::Left, JoinKind::Right, JoinKind::Full];
        let (mut how, mut kind) = match rng.range(0, 2) {
            0 => (
                JoinHow::Interval { lower: -(rng.range(0, 3) as i64) * STEP_MS, upper: rng.range(0, 3) as i64 * STEP_MS },
                *rng.pick(&four),
            ),
            1 => (JoinHow::Window { size: rng.range(2, 6) as i64 * STEP_MS }, *rng.pick(&four)),
            _ => (JoinHow::Temporal { ttl: rng.chance(0.5).then(|| rng.range(1, 4) as i64 * STEP_MS) }, *rng.pick(&four[..2])),
        };
        // Two versions at one time: the last by text wins, and a map's text
        // is weir's to write, not the oracle's.
        if matches!(how, JoinHow::Temporal { .. }) && matches!(self.operator(&right).map(|o| &o.kind), Some(OpKind::Map)) {
            (how, kind) = (JoinHow::Interval { lower: 0, upper: STEP_MS }, kind);
        }
        let kind_of = OpKind::Join { right, how, kind };
        self.operators.push(Operator { name: "join".into(), input: left, kind: kind_of, values: Vec::new() });
        self.sinks.push(Sink { name: "outj".into(), input: "join".into(), kind: SinkKind::File });
    }

    /// Give some aggregates functions over values (issue 16), each at most
    /// once, in a drawn order, from their own stream of the seed (as
    /// `splice_stateless`).
    fn draw_value_functions(&mut self, seed: u64) {
        let mut rng = Rng::new(seed ^ 0x0a66_f00d);
        for o in &mut self.operators {
            if matches!(o.kind, OpKind::Dedup | OpKind::Filter | OpKind::Map | OpKind::Join { .. }) || rng.chance(0.3) {
                continue;
            }
            let mut all =
                vec![ValueFn::CountDistinct, ValueFn::First, ValueFn::Last, ValueFn::Collect { max_items: rng.range(1, 6) as usize }];
            while !all.is_empty() {
                let f = all.remove(rng.range(0, all.len() as u64 - 1) as usize);
                if rng.chance(0.6) {
                    o.values.push(f);
                }
            }
        }
    }

    /// A Kafka sink writing into `topic`, on some node that has room.
    pub fn add_kafka_sink(&mut self, rng: &mut Rng, brokers: String, topic: String) {
        if let Some(node) = self.random_node_with_room(rng) {
            self.sinks.push(Sink { name: "kout".into(), input: node, kind: SinkKind::Kafka { brokers, topic } });
        }
    }

    /// Where a PostgreSQL sink goes: some node that has room, and whether
    /// it upserts (a running aggregate's updates, by `user`).
    pub fn postgres_target(&self, rng: &mut Rng) -> Option<(String, bool)> {
        let node = self.random_node_with_room(rng)?;
        let upsert = self.emits(&node) == Emits::Updates;
        Some((node, upsert))
    }

    /// A PostgreSQL sink on `node` writing `table` (see `postgres_target`).
    pub fn add_postgres_sink(&mut self, rng: &mut Rng, node: String, upsert: bool, url: String, table: String) {
        let batch = rng.range(1, 50);
        self.sinks.push(Sink { name: "pgout".into(), input: node, kind: SinkKind::Postgres { url, table, batch, upsert } });
    }

    /// File sources that could be read through Kafka instead.
    pub fn file_sources(&self) -> Vec<String> {
        self.sources.iter().filter(|s| matches!(s.kind, SourceKind::File { .. })).map(|s| s.name.clone()).collect()
    }

    /// Does any source or sink talk to the broker?
    pub fn uses_kafka(&self) -> bool {
        self.sources.iter().any(|s| s.via_kafka.is_some()) || self.sinks.iter().any(|s| matches!(s.kind, SinkKind::Kafka { .. }))
    }

    /// A new operator on a node that can take one more consumer.
    pub fn add_random_operator(&mut self, rng: &mut Rng, name: String) -> bool {
        let candidates: Vec<String> = self
            .nodes()
            .into_iter()
            .filter(|n| self.consumers(n) < 3 && !matches!(self.emits(n), Emits::Updates | Emits::Joined))
            .collect();
        if candidates.is_empty() {
            return false;
        }
        let input = rng.pick(&candidates).clone();
        let kind = match self.emits(&input) {
            Emits::Windows => OpKind::Rollup { size: rng.range(1, 4) as i64 * 1000 },
            _ => match rng.range(0, 4) {
                0 => OpKind::Dedup,
                1 => OpKind::Windowed(Window::Tumbling { size: rng.range(2, 10) as i64 * 100 }),
                2 => {
                    let slide = rng.range(2, 5) as i64 * 100;
                    OpKind::Windowed(Window::Sliding { size: slide * rng.range(2, 4) as i64, slide })
                }
                3 => OpKind::Windowed(Window::Session { gap: STEP_MS * rng.range(3, 60) as i64 + STEP_MS / 2 }),
                _ => OpKind::Running { emit_ms: rng.range(100, 600) },
            },
        };
        self.operators.push(Operator { name, input, kind, values: Vec::new() });
        true
    }

    fn random_node_with_room(&self, rng: &mut Rng) -> Option<String> {
        let nodes: Vec<String> = self.nodes().into_iter().filter(|n| self.consumers(n) < 3).collect();
        (!nodes.is_empty()).then(|| rng.pick(&nodes).clone())
    }

    /// Sources and operators, in declaration order.
    pub fn nodes(&self) -> Vec<String> {
        self.sources.iter().map(|s| s.name.clone()).chain(self.operators.iter().map(|o| o.name.clone())).collect()
    }

    pub fn consumers(&self, node: &str) -> usize {
        self.operators.iter().filter(|o| o.reads(node)).count() + self.sinks.iter().filter(|s| s.input == node).count()
    }

    pub fn operator(&self, name: &str) -> Option<&Operator> {
        self.operators.iter().find(|o| o.name == name)
    }

    pub fn emits(&self, node: &str) -> Emits {
        match self.operator(node).map(|o| &o.kind) {
            None | Some(OpKind::Dedup) | Some(OpKind::Filter) | Some(OpKind::Map) => Emits::Raw,
            Some(OpKind::Windowed(_)) | Some(OpKind::Rollup { .. }) => Emits::Windows,
            Some(OpKind::Running { .. }) => Emits::Updates,
            Some(OpKind::Join { .. }) => Emits::Joined,
        }
    }

    /// The source a node reads from, through its operators.
    pub fn root_of(&self, node: &str) -> String {
        match self.operator(node) {
            Some(o) => self.root_of(&o.input),
            None => node.to_string(),
        }
    }

    pub fn exactly_once(&self) -> bool {
        self.alignment != Alignment::AtLeastOnce
    }

    /// Whether a `--stop --drain` savepoint can be restored and continued
    /// with the same results: no event-time state that a drain fires early.
    pub fn drain_safe(&self) -> bool {
        self.operators.iter().all(|o| matches!(o.kind, OpKind::Running { .. }))
    }

    pub fn file_sinks(&self) -> impl Iterator<Item = &Sink> {
        self.sinks.iter().filter(|s| s.kind == SinkKind::File)
    }

    /// Sinks whose output the oracle checks: file and Kafka.
    pub fn checked_sinks(&self) -> impl Iterator<Item = &Sink> {
        self.sinks.iter().filter(|s| !matches!(s.kind, SinkKind::Blackhole { .. }))
    }

    /// The pipeline YAML; every path is absolute under `case`.
    pub fn yaml(&self, case: &Path) -> String {
        let abs = |rel: &str| case.join(rel).display().to_string();
        let mut y = String::new();
        let _ = writeln!(y, "name: {}\nparallelism: {}", self.name, self.parallelism);
        if self.rocksdb {
            let _ = writeln!(y, "state: {{backend: rocksdb, dir: {}, incremental: {}}}", abs("state"), self.incremental);
        } else {
            let _ = writeln!(y, "state: {{backend: memory, dir: {}}}", abs("state"));
        }
        let mode = match self.alignment {
            Alignment::Aligned => "mode: exactly_once, alignment: aligned".to_string(),
            Alignment::Unaligned => "mode: exactly_once, alignment: unaligned".to_string(),
            Alignment::AlignedTimeout { ms } => format!("mode: exactly_once, alignment: aligned, aligned_timeout: {ms}ms"),
            Alignment::AtLeastOnce => "mode: at_least_once".to_string(),
        };
        let _ = writeln!(
            y,
            "checkpoint: {{interval: {}ms, {mode}, timeout: 20s, retain: {}, tolerable_failures: 1000}}\nbundles: {{size: {}}}",
            self.interval_ms, self.retain, self.bundle
        );
        if self.restart {
            y.push_str("restart: {attempts: 3, backoff: 50ms, max_backoff: 200ms}\n");
        }
        y.push_str("sources:\n");
        for s in &self.sources {
            let _ = writeln!(y, "  - name: {}\n    rate_limit: {}", s.name, s.rate);
            let _ = writeln!(y, "    event_time: {{field: ts, max_out_of_orderness: {OUT_OF_ORDERNESS_MS}ms}}");
            match &s.kind {
                SourceKind::Datagen { rows, seed, users } => {
                    let _ = writeln!(
                        y,
                        "    type: datagen\n    seed: {seed}\n    rows: {rows}\n    start_time: {START_MS}\n    interval: {STEP_MS}ms"
                    );
                    let _ = writeln!(
                        y,
                        "    fields:\n      id: {{kind: sequence}}\n      user: {{kind: key, cardinality: {users}, prefix: \"u\"}}"
                    );
                    let _ = writeln!(y, "      amount: {{kind: int, min: 1, max: 100}}\n      ts: {{kind: timestamp}}");
                }
                SourceKind::File { .. } => {
                    match &s.via_kafka {
                        // A short broker_timeout: a broker outage longer than
                        // that fails the run (and the next one restores).
                        Some(t) => {
                            let _ = writeln!(
                                y,
                                "    type: kafka\n    brokers: '{}'\n    topics: [{}]\n    start: earliest\n    bounded: true\n    broker_timeout: {BROKER_TIMEOUT_S}s",
                                t.brokers, t.topic
                            );
                        }
                        None => {
                            let _ = writeln!(y, "    type: file\n    path: {}", abs(&format!("in/{}", s.name)));
                        }
                    }
                    let _ = writeln!(y, "    on_error: dead_letter\n    dead_letter: {}", abs(&dead_letter_rel(&s.name)));
                }
            }
        }
        if !self.operators.is_empty() {
            y.push_str("operators:\n");
        }
        for o in &self.operators {
            let reads = if matches!(o.kind, OpKind::Join { .. }) { "left" } else { "input" };
            let head = format!("  - name: {}\n    {reads}: {}\n", o.name, o.input);
            y.push_str(&head);
            let raw_aggs = "    aggregates:\n      - {fn: count, as: n}\n      - {fn: sum, field: amount, as: total}\n";
            match &o.kind {
                OpKind::Dedup => y.push_str("    type: dedup\n    key: [id]\n    ttl: 1h\n"),
                OpKind::Windowed(w) => {
                    let window = match w {
                        Window::Tumbling { size } => format!("{{type: tumbling, size: {size}ms}}"),
                        Window::Sliding { size, slide } => format!("{{type: sliding, size: {size}ms, slide: {slide}ms}}"),
                        Window::Session { gap } => format!("{{type: session, gap: {gap}ms}}"),
                    };
                    let _ = writeln!(y, "    type: aggregate\n    key: [user]\n    window: {window}");
                    y.push_str(raw_aggs);
                    y.push_str("      - {fn: min, field: amount, as: lo}\n      - {fn: max, field: amount, as: hi}\n");
                }
                OpKind::Rollup { size } => {
                    let _ = writeln!(y, "    type: aggregate\n    key: [user]\n    window: {{type: tumbling, size: {size}ms}}");
                    y.push_str("    aggregates:\n      - {fn: sum, field: n, as: n}\n      - {fn: sum, field: total, as: total}\n");
                    y.push_str("      - {fn: count, as: windows}\n");
                }
                OpKind::Running { emit_ms } => {
                    let _ = writeln!(y, "    type: aggregate\n    key: [user]\n    emit_interval: {emit_ms}ms");
                    y.push_str(raw_aggs);
                }
                OpKind::Filter => y.push_str("    type: filter\n    where: \"amount % 3 != 1\"\n"),
                OpKind::Map => y.push_str("    type: map\n    set: {amount: \"amount * 2\", tag: \"'m'\"}\n"),
                OpKind::Join { right, how, kind } => {
                    let how = match how {
                        JoinHow::Interval { lower, upper } => format!("interval: {{lower: {lower}ms, upper: {upper}ms}}"),
                        JoinHow::Window { size } => format!("window: {{type: tumbling, size: {size}ms}}"),
                        JoinHow::Temporal { ttl: None } => "temporal: {}".to_string(),
                        JoinHow::Temporal { ttl: Some(ttl) } => format!("temporal: {{ttl: {ttl}ms}}"),
                    };
                    let kind = format!("{kind:?}").to_lowercase();
                    let _ = writeln!(
                        y,
                        "    type: join\n    right: {right}\n    on: {{left: [user], right: [user]}}\n    {how}\n    kind: {kind}"
                    );
                }
            }
            let rollup = matches!(o.kind, OpKind::Rollup { .. });
            for f in &o.values {
                let (func, field, alias) = f.spec(rollup);
                let bound = match f {
                    ValueFn::Collect { max_items } => format!(", max_items: {max_items}"),
                    _ => String::new(),
                };
                let _ = writeln!(y, "      - {{fn: {func}, field: {field}{bound}, as: {alias}}}");
            }
        }
        y.push_str("sinks:\n");
        for s in &self.sinks {
            match &s.kind {
                SinkKind::File => {
                    let _ = writeln!(y, "  - {{name: {}, type: file, input: {}, path: {}}}", s.name, s.input, abs(&sink_rel(&s.name)));
                }
                SinkKind::Kafka { brokers, topic } => {
                    // A short transaction timeout: a crashed producer's open
                    // transaction holds read_committed readers back only that long.
                    let delivery = match self.exactly_once() {
                        true => "exactly_once, properties: {transaction.timeout.ms: 45000}",
                        false => "at_least_once",
                    };
                    let _ = writeln!(
                        y,
                        "  - {{name: {}, type: kafka, input: {}, brokers: '{brokers}', topic: {topic}, delivery: {delivery}, broker_timeout: {BROKER_TIMEOUT_S}s}}",
                        s.name, s.input
                    );
                }
                SinkKind::Blackhole { rate } => {
                    let _ = writeln!(y, "  - {{name: {}, type: blackhole, input: {}, rate_limit: {rate}}}", s.name, s.input);
                }
                SinkKind::Postgres { url, table, batch, upsert } => {
                    let delivery = if self.exactly_once() { "exactly_once" } else { "at_least_once" };
                    let mapping = match upsert {
                        true => "mode: upsert, key: [user], columns: {user: user, line: $}",
                        false => "columns: {line: $}",
                    };
                    let _ = writeln!(
                        y,
                        "  - {{name: {}, type: postgres, input: {}, url: '{url}', table: {table}, {mapping}, batch_size: {batch}, delivery: {delivery}}}",
                        s.name, s.input
                    );
                }
            }
        }
        y
    }

    /// One line for the table and the reproduction: what this shape is.
    pub fn summary(&self) -> String {
        let ops: Vec<String> = self
            .operators
            .iter()
            .map(|o| match o.values.is_empty() {
                true => format!("{}<-{}:{:?}", o.name, o.input, o.kind),
                false => format!("{}<-{}:{:?}+{:?}", o.name, o.input, o.kind, o.values),
            })
            .collect();
        let sinks: Vec<String> = self.sinks.iter().map(|s| format!("{}<-{}", s.name, s.input)).collect();
        let via = |s: &Source| if s.via_kafka.is_some() { " via kafka" } else { "" };
        let sources: Vec<String> = self.sources.iter().map(|s| format!("{}:{:?}{}", s.name, s.kind, via(s))).collect();
        format!(
            "p={} {} bundle={} {:?} interval={}ms | {} | {} | {}",
            self.parallelism,
            if self.rocksdb { format!("rocksdb(incremental={})", self.incremental) } else { "memory".into() },
            self.bundle,
            self.alignment,
            self.interval_ms,
            sources.join(", "),
            ops.join(", "),
            sinks.join(", ")
        )
    }
}

/// Where a file sink writes, relative to the case directory.
pub fn sink_rel(sink: &str) -> String {
    format!("out/{sink}")
}

/// A file source's dead-letter file, relative to the case directory.
pub fn dead_letter_rel(source: &str) -> String {
    format!("out/dl-{source}.jsonl")
}

#[test]
fn aggregates_draw_every_function_over_values() {
    // Issue 16: the harness exercises count_distinct, first, last and
    // collect (with several bounds) on windowed, rollup and running
    // aggregates, and writes them into the pipeline.
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..400 {
        let shape = Shape::draw(&mut Rng::new(seed), seed);
        let yaml = shape.yaml(Path::new("/case"));
        for o in &shape.operators {
            for f in &o.values {
                let (func, field, alias) = f.spec(matches!(o.kind, OpKind::Rollup { .. }));
                assert!(yaml.contains(&format!("{{fn: {func}, field: {field}")), "{yaml}");
                assert!(yaml.contains(&format!("as: {alias}}}")), "{yaml}");
                let kind = match o.kind {
                    OpKind::Windowed(_) => "windowed",
                    OpKind::Rollup { .. } => "rollup",
                    OpKind::Running { .. } => "running",
                    _ => panic!("{:?} has functions over values", o.kind),
                };
                seen.insert((kind, format!("{f:?}")));
            }
        }
    }
    for kind in ["windowed", "rollup", "running"] {
        for f in ["CountDistinct", "First", "Last"] {
            assert!(seen.contains(&(kind, f.to_string())), "{kind} {f} never drawn: {seen:?}");
        }
        assert!(seen.iter().any(|(k, f)| *k == kind && f.starts_with("Collect")), "{kind} collect never drawn");
    }
    let bounds = seen.iter().filter(|(_, f)| f.starts_with("Collect")).count();
    assert!(bounds >= 4, "collect is drawn with several bounds: {seen:?}");
}

#[test]
fn shapes_draw_every_join_and_kind_and_each_validates() {
    // Issue 28: the harness joins two raw nodes with each join and kind,
    // and weir accepts every drawn pipeline.
    let mut seen = std::collections::BTreeSet::new();
    let dir = tempfile::tempdir().unwrap();
    for seed in 0..300 {
        let shape = Shape::draw(&mut Rng::new(seed), seed);
        let Some((how, kind)) = shape.operators.iter().find_map(|o| match &o.kind {
            OpKind::Join { how, kind, .. } => Some((*how, *kind)),
            _ => None,
        }) else {
            continue;
        };
        let how = match how {
            JoinHow::Interval { .. } => "interval",
            JoinHow::Window { .. } => "window",
            JoinHow::Temporal { .. } => "temporal",
        };
        if seen.insert((how, format!("{kind:?}"))) {
            for s in &shape.sources {
                // validate wants a file source's directory to hold a file.
                let input = dir.path().join("in").join(&s.name);
                std::fs::create_dir_all(&input).unwrap();
                std::fs::write(input.join("0.jsonl"), "").unwrap();
            }
            let path = dir.path().join(format!("{seed}.yaml"));
            std::fs::write(&path, shape.yaml(dir.path())).unwrap();
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_weir")).arg("validate").arg(&path).output().unwrap();
            assert!(o.status.success(), "seed {seed}: {}\n{}", String::from_utf8_lossy(&o.stderr), shape.yaml(dir.path()));
        }
    }
    for how in ["interval", "window"] {
        for kind in ["Inner", "Left", "Right", "Full"] {
            assert!(seen.contains(&(how, kind.to_string())), "{how} {kind} never drawn: {seen:?}");
        }
    }
    assert!(seen.contains(&("temporal", "Inner".into())) && seen.contains(&("temporal", "Left".into())), "{seen:?}");
    assert!(!seen.iter().any(|(h, k)| *h == "temporal" && (k == "Right" || k == "Full")), "{seen:?}");
}

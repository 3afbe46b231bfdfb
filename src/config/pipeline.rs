//! The validated pipeline: what `compile` produces and the planner consumes.
//!
//! Every value here has been checked (names resolved to node ids, durations
//! parsed, limits respected), so nothing downstream re-validates.

use std::path::PathBuf;
use std::time::Duration;

use crate::types::Millis;

/// Index of a node in `Pipeline::nodes`.
pub type NodeId = usize;

#[derive(Debug, Clone)]
pub struct Pipeline {
    pub name: String,
    pub parallelism: u16,
    pub max_parallelism: u16,
    /// Sources, operators and sinks in topological order (inputs first).
    pub nodes: Vec<Node>,
    pub state: StateSpec,
    /// None: checkpointing is off.
    pub checkpoint: Option<CheckpointSpec>,
    /// `savepoint.dir`: where `savepoint trigger` creates savepoints without
    /// `--target` (as it is written; only with `checkpoint`).
    pub savepoint_dir: Option<PathBuf>,
    /// `savepoint.on_sigterm`: SIGTERM stops with a savepoint (into
    /// `savepoint_dir`) instead of a final checkpoint.
    pub savepoint_on_sigterm: bool,
    /// `savepoint.on_sigterm_keep`: savepoints taken on SIGTERM kept in
    /// their directory (at least 1); older ones are disposed.
    pub savepoint_on_sigterm_keep: usize,
    /// `restart:`: None = a failed run ends the process (exit 1).
    pub restart: Option<RestartPolicy>,
    /// Subtasks per bundle: subtask i belongs to bundle i / bundle_size.
    pub bundle_size: u16,
    /// None: no metrics endpoint.
    pub metrics: Option<MetricsSpec>,
    /// Which instance of how many this process runs (`0 of 1`: no cluster).
    pub cluster: ClusterSpec,
}

/// `cluster:` or `--instance I/N`: instance `index` of `instances`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    pub index: u16,
    pub instances: u16,
    /// Brokers of the repartition topics (None: no Kafka source to take them from).
    pub brokers: Option<String>,
    /// What every instance of the cluster must share (`plan::cluster::identity`;
    /// empty until the pipeline is laid out for its instance).
    pub identity: String,
    /// Tells this cluster's producers of repartition topics from those of
    /// the cluster before a rescale (`plan::cluster::generation`; 0 until the
    /// start point is decided).
    pub generation: u64,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec { index: 0, instances: 1, brokers: None, identity: String::new(), generation: 0 }
    }
}

impl ClusterSpec {
    /// More than one instance: edges between instances go through Kafka.
    pub fn is_cluster(&self) -> bool {
        self.instances > 1
    }
}

/// A repartition topic as a Kafka source reads it: partition k holds key
/// group k; this instance reads the partitions of its own key groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepartitionIn {
    pub partitions: u16,
    pub owned: std::ops::Range<u16>,
    /// Whose watermarks count (`plan::cluster::generation`).
    pub generation: u64,
}

/// The HTTP endpoint serving `/metrics`, `/healthz` and `/ready`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsSpec {
    pub address: std::net::SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSpec {
    /// Holds `checkpoints/`, `savepoints/`, `local/` (working state) and the control socket.
    pub dir: PathBuf,
    pub backend: Backend,
}

/// Where keyed state lives while the pipeline runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Memory,
    RocksDb(RocksDbSpec),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocksDbSpec {
    /// Checkpoints reference shared SST files (false: canonical full snapshots).
    pub incremental: bool,
    /// Bytes of the LRU block cache of one bundle's DB.
    pub block_cache: u64,
    /// Bytes of one column family's memtable.
    pub write_buffer: u64,
    /// Bytes of each subtask's write-behind cache of point-table entries.
    pub write_cache: u64,
    pub compression: Compression,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Lz4,
    Zstd,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointSpec {
    pub interval: Duration,
    pub alignment: Alignment,
    pub timeout: Duration,
    pub min_pause: Duration,
    pub retain: std::num::NonZeroUsize,
    pub tolerable_failures: u32,
    /// `checkpoint.storage`: None keeps checkpoints in the state directory.
    pub storage: Option<RemoteStorage>,
}

/// Checkpoints on object storage: the URL and the object store's options.
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteStorage {
    /// `s3://bucket/prefix`.
    pub url: String,
    /// `storage_options`; may hold credentials, so never printed.
    pub options: Vec<(String, String)>,
    /// `storage_lease`: how long an owner that stopped renewing keeps the
    /// storage (`checkpoint::lease`).
    pub lease: Duration,
}

impl std::fmt::Debug for RemoteStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&str> = self.options.iter().map(|(k, _)| k.as_str()).collect();
        write!(f, "RemoteStorage({}, options {keys:?})", self.url)
    }
}

/// How a task lines up barriers from its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alignment {
    /// Exactly-once: block inputs that delivered the barrier until all did.
    Aligned,
    /// Exactly-once: barriers overtake queued data, which is persisted.
    Unaligned,
    /// Aligned, switching to unaligned when alignment takes longer.
    AlignedTimeout(Duration),
    /// No blocking: records after a barrier may be in the snapshot too.
    AtLeastOnce,
}

#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    /// The upstream node; None for sources. A join's left input.
    pub input: Option<NodeId>,
    /// A join's right input; None for every other node.
    pub right: Option<NodeId>,
    pub kind: NodeKind,
}

impl Node {
    /// Every node this one reads: its input, then a join's right input.
    pub fn inputs(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.input.into_iter().chain(self.right)
    }
}

#[derive(Debug, Clone)]
pub enum NodeKind {
    Source(SourceSpec),
    Dedup(DedupSpec),
    Aggregate(AggregateSpec),
    Filter(FilterSpec),
    Map(MapSpec),
    Join(JoinSpec),
    Sink(SinkSpec),
}

/// `join` (issue 28): two keyed streams in event time. The interval join:
/// a left record at `t` matches every right record of an equal key at `s`
/// with `t + lower <= s <= t + upper`; the window join: records of one
/// window; the temporal join: a left record at `t` and the version of its
/// key in the right changelog valid at `t`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinSpec {
    /// Key field paths of each side, equal in number; pair i compares left
    /// field i with right field i.
    pub left_key: Vec<String>,
    pub right_key: Vec<String>,
    pub kind: JoinKind,
    /// Bounds of the interval in ms, `lower <= upper`, each within ±10000
    /// years (0 in a window join).
    pub lower: Millis,
    pub upper: Millis,
    /// A window join: both sides in these (tumbling or sliding) windows,
    /// joined per window and key when the window fires.
    pub window: Option<WindowSpec>,
    /// A temporal join: the right side is a changelog table.
    pub temporal: Option<TemporalSpec>,
    /// Late records of either side are written here (JSON lines).
    pub dead_letter: Option<PathBuf>,
    /// The output member holding each side's record.
    pub left_as: String,
    pub right_as: String,
}

/// A temporal join's table side.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TemporalSpec {
    /// A CEL expression (validated) true for the right records that delete
    /// their key; None: no record deletes.
    pub delete_when: Option<String>,
    /// How long a version stays valid without a newer one: a left record
    /// more than this after its key's version finds none (None: forever).
    pub ttl: Option<std::time::Duration>,
    /// `as_of: processing_time`: a left record gets the version current
    /// when it arrives, at once (a lookup join); its output depends on
    /// timing. False: the version valid at its event time.
    pub processing_time: bool,
}

/// Which unmatched records a join emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
}

impl JoinKind {
    /// Whether unmatched records of side `side` (0 left, 1 right) are emitted.
    pub fn emits_unmatched(self, side: usize) -> bool {
        matches!((self, side), (JoinKind::Full, _) | (JoinKind::Left, 0) | (JoinKind::Right, 1))
    }
}

/// `filter`: records for which `condition` is true pass unchanged.
#[derive(Debug, Clone)]
pub struct FilterSpec {
    pub condition: crate::expr::Expression,
    /// Records the expression fails on.
    pub on_error: OnError,
}

/// `map`: renames, then sets, then drops fields. Paths are canonical field
/// paths of keys only (`crate::format::path`).
#[derive(Debug, Clone)]
pub struct MapSpec {
    /// (new path, old path).
    pub rename: Vec<(String, String)>,
    /// (path, expression over the input record).
    pub set: Vec<(String, crate::expr::Expression)>,
    pub drop: Vec<String>,
    /// Records an expression fails on, or whose output lacks a field needed downstream.
    pub on_error: OnError,
}

#[derive(Debug, Clone)]
pub struct SourceSpec {
    pub kind: SourceKind,
    pub event_time: Option<EventTimeSpec>,
    /// Records per second over the whole source (split across subtasks).
    pub rate_limit: Option<f64>,
    /// Records a subtask reads per batch (None: 1024, fewer with `rate_limit`).
    pub batch_size: Option<usize>,
    pub on_error: OnError,
}

#[derive(Debug, Clone)]
pub enum SourceKind {
    /// JSON lines from a file, a glob or a directory (already expanded to
    /// concrete files, sorted, at compile time).
    File {
        files: Vec<PathBuf>,
    },
    Datagen(DatagenSpec),
    Kafka(KafkaSourceSpec),
}

#[derive(Debug, Clone)]
pub struct KafkaSourceSpec {
    pub brokers: String,
    pub topics: KafkaTopics,
    pub start: KafkaStart,
    /// A recorded (restored or group) offset outside a partition's range.
    pub on_offset_out_of_range: OffsetOutOfRange,
    pub group_id: Option<String>,
    /// Commit offsets to `group_id` after each completed checkpoint.
    pub commit_offsets: bool,
    /// Put the message key into the record under this field.
    pub key_field: Option<String>,
    /// Event time is the message timestamp (not a field).
    pub message_timestamp: bool,
    /// Stop at the end offsets found at the first start.
    pub bounded: bool,
    pub broker_timeout: Duration,
    /// librdkafka settings passed through, as strings.
    pub properties: Vec<(String, String)>,
    /// (index, instances): this instance reads every `instances`-th partition.
    pub instance: (u16, u16),
    /// A repartition topic weir created (between two operators of a cluster).
    pub repartition: Option<RepartitionIn>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaTopics {
    Names(Vec<String>),
    /// A regular expression matched against the broker's topic names at start.
    Pattern(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaStart {
    Earliest,
    Latest,
    GroupOffsets,
}

/// What a Kafka source does with an offset past a partition's end or below
/// its start (a recreated topic, records removed by retention).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetOutOfRange {
    /// Fail the pipeline, naming topic, partition and offsets.
    Fail,
    /// Go on from the partition's first offset.
    Earliest,
    /// Go on from the partition's end.
    Latest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    ExactlyOnce,
    AtLeastOnce,
}

#[derive(Debug, Clone)]
pub struct KafkaSinkSpec {
    pub brokers: String,
    pub topic: String,
    /// Fields of the record making the message key (empty: no key).
    pub key: Vec<String>,
    pub delivery: Delivery,
    pub broker_timeout: Duration,
    pub properties: Vec<(String, String)>,
    /// What to do with a record the producer refuses (too large).
    pub on_error: OnError,
    /// In a cluster: the instance, part of the transactional ids.
    pub instance: Option<u16>,
    /// A repartition topic: created with this many partitions, and each
    /// record goes to the partition of its key's key group.
    pub repartition: Option<u16>,
    /// A repartition topic: the cluster generation its stamps carry
    /// (`plan::cluster::generation`).
    pub generation: u64,
}

#[derive(Debug, Clone)]
pub struct DatagenSpec {
    pub seed: u64,
    pub rows: Option<u64>,
    pub start_time: Millis,
    pub interval_ms: Millis,
    pub fields: Vec<(String, GenField)>,
}

#[derive(Debug, Clone)]
pub enum GenField {
    Sequence,
    Key { cardinality: u64, prefix: String },
    Int { min: i64, max: i64 },
    Float { min: f64, max: f64 },
    Timestamp { jitter_ms: Millis },
}

#[derive(Debug, Clone)]
pub struct EventTimeSpec {
    pub field: String,
    pub max_out_of_orderness: Duration,
    /// An input silent this long stops holding the watermark back.
    pub idle_timeout: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnError {
    Fail,
    Skip,
    DeadLetter(PathBuf),
}

#[derive(Debug, Clone)]
pub struct DedupSpec {
    pub key: Vec<String>,
    pub ttl: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct AggregateSpec {
    pub key: Vec<String>,
    pub window: Option<WindowSpec>,
    pub allowed_lateness: Duration,
    pub aggregates: Vec<AggregateFn>,
    /// Running aggregates only: how often changed keys are emitted.
    pub emit_interval: Duration,
    pub dead_letter: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSpec {
    Tumbling { size: Duration },
    Sliding { size: Duration, slide: Duration },
    Session { gap: Duration },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateFn {
    pub func: AggFunc,
    /// The input field; None only for `count`.
    pub field: Option<String>,
    /// The output field name.
    pub alias: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFunc {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    /// Exact number of distinct non-null values.
    CountDistinct,
    /// The value of the earliest record by event time.
    First,
    /// The value of the latest record by event time.
    Last,
    /// The first `max_items` values by event time, as a JSON array.
    Collect {
        max_items: u32,
    },
    /// Estimated number of distinct non-null values (HyperLogLog).
    ApproxCountDistinct,
}

/// The largest `max_items` of `collect`: it bounds a key's (or window's) state.
pub const MAX_COLLECT_ITEMS: u64 = 10_000;

impl AggFunc {
    /// Whether the function needs a number (others take any scalar).
    pub fn needs_number(self) -> bool {
        matches!(self, AggFunc::Sum | AggFunc::Min | AggFunc::Max | AggFunc::Avg)
    }

    /// Whether the function orders values by event time and so needs it.
    pub fn needs_event_time(self) -> bool {
        matches!(self, AggFunc::First | AggFunc::Last)
    }
}

#[derive(Debug, Clone)]
pub enum SinkSpec {
    File { dir: PathBuf, max_file_bytes: u64 },
    Stdout,
    Blackhole { rate_limit: Option<f64> },
    Kafka(KafkaSinkSpec),
    Parquet(super::parquet::ParquetSinkSpec),
    Postgres(PostgresSinkSpec),
}

#[derive(Debug, Clone)]
pub struct PostgresSinkSpec {
    /// The connection URL as written (no password: that is read from `password_env`).
    pub url: String,
    pub password_env: String,
    /// `table` or `schema.table`, unquoted.
    pub table: String,
    pub mode: PostgresMode,
    /// Column name → the field path its value is read from (None: `$`,
    /// the whole record), in column order.
    pub columns: Vec<(String, Option<crate::format::path::FieldPath>)>,
    /// Upsert: the fields the key columns read (empty in append mode, or
    /// when a key column is the whole record). The sink's input is
    /// partitioned by them, so one subtask writes each key.
    pub key_fields: Vec<String>,
    pub batch_size: usize,
    pub delivery: Delivery,
    pub server_timeout: Duration,
    pub on_error: OnError,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostgresMode {
    Append,
    /// `INSERT … ON CONFLICT (key) DO UPDATE`: the key's columns.
    Upsert {
        key: Vec<String>,
    },
}

/// Output field of a windowed aggregate: the window's start (epoch ms).
pub const WINDOW_START: &str = "window_start";
/// Output field of a windowed aggregate: the window's end (epoch ms).
pub const WINDOW_END: &str = "window_end";

impl AggregateSpec {
    /// The fields of the records this aggregate emits, in order: the key
    /// fields, then `window_start` and `window_end` when windowed, then the
    /// `as` name of each aggregate.
    pub fn output_fields(&self) -> Vec<String> {
        let mut out = self.key.clone();
        if self.window.is_some() {
            out.push(WINDOW_START.to_string());
            out.push(WINDOW_END.to_string());
        }
        out.extend(self.aggregates.iter().map(|a| a.alias.clone()));
        out
    }
}

impl Pipeline {
    /// Number of bundles (the last may be smaller).
    pub fn bundles(&self) -> u16 {
        self.parallelism.div_ceil(self.bundle_size)
    }

    /// Nodes that read from `id`, in order.
    pub fn consumers(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.iter().enumerate().filter(move |(_, n)| n.inputs().any(|i| i == id)).map(|(i, _)| i)
    }

    /// For each keyed operator, what its state is keyed by ("dedup by
    /// [order_id]"). Recorded in checkpoints: restoring keyed state into an
    /// operator keyed differently would put entries under the wrong keys.
    pub fn state_keys(&self) -> std::collections::BTreeMap<String, String> {
        let keyed = |n: &Node| match &n.kind {
            NodeKind::Dedup(d) => Some(format!("dedup by [{}]", d.key.join(", "))),
            NodeKind::Aggregate(a) => Some(format!("aggregate by [{}]", a.key.join(", "))),
            // A temporal join keeps versions, not records waiting for partners.
            NodeKind::Join(j) => Some(format!(
                "{}join by [{}] and [{}]",
                match &j.temporal {
                    Some(t) if t.processing_time => "processing-time temporal ",
                    Some(_) => "temporal ",
                    None => "",
                },
                j.left_key.join(", "),
                j.right_key.join(", ")
            )),
            NodeKind::Source(_) | NodeKind::Filter(_) | NodeKind::Map(_) | NodeKind::Sink(_) => None,
        };
        self.nodes.iter().filter_map(|n| keyed(n).map(|k| (n.name.clone(), k))).collect()
    }

    /// The key groups this process deals to its keyed subtasks (its share
    /// of them as an instance of a cluster).
    pub fn key_group_share(&self) -> crate::types::KeyGroupShare {
        crate::types::KeyGroupShare { instance: self.cluster.index, instances: self.cluster.instances.max(1) }
    }

    /// What its checkpoints record of the cluster (None: one instance).
    pub fn cluster_record(&self) -> Option<crate::checkpoint::manifest::ClusterRecord> {
        let c = &self.cluster;
        c.is_cluster().then(|| crate::checkpoint::manifest::ClusterRecord {
            index: c.index,
            instances: c.instances,
            identity: c.identity.clone(),
            generation: c.generation,
        })
    }

    pub fn has_event_time(&self) -> bool {
        self.nodes.iter().any(|n| matches!(&n.kind, NodeKind::Source(s) if s.event_time.is_some()))
    }
}

/// `restart:`: how often a failed run is restarted in the process (from
/// the latest checkpoint) before the failure ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Restarts allowed within `window`.
    pub attempts: u32,
    /// The wait before the first restart; doubled for each later one in the window.
    pub backoff: std::time::Duration,
    pub max_backoff: std::time::Duration,
    pub window: std::time::Duration,
}

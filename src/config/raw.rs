//! The pipeline file as written: serde types that mirror the YAML exactly.
//!
//! Nothing here is checked beyond its shape; `compile` turns a `RawPipeline`
//! into a validated `Pipeline`. Unknown keys are rejected everywhere.

use indexmap::IndexMap;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPipeline {
    pub name: String,
    #[serde(default)]
    pub parallelism: Option<u32>,
    #[serde(default)]
    pub max_parallelism: Option<u32>,
    #[serde(default)]
    pub state: Option<RawState>,
    #[serde(default)]
    pub checkpoint: Option<RawCheckpoint>,
    #[serde(default)]
    pub savepoint: Option<RawSavepoint>,
    #[serde(default)]
    pub bundles: Option<RawBundles>,
    /// Present = a failed run restarts in the process from its latest checkpoint.
    #[serde(default)]
    pub restart: Option<RawRestart>,
    /// Present = the HTTP metrics endpoint is served.
    #[serde(default)]
    pub metrics: Option<RawMetrics>,
    /// Present = this process is one instance of a cluster (`--instance I/N`).
    #[serde(default)]
    pub cluster: Option<RawCluster>,
    #[serde(default)]
    pub sources: Vec<RawSource>,
    #[serde(default)]
    pub operators: Vec<RawOperator>,
    #[serde(default)]
    pub sinks: Vec<RawSink>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawSource {
    File {
        name: String,
        /// A file, a glob (`data/*.jsonl`) or a directory.
        path: String,
        #[serde(default)]
        format: Option<RawFormat>,
        #[serde(default)]
        event_time: Option<RawEventTime>,
        #[serde(default)]
        rate_limit: Option<f64>,
        /// Records per poll, at most 1024 (the default).
        #[serde(default)]
        batch_size: Option<u64>,
        #[serde(default)]
        on_error: Option<RawOnError>,
        #[serde(default)]
        dead_letter: Option<String>,
    },
    Datagen {
        name: String,
        #[serde(default)]
        seed: Option<u64>,
        /// Total rows over all subtasks; omitted = unbounded.
        #[serde(default)]
        rows: Option<u64>,
        #[serde(default)]
        rate_limit: Option<f64>,
        /// Records per poll, at most 1024 (the default).
        #[serde(default)]
        batch_size: Option<u64>,
        /// Event time of row 0, RFC 3339 or epoch milliseconds.
        #[serde(default)]
        start_time: Option<serde_yaml::Value>,
        /// Event-time step between consecutive rows (default 1ms).
        #[serde(default)]
        interval: Option<String>,
        fields: IndexMap<String, RawGenField>,
        #[serde(default)]
        event_time: Option<RawEventTime>,
    },
    Kafka {
        name: String,
        /// Bootstrap servers, `host:port[,host:port...]`.
        brokers: String,
        #[serde(default)]
        topics: Option<Vec<String>>,
        /// A regular expression over topic names (librdkafka's `^` syntax not needed).
        #[serde(default)]
        topic_pattern: Option<String>,
        #[serde(default)]
        format: Option<RawFormat>,
        #[serde(default)]
        start: Option<RawKafkaStart>,
        /// What to do with a recorded offset outside a partition's range.
        #[serde(default)]
        on_offset_out_of_range: Option<RawOffsetOutOfRange>,
        /// Consumer group: where `start: group_offsets` reads from and
        /// where offsets are committed after each checkpoint (monitoring only).
        #[serde(default)]
        group_id: Option<String>,
        /// Commit offsets to the group after each completed checkpoint.
        #[serde(default)]
        commit_offsets: Option<bool>,
        /// Add the message key (as a string) to the record under this field.
        #[serde(default)]
        key_field: Option<String>,
        /// Read up to the end offsets found at the first start, then finish.
        #[serde(default)]
        bounded: Option<bool>,
        /// How long the brokers may be unreachable before the pipeline fails (default 30s).
        #[serde(default)]
        broker_timeout: Option<String>,
        #[serde(default)]
        event_time: Option<RawEventTime>,
        #[serde(default)]
        rate_limit: Option<f64>,
        /// Records per poll, at most 1024 (the default).
        #[serde(default)]
        batch_size: Option<u64>,
        #[serde(default)]
        on_error: Option<RawOnError>,
        #[serde(default)]
        dead_letter: Option<String>,
        /// librdkafka settings, passed through.
        #[serde(default)]
        properties: IndexMap<String, serde_yaml::Value>,
    },
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawKafkaStart {
    Earliest,
    Latest,
    GroupOffsets,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawOffsetOutOfRange {
    Fail,
    Earliest,
    Latest,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawDelivery {
    ExactlyOnce,
    AtLeastOnce,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawFormat {
    Json,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawOnError {
    Fail,
    Skip,
    DeadLetter,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEventTime {
    /// The field holding the event time; a Kafka source may instead take
    /// the message timestamp (`message_timestamp: true`).
    #[serde(default)]
    pub field: Option<String>,
    #[serde(default)]
    pub message_timestamp: Option<bool>,
    #[serde(default)]
    pub max_out_of_orderness: Option<String>,
    #[serde(default)]
    pub idle_timeout: Option<String>,
}

/// One generated field of a datagen source.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawGenField {
    /// The row's sequence number (0, 1, 2, ...).
    Sequence,
    /// A string key `prefix<n>` with n uniform in 0..cardinality.
    Key {
        cardinality: u64,
        #[serde(default)]
        prefix: Option<String>,
    },
    /// A uniform integer in min..=max.
    Int { min: i64, max: i64 },
    /// A uniform float in min..max.
    Float { min: f64, max: f64 },
    /// The row's event time in epoch ms: start_time + seq * interval, minus a
    /// uniform jitter in 0..=jitter (to make the stream out of order).
    Timestamp {
        #[serde(default)]
        jitter: Option<String>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawOperator {
    Dedup {
        name: String,
        input: String,
        key: Vec<String>,
        #[serde(default)]
        ttl: Option<String>,
    },
    Aggregate {
        name: String,
        input: String,
        key: Vec<String>,
        #[serde(default)]
        window: Option<RawWindow>,
        #[serde(default)]
        allowed_lateness: Option<String>,
        aggregates: Vec<RawAggregate>,
        /// Running aggregates (no window): how often changed keys are emitted.
        #[serde(default)]
        emit_interval: Option<String>,
        /// Late records are written here (JSON lines) besides being counted.
        #[serde(default)]
        dead_letter: Option<String>,
    },
    /// Keeps the records for which a CEL expression is true.
    Filter {
        name: String,
        input: String,
        #[serde(rename = "where")]
        condition: String,
        /// Records the expression fails on (a type mismatch, a missing field).
        #[serde(default)]
        on_error: Option<RawOnError>,
        #[serde(default)]
        dead_letter: Option<String>,
    },
    /// Sets (CEL), renames and drops fields.
    Map {
        name: String,
        input: String,
        /// Field path -> CEL expression.
        #[serde(default)]
        set: IndexMap<String, String>,
        #[serde(default)]
        drop: Vec<String>,
        /// New field path -> the path it is moved from.
        #[serde(default)]
        rename: IndexMap<String, String>,
        #[serde(default)]
        on_error: Option<RawOnError>,
        #[serde(default)]
        dead_letter: Option<String>,
    },
    /// Joins two streams by equal keys (issue 28): the interval, window or
    /// temporal join.
    Join {
        name: String,
        left: String,
        right: String,
        on: RawJoinOn,
        /// inner (default), left, right or full (outer).
        #[serde(default)]
        kind: Option<RawJoinKind>,
        /// The interval join's bounds, or
        #[serde(default)]
        interval: Option<RawInterval>,
        /// the window join's windows (tumbling or sliding), or
        #[serde(default)]
        window: Option<RawWindow>,
        /// the temporal join's table settings (the right side is a changelog).
        #[serde(default)]
        temporal: Option<RawTemporal>,
        /// The output member each side's record goes under (default: the node names).
        #[serde(default, rename = "as")]
        prefixes: Option<RawJoinAs>,
        /// Late records of either side are written here besides being counted.
        #[serde(default)]
        dead_letter: Option<String>,
    },
}

/// `on:` of a join: the key fields of each side, in pairs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJoinOn {
    pub left: Vec<String>,
    pub right: Vec<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawJoinKind {
    Inner,
    Left,
    Right,
    Full,
}

/// `interval:` of an interval join: durations, each may be negative (`-1h`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInterval {
    pub lower: String,
    pub upper: String,
}

/// `temporal:` of a temporal join (`{}` for the defaults).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTemporal {
    /// A CEL expression true for the right records that delete their key.
    #[serde(default)]
    pub delete_when: Option<String>,
    /// How long a version stays valid after its time without a newer one.
    #[serde(default)]
    pub ttl: Option<String>,
    /// `event_time` (the default) or `processing_time`.
    #[serde(default)]
    pub as_of: Option<String>,
}

/// `as:` of a join.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJoinAs {
    #[serde(default)]
    pub left: Option<String>,
    #[serde(default)]
    pub right: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawWindow {
    Tumbling { size: String },
    Sliding { size: String, slide: String },
    Session { gap: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAggregate {
    #[serde(rename = "fn")]
    pub func: RawAggFn,
    #[serde(default)]
    pub field: Option<String>,
    #[serde(rename = "as")]
    pub alias: String,
    /// `collect` only: how many values it keeps.
    #[serde(default)]
    pub max_items: Option<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawAggFn {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    CountDistinct,
    First,
    Last,
    Collect,
    ApproxCountDistinct,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawSink {
    File {
        name: String,
        input: String,
        /// Output directory; part files are written into it.
        path: String,
        #[serde(default)]
        format: Option<RawFormat>,
        /// Roll to a new part file past this many bytes (default 128 MiB).
        #[serde(default)]
        max_file_bytes: Option<u64>,
    },
    Stdout {
        name: String,
        input: String,
    },
    Blackhole {
        name: String,
        input: String,
        /// Accept at most this many records per second (to simulate a slow
        /// sink and its backpressure in tests and demos).
        #[serde(default)]
        rate_limit: Option<f64>,
    },
    Kafka {
        name: String,
        input: String,
        brokers: String,
        topic: String,
        #[serde(default)]
        format: Option<RawFormat>,
        /// Message key: these fields of the record (one: its value; several: a JSON array).
        #[serde(default)]
        key: Option<Vec<String>>,
        #[serde(default)]
        delivery: Option<RawDelivery>,
        /// How long the brokers may be unreachable before the pipeline fails (default 30s).
        #[serde(default)]
        broker_timeout: Option<String>,
        /// What to do with a record the producer refuses (over `message.max.bytes`).
        #[serde(default)]
        on_error: Option<RawOnError>,
        #[serde(default)]
        dead_letter: Option<String>,
        /// librdkafka settings, passed through.
        #[serde(default)]
        properties: IndexMap<String, serde_yaml::Value>,
    },
    /// Parquet files in a directory or under `s3://bucket/prefix`.
    Parquet {
        name: String,
        input: String,
        /// Output directory, or `s3://bucket/prefix`.
        path: String,
        /// The columns, in file order.
        schema: Vec<RawParquetColumn>,
        #[serde(default)]
        compression: Option<RawParquetCompression>,
        /// Rows per row group (default 131072).
        #[serde(default)]
        row_group_rows: Option<u64>,
        /// Roll to a new file past about this many bytes (default 128 MiB).
        #[serde(default)]
        max_file_bytes: Option<u64>,
        /// Hive-style directories by column values and event time.
        #[serde(default)]
        partition: Option<RawParquetPartition>,
        /// What to do with a record that does not fit the schema.
        #[serde(default)]
        on_error: Option<RawOnError>,
        #[serde(default)]
        dead_letter: Option<String>,
        /// object_store's `aws_*` keys, as `checkpoint.storage_options`.
        #[serde(default)]
        storage_options: Option<std::collections::BTreeMap<String, String>>,
    },
    Postgres {
        name: String,
        input: String,
        /// `postgres://user@host:port/db`; the password comes from `password_env`.
        url: String,
        /// The environment variable holding the password (default `PGPASSWORD`).
        #[serde(default)]
        password_env: Option<String>,
        /// `table` or `schema.table`.
        table: String,
        #[serde(default)]
        mode: Option<RawPostgresMode>,
        /// Upsert: the columns of the conflict target (a unique index or primary key).
        #[serde(default)]
        key: Option<Vec<String>>,
        /// Column name → field path of the record, in column order.
        #[serde(default)]
        columns: IndexMap<String, String>,
        /// Rows per COPY (default 1000).
        #[serde(default)]
        batch_size: Option<u64>,
        #[serde(default)]
        delivery: Option<RawDelivery>,
        /// How long the server may be unreachable at start before the run fails (default 30s).
        #[serde(default)]
        server_timeout: Option<String>,
        /// What to do with a record that lacks a mapped field or has one of the wrong type.
        #[serde(default)]
        on_error: Option<RawOnError>,
        #[serde(default)]
        dead_letter: Option<String>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawParquetColumn {
    pub name: String,
    /// The field path it is read from (default: `name`).
    #[serde(default)]
    pub path: Option<String>,
    #[serde(rename = "type")]
    pub kind: RawParquetType,
    /// Whether the column may hold nulls (default true).
    #[serde(default)]
    pub nullable: Option<bool>,
    /// `timestamp`: ms, us or ns (default ms).
    #[serde(default)]
    pub unit: Option<RawTimeUnit>,
    /// `decimal`: digits in all, and after the point.
    #[serde(default)]
    pub precision: Option<u32>,
    #[serde(default)]
    pub scale: Option<u32>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawParquetType {
    Int32,
    Int64,
    Double,
    #[serde(alias = "string")]
    Utf8,
    #[serde(alias = "boolean")]
    Bool,
    Date,
    Timestamp,
    Decimal,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawTimeUnit {
    Ms,
    Us,
    Ns,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawParquetCompression {
    Zstd,
    Snappy,
    None,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawParquetPartition {
    /// Columns whose values name directories (`region=eu/`), in order.
    #[serde(default)]
    pub columns: Vec<String>,
    /// `day` (`dt=2026-12-03/`) or `hour` (`dt=2026-12-03/hr=07/`) of the event time.
    #[serde(default)]
    pub event_time: Option<RawTimeBucket>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawTimeBucket {
    Day,
    Hour,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawPostgresMode {
    Append,
    Upsert,
}

impl RawSource {
    /// The source's `name`, whatever its type.
    pub fn name(&self) -> &str {
        match self {
            RawSource::File { name, .. } | RawSource::Datagen { name, .. } | RawSource::Kafka { name, .. } => name,
        }
    }
}

impl RawOperator {
    /// The operator's `name`, whatever its type.
    pub fn name(&self) -> &str {
        match self {
            RawOperator::Dedup { name, .. }
            | RawOperator::Aggregate { name, .. }
            | RawOperator::Filter { name, .. }
            | RawOperator::Map { name, .. }
            | RawOperator::Join { name, .. } => name,
        }
    }

    /// The name of the node it reads (a join: its left input).
    pub fn input(&self) -> &str {
        match self {
            RawOperator::Dedup { input, .. }
            | RawOperator::Aggregate { input, .. }
            | RawOperator::Filter { input, .. }
            | RawOperator::Map { input, .. } => input,
            RawOperator::Join { left, .. } => left,
        }
    }

    /// The name of its second input (a join's right), if it has one.
    pub fn right(&self) -> Option<&str> {
        match self {
            RawOperator::Join { right, .. } => Some(right),
            _ => None,
        }
    }
}

impl RawSink {
    /// The sink's `name`, whatever its type.
    pub fn name(&self) -> &str {
        match self {
            RawSink::File { name, .. }
            | RawSink::Stdout { name, .. }
            | RawSink::Blackhole { name, .. }
            | RawSink::Kafka { name, .. }
            | RawSink::Parquet { name, .. }
            | RawSink::Postgres { name, .. } => name,
        }
    }

    /// The name of the node it reads.
    pub fn input(&self) -> &str {
        match self {
            RawSink::File { input, .. }
            | RawSink::Stdout { input, .. }
            | RawSink::Blackhole { input, .. }
            | RawSink::Kafka { input, .. }
            | RawSink::Parquet { input, .. }
            | RawSink::Postgres { input, .. } => input,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawState {
    #[serde(default)]
    pub backend: Option<RawBackend>,
    /// Checkpoints, savepoints and local state (default `state/<name>`).
    #[serde(default)]
    pub dir: Option<String>,
    /// RocksDB: incremental checkpoints (shared SST files); default true.
    #[serde(default)]
    pub incremental: Option<bool>,
    /// RocksDB tuning knobs.
    #[serde(default)]
    pub rocksdb: Option<RawRocksDb>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawBackend {
    Memory,
    #[serde(rename = "rocksdb")]
    RocksDb,
}

/// `state.rocksdb`: sizes are bytes, as a number or with a unit (`64MiB`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRocksDb {
    /// LRU block cache shared by the column families of one bundle's DB.
    #[serde(default)]
    pub block_cache: Option<serde_yaml::Value>,
    /// Memtable size per column family.
    #[serde(default)]
    pub write_buffer: Option<serde_yaml::Value>,
    /// Write-behind cache of point-table entries per subtask.
    #[serde(default)]
    pub write_cache: Option<serde_yaml::Value>,
    #[serde(default)]
    pub compression: Option<RawCompression>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawCompression {
    None,
    Lz4,
    Zstd,
}

/// Present = checkpointing on.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCheckpoint {
    #[serde(default)]
    pub interval: Option<String>,
    #[serde(default)]
    pub mode: Option<RawCheckpointMode>,
    #[serde(default)]
    pub alignment: Option<RawAlignment>,
    /// Aligned first; unaligned once alignment takes longer than this.
    #[serde(default)]
    pub aligned_timeout: Option<String>,
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub min_pause: Option<String>,
    #[serde(default)]
    pub retain: Option<u32>,
    #[serde(default)]
    pub tolerable_failures: Option<u32>,
    /// Where checkpoints are stored: `s3://bucket/prefix` (default: the
    /// state directory's `checkpoints/`).
    #[serde(default)]
    pub storage: Option<String>,
    /// Options of the object store (`aws_region`, `aws_endpoint`, ...).
    #[serde(default)]
    pub storage_options: Option<std::collections::BTreeMap<String, String>>,
    /// How long the storage's owner keeps it without renewing (`_owner`).
    #[serde(default)]
    pub storage_lease: Option<String>,
}

/// `restart:`: restart a failed run in the process, from its latest checkpoint.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRestart {
    /// Restarts allowed within `window` (default 3).
    #[serde(default)]
    pub attempts: Option<u32>,
    /// The wait before the first restart, doubled for each one after it
    /// within the window (default 1s).
    #[serde(default)]
    pub backoff: Option<String>,
    /// The longest wait (default 1m).
    #[serde(default)]
    pub max_backoff: Option<String>,
    /// Failures older than this no longer count (default 10m).
    #[serde(default)]
    pub window: Option<String>,
}

/// `savepoint:`: defaults of `weir savepoint trigger`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSavepoint {
    /// The directory savepoints are created in (each a new child) when
    /// `--target` is not given.
    #[serde(default)]
    pub dir: Option<String>,
    /// SIGTERM stops with a savepoint (into `dir`) instead of a final checkpoint.
    #[serde(default)]
    pub on_sigterm: bool,
    /// How many savepoints taken on SIGTERM are kept in their directory; the
    /// older ones are disposed after a new one completes (default 3).
    #[serde(default)]
    pub on_sigterm_keep: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawCheckpointMode {
    ExactlyOnce,
    AtLeastOnce,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawAlignment {
    Aligned,
    Unaligned,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBundles {
    /// Subtasks per bundle (default 1).
    pub size: u32,
}

/// Present = `/metrics`, `/healthz` and `/ready` are served over HTTP.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    /// `IP:PORT` to listen on, e.g. `127.0.0.1:9249`.
    pub address: String,
}

/// `cluster:`: run instance `index` of `instances` (the same pipeline file on
/// every machine; a StatefulSet passes its pod ordinal as `${WEIR_INSTANCE}`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    pub instances: u64,
    pub index: u64,
    /// Kafka brokers of the repartition topics (default: those of the first Kafka source).
    #[serde(default)]
    pub brokers: Option<String>,
}

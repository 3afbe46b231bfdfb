//! The settings of one source, operator or sink: defaults filled in,
//! durations parsed, limits checked, file paths expanded. Also what flows
//! out of each node (its fields and whether it carries event time), which
//! the graph walk in `compile` uses to check the node downstream.
//!
//! Each function reports into `Cx` and always returns a spec (with neutral
//! values where the input was wrong); `compile` discards the pipeline if any
//! error was reported, so those values never escape.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value;

use super::duration::parse_duration;
use super::limits::*;
use super::locate::{child, item, Locator, Seg};
use super::pipeline::*;
use super::raw::*;
use super::ConfigError;
use crate::types::Millis;

const DEFAULT_START_TIME: Millis = 1_704_067_200_000; // 2024-01-01T00:00:00Z
const DEFAULT_INTERVAL: Millis = 1;
const DEFAULT_EMIT_INTERVAL: Duration = Duration::from_secs(1);
const DEFAULT_MAX_FILE_BYTES: u64 = 128 * 1024 * 1024;
const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
const DEFAULT_CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_RETAIN: u32 = 3;
const DEFAULT_BROKER_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_TOLERABLE_FAILURES: u32 = 3;
const DEFAULT_BLOCK_CACHE: u64 = 256 << 20;
const DEFAULT_WRITE_BUFFER: u64 = 64 << 20;
const DEFAULT_WRITE_CACHE: u64 = 64 << 20;

/// Where errors go while compiling.
pub(crate) struct Cx<'a> {
    pub loc: &'a Locator<'a>,
    pub errors: Vec<ConfigError>,
}

impl Cx<'_> {
    pub fn err(&mut self, path: &[Seg], message: impl Into<String>) {
        self.errors.push(self.loc.at(path, message));
    }

    pub fn err_key(&mut self, path: &[Seg], message: impl Into<String>) {
        self.errors.push(self.loc.at_key(path, message));
    }

    fn duration(&mut self, at: &[Seg], text: &str) -> Option<Duration> {
        parse_duration(text).map_err(|e| self.err(at, e)).ok()
    }

    /// A duration at `base.key` within `range`, reported with the range
    /// when it is outside.
    pub(super) fn duration_in(&mut self, base: &[Seg], key: &str, text: &str, range: DurationRange) -> Option<Duration> {
        let at = child(base, key);
        let d = self.duration(&at, text)?;
        if range.whole_ms && d.subsec_nanos() % 1_000_000 != 0 {
            self.err(&at, format!("`{key}` must be a whole number of milliseconds (the unit of event time), got `{text}`"));
            return None;
        }
        if d < range.min || d > range.max {
            self.err(&at, format!("`{key}` must be between {} and {}, got `{text}`", show_duration(range.min), show_duration(range.max)));
            return None;
        }
        Some(d)
    }

    /// A span of event time, in whole milliseconds.
    fn millis(&mut self, base: &[Seg], key: &str, text: &str, range: DurationRange) -> Option<Millis> {
        // Within the range, so at most 100 years of milliseconds: fits.
        self.duration_in(base, key, text, range).map(|d| Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX))
    }

    /// A positive byte size within `min..=max` (a YAML number or a string with a unit).
    fn bytes(&mut self, at: &[Seg], key: &str, v: &Value, (min, max): (u64, u64)) -> Option<u64> {
        let parsed = match v {
            Value::Number(n) => n.as_u64().ok_or_else(|| format!("`{key}` must be a positive whole number of bytes, got {n}")),
            Value::String(t) => parse_bytes(t),
            _ => Err(format!("`{key}` must be a size in bytes, e.g. `64MiB`")),
        };
        match parsed {
            Ok(n) if (min..=max).contains(&n) => Some(n),
            Ok(n) => {
                self.err(at, format!("`{key}` must be between {} and {}, got {n} bytes", show_bytes(min), show_bytes(max)));
                None
            }
            Err(e) => {
                self.err(at, e);
                None
            }
        }
    }

    fn rate_limit(&mut self, base: &[Seg], rate: Option<f64>) -> Option<f64> {
        let r = rate?;
        if !(MIN_RATE..=MAX_RATE).contains(&r) {
            self.err(
                &child(base, "rate_limit"),
                format!("`rate_limit` must be between {MIN_RATE} and {MAX_RATE:e} records per second, got {}", show_rate(r)),
            );
            return None;
        }
        Some(r)
    }

    pub(super) fn batch_size(&mut self, base: &[Seg], n: Option<u64>) -> Option<usize> {
        let n = n?;
        self.count(&child(base, "batch_size"), "batch_size", n, BATCH_SIZE).then_some(n as usize)
    }

    /// A count at `at` within `min..=max`.
    pub(super) fn count(&mut self, at: &[Seg], key: &str, n: u64, (min, max): (u64, u64)) -> bool {
        let ok = (min..=max).contains(&n);
        if !ok {
            self.err(at, format!("`{key}` must be between {min} and {max}, got {n}"));
        }
        ok
    }

    pub(crate) fn not_empty(&mut self, base: &[Seg], key: &str, text: &str, expected: &str) {
        if text.trim().is_empty() {
            self.err(&child(base, key), format!("`{key}` is empty: expected {expected}"));
        }
    }
}

pub(crate) fn state(cx: &mut Cx, raw: &RawPipeline) -> StateSpec {
    let dir = raw.state.as_ref().and_then(|s| s.dir.clone());
    let dir = PathBuf::from(dir.unwrap_or_else(|| format!("state/{}", raw.name)));
    let Some(s) = &raw.state else { return StateSpec { dir, backend: Backend::Memory } };
    let at = [Seg::Key("state".into())];
    let backend = match s.backend.unwrap_or(RawBackend::Memory) {
        RawBackend::Memory => {
            for (key, set) in [("incremental", s.incremental.is_some()), ("rocksdb", s.rocksdb.is_some())] {
                if set {
                    cx.err_key(&child(&at, key), format!("`{key}` applies to `backend: rocksdb` only"));
                }
            }
            Backend::Memory
        }
        RawBackend::RocksDb => {
            let r = s.rocksdb.as_ref();
            let r_at = child(&at, "rocksdb");
            let mut size = |key: &str, v: Option<&Value>, default: u64, range: (u64, u64)| match v {
                Some(v) => cx.bytes(&child(&r_at, key), key, v, range).unwrap_or(default),
                None => default,
            };
            let block_cache = size("block_cache", r.and_then(|r| r.block_cache.as_ref()), DEFAULT_BLOCK_CACHE, BLOCK_CACHE);
            let write_buffer = size("write_buffer", r.and_then(|r| r.write_buffer.as_ref()), DEFAULT_WRITE_BUFFER, WRITE_BUFFER);
            let write_cache = size("write_cache", r.and_then(|r| r.write_cache.as_ref()), DEFAULT_WRITE_CACHE, WRITE_CACHE);
            let compression = match r.and_then(|r| r.compression).unwrap_or(RawCompression::Lz4) {
                RawCompression::None => Compression::None,
                RawCompression::Lz4 => Compression::Lz4,
                RawCompression::Zstd => Compression::Zstd,
            };
            Backend::RocksDb(RocksDbSpec {
                incremental: s.incremental.unwrap_or(true),
                block_cache,
                write_buffer,
                write_cache,
                compression,
            })
        }
    };
    StateSpec { dir, backend }
}

/// Parse a byte size: an integer, or a number with a unit (`512KiB`, `64MiB`, `1GiB`, `10MB`).
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("`{text}` is not a size: expected bytes, e.g. `67108864` or `64MiB`"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        "TB" => 1_000_000_000_000,
        "TiB" => 1 << 40,
        other => return Err(format!("unknown size unit `{other}` in `{text}`: expected B, KB, KiB, MB, MiB, GB, GiB, TB or TiB")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("`{text}` is too large"))
}

pub(crate) fn checkpoint(cx: &mut Cx, raw: &RawCheckpoint) -> Option<CheckpointSpec> {
    let at = [Seg::Key("checkpoint".into())];
    let mut d = |key: &str, v: &Option<String>, default: Duration, range: DurationRange| match v {
        Some(t) => cx.duration_in(&at, key, t, range),
        None => Some(default),
    };
    let interval = d("interval", &raw.interval, DEFAULT_CHECKPOINT_INTERVAL, PROCESSING);
    let timeout = d("timeout", &raw.timeout, DEFAULT_CHECKPOINT_TIMEOUT, PROCESSING);
    let min_pause = d("min_pause", &raw.min_pause, Duration::ZERO, PAUSE);
    let lease = d("storage_lease", &raw.storage_lease, crate::checkpoint::lease::DEFAULT_LEASE, LEASE);
    let aligned_timeout = raw.aligned_timeout.as_ref().and_then(|t| cx.duration_in(&at, "aligned_timeout", t, PROCESSING));
    let retain = raw.retain.unwrap_or(DEFAULT_RETAIN);
    let retain = match std::num::NonZeroUsize::new(retain as usize) {
        Some(r) if cx.count(&child(&at, "retain"), "retain", retain.into(), RETAIN) => Some(r),
        Some(_) => None,
        None => {
            cx.err(&child(&at, "retain"), "`retain` must be at least 1: the newest checkpoint is always kept");
            None
        }
    };
    let tolerable_failures = raw.tolerable_failures.unwrap_or(DEFAULT_TOLERABLE_FAILURES);
    let failures_ok = cx.count(&child(&at, "tolerable_failures"), "tolerable_failures", tolerable_failures.into(), TOLERABLE_FAILURES);
    let alignment = match (raw.mode.unwrap_or(RawCheckpointMode::ExactlyOnce), raw.alignment, aligned_timeout) {
        (RawCheckpointMode::AtLeastOnce, None, None) => Alignment::AtLeastOnce,
        (RawCheckpointMode::AtLeastOnce, _, _) => {
            let key = if raw.alignment.is_some() { "alignment" } else { "aligned_timeout" };
            cx.err(&child(&at, key), format!("`{key}` applies to `mode: exactly_once` only; `at_least_once` never aligns"));
            return None;
        }
        (_, Some(RawAlignment::Unaligned), Some(_)) => {
            cx.err(
                &child(&at, "aligned_timeout"),
                "`aligned_timeout` needs `alignment: aligned` (it switches an aligned checkpoint to unaligned)",
            );
            return None;
        }
        (_, Some(RawAlignment::Unaligned), None) => Alignment::Unaligned,
        (_, _, Some(t)) => Alignment::AlignedTimeout(t),
        (_, _, None) => Alignment::Aligned,
    };
    let storage = match &raw.storage {
        None => {
            for (key, set) in [("storage_options", raw.storage_options.is_some()), ("storage_lease", raw.storage_lease.is_some())] {
                if set {
                    cx.err(&child(&at, key), format!("`{key}` needs `storage: s3://BUCKET/PREFIX`"));
                    return None;
                }
            }
            None
        }
        Some(url) => match crate::checkpoint::remote::parse_url(url) {
            Ok(_) => Some(RemoteStorage {
                url: url.trim_end_matches('/').to_string(),
                options: raw.storage_options.clone().unwrap_or_default().into_iter().collect(),
                lease: lease?,
            }),
            Err(e) => {
                cx.err(&child(&at, "storage"), format!("{e}; without `storage` checkpoints stay in `state.dir`"));
                return None;
            }
        },
    };
    Some(CheckpointSpec {
        storage,
        interval: interval?,
        alignment,
        timeout: timeout?,
        min_pause: min_pause?,
        retain: retain?,
        tolerable_failures: failures_ok.then_some(tolerable_failures)?,
    })
}

/// `savepoint.dir`, which only a checkpointed pipeline may have.
/// `savepoint.on_sigterm_keep`, at least 1 (the newest is never disposed).
pub(crate) fn on_sigterm_keep(cx: &mut Cx, raw: &RawPipeline) -> usize {
    match raw.savepoint.as_ref().and_then(|s| s.on_sigterm_keep) {
        None => DEFAULT_ON_SIGTERM_KEEP,
        Some(0) => {
            let at = [Seg::Key("savepoint".into()), Seg::Key("on_sigterm_keep".into())];
            cx.err(&at, "`savepoint.on_sigterm_keep` must be at least 1: the savepoint just taken is always kept");
            DEFAULT_ON_SIGTERM_KEEP
        }
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    }
}

/// `restart:`; it needs checkpoints (a restart without them would read the
/// input again and write its output twice).
pub(crate) fn restart(cx: &mut Cx, raw: &RawPipeline) -> Option<RestartPolicy> {
    let r = raw.restart.as_ref()?;
    let at = [Seg::Key("restart".into())];
    if raw.checkpoint.is_none() {
        cx.err_key(&at, "`restart` needs a `checkpoint:` section: a run restarts from its latest checkpoint (without one it would read its input again and write its output twice)");
        return None;
    }
    let attempts = r.attempts.unwrap_or(DEFAULT_RESTART_ATTEMPTS);
    if !cx.count(&child(&at, "attempts"), "attempts", u64::from(attempts), (1, 1_000_000)) {
        return None;
    }
    let range = DurationRange { min: Duration::ZERO, max: Duration::from_secs(24 * 3600), whole_ms: false };
    let mut d = |key: &str, text: Option<&str>, default: Duration| match text {
        Some(t) => cx.duration_in(&at, key, t, range),
        None => Some(default),
    };
    let backoff = d("backoff", r.backoff.as_deref(), Duration::from_secs(1))?;
    let max_backoff = d("max_backoff", r.max_backoff.as_deref(), Duration::from_secs(60))?;
    let window = d("window", r.window.as_deref(), Duration::from_secs(600))?;
    if max_backoff < backoff {
        cx.err(&child(&at, "max_backoff"), "`max_backoff` must not be shorter than `backoff`");
        return None;
    }
    Some(RestartPolicy { attempts, backoff, max_backoff, window })
}

const DEFAULT_RESTART_ATTEMPTS: u32 = 3;

/// Savepoints taken on SIGTERM kept by default: the last rollouts' worth.
pub const DEFAULT_ON_SIGTERM_KEEP: usize = 3;

pub(crate) fn savepoint_dir(cx: &mut Cx, raw: &RawPipeline) -> Option<PathBuf> {
    let s = raw.savepoint.as_ref()?;
    let at = [Seg::Key("savepoint".into())];
    if raw.checkpoint.is_none() {
        cx.err_key(&at, "`savepoint` needs a `checkpoint:` section: only checkpointed pipelines take savepoints");
        return None;
    }
    match s.dir.as_deref() {
        Some("") => {
            cx.err(&child(&at, "dir"), "`savepoint.dir` is empty: expected the directory savepoints are created in");
            None
        }
        dir => dir.map(PathBuf::from),
    }
}

/// `metrics.address`: an IP address and port (a host name would need a
/// lookup at start; port 0 picks a free port).
pub(crate) fn metrics(cx: &mut Cx, raw: &RawMetrics) -> Option<MetricsSpec> {
    let at = [Seg::Key("metrics".into()), Seg::Key("address".into())];
    match parse_metrics_address(&raw.address) {
        Ok(address) => Some(MetricsSpec { address }),
        Err(e) => {
            cx.err(&at, e);
            None
        }
    }
}

/// `IP:PORT` (`[::1]:9249` for IPv6), with the message a user sees otherwise.
pub fn parse_metrics_address(text: &str) -> Result<std::net::SocketAddr, String> {
    text.trim().parse().map_err(|_| format!("`address` must be IP:PORT, e.g. `127.0.0.1:9249` or `[::1]:9249`, got `{text}`"))
}

/// `cluster.instances` and `cluster.index`: 0 <= index < instances.
pub(crate) fn cluster(cx: &mut Cx, raw: &RawPipeline) -> ClusterSpec {
    let Some(c) = &raw.cluster else { return ClusterSpec::default() };
    let at = [Seg::Key("cluster".into())];
    let mut ok = true;
    if c.instances == 0 || c.instances > MAX_INSTANCES {
        cx.err(&child(&at, "instances"), format!("`cluster.instances` must be between 1 and {MAX_INSTANCES}, got {}", c.instances));
        ok = false;
    } else if c.index >= c.instances {
        let n = c.instances;
        cx.err(
            &child(&at, "index"),
            format!("`cluster.index` must be below `cluster.instances` ({n}): expected 0 <= index < {n}, got {}", c.index),
        );
        ok = false;
    }
    if c.brokers.as_deref().is_some_and(|b| b.trim().is_empty()) {
        cx.err(&child(&at, "brokers"), "`cluster.brokers` is empty: expected host:port[,host:port...]");
    }
    if !ok {
        return ClusterSpec::default();
    }
    ClusterSpec { index: c.index as u16, instances: c.instances as u16, brokers: c.brokers.clone(), identity: String::new(), generation: 0 }
}

/// Instances of one cluster: at most this many (each is a process with its
/// own checkpoints; the key-group space bounds it further).
pub const MAX_INSTANCES: u64 = 1024;

pub(crate) fn bundle_size(cx: &mut Cx, raw: &RawPipeline, parallelism: u16) -> u16 {
    let Some(b) = &raw.bundles else { return 1 };
    let at = [Seg::Key("bundles".into()), Seg::Key("size".into())];
    if b.size == 0 {
        cx.err(&at, "`bundles.size` must be at least 1");
        return 1;
    }
    if !cx.count(&at, "bundles.size", b.size.into(), BUNDLE_SIZE) {
        return 1;
    }
    // A bundle larger than the parallelism is one bundle of everything.
    b.size.min(parallelism.max(1) as u32) as u16
}

pub(crate) fn source(cx: &mut Cx, at: &[Seg], raw: &RawSource) -> SourceSpec {
    match raw {
        RawSource::File { path, format: _, event_time, rate_limit, batch_size, on_error, dead_letter, .. } => {
            no_message_timestamp(cx, at, event_time.as_ref());
            SourceSpec {
                kind: SourceKind::File { files: input_files(cx, &child(at, "path"), path) },
                event_time: event_time.as_ref().map(|e| event_time_spec(cx, &child(at, "event_time"), e)),
                rate_limit: cx.rate_limit(at, *rate_limit),
                batch_size: cx.batch_size(at, *batch_size),
                on_error: on_error_spec(cx, at, *on_error, dead_letter.as_deref()),
            }
        }
        RawSource::Kafka {
            brokers,
            topics,
            topic_pattern,
            format: _,
            start,
            on_offset_out_of_range,
            group_id,
            commit_offsets,
            key_field,
            bounded,
            broker_timeout,
            event_time,
            rate_limit,
            batch_size,
            on_error,
            dead_letter,
            properties,
            ..
        } => {
            let broker_timeout =
                broker_timeout.as_ref().and_then(|t| cx.duration_in(at, "broker_timeout", t, PROCESSING)).unwrap_or(DEFAULT_BROKER_TIMEOUT);
            cx.not_empty(at, "brokers", brokers, "bootstrap servers such as `127.0.0.1:9092`");
            let topics = kafka_topics(cx, at, topics.as_deref(), topic_pattern.as_deref());
            let (start, commit_offsets) = kafka_start(cx, at, *start, group_id.is_some(), commit_offsets.unwrap_or(false));
            let reserved = ["enable.auto.commit", "bootstrap.servers", "auto.offset.reset"];
            let properties = kafka_properties(cx, &child(at, "properties"), properties, &reserved);
            SourceSpec {
                kind: SourceKind::Kafka(KafkaSourceSpec {
                    brokers: brokers.clone(),
                    topics,
                    start,
                    on_offset_out_of_range: match on_offset_out_of_range.unwrap_or(RawOffsetOutOfRange::Fail) {
                        RawOffsetOutOfRange::Fail => OffsetOutOfRange::Fail,
                        RawOffsetOutOfRange::Earliest => OffsetOutOfRange::Earliest,
                        RawOffsetOutOfRange::Latest => OffsetOutOfRange::Latest,
                    },
                    group_id: group_id.clone(),
                    commit_offsets,
                    key_field: key_field.clone(),
                    message_timestamp: event_time.as_ref().and_then(|e| e.message_timestamp).unwrap_or(false),
                    bounded: bounded.unwrap_or(false),
                    broker_timeout,
                    properties,
                    instance: (0, 1),
                    repartition: None,
                }),
                event_time: event_time.as_ref().map(|e| event_time_spec(cx, &child(at, "event_time"), e)),
                rate_limit: cx.rate_limit(at, *rate_limit),
                batch_size: cx.batch_size(at, *batch_size),
                on_error: on_error_spec(cx, at, *on_error, dead_letter.as_deref()),
            }
        }
        RawSource::Datagen { seed, rows, rate_limit, batch_size, start_time, interval, fields, event_time, .. } => {
            if let Some(n) = rows {
                cx.count(&child(at, "rows"), "rows", *n, ROWS);
            }
            let gen = DatagenSpec {
                seed: seed.unwrap_or(0),
                rows: *rows,
                start_time: start_time_of(cx, &child(at, "start_time"), start_time.as_ref()),
                interval_ms: interval.as_ref().and_then(|i| cx.millis(at, "interval", i, EVENT_OFFSET)).unwrap_or(DEFAULT_INTERVAL),
                fields: gen_fields(cx, &child(at, "fields"), fields),
            };
            no_message_timestamp(cx, at, event_time.as_ref());
            if let Some(e) = event_time {
                check_gen_event_time(cx, &child(at, "event_time"), e, fields);
            }
            SourceSpec {
                kind: SourceKind::Datagen(gen),
                event_time: event_time.as_ref().map(|e| event_time_spec(cx, &child(at, "event_time"), e)),
                rate_limit: cx.rate_limit(at, *rate_limit),
                batch_size: cx.batch_size(at, *batch_size),
                on_error: OnError::Fail,
            }
        }
    }
}

/// `topics` or `topic_pattern`, exactly one of them.
fn kafka_topics(cx: &mut Cx, at: &[Seg], topics: Option<&[String]>, topic_pattern: Option<&str>) -> KafkaTopics {
    match (topics, topic_pattern) {
        (Some(t), None) => {
            if t.is_empty() || t.iter().any(|t| t.trim().is_empty()) {
                cx.err(&child(at, "topics"), "`topics` must list at least one non-empty topic name");
            }
            KafkaTopics::Names(t.to_vec())
        }
        (None, Some(p)) => {
            if let Err(e) = regex::Regex::new(p) {
                cx.err(&child(at, "topic_pattern"), format!("invalid `topic_pattern`: {e}"));
            }
            KafkaTopics::Pattern(p.to_string())
        }
        (Some(_), Some(_)) => {
            cx.err_key(&child(at, "topic_pattern"), "`topics` and `topic_pattern` exclude each other: expected one of them");
            KafkaTopics::Names(Vec::new())
        }
        (None, None) => {
            cx.err(at, "a kafka source needs `topics: [NAME, ...]` or `topic_pattern: REGEX`");
            KafkaTopics::Names(Vec::new())
        }
    }
}

/// Where a Kafka source starts, and whether it commits offsets: both
/// need a consumer group.
fn kafka_start(cx: &mut Cx, at: &[Seg], start: Option<RawKafkaStart>, has_group: bool, commit_offsets: bool) -> (KafkaStart, bool) {
    let start = match start.unwrap_or(RawKafkaStart::Earliest) {
        RawKafkaStart::Earliest => KafkaStart::Earliest,
        RawKafkaStart::Latest => KafkaStart::Latest,
        RawKafkaStart::GroupOffsets => KafkaStart::GroupOffsets,
    };
    if !has_group && (start == KafkaStart::GroupOffsets || commit_offsets) {
        let why = if commit_offsets { "`commit_offsets: true`" } else { "`start: group_offsets`" };
        cx.err(at, format!("{why} needs `group_id`: the consumer group to read and commit offsets"));
    }
    (start, commit_offsets)
}

fn no_message_timestamp(cx: &mut Cx, at: &[Seg], e: Option<&RawEventTime>) {
    if e.and_then(|e| e.message_timestamp).is_some() {
        cx.err_key(
            &child(&child(at, "event_time"), "message_timestamp"),
            "`message_timestamp` is only for kafka sources: expected `field`",
        );
    }
}

/// librdkafka properties as strings; `reserved` ones are set by weir.
fn kafka_properties(cx: &mut Cx, at: &[Seg], raw: &indexmap::IndexMap<String, Value>, reserved: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (k, v) in raw {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                cx.err(&child(at, k), format!("property `{k}` must be a string, number or boolean"));
                continue;
            }
        };
        if reserved.contains(&k.as_str()) {
            cx.err_key(&child(at, k), format!("property `{k}` is set by weir and cannot be overridden"));
            continue;
        }
        out.push((k.clone(), text));
    }
    out
}

/// A file, a directory's visible regular files, or a glob's matches; sorted.
fn input_files(cx: &mut Cx, at: &[Seg], pattern: &str) -> Vec<PathBuf> {
    if pattern.trim().is_empty() {
        cx.err(at, "`path` is empty: expected a file, a directory or a glob pattern such as `data/*.jsonl`");
        return Vec::new();
    }
    let path = Path::new(pattern);
    let mut files = if path.is_file() {
        vec![path.to_path_buf()]
    } else if path.is_dir() {
        match std::fs::read_dir(path) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
                .collect(),
            Err(e) => {
                cx.err(at, format!("cannot read directory `{pattern}`: {e}"));
                return Vec::new();
            }
        }
    } else {
        let options = glob::MatchOptions { require_literal_leading_dot: true, ..Default::default() };
        match glob::glob_with(pattern, options) {
            Ok(paths) => paths.filter_map(Result::ok).filter(|p| p.is_file()).collect(),
            Err(e) => {
                cx.err(at, format!("invalid glob pattern `{pattern}`: {} at character {}", e.msg, e.pos + 1));
                return Vec::new();
            }
        }
    };
    if files.is_empty() {
        cx.err(
            at,
            format!("no input file matches `{pattern}`: expected an existing file, a directory or a glob pattern such as `data/*.jsonl`"),
        );
    }
    files.sort();
    files
}

fn event_time_spec(cx: &mut Cx, at: &[Seg], raw: &RawEventTime) -> EventTimeSpec {
    let field = match (&raw.field, raw.message_timestamp) {
        (Some(f), None | Some(false)) => {
            cx.not_empty(at, "field", f, "the name of the field holding the event time");
            if f.trim().is_empty() {
                f.clone()
            } else {
                field_path(cx, &child(at, "field"), f)
            }
        }
        (None, Some(true)) => String::new(),
        (Some(_), Some(true)) => {
            cx.err_key(&child(at, "message_timestamp"), "`message_timestamp: true` and `field` exclude each other: expected one of them");
            String::new()
        }
        (None, _) => {
            cx.err(at, "`event_time` needs `field` (the field holding the event time) or, for Kafka, `message_timestamp: true`");
            String::new()
        }
    };
    let max_out_of_orderness = match &raw.max_out_of_orderness {
        Some(d) => event_span(cx, at, "max_out_of_orderness", d, false).unwrap_or_default(),
        None => Duration::ZERO,
    };
    let idle_timeout = raw.idle_timeout.as_ref().and_then(|d| cx.duration_in(at, "idle_timeout", d, PROCESSING));
    EventTimeSpec { field, max_out_of_orderness, idle_timeout }
}

pub(super) fn on_error_spec(cx: &mut Cx, at: &[Seg], on_error: Option<RawOnError>, dead_letter: Option<&str>) -> OnError {
    match (on_error.unwrap_or(RawOnError::Fail), dead_letter) {
        (RawOnError::DeadLetter, Some(path)) => {
            cx.not_empty(at, "dead_letter", path, "the file bad records are written to");
            OnError::DeadLetter(PathBuf::from(path))
        }
        (RawOnError::DeadLetter, None) => {
            cx.err(&child(at, "on_error"), "`on_error: dead_letter` needs `dead_letter: PATH` (the file bad records are written to)");
            OnError::Fail
        }
        (other, Some(_)) => {
            let was = if other == RawOnError::Skip { "skip" } else { "fail" };
            cx.err_key(
                &child(at, "dead_letter"),
                format!("`dead_letter` is only used with `on_error: dead_letter`, but `on_error` is `{was}`"),
            );
            OnError::Fail
        }
        (RawOnError::Fail, None) => OnError::Fail,
        (RawOnError::Skip, None) => OnError::Skip,
    }
}

fn start_time_of(cx: &mut Cx, at: &[Seg], raw: Option<&Value>) -> Millis {
    const EXPECTED: &str = "expected an RFC 3339 time such as `2024-01-01T00:00:00Z` or integer epoch milliseconds, in years 0000 to 9999";
    let parsed = match raw {
        None => return DEFAULT_START_TIME,
        Some(Value::String(s)) => crate::types::parse_rfc3339_ms(s).ok(),
        Some(Value::Number(n)) => n.as_i64().filter(|&t| crate::types::check_event_time(t).is_ok()),
        Some(_) => None,
    };
    let (min, max) = START_TIME_MS;
    match parsed {
        Some(t) if (min..=max).contains(&t) => t,
        Some(t) => {
            cx.err(at, format!("`start_time` ({t} epoch ms) must be between {min} and {max} (years 0000 to 9999)"));
            DEFAULT_START_TIME
        }
        None => {
            let shown = serde_yaml::to_string(raw.unwrap_or(&Value::Null)).unwrap_or_default();
            cx.err(at, format!("invalid `start_time` `{}`: {EXPECTED}", shown.trim()));
            DEFAULT_START_TIME
        }
    }
}

fn gen_fields(cx: &mut Cx, at: &[Seg], raw: &indexmap::IndexMap<String, RawGenField>) -> Vec<(String, GenField)> {
    if raw.is_empty() {
        cx.err(at, "`fields` is empty: expected at least one generated field, e.g. `user: {kind: key, cardinality: 100}`");
    }
    raw.iter().map(|(name, f)| (name.clone(), gen_field(cx, &child(at, name), f))).collect()
}

fn gen_field(cx: &mut Cx, at: &[Seg], raw: &RawGenField) -> GenField {
    match raw {
        RawGenField::Sequence => GenField::Sequence,
        RawGenField::Key { cardinality, prefix } => {
            if *cardinality == 0 {
                cx.err(&child(at, "cardinality"), "`cardinality` must be at least 1, got 0");
            }
            GenField::Key { cardinality: *cardinality, prefix: prefix.clone().unwrap_or_default() }
        }
        RawGenField::Int { min, max } => {
            if min > max {
                cx.err(&child(at, "min"), format!("`min` ({min}) is greater than `max` ({max}): expected min <= max"));
            }
            GenField::Int { min: *min, max: *max }
        }
        RawGenField::Float { min, max } => {
            // `max - min` scales the draw: it must be finite too.
            if !(min.is_finite() && max.is_finite() && min < max && (max - min).is_finite()) {
                cx.err(&child(at, "min"), format!("`min` ({min:?}) must be less than `max` ({max:?}), both finite and `max - min` finite"));
            }
            GenField::Float { min: *min, max: *max }
        }
        RawGenField::Timestamp { jitter } => {
            GenField::Timestamp { jitter_ms: jitter.as_ref().and_then(|j| cx.millis(at, "jitter", j, EVENT_OFFSET)).unwrap_or(0) }
        }
    }
}

fn check_gen_event_time(cx: &mut Cx, at: &[Seg], e: &RawEventTime, fields: &indexmap::IndexMap<String, RawGenField>) {
    let Some(field) = &e.field else { return };
    let at = child(at, "field");
    match fields.get(field) {
        Some(RawGenField::Timestamp { .. }) => {}
        Some(_) => cx.err(&at, format!("event-time field `{field}` must be a `kind: timestamp` field of this datagen")),
        None => {
            let known: Vec<&str> = fields.keys().map(String::as_str).collect();
            cx.err(&at, format!("event-time field `{field}` is not a field of this datagen (fields: {})", known.join(", ")));
        }
    }
}

pub(crate) fn operator(cx: &mut Cx, at: &[Seg], raw: &RawOperator) -> NodeKind {
    match raw {
        RawOperator::Dedup { key, ttl, .. } => NodeKind::Dedup(DedupSpec {
            key: key_list(cx, &child(at, "key"), key),
            ttl: ttl.as_ref().and_then(|t| event_span(cx, at, "ttl", t, true)),
        }),
        RawOperator::Aggregate { key, window, allowed_lateness, aggregates, emit_interval, dead_letter, .. } => {
            let key = key_list(cx, &child(at, "key"), key);
            // Judged on what was written, so a bad window size is not also
            // reported as "no window".
            let windowed = window.is_some();
            let window = window.as_ref().and_then(|w| window_spec(cx, &child(at, "window"), w));
            let only_windowed = |cx: &mut Cx, field: &str, why: &str| {
                cx.err_key(
                    &child(at, field),
                    format!("`{field}` {why}, which only windowed aggregates have: add a `window` or remove `{field}`"),
                );
            };
            let allowed_lateness = match allowed_lateness {
                Some(_) if !windowed => {
                    only_windowed(cx, "allowed_lateness", "concerns late records");
                    Duration::ZERO
                }
                Some(d) => event_span(cx, at, "allowed_lateness", d, false).unwrap_or_default(),
                None => Duration::ZERO,
            };
            if dead_letter.is_some() && !windowed {
                only_windowed(cx, "dead_letter", "receives late records");
            }
            let emit_interval = match emit_interval {
                Some(_) if windowed => {
                    cx.err_key(
                        &child(at, "emit_interval"),
                        "`emit_interval` is only for running aggregates (no `window`): a windowed aggregate emits when each window closes",
                    );
                    DEFAULT_EMIT_INTERVAL
                }
                Some(d) => cx.duration_in(at, "emit_interval", d, PROCESSING).unwrap_or(DEFAULT_EMIT_INTERVAL),
                None => DEFAULT_EMIT_INTERVAL,
            };
            let key_names = key_output_names(cx, &child(at, "key"), &key, windowed);
            let aggregates = aggregate_fns(cx, &child(at, "aggregates"), aggregates, &key_names, windowed);
            NodeKind::Aggregate(AggregateSpec {
                key,
                window,
                allowed_lateness,
                aggregates,
                emit_interval,
                dead_letter: dead_letter.as_ref().map(PathBuf::from),
            })
        }
        RawOperator::Filter { condition, on_error, dead_letter, .. } => NodeKind::Filter(FilterSpec {
            condition: expression(cx, &child(at, "where"), "where", condition),
            on_error: on_error_spec(cx, at, *on_error, dead_letter.as_deref()),
        }),
        RawOperator::Join { left, right, on, kind, interval, window, temporal, prefixes, dead_letter, .. } => {
            let raw = super::join::RawJoin {
                left,
                right,
                on,
                kind: *kind,
                interval: interval.as_ref(),
                window: window.as_ref(),
                temporal: temporal.as_ref(),
                prefixes: prefixes.as_ref(),
                dead_letter: dead_letter.as_deref(),
            };
            super::join::spec(cx, at, raw)
        }
        RawOperator::Map { set, drop, rename, on_error, dead_letter, .. } => {
            if set.is_empty() && drop.is_empty() && rename.is_empty() {
                cx.err(at, "a `map` needs at least one of `set`, `drop` and `rename`");
            }
            let rename_at = child(at, "rename");
            let rename = rename
                .iter()
                .map(|(new, old)| {
                    let new_path = key_path(cx, &child(&rename_at, new), true, new);
                    (new_path, key_path(cx, &child(&rename_at, new), false, old))
                })
                .collect();
            let set_at = child(at, "set");
            let set = set
                .iter()
                .map(|(path, e)| {
                    let here = child(&set_at, path);
                    (key_path(cx, &here, true, path), expression(cx, &here, "set", e))
                })
                .collect();
            let drop = drop.iter().enumerate().map(|(i, d)| key_path(cx, &item(&child(at, "drop"), i), false, d)).collect();
            NodeKind::Map(MapSpec { rename, set, drop, on_error: on_error_spec(cx, at, *on_error, dead_letter.as_deref()) })
        }
    }
}

/// A CEL expression at `at`, compiled; errors name the column inside it.
pub(crate) fn expression(cx: &mut Cx, at: &[Seg], what: &str, source: &str) -> crate::expr::Expression {
    match crate::expr::Expression::compile(source) {
        Ok(e) => e,
        Err(e) => {
            cx.err(at, format!("`{what}` expression `{}`: {e}", source.trim()));
            // Neutral; the pipeline is discarded.
            crate::expr::Expression::compile("true").expect("a literal compiles")
        }
    }
}

/// A map's field path (keys only: no `[n]`), canonical; `on_key`: the
/// path is the YAML key at `at` (else its value).
fn key_path(cx: &mut Cx, at: &[Seg], on_key: bool, text: &str) -> String {
    let report = |cx: &mut Cx, message: String| if on_key { cx.err_key(at, message) } else { cx.err(at, message) };
    match crate::format::path::FieldPath::parse(text) {
        Ok(p) if p.segments().iter().all(|s| matches!(s, crate::format::path::Segment::Key(_))) => p.text().to_string(),
        Ok(_) => {
            report(cx, format!("`{text}`: a map sets, renames and drops object members: expected a path of keys (no `[n]`)"));
            text.to_string()
        }
        Err(e) => {
            report(cx, format!("`{text}` is not a field path: {e}"));
            text.to_string()
        }
    }
}

/// A non-empty list of distinct, non-empty field paths, in their canonical text.
pub(crate) fn key_list(cx: &mut Cx, at: &[Seg], key: &[String]) -> Vec<String> {
    if key.is_empty() {
        cx.err(at, "`key` is empty: expected at least one field name, e.g. `key: [user]`");
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(key.len());
    for (i, k) in key.iter().enumerate() {
        if k.is_empty() {
            cx.err(&item(at, i), "empty field name in `key`");
            out.push(k.clone());
            continue;
        }
        let path = field_path(cx, &item(at, i), k);
        if !seen.insert(path.clone()) {
            cx.err(&item(at, i), format!("`{k}` appears twice in `key`: expected distinct fields"));
        }
        out.push(path);
    }
    out
}

/// The canonical text of the field path `text` at `at` (see
/// `crate::format::path`); `text` itself, reported, when it is not a path.
pub(crate) fn field_path(cx: &mut Cx, at: &[Seg], text: &str) -> String {
    match crate::format::path::canonical_text(text) {
        Ok(t) => t,
        Err(e) => {
            cx.err(at, format!("`{text}` is not a field path: {e}"));
            text.to_string()
        }
    }
}

pub(crate) fn window_spec(cx: &mut Cx, at: &[Seg], raw: &RawWindow) -> Option<WindowSpec> {
    Some(match raw {
        RawWindow::Tumbling { size } => WindowSpec::Tumbling { size: event_span(cx, at, "size", size, true)? },
        RawWindow::Sliding { size, slide } => {
            let (size_d, slide_d) = (event_span(cx, at, "size", size, true), event_span(cx, at, "slide", slide, true));
            let (size_d, slide_d) = (size_d?, slide_d?);
            if slide_d > size_d {
                cx.err(&child(at, "slide"), format!("`slide` ({slide}) is longer than `size` ({size}): expected slide <= size"));
            } else if size_d.as_millis() / slide_d.as_millis() > MAX_WINDOWS_PER_RECORD as u128 {
                cx.err(
                    &child(at, "slide"),
                    format!("`size` / `slide` ({size} / {slide}) puts each record in more than {MAX_WINDOWS_PER_RECORD} windows: expected size / slide <= {MAX_WINDOWS_PER_RECORD}"),
                );
            }
            WindowSpec::Sliding { size: size_d, slide: slide_d }
        }
        RawWindow::Session { gap } => WindowSpec::Session { gap: event_span(cx, at, "gap", gap, true)? },
    })
}

/// A span of event time (window size, slide, gap, lateness,
/// out-of-orderness): whole milliseconds, the unit of event time (`1500us`
/// would silently become 1ms), and at most the event-time range (years 0000
/// to 9999), so window and watermark arithmetic cannot overflow.
pub(crate) fn event_span(cx: &mut Cx, base: &[Seg], key: &str, text: &str, positive: bool) -> Option<Duration> {
    let at = child(base, key);
    let d = cx.duration(&at, text)?;
    let problem = if d.subsec_nanos() % 1_000_000 != 0 {
        "must be a whole number of milliseconds (the unit of event time)"
    } else if positive && d.is_zero() {
        "must be greater than 0"
    } else if d.as_millis() > crate::types::MAX_TIME_SPAN as u128 {
        "must be at most 10000 years (the range of event time)"
    } else {
        return Some(d);
    };
    cx.err(&at, format!("`{key}` {problem}, got `{text}`"));
    None
}

/// The member names of an aggregate's key fields in its output (see
/// `FieldPath::output_name`), in key order. Output fields are these, then
/// (windowed) `window_start` and `window_end`, then the aggregates: two
/// fields of one name would give an output object duplicate members, so a
/// clash is refused here, where the second is written.
fn key_output_names(cx: &mut Cx, at: &[Seg], key: &[String], windowed: bool) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(key.len());
    for (i, k) in key.iter().enumerate() {
        let name = crate::format::path::FieldPath::parse(k).map_or_else(|_| k.clone(), |p| p.output_name().to_string());
        if windowed && (name == WINDOW_START || name == WINDOW_END) {
            cx.err(
                &item(at, i),
                format!("key field `{k}` clashes with the window bound `{name}` that a windowed aggregate's output carries: expected another key field"),
            );
        } else if let Some(first) = names.iter().position(|n| *n == name).filter(|&j| key[j] != *k) {
            cx.err(
                &item(at, i),
                format!(
                    "key fields `{}` and `{k}` would both be the output field `{name}`: expected fields with distinct output names",
                    key[first]
                ),
            );
        }
        names.push(name);
    }
    names
}

/// `key_names`: the key fields' output names (`key_output_names`).
fn aggregate_fns(cx: &mut Cx, at: &[Seg], raw: &[RawAggregate], key_names: &[String], windowed: bool) -> Vec<AggregateFn> {
    if raw.is_empty() {
        cx.err(at, "`aggregates` is empty: expected at least one, e.g. `[{fn: count, as: n}]`");
    }
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for (i, a) in raw.iter().enumerate() {
        let here = item(at, i);
        if a.func != RawAggFn::Count && a.field.is_none() {
            cx.err(&here, format!("`fn: {}` needs a `field` to aggregate", fn_name(a.func)));
        }
        match (a.func, a.max_items) {
            (RawAggFn::Collect, None) => cx.err(
                &here,
                format!("`fn: collect` needs `max_items`, the most values it keeps (1 to {MAX_COLLECT_ITEMS}), e.g. `max_items: 100`"),
            ),
            (RawAggFn::Collect, Some(n)) if !(1..=MAX_COLLECT_ITEMS).contains(&n) => {
                cx.err(&child(&here, "max_items"), format!("`max_items: {n}` is out of range: expected 1 to {MAX_COLLECT_ITEMS}"))
            }
            (RawAggFn::Collect, Some(_)) | (_, None) => {}
            (f, Some(_)) => {
                cx.err_key(&child(&here, "max_items"), format!("`max_items` is only for `fn: collect`, not `fn: {}`", fn_name(f)))
            }
        }
        let alias_at = child(&here, "as");
        let alias = a.alias.as_str();
        if alias.is_empty() {
            cx.err(&alias_at, "`as` is empty: expected the output field name");
        } else if let Some((_, line)) = seen.iter().find(|(s, _)| *s == alias) {
            cx.err(&alias_at, format!("duplicate output name `as: {alias}` (first on line {line}): expected distinct names"));
        } else if key_names.iter().any(|k| k == alias) {
            cx.err(&alias_at, format!("`as: {alias}` clashes with the key field `{alias}`: expected a different output name"));
        } else if windowed && (alias == WINDOW_START || alias == WINDOW_END) {
            cx.err(&alias_at, format!("`as: {alias}` is reserved for the window bounds: expected another output name"));
        }
        seen.push((alias, cx.loc.line_of(&alias_at)));
    }
    raw.iter()
        .enumerate()
        .map(|(i, a)| {
            let field = a.field.as_ref().map(|f| field_path(cx, &child(&item(at, i), "field"), f));
            AggregateFn { func: agg_func(a.func, a.max_items), field, alias: a.alias.clone() }
        })
        .collect()
}

fn agg_func(f: RawAggFn, max_items: Option<u64>) -> AggFunc {
    match f {
        RawAggFn::CountDistinct => AggFunc::CountDistinct,
        RawAggFn::ApproxCountDistinct => AggFunc::ApproxCountDistinct,
        RawAggFn::First => AggFunc::First,
        RawAggFn::Last => AggFunc::Last,
        // Out of range is reported above; clamped only to build a spec that is never run.
        RawAggFn::Collect => AggFunc::Collect { max_items: max_items.unwrap_or(1).clamp(1, MAX_COLLECT_ITEMS) as u32 },
        RawAggFn::Count => AggFunc::Count,
        RawAggFn::Sum => AggFunc::Sum,
        RawAggFn::Min => AggFunc::Min,
        RawAggFn::Max => AggFunc::Max,
        RawAggFn::Avg => AggFunc::Avg,
    }
}

fn fn_name(f: RawAggFn) -> &'static str {
    match f {
        RawAggFn::Count => "count",
        RawAggFn::Sum => "sum",
        RawAggFn::Min => "min",
        RawAggFn::Max => "max",
        RawAggFn::Avg => "avg",
        RawAggFn::CountDistinct => "count_distinct",
        RawAggFn::ApproxCountDistinct => "approx_count_distinct",
        RawAggFn::First => "first",
        RawAggFn::Last => "last",
        RawAggFn::Collect => "collect",
    }
}

pub(crate) fn sink(cx: &mut Cx, at: &[Seg], raw: &RawSink) -> SinkSpec {
    match raw {
        RawSink::File { path, format: _, max_file_bytes, .. } => {
            cx.not_empty(at, "path", path, "the output directory");
            let max_file_bytes = max_file_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES);
            let (lo, hi) = FILE_BYTES;
            if !(lo..=hi).contains(&max_file_bytes) {
                let range = format!("{} and {}", show_bytes(lo), show_bytes(hi));
                cx.err(&child(at, "max_file_bytes"), format!("`max_file_bytes` must be between {range}, got {max_file_bytes}"));
            }
            SinkSpec::File { dir: PathBuf::from(path), max_file_bytes }
        }
        RawSink::Parquet {
            path,
            schema,
            compression,
            row_group_rows,
            max_file_bytes,
            partition,
            on_error,
            dead_letter,
            storage_options,
            ..
        } => {
            let max_file_bytes = max_file_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES);
            let (lo, hi) = FILE_BYTES;
            if !(lo..=hi).contains(&max_file_bytes) {
                let range = format!("{} and {}", show_bytes(lo), show_bytes(hi));
                cx.err(&child(at, "max_file_bytes"), format!("`max_file_bytes` must be between {range}, got {max_file_bytes}"));
            }
            let on_error = on_error_spec(cx, at, *on_error, dead_letter.as_deref());
            let raw = super::parquet::RawParquet {
                path,
                schema,
                compression: *compression,
                row_group_rows: *row_group_rows,
                max_file_bytes,
                partition: partition.as_ref(),
                on_error,
                storage_options: storage_options.as_ref(),
            };
            SinkSpec::Parquet(super::parquet::spec(cx, at, raw))
        }
        RawSink::Stdout { .. } => SinkSpec::Stdout,
        RawSink::Blackhole { rate_limit, .. } => SinkSpec::Blackhole { rate_limit: cx.rate_limit(at, *rate_limit) },
        RawSink::Kafka { brokers, topic, format: _, key, delivery, broker_timeout, properties, on_error, dead_letter, .. } => {
            let broker_timeout =
                broker_timeout.as_ref().and_then(|t| cx.duration_in(at, "broker_timeout", t, PROCESSING)).unwrap_or(DEFAULT_BROKER_TIMEOUT);
            cx.not_empty(at, "brokers", brokers, "bootstrap servers such as `127.0.0.1:9092`");
            cx.not_empty(at, "topic", topic, "the topic to write to");
            let key = match key {
                Some(k) => key_list(cx, &child(at, "key"), k),
                None => Vec::new(),
            };
            let reserved = ["bootstrap.servers", "transactional.id", "enable.idempotence"];
            let properties = kafka_properties(cx, &child(at, "properties"), properties, &reserved);
            let delivery = match delivery.unwrap_or(RawDelivery::ExactlyOnce) {
                RawDelivery::ExactlyOnce => Delivery::ExactlyOnce,
                RawDelivery::AtLeastOnce => Delivery::AtLeastOnce,
            };
            let on_error = on_error_spec(cx, at, *on_error, dead_letter.as_deref());
            SinkSpec::Kafka(KafkaSinkSpec {
                brokers: brokers.clone(),
                topic: topic.clone(),
                key,
                delivery,
                broker_timeout,
                properties,
                on_error,
                instance: None,
                repartition: None,
                generation: 0,
            })
        }
        RawSink::Postgres {
            url,
            password_env,
            table,
            mode,
            key,
            columns,
            batch_size,
            delivery,
            server_timeout,
            on_error,
            dead_letter,
            ..
        } => SinkSpec::Postgres(super::postgres::sink(
            cx,
            at,
            &super::postgres::RawPostgres {
                url,
                password_env: password_env.as_deref(),
                table,
                mode: *mode,
                key: key.as_deref(),
                columns,
                batch_size: *batch_size,
                delivery: *delivery,
                server_timeout: server_timeout.as_deref(),
                on_error: *on_error,
                dead_letter: dead_letter.as_deref(),
            },
        )),
    }
}

/// What a node emits, as far as downstream checks need to know.
#[derive(Debug, Clone)]
pub(crate) struct Flow {
    /// The field names, or None when any field may be present (sources).
    pub(crate) fields: Option<Vec<String>>,
    pub(crate) time: Time,
}

#[derive(Debug, Clone)]
pub(crate) enum Time {
    Event,
    /// No event time, and why (for the error message).
    Missing(String),
    /// Not known because of an earlier error: check nothing.
    Unknown,
}

impl Flow {
    pub fn unknown() -> Flow {
        Flow { fields: None, time: Time::Unknown }
    }
}

/// Check `kind` against what its input emits; return what it emits.
pub(crate) fn flow(cx: &mut Cx, at: &[Seg], name: &str, kind: &NodeKind, input: Option<(&str, &Flow)>) -> Flow {
    let unknown = Flow::unknown();
    let (input_name, upstream) = input.unwrap_or(("?", &unknown));
    match kind {
        NodeKind::Source(s) => Flow {
            fields: None,
            time: match s.event_time {
                Some(_) => Time::Event,
                None => Time::Missing(format!("source `{name}` has no `event_time`")),
            },
        },
        NodeKind::Dedup(d) => {
            check_fields(cx, &child(at, "key"), &d.key, input_name, upstream);
            upstream.clone()
        }
        NodeKind::Aggregate(a) => {
            check_fields(cx, &child(at, "key"), &a.key, input_name, upstream);
            for (i, f) in a.aggregates.iter().enumerate() {
                if let Some(field) = &f.field {
                    let field_at = child(&item(&child(at, "aggregates"), i), "field");
                    check_field(cx, &field_at, field, input_name, upstream);
                }
                if let (true, Time::Missing(why)) = (f.func.needs_event_time(), &upstream.time) {
                    // Arrival order differs between runs and parallelisms: only event time makes first/last one answer.
                    let name = if f.func == AggFunc::First { "first" } else { "last" };
                    cx.err(
                        &child(&item(&child(at, "aggregates"), i), "fn"),
                        format!("`fn: {name}` picks by event time, but {why}: give the source an `event_time`"),
                    );
                }
            }
            let time = match (&a.window, &upstream.time) {
                (Some(_), Time::Missing(why)) => {
                    cx.err(&child(at, "window"), format!("a `window` needs event time, but {why} (the input chain must reach a source with `event_time` only through dedups and windowed aggregates)"));
                    Time::Unknown
                }
                (Some(_), _) => Time::Event,
                (None, _) => Time::Missing(format!("`{name}` is a running aggregate (no `window`), which emits no event time")),
            };
            Flow { fields: Some(a.output_fields()), time }
        }
        NodeKind::Filter(f) => {
            check_variables(cx, &child(at, "where"), &f.condition, input_name, upstream);
            upstream.clone()
        }
        NodeKind::Map(m) => {
            for (path, e) in &m.set {
                check_variables(cx, &child(&child(at, "set"), path), e, input_name, upstream);
            }
            // Which fields a map's output has depends on the records: any may be present.
            Flow { fields: None, time: upstream.time.clone() }
        }
        NodeKind::Sink(SinkSpec::Kafka(k)) => {
            check_fields(cx, &child(at, "key"), &k.key, input_name, upstream);
            unknown
        }
        NodeKind::Sink(SinkSpec::Postgres(pg)) => {
            super::postgres::check_flow(cx, at, pg, input_name, upstream);
            unknown
        }
        // Two inputs: `compile::check_flow` calls `join::flow` instead.
        NodeKind::Join(_) => Flow { fields: None, time: Time::Event },
        NodeKind::Sink(_) => unknown,
    }
}

/// The fields an expression reads exist upstream, where that is known.
fn check_variables(cx: &mut Cx, at: &[Seg], e: &crate::expr::Expression, input: &str, upstream: &Flow) {
    for v in e.variables() {
        // The output names of an aggregate are canonical paths; a variable is a top-level key.
        check_field(cx, at, &crate::format::path::FieldPath::key(v).text().to_string(), input, upstream);
    }
}

pub(crate) fn check_fields(cx: &mut Cx, at: &[Seg], fields: &[String], input: &str, upstream: &Flow) {
    for (i, f) in fields.iter().enumerate() {
        check_field(cx, &item(at, i), f, input, upstream);
    }
}

fn check_field(cx: &mut Cx, at: &[Seg], field: &str, input: &str, upstream: &Flow) {
    if let Some(known) = &upstream.fields {
        if !known.iter().any(|k| k == field) {
            cx.err(at, format!("field `{field}` is not in the output of `{input}`, which has: {}", known.join(", ")));
        }
    }
}

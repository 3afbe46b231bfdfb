//! The allowed range of every number a pipeline file sets, by class.
//!
//! Validation refuses a value outside its range, naming the range, so no
//! user value can overflow the runtime's arithmetic later (an `Instant` plus
//! a century, milliseconds that wrap negative, a rate whose pacing interval
//! does not fit a `Duration`). docs/pipeline-reference.md lists the same
//! ranges ("Allowed ranges"); keep the two in step.

use std::time::Duration;

const DAY: u64 = 86_400;
/// humantime's year (365.25 days), so `100y` is exactly the maximum.
const YEAR: u64 = 31_557_600;

/// The range of one class of durations.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DurationRange {
    pub min: Duration,
    pub max: Duration,
    /// Event time counts in milliseconds: a fraction of one cannot be kept.
    pub whole_ms: bool,
}

/// Processing-time waits and timeouts (checkpoint interval, timeout and
/// aligned_timeout, idle_timeout, emit_interval, broker_timeout): 1ms..=7d.
pub(crate) const PROCESSING: DurationRange =
    DurationRange { min: Duration::from_millis(1), max: Duration::from_secs(7 * DAY), whole_ms: false };

/// `min_pause`: like `PROCESSING`, but 0 is allowed.
pub(crate) const PAUSE: DurationRange = DurationRange { min: Duration::ZERO, ..PROCESSING };
/// `checkpoint.storage_lease`: renewed every third of it, so not shorter than 300 ms.
pub(crate) const LEASE: DurationRange = DurationRange { min: Duration::from_millis(300), ..PROCESSING };

/// The base of `EVENT_OFFSET`: 1ms..=100y, whole milliseconds. (Window
/// size, slide and gap, ttl, lateness and out-of-orderness are checked
/// against the whole range of event time by `specs::event_span`.)
pub(crate) const EVENT_SPAN: DurationRange =
    DurationRange { min: Duration::from_millis(1), max: Duration::from_secs(100 * YEAR), whole_ms: true };

/// Datagen `interval` and `jitter`: 0..=100y, whole milliseconds.
pub(crate) const EVENT_OFFSET: DurationRange = DurationRange { min: Duration::ZERO, ..EVENT_SPAN };

/// Records per second (`rate_limit` of sources and of the blackhole sink).
pub(crate) const MIN_RATE: f64 = 0.001;
pub(crate) const MAX_RATE: f64 = 1e9;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

/// `max_file_bytes` of a file sink.
pub(crate) const FILE_BYTES: (u64, u64) = (1, TIB);
/// `state.rocksdb.block_cache`.
pub(crate) const BLOCK_CACHE: (u64, u64) = (1, TIB);
/// `state.rocksdb.write_buffer`: RocksDB's own bounds for a memtable.
pub(crate) const WRITE_BUFFER: (u64, u64) = (64 * KIB, 64 * GIB);
/// `state.rocksdb.write_cache`: 0 turns the cache off (every entry is
/// flushed as it is written); it lives in memory, so at most 1 TiB.
pub(crate) const WRITE_CACHE: (u64, u64) = (0, TIB);

/// `batch_size` of sources: records read per poll (1024 is the runtime's batch).
pub(crate) const BATCH_SIZE: (u64, u64) = (1, 1024);

/// `checkpoint.retain`.
pub(crate) const RETAIN: (u64, u64) = (1, 1000);
/// `checkpoint.tolerable_failures`.
pub(crate) const TOLERABLE_FAILURES: (u64, u64) = (0, 10_000);
/// `bundles.size`.
pub(crate) const BUNDLE_SIZE: (u64, u64) = (1, 32_768);
/// Datagen `rows`: row numbers are emitted as signed 64-bit sequence values.
pub(crate) const ROWS: (u64, u64) = (0, i64::MAX as u64);

/// Datagen `start_time`: years 0000 to 9999, what RFC 3339 can write.
pub(crate) const START_TIME_MS: (i64, i64) = (-62_167_219_200_000, 253_402_300_799_999);

/// At most this many sliding windows hold one record (`size / slide`): each
/// costs a state update per record.
pub const MAX_WINDOWS_PER_RECORD: i64 = 10_000;

/// A pipeline file larger than this is refused before it is parsed.
pub const MAX_PIPELINE_BYTES: u64 = 16 * MIB;

/// A duration as the docs write it: `1ms`, `7days`, `100years`.
pub(crate) fn show_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_string();
    }
    humantime::format_duration(d).to_string()
}

/// A rate as written: plain, or in exponent form when tiny or huge.
pub(crate) fn show_rate(r: f64) -> String {
    if r != 0.0 && r.is_finite() && !(MIN_RATE..MAX_RATE).contains(&r.abs()) {
        format!("{r:e}")
    } else {
        r.to_string()
    }
}

/// A byte size with the largest binary unit that divides it.
pub(crate) fn show_bytes(n: u64) -> String {
    for (unit, name) in [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
        if n >= unit && n % unit == 0 {
            return format!("{}{name}", n / unit);
        }
    }
    format!("{n}B")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_duration;

    #[test]
    fn bounds_read_as_the_docs_write_them() {
        assert_eq!(show_duration(PROCESSING.min), "1ms");
        assert_eq!(show_duration(PROCESSING.max), "7days");
        assert_eq!(show_duration(EVENT_SPAN.max), "100years");
        assert_eq!(show_duration(PAUSE.min), "0s");
        assert_eq!(parse_duration("100y"), Ok(EVENT_SPAN.max));
        assert_eq!(show_bytes(WRITE_BUFFER.0), "64KiB");
        assert_eq!(show_bytes(WRITE_BUFFER.1), "64GiB");
        assert_eq!(show_bytes(FILE_BYTES.1), "1TiB");
        assert_eq!(show_bytes(1), "1B");
    }

    /// The largest values of each class still fit the runtime's arithmetic:
    /// an Instant plus the longest wait, and epoch ms of the latest start
    /// time plus the longest span, plus the longest offset.
    #[test]
    fn the_largest_values_do_not_overflow_the_runtime() {
        assert!(std::time::Instant::now().checked_add(PROCESSING.max).is_some());
        let span = Millis::try_from(EVENT_SPAN.max.as_millis()).unwrap();
        assert!(START_TIME_MS.1.checked_add(span).and_then(|t| t.checked_add(span)).is_some());
        assert!(START_TIME_MS.0.checked_sub(span).is_some());
        assert!(Duration::try_from_secs_f64(1.0 / (MIN_RATE / 32_768.0)).is_ok());
    }

    use crate::types::Millis;
}

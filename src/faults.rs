//! Fault injection, compiled in and off unless `WEIR_FAULTS` is set.
//!
//! `WEIR_FAULTS` is a comma-separated list:
//! - `state_write_fail=P`: each snapshot file write fails with probability P
//!   (0..=1); the checkpoint aborts and a later one must succeed.
//! - `shared_copy_fail=P`: each copy of an SST into `checkpoints/shared/`
//!   (RocksDB incremental checkpoints) fails with probability P.
//! - `storage_fail=P`: each request to object storage (`checkpoint.storage:
//!   s3://...`) fails with probability P before it is sent, as a transient
//!   error: it is tried again with backoff, and a checkpoint whose upload
//!   still fails aborts.
//! - `crash=POINT` or `crash=POINT:N`: abort the process (like kill -9) the
//!   Nth time (default 1st) the protocol reaches POINT, one of
//!   `after_prepare` (a task wrote its snapshot, before voting),
//!   `after_manifest` (a bundle MANIFEST was written), `after_metadata`
//!   (`_metadata` was written, before sinks are told), `before_sink_commit`
//!   (a sink is about to publish committed files).
//! - `stall=OPERATOR:SUBTASK:DURATION`: that subtask sleeps DURATION once,
//!   at its first checkpoint barrier (a stalled subtask). Any node: a
//!   source, an operator or a sink, at the head of its chain or not (the
//!   whole task it runs in stalls).
//! - `barrier_delay=DURATION`: sources wait DURATION before emitting a barrier.
//! - `restore_stall=DURATION`: every task's restore of its state blocks its
//!   thread for DURATION first (a slow restore, e.g. a large RocksDB state).
//! - `fail=OPERATOR:SUBTASK:N`: that subtask of an operator or sink fails
//!   (an error, not a crash) at its Nth checkpoint barrier, once in the
//!   process: a restart in the same process (`restart:`) does not fail again.
//! - `end_stall=DURATION`: every task, once done, blocks its thread for
//!   DURATION before it ends (a client that hangs while closing).
//!
//! Tests use it through the environment; so can users reproducing a problem.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

#[derive(Debug, Default)]
pub struct Faults {
    state_write_fail: f64,
    shared_copy_fail: f64,
    storage_fail: f64,
    crash: Option<(String, u64)>,
    crash_seen: AtomicU64,
    stall: Option<(String, u16, Duration)>,
    stalled: AtomicBool,
    fail: Option<(String, u16, u64)>,
    fail_seen: AtomicU64,
    pub barrier_delay: Option<Duration>,
    pub restore_stall: Option<Duration>,
    pub end_stall: Option<Duration>,
    rng: AtomicU64,
}

pub const CRASH_POINTS: [&str; 4] = ["after_prepare", "after_manifest", "after_metadata", "before_sink_commit"];

impl Faults {
    pub fn parse(spec: &str) -> Result<Faults, String> {
        let mut f = Faults { rng: AtomicU64::new(0x853c_49e6_748f_ea9b), ..Faults::default() };
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item.split_once('=').ok_or_else(|| format!("`{item}`: expected KEY=VALUE"))?;
            let dur = |s: &str| humantime::parse_duration(s).map_err(|e| format!("`{item}`: {e}"));
            match key {
                "state_write_fail" => {
                    f.state_write_fail = value
                        .parse()
                        .ok()
                        .filter(|p| (0.0..=1.0).contains(p))
                        .ok_or_else(|| format!("`{item}`: expected a probability between 0 and 1"))?
                }
                "shared_copy_fail" => {
                    f.shared_copy_fail = value
                        .parse()
                        .ok()
                        .filter(|p| (0.0..=1.0).contains(p))
                        .ok_or_else(|| format!("`{item}`: expected a probability between 0 and 1"))?
                }
                "storage_fail" => {
                    f.storage_fail = value
                        .parse()
                        .ok()
                        .filter(|p| (0.0..=1.0).contains(p))
                        .ok_or_else(|| format!("`{item}`: expected a probability between 0 and 1"))?
                }
                "crash" => {
                    let (point, n) = match value.split_once(':') {
                        Some((p, n)) => (p, n.parse().map_err(|_| format!("`{item}`: bad count `{n}`"))?),
                        None => (value, 1),
                    };
                    if !CRASH_POINTS.contains(&point) {
                        return Err(format!("`{item}`: unknown crash point, expected one of {}", CRASH_POINTS.join(", ")));
                    }
                    f.crash = Some((point.to_string(), n));
                }
                "stall" => {
                    let parts: Vec<&str> = value.split(':').collect();
                    let [op, sub, d] = parts[..] else {
                        return Err(format!("`{item}`: expected stall=OPERATOR:SUBTASK:DURATION"));
                    };
                    let sub = sub.parse().map_err(|_| format!("`{item}`: bad subtask `{sub}`"))?;
                    f.stall = Some((op.to_string(), sub, dur(d)?));
                }
                "fail" => {
                    let parts: Vec<&str> = value.split(':').collect();
                    let [op, sub, n] = parts[..] else {
                        return Err(format!("`{item}`: expected fail=OPERATOR:SUBTASK:N"));
                    };
                    let sub = sub.parse().map_err(|_| format!("`{item}`: bad subtask `{sub}`"))?;
                    let n = n.parse().ok().filter(|n| *n > 0).ok_or_else(|| format!("`{item}`: bad count `{n}`"))?;
                    f.fail = Some((op.to_string(), sub, n));
                }
                "barrier_delay" => f.barrier_delay = Some(dur(value)?),
                "restore_stall" => f.restore_stall = Some(dur(value)?),
                "end_stall" => f.end_stall = Some(dur(value)?),
                "seed" => f.rng = AtomicU64::new(value.parse().map_err(|_| format!("`{item}`: bad seed"))?),
                _ => return Err(format!("unknown fault `{key}`")),
            }
        }
        Ok(f)
    }

    /// Should this state write fail?
    pub fn fail_state_write(&self) -> bool {
        self.state_write_fail > 0.0 && self.random() < self.state_write_fail
    }

    /// Should this copy of a shared file fail?
    pub fn fail_shared_copy(&self) -> bool {
        self.shared_copy_fail > 0.0 && self.random() < self.shared_copy_fail
    }

    /// Should this object storage request fail?
    pub fn fail_storage(&self) -> bool {
        self.storage_fail > 0.0 && self.random() < self.storage_fail
    }

    /// Abort the process if the configured crash point is reached for the Nth time.
    pub fn crash_point(&self, point: &str) {
        if let Some((p, n)) = &self.crash {
            if p == point && self.crash_seen.fetch_add(1, Ordering::SeqCst) + 1 == *n {
                eprintln!("weir: injected crash at {point}");
                std::process::abort();
            }
        }
    }

    /// How long `operator` subtask `subtask` must stall now (once).
    pub fn stall_for(&self, operator: &str, subtask: u16) -> Option<Duration> {
        match &self.stall {
            Some((op, s, d)) if op == operator && *s == subtask && !self.stalled.swap(true, Ordering::SeqCst) => Some(*d),
            _ => None,
        }
    }

    /// Must `operator` subtask `subtask` fail at this barrier (the Nth it
    /// reaches, once in the process)?
    pub fn fail_now(&self, operator: &str, subtask: u16) -> bool {
        match &self.fail {
            Some((op, s, n)) if op == operator && *s == subtask => self.fail_seen.fetch_add(1, Ordering::SeqCst) + 1 == *n,
            _ => false,
        }
    }

    fn random(&self) -> f64 {
        // splitmix64 step: good enough for fault dice, no dependency.
        let mut z = self.rng.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

static FAULTS: OnceLock<Faults> = OnceLock::new();

/// Read `WEIR_FAULTS` once (the CLI calls this at start to report errors).
pub fn init_from_env() -> Result<(), String> {
    let spec = std::env::var("WEIR_FAULTS").unwrap_or_default();
    let f = Faults::parse(&spec).map_err(|e| format!("WEIR_FAULTS: {e}"))?;
    if !spec.is_empty() {
        tracing::warn!(faults = %spec, "Fault injection is on.");
    }
    let _ = FAULTS.set(f);
    Ok(())
}

/// The configured faults (none unless `init_from_env` found some).
pub fn get() -> &'static Faults {
    FAULTS.get_or_init(Faults::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_fault() {
        let f = Faults::parse(
            "state_write_fail=0.3, crash=after_manifest:2, stall=agg:1:50ms, barrier_delay=10ms, restore_stall=2s, end_stall=3s",
        )
        .unwrap();
        assert_eq!(f.restore_stall, Some(Duration::from_secs(2)));
        assert_eq!(f.end_stall, Some(Duration::from_secs(3)));
        assert_eq!(f.crash, Some(("after_manifest".into(), 2)));
        assert_eq!(f.stall, Some(("agg".into(), 1, Duration::from_millis(50))));
        assert_eq!(f.barrier_delay, Some(Duration::from_millis(10)));
        let fails = (0..10_000).filter(|_| f.fail_state_write()).count();
        assert!((2_500..3_500).contains(&fails), "{fails}");
        assert_eq!(f.stall_for("agg", 1), Some(Duration::from_millis(50)));
        assert_eq!(f.stall_for("agg", 1), None, "stalls once");
        let f = Faults::parse("fail=agg:0:2").unwrap();
        let fails: Vec<bool> = (0..4).map(|_| f.fail_now("agg", 0)).collect();
        assert_eq!(fails, [false, true, false, false], "the 2nd barrier, once");
        assert!(!f.fail_now("agg", 1) && !f.fail_now("other", 0));
    }

    #[test]
    fn rejects_unknown_faults_and_points() {
        assert!(Faults::parse("crash=nowhere").unwrap_err().contains("unknown crash point"));
        assert!(Faults::parse("explode=1").unwrap_err().contains("unknown fault"));
        assert!(Faults::parse("state_write_fail=2").is_err());
        assert!(Faults::parse("").is_ok());
    }
}

//! How completed checkpoints are logged: one line each, or one summary
//! line per period (a log collector does not want 432 000 lines a day from
//! a 200 ms interval). Savepoints, slow checkpoints and failures are
//! always logged on their own, whatever the choice.

use std::time::{Duration, Instant};

use crate::types::CheckpointId;

/// The choice, from `--checkpoint-log` (or `WEIR_CHECKPOINT_LOG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointLog {
    /// One INFO line per completed checkpoint.
    Each,
    /// One DEBUG line per checkpoint (a progress bar on screen shows them).
    Quiet,
    /// One DEBUG line per checkpoint, and one INFO line per `every` with
    /// the counts and the slowest.
    Summary { every: Duration },
}

/// The checkpoints of one summary period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Period {
    pub completed: u64,
    pub failed: u64,
    /// The slowest completed one: (id, duration).
    pub slowest: Option<(CheckpointId, Duration)>,
    /// The newest completed one and its size in bytes.
    pub last: Option<(CheckpointId, u64)>,
    pub span: Duration,
}

/// Counts checkpoints for [`CheckpointLog::Summary`].
#[derive(Debug)]
pub struct Summary {
    every: Duration,
    since: Instant,
    completed: u64,
    failed: u64,
    slowest: Option<(CheckpointId, Duration)>,
    last: Option<(CheckpointId, u64)>,
}

impl Summary {
    pub fn new(every: Duration, now: Instant) -> Summary {
        Summary { every, since: now, completed: 0, failed: 0, slowest: None, last: None }
    }

    pub fn failed(&mut self) {
        self.failed += 1;
    }

    /// Count a completed checkpoint; the period's numbers when it is over.
    pub fn completed(&mut self, id: CheckpointId, duration: Duration, bytes: u64, now: Instant) -> Option<Period> {
        self.completed += 1;
        if self.slowest.is_none_or(|(_, d)| duration > d) {
            self.slowest = Some((id, duration));
        }
        self.last = Some((id, bytes));
        (now.duration_since(self.since) >= self.every).then(|| self.take(now))
    }

    /// The numbers since the last period, if any checkpoint ended in it
    /// (for the end of the run).
    pub fn rest(&mut self, now: Instant) -> Option<Period> {
        (self.completed + self.failed > 0).then(|| self.take(now))
    }

    fn take(&mut self, now: Instant) -> Period {
        let p = Period {
            completed: self.completed,
            failed: self.failed,
            slowest: self.slowest,
            last: self.last,
            span: now.duration_since(self.since),
        };
        *self = Summary::new(self.every, now);
        p
    }
}

impl Period {
    pub fn log(&self) {
        let (slowest, slowest_ms) = self.slowest.map_or((0, 0), |(id, d)| (id, d.as_millis() as u64));
        let (last, bytes) = self.last.unwrap_or((0, 0));
        tracing::info!(
            completed = self.completed,
            failed = self.failed,
            last_checkpoint = last,
            bytes,
            slowest_checkpoint = slowest,
            slowest_ms,
            period_s = self.span.as_secs(),
            "Checkpoints since the last summary."
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_ends_at_the_first_completion_after_its_length_with_counts_and_the_slowest() {
        let t0 = Instant::now();
        let mut s = Summary::new(Duration::from_secs(60), t0);
        let ms = Duration::from_millis;
        assert_eq!(s.completed(1, ms(30), 10, t0 + Duration::from_secs(1)), None);
        s.failed();
        assert_eq!(s.completed(2, ms(90), 20, t0 + Duration::from_secs(30)), None);
        let p = s.completed(3, ms(40), 30, t0 + Duration::from_secs(61)).expect("a minute passed");
        assert_eq!((p.completed, p.failed, p.slowest, p.last), (3, 1, Some((2, ms(90))), Some((3, 30))));
        assert_eq!(p.span, Duration::from_secs(61));
        // The next period starts empty, from then.
        assert_eq!(s.rest(t0 + Duration::from_secs(70)), None);
        assert_eq!(s.completed(4, ms(5), 1, t0 + Duration::from_secs(100)), None);
        let rest = s.rest(t0 + Duration::from_secs(110)).expect("one checkpoint since");
        assert_eq!((rest.completed, rest.slowest), (1, Some((4, ms(5)))));
    }

    #[test]
    fn failures_alone_make_a_rest_line() {
        let t0 = Instant::now();
        let mut s = Summary::new(Duration::from_secs(60), t0);
        s.failed();
        let p = s.rest(t0).expect("a failure to report");
        assert_eq!((p.completed, p.failed, p.slowest), (0, 1, None));
    }
}

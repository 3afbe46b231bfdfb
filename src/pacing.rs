//! Pacing for `rate_limit`: when the next records may go, so that a stream
//! keeps to its rate on average but never makes up for lost time in a burst.
//!
//! Credit (records the schedule is owed) is capped at one batch: after a
//! stall (a slow consumer, SIGSTOP, a long checkpoint) the stream resumes at
//! its rate instead of sending everything it "missed" at once.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Pacer {
    /// Records per second.
    rate: f64,
    /// Most records that may go at once after falling behind.
    burst: u64,
    /// The schedule: record `n` is due at `origin + n / rate`.
    origin: Option<Instant>,
    sent: u64,
}

impl Pacer {
    pub fn new(rate: f64, burst: u64) -> Self {
        Pacer { rate, burst: burst.max(1), origin: None, sent: 0 }
    }

    /// Count `n` records as sent at `now` (the first call starts the schedule).
    pub fn sent(&mut self, n: u64, now: Instant) {
        self.origin.get_or_insert(now);
        self.sent = self.sent.saturating_add(n);
    }

    /// How long to wait at `now` before the next record may go (None: go).
    /// Moves the schedule forward when it is behind by more than a burst.
    pub fn wait(&mut self, now: Instant) -> Option<Duration> {
        let origin = self.origin?;
        let due = origin.checked_add(secs(self.sent as f64 / self.rate)).unwrap_or(now + Duration::from_secs(86_400));
        if let Some(late) = now.checked_duration_since(due) {
            let allowance = secs(self.burst as f64 / self.rate);
            if let Some(excess) = late.checked_sub(allowance) {
                self.origin = origin.checked_add(excess);
            }
            return None;
        }
        Some(due - now)
    }
}

/// Seconds as a Duration, saturating (rates are range-checked at
/// validation, but no user value may panic here).
fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(if s > 0.0 { Duration::MAX / 4 } else { Duration::ZERO })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn keeps_to_the_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::new(1000.0, 50);
        assert_eq!(p.wait(t0), None, "nothing sent yet");
        p.sent(50, t0);
        assert_eq!(p.wait(t0), Some(50 * MS));
        assert_eq!(p.wait(t0 + 50 * MS), None);
    }

    /// rate 1 000/s, stalled 10 s: at most one burst goes at once, then
    /// the rate holds (before: ~10 000 records within half a second).
    #[test]
    fn a_stall_earns_at_most_one_burst() {
        let t0 = Instant::now();
        let mut p = Pacer::new(1000.0, 50);
        p.sent(50, t0);
        let resumed = t0 + Duration::from_secs(10);
        let mut now = resumed;
        let mut sent_at_once = 0;
        while p.wait(now).is_none() {
            p.sent(10, now);
            sent_at_once += 10;
            assert!(sent_at_once <= 100, "a stall let {sent_at_once} records through at once");
        }
        assert!(sent_at_once >= 50, "the burst is allowed: {sent_at_once}");
        // Then one record per millisecond again.
        now += p.wait(now).unwrap();
        let mut sent = 0;
        let end = now + Duration::from_secs(1);
        while now < end {
            match p.wait(now) {
                None => {
                    p.sent(1, now);
                    sent += 1;
                }
                Some(d) => now += d,
            }
        }
        assert!((990..=1010).contains(&sent), "{sent} records in the second after the burst");
    }

    #[test]
    fn extreme_rates_do_not_panic() {
        let t0 = Instant::now();
        for rate in [1e-30, f64::MIN_POSITIVE, 1e300, f64::MAX] {
            let mut p = Pacer::new(rate, u64::MAX);
            p.sent(u64::MAX, t0);
            p.sent(1, t0);
            let _ = p.wait(t0);
            let _ = p.wait(t0 + Duration::from_secs(1));
        }
    }
}

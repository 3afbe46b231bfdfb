//! `restart:`: whether a failed run may restart, and after how long.
//!
//! Flink's exponential-delay strategy, bounded by a failure rate: at most
//! `attempts` restarts within a sliding `window`; the wait starts at
//! `backoff` and doubles with each failure still in the window, up to
//! `max_backoff`. A pipeline that ran well for a whole window starts over
//! with the short wait.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::RestartPolicy;

/// The failures of this process's runs that still count.
#[derive(Debug)]
pub struct Budget {
    policy: RestartPolicy,
    restarts: VecDeque<Instant>,
    /// Restarts over the whole process (the metric and the log count them).
    pub total: u64,
}

/// What to do after a run failed at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Restart after this wait; the `n`th restart within the window.
    Restart { wait: Duration, n: u32 },
    /// `attempts` restarts within the window already: the failure ends the process.
    Spent,
}

impl Budget {
    pub fn new(policy: RestartPolicy) -> Budget {
        Budget { policy, restarts: VecDeque::new(), total: 0 }
    }

    pub fn policy(&self) -> RestartPolicy {
        self.policy
    }

    /// A run failed at `now`: restart (counted) or give up.
    pub fn on_failure(&mut self, now: Instant) -> Decision {
        while self.restarts.front().is_some_and(|&t| now.saturating_duration_since(t) >= self.policy.window) {
            self.restarts.pop_front();
        }
        let before = u32::try_from(self.restarts.len()).unwrap_or(u32::MAX);
        if before >= self.policy.attempts {
            return Decision::Spent;
        }
        let wait = self.policy.backoff.saturating_mul(2u32.saturating_pow(before.min(31))).min(self.policy.max_backoff);
        self.restarts.push_back(now);
        self.total += 1;
        Decision::Restart { wait, n: before + 1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(attempts: u32) -> RestartPolicy {
        RestartPolicy { attempts, backoff: Duration::from_secs(1), max_backoff: Duration::from_secs(5), window: Duration::from_secs(60) }
    }

    #[test]
    fn waits_double_up_to_the_maximum_and_the_attempts_run_out() {
        let mut b = Budget::new(policy(4));
        let t = Instant::now();
        let waits: Vec<Decision> = (0..5).map(|i| b.on_failure(t + Duration::from_secs(i))).collect();
        let secs = |s, n| Decision::Restart { wait: Duration::from_secs(s), n };
        assert_eq!(waits, [secs(1, 1), secs(2, 2), secs(4, 3), secs(5, 4), Decision::Spent]);
        assert_eq!(b.total, 4);
    }

    #[test]
    fn failures_older_than_the_window_no_longer_count() {
        let mut b = Budget::new(policy(2));
        let t = Instant::now();
        assert!(matches!(b.on_failure(t), Decision::Restart { n: 1, .. }));
        assert!(matches!(b.on_failure(t + Duration::from_secs(30)), Decision::Restart { n: 2, .. }));
        assert_eq!(b.on_failure(t + Duration::from_secs(59)), Decision::Spent);
        // The first restart left the window: one more, with the wait of a second failure.
        assert_eq!(b.on_failure(t + Duration::from_secs(61)), Decision::Restart { wait: Duration::from_secs(2), n: 2 });
        // A whole window without a failure: the short wait again.
        assert_eq!(b.on_failure(t + Duration::from_secs(200)), Decision::Restart { wait: Duration::from_secs(1), n: 1 });
        assert_eq!(b.total, 4);
    }

    #[test]
    fn huge_counts_saturate() {
        let mut b = Budget::new(RestartPolicy { attempts: 1_000_000, ..policy(1) });
        let t = Instant::now();
        for _ in 0..100 {
            assert!(matches!(b.on_failure(t), Decision::Restart { wait, .. } if wait <= Duration::from_secs(5)));
        }
    }
}

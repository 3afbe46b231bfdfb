//! The blackhole sink: counts records and drops them (for benchmarks). With
//! a rate limit it accepts records no faster than that, which makes it a
//! slow sink whose backpressure tests and demos can observe.

use std::time::{Duration, Instant};

use crate::operators::{Context, OpResult, Operator};
use crate::pacing::Pacer;
use crate::types::Record;

pub struct Blackhole {
    /// Paces a `rate_limit` (records per second for this subtask).
    pacer: Option<Pacer>,
}

impl Blackhole {
    pub fn new(rate_limit: Option<f64>) -> Self {
        // After a stall, at most a batch (or a twentieth of a second) at once.
        let burst = |rate: f64| ((rate / 20.0) as u64).clamp(1, 1024);
        Blackhole { pacer: rate_limit.map(|r| Pacer::new(r, burst(r))) }
    }
}

impl Operator for Blackhole {
    fn process(&mut self, batch: Vec<Record>, _ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        if let Some(p) = &mut self.pacer {
            p.sent(batch.len() as u64, Instant::now());
        }
        Ok(())
    }

    fn throttle(&mut self) -> Option<Duration> {
        self.pacer.as_mut()?.wait(Instant::now())
    }
}

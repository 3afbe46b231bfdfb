//! The blackhole sink: counts records and drops them (for benchmarks). With
//! a rate limit it accepts records no faster than that, which makes it a
//! slow sink whose backpressure tests and demos can observe.

use std::time::{Duration, Instant};

use super::{Context, OpResult, Operator};
use crate::types::Record;

pub struct Blackhole {
    /// Records per second for this subtask.
    rate_limit: Option<f64>,
    started: Option<Instant>,
    accepted: u64,
}

impl Blackhole {
    pub fn new(rate_limit: Option<f64>) -> Self {
        Blackhole { rate_limit, started: None, accepted: 0 }
    }
}

impl Operator for Blackhole {
    fn process(&mut self, batch: Vec<Record>, _ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        self.started.get_or_insert_with(Instant::now);
        self.accepted += batch.len() as u64;
        Ok(())
    }

    fn throttle(&self) -> Option<Duration> {
        let (rate, started) = (self.rate_limit?, self.started?);
        let due = super::source::paced(started, self.accepted, rate);
        due.checked_duration_since(Instant::now())
    }
}

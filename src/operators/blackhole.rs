//! The blackhole sink: counts records and drops them (for benchmarks).

use super::{Context, OpResult, Operator};
use crate::types::Record;

pub struct Blackhole;

impl Operator for Blackhole {
    fn process(&mut self, batch: Vec<Record>, _ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        drop(batch);
        Ok(())
    }
}

//! What weir's end-to-end tests (`tests/e2e`) and chaos harness
//! (`tests/chaos`) share, as one crate instead of files included twice:
//! output records and their comparison, the reference model written from
//! the docs, running a child and watching its log, the TCP proxy that
//! injects network faults, the seeded RNG of randomized cases, and waiting
//! for a condition.

pub mod process;
pub mod proxy;
pub mod records;
pub mod reference;
pub mod rng;
pub mod wait;

//! The checkpoint protocol as pure state machines: no tokio, no I/O, no
//! clock of their own (every call is given the time). The runtime drives
//! them; their unit tests drive every order of events.
//!
//! - `coordinator`: triggers checkpoints, collects the bundles' commits,
//!   times them out, decides when `_metadata` is written.
//! - `arbiter`: a bundle's two-phase commit (prepare votes, then commit).
//! - `barrier`: a task's alignment of barriers over its inputs (aligned,
//!   unaligned, aligned with a timeout, at-least-once).
//! - `watermark`: a task's watermark over its inputs, idleness included.

pub mod arbiter;
pub mod barrier;
pub mod coordinator;
pub mod watermark;

//! weir: a single-binary stream processor.
//!
//! Data flows one way: `config` (YAML → validated pipeline) → `plan`
//! (operators × parallelism, edges, chains) → `runtime` (tokio tasks,
//! channels, watermarks, checkpoints) → `connectors` (sources and sinks,
//! one module per external system) → `operators` (the `Operator` trait and
//! the keyed operators) → `state` → `checkpoint` (on-disk layout,
//! manifests, validation). The `cli` sits at the edge.

pub mod blocking;
pub mod checkpoint;
pub mod cli;
pub mod codec;
pub mod config;
pub mod connectors;
pub mod expr;
pub mod faults;
pub mod features;
pub mod format;
#[cfg(test)]
mod layers;
pub mod number;
pub mod operators;
pub mod pacing;
pub mod plan;
pub mod protocol;
pub mod recent;
pub mod restore;
pub mod run_id;
pub mod runtime;
pub mod serve;
pub mod state;
pub mod types;

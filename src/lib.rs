//! weir: a single-binary stream processor.
//!
//! Data flows one way: `config` (YAML → validated pipeline) → `plan`
//! (operators × parallelism, edges, chains) → `runtime` (tokio tasks,
//! channels, watermarks) → `operators` → `state`. The `cli` sits at the edge.

pub mod cli;
pub mod config;
pub mod operators;
pub mod state;
pub mod types;
pub mod format;
pub mod plan;
pub mod runtime;

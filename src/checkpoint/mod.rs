//! Checkpoint storage: where checkpoints live on disk, what their manifests
//! say, how they are written atomically, and how a restore decides which one
//! it may trust.
//!
//! The decisions (when to trigger, when a bundle commits) live in
//! `protocol::{coordinator, arbiter}` as pure state machines; this module is
//! the I/O edge they call. A checkpoint exists iff its `_metadata` exists and
//! validates together with every bundle MANIFEST and every file they list, so
//! all subtasks restore from the same checkpoint or none does.

pub mod generation;
pub mod layout;
pub mod lineage;
pub mod lock;
pub mod manifest;
pub mod owner;
pub mod publish;
pub mod remote;
pub mod shared;
pub mod storage;
pub mod store;
pub mod target;
pub mod task_snapshot;
pub mod validate;

/// A checkpoint (or savepoint) id. Strictly increasing across restarts.
pub type CheckpointId = u64;

/// A bundle: a group of subtasks sharing one state backend and one arbiter.
pub type BundleId = u32;

//! Checkpoint storage: where checkpoints live on disk, what their manifests
//! say, how they are written atomically, and how a restore decides which one
//! it may trust.
//!
//! The decisions (when to trigger, when a bundle commits) live in
//! `protocol::{coordinator, arbiter}` as pure state machines; this module is
//! the I/O edge they call. A checkpoint exists iff its `_metadata` exists and
//! validates together with every bundle MANIFEST and every file they list, so
//! all subtasks restore from the same checkpoint or none does.
//!
//! The files: `layout` (every path), `manifest` and `task_snapshot` (the
//! documents and the per-task file), `disk` (durable local writes),
//! `storage` and `remote` (the local / S3 store under `publish`, the
//! commit protocol), `validate` (which checkpoint a restore may trust),
//! `shared` (incremental files), `lineage` and `generation` (the history a
//! restore may walk), `lock` and `lease` (one owner of a state directory,
//! of a storage prefix), `savepoint` (where a savepoint goes).

pub mod disk;
pub mod generation;
pub mod layout;
pub mod lease;
pub mod lineage;
pub mod lock;
pub mod manifest;
pub mod publish;
pub mod remote;
pub mod savepoint;
pub mod shared;
pub mod storage;
pub mod task_snapshot;
pub mod validate;

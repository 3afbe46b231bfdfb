//! Where the keyed state of each operator subtask lives: memory, or one
//! RocksDB per bundle (opened empty or rebuilt from a native checkpoint),
//! and the rendezvous of a bundle's native checkpoints.

use std::sync::Arc;

use super::BuildError;
use crate::checkpoint::layout::Layout;
use crate::config::{Alignment, Backend, NodeId, NodeKind};
use crate::operators::Operator;
use crate::plan::Plan;
use crate::restore::RestoredState;
use crate::runtime::rendezvous::Rendezvous;
use crate::state::memory::MemoryState;
use crate::state::rocks::native::{self, Uploader};
use crate::state::rocks::{self, BundleDb, RocksState};
use crate::state::KeyedState;
use crate::types::{BundleId, CheckpointId};

/// Where the keyed state of each operator subtask lives.
pub(super) enum Backends {
    Memory,
    /// One working DB per bundle, and what uploads its native checkpoints.
    RocksDb {
        dbs: Vec<Arc<BundleDb>>,
        uploaders: Vec<Option<Uploader>>,
        incremental: bool,
    },
}

impl Backends {
    /// Open the working DBs: empty, or rebuilt from the restored checkpoint
    /// when its bundles hold native RocksDB checkpoints.
    pub(super) fn open(plan: &Plan, restored: Option<&RestoredState>) -> Result<Backends, BuildError> {
        let p = &plan.pipeline;
        let layout = Layout::new(&p.state.dir);
        let Backend::RocksDb(spec) = &p.state.backend else {
            native::remove_other_bundles(&layout.local_dir(), 0);
            return Ok(Backends::Memory);
        };
        native::remove_other_bundles(&layout.local_dir(), p.bundles() as BundleId);
        let options = rocks::RocksOptions {
            block_cache: spec.block_cache,
            write_buffer: spec.write_buffer,
            write_cache: usize::try_from(spec.write_cache).unwrap_or(usize::MAX),
            compression: spec.compression,
            ..rocks::RocksOptions::default()
        };
        let cfs: Vec<String> = p.nodes.iter().filter(|n| uses_rocksdb(&n.kind)).map(|n| n.name.clone()).collect();
        let mut dbs = Vec::new();
        let mut uploaders = Vec::new();
        for b in 0..p.bundles() as BundleId {
            let err = |e: crate::state::StateError| BuildError { node: format!("bundle {b}"), reason: e.to_string() };
            let local = layout.local_bundle_dir(b);
            let path = local.join("db");
            let native = restored.and_then(|r| r.native_files(b).map(|files| (r, files)));
            let (db, uploader) = match native {
                Some((r, files)) => {
                    let started = std::time::Instant::now();
                    let bundle_dir = r.dir.join(crate::checkpoint::layout::bundle_dir_name(b));
                    let shared = crate::checkpoint::validate::shared_dir_of(&r.dir);
                    let from =
                        native::NativeCheckpoint { id: r.id, bundle: b, files: &files, bundle_dir: &bundle_dir, shared_dir: &shared };
                    let (db, uploader, source) = native::restore(&from, &path, &cfs, &options).map_err(err)?;
                    tracing::info!(
                        bundle = b,
                        checkpoint = r.id,
                        from = if source == native::RestoreSource::Local { "local checkpoint" } else { "checkpoint files" },
                        ms = started.elapsed().as_millis() as u64,
                        "Rebuilt the bundle's RocksDB."
                    );
                    native::retain_local(&local, Some(r.id), CheckpointId::MAX);
                    (db, Some(uploader))
                }
                None => {
                    native::retain_local(&local, None, CheckpointId::MAX);
                    (BundleDb::create(&path, &cfs, &options).map_err(err)?, None)
                }
            };
            dbs.push(db);
            uploaders.push(uploader);
        }
        Ok(Backends::RocksDb { dbs, uploaders, incremental: spec.incremental })
    }

    /// The working DBs (none for memory state).
    pub(super) fn dbs(&self) -> &[Arc<BundleDb>] {
        match self {
            Backends::RocksDb { dbs, .. } => dbs,
            Backends::Memory => &[],
        }
    }

    /// One rendezvous per bundle when checkpoints are native: RocksDB,
    /// `incremental`, aligned (or at-least-once) barriers.
    pub(super) fn rendezvous(&mut self, plan: &Plan, checkpointing: bool) -> Vec<Arc<Rendezvous>> {
        let p = &plan.pipeline;
        let Backends::RocksDb { dbs, uploaders, incremental: true } = self else { return Vec::new() };
        let aligned = matches!(p.checkpoint.as_ref().map(|c| c.alignment), Some(Alignment::Aligned | Alignment::AtLeastOnce));
        if !checkpointing || !aligned {
            return Vec::new();
        }
        // Members: every subtask of a chain holding a keyed operator.
        let native_chains = plan.chains.iter().filter(|chain| chain.iter().any(|&id| uses_rocksdb(&p.nodes[id].kind))).count();
        let mut members = vec![0usize; dbs.len()];
        for i in 0..p.parallelism {
            members[(i / p.bundle_size) as usize] += native_chains;
        }
        dbs.iter()
            .zip(uploaders.iter_mut())
            .enumerate()
            .map(|(b, (db, up))| {
                let uploader = up.take().unwrap_or_else(|| Uploader::new(b as BundleId));
                Rendezvous::new(b as BundleId, db.clone(), members[b], uploader)
            })
            .collect()
    }

    pub(super) fn state(&self, plan: &Plan, id: NodeId, subtask: u16, op: &dyn Operator) -> Result<Box<dyn KeyedState>, BuildError> {
        let p = &plan.pipeline;
        let node = &p.nodes[id];
        let key_groups = p.key_group_share().range(subtask, p.parallelism, p.max_parallelism);
        match self {
            Backends::RocksDb { dbs, .. } if uses_rocksdb(&node.kind) => {
                let db = dbs[(subtask / p.bundle_size) as usize].clone();
                let state = RocksState::new(db, &node.name, &op.tables(), key_groups)
                    .map_err(|e| BuildError { node: node.name.clone(), reason: e.to_string() })?;
                Ok(Box::new(state))
            }
            _ => Ok(Box::new(MemoryState::new(&op.tables(), key_groups))),
        }
    }
}

/// Whether the task running these chained nodes is a rendezvous member.
pub(super) fn chain_is_native(plan: &Plan, nodes: &[NodeId], backends: &Backends) -> bool {
    matches!(backends, Backends::RocksDb { .. }) && nodes.iter().any(|&id| uses_rocksdb(&plan.pipeline.nodes[id].kind))
}

/// Keyed operators keep their state in RocksDB with `backend: rocksdb`;
/// sinks keep their few entries (staged part files) in memory.
pub(super) fn uses_rocksdb(kind: &NodeKind) -> bool {
    matches!(kind, NodeKind::Dedup(_) | NodeKind::Aggregate(_) | NodeKind::Join(_))
}

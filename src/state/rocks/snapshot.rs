//! Canonical snapshots of RocksDB state, taken without stopping the task for
//! longer than it takes to pin a RocksDB snapshot (a sequence number).
//!
//! `rocksdb::Snapshot` borrows the DB, and `unsafe` is forbidden here, so
//! the snapshot cannot be handed from the task to the writer. Instead a
//! thread of its own holds an `Arc` of the bundle DB, takes the snapshot and
//! signals the task, which only then goes on writing; the thread then
//! iterates the subtask's key groups under that snapshot into the canonical
//! format of `state::snapshot`, while the task processes records.

use std::ops::Range;
use std::sync::mpsc;
use std::sync::Arc;

use rocksdb::ReadOptions;

use super::{compose, table_end, BundleDb, PREFIX};
use crate::codec::Enc;
use crate::state::{StateError, StateSnapshot, TableSpec};
use crate::types::KeyGroup;

/// Pin a snapshot of `cf` now; the returned handle writes it out later.
pub(super) fn start(db: Arc<BundleDb>, cf: &str, tables: &[TableSpec], key_groups: Range<KeyGroup>) -> Result<StateSnapshot, StateError> {
    let (pinned_tx, pinned_rx) = mpsc::sync_channel::<()>(1);
    let cf = cf.to_string();
    let tables = tables.to_vec();
    let thread = std::thread::Builder::new()
        .name("weir-snapshot".into())
        .spawn(move || {
            let snap = db.db.snapshot();
            let _ = pinned_tx.send(());
            write(&db, &snap, &cf, &tables, key_groups)
        })
        .map_err(|e| StateError::Backend(format!("cannot start a snapshot thread: {e}")))?;
    if pinned_rx.recv().is_err() {
        // The thread ended before pinning: it panicked.
        return Err(StateError::Backend("the snapshot thread failed before taking the snapshot".into()));
    }
    Ok(StateSnapshot::Deferred(Box::new(move || {
        thread.join().unwrap_or_else(|_| Err(StateError::Backend("the snapshot thread panicked".into())))
    })))
}

/// The canonical format (see `state::snapshot::write`) of `cf`'s key groups under `snap`.
fn write(
    db: &BundleDb,
    snap: &rocksdb::Snapshot<'_>,
    cf: &str,
    tables: &[TableSpec],
    key_groups: Range<KeyGroup>,
) -> Result<Vec<u8>, StateError> {
    let handle = db.cf(cf)?;
    let err = |e: rocksdb::Error| StateError::Backend(format!("snapshot of `{cf}` in {}: {e}", db.path.display()));
    let mut out = Vec::new();
    out.put_u16(tables.len() as u16);
    let mut lower = Vec::new();
    for (t, spec) in tables.iter().enumerate() {
        out.put_str(spec.name);
        out.put_u32(key_groups.len() as u32);
        for kg in key_groups.clone() {
            out.put_u16(kg);
            let count_at = out.len();
            out.put_u64(0);
            compose(&mut lower, kg, t, &[]);
            let mut opts = ReadOptions::default();
            opts.set_iterate_lower_bound(lower.clone());
            opts.set_iterate_upper_bound(table_end(kg, t));
            // A one-off scan: do not push the working set out of the cache.
            opts.fill_cache(false);
            let mut it = snap.raw_iterator_cf_opt(handle, opts);
            it.seek(&lower);
            let mut n: u64 = 0;
            while let (Some(k), Some(v)) = (it.key(), it.value()) {
                out.put_bytes(&k[PREFIX..]);
                out.put_bytes(v);
                n += 1;
                it.next();
            }
            it.status().map_err(err)?;
            out[count_at..count_at + 8].copy_from_slice(&n.to_be_bytes());
        }
    }
    Ok(out)
}

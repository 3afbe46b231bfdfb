//! The changes to one subtask's ordered tables (timers) since the last
//! flush, in key order, in front of RocksDB: scans merge them with the DB.
//!
//! A window's timer is put when the window opens and deleted when it fires;
//! when both happen between two checkpoints (event time runs fast through a
//! file), the timer never reaches RocksDB: no skip-list insert, no
//! tombstone for later scans to step over. The overlay is flushed with the
//! write-behind cache (every checkpoint, savepoint, and past the budget), so
//! what a checkpoint captures is the same as if every change had been
//! written through.

use std::collections::BTreeMap;
use std::ops::Bound;

/// A change not yet in RocksDB.
pub(super) enum Pending {
    /// `in_db`: RocksDB may hold the key (a delete must then be written).
    Put {
        value: Vec<u8>,
        in_db: bool,
    },
    Delete,
}

/// Bytes a change costs besides its key and value (a B-tree slot, roughly).
const ENTRY_OVERHEAD: usize = 48;

#[derive(Default)]
pub(super) struct Overlay {
    /// Composed key -> change.
    map: BTreeMap<Vec<u8>, Pending>,
    bytes: usize,
}

impl Overlay {
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// What the overlay says of `key`: None if it has no change for it,
    /// Some(None) if deleted.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.map.get(key).map(|p| match p {
            Pending::Put { value, .. } => Some(value.as_slice()),
            Pending::Delete => None,
        })
    }

    /// Put `key`; `in_db`: whether RocksDB may hold it, for a key the
    /// overlay has no change for.
    pub fn put(&mut self, key: &[u8], value: &[u8], in_db: bool) {
        let in_db = match self.map.get(key) {
            Some(Pending::Put { in_db, .. }) => *in_db,
            Some(Pending::Delete) => true,
            None => in_db,
        };
        self.replace(key, Pending::Put { value: value.to_vec(), in_db });
    }

    /// Delete `key`, which is present (in the overlay or in RocksDB).
    pub fn delete(&mut self, key: &[u8]) {
        if let Some(Pending::Put { in_db: false, .. }) = self.map.get(key) {
            // Never written to RocksDB: nothing to write now either.
            if let Some(old) = self.map.remove(key) {
                self.bytes = self.bytes.saturating_sub(cost(key, &old));
            }
            return;
        }
        self.replace(key, Pending::Delete);
    }

    fn replace(&mut self, key: &[u8], p: Pending) {
        self.bytes += cost(key, &p);
        let old = match self.map.get_mut(key) {
            Some(slot) => Some(std::mem::replace(slot, p)),
            None => self.map.insert(key.to_vec(), p),
        };
        if let Some(old) = old {
            self.bytes = self.bytes.saturating_sub(cost(key, &old));
        }
    }

    /// Changes with `lower <= key < upper`, in key order.
    pub fn range<'a>(&'a self, lower: &[u8], upper: &[u8]) -> impl Iterator<Item = (&'a [u8], &'a Pending)> + 'a {
        self.map.range::<[u8], _>((Bound::Included(lower), Bound::Excluded(upper))).map(|(k, p)| (k.as_slice(), p))
    }

    /// Every change, in key order (for the flush's batch).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Pending)> {
        self.map.iter().map(|(k, p)| (k.as_slice(), p))
    }

    /// Forget every change; only once they are written.
    pub fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }
}

fn cost(key: &[u8], p: &Pending) -> usize {
    key.len()
        + ENTRY_OVERHEAD
        + match p {
            Pending::Put { value, .. } => value.len(),
            Pending::Delete => 0,
        }
}

//! A write-behind cache of one subtask's point-table entries, in front of
//! the bundle's RocksDB (what Flink's mini-batch and RisingWave's cache do).
//!
//! A hot key (a running aggregate's accumulator, a window that lives a few
//! seconds) is read from RocksDB at most once and then updated in memory;
//! its changes reach RocksDB in one `WriteBatch` when the cache is flushed:
//! at every checkpoint and savepoint (the runtime calls
//! `KeyedState::flush` before the bundle's DB is captured, so a checkpoint
//! holds every write made before its barrier), before a scan of a point
//! table, and when the cache outgrows its budget (then it is emptied).
//! Working state is rebuilt from a checkpoint after a crash, never reopened,
//! so what the cache held and lost in a crash is never needed.
//!
//! Each entry remembers whether RocksDB may hold the key: an entry created
//! here and deleted before any flush (a window that fired between two
//! checkpoints) never touches RocksDB at all, not even as a tombstone.

use foldhash::fast::FixedState;
use hashbrown::HashMap;

use crate::state::memory::Bytes;

/// Bytes an entry costs besides its key and value (one hash-table slot;
/// long keys and values have a heap block each): the budget is
/// approximate, in the same way as RocksDB's.
const ENTRY_OVERHEAD: usize = 64;

pub(super) struct Slot {
    /// Inline when short: a probe touches one slot, no heap block.
    value: Bytes,
    /// false: deleted (a tombstone to write, if RocksDB may hold the key).
    present: bool,
    /// Changed since the last flush.
    dirty: bool,
    /// RocksDB may hold the key (false only when this cache knows it doesn't).
    in_db: bool,
}

impl Slot {
    /// The value, None if deleted.
    pub fn value(&self) -> Option<&[u8]> {
        self.present.then(|| self.value.as_slice())
    }
}

pub(super) struct WriteCache {
    map: HashMap<Bytes, Slot, FixedState>,
    bytes: usize,
    budget: usize,
    dirty: usize,
}

/// One change a flush writes.
pub(super) enum Change<'a> {
    Put(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
}

impl WriteCache {
    pub fn new(budget: usize) -> Self {
        WriteCache { map: HashMap::with_hasher(FixedState::default()), bytes: 0, budget, dirty: 0 }
    }

    pub fn get(&self, key: &[u8]) -> Option<&Slot> {
        self.map.get(key)
    }

    /// Whether any entry awaits a flush.
    pub fn is_dirty(&self) -> bool {
        self.dirty > 0
    }

    /// Past the budget: the caller flushes, then [`clear`](Self::clear)s.
    pub fn over_budget(&self) -> bool {
        self.bytes > self.budget
    }

    /// Set `key` to `value` (None: deleted). `in_db`: whether RocksDB may
    /// hold the key, for a key the cache does not know yet.
    pub fn set(&mut self, key: &[u8], value: Option<&[u8]>, in_db: bool) {
        let len = value.map_or(0, <[u8]>::len);
        match self.map.get_mut(key) {
            Some(slot) => {
                let old = slot.value().map_or(0, <[u8]>::len);
                self.bytes = (self.bytes + len).saturating_sub(old);
                if !slot.dirty {
                    slot.dirty = true;
                    self.dirty += 1;
                }
                match value {
                    None if !slot.in_db => {
                        // Never written to RocksDB: forget it altogether.
                        self.map.remove(key);
                        self.bytes = self.bytes.saturating_sub(key.len() + ENTRY_OVERHEAD);
                        self.dirty -= 1;
                    }
                    None => {
                        slot.present = false;
                        slot.value = Bytes::new(&[]);
                    }
                    Some(v) => {
                        slot.value.set(v);
                        slot.present = true;
                    }
                }
            }
            None => {
                if value.is_none() && !in_db {
                    return;
                }
                self.bytes += key.len() + len + ENTRY_OVERHEAD;
                self.dirty += 1;
                let slot = Slot { value: Bytes::new(value.unwrap_or(&[])), present: value.is_some(), dirty: true, in_db };
                self.map.insert(Bytes::new(key), slot);
            }
        }
    }

    /// Remember what RocksDB holds for `key` (read from it just now).
    pub fn set_clean(&mut self, key: &[u8], value: &[u8]) {
        if self.map.contains_key(key) {
            return;
        }
        self.bytes += key.len() + value.len() + ENTRY_OVERHEAD;
        self.map.insert(Bytes::new(key), Slot { value: Bytes::new(value), present: true, dirty: false, in_db: true });
    }

    /// Hand every dirty entry to `write` (all in one call, for one batch);
    /// on success they are clean, and deleted entries are forgotten.
    pub fn flush<E>(&mut self, write: impl FnOnce(&mut dyn Iterator<Item = Change<'_>>) -> Result<(), E>) -> Result<(), E> {
        if self.dirty == 0 {
            return Ok(());
        }
        // In key order: RocksDB's skip list inserts a sorted run next to
        // the previous key instead of searching from the top for each.
        let mut dirty: Vec<(&[u8], Option<&[u8]>)> =
            self.map.iter().filter(|(_, s)| s.dirty).map(|(k, s)| (k.as_slice(), s.value())).collect();
        dirty.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut changes = dirty.into_iter().map(|(k, v)| match v {
            Some(v) => Change::Put(k, v),
            None => Change::Delete(k),
        });
        write(&mut changes)?;
        let mut freed = 0;
        self.map.retain(|k, s| {
            s.dirty = false;
            s.in_db = true;
            if !s.present {
                freed += k.as_slice().len() + ENTRY_OVERHEAD;
            }
            s.present
        });
        self.bytes = self.bytes.saturating_sub(freed);
        self.dirty = 0;
        Ok(())
    }

    /// Forget every entry; only after a successful flush.
    pub fn clear(&mut self) {
        debug_assert_eq!(self.dirty, 0, "clearing a write cache with unflushed entries");
        self.map = HashMap::with_hasher(FixedState::default());
        self.bytes = 0;
    }
}

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

use std::hash::BuildHasher;

use foldhash::fast::FixedState;
use hashbrown::HashTable;

use super::filter::FlushedKeys;

/// Bytes an entry costs besides its key and value (its 64-byte slot and
/// control byte; long entries have a heap block too): the budget is
/// approximate, in the same way as RocksDB's.
const ENTRY_OVERHEAD: usize = 64;

/// Key and value side by side in the slot when they fit together: a probe
/// reads one cache line (a running count + sum, a 14-byte stored key and
/// 42 bytes of accumulators and flag, fits).
const INLINE: usize = 59;

/// `Entry::flags` bits.
/// false: deleted (a tombstone to write, if RocksDB may hold the key).
const PRESENT: u8 = 1;
/// Changed since the last flush.
const DIRTY: u8 = 2;
/// RocksDB may hold the key (unset only when this cache knows it doesn't).
const IN_DB: u8 = 4;
/// The key's fingerprint is in [`FlushedKeys`] (a flush wrote it, or it was
/// read from RocksDB): the next flush need not insert it again.
const NOTED: u8 = 8;

/// Lengths and flags live in each variant, so the whole entry is 64 bytes.
enum Store {
    Inline {
        data: [u8; INLINE],
        key_len: u8,
        value_len: u8,
        flags: u8,
    },
    /// key ++ value.
    Heap {
        kv: Box<[u8]>,
        key_len: u32,
        flags: u8,
    },
}

#[repr(align(64))]
pub(super) struct Entry(Store);

impl Entry {
    fn new(key: &[u8], value: Option<&[u8]>, dirty: bool, in_db: bool) -> Self {
        let flags = if value.is_some() { PRESENT } else { 0 } | if dirty { DIRTY } else { 0 } | if in_db { IN_DB } else { 0 };
        // Read from RocksDB (clean, so in it): flushed by this subtask, or the fingerprints are off.
        let flags = if dirty { flags } else { flags | NOTED };
        Entry(Self::store(key, value.unwrap_or(&[]), flags))
    }

    fn store(key: &[u8], value: &[u8], flags: u8) -> Store {
        if key.len() + value.len() <= INLINE {
            let mut data = [0; INLINE];
            data[..key.len()].copy_from_slice(key);
            data[key.len()..key.len() + value.len()].copy_from_slice(value);
            Store::Inline { data, key_len: key.len() as u8, value_len: value.len() as u8, flags }
        } else {
            let mut kv = Vec::with_capacity(key.len() + value.len());
            kv.extend_from_slice(key);
            kv.extend_from_slice(value);
            Store::Heap { kv: kv.into_boxed_slice(), key_len: key.len() as u32, flags }
        }
    }

    fn flags(&self) -> u8 {
        match &self.0 {
            Store::Inline { flags, .. } | Store::Heap { flags, .. } => *flags,
        }
    }

    fn set_flag(&mut self, flag: u8, on: bool) {
        match &mut self.0 {
            Store::Inline { flags, .. } | Store::Heap { flags, .. } => {
                if on {
                    *flags |= flag
                } else {
                    *flags &= !flag
                }
            }
        }
    }

    fn present(&self) -> bool {
        self.flags() & PRESENT != 0
    }

    fn dirty(&self) -> bool {
        self.flags() & DIRTY != 0
    }

    fn in_db(&self) -> bool {
        self.flags() & IN_DB != 0
    }

    fn key_len(&self) -> usize {
        match &self.0 {
            Store::Inline { key_len, .. } => *key_len as usize,
            Store::Heap { key_len, .. } => *key_len as usize,
        }
    }

    pub fn key(&self) -> &[u8] {
        match &self.0 {
            Store::Inline { data, key_len, .. } => &data[..*key_len as usize],
            Store::Heap { kv, key_len, .. } => &kv[..*key_len as usize],
        }
    }

    fn stored_value(&self) -> &[u8] {
        match &self.0 {
            Store::Inline { data, key_len, value_len, .. } => &data[*key_len as usize..*key_len as usize + *value_len as usize],
            Store::Heap { kv, key_len, .. } => &kv[*key_len as usize..],
        }
    }

    /// The value, None if deleted.
    pub fn value(&self) -> Option<&[u8]> {
        self.present().then(|| self.stored_value())
    }

    /// Overwrite the value in place when it fits where the old one was.
    fn set_value(&mut self, value: &[u8]) {
        match &mut self.0 {
            Store::Inline { data, key_len, value_len, .. } if *key_len as usize + value.len() <= INLINE => {
                let k = *key_len as usize;
                data[k..k + value.len()].copy_from_slice(value);
                *value_len = value.len() as u8;
            }
            Store::Heap { kv, key_len, .. } if kv.len() == *key_len as usize + value.len() => {
                kv[*key_len as usize..].copy_from_slice(value)
            }
            _ => {
                let key = self.key().to_vec();
                self.0 = Self::store(&key, value, self.flags());
            }
        }
    }
}

pub(super) struct WriteCache {
    map: HashTable<Entry>,
    hasher: FixedState,
    bytes: usize,
    budget: usize,
    dirty: usize,
    /// Every key a flush wrote: a miss on a key not there needs no read.
    flushed: FlushedKeys,
}

/// One change a flush writes.
pub(super) enum Change<'a> {
    Put(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
}

impl WriteCache {
    /// `flushed`: the keys RocksDB may hold besides those this cache will flush.
    pub fn new(budget: usize, flushed: FlushedKeys) -> Self {
        WriteCache { map: HashTable::new(), hasher: FixedState::default(), bytes: 0, budget, dirty: 0, flushed }
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Whether RocksDB cannot hold `key` (a key the cache does not know):
    /// no flush ever wrote it, and it was not there when the subtask began.
    pub fn never_flushed(&self, key: &[u8]) -> bool {
        self.flushed.definitely_absent(key)
    }

    /// Remember that `key` (of an ordered table) is being written to RocksDB.
    pub fn note_flushed(&mut self, key: &[u8]) {
        self.flushed.insert(key);
    }

    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.map.find(self.hash(key), |e| e.key() == key)
    }

    /// Load the slot of `key` (or where it would be) into the CPU cache:
    /// a lookup that compares key lengths alone, short so that the loads
    /// of a batch of them overlap.
    pub fn touch(&self, key: &[u8]) {
        std::hint::black_box(self.map.find(self.hash(key), |e| e.key_len() == key.len()).is_some());
    }

    /// Whether any entry awaits a flush.
    pub fn is_dirty(&self) -> bool {
        self.dirty > 0
    }

    /// Past the budget: the caller flushes, then [`clear`](Self::clear)s.
    pub fn over_budget(&self) -> bool {
        self.bytes > self.budget
    }

    /// `update` of a key the cache knows, in one probe: `f` sees a copy of
    /// the value in `buf` and whether the key is present; if it returns
    /// true, `buf` is the new value. None (nothing done) if the key is unknown.
    pub fn update(&mut self, key: &[u8], buf: &mut Vec<u8>, f: &mut dyn FnMut(&mut Vec<u8>, bool) -> bool) -> Option<()> {
        let hash = self.hash(key);
        let e = self.map.find_mut(hash, |e| e.key() == key)?;
        let found = e.present();
        if found {
            buf.extend_from_slice(e.stored_value());
        }
        let old = e.value().map_or(0, <[u8]>::len);
        if f(buf, found) {
            e.set_value(buf);
            e.set_flag(PRESENT, true);
            if !e.dirty() {
                e.set_flag(DIRTY, true);
                self.dirty += 1;
            }
            self.bytes = (self.bytes + buf.len()).saturating_sub(old);
        }
        Some(())
    }

    /// Set `key` to `value` (None: deleted). `in_db`: whether RocksDB may
    /// hold the key, for a key the cache does not know yet.
    pub fn set(&mut self, key: &[u8], value: Option<&[u8]>, in_db: bool) {
        let len = value.map_or(0, <[u8]>::len);
        let hash = self.hash(key);
        match self.map.find_entry(hash, |e| e.key() == key) {
            Ok(mut occupied) => {
                let e = occupied.get_mut();
                let old = e.value().map_or(0, <[u8]>::len);
                self.bytes = (self.bytes + len).saturating_sub(old);
                if !e.dirty() {
                    e.set_flag(DIRTY, true);
                    self.dirty += 1;
                }
                match value {
                    None if !e.in_db() => {
                        // Never written to RocksDB: forget it altogether.
                        occupied.remove();
                        self.bytes = self.bytes.saturating_sub(key.len() + ENTRY_OVERHEAD);
                        self.dirty -= 1;
                    }
                    None => {
                        e.set_flag(PRESENT, false);
                        e.set_value(&[]);
                    }
                    Some(v) => {
                        e.set_value(v);
                        e.set_flag(PRESENT, true);
                    }
                }
            }
            Err(absent) => {
                if value.is_none() && !in_db {
                    return;
                }
                self.bytes += key.len() + len + ENTRY_OVERHEAD;
                self.dirty += 1;
                let hasher = &self.hasher;
                absent.into_table().insert_unique(hash, Entry::new(key, value, true, in_db), |e| hasher.hash_one(e.key()));
            }
        }
    }

    /// Remember what RocksDB holds for `key` (read from it just now).
    pub fn set_clean(&mut self, key: &[u8], value: &[u8]) {
        let hash = self.hash(key);
        if self.map.find(hash, |e| e.key() == key).is_some() {
            return;
        }
        self.bytes += key.len() + value.len() + ENTRY_OVERHEAD;
        let hasher = &self.hasher;
        self.map.insert_unique(hash, Entry::new(key, Some(value), false, true), |e| hasher.hash_one(e.key()));
    }

    /// Hand every dirty entry (maybe none) to `write` (all in one call, for one batch);
    /// on success they are clean, and deleted entries are forgotten.
    pub fn flush<E>(&mut self, write: impl FnOnce(&mut dyn Iterator<Item = Change<'_>>) -> Result<(), E>) -> Result<(), E> {
        if self.dirty == 0 {
            return write(&mut std::iter::empty());
        }
        // In key order: RocksDB's skip list inserts a sorted run next to
        // the previous key instead of searching from the top for each.
        let mut dirty: Vec<(&[u8], Option<&[u8]>)> = Vec::with_capacity(self.dirty);
        // Before the write: a failed batch may have been applied in part.
        for e in self.map.iter().filter(|e| e.dirty()) {
            if e.present() && e.flags() & NOTED == 0 {
                self.flushed.insert(e.key());
            }
            dirty.push((e.key(), e.value()));
        }
        dirty.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut changes = dirty.into_iter().map(|(k, v)| match v {
            Some(v) => Change::Put(k, v),
            None => Change::Delete(k),
        });
        write(&mut changes)?;
        let mut freed = 0;
        self.map.retain(|e| {
            e.set_flag(DIRTY, false);
            e.set_flag(IN_DB, true);
            e.set_flag(NOTED, e.present());
            if !e.present() {
                freed += e.key().len() + ENTRY_OVERHEAD;
            }
            e.present()
        });
        self.bytes = self.bytes.saturating_sub(freed);
        self.dirty = 0;
        Ok(())
    }

    /// Forget every entry; only after a successful flush.
    pub fn clear(&mut self) {
        debug_assert_eq!(self.dirty, 0, "clearing a write cache with unflushed entries");
        self.map = HashTable::new();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Entry>(), 64);
    }

    #[test]
    fn values_move_between_inline_and_heap_storage() {
        let key = b"0123456789";
        let mut e = Entry::new(key, Some(b"short"), true, false);
        for len in [0usize, 38, 39, 49, 50, 100, 100, 7, 49, 200, 0] {
            let v: Vec<u8> = (0..len).map(|i| i as u8).collect();
            e.set_value(&v);
            assert_eq!((e.key(), e.value()), (&key[..], Some(&v[..])), "length {len}");
        }
        let long = vec![7u8; 300];
        let e = Entry::new(&long, None, true, true);
        assert_eq!((e.key(), e.value()), (&long[..], None));
    }
}

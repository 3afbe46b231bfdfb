//! Which point-table keys this subtask may have written to RocksDB: a set
//! of 32-bit fingerprints of every key its write-behind cache flushed.
//!
//! A brand-new key (a dedup id, a window) misses the cache; without this
//! set, learning that it is absent costs a RocksDB read (memtable and a
//! bloom probe per SST). The set only ever answers "definitely absent" or
//! "maybe": a key whose fingerprint is missing was never flushed, and since
//! the subtask's key groups started empty (a fresh DB, see
//! [`super::BundleDb::claim`]) RocksDB cannot hold it. Two keys sharing a
//! fingerprint only cost a read. A DB rebuilt from a checkpoint holds keys
//! this set never saw: there the set is off and every miss reads RocksDB.
//!
//! Open addressing, linear probing, 4 bytes a slot, at most 3/4 full; the
//! slot index is a function of the fingerprint alone, so the table grows
//! without the keys. Past [`MAX_SLOTS`] it is dropped (off) rather than
//! grow without bound.

use std::hash::BuildHasher;

use foldhash::fast::FixedState;

/// 2^25 slots: 128 MiB, about 25 M keys.
const MAX_SLOTS: usize = 1 << 25;
const FIRST_SLOTS: usize = 1 << 10;

pub(super) struct FlushedKeys {
    /// 0: empty. None: off (every key "maybe").
    slots: Option<Vec<u32>>,
    len: usize,
    hasher: FixedState,
}

impl FlushedKeys {
    /// On: the subtask's key groups are empty in RocksDB now.
    pub fn on() -> Self {
        FlushedKeys { slots: Some(vec![0; FIRST_SLOTS]), len: 0, hasher: FixedState::with_seed(0x5eed_f11e) }
    }

    pub fn off() -> Self {
        FlushedKeys { slots: None, len: 0, hasher: FixedState::with_seed(0) }
    }

    #[cfg(test)]
    pub fn is_on(&self) -> bool {
        self.slots.is_some()
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.slots.as_ref().map_or(0, |s| s.len() * 4)
    }

    fn fingerprint(&self, key: &[u8]) -> u32 {
        let h = self.hasher.hash_one(key);
        // The high half (foldhash mixes it best); 0 marks an empty slot.
        ((h >> 32) as u32).max(1)
    }

    /// Whether RocksDB cannot hold `key` (false: it may).
    pub fn definitely_absent(&self, key: &[u8]) -> bool {
        let Some(slots) = &self.slots else { return false };
        let fp = self.fingerprint(key);
        let mask = slots.len() - 1;
        let mut i = fp as usize & mask;
        loop {
            match slots[i] {
                0 => return true,
                s if s == fp => return false,
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Remember that `key` is being written to RocksDB.
    pub fn insert(&mut self, key: &[u8]) {
        let fp = self.fingerprint(key);
        let Some(slots) = &mut self.slots else { return };
        if insert_fp(slots, fp) {
            self.len += 1;
        }
        if self.len * 4 > slots.len() * 3 {
            self.grow();
        }
    }

    fn grow(&mut self) {
        let Some(old) = self.slots.take() else { return };
        let n = old.len() * 2;
        if n > MAX_SLOTS {
            tracing::debug!(keys = self.len, "The RocksDB write cache stops tracking flushed keys: every new key is read.");
            return;
        }
        let mut slots = vec![0u32; n];
        for fp in old.into_iter().filter(|&fp| fp != 0) {
            insert_fp(&mut slots, fp);
        }
        self.slots = Some(slots);
    }
}

/// Insert `fp`; false if it was there.
fn insert_fp(slots: &mut [u32], fp: u32) -> bool {
    let mask = slots.len() - 1;
    let mut i = fp as usize & mask;
    loop {
        match slots[i] {
            0 => {
                slots[i] = fp;
                return true;
            }
            s if s == fp => return false,
            _ => i = (i + 1) & mask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_inserted_key_may_be_present_across_growth() {
        let mut f = FlushedKeys::on();
        let keys: Vec<Vec<u8>> = (0u32..50_000).map(|i| i.to_be_bytes().to_vec()).collect();
        for (n, k) in keys.iter().enumerate() {
            f.insert(k);
            // Checked as it grows: a key inserted before a rehash stays found.
            if n % 997 == 0 {
                assert!(keys[..=n].iter().all(|k| !f.definitely_absent(k)));
            }
        }
        assert!(keys.iter().all(|k| !f.definitely_absent(k)));
        assert!(f.bytes() >= 50_000 * 4 * 4 / 3);
        // Keys never inserted are nearly all reported absent (fingerprint collisions aside).
        let absent = (50_000u32..60_000).filter(|i| f.definitely_absent(&i.to_be_bytes())).count();
        assert!(absent > 9_900, "{absent}");
    }

    #[test]
    fn off_says_maybe_to_everything() {
        let mut f = FlushedKeys::off();
        f.insert(b"a");
        assert!(!f.definitely_absent(b"a"));
        assert!(!f.definitely_absent(b"never"));
        assert!(!f.is_on());
    }

    #[test]
    fn reinserting_a_key_does_not_grow() {
        let mut f = FlushedKeys::on();
        for _ in 0..10_000 {
            f.insert(b"same");
        }
        assert_eq!(f.len, 1);
        assert_eq!(f.bytes(), FIRST_SLOTS * 4);
    }
}

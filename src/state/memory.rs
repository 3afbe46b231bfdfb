//! The memory backend: one map per (table, key group), owned by the subtask.
//!
//! Point tables are hash tables; ordered tables are B-trees so timers and
//! windows can be scanned by end time. Short keys and values are stored
//! inline (a point entry holds key and value in 12 or 16 bytes when they
//! fit in 11 or 15, in 32 when they fit in 29, in a 64-byte cache line when
//! they fit in 62), so a lookup touches one bucket, not three allocations,
//! and an update of a short value allocates nothing.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::{Bound, Range};

use hashbrown::hash_table::{Entry as Slot, HashTable};

use super::{snapshot, BufferPool, KeyedState, ScanFn, StateError, StateSnapshot, StateStats, TableId, TableKind, TableSpec};
use crate::codec::Enc;
use crate::types::KeyGroup;

/// Bytes stored inline; 22 keeps `Bytes` at 24 bytes, like a boxed slice plus tag.
const INLINE: usize = 22;

/// A byte string, inline when short.
#[derive(Clone)]
pub(super) enum Bytes {
    Inline { len: u8, data: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Bytes {
    pub(super) fn new(b: &[u8]) -> Self {
        if b.len() <= INLINE {
            let mut data = [0; INLINE];
            data[..b.len()].copy_from_slice(b);
            Bytes::Inline { len: b.len() as u8, data }
        } else {
            Bytes::Heap(b.into())
        }
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Inline { len, data } => &data[..*len as usize],
            Bytes::Heap(b) => b,
        }
    }

    /// Overwrite in place when the new value fits the old storage.
    pub(super) fn set(&mut self, b: &[u8]) {
        match self {
            Bytes::Inline { len, data } if b.len() <= INLINE => {
                data[..b.len()].copy_from_slice(b);
                *len = b.len() as u8;
            }
            Bytes::Heap(h) if h.len() == b.len() => h.copy_from_slice(b),
            _ => *self = Bytes::new(b),
        }
    }
}

// Equality, order and hash are those of the byte slice, so `[u8]` can look up.
impl PartialEq for Bytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl Eq for Bytes {}
impl PartialOrd for Bytes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}
impl Hash for Bytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}
impl Borrow<[u8]> for Bytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

/// Bytes of key and value stored inline in a point entry: 29 keeps `Entry`
/// at 32 bytes, two to a cache line.
const ENTRY_INLINE: usize = 29;

/// A point-table entry: key and value side by side, inline when they fit
/// together (most keys with an accumulator or an empty value).
enum Entry {
    Inline {
        klen: u8,
        vlen: u8,
        data: [u8; ENTRY_INLINE],
    },
    /// `data` is key ++ value.
    Heap {
        klen: u32,
        data: Box<[u8]>,
    },
}

impl Entry {
    fn new(key: &[u8], value: &[u8]) -> Self {
        let n = key.len() + value.len();
        if n <= ENTRY_INLINE {
            let mut data = [0; ENTRY_INLINE];
            data[..key.len()].copy_from_slice(key);
            data[key.len()..n].copy_from_slice(value);
            Entry::Inline { klen: key.len() as u8, vlen: value.len() as u8, data }
        } else {
            let mut data = Vec::with_capacity(n);
            data.extend_from_slice(key);
            data.extend_from_slice(value);
            Entry::Heap { klen: key.len() as u32, data: data.into_boxed_slice() }
        }
    }

    fn key(&self) -> &[u8] {
        match self {
            Entry::Inline { klen, data, .. } => &data[..*klen as usize],
            Entry::Heap { klen, data } => &data[..*klen as usize],
        }
    }

    fn value(&self) -> &[u8] {
        match self {
            Entry::Inline { klen, vlen, data } => &data[*klen as usize..(*klen + *vlen) as usize],
            Entry::Heap { klen, data } => &data[*klen as usize..],
        }
    }

    /// Replace the value, in place when it fits the current storage.
    fn set_value(&mut self, value: &[u8]) {
        match self {
            Entry::Inline { klen, vlen, data } if *klen as usize + value.len() <= ENTRY_INLINE => {
                let k = *klen as usize;
                data[k..k + value.len()].copy_from_slice(value);
                *vlen = value.len() as u8;
            }
            Entry::Heap { klen, data } if data.len() - *klen as usize == value.len() => {
                data[*klen as usize..].copy_from_slice(value);
            }
            _ => *self = Entry::new(self.key(), value),
        }
    }
}

/// A point-table entry of at most N (<= 15) bytes of key and value: both
/// lengths in one byte (the key's in the high nibble), then key ++ value.
/// `Small<11>` is 12 bytes: an integer key (9 bytes) with an empty value,
/// dedup's seen-set entry, fits, as does a dirty mark of a 6-byte string
/// key; `Small<15>` is 16 bytes, four to a cache line.
#[derive(Clone, Copy)]
struct Small<const N: usize> {
    lens: u8,
    data: [u8; N],
}

impl<const N: usize> Small<N> {
    fn klen(&self) -> usize {
        (self.lens >> 4) as usize
    }
}

impl Small<11> {
    /// The same entry in the next wider size (the same length byte).
    fn widen(&self) -> Small<15> {
        let mut data = [0; 15];
        data[..11].copy_from_slice(&self.data);
        Small { lens: self.lens, data }
    }
}

/// What the point-table code needs of an entry type.
trait PointEntry: Sized {
    /// The entry, or None if key and value do not fit this type.
    fn make(key: &[u8], value: &[u8]) -> Option<Self>;
    fn key(&self) -> &[u8];
    fn value(&self) -> &[u8];
    /// Replace the value; false (entry unchanged) if it does not fit.
    fn try_set_value(&mut self, value: &[u8]) -> bool;
    /// The key's length, read from the slot itself (never a heap block).
    fn key_len(&self) -> usize {
        self.key().len()
    }
}

impl<const N: usize> PointEntry for Small<N> {
    fn make(key: &[u8], value: &[u8]) -> Option<Self> {
        let n = key.len() + value.len();
        if n > N || N > 15 {
            return None;
        }
        let mut data = [0; N];
        data[..key.len()].copy_from_slice(key);
        data[key.len()..n].copy_from_slice(value);
        // Both lengths are at most 15: one nibble each.
        Some(Small { lens: (key.len() as u8) << 4 | value.len() as u8, data })
    }

    fn key(&self) -> &[u8] {
        &self.data[..self.klen()]
    }

    fn value(&self) -> &[u8] {
        let k = self.klen();
        &self.data[k..k + (self.lens & 0x0f) as usize]
    }

    fn try_set_value(&mut self, value: &[u8]) -> bool {
        let k = self.klen();
        if k + value.len() > N {
            return false;
        }
        self.data[k..k + value.len()].copy_from_slice(value);
        self.lens = (k as u8) << 4 | value.len() as u8;
        true
    }
}

impl PointEntry for Entry {
    fn make(key: &[u8], value: &[u8]) -> Option<Self> {
        Some(Entry::new(key, value))
    }

    fn key(&self) -> &[u8] {
        Entry::key(self)
    }

    fn key_len(&self) -> usize {
        match self {
            Entry::Inline { klen, .. } => *klen as usize,
            Entry::Heap { klen, .. } => *klen as usize,
        }
    }

    fn value(&self) -> &[u8] {
        Entry::value(self)
    }

    fn try_set_value(&mut self, value: &[u8]) -> bool {
        self.set_value(value);
        true
    }
}

/// Bytes of key and value in a [`Line`].
const LINE: usize = 62;

/// A point-table entry of at most 62 bytes of key and value in one 64-byte
/// cache line (aligned to it): a running count + sum (an 11-byte key and
/// 42 bytes of accumulators) is read and written with one memory access,
/// where an [`Entry`] would need its slot and a heap block.
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Line {
    klen: u8,
    vlen: u8,
    data: [u8; LINE],
}

impl PointEntry for Line {
    fn make(key: &[u8], value: &[u8]) -> Option<Self> {
        let n = key.len() + value.len();
        if n > LINE {
            return None;
        }
        let mut data = [0; LINE];
        data[..key.len()].copy_from_slice(key);
        data[key.len()..n].copy_from_slice(value);
        Some(Line { klen: key.len() as u8, vlen: value.len() as u8, data })
    }

    fn key(&self) -> &[u8] {
        &self.data[..self.klen as usize]
    }

    fn key_len(&self) -> usize {
        self.klen as usize
    }

    fn value(&self) -> &[u8] {
        let k = self.klen as usize;
        &self.data[k..k + self.vlen as usize]
    }

    fn try_set_value(&mut self, value: &[u8]) -> bool {
        let k = self.klen as usize;
        if k + value.len() > LINE {
            return false;
        }
        self.data[k..k + value.len()].copy_from_slice(value);
        self.vlen = value.len() as u8;
        true
    }
}

type KeyHasher = foldhash::fast::RandomState;

enum Map {
    /// Point tables whose entries all fit `Small<11>` or `Small<15>` (a
    /// third or half the memory of `Point`); a map becomes the narrowest
    /// wider kind that fits at the first entry that does not fit.
    Tiny(HashTable<Small<11>>),
    Small(HashTable<Small<15>>),
    /// Point tables whose first entry too long for `Small` fit a [`Line`]
    /// but not an inline [`Entry`]; an entry longer than a line makes it `Point`.
    Line(HashTable<Line>),
    Point(HashTable<Entry>),
    Ordered(BTreeMap<Bytes, Bytes>),
}

struct Table {
    spec: TableSpec,
    /// One map per owned key group, indexed by `kg - key_groups.start`.
    groups: Vec<Map>,
    /// Entries and key + value bytes, counted as they change (plain
    /// integers: only the owning task writes this state).
    stats: StateStats,
}

pub struct MemoryState {
    key_groups: Range<KeyGroup>,
    tables: Vec<Table>,
    hasher: KeyHasher,
    /// The buffer `update` hands out.
    scratch: Vec<u8>,
    /// The last snapshot's buffer, back from the checkpoint writer.
    pool: BufferPool,
}

fn hash(hasher: &KeyHasher, key: &[u8]) -> u64 {
    hasher.hash_one(key)
}

/// Load the slot `key` is in (or would be) into the CPU cache: a lookup
/// that compares key lengths alone, so it is short (no key compare, no
/// heap block) and the loads of many of them overlap.
fn touch_in<E: PointEntry>(m: &HashTable<E>, hasher: &KeyHasher, key: &[u8]) {
    std::hint::black_box(m.find(hash(hasher, key), |e| e.key_len() == key.len()).is_some());
}

fn find_in<'a, E: PointEntry>(m: &'a HashTable<E>, hasher: &KeyHasher, key: &[u8]) -> Option<&'a [u8]> {
    m.find(hash(hasher, key), |e| e.key() == key).map(E::value)
}

/// Store `key` = `value`; false (nothing changed) if the entry does not fit `E`.
fn put_in<E: PointEntry>(m: &mut HashTable<E>, hasher: &KeyHasher, stats: &mut StateStats, key: &[u8], value: &[u8]) -> bool {
    match m.entry(hash(hasher, key), |e| e.key() == key, |e| hash(hasher, e.key())) {
        Slot::Occupied(mut e) => {
            let old = e.get().value().len();
            let set = e.get_mut().try_set_value(value);
            if set {
                stats.resized(old, value.len());
            }
            set
        }
        Slot::Vacant(e) => match E::make(key, value) {
            Some(entry) => {
                e.insert(entry);
                stats.added(key.len(), value.len());
                true
            }
            None => false,
        },
    }
}

/// `update` on a point table: false if the new value (left in `buf`) does
/// not fit `E` and must be stored after widening.
fn update_in<E: PointEntry>(
    m: &mut HashTable<E>,
    hasher: &KeyHasher,
    stats: &mut StateStats,
    key: &[u8],
    buf: &mut Vec<u8>,
    f: &mut dyn FnMut(&mut Vec<u8>, bool) -> bool,
) -> bool {
    match m.entry(hash(hasher, key), |e| e.key() == key, |e| hash(hasher, e.key())) {
        Slot::Occupied(mut e) => {
            let old = e.get().value().len();
            buf.extend_from_slice(e.get().value());
            if !f(buf, true) {
                return true;
            }
            let set = e.get_mut().try_set_value(buf);
            if set {
                stats.resized(old, buf.len());
            }
            set
        }
        Slot::Vacant(e) => {
            if !f(buf, false) {
                return true;
            }
            match E::make(key, buf) {
                Some(entry) => {
                    e.insert(entry);
                    stats.added(key.len(), buf.len());
                    true
                }
                None => false,
            }
        }
    }
}

/// `put_if_absent` on a point table: None if absent but the entry does not fit `E`.
fn put_if_absent_in<E: PointEntry>(
    m: &mut HashTable<E>,
    hasher: &KeyHasher,
    stats: &mut StateStats,
    key: &[u8],
    value: &[u8],
) -> Option<bool> {
    match m.entry(hash(hasher, key), |e| e.key() == key, |e| hash(hasher, e.key())) {
        Slot::Occupied(_) => Some(false),
        Slot::Vacant(e) => {
            e.insert(E::make(key, value)?);
            stats.added(key.len(), value.len());
            Some(true)
        }
    }
}

fn take_in<E: PointEntry>(m: &mut HashTable<E>, hasher: &KeyHasher, stats: &mut StateStats, key: &[u8], out: Option<&mut Vec<u8>>) -> bool {
    match m.find_entry(hash(hasher, key), |e| e.key() == key) {
        Ok(e) => {
            stats.removed(key.len(), e.get().value().len());
            if let Some(out) = out {
                out.extend_from_slice(e.get().value());
            }
            e.remove();
            true
        }
        Err(_) => false,
    }
}

/// Turn a `Tiny`, `Small` or `Line` point map into a wider kind that holds
/// `key` = `value`, then store it: from `Tiny` or `Small` the narrowest
/// that fits it (`Point` for entries an `Entry` holds inline, since a
/// `Line` is twice its size), from `Line` always `Point`.
fn put_wide(map: &mut Map, hasher: &KeyHasher, stats: &mut StateStats, key: &[u8], value: &[u8]) {
    let n = key.len() + value.len();
    let fits_small = n <= 15;
    let to_line = n > ENTRY_INLINE && n <= LINE;
    match map {
        Map::Tiny(tiny) if fits_small => {
            let mut wide = HashTable::with_capacity(tiny.len() + 1);
            for e in tiny.drain() {
                wide.insert_unique(hash(hasher, e.key()), e.widen(), |x: &Small<15>| hash(hasher, x.key()));
            }
            *map = Map::Small(wide);
        }
        Map::Tiny(tiny) if to_line => *map = Map::Line(widened(tiny, hasher)),
        Map::Small(small) if to_line => *map = Map::Line(widened(small, hasher)),
        Map::Tiny(tiny) => *map = Map::Point(widened(tiny, hasher)),
        Map::Small(small) if !fits_small => *map = Map::Point(widened(small, hasher)),
        Map::Line(line) if n > LINE => *map = Map::Point(widened(line, hasher)),
        _ => {}
    }
    match map {
        Map::Small(m) => {
            put_in(m, hasher, stats, key, value);
        }
        Map::Line(m) => {
            put_in(m, hasher, stats, key, value);
        }
        Map::Point(m) => {
            put_in(m, hasher, stats, key, value);
        }
        _ => {}
    }
}

/// The entries of `from` (emptied) in a table of a wider entry type.
fn widened<E: PointEntry, W: PointEntry>(from: &mut HashTable<E>, hasher: &KeyHasher) -> HashTable<W> {
    let mut wide = HashTable::with_capacity(from.len() + 1);
    for e in from.drain() {
        let w = W::make(e.key(), e.value()).expect("a wider entry type holds every narrower entry");
        wide.insert_unique(hash(hasher, e.key()), w, |x: &W| hash(hasher, x.key()));
    }
    wide
}

type Parts<'a> = (&'a mut Map, &'a KeyHasher, &'a mut Vec<u8>, &'a mut StateStats);

impl MemoryState {
    pub fn new(tables: &[TableSpec], key_groups: Range<KeyGroup>) -> Self {
        let n = key_groups.len();
        let tables = tables
            .iter()
            .map(|&spec| Table {
                spec,
                groups: (0..n)
                    .map(|_| match spec.kind {
                        TableKind::Point => Map::Tiny(HashTable::new()),
                        TableKind::Ordered => Map::Ordered(BTreeMap::new()),
                    })
                    .collect(),
                stats: StateStats::default(),
            })
            .collect();
        MemoryState { key_groups, tables, hasher: KeyHasher::default(), scratch: Vec::new(), pool: BufferPool::default() }
    }

    fn map(&self, table: TableId, kg: KeyGroup) -> Result<&Map, StateError> {
        let i = self.index(kg)?;
        Ok(&self.tables[table].groups[i])
    }

    fn index(&self, kg: KeyGroup) -> Result<usize, StateError> {
        if self.key_groups.contains(&kg) {
            Ok((kg - self.key_groups.start) as usize)
        } else {
            Err(StateError::ForeignKeyGroup { kg, owned: self.key_groups.clone() })
        }
    }

    /// The map of (table, kg), the hasher, the scratch buffer and the
    /// counts, borrowed apart.
    fn parts(&mut self, table: TableId, kg: KeyGroup) -> Result<Parts<'_>, StateError> {
        let i = self.index(kg)?;
        let t = &mut self.tables[table];
        Ok((&mut t.groups[i], &self.hasher, &mut self.scratch, &mut t.stats))
    }

    fn find<'a>(&self, map: &'a Map, key: &[u8]) -> Option<&'a [u8]> {
        match map {
            Map::Tiny(m) => find_in(m, &self.hasher, key),
            Map::Small(m) => find_in(m, &self.hasher, key),
            Map::Line(m) => find_in(m, &self.hasher, key),
            Map::Point(m) => find_in(m, &self.hasher, key),
            Map::Ordered(m) => m.get(key).map(Bytes::as_slice),
        }
    }

    /// The counts over every table.
    fn total(&self) -> StateStats {
        self.tables
            .iter()
            .fold(StateStats::default(), |all, t| StateStats { keys: all.keys + t.stats.keys, bytes: all.bytes + t.stats.bytes })
    }

    /// The exact size of the canonical snapshot of `tables` (see
    /// `snapshot::write`: 4-byte lengths before each key and value), from
    /// the counts kept as entries change: no pass over the entries.
    fn snapshot_size(&self, tables: &[TableSpec]) -> usize {
        let headers: usize = tables.iter().map(|spec| 4 + spec.name.len() + 4 + self.key_groups.len() * (2 + 8)).sum();
        let all = self.total();
        2 + headers + 8 * all.keys as usize + all.bytes as usize
    }

    /// `snapshot::write` of this state's own tables, walking the maps
    /// directly instead of through a `scan_all` callback per entry.
    fn write_snapshot(&self, out: &mut Vec<u8>) {
        fn put<'a>(out: &mut Vec<u8>, entries: impl Iterator<Item = (&'a [u8], &'a [u8])>) {
            for (k, v) in entries {
                out.put_bytes(k);
                out.put_bytes(v);
            }
        }
        out.put_u16(self.tables.len() as u16);
        for table in &self.tables {
            out.put_str(table.spec.name);
            out.put_u32(table.groups.len() as u32);
            for (kg, map) in self.key_groups.clone().zip(&table.groups) {
                out.put_u16(kg);
                match map {
                    Map::Tiny(m) => {
                        out.put_u64(m.len() as u64);
                        put(out, m.iter().map(|e| (e.key(), e.value())));
                    }
                    Map::Small(m) => {
                        out.put_u64(m.len() as u64);
                        put(out, m.iter().map(|e| (e.key(), e.value())));
                    }
                    Map::Line(m) => {
                        out.put_u64(m.len() as u64);
                        put(out, m.iter().map(|e| (e.key(), e.value())));
                    }
                    Map::Point(m) => {
                        out.put_u64(m.len() as u64);
                        put(out, m.iter().map(|e| (e.key(), e.value())));
                    }
                    Map::Ordered(m) => {
                        out.put_u64(m.len() as u64);
                        put(out, m.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
                    }
                }
            }
        }
    }
}

impl KeyedState for MemoryState {
    fn key_groups(&self) -> Range<KeyGroup> {
        self.key_groups.clone()
    }

    fn get(&self, table: TableId, kg: KeyGroup, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        let found = self.find(self.map(table, kg)?, key);
        out.clear();
        match found {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn contains(&self, table: TableId, kg: KeyGroup, key: &[u8]) -> Result<bool, StateError> {
        Ok(self.find(self.map(table, kg)?, key).is_some())
    }

    fn prefetch(&self, table: TableId, kg: KeyGroup, key: &[u8]) {
        match self.map(table, kg) {
            Ok(Map::Tiny(m)) => touch_in(m, &self.hasher, key),
            Ok(Map::Small(m)) => touch_in(m, &self.hasher, key),
            Ok(Map::Line(m)) => touch_in(m, &self.hasher, key),
            Ok(Map::Point(m)) => touch_in(m, &self.hasher, key),
            Ok(Map::Ordered(_)) | Err(_) => {}
        }
    }

    fn put(&mut self, table: TableId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        let (map, hasher, _, stats) = self.parts(table, kg)?;
        match map {
            Map::Tiny(m) => {
                if !put_in(m, hasher, stats, key, value) {
                    put_wide(map, hasher, stats, key, value);
                }
            }
            Map::Small(m) => {
                if !put_in(m, hasher, stats, key, value) {
                    put_wide(map, hasher, stats, key, value);
                }
            }
            Map::Line(m) => {
                if !put_in(m, hasher, stats, key, value) {
                    put_wide(map, hasher, stats, key, value);
                }
            }
            Map::Point(m) => {
                put_in(m, hasher, stats, key, value);
            }
            Map::Ordered(m) => match m.get_mut(key) {
                Some(v) => {
                    stats.resized(v.as_slice().len(), value.len());
                    v.set(value)
                }
                None => {
                    m.insert(Bytes::new(key), Bytes::new(value));
                    stats.added(key.len(), value.len());
                }
            },
        }
        Ok(())
    }

    fn delete(&mut self, table: TableId, kg: KeyGroup, key: &[u8]) -> Result<bool, StateError> {
        let (map, hasher, _, stats) = self.parts(table, kg)?;
        Ok(match map {
            Map::Tiny(m) => take_in(m, hasher, stats, key, None),
            Map::Small(m) => take_in(m, hasher, stats, key, None),
            Map::Line(m) => take_in(m, hasher, stats, key, None),
            Map::Point(m) => take_in(m, hasher, stats, key, None),
            Map::Ordered(m) => match m.remove(key) {
                Some(v) => {
                    stats.removed(key.len(), v.as_slice().len());
                    true
                }
                None => false,
            },
        })
    }

    fn take(&mut self, table: TableId, kg: KeyGroup, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        let (map, hasher, _, stats) = self.parts(table, kg)?;
        out.clear();
        Ok(match map {
            Map::Tiny(m) => take_in(m, hasher, stats, key, Some(out)),
            Map::Small(m) => take_in(m, hasher, stats, key, Some(out)),
            Map::Line(m) => take_in(m, hasher, stats, key, Some(out)),
            Map::Point(m) => take_in(m, hasher, stats, key, Some(out)),
            Map::Ordered(m) => match m.remove(key) {
                Some(v) => {
                    stats.removed(key.len(), v.as_slice().len());
                    out.extend_from_slice(v.as_slice());
                    true
                }
                None => false,
            },
        })
    }

    fn scan_range(&self, table: TableId, kg: KeyGroup, from: &[u8], to: Option<&[u8]>, f: &mut ScanFn<'_>) -> Result<(), StateError> {
        let Map::Ordered(m) = self.map(table, kg)? else {
            return Err(StateError::NotOrdered { table: self.tables[table].spec.name });
        };
        let upper = match to {
            // An empty range: `BTreeMap::range` would panic on `from > to`.
            Some(t) if t <= from => return Ok(()),
            Some(t) => Bound::Excluded(t),
            None => Bound::Unbounded,
        };
        for (k, v) in m.range::<[u8], _>((Bound::Included(from), upper)) {
            if f(k.as_slice(), v.as_slice()).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn scan_all(&self, table: TableId, kg: KeyGroup, f: &mut ScanFn<'_>) -> Result<(), StateError> {
        match self.map(table, kg)? {
            Map::Tiny(m) => {
                for e in m {
                    if f(e.key(), e.value()).is_break() {
                        break;
                    }
                }
            }
            Map::Small(m) => {
                for e in m {
                    if f(e.key(), e.value()).is_break() {
                        break;
                    }
                }
            }
            Map::Line(m) => {
                for e in m {
                    if f(e.key(), e.value()).is_break() {
                        break;
                    }
                }
            }
            Map::Point(m) => {
                for e in m {
                    if f(e.key(), e.value()).is_break() {
                        break;
                    }
                }
            }
            Map::Ordered(m) => {
                for (k, v) in m {
                    if f(k.as_slice(), v.as_slice()).is_break() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    fn len(&self, table: TableId) -> usize {
        self.tables[table]
            .groups
            .iter()
            .map(|g| match g {
                Map::Tiny(m) => m.len(),
                Map::Small(m) => m.len(),
                Map::Line(m) => m.len(),
                Map::Point(m) => m.len(),
                Map::Ordered(m) => m.len(),
            })
            .sum()
    }

    fn update(
        &mut self,
        table: TableId,
        kg: KeyGroup,
        key: &[u8],
        f: &mut dyn FnMut(&mut Vec<u8>, bool) -> bool,
    ) -> Result<(), StateError> {
        let (map, hasher, buf, stats) = self.parts(table, kg)?;
        buf.clear();
        match map {
            Map::Tiny(m) => {
                if !update_in(m, hasher, stats, key, buf, f) {
                    put_wide(map, hasher, stats, key, buf);
                }
            }
            Map::Small(m) => {
                if !update_in(m, hasher, stats, key, buf, f) {
                    put_wide(map, hasher, stats, key, buf);
                }
            }
            Map::Line(m) => {
                if !update_in(m, hasher, stats, key, buf, f) {
                    put_wide(map, hasher, stats, key, buf);
                }
            }
            Map::Point(m) => {
                update_in(m, hasher, stats, key, buf, f);
            }
            Map::Ordered(m) => match m.get_mut(key) {
                Some(v) => {
                    buf.extend_from_slice(v.as_slice());
                    if f(buf, true) {
                        stats.resized(v.as_slice().len(), buf.len());
                        v.set(buf);
                    }
                }
                None => {
                    if f(buf, false) {
                        m.insert(Bytes::new(key), Bytes::new(buf));
                        stats.added(key.len(), buf.len());
                    }
                }
            },
        }
        Ok(())
    }

    fn put_if_absent(&mut self, table: TableId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<bool, StateError> {
        let (map, hasher, _, stats) = self.parts(table, kg)?;
        Ok(match map {
            Map::Tiny(m) => match put_if_absent_in(m, hasher, stats, key, value) {
                Some(inserted) => inserted,
                None => {
                    put_wide(map, hasher, stats, key, value);
                    true
                }
            },
            Map::Small(m) => match put_if_absent_in(m, hasher, stats, key, value) {
                Some(inserted) => inserted,
                None => {
                    put_wide(map, hasher, stats, key, value);
                    true
                }
            },
            Map::Line(m) => match put_if_absent_in(m, hasher, stats, key, value) {
                Some(inserted) => inserted,
                None => {
                    put_wide(map, hasher, stats, key, value);
                    true
                }
            },
            Map::Point(m) => put_if_absent_in(m, hasher, stats, key, value).unwrap_or(false),
            // One search: the key's copy is made first, present or not (a
            // search costs more than a small allocation in a large table).
            Map::Ordered(m) => match m.entry(Bytes::new(key)) {
                std::collections::btree_map::Entry::Occupied(_) => false,
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(Bytes::new(value));
                    stats.added(key.len(), value.len());
                    true
                }
            },
        })
    }

    fn drain_range(
        &mut self,
        table: TableId,
        kg: KeyGroup,
        from: &[u8],
        to: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StateError> {
        let name = self.tables[table].spec.name;
        let (map, _, _, stats) = self.parts(table, kg)?;
        let Map::Ordered(m) = map else {
            return Err(StateError::NotOrdered { table: name });
        };
        if to.is_some_and(|t| t <= from) || m.is_empty() {
            return Ok(());
        }
        // Two splits instead of a search per key; putting back what is
        // above `to` costs nothing when nothing is left below `from` (a
        // join's time index, cleared from its start).
        let mut cut = m.split_off(from);
        let mut above = match to {
            Some(t) => cut.split_off(t),
            None => BTreeMap::new(),
        };
        m.append(&mut above);
        for (k, v) in &cut {
            f(k.as_slice(), v.as_slice());
            stats.removed(k.as_slice().len(), v.as_slice().len());
        }
        Ok(())
    }

    fn stats(&self) -> Option<StateStats> {
        // A stateless operator's empty handle has nothing to report.
        (!self.tables.is_empty()).then(|| self.total())
    }

    fn table_stats(&self, table: TableId) -> Option<StateStats> {
        self.tables.get(table).map(|t| t.stats)
    }

    fn snapshot(&self, tables: &[TableSpec]) -> Result<StateSnapshot, StateError> {
        let size = self.snapshot_size(tables);
        let mut out = self.pool.take();
        if out.capacity() < size {
            // Twice the size: while the state grows, the next snapshots
            // still fit and write pages this one touched. The first touch
            // of a page (a fault, zeroing) costs more than writing the
            // snapshot into it; pages never touched cost nothing.
            drop(out);
            out = Vec::with_capacity(2 * size);
        }
        // The operator's tables are this state's tables: walk them directly.
        let own = tables.len() == self.tables.len() && tables.iter().zip(&self.tables).all(|(a, b)| *a == b.spec);
        if own {
            self.write_snapshot(&mut out);
        } else {
            snapshot::write(self, tables, &mut out)?;
        }
        Ok(StateSnapshot::Pooled(out, self.pool.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::ControlFlow;

    const T: [TableSpec; 2] = [TableSpec { name: "seen", kind: TableKind::Point }, TableSpec { name: "timers", kind: TableKind::Ordered }];

    #[test]
    fn put_get_delete_by_key_group() {
        let mut s = MemoryState::new(&T, 4..8);
        let mut out = Vec::new();
        s.put(0, 5, b"a", b"1").unwrap();
        assert!(s.get(0, 5, b"a", &mut out).unwrap());
        assert_eq!(out, b"1");
        assert!(!s.get(0, 6, b"a", &mut out).unwrap(), "key groups are separate");
        assert!(matches!(s.put(0, 8, b"a", b"1"), Err(StateError::ForeignKeyGroup { .. })));
        assert!(s.delete(0, 5, b"a").unwrap());
        assert_eq!(s.len(0), 0);
    }

    #[test]
    fn ordered_scan_respects_bounds() {
        let mut s = MemoryState::new(&T, 0..1);
        for k in [b"a", b"b", b"c", b"d"] {
            s.put(1, 0, k, b"").unwrap();
        }
        let mut seen = Vec::new();
        s.scan_range(1, 0, b"b", Some(b"d"), &mut |k, _| {
            seen.push(k.to_vec());
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(seen, vec![b"b".to_vec(), b"c".to_vec()]);
        for (from, to) in [(&b"d"[..], &b"b"[..]), (b"c", b"c")] {
            s.scan_range(1, 0, from, Some(to), &mut |k, _| panic!("nothing in [{from:?}, {to:?}) but {k:?}")).unwrap();
        }
        assert!(matches!(s.scan_range(0, 0, b"", None, &mut |_, _| ControlFlow::Continue(())), Err(StateError::NotOrdered { .. })));
    }

    #[test]
    fn a_drained_range_leaves_the_rest_and_the_stats_right() {
        let mut s = MemoryState::new(&T, 0..1);
        for k in [&b"a"[..], b"b", b"c", b"d", b"e"] {
            s.put(1, 0, k, b"vv").unwrap();
        }
        let mut seen = Vec::new();
        s.drain_range(1, 0, b"b", Some(b"d"), &mut |k, v| seen.push((k.to_vec(), v.to_vec()))).unwrap();
        assert_eq!(seen, [(b"b".to_vec(), b"vv".to_vec()), (b"c".to_vec(), b"vv".to_vec())]);
        s.drain_range(1, 0, b"d", Some(b"b"), &mut |k, _| panic!("an empty range, but {k:?}")).unwrap();
        let mut left = Vec::new();
        s.scan_range(1, 0, b"", None, &mut |k, _| {
            left.push(k.to_vec());
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(left, [b"a".to_vec(), b"d".to_vec(), b"e".to_vec()]);
        assert_eq!(s.stats(), Some(StateStats { keys: 3, bytes: 9 }));
        s.drain_range(1, 0, b"", None, &mut |_, _| {}).unwrap();
        assert_eq!((s.len(1), s.stats()), (0, Some(StateStats { keys: 0, bytes: 0 })));
        assert!(matches!(s.drain_range(0, 0, b"", None, &mut |_, _| {}), Err(StateError::NotOrdered { .. })));
    }

    #[test]
    fn bytes_are_small_and_switch_storage_on_resize() {
        assert_eq!(std::mem::size_of::<Bytes>(), 24);
        let long = [7u8; 40];
        let mut b = Bytes::new(b"abc");
        assert!(matches!(b, Bytes::Inline { .. }));
        b.set(&long);
        assert_eq!(b.as_slice(), long);
        b.set(b"x");
        assert_eq!(b.as_slice(), b"x");
        assert!(matches!(b, Bytes::Inline { .. }));
        b.set(b"");
        assert_eq!(b.as_slice(), b"");
    }

    #[test]
    fn entries_are_small_and_switch_storage_on_resize() {
        assert_eq!(std::mem::size_of::<Entry>(), 32);
        let long = [7u8; 40];
        let mut e = Entry::new(b"key", b"v");
        assert!(matches!(e, Entry::Inline { .. }));
        e.set_value(&long);
        assert!(matches!(e, Entry::Heap { .. }));
        assert_eq!((e.key(), e.value()), (&b"key"[..], &long[..]));
        e.set_value(&[1; 40]);
        assert_eq!(e.value(), [1; 40]);
        e.set_value(b"");
        assert!(matches!(e, Entry::Inline { .. }));
        assert_eq!((e.key(), e.value()), (&b"key"[..], &b""[..]));
        let e = Entry::new(&long, b"x");
        assert_eq!((e.key(), e.value()), (&long[..], &b"x"[..]));
        let e = Entry::new(&[3; 29], b"");
        assert!(matches!(e, Entry::Inline { .. }));
        assert_eq!(e.key(), [3; 29]);
    }

    #[test]
    fn update_and_put_if_absent_on_both_kinds() {
        let mut s = MemoryState::new(&T, 0..2);
        let long = [9u8; 100];
        for table in [0, 1] {
            for key in [&b"k"[..], &long[..]] {
                // Absent: f sees an empty buffer; returning false stores nothing.
                s.update(table, 1, key, &mut |v, found| {
                    assert!(!found && v.is_empty());
                    false
                })
                .unwrap();
                assert!(!s.contains(table, 1, key).unwrap());
                for (i, value) in [&b"1"[..], &long[..], &b"22"[..]].into_iter().enumerate() {
                    s.update(table, 1, key, &mut |v, found| {
                        assert_eq!(found, i > 0);
                        v.clear();
                        v.extend_from_slice(value);
                        true
                    })
                    .unwrap();
                    let mut out = Vec::new();
                    assert!(s.get(table, 1, key, &mut out).unwrap());
                    assert_eq!(out, value);
                }
                assert!(!s.put_if_absent(table, 1, key, b"x").unwrap());
                let mut out = Vec::new();
                assert!(s.take(table, 1, key, &mut out).unwrap());
                assert_eq!(out, b"22");
                assert!(!s.take(table, 1, key, &mut out).unwrap());
                assert!(out.is_empty());
                assert!(s.put_if_absent(table, 1, key, b"x").unwrap());
                assert!(s.put_if_absent(table, 0, key, b"x").unwrap());
                assert!(s.delete(table, 1, key).unwrap());
                assert!(!s.delete(table, 1, key).unwrap());
            }
            assert_eq!(s.len(table), 2);
        }
        assert!(matches!(s.put_if_absent(0, 2, b"a", b""), Err(StateError::ForeignKeyGroup { .. })));
    }

    #[test]
    fn small_entries_are_12_and_16_bytes_and_a_table_widens_without_losing_entries() {
        assert_eq!(std::mem::size_of::<Small<11>>(), 12);
        assert_eq!(std::mem::size_of::<Small<15>>(), 16);
        let key = |i: u64| {
            let mut k = vec![2];
            k.extend_from_slice(&i.to_be_bytes());
            k
        };
        let mut s = MemoryState::new(&T, 0..1);
        for i in 0..100u64 {
            assert!(s.put_if_absent(0, 0, &key(i), b"").unwrap());
        }
        assert!(matches!(s.tables[0].groups[0], Map::Tiny(_)));
        // An entry too long for `Small<11>` widens the map to `Small<15>`,
        s.put(0, 0, &key(3), &[4; 6]).unwrap();
        assert!(matches!(s.tables[0].groups[0], Map::Small(_)));
        // and one too long for that to `Point`.
        s.put(0, 0, &key(7), &[5; 20]).unwrap();
        assert!(matches!(s.tables[0].groups[0], Map::Point(_)));
        assert_eq!(s.len(0), 100);
        let mut out = Vec::new();
        for i in 0..100u64 {
            assert!(s.get(0, 0, &key(i), &mut out).unwrap());
            assert_eq!(out, [vec![], vec![4; 6], vec![5; 20]][(i == 3) as usize + 2 * (i == 7) as usize]);
        }
        // A Tiny map can also widen straight to `Point`,
        let mut s = MemoryState::new(&T, 0..1);
        s.put(0, 0, b"a", b"").unwrap();
        s.put(0, 0, b"b", &[1; 20]).unwrap();
        assert!(matches!(s.tables[0].groups[0], Map::Point(_)));
        assert!(s.get(0, 0, b"a", &mut out).unwrap() && out.is_empty());
        // or to `Line` for an entry of 30 to 62 bytes, which becomes `Point` past 62.
        assert_eq!(std::mem::size_of::<Line>(), 64);
        let mut s = MemoryState::new(&T, 0..1);
        s.put(0, 0, b"a", b"").unwrap();
        s.put(0, 0, b"b", &[1; 30]).unwrap();
        assert!(matches!(s.tables[0].groups[0], Map::Line(_)));
        s.update(0, 0, b"c", &mut |v, _| {
            v.extend_from_slice(&[2; 61]);
            true
        })
        .unwrap();
        assert!(matches!(s.tables[0].groups[0], Map::Line(_)));
        assert!(s.put_if_absent(0, 0, b"d", &[3; 62]).unwrap());
        assert!(matches!(s.tables[0].groups[0], Map::Point(_)));
        for (k, v) in [(&b"a"[..], &[][..]), (b"b", &[1; 30]), (b"c", &[2; 61]), (b"d", &[3; 62])] {
            assert!(s.get(0, 0, k, &mut out).unwrap());
            assert_eq!(out, v);
        }
    }

    /// Random operations against a `BTreeMap` model, with sizes around the
    /// `Small`, inline and `Line` limits so maps widen in the middle of the run.
    #[test]
    fn point_tables_answer_like_a_plain_map_across_entry_sizes() {
        let mut rng = 0x9e3779b97f4a7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for round in 0..20 {
            let mut s = MemoryState::new(&T, 0..2);
            let mut model: std::collections::BTreeMap<(u16, Vec<u8>), Vec<u8>> = Default::default();
            let limit = [8, 16, 40, 80][round % 4];
            for _ in 0..2000 {
                let kg = next(2) as u16;
                let key: Vec<u8> = vec![next(64) as u8; 1 + next(limit.min(14)) as usize];
                let value: Vec<u8> = vec![next(256) as u8; next(limit) as usize];
                let mut out = Vec::new();
                match next(6) {
                    0 => {
                        s.put(0, kg, &key, &value).unwrap();
                        model.insert((kg, key), value);
                    }
                    1 => assert_eq!(s.delete(0, kg, &key).unwrap(), model.remove(&(kg, key)).is_some()),
                    2 => {
                        let was = model.remove(&(kg, key.clone()));
                        assert_eq!(s.take(0, kg, &key, &mut out).unwrap(), was.is_some());
                        assert_eq!(out, was.unwrap_or_default());
                    }
                    3 => {
                        let absent = !model.contains_key(&(kg, key.clone()));
                        assert_eq!(s.put_if_absent(0, kg, &key, &value).unwrap(), absent);
                        model.entry((kg, key)).or_insert(value);
                    }
                    4 => {
                        let was = model.get(&(kg, key.clone())).cloned();
                        s.update(0, kg, &key, &mut |v, found| {
                            assert_eq!((found, &v[..]), (was.is_some(), was.as_deref().unwrap_or_default()));
                            v.clear();
                            v.extend_from_slice(&value);
                            !value.is_empty()
                        })
                        .unwrap();
                        if !value.is_empty() {
                            model.insert((kg, key), value);
                        }
                    }
                    _ => {
                        let was = model.get(&(kg, key.clone()));
                        assert_eq!(s.get(0, kg, &key, &mut out).unwrap(), was.is_some());
                        assert_eq!(Some(&out), was.or(Some(&Vec::new())));
                    }
                }
            }
            assert_eq!(s.len(0), model.len());
            let mut all = std::collections::BTreeMap::new();
            for kg in 0..2 {
                s.scan_all(0, kg, &mut |k, v| {
                    all.insert((kg, k.to_vec()), v.to_vec());
                    ControlFlow::Continue(())
                })
                .unwrap();
            }
            assert_eq!(all, model);
            let bytes = s.snapshot(&T).unwrap().finish().unwrap();
            assert_eq!(bytes.len(), s.snapshot_size(&T), "the size is exact");
        }
    }

    /// The counts behind `weir_state_keys` / `weir_state_size_bytes`:
    /// random inserts, overwrites (growing and shrinking values, so point
    /// maps widen) and deletes on both table kinds, checked against a plain
    /// map's entry count and key + value bytes after every operation, and
    /// carried through a snapshot and restore.
    #[test]
    fn stats_follow_inserts_overwrites_and_deletes_like_a_plain_map() {
        let mut rng = 0x2545f4914f6cdd1du64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut s = MemoryState::new(&T, 0..2);
        let mut model: std::collections::BTreeMap<(usize, u16, Vec<u8>), Vec<u8>> = Default::default();
        let expected = |m: &std::collections::BTreeMap<(usize, u16, Vec<u8>), Vec<u8>>| StateStats {
            keys: m.len() as u64,
            bytes: m.iter().map(|((_, _, k), v)| (k.len() + v.len()) as u64).sum(),
        };
        assert_eq!(s.stats(), Some(StateStats::default()));
        for step in 0..5000 {
            let table = next(2) as usize;
            let kg = next(2) as u16;
            let key: Vec<u8> = vec![next(32) as u8; 1 + next(20) as usize];
            let value: Vec<u8> = vec![next(256) as u8; next(40) as usize];
            let at = (table, kg, key.clone());
            let mut out = Vec::new();
            match next(6) {
                0 => {
                    s.put(table, kg, &key, &value).unwrap();
                    model.insert(at, value);
                }
                1 => assert_eq!(s.delete(table, kg, &key).unwrap(), model.remove(&at).is_some()),
                2 => assert_eq!(s.take(table, kg, &key, &mut out).unwrap(), model.remove(&at).is_some()),
                3 => {
                    let inserted = s.put_if_absent(table, kg, &key, &value).unwrap();
                    assert_eq!(inserted, !model.contains_key(&at));
                    model.entry(at).or_insert(value);
                }
                4 => {
                    let store = !value.is_empty();
                    s.update(table, kg, &key, &mut |v, _| {
                        v.clear();
                        v.extend_from_slice(&value);
                        store
                    })
                    .unwrap();
                    if store {
                        model.insert(at, value);
                    }
                }
                _ => {
                    // A refused key group changes nothing.
                    assert!(s.put(table, 2, &key, &value).is_err());
                }
            }
            assert_eq!(s.stats(), Some(expected(&model)), "after step {step}");
            let of_table: std::collections::BTreeMap<_, _> =
                model.iter().filter(|((t, _, _), _)| *t == table).map(|(k, v)| (k.clone(), v.clone())).collect();
            assert_eq!(s.table_stats(table), Some(expected(&of_table)), "table {table} after step {step}");
        }
        assert!(model.len() > 100, "the run keeps a sizable state");
        let bytes = s.snapshot(&T).unwrap().finish().unwrap();
        let mut back = MemoryState::new(&T, 0..2);
        snapshot::read(&mut crate::codec::Dec::new(&bytes), &T, &mut back).unwrap();
        assert_eq!(back.stats(), Some(expected(&model)), "a restore counts what it loads");
        assert_eq!(s.table_stats(T.len()), None, "no such table");
        assert_eq!(MemoryState::new(&[], 0..2).stats(), None, "no tables, nothing to report");
    }

    /// A snapshot holds the state as it was when taken: writes, overwrites
    /// and deletes after it (into the buffer it gave back, too) change the
    /// next snapshot, never the kept one. Every map kind, several key
    /// groups; the bytes are those of the generic `snapshot::write`.
    #[test]
    fn a_snapshot_keeps_its_contents_and_the_next_has_the_later_ones() {
        type Model = std::collections::BTreeMap<(usize, u16, Vec<u8>), Vec<u8>>;
        let dump = |s: &MemoryState| {
            let mut all = Model::new();
            for t in 0..T.len() {
                for kg in s.key_groups() {
                    s.scan_all(t, kg, &mut |k, v| {
                        all.insert((t, kg, k.to_vec()), v.to_vec());
                        ControlFlow::Continue(())
                    })
                    .unwrap();
                }
            }
            all
        };
        let restored = |bytes: &[u8]| {
            let mut back = MemoryState::new(&T, 0..4);
            snapshot::read(&mut crate::codec::Dec::new(bytes), &T, &mut back).unwrap();
            back
        };
        let mut s = MemoryState::new(&T, 0..4);
        // Value sizes per key group keep group 0 `Tiny`, make 1 `Small`, 2 `Line` and 3 `Point`.
        let value = |kg: u16, i: u32| vec![i as u8; [0, 9, 40, 80][kg as usize]];
        for i in 0..2000u32 {
            let kg = (i % 4) as u16;
            s.put(0, kg, &i.to_be_bytes(), &value(kg, i)).unwrap();
            s.put(1, kg, &i.to_be_bytes(), &value(kg, i)).unwrap();
        }
        assert!(matches!(&s.tables[0].groups[..], [Map::Tiny(_), Map::Small(_), Map::Line(_), Map::Point(_)]));
        let (first, pool) = s.snapshot(&T).unwrap().finish_pooled().unwrap();
        let mut generic = Vec::new();
        snapshot::write(&s, &T, &mut generic).unwrap();
        assert_eq!(first, generic, "the canonical format");
        assert_eq!(first.len(), s.snapshot_size(&T), "of the size the counts give");
        let (kept, then) = (first.clone(), dump(&s));
        pool.expect("pooled").give(first);
        // After the snapshot: deletes, overwrites (longer and shorter) and inserts.
        for i in (0..2000u32).step_by(3) {
            let kg = (i % 4) as u16;
            assert!(s.delete(0, kg, &i.to_be_bytes()).unwrap() && s.delete(1, kg, &i.to_be_bytes()).unwrap());
        }
        for i in (1..2000u32).step_by(3) {
            let kg = (i % 4) as u16;
            s.put(0, kg, &i.to_be_bytes(), &value(kg, i + 1)[..value(kg, 0).len() / 2]).unwrap();
            s.put(1, kg, &i.to_be_bytes(), &[9; 50]).unwrap();
        }
        for i in 2000..5000u32 {
            s.put(1, (i % 4) as u16, &i.to_be_bytes(), b"new").unwrap();
        }
        let now = dump(&s);
        assert_ne!(now, then);
        assert_eq!(dump(&restored(&kept)), then, "the kept snapshot restores as it was taken");
        let second = s.snapshot(&T).unwrap().finish().unwrap();
        generic.clear();
        snapshot::write(&s, &T, &mut generic).unwrap();
        assert_eq!((second.len(), &second), (s.snapshot_size(&T), &generic));
        let back = restored(&second);
        assert_eq!((dump(&back), back.stats()), (now, s.stats()), "the later snapshot has the later contents");
        // Tables other than the state's own take the generic path.
        let fewer = s.snapshot(&T[..1]).unwrap().finish().unwrap();
        generic.clear();
        snapshot::write(&s, &T[..1], &mut generic).unwrap();
        assert_eq!(fewer, generic);
    }

    #[test]
    fn a_snapshot_reuses_the_buffer_the_writer_gave_back() {
        let mut s = MemoryState::new(&T, 0..4);
        for i in 0..1000u32 {
            s.put(0, (i % 4) as u16, &i.to_be_bytes(), b"").unwrap();
        }
        let (first, pool) = s.snapshot(&T).unwrap().finish_pooled().unwrap();
        let mut plain = Vec::new();
        snapshot::write(&s, &T, &mut plain).unwrap();
        assert_eq!(first, plain);
        let at = first.as_ptr();
        pool.expect("the memory backend pools its buffer").give(first);
        s.put(0, 1, b"new", b"").unwrap();
        let (second, _) = s.snapshot(&T).unwrap().finish_pooled().unwrap();
        assert_eq!(second.as_ptr(), at, "written into the returned buffer");
        plain.clear();
        snapshot::write(&s, &T, &mut plain).unwrap();
        assert_eq!(second, plain, "with the current state, nothing of the old");
    }
}

//! The memory backend: one map per (table, key group), owned by the subtask.
//!
//! Point tables are hash tables; ordered tables are B-trees so timers and
//! windows can be scanned by end time. Short keys and values are stored
//! inline (a point entry holds key and value in 32 bytes when they fit in
//! 29), so a lookup touches one bucket, not three allocations, and an
//! update of a short value allocates nothing.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::{Bound, Range};

use hashbrown::hash_table::{Entry as Slot, HashTable};

use super::{KeyedState, ScanFn, StateError, TableId, TableKind, TableSpec};
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

type KeyHasher = foldhash::fast::RandomState;

enum Map {
    Point(HashTable<Entry>),
    Ordered(BTreeMap<Bytes, Bytes>),
}

struct Table {
    spec: TableSpec,
    /// One map per owned key group, indexed by `kg - key_groups.start`.
    groups: Vec<Map>,
}

pub struct MemoryState {
    key_groups: Range<KeyGroup>,
    tables: Vec<Table>,
    hasher: KeyHasher,
    /// The buffer `update` hands out.
    scratch: Vec<u8>,
}

fn hash(hasher: &KeyHasher, key: &[u8]) -> u64 {
    hasher.hash_one(key)
}

impl MemoryState {
    pub fn new(tables: &[TableSpec], key_groups: Range<KeyGroup>) -> Self {
        let n = key_groups.len();
        let tables = tables
            .iter()
            .map(|&spec| Table {
                spec,
                groups: (0..n)
                    .map(|_| match spec.kind {
                        TableKind::Point => Map::Point(HashTable::new()),
                        TableKind::Ordered => Map::Ordered(BTreeMap::new()),
                    })
                    .collect(),
            })
            .collect();
        MemoryState { key_groups, tables, hasher: KeyHasher::default(), scratch: Vec::new() }
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

    /// The map of (table, kg), the hasher and the scratch buffer, borrowed apart.
    fn parts(&mut self, table: TableId, kg: KeyGroup) -> Result<(&mut Map, &KeyHasher, &mut Vec<u8>), StateError> {
        let i = self.index(kg)?;
        Ok((&mut self.tables[table].groups[i], &self.hasher, &mut self.scratch))
    }

    fn find<'a>(&self, map: &'a Map, key: &[u8]) -> Option<&'a [u8]> {
        match map {
            Map::Point(m) => m.find(hash(&self.hasher, key), |e| e.key() == key).map(Entry::value),
            Map::Ordered(m) => m.get(key).map(Bytes::as_slice),
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
        if let Ok(map @ Map::Point(_)) = self.map(table, kg) {
            std::hint::black_box(self.find(map, key).and_then(|v| v.first()));
        }
    }

    fn put(&mut self, table: TableId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        let (map, hasher, _) = self.parts(table, kg)?;
        match map {
            Map::Point(m) => match m.entry(hash(hasher, key), |e| e.key() == key, |e| hash(hasher, e.key())) {
                Slot::Occupied(mut e) => e.get_mut().set_value(value),
                Slot::Vacant(e) => {
                    e.insert(Entry::new(key, value));
                }
            },
            Map::Ordered(m) => match m.get_mut(key) {
                Some(v) => v.set(value),
                None => {
                    m.insert(Bytes::new(key), Bytes::new(value));
                }
            },
        }
        Ok(())
    }

    fn delete(&mut self, table: TableId, kg: KeyGroup, key: &[u8]) -> Result<bool, StateError> {
        let (map, hasher, _) = self.parts(table, kg)?;
        Ok(match map {
            Map::Point(m) => match m.find_entry(hash(hasher, key), |e| e.key() == key) {
                Ok(e) => {
                    e.remove();
                    true
                }
                Err(_) => false,
            },
            Map::Ordered(m) => m.remove(key).is_some(),
        })
    }

    fn take(&mut self, table: TableId, kg: KeyGroup, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        let (map, hasher, _) = self.parts(table, kg)?;
        out.clear();
        Ok(match map {
            Map::Point(m) => match m.find_entry(hash(hasher, key), |e| e.key() == key) {
                Ok(e) => {
                    out.extend_from_slice(e.get().value());
                    e.remove();
                    true
                }
                Err(_) => false,
            },
            Map::Ordered(m) => match m.remove(key) {
                Some(v) => {
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
        let (map, hasher, buf) = self.parts(table, kg)?;
        buf.clear();
        match map {
            Map::Point(m) => match m.entry(hash(hasher, key), |e| e.key() == key, |e| hash(hasher, e.key())) {
                Slot::Occupied(mut e) => {
                    buf.extend_from_slice(e.get().value());
                    if f(buf, true) {
                        e.get_mut().set_value(buf);
                    }
                }
                Slot::Vacant(e) => {
                    if f(buf, false) {
                        e.insert(Entry::new(key, buf));
                    }
                }
            },
            Map::Ordered(m) => match m.get_mut(key) {
                Some(v) => {
                    buf.extend_from_slice(v.as_slice());
                    if f(buf, true) {
                        v.set(buf);
                    }
                }
                None => {
                    if f(buf, false) {
                        m.insert(Bytes::new(key), Bytes::new(buf));
                    }
                }
            },
        }
        Ok(())
    }

    fn put_if_absent(&mut self, table: TableId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<bool, StateError> {
        let (map, hasher, _) = self.parts(table, kg)?;
        Ok(match map {
            Map::Point(m) => match m.entry(hash(hasher, key), |e| e.key() == key, |e| hash(hasher, e.key())) {
                Slot::Occupied(_) => false,
                Slot::Vacant(e) => {
                    e.insert(Entry::new(key, value));
                    true
                }
            },
            Map::Ordered(m) => {
                if m.contains_key(key) {
                    false
                } else {
                    m.insert(Bytes::new(key), Bytes::new(value));
                    true
                }
            }
        })
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
        assert!(matches!(s.scan_range(0, 0, b"", None, &mut |_, _| ControlFlow::Continue(())), Err(StateError::NotOrdered { .. })));
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
}

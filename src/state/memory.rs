//! The memory backend: one map per (table, key group), owned by the subtask.
//!
//! Point tables are hash maps; ordered tables are B-trees so timers and
//! windows can be scanned by end time.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, ControlFlow, Range};

use super::{KeyedState, StateError, TableId, TableKind, TableSpec};
use crate::types::KeyGroup;

type Bytes = Box<[u8]>;

enum Map {
    Point(HashMap<Bytes, Bytes, foldhash::fast::RandomState>),
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
                        TableKind::Point => Map::Point(HashMap::default()),
                        TableKind::Ordered => Map::Ordered(BTreeMap::new()),
                    })
                    .collect(),
            })
            .collect();
        MemoryState { key_groups, tables }
    }

    fn map(&self, table: TableId, kg: KeyGroup) -> Result<&Map, StateError> {
        let i = self.index(kg)?;
        Ok(&self.tables[table].groups[i])
    }

    fn map_mut(&mut self, table: TableId, kg: KeyGroup) -> Result<&mut Map, StateError> {
        let i = self.index(kg)?;
        Ok(&mut self.tables[table].groups[i])
    }

    fn index(&self, kg: KeyGroup) -> Result<usize, StateError> {
        if self.key_groups.contains(&kg) {
            Ok((kg - self.key_groups.start) as usize)
        } else {
            Err(StateError::ForeignKeyGroup { kg, owned: self.key_groups.clone() })
        }
    }
}

impl KeyedState for MemoryState {
    fn key_groups(&self) -> Range<KeyGroup> {
        self.key_groups.clone()
    }

    fn get(&self, table: TableId, kg: KeyGroup, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        let found = match self.map(table, kg)? {
            Map::Point(m) => m.get(key),
            Map::Ordered(m) => m.get(key),
        };
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
        Ok(match self.map(table, kg)? {
            Map::Point(m) => m.contains_key(key),
            Map::Ordered(m) => m.contains_key(key),
        })
    }

    fn put(&mut self, table: TableId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        match self.map_mut(table, kg)? {
            Map::Point(m) => {
                if let Some(v) = m.get_mut(key) {
                    // Reuse the key allocation on update, the common case for aggregates.
                    *v = value.into();
                } else {
                    m.insert(key.into(), value.into());
                }
            }
            Map::Ordered(m) => {
                m.insert(key.into(), value.into());
            }
        }
        Ok(())
    }

    fn delete(&mut self, table: TableId, kg: KeyGroup, key: &[u8]) -> Result<bool, StateError> {
        Ok(match self.map_mut(table, kg)? {
            Map::Point(m) => m.remove(key).is_some(),
            Map::Ordered(m) => m.remove(key).is_some(),
        })
    }

    fn scan_range(
        &self,
        table: TableId,
        kg: KeyGroup,
        from: &[u8],
        to: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StateError> {
        let Map::Ordered(m) = self.map(table, kg)? else {
            return Err(StateError::NotOrdered { table: self.tables[table].spec.name });
        };
        let upper = match to {
            Some(t) => Bound::Excluded(t),
            None => Bound::Unbounded,
        };
        for (k, v) in m.range::<[u8], _>((Bound::Included(from), upper)) {
            if f(k, v).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn scan_all(&self, table: TableId, kg: KeyGroup, f: &mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>) -> Result<(), StateError> {
        match self.map(table, kg)? {
            Map::Point(m) => {
                for (k, v) in m {
                    if f(k, v).is_break() {
                        break;
                    }
                }
            }
            Map::Ordered(m) => {
                for (k, v) in m {
                    if f(k, v).is_break() {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: [TableSpec; 2] = [
        TableSpec { name: "seen", kind: TableKind::Point },
        TableSpec { name: "timers", kind: TableKind::Ordered },
    ];

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
}

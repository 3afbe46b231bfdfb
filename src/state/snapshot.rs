//! The snapshot format of keyed state, backend independent: for each table
//! (by name), for each key group, its entries. Restoring reads only the key
//! groups the new handle owns, so a snapshot can be restored at another
//! parallelism (the key groups are redistributed, never split).

use std::ops::ControlFlow;

use super::{KeyedState, StateError, TableSpec};
use crate::codec::{Dec, DecodeError, Enc};

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("the snapshot has table `{0}`, which this operator does not declare")]
    UnknownTable(String),
}

/// Append every entry of `state` to `out`.
pub fn write<S: KeyedState + ?Sized>(state: &S, tables: &[TableSpec], out: &mut Vec<u8>) -> Result<(), StateError> {
    out.put_u16(tables.len() as u16);
    for (t, spec) in tables.iter().enumerate() {
        out.put_str(spec.name);
        let groups = state.key_groups();
        out.put_u32(groups.len() as u32);
        for kg in groups {
            out.put_u16(kg);
            let count_at = out.len();
            out.put_u64(0);
            let mut n: u64 = 0;
            state.scan_all(t, kg, &mut |k, v| {
                out.put_bytes(k);
                out.put_bytes(v);
                n += 1;
                ControlFlow::Continue(())
            })?;
            out[count_at..count_at + 8].copy_from_slice(&n.to_be_bytes());
        }
    }
    Ok(())
}

/// Read one snapshot written by `write`, putting the entries of the key
/// groups `state` owns into it and skipping the others.
pub fn read(dec: &mut Dec<'_>, tables: &[TableSpec], state: &mut dyn KeyedState) -> Result<u64, SnapshotError> {
    let owned = state.key_groups();
    let mut restored = 0;
    let n_tables = dec.u16("table count")?;
    for _ in 0..n_tables {
        let name = dec.str("table name")?;
        let t = tables.iter().position(|s| s.name == name).ok_or_else(|| SnapshotError::UnknownTable(name.into()))?;
        let groups = dec.u32("key group count")?;
        for _ in 0..groups {
            let kg = dec.u16("key group")?;
            let n = dec.u64("entry count")?;
            for _ in 0..n {
                let k = dec.bytes("key")?;
                let v = dec.bytes("value")?;
                if owned.contains(&kg) {
                    state.put(t, kg, k, v)?;
                    restored += 1;
                }
            }
        }
    }
    Ok(restored)
}

/// A snapshot written by `write` with only the entries of the key groups in
/// `keep`: what one instance of a cluster takes from an old instance's
/// savepoint when a cluster is rescaled (the tasks' own ranges span every
/// key group, the instance owns only `keep`).
pub fn retain_key_groups(bytes: &[u8], keep: &std::ops::Range<u16>) -> Result<Vec<u8>, DecodeError> {
    let mut dec = Dec::new(bytes);
    let mut out = Vec::with_capacity(bytes.len());
    let n_tables = dec.u16("table count")?;
    out.put_u16(n_tables);
    for _ in 0..n_tables {
        out.put_str(dec.str("table name")?);
        let groups = dec.u32("key group count")?;
        let count_at = out.len();
        out.put_u32(0);
        let mut kept: u32 = 0;
        for _ in 0..groups {
            let kg = dec.u16("key group")?;
            let n = dec.u64("entry count")?;
            let mine = keep.contains(&kg);
            if mine {
                out.put_u16(kg);
                out.put_u64(n);
                kept += 1;
            }
            for _ in 0..n {
                let (k, v) = (dec.bytes("key")?, dec.bytes("value")?);
                if mine {
                    out.put_bytes(k);
                    out.put_bytes(v);
                }
            }
        }
        out[count_at..count_at + 4].copy_from_slice(&kept.to_be_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryState;
    use crate::state::TableKind;

    const T: [TableSpec; 2] = [TableSpec { name: "a", kind: TableKind::Point }, TableSpec { name: "b", kind: TableKind::Ordered }];

    #[test]
    fn round_trip_and_redistribute_by_key_group() {
        let mut s = MemoryState::new(&T, 0..8);
        for kg in 0..8u16 {
            s.put(0, kg, &[kg as u8], b"x").unwrap();
            s.put(1, kg, &[kg as u8, 1], b"yy").unwrap();
        }
        let mut buf = Vec::new();
        write(&s, &T, &mut buf).unwrap();
        // Restore into two handles owning half the key groups each.
        let mut low = MemoryState::new(&T, 0..4);
        let mut high = MemoryState::new(&T, 4..8);
        assert_eq!(read(&mut Dec::new(&buf), &T, &mut low).unwrap(), 8);
        assert_eq!(read(&mut Dec::new(&buf), &T, &mut high).unwrap(), 8);
        let mut out = Vec::new();
        assert!(high.get(1, 6, &[6, 1], &mut out).unwrap());
        assert_eq!(out, b"yy");
        assert_eq!(low.len(0), 4);
    }

    #[test]
    fn a_rescaled_instance_keeps_only_its_key_groups() {
        let mut s = MemoryState::new(&T, 0..8);
        for kg in 0..8u16 {
            s.put(0, kg, &[kg as u8], b"x").unwrap();
            s.put(1, kg, &[kg as u8, 1], b"yy").unwrap();
        }
        let mut buf = Vec::new();
        write(&s, &T, &mut buf).unwrap();
        let part = retain_key_groups(&buf, &(2..5)).unwrap();
        // Read into a handle that owns every key group, as a task does.
        let mut all = MemoryState::new(&T, 0..8);
        assert_eq!(read(&mut Dec::new(&part), &T, &mut all).unwrap(), 6);
        assert_eq!((all.len(0), all.len(1)), (3, 3));
        let mut out = Vec::new();
        assert!(all.get(1, 4, &[4, 1], &mut out).unwrap() && !all.get(0, 5, &[5], &mut out).unwrap());
        assert!(retain_key_groups(&buf[..buf.len() - 1], &(0..8)).is_err(), "a cut snapshot is an error");
    }

    #[test]
    fn unknown_table_is_refused() {
        let s = MemoryState::new(&T, 0..1);
        let mut buf = Vec::new();
        write(&s, &T, &mut buf).unwrap();
        let other = [TableSpec { name: "a", kind: TableKind::Point }];
        let mut t = MemoryState::new(&other, 0..1);
        assert!(matches!(read(&mut Dec::new(&buf), &other, &mut t), Err(SnapshotError::UnknownTable(n)) if n == "b"));
    }
}

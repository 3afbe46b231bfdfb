use std::ops::ControlFlow;

use super::*;
use crate::codec::Dec;
use crate::state::memory::MemoryState;
use crate::state::snapshot;

const T: [TableSpec; 2] = [TableSpec { name: "seen", kind: TableKind::Point }, TableSpec { name: "timers", kind: TableKind::Ordered }];

/// A bundle DB in a temp dir (removed on drop) with column families `a` and `b`.
pub(crate) struct TestDb {
    pub dir: tempfile::TempDir,
    pub db: Arc<BundleDb>,
}

pub(crate) fn test_db() -> TestDb {
    let dir = tempfile::tempdir().unwrap();
    let db = BundleDb::create(&dir.path().join("db"), &["a".into(), "b".into()], &RocksOptions::default()).unwrap();
    TestDb { dir, db }
}

fn state(t: &TestDb, cf: &str, kgs: Range<KeyGroup>) -> RocksState {
    RocksState::new(t.db.clone(), cf, &T, kgs).unwrap()
}

fn entries(s: &dyn KeyedState, table: TableId, kg: KeyGroup) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v = Vec::new();
    s.scan_all(table, kg, &mut |k, val| {
        v.push((k.to_vec(), val.to_vec()));
        ControlFlow::Continue(())
    })
    .unwrap();
    v
}

#[test]
fn put_get_delete_by_key_group() {
    let t = test_db();
    let mut s = state(&t, "a", 4..8);
    let mut out = Vec::new();
    s.put(0, 5, b"a", b"1").unwrap();
    assert!(s.get(0, 5, b"a", &mut out).unwrap());
    assert_eq!(out, b"1");
    assert!(!s.get(0, 6, b"a", &mut out).unwrap(), "key groups are separate");
    assert!(!s.get(1, 5, b"a", &mut out).unwrap(), "tables are separate");
    assert!(matches!(s.put(0, 8, b"a", b"1"), Err(StateError::ForeignKeyGroup { .. })));
    assert!(s.delete(0, 5, b"a").unwrap());
    assert!(!s.delete(0, 5, b"a").unwrap());
    assert_eq!(s.len(0), 0);
}

#[test]
fn operators_and_subtasks_sharing_a_db_do_not_see_each_other() {
    let t = test_db();
    let mut low = state(&t, "a", 0..4);
    let mut high = state(&t, "a", 4..8);
    let mut other = state(&t, "b", 0..8);
    low.put(0, 3, b"k", b"low").unwrap();
    high.put(0, 4, b"k", b"high").unwrap();
    other.put(0, 3, b"k", b"other").unwrap();
    let mut out = Vec::new();
    assert!(low.get(0, 3, b"k", &mut out).unwrap());
    assert_eq!(out, b"low");
    assert!(other.get(0, 3, b"k", &mut out).unwrap());
    assert_eq!(out, b"other");
    assert_eq!((low.len(0), high.len(0), other.len(0)), (1, 1, 1));
    assert!(matches!(low.get(0, 4, b"k", &mut out), Err(StateError::ForeignKeyGroup { .. })));
}

#[test]
fn ordered_scan_respects_bounds_and_table_edges() {
    let t = test_db();
    let mut s = state(&t, "a", 0..2);
    for k in [&b"a"[..], b"b", b"c", b"d", b"\xff\xff"] {
        s.put(1, 0, k, b"").unwrap();
    }
    // Neighbours that must never show up: same kg other table, next kg.
    s.put(0, 0, b"b", b"").unwrap();
    s.put(1, 1, b"a", b"").unwrap();
    let mut seen = Vec::new();
    s.scan_range(1, 0, b"b", Some(b"d"), &mut |k, _| {
        seen.push(k.to_vec());
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(seen, vec![b"b".to_vec(), b"c".to_vec()]);
    let all: Vec<Vec<u8>> = entries(&s, 1, 0).into_iter().map(|(k, _)| k).collect();
    assert_eq!(all, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec(), b"\xff\xff".to_vec()]);
    let mut first = Vec::new();
    s.scan_range(1, 0, b"", None, &mut |k, _| {
        first.push(k.to_vec());
        ControlFlow::Break(())
    })
    .unwrap();
    assert_eq!(first, vec![b"a".to_vec()]);
    assert!(matches!(s.scan_range(0, 0, b"", None, &mut |_, _| ControlFlow::Continue(())), Err(StateError::NotOrdered { .. })));
}

#[test]
fn update_take_and_put_if_absent() {
    let t = test_db();
    let mut s = state(&t, "a", 0..2);
    let long = [9u8; 100];
    for table in [0, 1] {
        s.update(table, 1, b"k", &mut |v, found| {
            assert!(!found && v.is_empty());
            false
        })
        .unwrap();
        assert!(!s.contains(table, 1, b"k").unwrap());
        for (i, value) in [&b"1"[..], &long[..], &b"22"[..]].into_iter().enumerate() {
            s.update(table, 1, b"k", &mut |v, found| {
                assert_eq!(found, i > 0);
                v.clear();
                v.extend_from_slice(value);
                true
            })
            .unwrap();
            let mut out = Vec::new();
            assert!(s.get(table, 1, b"k", &mut out).unwrap());
            assert_eq!(out, value);
        }
        assert!(!s.put_if_absent(table, 1, b"k", b"x").unwrap());
        let mut out = Vec::new();
        assert!(s.take(table, 1, b"k", &mut out).unwrap());
        assert_eq!(out, b"22");
        assert!(!s.take(table, 1, b"k", &mut out).unwrap());
        assert!(out.is_empty());
        assert!(s.put_if_absent(table, 1, b"k", b"x").unwrap());
    }
}

#[test]
fn a_snapshot_sees_the_state_at_its_synchronous_point() {
    let t = test_db();
    let mut s = state(&t, "a", 0..8);
    let mut mem = MemoryState::new(&T, 0..8);
    for i in 0..1000u32 {
        let kg = (i % 8) as KeyGroup;
        for st in [&mut s as &mut dyn KeyedState, &mut mem] {
            st.put(0, kg, &i.to_be_bytes(), &[i as u8]).unwrap();
            st.put(1, kg, &(i * 7).to_be_bytes(), b"t").unwrap();
        }
    }
    let pending = s.snapshot(&T).unwrap();
    assert!(matches!(pending, StateSnapshot::Deferred(_)));
    // Writes after the synchronous point are not in the snapshot.
    for i in 0..100u32 {
        s.put(0, 0, &(5000 + i).to_be_bytes(), b"late").unwrap();
        s.delete(0, (i % 8) as KeyGroup, &i.to_be_bytes()).unwrap();
    }
    let bytes = pending.finish().unwrap();
    let mut want = Vec::new();
    snapshot::write(&mem, &T, &mut want).unwrap();
    // Same canonical content (the memory backend's point tables are unordered).
    let mut back = MemoryState::new(&T, 0..8);
    assert_eq!(snapshot::read(&mut Dec::new(&bytes), &T, &mut back).unwrap(), 2000);
    for table in [0, 1] {
        for kg in 0..8 {
            let mut a = entries(&back, table, kg);
            let mut b = entries(&mem, table, kg);
            a.sort();
            b.sort();
            assert_eq!(a, b, "table {table} kg {kg}");
        }
    }
    // And a canonical snapshot restores into RocksDB, cut by key group.
    let t2 = test_db();
    let mut half = RocksState::new(t2.db.clone(), "b", &T, 4..8).unwrap();
    assert_eq!(snapshot::read(&mut Dec::new(&want), &T, &mut half).unwrap(), 1000);
    assert_eq!(half.len(0), 500);
    assert_eq!(entries(&half, 1, 5), entries(&mem, 1, 5), "ordered tables come back in order");
}

/// Native checkpoints of a DB with 200 K keys, then 20 changed keys each
/// time: the first copies everything, later ones only the new SSTs; a DB
/// rebuilt from the last checkpoint (from local files, and from shared
/// files alone) holds exactly the state at that checkpoint.
#[test]
fn incremental_checkpoints_copy_little_after_small_changes_and_restore_exactly() {
    use crate::checkpoint::manifest::FileEntry;
    use native::{RestoreSource, Uploader};
    let t = test_db();
    let mut s = state(&t, "a", 0..8);
    for i in 0..200_000u32 {
        // 32 bytes that do not compress away.
        let v = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes().repeat(4);
        s.put(0, (i % 8) as KeyGroup, &i.to_be_bytes(), &v).unwrap();
    }
    let store = t.dir.path().join("checkpoints");
    let shared = store.join("shared");
    let mut up = Uploader::new(0);
    let mut last_files: Vec<FileEntry> = Vec::new();
    let mut sizes = Vec::new();
    // Three checkpoints: a fourth L0 file would trigger a compaction, which
    // rewrites the data into new SSTs (copied again, as in any incremental scheme).
    for id in 1..=3u64 {
        if id > 1 {
            for i in 0..10u32 {
                s.put(0, 1, &(1_000_000 * id as u32 + i).to_be_bytes(), b"new").unwrap();
                s.delete(0, (i % 8) as KeyGroup, &(i * 8 + (i % 8)).to_be_bytes()).unwrap();
            }
        }
        s.flush().unwrap();
        let local = t.db.local_checkpoint(id).unwrap();
        let bundle_dir = store.join(format!("chk-{id}"));
        std::fs::create_dir_all(&bundle_dir).unwrap();
        let (files, stats) = up.upload(&local, &bundle_dir, &shared).unwrap();
        assert!(files.iter().any(|f| f.shared) && files.iter().any(|f| f.name.starts_with("db/CURRENT")), "{files:?}");
        sizes.push((stats.new_bytes, stats.reused_bytes));
        last_files = files;
    }
    let (first_new, _) = sizes[0];
    assert!(first_new > 1_000_000, "the first checkpoint copies the whole state: {sizes:?}");
    for &(new, reused) in &sizes[1..] {
        assert!(new * 20 < first_new, "a checkpoint after 20 changed keys copied {new} bytes (first: {first_new}): {sizes:?}");
        assert!(reused >= first_new / 2, "earlier SSTs are referenced, not copied again: {sizes:?}");
    }
    let want: Vec<Vec<(Vec<u8>, Vec<u8>)>> = (0..8).map(|kg| entries(&s, 0, kg)).collect();
    let cfs = ["a".to_string(), "b".to_string()];
    for (i, from) in [RestoreSource::Local, RestoreSource::Checkpoint].into_iter().enumerate() {
        if from == RestoreSource::Checkpoint {
            // Without the local checkpoint: rebuilt from the stored files.
            std::fs::remove_dir_all(t.db.local_root().join("chk-0000003")).unwrap();
        }
        let db_path = t.db.local_root().join(format!("restored-{i}"));
        let bundle_dir = store.join("chk-3");
        let from_chk = native::NativeCheckpoint { id: 3, bundle: 0, files: &last_files, bundle_dir: &bundle_dir, shared_dir: &shared };
        let (db, _, source) = native::restore(&from_chk, &db_path, &cfs, &RocksOptions::default()).unwrap();
        assert_eq!(source, from);
        let back = RocksState::new(db, "a", &T, 0..8).unwrap();
        for kg in 0..8 {
            assert_eq!(entries(&back, 0, kg), want[kg as usize], "{from:?} kg {kg}");
        }
    }
}

#[test]
fn local_recovery_refuses_a_local_file_damaged_in_place() {
    use native::{RestoreSource, Uploader};
    let t = test_db();
    let mut s = state(&t, "a", 0..8);
    for i in 0..2_000u32 {
        s.put(0, (i % 8) as KeyGroup, &i.to_be_bytes(), &i.to_le_bytes().repeat(8)).unwrap();
    }
    let want: Vec<_> = (0..8).map(|kg| entries(&s, 0, kg)).collect();
    let store = t.dir.path().join("checkpoints");
    let (shared, bundle_dir) = (store.join("shared"), store.join("chk-1"));
    std::fs::create_dir_all(&bundle_dir).unwrap();
    s.flush().unwrap();
    let local = t.db.local_checkpoint(1).unwrap();
    let (files, _) = Uploader::new(0).upload(&local, &bundle_dir, &shared).unwrap();
    drop(s);
    // Flip one byte of a local SST, keeping its size.
    let local_dir = t.db.local_root().join("chk-0000001");
    let sst = files.iter().find(|f| f.shared).and_then(|f| native::local_name(&f.name)).unwrap();
    let path = local_dir.join(sst);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    // A new inode: the link in the live DB keeps its bytes.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let from = native::NativeCheckpoint { id: 1, bundle: 0, files: &files, bundle_dir: &bundle_dir, shared_dir: &shared };
    let db_path = t.db.local_root().join("restored");
    let cfs = ["a".to_string(), "b".to_string()];
    let (db, _, source) = native::restore(&from, &db_path, &cfs, &RocksOptions::default()).unwrap();
    assert_eq!(source, RestoreSource::Checkpoint, "a local SST with the right size but wrong bytes was used");
    let back = RocksState::new(db, "a", &T, 0..8).unwrap();
    for kg in 0..8 {
        assert_eq!(entries(&back, 0, kg), want[kg as usize], "kg {kg}");
    }
}

/// Bounded state churned through many native checkpoints (the soak of a
/// dedup with a TTL): the DB's MANIFEST rolls instead of growing, so the
/// private bytes copied per checkpoint stay flat, and the info LOG stays
/// small. (A small MANIFEST bound here, so it rolls within the test.)
#[test]
fn manifest_and_log_stay_bounded_over_many_checkpoints() {
    use native::Uploader;
    let dir = tempfile::tempdir().unwrap();
    let options = RocksOptions { max_manifest_bytes: 8 << 10, ..RocksOptions::default() };
    let db = BundleDb::create(&dir.path().join("db"), &["a".into()], &options).unwrap();
    let mut s = RocksState::new(db.clone(), "a", &T, 0..8).unwrap();
    let store = dir.path().join("checkpoints");
    let shared = store.join("shared");
    let mut up = Uploader::new(0);
    let mut manifests = Vec::new();
    let log_bytes = |db: &BundleDb| -> u64 {
        let logs = std::fs::read_dir(db.path()).unwrap().filter_map(|e| e.ok());
        logs.filter(|e| e.file_name().to_string_lossy().starts_with("LOG")).map(|e| e.metadata().unwrap().len()).sum()
    };
    let log_at_open = log_bytes(&db);
    for id in 1..=100u64 {
        // A sliding set of 2 000 live keys: 200 new ones, 200 expired.
        for i in 0..200u32 {
            let k = id as u32 * 200 + i;
            s.put(0, (k % 8) as KeyGroup, &k.to_be_bytes(), &k.to_le_bytes().repeat(8)).unwrap();
            if let Some(old) = k.checked_sub(2_000) {
                s.delete(0, (old % 8) as KeyGroup, &old.to_be_bytes()).unwrap();
            }
        }
        s.flush().unwrap();
        let local = db.local_checkpoint(id).unwrap();
        let bundle_dir = store.join(format!("chk-{id}"));
        std::fs::create_dir_all(&bundle_dir).unwrap();
        let (files, _) = up.upload(&local, &bundle_dir, &shared).unwrap();
        manifests.push(files.iter().filter(|f| f.name.starts_with("db/MANIFEST")).map(|f| f.size).sum::<u64>());
        std::fs::remove_dir_all(&bundle_dir).unwrap();
        native::retain_local(&db.local_root(), Some(id), id);
    }
    // Past the bound by at most the edits of one flush and its compaction.
    let largest = *manifests.iter().max().unwrap();
    assert!(largest < 12 << 10, "a checkpoint copied a MANIFEST of {largest} bytes: {manifests:?}");
    // The options dump at open is written at any level; nothing after it.
    let grown = log_bytes(&db) - log_at_open;
    assert!(grown < 1 << 10, "the info LOG grew by {grown} bytes over 100 checkpoints");
}

/// A small deterministic generator for the model tests.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u32) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % below as u64) as u32
    }
}

/// Every answer of the RocksDB state equals the memory backend's over a
/// random mix of operations, with the write-behind cache flushed at random
/// points and emptied whenever it outgrows a tiny budget (every few dozen
/// writes): reads after an eviction, deletes of flushed and of never
/// flushed keys, values growing past the inline size.
#[test]
fn write_cache_answers_like_the_memory_backend_through_flushes_and_evictions() {
    let dir = tempfile::tempdir().unwrap();
    let options = RocksOptions { write_cache: 4 << 10, ..RocksOptions::default() };
    let db = BundleDb::create(&dir.path().join("db"), &["a".into()], &options).unwrap();
    let mut s = RocksState::new(db.clone(), "a", &T, 0..4).unwrap();
    let mut mem = MemoryState::new(&T, 0..4);
    let mut rng = Lcg(7);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for step in 0..20_000 {
        let table = rng.next(2) as TableId;
        let kg = rng.next(4) as KeyGroup;
        let key = rng.next(300).to_be_bytes();
        let len = [1, 8, 40][rng.next(3) as usize];
        let value = vec![step as u8; len];
        let what = rng.next(9);
        match what {
            0 | 1 => {
                s.put(table, kg, &key, &value).unwrap();
                mem.put(table, kg, &key, &value).unwrap();
            }
            2 => assert_eq!(s.delete(table, kg, &key).unwrap(), mem.delete(table, kg, &key).unwrap(), "delete at {step}"),
            3 => assert_eq!(s.take(table, kg, &key, &mut a).unwrap(), mem.take(table, kg, &key, &mut b).unwrap(), "take at {step}"),
            4 => assert_eq!(
                s.put_if_absent(table, kg, &key, &value).unwrap(),
                mem.put_if_absent(table, kg, &key, &value).unwrap(),
                "put_if_absent at {step}"
            ),
            5 => {
                let append = |v: &mut Vec<u8>, found: bool| {
                    if found && v.len() > 60 {
                        // Change the buffer, then decline: nothing is stored.
                        v.clear();
                        return false;
                    }
                    v.push(step as u8);
                    true
                };
                let mut f = append;
                s.update(table, kg, &key, &mut f).unwrap();
                mem.update(table, kg, &key, &mut f).unwrap();
            }
            6 => assert_eq!(s.contains(table, kg, &key).unwrap(), mem.contains(table, kg, &key).unwrap(), "contains at {step}"),
            7 if step % 7 == 0 => s.flush().unwrap(),
            _ => {}
        }
        if what == 3 || what == 8 {
            let (x, y) = (s.get(table, kg, &key, &mut a).unwrap(), mem.get(table, kg, &key, &mut b).unwrap());
            assert_eq!((x, &a), (y, &b), "get at {step}");
        }
        if what == 8 && step % 5 == 0 {
            // The ordered table's scans merge pending changes with the DB.
            let (x, y) = (rng.next(300), rng.next(300));
            let (from, to) = (x.min(y).to_be_bytes(), x.max(y).to_be_bytes());
            let stop = rng.next(20) as usize;
            let ranged = |st: &dyn KeyedState| {
                let mut v = Vec::new();
                st.scan_range(1, kg, &from, (step % 3 != 0).then_some(&to[..]), &mut |k, val| {
                    v.push((k.to_vec(), val.to_vec()));
                    if v.len() > stop {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
                .unwrap();
                v
            };
            assert_eq!(ranged(&s), ranged(&mem), "scan_range at {step}");
        }
    }
    assert_eq!(s.len(1), mem.len(1));
    for table in [0, 1] {
        for kg in 0..4 {
            let mut want = entries(&mem, table, kg);
            want.sort();
            assert_eq!(entries(&s, table, kg), want, "table {table} kg {kg}");
        }
    }
}

/// The runtime flushes each state at the synchronous point; a native
/// checkpoint taken then holds every write made before it (cached ones
/// included: updates of hot keys, deletes of keys already in the DB) and
/// none made after.
#[test]
fn a_native_checkpoint_after_flush_holds_every_cached_write() {
    use native::Uploader;
    let t = test_db();
    let mut s = state(&t, "a", 0..8);
    for i in 0..1_000u32 {
        s.put(0, (i % 8) as KeyGroup, &i.to_be_bytes(), b"first").unwrap();
    }
    s.flush().unwrap();
    for i in 0..1_000u32 {
        let kg = (i % 8) as KeyGroup;
        match i % 3 {
            0 => assert!(s.delete(0, kg, &i.to_be_bytes()).unwrap()),
            1 => s
                .update(0, kg, &i.to_be_bytes(), &mut |v, found| {
                    assert!(found);
                    v.extend_from_slice(b"+1");
                    true
                })
                .unwrap(),
            _ => {}
        }
        // Created and deleted between two flushes: never reaches the DB.
        s.put(0, kg, &(10_000 + i).to_be_bytes(), b"brief").unwrap();
        assert!(s.take(0, kg, &(10_000 + i).to_be_bytes(), &mut Vec::new()).unwrap());
    }
    s.flush().unwrap();
    let store = t.dir.path().join("checkpoints");
    let (shared, bundle_dir) = (store.join("shared"), store.join("chk-1"));
    std::fs::create_dir_all(&bundle_dir).unwrap();
    let local = t.db.local_checkpoint(1).unwrap();
    let (files, _) = Uploader::new(0).upload(&local, &bundle_dir, &shared).unwrap();
    let from = native::NativeCheckpoint { id: 1, bundle: 0, files: &files, bundle_dir: &bundle_dir, shared_dir: &shared };
    let cfs = ["a".to_string(), "b".to_string()];
    let (db, _, _) = native::restore(&from, &t.db.local_root().join("restored"), &cfs, &RocksOptions::default()).unwrap();
    let back = RocksState::new(db, "a", &T, 0..8).unwrap();
    let mut out = Vec::new();
    for i in 0..1_000u32 {
        let kg = (i % 8) as KeyGroup;
        let found = back.get(0, kg, &i.to_be_bytes(), &mut out).unwrap();
        match i % 3 {
            0 => assert!(!found, "deleted key {i} is back"),
            1 => assert_eq!((found, &out[..]), (true, &b"first+1"[..]), "key {i}"),
            _ => assert_eq!((found, &out[..]), (true, &b"first"[..]), "key {i}"),
        }
        assert!(!back.contains(0, kg, &(10_000 + i).to_be_bytes()).unwrap());
    }
    assert_eq!(back.len(0), 1_000 - 334);
}

/// A miss skips the RocksDB read only for keys no flush wrote into key
/// groups that started empty: a second state over the same key groups of
/// the same DB, and a state of a DB rebuilt from files, read RocksDB.
#[test]
fn a_state_over_key_groups_that_held_data_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let options = RocksOptions { write_cache: 1 << 10, ..RocksOptions::default() };
    let path = dir.path().join("db");
    let cfs = ["a".to_string()];
    let db = BundleDb::create(&path, &cfs, &options).unwrap();
    let mut first = RocksState::new(db.clone(), "a", &T, 0..4).unwrap();
    for i in 0..500u32 {
        first.put(0, (i % 4) as KeyGroup, &i.to_be_bytes(), b"v").unwrap();
    }
    first.flush().unwrap();
    // The small budget emptied the cache on the way: found through RocksDB.
    assert!((0..500u32).all(|i| first.contains(0, (i % 4) as KeyGroup, &i.to_be_bytes()).unwrap()));
    drop(first);
    let mut again = RocksState::new(db.clone(), "a", &T, 2..4).unwrap();
    for i in (0..500u32).filter(|i| i % 4 >= 2) {
        let kg = (i % 4) as KeyGroup;
        assert!(!again.put_if_absent(0, kg, &i.to_be_bytes(), b"w").unwrap(), "key {i}");
        assert!(again.update(0, kg, &i.to_be_bytes(), &mut |_, found| found).is_ok());
    }
    let mut out = Vec::new();
    assert!(again.take(0, 2, &2u32.to_be_bytes(), &mut out).unwrap());
    assert_eq!(out, b"v");
    again.flush().unwrap();
    drop(again);
    drop(db);
    // Copy the closed DB's files (the working DB is removed with its last handle).
    let copy = dir.path().join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    let db = BundleDb::create(&path, &cfs, &options).unwrap();
    let mut s = RocksState::new(db.clone(), "a", &T, 0..4).unwrap();
    s.put(0, 1, b"kept", b"x").unwrap();
    s.flush().unwrap();
    drop(s);
    let local = db.local_checkpoint(1).unwrap();
    for e in std::fs::read_dir(&local.dir).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
    }
    drop(db);
    let reopened = BundleDb::open(&copy, &cfs, &options).unwrap();
    let mut back = RocksState::new(reopened, "a", &T, 0..4).unwrap();
    assert!(back.delete(0, 1, b"kept").unwrap(), "a rebuilt DB's keys are read, not assumed absent");
    assert!(!back.contains(0, 1, b"kept").unwrap());
}

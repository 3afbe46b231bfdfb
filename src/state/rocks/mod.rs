//! The RocksDB backend: one DB per bundle, one column family per keyed
//! operator, shared by the subtasks of that operator in the bundle (each
//! owns a disjoint key-group range). The only module that imports `rocksdb`.
//!
//! A stored key is `key group (u16 big-endian) ++ table id (u8) ++ user
//! key`, so one key group's entries are contiguous (a key-group range can be
//! cut out for rescaling) and an ordered table scans in user-key order.
//!
//! Writes skip the WAL: a checkpoint is the durability point, and after a
//! crash the working DB is rebuilt from the restored checkpoint, never
//! reopened as it was. Snapshots in the canonical format (savepoints, full
//! checkpoints) read under a RocksDB snapshot taken at the synchronous
//! point, on a thread of their own (see [`snapshot`]).

mod cache;
mod filter;
pub mod native;
mod overlay;
mod snapshot;

use std::cell::RefCell;
use std::ops::{ControlFlow, Range};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Options, ReadOptions, WriteBatch, WriteOptions, DB,
};

use cache::{Change, WriteCache};
use filter::FlushedKeys;
use overlay::{Overlay, Pending};

use super::{KeyedState, ScanFn, StateError, StateSnapshot, TableId, TableKind, TableSpec};
use crate::config::Compression;
use crate::types::KeyGroup;

/// Bytes in front of every user key: key group and table id.
const PREFIX: usize = 3;

/// How the DB of a bundle is tuned (from `state.rocksdb` in the pipeline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocksOptions {
    /// LRU block cache shared by every column family of one bundle's DB.
    pub block_cache: u64,
    /// Memtable bytes per column family.
    pub write_buffer: u64,
    pub compression: Compression,
    /// RocksDB starts a new MANIFEST (holding only the live files) past this
    /// size. Without a bound it grows with every flush and compaction, and
    /// it is copied whole into each incremental checkpoint.
    pub max_manifest_bytes: usize,
    /// Budget of each subtask's write-behind cache of point-table entries
    /// (see [`cache`]), in approximate bytes.
    pub write_cache: usize,
}

/// The info LOG rolls past this size; two old ones are kept.
pub const MAX_INFO_LOG_BYTES: usize = 1 << 20;

impl Default for RocksOptions {
    fn default() -> Self {
        RocksOptions {
            block_cache: 256 << 20,
            write_buffer: 64 << 20,
            compression: Compression::Lz4,
            max_manifest_bytes: 64 << 10,
            write_cache: 64 << 20,
        }
    }
}

fn backend_error(what: &str, path: &Path, e: impl std::fmt::Display) -> StateError {
    StateError::Backend(format!("{what} {}: {e}", path.display()))
}

/// The working DB of one bundle. Removed from disk when the last handle
/// goes: working state never outlives its run (a restore rebuilds it).
pub struct BundleDb {
    db: DB,
    path: PathBuf,
    write: WriteOptions,
    write_cache: usize,
    /// Created empty here (not rebuilt from a checkpoint): the key groups
    /// no state has claimed yet hold nothing.
    fresh: bool,
    /// (column family, key groups) of every state made on this DB.
    claimed: Mutex<Vec<(String, Range<KeyGroup>)>>,
    // Declared after `db`, so it runs once the DB is closed.
    _remove: RemoveOnDrop,
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl BundleDb {
    /// Create an empty DB at `path` (removing whatever was there: working
    /// state never outlives its run) with one column family per name.
    pub fn create(path: &Path, column_families: &[String], options: &RocksOptions) -> Result<Arc<BundleDb>, StateError> {
        match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(backend_error("cannot remove", path, e)),
            _ => {}
        }
        std::fs::create_dir_all(path).map_err(|e| backend_error("cannot create", path, e))?;
        Self::open_as(path, column_families, options, true)
    }

    /// Open the DB at `path`, creating it and any missing column family.
    pub fn open(path: &Path, column_families: &[String], options: &RocksOptions) -> Result<Arc<BundleDb>, StateError> {
        Self::open_as(path, column_families, options, false)
    }

    fn open_as(path: &Path, column_families: &[String], options: &RocksOptions, fresh: bool) -> Result<Arc<BundleDb>, StateError> {
        let cache = Cache::new_lru_cache(options.block_cache as usize);
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(2);
        // Without a WAL, a flush of several column families must be atomic
        // for a DB checkpoint to be one consistent cut.
        db_opts.set_atomic_flush(true);
        db_opts.set_keep_log_file_num(2);
        db_opts.set_max_manifest_file_size(options.max_manifest_bytes);
        // At INFO the LOG grows by ~200 MB an hour of frequent checkpoints.
        db_opts.set_log_level(rocksdb::LogLevel::Warn);
        db_opts.set_max_log_file_size(MAX_INFO_LOG_BYTES);
        let cfs: Vec<ColumnFamilyDescriptor> =
            column_families.iter().map(|name| ColumnFamilyDescriptor::new(name, cf_options(options, &cache))).collect();
        let db = DB::open_cf_descriptors(&db_opts, path, cfs).map_err(|e| backend_error("cannot open RocksDB at", path, e))?;
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        Ok(Arc::new(BundleDb {
            db,
            path: path.to_path_buf(),
            write,
            write_cache: options.write_cache,
            fresh,
            claimed: Mutex::new(Vec::new()),
            _remove: RemoveOnDrop(path.to_path_buf()),
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An integer property (`rocksdb.estimate-num-keys`, ...) of column
    /// family `cf`; None if RocksDB has no such property or family. Reads
    /// RocksDB's figures under its mutex for a moment; never waits for I/O.
    pub fn int_property(&self, cf: &str, name: &str) -> Option<u64> {
        let cf = self.db.cf_handle(cf)?;
        self.db.property_int_value_cf(cf, name).ok().flatten()
    }

    /// Record that a state of `cf` owns `key_groups` now; whether RocksDB
    /// surely holds nothing of them (a fresh DB, no earlier state of them).
    fn claim(&self, cf: &str, key_groups: &Range<KeyGroup>) -> bool {
        let mut claimed = self.claimed.lock().unwrap_or_else(|e| e.into_inner());
        let overlaps = claimed.iter().any(|(c, r)| c == cf && r.start < key_groups.end && key_groups.start < r.end);
        claimed.push((cf.to_string(), key_groups.clone()));
        self.fresh && !overlaps
    }

    fn cf(&self, name: &str) -> Result<&ColumnFamily, StateError> {
        self.db.cf_handle(name).ok_or_else(|| StateError::Backend(format!("no column family `{name}` in {}", self.path.display())))
    }
}

fn cf_options(options: &RocksOptions, cache: &Cache) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_bloom_filter(10.0, false);
    // Index and filter blocks stay in the table readers (RocksDB's default):
    // through the block cache, every lookup re-read a whole filter block.
    table.set_block_size(16 * 1024);
    let mut o = Options::default();
    o.set_block_based_table_factory(&table);
    o.set_write_buffer_size(options.write_buffer as usize);
    o.set_max_write_buffer_number(3);
    o.set_level_compaction_dynamic_level_bytes(true);
    // A bloom filter on the memtable too: most dedup lookups are misses.
    o.set_memtable_whole_key_filtering(true);
    o.set_memtable_prefix_bloom_ratio(0.05);
    let compression = match options.compression {
        Compression::None => DBCompressionType::None,
        Compression::Lz4 => DBCompressionType::Lz4,
        Compression::Zstd => DBCompressionType::Zstd,
    };
    o.set_compression_type(compression);
    // L0 files (a flush at every checkpoint) uncompressed: they are
    // compacted into L1 soon, where compression pays.
    let mut per_level = [compression; 7];
    per_level[0] = DBCompressionType::None;
    o.set_compression_per_level(&per_level);
    o
}

/// `kg ++ table ++ key` into `out`.
fn compose(out: &mut Vec<u8>, kg: KeyGroup, table: TableId, key: &[u8]) {
    out.clear();
    out.extend_from_slice(&kg.to_be_bytes());
    out.push(table as u8);
    out.extend_from_slice(key);
}

/// The first key after every key of (kg, table).
fn table_end(kg: KeyGroup, table: TableId) -> Vec<u8> {
    let mut v = kg.to_be_bytes().to_vec();
    v.push(table as u8 + 1);
    v
}

/// The keyed state of one operator subtask: its key groups in the bundle's DB.
pub struct RocksState {
    db: Arc<BundleDb>,
    cf: String,
    key_groups: Range<KeyGroup>,
    tables: Vec<TableSpec>,
    read: ReadOptions,
    /// The composed key of the current call.
    key: Vec<u8>,
    /// The same, for the calls that take `&self`.
    read_key: RefCell<Vec<u8>>,
    /// The buffer `update` hands out.
    scratch: Vec<u8>,
    /// Point-table entries, written to the DB at [`KeyedState::flush`].
    /// A cell: reads through `&self` cache what they read, scans flush.
    cache: RefCell<WriteCache>,
    /// Ordered-table changes since the last flush, written with the cache.
    overlay: RefCell<Overlay>,
}

impl RocksState {
    /// The state of an operator whose column family is `cf` in `db`.
    pub fn new(db: Arc<BundleDb>, cf: &str, tables: &[TableSpec], key_groups: Range<KeyGroup>) -> Result<Self, StateError> {
        db.cf(cf)?;
        if tables.len() >= u8::MAX as usize {
            return Err(StateError::Backend(format!("operator `{cf}` declares {} tables; at most 254 fit the key prefix", tables.len())));
        }
        let mut read = ReadOptions::default();
        read.set_verify_checksums(false);
        let flushed = if db.claim(cf, &key_groups) { FlushedKeys::on() } else { FlushedKeys::off() };
        Ok(RocksState {
            cf: cf.to_string(),
            key_groups,
            tables: tables.to_vec(),
            read,
            key: Vec::with_capacity(64),
            read_key: RefCell::new(Vec::with_capacity(64)),
            scratch: Vec::new(),
            cache: RefCell::new(WriteCache::new(db.write_cache, flushed)),
            overlay: RefCell::new(Overlay::default()),
            db,
        })
    }

    fn check(&self, kg: KeyGroup) -> Result<(), StateError> {
        if self.key_groups.contains(&kg) {
            Ok(())
        } else {
            Err(StateError::ForeignKeyGroup { kg, owned: self.key_groups.clone() })
        }
    }

    fn err(&self, what: &str, e: rocksdb::Error) -> StateError {
        StateError::Backend(format!("{what} in {} (column family `{}`): {e}", self.db.path.display(), self.cf))
    }

    /// Look the composed key up; `f` sees the value if present.
    fn with_value<R>(&self, f: impl FnOnce(Option<&[u8]>) -> R) -> Result<R, StateError> {
        let cf = self.db.cf(&self.cf)?;
        let v = self.db.db.get_pinned_cf_opt(cf, &self.key, &self.read).map_err(|e| self.err("read failed", e))?;
        Ok(f(v.as_deref()))
    }

    /// [`with_value`](Self::with_value) for a point-table key the cache
    /// does not know: no read when no flush ever wrote the key.
    fn with_uncached_value<R>(&self, f: impl FnOnce(Option<&[u8]>) -> R) -> Result<R, StateError> {
        if self.cache.borrow().never_flushed(&self.key) {
            return Ok(f(None));
        }
        self.with_value(f)
    }

    /// [`with_value`](Self::with_value) for an ordered-table key: the
    /// overlay's change if it has one, else RocksDB (if it may hold the key).
    fn with_ordered_value<R>(&self, k: &[u8], f: impl FnOnce(Option<&[u8]>) -> R) -> Result<R, StateError> {
        if let Some(v) = self.overlay.borrow().get(k) {
            return Ok(f(v));
        }
        if self.cache.borrow().never_flushed(k) {
            return Ok(f(None));
        }
        let cf = self.db.cf(&self.cf)?;
        let v = self.db.db.get_pinned_cf_opt(cf, k, &self.read).map_err(|e| self.err("read failed", e))?;
        Ok(f(v.as_deref()))
    }

    /// Put the composed (ordered-table) key into the overlay.
    fn write_value(&self, value: &[u8]) -> Result<(), StateError> {
        let in_db = !self.cache.borrow().never_flushed(&self.key);
        self.overlay.borrow_mut().put(&self.key, value, in_db);
        self.bound_cache()
    }

    /// Delete the composed (ordered-table) key, known to be present.
    fn delete_key(&self) -> Result<(), StateError> {
        self.overlay.borrow_mut().delete(&self.key);
        Ok(())
    }

    /// Point tables go through the write-behind cache; ordered tables
    /// (scanned in key order) through the overlay.
    fn cached(&self, table: TableId) -> bool {
        self.tables.get(table).is_some_and(|t| t.kind == TableKind::Point)
    }

    /// Write the cache's dirty entries and the overlay to the DB in one batch.
    fn flush_cache(&self) -> Result<(), StateError> {
        let mut cache = self.cache.borrow_mut();
        let mut overlay = self.overlay.borrow_mut();
        if !cache.is_dirty() && overlay.is_empty() {
            return Ok(());
        }
        let cf = self.db.cf(&self.cf)?;
        let mut batch = WriteBatch::default();
        // Before the write: a failed batch may have been applied in part.
        for (k, p) in overlay.iter() {
            match p {
                Pending::Put { value, .. } => {
                    cache.note_flushed(k);
                    batch.put_cf(cf, k, value);
                }
                Pending::Delete => batch.delete_cf(cf, k),
            }
        }
        cache.flush(|changes| {
            for change in changes {
                match change {
                    Change::Put(k, v) => batch.put_cf(cf, k, v),
                    Change::Delete(k) => batch.delete_cf(cf, k),
                }
            }
            self.db.db.write_opt(batch, &self.db.write).map_err(|e| self.err("write failed", e))
        })?;
        overlay.clear();
        Ok(())
    }

    /// Write the cache and overlay out once they outgrow the budget (and
    /// empty the cache).
    fn bound_cache(&self) -> Result<(), StateError> {
        if self.cache.borrow().over_budget() {
            self.flush_cache()?;
            self.cache.borrow_mut().clear();
        } else if self.overlay.borrow().bytes() > self.db.write_cache {
            self.flush_cache()?;
        }
        Ok(())
    }

    /// Look composed key `k` up in the cache, else in the DB (caching what
    /// it finds). Returns whether the key is present, its value in `out`.
    fn read_through(&self, k: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        out.clear();
        if let Some(slot) = self.cache.borrow().get(k) {
            return Ok(match slot.value() {
                Some(v) => {
                    out.extend_from_slice(v);
                    true
                }
                None => false,
            });
        }
        if self.cache.borrow().never_flushed(k) {
            return Ok(false);
        }
        let cf = self.db.cf(&self.cf)?;
        let v = self.db.db.get_pinned_cf_opt(cf, k, &self.read).map_err(|e| self.err("read failed", e))?;
        let Some(v) = v else { return Ok(false) };
        out.extend_from_slice(&v);
        self.cache.borrow_mut().set_clean(k, &v);
        self.bound_cache()?;
        Ok(true)
    }

    /// Whether the cache knows composed key `k` (and then whether it is present).
    fn known(&self, k: &[u8]) -> Option<bool> {
        self.cache.borrow().get(k).map(|slot| slot.value().is_some())
    }

    /// Visit (kg, table) entries with `lower <= key < upper` in order.
    fn scan(&self, kg: KeyGroup, table: TableId, from: &[u8], to: Option<&[u8]>, f: &mut ScanFn<'_>) -> Result<(), StateError> {
        let mut lower = Vec::with_capacity(PREFIX + from.len());
        compose(&mut lower, kg, table, from);
        let upper = match to {
            Some(t) => {
                let mut u = Vec::new();
                compose(&mut u, kg, table, t);
                u
            }
            None => table_end(kg, table),
        };
        if lower >= upper {
            return Ok(());
        }
        let mut opts = ReadOptions::default();
        opts.set_iterate_lower_bound(lower.clone());
        opts.set_iterate_upper_bound(upper.clone());
        opts.set_verify_checksums(false);
        let cf = self.db.cf(&self.cf)?;
        let mut it = self.db.db.raw_iterator_cf_opt(cf, opts);
        it.seek(&lower);
        // Merge the DB's entries with the overlay's changes (which win).
        let overlay = self.overlay.borrow();
        let mut changes = overlay.range(&lower, &upper).peekable();
        loop {
            let db_key = it.key();
            let take_change = match (db_key, changes.peek()) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some(d), Some((c, _))) => *c <= d,
            };
            if take_change {
                let Some((k, change)) = changes.next() else { break };
                if db_key == Some(k) {
                    it.next();
                }
                if let Pending::Put { value, .. } = change {
                    if f(&k[PREFIX..], value).is_break() {
                        return Ok(());
                    }
                }
            } else {
                let (Some(k), Some(v)) = (it.key(), it.value()) else { break };
                if f(&k[PREFIX..], v).is_break() {
                    return Ok(());
                }
                it.next();
            }
        }
        it.status().map_err(|e| self.err("scan failed", e))
    }
}

impl KeyedState for RocksState {
    fn key_groups(&self) -> Range<KeyGroup> {
        self.key_groups.clone()
    }

    fn get(&self, table: TableId, kg: KeyGroup, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        self.check(kg)?;
        let mut k = self.read_key.borrow_mut();
        compose(&mut k, kg, table, key);
        if self.cached(table) {
            return self.read_through(&k, out);
        }
        out.clear();
        self.with_ordered_value(&k, |v| v.map(|v| out.extend_from_slice(v)).is_some())
    }

    fn contains(&self, table: TableId, kg: KeyGroup, key: &[u8]) -> Result<bool, StateError> {
        self.check(kg)?;
        let mut k = self.read_key.borrow_mut();
        compose(&mut k, kg, table, key);
        if self.cached(table) {
            if let Some(present) = self.known(&k) {
                return Ok(present);
            }
            let mut scratch = Vec::new();
            return self.read_through(&k, &mut scratch);
        }
        self.with_ordered_value(&k, |v| v.is_some())
    }

    /// A probe of the cache whose result is dropped: the loads of the
    /// prefetch pass over a batch overlap; the real lookups then hit.
    fn prefetch(&self, table: TableId, kg: KeyGroup, key: &[u8]) {
        if !self.cached(table) || !self.key_groups.contains(&kg) {
            return;
        }
        let mut k = self.read_key.borrow_mut();
        compose(&mut k, kg, table, key);
        self.cache.borrow().touch(&k);
    }

    fn put(&mut self, table: TableId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.check(kg)?;
        compose(&mut self.key, kg, table, key);
        if self.cached(table) {
            // Whether the DB holds the key is unknown: assume it may.
            self.cache.get_mut().set(&self.key, Some(value), true);
            return self.bound_cache();
        }
        self.write_value(value)
    }

    fn delete(&mut self, table: TableId, kg: KeyGroup, key: &[u8]) -> Result<bool, StateError> {
        self.check(kg)?;
        compose(&mut self.key, kg, table, key);
        if self.cached(table) {
            let present = match self.known(&self.key) {
                Some(present) => present,
                None => self.with_uncached_value(|v| v.is_some())?,
            };
            if present {
                self.cache.get_mut().set(&self.key, None, true);
            }
            return Ok(present);
        }
        if !self.with_ordered_value(&self.key, |v| v.is_some())? {
            return Ok(false);
        }
        self.delete_key()?;
        Ok(true)
    }

    fn scan_range(&self, table: TableId, kg: KeyGroup, from: &[u8], to: Option<&[u8]>, f: &mut ScanFn<'_>) -> Result<(), StateError> {
        self.check(kg)?;
        if self.tables[table].kind != TableKind::Ordered {
            return Err(StateError::NotOrdered { table: self.tables[table].name });
        }
        self.scan(kg, table, from, to, f)
    }

    fn scan_all(&self, table: TableId, kg: KeyGroup, f: &mut ScanFn<'_>) -> Result<(), StateError> {
        self.check(kg)?;
        if self.cached(table) {
            self.flush_cache()?;
        }
        self.scan(kg, table, &[], None, f)
    }

    /// Counts by scanning (the overlay merged): O(entries), for tests and diagnostics.
    fn len(&self, table: TableId) -> usize {
        if self.cached(table) && self.flush_cache().is_err() {
            return 0;
        }
        let mut n = 0;
        for kg in self.key_groups.clone() {
            let _ = self.scan(kg, table, &[], None, &mut |_, _| {
                n += 1;
                ControlFlow::Continue(())
            });
        }
        n
    }

    fn update(
        &mut self,
        table: TableId,
        kg: KeyGroup,
        key: &[u8],
        f: &mut dyn FnMut(&mut Vec<u8>, bool) -> bool,
    ) -> Result<(), StateError> {
        self.check(kg)?;
        compose(&mut self.key, kg, table, key);
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let result = if self.cached(table) {
            // `f` works on a copy: it may change the buffer and then decline.
            if self.cache.get_mut().update(&self.key, &mut buf, f).is_some() {
                self.scratch = buf;
                return self.bound_cache();
            }
            match self.with_uncached_value(|v| v.map(|v| buf.extend_from_slice(v)).is_some()) {
                Ok(found) if f(&mut buf, found) => {
                    // A key the cache did not know is in the DB only if it was found there.
                    self.cache.get_mut().set(&self.key, Some(&buf), found);
                    self.bound_cache()
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            }
        } else {
            match self.with_ordered_value(&self.key, |v| v.map(|v| buf.extend_from_slice(v)).is_some()) {
                Ok(found) if f(&mut buf, found) => self.write_value(&buf),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            }
        };
        self.scratch = buf;
        result
    }

    fn take(&mut self, table: TableId, kg: KeyGroup, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        self.check(kg)?;
        compose(&mut self.key, kg, table, key);
        out.clear();
        if self.cached(table) {
            let found = match self.cache.get_mut().get(&self.key) {
                Some(slot) => slot.value().map(|v| out.extend_from_slice(v)).is_some(),
                None => self.with_uncached_value(|v| v.map(|v| out.extend_from_slice(v)).is_some())?,
            };
            if found {
                self.cache.get_mut().set(&self.key, None, true);
            }
            return Ok(found);
        }
        if !self.with_ordered_value(&self.key, |v| v.map(|v| out.extend_from_slice(v)).is_some())? {
            return Ok(false);
        }
        self.delete_key()?;
        Ok(true)
    }

    fn put_if_absent(&mut self, table: TableId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<bool, StateError> {
        self.check(kg)?;
        compose(&mut self.key, kg, table, key);
        if self.cached(table) {
            let present = match self.known(&self.key) {
                Some(present) => present,
                None => {
                    let mut existing = std::mem::take(&mut self.scratch);
                    let found = self.read_through(&self.key, &mut existing);
                    self.scratch = existing;
                    found?
                }
            };
            if present {
                return Ok(false);
            }
            // Absent from the cache's view: if the cache knew the key (deleted), `in_db` is kept.
            self.cache.get_mut().set(&self.key, Some(value), false);
            self.bound_cache()?;
            return Ok(true);
        }
        if self.with_ordered_value(&self.key, |v| v.is_some())? {
            return Ok(false);
        }
        self.write_value(value)?;
        Ok(true)
    }

    fn flush(&mut self) -> Result<(), StateError> {
        self.flush_cache()
    }

    fn snapshot(&self, tables: &[TableSpec]) -> Result<StateSnapshot, StateError> {
        self.flush_cache()?;
        snapshot::start(self.db.clone(), &self.cf, tables, self.key_groups.clone())
    }

    fn is_native(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;

//! Keyed state: the one place operators keep what they remember.
//!
//! An operator declares named tables; each subtask gets a `KeyedState`
//! handle holding those tables for the key groups it owns. Keys are byte
//! strings, grouped by key group, so state can be snapshotted and later
//! redistributed by key-group range. Values are byte strings too: the
//! operator owns its encoding, the backend never interprets it.

pub mod memory;
pub mod native_format;
#[cfg(feature = "rocksdb")]
pub mod rocks;
// Without the feature, uninhabited stand-ins: config validation refuses
// `backend: rocksdb` before the runtime could reach them.
#[cfg(not(feature = "rocksdb"))]
#[path = "rocks_off.rs"]
pub mod rocks;
pub mod snapshot;

use std::ops::{ControlFlow, Range};

use crate::types::KeyGroup;

/// How a table is read: point lookups only, or also ordered range scans
/// (timers, windows by end time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    Point,
    Ordered,
}

/// A table an operator declares, by name (the name is part of the state
/// format: savepoints match tables by operator and table name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSpec {
    pub name: &'static str,
    pub kind: TableKind,
}

/// Called for each (key, value) a scan visits; `Break` ends the scan.
pub type ScanFn<'a> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'a;

/// Index of a table in the operator's `tables()` list.
pub type TableId = usize;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("key group {kg} is not owned by this subtask (owns {owned:?})")]
    ForeignKeyGroup { kg: KeyGroup, owned: Range<KeyGroup> },
    #[error("table {table} is not ordered and cannot be range-scanned")]
    NotOrdered { table: &'static str },
    #[error("state write failed: {0}")]
    Write(String),
    #[error("state backend: {0}")]
    Backend(String),
}

/// The synchronous part of a snapshot of one operator's keyed state, in the
/// canonical format of [`snapshot`]: the bytes themselves, or (RocksDB) a
/// consistent view taken at the synchronous point that is written out
/// later, off the task, while records keep flowing.
pub enum StateSnapshot {
    Bytes(Vec<u8>),
    /// Bytes whose buffer goes back to `BufferPool` once written.
    Pooled(Vec<u8>, BufferPool),
    Deferred(Box<dyn FnOnce() -> Result<Vec<u8>, StateError> + Send>),
}

impl StateSnapshot {
    /// The canonical bytes (for `Deferred`: waits until they are written).
    pub fn finish(self) -> Result<Vec<u8>, StateError> {
        Ok(self.finish_pooled()?.0)
    }

    /// The canonical bytes, and the pool to hand their buffer back to
    /// after they are written.
    pub fn finish_pooled(self) -> Result<(Vec<u8>, Option<BufferPool>), StateError> {
        match self {
            StateSnapshot::Bytes(b) => Ok((b, None)),
            StateSnapshot::Pooled(b, pool) => Ok((b, Some(pool))),
            StateSnapshot::Deferred(f) => Ok((f()?, None)),
        }
    }
}

/// One spare snapshot buffer, handed back by the checkpoint writer once the
/// bytes are on disk. The next snapshot of the same state writes into it:
/// its pages are already resident, where a fresh buffer of the state's size
/// would be faulted in and zeroed while the allocator still holds the old
/// one (mimalloc returns freed memory to the system after a delay of about
/// a second, so 1 s checkpoints of a large memory state held two copies).
#[derive(Clone, Default)]
pub struct BufferPool(std::sync::Arc<std::sync::Mutex<Option<Vec<u8>>>>);

impl BufferPool {
    /// The spare buffer (empty), or a new one.
    pub fn take(&self) -> Vec<u8> {
        let mut b = self.0.lock().ok().and_then(|mut g| g.take()).unwrap_or_default();
        b.clear();
        b
    }

    /// Keep `b` for the next `take`.
    pub fn give(&self, b: Vec<u8>) {
        if let Ok(mut g) = self.0.lock() {
            *g = Some(b);
        }
    }
}

impl std::fmt::Debug for StateSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateSnapshot::Bytes(b) | StateSnapshot::Pooled(b, _) => write!(f, "Bytes({} bytes)", b.len()),
            StateSnapshot::Deferred(_) => write!(f, "Deferred"),
        }
    }
}

/// How much a state holds: entries over all its tables and key groups, and
/// the bytes of their keys and values (not the backend's overhead).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateStats {
    pub keys: u64,
    pub bytes: u64,
}

impl StateStats {
    pub(crate) fn added(&mut self, key: usize, value: usize) {
        self.keys += 1;
        self.bytes += (key + value) as u64;
    }

    pub(crate) fn removed(&mut self, key: usize, value: usize) {
        self.keys = self.keys.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub((key + value) as u64);
    }

    /// A value of `old` bytes was replaced by one of `new`.
    pub(crate) fn resized(&mut self, old: usize, new: usize) {
        self.bytes = self.bytes.saturating_sub(old as u64) + new as u64;
    }
}

/// The keyed state of one operator in one subtask.
pub trait KeyedState: Send {
    /// The key groups this handle owns.
    fn key_groups(&self) -> Range<KeyGroup>;

    /// Copy the value of `key` into `out` (cleared first); false if absent.
    fn get(&self, table: TableId, kg: KeyGroup, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError>;

    fn contains(&self, table: TableId, kg: KeyGroup, key: &[u8]) -> Result<bool, StateError>;

    fn put(&mut self, table: TableId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<(), StateError>;

    /// Delete `key`; returns whether it was present.
    fn delete(&mut self, table: TableId, kg: KeyGroup, key: &[u8]) -> Result<bool, StateError>;

    /// Visit the entries of an ordered table with `from <= key < to` (to =
    /// None: no upper bound) in key order, until `f` breaks.
    fn scan_range(&self, table: TableId, kg: KeyGroup, from: &[u8], to: Option<&[u8]>, f: &mut ScanFn<'_>) -> Result<(), StateError>;

    /// Visit every entry of a table in a key group (any order for point tables).
    fn scan_all(&self, table: TableId, kg: KeyGroup, f: &mut ScanFn<'_>) -> Result<(), StateError>;

    /// Number of entries in a table over all owned key groups.
    fn len(&self, table: TableId) -> usize;

    /// Read-modify-write one entry: `f` gets the current value in a buffer
    /// (`found` false: absent, buffer empty) and returns whether to store the
    /// buffer as the new value. One lookup instead of a `get` and a `put`.
    fn update(
        &mut self,
        table: TableId,
        kg: KeyGroup,
        key: &[u8],
        f: &mut dyn FnMut(&mut Vec<u8>, bool) -> bool,
    ) -> Result<(), StateError> {
        let mut buf = Vec::new();
        let found = self.get(table, kg, key, &mut buf)?;
        if f(&mut buf, found) {
            self.put(table, kg, key, &buf)?;
        }
        Ok(())
    }

    /// Delete `key`, copying its value into `out` (cleared first); false if
    /// absent. One lookup instead of a `get` and a `delete`.
    fn take(&mut self, table: TableId, kg: KeyGroup, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        if !self.get(table, kg, key, out)? {
            return Ok(false);
        }
        self.delete(table, kg, key)
    }

    /// A hint that `key` is about to be read or written: a backend may pull
    /// its entry into the CPU cache now. Called for every record of a batch
    /// before the batch is processed, so the memory waits of independent
    /// lookups overlap instead of coming one after another.
    fn prefetch(&self, _table: TableId, _kg: KeyGroup, _key: &[u8]) {}

    /// Write whatever the backend holds back (RocksDB's write-behind cache)
    /// to where a checkpoint captures it. The runtime calls it at every
    /// checkpoint's synchronous point, before the snapshot or the bundle's
    /// native checkpoint.
    fn flush(&mut self) -> Result<(), StateError> {
        Ok(())
    }

    /// The synchronous part of a canonical snapshot of this state (see
    /// [`StateSnapshot`]). The default copies every entry now.
    fn snapshot(&self, tables: &[TableSpec]) -> Result<StateSnapshot, StateError> {
        let mut out = Vec::new();
        snapshot::write(self, tables, &mut out)?;
        Ok(StateSnapshot::Bytes(out))
    }

    /// Entries and their bytes, if the backend keeps them as it goes (the
    /// memory backend; RocksDB reports its own estimates per column family).
    /// Cheap: read once per batch by the owning task.
    fn stats(&self) -> Option<StateStats> {
        None
    }

    /// `stats` of one table alone (a join's state per input side).
    fn table_stats(&self, _table: TableId) -> Option<StateStats> {
        None
    }

    /// Whether the state lives in a bundle DB that native (incremental)
    /// checkpoints capture whole, so a task snapshot need not copy it.
    fn is_native(&self) -> bool {
        false
    }

    /// Delete the entries of an ordered table with `from <= key < to` (to =
    /// None: no upper bound), visiting each in key order first (a join's
    /// time index, cleared up to the watermark). The default scans, then
    /// deletes one by one; the memory backend cuts the range out whole.
    fn drain_range(
        &mut self,
        table: TableId,
        kg: KeyGroup,
        from: &[u8],
        to: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StateError> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        self.scan_range(table, kg, from, to, &mut |k, v| {
            f(k, v);
            keys.push(k.to_vec());
            ControlFlow::Continue(())
        })?;
        for k in keys {
            self.delete(table, kg, &k)?;
        }
        Ok(())
    }

    /// Put `key` only if absent; returns whether it was inserted.
    fn put_if_absent(&mut self, table: TableId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<bool, StateError> {
        if self.contains(table, kg, key)? {
            return Ok(false);
        }
        self.put(table, kg, key, value)?;
        Ok(true)
    }
}

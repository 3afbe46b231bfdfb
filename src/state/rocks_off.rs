//! The `rocks` module of a weir built without the `rocksdb` feature: the
//! same names with no values. `BundleDb` cannot be created (a clear error),
//! so nothing that needs a DB can ever run; `weir validate` and `weir run`
//! refuse `state.backend: rocksdb` before the runtime is built
//! (`config::features`), and a restore refuses native checkpoints.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{KeyedState, ScanFn, StateError, TableId};
use crate::config::Compression;
use crate::types::KeyGroup;

fn unavailable() -> StateError {
    StateError::Backend(crate::features::missing_reason(crate::features::Feature::RocksDb))
}

/// How the DB of a bundle would be tuned (`state.rocksdb`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocksOptions {
    pub block_cache: u64,
    pub write_buffer: u64,
    pub compression: Compression,
    pub write_cache: usize,
}

impl Default for RocksOptions {
    fn default() -> Self {
        RocksOptions { block_cache: 256 << 20, write_buffer: 64 << 20, compression: Compression::Lz4, write_cache: 64 << 20 }
    }
}

/// No working DB exists in this build.
pub enum BundleDb {}

impl BundleDb {
    pub fn int_property(&self, _cf: &str, _name: &str) -> Option<u64> {
        match *self {}
    }

    pub fn create(_path: &Path, _column_families: &[String], _options: &RocksOptions) -> Result<Arc<BundleDb>, StateError> {
        Err(unavailable())
    }

    pub fn local_checkpoint(&self, _id: crate::types::CheckpointId) -> Result<native::LocalCheckpoint, StateError> {
        match *self {}
    }

    pub fn local_root(&self) -> PathBuf {
        match *self {}
    }
}

pub enum RocksState {}

impl RocksState {
    pub fn new(db: Arc<BundleDb>, _cf: &str, _tables: &[super::TableSpec], _kg: Range<KeyGroup>) -> Result<Self, StateError> {
        match *db {}
    }
}

impl KeyedState for RocksState {
    fn key_groups(&self) -> Range<KeyGroup> {
        match *self {}
    }
    fn get(&self, _: TableId, _: KeyGroup, _: &[u8], _: &mut Vec<u8>) -> Result<bool, StateError> {
        match *self {}
    }
    fn contains(&self, _: TableId, _: KeyGroup, _: &[u8]) -> Result<bool, StateError> {
        match *self {}
    }
    fn put(&mut self, _: TableId, _: KeyGroup, _: &[u8], _: &[u8]) -> Result<(), StateError> {
        match *self {}
    }
    fn delete(&mut self, _: TableId, _: KeyGroup, _: &[u8]) -> Result<bool, StateError> {
        match *self {}
    }
    fn scan_range(&self, _: TableId, _: KeyGroup, _: &[u8], _: Option<&[u8]>, _: &mut ScanFn<'_>) -> Result<(), StateError> {
        match *self {}
    }
    fn scan_all(&self, _: TableId, _: KeyGroup, _: &mut ScanFn<'_>) -> Result<(), StateError> {
        match *self {}
    }
    fn len(&self, _: TableId) -> usize {
        match *self {}
    }
}

pub mod native {
    use std::path::Path;
    use std::sync::Arc;

    use super::{unavailable, BundleDb, RocksOptions};
    use crate::checkpoint::disk::StoreError;
    use crate::checkpoint::manifest::FileEntry;
    use crate::state::StateError;
    use crate::types::{BundleId, CheckpointId};

    pub use crate::state::native_format::{remove_other_bundles, DB_SUBDIR, NATIVE_MARKER};

    #[derive(Debug)]
    pub enum LocalCheckpoint {}

    #[derive(Debug, Default, Clone, Copy)]
    pub struct UploadStats {
        pub new_bytes: u64,
        pub new_files: u64,
        pub reused_bytes: u64,
    }

    /// Holds nothing: there is never a local checkpoint to upload.
    pub struct Uploader;

    impl Uploader {
        pub fn new(_bundle: BundleId) -> Self {
            Uploader
        }

        pub fn upload(
            &mut self,
            local: &LocalCheckpoint,
            _bundle_dir: &Path,
            _shared_dir: &Path,
        ) -> Result<(Vec<FileEntry>, UploadStats), StoreError> {
            match *local {}
        }
    }

    /// Nothing to remove: this build never made a local checkpoint.
    pub fn retain_local(_local_root: &Path, _keep: Option<CheckpointId>, _below: CheckpointId) {}

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RestoreSource {
        Local,
        Checkpoint,
    }

    pub struct NativeCheckpoint<'a> {
        pub id: CheckpointId,
        pub bundle: BundleId,
        pub files: &'a [FileEntry],
        pub bundle_dir: &'a Path,
        pub shared_dir: &'a Path,
    }

    pub fn restore(
        _from: &NativeCheckpoint<'_>,
        _db_path: &Path,
        _column_families: &[String],
        _options: &RocksOptions,
    ) -> Result<(Arc<BundleDb>, Uploader, RestoreSource), StateError> {
        Err(unavailable())
    }
}

//! The names of the native (RocksDB) checkpoint format and the local-state
//! clean-up that code outside `rocks` needs, kept apart so a weir built without the `rocksdb`
//! feature still recognises such a checkpoint (and refuses it clearly).

/// Where private DB files go inside a checkpoint's bundle directory.
pub const DB_SUBDIR: &str = "db";

/// The operator state of a task snapshot whose state is in its bundle's
/// native checkpoint (never the start of a canonical snapshot, which opens
/// with a table count below 255).
pub const NATIVE_MARKER: &[u8] = b"WEIRNAT1";

/// Remove the local state of bundles this run does not have (`bundles`
/// and up): a crashed run at another parallelism or with another backend
/// left their working DBs and local checkpoints, which nothing restores.
pub fn remove_other_bundles(local_dir: &std::path::Path, bundles: crate::types::BundleId) {
    let Ok(entries) = std::fs::read_dir(local_dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let bundle = name.to_str().and_then(crate::checkpoint::layout::parse_bundle_dir_name);
        if bundle.is_some_and(|b| b >= bundles) {
            tracing::info!(dir = %e.path().display(), "Removed the local state of a bundle this run does not have.");
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

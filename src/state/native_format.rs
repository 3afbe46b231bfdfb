//! The two names of the native (RocksDB) checkpoint format that code
//! outside `rocks` needs, kept apart so a weir built without the `rocksdb`
//! feature still recognises such a checkpoint (and refuses it clearly).

/// Where private DB files go inside a checkpoint's bundle directory.
pub const DB_SUBDIR: &str = "db";

/// The operator state of a task snapshot whose state is in its bundle's
/// native checkpoint (never the start of a canonical snapshot, which opens
/// with a table count below 255).
pub const NATIVE_MARKER: &[u8] = b"WEIRNAT1";

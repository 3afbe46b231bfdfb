//! The two JSON documents of a checkpoint: one `MANIFEST` per bundle (what
//! the bundle's arbiter committed) and one `_metadata` (the coordinator's
//! commit point). Both carry a format `version` and a `crc32c` of their own
//! content, so a damaged document is refused even when it still parses.
//!
//! The checksum covers the canonical serialization of the document with
//! `crc32c` set to 0. serde_json writes struct fields in declaration order,
//! so reading, zeroing and re-serializing reproduces exactly the bytes that
//! were summed; any change to a value shows as a mismatch.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::types::{BundleId, CheckpointId, Kind};

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// One state file of a bundle, as committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Relative to the bundle directory, or (`shared`) to `checkpoints/shared/`.
    pub name: String,
    pub size: u64,
    pub crc32c: u32,
    /// A file of `checkpoints/shared/` (an SST of an incremental RocksDB
    /// checkpoint), referenced by every checkpoint that needs it. Left out
    /// of the JSON when false, so private-only manifests read as before.
    #[serde(default, skip_serializing_if = "is_false")]
    pub shared: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl FileEntry {
    /// A file inside the bundle directory.
    pub fn private(name: impl Into<String>, size: u64, crc32c: u32) -> Self {
        FileEntry { name: name.into(), size, crc32c, shared: false }
    }
}

/// A subtask task that votes in a bundle: the task running `chain`, subtask `subtask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskId {
    pub chain: u32,
    pub subtask: u16,
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chain {} subtask {}", self.chain, self.subtask)
    }
}

/// `chk-n/bundle-b/MANIFEST`: every file of bundle b in checkpoint n.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleManifest {
    pub version: u32,
    pub checkpoint_id: CheckpointId,
    pub bundle: BundleId,
    /// The tasks that voted Prepared.
    pub voters: Vec<TaskId>,
    pub files: Vec<FileEntry>,
    pub crc32c: u32,
}

/// `chk-n/_metadata`: written last; its presence makes the checkpoint exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub version: u32,
    pub pipeline: String,
    pub checkpoint_id: CheckpointId,
    pub kind: Kind,
    /// Wall-clock creation time, epoch milliseconds.
    pub created_ms: i64,
    pub parallelism: u16,
    pub max_parallelism: u16,
    pub bundles: Vec<BundleId>,
    pub operators: Vec<String>,
    /// What each keyed operator's state is keyed by (`Pipeline::state_keys`).
    #[serde(default)]
    pub keys: std::collections::BTreeMap<String, String>,
    /// In a cluster: which instance of how many wrote it, of which pipeline
    /// (left out for one instance, so those documents read as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterRecord>,
    /// A savepoint weir took on SIGTERM (`savepoint.on_sigterm`): the only
    /// kind weir ever disposes of on its own (`on_sigterm_keep`). Left out
    /// when false, so every other document reads as before.
    #[serde(default, skip_serializing_if = "is_false")]
    pub on_sigterm: bool,
    pub crc32c: u32,
}

/// The instance that wrote a checkpoint: instance `index` of `instances`,
/// and the identity of the pipeline (`plan::cluster::identity`: its name, key
/// groups and repartition edges), which every instance shares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterRecord {
    pub index: u16,
    pub instances: u16,
    pub identity: String,
    /// The cluster generation its repartition stamps carried
    /// (`plan::cluster::generation`), kept by a restart. Left out when 0, as
    /// every document before it reads.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ClusterRecord {
    /// The same instance of the same cluster shape, whatever the
    /// generation (one shape has many: each rescale into it begins one).
    pub fn same_shape(&self, other: &ClusterRecord) -> bool {
        (self.index, self.instances, &self.identity) == (other.index, other.instances, &other.identity)
    }
}

impl fmt::Display for ClusterRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "instance {} of {} (pipeline identity {})", self.index, self.instances, self.identity)
    }
}

/// Why a document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocError {
    #[error("not valid JSON for this document: {0}")]
    Parse(String),
    #[error("format version {found} is not supported (this build reads version {FORMAT_VERSION})")]
    UnsupportedVersion { found: u32 },
    #[error("content checksum mismatch: recorded {recorded:#010x}, content has {actual:#010x}")]
    Checksum { recorded: u32, actual: u32 },
}

/// A document sealed with a checksum of its own content.
pub trait Document: Serialize + DeserializeOwned + Clone {
    fn crc_field(&mut self) -> &mut u32;

    /// The bytes to write: pretty JSON plus a newline, checksum filled in.
    fn to_bytes(&self) -> Vec<u8> {
        let mut doc = self.clone();
        *doc.crc_field() = 0;
        let crc = crc32c::crc32c(&canonical(&doc));
        *doc.crc_field() = crc;
        canonical(&doc)
    }

    /// Parse, check the version, then the checksum.
    fn from_bytes(bytes: &[u8]) -> Result<Self, DocError> {
        #[derive(Deserialize)]
        struct VersionOnly {
            version: u32,
        }
        let v: VersionOnly = serde_json::from_slice(bytes).map_err(|e| DocError::Parse(e.to_string()))?;
        if v.version != FORMAT_VERSION {
            return Err(DocError::UnsupportedVersion { found: v.version });
        }
        let mut doc: Self = serde_json::from_slice(bytes).map_err(|e| DocError::Parse(e.to_string()))?;
        let recorded = std::mem::take(doc.crc_field());
        let actual = crc32c::crc32c(&canonical(&doc));
        if recorded != actual {
            return Err(DocError::Checksum { recorded, actual });
        }
        *doc.crc_field() = recorded;
        Ok(doc)
    }
}

fn canonical<T: Serialize>(doc: &T) -> Vec<u8> {
    // Plain structs of strings and integers always serialize.
    let mut out = serde_json::to_vec_pretty(doc).unwrap_or_default();
    out.push(b'\n');
    out
}

impl Document for BundleManifest {
    fn crc_field(&mut self) -> &mut u32 {
        &mut self.crc32c
    }
}

impl Document for Metadata {
    fn crc_field(&mut self) -> &mut u32 {
        &mut self.crc32c
    }
}

impl BundleManifest {
    pub fn new(checkpoint_id: CheckpointId, bundle: BundleId, voters: Vec<TaskId>, files: Vec<FileEntry>) -> Self {
        BundleManifest { version: FORMAT_VERSION, checkpoint_id, bundle, voters, files, crc32c: 0 }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn metadata(id: CheckpointId, bundles: Vec<BundleId>) -> Metadata {
        Metadata {
            version: FORMAT_VERSION,
            pipeline: "orders".into(),
            checkpoint_id: id,
            kind: Kind::Checkpoint,
            created_ms: 1_700_000_000_000,
            parallelism: 2,
            max_parallelism: 128,
            bundles,
            operators: vec!["orders".into(), "unique".into()],
            keys: [("unique".to_string(), "dedup by [order_id]".to_string())].into(),
            cluster: None,
            on_sigterm: false,
            crc32c: 0,
        }
    }

    fn manifest() -> BundleManifest {
        let files = vec![FileEntry::private("op-unique.bin", 12, 0xdead_beef)];
        BundleManifest::new(7, 3, vec![TaskId { chain: 1, subtask: 0 }, TaskId { chain: 1, subtask: 1 }], files)
    }

    #[test]
    fn documents_round_trip() {
        let m = manifest();
        let back = BundleManifest::from_bytes(&m.to_bytes()).unwrap();
        assert_eq!(back.files, m.files);
        assert_ne!(back.crc32c, 0);
        let md = metadata(7, vec![0, 1]);
        let back = Metadata::from_bytes(&md.to_bytes()).unwrap();
        assert_eq!(Metadata { crc32c: 0, ..back }, md);
    }

    #[test]
    fn shared_entries_say_so_and_private_ones_keep_their_old_shape() {
        let mut m = manifest();
        let private = String::from_utf8(m.to_bytes()).unwrap();
        assert!(!private.contains("shared"), "{private}");
        m.files.push(FileEntry { name: "b000-0123456789abcdef-000012.sst".into(), size: 9, crc32c: 1, shared: true });
        let back = BundleManifest::from_bytes(&m.to_bytes()).unwrap();
        assert!(back.files[1].shared && !back.files[0].shared);
    }

    #[test]
    fn json_shape_is_readable() {
        let text = String::from_utf8(metadata(7, vec![0]).to_bytes()).unwrap();
        assert!(text.contains("\"kind\": \"checkpoint\""), "{text}");
        assert!(text.starts_with("{\n  \"version\": 1,"), "{text}");
    }

    #[test]
    fn every_single_bit_flip_is_refused() {
        let bytes = manifest().to_bytes();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(BundleManifest::from_bytes(&b).is_err(), "flip of bit {bit} at byte {i} went unnoticed");
            }
        }
    }

    #[test]
    fn changed_value_is_a_checksum_error() {
        let text = String::from_utf8(manifest().to_bytes()).unwrap().replace("\"size\": 12", "\"size\": 13");
        assert!(matches!(BundleManifest::from_bytes(text.as_bytes()), Err(DocError::Checksum { .. })));
    }

    #[test]
    fn other_versions_and_garbage_are_refused() {
        let text = String::from_utf8(manifest().to_bytes()).unwrap().replace("\"version\": 1", "\"version\": 2");
        assert_eq!(BundleManifest::from_bytes(text.as_bytes()), Err(DocError::UnsupportedVersion { found: 2 }));
        assert!(matches!(BundleManifest::from_bytes(b""), Err(DocError::Parse(_))));
        assert!(matches!(Metadata::from_bytes(&manifest().to_bytes()), Err(DocError::Parse(_))));
    }
}

//! Generations: how object storage keeps a deposed owner from changing what
//! the current owner committed, and where the lineage of its checkpoints
//! lives when the state directory is gone.
//!
//! Every start that owns a checkpoint storage (`checkpoint.storage:
//! s3://...`) begins a new **generation**: after it took the lease
//! (`lease`) and decided what it restores, it creates
//! `_generations/0000005` with a conditional put (`If-None-Match: *`), so
//! two starts can never both be generation 5. Every checkpoint it writes
//! carries the generation in its name (`chk-0000012-g000005/`), so a
//! stalled request of an older owner (its lease lost while the request
//! waited in the network) lands under the older name and can never replace
//! an object of the current one; shared SSTs have names no other DB
//! incarnation produces (`state::rocks::native`).
//!
//! The record is also the lineage (`lineage` keeps the same on the local
//! disk): what the generation started from, written before its first
//! checkpoint can exist. `--restore latest` reads the newest record and
//! walks back ([`candidates`]): the generation's own checkpoints, newest
//! first; then what it started from: a checkpoint of an older generation
//! (then that generation's checkpoints up to it), a savepoint or a set of
//! savepoints (restored again), or the beginning. A checkpoint an older
//! owner committed after the newer one had listed the store is on no such
//! path and is never restored, so neither is anything a stale writer put
//! after it was deposed.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::manifest::{DocError, Document, FORMAT_VERSION};
use super::storage::{Storage, StorageError};
use crate::types::CheckpointId;
use crate::types::Kind;

/// A generation's number; 0: checkpoints written without one (local
/// storage, or object storage written by a weir before generations).
pub type Generation = u64;

/// Where generation records are kept under the storage's root.
pub const PREFIX: &str = "_generations/";

/// A checkpoint as stored: its id and the generation that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StoredId {
    pub id: CheckpointId,
    pub generation: Generation,
}

impl StoredId {
    pub fn new(id: CheckpointId, generation: Generation) -> Self {
        StoredId { id, generation }
    }

    /// `chk-0000012-g000005` (`chk-0000012` for generation 0).
    pub fn name(&self) -> String {
        let base = super::layout::checkpoint_dir_name(self.id);
        if self.generation == 0 {
            base
        } else {
            format!("{base}-g{:06}", self.generation)
        }
    }

    /// The inverse of [`StoredId::name`]; None for any other name.
    pub fn parse(name: &str) -> Option<StoredId> {
        let (base, generation) = match name.rsplit_once("-g") {
            Some((base, g)) if g.bytes().all(|b| b.is_ascii_digit()) => (base, g.parse().ok().filter(|&g| g > 0)?),
            _ => (name, 0),
        };
        let parsed = StoredId::new(super::layout::parse_checkpoint_dir_name(base)?, generation);
        (parsed.name() == name).then_some(parsed)
    }
}

impl std::fmt::Display for StoredId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.generation == 0 {
            write!(f, "{}", self.id)
        } else {
            write!(f, "{} (generation {})", self.id, self.generation)
        }
    }
}

/// What a generation started from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Origin {
    /// Nothing: the first record, or a start without `--restore`.
    Beginning,
    /// `--restore latest` chose this checkpoint of the same storage: the
    /// lineage goes on through the generation that wrote it.
    Continues { checkpoint: StoredId },
    /// A checkpoint or savepoint given by path or URL (or found as the
    /// origin of an older generation): restored again while the
    /// generation has no checkpoint.
    Restored { path: String, checkpoint_id: CheckpointId, checkpoint_kind: Kind },
    /// A savepoint set (a rescale), every path of it.
    Set { paths: Vec<String> },
}

/// `_generations/0000005`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub version: u32,
    pub pipeline: String,
    pub generation: Generation,
    /// The first checkpoint id this generation writes.
    pub first_id: CheckpointId,
    pub origin: Origin,
    /// Who began it (host, PID), for messages.
    pub owner: String,
    pub created_ms: i64,
    pub crc32c: u32,
}

impl Document for Record {
    fn crc_field(&mut self) -> &mut u32 {
        &mut self.crc32c
    }
}

impl Record {
    pub fn new(pipeline: &str, generation: Generation, first_id: CheckpointId, origin: Origin) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default();
        let created_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        Record {
            version: FORMAT_VERSION,
            pipeline: pipeline.into(),
            generation,
            first_id,
            origin,
            owner: format!("{host} pid {}", std::process::id()),
            created_ms,
            crc32c: 0,
        }
    }
}

/// Why the generation records cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum GenerationError {
    #[error("{url}: {source}; the lineage of this checkpoint storage cannot be followed (restore a checkpoint or savepoint by path, or start without --restore)")]
    Damaged { url: String, source: DocError },
    #[error("{url} exists already: another process began generation {generation} at the same time; nothing was written")]
    Raced { url: String, generation: Generation },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// `_generations/0000005`.
pub fn key(generation: Generation) -> String {
    format!("{PREFIX}{generation:07}")
}

/// The numbers of the generations recorded in `storage`, ascending.
pub fn list(storage: &dyn Storage) -> Result<Vec<Generation>, StorageError> {
    let mut out: Vec<Generation> =
        storage.list(PREFIX)?.into_iter().filter_map(|o| o.key[PREFIX.len()..].parse().ok()).filter(|&g| g > 0).collect();
    out.sort_unstable();
    Ok(out)
}

/// Every record in `storage`, ascending; a damaged one is an error (a
/// lineage with a hole in it would be followed to the wrong place).
pub fn read_all(storage: &dyn Storage) -> Result<Vec<Record>, GenerationError> {
    let mut out = Vec::new();
    for g in list(storage)? {
        let url = storage.url(&key(g));
        let bytes = storage.get(&key(g))?;
        let record = Record::from_bytes(&bytes).map_err(|source| GenerationError::Damaged { url: url.clone(), source })?;
        if record.generation != g {
            let source = DocError::Parse(format!("it says generation {}", record.generation));
            return Err(GenerationError::Damaged { url, source });
        }
        out.push(record);
    }
    Ok(out)
}

/// Create `record` with a conditional put: it exists afterwards, and no
/// other process created the same generation.
pub fn create(storage: &dyn Storage, record: &Record) -> Result<(), GenerationError> {
    let (k, bytes) = (key(record.generation), record.to_bytes());
    match storage.put_if_absent(&k, &bytes) {
        Ok(()) => Ok(()),
        // A retried put whose first try went through finds its own record.
        Err(StorageError::AlreadyExists { url }) => match storage.get(&k) {
            Ok(there) if there == bytes => Ok(()),
            _ => Err(GenerationError::Raced { url, generation: record.generation }),
        },
        Err(e) => Err(e.into()),
    }
}

/// Where `--restore latest` looks, in order: stored checkpoints (try each,
/// the first valid one wins), then where the lineage began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidates {
    pub checkpoints: Vec<StoredId>,
    /// What to restore when none of them is valid (never `Continues`).
    pub origin: Origin,
}

/// Walk the lineage back from the newest record of `pipeline` over the
/// `complete` checkpoints in the store (see the module comment). None
/// when there is no record of `pipeline`: a storage written before
/// generations, or by another pipeline.
pub fn candidates(records: &[Record], complete: &BTreeSet<StoredId>, pipeline: &str) -> Option<Candidates> {
    let newest = records.iter().filter(|r| r.pipeline == pipeline).max_by_key(|r| r.generation)?;
    let mut checkpoints = Vec::new();
    let (mut generation, mut first_id, mut origin) = (newest.generation, newest.first_id, newest.origin.clone());
    let mut upto = CheckpointId::MAX;
    loop {
        checkpoints.extend(complete.iter().rev().filter(|s| s.generation == generation && s.id >= first_id && s.id <= upto).copied());
        let Origin::Continues { checkpoint } = origin else { return Some(Candidates { checkpoints, origin }) };
        // Generations only ever go back: a record pointing forward (or at
        // itself) is not followed.
        if checkpoint.generation >= generation {
            return Some(Candidates { checkpoints, origin: Origin::Beginning });
        }
        upto = checkpoint.id;
        generation = checkpoint.generation;
        match records.iter().find(|r| r.generation == generation) {
            Some(r) => (first_id, origin) = (r.first_id, r.origin.clone()),
            // Generation 0 has no record: its checkpoints up to the one continued.
            None => (first_id, origin) = (0, Origin::Beginning),
        }
        if generation == 0 {
            checkpoints.extend(complete.iter().rev().filter(|s| s.generation == 0 && s.id <= upto).copied());
            return Some(Candidates { checkpoints, origin });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::storage::LocalStorage;

    fn rec(generation: Generation, first_id: CheckpointId, origin: Origin) -> Record {
        Record::new("p", generation, first_id, origin)
    }

    fn ids(list: &[(CheckpointId, Generation)]) -> BTreeSet<StoredId> {
        list.iter().map(|&(i, g)| StoredId::new(i, g)).collect()
    }

    #[test]
    fn names_carry_the_generation_and_parse_back() {
        for s in [StoredId::new(7, 0), StoredId::new(12, 5), StoredId::new(12_345_678, 999_999), StoredId::new(1, 1_000_000)] {
            assert_eq!(StoredId::parse(&s.name()), Some(s), "{}", s.name());
        }
        assert_eq!(StoredId::new(12, 5).name(), "chk-0000012-g000005");
        assert_eq!(StoredId::new(12, 0).name(), "chk-0000012");
        for bad in ["chk-0000012-g", "chk-0000012-g000000", "chk-0000012-g5", "chk-12-g000005", "chk-0000012-gx00005", "sp-0000012"] {
            assert_eq!(StoredId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_stale_owners_late_checkpoint_is_on_no_path() {
        // Generation 1 committed 8 and 9; generation 2 took over, listed,
        // and continued from 9 with first id 10; then generation 1's late
        // commit of 10 and 11 landed.
        let records = [rec(1, 1, Origin::Beginning), rec(2, 10, Origin::Continues { checkpoint: StoredId::new(9, 1) })];
        let complete = ids(&[(8, 1), (9, 1), (10, 1), (11, 1)]);
        let c = candidates(&records, &complete, "p").unwrap();
        assert_eq!(c.checkpoints, vec![StoredId::new(9, 1), StoredId::new(8, 1)]);
        assert_eq!(c.origin, Origin::Beginning);
        // Once generation 2 has its own, those come first.
        let complete = ids(&[(8, 1), (9, 1), (10, 1), (10, 2), (11, 1), (11, 2)]);
        let c = candidates(&records, &complete, "p").unwrap();
        assert_eq!(c.checkpoints, vec![StoredId::new(11, 2), StoredId::new(10, 2), StoredId::new(9, 1), StoredId::new(8, 1)]);
    }

    #[test]
    fn a_savepoint_restore_stays_the_origin_until_a_checkpoint_completes() {
        let sp = Origin::Restored { path: "s3://b/sp/savepoint-p-0000040".into(), checkpoint_id: 40, checkpoint_kind: Kind::Savepoint };
        // Generation 3 restored the savepoint and crashed before its first
        // checkpoint; generation 4 found nothing and restored it again.
        let records = [rec(1, 1, Origin::Beginning), rec(3, 41, sp.clone()), rec(4, 41, sp.clone())];
        let complete = ids(&[(20, 1), (21, 1)]);
        let c = candidates(&records, &complete, "p").unwrap();
        assert_eq!(c, Candidates { checkpoints: vec![], origin: sp.clone() }, "never the old lineage's 21");
        let complete = ids(&[(20, 1), (21, 1), (41, 4)]);
        assert_eq!(candidates(&records, &complete, "p").unwrap().checkpoints, vec![StoredId::new(41, 4)]);
    }

    #[test]
    fn the_walk_reaches_generation_zero_and_never_loops() {
        let records = [rec(1, 6, Origin::Continues { checkpoint: StoredId::new(5, 0) })];
        let complete = ids(&[(3, 0), (5, 0), (6, 0)]);
        let c = candidates(&records, &complete, "p").unwrap();
        assert_eq!(c.checkpoints, vec![StoredId::new(5, 0), StoredId::new(3, 0)]);
        let looping = [rec(2, 6, Origin::Continues { checkpoint: StoredId::new(5, 2) })];
        assert_eq!(candidates(&looping, &complete, "p").unwrap().origin, Origin::Beginning);
        assert_eq!(candidates(&records, &complete, "other"), None);
        assert_eq!(candidates(&[], &complete, "p"), None);
    }

    #[test]
    fn records_are_created_once_and_damage_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(tmp.path());
        let set = Origin::Set { paths: vec!["/a".into(), "/b".into()] };
        create(&s, &rec(1, 1, Origin::Beginning)).unwrap();
        let two = rec(2, 7, set.clone());
        create(&s, &two).unwrap();
        create(&s, &two).expect("a retried create that had landed is ours");
        assert!(matches!(create(&s, &rec(2, 9, Origin::Beginning)), Err(GenerationError::Raced { generation: 2, .. })));
        let all = read_all(&s).unwrap();
        assert_eq!(all.iter().map(|r| (r.generation, r.first_id)).collect::<Vec<_>>(), vec![(1, 1), (2, 7)]);
        assert_eq!(all[1].origin, set);
        s.put(&key(3), b"{\"version\": 1}").unwrap();
        assert!(matches!(read_all(&s), Err(GenerationError::Damaged { .. })));
    }
}

//! The latest checkpoints and savepoints, completed or failed, as the
//! status document lists them (Flink's checkpoint history tab). The
//! driver adds each one as it ends; the counters and histograms in
//! `metrics` hold the totals.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// How many are kept.
pub const KEPT: usize = 20;

/// One checkpoint or savepoint that ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub id: u64,
    /// `checkpoint` or `savepoint`.
    pub kind: String,
    /// `completed` or `failed`.
    pub status: String,
    /// When it ended, wall clock, ms since the Unix epoch.
    pub ended_ms: u64,
    /// Completed: the trigger to the commit, and its parts (the slowest
    /// task's snapshot, its write, the longest alignment).
    pub duration_ms: u64,
    pub sync_ms: u64,
    pub async_ms: u64,
    pub alignment_ms: u64,
    /// Bytes written, bytes of earlier checkpoints' shared files it
    /// references (incremental RocksDB), bytes of in-flight records
    /// (unaligned).
    pub bytes: u64,
    pub reused_bytes: u64,
    pub in_flight_bytes: u64,
    /// Failed: the reason class (`weir_checkpoints_failed_total`'s label)
    /// and the text the log line has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Default)]
pub struct History {
    entries: Mutex<VecDeque<Entry>>,
}

impl History {
    pub fn push(&self, entry: Entry) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() == KEPT {
            entries.pop_front();
        }
        entries.push_back(entry);
    }

    /// The kept entries, newest first.
    pub fn newest_first(&self) -> Vec<Entry> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).iter().rev().cloned().collect()
    }
}

/// Now, ms since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_are_kept_and_listed_first() {
        let h = History::default();
        for id in 1..=KEPT as u64 + 5 {
            h.push(Entry { id, ..Entry::default() });
        }
        let listed: Vec<u64> = h.newest_first().iter().map(|e| e.id).collect();
        assert_eq!(listed.len(), KEPT);
        assert_eq!(listed[0], KEPT as u64 + 5);
        assert_eq!(*listed.last().unwrap(), 6);
    }
}

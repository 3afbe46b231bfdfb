//! The bundle arbiter: the two-phase commit of one bundle's state for one
//! checkpoint, as a pure state machine (the seed's cure for subtasks of one
//! bundle restoring from different checkpoints).
//!
//! Prepare: every member task snapshots and votes `Prepared(n, files)` or
//! `Abort(n, reason)`. Commit: only when every member voted Prepared does the
//! arbiter decide `Commit(n, files)`; the driver then writes the bundle
//! MANIFEST atomically and reports `BundleCommitted(n, b)` to the
//! coordinator. Any abort, or a timeout, aborts n. Nothing here does I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::checkpoint::manifest::{FileEntry, TaskId};
use crate::types::{BundleId, CheckpointId};

/// A member's vote for checkpoint `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vote {
    /// Snapshot written and fsynced: these files (relative to the bundle dir).
    Prepared { id: CheckpointId, voter: TaskId, files: Vec<FileEntry> },
    /// The snapshot failed (a failed write is an abort, never a skip).
    Abort { id: CheckpointId, voter: TaskId, reason: String },
}

impl Vote {
    pub fn id(&self) -> CheckpointId {
        match self {
            Vote::Prepared { id, .. } | Vote::Abort { id, .. } => *id,
        }
    }

    fn voter(&self) -> TaskId {
        match self {
            Vote::Prepared { voter, .. } | Vote::Abort { voter, .. } => *voter,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbortReason {
    Voter {
        voter: TaskId,
        reason: String,
    },
    Timeout,
    /// The coordinator aborted the checkpoint (another bundle failed, or
    /// writing `_metadata` did).
    Coordinator(String),
    /// A vote for a newer checkpoint arrived first: `id` can never complete.
    Superseded {
        by: CheckpointId,
    },
    /// Two members listed the same file: their snapshots overwrote each other.
    DuplicateFile {
        name: String,
    },
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AbortReason::Voter { voter, reason } => write!(f, "{voter} aborted: {reason}"),
            AbortReason::Timeout => write!(f, "timed out before every subtask prepared"),
            AbortReason::Coordinator(why) => write!(f, "aborted by the coordinator: {why}"),
            AbortReason::Superseded { by } => write!(f, "superseded by checkpoint {by}"),
            AbortReason::DuplicateFile { name } => write!(f, "two subtasks wrote the same state file {name:?}"),
        }
    }
}

/// Why an event changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IgnoreReason {
    /// Older than the round in progress or the last decided one.
    Stale,
    /// This checkpoint was already committed or aborted.
    AlreadyDecided,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArbiterDecision {
    /// Still waiting for votes.
    Pending {
        id: CheckpointId,
    },
    /// Every member prepared: write the MANIFEST with these files (sorted by name).
    Commit {
        id: CheckpointId,
        voters: Vec<TaskId>,
        files: Vec<FileEntry>,
    },
    Abort {
        id: CheckpointId,
        reason: AbortReason,
    },
    Ignored {
        id: CheckpointId,
        why: IgnoreReason,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArbiterError {
    #[error("{voter} voted in bundle {bundle}, which it is not a member of")]
    NotAMember { bundle: BundleId, voter: TaskId },
}

/// The open round: the checkpoint being prepared.
#[derive(Debug)]
struct Round {
    id: CheckpointId,
    prepared: BTreeMap<TaskId, Vec<FileEntry>>,
}

/// The arbiter of one bundle.
#[derive(Debug)]
pub struct BundleArbiter {
    bundle: BundleId,
    members: BTreeSet<TaskId>,
    round: Option<Round>,
    /// The newest checkpoint decided (committed or aborted).
    decided: Option<CheckpointId>,
}

impl BundleArbiter {
    pub fn new(bundle: BundleId, members: impl IntoIterator<Item = TaskId>) -> Self {
        BundleArbiter { bundle, members: members.into_iter().collect(), round: None, decided: None }
    }

    pub fn bundle(&self) -> BundleId {
        self.bundle
    }

    /// Record a vote. A vote for a newer checkpoint opens its round (and
    /// aborts an undecided older one, which is returned first).
    pub fn on_vote(&mut self, vote: Vote) -> Result<Vec<ArbiterDecision>, ArbiterError> {
        let (id, voter) = (vote.id(), vote.voter());
        if !self.members.contains(&voter) {
            return Err(ArbiterError::NotAMember { bundle: self.bundle, voter });
        }
        let mut decisions = Vec::new();
        match self.classify(id) {
            Some(why) => return Ok(vec![ArbiterDecision::Ignored { id, why }]),
            None if self.round.as_ref().is_some_and(|r| r.id == id) => {}
            None => {
                if let Some(old) = self.round.take() {
                    decisions.push(self.decide_abort(old.id, AbortReason::Superseded { by: id }));
                }
            }
        }
        decisions.push(match vote {
            Vote::Abort { reason, .. } => self.decide_abort(id, AbortReason::Voter { voter, reason }),
            Vote::Prepared { files, .. } => self.prepare(id, voter, files),
        });
        Ok(decisions)
    }

    /// The members that have not voted for checkpoint `id` yet (none once
    /// it is decided).
    pub fn waiting_for(&self, id: CheckpointId) -> Vec<TaskId> {
        if self.decided.is_some_and(|d| d >= id) {
            return Vec::new();
        }
        match &self.round {
            Some(r) if r.id == id => self.members.iter().filter(|m| !r.prepared.contains_key(m)).copied().collect(),
            Some(r) if r.id > id => Vec::new(),
            _ => self.members.iter().copied().collect(),
        }
    }

    /// The coordinator's timeout for checkpoint `id`.
    pub fn on_timeout(&mut self, id: CheckpointId) -> Vec<ArbiterDecision> {
        self.on_abort(id, AbortReason::Timeout)
    }

    /// Abort `id` from outside (a timeout, or another bundle aborted it).
    /// An older undecided round is aborted first, as superseded.
    pub fn on_abort(&mut self, id: CheckpointId, reason: AbortReason) -> Vec<ArbiterDecision> {
        if let Some(why) = self.classify(id) {
            return vec![ArbiterDecision::Ignored { id, why }];
        }
        let mut decisions = Vec::new();
        if let Some(old) = self.round.as_ref().map(|r| r.id).filter(|&old| old < id) {
            decisions.push(self.decide_abort(old, AbortReason::Superseded { by: id }));
        }
        // Also when never opened here: late votes for `id` are then stale.
        decisions.push(self.decide_abort(id, reason));
        decisions
    }

    /// Why an event for `id` is to be ignored, or None if it is current or newer.
    fn classify(&self, id: CheckpointId) -> Option<IgnoreReason> {
        match (self.decided, &self.round) {
            (Some(d), _) if id == d => Some(IgnoreReason::AlreadyDecided),
            (Some(d), _) if id < d => Some(IgnoreReason::Stale),
            (_, Some(r)) if id < r.id => Some(IgnoreReason::Stale),
            _ => None,
        }
    }

    /// Record `voter` as prepared for the open round `id`; commit when all are.
    fn prepare(&mut self, id: CheckpointId, voter: TaskId, files: Vec<FileEntry>) -> ArbiterDecision {
        let round = self.round.get_or_insert_with(|| Round { id, prepared: BTreeMap::new() });
        // A repeated vote keeps the first: idempotent.
        round.prepared.entry(voter).or_insert(files);
        if round.prepared.len() < self.members.len() {
            return ArbiterDecision::Pending { id };
        }
        let voters: Vec<TaskId> = round.prepared.keys().copied().collect();
        match merge_files(&round.prepared) {
            Ok(files) => {
                self.round = None;
                self.decided = Some(id);
                ArbiterDecision::Commit { id, voters, files }
            }
            Err(name) => self.decide_abort(id, AbortReason::DuplicateFile { name }),
        }
    }

    /// Decide `id` aborted; its round, if open, is dropped.
    fn decide_abort(&mut self, id: CheckpointId, reason: AbortReason) -> ArbiterDecision {
        if self.round.as_ref().is_some_and(|r| r.id <= id) {
            self.round = None;
        }
        self.decided = Some(self.decided.map_or(id, |d| d.max(id)));
        ArbiterDecision::Abort { id, reason }
    }
}

/// All members' files sorted by name, or the first name listed twice.
fn merge_files(prepared: &BTreeMap<TaskId, Vec<FileEntry>>) -> Result<Vec<FileEntry>, String> {
    let mut files: Vec<FileEntry> = prepared.values().flatten().cloned().collect();
    files.sort_by(|a, b| a.name.cmp(&b.name));
    match files.windows(2).find(|w| w[0].name == w[1].name) {
        Some(w) => Err(w[0].name.clone()),
        None => Ok(files),
    }
}

#[cfg(test)]
mod tests {
    use super::ArbiterDecision::*;
    use super::*;

    fn task(subtask: u16) -> TaskId {
        TaskId { chain: 1, subtask }
    }

    fn file(name: &str) -> FileEntry {
        FileEntry::private(name, 3, 7)
    }

    fn prepared(id: CheckpointId, subtask: u16) -> Vote {
        Vote::Prepared { id, voter: task(subtask), files: vec![file(&format!("sub-{subtask}.bin"))] }
    }

    fn abort(id: CheckpointId, subtask: u16) -> Vote {
        Vote::Abort { id, voter: task(subtask), reason: "disk full".into() }
    }

    fn arbiter() -> BundleArbiter {
        BundleArbiter::new(3, [task(0), task(1), task(2)])
    }

    #[test]
    fn commits_only_when_every_member_prepared() {
        let mut a = arbiter();
        assert_eq!(a.bundle(), 3);
        assert_eq!(a.on_vote(prepared(1, 2)).unwrap(), vec![Pending { id: 1 }]);
        assert_eq!(a.on_vote(prepared(1, 0)).unwrap(), vec![Pending { id: 1 }]);
        let files = vec![file("sub-0.bin"), file("sub-1.bin"), file("sub-2.bin")];
        let voters = vec![task(0), task(1), task(2)];
        assert_eq!(a.on_vote(prepared(1, 1)).unwrap(), vec![Commit { id: 1, voters, files }]);
    }

    #[test]
    fn waiting_for_names_the_members_that_have_not_voted() {
        let mut a = arbiter();
        assert_eq!(a.waiting_for(1), vec![task(0), task(1), task(2)], "no vote yet");
        a.on_vote(prepared(1, 1)).unwrap();
        assert_eq!(a.waiting_for(1), vec![task(0), task(2)]);
        a.on_vote(prepared(1, 0)).unwrap();
        a.on_vote(prepared(1, 2)).unwrap();
        assert_eq!(a.waiting_for(1), Vec::<TaskId>::new(), "committed");
        a.on_vote(prepared(3, 0)).unwrap();
        assert_eq!(a.waiting_for(2), Vec::<TaskId>::new(), "superseded by a newer round");
        assert_eq!(a.waiting_for(3), vec![task(1), task(2)]);
        a.on_timeout(3);
        assert_eq!(a.waiting_for(3), Vec::<TaskId>::new(), "aborted");
    }

    #[test]
    fn one_abort_aborts_the_checkpoint() {
        let mut a = arbiter();
        a.on_vote(prepared(1, 0)).unwrap();
        let reason = AbortReason::Voter { voter: task(1), reason: "disk full".into() };
        assert_eq!(a.on_vote(abort(1, 1)).unwrap(), vec![Abort { id: 1, reason: reason.clone() }]);
        assert!(reason.to_string().contains("chain 1 subtask 1 aborted: disk full"), "{reason}");
        // Late votes for 1 change nothing: no commit of a partial bundle.
        assert_eq!(a.on_vote(prepared(1, 1)).unwrap(), vec![Ignored { id: 1, why: IgnoreReason::AlreadyDecided }]);
        assert_eq!(a.on_vote(prepared(1, 2)).unwrap(), vec![Ignored { id: 1, why: IgnoreReason::AlreadyDecided }]);
        // The next checkpoint starts clean.
        a.on_vote(prepared(2, 0)).unwrap();
        a.on_vote(prepared(2, 1)).unwrap();
        assert!(matches!(a.on_vote(prepared(2, 2)).unwrap()[..], [Commit { id: 2, .. }]));
    }

    #[test]
    fn a_timeout_aborts_and_later_votes_are_ignored() {
        let mut a = arbiter();
        a.on_vote(prepared(4, 0)).unwrap();
        assert_eq!(a.on_timeout(4), vec![Abort { id: 4, reason: AbortReason::Timeout }]);
        assert_eq!(a.on_timeout(4), vec![Ignored { id: 4, why: IgnoreReason::AlreadyDecided }]);
        assert_eq!(a.on_vote(prepared(4, 1)).unwrap(), vec![Ignored { id: 4, why: IgnoreReason::AlreadyDecided }]);
    }

    #[test]
    fn a_timeout_before_any_vote_still_fences_the_id() {
        let mut a = arbiter();
        assert_eq!(a.on_timeout(5), vec![Abort { id: 5, reason: AbortReason::Timeout }]);
        assert_eq!(a.on_vote(prepared(5, 0)).unwrap(), vec![Ignored { id: 5, why: IgnoreReason::AlreadyDecided }]);
        assert_eq!(a.on_vote(prepared(3, 0)).unwrap(), vec![Ignored { id: 3, why: IgnoreReason::Stale }]);
    }

    #[test]
    fn stale_votes_are_ignored_and_say_so() {
        let mut a = arbiter();
        for s in 0..3 {
            a.on_vote(prepared(7, s)).unwrap();
        }
        assert_eq!(a.on_vote(prepared(6, 0)).unwrap(), vec![Ignored { id: 6, why: IgnoreReason::Stale }]);
        a.on_vote(prepared(9, 0)).unwrap();
        assert_eq!(a.on_vote(prepared(8, 1)).unwrap(), vec![Ignored { id: 8, why: IgnoreReason::Stale }]);
        assert_eq!(a.on_timeout(8), vec![Ignored { id: 8, why: IgnoreReason::Stale }]);
        assert_eq!(a.on_vote(prepared(7, 1)).unwrap(), vec![Ignored { id: 7, why: IgnoreReason::AlreadyDecided }]);
    }

    #[test]
    fn duplicate_votes_are_idempotent() {
        let mut a = BundleArbiter::new(0, [task(0), task(1)]);
        assert_eq!(a.on_vote(prepared(1, 0)).unwrap(), vec![Pending { id: 1 }]);
        // A repeat (even with other files) neither counts twice nor replaces the first.
        let again = Vote::Prepared { id: 1, voter: task(0), files: vec![file("other")] };
        assert_eq!(a.on_vote(again).unwrap(), vec![Pending { id: 1 }]);
        let [Commit { files, .. }] = &a.on_vote(prepared(1, 1)).unwrap()[..] else { panic!("no commit") };
        assert_eq!(files, &vec![file("sub-0.bin"), file("sub-1.bin")]);
        assert_eq!(a.on_vote(prepared(1, 1)).unwrap(), vec![Ignored { id: 1, why: IgnoreReason::AlreadyDecided }]);
    }

    #[test]
    fn a_non_member_vote_is_an_error() {
        let mut a = arbiter();
        let stranger = TaskId { chain: 2, subtask: 0 };
        let vote = Vote::Prepared { id: 1, voter: stranger, files: vec![] };
        assert_eq!(a.on_vote(vote), Err(ArbiterError::NotAMember { bundle: 3, voter: stranger }));
        // And it did not open a round.
        assert_eq!(a.on_vote(prepared(1, 0)).unwrap(), vec![Pending { id: 1 }]);
    }

    #[test]
    fn a_newer_vote_supersedes_an_undecided_round() {
        let mut a = arbiter();
        a.on_vote(prepared(1, 0)).unwrap();
        a.on_vote(prepared(1, 1)).unwrap();
        assert_eq!(a.on_vote(prepared(2, 2)).unwrap(), vec![Abort { id: 1, reason: AbortReason::Superseded { by: 2 } }, Pending { id: 2 }]);
        // Votes of the round that was dropped do not count for the new one.
        a.on_vote(prepared(2, 0)).unwrap();
        assert_eq!(a.on_vote(prepared(1, 2)).unwrap(), vec![Ignored { id: 1, why: IgnoreReason::AlreadyDecided }]);
        assert!(matches!(a.on_vote(prepared(2, 1)).unwrap()[..], [Commit { id: 2, .. }]));
    }

    #[test]
    fn an_abort_from_outside_for_a_newer_id_drops_the_older_round() {
        let mut a = arbiter();
        a.on_vote(prepared(1, 0)).unwrap();
        let other = AbortReason::Voter { voter: TaskId { chain: 0, subtask: 0 }, reason: "bundle 0 failed".into() };
        assert_eq!(
            a.on_abort(2, other.clone()),
            vec![Abort { id: 1, reason: AbortReason::Superseded { by: 2 } }, Abort { id: 2, reason: other }]
        );
        assert_eq!(a.on_vote(prepared(1, 1)).unwrap(), vec![Ignored { id: 1, why: IgnoreReason::Stale }]);
    }

    #[test]
    fn members_writing_the_same_file_abort() {
        let mut a = BundleArbiter::new(0, [task(0), task(1)]);
        a.on_vote(Vote::Prepared { id: 1, voter: task(0), files: vec![file("state.bin")] }).unwrap();
        let last = Vote::Prepared { id: 1, voter: task(1), files: vec![file("state.bin")] };
        let name = "state.bin".to_string();
        assert_eq!(a.on_vote(last).unwrap(), vec![Abort { id: 1, reason: AbortReason::DuplicateFile { name } }]);
    }
}

//! The barrier alignment tracker of one task: given barrier, data, close and
//! timer events on its N input channels, it says what the task must do
//! (block an input, snapshot, forward the barrier, record in-flight data).
//!
//! Pure: no channels, no clocks (the caller passes `now`), no I/O, so every
//! interleaving is a unit test. The task loop owns the channels and acts on
//! the returned [`Action`]s in order.
//!
//! - `Aligned`: on Barrier(n) from c, block c until every open input
//!   delivered n; then snapshot, forward, unblock, complete. Exactly-once.
//! - `Unaligned`: at the first Barrier(n), snapshot and forward at once;
//!   data arriving before n on the other inputs is processed *and* recorded
//!   as channel state, until that input's barrier arrives.
//! - `AlignedTimeout(t)`: aligned, but once alignment has lasted `t`, switch
//!   this checkpoint to unaligned (snapshot, forward, unblock, record the
//!   inputs still missing their barrier).
//! - `AtLeastOnce`: never block; snapshot and forward when the last barrier arrives.
//!
//! A closed input counts as having delivered every future barrier. A newer
//! barrier arriving before the current checkpoint completed aborts it (the
//! newer one subsumes it); barriers of finished or aborted checkpoints are ignored.

use std::time::{Duration, Instant};

use crate::types::CheckpointId;
use crate::types::Kind;

/// Index of an input channel of the task.
pub type InputId = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlignmentMode {
    Aligned,
    Unaligned,
    AlignedTimeout(Duration),
    AtLeastOnce,
}

/// What the task must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Stop reading this input until `UnblockAll`.
    Block(InputId),
    /// Take the state snapshot for `id` now. `unaligned`: also forward the
    /// barrier ahead of queued output and persist that output as channel state.
    Snapshot {
        id: CheckpointId,
        unaligned: bool,
    },
    /// Send Barrier(id) on every output channel.
    ForwardBarrier(CheckpointId),
    UnblockAll,
    /// Every input delivered `id`: recording of in-flight data for `id` ends
    /// (an unaligned snapshot can be finalised).
    Complete(CheckpointId),
    /// A newer barrier arrived before `id` completed: `id` is abandoned.
    AbortStale(CheckpointId),
}

/// What to do with a batch that arrived on an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDisposition {
    Process,
    /// Process it, and record it as in-flight channel state of the running
    /// unaligned checkpoint (it arrived before this input's barrier).
    ProcessAndRecord,
    /// The input is blocked: reading it was a bug in the caller. Keep the
    /// batch and process it after `UnblockAll`; processing it now would put
    /// post-barrier data into the snapshot.
    Hold,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BarrierError {
    #[error("input {input} does not exist (the task has {inputs})")]
    UnknownInput { input: InputId, inputs: usize },
    #[error("barrier {id} arrived on input {input}, which is closed")]
    BarrierOnClosedInput { input: InputId, id: CheckpointId },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for barriers; aligned inputs that delivered are blocked.
    Aligning,
    /// Snapshot taken, barrier forwarded; recording inputs not yet delivered.
    Recording,
}

#[derive(Debug)]
struct Pending {
    id: CheckpointId,
    /// Per input: delivered this barrier (or closed).
    arrived: Vec<bool>,
    started: Instant,
    phase: Phase,
    /// A savepoint: aligned whatever the mode (never switched, never recorded).
    aligned: bool,
}

/// The alignment state of one task.
#[derive(Debug)]
pub struct BarrierTracker {
    mode: AlignmentMode,
    closed: Vec<bool>,
    blocked: Vec<bool>,
    pending: Option<Pending>,
    /// The highest id started so far; barriers at or below it are stale
    /// unless it is the pending one.
    latest: Option<CheckpointId>,
}

impl BarrierTracker {
    pub fn new(mode: AlignmentMode, inputs: usize) -> Self {
        BarrierTracker { mode, closed: vec![false; inputs], blocked: vec![false; inputs], pending: None, latest: None }
    }

    /// The checkpoint being aligned or recorded, if any.
    pub fn pending(&self) -> Option<CheckpointId> {
        self.pending.as_ref().map(|p| p.id)
    }

    pub fn is_blocked(&self, input: InputId) -> bool {
        self.blocked.get(input).copied().unwrap_or(false)
    }

    /// When `on_timer` must be called to switch to unaligned, if ever.
    pub fn deadline(&self) -> Option<Instant> {
        match (self.mode, &self.pending) {
            (AlignmentMode::AlignedTimeout(t), Some(p)) if p.phase == Phase::Aligning && !p.aligned => Some(p.started + t),
            _ => None,
        }
    }

    /// Barrier `id` of a checkpoint arrived on `input` at `now`.
    pub fn on_barrier(&mut self, input: InputId, id: CheckpointId, now: Instant) -> Result<Vec<Action>, BarrierError> {
        self.on_barrier_of(input, id, Kind::Checkpoint, now)
    }

    /// Barrier `id` of `kind` arrived on `input` at `now`. A savepoint is
    /// aligned whatever the mode: it must be canonical, with no in-flight
    /// records (they would tie it to this job's layout).
    pub fn on_barrier_of(&mut self, input: InputId, id: CheckpointId, kind: Kind, now: Instant) -> Result<Vec<Action>, BarrierError> {
        self.check_input(input)?;
        if self.closed[input] {
            return Err(BarrierError::BarrierOnClosedInput { input, id });
        }
        let mut actions = Vec::new();
        match self.pending() {
            Some(p) if id == p => {}
            Some(p) if id > p => {
                actions.extend(self.abort_pending());
                self.start(id, kind, now, &mut actions);
            }
            // Older than the pending one, or already finished/aborted.
            Some(_) => return Ok(actions),
            None if self.latest.is_some_and(|l| id <= l) => return Ok(actions),
            None => self.start(id, kind, now, &mut actions),
        }
        let Some(p) = self.pending.as_mut() else { return Ok(actions) };
        if p.arrived[input] {
            return Ok(actions); // a duplicate barrier changes nothing
        }
        p.arrived[input] = true;
        if self.all_arrived() {
            actions.extend(self.finish());
        } else if self.aligning() {
            // Past the timeout this input needs no blocking: switch instead.
            let switched = self.on_timer(now);
            if switched.is_empty() {
                self.blocked[input] = true;
                actions.push(Action::Block(input));
            }
            actions.extend(switched);
        }
        Ok(actions)
    }

    /// How to handle a batch from `input`.
    pub fn on_data(&self, input: InputId) -> DataDisposition {
        if self.is_blocked(input) {
            return DataDisposition::Hold;
        }
        match &self.pending {
            Some(p) if p.phase == Phase::Recording && !p.arrived.get(input).copied().unwrap_or(true) => DataDisposition::ProcessAndRecord,
            _ => DataDisposition::Process,
        }
    }

    /// `input` closed: from now on it counts as having delivered every barrier.
    pub fn on_closed(&mut self, input: InputId) -> Result<Vec<Action>, BarrierError> {
        self.check_input(input)?;
        self.closed[input] = true;
        let Some(p) = self.pending.as_mut() else { return Ok(Vec::new()) };
        if p.arrived[input] {
            return Ok(Vec::new());
        }
        p.arrived[input] = true;
        Ok(if self.all_arrived() { self.finish() } else { Vec::new() })
    }

    /// Time passed: in `AlignedTimeout` mode, switch a too-long alignment to unaligned.
    pub fn on_timer(&mut self, now: Instant) -> Vec<Action> {
        match (self.deadline(), &mut self.pending) {
            (Some(deadline), Some(p)) if now >= deadline => {
                p.phase = Phase::Recording;
                let id = p.id;
                let mut actions = vec![Action::Snapshot { id, unaligned: true }, Action::ForwardBarrier(id)];
                actions.extend(self.unblock_all());
                actions
            }
            _ => Vec::new(),
        }
    }

    fn check_input(&self, input: InputId) -> Result<(), BarrierError> {
        match input < self.closed.len() {
            true => Ok(()),
            false => Err(BarrierError::UnknownInput { input, inputs: self.closed.len() }),
        }
    }

    /// Begin checkpoint `id`: closed inputs have delivered it already.
    fn start(&mut self, id: CheckpointId, kind: Kind, now: Instant, actions: &mut Vec<Action>) {
        let aligned = kind == Kind::Savepoint;
        let phase = match self.mode {
            AlignmentMode::Unaligned if !aligned => Phase::Recording,
            _ => Phase::Aligning,
        };
        self.pending = Some(Pending { id, arrived: self.closed.clone(), started: now, phase, aligned });
        self.latest = Some(id);
        if phase == Phase::Recording {
            actions.extend([Action::Snapshot { id, unaligned: true }, Action::ForwardBarrier(id)]);
        }
    }

    fn aligning(&self) -> bool {
        self.pending.as_ref().is_some_and(|p| p.phase == Phase::Aligning && (p.aligned || self.mode != AlignmentMode::AtLeastOnce))
    }

    fn all_arrived(&self) -> bool {
        self.pending.as_ref().is_some_and(|p| p.arrived.iter().all(|&a| a))
    }

    /// Every barrier is in: snapshot now unless that already happened.
    fn finish(&mut self) -> Vec<Action> {
        let Some(p) = self.pending.take() else { return Vec::new() };
        let mut actions = Vec::new();
        if p.phase == Phase::Aligning {
            actions.extend([Action::Snapshot { id: p.id, unaligned: false }, Action::ForwardBarrier(p.id)]);
        }
        actions.extend(self.unblock_all());
        actions.push(Action::Complete(p.id));
        actions
    }

    fn abort_pending(&mut self) -> Vec<Action> {
        let Some(p) = self.pending.take() else { return Vec::new() };
        let mut actions = vec![Action::AbortStale(p.id)];
        actions.extend(self.unblock_all());
        actions
    }

    /// `UnblockAll` if anything is blocked.
    fn unblock_all(&mut self) -> Option<Action> {
        let any = self.blocked.iter().any(|&b| b);
        self.blocked.iter_mut().for_each(|b| *b = false);
        any.then_some(Action::UnblockAll)
    }
}

#[cfg(test)]
mod tests {
    use super::Action::*;
    use super::DataDisposition::*;
    use super::*;

    const T: Duration = Duration::from_millis(100);

    struct Clock(Instant);
    impl Clock {
        fn at(&self, ms: u64) -> Instant {
            self.0 + Duration::from_millis(ms)
        }
    }

    fn setup(mode: AlignmentMode, inputs: usize) -> (BarrierTracker, Clock) {
        (BarrierTracker::new(mode, inputs), Clock(Instant::now()))
    }

    fn snap(id: CheckpointId) -> Action {
        Snapshot { id, unaligned: false }
    }

    fn usnap(id: CheckpointId) -> Action {
        Snapshot { id, unaligned: true }
    }

    #[test]
    fn aligned_blocks_until_every_input_delivered() {
        let (mut t, c) = setup(AlignmentMode::Aligned, 3);
        assert_eq!(t.on_barrier(1, 1, c.at(0)).unwrap(), vec![Block(1)]);
        assert!(t.is_blocked(1));
        assert_eq!(t.on_data(1), Hold);
        assert_eq!(t.on_data(0), Process);
        assert_eq!(t.on_barrier(0, 1, c.at(5)).unwrap(), vec![Block(0)]);
        assert_eq!(t.on_barrier(2, 1, c.at(9)).unwrap(), vec![snap(1), ForwardBarrier(1), UnblockAll, Complete(1)]);
        assert!(!t.is_blocked(0) && !t.is_blocked(1));
        assert_eq!(t.pending(), None);
        assert_eq!(t.deadline(), None);
    }

    #[test]
    fn savepoints_are_aligned_in_every_mode() {
        for mode in [AlignmentMode::Unaligned, AlignmentMode::AtLeastOnce, AlignmentMode::AlignedTimeout(T)] {
            let (mut t, c) = setup(mode, 2);
            assert_eq!(t.on_barrier_of(0, 3, Kind::Savepoint, c.at(0)).unwrap(), vec![Block(0)], "{mode:?}");
            assert_eq!(t.on_data(0), Hold, "{mode:?}");
            assert_eq!(t.deadline(), None, "{mode:?}: a savepoint never switches to unaligned");
            let done = t.on_barrier_of(1, 3, Kind::Savepoint, c.at(9)).unwrap();
            assert_eq!(done, vec![snap(3), ForwardBarrier(3), UnblockAll, Complete(3)], "{mode:?}");
            // The next checkpoint follows the mode again.
            let next = t.on_barrier(0, 4, c.at(10)).unwrap();
            assert_eq!(next.first() == Some(&usnap(4)), mode == AlignmentMode::Unaligned, "{mode:?}: {next:?}");
        }
    }

    #[test]
    fn single_input_needs_no_blocking_in_any_mode() {
        let c = Clock(Instant::now());
        let cases = [
            (AlignmentMode::Aligned, vec![snap(4), ForwardBarrier(4), Complete(4)]),
            (AlignmentMode::AlignedTimeout(T), vec![snap(4), ForwardBarrier(4), Complete(4)]),
            (AlignmentMode::AtLeastOnce, vec![snap(4), ForwardBarrier(4), Complete(4)]),
            (AlignmentMode::Unaligned, vec![usnap(4), ForwardBarrier(4), Complete(4)]),
        ];
        for (mode, expected) in cases {
            let mut t = BarrierTracker::new(mode, 1);
            assert_eq!(t.on_barrier(0, 4, c.at(0)).unwrap(), expected, "{mode:?}");
        }
    }

    #[test]
    fn closed_inputs_count_as_delivered() {
        let (mut t, c) = setup(AlignmentMode::Aligned, 3);
        assert_eq!(t.on_closed(2).unwrap(), vec![]);
        assert_eq!(t.on_barrier(0, 1, c.at(0)).unwrap(), vec![Block(0)]);
        // Closing the last missing input completes the alignment.
        assert_eq!(t.on_closed(1).unwrap(), vec![snap(1), ForwardBarrier(1), UnblockAll, Complete(1)]);
        // Later checkpoints need only the open input.
        assert_eq!(t.on_barrier(0, 2, c.at(1)).unwrap(), vec![snap(2), ForwardBarrier(2), Complete(2)]);
        assert_eq!(t.on_barrier(1, 3, c.at(2)), Err(BarrierError::BarrierOnClosedInput { input: 1, id: 3 }));
        // Closing an input that already delivered changes nothing.
        let (mut t, c) = setup(AlignmentMode::Aligned, 2);
        t.on_barrier(0, 1, c.at(0)).unwrap();
        assert_eq!(t.on_closed(0).unwrap(), vec![]);
        assert_eq!(t.pending(), Some(1));
    }

    #[test]
    fn unknown_inputs_are_errors_not_panics() {
        let (mut t, c) = setup(AlignmentMode::Aligned, 2);
        let err = BarrierError::UnknownInput { input: 2, inputs: 2 };
        assert_eq!(t.on_barrier(2, 1, c.at(0)), Err(err.clone()));
        assert_eq!(t.on_closed(2), Err(err));
        assert_eq!(t.on_data(7), Process);
        assert!(!t.is_blocked(7));
    }

    #[test]
    fn duplicate_and_old_barriers_are_ignored() {
        let (mut t, c) = setup(AlignmentMode::Aligned, 2);
        t.on_barrier(0, 5, c.at(0)).unwrap();
        assert_eq!(t.on_barrier(0, 5, c.at(1)).unwrap(), vec![]);
        assert_eq!(t.on_barrier(1, 4, c.at(1)).unwrap(), vec![]);
        t.on_barrier(1, 5, c.at(2)).unwrap();
        // Finished ids stay finished.
        assert_eq!(t.on_barrier(0, 5, c.at(3)).unwrap(), vec![]);
        assert_eq!(t.on_barrier(0, 3, c.at(3)).unwrap(), vec![]);
        assert_eq!(t.pending(), None);
    }

    #[test]
    fn ids_increase_across_checkpoints() {
        let (mut t, c) = setup(AlignmentMode::Aligned, 2);
        for id in [1, 2, 5, 9] {
            assert_eq!(t.on_barrier(1, id, c.at(id)).unwrap(), vec![Block(1)]);
            assert_eq!(t.on_barrier(0, id, c.at(id)).unwrap(), vec![snap(id), ForwardBarrier(id), UnblockAll, Complete(id)]);
        }
    }

    #[test]
    fn a_newer_barrier_aborts_the_unfinished_one() {
        let (mut t, c) = setup(AlignmentMode::Aligned, 3);
        t.on_barrier(0, 1, c.at(0)).unwrap();
        assert_eq!(t.on_barrier(1, 2, c.at(1)).unwrap(), vec![AbortStale(1), UnblockAll, Block(1)]);
        assert!(!t.is_blocked(0));
        // The late barrier 1 on input 2 is stale now.
        assert_eq!(t.on_barrier(2, 1, c.at(2)).unwrap(), vec![]);
        t.on_barrier(0, 2, c.at(3)).unwrap();
        assert_eq!(t.on_barrier(2, 2, c.at(4)).unwrap(), vec![snap(2), ForwardBarrier(2), UnblockAll, Complete(2)]);
    }

    #[test]
    fn unaligned_snapshots_at_the_first_barrier_and_records_the_rest() {
        let (mut t, c) = setup(AlignmentMode::Unaligned, 3);
        assert_eq!(t.on_data(0), Process);
        assert_eq!(t.on_barrier(1, 1, c.at(0)).unwrap(), vec![usnap(1), ForwardBarrier(1)]);
        assert!(!t.is_blocked(1));
        assert_eq!(t.on_data(1), Process);
        assert_eq!(t.on_data(0), ProcessAndRecord);
        assert_eq!(t.on_data(2), ProcessAndRecord);
        assert_eq!(t.on_barrier(0, 1, c.at(1)).unwrap(), vec![]);
        assert_eq!(t.on_data(0), Process);
        assert_eq!(t.on_data(2), ProcessAndRecord);
        assert_eq!(t.on_barrier(2, 1, c.at(2)).unwrap(), vec![Complete(1)]);
        assert_eq!(t.on_data(2), Process);
    }

    #[test]
    fn unaligned_closed_input_ends_its_recording() {
        let (mut t, c) = setup(AlignmentMode::Unaligned, 2);
        t.on_barrier(0, 1, c.at(0)).unwrap();
        assert_eq!(t.on_data(1), ProcessAndRecord);
        assert_eq!(t.on_closed(1).unwrap(), vec![Complete(1)]);
    }

    #[test]
    fn unaligned_newer_barrier_aborts_and_restarts_recording() {
        let (mut t, c) = setup(AlignmentMode::Unaligned, 2);
        t.on_barrier(0, 1, c.at(0)).unwrap();
        assert_eq!(t.on_barrier(0, 2, c.at(1)).unwrap(), vec![AbortStale(1), usnap(2), ForwardBarrier(2)]);
        assert_eq!(t.on_data(1), ProcessAndRecord);
        assert_eq!(t.on_barrier(1, 1, c.at(2)).unwrap(), vec![]);
        assert_eq!(t.on_barrier(1, 2, c.at(3)).unwrap(), vec![Complete(2)]);
    }

    #[test]
    fn aligned_timeout_completes_aligned_when_fast() {
        let (mut t, c) = setup(AlignmentMode::AlignedTimeout(T), 2);
        assert_eq!(t.on_barrier(0, 1, c.at(0)).unwrap(), vec![Block(0)]);
        assert_eq!(t.deadline(), Some(c.at(100)));
        assert_eq!(t.on_timer(c.at(99)), vec![]);
        assert_eq!(t.on_barrier(1, 1, c.at(99)).unwrap(), vec![snap(1), ForwardBarrier(1), UnblockAll, Complete(1)]);
        assert_eq!(t.deadline(), None);
    }

    #[test]
    fn aligned_timeout_switches_to_unaligned_on_the_timer() {
        let (mut t, c) = setup(AlignmentMode::AlignedTimeout(T), 3);
        t.on_barrier(0, 1, c.at(0)).unwrap();
        t.on_barrier(1, 1, c.at(50)).unwrap();
        assert_eq!(t.on_timer(c.at(100)), vec![usnap(1), ForwardBarrier(1), UnblockAll]);
        assert_eq!(t.deadline(), None);
        assert_eq!(t.on_timer(c.at(500)), vec![]);
        // Inputs that delivered are read normally; the missing one is recorded.
        assert_eq!((t.on_data(0), t.on_data(1), t.on_data(2)), (Process, Process, ProcessAndRecord));
        assert_eq!(t.on_barrier(2, 1, c.at(600)).unwrap(), vec![Complete(1)]);
        assert_eq!(t.on_data(2), Process);
        // The next checkpoint starts aligned again.
        assert_eq!(t.on_barrier(0, 2, c.at(700)).unwrap(), vec![Block(0)]);
    }

    #[test]
    fn aligned_timeout_is_checked_on_each_barrier() {
        let (mut t, c) = setup(AlignmentMode::AlignedTimeout(T), 3);
        t.on_barrier(0, 1, c.at(0)).unwrap();
        // Late, and not the last: switch instead of blocking input 1.
        assert_eq!(t.on_barrier(1, 1, c.at(150)).unwrap(), vec![usnap(1), ForwardBarrier(1), UnblockAll]);
        assert!(!t.is_blocked(1));
        assert_eq!(t.on_data(2), ProcessAndRecord);
        // Late but the last: alignment is complete, no switch needed.
        let (mut t, c) = setup(AlignmentMode::AlignedTimeout(T), 2);
        t.on_barrier(0, 1, c.at(0)).unwrap();
        assert_eq!(t.on_barrier(1, 1, c.at(150)).unwrap(), vec![snap(1), ForwardBarrier(1), UnblockAll, Complete(1)]);
    }

    #[test]
    fn aligned_mode_never_times_out() {
        let (mut t, c) = setup(AlignmentMode::Aligned, 2);
        t.on_barrier(0, 1, c.at(0)).unwrap();
        assert_eq!(t.deadline(), None);
        assert_eq!(t.on_timer(c.at(1_000_000)), vec![]);
        assert!(t.is_blocked(0));
    }

    #[test]
    fn at_least_once_never_blocks() {
        let (mut t, c) = setup(AlignmentMode::AtLeastOnce, 3);
        assert_eq!(t.on_barrier(0, 1, c.at(0)).unwrap(), vec![]);
        assert!(!t.is_blocked(0));
        assert_eq!(t.on_data(0), Process);
        assert_eq!(t.on_data(1), Process);
        assert_eq!(t.on_barrier(1, 1, c.at(1)).unwrap(), vec![]);
        assert_eq!(t.on_timer(c.at(1_000_000)), vec![]);
        assert_eq!(t.on_barrier(2, 1, c.at(2)).unwrap(), vec![snap(1), ForwardBarrier(1), Complete(1)]);
        // A newer barrier aborts an unfinished one, with nothing to unblock.
        t.on_barrier(0, 2, c.at(3)).unwrap();
        assert_eq!(t.on_barrier(0, 3, c.at(4)).unwrap(), vec![AbortStale(2)]);
    }
}

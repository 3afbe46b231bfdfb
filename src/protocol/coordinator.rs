//! The checkpoint coordinator as a pure state machine: when to trigger the
//! next checkpoint, when every bundle has committed (write `_metadata`, the
//! commit point), when a checkpoint is complete (tell the sinks, delete what
//! `retain` no longer keeps), and when too many consecutive failures must
//! stop the pipeline.
//!
//! One checkpoint runs at a time; ids are strictly increasing from the
//! `first_id` given at construction (one past the restored or newest
//! checkpoint), so a restart continues the sequence. Time is passed in by
//! the caller; the driver owns the timers, the channels and the files.

use std::collections::{BTreeSet, VecDeque};
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use crate::types::Kind;
use crate::types::{BundleId, CheckpointId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorConfig {
    /// Between the starts of two periodic checkpoints.
    pub interval: Duration,
    /// A checkpoint not committed by every bundle within this is aborted.
    pub timeout: Duration,
    /// At least this long between the end of one checkpoint and the next start.
    pub min_pause: Duration,
    /// Consecutive checkpoint failures tolerated; one more fails the pipeline.
    pub tolerable_failures: u32,
    /// Number of bundles; each reports commit or abort.
    pub bundles: u32,
    /// Completed checkpoints kept on disk.
    pub retain: NonZeroUsize,
}

/// Start checkpoint `id`: sources record their position and emit Barrier(id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trigger {
    pub id: CheckpointId,
    pub kind: Kind,
}

/// Every bundle committed: write `chk-id/_metadata` atomically, then call
/// `on_metadata_written` (or `on_metadata_failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteMetadata {
    pub id: CheckpointId,
    pub kind: Kind,
}

/// Checkpoint `id` exists: notify sinks, then delete the checkpoints in `delete`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub id: CheckpointId,
    pub kind: Kind,
    pub duration: Duration,
    /// Completed checkpoints no longer retained, oldest first. Never savepoints.
    pub delete: Vec<CheckpointId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbortOutcome {
    /// Tell every arbiter and task that `id` is aborted; carry on.
    Aborted { id: CheckpointId, kind: Kind, reason: String },
    /// `id` aborted, and that was one consecutive failure too many: stop the pipeline.
    Fail { id: CheckpointId, reason: String, failures: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordinatorError {
    #[error("bundle {bundle} does not exist (the pipeline has {bundles})")]
    UnknownBundle { bundle: BundleId, bundles: u32 },
}

#[derive(Debug)]
struct Running {
    id: CheckpointId,
    kind: Kind,
    started: Instant,
    committed: BTreeSet<BundleId>,
    /// All bundles committed; `_metadata` is being written. Timeouts and
    /// bundle aborts no longer apply: the coordinator's own write decides.
    writing_metadata: bool,
}

#[derive(Debug)]
pub struct Coordinator {
    config: CoordinatorConfig,
    next_id: CheckpointId,
    running: Option<Running>,
    requested: VecDeque<Kind>,
    last_trigger: Instant,
    last_end: Option<Instant>,
    retained: VecDeque<CheckpointId>,
    failures: u32,
    failed: bool,
}

impl Coordinator {
    /// `retained`: completed checkpoints already on disk, oldest first. The
    /// first periodic checkpoint is due one `interval` after `now`.
    pub fn new(config: CoordinatorConfig, first_id: CheckpointId, retained: Vec<CheckpointId>, now: Instant) -> Self {
        Coordinator {
            config,
            next_id: first_id,
            running: None,
            requested: VecDeque::new(),
            last_trigger: now,
            last_end: None,
            retained: retained.into(),
            failures: 0,
            failed: false,
        }
    }

    /// The checkpoint in progress, if any.
    pub fn running(&self) -> Option<CheckpointId> {
        self.running.as_ref().map(|r| r.id)
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }

    /// Request a savepoint or a final checkpoint now. It starts at the next
    /// tick once no checkpoint is running, regardless of interval and min_pause.
    pub fn trigger_now(&mut self, kind: Kind) {
        self.requested.push_back(kind);
    }

    /// When the driver should call `on_tick` or `on_timeout` next.
    pub fn deadline(&self) -> Option<Instant> {
        match &self.running {
            _ if self.failed => None,
            Some(r) if r.writing_metadata => None,
            Some(r) => Some(r.started + self.config.timeout),
            None if !self.requested.is_empty() => Some(self.last_trigger),
            None => Some(self.next_periodic()),
        }
    }

    fn next_periodic(&self) -> Instant {
        let by_interval = self.last_trigger + self.config.interval;
        match self.last_end {
            Some(end) => by_interval.max(end + self.config.min_pause),
            None => by_interval,
        }
    }

    /// Start the next checkpoint if one is due and none is running.
    pub fn on_tick(&mut self, now: Instant) -> Option<Trigger> {
        if self.failed || self.running.is_some() {
            return None;
        }
        let kind = match self.requested.pop_front() {
            Some(kind) => kind,
            None if now >= self.next_periodic() => Kind::Checkpoint,
            None => return None,
        };
        let id = self.next_id;
        self.next_id += 1;
        self.last_trigger = now;
        self.running = Some(Running { id, kind, started: now, committed: BTreeSet::new(), writing_metadata: false });
        Some(Trigger { id, kind })
    }

    /// Bundle `bundle` committed checkpoint `id`; the last one asks for `_metadata`.
    /// Stale ids and repeats are ignored.
    pub fn on_bundle_committed(&mut self, id: CheckpointId, bundle: BundleId) -> Result<Option<WriteMetadata>, CoordinatorError> {
        self.check_bundle(bundle)?;
        let bundles = self.config.bundles as usize;
        let Some(r) = self.running.as_mut().filter(|r| r.id == id && !r.writing_metadata) else { return Ok(None) };
        r.committed.insert(bundle);
        if r.committed.len() < bundles {
            return Ok(None);
        }
        r.writing_metadata = true;
        Ok(Some(WriteMetadata { id, kind: r.kind }))
    }

    /// `_metadata` of `id` is durable: the checkpoint is complete.
    pub fn on_metadata_written(&mut self, id: CheckpointId, now: Instant) -> Option<Completed> {
        let r = self.running.take_if(|r| r.id == id && r.writing_metadata)?;
        self.last_end = Some(now);
        self.failures = 0;
        let mut delete = Vec::new();
        if r.kind == Kind::Checkpoint {
            self.retained.push_back(id);
            while self.retained.len() > self.config.retain.get() {
                delete.extend(self.retained.pop_front());
            }
        }
        Some(Completed { id, kind: r.kind, duration: now.saturating_duration_since(r.started), delete })
    }

    /// Committing `id` failed (an upload, or the `_metadata` put; `reason`
    /// names the request and the object): the checkpoint is aborted.
    pub fn on_metadata_failed(&mut self, id: CheckpointId, reason: &str, now: Instant) -> Option<AbortOutcome> {
        let r = self.running.take_if(|r| r.id == id && r.writing_metadata)?;
        Some(self.aborted(r, format!("committing the checkpoint failed: {reason}"), now))
    }

    /// Bundle `bundle` aborted checkpoint `id`: it is aborted for every bundle.
    pub fn on_bundle_aborted(
        &mut self,
        id: CheckpointId,
        bundle: BundleId,
        reason: &str,
        now: Instant,
    ) -> Result<Option<AbortOutcome>, CoordinatorError> {
        self.check_bundle(bundle)?;
        let Some(r) = self.running.take_if(|r| r.id == id && !r.writing_metadata) else { return Ok(None) };
        Ok(Some(self.aborted(r, format!("bundle {bundle} aborted: {reason}"), now)))
    }

    /// Abort the running checkpoint if it has been running for `timeout`.
    pub fn on_timeout(&mut self, now: Instant) -> Option<AbortOutcome> {
        let timeout = self.config.timeout;
        let r = self.running.take_if(|r| !r.writing_metadata && now >= r.started + timeout)?;
        Some(self.aborted(r, format!("timed out after {timeout:?}"), now))
    }

    /// Count the failure (savepoints do not count) and decide whether to go on.
    fn aborted(&mut self, r: Running, reason: String, now: Instant) -> AbortOutcome {
        self.last_end = Some(now);
        if r.kind == Kind::Checkpoint {
            self.failures += 1;
        }
        if r.kind == Kind::Checkpoint && self.failures > self.config.tolerable_failures {
            self.failed = true;
            return AbortOutcome::Fail { id: r.id, reason, failures: self.failures };
        }
        AbortOutcome::Aborted { id: r.id, kind: r.kind, reason }
    }

    fn check_bundle(&self, bundle: BundleId) -> Result<(), CoordinatorError> {
        match bundle < self.config.bundles {
            true => Ok(()),
            false => Err(CoordinatorError::UnknownBundle { bundle, bundles: self.config.bundles }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn config(bundles: u32) -> CoordinatorConfig {
        CoordinatorConfig {
            interval: 10 * S,
            timeout: 60 * S,
            min_pause: 5 * S,
            tolerable_failures: 1,
            bundles,
            retain: NonZeroUsize::new(2).unwrap(),
        }
    }

    /// A coordinator with fake time: `at(s)` is `s` seconds after construction.
    fn setup(bundles: u32, first_id: CheckpointId) -> (Coordinator, impl Fn(u64) -> Instant) {
        let t0 = Instant::now();
        (Coordinator::new(config(bundles), first_id, vec![], t0), move |s| t0 + Duration::from_secs(s))
    }

    fn checkpoint(id: CheckpointId) -> Trigger {
        Trigger { id, kind: Kind::Checkpoint }
    }

    /// Commit every bundle of the running checkpoint and write its metadata at `now`.
    fn complete(c: &mut Coordinator, id: CheckpointId, now: Instant) -> Completed {
        for b in 0..c.config.bundles {
            c.on_bundle_committed(id, b).unwrap();
        }
        c.on_metadata_written(id, now).unwrap()
    }

    #[test]
    fn triggers_on_the_interval_one_at_a_time() {
        let (mut c, at) = setup(1, 1);
        assert_eq!(c.deadline(), Some(at(10)));
        assert_eq!(c.on_tick(at(9)), None);
        assert_eq!(c.on_tick(at(10)), Some(checkpoint(1)));
        assert_eq!(c.running(), Some(1));
        // Running: nothing new, however late.
        assert_eq!(c.on_tick(at(30)), None);
        assert_eq!(c.deadline(), Some(at(70)));
        complete(&mut c, 1, at(12));
        // Interval counts from the previous trigger.
        assert_eq!(c.on_tick(at(19)), None);
        assert_eq!(c.on_tick(at(20)), Some(checkpoint(2)));
    }

    #[test]
    fn min_pause_follows_the_end_of_a_long_checkpoint() {
        let (mut c, at) = setup(1, 1);
        c.on_tick(at(10)).unwrap();
        complete(&mut c, 1, at(18));
        assert_eq!(c.deadline(), Some(at(23)));
        assert_eq!(c.on_tick(at(22)), None);
        assert_eq!(c.on_tick(at(23)), Some(checkpoint(2)));
    }

    #[test]
    fn ids_continue_from_first_id_and_strictly_increase() {
        let (mut c, at) = setup(1, 42);
        let mut ids = Vec::new();
        for i in 1..=4 {
            let t = c.on_tick(at(100 * i)).unwrap();
            ids.push(t.id);
            if i % 2 == 0 {
                complete(&mut c, t.id, at(100 * i + 1));
            } else {
                c.on_timeout(at(100 * i + 60)).unwrap();
            }
        }
        assert_eq!(ids, vec![42, 43, 44, 45]);
    }

    #[test]
    fn metadata_is_written_only_after_every_bundle_committed() {
        let (mut c, at) = setup(3, 1);
        c.on_tick(at(10)).unwrap();
        assert_eq!(c.on_bundle_committed(1, 2), Ok(None));
        assert_eq!(c.on_bundle_committed(1, 2), Ok(None)); // a repeat counts once
        assert_eq!(c.on_bundle_committed(1, 0), Ok(None));
        assert_eq!(c.on_metadata_written(1, at(11)), None); // not asked for yet
        assert_eq!(c.on_bundle_committed(1, 1), Ok(Some(WriteMetadata { id: 1, kind: Kind::Checkpoint })));
        assert_eq!(c.on_bundle_committed(1, 1), Ok(None));
        assert_eq!(c.on_bundle_committed(1, 3), Err(CoordinatorError::UnknownBundle { bundle: 3, bundles: 3 }));
        let done = c.on_metadata_written(1, at(12)).unwrap();
        assert_eq!((done.id, done.duration, done.delete), (1, 2 * S, vec![]));
        assert_eq!(c.running(), None);
    }

    #[test]
    fn stale_reports_are_ignored() {
        let (mut c, at) = setup(2, 1);
        c.on_tick(at(10)).unwrap();
        c.on_timeout(at(70)).unwrap();
        c.on_tick(at(80)).unwrap();
        assert_eq!(c.on_bundle_committed(1, 0), Ok(None));
        assert_eq!(c.on_bundle_aborted(1, 0, "late", at(81)), Ok(None));
        assert_eq!(c.on_metadata_written(1, at(81)), None);
        assert_eq!(c.running(), Some(2));
    }

    #[test]
    fn retain_deletes_the_oldest_checkpoints_but_never_savepoints() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut c = Coordinator::new(config(1), 8, vec![5, 7], t0);
        c.on_tick(at(10)).unwrap();
        assert_eq!(complete(&mut c, 8, at(11)).delete, vec![5]);
        c.trigger_now(Kind::Savepoint);
        assert_eq!(c.on_tick(at(12)), Some(Trigger { id: 9, kind: Kind::Savepoint }));
        assert_eq!(complete(&mut c, 9, at(13)).delete, Vec::<CheckpointId>::new());
        c.on_tick(at(30)).unwrap();
        assert_eq!(complete(&mut c, 10, at(31)).delete, vec![7]);
        c.on_tick(at(50)).unwrap();
        assert_eq!(complete(&mut c, 11, at(51)).delete, vec![8]);
    }

    #[test]
    fn timeouts_abort_with_fake_time() {
        let (mut c, at) = setup(2, 1);
        assert_eq!(c.on_timeout(at(1000)), None); // nothing running
        c.on_tick(at(10)).unwrap();
        assert_eq!(c.on_timeout(at(69)), None);
        let Some(AbortOutcome::Aborted { id: 1, kind: Kind::Checkpoint, reason }) = c.on_timeout(at(70)) else { panic!("no abort") };
        assert!(reason.contains("timed out after 60s"), "{reason}");
        assert_eq!(c.consecutive_failures(), 1);
        // The next one respects min_pause after the abort.
        assert_eq!(c.on_tick(at(74)), None);
        assert_eq!(c.on_tick(at(75)), Some(checkpoint(2)));
    }

    #[test]
    fn no_timeout_while_metadata_is_written() {
        let (mut c, at) = setup(1, 1);
        c.on_tick(at(10)).unwrap();
        c.on_bundle_committed(1, 0).unwrap();
        assert_eq!(c.deadline(), None);
        assert_eq!(c.on_timeout(at(500)), None);
        assert_eq!(c.on_bundle_aborted(1, 0, "too late", at(500)), Ok(None));
        assert!(c.on_metadata_written(1, at(501)).is_some());
    }

    #[test]
    fn failed_metadata_write_aborts() {
        let (mut c, at) = setup(1, 1);
        c.on_tick(at(10)).unwrap();
        c.on_bundle_committed(1, 0).unwrap();
        let Some(AbortOutcome::Aborted { id: 1, reason, .. }) = c.on_metadata_failed(1, "disk full", at(11)) else { panic!() };
        assert!(reason.contains("disk full"), "{reason}");
        assert_eq!(c.on_metadata_written(1, at(12)), None);
    }

    #[test]
    fn too_many_consecutive_failures_fail_the_pipeline() {
        let (mut c, at) = setup(2, 1);
        c.on_tick(at(10)).unwrap();
        let first = c.on_bundle_aborted(1, 1, "disk full", at(11)).unwrap().unwrap();
        assert!(matches!(first, AbortOutcome::Aborted { id: 1, .. }));
        c.on_tick(at(20)).unwrap();
        let second = c.on_bundle_aborted(2, 0, "disk full", at(21)).unwrap().unwrap();
        let AbortOutcome::Fail { id: 2, reason, failures: 2 } = second else { panic!("{second:?}") };
        assert_eq!(reason, "bundle 0 aborted: disk full");
        // Failed: nothing is triggered any more, even on request.
        c.trigger_now(Kind::Savepoint);
        assert_eq!(c.on_tick(at(1000)), None);
        assert_eq!(c.deadline(), None);
    }

    #[test]
    fn a_completed_checkpoint_resets_the_failure_count() {
        let (mut c, at) = setup(1, 1);
        c.on_tick(at(10)).unwrap();
        c.on_timeout(at(70)).unwrap();
        assert_eq!(c.consecutive_failures(), 1);
        c.on_tick(at(80)).unwrap();
        complete(&mut c, 2, at(81));
        assert_eq!(c.consecutive_failures(), 0);
        c.on_tick(at(90)).unwrap();
        assert!(matches!(c.on_timeout(at(150)), Some(AbortOutcome::Aborted { id: 3, .. })));
    }

    #[test]
    fn savepoint_failures_do_not_count() {
        let (mut c, at) = setup(1, 1);
        for i in 0..3 {
            c.trigger_now(Kind::Savepoint);
            c.on_tick(at(100 * i)).unwrap();
            assert!(matches!(c.on_timeout(at(100 * i + 60)), Some(AbortOutcome::Aborted { kind: Kind::Savepoint, .. })));
        }
        assert_eq!(c.consecutive_failures(), 0);
    }

    #[test]
    fn requests_queue_behind_a_running_checkpoint() {
        let (mut c, at) = setup(1, 1);
        c.on_tick(at(10)).unwrap();
        c.trigger_now(Kind::Savepoint);
        c.trigger_now(Kind::Checkpoint); // e.g. a final checkpoint on stop
        assert_eq!(c.on_tick(at(11)), None);
        complete(&mut c, 1, at(12));
        // Requests ignore interval and min_pause, and run in order.
        assert!(c.deadline().is_some_and(|d| d <= at(12)));
        assert_eq!(c.on_tick(at(12)), Some(Trigger { id: 2, kind: Kind::Savepoint }));
        complete(&mut c, 2, at(13));
        assert_eq!(c.on_tick(at(13)), Some(checkpoint(3)));
        complete(&mut c, 3, at(14));
        assert_eq!(c.on_tick(at(14)), None);
        assert_eq!(c.deadline(), Some(at(23)));
    }
}

//! The checkpoint driver: the I/O around the pure coordinator and bundle
//! arbiters. It triggers checkpoints at the sources, collects the votes of
//! every task into its bundle's arbiter, writes each bundle's MANIFEST when
//! the arbiter commits, writes `_metadata` last (the commit point), tells
//! the tasks the checkpoint is complete, and deletes what `retain` drops.
//!
//! On stop (signal) or at the end of bounded input it takes a final
//! checkpoint, retrying until one completes, then tells every task it is
//! done.
//!
//! Savepoints (asked for over the control socket) go through the same
//! arbiters. Their bundles are written under `checkpoints/chk-n/` like any
//! checkpoint; once every bundle committed, the directory is moved into a
//! temp directory in the savepoint's parent (the request's `dir`, or
//! `savepoints/`), its `_metadata` (kind `savepoint`) written there, and
//! the whole renamed to a new child of the parent last
//! (`checkpoint::savepoint`). An intermediate savepoint does not tell the
//! sinks it completed (the next checkpoint publishes what it staged);
//! stop-with-savepoint does.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

use std::sync::Arc;

use super::checkpoint_log::{CheckpointLog, Summary};
use super::control::{Command, SavepointRequest, Status};
use super::metrics::{CheckpointMetrics, Completed, FailureReason};
use super::rendezvous::Rendezvous;
use super::task_checkpoint::{Control, Event, SnapshotStats};
use crate::checkpoint::generation::{Generation, StoredId};
use crate::checkpoint::layout::Layout;
use crate::checkpoint::manifest::{BundleManifest, Document, Metadata, TaskId, FORMAT_VERSION};
use crate::checkpoint::storage::{LocalStorage, Storage};
use crate::checkpoint::{disk, publish, savepoint};
use crate::config::CheckpointSpec;
use crate::faults;
use crate::protocol::arbiter::{ArbiterDecision, BundleArbiter};
use crate::protocol::coordinator::{AbortOutcome, Coordinator, CoordinatorConfig, Trigger};
use crate::types::Kind;
use crate::types::{BundleId, CheckpointId};

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("checkpoint {id} failed ({reason}), {failures} consecutive failures: more than `tolerable_failures` allows")]
    TooManyFailures { id: CheckpointId, reason: String, failures: u32 },
    #[error("checkpoint storage: {0}")]
    Store(#[from] disk::StoreError),
    /// No checkpoint can ever commit again: the run stops.
    #[error("{0}; the run stops (restart it where the storage's new owner is not running, or stop that one first)")]
    OwnershipLost(crate::checkpoint::lease::OwnerError),
}

/// What the driver needs to know about the pipeline.
pub struct DriverSetup {
    pub spec: CheckpointSpec,
    pub layout: Layout,
    pub pipeline: String,
    pub parallelism: u16,
    pub max_parallelism: u16,
    pub operators: Vec<String>,
    /// `Pipeline::state_keys`, recorded in every `_metadata`.
    pub keys: std::collections::BTreeMap<String, String>,
    /// The instance of a cluster, recorded in every `_metadata`.
    pub cluster: Option<crate::checkpoint::manifest::ClusterRecord>,
    /// Members of each bundle.
    pub bundles: Vec<Vec<TaskId>>,
    /// Each task's name, for the log.
    pub task_names: std::collections::BTreeMap<TaskId, String>,
    pub first_id: CheckpointId,
    /// Completed checkpoints already on disk (or in the store), oldest first.
    pub retained: Vec<CheckpointId>,
    /// Their names in `storage` (an id may have several: a deposed
    /// owner's and this lineage's).
    pub retained_stored: Vec<StoredId>,
    /// The generation this run writes its checkpoints under in `storage`
    /// (`checkpoint::generation`; 0 without storage).
    pub storage_generation: Generation,
    /// The ownership of `storage`: once it is lost, the run stops.
    pub ownership: Option<crate::checkpoint::lease::Ownership>,
    /// `checkpoint.storage` (None: the state directory holds the checkpoints).
    pub storage: Option<Arc<dyn Storage>>,
    /// Native RocksDB checkpoints: each bundle's rendezvous (empty: none).
    pub rendezvous: Vec<Arc<Rendezvous>>,
    /// How many of the tasks are source tasks.
    pub source_tasks: usize,
    /// Where completions and failures are counted (the metrics endpoint).
    pub metrics: Arc<CheckpointMetrics>,
}

pub struct Driver {
    setup: DriverSetup,
    coordinator: Coordinator,
    arbiters: Vec<BundleArbiter>,
    events: mpsc::UnboundedReceiver<Event>,
    controls: Vec<mpsc::UnboundedSender<Control>>,
    completed: watch::Sender<CheckpointId>,
    done: watch::Sender<bool>,
    stop: watch::Receiver<bool>,
    /// Tasks that processed the end of their input.
    finished_tasks: usize,
    /// Source tasks among them.
    finished_sources: usize,
    /// An aligned checkpoint triggered after every source task ended its
    /// input: its barriers follow every record and every end of input, so
    /// each task snapshots it after its own end of input. Running when the
    /// input is exhausted, it is the final checkpoint (no second one).
    covers_input: Option<CheckpointId>,
    /// Aborted checkpoints whose directory could not be removed yet (a task
    /// was still writing into it).
    unremoved: Vec<CheckpointId>,
    /// Aborted checkpoints whose objects may be left in the store (a failed
    /// upload's cleanup failed too): removed after the next commit, when
    /// the store answers again.
    unremoved_stored: Vec<CheckpointId>,
    /// Stop requested or input exhausted: the next checkpoint is the last.
    final_wanted: bool,
    /// The final checkpoint is requested from the coordinator (again after an abort).
    final_queued: bool,
    /// The checkpoint triggered after the stop: its completion ends the run.
    final_id: Option<CheckpointId>,
    stats: Stats,
    /// Requests from the control socket (None: no socket).
    commands: Option<mpsc::UnboundedReceiver<Command>>,
    /// The savepoint asked for and not finished yet.
    savepoint: Option<PendingSavepoint>,
    /// The newest completed checkpoint or savepoint.
    last_completed: CheckpointId,
    /// How completed checkpoints are logged.
    log: CheckpointLog,
    /// Counts for a summary line, with [`CheckpointLog::Summary`].
    summary: Option<Summary>,
}

/// A savepoint request on its way through the coordinator.
struct PendingSavepoint {
    /// Set when it is triggered.
    id: Option<CheckpointId>,
    /// The parent directory asked for (resolved); None: `savepoints/`.
    dir: Option<PathBuf>,
    stop: bool,
    drain: bool,
    /// Marked in its `_metadata` as taken on SIGTERM.
    on_sigterm: bool,
    reply: oneshot::Sender<Result<PathBuf, String>>,
}

/// What the tasks reported for the running checkpoint.
#[derive(Default)]
struct Stats {
    id: CheckpointId,
    /// The longest of each part over the tasks.
    sync: Duration,
    alignment: Duration,
    write: Duration,
    bytes: u64,
    reused_bytes: u64,
    pause: Duration,
    /// When the driver triggered it.
    triggered: Option<Instant>,
    /// The longest time from the trigger to the first barrier at a task.
    start_delay: Duration,
    in_flight_bytes: u64,
    /// The checkpoint already warned of as slow.
    warned_slow: Option<CheckpointId>,
    /// Why its directory could not be created (a read-only or full disk).
    dir_error: Option<String>,
}

/// A checkpoint running this long gets a warning: 3 intervals, at least 5 s
/// (a fast interval alone would warn of ordinary ones), and before the
/// timeout's half (so that the warning comes before the failure).
fn slow_after(interval: Duration, timeout: Duration) -> Duration {
    interval.saturating_mul(3).max(Duration::from_secs(5)).min(timeout / 2)
}

impl Driver {
    pub fn new(
        setup: DriverSetup,
        events: mpsc::UnboundedReceiver<Event>,
        controls: Vec<mpsc::UnboundedSender<Control>>,
        completed: watch::Sender<CheckpointId>,
        done: watch::Sender<bool>,
        stop: watch::Receiver<bool>,
        commands: Option<mpsc::UnboundedReceiver<Command>>,
    ) -> Self {
        let config = CoordinatorConfig {
            interval: setup.spec.interval,
            timeout: setup.spec.timeout,
            min_pause: setup.spec.min_pause,
            tolerable_failures: setup.spec.tolerable_failures,
            bundles: setup.bundles.len() as u32,
            retain: setup.spec.retain,
        };
        let first_completed = *completed.borrow();
        setup.metrics.tolerable_failures.store(u64::from(setup.spec.tolerable_failures), std::sync::atomic::Ordering::Relaxed);
        setup.metrics.on_started(setup.spec.timeout);
        let coordinator = Coordinator::new(config, setup.first_id, setup.retained.clone(), Instant::now());
        let arbiters = setup.bundles.iter().enumerate().map(|(b, m)| BundleArbiter::new(b as BundleId, m.iter().copied())).collect();
        Driver {
            setup,
            coordinator,
            arbiters,
            events,
            controls,
            completed,
            done,
            stop,
            finished_tasks: 0,
            finished_sources: 0,
            covers_input: None,
            unremoved: Vec::new(),
            unremoved_stored: Vec::new(),
            final_wanted: false,
            final_queued: false,
            final_id: None,
            stats: Stats::default(),
            commands,
            savepoint: None,
            last_completed: first_completed,
            log: CheckpointLog::Each,
            summary: None,
        }
    }

    pub fn log_checkpoints(&mut self, log: CheckpointLog) {
        self.log = log;
        self.summary = match log {
            CheckpointLog::Summary { every } => Some(Summary::new(every, Instant::now())),
            CheckpointLog::Each | CheckpointLog::Quiet => None,
        };
    }

    pub async fn run(mut self) -> Result<(), DriverError> {
        let result = self.drive().await;
        if let Some(rest) = self.summary.as_mut().and_then(|s| s.rest(Instant::now())) {
            rest.log();
        }
        self.remove_unremoved();
        for id in &self.unremoved {
            tracing::warn!(checkpoint = id, "Could not remove an aborted checkpoint; the next start removes it.");
        }
        if !self.setup.rendezvous.is_empty() {
            // Uploads a late task finished after its checkpoint aborted.
            self.collect_garbage().await;
        }
        // Whatever happened, no further checkpoint will be taken.
        let _ = self.done.send(true);
        result
    }

    async fn drive(&mut self) -> Result<(), DriverError> {
        loop {
            if self.final_wanted && !self.final_queued && self.coordinator.running().is_none() {
                self.coordinator.trigger_now(Kind::Checkpoint);
                self.final_queued = true;
            }
            let wake = self.coordinator.deadline().unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            let wake = self.slow_warning_at().map_or(wake, |slow| slow.min(wake));
            tokio::select! {
                event = self.events.recv() => match event {
                    Some(Event::Vote { bundle, vote, stats }) => {
                        if vote.id() == self.stats.id {
                            self.add_stats(&stats);
                        }
                        let decisions = match self.arbiters.get_mut(bundle as usize).map(|a| a.on_vote(vote)) {
                            Some(Ok(d)) => d,
                            Some(Err(e)) => {
                                tracing::error!(error = %e, "Vote refused.");
                                continue;
                            }
                            None => continue,
                        };
                        self.remove_unremoved();
                        for d in decisions {
                            match self.decide(bundle, d).await? {
                                Some(id) if Some(id) == self.final_id => {
                                    tracing::info!(checkpoint = id, "Final checkpoint complete.");
                                    return Ok(());
                                }
                                _ => {}
                            }
                        }
                    }
                    Some(Event::Finished { source }) => {
                        // The final checkpoint waits until every task has
                        // processed all its input: nothing is in flight, so
                        // even an unaligned barrier overtakes nothing.
                        self.finished_tasks += 1;
                        self.finished_sources += usize::from(source);
                        let tasks: usize = self.setup.bundles.iter().map(Vec::len).sum();
                        if self.finished_tasks == tasks {
                            tracing::info!("Input exhausted; taking the final checkpoint.");
                            self.final_wanted = true;
                            self.adopt_running_as_final();
                        }
                    }
                    None => return Ok(()),
                },
                _ = tokio::time::sleep_until(wake.into()) => {
                    let now = Instant::now();
                    self.warn_if_slow(now);
                    if let Some(outcome) = self.coordinator.on_timeout(now) {
                        self.aborted(outcome, FailureReason::Timeout)?;
                    }
                    if let Some(t) = self.coordinator.on_tick(now) {
                        self.trigger(t);
                    }
                }
                Some(command) = recv_opt(&mut self.commands) => self.on_command(command),
                _ = self.stop.changed(), if !self.final_wanted => {
                    tracing::info!("Stop requested; taking a final checkpoint.");
                    self.final_wanted = true;
                }
            }
        }
    }

    /// When the running checkpoint becomes worth a warning, if not warned of yet.
    fn slow_warning_at(&self) -> Option<Instant> {
        let id = self.coordinator.running()?;
        (self.stats.id == id && self.stats.warned_slow != Some(id)).then_some(())?;
        Some(self.stats.triggered? + slow_after(self.setup.spec.interval, self.setup.spec.timeout))
    }

    /// A checkpoint still running after [`slow_after`]: say so once, naming
    /// the tasks that have not acknowledged it (a stuck checkpoint is not silent).
    fn warn_if_slow(&mut self, now: Instant) {
        if !self.slow_warning_at().is_some_and(|at| now >= at) {
            return;
        }
        let id = self.stats.id;
        self.stats.warned_slow = Some(id);
        let waiting: Vec<String> = self
            .arbiters
            .iter()
            .flat_map(|a| a.waiting_for(id))
            .map(|t| self.setup.task_names.get(&t).cloned().unwrap_or_else(|| t.to_string()))
            .collect();
        let running_s = self.stats.triggered.map_or(0.0, |t| now.duration_since(t).as_secs_f64());
        tracing::warn!(
            checkpoint = id,
            running_s = format!("{running_s:.1}"),
            timeout_s = self.setup.spec.timeout.as_secs_f64(),
            waiting = waiting.len(),
            tasks = %waiting.join(", "),
            "Checkpoint is slow: these tasks have not acknowledged it yet (a barrier not through, an alignment, a flush or an upload)."
        );
    }

    /// Make the running checkpoint the final one when it covers the whole
    /// input, instead of waiting for it and taking another.
    fn adopt_running_as_final(&mut self) {
        let Some(id) = self.coordinator.running().filter(|id| self.covers_input == Some(*id)) else { return };
        // A savepoint asked for still runs before the end.
        if self.savepoint.is_some() {
            return;
        }
        self.final_id = Some(id);
        self.final_queued = true;
        tracing::debug!(checkpoint = id, "The running checkpoint covers all input; it is the final one.");
    }

    fn trigger(&mut self, t: Trigger) {
        // The driver's file system work runs off the workers (see `blocking`).
        let dir_error = crate::blocking::call(|| {
            let mut first = None;
            for b in 0..self.setup.bundles.len() {
                let dir = self.setup.layout.bundle_dir(t.id, b as BundleId);
                if let Err(e) = std::fs::create_dir_all(&dir) {
                    tracing::warn!(checkpoint = t.id, error = %e, dir = %dir.display(), "Cannot create the checkpoint directory.");
                    first.get_or_insert_with(|| format!("cannot create {}: {e}", dir.display()));
                }
            }
            first
        });
        self.stats = Stats { id: t.id, triggered: Some(Instant::now()), dir_error, ..Stats::default() };
        self.setup.metrics.in_progress.store(t.id, std::sync::atomic::Ordering::Relaxed);
        if self.final_wanted {
            self.final_id = Some(t.id);
        }
        let aligned = self.setup.spec.alignment == crate::config::Alignment::Aligned;
        if aligned && t.kind == Kind::Checkpoint && self.finished_sources == self.setup.source_tasks {
            self.covers_input = Some(t.id);
        }
        if t.kind == Kind::Savepoint {
            if let Some(sp) = self.savepoint.as_mut().filter(|sp| sp.id.is_none()) {
                sp.id = Some(t.id);
            }
        }
        tracing::debug!(checkpoint = t.id, "Checkpoint triggered.");
        let drain = t.kind == Kind::Savepoint && self.savepoint.as_ref().is_some_and(|sp| sp.id == Some(t.id) && sp.drain);
        for c in &self.controls {
            let _ = c.send(Control::Trigger { id: t.id, kind: t.kind, then_stop: self.final_wanted, drain });
        }
    }

    fn add_stats(&mut self, s: &SnapshotStats) {
        self.stats.sync = self.stats.sync.max(s.sync);
        self.stats.alignment = self.stats.alignment.max(s.alignment);
        self.stats.write = self.stats.write.max(s.write);
        self.stats.pause = self.stats.pause.max(s.pause);
        self.stats.bytes += s.bytes;
        self.stats.reused_bytes += s.reused_bytes;
        self.stats.in_flight_bytes += s.in_flight_bytes;
        if let (Some(triggered), Some(at)) = (self.stats.triggered, s.barrier_at) {
            self.stats.start_delay = self.stats.start_delay.max(at.saturating_duration_since(triggered));
        }
    }

    /// Act on an arbiter decision; returns the id of a checkpoint that just completed.
    async fn decide(&mut self, bundle: BundleId, d: ArbiterDecision) -> Result<Option<CheckpointId>, DriverError> {
        match d {
            ArbiterDecision::Commit { id, voters, files } => {
                let path = self.setup.layout.manifest(id, bundle);
                let doc = BundleManifest::new(id, bundle, voters, files).to_bytes();
                if let Err(e) = write_atomic(path, doc).await {
                    let outcome = self.coordinator.on_bundle_aborted(id, bundle, &e.to_string(), Instant::now());
                    if let Ok(Some(o)) = outcome {
                        self.aborted(o, FailureReason::Write)?;
                    }
                    return Ok(None);
                }
                faults::get().crash_point("after_manifest");
                match self.coordinator.on_bundle_committed(id, bundle) {
                    Ok(Some(w)) => self.write_metadata(w.id, w.kind).await,
                    _ => Ok(None),
                }
            }
            ArbiterDecision::Abort { id, reason } => {
                let why = failure_reason(&reason);
                if let Ok(Some(o)) = self.coordinator.on_bundle_aborted(id, bundle, &reason.to_string(), Instant::now()) {
                    self.aborted(o, why)?;
                }
                Ok(None)
            }
            ArbiterDecision::Pending { .. } | ArbiterDecision::Ignored { .. } => Ok(None),
        }
    }

    /// Write `_metadata` (the commit point), then announce completion.
    /// Remove the directories of aborted checkpoints; one a late task still
    /// writes into is tried again on the next event.
    fn remove_unremoved(&mut self) {
        let layout = &self.setup.layout;
        crate::blocking::call(|| {
            self.unremoved.retain(|&id| match disk::remove_checkpoint(layout, id) {
                Ok(()) => false,
                Err(e) => {
                    tracing::debug!(checkpoint = id, error = %e, "Aborted checkpoint not removable yet.");
                    true
                }
            })
        });
    }

    async fn write_metadata(&mut self, id: CheckpointId, kind: Kind) -> Result<Option<CheckpointId>, DriverError> {
        let md = self.metadata(id, kind);
        let created_ms = md.created_ms;
        let (dir, savepoint_failed) = match self.commit_metadata(id, md).await {
            Ok(written) => written,
            Err(e) => {
                if let Some(o) = self.coordinator.on_metadata_failed(id, &e, Instant::now()) {
                    self.aborted(o, FailureReason::Write)?;
                }
                if let Some(lost) = self.setup.ownership.as_ref().and_then(|o| o.lost()) {
                    return Err(DriverError::OwnershipLost(lost));
                }
                return Ok(None);
            }
        };
        faults::get().crash_point("after_metadata");
        let Some(done) = self.coordinator.on_metadata_written(id, Instant::now()) else { return Ok(None) };
        self.note_progress();
        self.record_completion(id, kind, created_ms, done.duration);
        self.last_completed = id;
        self.answer_savepoint(id, kind, dir, savepoint_failed);
        // An intermediate savepoint publishes no sink output; the final one does.
        if kind == Kind::Checkpoint || self.final_id == Some(id) {
            let _ = self.completed.send(id);
        }
        let deleted = !done.delete.is_empty();
        self.delete_subsumed(done.delete);
        if deleted && !self.setup.rendezvous.is_empty() {
            self.collect_garbage().await;
        }
        Ok(Some(id))
    }

    fn metadata(&self, id: CheckpointId, kind: Kind) -> Metadata {
        Metadata {
            version: FORMAT_VERSION,
            pipeline: self.setup.pipeline.clone(),
            checkpoint_id: id,
            kind,
            created_ms: crate::runtime::chain::now_ms(),
            parallelism: self.setup.parallelism,
            max_parallelism: self.setup.max_parallelism,
            bundles: (0..self.setup.bundles.len() as BundleId).collect(),
            operators: self.setup.operators.clone(),
            keys: self.setup.keys.clone(),
            cluster: self.setup.cluster.clone(),
            on_sigterm: false,
            crc32c: 0,
        }
    }

    /// Write `_metadata`, the commit point: the checkpoint's directory, and
    /// why its savepoint could not be written after the commit point (the
    /// stop then completes as a final checkpoint); Err: not committed.
    async fn commit_metadata(&mut self, id: CheckpointId, md: Metadata) -> Result<(PathBuf, Option<String>), String> {
        let commit = |md: &Metadata| {
            let stored = StoredId::new(id, self.setup.storage_generation);
            commit_checkpoint(self.setup.layout.clone(), self.setup.storage.clone(), stored, md.to_bytes())
        };
        match md.kind {
            Kind::Checkpoint => commit(&md).await.map(|()| (self.setup.layout.checkpoint_dir(id), None)),
            // A stop-with-savepoint is committed as this directory's
            // checkpoint first (so `--restore latest` resumes where the
            // stop's sinks committed), then copied out as the savepoint.
            Kind::Savepoint if self.final_id == Some(id) => {
                commit(&Metadata { kind: Kind::Checkpoint, ..md.clone() }).await?;
                match self.write_savepoint(id, md, true).await {
                    Ok(dir) => Ok((dir, None)),
                    Err(e) => Ok((
                        self.setup.layout.checkpoint_dir(id),
                        Some(format!("savepoint {id} could not be written ({e}); the pipeline stopped with it as its final checkpoint instead, which `--restore latest` resumes")),
                    )),
                }
            }
            Kind::Savepoint => self.write_savepoint(id, md, false).await.map(|dir| (dir, None)).map_err(|e| e.to_string()),
        }
    }

    /// Count a completed checkpoint or savepoint and log it as `--checkpoint-log` asks.
    fn record_completion(&mut self, id: CheckpointId, kind: Kind, created_ms: i64, duration: Duration) {
        let s = &self.stats;
        if kind == Kind::Checkpoint {
            self.setup.metrics.on_completed(&Completed {
                id,
                created_ms: u64::try_from(created_ms).unwrap_or(0),
                duration,
                sync: s.sync,
                write: s.write,
                alignment: s.alignment,
                pause: s.pause,
                bytes: s.bytes,
                reused_bytes: s.reused_bytes,
                start_delay: s.start_delay,
                in_flight_bytes: s.in_flight_bytes,
            });
        } else {
            self.setup.metrics.on_savepoint_completed(id, duration);
        }
        macro_rules! completed {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    checkpoint = id,
                    duration_ms = duration.as_millis() as u64,
                    sync_ms = s.sync.as_millis() as u64,
                    async_ms = s.write.as_millis() as u64,
                    alignment_ms = s.alignment.as_millis() as u64,
                    pause_ms = s.pause.as_millis() as u64,
                    bytes = s.bytes,
                    reused_bytes = s.reused_bytes,
                    bundles = self.setup.bundles.len(),
                    "{}",
                    if kind == Kind::Savepoint { "Savepoint complete." } else { "Checkpoint complete." }
                )
            };
        }
        // A slow one is a warning wherever it is shown.
        if duration >= slow_after(self.setup.spec.interval, self.setup.spec.timeout) {
            completed!(tracing::Level::WARN);
        } else if self.log != CheckpointLog::Each && kind == Kind::Checkpoint {
            completed!(tracing::Level::DEBUG);
        } else {
            completed!(tracing::Level::INFO);
        }
        if kind == Kind::Checkpoint {
            if let Some(period) = self.summary.as_mut().and_then(|sum| sum.completed(id, duration, s.bytes, Instant::now())) {
                period.log();
            }
        }
    }

    /// Answer the savepoint request that `id` completed, if any.
    fn answer_savepoint(&mut self, id: CheckpointId, kind: Kind, dir: PathBuf, failed: Option<String>) {
        if let Some(why) = failed {
            tracing::warn!(savepoint = id, reason = %why, "Savepoint failed.");
            if let Some(sp) = self.savepoint.take_if(|sp| sp.id == Some(id)) {
                let _ = sp.reply.send(Err(why));
            }
        } else if kind == Kind::Savepoint {
            tracing::info!(savepoint = id, path = %dir.display(), "Savepoint written.");
            if let Some(sp) = self.savepoint.take_if(|sp| sp.id == Some(id)) {
                let _ = sp.reply.send(Ok(dir));
            }
        }
    }

    /// Delete the checkpoints a completion subsumed (and aborted ones left
    /// in the store), the store's copy first: its `_metadata` goes first, so
    /// a crash midway leaves an unfinished checkpoint, never a torn one.
    fn delete_subsumed(&mut self, subsumed: Vec<CheckpointId>) {
        let unremoved_stored = std::mem::take(&mut self.unremoved_stored);
        crate::blocking::call(|| {
            if let Some(storage) = &self.setup.storage {
                for id in unremoved_stored {
                    if let Err(e) = publish::remove(storage.as_ref(), &StoredId::new(id, self.setup.storage_generation).name()) {
                        tracing::warn!(checkpoint = id, error = %e, "Cannot remove an aborted checkpoint from the store; the next start removes it.");
                    }
                }
            }
            for old in subsumed {
                if let Some(storage) = &self.setup.storage {
                    let names = self.stored_names(old);
                    if let Err(e) = names.iter().try_for_each(|s| publish::remove(storage.as_ref(), &s.name())) {
                        tracing::warn!(checkpoint = old, error = %e, "Cannot delete a subsumed checkpoint from the store.");
                        continue;
                    }
                }
                if let Err(e) = disk::remove_checkpoint(&self.setup.layout, old) {
                    tracing::warn!(checkpoint = old, error = %e, "Cannot delete a subsumed checkpoint.");
                }
            }
        });
    }

    /// Move (`keep`: copy, leaving the committed checkpoint `chk-id` in
    /// place) the committed bundles of savepoint `id` to a new child of its
    /// parent and write its `_metadata` there last; returns the child.
    /// Built in a temp directory in the parent and renamed to a name no
    /// entry has last (`checkpoint::savepoint`): a failure removes only that
    /// temp directory (and the parents it created).
    async fn write_savepoint(&mut self, id: CheckpointId, md: Metadata, keep: bool) -> Result<PathBuf, disk::StoreError> {
        let pending = self.savepoint.as_ref().filter(|sp| sp.id == Some(id));
        let asked = pending.and_then(|sp| sp.dir.clone());
        let md = Metadata { on_sigterm: pending.is_some_and(|sp| sp.on_sigterm), ..md };
        let (parent, name) = match asked {
            Some(parent) => (parent, savepoint::child_name(&self.setup.pipeline, id)),
            None => (self.setup.layout.savepoints_dir(), savepoint_dir_name(id)),
        };
        let from = self.setup.layout.checkpoint_dir(id);
        let bytes = md.to_bytes();
        if let Some(url) = parent.to_str().filter(|p| crate::checkpoint::remote::is_url(p)).map(str::to_string) {
            let options = self.setup.spec.storage.as_ref().map(|s| s.options.clone()).unwrap_or_default();
            let staging_parent = self.setup.layout.savepoints_dir();
            return tokio::task::spawn_blocking(move || upload_savepoint(&url, &options, &staging_parent, &name, &from, &bytes, keep))
                .await
                .expect("savepoint upload does not panic");
        }
        tokio::task::spawn_blocking(move || {
            let staging = savepoint::Staging::begin(&parent, &name)?;
            if keep {
                staging.copy_from(&from)?;
            } else {
                staging.fill_from(&from)?;
            }
            staging.commit(&bytes)
        })
        .await
        .expect("savepoint write does not panic")
    }

    /// Delete the shared files no checkpoint on disk references any more.
    /// Runs between checkpoints: no upload of a live checkpoint is in flight.
    async fn collect_garbage(&self) {
        if let Some(storage) = self.setup.storage.clone() {
            collect_stored_garbage(storage).await;
        }
        let layout = self.setup.layout.clone();
        let result = tokio::task::spawn_blocking(move || crate::checkpoint::shared::collect_garbage(&layout, false)).await;
        match result {
            Ok(Ok(removed)) if !removed.is_empty() => tracing::debug!(files = removed.len(), "Deleted subsumed shared files."),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "Cannot clean up shared checkpoint files."),
            Err(e) => tracing::warn!(error = %e, "Shared file cleanup panicked."),
        }
    }

    /// A request from the control socket.
    fn on_command(&mut self, command: Command) {
        match command {
            Command::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Command::Savepoint { request, reply } => match self.savepoint_refusal() {
                Some(why) => {
                    let _ = reply.send(Err(why));
                }
                None => self.request_savepoint(request, reply),
            },
        }
    }

    fn status(&self) -> Status {
        Status {
            pipeline: self.setup.pipeline.clone(),
            parallelism: self.setup.parallelism,
            last_checkpoint: self.last_completed,
            running: self.coordinator.running(),
            savepoint_in_progress: self.savepoint.is_some(),
            stopping: self.final_wanted,
            live: None,
        }
    }

    /// Why a savepoint cannot be taken now, if it cannot (the target is
    /// checked by `request_savepoint`).
    fn savepoint_refusal(&self) -> Option<String> {
        if let Some(sp) = &self.savepoint {
            let which = sp.id.map_or("one".to_string(), |id| format!("savepoint {id}"));
            return Some(format!("a savepoint is already in progress ({which}); try again when it completed"));
        }
        if self.final_wanted {
            return Some("the pipeline is stopping (its final checkpoint is being taken)".into());
        }
        None
    }

    fn request_savepoint(&mut self, mut request: SavepointRequest, reply: oneshot::Sender<Result<PathBuf, String>>) {
        // Resolved once: the savepoint goes where the check looked.
        if let Some(t) = request.dir.as_ref().filter(|t| !t.to_str().is_some_and(crate::checkpoint::remote::is_url)) {
            match savepoint::check(&self.setup.layout, t) {
                Ok(resolved) => request.dir = Some(resolved),
                Err(e) => {
                    let _ = reply.send(Err(e.to_string()));
                    return;
                }
            }
        }
        if let Some(why) = request.dir.as_ref().and_then(|t| self.target_in_storage(t)) {
            let _ = reply.send(Err(why));
            return;
        }
        tracing::info!(stop = request.stop, "Savepoint requested.");
        if request.stop {
            // The savepoint is the final checkpoint: sources stop after its barrier.
            self.final_wanted = true;
            self.final_queued = true;
        }
        self.coordinator.trigger_now(Kind::Savepoint);
        let (stop, drain) = (request.stop, request.stop && request.drain);
        self.savepoint = Some(PendingSavepoint { id: None, dir: request.dir, stop, drain, on_sigterm: request.on_sigterm, reply });
    }

    /// Why an object storage target is refused: in an area of the
    /// checkpoint storage (in a cluster, of any instance's) whose cleanup
    /// would delete the savepoint (`remote::managed_area`).
    fn target_in_storage(&self, target: &std::path::Path) -> Option<String> {
        let (target, storage) = (target.to_str()?, self.setup.storage.as_ref()?.root());
        // `<storage>/instance-I`: the cluster's storage is the parent.
        let cluster = storage.rsplit_once("/instance-").filter(|(_, i)| i.parse::<u32>().is_ok()).map(|(base, _)| base.to_string());
        let root = cluster.unwrap_or(storage);
        let area = crate::checkpoint::remote::managed_area(target, &root)?;
        Some(format!(
            "the savepoint target {target} is inside the checkpoint storage {root}, in `{area}`, whose cleanup would delete it; choose another prefix (e.g. {}/savepoints)",
            root.trim_end_matches('/')
        ))
    }

    /// What the metrics endpoint shows of the coordinator, after a checkpoint ended.
    fn note_progress(&self) {
        let m = &self.setup.metrics;
        m.in_progress.store(self.coordinator.running().unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
        m.consecutive_failures.store(u64::from(self.coordinator.consecutive_failures()), std::sync::atomic::Ordering::Relaxed);
    }

    fn aborted(&mut self, mut outcome: AbortOutcome, why: FailureReason) -> Result<(), DriverError> {
        // A checkpoint directory that could not be created is the cause of
        // what the tasks then report (ENOENT on their files): name it.
        let (AbortOutcome::Aborted { id, reason, .. } | AbortOutcome::Fail { id, reason, .. }) = &mut outcome;
        if let Some(cause) = self.stats.dir_error.take_if(|_| *id == self.stats.id) {
            *reason = format!("{reason} (cause: {cause})");
        }
        let (id, reason, savepoint) = match &outcome {
            AbortOutcome::Aborted { id, reason, kind } => (*id, reason.clone(), *kind == Kind::Savepoint),
            AbortOutcome::Fail { id, reason, .. } => (*id, reason.clone(), false),
        };
        tracing::warn!(checkpoint = id, %reason, reason_class = why.label(), "Checkpoint aborted.");
        self.setup.metrics.on_failed(id, savepoint, why, &reason);
        if let (Some(sum), false) = (self.summary.as_mut(), savepoint) {
            sum.failed();
        }
        self.note_progress();
        // A final checkpoint that failed is asked for again.
        self.final_queued = false;
        for a in &mut self.arbiters {
            a.on_abort(id, crate::protocol::arbiter::AbortReason::Coordinator(reason.clone()));
        }
        if let Some(sp) = self.savepoint.take_if(|sp| sp.id == Some(id)) {
            // After a failed stop-with-savepoint the sources have stopped:
            // the run ends with a final checkpoint instead.
            let then = if sp.stop { "; the pipeline stops with a final checkpoint instead" } else { "" };
            let _ = sp.reply.send(Err(format!("savepoint {id} aborted: {reason}{then}")));
        }
        for rv in &self.setup.rendezvous {
            rv.cancel(id, &reason);
        }
        self.unremoved.push(id);
        if self.setup.storage.is_some() {
            self.unremoved_stored.push(id);
        }
        self.remove_unremoved();
        if !self.setup.rendezvous.is_empty() {
            // The shared files the aborted checkpoint copied that nothing references.
            let layout = self.setup.layout.clone();
            if let Err(e) = crate::blocking::call(|| crate::checkpoint::shared::collect_garbage(&layout, false)) {
                tracing::warn!(error = %e, "Cannot clean up shared checkpoint files.");
            }
            if let Some(storage) = &self.setup.storage {
                if let Err(e) = crate::blocking::call(|| publish::collect_shared_garbage(storage.as_ref())) {
                    tracing::warn!(error = %e, "Cannot clean up shared objects in the store.");
                }
            }
        }
        match outcome {
            AbortOutcome::Fail { id, reason, failures } => Err(DriverError::TooManyFailures { id, reason, failures }),
            AbortOutcome::Aborted { .. } => Ok(()),
        }
    }
}

impl Driver {
    /// The names checkpoint `id` has in the store: this run's, and those
    /// the start found (never a newer generation's: a deposed owner
    /// deletes nothing of its successor's).
    fn stored_names(&self, id: CheckpointId) -> Vec<StoredId> {
        let own = StoredId::new(id, self.setup.storage_generation);
        let found = self.setup.retained_stored.iter().filter(|s| s.id == id && s.generation < own.generation);
        found.copied().chain(std::iter::once(own)).collect()
    }
}

/// The `reason` label of a bundle's abort.
fn failure_reason(reason: &crate::protocol::arbiter::AbortReason) -> FailureReason {
    use crate::protocol::arbiter::AbortReason;
    match reason {
        AbortReason::Voter { .. } => FailureReason::Declined,
        AbortReason::Timeout => FailureReason::Timeout,
        // The coordinator aborts a bundle only after another bundle failed,
        // and then this bundle's decision is not the one counted.
        AbortReason::Coordinator(_) => FailureReason::Declined,
        AbortReason::Superseded { .. } => FailureReason::Superseded,
        AbortReason::DuplicateFile { .. } => FailureReason::Conflict,
    }
}

/// `sp-0000012`: a savepoint's name in `<state.dir>/savepoints/`.
pub fn savepoint_dir_name(id: CheckpointId) -> String {
    format!("sp-{id:07}")
}

/// The next command, or never when there is no control socket.
async fn recv_opt(commands: &mut Option<mpsc::UnboundedReceiver<Command>>) -> Option<Command> {
    match commands {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Delete the shared objects (SSTs) no checkpoint in the store references.
async fn collect_stored_garbage(storage: Arc<dyn Storage>) {
    match tokio::task::spawn_blocking(move || publish::collect_shared_garbage(storage.as_ref())).await {
        Ok(Ok(removed)) if !removed.is_empty() => {
            tracing::debug!(objects = removed.len(), "Deleted subsumed shared objects from the store.")
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "Cannot clean up shared objects in the store."),
        Err(e) => tracing::warn!(error = %e, "Shared object cleanup panicked."),
    }
}

/// Commit checkpoint `id` (its bundles are in the state directory) with
/// `_metadata` = `bytes`, off the task threads: into the state directory
/// itself, or uploaded to `storage` (every file, then `_metadata` with a
/// conditional put), after which the local copy gets its `_metadata` too
/// (local recovery). Sinks are told only after this returned Ok.
async fn commit_checkpoint(layout: Layout, storage: Option<Arc<dyn Storage>>, stored: StoredId, bytes: Vec<u8>) -> Result<(), String> {
    tokio::task::spawn_blocking(move || {
        let (id, prefix) = (stored.id, stored.name());
        let dir = layout.checkpoint_dir(id);
        match storage {
            None => publish::commit(&LocalStorage::new(layout.checkpoints_dir()), &dir, &prefix, &bytes).map_err(|e| e.to_string()),
            Some(storage) => {
                let started = Instant::now();
                publish::commit(storage.as_ref(), &dir, &prefix, &bytes).map_err(|e| e.to_string())?;
                tracing::debug!(checkpoint = id, upload_ms = started.elapsed().as_millis() as u64, "Checkpoint uploaded.");
                if let Err(e) = disk::write_atomic(&layout.metadata(id), &bytes) {
                    tracing::warn!(checkpoint = id, error = %e, "Cannot mark the local copy complete; a restore downloads it.");
                }
                Ok(())
            }
        }
    })
    .await
    .expect("checkpoint commit does not panic")
}

/// Savepoint `name` of the committed bundles in `from`, put under the
/// parent `url` in the store: built in a temp directory of
/// `staging_parent`, uploaded, and committed with its `_metadata` last
/// (`NAME-N` when the name is taken). Returns its URL.
fn upload_savepoint(
    url: &str,
    options: &[(String, String)],
    staging_parent: &std::path::Path,
    name: &str,
    from: &std::path::Path,
    md: &[u8],
    keep: bool,
) -> Result<PathBuf, disk::StoreError> {
    let failed =
        |e: String| disk::StoreError::Io { op: "upload a savepoint to", path: PathBuf::from(url), source: std::io::Error::other(e) };
    let storage = crate::checkpoint::remote::ObjectStorage::open(url, options).map_err(failed)?;
    let staging = savepoint::Staging::begin(staging_parent, name)?;
    if keep {
        staging.copy_from(from)?;
    } else {
        staging.fill_from(from)?;
    }
    for n in 0..=100u32 {
        let child = if n == 0 { name.to_string() } else { format!("{name}-{n}") };
        if !storage.list(&format!("{child}/")).map_err(|e| failed(e.to_string()))?.is_empty() {
            continue;
        }
        // Claimed with a conditional put before anything is uploaded: two
        // writers of the same name (instances of a cluster whose ids meet,
        // one target) would otherwise mix their files under it.
        match storage.put_if_absent(&format!("{child}.claim"), md) {
            Ok(()) => {}
            Err(crate::checkpoint::storage::StorageError::AlreadyExists { .. }) => continue,
            Err(e) => return Err(failed(e.to_string())),
        }
        return match publish::commit(&storage, staging.dir(), &child, md) {
            Ok(()) => Ok(PathBuf::from(storage.url(&child))),
            Err(e) => Err(failed(e.to_string())),
        };
    }
    Err(failed(format!("{name} and its successors up to -100 are all taken")))
}

async fn write_atomic(path: std::path::PathBuf, bytes: Vec<u8>) -> Result<(), disk::StoreError> {
    tokio::task::spawn_blocking(move || disk::write_atomic(&path, &bytes)).await.expect("write task does not panic")
}

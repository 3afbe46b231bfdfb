//! The runtime: runs a plan on tokio, one task per chained subtask, with a
//! bounded channel per upstream→downstream subtask pair (the backpressure).
//!
//! A failing task stops the whole pipeline: its channels close, neighbours
//! stop, and `run` returns the first error with its operator and subtask.

pub mod build;
pub mod chain;
pub mod channel;
pub mod checkpoint_history;
pub mod checkpoint_log;
pub mod checkpointing;
pub mod control;
#[cfg(test)]
mod driver_tests;
pub mod gauges;
pub mod input;
pub mod message;
pub mod metrics;
pub mod output;
pub mod rendezvous;
pub mod restore_clock;
pub mod status;
pub mod task;
pub mod task_checkpoint;

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

pub use build::BuildError;
pub use chain::TaskError;
pub use metrics::{NodeMetrics, Totals};

use crate::checkpoint;
use crate::connectors::source::Extent;
use crate::plan::Plan;
use build::Task;
use task::TaskEnd;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error(transparent)]
    Checkpoint(#[from] checkpointing::DriverError),
    #[error("task {task} panicked: {message}")]
    Panicked { task: String, message: String },
    #[error(
        "tasks {tasks} did not end within {}s of the last checkpoint and were cut off; \
         what they had not committed yet is committed by the next restore (--restore latest)",
        ENDING_GRACE.as_secs()
    )]
    CutOff { tasks: String },
    #[error("{error} (tasks {tasks} did not stop after it and were cut off)")]
    Stuck { error: Box<RuntimeError>, tasks: String },
}

/// `WEIR_FAULTS=end_stall=D`: a task that hangs once done (a client
/// that does not close), to test that the end of a run is bounded.
fn stall_at_end<T>(result: T) -> T {
    if let Some(d) = crate::faults::get().end_stall {
        crate::blocking::call(|| std::thread::sleep(d));
    }
    result
}

/// The name the checkpoint driver's task goes by.
const DRIVER: &str = "checkpoint driver";
/// How long the tasks may take to end after the last checkpoint is decided.
const ENDING_GRACE: Duration = Duration::from_secs(30);

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Bounded input was fully processed.
    Finished,
    /// Stopped on request (signal) before the end of input.
    Stopped,
}

/// A pipeline ready to run.
pub struct Engine {
    tasks: Vec<(String, Task)>,
    driver: Option<checkpointing::Driver>,
    metrics: Vec<NodeMetrics>,
    extent: Option<Extent>,
    stop_tx: watch::Sender<bool>,
    /// The control socket and the channel its requests go on to the driver.
    control: Option<(std::path::PathBuf, mpsc::UnboundedSender<control::Command>)>,
    /// What the metrics endpoint reads.
    exported: metrics::Exported,
    /// The newest status (runtime/status.rs), sampled while running.
    status: (watch::Sender<status::Snapshot>, watch::Receiver<status::Snapshot>),
}

/// Asks a running engine to stop (sources stop, the rest drains), with a
/// final checkpoint or, when checkpointing, with a savepoint.
#[derive(Clone)]
pub struct StopHandle(watch::Sender<bool>, Option<mpsc::UnboundedSender<control::Command>>);

impl StopHandle {
    pub fn stop(&self) {
        let _ = self.0.send(true);
    }

    /// Stop-with-savepoint into `dir` (absolute; None: the state
    /// directory's `savepoints/`), as `weir savepoint trigger --stop` asks
    /// it: the receiver gets the savepoint's path, or why it was refused or
    /// failed. None without checkpointing.
    pub fn stop_with_savepoint(
        &self,
        dir: Option<std::path::PathBuf>,
    ) -> Option<tokio::sync::oneshot::Receiver<Result<std::path::PathBuf, String>>> {
        let commands = self.1.as_ref()?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        let request = control::SavepointRequest { dir, stop: true, drain: false, on_sigterm: true };
        commands.send(control::Command::Savepoint { request, reply }).ok()?;
        Some(answer)
    }
}

impl Engine {
    /// Build the tasks of `plan`; with checkpointing on, `start` says where
    /// state comes from and where checkpoint ids continue.
    pub fn build(plan: &Plan, start: Option<crate::restore::StartPoint>) -> Result<Engine, BuildError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let exported = |built: (&[NodeMetrics], &metrics::Details), checkpoints: Option<std::sync::Arc<metrics::CheckpointMetrics>>| {
            metrics::Exported {
                pipeline: plan.pipeline.name.clone(),
                nodes: built.0.to_vec(),
                checkpoint_interval: plan.pipeline.checkpoint.as_ref().map_or(Duration::ZERO, |c| c.interval),
                checkpoints,
                running: Default::default(),
                restarts: Default::default(),
                details: std::sync::Arc::new(built.1.clone()),
            }
        };
        let Some(spec) = plan.pipeline.checkpoint.clone() else {
            let built = build::build(plan, &stop_rx, None, None)?;
            let exported = exported((&built.metrics, &built.details), None);
            return Ok(Engine {
                tasks: built.tasks,
                driver: None,
                metrics: built.metrics,
                extent: built.extent,
                status: status_channel(&exported, built.extent, &stop_tx),
                stop_tx,
                control: None,
                exported,
            });
        };
        let mut start = start.unwrap_or(crate::restore::StartPoint {
            restored: None,
            first_id: 1,
            retained: Vec::new(),
            retained_stored: Vec::new(),
            storage_generation: 0,
            storage: None,
            ownership: None,
            cluster_generation: 0,
        });
        let layout = checkpoint::layout::Layout::new(&plan.pipeline.state.dir);
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (completed_tx, completed_rx) = watch::channel(start.restored.as_ref().map_or(0, |r| r.id));
        let (done_tx, done_rx) = watch::channel(false);
        let fence = checkpoint::lease::Fence { generation: start.storage_generation, ownership: start.ownership.clone() };
        let wiring = build::CheckpointWiring { layout: layout.clone(), events: events_tx, completed: completed_rx, done: done_rx, fence };
        let restored_id = start.restored.as_ref().map_or(0, |r| r.id);
        let built = build::build(plan, &stop_rx, Some(&wiring), start.restored.as_mut())?;
        let checkpoint_metrics = std::sync::Arc::new(metrics::CheckpointMetrics::default());
        checkpoint_metrics.restored_id.store(restored_id, std::sync::atomic::Ordering::Relaxed);
        if let Some(clock) = &built.restore_clock {
            let _ = checkpoint_metrics.restore.set(clock.clone());
        }
        let setup = checkpointing::DriverSetup {
            spec,
            layout,
            pipeline: plan.pipeline.name.clone(),
            parallelism: plan.pipeline.parallelism,
            max_parallelism: plan.pipeline.max_parallelism,
            operators: plan.pipeline.nodes.iter().map(|n| n.name.clone()).collect(),
            keys: plan.pipeline.state_keys(),
            cluster: plan.pipeline.cluster_record(),
            bundles: built.bundles,
            task_names: built.task_names,
            first_id: start.first_id,
            retained: start.retained,
            retained_stored: start.retained_stored,
            storage_generation: start.storage_generation,
            storage: start.storage.clone(),
            ownership: start.ownership.clone(),
            rendezvous: built.rendezvous,
            source_tasks: built.tasks.iter().filter(|(_, t)| matches!(t, Task::Source(_))).count(),
            metrics: checkpoint_metrics.clone(),
        };
        let (commands_tx, commands_rx) = mpsc::unbounded_channel();
        let control = Some((setup.layout.control_socket(), commands_tx));
        let driver = checkpointing::Driver::new(setup, events_rx, built.controls, completed_tx, done_tx, stop_rx, Some(commands_rx));
        let exported = exported((&built.metrics, &built.details), Some(checkpoint_metrics));
        let status = status_channel(&exported, built.extent, &stop_tx);
        Ok(Engine {
            tasks: built.tasks,
            driver: Some(driver),
            metrics: built.metrics,
            extent: built.extent,
            stop_tx,
            control,
            exported,
            status,
        })
    }

    /// The newest status, sampled a few times a second while running.
    pub fn status(&self) -> watch::Receiver<status::Snapshot> {
        self.status.1.clone()
    }

    /// How completed checkpoints are logged (default: one INFO line each);
    /// savepoints, failures and warnings keep their level.
    pub fn log_checkpoints(&mut self, log: checkpoint_log::CheckpointLog) {
        if let Some(d) = &mut self.driver {
            d.log_checkpoints(log);
        }
    }

    /// What the metrics endpoint serves, live while running.
    pub fn exported(&self) -> metrics::Exported {
        self.exported.clone()
    }

    /// Per-node counters, live while running.
    pub fn metrics(&self) -> Vec<NodeMetrics> {
        self.metrics.clone()
    }

    /// The total bounded input (bytes or rows), if known.
    pub fn extent(&self) -> Option<Extent> {
        self.extent
    }

    /// What the control socket (`serve::control`) needs, with
    /// checkpointing: its path, the channel its requests go on to the
    /// checkpoint driver, and the newest status.
    pub fn control(&self) -> Option<(std::path::PathBuf, mpsc::UnboundedSender<control::Command>, watch::Receiver<status::Snapshot>)> {
        self.control.as_ref().map(|(path, commands)| (path.clone(), commands.clone(), self.status.1.clone()))
    }

    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.stop_tx.clone(), self.control.as_ref().map(|(_, commands)| commands.clone()))
    }

    /// Run to the end of input or until stopped. Must be called within a
    /// tokio runtime.
    pub async fn run(self) -> Result<Outcome, RuntimeError> {
        let sampler = status::Sampler::new(self.exported.clone(), self.extent, self.stop_tx.subscribe());
        let sampling = tokio::spawn(sampler.run(self.status.0.clone()));
        let running = self.exported.running.clone();
        running.store(true, std::sync::atomic::Ordering::Relaxed);
        let result = self.run_tasks().await;
        running.store(false, std::sync::atomic::Ordering::Relaxed);
        sampling.abort();
        result
    }

    async fn run_tasks(self) -> Result<Outcome, RuntimeError> {
        let mut set = JoinSet::new();
        let mut names = std::collections::HashMap::new();
        let checkpointing = self.driver.is_some();
        if let Some(driver) = self.driver {
            let handle = set.spawn(async move { driver.run().await.map(|()| TaskEnd::Finished).map_err(RuntimeError::from) });
            names.insert(handle.id(), DRIVER.to_string());
        }
        for (name, task) in self.tasks {
            let handle = match task {
                Task::Source(t) => set.spawn(async move { stall_at_end(t.run().await.map_err(RuntimeError::from)) }),
                Task::Operator(t) => set.spawn(async move { stall_at_end(t.run().await.map_err(RuntimeError::from)) }),
            };
            names.insert(handle.id(), name);
        }
        let mut first_error: Option<RuntimeError> = None;
        let mut stopped = false;
        let mut deadline: Option<Instant> = None;
        loop {
            let next = match deadline {
                Some(d) => match tokio::time::timeout_at(d.into(), set.join_next_with_id()).await {
                    Ok(n) => n,
                    Err(_) => {
                        // Tasks that did not wind down after a failure, or
                        // after a stop's last checkpoint, are cut off.
                        first_error = Some(cut_off(names.values(), first_error.take()));
                        // Not waited for: a task blocked in a call is not
                        // at an await point, where an abort takes effect.
                        set.abort_all();
                        set.detach_all();
                        break;
                    }
                },
                None => set.join_next_with_id().await,
            };
            let Some(joined) = next else { break };
            let id = match &joined {
                Ok((id, _)) => *id,
                Err(e) => e.id(),
            };
            let task = names.remove(&id).unwrap_or_default();
            if task == DRIVER && first_error.is_none() && deadline.is_none() {
                // The driver ends once the last checkpoint is decided: what
                // is left of the tasks is ending (a sink's commit, which a
                // restore would also finish; a client closing), and must not
                // hold the process forever.
                deadline = Some(Instant::now() + ENDING_GRACE);
            }
            stopped |= matches!(joined, Ok((_, Ok(TaskEnd::Stopped))));
            if let Some(f) = failure_of(joined, task) {
                if first_error.is_none() {
                    tracing::error!(error = %f, "Task failed; stopping the pipeline.");
                    first_error = Some(f);
                    let _ = self.stop_tx.send(true);
                    if checkpointing {
                        // A failure is a crash: the next run restores from the
                        // last checkpoint, so nothing is drained or committed.
                        set.abort_all();
                    }
                    deadline = Some(Instant::now() + Duration::from_secs(5));
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None if stopped => Ok(Outcome::Stopped),
            None => Ok(Outcome::Finished),
        }
    }
}

/// The error of tasks (`left`) cut off after they did not end in time,
/// with the failure that stopped the pipeline, if any.
fn cut_off<'a>(left: impl Iterator<Item = &'a String>, first_error: Option<RuntimeError>) -> RuntimeError {
    let mut left: Vec<&str> = left.map(String::as_str).collect();
    left.sort_unstable();
    let left = left.join(", ");
    tracing::warn!(tasks = %left, "Tasks did not end in time; cutting them off.");
    match first_error {
        None => RuntimeError::CutOff { tasks: left },
        Some(e) => RuntimeError::Stuck { error: Box::new(e), tasks: left },
    }
}

type Joined = Result<(tokio::task::Id, Result<TaskEnd, RuntimeError>), tokio::task::JoinError>;

/// How a task that ended failed, if it did (a cancelled one did not).
fn failure_of(joined: Joined, task: String) -> Option<RuntimeError> {
    match joined {
        Ok((_, Ok(_))) => None,
        Ok((_, Err(e))) => Some(e),
        Err(e) if e.is_cancelled() => None,
        Err(e) => Some(RuntimeError::Panicked { task, message: panic_message(e.into_panic()) }),
    }
}

/// The status channel, holding a first snapshot (all zero, `starting`).
fn status_channel(
    exported: &metrics::Exported,
    extent: Option<Extent>,
    stop: &watch::Sender<bool>,
) -> (watch::Sender<status::Snapshot>, watch::Receiver<status::Snapshot>) {
    watch::channel(status::Sampler::new(exported.clone(), extent, stop.subscribe()).sample())
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

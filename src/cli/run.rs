//! `weir run` and `weir restore`: one run of a pipeline from its start to
//! its end, the signals that stop it, and what happens after it.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{ending, exit_status, load, progress, restart, savepoint_retention, RunArgs, UsageError};
use crate::config;
use crate::plan::Plan;
use crate::restore::{self, RestoreFrom};
use crate::runtime::checkpoint_log::CheckpointLog;
use crate::runtime::{Engine, Outcome};
use crate::serve::http;

pub(super) fn run_pipeline(args: RunArgs) -> anyhow::Result<ExitCode> {
    let (pipeline, metrics_listener, restore) = prepare(&args)?;
    // The signals' own runtime, for the whole process; each run gets a
    // runtime of its own (`run_with_restarts`), so that a restart begins
    // only once every task of the failed run has ended.
    let signals_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("weir-signals")
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    // Before anything that can take long (the lock, loading a checkpoint,
    // rebuilding state, opening connectors): a signal from here on stops
    // the run, and a second one exits at once.
    let stop = signals_rt
        .block_on(async { Signals::install() })
        .context("installing the SIGINT and SIGTERM handlers")?
        .listen(&signals_rt, sigterm_savepoint_dir(&pipeline)?);
    // An instance never starts on the checkpoints of another cluster shape.
    crate::restore::cluster::check_prefix(&pipeline).map_err(UsageError)?;
    let retention = SigtermRetention {
        pipeline: pipeline.name.clone(),
        keep: pipeline.savepoint_on_sigterm_keep,
        storage_options: pipeline.checkpoint.as_ref().and_then(|c| c.storage.as_ref()).map(|s| s.options.clone()).unwrap_or_default(),
    };
    let (outcome, held, rt) = run_with_restarts(&signals_rt, &args.options, pipeline, restore, metrics_listener.as_ref(), &stop)?;
    end_run(outcome, held, rt, &stop, &retention)
}

/// Load the pipeline with the command line's overrides, bind its metrics
/// address and read `--restore`: everything refused before anything is written.
fn prepare(args: &RunArgs) -> anyhow::Result<(config::Pipeline, Option<std::net::TcpListener>, Option<RestoreFrom>)> {
    let extra: Vec<String> = args.options.parallelism.map(|n| format!("parallelism={n}")).into_iter().collect();
    let mut pipeline = load(&args.options.pipeline, &extra)?;
    crate::faults::init_from_env().map_err(UsageError)?;
    if let Some(address) = args.options.metrics_addr {
        pipeline.metrics = Some(config::MetricsSpec { address });
    }
    // Bound before the state directory is locked or written: a taken port
    // refuses the run with nothing changed on disk.
    let metrics_listener = match pipeline.metrics {
        Some(m) => Some(http::bind(m.address).map_err(|e| {
            UsageError(format!("{e} (another process listens there? choose another with --metrics-addr or `metrics.address`)"))
        })?),
        None => None,
    };
    Ok((pipeline, metrics_listener, restore_from(&args.restore)?))
}

/// What `--restore` (given `args` times) asks for.
pub(super) fn restore_from(args: &[String]) -> Result<Option<RestoreFrom>, UsageError> {
    Ok(match args {
        [] => None,
        [r] if r == "latest" => Some(RestoreFrom::Latest),
        [path] => Some(RestoreFrom::Path(path.into())),
        set if set.iter().any(|r| r == "latest") => {
            return Err(UsageError("--restore latest cannot be part of a savepoint set: give one path per old instance".into()))
        }
        set => Some(RestoreFrom::Set(set.iter().map(PathBuf::from).collect())),
    })
}

/// `savepoint.on_sigterm`: SIGTERM stops with a savepoint instead, into
/// `savepoint.dir` (made absolute now) or the state directory's `savepoints/`.
fn sigterm_savepoint_dir(pipeline: &config::Pipeline) -> anyhow::Result<Option<Option<PathBuf>>> {
    Ok(match (pipeline.savepoint_on_sigterm, &pipeline.savepoint_dir) {
        (false, _) => None,
        (true, Some(d)) if d.to_str().is_some_and(crate::checkpoint::remote::is_url) => Some(Some(d.clone())),
        (true, Some(d)) => Some(Some(std::path::absolute(d).with_context(|| format!("savepoint.dir {}", d.display()))?)),
        (true, None) => Some(None),
    })
}

/// Which savepoints taken on SIGTERM are kept (`savepoint.on_sigterm_keep`).
struct SigtermRetention {
    pipeline: String,
    keep: usize,
    storage_options: Vec<(String, String)>,
}

/// Run, and run again after a failure as `restart:` allows: the last run's
/// outcome, what it holds, and its runtime (None once shut down).
fn run_with_restarts(
    signals_rt: &tokio::runtime::Runtime,
    options: &super::RunOptions,
    pipeline: config::Pipeline,
    mut restore: Option<RestoreFrom>,
    metrics_listener: Option<&std::net::TcpListener>,
    stop: &StopRequest,
) -> anyhow::Result<(anyhow::Result<Outcome>, Held, Option<tokio::runtime::Runtime>)> {
    let mut budget = pipeline.restart.map(restart::Budget::new);
    // The failure a restart follows (reported if the restart is refused).
    let mut failed: Option<anyhow::Error> = None;
    loop {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the tokio runtime")?;
        // Served on the signal thread's runtime, not the pipeline's: tasks
        // that keep its workers busy must not make /live and /metrics hang.
        let listener = match metrics_listener {
            Some(l) => Some((l.try_clone().context("the metrics endpoint's socket")?, signals_rt.handle().clone())),
            None => None,
        };
        let restarts = budget.as_ref().map_or(0, |b| b.total);
        let (mut outcome, held) = run_once(&rt, options, pipeline.clone(), restore.as_ref(), listener, stop, restarts);
        if let (Err(refusal), Some(cause)) = (&outcome, failed.take()) {
            if exit_status(refusal) == 2 {
                // The failure stands: a restart refused (the storage taken
                // by another process, say) ends with the failure itself.
                tracing::error!(refusal = %format!("{refusal:#}"), "The restart was refused; giving up (restart:).");
                outcome = Err(cause);
            }
        }
        let Err(e) = &outcome else { return Ok((outcome, held, Some(rt))) };
        let Some(b) = budget.as_mut().filter(|_| restartable(e) && !stop.asked()) else { return Ok((outcome, held, Some(rt))) };
        let Some(wait) = restart_wait(b, e) else { return Ok((outcome, held, Some(rt))) };
        // Every task of the failed run ends before the next run starts: one
        // still blocked in a call would run beside it.
        let waited = Instant::now();
        rt.shutdown_timeout(ending::RUNTIME_GRACE);
        if waited.elapsed() >= ending::RUNTIME_GRACE {
            tracing::error!(
                grace_s = ending::RUNTIME_GRACE.as_secs(),
                "Work of the failed run did not end in time; not restarting in this process (a supervisor that restarts it may)."
            );
            return Ok((outcome, held, None));
        }
        // Released before the wait: the restart takes it again, as a new
        // process would. Once a run has restored (or started afresh), the
        // lineage records it and `latest` goes on from there; a run that
        // failed before that is tried again as asked.
        let restored = held.is_some();
        drop(held);
        if !signals_rt.block_on(stop.wait_unless_asked(wait)) {
            tracing::info!("Stop requested during the wait before a restart; not restarting.");
            return Ok((outcome, None, None));
        }
        if restored {
            restore = Some(RestoreFrom::Latest);
        }
        failed = outcome.err();
    }
}

/// How long to wait before restarting after failure `e`, logged; None
/// once the restarts within the window are spent.
fn restart_wait(budget: &mut restart::Budget, e: &anyhow::Error) -> Option<Duration> {
    let policy = budget.policy();
    match budget.on_failure(Instant::now()) {
        restart::Decision::Restart { wait, n } => {
            tracing::error!(
                error = %format!("{e:#}"),
                restart = n,
                attempts = policy.attempts,
                window_s = policy.window.as_secs(),
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "The run failed; restarting from the latest checkpoint (restart:)."
            );
            Some(wait)
        }
        restart::Decision::Spent => {
            tracing::error!(
                attempts = policy.attempts,
                window_s = policy.window.as_secs(),
                "The run failed again after its restarts within the window (restart:); giving up."
            );
            None
        }
    }
}

/// After the last run: stop its runtime, retire old SIGTERM savepoints,
/// release the state directory, and turn the outcome into the exit.
fn end_run(
    outcome: anyhow::Result<Outcome>,
    held: Held,
    rt: Option<tokio::runtime::Runtime>,
    stop: &StopRequest,
    retention: &SigtermRetention,
) -> anyhow::Result<ExitCode> {
    let status = match &outcome {
        Ok(_) if stop.savepoint_failure().is_some() => 1,
        Ok(_) => 0,
        Err(e) => exit_status(e),
    };
    let ending = ending::Ending::begin(status, ending::GRACE);
    // The runtime before the lock: nothing of this run writes once the
    // state directory is released. A blocking call still under way after
    // the bound (a client closing against a slow server) ends with the
    // process; the released lease refuses its writes.
    if let Some(rt) = rt {
        ending.step("stopping the runtime's remaining tasks");
        rt.shutdown_timeout(ending::RUNTIME_GRACE);
    }
    let _ = outcome? == Outcome::Finished;
    if let Some(taken) = stop.savepoint_taken() {
        ending.step("disposing older savepoints taken on SIGTERM");
        retire_sigterm_savepoints(&taken, &retention.pipeline, retention.keep, &retention.storage_options);
    }
    ending.step("releasing the state directory's lock and lease");
    drop(held);
    if let Some(why) = stop.savepoint_failure() {
        // The run stopped (with a final checkpoint), but not as asked.
        return Err(anyhow::anyhow!("savepoint.on_sigterm: the savepoint on SIGTERM failed: {why}"));
    }
    Ok(ExitCode::SUCCESS)
}

/// The state directory's lock and the storage's lease a run holds.
type Held = Option<(crate::checkpoint::lock::StateDirLock, Option<crate::checkpoint::lease::Lease>)>;

/// Whether a failed run may restart: not when the user's input is wrong
/// (exit 2), not when tasks of it were cut off (they may still run: a
/// restart in this process would run beside them), and not when another
/// process took the checkpoint storage over (it is the owner now).
fn restartable(e: &anyhow::Error) -> bool {
    use crate::runtime::{checkpointing::DriverError, RuntimeError};
    exit_status(e) == 1
        && !matches!(
            e.downcast_ref::<RuntimeError>(),
            Some(RuntimeError::CutOff { .. } | RuntimeError::Stuck { .. } | RuntimeError::Checkpoint(DriverError::OwnershipLost(_)))
        )
}

/// One run: lock and restore (with checkpoints), build, run to the end.
/// The lock and lease are returned held, whatever the outcome.
fn run_once(
    rt: &tokio::runtime::Runtime,
    options: &super::RunOptions,
    mut pipeline: config::Pipeline,
    restore: Option<&RestoreFrom>,
    metrics_listener: Option<(std::net::TcpListener, tokio::runtime::Handle)>,
    stop: &StopRequest,
    restarts: u64,
) -> (anyhow::Result<Outcome>, Held) {
    let (start, held) = match lock_and_restore(options, &mut pipeline, restore) {
        Ok(started) => started,
        Err(e) => return (Err(e), None),
    };
    if start.as_ref().is_none_or(|s| s.restored.is_none()) {
        warn_of_earlier_parts(&pipeline);
    }
    let plan = Plan::new(pipeline);
    let name = plan.pipeline.name.clone();
    let show = !options.no_progress && std::io::stderr().is_terminal();
    let outcome = rt.block_on(async move {
        let mut engine = Engine::build(&plan, start).context("building the pipeline")?;
        engine.exported().restarts.store(restarts, std::sync::atomic::Ordering::Relaxed);
        let status = crate::serve::control::StatusSource::new(
            engine.control().map(|(_, commands, _)| commands),
            engine.status(),
            plan.pipeline.parallelism.try_into().unwrap_or(u16::MAX),
        );
        let server = match metrics_listener {
            Some((l, on)) => {
                Some(http::MetricsServer::start(l, &on, engine.exported(), Some(status.clone())).context("starting the metrics endpoint")?)
            }
            None => None,
        };
        let control = control_server(&engine, &plan, &status).await.with_context(|| format!("pipeline `{name}` failed"))?;
        let metrics = engine.metrics();
        engine.log_checkpoints(checkpoint_log(options.checkpoint_log, show));
        let progress = progress::Progress::start(show, engine.extent(), engine.status());
        // A signal that came while the pipeline was being built stops it now.
        stop.attach(engine.stop_handle());
        tracing::info!(pipeline = %name, parallelism = plan.pipeline.parallelism, "Pipeline started.");
        let started = Instant::now();
        let result = engine.run().await;
        if let Some(control) = control {
            control.shutdown().await;
        }
        stop.settle().await;
        progress.finish();
        if let Some(server) = server {
            server.shutdown().await;
        }
        let outcome = result.with_context(|| format!("pipeline `{name}` failed"))?;
        eprintln!("{}", progress::summary(&metrics, started.elapsed(), outcome));
        anyhow::Ok(outcome)
    });
    (outcome, held)
}

/// A run that starts afresh adds its parts to a file sink's directory: say
/// so when that directory holds parts already, or the result looks doubled.
fn warn_of_earlier_parts(pipeline: &config::Pipeline) {
    for node in &pipeline.nodes {
        if let config::NodeKind::Sink(config::SinkSpec::File { dir, .. }) = &node.kind {
            let parts = crate::connectors::file::sink::published_parts(dir);
            if parts > 0 {
                tracing::warn!(
                    sink = %node.name,
                    dir = %dir.display(),
                    parts,
                    "The sink's directory holds parts from earlier runs; this run adds its own next to them (remove the directory first for this run's output alone)."
                );
            }
        }
    }
}

/// `savepoint.on_sigterm_keep`: dispose the older savepoints taken on
/// SIGTERM next to `taken`. The run has succeeded whatever happens here:
/// a savepoint that cannot be disposed is only reported.
fn retire_sigterm_savepoints(taken: &Path, pipeline: &str, keep: usize, options: &[(String, String)]) {
    let retired = savepoint_retention::retire(taken, pipeline, keep, options);
    for p in &retired.disposed {
        tracing::info!(path = %p.display(), keep, "Disposed an older savepoint taken on SIGTERM (savepoint.on_sigterm_keep).");
    }
    for why in &retired.failed {
        tracing::warn!(reason = %why, "An older savepoint taken on SIGTERM was not disposed.");
    }
}

/// SIGINT and SIGTERM, from the start of a run to its end. The first asks
/// the pipeline to stop (a drain, and the final checkpoint); the second
/// exits with status 130 from the signal handler itself, so no busy thread,
/// blocked call or lost wake-up can delay or swallow it.
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    /// Must be called within the runtime.
    fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use signal_hook::consts::{SIGINT, SIGTERM};
            use tokio::signal::unix::{signal, SignalKind};
            let signals = Signals { int: signal(SignalKind::interrupt())?, term: signal(SignalKind::terminate())? };
            // Set by the first signal in its handler; the exit is armed by it.
            // The exit goes first, or the first signal would exit too.
            // `_exit`, not `exit`: the C++ static destructors `exit` runs
            // (RocksDB's) would race the threads still running and can abort
            // the process (SIGABRT) instead of exiting 130.
            let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            for sig in [SIGINT, SIGTERM] {
                signal_hook::flag::register_conditional_shutdown(sig, 130, seen.clone())?;
                signal_hook::flag::register(sig, seen.clone())?;
            }
            Ok(signals)
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Wait for the first signal on a task of its own and pass it on to the
    /// returned request, which the engine is attached to once built.
    /// `on_sigterm`: Some(parent) makes SIGTERM a stop-with-savepoint into
    /// `parent` (None: the state directory's `savepoints/`).
    fn listen(mut self, rt: &tokio::runtime::Runtime, on_sigterm: Option<Option<PathBuf>>) -> StopRequest {
        let request = StopRequest::default();
        let on_signal = request.clone();
        rt.spawn(async move {
            let savepoint = match (self.next().await, on_sigterm) {
                (Signal::Term, Some(parent)) => {
                    tracing::info!("SIGTERM: stopping with a savepoint (savepoint.on_sigterm; a second signal exits at once, status 130).");
                    Some(parent)
                }
                _ => {
                    tracing::info!("Stop requested; draining the pipeline (a second signal exits at once, status 130).");
                    None
                }
            };
            on_signal.request(savepoint);
        });
        request
    }

    async fn next(&mut self) -> Signal {
        #[cfg(unix)]
        tokio::select! {
            _ = self.int.recv() => Signal::Int,
            _ = self.term.recv() => Signal::Term,
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Signal::Int
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Int,
    Term,
}

/// A stop asked for by a signal, possibly before the engine exists: kept
/// until the engine is attached, then passed on.
#[derive(Clone, Default)]
struct StopRequest(std::sync::Arc<std::sync::Mutex<StopState>>);

#[derive(Default)]
struct StopState {
    /// None: no stop asked yet; Some(None): a plain stop; Some(Some(parent)):
    /// a stop-with-savepoint into `parent` (None: `savepoints/`).
    asked: Option<Option<Option<PathBuf>>>,
    handle: Option<crate::runtime::StopHandle>,
    /// Why the stop-with-savepoint failed, once it did.
    failure: Option<String>,
    /// The savepoint it took, once it completed.
    taken: Option<PathBuf>,
    /// The task waiting for the savepoint's answer.
    waiting: Option<tokio::task::JoinHandle<()>>,
}

impl StopRequest {
    fn request(&self, savepoint: Option<Option<PathBuf>>) {
        let handle = {
            let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
            s.asked = Some(savepoint);
            s.handle.clone()
        };
        if let Some(h) = handle {
            self.pass_on(&h);
        }
    }

    /// Whether a stop was asked for (by a signal).
    fn asked(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).asked.is_some()
    }

    /// Wait `wait`, unless a stop is asked for first: true when the whole
    /// wait passed without one.
    async fn wait_unless_asked(&self, wait: std::time::Duration) -> bool {
        let until = tokio::time::Instant::now() + wait;
        while tokio::time::Instant::now() < until {
            if self.asked() {
                return false;
            }
            tokio::time::sleep_until(until.min(tokio::time::Instant::now() + std::time::Duration::from_millis(50))).await;
        }
        !self.asked()
    }

    fn attach(&self, handle: crate::runtime::StopHandle) {
        let asked = {
            let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
            s.handle = Some(handle.clone());
            s.asked.is_some()
        };
        if asked {
            self.pass_on(&handle);
        }
    }

    /// Why the savepoint asked for on SIGTERM failed, if it did.
    fn savepoint_failure(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).failure.clone()
    }

    /// The savepoint taken on SIGTERM, if one completed.
    fn savepoint_taken(&self) -> Option<PathBuf> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).taken.clone()
    }

    /// Stop the engine as asked. A stop-with-savepoint reports its path
    /// when done; refused (a savepoint or stop already under way) it falls
    /// back to a plain stop, and a failed one has stopped the run with a
    /// final checkpoint already.
    fn pass_on(&self, handle: &crate::runtime::StopHandle) {
        let asked = self.0.lock().unwrap_or_else(|e| e.into_inner()).asked.clone();
        let Some(Some(parent)) = asked else {
            handle.stop();
            return;
        };
        let Some(answer) = handle.stop_with_savepoint(parent) else {
            handle.stop();
            return;
        };
        let (state, handle) = (self.0.clone(), handle.clone());
        let waiting = tokio::spawn(async move {
            let why = match answer.await {
                Ok(Ok(path)) => {
                    // stdout may be a sink's: the path goes to stderr.
                    eprintln!("Stopped with a savepoint on SIGTERM. Path: {}", path.display());
                    state.lock().unwrap_or_else(|e| e.into_inner()).taken = Some(path);
                    return;
                }
                Ok(Err(why)) => why,
                Err(_) => "the pipeline ended before the savepoint completed".to_string(),
            };
            tracing::error!(reason = %why, "The savepoint on SIGTERM failed; the pipeline stops with a final checkpoint instead.");
            handle.stop();
            state.lock().unwrap_or_else(|e| e.into_inner()).failure = Some(why);
        });
        self.0.lock().unwrap_or_else(|e| e.into_inner()).waiting = Some(waiting);
    }

    /// After the run: wait until the savepoint's answer is reported (the
    /// driver is gone, so it has come or its sender was dropped).
    async fn settle(&self) {
        let waiting = self.0.lock().unwrap_or_else(|e| e.into_inner()).waiting.take();
        if let Some(w) = waiting {
            let _ = w.await;
        }
    }
}

/// With checkpoints, lock the state directory first (before any connector
/// is opened; it stays locked until the runtime and everything on it is
/// gone) and decide what to restore.
fn lock_and_restore(
    options: &super::RunOptions,
    pipeline: &mut config::Pipeline,
    restore: Option<&RestoreFrom>,
) -> anyhow::Result<(Option<restore::StartPoint>, Held)> {
    match (&pipeline.checkpoint, restore) {
        (Some(_), _) => {
            let policy = restore::RestorePolicy { force: options.force, allow_non_restored_state: options.allow_non_restored_state };
            let prepared = match restore::prepare(pipeline, restore, policy) {
                Ok(p) => p,
                Err(e) if e.is_refusal() => return Err(UsageError(e.to_string()).into()),
                Err(e) => return Err(anyhow::anyhow!("{e}")),
            };
            if pipeline.cluster.is_cluster() {
                // Before the plan: its repartition sends and receives carry it.
                let generation = prepared.start.cluster_generation;
                tracing::info!(generation = %format!("{generation:016x}"), "Cluster generation of the repartition producers.");
                crate::plan::cluster::set_generation(pipeline, generation);
            }
            Ok((Some(prepared.start), Some((prepared.lock, prepared.lease))))
        }
        (None, Some(_)) => Err(UsageError("--restore needs checkpointing: add a `checkpoint:` section to the pipeline".into()).into()),
        (None, None) => Ok((None, None)),
    }
}

/// The control socket: with checkpoints it takes savepoints (failing to
/// open it fails the start); without, it answers `weir status` only, best effort.
async fn control_server(
    engine: &Engine,
    plan: &Plan,
    status: &crate::serve::control::StatusSource,
) -> anyhow::Result<Option<crate::serve::control::ControlServer>> {
    use crate::serve::control::ControlServer;
    if let Some((path, commands, status)) = engine.control() {
        return Ok(Some(ControlServer::start(&path, commands, status).await?));
    }
    let path = crate::checkpoint::layout::Layout::new(&plan.pipeline.state.dir).control_socket();
    match ControlServer::start_status_only(&path, status).await {
        Ok(Some(server)) => Ok(Some(server)),
        Ok(None) => {
            tracing::info!(socket = %path.display(), "Another run of this pipeline answers on the control socket; `weir status` reaches that one.");
            Ok(None)
        }
        Err(e) => {
            tracing::warn!(error = %e, "No control socket (`weir status` cannot reach this run).");
            Ok(None)
        }
    }
}

/// The checkpoint log the user chose, `auto` resolved (see `--checkpoint-log`).
fn checkpoint_log(arg: super::CheckpointLogArg, progress_bar: bool) -> CheckpointLog {
    use super::CheckpointLogArg as Arg;
    let minute = CheckpointLog::Summary { every: Duration::from_secs(60) };
    match arg {
        Arg::Each => CheckpointLog::Each,
        Arg::Minute => minute,
        Arg::Auto if progress_bar => CheckpointLog::Quiet,
        Arg::Auto if std::io::stderr().is_terminal() => CheckpointLog::Each,
        Arg::Auto => minute,
    }
}

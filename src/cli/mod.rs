//! The command line: the only place with anyhow, indicatif and exit codes.

mod inspect;
mod live;
mod progress;
mod savepoint;
mod savepoint_retention;
mod savepoint_set;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};

use crate::config::{self, ConfigErrors};
use crate::plan::Plan;
use crate::restore::{self, RestoreFrom};
use crate::runtime::{Engine, Outcome};
use crate::serve::http;

/// weir: run stateful stream pipelines from a YAML file.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log level (error, warn, info, debug, trace); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info", value_name = "LEVEL")]
    pub log_level: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a pipeline until its input ends or it is stopped (Ctrl-C, SIGTERM).
    Run(RunArgs),
    /// Check a pipeline file and report every problem with file:line:col.
    Validate(PipelineArgs),
    /// Show a checkpoint (directory or `_metadata`) or every checkpoint of a
    /// state directory: bundles, subtasks, files, sizes, and whether it
    /// validates (exit 2 if not).
    Inspect {
        /// A checkpoint directory, its `_metadata` file, or a state directory.
        path: PathBuf,
    },
    /// Run a pipeline from a savepoint (same as `weir run PIPELINE --restore SAVEPOINT`).
    Restore(RestoreArgs),
    /// Take, list and dispose of savepoints.
    #[command(subcommand)]
    Savepoint(SavepointCommand),
    /// Ask the running pipeline (through `<state.dir>/control.sock`) how it
    /// is doing: state, uptime, records/s in and out per operator,
    /// watermarks, backpressure and the last checkpoint.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Ask again every `--interval` and show the new table, until the
    /// pipeline ends (or `--count` tables were shown, or Ctrl-C).
    #[arg(long)]
    pub watch: bool,
    /// How often `--watch` asks.
    #[arg(long, value_name = "D", default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// With --watch: stop after N tables.
    #[arg(long, value_name = "N", requires = "watch")]
    pub count: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum SavepointCommand {
    /// Ask the running pipeline for a savepoint (through `<state.dir>/control.sock`)
    /// and print `Savepoint completed. Path: <dir>` (the new savepoint).
    Trigger {
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// Create the savepoint in this directory, as a new child
        /// `savepoint-<pipeline>-<id>` (DIR is created if missing; any number
        /// of savepoints may go there). Default: `savepoint.dir` of the
        /// pipeline, else `<state.dir>/savepoints/sp-<id>`. Not inside the
        /// state directory, except under its `savepoints/`.
        #[arg(long, value_name = "DIR")]
        target: Option<PathBuf>,
        /// Stop-with-savepoint: the savepoint is the final checkpoint, sinks
        /// commit, and the pipeline exits.
        #[arg(long)]
        stop: bool,
        /// With --stop: advance event time to the end first, so every
        /// window fires and its result is committed with the savepoint.
        #[arg(long, requires = "stop")]
        drain: bool,
        /// Give up waiting for the answer after this long.
        #[arg(long, value_name = "D", default_value = "5m", value_parser = humantime::parse_duration)]
        timeout: Duration,
        /// Every instance of the cluster (`cluster.instances` of the file):
        /// each is checked first, then all take their savepoint at once,
        /// and the set is printed as `--restore` arguments. Reaches the
        /// instances running on this host (see docs/scaling.md).
        #[arg(long, conflicts_with = "instance")]
        all_instances: bool,
    },
    /// Delete a savepoint directory; refuses anything whose `_metadata` does not say savepoint.
    Dispose {
        /// The savepoint directory or its `_metadata` file.
        path: PathBuf,
    },
    /// List the savepoints in the pipeline's state directory and its
    /// `savepoint.dir` (and `--target DIR`).
    List {
        #[command(flatten)]
        pipeline: PipelineArgs,
        /// Also list the savepoints of this pipeline in DIR.
        #[arg(long, value_name = "DIR")]
        target: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// A savepoint (or checkpoint) directory or its `_metadata` file.
    pub savepoint: PathBuf,

    #[command(flatten)]
    pub options: RunOptions,
}

#[derive(Debug, Clone, Args)]
pub struct PipelineArgs {
    /// The pipeline YAML file.
    pub pipeline: PathBuf,

    /// Override a value by dotted path, e.g. `--set parallelism=4` or
    /// `--set sources.orders.rate_limit=100` (list items by index or name).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,

    /// Run (or address) instance I of a cluster of N (0 <= I < N), over the
    /// file's `cluster.index` and `cluster.instances`; see docs/scaling.md.
    #[arg(long, value_name = "I/N")]
    pub instance: Option<config::Instance>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub options: RunOptions,

    /// Resume from a checkpoint: `latest` (the newest complete one in the
    /// state directory, if any) or the path of a checkpoint or savepoint
    /// directory or its `_metadata` file. Given several times (one
    /// stop-with-savepoint of every instance of a cluster): a rescale of
    /// the cluster, see docs/scaling.md.
    #[arg(long, value_name = "latest|PATH")]
    pub restore: Vec<String>,
}

/// What `run` and `restore` share.
#[derive(Debug, Args)]
pub struct RunOptions {
    #[command(flatten)]
    pub pipeline: PipelineArgs,

    /// Run with this parallelism (same as `--set parallelism=N`). A restore
    /// may change it: key groups and source positions are dealt anew.
    #[arg(long, short = 'p', value_name = "N")]
    pub parallelism: Option<u32>,

    /// Don't show a progress bar (it is also off when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,

    /// Use the state directory even if another pipeline wrote it.
    #[arg(long)]
    pub force: bool,

    /// Restore even if the checkpoint or savepoint holds state of operators
    /// the pipeline no longer has; that state is dropped (and listed).
    #[arg(long)]
    pub allow_non_restored_state: bool,

    /// Serve `/metrics`, `/healthz` and `/ready` over HTTP on IP:PORT
    /// (instead of the pipeline's `metrics.address`, if any).
    #[arg(long, value_name = "IP:PORT", value_parser = config::parse_metrics_address)]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// An error the user must fix in their input (exit 2), as opposed to a
/// failure while running (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(String);

pub fn exit_code_for(err: &anyhow::Error) -> ExitCode {
    if err.downcast_ref::<ConfigErrors>().is_some() || err.downcast_ref::<UsageError>().is_some() {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    }
}

pub fn init_logging(cli: &Cli) {
    use tracing_subscriber::EnvFilter;
    let filter = match EnvFilter::try_from_default_env() {
        Ok(mut filter) => {
            // The HTTP client crates log each request's URL at debug, an
            // endpoint's `user:password@` with it: they stay at info unless
            // RUST_LOG names them.
            let asked = std::env::var("RUST_LOG").unwrap_or_default();
            for client in ["hyper", "hyper_util", "reqwest"] {
                if !asked.split(',').any(|d| d.split('=').next().is_some_and(|t| t.trim().starts_with(client))) {
                    if let Ok(directive) = format!("{client}=info").parse() {
                        filter = filter.add_directive(directive);
                    }
                }
            }
            filter
        }
        Err(_) => EnvFilter::new(format!("weir={}", cli.log_level)),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(progress::LogWriter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate(args) => validate(args),
        Command::Run(args) => run_pipeline(args),
        Command::Inspect { path } => {
            let (report, valid) = inspect::inspect(&path).map_err(UsageError)?;
            print!("{report}");
            Ok(if valid { ExitCode::SUCCESS } else { ExitCode::from(2) })
        }
        Command::Restore(args) => run_pipeline(RunArgs { restore: vec![args.savepoint.display().to_string()], options: args.options }),
        Command::Savepoint(command) => savepoint_command(command),
        Command::Status(args) => status_command(args),
    }
}

fn status_command(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let p = load(&args.pipeline, &[])?;
    if p.checkpoint.is_none() {
        return Err(UsageError(format!(
            "pipeline `{}` has no `checkpoint:` section, so it has no control socket to ask (its state directory holds it)",
            p.name
        ))
        .into());
    }
    let layout = crate::checkpoint::layout::Layout::new(&p.state.dir);
    let ask = || savepoint::status(&layout, &p.name, Duration::from_secs(10)).map_err(|e| anyhow::anyhow!("{e}"));
    let first = ask()?;
    if !args.watch {
        print!("{}", live::table(&first));
        return Ok(ExitCode::SUCCESS);
    }
    // On a terminal each table replaces the last; elsewhere they follow each other.
    let clear = if std::io::stdout().is_terminal() { "\x1b[H\x1b[2J" } else { "" };
    let mut shown = 0u64;
    let mut next = Some(first);
    while let Some(status) = next.take() {
        if shown > 0 && clear.is_empty() {
            println!();
        }
        print!("{clear}{}", live::table(&status));
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        shown += 1;
        if args.count.is_some_and(|n| shown >= n) {
            break;
        }
        std::thread::sleep(args.interval);
        match ask() {
            Ok(s) => next = Some(s),
            Err(_) => println!("\nPipeline `{}` is no longer running.", p.name),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn savepoint_command(command: SavepointCommand) -> anyhow::Result<ExitCode> {
    let to_anyhow = |e: savepoint::SavepointError| match e {
        savepoint::SavepointError::Refused(m) => anyhow::Error::from(UsageError(m)),
        savepoint::SavepointError::Failed(m) => anyhow::anyhow!(m),
    };
    match command {
        SavepointCommand::Trigger { pipeline, target, stop, drain, timeout, all_instances } => {
            let end = match (stop, drain) {
                (false, _) => savepoint::Ending::KeepRunning,
                (true, false) => savepoint::Ending::Stop,
                (true, true) => savepoint::Ending::StopAndDrain,
            };
            if all_instances {
                return trigger_all_instances(&pipeline, target, end, timeout);
            }
            let p = checkpointed(&pipeline)?;
            let layout = crate::checkpoint::layout::Layout::new(&p.state.dir);
            let from_pipeline = target.is_none() && p.savepoint_dir.is_some();
            let parent = target.or_else(|| p.savepoint_dir.clone());
            let path = savepoint::trigger(&layout, &p.name, parent.as_deref(), end, timeout).map_err(|e| match e {
                // Say where a target nobody typed came from.
                savepoint::SavepointError::Refused(m) if from_pipeline => {
                    to_anyhow(savepoint::SavepointError::Refused(format!("savepoint.dir of {}: {m}", pipeline.pipeline.display())))
                }
                e => to_anyhow(e),
            })?;
            println!("Savepoint completed. Path: {}", path.display());
        }
        SavepointCommand::Dispose { path } => {
            let dir = savepoint::dispose(&path).map_err(to_anyhow)?;
            println!("Savepoint disposed: {}", dir.display());
        }
        SavepointCommand::List { pipeline, target } => {
            let p = checkpointed(&pipeline)?;
            let parents: Vec<PathBuf> = p.savepoint_dir.iter().chain(&target).cloned().collect();
            let layout = crate::checkpoint::layout::Layout::new(&p.state.dir);
            let options = p.checkpoint.as_ref().and_then(|c| c.storage.as_ref()).map(|s| s.options.clone()).unwrap_or_default();
            print!("{}", savepoint::list(&layout, &p.name, &parents, &options).map_err(to_anyhow)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `weir savepoint trigger P --all-instances`: every instance checked, then
/// every savepoint at once; the set on stdout, or which instances failed.
fn trigger_all_instances(
    args: &PipelineArgs,
    target: Option<PathBuf>,
    end: savepoint::Ending,
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    let file = args.pipeline.display().to_string();
    let whole = checkpointed(args)?;
    let n = whole.cluster.instances;
    if n < 2 {
        return Err(UsageError(format!(
            "--all-instances: pipeline `{}` is not a cluster (`cluster.instances` is {n}); trigger it without --all-instances, or say how many instances run with `--set cluster.instances=N`",
            whole.name
        ))
        .into());
    }
    let mut members = Vec::new();
    for index in 0..n {
        let one = PipelineArgs { instance: Some(config::Instance { index: index.into(), instances: n.into() }), ..args.clone() };
        let p = checkpointed(&one)?;
        let parent = target.clone().or_else(|| p.savepoint_dir.clone());
        members.push(savepoint_set::Member { index, layout: crate::checkpoint::layout::Layout::new(&p.state.dir), parent });
    }
    if let Err(problems) = savepoint_set::preflight(&members, n, &whole.name) {
        return Err(UsageError(format!(
            "--all-instances: not every instance of `{}` can take a savepoint now, so none was asked:\n  {}\nThis command reaches instances through their control sockets on this host; on other hosts run `weir savepoint trigger {file} --instance I/N{}` on each (see docs/scaling.md, \"Rescale N → M\")",
            whole.name,
            problems.join("\n  "),
            if end == savepoint::Ending::KeepRunning { "" } else { " --stop" },
        ))
        .into());
    }
    let taken = savepoint_set::trigger_all(&members, &whole.name, end, timeout);
    let mut paths = Vec::new();
    for (m, t) in members.iter().zip(&taken) {
        match t {
            savepoint_set::Taken::Done(path) => {
                println!("Instance {}/{n}: Savepoint completed. Path: {}", m.index, path.display());
                paths.push(path.clone());
            }
            savepoint_set::Taken::Failed(why) => eprintln!("Instance {}/{n}: savepoint failed: {why}", m.index),
        }
    }
    if paths.len() < members.len() {
        return Err(anyhow::anyhow!(savepoint_set::partial_failure(&taken, n, end, &file)));
    }
    println!("Savepoint set: {}", savepoint_set::restore_args(&paths));
    Ok(ExitCode::SUCCESS)
}

/// Load a pipeline that has a `checkpoint:` section (only those take savepoints).
fn checkpointed(args: &PipelineArgs) -> anyhow::Result<config::Pipeline> {
    let p = load(args, &[])?;
    if p.checkpoint.is_none() {
        return Err(UsageError(format!("pipeline `{}` has no `checkpoint:` section, so it takes no savepoints", p.name)).into());
    }
    Ok(p)
}

fn load(args: &PipelineArgs, extra: &[String]) -> anyhow::Result<config::Pipeline> {
    let mut overrides = args.overrides.clone();
    overrides.extend_from_slice(extra);
    let pipeline = config::load_file_as(&args.pipeline, &overrides, args.instance)?;
    // Instance I of N: its own prefix, and hash edges through Kafka.
    Ok(crate::plan::cluster::lay_out(pipeline).map_err(UsageError)?)
}

fn validate(args: PipelineArgs) -> anyhow::Result<ExitCode> {
    let p = load(&args, &[])?;
    let ops = p.nodes.len();
    let c = &p.cluster;
    let cluster = match p.nodes.iter().filter(|n| n.name.ends_with(crate::plan::cluster::RECEIVE_SUFFIX)).count() {
        _ if !c.is_cluster() => String::new(),
        topics => format!(", instance {} of {}, {topics} repartition topics", c.index, c.instances),
    };
    println!("{}: pipeline `{}` is valid ({ops} nodes, parallelism {}{cluster}).", args.pipeline.display(), p.name, p.parallelism);
    Ok(ExitCode::SUCCESS)
}

fn run_pipeline(args: RunArgs) -> anyhow::Result<ExitCode> {
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
    let restore = match args.restore.as_slice() {
        [] => None,
        [r] if r == "latest" => Some(RestoreFrom::Latest),
        [path] => Some(RestoreFrom::Path(path.into())),
        set if set.iter().any(|r| r == "latest") => {
            return Err(UsageError("--restore latest cannot be part of a savepoint set: give one path per old instance".into()).into())
        }
        set => Some(RestoreFrom::Set(set.iter().map(PathBuf::from).collect())),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the tokio runtime")?;
    // Before anything that can take long (the lock, loading a checkpoint,
    // rebuilding state, opening connectors): a signal from here on stops
    // the run, and a second one exits at once.
    // `savepoint.on_sigterm`: SIGTERM stops with a savepoint instead.
    let on_sigterm = match (pipeline.savepoint_on_sigterm, &pipeline.savepoint_dir) {
        (false, _) => None,
        (true, Some(d)) if d.to_str().is_some_and(crate::checkpoint::remote::is_url) => Some(Some(d.clone())),
        (true, Some(d)) => Some(Some(std::path::absolute(d).with_context(|| format!("savepoint.dir {}", d.display()))?)),
        (true, None) => Some(None),
    };
    let stop = rt.block_on(async { Signals::install() }).context("installing the SIGINT and SIGTERM handlers")?.listen(&rt, on_sigterm);
    // With checkpoints, the state directory is locked first (before any
    // connector is opened) and stays locked until this function returns,
    // after the runtime and everything on it is gone.
    // An instance never starts on the checkpoints of another cluster shape.
    crate::restore::cluster::check_prefix(&pipeline).map_err(UsageError)?;
    let (start, _lock) = match (&pipeline.checkpoint, &restore) {
        (Some(_), _) => {
            let policy =
                restore::RestorePolicy { force: args.options.force, allow_non_restored_state: args.options.allow_non_restored_state };
            let prepared = restore::prepare(&pipeline, restore.as_ref(), policy).map_err(|e| match e.is_refusal() {
                true => anyhow::Error::from(UsageError(e.to_string())),
                false => anyhow::anyhow!("{e}"),
            })?;
            if pipeline.cluster.is_cluster() {
                // Before the plan: its repartition sends and receives carry it.
                let generation = prepared.start.cluster_generation;
                tracing::info!(generation = %format!("{generation:016x}"), "Cluster generation of the repartition producers.");
                crate::plan::cluster::set_generation(&mut pipeline, generation);
            }
            (Some(prepared.start), Some((prepared.lock, prepared.lease)))
        }
        (None, Some(_)) => {
            return Err(UsageError("--restore needs checkpointing: add a `checkpoint:` section to the pipeline".into()).into())
        }
        (None, None) => (None, None),
    };
    let (keep, storage_options) = (
        pipeline.savepoint_on_sigterm_keep,
        pipeline.checkpoint.as_ref().and_then(|c| c.storage.as_ref()).map(|s| s.options.clone()).unwrap_or_default(),
    );
    let plan = Plan::new(pipeline);
    let name = plan.pipeline.name.clone();
    let plan_name = name.clone();
    let asked = stop.clone();
    let outcome = rt.block_on(async move {
        let mut engine = Engine::build(&plan, start).context("building the pipeline")?;
        let server = match metrics_listener {
            Some(l) => Some(http::MetricsServer::start(l, engine.exported()).context("starting the metrics endpoint")?),
            None => None,
        };
        // Without it no savepoint could be taken: a failure to start.
        let control = match engine.control() {
            Some((path, commands, status)) => Some(
                crate::serve::control::ControlServer::start(&path, commands, status)
                    .await
                    .with_context(|| format!("pipeline `{name}` failed"))?,
            ),
            None => None,
        };
        let metrics = engine.metrics();
        let show = !args.options.no_progress && std::io::stderr().is_terminal();
        if show {
            engine.quiet_checkpoints();
        }
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
    })?;
    let _ = outcome == Outcome::Finished;
    if let Some(taken) = asked.savepoint_taken() {
        retire_sigterm_savepoints(&taken, &plan_name, keep, &storage_options);
    }
    if let Some(why) = asked.savepoint_failure() {
        // The run stopped (with a final checkpoint), but not as asked.
        return Err(anyhow::anyhow!("savepoint.on_sigterm: the savepoint on SIGTERM failed: {why}"));
    }
    Ok(ExitCode::SUCCESS)
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

//! The command line: the only place with anyhow, indicatif and exit codes.

mod ending;
mod inspect;
mod live;
mod progress;
mod recent_log;
mod restart;
mod run;
mod savepoint;
mod savepoint_retention;
mod savepoint_set;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::config::{self, ConfigErrors};

/// weir: run stateful stream pipelines from a YAML file.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log level (error, warn, info, debug, trace); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info", value_name = "LEVEL")]
    pub log_level: String,

    /// Log lines as text (default) or as JSON, one object per line (for
    /// log collectors: `timestamp`, `level`, `message` and the fields).
    #[arg(long, global = true, default_value = "text", value_name = "FORMAT")]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckpointLogArg {
    Auto,
    Each,
    Minute,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a pipeline until its input ends or it is stopped (Ctrl-C, SIGTERM).
    Run(RunArgs),
    /// Check a pipeline file and report every problem with file:line:col.
    Validate(PipelineArgs),
    /// Show a checkpoint (directory or `_metadata`) or every checkpoint of a
    /// state directory: bundles, subtasks, files, sizes, and whether it
    /// validates (exit 2 if not; a checkpoint the run did not finish is
    /// listed as such, not as damaged).
    Inspect {
        /// A checkpoint directory, its `_metadata` file, a state directory,
        /// or a pipeline file (its state directory or checkpoint storage).
        path: PathBuf,
    },
    /// Run a pipeline from a savepoint (same as `weir run PIPELINE --restore SAVEPOINT`).
    Restore(RestoreArgs),
    /// Take, list and dispose of savepoints.
    #[command(subcommand)]
    Savepoint(SavepointCommand),
    /// Ask the running pipeline (through `<state.dir>/control.sock`) how it
    /// is doing: state, uptime, records/s in and out per operator,
    /// watermarks, backpressure and the last checkpoint. Give the pipeline
    /// file or its state directory (from any working directory).
    Status(StatusArgs),
    /// Show what `weir run --restore` would do, writing nothing: the
    /// checkpoint or savepoint it restores, and for each node whether its
    /// state is kept, starts new, is rescaled or dropped. Exit 0 when the
    /// run would start, 2 when it would be refused (with the reason).
    Plan(PlanArgs),
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// As for `run`: `latest`, or a checkpoint or savepoint path (several
    /// for a savepoint set); none plans a start from the beginning.
    #[arg(long, value_name = "latest|PATH")]
    pub restore: Vec<String>,
    /// As for `run`.
    #[arg(long, short = 'p', value_name = "N")]
    pub parallelism: Option<u32>,
    /// As for `run`.
    #[arg(long)]
    pub force: bool,
    /// As for `run`.
    #[arg(long)]
    pub allow_non_restored_state: bool,
    /// `text`, or `json` for scripts.
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    pub format: PlanFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    Text,
    Json,
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
    /// Print the status document as JSON (the one `GET /status` on the
    /// metrics address serves), one line per answer.
    #[arg(long)]
    pub json: bool,
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

    /// How completed checkpoints are logged: `each` (an INFO line per
    /// checkpoint), `minute` (an INFO line per minute with the counts and
    /// the slowest; each checkpoint at DEBUG) or `auto`: `minute` when
    /// stderr is not a terminal, else `each` (at DEBUG under a progress
    /// bar, which shows them). Savepoints, slow and failed checkpoints
    /// always have a line of their own.
    #[arg(long, value_name = "WHEN", default_value = "auto", env = "WEIR_CHECKPOINT_LOG")]
    pub checkpoint_log: CheckpointLogArg,

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
    ExitCode::from(exit_status(err))
}

fn exit_status(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<ConfigErrors>().is_some() || err.downcast_ref::<UsageError>().is_some() {
        2
    } else {
        1
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
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(progress::LogWriter).with_target(false);
    // Every warning and error is also kept for the status document.
    let _ = match cli.log_format {
        LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).finish().with(recent_log::RecentLayer).try_init(),
        // The event's fields at the top level, next to `message`.
        LogFormat::Json => {
            fmt.json().flatten_event(true).with_current_span(false).with_span_list(false).finish().with(recent_log::RecentLayer).try_init()
        }
    };
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate(args) => validate(args),
        Command::Run(args) => run::run_pipeline(args),
        Command::Inspect { path } => {
            // A pipeline file stands for where its checkpoints are.
            let path = match path.extension().and_then(|e| e.to_str()) {
                Some("yaml" | "yml") if path.is_file() => {
                    let p = load(&PipelineArgs { pipeline: path, overrides: Vec::new(), instance: None }, &[])?;
                    match p.checkpoint.and_then(|c| c.storage) {
                        Some(storage) => PathBuf::from(storage.url),
                        None => p.state.dir,
                    }
                }
                _ => path,
            };
            let (report, valid) = inspect::inspect(&path).map_err(UsageError)?;
            print!("{report}");
            Ok(if valid { ExitCode::SUCCESS } else { ExitCode::from(2) })
        }
        Command::Restore(args) if is_yaml_file(&args.savepoint) && !is_yaml_file(&args.options.pipeline.pipeline) => {
            Err(UsageError(format!(
                "`weir restore` takes the savepoint first, then the pipeline: weir restore {} {}",
                args.options.pipeline.pipeline.display(),
                args.savepoint.display()
            ))
            .into())
        }
        Command::Restore(args) => run::run_pipeline(RunArgs { restore: vec![args.savepoint.display().to_string()], options: args.options }),
        Command::Savepoint(command) => savepoint_command(command),
        Command::Status(args) => status_command(args),
        Command::Plan(args) => plan_command(args),
    }
}

/// `weir plan`: the restore decision of `run`, made by the same code.
fn plan_command(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let extra: Vec<String> = args.parallelism.map(|n| format!("parallelism={n}")).into_iter().collect();
    let pipeline = load(&args.pipeline, &extra)?;
    crate::restore::cluster::check_prefix(&pipeline).map_err(UsageError)?;
    let restore = run::restore_from(&args.restore)?;
    let policy = crate::restore::RestorePolicy { force: args.force, allow_non_restored_state: args.allow_non_restored_state };
    match crate::restore::plan::plan(&pipeline, restore.as_ref(), policy) {
        Ok(plan) => {
            match args.format {
                PlanFormat::Text => print!("{plan}"),
                PlanFormat::Json => {
                    println!("{}", serde_json::to_string_pretty(&plan).map_err(|e| anyhow::anyhow!("the plan as JSON: {e}"))?)
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) if e.is_refusal() => {
            match args.format {
                PlanFormat::Text => println!("Refused: {e}"),
                PlanFormat::Json => println!("{}", serde_json::json!({ "pipeline": pipeline.name, "refused": e.to_string() })),
            }
            Ok(ExitCode::from(2))
        }
        Err(e) => Err(anyhow::Error::new(e)),
    }
}

/// A path to print for the user to copy: absolute, unless it is a URL.
fn absolute(path: &Path) -> PathBuf {
    match path.to_str().is_some_and(crate::checkpoint::remote::is_url) {
        true => path.to_path_buf(),
        false => std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
    }
}

fn is_yaml_file(path: &Path) -> bool {
    path.is_file() && path.extension().and_then(|e| e.to_str()).is_some_and(|e| e == "yaml" || e == "yml")
}

fn status_command(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let (layout, name) = match args.pipeline.pipeline.is_dir() {
        // A state directory: all a running pipeline needs to be found, from
        // any working directory (its inputs need not resolve from here).
        true => {
            let layout = crate::checkpoint::layout::Layout::new(&args.pipeline.pipeline);
            let name = std::fs::read_to_string(layout.pipeline_file()).map(|n| n.trim().to_string()).unwrap_or_default();
            (layout, name)
        }
        false => {
            // With or without checkpoints: a run opens its control socket
            // in its state directory.
            let p = load(&args.pipeline, &[])?;
            (crate::checkpoint::layout::Layout::new(&p.state.dir), p.name)
        }
    };
    let p = name;
    let ask = || savepoint::status(&layout, &p, Duration::from_secs(10)).map_err(|e| anyhow::anyhow!("{e}"));
    let first = ask()?;
    let show = |status: &crate::runtime::control::Status| match args.json {
        true => {
            let document = crate::runtime::control::Response::Status { ok: true, status: status.clone() };
            format!("{}\n", serde_json::to_string(&document).unwrap_or_default())
        }
        false => live::table(status),
    };
    if !args.watch {
        print!("{}", show(&first));
        return Ok(ExitCode::SUCCESS);
    }
    // On a terminal each table replaces the last; elsewhere they follow each other.
    let clear = if std::io::stdout().is_terminal() && !args.json { "\x1b[H\x1b[2J" } else { "" };
    let mut shown = 0u64;
    let mut next = Some(first);
    while let Some(status) = next.take() {
        if shown > 0 && clear.is_empty() && !args.json {
            println!();
        }
        print!("{clear}{}", show(&status));
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        shown += 1;
        if args.count.is_some_and(|n| shown >= n) {
            break;
        }
        std::thread::sleep(args.interval);
        match ask() {
            Ok(s) => next = Some(s),
            Err(_) => println!("\nPipeline `{p}` is no longer running."),
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
            println!("Savepoint completed. Path: {}", absolute(&path).display());
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
                println!("Instance {}/{n}: Savepoint completed. Path: {}", m.index, absolute(path).display());
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

//! Builds the tasks of a plan: the one place that turns plan nodes into
//! operator instances, state handles and channels.

use std::fs;
use std::sync::Arc;

use std::num::NonZeroUsize;

use tokio::sync::{mpsc, watch};

use super::chain::{Chain, ChainOp};
use super::channel::{self, Receiver};
use super::gauges::SubtaskGauges;
use super::input::Inputs;
use super::metrics::NodeMetrics;
use super::output::{Output, Route};
use super::rendezvous::Rendezvous;
use super::task::{OperatorCheckpointing, OperatorTask, Restored, SourceCheckpointing, SourceTask, SourceTiming, TaskMeters};
use super::task_checkpoint::{Control, Event, TaskCheckpointing};
use crate::checkpoint::layout::Layout;
use crate::checkpoint::manifest::Kind;
use crate::checkpoint::manifest::TaskId;
use crate::checkpoint::task_snapshot::ChannelId;
use crate::checkpoint::BundleId;
use crate::checkpoint::CheckpointId;
use crate::config::{Alignment, Backend, NodeId, NodeKind, OnError, SinkSpec, SourceKind, SourceSpec};
use crate::connectors::blackhole::Blackhole;
use crate::connectors::datagen::Datagen;
use crate::connectors::file::sink::FileSink;
use crate::connectors::file::source::{splits_for, FileSource};
#[cfg(feature = "kafka")]
use crate::connectors::kafka::{sink::default_transaction_timeout, sink::KafkaSink, source::KafkaSource};
use crate::connectors::source::{Extent, Source};
use crate::connectors::stdout::StdoutSink;
use crate::format::json::JsonParser;
use crate::operators::aggregate::Aggregate;
use crate::operators::dead_letter::{commit_operator_name, DeadLetters};
use crate::operators::dedup::Dedup;
use crate::operators::filter::Filter;
use crate::operators::map::Map;
use crate::operators::{DeadLetter, Operator, OperatorMetrics, SubtaskInfo};
use crate::plan::{Edge, Plan};
use crate::protocol::barrier::{AlignmentMode, BarrierTracker};
use crate::restore::RestoredState;
use crate::state::memory::MemoryState;
use crate::state::rocks::native::{self, Uploader};
use crate::state::rocks::{self, BundleDb, RocksState};
use crate::state::KeyedState;
use crate::types::Millis;

/// Messages a channel holds before the sender waits (backpressure).
const CHANNEL_CAPACITY: NonZeroUsize = NonZeroUsize::new(8).unwrap();

#[derive(Debug, thiserror::Error)]
#[error("cannot start `{node}`: {reason}")]
pub struct BuildError {
    pub node: String,
    pub reason: String,
}

pub enum Task {
    Source(SourceTask),
    Operator(OperatorTask),
}

pub struct Built {
    pub tasks: Vec<(String, Task)>,
    pub metrics: Vec<NodeMetrics>,
    /// Total bounded input, if every source is bounded and of one unit.
    pub extent: Option<Extent>,
    /// Trigger channels of the source tasks (checkpointing only).
    pub controls: Vec<mpsc::UnboundedSender<Control>>,
    /// The tasks of each bundle.
    pub bundles: Vec<Vec<TaskId>>,
    /// Each task's name in the log (`head[subtask]`).
    pub task_names: std::collections::BTreeMap<TaskId, String>,
    /// Native (incremental) RocksDB checkpoints: each bundle's rendezvous.
    pub rendezvous: Vec<Arc<Rendezvous>>,
    /// Times the restore (None: a fresh start).
    pub restore_clock: Option<Arc<super::restore_clock::RestoreClock>>,
    /// For the metrics endpoint.
    pub details: super::metrics::Details,
}

/// The channels between tasks and the checkpoint driver.
pub struct CheckpointWiring {
    pub layout: Layout,
    pub events: mpsc::UnboundedSender<Event>,
    pub completed: watch::Receiver<u64>,
    pub done: watch::Receiver<bool>,
}

pub fn build(
    plan: &Plan,
    stop: &watch::Receiver<bool>,
    wiring: Option<&CheckpointWiring>,
    mut restored: Option<&mut RestoredState>,
) -> Result<Built, BuildError> {
    let p = plan.pipeline.parallelism;
    let mut metrics: Vec<NodeMetrics> =
        plan.pipeline.nodes.iter().map(|n| NodeMetrics { input: n.input, ..NodeMetrics::new(&n.name, kind_name(&n.kind), p) }).collect();
    for (m, n) in metrics.iter_mut().zip(&plan.pipeline.nodes) {
        // The sinks that count what they made durable and visible.
        m.commits = matches!(n.kind, NodeKind::Sink(SinkSpec::File { .. } | SinkSpec::Kafka(_)));
    }
    // Operators chained into one task share its loop, so its time.
    for chain in &plan.chains {
        for i in 0..p as usize {
            let times = metrics[chain[0]].gauges[i].times.clone();
            for &id in &chain[1..] {
                metrics[id].gauges[i] = Arc::new(SubtaskGauges::sharing(times.clone()));
            }
        }
    }
    let mut dead_letters = DeadLetterWiring { letters: DeadLetters::default(), transactional: wiring.is_some(), commits: Vec::new() };

    // Channels into every non-source chain head: rx[chain][subtask] holds
    // one receiver per upstream sender feeding that subtask.
    let mut routes: Vec<Vec<Vec<Route>>> = plan.chains.iter().map(|_| (0..p).map(|_| Vec::new()).collect()).collect();
    let mut receivers: Vec<Vec<Vec<(Receiver, ChannelId)>>> = plan.chains.iter().map(|_| (0..p).map(|_| Vec::new()).collect()).collect();
    for (c, chain) in plan.chains.iter().enumerate() {
        let head = chain[0];
        let Some(input) = plan.pipeline.nodes[head].input else { continue };
        let up = plan.chain_of(input);
        let partitioning = plan.partitioning(head).expect("non-source has an edge");
        // The input is the tail of its chain: a node with a channel consumer has no chained one.
        let id = |from: usize, to: usize| ChannelId {
            producer: plan.pipeline.nodes[input].name.clone(),
            producer_subtask: from as u16,
            consumer: plan.pipeline.nodes[head].name.clone(),
            consumer_subtask: to as u16,
            partitioning: partitioning.clone(),
        };
        match plan.edges[head].as_ref().expect("non-source has an edge") {
            Edge::Forward => {
                for i in 0..p as usize {
                    let (tx, rx) = channel::channel(CHANNEL_CAPACITY);
                    routes[up][i].push(Route::forward(tx, id(i, i)));
                    receivers[c][i].push((rx, id(i, i)));
                }
            }
            Edge::Hash { key } => {
                // Every upstream subtask gets a channel to every downstream one.
                for (from, upstream) in routes[up].iter_mut().enumerate() {
                    let (mut txs, mut ids) = (Vec::new(), Vec::new());
                    for (to, downstream) in receivers[c].iter_mut().enumerate() {
                        let (tx, rx) = channel::channel(CHANNEL_CAPACITY);
                        txs.push(tx);
                        ids.push(id(from, to));
                        downstream.push((rx, id(from, to)));
                    }
                    upstream.push(Route::hash(txs, ids, key.clone(), plan.pipeline.max_parallelism, plan.pipeline.key_group_share()));
                }
            }
        }
    }

    let clock = restored.as_deref().map(|r| {
        let tasks = plan.chains.len() * p as usize;
        Arc::new(super::restore_clock::RestoreClock::new(r.id, r.started, tasks))
    });
    let mut backends = Backends::open(plan, restored.as_deref())?;
    let restored_parallelism = restored.as_deref().map(|r| r.parallelism);
    let rendezvous = backends.rendezvous(plan, wiring.is_some());
    let mut tasks = Vec::new();
    let mut extents = Vec::new();
    let mut details = super::metrics::Details::default();
    let mut controls = Vec::new();
    let bundle_size = plan.pipeline.bundle_size;
    let mut bundles: Vec<Vec<TaskId>> = vec![Vec::new(); plan.pipeline.bundles() as usize];
    let mut task_names = std::collections::BTreeMap::new();
    let alignment = plan.pipeline.checkpoint.as_ref().map(|c| match c.alignment {
        Alignment::Aligned => AlignmentMode::Aligned,
        Alignment::Unaligned => AlignmentMode::Unaligned,
        Alignment::AlignedTimeout(t) => AlignmentMode::AlignedTimeout(t),
        Alignment::AtLeastOnce => AlignmentMode::AtLeastOnce,
    });
    for (c, chain) in plan.chains.iter().enumerate().rev() {
        for i in (0..p).rev() {
            let mut output = Output::new(std::mem::take(&mut routes[c][i as usize]));
            let head = chain[0];
            let rest = if matches!(plan.pipeline.nodes[head].kind, NodeKind::Source(_)) { &chain[1..] } else { &chain[..] };
            let gauge = |id: usize| metrics[id].gauges[i as usize].clone();
            let meters = TaskMeters {
                times: gauge(head).times.clone(),
                source: matches!(plan.pipeline.nodes[head].kind, NodeKind::Source(_)).then(|| gauge(head)),
                ops: rest.iter().map(|&id| gauge(id)).collect(),
            };
            let tail = *chain.last().expect("a chain has a node");
            let _ = gauge(tail).outputs.set(output.probes());
            output.measure(meters.times.clone());
            let src = match &plan.pipeline.nodes[head].kind {
                NodeKind::Source(spec) => Some(source(plan, head, spec, i, &mut dead_letters)?),
                _ => None,
            };
            let mut ops = rest
                .iter()
                .map(|&id| chain_op(plan, id, i, &metrics, &mut dead_letters, &backends, restored_parallelism))
                .collect::<Result<Vec<_>, _>>()?;
            // Dead-letter commits run last, after every writer of the task.
            ops.append(&mut dead_letters.commits);
            let task_name = format!("{}[{i}]", plan.pipeline.nodes[head].name);
            let task_id = TaskId { chain: c as u32, subtask: i };
            task_names.insert(task_id, task_name.clone());
            let bundle = (i / bundle_size) as BundleId;
            bundles[bundle as usize].push(task_id);
            let ck = wiring.map(|w| TaskCheckpointing {
                task: task_id,
                bundle,
                layout: w.layout.clone(),
                events: w.events.clone(),
                completed: w.completed.clone(),
                done: w.done.clone(),
                notified: 0,
            });
            let task_restored = restored.as_deref_mut().map(|r| {
                let nodes: Vec<String> = chain.iter().map(|&id| plan.pipeline.nodes[id].name.clone()).collect();
                // Run after the chain's tail: their state is restored, but
                // the tail's output channels stay the tail's.
                let commits: Vec<String> = ops.iter().map(|op| op.info.operator.clone()).filter(|n| !nodes.contains(n)).collect();
                let source = matches!(plan.pipeline.nodes[head].kind, NodeKind::Source(_)).then(|| nodes[0].as_str());
                let (snapshot, positions) = r.for_task(task_id, &nodes, &commits, source);
                Restored { id: r.id, snapshot, positions, clock: clock.clone().expect("a clock when restoring") }
            });
            let task = match &plan.pipeline.nodes[head].kind {
                NodeKind::Source(spec) => {
                    let source = src.expect("built above");
                    extents.push(source.extent());
                    if let Some(e) = source.extent() {
                        details.source_extents.push((plan.pipeline.nodes[head].name.clone(), i, e));
                    }
                    if let Some(stats) = source.client_stats() {
                        details.kafka_sources.push((plan.pipeline.nodes[head].name.clone(), i, stats));
                    }
                    Task::Source(SourceTask {
                        source,
                        info: info(plan, head, i),
                        metrics: metrics[head].subtasks[i as usize].clone(),
                        timing: SourceTiming {
                            rate_limit: spec.rate_limit.map(|r| r / p as f64),
                            batch_size: spec.batch_size,
                            max_out_of_orderness: spec
                                .event_time
                                .as_ref()
                                .map(|e| Millis::try_from(e.max_out_of_orderness.as_millis()).unwrap_or(Millis::MAX)),
                            idle_timeout: spec.event_time.as_ref().and_then(|e| e.idle_timeout),
                        },
                        chain: Chain::new(ops),
                        output,
                        meters,
                        stop: stop.clone(),
                        checkpointing: ck.map(|ck| {
                            let (tx, control) = mpsc::unbounded_channel();
                            controls.push(tx);
                            SourceCheckpointing { ck, control, unaligned: alignment == Some(AlignmentMode::Unaligned) }
                        }),
                        restored: task_restored,
                    })
                }
                _ => {
                    let inputs = Inputs::new(std::mem::take(&mut receivers[c][i as usize]));
                    let _ = metrics[head].gauges[i as usize].inputs.set(inputs.probes());
                    let member = rendezvous.get(bundle as usize).filter(|_| chain_is_native(plan, rest, &backends));
                    let checkpointing = ck.map(|ck| OperatorCheckpointing {
                        ck,
                        barriers: BarrierTracker::new(alignment.expect("checkpointing has an alignment"), inputs.len()),
                        native: member.map(|rv| (rv.clone(), rv.ticket())),
                        kind: (0, Kind::Checkpoint),
                    });
                    Task::Operator(OperatorTask { inputs, chain: Chain::new(ops), output, meters, checkpointing, restored: task_restored })
                }
            };
            tasks.push((task_name, task));
        }
    }
    for b in &mut bundles {
        b.sort();
    }
    details.state_dbs = backends.dbs().iter().map(Arc::downgrade).collect();
    if !details.state_dbs.is_empty() {
        details.column_families = plan.pipeline.nodes.iter().filter(|n| uses_rocksdb(&n.kind)).map(|n| n.name.clone()).collect();
    }
    details.transactional_kafka_sinks = plan
        .pipeline
        .nodes
        .iter()
        .filter(|n| matches!(&n.kind, NodeKind::Sink(SinkSpec::Kafka(k)) if k.delivery == crate::config::Delivery::ExactlyOnce))
        .map(|n| n.name.clone())
        .collect();
    details.file_sinks =
        plan.pipeline.nodes.iter().filter(|n| matches!(n.kind, NodeKind::Sink(SinkSpec::File { .. }))).map(|n| n.name.clone()).collect();
    details.committing_sinks = metrics.iter().filter(|m| m.commits).map(|m| m.name.clone()).collect();
    Ok(Built { tasks, metrics, extent: total_extent(&extents), controls, bundles, task_names, rendezvous, restore_clock: clock, details })
}

fn total_extent(extents: &[Option<Extent>]) -> Option<Extent> {
    let mut bytes = 0;
    let mut rows = 0;
    for e in extents {
        match e {
            Some(Extent::Bytes(b)) => bytes += b,
            Some(Extent::Rows(r)) => rows += r,
            None => return None,
        }
    }
    match (bytes, rows) {
        (b, 0) => Some(Extent::Bytes(b)),
        (0, r) => Some(Extent::Rows(r)),
        _ => None,
    }
}

fn kind_name(kind: &NodeKind) -> &'static str {
    match kind {
        NodeKind::Source(_) => "source",
        NodeKind::Dedup(_) => "dedup",
        NodeKind::Aggregate(_) => "aggregate",
        NodeKind::Filter(_) => "filter",
        NodeKind::Map(_) => "map",
        NodeKind::Sink(_) => "sink",
    }
}

fn info(plan: &Plan, id: NodeId, subtask: u16) -> SubtaskInfo {
    SubtaskInfo {
        operator: plan.pipeline.nodes[id].name.clone(),
        index: subtask,
        parallelism: plan.pipeline.parallelism,
        max_parallelism: plan.pipeline.max_parallelism,
    }
}

fn source(
    plan: &Plan,
    id: NodeId,
    spec: &SourceSpec,
    subtask: u16,
    dead_letters: &mut DeadLetterWiring,
) -> Result<Box<dyn Source>, BuildError> {
    let node = &plan.pipeline.nodes[id];
    let err = |reason: String| BuildError { node: node.name.clone(), reason };
    let event_field = spec.event_time.as_ref().map(|e| e.field.clone());
    match &spec.kind {
        SourceKind::File { files } => {
            let sized = files
                .iter()
                .map(|f| fs::metadata(f).map(|m| (f.clone(), m.len())).map_err(|e| err(format!("{}: {e}", f.display()))))
                .collect::<Result<Vec<_>, _>>()?;
            let dead_letter = match &spec.on_error {
                OnError::DeadLetter(path) => Some(dead_letters.open(plan, id, subtask, path)?),
                _ => None,
            };
            let parser = JsonParser::new(plan.projections[id].clone(), event_field)
                .with_extras(plan.extras[id].values.clone(), plan.extras[id].presence.clone());
            let splits = splits_for(&sized, plan.pipeline.parallelism, subtask, spec.event_time.is_some());
            Ok(Box::new(FileSource::new(
                &node.name,
                (subtask, plan.pipeline.parallelism),
                splits,
                parser,
                spec.on_error.clone(),
                dead_letter,
            )))
        }
        #[cfg(not(feature = "kafka"))]
        SourceKind::Kafka(_) => Err(err(crate::features::missing_reason(crate::features::Feature::Kafka))),
        #[cfg(feature = "kafka")]
        SourceKind::Kafka(k) => {
            let dead_letter = match &spec.on_error {
                OnError::DeadLetter(path) => Some(dead_letters.open(plan, id, subtask, path)?),
                _ => None,
            };
            // A repartition topic's records carry their event time (stamp.rs).
            let event_field = if k.message_timestamp || k.repartition.is_some() { None } else { event_field };
            let parser = JsonParser::new(plan.projections[id].clone(), event_field)
                .with_extras(plan.extras[id].values.clone(), plan.extras[id].presence.clone());
            let p = plan.pipeline.parallelism;
            let idle = spec.event_time.as_ref().and_then(|e| e.idle_timeout);
            let src = KafkaSource::open(&node.name, k, &plan.pipeline.name, subtask, p, parser, spec.on_error.clone(), dead_letter, idle)
                .map_err(err)?;
            Ok(Box::new(src))
        }
        SourceKind::Datagen(gen) => {
            let g =
                Datagen::new(gen.clone(), &plan.schemas[id], event_field.as_deref(), subtask, plan.pipeline.parallelism).map_err(err)?;
            Ok(Box::new(g))
        }
    }
}

/// Where the keyed state of each operator subtask lives.
enum Backends {
    Memory,
    /// One working DB per bundle, and what uploads its native checkpoints.
    RocksDb {
        dbs: Vec<Arc<BundleDb>>,
        uploaders: Vec<Option<Uploader>>,
        incremental: bool,
    },
}

impl Backends {
    /// Open the working DBs: empty, or rebuilt from the restored checkpoint
    /// when its bundles hold native RocksDB checkpoints.
    fn open(plan: &Plan, restored: Option<&RestoredState>) -> Result<Backends, BuildError> {
        let p = &plan.pipeline;
        let layout = Layout::new(&p.state.dir);
        let Backend::RocksDb(spec) = &p.state.backend else {
            native::remove_other_bundles(&layout.local_dir(), 0);
            return Ok(Backends::Memory);
        };
        native::remove_other_bundles(&layout.local_dir(), p.bundles() as BundleId);
        let options = rocks::RocksOptions {
            block_cache: spec.block_cache,
            write_buffer: spec.write_buffer,
            write_cache: usize::try_from(spec.write_cache).unwrap_or(usize::MAX),
            compression: spec.compression,
            ..rocks::RocksOptions::default()
        };
        let cfs: Vec<String> = p.nodes.iter().filter(|n| uses_rocksdb(&n.kind)).map(|n| n.name.clone()).collect();
        let mut dbs = Vec::new();
        let mut uploaders = Vec::new();
        for b in 0..p.bundles() as BundleId {
            let err = |e: crate::state::StateError| BuildError { node: format!("bundle {b}"), reason: e.to_string() };
            let local = layout.local_bundle_dir(b);
            let path = local.join("db");
            let native = restored.and_then(|r| r.native_files(b).map(|files| (r, files)));
            let (db, uploader) = match native {
                Some((r, files)) => {
                    let started = std::time::Instant::now();
                    let bundle_dir = r.dir.join(crate::checkpoint::layout::bundle_dir_name(b));
                    let shared = crate::checkpoint::validate::shared_dir_of(&r.dir);
                    let from =
                        native::NativeCheckpoint { id: r.id, bundle: b, files: &files, bundle_dir: &bundle_dir, shared_dir: &shared };
                    let (db, uploader, source) = native::restore(&from, &path, &cfs, &options).map_err(err)?;
                    tracing::info!(
                        bundle = b,
                        checkpoint = r.id,
                        from = if source == native::RestoreSource::Local { "local checkpoint" } else { "checkpoint files" },
                        ms = started.elapsed().as_millis() as u64,
                        "Rebuilt the bundle's RocksDB."
                    );
                    native::retain_local(&local, Some(r.id), CheckpointId::MAX);
                    (db, Some(uploader))
                }
                None => {
                    native::retain_local(&local, None, CheckpointId::MAX);
                    (BundleDb::create(&path, &cfs, &options).map_err(err)?, None)
                }
            };
            dbs.push(db);
            uploaders.push(uploader);
        }
        Ok(Backends::RocksDb { dbs, uploaders, incremental: spec.incremental })
    }

    /// The working DBs (none for memory state).
    fn dbs(&self) -> &[Arc<BundleDb>] {
        match self {
            Backends::RocksDb { dbs, .. } => dbs,
            Backends::Memory => &[],
        }
    }

    /// One rendezvous per bundle when checkpoints are native: RocksDB,
    /// `incremental`, aligned (or at-least-once) barriers.
    fn rendezvous(&mut self, plan: &Plan, checkpointing: bool) -> Vec<Arc<Rendezvous>> {
        let p = &plan.pipeline;
        let Backends::RocksDb { dbs, uploaders, incremental: true } = self else { return Vec::new() };
        let aligned = matches!(p.checkpoint.as_ref().map(|c| c.alignment), Some(Alignment::Aligned | Alignment::AtLeastOnce));
        if !checkpointing || !aligned {
            return Vec::new();
        }
        // Members: every subtask of a chain holding a keyed operator.
        let native_chains = plan.chains.iter().filter(|chain| chain.iter().any(|&id| uses_rocksdb(&p.nodes[id].kind))).count();
        let mut members = vec![0usize; dbs.len()];
        for i in 0..p.parallelism {
            members[(i / p.bundle_size) as usize] += native_chains;
        }
        dbs.iter()
            .zip(uploaders.iter_mut())
            .enumerate()
            .map(|(b, (db, up))| {
                let uploader = up.take().unwrap_or_else(|| Uploader::new(b as BundleId));
                Rendezvous::new(b as BundleId, db.clone(), members[b], uploader)
            })
            .collect()
    }

    fn state(&self, plan: &Plan, id: NodeId, subtask: u16, op: &dyn Operator) -> Result<Box<dyn KeyedState>, BuildError> {
        let p = &plan.pipeline;
        let node = &p.nodes[id];
        let key_groups = p.key_group_share().range(subtask, p.parallelism, p.max_parallelism);
        match self {
            Backends::RocksDb { dbs, .. } if uses_rocksdb(&node.kind) => {
                let db = dbs[(subtask / p.bundle_size) as usize].clone();
                let state = RocksState::new(db, &node.name, &op.tables(), key_groups)
                    .map_err(|e| BuildError { node: node.name.clone(), reason: e.to_string() })?;
                Ok(Box::new(state))
            }
            _ => Ok(Box::new(MemoryState::new(&op.tables(), key_groups))),
        }
    }
}

/// Whether the task running these chained nodes is a rendezvous member.
fn chain_is_native(plan: &Plan, nodes: &[NodeId], backends: &Backends) -> bool {
    matches!(backends, Backends::RocksDb { .. }) && nodes.iter().any(|&id| uses_rocksdb(&plan.pipeline.nodes[id].kind))
}

/// Keyed operators keep their state in RocksDB with `backend: rocksdb`;
/// sinks keep their few entries (staged part files) in memory.
fn uses_rocksdb(kind: &NodeKind) -> bool {
    matches!(kind, NodeKind::Dedup(_) | NodeKind::Aggregate(_))
}

fn chain_op(
    plan: &Plan,
    id: NodeId,
    subtask: u16,
    metrics: &[NodeMetrics],
    dead_letters: &mut DeadLetterWiring,
    backends: &Backends,
    restored_parallelism: Option<u16>,
) -> Result<ChainOp, BuildError> {
    let node = &plan.pipeline.nodes[id];
    let err = |reason: String| BuildError { node: node.name.clone(), reason };
    let input_schema = node.input.map(|i| plan.schemas[i].as_slice()).unwrap_or(&[]);
    let p = plan.pipeline.parallelism;
    let op: Box<dyn Operator> = match &node.kind {
        NodeKind::Source(_) => unreachable!("sources are task heads"),
        NodeKind::Dedup(spec) => Box::new(Dedup::new(spec, input_schema, plan.pipeline.has_event_time()).map_err(err)?),
        NodeKind::Aggregate(spec) => {
            let dead_letter = match &spec.dead_letter {
                Some(path) => Some(dead_letters.open(plan, id, subtask, path)?),
                None => None,
            };
            Box::new(Aggregate::new(spec, input_schema, dead_letter).map_err(err)?)
        }
        NodeKind::Filter(spec) => {
            let dead_letter = match &spec.on_error {
                OnError::DeadLetter(path) => Some(dead_letters.open(plan, id, subtask, path)?),
                _ => None,
            };
            Box::new(Filter::new(&node.name, spec, &plan.input_layout(id), dead_letter))
        }
        NodeKind::Map(spec) => {
            let dead_letter = match &spec.on_error {
                OnError::DeadLetter(path) => Some(dead_letters.open(plan, id, subtask, path)?),
                _ => None,
            };
            Box::new(Map::new(&node.name, spec, plan.projections[id].clone(), &plan.input_layout(id), &plan.extras[id], dead_letter))
        }
        NodeKind::Sink(SinkSpec::File { dir, max_file_bytes }) => {
            Box::new(FileSink::new(dir, *max_file_bytes, subtask, plan.pipeline.checkpoint.is_some()).map_err(|e| err(e.to_string()))?)
        }
        NodeKind::Sink(SinkSpec::Stdout) => Box::<StdoutSink>::default(),
        #[cfg(not(feature = "kafka"))]
        NodeKind::Sink(SinkSpec::Kafka(_)) => {
            let _ = restored_parallelism; // only the Kafka sink needs it
            return Err(err(crate::features::missing_reason(crate::features::Feature::Kafka)));
        }
        #[cfg(feature = "kafka")]
        NodeKind::Sink(SinkSpec::Kafka(k)) => {
            let key =
                k.key.iter().map(|f| input_schema.iter().position(|s| s == f).expect("validated: key field in input schema")).collect();
            let txn_timeout = match &plan.pipeline.checkpoint {
                Some(c) => default_transaction_timeout(c.interval, c.timeout),
                None => std::time::Duration::from_secs(60),
            };
            let dead_letter = match &k.on_error {
                OnError::DeadLetter(path) => Some(dead_letters.open(plan, id, subtask, path)?),
                _ => None,
            };
            let (name, pipeline) = (&node.name, &plan.pipeline.name);
            let sink = KafkaSink::open(k, pipeline, name, subtask, p, restored_parallelism, key, txn_timeout, dead_letter).map_err(err)?;
            Box::new(sink.with_checkpoints(plan.pipeline.checkpoint.is_some()))
        }
        NodeKind::Sink(SinkSpec::Blackhole { rate_limit }) => Box::new(Blackhole::new(rate_limit.map(|r| r / p as f64))),
    };
    let state = backends.state(plan, id, subtask, op.as_ref())?;
    let m: Arc<OperatorMetrics> = metrics[id].subtasks[subtask as usize].clone();
    Ok(ChainOp::new(op, state, info(plan, id, subtask), m))
}

/// The dead-letter writers of the task being built and, with checkpoints,
/// the operators that commit them with the checkpoint (appended to the
/// writer's chain, so they are snapshotted and restored like any operator).
struct DeadLetterWiring {
    letters: DeadLetters,
    transactional: bool,
    commits: Vec<ChainOp>,
}

impl DeadLetterWiring {
    fn open(&mut self, plan: &Plan, id: NodeId, subtask: u16, path: &std::path::Path) -> Result<DeadLetter, BuildError> {
        let node = &plan.pipeline.nodes[id];
        let err = |e: std::io::Error| BuildError { node: node.name.clone(), reason: format!("{}: {e}", path.display()) };
        if !self.transactional {
            return self.letters.get(path).map_err(err);
        }
        let (dl, commit) = self.letters.staged(path, &node.name, subtask).map_err(err)?;
        let p = &plan.pipeline;
        let state = MemoryState::new(&commit.tables(), p.key_group_share().range(subtask, p.parallelism, p.max_parallelism));
        let mut info = info(plan, id, subtask);
        info.operator = commit_operator_name(&node.name);
        self.commits.push(ChainOp::new(Box::new(commit), Box::new(state), info, Arc::default()));
        Ok(dl)
    }
}

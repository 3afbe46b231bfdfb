//! Builds the tasks of a plan: the one place that turns plan nodes into
//! operator instances, state handles and channels. The steps: each node's
//! metrics, the channels of every edge, the state backends, then each task
//! (last chain first, so a task's output routes exist when it is built).

mod backends;
mod nodes;

use std::num::NonZeroUsize;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::chain::{Chain, ChainOp};
use super::channel::{self, Receiver};
use super::gauges::SubtaskGauges;
use super::input::Inputs;
use super::metrics::NodeMetrics;
use super::output::{Output, Route};
use super::rendezvous::Rendezvous;
use super::restore_clock::RestoreClock;
use super::task::{OperatorCheckpointing, OperatorTask, Restored, SourceCheckpointing, SourceTask, SourceTiming, TaskMeters};
use super::task_checkpoint::{Control, Event, TaskCheckpointing};
use crate::checkpoint::layout::Layout;
use crate::checkpoint::manifest::TaskId;
use crate::checkpoint::task_snapshot::ChannelId;
use crate::config::{Alignment, NodeId, NodeKind, SinkSpec, SourceSpec};
use crate::connectors::source::{Extent, Source};
use crate::operators::dead_letter::DeadLetters;
use crate::operators::SubtaskInfo;
use crate::plan::{Edge, Plan};
use crate::protocol::barrier::{AlignmentMode, BarrierTracker};
use crate::restore::RestoredState;
use crate::types::{BundleId, Kind, Millis};
use backends::{chain_is_native, uses_rocksdb, Backends};
use nodes::{chain_op, source, DeadLetterWiring};

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
    pub restore_clock: Option<Arc<RestoreClock>>,
    /// For the metrics endpoint.
    pub details: super::metrics::Details,
}

/// The channels between tasks and the checkpoint driver.
pub struct CheckpointWiring {
    pub layout: Layout,
    pub events: mpsc::UnboundedSender<Event>,
    pub completed: watch::Receiver<u64>,
    pub done: watch::Receiver<bool>,
    /// The generation and ownership this run stages external transactions under.
    pub fence: crate::checkpoint::lease::Fence,
}

/// Per chain, per subtask: what a task is built from.
type PerTask<T> = Vec<Vec<Vec<T>>>;

pub fn build(
    plan: &Plan,
    stop: &watch::Receiver<bool>,
    wiring: Option<&CheckpointWiring>,
    mut restored: Option<&mut RestoredState>,
) -> Result<Built, BuildError> {
    let p = plan.pipeline.parallelism;
    let (routes, receivers) = channels(plan);
    let clock = restored.as_deref().map(|r| Arc::new(RestoreClock::new(r.id, r.started, plan.chains.len() * p as usize)));
    let mut backends = Backends::open(plan, restored.as_deref())?;
    let rendezvous = backends.rendezvous(plan, wiring.is_some());
    let mut b = Builder {
        plan,
        stop,
        wiring,
        metrics: node_metrics(plan),
        dead_letters: DeadLetterWiring { letters: DeadLetters::default(), transactional: wiring.is_some(), commits: Vec::new() },
        start: StartFacts {
            restored_parallelism: restored.as_deref().map(|r| r.parallelism),
            fence: wiring.map(|w| w.fence.clone()).unwrap_or_default(),
        },
        alignment: alignment_mode(plan),
        backends,
        rendezvous,
        clock,
        routes,
        receivers,
        tasks: Vec::new(),
        extents: Vec::new(),
        details: super::metrics::Details::default(),
        controls: Vec::new(),
        bundles: vec![Vec::new(); plan.pipeline.bundles() as usize],
        task_names: std::collections::BTreeMap::new(),
    };
    for c in (0..plan.chains.len()).rev() {
        for i in (0..p).rev() {
            b.task(c, i, restored.as_deref_mut())?;
        }
    }
    Ok(b.finish())
}

/// Each node's metrics; operators chained into one task share its loop, so its time.
fn node_metrics(plan: &Plan) -> Vec<NodeMetrics> {
    let p = plan.pipeline.parallelism;
    let mut metrics: Vec<NodeMetrics> = plan
        .pipeline
        .nodes
        .iter()
        .map(|n| NodeMetrics { input: n.input, right: n.right, ..NodeMetrics::new(&n.name, kind_name(&n.kind), p) })
        .collect();
    for (m, n) in metrics.iter_mut().zip(&plan.pipeline.nodes) {
        // The sinks that count what they made durable and visible.
        m.commits =
            matches!(n.kind, NodeKind::Sink(SinkSpec::File { .. } | SinkSpec::Kafka(_) | SinkSpec::Parquet(_) | SinkSpec::Postgres(_)));
    }
    for chain in &plan.chains {
        for i in 0..p as usize {
            let times = metrics[chain[0]].gauges[i].times.clone();
            for &id in &chain[1..] {
                metrics[id].gauges[i] = Arc::new(SubtaskGauges::sharing(times.clone()));
            }
        }
    }
    metrics
}

/// The channels into every non-source chain head: `routes[chain][subtask]`
/// are a task's outputs, `receivers[chain][subtask]` its inputs (one per
/// upstream sender feeding that subtask).
fn channels(plan: &Plan) -> (PerTask<Route>, PerTask<(Receiver, ChannelId)>) {
    let p = plan.pipeline.parallelism;
    let mut routes: PerTask<Route> = plan.chains.iter().map(|_| (0..p).map(|_| Vec::new()).collect()).collect();
    let mut receivers: PerTask<(Receiver, ChannelId)> = plan.chains.iter().map(|_| (0..p).map(|_| Vec::new()).collect()).collect();
    for (c, chain) in plan.chains.iter().enumerate() {
        let head = chain[0];
        let node = &plan.pipeline.nodes[head];
        // A join's left input comes first: its channels are inputs 0.., its
        // right input's follow (`Inputs::sides`).
        let sides = [
            (node.input, plan.edges[head].as_ref(), plan.partitioning(head)),
            (node.right, plan.right_edges[head].as_ref(), plan.right_partitioning(head)),
        ];
        for (input, edge, partitioning) in sides {
            let (Some(input), Some(edge), Some(partitioning)) = (input, edge, partitioning) else { continue };
            wire(plan, (input, head, c), edge, &partitioning, &mut routes, &mut receivers);
        }
    }
    (routes, receivers)
}

/// The channels of one edge, from node `input` into chain `c` headed by `head`.
fn wire(
    plan: &Plan,
    (input, head, c): (NodeId, NodeId, usize),
    edge: &Edge,
    partitioning: &str,
    routes: &mut PerTask<Route>,
    receivers: &mut PerTask<(Receiver, ChannelId)>,
) {
    let p = plan.pipeline.parallelism;
    let up = plan.chain_of(input);
    // The input is the tail of its chain: a node with a channel consumer has no chained one.
    let id = |from: usize, to: usize| ChannelId {
        producer: plan.pipeline.nodes[input].name.clone(),
        producer_subtask: from as u16,
        consumer: plan.pipeline.nodes[head].name.clone(),
        consumer_subtask: to as u16,
        partitioning: partitioning.to_string(),
    };
    match edge {
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

fn alignment_mode(plan: &Plan) -> Option<AlignmentMode> {
    plan.pipeline.checkpoint.as_ref().map(|c| match c.alignment {
        Alignment::Aligned => AlignmentMode::Aligned,
        Alignment::Unaligned => AlignmentMode::Unaligned,
        Alignment::AlignedTimeout(t) => AlignmentMode::AlignedTimeout(t),
        Alignment::AtLeastOnce => AlignmentMode::AtLeastOnce,
    })
}

/// What every task has, source or not.
struct TaskParts {
    chain: Chain,
    output: Output,
    meters: TaskMeters,
    ck: Option<TaskCheckpointing>,
    restored: Option<Restored>,
}

/// What the operators of this run need to know of how it started.
pub(super) struct StartFacts {
    /// The parallelism of the restored checkpoint (None: not restored).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(super) restored_parallelism: Option<u16>,
    pub(super) fence: crate::checkpoint::lease::Fence,
}

/// What building the tasks shares, and what it has built so far.
struct Builder<'a> {
    plan: &'a Plan,
    stop: &'a watch::Receiver<bool>,
    wiring: Option<&'a CheckpointWiring>,
    metrics: Vec<NodeMetrics>,
    dead_letters: DeadLetterWiring,
    start: StartFacts,
    alignment: Option<AlignmentMode>,
    backends: Backends,
    rendezvous: Vec<Arc<Rendezvous>>,
    clock: Option<Arc<RestoreClock>>,
    routes: PerTask<Route>,
    receivers: PerTask<(Receiver, ChannelId)>,
    // Built so far.
    tasks: Vec<(String, Task)>,
    extents: Vec<Option<Extent>>,
    details: super::metrics::Details,
    controls: Vec<mpsc::UnboundedSender<Control>>,
    bundles: Vec<Vec<TaskId>>,
    task_names: std::collections::BTreeMap<TaskId, String>,
}

impl Builder<'_> {
    /// Build subtask `i` of chain `c`: its operators, output, meters,
    /// checkpointing and restored state.
    fn task(&mut self, c: usize, i: u16, restored: Option<&mut RestoredState>) -> Result<(), BuildError> {
        let plan = self.plan;
        let chain = &plan.chains[c];
        let head = chain[0];
        let source_spec = match &plan.pipeline.nodes[head].kind {
            NodeKind::Source(spec) => Some(spec),
            _ => None,
        };
        let rest = if source_spec.is_some() { &chain[1..] } else { &chain[..] };
        let mut output = Output::new(std::mem::take(&mut self.routes[c][i as usize]));
        let meters = self.meters(head, rest, i, source_spec.is_some());
        let tail = *chain.last().expect("a chain has a node");
        let _ = self.metrics[tail].gauges[i as usize].outputs.set(output.probes());
        output.measure(meters.times.clone());
        let src = match source_spec {
            Some(spec) => Some(source(plan, head, spec, i, &mut self.dead_letters)?),
            None => None,
        };
        let mut ops = rest
            .iter()
            .map(|&id| chain_op(plan, id, i, &self.metrics, &mut self.dead_letters, &self.backends, &self.start))
            .collect::<Result<Vec<_>, _>>()?;
        // Dead-letter commits run last, after every writer of the task.
        ops.append(&mut self.dead_letters.commits);
        let task_name = format!("{}[{i}]", plan.pipeline.nodes[head].name);
        let task_id = TaskId { chain: c as u32, subtask: i };
        self.task_names.insert(task_id, task_name.clone());
        let bundle = (i / plan.pipeline.bundle_size) as BundleId;
        self.bundles[bundle as usize].push(task_id);
        let ck = self.wiring.map(|w| TaskCheckpointing {
            task: task_id,
            bundle,
            layout: w.layout.clone(),
            events: w.events.clone(),
            completed: w.completed.clone(),
            done: w.done.clone(),
            notified: 0,
        });
        let restored = restored.map(|r| self.restored(r, task_id, &ops, source_spec.is_some()));
        let parts = TaskParts { chain: Chain::new(ops), output, meters, ck, restored };
        let task = match (src, source_spec) {
            (Some(source), Some(spec)) => self.source_task(head, i, spec, source, parts),
            _ => {
                let member = self.rendezvous.get(bundle as usize).filter(|_| chain_is_native(plan, rest, &self.backends));
                self.operator_task(c, i, parts, member.cloned())
            }
        };
        self.tasks.push((task_name, task));
        Ok(())
    }

    fn meters(&self, head: NodeId, rest: &[NodeId], i: u16, is_source: bool) -> TaskMeters {
        let gauge = |id: usize| self.metrics[id].gauges[i as usize].clone();
        TaskMeters {
            times: gauge(head).times.clone(),
            source: is_source.then(|| gauge(head)),
            ops: rest.iter().map(|&id| gauge(id)).collect(),
        }
    }

    /// What the restored checkpoint holds for this task.
    fn restored(&self, r: &mut RestoredState, task: TaskId, ops: &[ChainOp], is_source: bool) -> Restored {
        let chain = &self.plan.chains[task.chain as usize];
        let nodes: Vec<String> = chain.iter().map(|&id| self.plan.pipeline.nodes[id].name.clone()).collect();
        // Run after the chain's tail: their state is restored, but the
        // tail's output channels stay the tail's.
        let commits: Vec<String> = ops.iter().map(|op| op.info.operator.clone()).filter(|n| !nodes.contains(n)).collect();
        let source = is_source.then(|| nodes[0].as_str());
        let (snapshot, positions) = r.for_task(task, &nodes, &commits, source);
        Restored { id: r.id, snapshot, positions, clock: self.clock.clone().expect("a clock when restoring") }
    }

    fn source_task(&mut self, head: NodeId, i: u16, spec: &SourceSpec, source: Box<dyn Source>, parts: TaskParts) -> Task {
        let TaskParts { chain, output, meters, ck, restored } = parts;
        let plan = self.plan;
        let name = &plan.pipeline.nodes[head].name;
        self.extents.push(source.extent());
        if let Some(e) = source.extent() {
            self.details.source_extents.push((name.clone(), i, e));
        }
        if let Some(stats) = source.client_stats() {
            self.details.kafka_sources.push((name.clone(), i, stats));
        }
        let unaligned = self.alignment == Some(AlignmentMode::Unaligned);
        Task::Source(SourceTask {
            source,
            info: info(plan, head, i),
            metrics: self.metrics[head].subtasks[i as usize].clone(),
            timing: SourceTiming {
                rate_limit: spec.rate_limit.map(|r| r / plan.pipeline.parallelism as f64),
                batch_size: spec.batch_size,
                max_out_of_orderness: spec
                    .event_time
                    .as_ref()
                    .map(|e| Millis::try_from(e.max_out_of_orderness.as_millis()).unwrap_or(Millis::MAX)),
                idle_timeout: spec.event_time.as_ref().and_then(|e| e.idle_timeout),
            },
            chain,
            output,
            meters,
            stop: self.stop.clone(),
            checkpointing: ck.map(|ck| {
                let (tx, control) = mpsc::unbounded_channel();
                self.controls.push(tx);
                SourceCheckpointing { ck, control, unaligned }
            }),
            restored,
        })
    }

    fn operator_task(&mut self, c: usize, i: u16, parts: TaskParts, member: Option<Arc<Rendezvous>>) -> Task {
        let TaskParts { chain, output, meters, ck, restored } = parts;
        let head = self.plan.chains[c][0];
        let right = self.plan.pipeline.nodes[head].right.map(|r| self.plan.pipeline.nodes[r].name.clone());
        let inputs = Inputs::new(std::mem::take(&mut self.receivers[c][i as usize])).with_right(right);
        let _ = self.metrics[head].gauges[i as usize].inputs.set(inputs.probes());
        let checkpointing = ck.map(|ck| OperatorCheckpointing {
            ck,
            barriers: BarrierTracker::new(self.alignment.expect("checkpointing has an alignment"), inputs.len()),
            native: member.map(|rv| {
                let ticket = rv.ticket();
                (rv, ticket)
            }),
            kind: (0, Kind::Checkpoint),
        });
        Task::Operator(OperatorTask { inputs, chain, output, meters, checkpointing, restored })
    }

    fn finish(mut self) -> Built {
        let nodes = &self.plan.pipeline.nodes;
        for b in &mut self.bundles {
            b.sort();
        }
        let d = &mut self.details;
        d.state_dbs = self.backends.dbs().iter().map(Arc::downgrade).collect();
        if !d.state_dbs.is_empty() {
            d.column_families = nodes.iter().filter(|n| uses_rocksdb(&n.kind)).map(|n| n.name.clone()).collect();
        }
        let named = |f: &dyn Fn(&NodeKind) -> bool| nodes.iter().filter(|n| f(&n.kind)).map(|n| n.name.clone()).collect::<Vec<_>>();
        // Kafka and PostgreSQL sinks, exactly once: open and pending transactions.
        d.transactional_sinks = named(&|k| match k {
            NodeKind::Sink(SinkSpec::Kafka(k)) => k.delivery == crate::config::Delivery::ExactlyOnce,
            NodeKind::Sink(SinkSpec::Postgres(p)) => p.delivery == crate::config::Delivery::ExactlyOnce,
            _ => false,
        });
        d.file_sinks = named(&|k| matches!(k, NodeKind::Sink(SinkSpec::File { .. })));
        d.committing_sinks = self.metrics.iter().filter(|m| m.commits).map(|m| m.name.clone()).collect();
        Built {
            extent: total_extent(&self.extents),
            tasks: self.tasks,
            metrics: self.metrics,
            controls: self.controls,
            bundles: self.bundles,
            task_names: self.task_names,
            rendezvous: self.rendezvous,
            restore_clock: self.clock,
            details: self.details,
        }
    }
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
        NodeKind::Join(_) => "join",
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

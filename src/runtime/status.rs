//! The status of a running pipeline, computed in one place and shown three
//! ways: in the progress bar (bounded input), in the live line (unbounded
//! input) and by `weir status` over the control socket.
//!
//! A [`Sampler`] reads the counters and gauges the tasks already keep
//! (nothing is counted for it) a few times a second; rates are the
//! difference between its newest reading and one about [`WINDOW`] older.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::gauges::PhaseNanos;
use super::metrics::{CheckpointMetrics, Exported, FailureReason};
use crate::connectors::source::Extent;
use crate::types::{Millis, MIN_WATERMARK};

/// Rates are taken over about this long.
pub const WINDOW: Duration = Duration::from_secs(2);

/// How often the engine samples.
pub const EVERY: Duration = Duration::from_millis(250);

/// Backpressure at or above this share of the time is worth showing.
pub const HIGH_BACKPRESSURE: f64 = 0.5;

/// What a running pipeline is doing, at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub pipeline: String,
    /// `starting` (until every task restored its state and runs), `running` or `stopping`.
    pub state: String,
    pub uptime_secs: f64,
    /// Records the sources emitted in this run, and per second.
    pub records: u64,
    pub records_per_sec: f64,
    /// Bytes the sources read in this run, and per second.
    pub bytes: u64,
    pub bytes_per_sec: f64,
    /// Bounded input: how much is done, the restored position included.
    pub progress: Option<Progress>,
    /// None: checkpointing is off.
    pub checkpoints: Option<Checkpoints>,
    /// The highest share of time any subtask spent blocked on a full output channel.
    pub backpressure: f64,
    /// The operator it is in.
    pub backpressured: Option<String>,
    /// What holds it back: the busiest operator downstream of it that is
    /// not itself backpressured (None: no backpressure, or no such one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck: Option<Bottleneck>,
    /// The lowest input watermark of the sinks, ms (None: none yet).
    pub watermark: Option<Millis>,
    pub operators: Vec<OperatorStatus>,
    /// Per Kafka source: how far behind its partitions' ends it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kafka_lag: Vec<SourceLag>,
    /// The process's latest warnings and errors, oldest first (`crate::recent`).
    #[serde(default)]
    pub warnings: Vec<crate::recent::LogLine>,
}

/// A Kafka source's lag: records of its assigned partitions past its
/// position (librdkafka's statistics, every 2 s), and the worst partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceLag {
    pub operator: String,
    pub records: i64,
    pub worst: Option<PartitionLag>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i64,
    pub records: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bottleneck {
    pub operator: String,
    /// Its subtasks' mean busy share.
    pub busy: f64,
}

/// Backpressure this high on a subtask means it waits on its consumers.
const HELD_BACK: f64 = 0.5;

/// From the most backpressured operator, follow its busiest consumer while
/// that one is backpressured too: the first that is not holds the others
/// back. `inputs`: each operator's input.
fn bottleneck(operators: &[OperatorStatus], inputs: &[Option<usize>]) -> Option<Bottleneck> {
    let victim = (0..operators.len()).max_by(|&a, &b| operators[a].backpressured.total_cmp(&operators[b].backpressured))?;
    if operators[victim].backpressured < HELD_BACK {
        return None;
    }
    let mut at = victim;
    // Inputs come first in node order, so this walk ends.
    while let Some(next) =
        (0..operators.len()).filter(|&j| inputs.get(j) == Some(&Some(at))).max_by(|&a, &b| operators[a].busy.total_cmp(&operators[b].busy))
    {
        at = next;
        if operators[at].backpressured < HELD_BACK {
            break;
        }
    }
    (at != victim).then(|| Bottleneck { operator: operators[at].name.clone(), busy: operators[at].busy })
}

/// Each Kafka source's lag, summed over its subtasks' partitions.
fn kafka_lags(e: &Exported) -> Vec<SourceLag> {
    let mut out: Vec<SourceLag> = Vec::new();
    for (op, _, stats) in &e.details.kafka_sources {
        let at = match out.iter().position(|l| l.operator == *op) {
            Some(i) => i,
            None => {
                out.push(SourceLag { operator: op.clone(), records: 0, worst: None });
                out.len() - 1
            }
        };
        let source = &mut out[at];
        for (topic, partition, records) in stats.consumer_lags() {
            source.records = source.records.saturating_add(records);
            if source.worst.as_ref().is_none_or(|w| records > w.records) {
                source.worst = Some(PartitionLag { topic, partition, records });
            }
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Bytes,
    Rows,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub unit: Unit,
    pub done: u64,
    pub total: u64,
    /// At the current rate (None: nothing moves).
    pub eta_secs: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Checkpoints {
    pub completed: u64,
    pub failed: u64,
    /// The newest completed checkpoint of this run (None: none yet).
    pub last: Option<LastCheckpoint>,
    /// The checkpoint or savepoint this run restored from.
    pub restored_from: Option<u64>,
    /// The checkpoint or savepoint in progress.
    #[serde(default)]
    pub in_progress: Option<u64>,
    /// Failed checkpoints by reason class (savepoints not counted).
    #[serde(default)]
    pub failed_by: std::collections::BTreeMap<String, u64>,
    #[serde(default)]
    pub savepoints_completed: u64,
    #[serde(default)]
    pub savepoints_failed: u64,
    /// The latest that ended, newest first.
    #[serde(default)]
    pub history: Vec<super::checkpoint_history::Entry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastCheckpoint {
    pub id: u64,
    pub age_secs: f64,
    pub duration_ms: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperatorStatus {
    pub name: String,
    pub kind: String,
    pub parallelism: usize,
    pub records_in: u64,
    pub records_out: u64,
    pub in_per_sec: f64,
    pub out_per_sec: f64,
    /// Share of the time processing, over its subtasks (0 to 1).
    pub busy: f64,
    /// The highest share of time one of its subtasks was backpressured.
    pub backpressured: f64,
    /// The lowest over its subtasks, ms (None: some have none yet).
    pub input_watermark: Option<Millis>,
    pub output_watermark: Option<Millis>,
    /// Records it dropped (late or bad), and of those written to a dead letter.
    #[serde(default)]
    pub records_dropped: u64,
    #[serde(default)]
    pub dead_lettered: u64,
    /// The operators it reads (a join: left, then right): the job graph's edges.
    #[serde(default)]
    pub inputs: Vec<String>,
    #[serde(default)]
    pub subtasks: Vec<SubtaskStatus>,
}

/// One subtask of an operator, as [`OperatorStatus`] sums them up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubtaskStatus {
    pub records_in: u64,
    pub records_out: u64,
    pub in_per_sec: f64,
    pub out_per_sec: f64,
    pub busy: f64,
    pub backpressured: f64,
    pub input_watermark: Option<Millis>,
    pub output_watermark: Option<Millis>,
}

/// One reading of every counter.
#[derive(Debug, Clone)]
struct Reading {
    at: Instant,
    nodes: Vec<NodeReading>,
}

#[derive(Debug, Clone)]
struct NodeReading {
    bytes_in: u64,
    /// By subtask: records in and out, and its times.
    subtasks: Vec<(u64, u64)>,
    times: Vec<PhaseNanos>,
}

/// Turns counter readings into snapshots.
pub struct Sampler {
    exported: Exported,
    extent: Option<Extent>,
    stopping: watch::Receiver<bool>,
    started: Instant,
    readings: VecDeque<Reading>,
}

impl Sampler {
    /// Counters start at zero with the engine: the first rates are since now.
    pub fn new(exported: Exported, extent: Option<Extent>, stopping: watch::Receiver<bool>) -> Sampler {
        let started = Instant::now();
        let zero = |n: &super::metrics::NodeMetrics| NodeReading {
            bytes_in: 0,
            subtasks: vec![(0, 0); n.subtasks.len()],
            times: vec![PhaseNanos::default(); n.gauges.len()],
        };
        let zero = Reading { at: started, nodes: exported.nodes.iter().map(zero).collect() };
        Sampler { exported, extent, stopping, started, readings: VecDeque::from([zero]) }
    }

    fn read(&self) -> Reading {
        let nodes = self
            .exported
            .nodes
            .iter()
            .map(|n| {
                let subtasks =
                    n.subtasks.iter().map(|m| (m.records_in.load(Ordering::Relaxed), m.records_out.load(Ordering::Relaxed))).collect();
                NodeReading {
                    bytes_in: n.subtasks.iter().map(|m| m.bytes_in.load(Ordering::Relaxed)).sum(),
                    subtasks,
                    times: n.gauges.iter().map(|g| g.times.read()).collect(),
                }
            })
            .collect();
        Reading { at: Instant::now(), nodes }
    }

    /// Read the counters now and compare with a reading about [`WINDOW`] ago.
    pub fn sample(&mut self) -> Snapshot {
        let now = self.read();
        while self.readings.len() > 1 && now.at.duration_since(self.readings[1].at) >= WINDOW {
            self.readings.pop_front();
        }
        let then = self.readings.front().cloned().unwrap_or_else(|| now.clone());
        self.readings.push_back(now.clone());
        self.snapshot(&then, &now)
    }

    fn snapshot(&self, then: &Reading, now: &Reading) -> Snapshot {
        let e = &self.exported;
        let dt = now.at.duration_since(then.at).as_secs_f64();
        let rate = |a: u64, b: u64| if dt > 0.001 { b.saturating_sub(a) as f64 / dt } else { 0.0 };
        let share = |a: u64, b: u64| if dt > 0.001 { (b.saturating_sub(a) as f64 / 1e9 / dt).clamp(0.0, 1.0) } else { 0.0 };
        let mut operators = Vec::new();
        let (mut records, mut records_then, mut bytes, mut bytes_then) = (0, 0, 0, 0);
        let (mut backpressure, mut backpressured) = (0.0f64, None);
        let mut sink_watermark: Option<Option<Millis>> = None;
        for (k, node) in e.nodes.iter().enumerate() {
            let (r0, r1) = (&then.nodes[k], &now.nodes[k]);
            let sum = |r: &NodeReading| r.subtasks.iter().fold((0u64, 0u64), |(i, o), (si, so)| (i + si, o + so));
            let ((in0, out0), (in1, out1)) = (sum(r0), sum(r1));
            if node.kind == "source" {
                records += out1;
                records_then += out0;
                bytes += r1.bytes_in;
                bytes_then += r0.bytes_in;
            }
            let known = |w: Millis| (w != MIN_WATERMARK).then_some(w);
            let per_subtask: Vec<SubtaskStatus> = (0..node.subtasks.len())
                .map(|i| {
                    let ((si0, so0), (si1, so1)) = (r0.subtasks[i], r1.subtasks[i]);
                    let (t0, t1) = (r0.times.get(i).copied().unwrap_or_default(), r1.times.get(i).copied().unwrap_or_default());
                    let g = &node.gauges[i];
                    SubtaskStatus {
                        records_in: si1,
                        records_out: so1,
                        in_per_sec: rate(si0, si1),
                        out_per_sec: rate(so0, so1),
                        busy: share(t0.busy(), t1.busy()),
                        backpressured: share(t0.backpressured(), t1.backpressured()),
                        input_watermark: known(g.input_watermark.load(Ordering::Relaxed)),
                        output_watermark: known(g.output_watermark.load(Ordering::Relaxed)),
                    }
                })
                .collect();
            let totals = node.totals();
            let inputs = [node.input, node.right].into_iter().flatten().map(|i| e.nodes[i].name.clone()).collect();
            // The operator's figures from its subtasks': mean busy, highest
            // backpressure, lowest watermark (None while one has none).
            let busy = per_subtask.iter().map(|s| s.busy).sum::<f64>() / per_subtask.len().max(1) as f64;
            let bp = per_subtask.iter().map(|s| s.backpressured).fold(0.0, f64::max);
            if bp > backpressure {
                backpressure = bp;
                backpressured = Some(node.name.clone());
            }
            let lowest =
                |pick: fn(&SubtaskStatus) -> Option<Millis>| per_subtask.iter().map(pick).collect::<Option<Vec<_>>>()?.into_iter().min();
            let input_watermark = lowest(|s| s.input_watermark);
            let output_watermark = lowest(|s| s.output_watermark);
            if node.kind == "sink" {
                let lowest = match sink_watermark {
                    None => input_watermark,
                    Some(w) => w.zip(input_watermark).map(|(a, b)| a.min(b)),
                };
                sink_watermark = Some(lowest);
            }
            operators.push(OperatorStatus {
                name: node.name.clone(),
                kind: node.kind.to_string(),
                parallelism: node.subtasks.len(),
                records_in: in1,
                records_out: out1,
                in_per_sec: rate(in0, in1),
                out_per_sec: rate(out0, out1),
                busy,
                backpressured: bp,
                input_watermark,
                output_watermark,
                records_dropped: totals.records_dropped,
                dead_lettered: totals.dead_lettered,
                inputs,
                subtasks: per_subtask,
            });
        }
        let progress = self.extent.map(|extent| progress(e, extent, (records_then, records), (bytes_then, bytes), dt));
        let checkpoints = e.checkpoints.as_deref().map(checkpoints);
        let ready = e.nodes.iter().flat_map(|n| &n.gauges).all(|g| g.times.is_ready());
        let state = if !e.running.load(Ordering::Relaxed) || !ready {
            "starting"
        } else if *self.stopping.borrow() {
            "stopping"
        } else {
            "running"
        };
        Snapshot {
            pipeline: e.pipeline.clone(),
            state: state.into(),
            uptime_secs: now.at.duration_since(self.started).as_secs_f64(),
            records,
            records_per_sec: rate(records_then, records),
            bytes,
            bytes_per_sec: rate(bytes_then, bytes),
            progress,
            checkpoints,
            backpressure,
            backpressured,
            bottleneck: bottleneck(&operators, &e.nodes.iter().map(|n| n.input).collect::<Vec<_>>()),
            watermark: sink_watermark.flatten(),
            operators,
            kafka_lag: kafka_lags(e),
            warnings: crate::recent::lines(),
        }
    }

    /// Sample every [`EVERY`] into `tx` until the receivers are gone.
    pub async fn run(mut self, tx: watch::Sender<Snapshot>) {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if tx.send(self.sample()).is_err() {
                return;
            }
        }
    }
}

/// How far a bounded run is: what the sources read (and had read before
/// the restore) of the input's extent, and the time left at the current rate.
fn progress(e: &Exported, extent: Extent, records: (u64, u64), bytes: (u64, u64), dt: f64) -> Progress {
    let rate = |a: u64, b: u64| if dt > 0.001 { b.saturating_sub(a) as f64 / dt } else { 0.0 };
    let restored: i64 = e
        .nodes
        .iter()
        .filter(|n| n.kind == "source")
        .flat_map(|n| &n.gauges)
        .map(|g| g.restored_done.load(Ordering::Relaxed))
        .fold(0i64, i64::saturating_add);
    let restored = u64::try_from(restored).unwrap_or(0);
    let (unit, total, (read_then, read)) = match extent {
        Extent::Bytes(total) => (Unit::Bytes, total, bytes),
        Extent::Rows(total) => (Unit::Rows, total, records),
    };
    let done = restored.saturating_add(read).min(total);
    let per_sec = rate(read_then, read);
    let eta_secs = (per_sec > 0.0).then(|| total.saturating_sub(done) as f64 / per_sec);
    Progress { unit, done, total, eta_secs }
}

fn checkpoints(c: &CheckpointMetrics) -> Checkpoints {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let last = c.since_last().map(|age| LastCheckpoint {
        id: load(&c.last_id),
        age_secs: age.as_secs_f64(),
        duration_ms: load(&c.last_duration_ms),
        bytes: load(&c.last_bytes),
    });
    let restored = load(&c.restored_id);
    let in_progress = load(&c.in_progress);
    let failed_by = FailureReason::ALL.iter().zip(&c.failed_by).map(|(r, n)| (r.label().to_string(), load(n))).collect();
    Checkpoints {
        completed: load(&c.completed),
        failed: load(&c.failed),
        last,
        restored_from: (restored > 0).then_some(restored),
        in_progress: (in_progress > 0).then_some(in_progress),
        failed_by,
        savepoints_completed: load(&c.savepoints_completed),
        savepoints_failed: load(&c.savepoints_failed),
        history: c.history.newest_first(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::gauges::Phase;
    use crate::runtime::metrics::{CheckpointMetrics, Completed, NodeMetrics};
    use std::sync::Arc;

    fn exported() -> Exported {
        let nodes = vec![NodeMetrics::new("src", "source", 2), NodeMetrics::new("agg", "aggregate", 2), NodeMetrics::new("out", "sink", 1)];
        Exported {
            pipeline: "p".into(),
            nodes,
            checkpoints: Some(Arc::<CheckpointMetrics>::default()),
            checkpoint_interval: Duration::from_secs(1),
            running: Default::default(),
            restarts: Default::default(),
            details: Default::default(),
        }
    }

    #[test]
    fn rates_come_from_counter_deltas_and_progress_starts_at_the_restored_position() {
        let e = exported();
        let (_tx, stop) = watch::channel(false);
        let mut s = Sampler::new(e.clone(), Some(Extent::Rows(1000)), stop);
        // The restored position had read 300 rows (one subtask took over more after a rescale).
        e.nodes[0].gauges[0].restored_done.store(400, Ordering::Relaxed);
        e.nodes[0].gauges[1].restored_done.store(-100, Ordering::Relaxed);
        let first = s.sample();
        assert_eq!(first.progress.as_ref().map(|p| (p.done, p.total)), Some((300, 1000)), "{first:?}");
        assert_eq!(first.state, "starting");
        std::thread::sleep(Duration::from_millis(100));
        e.running.store(true, Ordering::Relaxed);
        assert_eq!(s.sample().state, "starting", "until every task restored");
        for g in e.nodes.iter().flat_map(|n| &n.gauges) {
            g.times.set_ready();
        }
        e.nodes[0].subtasks[0].records_out.store(150, Ordering::Relaxed);
        e.nodes[0].subtasks[1].records_out.store(50, Ordering::Relaxed);
        e.nodes[1].subtasks[1].records_in.store(200, Ordering::Relaxed);
        let second = s.sample();
        assert_eq!((second.records, second.state.as_str()), (200, "running"));
        let p = second.progress.clone().unwrap();
        assert_eq!(p.done, 500);
        // 200 records in at most ~0.1 s plus scheduling: a rate, not a total.
        assert!(second.records_per_sec > 200.0 && second.records_per_sec < 2100.0, "{}", second.records_per_sec);
        assert!(p.eta_secs.is_some_and(|eta| eta > 0.0 && eta < 3.0), "{p:?}");
        assert_eq!(second.operators[1].records_in, 200);
        assert!(second.operators[1].in_per_sec > 0.0 && second.operators[0].in_per_sec == 0.0);
        assert_eq!(second.checkpoints.as_ref().unwrap().last, None);
        e.checkpoints.as_ref().unwrap().on_completed(&Completed { id: 3, duration: Duration::from_millis(42), ..Completed::default() });
        let c = s.sample().checkpoints.unwrap();
        assert_eq!(c.last.map(|l| (l.id, l.duration_ms)), Some((3, 42)));
    }

    #[test]
    fn the_bottleneck_is_the_busiest_consumer_downstream_that_is_not_itself_held_back() {
        let op = |name: &str, busy: f64, backpressured: f64| OperatorStatus {
            name: name.into(),
            kind: "aggregate".into(),
            parallelism: 1,
            records_in: 0,
            records_out: 0,
            in_per_sec: 0.0,
            out_per_sec: 0.0,
            busy,
            backpressured,
            input_watermark: None,
            output_watermark: None,
            ..OperatorStatus::default()
        };
        // gen -> parse -> (slow, fast); parse is held back too, slow is the cause.
        let ops = [op("gen", 0.02, 0.97), op("parse", 0.3, 0.6), op("slow", 0.98, 0.0), op("fast", 0.1, 0.0)];
        let inputs = [None, Some(0), Some(1), Some(1)];
        assert_eq!(bottleneck(&ops, &inputs), Some(Bottleneck { operator: "slow".into(), busy: 0.98 }));
        // Little backpressure: no bottleneck named.
        let calm = [op("gen", 0.5, 0.1), op("parse", 0.3, 0.0), op("slow", 0.4, 0.0), op("fast", 0.1, 0.0)];
        assert_eq!(bottleneck(&calm, &inputs), None);
        // The most held back has no consumer (a sink blocked on its output): none.
        assert_eq!(bottleneck(&[op("gen", 0.1, 0.0), op("sink", 0.1, 0.9)], &[None, Some(0)]), None);
    }

    #[test]
    fn backpressure_names_the_operator_blocked_on_its_output() {
        let e = exported();
        let (_tx, stop) = watch::channel(false);
        let mut s = Sampler::new(e.clone(), None, stop);
        e.nodes[1].gauges[0].times.enter(Phase::Backpressured);
        e.nodes[1].gauges[1].times.enter(Phase::Busy);
        std::thread::sleep(Duration::from_millis(50));
        let snap = s.sample();
        assert!(snap.backpressure > 0.5, "{snap:?}");
        assert_eq!(snap.backpressured.as_deref(), Some("agg"));
        assert!(snap.operators[1].busy > 0.2 && snap.operators[1].busy <= 0.5 + 1e-9, "{:?}", snap.operators[1]);
        assert_eq!(snap.progress, None);
        assert_eq!(snap.watermark, None, "no watermark yet");
        e.nodes[2].gauges[0].set_watermarks(5000, 5000);
        assert_eq!(s.sample().watermark, Some(5000));
    }
}

//! A case's fault schedule: one entry per run of the pipeline, drawn from the
//! seed. Each run gets an action (what happens to the process while it runs),
//! optional `WEIR_FAULTS` (crash points, failing state writes, a stalled
//! subtask, delayed barriers), and optionally a change of parallelism or of
//! the topology for its restore.

use super::rng::Rng;
use super::shape::Shape;

/// Log lines a kill -9 is aimed at: the state being restored (right after
/// "Pipeline started."), restored, a checkpoint completing (sinks
/// publishing), the final checkpoint after the input is exhausted.
pub const KILL_SIGNALS: [&str; 4] =
    ["Pipeline started.", "State restored.", "Checkpoint complete.", "Input exhausted; taking the final checkpoint."];

/// The named points of the checkpoint protocol (src/faults.rs).
pub const CRASH_POINTS: [&str; 4] = ["after_prepare", "after_manifest", "after_metadata", "before_sink_commit"];

#[derive(Clone, Debug)]
pub enum Action {
    /// Let the run go to its end.
    Finish,
    /// kill -9 after this long.
    Kill { after_ms: u64 },
    /// kill -9 `delay_ms` after the run's stderr shows `signal` for the
    /// `nth` time (a protocol moment: restore, a completed checkpoint, the
    /// final checkpoint), no kill if the run ends first.
    KillAt { signal: &'static str, nth: usize, delay_ms: u64 },
    /// SIGTERM: a final checkpoint, exit 0.
    Term { after_ms: u64 },
    /// Several SIGTERMs in a row: the second one stops hard (exit 130).
    Storm { after_ms: u64, signals: u32, gap_ms: u64 },
    /// SIGSTOP, then SIGCONT after `for_ms`.
    Pause { after_ms: u64, for_ms: u64 },
    /// While the run is frozen (SIGSTOP), a second `weir run` on the same
    /// state dir must exit 2 and change nothing.
    Second { after_ms: u64 },
    /// `weir savepoint trigger` while it runs; it goes on.
    Savepoint { after_ms: u64 },
    /// `weir savepoint trigger --stop [--drain]`, into the case's one
    /// `--target` parent if `target` (a new child each time); the next run
    /// restores the savepoint printed, after moving it elsewhere if `moved`.
    Stop { after_ms: u64, drain: bool, target: bool, moved: bool },
    /// Checkpoints on S3 only: the run becomes a stale owner `after_ms`
    /// after its start: its path to S3 stalls (`hold`: a proxy holds its
    /// bytes, among them requests it sent under a valid lease) or the
    /// process freezes (SIGSTOP). Once its lease ran out, a second run
    /// takes the storage over on a new machine, and is killed `kill_ms`
    /// after its first checkpoint completes; the stale owner's held bytes
    /// are delivered (or it is continued) in between. It must commit
    /// nothing more and fail; the next run restores on the new machine.
    Stale { after_ms: u64, hold: bool, kill_ms: u64 },
}

/// A network fault between a run and the S3 server (a proxy).
#[derive(Clone, Copy, Debug)]
pub enum NetFault {
    /// Every chunk to the server waits this long.
    Latency { ms: u64 },
    /// Every connection is reset `after_ms` after the start, then `every_ms` again.
    Cuts { after_ms: u64, every_ms: u64 },
}

/// A topology change applied to the restore of a run.
#[derive(Clone, Debug, PartialEq)]
pub enum EditKind {
    SinkInput,
    AddSink,
    AddOperator,
    RemoveOperator,
}

#[derive(Clone, Debug)]
pub struct Attempt {
    pub action: Action,
    /// `WEIR_FAULTS` items for this run (crash=..., state_write_fail=..., ...).
    pub faults: Vec<String>,
    /// Restore at this parallelism instead.
    pub rescale: Option<u32>,
    pub edit: Option<EditKind>,
    /// Before this restore a consumer moves the published part files away.
    pub consume: bool,
    /// A broker outage before the action: `after_ms` after the start the
    /// broker is stopped for `for_ms`.
    pub outage: Option<Outage>,
    /// After an action the run survives (SIGSTOP/SIGCONT, a second
    /// process, a savepoint), kill -9 it at its next `Checkpoint complete.`.
    pub then_kill: bool,
    /// A clean run that only finishes the input: its sources at 8 times
    /// their rate (results do not depend on the rate; faulty runs keep it so
    /// kills land in the middle of the input).
    pub fast: bool,
    /// Before this restore the Kafka source topic is deleted and created
    /// again, and the same records produced into the same partitions.
    pub recreate_topic: bool,
    /// Checkpoints on S3 only: this restore runs on a new machine (a new,
    /// empty state directory; the store and the output stay).
    pub new_machine: bool,
    /// Checkpoints on S3 only: the run's path to the server is faulty.
    pub net: Option<NetFault>,
}

#[derive(Clone, Copy, Debug)]
pub struct Outage {
    pub after_ms: u64,
    pub for_ms: u64,
}

/// Broker outages for a case whose pipeline uses Kafka, drawn with dice of
/// their own so the rest of the schedule is the same with or without a broker.
pub fn add_outages(rng: &mut Rng, attempts: &mut [Attempt]) {
    for a in attempts {
        if rng.chance(0.15) {
            // Shorter and longer than the pipeline's broker_timeout.
            let for_ms = rng.range(500, super::shape::BROKER_TIMEOUT_S * 1000 + 2000);
            a.outage = Some(Outage { after_ms: rng.range(100, 1000), for_ms });
        }
    }
}

/// For a case with checkpoints on S3, with dice of their own: restores on
/// a new machine, stale owners and network faults. Savepoints that a later
/// run restores go to the case's target parent, outside every machine's
/// state directory (a savepoint in a lost state directory is gone).
pub fn add_machines(rng: &mut Rng, attempts: &mut [Attempt]) {
    for (i, a) in attempts.iter_mut().enumerate() {
        a.new_machine = i > 0 && rng.chance(0.3);
        if let Action::Stop { target, .. } = &mut a.action {
            *target = true;
        }
        if rng.chance(0.2) {
            a.action = Action::Stale { after_ms: rng.range(200, 900), hold: rng.chance(0.6), kill_ms: rng.range(0, 400) };
            a.then_kill = false;
        }
        if rng.chance(0.2) && !matches!(a.action, Action::Stale { hold: true, .. }) {
            a.net = Some(if rng.chance(0.5) {
                NetFault::Latency { ms: rng.range(2, 40) }
            } else {
                NetFault::Cuts { after_ms: rng.range(100, 800), every_ms: rng.range(300, 1500) }
            });
        }
    }
}

/// Source topic recreations for a case reading a topic, on restores only
/// (a fresh run has nothing to resume), with dice of their own.
pub fn add_recreations(rng: &mut Rng, attempts: &mut [Attempt]) {
    for a in attempts.iter_mut().skip(1) {
        a.recreate_topic = rng.chance(0.2);
    }
}

impl Attempt {
    pub fn clean() -> Attempt {
        Attempt {
            action: Action::Finish,
            faults: Vec::new(),
            rescale: None,
            edit: None,
            consume: false,
            outage: None,
            then_kill: false,
            fast: true,
            recreate_topic: false,
            new_machine: false,
            net: None,
        }
    }

    pub fn fails_writes(&self) -> bool {
        self.faults.iter().any(|f| f.starts_with("state_write_fail="))
    }

    /// Names of what this run injects, for the table.
    pub fn kinds(&self) -> Vec<String> {
        let mut kinds = vec![match &self.action {
            Action::Finish => "none",
            Action::Kill { .. } => "kill -9 at a random time",
            Action::KillAt { signal, .. } => match signal.split(['.', ';']).next().unwrap_or(signal) {
                "Pipeline started" => "kill -9 at 'Pipeline started.'",
                "State restored" => "kill -9 at 'State restored.'",
                "Checkpoint complete" => "kill -9 at 'Checkpoint complete.'",
                _ => "kill -9 at 'Input exhausted'",
            },
            Action::Term { .. } => "SIGTERM",
            Action::Storm { .. } => "signal storm",
            Action::Pause { .. } => "SIGSTOP/SIGCONT",
            Action::Second { .. } => "second process",
            Action::Savepoint { .. } => "savepoint",
            Action::Stop { drain: true, .. } => "stop --drain",
            Action::Stop { moved: true, .. } => "stop, moved savepoint",
            Action::Stop { .. } => "stop-with-savepoint",
            Action::Stale { hold: true, .. } => "stale owner (bytes held, delivered late)",
            Action::Stale { .. } => "stale owner (SIGSTOP)",
        }
        .to_string()];
        for f in &self.faults {
            let kind = f.split(['=', ':']).take(if f.starts_with("crash=") { 2 } else { 1 }).collect::<Vec<_>>().join("=");
            if !kind.starts_with("seed") {
                kinds.push(kind);
            }
        }
        if self.rescale.is_some() {
            kinds.push("rescale".into());
        }
        if let Some(e) = &self.edit {
            kinds.push(format!("edit {e:?}"));
        }
        if self.consume {
            kinds.push("published parts moved away".into());
        }
        if self.outage.is_some() {
            kinds.push("broker outage".into());
        }
        if self.then_kill {
            kinds.push("then kill -9 at 'Checkpoint complete.'".into());
        }
        if self.recreate_topic {
            kinds.push("source topic recreated".into());
        }
        if self.new_machine {
            kinds.push("restore on a new machine".into());
        }
        match self.net {
            Some(NetFault::Latency { .. }) => kinds.push("S3 latency".into()),
            Some(NetFault::Cuts { .. }) => kinds.push("S3 connections cut".into()),
            None => {}
        }
        kinds.retain(|k| k != "none");
        kinds
    }
}

/// A per-file rate of failed snapshot writes. A checkpoint writes about one
/// file per task, so a fixed rate would let a wide pipeline almost never
/// complete one (0.3 over 16 files: 1 in 300), and a run that must reach a
/// checkpoint (its final one, a kill at 'Checkpoint complete.') would
/// outlast the hang limit by chance. The high rate lets about 1 checkpoint
/// in 20 through, the low one about 2 in 3, whatever the width.
pub fn write_fail_rate(shape: &Shape, high: bool) -> String {
    let files = (shape.parallelism as usize * (shape.nodes().len() + shape.sinks.len())).max(1) as f64;
    let through: f64 = if high { 0.05 } else { 0.67 };
    let rate = (1.0 - through.powf(1.0 / files)).min(0.3);
    format!("{rate:.3}")
}

/// The faulty runs of a case (clean runs to the end follow them).
pub fn draw(rng: &mut Rng, shape: &Shape) -> Vec<Attempt> {
    // Short waits and many runs: each kill -9 costs a process start and a
    // restore, and only a few checkpoints' worth of the input, so a case
    // holds many kill points before its input is exhausted.
    let n = rng.range(5, 10);
    let mut attempts = Vec::new();
    for i in 0..n {
        let after_ms = rng.range(100, 1000);
        let action = match rng.range(0, 16) {
            0..=3 => Action::Kill { after_ms: rng.range(30, 900) },
            4..=8 => {
                // The last one waits for the whole input: rarely.
                let signal = if rng.chance(0.1) { KILL_SIGNALS[3] } else { *rng.pick(&KILL_SIGNALS[..3]) };
                let nth = if signal.starts_with("Checkpoint") { rng.range(1, 3) as usize } else { 1 };
                Action::KillAt { signal, nth, delay_ms: rng.range(0, 40) }
            }
            9 => Action::Term { after_ms },
            10 => Action::Storm { after_ms, signals: rng.range(2, 4) as u32, gap_ms: rng.range(0, 40) },
            11 => Action::Pause { after_ms, for_ms: rng.range(200, 1000) },
            12 => Action::Second { after_ms },
            13 => Action::Savepoint { after_ms },
            14 | 15 => {
                Action::Stop { after_ms, drain: shape.drain_safe() && rng.chance(0.5), target: rng.chance(0.5), moved: rng.chance(0.5) }
            }
            _ => Action::Finish,
        };
        let then_kill = matches!(action, Action::Pause { .. } | Action::Second { .. } | Action::Savepoint { .. }) && rng.chance(0.85);
        let mut faults = Vec::new();
        if rng.chance(0.35) {
            let point = rng.pick(&CRASH_POINTS);
            faults.push(format!("crash={point}:{}", rng.range(1, 5)));
        }
        if rng.chance(0.2) {
            // The high rate aborts most checkpoints, the low one lets most through.
            faults.push(format!("state_write_fail={}", write_fail_rate(shape, rng.chance(0.5))));
            faults.push(format!("seed={}", rng.next() % 1000));
        }
        if rng.chance(0.2) {
            // Any node: sources, operators, sinks, at the head of a chain or not.
            let nodes: Vec<String> = shape.nodes().into_iter().chain(shape.sinks.iter().map(|s| s.name.clone())).collect();
            let node = rng.pick(&nodes).clone();
            faults.push(format!("stall={node}:{}:{}ms", rng.range(0, shape.parallelism as u64 - 1), rng.range(200, 1500)));
        }
        if rng.chance(0.1) {
            faults.push(format!("barrier_delay={}ms", rng.range(5, 60)));
        }
        // With `restart:`, a run left to finish may fail once at an
        // operator's barrier and restart in the process (its own stream:
        // older seeds draw as before).
        let mut side = Rng::new(shape.side_seed.wrapping_add(i as u64));
        if shape.restart && matches!(action, Action::Finish) && !shape.operators.is_empty() && side.chance(0.5) {
            let op = side.pick(&shape.operators).name.clone();
            faults.push(format!("fail={op}:{}:{}", side.range(0, shape.parallelism as u64 - 1), side.range(1, 6)));
        }
        // Changes apply to a restore, never to the first run.
        let rescale = (i > 0 && rng.chance(0.25)).then(|| rng.range(1, 4) as u32);
        let edit = (i > 0 && rng.chance(0.25))
            .then(|| rng.pick(&[EditKind::SinkInput, EditKind::AddSink, EditKind::AddOperator, EditKind::RemoveOperator]).clone());
        let consume = i > 0 && rng.chance(0.1);
        attempts.push(Attempt {
            action,
            faults,
            rescale,
            edit,
            consume,
            outage: None,
            then_kill,
            fast: false,
            recreate_topic: false,
            new_machine: false,
            net: None,
        });
    }
    attempts
}

#[test]
fn snapshot_write_failures_let_checkpoints_through_at_any_width() {
    let mut rng = Rng::new(11);
    for seed in 0..200 {
        let shape = Shape::draw(&mut rng, seed);
        let files = shape.parallelism as i32 * (shape.nodes().len() + shape.sinks.len()) as i32;
        for (high, least) in [(true, 0.05), (false, 0.67)] {
            let rate: f64 = write_fail_rate(&shape, high).parse().unwrap();
            assert!(rate > 0.0 && rate <= 0.3, "{rate}");
            assert!((1.0 - rate).powi(files) >= least * 0.95, "{files} files at {rate}");
        }
    }
}

//! A case's fault schedule: one entry per run of the pipeline, drawn from the
//! seed. Each run gets an action (what happens to the process while it runs),
//! optional `WEIR_FAULTS` (crash points, failing state writes, a stalled
//! subtask, delayed barriers), and optionally a change of parallelism or of
//! the topology for its restore.

use super::rng::Rng;
use super::shape::Shape;

/// The named points of the checkpoint protocol (src/faults.rs).
pub const CRASH_POINTS: [&str; 4] = ["after_prepare", "after_manifest", "after_metadata", "before_sink_commit"];

#[derive(Clone, Debug)]
pub enum Action {
    /// Let the run go to its end.
    Finish,
    /// kill -9 after this long.
    Kill { after_ms: u64 },
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
        if rng.chance(0.3) {
            // Shorter and longer than the pipeline's broker_timeout.
            let for_ms = rng.range(1000, super::shape::BROKER_TIMEOUT_S * 1000 + 4000);
            a.outage = Some(Outage { after_ms: rng.range(100, 1500), for_ms });
        }
    }
}

impl Attempt {
    pub fn clean() -> Attempt {
        Attempt { action: Action::Finish, faults: Vec::new(), rescale: None, edit: None, consume: false, outage: None }
    }

    pub fn fails_writes(&self) -> bool {
        self.faults.iter().any(|f| f.starts_with("state_write_fail="))
    }

    /// Names of what this run injects, for the table.
    pub fn kinds(&self) -> Vec<String> {
        let mut kinds = vec![match &self.action {
            Action::Finish => "none",
            Action::Kill { .. } => "kill -9",
            Action::Term { .. } => "SIGTERM",
            Action::Storm { .. } => "signal storm",
            Action::Pause { .. } => "SIGSTOP/SIGCONT",
            Action::Second { .. } => "second process",
            Action::Savepoint { .. } => "savepoint",
            Action::Stop { drain: true, .. } => "stop --drain",
            Action::Stop { moved: true, .. } => "stop, moved savepoint",
            Action::Stop { .. } => "stop-with-savepoint",
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
        kinds.retain(|k| k != "none");
        kinds
    }
}

/// The faulty runs of a case (clean runs to the end follow them).
pub fn draw(rng: &mut Rng, shape: &Shape) -> Vec<Attempt> {
    let n = rng.range(3, 8);
    let mut attempts = Vec::new();
    for i in 0..n {
        let after_ms = rng.range(100, 2000);
        let action = match rng.range(0, 13) {
            0..=3 | 12 | 13 => Action::Kill { after_ms },
            4 => Action::Term { after_ms },
            5 => Action::Storm { after_ms, signals: rng.range(2, 4) as u32, gap_ms: rng.range(0, 40) },
            6 => Action::Pause { after_ms, for_ms: rng.range(200, 1500) },
            7 => Action::Second { after_ms },
            8 => Action::Savepoint { after_ms },
            9 | 10 => {
                Action::Stop { after_ms, drain: shape.drain_safe() && rng.chance(0.5), target: rng.chance(0.5), moved: rng.chance(0.5) }
            }
            _ => Action::Finish,
        };
        let mut faults = Vec::new();
        if rng.chance(0.35) {
            let point = rng.pick(&CRASH_POINTS);
            faults.push(format!("crash={point}:{}", rng.range(1, 5)));
        }
        if rng.chance(0.2) {
            // 0.3 per file aborts most checkpoints of a wide pipeline; 0.05 lets some through.
            faults.push(format!("state_write_fail={}", rng.pick(&["0.3", "0.05"])));
            faults.push(format!("seed={}", rng.next() % 1000));
        }
        if rng.chance(0.2) {
            let nodes: Vec<String> =
                shape.operators.iter().map(|o| o.name.clone()).chain(shape.sinks.iter().map(|s| s.name.clone())).collect();
            let node = rng.pick(&nodes).clone();
            faults.push(format!("stall={node}:{}:{}ms", rng.range(0, shape.parallelism as u64 - 1), rng.range(200, 1500)));
        }
        if rng.chance(0.1) {
            faults.push(format!("barrier_delay={}ms", rng.range(5, 60)));
        }
        // Changes apply to a restore, never to the first run.
        let rescale = (i > 0 && rng.chance(0.25)).then(|| rng.range(1, 4) as u32);
        let edit = (i > 0 && rng.chance(0.25))
            .then(|| rng.pick(&[EditKind::SinkInput, EditKind::AddSink, EditKind::AddOperator, EditKind::RemoveOperator]).clone());
        let consume = i > 0 && rng.chance(0.1);
        attempts.push(Attempt { action, faults, rescale, edit, consume, outage: None });
    }
    attempts
}

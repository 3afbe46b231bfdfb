//! `weir plan`: what `run --restore` would do, decided by the same code
//! (`decide`, every check that can refuse a start) and written nowhere: no
//! lock taken, no directory created, nothing in the state directory or the
//! store changed. A refusal is the error `run` would give.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{decide, remote, RestoreError, RestoreFrom, RestorePolicy};
use crate::checkpoint::layout::Layout;
use crate::config::{NodeKind, Pipeline};

/// What a restore keeps, starts anew and drops, node by node.
#[derive(Debug, Serialize)]
pub struct RestorePlan {
    pub pipeline: String,
    /// The checkpoint or savepoint restored (None: the run starts from the beginning).
    pub restored: Option<RestoredFrom>,
    /// The id the run's first checkpoint gets.
    pub first_checkpoint: u64,
    pub nodes: Vec<NodePlan>,
    /// State in the checkpoint that no node of the pipeline takes (only
    /// with `--allow-non-restored-state`; else the plan is a refusal).
    pub dropped: Vec<String>,
    /// Records in flight in an unaligned checkpoint, replayed first.
    pub in_flight_records: usize,
}

#[derive(Debug, Serialize)]
pub struct RestoredFrom {
    pub id: u64,
    pub kind: String,
    pub path: String,
    pub parallelism: u16,
}

#[derive(Debug, Serialize)]
pub struct NodePlan {
    pub name: String,
    pub kind: &'static str,
    /// `kept`, `new`, `stateless`, `resumes` (a source at its positions)
    /// or `from the beginning` (a source without).
    pub state: &'static str,
    /// From parallelism p to p' (state dealt anew by key groups, source
    /// positions by split).
    pub rescaled: Option<(u16, u16)>,
}

/// Decide the start `run` would make with `restore` and `policy`.
pub fn plan(pipeline: &Pipeline, restore: Option<&RestoreFrom>, policy: RestorePolicy) -> Result<RestorePlan, RestoreError> {
    let layout = Layout::new(&pipeline.state.dir);
    let storage = match pipeline.checkpoint.as_ref().and_then(|c| c.storage.as_ref()) {
        Some(spec) => Some(remote::open(spec)?),
        None => None,
    };
    let d = decide(pipeline, &layout, storage.as_deref(), restore, policy)?;
    let restored = d.restored.as_ref();
    let with_state: BTreeSet<&str> =
        restored.into_iter().flat_map(|r| r.tasks.values()).flat_map(|t| t.operators.iter().map(|(name, _)| name.as_str())).collect();
    let rescaled = restored.filter(|r| r.parallelism != pipeline.parallelism).map(|r| (r.parallelism, pipeline.parallelism));
    let nodes = pipeline
        .nodes
        .iter()
        .map(|n| {
            let (kind, state) = match &n.kind {
                NodeKind::Source(_) if restored.is_some_and(|r| r.positions.contains_key(&n.name)) => ("source", "resumes"),
                NodeKind::Source(_) => ("source", "from the beginning"),
                NodeKind::Filter(_) => ("filter", "stateless"),
                NodeKind::Map(_) => ("map", "stateless"),
                NodeKind::Dedup(_) => ("dedup", kept_or_new(&with_state, &n.name)),
                NodeKind::Aggregate(_) => ("aggregate", kept_or_new(&with_state, &n.name)),
                NodeKind::Join(_) => ("join", kept_or_new(&with_state, &n.name)),
                NodeKind::Sink(_) => ("sink", kept_or_new(&with_state, &n.name)),
            };
            NodePlan { name: n.name.clone(), kind, state, rescaled }
        })
        .collect();
    let dropped = restored
        .map(|_| with_state.iter().filter(|o| !pipeline.nodes.iter().any(|n| n.name == **o)).map(|o| o.to_string()).collect())
        .unwrap_or_default();
    let in_flight_records = restored
        .into_iter()
        .flat_map(|r| r.tasks.values())
        .flat_map(|t| t.output_channels.iter().chain(&t.input_channels))
        .map(|c| c.records.len())
        .sum();
    Ok(RestorePlan {
        pipeline: pipeline.name.clone(),
        restored: restored.map(|r| RestoredFrom {
            id: r.id,
            kind: kind_of(&d.origin),
            path: r.dir.display().to_string(),
            parallelism: r.parallelism,
        }),
        first_checkpoint: d.first_id,
        nodes,
        dropped,
        in_flight_records,
    })
}

fn kept_or_new(with_state: &BTreeSet<&str>, name: &str) -> &'static str {
    if with_state.contains(name) {
        "kept"
    } else {
        "new"
    }
}

fn kind_of(origin: &crate::checkpoint::generation::Origin) -> String {
    use crate::checkpoint::generation::Origin;
    match origin {
        Origin::Restored { checkpoint_kind: crate::types::Kind::Savepoint, .. } => "savepoint".into(),
        Origin::Set { .. } => "savepoint set".into(),
        Origin::Restored { .. } | Origin::Continues { .. } | Origin::Beginning => "checkpoint".into(),
    }
}

impl std::fmt::Display for RestorePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.restored {
            Some(r) => writeln!(f, "Restores {} {} (parallelism {}) from {}.", r.kind, r.id, r.parallelism, r.path)?,
            None => writeln!(f, "Starts from the beginning: nothing to restore.")?,
        }
        let width = self.nodes.iter().map(|n| n.name.len()).max().unwrap_or(0);
        for n in &self.nodes {
            let rescaled = match n.rescaled {
                Some((from, to)) if n.state != "stateless" => format!(", rescaled {from} -> {to}"),
                _ => String::new(),
            };
            writeln!(f, "  {:<width$}  {:<9}  {}{rescaled}", n.name, n.kind, n.state)?;
        }
        for d in &self.dropped {
            writeln!(f, "  {d:<width$}  {:<9}  dropped (--allow-non-restored-state)", "")?;
        }
        if self.in_flight_records > 0 {
            writeln!(f, "{} in-flight records of the unaligned checkpoint are replayed first.", self.in_flight_records)?;
        }
        writeln!(f, "The first checkpoint of the run is {}.", self.first_checkpoint)
    }
}

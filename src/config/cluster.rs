//! What a pipeline may hold when it runs as one instance of several.
//!
//! Every instance runs the whole pipeline for its share of the Kafka
//! partitions and key groups (see docs/scaling.md). Inputs and outputs that
//! cannot be split between instances yet are refused here, with their
//! place in the file, rather than read or written once per instance.

use super::locate::{child, Seg, YPath};
use super::pipeline::{CheckpointSpec, ClusterSpec, NodeKind, OnError, SinkSpec, SourceKind};
use super::specs::Cx;

/// The checks of one node: its place in the file and what it became.
pub(crate) struct ClusterNode<'a> {
    pub path: &'a YPath,
    pub kind: &'a NodeKind,
}

/// Report everything that cannot run in `cluster` (nothing for one instance).
pub(crate) fn check(cx: &mut Cx, cluster: &ClusterSpec, checkpoint: Option<&CheckpointSpec>, nodes: &[ClusterNode]) {
    if !cluster.is_cluster() {
        return;
    }
    let n = cluster.instances;
    let at = [Seg::Key("cluster".into())];
    if checkpoint.is_none() {
        cx.err(&at, format!("a cluster of {n} instances needs a `checkpoint:` section: the hand-off between instances and every instance's offsets are committed with checkpoints"));
    }
    // Any keyed operator means a hash edge (a source's stream is never
    // partitioned by key), so records cross instances.
    let keyed = nodes.iter().any(|c| matches!(c.kind, NodeKind::Dedup(_) | NodeKind::Aggregate(_)));
    for c in nodes {
        let here: &[Seg] = c.path;
        match c.kind {
            NodeKind::Source(s) => {
                match &s.kind {
                    SourceKind::File { .. } => cx.err(here, format!("a file source cannot run in a cluster ({n} instances): every instance would read every file; read a Kafka topic instead, or run one instance")),
                    SourceKind::Datagen(_) => cx.err(here, format!("a datagen source cannot run in a cluster ({n} instances): every instance would generate the same rows; run one instance")),
                    SourceKind::Kafka(k) if keyed && k.bounded => cx.err(&child(here, "bounded"), "`bounded: true` cannot run in a cluster with keyed operators yet: the end of input does not cross from one instance to another; stop the instances with a savepoint instead"),
                    SourceKind::Kafka(_) => {}
                }
                if let OnError::DeadLetter(_) = s.on_error {
                    cx.err(&child(here, "dead_letter"), dead_letter(n));
                }
            }
            NodeKind::Aggregate(a) if a.dead_letter.is_some() => cx.err(&child(here, "dead_letter"), dead_letter(n)),
            // Each side's hash edge would need a repartition topic of its
            // own and the join both sides' hand-offs aligned: not built yet.
            NodeKind::Join(_) => cx.err(here, format!("a join cannot run in a cluster ({n} instances) yet: its two hash edges are not carried over repartition topics; run one instance")),
            NodeKind::Sink(SinkSpec::File { .. }) => cx.err(here, format!("a file sink cannot run in a cluster ({n} instances): every instance would write the same part files; write to a Kafka topic instead")),
            NodeKind::Sink(SinkSpec::Parquet(_)) => cx.err(here, format!("a parquet sink cannot run in a cluster ({n} instances) yet: the clean-up of a crashed run's staged files assumes one process; write to a Kafka topic, or run one instance")),
            NodeKind::Sink(SinkSpec::Postgres(_)) => cx.err(here, format!("a postgres sink cannot run in a cluster ({n} instances) yet: the clean-up of a crashed run's prepared transactions assumes one process; write to a Kafka topic, or run one instance")),
            NodeKind::Sink(SinkSpec::Kafka(k)) if matches!(k.on_error, OnError::DeadLetter(_)) => cx.err(&child(here, "dead_letter"), dead_letter(n)),
            _ => {}
        }
    }
    if keyed && cluster.brokers.is_none() {
        cx.err(&at, "a cluster with keyed operators needs Kafka brokers for its repartition topics: set `cluster.brokers` (default: the brokers of the first Kafka source)");
    }
}

fn dead_letter(n: u16) -> String {
    format!("a dead letter file cannot be written in a cluster ({n} instances): every instance would write the same file")
}

/// The cluster with its brokers resolved (the first Kafka source's), and
/// every Kafka source and sink told which instance it is.
pub(crate) fn apply(mut cluster: ClusterSpec, kinds: &mut [Option<NodeKind>]) -> ClusterSpec {
    if cluster.brokers.is_none() {
        cluster.brokers = kinds.iter().find_map(|k| match k {
            Some(NodeKind::Source(s)) => match &s.kind {
                SourceKind::Kafka(k) => Some(k.brokers.clone()),
                _ => None,
            },
            _ => None,
        });
    }
    if !cluster.is_cluster() {
        return cluster;
    }
    for kind in kinds.iter_mut().flatten() {
        match kind {
            NodeKind::Source(s) => {
                if let SourceKind::Kafka(k) = &mut s.kind {
                    k.instance = (cluster.index, cluster.instances);
                }
            }
            NodeKind::Sink(SinkSpec::Kafka(k)) => k.instance = Some(cluster.index),
            _ => {}
        }
    }
    cluster
}

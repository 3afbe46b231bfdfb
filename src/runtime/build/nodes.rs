//! One instance of a plan node for one subtask: a source, or an operator
//! (keyed, stateless or a sink) with its state, and the dead-letter
//! writers (and their commits) they share within a task.

use std::fs;
use std::sync::Arc;

use super::backends::Backends;
use super::{info, BuildError};
use crate::config::{NodeId, NodeKind, OnError, SinkSpec, SourceKind, SourceSpec};
use crate::connectors::blackhole::Blackhole;
use crate::connectors::datagen::Datagen;
use crate::connectors::file::sink::FileSink;
use crate::connectors::file::source::{splits_for, FileSource};
#[cfg(feature = "kafka")]
use crate::connectors::kafka::{sink::default_transaction_timeout, sink::KafkaSink, source::KafkaSource};
use crate::connectors::source::Source;
use crate::connectors::stdout::StdoutSink;
use crate::format::json::JsonParser;
use crate::operators::aggregate::Aggregate;
use crate::operators::dead_letter::{commit_operator_name, DeadLetters};
use crate::operators::dedup::Dedup;
use crate::operators::filter::Filter;
use crate::operators::map::Map;
use crate::operators::{DeadLetter, Operator, OperatorMetrics};
use crate::plan::Plan;
use crate::runtime::chain::ChainOp;
use crate::runtime::metrics::NodeMetrics;
use crate::state::memory::MemoryState;

pub(super) fn source(
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
            let dead_letter = dead_letters.for_errors(plan, id, subtask, &spec.on_error)?;
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
            let dead_letter = dead_letters.for_errors(plan, id, subtask, &spec.on_error)?;
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

pub(super) fn chain_op(
    plan: &Plan,
    id: NodeId,
    subtask: u16,
    metrics: &[NodeMetrics],
    dead_letters: &mut DeadLetterWiring,
    backends: &Backends,
    start: &super::StartFacts,
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
        NodeKind::Join(spec) => {
            let position = |input: Option<NodeId>, key: &[String]| -> Result<Vec<usize>, BuildError> {
                let schema = input.map(|i| plan.schemas[i].as_slice()).unwrap_or(&[]);
                crate::operators::dedup::resolve_fields(key, schema).map_err(err)
            };
            let (left, right) = (position(node.input, &spec.left_key)?, position(node.right, &spec.right_key)?);
            let dead_letter = match &spec.dead_letter {
                Some(path) => Some(dead_letters.open(plan, id, subtask, path)?),
                None => None,
            };
            let join = crate::operators::join::Join::new(&node.name, spec, left, right, plan.projections[id].clone()).map_err(err)?;
            Box::new(join.with_dead_letter(dead_letter))
        }
        NodeKind::Filter(spec) => {
            let dead_letter = dead_letters.for_errors(plan, id, subtask, &spec.on_error)?;
            Box::new(Filter::new(&node.name, spec, &plan.input_layout(id), dead_letter))
        }
        NodeKind::Map(spec) => {
            let dead_letter = dead_letters.for_errors(plan, id, subtask, &spec.on_error)?;
            Box::new(Map::new(&node.name, spec, plan.projections[id].clone(), &plan.input_layout(id), &plan.extras[id], dead_letter))
        }
        NodeKind::Sink(SinkSpec::File { dir, max_file_bytes }) => {
            Box::new(FileSink::new(dir, *max_file_bytes, subtask, plan.pipeline.checkpoint.is_some()).map_err(|e| err(e.to_string()))?)
        }
        NodeKind::Sink(SinkSpec::Stdout) => Box::<StdoutSink>::default(),
        #[cfg(not(feature = "kafka"))]
        NodeKind::Sink(SinkSpec::Kafka(_)) => {
            let _ = start; // only the Kafka and PostgreSQL sinks need it
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
            let dead_letter = dead_letters.for_errors(plan, id, subtask, &k.on_error)?;
            let (name, pipeline) = (&node.name, &plan.pipeline.name);
            let sink =
                KafkaSink::open(k, pipeline, name, subtask, p, start.restored_parallelism, key, txn_timeout, dead_letter).map_err(err)?;
            Box::new(sink.with_checkpoints(plan.pipeline.checkpoint.is_some()))
        }
        #[cfg(not(feature = "parquet"))]
        NodeKind::Sink(SinkSpec::Parquet(_)) => return Err(err(crate::features::missing_reason(crate::features::Feature::Parquet))),
        #[cfg(feature = "parquet")]
        NodeKind::Sink(SinkSpec::Parquet(spec)) => {
            let dead_letter = dead_letters.for_errors(plan, id, subtask, &spec.on_error)?;
            let transactional = plan.pipeline.checkpoint.is_some();
            // Where the records already hold each column's value (parsed
            // at the source, or an aggregate's output); else the sink parses.
            let slots = spec.columns.iter().map(|c| input_schema.iter().position(|s| s == &c.path)).collect();
            let sink = crate::connectors::parquet::ParquetSink::new(&node.name, spec, subtask, transactional, slots, dead_letter);
            Box::new(sink.map_err(err)?)
        }
        #[cfg(not(feature = "postgres"))]
        NodeKind::Sink(SinkSpec::Postgres(_)) => return Err(err(crate::features::missing_reason(crate::features::Feature::Postgres))),
        #[cfg(feature = "postgres")]
        NodeKind::Sink(SinkSpec::Postgres(spec)) => {
            let dead_letter = dead_letters.for_errors(plan, id, subtask, &spec.on_error)?;
            let checkpoints = plan.pipeline.checkpoint.is_some();
            // Where records hold the upsert key: a held row is kept under its key's key group.
            let key_slots = spec.key_fields.iter().map(|f| input_schema.iter().position(|s| s == f)).collect::<Option<Vec<usize>>>();
            let sink =
                crate::connectors::postgres::PostgresSink::open(&node.name, &plan.pipeline.name, spec, subtask, checkpoints, dead_letter)
                    .map(|s| s.with_fence(start.fence.clone()));
            Box::new(sink.map_err(err)?.with_key_slots(key_slots.filter(|s| !s.is_empty())))
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
pub(super) struct DeadLetterWiring {
    pub(super) letters: DeadLetters,
    pub(super) transactional: bool,
    pub(super) commits: Vec<ChainOp>,
}

impl DeadLetterWiring {
    /// The dead letter an `on_error` names, if it names one.
    fn for_errors(&mut self, plan: &Plan, id: NodeId, subtask: u16, on_error: &OnError) -> Result<Option<DeadLetter>, BuildError> {
        match on_error {
            OnError::DeadLetter(path) => self.open(plan, id, subtask, path).map(Some),
            _ => Ok(None),
        }
    }

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

//! Connectors: the sources and sinks that talk to an external system, one
//! module (or folder) per system.
//!
//! A source implements `source::Source` (polled by its task, positions
//! snapshotted at barriers); a sink is an `Operator` that emits nothing.
//! Connectors use `crate::operators` (the trait, context, errors, dead
//! letters); operators never use connectors. A new connector goes here, a
//! new keyed operator in `crate::operators`.
//!
//! `kafka/` is compiled only with the `kafka` feature; without it, config
//! validation refuses Kafka sources and sinks (`config::features`).

pub mod blackhole;
pub mod datagen;
pub mod file;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "parquet")]
pub mod parquet;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod source;
pub mod stdout;

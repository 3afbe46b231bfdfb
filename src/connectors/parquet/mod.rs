//! The Parquet sink (feature `parquet`): JSON records as rows of a declared
//! schema, in Parquet files under a local directory or an S3 prefix, made
//! visible exactly once with checkpoints (`sink`), staged and published by
//! `target`; `cells` checks each value against its column, `part` writes
//! one file.

mod cells;
mod part;
mod sink;
mod target;

pub use sink::ParquetSink;

//! Pipeline configuration: YAML text in, a validated `Pipeline` out.
//!
//! Loading goes text → `${ENV}` expansion → YAML tree → `--set` overrides →
//! `raw` serde types → `compile` (semantic checks) → `pipeline` types. Every
//! problem is collected and reported together, each with file:line:col.

mod cluster;
mod compile;
mod deser;
mod duration;
mod env;
pub mod features;
#[cfg(test)]
pub(crate) mod fuzz_tests;
mod join;
mod limits;
mod load;
mod locate;
mod outputs;
mod overrides;
mod parquet;
pub mod pipeline;
mod postgres;
pub mod raw;
mod specs;

pub use duration::parse_duration;
pub use limits::{MAX_PIPELINE_BYTES, MAX_WINDOWS_PER_RECORD};
pub use load::{load_file, load_file_as, load_str, Instance};
pub use parquet::{ParquetColumn, ParquetCompression, ParquetSinkSpec, ParquetType, StorageOptions, TimeBucket, TimeUnit};
pub use pipeline::*;
pub use postgres::gid_prefix;
pub use specs::parse_metrics_address;

use std::fmt;

/// One problem in a pipeline file, located where the user must look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or `--set KEY=VALUE` for an override).
    pub origin: String,
    /// 1-based line and column; 0 when the problem has no single place.
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.origin, self.message)
        } else {
            write!(f, "{}:{}:{}: {}", self.origin, self.line, self.col, self.message)
        }
    }
}

/// All problems found in a pipeline file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(f, "invalid pipeline ({n} error{}):", if n == 1 { "" } else { "s" })?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

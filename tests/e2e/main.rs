//! End-to-end tests: run the real `weir` binary on the pipelines in
//! `pipelines/` and the inputs in `testdata/`, compare with a reference.
//!
//!     cargo test --release --test e2e

mod bad_input;
mod channels;
mod checkpoint_faults;
mod ckpt;
mod cli;
mod cluster;
mod compat;
mod crash;
mod damage;
mod dead_letter;
mod determinism;
mod distinct_sets;
mod ending;
mod event_time;
mod exact_numbers;
mod examples;
mod file_sink;
mod golden;
mod inspect;
mod join;
#[cfg(feature = "kafka")]
mod kafka;
mod metrics;
#[cfg(feature = "parquet")]
mod parquet;
mod plan;
#[cfg(feature = "postgres")]
mod postgres;
mod restart;
#[cfg(feature = "kafka")]
mod rollout;
mod s3;
mod savepoint;
mod signals;
mod state_dir;
mod terminal;
#[cfg(feature = "rocksdb")]
mod tour;
mod transform;
mod util;
mod validate;
mod value_aggs;
mod values;
mod web;

use weir_test_support::{proxy, records, reference, rng, wait};

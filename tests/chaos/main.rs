//! The chaos harness: seeded, randomized exactly-once cases against the real
//! binary. Each case draws a pipeline shape, its input and a fault schedule
//! from its seed, runs the pipeline through kills, crashes at protocol
//! points, signals, savepoints, rescales and topology edits until a run
//! finishes the bounded input, and checks the published output against an
//! oracle computed from the input alone (see docs/checkpoints.md, "How this
//! is tested").
//!
//!     cargo test --release --test chaos -- --nocapture
//!     CHAOS_SEED=1234 CHAOS_CASES=1 cargo test --release --test chaos -- --nocapture
//!     scripts/chaos.sh --minutes 60
//!
//! CHAOS_SEED: seed of the first case (cases use SEED, SEED+1, ...; default
//! 1; scripts/chaos.sh draws one from the clock). CHAOS_CASES: at most this many cases.
//! CHAOS_SECONDS: time budget, no case starts after it (default 480).
//! CHAOS_DIR: where case directories go (default $TMPDIR/weir-chaos).
//! CHAOS_KEEP: keep the directories of cases that pass too.
//! KAFKA_BOOTSTRAP: a broker; cases then may add an exactly-once Kafka sink
//! and read a file source's lines through the Kafka source.
//! KAFKA_BROKER_DIR: that broker's data directory (scripts/kafka-broker.sh):
//! cases using Kafka then draw broker outages (SIGSTOP of the broker).
//! AWS_ENDPOINT_URL (or WEIR_S3_ENDPOINT) with the AWS credentials: an S3
//! server; half the cases then keep their checkpoints there and draw
//! restores on new machines, stale owners and network faults.
//! WEIR_PG_URL (password in PGPASSWORD): a PostgreSQL server; cases then
//! may add a PostgreSQL sink appending each record to a table of its own.

mod case;
mod check;
mod cluster;
mod edits;
mod faults;
mod input;
mod kafka;
mod oracle;
mod postgres;
mod proc;
mod run;
mod s3;
mod shape;
mod stats;

use weir_test_support::{proxy, records, reference, rng, wait};

pub use wait::wait_until;

use std::time::{Duration, Instant};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v}: expected a number")))
}

#[test]
fn chaos() {
    // A fixed first seed by default, so CI runs the same cases every time
    // (scripts/chaos.sh draws a fresh one for long runs).
    let first = env_u64("CHAOS_SEED").unwrap_or(1);
    let max_cases = env_u64("CHAOS_CASES").unwrap_or(u64::MAX);
    let budget = Duration::from_secs(env_u64("CHAOS_SECONDS").unwrap_or(480));
    let root = std::env::var_os("CHAOS_DIR").map(Into::into).unwrap_or_else(|| std::env::temp_dir().join("weir-chaos"));
    eprintln!("chaos: first seed {first}, budget {budget:?}, cases in {}", root.display());
    let started = Instant::now();
    let mut stats = stats::Stats::default();
    let mut seed = first;
    while (seed - first) < max_cases && (seed == first || started.elapsed() < budget) {
        let case_started = Instant::now();
        let mut case = case::Case::new(seed, &root);
        case.run();
        // A failed case (or a sink an edit removed) leaves prepared
        // transactions on the shared server: roll them back, so that they
        // do not fill its max_prepared_transactions for later cases.
        if let Some(url) = postgres::server() {
            if let Err(e) = postgres::clean_up(&url, &case.shape.name) {
                eprintln!("chaos seed {seed}: cleaning up prepared transactions: {e}");
            }
        }
        let verdict = match &case.failure {
            None => {
                if std::env::var_os("CHAOS_KEEP").is_none() {
                    let _ = std::fs::remove_dir_all(&case.dir);
                }
                "ok".to_string()
            }
            Some(f) => format!("FAILED: {}\n    reproduction: {}/REPRODUCE.md", f.lines().next().unwrap_or(""), case.dir.display()),
        };
        eprintln!(
            "chaos seed {seed}: {} runs, {} kill points, {} records checked, {:.1} s: {verdict}\n    {}\n    time: {}",
            case.runs,
            case.kill_points,
            case.findings.records,
            case_started.elapsed().as_secs_f64(),
            case.shape.summary(),
            case.timing.line()
        );
        stats.add(&case);
        seed += 1;
    }
    let table = stats.table(&format!("seeds {first}..{}", seed.saturating_sub(1)), started.elapsed());
    eprintln!("\n{table}");
    if let Some(path) = std::env::var_os("CHAOS_REPORT") {
        std::fs::write(path, &table).unwrap();
    }
    assert!(stats.failures.is_empty(), "{} of {} chaos cases failed:\n{table}", stats.failures.len(), stats.cases);
}

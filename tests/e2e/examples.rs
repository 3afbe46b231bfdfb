//! Every pipeline in `pipelines/` validates and runs, with its output
//! redirected into a temp dir. New examples are picked up automatically.
//! A Parquet sink's output is read back with DuckDB (tests/e2e/parquet.rs).

use std::path::PathBuf;
use std::time::Duration;

use serde_yaml::Value;

use super::signals::wait_for_output;
use super::util::{repo, sink_lines, tmp, weir, weir_run};

fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("pipelines"))
        .expect("pipelines/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    v.sort();
    assert!(!v.is_empty());
    v
}

fn rel(p: &std::path::Path) -> String {
    p.strip_prefix(repo()).unwrap().display().to_string()
}

fn items<'a>(doc: &'a Value, list: &str) -> Vec<&'a Value> {
    doc.get(list).and_then(Value::as_sequence).map(|s| s.iter().collect()).unwrap_or_default()
}

/// Kafka examples need a broker: tests/e2e/kafka.rs runs each of them
/// against the test broker (`kafka_example_pipeline_runs_against_the_test_broker`).
fn uses_kafka(doc: &Value) -> bool {
    ["sources", "sinks"].iter().any(|l| items(doc, l).iter().any(|s| s["type"] == "kafka"))
}

/// PostgreSQL examples need a server and a table: tests/e2e/postgres.rs
/// runs pipelines/postgres.yaml against the test server
/// (`a_clean_upsert_run_writes_the_reference_rows_and_leaves_nothing_prepared`).
fn uses_postgres(doc: &Value) -> bool {
    items(doc, "sinks").iter().any(|s| s["type"] == "postgres")
}

fn is_unbounded(doc: &Value) -> bool {
    items(doc, "sources").iter().any(|s| s["type"] == "datagen" && s.get("rows").is_none())
}

#[test]
fn every_example_validates() {
    for p in examples() {
        let o = weir(&["validate", &rel(&p)]).run();
        o.expect_code(0);
        assert!(o.stdout.contains("is valid"), "{}: {}", rel(&p), o.stdout);
    }
}

#[test]
fn every_example_runs_and_writes_output() {
    for path in examples() {
        let name = rel(&path);
        let doc: Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).expect("example is YAML");
        if uses_kafka(&doc) {
            assert_eq!(name, "pipelines/kafka.yaml", "a new Kafka example needs its own run in tests/e2e/kafka.rs");
            continue;
        }
        if uses_postgres(&doc) {
            assert_eq!(name, "pipelines/postgres.yaml", "a new PostgreSQL example needs its own run in tests/e2e/postgres.rs");
            continue;
        }
        let dir = tmp();
        let mut cmd = weir_run(&name, 2);
        // Redirect every file sink and dead-letter file into the temp dir.
        let mut sink_dirs = Vec::new();
        let mut stdout_sinks = 0;
        let mut parquet_dirs = Vec::new();
        for (i, s) in items(&doc, "sinks").iter().enumerate() {
            match s["type"].as_str() {
                Some("file") => {
                    let d = dir.path().join(format!("sink{i}"));
                    cmd = cmd.set(&format!("sinks.{i}.path"), &d);
                    sink_dirs.push(d);
                }
                Some("parquet") => {
                    let d = dir.path().join(format!("sink{i}"));
                    cmd = cmd.set(&format!("sinks.{i}.path"), &d);
                    parquet_dirs.push(d);
                }
                Some("stdout") => stdout_sinks += 1,
                _ => {}
            }
        }
        // Checkpoints go to the temp dir too (a fresh state directory).
        if doc.get("state").is_some() {
            cmd = cmd.set("state.dir", dir.path().join("state"));
        }
        for (i, s) in items(&doc, "sources").iter().enumerate() {
            if s.get("dead_letter").is_some() {
                cmd = cmd.set(&format!("sources.{i}.dead_letter"), dir.path().join(format!("dead{i}.jsonl")));
            }
        }
        let o = if is_unbounded(&doc) {
            let run = cmd.spawn();
            wait_for_output(&run, sink_dirs.first().expect("an unbounded example writes files"));
            run.terminate();
            run.wait_for(Duration::from_secs(10))
        } else {
            cmd.run()
        };
        o.expect_code(0);
        for d in &sink_dirs {
            assert!(!sink_lines(d).is_empty(), "{name}: sink {} is empty", d.display());
        }
        #[cfg(feature = "parquet")]
        for d in &parquet_dirs {
            assert!(!super::parquet::rows(d).is_empty(), "{name}: parquet sink {} is empty", d.display());
        }
        #[cfg(not(feature = "parquet"))]
        let _ = parquet_dirs;
        if stdout_sinks > 0 {
            assert!(!o.stdout.trim().is_empty(), "{name}: nothing on stdout");
        }
    }
}

//! The Parquet sink, read back by an independent reader (DuckDB, through
//! scripts/read-parquet.sh): the rows a run publishes are the reference
//! model's (computed from the input), exactly once across kill -9 loops, a
//! restore at another parallelism, both state backends; nothing staged is
//! visible and nothing is left staged. (On S3: `s3::parquet_sink_on_s3_*`.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::ckpt::{both_backends, kill_after, reference_output, Backend, Rng};
use super::records::{assert_same_multiset, Obj};
use super::util::{repo, tmp, weir, weir_run, Weir};

pub const PIPELINE: &str = "pipelines/parquet.yaml";

/// Every row of the Parquet files under `dir` (final names only: the
/// reader's glob skips `.staging/`), as canonical JSON lines.
pub fn rows(dir: &Path) -> Vec<String> {
    if parquet_files(dir).is_empty() {
        return Vec::new();
    }
    let glob = format!("{}/**/part-*.parquet", dir.display());
    let o = Command::new(repo().join("scripts/read-parquet.sh")).arg(&glob).output().expect("running scripts/read-parquet.sh");
    assert!(o.status.success(), "read-parquet.sh {glob}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().lines().map(str::to_string).collect()
}

/// The column types DuckDB reads, `name TYPE` per column.
fn schema(dir: &Path) -> Vec<String> {
    let glob = format!("{}/**/part-*.parquet", dir.display());
    let o = Command::new(repo().join("scripts/read-parquet.sh")).arg("--schema").arg(&glob).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().lines().map(str::to_string).collect()
}

/// The published Parquet files under `dir`, at any depth.
pub fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let (p, name) = (e.path(), e.file_name().to_string_lossy().into_owned());
            if p.is_dir() && !name.starts_with('.') {
                todo.push(p);
            } else if name.starts_with("part-") && name.ends_with(".parquet") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// What is left in the staging area of `dir`.
pub fn staged(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join(".staging")).into_iter().flatten().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
}

/// DuckDB's text of a UTC timestamp in milliseconds.
fn timestamp_text(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000)).unwrap();
    let mut s = format!("{:04}-{:02}-{:02} {:02}:{:02}:{:02}", t.year(), u8::from(t.month()), t.day(), t.hour(), t.minute(), t.second());
    let frac = ms.rem_euclid(1000);
    if frac != 0 {
        s.push_str(format!(".{frac:03}").trim_end_matches('0'));
    }
    s
}

/// The reference rows of pipelines/parquet.yaml, as DuckDB renders its schema.
pub fn expected_rows() -> Vec<String> {
    reference_output()
        .iter()
        .map(|o: &Obj| {
            let int = |k: &str| o[k].as_i64().unwrap_or_else(|| panic!("{k} is an integer in {o:?}"));
            let row = serde_json::json!({
                "user": o["user"],
                "window_start": timestamp_text(int("window_start")),
                "window_end": timestamp_text(int("window_end")),
                "n": o["n"],
                "total": format!("{}.00", int("total")),
            });
            row.to_string()
        })
        .collect()
}

fn canonical(lines: Vec<String>) -> Vec<String> {
    lines.iter().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap().to_string()).collect()
}

/// The rows under `out` are the reference's, each once.
#[track_caller]
pub fn assert_reference_rows(what: &str, out: &Path) {
    assert_same_multiset(what, canonical(rows(out)), canonical(expected_rows()));
}

fn cmd(backend: Backend, p: u32, state: &Path, out: &Path) -> Weir {
    backend.apply(weir_run(PIPELINE, p).set("state.dir", state).set("sinks.lake.path", out))
}

#[test]
fn a_clean_run_publishes_the_reference_rows_with_the_declared_types_by_hour() {
    let dir = tmp();
    let (state, out) = (dir.path().join("state"), dir.path().join("lake"));
    cmd(Backend::Memory, 2, &state, &out).set("sources.events.rate_limit", "1000000000").ok();
    assert_reference_rows("clean run", &out);
    assert!(staged(&out).is_empty(), "left staged: {:?}", staged(&out));
    let files = parquet_files(&out);
    for f in &files {
        let rel = f.strip_prefix(&out).unwrap().display().to_string();
        let ok = rel.starts_with("dt=2023-11-14/hr=22/part-") || rel.starts_with("dt=2023-11-14/hr=23/part-");
        assert!(ok, "not under its event hour: {rel}");
    }
    let want =
        ["user VARCHAR", "window_start TIMESTAMP WITH TIME ZONE", "window_end TIMESTAMP WITH TIME ZONE", "n BIGINT", "total DECIMAL(18,2)"];
    assert_eq!(schema(&out), want);
}

/// Kill -9 at random times, restore each time, then run to the end.
fn crash_loop(what: &str, backend: Backend, restore_p: u32) {
    let dir = tmp();
    let (state, out) = (dir.path().join("state"), dir.path().join("lake"));
    let mut rng = Rng::from_env(what);
    let mut kills = 0;
    for i in 0..8 {
        let mut c = cmd(backend, 2, &state, &out).set("sources.events.rate_limit", "700");
        if i > 0 {
            c = c.arg("--restore").arg("latest");
        }
        let mut run = c.spawn();
        if !kill_after(&mut run, rng.millis(100, 700)) {
            run.wait_for(super::util::RUN_TIMEOUT).expect_code(0);
            break;
        }
        kills += 1;
    }
    cmd(backend, restore_p, &state, &out).set("sources.events.rate_limit", "1000000000").arg("--restore").arg("latest").ok();
    eprintln!("{what}: {kills} kills");
    assert_reference_rows(what, &out);
    assert!(staged(&out).is_empty(), "{what}: left staged: {:?}", staged(&out));
}

both_backends! {
    fn kill_9_loops_publish_every_row_exactly_once(backend: Backend) {
        crash_loop("parquet crash loop", backend, 2);
    }
}

#[test]
fn a_restore_at_another_parallelism_publishes_every_row_exactly_once() {
    crash_loop("parquet crash loop, restored at p=3", Backend::Memory, 3);
}

/// A one-sink pipeline over `lines`, writing `schema` with `on_error`.
fn bad_input_run(lines: &[&str], on_error: &str) -> (tempfile::TempDir, super::util::Outcome) {
    let dir = tmp();
    std::fs::write(dir.path().join("in.jsonl"), lines.join("\n") + "\n").unwrap();
    let yaml = format!(
        "name: bad\nsources:\n  - {{name: in, type: file, path: in.jsonl}}\nsinks:\n  - name: lake\n    type: parquet\n    input: in\n    path: lake\n    on_error: {on_error}\n    schema:\n      - {{name: id, type: int32, nullable: false}}\n      - {{name: price, type: decimal, precision: 5, scale: 2}}\n"
    );
    std::fs::write(dir.path().join("p.yaml"), yaml).unwrap();
    let o = weir(&["run", "--no-progress", "p.yaml"]).cwd(dir.path()).run();
    (dir, o)
}

#[test]
fn a_record_that_does_not_fit_the_schema_fails_the_run_naming_column_and_value_or_is_skipped() {
    let lines =
        [r#"{"id": 1, "price": "1.50"}"#, r#"{"id": 2, "price": 1.234}"#, r#"{"id": 3000000000}"#, r#"{"price": 2}"#, r#"{"id": 5}"#];
    let (_dir, o) = bad_input_run(&lines, "fail");
    assert_ne!(o.code(), Some(0));
    assert!(
        o.stderr.contains("column `price` is decimal(5, 2)") && o.stderr.contains("more than 2 digits after the point"),
        "{}",
        o.stderr
    );
    let (dir, o) = bad_input_run(&lines, "skip");
    o.expect_code(0);
    let got = canonical(rows(&dir.path().join("lake")));
    let want = canonical(vec![r#"{"id": 1, "price": "1.50"}"#.into(), r#"{"id": 5, "price": null}"#.into()]);
    assert_same_multiset("skipped bad records", got, want);
    let all = format!("{}{}", o.stdout, o.stderr);
    assert!(all.contains("lake 5 in (2 committed) (3 dropped: 3 bad)"), "the summary counts the three: {all}");
}

#[test]
fn the_reader_never_sees_a_staged_file_before_its_checkpoint_completes() {
    let dir = tmp();
    let (state, out) = (dir.path().join("state"), dir.path().join("lake"));
    // One checkpoint a minute: a run killed after a few seconds has staged
    // files at most, none published.
    let mut run = cmd(Backend::Memory, 2, &state, &out).set("checkpoint.interval", "60s").set("sources.events.rate_limit", "2000").spawn();
    std::thread::sleep(Duration::from_millis(600));
    assert!(kill_after(&mut run, Duration::ZERO), "the run ended before the kill");
    assert!(parquet_files(&out).is_empty(), "published without a checkpoint: {:?}", parquet_files(&out));
    cmd(Backend::Memory, 2, &state, &out).set("sources.events.rate_limit", "1000000000").ok();
    assert_reference_rows("after a run that never checkpointed", &out);
    assert!(staged(&out).is_empty(), "the crashed run's files are removed: {:?}", staged(&out));
}

//! The dead letter is output committed with checkpoints: across kill -9 at
//! random moments and at protocol points, SIGTERM, restores at another
//! parallelism and savepoints, every bad source line and every late record
//! appears exactly once in the committed dead-letter file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ckpt::{checkpoint_dirs, kill_after, write_pipeline, Rng};
use super::records::assert_same_multiset;
use super::util::{hidden_files, sink_lines, tmp, wait_until, weir, weir_run, Weir};

/// Bad lines: 50 at the start of each file, then one in every 97.
fn is_bad(line: usize) -> bool {
    line < 50 || line % 97 == 0
}

/// Two input files of `n` lines each; returns (good lines, bad lines).
fn write_inputs(dir: &Path, n: usize) -> (Vec<String>, Vec<String>) {
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    std::fs::create_dir_all(dir).unwrap();
    for f in 0..2 {
        let mut text = String::new();
        for i in 0..n {
            let line = if is_bad(i) {
                let l = format!("{{\"id\": {f}{i:06}, broken line {f}:{i}");
                bad.push(l.clone());
                l
            } else {
                let l = format!(r#"{{"id":{},"user":"u{}","amount":1,"ts":{}}}"#, f * 1_000_000 + i, i % 7, i * 10);
                good.push(l.clone());
                l
            };
            text.push_str(&line);
            text.push('\n');
        }
        std::fs::write(dir.join(format!("in-{f}.jsonl")), text).unwrap();
    }
    (good, bad)
}

/// The `record` of every committed dead-letter entry, each parsed as JSON
/// with its origin checked.
fn dead_records(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("dead letter line {l:?} is not JSON: {e}"));
            assert!(e["reason"].as_str().is_some_and(|r| !r.is_empty()), "entry without a reason: {l}");
            e["record"].as_str().unwrap_or_else(|| panic!("entry without a record: {l}")).to_string()
        })
        .collect()
}

/// No entry committed twice, none that is not a bad input line.
#[track_caller]
fn assert_no_doubles(what: &str, got: &[String], bad: &[String]) {
    let mut seen = BTreeMap::new();
    for r in got {
        *seen.entry(r).or_insert(0) += 1;
    }
    let doubled: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "{what}: dead-letter entries committed twice: {doubled:?}");
    let strangers: Vec<_> = seen.keys().filter(|r| !bad.contains(r)).collect();
    assert!(strangers.is_empty(), "{what}: dead-letter entries for no bad line: {strangers:?}");
}

/// The id of the newest complete checkpoint (0: none).
fn latest_complete(state: &Path) -> u64 {
    let ids = checkpoint_dirs(state).into_iter().filter(|d| d.join("_metadata").is_file());
    ids.filter_map(|d| d.file_name()?.to_str()?.strip_prefix("chk-")?.parse().ok()).max().unwrap_or(0)
}

struct DeadJob {
    _dir: tempfile::TempDir,
    pipeline: String,
    state: PathBuf,
    out: PathBuf,
    dead: PathBuf,
}

impl DeadJob {
    fn new(body: &str) -> (DeadJob, PathBuf) {
        let dir = tmp();
        let root = dir.path().to_path_buf();
        let dead = root.join("dead").join("bad.jsonl");
        let yaml = body.replace("ROOT", &root.display().to_string());
        let pipeline = write_pipeline(&root, "dead", &yaml);
        (DeadJob { pipeline, state: root.join("state"), out: root.join("out"), dead, _dir: dir }, root)
    }

    fn run(&self, p: u32, restore: bool) -> Weir {
        let w = weir_run(&self.pipeline, p).set("state.dir", &self.state).set("sinks.out.path", &self.out);
        if restore {
            w.arg("--restore").arg("latest")
        } else {
            w
        }
    }

    fn savepoint(&self, sub: &str) -> Weir {
        weir(&["savepoint", sub, &self.pipeline]).set("state.dir", &self.state)
    }

    #[track_caller]
    fn assert_no_segments_left(&self) {
        let left: Vec<String> = hidden_files(self.dead.parent().unwrap()).into_iter().filter(|n| n.ends_with(".inprogress")).collect();
        assert!(left.is_empty(), "dead-letter segments left: {left:?}");
        let h = hidden_files(&self.out);
        assert!(h.is_empty(), "in-progress parts left: {h:?}");
    }
}

const SOURCE_DEAD_LETTER: &str = r#"name: dead_letter_crash
parallelism: 2
state: {dir: ROOT/state}
checkpoint: {interval: 100ms, mode: exactly_once, alignment: aligned}
sources:
  - name: events
    type: file
    path: ROOT/in/*.jsonl
    rate_limit: 3000
    on_error: dead_letter
    dead_letter: ROOT/dead/bad.jsonl
operators:
  - {name: unique, type: dedup, input: events, key: [id]}
sinks:
  - {name: out, type: file, input: unique, path: ROOT/out}
"#;

#[test]
fn dead_letter_entries_are_committed_exactly_once_across_crashes_restores_and_savepoints() {
    let (job, root) = DeadJob::new(SOURCE_DEAD_LETTER);
    let (good, bad) = write_inputs(&root.join("in"), 15_000);
    let mut rng = Rng::from_env("dead_letter");
    // (parallelism, faults, how the run ends) of each run before the last.
    let steps: [(u32, &str, &str); 9] = [
        (2, "", "kill"),
        (2, "", "kill"),
        (3, "", "kill"),
        (3, "", "term"),
        (1, "", "kill"),
        (2, "crash=after_metadata:2", "crash"),
        (2, "crash=before_sink_commit:2", "crash"),
        (2, "", "savepoint"),
        (3, "", "kill after a checkpoint"),
    ];
    let mut savepoint: Option<PathBuf> = None;
    for (i, (p, faults, end)) in steps.iter().enumerate() {
        let what = format!("step {i} (-p {p}, {end} {faults})");
        let mut cmd = match savepoint.take() {
            Some(sp) => weir(&["restore", &sp.display().to_string(), &job.pipeline, "--no-progress", "-p", &p.to_string()])
                .set("state.dir", &job.state)
                .set("sinks.out.path", &job.out),
            None => job.run(*p, i > 0),
        };
        if !faults.is_empty() {
            cmd = cmd.env("WEIR_FAULTS", faults);
        }
        let mut run = cmd.spawn();
        match *end {
            "kill" => {
                let killed = kill_after(&mut run, rng.millis(150, 600));
                assert!(killed, "{what}: the run ended before the kill; make the input longer");
            }
            "kill after a checkpoint" => {
                // A run restored from a savepoint must checkpoint before it
                // dies, or `latest` goes back before the savepoint (issue 10 #3).
                let before = latest_complete(&job.state);
                assert!(wait_until(Duration::from_secs(20), || latest_complete(&job.state) > before), "{what}: no checkpoint");
                assert!(kill_after(&mut run, rng.millis(0, 300)), "{what}: the run ended before the kill");
            }
            "term" => {
                std::thread::sleep(rng.millis(150, 600));
                run.terminate();
                run.wait_for(Duration::from_secs(20)).expect_code(0);
            }
            "crash" => {
                let o = run.wait_for(Duration::from_secs(30));
                assert_eq!(o.code(), None, "{what}: expected the injected crash; stderr:\n{}", o.stderr);
            }
            "savepoint" => {
                let sock = job.state.join("control.sock");
                assert!(wait_until(Duration::from_secs(20), || sock.exists()), "{what}: no control socket");
                std::thread::sleep(rng.millis(100, 400));
                // A savepoint that does not stop, then one that does.
                job.savepoint("trigger").ok();
                let target = root.join("sps");
                let stop = job.savepoint("trigger").arg("--stop").arg("--target").arg(target.display().to_string()).run();
                run.wait_for(Duration::from_secs(20)).expect_code(0);
                savepoint = Some(super::savepoint::savepoint_path(&stop));
            }
            _ => unreachable!(),
        }
        assert_no_doubles(&what, &dead_records(&job.dead), &bad);
    }
    let last = job.run(2, true).ok();
    assert!(!last.stderr.contains("No complete checkpoint"), "the last run restored nothing:\n{}", last.stderr);
    assert_same_multiset("published output", sink_lines(&job.out), good);
    assert_same_multiset("committed dead letter", dead_records(&job.dead), bad);
    job.assert_no_segments_left();
}

const LATE_DEAD_LETTER: &str = r#"name: late_crash
parallelism: 1
state: {dir: ROOT/state}
checkpoint: {interval: 100ms, mode: exactly_once, alignment: aligned}
sources:
  - name: events
    type: file
    path: ROOT/in/*.jsonl
    rate_limit: 4000
    event_time: {field: ts, max_out_of_orderness: 1s}
operators:
  - name: per_user
    type: aggregate
    input: events
    key: [user]
    window: {type: tumbling, size: 1s}
    aggregates: [{fn: count, as: n}]
    dead_letter: ROOT/dead/bad.jsonl
sinks:
  - {name: out, type: file, input: per_user, path: ROOT/out}
"#;

#[test]
fn late_records_dead_lettered_by_an_aggregate_are_committed_exactly_once_across_crashes() {
    let (job, root) = DeadJob::new(LATE_DEAD_LETTER);
    // One file, in time order, with a record of the first (long fired)
    // window every 150 lines after line 1000: late whatever the timing.
    let dir = root.join("in");
    std::fs::create_dir_all(&dir).unwrap();
    let (mut text, mut late) = (String::new(), Vec::new());
    for i in 0..16_000usize {
        let ts = if i > 1000 && i % 150 == 0 { i % 900 } else { i * 10 };
        let line = format!(r#"{{"id":{i},"user":"u{}","ts":{ts}}}"#, i % 5);
        if i > 1000 && i % 150 == 0 {
            late.push(line.clone());
        }
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(dir.join("in.jsonl"), text).unwrap();
    let mut rng = Rng::from_env("late_dead_letter");
    for i in 0..5 {
        let mut run = job.run(1, i > 0).spawn();
        assert!(kill_after(&mut run, rng.millis(150, 600)), "run {i} ended before the kill; make the input longer");
        assert_no_doubles(&format!("after kill {i}"), &dead_records(&job.dead), &late);
    }
    job.run(1, true).ok();
    assert_same_multiset("committed late records", dead_records(&job.dead), late);
    job.assert_no_segments_left();
}

#[test]
fn without_checkpoints_the_dead_letter_is_written_as_before() {
    let (job, root) =
        DeadJob::new(&SOURCE_DEAD_LETTER.replace("checkpoint: {interval: 100ms, mode: exactly_once, alignment: aligned}\n", ""));
    let (good, bad) = write_inputs(&root.join("in"), 500);
    weir_run(&job.pipeline, 2).set("sinks.out.path", &job.out).set("sources.events.rate_limit", "1000000").ok();
    assert_same_multiset("output", sink_lines(&job.out), good);
    assert_same_multiset("dead letter", dead_records(&job.dead), bad);
    let names: Vec<String> =
        std::fs::read_dir(job.dead.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["bad.jsonl"], "nothing but the file");
}

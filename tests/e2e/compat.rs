//! State written by an earlier version restores: a savepoint taken by weir
//! before exact sums (testdata/compat/accumulators-v2: running, tumbling
//! and session aggregates with sum, avg, min, max and count_distinct, a
//! `--stop` savepoint after 10 400 of 20 000 datagen rows, and the windows
//! that version had committed by then) is restored by this build, which
//! ends as a run of this build over the whole input would.

use std::collections::BTreeMap;
use std::path::Path;

use super::util::{repo, sink_lines, tmp, weir};

/// The fixture's pipeline with its state directory and outputs under `dir`.
fn pipeline(dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(repo().join("testdata/compat/accumulators-v2/pipeline.yaml")).unwrap();
    let path = dir.join("pipeline.yaml");
    std::fs::write(
        &path,
        text.replace("STATE", &dir.join("state").display().to_string()).replace("OUT", &dir.join("out").display().to_string()),
    )
    .unwrap();
    path
}

/// A window's identity in an output line: (user, window_start).
fn window_of(line: &str) -> (String, i64) {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    (v["user"].to_string(), v["window_start"].as_i64().unwrap())
}

#[test]
fn a_savepoint_of_the_layout_before_exact_sums_restores_and_ends_like_a_whole_run() {
    let (restored, whole) = (tmp(), tmp());
    let fixture = repo().join("testdata/compat/accumulators-v2");
    let sp = restored.path().join("savepoint");
    let copied = std::process::Command::new("cp").arg("-r").arg(fixture.join("savepoint")).arg(&sp).status().unwrap();
    assert!(copied.success());
    let o = weir(&["restore", sp.to_str().unwrap(), pipeline(restored.path()).to_str().unwrap(), "--no-progress"]).run();
    o.expect_code(0);
    let o = weir(&["run", pipeline(whole.path()).to_str().unwrap(), "--no-progress"]).run();
    o.expect_code(0);
    let out = |dir: &Path, sink: &str| sink_lines(&dir.join("out").join(sink));

    // Running aggregate: each user's last result, as the whole run ends.
    let last = |lines: Vec<String>| -> BTreeMap<String, String> {
        lines.into_iter().map(|l| (serde_json::from_str::<serde_json::Value>(&l).unwrap()["user"].to_string(), l)).collect()
    };
    let (got, want) = (last(out(restored.path(), "running")), last(out(whole.path(), "running")));
    assert_eq!(got.len(), 50);
    for (user, line) in &want {
        assert_eq!(got.get(user), Some(line), "user {user}: restored from the old savepoint vs the whole run");
    }

    // Windows: those the old version committed before the savepoint, and the
    // restored run's, are every window of the whole run once; the restored
    // run's have the whole run's values.
    for sink in ["tumbling", "sessions"] {
        let before = std::fs::read_to_string(fixture.join(format!("{sink}-before.jsonl"))).unwrap();
        let after = out(restored.path(), sink);
        let whole_run = out(whole.path(), sink);
        let mut seen: Vec<(String, i64)> = before.lines().map(window_of).chain(after.iter().map(|l| window_of(l))).collect();
        let mut all: Vec<(String, i64)> = whole_run.iter().map(|l| window_of(l)).collect();
        seen.sort();
        all.sort();
        assert_eq!(seen, all, "{sink}: every window once across the versions");
        for line in &after {
            assert!(whole_run.contains(line), "{sink}: {line} is not in the whole run's output");
        }
    }
}

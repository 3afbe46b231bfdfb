//! `weir plan`: what `run --restore` would do, decided by the same code and
//! written nowhere; a refusal is the one `run` gives, with the same reason.

use super::ckpt::{abs, fast, tree, write_pipeline, Job, PIPELINE};
use super::util::{tmp, weir, Outcome};

impl Job {
    /// `weir plan pipelines/checkpointed.yaml` on this job's dirs.
    fn plan(&self, args: &[&str]) -> Outcome {
        let mut w = weir(&["plan", PIPELINE]).set("state.dir", &self.state).set("sinks.out.path", &self.out);
        for a in args {
            w = w.arg(a);
        }
        w.run()
    }
}

#[test]
fn plan_says_what_a_restore_keeps_and_changes_nothing() {
    let job = Job::new();
    fast(job.cmd()).ok();
    let before = tree(&job.state);
    let last = job.checkpoints().last().cloned().expect("a checkpoint");

    let o = job.plan(&["--restore", "latest"]);
    o.expect_code(0);
    let id: u64 = last.file_name().unwrap().to_string_lossy().trim_start_matches("chk-").parse().unwrap();
    assert!(o.stdout.contains(&format!("Restores checkpoint {id} (parallelism 2)")), "{}", o.stdout);
    for (node, kind, state) in [("events", "source", "resumes"), ("unique", "dedup", "kept"), ("per_user", "aggregate", "kept"), ("out", "sink", "kept")] {
        let line = o.stdout.lines().find(|l| l.split_whitespace().next() == Some(node)).unwrap_or_else(|| panic!("no line for {node}: {}", o.stdout));
        assert_eq!(line.split_whitespace().take(3).collect::<Vec<_>>(), [node, kind, state], "{line}");
    }
    assert!(o.stdout.contains(&format!("The first checkpoint of the run is {}.", id + 1)), "{}", o.stdout);

    let rescaled = job.plan(&["--restore", "latest", "-p", "3", "--format", "json"]);
    rescaled.expect_code(0);
    let doc: serde_json::Value = serde_json::from_str(&rescaled.stdout).unwrap();
    assert_eq!(doc["restored"]["id"], id);
    for n in doc["nodes"].as_array().unwrap() {
        assert_eq!(n["rescaled"], serde_json::json!([2, 3]), "{n}");
    }
    assert_eq!(tree(&job.state), before, "a plan writes nothing into the state directory");

    // Nothing to restore: from the beginning, and no directory is created.
    let fresh = Job::new();
    let o = fresh.plan(&[]);
    o.expect_code(0);
    assert!(o.stdout.starts_with("Starts from the beginning"), "{}", o.stdout);
    assert!(o.stdout.contains("unique    dedup      new"), "{}", o.stdout);
    assert!(!fresh.state.exists(), "a plan creates no state directory");
}

#[test]
fn plan_refuses_what_run_refuses_with_the_same_reason_and_changes_nothing() {
    let job = Job::new();
    fast(job.cmd()).ok();
    let before = tree(&job.state);

    // The dedup keyed by another field: its state cannot be mapped.
    let o = job.plan(&["--restore", "latest", "--set", "operators.unique.key.0=user"]);
    o.expect_code(2);
    let reason = o.stdout.strip_prefix("Refused: ").unwrap_or_else(|| panic!("{}", o.stdout)).trim().to_string();
    assert!(reason.contains("operator `unique` was dedup by [id]"), "{reason}");
    let run = job.restore().set("operators.unique.key.0", "user").run();
    run.expect_code(2);
    assert!(run.stderr.contains(&reason), "run refuses with the plan's reason {reason:?}:\n{}", run.stderr);

    // The dedup removed: its state is dropped only when the user says so.
    let dir = tmp();
    let text = std::fs::read_to_string(super::util::repo().join(PIPELINE)).unwrap();
    let without = text
        .replace("testdata/inputs/events/*.jsonl", &abs("testdata/inputs/events/*.jsonl"))
        .lines()
        .filter(|l| !l.contains("name: unique"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("input: unique", "input: events");
    let p = write_pipeline(dir.path(), "without_dedup", &without);
    let plan = |extra: &[&str]| {
        let mut w = weir(&["plan", &p, "--restore", "latest"]).set("state.dir", &job.state).set("sinks.out.path", &job.out);
        for a in extra {
            w = w.arg(a);
        }
        w.run()
    };
    let refused = plan(&[]);
    refused.expect_code(2);
    assert!(refused.stdout.contains("state of operators this pipeline does not have: unique"), "{}", refused.stdout);
    let allowed = plan(&["--allow-non-restored-state"]);
    allowed.expect_code(0);
    assert!(allowed.stdout.contains("dropped (--allow-non-restored-state)"), "{}", allowed.stdout);
    assert!(allowed.stdout.lines().any(|l| l.trim_start().starts_with("unique") && l.contains("dropped")), "{}", allowed.stdout);
    assert_eq!(tree(&job.state), before, "neither plans nor a refused run change the state directory");
}

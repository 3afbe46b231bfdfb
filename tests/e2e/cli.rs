//! The command line contract: exit codes, `--set`, `${ENV}`, `-p`.

use super::records::parse;
use super::util::{sink_lines, tmp, weir, weir_run};

#[test]
fn missing_pipeline_file_exits_2() {
    let o = weir(&["run", "pipelines/does-not-exist.yaml", "--no-progress"]).run();
    o.expect_code(2);
    o.expect_stderr_contains("does-not-exist.yaml");
    weir(&["validate", "pipelines/does-not-exist.yaml"]).run().expect_code(2);
}

#[test]
fn bad_flag_exits_2() {
    weir(&["run", "pipelines/dedup.yaml", "--no-such-flag"]).run().expect_code(2);
    weir(&["no-such-command"]).run().expect_code(2);
    weir(&["run", "pipelines/dedup.yaml", "-p", "not-a-number"]).run().expect_code(2);
}

#[test]
fn bad_override_exits_2_and_names_it() {
    let o = weir(&["run", "pipelines/dedup.yaml", "--no-progress", "--set", "no_such_key.deeper=1"]).run();
    o.expect_code(2);
    o.expect_stderr_contains("no_such_key");
    let o = weir(&["validate", "pipelines/dedup.yaml", "--set", "operators.unique.ttl=soon"]).run();
    o.expect_code(2);
    o.expect_stderr_contains("--set operators.unique.ttl=soon");
}

#[test]
fn validate_prints_nothing_alarming_for_a_valid_pipeline() {
    let o = weir(&["validate", "pipelines/tumbling.yaml"]).run();
    o.expect_code(0);
    assert!(o.stdout.contains("valid"), "{}", o.stdout);
}

#[test]
fn set_overrides_reach_the_running_pipeline() {
    // Window size by name path, sink path by index: windows are 20 s long.
    let dir = tmp();
    let out = dir.path().join("out");
    weir_run("pipelines/tumbling.yaml", 1).set("operators.per_user.window.size", "20s").set("sinks.0.path", &out).ok();
    let lines = sink_lines(&out);
    assert!(!lines.is_empty());
    for l in &lines {
        let o = parse(l);
        let (s, e) = (o["window_start"].as_i64().unwrap(), o["window_end"].as_i64().unwrap());
        assert_eq!((e - s, s % 20_000), (20_000, 0), "{l}");
    }
}

#[test]
fn parallelism_flag_and_set_agree() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    weir_run("pipelines/dedup.yaml", 3).set("sinks.out.path", &a).ok();
    weir(&["run", "pipelines/dedup.yaml", "--no-progress", "--set", "parallelism=3"]).set("sinks.out.path", &b).ok();
    // Three sink subtasks each publish their own part file.
    for d in [&a, &b] {
        let names: Vec<String> = super::util::part_files(d).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        for s in 0..3 {
            // part-CHECKPOINT-SUBTASK-SEQ-RUN.jsonl
            let subtask = format!("{s:04}");
            assert!(names.iter().any(|n| n.split('-').nth(2) == Some(subtask.as_str())), "{}: {names:?}", d.display());
        }
        assert!(names.iter().all(|n| n.ends_with(".jsonl")), "{names:?}");
    }
}

#[test]
fn env_variables_are_expanded_with_defaults() {
    let dir = tmp();
    let out = dir.path().join("env-out");
    let pipeline = dir.path().join("env.yaml");
    std::fs::write(
        &pipeline,
        "name: env\n\
         sources:\n\
         \x20 - {name: orders, type: file, path: \"${WEIR_E2E_INPUT}\"}\n\
         operators:\n\
         \x20 - {name: unique, type: dedup, input: orders, key: [\"${WEIR_E2E_KEY:order_id}\"]}\n\
         sinks:\n\
         \x20 - {name: out, type: file, input: unique, path: \"${WEIR_E2E_OUT}\"}\n",
    )
    .unwrap();
    let input = super::util::repo().join("testdata/inputs/orders_parts/orders-0.jsonl");
    let p = pipeline.display().to_string();
    weir(&["run", &p, "--no-progress"]).env("WEIR_E2E_INPUT", &input).env("WEIR_E2E_OUT", &out).env_remove("WEIR_E2E_KEY").ok();
    let want = super::reference::dedup(&super::util::input_lines("testdata/inputs/orders_parts/orders-0.jsonl"), &["order_id"]);
    super::records::assert_same_multiset("env pipeline", sink_lines(&out), want);

    // An unset variable without a default is a located config error.
    let o = weir(&["validate", &p]).env("WEIR_E2E_OUT", &out).env_remove("WEIR_E2E_INPUT").run();
    o.expect_code(2);
    o.expect_stderr_contains("WEIR_E2E_INPUT");
    o.expect_stderr_contains(&format!("{p}:3:"));
}

#[test]
fn runtime_failure_exits_1_and_names_the_operator() {
    // The sink directory cannot be created: a regular file is in the way.
    let dir = tmp();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "x").unwrap();
    let o = weir_run("pipelines/dedup.yaml", 1).set("sinks.out.path", blocker.join("out")).run();
    o.expect_code(1);
    o.expect_stderr_contains("`out`");
}

/// `--log-format json`: every log line is one JSON object with the time,
/// the level, the message and the event's fields at the top level.
#[test]
fn json_logs_are_one_object_per_line_with_the_fields() {
    let dir = tmp();
    let o = weir_run("pipelines/dedup.yaml", 2).set("sinks.out.path", dir.path().join("out")).arg("--log-format").arg("json").ok();
    let logs: Vec<serde_json::Value> = o.stderr.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    let started = logs.iter().find(|v| v["message"] == "Pipeline started.").unwrap_or_else(|| panic!("no start line:\n{}", o.stderr));
    assert_eq!((started["level"].as_str(), started["pipeline"].as_str()), (Some("INFO"), Some("dedup")), "{started}");
    assert_eq!(started["parallelism"], 2, "{started}");
    assert!(started["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{started}");
    // Nothing else is a log line: the end-of-run summary only.
    let other: Vec<&str> = o.stderr.lines().filter(|l| !l.starts_with('{')).collect();
    assert!(other.len() <= 1, "lines that are not JSON objects: {other:?}");
}

/// Without a terminal, completed checkpoints are summed up (a line per
/// minute and one at the end) instead of a line each; `each` keeps a line
/// per checkpoint. The summary counts every checkpoint the run completed.
#[test]
fn without_a_terminal_checkpoints_are_summed_up_and_each_keeps_a_line_per_checkpoint() {
    let dir = tmp();
    let run = |log: Option<&str>, out: &str| {
        let mut w = weir_run("pipelines/checkpointed.yaml", 2)
            .set("state.dir", dir.path().join(format!("state-{out}")))
            .set("sinks.out.path", dir.path().join(out))
            .arg("--log-format")
            .arg("json")
            .env_remove("WEIR_CHECKPOINT_LOG");
        if let Some(log) = log {
            w = w.arg("--checkpoint-log").arg(log);
        }
        let o = w.ok();
        o.stderr.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).collect::<Vec<_>>()
    };
    let summed = run(None, "auto");
    let each_line = summed.iter().filter(|v| v["message"] == "Checkpoint complete.").count();
    let summaries: Vec<_> = summed.iter().filter(|v| v["message"] == "Checkpoints since the last summary.").collect();
    assert_eq!(each_line, 0, "a line per checkpoint without a terminal: {summed:?}");
    // A run of a few seconds: its one summary is the one at the end.
    assert_eq!(summaries.len(), 1, "{summed:?}");
    let s = summaries[0];
    let completed = s["completed"].as_u64().unwrap();
    assert!(completed >= 3, "a 150 ms interval over a run of seconds: {s}");
    // The final checkpoint is the newest one summed up.
    let last_final = summed.iter().find(|v| v["message"] == "Final checkpoint complete.").unwrap_or_else(|| panic!("{summed:?}"));
    assert_eq!(s["last_checkpoint"], last_final["checkpoint"], "{s}");
    assert!(s["slowest_ms"].as_u64().is_some() && s["slowest_checkpoint"].as_u64().unwrap() >= 1, "{s}");

    let each = run(Some("each"), "each");
    let lines = each.iter().filter(|v| v["message"] == "Checkpoint complete.").count();
    assert!(lines >= 3, "{each:?}");
    assert!(each.iter().all(|v| v["message"] != "Checkpoints since the last summary."), "{each:?}");
}

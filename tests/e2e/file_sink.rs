//! The file sink's contract on disk: rolling part files, names, reruns.

use std::time::Duration;

use super::ckpt::{self, assert_exactly_once, fast, kill_after, Job};
use super::records::assert_same_multiset;
use super::reference;
use super::util::{hidden_files, input_lines, part_files, sink_lines, tmp, wait_until, weir, weir_run};

#[test]
fn small_max_file_bytes_rolls_parts_without_splitting_lines() {
    let expected = reference::dedup(&input_lines("testdata/inputs/orders.jsonl"), &["order_id"]);
    let dir = tmp();
    let out = dir.path().join("out");
    weir_run("pipelines/dedup.yaml", 2).set("sinks.out.path", &out).set("sinks.out.max_file_bytes", "10000").ok();
    let parts = part_files(&out);
    assert!(parts.len() >= 10, "expected many rolled parts, got {}", parts.len());
    for p in &parts {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        // part-CHECKPOINT-SUBTASK-SEQ-RUN.jsonl, RUN the sink instance's 8 hex digits.
        let fields: Vec<&str> = name.strip_prefix("part-").and_then(|n| n.strip_suffix(".jsonl")).unwrap_or("").split('-').collect();
        let widths: Vec<usize> = fields.iter().map(|f| f.len()).collect();
        let ok = widths == [10, 4, 6, 8] && fields.iter().all(|f| f.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(ok, "unexpected part file name {name}");
    }
    assert!(hidden_files(&out).is_empty());
    assert_same_multiset("rolled parts", sink_lines(&out), expected);
}

#[test]
fn a_second_run_into_the_same_directory_keeps_the_first_runs_parts() {
    let once = reference::dedup(&input_lines("testdata/inputs/orders.jsonl"), &["order_id"]);
    let dir = tmp();
    let out = dir.path().join("out");
    weir_run("pipelines/dedup.yaml", 2).set("sinks.out.path", &out).ok();
    let first = part_files(&out);
    weir_run("pipelines/dedup.yaml", 3).set("sinks.out.path", &out).ok();
    assert!(first.iter().all(|f| f.exists()));
    let twice: Vec<String> = once.iter().chain(once.iter()).cloned().collect();
    assert_same_multiset("two runs", sink_lines(&out), twice);
}

#[test]
fn restoring_a_checkpoint_into_a_new_output_directory_does_not_fail_on_parts_published_elsewhere() {
    let job = Job::new();
    fast(job.cmd()).ok();
    // The final checkpoint staged the last parts and they were published
    // into the old directory, so the new one has none of them.
    let last = job.checkpoints().pop().expect("a retained checkpoint");
    let staged = std::fs::read_dir(&last).unwrap().flatten().flat_map(|b| std::fs::read_dir(b.path()).into_iter().flatten().flatten());
    let lists_parts = staged.filter_map(|f| std::fs::read(f.path()).ok()).any(|b| b.windows(6).any(|w| w == b".part-"));
    assert!(lists_parts, "the final checkpoint must list staged parts for this test to mean anything");
    let before = job.lines();
    let new_out = job.dir.path().join("new-out");
    for attempt in 0..2 {
        let o = fast(job.cmd().set("sinks.out.path", &new_out).arg("--restore").arg(last.display().to_string())).run();
        o.expect_code(0);
        assert!(!o.stderr.contains("publishing"), "attempt {attempt}: {}", o.stderr);
    }
    assert!(sink_lines(&new_out).is_empty(), "nothing was left to produce");
    assert!(hidden_files(&new_out).is_empty());
    assert_eq!(job.lines(), before, "the old output is untouched");
    assert_exactly_once("the first run", before);
}

#[test]
fn a_restore_after_a_consumer_moved_the_published_parts_away_succeeds() {
    let job = Job::new();
    let taken = job.dir.path().join("taken");
    std::fs::create_dir_all(&taken).unwrap();
    let mut run = job.cmd().set("sources.events.rate_limit", "600").spawn();
    // Kill right after a publication: the newest complete checkpoint then
    // lists parts that are already published.
    assert!(wait_until(Duration::from_secs(20), || part_files(&job.out).len() >= 2), "no output published");
    assert!(kill_after(&mut run, Duration::ZERO), "the run ended before the kill");
    for (i, part) in part_files(&job.out).into_iter().enumerate() {
        std::fs::rename(&part, taken.join(format!("{i:04}-{}", part.file_name().unwrap().to_string_lossy()))).unwrap();
    }
    for attempt in 0..2 {
        // The second restore starts from the first one's final checkpoint.
        let o = fast(job.restore()).ok();
        assert!(!o.stderr.contains("No complete checkpoint"), "attempt {attempt} restored nothing:\n{}", o.stderr);
    }
    let mut lines = sink_lines(&taken);
    lines.extend(job.lines());
    assert_exactly_once("parts moved away before the restore", lines);
    job.assert_no_in_progress_files();
}

#[test]
fn a_restore_that_finds_no_complete_checkpoint_removes_the_crashed_runs_hidden_parts() {
    let expected = reference::dedup(&ckpt::INPUTS.iter().flat_map(|f| input_lines(f)).collect::<Vec<_>>(), &["id"]);
    let dir = tmp();
    // The sink gets records from the start; the run dies while writing its
    // first checkpoint, so no checkpoint is complete.
    let yaml = format!(
        r#"name: no_complete_checkpoint
parallelism: 2
state: {{dir: unused}}
checkpoint: {{interval: 500ms}}
sources:
  - {{name: events, type: file, path: {}/*.jsonl, rate_limit: 1000}}
operators:
  - {{name: unique, type: dedup, input: events, key: [id]}}
sinks:
  - {{name: out, type: file, input: unique, path: unused}}
"#,
        ckpt::abs("testdata/inputs/events")
    );
    let pipeline = ckpt::write_pipeline(dir.path(), "p", &yaml);
    let (state, out) = (dir.path().join("state"), dir.path().join("out"));
    let cmd = || weir_run(&pipeline, 2).set("state.dir", &state).set("sinks.out.path", &out);
    let o = cmd().env("WEIR_FAULTS", "crash=after_prepare:1").run();
    assert_eq!(o.code(), None, "expected the injected crash; stderr:\n{}", o.stderr);
    assert!(!hidden_files(&out).is_empty(), "the crashed run must leave hidden parts for this test to mean anything");
    let o = cmd().set("sources.events.rate_limit", "1000000000").arg("--restore").arg("latest").ok();
    o.expect_stderr_contains("No complete checkpoint to restore");
    let hidden = hidden_files(&out);
    assert!(hidden.is_empty(), "hidden parts left: {hidden:?}");
    assert_same_multiset("restore without a complete checkpoint", sink_lines(&out), expected);
}

/// A running aggregate restored at a lower parallelism writes the later
/// updates of most keys from another subtask than the earlier ones: reading
/// the parts in name order must still end every key on its final value.
#[test]
fn after_a_rescale_the_last_update_of_every_key_in_part_name_order_is_its_final_value() {
    let dir = tmp();
    let (state, out) = (dir.path().join("state"), dir.path().join("out"));
    let input = input_lines("testdata/inputs/orders.jsonl");
    let mut want: std::collections::BTreeMap<String, u64> = Default::default();
    for l in &input {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        *want.entry(v["user"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let yaml = format!(
        "name: running-rescale
state: {{backend: memory, dir: {state}}}
checkpoint: {{interval: 100ms}}
sources:
  - {{name: orders, type: file, path: {input}, rate_limit: 1000}}
operators:
  - {{name: totals, type: aggregate, input: orders, key: [user], emit_interval: 50ms, aggregates: [{{fn: count, as: n}}]}}
sinks:
  - {{name: out, type: file, input: totals, path: {out}}}
",
        state = state.display(),
        input = super::util::repo().join("testdata/inputs/orders.jsonl").display(),
        out = out.display()
    );
    let pipeline = dir.path().join("p.yaml");
    std::fs::write(&pipeline, yaml).unwrap();
    let p = pipeline.display().to_string();
    let run = weir(&["run", &p, "--no-progress", "-p", "3"]).spawn();
    assert!(wait_until(Duration::from_secs(30), || part_files(&out).len() >= 6), "no output published at parallelism 3");
    let stop = weir(&["savepoint", "trigger", &p, "--stop"]).run();
    stop.expect_code(0);
    let sp = stop.stdout.lines().find_map(|l| l.strip_prefix("Savepoint completed. Path: ")).expect("a savepoint path").to_string();
    let first = run.wait_for(Duration::from_secs(30));
    first.expect_code(0);
    assert!(!first.stderr.contains("Input exhausted"), "the stop came too late to mean anything");
    weir(&["restore", &sp, &p, "--no-progress", "-p", "1"]).ok();

    let mut parts = part_files(&out);
    parts.sort();
    let mut last: std::collections::BTreeMap<String, u64> = Default::default();
    for part in &parts {
        for line in std::fs::read_to_string(part).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let (user, n) = (v["user"].as_str().unwrap().to_string(), v["n"].as_u64().unwrap());
            let before = last.insert(user.clone(), n).unwrap_or(0);
            assert!(n > before, "user {user}: update n={n} after n={before} in part-name order ({})", part.display());
        }
    }
    assert_eq!(last, want);
}

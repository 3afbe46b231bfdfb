//! Checkpoints under failing writes, a stalled subtask, SIGTERM and
//! backpressure; refusals of state dirs and restores that cannot work.

use std::time::Duration;

use super::ckpt::{
    abs, assert_exactly_once, assert_no_orphans, both_backends, completed, durations_ms, fast, restored_from, write_pipeline, Backend, Job,
};
use super::util::{part_files, tmp, wait_until, weir, weir_run};

/// A run whose snapshot writes fail 30% of the time (seeded).
fn run_with_failing_writes(job: &Job) -> super::util::Outcome {
    job.cmd().set("checkpoint.tolerable_failures", "1000").env("WEIR_FAULTS", "state_write_fail=0.3,seed=42").ok()
}

both_backends! {
    fn failing_state_writes_abort_checkpoints_and_later_ones_succeed(backend: Backend) {
        let job = Job::with(backend);
        let o = run_with_failing_writes(&job);
        o.expect_stderr_contains("Checkpoint aborted.");
        o.expect_stderr_contains("Checkpoint complete.");
        job.assert_no_in_progress_files();
        assert_exactly_once(&format!("state_write_fail=0.3 {backend:?}"), job.lines());
        // Aborted checkpoints leave no orphan files.
        assert_no_orphans(&job.state);
    }
}

#[test]
fn a_stall_longer_than_the_timeout_aborts_that_checkpoint_only() {
    let job = Job::new();
    let o = job
        .cmd()
        .set("checkpoint.timeout", "300ms")
        .set("checkpoint.tolerable_failures", "5")
        .env("WEIR_FAULTS", "stall=per_user:1:1s")
        .ok();
    o.expect_stderr_contains("Injected stall.");
    let aborted: Vec<&str> = o.stderr.lines().filter(|l| l.contains("Checkpoint aborted.")).collect();
    assert!(!aborted.is_empty(), "the stalled checkpoint did not abort:\n{}", o.stderr);
    assert!(!completed(&o.stderr).is_empty(), "no checkpoint completed after the stall:\n{}", o.stderr);
    job.assert_no_in_progress_files();
    assert_exactly_once("stall 1s with timeout 300ms", job.lines());
}

/// A checkpoint held up by a stalled subtask is not silent: once it runs
/// for half its timeout a WARN names the task that has not acknowledged
/// it, and its completion is a WARN too; checkpoints after it are INFO.
#[test]
fn a_slow_checkpoint_warns_naming_the_task_it_waits_for() {
    let job = Job::new();
    let o = job.cmd().set("checkpoint.timeout", "4s").env("WEIR_FAULTS", "stall=per_user:1:3s").ok();
    let slow: Vec<&str> = o.stderr.lines().filter(|l| l.contains("Checkpoint is slow")).collect();
    assert_eq!(slow.len(), 1, "one warning for the one slow checkpoint:\n{}", o.stderr);
    assert!(slow[0].contains(" WARN ") && slow[0].contains("tasks=per_user[1]") && slow[0].contains("waiting=1"), "{}", slow[0]);
    let id = slow[0].split("checkpoint=").nth(1).and_then(|r| r.split_whitespace().next()).unwrap();
    let done = o.stderr.lines().find(|l| l.contains("Checkpoint complete.") && l.contains(&format!("checkpoint={id} "))).unwrap();
    assert!(done.contains(" WARN "), "the slow checkpoint's completion is a warning: {done}");
    assert!(o.stderr.lines().any(|l| l.contains(" INFO ") && l.contains("Checkpoint complete.")), "{}", o.stderr);
    assert_exactly_once("stall 3s with timeout 4s", job.lines());
}

#[test]
fn a_stalled_sink_chained_after_an_operator_stalls_its_task_and_that_checkpoint_times_out() {
    // `out` is the only consumer of `per_user` (a forward edge): it runs
    // chained after it, in the same task, not at the head of the chain.
    let job = Job::new();
    let o =
        job.cmd().set("checkpoint.timeout", "300ms").set("checkpoint.tolerable_failures", "5").env("WEIR_FAULTS", "stall=out:1:1s").ok();
    o.expect_stderr_contains("Injected stall.");
    assert!(o.stderr.contains("Checkpoint aborted."), "the checkpoint of the stalled sink did not time out:\n{}", o.stderr);
    assert!(!completed(&o.stderr).is_empty(), "no checkpoint completed after the stall:\n{}", o.stderr);
    job.assert_no_in_progress_files();
    assert_exactly_once("chained sink stalled 1s with timeout 300ms", job.lines());
}

#[test]
fn a_stalled_sink_chained_into_its_source_stalls_the_source_task() {
    // A file sink reading a source directly runs in the source's task.
    let dir = tmp();
    let yaml = format!(
        r#"name: stalled-source-chain
parallelism: 1
state: {{dir: {state}}}
checkpoint: {{interval: 100ms, timeout: 300ms, tolerable_failures: 5}}
sources:
  - name: gen
    type: datagen
    rows: 3000
    rate_limit: 2000
    fields:
      id: {{kind: sequence}}
sinks:
  - {{name: out, type: file, input: gen, path: {out}}}
"#,
        state = dir.path().join("state").display(),
        out = dir.path().join("out").display()
    );
    let pipeline = write_pipeline(dir.path(), "stalled-source-chain", &yaml);
    let o = weir_run(&pipeline, 1).env("WEIR_FAULTS", "stall=out:0:1s").ok();
    o.expect_stderr_contains("Injected stall.");
    assert!(o.stderr.contains("Checkpoint aborted."), "the checkpoint of the stalled sink did not time out:\n{}", o.stderr);
    let lines = super::util::sink_lines(&dir.path().join("out"));
    let mut unique = lines.clone();
    unique.sort();
    unique.dedup();
    assert_eq!((lines.len(), unique.len()), (3000, 3000), "every row exactly once after the stall");
}

#[test]
fn sigterm_takes_a_final_checkpoint_and_restore_finishes_the_job() {
    let job = Job::new();
    let run = job.cmd().spawn();
    // Stop once something is published, i.e. a checkpoint has completed.
    let published = wait_until(Duration::from_secs(20), || !part_files(&job.out).is_empty());
    assert!(published, "no part file published within 20 s");
    run.terminate();
    let stopped = run.wait_for(Duration::from_secs(10));
    stopped.expect_code(0);
    stopped.expect_stderr_contains("Stop requested; taking a final checkpoint.");
    job.assert_no_in_progress_files();
    let partial = job.lines().len();
    assert!(partial < super::ckpt::expected().len(), "the run finished before the stop; nothing to resume");
    let last = *completed(&stopped.stderr).last().expect("a checkpoint completed before the stop");
    let resumed = job.restore().ok();
    assert_eq!(restored_from(&resumed.stderr), Some(last), "restore did not use the final checkpoint of the stop");
    assert_exactly_once("SIGTERM, then --restore latest", job.lines());
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Run an unbounded datagen -> dedup -> slow blackhole for `secs`, SIGTERM,
/// and return the checkpoint durations.
fn backpressured_durations(alignment: &str) -> Vec<u64> {
    let dir = tmp();
    let yaml = format!(
        r#"name: backpressure
parallelism: 2
state: {{dir: {state}}}
checkpoint: {{interval: 200ms, alignment: {alignment}}}
sources:
  - name: events
    type: datagen
    seed: 3
    fields:
      id: {{kind: sequence}}
      device: {{kind: key, cardinality: 1000, prefix: dev-}}
operators:
  - {{name: unique, type: dedup, input: events, key: [id], ttl: 1h}}
sinks:
  - {{name: slow, type: blackhole, input: unique, rate_limit: 20000}}
"#,
        state = dir.path().join("state").display()
    );
    let pipeline = write_pipeline(dir.path(), "backpressure", &yaml);
    let run = weir_run(&pipeline, 2).spawn();
    std::thread::sleep(Duration::from_secs(4));
    run.terminate();
    let o = run.wait_for(Duration::from_secs(20));
    o.expect_code(0);
    let d = durations_ms(&o.stderr);
    assert!(d.len() >= 3, "{alignment}: only {} checkpoints completed in 4 s:\n{}", d.len(), o.stderr);
    d
}

#[test]
fn unaligned_checkpoints_are_fast_under_backpressure() {
    let aligned = backpressured_durations("aligned");
    let unaligned = backpressured_durations("unaligned");
    let (a, u) = (median(aligned.clone()), median(unaligned.clone()));
    eprintln!("checkpoint duration medians under backpressure: aligned {a} ms {aligned:?}, unaligned {u} ms {unaligned:?}");
    assert!(u * 2 < a, "unaligned median {u} ms is not less than half the aligned median {a} ms");
}

#[test]
fn a_state_dir_of_another_pipeline_is_refused_without_force() {
    let job = Job::new();
    fast(job.cmd()).ok();
    for restore in [false, true] {
        let mut cmd = fast(job.cmd()).set("name", "intruder");
        if restore {
            cmd = cmd.arg("--restore").arg("latest");
        }
        let o = cmd.run();
        o.expect_code(2);
        o.expect_stderr_contains("--force");
    }
    assert_eq!(std::fs::read_to_string(job.state.join("PIPELINE")).unwrap().trim(), "checkpointed", "a refusal changed PIPELINE");
    let o = fast(job.cmd()).set("name", "intruder").arg("--force").set("sinks.out.path", job.dir.path().join("out2")).run();
    o.expect_code(0);
    assert_eq!(std::fs::read_to_string(job.state.join("PIPELINE")).unwrap().trim(), "intruder");
}

#[test]
fn restore_without_checkpointing_exits_2() {
    let dir = tmp();
    let o = weir_run("pipelines/dedup.yaml", 1).set("sinks.out.path", dir.path().join("out")).arg("--restore").arg("latest").run();
    o.expect_code(2);
    o.expect_stderr_contains("checkpoint:");
    assert!(!dir.path().join("out").exists(), "a refused run wrote output");
    let o = weir(&["run", &abs("pipelines/dedup.yaml"), "--no-progress", "--restore", "/nonexistent/chk-0000001"]).run();
    o.expect_code(2);
}

#[test]
fn an_incremental_rocksdb_checkpoint_restores_only_as_it_was_taken() {
    let job = Job::with(Backend::RocksDb);
    fast(job.cmd()).ok();
    let chk = job.checkpoints().pop().expect("a retained checkpoint");
    assert!(chk.join("bundle-000").join("db").join("CURRENT").is_file(), "not an incremental checkpoint: {}", chk.display());
    // The same pipeline with bundles of 2 subtasks (one bundle instead of two).
    let yaml = std::fs::read_to_string(super::util::repo().join(super::ckpt::PIPELINE)).unwrap().replace("testdata/", &abs("testdata/"));
    let bundled = write_pipeline(job.dir.path(), "bundled", &format!("{yaml}bundles: {{size: 2}}\n"));
    let bundled = Backend::RocksDb.apply(weir_run(&bundled, 2).set("state.dir", &job.state).set("sinks.out.path", &job.out));
    for (what, cmd) in [("memory backend", fast(job.cmd()).set("state.backend", "memory")), ("another bundle size", fast(bundled))] {
        let before = super::ckpt::tree(&job.state);
        let o = cmd.arg("--restore").arg(chk.display().to_string()).run();
        o.expect_code(2);
        o.expect_stderr_contains("incremental RocksDB checkpoint");
        o.expect_stderr_contains("savepoint");
        assert!(super::ckpt::tree(&job.state) == before, "{what}: a refused restore changed the state dir");
    }
    // As it was taken, it restores (from the bundles' local checkpoints).
    let o = fast(job.cmd()).arg("--restore").arg(chk.display().to_string()).ok();
    o.expect_stderr_contains("Rebuilt the bundle's RocksDB.");
}

/// A checkpoint directory that cannot be created (here a file stands in its
/// way; a read-only or full disk alike) aborts that checkpoint naming that
/// cause, not only the error the tasks then meet writing into it; later
/// checkpoints complete and the output is exactly once.
#[test]
fn a_checkpoint_directory_that_cannot_be_created_is_named_as_the_cause() {
    let job = Job::new();
    let run = job.cmd().set("checkpoint.tolerable_failures", "10").spawn();
    let first = || job.checkpoints().into_iter().rev().find(|c| c.join("_metadata").exists());
    assert!(wait_until(Duration::from_secs(30), || first().is_some()), "no checkpoint completed");
    let done: u64 = first().unwrap().file_name().unwrap().to_string_lossy()["chk-".len()..].parse().unwrap();
    let blocked: Vec<u64> = (done + 3..done + 6).collect();
    for id in &blocked {
        std::fs::write(job.state.join(format!("checkpoints/chk-{id:07}")), b"in the way").unwrap();
    }
    let o = run.wait_for(Duration::from_secs(60));
    o.expect_code(0);
    let aborted: Vec<&str> =
        o.stderr.lines().filter(|l| l.contains("Checkpoint aborted.") && l.contains("(cause: cannot create")).collect();
    assert!(!aborted.is_empty(), "no abort names the directory it could not create:\n{}", o.stderr);
    assert!(aborted.iter().all(|l| blocked.iter().any(|id| l.contains(&format!("chk-{id:07}")))), "{aborted:?}");
    assert!(completed(&o.stderr).iter().any(|id| *id > blocked[2]), "no checkpoint completed after:\n{}", o.stderr);
    assert_exactly_once("checkpoint directories in the way", job.lines());
}

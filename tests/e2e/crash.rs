//! Crash recovery: kill -9 at random moments and at every named point of the
//! checkpoint protocol, restart with `--restore latest`, and the published
//! output is exactly the clean run's.

use std::sync::atomic::Ordering;

use super::ckpt::{
    abs, assert_exactly_once, assert_no_orphans, both_backends, completed, expected, kill_after, restored_from, write_pipeline, Backend,
    Job, Rng, KILLS,
};
use super::records::parse;
use super::util::{hidden_files, sink_lines, tmp, weir_run, Weir};

/// Rows per second during the crash loops: a run without kills takes ~3.3 s.
const LOOP_RATE: &str = "700";
const KILLS_PER_LOOP: usize = 8;

/// Start, kill -9 after a random delay, restart with `--restore latest`,
/// `KILLS_PER_LOOP` times; then run to the end. Returns the kills done.
fn crash_loop(what: &str, job: &Job, configure: impl Fn(Weir) -> Weir) -> usize {
    let mut rng = Rng::from_env(what);
    let mut kills = 0;
    for i in 0..KILLS_PER_LOOP {
        let cmd = if i == 0 { job.cmd() } else { job.restore() };
        let mut run = configure(cmd.set("sources.events.rate_limit", LOOP_RATE)).spawn();
        let delay = rng.millis(80, 700);
        if !kill_after(&mut run, delay) {
            // It finished (or failed) first: it must have been a clean exit.
            run.wait_for(super::util::RUN_TIMEOUT).expect_code(0);
            break;
        }
        kills += 1;
    }
    let last = configure(job.restore().set("sources.events.rate_limit", LOOP_RATE)).ok();
    eprintln!(
        "{what}: {kills} kills, last run restored from {:?} (suite total so far {})",
        restored_from(&last.stderr),
        KILLS.load(Ordering::SeqCst)
    );
    let hidden = hidden_files(&job.out);
    assert!(hidden.is_empty(), "{what}: in-progress files left after the final run: {hidden:?}; its log:\n{}", last.stderr);
    assert_no_orphans(&job.state);
    kills
}

both_backends! {
    fn crash_loop_aligned_is_exactly_once(backend: Backend) {
        let job = Job::with(backend);
        let kills = crash_loop(&format!("aligned {backend:?}"), &job, |w| w);
        assert_exactly_once(&format!("aligned {backend:?}, after {kills} kills"), job.lines());
    }
}

both_backends! {
    fn crash_loop_unaligned_is_exactly_once(backend: Backend) {
        let job = Job::with(backend);
        let kills = crash_loop(&format!("unaligned {backend:?}"), &job, |w| w.set("checkpoint.alignment", "unaligned"));
        assert_exactly_once(&format!("unaligned {backend:?}, after {kills} kills"), job.lines());
    }
}

both_backends! {
    fn crash_loop_aligned_timeout_is_exactly_once(backend: Backend) {
        // A 1 ms aligned timeout: most checkpoints switch to unaligned midway.
        let job = Job::with(backend);
        let kills = crash_loop(&format!("aligned_timeout {backend:?}"), &job, |w| w.set("checkpoint.aligned_timeout", "1ms"));
        assert_exactly_once(&format!("aligned_timeout=1ms {backend:?}, after {kills} kills"), job.lines());
    }
}

#[test]
fn crash_loop_at_least_once_loses_nothing() {
    // Without alignment an aggregate may count a replayed record twice, so
    // this pipeline stops at dedup: every unique event must be published
    // (copies are allowed).
    let dir = tmp();
    let yaml = format!(
        r#"name: at_least_once
parallelism: 2
state: {{dir: unused}}
checkpoint: {{interval: 150ms, mode: at_least_once}}
sources:
  - name: events
    type: file
    path: {}/*.jsonl
    rate_limit: 1000
    event_time: {{field: ts, max_out_of_orderness: 1s}}
operators:
  - {{name: unique, type: dedup, input: events, key: [id], ttl: 1h}}
sinks:
  - {{name: out, type: file, input: unique, path: out/unused}}
"#,
        abs("testdata/inputs/events")
    );
    let pipeline = write_pipeline(dir.path(), "alo", &yaml);
    let (state, out) = (dir.path().join("state"), dir.path().join("out"));
    let cmd = || weir_run(&pipeline, 2).set("state.dir", &state).set("sinks.out.path", &out).set("sources.events.rate_limit", LOOP_RATE);
    let mut rng = Rng::from_env("at_least_once");
    let mut kills = 0;
    for i in 0..6 {
        let mut run = if i == 0 { cmd() } else { cmd().arg("--restore").arg("latest") }.spawn();
        if !kill_after(&mut run, rng.millis(80, 700)) {
            run.wait_for(super::util::RUN_TIMEOUT).expect_code(0);
            break;
        }
        kills += 1;
    }
    cmd().arg("--restore").arg("latest").ok();
    let got: std::collections::HashSet<String> = sink_lines(&out).iter().map(|l| parse(l)["id"].to_string()).collect();
    let mut want = std::collections::BTreeSet::new();
    for f in super::ckpt::INPUTS {
        for l in super::util::input_lines(f) {
            want.insert(parse(&l)["id"].to_string());
        }
    }
    let missing: Vec<&String> = want.iter().filter(|id| !got.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "at_least_once after {kills} kills: {} events lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
}

/// Crash at the `n`th time the protocol reaches `point`; restart; check the
/// output and which checkpoint the restart chose. `max_restored` is the
/// newest checkpoint the restart may use given the crashed run's log.
fn crash_at(backend: Backend, point: &str, n: u32, want: impl Fn(&[u64]) -> Option<u64>) {
    let job = Job::with(backend);
    let crashed = job.cmd().env("WEIR_FAULTS", format!("crash={point}:{n}")).run();
    assert!(
        !crashed.status.success(),
        "crash={point}:{n}: the run was meant to abort but exited with {:?}\n{}",
        crashed.status,
        crashed.stderr
    );
    crashed.expect_stderr_contains(&format!("injected crash at {point}"));
    let done = completed(&crashed.stderr);
    let restarted = job.restore().ok();
    assert_eq!(
        restored_from(&restarted.stderr),
        want(&done),
        "crash={point}:{n}: the crashed run logged checkpoints {done:?} complete; restore log:\n{}",
        restarted.stderr
    );
    job.assert_no_in_progress_files();
    assert_no_orphans(&job.state);
    assert_exactly_once(&format!("crash={point}:{n} {backend:?}, then --restore latest"), job.lines());
}

both_backends! {
    fn crash_after_prepare_restores_the_previous_checkpoint(backend: Backend) {
        // A task wrote its snapshot for checkpoint k and died before voting: k
        // never completed, the restart uses the last complete one.
        for n in [1, 20] {
            crash_at(backend, "after_prepare", n, |done| done.last().copied());
        }
    }
}

both_backends! {
    fn crash_after_manifest_restores_the_previous_checkpoint(backend: Backend) {
        for n in [1, 5] {
            crash_at(backend, "after_manifest", n, |done| done.last().copied());
        }
    }
}

both_backends! {
    fn crash_after_metadata_restores_that_checkpoint(backend: Backend) {
        // `_metadata` of checkpoint n is the commit point: it is complete even
        // though the run died before logging it.
        for n in [1, 4] {
            crash_at(backend, "after_metadata", n, |done| {
                assert_eq!(done.last().copied(), (n > 1).then(|| n as u64 - 1), "checkpoints complete before the crash");
                Some(n as u64)
            });
        }
    }
}

both_backends! {
    fn crash_before_sink_commit_restores_that_checkpoint(backend: Backend) {
        // The checkpoint completed; the sink died before publishing. The restore
        // publishes the files of that checkpoint.
        for n in [1, 6] {
            crash_at(backend, "before_sink_commit", n, |done| done.last().copied());
        }
    }
}

#[test]
fn clean_run_matches_the_reference() {
    assert!(!expected().is_empty());
}

#[test]
fn unaligned_finished_run_publishes_everything() {
    // No faults at all: the run ends on its own after its final checkpoint.
    for i in 0..3 {
        let job = Job::new();
        job.cmd().set("checkpoint.alignment", "unaligned").set("sources.events.rate_limit", "3000").ok();
        let hidden = hidden_files(&job.out);
        assert!(hidden.is_empty(), "run {i}: a finished unaligned run left unpublished parts: {hidden:?}");
        assert_exactly_once(&format!("unaligned clean run {i}"), job.lines());
    }
}

/// A checkpoint records a file source's files by absolute path: a restore
/// run from another working directory (the pipeline's paths given
/// absolute there) reads on where the killed run stopped, exactly once.
/// (They were recorded as given, relative, and the restore failed, exit 1.)
#[test]
fn a_restore_from_another_working_directory_reads_on_exactly_once() {
    let job = Job::new();
    let mut run = job.cmd().spawn();
    let checkpointed =
        super::util::wait_until(std::time::Duration::from_secs(30), || job.checkpoints().iter().any(|c| c.join("_metadata").exists()));
    run.child.kill().expect("kill -9 weir");
    run.child.wait().expect("reaping weir");
    assert!(checkpointed, "no checkpoint within 30 s");
    let elsewhere = tmp();
    let pipeline = abs(super::ckpt::PIPELINE);
    let o = weir_run(&pipeline, 2)
        .cwd(elsewhere.path())
        .set("state.dir", &job.state)
        .set("sinks.out.path", &job.out)
        .set("sources.events.path", abs("testdata/inputs/events/*.jsonl"))
        .arg("--restore")
        .arg("latest")
        .ok();
    assert!(restored_from(&o.stderr).is_some(), "{}", o.stderr);
    assert_exactly_once("restored from another working directory", job.lines());
}

//! The start of a run on a state directory: the exclusive lock (a second
//! process is refused naming the holder, nothing touched), refused restores
//! that change nothing on disk, `--restore latest` never going back before
//! a restored savepoint, and the crashed run's hidden parts when there is
//! no checkpoint to restore.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use super::ckpt::{assert_exactly_once, both_backends, fast, restored_from, write_pipeline, Backend, Job, PIPELINE};
use super::util::{hidden_files, part_files, tmp, wait_until, weir, weir_run, Outcome, Weir};

/// Every file and directory under `dir`: kind, size and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (bool, u64, SystemTime)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, (bool, u64, SystemTime)>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            out.insert(p.strip_prefix(root).unwrap().to_path_buf(), (md.is_dir(), md.len(), md.modified().unwrap()));
            if md.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[track_caller]
fn assert_unchanged(what: &str, before: &BTreeMap<PathBuf, (bool, u64, SystemTime)>, dir: &Path) {
    let after = snapshot(dir);
    let changed: Vec<_> = before
        .iter()
        .filter(|(p, v)| after.get(*p) != Some(v))
        .map(|(p, _)| p.display().to_string())
        .chain(after.keys().filter(|p| !before.contains_key(*p)).map(|p| format!("+{}", p.display())))
        .collect();
    assert!(changed.is_empty(), "{what}: the state dir changed: {changed:?}");
}

/// The newest checkpoint of `state` that has its `_metadata` (0: none).
fn newest_complete(state: &Path) -> u64 {
    super::ckpt::checkpoint_dirs(state)
        .iter()
        .filter(|d| d.join("_metadata").is_file())
        .filter_map(|d| d.file_name()?.to_str()?.strip_prefix("chk-")?.parse().ok())
        .max()
        .unwrap_or(0)
}

#[track_caller]
fn expect_refused_by(o: &Outcome, pid: u32) {
    o.expect_code(2);
    o.expect_stderr_contains(&format!("is in use by weir process {pid}"));
}

both_backends! {
    fn a_second_run_on_a_running_pipelines_state_dir_is_refused_and_the_first_stays_exact(backend: Backend) {
        let job = Job::with(backend);
        let first = job.cmd().set("sources.events.rate_limit", "600").spawn();
        assert!(wait_until(Duration::from_secs(20), || newest_complete(&job.state) > 0), "the first run completed no checkpoint");
        let pid = first.child.id();
        for (what, cmd) in [("run", job.cmd()), ("--restore latest", job.restore())] {
            let o = cmd.run();
            expect_refused_by(&o, pid);
            assert!(!o.stderr.contains("Removed"), "{what}: the refused run cleaned up:\n{}", o.stderr);
        }
        // The first run's checkpoints go on completing, and its output is exact.
        let seen = newest_complete(&job.state);
        assert!(wait_until(Duration::from_secs(20), || newest_complete(&job.state) > seen), "no checkpoint completed after the refusals");
        let o = first.wait_for(Duration::from_secs(60));
        o.expect_code(0);
        assert!(!o.stderr.contains("Checkpoint aborted."), "a checkpoint of the first run aborted:\n{}", o.stderr);
        job.assert_no_in_progress_files();
        assert_exactly_once(&format!("a second run refused while the first ran, {backend:?}"), job.lines());
    }
}

#[test]
fn two_runs_started_at_once_on_a_fresh_state_dir_one_is_refused() {
    let job = Job::new();
    let runs = [job.cmd().spawn(), job.cmd().spawn()];
    let pids: Vec<u32> = runs.iter().map(|r| r.child.id()).collect();
    let outcomes: Vec<Outcome> = runs.into_iter().map(|r| r.wait_for(Duration::from_secs(60))).collect();
    let refused: Vec<usize> = (0..2).filter(|&i| outcomes[i].code() == Some(2)).collect();
    assert_eq!(refused.len(), 1, "want exactly one refusal: {:?}", outcomes.iter().map(|o| (o.code(), &o.stderr)).collect::<Vec<_>>());
    let (loser, winner) = (refused[0], 1 - refused[0]);
    expect_refused_by(&outcomes[loser], pids[winner]);
    outcomes[winner].expect_code(0);
    job.assert_no_in_progress_files();
    assert_exactly_once("two runs started at once", job.lines());
}

/// `flock LOCK` holding the state dir's lock in another process (not weir)
/// until dropped: its command waits for its stdin to close.
struct Holder(std::process::Child);

impl Holder {
    fn lock(state: &Path) -> Holder {
        let mut child = Command::new("flock")
            .arg(state.join("LOCK"))
            .args(["sh", "-c", "echo locked; read _"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("running flock(1)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "locked");
        Holder(child)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

#[test]
fn a_refused_second_process_changes_nothing_on_disk() {
    let job = Job::new();
    fast(job.cmd()).ok();
    let chk = job.checkpoints().pop().expect("a retained checkpoint");
    // What a start would clean up: an unfinished checkpoint (a running
    // process's next one) and a stale control socket path.
    let unfinished = job.state.join("checkpoints/chk-0000099/bundle-000");
    std::fs::create_dir_all(&unfinished).unwrap();
    std::fs::write(unfinished.join("task-000-0000.snapshot"), b"being written").unwrap();
    let holder = Holder::lock(&job.state);
    let before = snapshot(&job.state);
    let explicit = job.cmd().arg("--restore").arg(chk.display().to_string());
    for (what, cmd) in [("run", job.cmd()), ("--restore latest", job.restore()), ("--restore PATH", explicit)] {
        let o = cmd.run();
        expect_refused_by(&o, holder.0.id());
        assert_unchanged(what, &before, &job.state);
    }
    drop(holder);
    // Released: the next start cleans up as usual.
    let o = fast(job.restore()).ok();
    o.expect_stderr_contains("Removed an unfinished checkpoint.");
    assert_exactly_once("after the holder left", job.lines());
}

/// A pipeline whose unaligned checkpoints hold in-flight records: an
/// unbounded datagen -> dedup -> slow blackhole, killed after a few
/// checkpoints; without `with_dedup`, the same minus the dedup (an operator
/// dropped). Returns the pipeline file.
fn in_flight_pipeline(dir: &Path, with_dedup: bool) -> String {
    let state = dir.join("state");
    let (ops, input) = if with_dedup {
        ("operators:\n  - {name: unique, type: dedup, input: events, key: [id], ttl: 1h}\n", "unique")
    } else {
        ("", "events")
    };
    let yaml = format!(
        r#"name: inflight
parallelism: 2
state: {{dir: {state}}}
checkpoint: {{interval: 100ms, alignment: unaligned}}
sources:
  - name: events
    type: datagen
    seed: 3
    fields:
      id: {{kind: sequence}}
{ops}sinks:
  - {{name: slow, type: blackhole, input: {input}, rate_limit: 3000}}
"#,
        state = state.display(),
    );
    write_pipeline(dir, if with_dedup { "inflight" } else { "no-dedup" }, &yaml)
}

#[test]
fn refused_restores_change_nothing_on_disk_and_create_no_state_dir() {
    let dir = tmp();
    let pipeline = in_flight_pipeline(dir.path(), true);
    let state = dir.path().join("state");
    let mut run = weir_run(&pipeline, 2).spawn();
    assert!(wait_until(Duration::from_secs(20), || newest_complete(&state) >= 3), "no checkpoints completed");
    run.child.kill().unwrap();
    run.child.wait().unwrap();
    let chk = state.join("checkpoints").join(format!("chk-{:07}", newest_complete(&state)));
    // An unrelated unfinished checkpoint a start would remove.
    std::fs::create_dir_all(state.join("checkpoints/chk-0000099")).unwrap();
    std::fs::write(state.join("checkpoints/chk-0000099/leftover"), b"x").unwrap();
    let no_dedup = in_flight_pipeline(dir.path(), false);
    let chk_arg = chk.display().to_string();
    let restore = |p: &str, n: u32| weir_run(p, n).arg("--restore").arg(&chk_arg);
    let cases: Vec<(&str, Weir, &str)> = vec![
        ("in-flight records at another parallelism", restore(&pipeline, 1), "in-flight records"),
        ("another max_parallelism", restore(&pipeline, 2).set("max_parallelism", "64"), "max_parallelism"),
        ("an operator dropped", restore(&no_dedup, 2), "--allow-non-restored-state"),
        ("another pipeline name", restore(&pipeline, 2).set("name", "other"), "pipeline"),
        (
            "a missing checkpoint",
            weir_run(&pipeline, 2).arg("--restore").arg(state.join("checkpoints/chk-0000042").display().to_string()),
            "missing",
        ),
    ];
    for (i, (what, cmd, reason)) in cases.into_iter().enumerate() {
        let before = snapshot(&state);
        let o = cmd.run();
        o.expect_code(2);
        o.expect_stderr_contains(reason);
        assert_unchanged(what, &before, &state);
        // The same into a fresh state dir: it is not created.
        let fresh = dir.path().join(format!("fresh-{i}"));
        let again = match what {
            "another pipeline name" => restore(&pipeline, 2).set("name", "other"),
            "in-flight records at another parallelism" => restore(&pipeline, 1),
            "another max_parallelism" => restore(&pipeline, 2).set("max_parallelism", "64"),
            "an operator dropped" => restore(&no_dedup, 2),
            _ => weir_run(&pipeline, 2).arg("--restore").arg("/nonexistent/chk-0000042"),
        };
        let o = again.set("state.dir", &fresh).run();
        o.expect_code(2);
        assert!(!fresh.exists(), "{what}: a refused restore created {}", fresh.display());
    }
    assert!(state.join("checkpoints/chk-0000099/leftover").exists());
}

/// `weir savepoint trigger --stop` on a running job; returns the savepoint.
fn stop_with_savepoint(job: &Job, run: super::util::Running) -> PathBuf {
    let sock = job.state.join("control.sock");
    assert!(wait_until(Duration::from_secs(20), || sock.exists()), "no control socket");
    assert!(wait_until(Duration::from_secs(20), || !part_files(&job.out).is_empty()), "no output published");
    let o = weir(&["savepoint", "trigger", PIPELINE, "--stop"]).set("state.dir", &job.state).run();
    o.expect_code(0);
    let path = o.stdout.lines().find_map(|l| l.strip_prefix("Savepoint completed. Path: ")).expect("a savepoint path").to_string();
    let stopped = run.wait_for(Duration::from_secs(30));
    stopped.expect_code(0);
    assert!(!stopped.stderr.contains("Input exhausted"), "the run ended by its input, not by the stop");
    PathBuf::from(path)
}

/// `weir restore SP`, dying in its first checkpoint.
fn restore_and_crash_before_the_first_checkpoint(job: &Job, sp: &Path) {
    let cmd = weir(&["restore", &sp.display().to_string(), PIPELINE, "--no-progress", "-p", "2"]);
    let o = cmd.set("state.dir", &job.state).set("sinks.out.path", &job.out).env("WEIR_FAULTS", "crash=after_prepare:1").run();
    assert_ne!(o.code(), Some(0), "the injected crash did not happen:\n{}", o.stderr);
    o.expect_stderr_contains("Restoring from checkpoint.");
}

fn id_of(dir: &Path) -> u64 {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    name.rsplit('-').next().unwrap().parse().unwrap()
}

#[test]
fn latest_after_a_savepoint_restore_never_goes_back_before_the_savepoint() {
    let job = Job::new();
    let sp = stop_with_savepoint(&job, job.cmd().set("sources.events.rate_limit", "600").spawn());
    assert!(!super::ckpt::checkpoint_dirs(&job.state).is_empty(), "no checkpoint older than the savepoint is left to go back to");
    restore_and_crash_before_the_first_checkpoint(&job, &sp);

    // The savepoint moved away: `latest` refuses (exit 2, nothing changed)
    // instead of going back to a checkpoint before it.
    let moved = job.dir.path().join("moved-sp");
    std::fs::rename(&sp, &moved).unwrap();
    let before = snapshot(&job.state);
    let o = job.restore().run();
    o.expect_code(2);
    o.expect_stderr_contains(&format!("began with a restore of savepoint {}", id_of(&sp)));
    assert_unchanged("latest with the savepoint gone", &before, &job.state);

    // Restored from where it is now, dying again; then `latest` restores
    // that savepoint again and the output is exactly once.
    restore_and_crash_before_the_first_checkpoint(&job, &moved);
    let o = fast(job.restore()).ok();
    assert_eq!(restored_from(&o.stderr), Some(id_of(&sp)), "latest did not restore the savepoint:\n{}", o.stderr);
    o.expect_stderr_contains("restoring it again");
    job.assert_no_in_progress_files();
    assert_exactly_once("savepoint restore, crash, --restore latest", job.lines());
}

#[test]
fn a_restore_without_a_complete_checkpoint_removes_the_crashed_runs_hidden_parts() {
    let job = Job::new();
    // The first checkpoint comes late, so the sink has written parts by then.
    let o = job.cmd().set("checkpoint.interval", "1500ms").env("WEIR_FAULTS", "crash=after_prepare:1").run();
    assert_ne!(o.code(), Some(0), "the injected crash did not happen:\n{}", o.stderr);
    assert!(!hidden_files(&job.out).is_empty(), "the crashed run left no hidden part; nothing to test");
    assert!(part_files(&job.out).is_empty(), "the crashed run published output");
    let o = fast(job.restore()).ok();
    o.expect_stderr_contains("No complete checkpoint to restore; starting from the beginning.");
    job.assert_no_in_progress_files();
    assert_exactly_once("crash before the first checkpoint, --restore latest", job.lines());
}

#[test]
fn a_state_dir_too_long_for_a_socket_address_still_takes_savepoints() {
    let job = Job::new();
    let state = job.dir.path().join("d".repeat(60)).join("e".repeat(60)).join("state");
    let run =
        weir_run(PIPELINE, 2).set("state.dir", &state).set("sinks.out.path", &job.out).set("sources.events.rate_limit", "600").spawn();
    assert!(wait_until(Duration::from_secs(20), || state.join("control.sock").exists()), "no control socket");
    let o = weir(&["savepoint", "trigger", PIPELINE, "--stop"]).set("state.dir", &state).run();
    o.expect_code(0);
    o.stdout.lines().find(|l| l.starts_with("Savepoint completed. Path: ")).expect("a savepoint path");
    let stopped = run.wait_for(Duration::from_secs(30));
    stopped.expect_code(0);
    assert!(!stopped.stderr.contains("control socket"), "{}", stopped.stderr);
}

#[test]
fn an_unwritable_state_dir_is_refused_at_start_naming_the_path() {
    let job = Job::new();
    fast(job.cmd()).ok();
    let mode = |m| std::fs::set_permissions(&job.state, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap();
    mode(0o555);
    if std::fs::write(job.state.join("probe"), b"").is_ok() {
        // Privileged (root ignores the mode): nothing to test here.
        let _ = std::fs::remove_file(job.state.join("probe"));
        mode(0o755);
        eprintln!("skipped: the state dir stays writable for this user");
        return;
    }
    let before = snapshot(&job.state);
    let o = job.restore().run();
    mode(0o755);
    o.expect_code(2);
    o.expect_stderr_contains(&format!("cannot write to {}: Permission denied", job.state.display()));
    assert_unchanged("an unwritable state dir", &before, &job.state);
}

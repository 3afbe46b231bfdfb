//! Savepoints from the command line: trigger a running pipeline, stop with a
//! savepoint, restore from it (after moving it), list and dispose; targets
//! (`--target`, `savepoint.dir`) are parents that take a new child per
//! savepoint.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ckpt::{assert_exactly_once, both_backends, copy_dir, fast, restored_from, Backend, Job, PIPELINE};
use super::util::{part_files, tmp, wait_until, weir, weir_run, Outcome, Weir};

impl Job {
    /// `weir savepoint SUB pipelines/checkpointed.yaml` on this job's state dir.
    fn savepoint(&self, sub: &str) -> Weir {
        weir(&["savepoint", sub, PIPELINE]).set("state.dir", &self.state)
    }

    fn wait_for_socket(&self) {
        let sock = self.state.join("control.sock");
        assert!(wait_until(Duration::from_secs(20), || sock.exists()), "no control socket at {}", sock.display());
    }
}

/// The path of `Savepoint completed. Path: <dir>`.
#[track_caller]
pub fn savepoint_path(o: &Outcome) -> PathBuf {
    o.expect_code(0);
    let line =
        o.stdout.lines().find_map(|l| l.strip_prefix("Savepoint completed. Path: ")).unwrap_or_else(|| panic!("stdout: {}", o.stdout));
    PathBuf::from(line)
}

/// `path` is a new savepoint of the checkpointed pipeline in `parent`.
#[track_caller]
fn assert_child_of(path: &Path, parent: &Path) {
    assert_eq!(path.parent(), Some(parent), "{} is not a savepoint in {}", path.display(), parent.display());
    let name = path.file_name().unwrap().to_string_lossy();
    assert!(name.starts_with("savepoint-checkpointed-"), "{name}");
}

fn kind_of(dir: &Path) -> String {
    let md: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("_metadata")).unwrap()).unwrap();
    md["kind"].as_str().unwrap().to_string()
}

#[test]
fn trigger_stop_with_savepoint_then_restore_gives_exactly_the_clean_output() {
    let job = Job::new();
    let run = job.cmd().spawn();
    job.wait_for_socket();
    let mode = std::fs::metadata(job.state.join("control.sock")).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    assert_eq!(mode.unwrap(), 0o600, "the control socket is for its owner only");

    // An intermediate savepoint under load (a checkpoint already published
    // output), into the default place.
    assert!(wait_until(Duration::from_secs(20), || !part_files(&job.out).is_empty()), "no output published");
    let first = savepoint_path(&job.savepoint("trigger").run());
    assert!(first.starts_with(job.state.join("savepoints")), "{}", first.display());
    assert_eq!(kind_of(&first), "savepoint");
    // Periodic checkpoints go on (and publish what the savepoint staged).
    std::thread::sleep(Duration::from_millis(250));

    // Stop with a savepoint into an explicit target: the process exits 0.
    let target = job.dir.path().join("sp-stop");
    let stop = job.savepoint("trigger").arg("--stop").arg("--target").arg(target.display().to_string()).run();
    let stopped = savepoint_path(&stop);
    assert_child_of(&stopped, &target);
    let o = run.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    assert!(!o.stderr.contains("Input exhausted"), "the run ended by its input, not by the stop; make the input longer");
    assert!(!job.state.join("control.sock").exists(), "the socket is removed at exit");
    job.assert_no_in_progress_files();

    // List shows the default-place savepoint as valid.
    let list = job.savepoint("list").run();
    list.expect_code(0);
    assert!(list.stdout.lines().any(|l| l.contains(&first.display().to_string()) && l.ends_with("yes")), "{}", list.stdout);
    let inspect = weir(&["inspect", &job.state.display().to_string()]).run();
    inspect.expect_code(0);
    assert!(inspect.stdout.lines().any(|l| l.starts_with("sp-") && l.contains(" savepoint ")), "{}", inspect.stdout);

    // Savepoints are relative: move it, restore from its _metadata.
    let moved = tmp().keep().join("moved");
    std::fs::rename(&stopped, &moved).unwrap();
    let restore = weir(&["restore", &moved.join("_metadata").display().to_string(), PIPELINE, "--no-progress", "-p", "2"]);
    let o = fast(restore.set("state.dir", &job.state).set("sinks.out.path", &job.out)).run();
    o.expect_code(0);
    o.expect_stderr_contains("Restoring from checkpoint.");
    job.assert_no_in_progress_files();
    assert_exactly_once("stop-with-savepoint then restore", job.lines());
    let _ = std::fs::remove_dir_all(moved.parent().unwrap());

    // Restoring with another max_parallelism is refused with the reason,
    // and nothing is written (not even a new state directory).
    let fresh = job.dir.path().join("fresh-state");
    let o = weir(&["restore", &first.display().to_string(), PIPELINE, "--no-progress"])
        .set("state.dir", &fresh)
        .set("max_parallelism", "64")
        .run();
    o.expect_code(2);
    o.expect_stderr_contains("max_parallelism 128, this pipeline has 64");
    assert!(!fresh.exists(), "a refused restore created {}", fresh.display());

    // Dispose: a symlink to it is refused, the savepoint itself goes.
    let link = job.dir.path().join("link");
    std::os::unix::fs::symlink(&first, &link).unwrap();
    weir(&["savepoint", "dispose", &link.display().to_string()]).run().expect_code(2);
    assert!(first.join("_metadata").exists());
    weir(&["savepoint", "dispose", &first.display().to_string()]).run().expect_code(0);
    assert!(!first.exists());
}

/// Run (or restore) at `p`, slowly, until some output is published and
/// more than `after` lines; then stop with a savepoint into `target`.
/// Returns the savepoint.
fn stop_with_savepoint_at(job: &Job, p: u32, restore: Option<&Path>, after: usize, target: &Path) -> PathBuf {
    let mut cmd = match restore {
        Some(sp) => weir(&["restore", &sp.display().to_string(), PIPELINE, "--no-progress", "-p", &p.to_string()]),
        None => weir_run(PIPELINE, p),
    };
    cmd = job.backend.apply(cmd).set("state.dir", &job.state).set("sinks.out.path", &job.out).set("sources.events.rate_limit", "600");
    let run = cmd.spawn();
    job.wait_for_socket();
    assert!(wait_until(Duration::from_secs(30), || job.lines().len() > after), "no new output published at parallelism {p}");
    let stop = job.savepoint("trigger").arg("--stop").arg("--target").arg(target.display().to_string()).run();
    let sp = savepoint_path(&stop);
    assert_child_of(&sp, target);
    let o = run.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    assert!(!o.stderr.contains("Input exhausted"), "the run at parallelism {p} ended by its input, not by the stop");
    if restore.is_some() {
        o.expect_stderr_contains("Rescaling: key groups and source positions are dealt anew.");
    }
    sp
}

both_backends! {
fn savepoints_restore_at_another_parallelism_exactly_once(backend: Backend) {
    // 1 -> 4 -> 2, each step a stop-with-savepoint in the middle of the
    // input, both into one target.
    let job = Job::with(backend);
    let target = job.dir.path().join("sps");
    let sp1 = stop_with_savepoint_at(&job, 1, None, 0, &target);
    let after_first = job.lines().len();
    let sp2 = stop_with_savepoint_at(&job, 4, Some(&sp1), after_first, &target);
    assert_ne!(sp1, sp2);
    let restore = weir(&["restore", &sp2.display().to_string(), PIPELINE, "--no-progress", "-p", "2"]);
    let o = fast(backend.apply(restore).set("state.dir", &job.state).set("sinks.out.path", &job.out)).run();
    o.expect_code(0);
    o.expect_stderr_contains("Rescaling");
    job.assert_no_in_progress_files();
    assert_exactly_once(&format!("savepoints at parallelism 1 -> 4 -> 2, {backend:?}"), job.lines());
}
}

#[test]
fn restore_refuses_dropped_operators_unless_allowed_and_changed_keys() {
    let job = Job::new();
    let sp = stop_with_savepoint_at(&job, 2, None, 0, &job.dir.path().join("sps"));
    let text = std::fs::read_to_string(super::util::repo().join(PIPELINE)).unwrap();
    let variant = |name: &str, edits: &[(&str, &str)]| {
        let mut yaml = text.clone();
        for (from, to) in edits {
            assert!(yaml.contains(from), "{PIPELINE} no longer has `{from}`");
            yaml = yaml.replace(from, to);
        }
        let path = job.dir.path().join(name);
        std::fs::write(&path, yaml).unwrap();
        path.display().to_string()
    };
    let restore = |pipeline: &str, state: &str| {
        let w = weir(&["restore", &sp.display().to_string(), pipeline, "--no-progress"]);
        fast(w.set("state.dir", job.dir.path().join(state)).set("sinks.out.path", job.dir.path().join(format!("out-{state}"))))
    };

    // Without the dedup operator: refused, naming it; allowed, it is dropped.
    let dedup_line = "  - {name: unique, type: dedup, input: events, key: [id], ttl: 1h}\n";
    let no_dedup = variant("no-dedup.yaml", &[(dedup_line, ""), ("input: unique", "input: events")]);
    let o = restore(&no_dedup, "a").run();
    o.expect_code(2);
    o.expect_stderr_contains("holds state of operators this pipeline does not have: unique");
    o.expect_stderr_contains("--allow-non-restored-state");
    let o = restore(&no_dedup, "b").arg("--allow-non-restored-state").run();
    o.expect_code(0);
    o.expect_stderr_contains("Dropping the state of operators this pipeline does not have.");

    // The aggregate keyed by another field: refused with both definitions.
    let rekeyed = variant("rekeyed.yaml", &[("key: [user]", "key: [id]")]);
    let o = restore(&rekeyed, "c").run();
    o.expect_code(2);
    o.expect_stderr_contains("operator `per_user` was aggregate by [user], this pipeline has it aggregate by [id]");
}

#[test]
fn trigger_without_a_running_process_fails_with_exit_1() {
    let job = Job::new();
    let o = job.savepoint("trigger").run();
    o.expect_code(1);
    o.expect_stderr_contains("no running weir process for pipeline `checkpointed`");
}

#[test]
fn dispose_refuses_checkpoints_unknown_dirs_and_missing_paths() {
    let job = Job::new();
    fast(job.cmd()).ok();
    let chk = job.checkpoints().pop().expect("a retained checkpoint");
    let unknown = job.dir.path().join("unknown");
    std::fs::create_dir_all(&unknown).unwrap();
    std::fs::write(unknown.join("data"), b"keep me").unwrap();
    for (path, why) in [
        (chk.clone(), "says it is a checkpoint"),
        (chk.join("_metadata"), "says it is a checkpoint"),
        (unknown.clone(), "not a weir savepoint"),
        (job.dir.path().join("missing"), "No such file"),
    ] {
        let o = weir(&["savepoint", "dispose", &path.display().to_string()]).run();
        o.expect_code(2);
        o.expect_stderr_contains(why);
    }
    assert!(chk.join("_metadata").exists() && unknown.join("data").exists(), "nothing was deleted");
}

#[test]
fn list_without_savepoints_prints_only_the_header() {
    let job = Job::new();
    let o = job.savepoint("list").run();
    o.expect_code(0);
    assert_eq!(o.stdout.lines().count(), 1, "{}", o.stdout);
}

/// One request line to the control socket, one JSON answer.
fn ask(socket: &Path, request: &str) -> serde_json::Value {
    use std::io::{BufRead, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).expect("connecting to the control socket");
    s.write_all(format!("{request}\n").as_bytes()).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(&s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("answer {line:?}: {e}"))
}

#[test]
fn status_and_a_second_trigger_while_one_runs_is_refused_with_the_reason() {
    let job = Job::new();
    // Slow barriers keep the first savepoint in progress for a while.
    let run = job.cmd().env("WEIR_FAULTS", "barrier_delay=400ms").spawn();
    job.wait_for_socket();
    let socket = job.state.join("control.sock");
    let status = ask(&socket, r#"{"status": {}}"#);
    assert_eq!((status["ok"].as_bool(), status["pipeline"].as_str()), (Some(true), Some("checkpointed")), "{status}");
    assert!(status["last_checkpoint"].is_u64(), "{status}");
    let bad = ask(&socket, r#"{"savepoint": {"tagret": "/x"}}"#);
    assert_eq!(bad["ok"].as_bool(), Some(false), "{bad}");

    let first = job.savepoint("trigger").spawn();
    assert!(wait_until(Duration::from_secs(10), || ask(&socket, r#"{"status": {}}"#)["savepoint_in_progress"] == true));
    let second = job.savepoint("trigger").run();
    second.expect_code(1);
    second.expect_stderr_contains("a savepoint is already in progress");
    savepoint_path(&first.wait_for(Duration::from_secs(30)));

    run.terminate();
    run.wait_for(Duration::from_secs(30)).expect_code(0);
}

#[test]
fn pipelines_with_unaligned_checkpoints_take_aligned_savepoints() {
    let job = Job::new();
    let run = job.cmd().set("checkpoint.alignment", "unaligned").set("sources.events.rate_limit", "600").spawn();
    job.wait_for_socket();
    assert!(wait_until(Duration::from_secs(30), || !job.lines().is_empty()), "no output published");
    let target = job.dir.path().join("sp");
    let sp = savepoint_path(&job.savepoint("trigger").arg("--stop").arg("--target").arg(target.display().to_string()).run());
    run.wait_for(Duration::from_secs(30)).expect_code(0);
    // Aligned, so without in-flight records: it restores at another
    // parallelism, which a snapshot holding channel state would refuse.
    let restore = weir(&["restore", &sp.display().to_string(), PIPELINE, "--no-progress", "-p", "3"]);
    let o = fast(restore.set("state.dir", &job.state).set("sinks.out.path", &job.out).set("checkpoint.alignment", "unaligned")).run();
    o.expect_code(0);
    job.assert_no_in_progress_files();
    assert_exactly_once("unaligned pipeline, aligned savepoint, restored at parallelism 3", job.lines());
}

/// Stop with a savepoint (drained or not) at parallelism 2; returns (sum of
/// the published counts, records the dedup passed to the aggregate).
fn counted_and_passed(drain: bool) -> (u64, u64) {
    let job = Job::new();
    let run = job.cmd().set("sources.events.rate_limit", "600").spawn();
    job.wait_for_socket();
    assert!(wait_until(Duration::from_secs(30), || !job.lines().is_empty()), "no output published");
    let mut trigger = job.savepoint("trigger").arg("--stop").arg("--target").arg(job.dir.path().join("sp").display().to_string());
    if drain {
        trigger = trigger.arg("--drain");
    }
    savepoint_path(&trigger.run());
    let o = run.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    assert!(!o.stderr.contains("Input exhausted"), "the run ended by its input, not by the stop");
    let summary = format!("{}{}", o.stdout, o.stderr);
    let passed = summary
        .split("unique ")
        .nth(1)
        .and_then(|r| r.split(" out").next())
        .and_then(|r| r.split('/').nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary for `unique` in: {summary}"));
    let counted = job.lines().iter().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["n"].as_u64().unwrap()).sum();
    (counted, passed)
}

#[test]
fn stop_with_drain_fires_every_window_into_the_savepoint() {
    let (counted, passed) = counted_and_passed(true);
    assert_eq!(counted, passed, "drained: every record the aggregate got is in a published window");
    // Without --drain the windows still open at the stop stay in the savepoint.
    let (counted, passed) = counted_and_passed(false);
    assert!(counted < passed, "not drained: open windows are not published ({counted} of {passed})");
}

#[test]
fn savepoint_completes_while_the_sink_is_backpressured() {
    // Every event passes the dedup into a sink that takes 400 records a
    // second: the channels fill up and the aligned barrier queues behind
    // them. The savepoint still completes, and the socket stays responsive.
    let job = Job::new();
    let yaml = format!(
        "name: backpressured\nparallelism: 2\nstate: {{dir: {}}}\ncheckpoint: {{interval: 1h, alignment: aligned}}\n\
         sources:\n  - {{name: events, type: file, path: 'testdata/inputs/events/*.jsonl'}}\n\
         operators:\n  - {{name: unique, type: dedup, input: events, key: [id]}}\n\
         sinks:\n  - {{name: out, type: blackhole, input: unique, rate_limit: 400}}\n",
        job.state.display()
    );
    let pipeline = job.dir.path().join("backpressured.yaml");
    std::fs::write(&pipeline, yaml).unwrap();
    let pipeline = pipeline.display().to_string();
    let run = weir(&["run", &pipeline, "--no-progress"]).spawn();
    job.wait_for_socket();
    std::thread::sleep(Duration::from_millis(500));
    let started = std::time::Instant::now();
    let trigger = weir(&["savepoint", "trigger", &pipeline, "--timeout", "60s"]).spawn();
    // While the barrier waits behind the queued records, status answers.
    let status = ask(&job.state.join("control.sock"), r#"{"status": {}}"#);
    assert_eq!(status["ok"], true, "{status}");
    let sp = savepoint_path(&trigger.wait_for(Duration::from_secs(60)));
    let took = started.elapsed();
    assert_eq!(kind_of(&sp), "savepoint");
    run.terminate();
    let o = run.wait_for(Duration::from_secs(60));
    o.expect_code(0);
    // The sink's rate, not the machine, sets this: the barrier waited.
    assert!(took > Duration::from_secs(1), "took {took:?}: the sink was not backpressured");
}

/// Stop a run of `from` with a savepoint, then restore it with `to`: the
/// savepoint is canonical, so the backend may change.
fn savepoint_across_backends(from: Backend, to: Backend) {
    let job = Job::with(from);
    let run = job.cmd().spawn();
    job.wait_for_socket();
    assert!(wait_until(Duration::from_secs(20), || !part_files(&job.out).is_empty()), "no output published");
    let stop = job.savepoint("trigger").arg("--stop").run();
    let sp = savepoint_path(&stop);
    run.wait_for(Duration::from_secs(30)).expect_code(0);
    let partial = job.lines().len();
    assert!(partial < crate::ckpt::expected().len(), "the run finished before the stop; nothing to resume");
    let restore = weir(&["restore", &sp.display().to_string(), PIPELINE, "--no-progress", "-p", "2"]);
    let o = fast(to.apply(restore.set("state.dir", &job.state).set("sinks.out.path", &job.out))).run();
    o.expect_code(0);
    o.expect_stderr_contains("Restoring from checkpoint.");
    job.assert_no_in_progress_files();
    assert_exactly_once(&format!("savepoint of {from:?} restored into {to:?}"), job.lines());
}

#[test]
fn a_memory_savepoint_restores_into_rocksdb() {
    savepoint_across_backends(Backend::Memory, Backend::RocksDb);
}

#[test]
fn a_rocksdb_savepoint_restores_into_memory() {
    savepoint_across_backends(Backend::RocksDb, Backend::Memory);
}

/// Every entry under `dir` (not following links, never reading a FIFO):
/// relative path -> (file type, size), to compare a tree before and after.
fn entries(dir: &Path) -> std::collections::BTreeMap<PathBuf, (String, u64)> {
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<PathBuf, (String, u64)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            out.insert(p.strip_prefix(root).unwrap().to_path_buf(), (format!("{:?}", m.file_type()), m.len()));
            if m.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// A savepoint made from a finished run's newest checkpoint (its
/// `_metadata` rewritten to kind savepoint, checksum and all).
fn crafted_savepoint(job: &Job, at: &Path) {
    use weir::checkpoint::manifest::{Document, Metadata};
    use weir::types::Kind;
    fast(job.cmd()).ok();
    let chk = job.checkpoints().pop().expect("a retained checkpoint");
    super::ckpt::copy_dir(&chk, at);
    let md = Metadata::from_bytes(&std::fs::read(at.join("_metadata")).unwrap()).unwrap();
    std::fs::write(at.join("_metadata"), Metadata { kind: Kind::Savepoint, ..md }.to_bytes()).unwrap();
    weir(&["inspect", &at.display().to_string()]).ok();
}

#[test]
fn dispose_refuses_links_dot_forms_and_anything_but_a_savepoint_root_deleting_nothing() {
    let job = Job::new();
    let root = job.dir.path().join("sps");
    let sp = root.join("sp");
    crafted_savepoint(&job, &sp);
    let link = root.join("link");
    std::os::unix::fs::symlink(&sp, &link).unwrap();
    let before = entries(&root);
    let s = |p: &Path| p.display().to_string();
    // (path, cwd, what stderr says)
    let cases = [
        (s(&link), None, "symbolic link"),
        (format!("{}/", link.display()), None, "symbolic link"),
        (format!("{}/_metadata", link.display()), None, "symbolic link"),
        (".".to_string(), Some(sp.clone()), "`.` is refused"),
        ("./".to_string(), Some(sp.clone()), "`.` is refused"),
        (format!("{}/.", sp.display()), None, "`.` is refused"),
        (format!("{}/bundle-000/..", sp.display()), None, "`..` in the path is refused"),
        ("../sp".to_string(), Some(sp.join("bundle-000")), "`..` in the path is refused"),
        (s(&sp.join("bundle-000")), None, "not a weir savepoint"),
        (s(&root), None, "not a weir savepoint"),
        (s(&sp.join("_metadata/")), None, "not a directory"),
    ];
    for (path, cwd, why) in &cases {
        let mut cmd = weir(&["savepoint", "dispose", path]);
        if let Some(dir) = cwd {
            cmd = cmd.cwd(dir);
        }
        let o = cmd.run();
        o.expect_code(2);
        o.expect_stderr_contains(why);
        assert_eq!(entries(&root), before, "`dispose {path}` changed the tree");
    }

    // Not exactly a savepoint root: an extra file, a FIFO or a link inside.
    let extras: [(&str, fn(&Path)); 3] = [
        ("notes", |p| std::fs::write(p, b"mine").unwrap()),
        ("bundle-000/fifo", |p| assert!(std::process::Command::new("mkfifo").arg(p).status().unwrap().success())),
        ("bundle-000/link", |p| std::os::unix::fs::symlink("/etc/passwd", p).unwrap()),
    ];
    for (name, make) in extras {
        let extra = sp.join(name);
        make(&extra);
        let before = entries(&root);
        let o = weir(&["savepoint", "dispose", &s(&sp)]).run();
        o.expect_code(2);
        o.expect_stderr_contains(name);
        assert_eq!(entries(&root), before, "dispose with {name} inside changed the tree");
        std::fs::remove_file(&extra).unwrap();
    }

    // The savepoint itself, with a trailing slash: it goes, and only it.
    let o = weir(&["savepoint", "dispose", &format!("{}/", sp.display())]).run();
    o.expect_code(0);
    assert!(!sp.exists());
    let left: Vec<_> = entries(&root).into_keys().collect();
    assert_eq!(left, vec![PathBuf::from("link")], "only the (now dangling) link is left");
}

/// `weir run` of the checkpointed pipeline for savepoint tests: slow
/// source, no periodic checkpoints, every barrier delayed by `delay`.
fn slow_run(job: &Job, delay: &str) -> super::util::Running {
    let cmd = job.cmd().set("checkpoint.interval", "1h").set("sources.events.rate_limit", "300");
    let run = cmd.env("WEIR_FAULTS", format!("barrier_delay={delay}")).spawn();
    job.wait_for_socket();
    run
}

#[test]
fn two_savepoints_racing_for_one_target_each_get_their_own_child() {
    // Two pipelines of one name with their own state dirs, one target. The
    // barrier delay keeps both savepoints in flight at once; with the same
    // checkpoint id both want the same child name.
    let (a, b) = (Job::new(), Job::new());
    let (run_a, run_b) = (slow_run(&a, "1s"), slow_run(&b, "1s"));
    let target = a.dir.path().join("shared-target");
    let trigger = |job: &Job| job.savepoint("trigger").arg("--target").arg(target.display().to_string()).spawn();
    let (ta, tb) = (trigger(&a), trigger(&b));
    let (sa, sb) = (savepoint_path(&ta.wait_for(Duration::from_secs(30))), savepoint_path(&tb.wait_for(Duration::from_secs(30))));
    assert_ne!(sa, sb, "one child was used twice");
    let id = |sp: &Path| {
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(sp.join("_metadata")).unwrap()).unwrap()["checkpoint_id"].clone()
    };
    if id(&sa) == id(&sb) {
        let names = [&sa, &sb].map(|p| p.file_name().unwrap().to_string_lossy().into_owned());
        assert!(names.iter().any(|n| n.ends_with("-1")), "the second of one name takes the next free one: {names:?}");
    }
    for sp in [&sa, &sb] {
        assert_child_of(sp, &target);
        weir(&["inspect", &sp.display().to_string()]).ok();
        assert_eq!(kind_of(sp), "savepoint");
    }
    let hidden: Vec<_> = std::fs::read_dir(&target)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "temp directories left in the target: {hidden:?}");
    for run in [&run_a, &run_b] {
        run.terminate();
    }
    run_a.wait_for(Duration::from_secs(30)).expect_code(0);
    run_b.wait_for(Duration::from_secs(30)).expect_code(0);
    // And each restores.
    for (i, sp) in [&sa, &sb].into_iter().enumerate() {
        let fresh = a.dir.path().join(format!("fresh-{i}"));
        let restore = weir(&["restore", &sp.display().to_string(), PIPELINE, "--no-progress"]);
        let o = fast(restore).set("state.dir", fresh.join("state")).set("sinks.out.path", fresh.join("out")).run();
        o.expect_code(0);
        o.expect_stderr_contains("Restoring from checkpoint.");
    }
}

#[test]
fn a_target_inside_the_state_dirs_managed_folders_is_refused() {
    let job = Job::new();
    let run = slow_run(&job, "10ms");
    let chk = job.state.join("checkpoints").join("chk-0000009");
    let via_link = job.dir.path().join("to-state");
    std::os::unix::fs::symlink(&job.state, &via_link).unwrap();
    let managed = [
        chk.clone(),
        job.state.join("local/sp"),
        via_link.join("checkpoints/mine"),
        job.state.join("savepoints/../checkpoints/x"),
        job.state.clone(),
        job.state.join("mine"),
    ];
    let before = entries(job.dir.path());
    for t in managed {
        // The CLI refuses before it contacts the process (exit 2) ...
        let o = job.savepoint("trigger").arg("--target").arg(t.display().to_string()).run();
        o.expect_code(2);
        o.expect_stderr_contains("which weir manages");
        // ... and the process refuses the same over its socket.
        let answer = ask(&job.state.join("control.sock"), &format!(r#"{{"savepoint": {{"dir": "{}"}}}}"#, t.display()));
        assert_eq!(answer["ok"], false, "{answer}");
        assert!(answer["error"].as_str().unwrap().contains("which weir manages"), "{answer}");
    }
    // Nothing was created; only the running pipeline's checkpoints changed.
    let outside_checkpoints = |m: std::collections::BTreeMap<PathBuf, (String, u64)>| {
        m.into_iter().filter(|(p, _)| !p.starts_with("state/checkpoints") && !p.starts_with("out")).map(|(p, _)| p).collect::<Vec<_>>()
    };
    assert_eq!(outside_checkpoints(entries(job.dir.path())), outside_checkpoints(before), "a refused target changed the disk");
    assert!(!chk.exists(), "a refused target was created");
    // savepoints/ and below are fine.
    for t in [job.state.join("savepoints"), job.state.join("savepoints/mine")] {
        let ok = job.savepoint("trigger").arg("--target").arg(t.display().to_string()).run();
        assert_child_of(&savepoint_path(&ok), &t);
    }
    run.terminate();
    run.wait_for(Duration::from_secs(30)).expect_code(0);
}

#[test]
fn savepoints_into_one_target_get_new_children_and_stop_with_savepoint_into_it_succeeds() {
    // Regression: `--target DIR` was the savepoint itself, so the second
    // trigger into DIR, and a stop-with-savepoint into it, were refused.
    let job = Job::new();
    let run = slow_run(&job, "10ms");
    let target = job.dir.path().join("nightly");
    let trigger = || job.savepoint("trigger").arg("--target").arg(target.display().to_string());
    let first = savepoint_path(&trigger().run());
    let second = savepoint_path(&trigger().run());
    let stopped = savepoint_path(&trigger().arg("--stop").run());
    run.wait_for(Duration::from_secs(30)).expect_code(0);
    for sp in [&first, &second, &stopped] {
        assert_child_of(sp, &target);
        assert_eq!(kind_of(sp), "savepoint");
    }
    assert!(first != second && second != stopped && first != stopped, "{first:?} {second:?} {stopped:?}");
    let mut children: Vec<_> = std::fs::read_dir(&target).unwrap().map(|e| e.unwrap().path()).collect();
    children.sort();
    assert_eq!(children, vec![first.clone(), second.clone(), stopped.clone()], "nothing else in the target");

    // Each restores: the first from its directory, the second from its
    // _metadata (into fresh dirs), the stop into the job's own, exactly once.
    for (i, sp) in [first.clone(), second.join("_metadata")].into_iter().enumerate() {
        let fresh = job.dir.path().join(format!("fresh-{i}"));
        let restore = weir(&["restore", &sp.display().to_string(), PIPELINE, "--no-progress"]);
        let o = fast(restore).set("state.dir", fresh.join("state")).set("sinks.out.path", fresh.join("out")).run();
        o.expect_code(0);
        o.expect_stderr_contains("Restoring from checkpoint.");
    }
    let restore = weir(&["run", PIPELINE, "--no-progress", "--restore", &stopped.display().to_string()]);
    fast(restore.set("state.dir", &job.state).set("sinks.out.path", &job.out)).ok();
    job.assert_no_in_progress_files();
    assert_exactly_once("stop-with-savepoint into a used target, then restore", job.lines());

    // The target itself is no savepoint: refused, naming one of its children.
    let fresh = job.dir.path().join("fresh-parent");
    let o = weir(&["restore", &target.display().to_string(), PIPELINE, "--no-progress"]).set("state.dir", fresh.join("state")).run();
    o.expect_code(2);
    o.expect_stderr_contains(&format!("it holds savepoints: restore one of them, e.g. {}", stopped.display()));
    assert!(!fresh.exists(), "a refused restore created {}", fresh.display());
}

/// pipelines/checkpointed.yaml with `savepoint: {dir: DIR}`, in the job's dir.
fn with_savepoint_dir(job: &Job, dir: &Path) -> String {
    let text = std::fs::read_to_string(super::util::repo().join(PIPELINE)).unwrap();
    let path = job.dir.path().join("with-savepoint-dir.yaml");
    std::fs::write(&path, format!("{text}savepoint: {{dir: '{}'}}\n", dir.display())).unwrap();
    path.display().to_string()
}

#[test]
fn savepoint_dir_of_the_pipeline_is_the_default_target_and_list_shows_both_places() {
    let job = Job::new();
    let sps = job.dir.path().join("sps");
    let yaml = with_savepoint_dir(&job, &sps);
    let cmd = weir(&["run", &yaml, "--no-progress"]).set("state.dir", &job.state).set("sinks.out.path", &job.out);
    let run = cmd.set("checkpoint.interval", "1h").set("sources.events.rate_limit", "300").spawn();
    job.wait_for_socket();
    let savepoint = |sub: &str| weir(&["savepoint", sub, &yaml]).set("state.dir", &job.state);

    // No --target: a child of savepoint.dir (created for it).
    let in_dir = savepoint_path(&savepoint("trigger").run());
    assert_child_of(&in_dir, &sps);
    // --target wins over it: here the state directory's savepoints/.
    let in_state = savepoint_path(&savepoint("trigger").arg("--target").arg(job.state.join("savepoints").display().to_string()).run());
    assert_child_of(&in_state, &job.state.join("savepoints"));
    run.terminate();
    run.wait_for(Duration::from_secs(30)).expect_code(0);

    // Another pipeline's savepoint and a stray directory in savepoint.dir are not this pipeline's.
    std::fs::create_dir_all(sps.join("savepoint-other-0000001")).unwrap();
    std::fs::create_dir_all(sps.join("notes")).unwrap();
    let list = savepoint("list").run();
    list.expect_code(0);
    let rows: Vec<&str> = list.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{}", list.stdout);
    for (row, sp) in rows.iter().zip([&in_state, &in_dir]) {
        assert!(row.contains(&sp.display().to_string()) && row.ends_with("yes"), "{}", list.stdout);
    }
    // `list --target` adds a place.
    let extra = job.dir.path().join("extra");
    super::ckpt::copy_dir(&in_state, &extra.join("savepoint-checkpointed-0000099"));
    let list = savepoint("list").arg("--target").arg(extra.display().to_string()).run();
    assert_eq!(list.stdout.lines().count(), 4, "{}", list.stdout);

    // Dispose the child in savepoint.dir: it goes, its parent and neighbours stay.
    weir(&["savepoint", "dispose", &in_dir.display().to_string()]).ok();
    assert!(!in_dir.exists() && sps.join("notes").is_dir() && sps.join("savepoint-other-0000001").is_dir());
    let list = savepoint("list").run();
    assert_eq!(list.stdout.lines().count(), 2, "{}", list.stdout);
}

#[test]
fn a_refused_target_or_savepoint_dir_changes_nothing_on_disk() {
    let job = Job::new();
    let run = slow_run(&job, "10ms");
    let file = job.dir.path().join("a-file");
    std::fs::write(&file, b"mine").unwrap();
    let locked = job.dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    // root may write anywhere: the unwritable case is only checked for others.
    let locked_is_writable = std::fs::create_dir(locked.join("probe")).and_then(|()| std::fs::remove_dir(locked.join("probe"))).is_ok();
    let mut cases = vec![(file.clone(), "is not a directory"), (file.join("sub"), "a-file is not a directory")];
    if !locked_is_writable {
        cases.push((locked.join("sps"), "permission denied"));
    }
    let before = entries(job.dir.path());
    let unchanged = |m: std::collections::BTreeMap<PathBuf, (String, u64)>| {
        m.into_iter().filter(|(p, _)| !p.starts_with("state/checkpoints") && !p.starts_with("out")).collect::<Vec<_>>()
    };
    for (t, why) in &cases {
        let o = job.savepoint("trigger").arg("--target").arg(t.display().to_string()).run();
        o.expect_code(2);
        o.expect_stderr_contains(why);
        // The process refuses the same over its socket.
        let answer = ask(&job.state.join("control.sock"), &format!(r#"{{"savepoint": {{"dir": "{}"}}}}"#, t.display()));
        assert_eq!(answer["ok"], false, "{answer}");
        assert!(answer["error"].as_str().unwrap().contains(why), "{answer}");
        // A savepoint.dir there is refused alike.
        let yaml = with_savepoint_dir(&job, t);
        let o = weir(&["savepoint", "trigger", &yaml, "--stop"]).set("state.dir", &job.state).run();
        o.expect_code(2);
        o.expect_stderr_contains(why);
        o.expect_stderr_contains("savepoint.dir of ");
        std::fs::remove_file(&yaml).unwrap();
        assert_eq!(unchanged(entries(job.dir.path())), unchanged(before.clone()), "refusing {} changed the disk", t.display());
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"mine");
    // The refused --stop did not stop it.
    let status = ask(&job.state.join("control.sock"), r#"{"status": {}}"#);
    assert_eq!((status["ok"].as_bool(), status["stopping"].as_bool()), (Some(true), Some(false)), "{status}");
    run.terminate();
    run.wait_for(Duration::from_secs(30)).expect_code(0);
}

#[test]
fn savepoint_dir_is_validated_with_the_other_outputs() {
    let dir = tmp();
    let base = std::fs::read_to_string(super::util::repo().join(PIPELINE)).unwrap();
    let check = |name: &str, yaml: String, want: Option<&str>| {
        let path = dir.path().join(name);
        std::fs::write(&path, yaml).unwrap();
        let o = weir(&["validate", &path.display().to_string()]).run();
        match want {
            None => o.expect_code(0),
            Some(why) => {
                o.expect_code(2);
                o.expect_stderr_contains(why);
            }
        }
    };
    let with = |sp: &str| format!("{base}savepoint: {sp}\n");
    check("outside.yaml", with("{dir: savepoints/checkpointed}"), None);
    check("holds-state.yaml", with("{dir: state}"), None);
    check("state-savepoints.yaml", with("{dir: state/checkpointed/savepoints/nightly}"), None);
    check("in-state.yaml", with("{dir: state/checkpointed/mine}"), Some("is inside the state directory"));
    check("is-state.yaml", with("{dir: ./state/checkpointed}"), Some("is also the state directory"));
    check("in-sink.yaml", with("{dir: out/checkpointed/sps}"), Some("contains the savepoint directory `out/checkpointed/sps`"));
    check("empty.yaml", with("{dir: ''}"), Some("`savepoint.dir` is empty"));
    check("unknown.yaml", with("{dri: x}"), Some("unknown field `dri`"));
    let unchecked = base.replace("checkpoint:\n  interval: 150ms\n  mode: exactly_once\n  alignment: aligned\n  retain: 3\n", "");
    assert_ne!(unchecked, base, "{PIPELINE} changed its checkpoint section");
    check("no-checkpoint.yaml", format!("{unchecked}savepoint: {{dir: sps}}\n"), Some("`savepoint` needs a `checkpoint:` section"));
}

/// The job's run of the checkpointed pipeline with `savepoint: {dir:
/// target, on_sigterm: true}` added.
fn on_sigterm(job: &Job, target: &Path) -> Weir {
    let text = std::fs::read_to_string(super::util::repo().join(PIPELINE)).unwrap();
    let yaml = job.dir.path().join("on-sigterm.yaml");
    std::fs::write(&yaml, format!("{text}savepoint: {{dir: \"{}\", on_sigterm: true}}\n", target.display())).unwrap();
    weir_run(&yaml.display().to_string(), 2).set("state.dir", &job.state).set("sinks.out.path", &job.out)
}

both_backends! {
    /// `savepoint.on_sigterm: true`: SIGTERM stops the run with a savepoint
    /// in `savepoint.dir` instead of a final checkpoint, its path on stderr,
    /// exit 0. Both ways on give exactly the reference output: restoring the
    /// savepoint (into a copy of the output so far), and `--restore latest`
    /// of the same state directory, which resumes at the savepoint (the stop
    /// committed its sinks there, so an older checkpoint would repeat output).
    fn sigterm_with_on_sigterm_stops_with_a_savepoint_that_restores_exactly_once(backend: Backend) {
        let job = Job::with(backend);
        let target = job.dir.path().join("sps");
        // Slower than the default, so that SIGTERM comes before the input ends.
        let run = backend.apply(on_sigterm(&job, &target)).set("sources.events.rate_limit", "300").spawn();
        assert!(wait_until(Duration::from_secs(20), || !part_files(&job.out).is_empty()), "no output published");
        run.terminate();
        let o = run.wait_for(Duration::from_secs(30));
        o.expect_code(0);
        assert!(!o.stderr.contains("Input exhausted"), "the run ended by its input, not by SIGTERM; make the input longer");
        let line = o.stderr.lines().find_map(|l| l.strip_prefix("Stopped with a savepoint on SIGTERM. Path: ")).unwrap_or_else(|| panic!("{}", o.stderr));
        let sp = PathBuf::from(line);
        assert_child_of(&sp, &target);
        assert_eq!(kind_of(&sp), "savepoint");
        assert!(!o.stdout.contains("Savepoint"), "stdout is left to the sinks: {}", o.stdout);
        job.assert_no_in_progress_files();
        let id: u64 = sp.file_name().unwrap().to_string_lossy().rsplit('-').next().unwrap().parse().unwrap();
        let partial = job.lines().len();
        assert!(partial < crate::ckpt::expected().len(), "the run finished before the stop; nothing to resume");

        // The savepoint, into a fresh state directory and a copy of the output.
        let (state2, out2) = (job.dir.path().join("state2"), job.dir.path().join("out2"));
        copy_dir(&job.out, &out2);
        let o = fast(backend.apply(weir_run(PIPELINE, 2).set("state.dir", &state2).set("sinks.out.path", &out2)))
            .arg("--restore")
            .arg(sp.display().to_string())
            .run();
        o.expect_code(0);
        assert_exactly_once("restore of the SIGTERM savepoint", crate::util::sink_lines(&out2));

        // --restore latest of the stopped run resumes at the savepoint.
        let o = fast(job.restore()).run();
        o.expect_code(0);
        assert_eq!(restored_from(&o.stderr), Some(id), "--restore latest resumes where the stop committed: {}", o.stderr);
        job.assert_no_in_progress_files();
        assert_exactly_once("--restore latest after the SIGTERM savepoint", job.lines());
    }
}

/// `savepoint.on_sigterm_keep: 2`: every SIGTERM (a rollout) stops with a
/// savepoint; after the third only the two newest taken on SIGTERM are
/// left, the one a command triggered into the same directory stays, and
/// `--restore latest` still gives exactly the reference output.
#[test]
fn only_the_newest_savepoints_taken_on_sigterm_are_kept_and_never_a_triggered_one() {
    let job = Job::new();
    let target = job.dir.path().join("sps");
    let mut taken = Vec::new();
    let mut triggered = None;
    for round in 0..3 {
        let mut cmd = on_sigterm(&job, &target).set("savepoint.on_sigterm_keep", "2").set("sources.events.rate_limit", "300");
        if round > 0 {
            cmd = cmd.arg("--restore").arg("latest");
        }
        let published = part_files(&job.out).len();
        let run = cmd.spawn();
        assert!(wait_until(Duration::from_secs(20), || part_files(&job.out).len() > published), "round {round}: no new output");
        if round == 1 {
            job.wait_for_socket();
            let yaml = job.dir.path().join("on-sigterm.yaml").display().to_string();
            let o = weir(&["savepoint", "trigger", &yaml, "--target", &target.display().to_string()]).set("state.dir", &job.state).run();
            triggered = Some(savepoint_path(&o));
        }
        run.terminate();
        let o = run.wait_for(Duration::from_secs(30));
        o.expect_code(0);
        assert!(!o.stderr.contains("Input exhausted"), "round {round} ended by its input, not by SIGTERM");
        let line = o
            .stderr
            .lines()
            .find_map(|l| l.strip_prefix("Stopped with a savepoint on SIGTERM. Path: "))
            .unwrap_or_else(|| panic!("{}", o.stderr));
        taken.push(PathBuf::from(line));
        if round == 2 {
            o.expect_stderr_contains("Disposed an older savepoint taken on SIGTERM");
        }
    }
    let mut left: Vec<PathBuf> = std::fs::read_dir(&target).unwrap().map(|e| e.unwrap().path()).collect();
    left.sort();
    let mut want = vec![taken[1].clone(), taken[2].clone(), triggered.unwrap()];
    want.sort();
    assert_eq!(left, want, "the oldest SIGTERM savepoint {} goes, nothing else", taken[0].display());
    let o = fast(job.restore()).run();
    o.expect_code(0);
    assert_exactly_once("--restore latest after three SIGTERM stops", job.lines());
}

/// Without `savepoint.on_sigterm`, SIGTERM stops with a final checkpoint as
/// before (no savepoint), and SIGINT does so even with it.
#[test]
fn sigint_stops_with_a_final_checkpoint_even_with_on_sigterm() {
    let job = Job::new();
    let target = job.dir.path().join("sps");
    let run = on_sigterm(&job, &target).spawn();
    assert!(wait_until(Duration::from_secs(20), || !part_files(&job.out).is_empty()), "no output published");
    run.interrupt();
    let o = run.wait_for(Duration::from_secs(30));
    o.expect_code(0);
    assert!(!o.stderr.contains("Stopped with a savepoint"), "{}", o.stderr);
    assert!(!target.exists(), "SIGINT takes no savepoint");
    let o = fast(job.restore()).run();
    o.expect_code(0);
    assert_exactly_once("--restore latest after SIGINT", job.lines());
}

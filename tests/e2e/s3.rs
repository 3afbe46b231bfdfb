//! Checkpoints and savepoints on S3-compatible object storage, against a
//! real server: the one the AWS variables name (`AWS_ENDPOINT_URL`, ...,
//! bucket `WEIR_S3_BUCKET`, default `weir`; scripts/test.sh starts
//! scripts/s3-server.sh when they are unset). Without one every test here
//! says so and passes without running. Each test works under a prefix of
//! its own. The server-outage test starts a private server (the s3s-fs
//! that scripts/s3-server.sh installed) so it can stop it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use weir::checkpoint::remote::ObjectStorage;
use weir::checkpoint::storage::Storage;

use super::ckpt::{assert_exactly_once, completed, fast, kill_after, restored_from, Backend, Job, Rng};
use super::savepoint::savepoint_path;
use super::util::{hidden_files, part_files, repo, tmp, wait_until, weir, Weir, RUN_TIMEOUT};

/// A prefix of the test bucket, for one test.
struct Bucket {
    url: String,
    storage: ObjectStorage,
    /// The server's environment (None: inherited from the test's).
    env: Vec<(String, String)>,
}

fn configured() -> bool {
    std::env::var_os("AWS_ENDPOINT_URL").is_some() || std::env::var_os("WEIR_S3_ENDPOINT").is_some()
}

impl Bucket {
    /// The configured server, or None (and a message) without one.
    fn new(test: &str) -> Option<Bucket> {
        if !configured() {
            eprintln!("{test}: skipped: no S3 server (set AWS_ENDPOINT_URL and the AWS credentials, or run scripts/test.sh)");
            return None;
        }
        if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
            // SAFETY of the process: tests only read this variable.
            std::env::set_var("AWS_ENDPOINT_URL", std::env::var_os("WEIR_S3_ENDPOINT").unwrap());
        }
        Some(Bucket::at(test, Vec::new()))
    }

    fn at(test: &str, env: Vec<(String, String)>) -> Bucket {
        let bucket = env
            .iter()
            .find(|(k, _)| k == "WEIR_S3_BUCKET")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var("WEIR_S3_BUCKET").ok())
            .unwrap_or_else(|| "weir".into());
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let unique = format!("{test}-{}-{nanos}", std::process::id());
        let url = format!("s3://{bucket}/e2e/{unique}");
        // The test's own client: the private server's variables as options.
        let options: Vec<(String, String)> =
            env.iter().filter(|(k, _)| k.starts_with("AWS_")).map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
        let storage = ObjectStorage::open(&url, &options).expect("opening the test bucket");
        Bucket { url, storage, env }
    }

    fn apply(&self, w: Weir) -> Weir {
        self.env(w).set("checkpoint.storage", &self.url)
    }

    /// The server's environment only (commands without a pipeline).
    fn env(&self, mut w: Weir) -> Weir {
        for (k, v) in &self.env {
            w = w.env(k, v);
        }
        w
    }

    /// The keys under the prefix, with sizes.
    fn objects(&self) -> Vec<(String, u64)> {
        self.storage.list("").unwrap().into_iter().map(|o| (o.key, o.size)).collect()
    }

    /// Ids of the checkpoints with a `_metadata`, ascending.
    fn complete(&self) -> Vec<u64> {
        weir::checkpoint::publish::checkpoints(&self.storage).unwrap().into_iter().filter(|(_, d)| *d).map(|(id, _)| id).collect()
    }
}

/// `weir run pipelines/checkpointed.yaml -p 2` with its checkpoints in `bucket`.
fn on_bucket(bucket: &Bucket, backend: Backend, state: &std::path::Path, out: &std::path::Path) -> Weir {
    // RocksDB: incremental checkpoints (the default), SSTs under `shared/`.
    bucket.apply(backend.apply(super::util::weir_run(super::ckpt::PIPELINE, 2).set("state.dir", state).set("sinks.out.path", out)))
}

fn job_on(bucket: &Bucket, backend: Backend) -> (Job, impl Fn() -> Weir + '_, impl Fn() -> Weir + '_) {
    let job = Job::with(backend);
    let (state, out) = (job.state.clone(), job.out.clone());
    let (s2, o2) = (state.clone(), out.clone());
    let cmd = move || on_bucket(bucket, backend, &state, &out);
    let restore = move || on_bucket(bucket, backend, &s2, &o2).arg("--restore").arg("latest");
    (job, cmd, restore)
}

fn clean_run_is_golden(backend: Backend, incremental: bool) {
    let Some(bucket) = Bucket::new(&format!("clean-{backend:?}-{incremental}")) else { return };
    let (job, cmd, _) = job_on(&bucket, backend);
    let cmd = || if incremental || backend == Backend::Memory { cmd() } else { cmd().set("state.incremental", "false") };
    // Slow enough for several checkpoints (SSTs shared between them, subsumed ones deleted).
    let o = cmd().set("sources.events.rate_limit", "3000").ok();
    job.assert_no_in_progress_files();
    assert_exactly_once(&format!("clean run on S3 ({backend:?}, incremental {incremental})"), job.lines());
    let complete = bucket.complete();
    assert!(!complete.is_empty() && complete.len() <= 3, "retain 3 in the store: {complete:?}\n{}", o.stderr);
    assert_eq!(complete.last().copied(), completed(&o.stderr).last().copied(), "the last completed checkpoint is in the store");
    let stray: Vec<_> = bucket
        .objects()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("shared/") && !complete.iter().any(|id| k.starts_with(&format!("chk-{id:07}/"))))
        .collect();
    assert!(stray.is_empty(), "objects of no retained checkpoint: {stray:?}");
    // Shared SSTs: exactly those the retained MANIFESTs reference.
    let mut referenced = std::collections::BTreeSet::new();
    for (k, _) in bucket.objects().iter().filter(|(k, _)| k.ends_with("/MANIFEST")) {
        let m: serde_json::Value = serde_json::from_slice(&bucket.storage.get(k).unwrap()).unwrap();
        for f in m["files"].as_array().unwrap().iter().filter(|f| f["shared"] == true) {
            referenced.insert(format!("shared/{}", f["name"].as_str().unwrap()));
        }
    }
    let shared: std::collections::BTreeSet<String> =
        bucket.objects().into_iter().map(|(k, _)| k).filter(|k| k.starts_with("shared/")).collect();
    assert_eq!(shared, referenced, "shared objects in the store vs referenced ones");
    assert_eq!(!shared.is_empty(), backend == Backend::RocksDb && incremental, "shared SSTs only for incremental RocksDB: {shared:?}");
    assert!(!o.stderr.contains("weir-test-secret") && !o.stderr.contains("AWS_SECRET"), "a credential reached the log:\n{}", o.stderr);
}

#[test]
fn clean_run_on_s3_is_golden_memory() {
    clean_run_is_golden(Backend::Memory, false);
}

#[test]
fn clean_run_on_s3_is_golden_rocksdb_incremental() {
    clean_run_is_golden(Backend::RocksDb, true);
}

#[test]
fn clean_run_on_s3_is_golden_rocksdb_full() {
    clean_run_is_golden(Backend::RocksDb, false);
}

/// Run, kill -9 once checkpoints are in the store, return the job.
fn killed_midway<'a>(bucket: &'a Bucket, backend: Backend) -> (Job, impl Fn() -> Weir + 'a) {
    let (job, cmd, restore) = job_on(bucket, backend);
    let mut run = cmd().set("sources.events.rate_limit", "700").spawn();
    let stored = wait_until(Duration::from_secs(20), || bucket.complete().len() >= 2);
    assert!(stored, "no checkpoints reached the store");
    assert!(kill_after(&mut run, Duration::from_millis(100)), "the run ended before the kill");
    (job, restore)
}

#[test]
fn restore_on_a_new_machine_gives_the_clean_output() {
    for backend in [Backend::Memory, Backend::RocksDb] {
        restore_on_a_new_machine(backend);
    }
}

fn restore_on_a_new_machine(backend: Backend) {
    let Some(bucket) = Bucket::new(&format!("new-machine-{backend:?}")) else { return };
    let (job, restore) = killed_midway(&bucket, backend);
    // The machine is gone: nothing of the state directory is left.
    std::fs::remove_dir_all(&job.state).unwrap();
    let o = fast(restore()).ok();
    assert!(o.stderr.contains("Downloaded the checkpoint from the store."), "{}", o.stderr);
    assert!(restored_from(&o.stderr).is_some(), "{}", o.stderr);
    assert!(hidden_files(&job.out).is_empty());
    assert_exactly_once(&format!("restore on a new machine ({backend:?})"), job.lines());
}

#[test]
fn local_recovery_uses_a_matching_local_copy() {
    let Some(bucket) = Bucket::new("local-recovery") else { return };
    let (job, restore) = killed_midway(&bucket, Backend::Memory);
    let o = fast(restore()).ok();
    assert!(o.stderr.contains("Local copy matches the store; restoring from it (local recovery)."), "{}", o.stderr);
    assert_exactly_once("local recovery", job.lines());
}

#[test]
fn crash_loop_on_s3_is_exactly_once() {
    for backend in [Backend::Memory, Backend::RocksDb] {
        let Some(bucket) = Bucket::new(&format!("crash-{backend:?}")) else { return };
        let (job, cmd, restore) = job_on(&bucket, backend);
        let mut rng = Rng::from_env("s3 crash loop");
        let mut kills = 0;
        for i in 0..5 {
            let w = if i == 0 { cmd() } else { restore() };
            let mut run = w.set("sources.events.rate_limit", "700").spawn();
            if !kill_after(&mut run, rng.millis(150, 900)) {
                run.wait_for(RUN_TIMEOUT).expect_code(0);
                break;
            }
            kills += 1;
        }
        restore().set("sources.events.rate_limit", "700").ok();
        assert!(hidden_files(&job.out).is_empty());
        assert_exactly_once(&format!("S3 crash loop {backend:?}, {kills} kills"), job.lines());
    }
}

/// What a damage does to one object.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Delete,
    Truncate,
    Corrupt,
}

fn damage(bucket: &Bucket, key: &str, how: Damage) {
    let s = &bucket.storage;
    match how {
        Damage::Delete => s.delete(key).unwrap(),
        Damage::Truncate => {
            let b = s.get(key).unwrap();
            s.put(key, &b[..b.len() / 2]).unwrap()
        }
        Damage::Corrupt => {
            let mut b = s.get(key).unwrap();
            let mid = b.len() / 2;
            b[mid] ^= 0x55;
            s.put(key, &b).unwrap()
        }
    }
}

#[test]
fn a_damaged_object_in_the_newest_checkpoint_falls_back_and_an_explicit_url_changes_nothing() {
    let Some(bucket) = Bucket::new("damage") else { return };
    let (job, restore) = killed_midway(&bucket, Backend::Memory);
    std::fs::remove_dir_all(&job.state).unwrap();
    let newest = *bucket.complete().last().unwrap();
    let keys: Vec<String> = bucket.objects().into_iter().map(|(k, _)| k).filter(|k| k.starts_with(&format!("chk-{newest:07}/"))).collect();
    let pristine: Vec<(String, Vec<u8>)> = keys.iter().map(|k| (k.clone(), bucket.storage.get(k).unwrap())).collect();
    let snapshot = keys.iter().find(|k| k.ends_with(".snapshot")).expect("a task snapshot").clone();
    let manifest = keys.iter().find(|k| k.ends_with("MANIFEST")).unwrap().clone();
    let metadata = format!("chk-{newest:07}/_metadata");
    for (key, how) in
        [(&snapshot, Damage::Delete), (&snapshot, Damage::Truncate), (&manifest, Damage::Corrupt), (&metadata, Damage::Corrupt)]
    {
        damage(&bucket, key, how);
        // The explicit URL: exit 2 naming the object; the store is as it was.
        let before = bucket.objects();
        let url = format!("{}/chk-{newest:07}", bucket.url);
        let o = bucket
            .apply(weir(&["run", super::ckpt::PIPELINE, "--no-progress", "-p", "2"]))
            .set("state.dir", &job.state)
            .set("sinks.out.path", &job.out)
            .arg("--restore")
            .arg(&url)
            .run();
        o.expect_code(2);
        let named = format!("{}/{key}", bucket.url);
        assert!(o.stderr.contains(&named), "{how:?} {key}: the error names {named}:\n{}", o.stderr);
        assert_eq!(bucket.objects(), before, "{how:?} {key}: a refused restore changed the store");
        assert!(!job.state.exists(), "{how:?} {key}: a refused restore created the state directory");
        // `latest` falls back and says why; the run is stopped once it
        // committed a checkpoint of its own (not run to the end).
        let mut probe = restore().set("sources.events.rate_limit", "1").set("checkpoint.retain", "1000").spawn();
        let progressed = wait_until(Duration::from_secs(30), || bucket.complete().iter().any(|&id| id > newest));
        let _ = probe.child.kill();
        let o = probe.wait_for(RUN_TIMEOUT);
        assert!(progressed, "{how:?} {key}: the restored run committed no checkpoint:\n{}", o.stderr);
        assert!(
            o.stderr.contains("Skipping an invalid checkpoint.") && o.stderr.contains(&format!("{}/{key}", bucket.url)),
            "{how:?} {key}:\n{}",
            o.stderr
        );
        let from = restored_from(&o.stderr);
        assert!(from.is_some_and(|id| id < newest), "{how:?} {key}: restored {from:?}, not one before {newest}:\n{}", o.stderr);
        // Repair for the next case; the probe's checkpoints and state go (a new machine again).
        for id in bucket.complete().into_iter().filter(|&id| id > newest) {
            weir::checkpoint::publish::remove(&bucket.storage, &format!("chk-{id:07}")).unwrap();
        }
        weir::checkpoint::publish::remove_unfinished(&bucket.storage).unwrap();
        for (k, b) in &pristine {
            bucket.storage.put(k, b).unwrap();
        }
        std::fs::remove_dir_all(&job.state).unwrap();
    }
}

#[test]
fn storage_faults_abort_checkpoints_and_the_output_stays_exactly_once() {
    let Some(bucket) = Bucket::new("storage-fail") else { return };
    let (job, cmd, _) = job_on(&bucket, Backend::Memory);
    let o = cmd().set("checkpoint.tolerable_failures", "1000").env("WEIR_FAULTS", "storage_fail=0.3,seed=7").ok();
    assert!(!completed(&o.stderr).is_empty(), "no checkpoint completed:\n{}", o.stderr);
    job.assert_no_in_progress_files();
    assert_exactly_once("storage_fail=0.3", job.lines());
}

#[test]
fn savepoint_to_s3_restores_at_another_parallelism_and_is_disposed() {
    let Some(bucket) = Bucket::new("savepoint") else { return };
    let (job, cmd, _) = job_on(&bucket, Backend::Memory);
    let run = cmd().set("sources.events.rate_limit", "700").spawn();
    let sock = job.state.join("control.sock");
    assert!(wait_until(Duration::from_secs(20), || sock.exists()), "no control socket");
    assert!(wait_until(Duration::from_secs(20), || !part_files(&job.out).is_empty()), "no output published");
    let target = format!("{}/savepoints", bucket.url);
    let trigger =
        bucket.apply(weir(&["savepoint", "trigger", super::ckpt::PIPELINE, "--stop", "--target", &target])).set("state.dir", &job.state);
    let sp = savepoint_path(&trigger.run());
    let sp = sp.to_string_lossy().into_owned();
    assert!(sp.starts_with(&format!("{target}/savepoint-checkpointed-")), "{sp}");
    run.wait_for(RUN_TIMEOUT).expect_code(0);
    // Another machine, another parallelism.
    std::fs::remove_dir_all(&job.state).unwrap();
    let restored = bucket
        .apply(weir(&["restore", &sp, super::ckpt::PIPELINE, "--no-progress", "-p", "1"]))
        .set("state.dir", &job.state)
        .set("sinks.out.path", &job.out)
        .set("sources.events.rate_limit", "1000000000")
        .ok();
    assert!(restored.stderr.contains("Rescaling"), "{}", restored.stderr);
    assert_exactly_once("savepoint on S3, restored at parallelism 1", job.lines());
    // Dispose refuses a checkpoint, removes the savepoint.
    let chk_id = *bucket.complete().last().unwrap();
    let chk = format!("{}/chk-{chk_id:07}", bucket.url);
    let refused = bucket.env(weir(&["savepoint", "dispose", &chk])).run();
    refused.expect_code(2);
    assert!(refused.stderr.contains("says checkpoint, not savepoint"), "{}", refused.stderr);
    assert!(bucket.complete().contains(&chk_id), "a refused dispose removed the checkpoint");
    let o = bucket.env(weir(&["savepoint", "dispose", &sp])).ok();
    assert!(o.stdout.contains("Savepoint disposed"), "{}", o.stdout);
    let prefix = sp[bucket.url.len() + 1..].to_string();
    assert!(bucket.storage.list(&format!("{prefix}/")).unwrap().is_empty(), "the savepoint's objects are gone");
}

/// A private s3s-fs (so it can be stopped), if scripts/s3-server.sh installed one.
struct PrivateServer {
    data: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl PrivateServer {
    fn start(test: &str) -> Option<PrivateServer> {
        let root = std::env::var("WEIR_S3_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/weir/s3s-fs"));
        if !root.join("bin/s3s-fs").exists() {
            eprintln!("{test}: skipped: no s3s-fs in {} (scripts/s3-server.sh install)", root.display());
            return None;
        }
        let data = tmp();
        let out = script(&["start", "--data-dir", &data.path().display().to_string()]);
        let env = out
            .trim()
            .strip_prefix("export ")
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        Some(PrivateServer { data, env })
    }

    fn stop(&self) {
        script(&["stop", "--data-dir", &self.data.path().display().to_string()]);
    }

    fn start_again(&self) {
        let port = self.env.iter().find(|(k, _)| k == "AWS_ENDPOINT_URL").and_then(|(_, v)| v.rsplit(':').next()).unwrap().to_string();
        script(&["start", "--data-dir", &self.data.path().display().to_string(), "--port", &port]);
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn script(args: &[&str]) -> String {
    let o = Command::new(repo().join("scripts/s3-server.sh")).args(args).output().expect("running scripts/s3-server.sh");
    assert!(o.status.success(), "s3-server.sh {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn server_killed_during_checkpoints_aborts_them_then_they_succeed_again() {
    let Some(server) = PrivateServer::start("server-outage") else { return };
    let bucket = Bucket::at("outage", server.env.clone());
    let (job, cmd, _) = job_on(&bucket, Backend::Memory);
    let run = cmd().set("sources.events.rate_limit", "700").set("checkpoint.tolerable_failures", "1000").spawn();
    assert!(wait_until(Duration::from_secs(20), || !bucket.complete().is_empty()), "no checkpoint reached the store");
    server.stop();
    std::thread::sleep(Duration::from_millis(1500));
    server.start_again();
    let o = run.wait_for(RUN_TIMEOUT);
    o.expect_code(0);
    assert!(o.stderr.contains("Checkpoint aborted."), "no checkpoint aborted during the outage:\n{}", o.stderr);
    job.assert_no_in_progress_files();
    assert_exactly_once("S3 server outage", job.lines());
    // What the failed uploads left was removed once the store answered again.
    let complete = bucket.complete();
    let stray: Vec<_> =
        bucket.objects().into_iter().filter(|(k, _)| !complete.iter().any(|id| k.starts_with(&format!("chk-{id:07}/")))).collect();
    assert!(stray.is_empty(), "objects of aborted checkpoints left in the store: {stray:?}");
}

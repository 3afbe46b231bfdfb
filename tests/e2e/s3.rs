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
use super::util::{hidden_files, part_files, repo, tmp, wait_until, weir, weir_run, Weir, RUN_TIMEOUT};

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

    /// A bucket URL whose server the test points elsewhere (no request is sent here).
    fn offline() -> Bucket {
        let url = "s3://weir/e2e/offline".to_string();
        let storage = ObjectStorage::open(&url, &[]).expect("opening sends no request");
        Bucket { url, storage, env: Vec::new() }
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

    /// Stored names of the checkpoints with a `_metadata` (their
    /// generation in the name), ascending.
    fn complete_names(&self) -> Vec<String> {
        let stored = weir::checkpoint::publish::checkpoints(&self.storage).unwrap();
        stored.into_iter().filter(|(_, d)| *d).map(|(s, _)| s.name()).collect()
    }

    /// The stored name of complete checkpoint `id` (of the newest generation that has one).
    fn name_of(&self, id: u64) -> String {
        let stored = weir::checkpoint::publish::checkpoints(&self.storage).unwrap();
        stored.into_iter().rev().find(|(s, d)| *d && s.id == id).map(|(s, _)| s.name()).expect("a complete checkpoint of that id")
    }

    /// Ids of the checkpoints with a `_metadata`, ascending.
    fn complete(&self) -> Vec<u64> {
        let stored = weir::checkpoint::publish::checkpoints(&self.storage).unwrap();
        let mut ids: Vec<u64> = stored.into_iter().filter(|(_, d)| *d).map(|(s, _)| s.id).collect();
        ids.dedup();
        ids
    }
}

/// The storage's own records: the generations, and the owner record a
/// clean exit leaves released (checked by `assert_released`).
fn is_record(key: &str) -> bool {
    key.starts_with("_generations/") || key == "_owner"
}

impl Bucket {
    /// The owner record says released (a clean exit), or is absent.
    #[track_caller]
    fn assert_released(&self) {
        if let Ok(bytes) = self.storage.get("_owner") {
            let r: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(r["released"], true, "the owner record after a clean exit: {r}");
        }
    }
}

/// `weir run pipelines/checkpointed.yaml -p 2` with its checkpoints in `bucket`.
fn on_bucket(bucket: &Bucket, backend: Backend, state: &std::path::Path, out: &std::path::Path) -> Weir {
    on_bucket_at(bucket, backend, 2, state, out)
}

/// The same at parallelism `p`.
fn on_bucket_at(bucket: &Bucket, backend: Backend, p: u32, state: &std::path::Path, out: &std::path::Path) -> Weir {
    // RocksDB: incremental checkpoints (the default), SSTs under `shared/`.
    bucket.apply(backend.apply(super::util::weir_run(super::ckpt::PIPELINE, p).set("state.dir", state).set("sinks.out.path", out)))
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
    let names = bucket.complete_names();
    assert!(!complete.is_empty() && complete.len() <= 3, "retain 3 in the store: {complete:?}\n{}", o.stderr);
    assert_eq!(complete.last().copied(), completed(&o.stderr).last().copied(), "the last completed checkpoint is in the store");
    let stray: Vec<_> = bucket
        .objects()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("shared/") && !is_record(k) && !names.iter().any(|n| k.starts_with(&format!("{n}/"))))
        .collect();
    assert!(stray.is_empty(), "objects of no retained checkpoint: {stray:?}");
    bucket.assert_released();
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
    // A crash right after the second checkpoint's commit, not a timed kill:
    // a kill between the store's `_metadata` and the local one leaves a
    // local copy that rightly does not match (then the restore downloads).
    let (job, cmd, restore) = job_on(&bucket, Backend::Memory);
    let crashed = cmd().set("sources.events.rate_limit", "700").env("WEIR_FAULTS", "crash=after_metadata:2").run();
    crashed.expect_stderr_contains("injected crash at after_metadata");
    assert_eq!(bucket.complete().len(), 2, "{}", crashed.stderr);
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

/// The other checkpoint modes on S3 (issue 11 asks for all four there):
/// unaligned, and aligned with a timeout that switches to unaligned, stay
/// exactly once through kill -9s; at-least-once loses no record, so every
/// window of the reference has an output whose count is at least its count
/// (a replayed record may be counted twice).
#[test]
fn crash_loops_on_s3_in_the_other_checkpoint_modes() {
    let modes: [(&str, fn(Weir) -> Weir); 3] = [
        ("unaligned", |w| w.set("checkpoint.alignment", "unaligned")),
        ("aligned_timeout", |w| w.set("checkpoint.aligned_timeout", "1ms")),
        // The example pipeline says `alignment: aligned`, which at-least-once refuses.
        ("at_least_once", |w| w.set("checkpoint.mode", "at_least_once").set("checkpoint.alignment", "null")),
    ];
    for (mode, configure) in modes {
        let Some(bucket) = Bucket::new(&format!("mode-{mode}")) else { return };
        let (job, cmd, restore) = job_on(&bucket, Backend::RocksDb);
        let mut rng = Rng::from_env("s3 checkpoint modes");
        let mut kills = 0;
        for i in 0..3 {
            let w = configure(if i == 0 { cmd() } else { restore() });
            let mut run = w.set("sources.events.rate_limit", "700").spawn();
            if !kill_after(&mut run, rng.millis(300, 900)) {
                run.wait_for(RUN_TIMEOUT).expect_code(0);
                break;
            }
            kills += 1;
        }
        configure(restore()).set("sources.events.rate_limit", "700").ok();
        assert!(hidden_files(&job.out).is_empty());
        let what = format!("S3 crash loop, {mode}, {kills} kills");
        if mode != "at_least_once" {
            assert_exactly_once(&what, job.lines());
            continue;
        }
        let window = |o: &super::records::Obj| (o["user"].to_string(), o["window_start"].to_string());
        let mut counted = std::collections::HashMap::new();
        for line in job.lines() {
            let o = super::records::parse(&line);
            let n = o["n"].as_i64().unwrap();
            let best = counted.entry(window(&o)).or_insert(n);
            *best = n.max(*best);
        }
        for want in super::ckpt::reference_output() {
            let got = counted.get(&window(&want)).copied();
            assert!(got >= want["n"].as_i64(), "{what}: window {:?} counted {got:?}, the input has {}", window(&want), want["n"]);
        }
    }
}

/// What a damage does to one object.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Delete,
    Truncate,
    Corrupt,
}

/// Damage `key`; false if this damage cannot apply (an empty object).
fn damage(bucket: &Bucket, key: &str, how: Damage) -> bool {
    let s = &bucket.storage;
    let b = s.get(key).unwrap();
    match how {
        Damage::Delete => s.delete(key).unwrap(),
        _ if b.is_empty() => return false,
        Damage::Truncate => s.put(key, &b[..b.len() / 2]).unwrap(),
        Damage::Corrupt => {
            let mut b = b;
            let mid = b.len() / 2;
            b[mid] ^= 0x55;
            s.put(key, &b).unwrap()
        }
    }
    true
}

/// Every object of the newest checkpoint of an incremental RocksDB run
/// (task snapshots, the DB's private files, the MANIFEST, `_metadata`, and
/// the shared SSTs its MANIFEST references), deleted, truncated and
/// corrupted one at a time: the validator `--restore URL` runs names the
/// object and changes nothing. One object of each kind also goes through
/// the binary: `--restore URL` and `weir inspect URL` exit 2 naming it and
/// change nothing; `--restore latest` falls back to the newest older
/// checkpoint that does not reference it and says why (each probe ends
/// itself right after its restore, `crash=after_prepare:1`). The bucket is
/// put back as it was after each case.
#[test]
fn every_damaged_object_of_the_newest_checkpoint_falls_back_and_an_explicit_url_changes_nothing() {
    let Some(bucket) = Bucket::new("damage") else { return };
    let job = Job::with(Backend::RocksDb);
    let cmd = || on_bucket_at(&bucket, Backend::RocksDb, 1, &job.state, &job.out);
    let mut run = cmd().set("sources.events.rate_limit", "700").set("checkpoint.retain", "1000").spawn();
    assert!(wait_until(Duration::from_secs(20), || bucket.complete().len() >= 3), "no checkpoints reached the store");
    assert!(kill_after(&mut run, Duration::from_millis(50)), "the run ended before the kill");
    std::fs::remove_dir_all(&job.state).unwrap();
    let newest = *bucket.complete().last().unwrap();
    let chk = format!("{}/", bucket.name_of(newest));
    let pristine: Vec<(String, Vec<u8>)> =
        bucket.objects().into_iter().map(|(k, _)| (k.clone(), bucket.storage.get(&k).unwrap())).collect();
    let mut keys: Vec<String> = pristine.iter().map(|(k, _)| k.clone()).filter(|k| k.starts_with(&chk)).collect();
    for (k, b) in pristine.iter().filter(|(k, _)| k.starts_with(&chk) && k.ends_with("/MANIFEST") && !k.contains("/db/")) {
        let m: serde_json::Value = serde_json::from_slice(b).unwrap();
        for f in m["files"].as_array().unwrap().iter().filter(|f| f["shared"] == true) {
            keys.push(format!("shared/{}", f["name"].as_str().unwrap()));
        }
        assert!(k.contains("bundle-"), "{k}");
    }
    // The shared files each checkpoint references: a damaged SST also
    // invalidates the older checkpoints that share it.
    let refs = |id: u64| -> Vec<String> {
        let prefix = format!("{}/", bucket.name_of(id));
        let mut names = Vec::new();
        for (_, b) in pristine.iter().filter(|(k, _)| k.starts_with(&prefix) && k.ends_with("/MANIFEST") && !k.contains("/db/")) {
            let m: serde_json::Value = serde_json::from_slice(b).unwrap();
            names.extend(
                m["files"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|f| f["shared"] == true)
                    .map(|f| format!("shared/{}", f["name"].as_str().unwrap())),
            );
        }
        names
    };
    let older: Vec<u64> = bucket.complete().into_iter().filter(|&id| id < newest).collect();
    let url = format!("{}/{}", bucket.url, bucket.name_of(newest));
    // One object of each kind also goes through the binary (`--restore
    // URL`, `inspect`, `--restore latest`); a shared SST only the newest
    // checkpoint references, if there is one.
    let kind = |k: &str| match k {
        k if k.ends_with("/_metadata") => "_metadata",
        k if k.ends_with("/MANIFEST") => "MANIFEST",
        k if k.contains("/db/") => "db",
        k if k.ends_with(".snapshot") => "snapshot",
        k if k.starts_with("shared/") => "shared",
        _ => "other",
    };
    let mut probed: Vec<&String> = Vec::new();
    for k in keys.iter().filter(|k| !k.starts_with("shared/") || older.iter().all(|&id| !refs(id).contains(k))).chain(&keys) {
        if !probed.iter().any(|p| kind(p) == kind(k)) {
            probed.push(k);
        }
    }
    let mut cases = 0;
    let started = std::time::Instant::now();
    for key in &keys {
        for how in [Damage::Delete, Damage::Truncate, Damage::Corrupt] {
            if !damage(&bucket, key, how) {
                continue;
            }
            cases += 1;
            let named = format!("{}/{key}", bucket.url);
            let before = bucket.objects();
            // The validator names every damaged object (in process: the code `--restore URL` runs).
            match weir::restore::remote::by_url(&url, &[]) {
                Ok(_) => panic!("{how:?} {key}: a damaged checkpoint validated"),
                Err(e) => assert!(e.to_string().contains(&named), "{how:?} {key}: the error names {named}: {e}"),
            }
            assert_eq!(bucket.objects(), before, "{how:?} {key}: validating changed the store");
            if probed.contains(&key) {
                // The explicit URL: exit 2 naming the object; the store is as it was.
                let o = cmd().arg("--restore").arg(&url).run();
                o.expect_code(2);
                assert!(o.stderr.contains(&named), "{how:?} {key}: the error names {named}:\n{}", o.stderr);
                assert_eq!(bucket.objects(), before, "{how:?} {key}: a refused restore changed the store");
                assert!(!job.state.exists(), "{how:?} {key}: a refused restore created the state directory");
                if matches!(how, Damage::Corrupt) {
                    let inspected = bucket.env(weir(&["inspect", &url])).run();
                    inspected.expect_code(2);
                    assert!(
                        inspected.stdout.contains("valid       no") && inspected.stdout.contains(&named),
                        "{how:?} {key}:\n{}",
                        inspected.stdout
                    );
                    assert!(!inspected.stdout.contains("weir-restore-"), "inspect shows the download's path:\n{}", inspected.stdout);
                    assert_eq!(bucket.objects(), before, "{how:?} {key}: inspect changed the store");
                }
                // `latest` falls back and says why.
                let o = cmd()
                    .arg("--restore")
                    .arg("latest")
                    .set("sources.events.rate_limit", "1")
                    .set("checkpoint.retain", "1000")
                    .env("WEIR_FAULTS", "crash=after_prepare:1")
                    .run();
                let said = if key.ends_with("/_metadata") && matches!(how, Damage::Delete) {
                    // No `_metadata`, no checkpoint: its other objects are an unfinished one's.
                    o.stderr.contains("Removed an unfinished checkpoint from the store.") && o.stderr.contains(&url)
                } else {
                    o.stderr.contains("Skipping an invalid checkpoint.") && o.stderr.contains(&named)
                };
                assert!(said, "{how:?} {key}: latest does not say why it falls back:\n{}", o.stderr);
                let from = restored_from(&o.stderr);
                let expected = older.iter().rev().copied().find(|&id| !refs(id).contains(key));
                assert_eq!(from, expected, "{how:?} {key}: the newest older checkpoint that does not reference it:\n{}", o.stderr);
                if expected.is_none() {
                    assert!(o.stderr.contains("No complete checkpoint to restore; starting from the beginning."), "{}", o.stderr);
                }
                // The probe's state goes (a new machine again).
                let _ = std::fs::remove_dir_all(&job.state);
            }
            // Put the bucket back: the damaged object, and what a probe
            // added, removed or resized (its owner record is rewritten).
            let now: std::collections::BTreeMap<String, u64> = bucket.objects().into_iter().collect();
            for k in now.keys().filter(|k| !pristine.iter().any(|(p, _)| p == *k)) {
                bucket.storage.delete(k).unwrap();
            }
            for (k, b) in &pristine {
                if k == key || k == "_owner" || now.get(k) != Some(&(b.len() as u64)) {
                    bucket.storage.put(k, b).unwrap();
                }
            }
        }
    }
    let kinds: Vec<&str> = probed.iter().map(|k| kind(k)).collect();
    assert_eq!(kinds.len(), 5, "one object of every kind went through the binary: {probed:?}");
    eprintln!("damage: {cases} cases over {} objects of checkpoint {newest} in {:?}", keys.len(), started.elapsed());
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

/// A store that refuses every request stops the run at its start, naming
/// the object it could not reach and why, before anything is written.
#[test]
fn a_store_that_fails_every_request_stops_the_run_naming_the_object_and_the_cause() {
    let Some(bucket) = Bucket::new("store-fails") else { return };
    let (job, cmd, _) = job_on(&bucket, Backend::Memory);
    let o = cmd().env("WEIR_FAULTS", "storage_fail=1,seed=3").run();
    assert_ne!(o.code(), Some(0), "the run succeeded with every request failing:\n{}", o.stderr);
    assert!(o.stderr.contains(&format!("{}/", bucket.url)), "the error does not name the object:\n{}", o.stderr);
    assert!(o.stderr.contains("injected storage failure"), "the error does not say why:\n{}", o.stderr);
    assert!(bucket.objects().is_empty() && job.lines().is_empty(), "something was written");
}

/// Past `tolerable_failures` (0 here) a pipeline whose store went away
/// fails, and says which object it could not write and why.
#[test]
fn a_store_gone_past_tolerable_failures_fails_the_pipeline_naming_the_object() {
    let Some(server) = PrivateServer::start("store-gone") else { return };
    let bucket = Bucket::at("gone", server.env.clone());
    let (_job, cmd, _) = job_on(&bucket, Backend::Memory);
    let run = cmd().set("sources.events.rate_limit", "700").set("checkpoint.tolerable_failures", "0").spawn();
    assert!(wait_until(Duration::from_secs(20), || !bucket.complete().is_empty()), "no checkpoint reached the store");
    server.stop();
    let o = run.wait_for(RUN_TIMEOUT);
    assert_ne!(o.code(), Some(0), "the run succeeded without its store:\n{}", o.stderr);
    assert!(o.stderr.contains("tolerable_failures"), "{}", o.stderr);
    assert!(o.stderr.contains(&format!("{}/chk-", bucket.url)), "no message names the object:\n{}", o.stderr);
}

/// An object over the multipart threshold goes up in parts and comes back
/// byte for byte (checkpoint state files of large states take this path).
#[test]
fn a_file_over_the_multipart_threshold_goes_up_in_parts_and_back_unchanged() {
    let Some(bucket) = Bucket::new("multipart") else { return };
    let dir = tmp();
    let (from, back) = (dir.path().join("big"), dir.path().join("back"));
    let size = weir::checkpoint::remote::MULTIPART_THRESHOLD as usize + (3 << 20) + 7;
    let bytes: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&from, &bytes).unwrap();
    bucket.storage.put_file("big", &from).unwrap();
    assert_eq!(bucket.objects(), [("big".to_string(), size as u64)]);
    bucket.storage.get_to_file("big", &back).unwrap();
    assert!(std::fs::read(&back).unwrap() == bytes, "the object came back changed");
}

/// Once `run` (the job's pipeline on `bucket`) published output, stop it
/// with a savepoint into `<bucket>/savepoints`; its URL, after the run
/// exited 0.
fn stop_with_savepoint(bucket: &Bucket, job: &Job, run: super::util::Running) -> String {
    let sock = job.state.join("control.sock");
    assert!(wait_until(Duration::from_secs(20), || sock.exists()), "no control socket");
    assert!(wait_until(Duration::from_secs(20), || !part_files(&job.out).is_empty()), "no output published");
    let target = format!("{}/savepoints", bucket.url);
    let trigger =
        bucket.apply(weir(&["savepoint", "trigger", super::ckpt::PIPELINE, "--stop", "--target", &target])).set("state.dir", &job.state);
    let sp = savepoint_path(&trigger.run()).to_string_lossy().into_owned();
    run.wait_for(RUN_TIMEOUT).expect_code(0);
    sp
}

#[test]
fn savepoint_to_s3_restores_at_another_parallelism_and_is_disposed() {
    let Some(bucket) = Bucket::new("savepoint") else { return };
    let (job, cmd, _) = job_on(&bucket, Backend::Memory);
    let run = cmd().set("sources.events.rate_limit", "700").spawn();
    let sp = stop_with_savepoint(&bucket, &job, run);
    let target = format!("{}/savepoints", bucket.url);
    assert!(sp.starts_with(&format!("{target}/savepoint-checkpointed-")), "{sp}");
    // `savepoint list` and `inspect` read the store.
    let listed = bucket.apply(weir(&["savepoint", "list", super::ckpt::PIPELINE, "--target", &target])).set("state.dir", &job.state).ok();
    let row = listed.stdout.lines().find(|l| l.contains(&sp)).unwrap_or_else(|| panic!("{sp} not listed:\n{}", listed.stdout));
    assert!(row.trim_end().ends_with("yes"), "{row}");
    let inspected = bucket.env(weir(&["inspect", &format!("{sp}/_metadata")])).ok();
    for want in ["kind        Savepoint", "valid       yes", &format!("checkpoint  {sp}")] {
        assert!(inspected.stdout.contains(want), "no `{want}`:\n{}", inspected.stdout);
    }
    assert!(!inspected.stdout.contains("weir-restore-"), "inspect shows the download's path:\n{}", inspected.stdout);
    let chk_id = *bucket.complete().last().unwrap();
    let all = bucket.env(weir(&["inspect", &bucket.url])).ok();
    let chk_row = all.stdout.lines().find(|l| l.starts_with(&format!("{chk_id} "))).unwrap_or_else(|| panic!("{}", all.stdout));
    assert!(chk_row.contains("checkpoint") && chk_row.trim_end().ends_with("yes"), "{chk_row}");
    // Moved: every object copied to another prefix, the original disposed.
    let name = sp.rsplit('/').next().unwrap().to_string();
    let from_prefix = format!("savepoints/{name}/");
    let moved_parent = format!("{}/moved/elsewhere", bucket.url);
    for o in bucket.storage.list(&from_prefix).unwrap() {
        let to = format!("moved/elsewhere/{name}/{}", &o.key[from_prefix.len()..]);
        bucket.storage.put(&to, &bucket.storage.get(&o.key).unwrap()).unwrap();
    }
    bucket.env(weir(&["savepoint", "dispose", &sp])).ok();
    assert!(bucket.storage.list(&from_prefix).unwrap().is_empty(), "the original is gone");
    let md = String::from_utf8(bucket.storage.get(&format!("moved/elsewhere/{name}/_metadata")).unwrap()).unwrap();
    assert!(!md.contains("s3://") && !md.contains(&*job.state.to_string_lossy()), "an absolute reference in _metadata:\n{md}");
    let sp = format!("{moved_parent}/{name}");
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
    let chk = format!("{}/{}", bucket.url, bucket.name_of(chk_id));
    let refused = bucket.env(weir(&["savepoint", "dispose", &chk])).run();
    refused.expect_code(2);
    assert!(refused.stderr.contains("says checkpoint, not savepoint"), "{}", refused.stderr);
    assert!(bucket.complete().contains(&chk_id), "a refused dispose removed the checkpoint");
    let o = bucket.env(weir(&["savepoint", "dispose", &sp])).ok();
    assert!(o.stdout.contains("Savepoint disposed"), "{}", o.stdout);
    let prefix = sp[bucket.url.len() + 1..].to_string();
    assert!(bucket.storage.list(&format!("{prefix}/")).unwrap().is_empty(), "the savepoint's objects are gone");
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().expect("running kill").success();
    assert!(ok, "kill -{sig} {pid}");
}

/// One process owns a prefix: a second one (another state directory) is
/// refused before it writes anything while the owner renews its lease; once
/// the owner stopped renewing (SIGSTOP) for the lease, the second takes it
/// over, and the old owner, continued, commits nothing more and fails; a
/// process of this host that is gone is replaced at once.
#[test]
fn one_process_owns_a_prefix_and_a_stale_owner_is_taken_over_and_fenced() {
    let Some(bucket) = Bucket::new("owner") else { return };
    let (a, b) = (Job::new(), Job::new());
    let on = |job: &Job| on_bucket(&bucket, Backend::Memory, &job.state, &job.out).set("checkpoint.storage_lease", "1s");
    // With `restart:` (created by --set): losing the storage is no failure to restart from.
    let owner = on(&a).set("sources.events.rate_limit", "300").set("restart.attempts", "3").spawn();
    assert!(wait_until(Duration::from_secs(20), || !bucket.complete().is_empty()), "no checkpoint reached the store");
    let pid = owner.child.id();
    let second = || on(&b).arg("--restore").arg("latest").set("sources.events.rate_limit", "1").env("WEIR_FAULTS", "crash=after_prepare:1");
    let refused = second().run();
    refused.expect_code(2);
    let held = format!("is in use by weir process {pid} on host");
    assert!(refused.stderr.contains(&held) && refused.stderr.contains(&bucket.url), "{}", refused.stderr);
    assert!(!b.state.exists(), "a refused start created its state directory");
    // The owner stops renewing: refused until its lease expired, then taken over.
    signal(pid, "STOP");
    let stopped = std::time::Instant::now();
    let mut refusals = 0;
    let took = loop {
        let o = second().run();
        if o.code() != Some(2) {
            break o;
        }
        assert!(o.stderr.contains(&held), "{}", o.stderr);
        assert!(stopped.elapsed() < Duration::from_secs(15), "never taken over:\n{}", o.stderr);
        refusals += 1;
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(refusals > 0 || stopped.elapsed() > Duration::from_secs(1), "taken over before the lease expired");
    assert!(took.stderr.contains("Took the checkpoint storage over: its owner's lease expired."), "{}", took.stderr);
    assert!(restored_from(&took.stderr).is_some(), "{}", took.stderr);
    // The old owner goes on: it commits nothing more, and fails saying why.
    let committed = bucket.complete();
    signal(pid, "CONT");
    let o = owner.wait_for(RUN_TIMEOUT);
    assert_eq!(o.code(), Some(1), "the fenced owner:\n{}", o.stderr);
    assert!(o.stderr.contains("does not own the checkpoint storage now"), "{}", o.stderr);
    assert!(!o.stderr.contains("restarting from the latest checkpoint"), "a deposed owner restarted:\n{}", o.stderr);
    assert_eq!(bucket.complete(), committed, "the fenced owner committed (or deleted) a checkpoint after the take-over:\n{}", o.stderr);
    // The second process crashed (its record stays): a start of this host replaces it at once.
    let again = second().run();
    assert!(again.stderr.contains("Took the checkpoint storage over from a weir process of this host that is gone."), "{}", again.stderr);
}

/// A PostgreSQL sink on S3 checkpoints across a take-over: the deposed
/// owner (SIGSTOP, then continued) fails and commits nothing; what it had
/// prepared for a checkpoint the new owner restored is committed once; a
/// transaction an older generation prepared after the new owner's restore
/// (drawn here by hand: the deposed owner's late PREPARE) is rolled back by
/// the new owner's next completion, and one of a newer generation (the new
/// owner is then itself deposed) is never touched.
#[test]
fn a_stale_owners_late_postgres_transactions_are_rolled_back_and_a_newer_owners_are_kept() {
    let Some(bucket) = Bucket::new("pg-stale") else { return };
    let Some(server) = super::postgres::Server::configured("pg stale owner") else { return };
    let (name, table) = ("pg-stale", "pg_stale");
    server.create_windows_table(table, true);
    let (a, b) = (Job::new(), Job::new());
    let on = |job: &Job, rate: &str| {
        bucket
            .apply(super::postgres::cmd(&server, name, table, Backend::Memory, 2, &job.state))
            .set("checkpoint.storage_lease", "1s")
            .set("sources.events.rate_limit", rate)
    };
    let mut owner = on(&a, "300").spawn();
    assert!(owner.wait_log_count("Checkpoint complete.", 2, RUN_TIMEOUT), "{}", owner.stderr());
    let pid = owner.pid();
    signal(pid, "STOP");
    let stopped = std::time::Instant::now();
    let mut taker = loop {
        let mut t = on(&b, "500").arg("--restore").arg("latest").spawn();
        if t.wait_log("Pipeline started.", RUN_TIMEOUT) {
            break t;
        }
        let o = t.wait(RUN_TIMEOUT);
        assert!(o.code() == Some(2) && o.stderr.contains("is in use by weir process"), "{}", o.stderr);
        assert!(stopped.elapsed() < Duration::from_secs(20), "never taken over");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(taker.wait_log("Checkpoint complete.", RUN_TIMEOUT), "{}", taker.stderr());
    // The taker's generation, from the transactions it prepares.
    let generation_of = |gid: &str| gid.rsplit_once("-g").and_then(|(_, g)| g.parse::<u64>().ok());
    let mut generation = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            let g = server.prepared(name).iter().filter_map(|gid| generation_of(gid)).max();
            generation = g;
            g.is_some()
        }),
        "the new owner prepared no transaction named with its generation: {:?}",
        server.prepared(name)
    );
    let generation = generation.unwrap();
    assert!(generation >= 2, "the new owner is generation {generation}, the first owner's is older");
    let prepare = |gid: &str| server.query(&format!("BEGIN; PREPARE TRANSACTION '{gid}'"));
    let (late, newer) =
        (format!("weir-{name}/db/aaaaaaaa-1-999-g{}", generation - 1), format!("weir-{name}/db/cccccccc-1-999-g{}", generation + 1));
    prepare(&late);
    prepare(&newer);
    assert!(!taker.exited(), "the new owner ended before the late transactions were drawn: make the input slower");
    signal(pid, "CONT");
    let o = owner.wait(RUN_TIMEOUT);
    assert_eq!(o.code(), Some(1), "the deposed owner:\n{}", o.stderr);
    assert!(o.stderr.contains("does not own the checkpoint storage now"), "{}", o.stderr);
    let done = taker.wait(RUN_TIMEOUT);
    assert_eq!(done.code(), Some(0), "the new owner:\n{}", done.stderr);
    assert!(
        done.stderr.contains(&late) && done.stderr.contains("a deposed owner"),
        "the late transaction's roll-back is logged:\n{}",
        done.stderr
    );
    assert_eq!(server.prepared(name), vec![newer.clone()], "only the newer generation's transaction is left");
    server.query(&format!("ROLLBACK PREPARED '{newer}'"));
    super::postgres::assert_reference_rows("a take-over on S3", &server, table);
}

/// `checkpoint.storage_lease` is checked like every duration, and only
/// with `storage` (no server needed).
#[test]
fn storage_lease_is_validated_and_needs_storage() {
    let v = |sets: &[&str]| {
        let mut w = weir(&["validate", super::ckpt::PIPELINE]);
        for s in sets {
            w = w.arg("--set").arg(s);
        }
        w.run()
    };
    let o = v(&["checkpoint.storage_lease=5s"]);
    o.expect_code(2);
    assert!(o.stderr.contains("`storage_lease` needs `storage: s3://BUCKET/PREFIX`"), "{}", o.stderr);
    let o = v(&["checkpoint.storage=s3://b/p", "checkpoint.storage_lease=10ms"]);
    o.expect_code(2);
    assert!(o.stderr.contains("storage_lease"), "{}", o.stderr);
    v(&["checkpoint.storage=s3://b/p", "checkpoint.storage_lease=5s"]).expect_code(0);
}

/// A store that cannot be reached at the start is a failure (exit 1, as
/// brokers unreachable are), not a refusal of the input (exit 2), and
/// nothing is written: the chaos harness drew S3 connections cut while a
/// start listed the store (seeds 1800005, 1800009).
#[test]
fn an_unreachable_store_at_the_start_is_a_failure_not_a_refusal() {
    let dir = tmp();
    let state = dir.path().join("state");
    // Nothing listens on port 1 of the loopback: every request is refused.
    let o = weir_run(super::ckpt::PIPELINE, 1)
        .set("state.dir", &state)
        .set("sinks.out.path", dir.path().join("out"))
        .set("checkpoint.storage", "s3://weir/unreachable")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
        .env("AWS_ACCESS_KEY_ID", "weir-test")
        .env("AWS_SECRET_ACCESS_KEY", "weir-test-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ALLOW_HTTP", "true")
        .arg("--restore")
        .arg("latest")
        .run();
    o.expect_code(1);
    assert!(o.stderr.contains("checkpoint storage unreachable"), "{}", o.stderr);
    assert!(!state.exists(), "a start that could not read the store created its state directory");
}

/// Where a rescaled restore comes from.
#[derive(Debug, Clone, Copy)]
enum Taken {
    /// The newest checkpoint in the store after a kill -9 (canonical: memory, or RocksDB with `incremental: false`).
    Checkpoint,
    /// A stop-with-savepoint into the bucket (always canonical).
    Savepoint,
}

/// `--restore s3://...` of a checkpoint or savepoint taken at parallelism
/// `p` with `backend`, on a new machine, at parallelism `p2` into `backend2`:
/// exactly the reference output.
fn rescaled(taken: Taken, backend: Backend, p: u32, backend2: Backend, p2: u32) {
    let what = format!("{taken:?} {backend:?} p={p} -> {backend2:?} p={p2}");
    let Some(bucket) = Bucket::new(&format!("rescale-{taken:?}-{backend:?}-{p}-{p2}")) else { return };
    let job = Job::with(backend);
    let first = || {
        let w = on_bucket_at(&bucket, backend, p, &job.state, &job.out).set("sources.events.rate_limit", "700");
        if backend == Backend::RocksDb && matches!(taken, Taken::Checkpoint) {
            w.set("state.incremental", "false")
        } else {
            w
        }
    };
    let url = match taken {
        Taken::Checkpoint => {
            let mut run = first().spawn();
            assert!(wait_until(Duration::from_secs(20), || bucket.complete().len() >= 2), "{what}: no checkpoints reached the store");
            assert!(kill_after(&mut run, Duration::from_millis(100)), "{what}: the run ended before the kill");
            format!("{}/{}", bucket.url, bucket.complete_names().last().unwrap())
        }
        Taken::Savepoint => {
            let run = first().spawn();
            let sock = job.state.join("control.sock");
            assert!(wait_until(Duration::from_secs(20), || sock.exists()), "{what}: no control socket");
            assert!(wait_until(Duration::from_secs(20), || !part_files(&job.out).is_empty()), "{what}: no output published");
            let target = format!("{}/savepoints", bucket.url);
            let trigger = bucket
                .apply(weir(&["savepoint", "trigger", super::ckpt::PIPELINE, "--stop", "--target", &target]))
                .set("state.dir", &job.state);
            let sp = savepoint_path(&trigger.run()).to_string_lossy().into_owned();
            run.wait_for(RUN_TIMEOUT).expect_code(0);
            sp
        }
    };
    std::fs::remove_dir_all(&job.state).unwrap();
    let o = fast(on_bucket_at(&bucket, backend2, p2, &job.state, &job.out)).arg("--restore").arg(&url).ok();
    assert!(o.stderr.contains("Rescaling"), "{what}:\n{}", o.stderr);
    job.assert_no_in_progress_files();
    assert_exactly_once(&what, job.lines());
}

#[test]
fn a_checkpoint_on_s3_restores_at_another_parallelism_into_the_other_backend() {
    rescaled(Taken::Checkpoint, Backend::Memory, 2, Backend::RocksDb, 3);
    rescaled(Taken::Checkpoint, Backend::RocksDb, 3, Backend::Memory, 1);
}

#[test]
fn a_savepoint_on_s3_restores_at_another_parallelism_into_the_other_backend() {
    rescaled(Taken::Savepoint, Backend::Memory, 2, Backend::RocksDb, 3);
    rescaled(Taken::Savepoint, Backend::RocksDb, 3, Backend::Memory, 1);
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
    let names = bucket.complete_names();
    let stray: Vec<_> =
        bucket.objects().into_iter().filter(|(k, _)| !is_record(k) && !names.iter().any(|n| k.starts_with(&format!("{n}/")))).collect();
    assert!(stray.is_empty(), "objects of aborted checkpoints left in the store: {stray:?}");
    bucket.assert_released();
}

/// The endpoint the test's S3 server is on (`host:port`).
fn endpoint(bucket: &Bucket) -> String {
    let url = bucket
        .env
        .iter()
        .find(|(k, _)| k == "AWS_ENDPOINT_URL")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
        .expect("an S3 endpoint");
    url.trim_start_matches("http://").trim_end_matches('/').to_string()
}

/// A stale owner's late writes never change what the new owner committed
/// (issue 27.1). Owner A's path to S3 stalls (a proxy holds its bytes,
/// among them the uploads of the checkpoint it was writing); its lease
/// runs out; B takes over on another machine, restores A's newest
/// checkpoint and commits its own first one, with the id A was writing;
/// then A's held requests land. B is killed before its next checkpoint,
/// and C, on a third machine, restores B's checkpoint (never skipping it
/// as damaged): the shared output is exactly the reference. Before
/// generations, A's late task files replaced B's under the same name and C
/// fell back to A's older checkpoint: records doubled.
#[test]
fn a_stale_owners_late_writes_never_change_the_new_owners_checkpoint() {
    let Some(bucket) = Bucket::new("stale-owner") else { return };
    let proxy = super::proxy::Proxy::start(&endpoint(&bucket));
    let (a, b, c) = (Job::new(), Job::new(), Job::new());
    let on = |job: &Job| {
        on_bucket(&bucket, Backend::Memory, &job.state, &a.out)
            .set("checkpoint.storage_lease", "1s")
            .set("sources.events.rate_limit", "400")
    };
    let mut owner = on(&a).env("AWS_ENDPOINT_URL", proxy.url()).spawn();
    assert!(wait_until(Duration::from_secs(20), || bucket.complete().len() >= 2), "no checkpoint reached the store");
    proxy.set(super::proxy::Mode::Hold);
    // Past A's lease (1 s, by the record's time): B takes it over.
    std::thread::sleep(Duration::from_millis(1600));
    let listed = bucket.complete();
    // A long interval: B's first checkpoint stays its newest while A's bytes land.
    let mut second = on(&b).arg("--restore").arg("latest").set("checkpoint.interval", "3s").set("sources.events.rate_limit", "300").spawn();
    let b_first = *listed.last().unwrap() + 1;
    assert!(
        wait_until(Duration::from_secs(20), || bucket.complete().iter().any(|&id| id >= b_first)),
        "B committed no checkpoint; store has {:?}",
        bucket.complete()
    );
    // A's held requests land now, after B's commit.
    proxy.set(super::proxy::Mode::Pass);
    std::thread::sleep(Duration::from_millis(700));
    assert!(kill_after(&mut second, Duration::from_millis(0)), "B ended before the kill");
    let _ = owner.child.kill();
    let stale = owner.wait_for(RUN_TIMEOUT);
    let o = fast(on(&c)).arg("--restore").arg("latest").ok();
    assert!(!o.stderr.contains("Skipping an invalid checkpoint"), "C found a damaged checkpoint:\n{}\nA:\n{}", o.stderr, stale.stderr);
    assert!(restored_from(&o.stderr).is_some_and(|id| id >= b_first), "C did not restore B's checkpoint:\n{}", o.stderr);
    assert_exactly_once("stale owner's late writes", a.lines());
}

/// The lineage lives in the store (issue 27.2): a restore of a savepoint
/// onto a fresh prefix that crashes before its first checkpoint, then
/// `--restore latest` on a new machine (no state directory), restores the
/// savepoint again: neither the beginning (records doubled) nor anything
/// else.
#[test]
fn a_savepoint_restore_that_crashed_before_its_first_checkpoint_resumes_on_a_new_machine() {
    let Some(bucket) = Bucket::new("lineage-sp") else { return };
    let Some(fresh) = Bucket::new("lineage-sp-fresh") else { return };
    let job = Job::new();
    let run = on_bucket(&bucket, Backend::Memory, &job.state, &job.out).set("sources.events.rate_limit", "700").spawn();
    let sp = stop_with_savepoint(&bucket, &job, run);
    // Onto a fresh prefix, on a new machine: it crashes before its first checkpoint.
    let new_machine = || {
        let _ = std::fs::remove_dir_all(&job.state);
        on_bucket(&fresh, Backend::Memory, &job.state, &job.out)
    };
    let crashed = new_machine().arg("--restore").arg(&sp).env("WEIR_FAULTS", "crash=after_prepare:1").run();
    assert_ne!(crashed.code(), Some(0), "the fault did not crash it:\n{}", crashed.stderr);
    assert!(fresh.complete().is_empty(), "a checkpoint completed before the crash");
    // What a restore killed midway left in its temp directory (its PID
    // gone) is removed by the next start (issue 27.5).
    let tmpdir = tmp();
    let left = tmpdir.path().join("weir-restore-4194999-0");
    std::fs::create_dir_all(left.join("savepoint-checkpointed-0000009")).unwrap();
    let o = fast(new_machine()).env("TMPDIR", tmpdir.path()).arg("--restore").arg("latest").ok();
    assert!(o.stderr.contains("restoring it again"), "the savepoint was not restored again:\n{}", o.stderr);
    assert!(!left.exists(), "a killed restore's download was left:\n{}", o.stderr);
    let leftovers: Vec<_> = std::fs::read_dir(tmpdir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(leftovers.is_empty(), "downloads left behind: {leftovers:?}");
    assert_exactly_once("savepoint restore, crash, new machine", job.lines());
}

/// A savepoint target in an area of the checkpoint storage that its
/// cleanup manages (`shared/`, a `chk-*` directory, a `_*` record) is
/// refused before the savepoint is taken (issue 27.4): the cleanup would
/// delete it. The run goes on and nothing is written under the target.
#[test]
fn a_savepoint_target_inside_the_checkpoint_storage_is_refused() {
    let Some(bucket) = Bucket::new("sp-inside") else { return };
    let job = Job::new();
    let run = on_bucket(&bucket, Backend::Memory, &job.state, &job.out).set("sources.events.rate_limit", "700").spawn();
    let sock = job.state.join("control.sock");
    assert!(wait_until(Duration::from_secs(20), || sock.exists()), "no control socket");
    for inside in ["shared", "chk-0000001", "_generations"] {
        let target = format!("{}/{inside}", bucket.url);
        let o =
            bucket.apply(weir(&["savepoint", "trigger", super::ckpt::PIPELINE, "--target", &target])).set("state.dir", &job.state).run();
        assert_ne!(o.code(), Some(0), "{target}: accepted:\n{}", o.stdout);
        assert!(o.stderr.contains("is inside the checkpoint storage"), "{target}:\n{}", o.stderr);
        let under = format!("{inside}/savepoint-");
        assert!(bucket.objects().iter().all(|(k, _)| !k.starts_with(&under)), "{target}: something was written");
    }
    run.wait_for(RUN_TIMEOUT).expect_code(0);
    assert_exactly_once("after refused savepoints", job.lines());
}

/// Credentials in the endpoint's URL never reach the output (issue
/// 27.5), not even at debug level, when the server cannot be reached.
#[test]
fn credentials_in_the_endpoint_are_never_printed() {
    let port = crate::metrics::free_port();
    let job = Job::new();
    let o = fast(on_bucket(&Bucket::offline(), Backend::Memory, &job.state, &job.out))
        .env("AWS_ENDPOINT_URL", format!("http://weiruser:Sup3rS3cret@127.0.0.1:{port}"))
        .env("AWS_ACCESS_KEY_ID", "AKIAWEIRTESTKEY")
        .env("AWS_SECRET_ACCESS_KEY", "WeirSecretAccessKey")
        .env("AWS_ALLOW_HTTP", "true")
        .env("RUST_LOG", "debug")
        .run();
    assert_ne!(o.code(), Some(0), "ran without a server:\n{}", o.stderr);
    for secret in ["Sup3rS3cret", "WeirSecretAccessKey"] {
        assert!(!o.stderr.contains(secret) && !o.stdout.contains(secret), "{secret} printed:\n{}", o.stderr);
    }
    assert!(o.stderr.contains("[credentials omitted]@127.0.0.1"), "the endpoint is not named:\n{}", o.stderr);
}

/// The Parquet sink writing to S3 (checkpoints on S3 too, under another
/// prefix), through kill -9s and a restore on a new machine (fresh state
/// directory): the published objects, downloaded and read by DuckDB, hold
/// the reference rows exactly once, and nothing is left staged.
#[cfg(feature = "parquet")]
#[test]
fn parquet_sink_on_s3_publishes_every_row_exactly_once_across_kills_and_a_new_machine() {
    use super::parquet::{assert_reference_rows, PIPELINE};
    let Some(bucket) = Bucket::new("parquet") else { return };
    let lake = format!("{}/lake", bucket.url);
    let dir = tmp();
    let run = |state: &std::path::Path| {
        weir_run(PIPELINE, 2)
            .set("state.dir", state)
            .set("checkpoint.storage", format!("{}/checkpoints", bucket.url))
            .set("sinks.lake.path", &lake)
    };
    let mut rng = Rng::from_env("parquet on s3");
    let mut kills = 0;
    for i in 0..6 {
        // The last restores start on a new machine: an empty state directory.
        let state = dir.path().join(if i < 4 { "state" } else { "state-new-machine" });
        let w = if i == 0 { run(&state) } else { run(&state).arg("--restore").arg("latest") };
        let mut r = w.set("sources.events.rate_limit", "700").spawn();
        if !kill_after(&mut r, rng.millis(150, 900)) {
            r.wait_for(RUN_TIMEOUT).expect_code(0);
            break;
        }
        kills += 1;
    }
    run(&dir.path().join("state-last")).arg("--restore").arg("latest").set("sources.events.rate_limit", "1000000000").ok();
    let objects = bucket.objects();
    let staged: Vec<&String> = objects.iter().map(|(k, _)| k).filter(|k| k.starts_with("lake/.staging/")).collect();
    assert!(staged.is_empty(), "left staged: {staged:?}");
    let local = dir.path().join("downloaded");
    let mut files = 0;
    for (key, _) in objects.iter().filter(|(k, _)| k.starts_with("lake/") && k.ends_with(".parquet")) {
        let to = local.join(key);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        bucket.storage.get_to_file(key, &to).unwrap();
        files += 1;
    }
    assert!(files > 0, "nothing published under {lake}");
    assert_reference_rows(&format!("Parquet on S3, {kills} kills"), &local.join("lake"));
}

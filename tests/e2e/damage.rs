//! Damaged checkpoints: `--restore latest` falls back to an older one and
//! says why; `--restore PATH` refuses (exit 2), names the file and changes
//! nothing on disk.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ckpt::{both_backends, copy_dir, fast, restored_from, tree, Backend, Job};
use super::util::tmp;
use super::wait::wait_until;

#[derive(Debug, Clone, Copy)]
enum Damage {
    Delete,
    Truncate,
    FlipByte,
}

fn damage(file: &Path, how: Damage) {
    match how {
        Damage::Delete => std::fs::remove_file(file).unwrap(),
        Damage::Truncate => {
            let len = std::fs::metadata(file).unwrap().len();
            std::fs::OpenOptions::new().write(true).open(file).unwrap().set_len(len / 2).unwrap();
        }
        Damage::FlipByte => {
            let mut bytes = std::fs::read(file).unwrap();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x5a;
            std::fs::write(file, bytes).unwrap();
        }
    }
}

both_backends! {
    fn every_damaged_file_of_the_newest_checkpoint_is_detected(backend: Backend) {
        damaged_files_are_detected(backend)
    }
}

fn damaged_files_are_detected(backend: Backend) {
    // A run killed -9 mid-stream leaves retained checkpoints that hold live
    // state. (A finished run's final checkpoint may hold none: the end of
    // input expires every dedup key, and RocksDB may then keep no SST.)
    let done = Job::with(backend);
    let mut run = done.cmd().set("sources.events.rate_limit", "1000").spawn();
    let complete = || done.checkpoints().into_iter().filter(|c| c.join("_metadata").exists()).collect::<Vec<_>>();
    let enough = wait_until(Duration::from_secs(30), || complete().len() >= 3);
    run.child.kill().expect("kill -9 weir");
    run.child.wait().expect("reaping weir");
    assert!(enough, "no 3 completed checkpoints within 30 s");
    // A checkpoint the kill interrupted, and the dead process's control
    // socket, are no part of this test (the next start removes both).
    let _ = std::fs::remove_file(done.state.join("control.sock"));
    for c in done.checkpoints() {
        if !c.join("_metadata").exists() {
            std::fs::remove_dir_all(&c).unwrap();
        }
    }
    let chks = complete();
    assert!(chks.len() >= 2, "want at least 2 retained checkpoints, have {chks:?}");
    let newest = chks.last().unwrap();
    let newest_name = newest.file_name().unwrap().to_owned();
    let id_of = |chk: &Path| -> u64 { chk.file_name().unwrap().to_string_lossy()["chk-".len()..].parse().unwrap() };
    let previous = id_of(&chks[chks.len() - 2]);
    // Files of the newest checkpoint: its own, and the shared ones it references
    // (relative to the checkpoint dir, as `../shared/NAME`).
    let mut files: Vec<PathBuf> = tree(newest).into_keys().collect();
    let shared = shared_refs(newest);
    files.extend(shared.iter().map(|n| Path::new("../shared").join(n)));
    if backend == Backend::RocksDb {
        assert!(!shared.is_empty(), "an incremental RocksDB checkpoint references no shared files: {files:?}");
    }
    assert!(files.iter().any(|f| f.ends_with("_metadata")) && files.iter().any(|f| f.ends_with("MANIFEST")), "{files:?}");
    assert!(files.iter().any(|f| f.to_string_lossy().ends_with(".snapshot")), "{files:?}");
    let mut cases = 0;
    for rel in &files {
        let name = rel.file_name().unwrap().to_string_lossy().into_owned();
        // An empty file (a RocksDB checkpoint's WAL, written without a WAL)
        // can only be damaged by deleting it.
        let empty = std::fs::metadata(newest.join(rel)).unwrap().len() == 0;
        let hows: &[Damage] = if empty { &[Damage::Delete] } else { &[Damage::Delete, Damage::Truncate, Damage::FlipByte] };
        for &how in hows {
            let what = format!("{how:?} {}", rel.display());
            let copy = tmp();
            let job = Job { state: copy.path().join("state"), out: copy.path().join("out"), dir: copy, backend };
            copy_dir(&done.state, &job.state);
            copy_dir(&done.out, &job.out);
            let chk = job.state.join("checkpoints").join(&newest_name);
            damage(&chk.join(rel), how);

            // An explicit path: exit 2, the file named, nothing changed.
            let (before, out_before) = (tree(&job.state), tree(&job.out));
            let o = fast(job.cmd()).arg("--restore").arg(chk.display().to_string()).run();
            o.expect_code(2);
            assert!(o.stderr.contains(&name), "{what}: --restore PATH does not name {name}:\n{}", o.stderr);
            assert!(tree(&job.state) == before, "{what}: --restore PATH changed the state dir");
            assert!(tree(&job.out) == out_before, "{what}: --restore PATH changed the sink dir");

            // latest: skip it (saying which file), restore the previous one;
            // for a shared file, the newest checkpoint that does not use it.
            let want = match rel.starts_with("../shared") {
                false => Some(previous),
                true => chks.iter().rev().find(|c| !shared_refs(c).contains(&name)).map(|c| id_of(c)),
            };
            let o = fast(job.restore()).ok();
            // Without its `_metadata` a checkpoint reads as one never finished.
            let unfinished = name == "_metadata" && matches!(how, Damage::Delete);
            let skip = o.stderr.lines().find(|l| match unfinished {
                true => l.contains(" INFO ") && l.contains("Skipping a checkpoint that was not finished (no _metadata)"),
                false => l.contains("Skipping an invalid checkpoint."),
            });
            assert!(
                skip.is_some_and(|l| l.contains(&name)),
                "{what}: --restore latest does not report skipping a checkpoint over {name}:\n{}",
                o.stderr
            );
            assert_eq!(restored_from(&o.stderr), want, "{what}: restored from the wrong checkpoint:\n{}", o.stderr);
            cases += 1;
        }
    }
    eprintln!("damage: {cases} cases over {} files of {}", files.len(), newest.display());
}

/// The shared files the bundle MANIFESTs of checkpoint `chk` reference.
pub fn shared_refs(chk: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for e in std::fs::read_dir(chk).unwrap() {
        let manifest = e.unwrap().path().join("MANIFEST");
        let Ok(bytes) = std::fs::read(&manifest) else { continue };
        let m: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        for f in m["files"].as_array().unwrap() {
            if f["shared"].as_bool() == Some(true) {
                names.insert(f["name"].as_str().unwrap().to_string());
            }
        }
    }
    names
}

#[test]
fn a_fifo_named_in_a_manifest_is_refused_without_blocking() {
    use weir::checkpoint::manifest::{BundleManifest, Document, FileEntry};
    let job = Job::new();
    job.cmd().set("sources.events.rate_limit", "5000").ok();
    let chks = job.checkpoints();
    assert!(chks.len() >= 2, "want at least 2 retained checkpoints, have {chks:?}");
    let (newest, previous) = (chks.last().unwrap(), &chks[chks.len() - 2]);
    let id_of = |chk: &Path| -> u64 { chk.file_name().unwrap().to_string_lossy()["chk-".len()..].parse().unwrap() };
    // A crafted MANIFEST (valid checksum) naming a FIFO of size 0.
    let manifest = newest.join("bundle-000/MANIFEST");
    let mut m = BundleManifest::from_bytes(&std::fs::read(&manifest).unwrap()).unwrap();
    m.files.push(FileEntry::private("pipe.snapshot", 0, 0));
    std::fs::write(&manifest, m.to_bytes()).unwrap();
    let made = std::process::Command::new("mkfifo").arg(newest.join("bundle-000/pipe.snapshot")).status().unwrap();
    assert!(made.success());

    // inspect answers (instead of blocking on the FIFO), exit 2, naming it.
    for path in [&job.state, newest] {
        let o = super::util::weir(&["inspect", &path.display().to_string()]).spawn().wait_for(Duration::from_secs(20));
        o.expect_code(2);
        assert!(o.stdout.contains("pipe.snapshot: is a FIFO, not a regular file"), "{}", o.stdout);
    }
    // --restore latest skips that checkpoint, saying why.
    let o = fast(job.restore()).spawn().wait_for(Duration::from_secs(60));
    o.expect_code(0);
    let skip = o.stderr.lines().find(|l| l.contains("Skipping an invalid checkpoint."));
    assert!(skip.is_some_and(|l| l.contains("pipe.snapshot") && l.contains("FIFO")), "{}", o.stderr);
    assert_eq!(restored_from(&o.stderr), Some(id_of(previous)));
}

//! Damaged checkpoints: `--restore latest` falls back to an older one and
//! says why; `--restore PATH` refuses (exit 2), names the file and changes
//! nothing on disk.

use std::path::Path;

use super::ckpt::{copy_dir, fast, restored_from, tree, Job};
use super::util::tmp;

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

#[test]
fn every_damaged_file_of_the_newest_checkpoint_is_detected() {
    // A finished run at a moderate rate leaves the retained checkpoints.
    let done = Job::new();
    done.cmd().set("sources.events.rate_limit", "5000").ok();
    let chks = done.checkpoints();
    assert!(chks.len() >= 2, "want at least 2 retained checkpoints, have {chks:?}");
    let newest = chks.last().unwrap();
    let newest_name = newest.file_name().unwrap().to_owned();
    let previous: u64 = chks[chks.len() - 2].file_name().unwrap().to_string_lossy()["chk-".len()..].parse().unwrap();
    let files: Vec<_> = tree(newest).into_keys().collect();
    assert!(files.iter().any(|f| f.ends_with("_metadata")) && files.iter().any(|f| f.ends_with("MANIFEST")), "{files:?}");
    assert!(files.iter().any(|f| f.to_string_lossy().ends_with(".snapshot")), "{files:?}");
    let mut cases = 0;
    for rel in &files {
        let name = rel.file_name().unwrap().to_string_lossy().into_owned();
        for how in [Damage::Delete, Damage::Truncate, Damage::FlipByte] {
            let what = format!("{how:?} {}", rel.display());
            let copy = tmp();
            let job = Job { state: copy.path().join("state"), out: copy.path().join("out"), dir: copy };
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

            // latest: skip it (saying which file), restore the previous one.
            let o = fast(job.restore()).ok();
            let skip = o.stderr.lines().find(|l| l.contains("Skipping an invalid checkpoint."));
            assert!(
                skip.is_some_and(|l| l.contains(&name)),
                "{what}: --restore latest does not report skipping a checkpoint over {name}:\n{}",
                o.stderr
            );
            assert_eq!(restored_from(&o.stderr), Some(previous), "{what}: restored from the wrong checkpoint:\n{}", o.stderr);
            cases += 1;
        }
    }
    eprintln!("damage: {cases} cases over {} files of {}", files.len(), newest.display());
}

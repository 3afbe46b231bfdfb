//! `weir inspect` and `savepoint list` on state written by a real run.

use super::ckpt::{fast, Job, PIPELINE};
use super::util::weir;

/// A huge `created_ms` in a `_metadata` with a valid checksum made `inspect`
/// and `savepoint list` panic (exit 101): it is shown as the number it is.
#[test]
fn inspect_and_savepoint_list_show_an_out_of_range_created_time() {
    use weir::checkpoint::manifest::{Document, Metadata};
    let job = Job::new();
    fast(job.cmd()).ok();
    let checkpoints: Vec<_> = std::fs::read_dir(job.state.join("checkpoints")).unwrap().map(|e| e.unwrap().path()).collect();
    let newest = checkpoints.iter().filter(|d| d.join("_metadata").exists()).max().expect("the run left a checkpoint").clone();
    let md_path = newest.join("_metadata");
    let mut md = Metadata::from_bytes(&std::fs::read(&md_path).unwrap()).unwrap();
    md.created_ms = i64::MAX;
    std::fs::write(&md_path, md.to_bytes()).unwrap();
    // The same checkpoint as a savepoint, for `savepoint list`.
    let sp = job.state.join("savepoints").join("sp-crafted");
    std::fs::create_dir_all(&sp).unwrap();
    let status = std::process::Command::new("cp").arg("-r").arg(format!("{}/.", newest.display())).arg(&sp).status().unwrap();
    assert!(status.success());

    let o = weir(&["inspect", &job.state.display().to_string()]).run();
    o.expect_code(0);
    assert!(o.stdout.contains("9223372036854775807 ms (out of range)"), "{}", o.stdout);
    let o = weir(&["inspect", &newest.display().to_string()]).run();
    o.expect_code(0);
    assert!(o.stdout.contains("created     9223372036854775807 ms (out of range)"), "{}", o.stdout);
    let o = weir(&["savepoint", "list", PIPELINE]).set("state.dir", &job.state).run();
    assert_ne!(o.code(), Some(101), "panicked: {}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
}

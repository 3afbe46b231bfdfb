//! Stopping an unbounded pipeline with SIGTERM: a clean drain, exit 0.

use std::time::Duration;

use super::util::{hidden_files, part_files, sink_lines, tmp, wait_until, weir_run, Running};

/// Wait until the sink has started writing (a hidden in-progress part file
/// exists), so the stop interrupts a pipeline that is moving data.
#[track_caller]
pub fn wait_for_output(run: &Running, dir: &std::path::Path) {
    let started = wait_until(Duration::from_secs(20), || !hidden_files(dir).is_empty() || !part_files(dir).is_empty());
    assert!(started, "no output in {} within 20 s (pid {})", dir.display(), run.child.id());
}

#[test]
fn sigterm_drains_and_leaves_only_complete_part_files() {
    for p in [1, 2] {
        let dir = tmp();
        let out = dir.path().join("out");
        let run = weir_run("pipelines/unbounded.yaml", p).set("sinks.out.path", &out).spawn();
        wait_for_output(&run, &out);
        run.terminate();
        let o = run.wait_for(Duration::from_secs(10));
        o.expect_code(0);
        assert!(o.elapsed < Duration::from_secs(5), "stopping took {:?}", o.elapsed);
        assert!(hidden_files(&out).is_empty(), "in-progress files left: {:?}", hidden_files(&out));
        let lines = sink_lines(&out);
        assert!(!lines.is_empty(), "the drained part files hold the records");
        let mut seqs = Vec::new();
        for l in &lines {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("torn line ({e}): {l:?}"));
            assert!(v["device"].as_str().is_some_and(|d| d.starts_with("dev-")), "{l}");
            seqs.push(v["n"].as_u64().expect("n is the row number"));
        }
        assert_no_gaps(&mut seqs, p as u64);
    }
}

/// Datagen subtask i of p emits rows i, i+p, ...: whatever a subtask emitted
/// before the stop must all be in the output, with no row twice.
fn assert_no_gaps(seqs: &mut [u64], p: u64) {
    seqs.sort_unstable();
    for r in 0..p {
        let mine: Vec<u64> = seqs.iter().copied().filter(|n| n % p == r).collect();
        let want: Vec<u64> = (0..mine.len() as u64).map(|k| r + k * p).collect();
        assert!(mine == want, "subtask {r}/{p}: rows lost or repeated in the drain (got {} rows, last {:?})", mine.len(), mine.last());
    }
}

//! How a run ends: its final checkpoint, taken as soon as every task
//! processed all its input, and no second one when the checkpoint still
//! running then already covers all of it; and within a bound, whatever
//! hangs after the last checkpoint.

use super::util::{sink_lines, tmp, weir_run};

/// datagen (`rows`) → dedup → a file sink in `dir/out` (and `more_sinks`),
/// checkpoints every `interval`.
fn pipeline(dir: &std::path::Path, rows: usize, interval: &str, more_sinks: &str) -> std::path::PathBuf {
    let p = dir.join("p.yaml");
    let text = format!(
        "name: ending\nstate: {{dir: {}}}\ncheckpoint: {{interval: {interval}}}\nsources:\n  - {{name: gen, type: datagen, rows: {rows}, fields: {{n: {{kind: sequence}}}}}}\noperators:\n  - {{name: unique, type: dedup, input: gen, key: [n]}}\nsinks:\n  - {{name: out, type: file, input: unique, path: {}}}\n{more_sinks}",
        dir.join("st").display(),
        dir.join("out").display()
    );
    std::fs::write(&p, text).unwrap();
    p
}

/// A periodic checkpoint triggered after the source ended its input, still
/// running when the last task ends (its barrier waits behind a throttled
/// sink's backlog), holds every record and every end of input: it is the
/// final checkpoint. Before, the run waited for it and then took another.
#[test]
fn a_checkpoint_running_at_the_end_of_input_that_covers_all_of_it_is_the_final_one() {
    const ROWS: usize = 3000;
    let dir = tmp();
    let out = dir.path().join("out");
    // The source's 3 batches fit in its channel: it ends at once. The slow
    // sink drains for 2 s, so the checkpoint at 700 ms is still running.
    let pipeline = pipeline(dir.path(), ROWS, "700ms", "  - {name: slow, type: blackhole, input: unique, rate_limit: 1500}\n");
    let o = weir_run(pipeline.to_str().unwrap(), 1).arg("--log-level").arg("debug").ok();
    let line = |needle: &str| o.stderr.lines().position(|l| l.contains(needle));
    let (triggered, exhausted) = (line("Checkpoint triggered. checkpoint=1"), line("Input exhausted"));
    assert!(triggered.is_some() && triggered < exhausted, "checkpoint 1 must run when the input is exhausted:\n{}", o.stderr);
    o.expect_stderr_contains("Final checkpoint complete. checkpoint=1");
    assert_eq!(line("checkpoint=2"), None, "no second checkpoint:\n{}", o.stderr);
    let mut lines = sink_lines(&out);
    lines.sort();
    lines.dedup();
    assert_eq!(lines.len(), ROWS, "the final checkpoint published every record");
}

/// A task that hangs once done (a client that never closes) holds neither
/// the run nor the process: 30 s after the last checkpoint it is cut off,
/// the run fails saying which tasks and that a restore commits what they
/// had not, and the process exits. What the final checkpoint covered is
/// published, and a restore finds nothing left to do.
#[test]
fn tasks_that_hang_after_the_last_checkpoint_are_cut_off_and_the_process_exits() {
    const ROWS: usize = 500;
    let dir = tmp();
    let out = dir.path().join("out");
    let pipeline = pipeline(dir.path(), ROWS, "200ms", "");
    let started = std::time::Instant::now();
    let o = weir_run(pipeline.to_str().unwrap(), 1).env("WEIR_FAULTS", "end_stall=600s").run();
    let took = started.elapsed();
    o.expect_code(1);
    o.expect_stderr_contains("Final checkpoint complete.");
    o.expect_stderr_contains("did not end within 30s of the last checkpoint and were cut off");
    assert!(took < std::time::Duration::from_secs(55), "the process took {took:?} to exit:\n{}", o.stderr);
    let mut lines = sink_lines(&out);
    lines.sort();
    lines.dedup();
    assert_eq!(lines.len(), ROWS, "the final checkpoint's output is published");
    let again = weir_run(pipeline.to_str().unwrap(), 1).arg("--restore").arg("latest").ok();
    assert_eq!(sink_lines(&out).len(), ROWS, "nothing doubled by the restore:\n{}", again.stderr);
}

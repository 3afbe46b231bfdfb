//! How a bounded run ends: its final checkpoint, taken as soon as every task
//! processed all its input, and no second one when the checkpoint still
//! running then already covers all of it.

use super::util::{sink_lines, tmp, weir_run};

/// A periodic checkpoint triggered after the source ended its input, still
/// running when the last task ends (its barrier waits behind a throttled
/// sink's backlog), holds every record and every end of input: it is the
/// final checkpoint. Before, the run waited for it and then took another.
#[test]
fn a_checkpoint_running_at_the_end_of_input_that_covers_all_of_it_is_the_final_one() {
    const ROWS: usize = 3000;
    let dir = tmp();
    let out = dir.path().join("out");
    let pipeline = dir.path().join("p.yaml");
    // The source's 3 batches fit in its channel: it ends at once. The slow
    // sink drains for 2 s, so the checkpoint at 700 ms is still running.
    std::fs::write(
        &pipeline,
        format!(
            "name: ending\nstate: {{dir: {}}}\ncheckpoint: {{interval: 700ms}}\nsources:\n  - {{name: gen, type: datagen, rows: {ROWS}, fields: {{n: {{kind: sequence}}}}}}\noperators:\n  - {{name: unique, type: dedup, input: gen, key: [n]}}\nsinks:\n  - {{name: out, type: file, input: unique, path: {}}}\n  - {{name: slow, type: blackhole, input: unique, rate_limit: 1500}}\n",
            dir.path().join("st").display(),
            out.display()
        ),
    )
    .unwrap();
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

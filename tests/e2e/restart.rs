//! `restart:`: a failed run restarts in the process from its latest
//! checkpoint, and the output is still exactly once.

use super::util::{sink_lines, tmp, weir_run};

fn pipeline(dir: &std::path::Path, rows: usize, restart: &str) -> std::path::PathBuf {
    let p = dir.join("p.yaml");
    std::fs::write(
        &p,
        format!(
            "name: restarts\nstate: {{dir: {}}}\ncheckpoint: {{interval: 100ms}}\n{restart}sources:\n  - {{name: gen, type: datagen, rows: {rows}, rate_limit: 4000, fields: {{n: {{kind: sequence}}}}}}\noperators:\n  - {{name: unique, type: dedup, input: gen, key: [n]}}\nsinks:\n  - {{name: out, type: file, input: unique, path: {}}}\n",
            dir.join("st").display(),
            dir.join("out").display()
        ),
    )
    .unwrap();
    p
}

/// A subtask fails at its 4th checkpoint barrier: with `restart:` the run
/// restores the latest checkpoint in the same process and ends with every
/// record once; without it the failure ends the process (exit 1).
#[test]
fn a_failed_run_restarts_from_its_latest_checkpoint_and_stays_exactly_once() {
    const ROWS: usize = 2000;
    let dir = tmp();
    let p = pipeline(dir.path(), ROWS, "restart: {attempts: 2, backoff: 100ms}\n");
    let o = weir_run(p.to_str().unwrap(), 2).env("WEIR_FAULTS", "fail=unique:1:4").ok();
    o.expect_stderr_contains("injected failure at checkpoint");
    o.expect_stderr_contains("The run failed; restarting from the latest checkpoint (restart:). ");
    o.expect_stderr_contains("restart=1 attempts=2");
    let mut lines = sink_lines(&dir.path().join("out"));
    assert_eq!(lines.len(), ROWS, "every record once across the restart:\n{}", o.stderr);
    lines.sort();
    lines.dedup();
    assert_eq!(lines.len(), ROWS, "no record twice");

    let other = tmp();
    let p = pipeline(other.path(), ROWS, "");
    let o = weir_run(p.to_str().unwrap(), 2).env("WEIR_FAULTS", "fail=unique:1:4").run();
    o.expect_code(1);
    o.expect_stderr_contains("operator `unique` (subtask 1/2) failed");
    assert!(!o.stderr.contains("restarting"), "{}", o.stderr);
}

/// deploy/systemd/weir@.service: `systemd-analyze verify` accepts it (with
/// this build in place of /usr/local/bin/weir), and its command line, with
/// `%i` a pipeline, is one this weir runs.
#[test]
fn the_systemd_unit_verifies_and_its_command_runs() {
    let unit = std::fs::read_to_string(super::util::repo().join("deploy/systemd/weir@.service")).unwrap();
    let bin = env!("CARGO_BIN_EXE_weir");
    let dir = tmp();
    std::fs::write(dir.path().join("weir@.service"), unit.replace("/usr/local/bin/weir", bin)).unwrap();
    std::os::unix::fs::symlink(dir.path().join("weir@.service"), dir.path().join("weir@orders.service")).unwrap();
    let verify = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join("weir@orders.service"))
        .output()
        .expect("systemd-analyze (scripts/install-deps.sh installs systemd)");
    let said = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success() && said.trim().is_empty(), "systemd-analyze verify: {}\n{said}", verify.status);
    for line in ["Restart=on-failure", "RestartPreventExitStatus=2", "KillSignal=SIGTERM"] {
        assert!(unit.lines().any(|l| l == line), "the unit has {line}");
    }
    let exec = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("an ExecStart line");
    let p = pipeline(dir.path(), 100, "");
    let args: Vec<String> = exec.split_whitespace().skip(1).map(|a| a.replace("/etc/weir/%i.yaml", p.to_str().unwrap())).collect();
    let o = super::util::weir(&args).run();
    o.expect_code(0);
    assert_eq!(sink_lines(&dir.path().join("out")).len(), 100, "{}", o.stderr);
}

//! The README's five-minute tour, run as written: every command of its
//! shell block, in a scratch directory, failing on the first that fails.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{repo, tmp};

/// The tour's block: the lines between the tour's heading and the end of
/// its first ```sh fence.
fn tour_block(readme: &str) -> Vec<String> {
    let from = readme.find("## A five-minute tour").expect("the README has the tour");
    let body = &readme[from..];
    let open = body.find("```sh\n").expect("the tour has a sh block") + "```sh\n".len();
    let close = body[open..].find("```").expect("the tour's block ends");
    body[open..open + close].lines().map(str::to_string).collect()
}

/// The block as a strict script: the first line (build and alias) becomes
/// the built binary on PATH; every `a && b` is two commands, so that a
/// failing `a` fails the script too (errexit ignores it inside a list).
fn script(lines: &[String], bin_dir: &std::path::Path) -> String {
    let build = "cargo build --release && alias weir=$PWD/target/release/weir";
    assert_eq!(lines.first().map(String::as_str), Some(build), "the tour's first line changed: update this test");
    let mut s = format!("set -euo pipefail\nexport PATH={}:$PATH\n", bin_dir.display());
    for line in &lines[1..] {
        s.push_str(&line.replace(" && ", "\n"));
        s.push('\n');
    }
    s
}

#[test]
fn the_readme_tour_runs_as_written() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("reading README.md");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_weir"));
    let script = script(&tour_block(&readme), bin.parent().expect("the binary's directory"));
    let dir = tmp();
    for shared in ["pipelines", "testdata"] {
        std::os::unix::fs::symlink(repo().join(shared), dir.path().join(shared)).expect("linking the inputs");
    }
    let log = dir.path().join("tour.log");
    let out = std::fs::File::create(&log).expect("creating the log");
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("the log twice"))
        .stderr(out)
        // Its own group: a timeout ends the background runs too.
        .process_group(0)
        .spawn()
        .expect("starting bash");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for the tour") {
            break Some(s);
        }
        if started.elapsed() > Duration::from_secs(240) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Whatever is left in the group (a background run) goes with the test.
    let _ = Command::new("kill").args(["-9", "--", &format!("-{}", child.id())]).status();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    match status {
        Some(s) if s.success() => {}
        Some(s) => panic!("the README tour failed ({s}); its output:\n{text}\nthe script:\n{script}"),
        None => panic!("the README tour did not end within 240 s; its output:\n{text}"),
    }
    // The three comparisons the tour makes all found the same result.
    assert_eq!(text.matches("same result").count(), 3, "the tour's output:\n{text}");
    assert!(text.contains("sp-"), "the savepoint path was printed; the tour's output:\n{text}");
}

//! The terminal while a pipeline runs, seen the way a person sees it: weir
//! runs in tmux (a real terminal, 150 columns) and the tests read the
//! screen. Log lines scroll above one progress bar (or, on unbounded input,
//! one live status line); a restored run's bar starts at the restored
//! position; `weir status` asks the running process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::util::{tmp, weir};
use super::wait::wait_until;

/// A tmux server of its own, with one window running a shell command.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Start `command` (a shell line) in a 150x40 terminal in `dir`. The
    /// pane stays after the command ends and shows `[exit N]`.
    fn start(name: &str, dir: &Path, command: &str) -> Tmux {
        let socket = format!("weir-e2e-{}-{name}", std::process::id());
        let tmux = Tmux { socket };
        let line = format!("{command}; echo \"[exit $?]\"; sleep 600");
        let ok = tmux
            .cmd(&["-f", "/dev/null", "new-session", "-d", "-x", "150", "-y", "40", "-s", "weir", "-c"])
            .arg(dir)
            .arg(line)
            .status()
            .expect("running tmux (scripts/install-deps.sh installs it)");
        assert!(ok.success(), "tmux new-session failed");
        tmux
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-L").arg(&self.socket).args(args);
        c
    }

    /// The visible screen, one string per line, trailing blank lines dropped.
    fn screen(&self) -> Vec<String> {
        let out = self.cmd(&["capture-pane", "-p", "-t", "weir"]).output().expect("tmux capture-pane");
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim_end().to_string()).collect();
        while lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
        lines
    }

    fn send_keys(&self, keys: &str) {
        assert!(self.cmd(&["send-keys", "-t", "weir", keys]).status().unwrap().success());
    }

    /// Poll the screen until `cond` holds for it (checking `each` screen on the way).
    #[track_caller]
    fn wait_for(&self, what: &str, mut each: impl FnMut(&[String]), mut cond: impl FnMut(&[String]) -> bool) -> Vec<String> {
        let mut last = Vec::new();
        let found = wait_until(Duration::from_secs(60), || {
            last = self.screen();
            each(&last);
            cond(&last)
        });
        assert!(found, "waited for {what}; the screen:\n{}", last.join("\n"));
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).status();
    }
}

fn is_bar(line: &str) -> bool {
    line.contains('█') || line.contains('░')
}

/// At most one bar line, and it is the last line of the screen.
#[track_caller]
fn assert_one_bar_at_the_bottom(screen: &[String]) {
    let bars: Vec<usize> = screen.iter().enumerate().filter(|(_, l)| is_bar(l)).map(|(i, _)| i).collect();
    let ok = match bars.as_slice() {
        [] => true,
        [i] => *i + 1 == screen.len(),
        _ => false,
    };
    assert!(ok, "want at most one bar line, at the bottom; bar lines {bars:?} on the screen:\n{}", screen.join("\n"));
}

/// `1,234/20,000 rows` of the bar line.
fn rows_done(bar: &str) -> Option<u64> {
    let (done, _) =
        bar.split_whitespace().find(|w| w.contains('/') && w.chars().next().is_some_and(|c| c.is_ascii_digit()))?.split_once('/')?;
    done.replace(',', "").parse().ok()
}

fn exited(screen: &[String]) -> Option<i32> {
    screen.iter().find_map(|l| l.strip_prefix("[exit ")?.strip_suffix(']')?.parse().ok())
}

const ROWS: u64 = 20_000;

/// A bounded, rate-limited datagen (5 s at full length), keyed count, checkpoints every 200 ms.
fn write_pipeline(dir: &Path, rows: Option<u64>) -> PathBuf {
    let rows = rows.map(|r| format!("    rows: {r}\n")).unwrap_or_default();
    let yaml = format!(
        "name: tour\nparallelism: 2\nstate:\n  dir: {state}\ncheckpoint:\n  interval: 200ms\nsources:\n  - name: events\n    type: datagen\n    seed: 1\n{rows}    rate_limit: 4000\n    fields:\n      n: {{kind: sequence}}\n      device: {{kind: key, cardinality: 100, prefix: dev-}}\noperators:\n  - name: per_device\n    type: aggregate\n    input: events\n    key: [device]\n    aggregates:\n      - {{fn: count, as: n}}\nsinks:\n  - {{name: out, type: blackhole, input: per_device}}\n",
        state = dir.join("state").display()
    );
    let path = dir.join("tour.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

fn weir_bin() -> &'static str {
    env!("CARGO_BIN_EXE_weir")
}

#[test]
fn logs_scroll_above_one_bar_and_a_restored_run_starts_where_it_left_off() {
    let dir = tmp();
    let pipeline = write_pipeline(dir.path(), Some(ROWS));
    let first = Tmux::start("bar", dir.path(), &format!("{} run {} --log-level debug", weir_bin(), pipeline.display()));
    let mut bars_seen = 0;
    let screen = first.wait_for(
        "a bar past 4,000 rows below at least three checkpoint log lines",
        |s| {
            assert_one_bar_at_the_bottom(s);
            bars_seen += s.last().is_some_and(|l| is_bar(l)) as u32;
        },
        |s| {
            let checkpoints = s.iter().filter(|l| l.contains("DEBUG Checkpoint complete.")).count();
            s.last().filter(|l| is_bar(l)).and_then(|l| rows_done(l)).is_some_and(|d| d >= 4000) && checkpoints >= 3
        },
    );
    assert!(bars_seen >= 1);
    let bar = screen.last().unwrap();
    assert!(bar.contains("/20,000 rows") && bar.contains("records/s") && bar.contains("checkpoint "), "{bar}");
    // With the bar on screen a completed checkpoint is no INFO line (the bar shows it).
    assert!(!screen.iter().any(|l| l.contains("INFO Checkpoint complete.")), "{}", screen.join("\n"));

    first.send_keys("C-c");
    let screen = first.wait_for("the stopped run's exit", assert_one_bar_at_the_bottom, |s| exited(s).is_some());
    assert_eq!(exited(&screen), Some(0), "{}", screen.join("\n"));
    assert!(!screen.iter().any(|l| is_bar(l)), "the bar is cleared at the end:\n{}", screen.join("\n"));
    let summary = screen.iter().find(|l| l.starts_with("Stopped in ")).unwrap_or_else(|| panic!("{}", screen.join("\n")));
    let read: u64 = summary.split("events ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).unwrap();
    assert!(read > 0 && read < ROWS, "stopped midway: {summary}");
    drop(first);

    let second = Tmux::start("restored", dir.path(), &format!("{} run {} --restore latest", weir_bin(), pipeline.display()));
    let screen = second
        .wait_for("the restored run's bar", assert_one_bar_at_the_bottom, |s| s.last().is_some_and(|l| is_bar(l)) || exited(s).is_some());
    let bar = screen.last().unwrap();
    let done = rows_done(bar).unwrap_or_else(|| panic!("no bar: {}", screen.join("\n")));
    // The first frame already counts what the checkpoint had read.
    assert!(done >= read, "the restored run's bar starts at {done}, the restored position is {read}: {bar}");
    let screen = second.wait_for("the restored run's exit", assert_one_bar_at_the_bottom, |s| exited(s).is_some());
    assert_eq!(exited(&screen), Some(0), "{}", screen.join("\n"));
    assert!(screen.iter().any(|l| l.starts_with("Finished in ")), "{}", screen.join("\n"));
}

#[test]
fn an_unbounded_run_shows_one_live_line_and_answers_weir_status() {
    let dir = tmp();
    let pipeline = write_pipeline(dir.path(), None);
    let run = Tmux::start("live", dir.path(), &format!("{} run {} --log-level debug", weir_bin(), pipeline.display()));
    let live = |l: &str| l.contains("records/s") && l.contains(" records · ");
    let one_live_line_at_the_bottom = |s: &[String]| {
        let at: Vec<usize> = s.iter().enumerate().filter(|(_, l)| live(l)).map(|(i, _)| i).collect();
        assert!(at.is_empty() || at == [s.len() - 1], "one live line at the bottom, not {at:?}:\n{}", s.join("\n"));
    };
    let screen = run.wait_for("a live line with a checkpoint below checkpoint logs", one_live_line_at_the_bottom, |s| {
        s.last().is_some_and(|l| live(l) && l.contains(" ago (")) && s.iter().filter(|l| l.contains("Checkpoint complete.")).count() >= 2
    });
    assert!(!screen.iter().any(|l| is_bar(l)), "no bar on unbounded input:\n{}", screen.join("\n"));

    let status = weir(&["status", pipeline.to_str().unwrap()]).run();
    status.expect_code(0);
    let t = &status.stdout;
    assert!(t.starts_with("pipeline tour  running  up "), "{t}");
    assert!(t.contains("last checkpoint ") && t.contains("(completed "), "{t}");
    for op in ["events", "per_device", "out"] {
        let row = t.lines().find(|l| l.split_whitespace().next() == Some(op)).unwrap_or_else(|| panic!("no row {op}:\n{t}"));
        assert_eq!(row.split_whitespace().nth(2), Some("2"), "parallelism 2: {row}");
    }
    let events = t.lines().find(|l| l.starts_with("events ")).unwrap();
    let out_rate = events.split_whitespace().nth(4).unwrap();
    assert!(out_rate != "0", "the source emits about 4000 records/s: {events}");

    let watch = weir(&["status", pipeline.to_str().unwrap(), "--watch", "--count", "3", "--interval", "100ms"]).run();
    watch.expect_code(0);
    assert_eq!(watch.stdout.matches("pipeline tour  ").count(), 3, "{}", watch.stdout);

    run.send_keys("C-c");
    let screen = run.wait_for("the stopped run's exit", |_| {}, |s| exited(s).is_some());
    assert_eq!(exited(&screen), Some(0), "{}", screen.join("\n"));
    assert!(!screen.iter().any(|l| live(l)), "the live line is cleared at the end:\n{}", screen.join("\n"));
    let gone = weir(&["status", pipeline.to_str().unwrap()]).run();
    gone.expect_code(1);
    gone.expect_stderr_contains("no running weir process for pipeline `tour`");
}

#[test]
fn without_a_terminal_each_checkpoint_stays_an_info_line() {
    let dir = tmp();
    let pipeline = write_pipeline(dir.path(), Some(2000));
    // stderr is a pipe here: no bar, today's log lines.
    let o = weir(&["run", pipeline.to_str().unwrap()]).run();
    o.expect_code(0);
    o.expect_stderr_contains("INFO Checkpoint complete.");
    assert!(!o.stderr.contains('█') && !o.stderr.contains('░'), "{}", o.stderr);

    // Without checkpoints a run has a control socket too: none is running.
    let text = std::fs::read_to_string(&pipeline).unwrap().replace("checkpoint:\n  interval: 200ms\n", "");
    let unchecked = dir.path().join("unchecked.yaml");
    std::fs::write(&unchecked, text).unwrap();
    let gone = weir(&["status", unchecked.to_str().unwrap()]).run();
    gone.expect_code(1);
    gone.expect_stderr_contains("no running weir process for pipeline `tour`");
}

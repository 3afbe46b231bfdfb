//! Running the real `weir` binary: a command with its environment, logged
//! for the reproduction script, run as a `weir_test_support::process`
//! (stderr watched while it runs, signals, waits that never hang).

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use weir_test_support::process::{Ended as Exit, Process as Proc};

/// One `weir` invocation.
#[derive(Clone, Debug)]
pub struct Cmd {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Cmd {
    pub fn weir<S: AsRef<str>>(args: &[S]) -> Cmd {
        Cmd { args: args.iter().map(|a| a.as_ref().to_string()).collect(), env: Vec::new() }
    }

    pub fn arg(mut self, a: impl AsRef<str>) -> Cmd {
        self.args.push(a.as_ref().to_string());
        self
    }

    pub fn env(mut self, k: &str, v: impl Into<String>) -> Cmd {
        self.env.push((k.into(), v.into()));
        self
    }

    /// The shell line: `ENV=... "$WEIR" ARGS...`.
    pub fn line(&self) -> String {
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let args: Vec<String> = self.args.iter().map(|a| shell_quote(a)).collect();
        format!("{}\"$WEIR\" {}", env.iter().map(|e| format!("{e} ")).collect::<String>(), args.join(" "))
    }

    pub fn spawn(&self, log: &Log) -> Proc {
        log.push(self.line());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.args(&self.args).env_remove("WEIR_FAULTS");
        // The checks read each "Checkpoint complete." line.
        cmd.env("WEIR_CHECKPOINT_LOG", "each");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        Proc::spawn(cmd, self.line())
    }

    /// Run to the end (killed after `limit`).
    pub fn run(&self, log: &Log, limit: Duration) -> Exit {
        self.spawn(log).wait(limit)
    }
}

fn shell_quote(s: &str) -> String {
    if s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The commands and actions of a case, in order, for its reproduction.
#[derive(Default, Clone)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    pub fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    /// A comment line describing an action between commands.
    pub fn note(&self, what: impl AsRef<str>) {
        self.push(format!("# {}", what.as_ref()));
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Exit 0 after the input was exhausted: the run is complete.
pub fn finished_input(exit: &Exit) -> bool {
    exit.code() == Some(0) && exit.stderr.contains("Input exhausted")
}

/// Every file and directory under `dirs` with its size: what a refused
/// command must leave exactly as it was.
pub fn listing(dirs: &[&Path]) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => {
                    out.push(format!("{rel}/"));
                    walk(root, &p, out);
                }
                Ok(m) => out.push(format!("{rel} {}", m.len())),
                Err(_) => {}
            }
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        if d.exists() {
            out.push(format!("{}/", d.display()));
        }
        walk(d.parent().unwrap_or(d), d, &mut out);
    }
    out.sort();
    out
}

/// What differs between two listings (first few lines).
pub fn listing_diff(before: &[String], after: &[String]) -> Option<String> {
    let gone: Vec<&String> = before.iter().filter(|l| !after.contains(l)).collect();
    let new: Vec<&String> = after.iter().filter(|l| !before.contains(l)).collect();
    if gone.is_empty() && new.is_empty() {
        return None;
    }
    let show = |v: &[&String]| v.iter().take(8).map(|s| format!("    {s}")).collect::<Vec<_>>().join("\n");
    Some(format!("  removed or changed:\n{}\n  added or changed:\n{}", show(&gone), show(&new)))
}

//! Running the real `weir` binary: a command with its environment, a
//! running process whose stderr can be watched while it runs, signals, and
//! waits that never hang. Every command and action is logged for the
//! reproduction script.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
        cmd.args(&self.args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).env_remove("WEIR_FAULTS");
        // The checks read each "Checkpoint complete." line.
        cmd.env("WEIR_CHECKPOINT_LOG", "each");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawning weir");
        let stderr = Arc::new(Mutex::new(String::new()));
        let err = collect(child.stderr.take().unwrap(), stderr.clone());
        let stdout = Arc::new(Mutex::new(String::new()));
        let out = collect(child.stdout.take().unwrap(), stdout.clone());
        Proc { child, stderr, stdout, threads: vec![err, out], started: Instant::now(), line: self.line() }
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

/// Read a pipe into a shared string as it comes, so a chatty child never
/// blocks and its log can be watched live.
fn collect(mut r: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
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

pub struct Proc {
    child: Child,
    stderr: Arc<Mutex<String>>,
    stdout: Arc<Mutex<String>>,
    threads: Vec<JoinHandle<()>>,
    started: Instant,
    pub line: String,
}

/// How a process ended.
#[derive(Debug, Clone)]
pub struct Exit {
    pub code: Option<i32>,
    /// Killed by this signal (9: our kill -9, 6: an injected crash's abort).
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub line: String,
}

impl Exit {
    /// The last lines of stderr, for a failure message.
    pub fn tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self.stderr.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn finished_input(&self) -> bool {
        self.code == Some(0) && self.stderr.contains("Input exhausted")
    }
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    pub fn stderr_has(&self, needle: &str) -> bool {
        self.stderr.lock().unwrap().contains(needle)
    }

    /// Wait until stderr has `needle` (true) or the process exited or `limit` passed (false).
    pub fn wait_log(&mut self, needle: &str, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.stderr_has(needle) {
                return true;
            }
            if self.exited() {
                return self.stderr_has(needle);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// How many times stderr has `needle` so far.
    pub fn log_count(&self, needle: &str) -> usize {
        self.stderr.lock().unwrap().matches(needle).count()
    }

    /// Wait until stderr has `needle` `n` times (true), or the process
    /// exited or `limit` passed (false: no more lines can come, or too late).
    pub fn wait_log_count(&mut self, needle: &str, n: usize, limit: Duration) -> bool {
        let start = Instant::now();
        let seen = |p: &Proc| p.log_count(needle) >= n;
        while start.elapsed() < limit {
            if seen(self) {
                return true;
            }
            if self.exited() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    /// Sleep `d` unless the process exits first; true if it is still running.
    pub fn sleep_while_running(&mut self, d: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < d {
            if self.exited() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        !self.exited()
    }

    /// Send a signal by name (TERM, STOP, CONT, KILL) through `kill`. For
    /// STOP, also wait until every thread is stopped (the signal is
    /// asynchronous: a listing taken before that can still see writes).
    pub fn signal(&mut self, sig: &str) -> bool {
        if self.exited() {
            return false;
        }
        let sent = Command::new("kill").arg(format!("-{sig}")).arg(self.pid().to_string()).status().map(|s| s.success()).unwrap_or(false);
        if sent && sig == "STOP" {
            let pid = self.pid();
            crate::wait_until(Duration::from_secs(2), || all_threads_stopped(pid));
            // A process that died just before the signal (a crash point) is
            // a zombie, whose threads look stopped too: it is not frozen.
            return !self.exited();
        }
        sent
    }

    /// Wait for the end; past `limit` it is killed and reported as timed out.
    pub fn wait(mut self, limit: Duration) -> Exit {
        let mut timed_out = false;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("waiting for weir") {
                break s;
            }
            if self.started.elapsed() > limit {
                timed_out = true;
                let _ = self.signal("CONT");
                let _ = self.child.kill();
                break self.child.wait().expect("reaping weir");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        use std::os::unix::process::ExitStatusExt;
        Exit {
            code: status.code(),
            signal: status.signal(),
            timed_out,
            stdout: self.stdout.lock().unwrap().clone(),
            stderr: self.stderr.lock().unwrap().clone(),
            line: self.line.clone(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A failing case must not leave a weir process behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill").arg("-CONT").arg(self.child.id().to_string()).status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
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

/// Whether every thread of `pid` is in state T (stopped), from /proc.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return true };
    tasks.filter_map(|t| t.ok()).all(|t| {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        stat.rsplit_once(')').map_or(true, |(_, rest)| matches!(rest.trim_start().chars().next(), Some('T' | 't' | 'Z' | 'X')))
    })
}

//! A child process as the tests and the chaos harness run `weir`: its
//! stdout and stderr collected as they come (a chatty child never blocks on
//! a full pipe, and its log can be watched while it runs), signals by name,
//! and waits that never hang. One implementation for both.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running child. Dropping it kills the child (a failing test leaves no
/// process behind).
pub struct Process {
    pub child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    threads: Vec<JoinHandle<()>>,
    /// The command line, for messages.
    pub line: String,
}

/// How a child ended.
#[derive(Debug, Clone)]
pub struct Ended {
    pub status: ExitStatus,
    /// From the start of the wait to the end.
    pub elapsed: Duration,
    /// Killed by the wait because its limit passed.
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub line: String,
}

impl Process {
    /// Start `cmd` (stdin from /dev/null, stdout and stderr collected).
    pub fn spawn(mut cmd: Command, line: impl Into<String>) -> Process {
        let line = line.into();
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawning `{line}`: {e}"));
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let threads = vec![
            collect(child.stdout.take().expect("piped stdout"), stdout.clone()),
            collect(child.stderr.take().expect("piped stderr"), stderr.clone()),
        ];
        Process { child, stdout, stderr, threads, line }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        lock(&self.stderr).clone()
    }

    /// What it wrote to stdout so far.
    pub fn stdout(&self) -> String {
        lock(&self.stdout).clone()
    }

    pub fn stderr_has(&self, needle: &str) -> bool {
        lock(&self.stderr).contains(needle)
    }

    /// How many times stderr has `needle` so far.
    pub fn log_count(&self, needle: &str) -> usize {
        lock(&self.stderr).matches(needle).count()
    }

    /// Wait until stderr has `needle` (true), or the child exited or
    /// `limit` passed (false).
    pub fn wait_log(&mut self, needle: &str, limit: Duration) -> bool {
        self.wait_log_count(needle, 1, limit)
    }

    /// Wait until stderr has `needle` `n` times (true), or the child
    /// exited or `limit` passed (false: no more lines can come, or too late).
    pub fn wait_log_count(&mut self, needle: &str, n: usize, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.log_count(needle) >= n {
                return true;
            }
            if self.exited() {
                // Its last lines may still be in the pipe.
                self.join_readers();
                return self.log_count(needle) >= n;
            }
            if start.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Sleep `d` unless the child exits first; true if it still runs.
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

    /// Send a signal by name (TERM, INT, STOP, CONT, KILL) through `kill`;
    /// false if the child had exited or `kill` failed. For STOP, also wait
    /// until every thread is stopped (the signal is asynchronous: a listing
    /// taken before that can still see writes).
    pub fn signal(&mut self, name: &str) -> bool {
        if self.exited() {
            return false;
        }
        let pid = self.pid();
        let sent = self.send(name);
        if sent && name == "STOP" {
            crate::wait::wait_until(Duration::from_secs(2), || all_threads_stopped(pid));
            // A child that died just before the signal is a zombie, whose
            // threads look stopped too: it is not frozen.
            return !self.exited();
        }
        sent
    }

    /// `kill -NAME PID`, without looking whether the child still runs.
    fn send(&self, name: &str) -> bool {
        Command::new("kill").arg(format!("-{name}")).arg(self.pid().to_string()).status().is_ok_and(|s| s.success())
    }

    /// SIGTERM; the test fails if it cannot be sent.
    #[track_caller]
    pub fn terminate(&self) {
        assert!(self.send("TERM"), "kill -TERM `{}` failed", self.line);
    }

    /// SIGINT (Ctrl-C); the test fails if it cannot be sent.
    #[track_caller]
    pub fn interrupt(&self) {
        assert!(self.send("INT"), "kill -INT `{}` failed", self.line);
    }

    /// Wait up to `limit` from now for the end; a child still running then
    /// is killed and reported as timed out.
    pub fn wait(mut self, limit: Duration) -> Ended {
        let start = Instant::now();
        let mut timed_out = false;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("waiting for a child") {
                break s;
            }
            if start.elapsed() > limit {
                timed_out = true;
                let _ = self.signal("CONT");
                let _ = self.child.kill();
                break self.child.wait().expect("reaping a child");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        self.join_readers();
        Ended {
            status,
            elapsed: start.elapsed(),
            timed_out,
            stdout: self.stdout(),
            stderr: self.stderr(),
            line: self.line.clone(),
        }
    }

    /// `wait`, and the test fails if the limit passed.
    #[track_caller]
    pub fn wait_for(self, limit: Duration) -> Ended {
        let ended = self.wait(limit);
        assert!(!ended.timed_out, "`{}` did not finish within {limit:?}; stderr:\n{}", ended.line, ended.stderr);
        ended
    }

    /// The readers end when the child's pipes close (at its exit, unless a
    /// grandchild holds them: then they are left to run).
    fn join_readers(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        for t in self.threads.extract_if(.., |t| t.is_finished()) {
            let _ = t.join();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill").arg("-CONT").arg(self.child.id().to_string()).status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Ended {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// The signal that killed it (9: kill -9, 6: an abort).
    pub fn signal(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal()
    }

    /// The last `n` lines of stderr, for a failure message.
    pub fn tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self.stderr.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    #[track_caller]
    pub fn expect_code(&self, code: i32) {
        assert_eq!(
            self.code(),
            Some(code),
            "`{}` exited with {:?}, want {code}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.line,
            self.status,
            self.stdout,
            self.stderr
        );
    }

    #[track_caller]
    pub fn expect_stderr_contains(&self, needle: &str) {
        assert!(self.stderr.contains(needle), "`{}`: stderr lacks {needle:?}; stderr:\n{}", self.line, self.stderr);
    }
}

fn lock(s: &Mutex<String>) -> std::sync::MutexGuard<'_, String> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// Read a pipe into a shared string as it comes.
fn collect(mut r: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        let mut pending = Vec::new();
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            // A UTF-8 character cut between two reads waits for its rest.
            pending.extend_from_slice(&buf[..n]);
            let valid = match std::str::from_utf8(&pending) {
                Ok(_) => pending.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => pending.len(),
            };
            lock(&into).push_str(&String::from_utf8_lossy(&pending[..valid]));
            pending.drain(..valid);
        }
        lock(&into).push_str(&String::from_utf8_lossy(&pending));
    })
}

/// Whether every thread of `pid` is in state T (stopped), from /proc.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return true };
    tasks.filter_map(|t| t.ok()).all(|t| {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        stat.rsplit_once(')').is_none_or(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('T' | 't' | 'Z' | 'X')))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Process {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script);
        Process::spawn(cmd, script)
    }

    #[test]
    fn output_is_seen_while_it_runs_and_whole_at_the_end() {
        let mut p = sh("echo started >&2; sleep 30");
        assert!(p.wait_log("started", Duration::from_secs(10)));
        assert!(p.signal("KILL"));
        let ended = p.wait(Duration::from_secs(10));
        assert_eq!(ended.signal(), Some(9));
        assert!(!ended.timed_out);
        let ended = sh("printf 'a\\nb\\n'; echo err >&2; exit 3").wait_for(Duration::from_secs(10));
        assert_eq!((ended.code(), ended.stdout.as_str(), ended.tail(1).as_str()), (Some(3), "a\nb\n", "err"));
    }

    #[test]
    fn the_limit_of_a_wait_counts_from_the_wait_not_from_the_start() {
        // A child that ran longer than the limit before the wait began is
        // not killed at once (the chaos harness once reported such
        // instances as hung).
        let mut p = sh("sleep 1.2; exit 0");
        std::thread::sleep(Duration::from_millis(900));
        assert!(!p.exited());
        let ended = p.wait(Duration::from_millis(800));
        assert_eq!((ended.code(), ended.timed_out), (Some(0), false));
        let ended = sh("sleep 30").wait(Duration::from_millis(200));
        assert!(ended.timed_out && ended.signal() == Some(9), "{ended:?}");
    }

    #[test]
    fn a_line_that_exits_is_not_waited_for_and_utf8_cut_between_reads_survives() {
        let mut p = sh("printf 'caf\\303'; sleep 0.2; printf '\\251 done\\n' >&2; exit 0");
        assert!(!p.wait_log("never", Duration::from_secs(10)), "the child exited: no wait to the limit");
        let ended = p.wait(Duration::from_secs(5));
        assert_eq!(ended.stdout, "caf\u{fffd}");
        let mut q = sh("printf 'caf\\303'; sleep 0.2; printf '\\251\\n'");
        let _ = q.wait_log("x", Duration::from_millis(1));
        assert_eq!(q.wait(Duration::from_secs(5)).stdout, "caf\u{e9}\n");
    }
}

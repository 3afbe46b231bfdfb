//! One run of a case's pipeline: start it (fresh, `--restore latest` or from
//! a savepoint), inject the run's action while it runs, and classify how it
//! ended. A refused start (exit 2) must leave the state and output
//! directories exactly as they were.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::case::Case;
use super::faults::{Action, Attempt, NetFault, Outage};
use super::proc::{finished_input, listing, listing_diff, Cmd, Exit, Proc};
use super::stats::{ACTIONS, OUTAGES, START, TO_EXIT, WAITS};

/// No run of a case may take longer than this (a normal one takes 2–5 s).
pub const RUN_LIMIT: Duration = Duration::from_secs(90);
/// A refused command, a savepoint trigger or a second process answers within this.
const SHORT_LIMIT: Duration = Duration::from_secs(20);

/// Where the next run starts from.
#[derive(Clone, Debug)]
pub enum Start {
    Fresh,
    Latest,
    Savepoint(PathBuf),
}

/// How a run ended.
pub enum Ended {
    /// Exit 0 after its input was exhausted: the case is complete.
    Finished,
    /// Killed, crashed at a fault point, stopped or failed as its faults allow: restore next.
    Interrupted,
    /// Stopped with a savepoint: restore from it next.
    Stopped(PathBuf),
    /// Exit 2 with nothing changed on disk.
    Refused(String),
    /// A failure of the case, with its reason.
    Failed(String),
}

impl Case {
    pub fn command(&self, start: &Start, parallelism: u32, allow_non_restored: bool) -> Cmd {
        let yaml = self.yaml_path().display().to_string();
        let mut c = match start {
            Start::Fresh => Cmd::weir(&["run", &yaml]),
            Start::Latest => Cmd::weir(&["run", &yaml, "--restore", "latest"]),
            Start::Savepoint(sp) => Cmd::weir(&["restore", &sp.display().to_string(), &yaml]),
        };
        c = c.arg("--no-progress").arg("-p").arg(parallelism.to_string());
        if allow_non_restored {
            c = c.arg("--allow-non-restored-state");
        }
        if self.machine > 0 {
            c = c.arg("--set").arg(format!("state.dir={}", self.state_dir().display()));
        }
        if let Some(url) = &self.storage {
            c = c.arg("--set").arg(format!("checkpoint.storage={url}"));
            c = c.arg("--set").arg(format!("checkpoint.storage_lease={}ms", super::s3::LEASE_MS));
        }
        c
    }

    fn disk(&self) -> Vec<String> {
        listing(&[&self.state_dir(), &self.dir.join("out")])
    }

    /// Run `cmd`, which must be refused: exit 2, nothing changed.
    pub fn expect_refused(&mut self, cmd: Cmd, why: &str) -> Result<(), String> {
        self.log.note(format!("must be refused (exit 2, nothing changed): {why}"));
        let before = self.disk();
        let exit = cmd.run(&self.log, SHORT_LIMIT);
        if exit.code() != Some(2) {
            return Err(format!("{why}: `{}` exited {:?} (signal {:?}), want exit 2\n{}", exit.line, exit.code(), exit.signal(), exit.tail(8)));
        }
        self.refused += 1;
        match listing_diff(&before, &self.disk()) {
            None => Ok(()),
            Some(d) => Err(format!("{why}: refused with exit 2 but changed the disk:\n{d}\n{}", exit.tail(4))),
        }
    }

    /// One run with its action and faults.
    pub fn run_once(&mut self, n: usize, a: &Attempt, start: &Start, parallelism: u32, allow: bool, may_refuse: bool) -> Ended {
        self.run_parallelism = parallelism;
        self.run_allows_dropping = allow;
        self.taker_parallelism = None;
        let mut cmd = self.command(start, parallelism, allow);
        if !a.faults.is_empty() {
            cmd = cmd.env("WEIR_FAULTS", a.faults.join(","));
        }
        if a.fast {
            for s in &self.shape.sources {
                cmd = cmd.arg("--set").arg(format!("sources.{}.rate_limit={}", s.name, s.rate * 8));
            }
        }
        // The run's path to S3 through a proxy, for a network fault or a stale owner.
        let proxied = a.net.is_some() || matches!(a.action, Action::Stale { hold: true, .. });
        let net = match (proxied, &self.storage, super::s3::endpoint()) {
            (true, Some(_), Some(endpoint)) => Some(NetPath::start(&endpoint, a.net)),
            _ => None,
        };
        if let Some(p) = &net {
            cmd = cmd.env("AWS_ENDPOINT_URL", p.proxy.url());
            self.log.note(format!("the run reaches S3 through a proxy ({:?})", a.net));
        }
        self.log.note(format!("run {n}: {:?}", a.action));
        let before = self.disk();
        let t = Instant::now();
        let mut proc = cmd.spawn(&self.log);
        let mut stopped_at = None;
        let up = proc.wait_log("Pipeline started.", RUN_LIMIT);
        self.timing.add(START, t.elapsed());
        if up {
            if let Some(o) = a.outage {
                let t = Instant::now();
                self.outage(&mut proc, o);
                self.timing.add(OUTAGES, t.elapsed());
            }
            let (t, waited) = (Instant::now(), self.waited());
            let acted = self.act(&mut proc, &a.action, n, net.as_ref());
            self.timing.add(ACTIONS, t.elapsed().saturating_sub(self.waited() - waited));
            match acted {
                Ok(sp) => stopped_at = sp,
                Err(e) => return Ended::Failed(e),
            }
            if a.then_kill {
                let t = Instant::now();
                let next = proc.log_count("Checkpoint complete.") + 1;
                let seen = proc.wait_log_count("Checkpoint complete.", next, RUN_LIMIT);
                self.timing.add(WAITS, t.elapsed());
                if seen && proc.signal("KILL") {
                    self.log.note(format!("at 'Checkpoint complete.' (#{next}): kill -9"));
                    self.killed = true;
                }
            }
        }
        let t = Instant::now();
        let exit = proc.wait(RUN_LIMIT);
        self.timing.add(TO_EXIT, t.elapsed());
        drop(net);
        if a.faults.iter().any(|f| f.starts_with("stall=")) && exit.stderr.contains("Injected stall.") {
            self.stalls_fired += 1;
        }
        self.restarts_fired += exit.stderr.matches("restarting from the latest checkpoint (restart:)").count();
        if exit.signal() != Some(9) {
            // Sent as it exited: the run ended on its own, no kill point.
            self.killed = false;
        }
        let how = if finished_input(&exit) { ", input finished" } else { "" };
        self.log.note(format!("ended: exit {:?}, signal {:?}{how}", exit.code(), exit.signal()));
        self.classify(exit, a, before, may_refuse, stopped_at)
    }

    /// Time spent so far waiting before actions.
    fn waited(&self) -> Duration {
        self.timing.0.get(WAITS).copied().unwrap_or_default()
    }

    /// Wait `ms` before an action unless the run exits first; true if it still runs.
    fn wait_before(&mut self, proc: &mut Proc, ms: u64) -> bool {
        let t = Instant::now();
        let running = proc.sleep_while_running(Duration::from_millis(ms));
        self.timing.add(WAITS, t.elapsed());
        running
    }

    fn classify(&mut self, exit: Exit, a: &Attempt, before: Vec<String>, may_refuse: bool, stopped_at: Option<PathBuf>) -> Ended {
        let storm = matches!(a.action, Action::Storm { .. });
        if exit.timed_out {
            return Ended::Failed(format!("hang: `{}` did not end within {RUN_LIMIT:?}\n{}", exit.line, exit.tail(10)));
        }
        if let Some(taken) = self.taken_over.take() {
            // With `restart:`, a stale owner failed by the new owner's Kafka
            // fence restarts in the process and, the new owner being gone
            // (killed), takes the storage over again, as a restarted pod
            // would: a checkpoint it then commits is the latest, at its
            // own parallelism.
            if let Some((_, after)) = exit.stderr.split_once("restarting from the latest checkpoint (restart:)") {
                let committed = after.contains("Checkpoint complete.") || after.contains("injected crash at after_metadata");
                if after.contains("Took the checkpoint storage over") && committed {
                    self.log.note(format!(
                        "the stale owner restarted (restart:), took the storage over again and committed: go on at -p {}",
                        self.run_parallelism
                    ));
                    self.taker_parallelism = Some(self.run_parallelism);
                }
            }
            // A stale owner must stop, never finish: the new owner decides.
            return match (exit.code(), exit.signal()) {
                // Its lease lost (said by the run, or by the lease thread
                // first), or its Kafka producers fenced by the new owner's.
                (Some(1), _) if STALE_ENDINGS.iter().any(|e| exit.stderr.contains(e)) => {
                    self.takeovers += 1;
                    taken
                }
                // Its drawn crash point, reached in its local work.
                (None, Some(6)) if exit.stderr.contains("injected crash at") => {
                    self.takeovers += 1;
                    taken
                }
                // It had committed its final checkpoint before its path stalled.
                (Some(0), _) if finished_input(&exit) => {
                    self.takeovers += 1;
                    taken
                }
                (code, signal) => Ended::Failed(format!(
                    "a stale owner, taken over, ended with exit {code:?} signal {signal:?}, want exit 1 (ownership lost):\n{}",
                    exit.tail(12)
                )),
            };
        }
        match (exit.code(), exit.signal()) {
            (Some(0), _) if finished_input(&exit) => Ended::Finished,
            (Some(0), _) => match stopped_at {
                Some(sp) => Ended::Stopped(sp),
                None => Ended::Interrupted,
            },
            (Some(130), _) if storm => {
                self.kill_points += 1;
                Ended::Interrupted
            }
            (Some(2), _) => {
                if let Some(d) = listing_diff(&before, &self.disk()) {
                    return Ended::Failed(format!("refused (exit 2) but changed the disk:\n{d}\n{}", exit.tail(6)));
                }
                if may_refuse {
                    self.refused += 1;
                    Ended::Refused(exit.tail(3))
                } else {
                    Ended::Failed(format!("unexpected refusal (exit 2) of `{}`:\n{}", exit.line, exit.tail(8)))
                }
            }
            (Some(1), _) if a.fails_writes() && exit.stderr.contains("consecutive failures") => Ended::Interrupted,
            // A start that could not read the store through cut connections
            // (seeds 1800005, 1800009) fails as with brokers unreachable; the
            // next run restores.
            (Some(1), _) if matches!(a.net, Some(NetFault::Cuts { .. })) && exit.stderr.contains("checkpoint storage unreachable") => {
                Ended::Interrupted
            }
            // An outage longer than broker_timeout fails the run; the next restores.
            (Some(1), _) if a.outage.is_some() && failed_on_the_broker(&exit.stderr) => {
                self.kill_points += 1;
                Ended::Interrupted
            }
            // A start that could not commit its decision (its short lease
            // lapsed under load, S3 cut): what it wrote does not count, and
            // the next run restores, as after a crash.
            (Some(1), _) if self.storage.is_some() && exit.stderr.contains("the start was decided but committing it failed") => {
                Ended::Interrupted
            }
            // Only a kill that found the process running is a kill point.
            (None, Some(9)) => {
                if std::mem::take(&mut self.killed) {
                    self.kill_points += 1;
                }
                Ended::Interrupted
            }
            (None, Some(6)) if exit.stderr.contains("injected crash at") => {
                self.kill_points += 1;
                Ended::Interrupted
            }
            (code, signal) => Ended::Failed(format!("`{}` ended with exit {code:?} signal {signal:?}:\n{}", exit.line, exit.tail(12))),
        }
    }

    /// Stop the broker for a while; the run goes on (or fails, if the outage
    /// outlasts its broker_timeout).
    fn outage(&mut self, proc: &mut Proc, o: Outage) {
        let Some(pid) = super::kafka::broker_pid() else { return };
        if !proc.sleep_while_running(Duration::from_millis(o.after_ms)) {
            return;
        }
        if let Some(outage) = super::kafka::Outage::begin(pid) {
            self.log.note(format!("{} ms after 'Pipeline started.': broker (pid {pid}) stopped for {} ms", o.after_ms, o.for_ms));
            proc.sleep_while_running(Duration::from_millis(o.for_ms));
            drop(outage);
        }
    }

    /// Inject `action` into the running process. Returns the savepoint of a stop.
    fn act(&mut self, proc: &mut Proc, action: &Action, n: usize, net: Option<&NetPath>) -> Result<Option<PathBuf>, String> {
        let after = |ms: u64| Duration::from_millis(ms);
        match *action {
            Action::Finish => {}
            Action::Stale { after_ms, hold, kill_ms } => {
                if self.wait_before(proc, after_ms) {
                    self.stale(proc, hold, kill_ms, net)?;
                }
            }
            Action::Kill { after_ms } => {
                if self.wait_before(proc, after_ms) && proc.signal("KILL") {
                    self.log.note(format!("{after_ms} ms after 'Pipeline started.': kill -9"));
                    self.killed = true;
                }
            }
            Action::KillAt { signal, nth, delay_ms } => {
                let t = Instant::now();
                // A run that restores nothing has no "State restored.": right after the start instead.
                let restores = proc.stderr_has("Restoring from checkpoint.");
                let signal = if signal == "State restored." && !restores { "Pipeline started." } else { signal };
                let seen = proc.wait_log_count(signal, nth, RUN_LIMIT) && proc.sleep_while_running(after(delay_ms));
                self.timing.add(WAITS, t.elapsed());
                if seen && proc.signal("KILL") {
                    self.log.note(format!("{delay_ms} ms after '{signal}' (#{nth}): kill -9"));
                    self.killed = true;
                }
            }
            Action::Term { after_ms } => {
                if self.wait_before(proc, after_ms) && proc.signal("TERM") {
                    self.log.note(format!("{after_ms} ms after 'Pipeline started.': kill -TERM"));
                }
            }
            Action::Storm { after_ms, signals, gap_ms } => {
                if self.wait_before(proc, after_ms) {
                    self.log.note(format!("{after_ms} ms after 'Pipeline started.': {signals} x kill -TERM, {gap_ms} ms apart"));
                    for _ in 0..signals {
                        proc.signal("TERM");
                        std::thread::sleep(after(gap_ms));
                    }
                }
            }
            Action::Pause { after_ms, for_ms } => {
                if self.wait_before(proc, after_ms) && proc.signal("STOP") {
                    self.log.note(format!("{after_ms} ms after 'Pipeline started.': kill -STOP, kill -CONT {for_ms} ms later"));
                    std::thread::sleep(after(for_ms));
                    proc.signal("CONT");
                }
            }
            Action::Second { after_ms } => {
                if self.wait_before(proc, after_ms) && proc.signal("STOP") {
                    self.log.note(format!("{after_ms} ms after 'Pipeline started.': kill -STOP the run, start a second one"));
                    let second = self.command(&Start::Latest, self.shape.parallelism, false);
                    let result = self.expect_refused(second, "a second process on a state dir in use");
                    self.log.note("kill -CONT the first run");
                    proc.signal("CONT");
                    result?;
                }
            }
            Action::Savepoint { after_ms } => {
                if self.wait_before(proc, after_ms) {
                    self.log.note(format!("{after_ms} ms after 'Pipeline started.': savepoint trigger"));
                    self.trigger(&[])?;
                }
            }
            Action::Stop { after_ms, drain, target, moved } => {
                if self.wait_before(proc, after_ms) {
                    self.log.note(format!("{after_ms} ms after 'Pipeline started.': stop with a savepoint"));
                    let mut args = vec!["--stop".to_string()];
                    if drain {
                        args.push("--drain".into());
                    }
                    // One target for the whole case: each savepoint is a new child of it.
                    let parent = self.dir.join("sp-targets");
                    if target {
                        args.extend(["--target".into(), parent.display().to_string()]);
                    }
                    let Some(sp) = self.trigger(&args)? else { return Ok(None) };
                    if target {
                        let parent = parent.canonicalize().map_err(|e| format!("the target {}: {e}", parent.display()))?;
                        let fresh = sp.parent() == Some(parent.as_path()) && !self.targeted.contains(&sp);
                        if !fresh {
                            return Err(format!("savepoint {} is not a new child of the target {}", sp.display(), parent.display()));
                        }
                        self.targeted.push(sp.clone());
                    }
                    if !moved {
                        return Ok(Some(sp));
                    }
                    // Wait for the exit before moving what it wrote.
                    let _ = proc.sleep_while_running(RUN_LIMIT);
                    let to = self.dir.join("moved").join(format!("sp-{n}"));
                    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                    self.log.push(format!("mv {} {}", sp.display(), to.display()));
                    std::fs::rename(&sp, &to).map_err(|e| format!("moving the savepoint {}: {e}", sp.display()))?;
                    return Ok(Some(to));
                }
            }
        }
        Ok(None)
    }

    /// `weir savepoint trigger` with `extra` args: the savepoint's path, or
    /// None when the pipeline had already ended or refused (exit 1).
    fn trigger(&mut self, extra: &[String]) -> Result<Option<PathBuf>, String> {
        let sock = self.state_dir().join("control.sock");
        let _ = super::wait_until(Duration::from_secs(5), || sock.exists());
        let yaml = self.yaml_path().display().to_string();
        let mut cmd = Cmd::weir(&["savepoint", "trigger", &yaml, "--timeout", "15s"]);
        for a in extra {
            cmd = cmd.arg(a);
        }
        let exit = cmd.run(&self.log, SHORT_LIMIT);
        if exit.timed_out {
            return Err(format!("savepoint trigger hung:\n{}", exit.tail(5)));
        }
        match exit.code() {
            Some(0) => {
                let path = exit.stdout.lines().find_map(|l| l.strip_prefix("Savepoint completed. Path: ")).map(PathBuf::from);
                self.savepoints += 1;
                path.map(Some).ok_or_else(|| format!("savepoint trigger exited 0 without a path: {}", exit.stdout))
            }
            Some(1) => {
                self.log.note(format!("trigger answered: {}", exit.tail(1)));
                Ok(None)
            }
            _ => Err(format!("savepoint trigger `{}`: exit {:?}\n{}", exit.line, exit.code(), exit.tail(5))),
        }
    }
}

impl Case {
    /// The running process becomes a stale owner: its path to S3 is held
    /// (or it is frozen), a run on a new machine takes the storage over once
    /// the lease ran out and is killed after its first checkpoint, the stale
    /// one's held bytes are delivered (or it is continued) in between.
    fn stale(&mut self, proc: &mut Proc, hold: bool, kill_ms: u64, net: Option<&NetPath>) -> Result<(), String> {
        match net.filter(|_| hold) {
            Some(p) => {
                p.proxy.set(super::proxy::Mode::Hold);
                self.log.note("the proxy holds the run's bytes to S3");
            }
            None => {
                if !proc.signal("STOP") {
                    return Ok(());
                }
                self.log.note("kill -STOP the run (a stale owner)");
            }
        }
        std::thread::sleep(Duration::from_millis(super::s3::LEASE_MS + 700));
        self.new_machine();
        // The stale run may be a rescale whose first checkpoint has or has
        // not completed: the taker restores at the parallelism of what it
        // finds, as an operator would after the refusal says which.
        let mut parallelism = self.shape.parallelism;
        // With the stale run's flags: its restore may have dropped state
        // (and the lineage may lead the taker to the same checkpoint).
        let allow = self.dropped_state || self.run_allows_dropping;
        let mut cmd = self.command(&Start::Latest, parallelism, allow);
        let mut taker = None;
        let deadline = Instant::now() + SHORT_LIMIT;
        while taker.is_none() {
            let mut p = cmd.spawn(&self.log);
            if p.wait_log("Pipeline started.", RUN_LIMIT) {
                taker = Some(p);
                continue;
            }
            let exit = p.wait(SHORT_LIMIT);
            let held = exit.code() == Some(2) && exit.stderr.contains("is in use by weir process");
            // A keyed restore says "restores only with the same parallelism";
            // an unaligned checkpoint with in-flight records "can only be
            // restored at parallelism N" (seed 1600046).
            let refusals = ["restores only with the same parallelism", "can only be restored at parallelism"];
            let other_p = exit.code() == Some(2) && refusals.iter().any(|r| exit.stderr.contains(r));
            if other_p && parallelism != self.run_parallelism {
                parallelism = self.run_parallelism;
                self.log.note(format!("the latest checkpoint is the stale run's: take over at -p {parallelism}"));
                cmd = self.command(&Start::Latest, parallelism, allow);
                continue;
            }
            if !held || Instant::now() > deadline {
                self.release(proc, net, hold);
                return Err(format!("the take-over from a stale owner failed: `{}` exit {:?}\n{}", exit.line, exit.code(), exit.tail(10)));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut taker = taker.unwrap();
        self.taker_parallelism = Some(parallelism);
        let committed = taker.wait_log_count("Checkpoint complete.", 1, RUN_LIMIT);
        self.release(proc, net, hold);
        if committed && taker.sleep_while_running(Duration::from_millis(kill_ms)) && taker.signal("KILL") {
            self.log.note(format!("{kill_ms} ms after the new owner's first 'Checkpoint complete.': kill -9 it"));
            self.kill_points += 1;
        }
        let exit = taker.wait(RUN_LIMIT);
        self.log.note(format!("new owner ended: exit {:?}, signal {:?}", exit.code(), exit.signal()));
        self.taken_over = Some(match (exit.code(), exit.signal()) {
            (Some(0), _) if finished_input(&exit) => Ended::Finished,
            (None, Some(9)) => Ended::Interrupted,
            (code, signal) => {
                return Err(format!("the new owner ended with exit {code:?} signal {signal:?}:\n{}", exit.tail(12)));
            }
        });
        Ok(())
    }

    fn release(&mut self, proc: &mut Proc, net: Option<&NetPath>, hold: bool) {
        match net.filter(|_| hold) {
            Some(p) => {
                p.proxy.set(super::proxy::Mode::Pass);
                self.log.note("the proxy delivers the stale owner's held bytes");
            }
            None => {
                proc.signal("CONT");
                self.log.note("kill -CONT the stale owner");
            }
        }
    }
}

/// What a stale owner's failure says: its ownership of the checkpoint
/// storage lost, or its transactional producers fenced by the new owner's.
const STALE_ENDINGS: [&str; 4] = [
    "lost its ownership",
    "Lost the ownership of the checkpoint storage",
    "does not own the checkpoint storage",
    "fenced by a newer instance",
];

/// A run's path to S3 through a proxy, and the thread cutting its
/// connections (stopped when dropped).
pub struct NetPath {
    pub proxy: std::sync::Arc<super::proxy::Proxy>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl NetPath {
    fn start(endpoint: &str, fault: Option<NetFault>) -> NetPath {
        let proxy = std::sync::Arc::new(super::proxy::Proxy::start(endpoint));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        match fault {
            Some(NetFault::Latency { ms }) => proxy.set(super::proxy::Mode::Latency(Duration::from_millis(ms))),
            Some(NetFault::Cuts { after_ms, every_ms }) => {
                let (p, stop) = (proxy.clone(), stop.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(after_ms));
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        p.cut();
                        std::thread::sleep(Duration::from_millis(every_ms));
                    }
                });
            }
            None => {}
        }
        NetPath { proxy, stop }
    }
}

impl Drop for NetPath {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Did the run fail because the broker did not answer (a clear error naming
/// the broker or a Kafka timeout), as it may after an outage?
fn failed_on_the_broker(stderr: &str) -> bool {
    let error = stderr.lines().rev().find(|l| l.starts_with("error:")).unwrap_or("");
    ["broker", "Timed out", "timed out"].iter().any(|w| error.contains(w))
}

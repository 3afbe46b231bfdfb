//! Cluster cases: one pipeline as 2–3 weir processes (`--instance I/N`)
//! handing records over through repartition topics, drawn from a seed:
//! Kafka source → dedup by id → count and sum per user (running, or in
//! event-time tumbling windows) → exactly-once Kafka sink, two hash edges.
//! While input is produced in batches, instances are killed (kill -9, or a
//! crash at a protocol point) and restarted (with checkpoints on S3, on a
//! new machine: their state directory gone), and the cluster is rescaled
//! N → M through a stop-with-savepoint set. The oracle is computed from the
//! input alone; the committed output must equal it.
//!
//!     CHAOS_CLUSTER_SECONDS=600 cargo test --release --test chaos -- --nocapture cluster_chaos
//!
//! Needs `KAFKA_BOOTSTRAP` (skipped without); CHAOS_SEED as for `chaos`;
//! CHAOS_CLUSTER_SECONDS: time budget (default 150), CHAOS_CLUSTER_CASES,
//! CHAOS_CLUSTER_STEPS: the most kill or rescale steps per case (default 6).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::kafka;
use super::proc::{Cmd, Log, Proc};
use super::rng::Rng;

const PARTITIONS: usize = 4;
const WINDOW_MS: i64 = 1000;
/// Event time of order 0; order `id` is `id * 7` ms later.
const T0: i64 = 1_760_000_000_000;

/// What one case draws.
#[derive(Debug, Clone)]
struct Draw {
    instances: u32,
    parallelism: u32,
    windowed: bool,
    /// Checkpoints on S3 (`checkpoint.storage`), else in the state directory.
    s3: bool,
    steps: Vec<Step>,
}

#[derive(Debug, Clone)]
enum Step {
    /// Produce the next `n` orders.
    Produce { n: usize },
    /// kill -9 instance `i` (or let it crash at `crash`), restart it with
    /// `--restore latest`, on a new machine if `new_machine`.
    Kill { instance: u32, after_ms: u64, new_machine: bool, crash: Option<&'static str> },
    /// Stop every instance with a savepoint (one command), start `to` instances from the set.
    Rescale { to: u32 },
}

impl Draw {
    fn new(rng: &mut Rng, s3: bool) -> Draw {
        let instances = rng.range(2, 3) as u32;
        let mut steps = vec![Step::Produce { n: rng.range(100, 300) as usize }];
        let mut n = instances;
        for _ in 0..rng.range(3, max_steps().max(3)) {
            steps.push(match rng.range(0, 9) {
                0..=5 => {
                    let crash =
                        rng.chance(0.3).then(|| *rng.pick(&["after_prepare", "after_manifest", "after_metadata", "before_sink_commit"]));
                    Step::Kill {
                        instance: rng.range(0, n as u64 - 1) as u32,
                        after_ms: rng.range(100, 1500),
                        new_machine: s3 && rng.chance(0.4),
                        crash,
                    }
                }
                _ => {
                    n = if n == 2 { 3 } else { 2 };
                    Step::Rescale { to: n }
                }
            });
            steps.push(Step::Produce { n: rng.range(100, 300) as usize });
        }
        Draw { instances, parallelism: rng.range(1, 2) as u32, windowed: rng.chance(0.5), s3, steps }
    }
}

/// The most kill or rescale steps a case draws (CHAOS_CLUSTER_STEPS,
/// default 6): long runs raise it to spend less of their time on each
/// case's setup and final check per instance kill point.
fn max_steps() -> u64 {
    env_u64("CHAOS_CLUSTER_STEPS").unwrap_or(6)
}

/// One order: `(partition, line)`; every third one also goes to the next
/// partition (a redelivery only the dedup by id removes), its event time
/// in order within each partition, so no record is ever late.
fn orders(ids: std::ops::Range<i64>) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for id in ids {
        let line = format!(r#"{{"id":{id},"user":"u{}","amount":{},"ts":{}}}"#, (id * 7) % 11, id % 13, T0 + id * 7);
        if id % 3 == 0 {
            out.push((((id + 1) as usize) % PARTITIONS, line.clone()));
        }
        out.push(((id as usize) % PARTITIONS, line));
    }
    out
}

fn by_partition(orders: &[(usize, String)]) -> Vec<Vec<String>> {
    let mut parts = vec![Vec::new(); PARTITIONS];
    for (p, l) in orders {
        parts[*p].push(l.clone());
    }
    parts
}

/// The oracle: per user (running) or per user and window, the count and
/// sum of the distinct orders `0..n` (the flush records at the end pass
/// every window of them).
fn expected(n: i64, windowed: bool) -> BTreeMap<(String, i64), (i64, i64)> {
    let mut out: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    for id in 0..n {
        let ts = T0 + id * 7;
        let window = if windowed { ts - ts.rem_euclid(WINDOW_MS) } else { 0 };
        let e = out.entry((format!("u{}", (id * 7) % 11), window)).or_default();
        e.0 += 1;
        e.1 += id % 13;
    }
    out
}

/// What the committed output says, and its duplicates: running: the last
/// value per user (in commit order); windowed: every window result, a
/// window emitted twice counted.
fn observed(lines: &[String], windowed: bool) -> Result<(BTreeMap<(String, i64), (i64, i64)>, usize), String> {
    let mut out = BTreeMap::new();
    let mut doubled = 0;
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).map_err(|e| format!("output line {l}: {e}"))?;
        let user = v["user"].as_str().ok_or_else(|| format!("no user in {l}"))?.to_string();
        let window = if windowed { v["window_start"].as_i64().ok_or_else(|| format!("no window_start in {l}"))? } else { 0 };
        let value = (v["n"].as_i64().unwrap_or(-1), v["total"].as_i64().unwrap_or(-1));
        if out.insert((user, window), value).is_some() && windowed {
            doubled += 1;
        }
    }
    Ok((out, doubled))
}

pub struct ClusterCase {
    seed: u64,
    dir: PathBuf,
    draw: Draw,
    brokers: String,
    input: String,
    output: String,
    name: String,
    /// The cluster's version: a rescale starts a new one (own state and prefix).
    version: u32,
    instances: Vec<Option<Proc>>,
    /// Per instance of the current version, its machine (a new one: a new state directory).
    machines: Vec<u32>,
    storage: Option<String>,
    produced: i64,
    log: Log,
    pub kill_points: usize,
    pub rescales: usize,
    pub new_machines: usize,
    pub records: usize,
    pub lost: usize,
    pub doubled: usize,
}

impl ClusterCase {
    fn new(seed: u64, root: &Path, brokers: String) -> Result<ClusterCase, String> {
        let mut rng = Rng::new(seed ^ 0x636C_7573);
        let storage = super::s3::endpoint().filter(|_| rng.chance(0.5)).map(|_| super::s3::case_url(seed));
        let draw = Draw::new(&mut rng, storage.is_some());
        let dir = root.join(format!("cluster-{seed}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let input = kafka::create_named_topic(&brokers, &format!("weir-chaosc-{seed}-in"), PARTITIONS as i32)?;
        let output = kafka::create_named_topic(&brokers, &format!("weir-chaosc-{seed}-out"), 3)?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() % 1_000_000_000);
        let n = draw.instances as usize;
        Ok(ClusterCase {
            seed,
            dir,
            brokers,
            input,
            output,
            name: format!("chaosc-{seed}-{nanos}"),
            version: 0,
            instances: (0..n).map(|_| None).collect(),
            machines: vec![0; n],
            storage,
            produced: 0,
            log: Log::default(),
            draw,
            kill_points: 0,
            rescales: 0,
            new_machines: 0,
            records: 0,
            lost: 0,
            doubled: 0,
        })
    }

    fn summary(&self) -> String {
        let d = &self.draw;
        format!(
            "{} instances p={} {} {}; steps {:?}",
            d.instances,
            d.parallelism,
            if d.windowed { "tumbling 1s event time" } else { "running" },
            if d.s3 { "checkpoints on S3" } else { "local checkpoints" },
            d.steps
        )
    }

    /// The pipeline file of the current version, for `n` instances.
    fn pipeline(&self, n: u32) -> Result<PathBuf, String> {
        let state = self.dir.join(format!("v{}", self.version));
        let (event_time, window) = match self.draw.windowed {
            true => (", event_time: {field: ts, max_out_of_orderness: 1s}", format!("    window: {{type: tumbling, size: {WINDOW_MS}ms}}")),
            false => ("", "    emit_interval: 100ms".to_string()),
        };
        let storage = match &self.storage {
            Some(url) => format!(", storage: {url}/v{}, storage_lease: 2s", self.version),
            None => String::new(),
        };
        let lines = [
            format!("name: {}", self.name),
            format!("parallelism: {}", self.draw.parallelism),
            "max_parallelism: 12".to_string(),
            // The machine is per instance: `${WEIR_MACHINE}` from its environment.
            format!("state: {{dir: {}/m${{WEIR_MACHINE}}}}", state.display()),
            format!("checkpoint: {{interval: 250ms{storage}}}"),
            format!("cluster: {{instances: {n}, index: 0}}"),
            "sources:".to_string(),
            format!(
                "  - {{name: orders, type: kafka, brokers: {}, topics: [{}], broker_timeout: 20s{event_time}}}",
                self.brokers, self.input
            ),
            "operators:".to_string(),
            "  - {name: unique, type: dedup, input: orders, key: [id]}".to_string(),
            "  - name: per_user".to_string(),
            "    type: aggregate".to_string(),
            "    input: unique".to_string(),
            "    key: [user]".to_string(),
            window,
            "    aggregates: [{fn: count, as: n}, {fn: sum, field: amount, as: total}]".to_string(),
            "sinks:".to_string(),
            format!(
                "  - {{name: out, type: kafka, input: per_user, brokers: {}, topic: {}, key: [user], delivery: exactly_once}}",
                self.brokers, self.output
            ),
        ];
        let yaml = lines.join("\n") + "\n";
        let path = self.dir.join(format!("pipeline-v{}-n{n}.yaml", self.version));
        std::fs::write(&path, yaml).map_err(|e| e.to_string())?;
        Ok(path)
    }

    fn start(&mut self, i: u32, restore: &[String]) -> Result<(), String> {
        let n = self.instances.len() as u32;
        let p = self.pipeline(n)?;
        let mut cmd = Cmd::weir(&["run", &p.display().to_string(), "--no-progress", "--instance", &format!("{i}/{n}")])
            .env("WEIR_MACHINE", self.machines[i as usize].to_string());
        for r in restore {
            cmd = cmd.arg("--restore").arg(r);
        }
        // A start whose own 2 s lease ran out before its generation record
        // landed (a starved process on a loaded machine, seed 1000014) is
        // refused by weir, rightly; the pod would be restarted: so is it.
        for attempt in 1.. {
            let mut proc = cmd.spawn(&self.log);
            if proc.wait_log("Pipeline started.", Duration::from_secs(60)) {
                self.instances[i as usize] = Some(proc);
                return Ok(());
            }
            let exit = proc.wait(Duration::from_secs(10));
            let lapsed = exit.stderr.contains("too late to count") || exit.stderr.contains("does not own the checkpoint storage now");
            if lapsed && attempt < 3 {
                self.log.note(format!("instance {i}: its lease lapsed during the start; started again"));
                continue;
            }
            return Err(format!("instance {i}/{n} did not start: exit {:?} signal {:?}\n{}", exit.code(), exit.signal(), exit.tail(12)));
        }
        unreachable!("the loop returns")
    }

    fn produce(&mut self, n: usize) -> Result<(), String> {
        let batch = orders(self.produced..self.produced + n as i64);
        self.log.note(format!("produce orders {}..{}", self.produced, self.produced + n as i64));
        kafka::produce(&self.brokers, &self.input, &by_partition(&batch))?;
        self.produced += n as i64;
        Ok(())
    }

    fn step(&mut self, step: &Step) -> Result<(), String> {
        match *step {
            Step::Produce { n } => self.produce(n)?,
            Step::Kill { instance, after_ms, new_machine, crash } => {
                let i = instance as usize % self.instances.len();
                let Some(mut proc) = self.instances[i].take() else { return Err(format!("instance {i} is not running")) };
                std::thread::sleep(Duration::from_millis(after_ms));
                match crash {
                    // A crash point needs a restart with the fault: kill, then let the next run crash there.
                    Some(point) => {
                        proc.signal("KILL");
                        let _ = proc.wait(Duration::from_secs(30));
                        self.log.note(format!("instance {i}: kill -9, restart with crash={point}:1"));
                        // Input for it to commit: a crash point in a commit
                        // is reached only when a transaction has records
                        // (seed 1000021 ran 60 s on an empty one).
                        self.produce(60)?;
                        self.restart_with_crash(i as u32, point)?;
                    }
                    None => {
                        if !proc.signal("KILL") {
                            let exit = proc.wait(Duration::from_secs(5));
                            return Err(format!("instance {i} had exited before its kill: {:?}\n{}", exit.code(), exit.tail(12)));
                        }
                        let _ = proc.wait(Duration::from_secs(30));
                        self.log.note(format!("instance {i}: kill -9 after {after_ms} ms"));
                    }
                }
                self.kill_points += 1;
                if new_machine {
                    self.machines[i] += 1;
                    self.new_machines += 1;
                    self.log.note(format!("instance {i}: restarts on new machine {}", self.machines[i]));
                }
                self.start(i as u32, &["latest".to_string()])?;
            }
            Step::Rescale { to } => self.rescale(to)?,
        }
        Ok(())
    }

    /// Restart instance `i` with a crash at `point` on its first
    /// checkpoint, and wait for that crash (or its own end).
    fn restart_with_crash(&mut self, i: u32, point: &str) -> Result<(), String> {
        let n = self.instances.len() as u32;
        let p = self.pipeline(n)?;
        let cmd = Cmd::weir(&["run", &p.display().to_string(), "--no-progress", "--instance", &format!("{i}/{n}"), "--restore", "latest"])
            .env("WEIR_MACHINE", self.machines[i as usize].to_string())
            .env("WEIR_FAULTS", format!("crash={point}:1"));
        let exit = cmd.run(&self.log, Duration::from_secs(60));
        match (exit.code(), exit.signal()) {
            (None, Some(6)) if exit.stderr.contains("injected crash at") => {
                self.kill_points += 1;
                Ok(())
            }
            _ => {
                Err(format!("instance {i}: a restart with crash={point}:1 ended with {:?}/{:?}\n{}", exit.code(), exit.signal(), exit.tail(12)))
            }
        }
    }

    /// Stop every instance with a savepoint (one command for all), then
    /// start `to` instances of a new version from the whole set.
    fn rescale(&mut self, to: u32) -> Result<(), String> {
        let n = self.instances.len() as u32;
        let p = self.pipeline(n)?;
        let target = self.dir.join(format!("set-{}", self.version));
        let cmd = Cmd::weir(&["savepoint", "trigger", &p.display().to_string(), "--all-instances", "--stop", "--timeout", "30s"])
            .arg("--target")
            .arg(target.display().to_string())
            .env("WEIR_MACHINE", "0");
        // Every instance's control socket is under its own machine's state directory.
        if self.machines.iter().any(|&m| m != 0) {
            return self.rescale_one_by_one(to, &p, &target);
        }
        let exit = cmd.run(&self.log, Duration::from_secs(90));
        if exit.code() != Some(0) {
            return Err(format!("savepoint trigger --all-instances --stop: exit {:?}\n{}\n{}", exit.code(), exit.stdout, exit.tail(12)));
        }
        let set: Vec<String> =
            exit.stdout.lines().filter_map(|l| l.split_once("Savepoint completed. Path: ").map(|(_, p)| p.trim().to_string())).collect();
        self.finish_rescale(to, set)
    }

    /// The same, one instance at a time (their machines differ).
    fn rescale_one_by_one(&mut self, to: u32, p: &Path, target: &Path) -> Result<(), String> {
        let n = self.instances.len() as u32;
        let mut set = Vec::new();
        for i in 0..n {
            let cmd = Cmd::weir(&["savepoint", "trigger", &p.display().to_string(), "--instance", &format!("{i}/{n}"), "--stop"])
                .arg("--timeout")
                .arg("30s")
                .arg("--target")
                .arg(target.display().to_string())
                .env("WEIR_MACHINE", self.machines[i as usize].to_string());
            let exit = cmd.run(&self.log, Duration::from_secs(60));
            let path = exit.stdout.lines().find_map(|l| l.strip_prefix("Savepoint completed. Path: ")).map(|s| s.trim().to_string());
            match (exit.code(), path) {
                (Some(0), Some(path)) => set.push(path),
                _ => return Err(format!("instance {i}: savepoint trigger --stop: exit {:?}\n{}", exit.code(), exit.tail(12))),
            }
        }
        self.finish_rescale(to, set)
    }

    fn finish_rescale(&mut self, to: u32, set: Vec<String>) -> Result<(), String> {
        let n = self.instances.len();
        if set.len() != n {
            return Err(format!("a savepoint set of {} for {n} instances: {set:?}", set.len()));
        }
        for (i, slot) in self.instances.iter_mut().enumerate() {
            if let Some(proc) = slot.take() {
                let exit = proc.wait(Duration::from_secs(60));
                if exit.code() != Some(0) {
                    return Err(format!(
                        "instance {i} stopped with a savepoint exited {:?} signal {:?} (timed out: {})\n{}",
                        exit.code(),
                        exit.signal(),
                        exit.timed_out,
                        exit.tail(12)
                    ));
                }
            }
        }
        self.log.note(format!("rescale {n} -> {to} from {set:?}"));
        self.version += 1;
        self.rescales += 1;
        self.instances = (0..to).map(|_| None).collect();
        self.machines = vec![0; to as usize];
        for i in 0..to {
            self.start(i, &set)?;
        }
        Ok(())
    }

    /// Produce the flush records (windowed: the watermark passes every
    /// window of the orders), then wait until the output is the oracle.
    fn finish(&mut self) -> Result<(), String> {
        if self.draw.windowed {
            // Far ahead in event time, ids no order has: their own windows never fire.
            let flush: Vec<Vec<String>> = (0..PARTITIONS)
                .map(|p| vec![format!(r#"{{"id":-{},"user":"flush","amount":0,"ts":{}}}"#, p + 1, T0 + self.produced * 7 + 3_600_000)])
                .collect();
            kafka::produce(&self.brokers, &self.input, &flush)?;
        }
        let want = expected(self.produced, self.draw.windowed);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let lines = kafka::read_committed(&self.brokers, &self.output, Duration::from_secs(60))?;
            let (got, doubled) = observed(&lines, self.draw.windowed)?;
            if got == want || Instant::now() > deadline {
                self.records = want.len();
                self.doubled = doubled + got.iter().filter(|(k, v)| want.get(*k).is_some_and(|w| v.0 > w.0)).count();
                self.lost = want.iter().filter(|(k, w)| got.get(*k).is_none_or(|v| v.0 < w.0)).count();
                let foreign: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
                if got == want && doubled == 0 {
                    return Ok(());
                }
                return Err(format!(
                    "output is not the oracle after 120 s: {} keys of {}, {} lost, {} doubled, foreign {foreign:?}\nfirst differences: {:?}",
                    got.len(),
                    want.len(),
                    self.lost,
                    self.doubled,
                    want.iter().filter(|(k, w)| got.get(*k) != Some(w)).take(5).map(|(k, w)| (k, w, got.get(k))).collect::<Vec<_>>()
                ));
            }
            for (i, p) in self.instances.iter_mut().enumerate() {
                if let Some(proc) = p {
                    if proc.exited() {
                        let exit = p.take().unwrap().wait(Duration::from_secs(5));
                        return Err(format!("instance {i} exited before the output was complete: {:?}\n{}", exit.code(), exit.tail(12)));
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub fn run(&mut self) -> Result<(), String> {
        self.log.note(format!("cluster case seed {}: {}", self.seed, self.summary()));
        for i in 0..self.instances.len() as u32 {
            self.start(i, &[])?;
        }
        for step in self.draw.steps.clone() {
            self.step(&step)?;
        }
        self.finish()
    }

    fn stop_all(&mut self) {
        for p in self.instances.iter_mut().filter_map(Option::take) {
            let mut p = p;
            p.signal("KILL");
            let _ = p.wait(Duration::from_secs(10));
        }
    }
}

impl Drop for ClusterCase {
    fn drop(&mut self) {
        self.stop_all();
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn cluster_chaos() {
    let Some(brokers) = kafka::broker() else {
        eprintln!("cluster_chaos: skipped: no KAFKA_BOOTSTRAP");
        return;
    };
    let first = env_u64("CHAOS_SEED").unwrap_or(1);
    let max_cases = env_u64("CHAOS_CLUSTER_CASES").unwrap_or(u64::MAX);
    let budget = Duration::from_secs(env_u64("CHAOS_CLUSTER_SECONDS").unwrap_or(150));
    let root = std::env::var_os("CHAOS_DIR").map(Into::into).unwrap_or_else(|| std::env::temp_dir().join("weir-chaos"));
    let started = Instant::now();
    let (mut cases, mut kills, mut rescales, mut machines, mut records, mut lost, mut doubled) = (0, 0, 0, 0, 0, 0, 0);
    let mut failures = Vec::new();
    let mut seed = first;
    while seed - first < max_cases && (seed == first || started.elapsed() < budget) {
        let t = Instant::now();
        let mut case = match ClusterCase::new(seed, &root, brokers.clone()) {
            Ok(c) => c,
            Err(e) => panic!("cluster case seed {seed}: setup: {e}"),
        };
        let result = case.run();
        case.stop_all();
        cases += 1;
        kills += case.kill_points;
        rescales += case.rescales;
        machines += case.new_machines;
        records += case.records;
        lost += case.lost;
        doubled += case.doubled;
        let verdict = match &result {
            Ok(()) => {
                let _ = std::fs::remove_dir_all(&case.dir);
                "ok".to_string()
            }
            Err(e) => {
                let repro = case.dir.join("REPRODUCE.md");
                let text = format!(
                    "# Cluster case seed {seed}\n\n{}\n\n## Failure\n\n```\n{e}\n```\n\n## Commands\n\n```\n{}\n```\n",
                    case.summary(),
                    case.log.lines().join("\n")
                );
                let _ = std::fs::write(&repro, text);
                failures.push(format!("seed {seed}: {}\n    reproduction: {}", e.lines().next().unwrap_or(""), repro.display()));
                format!("FAILED: {}", e.lines().next().unwrap_or(""))
            }
        };
        eprintln!(
            "cluster seed {seed}: {} instance kill points, {} rescales, {} new machines, {:.1} s: {verdict}\n    {}",
            case.kill_points,
            case.rescales,
            case.new_machines,
            t.elapsed().as_secs_f64(),
            case.summary()
        );
        seed += 1;
    }
    let table = format!(
        "| cluster chaos | seeds {first}..{} |\n|---|---|\n| time | {:.0} s |\n| cases | {cases} |\n| instance kill points | {kills} |\n| rescales through savepoint sets | {rescales} |\n| restarts on a new machine | {machines} |\n| keys checked | {records} |\n| lost | {lost} |\n| doubled | {doubled} |\n| failures | {} |\n{}",
        seed - 1,
        started.elapsed().as_secs_f64(),
        failures.len(),
        failures.join("\n")
    );
    eprintln!("\n{table}");
    if let Some(path) = std::env::var_os("CHAOS_CLUSTER_REPORT") {
        let _ = std::fs::write(path, &table);
    }
    assert!(failures.is_empty(), "{} of {cases} cluster cases failed:\n{table}", failures.len());
}

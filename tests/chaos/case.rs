//! One case: draw a shape, its input and its fault schedule from the seed,
//! run the fault loop until a run finishes the bounded input, then check
//! everything published against the oracle. A failing case keeps its
//! directory with a reproduction (REPRODUCE.md, commands.sh).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::check::{read_in_commit_order, Findings};
use super::edits;
use super::faults::{self, Attempt};
use super::input::{self, SourceInput};
use super::oracle::{self, Expected};
use super::proc::Log;
use super::rng::Rng;
use super::run::{Ended, Start};
use super::shape::{dead_letter_rel, sink_rel, Shape, SinkKind, SourceKind, Topic};
use super::stats::{Timing, CHECK, REPRO, SETUP};

/// Clean runs allowed after the faulty ones for the input to be finished.
const CLEAN_RUNS: usize = 3;

pub struct Case {
    pub seed: u64,
    pub dir: PathBuf,
    pub shape: Shape,
    pub version: usize,
    pub log: Log,
    inputs: BTreeMap<String, SourceInput>,
    /// Every node's output over the whole input, of every version of the shape.
    expected: BTreeMap<String, Expected>,
    /// An operator was removed: every later restore passes
    /// `--allow-non-restored-state` (an older checkpoint may still hold it).
    pub dropped_state: bool,
    /// The current run's `--allow-non-restored-state`.
    pub run_allows_dropping: bool,
    /// Sinks changed by an edit, with every input they ever had.
    touched: BTreeMap<String, BTreeSet<String>>,
    pub kill_points: usize,
    /// A kill -9 was sent to the current run (a kill point if it died of it).
    pub killed: bool,
    /// Runs whose drawn stall was injected ("Injected stall." in the log).
    pub stalls_fired: usize,
    /// In-process restarts (`restart:`) the runs logged.
    pub restarts_fired: usize,
    pub refused: usize,
    pub savepoints: usize,
    /// Savepoints created in the case's `--target` parent, to check each is new.
    pub targeted: Vec<PathBuf>,
    pub edits: usize,
    pub runs: usize,
    pub faults: Vec<String>,
    pub findings: Findings,
    pub failure: Option<String>,
    pub timing: Timing,
    /// `checkpoint.storage` on the test S3 server (None: local checkpoints).
    pub storage: Option<String>,
    /// The machine the runs are on: each has a state directory of its own.
    pub machine: u32,
    /// Runs that took over from a stale owner, and stale owners that ended.
    pub takeovers: usize,
    /// How the run that took over from the current (stale) one ended.
    pub taken_over: Option<Ended>,
    /// The parallelism of the current run, and of the run that took over
    /// from it: the latest checkpoint is the taker's.
    pub run_parallelism: u32,
    pub taker_parallelism: Option<u32>,
}

impl Case {
    pub fn new(seed: u64, root: &Path) -> Case {
        let setup = std::time::Instant::now();
        let dir = root.join(format!("seed-{seed}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = Rng::new(seed);
        let mut shape = Shape::draw(&mut rng, seed);
        let inputs = input::generate(&shape, &mut rng, &dir);
        // Its own dice, so a case is the same shape with or without a broker.
        let mut krng = Rng::new(seed ^ 0x6B61_666B_61);
        if let Some(b) = super::kafka::broker().filter(|_| krng.chance(0.5)) {
            let topic =
                super::kafka::create_topic(&b, seed, krng.range(1, 3) as i32).unwrap_or_else(|e| panic!("KAFKA_BOOTSTRAP={b}: {e}"));
            shape.add_kafka_sink(&mut krng, b, topic);
        }
        // A PostgreSQL sink, on dice of its own (older seeds draw as before).
        let mut prng = Rng::new(seed ^ 0x7067_7067);
        if let Some(url) = super::postgres::server().filter(|_| prng.chance(0.4)) {
            if let Some((node, upsert)) = shape.postgres_target(&mut prng) {
                let table = super::postgres::create_table(&url, seed, upsert).unwrap_or_else(|e| panic!("WEIR_PG_URL={url}: {e}"));
                shape.add_postgres_sink(&mut prng, node, upsert, url, table);
            }
        }
        // A file source read through Kafka: its files produced into a topic,
        // one partition per file.
        let files = shape.file_sources();
        if let Some(b) = super::kafka::broker().filter(|_| !files.is_empty() && krng.chance(0.5)) {
            let name = krng.pick(&files).clone();
            let SourceKind::File { files: n, .. } = shape.sources.iter().find(|s| s.name == name).unwrap().kind else { unreachable!() };
            let topic = super::kafka::create_named_topic(&b, &format!("weir-chaos-{seed}-{name}"), n as i32)
                .unwrap_or_else(|e| panic!("KAFKA_BOOTSTRAP={b}: {e}"));
            super::kafka::produce(&b, &topic, &file_lines(&dir, &name, n)).unwrap_or_else(|e| panic!("KAFKA_BOOTSTRAP={b}: {e}"));
            shape.sources.iter_mut().find(|s| s.name == name).unwrap().via_kafka = Some(Topic { brokers: b, topic });
        }
        let expected = oracle::expected(&shape, &inputs);
        let mut case = Case {
            seed,
            dir,
            shape,
            version: 0,
            log: Log::default(),
            inputs,
            expected,
            touched: BTreeMap::new(),
            dropped_state: false,
            run_allows_dropping: false,
            kill_points: 0,
            killed: false,
            stalls_fired: 0,
            restarts_fired: 0,
            refused: 0,
            savepoints: 0,
            targeted: Vec::new(),
            edits: 0,
            runs: 0,
            faults: Vec::new(),
            findings: Findings::default(),
            failure: None,
            timing: Timing::default(),
            storage: None,
            machine: 0,
            takeovers: 0,
            taken_over: None,
            run_parallelism: 0,
            taker_parallelism: None,
        };
        // Its own dice too: checkpoints on the test S3 server, if there is one.
        if super::s3::endpoint().is_some() && Rng::new(seed ^ 0x5333_5333).chance(0.5) {
            case.storage = Some(super::s3::case_url(seed));
        }
        case.install(case.shape.clone());
        case.timing.add(SETUP, setup.elapsed());
        case
    }

    /// The state directory of the current machine.
    pub fn state_dir(&self) -> PathBuf {
        match self.machine {
            0 => self.dir.join("state"),
            m => self.dir.join(format!("state-m{m}")),
        }
    }

    /// Move the runs to a new machine: a new, empty state directory.
    pub fn new_machine(&mut self) {
        self.machine += 1;
        self.log.note(format!("new machine: state directory {}", self.state_dir().display()));
    }

    pub fn yaml_path(&self) -> PathBuf {
        self.dir.join(format!("pipeline-v{}.yaml", self.version))
    }

    /// Make `shape` the current one, in a new pipeline file.
    fn install(&mut self, shape: Shape) {
        self.version += 1;
        self.shape = shape;
        std::fs::write(self.yaml_path(), self.shape.yaml(&self.dir)).unwrap();
        for (name, e) in oracle::expected(&self.shape, &self.inputs) {
            self.expected.entry(name).or_insert(e);
        }
    }

    /// Run the schedule, then check. Leaves `failure` set if anything is wrong.
    pub fn run(&mut self) {
        let mut rng = Rng::new(self.seed.wrapping_mul(31).wrapping_add(7));
        let mut schedule = faults::draw(&mut rng, &self.shape);
        if self.shape.uses_kafka() && super::kafka::broker_pid().is_some() {
            faults::add_outages(&mut Rng::new(self.seed ^ 0x6F75_7461_6765), &mut schedule);
        }
        if self.shape.sources.iter().any(|s| s.via_kafka.is_some()) {
            faults::add_recreations(&mut Rng::new(self.seed ^ 0x7265_6372_6561_7465), &mut schedule);
        }
        if self.storage.is_some() {
            faults::add_machines(&mut Rng::new(self.seed ^ 0x6D61_6368_696E_65), &mut schedule);
        }
        self.log.note(format!("shape: {}", self.shape.summary()));
        if let Some(url) = &self.storage {
            self.log.note(format!("checkpoints on S3: {url}"));
        }
        let mut start = Start::Fresh;
        let mut finished = false;
        let all = schedule.into_iter().chain(std::iter::repeat_with(Attempt::clean).take(CLEAN_RUNS));
        for (n, a) in all.enumerate() {
            match self.attempt(n, &a, &start, &mut rng) {
                Ok(Some(next)) => start = next,
                Ok(None) => {
                    finished = true;
                    break;
                }
                Err(e) => {
                    self.failure = Some(e);
                    break;
                }
            }
        }
        if self.failure.is_none() && !finished {
            self.failure = Some(format!("the input was not finished after {} runs", self.runs));
        }
        if self.failure.is_none() {
            let t = std::time::Instant::now();
            self.check();
            self.timing.add(CHECK, t.elapsed());
        }
        if self.failure.is_some() || std::env::var_os("CHAOS_KEEP").is_some() {
            let t = std::time::Instant::now();
            self.write_reproduction();
            self.timing.add(REPRO, t.elapsed());
        }
    }

    /// One scheduled run, with its edit and rescale: the next start, or None when finished.
    fn attempt(&mut self, n: usize, a: &Attempt, start: &Start, rng: &mut Rng) -> Result<Option<Start>, String> {
        let restoring = !matches!(start, Start::Fresh);
        if a.new_machine && matches!(start, Start::Latest) {
            self.new_machine();
        }
        if a.consume && restoring {
            self.consume_parts();
        }
        if a.recreate_topic && restoring {
            let t = std::time::Instant::now();
            let recreated = self.recreate_source_topics();
            self.timing.add(SETUP, t.elapsed());
            recreated?;
        }
        let previous = self.shape.clone();
        let mut edit = None;
        if let (Some(kind), true) = (&a.edit, restoring) {
            if let Some(e) = edits::apply(kind, &self.shape, rng, n) {
                self.log.note(format!("edit: {}", e.what));
                self.install(e.shape.clone());
                // Only a restore that has state to drop must be refused: a
                // run killed before its first checkpoint leaves none.
                if let Some(op) = e.removed.as_ref().filter(|op| self.restores_state_of(start, op)) {
                    let cmd = self.command(start, self.shape.parallelism, false);
                    let t = std::time::Instant::now();
                    let refused = self.expect_refused(cmd, &format!("operator {op} removed, restore without --allow-non-restored-state"));
                    self.timing.add(super::stats::REFUSED, t.elapsed());
                    refused?;
                }
                edit = Some(e);
            }
        }
        let parallelism = match a.rescale {
            Some(p) if restoring => p,
            _ => self.shape.parallelism,
        };
        self.runs += 1;
        self.faults.extend(a.kinds());
        let allow = self.dropped_state || edit.as_ref().is_some_and(|e| e.removed.is_some());
        let may_refuse = edit.is_some() || parallelism != self.shape.parallelism;
        let ended = self.run_once(n, a, start, parallelism, allow, may_refuse);
        let accepted = !matches!(ended, Ended::Refused(_) | Ended::Failed(_));
        if let Some(e) = &edit {
            if accepted {
                self.edits += 1;
                self.dropped_state |= e.removed.is_some();
                for sink in &e.touched {
                    let inputs = self.touched.entry(sink.clone()).or_default();
                    if let Some(old) = previous.sinks.iter().find(|k| k.name == *sink) {
                        inputs.insert(old.input.clone());
                    }
                    inputs.insert(self.shape.sinks.iter().find(|k| k.name == *sink).unwrap().input.clone());
                }
            } else {
                self.log.note("edit refused: back to the previous pipeline file");
                self.install(previous);
            }
        }
        if accepted {
            self.shape.parallelism = self.taker_parallelism.take().unwrap_or(parallelism);
        }
        match ended {
            Ended::Finished => Ok(None),
            Ended::Interrupted => Ok(Some(Start::Latest)),
            Ended::Stopped(sp) => Ok(Some(Start::Savepoint(sp))),
            Ended::Refused(why) => {
                self.log.note(format!("refused: {why}"));
                Ok(Some(start.clone()))
            }
            Ended::Failed(e) => Err(e),
        }
    }

    fn check(&mut self) {
        let eo = self.shape.exactly_once();
        let mut f = Findings::default();
        for sink in self.shape.checked_sinks() {
            let lines = match &sink.kind {
                SinkKind::Kafka { brokers, topic } => match super::kafka::read_committed(brokers, topic, Duration::from_secs(90)) {
                    Ok(lines) => lines,
                    Err(e) => {
                        f.problems.push(format!("sink {}: {e}", sink.name));
                        continue;
                    }
                },
                SinkKind::Postgres { url, table, .. } => {
                    match super::postgres::prepared(url, &self.shape.name) {
                        Ok(left) if left.is_empty() => {}
                        Ok(left) => f.problems.push(format!("sink {}: left prepared: {left:?}", sink.name)),
                        Err(e) => f.problems.push(format!("sink {}: {e}", sink.name)),
                    }
                    match super::postgres::read(url, table) {
                        Ok(lines) => lines,
                        Err(e) => {
                            f.problems.push(format!("sink {}: {e}", sink.name));
                            continue;
                        }
                    }
                }
                _ => read_in_commit_order(&self.dir.join(sink_rel(&sink.name)), &self.dir.join("consumed").join(&sink.name)),
            };
            let what = format!("sink {} (reads {})", sink.name, sink.input);
            // Part names sort in commit order; a Kafka topic has no order across partitions.
            let ordered = eo && sink.kind == SinkKind::File;
            match self.touched.get(&sink.name) {
                None => f.exact(&what, &lines, &self.expected[&sink.input], eo, ordered),
                Some(inputs) => {
                    let allowed: Vec<&Expected> = inputs.iter().map(|i| &self.expected[i]).collect();
                    f.subset(&what, &lines, &allowed, eo);
                }
            }
        }
        for s in &self.shape.sources {
            if let SourceKind::File { bad, .. } = s.kind {
                if bad > 0 {
                    f.dead_letter(&s.name, &self.dir.join(dead_letter_rel(&s.name)), &self.inputs[&s.name].bad, eo);
                }
            }
        }
        let sink_dirs: Vec<PathBuf> = self.shape.file_sinks().map(|k| self.dir.join(sink_rel(&k.name))).collect();
        f.orphans(&sink_dirs, &self.state_dir());
        if !f.problems.is_empty() {
            self.failure = Some(f.problems.join("\n"));
        }
        self.findings = f;
    }

    /// Whether `start` restores anything: a savepoint, or a complete checkpoint for `latest`.
    /// Whether the checkpoint or savepoint `start` resumes from holds state
    /// of `op`: `latest` is the newest checkpoint with a `_metadata` (a run
    /// whose checkpoints all aborted leaves an older one without `op`).
    fn restores_state_of(&self, start: &Start, op: &str) -> bool {
        let dir = match start {
            Start::Fresh => return false,
            Start::Savepoint(sp) => sp.clone(),
            Start::Latest => {
                let Ok(entries) = std::fs::read_dir(self.state_dir().join("checkpoints")) else { return false };
                let mut complete: Vec<_> = entries.flatten().map(|e| e.path()).filter(|p| p.join("_metadata").is_file()).collect();
                complete.sort();
                match complete.pop() {
                    Some(newest) => newest,
                    None => return false,
                }
            }
        };
        let Ok(text) = std::fs::read_to_string(dir.join("_metadata")) else { return false };
        let md: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        md["operators"].as_array().is_some_and(|ops| ops.iter().any(|o| o == op))
    }

    /// A consumer takes the published part files: they move to
    /// `consumed/<sink>/` (still output), the sink directory is left without them.
    fn consume_parts(&mut self) {
        for sink in self.shape.file_sinks() {
            let (from, to) = (self.dir.join(sink_rel(&sink.name)), self.dir.join("consumed").join(&sink.name));
            let Ok(entries) = std::fs::read_dir(&from) else { continue };
            std::fs::create_dir_all(&to).unwrap();
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') {
                    continue;
                }
                let dest = to.join(format!("{}-{name}", self.runs));
                self.log.push(format!("mv {} {}", e.path().display(), dest.display()));
                std::fs::rename(e.path(), dest).unwrap();
            }
        }
    }

    /// Delete and recreate every source topic, and produce the same records
    /// into the same partitions again: each record gets its old offset back,
    /// so a restore resumes where it would have (docs/pipeline-reference.md:
    /// a restore resumes exactly at the recorded offsets) and the output stays exact.
    fn recreate_source_topics(&mut self) -> Result<(), String> {
        for s in &self.shape.sources {
            let (Some(t), SourceKind::File { files, .. }) = (&s.via_kafka, &s.kind) else { continue };
            self.log.note(format!("source topic {} deleted, created again with {files} partitions and the same records", t.topic));
            super::kafka::recreate_topic(&t.brokers, &t.topic, *files as i32)?;
            super::kafka::produce(&t.brokers, &t.topic, &file_lines(&self.dir, &s.name, *files))?;
        }
        Ok(())
    }

    fn write_reproduction(&self) {
        let weir = env!("CARGO_BIN_EXE_weir");
        let mut sh = format!(
            "#!/bin/sh\n# chaos case seed {}: the commands it ran, in order.\nWEIR=${{WEIR:-{weir}}}\nexport WEIR_CHECKPOINT_LOG=each\n",
            self.seed
        );
        for l in self.log.lines() {
            let _ = writeln!(sh, "{l}");
        }
        std::fs::write(self.dir.join("commands.sh"), sh).unwrap();
        let mut md = format!("# Chaos case seed {}\n\nReplay the whole case:\n\n", self.seed);
        let _ = writeln!(md, "    CHAOS_SEED={} CHAOS_CASES=1 cargo test --release --test chaos -- --nocapture\n", self.seed);
        let _ = writeln!(md, "Shape: {}\n", self.shape.summary());
        let _ = writeln!(md, "Input: `in/` (files written from the seed; datagen rows are `(seed, n)`), pipeline files `pipeline-v*.yaml`");
        let _ = writeln!(md, "(v1 is the drawn shape, later versions are the topology edits), commands in `commands.sh`");
        let _ = writeln!(md, "(run them from an empty `state/` and `out/` to replay by hand; timings are in the comments).\n");
        let _ = writeln!(md, "## Failure\n\n```\n{}\n```\n", self.failure.as_deref().unwrap_or(""));
        let _ = writeln!(md, "## Commands\n\n```\n{}\n```", self.log.lines().join("\n"));
        std::fs::write(self.dir.join("REPRODUCE.md"), md).unwrap();
    }
}

/// The lines of file source `name`'s `n` files, one list per file (partition).
fn file_lines(case: &Path, name: &str, n: usize) -> Vec<Vec<String>> {
    (0..n)
        .map(|f| {
            let text = std::fs::read_to_string(input::file_path(case, name, f)).unwrap();
            text.lines().map(str::to_string).collect()
        })
        .collect()
}

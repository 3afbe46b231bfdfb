//! Helpers for the checkpoint tests: a job with its own state and output
//! dirs, the expected output, the log lines weir writes about checkpoints,
//! a seeded RNG and the files of a state directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::records::{assert_same_records, canonical, parse};
use super::reference::{self, Func::*, Window};
use super::util::{hidden_files, input_lines, repo, sink_lines, tmp, weir_run, Running, Weir};

/// File source (2 files, redelivered copies) -> dedup by id -> 500 ms
/// tumbling count/sum per user -> exactly-once file sink; parallelism 2.
pub const PIPELINE: &str = "pipelines/checkpointed.yaml";
pub const INPUTS: [&str; 2] = ["testdata/inputs/events/events-0.jsonl", "testdata/inputs/events/events-1.jsonl"];

/// Kill -9s done by the whole suite (reported at the end of each crash loop).
pub static KILLS: AtomicUsize = AtomicUsize::new(0);

/// The state backend a test runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    RocksDb,
}

impl Backend {
    /// `--set state.backend=...` for this backend.
    pub fn apply(self, w: Weir) -> Weir {
        match self {
            Backend::Memory => w,
            Backend::RocksDb => w.set("state.backend", "rocksdb"),
        }
    }
}

/// One test body, run once per state backend: expands to a module `$name`
/// with the tests `memory` and `rocksdb` (filter with `rocksdb`).
macro_rules! both_backends {
    ($(#[$m:meta])* fn $name:ident($backend:ident: Backend) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $(#[$m])*
            fn run($backend: Backend) $body

            #[test]
            fn memory() {
                run(Backend::Memory)
            }

            #[test]
            fn rocksdb() {
                run(Backend::RocksDb)
            }
        }
    };
}
pub(crate) use both_backends;

/// One run's dirs: `state/` (checkpoints) and `out/` (the file sink).
pub struct Job {
    pub dir: tempfile::TempDir,
    pub state: PathBuf,
    pub out: PathBuf,
    pub backend: Backend,
}

impl Job {
    pub fn new() -> Job {
        Job::with(Backend::Memory)
    }

    pub fn with(backend: Backend) -> Job {
        let dir = tmp();
        let (state, out) = (dir.path().join("state"), dir.path().join("out"));
        Job { dir, state, out, backend }
    }

    /// `weir run pipelines/checkpointed.yaml -p 2` into this job's dirs.
    pub fn cmd(&self) -> Weir {
        self.backend.apply(weir_run(PIPELINE, 2).set("state.dir", &self.state).set("sinks.out.path", &self.out))
    }

    /// The same, resuming with `--restore latest`.
    pub fn restore(&self) -> Weir {
        self.cmd().arg("--restore").arg("latest")
    }

    /// The published output (hidden in-progress files excluded).
    pub fn lines(&self) -> Vec<String> {
        sink_lines(&self.out)
    }

    #[track_caller]
    pub fn assert_no_in_progress_files(&self) {
        let h = hidden_files(&self.out);
        assert!(h.is_empty(), "in-progress files left in the sink dir: {h:?}");
    }

    /// The checkpoint directories, oldest first.
    pub fn checkpoints(&self) -> Vec<PathBuf> {
        checkpoint_dirs(&self.state)
    }
}

/// The source at full speed (for runs whose timing does not matter).
pub fn fast(w: Weir) -> Weir {
    w.set("sources.events.rate_limit", "1000000000")
}

/// What the reference implementation says the pipeline must write.
pub fn reference_output() -> Vec<super::records::Obj> {
    let mut lines = Vec::new();
    for f in INPUTS {
        lines.extend(input_lines(f));
    }
    let unique = reference::dedup(&lines, &["id"]);
    reference::aggregate(
        &unique,
        &["user"],
        "ts",
        Some(Window::Tumbling { size: 500 }),
        &[(Count, None, "n"), (Sum, Some("amount"), "total")],
    )
}

/// The output of a clean run (no faults, no restore), computed once and
/// checked against the reference implementation.
pub fn expected() -> &'static [String] {
    static CLEAN: OnceLock<Vec<String>> = OnceLock::new();
    CLEAN.get_or_init(|| {
        let job = Job::new();
        fast(job.cmd()).ok();
        job.assert_no_in_progress_files();
        let lines = job.lines();
        assert_same_records("clean run vs reference", &lines, &reference_output());
        lines
    })
}

/// Exactly the clean run's lines, as a multiset: nothing lost, nothing twice.
#[track_caller]
pub fn assert_exactly_once(what: &str, actual: Vec<String>) {
    let canon = |v: &[String]| v.iter().map(|l| canonical(&parse(l))).collect::<Vec<_>>();
    super::records::assert_same_multiset(what, canon(&actual), canon(expected()));
}

/// The `key=N` value of a log line, if present.
pub fn log_field(line: &str, key: &str) -> Option<u64> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Ids of the "Checkpoint complete." lines, in log order.
pub fn completed(stderr: &str) -> Vec<u64> {
    stderr.lines().filter(|l| l.contains("Checkpoint complete.")).filter_map(|l| log_field(l, "checkpoint")).collect()
}

/// `duration_ms` of every "Checkpoint complete." line.
pub fn durations_ms(stderr: &str) -> Vec<u64> {
    stderr.lines().filter(|l| l.contains("Checkpoint complete.")).filter_map(|l| log_field(l, "duration_ms")).collect()
}

/// The checkpoint a run restored from (None: it started from the beginning).
pub fn restored_from(stderr: &str) -> Option<u64> {
    stderr.lines().find(|l| l.contains("Restoring from checkpoint.")).and_then(|l| log_field(l, "checkpoint"))
}

pub use super::rng::Rng;

/// Let `run` go on for `delay`, then kill -9 the weir process itself. Returns
/// false (and does not kill) if it exited by itself before that.
pub fn kill_after(run: &mut Running, delay: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < delay {
        if run.child.try_wait().expect("waiting for weir").is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if run.child.try_wait().expect("waiting for weir").is_some() {
        return false;
    }
    run.child.kill().expect("kill -9 weir");
    run.child.wait().expect("reaping weir");
    KILLS.fetch_add(1, Ordering::SeqCst);
    true
}

/// `<state>/checkpoints/chk-*`, oldest first.
pub fn checkpoint_dirs(state: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(state.join("checkpoints")) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> =
        entries.map(|e| e.unwrap().path()).filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("chk-")).collect();
    v.sort();
    v
}

/// Every file under `dir` (relative path -> contents).
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Copy a directory tree.
pub fn copy_dir(from: &Path, to: &Path) {
    for (rel, bytes) in tree(from) {
        let p = to.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

/// A finished or restarted state dir holds only complete checkpoints: every
/// chk dir has `_metadata`, and no temp or hidden file is anywhere.
#[track_caller]
pub fn assert_no_orphans(state: &Path) {
    for chk in checkpoint_dirs(state) {
        assert!(chk.join("_metadata").is_file(), "{} has no _metadata (an orphaned checkpoint)", chk.display());
    }
    // Every shared file is referenced by a retained checkpoint (reference
    // counts derived from the MANIFESTs); none is missing.
    let mut referenced = std::collections::BTreeSet::new();
    for chk in checkpoint_dirs(state) {
        referenced.extend(super::damage::shared_refs(&chk));
    }
    let shared = state.join("checkpoints").join("shared");
    let present: std::collections::BTreeSet<String> = match std::fs::read_dir(&shared) {
        Ok(entries) => entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Default::default(),
    };
    let unreferenced: Vec<_> = present.difference(&referenced).collect();
    assert!(unreferenced.is_empty(), "shared files no checkpoint references: {unreferenced:?}");
    let missing: Vec<_> = referenced.difference(&present).collect();
    assert!(missing.is_empty(), "shared files referenced but missing: {missing:?}");
    for rel in tree(state).keys() {
        let name = rel.file_name().unwrap().to_string_lossy();
        assert!(
            !name.starts_with('.') && !name.contains("tmp") && !name.contains("inprogress"),
            "temp file left in the state dir: {}",
            rel.display()
        );
    }
}

/// Write a pipeline YAML into `dir` (paths in it must be absolute).
pub fn write_pipeline(dir: &Path, name: &str, yaml: &str) -> String {
    let p = dir.join(format!("{name}.yaml"));
    std::fs::write(&p, yaml).unwrap();
    p.display().to_string()
}

/// Absolute path of a repository file, for pipelines written to temp dirs.
pub fn abs(rel: &str) -> String {
    repo().join(rel).display().to_string()
}

//! One input, one result: the committed output of an event-time pipeline,
//! including which records are late, must not depend on the parallelism,
//! the batch size, `rate_limit`, the state backend or a savepoint/restore
//! in the middle (docs/pipeline-reference.md, "Determinism"). Lateness is
//! decided per record against the watermark of the record's own input split
//! (a file here), so each run is compared byte for byte with the others and
//! with the reference model (`reference.rs`), computed from the input only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::records::{assert_same_multiset, canonical, parse, Obj};
use super::reference::{self, aggregate, aggregate_late, dedup, on_time_for_dedup, split_watermarks, Agg, Func, Window};
use super::reference::{JoinKind, JoinSide};
use super::util::{part_files, sink_lines, tmp, wait_until, weir, Outcome};

fn write_lines(path: &Path, lines: &[String]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// Run `yaml` (written to `dir/pipeline.yaml`) at parallelism `p`; exit 0.
fn run(dir: &Path, yaml: &str, p: u32) -> Outcome {
    let path = dir.join("pipeline.yaml");
    std::fs::write(&path, yaml).unwrap();
    let o = weir(&["run", path.to_str().unwrap(), "--no-progress", "-p", &p.to_string()]).run();
    o.expect_code(0);
    o
}

/// A sink's records, canonical and sorted.
fn sorted(dir: &Path) -> Vec<String> {
    let mut lines: Vec<String> = sink_lines(dir).iter().map(|l| canonical(&parse(l))).collect();
    lines.sort();
    lines
}

/// A dead letter's entries, as written, sorted (missing file: none).
fn dead_letters(path: &Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(path).unwrap_or_default().lines().map(String::from).collect();
    lines.sort();
    lines
}

/// The input lines of dead-letter entries, sorted.
fn dead_records(path: &Path) -> Vec<String> {
    let mut lines: Vec<String> =
        dead_letters(path).iter().map(|l| parse(l)["record"].as_str().expect("a dead letter's record").to_string()).collect();
    lines.sort();
    lines
}

fn sorted_canonical(objs: &[Obj]) -> Vec<String> {
    let mut lines: Vec<String> = objs.iter().map(canonical).collect();
    lines.sort();
    lines
}

/// Issue 18 item 1: with `max_out_of_orderness: 0`, ts 100, 50, 200, 60 of
/// one key: 50 and 60 are at or before the watermark their file had
/// promised (99 and 199), so both are late, whatever the batches. `-p 1`
/// with `rate_limit: 40` used to keep [50, 60) and drop only 60, `-p 2`
/// dropped both, and one batch (no rate limit) dropped nothing.
#[test]
fn which_records_are_late_does_not_depend_on_batches_or_parallelism() {
    let dir = tmp();
    let d = dir.path().display();
    let input: Vec<String> = [100, 50, 200, 60].iter().map(|t| format!(r#"{{"k":"x","ts":{t}}}"#)).collect();
    write_lines(&dir.path().join("in.jsonl"), &input);
    let expected = sorted_canonical(&[
        parse(r#"{"k":"x","window_start":100,"window_end":110,"n":1}"#),
        parse(r#"{"k":"x","window_start":200,"window_end":210,"n":1}"#),
    ]);
    for (p, extra) in [(1, "rate_limit: 40"), (2, ""), (1, "rate_limit: 1000000"), (1, "batch_size: 1"), (3, "batch_size: 2")] {
        let _ = std::fs::remove_dir_all(dir.path().join("out"));
        let _ = std::fs::remove_file(dir.path().join("late.jsonl"));
        let yaml = format!(
            "name: late\nsources:\n  - {{name: src, type: file, path: {d}/in.jsonl, event_time: {{field: ts, max_out_of_orderness: 0s}}{}}}\n\
             operators:\n  - {{name: w, type: aggregate, input: src, key: [k], window: {{type: tumbling, size: 10ms}}, \
             aggregates: [{{fn: count, as: n}}], dead_letter: {d}/late.jsonl}}\n\
             sinks:\n  - {{name: out, type: file, input: w, path: {d}/out}}\n",
            if extra.is_empty() { String::new() } else { format!(", {extra}") }
        );
        run(dir.path(), &yaml, p);
        let what = format!("-p {p} {extra}");
        assert_eq!(sorted(&dir.path().join("out")), expected, "{what}");
        let late = dead_records(&dir.path().join("late.jsonl"));
        assert_eq!(late, [input[1].clone(), input[3].clone()], "{what}: 50 and 60 are late");
    }
}

/// Issue 18 item 1, second case: two files of more than 1024 records. At
/// `-p 1` one subtask reads both, so the batches of the second file are cut
/// 76 records in, and a record of it that is late by its own file's order
/// was dead-lettered at `-p 1` and counted in a window at `-p 2`.
#[test]
fn a_files_late_records_do_not_depend_on_the_files_read_before_it() {
    let dir = tmp();
    let d = dir.path().display();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    let a: Vec<String> = (0..1100).map(|i| format!(r#"{{"k":"x","ts":{i}}}"#)).collect();
    // b's record 1000 is 2000 ms behind the records before it: late in b.
    let b: Vec<String> = (0..1100).map(|i| format!(r#"{{"k":"y","ts":{}}}"#, if i == 1000 { 4000 } else { 5000 + i })).collect();
    write_lines(&dir.path().join("in/a.jsonl"), &a);
    write_lines(&dir.path().join("in/b.jsonl"), &b);
    let records = split_watermarks(&[a, b.clone()], "ts", 0);
    let (results, late) = aggregate_late(&records, &["k"], "ts", Some(Window::Tumbling { size: 10 }), 0, &[(Func::Count, None, "n")]);
    assert_eq!(late, [b[1000].clone()], "the reference agrees");
    let expected = sorted_canonical(&results);
    for p in [1, 2] {
        let _ = std::fs::remove_dir_all(dir.path().join("out"));
        let _ = std::fs::remove_file(dir.path().join("late.jsonl"));
        let yaml = format!(
            "name: late2\nsources:\n  - {{name: src, type: file, path: {d}/in, event_time: {{field: ts, max_out_of_orderness: 0s}}}}\n\
             operators:\n  - {{name: w, type: aggregate, input: src, key: [k], window: {{type: tumbling, size: 10ms}}, \
             aggregates: [{{fn: count, as: n}}], dead_letter: {d}/late.jsonl}}\n\
             sinks:\n  - {{name: out, type: file, input: w, path: {d}/out}}\n"
        );
        run(dir.path(), &yaml, p);
        assert_same_multiset(&format!("-p {p}"), sorted(&dir.path().join("out")), expected.clone());
        assert_eq!(dead_records(&dir.path().join("late.jsonl")), late, "-p {p}");
    }
}

// ---- The determinism family ----

/// A small deterministic generator (xorshift64*), so every run of the test
/// sees the same input.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}

const FILES: usize = 5;
const PER_FILE: usize = 90;
const OUT_OF_ORDERNESS_MS: i64 = 20;

/// Five files of records `{"id", "k", "ts", "v"}`: time moving forward with
/// jitter inside `max_out_of_orderness`, some records far behind (late), and
/// some exact copies of earlier lines of any file (duplicates for dedup:
/// one id, one line, so which copy passes does not matter).
fn family_input() -> Vec<Vec<String>> {
    let mut rng = Rng(0x5EED_0018);
    let mut all: Vec<String> = Vec::new();
    let mut files = vec![Vec::new(); FILES];
    let mut id = 0;
    for (f, file) in files.iter_mut().enumerate() {
        let mut t = rng.range(-30, 30) + 7 * f as i64;
        for _ in 0..PER_FILE {
            t += rng.range(0, 4);
            let roll = rng.range(0, 99);
            let line = if roll < 8 && !all.is_empty() {
                all[rng.range(0, all.len() as i64 - 1) as usize].clone()
            } else {
                let ts = if roll < 16 { t - rng.range(25, 120) } else { t - rng.range(0, 15) };
                id += 1;
                let k = ["a", "b", "c"][rng.range(0, 2) as usize];
                format!(r#"{{"id":{id},"k":"{k}","ts":{ts},"v":{}}}"#, rng.range(-5, 20))
            };
            all.push(line.clone());
            file.push(line);
        }
    }
    files
}

/// What the family pipeline must commit, per sink and dead letter, from
/// the input only.
struct Expected {
    outputs: Vec<(&'static str, Vec<String>)>,
    dead: Vec<(&'static str, Vec<String>)>,
}

const TUMBLING: Window = Window::Tumbling { size: 10 };
const SLIDING: Window = Window::Sliding { size: 20, slide: 10 };
const SESSION: Window = Window::Session { gap: 15 };

fn expected(files: &[Vec<String>]) -> Expected {
    let records = split_watermarks(files, "ts", OUT_OF_ORDERNESS_MS);
    let count_sum: [Agg; 2] = [(Func::Count, None, "n"), (Func::Sum, Some("v"), "total")];
    let (tumbling, tumbling_late) = aggregate_late(&records, &["k"], "ts", Some(TUMBLING), 0, &count_sum);
    let (sliding, sliding_late) = aggregate_late(&records, &["k"], "ts", Some(SLIDING), 0, &[(Func::Count, None, "n")]);
    let (session, session_late) = aggregate_late(&records, &["k"], "ts", Some(SESSION), 0, &count_sum);
    // The chain: a (tumbling 10 ms, allowed_lateness 5 ms) feeds b (30 ms);
    // a's results carry event time end - 1 and are never late for b.
    let (a, a_late) = aggregate_late(&records, &["k"], "ts", Some(TUMBLING), 5, &[(Func::Count, None, "n")]);
    let a_lines: Vec<String> =
        a.iter().map(|o| format!(r#"{{"k":{},"ts":{},"n":{}}}"#, o["k"], o["window_end"].as_i64().unwrap() - 1, o["n"])).collect();
    let b = aggregate(
        &a_lines,
        &["k"],
        "ts",
        Some(Window::Tumbling { size: 30 }),
        &[(Func::Sum, Some("n"), "n"), (Func::Count, None, "windows")],
    );
    // The joins read the even ids (left) and the odd ids (right) of `src`.
    let parity = |even: bool| -> Vec<(String, i64)> {
        records.iter().filter(|(l, _)| (parse(l)["id"].as_i64().unwrap() % 2 == 0) == even).cloned().collect()
    };
    let (evens, odds) = (parity(true), parity(false));
    let left = JoinSide { lines: &evens, key: &["k"], ts: "ts", name: "evens" };
    let right = JoinSide { lines: &odds, key: &["k"], ts: "ts", name: "odds" };
    let interval = reference::interval_join(&left, &right, -5, 5, JoinKind::Full);
    let windowed = reference::window_join(&left, &right, 10, 10, JoinKind::Left);
    let temporal = reference::temporal_join(&left, &right, JoinKind::Left, &|_| false, None);
    let late_lines: Vec<String> =
        records.iter().filter(|(l, wm)| parse(l)["ts"].as_i64().unwrap() <= *wm).map(|(l, _)| l.clone()).collect();
    let unique = dedup(&on_time_for_dedup(&records, "ts"), &["id"]);
    let mut unique: Vec<String> = unique.iter().map(|l| canonical(&parse(l))).collect();
    unique.sort();
    let sorted_lines = |mut v: Vec<String>| {
        v.sort();
        v
    };
    Expected {
        outputs: vec![
            ("tumbling", sorted_canonical(&tumbling)),
            ("sliding", sorted_canonical(&sliding)),
            ("session", sorted_canonical(&session)),
            ("chained", sorted_canonical(&b)),
            ("dedup", unique),
            ("interval_join", sorted_canonical(&interval)),
            ("window_join", sorted_canonical(&windowed)),
            ("temporal_join", sorted_canonical(&temporal)),
        ],
        dead: vec![
            ("tumbling", sorted_lines(tumbling_late)),
            ("sliding", sorted_lines(sliding_late)),
            ("session", sorted_lines(session_late)),
            ("a", sorted_lines(a_late)),
            ("b", Vec::new()),
            ("ij", sorted_lines(late_lines.clone())),
            ("tj", sorted_lines(late_lines)),
        ],
    }
}

/// How one run of the family pipeline is set up.
#[derive(Debug, Clone, Copy)]
struct Setup {
    p: u32,
    batch_size: u32,
    rate_limit: Option<u32>,
    rocksdb: bool,
}

fn family_yaml(dir: &Path, s: Setup, checkpoints: bool) -> String {
    let d = dir.display();
    let rate = s.rate_limit.map(|r| format!(", rate_limit: {r}")).unwrap_or_default();
    let agg = |name: &str, input: &str, window: &str, extra: &str, aggs: &str| {
        format!(
            "  - {{name: {name}, type: aggregate, input: {input}, key: [k], window: {window}{extra}, aggregates: [{aggs}], \
             dead_letter: {d}/late-{name}.jsonl}}\n"
        )
    };
    let count_sum = "{fn: count, as: n}, {fn: sum, field: v, as: total}";
    let mut y = format!(
        "name: determinism\nsources:\n  - {{name: src, type: file, path: {d}/in, batch_size: {}{rate}, \
         event_time: {{field: ts, max_out_of_orderness: {OUT_OF_ORDERNESS_MS}ms}}}}\noperators:\n",
        s.batch_size
    );
    y += &agg("tumbling", "src", "{type: tumbling, size: 10ms}", "", count_sum);
    y += &agg("sliding", "src", "{type: sliding, size: 20ms, slide: 10ms}", "", "{fn: count, as: n}");
    y += &agg("session", "src", "{type: session, gap: 15ms}", "", count_sum);
    y += &agg("a", "src", "{type: tumbling, size: 10ms}", ", allowed_lateness: 5ms", "{fn: count, as: n}");
    y += &agg("b", "a", "{type: tumbling, size: 30ms}", "", "{fn: sum, field: n, as: n}, {fn: count, as: windows}");
    y += "  - {name: unique, type: dedup, input: src, key: [id], ttl: 50ms}\n";
    y += "  - {name: evens, type: filter, input: src, where: \"id % 2 == 0\"}\n";
    y += "  - {name: odds, type: filter, input: src, where: \"id % 2 == 1\"}\n";
    let join = |name: &str, how: &str, kind: &str, dead: bool| {
        let dead = if dead { format!(", dead_letter: {d}/late-{name}.jsonl") } else { String::new() };
        format!("  - {{name: {name}, type: join, left: evens, right: odds, on: {{left: [k], right: [k]}}, {how}, kind: {kind}{dead}}}\n")
    };
    y += &join("ij", "interval: {lower: -5ms, upper: 5ms}", "full", true);
    y += &join("wj", "window: {type: tumbling, size: 10ms}", "left", false);
    y += &join("tj", "temporal: {}", "left", true);
    y += "sinks:\n";
    for (sink, input) in SINKS {
        y += &format!("  - {{name: out_{sink}, type: file, input: {input}, path: {d}/out/{sink}}}\n");
    }
    if s.rocksdb || checkpoints {
        y += &format!("state: {{backend: {}, dir: {d}/state}}\n", if s.rocksdb { "rocksdb" } else { "memory" });
    }
    if checkpoints {
        y += "checkpoint: {interval: 100ms}\n";
    }
    y
}

/// The family's sinks and the node each reads.
const SINKS: [(&str, &str); 8] = [
    ("tumbling", "tumbling"),
    ("sliding", "sliding"),
    ("session", "session"),
    ("chained", "b"),
    ("dedup", "unique"),
    ("interval_join", "ij"),
    ("window_join", "wj"),
    ("temporal_join", "tj"),
];

/// Everything a run committed: each sink's sorted canonical records, then
/// each dead letter's sorted entries (as written).
fn committed(dir: &Path) -> Vec<(String, Vec<String>)> {
    let mut all = Vec::new();
    for (sink, _) in SINKS {
        all.push((format!("sink {sink}"), sorted(&dir.join("out").join(sink))));
    }
    for op in ["tumbling", "sliding", "session", "a", "b", "ij", "tj"] {
        all.push((format!("dead letter of {op}"), dead_letters(&dir.join(format!("late-{op}.jsonl")))));
    }
    all
}

#[track_caller]
fn check_against_reference(dir: &Path, want: &Expected, what: &str) {
    for (sink, lines) in &want.outputs {
        assert_same_multiset(&format!("{what}: sink {sink} vs the reference"), sorted(&dir.join("out").join(sink)), lines.clone());
    }
    for (op, lines) in &want.dead {
        assert_eq!(&dead_records(&dir.join(format!("late-{op}.jsonl"))), lines, "{what}: late records of {op} vs the reference");
    }
}

fn fresh_run_dir(files: &[Vec<String>]) -> tempfile::TempDir {
    let dir = tmp();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    for (i, f) in files.iter().enumerate() {
        write_lines(&dir.path().join(format!("in/part-{i}.jsonl")), f);
    }
    dir
}

/// Every window kind, dedup with a TTL, a chained aggregate and the three
/// joins (of the even and the odd ids) over five files with out-of-order,
/// late and duplicate records: the same committed
/// output (sinks and dead letters) at p = 1..4, batch sizes 1 and 1024,
/// with and without `rate_limit`, on memory and RocksDB, and across a
/// stop-with-savepoint restored at another parallelism; and equal to the
/// reference model. The runs are a fixed subset of that cross product in
/// which every value of every setting appears with several others.
#[test]
fn committed_output_is_the_same_at_any_parallelism_batch_rate_and_backend() {
    let files = family_input();
    let want = expected(&files);
    let late: usize = want.dead.iter().map(|(_, l)| l.len()).sum();
    assert!(late > 20, "the input must have late records ({late})");
    let setups = [
        Setup { p: 1, batch_size: 1024, rate_limit: None, rocksdb: false },
        Setup { p: 1, batch_size: 1, rate_limit: Some(3000), rocksdb: true },
        Setup { p: 2, batch_size: 1, rate_limit: None, rocksdb: false },
        Setup { p: 2, batch_size: 1024, rate_limit: Some(2000), rocksdb: true },
        Setup { p: 3, batch_size: 1024, rate_limit: None, rocksdb: true },
        Setup { p: 3, batch_size: 1, rate_limit: Some(4000), rocksdb: false },
        Setup { p: 4, batch_size: 1, rate_limit: None, rocksdb: true },
        Setup { p: 4, batch_size: 1024, rate_limit: Some(3000), rocksdb: false },
    ];
    let mut first: Option<(Setup, Vec<(String, Vec<String>)>)> = None;
    for s in setups {
        let dir = fresh_run_dir(&files);
        run(dir.path(), &family_yaml(dir.path(), s, false), s.p);
        let what = format!("{s:?}");
        check_against_reference(dir.path(), &want, &what);
        let got = committed(dir.path());
        match &first {
            None => first = Some((s, got)),
            Some((s0, base)) => assert_eq!(&got, base, "{what} differs from {s0:?}"),
        }
    }
    let (_, base) = first.expect("at least one run");
    let dir = fresh_run_dir(&files);
    let (before, after) = (2, 3);
    stop_with_savepoint_and_restore(dir.path(), Setup { p: before, batch_size: 1, rate_limit: Some(100), rocksdb: true }, after);
    check_against_reference(dir.path(), &want, "savepoint at -p 2, restored at -p 3");
    assert_eq!(committed(dir.path()), base, "savepoint at -p {before}, restored at -p {after}");
}

/// Run the family pipeline with checkpoints at `s`, stop it with a
/// savepoint once some output is committed, restore it at `-p after`
/// without `rate_limit`, run it to the end.
fn stop_with_savepoint_and_restore(dir: &Path, s: Setup, after: u32) {
    let yaml = family_yaml(dir, s, true);
    let pipeline = dir.join("pipeline.yaml");
    std::fs::write(&pipeline, yaml).unwrap();
    let pipeline = pipeline.to_str().unwrap().to_string();
    let run = weir(&["run", &pipeline, "--no-progress", "-p", &s.p.to_string()]).spawn();
    let tumbling: PathBuf = dir.join("out/tumbling");
    assert!(wait_until(Duration::from_secs(30), || !part_files(&tumbling).is_empty()), "no output committed before the savepoint");
    let target = dir.join("sp");
    let stop = weir(&["savepoint", "trigger", &pipeline, "--stop", "--target", target.to_str().unwrap()]).run();
    stop.expect_code(0);
    // The target is the parent; the savepoint is the child it printed.
    let sp = stop.stdout.lines().find_map(|l| l.strip_prefix("Savepoint completed. Path: ")).expect("a savepoint path").to_string();
    let first = run.wait_for(Duration::from_secs(60));
    first.expect_code(0);
    let rest =
        weir(&["restore", &sp, &pipeline, "--no-progress", "-p", &after.to_string(), "--set", "sources.src.rate_limit=1000000"]).run();
    rest.expect_code(0);
}

//! Seeded fuzzing of the pipeline loader: generated pipelines and mutations
//! of the example pipelines in `pipelines/` must never panic, and every
//! error must be located (`file:line:col`, line and column >= 1).
//!
//! The PRNG is fastrand's, seeded, so a failing case is reproduced from the
//! seed printed with it.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::load::load_with_env;

/// A seeded RNG (fastrand) with the few picks the mutations need.
pub(crate) struct Rng(fastrand::Rng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(fastrand::Rng::with_seed(seed))
    }

    pub fn next(&mut self) -> u64 {
        self.0.u64(..)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0.usize(..n)
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.0.u64(..100) < percent
    }
}

/// Values users (or accidents) put where a scalar goes.
const EXTREMES: &[&str] = &[
    "300000000000y",
    "106751991168d",
    "18446744073709551615s",
    "100y",
    "101y",
    "7days",
    "8d",
    "1ns",
    "500us",
    "0ms",
    "0s",
    "1ms",
    "-1s",
    "1h 30m",
    "10 parsecs",
    "1e-30",
    "1e308",
    "-1e308",
    "1.7976931348623157e308",
    "5e-324",
    ".nan",
    ".inf",
    "-.inf",
    "0",
    "-1",
    "1",
    "65536",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "99999999999999999999999999999",
    "0x10",
    "1_000",
    "~",
    "null",
    "true",
    "\"\"",
    "''",
    "[]",
    "{}",
    "[1, 2]",
    "{a: 1}",
    "ü€😀",
    "\"\\u0000\"",
    "\u{202e}rtl",
    "!!binary aGVsbG8=",
    "!custom x",
    "&anchor 5",
    "*anchor",
    "${NOPE}",
    "${NOPE:1s}",
    "$${x}",
    "\"${\"",
    "|\n  block",
    ">-\n  folded",
    "0000-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "10000-01-01T00:00:00Z",
    "2024-02-30T00:00:00Z",
    "64MiB",
    "1TiB",
    "2TiB",
    "63KiB",
    "18446744073709551615GiB",
    "{type: sliding, size: 1d, slide: 1ms}",
    "{type: sliding, size: 100y, slide: 1ms}",
    "{type: tumbling, size: 500us}",
    "{type: session, gap: 300000000000y}",
    "/dev/null",
    ".",
    "..",
    "out",
    "out/x/../x",
    "state",
];

/// Keys worth putting into a mapping, valid somewhere or close to it.
const KEYS: &[&str] = &[
    "name",
    "type",
    "input",
    "path",
    "interval",
    "timeout",
    "min_pause",
    "aligned_timeout",
    "retain",
    "tolerable_failures",
    "rate_limit",
    "rows",
    "start_time",
    "ttl",
    "allowed_lateness",
    "emit_interval",
    "max_out_of_orderness",
    "idle_timeout",
    "max_file_bytes",
    "dead_letter",
    "on_error",
    "parallelism",
    "max_parallelism",
    "bundles",
    "size",
    "slide",
    "gap",
    "window",
    "jitter",
    "cardinality",
    "min",
    "max",
    "kind",
    "fields",
    "key",
    "aggregates",
    "checkpoint",
    "state",
    "block_cache",
    "write_buffer",
    "write_cache",
    "broker_timeout",
    "ünïcode",
    "",
];

const UNICODE: &[&str] = &[
    "é", "😀", "\u{0}", "\u{7f}", "\u{feff}", "\t", "\r", "\u{2028}", "\"", "'", ":", "#", "-", "{", "}", ",", "&", "!", "%", "@", "`",
    "|", ">",
];

fn example_pipelines() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/pipelines");
    let mut paths: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    let texts: Vec<String> = paths.iter().filter_map(|p| std::fs::read_to_string(p).ok()).collect();
    assert!(texts.len() >= 10, "expected the example pipelines in {dir}");
    texts
}

/// A char boundary of `s` near `i`.
fn boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn nested(rng: &mut Rng) -> String {
    let depth = 1 + rng.below(300);
    if rng.chance(50) {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    } else {
        format!("{}1{}", "{a: ".repeat(depth), "}".repeat(depth))
    }
}

/// One mutation of `text`, line-wise or character-wise.
fn mutate(rng: &mut Rng, text: &str, seeds: &[String]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let n = lines.len();
    match rng.below(10) {
        0 => {
            lines.remove(rng.below(n));
        }
        1 => {
            let i = rng.below(n);
            let l = lines[i].clone();
            lines.insert(i, l);
        }
        2 => {
            let (i, j) = (rng.below(n), rng.below(n));
            lines.swap(i, j);
        }
        3 | 4 => {
            // A scalar after `: ` becomes an extreme value.
            let i = rng.below(n);
            let l = &lines[i];
            let colons: Vec<usize> = l.match_indices(": ").map(|(k, _)| k).collect();
            if !colons.is_empty() {
                let at = *rng.pick(&colons) + 2;
                let end = l[at..].find([',', '}', ']']).map_or(l.len(), |e| at + e);
                let value = if rng.chance(10) { nested(rng) } else { rng.pick(EXTREMES).to_string() };
                lines[i] = format!("{}{value}{}", &l[..at], &l[end..]);
            }
        }
        5 => {
            let i = rng.below(n);
            let indent = " ".repeat(rng.below(6));
            lines.insert(i, format!("{indent}{}: {}", rng.pick(KEYS), rng.pick(EXTREMES)));
        }
        6 => {
            let i = rng.below(n);
            let at = boundary(&lines[i], rng.below(lines[i].len() + 1));
            let c = rng.pick(UNICODE);
            lines[i].insert_str(at, c);
        }
        7 => {
            // Re-indent a line.
            let i = rng.below(n);
            let l = lines[i].trim_start().to_string();
            lines[i] = format!("{}{l}", " ".repeat(rng.below(9)));
        }
        8 => {
            // A line of another example.
            let other: Vec<&str> = rng.pick(seeds).lines().collect();
            if !other.is_empty() {
                let l = rng.pick(&other).to_string();
                lines.insert(rng.below(n + 1), l);
            }
        }
        _ => {
            // Truncate anywhere.
            let joined = lines.join("\n");
            let at = boundary(&joined, rng.below(joined.len() + 1));
            return joined[..at].to_string();
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// A pipeline built from parts, most of them plausible, some not.
fn generate(rng: &mut Rng) -> String {
    let v = |rng: &mut Rng, plausible: &[&str]| -> String {
        if rng.chance(25) {
            rng.pick(EXTREMES).to_string()
        } else {
            rng.pick(plausible).to_string()
        }
    };
    let mut t = format!("name: {}\n", v(rng, &["p", "orders", "a.b-c_1"]));
    if rng.chance(50) {
        t += &format!("parallelism: {}\n", v(rng, &["1", "2", "4"]));
    }
    if rng.chance(40) {
        t += &format!(
            "checkpoint: {{interval: {}, timeout: {}, min_pause: {}, retain: {}}}\n",
            v(rng, &["1s", "200ms"]),
            v(rng, &["10s", "1m"]),
            v(rng, &["0s", "100ms"]),
            v(rng, &["1", "3"])
        );
    }
    if rng.chance(20) {
        t += &format!("state: {{dir: {}}}\n", v(rng, &["state/p", "out", "/tmp/weir-fuzz-state"]));
    }
    t += "sources:\n";
    t += &format!(
        "  - {{name: gen, type: datagen, rows: {}, rate_limit: {}, interval: {}, start_time: {},\n     fields: {{id: {{kind: sequence}}, user: {{kind: key, cardinality: {}}}, amount: {{kind: {}, min: {}, max: {}}}, ts: {{kind: timestamp, jitter: {}}}}},\n     event_time: {{field: ts, max_out_of_orderness: {}, idle_timeout: {}}}}}\n",
        v(rng, &["100", "0"]),
        v(rng, &["1000", "0.5"]),
        v(rng, &["1ms", "10ms"]),
        v(rng, &["0", "2024-01-01T00:00:00Z"]),
        v(rng, &["10", "1"]),
        v(rng, &["int", "float"]),
        v(rng, &["0", "-5"]),
        v(rng, &["9", "5"]),
        v(rng, &["0s", "5ms"]),
        v(rng, &["1s", "0s"]),
        v(rng, &["30s", "1s"]),
    );
    t += "operators:\n";
    t += &format!("  - {{name: d, type: dedup, input: gen, key: [id], ttl: {}}}\n", v(rng, &["1h", "10s"]));
    let window = match rng.below(4) {
        0 => format!("{{type: tumbling, size: {}}}", v(rng, &["10s", "1ms"])),
        1 => format!("{{type: sliding, size: {}, slide: {}}}", v(rng, &["10s", "1m"]), v(rng, &["5s", "1ms"])),
        2 => format!("{{type: session, gap: {}}}", v(rng, &["1s", "30s"])),
        _ => v(rng, &["~"]),
    };
    t += &format!(
        "  - {{name: a, type: aggregate, input: d, key: [user], window: {window}, allowed_lateness: {}, aggregates: [{{fn: count, as: n}}, {{fn: sum, field: amount, as: s}}]}}\n",
        v(rng, &["0s", "1s"])
    );
    t += "sinks:\n";
    for (i, sink) in ["a", "d"].iter().enumerate().take(1 + rng.below(2)) {
        match rng.below(3) {
            0 => {
                t += &format!(
                    "  - {{name: s{i}, type: file, input: {sink}, path: {}, max_file_bytes: {}}}\n",
                    v(rng, &["out/a", "out/b", "out/a/", "./out/a"]),
                    v(rng, &["4096", "134217728"])
                )
            }
            1 => t += &format!("  - {{name: s{i}, type: blackhole, input: {sink}, rate_limit: {}}}\n", v(rng, &["10", "1000"])),
            _ => t += &format!("  - {{name: s{i}, type: stdout, input: {sink}}}\n"),
        }
    }
    if rng.chance(30) {
        t = mutate(rng, &t, std::slice::from_ref(&t));
    }
    t
}

/// Load `text`: no panic, and every error located in `f.yaml`.
fn check(seed: u64, text: &str) -> Result<(), String> {
    let env = |name: &str| (name == "HOME").then(|| "/home/x".to_string());
    let result = catch_unwind(AssertUnwindSafe(|| load_with_env(text, "f.yaml", &[], &env)));
    match result {
        Err(_) => Err(format!("seed {seed}: panicked on:\n{text}")),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(errors)) => {
            if errors.0.is_empty() {
                return Err(format!("seed {seed}: refused without an error on:\n{text}"));
            }
            match errors.0.iter().find(|e| e.origin != "f.yaml" || e.line == 0 || e.col == 0 || e.message.is_empty()) {
                Some(e) => Err(format!("seed {seed}: unlocated error `{e}` on:\n{text}")),
                None => Ok(()),
            }
        }
    }
}

const CASES: u64 = 10_000;

fn run(cases: impl Iterator<Item = (u64, String)>) {
    let failures: Vec<String> = cases.filter_map(|(seed, text)| check(seed, &text).err()).take(5).collect();
    assert!(failures.is_empty(), "failing cases (up to 5):\n\n{}", failures.join("\n\n"));
}

#[test]
fn yaml_loader_fuzz_mutated_examples_never_panic_and_locate_errors() {
    let seeds = example_pipelines();
    run((0..CASES).map(|seed| {
        let mut rng = Rng::new(seed);
        let mut text = rng.pick(&seeds).clone();
        for _ in 0..1 + rng.below(4) {
            text = mutate(&mut rng, &text, &seeds);
        }
        (seed, text)
    }));
}

#[test]
fn yaml_loader_fuzz_generated_pipelines_never_panic_and_locate_errors() {
    run((0..CASES).map(|seed| {
        let mut rng = Rng::new(seed ^ 0x5EED_0000);
        (seed, generate(&mut rng))
    }));
}

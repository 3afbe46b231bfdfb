//! The input of a case: JSON-line files written from the seed, and the rows a
//! datagen source produces (re-derived here from `(seed, n)` as
//! docs/pipeline-reference.md promises, with the same mixing function).
//!
//! Every file is in event-time order up to a disorder of two steps, far below
//! `max_out_of_orderness`, and redelivered copies follow their original
//! within three lines; some files hold a few records 1–3 s behind, which are
//! late for some operators. Lateness is judged per file (split), so which
//! records are late follows from the input alone, whatever the batches.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::rng::Rng;
use super::shape::{Shape, SourceKind, START_MS, STEP_MS};

/// What one source reads: its good lines (copies included) and bad lines.
#[derive(Default, Clone)]
pub struct SourceInput {
    pub good: Vec<String>,
    pub bad: Vec<String>,
    /// The good lines per input split (file, or datagen's one row
    /// sequence), in split order: what lateness is judged by.
    pub splits: Vec<Vec<String>>,
}

/// Write the files of every file source under `case/in/` and return what each
/// source reads.
pub fn generate(shape: &Shape, rng: &mut Rng, case: &Path) -> BTreeMap<String, SourceInput> {
    let mut inputs = BTreeMap::new();
    for s in &shape.sources {
        let input = match &s.kind {
            SourceKind::Datagen { rows, seed, users } => {
                let good: Vec<String> = (0..*rows).map(|n| datagen_row(*seed, n, *users)).collect();
                SourceInput { splits: vec![good.clone()], good, bad: Vec::new() }
            }
            SourceKind::File { files, records, users, bad, late } => {
                write_files(rng, &case.join("in").join(&s.name), *files, *records, *users, *bad, *late)
            }
        };
        inputs.insert(s.name.clone(), input);
    }
    inputs
}

/// Row n of a datagen with fields id (sequence), user (key, prefix "u"),
/// amount (int 1..=100), ts (timestamp, no jitter), in that order.
pub fn datagen_row(seed: u64, n: u64, users: u64) -> String {
    let user = mix(seed, n, 1) % users;
    let amount = 1 + mix(seed, n, 2) % 100;
    let ts = START_MS + n as i64 * STEP_MS;
    format!(r#"{{"id":{n},"user":"u{user}","amount":{amount},"ts":{ts}}}"#)
}

/// splitmix64's finaliser over (seed, row, field), as datagen mixes them.
fn mix(seed: u64, row: u64, field: u64) -> u64 {
    let mut z = seed ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ field.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `records` records dealt round-robin over `files` files, about 5 % of them
/// redelivered (an identical line 1–3 lines later), `late` records 1–3 s
/// behind the line they follow (ids after the others), `bad` bad lines anywhere.
fn write_files(rng: &mut Rng, dir: &Path, files: usize, records: usize, users: u64, bad: usize, late: usize) -> SourceInput {
    let mut texts: Vec<Vec<String>> = vec![Vec::new(); files];
    // Copies waiting to be written: (file, lines still to go, text).
    let mut pending: Vec<(usize, u64, String)> = Vec::new();
    let mut input = SourceInput::default();
    for n in 0..records {
        let f = n % files;
        let disorder = if rng.chance(0.1) { STEP_MS * rng.range(1, 2) as i64 } else { 0 };
        let ts = START_MS + n as i64 * STEP_MS - disorder;
        let line = format!(r#"{{"id":{n},"user":"u{}","amount":{},"ts":{ts}}}"#, rng.range(0, users - 1), rng.range(1, 100));
        texts[f].push(line.clone());
        input.good.push(line.clone());
        for p in pending.iter_mut().filter(|p| p.0 == f) {
            p.1 -= 1;
        }
        for (_, _, copy) in pending.iter().filter(|p| p.0 == f && p.1 == 0) {
            texts[f].push(copy.clone());
            input.good.push(copy.clone());
        }
        pending.retain(|p| p.1 > 0);
        if rng.chance(0.05) {
            pending.push((f, rng.range(1, 3), line));
        }
    }
    for i in 0..late {
        let f = rng.range(0, files as u64 - 1) as usize;
        if texts[f].len() < 20 {
            continue;
        }
        let at = rng.range(10, texts[f].len() as u64) as usize;
        let behind: serde_json::Value = serde_json::from_str(&texts[f][at - 1]).unwrap();
        let ts = behind["ts"].as_i64().unwrap() - rng.range(1000, 3000) as i64;
        let line = format!(r#"{{"id":{},"user":"u{}","amount":{},"ts":{ts}}}"#, records + i, rng.range(0, users - 1), rng.range(1, 100));
        texts[f].insert(at, line.clone());
        input.good.push(line);
    }
    let splits: Vec<Vec<String>> = texts.clone();
    for i in 0..bad {
        let line = match rng.range(0, 3) {
            0 => format!(r#"{{"id":{i},"user":"#),
            1 => format!("not json, bad line {i}"),
            2 => format!("[{i}, \"an array\"]"),
            _ => format!(r#"{{"id":{i},"user":"u0","amount":1,"ts":"yesterday {i}"}}"#),
        };
        let f = rng.range(0, files as u64 - 1) as usize;
        let at = rng.range(0, texts[f].len() as u64) as usize;
        texts[f].insert(at, line.clone());
        input.bad.push(line);
    }
    input.splits = splits;
    std::fs::create_dir_all(dir).unwrap();
    for (f, lines) in texts.iter().enumerate() {
        let mut text = String::new();
        for l in lines {
            let _ = writeln!(text, "{l}");
        }
        std::fs::write(dir.join(file_name(f)), text).unwrap();
    }
    input
}

fn file_name(f: usize) -> String {
    format!("part-{f}.jsonl")
}

/// File `f` of file source `source` in case directory `case`.
pub fn file_path(case: &Path, source: &str, f: usize) -> std::path::PathBuf {
    case.join("in").join(source).join(file_name(f))
}

#[test]
fn datagen_rows_match_the_documented_shape() {
    let row = datagen_row(7, 3, 10);
    let v: serde_json::Value = serde_json::from_str(&row).unwrap();
    assert_eq!(v["id"], 3);
    assert_eq!(v["ts"], START_MS + 3 * STEP_MS);
    assert!(v["user"].as_str().unwrap().starts_with('u'));
}

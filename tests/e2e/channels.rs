//! Channel state and topology edits: the in-flight records of an unaligned
//! checkpoint are restored once, on the channel they were on, however many
//! consumers a node has; operator state and sink staging find their owner
//! by operator name and subtask after a chaining change; in-flight records
//! whose channel is gone are refused with nothing touched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ckpt::{completed, log_field, restored_from, write_pipeline};
use super::records::parse;
use super::util::{hidden_files, sink_lines, tmp, wait_until, weir_run};

/// Sequence ids per fan-out run.
const FAN_OUT_ROWS: u64 = 12_000;

/// gen (datagen, 2 subtasks) fans out to `raw` (file, forward), `slow`
/// (blackhole, forward, the backpressure) and `unique` (dedup, hash: each
/// subtask reads both gen subtasks); unique fans out to `out` (file) and
/// `slow2` (blackhole).
fn fan_out_pipeline(dir: &Path, checkpoint: &str) -> String {
    let yaml = format!(
        r#"name: fan_out
parallelism: 2
state: {{dir: {state}}}
checkpoint: {{interval: 300ms, {checkpoint}}}
sources:
  - {{name: gen, type: datagen, rows: {FAN_OUT_ROWS}, fields: {{id: {{kind: sequence}}}}}}
operators:
  - {{name: unique, type: dedup, input: gen, key: [id], ttl: 1h}}
sinks:
  - {{name: raw, type: file, input: gen, path: {raw}}}
  - {{name: slow, type: blackhole, input: gen, rate_limit: 3000}}
  - {{name: out, type: file, input: unique, path: {out}}}
  - {{name: slow2, type: blackhole, input: unique, rate_limit: 3000}}
"#,
        state = dir.join("state").display(),
        raw = dir.join("raw").display(),
        out = dir.join("out").display(),
    );
    write_pipeline(dir, "fan_out", &yaml)
}

/// Each of `0..rows` exactly once in the sink at `dir` (the exact oracle).
#[track_caller]
fn assert_each_id_once(what: &str, dir: &Path, rows: u64) {
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    let lines = sink_lines(dir);
    for l in &lines {
        let id = parse(l)["id"].as_u64().unwrap_or_else(|| panic!("{what}: no integer id in {l}"));
        *seen.entry(id).or_default() += 1;
    }
    let doubled: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).map(|(id, n)| (*id, *n)).take(5).collect();
    let missing: Vec<u64> = (0..rows).filter(|id| !seen.contains_key(id)).take(5).collect();
    assert!(
        doubled.is_empty() && missing.is_empty() && seen.len() as u64 == rows,
        "{what}: {} lines for {rows} ids ({} distinct); doubled e.g. {doubled:?}, missing e.g. {missing:?}",
        lines.len(),
        seen.len()
    );
    let hidden = hidden_files(dir);
    assert!(hidden.is_empty(), "{what}: in-progress files left: {hidden:?}");
}

/// How the first run of a case ends.
enum Stop {
    /// `WEIR_FAULTS=crash=after_metadata:N`.
    CrashAfterMetadata(u32),
    /// SIGTERM once checkpoint N is on disk.
    SigtermAfter(u32),
}

/// Run the fan-out pipeline, end it by `stop`, restore the latest
/// checkpoint and finish; every id once in both file sinks. Returns the
/// number of in-flight records the restore took back.
fn fan_out_case(what: &str, checkpoint: &str, stop: Stop) -> u64 {
    let dir = tmp();
    let pipeline = fan_out_pipeline(dir.path(), checkpoint);
    let state = dir.path().join("state");
    let first = match stop {
        Stop::CrashAfterMetadata(n) => {
            let o = weir_run(&pipeline, 2).env("WEIR_FAULTS", format!("crash=after_metadata:{n}")).run();
            o.expect_stderr_contains("injected crash at after_metadata");
            o
        }
        Stop::SigtermAfter(n) => {
            let run = weir_run(&pipeline, 2).spawn();
            let metadata = state.join("checkpoints").join(format!("chk-{n:07}")).join("_metadata");
            assert!(wait_until(Duration::from_secs(20), || metadata.is_file()), "{what}: checkpoint {n} never completed");
            run.terminate();
            let o = run.wait_for(Duration::from_secs(30));
            o.expect_code(0);
            o
        }
    };
    let restored = weir_run(&pipeline, 2).arg("--restore").arg("latest").ok();
    let from = restored_from(&restored.stderr);
    assert!(from.is_some(), "{what}: the restore started from scratch; first run's log:\n{}", first.stderr);
    let in_flight = restored.stderr.lines().find(|l| l.contains("Restoring from checkpoint.")).and_then(|l| log_field(l, "in_flight"));
    eprintln!(
        "{what}: restored checkpoint {from:?} with {in_flight:?} in-flight records (first run completed {:?})",
        completed(&first.stderr)
    );
    assert_each_id_once(&format!("{what}: raw (gen's forward consumer)"), &dir.path().join("raw"), FAN_OUT_ROWS);
    assert_each_id_once(&format!("{what}: out (behind the hash edge)"), &dir.path().join("out"), FAN_OUT_ROWS);
    in_flight.unwrap_or(0)
}

#[test]
fn unaligned_fan_out_restores_each_channel_once() {
    let in_flight = fan_out_case("unaligned, crash after _metadata", "alignment: unaligned", Stop::CrashAfterMetadata(2));
    assert!(in_flight > 0, "the checkpoint held no in-flight records: the case tests nothing");
}

#[test]
fn unaligned_fan_out_restores_each_channel_once_after_sigterm() {
    fan_out_case("unaligned, SIGTERM", "alignment: unaligned", Stop::SigtermAfter(2));
}

#[test]
fn aligned_timeout_fan_out_restores_each_channel_once() {
    // Sources emit their barrier in order in this mode, so the switch must
    // happen at an operator with two inputs whose barriers arrive apart:
    // gen → pre (dedup by id) → unique (dedup by twin, the same sequence:
    // a hash edge, each subtask reading both pre subtasks) → out, slow2.
    // pre[0] stalls at its first barrier; unique times out after 1 ms,
    // switches to unaligned and overtakes what it queued for out and slow2.
    let dir = tmp();
    let out = dir.path().join("out");
    let yaml = format!(
        r#"name: fan_out_timeout
parallelism: 2
state: {{dir: {state}}}
checkpoint: {{interval: 300ms, aligned_timeout: 1ms}}
sources:
  - {{name: gen, type: datagen, rows: {FAN_OUT_ROWS}, fields: {{id: {{kind: sequence}}, twin: {{kind: sequence}}}}}}
operators:
  - {{name: pre, type: dedup, input: gen, key: [id], ttl: 1h}}
  - {{name: unique, type: dedup, input: pre, key: [twin], ttl: 1h}}
sinks:
  - {{name: out, type: file, input: unique, path: {out}}}
  - {{name: slow2, type: blackhole, input: unique, rate_limit: 3000}}
"#,
        state = dir.path().join("state").display(),
        out = out.display(),
    );
    let pipeline = write_pipeline(dir.path(), "fan_out_timeout", &yaml);
    let crashed = weir_run(&pipeline, 2).env("WEIR_FAULTS", "crash=after_metadata:1,stall=pre:0:400ms").run();
    crashed.expect_stderr_contains("injected crash at after_metadata");
    let restored = weir_run(&pipeline, 2).arg("--restore").arg("latest").ok();
    assert_eq!(restored_from(&restored.stderr), Some(1), "restore log:\n{}", restored.stderr);
    let in_flight = restored.stderr.lines().find(|l| l.contains("Restoring from checkpoint.")).and_then(|l| log_field(l, "in_flight"));
    assert!(in_flight.unwrap_or(0) > 0, "checkpoint 1 did not switch with records in flight: the case tests nothing\n{}", crashed.stderr);
    assert_each_id_once("aligned_timeout=1ms: out (unique's file consumer)", &out, FAN_OUT_ROWS);
}

/// Everything under each of `dirs`: every directory, every regular file's
/// bytes, and any other entry (the stale control socket of a crashed run)
/// by its type, to compare before and after a refused command.
fn snapshot_dirs(dirs: &[PathBuf]) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Option<Vec<u8>>>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries {
            let e = e.unwrap();
            let (path, kind) = (e.path(), e.file_type().unwrap());
            if kind.is_dir() {
                out.insert(path.clone(), None);
                walk(&path, out);
            } else if kind.is_file() {
                out.insert(path.clone(), Some(std::fs::read(&path).unwrap()));
            } else {
                out.insert(path, Some(format!("{kind:?}").into_bytes()));
            }
        }
    }
    let mut out = BTreeMap::new();
    for d in dirs {
        walk(d, &mut out);
    }
    out
}

#[test]
fn unmappable_in_flight_restore_exits_2_and_changes_nothing() {
    let dir = tmp();
    let pipeline = fan_out_pipeline(dir.path(), "alignment: unaligned");
    let crashed = weir_run(&pipeline, 2).env("WEIR_FAULTS", "crash=after_metadata:2").run();
    crashed.expect_stderr_contains("injected crash at after_metadata");
    let dirs: Vec<PathBuf> = ["state", "raw", "out"].iter().map(|d| dir.path().join(d)).collect();
    assert!(dirs[0].join("checkpoints").join("chk-0000002").join("_metadata").is_file(), "{}", crashed.stderr);
    let before = snapshot_dirs(&dirs);
    // `slow` reads `unique` now: gen → slow, where the backpressure queued
    // records at every barrier, is gone.
    let refused = weir_run(&pipeline, 2).arg("--restore").arg("latest").set("sinks.slow.input", "unique").run();
    refused.expect_code(2);
    refused.expect_stderr_contains("holds in-flight records on the channel gen[");
    refused.expect_stderr_contains("`slow` now reads `unique`");
    assert!(snapshot_dirs(&dirs) == before, "a refused restore changed the state or output dirs");
    // Restored as it was taken, the same checkpoint is exact.
    weir_run(&pipeline, 2).arg("--restore").arg("latest").ok();
    assert_each_id_once("restored with the old topology after the refusal", &dirs[1], FAN_OUT_ROWS);
    assert_each_id_once("restored with the old topology after the refusal", &dirs[2], FAN_OUT_ROWS);
}

/// Records per run of the two-sink pipeline.
const TWO_SINK_ROWS: u64 = 20_000;

#[test]
fn changing_one_sinks_input_keeps_the_other_sinks_staged_parts() {
    // gen → unique → s1, s2 runs as [gen] [unique] [s1] [s2]; with s2 reading
    // gen it runs as [gen] [unique, s1] [s2]: s1's staged parts must follow
    // s1, not its old chain index.
    let dir = tmp();
    let (s1, s2) = (dir.path().join("s1"), dir.path().join("s2"));
    let yaml = format!(
        r#"name: two_sinks
parallelism: 2
state: {{dir: {state}}}
checkpoint: {{interval: 300ms}}
sources:
  - {{name: gen, type: datagen, rows: {TWO_SINK_ROWS}, rate_limit: 5000, fields: {{id: {{kind: sequence}}}}}}
operators:
  - {{name: unique, type: dedup, input: gen, key: [id], ttl: 1h}}
sinks:
  - {{name: s1, type: file, input: unique, path: {s1}}}
  - {{name: s2, type: file, input: unique, path: {s2}}}
"#,
        state = dir.path().join("state").display(),
        s1 = s1.display(),
        s2 = s2.display(),
    );
    let pipeline = write_pipeline(dir.path(), "two_sinks", &yaml);
    let crashed = weir_run(&pipeline, 2).env("WEIR_FAULTS", "crash=after_metadata:3").run();
    crashed.expect_stderr_contains("injected crash at after_metadata");
    let restored = weir_run(&pipeline, 2).arg("--restore").arg("latest").set("sinks.s2.input", "gen").ok();
    assert_eq!(restored_from(&restored.stderr), Some(3), "restore log:\n{}", restored.stderr);
    assert_each_id_once("s1 (input unchanged, now chained to unique)", &s1, TWO_SINK_ROWS);
    assert_each_id_once("s2 (input changed to gen)", &s2, TWO_SINK_ROWS);
}

/// Lines of the dead-letter case: enough that the source is still held
/// back by `slow` when checkpoint 2 is taken.
const DEAD_LETTER_ROWS: u64 = 40_000;

/// A file source with `on_error: dead_letter` runs the dead letter's commit
/// operator after its own chain: what its unaligned barrier overtook on its
/// channels to `unique` (backpressured by `slow`) must still go back on
/// them (chaos seed 200186 lost a batch that way).
#[test]
fn unaligned_restore_gives_back_what_a_source_with_a_dead_letter_had_in_flight() {
    let dir = tmp();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    let mut text = String::new();
    for id in 0..DEAD_LETTER_ROWS {
        text.push_str(&format!("{{\"id\":{id}}}\n"));
        if id % 5000 == 17 {
            text.push_str("not json\n");
        }
    }
    for (i, half) in text.lines().collect::<Vec<_>>().chunks(DEAD_LETTER_ROWS as usize / 2 + 8).enumerate() {
        std::fs::write(input.join(format!("part-{i}.jsonl")), half.join("\n") + "\n").unwrap();
    }
    let (raw, out) = (dir.path().join("raw"), dir.path().join("out"));
    let yaml = format!(
        r#"name: fan_out_dead_letter
parallelism: 2
state: {{dir: {state}}}
checkpoint: {{interval: 300ms, alignment: unaligned}}
sources:
  - {{name: src, type: file, path: {input}, on_error: dead_letter, dead_letter: {dead}}}
operators:
  - {{name: unique, type: dedup, input: src, key: [id], ttl: 1h}}
sinks:
  - {{name: raw, type: file, input: src, path: {raw}}}
  - {{name: out, type: file, input: unique, path: {out}}}
  - {{name: slow, type: blackhole, input: unique, rate_limit: 10000}}
"#,
        state = dir.path().join("state").display(),
        input = input.display(),
        dead = dir.path().join("dead").join("bad.jsonl").display(),
        raw = raw.display(),
        out = out.display(),
    );
    let pipeline = write_pipeline(dir.path(), "fan_out_dead_letter", &yaml);
    let crashed = weir_run(&pipeline, 2).env("WEIR_FAULTS", "crash=after_metadata:2").run();
    crashed.expect_stderr_contains("injected crash at after_metadata");
    let restored = weir_run(&pipeline, 2).arg("--restore").arg("latest").ok();
    assert!(restored_from(&restored.stderr).is_some(), "the restore started from scratch:\n{}", crashed.stderr);
    let in_flight = restored.stderr.lines().find(|l| l.contains("Restoring from checkpoint.")).and_then(|l| log_field(l, "in_flight"));
    assert!(in_flight.unwrap_or(0) > 0, "the checkpoint held no in-flight records: the case tests nothing\n{}", crashed.stderr);
    assert_each_id_once("source with a dead letter: raw", &raw, DEAD_LETTER_ROWS);
    assert_each_id_once("source with a dead letter: out (behind the hash edge)", &out, DEAD_LETTER_ROWS);
    let dead = std::fs::read_to_string(dir.path().join("dead").join("bad.jsonl")).unwrap_or_default();
    assert_eq!(dead.lines().filter(|l| l.contains("not json")).count(), 8, "each bad line once in the dead letter:\n{dead}");
}

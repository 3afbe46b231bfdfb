//! `count_distinct` over thousands of distinct values per key (issue 34
//! #8: its values became entries of their own), through the real binary:
//! every window type and running aggregates at parallelism 1 and 3, and a
//! crash at parallelism 2 restored at 3 on both state backends, each
//! compared with the reference model computed from the input. Next to it,
//! `approx_count_distinct` must be within 5 % of the exact count.

use super::ckpt::{both_backends, kill_after, restored_from, write_pipeline, Backend};
use super::records::{assert_same_records, parse, Obj};
use super::reference::{self, Agg, Func::*, Window};
use super::rng::Rng;
use super::util::{sink_lines, tmp, weir_run};

const AGGS: &[Agg] = &[(Count, None, "n"), (CountDistinct, Some("v"), "d")];

/// Rows of 3 users over time, in bursts 40 s apart (so sessions of gap 5 s
/// end), values from a few thousand of each type: ints, the same numbers as
/// floats (`7.0` is `7`), strings, and some nulls.
fn input(rng: &mut Rng, rows: usize) -> Vec<String> {
    (0..rows)
        .map(|i| {
            let ts = (i / 1500) as u64 * 40_000 + (i % 1500) as u64 * 3 + rng.range(0, 20);
            let n = rng.range(0, 3000);
            let v = match rng.range(0, 10) {
                0..=4 => n.to_string(),
                5 | 6 => format!("{n}.0"),
                7 | 8 => format!("\"s{}\"", n % 1000),
                _ => "null".into(),
            };
            format!(r#"{{"user":"u{}","v":{v},"ts":{ts}}}"#, rng.range(0, 3))
        })
        .collect()
}

/// The pipeline over `dir/in.jsonl`; `crash`: with checkpoints and a rate
/// limit, so a kill lands mid-run after some checkpoints.
fn pipeline(dir: &std::path::Path, window: &str, crash: bool) -> String {
    let window = if window.is_empty() { String::new() } else { format!("    window: {window}\n") };
    let (extra, rate) = match crash {
        true => ("checkpoint: {interval: 100ms, mode: exactly_once, alignment: aligned}\n", "    rate_limit: 3000\n"),
        false => ("", ""),
    };
    let yaml = format!(
        r#"name: distinct_sets
state: {{dir: {state}}}
{extra}sources:
  - name: rows
    type: file
    path: {input}
{rate}    event_time: {{field: ts, max_out_of_orderness: 1s}}
operators:
  - name: per_user
    type: aggregate
    input: rows
    key: [user]
{window}    aggregates:
      - {{fn: count, as: n}}
      - {{fn: count_distinct, field: v, as: d}}
      - {{fn: approx_count_distinct, field: v, as: approx}}
sinks:
  - {{name: out, type: file, input: per_user, path: {out}}}
"#,
        state = dir.join("state").display(),
        input = dir.join("in.jsonl").display(),
        out = dir.join("out").display(),
    );
    write_pipeline(dir, "distinct_sets", &yaml)
}

/// The last line per key (a running aggregate's final values), or all lines.
fn results(lines: Vec<String>, running: bool) -> Vec<String> {
    if !running {
        return lines;
    }
    let mut last = std::collections::BTreeMap::new();
    for l in lines {
        last.insert(parse(&l)["user"].to_string(), l);
    }
    last.into_values().collect()
}

/// The lines without `approx`, after checking it is within 5 % of `d`.
#[track_caller]
fn check_approx(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let mut o: Obj = parse(l);
            let (approx, exact) = (o["approx"].as_f64().unwrap(), o["d"].as_f64().unwrap());
            assert!((approx - exact).abs() <= (exact * 0.05).max(1.0), "approx_count_distinct too far: {l}");
            o.shift_remove("approx");
            serde_json::to_string(&o).unwrap()
        })
        .collect()
}

const WINDOWS: &[(&str, Option<Window>)] = &[
    ("{type: tumbling, size: 10s}", Some(Window::Tumbling { size: 10_000 })),
    ("{type: sliding, size: 20s, slide: 10s}", Some(Window::Sliding { size: 20_000, slide: 10_000 })),
    ("{type: session, gap: 5s}", Some(Window::Session { gap: 5_000 })),
    ("", None),
];

#[test]
fn count_distinct_of_thousands_of_values_per_key_matches_the_reference_in_every_window() {
    let mut rng = Rng::from_env("distinct sets");
    let lines = input(&mut rng, 9_000);
    for (yaml, window) in WINDOWS {
        let expected = reference::aggregate(&lines, &["user"], "ts", *window, AGGS);
        assert!(expected.iter().any(|o| o["d"].as_i64() > Some(300)), "hundreds of distinct values in a group");
        for p in [1, 3] {
            let dir = tmp();
            std::fs::write(dir.path().join("in.jsonl"), lines.join("\n") + "\n").unwrap();
            weir_run(&pipeline(dir.path(), yaml, false), p).ok();
            let got = check_approx(&results(sink_lines(&dir.path().join("out")), window.is_none()));
            assert_same_records(&format!("{yaml:?} -p {p}"), &got, &expected);
        }
    }
}

both_backends! {
    fn count_distinct_crashed_at_parallelism_2_restores_at_3(backend: Backend) {
        let mut rng = Rng::from_env("distinct sets crash");
        let lines = input(&mut rng, 6_000);
        for (yaml, window) in [WINDOWS[2], WINDOWS[3]] {
            let dir = tmp();
            std::fs::write(dir.path().join("in.jsonl"), lines.join("\n") + "\n").unwrap();
            let pipeline = pipeline(dir.path(), yaml, true);
            // An incremental RocksDB checkpoint is tied to its subtasks: restoring at another parallelism needs a canonical one.
            let configure = |w| match backend {
                Backend::RocksDb => backend.apply(w).set("state.incremental", "false"),
                Backend::Memory => backend.apply(w),
            };
            let mut first = configure(weir_run(&pipeline, 2)).spawn();
            assert!(kill_after(&mut first, std::time::Duration::from_millis(1200)), "the run ended before the kill");
            let o = configure(weir_run(&pipeline, 3).arg("--restore").arg("latest")).ok();
            assert!(restored_from(&o.stderr).is_some(), "no checkpoint to restore from: {}", o.stderr);
            let expected = reference::aggregate(&lines, &["user"], "ts", window, AGGS);
            let got = check_approx(&results(sink_lines(&dir.path().join("out")), window.is_none()));
            assert_same_records(&format!("{yaml:?} crash at p=2, restored at p=3, {backend:?}"), &got, &expected);
        }
    }
}

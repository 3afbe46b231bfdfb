//! The interval, window and temporal joins (issue 28) end to end: every kind
//! at parallelism 1 to 4 on both backends against the reference model,
//! kill -9 and `--restore latest` exactly once, and a stop-with-savepoint
//! restored at another parallelism.

use std::path::Path;
use std::time::Duration;

use super::ckpt::{abs, both_backends, kill_after, restored_from, write_pipeline, Backend, Rng};
use super::records::{assert_same_records, canonical, parse, Obj};
use super::reference::{self, JoinKind, JoinSide};
use super::savepoint::savepoint_path;
use super::util::{hidden_files, input_lines, sink_lines, tmp, wait_until, weir, weir_run, Weir, RUN_TIMEOUT};

const PIPELINE: &str = "pipelines/join.yaml";
const ORDERS: [&str; 3] = [
    "testdata/inputs/join/orders/orders-0.jsonl",
    "testdata/inputs/join/orders/orders-1.jsonl",
    "testdata/inputs/join/orders/orders-2.jsonl",
];
const PAYMENTS: [&str; 2] = ["testdata/inputs/join/payments/payments-0.jsonl", "testdata/inputs/join/payments/payments-1.jsonl"];
const KINDS: [(&str, JoinKind); 4] =
    [("inner", JoinKind::Inner), ("left", JoinKind::Left), ("right", JoinKind::Right), ("full", JoinKind::Full)];

const WINDOW_PIPELINE: &str = "pipelines/window_join.yaml";

const TEMPORAL_PIPELINE: &str = "pipelines/temporal_join.yaml";
const USERS: [&str; 2] = ["testdata/inputs/join/users/users-0.jsonl", "testdata/inputs/join/users/users-1.jsonl"];

/// The reference's sides of the two example pipelines.
fn sides(f: impl FnOnce(&JoinSide, &JoinSide) -> Vec<Obj>) -> Vec<Obj> {
    let side = |files: &[&str]| {
        let splits: Vec<Vec<String>> = files.iter().map(|f| input_lines(f)).collect();
        reference::split_watermarks(&splits, "ts", 2000)
    };
    let (orders, payments) = (side(&ORDERS), side(&PAYMENTS));
    let left = JoinSide { lines: &orders, key: &["order_id"], ts: "ts", name: "order" };
    let right = JoinSide { lines: &payments, key: &["order"], ts: "ts", name: "payment" };
    f(&left, &right)
}

/// What `pipelines/temporal_join.yaml` must output with `kind`.
fn expected_temporal(kind: JoinKind) -> Vec<Obj> {
    expected_temporal_ttl(kind, None)
}

/// The temporal join's TTL in `golden_temporal_join_with_a_ttl_…`, in ms.
const TTL_MS: i64 = 5_000;

fn expected_temporal_with_ttl(kind: JoinKind) -> Vec<Obj> {
    expected_temporal_ttl(kind, Some(TTL_MS))
}

fn expected_temporal_ttl(kind: JoinKind, ttl: Option<i64>) -> Vec<Obj> {
    let side = |files: &[&str]| reference::split_watermarks(&files.iter().map(|f| input_lines(f)).collect::<Vec<_>>(), "ts", 2000);
    let (orders, users) = (side(&ORDERS), side(&USERS));
    let left = JoinSide { lines: &orders, key: &["user"], ts: "ts", name: "order" };
    let right = JoinSide { lines: &users, key: &["user"], ts: "ts", name: "user" };
    reference::temporal_join(&left, &right, kind, &|o| o.get("op").and_then(|v| v.as_str()) == Some("d"), ttl)
}

/// What `pipelines/join.yaml` must output with `kind`, from the reference model.
fn expected(kind: JoinKind) -> Vec<Obj> {
    sides(|l, r| reference::interval_join(l, r, -1000, 10_000, kind))
}

/// What `pipelines/window_join.yaml` must output with `kind`.
fn expected_windows(kind: JoinKind) -> Vec<Obj> {
    sides(|l, r| reference::window_join(l, r, 10_000, 5_000, kind))
}

fn with_backend(w: Weir, backend: Backend, state: &Path) -> Weir {
    backend.apply(w.set("state.dir", state))
}

fn golden(backend: Backend, pipeline: &str, join: &str, expected: fn(JoinKind) -> Vec<Obj>) {
    golden_kinds(backend, pipeline, join, expected, &KINDS)
}

fn golden_kinds(backend: Backend, pipeline: &str, join: &str, expected: fn(JoinKind) -> Vec<Obj>, kinds: &[(&str, JoinKind)]) {
    for &(name, kind) in kinds {
        let want = expected(kind);
        assert!(want.len() > 100, "{name}: the data must give matches");
        for p in 1..=4 {
            let dir = tmp();
            let out = dir.path().join("out");
            let run = weir_run(pipeline, p).set(&format!("operators.{join}.kind"), name).set("sinks.out.path", &out);
            with_backend(run, backend, &dir.path().join("state")).ok();
            assert!(hidden_files(&out).is_empty());
            assert_same_records(&format!("{pipeline} kind {name} -p {p} {backend:?}"), &sink_lines(&out), &want);
        }
        // Batches of one record: only timing changes, never the result.
        let dir = tmp();
        let out = dir.path().join("out");
        let run = weir_run(pipeline, 3).set(&format!("operators.{join}.kind"), name).set("sinks.out.path", &out);
        // The sources by index: the left one first in every example.
        let run = run.set("sources.0.batch_size", "1").set("sources.1.batch_size", "3");
        with_backend(run, backend, &dir.path().join("state")).ok();
        assert_same_records(&format!("{pipeline} kind {name} -p 3, batch_size 1 and 3, {backend:?}"), &sink_lines(&out), &want);
    }
}

#[test]
fn the_reference_has_unmatched_and_late_records_of_both_sides() {
    // The test data must exercise what the join decides.
    let (inner, full) = (expected(JoinKind::Inner).len(), expected(JoinKind::Full).len());
    let (left, right) = (expected(JoinKind::Left).len(), expected(JoinKind::Right).len());
    assert!(inner < left && inner < right && left < full && right < full, "{inner} {left} {right} {full}");
    let late = ORDERS.iter().chain(&PAYMENTS).flat_map(|f| input_lines(f)).filter(|l| l.contains("\"late\"")).count();
    assert!(late > 0);
    assert!(expected(JoinKind::Full).iter().all(|o| !o.values().any(|v| v.get("late").is_some())), "late lines never join");
}

#[test]
fn golden_interval_join_every_kind_at_p1_to_4_memory() {
    golden(Backend::Memory, PIPELINE, "paid", expected);
}

#[test]
fn golden_interval_join_every_kind_at_p1_to_4_rocksdb() {
    golden(Backend::RocksDb, PIPELINE, "paid", expected);
}

#[test]
fn golden_window_join_every_kind_at_p1_to_4_memory() {
    golden(Backend::Memory, WINDOW_PIPELINE, "together", expected_windows);
}

#[test]
fn golden_window_join_every_kind_at_p1_to_4_rocksdb() {
    golden(Backend::RocksDb, WINDOW_PIPELINE, "together", expected_windows);
}

#[test]
fn the_window_reference_has_unmatched_records_of_both_sides() {
    let (inner, full) = (expected_windows(JoinKind::Inner).len(), expected_windows(JoinKind::Full).len());
    assert!(inner < expected_windows(JoinKind::Left).len() && inner < expected_windows(JoinKind::Right).len(), "{inner}");
    assert!(expected_windows(JoinKind::Left).len() < full);
}

#[test]
fn golden_temporal_join_inner_and_left_at_p1_to_4_memory() {
    golden_kinds(Backend::Memory, TEMPORAL_PIPELINE, "enriched", expected_temporal, &KINDS[..2]);
}

#[test]
fn golden_temporal_join_inner_and_left_at_p1_to_4_rocksdb() {
    golden_kinds(Backend::RocksDb, TEMPORAL_PIPELINE, "enriched", expected_temporal, &KINDS[..2]);
}

/// `pipelines/temporal_join.yaml` with `temporal.ttl`, per kind, at p = 1..4.
fn golden_ttl(backend: Backend) {
    let yaml = std::fs::read_to_string(abs(TEMPORAL_PIPELINE))
        .unwrap()
        .replace("testdata/", &format!("{}/", abs("testdata")))
        .replace("temporal: {delete_when: \"op == 'd'\"}", &format!("temporal: {{delete_when: \"op == 'd'\", ttl: {TTL_MS}ms}}"));
    assert!(yaml.contains("ttl:"), "the example's temporal settings changed");
    let dir = tmp();
    let pipeline = write_pipeline(dir.path(), "ttl", &yaml);
    golden_kinds(backend, &pipeline, "enriched", expected_temporal_with_ttl, &KINDS[..2]);
}

#[test]
fn golden_temporal_join_with_a_ttl_at_p1_to_4_memory() {
    golden_ttl(Backend::Memory);
}

#[test]
fn golden_temporal_join_with_a_ttl_at_p1_to_4_rocksdb() {
    golden_ttl(Backend::RocksDb);
}

#[test]
fn the_ttl_reference_leaves_orders_without_their_stale_version() {
    let (all, ttl) = (expected_temporal(JoinKind::Inner), expected_temporal_with_ttl(JoinKind::Inner));
    assert!(ttl.len() > 100 && ttl.len() < all.len(), "the TTL must matter: {} of {}", ttl.len(), all.len());
    assert_eq!(expected_temporal_with_ttl(JoinKind::Left).len(), expected_temporal(JoinKind::Left).len(), "left: every order, once");
}

/// `as_of: processing_time`: which version an order gets depends on timing,
/// so the check is what holds whatever the timing: every order is output
/// once, alone or with a version of its own user that is in the input.
#[test]
fn a_processing_time_lookup_outputs_every_order_once_with_a_version_of_its_user() {
    let yaml = std::fs::read_to_string(abs(TEMPORAL_PIPELINE))
        .unwrap()
        .replace("testdata/", &format!("{}/", abs("testdata")))
        .replace("temporal: {delete_when: \"op == 'd'\"}", "temporal: {delete_when: \"op == 'd'\", as_of: processing_time}");
    assert!(yaml.contains("as_of"), "the example's temporal settings changed");
    let dir = tmp();
    let pipeline = write_pipeline(dir.path(), "lookup", &yaml);
    // Members sorted: a nested object's order is not the point here.
    let sorted = |v: &serde_json::Value| -> String {
        let mut members: Vec<(String, serde_json::Value)> = v.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        members.sort_by(|a, b| a.0.cmp(&b.0));
        canonical(&members.into_iter().collect())
    };
    let line = |l: &String| serde_json::from_str::<serde_json::Value>(l).unwrap();
    let orders: Vec<String> = ORDERS.iter().flat_map(|f| input_lines(f)).map(|l| sorted(&line(&l))).collect();
    let users: std::collections::HashSet<String> = USERS.iter().flat_map(|f| input_lines(f)).map(|l| sorted(&line(&l))).collect();
    for p in [1, 3] {
        let out = dir.path().join(format!("out-{p}"));
        weir_run(&pipeline, p).set("sinks.out.path", &out).ok();
        let got: Vec<Obj> = sink_lines(&out).iter().map(|l| parse(l)).collect();
        let mut seen: Vec<String> = got.iter().map(|o| sorted(&o["order"])).collect();
        let mut want = orders.clone();
        seen.sort();
        want.sort();
        assert_eq!(seen, want, "-p {p}: every order once, late ones too (nothing is late in a lookup)");
        for o in &got {
            if let Some(user) = o.get("user") {
                assert!(users.contains(&sorted(user)), "-p {p}: {user:?} is no input version");
                assert_eq!(user["user"], o["order"]["user"], "-p {p}: a version of another user");
                assert_ne!(user["op"], "d", "-p {p}: a deletion is no version");
            }
        }
    }
}

#[test]
fn the_temporal_reference_has_versions_deletions_ties_and_unmatched_orders() {
    let (inner, left) = (expected_temporal(JoinKind::Inner), expected_temporal(JoinKind::Left));
    assert!(inner.len() > 200 && inner.len() < left.len(), "{} {}", inner.len(), left.len());
    let user = |o: &Obj| o.get("user").cloned();
    // One user seen with different tiers: versions change what an order gets.
    let tiers: std::collections::HashSet<String> =
        inner.iter().filter(|o| user(o).unwrap()["user"] == "u00").map(|o| user(o).unwrap()["tier"].to_string()).collect();
    assert!(tiers.len() > 1, "{tiers:?}");
    let users = USERS.iter().flat_map(|f| input_lines(f)).collect::<Vec<_>>();
    assert!(users.iter().any(|l| l.contains("\"op\":\"d\"")) && users.iter().any(|l| l.contains("\"note\":\"tie\"")));
    assert!(inner.iter().any(|o| user(o).unwrap().get("note").is_some()), "a tie decided by text shows in the output");
}

/// The three example pipelines and what each outputs (as they are: a left
/// interval join, an inner window join, a left temporal join).
fn example_joins() -> [(&'static str, Vec<Obj>); 3] {
    [
        (PIPELINE, expected(JoinKind::Left)),
        (WINDOW_PIPELINE, expected_windows(JoinKind::Inner)),
        (TEMPORAL_PIPELINE, expected_temporal(JoinKind::Left)),
    ]
}

/// `pipeline` with checkpoints every 100 ms, both sources slowed down, into `dir`.
fn checkpointed(dir: &Path, pipeline: &str, alignment: &str) -> String {
    let yaml = std::fs::read_to_string(abs(pipeline))
        .unwrap()
        .replace("testdata/", &format!("{}/", abs("testdata")))
        .replace("parallelism: 2\n", &format!("parallelism: 2\ncheckpoint: {{interval: 100ms, {alignment}}}\n"))
        .replace("max_out_of_orderness: 2s}", "max_out_of_orderness: 2s}\n    rate_limit: 250");
    write_pipeline(dir, "join", &yaml)
}

both_backends! {
    fn crash_and_restore_latest_is_exactly_once(backend: Backend) {
        let modes = ["alignment: aligned", "alignment: unaligned", "aligned_timeout: 1ms", "mode: at_least_once"];
        for ((example, want), alignment) in example_joins().into_iter().flat_map(|j| modes.map(|m| (j.clone(), m))) {
            let dir = tmp();
            let pipeline = checkpointed(dir.path(), example, alignment);
            let (state, out) = (dir.path().join("state"), dir.path().join("out"));
            let cmd = || with_backend(weir_run(&pipeline, 2).set("sinks.out.path", &out), backend, &state);
            let mut rng = Rng::from_env("join crash");
            let mut kills = 0;
            for i in 0..4 {
                let mut run = if i == 0 { cmd() } else { cmd().arg("--restore").arg("latest") }.spawn();
                if !kill_after(&mut run, rng.millis(300, 900)) {
                    run.wait_for(RUN_TIMEOUT).expect_code(0);
                    break;
                }
                kills += 1;
            }
            let last = cmd().arg("--restore").arg("latest").ok();
            assert!(kills > 0, "{alignment}: the run ended before the first kill");
            let from = restored_from(&last.stderr);
            eprintln!("{example} {alignment} {backend:?}: {kills} kills, the last run restored checkpoint {from:?}");
            assert!(from.is_some(), "{alignment}: no checkpoint completed before the kills");
            assert!(hidden_files(&out).is_empty());
            let what = format!("{example} after {kills} kills, {alignment}, {backend:?}");
            if alignment.contains("at_least_once") {
                // Records after a barrier may be in the snapshot and be
                // processed again: nothing lost, copies allowed.
                let got: std::collections::HashSet<String> = sink_lines(&out).iter().map(|l| canonical(&parse(l))).collect();
                let lost = want.iter().filter(|o| !got.contains(&canonical(o))).count();
                assert_eq!(lost, 0, "{what}: records lost");
            } else {
                assert_same_records(&what, &sink_lines(&out), &want);
            }
        }
    }
}

both_backends! {
    fn a_savepoint_restores_at_another_parallelism_and_backend(backend: Backend) {
        // Savepoints are canonical: taken on `backend`, restored on the other.
        let other = if backend == Backend::Memory { Backend::RocksDb } else { Backend::Memory };
        for (example, want) in example_joins() {
            let dir = tmp();
            let pipeline = checkpointed(dir.path(), example, "alignment: aligned");
            let (state, out, target) = (dir.path().join("state"), dir.path().join("out"), dir.path().join("sps"));
            let run = with_backend(weir_run(&pipeline, 1).set("sinks.out.path", &out), backend, &state).spawn();
            assert!(wait_until(Duration::from_secs(30), || !sink_lines(&out).is_empty()), "no output published");
            let trigger = weir(&["savepoint", "trigger", &pipeline, "--stop", "--target", &target.display().to_string()]);
            let sp = savepoint_path(&trigger.set("state.dir", &state).run());
            run.wait_for(Duration::from_secs(30)).expect_code(0);
            let partial = sink_lines(&out).len();
            let restore = weir(&["restore", &sp.display().to_string(), &pipeline, "--no-progress", "-p", "3"]);
            let o = with_backend(restore.set("sinks.out.path", &out), other, &state).run();
            o.expect_code(0);
            o.expect_stderr_contains("Rescaling");
            assert!(partial < want.len(), "the savepoint was taken after the end of input");
            let what = format!("{example}: savepoint at p 1 on {backend:?}, restored at p 3 on {other:?}");
            assert_same_records(&what, &sink_lines(&out), &want);
        }
    }
}

#[test]
fn validate_reports_join_errors_at_their_place() {
    let dir = tmp();
    let yaml = std::fs::read_to_string(abs(PIPELINE))
        .unwrap()
        .replace("right: [order]", "right: [order, paid]")
        .replace("lower: -1s", "lower: 11s");
    let path = write_pipeline(dir.path(), "bad", &yaml);
    let o = weir(&["validate", &path]).run();
    o.expect_code(2);
    let line = |needle: &str| yaml.lines().position(|l| l.contains(needle)).unwrap() + 1;
    o.expect_stderr_contains(&format!("bad.yaml:{}:", line("right: [order, paid]")));
    o.expect_stderr_contains("keys of different arity");
    o.expect_stderr_contains(&format!("bad.yaml:{}:", line("lower: 11s")));
    o.expect_stderr_contains("`lower` (11s) is above `upper` (10s)");
}

#[test]
fn late_records_of_both_sides_go_to_the_dead_letter() {
    let dir = tmp();
    let (out, late) = (dir.path().join("out"), dir.path().join("late.jsonl"));
    let run = weir_run(PIPELINE, 2).set("sinks.out.path", &out).set("operators.paid.dead_letter", &late);
    run.set("state.dir", dir.path().join("state")).ok();
    let mut got: Vec<String> = std::fs::read_to_string(&late)
        .unwrap()
        .lines()
        .map(|l| {
            let entry = parse(l);
            assert!(entry["reason"].as_str().unwrap().starts_with("late record: at or before watermark"), "{l}");
            entry["record"].as_str().unwrap().to_string()
        })
        .collect();
    // The reference's late lines: at or before their split's watermark.
    let mut want: Vec<String> = [&ORDERS[..], &PAYMENTS[..]]
        .iter()
        .flat_map(|files| reference::split_watermarks(&files.iter().map(|f| input_lines(f)).collect::<Vec<_>>(), "ts", 2000))
        .filter(|(l, wm)| parse(l)["ts"].as_i64().unwrap() <= *wm)
        .map(|(l, _)| l)
        .collect();
    got.sort();
    want.sort();
    assert_eq!(want.len(), 20);
    assert_eq!(got, want);
    assert_same_records("with a dead letter", &sink_lines(&out), &expected(JoinKind::Left));
}

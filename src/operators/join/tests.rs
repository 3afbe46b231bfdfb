//! The interval join driven directly: matches in either arrival order,
//! outer joins emitting on the watermark only, lateness, state cleanup.

use super::*;
use crate::operators::testing::Harness;
use crate::types::{key_group_of, Value};

const MAXP: u16 = 8;

fn spec(kind: JoinKind, lower: Millis, upper: Millis) -> JoinSpec {
    JoinSpec {
        left_key: vec!["id".into()],
        right_key: vec!["oid".into()],
        kind,
        lower,
        upper,
        left_as: "o".into(),
        right_as: "p".into(),
        window: None,
        temporal: None,
        dead_letter: None,
    }
}

fn harness(kind: JoinKind, lower: Millis, upper: Millis) -> Harness<Join> {
    Harness::new(Join::new("j", &spec(kind, lower, upper), vec![0], vec![0], Vec::new()).unwrap(), "j", 0..MAXP, MAXP)
}

/// A record of key `id` at `t`, with its split watermark `wm`.
fn rec(id: i64, t: Millis, tag: &str, wm: Millis) -> Record {
    let mut key = Vec::new();
    Value::Int(id).encode_key(&mut key);
    let mut r = Record::new(vec![Value::Int(id)], format!("{{\"id\":{id},\"t\":{t},\"x\":\"{tag}\"}}").into_boxed_str(), Some(t));
    r.key_group = key_group_of(&key, MAXP);
    r.split_watermark = wm;
    r
}

fn left(h: &mut Harness<Join>, rs: Vec<Record>) -> Vec<(String, Millis)> {
    texts(h.run(|op, ctx, out| op.process(rs, ctx, out)))
}

fn right(h: &mut Harness<Join>, rs: Vec<Record>) -> Vec<(String, Millis)> {
    texts(h.run(|op, ctx, out| op.process_right(rs, ctx, out)))
}

fn watermark(h: &mut Harness<Join>, w: Millis) -> Vec<(String, Millis)> {
    h.watermark = w;
    let mut out = texts(h.run(|op, ctx, out| op.on_watermark(ctx, out)));
    out.sort();
    out
}

fn texts(rs: Vec<Record>) -> Vec<(String, Millis)> {
    rs.into_iter().map(|r| (r.raw.to_string(), r.event_time.unwrap_or(Millis::MIN))).collect()
}

const NO_WM: Millis = Millis::MIN;

#[test]
fn a_pair_is_emitted_once_by_the_second_to_arrive_in_either_order() {
    for left_first in [true, false] {
        let mut h = harness(JoinKind::Inner, -10, 5);
        let (l, r) = (rec(1, 100, "l", NO_WM), rec(1, 104, "r", NO_WM));
        let out = if left_first {
            assert!(left(&mut h, vec![l]).is_empty());
            right(&mut h, vec![r])
        } else {
            assert!(right(&mut h, vec![r]).is_empty());
            left(&mut h, vec![l])
        };
        let text = r#"{"o":{"id":1,"t":100,"x":"l"},"p":{"id":1,"t":104,"x":"r"}}"#;
        assert_eq!(out, [(text.to_string(), 104)], "the later event time; left first: {left_first}");
    }
}

#[test]
fn only_records_of_an_equal_key_within_the_interval_match() {
    let mut h = harness(JoinKind::Inner, -10, 5);
    left(&mut h, vec![rec(1, 100, "l", NO_WM)]);
    // s in [90, 105]: 89 and 106 are out, 90 and 105 in; key 2 never.
    let out = right(
        &mut h,
        vec![rec(1, 89, "a", NO_WM), rec(1, 90, "b", NO_WM), rec(1, 105, "c", NO_WM), rec(1, 106, "d", NO_WM), rec(2, 100, "e", NO_WM)],
    );
    let xs: Vec<bool> = ["\"a\"", "\"b\"", "\"c\"", "\"d\"", "\"e\""].iter().map(|x| out.iter().any(|(t, _)| t.contains(x))).collect();
    assert_eq!(xs, [false, true, true, false, false]);
}

#[test]
fn an_outer_join_emits_the_unmatched_once_the_watermark_passes_its_interval() {
    let mut h = harness(JoinKind::Full, -10, 5);
    left(&mut h, vec![rec(1, 100, "l", NO_WM), rec(2, 100, "m", NO_WM)]);
    right(&mut h, vec![rec(1, 95, "r", NO_WM), rec(3, 100, "q", NO_WM)]);
    // Left at 100 reaches right times up to 105: not before watermark 105.
    assert_eq!(watermark(&mut h, 104), Vec::<(String, Millis)>::new());
    let out = watermark(&mut h, 105);
    assert_eq!(out, [(r#"{"o":{"id":2,"t":100,"x":"m"}}"#.to_string(), 100)], "the matched left record is not emitted again");
    // Right at 100 reaches left times up to 110; right at 95 matched.
    assert_eq!(watermark(&mut h, 109), Vec::<(String, Millis)>::new());
    assert_eq!(watermark(&mut h, 110), [(r#"{"p":{"id":3,"t":100,"x":"q"}}"#.to_string(), 100)]);
    assert_eq!(
        h.state.len(LEFT.records) + h.state.len(RIGHT.records) + h.state.len(LEFT.times) + h.state.len(RIGHT.times),
        0,
        "all cleaned"
    );
}

#[test]
fn a_left_join_emits_unmatched_left_records_only() {
    let mut h = harness(JoinKind::Left, 0, 0);
    left(&mut h, vec![rec(1, 10, "l", NO_WM)]);
    right(&mut h, vec![rec(2, 10, "r", NO_WM)]);
    assert_eq!(watermark(&mut h, 10), [(r#"{"o":{"id":1,"t":10,"x":"l"}}"#.to_string(), 10)]);
    let mut h = harness(JoinKind::Right, 0, 0);
    left(&mut h, vec![rec(1, 10, "l", NO_WM)]);
    right(&mut h, vec![rec(2, 10, "r", NO_WM)]);
    assert_eq!(watermark(&mut h, 10), [(r#"{"p":{"id":2,"t":10,"x":"r"}}"#.to_string(), 10)]);
}

#[test]
fn late_records_are_dropped_counted_and_match_nothing() {
    let mut h = harness(JoinKind::Full, -10, 5);
    right(&mut h, vec![rec(1, 100, "r", NO_WM)]);
    // Its split's watermark is at its own time: late.
    assert!(left(&mut h, vec![rec(1, 100, "l", 100)]).is_empty());
    assert_eq!(h.metrics.dropped_late.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(h.state.len(LEFT.records), 0);
    assert_eq!(watermark(&mut h, 200), [(r#"{"p":{"id":1,"t":100,"x":"r"}}"#.to_string(), 100)]);
}

#[test]
fn duplicates_on_both_sides_give_every_pair() {
    let mut h = harness(JoinKind::Inner, 0, 0);
    left(&mut h, vec![rec(1, 7, "l", NO_WM), rec(1, 7, "l", NO_WM)]);
    assert_eq!(right(&mut h, vec![rec(1, 7, "r", NO_WM), rec(1, 7, "r", NO_WM)]).len(), 4);
}

#[test]
fn a_record_that_arrives_already_done_still_matches_and_leaves_at_the_next_watermark() {
    // Interval entirely in the past: left at 100 matches right in [90, 95].
    let mut h = harness(JoinKind::Left, -10, -5);
    right(&mut h, vec![rec(1, 93, "r", NO_WM)]);
    h.watermark = 97;
    assert_eq!(left(&mut h, vec![rec(1, 100, "l", 97), rec(2, 100, "m", 97)]).len(), 1);
    assert_eq!(watermark(&mut h, 98), [(r#"{"o":{"id":2,"t":100,"x":"m"}}"#.to_string(), 100)]);
}

#[test]
fn the_output_holds_the_fields_needed_downstream() {
    let projection =
        vec![("o.id".to_string(), FieldNeed { required: true, ..FieldNeed::default() }), ("p.x".to_string(), FieldNeed::default())];
    let op = Join::new("j", &spec(JoinKind::Left, 0, 0), vec![0], vec![0], projection).unwrap();
    let mut h = Harness::new(op, "j", 0..MAXP, MAXP);
    h.run(|op, ctx, out| op.process(vec![rec(4, 1, "l", NO_WM)], ctx, out));
    let out = h.run(|op, ctx, out| op.process_right(vec![rec(4, 1, "r", NO_WM)], ctx, out));
    assert_eq!(out[0].fields, [Value::Int(4), Value::Str("r".into())]);
    h.watermark = 5;
    let unmatched = h.run(|op, ctx, out| op.process(vec![rec(5, 9, "l", NO_WM)], ctx, out));
    assert!(unmatched.is_empty());
    h.watermark = 9;
    let out = h.run(|op, ctx, out| op.on_watermark(ctx, out));
    assert_eq!(out[0].fields, [Value::Int(5), Value::Null], "the right side's fields are absent");
}

fn window_harness(kind: JoinKind, window: crate::config::WindowSpec) -> Harness<Join> {
    let spec = JoinSpec { window: Some(window), ..spec(kind, 0, 0) };
    Harness::new(Join::new("j", &spec, vec![0], vec![0], Vec::new()).unwrap(), "j", 0..MAXP, MAXP)
}

fn tumbling(ms: u64) -> crate::config::WindowSpec {
    crate::config::WindowSpec::Tumbling { size: std::time::Duration::from_millis(ms) }
}

#[test]
fn a_window_join_emits_the_pairs_of_a_window_when_it_fires() {
    let mut h = window_harness(JoinKind::Inner, tumbling(10));
    assert!(left(&mut h, vec![rec(1, 5, "l", NO_WM)]).is_empty(), "nothing before the window fires");
    assert!(right(&mut h, vec![rec(1, 7, "r", NO_WM), rec(1, 12, "s", NO_WM), rec(2, 8, "q", NO_WM)]).is_empty());
    assert!(watermark(&mut h, 8).is_empty());
    let text = r#"{"window_start":0,"window_end":10,"o":{"id":1,"t":5,"x":"l"},"p":{"id":1,"t":7,"x":"r"}}"#;
    assert_eq!(watermark(&mut h, 9), [(text.to_string(), 9)], "stamped end - 1");
    assert_eq!(h.state.len(LEFT.records) + h.state.len(RIGHT.records), 1, "only [10, 20) is left");
    assert!(watermark(&mut h, 19).is_empty(), "1@12 has no left partner in [10, 20)");
    assert_eq!(h.state.len(RIGHT.records) + h.state.len(RIGHT.times), 0);
}

#[test]
fn an_outer_window_join_emits_per_window_and_late_records_join_only_open_windows() {
    let sliding =
        crate::config::WindowSpec::Sliding { size: std::time::Duration::from_millis(20), slide: std::time::Duration::from_millis(10) };
    let mut h = window_harness(JoinKind::Full, sliding);
    // 1@15 is in [0, 20) and [10, 30); its split's watermark 19 closes [0, 20).
    left(&mut h, vec![rec(1, 15, "l", 19)]);
    right(&mut h, vec![rec(1, 5, "r", NO_WM)]);
    // [-10, 10) and [0, 20) fire by 19: the right record alone in each (the
    // left one may not join [0, 20)).
    let alone = |start: i64, end: i64| (format!(r#"{{"window_start":{start},"window_end":{end},"p":{{"id":1,"t":5,"x":"r"}}}}"#), end - 1);
    assert_eq!(watermark(&mut h, 19), [alone(-10, 10), alone(0, 20)]);
    assert_eq!(watermark(&mut h, 29), [(r#"{"window_start":10,"window_end":30,"o":{"id":1,"t":15,"x":"l"}}"#.to_string(), 29)]);
    // Behind its split's watermark for every window: late.
    assert!(left(&mut h, vec![rec(1, 25, "z", 100)]).is_empty());
    assert_eq!(h.metrics.dropped_late.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(h.state.len(LEFT.records) + h.state.len(RIGHT.records), 0);
}

#[test]
fn a_restored_window_join_does_not_fire_its_windows_again() {
    let mut h = window_harness(
        JoinKind::Inner,
        crate::config::WindowSpec::Sliding { size: std::time::Duration::from_millis(20), slide: std::time::Duration::from_millis(10) },
    );
    left(&mut h, vec![rec(1, 15, "l", NO_WM)]);
    right(&mut h, vec![rec(1, 16, "r", NO_WM)]);
    assert_eq!(watermark(&mut h, 19).len(), 1, "[0, 20)");
    // A restore of this state at watermark 19: [0, 20) fired before it.
    let mut again = window_harness(JoinKind::Inner, tumbling(10));
    again.op = Join::new(
        "j",
        &JoinSpec {
            window: h.op.windows.map(|w| crate::config::WindowSpec::Sliding {
                size: std::time::Duration::from_millis(w.size as u64),
                slide: std::time::Duration::from_millis(w.slide as u64),
            }),
            ..spec(JoinKind::Inner, 0, 0)
        },
        vec![0],
        vec![0],
        Vec::new(),
    )
    .unwrap();
    again.state = std::mem::replace(&mut h.state, Box::new(crate::state::memory::MemoryState::new(&[], 0..0)));
    again.watermark = 19;
    again.run(|op, ctx, _| op.on_restore(1, ctx));
    assert_eq!(watermark(&mut again, 29).len(), 1, "[10, 30) only");
}

fn temporal_harness(kind: JoinKind, delete_when: Option<&str>) -> Harness<Join> {
    temporal_harness_ttl(kind, delete_when, None)
}

fn temporal_harness_ttl(kind: JoinKind, delete_when: Option<&str>, ttl_ms: Option<u64>) -> Harness<Join> {
    let ttl = ttl_ms.map(std::time::Duration::from_millis);
    let temporal = Some(crate::config::TemporalSpec { delete_when: delete_when.map(str::to_string), ttl, processing_time: false });
    let spec = JoinSpec { temporal, ..spec(kind, 0, 0) };
    Harness::new(Join::new("j", &spec, vec![0], vec![0], Vec::new()).unwrap(), "j", 0..MAXP, MAXP)
}

fn lookup_harness(kind: JoinKind, delete_when: Option<&str>) -> Harness<Join> {
    let temporal = Some(crate::config::TemporalSpec { delete_when: delete_when.map(str::to_string), ttl: None, processing_time: true });
    let spec = JoinSpec { temporal, ..spec(kind, 0, 0) };
    Harness::new(Join::new("j", &spec, vec![0], vec![0], Vec::new()).unwrap(), "j", 0..MAXP, MAXP)
}

/// The output text of left record `l` of key 1 with right version `r` (None: alone).
fn enriched(l: (Millis, &str), r: Option<(Millis, &str)>) -> (String, Millis) {
    let left = format!(r#""o":{{"id":1,"t":{},"x":"{}"}}"#, l.0, l.1);
    match r {
        Some((s, x)) => (format!(r#"{{{left},"p":{{"id":1,"t":{s},"x":"{x}"}}}}"#), l.0),
        None => (format!("{{{left}}}"), l.0),
    }
}

#[test]
fn a_temporal_join_gives_each_left_record_the_version_valid_at_its_time() {
    for kind in [JoinKind::Inner, JoinKind::Left] {
        let mut h = temporal_harness(kind, None);
        right(&mut h, vec![rec(1, 10, "a", NO_WM), rec(1, 20, "b", NO_WM)]);
        assert!(left(&mut h, vec![rec(1, 5, "early", NO_WM), rec(1, 15, "mid", NO_WM), rec(1, 20, "at", NO_WM)]).is_empty());
        assert!(watermark(&mut h, 4).is_empty(), "a left record waits until the watermark reaches its time");
        let mut want = vec![enriched((15, "mid"), Some((10, "a"))), enriched((20, "at"), Some((20, "b")))];
        if kind == JoinKind::Left {
            want.push(enriched((5, "early"), None));
        }
        want.sort();
        assert_eq!(watermark(&mut h, 20), want, "{kind:?}");
        // A version after the watermark still counts for later left records.
        right(&mut h, vec![rec(1, 30, "c", 20)]);
        left(&mut h, vec![rec(1, 29, "before", 20), rec(1, 31, "after", 20)]);
        let want = [enriched((29, "before"), Some((20, "b"))), enriched((31, "after"), Some((30, "c")))];
        assert_eq!(watermark(&mut h, 40), want);
        assert_eq!(h.state.len(LEFT.records), 0);
        assert_eq!((h.state.len(RIGHT.records), h.state.len(RIGHT.times)), (1, 0), "only the version at 30 is kept, settled");
    }
}

#[test]
fn a_deletion_hides_the_key_until_its_next_version() {
    let mut h = temporal_harness(JoinKind::Left, Some("x == 'gone'"));
    right(&mut h, vec![rec(1, 10, "a", NO_WM), rec(1, 20, "gone", NO_WM), rec(1, 30, "b", NO_WM)]);
    left(&mut h, vec![rec(1, 15, "l1", NO_WM), rec(1, 25, "l2", NO_WM), rec(1, 35, "l3", NO_WM)]);
    let mut want = vec![enriched((15, "l1"), Some((10, "a"))), enriched((25, "l2"), None), enriched((35, "l3"), Some((30, "b")))];
    want.sort();
    assert_eq!(watermark(&mut h, 35), want);
    // Settled at 25: the deletion leaves with the version it replaced.
    let mut h = temporal_harness(JoinKind::Inner, Some("x == 'gone'"));
    right(&mut h, vec![rec(1, 10, "a", NO_WM), rec(1, 20, "gone", NO_WM)]);
    assert!(watermark(&mut h, 25).is_empty());
    assert_eq!(h.state.len(RIGHT.records) + h.state.len(RIGHT.times), 0);
    // An expression that fails on a record names it.
    let mut h = temporal_harness(JoinKind::Inner, Some("missing == 1"));
    let err = h.try_run(|op, ctx, out| op.process_right(vec![rec(1, 10, "a", NO_WM)], ctx, out)).unwrap_err();
    assert!(err.to_string().contains("`temporal.delete_when` failed on a right record"), "{err}");
}

#[test]
fn late_versions_and_late_left_records_are_dropped() {
    let mut h = temporal_harness(JoinKind::Left, None);
    right(&mut h, vec![rec(1, 10, "a", NO_WM)]);
    left(&mut h, vec![rec(1, 15, "l", NO_WM)]);
    assert_eq!(watermark(&mut h, 15), [enriched((15, "l"), Some((10, "a")))]);
    // Both at or before their split's watermark: dropped, counted.
    right(&mut h, vec![rec(1, 12, "late", 15)]);
    left(&mut h, vec![rec(1, 14, "late", 15)]);
    assert_eq!(h.metrics.dropped_late.load(std::sync::atomic::Ordering::Relaxed), 2);
    left(&mut h, vec![rec(1, 16, "l2", 15)]);
    assert_eq!(watermark(&mut h, 20), [enriched((16, "l2"), Some((10, "a")))], "the late version changed nothing");
}

#[test]
fn of_two_versions_at_one_time_the_last_by_text_wins_in_either_arrival_order() {
    for first in ["a", "b"] {
        let second = if first == "a" { "b" } else { "a" };
        let mut h = temporal_harness(JoinKind::Inner, None);
        right(&mut h, vec![rec(1, 10, first, NO_WM)]);
        right(&mut h, vec![rec(1, 10, second, NO_WM)]);
        left(&mut h, vec![rec(1, 10, "l", NO_WM)]);
        assert_eq!(watermark(&mut h, 10), [enriched((10, "l"), Some((10, "b")))], "{first} first");
        assert_eq!(h.state.len(RIGHT.records), 1);
    }
}

#[test]
fn a_restored_temporal_join_keeps_its_versions_and_waiting_records() {
    let mut h = temporal_harness(JoinKind::Left, None);
    right(&mut h, vec![rec(1, 10, "a", NO_WM), rec(1, 20, "b", NO_WM)]);
    left(&mut h, vec![rec(1, 25, "l", NO_WM)]);
    assert!(watermark(&mut h, 15).is_empty());
    // A restore of this state (the operator is new; its scan bounds start over).
    let mut again = temporal_harness(JoinKind::Left, None);
    again.state = std::mem::replace(&mut h.state, Box::new(crate::state::memory::MemoryState::new(&[], 0..0)));
    again.watermark = 15;
    again.run(|op, ctx, _| op.on_restore(1, ctx));
    left(&mut again, vec![rec(1, 16, "m", 15)]);
    let want = [enriched((16, "m"), Some((10, "a"))), enriched((25, "l"), Some((20, "b")))];
    assert_eq!(watermark(&mut again, 30), want);
    assert_eq!(again.state.len(RIGHT.records), 1);
}

#[test]
fn a_version_is_valid_for_its_ttl_and_leaves_state_once_the_watermark_passes_it() {
    // Version 1@10 "a" with a TTL of 10: valid for left records at 10..=20.
    let run = |watermarks: &[Millis]| {
        let mut h = temporal_harness_ttl(JoinKind::Left, None, Some(10));
        right(&mut h, vec![rec(1, 10, "a", NO_WM)]);
        left(&mut h, vec![rec(1, 15, "in", NO_WM), rec(1, 20, "edge", NO_WM), rec(1, 21, "after", NO_WM)]);
        let mut out: Vec<_> = watermarks.iter().flat_map(|&w| watermark(&mut h, w)).collect();
        out.sort();
        (out, h)
    };
    let mut want = vec![enriched((15, "in"), Some((10, "a"))), enriched((20, "edge"), Some((10, "a"))), enriched((21, "after"), None)];
    want.sort();
    let (all_at_once, h) = run(&[40]);
    assert_eq!(all_at_once, want);
    assert_eq!(h.state.len(RIGHT.records) + h.state.len(RIGHT.times), 0, "expired at 40: 10 + 10 < 40");
    let (step_by_step, _) = run(&[12, 16, 19, 20, 21, 22, 40]);
    assert_eq!(step_by_step, want, "the output does not depend on when the state was cleaned");
    // A newer version replaces the older one in both tables; the latest
    // stays until it expires.
    let mut h = temporal_harness_ttl(JoinKind::Inner, None, Some(10));
    right(&mut h, vec![rec(1, 10, "a", NO_WM), rec(1, 20, "b", NO_WM)]);
    assert!(watermark(&mut h, 25).is_empty());
    assert_eq!((h.state.len(RIGHT.records), h.state.len(RIGHT.times)), (1, 1), "20 is kept, indexed for its expiry");
    assert!(watermark(&mut h, 30).is_empty());
    assert_eq!(h.state.len(RIGHT.records), 1, "20 + 10 is not before 30: a left record at 30 was still valid");
    // Restored: the expiry scan starts over and still finds it.
    let mut again = temporal_harness_ttl(JoinKind::Inner, None, Some(10));
    again.state = std::mem::replace(&mut h.state, Box::new(crate::state::memory::MemoryState::new(&[], 0..0)));
    again.watermark = 30;
    again.run(|op, ctx, _| op.on_restore(1, ctx));
    left(&mut again, vec![rec(1, 31, "late for b", 30)]);
    assert!(watermark(&mut again, 31).is_empty(), "31 - 20 > 10: no version, and inner");
    assert_eq!(again.state.len(RIGHT.records) + again.state.len(RIGHT.times), 0);
}

#[test]
fn a_processing_time_lookup_gives_each_left_record_the_version_current_on_arrival() {
    let mut h = lookup_harness(JoinKind::Left, Some("x == 'gone'"));
    assert!(right(&mut h, vec![rec(1, 50, "a", NO_WM)]).is_empty());
    // At once, whatever the event times: the version from "its future" too.
    assert_eq!(left(&mut h, vec![rec(1, 5, "l1", NO_WM)]), [enriched((5, "l1"), Some((50, "a")))]);
    right(&mut h, vec![rec(1, 7, "b", NO_WM)]);
    let mut timeless = rec(1, 0, "l2", NO_WM);
    timeless.event_time = None;
    let out = h.run(|op, ctx, out| op.process(vec![timeless], ctx, out));
    assert_eq!((out.len(), out[0].event_time), (1, None), "a left record without event time is looked up, unstamped");
    assert!(out[0].raw.contains(r#""p":{"id":1,"t":7,"x":"b"}"#), "the latest to arrive: {}", out[0].raw);
    assert_eq!(h.state.len(RIGHT.records) + h.state.len(RIGHT.times), 1, "one version per key, no time index");
    right(&mut h, vec![rec(1, 9, "gone", NO_WM)]);
    assert_eq!(left(&mut h, vec![rec(1, 10, "l3", NO_WM)]), [enriched((10, "l3"), None)], "deleted: alone");
    assert_eq!(h.metrics.unmatched_out.load(std::sync::atomic::Ordering::Relaxed), 1, "counted without a watermark");
    assert!(watermark(&mut h, 100).is_empty());
    assert_eq!(h.state.len(LEFT.records) + h.state.len(RIGHT.records), 0, "nothing waits");
    let mut inner = lookup_harness(JoinKind::Inner, None);
    assert!(left(&mut inner, vec![rec(2, 1, "none yet", NO_WM)]).is_empty());
}

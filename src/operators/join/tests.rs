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
    }
}

fn harness(kind: JoinKind, lower: Millis, upper: Millis) -> Harness<Join> {
    Harness::new(Join::new("j", &spec(kind, lower, upper), vec![0], vec![0], Vec::new()), "j", 0..MAXP, MAXP)
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
    let out = right(&mut h, vec![rec(1, 89, "a", NO_WM), rec(1, 90, "b", NO_WM), rec(1, 105, "c", NO_WM), rec(1, 106, "d", NO_WM), rec(2, 100, "e", NO_WM)]);
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
    assert_eq!(h.state.len(LEFT.records) + h.state.len(RIGHT.records) + h.state.len(LEFT.times) + h.state.len(RIGHT.times), 0, "all cleaned");
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
    let projection = vec![("o.id".to_string(), FieldNeed { required: true, ..FieldNeed::default() }), ("p.x".to_string(), FieldNeed::default())];
    let op = Join::new("j", &spec(JoinKind::Left, 0, 0), vec![0], vec![0], projection);
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

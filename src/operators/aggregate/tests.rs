//! Operator-level tests: drive `Aggregate` directly over a `MemoryState`.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use super::*;
use crate::config::{AggFunc, AggregateFn};
use crate::operators::dead_letter::DeadLetters;
use crate::types::{key_group_of, key_group_range, subtask_for_key_group};

const MAX_PAR: u16 = 32;
const INPUT: [&str; 3] = ["user", "amount", "note"];

type Harness = crate::operators::testing::Harness<Aggregate>;

impl Harness {
    fn for_spec(spec: &AggregateSpec, dead_letter: Option<DeadLetter>) -> Self {
        Self::subtask(spec, dead_letter, 0..MAX_PAR)
    }

    fn subtask(spec: &AggregateSpec, dead_letter: Option<DeadLetter>, kgs: Range<KeyGroup>) -> Self {
        let input: Vec<String> = INPUT.iter().map(|s| s.to_string()).collect();
        Harness::new(Aggregate::new(spec, &input, dead_letter).unwrap(), "agg", kgs, MAX_PAR)
    }

    fn feed(&mut self, records: Vec<Record>) {
        let out = self.run(|op, ctx, out| op.process(records, ctx, out));
        assert!(out.is_empty(), "aggregates emit only on watermark, tick or end");
    }

    fn watermark(&mut self, w: Millis) -> Vec<Record> {
        self.watermark = w;
        self.run(|op, ctx, out| op.on_watermark(ctx, out))
    }

    fn tick(&mut self) -> Vec<Record> {
        self.run(|op, ctx, out| op.on_tick(ctx, out))
    }

    fn end(&mut self) -> Vec<Record> {
        let mut out = self.watermark(MAX_WATERMARK);
        out.extend(self.run(|op, ctx, out| op.on_end_of_input(ctx, out)));
        out
    }

    fn dropped(&self) -> u64 {
        self.metrics.records_dropped.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn state_len(&self) -> usize {
        (0..self.op.tables().len()).map(|t| self.state.len(t)).sum()
    }
}

fn rec(user: &str, amount: Value, ts: Millis) -> Record {
    let fields = vec![Value::Str(user.into()), amount, Value::Null];
    let mut key = Vec::new();
    encode_key(&fields, &[0], &mut key);
    let mut raw = Vec::new();
    fields[1].write_json(&mut raw);
    let raw = format!("{{\"user\":\"{user}\",\"amount\":{},\"ts\":{ts}}}", String::from_utf8(raw).unwrap());
    let mut r = Record::new(fields, raw.into(), Some(ts));
    r.key_group = key_group_of(&key, MAX_PAR);
    r
}

fn int(user: &str, amount: i64, ts: Millis) -> Record {
    rec(user, Value::Int(amount), ts)
}

fn agg(func: AggFunc, field: Option<&str>, alias: &str) -> AggregateFn {
    AggregateFn { func, field: field.map(String::from), alias: alias.into() }
}

fn spec(window: Option<WindowSpec>, lateness_ms: u64, aggregates: Vec<AggregateFn>) -> AggregateSpec {
    AggregateSpec {
        key: vec!["user".into()],
        window,
        allowed_lateness: Duration::from_millis(lateness_ms),
        aggregates,
        emit_interval: Duration::from_secs(1),
        dead_letter: None,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn count_only(window: Option<WindowSpec>, lateness_ms: u64) -> AggregateSpec {
    spec(window, lateness_ms, vec![agg(AggFunc::Count, None, "n")])
}

/// (user, window_start, window_end, n) of each output record.
fn rows(out: &[Record]) -> Vec<(String, i64, i64, i64)> {
    out.iter()
        .map(|r| match &r.fields[..] {
            [Value::Str(u), Value::Int(s), Value::Int(e), Value::Int(n)] => (u.to_string(), *s, *e, *n),
            other => panic!("unexpected output {other:?}"),
        })
        .collect()
}

fn raws(out: &[Record]) -> Vec<&str> {
    out.iter().map(|r| &*r.raw).collect()
}

#[test]
fn output_fields_follow_the_spec() {
    let s = spec(
        Some(WindowSpec::Tumbling { size: ms(10) }),
        0,
        vec![agg(AggFunc::Count, None, "n"), agg(AggFunc::Sum, Some("amount"), "total")],
    );
    assert_eq!(s.output_fields(), ["user", "window_start", "window_end", "n", "total"]);
    assert_eq!(spec(None, 0, vec![agg(AggFunc::Max, Some("amount"), "m")]).output_fields(), ["user", "m"]);
}

#[test]
fn constructor_rejects_bad_specs() {
    let input: Vec<String> = INPUT.iter().map(|s| s.to_string()).collect();
    let mut s = count_only(None, 0);
    s.key = vec!["nope".into()];
    assert!(Aggregate::new(&s, &input, None).is_err());
    let s = spec(None, 0, vec![agg(AggFunc::Sum, Some("nope"), "x")]);
    assert!(Aggregate::new(&s, &input, None).is_err());
    let s = count_only(Some(WindowSpec::Tumbling { size: ms(0) }), 0);
    assert!(Aggregate::new(&s, &input, None).is_err());
    let s = count_only(Some(WindowSpec::Sliding { size: Duration::from_secs(86_400), slide: ms(1) }), 0);
    assert!(Aggregate::new(&s, &input, None).is_err());
}

#[test]
fn tumbling_fires_on_watermark_after_allowed_lateness() {
    let s = spec(
        Some(WindowSpec::Tumbling { size: ms(10) }),
        5,
        vec![
            agg(AggFunc::Count, None, "n"),
            agg(AggFunc::Sum, Some("amount"), "total"),
            agg(AggFunc::Min, Some("amount"), "lo"),
            agg(AggFunc::Max, Some("amount"), "hi"),
            agg(AggFunc::Avg, Some("amount"), "mean"),
        ],
    );
    let mut h = Harness::for_spec(&s, None);
    h.feed(vec![int("a", 1, 1), int("a", 2, 5), rec("b", Value::Float(0.5), 3), int("a", 7, 12), rec("a", Value::Null, 9)]);
    assert!(h.watermark(9).is_empty(), "window [0,10) fires at 9 + lateness 5");
    // Not late yet: lateness keeps [0, 10) open.
    h.feed(vec![int("b", 4, 2)]);
    let out = h.watermark(14);
    assert_eq!(out.len(), 2);
    let (a, b) = (
        &out.iter().find(|r| r.fields[0] == Value::Str("a".into())).unwrap(),
        out.iter().find(|r| r.fields[0] == Value::Str("b".into())).unwrap(),
    );
    assert_eq!(&*a.raw, r#"{"user":"a","window_start":0,"window_end":10,"n":3,"total":3,"lo":1,"hi":2,"mean":1.5}"#);
    assert_eq!(&*b.raw, r#"{"user":"b","window_start":0,"window_end":10,"n":2,"total":4.5,"lo":0.5,"hi":4,"mean":2.25}"#);
    assert_eq!(a.event_time, Some(9));
    assert_eq!(a.key_group, int("a", 0, 0).key_group);
    // Order: window end, then key group.
    assert!(out[0].key_group <= out[1].key_group);
    let out = h.end();
    assert_eq!(raws(&out), [r#"{"user":"a","window_start":10,"window_end":20,"n":1,"total":7,"lo":7,"hi":7,"mean":7.0}"#]);
    assert_eq!(h.state_len(), 0, "every fired window leaves state");
    assert_eq!(h.dropped(), 0);
}

#[test]
fn late_records_are_counted_and_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late.jsonl");
    let dl = DeadLetters::default().get(&path).unwrap();
    let mut h = Harness::for_spec(&count_only(Some(WindowSpec::Tumbling { size: ms(10) }), 0), Some(dl.clone()));
    h.feed(vec![int("a", 1, 3)]);
    assert_eq!(h.watermark(9).len(), 1);
    h.feed(vec![int("a", 1, 4), int("a", 1, 10)]);
    assert_eq!(h.dropped(), 1);
    assert_eq!(rows(&h.end()), [("a".into(), 10, 20, 1)]);
    dl.flush().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(line["origin"], "agg");
    assert_eq!(line["reason"], "late record: window [0, 10) closed at watermark 9");
    assert_eq!(line["record"], r#"{"user":"a","amount":1,"ts":4}"#);
    // Without a dead letter, late records are still counted.
    let mut h = Harness::for_spec(&count_only(Some(WindowSpec::Tumbling { size: ms(10) }), 0), None);
    h.watermark(100);
    h.feed(vec![int("a", 1, 50)]);
    assert_eq!(h.dropped(), 1);
    assert_eq!(h.state_len(), 0);
}

#[test]
fn sliding_counts_each_record_in_every_window() {
    let mut h = Harness::for_spec(&count_only(Some(WindowSpec::Sliding { size: ms(10), slide: ms(5) }), 0), None);
    h.feed((0..20).map(|t| int("a", 1, t)).collect());
    let out = h.end();
    assert_eq!(
        rows(&out),
        [("a".into(), -5, 5, 5), ("a".into(), 0, 10, 10), ("a".into(), 5, 15, 10), ("a".into(), 10, 20, 10), ("a".into(), 15, 25, 5)]
    );
    assert_eq!(out.iter().map(|r| r.event_time.unwrap()).collect::<Vec<_>>(), [4, 9, 14, 19, 24]);
    assert_eq!(h.state_len(), 0);
}

#[test]
fn sliding_adds_partially_late_records_to_open_windows() {
    let mut h = Harness::for_spec(&count_only(Some(WindowSpec::Sliding { size: ms(10), slide: ms(5) }), 0), None);
    h.feed(vec![int("a", 1, 7)]);
    assert_eq!(rows(&h.watermark(9)), [("a".into(), 0, 10, 1)]);
    // ts 8 belongs to [0,10) (fired) and [5,15) (open): only the latter takes it.
    h.feed(vec![int("a", 1, 8)]);
    assert_eq!(h.dropped(), 0);
    // ts 3 belongs to [-5,5) and [0,10), both fired.
    h.feed(vec![int("a", 1, 3)]);
    assert_eq!(h.dropped(), 1);
    assert_eq!(rows(&h.end()), [("a".into(), 5, 15, 2)]);
}

#[test]
fn sessions_merge_out_of_order_records() {
    let s = spec(
        Some(WindowSpec::Session { gap: ms(10) }),
        0,
        vec![agg(AggFunc::Count, None, "n"), agg(AggFunc::Sum, Some("amount"), "total")],
    );
    let mut h = Harness::for_spec(&s, None);
    // Three separate sessions [0,10), [25,35), [12,22), and one for b.
    h.feed(vec![int("a", 1, 0), int("a", 2, 25), int("a", 4, 12), int("b", 100, 5)]);
    assert_eq!(h.state.len(SESSIONS), 2);
    assert_eq!(h.state.len(TIMERS), 4);
    // [8,18) bridges [0,10) and [12,22); [20,30) then bridges that and [25,35).
    h.feed(vec![int("a", 8, 8)]);
    assert_eq!(h.state.len(TIMERS), 3);
    h.feed(vec![int("a", 16, 20)]);
    assert_eq!(h.state.len(TIMERS), 2);
    assert_eq!(h.state.len(SESSIONS), 2);
    // [30,40) extends the session; [1,11) falls inside it and just adds.
    h.feed(vec![int("a", 32, 30), int("a", 0, 1)]);
    assert_eq!(raws(&h.watermark(14)), [r#"{"user":"b","window_start":5,"window_end":15,"n":1,"total":100}"#]);
    // [39,49) overlaps [0,40) and merges with it.
    h.feed(vec![int("a", 64, 39)]);
    assert!(h.watermark(47).is_empty());
    assert_eq!(raws(&h.watermark(48)), [r#"{"user":"a","window_start":0,"window_end":49,"n":8,"total":127}"#]);
    assert_eq!(h.state_len(), 0);
}

#[test]
fn session_late_at_or_before_the_watermark_even_next_to_an_open_session() {
    let mut h = Harness::for_spec(&count_only(Some(WindowSpec::Session { gap: ms(10) }), 0), None);
    h.feed(vec![int("a", 1, 100)]);
    h.watermark(105);
    // 95 overlaps the open [100,110), but is behind the watermark: late, as
    // it would be in a schedule where [100,110) had fired already.
    h.feed(vec![int("a", 1, 95)]);
    h.feed(vec![int("a", 1, 50)]);
    // 106 is after the watermark: it joins [100,110).
    h.feed(vec![int("a", 1, 106)]);
    assert_eq!(h.dropped(), 2);
    assert_eq!(rows(&h.end()), [("a".into(), 100, 116, 2)]);
    assert_eq!(h.state_len(), 0);
}

#[test]
fn touching_sessions_stay_apart_whatever_the_watermark() {
    // Records exactly `gap` apart: [0,10) fires at watermark 9, when a record
    // at 10 is not late yet; with or without that watermark in between, the
    // result is the same two sessions.
    for watermark_between in [false, true] {
        let mut h = Harness::for_spec(&count_only(Some(WindowSpec::Session { gap: ms(10) }), 0), None);
        h.feed(vec![int("a", 1, 0)]);
        let mut out = if watermark_between { h.watermark(9) } else { Vec::new() };
        h.feed(vec![int("a", 1, 10)]);
        out.extend(h.end());
        assert_eq!(rows(&out), [("a".into(), 0, 10, 1), ("a".into(), 10, 20, 1)], "watermark between: {watermark_between}");
        assert_eq!(h.dropped(), 0);
    }
}

#[test]
fn running_aggregate_emits_only_dirty_keys() {
    let s = spec(None, 0, vec![agg(AggFunc::Count, None, "n"), agg(AggFunc::Sum, Some("amount"), "total")]);
    let mut h = Harness::for_spec(&s, None);
    assert_eq!(h.op.tick_interval(), Some(Duration::from_secs(1)));
    h.feed(vec![int("a", 1, 0), int("b", 2, 0), int("a", 3, 0)]);
    h.watermark(1_000);
    let mut out = raws(&h.tick()).into_iter().map(String::from).collect::<Vec<_>>();
    out.sort();
    assert_eq!(out, [r#"{"user":"a","n":2,"total":4}"#, r#"{"user":"b","n":1,"total":2}"#]);
    assert!(h.tick().is_empty(), "nothing changed since the last emission");
    h.feed(vec![rec("b", Value::Float(0.5), 0)]);
    let out = h.tick();
    assert_eq!(raws(&out), [r#"{"user":"b","n":2,"total":2.5}"#]);
    assert_eq!(out[0].event_time, None);
    assert_eq!(out[0].key_group, int("b", 0, 0).key_group);
    h.feed(vec![int("a", 1, 0)]);
    assert_eq!(raws(&h.end()), [r#"{"user":"a","n":3,"total":5}"#]);
    assert_eq!(h.state.len(DIRTY), 0);
    assert_eq!(h.state.len(ACCS), 2, "running accumulators are kept");
}

#[test]
fn keys_with_odd_characters_are_escaped_in_raw() {
    let mut h = Harness::for_spec(&count_only(None, 0), None);
    h.feed(vec![int("q\"u\\o\nte", 1, 0)]);
    let out = h.end();
    let parsed: serde_json::Value = serde_json::from_str(&out[0].raw).unwrap();
    assert_eq!(parsed["user"], "q\"u\\o\nte");
}

#[test]
fn results_do_not_depend_on_parallelism() {
    let s = spec(Some(WindowSpec::Session { gap: ms(7) }), 3, vec![agg(AggFunc::Count, None, "n"), agg(AggFunc::Avg, Some("amount"), "m")]);
    let input: Vec<Record> = (0..400).map(|i| int(&format!("u{}", i % 13), i, (i * 37) % 200)).collect();
    let run = |parallelism: u16| {
        let mut subtasks: Vec<Harness> =
            (0..parallelism).map(|p| Harness::subtask(&s, None, key_group_range(p, parallelism, MAX_PAR))).collect();
        let (mut out, mut wm) = (Vec::new(), Millis::MIN);
        for chunk in input.chunks(50) {
            for (p, h) in subtasks.iter_mut().enumerate() {
                h.feed(chunk.iter().filter(|r| subtask_for_key_group(r.key_group, parallelism, MAX_PAR) as usize == p).cloned().collect());
            }
            wm = wm.max(chunk.iter().filter_map(|r| r.event_time).max().unwrap_or(wm) - 40);
            subtasks.iter_mut().for_each(|h| out.extend(h.watermark(wm)));
        }
        subtasks.iter_mut().for_each(|h| out.extend(h.end()));
        let dropped: u64 = subtasks.iter().map(|h| h.dropped()).sum();
        assert!(subtasks.iter().all(|h| h.state_len() == 0));
        let mut raw: Vec<String> = out.iter().map(|r| r.raw.to_string()).collect();
        raw.sort();
        (raw, dropped)
    };
    let one = run(1);
    assert!(!one.0.is_empty());
    assert_eq!(run(3), one);
}

/// The operator alone at scale: 2 M records, 1 000 users, every 10 ms of
/// event time per user. Checks the result counts; prints the rate (run with
/// `cargo test --release --lib throughput -- --ignored --nocapture`). Ignored
/// by default: it takes seconds, and rates are for BENCHMARKS.md, not asserts.
#[test]
#[ignore]
fn throughput_tumbling_and_running() {
    let n = 2_000_000i64;
    let input: Vec<Record> = (0..n).map(|i| int(&format!("u{}", i % 1_000), i, i / 100)).collect();
    // 20 one-second windows x 1 000 users; one session per user (gaps of
    // 10 ms < 50 ms); one final value per user.
    let cases =
        [(Some(WindowSpec::Tumbling { size: ms(1000) }), 20_000), (Some(WindowSpec::Session { gap: ms(50) }), 1_000), (None, 1_000)];
    for (window, expected) in cases {
        let s = spec(window, 0, vec![agg(AggFunc::Count, None, "n"), agg(AggFunc::Sum, Some("amount"), "total")]);
        let mut h = Harness::for_spec(&s, None);
        // Cloning the batches is part of the harness, not of the operator: do it up front.
        let batches: Vec<Vec<Record>> = input.chunks(1024).map(|c| c.to_vec()).collect();
        let start = std::time::Instant::now();
        let mut emitted = 0;
        for chunk in batches {
            let wm = chunk[0].event_time.unwrap() - 1;
            h.feed(chunk);
            emitted += h.watermark(wm).len();
        }
        emitted += h.end().len();
        let secs = start.elapsed().as_secs_f64();
        println!("{window:?}: {:.2} M records/s, {emitted} results", n as f64 / secs / 1e6);
        assert_eq!(emitted, expected, "{window:?}");
    }
}

#[test]
fn state_written_before_exact_sums_is_upgraded_when_read() {
    // The layout before exact sums: sum = tag + i64 (9 bytes). A checkpoint
    // taken by an earlier version restores into this one.
    let legacy_sum = |tag: u8, bits: u64| [&[tag][..], &bits.to_le_bytes()].concat();
    let key_of = |r: &Record| {
        let mut k = Vec::new();
        encode_key(&r.fields, &[0], &mut k);
        k
    };

    // Running: `accumulators` holds sum = i64::MAX for a.
    let mut h = Harness::for_spec(&spec(None, 0, vec![agg(AggFunc::Sum, Some("amount"), "total")]), None);
    let r = int("a", 5, 0);
    h.state.put(ACCS, r.key_group, &key_of(&r), &legacy_sum(1, i64::MAX as u64)).unwrap();
    h.state.put(DIRTY, r.key_group, &key_of(&r), &[]).unwrap();
    h.feed(vec![r]);
    assert_eq!(raws(&h.end()), [r#"{"user":"a","total":9223372036854775812}"#]);

    // Session: one legacy session [0, 10) with count 2 and sum 1.5.
    let s = spec(
        Some(WindowSpec::Session { gap: ms(10) }),
        0,
        vec![agg(AggFunc::Count, None, "n"), agg(AggFunc::Sum, Some("amount"), "total")],
    );
    let mut h = Harness::for_spec(&s, None);
    let r = int("a", 2, 5);
    let mut list = encode_time(0).to_vec();
    list.extend_from_slice(&encode_time(10));
    list.extend_from_slice(&2u64.to_le_bytes());
    list.extend_from_slice(&legacy_sum(2, 1.5f64.to_bits()));
    let mut timer = encode_time(9).to_vec();
    window_key(&key_of(&r), Window::new(0, 10), &mut h.op.wkey);
    timer.extend_from_slice(&h.op.wkey);
    h.state.put(SESSIONS, r.key_group, &key_of(&r), &list).unwrap();
    h.state.put(TIMERS, r.key_group, &timer, &[]).unwrap();
    h.feed(vec![r]);
    assert_eq!(raws(&h.end()), [r#"{"user":"a","window_start":0,"window_end":15,"n":3,"total":3.5}"#]);
    assert_eq!(h.state_len(), 0);
}

#[test]
fn running_entries_without_the_dirty_flag_are_read_and_flagged() {
    // Before the flag, a running entry was the accumulators alone and
    // `dirty` alone said which keys were dirty. A checkpoint of that
    // layout restores into this one: a dirty key is still emitted, a clean
    // one is not until a record changes it, and each entry gets its flag.
    let s = spec(None, 0, vec![agg(AggFunc::Count, None, "n"), agg(AggFunc::Sum, Some("amount"), "total")]);
    let mut h = Harness::for_spec(&s, None);
    let accs = &h.op.output.accs;
    let key_of = |r: &Record| {
        let mut k = Vec::new();
        encode_key(&r.fields, &[0], &mut k);
        k
    };
    let (a, b, c) = (int("a", 0, 0), int("b", 0, 0), int("c", 0, 0));
    for (r, n, dirty) in [(&a, 2, true), (&b, 5, false), (&c, 1, false)] {
        let acc = folded(accs, &vec![Value::Int(3); n]);
        assert_eq!(acc.len(), accs.width(), "the accumulators alone, no flag");
        h.state.put(ACCS, r.key_group, &key_of(r), &acc).unwrap();
        if dirty {
            h.state.put(DIRTY, r.key_group, &key_of(r), &[]).unwrap();
        }
    }
    let ticked = |h: &mut Harness| {
        let mut out: Vec<String> = raws(&h.tick()).into_iter().map(String::from).collect();
        out.sort();
        out
    };
    assert_eq!(ticked(&mut h), [r#"{"user":"a","n":2,"total":6}"#]);
    h.feed(vec![int("b", 1, 0), int("b", 1, 0)]);
    assert_eq!(ticked(&mut h), [r#"{"user":"b","n":7,"total":17}"#]);
    assert!(h.tick().is_empty());
    let entry = |h: &Harness, r: &Record| {
        let mut v = Vec::new();
        assert!(h.state.get(ACCS, r.key_group, &key_of(r), &mut v).unwrap());
        v
    };
    let width = h.op.output.accs.width();
    assert_eq!((entry(&h, &a).len(), entry(&h, &a)[width]), (width + 1, CLEAN), "emitted: flagged clean");
    assert_eq!(entry(&h, &c).len(), width, "untouched: as it was");
    h.feed(vec![int("c", 4, 0)]);
    assert_eq!(entry(&h, &c)[width], MARKED);
    assert_eq!(h.state.len(DIRTY), 1);
    assert_eq!(raws(&h.end()), [r#"{"user":"c","n":2,"total":7}"#]);
    assert_eq!((h.state.len(DIRTY), entry(&h, &c)[width]), (0, CLEAN));

    // A variable-width spec: an unflagged entry is recognised too.
    let s = spec(None, 0, vec![agg(AggFunc::Count, None, "n"), agg(AggFunc::CountDistinct, Some("amount"), "d")]);
    let mut h = Harness::for_spec(&s, None);
    let acc = folded(&h.op.output.accs, &[Value::Int(1), Value::Int(2)]);
    h.state.put(ACCS, a.key_group, &key_of(&a), &acc).unwrap();
    h.feed(vec![int("a", 3, 0), int("a", 1, 0)]);
    assert_eq!(raws(&h.end()), [r#"{"user":"a","n":4,"d":3}"#]);
    let mut corrupt_entry = acc.clone();
    corrupt_entry.push(7);
    h.state.put(ACCS, a.key_group, &key_of(&a), &corrupt_entry).unwrap();
    let mut ctx = Context { info: &h.info, state: h.state.as_mut(), metrics: &h.metrics, watermark: h.watermark, now: h.now };
    let err = h.op.process(vec![int("a", 3, 0)], &mut ctx, &mut Vec::new()).unwrap_err();
    assert!(err.to_string().contains("corrupt accumulator"), "neither layout: {err}");
}

/// A record at `ts` with its split's watermark `w`.
fn behind(user: &str, ts: Millis, w: Millis) -> Record {
    let mut r = int(user, 1, ts);
    r.split_watermark = w;
    r
}

/// Lateness is judged by the record's split watermark, not by how far this
/// operator's watermark has come (issue 18 item 1): the same records are
/// late whatever the schedule delivered first.
#[test]
fn lateness_follows_the_records_split_watermark() {
    // Tumbling: [50, 60) would have fired at 99; [100, 110) at 104 would not.
    let mut h = Harness::for_spec(&count_only(Some(WindowSpec::Tumbling { size: ms(10) }), 0), None);
    h.feed(vec![behind("a", 100, 99), behind("a", 50, 99), behind("a", 101, 104)]);
    assert_eq!(h.dropped(), 1, "50 is behind its split's watermark 99, the window of 101 is open at 104");
    assert_eq!(rows(&h.end()), [("a".to_string(), 100, 110, 2)]);
    // Sliding: only the windows still open at the split's watermark take it.
    let mut h = Harness::for_spec(&count_only(Some(WindowSpec::Sliding { size: ms(20), slide: ms(10) }), 0), None);
    h.feed(vec![behind("a", 55, 64)]);
    assert_eq!(h.dropped(), 0);
    assert_eq!(rows(&h.end()), [("a".to_string(), 50, 70, 1)], "[40, 60) would have fired at 59");
    // Sessions: behind the watermark is late even with an open session to join.
    let mut h = Harness::for_spec(&count_only(Some(WindowSpec::Session { gap: ms(30) }), 0), None);
    h.feed(vec![behind("a", 120, 119), behind("a", 100, 119), behind("a", 125, 124)]);
    assert_eq!(h.dropped(), 1);
    assert_eq!(rows(&h.end()), [("a".to_string(), 120, 155, 2)]);
    // Allowed lateness extends it: 100 + 20 is after 119.
    let mut h = Harness::for_spec(&count_only(Some(WindowSpec::Session { gap: ms(30) }), 20), None);
    h.feed(vec![behind("a", 120, 119), behind("a", 100, 119)]);
    assert_eq!(h.dropped(), 0);
    assert_eq!(rows(&h.end()), [("a".to_string(), 100, 150, 2)]);
}

// ---- count_distinct, first, last, collect (issue 16) ----

/// Every new function next to an old one (the fixed and variable parts).
fn new_fns() -> Vec<AggregateFn> {
    vec![
        agg(AggFunc::CountDistinct, Some("amount"), "distinct"),
        agg(AggFunc::First, Some("amount"), "first"),
        agg(AggFunc::Last, Some("amount"), "last"),
        agg(AggFunc::Collect { max_items: 3 }, Some("amount"), "some"),
        agg(AggFunc::Sum, Some("amount"), "total"),
    ]
}

#[test]
fn new_functions_order_by_event_time_then_value() {
    let mut h = Harness::for_spec(&spec(None, 0, new_fns()), None);
    let s = |t: &str| Value::Str(t.into());
    h.feed(vec![
        rec("a", Value::Int(5), 30),
        rec("a", s("x"), 10),
        rec("a", Value::Null, 5),
        rec("a", Value::Float(1.0), 20),
        rec("a", Value::Int(1), 20),
        rec("a", Value::Int(5), 40),
        rec("a", s("w"), 40),
    ]);
    // Distinct: 5, "x", 1 (1.0 is 1, as for keys), "w". First at 10; last at 40: of `5` and `"w"` the larger JSON text.
    // Collect: (10,"x"), (20,"1"), (20,"1.0"): ties at 20 by JSON text, the float keeps its type.
    assert_eq!(raws(&h.end()), [r#"{"user":"a","distinct":4,"first":"x","last":5,"some":["x",1,1.0],"total":12.0}"#]);
    // Nothing but nulls: 0, null, null, [].
    let mut h = Harness::for_spec(&spec(None, 0, new_fns()), None);
    h.feed(vec![rec("b", Value::Null, 1)]);
    assert_eq!(raws(&h.end()), [r#"{"user":"b","distinct":0,"first":null,"last":null,"some":[],"total":null}"#]);
}

#[test]
fn old_specs_keep_the_fixed_layout() {
    let input: Vec<String> = INPUT.iter().map(|s| s.to_string()).collect();
    let counts =
        accumulator::Accumulators::new(&[agg(AggFunc::Count, None, "n"), agg(AggFunc::Count, Some("amount"), "c")], &input).unwrap();
    assert!(counts.is_fixed());
    assert_eq!(counts.width(), 16);
    let old = accumulator::Accumulators::new(&[agg(AggFunc::Count, None, "n"), agg(AggFunc::Sum, Some("amount"), "s")], &input).unwrap();
    assert!(!old.is_fixed(), "a sum has an exact tail");
    assert_eq!(old.width(), 8 + 33 + 8);
    let new = accumulator::Accumulators::new(&new_fns(), &input).unwrap();
    assert!(!new.is_fixed());
    assert_eq!(new.width(), 33 + 5 * 8, "the empty set: the sum, then four empty payloads and the sum's exact tail");
}

/// The accumulators of `values` (as amounts, event time = index * 7 % 11).
fn folded(a: &accumulator::Accumulators, values: &[Value]) -> Vec<u8> {
    let mut acc = Vec::new();
    a.init(&mut acc);
    for (i, v) in values.iter().enumerate() {
        a.add(&mut acc, &[Value::Null, v.clone(), Value::Null], Some((i as Millis * 7) % 11));
    }
    acc
}

fn finished(a: &accumulator::Accumulators, acc: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    a.finish(acc, &mut out);
    out
}

#[test]
fn new_accumulators_merge_like_adding_everything_and_round_trip() {
    let input: Vec<String> = INPUT.iter().map(|s| s.to_string()).collect();
    let a = accumulator::Accumulators::new(&new_fns(), &input).unwrap();
    let values: Vec<Value> = (0..40)
        .map(|i| match i % 5 {
            0 => Value::Int(i % 7),
            1 => Value::Float(i as f64 / 4.0),
            2 => Value::Str(format!("s{}", i % 3).into()),
            3 => Value::Null,
            _ => Value::Bool(i % 2 == 0),
        })
        .collect();
    let all = finished(&a, &folded(&a, &values));
    for cut in [0, 1, 17, 39, 40] {
        // Event times differ by position: fold each half with the times it had in the whole.
        let mut left = folded(&a, &values[..cut]);
        let mut right = Vec::new();
        a.init(&mut right);
        for (i, v) in values.iter().enumerate().skip(cut) {
            a.add(&mut right, &[Value::Null, v.clone(), Value::Null], Some((i as Millis * 7) % 11));
        }
        assert!(a.is_valid(&left) && a.is_valid(&right));
        let mut other_way = right.clone();
        a.merge(&mut left, &right);
        a.merge(&mut other_way, &folded(&a, &values[..cut]));
        assert_eq!(finished(&a, &left), all, "cut {cut}");
        assert_eq!(finished(&a, &other_way), all, "cut {cut}, merged the other way");
        let vars = |b: &[u8]| b[33..a.v2_len(b).unwrap()].to_vec();
        assert_eq!(vars(&left), vars(&other_way), "the variable part merges symmetrically, cut {cut}");
        assert_eq!(a.encoded_len(&[left.clone(), vec![9; 5]].concat()), Some(left.len()), "a set knows its length");
    }
    // Collect keeps the first 3 by (event time, JSON text); nulls are skipped.
    let mut want: Vec<(Millis, String)> = values
        .iter()
        .enumerate()
        .filter(|(_, v)| **v != Value::Null)
        .map(|(i, v)| {
            let mut j = Vec::new();
            v.write_json(&mut j);
            ((i as Millis * 7) % 11, String::from_utf8(j).unwrap())
        })
        .collect();
    want.sort();
    let texts: Vec<&str> = want.iter().take(3).map(|(_, t)| t.as_str()).collect();
    assert_eq!(all[3], Value::Str(format!("[{}]", texts.join(",")).into()));
    // Corrupt sets are refused, never a panic: truncated, extended, lengths pointing out.
    let acc = folded(&a, &values);
    for n in 0..acc.len() {
        assert!(!a.is_valid(&acc[..n]), "truncated at {n}");
        if n >= 33 {
            // Only valid sets reach `finish`; its variable part still reads a bad tail without panicking.
            let _ = finished(&a, &acc[..n]);
        }
    }
    assert!(!a.is_valid(&[acc.clone(), vec![0]].concat()));
    let mut bad = acc.clone();
    bad[33..41].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(!a.is_valid(&bad) && a.encoded_len(&bad).is_none());
    let mut e = bad.clone();
    assert!(!a.adopt(&mut e));
}

#[test]
fn session_merge_merges_the_new_accumulators() {
    let s = spec(Some(WindowSpec::Session { gap: ms(10) }), 0, new_fns());
    let mut h = Harness::for_spec(&s, None);
    // Sessions [0, 10) and [20, 35); 12 grows the second to [12, 35), then 5 ([5, 15)) bridges both.
    h.feed(vec![int("a", 3, 0), int("a", 9, 20), int("a", 3, 25)]);
    h.feed(vec![int("a", 7, 12), int("a", 1, 5)]);
    assert_eq!(
        raws(&h.end()),
        [r#"{"user":"a","window_start":0,"window_end":35,"distinct":4,"first":3,"last":3,"some":[3,1,7],"total":23}"#]
    );
    assert_eq!(h.state_len(), 0);
}

/// Sorted raw outputs and the last output per (user, window start), of
/// `input` run at `before` subtasks up to `cut`, a snapshot restored at
/// `after` subtasks, then the rest.
fn run_restored(s: &AggregateSpec, input: &[Record], before: u16, after: u16, cut: usize) -> (Vec<String>, BTreeMap<String, String>) {
    let subtasks = |p: u16| -> Vec<Harness> { (0..p).map(|i| Harness::subtask(s, None, key_group_range(i, p, MAX_PAR))).collect() };
    let feed = |hs: &mut Vec<Harness>, chunk: &[Record], wm: &mut Millis, out: &mut Vec<Record>| {
        let p = hs.len() as u16;
        for (i, h) in hs.iter_mut().enumerate() {
            h.feed(chunk.iter().filter(|r| subtask_for_key_group(r.key_group, p, MAX_PAR) as usize == i).cloned().collect());
        }
        *wm = (*wm).max(chunk.iter().filter_map(|r| r.event_time).max().unwrap_or(*wm) - 40);
        for h in hs.iter_mut() {
            out.extend(h.watermark(*wm));
            out.extend(h.tick());
        }
    };
    let (mut out, mut wm) = (Vec::new(), Millis::MIN);
    let mut hs = subtasks(before);
    input[..cut].chunks(30).for_each(|c| feed(&mut hs, c, &mut wm, &mut out));
    let tables = hs[0].op.tables();
    let snapshots: Vec<Vec<u8>> = hs
        .iter()
        .map(|h| {
            let mut b = Vec::new();
            crate::state::snapshot::write(h.state.as_ref(), &tables, &mut b).unwrap();
            b
        })
        .collect();
    let mut hs = subtasks(after);
    for h in hs.iter_mut() {
        h.watermark = wm;
        for b in &snapshots {
            crate::state::snapshot::read(&mut crate::codec::Dec::new(b), &tables, h.state.as_mut()).unwrap();
        }
    }
    input[cut..].chunks(30).for_each(|c| feed(&mut hs, c, &mut wm, &mut out));
    hs.iter_mut().for_each(|h| out.extend(h.end()));
    assert!(s.window.is_none() || hs.iter().all(|h| h.state_len() == 0));
    let mut last = BTreeMap::new();
    for r in &out {
        last.insert(format!("{:?}", &r.fields[..if s.window.is_some() { 2 } else { 1 }]), r.raw.to_string());
    }
    let mut all: Vec<String> = out.iter().map(|r| r.raw.to_string()).collect();
    all.sort();
    (all, last)
}

#[test]
fn new_functions_restore_at_another_parallelism_in_every_window() {
    let windows = [
        None,
        Some(WindowSpec::Tumbling { size: ms(50) }),
        Some(WindowSpec::Sliding { size: ms(60), slide: ms(20) }),
        Some(WindowSpec::Session { gap: ms(9) }),
    ];
    let input: Vec<Record> = (0..300)
        .map(|i| {
            let v = match i % 4 {
                0 => Value::Int(i % 9),
                1 => Value::Str(format!("v{}", i % 5).into()),
                2 => Value::Float((i % 6) as f64 / 2.0),
                _ => Value::Null,
            };
            // Out of order by at most 30 ms: nothing is late at watermark max - 40.
            rec(&format!("u{}", i % 7), v, i * 3 + (i * 13) % 30)
        })
        .collect();
    for window in windows {
        let s = spec(window, 0, new_fns());
        let whole = run_restored(&s, &input, 1, 1, 0);
        assert!(!whole.0.is_empty());
        for (before, after) in [(1, 3), (3, 2), (2, 1)] {
            let got = run_restored(&s, &input, before, after, 140);
            if window.is_some() {
                assert_eq!(got.0, whole.0, "{window:?} {before} -> {after}");
            }
            assert_eq!(got.1, whole.1, "{window:?} {before} -> {after}");
        }
    }
}

// ---- count_distinct values as entries of their own (issue 34 #8) ----

fn distinct_spec(window: Option<WindowSpec>) -> AggregateSpec {
    spec(window, 0, vec![agg(AggFunc::CountDistinct, Some("amount"), "d"), agg(AggFunc::Count, None, "n")])
}

/// The stored accumulator entries' byte lengths (every table but `distinct`).
fn accumulator_bytes(h: &Harness, table: TableId) -> usize {
    let mut bytes = 0;
    for kg in 0..MAX_PAR {
        h.state
            .scan_all(table, kg, &mut |_, v| {
                bytes += v.len();
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
    }
    bytes
}

#[test]
fn count_distinct_state_per_key_does_not_grow_with_its_values() {
    // Issue 34 #8: one key, 100 K distinct values took 171 s: every record
    // decoded, merged and rewrote one blob holding all of the key's values.
    let windows = [None, Some(WindowSpec::Tumbling { size: ms(1_000_000) }), Some(WindowSpec::Session { gap: ms(1_000_000) })];
    for window in windows {
        let mut h = Harness::for_spec(&distinct_spec(window), None);
        h.feed((0..10).map(|i| int("a", i, i)).collect());
        let small = accumulator_bytes(&h, 0);
        h.feed((10..5_000).map(|i| int("a", i % 4_000, i)).collect());
        assert_eq!(accumulator_bytes(&h, 0), small, "{window:?}: the accumulators keep a count, not the values");
        assert_eq!(h.state.len(ENTRIES), 4_000, "{window:?}: one entry per distinct value");
        let out = h.end();
        assert!(raws(&out)[0].contains(r#""d":4000,"n":5000"#), "{window:?}: {}", raws(&out)[0]);
        if window.is_some() {
            assert_eq!(h.state_len(), 0, "{window:?}: firing deletes the window's values");
        }
    }
}

#[test]
fn count_distinct_of_200k_values_under_one_key_is_fast() {
    let started = std::time::Instant::now();
    let mut h = Harness::for_spec(&distinct_spec(None), None);
    for chunk in (0..200_000i64).collect::<Vec<_>>().chunks(1024) {
        h.feed(chunk.iter().map(|&i| int("a", i, i)).collect());
    }
    assert_eq!(raws(&h.end()), [r#"{"user":"a","d":200000,"n":200000}"#]);
    // Linear: well under a second in a release build (quadratic: hours).
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
}

#[test]
fn merging_sessions_unites_their_distinct_values() {
    let mut h = Harness::for_spec(&distinct_spec(Some(WindowSpec::Session { gap: ms(10) })), None);
    // [0, 19) with 0..10 and [100, 130) with 5..26 (the larger); 15, 24, .., 96 bridge them.
    h.feed((0..10).map(|i| int("a", i, i)).collect());
    h.feed((0..21).map(|i| int("a", 5 + i, 100 + i)).collect());
    h.feed((0..10).map(|i| int("a", 3, 15 + 9 * i)).collect());
    assert_eq!(raws(&h.end()), [r#"{"user":"a","window_start":0,"window_end":130,"d":26,"n":41}"#]);
    assert_eq!(h.state_len(), 0);
}

#[test]
fn distinct_lists_of_older_builds_move_to_entries_when_read() {
    // Before this build a set kept its values in its accumulator (the
    // legacy item list that `Accumulators::add` still writes without state).
    let input: Vec<String> = INPUT.iter().map(|s| s.to_string()).collect();
    let key_of = |r: &Record| {
        let mut k = Vec::new();
        encode_key(&r.fields, &[0], &mut k);
        k
    };
    let legacy = |s: &AggregateSpec| {
        let a = accumulator::Accumulators::new(&s.aggregates, &input).unwrap();
        let mut acc = Vec::new();
        a.init(&mut acc);
        for v in [1, 2, 3] {
            a.add(&mut acc, &[Value::Null, Value::Int(v), Value::Null], Some(1));
        }
        acc
    };
    // Running: legacy {1, 2, 3} (count 3) without the dirty flag; add 3 and 4.
    let s = distinct_spec(None);
    let mut h = Harness::for_spec(&s, None);
    let r = int("a", 3, 5);
    h.state.put(ACCS, r.key_group, &key_of(&r), &legacy(&s)).unwrap();
    h.feed(vec![r, int("a", 4, 6)]);
    assert_eq!(raws(&h.end()), [r#"{"user":"a","d":4,"n":5}"#]);
    assert_eq!(h.state.len(ENTRIES), 4);

    // Tumbling: the window [0, 10) holds the legacy set and its timer.
    let s = distinct_spec(Some(WindowSpec::Tumbling { size: ms(10) }));
    let mut h = Harness::for_spec(&s, None);
    let r = int("a", 2, 5);
    window_key(&key_of(&r), Window::new(0, 10), &mut h.op.wkey);
    let mut timer = encode_time(9).to_vec();
    timer.extend_from_slice(&h.op.wkey);
    h.state.put(WINDOWS, r.key_group, &h.op.wkey.clone(), &legacy(&s)).unwrap();
    h.state.put(TIMERS, r.key_group, &timer, &[]).unwrap();
    h.feed(vec![r, int("a", 7, 6)]);
    assert_eq!(raws(&h.end()), [r#"{"user":"a","window_start":0,"window_end":10,"d":4,"n":5}"#]);
    assert_eq!(h.state_len(), 0);

    // Sessions: two legacy sessions [0, 10) and [20, 30), bridged by a record at 9.
    let s = distinct_spec(Some(WindowSpec::Session { gap: ms(10) }));
    let mut h = Harness::for_spec(&s, None);
    let r = int("a", 9, 9);
    let mut list = Vec::new();
    for (start, end) in [(0, 10), (20, 30)] {
        list.extend_from_slice(&encode_time(start));
        list.extend_from_slice(&encode_time(end));
        list.extend_from_slice(&legacy(&s));
        window_key(&key_of(&r), Window::new(start, end), &mut h.op.wkey);
        let mut timer = encode_time(end - 1).to_vec();
        timer.extend_from_slice(&h.op.wkey);
        h.state.put(TIMERS, r.key_group, &timer, &[]).unwrap();
    }
    h.state.put(SESSIONS, r.key_group, &key_of(&r), &list).unwrap();
    h.feed(vec![r, int("a", 1, 15)]);
    assert_eq!(raws(&h.end()), [r#"{"user":"a","window_start":0,"window_end":30,"d":4,"n":8}"#]);
    assert_eq!(h.state_len(), 0);
}

#[test]
fn approx_count_distinct_is_close_and_the_same_at_any_parallelism() {
    let fns = vec![agg(AggFunc::ApproxCountDistinct, Some("amount"), "approx"), agg(AggFunc::CountDistinct, Some("amount"), "exact")];
    let input: Vec<Record> = (0..30_000).map(|i| rec(&format!("u{}", i % 3), Value::Int(i % 20_000), i / 10)).collect();
    for window in [None, Some(WindowSpec::Session { gap: ms(100) })] {
        let s = spec(window, 0, fns.clone());
        let whole = run_restored(&s, &input, 1, 1, 0);
        for (_, raw) in &whole.1 {
            let v: serde_json::Value = serde_json::from_str(raw).unwrap();
            let (approx, exact) = (v["approx"].as_f64().unwrap(), v["exact"].as_f64().unwrap());
            assert!((approx - exact).abs() <= exact * 0.05, "{raw}");
        }
        for (before, after) in [(1, 3), (3, 2)] {
            assert_eq!(run_restored(&s, &input, before, after, 12_345).1, whole.1, "{window:?} {before} -> {after}");
        }
    }
}

// ---- collect items as entries of their own (issue 34 #8) ----

fn collect_spec(window: Option<WindowSpec>, max_items: u32) -> AggregateSpec {
    spec(window, 0, vec![agg(AggFunc::Collect { max_items }, Some("amount"), "c"), agg(AggFunc::Count, None, "n")])
}

/// The `c` list the docs define: the first `max` items by (event time,
/// JSON text), duplicates kept.
fn first_items(items: &[(i64, Millis)], max: usize) -> String {
    let mut sorted: Vec<(Millis, String)> = items.iter().map(|&(v, ts)| (ts, v.to_string())).collect();
    sorted.sort();
    let texts: Vec<String> = sorted.into_iter().take(max).map(|(_, t)| t).collect();
    format!("[{}]", texts.join(","))
}

#[test]
fn collect_keeps_the_first_items_in_any_arrival_order_with_as_many_entries_as_items_kept() {
    // Issue 34 #8: 20 K records into collect(max_items: 10000) took 426 s.
    let mut rng = fastrand::Rng::with_seed(34);
    let items: Vec<(i64, Millis)> = (0..3_000).map(|_| (rng.i64(0..50), rng.i64(0..1_000))).collect();
    let windows = [None, Some(WindowSpec::Tumbling { size: ms(1_000_000) }), Some(WindowSpec::Session { gap: ms(1_000_000) })];
    for window in windows {
        for max in [1, 7, 5_000] {
            let mut h = Harness::for_spec(&collect_spec(window, max as u32), None);
            for chunk in items.chunks(100) {
                h.feed(chunk.iter().map(|&(v, ts)| int("a", v, ts)).collect());
            }
            let distinct_kept = {
                let mut kept: Vec<(Millis, i64)> = items.iter().map(|&(v, ts)| (ts, v)).collect();
                kept.sort();
                kept.truncate(max);
                kept.dedup();
                kept.len()
            };
            assert_eq!(h.state.len(ENTRIES), distinct_kept, "{window:?} max {max}: an entry per kept item (equal ones share one)");
            let ended = h.end();
            let out = raws(&ended);
            let expected = format!(r#""c":{},"n":3000"#, first_items(&items, max));
            assert!(out[0].contains(&expected), "{window:?} max {max}: {} vs {expected}", out[0]);
            if window.is_some() {
                assert_eq!(h.state_len(), 0, "{window:?}: firing deletes the window's items");
            }
        }
    }
}

#[test]
fn merging_sessions_unites_their_collect_lists_and_cuts_them_to_max_items() {
    let mut h = Harness::for_spec(&collect_spec(Some(WindowSpec::Session { gap: ms(10) }), 4), None);
    // [0, 19) with 9..0 and [100, 130) with 5..25; 15, 24, .., 96 bridge them with 3s.
    let mut all = Vec::new();
    for (v, ts) in (0..10).map(|i| (9 - i, i)).chain((0..21).map(|i| (5 + i, 100 + i))).chain((0..10).map(|i| (3, 15 + 9 * i))) {
        all.push((v, ts));
        h.feed(vec![int("a", v, ts)]);
    }
    let ended = h.end();
    let out = raws(&ended);
    assert_eq!(out, [format!(r#"{{"user":"a","window_start":0,"window_end":130,"c":{},"n":41}}"#, first_items(&all, 4))]);
    assert_eq!(h.state_len(), 0);
}

#[test]
fn running_collect_lists_are_emitted_whole_on_every_tick_and_kept() {
    let mut h = Harness::for_spec(&collect_spec(None, 3), None);
    h.feed(vec![int("a", 5, 50), int("a", 4, 40)]);
    assert!(raws(&h.tick())[0].contains(r#""c":[4,5]"#));
    h.feed(vec![int("a", 1, 10), int("a", 9, 90), int("a", 4, 40)]);
    assert!(raws(&h.tick())[0].contains(r#""c":[1,4,4]"#));
    assert_eq!(h.state.len(ENTRIES), 2, "1 and 4 (twice); 5 and 9 cut");
}

#[test]
fn collect_lists_of_older_builds_move_to_entries_when_read() {
    let input: Vec<String> = INPUT.iter().map(|s| s.to_string()).collect();
    let s = collect_spec(None, 3);
    let a = accumulator::Accumulators::new(&s.aggregates, &input).unwrap();
    let mut acc = Vec::new();
    a.init(&mut acc);
    for (v, ts) in [(7, 70), (2, 20), (6, 60)] {
        a.add(&mut acc, &[Value::Null, Value::Int(v), Value::Null], Some(ts));
    }
    let mut h = Harness::for_spec(&s, None);
    let r = int("a", 1, 10);
    let mut key = Vec::new();
    encode_key(&r.fields, &[0], &mut key);
    h.state.put(ACCS, r.key_group, &key, &acc).unwrap();
    h.feed(vec![r, int("a", 9, 90)]);
    assert_eq!(raws(&h.end()), [r#"{"user":"a","c":[1,2,6],"n":5}"#]);
    assert_eq!(h.state.len(ENTRIES), 3);
}

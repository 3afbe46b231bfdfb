//! A small, deliberately naive reference implementation of weir's semantics
//! (batch, in memory), written from the contract and not from weir's code.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Number, Value};

use crate::records::{parse, Obj};

/// One step of a field path, as docs/pipeline-reference.md defines them.
enum Step {
    Key(String),
    Index(usize),
}

/// `user.id`, `items[0].sku`, `"a.b".c` as steps (the reference accepts
/// only well-formed paths).
fn steps(path: &str) -> Vec<Step> {
    let mut out = Vec::new();
    let mut chars = path.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            '.' => {
                chars.next();
            }
            '[' => {
                chars.next();
                let n: String = chars.by_ref().take_while(|&c| c != ']').collect();
                out.push(Step::Index(n.parse().expect("reference: index")));
            }
            '"' => {
                chars.next();
                let mut key = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => key.push(chars.next().expect("reference: escape")),
                        '"' => break,
                        c => key.push(c),
                    }
                }
                out.push(Step::Key(key));
            }
            _ => {
                let mut key = String::new();
                while let Some(&c) = chars.peek() {
                    if matches!(c, '.' | '[') {
                        break;
                    }
                    key.push(c);
                    chars.next();
                }
                out.push(Step::Key(key));
            }
        }
    }
    out
}

/// The value at a field path of a record, if there is one.
pub fn get_path<'a>(o: &'a Obj, path: &str) -> Option<&'a Value> {
    let steps = steps(path);
    let Some((Step::Key(first), rest)) = steps.split_first() else { panic!("reference: path starts with a key") };
    let mut v = o.get(first)?;
    for s in rest {
        v = match s {
            Step::Key(k) => v.as_object()?.get(k)?,
            Step::Index(i) => v.as_array()?.get(*i)?,
        };
    }
    Some(v)
}

/// The name of a key field in an aggregate's output: the key itself for a
/// path of one (quoted) key, else the path's text.
fn output_name(path: &str) -> String {
    match steps(path).as_slice() {
        [Step::Key(k)] => k.clone(),
        _ => path.to_string(),
    }
}

/// Event time of a record: epoch ms or an RFC 3339 string.
pub fn event_time(o: &Obj, field: &str) -> Option<i64> {
    match get_path(o, field)? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f.floor() as i64)),
        Value::String(s) => parse_rfc3339(s),
        _ => None,
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]` followed by `Z` or `±HH:MM`, to epoch ms.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (y, mo, d, h, mi, sec) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut ms = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let frac = &s[start..i];
        ms = format!("{:0<3}", &frac[..frac.len().min(3)]).parse::<i64>().ok()?;
    }
    let offset_min = match &s[i..] {
        "Z" | "z" => 0,
        rest if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (rest[1..3].parse::<i64>().ok()? * 60 + rest[4..6].parse::<i64>().ok()?)
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    Some(((days * 24 + h) * 60 + mi - offset_min) * 60_000 + sec * 1000 + ms)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Whether weir must accept a line of a source keyed by `keys` with event
/// time `ts_field`: a JSON object, key fields present and scalar, event time
/// valid. Blank lines are neither good nor bad (None).
pub fn classify(line: &[u8], keys: &[&str], ts_field: Option<&str>) -> Option<bool> {
    let Ok(text) = std::str::from_utf8(line) else {
        return Some(false);
    };
    if text.trim().is_empty() {
        return None;
    }
    let Ok(o) = serde_json::from_str::<Obj>(text) else {
        return Some(false);
    };
    let scalar = |v: &Value| !matches!(v, Value::Array(_) | Value::Object(_));
    let keys_ok = keys.iter().all(|k| get_path(&o, k).is_some_and(scalar));
    let ts_ok = ts_field.is_none_or(|f| event_time(&o, f).is_some());
    Some(keys_ok && ts_ok)
}

/// The key of a record: the JSON text of each key field (missing = null).
fn key_of(o: &Obj, key: &[&str]) -> Vec<String> {
    key.iter().map(|k| get_path(o, k).unwrap_or(&Value::Null).to_string()).collect()
}

/// dedup: the first line per key passes unchanged.
pub fn dedup(lines: &[String], key: &[&str]) -> Vec<String> {
    let mut seen = HashSet::new();
    lines.iter().filter(|l| seen.insert(key_of(&parse(l), key))).cloned().collect()
}

#[derive(Debug, Clone, Copy)]
pub enum Window {
    Tumbling { size: i64 },
    Sliding { size: i64, slide: i64 },
    Session { gap: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    /// Distinct non-null values; numbers equal by value (`1` is `1.0`).
    CountDistinct,
    /// The value of the record first by (event time, JSON text of the value).
    First,
    /// The value of the record last by (event time, JSON text of the value).
    Last,
    /// The values of the first n records by (event time, JSON text), as an array.
    Collect(usize),
}

/// One aggregate: function, input field (None: count records), output name.
pub type Agg = (Func, Option<&'static str>, &'static str);

/// (key as text, window start, window end) -> (key values, the window's records).
type Groups = BTreeMap<(Vec<String>, i64, i64), (Vec<Value>, Vec<Obj>)>;

/// Each line of each input split (a file) with its split's watermark as of
/// that line: the highest event time of the split so far (the line's
/// included) minus `max_out_of_orderness` minus 1 ms, as
/// docs/pipeline-reference.md defines it. A line is late at an operator
/// when it is at or before that watermark by the operator's rule.
pub fn split_watermarks(splits: &[Vec<String>], ts_field: &str, max_out_of_orderness: i64) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for split in splits {
        let mut max = i64::MIN;
        for line in split {
            max = max.max(event_time(&parse(line), ts_field).expect("reference input has event times"));
            out.push((line.clone(), max - max_out_of_orderness - 1));
        }
    }
    out
}

/// Lines that are not late for a dedup (event time after their split's
/// watermark), in input order. A late line never passes.
pub fn on_time_for_dedup(lines: &[(String, i64)], ts_field: &str) -> Vec<String> {
    lines.iter().filter(|(l, wm)| event_time(&parse(l), ts_field).unwrap() > *wm).map(|(l, _)| l.clone()).collect()
}

/// Windowed (or, with `window: None`, running and final) aggregate of `lines`.
pub fn aggregate(lines: &[String], key: &[&str], ts_field: &str, window: Option<Window>, aggs: &[Agg]) -> Vec<Obj> {
    let lines: Vec<(String, i64)> = lines.iter().map(|l| (l.clone(), i64::MIN)).collect();
    aggregate_late(&lines, key, ts_field, window, 0, aggs).0
}

/// A windowed aggregate with `allowed_lateness` over lines with their
/// split watermarks: a window `[s, e)` takes a line if `e - 1 + lateness`
/// is after the line's watermark (the window cannot have fired yet); a
/// session takes a line if `ts + lateness` is (no session holding it can
/// have fired). Returns the results and the late lines (those no window
/// took), in input order.
pub fn aggregate_late(
    lines: &[(String, i64)],
    key: &[&str],
    ts_field: &str,
    window: Option<Window>,
    lateness: i64,
    aggs: &[Agg],
) -> (Vec<Obj>, Vec<String>) {
    // (key values, window) -> records, keys kept as parsed values for output.
    let mut groups: Groups = BTreeMap::new();
    let mut late = Vec::new();
    let open = |end: i64, wm: i64| end - 1 + lateness > wm;
    let mut by_key: BTreeMap<Vec<String>, Vec<(Obj, i64)>> = BTreeMap::new();
    for (line, wm) in lines {
        let r = parse(line);
        let t = event_time(&r, ts_field).expect("reference input has event times");
        let taken = match window {
            None => true,
            Some(Window::Tumbling { size }) => open(t.div_euclid(size) * size + size, *wm),
            // The last window holding `t` ends last.
            Some(Window::Sliding { size, slide }) => open(t.div_euclid(slide) * slide + size, *wm),
            Some(Window::Session { .. }) => t + lateness > *wm,
        };
        if !taken {
            late.push(line.clone());
            continue;
        }
        by_key.entry(key_of(&r, key)).or_default().push((r, *wm));
    }
    for (k, rs) in by_key {
        let (mut rs, wms): (Vec<Obj>, Vec<i64>) = rs.into_iter().unzip();
        let key_values: Vec<Value> = key.iter().map(|f| get_path(&rs[0], f).cloned().unwrap_or(Value::Null)).collect();
        let ts = |o: &Obj| event_time(o, ts_field).expect("reference input has event times");
        let mut put = |s: i64, e: i64, r: &Obj| {
            groups.entry((k.clone(), s, e)).or_insert_with(|| (key_values.clone(), Vec::new())).1.push(r.clone());
        };
        match window {
            None => rs.iter().for_each(|r| put(0, 0, r)),
            Some(Window::Tumbling { size }) => rs.iter().for_each(|r| {
                let s = ts(r).div_euclid(size) * size;
                put(s, s + size, r)
            }),
            Some(Window::Sliding { size, slide }) => rs.iter().zip(&wms).for_each(|(r, &wm)| {
                let t = ts(r);
                let mut s = t.div_euclid(slide) * slide;
                while s > t - size {
                    if open(s + size, wm) {
                        put(s, s + size, r);
                    }
                    s -= slide;
                }
            }),
            Some(Window::Session { gap }) => {
                rs.sort_by_key(|r| ts(r));
                let mut session: Vec<&Obj> = Vec::new();
                let mut flush = |session: &mut Vec<&Obj>| {
                    if let (Some(first), Some(last)) = (session.first(), session.last()) {
                        let (s, e) = (ts(first), ts(last) + gap);
                        session.drain(..).for_each(|r| put(s, e, r));
                    }
                };
                for r in &rs {
                    if let Some(last) = session.last() {
                        // Sessions merge only when they overlap: records `gap` apart are two.
                        if ts(r) - ts(last) >= gap {
                            flush(&mut session);
                        }
                    }
                    session.push(r);
                }
                flush(&mut session);
            }
        }
    }
    let results = groups
        .into_iter()
        .map(|((_, s, e), (key_values, rs))| {
            let mut out = Obj::new();
            for (f, v) in key.iter().zip(key_values) {
                out.insert(output_name(f), v);
            }
            if window.is_some() {
                out.insert("window_start".into(), s.into());
                out.insert("window_end".into(), e.into());
            }
            for (func, field, alias) in aggs {
                out.insert(alias.to_string(), apply(*func, *field, &rs, ts_field));
            }
            out
        })
        .collect();
    (results, late)
}

/// One aggregate function over a group; nulls and missing fields are skipped.
fn apply(func: Func, field: Option<&str>, rs: &[Obj], ts_field: &str) -> Value {
    let Some(field) = field else {
        assert_eq!(func, Func::Count, "only count may omit `field`");
        return rs.len().into();
    };
    if let Some(v) = apply_any(func, field, rs, ts_field) {
        return v;
    }
    let values: Vec<&Number> = rs
        .iter()
        .filter_map(|r| match get_path(r, field) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => Some(n),
            Some(other) => panic!("reference input: `{field}` is not a number: {other}"),
        })
        .collect();
    if func == Func::Count {
        return values.len().into();
    }
    if values.is_empty() {
        return Value::Null;
    }
    let all_ints = values.iter().all(|n| n.is_i64());
    let f = |n: &Number| n.as_f64().unwrap();
    match func {
        Func::Count | Func::CountDistinct | Func::First | Func::Last | Func::Collect(_) => unreachable!(),
        Func::Sum if all_ints => values.iter().map(|n| n.as_i64().unwrap()).sum::<i64>().into(),
        Func::Sum => float(values.iter().map(|n| f(n)).sum()),
        Func::Avg => float(values.iter().map(|n| f(n)).sum::<f64>() / values.len() as f64),
        // Min/max keep the input's type: return the winning input number itself.
        Func::Min => Value::Number((*values.iter().min_by(|a, b| f(a).total_cmp(&f(b))).unwrap()).clone()),
        Func::Max => Value::Number((*values.iter().max_by(|a, b| f(a).total_cmp(&f(b))).unwrap()).clone()),
    }
}

/// The functions over values of any type; None for the numeric ones.
fn apply_any(func: Func, field: &str, rs: &[Obj], ts_field: &str) -> Option<Value> {
    let present = || rs.iter().filter_map(|r| get_path(r, field).filter(|v| !v.is_null()).map(|v| (r, v)));
    // (event time, JSON text, value), sorted.
    let ordered = || {
        let mut v: Vec<(i64, String, Value)> =
            present().map(|(r, v)| (event_time(r, ts_field).unwrap_or(i64::MIN), v.to_string(), v.clone())).collect();
        v.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        v
    };
    Some(match func {
        Func::CountDistinct => present().map(|(_, v)| same_value(v)).collect::<HashSet<String>>().len().into(),
        Func::First => ordered().into_iter().next().map_or(Value::Null, |e| e.2),
        Func::Last => ordered().pop().map_or(Value::Null, |e| e.2),
        Func::Collect(n) => Value::Array(ordered().into_iter().take(n).map(|e| e.2).collect()),
        _ => return None,
    })
}

/// A text equal for equal values: a number by its value (integral floats as integers).
fn same_value(v: &Value) -> String {
    match v {
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => format!("n{i}"),
            (None, Some(u), _) => format!("n{u}"),
            (None, None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.2e18 => format!("n{}", f as i64),
            (None, None, Some(f)) => format!("f{}", f.to_bits()),
            _ => format!("?{n}"),
        },
        other => other.to_string(),
    }
}

fn float(x: f64) -> Value {
    Value::Number(Number::from_f64(x).expect("finite"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_parses_utc_and_offsets() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.974Z"), Some(1_700_000_000_974));
        assert_eq!(parse_rfc3339("2023-11-15T00:13:20.974+02:00"), Some(1_700_000_000_974));
        assert_eq!(parse_rfc3339("2023-11-14T16:43:20.968-05:30"), Some(1_700_000_000_968));
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn value_functions_order_by_event_time_then_json_text() {
        let lines: Vec<String> =
            [r#"{"u":1,"ts":5,"v":"b"}"#, r#"{"u":1,"ts":5,"v":2}"#, r#"{"u":1,"ts":1,"v":2.0}"#, r#"{"u":1,"ts":0,"v":null}"#]
                .map(String::from)
                .to_vec();
        let aggs = [
            (Func::CountDistinct, Some("v"), "d"),
            (Func::First, Some("v"), "f"),
            (Func::Last, Some("v"), "l"),
            (Func::Collect(2), Some("v"), "c"),
        ];
        let out = aggregate(&lines, &["u"], "ts", None, &aggs);
        // `2` and `2.0` are one value; at ts 5 the text `"b"` sorts before `2` (0x22 < 0x32).
        assert_eq!(super::super::records::canonical(&out[0]), r#"{u=1i, d=2i, f=2.000000f, l=2i, c=[2.0,"b"]}"#);
    }

    #[test]
    fn windows_assign_as_specified() {
        let lines: Vec<String> =
            [(1, 5), (1, 10_500), (1, 12_000), (2, 19_999)].iter().map(|(u, t)| format!(r#"{{"u":{u},"ts":{t}}}"#)).collect();
        let count = [(Func::Count, None, "n")];
        let tumbling = aggregate(&lines, &["u"], "ts", Some(Window::Tumbling { size: 10_000 }), &count);
        let text: Vec<String> = tumbling.iter().map(super::super::records::canonical).collect();
        assert_eq!(
            text,
            [
                "{u=1i, window_start=0i, window_end=10000i, n=1i}",
                "{u=1i, window_start=10000i, window_end=20000i, n=2i}",
                "{u=2i, window_start=10000i, window_end=20000i, n=1i}",
            ]
        );
        let sliding = aggregate(&lines, &["u"], "ts", Some(Window::Sliding { size: 10_000, slide: 5_000 }), &count);
        assert_eq!(sliding.len(), 6, "{sliding:?}");
        let session = aggregate(&lines, &["u"], "ts", Some(Window::Session { gap: 2_000 }), &count);
        let text: Vec<String> = session.iter().map(super::super::records::canonical).collect();
        assert_eq!(
            text,
            [
                "{u=1i, window_start=5i, window_end=2005i, n=1i}",
                "{u=1i, window_start=10500i, window_end=14000i, n=2i}",
                "{u=2i, window_start=19999i, window_end=21999i, n=1i}",
            ]
        );
    }
}

/// Which unmatched records an interval join emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
}

/// One side of an interval join: its lines with their split watermarks
/// (`split_watermarks`), its key fields, its event-time field and the
/// member its records go under in the output.
pub struct JoinSide<'a> {
    pub lines: &'a [(String, i64)],
    pub key: &'a [&'a str],
    pub ts: &'a str,
    pub name: &'a str,
}

/// The interval join as docs/pipeline-reference.md defines it: a line is
/// late (dropped, matches nothing) when its event time is at or before its
/// split's watermark; a left record at `t` and a right record at `s` with
/// equal keys match when `t + lower <= s <= t + upper`, one output object
/// `{left.name: left record, right.name: right record}` per pair; an outer
/// side's records that match nothing are output alone, `{name: record}`.
pub fn interval_join(left: &JoinSide, right: &JoinSide, lower: i64, upper: i64, kind: JoinKind) -> Vec<Obj> {
    let on_time = |side: &JoinSide| -> Vec<(Obj, i64, Vec<String>)> {
        side.lines
            .iter()
            .map(|(l, wm)| (parse(l), *wm))
            .map(|(o, wm)| (event_time(&o, side.ts).expect("reference input has event times"), wm, o))
            .filter(|(t, wm, _)| t > wm)
            .map(|(t, _, o)| {
                let k = key_of(&o, side.key);
                (o, t, k)
            })
            .collect()
    };
    let (ls, rs) = (on_time(left), on_time(right));
    let one = |name: &str, o: &Obj| -> Obj {
        let mut out = Obj::new();
        out.insert(name.to_string(), Value::Object(o.clone().into_iter().collect()));
        out
    };
    let mut out = Vec::new();
    let mut right_matched = vec![false; rs.len()];
    for (l, t, lk) in &ls {
        let mut matched = false;
        for (j, (r, s, rk)) in rs.iter().enumerate() {
            if lk == rk && t + lower <= *s && *s <= t + upper {
                let mut o = one(left.name, l);
                o.insert(right.name.to_string(), Value::Object(r.clone().into_iter().collect()));
                out.push(o);
                matched = true;
                right_matched[j] = true;
            }
        }
        if !matched && matches!(kind, JoinKind::Left | JoinKind::Full) {
            out.push(one(left.name, l));
        }
    }
    if matches!(kind, JoinKind::Right | JoinKind::Full) {
        out.extend(rs.iter().zip(&right_matched).filter(|(_, m)| !**m).map(|((r, _, _), _)| one(right.name, r)));
    }
    out
}

/// The temporal join as docs/pipeline-reference.md defines it: a line is
/// late (dropped) when its event time is at or before its split's
/// watermark; each on-time left record at `t` is output once, with the
/// right record of an equal key valid at `t` — the latest at or before `t`,
/// of two at one time the one whose line sorts last — unless there is none
/// or it is a deletion (`deletes`): then alone for a left join, not at all
/// for an inner one.
pub fn temporal_join(left: &JoinSide, right: &JoinSide, kind: JoinKind, deletes: &dyn Fn(&Obj) -> bool, ttl: Option<i64>) -> Vec<Obj> {
    let on_time = |side: &JoinSide| -> Vec<(String, Obj, i64, Vec<String>)> {
        side.lines
            .iter()
            .map(|(l, wm)| (l, parse(l), *wm))
            .map(|(l, o, wm)| (l, event_time(&o, side.ts).expect("reference input has event times"), wm, o))
            .filter(|(_, t, wm, _)| t > wm)
            .map(|(l, t, _, o)| {
                let k = key_of(&o, side.key);
                (l.clone(), o, t, k)
            })
            .collect()
    };
    let versions = on_time(right);
    let mut out = Vec::new();
    for (_, l, t, lk) in on_time(left) {
        let valid = versions.iter().filter(|(_, _, s, rk)| *rk == lk && *s <= t).max_by(|a, b| (a.2, &a.0).cmp(&(b.2, &b.0)));
        let mut o = Obj::new();
        o.insert(left.name.to_string(), Value::Object(l.into_iter().collect()));
        // A version is valid for `ttl` after its time.
        let valid = valid.filter(|(_, _, s, _)| ttl.is_none_or(|ttl| t - s <= ttl));
        match valid.filter(|(_, r, _, _)| !deletes(r)) {
            Some((_, r, _, _)) => {
                o.insert(right.name.to_string(), Value::Object(r.clone().into_iter().collect()));
            }
            None if kind == JoinKind::Left => {}
            None => continue,
        }
        out.push(o);
    }
    out
}

/// The window join as docs/pipeline-reference.md defines it: windows
/// `[k * slide, k * slide + size)`; a line joins the windows holding it
/// that are still open at its split's watermark (`end - 1` after it), and
/// is late if there is none. Per window and key: every pair of a left and a
/// right line, `{"window_start", "window_end", left.name, right.name}`; with
/// no line of the other side in that window and key, an outer side's lines
/// alone.
pub fn window_join(left: &JoinSide, right: &JoinSide, size: i64, slide: i64, kind: JoinKind) -> Vec<Obj> {
    // (window start, key) → the window's lines of each side.
    let mut groups: BTreeMap<(i64, Vec<String>), [Vec<Obj>; 2]> = BTreeMap::new();
    for (i, side) in [left, right].into_iter().enumerate() {
        for (l, wm) in side.lines {
            let o = parse(l);
            let t = event_time(&o, side.ts).expect("reference input has event times");
            let key = key_of(&o, side.key);
            // Every start s = k * slide with s <= t < s + size.
            let mut s = t.div_euclid(slide) * slide;
            while s + size > t {
                if s + size - 1 > *wm {
                    groups.entry((s, key.clone())).or_default()[i].push(o.clone());
                }
                s -= slide;
            }
        }
    }
    let mut out = Vec::new();
    let member = |o: &Obj| Value::Object(o.clone().into_iter().collect());
    for ((start, _), [ls, rs]) in groups {
        let base = || {
            let mut o = Obj::new();
            o.insert("window_start".into(), Value::from(start));
            o.insert("window_end".into(), Value::from(start + size));
            o
        };
        for l in &ls {
            for r in &rs {
                let mut o = base();
                o.insert(left.name.into(), member(l));
                o.insert(right.name.into(), member(r));
                out.push(o);
            }
        }
        let emit_left = matches!(kind, JoinKind::Left | JoinKind::Full) && rs.is_empty();
        let emit_right = matches!(kind, JoinKind::Right | JoinKind::Full) && ls.is_empty();
        for (emit, lines, name) in [(emit_left, &ls, left.name), (emit_right, &rs, right.name)] {
            if emit {
                for x in lines {
                    let mut o = base();
                    o.insert(name.into(), member(x));
                    out.push(o);
                }
            }
        }
    }
    out
}

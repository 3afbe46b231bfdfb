//! The `join` operator's settings (issue 28): the interval, window and
//! temporal joins of two streams. Checks what one node's settings can show
//! (keys of equal arity, `lower <= upper`, two distinct inputs, output
//! members that do not collide, a temporal join's kind and deletion
//! expression) and, in `flow`, what needs both inputs (their key fields,
//! event time on both sides). Every error is located at its `FILE:LINE:COL`.

use super::locate::{child, Seg};
use super::pipeline::{JoinKind, JoinSpec, NodeKind, TemporalSpec};
use super::pipeline::{WindowSpec, WINDOW_END, WINDOW_START};
use super::raw::{RawInterval, RawJoinAs, RawJoinKind, RawJoinOn, RawTemporal, RawWindow};
use super::specs::{check_fields, event_span, key_list, window_spec, Cx, Flow, Time};
use crate::types::Millis;

/// A join's raw settings, borrowed from `RawOperator::Join`.
pub(crate) struct RawJoin<'a> {
    pub left: &'a str,
    pub right: &'a str,
    pub on: &'a RawJoinOn,
    pub kind: Option<RawJoinKind>,
    pub interval: Option<&'a RawInterval>,
    pub window: Option<&'a RawWindow>,
    pub temporal: Option<&'a RawTemporal>,
    pub prefixes: Option<&'a RawJoinAs>,
    pub dead_letter: Option<&'a str>,
}

pub(crate) fn spec(cx: &mut Cx, at: &[Seg], raw: RawJoin) -> NodeKind {
    let on = child(at, "on");
    let left_key = key_list(cx, &child(&on, "left"), &raw.on.left);
    let right_key = key_list(cx, &child(&on, "right"), &raw.on.right);
    if !left_key.is_empty() && !right_key.is_empty() && left_key.len() != right_key.len() {
        cx.err(
            &child(&on, "right"),
            format!(
                "`on.right` has {} key fields and `on.left` {}: keys of different arity never compare equal (expected one right field per left field)",
                right_key.len(),
                left_key.len()
            ),
        );
    }
    if raw.left == raw.right {
        cx.err(
            &child(at, "right"),
            format!("a join of `{}` with itself: `left` and `right` must be different nodes (put a `filter` on one side to join a stream with a copy of it)", raw.left),
        );
    }
    let (mut lower, mut upper, mut window, mut temporal) = (None, None, None, None);
    match (raw.interval, raw.window, raw.temporal) {
        (Some(interval), None, None) => (lower, upper) = bounds(cx, at, interval),
        (None, Some(w), None) => window = windows(cx, at, w),
        (None, None, Some(t)) => temporal = Some(temporal_spec(cx, at, t, raw.kind)),
        (None, None, None) => cx.err(
            at,
            "a join needs an `interval: {lower, upper}` (the interval join), a `window` (the window join) or `temporal: {}` (the temporal join)",
        ),
        (i, w, _) => {
            // Report at the second of the three given.
            let second = if i.is_some() && w.is_some() { "window" } else { "temporal" };
            cx.err_key(&child(at, second), "a join has one of `interval` (the interval join), `window` (the window join) and `temporal` (the temporal join), not two")
        }
    }
    let (left_as, right_as) = prefixes(cx, at, &raw);
    if raw.window.is_some() {
        for (side, name) in [("left", &left_as), ("right", &right_as)] {
            if name == WINDOW_START || name == WINDOW_END {
                let here = if raw.prefixes.is_some_and(|p| if side == "left" { p.left.is_some() } else { p.right.is_some() }) {
                    child(&child(at, "as"), side)
                } else {
                    child(at, side)
                };
                cx.err(&here, format!("output field `{name}` would collide with the window bound a window join outputs: give the {side} side another name with `as`"));
            }
        }
    }
    NodeKind::Join(JoinSpec {
        left_key,
        right_key,
        kind: match raw.kind.unwrap_or(RawJoinKind::Inner) {
            RawJoinKind::Inner => JoinKind::Inner,
            RawJoinKind::Left => JoinKind::Left,
            RawJoinKind::Right => JoinKind::Right,
            RawJoinKind::Full => JoinKind::Full,
        },
        lower: lower.unwrap_or(0),
        upper: upper.unwrap_or(0),
        window,
        temporal,
        left_as,
        right_as,
        dead_letter: raw.dead_letter.map(std::path::PathBuf::from),
    })
}

/// `interval: {lower, upper}`, `lower <= upper`.
fn bounds(cx: &mut Cx, at: &[Seg], interval: &RawInterval) -> (Option<Millis>, Option<Millis>) {
    let int = child(at, "interval");
    let lower = signed_span(cx, &int, "lower", &interval.lower);
    let upper = signed_span(cx, &int, "upper", &interval.upper);
    if let (Some(l), Some(u)) = (lower, upper) {
        if l > u {
            cx.err(
                &child(&int, "lower"),
                format!(
                    "`lower` ({}) is above `upper` ({}): the interval [left.ts + lower, left.ts + upper] would be empty",
                    interval.lower, interval.upper
                ),
            );
        }
    }
    (lower, upper)
}

/// A temporal join's table settings. It emits each left record once, with
/// the version valid at its time or (left outer) alone: the table's
/// versions are not records to emit, so `right` and `full` mean nothing.
fn temporal_spec(cx: &mut Cx, at: &[Seg], raw: &RawTemporal, kind: Option<RawJoinKind>) -> TemporalSpec {
    if let Some(k @ (RawJoinKind::Right | RawJoinKind::Full)) = kind {
        let name = if k == RawJoinKind::Right { "right" } else { "full" };
        cx.err(
            &child(at, "kind"),
            format!("a temporal join is `inner` or `left`, not `{name}`: its right side is a table of versions, which are not emitted on their own"),
        );
    }
    let t_at = child(at, "temporal");
    let delete_when = raw.delete_when.as_ref().map(|source| {
        super::specs::expression(cx, &child(&t_at, "delete_when"), "delete_when", source);
        source.clone()
    });
    let ttl = raw.ttl.as_ref().and_then(|t| super::specs::event_span(cx, &t_at, "ttl", t, true));
    let processing_time = match raw.as_of.as_deref() {
        None | Some("event_time") => false,
        Some("processing_time") => true,
        Some(other) => {
            cx.err(&child(&t_at, "as_of"), format!("`as_of` is `event_time` or `processing_time`, not `{other}`"));
            false
        }
    };
    if processing_time && ttl.is_some() {
        cx.err(
            &child(&t_at, "ttl"),
            "`ttl` is a span of event time, and `as_of: processing_time` keeps one version per key, the latest to arrive: a processing-time TTL is not built",
        );
    }
    TemporalSpec { delete_when, ttl, processing_time }
}

/// A window join's windows: the aggregate's tumbling or sliding windows.
/// One `window` serves both sides, so their windows cannot differ.
fn windows(cx: &mut Cx, at: &[Seg], raw: &RawWindow) -> Option<WindowSpec> {
    let w_at = child(at, "window");
    match window_spec(cx, &w_at, raw)? {
        WindowSpec::Session { .. } => {
            cx.err(&w_at, "a window join takes `tumbling` or `sliding` windows: sessions of the two sides would not be the same windows");
            None
        }
        w => Some(w),
    }
}

/// The output members of the two sides: `as.left` / `as.right`, else the
/// input node names. Two members of one name would collide.
fn prefixes(cx: &mut Cx, at: &[Seg], raw: &RawJoin) -> (String, String) {
    let given = raw.prefixes;
    let left = given.and_then(|p| p.left.clone()).unwrap_or_else(|| raw.left.to_string());
    let right = given.and_then(|p| p.right.clone()).unwrap_or_else(|| raw.right.to_string());
    let as_at = child(at, "as");
    for (side, name, set) in
        [("left", &left, given.is_some_and(|p| p.left.is_some())), ("right", &right, given.is_some_and(|p| p.right.is_some()))]
    {
        if set && name.is_empty() {
            cx.err(&child(&as_at, side), format!("`as.{side}` is empty: expected the name of the output member holding the {side} record"));
        }
    }
    // A self-join is reported on its own; its default names are equal too.
    if left == right && raw.left != raw.right {
        let where_: Vec<Seg> = if given.is_some_and(|p| p.right.is_some()) { child(&as_at, "right") } else { child(at, "right") };
        cx.err(
            &where_,
            format!("output field `{right}` would hold both the left and the right record: give the sides different names with `as: {{left: ..., right: ...}}`"),
        );
    }
    (left, right)
}

/// A duration of event time that may be negative (`-1h`), whole milliseconds.
fn signed_span(cx: &mut Cx, base: &[Seg], key: &str, text: &str) -> Option<Millis> {
    let (negative, body) = match text.trim_start().strip_prefix('-') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, text),
    };
    let d = event_span(cx, base, key, body, false)?;
    // At most 10000 years: fits in i64 milliseconds.
    let ms = Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX);
    Some(if negative { -ms } else { ms })
}

/// What flows out of a join, given what flows into each side: both sides
/// need event time (the interval is one of event time), and the key fields
/// must be in each side's output where that is known.
pub(crate) fn flow(cx: &mut Cx, at: &[Seg], spec: &JoinSpec, left: (&str, &Flow), right: (&str, &Flow)) -> Flow {
    let on = child(at, "on");
    check_fields(cx, &child(&on, "left"), &spec.left_key, left.0, left.1);
    check_fields(cx, &child(&on, "right"), &spec.right_key, right.0, right.1);
    // A processing-time lookup needs no event time; its output has the
    // left record's, if any.
    if spec.temporal.as_ref().is_some_and(|t| t.processing_time) {
        return Flow { fields: None, time: left.1.time.clone() };
    }
    for (side, (name, flow)) in [("left", left), ("right", right)] {
        if let Time::Missing(why) = &flow.time {
            cx.err(
                &child(at, side),
                format!("a join needs event time on both sides, but its {side} input `{name}` has none: {why} (give the source an `event_time`)"),
            );
        }
    }
    // Which members the sides' records hold depends on the records.
    Flow { fields: None, time: Time::Event }
}

#[cfg(test)]
mod tests {
    //! Each refusal at its `FILE:LINE:COL`.

    use crate::config::{load_str, JoinKind, NodeKind};

    const SOURCES: &str = "\
name: p
sources:
  - name: orders
    type: datagen
    fields: {id: {kind: sequence}, ts: {kind: timestamp}}
    event_time: {field: ts}
  - name: pays
    type: datagen
    fields: {oid: {kind: sequence}, n: {kind: int, min: 0, max: 9}, ts: {kind: timestamp}}
    event_time: {field: ts}
  - name: plain
    type: datagen
    fields: {oid: {kind: sequence}}
sinks:
  - {name: out, type: stdout, input: j}
  - {name: rest, type: stdout, input: plain}
operators:
";

    fn join(body: &str) -> String {
        format!("{SOURCES}  - name: j\n    type: join\n{body}")
    }

    const OK: &str = "    left: orders\n    right: pays\n    on: {left: [id], right: [oid]}\n    interval: {lower: -1h, upper: 10s}\n";

    fn errors(text: &str) -> Vec<String> {
        match load_str(text, "t.yaml", &[]) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    /// `t.yaml:LINE:COL: ` of the first `needle` after line `after`.
    fn at(text: &str, after: &str, needle: &str) -> String {
        let start = text.find(after).expect("anchor in text");
        let pos = start + text[start..].find(needle).expect("needle in text");
        let line = text[..pos].matches('\n').count() + 1;
        let col = pos - text[..pos].rfind('\n').map_or(0, |n| n + 1) + 1;
        format!("t.yaml:{line}:{col}: ")
    }

    #[track_caller]
    fn assert_one(text: &str, at: &str, message: &str) {
        let errs = errors(text);
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(errs[0].starts_with(at) && errs[0].contains(message), "{:?} is not at {at} with {message:?}", errs[0]);
    }

    #[test]
    fn a_join_loads_with_its_defaults() {
        let p = load_str(&join(OK), "t.yaml", &[]).unwrap();
        let j = p.nodes.iter().find(|n| n.name == "j").unwrap();
        let NodeKind::Join(spec) = &j.kind else { panic!("not a join") };
        assert_eq!((spec.lower, spec.upper, spec.kind), (-3_600_000, 10_000, JoinKind::Inner));
        assert_eq!((spec.left_as.as_str(), spec.right_as.as_str()), ("orders", "pays"));
        let name = |i: Option<usize>| i.map(|i| p.nodes[i].name.as_str());
        assert_eq!((name(j.input), name(j.right)), (Some("orders"), Some("pays")));
    }

    #[test]
    fn keys_of_different_arity_are_refused() {
        let text = join(&OK.replace("right: [oid]", "right: [oid, n]"));
        assert_one(&text, &at(&text, "on:", "[oid, n]"), "`on.right` has 2 key fields and `on.left` 1");
    }

    #[test]
    fn lower_above_upper_is_refused() {
        let text = join(&OK.replace("lower: -1h, upper: 10s", "lower: 2s, upper: -1s"));
        assert_one(&text, &at(&text, "interval:", "2s"), "`lower` (2s) is above `upper` (-1s)");
    }

    #[test]
    fn a_join_of_a_node_with_itself_is_refused() {
        let text = join(&OK.replace("right: pays", "right: orders").replace("right: [oid]", "right: [id]"));
        let errs = errors(&text);
        assert!(
            errs.iter()
                .any(|e| e.starts_with(&at(&text, "left: orders", "orders\n    on")) && e.contains("a join of `orders` with itself")),
            "{errs:#?}"
        );
    }

    #[test]
    fn two_sides_under_one_name_are_refused() {
        let text = join(&format!("{OK}    as: {{left: x, right: x}}\n"));
        assert_one(&text, &at(&text, "as:", "x}"), "output field `x` would hold both the left and the right record");
    }

    #[test]
    fn key_fields_and_event_time_are_checked_on_each_side() {
        let text = join(&OK.replace("right: pays", "right: plain").replace("left: [id]", "left: [nope]"));
        let errs = errors(&text);
        assert!(
            errs.iter().any(|e| e.contains("a join needs event time on both sides, but its right input `plain` has none")),
            "{errs:#?}"
        );
        let text = join(&OK.replace("lower: -1h", "lower: 1.5ms"));
        assert_one(&text, &at(&text, "interval:", "1.5ms"), "whole number of milliseconds");
    }

    #[test]
    fn a_window_join_takes_tumbling_or_sliding_windows_and_keeps_its_bounds_apart() {
        let windowed = OK.replace("interval: {lower: -1h, upper: 10s}", "window: {type: sliding, size: 1m, slide: 10s}");
        let p = load_str(&join(&windowed), "t.yaml", &[]).unwrap();
        let Some(NodeKind::Join(spec)) = p.nodes.iter().find(|n| n.name == "j").map(|n| &n.kind) else { panic!("no join") };
        assert!(spec.window.is_some());
        let text = join(&OK.replace("interval: {lower: -1h, upper: 10s}", "window: {type: session, gap: 1s}"));
        assert_one(&text, &at(&text, "    type: join", "{type: session"), "a window join takes `tumbling` or `sliding` windows");
        let text = join(&format!("{windowed}    as: {{left: window_end}}\n"));
        assert_one(&text, &at(&text, "as:", "window_end}"), "output field `window_end` would collide with the window bound");
        let text = join(&format!("{OK}    window: {{type: tumbling, size: 1s}}\n"));
        assert_one(&text, &at(&text, "interval:", "window:"), "not two");
        let text = join(&OK.replace("    interval: {lower: -1h, upper: 10s}\n", ""));
        assert_one(&text, &at(&text, "operators:", "name: j"), "a join needs an `interval");
    }

    #[test]
    fn a_temporal_join_is_inner_or_left_with_a_deletion_expression_that_compiles() {
        let temporal = OK.replace("interval: {lower: -1h, upper: 10s}", "temporal: {delete_when: \"n == 0\"}");
        let p = load_str(&join(&temporal), "t.yaml", &[]).unwrap();
        let Some(NodeKind::Join(spec)) = p.nodes.iter().find(|n| n.name == "j").map(|n| &n.kind) else { panic!("no join") };
        assert_eq!(spec.temporal.as_ref().and_then(|t| t.delete_when.as_deref()), Some("n == 0"));
        assert_eq!(p.state_keys()["j"], "temporal join by [id] and [oid]", "its state is not an interval join's");
        let text = join(&format!("{temporal}    kind: full\n"));
        assert_one(&text, &at(&text, "kind:", "full"), "a temporal join is `inner` or `left`, not `full`");
        let text = join(&temporal.replace("n == 0", "n ==="));
        assert_one(&text, &at(&text, "temporal:", "\"n ==="), "`delete_when` expression `n ===`");
        let text = join(&format!("{OK}    temporal: {{}}\n"));
        assert_one(&text, &at(&text, "interval:", "temporal:"), "not two");
        let with_ttl = load_str(&join(&temporal.replace("{delete_when", "{ttl: 7d, delete_when")), "t.yaml", &[]).unwrap();
        let Some(NodeKind::Join(spec)) = with_ttl.nodes.iter().find(|n| n.name == "j").map(|n| &n.kind) else { panic!("no join") };
        assert_eq!(spec.temporal.as_ref().and_then(|t| t.ttl), Some(std::time::Duration::from_secs(7 * 86_400)));
        let text = join(&temporal.replace("{delete_when", "{ttl: 0s, delete_when"));
        assert_one(&text, &at(&text, "temporal:", "0s"), "`ttl` must be greater than 0");
    }

    #[test]
    fn a_processing_time_lookup_needs_no_event_time_and_no_ttl() {
        let lookup = "    left: plain\n    right: pays\n    on: {left: [oid], right: [oid]}\n    temporal: {as_of: processing_time}\n    kind: left\n";
        // `plain` (no event time) is the left side; `orders` goes to a sink.
        let join = |body: &str| join(body).replace("input: plain}", "input: orders}");
        let p = load_str(&join(lookup), "t.yaml", &[]).unwrap();
        let Some(NodeKind::Join(spec)) = p.nodes.iter().find(|n| n.name == "j").map(|n| &n.kind) else { panic!("no join") };
        assert!(spec.temporal.as_ref().is_some_and(|t| t.processing_time));
        assert_eq!(p.state_keys()["j"], "processing-time temporal join by [oid] and [oid]", "not an event-time table's state");
        let text = join(&lookup.replace("as_of: processing_time", "as_of: processing_time, ttl: 1h"));
        assert_one(&text, &at(&text, "temporal:", "1h"), "a processing-time TTL is not built");
        let text = join(&lookup.replace("processing_time", "wall_clock"));
        let want = format!("{}`as_of` is `event_time` or `processing_time`, not `wall_clock`", at(&text, "temporal:", "wall_clock"));
        assert!(errors(&text).contains(&want), "{:?}", errors(&text));
        let text = join(&lookup.replace("as_of: processing_time", "as_of: event_time"));
        assert!(errors(&text).iter().any(|e| e.contains("a join needs event time on both sides")), "{:?}", errors(&text));
    }

    #[test]
    fn a_cycle_through_the_right_input_is_refused() {
        let text =
            format!("{}  - {{name: back, type: filter, input: j, where: \"true\"}}\n", join(&OK.replace("right: pays", "right: back")));
        let errs = errors(&text);
        assert!(
            errs.iter().any(|e| e.starts_with(&at(&text, "right: back", "back")) && e.contains("inputs form a cycle through `j`")),
            "{errs:#?}"
        );
    }

    #[test]
    fn a_join_in_a_cluster_is_refused_with_the_reason() {
        let text = format!("{}cluster: {{instances: 2, index: 0}}\n", join(OK));
        let errs = errors(&text);
        assert!(errs.iter().any(|e| e.contains("a join cannot run in a cluster (2 instances) yet")), "{errs:#?}");
    }
}

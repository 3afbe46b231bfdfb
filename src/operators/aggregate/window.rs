//! Window assignment and firing rules, as pure functions of time.
//!
//! A window is the half-open interval `[start, end)` of event time in ms.
//! Window arithmetic is checked: a window that i64 cannot hold is None, never
//! a clamped (overlapping or empty) one. Event times and durations are
//! bounded (`types::MIN_EVENT_TIME..=MAX_EVENT_TIME`, `MAX_TIME_SPAN`), so
//! for validated pipelines every window exists.

use std::ops::Range;

use crate::types::Millis;

/// `[start, end)` in event-time ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Window {
    pub start: Millis,
    pub end: Millis,
}

impl Window {
    pub fn new(start: Millis, end: Millis) -> Self {
        Window { start, end }
    }
}

/// The largest multiple of `step` that is <= `ts` (correct for negative ts).
fn floor_to(ts: Millis, step: Millis) -> Option<Millis> {
    ts.checked_div_euclid(step)?.checked_mul(step)
}

/// The tumbling window of `size` holding `ts`: `[floor(ts/size)*size, +size)`.
pub fn tumbling(ts: Millis, size: Millis) -> Option<Window> {
    let start = floor_to(ts, size)?;
    Some(Window::new(start, start.checked_add(size)?))
}

/// Every sliding window `[s, s+size)` with `s` a multiple of `slide` that
/// holds `ts`, appended to `out` (cleared first) in ascending start order.
/// Empty when `slide > size` leaves `ts` in a gap between windows; None
/// (and `out` empty) if a window would leave the i64 range.
pub fn sliding(ts: Millis, size: Millis, slide: Millis, out: &mut Vec<Window>) -> Option<()> {
    out.clear();
    let windows = (|| {
        let mut start = floor_to(ts, slide)?;
        while start.checked_add(size)? > ts {
            out.push(Window::new(start, start + size));
            start = start.checked_sub(slide)?;
        }
        Some(())
    })();
    if windows.is_none() {
        out.clear();
    }
    out.reverse();
    windows
}

/// The session window a single record opens: `[ts, ts+gap)`.
pub fn session(ts: Millis, gap: Millis) -> Option<Window> {
    Some(Window::new(ts, ts.checked_add(gap)?))
}

/// The watermark at which a window ending at `end` fires.
pub fn fire_time(end: Millis, allowed_lateness: Millis) -> Millis {
    end.saturating_sub(1).saturating_add(allowed_lateness)
}

/// True if a window ending at `end` has fired by `watermark` (a record for
/// it now is late).
pub fn has_fired(end: Millis, allowed_lateness: Millis, watermark: Millis) -> bool {
    fire_time(end, allowed_lateness) <= watermark
}

/// True if a record at `ts` is late for session windows at `watermark`:
/// the earliest session that can hold it (one ending at `ts + 1`) has
/// fired, i.e. `ts + allowed_lateness <= watermark`. Judged by the record's
/// split watermark, this never lets a record join a session that has fired
/// (every session it overlaps ends after `ts`), and never depends on which
/// sessions of other splits happened to be open.
pub fn session_is_late(ts: Millis, allowed_lateness: Millis, watermark: Millis) -> bool {
    ts.saturating_add(allowed_lateness) <= watermark
}

/// Merge `new` into a key's sessions (sorted by start, pairwise disjoint,
/// maybe touching). Returns the index range of the sessions that overlap
/// `new` (empty: none) and the union of them with `new`.
///
/// Only overlap merges: a session `[s, e)` fires at watermark `e - 1`, when a
/// record at `e` is not late yet, so merging touching sessions would make
/// the result depend on when the watermark came.
pub fn merge_session(sessions: &[Window], new: Window) -> (Range<usize>, Window) {
    let first = sessions.partition_point(|s| s.end <= new.start);
    let mut merged = new;
    let mut last = first;
    while let Some(s) = sessions.get(last).filter(|s| s.start < new.end) {
        merged.start = merged.start.min(s.start);
        merged.end = merged.end.max(s.end);
        last += 1;
    }
    (first..last, merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: Millis, end: Millis) -> Window {
        Window::new(start, end)
    }

    #[test]
    fn a_session_record_is_late_at_or_before_the_watermark_minus_lateness() {
        assert!(session_is_late(100, 0, 100));
        assert!(!session_is_late(100, 0, 99));
        assert!(!session_is_late(100, 5, 104));
        assert!(session_is_late(100, 5, 105));
        assert!(!session_is_late(Millis::MAX, 0, Millis::MAX - 1), "no overflow at the end of time");
    }

    #[test]
    fn tumbling_floors_including_negative_times() {
        let t = |ts, size| tumbling(ts, size).unwrap();
        assert_eq!(t(0, 10), w(0, 10));
        assert_eq!(t(9, 10), w(0, 10));
        assert_eq!(t(10, 10), w(10, 20));
        assert_eq!(t(-1, 10), w(-10, 0));
        assert_eq!(t(-10, 10), w(-10, 0));
        assert_eq!(t(-11, 10), w(-20, -10));
    }

    #[test]
    fn windows_beyond_i64_do_not_exist_instead_of_overlapping_or_empty() {
        // Issue 18 #10: these gave [MIN, MIN+10) and [MIN+8, MIN+18), and [MAX, MAX).
        assert_eq!(tumbling(Millis::MIN, 10), None);
        assert_eq!(tumbling(Millis::MAX, 10), None);
        assert_eq!(tumbling(Millis::MIN + 7, 10), None);
        assert_eq!(tumbling(Millis::MIN + 8, 10), Some(w(Millis::MIN + 8, Millis::MIN + 18)), "a multiple of 10");
        let mut out = Vec::new();
        assert_eq!(sliding(Millis::MIN, 10, 5, &mut out), None);
        assert!(out.is_empty());
        assert_eq!(sliding(Millis::MAX, 10, 5, &mut out), None);
        assert_eq!(session(Millis::MAX - 5, 10), None);
        // At the ends of the event-time range with the longest span, every window exists.
        use crate::types::{MAX_EVENT_TIME, MAX_TIME_SPAN, MIN_EVENT_TIME};
        for ts in [MIN_EVENT_TIME, MAX_EVENT_TIME] {
            for size in [1, 7, MAX_TIME_SPAN] {
                let w = tumbling(ts, size).unwrap();
                assert!(w.start <= ts && ts < w.end && w.end - w.start == size, "{ts} {size}: {w:?}");
                assert!(sliding(ts, size, (size / 3).max(1), &mut out).is_some());
                assert!(session(ts, size).is_some());
            }
        }
    }

    #[test]
    fn sliding_lists_every_window_holding_ts() {
        let mut out = Vec::new();
        let sliding = |ts, size, slide, out: &mut Vec<Window>| assert!(sliding(ts, size, slide, out).is_some());
        sliding(12, 10, 5, &mut out);
        assert_eq!(out, vec![w(5, 15), w(10, 20)]);
        sliding(10, 10, 5, &mut out);
        assert_eq!(out, vec![w(5, 15), w(10, 20)]);
        sliding(-1, 10, 5, &mut out);
        assert_eq!(out, vec![w(-10, 0), w(-5, 5)]);
        sliding(7, 30, 10, &mut out);
        assert_eq!(out, vec![w(-20, 10), w(-10, 20), w(0, 30)]);
        // size not a multiple of slide.
        sliding(0, 25, 10, &mut out);
        assert_eq!(out, vec![w(-20, 5), w(-10, 15), w(0, 25)]);
        // A gap between hopping windows holds no window.
        sliding(7, 5, 10, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn fire_time_and_lateness() {
        assert_eq!(fire_time(10, 0), 9);
        assert_eq!(fire_time(10, 5), 14);
        assert!(!has_fired(10, 0, 8));
        assert!(has_fired(10, 0, 9));
        assert!(!has_fired(10, 5, 13));
        assert!(has_fired(10, 5, 14));
        assert_eq!(fire_time(Millis::MAX, 100), Millis::MAX);
    }

    #[test]
    fn sessions_merge_when_overlapping_not_touching() {
        let s = [w(0, 10), w(20, 30), w(50, 60)];
        // Inside one session.
        assert_eq!(merge_session(&s, w(2, 8)), (0..1, w(0, 10)));
        // Overlapping on either side merges.
        assert_eq!(merge_session(&s, w(9, 15)), (0..1, w(0, 15)));
        assert_eq!(merge_session(&s, w(15, 21)), (1..2, w(15, 30)));
        // Touching does not: [0,10) fires at watermark 9, before a record at 10 is late.
        assert_eq!(merge_session(&s, w(10, 15)), (1..1, w(10, 15)));
        assert_eq!(merge_session(&s, w(15, 20)), (1..1, w(15, 20)));
        assert_eq!(merge_session(&[w(0, 10), w(10, 20)], w(10, 12)), (1..2, w(10, 20)));
        assert_eq!(merge_session(&[w(0, 10), w(10, 20)], w(5, 15)), (0..2, w(0, 20)));
        // Bridging two sessions merges all three.
        assert_eq!(merge_session(&s, w(5, 25)), (0..2, w(0, 30)));
        assert_eq!(merge_session(&s, w(-5, 100)), (0..3, w(-5, 100)));
        // In a gap: a new session at its sorted position.
        assert_eq!(merge_session(&s, w(35, 45)), (2..2, w(35, 45)));
        assert_eq!(merge_session(&s, w(70, 80)), (3..3, w(70, 80)));
        assert_eq!(merge_session(&[], w(1, 2)), (0..0, w(1, 2)));
        assert_eq!(session(-5, 10), Some(w(-5, 5)));
    }
}

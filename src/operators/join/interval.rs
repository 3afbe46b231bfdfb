//! The arithmetic of the interval join, apart from state and records: which
//! times of the other side a record matches, when a buffered record can no
//! longer match (and is removed, emitted if unmatched by an outer join), and
//! how far the output watermark is held back.
//!
//! A left record at `t` matches right records at `s` with
//! `t + lower <= s <= t + upper` (Flink's `a.ts BETWEEN b.ts + lower AND
//! b.ts + upper` with `b` the left side). Every sum saturates: event times
//! and bounds are within ±10000 years, far from the ends of i64.

use crate::types::{Millis, MAX_WATERMARK};

/// A join's interval, `lower <= upper` (validated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub lower: Millis,
    pub upper: Millis,
}

/// Which input a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Left,
    Right,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }

    /// 0 for left, 1 for right (`JoinKind::emits_unmatched`).
    pub fn index(self) -> usize {
        match self {
            Side::Left => 0,
            Side::Right => 1,
        }
    }
}

impl Interval {
    /// The times (inclusive) of the other side that a record of `side` at
    /// `t` matches.
    pub fn partners(self, side: Side, t: Millis) -> (Millis, Millis) {
        match side {
            Side::Left => (t.saturating_add(self.lower), t.saturating_add(self.upper)),
            Side::Right => (t.saturating_sub(self.upper), t.saturating_sub(self.lower)),
        }
    }

    /// At input watermark `w`, the latest time of a buffered record of
    /// `side` that can match nothing more: its partners all lie at or
    /// before `w`, and no record at or before `w` is still to come (a later
    /// one is late and dropped). Such records leave state.
    pub fn done_up_to(self, side: Side, w: Millis) -> Millis {
        // The last partner time of a record at t is t + upper (left) or
        // t - lower (right); it is done when that is <= w.
        match side {
            Side::Left => w.saturating_sub(self.upper),
            Side::Right => w.saturating_add(self.lower),
        }
    }

    /// How far the output watermark trails the input's: an unmatched
    /// record at `t` is emitted once the watermark passes its partners, up
    /// to `max(upper, -lower)` after `t`, and must not be late for the
    /// operators after the join (Flink's watermark delay of its interval join).
    pub fn hold(self) -> Millis {
        self.upper.max(self.lower.saturating_neg()).max(0)
    }

    /// The watermark the join passes on at input watermark `w`.
    pub fn output_watermark(self, w: Millis) -> Millis {
        if w == MAX_WATERMARK {
            w
        } else {
            w.saturating_sub(self.hold())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: Interval = Interval { lower: -10, upper: 5 };

    #[test]
    fn partners_of_each_side_are_the_same_pairs() {
        assert_eq!(I.partners(Side::Left, 100), (90, 105));
        assert_eq!(I.partners(Side::Right, 100), (95, 110));
        // Every pair (t, s) is in range from both ends or from neither.
        for t in 80..120 {
            for s in 80..120 {
                let (lo, hi) = I.partners(Side::Left, t);
                let (llo, lhi) = I.partners(Side::Right, s);
                assert_eq!((lo..=hi).contains(&s), (llo..=lhi).contains(&t), "t={t} s={s}");
            }
        }
    }

    #[test]
    fn a_record_is_done_once_the_watermark_passes_its_last_partner() {
        // Left at 100: partners up to 105, so done at watermark 105.
        assert_eq!(I.done_up_to(Side::Left, 104), 99);
        assert_eq!(I.done_up_to(Side::Left, 105), 100);
        // Right at 100: partners (left times) up to 110.
        assert_eq!(I.done_up_to(Side::Right, 110), 100);
        assert_eq!(I.done_up_to(Side::Right, 109), 99);
    }

    #[test]
    fn the_output_watermark_trails_by_the_widest_reach() {
        assert_eq!(I.hold(), 10);
        assert_eq!(Interval { lower: 0, upper: 0 }.hold(), 0);
        assert_eq!(Interval { lower: 2, upper: 7 }.hold(), 7);
        assert_eq!(Interval { lower: -7, upper: -2 }.hold(), 7);
        assert_eq!(I.output_watermark(1000), 990);
        assert_eq!(I.output_watermark(MAX_WATERMARK), MAX_WATERMARK);
        assert_eq!(I.output_watermark(Millis::MIN), Millis::MIN);
    }

    #[test]
    fn an_unmatched_record_is_never_late_downstream() {
        // Emitted when the watermark first reaches done (w >= t + upper
        // for a left record): the output watermark before that is below t.
        for t in -20..20 {
            for side in [Side::Left, Side::Right] {
                let first = (-100..100).find(|&w| I.done_up_to(side, w) >= t).unwrap();
                assert!(I.output_watermark(first - 1) < t, "side {side:?} t={t}");
            }
        }
    }
}

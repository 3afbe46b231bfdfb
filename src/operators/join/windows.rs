//! The arithmetic of the window join, apart from state and records: a
//! record's windows (the aggregate's tumbling and sliding windows), which
//! of them it may still join given its split's watermark, and when all of
//! a record's windows have fired.

use crate::config::WindowSpec;
use crate::operators::aggregate::window::{sliding, Window};
use crate::operators::dedup::duration_ms;
use crate::types::Millis;

/// Windows `[k * slide, k * slide + size)` (tumbling: `slide == size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    pub size: Millis,
    pub slide: Millis,
}

impl Windows {
    /// None for session windows (refused by `validate` for joins).
    pub fn of_spec(spec: &WindowSpec) -> Option<Windows> {
        match *spec {
            WindowSpec::Tumbling { size } => Some(Windows { size: duration_ms(size), slide: duration_ms(size) }),
            WindowSpec::Sliding { size, slide } => Some(Windows { size: duration_ms(size), slide: duration_ms(slide) }),
            WindowSpec::Session { .. } => None,
        }
    }

    /// The windows holding `t`, ascending (`out` cleared first).
    pub fn of(self, t: Millis, out: &mut Vec<Window>) {
        // Times and sizes are validated: every window exists.
        let _ = sliding(t, self.size, self.slide, out);
    }

    /// The first window end a record at `t` may join, when its split's
    /// watermark is `w`: the windows that fire at or before `w` (`end - 1
    /// <= w`) are closed to it, as for a windowed aggregate. None: every
    /// window of `t` is closed, the record is late.
    pub fn since(self, t: Millis, w: Millis, scratch: &mut Vec<Window>) -> Option<Millis> {
        self.of(t, scratch);
        scratch.iter().map(|win| win.end).find(|&end| end - 1 > w)
    }

    /// The start of the first window that fires after watermark `from`
    /// (whose `end - 1 > from`): windows fire in order of their starts, so
    /// a record before it is in no window firing later.
    pub fn first_start_firing_after(self, from: Millis) -> Millis {
        // The least start k * slide with k * slide + size - 1 > from.
        let k = from.saturating_sub(self.size).saturating_add(1).div_euclid(self.slide).saturating_add(1);
        k.saturating_mul(self.slide)
    }

    /// At watermark `w`, the latest time of a record whose every window has
    /// fired: its last window starts at `floor(t / slide) * slide` and fires
    /// at its end - 1.
    pub fn done_up_to(self, w: Millis) -> Millis {
        let last_start = w.saturating_add(1).saturating_sub(self.size).div_euclid(self.slide).saturating_mul(self.slide);
        last_start.saturating_add(self.slide - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_joins_the_windows_still_open_at_its_split_watermark() {
        let w = Windows { size: 30, slide: 10 };
        let mut s = Vec::new();
        // t = 5: windows ending 10, 20, 30.
        assert_eq!(w.since(5, Millis::MIN, &mut s), Some(10));
        assert_eq!(w.since(5, 9, &mut s), Some(20), "[-20, 10) fired at 9");
        assert_eq!(w.since(5, 28, &mut s), Some(30));
        assert_eq!(w.since(5, 29, &mut s), None, "late");
        let t = Windows { size: 10, slide: 10 };
        assert_eq!((t.since(-1, -2, &mut s), t.since(-1, -1, &mut s)), (Some(0), None));
    }

    #[test]
    fn the_first_window_to_fire_after_a_watermark() {
        for w in [Windows { size: 10, slide: 10 }, Windows { size: 30, slide: 10 }, Windows { size: 7, slide: 3 }] {
            for from in -50..50 {
                let mut ws = Vec::new();
                let first = (-100..100).flat_map(|t| {
                    w.of(t, &mut ws);
                    ws.clone()
                });
                let want = first.filter(|win| win.end - 1 > from).map(|win| win.start).min().unwrap();
                assert_eq!(w.first_start_firing_after(from), want, "{w:?} from {from}");
            }
        }
        let t = Windows { size: 10, slide: 10 };
        assert!(t.first_start_firing_after(Millis::MIN) < -1_000_000_000_000_000);
    }

    #[test]
    fn a_record_is_done_when_its_last_window_fired() {
        let t = Windows { size: 10, slide: 10 };
        assert_eq!((t.done_up_to(8), t.done_up_to(9), t.done_up_to(19)), (-1, 9, 19));
        let s = Windows { size: 30, slide: 10 };
        // t = 9: last window [0, 30) fires at 29; t = 10 at 39.
        assert_eq!((s.done_up_to(28), s.done_up_to(29), s.done_up_to(38)), (-1, 9, 9));
        for time in -40..40 {
            let mut ws = Vec::new();
            s.of(time, &mut ws);
            let fires = ws.last().unwrap().end - 1;
            assert!(s.done_up_to(fires) >= time && s.done_up_to(fires - 1) < time, "t = {time}");
        }
        assert_eq!(s.done_up_to(Millis::MAX), Millis::MAX - Millis::MAX.rem_euclid(10) - 30 + 9);
    }
}

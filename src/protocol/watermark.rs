//! Combines the watermarks of a subtask's input channels.
//!
//! The subtask's watermark is the minimum over its active inputs; an idle
//! input does not count (so a silent partition can't stall event time) and a
//! finished input counts as +∞. The combined watermark never goes back.

use crate::types::{Millis, MAX_WATERMARK, MIN_WATERMARK};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputState {
    Active(Millis),
    Idle(Millis),
    Finished,
}

/// What a change of input status means for the subtask's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatermarkChange {
    Unchanged,
    Advanced(Millis),
    /// Every unfinished input is idle: tell downstream we are idle too.
    BecameIdle,
}

#[derive(Debug, Clone)]
pub struct WatermarkTracker {
    inputs: Vec<InputState>,
    current: Millis,
    idle: bool,
}

impl WatermarkTracker {
    pub fn new(inputs: usize) -> Self {
        WatermarkTracker { inputs: vec![InputState::Active(MIN_WATERMARK); inputs], current: MIN_WATERMARK, idle: false }
    }

    pub fn current(&self) -> Millis {
        self.current
    }

    pub fn on_watermark(&mut self, input: usize, wm: Millis) -> WatermarkChange {
        if let InputState::Active(w) | InputState::Idle(w) = self.inputs[input] {
            self.inputs[input] = InputState::Active(w.max(wm));
        }
        self.recompute()
    }

    /// Data arrived on an input: it is active again.
    pub fn on_data(&mut self, input: usize) -> WatermarkChange {
        match self.inputs[input] {
            InputState::Idle(w) => {
                self.inputs[input] = InputState::Active(w);
                self.recompute()
            }
            _ => WatermarkChange::Unchanged,
        }
    }

    pub fn on_idle(&mut self, input: usize) -> WatermarkChange {
        if let InputState::Active(w) = self.inputs[input] {
            self.inputs[input] = InputState::Idle(w);
        }
        self.recompute()
    }

    pub fn on_finished(&mut self, input: usize) -> WatermarkChange {
        self.inputs[input] = InputState::Finished;
        self.recompute()
    }

    pub fn all_finished(&self) -> bool {
        self.inputs.iter().all(|s| *s == InputState::Finished)
    }

    fn recompute(&mut self) -> WatermarkChange {
        let active = self.inputs.iter().filter_map(|s| match s {
            InputState::Active(w) => Some(*w),
            _ => None,
        });
        let min = active.min();
        let all_done = self.all_finished();
        let candidate = match min {
            Some(w) => w,
            None if all_done => MAX_WATERMARK,
            None => {
                // Only idle (and finished) inputs remain.
                let was_idle = std::mem::replace(&mut self.idle, true);
                return if was_idle { WatermarkChange::Unchanged } else { WatermarkChange::BecameIdle };
            }
        };
        self.idle = false;
        if candidate > self.current {
            self.current = candidate;
            WatermarkChange::Advanced(candidate)
        } else {
            WatermarkChange::Unchanged
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use WatermarkChange::*;

    #[test]
    fn minimum_over_inputs() {
        let mut t = WatermarkTracker::new(2);
        assert_eq!(t.on_watermark(0, 10), Unchanged, "input 1 has no watermark yet");
        assert_eq!(t.on_watermark(1, 5), Advanced(5));
        assert_eq!(t.on_watermark(1, 20), Advanced(10));
        assert_eq!(t.on_watermark(0, 8), Unchanged, "an input's watermark never goes back");
        assert_eq!(t.current(), 10);
    }

    #[test]
    fn idle_input_does_not_hold_back_and_rejoins_without_regress() {
        let mut t = WatermarkTracker::new(2);
        t.on_watermark(0, 100);
        assert_eq!(t.on_idle(1), Advanced(100));
        assert_eq!(t.on_watermark(0, 150), Advanced(150));
        // Input 1 wakes up behind: the combined watermark stays put.
        assert_eq!(t.on_data(1), Unchanged);
        assert_eq!(t.on_watermark(1, 120), Unchanged);
        assert_eq!(t.on_watermark(1, 200), Unchanged);
        assert_eq!(t.on_watermark(0, 300), Advanced(200));
    }

    #[test]
    fn all_idle_is_reported_once() {
        let mut t = WatermarkTracker::new(2);
        assert_eq!(t.on_idle(0), Unchanged);
        assert_eq!(t.on_idle(1), BecameIdle);
        assert_eq!(t.on_idle(1), Unchanged);
        assert_eq!(t.on_watermark(0, 7), Advanced(7));
    }

    #[test]
    fn finished_inputs_count_as_infinity() {
        let mut t = WatermarkTracker::new(2);
        t.on_watermark(0, 3);
        assert_eq!(t.on_finished(1), Advanced(3));
        assert!(!t.all_finished());
        assert_eq!(t.on_finished(0), Advanced(MAX_WATERMARK));
        assert!(t.all_finished());
    }
}

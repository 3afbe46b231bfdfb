//! What a task loop measures about itself, per operator subtask: the time
//! it spent processing, waiting for input and blocked on a full output
//! channel, the watermarks it is at, and how full its channels are.
//!
//! Each [`TaskTimes`] has one writer, the task, which switches its phase
//! once per batch (never per record) with one swap and one add on its own
//! atomics; readers (the metrics endpoint, the status sampler) add the
//! phase in progress, so a task blocked for a minute shows that minute
//! while it lasts. Channel fill is read from the channels at read time.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use crate::types::{Millis, MIN_WATERMARK};

/// What a task is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Processing (polling a source, running operators, writing to a sink).
    Busy = 0,
    /// Waiting for input (or for a rate limit, or for a barrier's peers).
    Idle = 1,
    /// Waiting for room in a full output channel.
    Backpressured = 2,
}

/// Nanoseconds of each phase, in `Phase` order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseNanos(pub [u64; 3]);

impl PhaseNanos {
    pub fn busy(&self) -> u64 {
        self.0[Phase::Busy as usize]
    }
    pub fn idle(&self) -> u64 {
        self.0[Phase::Idle as usize]
    }
    pub fn backpressured(&self) -> u64 {
        self.0[Phase::Backpressured as usize]
    }
}

/// The time a task spent in each phase, shared by the operators chained
/// into that task (they run on one loop, so their time is one time).
#[derive(Debug, Default)]
pub struct TaskTimes {
    /// Finished phases, nanoseconds.
    done: [AtomicU64; 3],
    /// The phase in progress: (its start in ns since [`epoch`] + 1) << 2 |
    /// phase; 0 before the task starts and after it ends.
    current: AtomicU64,
    /// The highest value a reader was given, so a counter never goes back.
    seen: [AtomicU64; 3],
    /// Set once the task restored its state (if any) and started processing.
    ready: AtomicBool,
}

/// The process-wide origin of phase starts.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX >> 3)
}

impl TaskTimes {
    /// The task switches to `phase` (the task alone calls this).
    pub fn enter(&self, phase: Phase) {
        self.switch(((now_ns() + 1) << 2) | phase as u64);
    }

    /// The task restored what it had to and processes input now.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The task ends: the phase in progress is finished, none follows.
    pub fn stop(&self) {
        self.switch(0);
    }

    fn switch(&self, next: u64) {
        let now = next >> 2;
        // Swapped before the add: a reader in between sees neither the old
        // phase in progress nor its finished time (less, never twice), and
        // `seen` hides the dip.
        let prev = self.current.swap(next, Ordering::AcqRel);
        if prev != 0 {
            let start = prev >> 2;
            let now = if next == 0 { now_ns() + 1 } else { now };
            let phase = (prev & 3) as usize;
            self.done[phase.min(2)].fetch_add(now.saturating_sub(start), Ordering::AcqRel);
        }
    }

    /// Nanoseconds per phase so far, the phase in progress included;
    /// never less than an earlier read gave.
    pub fn read(&self) -> PhaseNanos {
        let load = |a: &[AtomicU64; 3]| [0, 1, 2].map(|i| a[i].load(Ordering::Acquire));
        let mut got = load(&self.done);
        for _ in 0..4 {
            let current = self.current.load(Ordering::Acquire);
            let again = load(&self.done);
            if again == got {
                if current != 0 {
                    let phase = ((current & 3) as usize).min(2);
                    got[phase] += (now_ns() + 1).saturating_sub(current >> 2);
                }
                break;
            }
            got = again;
        }
        PhaseNanos([0, 1, 2].map(|i| self.seen[i].fetch_max(got[i], Ordering::AcqRel).max(got[i])))
    }
}

/// A look at one channel's queue that does not keep it alive.
#[derive(Clone)]
pub struct ChannelProbe(pub(crate) Weak<dyn Fill>);

impl std::fmt::Debug for ChannelProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChannelProbe({:?})", self.fill())
    }
}

/// How full a queue is (0 to 1), for probes.
pub(crate) trait Fill: Send + Sync {
    fn fill(&self) -> f64;
}

impl ChannelProbe {
    /// None once both ends of the channel are gone.
    pub fn fill(&self) -> Option<f64> {
        self.0.upgrade().map(|f| f.fill())
    }
}

/// The measurements of one operator subtask.
#[derive(Debug)]
pub struct SubtaskGauges {
    /// Shared with the other operators of the same task.
    pub times: Arc<TaskTimes>,
    /// Its input watermark, ms (`MIN_WATERMARK`: none yet).
    pub input_watermark: AtomicI64,
    /// The watermark it emits, ms (`MIN_WATERMARK`: none yet).
    pub output_watermark: AtomicI64,
    /// The channels it reads (the head of a task) and writes (the tail).
    pub inputs: OnceLock<Vec<ChannelProbe>>,
    pub outputs: OnceLock<Vec<ChannelProbe>>,
    /// Sources: how much of the bounded input (bytes or rows, as its
    /// extent counts) the restored position had already read; may be
    /// negative for one subtask after a rescale (it took over more), the
    /// sum over the subtasks is not.
    pub restored_done: AtomicI64,
}

impl Default for SubtaskGauges {
    fn default() -> Self {
        SubtaskGauges::sharing(Arc::default())
    }
}

impl SubtaskGauges {
    pub fn sharing(times: Arc<TaskTimes>) -> Self {
        SubtaskGauges {
            times,
            input_watermark: AtomicI64::new(MIN_WATERMARK),
            output_watermark: AtomicI64::new(MIN_WATERMARK),
            inputs: OnceLock::new(),
            outputs: OnceLock::new(),
            restored_done: AtomicI64::new(0),
        }
    }

    pub fn set_watermarks(&self, input: Millis, output: Millis) {
        self.input_watermark.store(input, Ordering::Relaxed);
        self.output_watermark.store(output, Ordering::Relaxed);
    }

    /// The fullest of the input channels (None: no input channel).
    pub fn input_fill(&self) -> Option<f64> {
        fullest(self.inputs.get())
    }

    /// The fullest of the output channels (None: no output channel).
    pub fn output_fill(&self) -> Option<f64> {
        fullest(self.outputs.get())
    }
}

fn fullest(probes: Option<&Vec<ChannelProbe>>) -> Option<f64> {
    let probes = probes.filter(|p| !p.is_empty())?;
    Some(probes.iter().filter_map(ChannelProbe::fill).fold(0.0, f64::max))
}

/// A watermark for display and export: None for none yet, +inf at the end.
pub fn watermark_seconds(wm: Millis) -> Option<f64> {
    match wm {
        MIN_WATERMARK => None,
        Millis::MAX => Some(f64::INFINITY),
        ms => Some(ms as f64 / 1000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn phases_add_up_and_the_phase_in_progress_counts_while_it_lasts() {
        let t = TaskTimes::default();
        assert_eq!(t.read(), PhaseNanos::default(), "nothing before the task starts");
        t.enter(Phase::Idle);
        std::thread::sleep(Duration::from_millis(30));
        let during = t.read();
        assert!(during.idle() >= 30_000_000, "an idle wait shows while it lasts: {during:?}");
        assert_eq!((during.busy(), during.backpressured()), (0, 0));
        t.enter(Phase::Busy);
        std::thread::sleep(Duration::from_millis(10));
        t.enter(Phase::Backpressured);
        std::thread::sleep(Duration::from_millis(20));
        t.stop();
        let end = t.read();
        assert!(end.idle() >= during.idle() && end.busy() >= 10_000_000 && end.backpressured() >= 20_000_000, "{end:?}");
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(t.read(), end, "a stopped task's time stands still");
    }

    #[test]
    fn readers_never_see_a_counter_go_back_while_the_task_switches() {
        let t = Arc::new(TaskTimes::default());
        let writer = {
            let t = t.clone();
            std::thread::spawn(move || {
                for i in 0..200_000u32 {
                    t.enter(if i % 2 == 0 { Phase::Idle } else { Phase::Busy });
                }
                t.stop();
            })
        };
        let mut last = PhaseNanos::default();
        while !writer.is_finished() {
            let now = t.read();
            for i in 0..3 {
                assert!(now.0[i] >= last.0[i], "went back: {last:?} -> {now:?}");
            }
            last = now;
        }
        writer.join().unwrap();
    }

    #[test]
    fn watermarks_show_none_before_the_first_and_infinity_at_the_end() {
        assert_eq!(watermark_seconds(MIN_WATERMARK), None);
        assert_eq!(watermark_seconds(Millis::MAX), Some(f64::INFINITY));
        assert_eq!(watermark_seconds(1500), Some(1.5));
    }
}

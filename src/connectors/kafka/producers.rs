//! The watermark of a repartition topic as one receiving subtask reads it
//! (docs/scaling.md, "Event time across instances").
//!
//! Every producer (send subtask of every instance) writes its watermark into
//! every partition. A partition's watermark is the lowest over its
//! producers, the subtask's the lowest over its partitions: a window
//! downstream fires only when every producer has passed it. A producer not
//! heard from (no record, no watermark) on a partition for `idle_timeout`
//! does not hold that partition back; a partition whose producers are all
//! idle does not hold the subtask back. The watermarks are part of the
//! source's position, so a restore goes on from the same minimum.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::types::{Millis, MIN_WATERMARK};

type Tp = (String, i32);

#[derive(Debug, Clone, Copy)]
struct Heard {
    watermark: Millis,
    /// When a record or watermark of this producer was last read here
    /// (never: since the source opened or restored).
    last: Instant,
}

#[derive(Debug, Clone)]
pub struct ProducerWatermarks {
    /// Instances × send subtasks: producer ids are `0..producers`.
    producers: u32,
    idle_timeout: Option<Duration>,
    parts: BTreeMap<Tp, Vec<Heard>>,
}

impl ProducerWatermarks {
    pub fn new(parts: impl IntoIterator<Item = Tp>, producers: u32, idle_timeout: Option<Duration>, now: Instant) -> Self {
        let fresh = vec![Heard { watermark: MIN_WATERMARK, last: now }; producers as usize];
        ProducerWatermarks { producers, idle_timeout, parts: parts.into_iter().map(|tp| (tp, fresh.clone())).collect() }
    }

    pub fn producers(&self) -> u32 {
        self.producers
    }

    fn heard(&mut self, tp: &Tp, producer: u32) -> Result<&mut Heard, String> {
        let n = self.producers;
        let Some(p) = self.parts.get_mut(tp) else { return Err(format!("{}/{} is not read here", tp.0, tp.1)) };
        p.get_mut(producer as usize).ok_or_else(|| {
            format!(
                "producer {producer} on {}/{}, but the cluster has {n} (instances × parallelism): was the topic written by another cluster shape?",
                tp.0, tp.1
            )
        })
    }

    /// A watermark record of `producer` on `tp`: its watermark never goes
    /// back. One of a producer beyond this cluster's (written before a
    /// rescale, still waiting in the topic) does not count.
    pub fn on_watermark(&mut self, tp: &Tp, producer: u32, watermark: Millis, now: Instant) -> Result<(), String> {
        if producer >= self.producers {
            return Ok(());
        }
        let h = self.heard(tp, producer)?;
        h.watermark = h.watermark.max(watermark);
        h.last = now;
        Ok(())
    }

    /// A data record of `producer` on `tp`: it is not idle.
    pub fn on_record(&mut self, tp: &Tp, producer: u32, now: Instant) -> Result<(), String> {
        if producer >= self.producers {
            return Ok(());
        }
        self.heard(tp, producer)?.last = now;
        Ok(())
    }

    fn idle(&self, h: &Heard, now: Instant) -> bool {
        self.idle_timeout.is_some_and(|d| now.duration_since(h.last) >= d)
    }

    /// The lowest watermark of `tp`'s producers that are not idle (None: all idle).
    pub fn partition_watermark(&self, tp: &Tp, now: Instant) -> Option<Millis> {
        self.parts.get(tp)?.iter().filter(|h| !self.idle(h, now)).map(|h| h.watermark).min()
    }

    /// The lowest over the partitions that are not idle (None: nothing
    /// holds event time here, every producer is idle, or no partitions).
    pub fn watermark(&self, now: Instant) -> Option<Millis> {
        self.parts.keys().filter_map(|tp| self.partition_watermark(tp, now)).min()
    }

    /// Each producer's watermark on `tp`, for the position.
    pub fn of(&self, tp: &Tp) -> Vec<Millis> {
        self.parts.get(tp).map(|p| p.iter().map(|h| h.watermark).collect()).unwrap_or_default()
    }

    /// Take the watermarks a checkpoint recorded for `tp`, if recorded for
    /// the same producers. Otherwise (another number of instances or
    /// subtasks since) they start over: the source's watermark then stays
    /// where the checkpoint left it until every producer has spoken again.
    /// Either way no producer counts as idle before `idle_timeout` from now.
    pub fn restore(&mut self, tp: &Tp, recorded: &[Millis], now: Instant) -> bool {
        let same = recorded.len() == self.producers as usize;
        let Some(p) = self.parts.get_mut(tp) else { return false };
        for (i, h) in p.iter_mut().enumerate() {
            h.last = now;
            if same {
                h.watermark = h.watermark.max(recorded[i]);
            }
        }
        same
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> Tp {
        ("weir.p.agg".into(), p)
    }

    #[test]
    fn a_partition_waits_for_every_producer_and_the_source_for_every_partition() {
        let t0 = Instant::now();
        let mut w = ProducerWatermarks::new([tp(0), tp(1)], 3, None, t0);
        assert_eq!(w.watermark(t0), Some(MIN_WATERMARK), "nobody has spoken");
        for p in 0..3 {
            w.on_watermark(&tp(0), p, 100 + p as i64, t0).unwrap();
        }
        assert_eq!(w.partition_watermark(&tp(0), t0), Some(100));
        assert_eq!(w.watermark(t0), Some(MIN_WATERMARK), "partition 1 has heard from no producer");
        w.on_watermark(&tp(1), 0, 500, t0).unwrap();
        w.on_watermark(&tp(1), 1, 500, t0).unwrap();
        assert_eq!(w.watermark(t0), Some(MIN_WATERMARK), "producer 2 has not passed anything on partition 1");
        w.on_watermark(&tp(1), 2, 90, t0).unwrap();
        assert_eq!(w.watermark(t0), Some(90));
        // A producer's watermark never goes back (a late duplicate after a replay).
        w.on_watermark(&tp(1), 2, 50, t0).unwrap();
        assert_eq!(w.partition_watermark(&tp(1), t0), Some(90));
        w.on_watermark(&tp(1), 2, 700, t0).unwrap();
        assert_eq!(w.watermark(t0), Some(100), "now partition 0's slowest producer");
        // A producer of an older cluster shape (before a rescale) does not count.
        w.on_watermark(&tp(0), 3, 1, t0).unwrap();
        w.on_record(&tp(0), 7, t0).unwrap();
        assert_eq!(w.watermark(t0), Some(100));
        // A partition not read here: a clear error.
        assert!(w.on_record(&tp(9), 0, t0).is_err());
    }

    #[test]
    fn idle_producers_do_not_hold_back_until_they_speak_again() {
        let t0 = Instant::now();
        let idle = Duration::from_secs(5);
        let mut w = ProducerWatermarks::new([tp(0), tp(1)], 2, Some(idle), t0);
        let t1 = t0 + Duration::from_secs(3);
        for part in [0, 1] {
            w.on_watermark(&tp(part), 0, 1000, t1).unwrap();
        }
        // Producer 1 never spoke: it holds back until idle_timeout after the open.
        assert_eq!(w.watermark(t1), Some(MIN_WATERMARK));
        let t2 = t0 + Duration::from_secs(6);
        assert_eq!(w.watermark(t2), Some(1000), "producer 1 silent for 6 s > 5 s");
        // Producer 0 keeps writing on partition 0 only; on partition 1 it goes quiet too.
        let t3 = t1 + Duration::from_secs(6);
        w.on_watermark(&tp(0), 0, 2000, t3).unwrap();
        assert_eq!(w.partition_watermark(&tp(1), t3), None, "every producer of partition 1 is idle");
        assert_eq!(w.watermark(t3), Some(2000), "an idle partition does not hold the source back");
        // Producer 1 speaks again (data first): it holds back from its own watermark.
        w.on_record(&tp(0), 1, t3).unwrap();
        assert_eq!(w.watermark(t3), Some(MIN_WATERMARK));
        w.on_watermark(&tp(0), 1, 1500, t3).unwrap();
        assert_eq!(w.watermark(t3), Some(1500));
        // Everything idle: nothing holds event time here.
        assert_eq!(w.watermark(t3 + idle), None);
        // No idle timeout: silence holds back forever.
        let w = ProducerWatermarks::new([tp(0)], 1, None, t0);
        assert_eq!(w.watermark(t0 + Duration::from_secs(3600)), Some(MIN_WATERMARK));
    }

    #[test]
    fn a_restore_goes_on_from_the_recorded_minimum_and_never_higher() {
        let t0 = Instant::now();
        let mut before = ProducerWatermarks::new([tp(0), tp(1)], 2, Some(Duration::from_secs(5)), t0);
        before.on_watermark(&tp(0), 0, 300, t0).unwrap();
        before.on_watermark(&tp(0), 1, 200, t0).unwrap();
        before.on_watermark(&tp(1), 0, 400, t0).unwrap();
        before.on_watermark(&tp(1), 1, 250, t0).unwrap();
        assert_eq!(before.watermark(t0), Some(200));
        let recorded = [before.of(&tp(0)), before.of(&tp(1))];
        assert_eq!(recorded[0], [300, 200]);
        // Restored long after: the silence before the restart is not idleness.
        let t1 = t0 + Duration::from_secs(60);
        let mut after = ProducerWatermarks::new([tp(0), tp(1)], 2, Some(Duration::from_secs(5)), t1);
        assert!(after.restore(&tp(0), &recorded[0], t1));
        assert!(after.restore(&tp(1), &recorded[1], t1));
        assert_eq!(after.watermark(t1), Some(200));
        after.on_watermark(&tp(0), 1, 260, t1).unwrap();
        assert_eq!(after.watermark(t1), Some(250), "partition 1's producer 1 still at 250");
        // Recorded for another number of producers (a rescale): start over,
        // below what was emitted, until every producer speaks again.
        let mut rescaled = ProducerWatermarks::new([tp(0)], 3, None, t1);
        assert!(!rescaled.restore(&tp(0), &recorded[0], t1));
        assert_eq!(rescaled.watermark(t1), Some(MIN_WATERMARK));
        for p in 0..3 {
            rescaled.on_watermark(&tp(0), p, 900, t1).unwrap();
        }
        assert_eq!(rescaled.watermark(t1), Some(900));
    }
}

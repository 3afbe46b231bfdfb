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
//!
//! Producers are those of this cluster's generation (`plan::cluster::generation`):
//! a rescale numbers the new producers as the old ones were numbered, and
//! the old ones' records still wait in the topic. An older generation's
//! watermark says nothing about the new producer of the same number, so it
//! does not count; its data records are data as any other.

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
    /// The cluster generation whose producers count.
    generation: u64,
    idle_timeout: Option<Duration>,
    parts: BTreeMap<Tp, Vec<Heard>>,
}

impl ProducerWatermarks {
    pub fn new(parts: impl IntoIterator<Item = Tp>, producers: u32, generation: u64, idle_timeout: Option<Duration>, now: Instant) -> Self {
        let fresh = vec![Heard { watermark: MIN_WATERMARK, last: now }; producers as usize];
        ProducerWatermarks { producers, generation, idle_timeout, parts: parts.into_iter().map(|tp| (tp, fresh.clone())).collect() }
    }

    pub fn producers(&self) -> u32 {
        self.producers
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A record of another generation on `tp` (one written before a
    /// rescale, read after it): this generation's records on `tp` come
    /// after it, so none of its producers counts as idle before
    /// `idle_timeout` from now.
    fn other_generation(&mut self, tp: &Tp, now: Instant) -> Result<(), String> {
        let Some(p) = self.parts.get_mut(tp) else { return Err(format!("{}/{} is not read here", tp.0, tp.1)) };
        for h in p {
            h.last = now;
        }
        Ok(())
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

    /// A watermark record of `producer` of `generation` on `tp`: its
    /// watermark never goes back. One of another generation (written
    /// before a rescale, still waiting in the topic) does not count, nor
    /// one of a producer beyond this cluster's (of a release before
    /// generations, which stamped none: generation 0).
    pub fn on_watermark(&mut self, tp: &Tp, generation: u64, producer: u32, watermark: Millis, now: Instant) -> Result<(), String> {
        if generation != self.generation {
            return self.other_generation(tp, now);
        }
        if producer >= self.producers {
            return Ok(());
        }
        let h = self.heard(tp, producer)?;
        h.watermark = h.watermark.max(watermark);
        h.last = now;
        Ok(())
    }

    /// A data record of `producer` of `generation` on `tp`: it is not idle.
    pub fn on_record(&mut self, tp: &Tp, generation: u64, producer: u32, now: Instant) -> Result<(), String> {
        if generation != self.generation {
            return self.other_generation(tp, now);
        }
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
    /// the same producers: of this generation (a restart, not a rescale),
    /// as many. Otherwise they start over: the source's watermark then
    /// stays where the checkpoint left it until every producer has spoken
    /// again. Either way no producer counts as idle before `idle_timeout`
    /// from now.
    pub fn restore(&mut self, tp: &Tp, recorded: &[Millis], generation: u64, now: Instant) -> bool {
        let same = generation == self.generation && recorded.len() == self.producers as usize;
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

    /// The generation of the cluster in these tests.
    const G: u64 = 0x5eed;

    fn tp(p: i32) -> Tp {
        ("weir.p.agg".into(), p)
    }

    #[test]
    fn a_partition_waits_for_every_producer_and_the_source_for_every_partition() {
        let t0 = Instant::now();
        let mut w = ProducerWatermarks::new([tp(0), tp(1)], 3, G, None, t0);
        assert_eq!(w.watermark(t0), Some(MIN_WATERMARK), "nobody has spoken");
        for p in 0..3 {
            w.on_watermark(&tp(0), G, p, 100 + p as i64, t0).unwrap();
        }
        assert_eq!(w.partition_watermark(&tp(0), t0), Some(100));
        assert_eq!(w.watermark(t0), Some(MIN_WATERMARK), "partition 1 has heard from no producer");
        w.on_watermark(&tp(1), G, 0, 500, t0).unwrap();
        w.on_watermark(&tp(1), G, 1, 500, t0).unwrap();
        assert_eq!(w.watermark(t0), Some(MIN_WATERMARK), "producer 2 has not passed anything on partition 1");
        w.on_watermark(&tp(1), G, 2, 90, t0).unwrap();
        assert_eq!(w.watermark(t0), Some(90));
        // A producer's watermark never goes back (a late duplicate after a replay).
        w.on_watermark(&tp(1), G, 2, 50, t0).unwrap();
        assert_eq!(w.partition_watermark(&tp(1), t0), Some(90));
        w.on_watermark(&tp(1), G, 2, 700, t0).unwrap();
        assert_eq!(w.watermark(t0), Some(100), "now partition 0's slowest producer");
        // A producer beyond this cluster's number does not count (in a topic
        // written before generations, all are generation 0).
        w.on_watermark(&tp(0), G, 3, 1, t0).unwrap();
        w.on_record(&tp(0), G, 7, t0).unwrap();
        assert_eq!(w.watermark(t0), Some(100));
        // A partition not read here: a clear error.
        assert!(w.on_record(&tp(9), G, 0, t0).is_err());
    }

    #[test]
    fn idle_producers_do_not_hold_back_until_they_speak_again() {
        let t0 = Instant::now();
        let idle = Duration::from_secs(5);
        let mut w = ProducerWatermarks::new([tp(0), tp(1)], 2, G, Some(idle), t0);
        let t1 = t0 + Duration::from_secs(3);
        for part in [0, 1] {
            w.on_watermark(&tp(part), G, 0, 1000, t1).unwrap();
        }
        // Producer 1 never spoke: it holds back until idle_timeout after the open.
        assert_eq!(w.watermark(t1), Some(MIN_WATERMARK));
        let t2 = t0 + Duration::from_secs(6);
        assert_eq!(w.watermark(t2), Some(1000), "producer 1 silent for 6 s > 5 s");
        // Producer 0 keeps writing on partition 0 only; on partition 1 it goes quiet too.
        let t3 = t1 + Duration::from_secs(6);
        w.on_watermark(&tp(0), G, 0, 2000, t3).unwrap();
        assert_eq!(w.partition_watermark(&tp(1), t3), None, "every producer of partition 1 is idle");
        assert_eq!(w.watermark(t3), Some(2000), "an idle partition does not hold the source back");
        // Producer 1 speaks again (data first): it holds back from its own watermark.
        w.on_record(&tp(0), G, 1, t3).unwrap();
        assert_eq!(w.watermark(t3), Some(MIN_WATERMARK));
        w.on_watermark(&tp(0), G, 1, 1500, t3).unwrap();
        assert_eq!(w.watermark(t3), Some(1500));
        // Everything idle: nothing holds event time here.
        assert_eq!(w.watermark(t3 + idle), None);
        // No idle timeout: silence holds back forever.
        let w = ProducerWatermarks::new([tp(0)], 1, G, None, t0);
        assert_eq!(w.watermark(t0 + Duration::from_secs(3600)), Some(MIN_WATERMARK));
    }

    #[test]
    fn a_restore_goes_on_from_the_recorded_minimum_and_never_higher() {
        let t0 = Instant::now();
        let mut before = ProducerWatermarks::new([tp(0), tp(1)], 2, G, Some(Duration::from_secs(5)), t0);
        before.on_watermark(&tp(0), G, 0, 300, t0).unwrap();
        before.on_watermark(&tp(0), G, 1, 200, t0).unwrap();
        before.on_watermark(&tp(1), G, 0, 400, t0).unwrap();
        before.on_watermark(&tp(1), G, 1, 250, t0).unwrap();
        assert_eq!(before.watermark(t0), Some(200));
        let recorded = [before.of(&tp(0)), before.of(&tp(1))];
        assert_eq!(recorded[0], [300, 200]);
        // Restored long after: the silence before the restart is not idleness.
        let t1 = t0 + Duration::from_secs(60);
        let mut after = ProducerWatermarks::new([tp(0), tp(1)], 2, G, Some(Duration::from_secs(5)), t1);
        assert!(after.restore(&tp(0), &recorded[0], G, t1));
        assert!(after.restore(&tp(1), &recorded[1], G, t1));
        assert_eq!(after.watermark(t1), Some(200));
        after.on_watermark(&tp(0), G, 1, 260, t1).unwrap();
        assert_eq!(after.watermark(t1), Some(250), "partition 1's producer 1 still at 250");
        // Recorded for another number of producers (a rescale): start over,
        // below what was emitted, until every producer speaks again.
        let mut rescaled = ProducerWatermarks::new([tp(0)], 3, G, None, t1);
        assert!(!rescaled.restore(&tp(0), &recorded[0], G, t1));
        assert_eq!(rescaled.watermark(t1), Some(MIN_WATERMARK));
        for p in 0..3 {
            rescaled.on_watermark(&tp(0), G, p, 900, t1).unwrap();
        }
        assert_eq!(rescaled.watermark(t1), Some(900));
    }

    /// Regression (rescale 2 -> 3 through a savepoint set): old instance
    /// 1's watermark, committed after old instance 0 stopped, waits in
    /// instance 0's partitions; the new receiver of those partitions read
    /// it as new producer 1's (the same number) and fired windows before
    /// new producer 1 had sent its records for them.
    #[test]
    fn an_older_generations_watermark_does_not_advance_the_new_producer_of_the_same_number() {
        let (old, new) = (0x01d, 0x2e3);
        let t0 = Instant::now();
        let mut w = ProducerWatermarks::new([tp(0)], 3, new, None, t0);
        // Read before any record of the new cluster on the partition.
        w.on_record(&tp(0), old, 1, t0).unwrap();
        w.on_watermark(&tp(0), old, 1, 148_000, t0).unwrap();
        // And one of a producer the new cluster does not have.
        w.on_watermark(&tp(0), old, 5, 148_000, t0).unwrap();
        w.on_watermark(&tp(0), new, 0, 148_000, t0).unwrap();
        w.on_watermark(&tp(0), new, 2, 148_000, t0).unwrap();
        assert_eq!(w.watermark(t0), Some(MIN_WATERMARK), "new producer 1 has not written a watermark");
        w.on_watermark(&tp(0), new, 1, 50_000, t0).unwrap();
        assert_eq!(w.watermark(t0), Some(50_000), "new producer 1's own watermark");
        // Stamps of a release before generations read as generation 0.
        w.on_watermark(&tp(0), 0, 1, 148_000, t0).unwrap();
        assert_eq!(w.watermark(t0), Some(50_000));
        assert_eq!(w.of(&tp(0)), [148_000, 50_000, 148_000]);
        // A cluster of generation 0 (restored from checkpoints of that
        // release) counts them.
        let mut legacy = ProducerWatermarks::new([tp(0)], 1, 0, None, t0);
        legacy.on_watermark(&tp(0), 0, 0, 7, t0).unwrap();
        assert_eq!(legacy.watermark(t0), Some(7));
    }

    /// 2 instances × 3 subtasks -> 3 × 2: as many producers, other ones.
    #[test]
    fn a_restore_takes_the_recorded_watermarks_of_its_own_generation_only() {
        let (old, new) = (0x01d, 0x2e3);
        let t0 = Instant::now();
        let recorded = [400, 300, 500, 350, 450, 600];
        let mut rescaled = ProducerWatermarks::new([tp(0)], 6, new, None, t0);
        assert!(!rescaled.restore(&tp(0), &recorded, old, t0), "another generation: started over");
        assert_eq!(rescaled.watermark(t0), Some(MIN_WATERMARK));
        assert_eq!(rescaled.of(&tp(0)), [MIN_WATERMARK; 6]);
        // A restart keeps its generation (recorded in its checkpoints).
        let mut restarted = ProducerWatermarks::new([tp(0)], 6, old, None, t0);
        assert!(restarted.restore(&tp(0), &recorded, old, t0));
        assert_eq!(restarted.watermark(t0), Some(300));
    }

    /// After a rescale the old records come first in every partition: the
    /// new producers cannot have been heard while they are read, so their
    /// silence then is not idleness.
    #[test]
    fn records_of_an_older_generation_keep_the_new_producers_from_idling() {
        let (old, new) = (0x01d, 0x2e3);
        let idle = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut w = ProducerWatermarks::new([tp(0), tp(1)], 2, new, Some(idle), t0);
        let t1 = t0 + Duration::from_secs(4);
        w.on_record(&tp(0), old, 0, t1).unwrap();
        let t2 = t0 + Duration::from_secs(8);
        assert_eq!(w.partition_watermark(&tp(1), t2), None, "partition 1: nothing for 8 s");
        assert_eq!(w.partition_watermark(&tp(0), t2), Some(MIN_WATERMARK), "partition 0 still reads the old cluster's records");
        assert_eq!(w.watermark(t2), Some(MIN_WATERMARK));
        assert_eq!(w.watermark(t1 + idle), None, "idle_timeout after the last old record");
        assert!(w.on_watermark(&tp(7), old, 0, 1, t2).is_err(), "a partition not read here");
    }
}

//! Keyed deduplication: the first record of each key passes unchanged, later
//! ones are suppressed.
//!
//! Without a TTL a key is remembered forever (`seen`: key → empty). With a
//! TTL, a key that passed at time t suppresses records of that key with time
//! < t + ttl; the first record at or after t + ttl passes again and restarts
//! the TTL. Time is the record's event time in event-time pipelines, else the
//! wall clock (`ctx.now`).
//!
//! State with a TTL:
//! - `seen` (point): encoded key → expiry (i64 big-endian).
//! - `timers` (ordered): expiry (sign-flipped big-endian) ++ encoded key → empty.
//!   One timer per key: re-arming deletes the previous one.
//!
//! Expired keys leave state when their timer fires: on the watermark in
//! event time (once no record with time < expiry can arrive, that is when
//! the watermark reaches expiry - 1), on the tick in processing time (once
//! `now` reaches expiry).
//! A late record (event time <= its split's watermark, see
//! `Record::lateness_watermark`) never passes: within the TTL of the key's
//! record in state it is a duplicate and suppressed as any other, otherwise
//! it is dropped (counted in `records_dropped`): the key may have been
//! cleaned up after an earlier record within the TTL, so passing it could
//! let a duplicate through, and whether it did would depend on when the
//! watermark came.

use std::ops::ControlFlow;
use std::time::Duration;

use super::{Context, OpError, OpResult, Operator};
use crate::config::DedupSpec;
use crate::state::{TableId, TableKind, TableSpec};
use crate::types::{KeyGroup, Millis, Record};

const SEEN: TableId = 0;
const TIMERS: TableId = 1;

pub struct Dedup {
    key_indices: Vec<usize>,
    /// TTL in ms; None keeps keys forever.
    ttl: Option<Millis>,
    event_time: bool,
    // Scratch buffers, reused across records.
    key: Vec<u8>,
    value: Vec<u8>,
    timer: Vec<u8>,
    due: KeyList,
    /// The encoded keys of the batch being processed.
    batch_keys: BatchKeys,
    /// Every timer below this is gone: the scans for expired keys start
    /// here, not at the first timer, so they never walk over deleted
    /// timers (tombstones, in RocksDB). MIN after a restore.
    timers_from: Millis,
}

impl Dedup {
    pub fn new(spec: &DedupSpec, input_fields: &[String], event_time: bool) -> Result<Dedup, String> {
        let key_indices = resolve_fields(&spec.key, input_fields)?;
        let ttl = spec.ttl.map(duration_ms);
        Ok(Dedup {
            key_indices,
            ttl,
            event_time,
            key: Vec::new(),
            value: Vec::new(),
            timer: Vec::new(),
            due: KeyList::default(),
            batch_keys: BatchKeys::default(),
            timers_from: Millis::MIN,
        })
    }

    /// Delete every key whose expiry is <= `bound`, in all owned key groups.
    fn expire(&mut self, bound: Millis, ctx: &mut Context<'_>) -> OpResult {
        let Some(_) = self.ttl else { return Ok(()) };
        if bound < self.timers_from {
            return Ok(());
        }
        self.due.clear();
        let (from, to) = (encode_time(self.timers_from), encode_time(bound.saturating_add(1)));
        let to = (bound < Millis::MAX).then_some(&to[..]);
        for kg in ctx.state.key_groups() {
            let due = &mut self.due;
            ctx.state.scan_range(TIMERS, kg, &from, to, &mut |k, _| {
                if k.len() < 8 || decode_time(k) > bound {
                    return ControlFlow::Break(());
                }
                due.push(kg, k);
                ControlFlow::Continue(())
            })?;
        }
        for i in 0..self.due.len() {
            let (kg, timer) = self.due.get(i);
            ctx.state.delete(TIMERS, kg, timer)?;
            let (expiry, key) = timer.split_at(8);
            // The key may have been re-armed since; only its own timer removes it.
            if ctx.state.get(SEEN, kg, key, &mut self.value)? && self.value[..] == decode_time(expiry).to_be_bytes() {
                ctx.state.delete(SEEN, kg, key)?;
            }
        }
        self.due.clear();
        self.timers_from = self.timers_from.max(bound.saturating_add(1));
        Ok(())
    }

    /// `process` with the batch's keys encoded (`keys`, one per record).
    fn process_keyed(&mut self, batch: Vec<Record>, keys: &BatchKeys, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        for (record, key) in batch.into_iter().zip(keys.iter()) {
            self.key.clear();
            self.key.extend_from_slice(key);
            let kg = record.key_group;
            let Some(ttl) = self.ttl else {
                if ctx.state.put_if_absent(SEEN, kg, &self.key, &[])? {
                    out.push(record);
                }
                continue;
            };
            let now = if self.event_time {
                record.event_time.ok_or_else(|| OpError::Data("dedup: record without event time in an event-time pipeline".into()))?
            } else {
                ctx.now
            };
            // Judged by the record's split watermark: whether it is late does
            // not depend on when this operator's watermark came.
            let late = self.event_time && now <= record.lateness_watermark(ctx.watermark);
            if ctx.state.get(SEEN, kg, &self.key, &mut self.value)? {
                let old = read_i64(&self.value).ok_or_else(|| OpError::Data("dedup: corrupt `seen` entry".into()))?;
                if now < old {
                    continue;
                }
                if late {
                    // Expired but not cleaned up yet: had the watermark come
                    // earlier the key would be gone and the record dropped.
                    ctx.metrics.late();
                    continue;
                }
                timer_key(old, &self.key, &mut self.timer);
                ctx.state.delete(TIMERS, kg, &self.timer)?;
            } else if late {
                // Late, and the key's earlier record may have expired already.
                ctx.metrics.late();
                continue;
            }
            let expiry = now.saturating_add(ttl);
            // A late record's timer may lie below where the next scan starts.
            self.timers_from = self.timers_from.min(expiry);
            ctx.state.put(SEEN, kg, &self.key, &expiry.to_be_bytes())?;
            timer_key(expiry, &self.key, &mut self.timer);
            ctx.state.put(TIMERS, kg, &self.timer, &[])?;
            out.push(record);
        }
        Ok(())
    }
}

impl Operator for Dedup {
    fn tables(&self) -> Vec<TableSpec> {
        let mut t = vec![TableSpec { name: "seen", kind: TableKind::Point }];
        if self.ttl.is_some() {
            t.push(TableSpec { name: "timers", kind: TableKind::Ordered });
        }
        t
    }

    fn process(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, out: &mut Vec<Record>) -> OpResult {
        // Encode every key once and touch its `seen` slot first: the cache
        // misses of the batch's lookups overlap instead of coming one by one.
        let mut keys = std::mem::take(&mut self.batch_keys);
        keys.encode(&batch, &self.key_indices);
        for (r, key) in batch.iter().zip(keys.iter()) {
            ctx.state.prefetch(SEEN, r.key_group, key);
        }
        let result = self.process_keyed(batch, &keys, ctx, out);
        self.batch_keys = keys;
        result
    }

    fn on_watermark(&mut self, ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        if self.event_time {
            // Watermark W: no more records with time <= W, so a key expiring
            // at W + 1 can no longer suppress anything.
            self.expire(ctx.watermark.saturating_add(1), ctx)?;
        }
        Ok(())
    }

    fn tick_interval(&self) -> Option<Duration> {
        match self.ttl {
            Some(ttl) if !self.event_time => Some(Duration::from_millis(ttl.clamp(1, 1000) as u64)),
            _ => None,
        }
    }

    fn on_tick(&mut self, ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        if !self.event_time {
            self.expire(ctx.now, ctx)?;
        }
        Ok(())
    }
}

// Helpers below are shared with `aggregate`.

/// Resolve field names to indices in the input schema.
pub(crate) fn resolve_fields(names: &[String], input_fields: &[String]) -> Result<Vec<usize>, String> {
    names
        .iter()
        .map(|n| {
            input_fields.iter().position(|f| f == n).ok_or_else(|| format!("unknown field `{n}` (input has: {})", input_fields.join(", ")))
        })
        .collect()
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn duration_ms(d: Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

/// Sign-flipped big-endian time: byte order equals numeric order.
pub(crate) fn encode_time(t: Millis) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

/// Inverse of `encode_time`; `b` must hold at least 8 bytes (else MAX).
pub(crate) fn decode_time(b: &[u8]) -> Millis {
    match b.get(..8).and_then(|s| <[u8; 8]>::try_from(s).ok()) {
        Some(a) => (u64::from_be_bytes(a) ^ (1 << 63)) as Millis,
        None => Millis::MAX,
    }
}

/// A list of (key group, byte string) kept in one flat buffer, so collecting
/// due timers allocates nothing once the buffers have grown.
#[derive(Default)]
pub(crate) struct KeyList {
    bytes: Vec<u8>,
    entries: Vec<(KeyGroup, usize, usize)>,
}

/// The encoded keys of a batch's records, end to end (encoded once, for a
/// prefetch pass and then the lookups).
#[derive(Debug, Default)]
pub(crate) struct BatchKeys {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl BatchKeys {
    /// Encode the key (`indices` of the fields) of every record of `batch`.
    pub fn encode(&mut self, batch: &[Record], indices: &[usize]) {
        self.bytes.clear();
        self.ends.clear();
        for r in batch {
            for &i in indices {
                r.fields[i].encode_key(&mut self.bytes);
            }
            self.ends.push(self.bytes.len());
        }
    }

    /// The keys, in batch order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(start, &end)| &self.bytes[start..end])
    }
}

impl KeyList {
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.entries.clear();
    }

    pub(crate) fn push(&mut self, kg: KeyGroup, key: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        self.entries.push((kg, start, self.bytes.len()));
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn get(&self, i: usize) -> (KeyGroup, &[u8]) {
        let (kg, start, end) = self.entries[i];
        (kg, &self.bytes[start..end])
    }

    /// Sort entries with `cmp` over (key group, bytes).
    pub(crate) fn sort_by(&mut self, mut cmp: impl FnMut((KeyGroup, &[u8]), (KeyGroup, &[u8])) -> std::cmp::Ordering) {
        let bytes = &self.bytes;
        self.entries.sort_unstable_by(|a, b| cmp((a.0, &bytes[a.1..a.2]), (b.0, &bytes[b.1..b.2])));
    }
}

fn read_i64(b: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(b.try_into().ok()?))
}

fn timer_key(t: Millis, key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&encode_time(t));
    out.extend_from_slice(key);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::KeyedState;
    use crate::types::{encode_key, key_group_of, Value};

    const MAX_PAR: u16 = 16;

    type Harness = crate::operators::testing::Harness<Dedup>;

    impl Harness {
        fn with_ttl(ttl: Option<Duration>, event_time: bool) -> Self {
            let spec = DedupSpec { key: vec!["id".into()], ttl };
            Harness::new(Dedup::new(&spec, &["v".into(), "id".into()], event_time).unwrap(), "dedup", 0..MAX_PAR, MAX_PAR)
        }

        /// Feed (id, event time) records; return the `v` of those that passed.
        fn feed(&mut self, input: &[(&str, Millis)]) -> Vec<i64> {
            let batch = input.iter().enumerate().map(|(i, &(id, t))| rec(i as i64, id, t)).collect();
            self.run(|op, ctx, out| op.process(batch, ctx, out)).iter().map(|r| r.fields[0].as_f64().unwrap() as i64).collect()
        }

        fn watermark(&mut self, w: Millis) {
            self.watermark = w;
            self.run(|op, ctx, out| op.on_watermark(ctx, out));
        }

        fn tick(&mut self, now: Millis) {
            self.now = now;
            self.run(|op, ctx, out| op.on_tick(ctx, out));
        }
    }

    fn rec(v: i64, id: &str, t: Millis) -> Record {
        let fields = vec![Value::Int(v), Value::Str(id.into())];
        let mut key = Vec::new();
        encode_key(&fields, &[1], &mut key);
        let mut r = Record::new(fields, format!("{{\"v\":{v},\"id\":\"{id}\"}}").into(), Some(t));
        r.key_group = key_group_of(&key, MAX_PAR);
        r
    }

    #[test]
    fn keeps_first_record_per_key_forever_without_ttl() {
        let mut h = Harness::with_ttl(None, true);
        assert_eq!(h.op.tables().len(), 1);
        assert_eq!(h.feed(&[("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)]), vec![0, 1, 3]);
        // The original record is passed through unchanged.
        let batch = vec![rec(9, "z", 7)];
        let out = h.run(|op, ctx, out| op.process(batch.clone(), ctx, out));
        assert_eq!(out, batch);
        h.watermark(Millis::MAX);
        assert_eq!(h.feed(&[("a", 1_000_000)]), Vec::<i64>::new());
        assert_eq!(h.state.len(SEEN), 4);
        assert_eq!(h.op.tick_interval(), None);
    }

    /// A record behind its split's watermark never passes, even when the
    /// operator's watermark has not come that far: had it come, the key
    /// might be cleaned up, and whether the record passed would depend on
    /// the schedule.
    #[test]
    fn late_by_its_split_watermark_never_passes() {
        let mut h = Harness::with_ttl(Some(Duration::from_millis(10)), true);
        assert_eq!(h.feed(&[("a", 100)]), vec![0]);
        let mut late = rec(1, "a", 112);
        late.split_watermark = 150;
        let mut new_key = rec(2, "b", 140);
        new_key.split_watermark = 150;
        let mut on_time = rec(3, "c", 151);
        on_time.split_watermark = 150;
        let out = h.run(|op, ctx, out| op.process(vec![late, new_key, on_time], ctx, out));
        let passed: Vec<_> = out.iter().map(|r| r.fields[0].clone()).collect();
        assert_eq!(passed, [Value::Int(3)], "a expired but is not cleaned up (watermark MIN); b is new but late");
        assert_eq!(h.metrics.records_dropped.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[test]
    fn event_time_ttl_passes_again_and_state_shrinks() {
        let mut h = Harness::with_ttl(Some(Duration::from_millis(10)), true);
        assert_eq!(h.op.tick_interval(), None, "event time cleans up on watermarks");
        // a@100 arms expiry 110; a@109 suppressed; a@110 passes and re-arms 120.
        assert_eq!(h.feed(&[("a", 100), ("b", 101), ("a", 109), ("a", 110), ("a", 119), ("b", 111)]), vec![0, 1, 3, 5]);
        assert_eq!(h.state.len(SEEN), 2);
        assert_eq!(h.state.len(TIMERS), 2, "one timer per key: re-arming replaces the old one");
        // a expires at 120, b at 121: watermark 119 means no record <= 119 comes.
        h.watermark(118);
        assert_eq!(h.state.len(SEEN), 2, "a@119 could still arrive");
        h.watermark(119);
        assert_eq!(h.state.len(SEEN), 1);
        assert_eq!(h.state.len(TIMERS), 1);
        h.watermark(Millis::MAX);
        assert_eq!(h.state.len(SEEN), 0);
        assert_eq!(h.state.len(TIMERS), 0);
    }

    #[test]
    fn event_time_out_of_order_within_ttl_is_suppressed() {
        let mut h = Harness::with_ttl(Some(Duration::from_millis(10)), true);
        assert_eq!(h.feed(&[("a", 100), ("a", 95), ("a", -5)]), vec![0]);
    }

    #[test]
    fn late_record_never_passes_as_new_after_its_key_expired() {
        // ttl 10: a@100 expires at 110; watermark 199 cleans it up; a@105 is
        // a duplicate of a@100 and must not pass, with or without that watermark.
        for watermark in [None, Some(199)] {
            let mut h = Harness::with_ttl(Some(Duration::from_millis(10)), true);
            assert_eq!(h.feed(&[("a", 100), ("b", 200)]), vec![0, 1]);
            if let Some(w) = watermark {
                h.watermark(w);
                assert_eq!(h.state.len(SEEN), 1, "a expired");
            }
            assert_eq!(h.feed(&[("a", 105)]), Vec::<i64>::new(), "watermark {watermark:?}");
        }
        // A late record is dropped and counted, not passed; on time, a new key passes.
        let mut h = Harness::with_ttl(Some(Duration::from_millis(10)), true);
        h.watermark(50);
        assert_eq!(h.feed(&[("c", 50), ("d", 51)]), vec![1]);
        assert_eq!(h.metrics.records_dropped.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn processing_time_ttl_uses_now_and_ticks() {
        let mut h = Harness::with_ttl(Some(Duration::from_secs(5)), false);
        assert_eq!(h.op.tick_interval(), Some(Duration::from_secs(1)));
        h.now = 1_000;
        // Event times are ignored in processing time.
        assert_eq!(h.feed(&[("a", 0), ("a", 99_999)]), vec![0]);
        h.now = 5_999;
        assert_eq!(h.feed(&[("a", 0), ("b", 0)]), vec![1]);
        h.tick(5_999);
        assert_eq!(h.state.len(SEEN), 2);
        h.tick(6_000);
        assert_eq!(h.state.len(SEEN), 1, "a expired at 6000");
        h.now = 6_500;
        assert_eq!(h.feed(&[("a", 0), ("a", 0)]), vec![0]);
        h.tick(20_000);
        assert_eq!(h.state.len(SEEN), 0);
        assert_eq!(h.state.len(TIMERS), 0);
    }

    #[test]
    fn stale_timer_does_not_remove_a_rearmed_key() {
        let mut h = Harness::with_ttl(Some(Duration::from_millis(10)), true);
        h.feed(&[("a", 0)]);
        // Simulate a leftover timer for an older expiry of the same key.
        let kg = rec(0, "a", 0).key_group;
        let mut key = Vec::new();
        encode_key(&[Value::Str("a".into())], &[0], &mut key);
        let mut t = Vec::new();
        timer_key(5, &key, &mut t);
        h.state.put(TIMERS, kg, &t, &[]).unwrap();
        // Leftovers below the scan start exist only in restored state, where
        // the scans start from the first timer.
        h.op.timers_from = Millis::MIN;
        h.watermark(8);
        assert_eq!(h.state.len(SEEN), 1);
        assert_eq!(h.feed(&[("a", 9)]), Vec::<i64>::new());
    }

    /// Steady churn of new keys with a TTL, on RocksDB: the state stays
    /// bounded by what the TTL keeps, scans start past deleted timers, and
    /// a snapshot taken at the end holds exactly the keys that are alive.
    #[test]
    #[cfg(feature = "rocksdb")]
    fn ttl_keeps_rocksdb_state_bounded_under_key_churn() {
        use crate::state::rocks::{BundleDb, RocksOptions, RocksState};
        use crate::state::snapshot;
        let dir = tempfile::tempdir().unwrap();
        let db = BundleDb::create(&dir.path().join("db"), &["dedup".into()], &RocksOptions::default()).unwrap();
        let spec = DedupSpec { key: vec!["id".into()], ttl: Some(Duration::from_millis(1_000)) };
        let op = Dedup::new(&spec, &["v".into(), "id".into()], true).unwrap();
        let tables = op.tables();
        let state = RocksState::new(db, "dedup", &tables, 0..MAX_PAR).unwrap();
        let mut h = Harness::with_state(op, "dedup", Box::new(state), MAX_PAR);
        // 100 new keys per 10 ms of event time for 20 s (200 K keys); a TTL
        // of 1 s keeps about 10 K of them.
        let (rounds, per_round, step) = (2_000i64, 100i64, 10i64);
        let mut max_seen = 0;
        for round in 0..rounds {
            let t = round * step;
            let batch: Vec<Record> = (0..per_round).map(|i| rec(i, &format!("k{}", round * per_round + i), t)).collect();
            h.run(|op, ctx, out| op.process(batch, ctx, out));
            h.watermark(t - 1);
            if round % 100 == 99 {
                let seen = h.state.len(SEEN);
                assert_eq!(seen, h.state.len(TIMERS), "one timer per key");
                max_seen = max_seen.max(seen);
            }
        }
        let bound = (1_000 / step + 2) * per_round;
        assert!(max_seen <= bound as usize, "state grew to {max_seen} keys, the TTL allows {bound}");
        assert!(max_seen >= (1_000 / step * per_round) as usize, "the TTL keeps keys for 1 s: only {max_seen}");
        // A snapshot holds exactly the keys whose expiry is past watermark + 1.
        let w = (rounds - 1) * step - 1;
        let bytes = h.state.snapshot(&tables).unwrap().finish().unwrap();
        let mut back = crate::state::memory::MemoryState::new(&tables, 0..MAX_PAR);
        snapshot::read(&mut crate::codec::Dec::new(&bytes), &tables, &mut back).unwrap();
        let mut got = std::collections::BTreeSet::new();
        for kg in 0..MAX_PAR {
            back.scan_all(SEEN, kg, &mut |k, _| {
                got.insert(k.to_vec());
                ControlFlow::Continue(())
            })
            .unwrap();
        }
        let mut want = std::collections::BTreeSet::new();
        for round in 0..rounds {
            if round * step + 1_000 > w + 1 {
                for i in 0..per_round {
                    let mut key = Vec::new();
                    encode_key(&[Value::Str(format!("k{}", round * per_round + i).into())], &[0], &mut key);
                    want.insert(key);
                }
            }
        }
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the snapshot holds other keys than the live ones");
    }

    #[test]
    fn unknown_key_field_is_an_error() {
        let spec = DedupSpec { key: vec!["nope".into()], ttl: None };
        assert!(Dedup::new(&spec, &["id".into()], false).is_err());
    }

    #[test]
    fn time_encoding_orders_negative_times() {
        let times = [Millis::MIN, -1_000, -1, 0, 1, 1_000, Millis::MAX];
        for w in times.windows(2) {
            assert!(encode_time(w[0]) < encode_time(w[1]));
            assert_eq!(decode_time(&encode_time(w[0])), w[0]);
        }
    }
}

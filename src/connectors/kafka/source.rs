//! The Kafka source: JSON messages from one or more topics.
//!
//! Partitions are dealt to subtasks deterministically (every (topic,
//! partition) of the matching topics, sorted, round-robin), with a manual
//! `assign`: no consumer-group rebalancing, no auto-commit. The next offset
//! of every partition is the source's checkpoint position, so a restore
//! resumes exactly where the checkpoint was taken. After a checkpoint
//! completes, its offsets may also be committed to the consumer group, for
//! lag monitoring only: the checkpoint stays the truth.
//!
//! The position is self-describing — a list of (topic, partition, next
//! offset, stop offset) — so a restore can take the union of every old
//! subtask's list and keep the partitions this subtask owns now.
//!
//! `poll` never waits: it takes what librdkafka has already fetched
//! (`poll(0)`), so a runtime worker is never blocked by the network.
//!
//! A recorded offset outside a partition's offsets (past its end after the
//! topic was recreated, below its start after retention) is never skipped
//! silently: it is found at start (restored and group offsets against the
//! partition's watermarks) and while running (librdkafka's
//! `auto.offset.reset` is `error`, so a fetch out of range reports instead
//! of jumping), logged as an error naming topic, partition and offsets, and
//! handled by `on_offset_out_of_range` (fail, earliest or latest).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::error::KafkaResult;
use rdkafka::message::BorrowedMessage;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::producers::ProducerWatermarks;
use super::stamp::{BatchReader, Stamp};
use super::{client_config, is_connectivity, WeirContext};
use crate::config::{KafkaSourceSpec, KafkaStart, KafkaTopics, OffsetOutOfRange, OnError, RepartitionIn};
use crate::connectors::source::{Extent, RestoredPositions, Source, SourcePoll};
use crate::format::json::JsonParser;
use crate::operators::dead_letter::reject;
use crate::operators::{DeadLetter, OpError, OperatorMetrics};
use crate::types::{Millis, Record, MIN_WATERMARK};

/// Position format: magic and version.
const POSITION_MAGIC: &[u8; 4] = b"WKS1";
/// While the brokers are down, probe them this often.
const PROBE_EVERY: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);
/// Bound of each watermark request after a fetch was out of range.
const RANGE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

type Tp = (String, i32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Part {
    /// Offset of the next message to read.
    next: i64,
    /// Bounded: read offsets below this only.
    stop: Option<i64>,
}

/// Event-time progress of one partition. `max_ts` is part of the position,
/// so a partition's lateness goes on after a restore as if there had been
/// none; `last_data` is not.
#[derive(Debug, Clone, Copy)]
struct PartTime {
    max_ts: Millis,
    last_data: Instant,
}

impl Part {
    fn done(&self) -> bool {
        self.stop.is_some_and(|s| self.next >= s)
    }
}

/// How often librdkafka reports the consumer's lag (a JSON document of a
/// few KB per assigned broker and partition).
const STATS_INTERVAL_MS: &str = "2000";

pub struct KafkaSource {
    who: String,
    consumer: Arc<BaseConsumer<WeirContext>>,
    /// One queue per assigned partition, read in turn, so every partition
    /// advances at about the same pace (librdkafka's shared queue would hand
    /// out whatever it prefetched, one partition's backlog after another's,
    /// and the per-partition watermark would wait for the last one). With
    /// the partition it is for.
    queues: Vec<(Tp, PartitionQueue<WeirContext>)>,
    parts: BTreeMap<Tp, Part>,
    /// A partition silent this long does not hold the watermark back.
    idle_timeout: Option<Duration>,
    /// Turns messages into records (apart from the consumer, which the
    /// messages borrow).
    dec: Decoder,
    commit_offsets: bool,
    /// Positions recorded by checkpoints not yet complete (for the group commit).
    pending_commits: VecDeque<(u64, Vec<(Tp, i64)>)>,
    last_probe: Instant,
    /// Each partition's (first, end) offsets when the source opened.
    bounds: BTreeMap<Tp, (i64, i64)>,
    on_out_of_range: OffsetOutOfRange,
    /// A fetch was out of range: check every partition against its offsets.
    range_check: bool,
}

/// Where a partition of offsets `low..=high` goes on from `next`: Ok(None)
/// if in range, else what the policy says (Err: fail).
fn resolve_out_of_range(next: i64, low: i64, high: i64, policy: OffsetOutOfRange) -> Result<Option<i64>, ()> {
    if (low..=high).contains(&next) {
        return Ok(None);
    }
    match policy {
        OffsetOutOfRange::Fail => Err(()),
        OffsetOutOfRange::Earliest => Ok(Some(low)),
        OffsetOutOfRange::Latest => Ok(Some(high)),
    }
}

fn policy_name(p: OffsetOutOfRange) -> &'static str {
    match p {
        OffsetOutOfRange::Fail => "fail",
        OffsetOutOfRange::Earliest => "earliest",
        OffsetOutOfRange::Latest => "latest",
    }
}

struct Decoder {
    who: String,
    times: BTreeMap<Tp, PartTime>,
    parser: JsonParser,
    on_error: OnError,
    dead_letter: Option<DeadLetter>,
    key_field: Option<String>,
    message_timestamp: bool,
    raw: String,
    /// A repartition topic: its producers' watermarks (stamp.rs, producers.rs).
    carried: Option<ProducerWatermarks>,
}

/// Every (topic, partition) of the matching topics, sorted; the share of `subtask`.
pub fn assign_partitions(mut all: Vec<Tp>, parallelism: u16, subtask: u16) -> Vec<Tp> {
    all.sort();
    all.into_iter().enumerate().filter(|(i, _)| *i % parallelism as usize == subtask as usize).map(|(_, tp)| tp).collect()
}

/// The partitions of this instance: of a repartition topic, those of its
/// key groups; else every `instances`-th of the sorted list (no consumer
/// group, so no rebalance between instances).
fn instance_share(all: Vec<Tp>, (index, instances): (u16, u16), repartition: Option<&RepartitionIn>) -> Vec<Tp> {
    match repartition {
        Some(r) => all.into_iter().filter(|(_, p)| u16::try_from(*p).is_ok_and(|p| r.owned.contains(&p))).collect(),
        None => assign_partitions(all, instances.max(1), index),
    }
}

impl KafkaSource {
    /// Connect (waiting at most `broker_timeout`), find and deal the
    /// partitions, resolve the start offsets and assign.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        name: &str,
        spec: &KafkaSourceSpec,
        pipeline: &str,
        subtask: u16,
        parallelism: u16,
        parser: JsonParser,
        on_error: OnError,
        dead_letter: Option<DeadLetter>,
        idle_timeout: Option<Duration>,
    ) -> Result<Self, String> {
        let who = format!("source `{name}`[{subtask}]");
        if let (Some(r), KafkaTopics::Names(names)) = (&spec.repartition, &spec.topics) {
            for topic in names {
                super::repartition::ensure_topic(&spec.brokers, topic, r.partitions, spec.broker_timeout)
                    .map_err(|e| format!("{who}: {e}"))?;
            }
        }
        let config = consumer_config(spec, pipeline, name);
        let context = WeirContext::new(who.clone(), &spec.brokers, spec.broker_timeout);
        let consumer: BaseConsumer<WeirContext> =
            config.create_with_context(context).map_err(|e| format!("creating the Kafka consumer: {e}"))?;
        let t = spec.broker_timeout;
        let metadata = super::fetch_metadata_at_start(consumer.client(), None, t, &who, &spec.brokers)?;
        let unreachable = |e: KafkaError| format!("cannot reach Kafka brokers `{}` within {t:?} (broker_timeout): {e}", spec.brokers);
        let all = topic_partitions(&metadata, spec, &who)?;
        let mine = assign_partitions(instance_share(all, spec.instance, spec.repartition.as_ref()), parallelism, subtask);
        let (parts, bounds) = start_positions(&consumer, spec, mine).map_err(unreachable)?;
        tracing::info!(%who, partitions = ?parts.keys().collect::<Vec<_>>(), "Kafka partitions assigned.");
        let now = Instant::now();
        let times = parts.keys().map(|tp| (tp.clone(), PartTime { max_ts: MIN_WATERMARK, last_data: now })).collect();
        // Every send subtask of every instance writes into every partition.
        let producers = u32::from(spec.instance.1.max(1)) * u32::from(parallelism);
        let carried =
            spec.repartition.as_ref().map(|r| ProducerWatermarks::new(parts.keys().cloned(), producers, r.generation, idle_timeout, now));
        let dec = Decoder {
            who: who.clone(),
            times,
            parser,
            on_error,
            dead_letter,
            key_field: spec.key_field.clone(),
            message_timestamp: spec.message_timestamp,
            raw: String::new(),
            carried,
        };
        let mut src = KafkaSource {
            who,
            consumer: Arc::new(consumer),
            queues: Vec::new(),
            parts,
            idle_timeout,
            dec,
            commit_offsets: spec.commit_offsets,
            pending_commits: VecDeque::new(),
            last_probe: Instant::now(),
            bounds,
            on_out_of_range: spec.on_offset_out_of_range,
            range_check: false,
        };
        if spec.start == KafkaStart::GroupOffsets {
            src.check_ranges("committed offset of the consumer group")?;
        }
        src.assign()?;
        Ok(src)
    }

    /// Check every unfinished partition's next offset against its known
    /// offsets; apply the policy to those out of range. True if any moved.
    fn check_ranges(&mut self, what: &str) -> Result<bool, String> {
        let mut moved = false;
        for (tp, part) in self.parts.iter_mut().filter(|(_, p)| !p.done()) {
            let Some(&(low, high)) = self.bounds.get(tp) else { continue };
            let (topic, partition, offset, policy) = (&tp.0, tp.1, part.next, policy_name(self.on_out_of_range));
            match resolve_out_of_range(part.next, low, high, self.on_out_of_range) {
                Ok(None) => {}
                Ok(Some(resume)) => {
                    // The user's choice, so not an error; a warning still:
                    // records between `offset` and `resume` are skipped or read again.
                    tracing::warn!(who = %self.who, topic = %topic, partition, offset, low, high, what, resume, policy,
                        "Kafka offset out of range (topic recreated, or records removed by retention); going on as on_offset_out_of_range says.");
                    part.next = resume;
                    // A bounded read's end from before the change is no end of this partition.
                    part.stop = part.stop.map(|s| s.min(high).max(resume));
                    moved = true;
                }
                Err(()) => {
                    tracing::error!(who = %self.who, topic = %topic, partition, offset, low, high, what, policy, "Kafka offset out of range.");
                    return Err(format!(
                        "{}: {what} {offset} of {topic}/{partition} is out of the partition's range {low}..={high} \
                         (topic recreated, or records removed by retention); on_offset_out_of_range: fail \
                         (set it to earliest or latest to go on)",
                        self.who
                    ));
                }
            }
        }
        Ok(moved)
    }

    /// A fetch was out of range: learn every partition's offsets again and
    /// check; then assign again, as librdkafka stopped fetching there.
    fn recheck_ranges(&mut self) -> Result<(), OpError> {
        // Up to RANGE_CHECK_TIMEOUT per partition with the brokers down.
        crate::blocking::call(|| self.recheck_ranges_now())
    }

    fn recheck_ranges_now(&mut self) -> Result<(), OpError> {
        let open: Vec<Tp> = self.parts.iter().filter(|(_, p)| !p.done()).map(|(tp, _)| tp.clone()).collect();
        // A failed attempt is tried again, at most once per PROBE_EVERY.
        if self.last_probe.elapsed() < PROBE_EVERY {
            return Ok(());
        }
        for (topic, p) in open {
            match self.consumer.fetch_watermarks(&topic, p, RANGE_CHECK_TIMEOUT) {
                Ok(b) => {
                    self.bounds.insert((topic, p), b);
                }
                Err(e) => {
                    self.last_probe = Instant::now();
                    self.consumer.context().broker_failed(&e.to_string());
                    return Ok(());
                }
            }
        }
        self.range_check = false;
        self.check_ranges("fetch position").map_err(OpError::Data)?;
        self.assign().map_err(OpError::Data)
    }

    /// Assign every unfinished partition at its next offset, each with a
    /// queue of its own.
    fn assign(&mut self) -> Result<(), String> {
        let mut tpl = TopicPartitionList::new();
        let open: Vec<&Tp> = self.parts.iter().filter(|(_, part)| !part.done()).map(|(tp, _)| tp).collect();
        for (topic, p) in &open {
            tpl.add_partition_offset(topic, *p, Offset::Offset(self.parts[&(topic.clone(), *p)].next)).map_err(|e| e.to_string())?;
        }
        self.queues.clear();
        self.consumer.assign(&tpl).map_err(|e| format!("{}: assigning partitions: {e}", self.who))?;
        for (topic, p) in open {
            let q = self.consumer.split_partition_queue(topic, *p).ok_or_else(|| format!("{}: no queue for {topic}/{p}", self.who))?;
            self.queues.push(((topic.clone(), *p), q));
        }
        Ok(())
    }

    /// The partition end was reached: librdkafka's fetch position (past
    /// transaction markers and aborted records, which read_committed never
    /// delivers) is where reading resumes.
    fn on_partition_eof(&mut self) {
        let Ok(positions) = self.consumer.position() else { return };
        for e in positions.elements() {
            if let (Offset::Offset(o), Some(part)) = (e.offset(), self.parts.get_mut(&(e.topic().to_string(), e.partition()))) {
                let o = part.stop.map_or(o, |s| o.min(s));
                if o > part.next {
                    part.next = o;
                }
            }
        }
    }

    fn snapshot_offsets(&self) -> Vec<(Tp, i64)> {
        self.parts.iter().map(|(tp, p)| (tp.clone(), p.next)).collect()
    }
}

impl Decoder {
    fn bad_record(&self, place: &str, text: &str, reason: &str, metrics: &OperatorMetrics) -> Result<(), OpError> {
        reject(&self.on_error, self.dead_letter.as_ref(), (&self.who, place), text, reason, metrics)
    }

    /// Parse one message into `out` (or hand it to `on_error`); how many
    /// records it gave (a batch message of a repartition topic, several).
    /// `now`: the time of the poll (one clock read for all its messages).
    fn take(
        &mut self,
        tp: &Tp,
        m: &rdkafka::message::BorrowedMessage<'_>,
        now: Instant,
        out: &mut Vec<Record>,
        metrics: &OperatorMetrics,
    ) -> Result<usize, OpError> {
        let stamp = match &self.carried {
            Some(_) => Stamp::read(m.headers(), m.partition())
                .map_err(|e| OpError::Data(format!("{}: {}/{}@{}: {e}", self.who, m.topic(), m.partition(), m.offset())))?,
            None => Stamp::None,
        };
        if let (Some(c), Stamp::Watermark { generation, producer, watermark, .. }) = (&mut self.carried, stamp) {
            // Not data: it moves the partition's watermark only.
            c.on_watermark(tp, generation, producer, watermark, now).map_err(|e| OpError::Data(format!("{}: {e}", self.who)))?;
            return Ok(0);
        }
        if let Some(t) = self.times.get_mut(tp) {
            t.last_data = now;
        }
        if let Stamp::Batch { generation, producer, records, .. } = stamp {
            return self.take_batch(tp, m, (generation, producer, records), now, out, metrics);
        }
        let payload = m.payload().unwrap_or_default();
        OperatorMetrics::add(&metrics.bytes_in, payload.len() as u64);
        let place = || format!("{}/{}@{}", m.topic(), m.partition(), m.offset());
        let text = match std::str::from_utf8(payload) {
            Ok(t) => t.trim(),
            Err(e) => {
                let lossy = String::from_utf8_lossy(payload).into_owned();
                self.bad_record(&place(), &lossy, &format!("not UTF-8: {e}"), metrics)?;
                return Ok(0);
            }
        };
        let text = match &self.key_field {
            Some(field) => {
                with_key_field(field, m.key(), text, &mut self.raw);
                self.raw.as_str()
            }
            None => text,
        };
        match self.parser.parse(text) {
            Ok(mut r) => {
                if self.message_timestamp {
                    r.event_time = m.timestamp().to_millis();
                    if let Some(Err(reason)) = r.event_time.map(crate::types::check_event_time) {
                        let text = text.to_string();
                        self.bad_record(&place(), &text, &format!("message timestamp: {reason}"), metrics)?;
                        return Ok(0);
                    }
                }
                if let (Some(c), Stamp::Record { generation, producer, event_time, split_watermark }) = (&mut self.carried, stamp) {
                    // Event time and lateness as the producer's input had
                    // them (of any generation: data is data).
                    c.on_record(tp, generation, producer, now).map_err(|e| OpError::Data(format!("{}: {e}", self.who)))?;
                    r.event_time = event_time;
                    r.split_watermark = split_watermark;
                } else if let (Some(ts), Some(t)) = (r.event_time, self.times.get_mut(tp)) {
                    t.max_ts = t.max_ts.max(ts);
                    // The source task turns the partition's highest time into its watermark.
                    r.split_watermark = t.max_ts;
                }
                out.push(r);
                Ok(1)
            }
            Err(reason) => {
                let text = text.to_string();
                self.bad_record(&place(), &text, &reason, metrics)?;
                Ok(0)
            }
        }
    }

    /// The records of a batch message of a repartition topic (stamp.rs):
    /// each with the event time and split watermark it was sent with, as a
    /// message of one record would be read; `header`: its producer's
    /// generation and number, and the number of records it says it holds.
    fn take_batch(
        &mut self,
        tp: &Tp,
        m: &rdkafka::message::BorrowedMessage<'_>,
        (generation, producer, records): (u64, u32, u32),
        now: Instant,
        out: &mut Vec<Record>,
        metrics: &OperatorMetrics,
    ) -> Result<usize, OpError> {
        let where_ = || format!("{}: {}/{}@{}", self.who, m.topic(), m.partition(), m.offset());
        let (before, mut read, mut bytes) = (out.len(), 0u32, 0);
        for rec in BatchReader::new(m.payload().unwrap_or_default()) {
            let (event_time, split_watermark, json) = rec.map_err(|e| OpError::Data(format!("{}: {e}", where_())))?;
            read += 1;
            bytes += json.len();
            let place = || format!("{}/{}@{} record {read}", m.topic(), m.partition(), m.offset());
            let text = match std::str::from_utf8(json) {
                Ok(t) => t.trim(),
                Err(e) => {
                    let lossy = String::from_utf8_lossy(json).into_owned();
                    self.bad_record(&place(), &lossy, &format!("not UTF-8: {e}"), metrics)?;
                    continue;
                }
            };
            match self.parser.parse(text) {
                Ok(mut r) => {
                    r.event_time = event_time;
                    r.split_watermark = split_watermark;
                    out.push(r);
                }
                Err(reason) => {
                    let text = text.to_string();
                    self.bad_record(&place(), &text, &reason, metrics)?;
                }
            }
        }
        OperatorMetrics::add(&metrics.bytes_in, bytes as u64);
        if read != records {
            return Err(OpError::Data(format!("{}: a batch message of {read} records says it holds {records}", where_())));
        }
        let produced = out.len() - before;
        if produced > 0 {
            if let Some(c) = &mut self.carried {
                c.on_record(tp, generation, producer, now).map_err(|e| OpError::Data(format!("{}: {e}", self.who)))?;
            }
        }
        Ok(produced)
    }
}

struct PollState {
    /// When the poll began.
    now: Instant,
    produced: usize,
    received: bool,
    eof: bool,
    /// librdkafka found a fetch offset out of range.
    out_of_range: bool,
}

/// Take one item of a consumer or partition queue; false if it was empty.
/// `queue_of`: the partition whose queue it came from (None: the
/// consumer's queue), which saves naming it again for every message.
#[allow(clippy::too_many_arguments)]
fn handle(
    parts: &mut BTreeMap<Tp, Part>,
    dec: &mut Decoder,
    cx: &WeirContext,
    queue_of: Option<&Tp>,
    item: Option<KafkaResult<BorrowedMessage<'_>>>,
    out: &mut Vec<Record>,
    metrics: &OperatorMetrics,
    st: &mut PollState,
) -> Result<bool, OpError> {
    let Some(result) = item else { return Ok(false) };
    match result {
        Ok(m) => {
            st.received = true;
            let named;
            let tp = match queue_of {
                Some(tp) if tp.1 == m.partition() && tp.0 == m.topic() => tp,
                _ => {
                    named = (m.topic().to_string(), m.partition());
                    &named
                }
            };
            let Some(part) = parts.get_mut(tp) else { return Ok(true) };
            // Past a bounded partition's end, or before the position (a
            // fetch that was under way at a re-assign): not ours.
            if part.done() || m.offset() < part.next || part.stop.is_some_and(|s| m.offset() >= s) {
                return Ok(true);
            }
            st.produced += dec.take(tp, &m, st.now, out, metrics)?;
            part.next = m.offset() + 1;
        }
        Err(KafkaError::PartitionEOF(_)) => {
            st.received = true;
            st.eof = true;
        }
        Err(e) => match e.rdkafka_error_code() {
            Some(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange) => {
                st.received = true;
                st.out_of_range = true;
            }
            Some(code) if is_connectivity(code) => cx.broker_failed(&e.to_string()),
            _ => tracing::warn!(who = %dec.who, error = %e, "Kafka consumer error."),
        },
    }
    Ok(true)
}

/// The lowest highest event time over the partitions that still hold event
/// time back: not finished, and (with `idle_timeout`) not silent that long.
/// When none does, the highest over all: nothing holds event time back.
fn event_time_bound(
    parts: &BTreeMap<Tp, Part>,
    times: &BTreeMap<Tp, PartTime>,
    idle_timeout: Option<Duration>,
    now: Instant,
) -> Option<Millis> {
    let idle = |t: &PartTime| idle_timeout.is_some_and(|d| now.duration_since(t.last_data) >= d);
    let active = parts.iter().filter(|(_, p)| !p.done()).filter_map(|(tp, _)| times.get(tp)).filter(|t| !idle(t));
    match active.map(|t| t.max_ts).min() {
        Some(t) => Some(t),
        None => times.values().map(|t| t.max_ts).max(),
    }
}

/// Put the message key into a JSON object as its first field.
fn with_key_field(field: &str, key: Option<&[u8]>, object: &str, out: &mut String) {
    out.clear();
    let Some(rest) = object.strip_prefix('{') else {
        // Not an object: the parser reports it.
        out.push_str(object);
        return;
    };
    out.push('{');
    out.push_str(&serde_json::to_string(field).expect("a string serializes"));
    out.push(':');
    match key {
        Some(k) => out.push_str(&serde_json::to_string(&String::from_utf8_lossy(k)).expect("a string serializes")),
        None => out.push_str("null"),
    }
    if !rest.trim_start().starts_with('}') {
        out.push(',');
    }
    out.push_str(rest);
}

impl Source for KafkaSource {
    fn poll(&mut self, max: usize, out: &mut Vec<Record>, metrics: &OperatorMetrics) -> Result<SourcePoll, OpError> {
        if self.parts.values().all(Part::done) {
            return Ok(SourcePoll::Finished);
        }
        let mut st = PollState { now: Instant::now(), produced: 0, received: false, eof: false, out_of_range: false };
        // Events (errors) and messages buffered before the split.
        while st.produced < max {
            let item = self.consumer.poll(Duration::ZERO);
            if !handle(&mut self.parts, &mut self.dec, self.consumer.context(), None, item, out, metrics, &mut st)? {
                break;
            }
        }
        // Then the partitions in turn, a share of `max` each.
        let share = (max / self.queues.len().max(1)).max(1);
        for (tp, q) in &self.queues {
            let goal = (st.produced + share).min(max);
            while st.produced < goal {
                let item = q.poll(Duration::ZERO);
                if !handle(&mut self.parts, &mut self.dec, self.consumer.context(), Some(tp), item, out, metrics, &mut st)? {
                    break;
                }
            }
        }
        let (produced, received, eof) = (st.produced, st.received, st.eof);
        if eof {
            self.on_partition_eof();
        }
        self.range_check |= st.out_of_range;
        if self.range_check {
            self.recheck_ranges()?;
        }
        let cx = self.consumer.context();
        if received {
            cx.broker_ok();
        } else if cx.is_down() && self.last_probe.elapsed() >= PROBE_EVERY {
            // No message says the brokers are back while a topic is quiet: ask.
            self.last_probe = Instant::now();
            if let Some((topic, p)) = self.parts.keys().next() {
                match self.consumer.fetch_watermarks(topic, *p, PROBE_TIMEOUT) {
                    Ok(_) => cx.broker_ok(),
                    Err(e) => cx.broker_failed(&e.to_string()),
                }
            }
        }
        cx.check()?;
        if self.parts.values().all(Part::done) {
            return Ok(if produced > 0 { SourcePoll::More } else { SourcePoll::Finished });
        }
        Ok(if produced > 0 { SourcePoll::More } else { SourcePoll::Pending })
    }

    fn extent(&self) -> Option<Extent> {
        None
    }

    fn event_time_bound(&self) -> Option<Millis> {
        match &self.dec.carried {
            Some(c) => c.watermark(Instant::now()),
            None => event_time_bound(&self.parts, &self.dec.times, self.idle_timeout, Instant::now()),
        }
    }

    fn carries_watermarks(&self) -> bool {
        self.dec.carried.is_some()
    }

    fn position(&self) -> Vec<u8> {
        let max_ts = |tp: &Tp| self.dec.times.get(tp).map_or(MIN_WATERMARK, |t| t.max_ts);
        let mut out = encode_position(self.parts.iter().map(|(tp, part)| (tp, part, max_ts(tp))));
        if let Some(c) = &self.dec.carried {
            encode_producers(&mut out, c.producers(), c.generation(), self.parts.keys().map(|tp| c.of(tp)));
        }
        out
    }

    /// The union of every old subtask's partitions: works at any old parallelism.
    fn restore(&mut self, restored: &RestoredPositions) -> Result<(), String> {
        let all: Vec<&[u8]> = restored.by_subtask.iter().map(Vec::as_slice).filter(|p| !p.is_empty()).collect();
        self.restore_union(&all)
    }

    fn client_stats(&self) -> Option<std::sync::Arc<crate::connectors::source::ClientStats>> {
        Some(self.consumer.context().stats.clone())
    }

    fn on_checkpoint(&mut self, id: u64) {
        if self.commit_offsets {
            let offsets = self.snapshot_offsets();
            self.pending_commits.push_back((id, offsets));
        }
    }

    fn on_checkpoint_complete(&mut self, id: u64) {
        let mut newest = None;
        while self.pending_commits.front().is_some_and(|(c, _)| *c <= id) {
            newest = self.pending_commits.pop_front().map(|(_, o)| o);
        }
        let Some(offsets) = newest else { return };
        let mut tpl = TopicPartitionList::new();
        for ((topic, p), next) in &offsets {
            let _ = tpl.add_partition_offset(topic, *p, Offset::Offset(*next));
        }
        if tpl.count() > 0 {
            if let Err(e) = self.consumer.commit(&tpl, CommitMode::Async) {
                tracing::warn!(who = %self.who, error = %e, "Committing offsets to the consumer group failed (monitoring only).");
            }
        }
    }
}

impl KafkaSource {
    /// Resume from the positions of any number of old subtasks: every
    /// partition this subtask owns takes the recorded offsets; a partition
    /// no position names (new since) keeps its start offset.
    pub fn restore_union(&mut self, positions: &[&[u8]]) -> Result<(), String> {
        let mut recorded: BTreeMap<Tp, (Part, Millis, Vec<Millis>, u64)> = BTreeMap::new();
        for p in positions {
            let (parts, producers, generation) = decode_position(p)?;
            let mut producers = producers.into_iter();
            recorded
                .extend(parts.into_iter().map(|(tp, part, max_ts)| (tp, (part, max_ts, producers.next().unwrap_or_default(), generation))));
        }
        let now = Instant::now();
        let mut started_over = 0;
        for (tp, part) in self.parts.iter_mut() {
            if let Some((r, max_ts, producers, generation)) = recorded.get(tp) {
                *part = *r;
                if let Some(t) = self.dec.times.get_mut(tp) {
                    t.max_ts = t.max_ts.max(*max_ts);
                }
                if let Some(c) = &mut self.dec.carried {
                    started_over += usize::from(!c.restore(tp, producers, *generation, now));
                }
            }
        }
        if started_over > 0 {
            tracing::info!(who = %self.who, partitions = started_over,
                "The producers of the repartition topic changed since the checkpoint (a rescale): its watermark waits until every producer has written one.");
        }
        self.check_ranges("restored offset")?;
        self.assign()
    }
}

/// Each partition's offsets, then (added later, optional when read) each
/// one's highest event time so far.
fn encode_position<'a>(parts: impl Iterator<Item = (&'a Tp, &'a Part, Millis)>) -> Vec<u8> {
    let parts: Vec<_> = parts.collect();
    let mut out = POSITION_MAGIC.to_vec();
    out.extend_from_slice(&(parts.len() as u32).to_be_bytes());
    for ((topic, p), part, _) in &parts {
        out.extend_from_slice(&(topic.len() as u16).to_be_bytes());
        out.extend_from_slice(topic.as_bytes());
        out.extend_from_slice(&p.to_be_bytes());
        out.extend_from_slice(&part.next.to_be_bytes());
        out.extend_from_slice(&part.stop.unwrap_or(-1).to_be_bytes());
    }
    for (_, _, max_ts) in &parts {
        out.extend_from_slice(&max_ts.to_be_bytes());
    }
    out
}

/// A repartition topic's position ends with each partition's producer
/// watermarks: the number of producers, then as many watermarks per
/// partition, in the partitions' order, then (added later, 0 when absent)
/// the generation of those producers.
fn encode_producers(out: &mut Vec<u8>, producers: u32, generation: u64, parts: impl Iterator<Item = Vec<Millis>>) {
    out.extend_from_slice(&producers.to_be_bytes());
    for wms in parts {
        for w in wms {
            out.extend_from_slice(&w.to_be_bytes());
        }
    }
    out.extend_from_slice(&generation.to_be_bytes());
}

/// The consumer's configuration: read committed, offsets in checkpoints
/// (never auto-committed or reset), partition ends reported, statistics on.
fn consumer_config(spec: &KafkaSourceSpec, pipeline: &str, name: &str) -> ClientConfig {
    let mut config = client_config(&spec.brokers, &[]);
    config
        .set("group.id", spec.group_id.clone().unwrap_or_else(|| format!("weir-{pipeline}-{name}")))
        .set("isolation.level", "read_committed");
    for (k, v) in &spec.properties {
        config.set(k, v);
    }
    // An offset out of range is reported, never jumped over (see above).
    config.set("auto.offset.reset", "error");
    // Offsets live in checkpoints; the partition end is watched (bounded reads).
    config.set("enable.auto.commit", "false").set("enable.auto.offset.store", "false").set("enable.partition.eof", "true");
    // Consumer lag per partition for the metrics endpoint, delivered by
    // the poll(0) of the main queue below (`WeirContext::stats_raw`).
    if !spec.properties.iter().any(|(k, _)| k == "statistics.interval.ms") {
        config.set("statistics.interval.ms", STATS_INTERVAL_MS);
    }
    config
}

/// Every partition of the topics (or the pattern's topics) the source reads.
fn topic_partitions(metadata: &rdkafka::metadata::Metadata, spec: &KafkaSourceSpec, who: &str) -> Result<Vec<Tp>, String> {
    let mut all: Vec<Tp> = Vec::new();
    match &spec.topics {
        KafkaTopics::Names(names) => {
            for n in names {
                let topic = metadata.topics().iter().find(|m| m.name() == n && !m.partitions().is_empty());
                let Some(topic) = topic else {
                    return Err(format!("topic `{n}` does not exist on Kafka brokers `{}` (create it first)", spec.brokers));
                };
                all.extend(topic.partitions().iter().map(|p| (n.clone(), p.id())));
            }
        }
        KafkaTopics::Pattern(p) => {
            let re = regex::Regex::new(p).map_err(|e| format!("invalid topic_pattern: {e}"))?;
            for topic in metadata.topics().iter().filter(|m| re.is_match(m.name()) && !m.name().starts_with("__")) {
                all.extend(topic.partitions().iter().map(|p| (topic.name().to_string(), p.id())));
            }
            if all.is_empty() {
                tracing::warn!(who, pattern = %p, "No topic matches the topic pattern; this subtask reads nothing.");
            }
        }
    }
    Ok(all)
}

/// Where reading starts in each partition (`start:`), and each one's
/// low and high offsets.
type Positions = (BTreeMap<Tp, Part>, BTreeMap<Tp, (i64, i64)>);

fn start_positions(consumer: &BaseConsumer<WeirContext>, spec: &KafkaSourceSpec, mine: Vec<Tp>) -> Result<Positions, KafkaError> {
    let t = spec.broker_timeout;
    let committed = match (spec.start, mine.is_empty()) {
        (KafkaStart::GroupOffsets, false) => {
            let mut tpl = TopicPartitionList::new();
            for (topic, p) in &mine {
                tpl.add_partition(topic, *p);
            }
            Some(consumer.committed_offsets(tpl, t)?)
        }
        _ => None,
    };
    let mut parts = BTreeMap::new();
    let mut bounds = BTreeMap::new();
    for (topic, p) in mine {
        let (low, high) = consumer.fetch_watermarks(&topic, p, t)?;
        let group = committed.as_ref().and_then(|c| c.find_partition(&topic, p)).and_then(|e| match e.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        });
        let next = match spec.start {
            KafkaStart::Earliest => low,
            KafkaStart::Latest => high,
            KafkaStart::GroupOffsets => group.unwrap_or(low),
        };
        bounds.insert((topic.clone(), p), (low, high));
        parts.insert((topic, p), Part { next, stop: spec.bounded.then_some(high) });
    }
    Ok((parts, bounds))
}

/// The partitions, and (a repartition topic's) each one's producer
/// watermarks and their generation.
type Decoded = (Vec<(Tp, Part, Millis)>, Vec<Vec<Millis>>, u64);

fn decode_position(b: &[u8]) -> Result<Decoded, String> {
    let bad = || format!("Kafka source position of {} bytes is malformed", b.len());
    let r = b.strip_prefix(POSITION_MAGIC.as_slice()).ok_or_else(|| "not a Kafka source position".to_string())?;
    let mut d = crate::codec::Dec::new(r);
    let count = d.u32("partition count").map_err(|_| bad())?;
    let mut out = Vec::with_capacity((count as usize).min(d.remaining() / 22));
    for _ in 0..count {
        let len = d.u16("topic length").map_err(|_| bad())? as usize;
        let topic = String::from_utf8(d.take(len, "topic").map_err(|_| bad())?.to_vec()).map_err(|_| bad())?;
        let p = d.i32("partition").map_err(|_| bad())?;
        let next = d.i64("next offset").map_err(|_| bad())?;
        let stop = d.i64("stop offset").map_err(|_| bad())?;
        out.push(((topic, p), Part { next, stop: (stop >= 0).then_some(stop) }, MIN_WATERMARK));
    }
    // Later versions appended each partition's max event time, then the
    // producers' watermarks and their generation.
    if !d.is_empty() {
        for (_, _, max_ts) in &mut out {
            *max_ts = d.i64("max event time").map_err(|_| bad())?;
        }
    }
    let (mut producers, mut generation) = (Vec::new(), 0);
    if !d.is_empty() {
        let n = d.u32("producer count").map_err(|_| bad())? as usize;
        for _ in 0..out.len() {
            let mut wms = Vec::with_capacity(n.min(d.remaining() / 8));
            for _ in 0..n {
                wms.push(d.i64("producer watermark").map_err(|_| bad())?);
            }
            producers.push(wms);
        }
        if !d.is_empty() {
            generation = d.u64("generation").map_err(|_| bad())?;
        }
    }
    if d.is_empty() {
        Ok((out, producers, generation))
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_and_union() {
        let a: Tp = ("in".into(), 0);
        let b: Tp = ("in".into(), 1);
        let pa = Part { next: 17, stop: None };
        let pb = Part { next: 3, stop: Some(9) };
        let one = encode_position([(&a, &pa, 40)].into_iter());
        let two = encode_position([(&b, &pb, MIN_WATERMARK)].into_iter());
        assert_eq!(decode_position(&one).unwrap(), (vec![(a.clone(), pa, 40)], vec![], 0));
        assert_eq!(decode_position(&two).unwrap().0, vec![(b.clone(), pb, MIN_WATERMARK)]);
        assert!(decode_position(&one[..one.len() - 1]).is_err());
        // Positions written before the highest event times were recorded.
        assert_eq!(decode_position(&one[..one.len() - 8]).unwrap().0, vec![(a.clone(), pa, MIN_WATERMARK)]);
        assert!(decode_position(b"xx").is_err());
        // A repartition topic's: each partition's producer watermarks after,
        // then their generation.
        let mut three = encode_position([(&a, &pa, 40), (&b, &pb, 50)].into_iter());
        encode_producers(&mut three, 2, 0xfeed, [vec![7, 8], vec![MIN_WATERMARK, 9]].into_iter());
        let (parts, producers, generation) = decode_position(&three).unwrap();
        assert_eq!(parts, vec![(a.clone(), pa, 40), (b.clone(), pb, 50)]);
        assert_eq!(producers, vec![vec![7, 8], vec![MIN_WATERMARK, 9]]);
        assert_eq!(generation, 0xfeed);
        // Written before the generation was recorded: generation 0.
        let before = &three[..three.len() - 8];
        assert_eq!(decode_position(before).unwrap(), (parts, producers, 0));
        assert!(decode_position(&three[..three.len() - 16]).is_err(), "a watermark missing");
        assert!(decode_position(&three[..three.len() - 1]).is_err(), "the generation cut short");
    }

    #[test]
    fn idle_and_finished_partitions_do_not_hold_event_time_back() {
        let now = Instant::now();
        let (a, b, c): (Tp, Tp, Tp) = (("t".into(), 0), ("t".into(), 1), ("t".into(), 2));
        let mut parts = BTreeMap::new();
        for tp in [&a, &b, &c] {
            parts.insert(tp.clone(), Part { next: 0, stop: None });
        }
        let mut times = BTreeMap::new();
        times.insert(a.clone(), PartTime { max_ts: 500, last_data: now });
        times.insert(b.clone(), PartTime { max_ts: 100, last_data: now - Duration::from_secs(10) });
        times.insert(c.clone(), PartTime { max_ts: MIN_WATERMARK, last_data: now - Duration::from_secs(10) });
        // Without an idle timeout the slowest partition (one with no data yet) holds it back.
        assert_eq!(event_time_bound(&parts, &times, None, now), Some(MIN_WATERMARK));
        // Silent for 10 s > 5 s: b and c no longer count.
        assert_eq!(event_time_bound(&parts, &times, Some(Duration::from_secs(5)), now), Some(500));
        // A partition read to its (bounded) end does not count either.
        parts.insert(c.clone(), Part { next: 7, stop: Some(7) });
        assert_eq!(event_time_bound(&parts, &times, None, now), Some(100));
        // Everything idle or finished: nothing holds it back.
        assert_eq!(event_time_bound(&parts, &times, Some(Duration::from_millis(1)), now + Duration::from_secs(1)), Some(500));
    }

    #[test]
    fn offsets_out_of_range_follow_the_policy() {
        use OffsetOutOfRange::*;
        // In range, the ends included: nothing to do.
        for next in [0, 5, 10] {
            assert_eq!(resolve_out_of_range(next, 0, 10, Fail), Ok(None));
        }
        // Past the end (topic recreated with fewer records) and below the start (retention).
        assert_eq!(resolve_out_of_range(998, 0, 600, Fail), Err(()));
        assert_eq!(resolve_out_of_range(998, 0, 600, Earliest), Ok(Some(0)));
        assert_eq!(resolve_out_of_range(998, 0, 600, Latest), Ok(Some(600)));
        assert_eq!(resolve_out_of_range(3, 40, 90, Earliest), Ok(Some(40)));
        assert_eq!(resolve_out_of_range(3, 40, 90, Latest), Ok(Some(90)));
        assert_eq!(resolve_out_of_range(3, 40, 90, Fail), Err(()));
    }

    #[test]
    fn instances_share_partitions_without_overlap_or_gap() {
        let all: Vec<Tp> = (0..7).map(|p| ("t".to_string(), p)).chain((0..3).map(|p| ("u".to_string(), p))).collect();
        let mut seen: Vec<Tp> = Vec::new();
        for i in 0..3 {
            for s in 0..2 {
                seen.extend(assign_partitions(instance_share(all.clone(), (i, 3), None), 2, s));
            }
        }
        seen.sort();
        let mut want = all.clone();
        want.sort();
        assert_eq!(seen, want, "every partition read by exactly one subtask of one instance");
        assert_eq!(instance_share(all.clone(), (0, 1), None).len(), all.len(), "one instance reads everything, as before");
        // A repartition topic: the partitions of the instance's key groups.
        let r = RepartitionIn { partitions: 7, owned: 2..5, generation: 1 };
        let mine = instance_share(all[..7].to_vec(), (1, 3), Some(&r));
        assert_eq!(mine.iter().map(|(_, p)| *p).collect::<Vec<_>>(), [2, 3, 4]);
    }

    #[test]
    fn partitions_are_dealt_deterministically() {
        let all: Vec<Tp> = vec![("b".into(), 0), ("a".into(), 1), ("a".into(), 0), ("b".into(), 1), ("a".into(), 2)];
        let p0 = assign_partitions(all.clone(), 2, 0);
        let p1 = assign_partitions(all.clone(), 2, 1);
        assert_eq!(p0, vec![("a".to_string(), 0), ("a".to_string(), 2), ("b".to_string(), 1)]);
        assert_eq!(p1, vec![("a".to_string(), 1), ("b".to_string(), 0)]);
    }

    #[test]
    fn key_field_goes_first_in_the_object() {
        let mut out = String::new();
        with_key_field("k", Some(b"u\"1"), r#"{"a":1}"#, &mut out);
        assert_eq!(out, r#"{"k":"u\"1","a":1}"#);
        with_key_field("k", None, "{ }", &mut out);
        assert_eq!(out, r#"{"k":null}"#.replace('}', " }"));
        with_key_field("k", Some(b"x"), "[1]", &mut out);
        assert_eq!(out, "[1]");
    }
}

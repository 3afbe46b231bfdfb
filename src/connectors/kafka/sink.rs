//! The Kafka sink: each record's JSON text as the message value, the key
//! from fields.
//!
//! `delivery: at_least_once` — an idempotent producer (acks=all); every
//! checkpoint barrier waits until everything sent so far is acknowledged,
//! so a completed checkpoint never lost a record (a restore may send some
//! again). Its records committed (`weir_sink_records_committed_total`) are
//! those acknowledged at a barrier whose checkpoint completed: the records
//! no restore sends again. Without checkpoints, those acknowledged at close.
//!
//! `delivery: exactly_once` — one transactional producer per subtask,
//! `transactional.id = weir-<pipeline>-<sink>-<subtask>` (stable across
//! restarts, so a restart fences the old producer and aborts its open
//! transaction). One transaction per checkpoint:
//!
//! 1. records go into the open transaction;
//! 2. on the barrier of checkpoint n (pre-commit) the producer is flushed,
//!    the marker `n` is added to the transaction (`send_offsets_to_transaction`
//!    of offset n for the marker group `weir-txn-<transactional.id>-<run>`),
//!    and the records of the transaction are kept in the sink's state, with
//!    the run, which the checkpoint saves;
//! 3. records that arrive before n completes wait in memory (one transaction
//!    at a time per producer);
//! 4. when n completes, the transaction is committed and the next begins
//!    with the waiting records. A checkpoint that aborts (or a savepoint,
//!    which does not publish) leaves its transaction open: the next
//!    checkpoint's barrier extends it and its completion commits it.
//!
//! A crash between `_metadata` of n and the commit is the window a
//! transactional producer alone cannot close (librdkafka cannot resume a
//! transaction of a dead producer): the restart's `init_transactions`
//! aborts it. So on restore from n the sink asks the marker group of the
//! run that staged the transaction which checkpoint that run committed
//! last: if it is n or later, nothing is done; otherwise the records of n,
//! restored from state, are sent again in a new transaction with marker n
//! (in that run's group) and committed before anything else. Either way
//! every record of n is committed exactly once.
//!
//! The run is a random id drawn by every sink subtask when it opens: only
//! that instance commits markers under it (and a repair of one of its
//! transactions, which says so), in the order of its own checkpoint ids. So
//! no other run's marker can be taken for ours — not one of a fresh state
//! directory that reuses the pipeline name (its ids start at 1 again), nor
//! of another restore of the same savepoint, nor a later commit after the
//! checkpoint being restored.
//!
//! A start at a lower parallelism than before also fences the
//! transactional ids of the old subtasks that no longer exist (their open
//! transactions would otherwise hold `read_committed` readers back until the
//! broker's `transaction.timeout.ms`). "Before" is the higher of the
//! restored checkpoint's parallelism and the one the last start recorded in
//! the group `weir-txn-weir-<pipeline>-<sink>-parallelism`, which covers a
//! run that crashed before its first checkpoint and other state directories.
//!
//! A record the producer would refuse — key and value with Kafka's record
//! framing over the producer's `message.max.bytes` — is found before it is
//! sent (so the decision is the same on every run, not an asynchronous
//! delivery failure) and handled by the sink's `on_error`: fail naming both
//! sizes, skip, or write it to the dead letter, committed with checkpoints.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::stamp::{BatchWriter, Stamp, BATCH_RECORD_OVERHEAD};
use super::{client_config, is_connectivity, WeirContext};
use crate::codec::{Dec, DecodeError, Enc};
use crate::config::{Delivery, KafkaSinkSpec, OnError};
use crate::faults;
use crate::operators::dead_letter::reject;
use crate::operators::DeadLetter;
use crate::operators::{Context, OpError, OpResult, Operator, OperatorMetrics};
use crate::state::{TableKind, TableSpec};
use crate::types::{Millis, Record, MIN_WATERMARK};

/// The records of the staged transaction: key `txn`.
const TXN: usize = 0;
const TXN_KEY: &[u8] = b"txn";
/// A staged transaction in state: magic and version (then origin subtask,
/// run, checkpoint id, records). A value without it is of the format before
/// runs (origin, id, records), checked against the group without a run.
const STAGED_MAGIC: &[u8; 4] = b"WKT2";
/// The same with the instance of a cluster that staged it after the origin
/// subtask (`u16::MAX`: not a cluster), so that another instance can
/// repair it under the right transactional id after a rescale.
const STAGED_MAGIC_INSTANCE: &[u8; 4] = b"WKT3";
/// WKT3 with each record's stamp after its value (a cluster's repartition
/// sends: event times and watermark records, stamp.rs).
const STAGED_MAGIC_STAMPED: &[u8; 4] = b"WKT4";
const NO_INSTANCE: u16 = u16::MAX;

/// The producer's context: the shared one plus the delivery error to report.
pub struct SinkContext {
    base: WeirContext,
    failed: Mutex<Option<Failed>>,
}

/// A delivery error, and whether it only tells that librdkafka dropped the
/// message after something else failed (`PurgeQueue`, e.g. once a
/// transaction failed because messages timed out while the brokers were
/// away): that one is reported only when no cause was delivered.
struct Failed {
    error: String,
    consequence: bool,
    connectivity: bool,
}

impl Failed {
    /// Keep the first error, unless it was only a consequence and this is not.
    fn record(self, slot: &mut Option<Failed>) {
        if slot.as_ref().is_none_or(|old| old.consequence && !self.consequence) {
            *slot = Some(self);
        }
    }
}

impl ClientContext for SinkContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.base.log(level, fac, log_message)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.base.error(error, reason)
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.base.broker_ok(),
            Err((e, _)) => {
                let code = e.rdkafka_error_code();
                let connectivity = code.is_some_and(is_connectivity);
                if connectivity {
                    self.base.broker_failed(&e.to_string());
                }
                let consequence = code == Some(RDKafkaErrorCode::PurgeQueue);
                Failed { error: e.to_string(), consequence, connectivity }.record(&mut self.failed.lock().expect("failed lock"));
            }
        }
    }
}

/// Key, value, and what a repartition message carries in its header.
type Msg = (Option<Box<[u8]>>, Box<[u8]>, Stamp);

/// The records among `msgs` (not the watermark records of a repartition
/// topic; each record of a batch message).
fn records_in(msgs: &[Msg]) -> u64 {
    msgs.iter().map(|m| m.2.records()).sum()
}

/// The most records in one batch message of a repartition send (a
/// receiving source may return this many more than it was asked for).
const BATCH_MAX_RECORDS: u32 = 512;

/// Messages of a transaction in the form a staged transaction keeps them
/// (`encode_txn` after the id), appended as they are sent: no copy of each
/// record is kept apart, and the barrier writes them to state as they are.
#[derive(Debug, Default)]
struct Staging {
    bytes: Vec<u8>,
    /// The messages that are records (not watermark records).
    records: u64,
    messages: u64,
}

impl Staging {
    fn push(&mut self, key: Option<&[u8]>, value: &[u8], stamp: &Stamp, stamped: bool) {
        encode_msg(&mut self.bytes, key, value, stamp, stamped);
        self.messages += 1;
        self.records += stamp.records();
    }

    /// Append all of `other`'s messages.
    fn append(&mut self, other: &Staging) {
        self.bytes.extend_from_slice(&other.bytes);
        self.records += other.records;
        self.messages += other.messages;
    }

    /// Empty, keeping the buffer (a transaction's worth, every interval).
    fn clear(&mut self) {
        self.bytes.clear();
        self.records = 0;
        self.messages = 0;
    }

    fn is_empty(&self) -> bool {
        self.messages == 0
    }
}

/// librdkafka's default `message.max.bytes`.
const DEFAULT_MESSAGE_MAX_BYTES: u64 = 1_000_000;

/// What librdkafka adds to key and value when it checks a message against
/// `message.max.bytes` (`RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD`: the varint
/// length, attributes, timestamp and offset deltas, key and value lengths
/// and header count of a v2 record).
const RECORD_OVERHEAD: u64 = 36;

/// The producer's `message.max.bytes` from the pipeline's properties.
fn message_max_bytes(properties: &[(String, String)]) -> Result<u64, String> {
    match properties.iter().rev().find(|(k, _)| k == "message.max.bytes") {
        None => Ok(DEFAULT_MESSAGE_MAX_BYTES),
        Some((_, v)) => v.trim().parse().map_err(|_| format!("`message.max.bytes` must be a number of bytes, got `{v}`")),
    }
}

/// Why the producer would refuse a message of this key and value, if it would.
fn oversize(key: Option<&[u8]>, value: &[u8], max: u64) -> Option<String> {
    let bytes = key.map_or(0, |k| k.len() as u64) + value.len() as u64 + RECORD_OVERHEAD;
    (bytes > max).then(|| {
        format!(
            "record of {} bytes (key, value and {RECORD_OVERHEAD} bytes of framing) is over the producer's message.max.bytes {}",
            group_digits(bytes),
            group_digits(max)
        )
    })
}

/// `1500123` as `1 500 123`.
fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// The producer and what sending needs, in either delivery mode.
struct Client {
    who: String,
    topic: String,
    producer: ThreadedProducer<SinkContext>,
    timeout: Duration,
    /// A repartition topic of this many partitions: the message key is the
    /// record's encoded key and the partition its key group.
    repartition: Option<u16>,
}

/// How records count as committed: the delivery mode and its bookkeeping.
enum Mode {
    AtLeastOnce(Acks),
    ExactlyOnce(Box<Txn>),
}

/// At least once: what has been acknowledged for which checkpoint.
struct Acks {
    /// The pipeline takes checkpoints (else records count as committed
    /// once acknowledged at close).
    checkpointed: bool,
    /// Records sent since the last barrier.
    sent: u64,
    /// (checkpoint, records acknowledged at its barrier) of checkpoints
    /// that have not completed yet, oldest first.
    acked: Vec<(u64, u64)>,
}

/// The exactly-once machinery of one subtask.
struct Txn {
    /// This instance's run: its marker group is `weir-txn-<txn id>-<run>`.
    run: String,
    /// Carries the marker group of this run in transactions.
    marker: BaseConsumer<WeirContext>,
    open: bool,
    /// The records of the open transaction (saved at each barrier).
    records: Staging,
    /// The checkpoint whose barrier pre-committed the open transaction.
    staged: Option<u64>,
    /// Records that arrived after the barrier of `staged`.
    held: Staging,
}

pub struct KafkaSink {
    client: Client,
    mode: Mode,
    subtask: u16,
    /// `weir-<pipeline>-<sink>-`: the transactional id of subtask i is this plus i.
    txn_prefix: String,
    /// Client settings of a marker consumer, without its group.
    marker_config: ClientConfig,
    /// The producer's settings (to fence the transactional id of another subtask).
    producer_config: ClientConfig,
    key: Vec<usize>,
    key_buf: Vec<u8>,
    /// Old subtasks whose transactional ids this subtask fenced at open (subtask 0).
    fenced: Vec<u16>,
    /// Subtasks of this sink now: ids below it belong to live producers.
    parallelism: u16,
    /// `weir-<pipeline>-`, and `-<sink>-`: a transactional id of any instance.
    id_parts: (String, String),
    /// This instance of a cluster (None: not a cluster).
    instance: Option<u16>,
    /// The key of this sink's staged transaction in state: per instance, so
    /// that the transactions of several old instances restored into one
    /// subtask after a rescale keep apart.
    txn_key: Vec<u8>,
    /// The producer's `message.max.bytes`: larger records are refused before sending.
    max_message_bytes: u64,
    on_error: OnError,
    dead_letter: Option<DeadLetter>,
    /// A repartition send: this producer's id (instance × parallelism +
    /// subtask) and the watermark it last wrote into every partition (not
    /// saved: a restarted producer writes its restored watermark again).
    producer_id: u32,
    /// The cluster generation, in every stamp (`plan::cluster::generation`).
    generation: u64,
    written_watermark: Millis,
    /// The state value of the staged transaction, built at each barrier
    /// (kept: about a transaction's size every time).
    staged_value: Vec<u8>,
    /// A repartition send: each partition's batch message being built.
    batches: Vec<BatchWriter>,
}

/// Which run's marker says whether a staged transaction was committed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Lineage {
    /// The run that staged it (`weir-txn-<txn id>-<run>`).
    Run(String),
    /// Staged before runs existed (`weir-txn-<txn id>`).
    Legacy,
}

/// A staged transaction as restored from state.
#[derive(Debug, PartialEq, Eq)]
struct Staged {
    origin: u16,
    /// The instance that staged it (None: not a cluster).
    instance: Option<u16>,
    lineage: Lineage,
    id: u64,
    records: Vec<Msg>,
}

/// `weir-<pipeline>-<sink>-` (`weir-<pipeline>-i<I>-<sink>-` for instance I
/// of a cluster: every instance fences only its own zombies); the
/// transactional id of subtask s is this plus s.
fn txn_prefix(pipeline: &str, name: &str, instance: Option<u16>) -> String {
    match instance {
        Some(i) => format!("weir-{pipeline}-i{i}-{name}-"),
        None => format!("weir-{pipeline}-{name}-"),
    }
}

/// The state key of the staged transaction of `instance`.
fn txn_key(instance: Option<u16>) -> Vec<u8> {
    let mut k = TXN_KEY.to_vec();
    if let Some(i) = instance {
        k.extend_from_slice(&i.to_be_bytes());
    }
    k
}

/// The marker group of transactional id `txn_id` for `lineage`.
fn marker_group(txn_id: &str, lineage: &Lineage) -> String {
    match lineage {
        Lineage::Run(run) => format!("weir-txn-{txn_id}-{run}"),
        Lineage::Legacy => format!("weir-txn-{txn_id}"),
    }
}

/// The old subtasks beyond the new parallelism `new` whose transactional
/// ids must be fenced, when up to `old` subtasks may have run before.
fn vanished_subtasks(old: u16, new: u16) -> std::ops::Range<u16> {
    new..old.max(new)
}

/// The group that records the parallelism the sink ran at last (the
/// committed offset of partition 0 of the topic): which transactional ids
/// may have been in use, even by a run that crashed before any checkpoint,
/// or of another state directory.
fn parallelism_group(txn_prefix: &str) -> String {
    format!("weir-txn-{txn_prefix}parallelism")
}

/// The committed offset of partition 0 of `topic` in `consumer`'s group (0: none).
fn committed_offset(consumer: &BaseConsumer<WeirContext>, topic: &str, t: Duration) -> Result<u64, KafkaError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let got = consumer.committed_offsets(tpl, t)?;
    Ok(match got.find_partition(topic, 0).map(|e| e.offset()) {
        Some(Offset::Offset(o)) if o > 0 => o as u64,
        _ => 0,
    })
}

/// End the open transaction of `txn_id` (whoever left it): a producer with
/// that id runs `init_transactions`, which fences the old one.
fn fence(producer_config: &ClientConfig, txn_id: &str, timeout: Duration) -> Result<(), String> {
    let mut c = producer_config.clone();
    c.set("transactional.id", txn_id);
    let fence: rdkafka::producer::BaseProducer = c.create().map_err(|e| format!("creating a fencing producer for `{txn_id}`: {e}"))?;
    fence.init_transactions(timeout).map_err(|e| format!("init_transactions of `{txn_id}`: {e}"))
}

/// `transaction.timeout.ms` when the pipeline does not set it: twice what a
/// transaction may need (a checkpoint interval plus its timeout), at least
/// librdkafka's default of 60 s and at most a broker's default maximum of 15 min.
pub fn default_transaction_timeout(interval: Duration, timeout: Duration) -> Duration {
    ((interval + timeout) * 2).clamp(Duration::from_secs(60), Duration::from_secs(900))
}

/// How often a flush still waiting for the brokers says so.
const FLUSH_WAIT_LOG_EVERY: Duration = Duration::from_secs(10);

/// The producer's configuration: idempotent, every send bounded by
/// `broker_timeout`, transactional for exactly-once; the user's properties last.
fn producer_config(spec: &KafkaSinkSpec, txn_id: &str, transaction_timeout: Duration) -> ClientConfig {
    let mut config = client_config(&spec.brokers, &[]);
    let bound_ms = spec.broker_timeout.as_millis().to_string();
    config.set("acks", "all").set("enable.idempotence", "true").set("message.timeout.ms", &bound_ms);
    if spec.delivery == Delivery::ExactlyOnce {
        // The user's `transaction.timeout.ms` (validated against the
        // checkpoint interval and timeout) is the one the producer gets:
        // `message.timeout.ms` must not exceed it, or librdkafka refuses
        // the configuration.
        let chosen = spec.properties.iter().find(|(k, _)| k == "transaction.timeout.ms").and_then(|(_, v)| v.parse::<u64>().ok());
        let transaction_timeout = chosen.map_or(transaction_timeout, Duration::from_millis);
        let ms = transaction_timeout.as_millis().to_string();
        config.set("transactional.id", txn_id).set("transaction.timeout.ms", &ms);
        if spec.broker_timeout > transaction_timeout {
            config.set("message.timeout.ms", &ms);
        }
    }
    for (k, v) in &spec.properties {
        config.set(k, v);
    }
    config
}

/// The configuration of the consumers whose group offsets record markers
/// (the parallelism, a transaction's commit): the user's security settings only.
fn marker_config(spec: &KafkaSinkSpec) -> ClientConfig {
    let mut config = client_config(&spec.brokers, &[]);
    config.set("enable.auto.commit", "false").set("isolation.level", "read_committed");
    for (k, v) in spec.properties.iter().filter(|(k, _)| k.starts_with("security.") || k.starts_with("sasl.") || k.starts_with("ssl.")) {
        config.set(k, v);
    }
    config
}

/// What subtask 0 of an exactly-once sink knows of the subtasks before it.
struct OldSubtasks<'a> {
    restored_parallelism: Option<u16>,
    parallelism: u16,
    txn_prefix: &'a str,
    who: &'a str,
}

/// Subtask 0 ends the transactions of every old subtask beyond this
/// parallelism, then records it; returns the subtasks fenced. Every sink
/// opens before any task runs, so no transaction begins on an id before the
/// record covers it; a crash before the record leaves the old one, and the
/// next start fences again.
fn fence_vanished_subtasks(
    spec: &KafkaSinkSpec,
    producer_config: &ClientConfig,
    marker_config: &ClientConfig,
    old: &OldSubtasks<'_>,
) -> Result<Vec<u16>, String> {
    let (who, t, parallelism) = (old.who, spec.broker_timeout, old.parallelism);
    let group = parallelism_group(old.txn_prefix);
    let record = marker_consumer(marker_config, &group, who, &spec.brokers, t)?;
    let unreadable = |e: KafkaError| format!("{who}: reading the parallelism recorded in group `{group}`: {e}");
    let last = committed_offset(&record, &spec.topic, t).map_err(unreadable)?.min(u16::MAX as u64) as u16;
    let mut fenced = Vec::new();
    for gone in vanished_subtasks(last.max(old.restored_parallelism.unwrap_or(0)), parallelism) {
        let old_id = format!("{}{gone}", old.txn_prefix);
        fence(producer_config, &old_id, t).map_err(|e| format!("{who}: {e}"))?;
        tracing::info!(%who, transactional_id = %old_id, "Fenced the transactional id of a subtask that no longer exists.");
        fenced.push(gone);
    }
    if last != parallelism {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&spec.topic, 0, Offset::Offset(parallelism as i64)).map_err(|e| e.to_string())?;
        record
            .commit(&tpl, rdkafka::consumer::CommitMode::Sync)
            .map_err(|e| format!("{who}: recording the parallelism in group `{group}`: {e}"))?;
    }
    Ok(fenced)
}

impl KafkaSink {
    /// Create the producer; exactly-once: `init_transactions`, which fences
    /// an older producer of this subtask and ends its open transaction, and
    /// (subtask 0) the same for the old subtasks beyond `parallelism`: of
    /// the restored checkpoint (`restored_parallelism`) or of the last start.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        spec: &KafkaSinkSpec,
        pipeline: &str,
        name: &str,
        subtask: u16,
        parallelism: u16,
        restored_parallelism: Option<u16>,
        key: Vec<usize>,
        transaction_timeout: Duration,
        dead_letter: Option<DeadLetter>,
    ) -> Result<Self, String> {
        let who = format!("sink `{name}`[{subtask}]");
        let max_message_bytes = message_max_bytes(&spec.properties)?;
        // In a cluster every instance has its own ids (it fences only its own zombies).
        let txn_prefix = txn_prefix(pipeline, name, spec.instance);
        if let Some(partitions) = spec.repartition {
            super::repartition::ensure_topic(&spec.brokers, &spec.topic, partitions, spec.broker_timeout)
                .map_err(|e| format!("{who}: {e}"))?;
        }
        let txn_id = format!("{txn_prefix}{subtask}");
        let marker_config = marker_config(spec);
        let config = producer_config(spec, &txn_id, transaction_timeout);
        let context = SinkContext { base: WeirContext::new(who.clone(), &spec.brokers, spec.broker_timeout), failed: Mutex::new(None) };
        let producer_config = config.clone();
        let producer: ThreadedProducer<SinkContext> =
            config.create_with_context(context).map_err(|e| format!("creating the Kafka producer: {e}"))?;
        let t = spec.broker_timeout;
        // Fail early and clearly when no broker answers.
        super::fetch_metadata_at_start(producer.client(), Some(&spec.topic), t, &who, &spec.brokers)?;
        let mut fenced = Vec::new();
        let mode = match spec.delivery {
            Delivery::AtLeastOnce => Mode::AtLeastOnce(Acks { checkpointed: false, sent: 0, acked: Vec::new() }),
            Delivery::ExactlyOnce => {
                producer.init_transactions(t).map_err(|e| format!("{who}: init_transactions (transactional.id `{txn_id}`): {e}"))?;
                if subtask == 0 {
                    let old = OldSubtasks { restored_parallelism, parallelism, txn_prefix: &txn_prefix, who: &who };
                    fenced = fence_vanished_subtasks(spec, &producer_config, &marker_config, &old)?;
                }
                let run = crate::run_id::draw();
                let group = marker_group(&txn_id, &Lineage::Run(run.clone()));
                let marker = marker_consumer(&marker_config, &group, &who, &spec.brokers, t)?;
                tracing::debug!(%who, marker_group = %group, "Exactly-once Kafka sink ready.");
                Mode::ExactlyOnce(Box::new(Txn {
                    run,
                    marker,
                    open: false,
                    records: Staging::default(),
                    staged: None,
                    held: Staging::default(),
                }))
            }
        };
        Ok(KafkaSink {
            client: Client { who, topic: spec.topic.clone(), producer, timeout: t, repartition: spec.repartition },
            mode,
            subtask,
            txn_prefix,
            marker_config,
            producer_config,
            key,
            key_buf: Vec::new(),
            fenced,
            parallelism,
            id_parts: (pipeline.to_string(), name.to_string()),
            instance: spec.instance,
            txn_key: txn_key(spec.instance),
            max_message_bytes,
            on_error: spec.on_error.clone(),
            dead_letter,
            producer_id: u32::from(spec.instance.unwrap_or(0)) * u32::from(parallelism) + u32::from(subtask),
            generation: spec.generation,
            written_watermark: MIN_WATERMARK,
            staged_value: Vec::new(),
            batches: Vec::new(),
        })
    }

    /// Tell an at-least-once sink that the pipeline takes checkpoints, so
    /// only records a completed checkpoint covers count as committed.
    pub fn with_checkpoints(mut self, on: bool) -> Self {
        if let Mode::AtLeastOnce(a) = &mut self.mode {
            a.checkpointed = on;
        }
        self
    }

    /// The key of record `r` into `key_buf` (false: no key).
    fn message(&mut self, r: &Record) -> bool {
        let has_key = match self.key.as_slice() {
            [] => false,
            [i] => super::key_bytes(&[&r.fields[*i]], &mut self.key_buf),
            many => super::key_bytes(&many.iter().map(|&i| &r.fields[i]).collect::<Vec<_>>(), &mut self.key_buf),
        };
        has_key
    }

    /// Whether staged transactions keep each message's stamp (WKT4: a cluster's).
    fn stamped(&self) -> bool {
        self.instance.is_some()
    }

    /// A repartition send whose input watermark passed what it last wrote:
    /// one watermark record into every partition of the topic (those its
    /// records never go to too, so that no receiver waits for it).
    fn watermark_records(&mut self, watermark: Millis) -> Vec<Msg> {
        let Some(partitions) = self.client.repartition else { return Vec::new() };
        if watermark <= self.written_watermark {
            return Vec::new();
        }
        self.written_watermark = watermark;
        (0..i32::from(partitions))
            .map(|partition| {
                let stamp = Stamp::Watermark { partition, generation: self.generation, producer: self.producer_id, watermark };
                (None, Box::default(), stamp)
            })
            .collect()
    }

    /// A transaction of subtask `s.origin` was pre-committed in the restored
    /// checkpoint `id`. init_transactions (at open, or here for another
    /// subtask's id) already ended the crashed run's transaction: committed
    /// if its commit had reached the broker, else aborted. If the marker of
    /// the run that staged it says it was not committed, send its records
    /// again and commit them with that run's marker, so a second restore of
    /// the same checkpoint does not send them again.
    fn repair(&mut self, id: u64, s: Staged) -> Result<u64, OpError> {
        let stamped = self.stamped();
        let (c, Mode::ExactlyOnce(txn)) = (&self.client, &mut self.mode) else { return Ok(0) };
        // After a rescale the transaction may be another (old) instance's:
        // its marker group is under that instance's transactional id.
        let own = s.instance == self.instance;
        let origin_id = match own {
            true => format!("{}{}", self.txn_prefix, s.origin),
            false => format!("{}{}", txn_prefix(&self.id_parts.0, &self.id_parts.1, s.instance), s.origin),
        };
        // The id of a live subtask was fenced by that subtask's own
        // init_transactions at open (every sink opens before any restore);
        // fencing it again here would fence the live producer. Another
        // instance's id may be live in the new cluster: never fenced here
        // (docs/scaling.md, "Rescale").
        if own && s.origin != self.subtask && s.origin >= self.parallelism && !self.fenced.contains(&s.origin) {
            // A subtask that no longer exists: end its transaction first, as
            // its own restart would have.
            fence(&self.producer_config, &origin_id, c.timeout).map_err(|e| OpError::Data(format!("{}: {e}", c.who)))?;
            self.fenced.push(s.origin);
        }
        let group = marker_group(&origin_id, &s.lineage);
        let marker = marker_consumer(&self.marker_config, &group, &c.who, "", c.timeout).map_err(OpError::Data)?;
        let committed = c.committed_marker(&marker)?;
        let (origin, staged) = (s.origin, s.id);
        if committed >= staged {
            tracing::info!(who = %c.who, checkpoint = id, origin, staged, committed, marker_group = %group, "Transaction of the restored checkpoint was committed before the crash.");
            return Ok(0);
        }
        let n = records_in(&s.records);
        for (key, value, stamp) in s.records {
            txn.send(c, key.as_deref(), &value, &stamp, stamped)?;
        }
        c.flush()?;
        c.add_marker(&marker, staged)?;
        txn.commit(c)?;
        tracing::warn!(
            who = %c.who,
            checkpoint = id,
            origin,
            staged,
            committed,
            marker_group = %group,
            records = n,
            "Transaction of the restored checkpoint was not committed before the crash: sent again and committed."
        );
        Ok(n)
    }

    /// A repartition send: the records of `batch` for each partition (key
    /// group) in one batch message, in their order (several when they are
    /// many or large), stamped with this producer (stamp.rs). No message
    /// waits for the next batch: a barrier's watermark records come after
    /// every record before it.
    fn process_repartition(&mut self, batch: &[Record], partitions: u16, ctx: &mut Context<'_>) -> OpResult {
        let cap = (self.max_message_bytes / 4).clamp(4 << 10, 256 << 10) as usize;
        let mut writers = std::mem::take(&mut self.batches);
        writers.resize_with(usize::from(partitions), BatchWriter::default);
        let mut result = Ok(());
        for r in batch {
            crate::types::encode_key(&r.fields, &self.key, &mut self.key_buf);
            if let Some(reason) = oversize(Some(&self.key_buf), r.raw.as_bytes(), self.max_message_bytes) {
                let place = format!("topic `{}`", self.client.topic);
                result = reject(&self.on_error, self.dead_letter.as_ref(), (&self.client.who, &place), &r.raw, &reason, ctx.metrics);
                if result.is_err() {
                    break;
                }
                continue;
            }
            let p = crate::types::key_group_of(&self.key_buf, partitions) as usize;
            let w = &mut writers[p];
            if w.records >= BATCH_MAX_RECORDS || (w.records > 0 && w.bytes.len() + BATCH_RECORD_OVERHEAD + r.raw.len() > cap) {
                result = self.send_batch(p, w);
                if result.is_err() {
                    break;
                }
            }
            w.push(r.event_time, r.split_watermark, &r.raw);
        }
        for (p, w) in writers.iter_mut().enumerate().filter(|(_, w)| w.records > 0) {
            if result.is_ok() {
                result = self.send_batch(p, w);
            }
            w.clear();
        }
        self.batches = writers;
        self.show_transactions(ctx.metrics);
        result
    }

    /// The transaction gauges of the metrics endpoint.
    fn show_transactions(&self, metrics: &OperatorMetrics) {
        if let Mode::ExactlyOnce(t) = &self.mode {
            t.show(metrics);
        }
    }

    /// Send one message as the mode says: at least once at once; exactly
    /// once in the open transaction, or held while one waits for its checkpoint.
    fn deliver(&mut self, key: Option<&[u8]>, value: &[u8], stamp: &Stamp) -> OpResult {
        let stamped = self.stamped();
        match &mut self.mode {
            Mode::AtLeastOnce(a) => {
                self.client.send_parts(key, value, stamp)?;
                a.sent += stamp.records();
                Ok(())
            }
            Mode::ExactlyOnce(t) => t.send_or_hold(&self.client, key, value, stamp, stamped),
        }
    }

    /// Send (or hold, while a transaction waits for its checkpoint) the
    /// batch message of `w` to `partition`, and empty `w`.
    fn send_batch(&mut self, partition: usize, w: &mut BatchWriter) -> OpResult {
        let stamp =
            Stamp::Batch { partition: partition as i32, generation: self.generation, producer: self.producer_id, records: w.records };
        self.deliver(None, &w.bytes, &stamp)?;
        w.clear();
        Ok(())
    }
}

/// A consumer of a marker group (it never reads; it answers and carries the
/// group in transactions).
fn marker_consumer(config: &ClientConfig, group: &str, who: &str, brokers: &str, t: Duration) -> Result<BaseConsumer<WeirContext>, String> {
    let mut c = config.clone();
    c.set("group.id", group);
    c.create_with_context(WeirContext::new(format!("{who} marker"), brokers, t)).map_err(|e| format!("creating the marker consumer: {e}"))
}

/// One message of a staged transaction: key (length, or u32::MAX for
/// none), value, and with `stamped` (WKT4) its stamp.
fn encode_msg(out: &mut Vec<u8>, key: Option<&[u8]>, value: &[u8], stamp: &Stamp, stamped: bool) {
    match key {
        Some(k) => out.put_bytes(k),
        None => out.put_u32(u32::MAX),
    }
    out.put_bytes(value);
    if stamped {
        stamp.encode(out);
    }
}

/// `stamped`: each record's stamp after its value (WKT4).
#[cfg(test)]
fn encode_txn(id: u64, records: &[Msg], stamped: bool) -> Vec<u8> {
    let mut out = id.to_be_bytes().to_vec();
    for (k, v, stamp) in records {
        encode_msg(&mut out, k.as_deref(), v, stamp, stamped);
    }
    out
}

/// The state value of a transaction staged by `origin` of `instance` in
/// `run`, into `out`: WKT4 in a cluster (with the records' stamps), else
/// WKT2 as before (an older weir restores it). `messages` are encoded
/// (`encode_msg`) with the stamps iff in a cluster.
fn encode_staged(out: &mut Vec<u8>, origin: u16, instance: Option<u16>, run: &str, id: u64, messages: &[u8]) {
    let run = &run.as_bytes()[..run.len().min(u8::MAX as usize)];
    out.clear();
    out.reserve(4 + 2 + 2 + 1 + run.len() + 8 + messages.len());
    match instance {
        Some(_) => out.extend_from_slice(STAGED_MAGIC_STAMPED),
        None => out.extend_from_slice(STAGED_MAGIC),
    };
    out.put_u16(origin);
    if let Some(i) = instance {
        out.put_u16(i);
    }
    out.put_u8(run.len() as u8);
    out.extend_from_slice(run);
    out.put_u64(id);
    out.extend_from_slice(messages);
}

fn decode_staged(b: &[u8]) -> Result<Staged, String> {
    let bad = |e: DecodeError| format!("malformed staged Kafka transaction in state: {e}");
    // WKT2: origin, run. WKT3 (WKT4 with stamps): origin, instance, run.
    // Older: origin only.
    let stamped = b.starts_with(STAGED_MAGIC_STAMPED);
    let with_instance = b.starts_with(STAGED_MAGIC_INSTANCE) || stamped;
    let with_run = with_instance || b.starts_with(STAGED_MAGIC);
    let mut d = Dec::new(b);
    if with_run {
        d.take(STAGED_MAGIC.len(), "magic").map_err(bad)?;
    }
    let origin = d.u16("origin").map_err(bad)?;
    let instance = match with_instance {
        true => Some(d.u16("instance").map_err(bad)?).filter(|&i| i != NO_INSTANCE),
        false => None,
    };
    let lineage = match with_run {
        true => {
            let len = d.u8("run length").map_err(bad)?;
            let run = d.take(usize::from(len), "run").map_err(bad)?;
            Lineage::Run(String::from_utf8(run.to_vec()).map_err(|_| "malformed staged Kafka transaction in state: the run is not UTF-8")?)
        }
        false => Lineage::Legacy,
    };
    let (id, records) = decode_txn(d.rest(), stamped)?;
    Ok(Staged { origin, instance, lineage, id, records })
}

fn decode_txn(b: &[u8], stamped: bool) -> Result<(u64, Vec<Msg>), String> {
    let mut d = Dec::new(b);
    let id = d.u64("transaction id").map_err(|e| format!("malformed staged Kafka transaction in state: {e}"))?;
    let records = MsgIter::new(d.rest(), stamped)
        .map(|m| m.map(|(k, v, stamp)| (k.map(|k| k.to_vec().into_boxed_slice()), Box::from(v), stamp)))
        .collect::<Result<_, _>>()?;
    Ok((id, records))
}

/// A `Msg` borrowed from a staged transaction.
type MsgRef<'a> = (Option<&'a [u8]>, &'a [u8], Stamp);

/// The messages of a staged transaction (`encode_msg` one after the other),
/// borrowed; an error (and then nothing) where they are malformed.
struct MsgIter<'a> {
    dec: Dec<'a>,
    stamped: bool,
}

impl<'a> MsgIter<'a> {
    fn new(messages: &'a [u8], stamped: bool) -> Self {
        MsgIter { dec: Dec::new(messages), stamped }
    }

    fn next_msg(&mut self) -> Result<MsgRef<'a>, DecodeError> {
        let d = &mut self.dec;
        let key = match d.u32("key length")? {
            u32::MAX => None,
            n => Some(d.take(n as usize, "key")?),
        };
        let value = d.bytes("value")?;
        let stamp = if self.stamped { Stamp::decode(d)? } else { Stamp::None };
        Ok((key, value, stamp))
    }
}

impl<'a> Iterator for MsgIter<'a> {
    type Item = Result<MsgRef<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.dec.is_empty() {
            return None;
        }
        match self.next_msg() {
            Ok(m) => Some(Ok(m)),
            Err(e) => {
                self.dec = Dec::new(&[]);
                Some(Err(format!("malformed staged Kafka transaction in state: {e}")))
            }
        }
    }
}

impl Txn {
    /// The transaction gauges of the metrics endpoint.
    fn show(&self, metrics: &OperatorMetrics) {
        metrics.transactions_open.store(u64::from(self.open), std::sync::atomic::Ordering::Relaxed);
        metrics.transactions_pending.store(u64::from(self.staged.is_some()), std::sync::atomic::Ordering::Relaxed);
    }

    /// Begin a transaction unless one is open.
    fn ensure_open(&mut self, c: &Client) -> OpResult {
        if !self.open {
            c.producer.begin_transaction().map_err(|e| c.txn_err("begin_transaction", e))?;
            self.open = true;
        }
        Ok(())
    }

    /// Send into the open transaction (beginning one if needed) and add it
    /// to the transaction's records.
    fn send(&mut self, c: &Client, key: Option<&[u8]>, value: &[u8], stamp: &Stamp, stamped: bool) -> OpResult {
        self.ensure_open(c)?;
        c.send_parts(key, value, stamp)?;
        self.records.push(key, value, stamp, stamped);
        Ok(())
    }

    /// `send`, or hold the message while a transaction waits for its
    /// checkpoint to complete.
    fn send_or_hold(&mut self, c: &Client, key: Option<&[u8]>, value: &[u8], stamp: &Stamp, stamped: bool) -> OpResult {
        match self.staged {
            Some(_) => {
                self.held.push(key, value, stamp, stamped);
                Ok(())
            }
            None => self.send(c, key, value, stamp, stamped),
        }
    }

    /// Send the messages of `batch` into the open transaction (beginning
    /// one if needed) and add them to its records.
    fn send_staging(&mut self, c: &Client, batch: &Staging, stamped: bool) -> OpResult {
        if batch.is_empty() {
            return Ok(());
        }
        self.ensure_open(c)?;
        for m in MsgIter::new(&batch.bytes, stamped) {
            let (key, value, stamp) = m.map_err(OpError::Data)?;
            c.send_parts(key, value, &stamp)?;
        }
        self.records.append(batch);
        Ok(())
    }

    /// Send what was held into the open transaction.
    fn send_held(&mut self, c: &Client, stamped: bool) -> OpResult {
        let mut held = std::mem::take(&mut self.held);
        let sent = self.send_staging(c, &held, stamped);
        held.clear();
        self.held = held;
        sent
    }

    fn commit(&mut self, c: &Client) -> OpResult {
        faults::get().crash_point("before_sink_commit");
        c.producer.commit_transaction(c.timeout).map_err(|e| c.txn_err("commit_transaction", e))?;
        self.open = false;
        self.records.clear();
        self.staged = None;
        Ok(())
    }
}

impl Client {
    /// Hand one message to the producer, waiting while its queue is full.
    fn send(&self, m: &Msg) -> OpResult {
        self.send_parts(m.0.as_deref(), &m.1, &m.2)
    }

    fn send_parts(&self, key: Option<&[u8]>, value: &[u8], stamp: &Stamp) -> OpResult {
        let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic).payload(value);
        if let Some(k) = key {
            rec = rec.key(k);
            if let Some(partitions) = self.repartition {
                // A single record (as an earlier weir sent them, and a
                // repaired transaction of one): the partition of its key group.
                rec = rec.partition(crate::types::key_group_of(k, partitions) as i32);
            }
        }
        if let Some(partition) = stamp.partition() {
            rec = rec.partition(partition);
        }
        if let Some(h) = stamp.headers() {
            rec = rec.headers(h);
        }
        match self.producer.send(rec) {
            Ok(()) => Ok(()),
            // Backpressure: the background thread drains the queue; with the
            // brokers down that takes up to broker_timeout.
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                crate::blocking::call(|| self.send_when_queue_drains(back))
            }
            Err((e, _)) => Err(self.produce_err(e)),
        }
    }

    fn send_when_queue_drains(&self, mut rec: BaseRecord<'_, [u8], [u8]>) -> OpResult {
        loop {
            self.producer.context().base.check()?;
            std::thread::sleep(Duration::from_millis(1));
            match self.producer.send(rec) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => rec = back,
                Err((e, _)) => return Err(self.produce_err(e)),
            }
        }
    }

    fn produce_err(&self, e: KafkaError) -> OpError {
        OpError::Data(format!("{}: producing to `{}`: {e}", self.who, self.topic))
    }

    /// Wait until every message sent is acknowledged (or failed), for at
    /// most the broker timeout; fail on any delivery error.
    /// A wait is logged when it begins, every [`FLUSH_WAIT_LOG_EVERY`]
    /// while it lasts, and when it ends (a frozen broker keeps its
    /// connections, so librdkafka reports no outage).
    fn flush(&self) -> OpResult {
        let started = Instant::now();
        let deadline = started + self.timeout;
        let mut logged: Option<Instant> = None;
        loop {
            match self.producer.flush(Duration::from_secs(1)) {
                Ok(()) => {
                    if logged.is_some() {
                        let waited_s = format!("{:.1}", started.elapsed().as_secs_f64());
                        tracing::info!(who = %self.who, waited_s, "Kafka flush done: the brokers acknowledged again.");
                    }
                    break;
                }
                Err(e) if Instant::now() < deadline => {
                    if logged.is_none_or(|at| at.elapsed() >= FLUSH_WAIT_LOG_EVERY) {
                        let waited_s = format!("{:.1}", started.elapsed().as_secs_f64());
                        let timeout_s = self.timeout.as_secs();
                        tracing::warn!(who = %self.who, error = %e, waited_s, timeout_s, "Kafka flush is waiting for the brokers (they do not acknowledge; fails at broker_timeout).");
                        logged = Some(Instant::now());
                    }
                    self.producer.context().base.check()?;
                }
                Err(e) => {
                    return Err(OpError::Data(format!(
                        "{}: messages to `{}` not acknowledged within {:?} (broker_timeout): {e}",
                        self.who, self.topic, self.timeout
                    )))
                }
            }
        }
        if let Some(f) = self.producer.context().failed.lock().expect("failed lock").take() {
            let brokers = match f.connectivity {
                true => format!(" (brokers {} not reachable)", self.producer.context().base.brokers),
                false => String::new(),
            };
            return Err(OpError::Data(format!("{}: delivery to `{}` failed{brokers}: {}", self.who, self.topic, f.error)));
        }
        Ok(())
    }

    fn txn_err(&self, what: &str, e: KafkaError) -> OpError {
        OpError::Data(format!("{}: {what}: {e}", self.who))
    }

    /// Add marker `id` of the marker group of `marker` to the open transaction.
    fn add_marker(&self, marker: &BaseConsumer<WeirContext>, id: u64) -> OpResult {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Offset(id as i64)).map_err(|e| self.txn_err("marker", e))?;
        let cgm = marker.group_metadata().ok_or_else(|| OpError::Data(format!("{}: marker consumer has no group metadata", self.who)))?;
        self.producer.send_offsets_to_transaction(&tpl, &cgm, self.timeout).map_err(|e| self.txn_err("send_offsets_to_transaction", e))
    }

    /// The newest checkpoint whose transaction the marker group of
    /// `marker` committed (0: none).
    fn committed_marker(&self, marker: &BaseConsumer<WeirContext>) -> Result<u64, OpError> {
        committed_offset(marker, &self.topic, self.timeout).map_err(|e| self.txn_err("reading the commit marker", e))
    }
}

impl Operator for KafkaSink {
    fn tables(&self) -> Vec<TableSpec> {
        match self.mode {
            Mode::ExactlyOnce(_) => vec![TableSpec { name: "kafka_txn", kind: TableKind::Point }],
            Mode::AtLeastOnce(_) => Vec::new(),
        }
    }

    fn process(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        self.client.producer.context().base.check()?;
        if let Some(partitions) = self.client.repartition {
            return self.process_repartition(&batch, partitions, ctx);
        }
        let stamp = Stamp::None;
        for r in &batch {
            let has_key = self.message(r);
            let key = has_key.then_some(self.key_buf.as_slice());
            if let Some(reason) = oversize(key, r.raw.as_bytes(), self.max_message_bytes) {
                let place = format!("topic `{}`", self.client.topic);
                reject(&self.on_error, self.dead_letter.as_ref(), (&self.client.who, &place), &r.raw, &reason, ctx.metrics)?;
                continue;
            }
            let key = std::mem::take(&mut self.key_buf);
            let sent = self.deliver(has_key.then_some(key.as_slice()), r.raw.as_bytes(), &stamp);
            self.key_buf = key;
            sent?;
        }
        self.show_transactions(ctx.metrics);
        Ok(())
    }

    fn on_checkpoint(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        // At most once per checkpoint, after the records before the barrier.
        let watermarks = self.watermark_records(ctx.watermark);
        let stamped = self.stamped();
        let c = &self.client;
        let t = match &mut self.mode {
            Mode::AtLeastOnce(a) => {
                for m in &watermarks {
                    c.send(m)?;
                }
                c.flush()?;
                // Everything sent so far is acknowledged; it is committed when
                // this checkpoint completes.
                if a.sent > 0 {
                    a.acked.push((id, std::mem::take(&mut a.sent)));
                }
                return Ok(());
            }
            Mode::ExactlyOnce(t) => t,
        };
        // The previous staged transaction was not committed (its checkpoint
        // aborted, or it was a savepoint): extend it.
        t.send_held(c, stamped)?;
        for (key, value, stamp) in &watermarks {
            t.send(c, key.as_deref(), value, stamp, stamped)?;
        }
        let kg = ctx.state.key_groups().start;
        if !t.open {
            ctx.state.delete(TXN, kg, &self.txn_key)?;
            return Ok(());
        }
        c.flush()?;
        c.add_marker(&t.marker, id)?;
        t.staged = Some(id);
        encode_staged(&mut self.staged_value, self.subtask, self.instance, &t.run, id, &t.records.bytes);
        ctx.state.put(TXN, kg, &self.txn_key, &self.staged_value)?;
        self.show_transactions(ctx.metrics);
        Ok(())
    }

    fn on_checkpoint_complete(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        let stamped = self.stamped();
        let c = &self.client;
        let t = match &mut self.mode {
            Mode::AtLeastOnce(a) => {
                // An aborted checkpoint's records are covered by the next one that completes.
                let covered = a.acked.iter().take_while(|(c, _)| *c <= id).count();
                let records: u64 = a.acked.drain(..covered).map(|(_, n)| n).sum();
                OperatorMetrics::add(&ctx.metrics.records_committed, records);
                return Ok(());
            }
            Mode::ExactlyOnce(t) => t,
        };
        if t.staged.is_none_or(|s| s > id) {
            return Ok(());
        }
        let committed = t.records.records;
        t.commit(c)?;
        OperatorMetrics::add(&ctx.metrics.records_committed, committed);
        ctx.state.delete(TXN, ctx.state.key_groups().start, &self.txn_key)?;
        t.send_held(c, stamped)?;
        t.show(ctx.metrics);
        Ok(())
    }

    fn on_restore(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        if let Mode::AtLeastOnce(_) = self.mode {
            return Ok(());
        }
        // A staged transaction is kept at the first key group of the subtask
        // that staged it; after a change of parallelism it may be anywhere
        // in this subtask's range, and of another transactional id; after a
        // rescale of a cluster, several old instances' (one key each).
        for kg in ctx.state.key_groups() {
            let mut found: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            ctx.state.scan_all(TXN, kg, &mut |k, v| {
                found.push((k.to_vec(), v.to_vec()));
                std::ops::ControlFlow::Continue(())
            })?;
            for (key, value) in found {
                let staged = decode_staged(&value).map_err(OpError::Data)?;
                let sent_again = self.repair(id, staged)?;
                OperatorMetrics::add(&ctx.metrics.records_committed, sent_again);
                ctx.state.delete(TXN, kg, &key)?;
            }
        }
        Ok(())
    }

    fn close(&mut self, ctx: &mut Context<'_>) -> OpResult {
        let c = &self.client;
        match &mut self.mode {
            Mode::AtLeastOnce(a) => {
                c.flush()?;
                // With checkpoints, records after the last completed one
                // are sent again by a restore: not committed.
                if !a.checkpointed {
                    OperatorMetrics::add(&ctx.metrics.records_committed, std::mem::take(&mut a.sent));
                }
                Ok(())
            }
            Mode::ExactlyOnce(t) => {
                // Records after the last checkpoint: a restore produces them
                // again. A staged transaction stays for the restore to decide.
                if t.open && t.staged.is_none() {
                    if let Err(e) = c.producer.abort_transaction(c.timeout) {
                        tracing::warn!(who = %c.who, error = %e, "Aborting the open transaction at close failed.");
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn val(text: &str) -> Box<[u8]> {
        text.as_bytes().into()
    }

    #[test]
    fn a_delivery_error_names_the_cause_not_the_purge_that_followed_it() {
        let f = |error: &str, consequence: bool| Failed { error: error.into(), consequence, connectivity: !consequence };
        let mut slot = None;
        f("PurgeQueue (Local: Purged in queue)", true).record(&mut slot);
        f("MessageTimedOut (Local: Message timed out)", false).record(&mut slot);
        f("PurgeQueue (Local: Purged in queue)", true).record(&mut slot);
        f("MsgSizeTooLarge", false).record(&mut slot);
        let kept = slot.expect("an error");
        assert_eq!((kept.error.as_str(), kept.connectivity), ("MessageTimedOut (Local: Message timed out)", true));
    }

    #[test]
    fn oversize_records_are_found_before_sending_and_name_both_sizes() {
        let fits = "x".repeat(1_000_000 - 36);
        assert_eq!(oversize(None, fits.as_bytes(), DEFAULT_MESSAGE_MAX_BYTES), None);
        assert_eq!(
            oversize(Some(b"k"), fits.as_bytes(), DEFAULT_MESSAGE_MAX_BYTES).as_deref(),
            Some("record of 1 000 001 bytes (key, value and 36 bytes of framing) is over the producer's message.max.bytes 1 000 000")
        );
        let big = "x".repeat(1_500_123 - 36);
        assert!(oversize(None, big.as_bytes(), 2_000_000).is_none());
        assert!(oversize(None, big.as_bytes(), DEFAULT_MESSAGE_MAX_BYTES).unwrap().starts_with("record of 1 500 123 bytes"));
    }

    #[test]
    fn message_max_bytes_comes_from_the_properties() {
        let props = |v: &str| vec![("acks".to_string(), "all".to_string()), ("message.max.bytes".to_string(), v.to_string())];
        assert_eq!(message_max_bytes(&[]), Ok(1_000_000));
        assert_eq!(message_max_bytes(&props("2000000")), Ok(2_000_000));
        assert!(message_max_bytes(&props("2MB")).unwrap_err().contains("`2MB`"));
        assert_eq!(
            (group_digits(0), group_digits(999), group_digits(1000), group_digits(1_500_123)),
            ("0".into(), "999".into(), "1 000".into(), "1 500 123".into())
        );
    }

    #[test]
    fn staged_transactions_round_trip() {
        let recs: Vec<Msg> = vec![(Some(b"k".to_vec().into_boxed_slice()), val("{\"a\":1}"), Stamp::None), (None, val("{}"), Stamp::None)];
        let (id, back) = decode_txn(&encode_txn(42, &recs, false), false).unwrap();
        assert_eq!(id, 42);
        assert_eq!(back, recs);
        assert!(decode_txn(&encode_txn(1, &recs, false)[..12], false).is_err());
        // A repartition send's, with the records' stamps and its watermark records.
        let stamped: Vec<Msg> = vec![
            (
                Some(b"k".to_vec().into_boxed_slice()),
                val("{}"),
                Stamp::Record { generation: 77, producer: 4, event_time: Some(10), split_watermark: 3 },
            ),
            (None, val(""), Stamp::Watermark { partition: 2, generation: 77, producer: 4, watermark: 9 }),
        ];
        assert_eq!(decode_txn(&encode_txn(5, &stamped, true), true).unwrap(), (5, stamped.clone()));
        assert!(decode_txn(&encode_txn(5, &stamped, true)[..30], true).is_err(), "a stamp cut short");
        assert_eq!(records_in(&stamped), 1, "watermark records are not records");
        // A batch message (how records are sent now): its binary value and
        // its partition kept, its records counted.
        let mut w = BatchWriter::default();
        w.push(Some(1), 0, "{\"a\":1}");
        w.push(None, -4, "{\"a\":2}");
        let batch: Msg = (None, w.bytes.clone().into_boxed_slice(), Stamp::Batch { partition: 3, generation: 77, producer: 4, records: 2 });
        let with_batch: Vec<Msg> = stamped.iter().cloned().chain([batch]).collect();
        assert_eq!(decode_txn(&encode_txn(6, &with_batch, true), true).unwrap(), (6, with_batch.clone()));
        assert_eq!(records_in(&with_batch), 3);
        assert_eq!(with_batch[2].2.partition(), Some(3), "sent to the partition it was built for");
    }

    #[test]
    fn a_staged_value_cut_anywhere_is_an_error_not_a_panic() {
        let recs: Vec<Msg> = vec![
            (
                Some(b"k".to_vec().into_boxed_slice()),
                val("{\"a\":1}"),
                Stamp::Record { generation: 3, producer: 1, event_time: None, split_watermark: 0 },
            ),
            (None, val("{}"), Stamp::Watermark { partition: 0, generation: 3, producer: 1, watermark: 7 }),
        ];
        let whole = staged_value(2, Some(1), "run-a", 9, &recs);
        let back = decode_staged(&whole).unwrap();
        assert_eq!((back.origin, back.instance, back.id, &back.records), (2, Some(1), 9, &recs));
        // Every cut but those between two whole messages (the value of the
        // first n messages is a prefix of the whole).
        let ends: Vec<usize> = (0..=recs.len()).map(|n| staged_value(2, Some(1), "run-a", 9, &recs[..n]).len()).collect();
        for cut in 0..whole.len() {
            if !ends.contains(&cut) {
                assert!(decode_staged(&whole[..cut]).is_err(), "cut at {cut} of {}", whole.len());
            }
        }
    }

    /// A staged transaction's state value as the sink writes it.
    fn staged_value(origin: u16, instance: Option<u16>, run: &str, id: u64, records: &[Msg]) -> Vec<u8> {
        let mut staging = Staging::default();
        for (k, value, stamp) in records {
            staging.push(k.as_deref(), value, stamp, instance.is_some());
        }
        let mut out = vec![0xAA; 3];
        encode_staged(&mut out, origin, instance, run, id, &staging.bytes);
        out
    }

    #[test]
    fn staging_as_records_are_sent_is_the_staged_format() {
        let recs: Vec<Msg> = vec![
            (
                Some(b"k".to_vec().into_boxed_slice()),
                val("{\"a\":1}"),
                Stamp::Record { generation: 9, producer: 2, event_time: None, split_watermark: 4 },
            ),
            (None, val(""), Stamp::Watermark { partition: 5, generation: 9, producer: 2, watermark: 8 }),
            (
                Some(Vec::new().into_boxed_slice()),
                val("{}"),
                Stamp::Record { generation: 9, producer: 2, event_time: Some(3), split_watermark: 4 },
            ),
        ];
        for stamped in [false, true] {
            // Two batches appended (records held after a barrier, then sent).
            let (mut first, mut second) = (Staging::default(), Staging::default());
            first.push(recs[0].0.as_deref(), &recs[0].1, &recs[0].2, stamped);
            for (k, value, stamp) in &recs[1..] {
                second.push(k.as_deref(), value, stamp, stamped);
            }
            first.append(&second);
            assert_eq!((first.records, first.messages), (2, 3));
            assert_eq!(first.bytes, encode_txn(7, &recs, stamped)[8..], "byte for byte what the whole transaction encodes to");
            let back: Vec<_> = MsgIter::new(&first.bytes, stamped).collect::<Result<_, _>>().unwrap();
            let want: Vec<_> = recs.iter().map(|(k, value, s)| (k.as_deref(), &**value, if stamped { *s } else { Stamp::None })).collect();
            assert_eq!(back, want);
            let mut cut = MsgIter::new(&first.bytes[..first.bytes.len() - 1], stamped);
            assert!(cut.next().unwrap().is_ok() && cut.next().unwrap().is_ok());
            assert!(cut.next().unwrap().is_err(), "the last message cut short");
            assert!(cut.next().is_none(), "nothing after an error");
            first.clear();
            assert!(first.is_empty() && first.bytes.is_empty() && first.records == 0);
        }
    }

    #[test]
    fn staged_transactions_carry_the_run_that_staged_them() {
        let recs: Vec<Msg> = vec![(None, val("{\"a\":1}"), Stamp::None)];
        let v = staged_value(3, None, "00ab", 7, &recs);
        assert!(v.starts_with(STAGED_MAGIC), "outside a cluster, the format an older weir reads");
        let s = decode_staged(&v).unwrap();
        assert_eq!(s, Staged { origin: 3, instance: None, lineage: Lineage::Run("00ab".into()), id: 7, records: recs.clone() });
        // A cluster's: the instance too (a rescale repairs it under that
        // instance's id), and the stamps (WKT4).
        let stamped: Vec<Msg> = vec![(None, val("{}"), Stamp::Record { generation: 3, producer: 1, event_time: None, split_watermark: 0 })];
        let v = staged_value(3, Some(2), "00ab", 7, &stamped);
        assert!(v.starts_with(STAGED_MAGIC_STAMPED));
        let s = decode_staged(&v).unwrap();
        assert_eq!(s, Staged { origin: 3, instance: Some(2), lineage: Lineage::Run("00ab".into()), id: 7, records: stamped.clone() });
        // WKT3, as the release before stamps wrote it.
        let mut v3 = STAGED_MAGIC_INSTANCE.to_vec();
        v3.extend_from_slice(&3u16.to_be_bytes());
        v3.extend_from_slice(&2u16.to_be_bytes());
        v3.extend_from_slice(b"\x0200");
        v3.extend_from_slice(&encode_txn(7, &recs, false));
        let s = decode_staged(&v3).unwrap();
        assert_eq!((s.origin, s.instance, s.records), (3, Some(2), recs.clone()));
        // The format before instances (WKT2).
        let mut v2 = STAGED_MAGIC.to_vec();
        v2.extend_from_slice(&3u16.to_be_bytes());
        v2.extend_from_slice(b"\x0200");
        v2.extend_from_slice(&encode_txn(7, &recs, false));
        let s = decode_staged(&v2).unwrap();
        assert_eq!((s.origin, s.instance, s.lineage, s.id), (3, None, Lineage::Run("00".into()), 7));
        assert!(decode_staged(b"WKT3\0\x01").is_err(), "an instance cut short");
        // The format before runs: origin, then the transaction.
        let mut legacy = 1u16.to_be_bytes().to_vec();
        legacy.extend_from_slice(&encode_txn(5, &recs, false));
        let s = decode_staged(&legacy).unwrap();
        assert_eq!((s.origin, s.lineage, s.id), (1, Lineage::Legacy, 5));
        assert!(decode_staged(b"WKT2\0\x01\x09ab").is_err(), "a run longer than the value");
        assert!(decode_staged(b"").is_err());
    }

    #[test]
    fn marker_groups_of_two_runs_differ() {
        // A fresh state dir reusing the pipeline name starts its checkpoint
        // ids at 1 again: its markers must not land in the old run's group.
        let (a, b) = (crate::run_id::draw(), crate::run_id::draw());
        assert_ne!(a, b);
        let t = "weir-p-out-0";
        assert_ne!(marker_group(t, &Lineage::Run(a.clone())), marker_group(t, &Lineage::Run(b)));
        assert_eq!(marker_group(t, &Lineage::Run(a.clone())), format!("weir-txn-weir-p-out-0-{a}"));
        assert_eq!(marker_group(t, &Lineage::Legacy), "weir-txn-weir-p-out-0");
    }

    #[test]
    fn every_vanished_subtask_is_fenced() {
        assert_eq!(vanished_subtasks(4, 1), 1..4);
        assert_eq!(vanished_subtasks(3, 2), 2..3);
        assert!(vanished_subtasks(2, 4).is_empty(), "a higher parallelism owns every old id");
        assert!(vanished_subtasks(0, 2).is_empty(), "nothing recorded: nothing to fence");
        assert_eq!(parallelism_group("weir-p-out-"), "weir-txn-weir-p-out-parallelism");
    }
}

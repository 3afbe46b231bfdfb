//! What the Kafka source and sink share: client settings, a client context
//! that turns librdkafka's errors and logs into tracing events and keeps
//! track of how long the brokers have been unreachable, and the bound after
//! which an unreachable broker fails the pipeline.
//!
//! librdkafka reconnects by itself (with `reconnect.backoff.ms` growing to
//! `reconnect.backoff.max.ms`); weir only watches: the first error of an
//! outage is logged at WARN, then one line every few seconds while it lasts,
//! and past `broker_timeout` the subtask fails with the last error.

pub mod producers;
pub mod repartition;
pub mod sink;
pub mod source;
pub mod stamp;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::operators::OpError;

/// How often a continuing outage is logged.
const OUTAGE_LOG_EVERY: Duration = Duration::from_secs(5);

/// Client settings: weir's, then the user's `properties` on top.
pub fn client_config(brokers: &str, properties: &[(String, String)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    // librdkafka logs through our context (below), not to stderr.
    c.set_log_level(RDKafkaLogLevel::Warning);
    for (k, v) in properties {
        c.set(k, v);
    }
    c
}

/// The time since the brokers became unreachable, with the last error.
#[derive(Debug, Default)]
struct Outage {
    since: Option<Instant>,
    last_error: String,
    last_logged: Option<Instant>,
    /// The newest failure: an answer soon after it does not end the outage
    /// (one broker answering while another fails is no recovery).
    last_failed: Option<Instant>,
}

/// How long after the last failure an answer ends an outage.
const RECOVERED_AFTER: Duration = Duration::from_secs(1);

/// The client context of every weir Kafka client.
pub struct WeirContext {
    /// `source `name`[i]` or `sink `name`[i]`, for log lines and errors.
    pub who: String,
    pub brokers: String,
    pub broker_timeout: Duration,
    outage: Mutex<Outage>,
    /// Mirrors `outage.since.is_some()` for a lock-free check per message.
    down: AtomicBool,
    /// The newest statistics (with `statistics.interval.ms`), for the metrics endpoint.
    pub stats: std::sync::Arc<crate::connectors::source::ClientStats>,
}

impl WeirContext {
    pub fn new(who: String, brokers: &str, broker_timeout: Duration) -> Self {
        WeirContext {
            who,
            brokers: brokers.to_string(),
            broker_timeout,
            outage: Mutex::default(),
            down: AtomicBool::new(false),
            stats: Default::default(),
        }
    }

    /// Record a failure to reach the brokers (from any client call).
    pub fn broker_failed(&self, error: &str) {
        let mut o = self.outage.lock().expect("outage lock");
        let now = Instant::now();
        let since = *o.since.get_or_insert(now);
        self.down.store(true, Ordering::Relaxed);
        o.last_error = error.to_string();
        o.last_failed = Some(now);
        if o.last_logged.is_none_or(|t| now - t >= OUTAGE_LOG_EVERY) {
            o.last_logged = Some(now);
            tracing::warn!(
                who = %self.who,
                brokers = %self.brokers,
                down_for = ?(now - since),
                gives_up_after = ?self.broker_timeout,
                %error,
                "Kafka brokers unreachable; librdkafka keeps reconnecting with backoff."
            );
        }
    }

    /// The brokers answered: an outage (if any) is over.
    pub fn broker_ok(&self) {
        if !self.down.load(Ordering::Relaxed) {
            return;
        }
        let mut o = self.outage.lock().expect("outage lock");
        if o.last_failed.is_some_and(|t| t.elapsed() < RECOVERED_AFTER) {
            return;
        }
        if let Some(since) = o.since.take() {
            self.down.store(false, Ordering::Relaxed);
            o.last_logged = None;
            tracing::info!(who = %self.who, brokers = %self.brokers, was_down_for = ?since.elapsed(), "Kafka brokers reachable again.");
        }
    }

    /// Whether the brokers are currently considered down.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    /// Fail once the brokers have been unreachable longer than the bound.
    pub fn check(&self) -> Result<(), OpError> {
        let o = self.outage.lock().expect("outage lock");
        match o.since {
            Some(since) if since.elapsed() > self.broker_timeout => Err(OpError::Data(format!(
                "{}: Kafka brokers `{}` unreachable for {:?} (broker_timeout {:?}); last error: {}",
                self.who,
                self.brokers,
                since.elapsed(),
                self.broker_timeout,
                o.last_error
            ))),
            _ => Ok(()),
        }
    }
}

/// The brokers' metadata at start, within `bound` (`broker_timeout`). A
/// first short try is silent; if it gets no answer, the wait says at once
/// what it waits for and for how long, instead of `bound` of silence.
pub fn fetch_metadata_at_start<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: Option<&str>,
    bound: Duration,
    who: &str,
    brokers: &str,
) -> Result<rdkafka::metadata::Metadata, String> {
    let unreachable = |e: KafkaError| format!("cannot reach Kafka brokers `{brokers}` within {bound:?} (broker_timeout): {e}");
    let first = FIRST_METADATA_TRY.min(bound);
    match client.fetch_metadata(topic, first) {
        Ok(m) => Ok(m),
        Err(e) if bound > first && e.rdkafka_error_code().is_none_or(is_connectivity) => {
            let left = bound - first;
            tracing::warn!(%who, %brokers, waited = ?first, gives_up_after = ?left, error = %e, "No answer from the Kafka brokers yet; still waiting.");
            client.fetch_metadata(topic, left).map_err(unreachable)
        }
        Err(e) => Err(unreachable(e)),
    }
}

/// The silent first try of [`fetch_metadata_at_start`].
const FIRST_METADATA_TRY: Duration = Duration::from_secs(2);

/// Errors that mean "cannot reach the brokers" rather than a bad request.
pub fn is_connectivity(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::Resolve
            | RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::RequestTimedOut
            | RDKafkaErrorCode::MessageTimedOut
            | RDKafkaErrorCode::NetworkException
            | RDKafkaErrorCode::CoordinatorNotAvailable
            | RDKafkaErrorCode::NotCoordinator
            | RDKafkaErrorCode::LeaderNotAvailable
            | RDKafkaErrorCode::NotLeaderForPartition
    )
}

impl ClientContext for WeirContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        match level {
            // During a known outage its own lines say it every few seconds;
            // librdkafka's (one per connection attempt) would bury them.
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error if !self.is_down() => {
                tracing::warn!(who = %self.who, facility = fac, "librdkafka: {log_message}")
            }
            _ => tracing::debug!(who = %self.who, facility = fac, "librdkafka: {log_message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        match error.rdkafka_error_code() {
            // The end of a partition: normal, and handled by the source.
            Some(RDKafkaErrorCode::PartitionEOF) => {}
            Some(code) if is_connectivity(code) => self.broker_failed(reason),
            _ => tracing::warn!(who = %self.who, %error, reason, "Kafka client error."),
        }
    }

    /// Kept raw: parsing it is the metrics endpoint's work, at scrape time.
    fn stats_raw(&self, statistics: &[u8]) {
        self.stats.store(statistics);
    }
}

impl ConsumerContext for WeirContext {}

/// The message key of a record from its key fields: one field gives its
/// value (a string as its bytes, anything else as JSON), several a JSON
/// array; a lone null gives no key.
pub fn key_bytes(values: &[&crate::types::Value], out: &mut Vec<u8>) -> bool {
    use crate::types::Value;
    out.clear();
    match values {
        [] | [Value::Null] => false,
        [Value::Str(s)] => {
            out.extend_from_slice(s.as_bytes());
            true
        }
        [v] => {
            v.write_json(out);
            true
        }
        many => {
            out.push(b'[');
            for (i, v) in many.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                v.write_json(out);
            }
            out.push(b']');
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Value;

    #[test]
    fn keys_from_fields() {
        let mut out = Vec::new();
        assert!(key_bytes(&[&Value::Str("u1".into())], &mut out));
        assert_eq!(out, b"u1");
        assert!(key_bytes(&[&Value::Int(7)], &mut out));
        assert_eq!(out, b"7");
        assert!(key_bytes(&[&Value::Str("a".into()), &Value::Int(2)], &mut out));
        assert_eq!(out, b"[\"a\",2]");
        assert!(!key_bytes(&[&Value::Null], &mut out), "a null key is no key");
    }

    #[test]
    fn outage_fails_only_after_the_bound() {
        let cx = WeirContext::new("source `k`[0]".into(), "127.0.0.1:1", Duration::from_millis(50));
        assert!(cx.check().is_ok());
        cx.broker_failed("Connection refused");
        assert!(cx.check().is_ok(), "within the bound");
        std::thread::sleep(Duration::from_millis(80));
        let err = cx.check().unwrap_err().to_string();
        assert!(err.contains("127.0.0.1:1") && err.contains("Connection refused"), "{err}");
        // An answer right after a failure (another broker, a retry) is no recovery.
        cx.broker_ok();
        assert!(cx.is_down() && cx.check().is_err(), "flapping does not end the outage");
        std::thread::sleep(RECOVERED_AFTER + Duration::from_millis(20));
        cx.broker_ok();
        assert!(!cx.is_down() && cx.check().is_ok(), "reachable again");
    }
}

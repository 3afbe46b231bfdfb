//! Repartition topics: the hash edges of a pipeline that runs as several
//! instances (`weir.<pipeline>.<operator>`, see docs/scaling.md).
//!
//! weir creates each topic itself, with one partition per key group, so
//! that a partition is a contiguous (one-element) range of key groups and
//! the instances that own a key-group range own exactly those partitions,
//! whatever the number of instances. An existing topic with another
//! partition count is refused: its records would land at the wrong owner.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;

use super::client_config;

/// Create `topic` with `partitions` partitions unless it exists, and wait
/// (at most `timeout`) until every partition has a leader.
pub fn ensure_topic(brokers: &str, topic: &str, partitions: u16, timeout: Duration) -> Result<(), String> {
    crate::blocking::call(|| ensure_topic_blocking(brokers, topic, partitions, timeout))
}

fn ensure_topic_blocking(brokers: &str, topic: &str, partitions: u16, timeout: Duration) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> =
        client_config(brokers, &[]).create().map_err(|e| format!("creating a Kafka admin client for `{brokers}`: {e}"))?;
    let opts = AdminOptions::new().operation_timeout(Some(timeout)).request_timeout(Some(timeout));
    // The brokers' default replication first; a broker that does not know
    // that default (before Kafka 2.4) gets one replica, said loudly.
    for replication in [-1, 1] {
        let new = NewTopic::new(topic, partitions as i32, TopicReplication::Fixed(replication));
        let results = block_on(admin.create_topics(&[new], &opts)).map_err(|e| format!("creating repartition topic `{topic}`: {e}"))?;
        match results.into_iter().next() {
            Some(Ok(_)) => {
                tracing::info!(%topic, partitions, "Created the repartition topic.");
                break;
            }
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) | None => break,
            Some(Err((_, code))) if replication == -1 => {
                tracing::warn!(%topic, error = %code, "The brokers refused their default replication; creating the repartition topic with one replica.");
            }
            Some(Err((_, code))) => return Err(format!("creating repartition topic `{topic}` on `{brokers}`: {code}")),
        }
    }
    let deadline = Instant::now() + timeout;
    loop {
        let md = admin.inner().fetch_metadata(Some(topic), timeout).map_err(|e| format!("reading the metadata of `{topic}`: {e}"))?;
        let found = md.topics().iter().find(|t| t.name() == topic).map(|t| t.partitions().iter().filter(|p| p.leader() >= 0).count());
        match found {
            Some(n) if n == partitions as usize => return Ok(()),
            Some(n) if n > partitions as usize => {
                return Err(format!(
                    "repartition topic `{topic}` has {n} partitions, but this pipeline needs {partitions} (one per key group, `max_parallelism`): delete the topic or keep `max_parallelism`"
                ))
            }
            found if Instant::now() >= deadline => {
                let n = found.unwrap_or(0);
                return Err(format!(
                    "repartition topic `{topic}` has {n} partitions with a leader after {timeout:?}, but this pipeline needs {partitions} (one per key group, `max_parallelism`)"
                ));
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Drive one future on this thread (the admin client's own thread answers it).
fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

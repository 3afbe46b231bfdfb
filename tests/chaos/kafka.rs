//! The exactly-once Kafka sink in a case, when `KAFKA_BOOTSTRAP` names a
//! broker: a topic of its own per case, read back with `read_committed`.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

/// The broker to use, if the environment names one (CI runs without).
pub fn broker() -> Option<String> {
    std::env::var("KAFKA_BOOTSTRAP").ok().filter(|b| !b.trim().is_empty())
}

fn config(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    c
}

/// A fresh topic for one case's sink.
pub fn create_topic(brokers: &str, seed: u64, partitions: i32) -> Result<String, String> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let name = format!("weir-chaos-{seed}-{}-{nanos}", std::process::id());
    let admin: AdminClient<DefaultClientContext> = config(brokers).create().map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let res = rt.block_on(admin.create_topics(&[NewTopic::new(&name, partitions, TopicReplication::Fixed(1))], &opts));
    for r in res.map_err(|e| e.to_string())? {
        r.map_err(|(t, e)| format!("creating topic {t}: {e}"))?;
    }
    Ok(name)
}

/// Everything a `read_committed` consumer sees in `topic`, to the end of every partition.
pub fn read_committed(brokers: &str, topic: &str, limit: Duration) -> Result<Vec<String>, String> {
    let consumer: BaseConsumer = config(brokers)
        .set("group.id", format!("weir-chaos-reader-{}", std::process::id()))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let partitions = md.topics().first().map(|t| t.partitions().len()).unwrap_or(0) as i32;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).map_err(|e| e.to_string())?;
    }
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let mut at_end = std::collections::HashSet::new();
    let mut out = Vec::new();
    while at_end.len() < partitions as usize {
        if start.elapsed() > limit {
            return Err(format!("reading {topic}: not at the end of every partition after {limit:?}"));
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(_)) | None => {}
        }
    }
    Ok(out)
}

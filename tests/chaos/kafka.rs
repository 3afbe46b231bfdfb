//! Kafka in a case, when `KAFKA_BOOTSTRAP` names a broker: topics of the
//! case's own for the exactly-once sink (read back with `read_committed`)
//! and for a file source's lines read through the Kafka source, and broker
//! outages (the broker process stopped with SIGSTOP, then continued) when
//! `KAFKA_BROKER_DIR` names the data directory of scripts/kafka-broker.sh,
//! and a source topic deleted and recreated between runs.

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
    create_named_topic(brokers, &format!("weir-chaos-{seed}"), partitions)
}

pub fn create_named_topic(brokers: &str, prefix: &str, partitions: i32) -> Result<String, String> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let name = format!("{prefix}-{}-{nanos}", std::process::id());
    let admin: AdminClient<DefaultClientContext> = config(brokers).create().map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let res = rt.block_on(admin.create_topics(&[NewTopic::new(&name, partitions, TopicReplication::Fixed(1))], &opts));
    for r in res.map_err(|e| e.to_string())? {
        r.map_err(|(t, e)| format!("creating topic {t}: {e}"))?;
    }
    Ok(name)
}

/// Delete `topic` and create it again with `partitions` partitions, empty
/// (retrying while the broker still finishes the deletion).
pub fn recreate_topic(brokers: &str, topic: &str, partitions: i32) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = config(brokers).create().map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for r in rt.block_on(admin.delete_topics(&[topic], &opts)).map_err(|e| e.to_string())? {
        r.map_err(|(t, e)| format!("deleting topic {t}: {e}"))?;
    }
    let start = Instant::now();
    loop {
        let res = rt.block_on(admin.create_topics(&[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))], &opts));
        match res.map_err(|e| e.to_string())?.remove(0) {
            Ok(_) => return Ok(()),
            Err(_) if start.elapsed() < Duration::from_secs(20) => std::thread::sleep(Duration::from_millis(100)),
            Err((t, e)) => return Err(format!("creating topic {t} again: {e}")),
        }
    }
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

/// Produce `lines[p]` into partition `p` of `topic`, in order, and wait for
/// every acknowledgement.
pub fn produce(brokers: &str, topic: &str, lines: &[Vec<String>]) -> Result<(), String> {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> =
        config(brokers).set("enable.idempotence", "true").set("linger.ms", "5").create().map_err(|e| e.to_string())?;
    for (p, part) in lines.iter().enumerate() {
        for line in part {
            let mut record = BaseRecord::<(), str>::to(topic).partition(p as i32).payload(line.as_str());
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err((e, _)) => return Err(format!("producing into {topic}: {e}")),
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60)).map_err(|e| format!("flushing into {topic}: {e}"))
}

/// The pid of the broker process, from its data directory's control file.
pub fn broker_pid() -> Option<u32> {
    let dir = std::env::var_os("KAFKA_BROKER_DIR")?;
    let text = std::fs::read_to_string(std::path::Path::new(&dir).join("noida.control.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["pid"].as_u64().map(|p| p as u32)
}

/// A broker outage: the broker process is stopped until this is dropped
/// (so a failing case never leaves it stopped for the next one).
pub struct Outage {
    pid: u32,
}

impl Outage {
    pub fn begin(pid: u32) -> Option<Outage> {
        signal(pid, "STOP").then_some(Outage { pid })
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        signal(self.pid, "CONT");
    }
}

fn signal(pid: u32, sig: &str) -> bool {
    std::process::Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().is_ok_and(|s| s.success())
}

//! One pipeline on several machines: instance I of N (docs/scaling.md).
//!
//! Every instance runs the whole pipeline for its share of the work: every
//! N-th partition of each Kafka source and a contiguous range of the key
//! groups. It checkpoints under its own prefix of the state directory and
//! the checkpoint storage (`instance-I`), and never takes a snapshot with
//! the others. A hash edge, which in one process is a channel, becomes a
//! repartition topic `weir.<pipeline>.<operator>` with one partition per key
//! group: the upstream part of the pipeline ends in a Kafka sink that
//! writes each record to its key group's partition (in the checkpoint's
//! transaction under exactly-once), and the downstream part starts with a
//! Kafka source that reads the partitions of this instance's key groups,
//! `read_committed`, offsets in its checkpoint. So the cross-instance
//! consistency is Kafka's transactions plus each instance's own
//! checkpoints; there is no coordinator between instances.
//!
//! With one instance nothing here changes the pipeline.

use super::{Edge, Plan};
use crate::checkpoint::manifest::Metadata;
use crate::config::{
    Delivery, EventTimeSpec, KafkaSinkSpec, KafkaSourceSpec, KafkaStart, KafkaTopics, Node, NodeKind, OffsetOutOfRange, OnError, Pipeline,
    RepartitionIn, SinkSpec, SourceKind, SourceSpec,
};
use crate::types::key_group_range;

/// The prefix of instance `index` in the state directory and the storage.
pub fn instance_prefix(index: u16) -> String {
    format!("instance-{index}")
}

/// The suffixes of the nodes a hash edge into `x` becomes: `x.repartition.send`
/// (a Kafka sink) and `x.repartition.receive` (a Kafka source).
pub const SEND_SUFFIX: &str = ".repartition.send";
pub const RECEIVE_SUFFIX: &str = ".repartition.receive";

/// The repartition topic of the hash edge into `operator`.
pub fn topic_name(pipeline: &str, operator: &str) -> String {
    format!("weir.{pipeline}.{operator}")
}

/// Lay `pipeline` out as its instance runs it: its own prefix, its
/// identity, and (N > 1) every hash edge through a repartition topic.
/// Unchanged for one instance.
pub fn lay_out(mut p: Pipeline) -> Result<Pipeline, String> {
    if !p.cluster.is_cluster() {
        return Ok(p);
    }
    let (index, instances) = (p.cluster.index, p.cluster.instances);
    if instances > p.max_parallelism {
        return Err(format!(
            "a cluster of {instances} instances needs at least as many key groups: `max_parallelism` is {} (raise it, or run fewer instances)",
            p.max_parallelism
        ));
    }
    let plan = Plan::new(p.clone());
    let hashed: Vec<usize> = (0..p.nodes.len()).filter(|&id| matches!(plan.edges[id], Some(Edge::Hash { .. }))).collect();
    p.cluster.identity = identity(&p, &hashed);
    let prefix = instance_prefix(index);
    p.state.dir = p.state.dir.join(&prefix);
    p.savepoint_dir = p.savepoint_dir.map(|d| d.join(&prefix));
    if let Some(storage) = p.checkpoint.as_mut().and_then(|c| c.storage.as_mut()) {
        storage.url = format!("{}/{prefix}", storage.url.trim_end_matches('/'));
    }
    if !hashed.is_empty() {
        p.nodes = split_hash_edges(&p, &hashed)?;
    }
    Ok(p)
}

/// What every instance must agree on: the pipeline's name, its key-group
/// space and which operators are fed through repartition topics, by what
/// key. Recorded in each instance's checkpoints.
pub fn identity(p: &Pipeline, hashed: &[usize]) -> String {
    let mut text = format!("{}\u{0}{}", p.name, p.max_parallelism);
    for &id in hashed {
        text.push('\u{0}');
        text.push_str(&p.nodes[id].name);
        for k in key_of(&p.nodes[id].kind) {
            text.push('\u{1}');
            text.push_str(k);
        }
    }
    format!("{:016x}", crate::types::stable_hash(text.as_bytes()))
}

/// Where an instance starts from, for its generation.
pub enum Start<'a> {
    Fresh,
    /// One checkpoint or savepoint of this instance (a restart).
    Restored(&'a Metadata),
    /// A savepoint set (a rescale), in any order.
    Set(&'a [&'a Metadata]),
}

/// The cluster generation: what tells the producers of the repartition
/// topics from those of the cluster before a rescale, whose records still
/// wait in the topics under the same producer numbers (docs/scaling.md,
/// "Event time across instances"). Every instance computes it alone from
/// what it starts from, so all instances of one start agree:
///
/// - a fresh start: from the shape (identity, instances, parallelism);
/// - a restart from one of its checkpoints or savepoints: the generation
///   recorded there (0 if written before generations), so a restarted
///   producer is the same producer; if the parallelism changed, its
///   producers are numbered anew: derived from that and the parallelism;
/// - a savepoint set: from every savepoint of the set (old instance, id,
///   creation time, generation) and the new shape, so it changes on every
///   rescale, also into the same number of instances.
///
/// Never 0 but when restored as 0 (checkpoints of a release before it,
/// whose stamps read as 0 too).
pub fn generation(p: &Pipeline, start: Start<'_>) -> u64 {
    let recorded = |md: &Metadata| md.cluster.as_ref().map_or(0, |c| c.generation);
    let shape = format!("{}\u{0}{}\u{0}{}", p.cluster.identity, p.cluster.instances, p.parallelism);
    let text = match start {
        Start::Restored(md) if md.parallelism == p.parallelism => return recorded(md),
        Start::Restored(md) => format!("restored\u{0}{}\u{0}{shape}", recorded(md)),
        Start::Fresh => format!("fresh\u{0}{shape}"),
        Start::Set(set) => {
            let mut old: Vec<String> = set
                .iter()
                .map(|md| {
                    let index = md.cluster.as_ref().map_or(0, |c| c.index);
                    format!("{index}\u{1}{}\u{1}{}\u{1}{}", md.checkpoint_id, md.created_ms, recorded(md))
                })
                .collect();
            old.sort();
            format!("set\u{0}{}\u{0}{shape}", old.join("\u{0}"))
        }
    };
    crate::types::stable_hash(text.as_bytes()).max(1)
}

/// Give every repartition send and receive of `p` its generation.
pub fn set_generation(p: &mut Pipeline, generation: u64) {
    p.cluster.generation = generation;
    for n in &mut p.nodes {
        match &mut n.kind {
            NodeKind::Source(SourceSpec { kind: SourceKind::Kafka(k), .. }) => {
                if let Some(r) = &mut k.repartition {
                    r.generation = generation;
                }
            }
            NodeKind::Sink(SinkSpec::Kafka(k)) if k.repartition.is_some() => k.generation = generation,
            _ => {}
        }
    }
}

fn key_of(kind: &NodeKind) -> &[String] {
    match kind {
        NodeKind::Dedup(d) => &d.key,
        NodeKind::Aggregate(a) => &a.key,
        _ => &[],
    }
}

/// The node list with each hash edge `u → x` replaced by `u → x.repartition.send`
/// (a Kafka sink) and `x.repartition.receive → x` (a Kafka source). Sources
/// stay first, every node after its input.
fn split_hash_edges(p: &Pipeline, hashed: &[usize]) -> Result<Vec<Node>, String> {
    let c = &p.cluster;
    let brokers = c.brokers.clone().ok_or("a cluster with keyed operators needs `cluster.brokers`")?;
    let first_kafka = p.nodes.iter().find_map(|n| match &n.kind {
        NodeKind::Source(SourceSpec { kind: SourceKind::Kafka(k), .. }) => Some(k),
        _ => None,
    });
    let broker_timeout = first_kafka.map_or(std::time::Duration::from_secs(30), |k| k.broker_timeout);
    let delivery = match p.checkpoint.as_ref().map(|c| c.alignment) {
        Some(crate::config::Alignment::AtLeastOnce) | None => Delivery::AtLeastOnce,
        Some(_) => Delivery::ExactlyOnce,
    };
    let send_name = |x: usize| format!("{}{SEND_SUFFIX}", p.nodes[x].name);
    let receive_name = |x: usize| format!("{}{RECEIVE_SUFFIX}", p.nodes[x].name);
    for &x in hashed {
        for name in [send_name(x), receive_name(x)] {
            if p.nodes.iter().any(|n| n.name == name) {
                return Err(format!("the name `{name}` is taken: a cluster needs it for the repartition topic of `{}`", p.nodes[x].name));
            }
        }
    }
    // The source a node's records come from (its on_error applies again
    // where they are read back, and its event time goes on there).
    let root = |mut id: usize| loop {
        match (&p.nodes[id].kind, p.nodes[id].input) {
            (NodeKind::Source(s), _) => return (s.on_error.clone(), s.event_time.clone()),
            (_, Some(up)) => id = up,
            (_, None) => return (OnError::Fail, None),
        }
    };
    // (node, its input by name)
    let mut out: Vec<(Node, Option<String>)> = Vec::new();
    let input_name = |id: usize| p.nodes[id].input.map(|i| p.nodes[i].name.clone());
    for n in p.nodes.iter().filter(|n| matches!(n.kind, NodeKind::Source(_))) {
        out.push((n.clone(), None));
    }
    let topics = Topics { brokers, broker_timeout, delivery };
    for &x in hashed {
        let (on_error, event_time) = root(p.nodes[x].input.expect("a hash edge has an input"));
        let source = topics.receive(p, x, on_error, event_time);
        out.push((Node { name: receive_name(x), input: None, right: None, kind: NodeKind::Source(source) }, None));
    }
    for (id, n) in p.nodes.iter().enumerate() {
        if !matches!(n.kind, NodeKind::Source(_)) {
            let input = if hashed.contains(&id) { Some(receive_name(id)) } else { input_name(id) };
            out.push((n.clone(), input));
        }
        for &x in hashed.iter().filter(|&&x| p.nodes[x].input == Some(id)) {
            let sink = NodeKind::Sink(SinkSpec::Kafka(topics.send(p, x)));
            out.push((Node { name: send_name(x), input: None, right: None, kind: sink }, Some(n.name.clone())));
        }
    }
    let names: Vec<String> = out.iter().map(|(n, _)| n.name.clone()).collect();
    Ok(out
        .into_iter()
        .map(|(mut n, input)| {
            n.input = input.map(|i| names.iter().position(|m| *m == i).expect("inputs come first"));
            n
        })
        .collect())
}

/// What the repartition topics of a cluster share.
struct Topics {
    brokers: String,
    broker_timeout: std::time::Duration,
    delivery: Delivery,
}

impl Topics {
    /// The source reading node `x`'s repartition topic: this instance's key
    /// groups, from every producer of the cluster.
    fn receive(&self, p: &Pipeline, x: usize, on_error: OnError, event_time: Option<EventTimeSpec>) -> SourceSpec {
        let c = &p.cluster;
        let spec = KafkaSourceSpec {
            brokers: self.brokers.clone(),
            topics: KafkaTopics::Names(vec![topic_name(&p.name, &p.nodes[x].name)]),
            start: KafkaStart::Earliest,
            on_offset_out_of_range: OffsetOutOfRange::Fail,
            group_id: None,
            commit_offsets: false,
            key_field: None,
            message_timestamp: false,
            bounded: false,
            broker_timeout: self.broker_timeout,
            properties: Vec::new(),
            instance: (c.index, c.instances),
            repartition: Some(RepartitionIn {
                partitions: p.max_parallelism,
                owned: key_group_range(c.index, c.instances, p.max_parallelism),
                generation: c.generation,
            }),
        };
        // The records carry their event times and the topic its producers'
        // watermarks (connectors/kafka/stamp.rs): no field to read, no
        // lateness of its own; idle producers as the source says.
        let event_time = event_time.map(|e| EventTimeSpec { max_out_of_orderness: std::time::Duration::ZERO, ..e });
        SourceSpec { kind: SourceKind::Kafka(spec), event_time, rate_limit: None, batch_size: None, on_error }
    }

    /// The sink writing node `x`'s input to its repartition topic, by key.
    fn send(&self, p: &Pipeline, x: usize) -> KafkaSinkSpec {
        KafkaSinkSpec {
            brokers: self.brokers.clone(),
            topic: topic_name(&p.name, &p.nodes[x].name),
            key: key_of(&p.nodes[x].kind).to_vec(),
            delivery: self.delivery,
            broker_timeout: self.broker_timeout,
            properties: Vec::new(),
            on_error: OnError::Fail,
            instance: Some(p.cluster.index),
            repartition: Some(p.max_parallelism),
            generation: p.cluster.generation,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::manifest::Document;
    use crate::config::load_str;

    const PIPELINE: &str = r#"
name: p
max_parallelism: 12
state: {dir: st}
checkpoint: {interval: 1s}
cluster: {instances: 3, index: 1}
sources:
  - {name: orders, type: kafka, brokers: "b:9092", topics: [in], broker_timeout: 7s}
operators:
  - {name: unique, type: dedup, input: orders, key: [id]}
  - {name: per_user, type: aggregate, input: unique, key: [user], aggregates: [{fn: sum, field: amount, as: total}]}
sinks:
  - {name: out, type: kafka, input: per_user, brokers: "b:9092", topic: out, key: [user]}
  - {name: raw, type: blackhole, input: orders}
"#;

    fn laid_out(yaml: &str) -> Pipeline {
        lay_out(load_str(yaml, "t.yaml", &[]).expect("valid pipeline")).expect("laid out")
    }

    #[test]
    fn one_instance_is_left_exactly_as_it_was() {
        let yaml = PIPELINE.replace("cluster: {instances: 3, index: 1}\n", "");
        let before = load_str(&yaml, "t.yaml", &[]).unwrap();
        let after = lay_out(before.clone()).unwrap();
        assert_eq!(format!("{before:?}"), format!("{after:?}"));
        assert_eq!(after.cluster_record(), None);
    }

    #[test]
    fn each_hash_edge_becomes_a_repartition_topic_of_the_instance_key_groups() {
        let p = laid_out(PIPELINE);
        let names: Vec<&str> = p.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "orders",
                "unique.repartition.receive",
                "per_user.repartition.receive",
                "unique.repartition.send",
                "unique",
                "per_user.repartition.send",
                "per_user",
                "out",
                "raw"
            ]
        );
        let input = |name: &str| {
            let n = p.nodes.iter().find(|n| n.name == name).unwrap();
            n.input.map(|i| p.nodes[i].name.as_str())
        };
        assert_eq!(input("unique.repartition.send"), Some("orders"));
        assert_eq!(input("unique"), Some("unique.repartition.receive"));
        assert_eq!(input("per_user.repartition.send"), Some("unique"));
        assert_eq!(input("per_user"), Some("per_user.repartition.receive"));
        assert_eq!(input("raw"), Some("orders"), "a forward edge stays in the process");
        let NodeKind::Source(SourceSpec { kind: SourceKind::Kafka(k), .. }) = &p.nodes[1].kind else { panic!() };
        assert_eq!(k.topics, KafkaTopics::Names(vec!["weir.p.unique".into()]));
        // Instance 1 of 3 over 12 key groups: 4..8, one partition each.
        assert_eq!(k.repartition, Some(RepartitionIn { partitions: 12, owned: 4..8, generation: 0 }));
        assert_eq!(k.broker_timeout, std::time::Duration::from_secs(7));
        let NodeKind::Sink(SinkSpec::Kafka(s)) = &p.nodes[3].kind else { panic!() };
        assert_eq!(
            (s.topic.as_str(), s.key.as_slice(), s.repartition, s.instance),
            ("weir.p.unique", &["id".to_string()][..], Some(12), Some(1))
        );
        assert_eq!(s.delivery, Delivery::ExactlyOnce);
        // The user's Kafka source and sink know their instance too.
        let NodeKind::Source(SourceSpec { kind: SourceKind::Kafka(k), .. }) = &p.nodes[0].kind else { panic!() };
        assert_eq!((k.instance, k.repartition.as_ref()), ((1, 3), None));
        assert_eq!(p.state.dir, std::path::Path::new("st/instance-1"));
        // The laid-out pipeline plans: the receive side hashes locally.
        let plan = Plan::new(p.clone());
        assert!(matches!(plan.edges[4], Some(Edge::Hash { .. })));
    }

    #[test]
    fn the_identity_is_shared_by_all_instances_and_changes_with_the_shape() {
        let a = laid_out(PIPELINE).cluster_record().unwrap();
        let b = laid_out(&PIPELINE.replace("index: 1", "index: 2")).cluster_record().unwrap();
        assert_eq!((a.index, b.index, a.instances), (1, 2, 3));
        assert_eq!(a.identity, b.identity);
        let rekeyed = laid_out(&PIPELINE.replace("key: [id]}", "key: [user]}")).cluster_record().unwrap();
        assert_ne!(a.identity, rekeyed.identity);
        let wider = laid_out(&PIPELINE.replace("max_parallelism: 12", "max_parallelism: 24")).cluster_record().unwrap();
        assert_ne!(a.identity, wider.identity);
    }

    #[test]
    fn more_instances_than_key_groups_are_refused() {
        let p = load_str(&PIPELINE.replace("max_parallelism: 12", "max_parallelism: 2"), "t.yaml", &[]).unwrap();
        assert!(lay_out(p).unwrap_err().contains("needs at least as many key groups"));
    }

    #[test]
    fn what_cannot_be_split_between_instances_is_refused_with_its_place() {
        let yaml = PIPELINE
            .replace("topics: [in],", "topics: [in], bounded: true, event_time: {field: ts},")
            .replace("checkpoint: {interval: 1s}\n", "");
        let errors = load_str(&yaml, "t.yaml", &[]).unwrap_err().to_string();
        assert!(errors.contains("t.yaml:5:10: a cluster of 3 instances needs a `checkpoint:` section"), "{errors}");
        assert!(errors.contains("`bounded: true` cannot run in a cluster"), "{errors}");
        assert!(!errors.contains("event_time"), "event time crosses instances: {errors}");
    }

    #[test]
    fn event_time_goes_on_after_each_repartition_topic_from_its_producers_watermarks() {
        let yaml = PIPELINE.replace("topics: [in],", "topics: [in], event_time: {field: ts, max_out_of_orderness: 2s, idle_timeout: 9s},");
        let p = laid_out(&yaml);
        for name in ["unique.repartition.receive", "per_user.repartition.receive"] {
            let n = p.nodes.iter().find(|n| n.name == name).unwrap();
            let NodeKind::Source(s) = &n.kind else { panic!() };
            let e = s.event_time.as_ref().expect("event time downstream of the hand-off");
            // The watermark comes with the topic, as the producers wrote it.
            assert_eq!((e.max_out_of_orderness, e.idle_timeout), (std::time::Duration::ZERO, Some(std::time::Duration::from_secs(9))));
        }
        // Without event time upstream, none after the hand-off either.
        let p = laid_out(PIPELINE);
        let NodeKind::Source(s) = &p.nodes[1].kind else { panic!() };
        assert!(s.event_time.is_none());
    }

    fn savepoint(p: &Pipeline, index: u16, id: u64, generation: u64) -> Metadata {
        let mut md = crate::checkpoint::manifest::tests::metadata(id, vec![0]);
        md.parallelism = p.parallelism;
        md.created_ms += id as i64;
        md.cluster = Some(crate::checkpoint::manifest::ClusterRecord {
            index,
            instances: p.cluster.instances,
            identity: p.cluster.identity.clone(),
            generation,
        });
        md
    }

    #[test]
    fn every_instance_of_one_start_has_one_generation_and_a_rescale_a_new_one() {
        let three: Vec<Pipeline> = (0..3).map(|i| laid_out(&PIPELINE.replace("index: 1", &format!("index: {i}")))).collect();
        let two: Vec<Pipeline> =
            (0..2).map(|i| laid_out(&PIPELINE.replace("instances: 3, index: 1", &format!("instances: 2, index: {i}")))).collect();
        // A fresh start: from the shape, the same for every instance.
        let fresh = generation(&three[0], Start::Fresh);
        assert_ne!(fresh, 0);
        assert!(three.iter().all(|p| generation(p, Start::Fresh) == fresh));
        assert_ne!(generation(&two[0], Start::Fresh), fresh, "another N");
        // A restart keeps what its checkpoint recorded (0: before generations).
        let own = savepoint(&three[1], 1, 40, 0xabc);
        assert_eq!(generation(&three[1], Start::Restored(&own)), 0xabc);
        assert_eq!(generation(&three[1], Start::Restored(&savepoint(&three[1], 1, 40, 0))), 0);
        // ... unless the parallelism changed: new, the same for every instance.
        let wider: Vec<Pipeline> = three
            .iter()
            .map(|p| {
                let mut p = p.clone();
                p.parallelism = 2;
                p
            })
            .collect();
        let g = generation(&wider[0], Start::Restored(&savepoint(&three[0], 0, 41, 0xabc)));
        assert!(g != 0xabc && g != 0);
        assert_eq!(generation(&wider[2], Start::Restored(&savepoint(&three[2], 2, 39, 0xabc))), g);
        // A rescale 3 -> 2 through a set: every new instance agrees, in any order.
        let set: Vec<Metadata> = (0..3).map(|i| savepoint(&three[0], i, 40 + u64::from(i), fresh)).collect();
        let refs: Vec<&Metadata> = set.iter().collect();
        let rescaled = generation(&two[0], Start::Set(&refs));
        let reversed: Vec<&Metadata> = set.iter().rev().collect();
        assert_eq!(generation(&two[1], Start::Set(&reversed)), rescaled);
        assert!(rescaled != fresh && rescaled != generation(&two[0], Start::Fresh) && rescaled != 0);
        // 3 -> 3 through the same set is a new generation too, and another set another one.
        let again = generation(&three[0], Start::Set(&refs));
        assert!(again != fresh && again != rescaled);
        let later: Vec<Metadata> = (0..3).map(|i| savepoint(&three[0], i, 50 + u64::from(i), fresh)).collect();
        assert_ne!(generation(&two[0], Start::Set(&later.iter().collect::<Vec<_>>())), rescaled);
    }

    #[test]
    fn the_generation_reaches_every_repartition_send_and_receive_and_the_checkpoints() {
        let mut p = laid_out(PIPELINE);
        set_generation(&mut p, 0x77);
        let mut seen = 0;
        for n in &p.nodes {
            match &n.kind {
                NodeKind::Source(SourceSpec { kind: SourceKind::Kafka(k), .. }) if n.name.ends_with(".repartition.receive") => {
                    assert_eq!(k.repartition.as_ref().map(|r| r.generation), Some(0x77));
                    seen += 1;
                }
                NodeKind::Sink(SinkSpec::Kafka(k)) if n.name.ends_with(".repartition.send") => {
                    assert_eq!(k.generation, 0x77);
                    seen += 1;
                }
                NodeKind::Sink(SinkSpec::Kafka(k)) => assert_eq!(k.generation, 0, "a user's sink stamps nothing"),
                _ => {}
            }
        }
        assert_eq!(seen, 4, "two topics, each with a send and a receive");
        let record = p.cluster_record().unwrap();
        assert_eq!(record.generation, 0x77);
        // Recorded in `_metadata`, read back; a shape check ignores it.
        let mut md = savepoint(&p, 1, 7, 0x77);
        md.cluster = Some(record.clone());
        let back = Metadata::from_bytes(&md.to_bytes()).unwrap();
        assert_eq!(back.cluster.as_ref(), Some(&record));
        let other = crate::checkpoint::manifest::ClusterRecord { generation: 5, ..record.clone() };
        assert!(other.same_shape(&record) && other != record);
        // Generation 0 is left out, so a document of a release before it reads the same.
        md.cluster.as_mut().unwrap().generation = 0;
        let text = String::from_utf8(md.to_bytes()).unwrap();
        assert!(!text.contains("generation"), "{text}");
        assert_eq!(Metadata::from_bytes(text.as_bytes()).unwrap().cluster.unwrap().generation, 0);
    }
}

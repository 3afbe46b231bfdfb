//! What one task writes for one checkpoint: a single file holding its
//! watermark, its source position (source tasks), the keyed state of each
//! chained operator (by operator name) and, for unaligned checkpoints, the
//! in-flight records of each channel (output the barrier overtook, per
//! output channel; input that arrived before a late barrier, per input
//! channel). Every piece names its owner (operator and subtask, or both ends
//! of a channel), so a restore finds it whatever the chaining.

use std::borrow::Cow;
use std::fmt;

use crate::checkpoint::manifest::TaskId;
use crate::codec::{Dec, DecodeError, Enc};
use crate::types::{Millis, Record};

/// Format 3: channel state per channel (format 2 kept one list per task).
const MAGIC: &[u8; 8] = b"WEIRTSK3";
/// Older formats this build recognises only to refuse them clearly.
const OLD_MAGICS: [&[u8; 8]; 2] = [b"WEIRTSK1", b"WEIRTSK2"];

/// One channel between two operator subtasks: the producer is the last
/// operator of the upstream task, the consumer the first of the downstream
/// one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId {
    pub producer: String,
    pub producer_subtask: u16,
    pub consumer: String,
    pub consumer_subtask: u16,
    /// How the consumer reads the producer: `forward` or `hash(f, …)`.
    pub partitioning: String,
}

impl fmt::Display for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}] → {}[{}] ({})", self.producer, self.producer_subtask, self.consumer, self.consumer_subtask, self.partitioning)
    }
}

/// The in-flight records of one channel.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelState {
    pub channel: ChannelId,
    pub records: Vec<Record>,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct TaskSnapshot {
    pub watermark: Millis,
    /// (source name, its position): matched by name on restore.
    pub source_position: Option<(String, Vec<u8>)>,
    /// (operator name, keyed state in `state::snapshot` form)
    pub operators: Vec<(String, Vec<u8>)>,
    /// Per output channel, records this task had emitted that the barrier
    /// overtook: re-sent on the same channel first on restore.
    pub output_channels: Vec<ChannelState>,
    /// Per input channel, records that arrived before that channel's late
    /// barrier and were processed after the snapshot: replayed through the
    /// chain on restore.
    pub input_channels: Vec<ChannelState>,
}

/// The file name of a task's snapshot inside its bundle directory.
pub fn file_name(task: TaskId) -> String {
    format!("task-{:03}-{:04}.snapshot", task.chain, task.subtask)
}

/// Append `records` to the state of `channel` in `states`.
pub fn record_channel(states: &mut Vec<ChannelState>, channel: &ChannelId, records: impl IntoIterator<Item = Record>) {
    match states.iter_mut().find(|s| s.channel == *channel) {
        Some(s) => s.records.extend(records),
        None => states.push(ChannelState { channel: channel.clone(), records: records.into_iter().collect() }),
    }
}

/// Why `buf` is refused if it is a task snapshot of an older format.
pub fn older_format(buf: &[u8]) -> Option<String> {
    let m = buf.get(..8)?;
    OLD_MAGICS.iter().any(|old| m == *old).then(|| {
        format!(
            "a task snapshot of an older weir (format {}, which kept in-flight records in one list per task); this build reads only {}: restore it with the weir that wrote it, or start without --restore",
            String::from_utf8_lossy(m),
            String::from_utf8_lossy(MAGIC)
        )
    })
}

impl TaskSnapshot {
    pub fn encode(&self) -> Vec<u8> {
        self.encode_measured().0
    }

    /// The encoding, and how many of its bytes are in-flight records
    /// (the channel state, written last).
    pub fn encode_measured(&self) -> (Vec<u8>, usize) {
        let (parts, in_flight) = self.encode_parts();
        (parts.concat(), in_flight)
    }

    /// The encoding in pieces whose concatenation is `encode_measured`'s
    /// bytes, and its in-flight byte count. The operators' state is
    /// borrowed, not copied: a task writing its snapshot file holds its
    /// state once in memory, not twice (dedup over 10 M ids: 170 MB each).
    pub fn encode_parts(&self) -> (Vec<Cow<'_, [u8]>>, usize) {
        let mut parts = Vec::with_capacity(2 * self.operators.len() + 2);
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(MAGIC);
        out.put_i64(self.watermark);
        match &self.source_position {
            Some((name, p)) => {
                out.put_u8(1);
                out.put_str(name);
                out.put_bytes(p);
            }
            None => out.put_u8(0),
        }
        out.put_u16(self.operators.len() as u16);
        for (name, state) in &self.operators {
            out.put_str(name);
            // `put_bytes`, with the bytes as a piece of their own.
            out.put_u32(state.len() as u32);
            parts.push(Cow::Owned(std::mem::take(&mut out)));
            parts.push(Cow::Borrowed(&state[..]));
        }
        let channels_start = out.len();
        for channels in [&self.output_channels, &self.input_channels] {
            out.put_u64(channels.len() as u64);
            for c in channels {
                out.put_str(&c.channel.producer);
                out.put_u16(c.channel.producer_subtask);
                out.put_str(&c.channel.consumer);
                out.put_u16(c.channel.consumer_subtask);
                out.put_str(&c.channel.partitioning);
                out.put_u64(c.records.len() as u64);
                for r in &c.records {
                    out.put_record(r);
                }
            }
        }
        // The two channel counts alone are no in-flight data.
        let in_flight = if self.output_channels.is_empty() && self.input_channels.is_empty() { 0 } else { out.len() - channels_start };
        parts.push(Cow::Owned(out));
        (parts, in_flight)
    }

    pub fn decode(buf: &[u8]) -> Result<TaskSnapshot, DecodeError> {
        if let Some(why) = older_format(buf) {
            return Err(DecodeError(why));
        }
        if buf.get(..8) != Some(MAGIC) {
            return Err(DecodeError("not a weir task snapshot (bad magic)".into()));
        }
        let mut d = Dec::new(&buf[8..]);
        let watermark = d.i64("watermark")?;
        let source_position = match d.u8("position flag")? {
            0 => None,
            _ => Some((d.str("source name")?.to_string(), d.bytes("source position")?.to_vec())),
        };
        let n = d.u16("operator count")?;
        let mut operators = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let name = d.str("operator name")?.to_string();
            operators.push((name, d.bytes("operator state")?.to_vec()));
        }
        let mut lists = [Vec::new(), Vec::new()];
        for list in &mut lists {
            let n = d.u64("channel count")?;
            for _ in 0..n {
                let channel = ChannelId {
                    producer: d.str("producer")?.to_string(),
                    producer_subtask: d.u16("producer subtask")?,
                    consumer: d.str("consumer")?.to_string(),
                    consumer_subtask: d.u16("consumer subtask")?,
                    partitioning: d.str("partitioning")?.to_string(),
                };
                let n = d.u64("record count")?;
                // No capacity from the count: a damaged count must not allocate.
                let mut records = Vec::new();
                for _ in 0..n {
                    records.push(d.record()?);
                }
                list.push(ChannelState { channel, records });
            }
        }
        if !d.is_empty() {
            return Err(DecodeError("trailing bytes after the snapshot".into()));
        }
        let [output_channels, input_channels] = lists;
        Ok(TaskSnapshot { watermark, source_position, operators, output_channels, input_channels })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Value;

    fn channel(consumer: &str, subtask: u16) -> ChannelId {
        ChannelId {
            producer: "gen".into(),
            producer_subtask: 0,
            consumer: consumer.into(),
            consumer_subtask: subtask,
            partitioning: "forward".into(),
        }
    }

    #[test]
    fn round_trips_and_rejects_damage() {
        let r = |i| Record::new(vec![Value::Int(i)], "{}".into(), Some(5));
        let s = TaskSnapshot {
            watermark: 42,
            source_position: Some(("orders".into(), vec![1, 2, 3])),
            operators: vec![("agg".into(), vec![9; 10])],
            output_channels: vec![
                ChannelState { channel: channel("a", 0), records: vec![r(1)] },
                ChannelState { channel: channel("b", 1), records: vec![r(2), r(3)] },
            ],
            input_channels: vec![ChannelState { channel: channel("c", 0), records: vec![r(4)] }],
        };
        let bytes = s.encode();
        assert_eq!(TaskSnapshot::decode(&bytes).unwrap(), s);
        assert!(TaskSnapshot::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(TaskSnapshot::decode(b"nope").is_err());
    }

    #[test]
    fn pieces_concatenate_to_the_encoding_and_count_in_flight_bytes() {
        let r = |i| Record::new(vec![Value::Int(i)], format!("{{\"v\":{i}}}").into_boxed_str(), None);
        let mut s = TaskSnapshot {
            watermark: 5,
            source_position: Some(("src".into(), vec![1, 2])),
            operators: vec![("a".into(), vec![7; 100]), ("b".into(), vec![])],
            output_channels: vec![ChannelState { channel: channel("a", 0), records: vec![r(1), r(2)] }],
            input_channels: vec![],
        };
        let (parts, in_flight) = s.encode_parts();
        let bytes: Vec<u8> = parts.concat();
        assert_eq!(TaskSnapshot::decode(&bytes).unwrap(), s);
        let with = bytes.len();
        s.output_channels.clear();
        let (without, none) = s.encode_measured();
        assert_eq!(none, 0);
        assert_eq!(in_flight, with - without.len() + 16, "the channel part, counts included");
    }

    #[test]
    fn older_formats_are_refused_by_name() {
        let mut old = b"WEIRTSK2".to_vec();
        old.extend_from_slice(&[0; 32]);
        let e = TaskSnapshot::decode(&old).unwrap_err();
        assert!(e.0.contains("older weir") && e.0.contains("WEIRTSK2"), "{e:?}");
    }

    #[test]
    fn channel_state_accumulates_per_channel() {
        let r = |i| Record::new(vec![Value::Int(i)], "{}".into(), None);
        let mut states = Vec::new();
        record_channel(&mut states, &channel("a", 0), [r(1)]);
        record_channel(&mut states, &channel("b", 0), [r(2)]);
        record_channel(&mut states, &channel("a", 0), [r(3)]);
        assert_eq!(states.len(), 2);
        assert_eq!(states[0].records.len(), 2);
        assert_eq!(states[1].records.len(), 1);
    }
}

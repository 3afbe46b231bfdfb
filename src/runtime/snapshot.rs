//! What one task writes for one checkpoint: a single file holding its
//! watermark, its source position (source tasks), the keyed state of each
//! chained operator (by operator name) and, for unaligned checkpoints, the
//! in-flight records (output the barrier overtook; input that arrived
//! before a late barrier).

use crate::checkpoint::manifest::TaskId;
use crate::codec::{Dec, DecodeError, Enc};
use crate::types::{Millis, Record};

const MAGIC: &[u8; 8] = b"WEIRTSK2";

#[derive(Debug, Default, Clone, PartialEq)]
pub struct TaskSnapshot {
    pub watermark: Millis,
    /// (source name, its position): matched by name on restore.
    pub source_position: Option<(String, Vec<u8>)>,
    /// (operator name, keyed state in `state::snapshot` form)
    pub operators: Vec<(String, Vec<u8>)>,
    /// Records this task had emitted that the barrier overtook: re-emitted
    /// first on restore.
    pub output_records: Vec<Record>,
    /// Records that arrived before a late barrier and were processed after
    /// the snapshot: replayed through the chain on restore.
    pub input_records: Vec<Record>,
}

/// The file name of a task's snapshot inside its bundle directory.
pub fn file_name(task: TaskId) -> String {
    format!("task-{:03}-{:04}.snapshot", task.chain, task.subtask)
}

impl TaskSnapshot {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.operators.iter().map(|(_, s)| s.len()).sum::<usize>());
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
            out.put_bytes(state);
        }
        for records in [&self.output_records, &self.input_records] {
            out.put_u64(records.len() as u64);
            for r in records {
                out.put_record(r);
            }
        }
        out
    }

    pub fn decode(buf: &[u8]) -> Result<TaskSnapshot, DecodeError> {
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
            let n = d.u64("record count")?;
            for _ in 0..n {
                list.push(d.record()?);
            }
        }
        if !d.is_empty() {
            return Err(DecodeError("trailing bytes after the snapshot".into()));
        }
        let [output_records, input_records] = lists;
        Ok(TaskSnapshot { watermark, source_position, operators, output_records, input_records })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Value;

    #[test]
    fn round_trips_and_rejects_damage() {
        let s = TaskSnapshot {
            watermark: 42,
            source_position: Some(("orders".into(), vec![1, 2, 3])),
            operators: vec![("agg".into(), vec![9; 10])],
            output_records: vec![Record::new(vec![Value::Int(1)], "{}".into(), Some(5))],
            input_records: vec![],
        };
        let bytes = s.encode();
        assert_eq!(TaskSnapshot::decode(&bytes).unwrap(), s);
        assert!(TaskSnapshot::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(TaskSnapshot::decode(b"nope").is_err());
    }
}

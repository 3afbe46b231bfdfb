//! What a record of a repartition topic carries besides its JSON, in a
//! Kafka header (docs/scaling.md, "Event time across instances").
//!
//! - A data record carries the producer that wrote it (its cluster
//!   generation, and instance × parallelism + send subtask), its event time
//!   and the watermark of the input split it was read from
//!   (`Record::split_watermark`), so that the receiving instance judges
//!   lateness exactly as one process would.
//! - A batch message carries several data records of one producer for one
//!   partition (the records of one input batch that go there, in order):
//!   its header names the producer (and generation) and the number of
//!   records, and its value holds each record's event time, split
//!   watermark and JSON (`BatchWriter`, `BatchReader`). This is how weir
//!   sends them now: the client's work per message (send, delivery report,
//!   fetch, poll, header) is then paid once per batch, not per record.
//!   Messages of one record with a `weir-record` header (above), which an
//!   earlier weir wrote, are still read.
//! - A watermark record (empty value) carries a producer's watermark. Every
//!   send subtask writes one into every partition of the topic when its
//!   watermark advanced, at each checkpoint barrier (in the checkpoint's
//!   transaction under exactly-once), so that `read_committed` readers see
//!   it in order with the data before it. It is never a record downstream.
//!
//! The generation tells the producers of one cluster from those of the
//! cluster before a rescale, which had the same numbers (`plan::cluster::generation`).
//! Headers written before it was added (a byte count without it) read as
//! generation 0.
//!
//! Stamps are part of a staged transaction too (a repaired transaction
//! sends its watermark records again, and its data records with their
//! event times, under the generation that staged them).

use rdkafka::message::{BorrowedHeaders, Header, Headers, OwnedHeaders};

use crate::codec::{Dec, DecodeError, Enc};
use crate::types::Millis;

/// Header of a data record: producer (u32), event-time flag (u8), event
/// time and split watermark (i64), generation (u64), big-endian.
pub const RECORD_HEADER: &str = "weir-record";
/// Header of a watermark record: producer (u32), watermark (i64) and
/// generation (u64).
pub const WATERMARK_HEADER: &str = "weir-watermark";
/// Header of a batch message: producer (u32), generation (u64), records (u32).
pub const BATCH_HEADER: &str = "weir-records";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// A record of a user's topic: no header.
    None,
    Record {
        generation: u64,
        producer: u32,
        event_time: Option<Millis>,
        split_watermark: Millis,
    },
    /// To partition `partition` of the topic.
    Watermark {
        partition: i32,
        generation: u64,
        producer: u32,
        watermark: Millis,
    },
    /// `records` data records in the value (`BatchReader`), to partition
    /// `partition` of the topic.
    Batch {
        partition: i32,
        generation: u64,
        producer: u32,
        records: u32,
    },
}

impl Stamp {
    /// How many data records a message of this stamp holds.
    pub fn records(&self) -> u64 {
        match *self {
            Stamp::None | Stamp::Record { .. } => 1,
            Stamp::Watermark { .. } => 0,
            Stamp::Batch { records, .. } => u64::from(records),
        }
    }

    /// The partition a message of this stamp goes to, if the stamp says.
    pub fn partition(&self) -> Option<i32> {
        match *self {
            Stamp::Watermark { partition, .. } | Stamp::Batch { partition, .. } => Some(partition),
            Stamp::None | Stamp::Record { .. } => None,
        }
    }

    /// The header this stamp is sent with.
    pub fn headers(&self) -> Option<OwnedHeaders> {
        // On the stack: one per record sent.
        let mut v = [0u8; 29];
        let (key, len) = match *self {
            Stamp::None => return None,
            Stamp::Record { generation, producer, event_time, split_watermark } => {
                v[..4].copy_from_slice(&producer.to_be_bytes());
                v[4] = u8::from(event_time.is_some());
                v[5..13].copy_from_slice(&event_time.unwrap_or(0).to_be_bytes());
                v[13..21].copy_from_slice(&split_watermark.to_be_bytes());
                v[21..29].copy_from_slice(&generation.to_be_bytes());
                (RECORD_HEADER, 29)
            }
            Stamp::Watermark { generation, producer, watermark, .. } => {
                v[..4].copy_from_slice(&producer.to_be_bytes());
                v[4..12].copy_from_slice(&watermark.to_be_bytes());
                v[12..20].copy_from_slice(&generation.to_be_bytes());
                (WATERMARK_HEADER, 20)
            }
            Stamp::Batch { generation, producer, records, .. } => {
                v[..4].copy_from_slice(&producer.to_be_bytes());
                v[4..12].copy_from_slice(&generation.to_be_bytes());
                v[12..16].copy_from_slice(&records.to_be_bytes());
                (BATCH_HEADER, 16)
            }
        };
        Some(OwnedHeaders::new_with_capacity(1).insert(Header { key, value: Some(&v[..len]) }))
    }

    /// The stamp of a message read from `partition` (None: no weir header).
    pub fn read(headers: Option<&BorrowedHeaders>, partition: i32) -> Result<Stamp, String> {
        let Some(h) = headers else { return Ok(Stamp::None) };
        for header in h.iter() {
            let value = header.value.unwrap_or_default();
            match header.key {
                RECORD_HEADER => return Self::record(value).ok_or_else(|| bad(RECORD_HEADER, value)),
                WATERMARK_HEADER => return Self::watermark(value, partition).ok_or_else(|| bad(WATERMARK_HEADER, value)),
                BATCH_HEADER => return Self::batch(value, partition).ok_or_else(|| bad(BATCH_HEADER, value)),
                _ => {}
            }
        }
        Ok(Stamp::None)
    }

    /// 29 bytes, or 21 without the generation (written before it: 0).
    fn record(v: &[u8]) -> Option<Stamp> {
        let (v, generation) = split_generation(v, 21)?;
        let mut d = Dec::new(v);
        let producer = d.u32("producer").ok()?;
        let flag = d.u8("event-time flag").ok()?;
        let event_time = d.i64("event time").ok()?;
        let event_time = match flag {
            0 => None,
            1 => Some(event_time),
            _ => return None,
        };
        Some(Stamp::Record { generation, producer, event_time, split_watermark: d.i64("split watermark").ok()? })
    }

    /// 20 bytes, or 12 without the generation (written before it: 0).
    fn watermark(v: &[u8], partition: i32) -> Option<Stamp> {
        let (v, generation) = split_generation(v, 12)?;
        let mut d = Dec::new(v);
        Some(Stamp::Watermark { partition, generation, producer: d.u32("producer").ok()?, watermark: d.i64("watermark").ok()? })
    }

    /// 16 bytes.
    fn batch(v: &[u8], partition: i32) -> Option<Stamp> {
        if v.len() != 16 {
            return None;
        }
        let mut d = Dec::new(v);
        Some(Stamp::Batch {
            partition,
            producer: d.u32("producer").ok()?,
            generation: d.u64("generation").ok()?,
            records: d.u32("records").ok()?,
        })
    }

    /// Append to a staged transaction: a tag, then the fields. Tags 1–3
    /// (no generation) were written before the generation was added.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Stamp::None => out.put_u8(0),
            Stamp::Record { generation, producer, event_time, split_watermark } => {
                out.put_u8(if event_time.is_some() { 5 } else { 4 });
                out.put_u32(producer);
                out.put_i64(event_time.unwrap_or(0));
                out.put_i64(split_watermark);
                out.put_u64(generation);
            }
            Stamp::Watermark { partition, generation, producer, watermark } => {
                out.put_u8(6);
                out.put_u32(partition as u32);
                out.put_u32(producer);
                out.put_i64(watermark);
                out.put_u64(generation);
            }
            Stamp::Batch { partition, generation, producer, records } => {
                out.put_u8(7);
                out.put_u32(partition as u32);
                out.put_u32(producer);
                out.put_u64(generation);
                out.put_u32(records);
            }
        }
    }

    /// Read what `encode` wrote, advancing `d`.
    pub fn decode(d: &mut Dec) -> Result<Stamp, DecodeError> {
        let tag = d.u8("stamp tag")?;
        Self::decode_tagged(tag, d)?.ok_or_else(|| DecodeError(format!("unknown stamp tag {tag}")))
    }

    fn decode_tagged(tag: u8, d: &mut Dec) -> Result<Option<Stamp>, DecodeError> {
        Ok(Some(match tag {
            0 => Stamp::None,
            // 1–3: written before the generation was added (generation 0).
            1 | 2 | 4 | 5 => {
                let producer = d.u32("producer")?;
                let event_time = d.i64("event time")?;
                let split_watermark = d.i64("split watermark")?;
                let generation = if tag >= 4 { d.u64("generation")? } else { 0 };
                Stamp::Record { generation, producer, event_time: matches!(tag, 2 | 5).then_some(event_time), split_watermark }
            }
            3 | 6 => {
                let partition = d.i32("partition")?;
                let producer = d.u32("producer")?;
                let watermark = d.i64("watermark")?;
                let generation = if tag == 6 { d.u64("generation")? } else { 0 };
                Stamp::Watermark { partition, generation, producer, watermark }
            }
            7 => Stamp::Batch {
                partition: d.i32("partition")?,
                producer: d.u32("producer")?,
                generation: d.u64("generation")?,
                records: d.u32("records")?,
            },
            _ => return Ok(None),
        }))
    }
}

/// Bytes of a batch message's value for a record besides its JSON: an
/// event-time flag (u8), event time and split watermark (i64), the JSON's
/// length (u32).
pub const BATCH_RECORD_OVERHEAD: usize = 21;

/// Builds the value of a batch message: record after record.
#[derive(Debug, Default)]
pub struct BatchWriter {
    pub bytes: Vec<u8>,
    pub records: u32,
}

impl BatchWriter {
    pub fn push(&mut self, event_time: Option<Millis>, split_watermark: Millis, json: &str) {
        self.bytes.put_u8(u8::from(event_time.is_some()));
        self.bytes.put_i64(event_time.unwrap_or(0));
        self.bytes.put_i64(split_watermark);
        self.bytes.put_str(json);
        self.records += 1;
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.records = 0;
    }
}

/// The records of a batch message's value: (event time, split watermark,
/// JSON bytes), or an error where it is malformed (then nothing more).
pub struct BatchReader<'a> {
    dec: Dec<'a>,
}

impl<'a> BatchReader<'a> {
    pub fn new(value: &'a [u8]) -> Self {
        BatchReader { dec: Dec::new(value) }
    }

    fn next_record(&mut self) -> Result<(Option<Millis>, Millis, &'a [u8]), DecodeError> {
        let d = &mut self.dec;
        let flag = d.u8("event-time flag")?;
        let event_time = d.i64("event time")?;
        let event_time = match flag {
            0 => None,
            1 => Some(event_time),
            f => return Err(DecodeError(format!("event-time flag {f}"))),
        };
        Ok((event_time, d.i64("split watermark")?, d.bytes("record")?))
    }
}

impl<'a> Iterator for BatchReader<'a> {
    type Item = Result<(Option<Millis>, Millis, &'a [u8]), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.dec.is_empty() {
            return None;
        }
        let n = self.dec.remaining();
        match self.next_record() {
            Ok(r) => Some(Ok(r)),
            Err(e) => {
                self.dec = Dec::new(&[]);
                Some(Err(format!("malformed batch message: {e} ({n} bytes left)")))
            }
        }
    }
}

/// A header value of `old` bytes, or of `old` + 8 with the generation at
/// the end; the value without it, and the generation (0 if absent).
fn split_generation(v: &[u8], old: usize) -> Option<(&[u8], u64)> {
    match v.len() {
        n if n == old => Some((v, 0)),
        n if n == old + 8 => Some((&v[..old], Dec::new(&v[old..]).u64("generation").ok()?)),
        _ => None,
    }
}

fn bad(header: &str, value: &[u8]) -> String {
    format!("malformed `{header}` header of {} bytes (a repartition topic is written by weir only)", value.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAMPS: [Stamp; 7] = [
        Stamp::None,
        Stamp::Record { generation: 0x0123_4567_89ab_cdef, producer: 7, event_time: Some(-3), split_watermark: i64::MIN },
        Stamp::Record { generation: 0, producer: 0, event_time: None, split_watermark: 12 },
        Stamp::Watermark { partition: 11, generation: 9, producer: 5, watermark: 1_700_000_000_000 },
        Stamp::Watermark { partition: 0, generation: u64::MAX, producer: u32::MAX, watermark: i64::MIN },
        Stamp::Batch { partition: 5, generation: 0x0123_4567_89ab_cdef, producer: 3, records: 70_000 },
        Stamp::Batch { partition: 0, generation: 0, producer: u32::MAX, records: 1 },
    ];

    #[test]
    fn stamps_round_trip_in_staged_transactions() {
        let mut out = Vec::new();
        for s in STAMPS {
            s.encode(&mut out);
        }
        out.extend_from_slice(b"rest");
        let mut d = Dec::new(&out);
        for s in STAMPS {
            assert_eq!(Stamp::decode(&mut d).unwrap(), s);
        }
        assert_eq!(d.rest(), b"rest");
        assert!(Stamp::decode(&mut Dec::new(&[9u8])).is_err(), "an unknown tag");
        assert!(Stamp::decode(&mut Dec::new(&[3u8, 0, 0])).is_err(), "cut short");
        assert!(Stamp::decode(&mut Dec::new(&[6u8; 24])).is_err(), "cut short by the generation's last byte");
    }

    #[test]
    fn staged_stamps_written_before_the_generation_read_as_generation_0() {
        // Tags 2 and 3 as the release before generations wrote them.
        let mut old = vec![2u8];
        old.extend_from_slice(&7u32.to_be_bytes());
        old.extend_from_slice(&(-3i64).to_be_bytes());
        old.extend_from_slice(&5i64.to_be_bytes());
        old.push(3);
        old.extend_from_slice(&11i32.to_be_bytes());
        old.extend_from_slice(&5u32.to_be_bytes());
        old.extend_from_slice(&42i64.to_be_bytes());
        let mut d = Dec::new(&old);
        assert_eq!(Stamp::decode(&mut d).unwrap(), Stamp::Record { generation: 0, producer: 7, event_time: Some(-3), split_watermark: 5 });
        assert_eq!(Stamp::decode(&mut d).unwrap(), Stamp::Watermark { partition: 11, generation: 0, producer: 5, watermark: 42 });
        assert!(d.is_empty());
    }

    #[test]
    fn header_values_have_their_fixed_sizes() {
        // What the headers hold, read back as the source reads them.
        let rec = STAMPS[1];
        let Stamp::Record { generation, producer, event_time, split_watermark } = rec else { unreachable!() };
        let mut v = producer.to_be_bytes().to_vec();
        v.push(1);
        v.extend_from_slice(&event_time.unwrap().to_be_bytes());
        v.extend_from_slice(&split_watermark.to_be_bytes());
        // Without the generation (written before it): generation 0.
        assert_eq!(Stamp::record(&v), Some(Stamp::Record { generation: 0, producer, event_time, split_watermark }));
        v.extend_from_slice(&generation.to_be_bytes());
        assert_eq!(Stamp::record(&v), Some(rec));
        assert_eq!(Stamp::record(&v[..28]), None, "neither size");
        assert_eq!(Stamp::record(&v[..20]), None);
        v[4] = 7;
        assert_eq!(Stamp::record(&v), None, "a bad flag");
        let mut w = 5u32.to_be_bytes().to_vec();
        w.extend_from_slice(&42i64.to_be_bytes());
        assert_eq!(Stamp::watermark(&w, 3), Some(Stamp::Watermark { partition: 3, generation: 0, producer: 5, watermark: 42 }));
        w.extend_from_slice(&9u64.to_be_bytes());
        assert_eq!(Stamp::watermark(&w, 3), Some(Stamp::Watermark { partition: 3, generation: 9, producer: 5, watermark: 42 }));
        assert_eq!(Stamp::watermark(&w[..11], 3), None);
        assert_eq!(Stamp::watermark(&w[..19], 3), None);
        assert!(STAMPS[0].headers().is_none());
    }

    #[test]
    fn headers_carry_the_generation() {
        for s in &STAMPS[1..] {
            let h = s.headers().expect("a header");
            let header = h.get(0);
            let value = header.value.expect("a value");
            let back = match (header.key, s) {
                (RECORD_HEADER, _) => Stamp::record(value),
                (WATERMARK_HEADER, Stamp::Watermark { partition, .. }) => Stamp::watermark(value, *partition),
                (BATCH_HEADER, Stamp::Batch { partition, .. }) => Stamp::batch(value, *partition),
                _ => None,
            };
            assert_eq!(back, Some(*s));
        }
    }

    #[test]
    fn batch_values_round_trip_and_refuse_what_is_cut_short() {
        let mut w = BatchWriter::default();
        w.push(Some(-5), i64::MIN, "{\"a\":1}");
        w.push(None, 7, "");
        w.push(Some(1_700_000_000_000), 9, "{\"u\":\"\u{e9}\"}");
        assert_eq!(w.records, 3);
        let back: Vec<_> = BatchReader::new(&w.bytes).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            back,
            vec![
                (Some(-5), i64::MIN, &b"{\"a\":1}"[..]),
                (None, 7, &b""[..]),
                (Some(1_700_000_000_000), 9, "{\"u\":\"\u{e9}\"}".as_bytes())
            ]
        );
        for cut in [1, BATCH_RECORD_OVERHEAD, w.bytes.len() - 1] {
            let got: Vec<_> = BatchReader::new(&w.bytes[..w.bytes.len() - cut]).collect();
            assert!(got.last().unwrap().is_err(), "cut {cut} bytes short");
        }
        let mut bad = w.bytes.clone();
        bad[0] = 2;
        assert!(BatchReader::new(&bad).next().unwrap().is_err(), "a bad event-time flag");
        assert_eq!(BatchReader::new(&[]).count(), 0);
        w.clear();
        assert!(w.bytes.is_empty() && w.records == 0);
        assert_eq!(Stamp::batch(&[0; 15], 1), None, "a batch header of another size");
        assert_eq!((STAMPS[5].records(), STAMPS[3].records(), STAMPS[1].records()), (70_000, 0, 1));
    }
}

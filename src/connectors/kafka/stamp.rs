//! What a record of a repartition topic carries besides its JSON, in a
//! Kafka header (docs/scaling.md, "Event time across instances").
//!
//! - A data record carries the producer that wrote it (instance ×
//!   parallelism + send subtask), its event time and the watermark of the
//!   input split it was read from (`Record::split_watermark`), so that the
//!   receiving instance judges lateness exactly as one process would.
//! - A watermark record (empty value) carries a producer's watermark. Every
//!   send subtask writes one into every partition of the topic when its
//!   watermark advanced, at each checkpoint barrier (in the checkpoint's
//!   transaction under exactly-once), so that `read_committed` readers see
//!   it in order with the data before it. It is never a record downstream.
//!
//! Stamps are part of a staged transaction too (a repaired transaction
//! sends its watermark records again, and its data records with their
//! event times).

use rdkafka::message::{BorrowedHeaders, Header, Headers, OwnedHeaders};

use crate::types::Millis;

/// Header of a data record: producer (u32), event-time flag (u8), event
/// time and split watermark (i64), big-endian.
pub const RECORD_HEADER: &str = "weir-record";
/// Header of a watermark record: producer (u32) and watermark (i64).
pub const WATERMARK_HEADER: &str = "weir-watermark";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// A record of a user's topic: no header.
    None,
    Record {
        producer: u32,
        event_time: Option<Millis>,
        split_watermark: Millis,
    },
    /// To partition `partition` of the topic.
    Watermark {
        partition: i32,
        producer: u32,
        watermark: Millis,
    },
}

impl Stamp {
    /// The header this stamp is sent with.
    pub fn headers(&self) -> Option<OwnedHeaders> {
        let (key, value) = match *self {
            Stamp::None => return None,
            Stamp::Record { producer, event_time, split_watermark } => {
                let mut v = producer.to_be_bytes().to_vec();
                v.push(u8::from(event_time.is_some()));
                v.extend_from_slice(&event_time.unwrap_or(0).to_be_bytes());
                v.extend_from_slice(&split_watermark.to_be_bytes());
                (RECORD_HEADER, v)
            }
            Stamp::Watermark { producer, watermark, .. } => {
                let mut v = producer.to_be_bytes().to_vec();
                v.extend_from_slice(&watermark.to_be_bytes());
                (WATERMARK_HEADER, v)
            }
        };
        Some(OwnedHeaders::new_with_capacity(1).insert(Header { key, value: Some(value.as_slice()) }))
    }

    /// The stamp of a message read from `partition` (None: no weir header).
    pub fn read(headers: Option<&BorrowedHeaders>, partition: i32) -> Result<Stamp, String> {
        let Some(h) = headers else { return Ok(Stamp::None) };
        for header in h.iter() {
            let value = header.value.unwrap_or_default();
            match header.key {
                RECORD_HEADER => return Self::record(value).ok_or_else(|| bad(RECORD_HEADER, value)),
                WATERMARK_HEADER => return Self::watermark(value, partition).ok_or_else(|| bad(WATERMARK_HEADER, value)),
                _ => {}
            }
        }
        Ok(Stamp::None)
    }

    fn record(v: &[u8]) -> Option<Stamp> {
        let v: &[u8; 21] = v.try_into().ok()?;
        let producer = u32::from_be_bytes(v[..4].try_into().ok()?);
        let event_time = i64::from_be_bytes(v[5..13].try_into().ok()?);
        let event_time = match v[4] {
            0 => None,
            1 => Some(event_time),
            _ => return None,
        };
        Some(Stamp::Record { producer, event_time, split_watermark: i64::from_be_bytes(v[13..].try_into().ok()?) })
    }

    fn watermark(v: &[u8], partition: i32) -> Option<Stamp> {
        let v: &[u8; 12] = v.try_into().ok()?;
        let producer = u32::from_be_bytes(v[..4].try_into().ok()?);
        Some(Stamp::Watermark { partition, producer, watermark: i64::from_be_bytes(v[4..].try_into().ok()?) })
    }

    /// Append to a staged transaction: a tag, then the fields.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Stamp::None => out.push(0),
            Stamp::Record { producer, event_time, split_watermark } => {
                out.push(if event_time.is_some() { 2 } else { 1 });
                out.extend_from_slice(&producer.to_be_bytes());
                out.extend_from_slice(&event_time.unwrap_or(0).to_be_bytes());
                out.extend_from_slice(&split_watermark.to_be_bytes());
            }
            Stamp::Watermark { partition, producer, watermark } => {
                out.push(3);
                out.extend_from_slice(&partition.to_be_bytes());
                out.extend_from_slice(&producer.to_be_bytes());
                out.extend_from_slice(&watermark.to_be_bytes());
            }
        }
    }

    /// Read what `encode` wrote at the front of `r`, advancing it.
    pub fn decode(r: &mut &[u8]) -> Option<Stamp> {
        let (&tag, rest) = r.split_first()?;
        let len = match tag {
            0 => 0,
            1 | 2 => 20,
            3 => 16,
            _ => return None,
        };
        let (f, rest) = rest.split_at_checked(len)?;
        *r = rest;
        let u32_at = |i: usize| u32::from_be_bytes(f[i..i + 4].try_into().expect("4 bytes"));
        let i64_at = |i: usize| i64::from_be_bytes(f[i..i + 8].try_into().expect("8 bytes"));
        Some(match tag {
            0 => Stamp::None,
            1 | 2 => Stamp::Record { producer: u32_at(0), event_time: (tag == 2).then(|| i64_at(4)), split_watermark: i64_at(12) },
            _ => Stamp::Watermark { partition: u32_at(0) as i32, producer: u32_at(4), watermark: i64_at(8) },
        })
    }
}

fn bad(header: &str, value: &[u8]) -> String {
    format!("malformed `{header}` header of {} bytes (a repartition topic is written by weir only)", value.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAMPS: [Stamp; 5] = [
        Stamp::None,
        Stamp::Record { producer: 7, event_time: Some(-3), split_watermark: i64::MIN },
        Stamp::Record { producer: 0, event_time: None, split_watermark: 12 },
        Stamp::Watermark { partition: 11, producer: 5, watermark: 1_700_000_000_000 },
        Stamp::Watermark { partition: 0, producer: u32::MAX, watermark: i64::MIN },
    ];

    #[test]
    fn stamps_round_trip_in_staged_transactions() {
        let mut out = Vec::new();
        for s in STAMPS {
            s.encode(&mut out);
        }
        out.extend_from_slice(b"rest");
        let mut r = out.as_slice();
        for s in STAMPS {
            assert_eq!(Stamp::decode(&mut r), Some(s));
        }
        assert_eq!(r, b"rest");
        assert_eq!(Stamp::decode(&mut &[9u8][..]), None, "an unknown tag");
        assert_eq!(Stamp::decode(&mut &[3u8, 0, 0][..]), None, "cut short");
    }

    #[test]
    fn header_values_have_their_fixed_sizes() {
        // What the headers hold, read back as the source reads them.
        let rec = STAMPS[1];
        let Stamp::Record { producer, event_time, split_watermark } = rec else { unreachable!() };
        let mut v = producer.to_be_bytes().to_vec();
        v.push(1);
        v.extend_from_slice(&event_time.unwrap().to_be_bytes());
        v.extend_from_slice(&split_watermark.to_be_bytes());
        assert_eq!(Stamp::record(&v), Some(rec));
        v[4] = 7;
        assert_eq!(Stamp::record(&v), None, "a bad flag");
        assert_eq!(Stamp::record(&v[..20]), None);
        let mut w = 5u32.to_be_bytes().to_vec();
        w.extend_from_slice(&42i64.to_be_bytes());
        assert_eq!(Stamp::watermark(&w, 3), Some(Stamp::Watermark { partition: 3, producer: 5, watermark: 42 }));
        assert_eq!(Stamp::watermark(&w[..11], 3), None);
        assert!(STAMPS[0].headers().is_none());
    }
}

//! A small binary codec for snapshot files: length-prefixed byte strings,
//! fixed-width integers (big-endian) and records. Decoding never panics: a
//! damaged file is an error naming what could not be read.

use crate::types::{Record, Value, MIN_WATERMARK};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt snapshot: {0}")]
pub struct DecodeError(pub String);

/// Appends to a byte buffer.
pub trait Enc {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_i64(&mut self, v: i64) {
        self.put_u64(v as u64);
    }
    fn put_bytes(&mut self, b: &[u8]);
    fn put_str(&mut self, s: &str) {
        self.put_bytes(s.as_bytes());
    }
    fn put_record(&mut self, r: &Record);
}

impl Enc for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_bytes(&mut self, b: &[u8]) {
        self.put_u32(b.len() as u32);
        self.extend_from_slice(b);
    }
    fn put_record(&mut self, r: &Record) {
        self.put_str(&r.raw);
        match r.event_time {
            // Flag 2 adds the split watermark (1, written before it existed, has none).
            Some(t) => {
                self.put_u8(2);
                self.put_i64(t);
                self.put_i64(r.split_watermark);
            }
            None => self.put_u8(0),
        }
        self.put_u16(r.key_group);
        self.put_u32(r.fields.len() as u32);
        for v in &r.fields {
            match v {
                // As read, not as keyed: a float 2.0 stays a float (a sum of
                // it stays a float after a restore), a Decimal keeps its text.
                Value::Float(f) => {
                    self.put_u8(3);
                    self.put_u64(f.to_bits());
                }
                Value::Decimal(d) => {
                    self.put_u8(5);
                    self.put_str(d);
                }
                other => other.encode_key(self),
            }
        }
    }
}

/// Reads what `Enc` wrote.
pub struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes not read yet, as a slice of the input.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| DecodeError(format!("truncated while reading {what} at byte {}", self.pos)))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }
    pub fn u16(&mut self, what: &str) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.take(2, what)?.try_into().expect("2 bytes")))
    }
    pub fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }
    pub fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }
    pub fn i32(&mut self, what: &str) -> Result<i32, DecodeError> {
        Ok(self.u32(what)? as i32)
    }
    pub fn i64(&mut self, what: &str) -> Result<i64, DecodeError> {
        Ok(self.u64(what)? as i64)
    }
    pub fn bytes(&mut self, what: &str) -> Result<&'a [u8], DecodeError> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    pub fn str(&mut self, what: &str) -> Result<&'a str, DecodeError> {
        std::str::from_utf8(self.bytes(what)?).map_err(|_| DecodeError(format!("{what} is not UTF-8")))
    }

    pub fn record(&mut self) -> Result<Record, DecodeError> {
        let raw: Box<str> = self.str("record text")?.into();
        let (event_time, split_watermark) = match self.u8("event time flag")? {
            0 => (None, MIN_WATERMARK),
            1 => (Some(self.i64("event time")?), MIN_WATERMARK),
            _ => (Some(self.i64("event time")?), self.i64("split watermark")?),
        };
        let key_group = self.u16("key group")?;
        let n = self.u32("field count")? as usize;
        let mut fields = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            fields.push(self.value()?);
        }
        let mut r = Record::new(fields, raw, event_time);
        r.key_group = key_group;
        r.split_watermark = split_watermark;
        Ok(r)
    }

    /// A value as `put_record` wrote it (the `Value::encode_key` tags, floats always as bits).
    fn value(&mut self) -> Result<Value, DecodeError> {
        Ok(match self.u8("value tag")? {
            0 => Value::Null,
            1 => Value::Bool(self.u8("bool")? != 0),
            2 => Value::Int(self.i64("int")?),
            3 => Value::Float(f64::from_bits(self.u64("float")?)),
            4 => Value::Str(self.str("string")?.into()),
            5 => Value::Decimal(self.str("decimal")?.into()),
            t => return Err(DecodeError(format!("unknown value tag {t}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let fields = vec![
            Value::Str("a".into()),
            Value::Float(1.5),
            Value::Null,
            Value::Int(-3),
            Value::Float(2.0),
            Value::Decimal("18446744073709551614".into()),
            Value::Decimal("100000000000000000000".into()),
        ];
        let mut r = Record::new(fields, "{}".into(), Some(-7));
        r.key_group = 99;
        // In-flight records keep their split's watermark: their lateness after a restore is what it was.
        r.split_watermark = -20;
        let mut buf = Vec::new();
        buf.put_record(&r);
        buf.put_str("tail");
        let mut d = Dec::new(&buf);
        assert_eq!(d.record().unwrap(), r);
        assert_eq!(d.str("tail").unwrap(), "tail");
        assert!(d.is_empty());
    }

    #[test]
    fn truncation_is_an_error_not_a_panic() {
        let mut buf = Vec::new();
        buf.put_record(&Record::new(vec![Value::Int(1)], "x".into(), None));
        for n in 0..buf.len() {
            assert!(Dec::new(&buf[..n]).record().is_err(), "prefix of {n} bytes");
        }
    }
}

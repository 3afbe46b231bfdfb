//! The stdout sink: one JSON line per record. A closed pipe (`| head`)
//! quietly discards the rest instead of failing the pipeline.

use std::io::{ErrorKind, Write};

use crate::operators::{Context, OpError, OpResult, Operator};
use crate::types::Record;

#[derive(Default)]
pub struct StdoutSink {
    closed: bool,
}

impl Operator for StdoutSink {
    fn process(&mut self, batch: Vec<Record>, _ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        if self.closed {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(batch.iter().map(|r| r.raw.len() + 1).sum());
        for r in &batch {
            buf.extend_from_slice(r.raw.as_bytes());
            buf.push(b'\n');
        }
        match std::io::stdout().lock().write_all(&buf) {
            Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            r => r.map_err(|e| OpError::io("writing to stdout", e)),
        }
    }

    fn close(&mut self, _ctx: &mut Context<'_>) -> OpResult {
        match std::io::stdout().lock().flush() {
            Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(OpError::io("writing to stdout", e)),
            _ => Ok(()),
        }
    }
}

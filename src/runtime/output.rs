//! The output side of a task: routes emitted records to downstream channels,
//! forward (subtask i → i) or hashed by key group, in batches.

use super::channel::{Disconnected, Sender};
use super::message::Message;
use crate::types::{encode_key, key_group_of, subtask_for_key_group, Record};

/// Records per batch on a channel.
pub const BATCH_SIZE: usize = 1024;

pub enum Route {
    Forward { tx: Sender, buf: Vec<Record> },
    Hash { txs: Vec<Sender>, bufs: Vec<Vec<Record>>, key: Vec<usize>, max_parallelism: u16, scratch: Vec<u8> },
}

impl Route {
    pub fn forward(tx: Sender) -> Self {
        Route::Forward { tx, buf: Vec::new() }
    }

    pub fn hash(txs: Vec<Sender>, key: Vec<usize>, max_parallelism: u16) -> Self {
        let bufs = txs.iter().map(|_| Vec::new()).collect();
        Route::Hash { txs, bufs, key, max_parallelism, scratch: Vec::new() }
    }

    fn push(&mut self, mut r: Record) {
        match self {
            Route::Forward { buf, .. } => buf.push(r),
            Route::Hash { txs, bufs, key, max_parallelism, scratch } => {
                encode_key(&r.fields, key, scratch);
                r.key_group = key_group_of(scratch, *max_parallelism);
                let target = subtask_for_key_group(r.key_group, txs.len() as u16, *max_parallelism);
                bufs[target as usize].push(r);
            }
        }
    }

    async fn flush(&mut self) -> Result<(), Disconnected> {
        match self {
            Route::Forward { tx, buf } => send_batches(tx, buf).await,
            Route::Hash { txs, bufs, .. } => {
                for (tx, buf) in txs.iter().zip(bufs.iter_mut()) {
                    send_batches(tx, buf).await?;
                }
                Ok(())
            }
        }
    }

    /// Put `signal` at the head of every channel, ahead of queued and
    /// buffered records; returns those records (they are still delivered,
    /// after the signal).
    fn overtake(&mut self, signal: &impl Fn() -> Message, overtaken: &mut Vec<Record>) -> Result<(), Disconnected> {
        match self {
            Route::Forward { tx, buf } => {
                overtaken.extend(tx.send_overtaking(signal())?);
                overtaken.extend(buf.iter().cloned());
            }
            Route::Hash { txs, bufs, .. } => {
                for (tx, buf) in txs.iter().zip(bufs.iter()) {
                    overtaken.extend(tx.send_overtaking(signal())?);
                    overtaken.extend(buf.iter().cloned());
                }
            }
        }
        Ok(())
    }

    fn senders(&self) -> &[Sender] {
        match self {
            Route::Forward { tx, .. } => std::slice::from_ref(tx),
            Route::Hash { txs, .. } => txs,
        }
    }
}

async fn send_batches(tx: &Sender, buf: &mut Vec<Record>) -> Result<(), Disconnected> {
    while !buf.is_empty() {
        let rest = if buf.len() > BATCH_SIZE { buf.split_off(BATCH_SIZE) } else { Vec::new() };
        let batch = std::mem::replace(buf, rest);
        tx.send(Message::Batch(batch)).await?;
    }
    Ok(())
}

/// All routes leaving a task (a node may feed several consumers).
#[derive(Default)]
pub struct Output {
    routes: Vec<Route>,
}

impl Output {
    pub fn new(routes: Vec<Route>) -> Self {
        Output { routes }
    }

    /// Buffer records for every route (cloned for all but the last).
    pub fn push(&mut self, records: Vec<Record>) {
        let Some((last, rest)) = self.routes.split_last_mut() else { return };
        for route in rest {
            for r in &records {
                route.push(r.clone());
            }
        }
        for r in records {
            last.push(r);
        }
    }

    pub async fn flush(&mut self) -> Result<(), Disconnected> {
        for route in &mut self.routes {
            route.flush().await?;
        }
        Ok(())
    }

    /// Send `signal` ahead of everything not yet received downstream (an
    /// unaligned barrier); returns the records it overtook, which become the
    /// checkpoint's channel state.
    pub fn broadcast_overtaking(&mut self, signal: impl Fn() -> Message) -> Result<Vec<Record>, Disconnected> {
        let mut overtaken = Vec::new();
        for route in &mut self.routes {
            route.overtake(&signal, &mut overtaken)?;
        }
        Ok(overtaken)
    }

    /// Flush, then send a signal on every downstream channel.
    pub async fn broadcast(&mut self, signal: impl Fn() -> Message) -> Result<(), Disconnected> {
        self.flush().await?;
        for route in &self.routes {
            for tx in route.senders() {
                tx.send(signal()).await?;
            }
        }
        Ok(())
    }
}

//! The output side of a task: routes emitted records to downstream channels,
//! forward (subtask i → i) or hashed by key group, in batches. Each channel
//! knows its `ChannelId`, so an unaligned barrier's overtaken records are
//! kept per channel and go back on that channel alone after a restore.

use std::sync::Arc;

use super::channel::{Disconnected, Sender};
use super::gauges::{ChannelProbe, TaskTimes};
use super::message::Message;
use crate::checkpoint::task_snapshot::{ChannelId, ChannelState};
use crate::types::{encode_key, key_group_of, KeyGroupShare, Record};

/// Records per batch on a channel.
pub const BATCH_SIZE: usize = 1024;

pub enum Route {
    Forward {
        tx: Sender,
        buf: Vec<Record>,
        id: ChannelId,
    },
    Hash {
        txs: Vec<Sender>,
        bufs: Vec<Vec<Record>>,
        /// One per channel, by downstream subtask.
        ids: Vec<ChannelId>,
        key: Vec<usize>,
        max_parallelism: u16,
        /// The key groups this process deals to the downstream subtasks.
        share: KeyGroupShare,
        scratch: Vec<u8>,
    },
}

/// A channel of `Output` has no such id (the restore mapped state wrongly).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("in-flight records for channel {0}, which this task does not have")]
pub struct UnknownChannel(pub ChannelId);

impl Route {
    pub fn forward(tx: Sender, id: ChannelId) -> Self {
        Route::Forward { tx, buf: Vec::new(), id }
    }

    /// `txs[j]` and `ids[j]`: the channel to downstream subtask j.
    pub fn hash(txs: Vec<Sender>, ids: Vec<ChannelId>, key: Vec<usize>, max_parallelism: u16, share: KeyGroupShare) -> Self {
        let bufs = txs.iter().map(|_| Vec::new()).collect();
        Route::Hash { txs, bufs, ids, key, max_parallelism, share, scratch: Vec::new() }
    }

    /// The buffer of the channel `id`, if this route has it.
    fn buffer_of(&mut self, id: &ChannelId) -> Option<&mut Vec<Record>> {
        match self {
            Route::Forward { buf, id: own, .. } => (own == id).then_some(buf),
            Route::Hash { bufs, ids, .. } => ids.iter().position(|own| own == id).map(|j| &mut bufs[j]),
        }
    }

    fn push(&mut self, mut r: Record) {
        match self {
            Route::Forward { buf, .. } => buf.push(r),
            Route::Hash { txs, bufs, key, max_parallelism, share, scratch, .. } => {
                encode_key(&r.fields, key, scratch);
                r.key_group = key_group_of(scratch, *max_parallelism);
                let target = share.subtask(r.key_group, txs.len() as u16, *max_parallelism);
                bufs[target as usize].push(r);
            }
        }
    }

    /// `push` every record of `records`, in order. A route to one channel
    /// takes the vector whole (when its buffer is empty, as it is after
    /// each flush) instead of moving record by record.
    fn push_all(&mut self, mut records: Vec<Record>) {
        match self {
            Route::Forward { buf, .. } => append(buf, records),
            Route::Hash { txs, bufs, key, max_parallelism, scratch, .. } if txs.len() == 1 => {
                for r in &mut records {
                    encode_key(&r.fields, key, scratch);
                    r.key_group = key_group_of(scratch, *max_parallelism);
                }
                append(&mut bufs[0], records);
            }
            Route::Hash { bufs, .. } => {
                // Room for about a fair share each, so the buffers do not
                // grow by doubling (and copying) after every flush.
                let fair = records.len() / bufs.len();
                for b in bufs.iter_mut().filter(|b| b.is_empty()) {
                    b.reserve(fair + fair / 4 + 8);
                }
                records.into_iter().for_each(|r| self.push(r))
            }
        }
    }

    async fn flush(&mut self, times: Option<&TaskTimes>) -> Result<(), Disconnected> {
        match self {
            Route::Forward { tx, buf, .. } => send_batches(tx, buf, times).await,
            Route::Hash { txs, bufs, .. } => {
                for (tx, buf) in txs.iter().zip(bufs.iter_mut()) {
                    send_batches(tx, buf, times).await?;
                }
                Ok(())
            }
        }
    }

    /// Put `signal` at the head of every channel, ahead of queued and
    /// buffered records; returns those records per channel (they are still
    /// delivered, after the signal).
    fn overtake(&mut self, signal: &impl Fn() -> Message, overtaken: &mut Vec<ChannelState>) -> Result<(), Disconnected> {
        let mut one = |tx: &Sender, buf: &[Record], id: &ChannelId| -> Result<(), Disconnected> {
            let mut records = tx.send_overtaking(signal())?;
            records.extend(buf.iter().cloned());
            if !records.is_empty() {
                overtaken.push(ChannelState { channel: id.clone(), records });
            }
            Ok(())
        };
        match self {
            Route::Forward { tx, buf, id } => one(tx, buf, id)?,
            Route::Hash { txs, bufs, ids, .. } => {
                for ((tx, buf), id) in txs.iter().zip(bufs.iter()).zip(ids.iter()) {
                    one(tx, buf, id)?;
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

/// Append `records` to `buf`: by taking the vector when `buf` is empty.
fn append(buf: &mut Vec<Record>, mut records: Vec<Record>) {
    if buf.is_empty() {
        *buf = records;
    } else {
        buf.append(&mut records);
    }
}

async fn send_batches(tx: &Sender, buf: &mut Vec<Record>, times: Option<&TaskTimes>) -> Result<(), Disconnected> {
    while !buf.is_empty() {
        let rest = if buf.len() > BATCH_SIZE { buf.split_off(BATCH_SIZE) } else { Vec::new() };
        let batch = std::mem::replace(buf, rest);
        tx.send_measured(Message::Batch(batch), times).await?;
    }
    Ok(())
}

/// All routes leaving a task (a node may feed several consumers).
#[derive(Default)]
pub struct Output {
    routes: Vec<Route>,
    /// Where waits for room on a full channel are counted.
    times: Option<Arc<TaskTimes>>,
}

impl Output {
    pub fn new(routes: Vec<Route>) -> Self {
        Output { routes, times: None }
    }

    /// Count waits for room as backpressured time of the task in `times`.
    pub fn measure(&mut self, times: Arc<TaskTimes>) {
        self.times = Some(times);
    }

    /// A probe of every channel this output writes.
    pub fn probes(&self) -> Vec<ChannelProbe> {
        self.routes.iter().flat_map(|r| r.senders().iter().map(Sender::probe)).collect()
    }

    /// Buffer records for every route (cloned for all but the last).
    pub fn push(&mut self, records: Vec<Record>) {
        let Some((last, rest)) = self.routes.split_last_mut() else { return };
        for route in rest {
            for r in &records {
                route.push(r.clone());
            }
        }
        last.push_all(records);
    }

    pub async fn flush(&mut self) -> Result<(), Disconnected> {
        for route in &mut self.routes {
            route.flush(self.times.as_deref()).await?;
        }
        Ok(())
    }

    /// Put restored in-flight records back on their channels, ahead of
    /// anything emitted later (as they were before the checkpoint). They
    /// keep the key group they were routed by.
    pub fn restore_in_flight(&mut self, channels: Vec<ChannelState>) -> Result<(), UnknownChannel> {
        for state in channels {
            let buf = self.routes.iter_mut().find_map(|r| r.buffer_of(&state.channel)).ok_or(UnknownChannel(state.channel))?;
            buf.extend(state.records);
        }
        Ok(())
    }

    /// Send `signal` ahead of everything not yet received downstream (an
    /// unaligned barrier); returns the records it overtook, per channel,
    /// which become the checkpoint's output channel state.
    pub fn broadcast_overtaking(&mut self, signal: impl Fn() -> Message) -> Result<Vec<ChannelState>, Disconnected> {
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
                tx.send_measured(signal(), self.times.as_deref()).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use super::super::channel::{channel, Receiver};
    use super::*;
    use crate::types::Value;

    fn id(consumer: &str, subtask: u16, partitioning: &str) -> ChannelId {
        ChannelId {
            producer: "gen".into(),
            producer_subtask: 0,
            consumer: consumer.into(),
            consumer_subtask: subtask,
            partitioning: partitioning.into(),
        }
    }

    fn rec(i: i64) -> Record {
        Record::new(vec![Value::Int(i)], i.to_string().into(), None)
    }

    /// Every record queued on `rx` (the payload text of each).
    async fn drain(rx: &mut Receiver) -> Vec<String> {
        let mut got = Vec::new();
        while let Some(m) = rx.recv().await {
            if let Message::Batch(b) = m {
                got.extend(b.iter().map(|r| r.raw.to_string()));
            }
        }
        got
    }

    /// Two consumers (forward and hash over 2 subtasks): what the barrier
    /// overtook is kept per channel, and a restore puts each channel's
    /// records back on that channel alone.
    #[tokio::test]
    async fn overtaken_records_are_kept_and_restored_per_channel() {
        let cap = NonZeroUsize::new(16).unwrap();
        let build = || {
            let (f, frx) = channel(cap);
            let (h0, h0rx) = channel(cap);
            let (h1, h1rx) = channel(cap);
            let ids = vec![id("h", 0, "hash(x)"), id("h", 1, "hash(x)")];
            let out = Output::new(vec![
                Route::forward(f, id("f", 0, "forward")),
                Route::hash(vec![h0, h1], ids, vec![0], 128, KeyGroupShare::WHOLE),
            ]);
            (out, [frx, h0rx, h1rx])
        };
        let (mut out, rxs) = build();
        out.push((0..20).map(rec).collect());
        let overtaken = out.broadcast_overtaking(|| Message::Barrier(1, crate::types::Kind::Checkpoint)).unwrap();
        let total: usize = overtaken.iter().map(|c| c.records.len()).sum();
        assert_eq!(total, 40, "each record once per consumer: {overtaken:?}");
        assert_eq!(overtaken.iter().filter(|c| c.channel.consumer == "f").map(|c| c.records.len()).sum::<usize>(), 20);
        drop(rxs);

        let (mut out, mut rxs) = build();
        out.restore_in_flight(overtaken.clone()).unwrap();
        out.flush().await.unwrap();
        drop(out);
        for (rx, (consumer, subtask)) in rxs.iter_mut().zip([("f", 0), ("h", 0), ("h", 1)]) {
            let want: Vec<String> = overtaken
                .iter()
                .filter(|c| c.channel.consumer == consumer && c.channel.consumer_subtask == subtask)
                .flat_map(|c| c.records.iter().map(|r| r.raw.to_string()))
                .collect();
            assert_eq!(drain(rx).await, want, "channel {consumer}[{subtask}]");
        }

        let (mut out, _rxs) = build();
        let stray = vec![ChannelState { channel: id("gone", 0, "forward"), records: vec![rec(1)] }];
        assert_eq!(out.restore_in_flight(stray), Err(UnknownChannel(id("gone", 0, "forward"))));
    }
}

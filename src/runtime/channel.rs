//! A bounded single-producer, single-consumer channel between two subtasks.
//!
//! Like a tokio mpsc channel (the bound is the backpressure), plus the one
//! thing unaligned checkpoints need: a barrier can overtake the messages
//! already queued, and the records it overtook are handed back so they can
//! be persisted as channel state.

use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::sync::Notify;

use super::gauges::{ChannelProbe, Fill, Phase, TaskTimes};
use super::message::Message;
use crate::types::Record;

struct Queue {
    messages: VecDeque<Message>,
    receiver_waker: Option<Waker>,
    sender_alive: bool,
    receiver_alive: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    capacity: usize,
    /// Signalled when space frees up or the receiver goes away.
    space: Notify,
}

impl Fill for Shared {
    fn fill(&self) -> f64 {
        self.lock().messages.len() as f64 / self.capacity as f64
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct Sender {
    shared: Arc<Shared>,
}

pub struct Receiver {
    shared: Arc<Shared>,
}

/// The receiver is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disconnected;

pub fn channel(capacity: NonZeroUsize) -> (Sender, Receiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            messages: VecDeque::with_capacity(capacity.get()),
            receiver_waker: None,
            sender_alive: true,
            receiver_alive: true,
        }),
        capacity: capacity.get(),
        space: Notify::new(),
    });
    (Sender { shared: shared.clone() }, Receiver { shared })
}

impl Sender {
    /// Queue a message, waiting while the channel is full.
    pub async fn send(&self, msg: Message) -> Result<(), Disconnected> {
        self.send_measured(msg, None).await
    }

    /// [`Sender::send`], counting a wait for room as the task's
    /// backpressured time in `times` (the task is busy again after it).
    pub async fn send_measured(&self, msg: Message, times: Option<&TaskTimes>) -> Result<(), Disconnected> {
        let mut msg = Some(msg);
        let mut waited = false;
        loop {
            let notified = self.shared.space.notified();
            {
                let mut q = self.shared.lock();
                if !q.receiver_alive {
                    return Err(Disconnected);
                }
                if q.messages.len() < self.shared.capacity {
                    q.messages.push_back(msg.take().expect("sent once"));
                    if let Some(w) = q.receiver_waker.take() {
                        w.wake();
                    }
                    drop(q);
                    if let (true, Some(t)) = (waited, times) {
                        t.enter(Phase::Busy);
                    }
                    return Ok(());
                }
            }
            if let (false, Some(t)) = (waited, times) {
                t.enter(Phase::Backpressured);
            }
            waited = true;
            notified.await;
        }
    }

    /// A look at how full this channel is, for the metrics.
    pub fn probe(&self) -> ChannelProbe {
        let shared: Arc<dyn Fill> = self.shared.clone();
        ChannelProbe(Arc::downgrade(&shared))
    }

    /// Put `msg` at the head of the queue, ahead of everything queued, even
    /// when full. Returns the records it overtook, in order.
    pub fn send_overtaking(&self, msg: Message) -> Result<Vec<Record>, Disconnected> {
        let mut q = self.shared.lock();
        if !q.receiver_alive {
            return Err(Disconnected);
        }
        let overtaken = q
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Batch(b) => Some(b.iter().cloned()),
                _ => None,
            })
            .flatten()
            .collect();
        q.messages.push_front(msg);
        if let Some(w) = q.receiver_waker.take() {
            w.wake();
        }
        Ok(overtaken)
    }

    /// Messages waiting in the queue (for backpressure metrics).
    pub fn queued(&self) -> usize {
        self.shared.lock().messages.len()
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let mut q = self.shared.lock();
        q.sender_alive = false;
        if let Some(w) = q.receiver_waker.take() {
            w.wake();
        }
    }
}

impl Receiver {
    /// A look at how full this channel is, for the metrics.
    pub fn probe(&self) -> ChannelProbe {
        let shared: Arc<dyn Fill> = self.shared.clone();
        ChannelProbe(Arc::downgrade(&shared))
    }

    /// The next message; `Ready(None)` once the sender is gone and the
    /// queue is empty.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        let mut q = self.shared.lock();
        if let Some(m) = q.messages.pop_front() {
            drop(q);
            self.shared.space.notify_one();
            return Poll::Ready(Some(m));
        }
        if !q.sender_alive {
            return Poll::Ready(None);
        }
        q.receiver_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    pub async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.shared.lock().receiver_alive = false;
        self.shared.space.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Value;

    fn batch(n: i64) -> Message {
        Message::Batch(vec![Record::new(vec![Value::Int(n)], n.to_string().into(), None)])
    }

    fn cap(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    #[tokio::test]
    async fn delivers_in_order_and_closes() {
        let (tx, mut rx) = channel(cap(2));
        tx.send(batch(1)).await.unwrap();
        tx.send(Message::Watermark(5)).await.unwrap();
        drop(tx);
        assert!(matches!(rx.recv().await, Some(Message::Batch(_))));
        assert!(matches!(rx.recv().await, Some(Message::Watermark(5))));
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn full_channel_waits_for_the_receiver() {
        let (tx, mut rx) = channel(cap(1));
        tx.send(batch(1)).await.unwrap();
        let blocked = tokio::spawn(async move {
            tx.send(batch(2)).await.unwrap();
            tx
        });
        tokio::task::yield_now().await;
        assert!(!blocked.is_finished(), "second send waits for space");
        assert!(rx.recv().await.is_some());
        let _tx = blocked.await.unwrap();
        assert!(rx.recv().await.is_some());
    }

    #[tokio::test]
    async fn overtaking_message_jumps_the_queue_and_returns_overtaken_records() {
        let (tx, mut rx) = channel(cap(2));
        tx.send(batch(1)).await.unwrap();
        tx.send(batch(2)).await.unwrap();
        let overtaken = tx.send_overtaking(Message::Idle).unwrap();
        assert_eq!(overtaken.iter().map(|r| &*r.raw).collect::<Vec<_>>(), ["1", "2"]);
        assert!(matches!(rx.recv().await, Some(Message::Idle)));
        assert!(matches!(rx.recv().await, Some(Message::Batch(b)) if &*b[0].raw == "1"));
    }

    #[tokio::test]
    async fn send_fails_once_the_receiver_is_gone() {
        let (tx, rx) = channel(cap(1));
        tx.send(batch(1)).await.unwrap();
        let pending = tokio::spawn(async move { tx.send(batch(2)).await });
        tokio::task::yield_now().await;
        drop(rx);
        assert_eq!(pending.await.unwrap(), Err(Disconnected));
    }
}

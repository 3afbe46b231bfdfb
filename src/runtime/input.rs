//! The input side of a task: one receiver per upstream subtask, polled
//! fairly. Each channel is a separate input so per-channel signals
//! (watermarks, end of input, later barriers) can be tracked per channel.

use std::future::poll_fn;
use std::task::Poll;

use super::channel::Receiver;
use super::message::Message;
use crate::checkpoint::task_snapshot::ChannelId;

pub struct Inputs {
    rxs: Vec<Receiver>,
    /// What each input is, for its channel state.
    channels: Vec<ChannelId>,
    open: Vec<bool>,
    /// Blocked inputs are not read (barrier alignment).
    blocked: Vec<bool>,
    next: usize,
    /// A join's task: the producer of its right input's channels.
    right: Option<String>,
}

/// One event from the inputs.
pub enum InputEvent {
    Message(usize, Message),
    /// Channel `i` closed: its sender is gone.
    Closed(usize),
}

impl Inputs {
    pub fn new(inputs: Vec<(Receiver, ChannelId)>) -> Self {
        let (rxs, channels): (Vec<Receiver>, Vec<ChannelId>) = inputs.into_iter().unzip();
        let open = vec![true; rxs.len()];
        let blocked = vec![false; rxs.len()];
        Inputs { rxs, channels, open, blocked, next: 0, right: None }
    }

    /// The channels from `producer` are a join's right input (side 1).
    pub fn with_right(mut self, producer: Option<String>) -> Self {
        self.right = producer;
        self
    }

    /// Which input of the task's head channel `i` feeds: 0, or 1 for a
    /// join's right input.
    pub fn side(&self, i: usize) -> usize {
        self.channels.get(i).map_or(0, |c| self.side_of(c))
    }

    /// `side` of a channel, as a checkpoint names it.
    pub fn side_of(&self, channel: &ChannelId) -> usize {
        usize::from(self.right.as_deref() == Some(channel.producer.as_str()))
    }

    /// The channel input `i` reads.
    pub fn channel(&self, i: usize) -> Option<&ChannelId> {
        self.channels.get(i)
    }

    pub fn block(&mut self, input: usize) {
        self.blocked[input] = true;
    }

    pub fn unblock_all(&mut self) {
        self.blocked.iter_mut().for_each(|b| *b = false);
    }

    /// A probe of every channel read here.
    pub fn probes(&self) -> Vec<super::gauges::ChannelProbe> {
        self.rxs.iter().map(Receiver::probe).collect()
    }

    pub fn len(&self) -> usize {
        self.rxs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rxs.is_empty()
    }

    /// The next message from any open, unblocked input, round-robin; None
    /// once every input is closed.
    pub async fn recv(&mut self) -> Option<InputEvent> {
        poll_fn(|cx| {
            let n = self.rxs.len();
            if !self.open.iter().any(|o| *o) {
                return Poll::Ready(None);
            }
            for k in 0..n {
                let i = (self.next + k) % n;
                if !self.open[i] || self.blocked[i] {
                    continue;
                }
                match self.rxs[i].poll_recv(cx) {
                    Poll::Ready(Some(m)) => {
                        self.next = (i + 1) % n;
                        return Poll::Ready(Some(InputEvent::Message(i, m)));
                    }
                    Poll::Ready(None) => {
                        self.open[i] = false;
                        return Poll::Ready(Some(InputEvent::Closed(i)));
                    }
                    Poll::Pending => {}
                }
            }
            Poll::Pending
        })
        .await
    }
}

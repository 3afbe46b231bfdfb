//! The two task loops: a source task (polls a source, stamps watermarks)
//! and an operator task (reads its input channels). Both run a chain and
//! send what it emits downstream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::chain::{Chain, TaskError};
use super::input::{InputEvent, Inputs};
use super::message::Message;
use super::output::{Output, BATCH_SIZE};
use super::watermark::{WatermarkChange, WatermarkTracker};
use crate::operators::source::{Source, SourcePoll};
use crate::operators::{OperatorMetrics, SubtaskInfo};
use crate::types::{Millis, MAX_WATERMARK, MIN_WATERMARK};

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEnd {
    /// All input was consumed.
    Finished,
    /// Stopped by a signal or because a neighbour went away.
    Stopped,
}

pub type TaskResult = Result<TaskEnd, TaskError>;

/// Event-time settings of a source subtask.
#[derive(Debug, Clone)]
pub struct SourceTiming {
    /// Records per second for this subtask.
    pub rate_limit: Option<f64>,
    /// Watermark = max event time - this - 1 (None: no event time).
    pub max_out_of_orderness: Option<Millis>,
    pub idle_timeout: Option<Duration>,
}

pub struct SourceTask {
    pub source: Box<dyn Source>,
    pub info: SubtaskInfo,
    pub metrics: Arc<OperatorMetrics>,
    pub timing: SourceTiming,
    pub chain: Chain,
    pub output: Output,
    pub stop: watch::Receiver<bool>,
}

impl SourceTask {
    pub async fn run(mut self) -> TaskResult {
        let batch_size = match self.timing.rate_limit {
            // Small batches keep a throttled stream smooth (about 20 a second).
            Some(rate) => ((rate / 20.0) as usize).clamp(1, BATCH_SIZE),
            None => BATCH_SIZE,
        };
        let started = Instant::now();
        let mut produced: u64 = 0;
        let mut max_ts = MIN_WATERMARK;
        let mut emitted_wm = MIN_WATERMARK;
        let mut idle_since: Option<Instant> = None;
        let mut idle_sent = false;
        loop {
            if *self.stop.borrow() {
                return self.shut_down().await;
            }
            let mut batch = Vec::with_capacity(batch_size);
            let status = self
                .source
                .poll(batch_size, &mut batch, &self.metrics)
                .map_err(|e| TaskError::new(&self.info, e))?;
            if !batch.is_empty() {
                idle_since = None;
                idle_sent = false;
                produced += batch.len() as u64;
                OperatorMetrics::add(&self.metrics.records_out, batch.len() as u64);
                max_ts = batch.iter().filter_map(|r| r.event_time).fold(max_ts, Millis::max);
                let out = self.chain.process(0, batch)?;
                self.output.push(out);
                if let Some(ooo) = self.timing.max_out_of_orderness {
                    let wm = max_ts.saturating_sub(ooo).saturating_sub(1);
                    if wm > emitted_wm {
                        emitted_wm = wm;
                        if !self.emit_watermark(wm).await? {
                            return Ok(TaskEnd::Stopped);
                        }
                    }
                }
                if self.output.flush().await.is_err() {
                    return Ok(TaskEnd::Stopped);
                }
            }
            match status {
                SourcePoll::Finished => return self.finish().await,
                SourcePoll::More => {
                    if let Some(rate) = self.timing.rate_limit {
                        let due = started + Duration::from_secs_f64(produced as f64 / rate);
                        if self.sleep_until(due).await {
                            return self.shut_down().await;
                        }
                    }
                }
                SourcePoll::Pending => {
                    let since = *idle_since.get_or_insert_with(Instant::now);
                    if !idle_sent && self.timing.idle_timeout.is_some_and(|t| since.elapsed() >= t) {
                        idle_sent = true;
                        if self.output.broadcast(|| Message::Idle).await.is_err() {
                            return Ok(TaskEnd::Stopped);
                        }
                    }
                    if self.sleep_until(Instant::now() + Duration::from_millis(20)).await {
                        return self.shut_down().await;
                    }
                }
            }
        }
    }

    /// Sleep until `t`; true if a stop was requested meanwhile.
    async fn sleep_until(&mut self, t: Instant) -> bool {
        tokio::select! {
            _ = tokio::time::sleep_until(t.into()) => *self.stop.borrow(),
            _ = self.stop.changed() => true,
        }
    }

    /// Run the chain's watermark hooks and forward the watermark; false if
    /// downstream is gone.
    async fn emit_watermark(&mut self, wm: Millis) -> Result<bool, TaskError> {
        let out = self.chain.advance_watermark(wm)?;
        self.output.push(out);
        Ok(self.output.broadcast(|| Message::Watermark(wm)).await.is_ok())
    }

    /// Bounded input exhausted: final watermark, end of input, close.
    async fn finish(mut self) -> TaskResult {
        if !self.emit_watermark(MAX_WATERMARK).await? {
            return Ok(TaskEnd::Stopped);
        }
        let out = self.chain.end_of_input()?;
        self.output.push(out);
        self.chain.close()?;
        Ok(match self.output.broadcast(|| Message::EndOfInput).await {
            Ok(()) => TaskEnd::Finished,
            Err(_) => TaskEnd::Stopped,
        })
    }

    /// Stop without end of input: flush what was emitted, close, and let the
    /// channels close so downstream stops too.
    async fn shut_down(mut self) -> TaskResult {
        let _ = self.output.flush().await;
        self.chain.close()?;
        Ok(TaskEnd::Stopped)
    }
}

pub struct OperatorTask {
    pub inputs: Inputs,
    pub chain: Chain,
    pub output: Output,
}

impl OperatorTask {
    pub async fn run(mut self) -> TaskResult {
        let mut tracker = WatermarkTracker::new(self.inputs.len());
        loop {
            let tick = self.chain.next_tick_in();
            let event = tokio::select! {
                e = self.inputs.recv() => e,
                _ = sleep_opt(tick) => {
                    let out = self.chain.tick()?;
                    self.output.push(out);
                    if self.output.flush().await.is_err() {
                        return self.shut_down().await;
                    }
                    continue;
                }
            };
            let change = match event {
                // Every input closed, not all with end of input: we are stopping.
                None => return self.shut_down().await,
                // A closed channel without end of input means upstream stopped;
                // wait for the others to close too.
                Some(InputEvent::Closed(_)) => WatermarkChange::Unchanged,
                Some(InputEvent::Message(i, msg)) => match msg {
                    Message::Batch(batch) => {
                        let change = tracker.on_data(i);
                        let out = self.chain.process(0, batch)?;
                        self.output.push(out);
                        change
                    }
                    Message::Watermark(wm) => tracker.on_watermark(i, wm),
                    Message::Idle => tracker.on_idle(i),
                    Message::EndOfInput => tracker.on_finished(i),
                },
            };
            let sent = match change {
                WatermarkChange::Unchanged => self.output.flush().await,
                WatermarkChange::Advanced(wm) => {
                    let out = self.chain.advance_watermark(wm)?;
                    self.output.push(out);
                    self.output.broadcast(|| Message::Watermark(wm)).await
                }
                WatermarkChange::BecameIdle => self.output.broadcast(|| Message::Idle).await,
            };
            if sent.is_err() {
                return self.shut_down().await;
            }
            if tracker.all_finished() {
                return self.finish().await;
            }
        }
    }

    async fn finish(mut self) -> TaskResult {
        let out = self.chain.end_of_input()?;
        self.output.push(out);
        self.chain.close()?;
        Ok(match self.output.broadcast(|| Message::EndOfInput).await {
            Ok(()) => TaskEnd::Finished,
            Err(_) => TaskEnd::Stopped,
        })
    }

    async fn shut_down(mut self) -> TaskResult {
        let _ = self.output.flush().await;
        self.chain.close()?;
        Ok(TaskEnd::Stopped)
    }
}

async fn sleep_opt(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

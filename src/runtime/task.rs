//! The two task loops: a source task (polls a source, stamps watermarks,
//! injects checkpoint barriers) and an operator task (reads its input
//! channels, aligns barriers). Both run a chain and send what it emits
//! downstream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::chain::{Chain, TaskError};
use super::gauges::{Phase, SubtaskGauges, TaskTimes};
use super::input::{InputEvent, Inputs};
use super::message::Message;
use super::output::{Output, BATCH_SIZE};
use super::rendezvous::Rendezvous;
use super::task_checkpoint::{completed_changed, Control, Event, NativePart, PendingSnapshot, SnapshotStats, TaskCheckpointing};
use crate::checkpoint::task_snapshot::{record_channel, TaskSnapshot};
use crate::connectors::source::{Extent, RestoredPositions, Source, SourcePoll};
use crate::faults;
use crate::operators::{OpError, OperatorMetrics, SubtaskInfo};
use crate::pacing::Pacer;
use crate::protocol::barrier::{Action, BarrierTracker, DataDisposition};
use crate::protocol::watermark::{WatermarkChange, WatermarkTracker};
use crate::types::CheckpointId;
use crate::types::Kind;
use crate::types::{Millis, Record, MAX_WATERMARK, MIN_WATERMARK};

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
    /// Records per poll (the source's `batch_size`); None: the default.
    pub batch_size: Option<usize>,
    /// Watermark = max event time - this - 1 (None: no event time).
    pub max_out_of_orderness: Option<Millis>,
    pub idle_timeout: Option<Duration>,
}

/// A checkpoint to restore a task from.
pub struct Restored {
    pub id: u64,
    pub snapshot: TaskSnapshot,
    /// Source tasks: every old subtask's position of this source.
    pub positions: Option<RestoredPositions>,
    /// Shared by all tasks: the last one to finish logs the restore time.
    pub clock: Arc<super::restore_clock::RestoreClock>,
}

pub struct SourceCheckpointing {
    pub ck: TaskCheckpointing,
    pub control: mpsc::UnboundedReceiver<Control>,
    /// Unaligned checkpoints: the barrier overtakes the source's queued output.
    pub unaligned: bool,
}

/// The gauges a task writes (runtime/gauges.rs).
pub struct TaskMeters {
    /// The task's time, shared by its operators.
    pub times: Arc<TaskTimes>,
    /// Source tasks: the source's own.
    pub source: Option<Arc<SubtaskGauges>>,
    /// The chained operators', in chain order (`chain.ops[k]`; dead-letter
    /// commits at the end of a chain have none).
    pub ops: Vec<Arc<SubtaskGauges>>,
}

impl TaskMeters {
    /// Publish the chain's watermarks (after they moved: per watermark, not per record).
    fn watermarks(&self, chain: &Chain) {
        for (g, (input, output)) in self.ops.iter().zip(chain.op_watermarks()) {
            g.set_watermarks(input, output);
        }
    }
}

pub struct SourceTask {
    pub source: Box<dyn Source>,
    pub info: SubtaskInfo,
    pub metrics: Arc<OperatorMetrics>,
    pub timing: SourceTiming,
    pub chain: Chain,
    pub output: Output,
    pub meters: TaskMeters,
    pub stop: watch::Receiver<bool>,
    pub checkpointing: Option<SourceCheckpointing>,
    pub restored: Option<Restored>,
}

/// A source sets each record's `split_watermark` to the highest event time
/// its split has had, up to and including it; make that the split's
/// watermark, by the same rule as the watermark the task emits. Lateness
/// downstream is judged by it, so it does not depend on where a batch ended
/// or which splits share a subtask.
fn split_watermarks(batch: &mut [Record], max_out_of_orderness: Option<Millis>) {
    for r in batch {
        r.split_watermark = match (max_out_of_orderness, r.event_time) {
            (Some(ooo), Some(_)) if r.split_watermark > MIN_WATERMARK => r.split_watermark.saturating_sub(ooo).saturating_sub(1),
            _ => MIN_WATERMARK,
        };
    }
}

/// Run a task's loop with its time counted from the start (busy) until it
/// ends, whichever way it ends.
async fn timed(times: Arc<TaskTimes>, task_loop: impl std::future::Future<Output = TaskResult>) -> TaskResult {
    times.enter(Phase::Busy);
    let result = task_loop.await;
    times.stop();
    result
}

/// What a source task's loop keeps between its turns.
struct SourceLoop {
    emitted_wm: Millis,
    /// The highest event time read.
    max_ts: Millis,
    pacer: Option<Pacer>,
    idle_since: Option<Instant>,
    idle_sent: bool,
    /// False while a stop-with-savepoint has stopped reading.
    producing: bool,
    /// The input ended (with checkpoints the task still answers the driver).
    finished: bool,
}

/// What a source task's loop does after a turn.
enum Turn {
    Go,
    Stopped,
    /// Ends as the input ended (or the driver is done).
    Exit,
    ShutDown,
}

/// What woke an idle or throttled source.
enum Wake {
    Time,
    Stop,
    Control(Control),
    Completed,
    Done,
}

impl SourceTask {
    pub async fn run(self) -> TaskResult {
        timed(self.meters.times.clone(), self.run_loop()).await
    }

    async fn run_loop(mut self) -> TaskResult {
        let batch_size = self.batch_size();
        let mut emitted_wm = MIN_WATERMARK;
        if let Some(r) = self.restored.take() {
            emitted_wm = self.restore(r).await?;
        }
        self.meters.times.set_ready();
        let mut lp = SourceLoop {
            emitted_wm,
            max_ts: emitted_wm.saturating_add(self.timing.max_out_of_orderness.unwrap_or(0)).saturating_add(1),
            // After a stall, at most one batch at once (no catching up).
            pacer: self.timing.rate_limit.map(|rate| Pacer::new(rate, batch_size as u64)),
            idle_since: None,
            idle_sent: false,
            producing: true,
            finished: false,
        };
        loop {
            match self.step(&mut lp, batch_size).await? {
                Turn::Go => {}
                Turn::Stopped => return Ok(TaskEnd::Stopped),
                Turn::Exit => return self.exit(lp.finished).await,
                Turn::ShutDown => return self.shut_down().await,
            }
        }
    }

    fn batch_size(&self) -> usize {
        let batch_size = match self.timing.rate_limit {
            // Small batches keep a throttled stream smooth (about 20 a second).
            Some(rate) => ((rate / 20.0) as usize).clamp(1, BATCH_SIZE),
            None => BATCH_SIZE,
        };
        self.timing.batch_size.map_or(batch_size, |b| b.clamp(1, batch_size))
    }

    /// One turn of the loop: answer the driver, poll a batch and pass it
    /// on, then wait as the source's state asks.
    async fn step(&mut self, lp: &mut SourceLoop, batch_size: usize) -> Result<Turn, TaskError> {
        if self.checkpointing.is_none() && *self.stop.borrow() {
            return Ok(Turn::ShutDown);
        }
        // With checkpoints a source outlives its input: it still answers
        // triggers (its position no longer moves) until the driver is done.
        if !lp.producing || lp.finished {
            let wake = self.wait(None).await;
            return self.on_wake(wake, lp).await;
        }
        while let Some(c) = self.checkpointing.as_mut().and_then(|s| s.control.try_recv().ok()) {
            self.on_control(c, lp.emitted_wm, &mut lp.producing).await?;
        }
        self.notify_completed()?;
        if !lp.producing {
            return Ok(Turn::Go);
        }
        let mut batch = Vec::with_capacity(batch_size);
        let status = self.source.poll(batch_size, &mut batch, &self.metrics).map_err(|e| TaskError::new(&self.info, e))?;
        let passed = if batch.is_empty() { self.advance_without_data(lp).await? } else { self.forward(batch, lp).await? };
        if !passed {
            return Ok(Turn::Stopped);
        }
        match status {
            SourcePoll::Finished => self.on_input_end(lp).await,
            SourcePoll::More => match lp.pacer.as_mut().and_then(|p| p.wait(Instant::now())) {
                Some(pause) => {
                    let wake = self.wait(Some(Instant::now() + pause)).await;
                    self.on_wake(wake, lp).await
                }
                None => Ok(Turn::Go),
            },
            SourcePoll::Pending => self.on_pending(lp).await,
        }
    }

    async fn on_wake(&mut self, wake: Wake, lp: &mut SourceLoop) -> Result<Turn, TaskError> {
        match wake {
            Wake::Control(c) => self.on_control(c, lp.emitted_wm, &mut lp.producing).await?,
            Wake::Completed => self.notify_completed()?,
            Wake::Done => return Ok(Turn::Exit),
            Wake::Stop => return Ok(Turn::ShutDown),
            Wake::Time => {}
        }
        Ok(Turn::Go)
    }

    /// Process a polled batch through the chain and send it on, with the
    /// watermark it allows; false if the pipeline is stopping.
    async fn forward(&mut self, mut batch: Vec<Record>, lp: &mut SourceLoop) -> Result<bool, TaskError> {
        lp.idle_since = None;
        lp.idle_sent = false;
        if let Some(p) = &mut lp.pacer {
            p.sent(batch.len() as u64, Instant::now());
        }
        OperatorMetrics::add(&self.metrics.records_out, batch.len() as u64);
        lp.max_ts = batch.iter().filter_map(|r| r.event_time).fold(lp.max_ts, Millis::max);
        if !self.source.carries_watermarks() {
            split_watermarks(&mut batch, self.timing.max_out_of_orderness);
        }
        let out = self.chain.process(0, batch)?;
        self.output.push(out);
        self.chain.publish_state();
        if let Some(wm) = self.input_watermark(lp.max_ts) {
            if wm > lp.emitted_wm {
                lp.emitted_wm = wm;
                if !self.emit_watermark(wm).await? {
                    return Ok(false);
                }
            }
        }
        Ok(self.output.flush().await.is_ok())
    }

    /// No data, but the bound may have moved (a Kafka partition went idle
    /// or reached its end, a repartition topic's producers wrote their
    /// watermarks); false if the pipeline is stopping.
    async fn advance_without_data(&mut self, lp: &mut SourceLoop) -> Result<bool, TaskError> {
        if let (Some(wm), Some(_)) = (self.input_watermark(lp.max_ts), self.source.event_time_bound()) {
            if wm > lp.emitted_wm {
                lp.emitted_wm = wm;
                return self.emit_watermark(wm).await;
            }
        }
        Ok(true)
    }

    async fn on_input_end(&mut self, lp: &mut SourceLoop) -> Result<Turn, TaskError> {
        tracing::debug!(source = %self.info.operator, subtask = self.info.index, "Source read to the end of its input.");
        if !self.end_of_input().await? {
            return Ok(Turn::Stopped);
        }
        lp.emitted_wm = MAX_WATERMARK;
        lp.finished = true;
        match &self.checkpointing {
            None => Ok(Turn::Exit),
            Some(s) => {
                let _ = s.ck.events.send(Event::Finished { source: true });
                Ok(Turn::Go)
            }
        }
    }

    /// No data for now: mark the output idle after `idle_timeout`, and wait a little.
    async fn on_pending(&mut self, lp: &mut SourceLoop) -> Result<Turn, TaskError> {
        let since = *lp.idle_since.get_or_insert_with(Instant::now);
        // A repartition topic without data is idle only when its
        // producers are (they may still pass watermarks).
        let carried_idle = !self.source.carries_watermarks() || self.source.event_time_bound().is_none();
        if self.source.carries_watermarks() && !carried_idle {
            lp.idle_sent = false;
        }
        if !lp.idle_sent && carried_idle && self.timing.idle_timeout.is_some_and(|t| since.elapsed() >= t) {
            lp.idle_sent = true;
            if self.output.broadcast(|| Message::Idle).await.is_err() {
                return Ok(Turn::Stopped);
            }
        }
        let wake = self.wait(Some(Instant::now() + Duration::from_millis(20))).await;
        self.on_wake(wake, lp).await
    }

    /// The watermark the input allows now, with `max_ts` the highest event
    /// time read (None: no event time, or a repartition topic's producers
    /// idle). A source that carries watermarks gives it as it is.
    fn input_watermark(&self, max_ts: Millis) -> Option<Millis> {
        let ooo = self.timing.max_out_of_orderness?;
        if self.source.carries_watermarks() {
            return self.source.event_time_bound();
        }
        let bounded = self.source.event_time_bound().map_or(max_ts, |b| b.min(max_ts));
        Some(bounded.saturating_sub(ooo).saturating_sub(1))
    }

    /// Wait until `until` (None: forever) or something happens.
    async fn wait(&mut self, until: Option<Instant>) -> Wake {
        self.chain.publish_state();
        self.meters.times.enter(Phase::Idle);
        let wake = self.wait_for(until).await;
        self.meters.times.enter(Phase::Busy);
        wake
    }

    async fn wait_for(&mut self, until: Option<Instant>) -> Wake {
        let sleep = async {
            match until {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        match &mut self.checkpointing {
            None => tokio::select! {
                _ = sleep => Wake::Time,
                _ = self.stop.changed() => Wake::Stop,
            },
            Some(s) => tokio::select! {
                _ = sleep => Wake::Time,
                c = s.control.recv() => c.map(Wake::Control).unwrap_or(Wake::Done),
                _ = completed_changed(&mut s.ck.completed) => Wake::Completed,
                _ = s.ck.done.wait_for(|d| *d) => Wake::Done,
            },
        }
    }

    async fn restore(&mut self, r: Restored) -> Result<Millis, TaskError> {
        if let Some(p) = &r.positions {
            let before = self.source.extent();
            // A Kafka source asks the brokers for every partition's offsets.
            let restored = crate::blocking::call(|| self.source.restore(p));
            restored.map_err(|e| TaskError::new(&self.info, OpError::Data(format!("restoring position: {e}"))))?;
            // What the restored position had read of the bounded input:
            // a progress bar starts there.
            if let (Some(g), Some(before), Some(after)) = (&self.meters.source, before, self.source.extent()) {
                let amount = |e: Extent| match e {
                    Extent::Bytes(n) | Extent::Rows(n) => i64::try_from(n).unwrap_or(i64::MAX),
                };
                g.restored_done.store(amount(before).saturating_sub(amount(after)), std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.chain.restore(r.id, r.snapshot.watermark, &r.snapshot.operators)?;
        r.clock.task_done();
        if let Some(s) = &mut self.checkpointing {
            s.ck.notified = r.id;
        }
        self.output.restore_in_flight(r.snapshot.output_channels).map_err(|e| TaskError::new(&self.info, OpError::Data(e.to_string())))?;
        let wm = r.snapshot.watermark;
        self.meters.watermarks(&self.chain);
        if let Some(g) = &self.meters.source {
            g.set_watermarks(MIN_WATERMARK, wm);
        }
        let forward = self.chain.output_watermark();
        let sent =
            if forward > MIN_WATERMARK { self.output.broadcast(|| Message::Watermark(forward)).await } else { self.output.flush().await };
        if sent.is_err() {
            tracing::debug!("Downstream gone while restoring.");
        }
        Ok(wm)
    }

    /// A trigger: record the position, snapshot the chain, emit the barrier.
    async fn on_control(&mut self, c: Control, watermark: Millis, producing: &mut bool) -> Result<(), TaskError> {
        let Control::Trigger { id, kind, then_stop, drain } = c;
        let barrier_at = Instant::now();
        let Some(s) = &self.checkpointing else { return Ok(()) };
        // A savepoint's barrier never overtakes: savepoints are aligned.
        let unaligned = s.unaligned && kind == Kind::Checkpoint;
        let watermark = if drain && watermark < MAX_WATERMARK {
            if !self.emit_watermark(MAX_WATERMARK).await? {
                return Ok(());
            }
            MAX_WATERMARK
        } else {
            watermark
        };
        if let Some(d) = faults::get().barrier_delay {
            tokio::time::sleep(d).await;
        }
        if let Some(d) = injected_stall(std::iter::once(&self.info).chain(self.chain.ops.iter().map(|op| &op.info))) {
            tokio::time::sleep(d).await;
        }
        // Aligned: records emitted so far go out before the barrier.
        if !unaligned && self.output.flush().await.is_err() {
            return Ok(());
        }
        let sync = Instant::now();
        // Keyed operators are never chained into a source (their input is
        // repartitioned by key), so a source has no native state.
        let states = self.chain.snapshot(id, false)?;
        let mut snapshot = TaskSnapshot {
            watermark,
            source_position: Some((self.info.operator.clone(), self.source.position())),
            ..TaskSnapshot::default()
        };
        self.source.on_checkpoint(id);
        let sent = if unaligned {
            // The barrier jumps the queue; what it overtook is channel state.
            self.output.broadcast_overtaking(|| Message::Barrier(id, kind)).map(|overtaken| snapshot.output_channels = overtaken)
        } else {
            Ok(())
        };
        let stats = SnapshotStats { sync: sync.elapsed(), barrier_at: Some(barrier_at), ..SnapshotStats::default() };
        let s = self.checkpointing.as_ref().expect("checked above");
        s.ck.write_and_vote(id, snapshot, states, stats, None);
        if then_stop {
            *producing = false;
        }
        if !unaligned {
            let _ = self.output.broadcast(|| Message::Barrier(id, kind)).await;
        } else if sent.is_ok() {
            let _ = self.output.flush().await;
        }
        Ok(())
    }

    fn notify_completed(&mut self) -> Result<(), TaskError> {
        if let Some(id) = self.checkpointing.as_mut().and_then(|s| s.ck.newly_completed()) {
            crate::blocking::call(|| self.source.on_checkpoint_complete(id));
            self.chain.notify_complete(id)?;
        }
        Ok(())
    }

    /// Run the chain's watermark hooks and forward the watermark; false if
    /// downstream is gone.
    async fn emit_watermark(&mut self, wm: Millis) -> Result<bool, TaskError> {
        let out = self.chain.advance_watermark(wm)?;
        self.output.push(out);
        if let Some(g) = &self.meters.source {
            g.set_watermarks(MIN_WATERMARK, wm);
        }
        self.meters.watermarks(&self.chain);
        let forward = self.chain.output_watermark();
        Ok(self.output.broadcast(|| Message::Watermark(forward)).await.is_ok())
    }

    /// Bounded input exhausted: final watermark, end of input; false if
    /// downstream is gone.
    async fn end_of_input(&mut self) -> Result<bool, TaskError> {
        if !self.emit_watermark(MAX_WATERMARK).await? {
            return Ok(false);
        }
        let out = self.chain.end_of_input()?;
        self.output.push(out);
        Ok(self.output.broadcast(|| Message::EndOfInput).await.is_ok())
    }

    /// Leave: commit what the last completed checkpoint staged, close.
    async fn exit(mut self, finished: bool) -> TaskResult {
        self.notify_completed()?;
        let _ = self.output.flush().await;
        self.chain.publish_state();
        self.chain.close()?;
        Ok(if finished { TaskEnd::Finished } else { TaskEnd::Stopped })
    }

    /// Stop without end of input: flush what was emitted, close, and let the
    /// channels close so downstream stops too.
    async fn shut_down(mut self) -> TaskResult {
        let _ = self.output.flush().await;
        self.chain.publish_state();
        self.chain.close()?;
        Ok(TaskEnd::Stopped)
    }
}

pub struct OperatorCheckpointing {
    pub ck: TaskCheckpointing,
    pub barriers: BarrierTracker,
    /// Native (incremental) checkpoints: the bundle's rendezvous and this
    /// task's ticket in it. None: every snapshot is canonical.
    pub native: Option<(Arc<Rendezvous>, usize)>,
    /// The kind of the newest barrier seen.
    pub kind: (CheckpointId, Kind),
}

impl OperatorCheckpointing {
    fn kind_of(&self, id: CheckpointId) -> Kind {
        if self.kind.0 == id {
            self.kind.1
        } else {
            Kind::Checkpoint
        }
    }
}

pub struct OperatorTask {
    pub inputs: Inputs,
    pub chain: Chain,
    pub output: Output,
    pub meters: TaskMeters,
    pub checkpointing: Option<OperatorCheckpointing>,
    pub restored: Option<Restored>,
}

/// What an operator task's loop keeps between its turns.
struct OperatorLoop {
    tracker: WatermarkTracker,
    pending: Option<PendingSnapshot>,
    first_barrier: Option<(u64, Instant)>,
    ended: bool,
}

/// What the operator task loop woke up for.
enum Step {
    Input(Option<InputEvent>),
    Tick,
    Completed,
    AlignmentTimeout,
}

impl OperatorTask {
    pub async fn run(self) -> TaskResult {
        timed(self.meters.times.clone(), self.run_loop()).await
    }

    async fn run_loop(mut self) -> TaskResult {
        let mut lp = OperatorLoop { tracker: WatermarkTracker::new(self.inputs.len()), pending: None, first_barrier: None, ended: false };
        if let Some(r) = self.restored.take() {
            self.restore(r).await?;
        }
        self.meters.times.set_ready();
        loop {
            let (change, actions) = match self.next_step().await {
                Step::Tick => {
                    let out = self.chain.tick()?;
                    self.output.push(out);
                    (WatermarkChange::Unchanged, Vec::new())
                }
                Step::Completed => {
                    self.notify_completed()?;
                    continue;
                }
                Step::AlignmentTimeout => {
                    let c = self.checkpointing.as_mut().expect("only with checkpoints");
                    (WatermarkChange::Unchanged, c.barriers.on_timer(Instant::now()))
                }
                // Every input closed: upstream finished or stopped.
                Step::Input(None) => return self.exit(lp.ended).await,
                Step::Input(Some(InputEvent::Closed(i))) => match &mut self.checkpointing {
                    Some(c) => (WatermarkChange::Unchanged, c.barriers.on_closed(i).map_err(|e| self.protocol_error(e))?),
                    None => (WatermarkChange::Unchanged, Vec::new()),
                },
                Step::Input(Some(InputEvent::Message(i, msg))) => self.on_message(i, msg, &mut lp).await?,
            };
            if !self.pass_on(change).await? {
                return self.exit(false).await;
            }
            for action in actions {
                match self.act(action, &mut lp.pending, lp.first_barrier).await {
                    Ok(()) => {}
                    Err(TaskStop::Failed(e)) => return Err(e),
                    Err(TaskStop::Disconnected) => return self.exit(false).await,
                }
            }
            if lp.tracker.all_finished() && !lp.ended {
                lp.ended = true;
                let out = self.chain.end_of_input()?;
                self.output.push(out);
                if self.output.broadcast(|| Message::EndOfInput).await.is_err() {
                    return self.exit(true).await;
                }
                match &self.checkpointing {
                    None => return self.exit(true).await,
                    Some(c) => {
                        let _ = c.ck.events.send(Event::Finished { source: false });
                    }
                }
            }
        }
    }

    /// Wait (idle) for the next input, tick, completed checkpoint or alignment timeout.
    async fn next_step(&mut self) -> Step {
        let tick = self.chain.next_tick_in();
        // Once per loop turn (a batch, a watermark, a barrier), not per record.
        self.chain.publish_state();
        self.meters.times.enter(Phase::Idle);
        let step = match &mut self.checkpointing {
            None => tokio::select! {
                e = self.inputs.recv() => Step::Input(e),
                _ = sleep_opt(tick) => Step::Tick,
            },
            Some(c) => {
                let deadline = c.barriers.deadline();
                tokio::select! {
                    e = self.inputs.recv() => Step::Input(e),
                    _ = sleep_opt(tick) => Step::Tick,
                    _ = completed_changed(&mut c.ck.completed) => Step::Completed,
                    _ = sleep_until_opt(deadline) => Step::AlignmentTimeout,
                }
            }
        };
        self.meters.times.enter(Phase::Busy);
        step
    }

    /// One message of input `i`: the watermark change it makes and what the
    /// barrier tracker decides.
    async fn on_message(&mut self, i: usize, msg: Message, lp: &mut OperatorLoop) -> Result<(WatermarkChange, Vec<Action>), TaskError> {
        Ok(match msg {
            Message::Batch(batch) => {
                if let (Some(c), Some(p)) = (&self.checkpointing, lp.pending.as_mut()) {
                    if c.barriers.on_data(i) == DataDisposition::ProcessAndRecord {
                        let channel = self.inputs.channel(i).ok_or_else(|| self.protocol_error(format!("no input {i}")))?;
                        record_channel(&mut p.snapshot.input_channels, channel, batch.iter().cloned());
                    }
                }
                let change = lp.tracker.on_data(i);
                let out = self.chain.process_input(self.inputs.side(i), batch)?;
                self.output.push(out);
                if let Some(pause) = self.chain.throttle() {
                    // A slow operator: hold the input back (backpressure).
                    tokio::time::sleep(pause).await;
                }
                (change, Vec::new())
            }
            Message::Watermark(wm) => (lp.tracker.on_watermark(i, wm), Vec::new()),
            Message::Idle => (lp.tracker.on_idle(i), Vec::new()),
            Message::EndOfInput => (lp.tracker.on_finished(i), Vec::new()),
            Message::Barrier(id, kind) => match &mut self.checkpointing {
                Some(c) => {
                    let now = Instant::now();
                    if c.kind.0 < id {
                        c.kind = (id, kind);
                    }
                    if lp.first_barrier.is_none_or(|(b, _)| b != id) {
                        lp.first_barrier = Some((id, now));
                    }
                    (WatermarkChange::Unchanged, c.barriers.on_barrier_of(i, id, kind, now).map_err(|e| self.protocol_error(e))?)
                }
                // A barrier without checkpointing can't happen; pass it on.
                None => {
                    let _ = self.output.broadcast(|| Message::Barrier(id, kind)).await;
                    (WatermarkChange::Unchanged, Vec::new())
                }
            },
        })
    }

    /// Send what the turn produced, with the watermark or idleness it
    /// changed; false if the output is disconnected (the pipeline stops).
    async fn pass_on(&mut self, change: WatermarkChange) -> Result<bool, TaskError> {
        let sent = match change {
            WatermarkChange::Advanced(wm) if wm > self.chain.watermark() => {
                let out = self.chain.advance_watermark(wm)?;
                self.output.push(out);
                self.meters.watermarks(&self.chain);
                let forward = self.chain.output_watermark();
                self.output.broadcast(|| Message::Watermark(forward)).await
            }
            WatermarkChange::BecameIdle => self.output.broadcast(|| Message::Idle).await,
            _ => self.output.flush().await,
        };
        Ok(sent.is_ok())
    }

    /// Carry out one decision of the barrier tracker.
    async fn act(
        &mut self,
        action: Action,
        pending: &mut Option<PendingSnapshot>,
        first_barrier: Option<(u64, Instant)>,
    ) -> Result<(), TaskStop> {
        let c = self.checkpointing.as_mut().expect("barrier actions only with checkpoints");
        match action {
            Action::Block(i) => self.inputs.block(i),
            Action::UnblockAll => self.inputs.unblock_all(),
            Action::Snapshot { id, unaligned } => {
                if let Some(d) = injected_stall(self.chain.ops.iter().map(|op| &op.info)) {
                    tokio::time::sleep(d).await;
                }
                if let Some(info) = self.chain.ops.iter().map(|op| &op.info).find(|i| faults::get().fail_now(&i.operator, i.index)) {
                    let why = format!("injected failure at checkpoint {id} (WEIR_FAULTS fail=)");
                    return Err(TaskStop::Failed(TaskError::new(info, crate::operators::OpError::Data(why))));
                }
                if !unaligned {
                    // Aligned: what was emitted before goes out before the barrier.
                    self.output.flush().await.map_err(|_| TaskStop::Disconnected)?;
                }
                let sync = Instant::now();
                // Savepoints are canonical; so is every snapshot that is not aligned.
                let native = c.native.is_some() && !unaligned && c.kind_of(id) == Kind::Checkpoint;
                let states = self.chain.snapshot(id, native).map_err(TaskStop::Failed)?;
                let snapshot = TaskSnapshot { watermark: self.chain.watermark(), ..TaskSnapshot::default() };
                let first = first_barrier.map(|(_, t)| t).unwrap_or(sync);
                let mut p = PendingSnapshot::take(id, unaligned, snapshot, states, sync, first);
                p.native = native;
                *pending = Some(p);
            }
            Action::ForwardBarrier(id) => {
                let kind = c.kind_of(id);
                match pending.as_mut() {
                    Some(p) if p.id == id && p.unaligned => {
                        let overtaken =
                            self.output.broadcast_overtaking(|| Message::Barrier(id, kind)).map_err(|_| TaskStop::Disconnected)?;
                        p.snapshot.output_channels = overtaken;
                    }
                    _ => self.output.broadcast(|| Message::Barrier(id, kind)).await.map_err(|_| TaskStop::Disconnected)?,
                }
                // Native: the barrier is out; no record is processed until
                // the bundle's DB checkpoint is taken.
                if let (Some(p), Some((rv, ticket))) = (pending.as_mut().filter(|p| p.id == id && p.native), &c.native) {
                    if p.arrival.is_none() {
                        p.arrival = Some(rv.arrive(*ticket, id).await);
                    }
                }
            }
            Action::Complete(id) => {
                if let Some(p) = pending.take().filter(|p| p.id == id) {
                    let native = match (p.native, &c.native) {
                        (true, Some((rv, _))) => Some(NativePart {
                            rendezvous: rv.clone(),
                            arrival: p.arrival.unwrap_or_else(|| Err("the task did not reach its bundle's rendezvous".into())),
                        }),
                        _ => None,
                    };
                    c.ck.write_and_vote(id, p.snapshot, p.states, p.stats, native);
                }
            }
            Action::AbortStale(id) => {
                *pending = None;
                c.ck.abort(id, "a newer barrier arrived before this checkpoint's alignment finished".into());
            }
        }
        Ok(())
    }

    async fn restore(&mut self, r: Restored) -> Result<(), TaskError> {
        self.chain.restore(r.id, r.snapshot.watermark, &r.snapshot.operators)?;
        r.clock.task_done();
        if let Some(c) = &mut self.checkpointing {
            c.ck.notified = r.id;
        }
        // Output the barrier overtook was emitted before the checkpoint: it
        // goes back on its own channel. Input recorded after the snapshot is
        // processed again, once, in the order each channel delivered it.
        self.output.restore_in_flight(r.snapshot.output_channels).map_err(|e| self.protocol_error(e))?;
        for input in r.snapshot.input_channels {
            let out = self.chain.process_input(self.inputs.side_of(&input.channel), input.records)?;
            self.output.push(out);
        }
        self.meters.watermarks(&self.chain);
        let _ = self.output.flush().await;
        Ok(())
    }

    fn notify_completed(&mut self) -> Result<(), TaskError> {
        if let Some(c) = self.checkpointing.as_mut() {
            if let Some(id) = c.ck.newly_completed() {
                if let Some((rv, _)) = &c.native {
                    rv.completed(id);
                }
                self.chain.notify_complete(id)?;
            }
        }
        Ok(())
    }

    fn protocol_error(&self, e: impl std::fmt::Display) -> TaskError {
        let info = &self.chain.ops[0].info;
        TaskError::new(info, OpError::Data(format!("checkpoint protocol: {e}")))
    }

    /// Leave: with checkpoints, wait until no checkpoint needs this task any
    /// more and commit what the last completed one staged; then close.
    async fn exit(mut self, finished: bool) -> TaskResult {
        let _ = self.output.flush().await;
        if let Some(c) = &mut self.checkpointing {
            c.ck.wait_done().await;
        }
        self.notify_completed()?;
        self.chain.publish_state();
        self.chain.close()?;
        Ok(if finished { TaskEnd::Finished } else { TaskEnd::Stopped })
    }
}

/// Why carrying out a barrier action ended the task.
enum TaskStop {
    Disconnected,
    Failed(TaskError),
}

/// An injected stall (`WEIR_FAULTS` `stall=`) of any node this task runs,
/// due at its checkpoint barrier: chained nodes share the task, so a stalled
/// sink in the middle or at the end of a chain stalls the task as much as a
/// stalled head.
fn injected_stall<'a>(mut nodes: impl Iterator<Item = &'a SubtaskInfo>) -> Option<Duration> {
    let (info, d) = nodes.find_map(|info| faults::get().stall_for(&info.operator, info.index).map(|d| (info, d)))?;
    tracing::warn!(operator = %info.operator, subtask = info.index, ?d, "Injected stall.");
    Some(d)
}

async fn sleep_opt(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

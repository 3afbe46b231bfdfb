//! Progress display and the end-of-run summary, fed by the runtime's
//! status snapshots and counters (the runtime never imports indicatif),
//! and the log writer that keeps log lines above the bar.

use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::watch;

use super::live;
use crate::connectors::source::Extent;
use crate::runtime::status::Snapshot;
use crate::runtime::{NodeMetrics, Outcome};

/// The bar (or live line) on screen, if any: log lines go above it.
static ON_SCREEN: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// The tracing writer: each event is written whole, above the bar while
/// one is on screen (the bar steps aside with `ProgressBar::suspend` and is
/// drawn again below), straight to stderr otherwise.
pub struct LogWriter;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine(Vec::new())
    }
}

/// One event's text, written when the event is formatted completely.
pub struct LogLine(Vec<u8>);

impl Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let bar = ON_SCREEN.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let write = || {
            let _ = std::io::stderr().lock().write_all(&self.0);
        };
        match bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
    }
}

pub struct Progress {
    bar: ProgressBar,
    updater: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Start a bar (bounded input) or a live status line (unbounded), both
    /// fed by the engine's status snapshots.
    pub fn start(show: bool, extent: Option<Extent>, mut status: watch::Receiver<Snapshot>) -> Progress {
        if !show {
            return Progress { bar: ProgressBar::hidden(), updater: None };
        }
        let bar = match extent {
            Some(Extent::Bytes(total)) => {
                ProgressBar::new(total).with_style(style("{bar:30} {binary_bytes}/{binary_total_bytes} {wide_msg}"))
            }
            Some(Extent::Rows(total)) => ProgressBar::new(total).with_style(style("{bar:30} {human_pos}/{human_len} rows {wide_msg}")),
            None => ProgressBar::new_spinner().with_style(style("{spinner} {wide_msg}")),
        };
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(5));
        *ON_SCREEN.lock().unwrap_or_else(|p| p.into_inner()) = Some(bar.clone());
        let b = bar.clone();
        let updater = tokio::spawn(async move {
            loop {
                let s = status.borrow_and_update().clone();
                // Nothing until the restore is done: a restored run's bar
                // starts where the restored position is, not at 0.
                let starting = s.state == "starting";
                match &s.progress {
                    _ if starting => {}
                    Some(p) => {
                        b.set_position(p.done);
                        b.set_message(live::bar_message(&s));
                    }
                    None => {
                        b.set_message(live::live_line(&s));
                        b.tick();
                    }
                }
                if status.changed().await.is_err() {
                    return;
                }
            }
        });
        Progress { bar, updater: Some(updater) }
    }

    pub fn finish(self) {
        if let Some(u) = self.updater {
            u.abort();
        }
        *ON_SCREEN.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.bar.finish_and_clear();
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// One line: records in/out per node, elapsed time and source throughput.
pub fn summary(metrics: &[NodeMetrics], elapsed: Duration, outcome: Outcome) -> String {
    let mut parts = Vec::new();
    let mut source_records = 0;
    for m in metrics {
        let t = m.totals();
        let mut part = match m.kind {
            "source" => {
                source_records += t.records_out;
                format!("{} {} out", m.name, t.records_out)
            }
            "sink" => format!("{} {} in", m.name, t.records_in),
            _ => format!("{} {} in/{} out", m.name, t.records_in, t.records_out),
        };
        if t.records_dropped > 0 {
            part.push_str(&format!(" ({} dropped)", t.records_dropped));
        }
        parts.push(part);
    }
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { source_records as f64 / secs } else { 0.0 };
    let verb = match outcome {
        Outcome::Finished => "Finished",
        Outcome::Stopped => "Stopped",
    };
    format!("{verb} in {secs:.2}s, {rate:.0} records/s: {}", parts.join(", "))
}

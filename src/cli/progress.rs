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
            Some(Extent::Bytes(total)) => ProgressBar::new(total).with_style(style("{bar:30} {binary_bytes}/{binary_total_bytes} {msg}")),
            Some(Extent::Rows(total)) => ProgressBar::new(total).with_style(style("{bar:30} {human_pos}/{human_len} rows {msg}")),
            None => ProgressBar::new_spinner().with_style(style("{spinner} {msg}")),
        };
        // Off screen until the restore is done: a restored run's bar
        // starts at the restored position, not at 0.
        bar.set_draw_target(ProgressDrawTarget::hidden());
        let b = bar.clone();
        let updater = tokio::spawn(async move {
            let mut shown = false;
            loop {
                let s = status.borrow_and_update().clone();
                let starting = s.state == "starting";
                if !starting && !shown {
                    shown = true;
                    b.set_draw_target(ProgressDrawTarget::term_like_with_hz(Box::new(Narrower(console::Term::stderr())), 5));
                    *ON_SCREEN.lock().unwrap_or_else(|p| p.into_inner()) = Some(b.clone());
                }
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

/// stderr, drawn two columns narrower than it is. indicatif pads the bar
/// to the width it is given; with the full width the `^C` a terminal
/// echoes on Ctrl-C wraps onto a new line, the next draw clears that line
/// instead of the bar's, and a stale copy of the bar stays above the logs.
/// With two columns spare the `^C` stays on the bar's line and is cleared
/// with it.
#[derive(Debug)]
struct Narrower(console::Term);

impl indicatif::TermLike for Narrower {
    fn width(&self) -> u16 {
        self.0.size().1.saturating_sub(2).max(1)
    }

    fn height(&self) -> u16 {
        self.0.size().0
    }

    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_up(n)
    }

    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_down(n)
    }

    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_right(n)
    }

    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_left(n)
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.0.write_line(s)
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.0.write_str(s)
    }

    fn clear_line(&self) -> std::io::Result<()> {
        self.0.clear_line()
    }

    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
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
            // What a file or Kafka sink made durable and visible (docs/metrics.md).
            "sink" if m.commits => format!("{} {} in ({} committed)", m.name, t.records_in, t.records_committed),
            "sink" => format!("{} {} in", m.name, t.records_in),
            _ => format!("{} {} in/{} out", m.name, t.records_in, t.records_out),
        };
        if t.records_dropped > 0 {
            part.push_str(&format!(" ({})", dropped(&t)));
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

/// `2 dropped` and what became of them: late or bad, and how many went to
/// the dead letter (the rest were skipped).
fn dropped(t: &crate::runtime::Totals) -> String {
    let late = t.dropped_late.min(t.records_dropped);
    let bad = t.records_dropped - late;
    let mut why = Vec::new();
    if late > 0 {
        why.push(format!("{late} late"));
    }
    if bad > 0 {
        why.push(format!("{bad} bad"));
    }
    let mut s = format!("{} dropped: {}", t.records_dropped, why.join(", "));
    match t.dead_lettered.min(t.records_dropped) {
        0 => {}
        n if n == t.records_dropped => s.push_str(", all written to the dead letter"),
        n => s.push_str(&format!(", {n} written to the dead letter")),
    }
    s
}

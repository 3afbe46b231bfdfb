//! Progress display and the end-of-run summary, fed by runtime counters
//! (the runtime never imports indicatif).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::connectors::source::Extent;
use crate::runtime::{NodeMetrics, Outcome};

pub struct Progress {
    bar: ProgressBar,
    updater: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Start a bar (bounded input) or a spinner with a live rate (unbounded).
    pub fn start(show: bool, extent: Option<Extent>, metrics: Vec<NodeMetrics>) -> Progress {
        if !show {
            return Progress { bar: ProgressBar::hidden(), updater: None };
        }
        let sources: Vec<NodeMetrics> = metrics.into_iter().filter(|m| m.kind == "source").collect();
        let (bar, unit) = match extent {
            Some(Extent::Bytes(total)) => (
                ProgressBar::new(total)
                    .with_style(style("{bar:30} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}")),
                Unit::Bytes,
            ),
            Some(Extent::Rows(total)) => {
                (ProgressBar::new(total).with_style(style("{bar:30} {human_pos}/{human_len} rows {per_sec} ETA {eta} {msg}")), Unit::Rows)
            }
            None => (ProgressBar::new_spinner().with_style(style("{spinner} {human_pos} records {per_sec} {msg}")), Unit::Rows),
        };
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(5));
        let b = bar.clone();
        let updater = tokio::spawn(async move {
            loop {
                let totals = sources.iter().map(|m| m.totals());
                let pos = match unit {
                    Unit::Bytes => totals.map(|t| t.bytes_in).sum(),
                    Unit::Rows => totals.map(|t| t.records_out).sum(),
                };
                b.set_position(pos);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Progress { bar, updater: Some(updater) }
    }

    pub fn finish(self) {
        if let Some(u) = self.updater {
            u.abort();
        }
        self.bar.finish_and_clear();
    }
}

#[derive(Clone, Copy)]
enum Unit {
    Bytes,
    Rows,
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

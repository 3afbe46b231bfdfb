//! How a status snapshot (runtime/status.rs) reads on a terminal: the
//! progress bar's message, the live line of an unbounded run, and the
//! table of `weir status`. One snapshot, three renderings, no arithmetic
//! of their own beyond formatting.

use std::fmt::Write as _;

use crate::runtime::control::Status;
use crate::runtime::status::{Snapshot, Unit, HIGH_BACKPRESSURE};
use crate::types::{Millis, MAX_WATERMARK};

/// The part of the bar after `done/total`: rate, records, ETA, the last
/// checkpoint, backpressure when high.
pub fn bar_message(s: &Snapshot) -> String {
    let mut parts = vec![format!("{} records/s", rate(s.records_per_sec))];
    if let Some(p) = &s.progress {
        // A bar of rows counts the records already.
        if p.unit == Unit::Bytes {
            parts[0] = format!("{}/s, {}", bytes(s.bytes_per_sec as u64), parts[0]);
            parts.push(format!("{} records", count(s.records)));
        }
        if let Some(eta) = p.eta_secs.filter(|_| p.done < p.total) {
            parts.push(format!("ETA {}", duration(eta)));
        }
    }
    parts.extend(checkpoint_and_backpressure(s));
    parts.join(" · ")
}

/// The one line an unbounded run shows instead of a bar.
pub fn live_line(s: &Snapshot) -> String {
    let mut parts = vec![format!("{} records", count(s.records)), format!("{} records/s", rate(s.records_per_sec))];
    if let Some(wm) = s.watermark {
        parts.push(format!("watermark {}", watermark(wm)));
    }
    parts.extend(checkpoint_and_backpressure(s));
    parts.join(" · ")
}

fn checkpoint_and_backpressure(s: &Snapshot) -> Vec<String> {
    let mut parts = Vec::new();
    if let Some(c) = &s.checkpoints {
        match &c.last {
            Some(l) => parts.push(format!("checkpoint {} {} ago ({} ms)", l.id, duration(l.age_secs), l.duration_ms)),
            None => parts.push("no checkpoint yet".into()),
        }
        if c.failed > 0 {
            parts.push(format!("{} failed", c.failed));
        }
    }
    if s.backpressure >= HIGH_BACKPRESSURE {
        let at = s.backpressured.as_deref().map(|o| format!(" at {o}")).unwrap_or_default();
        parts.push(format!("backpressure {:.0}%{at}", s.backpressure * 100.0));
    }
    parts
}

/// `weir status`: the pipeline, then one row per operator.
pub fn table(status: &Status) -> String {
    let mut out = String::new();
    let Some(s) = &status.live else {
        let _ =
            writeln!(out, "pipeline {}  parallelism {}  last checkpoint {}", status.pipeline, status.parallelism, status.last_checkpoint);
        return out;
    };
    let state = if status.stopping && s.state == "running" { "stopping" } else { s.state.as_str() };
    let _ = writeln!(out, "pipeline {}  {state}  up {}  parallelism {}", s.pipeline, duration(s.uptime_secs), status.parallelism);
    let mut line = format!("records {} ({}/s)", count(s.records), rate(s.records_per_sec));
    if let Some(p) = &s.progress {
        let (done, total) = match p.unit {
            Unit::Bytes => (bytes(p.done), bytes(p.total)),
            Unit::Rows => (format!("{} rows", count(p.done)), format!("{} rows", count(p.total))),
        };
        let _ = write!(line, "  input {done} of {total}");
    }
    if let Some(wm) = s.watermark {
        let _ = write!(line, "  watermark {}", watermark(wm));
    }
    let _ = writeln!(out, "{line}");
    match &s.checkpoints {
        None => {
            let _ = writeln!(out, "checkpoints off");
        }
        Some(c) => {
            let mut line = match &c.last {
                Some(l) => format!("last checkpoint {}: {} ago, took {} ms, {}", l.id, duration(l.age_secs), l.duration_ms, bytes(l.bytes)),
                None => "no checkpoint completed yet".into(),
            };
            let _ = write!(line, "  (completed {}, failed {}", c.completed, c.failed);
            if let Some(r) = c.restored_from {
                let _ = write!(line, ", restored from {r}");
            }
            if let Some(r) = status.running {
                let _ = write!(line, ", {r} in progress");
            }
            let _ = writeln!(out, "{line})");
        }
    }
    let _ = writeln!(
        out,
        "backpressure {:.0}%{}{}",
        s.backpressure * 100.0,
        s.backpressured.as_deref().map(|o| format!(" at {o}")).unwrap_or_default(),
        s.bottleneck.as_ref().map(|b| format!(", held back by {} (busy {:.0}%)", b.operator, b.busy * 100.0)).unwrap_or_default()
    );
    for l in &s.kafka_lag {
        let worst =
            l.worst.as_ref().map(|w| format!(" (most behind: {} partition {}, {})", w.topic, w.partition, count(w.records.max(0) as u64)));
        let _ = writeln!(out, "kafka lag {}: {} records{}", l.operator, count(l.records.max(0) as u64), worst.unwrap_or_default());
    }
    let header = ["operator", "kind", "par", "in/s", "out/s", "busy", "backpressure", "input watermark", "output watermark"];
    let mut rows = vec![header.map(String::from).to_vec()];
    for o in &s.operators {
        let wm = |w: Option<Millis>| w.map_or("-".to_string(), watermark);
        let in_rate = if o.kind == "source" { "-".into() } else { rate(o.in_per_sec) };
        let out_rate = if o.kind == "sink" { "-".into() } else { rate(o.out_per_sec) };
        rows.push(vec![
            o.name.clone(),
            o.kind.clone(),
            o.parallelism.to_string(),
            in_rate,
            out_rate,
            format!("{:.0}%", o.busy * 100.0),
            format!("{:.0}%", o.backpressured * 100.0),
            wm(o.input_watermark),
            wm(o.output_watermark),
        ]);
    }
    let widths: Vec<usize> = (0..header.len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    out.push('\n');
    for r in rows {
        let cells: Vec<String> = r.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

/// 950, 12.3k, 4.56M.
pub fn rate(x: f64) -> String {
    match x {
        x if !x.is_finite() || x < 0.0 => "0".into(),
        x if x < 1000.0 => format!("{x:.0}"),
        x if x < 1e6 => format!("{:.1}k", x / 1e3),
        x if x < 1e9 => format!("{:.2}M", x / 1e6),
        x => format!("{:.2}G", x / 1e9),
    }
}

/// 1,234,567.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// 512 B, 26.88 MiB.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit])
}

/// 0.4s, 19s, 3m05s, 2h10m.
pub fn duration(secs: f64) -> String {
    let secs = if secs.is_finite() { secs.max(0.0) } else { 0.0 };
    if secs < 10.0 {
        return format!("{secs:.1}s");
    }
    let s = secs.round() as u64;
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// An event-time watermark as UTC time (`end` once input ended).
pub fn watermark(ms: Millis) -> String {
    if ms == MAX_WATERMARK {
        return "end".into();
    }
    match time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.millisecond()
        ),
        Err(_) => format!("{ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::status::{Bottleneck, Checkpoints, LastCheckpoint, OperatorStatus, PartitionLag, Progress, SourceLag};

    fn snapshot() -> Snapshot {
        Snapshot {
            pipeline: "orders".into(),
            state: "running".into(),
            uptime_secs: 12.34,
            records: 1_234_567,
            records_per_sec: 45_600.0,
            bytes: 3 << 20,
            bytes_per_sec: (26 << 20) as f64,
            progress: Some(Progress { unit: Unit::Bytes, done: 100 << 20, total: 540 << 20, eta_secs: Some(19.2) }),
            checkpoints: Some(Checkpoints {
                completed: 7,
                failed: 0,
                last: Some(LastCheckpoint { id: 7, age_secs: 0.4, duration_ms: 30, bytes: 12_288 }),
                restored_from: Some(3),
                ..Checkpoints::default()
            }),
            backpressure: 0.8,
            backpressured: Some("agg".into()),
            bottleneck: Some(Bottleneck { operator: "out".into(), busy: 0.98 }),
            watermark: Some(1_796_118_166_289),
            operators: vec![OperatorStatus {
                name: "agg".into(),
                kind: "aggregate".into(),
                parallelism: 2,
                records_in: 10,
                records_out: 5,
                in_per_sec: 1500.0,
                out_per_sec: 2.0,
                busy: 0.25,
                backpressured: 0.8,
                input_watermark: Some(1_796_118_166_289),
                output_watermark: Some(MAX_WATERMARK),
                ..OperatorStatus::default()
            }],
            kafka_lag: vec![SourceLag {
                operator: "orders".into(),
                records: 12_345,
                worst: Some(PartitionLag { topic: "orders".into(), partition: 3, records: 9_000 }),
            }],
            warnings: Vec::new(),
        }
    }

    #[test]
    fn the_bar_shows_rates_eta_the_last_checkpoint_and_high_backpressure() {
        let mut s = snapshot();
        assert_eq!(
            bar_message(&s),
            "26.00 MiB/s, 45.6k records/s · 1,234,567 records · ETA 19s · checkpoint 7 0.4s ago (30 ms) · backpressure 80% at agg"
        );
        s.backpressure = 0.2;
        s.progress = None;
        s.checkpoints = None;
        assert_eq!(bar_message(&s), "45.6k records/s", "low backpressure is not shown");
    }

    #[test]
    fn the_live_line_shows_records_rate_watermark_and_checkpoint() {
        let mut s = snapshot();
        s.backpressure = 0.0;
        assert_eq!(
            live_line(&s),
            "1,234,567 records · 45.6k records/s · watermark 2026-12-01T09:42:46.289Z · checkpoint 7 0.4s ago (30 ms)"
        );
    }

    #[test]
    fn the_status_table_has_a_row_per_operator() {
        let status = Status {
            pipeline: "orders".into(),
            parallelism: 2,
            last_checkpoint: 7,
            running: None,
            savepoint_in_progress: false,
            stopping: false,
            live: Some(snapshot()),
        };
        let t = table(&status);
        assert!(t.starts_with("pipeline orders  running  up 12s  parallelism 2\n"), "{t}");
        assert!(t.contains("last checkpoint 7: 0.4s ago, took 30 ms, 12.00 KiB  (completed 7, failed 0, restored from 3)"), "{t}");
        assert!(t.contains("\nbackpressure 80% at agg, held back by out (busy 98%)\n"), "{t}");
        assert!(t.contains("\nkafka lag orders: 12,345 records (most behind: orders partition 3, 9,000)\n"), "{t}");
        let row = t.lines().find(|l| l.starts_with("agg ")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells, ["agg", "aggregate", "2", "1.5k", "2", "25%", "80%", "2026-12-01T09:42:46.289Z", "end"], "{t}");
    }

    #[test]
    fn numbers_read_as_a_person_writes_them() {
        assert_eq!((count(0), count(999), count(1000), count(1_234_567)), ("0".into(), "999".into(), "1,000".into(), "1,234,567".into()));
        assert_eq!(
            (rate(950.4), rate(12_345.0), rate(4_560_000.0), rate(f64::NAN)),
            ("950".into(), "12.3k".into(), "4.56M".into(), "0".into())
        );
        assert_eq!((bytes(512), bytes(1536), bytes(540 << 20)), ("512 B".into(), "1.50 KiB".into(), "540.00 MiB".into()));
        assert_eq!(
            (duration(0.42), duration(19.4), duration(185.0), duration(7800.0)),
            ("0.4s".into(), "19s".into(), "3m05s".into(), "2h10m".into())
        );
        assert_eq!(watermark(MAX_WATERMARK), "end");
    }
}

//! The metrics endpoint: a small HTTP/1.1 server on tokio's listener that
//! serves `/metrics` (Prometheus text format, encoded by `prometheus-client`
//! from the counters the tasks and the checkpoint driver already keep),
//! `/healthz` (the process is up) and `/ready` (the pipeline runs and, with
//! checkpoints, one completed within the last three intervals).
//!
//! Nothing is counted here: a scrape reads the live atomics, so metrics cost
//! the pipeline nothing between scrapes. Every client is bounded like the
//! control socket's: the request head is read up to a cap, only so many
//! connections are served at once, and a slow client is cut off.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::control::Limits;
use crate::operators::OperatorMetrics;
use crate::runtime::metrics::{CheckpointMetrics, Exported, FailureReason};

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("metrics address {address}: {source}")]
    Bind { address: SocketAddr, source: std::io::Error },
}

/// `/ready` wants a checkpoint completed within this many intervals.
pub const READY_INTERVALS: u32 = 3;
/// `/live` fails after this many checkpoint timeouts (and intervals) without a completed checkpoint.
pub const LIVE_TIMEOUTS: u32 = 3;

/// Bind `address` now (before anything is written), so a taken port is an
/// error at start; `MetricsServer::start` serves it once the runtime runs.
pub fn bind(address: SocketAddr) -> Result<std::net::TcpListener, MetricsError> {
    let err = |source| MetricsError::Bind { address, source };
    let listener = std::net::TcpListener::bind(address).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    Ok(listener)
}

/// The serving task; `shutdown` stops it.
pub struct MetricsServer {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Serve on `listener` (from [`bind`]); must be called within a tokio runtime.
    /// Serve on `on`, a runtime of its own (the pipeline's tasks may keep
    /// every worker of theirs busy).
    pub fn start(
        listener: std::net::TcpListener,
        on: &tokio::runtime::Handle,
        exported: Exported,
        status: Option<super::control::StatusSource>,
    ) -> Result<MetricsServer, MetricsError> {
        let address = listener.local_addr().map_err(|source| MetricsError::Bind { address: ([0, 0, 0, 0], 0).into(), source })?;
        let listener = {
            let _on = on.enter();
            TcpListener::from_std(listener).map_err(|source| MetricsError::Bind { address, source })?
        };
        let mut registry = Registry::default();
        registry.register_collector(Box::new(WeirCollector(exported.clone())));
        let site = Arc::new(Site { registry, exported, status });
        let (stop, stop_rx) = watch::channel(false);
        let task = on.spawn(serve(listener, site, stop_rx, Limits::default()));
        tracing::info!(%address, "Metrics endpoint listening.");
        Ok(MetricsServer { stop, task })
    }

    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(2), self.task).await;
    }
}

struct Site {
    registry: Registry,
    exported: Exported,
    /// `GET /status`: the document `weir status --json` prints.
    status: Option<super::control::StatusSource>,
}

async fn serve(listener: TcpListener, site: Arc<Site>, mut stop: watch::Receiver<bool>, limits: Limits) {
    // Refused without waiting for the request: the client learns why instead of hanging.
    let refuse = |stream: TcpStream| {
        let _ = stream.try_write(&response(503, "text/plain", "too many metrics clients\n", true));
    };
    let mut conns = super::accept::accept_loop(&listener, "metrics endpoint", limits.max_clients, &mut stop, refuse, |stream| {
        connection(stream, site.clone(), limits)
    })
    .await;
    conns.abort_all();
}

/// The checkpoint counters, histograms and the newest checkpoint's figures.
fn checkpoint_metrics(enc: &mut DescriptorEncoder, e: &Exported, c: &CheckpointMetrics) -> Result<(), std::fmt::Error> {
    let pipeline = [("pipeline", e.pipeline.as_str())];
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let secs = |a: &std::sync::atomic::AtomicU64| load(a) as f64 / 1000.0;
    counter(enc, "weir_checkpoints_completed", "Checkpoints completed by this process.", &pipeline, load(&c.completed))?;
    checkpoint_failures(enc, &e.pipeline, c)?;
    counter(enc, "weir_savepoints_completed", "Savepoints completed by this process.", &pipeline, load(&c.savepoints_completed))?;
    use crate::runtime::metrics::{DURATION_BOUNDS_US, SIZE_BOUNDS};
    let histograms = [
        (
            "weir_checkpoint_duration_seconds",
            "Trigger to `_metadata` written, of every completed checkpoint.",
            &c.duration_histogram,
            &DURATION_BOUNDS_US,
            1e-6,
        ),
        (
            "weir_checkpoint_alignment_duration_seconds",
            "The longest barrier alignment over the tasks, of every completed checkpoint.",
            &c.alignment_histogram,
            &DURATION_BOUNDS_US,
            1e-6,
        ),
        (
            "weir_checkpoint_size_bytes",
            "Bytes written by every completed checkpoint (state files, in-flight records).",
            &c.size_histogram,
            &SIZE_BOUNDS,
            1.0,
        ),
    ];
    for (name, help, h, bounds, scale) in histograms {
        let (sum, count, buckets) = h.read(bounds, scale);
        let mut m = enc.encode_descriptor(name, help, None, prometheus_client::metrics::MetricType::Histogram)?;
        m.encode_family(&pipeline)?.encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, &buckets, None)?;
    }
    let seconds: [(&str, &str, f64); 7] = [
        (
            "weir_checkpoint_last_duration_seconds",
            "Trigger to `_metadata` written, of the newest completed checkpoint.",
            secs(&c.last_duration_ms),
        ),
        ("weir_checkpoint_last_sync_duration_seconds", "The longest synchronous snapshot part over the tasks.", secs(&c.last_sync_ms)),
        ("weir_checkpoint_last_async_duration_seconds", "The longest asynchronous write over the tasks.", secs(&c.last_async_ms)),
        ("weir_checkpoint_last_alignment_duration_seconds", "The longest barrier alignment over the tasks.", secs(&c.last_alignment_ms)),
        ("weir_checkpoint_last_rendezvous_pause_seconds", "The longest pause of a bundle's RocksDB rendezvous.", secs(&c.last_pause_ms)),
        ("weir_checkpoint_last_completed_timestamp_seconds", "Its `_metadata` time, Unix seconds (0: none).", secs(&c.last_completed_ms)),
        ("weir_checkpoint_interval_seconds", "The configured checkpoint interval.", e.checkpoint_interval.as_secs_f64()),
    ];
    for (name, help, v) in seconds {
        gauge(enc, name, help, &pipeline, v)?;
    }
    let whole: [(&str, &str, u64); 4] = [
        ("weir_checkpoint_last_size_bytes", "Bytes the newest completed checkpoint wrote.", load(&c.last_bytes)),
        (
            "weir_checkpoint_last_reused_size_bytes",
            "Bytes of shared files it referenced from earlier checkpoints.",
            load(&c.last_reused_bytes),
        ),
        ("weir_checkpoint_last_completed_id", "Id of the newest checkpoint this process completed (0: none).", load(&c.last_id)),
        ("weir_checkpoint_restored_id", "The checkpoint or savepoint this run restored from (0: none).", load(&c.restored_id)),
    ];
    for (name, help, v) in whole {
        gauge(enc, name, help, &pipeline, v)?;
    }
    Ok(())
}

/// Records in and out and source bytes, per operator subtask, as the
/// end-of-run summary counts them.
fn records(enc: &mut DescriptorEncoder, e: &Exported) -> Result<(), std::fmt::Error> {
    type Pick = fn(&crate::runtime::Totals) -> u64;
    let per_subtask: [(&str, &str, Pick, fn(&str) -> bool); 3] = [
        ("weir_records_in", "Records an operator or sink subtask received.", |t| t.records_in, |k| k != "source"),
        ("weir_records_out", "Records a source or operator subtask emitted.", |t| t.records_out, |k| k != "sink"),
        ("weir_source_bytes_in", "Bytes a source subtask consumed.", |t| t.bytes_in, |k| k == "source"),
    ];
    for (name, help, pick, applies) in per_subtask {
        let mut m = enc.encode_descriptor(name, help, None, prometheus_client::metrics::MetricType::Counter)?;
        for node in e.nodes.iter().filter(|n| applies(n.kind)) {
            for (i, sub) in node.subtasks.iter().enumerate() {
                let t = crate::runtime::Totals::of(sub);
                let subtask = i.to_string();
                let labels = [("pipeline", e.pipeline.as_str()), ("operator", node.name.as_str()), ("subtask", subtask.as_str())];
                ConstCounter::new(pick(&t)).encode(m.encode_family(&labels)?)?;
            }
        }
    }
    Ok(())
}

/// A join's figures per side, per subtask: records in, late records, and
/// the records it output matched (a pair) or unmatched (an outer join's
/// record alone); and its state entries per side.
fn joins(enc: &mut DescriptorEncoder, e: &Exported) -> Result<(), std::fmt::Error> {
    type Pick = fn(&crate::operators::OperatorMetrics) -> [(&'static str, u64); 2];
    fn load(a: &std::sync::atomic::AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }
    let families: [(&str, &str, &str, Pick); 3] = [
        ("weir_join_records_in", "Records a join subtask received, per input side.", "side", |m| {
            let right = load(&m.right_in);
            [("left", load(&m.records_in).saturating_sub(right)), ("right", right)]
        }),
        ("weir_join_records_late", "Late records a join subtask dropped, per input side.", "side", |m| {
            let right = load(&m.right_late);
            [("left", load(&m.dropped_late).saturating_sub(right)), ("right", right)]
        }),
        ("weir_join_records_out", "Records a join subtask output: pairs (matched) and outer records alone (unmatched).", "match", |m| {
            let alone = load(&m.unmatched_out);
            [("matched", load(&m.records_out).saturating_sub(alone)), ("unmatched", alone)]
        }),
    ];
    for (name, help, label, pick) in families {
        let mut m = enc.encode_descriptor(name, help, None, prometheus_client::metrics::MetricType::Counter)?;
        for node in e.nodes.iter().filter(|n| n.kind == "join") {
            for (i, sub) in node.subtasks.iter().enumerate() {
                let subtask = i.to_string();
                for (value, n) in pick(sub) {
                    let labels = [
                        ("pipeline", e.pipeline.as_str()),
                        ("operator", node.name.as_str()),
                        ("subtask", subtask.as_str()),
                        (label, value),
                    ];
                    ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
                }
            }
        }
    }
    // Entries per side: memory state only (as `weir_state_keys`).
    let counted = |m: &Arc<crate::operators::OperatorMetrics>| m.state_counted.load(Ordering::Relaxed);
    let joins = || e.nodes.iter().filter(|n| n.kind == "join");
    if joins().any(|n| n.subtasks.iter().any(counted)) {
        let help = "Entries in a join subtask's memory state per input side (its records waiting, or a temporal join's versions), as of its last batch.";
        let mut m = enc.encode_descriptor("weir_join_state_entries", help, None, prometheus_client::metrics::MetricType::Gauge)?;
        for node in joins() {
            for (i, sub) in node.subtasks.iter().enumerate().filter(|(_, m)| counted(m)) {
                let subtask = i.to_string();
                let right = load(&sub.right_state_keys);
                for (side, n) in [("left", load(&sub.state_keys).saturating_sub(right)), ("right", right)] {
                    let labels = [
                        ("pipeline", e.pipeline.as_str()),
                        ("operator", node.name.as_str()),
                        ("subtask", subtask.as_str()),
                        ("side", side),
                    ];
                    ConstGauge::new(n as i64).encode(m.encode_family(&labels)?)?;
                }
            }
        }
    }
    Ok(())
}

/// One request per connection (`Connection: close`), read within `limits.idle`.
async fn connection(mut stream: TcpStream, site: Arc<Site>, limits: Limits) {
    let head = tokio::time::timeout(limits.idle, read_head(&mut stream, limits.max_request)).await;
    let reply = match head {
        Err(_) => response(408, "text/plain", "request timeout\n", true),
        Ok(Err(_)) => return,
        Ok(Ok(None)) => response(431, "text/plain", "request head too large\n", true),
        Ok(Ok(Some(head))) => match (request_line(&head), &site.status) {
            // The one route that waits (for the driver's answer).
            (Ok((with_body, path)), Some(source)) if path == "/status" || path == "/api/v1/status" => {
                let document = source.document().await;
                let code = if matches!(document, crate::runtime::control::Response::Status { .. }) { 200 } else { 503 };
                let json = serde_json::to_string(&document).unwrap_or_else(|_| r#"{"ok":false,"error":"encoding"}"#.into());
                response(code, "application/json", &format!("{json}\n"), with_body)
            }
            (Ok((with_body, path)), _) => answer(&site, with_body, &path),
            (Err(refused), _) => refused,
        },
    };
    let _ = tokio::time::timeout(limits.idle, async {
        let _ = stream.write_all(&reply).await;
        let _ = stream.shutdown().await;
    })
    .await;
    // Closing with unread input would reset the connection and could
    // destroy the reply before the client read it (a refused oversized
    // head): read a bounded rest first.
    let _ = tokio::time::timeout(LINGER, async {
        let mut buf = [0u8; 4096];
        let mut left = limits.max_request;
        while left > 0 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// How long a connection is drained after its reply.
const LINGER: Duration = Duration::from_secs(1);

/// Read up to the blank line ending the request head; None past `max` bytes.
async fn read_head(stream: &mut TcpStream, max: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(Some(head));
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(Some(head));
        }
        if head.len() > max {
            return Ok(None);
        }
    }
}

/// The request line `METHOD PATH HTTP/x`: (with a body: GET, not HEAD;
/// the path without its query), or the response that refuses it.
fn request_line(head: &[u8]) -> Result<(bool, String), Vec<u8>> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(response(400, "text/plain", "bad request\n", true));
    };
    let with_body = match method {
        "GET" => true,
        "HEAD" => false,
        _ => return Err(response(405, "text/plain", "only GET and HEAD\n", true)),
    };
    Ok((with_body, target.split('?').next().unwrap_or_default().to_string()))
}

/// Answer a request for `path`.
fn answer(site: &Site, with_body: bool, path: &str) -> Vec<u8> {
    match path {
        "/metrics" => {
            let mut text = String::new();
            // RocksDB's properties are read under its mutex: keep the other
            // tasks of this worker going meanwhile.
            let encoded = crate::blocking::call(|| prometheus_client::encoding::prometheus_text::encode(&mut text, &site.registry));
            match encoded {
                Ok(()) => response(200, prometheus_client::encoding::prometheus_text::CONTENT_TYPE, &text, with_body),
                Err(_) => response(500, "text/plain", "encoding failed\n", with_body),
            }
        }
        "/healthz" => response(200, "text/plain", "ok\n", with_body),
        "/live" => match not_live(&site.exported) {
            None => response(200, "text/plain", "live\n", with_body),
            Some(why) => response(503, "text/plain", &format!("not live: {why}\n"), with_body),
        },
        "/ready" => match not_ready(&site.exported) {
            None => response(200, "text/plain", "ready\n", with_body),
            Some(why) => response(503, "text/plain", &format!("not ready: {why}\n"), with_body),
        },
        _ => match super::web::file(path) {
            Some((kind, text)) => response(200, kind, text, with_body),
            None => response(404, "text/plain", "not found: try /, /metrics, /api/v1/status, /healthz, /live or /ready\n", with_body),
        },
    }
}

/// Why `/live` says 503, if it does: a running pipeline whose checkpoints
/// made no progress for [`LIVE_TIMEOUTS`] times (timeout + interval), the
/// longest a healthy one goes without completing one. Wedged: only a
/// restart helps. Without checkpoints, and while starting or ending, live.
pub fn not_live(e: &Exported) -> Option<String> {
    let c = e.checkpoints.as_ref()?;
    if !e.running.load(Ordering::Relaxed) {
        return None;
    }
    let timeout = Duration::from_millis(c.timeout_ms.load(Ordering::Relaxed));
    let limit = timeout.saturating_add(e.checkpoint_interval).saturating_mul(LIVE_TIMEOUTS);
    let stuck = c.without_progress()?;
    (stuck > limit).then(|| {
        format!(
            "no checkpoint completed for {:.1}s, more than {LIVE_TIMEOUTS} checkpoint timeouts and intervals ({:.1}s)",
            stuck.as_secs_f64(),
            limit.as_secs_f64()
        )
    })
}

/// Why `/ready` says 503, if it does.
pub fn not_ready(e: &Exported) -> Option<String> {
    if !e.running.load(Ordering::Relaxed) {
        return Some("the pipeline is not running".into());
    }
    let c = e.checkpoints.as_ref()?;
    let window = e.checkpoint_interval.saturating_mul(READY_INTERVALS);
    match c.since_last() {
        None => Some("no checkpoint completed yet".into()),
        Some(age) if age > window => Some(format!(
            "the last checkpoint completed {:.1}s ago, more than {READY_INTERVALS} intervals ({:.1}s)",
            age.as_secs_f64(),
            window.as_secs_f64()
        )),
        Some(_) => None,
    }
}

/// Every response: no sniffing, no caching, and (for the page) scripts and
/// styles from this server only, never framed by another site.
const SAFE: &str = "X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\nContent-Security-Policy: default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'\r\n";

fn response(status: u16, content_type: &str, body: &str, with_body: bool) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    };
    let mut out = String::new();
    let _ = write!(
        out,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{SAFE}\r\n",
        body.len()
    );
    if with_body {
        out.push_str(body);
    }
    out.into_bytes()
}

/// Encodes the live counters at each scrape.
#[derive(Debug)]
struct WeirCollector(Exported);

impl Collector for WeirCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &self.0;
        let pipeline = [("pipeline", e.pipeline.as_str())];
        let version = [("version", env!("CARGO_PKG_VERSION"))];
        gauge(&mut enc, "weir_build_info", "Always 1; the label is weir's version.", &version, 1i64)?;
        process_metrics(&mut enc, &super::process::read())?;
        let running = i64::from(e.running.load(Ordering::Relaxed));
        gauge(
            &mut enc,
            "weir_pipeline_running",
            "1 while the pipeline's tasks run (after restore), 0 before and after.",
            &pipeline,
            running,
        )?;

        records(&mut enc, e)?;
        joins(&mut enc, e)?;
        counter(
            &mut enc,
            "weir_restarts",
            "Restarts of the pipeline in this process after a failure (`restart:`), from its latest checkpoint.",
            &pipeline,
            e.restarts.load(Ordering::Relaxed),
        )?;
        dropped(&mut enc, e)?;

        subtask_load(&mut enc, e)?;

        sources_and_sinks(&mut enc, e)?;
        memory_state(&mut enc, e)?;
        rocksdb_properties(&mut enc, e)?;
        kafka_lag(&mut enc, e)?;
        let Some(c) = &e.checkpoints else { return Ok(()) };
        checkpoint_metrics(&mut enc, e, c)?;
        checkpoint_progress(&mut enc, &pipeline, c)?;
        Ok(())
    }
}

/// Per operator subtask: busy, idle and backpressured time (counters the
/// task switches once per batch), input and output watermark, and the fill
/// of the fullest input and output channel (read from the channels now).
/// Operators chained into one task share its times.
fn subtask_load(enc: &mut DescriptorEncoder, e: &Exported) -> Result<(), std::fmt::Error> {
    use crate::runtime::gauges::{watermark_seconds, PhaseNanos, SubtaskGauges};
    use prometheus_client::metrics::MetricType;
    let labelled = |node: &crate::runtime::NodeMetrics, i: usize| (node.name.clone(), i.to_string());
    type Time = fn(&PhaseNanos) -> u64;
    let times: [(&str, &str, Time); 3] = [
        ("weir_operator_busy_seconds", "Time the subtask's task spent processing (polling, operators, sink writes).", PhaseNanos::busy),
        ("weir_operator_idle_seconds", "Time the subtask's task spent waiting for input.", PhaseNanos::idle),
        (
            "weir_operator_backpressured_seconds",
            "Time the subtask's task spent blocked on a full output channel.",
            PhaseNanos::backpressured,
        ),
    ];
    // One reading per task for all three counters.
    let readings: Vec<Vec<PhaseNanos>> = e.nodes.iter().map(|n| n.gauges.iter().map(|g| g.times.read()).collect()).collect();
    for (name, help, pick) in times {
        let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (node, reading) in e.nodes.iter().zip(&readings) {
            for (i, r) in reading.iter().enumerate() {
                let (operator, subtask) = labelled(node, i);
                let labels = [("pipeline", e.pipeline.as_str()), ("operator", operator.as_str()), ("subtask", subtask.as_str())];
                ConstCounter::new(pick(r) as f64 / 1e9).encode(m.encode_family(&labels)?)?;
            }
        }
    }
    type Gauge = fn(&SubtaskGauges) -> Option<f64>;
    let gauges: [(&str, &str, Gauge); 5] = [
        (
            "weir_operator_input_watermark_seconds",
            "The subtask's input watermark, Unix seconds (+Inf after the end of input; absent before the first).",
            |g| watermark_seconds(g.input_watermark.load(Ordering::Relaxed)),
        ),
        (
            "weir_operator_output_watermark_seconds",
            "The watermark the subtask emits, Unix seconds (+Inf after the end of input; absent before the first).",
            |g| watermark_seconds(g.output_watermark.load(Ordering::Relaxed)),
        ),
        (
            "weir_operator_event_time_lag_seconds",
            "Scrape time minus the subtask's input watermark (a source's: its output watermark), seconds; absent before the first and after the end of input.",
            event_time_lag,
        ),
        (
            "weir_operator_input_channel_fill_ratio",
            "How full the subtask's fullest input channel is (0 to 1); only the first operator of a task reads channels.",
            SubtaskGauges::input_fill,
        ),
        (
            "weir_operator_output_channel_fill_ratio",
            "How full the subtask's fullest output channel is (0 to 1); only the last operator of a task writes channels.",
            SubtaskGauges::output_fill,
        ),
    ];
    for (name, help, pick) in gauges {
        let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for node in &e.nodes {
            for (i, g) in node.gauges.iter().enumerate() {
                let Some(v) = pick(g) else { continue };
                let (operator, subtask) = labelled(node, i);
                let labels = [("pipeline", e.pipeline.as_str()), ("operator", operator.as_str()), ("subtask", subtask.as_str())];
                ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
            }
        }
    }
    Ok(())
}

/// The `process_*` figures Prometheus' client libraries export, under
/// their usual names (no labels); a figure that could not be read is left out.
fn process_metrics(enc: &mut DescriptorEncoder, p: &super::process::ProcessFigures) -> Result<(), std::fmt::Error> {
    let none: [(&str, &str); 0] = [];
    if let Some(v) = p.cpu_seconds {
        let c = ConstCounter::new(v);
        let mut m =
            enc.encode_descriptor("process_cpu_seconds", "User and system CPU time of the process, seconds.", None, c.metric_type())?;
        c.encode(m.encode_family(&none)?)?;
    }
    let gauges: [(&str, &str, Option<f64>); 5] = [
        ("process_resident_memory_bytes", "Resident memory size, bytes.", p.resident_bytes.map(|v| v as f64)),
        ("process_virtual_memory_bytes", "Virtual memory size, bytes.", p.virtual_bytes.map(|v| v as f64)),
        ("process_open_fds", "Open file descriptors.", p.open_fds.map(|v| v as f64)),
        ("process_max_fds", "The soft limit of open file descriptors.", p.max_fds.map(|v| v as f64)),
        ("process_start_time_seconds", "When the process started, Unix seconds.", p.start_time_seconds),
    ];
    for (name, help, v) in gauges {
        if let Some(v) = v {
            let g = ConstGauge::new(v);
            let mut m = enc.encode_descriptor(name, help, None, g.metric_type())?;
            g.encode(m.encode_family(&none)?)?;
        }
    }
    Ok(())
}

/// Each source subtask's bounded input (the total `weir_source_bytes_in_total`
/// or `weir_records_out_total` reaches), and the part files file sinks published.
fn sources_and_sinks(enc: &mut DescriptorEncoder, e: &Exported) -> Result<(), std::fmt::Error> {
    use crate::connectors::source::Extent;
    let families: [(&str, &str, fn(&Extent) -> Option<u64>); 2] = [
        ("weir_source_input_size_bytes", "Bytes of bounded input a source subtask reads in all (files).", |x| match x {
            Extent::Bytes(b) => Some(*b),
            Extent::Rows(_) => None,
        }),
        ("weir_source_input_rows", "Rows of bounded input a source subtask emits in all (datagen with rows).", |x| match x {
            Extent::Rows(r) => Some(*r),
            Extent::Bytes(_) => None,
        }),
    ];
    for (name, help, pick) in families {
        let series: Vec<(&str, u16, u64)> =
            e.details.source_extents.iter().filter_map(|(op, i, x)| Some((op.as_str(), *i, pick(x)?))).collect();
        if series.is_empty() {
            continue;
        }
        let mut m = enc.encode_descriptor(name, help, None, prometheus_client::metrics::MetricType::Gauge)?;
        for (op, i, v) in series {
            let subtask = i.to_string();
            let labels = [("pipeline", e.pipeline.as_str()), ("operator", op), ("subtask", subtask.as_str())];
            ConstGauge::new(v as i64).encode(m.encode_family(&labels)?)?;
        }
    }
    records_committed(enc, e)?;
    kafka_transactions(enc, e)?;
    if e.details.file_sinks.is_empty() {
        return Ok(());
    }
    subtask_counters(
        enc,
        e,
        ("weir_sink_parts_published", "Part files a file sink subtask published (renamed to their final name)."),
        |n| e.details.file_sinks.iter().any(|s| s == n),
        |sub| sub.parts_published.load(Ordering::Relaxed),
    )
}

/// One counter family, (name, help), with a series per subtask of the
/// nodes `of` picks, valued by `value` from each subtask's counters.
fn subtask_counters(
    enc: &mut DescriptorEncoder,
    e: &Exported,
    (name, help): (&str, &str),
    of: impl Fn(&str) -> bool,
    value: impl Fn(&OperatorMetrics) -> u64,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, prometheus_client::metrics::MetricType::Counter)?;
    for node in e.nodes.iter().filter(|n| of(&n.name)) {
        for (i, sub) in node.subtasks.iter().enumerate() {
            let subtask = i.to_string();
            let labels = [("pipeline", e.pipeline.as_str()), ("operator", node.name.as_str()), ("subtask", subtask.as_str())];
            ConstCounter::new(value(sub)).encode(m.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// Each Kafka source subtask's lag per assigned partition
/// (`connectors::source::consumer_lags`).
fn kafka_lag(enc: &mut DescriptorEncoder, e: &Exported) -> Result<(), std::fmt::Error> {
    if e.details.kafka_sources.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(
        "weir_kafka_consumer_lag",
        "Records of a Kafka partition past a source subtask's position (last stable offset minus position).",
        None,
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    for (op, i, stats) in &e.details.kafka_sources {
        let subtask = i.to_string();
        for (topic, partition, lag) in stats.consumer_lags() {
            let partition = partition.to_string();
            let labels = [
                ("pipeline", e.pipeline.as_str()),
                ("operator", op.as_str()),
                ("subtask", subtask.as_str()),
                ("topic", topic.as_str()),
                ("partition", partition.as_str()),
            ];
            ConstGauge::new(lag).encode(m.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// Records each subtask dropped, by reason (`late`, `bad_record`), and of
/// them those written to a dead letter.
fn dropped(enc: &mut DescriptorEncoder, e: &Exported) -> Result<(), std::fmt::Error> {
    use prometheus_client::metrics::MetricType;
    let mut m = enc.encode_descriptor(
        "weir_records_dropped",
        "Records a subtask dropped, by reason: late for their window or TTL, or bad input (skipped or dead-lettered).",
        None,
        MetricType::Counter,
    )?;
    for node in &e.nodes {
        for (i, sub) in node.subtasks.iter().enumerate() {
            let subtask = i.to_string();
            let late = sub.dropped_late.load(Ordering::Relaxed);
            let bad = sub.records_dropped.load(Ordering::Relaxed).saturating_sub(late);
            for (reason, v) in [("late", late), ("bad_record", bad)] {
                let labels = [
                    ("pipeline", e.pipeline.as_str()),
                    ("operator", node.name.as_str()),
                    ("subtask", subtask.as_str()),
                    ("reason", reason),
                ];
                ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
            }
        }
    }
    subtask_counters(
        enc,
        e,
        ("weir_records_dead_lettered", "Dropped records a subtask wrote to its dead letter."),
        |_| true,
        |sub| sub.dead_lettered.load(Ordering::Relaxed),
    )
}

/// File and Kafka sinks: the records each subtask made durable and visible
/// (docs/metrics.md says what that is per sink).
fn records_committed(enc: &mut DescriptorEncoder, e: &Exported) -> Result<(), std::fmt::Error> {
    if e.details.committing_sinks.is_empty() {
        return Ok(());
    }
    subtask_counters(
        enc,
        e,
        (
            "weir_sink_records_committed",
            "Records a sink subtask committed: in published part files, committed Kafka transactions, or acknowledged and covered by a completed checkpoint.",
        ),
        |n| e.details.committing_sinks.iter().any(|s| s == n),
        |sub| sub.records_committed.load(Ordering::Relaxed),
    )
}

/// Exactly-once Kafka and PostgreSQL sinks: open and pending transactions.
fn kafka_transactions(enc: &mut DescriptorEncoder, e: &Exported) -> Result<(), std::fmt::Error> {
    use prometheus_client::metrics::MetricType;
    if e.details.transactional_sinks.is_empty() {
        return Ok(());
    }
    type Pick = fn(&crate::operators::OperatorMetrics) -> &std::sync::atomic::AtomicU64;
    let families: [(&str, &str, MetricType, Pick); 2] = [
        (
            "weir_sink_transactions_open",
            "1 while a sink subtask's Kafka or PostgreSQL transaction is open (records sent, not committed).",
            MetricType::Gauge,
            |m| &m.transactions_open,
        ),
        (
            "weir_sink_transactions_pending",
            "Transactions a sink subtask staged that wait for their checkpoint to complete.",
            MetricType::Gauge,
            |m| &m.transactions_pending,
        ),
    ];
    for (name, help, kind, pick) in families {
        let mut m = enc.encode_descriptor(name, help, None, kind)?;
        for node in e.nodes.iter().filter(|n| e.details.transactional_sinks.contains(&n.name)) {
            for (i, sub) in node.subtasks.iter().enumerate() {
                let subtask = i.to_string();
                let labels = [("pipeline", e.pipeline.as_str()), ("operator", node.name.as_str()), ("subtask", subtask.as_str())];
                let v = pick(sub).load(Ordering::Relaxed);
                match kind {
                    MetricType::Counter => ConstCounter::new(v).encode(m.encode_family(&labels)?)?,
                    _ => ConstGauge::new(v as i64).encode(m.encode_family(&labels)?)?,
                }
            }
        }
    }
    Ok(())
}

/// Memory-backed keyed state per operator subtask, as its task last
/// published it (once per batch): entries over all the operator's tables and
/// their key + value bytes. Subtasks without memory state have no series.
fn memory_state(enc: &mut DescriptorEncoder, e: &Exported) -> Result<(), std::fmt::Error> {
    use prometheus_client::metrics::MetricType;
    type Pick = fn(&crate::operators::OperatorMetrics) -> u64;
    let families: [(&str, &str, Pick); 2] = [
        ("weir_state_keys", "Entries in the subtask's memory state (all the operator's tables), as of its last batch.", |m| {
            m.state_keys.load(Ordering::Relaxed)
        }),
        (
            "weir_state_size_bytes",
            "Key and value bytes of those entries (not the allocator's or the tables' overhead), as of its last batch.",
            |m| m.state_bytes.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, pick) in families {
        let counted = |m: &&Arc<crate::operators::OperatorMetrics>| m.state_counted.load(Ordering::Relaxed);
        if !e.nodes.iter().any(|n| n.subtasks.iter().any(|m| counted(&m))) {
            continue;
        }
        let mut f = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for node in &e.nodes {
            for (i, m) in node.subtasks.iter().enumerate().filter(|(_, m)| counted(m)) {
                let subtask = i.to_string();
                let labels = [("pipeline", e.pipeline.as_str()), ("operator", node.name.as_str()), ("subtask", subtask.as_str())];
                ConstGauge::new(pick(m) as i64).encode(f.encode_family(&labels)?)?;
            }
        }
    }
    Ok(())
}

/// RocksDB's own figures per bundle and column family (one per keyed
/// operator), as `rocksdb.<property>` names them.
const ROCKSDB_PROPERTIES: [(&str, &str, &str); 7] = [
    ("weir_rocksdb_estimate_num_keys", "rocksdb.estimate-num-keys", "Estimated keys in the column family (RocksDB's estimate)."),
    ("weir_rocksdb_size_all_mem_tables_bytes", "rocksdb.size-all-mem-tables", "Bytes of the active, unflushed and pinned memtables."),
    (
        "weir_rocksdb_estimate_pending_compaction_bytes",
        "rocksdb.estimate-pending-compaction-bytes",
        "Bytes compaction must rewrite to bring every level under its target.",
    ),
    (
        "weir_rocksdb_actual_delayed_write_rate",
        "rocksdb.actual-delayed-write-rate",
        "The write rate RocksDB slows writes to, bytes per second (0: writes are not delayed).",
    ),
    (
        "weir_rocksdb_is_write_stopped",
        "rocksdb.is-write-stopped",
        "1 while RocksDB stops writes (too many memtables or L0 files, too much pending compaction).",
    ),
    (
        "weir_rocksdb_block_cache_usage_bytes",
        "rocksdb.block-cache-usage",
        "Bytes in the block cache (one cache per bundle, shared by its column families).",
    ),
    ("weir_rocksdb_live_sst_files_size_bytes", "rocksdb.live-sst-files-size", "Bytes of the SST files of the current version."),
];

fn rocksdb_properties(enc: &mut DescriptorEncoder, e: &Exported) -> Result<(), std::fmt::Error> {
    let dbs: Vec<(usize, Arc<crate::state::rocks::BundleDb>)> =
        e.details.state_dbs.iter().enumerate().filter_map(|(b, db)| Some((b, db.upgrade()?))).collect();
    if dbs.is_empty() {
        return Ok(());
    }
    for (name, property, help) in ROCKSDB_PROPERTIES {
        let mut m = enc.encode_descriptor(name, help, None, prometheus_client::metrics::MetricType::Gauge)?;
        for (b, db) in &dbs {
            let bundle = b.to_string();
            for cf in &e.details.column_families {
                let Some(v) = db.int_property(cf, property) else { continue };
                let labels = [("pipeline", e.pipeline.as_str()), ("bundle", bundle.as_str()), ("operator", cf.as_str())];
                ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(m.encode_family(&labels)?)?;
            }
        }
    }
    Ok(())
}

/// `weir_checkpoints_failed_total` by reason, and the aborts of savepoints.
fn checkpoint_failures(enc: &mut DescriptorEncoder, pipeline: &str, c: &CheckpointMetrics) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(
        "weir_checkpoints_failed",
        "Checkpoints (not savepoints) aborted, by reason: declined by a task, timeout, a failed write, superseded, conflict.",
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for r in FailureReason::ALL {
        let labels = [("pipeline", pipeline), ("reason", r.label())];
        ConstCounter::new(c.failed_by[r as usize].load(Ordering::Relaxed)).encode(m.encode_family(&labels)?)?;
    }
    let pipeline = [("pipeline", pipeline)];
    counter(
        enc,
        "weir_checkpoints_aborted",
        "Checkpoints and savepoints aborted (each \"Checkpoint aborted.\" log line).",
        &pipeline,
        c.failed.load(Ordering::Relaxed),
    )?;
    counter(enc, "weir_savepoints_failed", "Savepoints aborted.", &pipeline, c.savepoints_failed.load(Ordering::Relaxed))
}

/// What is running now, the start delay and in-flight bytes of the newest
/// checkpoint, and the restore.
fn checkpoint_progress(enc: &mut DescriptorEncoder, pipeline: &[(&str, &str); 1], c: &CheckpointMetrics) -> Result<(), std::fmt::Error> {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let in_progress = u64::from(load(&c.in_progress) != 0);
    gauge(
        enc,
        "weir_checkpoints_in_progress",
        "Checkpoints or savepoints in progress (0 or 1: one runs at a time).",
        pipeline,
        in_progress,
    )?;
    gauge(
        enc,
        "weir_checkpoint_in_progress_id",
        "Id of the checkpoint or savepoint in progress (0: none).",
        pipeline,
        load(&c.in_progress),
    )?;
    gauge(
        enc,
        "weir_checkpoints_consecutive_failures",
        "Checkpoints failed in a row (reset by a completion); one more than weir_checkpoint_tolerable_failures stops the pipeline.",
        pipeline,
        load(&c.consecutive_failures),
    )?;
    gauge(
        enc,
        "weir_checkpoint_tolerable_failures",
        "The configured checkpoint.tolerable_failures.",
        pipeline,
        load(&c.tolerable_failures),
    )?;
    gauge(
        enc,
        "weir_checkpoint_last_start_delay_seconds",
        "The longest time from the trigger to the first barrier at a task, of the newest completed checkpoint.",
        pipeline,
        load(&c.last_start_delay_ms) as f64 / 1000.0,
    )?;
    gauge(
        enc,
        "weir_checkpoint_last_in_flight_size_bytes",
        "Bytes of in-flight records (unaligned channel state) the newest completed checkpoint persisted.",
        pipeline,
        load(&c.last_in_flight_bytes),
    )?;
    if let Some(took) = c.restore.get().and_then(|clock| clock.took()) {
        gauge(
            enc,
            "weir_restore_duration_seconds",
            "Loading the restored checkpoint until the last task had its state back.",
            pipeline,
            took.as_secs_f64(),
        )?;
    }
    Ok(())
}

/// How far event time lags the wall clock at a subtask, now: the scrape
/// time minus its input watermark, or for a source (which has none) the
/// watermark it emits. None while that watermark is unknown or at the end.
fn event_time_lag(g: &crate::runtime::gauges::SubtaskGauges) -> Option<f64> {
    use crate::runtime::gauges::watermark_seconds;
    let input = watermark_seconds(g.input_watermark.load(Ordering::Relaxed));
    let wm = input.or_else(|| watermark_seconds(g.output_watermark.load(Ordering::Relaxed))).filter(|w| w.is_finite())?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64();
    Some(now - wm)
}

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, labels: &[(&str, &str); 1], v: u64) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(v);
    let mut m = enc.encode_descriptor(name, help, None, c.metric_type())?;
    c.encode(m.encode_family(labels)?)
}

fn gauge<V>(enc: &mut DescriptorEncoder, name: &str, help: &str, labels: &[(&str, &str); 1], v: V) -> Result<(), std::fmt::Error>
where
    V: prometheus_client::encoding::EncodeGaugeValue,
{
    let g = ConstGauge::new(v);
    let mut m = enc.encode_descriptor(name, help, None, g.metric_type())?;
    g.encode(m.encode_family(labels)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::metrics::{CheckpointMetrics, Completed, NodeMetrics};

    fn exported(checkpoints: bool) -> Exported {
        let nodes = vec![NodeMetrics::new("src", "source", 2), NodeMetrics::new("agg", "aggregate", 2), NodeMetrics::new("out", "sink", 2)];
        nodes[1].subtasks[1].records_in.store(7, Ordering::Relaxed);
        Exported {
            pipeline: "p".into(),
            nodes,
            checkpoints: checkpoints.then(Arc::<CheckpointMetrics>::default),
            checkpoint_interval: Duration::from_secs(60),
            running: Default::default(),
            restarts: Default::default(),
            details: Default::default(),
        }
    }

    /// What a connection answers to `head` (the routes that do not wait).
    fn route(site: &Site, head: &[u8]) -> Vec<u8> {
        match request_line(head) {
            Ok((with_body, path)) => answer(site, with_body, &path),
            Err(refused) => refused,
        }
    }

    fn site(e: Exported) -> Site {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(WeirCollector(e.clone())));
        Site { registry, exported: e, status: None }
    }

    fn text(reply: &[u8]) -> String {
        String::from_utf8(reply.to_vec()).unwrap()
    }

    #[test]
    fn subtask_load_watermarks_and_channel_fill_are_exported_per_subtask() {
        use crate::runtime::gauges::Phase;
        let e = exported(false);
        let agg = &e.nodes[1].gauges[1];
        agg.times.enter(Phase::Backpressured);
        std::thread::sleep(Duration::from_millis(20));
        agg.times.stop();
        agg.set_watermarks(1500, crate::types::MAX_WATERMARK);
        let (tx, _rx) = crate::runtime::channel::channel(std::num::NonZeroUsize::new(4).unwrap());
        let _ = agg.outputs.set(vec![tx.probe()]);
        let sent = async { tx.send(crate::runtime::message::Message::Idle).await };
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(sent).unwrap();
        let body = text(&route(&site(e), b"GET /metrics HTTP/1.1\r\n\r\n"));
        let value = |prefix: &str| -> f64 {
            let line = body.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} in\n{body}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let labels = r#"{pipeline="p",operator="agg",subtask="1"}"#;
        assert!(value(&format!("weir_operator_backpressured_seconds_total{labels}")) >= 0.02);
        assert_eq!(value(&format!("weir_operator_busy_seconds_total{labels}")), 0.0);
        assert_eq!(value(&format!("weir_operator_input_watermark_seconds{labels}")), 1.5);
        assert_eq!(value(&format!("weir_operator_output_watermark_seconds{labels}")), f64::INFINITY);
        assert_eq!(value(&format!("weir_operator_output_channel_fill_ratio{labels}")), 0.25);
        // Its input watermark is 1.5 s after the epoch: event time lags the clock by (about) now.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!((value(&format!("weir_operator_event_time_lag_seconds{labels}")) - (now - 1.5)).abs() < 60.0);
        assert!(body.contains("# TYPE weir_operator_idle_seconds_total counter"), "{body}");
        assert!(!body.contains(r#"weir_operator_input_watermark_seconds{pipeline="p",operator="agg",subtask="0"}"#), "none yet: absent");
        assert!(!body.contains("weir_operator_input_channel_fill_ratio{"), "no subtask here reads channels");
    }

    #[test]
    fn dropped_records_are_exported_by_reason_and_dead_lettered_ones_apart() {
        let e = exported(false);
        let agg = &e.nodes[1].subtasks[0];
        agg.records_dropped.store(5, Ordering::Relaxed);
        agg.dropped_late.store(2, Ordering::Relaxed);
        agg.dead_lettered.store(1, Ordering::Relaxed);
        let body = text(&route(&site(e), b"GET /metrics HTTP/1.1\r\n\r\n"));
        let at = r#"pipeline="p",operator="agg",subtask="0""#;
        for want in [
            format!(r#"weir_records_dropped_total{{{at},reason="late"}} 2"#),
            format!(r#"weir_records_dropped_total{{{at},reason="bad_record"}} 3"#),
            format!(r#"weir_records_dead_lettered_total{{{at}}} 1"#),
            r#"weir_records_dropped_total{pipeline="p",operator="src",subtask="1",reason="late"} 0"#.to_string(),
        ] {
            assert!(body.lines().any(|l| l == want), "no {want} in\n{body}");
        }
    }

    #[test]
    fn consumer_lag_is_read_per_assigned_partition_from_librdkafka_statistics() {
        use crate::connectors::source::consumer_lags;
        // As librdkafka writes them: consumer_lag -1 without committed offsets.
        let json = br#"{"name": "c", "topics": {"orders": {"topic": "orders", "partitions": {
            "0": {"partition": 0, "consumer_lag": -1, "hi_offset": 3000, "ls_offset": 2900, "app_offset": 1200},
            "1": {"partition": 1, "consumer_lag": -1, "hi_offset": 50, "ls_offset": 50, "app_offset": -1001},
            "-1": {"partition": -1, "consumer_lag": -1, "hi_offset": -1001, "ls_offset": -1001, "app_offset": -1001}}},
            "audit": {"partitions": {"3": {"partition": 3, "hi_offset": 7, "ls_offset": -1001, "app_offset": 7}}}}}"#;
        assert_eq!(consumer_lags(json), vec![("audit".into(), 3, 0), ("orders".into(), 0, 1700)]);
        assert_eq!(consumer_lags(b"{not json"), vec![]);
        assert_eq!(consumer_lags(b""), vec![], "no statistics yet");
    }

    #[test]
    fn ready_needs_a_running_pipeline_and_a_recent_checkpoint() {
        let e = exported(true);
        assert_eq!(not_ready(&e).as_deref(), Some("the pipeline is not running"));
        e.running.store(true, Ordering::Relaxed);
        assert_eq!(not_ready(&e).as_deref(), Some("no checkpoint completed yet"));
        e.checkpoints.as_ref().unwrap().on_completed(&Completed { id: 1, ..Completed::default() });
        assert_eq!(not_ready(&e), None);
        let mut stale = e.clone();
        stale.checkpoint_interval = Duration::ZERO;
        std::thread::sleep(Duration::from_millis(2));
        assert!(not_ready(&stale).is_some_and(|w| w.contains("more than 3 intervals")), "{:?}", not_ready(&stale));
        let off = exported(false);
        off.running.store(true, Ordering::Relaxed);
        assert_eq!(not_ready(&off), None, "without checkpoints, running is ready");
    }

    #[test]
    fn routes_methods_and_head_without_body() {
        let s = site(exported(false));
        assert!(text(&route(&s, b"GET /healthz HTTP/1.1\r\n\r\n")).ends_with("\r\n\r\nok\n"));
        assert!(text(&route(&s, b"GET /nope HTTP/1.1\r\n\r\n")).starts_with("HTTP/1.1 404 "));
        assert!(text(&route(&s, b"POST /metrics HTTP/1.1\r\n\r\n")).starts_with("HTTP/1.1 405 "));
        assert!(text(&route(&s, b"\r\n\r\n")).starts_with("HTTP/1.1 400 "));
        let head = text(&route(&s, b"HEAD /metrics HTTP/1.1\r\n\r\n"));
        assert!(head.starts_with("HTTP/1.1 200 ") && head.ends_with("\r\n\r\n"), "{head}");
        assert!(text(&route(&s, b"GET /ready HTTP/1.1\r\n\r\n")).starts_with("HTTP/1.1 503 "));
    }

    #[test]
    fn a_join_has_its_records_per_side_and_its_outputs_matched_or_not() {
        let mut e = exported(false);
        e.nodes.push(NodeMetrics::new("j", "join", 1));
        let m = &e.nodes[3].subtasks[0];
        for (counter, n) in
            [(&m.records_in, 10), (&m.right_in, 4), (&m.dropped_late, 3), (&m.right_late, 1), (&m.records_out, 9), (&m.unmatched_out, 2)]
        {
            counter.store(n, Ordering::Relaxed);
        }
        let no_state = text(&route(&site(e.clone()), b"GET /metrics HTTP/1.1\r\n\r\n"));
        assert!(!no_state.contains("weir_join_state_entries"), "no series before the state is counted (or on RocksDB)");
        m.set_state(crate::state::StateStats { keys: 12, bytes: 300 }, 5);
        let body = text(&route(&site(e), b"GET /metrics HTTP/1.1\r\n\r\n"));
        for want in [
            r#"weir_join_state_entries{pipeline="p",operator="j",subtask="0",side="left"} 7"#,
            r#"weir_join_state_entries{pipeline="p",operator="j",subtask="0",side="right"} 5"#,
            r#"weir_join_records_in_total{pipeline="p",operator="j",subtask="0",side="left"} 6"#,
            r#"weir_join_records_in_total{pipeline="p",operator="j",subtask="0",side="right"} 4"#,
            r#"weir_join_records_late_total{pipeline="p",operator="j",subtask="0",side="left"} 2"#,
            r#"weir_join_records_late_total{pipeline="p",operator="j",subtask="0",side="right"} 1"#,
            r#"weir_join_records_out_total{pipeline="p",operator="j",subtask="0",match="matched"} 7"#,
            r#"weir_join_records_out_total{pipeline="p",operator="j",subtask="0",match="unmatched"} 2"#,
        ] {
            assert!(body.lines().any(|l| l == want), "no {want} in\n{body}");
        }
        assert!(!body.contains(r#"weir_join_records_in_total{pipeline="p",operator="agg""#), "only joins");
    }

    #[test]
    fn metrics_text_has_one_series_per_subtask_and_checkpoints_only_when_on() {
        let body = text(&route(&site(exported(false)), b"GET /metrics?x=1 HTTP/1.1\r\n\r\n"));
        assert!(body.contains(r#"weir_records_in_total{pipeline="p",operator="agg",subtask="1"} 7"#), "{body}");
        assert!(body.contains(r#"weir_records_in_total{pipeline="p",operator="agg",subtask="0"} 0"#), "{body}");
        assert!(!body.contains(r#"weir_records_in_total{pipeline="p",operator="src""#), "sources have no records in");
        assert!(!body.contains(r#"weir_records_out_total{pipeline="p",operator="out""#), "sinks have no records out");
        assert!(!body.contains("weir_checkpoint"), "{body}");
        let e = exported(true);
        let c = e.checkpoints.clone().unwrap();
        c.on_completed(&Completed { id: 4, bytes: 1234, duration: Duration::from_millis(1500), created_ms: 2500, ..Completed::default() });
        c.on_failed(7, false, FailureReason::Timeout, "timed out");
        c.on_failed(8, true, FailureReason::Declined, "declined");
        let body = text(&route(&site(e), b"GET /metrics HTTP/1.1\r\n\r\n"));
        #[cfg(target_os = "linux")]
        for name in ["process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ", "process_start_time_seconds "] {
            assert!(body.lines().any(|l| l.starts_with(name)), "no {name} in\n{body}");
        }
        for line in [
            r#"weir_checkpoints_completed_total{pipeline="p"} 1"#,
            r#"weir_checkpoints_failed_total{pipeline="p",reason="timeout"} 1"#,
            r#"weir_checkpoints_failed_total{pipeline="p",reason="declined"} 0"#,
            r#"weir_checkpoints_aborted_total{pipeline="p"} 2"#,
            r#"weir_savepoints_failed_total{pipeline="p"} 1"#,
            r#"weir_checkpoints_in_progress{pipeline="p"} 0"#,
            r#"weir_checkpoint_last_completed_id{pipeline="p"} 4"#,
            r#"weir_checkpoint_last_size_bytes{pipeline="p"} 1234"#,
            r#"weir_checkpoint_last_duration_seconds{pipeline="p"} 1.5"#,
            r#"weir_checkpoint_last_completed_timestamp_seconds{pipeline="p"} 2.5"#,
        ] {
            assert!(body.lines().any(|l| l == line), "no {line} in\n{body}");
        }
    }
}

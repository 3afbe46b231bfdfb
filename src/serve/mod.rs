//! The network edges of a running pipeline, started and stopped by the
//! CLI around the engine: the control socket (savepoints, status), the HTTP
//! endpoint (`/metrics` in the Prometheus text format, `/healthz`,
//! `/ready`, the status document and the web page that draws it) and the
//! process figures it reports. They read what the
//! runtime exports and send it commands; the runtime never calls them.

mod accept;
pub mod control;
pub mod http;
pub mod process;
mod web;

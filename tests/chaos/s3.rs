//! Checkpoints on S3 in a case, when the environment names a server
//! (`AWS_ENDPOINT_URL` or `WEIR_S3_ENDPOINT`, as scripts/test.sh sets):
//! each case gets a prefix of its own, and its runs can go through a proxy
//! (tests/e2e/proxy.rs) for network faults and stale owners.

use std::time::{SystemTime, UNIX_EPOCH};

/// The lease of a case's runs: long enough for a loaded machine's
/// renewals, short enough for a take-over to cost little time.
pub const LEASE_MS: u64 = 2000;

/// The server's `host:port`, if one is configured.
pub fn endpoint() -> Option<String> {
    let url = std::env::var("AWS_ENDPOINT_URL").or_else(|_| std::env::var("WEIR_S3_ENDPOINT")).ok()?;
    let url = url.trim();
    (!url.is_empty()).then(|| url.trim_start_matches("http://").trim_end_matches('/').to_string())
}

/// `s3://BUCKET/chaos/seed-N-<nanos>`: a fresh prefix per case run.
pub fn case_url(seed: u64) -> String {
    let bucket = std::env::var("WEIR_S3_BUCKET").unwrap_or_else(|_| "weir".into());
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("s3://{bucket}/chaos/seed-{seed}-{nanos}")
}

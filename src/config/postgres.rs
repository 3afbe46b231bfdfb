//! The `postgres` sink's settings: the column mapping (column name → field
//! path), the mode and its conflict key, batching, delivery. Checked here so
//! that `weir validate` reports a mapping the sink could not write, located.

use std::collections::HashSet;
use std::time::Duration;

use indexmap::IndexMap;

use super::limits::PROCESSING;
use super::locate::{child, item, Seg};
use super::pipeline::{Delivery, PostgresMode, PostgresSinkSpec};
use super::raw::{RawDelivery, RawOnError, RawPostgresMode};
use super::specs::{on_error_spec, Cx, Flow};
use crate::format::path::FieldPath;

const DEFAULT_BATCH_SIZE: u64 = 1000;
/// Rows per COPY: one row up to what a multi-megabyte COPY holds comfortably.
const BATCH_SIZE: (u64, u64) = (1, 100_000);
const DEFAULT_SERVER_TIMEOUT: Duration = Duration::from_secs(30);
/// PostgreSQL's limit on a global transaction id is 200 bytes; the gid adds
/// the run id, subtask and checkpoint id (at most 40) to this prefix.
pub const MAX_GID_PREFIX: usize = 150;

/// A `postgres` sink's raw settings, borrowed from `RawSink::Postgres`.
pub(crate) struct RawPostgres<'a> {
    pub url: &'a str,
    pub password_env: Option<&'a str>,
    pub table: &'a str,
    pub mode: Option<RawPostgresMode>,
    pub key: Option<&'a [String]>,
    pub columns: &'a IndexMap<String, String>,
    pub batch_size: Option<u64>,
    pub delivery: Option<RawDelivery>,
    pub server_timeout: Option<&'a str>,
    pub on_error: Option<RawOnError>,
    pub dead_letter: Option<&'a str>,
}

/// The prefix of every global transaction id sink `sink` of pipeline
/// `pipeline` prepares: `weir-<pipeline>/<sink>/` (names never hold a `/`,
/// so no other pipeline's or sink's prefix starts with it).
pub fn gid_prefix(pipeline: &str, sink: &str) -> String {
    format!("weir-{pipeline}/{sink}/")
}

/// An exactly-once sink's transaction ids must fit PostgreSQL's 200 bytes.
pub(crate) fn check_gid_length(cx: &mut Cx, at: &[Seg], pipeline: &str, sink: &str, spec: &PostgresSinkSpec) {
    let prefix = gid_prefix(pipeline, sink);
    if spec.delivery == Delivery::ExactlyOnce && prefix.len() > MAX_GID_PREFIX {
        let n = prefix.len();
        cx.err(
            at,
            format!("pipeline and sink names too long for PostgreSQL's transaction ids: `{prefix}` is {n} bytes, at most {MAX_GID_PREFIX}"),
        );
    }
}

pub(crate) fn sink(cx: &mut Cx, at: &[Seg], raw: &RawPostgres<'_>) -> PostgresSinkSpec {
    cx.not_empty(at, "url", raw.url, "a connection URL such as `postgres://weir@127.0.0.1:5432/db`");
    if !raw.url.trim().is_empty() {
        check_url(cx, &child(at, "url"), raw.url);
    }
    cx.not_empty(at, "table", raw.table, "the table to write to (`table` or `schema.table`)");
    let columns = columns(cx, &child(at, "columns"), raw.columns);
    let mode = match raw.mode.unwrap_or(RawPostgresMode::Append) {
        RawPostgresMode::Append => {
            if raw.key.is_some() {
                cx.err_key(&child(at, "key"), "`key` is only used with `mode: upsert` (the conflict target), but `mode` is `append`");
            }
            PostgresMode::Append
        }
        RawPostgresMode::Upsert => PostgresMode::Upsert { key: upsert_key(cx, at, raw.key, raw.columns) },
    };
    let batch_size = raw.batch_size.unwrap_or(DEFAULT_BATCH_SIZE);
    let batch_size = if cx.count(&child(at, "batch_size"), "batch_size", batch_size, BATCH_SIZE) { batch_size } else { 1 } as usize;
    let delivery = match raw.delivery.unwrap_or(RawDelivery::ExactlyOnce) {
        RawDelivery::ExactlyOnce => Delivery::ExactlyOnce,
        RawDelivery::AtLeastOnce => Delivery::AtLeastOnce,
    };
    let server_timeout =
        raw.server_timeout.and_then(|t| cx.duration_in(at, "server_timeout", t, PROCESSING)).unwrap_or(DEFAULT_SERVER_TIMEOUT);
    let password_env = raw.password_env.unwrap_or("PGPASSWORD").to_string();
    if password_env.is_empty() {
        cx.err(&child(at, "password_env"), "`password_env` is empty: expected the name of an environment variable, e.g. `PGPASSWORD`");
    }
    let key_fields = match &mode {
        PostgresMode::Upsert { key } => {
            let field = |k: &String| columns.iter().find(|(c, _)| c == k).and_then(|(_, p)| p.as_ref()).map(|p| p.text().to_string());
            key.iter().map(field).collect::<Option<Vec<String>>>().unwrap_or_default()
        }
        PostgresMode::Append => Vec::new(),
    };
    PostgresSinkSpec {
        key_fields,
        url: raw.url.to_string(),
        password_env,
        table: raw.table.to_string(),
        mode,
        columns,
        batch_size,
        delivery,
        server_timeout,
        on_error: on_error_spec(cx, at, raw.on_error, raw.dead_letter),
    }
}

/// A password in the URL would end up in the YAML, in `ps` and in logs: it
/// belongs in the environment.
fn check_url(cx: &mut Cx, at: &[Seg], url: &str) {
    let Some(rest) = url.strip_prefix("postgres://").or_else(|| url.strip_prefix("postgresql://")) else {
        cx.err(at, "expected a URL such as `postgres://weir@127.0.0.1:5432/db` (key=value connection strings are not taken)");
        return;
    };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let in_user_info = authority.rsplit_once('@').is_some_and(|(user_info, _)| user_info.contains(':'));
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    let in_query = query.split('&').any(|kv| kv.split('=').next().is_some_and(|k| k.eq_ignore_ascii_case("password")));
    if in_user_info || in_query {
        cx.err(at, "the URL holds a password: put it in the environment variable `password_env` names (default PGPASSWORD) instead");
    }
}

/// What a column maps to that stands for the whole record (a field named
/// `$` is written quoted: `"$"`).
pub const WHOLE_RECORD: &str = "$";

fn columns(cx: &mut Cx, at: &[Seg], raw: &IndexMap<String, String>) -> Vec<(String, Option<FieldPath>)> {
    if raw.is_empty() {
        cx.err(at, "`columns` is empty: map at least one column to a field, e.g. `columns: {user_id: user.id}`");
    }
    let mut out = Vec::with_capacity(raw.len());
    for (column, path) in raw {
        let here = child(at, column);
        if column.is_empty() {
            cx.err_key(&here, "empty column name in `columns`");
        }
        if path == WHOLE_RECORD {
            out.push((column.clone(), None));
            continue;
        }
        match FieldPath::parse(path) {
            Ok(p) => out.push((column.clone(), Some(p))),
            Err(e) => cx.err(&here, format!("column `{column}`: `{path}` is not a field path: {e}")),
        }
    }
    out
}

/// Upsert: a non-empty key of distinct mapped columns.
fn upsert_key(cx: &mut Cx, at: &[Seg], key: Option<&[String]>, columns: &IndexMap<String, String>) -> Vec<String> {
    let Some(key) = key.filter(|k| !k.is_empty()) else {
        cx.err(&child(at, "mode"), "`mode: upsert` needs `key: [columns]`: the columns of the table's primary key or a unique index");
        return Vec::new();
    };
    let mut seen = HashSet::new();
    for (i, k) in key.iter().enumerate() {
        if !columns.contains_key(k) {
            let mapped: Vec<&str> = columns.keys().map(String::as_str).collect();
            cx.err(&item(&child(at, "key"), i), format!("key column `{k}` is not in `columns`, which maps: {}", mapped.join(", ")));
        }
        if !seen.insert(k) {
            cx.err(&item(&child(at, "key"), i), format!("`{k}` appears twice in `key`"));
        }
    }
    key.to_vec()
}

/// The fields the columns read exist upstream, where that is known.
pub(crate) fn check_flow(cx: &mut Cx, at: &[Seg], spec: &PostgresSinkSpec, input: &str, upstream: &Flow) {
    let Some(known) = &upstream.fields else { return };
    for (column, path) in &spec.columns {
        let Some(path) = path else { continue };
        if !known.iter().any(|k| k == path.head() || k == path.text()) {
            let here = child(&child(at, "columns"), column);
            cx.err(&here, format!("field `{}` is not in the output of `{input}`, which has: {}", path.head(), known.join(", ")));
        }
    }
}

//! PostgreSQL in a case, when `WEIR_PG_URL` names a server (password in
//! `PGPASSWORD`; scripts/test.sh and scripts/chaos.sh start one): a table
//! of the case's own that a PostgreSQL sink appends each record's JSON
//! text to (or upserts it into by `user`, for a running aggregate's
//! updates), read back with psql for the oracle.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// The server's URL, if the environment names one.
pub fn server() -> Option<String> {
    std::env::var("WEIR_PG_URL").ok().filter(|u| !u.trim().is_empty())
}

fn psql(url: &str, sql: &str) -> Result<Vec<String>, String> {
    let o = Command::new("psql")
        .arg(url)
        .args(["-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .map_err(|e| format!("running psql: {e}"))?;
    if !o.status.success() {
        return Err(format!("psql {sql}: {}", String::from_utf8_lossy(&o.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&o.stdout).lines().filter(|l| !l.is_empty()).map(str::to_string).collect())
}

/// A fresh table for one case's sink: a text column, the record (and with
/// `upsert`, its key `user`).
pub fn create_table(url: &str, seed: u64, upsert: bool) -> Result<String, String> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let table = format!("chaos_{seed}_{}_{nanos}", std::process::id());
    let key = if upsert { r#""user" text PRIMARY KEY, "# } else { "" };
    psql(url, &format!("CREATE TABLE {table} ({key}line text NOT NULL)"))?;
    Ok(table)
}

/// Every line in `table` (committed rows only: psql reads committed data).
pub fn read(url: &str, table: &str) -> Result<Vec<String>, String> {
    // Each row on one line: a record's JSON text holds no raw newline.
    psql(url, &format!("SELECT line FROM {table}"))
}

/// Roll back whatever pipeline `name` left prepared, once its case is
/// checked: a sink an edit removed leaves its prepared transactions behind
/// (weir no longer knows its server; docs/pipeline-reference.md says so),
/// and on a shared server they would fill `max_prepared_transactions` for
/// every later case.
pub fn clean_up(url: &str, name: &str) -> Result<usize, String> {
    let left = prepared(url, name)?;
    for gid in &left {
        psql(url, &format!("ROLLBACK PREPARED '{}'", gid.replace('\'', "''")))?;
    }
    Ok(left.len())
}

/// The prepared transactions a case's pipeline `name` left behind.
pub fn prepared(url: &str, name: &str) -> Result<Vec<String>, String> {
    psql(url, &format!("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'weir-{name}/%'"))
}

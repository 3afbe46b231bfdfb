//! The PostgreSQL sink operator.
//!
//! **Exactly once** (checkpoints on, `delivery: exactly_once`): the rows of
//! a checkpoint interval go into one open transaction; at the barrier it is
//! prepared as `weir-PIPELINE/SINK/RUN-SUBTASK-CHECKPOINT` (`gid`) and the
//! name staged in state under the checkpoint's id; when the checkpoint
//! completes, every transaction staged up to it is committed
//! (`COMMIT PREPARED`). A restore commits what the restored checkpoint
//! staged (a name no longer prepared was committed before the crash) and
//! rolls back every other prepared transaction of this sink that maps to
//! this subtask (`gid::leftover`): none of those is covered by a checkpoint.
//! On S3 checkpoints the names carry the start's generation
//! (`checkpoint::lease::Fence`): a process deposed by a take-over checks its
//! ownership before each PREPARE, never judges a newer generation's
//! transactions, and the new owner rolls back at each completion what an
//! older one still prepared after it looked.
//!
//! A prepared transaction keeps its row locks until it is committed, and
//! the commit comes from this same thread: in upsert mode, the next
//! transaction's upsert of a key the prepared one wrote would wait for a
//! commit that can never come. So while a prepared transaction of this
//! subtask is pending, upsert rows are **held** in memory; at a barrier
//! (the previous checkpoint not complete yet, or a savepoint, which commits
//! nothing) the held rows are kept in state, covered by that checkpoint.
//! Once the pending transactions commit, the held rows go into the open
//! transaction (their state entries deleted: the next checkpoint covers
//! them as part of that transaction). Only after the end of the input,
//! when no next checkpoint will come, are the held rows a completed
//! checkpoint covers committed at once; a crash between that commit and
//! the end restores them from state and writes them again: an upsert of
//! the same values, which changes nothing. (Committing at once in the
//! middle of a run would let a deposed process, stopped just before that
//! commit, overwrite newer values of the process that took over; at the
//! end there are no newer values.) Append mode never holds (an insert waits for no one, unless
//! a unique index is hit twice, which fails after the commit anyway; a
//! `lock_timeout` turns any wait on a lock into an error).
//!
//! **At least once** (`delivery: at_least_once`): the open transaction is
//! committed at each barrier; a restore writes again what followed the
//! last completed checkpoint. **Without checkpoints**, each batch commits
//! on its own.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use postgres::types::ToSql;
use postgres::Statement;

use super::conn::Conn;
use super::gid::{deposed, leftover, Gid, Judge, Leftover};
use super::row::{self, Column, Row};
use super::server::{describe, Server};
use super::{sql, table};
use crate::checkpoint::lease::Fence;
use crate::config::{gid_prefix, Delivery, PostgresMode, PostgresSinkSpec};
use crate::faults;
use crate::operators::dead_letter::reject;
use crate::operators::{Context, DeadLetter, OpError, OpResult, Operator, OperatorMetrics};
use crate::state::{TableKind, TableSpec};
use crate::types::{encode_key, key_group_of, KeyGroup, Record};

/// Transactions an append sink subtask may have prepared and pending before
/// it holds new rows back (each one takes a `max_prepared_transactions` slot).
const MAX_PENDING_APPEND: usize = 2;

/// Prepared transactions: gid → the checkpoint that staged it.
const STAGED: usize = 0;
/// Held rows kept in state: `RUN-SEQ` → the encoded row.
const HELD: usize = 1;
/// Prepared transactions: gid → its transaction id (xid8, as text), to
/// tell a committed one from one rolled back when it is no longer prepared.
const XIDS: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// PREPARE at the barrier, COMMIT PREPARED when it completes.
    TwoPhase,
    /// COMMIT at the barrier.
    AtBarrier,
    /// Each batch on its own (no checkpoints).
    PerBatch,
}

/// A row held back while a prepared transaction is pending, under its
/// key's key group; its state key once it is kept in state, with the
/// checkpoint that kept it.
struct Held {
    row: Row,
    kg: KeyGroup,
    kept: Option<(String, u64)>,
}

pub struct PostgresSink {
    name: String,
    table: String,
    /// The rows' transactions.
    conn: Conn,
    /// COMMIT PREPARED and ROLLBACK PREPARED, which cannot run inside the
    /// transaction `conn` may have open: a second connection.
    control: Conn,
    insert: Statement,
    columns: Vec<Column>,
    batch_size: usize,
    on_error: crate::config::OnError,
    commit: Commit,
    upsert: bool,
    prefix: String,
    run: String,
    subtask: u16,
    /// Rows not sent yet, and their records' text (None: a held row).
    batch: Vec<Row>,
    raws: Vec<Option<Box<str>>>,
    /// A transaction is open (BEGIN sent), holding `txn_rows` rows.
    in_txn: bool,
    txn_rows: u64,
    /// Transactions this instance prepared and has not committed: gid → rows.
    pending: HashMap<String, u64>,
    held: Vec<Held>,
    next_held_seq: u64,
    /// Where records hold the upsert key's values (None: not known, held
    /// rows go to the first key group).
    key_slots: Option<Vec<usize>>,
    key_bytes: Vec<u8>,
    /// Whether the prepared transactions of earlier runs were cleaned up.
    swept: bool,
    /// After a restore: earlier runs' prepared transactions that another
    /// subtask's restored state may name, rolled back (if still there) at
    /// the first completion, once every subtask has restored. Only these:
    /// a transaction first seen later is not ours to judge.
    later: Vec<String>,
    /// Every input ended: no checkpoint follows the final one.
    ending: bool,
    /// The generation in this run's gids, and its ownership, checked before
    /// each PREPARE (`checkpoint::lease::Fence`).
    fence: Fence,
    dead_letter: Option<DeadLetter>,
}

/// Each column's values of `rows` (moved), the statement's `text[]` parameters.
fn columns_of(rows: Vec<Row>, width: usize) -> Vec<Vec<Option<String>>> {
    let mut arrays: Vec<Vec<Option<String>>> = (0..width).map(|_| Vec::with_capacity(rows.len())).collect();
    for row in rows {
        for (i, v) in row.into_iter().enumerate() {
            arrays[i].push(v);
        }
    }
    arrays
}

/// Row `i` of `columns`, as one-row parameters.
fn row_of(columns: &[Vec<Option<String>>], i: usize) -> Vec<Vec<Option<String>>> {
    columns.iter().map(|c| vec![c[i].clone()]).collect()
}

fn as_params(arrays: &[Vec<Option<String>>]) -> Vec<&(dyn ToSql + Sync)> {
    arrays.iter().map(|a| a as &(dyn ToSql + Sync)).collect()
}

/// A value the server will not take (data exception, constraint violation):
/// the row's fault, not the connection's.
fn is_data_error(e: &postgres::Error) -> bool {
    e.code().is_some_and(|c| c.code().starts_with("22") || c.code().starts_with("23"))
}

fn db_err(what: &str, conn: &Conn) -> impl Fn(postgres::Error) -> String {
    let (what, server) = (what.to_string(), conn.name.clone());
    move |e| format!("{what} (PostgreSQL at {server}): {}", describe(&e))
}

impl PostgresSink {
    /// Connect, check the server and the table, prepare the insert.
    pub fn open(
        name: &str,
        pipeline: &str,
        spec: &PostgresSinkSpec,
        subtask: u16,
        checkpoints: bool,
        dead_letter: Option<DeadLetter>,
    ) -> Result<Self, String> {
        let server = Server::new(&spec.url, &spec.password_env)?;
        let conn = Conn::open(&server, spec.server_timeout)?;
        let control = Conn::open(&server, spec.server_timeout)?;
        let commit = match (checkpoints, spec.delivery) {
            (false, _) => Commit::PerBatch,
            (true, Delivery::ExactlyOnce) => Commit::TwoPhase,
            (true, Delivery::AtLeastOnce) => Commit::AtBarrier,
        };
        let lock_timeout = format!("SET lock_timeout = {}", spec.server_timeout.as_millis().max(1));
        conn.call(move |c| c.batch_execute(&lock_timeout)).and_then(|r| r.map_err(db_err("setting lock_timeout", &conn)))?;
        if commit == Commit::TwoPhase {
            let allowed = conn.call(|c| c.query_one("SHOW max_prepared_transactions", &[]).map(|r| r.get::<_, String>(0)));
            let allowed = allowed.and_then(|r| r.map_err(db_err("reading max_prepared_transactions", &conn)))?;
            if allowed.trim() == "0" {
                return Err(format!(
                    "PostgreSQL at {} does not allow prepared transactions (max_prepared_transactions = 0), which `delivery: exactly_once` needs: \
                     set max_prepared_transactions to at least the sink's parallelism (postgresql.conf, then restart the server), or use `delivery: at_least_once`",
                    conn.name
                ));
            }
        }
        let s = spec.clone();
        let described = conn.call(move |c| table::columns(c, &s))??;
        let (columns, types) = described;
        let key = match &spec.mode {
            PostgresMode::Upsert { key } => Some(key.clone()),
            PostgresMode::Append => None,
        };
        let text = sql::insert(&spec.table, &types, key.as_deref());
        let insert = conn
            .call(move |c| c.prepare(&text))
            .and_then(|r| r.map_err(db_err(&format!("preparing the insert into `{}`", spec.table), &conn)))?;
        Ok(PostgresSink {
            name: name.to_string(),
            table: spec.table.clone(),
            conn,
            control,
            insert,
            columns,
            batch_size: spec.batch_size,
            on_error: spec.on_error.clone(),
            commit,
            upsert: key.is_some(),
            prefix: gid_prefix(pipeline, name),
            run: crate::run_id::draw_short(),
            subtask,
            batch: Vec::new(),
            raws: Vec::new(),
            in_txn: false,
            txn_rows: 0,
            pending: HashMap::new(),
            held: Vec::new(),
            next_held_seq: 0,
            key_slots: None,
            key_bytes: Vec::new(),
            swept: commit != Commit::TwoPhase,
            later: Vec::new(),
            fence: Fence::default(),
            ending: false,
            dead_letter,
        })
    }

    /// Stage under `fence`'s generation, and only while it owns the storage.
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    fn judge(&self, parallelism: u16) -> Judge<'_> {
        Judge { run: &self.run, generation: self.fence.generation, subtask: self.subtask, parallelism }
    }

    pub fn with_key_slots(mut self, slots: Option<Vec<usize>>) -> Self {
        self.key_slots = slots;
        self
    }

    /// The key group of `r`'s upsert key, as the hash edge before the sink
    /// routes it (the first owned one when unknown).
    fn key_group(&mut self, r: &Record, ctx: &Context<'_>) -> KeyGroup {
        let owned = ctx.state.key_groups();
        let Some(slots) = self.key_slots.as_ref().filter(|s| s.iter().all(|&i| i < r.fields.len())) else { return owned.start };
        encode_key(&r.fields, slots, &mut self.key_bytes);
        let kg = key_group_of(&self.key_bytes, ctx.info.max_parallelism);
        if owned.contains(&kg) {
            kg
        } else {
            owned.start
        }
    }

    fn err(&self, what: &str) -> impl Fn(postgres::Error) -> OpError {
        let f = db_err(what, &self.conn);
        move |e| OpError::Data(f(e))
    }

    /// Run `f` on the rows' connection; the connection's loss is an error too.
    fn call<R: Send + 'static>(
        &self,
        what: &str,
        f: impl FnOnce(&mut postgres::Client) -> Result<R, postgres::Error> + Send + 'static,
    ) -> Result<R, OpError> {
        self.on(&self.conn, what, f)
    }

    /// Run `f` on the control connection.
    fn control<R: Send + 'static>(
        &self,
        what: &str,
        f: impl FnOnce(&mut postgres::Client) -> Result<R, postgres::Error> + Send + 'static,
    ) -> Result<R, OpError> {
        self.on(&self.control, what, f)
    }

    fn on<R: Send + 'static>(
        &self,
        conn: &Conn,
        what: &str,
        f: impl FnOnce(&mut postgres::Client) -> Result<R, postgres::Error> + Send + 'static,
    ) -> Result<R, OpError> {
        conn.call(f).map_err(OpError::Data)?.map_err(self.err(what))
    }

    /// Send the batched rows (into the open transaction, opened if need
    /// be). A value the server refuses (a data exception or a constraint:
    /// SQLSTATE classes 22 and 23) fails only its own row: the batch is
    /// rolled back to a savepoint and sent again row by row, and the rows
    /// the server refuses follow `on_error` like any bad record.
    fn flush(&mut self, ctx: &mut Context<'_>) -> OpResult {
        if self.batch.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.batch);
        let raws = std::mem::take(&mut self.raws);
        let n = rows.len();
        let per_batch = self.commit == Commit::PerBatch;
        let begin = per_batch || !self.in_txn;
        let (stmt, width) = (self.insert.clone(), self.columns.len());
        let what = format!("writing {n} rows to table `{}`", self.table);
        let (columns, refused) = self.call(&what, move |c| {
            if begin {
                c.batch_execute("BEGIN")?;
            }
            c.batch_execute("SAVEPOINT weir_batch")?;
            let mut refused = Vec::new();
            let columns = columns_of(rows, width);
            match c.execute(&stmt, &as_params(&columns)) {
                Ok(_) => {}
                Err(e) if is_data_error(&e) => {
                    c.batch_execute("ROLLBACK TO SAVEPOINT weir_batch")?;
                    for i in 0..n {
                        c.batch_execute("SAVEPOINT weir_row")?;
                        match c.execute(&stmt, &as_params(&row_of(&columns, i))) {
                            Ok(_) => c.batch_execute("RELEASE SAVEPOINT weir_row")?,
                            Err(e) if is_data_error(&e) => {
                                c.batch_execute("ROLLBACK TO SAVEPOINT weir_row")?;
                                refused.push((i, describe(&e)));
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }
                Err(e) => return Err(e),
            }
            c.batch_execute("RELEASE SAVEPOINT weir_batch")?;
            if per_batch {
                c.batch_execute("COMMIT")?;
            }
            Ok((columns, refused))
        })?;
        let written = (n - refused.len()) as u64;
        if per_batch {
            OperatorMetrics::add(&ctx.metrics.records_committed, written);
        } else {
            self.in_txn = true;
            self.txn_rows += written;
        }
        self.gauges(ctx);
        for (i, why) in refused {
            let raw = raws[i].clone().unwrap_or_else(|| self.row_json(&row_of(&columns, i)).into());
            let place = format!("sink `{}`", self.name);
            let reason = format!("the server refused the row: {why}");
            reject(&self.on_error, self.dead_letter.as_ref(), (&self.name, &place), &raw, &reason, ctx.metrics)?;
        }
        Ok(())
    }

    /// A row (its one-row columns) as JSON, column → text, for a held row
    /// refused by the server, whose record text is not kept.
    fn row_json(&self, one: &[Vec<Option<String>>]) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .columns
            .iter()
            .zip(one)
            .map(|(c, v)| (c.name.clone(), v[0].clone().map_or(serde_json::Value::Null, serde_json::Value::String)))
            .collect();
        serde_json::Value::Object(map).to_string()
    }

    fn push(&mut self, row: Row, raw: Option<Box<str>>, ctx: &mut Context<'_>) -> OpResult {
        self.batch.push(row);
        self.raws.push(raw);
        if self.batch.len() >= self.batch_size {
            self.flush(ctx)?;
        }
        Ok(())
    }

    fn gauges(&self, ctx: &Context<'_>) {
        use std::sync::atomic::Ordering::Relaxed;
        ctx.metrics.transactions_open.store(u64::from(self.in_txn), Relaxed);
        ctx.metrics.transactions_pending.store(self.pending.len() as u64, Relaxed);
    }

    /// The gids of this database's prepared transactions.
    fn prepared(&self) -> Result<HashSet<String>, OpError> {
        let rows = self.control("listing prepared transactions", |c| c.query(sql::PREPARED, &[]))?;
        Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
    }

    /// Commit every transaction staged for a checkpoint <= `id`.
    fn commit_due(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        let due = crate::operators::staged_files::due(ctx, STAGED, id)?;
        if due.is_empty() {
            return Ok(());
        }
        let prepared = self.prepared()?;
        faults::get().crash_point("before_sink_commit");
        let started = Instant::now();
        for (gid, staged_in, kg) in &due {
            if !prepared.contains(gid) {
                self.check_committed(gid, *staged_in, *kg, ctx)?;
            }
            if prepared.contains(gid) {
                let text = sql::commit_prepared(gid);
                self.control(&format!("committing {gid}"), move |c| c.batch_execute(&text))?;
                match self.pending.remove(gid) {
                    Some(rows) => OperatorMetrics::add(&ctx.metrics.records_committed, rows),
                    None => tracing::info!(gid = %gid, checkpoint = id, "Committed a prepared transaction of the restored checkpoint."),
                }
            } else {
                tracing::info!(gid = %gid, checkpoint = id, "Prepared transaction already committed.");
                self.pending.remove(gid);
            }
            ctx.state.delete(STAGED, *kg, gid.as_bytes())?;
            ctx.state.delete(XIDS, *kg, gid.as_bytes())?;
        }
        tracing::debug!(checkpoint = id, transactions = due.len(), ms = started.elapsed().as_millis() as u64, "PostgreSQL commit.");
        self.gauges(ctx);
        Ok(())
    }

    /// A staged transaction is no longer prepared: it must have been
    /// committed (before a crash). Its fate, by its transaction id, when
    /// the server still knows it: one rolled back (by another process of
    /// this pipeline and sink, or by hand) lost rows, which is said loudly.
    fn check_committed(&self, gid: &str, staged_in: u64, kg: crate::types::KeyGroup, ctx: &mut Context<'_>) -> OpResult {
        let mut xid = Vec::new();
        if !ctx.state.get(XIDS, kg, gid.as_bytes(), &mut xid)? {
            return Ok(());
        }
        let xid = String::from_utf8_lossy(&xid).into_owned();
        let status = self.control("reading a transaction's status", move |c| {
            c.query_one("SELECT pg_xact_status($1::text::xid8)", &[&xid]).map(|r| r.get::<_, Option<String>>(0))
        })?;
        match status.as_deref() {
            Some("aborted") => Err(OpError::Data(format!(
                "sink `{}`: the prepared transaction {gid} of checkpoint {staged_in} was rolled back by someone else, and its rows with it \
                 (two runs of pipeline and sink names alike writing to one database? each must have its own names)",
                self.name
            ))),
            _ => Ok(()),
        }
    }

    /// Roll back the prepared transactions of earlier runs that map to this
    /// subtask and that no checkpoint restored (`restored`: the checkpoint
    /// a restore just read, when leftovers it may cover must stay until
    /// every subtask has restored).
    fn sweep(&mut self, parallelism: u16, restored: Option<u64>) -> OpResult {
        for gid in self.prepared()? {
            let Some(g) = Gid::parse(&self.prefix, &gid) else { continue };
            match leftover(&g, self.judge(parallelism), restored) {
                Leftover::RollBack => self.roll_back(&gid)?,
                Leftover::RollBackLater => self.later.push(gid),
                Leftover::Keep => {}
            }
        }
        self.swept = true;
        Ok(())
    }

    /// Roll back what deposed owners (older generations) prepared after
    /// this run's restore looked: woken up late, they may still prepare.
    fn sweep_deposed(&mut self, parallelism: u16) -> OpResult {
        for gid in self.prepared()? {
            if Gid::parse(&self.prefix, &gid).is_some_and(|g| deposed(&g, self.judge(parallelism))) {
                tracing::warn!(gid = %gid, "Rolling back a transaction a deposed owner of the checkpoint storage prepared late.");
                self.roll_back(&gid)?;
            }
        }
        Ok(())
    }

    fn roll_back(&self, gid: &str) -> OpResult {
        tracing::info!(gid = %gid, "Rolling back a prepared transaction no checkpoint covers.");
        let text = sql::rollback_prepared(gid);
        match self.control.call(move |c| c.batch_execute(&text)).map_err(OpError::Data)? {
            Ok(()) => Ok(()),
            // Gone meanwhile (committed by the subtask whose state named it).
            Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_OBJECT) => Ok(()),
            Err(e) => Err(self.err(&format!("rolling back {gid}"))(e)),
        }
    }

    /// Keep in state the held rows no checkpoint covers yet, under `id`.
    fn keep_held(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        for h in self.held.iter_mut().filter(|h| h.kept.is_none()) {
            let key = format!("{}-{:016}", self.run, self.next_held_seq);
            self.next_held_seq += 1;
            ctx.state.put(HELD, h.kg, key.as_bytes(), &row::encode(&h.row))?;
            h.kept = Some((key, id));
        }
        Ok(())
    }

    /// No transaction is pending any more: write the held rows into the
    /// open transaction; after the end of input, those a completed
    /// checkpoint (<= `id`) covers are committed at once.
    fn release_held(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        // Committing at once relies on an upsert written twice changing nothing.
        let covered = match self.ending && self.upsert {
            true => self.held.iter().take_while(|h| h.kept.as_ref().is_some_and(|(_, c)| *c <= id)).count(),
            false => 0,
        };
        let held = std::mem::take(&mut self.held);
        let mut rest = held.into_iter();
        if covered > 0 && !self.in_txn {
            let mut done = Vec::with_capacity(covered);
            for h in rest.by_ref().take(covered) {
                done.push((h.kg, h.kept.expect("covered rows are kept").0));
                self.push(h.row, None, ctx)?;
            }
            self.flush(ctx)?;
            self.call("committing held rows", |c| c.batch_execute("COMMIT"))?;
            OperatorMetrics::add(&ctx.metrics.records_committed, self.txn_rows);
            (self.in_txn, self.txn_rows) = (false, 0);
            for (kg, key) in &done {
                ctx.state.delete(HELD, *kg, key.as_bytes())?;
            }
        }
        self.held = rest.collect();
        self.move_held_into_batch(ctx)?;
        self.gauges(ctx);
        Ok(())
    }

    /// Every held row into the batch (the open transaction), its state entry deleted.
    fn move_held_into_batch(&mut self, ctx: &mut Context<'_>) -> OpResult {
        for h in std::mem::take(&mut self.held) {
            if let Some((key, _)) = &h.kept {
                ctx.state.delete(HELD, h.kg, key.as_bytes())?;
            }
            self.push(h.row, None, ctx)?;
        }
        Ok(())
    }

    /// The rows a restored checkpoint held, in the order they came, removed from state.
    fn take_restored_held(&self, ctx: &mut Context<'_>) -> Result<Vec<Row>, OpError> {
        let mut found = Vec::new();
        for kg in ctx.state.key_groups() {
            ctx.state.scan_all(HELD, kg, &mut |k, v| {
                found.push((kg, k.to_vec(), v.to_vec()));
                std::ops::ControlFlow::Continue(())
            })?;
        }
        found.sort();
        let mut rows = Vec::with_capacity(found.len());
        for (kg, key, value) in found {
            let row = row::decode(&value, self.columns.len())
                .ok_or_else(|| OpError::Data(format!("sink `{}`: a held row in the restored state is damaged", self.name)))?;
            rows.push(row);
            ctx.state.delete(HELD, kg, &key)?;
        }
        Ok(rows)
    }
}

impl Operator for PostgresSink {
    fn tables(&self) -> Vec<TableSpec> {
        vec![
            TableSpec { name: "prepared", kind: TableKind::Point },
            TableSpec { name: "held", kind: TableKind::Point },
            TableSpec { name: "xids", kind: TableKind::Point },
        ]
    }

    fn process(&mut self, batch: Vec<Record>, ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        if !self.swept {
            self.sweep(ctx.info.parallelism, None)?;
        }
        // Upsert: behind any pending transaction (its row locks). Append:
        // once MAX_PENDING_APPEND are pending, so that checkpoints that keep
        // failing do not prepare a transaction per barrier without bound.
        let hold = !self.pending.is_empty() && (self.upsert || self.pending.len() >= MAX_PENDING_APPEND);
        for r in batch {
            match row::extract(&r.raw, &self.columns) {
                Ok(row) if hold => {
                    let kg = self.key_group(&r, ctx);
                    self.held.push(Held { row, kg, kept: None });
                }
                Ok(row) => self.push(row, Some(r.raw), ctx)?,
                Err(reason) => {
                    let place = format!("sink `{}`", self.name);
                    reject(&self.on_error, self.dead_letter.as_ref(), (&self.name, &place), &r.raw, &reason, ctx.metrics)?;
                }
            }
        }
        Ok(())
    }

    fn on_end_of_input(&mut self, _ctx: &mut Context<'_>, _out: &mut Vec<Record>) -> OpResult {
        self.ending = true;
        Ok(())
    }

    fn on_checkpoint(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        if !self.swept {
            self.sweep(ctx.info.parallelism, None)?;
        }
        if self.commit == Commit::TwoPhase && !self.upsert && self.ending {
            // The final barrier of an append sink: what it held goes into
            // this checkpoint's transaction (no checkpoint follows to cover
            // it, and an append written twice would be doubled).
            self.move_held_into_batch(ctx)?;
        }
        self.flush(ctx)?;
        match self.commit {
            Commit::TwoPhase => {
                if self.in_txn {
                    // A process that woke up deposed stages nothing more
                    // (its open transaction is rolled back when it closes).
                    self.fence.check().map_err(|e| OpError::Data(format!("sink `{}`: {e}", self.name)))?;
                    let gid = Gid { run: self.run.clone(), subtask: self.subtask, checkpoint: id, generation: self.fence.generation }
                        .text(&self.prefix);
                    let text = sql::prepare(&gid);
                    let xid = self.call(&format!("preparing {gid}"), move |c| {
                        let xid = c.query_one("SELECT pg_current_xact_id()::text", &[])?.get::<_, String>(0);
                        c.batch_execute(&text)?;
                        Ok(xid)
                    })?;
                    let kg = ctx.state.key_groups().start;
                    ctx.state.put(STAGED, kg, gid.as_bytes(), &id.to_be_bytes())?;
                    ctx.state.put(XIDS, kg, gid.as_bytes(), xid.as_bytes())?;
                    self.pending.insert(gid, self.txn_rows);
                    (self.in_txn, self.txn_rows) = (false, 0);
                }
                self.keep_held(id, ctx)?;
            }
            Commit::AtBarrier if self.in_txn => {
                self.call("committing", |c| c.batch_execute("COMMIT"))?;
                OperatorMetrics::add(&ctx.metrics.records_committed, self.txn_rows);
                (self.in_txn, self.txn_rows) = (false, 0);
            }
            Commit::AtBarrier | Commit::PerBatch => {}
        }
        self.gauges(ctx);
        Ok(())
    }

    fn on_checkpoint_complete(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        if self.commit != Commit::TwoPhase {
            return Ok(());
        }
        self.commit_due(id, ctx)?;
        // Every subtask has restored by now: what the restore left for later is nobody's.
        for gid in std::mem::take(&mut self.later) {
            self.roll_back(&gid)?;
        }
        if self.fence.generation > 0 {
            self.sweep_deposed(ctx.info.parallelism)?;
        }
        if self.pending.is_empty() && !self.held.is_empty() {
            self.release_held(id, ctx)?;
        }
        Ok(())
    }

    fn on_restore(&mut self, id: u64, ctx: &mut Context<'_>) -> OpResult {
        // Whatever the delivery now: a checkpoint taken exactly once may
        // name prepared transactions and hold rows.
        self.commit_due(id, ctx)?;
        if self.commit == Commit::TwoPhase {
            self.sweep(ctx.info.parallelism, Some(id))?;
        }
        for row in self.take_restored_held(ctx)? {
            self.push(row, None, ctx)?;
        }
        Ok(())
    }

    fn close(&mut self, ctx: &mut Context<'_>) -> OpResult {
        match self.commit {
            Commit::PerBatch => self.flush(ctx),
            // What is open is committed by the final checkpoint, or written
            // again from the restored position; closing rolls it back.
            Commit::TwoPhase | Commit::AtBarrier => {
                self.batch.clear();
                self.raws.clear();
                if self.in_txn {
                    let _ = self.conn.call(|c| c.batch_execute("ROLLBACK"));
                    self.in_txn = false;
                }
                self.gauges(ctx);
                Ok(())
            }
        }
    }
}

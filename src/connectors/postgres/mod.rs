//! The `postgres` sink: records to rows of an existing table, appended or
//! upserted, exactly once through PostgreSQL's own two-phase commit
//! (`PREPARE TRANSACTION` at the barrier, `COMMIT PREPARED` when the
//! checkpoint completes; see `sink` for the protocol), or at least once.
//!
//! `server` names and reaches the server, `conn` runs the blocking client
//! on a thread of its own, `table` reads the target's columns, `row` turns
//! a record into a row, `sql` writes the statements, `gid` names the
//! prepared transactions and decides whose leftovers are whose.

mod conn;
mod gid;
mod row;
mod server;
mod sink;
mod sql;
mod table;

pub use sink::PostgresSink;

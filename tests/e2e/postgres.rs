//! The PostgreSQL sink against a real server: the one `WEIR_PG_URL` names
//! (password in `PGPASSWORD`; scripts/test.sh starts scripts/postgres.sh
//! when it is unset). Without one every test here says so and passes
//! without running. Each test writes a table of its own, under a pipeline
//! name of its own (so its prepared transactions are its own), and reads
//! the table back with psql; the oracle is the reference model computed
//! from the input. The outage and refusal tests start private servers.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::ckpt::{both_backends, kill_after, reference_output, Backend, Rng};
use super::records::assert_same_multiset;
use super::util::{repo, tmp, wait_until, weir, weir_run, Weir, RUN_TIMEOUT};

pub const PIPELINE: &str = "pipelines/postgres.yaml";

/// A server to write to.
#[derive(Clone)]
pub struct Server {
    pub url: String,
    password: String,
}

impl Server {
    /// The configured server, or None (and a message) without one.
    pub fn configured(test: &str) -> Option<Server> {
        let Ok(url) = std::env::var("WEIR_PG_URL") else {
            eprintln!("{test}: skipped: no PostgreSQL (set WEIR_PG_URL and PGPASSWORD, or run scripts/test.sh)");
            return None;
        };
        Some(Server { url, password: std::env::var("PGPASSWORD").unwrap_or_default() })
    }

    /// psql's unaligned output of `sql`, one line per row.
    #[track_caller]
    pub fn query(&self, sql: &str) -> Vec<String> {
        let o = Command::new("psql")
            .arg(&self.url)
            .args(["-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGPASSWORD", &self.password)
            .output()
            .expect("running psql");
        assert!(o.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap().lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
    }

    /// A fresh table `name` for the example's rows, with a primary key or without.
    pub fn create_windows_table(&self, name: &str, primary_key: bool) {
        let pk = if primary_key { r#", PRIMARY KEY ("user", window_start)"# } else { "" };
        self.query(&format!(
            r#"DROP TABLE IF EXISTS {name}; CREATE TABLE {name} ("user" text NOT NULL, window_start timestamptz NOT NULL, window_end timestamptz NOT NULL, n bigint, total numeric(18,2){pk})"#
        ));
    }

    /// The rows of a windows table in the reference model's form.
    pub fn window_rows(&self, table: &str) -> Vec<String> {
        let ms = |c: &str| format!("(extract(epoch FROM {c}) * 1000)::bigint");
        let sql = format!(
            r#"SELECT json_build_object('user', "user", 'window_start', {}, 'window_end', {}, 'n', n, 'total', total::bigint)::text FROM {table}"#,
            ms("window_start"),
            ms("window_end")
        );
        canonical(self.query(&sql))
    }

    /// The prepared transactions of pipeline `pipeline`.
    pub fn prepared(&self, pipeline: &str) -> Vec<String> {
        self.query(&format!("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'weir-{pipeline}/%'"))
    }
}

fn canonical(lines: Vec<String>) -> Vec<String> {
    lines.iter().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap().to_string()).collect()
}

/// The reference rows of pipelines/postgres.yaml.
pub fn expected_rows() -> Vec<String> {
    canonical(reference_output().iter().map(|o| serde_json::to_string(o).unwrap()).collect())
}

/// The table holds each reference row once and nothing else.
#[track_caller]
pub fn assert_reference_rows(what: &str, server: &Server, table: &str) {
    assert_same_multiset(what, server.window_rows(table), expected_rows());
}

/// The example, writing `table` as pipeline `name`.
pub(super) fn cmd(server: &Server, name: &str, table: &str, backend: Backend, p: u32, state: &Path) -> Weir {
    backend
        .apply(
            weir_run(PIPELINE, p).set("name", name).set("state.dir", state).set("sinks.db.url", &server.url).set("sinks.db.table", table),
        )
        .env("PGPASSWORD", &server.password)
}

fn append(w: Weir) -> Weir {
    w.set("sinks.db.mode", "append").arg("--set").arg("sinks.db.key=null")
}

#[test]
fn a_clean_upsert_run_writes_the_reference_rows_and_leaves_nothing_prepared() {
    let Some(server) = Server::configured("pg clean") else { return };
    server.create_windows_table("pg_clean", true);
    let dir = tmp();
    let o = cmd(&server, "pg-clean", "pg_clean", Backend::Memory, 2, &dir.path().join("state"))
        .set("sources.events.rate_limit", "1000000000")
        .ok();
    assert_reference_rows("clean run", &server, "pg_clean");
    let n = expected_rows().len();
    let all = format!("{}{}", o.stdout, o.stderr);
    assert!(all.contains(&format!("db {n} in ({n} committed)")), "every row counted as committed: {all}");
    assert!(server.prepared("pg-clean").is_empty());
}

/// Kill -9 at random times, restore each time, then run to the end at
/// `restore_p`: the table holds each reference row once (append: no
/// primary key, so a row written twice would be seen twice).
fn crash_loop(what: &str, mode_append: bool, backend: Backend, restore_p: u32) {
    let Some(server) = Server::configured(what) else { return };
    let name = what.replace(' ', "-");
    let table = what.replace([' ', '-'], "_");
    server.create_windows_table(&table, !mode_append);
    let dir = tmp();
    let state = dir.path().join("state");
    // Small batches: rows are in the open transaction when a checkpoint
    // completes and its prepared one is committed.
    let mode = |w: Weir| {
        let w = w.set("sinks.db.batch_size", "7");
        if mode_append {
            append(w)
        } else {
            w
        }
    };
    let mut rng = Rng::from_env(what);
    let mut kills = 0;
    for i in 0..8 {
        let mut c = mode(cmd(&server, &name, &table, backend, 2, &state)).set("sources.events.rate_limit", "700");
        if i > 0 {
            c = c.arg("--restore").arg("latest");
        }
        let mut run = c.spawn();
        if !kill_after(&mut run, rng.millis(100, 700)) {
            run.wait_for(RUN_TIMEOUT).expect_code(0);
            break;
        }
        kills += 1;
        // Nothing of a checkpoint that did not complete is visible.
        assert!(server.window_rows(&table).len() <= expected_rows().len(), "{what}: more rows than the reference after kill {kills}");
    }
    mode(cmd(&server, &name, &table, backend, restore_p, &state))
        .set("sources.events.rate_limit", "1000000000")
        .arg("--restore")
        .arg("latest")
        .ok();
    eprintln!("{what}: {kills} kills");
    assert_reference_rows(what, &server, &table);
    assert!(server.prepared(&name).is_empty(), "{what}: left prepared: {:?}", server.prepared(&name));
}

both_backends! {
    fn kill_9_loops_append_every_row_exactly_once(backend: Backend) {
        crash_loop(&format!("pg append {backend:?}").to_lowercase(), true, backend, 2);
    }
}

both_backends! {
    fn kill_9_loops_upsert_every_row_exactly_once(backend: Backend) {
        crash_loop(&format!("pg upsert {backend:?}").to_lowercase(), false, backend, 2);
    }
}

#[test]
fn kill_9_loops_then_a_restore_at_another_parallelism_write_every_row_once() {
    crash_loop("pg rescale", true, Backend::Memory, 3);
    // Upsert: the sink's input is hashed by the key, held rows kept under
    // their key's key group, so after the rescale each key has one writer.
    crash_loop("pg upsert rescale", false, Backend::Memory, 3);
}

/// A savepoint commits nothing: upsert rows wait behind its prepared
/// transaction, are kept in the next checkpoint, and still land once.
#[test]
fn savepoints_in_the_middle_of_an_upsert_run_lose_and_double_nothing() {
    let Some(server) = Server::configured("pg savepoints") else { return };
    server.create_windows_table("pg_savepoints", false);
    let dir = tmp();
    let state = dir.path().join("state");
    // Append into a table without a key would double a row written twice;
    // the rows are upserts (held while a savepoint's transaction is pending).
    server.query(r#"ALTER TABLE pg_savepoints ADD PRIMARY KEY ("user", window_start)"#);
    let run = cmd(&server, "pg-savepoints", "pg_savepoints", Backend::Memory, 2, &state).set("sources.events.rate_limit", "600").spawn();
    let mut taken = 0;
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(500));
        let o = weir(&["savepoint", "trigger", PIPELINE]).set("name", "pg-savepoints").set("state.dir", &state).run();
        if o.status.success() {
            taken += 1;
        }
    }
    run.wait_for(RUN_TIMEOUT).expect_code(0);
    eprintln!("savepoints taken: {taken}");
    assert_reference_rows("with savepoints", &server, "pg_savepoints");
    assert!(server.prepared("pg-savepoints").is_empty());
}

/// A savepoint, then kill -9 soon after (held rows kept in the checkpoint
/// that follows it), then a restore at another parallelism: each key's
/// held rows reach the subtask its records go to, and land once.
#[test]
fn held_rows_of_a_killed_upsert_run_follow_their_keys_through_a_rescale() {
    let Some(server) = Server::configured("pg held rescale") else { return };
    server.create_windows_table("pg_held_rescale", true);
    let dir = tmp();
    let state = dir.path().join("state");
    let c = |p| cmd(&server, "pg-held-rescale", "pg_held_rescale", Backend::Memory, p, &state);
    let mut rng = Rng::from_env("pg held rescale");
    for round in 0..4 {
        let mut w = c(2).set("sources.events.rate_limit", "600");
        if round > 0 {
            w = w.arg("--restore").arg("latest");
        }
        let mut run = w.spawn();
        std::thread::sleep(rng.millis(200, 500));
        let sp = weir(&["savepoint", "trigger", PIPELINE]).set("name", "pg-held-rescale").set("state.dir", &state).run();
        eprintln!("round {round}: savepoint {}", if sp.status.success() { "taken" } else { sp.stderr.trim() });
        if !kill_after(&mut run, rng.millis(50, 300)) {
            run.wait_for(RUN_TIMEOUT).expect_code(0);
            break;
        }
    }
    c(3).set("sources.events.rate_limit", "1000000000").arg("--restore").arg("latest").ok();
    assert_reference_rows("held rows through a rescale", &server, "pg_held_rescale");
    assert!(server.prepared("pg-held-rescale").is_empty());
}

#[test]
fn bad_records_are_skipped_and_counted_or_fail_the_run_naming_the_column() {
    let Some(server) = Server::configured("pg bad records") else { return };
    server.query("DROP TABLE IF EXISTS pg_bad; CREATE TABLE pg_bad (id int4 PRIMARY KEY, amount int2)");
    let dir = tmp();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"id\":1,\"amount\":5}\n{\"id\":2,\"amount\":70000}\n{\"id\":3}\n{\"id\":4,\"amount\":\"x\"}\n{\"id\":5,\"amount\":null}\n",
    )
    .unwrap();
    let yaml = dir.path().join("p.yaml");
    let write = |on_error: &str| {
        std::fs::write(
            &yaml,
            format!(
                "name: pg-bad\nstate: {{dir: {}}}\ncheckpoint: {{interval: 100ms}}\nsources:\n  - {{name: in, type: file, path: {}}}\nsinks:\n  - {{name: db, type: postgres, input: in, url: \"{}\", table: pg_bad, mode: upsert, key: [id], columns: {{id: id, amount: amount}}, on_error: {on_error}}}\n",
                dir.path().join("state").display(),
                input.display(),
                server.url
            ),
        )
        .unwrap()
    };
    write("skip");
    let run = || weir(&["run", "--no-progress", &yaml.display().to_string()]).env("PGPASSWORD", &server.password).run();
    let out = run();
    out.expect_code(0);
    assert_eq!(server.query("SELECT id, coalesce(amount::text, 'NULL') FROM pg_bad ORDER BY id"), ["1|5", "5|NULL"]);
    let text = out.stdout.clone() + &out.stderr;
    assert!(text.contains("3 bad"), "the skipped records are counted: {text}");
    std::fs::remove_dir_all(dir.path().join("state")).unwrap();
    write("fail");
    let out = run();
    assert!(!out.status.success());
    let err = &out.stderr;
    assert!(err.contains("column `amount` (field `amount`): 70000 is out of the column's range -32768..=32767"), "{err}");
}

#[test]
fn a_mapping_the_table_cannot_take_is_refused_at_start_naming_the_table_columns() {
    let Some(server) = Server::configured("pg mapping") else { return };
    server.query("DROP TABLE IF EXISTS pg_mapping; CREATE TABLE pg_mapping (id int8, tags int4[])");
    let dir = tmp();
    let run = |columns: &str| {
        let yaml = dir.path().join("p.yaml");
        std::fs::write(&yaml, format!("name: pg-mapping\nsources:\n  - {{name: in, type: datagen, rows: 10, fields: {{id: {{kind: sequence}}}}}}\nsinks:\n  - {{name: db, type: postgres, input: in, url: \"{}\", table: pg_mapping, columns: {columns}, delivery: at_least_once}}\n", server.url)).unwrap();
        weir(&["run", "--no-progress", &yaml.display().to_string()]).env("PGPASSWORD", &server.password).run()
    };
    let out = run("{id: id, nope: id}");
    assert!(!out.status.success());
    let err = &out.stderr;
    assert!(err.contains("table `pg_mapping` has no column `nope` (it has: id, tags)"), "{err}");
    let out = run("{tags: id}");
    let err = &out.stderr;
    assert!(err.contains("column `tags` of table `pg_mapping` is of type integer[], which the sink cannot fill"), "{err}");
    assert_eq!(server.query("SELECT count(*) FROM pg_mapping"), ["0"]);
}

/// A server of our own (so it can be stopped or configured), started by scripts/postgres.sh.
struct PrivateServer {
    data: tempfile::TempDir,
    server: Server,
}

impl PrivateServer {
    fn start(test: &str, max_prepared: u32) -> Option<PrivateServer> {
        Server::configured(test)?;
        let data = tmp();
        let out = script(&["start", "--data-dir", &data.path().display().to_string(), "--max-prepared", &max_prepared.to_string()]);
        let mut url = String::new();
        let mut password = String::new();
        for kv in out.trim().strip_prefix("export ").unwrap_or_default().split_whitespace() {
            match kv.split_once('=') {
                Some(("WEIR_PG_URL", v)) => url = v.to_string(),
                Some(("PGPASSWORD", v)) => password = v.to_string(),
                _ => {}
            }
        }
        Some(PrivateServer { data, server: Server { url, password } })
    }

    fn dir(&self) -> String {
        self.data.path().display().to_string()
    }

    fn stop(&self, kill: bool) {
        let dir = self.dir();
        let mut args = vec!["stop", "--data-dir", &dir];
        if kill {
            args.push("--kill");
        }
        script(&args);
    }

    fn start_again(&self) {
        script(&["start", "--data-dir", &self.dir(), "--max-prepared", "64"]);
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop(false);
    }
}

fn script(args: &[&str]) -> String {
    let o = Command::new(repo().join("scripts/postgres.sh")).args(args).output().expect("running scripts/postgres.sh");
    assert!(o.status.success(), "postgres.sh {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The server is killed mid-run: the run fails naming it (never its
/// password); once it is back, a restore writes every row exactly once.
#[test]
fn a_server_killed_mid_run_fails_the_run_naming_it_and_a_restore_completes_exactly_once() {
    let Some(private) = PrivateServer::start("pg outage", 64) else { return };
    let server = &private.server;
    server.create_windows_table("pg_outage", false);
    let dir = tmp();
    let state = dir.path().join("state");
    let c = || append(cmd(server, "pg-outage", "pg_outage", Backend::Memory, 2, &state));
    let run = c().set("sources.events.rate_limit", "500").spawn();
    assert!(wait_until(Duration::from_secs(20), || !server.window_rows("pg_outage").is_empty()), "nothing committed");
    private.stop(true);
    let out = run.wait_for(RUN_TIMEOUT);
    assert_ne!(out.code(), Some(0), "the run fails without its server");
    let host = server.url.trim_start_matches("postgres://weir@").trim_end_matches("/weir").to_string();
    out.expect_stderr_contains(&format!("PostgreSQL at {host}/weir"));
    assert!(!out.stderr.contains(&server.password), "never the password");
    private.start_again();
    c().set("sources.events.rate_limit", "1000000000").arg("--restore").arg("latest").ok();
    assert_reference_rows("after the outage", server, "pg_outage");
    assert!(server.prepared("pg-outage").is_empty());
}

#[test]
fn exactly_once_is_refused_at_start_when_the_server_allows_no_prepared_transactions() {
    let Some(private) = PrivateServer::start("pg no 2pc", 0) else { return };
    let server = &private.server;
    server.create_windows_table("pg_no_2pc", true);
    let dir = tmp();
    let out = cmd(server, "pg-no-2pc", "pg_no_2pc", Backend::Memory, 1, &dir.path().join("state")).run();
    assert!(!out.status.success());
    let err = &out.stderr;
    assert!(err.contains("max_prepared_transactions = 0") && err.contains("delivery: at_least_once"), "{err}");
    assert_eq!(server.query("SELECT count(*) FROM pg_no_2pc"), ["0"]);
    // At least once needs no prepared transactions.
    cmd(server, "pg-no-2pc", "pg_no_2pc", Backend::Memory, 1, &dir.path().join("state2"))
        .set("sinks.db.delivery", "at_least_once")
        .set("sources.events.rate_limit", "1000000000")
        .ok();
    assert_reference_rows("at least once", server, "pg_no_2pc");
}

/// A running aggregate's updates upserted by its key: batches hold several
/// updates of one key (the statement keeps the last), across kills; the
/// table ends with each user's totals over the whole input.
#[test]
fn running_updates_upserted_by_key_end_with_each_keys_totals_across_kills() {
    let Some(server) = Server::configured("pg running") else { return };
    server.query(r#"DROP TABLE IF EXISTS pg_running; CREATE TABLE pg_running ("user" text PRIMARY KEY, n bigint, total bigint)"#);
    let dir = tmp();
    let yaml = dir.path().join("p.yaml");
    std::fs::write(
        &yaml,
        format!(
            "name: pg-running\nparallelism: 2\nstate: {{dir: {}}}\ncheckpoint: {{interval: 120ms}}\nsources:\n  - {{name: events, type: file, path: testdata/inputs/events/*.jsonl, rate_limit: 700}}\noperators:\n  - {{name: unique, type: dedup, input: events, key: [id], ttl: 1h}}\n  - {{name: per_user, type: aggregate, input: unique, key: [user], emit_interval: 50ms, aggregates: [{{fn: count, as: n}}, {{fn: sum, field: amount, as: total}}]}}\nsinks:\n  - {{name: db, type: postgres, input: per_user, url: \"{}\", table: pg_running, mode: upsert, key: [user], batch_size: 40, columns: {{user: user, n: n, total: total}}}}\n",
            dir.path().join("state").display(),
            server.url
        ),
    )
    .unwrap();
    let yaml = yaml.display().to_string();
    let mut rng = Rng::from_env("pg running");
    for i in 0..5 {
        let mut c = weir(&["run", "--no-progress", &yaml]).env("PGPASSWORD", &server.password);
        if i > 0 {
            c = c.arg("--restore").arg("latest");
        }
        let mut run = c.spawn();
        if !kill_after(&mut run, rng.millis(300, 900)) {
            run.wait_for(RUN_TIMEOUT).expect_code(0);
            break;
        }
    }
    weir(&["run", "--no-progress", &yaml, "--restore", "latest"])
        .set("sources.events.rate_limit", "1000000000")
        .env("PGPASSWORD", &server.password)
        .ok();
    let mut want = std::collections::BTreeMap::<String, (i64, i64)>::new();
    for o in reference_output() {
        let e = want.entry(o["user"].as_str().unwrap().to_string()).or_default();
        e.0 += o["n"].as_i64().unwrap();
        e.1 += o["total"].as_i64().unwrap();
    }
    let want: Vec<String> = want.iter().map(|(u, (n, t))| format!("{u}|{n}|{t}")).collect();
    assert_eq!(server.query(r#"SELECT "user", n, total FROM pg_running ORDER BY "user""#), want);
    assert!(server.prepared("pg-running").is_empty());
}

/// Values only the server can refuse (too long for a varchar, a numeric
/// overflow, a date out of range, a NUL in jsonb) fail their own row, not
/// the batch: skipped and counted, or failing the run with the server's reason.
#[test]
fn values_the_server_refuses_are_bad_records_of_their_own() {
    let Some(server) = Server::configured("pg refused") else { return };
    server.query("DROP TABLE IF EXISTS pg_refused; CREATE TABLE pg_refused (id int4 PRIMARY KEY, code varchar(3), price numeric(5,2), at timestamptz, doc jsonb)");
    let dir = tmp();
    let input = dir.path().join("in.jsonl");
    let lines = [
        r#"{"id":1,"code":"abc","price":1.5,"at":1700000000000,"doc":{"a":1}}"#,
        r#"{"id":2,"code":"abcd","price":null,"at":null,"doc":null}"#,
        r#"{"id":3,"code":null,"price":123456,"at":null,"doc":null}"#,
        r#"{"id":4,"code":null,"price":null,"at":-99999999999999,"doc":null}"#,
        r#"{"id":5,"code":null,"price":null,"at":null,"doc":{"a":"x\u0000y"}}"#,
        r#"{"id":6,"code":"ok","price":null,"at":null,"doc":null}"#,
    ];
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let yaml = dir.path().join("p.yaml");
    let write = |on_error: &str| {
        let text = format!(
            "name: pg-refused\nstate: {{dir: {}}}\ncheckpoint: {{interval: 100ms}}\nsources:\n  - {{name: in, type: file, path: {}}}\nsinks:\n  - {{name: db, type: postgres, input: in, url: \"{}\", table: pg_refused, mode: upsert, key: [id], columns: {{id: id, code: code, price: price, at: at, doc: doc}}, on_error: {on_error}}}\n",
            dir.path().join("state").display(),
            input.display(),
            server.url
        );
        std::fs::write(&yaml, text).unwrap()
    };
    let run = || weir(&["run", "--no-progress", &yaml.display().to_string()]).env("PGPASSWORD", &server.password).run();
    write("skip");
    let out = run();
    out.expect_code(0);
    assert_eq!(server.query("SELECT id FROM pg_refused ORDER BY id"), ["1", "6"]);
    let text = out.stdout.clone() + &out.stderr;
    assert!(text.contains("4 bad"), "the refused rows are counted: {text}");
    std::fs::remove_dir_all(dir.path().join("state")).unwrap();
    server.query("TRUNCATE pg_refused");
    write("fail");
    let out = run();
    assert!(!out.status.success());
    out.expect_stderr_contains("the server refused the row: value too long for type character varying(3)");
}

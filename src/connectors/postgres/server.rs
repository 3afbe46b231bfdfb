//! The connection to the server: the URL parsed (the password taken from
//! the environment, never from the YAML), named as `host:port/db` in every
//! message so no error or log line shows a password, and a connect that
//! waits out an outage up to `server_timeout`.

use std::str::FromStr;
use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::{Client, Config, NoTls};

/// Where the sink writes: the client settings and their printable name.
#[derive(Clone)]
pub struct Server {
    config: Config,
    /// `host:port/db`, for messages.
    pub name: String,
}

impl Server {
    /// The server of `url`, with the password from `$password_env` when it is set.
    pub fn new(url: &str, password_env: &str) -> Result<Server, String> {
        let mut config = Config::from_str(url).map_err(|e| format!("bad PostgreSQL URL `{}`: {e}", redact(url)))?;
        if let Ok(password) = std::env::var(password_env) {
            config.password(password);
        }
        config.connect_timeout(Duration::from_secs(10));
        // A connection that goes silent (a partition, no reset) is found
        // dead in about 20 s instead of the kernel's two hours.
        config.keepalives(true).keepalives_idle(Duration::from_secs(5)).keepalives_interval(Duration::from_secs(5)).keepalives_retries(3);
        config.tcp_user_timeout(Duration::from_secs(20));
        config.application_name("weir");
        Ok(Server { name: name_of(&config), config })
    }

    /// Connect, retrying while the server is unreachable or starting, for up to `timeout`.
    pub fn connect(&self, timeout: Duration) -> Result<Client, String> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            match self.config.connect(NoTls) {
                Ok(client) => return Ok(client),
                Err(e) if retryable(&e) && start.elapsed() + pause < timeout => {
                    tracing::warn!(server = %self.name, error = %describe(&e), "PostgreSQL is unreachable; retrying.");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                Err(e) => return Err(format!("cannot connect to PostgreSQL at {}: {}", self.name, describe(&e))),
            }
        }
    }
}

/// An outage, not a refusal: no answer, or a server still starting up.
fn retryable(e: &postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(code) => *code == SqlState::CANNOT_CONNECT_NOW || *code == SqlState::ADMIN_SHUTDOWN,
    }
}

/// `host:port/db` of the first host (all hosts, comma-separated, when several).
fn name_of(config: &Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match h {
                postgres::config::Host::Tcp(host) => format!("{host}:{port}"),
                postgres::config::Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    let hosts = if hosts.is_empty() { "localhost:5432".to_string() } else { hosts.join(",") };
    format!("{hosts}/{}", config.get_dbname().or(config.get_user()).unwrap_or(""))
}

/// `url` with any password (user info, or a `password=` parameter) replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) if user_info.contains(':') => {
            let user = user_info.split(':').next().unwrap_or("");
            format!("{user}:***@{host}")
        }
        _ => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let redacted: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            format!("{path}?{}", redacted.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// An error of the client as one line: the server's message and SQLSTATE
/// for a database error, else the client's (I/O, closed connection).
pub fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let detail = db.detail().map(|d| format!(" ({d})")).unwrap_or_default();
            format!("{}{detail} [SQLSTATE {}]", db.message(), db.code().code())
        }
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text += &format!(": {s}");
                source = s.source();
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_named_by_host_port_and_database_never_by_its_password() {
        std::env::set_var("WEIR_TEST_PG_PASSWORD_UNIT", "s3cret");
        let s = Server::new("postgres://weir@10.0.0.9:6543/orders", "WEIR_TEST_PG_PASSWORD_UNIT").unwrap();
        assert_eq!(s.name, "10.0.0.9:6543/orders");
        assert_eq!(Server::new("postgresql://u@h/d", "UNSET_VAR_FOR_WEIR_TEST").unwrap().name, "h:5432/d");
        assert_eq!(redact("postgres://u:pw@h:1/d?x=1"), "postgres://u:***@h:1/d?x=1");
        assert_eq!(redact("postgres://u@h:1/d"), "postgres://u@h:1/d");
        assert_eq!(redact("postgres://u@h/d?sslmode=off&password=pw"), "postgres://u@h/d?sslmode=off&password=***");
        let err = Server::new("postgres://u:pw@h:notaport/d", "X").err().unwrap();
        assert!(!err.contains("pw"), "{err}");
    }

    #[test]
    fn an_unreachable_server_fails_after_the_timeout_naming_it() {
        // A loopback port nothing listens on (bound, then released).
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let s = Server::new(&format!("postgres://weir@127.0.0.1:{port}/db"), "X").unwrap();
        let start = Instant::now();
        let err = s.connect(Duration::from_millis(500)).err().unwrap();
        assert!(err.starts_with(&format!("cannot connect to PostgreSQL at 127.0.0.1:{port}/db: ")), "{err}");
        assert!(start.elapsed() >= Duration::from_millis(300), "it retried");
    }
}

//! One connection to the server, on a thread of its own.
//!
//! The `postgres` client blocks on a small runtime of its own, which must
//! not run inside one of weir's tokio workers; so the client lives on a
//! plain thread and the sink hands it closures, waiting for each answer
//! (through `crate::blocking::call`, so the other tasks of the worker go
//! on meanwhile). Dropping the handle closes the connection: the server
//! rolls back an open transaction, prepared ones stay.

use std::sync::mpsc;
use std::time::Duration;

use postgres::Client;

use super::server::Server;

type Job = Box<dyn FnOnce(&mut Client) + Send>;

pub struct Conn {
    jobs: mpsc::Sender<Job>,
    /// `host:port/db`, for messages.
    pub name: String,
}

impl Conn {
    /// Connect to `server` (waiting out an outage up to `timeout`).
    pub fn open(server: &Server, timeout: Duration) -> Result<Conn, String> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready, connected) = mpsc::channel();
        let s = server.clone();
        std::thread::Builder::new()
            .name("weir-postgres".into())
            .spawn(move || match s.connect(timeout) {
                Ok(mut client) => {
                    let _ = ready.send(Ok(()));
                    for job in queue {
                        job(&mut client);
                    }
                }
                Err(e) => {
                    let _ = ready.send(Err(e));
                }
            })
            .map_err(|e| format!("starting the PostgreSQL connection thread: {e}"))?;
        crate::blocking::call(|| connected.recv()).map_err(|_| "the PostgreSQL connection thread ended".to_string())??;
        Ok(Conn { jobs, name: server.name.clone() })
    }

    /// Run `f` with the client and wait for its result.
    pub fn call<R: Send + 'static>(&self, f: impl FnOnce(&mut Client) -> R + Send + 'static) -> Result<R, String> {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |c| {
            let _ = tx.send(f(c));
        });
        let gone = || format!("the connection to PostgreSQL at {} is gone", self.name);
        self.jobs.send(job).map_err(|_| gone())?;
        crate::blocking::call(|| rx.recv()).map_err(|_| gone())
    }
}

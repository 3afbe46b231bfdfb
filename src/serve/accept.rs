//! The one accept loop of weir's servers (the control socket and the HTTP
//! endpoint), bounded the same way for both: at most `max_clients`
//! connections at once (one more is handed to `refuse`, which answers it
//! without waiting and closes it), and failed accepts (EMFILE stays until
//! descriptors are freed) back off from 10 ms to 1 s with a rate-limited
//! warning instead of spinning and flooding the log.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinSet;

/// A listening socket of either kind.
pub trait Listener {
    type Stream;
    fn accept_one(&self) -> impl Future<Output = std::io::Result<Self::Stream>> + Send;
}

impl Listener for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn accept_one(&self) -> std::io::Result<Self::Stream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

impl Listener for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn accept_one(&self) -> std::io::Result<Self::Stream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

/// How often a failing accept is logged at most.
const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(5);

/// Accept connections until `stop` turns true, serving each with the
/// future `serve` makes of it; returns the connections still open, for the
/// caller to let finish or cut off. `server` names it in warnings.
pub async fn accept_loop<L, F>(
    listener: &L,
    server: &'static str,
    max_clients: usize,
    stop: &mut watch::Receiver<bool>,
    refuse: impl Fn(L::Stream),
    serve: impl Fn(L::Stream) -> F,
) -> JoinSet<()>
where
    L: Listener,
    F: Future<Output = ()> + Send + 'static,
{
    let mut conns = JoinSet::new();
    let mut failures: u32 = 0;
    let mut warning = RateLimit::new(ACCEPT_WARN_EVERY);
    loop {
        let pause = tokio::select! {
            accepted = listener.accept_one() => match accepted {
                Ok(stream) => {
                    failures = 0;
                    while conns.try_join_next().is_some() {}
                    if conns.len() >= max_clients {
                        tracing::debug!(server, max_clients, "Client refused: too many clients.");
                        refuse(stream);
                    } else {
                        conns.spawn(serve(stream));
                    }
                    None
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let pause = accept_backoff(failures);
                    if let Some(suppressed) = warning.allow(Instant::now()) {
                        tracing::warn!(server, error = %e, suppressed, pause_ms = pause.as_millis() as u64, "Accepting a connection failed; backing off.");
                    }
                    Some(pause)
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => None,
            _ = stop.wait_for(|s| *s) => break,
        };
        if let Some(pause) = pause {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    }
    conns
}

/// How long to pause after the `failures`-th accept error in a row: 10 ms,
/// doubling, at most 1 s.
fn accept_backoff(failures: u32) -> Duration {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);
    if failures == 0 {
        return Duration::ZERO;
    }
    FIRST.saturating_mul(1u32 << (failures - 1).min(16)).min(MAX)
}

/// Lets an event through at most once per `every`, counting the others.
#[derive(Debug)]
struct RateLimit {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimit {
    fn new(every: Duration) -> RateLimit {
        RateLimit { every, last: None, suppressed: 0 }
    }

    /// `Some(n)`: report now, `n` events were suppressed since the last report.
    fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                self.suppressed = self.suppressed.saturating_add(1);
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_backoff_doubles_from_10ms_up_to_a_second() {
        let ms = |n| accept_backoff(n).as_millis();
        assert_eq!((ms(0), ms(1), ms(2), ms(3), ms(7)), (0, 10, 20, 40, 640));
        assert_eq!((ms(8), ms(30), ms(u32::MAX)), (1000, 1000, 1000));
    }

    #[test]
    fn accept_warnings_are_rate_limited_and_count_the_suppressed() {
        let t0 = Instant::now();
        let mut limit = RateLimit::new(Duration::from_secs(5));
        assert_eq!(limit.allow(t0), Some(0));
        for i in 1..=1000 {
            assert_eq!(limit.allow(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(limit.allow(t0 + Duration::from_secs(5)), Some(1000));
        assert_eq!(limit.allow(t0 + Duration::from_secs(6)), None);
        assert_eq!(limit.allow(t0 + Duration::from_secs(11)), Some(1));
    }
}

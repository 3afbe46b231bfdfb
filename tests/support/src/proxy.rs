//! A TCP proxy between weir and a server (S3, the broker) that injects
//! network faults the kernel here cannot (`tc netem` is missing): bytes
//! held and delivered late (a stalled path: the stale-owner case), added
//! latency, and cuts (every connection reset). One thread per direction
//! of each connection; it stops with the test (dropped).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// What the proxy does to bytes from the client to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    /// Read but not forwarded until the mode changes: then delivered, late.
    Hold,
    /// Forwarded after this delay, each chunk.
    Latency(Duration),
}

struct Shared {
    mode: Mutex<Mode>,
    changed: Condvar,
    stopped: AtomicBool,
    /// Both ends of every connection, for [`Proxy::cut`].
    streams: Mutex<Vec<TcpStream>>,
}

pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Proxy {
    /// A proxy on a free loopback port to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the proxy");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Pass),
            changed: Condvar::new(),
            stopped: AtomicBool::new(false),
            streams: Mutex::new(Vec::new()),
        });
        let (s, upstream) = (shared.clone(), upstream.to_string());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else { continue };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                {
                    let mut all = s.streams.lock().unwrap();
                    all.extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                }
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let gated = s.clone();
                std::thread::spawn(move || pump(client, server, Some(gated)));
                std::thread::spawn(move || pump(s2, c2, None));
            }
        });
        Proxy { addr, shared }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
        self.shared.changed.notify_all();
    }

    /// Reset every open connection (new ones are accepted again).
    pub fn cut(&self) {
        for s in self.shared.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.set(Mode::Pass);
        self.cut();
        // Wake the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Copy `from` to `to`; with `gate`, each chunk waits for the mode first.
fn pump(mut from: TcpStream, mut to: TcpStream, gate: Option<Arc<Shared>>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(g) = &gate {
            let mut mode = g.mode.lock().unwrap();
            while *mode == Mode::Hold {
                mode = g.changed.wait(mode).unwrap();
            }
            if let Mode::Latency(d) = *mode {
                drop(mode);
                std::thread::sleep(d);
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

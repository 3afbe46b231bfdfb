//! The end of a run, after its outcome is known: the runtime's remaining
//! tasks, then the state directory's lock and lease, within a bound.
//!
//! Everything the run promised is committed by then; what is left can only
//! hold the process up (a Kafka client closing against a slow broker, a
//! request to a stalled object store). A process that does not exit after a
//! completed stop-with-savepoint looks hung to whoever stopped it, and under
//! Kubernetes it is killed after its grace period anyway. So each step is
//! named, and a watchdog ends the process with the run's own status once
//! the bound is spent, saying which step held it.

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// How long the end of a run may take in all.
pub const GRACE: Duration = Duration::from_secs(20);
/// How long the runtime's remaining tasks are waited for (within [`GRACE`]).
pub const RUNTIME_GRACE: Duration = Duration::from_secs(5);

/// Names the step under way; dropping it (the normal end) calls the watchdog off.
pub struct Ending {
    step: Arc<Mutex<&'static str>>,
    _done: mpsc::Sender<()>,
}

impl Ending {
    /// Start the watchdog: after `grace`, exit with `status` unless dropped.
    pub fn begin(status: u8, grace: Duration) -> Ending {
        let step = Arc::new(Mutex::new("ending the run"));
        let (done, wait) = mpsc::channel::<()>();
        let held = step.clone();
        let started = std::thread::Builder::new().name("weir-ending".into()).spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(grace) {
                let step = *held.lock().unwrap_or_else(|e| e.into_inner());
                tracing::error!(
                    step,
                    grace_s = grace.as_secs(),
                    status,
                    "The process did not exit in time after the run ended; exiting now. What the run committed stays committed."
                );
                // `_exit`: no destructors of threads still running (RocksDB's
                // C++ statics could abort the process instead).
                signal_hook::low_level::exit(i32::from(status));
            }
        });
        if let Err(e) = started {
            tracing::warn!(error = %e, "Cannot start the exit watchdog; the process exits when the run's last step ends.");
        }
        Ending { step, _done: done }
    }

    /// The step under way, named in the log if it holds the exit up.
    pub fn step(&self, name: &'static str) {
        *self.step.lock().unwrap_or_else(|e| e.into_inner()) = name;
    }
}

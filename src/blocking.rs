//! Blocking calls made from the runtime's async tasks.
//!
//! Operators and connectors are synchronous: a Kafka transaction commit, a
//! producer flush, an fsync or a keyed-state restore runs to its end inside
//! the task that called it, in the order the checkpoint protocol needs. Run
//! on a tokio worker as is, such a call holds the worker, and with as many
//! workers as cores (two on two cores) a few of them starve everything
//! else: the control socket, the checkpoint driver, the signal listener.
//! `call` keeps the call where it is (same task, same order, same result)
//! and hands the worker's other tasks to a fresh thread for its duration
//! (`tokio::task::block_in_place`).

use tokio::runtime::{Handle, RuntimeFlavor};

/// Run `f`, which may block for long, without holding up the other tasks.
///
/// Outside a multi-threaded runtime (unit tests, plain threads) `f` just
/// runs: there is no worker to free.
pub fn call<T>(f: impl FnOnce() -> T) -> T {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    /// Two workers both inside a blocking call: a third task still runs.
    #[test]
    fn blocking_calls_on_every_worker_do_not_starve_other_tasks() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
            let blockers: Vec<_> = (0..2)
                .map(|_| {
                    let rx = rx.clone();
                    tokio::spawn(async move { super::call(|| rx.lock().unwrap().recv_timeout(Duration::from_secs(10))) })
                })
                .collect();
            tokio::time::sleep(Duration::from_millis(50)).await;
            let started = Instant::now();
            let answered = tokio::spawn(async { 42 }).await.unwrap();
            assert_eq!(answered, 42);
            assert!(started.elapsed() < Duration::from_secs(2), "a task waited {:?} for a worker", started.elapsed());
            drop(tx);
            for b in blockers {
                let _ = b.await;
            }
        });
    }

    #[test]
    fn outside_a_runtime_the_call_just_runs() {
        assert_eq!(super::call(|| 7), 7);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        assert_eq!(rt.block_on(async { super::call(|| 8) }), 8);
    }
}

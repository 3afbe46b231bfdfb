//! One process owns a checkpoint storage (`checkpoint.storage:
//! s3://bucket/prefix`), as the state directory's `flock` gives one process
//! a state directory on one machine.
//!
//! The owner is the object `_owner` under the prefix: who holds it (host,
//! PID, state directory, a token of this start) and when it was last
//! renewed. [`acquire`] creates it with a conditional put
//! (`If-None-Match: *`); a record that is there already is taken over,
//! with `If-Match` on the version read (so of two contenders one wins),
//! only when its holder is provably gone: on the same host (same host name,
//! boot and PID namespace), when its PID no longer runs or when its state
//! directory is the one whose `flock` this process holds; else once its
//! lease expired (not renewed for `lease`, by the wall clocks of both
//! hosts). Otherwise the start is refused, before it wrote anything.
//!
//! The [`Lease`] renews the record every third of the lease, `If-Match`
//! its own last version. When that fails because another process took the
//! record over (or when no renewal got through for a whole lease), the
//! lease is lost: [`Owned`], the storage a run writes through, then
//! refuses every write, so the old owner can no longer commit a
//! checkpoint. Dropping the lease (a clean exit) marks the record
//! released, `If-Match` its own version (a conditional put: S3 has no
//! conditional delete, and a retried delete landing late could remove a
//! successor's record), so the next start anywhere needs not wait.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::storage::{Object, Storage, StorageError};

/// The owner record's key under the storage's root.
pub const OWNER_KEY: &str = "_owner";

/// How long an owner that stopped renewing keeps the storage.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Why the storage cannot be (or is no longer) owned.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    #[error(
        "checkpoint storage {root} is in use by weir process {pid} on host {host} (pipeline `{pipeline}`, state directory {state_dir}; its lease was renewed {age_ms} ms ago and lasts {lease_ms} ms): stop it first, or wait until its lease expired if that process is gone"
    )]
    Held { root: String, pid: u32, host: String, pipeline: String, state_dir: String, age_ms: i64, lease_ms: u64 },
    #[error("checkpoint storage {root}: its owner record {url} is unreadable ({reason}); if no weir process uses this storage, delete it")]
    Unreadable { root: String, url: String, reason: String },
    #[error("checkpoint storage {root}: this process lost its ownership: {why}")]
    Lost { root: String, why: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// The content of `_owner`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub pipeline: String,
    pub host: String,
    /// Boot id and PID namespace: a PID means the same process only when
    /// both are the same.
    pub machine: String,
    pub pid: u32,
    pub state_dir: String,
    /// Unique to one start of one process.
    pub token: String,
    pub lease_ms: u64,
    pub renewed_ms: i64,
    /// Given up by a clean exit: free for anyone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
}

/// Who claims the storage.
#[derive(Debug, Clone)]
pub struct Claim {
    pub pipeline: String,
    /// The state directory, canonical.
    pub state_dir: String,
    /// Whether this process holds that directory's `flock` now.
    pub state_dir_locked: bool,
    pub lease: Duration,
}

/// How the storage was acquired (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// Nobody owned it.
    Free,
    /// Taken over from a process of this host that is gone.
    Gone { pid: u32 },
    /// Taken over from a holder whose lease expired.
    Expired { pid: u32, host: String, age_ms: i64 },
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// This host: its name, and its boot id with this PID namespace.
fn host_identity() -> (String, String) {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let pidns = std::fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string()).unwrap_or_default();
    (read("/proc/sys/kernel/hostname"), format!("{}/{pidns}", read("/proc/sys/kernel/random/boot_id")))
}

/// Whether `pid` runs on this machine (a PID reused by another process
/// counts as running: then the lease decides, never a guess).
fn pid_runs(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

impl Claim {
    fn record(&self) -> Record {
        let (host, machine) = host_identity();
        let pid = std::process::id();
        Record {
            pipeline: self.pipeline.clone(),
            host,
            machine,
            pid,
            state_dir: self.state_dir.clone(),
            token: format!("{pid}-{}", SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())),
            lease_ms: self.lease.as_millis() as u64,
            renewed_ms: now_ms(),
            released: false,
        }
    }

    /// Whether the holder of `r` is gone or may be replaced; None: it holds.
    fn replaces(&self, ours: &Record, r: &Record, now: i64) -> Option<Acquired> {
        if r.released {
            return Some(Acquired::Free);
        }
        let same_machine = r.host == ours.host && r.machine == ours.machine && !r.machine.starts_with('/');
        if same_machine && (!pid_runs(r.pid) || (self.state_dir_locked && r.state_dir == self.state_dir) || r.pid == ours.pid) {
            return Some(Acquired::Gone { pid: r.pid });
        }
        let age_ms = now.saturating_sub(r.renewed_ms);
        (age_ms > r.lease_ms as i64).then(|| Acquired::Expired { pid: r.pid, host: r.host.clone(), age_ms })
    }
}

/// Become the owner of `storage`, or say who is.
pub fn acquire(storage: Arc<dyn Storage>, claim: &Claim) -> Result<(Lease, Acquired), OwnerError> {
    let root = storage.root();
    let url = storage.url(OWNER_KEY);
    for _ in 0..5 {
        // The lease counts from before the record (and its time) was made:
        // a put that took long must not lengthen it.
        let made = Instant::now();
        let ours = claim.record();
        let bytes = serde_json::to_vec_pretty(&ours).expect("an owner record serializes");
        let (version, how) = match storage.put_conditional(OWNER_KEY, &bytes, None) {
            Ok(v) => (v, Acquired::Free),
            Err(StorageError::AlreadyExists { .. }) => {
                let (held, held_version) = match storage.get_versioned(OWNER_KEY) {
                    Ok(got) => got,
                    // Released meanwhile: create it again.
                    Err(e) if e.is_not_found() => continue,
                    Err(e) => return Err(e.into()),
                };
                let r: Record = serde_json::from_slice(&held).map_err(|e| OwnerError::Unreadable {
                    root: root.clone(),
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
                let now = now_ms();
                let Some(how) = claim.replaces(&ours, &r, now) else {
                    return Err(OwnerError::Held {
                        root,
                        pid: r.pid,
                        host: r.host,
                        pipeline: r.pipeline,
                        state_dir: r.state_dir,
                        age_ms: now.saturating_sub(r.renewed_ms),
                        lease_ms: r.lease_ms,
                    });
                };
                match storage.put_conditional(OWNER_KEY, &bytes, Some(&held_version)) {
                    Ok(v) => (v, how),
                    // Another process changed it first: look again.
                    Err(StorageError::Conflict { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        return Ok((Lease::start(storage, ours, version, made), how));
    }
    Err(OwnerError::Lost { root, why: format!("{url} kept changing while this process tried to take it") })
}

/// What the renewer and the guarded storage share.
#[derive(Debug)]
struct Shared {
    storage: Arc<dyn Storage>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    record: Record,
    version: String,
    lost: Option<String>,
    /// When the last renewal that got through was sent.
    renewed: Instant,
}

impl State {
    /// Why this process may not write now: lost, or not renewed for two
    /// thirds of the lease (a contender waits the whole lease, by the
    /// record's time, so the holder stops first; e.g. after a SIGSTOP).
    fn why_not(&self) -> Option<String> {
        if let Some(why) = &self.lost {
            return Some(why.clone());
        }
        let stale = self.renewed.elapsed();
        (stale > Duration::from_millis(self.record.lease_ms * 2 / 3))
            .then(|| format!("its lease was last renewed {} ms ago (the lease is {} ms)", stale.as_millis(), self.record.lease_ms))
    }
}

impl Shared {
    /// Ok while this process may write as the owner.
    fn owned(&self) -> Result<(), OwnerError> {
        match self.state.lock().unwrap_or_else(|e| e.into_inner()).why_not() {
            None => Ok(()),
            Some(why) => Err(OwnerError::Lost { root: self.storage.root(), why }),
        }
    }

    fn check(&self) -> Result<(), StorageError> {
        match self.state.lock().unwrap_or_else(|e| e.into_inner()).why_not() {
            None => Ok(()),
            Some(why) => Err(StorageError::Failed {
                op: "write to",
                url: self.storage.root(),
                message: format!("this process does not own the checkpoint storage now: {why}"),
            }),
        }
    }

    /// One renewal; false once the lease is lost.
    fn renew(&self, last_ok: &mut Instant) -> bool {
        let sent = Instant::now();
        let (mut record, version) = {
            let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if s.lost.is_some() {
                return false;
            }
            (s.record.clone(), s.version.clone())
        };
        record.renewed_ms = now_ms();
        let bytes = serde_json::to_vec_pretty(&record).expect("an owner record serializes");
        let outcome = match self.storage.put_conditional(OWNER_KEY, &bytes, Some(&version)) {
            Ok(v) => Ok(v),
            // A retried put whose first try went through: the record is ours as written.
            Err(StorageError::Conflict { .. }) => match self.storage.get_versioned(OWNER_KEY) {
                Ok((b, v)) if b == bytes => Ok(v),
                // An earlier renewal of ours that landed after all (by the
                // token of this start): still ours, but its time is older
                // than this one's, so it does not count as renewed now; the
                // next renewal goes on from its version.
                Ok((b, v)) if serde_json::from_slice::<Record>(&b).is_ok_and(|r| r.token == record.token) => {
                    self.state.lock().unwrap_or_else(|e| e.into_inner()).version = v;
                    Err(None)
                }
                Ok((b, _)) => Err(Some(match serde_json::from_slice::<Record>(&b) {
                    Ok(r) => format!("weir process {} on host {} took it over", r.pid, r.host),
                    Err(_) => format!("{} was replaced", self.storage.url(OWNER_KEY)),
                })),
                Err(e) if e.is_not_found() => Err(Some(format!("{} was deleted", self.storage.url(OWNER_KEY)))),
                Err(_) => Err(None),
            },
            Err(e) => {
                tracing::warn!(url = %self.storage.url(OWNER_KEY), error = %e, "Cannot renew the checkpoint storage lease; trying again.");
                Err(None)
            }
        };
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(v) => {
                s.record = record;
                s.version = v;
                s.renewed = sent;
                *last_ok = sent;
            }
            Err(Some(why)) => s.lost = Some(why),
            Err(None) if last_ok.elapsed() > Duration::from_millis(s.record.lease_ms) => {
                s.lost = Some(format!("no renewal got through for {} ms, longer than the lease", s.record.lease_ms))
            }
            Err(None) => {}
        }
        if let Some(why) = &s.lost {
            tracing::error!(root = %self.storage.root(), reason = %why, "Lost the ownership of the checkpoint storage; no further checkpoint is committed.");
            return false;
        }
        true
    }
}

/// How long a dropped lease waits for a renewal under way.
const RENEWER_GRACE: Duration = Duration::from_secs(2);

/// The held ownership: renewed on a thread of its own; released (the
/// record marked so) when dropped.
#[derive(Debug)]
pub struct Lease {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

impl Lease {
    fn start(storage: Arc<dyn Storage>, record: Record, version: String, made: Instant) -> Lease {
        let every = Duration::from_millis(record.lease_ms / 3).max(Duration::from_millis(50));
        // The record was put just before: it counts from now (a little late, never early).
        let renewed = made;
        let shared = Arc::new(Shared { storage, state: Mutex::new(State { record, version, lost: None, renewed }) });
        let (stop, stopped) = mpsc::channel::<()>();
        let s = shared.clone();
        let renewer = std::thread::Builder::new()
            .name("weir-lease".into())
            .spawn(move || {
                let mut last_ok = made;
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    if !s.renew(&mut last_ok) {
                        break;
                    }
                }
            })
            .expect("the lease thread starts");
        Lease { shared, stop: Some(stop), renewer: Some(renewer) }
    }

    /// Ok while this process owns the storage.
    pub fn check(&self) -> Result<(), OwnerError> {
        self.shared.owned()
    }

    /// The storage to write through: every write is refused once the lease is lost.
    pub fn guard(&self) -> Arc<dyn Storage> {
        Arc::new(Owned { shared: self.shared.clone() })
    }

    /// A handle that tells whether the ownership is lost for good.
    pub fn ownership(&self) -> Ownership {
        Ownership { shared: self.shared.clone() }
    }
}

/// Whether this process still owns the storage, for the run to stop once
/// it cannot commit a checkpoint ever again.
#[derive(Debug, Clone)]
pub struct Ownership {
    shared: Arc<Shared>,
}

impl Ownership {
    /// Ok while this process may write as the owner: the same test every
    /// write to the storage passes (lost, or not renewed for two thirds of
    /// the lease), for writes to other systems that must not outlive it.
    pub fn check(&self) -> Result<(), OwnerError> {
        self.shared.owned()
    }

    /// The error, once the lease is lost for good (taken over, or no
    /// renewal got through for a whole lease); a lease merely late in
    /// renewing may still recover and is not lost.
    pub fn lost(&self) -> Option<OwnerError> {
        let why = self.shared.state.lock().unwrap_or_else(|e| e.into_inner()).lost.clone()?;
        Some(OwnerError::Lost { root: self.shared.storage.root(), why })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        drop(self.stop.take());
        // A renewal under way may take as long as a request to a slow store
        // can; the release below is conditional on the version, so whichever
        // of the two lands second is refused, and neither need wait long.
        if let Some(t) = self.renewer.take() {
            let waited = Instant::now();
            while !t.is_finished() && waited.elapsed() < RENEWER_GRACE {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let (released, version) = {
            let mut s = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if s.lost.is_some() {
                return;
            }
            // From here on this process writes nothing through the lease: a
            // write still under way somewhere is refused, not raced with
            // the next owner.
            s.lost = Some("released by this process".into());
            (Record { released: true, ..s.record.clone() }, s.version.clone())
        };
        // Only our own record is released: If-Match its version.
        let bytes = serde_json::to_vec_pretty(&released).expect("an owner record serializes");
        match self.shared.storage.put_conditional(OWNER_KEY, &bytes, Some(&version)) {
            Ok(_) | Err(StorageError::Conflict { .. }) => {}
            Err(e) => tracing::warn!(error = %e, "Cannot release the checkpoint storage; the next start takes it over."),
        }
    }
}

/// A storage that writes only while its lease holds.
#[derive(Debug)]
struct Owned {
    shared: Arc<Shared>,
}

impl Owned {
    fn inner(&self) -> &dyn Storage {
        self.shared.storage.as_ref()
    }
}

impl Storage for Owned {
    fn root(&self) -> String {
        self.inner().root()
    }
    fn url(&self, key: &str) -> String {
        self.inner().url(key)
    }
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        self.shared.check()?;
        self.inner().put(key, bytes)
    }
    fn put_file(&self, key: &str, from: &std::path::Path) -> Result<(), StorageError> {
        self.shared.check()?;
        self.inner().put_file(key, from)
    }
    fn put_many(&self, files: Vec<(String, std::path::PathBuf)>) -> Result<(), StorageError> {
        self.shared.check()?;
        self.inner().put_many(files)
    }
    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        // The commit point: checked just before it is put, and again once
        // it is in: a put that took longer than the lease is still good
        // for may have landed after another process took over and listed
        // the store, so its checkpoint may be on no lineage; the caller
        // then must not act on it (a sink must not commit its output).
        self.shared.check()?;
        self.inner().put_if_absent(key, bytes)?;
        self.shared.check().map_err(|e| StorageError::Failed {
            op: "commit",
            url: self.url(key),
            message: format!("the put went through, but too late to count: {e}"),
        })
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        self.inner().get(key)
    }
    fn get_to_file(&self, key: &str, to: &std::path::Path) -> Result<(), StorageError> {
        self.inner().get_to_file(key, to)
    }
    fn get_many(&self, files: Vec<(String, std::path::PathBuf)>) -> Result<(), StorageError> {
        self.inner().get_many(files)
    }
    fn list(&self, prefix: &str) -> Result<Vec<Object>, StorageError> {
        self.inner().list(prefix)
    }
    fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.shared.check()?;
        self.inner().delete(key)
    }
    fn get_versioned(&self, key: &str) -> Result<(Vec<u8>, String), StorageError> {
        self.inner().get_versioned(key)
    }
    fn put_conditional(&self, key: &str, bytes: &[u8], expected: Option<&str>) -> Result<String, StorageError> {
        self.shared.check()?;
        self.inner().put_conditional(key, bytes, expected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::storage::LocalStorage;

    fn claim(dir: &str, locked: bool, lease_ms: u64) -> Claim {
        Claim { pipeline: "p".into(), state_dir: dir.into(), state_dir_locked: locked, lease: Duration::from_millis(lease_ms) }
    }

    fn foreign(storage: &dyn Storage, renewed_ms: i64, lease_ms: u64) {
        let r = Record {
            pipeline: "p".into(),
            host: "elsewhere".into(),
            machine: "other-boot/pid:[1]".into(),
            pid: 1,
            state_dir: "/other".into(),
            token: "t".into(),
            lease_ms,
            renewed_ms,
            released: false,
        };
        storage.put(OWNER_KEY, &serde_json::to_vec(&r).unwrap()).unwrap();
    }

    #[test]
    fn a_live_owner_is_kept_an_expired_one_is_taken_over() {
        let tmp = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(tmp.path()));
        foreign(storage.as_ref(), now_ms(), 60_000);
        let err = acquire(storage.clone(), &claim("/mine", true, 1000)).unwrap_err();
        assert!(matches!(err, OwnerError::Held { pid: 1, .. }), "{err}");
        assert!(err.to_string().contains("in use by weir process 1 on host elsewhere"), "{err}");
        foreign(storage.as_ref(), now_ms() - 61_000, 60_000);
        let (lease, how) = acquire(storage.clone(), &claim("/mine", true, 1000)).unwrap();
        assert!(matches!(how, Acquired::Expired { pid: 1, .. }), "{how:?}");
        let r: Record = serde_json::from_slice(&storage.get(OWNER_KEY).unwrap()).unwrap();
        assert_eq!(r.pid, std::process::id());
        drop(lease);
        let r: Record = serde_json::from_slice(&storage.get(OWNER_KEY).unwrap()).unwrap();
        assert!(r.released, "a dropped lease marks its record released");
        let (_again, how) = acquire(storage.clone(), &claim("/elsewhere", false, 1000)).unwrap();
        assert_eq!(how, Acquired::Free, "a released record is free for anyone at once");
    }

    #[test]
    fn a_gone_process_of_this_host_is_replaced_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(tmp.path()));
        let (first, how) = acquire(storage.clone(), &claim("/a", true, 60_000)).unwrap();
        assert_eq!(how, Acquired::Free);
        // Forget it without releasing, as kill -9 would; its state directory is now ours.
        std::mem::forget(first);
        let (_second, how) = acquire(storage.clone(), &claim("/a", true, 60_000)).unwrap();
        assert_eq!(how, Acquired::Gone { pid: std::process::id() });
    }

    /// A storage behind one stalled connection: a slow commit-point put
    /// holds it, and the lease renewal waits behind it.
    #[derive(Debug)]
    struct Stalling {
        inner: LocalStorage,
        net: Mutex<()>,
        slow: std::sync::atomic::AtomicBool,
    }

    impl Storage for Stalling {
        fn root(&self) -> String {
            self.inner.root()
        }
        fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
            self.inner.put(key, bytes)
        }
        fn put_file(&self, key: &str, from: &std::path::Path) -> Result<(), StorageError> {
            self.inner.put_file(key, from)
        }
        fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
            let _net = self.net.lock().unwrap();
            if self.slow.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(600));
            }
            self.inner.put_if_absent(key, bytes)
        }
        fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
            self.inner.get(key)
        }
        fn get_to_file(&self, key: &str, to: &std::path::Path) -> Result<(), StorageError> {
            self.inner.get_to_file(key, to)
        }
        fn list(&self, prefix: &str) -> Result<Vec<Object>, StorageError> {
            self.inner.list(prefix)
        }
        fn delete(&self, key: &str) -> Result<(), StorageError> {
            self.inner.delete(key)
        }
        fn get_versioned(&self, key: &str) -> Result<(Vec<u8>, String), StorageError> {
            self.inner.get_versioned(key)
        }
        fn put_conditional(&self, key: &str, bytes: &[u8], expected: Option<&str>) -> Result<String, StorageError> {
            let _net = self.net.lock().unwrap();
            self.inner.put_conditional(key, bytes, expected)
        }
    }

    #[test]
    fn a_commit_point_that_lands_after_the_lease_ran_out_does_not_count() {
        let tmp = tempfile::tempdir().unwrap();
        let stalling = Arc::new(Stalling { inner: LocalStorage::new(tmp.path()), net: Mutex::new(()), slow: false.into() });
        let storage: Arc<dyn Storage> = stalling.clone();
        let (lease, _) = acquire(storage.clone(), &claim("/a", true, 300)).unwrap();
        let guarded = lease.guard();
        guarded.put_if_absent("chk-0000001/_metadata", b"md").unwrap();
        stalling.slow.store(true, std::sync::atomic::Ordering::SeqCst);
        let err = guarded.put_if_absent("chk-0000002/_metadata", b"md").unwrap_err();
        assert!(err.to_string().contains("too late to count"), "{err}");
        assert_eq!(storage.get("chk-0000002/_metadata").unwrap(), b"md", "it did land: the caller must not act on it");
    }

    #[test]
    fn a_lost_lease_refuses_every_write() {
        let tmp = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(tmp.path()));
        let (lease, _) = acquire(storage.clone(), &claim("/a", true, 150)).unwrap();
        let guarded = lease.guard();
        guarded.put("chk-0000001/x", b"x").unwrap();
        // Another process takes the record over.
        foreign(storage.as_ref(), now_ms(), 60_000);
        let deadline = Instant::now() + Duration::from_secs(5);
        while lease.check().is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let err = guarded.put_if_absent("chk-0000001/_metadata", b"md").unwrap_err();
        assert!(err.to_string().contains("does not own the checkpoint storage now"), "{err}");
        assert!(lease.check().unwrap_err().to_string().contains("weir process 1 on host elsewhere took it over"));
        assert!(lease.ownership().lost().is_some_and(|e| e.to_string().contains("took it over")), "lost for good");
        drop(lease);
        assert!(storage.get(OWNER_KEY).is_ok(), "a lost lease leaves the new owner's record alone");
    }
}

/// How a sink fences what it stages in another system (a PostgreSQL
/// prepared transaction) against a deposed owner of the same checkpoint
/// storage: the generation of this start goes into every name it stages
/// (`checkpoint::generation`; 0 on local storage, which one process owns
/// by its `flock`), so the current owner can tell a deposed owner's
/// leftovers from its own and never has its own touched; and the ownership
/// is checked before each one is staged, so a process that woke up deposed
/// stages nothing more.
#[derive(Debug, Clone, Default)]
pub struct Fence {
    pub generation: super::generation::Generation,
    pub ownership: Option<Ownership>,
}

impl Fence {
    /// Ok while this process may stage as the owner (always without a lease).
    pub fn check(&self) -> Result<(), OwnerError> {
        self.ownership.as_ref().map_or(Ok(()), Ownership::check)
    }
}

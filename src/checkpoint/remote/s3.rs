//! [`Storage`] on S3 with the `object_store` crate (feature `s3`).
//!
//! Endpoint, region and credentials come only from the standard AWS
//! environment variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`, ...) and the
//! pipeline's `checkpoint.storage_options`; none of them is logged or
//! written into a checkpoint (only the URL is).
//!
//! Requests run on a small runtime of their own, so a caller blocks only
//! its own thread. Each request is tried again with backoff on a transient
//! error (5xx, timeouts, connection errors, 409 conflicts, injected
//! `storage_fail`); objects above [`MULTIPART_THRESHOLD`] go up in parts;
//! batches run [`CONCURRENCY`] requests at a time.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, PutMode, PutOptions, PutPayload, RetryConfig, UpdateVersion, WriteMultipart,
};

use super::parse_url;
use crate::checkpoint::storage::{Object, Storage, StorageError};
use crate::faults;

/// Objects larger than this are uploaded in parts.
pub const MULTIPART_THRESHOLD: u64 = 16 << 20;
const PART_SIZE: usize = 8 << 20;
/// Requests in flight at once in a batch (`put_files`, downloads).
pub const CONCURRENCY: usize = 8;
/// Tries of one request (the first and the retries).
const ATTEMPTS: u32 = 5;

/// The runtime every request runs on (never dropped: a runtime may not be
/// dropped inside another's tasks).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-storage")
            .enable_all()
            .build()
            .expect("the storage runtime starts")
    })
}

/// Run `fut` on the storage runtime and wait for it on this thread.
fn block_on<T: Send + 'static>(fut: impl std::future::Future<Output = T> + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    runtime().spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().expect("storage request does not panic")
}

/// An S3 bucket and prefix.
#[derive(Clone)]
pub struct ObjectStorage {
    store: Arc<dyn ObjectStore>,
    bucket: String,
    prefix: String,
}

impl std::fmt::Debug for ObjectStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The store's own Debug would show its configuration.
        write!(f, "ObjectStorage({})", self.root())
    }
}

impl ObjectStorage {
    /// Connect to `url` (`s3://bucket/prefix`) with the AWS environment and
    /// `options` (object_store's `aws_*` keys). Sends no request.
    pub fn open(url: &str, options: &[(String, String)]) -> Result<ObjectStorage, String> {
        let (bucket, prefix) = parse_url(url)?;
        let retry = RetryConfig {
            backoff: BackoffConfig { init_backoff: Duration::from_millis(50), max_backoff: Duration::from_secs(1), base: 2.0 },
            max_retries: 2,
            retry_timeout: Duration::from_secs(10),
        };
        let client = ClientOptions::new().with_timeout(Duration::from_secs(30)).with_connect_timeout(Duration::from_secs(3));
        // Client options first: the environment's (AWS_ALLOW_HTTP, ...) go on top.
        let mut builder = AmazonS3Builder::new().with_client_options(client).with_retry(retry).with_bucket_name(&bucket);
        if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none() {
            builder = builder.with_region("us-east-1");
        }
        // What `AmazonS3Builder::from_env` reads.
        for (key, value) in std::env::vars() {
            if key.starts_with("AWS_") {
                if let Ok(k) = key.to_ascii_lowercase().parse() {
                    builder = builder.with_config(k, value);
                }
            }
        }
        for (key, value) in options {
            let k = key.parse().map_err(|_| format!("`storage_options.{key}`: not an S3 option (e.g. aws_endpoint, aws_region)"))?;
            builder = builder.with_config(k, value);
        }
        // The error may quote a configured value: say only which URL failed.
        let store = builder.with_bucket_name(&bucket).build().map_err(|e| format!("{url}: {}", redact(&e.to_string())))?;
        Ok(ObjectStorage { store: Arc::new(store), bucket, prefix })
    }

    fn path(&self, key: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(key)
        } else {
            ObjectPath::from(format!("{}/{key}", self.prefix))
        }
    }

    /// Upload many local files, [`CONCURRENCY`] at a time; the first failure ends the batch.
    fn put_concurrently(&self, items: Vec<(String, std::path::PathBuf)>) -> Result<(), StorageError> {
        let this = self.clone();
        block_on(async move {
            futures::stream::iter(items.into_iter().map(|(key, from)| {
                let this = this.clone();
                async move { this.put_file_async(&key, &from).await }
            }))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await
            .map(|_| ())
        })
    }

    async fn put_file_async(&self, key: &str, from: &Path) -> Result<(), StorageError> {
        let (mut file, size) = crate::checkpoint::disk::open_regular(from).map_err(|e| local_read(from, e))?;
        let path = self.path(key);
        if size <= MULTIPART_THRESHOLD {
            let mut bytes = Vec::with_capacity(size as usize);
            std::io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| local_read(from, e))?;
            let payload = PutPayload::from(bytes);
            return self.retry("put", key, || self.store.put(&path, payload.clone())).await.map(|_| ());
        }
        self.retry("put", key, || async {
            let upload = self.store.put_multipart(&path).await?;
            let mut w = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
            let mut f = std::fs::File::open(from).map_err(|e| object_store::Error::Generic { store: "local", source: Box::new(e) })?;
            let mut buf = vec![0u8; PART_SIZE];
            loop {
                let n = std::io::Read::read(&mut f, &mut buf)
                    .map_err(|e| object_store::Error::Generic { store: "local", source: Box::new(e) })?;
                if n == 0 {
                    break;
                }
                w.wait_for_capacity(CONCURRENCY).await?;
                w.write(&buf[..n]);
            }
            w.finish().await
        })
        .await
        .map(|_| ())
    }

    /// `f` tried up to [`ATTEMPTS`] times while it fails transiently.
    async fn retry<T, F, Fut>(&self, op: &'static str, key: &str, mut f: F) -> Result<T, StorageError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        let mut backoff = Duration::from_millis(50);
        let mut attempt = 1;
        loop {
            let result = if faults::get().fail_storage() {
                Err(object_store::Error::Generic { store: "S3", source: "injected storage failure (WEIR_FAULTS storage_fail)".into() })
            } else {
                f().await
            };
            match result {
                Ok(v) => return Ok(v),
                Err(e) if attempt < ATTEMPTS && transient(&e) => {
                    tracing::debug!(url = %self.url(key), op, attempt, error = %redact(&e.to_string()), "Storage request failed; trying again.");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    attempt += 1;
                }
                Err(e) => return Err(self.error(op, key, e)),
            }
        }
    }

    fn error(&self, op: &'static str, key: &str, e: object_store::Error) -> StorageError {
        let url = self.url(key);
        match e {
            object_store::Error::NotFound { .. } => StorageError::NotFound { url },
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. } => StorageError::AlreadyExists { url },
            e => StorageError::Failed { op, url, message: redact(&e.to_string()) },
        }
    }
}

/// Errors worth another try: everything but answers about the object or
/// the request itself.
fn transient(e: &object_store::Error) -> bool {
    use object_store::Error::*;
    !matches!(
        e,
        NotFound { .. }
            | AlreadyExists { .. }
            | Precondition { .. }
            | NotSupported { .. }
            | NotImplemented
            | InvalidPath { .. }
            | PermissionDenied { .. }
            | Unauthenticated { .. }
            | UnknownConfigurationKey { .. }
    )
}

/// Drop from a message anything that looks like a signed query string,
/// and the `user:password@` of every URL in it (an endpoint may carry one).
fn redact(message: &str) -> String {
    let message = match message.find("X-Amz-") {
        Some(i) => format!("{}[signed parameters omitted]", &message[..i]),
        None => message.to_string(),
    };
    let mut out = String::with_capacity(message.len());
    let mut rest = message.as_str();
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the first `/`, `?`, `#` or space.
        let end = tail.find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace()).unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(at) => {
                out.push_str("[credentials omitted]@");
                out.push_str(&tail[at + 1..end]);
            }
            None => out.push_str(&tail[..end]),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn local_read(path: &Path, source: std::io::Error) -> StorageError {
    StorageError::Local(crate::checkpoint::disk::StoreError::Io { op: "read", path: path.to_path_buf(), source })
}

impl Storage for ObjectStorage {
    fn root(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let (this, key, payload) = (self.clone(), key.to_string(), PutPayload::from(bytes.to_vec()));
        block_on(async move {
            let path = this.path(&key);
            this.retry("put", &key, || this.store.put(&path, payload.clone())).await.map(|_| ())
        })
    }

    fn put_file(&self, key: &str, from: &Path) -> Result<(), StorageError> {
        self.put_concurrently(vec![(key.to_string(), from.to_path_buf())])
    }

    fn put_many(&self, files: Vec<(String, std::path::PathBuf)>) -> Result<(), StorageError> {
        self.put_concurrently(files)
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let (this, key, payload) = (self.clone(), key.to_string(), PutPayload::from(bytes.to_vec()));
        block_on(async move {
            let path = this.path(&key);
            let opts = || PutOptions { mode: PutMode::Create, ..PutOptions::default() };
            this.retry("put", &key, || this.store.put_opts(&path, payload.clone(), opts())).await.map(|_| ())
        })
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        let (this, key) = (self.clone(), key.to_string());
        block_on(async move {
            let path = this.path(&key);
            this.retry("get", &key, || async { this.store.get(&path).await?.bytes().await }).await.map(|b| b.to_vec())
        })
    }

    fn get_to_file(&self, key: &str, to: &Path) -> Result<(), StorageError> {
        let bytes = self.get(key)?;
        crate::checkpoint::storage::write_new_file(to, &bytes)
    }

    fn get_many(&self, files: Vec<(String, std::path::PathBuf)>) -> Result<(), StorageError> {
        let this = self.clone();
        block_on(async move {
            futures::stream::iter(files.into_iter().map(|(key, to)| {
                let this = this.clone();
                async move {
                    let path = this.path(&key);
                    let bytes = this.retry("get", &key, || async { this.store.get(&path).await?.bytes().await }).await?;
                    // The file write is small next to the request; a blocking
                    // thread keeps the storage runtime's workers free.
                    tokio::task::spawn_blocking(move || crate::checkpoint::storage::write_new_file(&to, &bytes))
                        .await
                        .map_err(|e| StorageError::Failed { op: "write", url: this.url(&key), message: e.to_string() })?
                }
            }))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await
            .map(|_| ())
        })
    }

    fn list(&self, prefix: &str) -> Result<Vec<Object>, StorageError> {
        let (this, prefix) = (self.clone(), prefix.to_string());
        block_on(async move {
            // object_store lists whole path segments: list the directory
            // part, keep the keys that start with the rest.
            let dir = prefix.rfind('/').map_or("", |i| &prefix[..i]);
            let base = if dir.is_empty() { this.prefix.clone() } else { this.path(dir).to_string() };
            let base_path = (!base.is_empty()).then(|| ObjectPath::from(base.as_str()));
            let strip = if this.prefix.is_empty() { 0 } else { this.prefix.len() + 1 };
            let metas: Vec<object_store::ObjectMeta> =
                this.retry("list", &prefix, || this.store.list(base_path.as_ref()).try_collect::<Vec<_>>()).await?;
            let mut out: Vec<Object> = metas
                .into_iter()
                .filter_map(|m| {
                    let key = m.location.as_ref().get(strip..)?.to_string();
                    key.starts_with(&prefix).then_some(Object { key, size: m.size })
                })
                .collect();
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        let (this, key) = (self.clone(), key.to_string());
        block_on(async move {
            let path = this.path(&key);
            match this.retry("delete", &key, || this.store.delete(&path)).await {
                Err(StorageError::NotFound { .. }) => Ok(()),
                r => r,
            }
        })
    }

    fn copy(&self, from: &str, to: &str) -> Result<(), StorageError> {
        let (this, from, to) = (self.clone(), from.to_string(), to.to_string());
        block_on(async move {
            let (src, dst) = (this.path(&from), this.path(&to));
            this.retry("copy", &from, || this.store.copy(&src, &dst)).await
        })
    }

    fn get_versioned(&self, key: &str) -> Result<(Vec<u8>, String), StorageError> {
        let (this, key) = (self.clone(), key.to_string());
        block_on(async move {
            let path = this.path(&key);
            let (bytes, e_tag) = this
                .retry("get", &key, || async {
                    let got = this.store.get(&path).await?;
                    let e_tag = got.meta.e_tag.clone();
                    Ok((got.bytes().await?, e_tag))
                })
                .await?;
            let e_tag =
                e_tag.ok_or_else(|| StorageError::Failed { op: "get", url: this.url(&key), message: "the store sent no ETag".into() })?;
            Ok((bytes.to_vec(), e_tag))
        })
    }

    fn put_conditional(&self, key: &str, bytes: &[u8], expected: Option<&str>) -> Result<String, StorageError> {
        let (this, key, payload) = (self.clone(), key.to_string(), PutPayload::from(bytes.to_vec()));
        let mode = match expected {
            None => PutMode::Create,
            Some(v) => PutMode::Update(UpdateVersion { e_tag: Some(v.to_string()), version: None }),
        };
        let update = expected.is_some();
        block_on(async move {
            let path = this.path(&key);
            let opts = || PutOptions { mode: mode.clone(), ..PutOptions::default() };
            let put = this.retry("put", &key, || this.store.put_opts(&path, payload.clone(), opts())).await;
            match put {
                Ok(r) => {
                    r.e_tag.ok_or_else(|| StorageError::Failed { op: "put", url: this.url(&key), message: "the store sent no ETag".into() })
                }
                // An If-Match that failed (412) is a conflict, not an existing object.
                Err(StorageError::AlreadyExists { url } | StorageError::NotFound { url }) if update => Err(StorageError::Conflict { url }),
                Err(e) => Err(e),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_parameters_never_reach_a_message() {
        assert_eq!(redact("GET http://h/b/k?X-Amz-Credential=AKIA failed"), "GET http://h/b/k?[signed parameters omitted]");
    }

    #[test]
    fn credentials_in_an_endpoint_never_reach_a_message() {
        let m = redact("error sending request for url (http://admin:s3cr3t@127.0.0.1:9000/weir/p/_owner): refused; see https://u@x");
        assert_eq!(m, "error sending request for url (http://[credentials omitted]@127.0.0.1:9000/weir/p/_owner): refused; see https://[credentials omitted]@x");
        assert_eq!(redact("no url here"), "no url here");
        assert_eq!(redact("s3://b/p"), "s3://b/p");
    }
}

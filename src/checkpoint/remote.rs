//! Checkpoint storage on S3-compatible object storage: `s3://bucket/prefix`.
//!
//! The client lives in `s3.rs`, behind the cargo feature `s3` (on by
//! default; the quickstart's `--no-default-features` build leaves out its
//! HTTP and TLS stack). Without it, [`ObjectStorage::open`] refuses every
//! URL with the command that builds a weir that has it, and `validate`
//! refuses an `s3://` storage or savepoint dir at its place.

#[cfg(not(feature = "s3"))]
mod off;
#[cfg(feature = "s3")]
mod s3;

#[cfg(not(feature = "s3"))]
pub use off::ObjectStorage;
#[cfg(feature = "s3")]
pub use s3::{ObjectStorage, CONCURRENCY, MULTIPART_THRESHOLD};

/// Whether `text` names object storage rather than a local path.
pub fn is_url(text: &str) -> bool {
    text.starts_with("s3://")
}

/// `s3://bucket/prefix` split: the bucket and the prefix (no slashes at its ends).
pub fn parse_url(url: &str) -> Result<(String, String), String> {
    let rest = url.strip_prefix("s3://").ok_or_else(|| format!("`{url}`: expected s3://BUCKET/PREFIX"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!("`{url}`: the bucket is missing (expected s3://BUCKET/PREFIX)"));
    }
    let prefix = prefix.trim_matches('/');
    if prefix.split('/').any(|seg| seg == "." || seg == "..") || prefix.contains("//") {
        return Err(format!("`{url}`: the prefix may not hold `.`, `..` or empty segments"));
    }
    Ok((bucket.to_string(), prefix.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_bucket_and_a_clean_prefix() {
        assert_eq!(parse_url("s3://b/p/q/").unwrap(), ("b".into(), "p/q".into()));
        assert_eq!(parse_url("s3://b").unwrap(), ("b".into(), String::new()));
        for bad in ["s3:///p", "file:///x", "s3://b/../x", "s3://b/a//c"] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        assert!(is_url("s3://b/x") && !is_url("/tmp/x"));
    }
}

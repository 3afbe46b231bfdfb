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

/// Where under the checkpoint storage `root` the object storage URL
/// `target` lies, if a savepoint there would be taken for the storage's own
/// objects and deleted by its cleanup: under `shared/` (unreferenced
/// shared objects), a `chk-*` directory (unfinished or subsumed
/// checkpoints) or a `_*` record, directly or under an `instance-N/` prefix
/// of a cluster. Elsewhere under the root (`savepoints/`, the root itself)
/// nothing of weir's deletes it.
pub fn managed_area(target: &str, root: &str) -> Option<String> {
    let ((tb, tp), (rb, rp)) = (parse_url(target).ok()?, parse_url(root).ok()?);
    let rel = match rp.is_empty() {
        true => tp.as_str(),
        false => tp.strip_prefix(&rp)?.strip_prefix('/').or_else(|| (tp == rp).then_some(""))?,
    };
    if tb != rb {
        return None;
    }
    let mut segs = rel.split('/').filter(|s| !s.is_empty()).peekable();
    let mut area = String::new();
    if let Some(inst) = segs.next_if(|s| s.strip_prefix("instance-").is_some_and(|n| n.parse::<u32>().is_ok())) {
        area = format!("{inst}/");
    }
    let first = segs.next()?;
    (first == "shared" || first.starts_with("chk-") || first.starts_with('_')).then(|| format!("{area}{first}"))
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

    #[test]
    fn targets_in_the_storages_own_areas_are_found_whatever_their_spelling() {
        let area = |t: &str| managed_area(t, "s3://w/P");
        assert_eq!(area("s3://w/P/shared").as_deref(), Some("shared"));
        assert_eq!(area("s3://w/P/shared/x/").as_deref(), Some("shared"));
        assert_eq!(area("s3://w/P/chk-0000003").as_deref(), Some("chk-0000003"));
        assert_eq!(area("s3://w/P/_generations").as_deref(), Some("_generations"));
        assert_eq!(area("s3://w/P/instance-1/shared").as_deref(), Some("instance-1/shared"));
        for free in ["s3://w/P", "s3://w/P/", "s3://w/P/savepoints", "s3://w/PX/shared", "s3://v/P/shared", "s3://w", "s3://w/Q/P/shared"] {
            assert_eq!(area(free), None, "{free}");
        }
        assert_eq!(managed_area("s3://w/shared", "s3://w").as_deref(), Some("shared"));
    }
}

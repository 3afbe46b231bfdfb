//! `weir inspect PATH`: what a checkpoint holds and whether it validates.
//! PATH is a checkpoint directory, its `_metadata` file, or a state
//! directory (then every checkpoint in it is listed); or the same in object
//! storage: `s3://bucket/prefix/chk-0000012` (or a savepoint, or its
//! `_metadata`), downloaded into a temp directory and validated there, or
//! a checkpoint storage `s3://bucket/prefix` (every checkpoint and
//! savepoint under it is listed).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::checkpoint::layout::{Layout, MANIFEST_FILE, METADATA_FILE};
use crate::checkpoint::manifest::{BundleManifest, Document, Metadata};
use crate::checkpoint::{disk, validate};
use crate::types::KeyGroupShare;

/// The report, and whether everything shown validates.
pub fn inspect(path: &Path) -> Result<(String, bool), String> {
    if let Some(url) = path.to_str().filter(|p| crate::checkpoint::remote::is_url(p)) {
        return inspect_url(url);
    }
    let dir = if path.file_name().is_some_and(|n| n == METADATA_FILE) { path.parent().unwrap_or(path) } else { path };
    if !dir.exists() {
        return Err(format!("{}: no such file or directory", path.display()));
    }
    let layout = Layout::new(dir);
    if layout.checkpoints_dir().is_dir() {
        return Ok(state_dir(&layout));
    }
    Ok(checkpoint(dir))
}

/// One line per checkpoint and savepoint of a state directory.
fn state_dir(layout: &Layout) -> (String, bool) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:<10} {:<24} {:>9} {:>7} {:>10} {:>12}  VALID",
        "CHECKPOINT", "KIND", "CREATED (UTC)", "OPERATORS", "BUNDLES", "KEY GROUPS", "BYTES"
    );
    let mut all_valid = true;
    let ids = disk::list_checkpoint_ids(layout).unwrap_or_default();
    let mut dirs: Vec<(String, PathBuf)> = ids.into_iter().map(|id| (id.to_string(), layout.checkpoint_dir(id))).collect();
    dirs.extend(savepoint_dirs(layout).into_iter().map(|d| (d.file_name().unwrap_or_default().to_string_lossy().into_owned(), d)));
    for (label, dir) in dirs {
        let (kind, created, operators, bundles, groups, bytes, valid) = match validate::validate_dir(&dir) {
            // Not damaged: a checkpoint the run did not finish; the next start removes it.
            Err(e) if e.is_unfinished() => {
                ("?".into(), "?".into(), 0, 0, 0, 0, "unfinished (no _metadata; the next start removes it)".into())
            }
            Ok(v) => {
                let bytes: u64 = v.manifests.iter().flat_map(|m| &m.files).map(|f| f.size).sum();
                let md = &v.metadata;
                let kind = format!("{:?}", md.kind).to_lowercase();
                (kind, time(md.created_ms), md.operators.len(), v.manifests.len(), md.max_parallelism, bytes, "yes".into())
            }
            Err(e) => {
                all_valid = false;
                ("?".into(), "?".into(), 0, 0, 0, 0, format!("no: {e}"))
            }
        };
        let _ = writeln!(out, "{label:<12} {kind:<10} {created:<24} {operators:>9} {bundles:>7} {groups:>10} {bytes:>12}  {valid}");
    }
    (out, all_valid)
}

/// `weir inspect s3://...`: a checkpoint or savepoint there (it has a
/// `_metadata` of its own), else the checkpoint storage rooted there.
fn inspect_url(url: &str) -> Result<(String, bool), String> {
    use crate::checkpoint::remote::ObjectStorage;
    use crate::checkpoint::storage::Storage;
    let trimmed = url.trim_end_matches('/');
    let trimmed = trimmed.strip_suffix(&format!("/{METADATA_FILE}")).unwrap_or(trimmed);
    let failed = |e: String| format!("{url}: {e}");
    let root = ObjectStorage::open(trimmed, &[]).map_err(failed)?;
    let objects = root.list("").map_err(|e| failed(e.to_string()))?;
    if objects.is_empty() {
        return Err(format!("{url}: no such checkpoint, savepoint or checkpoint storage (no objects under it)"));
    }
    if objects.iter().any(|o| o.key == METADATA_FILE || o.key.starts_with("bundle-")) {
        let (parent, name, _) = crate::restore::remote::open_parent(trimmed, &[]).map_err(failed)?;
        let (verdict, download) = crate::restore::remote::download(&parent, &name).map_err(|e| failed(e.to_string()))?;
        let dir = download.path().join(&name);
        if !dir.is_dir() {
            let why = verdict.err().map(|w| w.to_string()).unwrap_or_default();
            return Ok((format!("checkpoint  {trimmed}\n\nvalid       no: {why}\n"), false));
        }
        let (report, valid) = checkpoint(&dir);
        // Paths of the download are shown as the URLs they came from.
        let report = report.replace(&dir.display().to_string(), trimmed).replace(&download.path().display().to_string(), &parent.root());
        return Ok((report, valid));
    }
    // A checkpoint storage (or a savepoint parent): every child with a `_metadata`.
    let children: Vec<&str> = objects.iter().filter_map(|o| o.key.strip_suffix(&format!("/{METADATA_FILE}"))).collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<32} {:<10} {:<24} {:>9} {:>7} {:>10} {:>12}  VALID",
        "CHECKPOINT", "KIND", "CREATED (UTC)", "OPERATORS", "BUNDLES", "KEY GROUPS", "BYTES"
    );
    let mut all_valid = true;
    for child in children {
        let label = match crate::checkpoint::generation::StoredId::parse(child) {
            Some(id) => id.to_string(),
            None => child.to_string(),
        };
        let verdict = crate::restore::remote::download(&root, child).map_err(|e| failed(e.to_string()))?.0;
        let row = match verdict {
            Ok(v) => {
                let bytes: u64 = v.manifests.iter().flat_map(|m| &m.files).map(|f| f.size).sum();
                let md = &v.metadata;
                let kind = format!("{:?}", md.kind).to_lowercase();
                format!(
                    "{kind:<10} {:<24} {:>9} {:>7} {:>10} {bytes:>12}  yes",
                    time(md.created_ms),
                    md.operators.len(),
                    v.manifests.len(),
                    md.max_parallelism
                )
            }
            Err(e) => {
                all_valid = false;
                format!("{:<10} {:<24} {:>9} {:>7} {:>10} {:>12}  no: {e}", "?", "?", 0, 0, 0, 0)
            }
        };
        let _ = writeln!(out, "{label:<32} {row}");
    }
    Ok((out, all_valid))
}

/// The directories under `savepoints/`, sorted.
fn savepoint_dirs(layout: &Layout) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(layout.savepoints_dir()) else { return Vec::new() };
    // Hidden names are savepoints being written or disposed.
    let visible = entries.flatten().filter(|e| !e.file_name().to_string_lossy().starts_with('.'));
    let mut dirs: Vec<PathBuf> = visible.map(|e| e.path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    dirs
}

/// The full picture of one checkpoint, as far as its documents can be read.
fn checkpoint(dir: &Path) -> (String, bool) {
    let mut out = String::new();
    let verdict = validate::validate_dir(dir);
    let _ = writeln!(out, "checkpoint  {}", dir.display());
    match read::<Metadata>(&dir.join(METADATA_FILE)) {
        Ok(md) => {
            let _ = writeln!(out, "id          {}", md.checkpoint_id);
            let _ = writeln!(out, "kind        {:?}", md.kind);
            let _ = writeln!(out, "pipeline    {}", md.pipeline);
            let _ = writeln!(out, "created     {}", time(md.created_ms));
            let _ = writeln!(out, "parallelism {} (max {} key groups)", md.parallelism, md.max_parallelism);
            let _ = writeln!(out, "operators   {}", md.operators.join(", "));
            for (op, key) in &md.keys {
                let _ = writeln!(out, "  {op}: {key}");
            }
            let _ = writeln!(out, "bundles     {}", md.bundles.len());
            for b in &md.bundles {
                let bdir = dir.join(crate::checkpoint::layout::bundle_dir_name(*b));
                let _ = writeln!(out, "\nbundle {b}");
                match read::<BundleManifest>(&bdir.join(MANIFEST_FILE)) {
                    Ok(m) => {
                        let voters: Vec<String> = m.voters.iter().map(|v| format!("{}/{}", v.chain, v.subtask)).collect();
                        let _ = writeln!(out, "  subtasks (chain/subtask): {}", voters.join(" "));
                        let share = md
                            .cluster
                            .as_ref()
                            .map_or(KeyGroupShare::WHOLE, |c| KeyGroupShare { instance: c.index, instances: c.instances });
                        let ranges = m.voters.iter().map(|v| share.range(v.subtask, md.parallelism, md.max_parallelism));
                        let (lo, hi) = ranges.fold((u16::MAX, 0), |(lo, hi), r| (lo.min(r.start), hi.max(r.end)));
                        if lo < hi {
                            let _ = writeln!(out, "  key groups {lo}..{hi}");
                        }
                        let _ = writeln!(out, "  {:<40} {:>12} {:>10}", "FILE", "BYTES", "CRC32C");
                        for f in &m.files {
                            let _ = writeln!(out, "  {:<40} {:>12} {:>#10x}", f.name, f.size, f.crc32c);
                        }
                    }
                    Err(e) => {
                        let _ = writeln!(out, "  MANIFEST unreadable: {e}");
                    }
                }
            }
        }
        Err(e) => {
            let _ = writeln!(out, "_metadata unreadable: {e}");
        }
    }
    let valid = verdict.is_ok();
    let _ = match verdict {
        Ok(_) => writeln!(out, "\nvalid       yes"),
        Err(e) => writeln!(out, "\nvalid       no: {e}"),
    };
    (out, valid)
}

fn read<T: Document>(path: &PathBuf) -> Result<T, String> {
    let bytes = disk::read_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
    T::from_bytes(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// `created_ms` as an RFC 3339 time; a value RFC 3339 cannot write (before
/// 1970 or after 9999, only in a damaged or crafted `_metadata`) is shown as
/// the number it is.
pub(super) fn time(ms: i64) -> String {
    const LAST_MS: i64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
    if !(0..=LAST_MS).contains(&ms) {
        return format!("{ms} ms (out of range)");
    }
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::time;

    /// A huge `created_ms` in a `_metadata` with a valid checksum made
    /// `inspect` and `savepoint list` panic.
    #[test]
    fn created_time_out_of_range_is_shown_not_a_panic() {
        assert_eq!(time(1_700_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(time(0), "1970-01-01T00:00:00Z");
        assert_eq!(time(253_402_300_799_999), "9999-12-31T23:59:59Z");
        for ms in [i64::MAX, 253_402_300_800_000, -1, i64::MIN] {
            assert_eq!(time(ms), format!("{ms} ms (out of range)"));
        }
    }
}

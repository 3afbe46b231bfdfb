//! What the file sink and the dead letters share of their two-phase output
//! files: hidden files named by (subtask, sequence number), staged in an
//! operator's state under the checkpoint that staged them and made visible
//! when that checkpoint completes (or on restore). A new run numbers its
//! files past every one there, so it never writes under a name a
//! checkpoint staged; the hidden files no checkpoint will publish (written
//! before the restore, or by old subtasks beyond the parallelism) are
//! removed once the new run's first checkpoint completes, when every
//! subtask has finished its restore.
//!
//! Each user names its files its own way: `parse` reads (subtask, sequence)
//! from a directory entry's name, None for other files.

use std::fs;
use std::io;
use std::path::Path;

use super::{Context, OpError};
use crate::types::KeyGroup;

/// A staged file: its name, the checkpoint that staged it, its key group.
pub type Staged = (String, u64, KeyGroup);

/// The files of `table` staged by a checkpoint in `1..=id`, in name order.
pub fn due(ctx: &Context<'_>, table: usize, id: u64) -> Result<Vec<Staged>, OpError> {
    Ok(ctx.staged_names(table)?.into_iter().filter(|(_, staged, _)| (1..=id).contains(staged)).collect())
}

/// One past the highest sequence number `subtask` has in `dir`.
pub fn next_free_seq(dir: &Path, subtask: u16, parse: impl Fn(&str) -> Option<(u16, u64)>) -> io::Result<u64> {
    let mut next = 0;
    for entry in fs::read_dir(dir)? {
        if let Some((s, seq)) = parse(&entry?.file_name().to_string_lossy()) {
            if s == subtask {
                next = next.max(seq.saturating_add(1));
            }
        }
    }
    Ok(next)
}

/// Remove the files no checkpoint will publish: `subtask`'s numbered
/// below `below` (written before the restore), and those of old subtasks
/// beyond `parallelism` that map to this one.
pub fn remove_leftovers(
    dir: &Path,
    subtask: u16,
    below: u64,
    parallelism: u16,
    parse: impl Fn(&str) -> Option<(u16, u64)>,
) -> io::Result<()> {
    for entry in fs::read_dir(dir)?.flatten() {
        let Some((s, seq)) = parse(&entry.file_name().to_string_lossy()) else { continue };
        if is_leftover((s, seq), subtask, below, parallelism) {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Whether the file numbered `(s, seq)` is one no checkpoint will publish,
/// for `subtask` of `parallelism` after a restore marked at `below`: its
/// own below the mark, or an old subtask's beyond the parallelism that
/// maps to it.
pub fn is_leftover((s, seq): (u16, u64), subtask: u16, below: u64, parallelism: u16) -> bool {
    let ours = s == subtask && seq < below;
    let orphaned = s >= parallelism && s % parallelism == subtask;
    ours || orphaned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str) -> Option<(u16, u64)> {
        let (s, seq) = name.strip_prefix(".f-")?.split_once('-')?;
        Some((s.parse().ok()?, seq.parse().ok()?))
    }

    #[test]
    fn leftovers_are_ours_below_the_mark_and_those_of_vanished_subtasks_mapped_to_us() {
        let dir = tempfile::tempdir().unwrap();
        for name in [".f-0-1", ".f-0-5", ".f-1-0", ".f-2-3", ".f-3-3", "other"] {
            fs::write(dir.path().join(name), "").unwrap();
        }
        assert_eq!(next_free_seq(dir.path(), 0, parse).unwrap(), 6);
        assert_eq!(next_free_seq(dir.path(), 4, parse).unwrap(), 0);
        // Subtask 0 of 2 after a run at 4: its own below 5, and old subtask 2.
        remove_leftovers(dir.path(), 0, 5, 2, parse).unwrap();
        let mut left: Vec<String> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, [".f-0-5", ".f-1-0", ".f-3-3", "other"]);
    }
}

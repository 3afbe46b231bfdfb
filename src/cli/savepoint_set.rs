//! `weir savepoint trigger P --all-instances`: a savepoint of every instance
//! of a cluster, taken through each instance's control socket on this host,
//! printed as the set `weir run --restore` takes (docs/scaling.md).
//!
//! Every instance is asked first whether it is there and able to take one;
//! only when all are does any savepoint start, so an instance that cannot
//! be reached (on another host, not running) stops none. The savepoints then
//! run at once; instances never take them together, so there is no
//! all-or-nothing: one that fails is named, with what it did and what to do.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::savepoint::{self, Ending, SavepointError};
use crate::checkpoint::layout::Layout;

/// One instance of the cluster, as the command addresses it.
pub struct Member {
    pub index: u16,
    pub layout: Layout,
    /// Where its savepoint goes (`--target`, else its `savepoint.dir`).
    pub parent: Option<PathBuf>,
}

/// What happened to one instance.
pub enum Taken {
    Done(PathBuf),
    Failed(String),
}

/// Check every member can take a savepoint now, reading only: its control
/// socket answers for `pipeline`, it is not stopping and has no savepoint
/// in progress, and its target is one it would accept. Every problem is
/// returned, each naming its instance.
pub fn preflight(members: &[Member], instances: u16, pipeline: &str) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    for m in members {
        let who = format!("instance {}/{instances}", m.index);
        if let Err(e) = savepoint::check_target(&m.layout, m.parent.as_deref()) {
            problems.push(format!("{who}: {}", message(e)));
            continue;
        }
        let socket = m.layout.control_socket();
        if std::fs::symlink_metadata(&socket).is_err() {
            problems.push(format!(
                "{who}: no control socket at {} (not running, or running on another host: the control socket is a Unix socket in the instance's state directory, reachable only on its own host)",
                socket.display()
            ));
            continue;
        }
        match savepoint::status(&m.layout, pipeline, Duration::from_secs(10)) {
            Err(e) => problems.push(format!("{who}: {}", message(e))),
            Ok(s) if s.pipeline != pipeline => problems.push(format!("{who}: its socket answers for pipeline `{}`", s.pipeline)),
            Ok(s) if s.stopping => problems.push(format!("{who}: it is stopping already")),
            Ok(s) if s.savepoint_in_progress => problems.push(format!("{who}: a savepoint is in progress")),
            Ok(_) => {}
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Trigger every member's savepoint at once and wait for all of them.
pub fn trigger_all(members: &[Member], pipeline: &str, end: Ending, timeout: Duration) -> Vec<Taken> {
    std::thread::scope(|scope| {
        let asked: Vec<_> = members
            .iter()
            .map(|m| scope.spawn(move || savepoint::trigger(&m.layout, pipeline, m.parent.as_deref(), end, timeout)))
            .collect();
        asked
            .into_iter()
            .map(|h| match h.join() {
                Ok(Ok(path)) => Taken::Done(path),
                Ok(Err(e)) => Taken::Failed(message(e)),
                Err(_) => Taken::Failed("the request panicked".into()),
            })
            .collect()
    })
}

fn message(e: SavepointError) -> String {
    match e {
        SavepointError::Refused(m) | SavepointError::Failed(m) => m,
    }
}

/// `--restore P0 --restore P1 ...`, each path quoted for a POSIX shell
/// when it needs it.
pub fn restore_args(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| format!("--restore {}", shell_quote(p))).collect::<Vec<_>>().join(" ")
}

fn shell_quote(p: &Path) -> String {
    let s = p.to_string_lossy();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-:+=@,%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// What to tell the user when some instances failed: which stopped with a
/// savepoint (part of the set), which did not and what they did, and the
/// ways on from there.
pub fn partial_failure(taken: &[Taken], instances: u16, end: Ending, file: &str) -> String {
    let mut out = String::new();
    let failed: Vec<u16> = (0..instances).filter(|&i| matches!(taken[usize::from(i)], Taken::Failed(_))).collect();
    let stopping = end != Ending::KeepRunning;
    out.push_str(&format!(
        "the savepoint set of {instances} instances is incomplete: instance{} {} failed",
        if failed.len() == 1 { "" } else { "s" },
        failed.iter().map(|i| format!("{i}/{instances}")).collect::<Vec<_>>().join(", ")
    ));
    if stopping {
        out.push_str(
            ". The instances with a savepoint above have stopped (their sinks committed it). A failed stop-with-savepoint ends its instance with a final checkpoint instead (unless it failed before the request reached it). To complete the set, restart each failed instance with `--restore latest` and stop it alone: ",
        );
        let again: Vec<String> =
            failed.iter().map(|i| format!("`weir savepoint trigger {file} --instance {i}/{instances} --stop`")).collect();
        out.push_str(&again.join(", "));
        out.push_str("; the set is then the savepoints above and the new ones. Or go back: restart every stopped instance with `--restore latest`, which resumes from its savepoint");
    } else {
        out.push_str("; every instance keeps running. Trigger the failed ones again with `--instance I/N`");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_is_printed_as_restore_arguments_quoted_for_the_shell() {
        let paths = [PathBuf::from("/sp/savepoint-p-0000004"), PathBuf::from("/my sp/it's")];
        assert_eq!(restore_args(&paths), r"--restore /sp/savepoint-p-0000004 --restore '/my sp/it'\''s'");
        assert_eq!(restore_args(&[PathBuf::from("s3://b/sp/savepoint-p-0000004-1")]), "--restore s3://b/sp/savepoint-p-0000004-1");
    }

    #[test]
    fn a_partial_failure_names_the_failed_instances_and_the_way_on() {
        let taken = [Taken::Done("/sp/a".into()), Taken::Failed("x".into()), Taken::Failed("y".into())];
        let m = partial_failure(&taken, 3, Ending::Stop, "p.yaml");
        assert!(m.starts_with("the savepoint set of 3 instances is incomplete: instances 1/3, 2/3 failed"), "{m}");
        assert!(m.contains("`weir savepoint trigger p.yaml --instance 2/3 --stop`"), "{m}");
        let m = partial_failure(&taken[..2], 2, Ending::KeepRunning, "p.yaml");
        assert!(m.contains("instance 1/2 failed; every instance keeps running"), "{m}");
    }
}

//! Global transaction ids of the exactly-once sink:
//! `weir-<pipeline>/<sink>/<run>-<subtask>-<checkpoint>`.
//!
//! The prefix (`config::postgres::gid_prefix`) names the pipeline and the
//! sink, so a restore can tell which of the server's prepared transactions
//! are its own. The run is the sink instance's random id: a run restored
//! from a checkpoint numbers its checkpoints again from there, and must not
//! prepare under a name the crashed run used. The subtask says which
//! subtask cleans a leftover up after a restore at another parallelism.

/// One of this sink's transaction ids, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gid {
    pub run: String,
    pub subtask: u16,
    pub checkpoint: u64,
}

impl Gid {
    pub fn text(&self, prefix: &str) -> String {
        format!("{prefix}{}-{}-{}", self.run, self.subtask, self.checkpoint)
    }

    /// `gid` parsed when it is one of the sink whose prefix is `prefix`.
    pub fn parse(prefix: &str, gid: &str) -> Option<Gid> {
        let rest = gid.strip_prefix(prefix)?;
        let mut fields = rest.split('-');
        let (run, subtask, checkpoint) = (fields.next()?, fields.next()?, fields.next()?);
        if fields.next().is_some() || !crate::run_id::is_short(run) {
            return None;
        }
        Some(Gid { run: run.to_string(), subtask: subtask.parse().ok()?, checkpoint: checkpoint.parse().ok()? })
    }
}

/// What a subtask does with a prepared transaction of its sink that no
/// checkpoint it restored staged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftover {
    /// Not this subtask's to decide (another subtask's, or this run's own).
    Keep,
    /// Roll it back now: no checkpoint can cover it.
    RollBack,
    /// Roll it back once every subtask has restored (the first checkpoint
    /// after the restore completes): until then another subtask may find it
    /// staged in the state it restored.
    RollBackLater,
}

/// The fate of `gid`, seen by subtask `me` of `parallelism` of run `run`,
/// restored from checkpoint `restored` (None: a start without a restore).
/// Each old subtask's leftovers belong to one new subtask (`old % parallelism`),
/// so no two subtasks roll the same one back.
pub fn leftover(gid: &Gid, run: &str, me: u16, parallelism: u16, restored: Option<u64>) -> Leftover {
    if gid.run == run || gid.subtask % parallelism != me {
        return Leftover::Keep;
    }
    match restored {
        // Staged only by the checkpoint it names, or later ones: a checkpoint
        // after the restored one never completed, or we would restore it.
        Some(id) if gid.checkpoint <= id => Leftover::RollBackLater,
        _ => Leftover::RollBack,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "weir-orders/pg/";

    #[test]
    fn a_gid_reads_back_and_others_are_not_ours() {
        let g = Gid { run: "0a1b2c3d".into(), subtask: 3, checkpoint: 17 };
        let text = g.text(PREFIX);
        assert_eq!(text, "weir-orders/pg/0a1b2c3d-3-17");
        assert_eq!(Gid::parse(PREFIX, &text), Some(g));
        assert_eq!(Gid::parse("weir-orders/pg2/", &text), None, "another sink");
        assert_eq!(Gid::parse("weir-orders/p/", &text), None);
        assert_eq!(Gid::parse(PREFIX, "weir-orders/pg/0a1b2c3d-3-17-1"), None);
        assert_eq!(Gid::parse(PREFIX, "weir-orders/pg/notarun-3-17"), None);
        assert_eq!(Gid::parse(PREFIX, "someone else's"), None);
    }

    #[test]
    fn leftovers_are_split_between_subtasks_and_only_uncovered_ones_go_at_once() {
        let g = |run: &str, subtask, checkpoint| Gid { run: run.into(), subtask, checkpoint };
        // Restored from 5 at parallelism 2 after a run at 4.
        assert_eq!(leftover(&g("aaaaaaaa", 3, 6), "bbbbbbbb", 1, 2, Some(5)), Leftover::RollBack);
        assert_eq!(leftover(&g("aaaaaaaa", 3, 6), "bbbbbbbb", 0, 2, Some(5)), Leftover::Keep, "old subtask 3 is subtask 1's");
        assert_eq!(leftover(&g("aaaaaaaa", 2, 5), "bbbbbbbb", 0, 2, Some(5)), Leftover::RollBackLater, "maybe staged by 5");
        assert_eq!(leftover(&g("bbbbbbbb", 0, 9), "bbbbbbbb", 0, 2, Some(5)), Leftover::Keep, "our own");
        assert_eq!(leftover(&g("aaaaaaaa", 0, 2), "bbbbbbbb", 0, 1, None), Leftover::RollBack, "a fresh start");
    }
}

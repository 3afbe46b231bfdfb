//! Global transaction ids of the exactly-once sink:
//! `weir-<pipeline>/<sink>/<run>-<subtask>-<checkpoint>[-g<generation>]`.
//!
//! The prefix (`config::postgres::gid_prefix`) names the pipeline and the
//! sink, so a restore can tell which of the server's prepared transactions
//! are its own. The run is the sink instance's random id: a run restored
//! from a checkpoint numbers its checkpoints again from there, and must not
//! prepare under a name the crashed run used. The subtask says which
//! subtask cleans a leftover up after a restore at another parallelism.
//! The generation is the start's on object storage (`checkpoint::lease::Fence`;
//! none on local storage): a deposed owner, woken up after another process
//! took the storage over, may still prepare, and only the generation tells
//! its late transactions from the new owner's.

use crate::checkpoint::generation::Generation;

/// One of this sink's transaction ids, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gid {
    pub run: String,
    pub subtask: u16,
    pub checkpoint: u64,
    pub generation: Generation,
}

impl Gid {
    pub fn text(&self, prefix: &str) -> String {
        match self.generation {
            0 => format!("{prefix}{}-{}-{}", self.run, self.subtask, self.checkpoint),
            g => format!("{prefix}{}-{}-{}-g{g}", self.run, self.subtask, self.checkpoint),
        }
    }

    /// `gid` parsed when it is one of the sink whose prefix is `prefix`.
    pub fn parse(prefix: &str, gid: &str) -> Option<Gid> {
        let rest = gid.strip_prefix(prefix)?;
        let mut fields = rest.split('-');
        let (run, subtask, checkpoint) = (fields.next()?, fields.next()?, fields.next()?);
        let generation = match fields.next() {
            None => 0,
            Some(g) => g.strip_prefix('g')?.parse().ok().filter(|&g| g > 0)?,
        };
        if fields.next().is_some() || !crate::run_id::is_short(run) {
            return None;
        }
        let parsed = Gid { run: run.to_string(), subtask: subtask.parse().ok()?, checkpoint: checkpoint.parse().ok()?, generation };
        // One spelling per id (no `+1`, `01`, `g007`): the name is the identity.
        (parsed.text(prefix) == gid).then_some(parsed)
    }
}

/// The sink instance that judges the prepared transactions it finds.
#[derive(Debug, Clone, Copy)]
pub struct Judge<'a> {
    pub run: &'a str,
    pub generation: Generation,
    pub subtask: u16,
    pub parallelism: u16,
}

impl Judge<'_> {
    /// Each old subtask's leftovers belong to one subtask (`old % parallelism`),
    /// so no two subtasks roll the same one back; never our own run's.
    fn owns_cleanup_of(&self, gid: &Gid) -> bool {
        gid.run != self.run && gid.subtask % self.parallelism == self.subtask
    }
}

/// What a subtask does with a prepared transaction of its sink that no
/// checkpoint it restored staged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftover {
    /// Not this subtask's to decide (another subtask's, this run's own, or
    /// a newer generation's: then this process is the deposed one).
    Keep,
    /// Roll it back now: no checkpoint can cover it.
    RollBack,
    /// Roll it back once every subtask has restored (the first checkpoint
    /// after the restore completes): until then another subtask may find it
    /// staged in the state it restored.
    RollBackLater,
}

/// The fate of `gid` at a start, restored from checkpoint `restored`
/// (None: a start without a restore).
pub fn leftover(gid: &Gid, judge: Judge<'_>, restored: Option<u64>) -> Leftover {
    if gid.generation > judge.generation || !judge.owns_cleanup_of(gid) {
        return Leftover::Keep;
    }
    match restored {
        // Staged only by the checkpoint it names, or later ones: a checkpoint
        // after the restored one never completed, or we would restore it.
        Some(id) if gid.checkpoint <= id => Leftover::RollBackLater,
        _ => Leftover::RollBack,
    }
}

/// Whether `gid`, found after a checkpoint of this run completed, is a
/// deposed owner's late transaction for `judge` to roll back. Every subtask
/// has restored by then and committed what its checkpoint staged, and no
/// later checkpoint of this lineage names an older generation's
/// transaction, so none can ever be committed.
pub fn deposed(gid: &Gid, judge: Judge<'_>) -> bool {
    gid.generation < judge.generation && judge.owns_cleanup_of(gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "weir-orders/pg/";

    #[test]
    fn a_gid_reads_back_and_others_are_not_ours() {
        let g = Gid { run: "0a1b2c3d".into(), subtask: 3, checkpoint: 17, generation: 0 };
        let text = g.text(PREFIX);
        assert_eq!(text, "weir-orders/pg/0a1b2c3d-3-17");
        assert_eq!(Gid::parse(PREFIX, &text), Some(g.clone()));
        let g5 = Gid { generation: 5, ..g };
        assert_eq!(g5.text(PREFIX), "weir-orders/pg/0a1b2c3d-3-17-g5");
        assert_eq!(Gid::parse(PREFIX, &g5.text(PREFIX)), Some(g5));
        assert_eq!(Gid::parse("weir-orders/pg2/", &text), None, "another sink");
        assert_eq!(Gid::parse("weir-orders/p/", &text), None);
        for other in ["0a1b2c3d-3-17-1", "0a1b2c3d-3-17-g0", "0a1b2c3d-3-17-g05", "0a1b2c3d-3-17-g5-1", "0a1b2c3d-03-17", "notarun-3-17"] {
            assert_eq!(Gid::parse(PREFIX, &format!("{PREFIX}{other}")), None, "{other}");
        }
        assert_eq!(Gid::parse(PREFIX, "someone else's"), None);
    }

    fn g(run: &str, subtask: u16, checkpoint: u64, generation: Generation) -> Gid {
        Gid { run: run.into(), subtask, checkpoint, generation }
    }

    fn judge(subtask: u16, parallelism: u16, generation: Generation) -> Judge<'static> {
        Judge { run: "bbbbbbbb", generation, subtask, parallelism }
    }

    #[test]
    fn leftovers_are_split_between_subtasks_and_only_uncovered_ones_go_at_once() {
        // Restored from 5 at parallelism 2 after a run at 4.
        assert_eq!(leftover(&g("aaaaaaaa", 3, 6, 0), judge(1, 2, 0), Some(5)), Leftover::RollBack);
        assert_eq!(leftover(&g("aaaaaaaa", 3, 6, 0), judge(0, 2, 0), Some(5)), Leftover::Keep, "old subtask 3 is subtask 1's");
        assert_eq!(leftover(&g("aaaaaaaa", 2, 5, 0), judge(0, 2, 0), Some(5)), Leftover::RollBackLater, "maybe staged by 5");
        assert_eq!(leftover(&g("bbbbbbbb", 0, 9, 0), judge(0, 2, 0), Some(5)), Leftover::Keep, "our own");
        assert_eq!(leftover(&g("aaaaaaaa", 0, 2, 0), judge(0, 1, 0), None), Leftover::RollBack, "a fresh start");
        assert_eq!(leftover(&g("aaaaaaaa", 0, 2, 3), judge(0, 1, 4), None), Leftover::RollBack, "an older generation's");
    }

    #[test]
    fn a_deposed_owner_never_judges_the_new_owners_transactions() {
        // This process is generation 3; the storage was taken over by 4.
        for restored in [None, Some(1), Some(9)] {
            assert_eq!(leftover(&g("aaaaaaaa", 0, 2, 4), judge(0, 1, 3), restored), Leftover::Keep, "{restored:?}");
        }
        assert!(!deposed(&g("aaaaaaaa", 0, 2, 4), judge(0, 1, 3)));
    }

    #[test]
    fn the_new_owner_rolls_back_older_generations_late_transactions_once_each() {
        assert!(deposed(&g("aaaaaaaa", 1, 11, 3), judge(1, 2, 4)));
        assert!(deposed(&g("aaaaaaaa", 3, 11, 0), judge(1, 2, 4)), "one of before generations, on this subtask");
        assert!(!deposed(&g("aaaaaaaa", 3, 11, 3), judge(0, 2, 4)), "subtask 1's to roll back");
        assert!(!deposed(&g("aaaaaaaa", 0, 11, 4), judge(0, 2, 4)), "this generation's: judged at the start only");
        assert!(!deposed(&g("bbbbbbbb", 0, 11, 3), judge(0, 2, 4)), "our own run");
    }
}

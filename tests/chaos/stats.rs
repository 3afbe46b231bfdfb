//! Totals over the cases of a chaos run, printed as a table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::case::Case;

#[derive(Default)]
pub struct Stats {
    pub cases: usize,
    pub runs: usize,
    pub kill_points: usize,
    pub faults: BTreeMap<String, usize>,
    pub records: usize,
    pub lost: usize,
    pub doubled: usize,
    pub foreign: usize,
    pub refused: usize,
    pub edits: usize,
    pub savepoints: usize,
    /// (seed, first line of the failure, reproduction dir).
    pub failures: Vec<(u64, String, String)>,
}

impl Stats {
    pub fn add(&mut self, c: &Case) {
        self.cases += 1;
        self.runs += c.runs;
        self.kill_points += c.kill_points;
        for k in &c.faults {
            *self.faults.entry(k.clone()).or_default() += 1;
        }
        self.records += c.findings.records;
        self.lost += c.findings.lost;
        self.doubled += c.findings.doubled;
        self.foreign += c.findings.foreign;
        self.refused += c.refused;
        self.edits += c.edits;
        self.savepoints += c.savepoints;
        if let Some(f) = &c.failure {
            self.failures.push((c.seed, f.lines().next().unwrap_or("").to_string(), c.dir.display().to_string()));
        }
    }

    pub fn table(&self, seeds: &str, elapsed: std::time::Duration) -> String {
        let mut t = String::new();
        let row = |t: &mut String, k: &str, v: String| {
            let _ = writeln!(t, "| {k:<36} | {v:<44} |");
        };
        let _ = writeln!(t, "| {:<36} | {:<44} |\n|{}|{}|", "chaos", seeds, "-".repeat(38), "-".repeat(46));
        row(&mut t, "time", format!("{:.0} s", elapsed.as_secs_f64()));
        row(&mut t, "cases", self.cases.to_string());
        row(&mut t, "runs of weir", self.runs.to_string());
        row(&mut t, "kill points", format!("{} (kill -9, injected crashes, hard stops)", self.kill_points));
        for (k, n) in &self.faults {
            row(&mut t, &format!("  fault: {k}"), n.to_string());
        }
        row(&mut t, "savepoints taken", self.savepoints.to_string());
        row(&mut t, "topology edits honoured", self.edits.to_string());
        row(&mut t, "refusals (exit 2, unchanged)", self.refused.to_string());
        row(&mut t, "records checked", self.records.to_string());
        row(&mut t, "lost", self.lost.to_string());
        row(&mut t, "doubled", self.doubled.to_string());
        row(&mut t, "not in the reference", self.foreign.to_string());
        row(&mut t, "failures", self.failures.len().to_string());
        for (seed, what, dir) in &self.failures {
            let _ = writeln!(t, "  seed {seed}: {what}\n    reproduction: {dir}/REPRODUCE.md");
        }
        t
    }
}

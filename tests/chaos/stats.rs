//! Totals over the cases of a chaos run, printed as a table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::case::Case;

#[derive(Default)]
pub struct Stats {
    pub cases: usize,
    pub runs: usize,
    pub kill_points: usize,
    pub stalls_fired: usize,
    pub restarts_fired: usize,
    pub faults: BTreeMap<String, usize>,
    pub records: usize,
    pub lost: usize,
    pub doubled: usize,
    pub foreign: usize,
    pub refused: usize,
    pub edits: usize,
    pub savepoints: usize,
    /// Cases with checkpoints on S3, machines they moved to, stale owners taken over.
    pub on_s3: usize,
    pub machines: usize,
    pub takeovers: usize,
    pub timing: Timing,
    /// (seed, first line of the failure, reproduction dir).
    pub failures: Vec<(u64, String, String)>,
}

impl Stats {
    pub fn add(&mut self, c: &Case) {
        self.cases += 1;
        self.runs += c.runs;
        self.kill_points += c.kill_points;
        self.stalls_fired += c.stalls_fired;
        self.restarts_fired += c.restarts_fired;
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
        self.on_s3 += usize::from(c.storage.is_some());
        self.machines += c.machine as usize;
        self.takeovers += c.takeovers;
        self.timing.merge(&c.timing);
        if let Some(f) = &c.failure {
            self.failures.push((c.seed, f.lines().next().unwrap_or("").to_string(), c.dir.display().to_string()));
        }
    }

    pub fn table(&self, seeds: &str, elapsed: std::time::Duration) -> String {
        let mut t = String::new();
        let row = |t: &mut String, k: &str, v: String| {
            let _ = writeln!(t, "| {k:<48} | {v:<58} |");
        };
        let _ = writeln!(t, "| {:<48} | {:<58} |\n|{}|{}|", "chaos", seeds, "-".repeat(50), "-".repeat(60));
        row(&mut t, "time", format!("{:.0} s", elapsed.as_secs_f64()));
        let total = elapsed.as_secs_f64().max(0.001);
        for p in PHASES {
            let d = self.timing.0.get(p).map_or(0.0, |d| d.as_secs_f64());
            row(
                &mut t,
                &format!("  {}", p.split(':').next().unwrap_or(p)),
                format!("{d:.0} s ({:.0} %) {}", d * 100.0 / total, p.split_once(": ").map_or("", |x| x.1)),
            );
        }
        row(&mut t, "kill points per minute", format!("{:.1}", self.kill_points as f64 * 60.0 / total));
        row(&mut t, "cases", self.cases.to_string());
        row(&mut t, "runs of weir", self.runs.to_string());
        row(&mut t, "kill points", format!("{} (kill -9, injected crashes, hard stops)", self.kill_points));
        for (k, n) in &self.faults {
            row(&mut t, &format!("  fault: {k}"), n.to_string());
        }
        row(&mut t, "stalls injected (runs)", format!("{} (\"Injected stall.\" logged)", self.stalls_fired));
        row(&mut t, "in-process restarts", format!("{} (restart:, after an injected failure)", self.restarts_fired));
        row(&mut t, "savepoints taken", self.savepoints.to_string());
        row(&mut t, "cases with checkpoints on S3", self.on_s3.to_string());
        row(&mut t, "  moves to a new machine", self.machines.to_string());
        row(&mut t, "  stale owners taken over", self.takeovers.to_string());
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

/// Where a case's wall time went, by phase (summed over its runs).
#[derive(Default, Clone)]
pub struct Timing(pub BTreeMap<&'static str, std::time::Duration>);

pub const SETUP: &str = "setup: input, topics, oracle";
pub const START: &str = "start: spawn to 'Pipeline started.' (build, restore)";
pub const WAITS: &str = "waits: before an action";
pub const OUTAGES: &str = "outages: broker stopped, and the wait before";
pub const ACTIONS: &str = "actions: signals, triggers, 2nd process";
pub const TO_EXIT: &str = "to exit: after the action, running to the exit";
pub const REFUSED: &str = "refusals: refused restores before a run";
pub const CHECK: &str = "check: read back, compare";
pub const REPRO: &str = "repro: reproduction files";

/// The phases, in the order the table prints them.
pub const PHASES: [&str; 9] = [SETUP, START, WAITS, OUTAGES, ACTIONS, TO_EXIT, REFUSED, CHECK, REPRO];

impl Timing {
    pub fn add(&mut self, phase: &'static str, d: std::time::Duration) {
        debug_assert!(PHASES.contains(&phase), "{phase}");
        *self.0.entry(phase).or_default() += d;
    }

    pub fn merge(&mut self, other: &Timing) {
        for (k, d) in &other.0 {
            self.add(k, *d);
        }
    }

    /// One line per case: `start 1.2 s, waits 3.4 s, ...`.
    pub fn line(&self) -> String {
        PHASES
            .iter()
            .filter_map(|p| self.0.get(p).map(|d| format!("{} {:.1} s", p.split(':').next().unwrap_or(p), d.as_secs_f64())))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

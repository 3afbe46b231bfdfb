//! The process's latest warnings and errors, as its log has them, for the
//! status document (`weir status --json`, the web page): a person who
//! opens the page after something went wrong sees what and when without
//! the log at hand. The log subscriber (`cli`) pushes each WARN and ERROR
//! event here; only the newest [`KEPT`] stay.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// How many lines are kept.
pub const KEPT: usize = 50;

/// One warning or error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// Wall-clock time, ms since the Unix epoch.
    pub at_ms: u64,
    /// `WARN` or `ERROR`.
    pub level: String,
    /// The message, then its fields as the text log shows them (`key=value`).
    pub text: String,
}

static LINES: Mutex<VecDeque<LogLine>> = Mutex::new(VecDeque::new());

/// Keep `line`, dropping the oldest beyond [`KEPT`].
pub fn push(line: LogLine) {
    let mut lines = LINES.lock().unwrap_or_else(|e| e.into_inner());
    if lines.len() == KEPT {
        lines.pop_front();
    }
    lines.push_back(line);
}

/// The kept lines, oldest first.
pub fn lines() -> Vec<LogLine> {
    LINES.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_lines_are_kept_in_order() {
        for i in 0..KEPT + 3 {
            push(LogLine { at_ms: i as u64, level: "WARN".into(), text: format!("line {i}") });
        }
        let kept = lines();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept[0].text, "line 3");
        assert_eq!(kept.last().unwrap().text, format!("line {}", KEPT + 2));
    }
}

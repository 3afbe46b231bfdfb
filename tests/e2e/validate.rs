//! `weir validate` on broken pipelines: exit 2 and every expected error,
//! located. Each `testdata/invalid/NAME.yaml` states what it expects in
//! comments `# expect: LINE:COL: substring`.

use super::util::{repo, weir};

/// (line, col, substring) from the `# expect:` comments of a file.
fn expectations(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("# expect:"))
        .map(|e| {
            let e = e.trim();
            let mut parts = e.splitn(3, ':');
            let (line, col, msg) = (parts.next().unwrap(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            (format!("{}:{}", line.trim(), col.trim()), msg.trim().to_string())
        })
        .collect()
}

#[test]
fn invalid_pipelines_exit_2_with_located_errors() {
    let dir = repo().join("testdata/invalid");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("skipped: {} does not exist yet", dir.display());
        return;
    };
    let mut files: Vec<_> =
        entries.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml")).collect();
    files.sort();
    let mut failures = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(repo()).unwrap().display().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let expected = expectations(&text);
        assert!(!expected.is_empty(), "{rel} has no `# expect: LINE:COL: substring` comment");
        let o = weir(&["validate", &rel]).run();
        if o.code() != Some(2) {
            failures.push(format!("{rel}: exit {:?}, want 2\n{}", o.code(), o.stderr));
            continue;
        }
        let all = format!("{}{}", o.stdout, o.stderr);
        for (at, msg) in expected {
            let prefix = format!("{rel}:{at}: ");
            let found = all.lines().any(|l| l.find(&prefix).is_some_and(|i| l[i + prefix.len()..].contains(&msg)));
            if !found {
                failures.push(format!("{rel}: no line `{prefix}...{msg}...` in:\n{all}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} invalid pipelines misreported:\n\n{}", failures.len(), files.len(), failures.join("\n\n"));
}

#[test]
fn expectation_comments_parse() {
    let e = expectations("name: x\n# expect: 3:5: unknown field `foo`\n  # expect: 7:1: duplicate name\n");
    let want = [("3:5", "unknown field `foo`"), ("7:1", "duplicate name")].map(|(a, b)| (a.to_string(), b.to_string()));
    assert_eq!(e, want);
}

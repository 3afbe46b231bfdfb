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

/// `weir validate /dev/zero` grew to 5.8 GB in 5 s: a pipeline file is read
/// through a 16 MiB cap and refused past it, at once.
#[test]
fn a_pipeline_file_over_16_mib_is_refused_without_reading_it_all() {
    let o = weir(&["validate", "/dev/zero"]).run();
    o.expect_code(2);
    o.expect_stderr_contains("/dev/zero: the pipeline file is larger than 16 MiB");
    assert!(o.elapsed < std::time::Duration::from_secs(10), "took {:?}", o.elapsed);
}

/// Two file sinks with one `path` validated, and with checkpoints half the
/// output disappeared (exit 0). `run` refuses it too, before writing
/// anything.
#[test]
fn two_file_sinks_with_one_path_are_refused_by_validate_and_run() {
    let dir = super::util::tmp();
    let (out, state) = (dir.path().join("out"), dir.path().join("state"));
    let pipeline = dir.path().join("p.yaml");
    let text = format!(
        "name: p\ncheckpoint: {{interval: 100ms}}\nstate: {{dir: {state}}}\nsources:\n  - {{name: gen, type: datagen, rows: 10000, fields: {{id: {{kind: sequence}}}}}}\nsinks:\n  - {{name: a, type: file, input: gen, path: {out}}}\n  - {{name: b, type: file, input: gen, path: {out}/.}}\n",
        state = state.display(),
        out = out.display()
    );
    std::fs::write(&pipeline, text).unwrap();
    let p = pipeline.display().to_string();
    for cmd in ["validate", "run"] {
        let o = weir(&[cmd, p.as_str()]).run();
        o.expect_code(2);
        o.expect_stderr_contains(&format!(
            "{p}:8:45: the output directory of sink `b` `{}/.` is also the output directory of sink `a` `{}` (at {p}:7:45)",
            out.display(),
            out.display()
        ));
    }
    assert!(!out.exists() && !state.exists(), "a refused run wrote nothing");
}

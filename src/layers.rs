//! The layer test: every module of the crate imports only modules below it
//! in [`LAYERS`], so data and calls flow one way and there is no import
//! cycle (docs/architecture.md draws the same order). It reads the source
//! itself: each `crate::<module>` a file names outside comments and test
//! code counts as an import.

/// The modules of the crate, lowest first. A module may use the ones
/// before it, never one after it; a new module must be placed here.
const LAYERS: &[&str] = &[
    // The base: values, numbers, byte codes and small services.
    "number",
    "types",
    "codec",
    "features",
    "faults",
    "blocking",
    "pacing",
    "run_id",
    "recent",
    // Bytes at rest, the pipeline as written and as planned.
    "checkpoint",
    "format",
    "expr",
    "config",
    "plan",
    // Pure protocol, then state and the things that process records.
    "protocol",
    "state",
    "operators",
    "connectors",
    // Before the engine, the engine, the network edges around it, the CLI.
    "restore",
    "runtime",
    "serve",
    "cli",
];

/// `text` without comments and without the items under `#[cfg(test)]`.
fn production_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            // Skip the next item: a `mod x;` line, or a braced block.
            let (mut depth, mut opened) = (0i64, false);
            for next in lines.by_ref() {
                let code = next.split("//").next().unwrap_or("");
                depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
                opened |= code.contains('{');
                if (opened && depth <= 0) || (!opened && code.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// The top-level modules `code` names as `crate::m` or `crate::{m, ..}`.
fn imported(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect::<String>();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Names at the group's top level: after `{` and after each `,` at depth 0.
            let mut depth = 0;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start => {
                        start = false;
                        found.push(ident(&group[j..]));
                    }
                    _ => {}
                }
            }
        } else {
            found.push(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

#[test]
fn every_module_imports_only_modules_below_it() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut wrong = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        let name = path.file_name().unwrap().to_string_lossy();
        // The binary and the crate root are above every layer; test-only files are not layered.
        if ["main.rs", "lib.rs", "layers.rs"].contains(&rel.as_str()) || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let module = rel.split('/').next().unwrap().trim_end_matches(".rs").to_string();
        let Some(level) = LAYERS.iter().position(|m| *m == module) else {
            wrong.push(format!("src/{rel}: module `{module}` is not in LAYERS (src/layers.rs): place it"));
            continue;
        };
        let code = production_code(&std::fs::read_to_string(&path).unwrap());
        for used in imported(&code) {
            if used == module {
                continue;
            }
            match LAYERS.iter().position(|m| *m == used) {
                Some(l) if l < level => {}
                Some(_) => wrong.push(format!("src/{rel}: `{module}` uses `crate::{used}`, which is not below it")),
                None => wrong.push(format!("src/{rel}: uses `crate::{used}`, which is not in LAYERS")),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "{} imports against the layers:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn the_reader_finds_paths_groups_and_skips_comments_and_tests() {
    let code = production_code(
        "use crate::a::B;\nuse crate::{c, d::{E, F}, g};\n// crate::h\nlet x = crate::i::f(); // crate::j\n#[cfg(test)]\nmod tests {\n    use crate::k;\n}\n#[cfg(test)]\nmod more;\nfn f() { crate::l::m() }\n",
    );
    assert_eq!(imported(&code), ["a", "c", "d", "g", "i", "l"]);
}

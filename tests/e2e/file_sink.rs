//! The file sink's contract on disk: rolling part files, names, reruns.

use super::records::assert_same_multiset;
use super::reference;
use super::util::{hidden_files, input_lines, part_files, sink_lines, tmp, weir_run};

#[test]
fn small_max_file_bytes_rolls_parts_without_splitting_lines() {
    let expected = reference::dedup(&input_lines("testdata/inputs/orders.jsonl"), &["order_id"]);
    let dir = tmp();
    let out = dir.path().join("out");
    weir_run("pipelines/dedup.yaml", 2).set("sinks.out.path", &out).set("sinks.out.max_file_bytes", "10000").ok();
    let parts = part_files(&out);
    assert!(parts.len() >= 10, "expected many rolled parts, got {}", parts.len());
    for p in &parts {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let ok = name.len() == "part-0000-000000.jsonl".len() && name.starts_with("part-") && name.ends_with(".jsonl");
        assert!(ok, "unexpected part file name {name}");
    }
    assert!(hidden_files(&out).is_empty());
    assert_same_multiset("rolled parts", sink_lines(&out), expected);
}

#[test]
fn a_second_run_into_the_same_directory_keeps_the_first_runs_parts() {
    let once = reference::dedup(&input_lines("testdata/inputs/orders.jsonl"), &["order_id"]);
    let dir = tmp();
    let out = dir.path().join("out");
    weir_run("pipelines/dedup.yaml", 2).set("sinks.out.path", &out).ok();
    let first = part_files(&out);
    weir_run("pipelines/dedup.yaml", 3).set("sinks.out.path", &out).ok();
    assert!(first.iter().all(|f| f.exists()));
    let twice: Vec<String> = once.iter().chain(once.iter()).cloned().collect();
    assert_same_multiset("two runs", sink_lines(&out), twice);
}

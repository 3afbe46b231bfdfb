//! Offsets that no longer exist (a topic recreated under a restored or running source) are never skipped silently.

use super::*;

#[test]
fn kafka_restored_offset_past_the_end_of_a_recreated_topic_is_not_skipped_silently() {
    // The checkpoint holds offset 100 of partition 0; the topic is then
    // recreated with 30 records. Reading from 100 would skip all of them
    // (and 70 more to come) without a word.
    let job = KJob::new("recreated", PASSTHROUGH, false);
    let first = lines_of(1, 100);
    produce_to(broker(), &job.input, 0, &first);
    run_until_output(&job, job.cmd_p(1), first.len());
    recreate_topic(broker(), &job.input, 3);
    let second = lines_of(2, 30);
    produce_to(broker(), &job.input, 0, &second);
    // Default `fail`: exit 1 naming topic, partition, offset and range.
    let refused = job.cmd_p(1).arg("--restore").arg("latest").spawn().wait_for(Duration::from_secs(60));
    refused.expect_code(1);
    refused.expect_stderr_contains(&format!("restored offset 100 of {}/0 is out of the partition's range 0..=30", job.input));
    // `earliest`: the recreated partition is read from its start.
    let o = run_until_output(
        &job,
        job.cmd_p(1).arg("--restore").arg("latest").set("sources.events.on_offset_out_of_range", "earliest"),
        first.len() + second.len(),
    );
    o.expect_stderr_contains("Kafka offset out of range");
    let mut got = job.output();
    got.sort();
    let mut want: Vec<String> = first.iter().chain(&second).cloned().collect();
    want.sort();
    assert_eq!(got, want, "each record once");
}

#[test]
fn kafka_topic_recreated_while_running_is_not_skipped_silently() {
    // While running at offset 100, the topic is recreated with 30 records:
    // the fetch at 100 is out of range. librdkafka would jump to the start
    // and the source drop everything below 100; with `earliest` it is
    // reported and read.
    let job = KJob::new("recreated-live", PASSTHROUGH, false);
    let first = lines_of(1, 100);
    produce_to(broker(), &job.input, 0, &first);
    let run = job.cmd_p(1).set("sources.events.on_offset_out_of_range", "earliest").spawn();
    assert!(wait_until(Duration::from_secs(30), || job.output().len() >= first.len()), "the first records never arrived");
    recreate_topic(broker(), &job.input, 3);
    let second = lines_of(2, 30);
    produce_to(broker(), &job.input, 0, &second);
    let reached = wait_until(Duration::from_secs(40), || job.output().len() >= first.len() + second.len());
    run.terminate();
    let o = run.wait_for(Duration::from_secs(30));
    assert!(reached, "the recreated topic's records never arrived; log:\n{}", o.stderr);
    o.expect_code(0);
    o.expect_stderr_contains("Kafka offset out of range");
    assert_eq!(job.output().len(), first.len() + second.len());
}

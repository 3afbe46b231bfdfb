//! One pipeline as several weir processes (`--instance I/N`, docs/scaling.md):
//! the instance settings are checked, an instance refuses the checkpoints
//! of another cluster shape, and (real broker) a cluster of separate
//! processes on loopback hands records over through repartition topics
//! exactly once, also across a `kill -9` of one instance.

use super::util::{tmp, weir};

const FILE_PIPELINE: &str = "name: filed
state: {dir: @STATE@}
checkpoint: {interval: 1s}
cluster: {instances: 2, index: ${WEIR_INSTANCE:0}}
sources:
  - {name: lines, type: file, path: testdata/inputs/orders.jsonl}
sinks:
  - {name: out, type: stdout, input: lines}
";

#[test]
fn cluster_index_out_of_range_is_refused_with_its_place() {
    let dir = tmp();
    let p = dir.path().join("p.yaml");
    std::fs::write(&p, FILE_PIPELINE.replace("@STATE@", &dir.path().join("state").display().to_string())).unwrap();
    let p = p.display().to_string();
    // From the environment, located in the file.
    let o = weir(&["validate", &p]).env("WEIR_INSTANCE", "5").run();
    o.expect_code(2);
    o.expect_stderr_contains("p.yaml:4:");
    o.expect_stderr_contains("`cluster.index` must be below `cluster.instances` (2): expected 0 <= index < 2, got 5");
    // From the command line, named as such.
    let o = weir(&["validate", &p, "--instance", "2/2"]).run();
    o.expect_code(2);
    o.expect_stderr_contains("--instance 2/2");
    let o = weir(&["validate", &p, "--instance", "1-2"]).run();
    o.expect_code(2);
    o.expect_stderr_contains("expected I/N");
    assert!(!dir.path().join("state").exists(), "a refused start writes nothing");
}

#[test]
fn a_file_source_in_a_cluster_is_refused_rather_than_read_by_every_instance() {
    let dir = tmp();
    let p = dir.path().join("p.yaml");
    std::fs::write(&p, FILE_PIPELINE.replace("@STATE@", &dir.path().join("state").display().to_string())).unwrap();
    let o = weir(&["run", &p.display().to_string(), "--no-progress"]).env("WEIR_INSTANCE", "1").run();
    o.expect_code(2);
    o.expect_stderr_contains("p.yaml:6:");
    o.expect_stderr_contains("a file source cannot run in a cluster (2 instances)");
    assert!(!dir.path().join("state").exists(), "a refused start writes nothing");
    // One instance: exactly today's behaviour.
    let o = weir(&["validate", &p.display().to_string(), "--instance", "0/1"]).run();
    o.expect_code(0);
}

#[cfg(feature = "kafka")]
pub(crate) mod kafka {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use super::super::kafka::{broker, create_topic, produce_to, read_committed, topic};
    use super::super::records::parse;
    use super::super::util::{tmp, weir, Running};

    /// Kafka -> dedup by id -> running count and sum per user -> Kafka
    /// exactly-once: two hash edges, so two repartition topics.
    const PIPELINE: &str = r#"name: @NAME@
parallelism: 1
max_parallelism: 12
state: {dir: @STATE@}
checkpoint: {interval: 200ms}
sources:
  - name: orders
    type: kafka
    brokers: @BROKERS@
    topics: [@IN@]
    broker_timeout: 20s
    properties: {session.timeout.ms: 6000, heartbeat.interval.ms: 1000}
operators:
  - {name: unique, type: dedup, input: orders, key: [id]}
  - name: per_user
    type: aggregate
    input: unique
    key: [user]
    emit_interval: 100ms
    aggregates: [{fn: count, as: n}, {fn: sum, field: amount, as: total}]
sinks:
  - {name: out, type: kafka, input: per_user, brokers: @BROKERS@, topic: @OUT@, key: [user], delivery: exactly_once}
"#;

    /// Orders `ids` as (partition, line), every third one delivered twice,
    /// the copy to another partition (so to the other instance's source
    /// partitions too: only the repartition by `id` brings them together).
    fn orders(ids: std::ops::Range<i64>) -> Vec<(i32, String)> {
        let mut out = Vec::new();
        for id in ids {
            let line = format!(r#"{{"id":{id},"user":"u{}","amount":{}}}"#, (id * 7) % 5, id % 13);
            if id % 3 == 0 {
                out.push((((id + 1) % 4) as i32, line.clone()));
            }
            out.push(((id % 4) as i32, line));
        }
        out
    }

    /// Produce `orders` (partition, line), each partition's in their order.
    pub(crate) fn send(input: &str, orders: &[(i32, String)]) {
        let partitions: std::collections::BTreeSet<i32> = orders.iter().map(|(p, _)| *p).collect();
        for p in partitions {
            let lines: Vec<String> = orders.iter().filter(|(q, _)| *q == p).map(|(_, l)| l.clone()).collect();
            produce_to(broker(), input, p, &lines);
        }
    }

    /// The oracle, from the input alone: per user, the count and sum of
    /// its distinct orders.
    fn reference(input: &[(i32, String)]) -> BTreeMap<String, (i64, i64)> {
        distinct_per_user(input, "id")
    }

    /// Per user, the count and sum of the orders distinct by `id_field`.
    pub(crate) fn distinct_per_user(input: &[(i32, String)], id_field: &str) -> BTreeMap<String, (i64, i64)> {
        let mut seen = std::collections::HashSet::new();
        let mut out: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for (_, l) in input {
            let o = parse(l);
            if seen.insert(o[id_field].as_i64().unwrap()) {
                let e = out.entry(o["user"].as_str().unwrap().to_string()).or_default();
                e.0 += 1;
                e.1 += o["amount"].as_i64().unwrap();
            }
        }
        out
    }

    /// The last committed value of every user (updates of a user share a
    /// partition, in commit order).
    fn last_values(output: &str) -> BTreeMap<String, (i64, i64)> {
        let mut out = BTreeMap::new();
        for l in read_committed(broker(), output, Duration::from_secs(30)) {
            let o = parse(&l);
            out.insert(o["user"].as_str().unwrap().to_string(), (o["n"].as_i64().unwrap(), o["total"].as_i64().unwrap()));
        }
        out
    }

    #[track_caller]
    fn wait_for_output(output: &str, want: &BTreeMap<String, (i64, i64)>, limit: Duration, instances: &mut [Running]) {
        let start = Instant::now();
        loop {
            let got = last_values(output);
            if got == *want {
                return;
            }
            for r in instances.iter_mut() {
                if let Ok(Some(s)) = r.child.try_wait() {
                    panic!("an instance exited ({s}) before the output was complete; output so far {got:?}");
                }
            }
            assert!(start.elapsed() < limit, "output after {limit:?}:\n{got:?}\nwant:\n{want:?}");
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    #[test]
    fn cluster_of_two_processes_dedup_and_aggregate_exactly_once_through_repartition_topics_and_a_kill() {
        two_instances_with_a_kill("cluster", None);
    }

    /// The same with checkpoints on S3 (one prefix per instance), the
    /// killed instances restarted on a "new machine" (no local state), and
    /// the refusal of another shape read from the bucket alone.
    #[test]
    fn cluster_with_checkpoints_on_s3_restores_an_instance_on_a_new_machine() {
        if std::env::var_os("AWS_ENDPOINT_URL").is_none() && std::env::var_os("WEIR_S3_ENDPOINT").is_none() {
            eprintln!("skipped: no S3 server (set AWS_ENDPOINT_URL and the AWS credentials, or run scripts/test.sh)");
            return;
        }
        if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
            // As tests/e2e/s3.rs does: the instances read this variable.
            std::env::set_var("AWS_ENDPOINT_URL", std::env::var_os("WEIR_S3_ENDPOINT").unwrap());
        }
        let bucket = std::env::var("WEIR_S3_BUCKET").unwrap_or_else(|_| "weir".into());
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let url = format!("s3://{bucket}/e2e/cluster-{}-{nanos}", std::process::id());
        two_instances_with_a_kill("cluster-s3", Some(&url));
        let store = weir::checkpoint::remote::ObjectStorage::open(&url, &[]).unwrap();
        use weir::checkpoint::storage::Storage;
        for i in 0..2 {
            let keys = store.list(&format!("instance-{i}/")).unwrap();
            assert!(keys.iter().any(|o| o.key.ends_with("/_metadata")), "instance {i} commits under its own prefix: {keys:?}");
        }
    }

    /// Two instances at parallelism 2 each: every subtask of a keyed
    /// operator of every instance gets its part of the instance's key
    /// groups (so the work splits across the cores of a machine), and the
    /// output is exact. Before the instance's key groups were dealt within
    /// its own share, instance 0's keys all went to its subtask 0 and
    /// instance 1's to its subtask 1.
    #[test]
    fn cluster_instances_deal_their_key_groups_to_all_their_subtasks() {
        use super::super::metrics::{free_port, scrape, value};
        let b = broker();
        let Setup { input, output, dir, name } = setup("spread", 4);
        let state = dir.path().join("state");
        let template = PIPELINE.replace("parallelism: 1\n", "parallelism: 2\n");
        let p = write_pipeline(dir.path(), &template, &name, &state.display().to_string(), b, &input, &output);
        let all = orders(0..240);
        send(&input, &all);
        let ports = [free_port(), free_port()];
        let mut instances: Vec<Running> = (0..2u16)
            .map(|i| {
                weir(&[
                    "run",
                    &p,
                    "--no-progress",
                    "--instance",
                    &format!("{i}/2"),
                    "--metrics-addr",
                    &format!("127.0.0.1:{}", ports[i as usize]),
                ])
                .spawn()
            })
            .collect();
        wait_for_output(&output, &reference(&all), Duration::from_secs(90), &mut instances);
        for (i, port) in ports.iter().enumerate() {
            let text = scrape(*port).unwrap_or_else(|| panic!("instance {i} serves /metrics"));
            // `unique` is keyed by id (240 ids over the 12 key groups);
            // `per_user` has only 5 keys, too few to reach every subtask.
            for op in ["unique"] {
                for subtask in ["0", "1"] {
                    let n = value(&text, "weir_records_in_total", &[&format!("operator=\"{op}\""), &format!("subtask=\"{subtask}\"")]);
                    assert!(n.is_some_and(|n| n > 0.0), "instance {i}: `{op}` subtask {subtask} received {n:?} records:\n{text}");
                }
            }
        }
        for r in &instances {
            r.terminate();
        }
        for r in instances {
            r.wait_for(Duration::from_secs(60)).expect_code(0);
        }
    }

    /// A test's input topic (with `partitions`) and output topic, its
    /// temporary directory and its pipeline name, all named after `what`.
    struct Setup {
        input: String,
        output: String,
        dir: tempfile::TempDir,
        name: String,
    }

    /// `what` names the pipeline too (its repartition topics and
    /// transactional ids), so it must be each test's own: tests run at once.
    fn setup(what: &str, partitions: i32) -> Setup {
        let (input, output) = (topic(&format!("{what}-in")), topic(&format!("{what}-out")));
        create_topic(broker(), &input, partitions);
        Setup { input, output, dir: tmp(), name: format!("{what}-{}", std::process::id()) }
    }

    /// `template` filled in (`@NAME@`, `@STATE@`, `@BROKERS@`, `@IN@`,
    /// `@OUT@`) and written to `dir/p.yaml`; its path.
    fn write_pipeline(dir: &std::path::Path, template: &str, name: &str, state: &str, brokers: &str, input: &str, output: &str) -> String {
        let text = template
            .replace("@NAME@", name)
            .replace("@STATE@", state)
            .replace("@BROKERS@", brokers)
            .replace("@IN@", input)
            .replace("@OUT@", output);
        let p = dir.join("p.yaml");
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    fn two_instances_with_a_kill(what: &str, storage: Option<&str>) {
        let b = broker();
        let Setup { input, output, dir, name } = setup(what, 4);
        let state = dir.path().join("state");
        let template = match storage {
            Some(url) => PIPELINE.replace("checkpoint: {interval: 200ms}", &format!("checkpoint: {{interval: 200ms, storage: \"{url}\"}}")),
            None => PIPELINE.to_string(),
        };
        let p = write_pipeline(dir.path(), &template, &name, &state.display().to_string(), b, &input, &output);
        let run = |i: u16, restore: bool| {
            let mut w = weir(&["run", &p, "--no-progress", "--instance", &format!("{i}/2")]);
            if restore {
                w = w.arg("--restore").arg("latest");
            }
            w.spawn()
        };
        let mut all = orders(0..240);
        send(&input, &all);
        let mut instances = vec![run(0, false), run(1, false)];
        wait_for_output(&output, &reference(&all), Duration::from_secs(90), &mut instances);
        assert!(state.join("instance-0").is_dir() && state.join("instance-1").is_dir(), "each instance has its own prefix");
        // A second live instance 0 on this host: refused by the state
        // directory's lock, before it opens a connector.
        let o = weir(&["run", &p, "--no-progress", "--instance", "0/2", "--restore", "latest"]).run();
        o.expect_code(2);
        o.expect_stderr_contains("is in use by weir process");

        // kill -9 one instance, then the other, while new input (with
        // copies of old orders) arrives; each restarts with --restore latest.
        for (round, killed) in [(0i64, 1usize), (1, 0)] {
            instances[killed].child.kill().unwrap();
            instances[killed].child.wait().unwrap();
            if storage.is_some() {
                // A new machine: only the bucket has its checkpoints.
                std::fs::remove_dir_all(state.join(format!("instance-{killed}"))).unwrap();
            }
            let (lo, hi) = (240 + round * 120, 360 + round * 120);
            let more: Vec<(i32, String)> = orders(lo..hi).into_iter().chain(orders(round * 60..round * 60 + 60)).collect();
            send(&input, &more);
            all.extend(more);
            instances[killed] = run(killed as u16, true);
            wait_for_output(&output, &reference(&all), Duration::from_secs(90), &mut instances);
        }
        for r in &instances {
            r.terminate();
        }
        for r in instances {
            r.wait_for(Duration::from_secs(60)).expect_code(0);
        }

        // Another number of instances on an existing prefix: refused, nothing written.
        if storage.is_some() {
            std::fs::remove_dir_all(&state).unwrap();
            std::fs::create_dir(&state).unwrap();
        }
        let before = listing(&state);
        for (instance, found) in [("1/3", "instance 1 of 2"), ("0/3", "instance 0 of 2")] {
            let o = weir(&["run", &p, "--no-progress", "--instance", instance, "--restore", "latest"]).run();
            o.expect_code(2);
            o.expect_stderr_contains(&format!("was written by {found}"));
        }
        let o = weir(&["run", &p, "--no-progress", "--instance", "0/3"]).run();
        o.expect_code(2);
        assert_eq!(listing(&state), before, "a refused start changes nothing on disk");
    }

    /// Event time across instances: Kafka -> dedup by `order_id` -> 10 s
    /// tumbling count and sum per user -> Kafka exactly-once, event time from
    /// the `ts` field. Every window downstream of the two repartition topics
    /// fires only once every producer (send subtask of every instance) has
    /// written a watermark past it.
    const WINDOWED: &str = r#"name: @NAME@
parallelism: 1
max_parallelism: 12
state: {dir: @STATE@}
checkpoint: {interval: 200ms}
sources:
  - name: orders
    type: kafka
    brokers: @BROKERS@
    topics: [@IN@]
    broker_timeout: 20s
    event_time: {field: ts, max_out_of_orderness: 1s}
operators:
  - {name: unique, type: dedup, input: orders, key: [order_id]}
  - name: per_user
    type: aggregate
    input: unique
    key: [user]
    window: {type: tumbling, size: 10s}
    aggregates: [{fn: count, as: n}, {fn: sum, field: amount, as: total}]
sinks:
  - {name: out, type: kafka, input: per_user, brokers: @BROKERS@, topic: @OUT@, key: [user], delivery: exactly_once}
"#;

    /// Six partitions, so that each of the three instances reads two.
    const WINDOWED_PARTITIONS: i32 = 6;
    /// A multiple of the window size.
    const T0: i64 = 1_700_000_000_000;

    /// Orders `ids` as (partition, line), 100 ms apart in event time and in
    /// time order on each partition (so none is late), every third one
    /// also on the next partition (only the repartition by `order_id`
    /// brings the copies together).
    fn timed_orders(ids: std::ops::Range<i64>) -> Vec<(i32, String)> {
        let mut out = Vec::new();
        for id in ids {
            let line = format!(r#"{{"order_id":{id},"user":"u{}","amount":{},"ts":{}}}"#, (id * 7) % 5, id % 13, T0 + id * 100);
            let p = (id % WINDOWED_PARTITIONS as i64) as i32;
            out.push((p, line.clone()));
            if id % 3 == 0 {
                out.push(((p + 1) % WINDOWED_PARTITIONS, line));
            }
        }
        out
    }

    /// (user, window_start) -> (count, sum).
    type Windows = BTreeMap<(String, i64), (i64, i64)>;

    /// The oracle, from the input alone: the watermark every instance
    /// reaches is the lowest over the partitions of their highest event
    /// time, minus `max_out_of_orderness` and 1 ms; the windows whose last
    /// millisecond is at or below it have fired, each with the count and
    /// sum of its distinct orders. (No record is late: each partition is in
    /// time order, and a later copy of an order is a duplicate anyway.)
    fn windowed_reference(input: &[(i32, String)]) -> Windows {
        let mut highest = BTreeMap::new();
        for (p, l) in input {
            let ts = parse(l)["ts"].as_i64().unwrap();
            let h = highest.entry(*p).or_insert(i64::MIN);
            *h = (*h).max(ts);
        }
        assert_eq!(highest.len(), WINDOWED_PARTITIONS as usize, "every partition has input");
        let watermark = highest.values().min().unwrap() - 1000 - 1;
        let mut seen = std::collections::HashSet::new();
        let mut out = Windows::new();
        for (_, l) in input {
            let o = parse(l);
            let (ts, user) = (o["ts"].as_i64().unwrap(), o["user"].as_str().unwrap().to_string());
            let start = ts - ts.rem_euclid(10_000);
            if start + 10_000 - 1 <= watermark && seen.insert(o["order_id"].as_i64().unwrap()) {
                let e = out.entry((user, start)).or_default();
                e.0 += 1;
                e.1 += o["amount"].as_i64().unwrap();
            }
        }
        out
    }

    /// Every committed window result; a window emitted twice fails.
    fn committed_windows(output: &str) -> Windows {
        let mut out = Windows::new();
        for l in read_committed(broker(), output, Duration::from_secs(30)) {
            let o = parse(&l);
            let key = (o["user"].as_str().unwrap().to_string(), o["window_start"].as_i64().unwrap());
            assert_eq!(o["window_end"].as_i64(), Some(key.1 + 10_000), "{l}");
            let v = (o["n"].as_i64().unwrap(), o["total"].as_i64().unwrap());
            assert!(out.insert(key.clone(), v).is_none(), "window {key:?} committed twice");
        }
        out
    }

    #[track_caller]
    fn wait_for_windows(output: &str, want: &Windows, limit: Duration, instances: &mut Vec<Running>) {
        let start = Instant::now();
        loop {
            let got = committed_windows(output);
            if got == *want {
                return;
            }
            // Never a window beyond what the input lets fire, nor a wrong one.
            for (k, v) in &got {
                assert_eq!(want.get(k), Some(v), "window {k:?} fired wrongly or early; want {want:?}");
            }
            for r in instances.iter_mut() {
                if let Ok(Some(s)) = r.child.try_wait() {
                    panic!("an instance exited ({s}) before the output was complete; output so far {got:?}");
                }
            }
            if start.elapsed() >= limit {
                // What each instance logged, to see which one holds back.
                for (i, mut r) in instances.drain(..).enumerate() {
                    let _ = r.child.kill();
                    let o = r.wait_for(Duration::from_secs(10));
                    let tail: Vec<&str> = o.stderr.lines().rev().take(15).collect();
                    eprintln!("instance {i}:\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
                }
                panic!("windows after {limit:?}:\n{got:?}\nwant:\n{want:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Three instances; the windows that fired are exactly those the input's
    /// watermark allows, then a `kill -9` of a random instance while input
    /// flows and its restart with `--restore latest`, then a last record far
    /// in the future on every partition, which moves every producer's
    /// watermark past every window of the orders: exactly the reference
    /// each time, no window twice.
    #[test]
    fn cluster_of_three_fires_event_time_windows_across_instances_exactly_once() {
        three_instances_in_event_time(false);
    }

    /// The same through a `kill -9` of an instance. On the unpatched test
    /// broker the restarted instance's watermark records reached the
    /// receivers of only some partitions and the windows stalled
    /// (docs/scaling.md, "The test broker").
    #[test]
    fn cluster_of_three_fires_event_time_windows_across_instances_exactly_once_through_a_kill() {
        three_instances_in_event_time(true);
    }

    fn three_instances_in_event_time(kill: bool) {
        let b = broker();
        // A pipeline name of each test's own: the two variants run at once,
        // and one name would share the repartition topics and transactional ids.
        let Setup { input, output, dir, name } = setup(if kill { "wmkill" } else { "wm" }, WINDOWED_PARTITIONS);
        let p = write_pipeline(dir.path(), WINDOWED, &name, &dir.path().join("state").display().to_string(), b, &input, &output);
        let run = |i: u16, restore: bool| {
            let mut w = weir(&["run", &p, "--no-progress", "--instance", &format!("{i}/3")]);
            if restore {
                w = w.arg("--restore").arg("latest");
            }
            w.spawn()
        };
        let mut all = timed_orders(0..300);
        send(&input, &all);
        let mut instances = vec![run(0, false), run(1, false), run(2, false)];
        let first = windowed_reference(&all);
        assert!(first.len() >= 10, "several windows fire before the end: {first:?}");
        wait_for_windows(&output, &first, Duration::from_secs(30), &mut instances);

        // kill -9 of a random instance while input flows (with copies of
        // old orders, late on their partitions and duplicates anyway).
        let killed = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() % 3) as usize;
        if kill {
            eprintln!("killing instance {killed} of 3");
        }
        let more = timed_orders(300..450);
        send(&input, &more);
        all.extend(more);
        if kill {
            instances[killed].child.kill().unwrap();
            instances[killed].child.wait().unwrap();
        }
        let more: Vec<(i32, String)> = timed_orders(450..600).into_iter().chain(timed_orders(0..30)).collect();
        send(&input, &more);
        all.extend(more);
        if kill {
            instances[killed] = run(killed as u16, true);
        }
        wait_for_windows(&output, &windowed_reference(&all), Duration::from_secs(30), &mut instances);

        // The last windows fire on a record an hour later on every partition
        // (its own window never fires: nothing passes it).
        let last: Vec<(i32, String)> = (0..WINDOWED_PARTITIONS)
            .map(|p| (p, format!(r#"{{"order_id":{},"user":"end","amount":0,"ts":{}}}"#, 1_000_000 + p, T0 + 3_600_000)))
            .collect();
        send(&input, &last);
        let mut want = windowed_reference(&all);
        let everything = windowed_reference(&all.iter().cloned().chain(last.iter().cloned()).collect::<Vec<_>>());
        assert!(
            everything.len() > want.len() && everything.keys().all(|(u, _)| u != "end"),
            "the last windows of the orders fire, no other"
        );
        want = everything;
        wait_for_windows(&output, &want, Duration::from_secs(30), &mut instances);
        for r in &instances {
            r.terminate();
        }
        for r in instances {
            let o = r.wait_for(Duration::from_secs(30));
            o.expect_code(0);
        }
    }

    /// Rescale 2 -> 3 -> 2 through stop-with-savepoint sets: every instance
    /// stopped with a savepoint, input arriving while the cluster is down,
    /// the new instances restored from the whole set (each takes its key
    /// groups' state and its partitions' offsets, of the user's topic and of
    /// the repartition topics, from every old savepoint): the
    /// `read_committed` output is exactly the reference. Sets that are
    /// incomplete, mix shapes, or would lose the hand-off (one instance) are
    /// refused with nothing on disk changed.
    #[test]
    fn cluster_rescales_two_to_three_to_two_through_savepoint_sets_exactly_once() {
        let b = broker();
        let Setup { input, output, dir, name } = setup("rescale", 4);
        let p = write_pipeline(dir.path(), PIPELINE, &name, "unused", b, &input, &output);
        let state = |stage: &str| dir.path().join(format!("state-{stage}")).display().to_string();
        let run = |stage: &str, i: u16, n: u16, set: &[String]| {
            let mut w =
                weir(&["run", &p, "--no-progress", "--instance", &format!("{i}/{n}"), "--set", &format!("state.dir={}", state(stage))]);
            for s in set {
                w = w.arg("--restore").arg(s);
            }
            w
        };
        // Stop every instance with a savepoint into `target`, all at once
        // (so that each stops in the middle of its input when input is
        // flowing); the set, by index.
        let stop_all = |stage: &str, instances: Vec<Running>, target: &str| -> Vec<String> {
            let n = instances.len() as u16;
            let triggers: Vec<Running> = (0..n)
                .map(|i| {
                    weir(&["savepoint", "trigger", &p, "--instance", &format!("{i}/{n}"), "--stop", "--target", target])
                        .arg("--set")
                        .arg(format!("state.dir={}", state(stage)))
                        .spawn()
                })
                .collect();
            let mut set = Vec::new();
            for t in triggers {
                let o = t.wait_for(Duration::from_secs(60));
                o.expect_code(0);
                let path = o.stdout.trim().rsplit("Path: ").next().unwrap().to_string();
                assert!(std::path::Path::new(&path).join("_metadata").is_file(), "{}", o.stdout);
                set.push(path);
            }
            for r in instances {
                let o = r.wait_for(Duration::from_secs(60));
                o.expect_code(0);
                assert!(!o.stderr.contains("was not committed before the crash"), "a stop commits its sinks: {}", o.stderr);
            }
            set
        };
        let started = |stage: &str, n: u16, set: &[String], rate: &str| -> Vec<Running> {
            (0..n).map(|i| run(stage, i, n, set).arg("--set").arg(format!("sources.orders.rate_limit={rate}")).spawn()).collect()
        };
        let mut all = orders(0..120);
        send(&input, &all);
        let mut a = started("a", 2, &[], "100000");
        wait_for_output(&output, &reference(&all), Duration::from_secs(60), &mut a);
        let sp1 = stop_all("a", a, &dir.path().join("sp1").display().to_string());
        // Input while the cluster is down, with copies of earlier orders.
        let more: Vec<(i32, String)> = orders(120..200).into_iter().chain(orders(30..60)).collect();
        send(&input, &more);
        all.extend(more);

        // 2 -> 3: every new instance restores from the whole set. Slowed
        // down, so that the stop below comes while input flows: the
        // savepoints then hold staged transactions (committed by the stop),
        // which the next cluster checks under the old instances' ids.
        let mut bb = started("b", 3, &sp1, "20");
        wait_for_output(&output, &reference(&all), Duration::from_secs(60), &mut bb);
        let more: Vec<(i32, String)> = orders(200..260).into_iter().chain(orders(100..130)).collect();
        send(&input, &more);
        all.extend(more);
        let sp2 = stop_all("b", bb, &dir.path().join("sp2").display().to_string());
        let more: Vec<(i32, String)> = orders(260..300).into_iter().chain(orders(0..20)).collect();
        send(&input, &more);
        all.extend(more);

        // Refusals, before anything is read or written.
        let before = listing(dir.path());
        let refused = |set: &[String], n: u16, needle: &str| {
            let o = run("c", 0, n, set).run();
            o.expect_code(2);
            o.expect_stderr_contains("cannot restore the savepoint set");
            o.expect_stderr_contains(needle);
        };
        refused(&sp2[..2], 2, "it is incomplete: no savepoint of instance 2 of 3");
        refused(&[sp2[0].clone(), sp2[0].clone(), sp2[1].clone()], 2, "it holds 2 savepoints of instance 0 of 3");
        refused(&[sp1[0].clone(), sp2[1].clone(), sp2[2].clone()], 2, "it mixes pipelines or cluster shapes");
        refused(&sp2, 1, "cannot be restored into one instance");
        assert_eq!(listing(dir.path()), before, "a refused restore changes nothing on disk");

        // 3 -> 2.
        let mut c = started("c", 2, &sp2, "100000");
        wait_for_output(&output, &reference(&all), Duration::from_secs(60), &mut c);
        for r in &c {
            r.terminate();
        }
        let mut checked = 0;
        for r in c {
            let o = r.wait_for(Duration::from_secs(60));
            o.expect_code(0);
            o.expect_stderr_contains("Rescaling from a savepoint set");
            assert!(
                !o.stderr.contains("was not committed before the crash"),
                "old transactions are checked under their own ids: {}",
                o.stderr
            );
            checked += o.stderr.matches("Transaction of the restored checkpoint was committed before the crash").count();
        }
        assert!(checked > 0, "the set held staged transactions of the stopped instances, checked on restore");
    }

    /// `weir savepoint trigger P --all-instances --stop`: both instances of a
    /// 2-instance cluster checked, then stopped with a savepoint at once while
    /// input flows; the printed set (`Savepoint set: --restore A --restore
    /// B`) restores into 3 instances and the `read_committed` output is
    /// exactly the reference. An instance that cannot be reached (a third
    /// that does not run) refuses the whole command with nothing triggered.
    #[test]
    fn one_command_stops_every_instance_with_a_savepoint_and_its_set_restores_into_three() {
        let b = broker();
        let Setup { input, output, dir, name } = setup("all", 4);
        let template = PIPELINE.to_string() + "cluster: {instances: 2, index: ${WEIR_INSTANCE:0}}\n";
        let p = write_pipeline(dir.path(), &template, &name, &dir.path().join("state-a").display().to_string(), b, &input, &output);
        let mut all = orders(0..120);
        send(&input, &all);
        let mut a: Vec<Running> = (0..2u16)
            .map(|i| weir(&["run", &p, "--no-progress", "--instance", &format!("{i}/2"), "--set", "sources.orders.rate_limit=40"]).spawn())
            .collect();
        wait_for_output(&output, &reference(&all), Duration::from_secs(60), &mut a);

        // A cluster of 3 by the command line: instance 2 has no socket here,
        // so nothing is triggered and both instances keep running.
        let target = dir.path().join("sp").display().to_string();
        let o = weir(&["savepoint", "trigger", &p, "--all-instances", "--stop", "--target", &target, "--set", "cluster.instances=3"]).run();
        o.expect_code(2);
        o.expect_stderr_contains("not every instance of");
        o.expect_stderr_contains("so none was asked");
        o.expect_stderr_contains("instance 2/3: no control socket at");
        assert!(!o.stderr.contains("instance 0/3:") && !o.stderr.contains("instance 1/3:"), "{}", o.stderr);
        assert!(!std::path::Path::new(&target).exists(), "a refused command takes no savepoint");
        for r in a.iter_mut() {
            assert!(r.child.try_wait().unwrap().is_none(), "a refused command stops no instance");
        }

        // While input flows (rate-limited), stop both with one command.
        let more: Vec<(i32, String)> = orders(120..220).into_iter().chain(orders(40..70)).collect();
        send(&input, &more);
        all.extend(more);
        let o = weir(&["savepoint", "trigger", &p, "--all-instances", "--stop", "--target", &target]).run();
        o.expect_code(0);
        let lines: Vec<&str> = o.stdout.lines().collect();
        assert_eq!(lines.len(), 3, "one line per instance and the set: {}", o.stdout);
        let mut paths = Vec::new();
        for (i, l) in lines[..2].iter().enumerate() {
            let path = l.strip_prefix(&format!("Instance {i}/2: Savepoint completed. Path: ")).unwrap_or_else(|| panic!("{l}"));
            assert!(std::path::Path::new(path).join("_metadata").is_file(), "{l}");
            paths.push(path.to_string());
        }
        let set: Vec<String> =
            lines[2].strip_prefix("Savepoint set: --restore ").expect(lines[2]).split(" --restore ").map(str::to_string).collect();
        assert_eq!(set, paths, "the set is every instance's savepoint");
        for r in a {
            let o = r.wait_for(Duration::from_secs(60));
            o.expect_code(0);
        }
        let partial = last_values(&output);
        assert_ne!(partial, reference(&all), "the stop came after all input was read; nothing is left for the new cluster");

        // Input while the cluster is down, then 3 instances from the printed set.
        let more: Vec<(i32, String)> = orders(220..260).into_iter().chain(orders(0..20)).collect();
        send(&input, &more);
        all.extend(more);
        let state_b = format!("state.dir={}", dir.path().join("state-b").display());
        let mut c: Vec<Running> = (0..3u16)
            .map(|i| {
                let mut w = weir(&["run", &p, "--no-progress", "--instance", &format!("{i}/3"), "--set", &state_b]);
                for s in &set {
                    w = w.arg("--restore").arg(s);
                }
                w.spawn()
            })
            .collect();
        wait_for_output(&output, &reference(&all), Duration::from_secs(90), &mut c);
        for r in &c {
            r.terminate();
        }
        for r in c {
            let o = r.wait_for(Duration::from_secs(60));
            o.expect_code(0);
            o.expect_stderr_contains("Rescaling from a savepoint set");
        }
    }

    /// `--all-instances --stop` when one instance's savepoint fails (its
    /// snapshot writes fail): the command prints the savepoint taken, names
    /// the failed instance, exits 1 and prints no set. Going back works:
    /// every instance restarted with `--restore latest` (the stopped one at
    /// its savepoint) gives exactly the reference output.
    #[test]
    fn one_failed_savepoint_of_all_instances_is_named_and_the_cluster_goes_back_exactly_once() {
        let b = broker();
        let Setup { input, output, dir, name } = setup("allfail", 4);
        let state_a = dir.path().join("state-a");
        let template = PIPELINE.to_string() + "cluster: {instances: 2, index: ${WEIR_INSTANCE:0}}\n";
        let p = write_pipeline(dir.path(), &template, &name, &state_a.display().to_string(), b, &input, &output);
        let mut all = orders(0..160);
        send(&input, &all);
        let run = |i: u16| weir(&["run", &p, "--no-progress", "--instance", &format!("{i}/2"), "--set", "sources.orders.rate_limit=40"]);
        let sockets = |i: u16| state_a.join(format!("instance-{i}/control.sock"));
        let first = run(0).spawn();
        // Instance 1 never completes a checkpoint (nor its savepoint).
        let mut failing = run(1).env("WEIR_FAULTS", "state_write_fail=1").arg("--set").arg("checkpoint.tolerable_failures=10000").spawn();
        let up = super::super::util::wait_until(Duration::from_secs(30), || sockets(0).exists() && sockets(1).exists());
        assert!(up, "the instances did not open their control sockets");
        let target = dir.path().join("sp").display().to_string();
        let o = weir(&["savepoint", "trigger", &p, "--all-instances", "--stop", "--target", &target, "--timeout", "30s"]).run();
        o.expect_code(1);
        let sp0 = o
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("Instance 0/2: Savepoint completed. Path: "))
            .unwrap_or_else(|| panic!("stdout: {}\nstderr: {}", o.stdout, o.stderr))
            .to_string();
        assert!(!o.stdout.contains("Savepoint set:"), "no set is claimed: {}", o.stdout);
        o.expect_stderr_contains("Instance 1/2: savepoint failed: ");
        o.expect_stderr_contains("the savepoint set of 2 instances is incomplete: instance 1/2 failed");
        o.expect_stderr_contains(&format!("`weir savepoint trigger {p} --instance 1/2 --stop`"));
        first.wait_for(Duration::from_secs(60)).expect_code(0);
        // It goes on retrying its final checkpoint: a crash, as far as it goes.
        failing.child.kill().unwrap();
        failing.child.wait().unwrap();

        // Going back, as the message says: every instance restarted with
        // --restore latest (instance 0 resumes at its stop-with-savepoint),
        // with input that came meanwhile: exactly the reference output.
        let more: Vec<(i32, String)> = orders(160..200).into_iter().chain(orders(10..30)).collect();
        send(&input, &more);
        all.extend(more);
        let mut back: Vec<Running> = (0..2u16).map(|i| run(i).arg("--restore").arg("latest").spawn()).collect();
        wait_for_output(&output, &reference(&all), Duration::from_secs(90), &mut back);
        for r in &back {
            r.terminate();
        }
        let resumed = back.into_iter().map(|r| r.wait_for(Duration::from_secs(60))).collect::<Vec<_>>();
        for o in &resumed {
            o.expect_code(0);
        }
        let id: u64 = sp0.rsplit('-').next().unwrap().parse().unwrap();
        assert_eq!(
            super::super::ckpt::restored_from(&resumed[0].stderr),
            Some(id),
            "instance 0 resumes at its savepoint: {}",
            resumed[0].stderr
        );
    }

    /// One hash edge: Kafka -> 10 s tumbling count and sum per user (24
    /// users, so every key group has some) -> Kafka exactly-once, event time
    /// from `ts`: `WINDOWED` without its dedup. The windows fire where the
    /// records of the repartition topic arrive, so a watermark counted too
    /// early shows at once.
    fn windowed_one_edge() -> String {
        let dedup = "  - {name: unique, type: dedup, input: orders, key: [order_id]}\n";
        assert!(WINDOWED.contains(dedup), "WINDOWED has its dedup");
        WINDOWED.replace(dedup, "").replace("input: unique", "input: orders")
    }

    /// Orders `ids` as (partition, line): order `id` on partition `id % 6`,
    /// 100 ms apart in event time, in time order on each partition, once.
    fn spread_orders(ids: std::ops::Range<i64>) -> Vec<(i32, String)> {
        ids.map(|id| {
            let p = (id % WINDOWED_PARTITIONS as i64) as i32;
            (p, format!(r#"{{"order_id":{id},"user":"u{}","amount":{},"ts":{}}}"#, id % 24, id % 13, T0 + id * 100))
        })
        .collect()
    }

    /// Regression (adversarial review): rescale 2 -> 3 through a
    /// stop-with-savepoint set, event time, no kill. Instance 0 stops
    /// first; instance 1 goes on reading its partitions and writes its
    /// watermark (T0 + 88.5 s) into every partition of the repartition
    /// topic, also those of instance 0, which nobody reads until the
    /// rescale. Partition 4 (instance 0's) gets its records only while the
    /// cluster is down, and the new instance that reads it (1 of 3) is slow.
    /// The new receivers must not take old instance 1's waiting watermark
    /// for new producer 1's (the same number): windows would fire before
    /// partition 4's records arrive and drop them as late. The committed
    /// windows are exactly those the input lets fire, none early or wrong.
    #[test]
    fn a_rescale_does_not_count_an_old_producers_watermark_for_a_new_one() {
        use super::super::metrics::{free_port, scrape, value};
        let b = broker();
        let Setup { input, output, dir, name } = setup("wmgen", WINDOWED_PARTITIONS);
        let p = write_pipeline(dir.path(), &windowed_one_edge(), &name, "unused", b, &input, &output);
        let state = |stage: &str| format!("state.dir={}", dir.path().join(format!("state-{stage}")).display());
        let target = dir.path().join("sp").display().to_string();
        let stop = |i: u16| -> String {
            let o =
                weir(&["savepoint", "trigger", &p, "--instance", &format!("{i}/2"), "--stop", "--target", &target, "--set", &state("a")])
                    .run();
            o.expect_code(0);
            o.stdout.trim().rsplit("Path: ").next().unwrap().to_string()
        };
        let mut all = spread_orders(0..300);
        send(&input, &all);
        let port = free_port();
        let mut a: Vec<Running> = (0..2u16)
            .map(|i| {
                let mut w = weir(&["run", &p, "--no-progress", "--instance", &format!("{i}/2"), "--set", &state("a")]);
                if i == 1 {
                    w = w.arg("--metrics-addr").arg(format!("127.0.0.1:{port}"));
                }
                w.spawn()
            })
            .collect();
        let first = windowed_reference(&all);
        assert!(first.len() >= 24, "windows fire before the rescale: {first:?}");
        wait_for_windows(&output, &first, Duration::from_secs(30), &mut a);

        // Instance 0 stops; instance 1 reads on (all but partition 4, which
        // is instance 0's anyway) until its watermark is past T0 + 88.4 s.
        let sp0 = stop(0);
        let zero = a.remove(0).wait_for(Duration::from_secs(30));
        zero.expect_code(0);
        let (later, slow): (Vec<_>, Vec<_>) = spread_orders(300..900).into_iter().partition(|(q, _)| *q != 4);
        send(&input, &later);
        let passed = (T0 + 88_400) as f64 / 1000.0;
        let start = Instant::now();
        loop {
            let wm = scrape(port).and_then(|m| value(&m, "weir_operator_output_watermark_seconds", &[r#"operator="orders""#]));
            if wm.is_some_and(|w| w >= passed) {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "instance 1's watermark stays at {wm:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
        // Its stop commits that watermark into the topic, with its savepoint.
        let sp1 = stop(1);
        let one = a.remove(0).wait_for(Duration::from_secs(30));
        one.expect_code(0);
        // Both old instances computed one generation, each alone.
        let old = generation_of(&zero.stderr);
        assert_eq!(generation_of(&one.stderr), old);
        all.extend(later);
        // Partition 4's records come while the cluster is down.
        send(&input, &slow);
        all.extend(slow);

        // 3 instances from the set; instance 1 (partitions 1 and 4) slowly.
        let mut c: Vec<Running> = (0..3u16)
            .map(|i| {
                let mut w = weir(&["run", &p, "--no-progress", "--instance", &format!("{i}/3"), "--set", &state("c")]);
                w = w.arg("--restore").arg(&sp0).arg("--restore").arg(&sp1);
                if i == 1 {
                    w = w.arg("--set").arg("sources.orders.rate_limit=10");
                }
                w.spawn()
            })
            .collect();
        let want = windowed_reference(&all);
        assert!(want.len() > first.len() + 100, "the windows up to T0 + 80 s fire: {}", want.len());
        wait_for_windows(&output, &want, Duration::from_secs(40), &mut c);
        // The rest fires on a record an hour later on every partition.
        let last: Vec<(i32, String)> = (0..WINDOWED_PARTITIONS)
            .map(|p| (p, format!(r#"{{"order_id":{},"user":"end","amount":0,"ts":{}}}"#, 1_000_000 + p, T0 + 3_600_000)))
            .collect();
        send(&input, &last);
        all.extend(last);
        wait_for_windows(&output, &windowed_reference(&all), Duration::from_secs(30), &mut c);
        for r in &c {
            r.terminate();
        }
        let mut new = Vec::new();
        for r in c {
            let o = r.wait_for(Duration::from_secs(30));
            o.expect_code(0);
            o.expect_stderr_contains("Rescaling from a savepoint set");
            new.push(generation_of(&o.stderr));
        }
        assert!(new.iter().all(|g| *g == new[0]) && new[0] != old, "one new generation for all: {new:?}, old {old}");
        // A restart from its own checkpoint is the same producer: the same generation.
        let o = weir(&["run", &p, "--no-progress", "--instance", "2/3", "--set", &state("c"), "--restore", "latest"]).spawn();
        let start = Instant::now();
        while weir(&["status", &p, "--instance", "2/3", "--set", &state("c")]).run().code() != Some(0) {
            assert!(start.elapsed() < Duration::from_secs(30), "the restarted instance never answered");
            std::thread::sleep(Duration::from_millis(200));
        }
        o.terminate();
        let o = o.wait_for(Duration::from_secs(30));
        o.expect_code(0);
        assert_eq!(generation_of(&o.stderr), new[0]);
    }

    /// The generation an instance logged at its start.
    fn generation_of(stderr: &str) -> String {
        let line = stderr.lines().find(|l| l.contains("Cluster generation of the repartition producers")).expect(stderr);
        let at = line.find("generation=").expect(line) + "generation=".len();
        line[at..].chars().take_while(char::is_ascii_hexdigit).collect()
    }

    /// Every path below `dir` with its size.
    fn listing(dir: &std::path::Path) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let m = e.metadata().unwrap();
                if m.is_dir() {
                    todo.push(e.path());
                }
                out.push((e.path().display().to_string(), if m.is_dir() { 0 } else { m.len() }));
            }
        }
        out.sort();
        out
    }
}

/// deploy/kubernetes/ validates strictly against the Kubernetes API schema
/// (scripts/k8s-validate.sh), and the validator does refuse a manifest
/// with a field of the wrong type or an unknown field.
#[test]
fn kubernetes_manifests_validate_against_the_kubernetes_schema() {
    let script = super::util::repo().join("scripts/k8s-validate.sh");
    let run =
        |files: &[std::path::PathBuf]| std::process::Command::new(&script).args(files).output().expect("scripts/k8s-validate.sh runs");
    let dir = super::util::repo().join("deploy/kubernetes");
    let mut files: Vec<std::path::PathBuf> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "yaml")).collect();
    files.sort();
    assert_eq!(files.len(), 5, "{files:?}");
    let o = run(&files);
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{text}");
    assert_eq!(text.matches(" passed for resource ").count(), 5, "{text}");
    // The same StatefulSet with replicas as a string, and with a field
    // Kubernetes does not have: both refused, by name.
    let t = tmp();
    let sts = std::fs::read_to_string(dir.join("statefulset.yaml")).unwrap();
    for (what, broken, reason) in [
        ("type", sts.replacen("replicas: ", "replicas: \"x\" #", 1), "spec.replicas"),
        ("unknown", sts.replacen("serviceName:", "serviceNames:", 1), "serviceNames"),
    ] {
        assert_ne!(broken, sts, "{what}: the edit applies");
        let f = t.path().join(format!("{what}.yaml"));
        std::fs::write(&f, broken).unwrap();
        let o = run(&[f]);
        let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{what}: {text}");
        assert!(text.contains(reason), "{what}: {text}");
    }
}

/// deploy/kubernetes/: the fields weir depends on agree with each other and
/// with the pipeline in the ConfigMap, which validates as every instance.
#[test]
fn kubernetes_manifests_carry_what_weir_depends_on() {
    use serde_yaml::Value;
    let dir = super::util::repo().join("deploy/kubernetes");
    let load = |f: &str| -> Value { serde_yaml::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap() };
    let (sts, svc, cm, secret, pdb) =
        (load("statefulset.yaml"), load("service.yaml"), load("configmap.yaml"), load("secret.yaml"), load("pdb.yaml"));
    for (doc, kind) in [(&sts, "StatefulSet"), (&svc, "Service"), (&cm, "ConfigMap"), (&secret, "Secret"), (&pdb, "PodDisruptionBudget")] {
        assert_eq!(doc["kind"].as_str(), Some(kind));
    }
    let spec = &sts["spec"];
    let pod = &spec["template"];
    let labels = &pod["metadata"]["labels"];
    assert_eq!(&spec["selector"]["matchLabels"], labels, "the StatefulSet selects its own pods");
    assert_eq!(&svc["spec"]["selector"], labels);
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(svc["spec"]["clusterIP"].as_str(), Some("None"), "a headless Service");
    assert_eq!(spec["serviceName"], svc["metadata"]["name"]);
    assert_eq!(pdb["spec"]["maxUnavailable"].as_i64(), Some(1));
    let c = &pod["spec"]["containers"][0];
    // The ordinal is the instance index.
    let env = c["env"].as_sequence().unwrap();
    let instance = env.iter().find(|e| e["name"].as_str() == Some("WEIR_INSTANCE")).expect("WEIR_INSTANCE");
    assert_eq!(instance["valueFrom"]["fieldRef"]["fieldPath"].as_str(), Some("metadata.labels['apps.kubernetes.io/pod-index']"));
    assert_eq!(c["envFrom"][0]["secretRef"]["name"], secret["metadata"]["name"]);
    for k in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        assert!(secret["stringData"][k].is_string(), "the Secret has {k}");
    }
    let args: Vec<&str> = c["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(&args[..1], ["run"]);
    assert!(args.windows(2).any(|w| w == ["--restore", "latest"]), "every start resumes its instance: {args:?}");
    // The pipeline file is the ConfigMap's, mounted where args name it.
    let mount = c["volumeMounts"].as_sequence().unwrap().iter().find(|m| m["name"].as_str() == Some("pipeline")).unwrap();
    let vol = pod["spec"]["volumes"].as_sequence().unwrap().iter().find(|v| v["name"].as_str() == Some("pipeline")).unwrap();
    assert_eq!(vol["configMap"]["name"], cm["metadata"]["name"]);
    let key = args[1].strip_prefix(&format!("{}/", mount["mountPath"].as_str().unwrap())).expect("pipeline under the mount");
    let text = cm["data"][key].as_str().expect("the pipeline in the ConfigMap");
    let pipeline: Value = serde_yaml::from_str(text).unwrap();
    // replicas = instances, and the metrics port is the annotated one.
    assert_eq!(spec["replicas"].as_u64(), pipeline["cluster"]["instances"].as_u64(), "replicas must equal cluster.instances");
    assert_eq!(pipeline["cluster"]["index"].as_str(), Some("${WEIR_INSTANCE}"));
    let port = pipeline["metrics"]["address"].as_str().unwrap().rsplit(':').next().unwrap().to_string();
    assert_eq!(pod["metadata"]["annotations"]["prometheus.io/scrape"].as_str(), Some("true"));
    assert_eq!(pod["metadata"]["annotations"]["prometheus.io/port"].as_str(), Some(port.as_str()));
    assert_eq!(c["ports"][0]["containerPort"].as_u64().map(|p| p.to_string()), Some(port));
    assert!(pipeline["state"]["dir"].as_str().unwrap().starts_with("/var/lib/weir"), "state on the volume");
    // SIGTERM stops with a savepoint, kept where a new pod finds it, within
    // the grace period (above the checkpoint timeout, 60 s by default).
    assert_eq!(pipeline["savepoint"]["on_sigterm"].as_bool(), Some(true), "stop-with-savepoint on SIGTERM");
    assert!(pipeline["savepoint"]["dir"].as_str().unwrap().starts_with("s3://"), "savepoints outlive the pod's volume");
    let timeout = pipeline["checkpoint"]["timeout"].as_str().map_or(60, |t| humantime::parse_duration(t).unwrap().as_secs());
    let grace = pod["spec"]["terminationGracePeriodSeconds"].as_u64().expect("terminationGracePeriodSeconds");
    assert!(
        grace >= timeout + 60,
        "grace period {grace} s leaves too little beyond checkpoint.timeout {timeout} s for the commit and upload"
    );
    // Every ordinal's pipeline is valid.
    let t = tmp();
    let file = t.path().join("pipeline.yaml");
    std::fs::write(&file, text).unwrap();
    for i in 0..spec["replicas"].as_u64().unwrap() {
        let o = weir(&["validate", &file.display().to_string()]).env("WEIR_INSTANCE", i.to_string()).run();
        o.expect_code(0);
    }
}

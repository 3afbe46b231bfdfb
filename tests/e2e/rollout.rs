//! The Kubernetes upgrade path (issue 27.4), without Kubernetes: the pods of
//! deploy/kubernetes/ as processes on this machine, each started with the
//! StatefulSet's own `args` and the ConfigMap's pipeline (endpoints,
//! names and the shape scaled for a test machine), rolled as a
//! StatefulSet's RollingUpdate rolls them — the highest ordinal first, one
//! at a time: SIGTERM, the pod's exit within the grace period, the new pod
//! started and Ready before the next — while input flows.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_yaml::Value;

use super::cluster::kafka::{distinct_per_user, send};
use super::kafka::{broker, create_topic, read_committed, topic};
use super::metrics::free_port;
use super::records::parse;
use super::util::{repo, tmp, wait_until, weir, Running};

const PARTITIONS: i32 = 4;

/// The StatefulSet's container args, its grace period, and the ConfigMap's
/// pipeline text.
fn manifests() -> (Vec<String>, u64, Value) {
    let dir = repo().join("deploy/kubernetes");
    let load = |f: &str| -> Value { serde_yaml::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap() };
    let (sts, cm) = (load("statefulset.yaml"), load("configmap.yaml"));
    let pod = &sts["spec"]["template"]["spec"];
    let args = pod["containers"][0]["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let text = cm["data"]["pipeline.yaml"].as_str().unwrap();
    (args, grace, serde_yaml::from_str(text).unwrap())
}

/// Orders `ids` as (partition, line); every third one delivered twice, the
/// copy to another partition (the dedup by `order_id` removes it).
fn orders(ids: std::ops::Range<i64>) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for id in ids {
        let line = format!(r#"{{"order_id":{id},"user":"u{}","amount":{}}}"#, (id * 7) % 9, id % 13);
        let p = (id % i64::from(PARTITIONS)) as i32;
        if id % 3 == 0 {
            out.push(((p + 1) % PARTITIONS, line.clone()));
        }
        out.push((p, line));
    }
    out
}

/// The oracle, from the input alone: per user, the count and sum of its
/// distinct orders.
fn reference(input: &[(i32, String)]) -> BTreeMap<String, (i64, i64)> {
    distinct_per_user(input, "order_id")
}

/// Per user, every committed (count, sum) in commit order.
fn committed(output: &str) -> BTreeMap<String, Vec<(i64, i64)>> {
    let mut out: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for l in read_committed(broker(), output, Duration::from_secs(30)) {
        let o = parse(&l);
        out.entry(o["user"].as_str().unwrap().to_string()).or_default().push((o["n"].as_i64().unwrap(), o["total"].as_i64().unwrap()));
    }
    out
}

/// A pod: its ordinal, its metrics port, and the running process.
struct Pod {
    ordinal: usize,
    port: u16,
    run: Running,
}

fn start(args: &[String], ordinal: usize, port: u16) -> Pod {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = weir(&args).env("WEIR_INSTANCE", ordinal.to_string()).env("WEIR_METRICS_PORT", port.to_string()).spawn();
    Pod { ordinal, port, run }
}

/// What the StatefulSet waits for before it rolls the next pod.
#[track_caller]
fn wait_ready(pod: &mut Pod) {
    let ready = wait_until(Duration::from_secs(60), || {
        if let Ok(Some(s)) = pod.run.child.try_wait() {
            panic!("pod {} exited ({s}) before it was ready", pod.ordinal);
        }
        ready(pod.port)
    });
    assert!(ready, "pod {} not ready within 60 s", pod.ordinal);
}

fn ready(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(s, "GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.starts_with("HTTP/1.1 200 ")
}

/// Two rollouts of a 2-pod StatefulSet under the manifests' command and
/// `savepoint.on_sigterm`, with orders flowing the whole time; in the
/// first rollout pod 1, in the second pod 0 comes back without its
/// volume (its state directory deleted: only S3 has its checkpoints). The
/// output is exactly the input's counts, no committed update repeats or
/// goes back, every SIGTERM took a savepoint, and `on_sigterm_keep: 1`
/// left one per pod in the savepoint prefix.
#[test]
fn a_rolling_restart_of_the_statefulset_while_input_flows_is_exact_and_keeps_one_savepoint_per_pod() {
    if std::env::var_os("AWS_ENDPOINT_URL").is_none() && std::env::var_os("WEIR_S3_ENDPOINT").is_none() {
        eprintln!("skipped: no S3 server (set AWS_ENDPOINT_URL and the AWS credentials, or run scripts/test.sh)");
        return;
    }
    if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
        std::env::set_var("AWS_ENDPOINT_URL", std::env::var_os("WEIR_S3_ENDPOINT").unwrap());
    }
    let (mut args, grace, mut pipeline) = manifests();
    assert_eq!(pipeline["savepoint"]["on_sigterm"].as_bool(), Some(true), "the manifests stop pods with a savepoint");
    let dir = tmp();
    let (input, output) = (topic("rollout-in"), topic("rollout-out"));
    create_topic(broker(), &input, PARTITIONS);
    let bucket = std::env::var("WEIR_S3_BUCKET").unwrap_or_else(|_| "weir".into());
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let prefix = format!("s3://{bucket}/e2e/rollout-{}-{nanos}", std::process::id());
    let state = dir.path().join("var-lib-weir");
    // The ConfigMap's pipeline with this machine's endpoints and a shape
    // for two pods on two cores; the command, the state backend, the
    // checkpoint interval and the SIGTERM settings stay as deployed.
    let b = Value::from(broker());
    pipeline["name"] = Value::from(format!("rollout-{}", std::process::id()));
    pipeline["max_parallelism"] = Value::from(12);
    pipeline["state"]["dir"] = Value::from(state.display().to_string());
    pipeline["checkpoint"]["storage"] = Value::from(format!("{prefix}/checkpoints"));
    pipeline["savepoint"]["dir"] = Value::from(format!("{prefix}/savepoints"));
    pipeline["savepoint"]["on_sigterm_keep"] = Value::from(1);
    pipeline["metrics"]["address"] = Value::from("127.0.0.1:${WEIR_METRICS_PORT}");
    pipeline["cluster"]["instances"] = Value::from(2);
    pipeline["cluster"]["brokers"] = b.clone();
    pipeline["sources"][0]["brokers"] = b.clone();
    pipeline["sources"][0]["topics"] = Value::from(vec![input.clone()]);
    pipeline["sinks"][0]["brokers"] = b;
    pipeline["sinks"][0]["topic"] = Value::from(output.clone());
    let file = dir.path().join("pipeline.yaml");
    std::fs::write(&file, serde_yaml::to_string(&pipeline).unwrap()).unwrap();
    let mounted = args.iter().position(|a| a.ends_with("pipeline.yaml")).expect("the pipeline in args");
    args[mounted] = file.display().to_string();

    // Orders flow from before the first pod starts until after the last rollout.
    let sent = Arc::new(Mutex::new(Vec::new()));
    let flowing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (sent, flowing, input) = (sent.clone(), flowing.clone(), input.clone());
        std::thread::spawn(move || {
            let mut next = 0i64;
            while flowing.load(Ordering::Relaxed) {
                // Every tenth batch repeats older orders too.
                let mut batch = orders(next..next + 30);
                if next % 300 == 0 && next > 0 {
                    batch.extend(orders(next - 200..next - 170));
                }
                send(&input, &batch);
                sent.lock().unwrap().extend(batch);
                next += 30;
                std::thread::sleep(Duration::from_millis(150));
            }
        })
    };

    let ports = [free_port(), free_port()];
    let mut pods: Vec<Pod> = (0..2).map(|i| start(&args, i, ports[i])).collect();
    for p in &mut pods {
        wait_ready(p);
    }
    let mut sigterm_savepoints = [0usize; 2];
    for (rollout, without_volume) in [(1, 1usize), (2, 0usize)] {
        // RollingUpdate: from the highest ordinal down, one pod at a time.
        for ordinal in [1usize, 0] {
            let old = pods.remove(ordinal);
            old.run.terminate();
            let t = Instant::now();
            let o = old.run.wait_for(Duration::from_secs(grace));
            o.expect_code(0);
            assert!(t.elapsed() < Duration::from_secs(grace), "pod {ordinal} outlived its grace period");
            o.expect_stderr_contains("Stopped with a savepoint on SIGTERM. Path: ");
            sigterm_savepoints[ordinal] += 1;
            if sigterm_savepoints[ordinal] > 1 {
                o.expect_stderr_contains("Disposed an older savepoint taken on SIGTERM");
            }
            if ordinal == without_volume {
                // Rescheduled on another node: a new, empty volume.
                std::fs::remove_dir_all(state.join(format!("instance-{ordinal}"))).unwrap();
            }
            pods.insert(ordinal, start(&args, ordinal, ports[ordinal]));
            wait_ready(&mut pods[ordinal]);
            eprintln!("rollout {rollout}: pod {ordinal} replaced in {:?}", t.elapsed());
        }
    }
    // Some input after the last rollout, then it stops.
    std::thread::sleep(Duration::from_secs(2));
    flowing.store(false, Ordering::Relaxed);
    producer.join().unwrap();
    let want = reference(&sent.lock().unwrap());

    let start = Instant::now();
    let got = loop {
        let got = committed(&output);
        let last: BTreeMap<String, (i64, i64)> = got.iter().map(|(u, v)| (u.clone(), *v.last().unwrap())).collect();
        if last == want {
            break got;
        }
        for p in &mut pods {
            if let Ok(Some(s)) = p.run.child.try_wait() {
                panic!("pod {} exited ({s}) before the output was complete: {last:?}", p.ordinal);
            }
        }
        assert!(start.elapsed() < Duration::from_secs(120), "output after 120 s:\n{last:?}\nwant:\n{want:?}");
        std::thread::sleep(Duration::from_millis(500));
    };
    // A committed update repeated or undone is a doubled or a lost record
    // that a later one hid.
    for (user, updates) in &got {
        assert!(updates.windows(2).all(|w| w[0].0 < w[1].0), "{user}: counts must only rise in commit order: {updates:?}");
    }
    for p in &pods {
        p.run.terminate();
    }
    for p in pods {
        p.run.wait_for(Duration::from_secs(grace)).expect_code(0);
    }
    // Each pod stopped three times with a savepoint; one of each is left.
    use weir::checkpoint::storage::Storage;
    let store = weir::checkpoint::remote::ObjectStorage::open(&format!("{prefix}/savepoints"), &[]).unwrap();
    for i in 0..2 {
        let keys: Vec<String> = store.list(&format!("instance-{i}/")).unwrap().into_iter().map(|o| o.key).collect();
        let savepoints = keys.iter().filter(|k| k.ends_with("/_metadata")).count();
        assert_eq!(savepoints, 1, "instance {i}: on_sigterm_keep: 1 keeps one savepoint: {keys:?}");
        let claims = keys.iter().filter(|k| k.ends_with(".claim")).count();
        assert_eq!(claims, 1, "a disposed savepoint leaves no claim behind: {keys:?}");
    }
}

//! The web page (`GET /` on the metrics address) in a real browser:
//! headless Chromium (Debian's `chromium`, or the one `WEIR_CHROMIUM`
//! names) loads it from a running pipeline, runs its script and hands back
//! the DOM it drew (`--dump-dom`). Without a Chromium the test says so and
//! passes without running. Screenshots go to `target/web-screenshots/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::metrics::{free_port, get, scrape, value};
use super::util::{repo, tmp, weir};

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("WEIR_CHROMIUM").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    path.exists().then_some(path)
}

fn headless(browser: &Path) -> Command {
    let mut c = Command::new(browser);
    // As root (CI containers) Chromium needs --no-sandbox.
    c.args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=1500"]);
    c
}

/// The DOM of `url` once the page's script drew it.
fn dom(browser: &Path, url: &str) -> String {
    let o = headless(browser).arg("--dump-dom").arg(url).output().expect("running chromium");
    assert!(o.status.success(), "chromium --dump-dom {url}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn screenshot(browser: &Path, url: &str, name: &str) {
    let dir = repo().join("target/web-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.png"));
    let o = headless(browser).arg("--window-size=1400,1000").arg(format!("--screenshot={}", file.display())).arg(url).output().unwrap();
    assert!(o.status.success() && file.exists(), "chromium --screenshot: {}", String::from_utf8_lossy(&o.stderr));
}

/// The DOM until `done` holds for it, or the last one tried after `limit`.
fn dom_until(browser: &Path, url: &str, limit: Duration, done: impl Fn(&str) -> bool) -> (bool, String) {
    let start = Instant::now();
    loop {
        let d = dom(browser, url);
        if done(&d) || start.elapsed() > limit {
            return (done(&d), d);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `N` in `(N to a dead letter)` of the node `name`'s tooltip.
fn dead_lettered(dom: &str, name: &str) -> Option<u64> {
    let at = dom.find(&format!(r#"data-name="{name}""#))?;
    let rest = &dom[at..];
    let end = rest.find(" to a dead letter)")?;
    rest[..end].rsplit('(').next()?.parse().ok()
}

/// A pipeline with bad input going to a dead letter (`orders`), a subtask
/// of `unique` stalled past the checkpoint timeout (a failed checkpoint,
/// its input held back), and a second chain (`gen` → `slow`): loaded in
/// Chromium, the page draws every operator and edge, colors the stalled
/// operator busy and its input backpressured, lists the failed checkpoint
/// with its reason, and counts dead letters as the Prometheus series do.
#[test]
fn the_page_draws_the_running_pipeline_in_a_real_browser() {
    let Some(browser) = chromium() else {
        eprintln!("web page test: skipped: no Chromium (apt-get install chromium, or set WEIR_CHROMIUM)");
        return;
    };
    let dir = tmp();
    let pipeline = dir.path().join("web.yaml");
    let input = repo().join("testdata/inputs/orders_bad.jsonl");
    std::fs::write(
        &pipeline,
        format!(
            r#"name: web
parallelism: 2
state: {{dir: {state}}}
checkpoint: {{interval: 300ms, timeout: 1s}}
sources:
  - name: orders
    type: file
    path: {input}
    rate_limit: 30
    on_error: dead_letter
    dead_letter: {dead}
  - name: gen
    type: datagen
    seed: 7
    rate_limit: 2000
    fields: {{n: {{kind: sequence}}}}
operators:
  - {{name: unique, type: dedup, input: orders, key: [order_id]}}
sinks:
  - {{name: out, type: blackhole, input: unique}}
  - {{name: slow, type: blackhole, input: gen}}
"#,
            state = dir.path().join("state").display(),
            input = input.display(),
            dead = dir.path().join("rejected.jsonl").display(),
        ),
    )
    .unwrap();
    let port = free_port();
    let mut run = weir(&["run", pipeline.to_str().unwrap(), "--metrics-addr", &format!("127.0.0.1:{port}")])
        .env("WEIR_FAULTS", "stall=unique:0:2500ms")
        .spawn();
    assert!(run.wait_log("Pipeline started.", Duration::from_secs(60)), "{}", run.stderr());
    let url = format!("http://127.0.0.1:{port}/");

    // The page and its script come from weir itself, with a policy that keeps them so.
    let (code, html) = get(port, "/").expect("GET /");
    assert_eq!(code, 200);
    assert!(html.contains("<script src=\"app.js\"></script>"), "{html}");
    assert_eq!(get(port, "/app.js").map(|(c, _)| c), Some(200));

    let (drawn, first) = dom_until(&browser, &url, Duration::from_secs(30), |d| {
        d.contains("data-renders=")
            && d.contains(r#"data-status="failed""#)
            && d.contains(r#"data-name="orders" data-state="backpressured""#)
            && d.contains(r#"data-name="unique" data-state="busy""#)
    });
    screenshot(&browser, &url, "running");
    assert!(drawn, "no failed checkpoint or no backpressured node drawn:\n{first}");
    for node in ["orders", "gen", "unique", "out", "slow"] {
        assert!(
            first.contains(&format!(r#"class="node" data-name="{node}""#)) || first.contains(&format!(r#"data-name="{node}" data-state"#)),
            "node {node} missing:\n{first}"
        );
    }
    for (from, to) in [("orders", "unique"), ("unique", "out"), ("gen", "slow")] {
        assert!(first.contains(&format!(r#"data-from="{from}" data-to="{to}""#)), "edge {from} → {to} missing:\n{first}");
    }
    assert_eq!(first.matches(r#"class="edge""#).count(), 3, "no edge of its own drawn:\n{first}");
    // The stalled subtask is busy, and holds its input back.
    assert!(first.contains(r#"data-name="orders" data-state="backpressured""#), "orders is not shown backpressured:\n{first}");
    assert!(first.contains(r#"data-name="unique" data-state="busy""#), "unique is not shown busy:\n{first}");
    // The stalled subtask timed out the first checkpoint: failed, with its reason.
    let failed = &first[first.find(r#"data-status="failed""#).unwrap()..];
    let row = &failed[..failed.find("</tr>").unwrap()];
    assert!(row.contains("timeout"), "the failed checkpoint's reason: {row}");

    // The dead letter count moves, and the page says what Prometheus says.
    let early = dead_lettered(&first, "orders").expect("the dead letter count of orders");
    let (moved, later) = dom_until(&browser, &url, Duration::from_secs(30), |d| {
        dead_lettered(d, "orders").is_some_and(|n| n > early) && d.contains(r#"data-status="completed""#)
    });
    assert!(moved, "the dead letter count stayed {early}, or no checkpoint completed after the stall:\n{later}");
    let text = scrape(port).expect("/metrics");
    let shown = dead_lettered(&later, "orders").unwrap();
    let exported = value(&text, "weir_records_dead_lettered_total", &[r#"operator="orders""#]).expect("the dead letter series") as u64;
    assert!(shown <= exported, "the page shows {shown} dead letters, Prometheus (read later) {exported}");

    // The subtask table of an operator named in the address.
    let table = dom(&browser, &format!("{url}#unique"));
    assert!(table.contains(r#"id="subtask-table" data-operator="unique""#), "{table}");
    assert_eq!(table.matches(r#"class="subtask""#).count(), 2, "one row per subtask:\n{table}");

    run.terminate();
    let o = run.wait(Duration::from_secs(60));
    assert!(o.code().is_some(), "{}", o.stderr);
}

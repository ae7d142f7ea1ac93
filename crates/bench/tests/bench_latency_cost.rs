//! `hubhost bench latency` and `hubhost bench cost`, short forms: a small fleet in real time
//! through real processes (hub, emulate instances, handlers, the scale controller). They must
//! finish, and their figures must come from what the parts measured: every reading the pool
//! applied timed by the app, the baseline consumer timing the same events, and storage requests
//! counted by who made them (instances, handlers, the page, the controller).

use hubhost_testkit as common;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

fn bench(args: &[&str]) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hubhost-bench"));
    command
        .args(args)
        .arg("--json")
        .env_remove("HUBHOST_STORAGE")
        .env_remove("AzureWebJobsStorage")
        .env_remove("EventHubConnection");
    let out = common::output_within(&mut command, Duration::from_secs(300));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench {args:?} failed:\n{stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON figures ({e}):\n{stderr}"))
}

#[test]
fn the_latency_benchmark_times_every_applied_reading_against_the_bare_consumer() {
    let runs = bench(&[
        "latency",
        "--homes",
        "3000",
        "--instances",
        "2",
        "--warmup",
        "8",
        "--duration",
        "12",
        "--interval",
        "4",
    ]);
    eprintln!("{runs:#}");
    let run = &runs[0];
    assert_eq!(run["instances"], 2);
    // 3,000 homes × 8 sensors a minute: 400 events/s. The simulator keeps an absolute schedule,
    // so one that fell behind on a busy machine catches up, and a 12 s window can see a burst.
    let sent = run["sent_per_s"].as_f64().unwrap();
    assert!((300.0..600.0).contains(&sent), "{sent} events/s sent");
    let (baseline, applied) = (&run["baseline"], &run["applied"]);
    let (received, timed) = (
        baseline["count"].as_f64().unwrap(),
        applied["count"].as_f64().unwrap(),
    );
    // Both see the same stream over the same interval (scraped a moment apart). The floor is the
    // fleet's own rate, not the measured send rate: a catch-up burst late in the window raises
    // the sent figure with events that are received after the window closes.
    let fleet_per_s = 3000.0 * 8.0 / 60.0;
    assert!(received > 0.8 * fleet_per_s * 12.0, "{baseline}");
    assert!(
        (timed - received).abs() < 0.2 * received,
        "{applied} vs {baseline}"
    );
    // Alarms reach the page through its stream (at this load, intrusions a few a second).
    let pushed = &run["pushed"];
    assert!(pushed["count"].as_f64().unwrap() > 0.0, "{pushed}");
    for l in [baseline, applied, pushed] {
        let (p50, p99, max) = (
            l["p50"].as_f64().unwrap(),
            l["p99"].as_f64().unwrap(),
            l["max"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{l}");
        assert!(p99 < 10.0, "a reading took {p99} s: {l}");
        assert!(!l["p99_per_interval"].as_array().unwrap().is_empty(), "{l}");
    }
}

#[test]
fn the_cost_benchmark_counts_requests_by_who_makes_them() {
    let runs = bench(&[
        "cost",
        "--homes",
        "3000",
        "--configs",
        "hubhost,scale",
        "--instances",
        "2",
        "--warmup",
        "8",
        "--duration",
        "12",
        "--scale-interval",
        "2",
    ]);
    eprintln!("{runs:#}");
    let line = |run: &Value, source: &str, kind: &str, class: &str| -> f64 {
        run["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["source"] == source && l["kind"] == kind && l["class"] == class)
            .map_or(0.0, |l| l["requests"].as_f64().unwrap())
    };
    for run in runs.as_array().unwrap() {
        let events = run["events"].as_f64().unwrap();
        assert!(events > 0.0, "{run}");
        // Every batch writes a window block and an archive block and checkpoints (Set Blob
        // Metadata: billed as "other"); instances renew and list ownership; the page lists.
        for (source, kind, class) in [
            ("app", "window block", "write"),
            ("app", "archive", "write"),
            ("checkpoint store", "checkpoint", "other"),
            ("checkpoint store", "ownership", "other"),
            ("checkpoint store", "ownership", "list"),
            ("page", "window block", "list"),
        ] {
            let n = line(run, source, kind, class);
            assert!(n > 0.0, "{source} {kind} {class}: {run}");
            assert!(
                n < events * 3.0,
                "{source} {kind} {class}: {n} for {events} events"
            );
        }
        assert!(run["usd_per_month"].as_f64().unwrap() > 0.0);
    }
    let scaled = &runs[1];
    assert_eq!(scaled["config"], "--scale");
    assert!(
        line(scaled, "scale controller", "checkpoint", "list") > 0.0,
        "the controller reads the checkpoints every decision: {scaled}"
    );
}

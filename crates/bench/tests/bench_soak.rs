//! `hubhost bench soak`, short form (five minutes): a small fleet in real time through a hub,
//! four emulate instances and their handlers, with the page polled. Every window samples every
//! process; nothing grows: memory and open files flat after the first window, the hub's disk
//! bounded by its (short) retention, which deletes segments during the run. The load is small
//! (800 events/s on 4 partitions) for the debug build, yet fills the hub's cache of each
//! partition's newest events (8 MB) within the warm-up, so the hub's memory is flat from the
//! second window as it is at the reference load. The hour at the
//! reference load is a README command; its table is in docs/benchmarks.md.

use hubhost_testkit as common;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

#[test]
fn five_minutes_of_load_grow_nothing() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hubhost-bench"));
    command
        .args([
            "soak",
            "--homes",
            "6000",
            "--partitions",
            "4",
            "--instances",
            "4",
            "--warmup",
            "60",
            "--duration",
            "300",
            "--window",
            "60",
            "--retention",
            "60",
            "--segment-mb",
            "1",
            "--json",
        ])
        .env_remove("HUBHOST_STORAGE")
        .env_remove("AzureWebJobsStorage")
        .env_remove("EventHubConnection");
    let out = common::output_within(&mut command, Duration::from_secs(480));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench soak failed:\n{stderr}");
    let reports: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON figures ({e}):\n{stderr}"));
    let report = &reports[0];
    eprintln!("{report:#}");

    let windows = report["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 5, "{report}");
    for w in windows {
        // 6,000 homes × 8 sensors a minute: 800 events/s, all applied.
        let (sent, applied) = (
            w["sent_per_s"].as_f64().unwrap(),
            w["applied_per_s"].as_f64().unwrap(),
        );
        assert!((600.0..1200.0).contains(&sent), "{w}");
        assert!(applied > 0.8 * sent, "{w}");
        let processes = w["processes"].as_array().unwrap();
        let names: Vec<&str> = processes
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "hub",
                "i1",
                "i1 handler",
                "i2",
                "i2 handler",
                "i3",
                "i3 handler",
                "i4",
                "i4 handler"
            ],
            "{w}"
        );
        for p in processes {
            let (median, peak) = (p["rss_median_kib"].as_u64(), p["rss_kib"].as_u64());
            assert!(median.unwrap() > 1000 && median <= peak, "{p}");
            assert!(p["open_files"].as_u64().unwrap() >= 3, "{p}");
            assert!(p["threads"].as_u64().unwrap() >= 1, "{p}");
        }
        assert!(w["store_bytes"].as_u64().unwrap() > 0, "{w}");
    }
    let verdicts = &report["verdicts"];
    assert_eq!(
        verdicts["rss_peak_growth"].as_array().unwrap().len(),
        9,
        "{verdicts}"
    );
    // Judged on each window's median RSS. The hub and the instances hold the soak's bound from
    // the second window on. A handler's cache of window blocks (up to 256, then cleared) takes
    // about 20 minutes to fill at this load, one partition per handler, so through five minutes
    // it rises by design (1.18× in a run of 2026-11-28); here it is held to a looser bound that
    // a leak per event would still break, and to the soak's own bound in the hour at the
    // reference load, where the cache cycles every minute or two. i1's handler serves the page
    // too, whose fleet view keeps an hour of windows and whose chart keeps five minutes of
    // polls: with one-minute windows both fill through the whole run (1.26× in that run, about
    // 5 MiB more than the other handlers), so it has a bound of its own; in the hour the page's
    // handler holds the soak's bound like every other process.
    for pair in verdicts["rss_growth"].as_array().unwrap() {
        let (name, growth) = (pair[0].as_str().unwrap(), pair[1].as_f64().unwrap());
        let bound = match name {
            "i1 handler" => 1.40,
            handler if handler.ends_with("handler") => 1.25,
            _ => 1.10,
        };
        assert!(
            growth <= bound,
            "{name}'s memory grew {growth:.3}×: {verdicts}"
        );
    }
    assert_eq!(verdicts["open_files_flat"], true, "{verdicts}");
    assert_eq!(verdicts["hub_disk_bounded"], true, "{verdicts}");
    assert_eq!(report["failed_sends"], 0, "{report}");
}

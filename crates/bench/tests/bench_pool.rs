//! `hubhost bench pool` — the scenario benchmark of docs/benchmarks.md — run small: it must
//! finish, and its
//! figures must say what the pool does (a crash taken over within expiry plus a few cycles,
//! a graceful stop handed over at once, scale-outs moving no more than balance needs, nothing
//! changing hands while membership is steady, every prefilled event processed).

use hubhost_testkit as common;

use std::process::Command;

use serde_json::Value;

/// Runs `hubhost bench pool --json` with `args` on the embedded defaults; its figures.
fn bench_pool(args: &[&str], within_seconds: u64) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hubhost-bench"));
    command
        .args(["pool", "--json"])
        .args(args)
        .env_remove("HUBHOST_STORAGE")
        .env_remove("AzureWebJobsStorage")
        .env_remove("EventHubConnection");
    let out = common::output_within(&mut command, std::time::Duration::from_secs(within_seconds));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench pool failed:\n{stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON figures ({e}):\n{stderr}"))
}

#[test]
fn the_pool_benchmark_reports_the_scenarios() {
    // It takes about a minute here; ten mean something hangs.
    let f = bench_pool(
        &[
            "--events",
            "20000",
            "--homes",
            "2000",
            "--rate",
            "500",
            "--steady-seconds",
            "8",
            "--scale-interval",
            "1",
        ],
        600,
    );
    eprintln!("{f:#}");

    let takeover = f["takeover_seconds"].as_f64().unwrap();
    assert!(
        takeover > 3.0 && takeover < 15.0,
        "a crash is taken over after the 6 s expiry, not before and not much later: {takeover}"
    );
    let handoff = f["handoff_seconds"].as_f64().unwrap();
    assert!(handoff < 5.0, "graceful handoff took {handoff} s");
    let scale_out = f["scale_out"].as_array().unwrap();
    assert_eq!(scale_out.len(), 2);
    for step in scale_out {
        // The balancer steals only from owners above their share; a partition may move once
        // more while two newcomers settle between themselves.
        let (moved, minimum) = (
            step["moved"].as_u64().unwrap(),
            step["minimum"].as_u64().unwrap(),
        );
        assert_eq!(minimum, 8, "{step}");
        assert!(moved >= minimum && moved <= minimum + 2, "{step}");
    }
    assert_eq!(
        f["steady_changes"], 0,
        "ownership changed with steady membership"
    );
    let ops = f["storage_ops_per_min"][0].as_f64().unwrap();
    assert!(
        ops > 0.0,
        "the instances' /metrics count their store operations"
    );
    let reclaim = f["restart_reclaim_seconds"].as_f64().unwrap();
    assert!(
        reclaim > 0.0 && reclaim < 6.0,
        "a restart under the same id reclaims before the 6 s expiry: {reclaim}"
    );
    assert!(f["restart_partitions"].as_u64().unwrap() >= 1);
    let drain = f["drain"].as_array().unwrap();
    let pools: Vec<&str> = drain.iter().map(|d| d["pool"].as_str().unwrap()).collect();
    assert_eq!(pools, ["1 instance", "16 instances", "--scale"]);
    for d in drain {
        let (seconds, instance_seconds) = (
            d["seconds"].as_f64().unwrap(),
            d["instance_seconds"].as_f64().unwrap(),
        );
        assert!(seconds > 0.0 && instance_seconds > 0.0, "{d}");
        let max = d["max_instances"].as_f64().unwrap();
        assert!(instance_seconds <= seconds * max + 1.0, "{d}");
    }
    // 20,000 events ÷ 100 per instance: the controller asks for all 16 and adds four at a time.
    assert!(
        drain[2]["max_instances"].as_u64().unwrap() >= 4,
        "{drain:?}"
    );
    assert!(
        drain[2]["max_instances"].as_u64().unwrap() <= 16,
        "{drain:?}"
    );
    let throughput = f["throughput"].as_array().unwrap();
    assert_eq!(throughput.len(), 3);
    for t in throughput {
        assert!(t["events_per_s"].as_f64().unwrap() > 0.0, "{t}");
        // Every part of the pipeline was seen spending CPU on the events, the baseline's
        // consumer too, and the baseline had no handlers.
        let run = &t["runs"][0];
        for part in ["hub", "instances", "handlers"] {
            assert!(run["cpu"][part].as_f64().unwrap() > 0.0, "{part}: {run}");
        }
        assert!(
            run["baseline_cpu"]["instances"].as_f64().unwrap() > 0.0,
            "{run}"
        );
        assert_eq!(
            run["baseline_cpu"]["handlers"].as_f64().unwrap(),
            0.0,
            "{run}"
        );
    }
    assert!(f["baseline_events_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn bench_pool_repeats_only_the_throughput_phase_when_asked() {
    let f = bench_pool(
        &[
            "--events",
            "4000",
            "--homes",
            "500",
            "--throughput-only",
            "--pools",
            "1,2",
            "--repeat",
            "2",
        ],
        300,
    );
    let throughput = f["throughput"].as_array().unwrap();
    let pools: Vec<u64> = throughput
        .iter()
        .map(|t| t["instances"].as_u64().unwrap())
        .collect();
    assert_eq!(pools, [1, 2], "{f}");
    for t in throughput {
        let runs = t["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{t}");
        // Each repetition measured its own baselines: the bare consumer, and the consumer with
        // the host contract's encode and decode.
        for run in runs {
            assert!(
                run["baseline_events_per_s"].as_f64().unwrap() > 0.0,
                "{run}"
            );
            assert!(run["floor_events_per_s"].as_f64().unwrap() > 0.0, "{run}");
            assert!(
                run["floor_cpu"]["instances"].as_f64().unwrap() > 0.0,
                "{run}"
            );
        }
    }
    // The fixed pools' drains, but none by the scale controller; no membership scenarios.
    let drains: Vec<&str> = f["drain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["pool"].as_str().unwrap())
        .collect();
    assert_eq!(drains, ["1 instance", "2 instances"], "{f}");
    assert!(f["scale_out"].as_array().unwrap().is_empty(), "{f}");
    assert_eq!(f["handoff_seconds"].as_f64().unwrap(), 0.0, "{f}");
}

/// `--tracing`: each pool run again with its instances and handlers exporting to the
/// benchmark's collector, on the same stamped readings; both rates and the spans reported.
#[test]
fn the_pool_benchmark_measures_tracing_on_and_off() {
    let f = bench_pool(
        &[
            "--throughput-only",
            "--tracing",
            "--events",
            "4000",
            "--homes",
            "400",
            "--pools",
            "1",
        ],
        300,
    );
    let pool = &f["throughput"][0];
    let off = &pool["runs"][0];
    let on = &pool["traced_runs"][0];
    assert!(off["events_per_s"].as_f64().unwrap() > 0.0, "{pool:#}");
    assert!(on["events_per_s"].as_f64().unwrap() > 0.0, "{pool:#}");
    // At least the host's delivery and the function's invocation for each batch of 100.
    assert!(on["spans"].as_u64().unwrap() >= 2 * 4000 / 100, "{pool:#}");
    assert!(on["cpu"]["handlers"].as_f64().unwrap() > 0.0, "{pool:#}");
}

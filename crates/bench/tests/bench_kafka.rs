//! `hubhost bench kafka`, short form: both protocols move every event on the same hub, and the
//! report carries each phase's figure from every repetition.

use std::process::Command;
use std::time::Duration;

use hubhost_testkit as common;
use serde_json::Value;

#[test]
fn the_kafka_benchmark_moves_every_event_through_both_protocols() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hubhost-bench"));
    command.args([
        "kafka",
        "--events",
        "3200",
        "--batch-size",
        "100",
        "--repetitions",
        "2",
        "--json",
    ]);
    let out = common::output_within(&mut command, Duration::from_secs(300));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench kafka failed:\n{stderr}");
    let phases: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON figures ({e}):\n{stderr}"));
    let events: Vec<u64> = phases
        .iter()
        .map(|p| p["events"].as_u64().unwrap())
        .collect();
    // Each producer sends 3,200; each reader reads both producers' 6,400.
    assert_eq!(events, vec![3200, 3200, 6400, 6400], "{phases:?}");
    for phase in &phases {
        let rates = phase["events_per_s"].as_array().unwrap();
        assert_eq!(rates.len(), 2, "{phase}");
        assert!(rates.iter().all(|r| r.as_f64().unwrap() > 0.0), "{phase}");
        // The hub did work for every phase, each measured.
        let cpu = phase["hub_cpu_us_per_event"].as_array().unwrap();
        assert_eq!(cpu.len(), 2, "{phase}");
    }
}

//! The short form of `scripts/bench-brokers.sh`, the hub beside Apache Kafka's broker and
//! ActiveMQ Artemis: one run of 2,000 records each (and the 2,000 paced), with the test build of
//! `hubhost`. It checks what the benchmark's figures stand on, not the figures: every server
//! started, took every record of the load and gave every one back, and the summary compares
//! each pair.

use std::collections::BTreeMap;
use std::process::Command;

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use serde_json::Value;

#[test]
fn the_side_by_side_benchmark_reads_back_every_record_from_every_server() {
    common::require!(Tool::KafkaJava);
    let records = 2000;
    let out = common::output_within(
        Command::new("bash")
            .arg(common::repository().join("scripts/bench-brokers.sh"))
            .env("REPS", "1")
            .env("RECORDS", records.to_string())
            .env("SIZE", "256")
            .env("HUBHOST_EXE", common::binary("hubhost")),
        common::COMMAND_LIMIT,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: BTreeMap<String, Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|run| (run["server"].as_str().unwrap().to_string(), run))
        .collect();
    let names: Vec<&str> = runs.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["artemis", "hub-amqp", "hub-kafka", "kafka"],
        "{stdout}"
    );
    // The Kafka loads read back the warm-up record too.
    for kafka in ["hub-kafka", "kafka"] {
        assert_eq!(runs[kafka]["fetched"], records + 2000 + 1, "{stdout}");
        assert!(runs[kafka]["produce_per_s"].as_f64().unwrap() > 0.0);
    }
    for amqp in ["hub-amqp", "artemis"] {
        assert_eq!(runs[amqp]["received"], records + 2000, "{stdout}");
        assert!(runs[amqp]["send_per_s"].as_f64().unwrap() > 0.0);
    }
    for run in runs.values() {
        assert!(run["peak_rss_mib"].as_f64().unwrap() > 1.0, "{run}");
        assert!(run["cpu_us_per_record"].as_f64().unwrap() > 0.0, "{run}");
    }
    assert!(
        stdout.contains("hub/kafka") && stdout.contains("hub/artemis"),
        "{stdout}"
    );
}

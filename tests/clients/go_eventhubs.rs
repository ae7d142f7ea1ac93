//! The official Go Event Hubs SDK (`azeventhubs/v2` 2.0.2, on go-amqp) against `hubhost hub`:
//! `ProducerClient` sending by partition, `ConsumerClient` reading a partition from the start with
//! the partition's properties, and two `Processor`s with the blob checkpoint store (`azblob` on
//! Azurite) sharing the partitions, one killed with `kill -9` and the other taking over from its
//! checkpoints, which `hubhost checkpoints list` then reads. The peer is tests/go/main.go.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use common::{Hub, KEY};
use serde_json::Value;

use crate::{Background, checkpoint_container, handled_tag, held, listed_checkpoints, wait_until};

const SDK: &str = "azeventhubs/v2 2.0.2";

/// The Go peer, built once per test run from tests/go with the modules and cache the installer
/// filled (a build after the installer's finds everything there).
fn peer() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let tools = common::repository().join(".tools/go");
        let exe = tools.join("bin/eventhubs-peer-test");
        let out = common::output_within(
            Command::new("go")
                .current_dir(common::repository().join("tests/go"))
                .env("GOMODCACHE", tools.join("mod"))
                .env("GOCACHE", tools.join("cache"))
                .env("GOFLAGS", "-mod=readonly")
                .args(["build", "-o"])
                .arg(&exe)
                .arg("."),
            common::COMMAND_LIMIT,
        );
        assert!(out.status.success(), "go build: {out:?}");
        exe
    })
}

fn go(hub: &Hub, name: &str, op: &str, args: &[&str]) -> Command {
    let mut command = Command::new(peer());
    command
        .arg(hub.connection_string(KEY))
        .arg(name)
        .arg(op)
        .args(args);
    command
}

fn go_json(hub: &Hub, name: &str, op: &str, args: &[&str]) -> Value {
    let out = common::output_within(&mut go(hub, name, op, args), common::COMMAND_LIMIT);
    common::json_output(&format!("the Go SDK's {op} ({SDK})"), &out)
}

#[test]
fn the_go_sdk_sends_and_reads_each_partition_with_its_properties() {
    common::require!(Tool::GoSdk);
    let hub = Hub::start_serving_hubs(&["telemetry:4"]);
    let properties = go_json(&hub, "telemetry", "properties", &[]);
    assert_eq!(properties["name"], "telemetry");
    assert_eq!(
        properties["partition_ids"],
        serde_json::json!(["0", "1", "2", "3"])
    );
    assert!(
        properties["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["empty"] == true && p["last_sequence"] == -1),
        "{properties}"
    );
    go_json(&hub, "telemetry", "send", &["40", "go"]);
    for partition in ["0", "1", "2", "3"] {
        let read = go_json(&hub, "telemetry", "receive", &[partition, "10", "60"]);
        let events = read["events"].as_array().unwrap();
        let p: usize = partition.parse().unwrap();
        let got: Vec<u64> = events
            .iter()
            .map(|e| {
                let body: Value = serde_json::from_str(e["body"].as_str().unwrap()).unwrap();
                assert_eq!(body["tag"], "go");
                body["i"].as_u64().unwrap()
            })
            .collect();
        assert_eq!(
            got,
            (p as u64..40).step_by(4).collect::<Vec<_>>(),
            "{partition}: {read}"
        );
        let sequences: Vec<i64> = events
            .iter()
            .map(|e| e["sequence"].as_i64().unwrap())
            .collect();
        assert_eq!(sequences, (0..10).collect::<Vec<_>>());
        assert_eq!(read["partition"]["last_sequence"], 9, "{read}");
        assert_eq!(
            read["partition"]["last_offset"], events[9]["offset"],
            "{read}"
        );
    }
}

#[test]
fn two_go_processors_share_the_partitions_and_one_takes_over_after_kill_9() {
    common::require!(Tool::GoSdk, Tool::Azurite);
    let hub = Hub::start_serving_hubs(&["telemetry:8"]);
    let azurite = common::Azurite::start();
    let storage = azurite.connection_string();
    let container = "go-checkpoints";
    checkpoint_container(&storage, container);
    let logs = tempfile::tempdir().unwrap();
    let processor = |owner: &str| {
        Background::start(
            &mut go(
                &hub,
                "telemetry",
                "process",
                &[owner, &storage, container, "600", "$default"],
            ),
            logs.path(),
            owner,
        )
    };
    let per_round = 160u64;
    go_json(
        &hub,
        "telemetry",
        "send",
        &[&per_round.to_string(), "first"],
    );
    let mut a = processor("a");
    wait_until(
        "processor a holds all 8 partitions and handled the first round",
        &[&a],
        Duration::from_secs(120),
        |seen| held(&seen[0]).len() == 8 && handled_tag(seen, "first").len() as u64 == per_round,
    );
    let mut b = processor("b");
    wait_until(
        "the two processors hold four partitions each",
        &[&a, &b],
        Duration::from_secs(120),
        |seen| {
            let (ha, hb) = (held(&seen[0]), held(&seen[1]));
            ha.len() == 4 && hb.len() == 4 && ha.is_disjoint(&hb)
        },
    );
    go_json(
        &hub,
        "telemetry",
        "send",
        &[&per_round.to_string(), "second"],
    );
    wait_until(
        "the two processors handled the second round between them",
        &[&a, &b],
        Duration::from_secs(120),
        |seen| handled_tag(seen, "second").len() as u64 == per_round,
    );
    b.kill_9();
    go_json(
        &hub,
        "telemetry",
        "send",
        &[&per_round.to_string(), "third"],
    );
    wait_until(
        "processor a took b's partitions over and handled the third round",
        &[&a],
        Duration::from_secs(180),
        |seen| held(&seen[0]).len() == 8 && handled_tag(seen, "third").len() as u64 == per_round,
    );
    a.stop(Duration::from_secs(60));

    // The Go store's checkpoints, read by `hubhost checkpoints list`: every partition at its
    // newest event, with its offset. The Go SDK names its blobs as the client was given the
    // names, where the other SDKs and the Functions host lowercase them: its processors here
    // name their consumer group `$default` (Event Hubs compares the names without case), so
    // that its blobs are where every other reader looks. It names the namespace of an emulator
    // endpoint with its port, `localhost:PORT` (the Java SDK: `localhost`).
    let newest = go_json(&hub, "telemetry", "properties", &[]);
    let namespace = format!("localhost:{}", hub.port);
    let listed = listed_checkpoints(&storage, container, &namespace, "telemetry");
    for partition in newest["partitions"].as_array().unwrap() {
        let row = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["partitionId"] == partition["id"])
            .unwrap_or_else(|| panic!("{partition} listed: {listed}"));
        assert_eq!(row["source"], "checkpoint", "{row}");
        assert_eq!(row["sequenceNumber"], partition["last_sequence"], "{row}");
        assert_eq!(row["offset"], partition["last_offset"], "{row}");
    }
}

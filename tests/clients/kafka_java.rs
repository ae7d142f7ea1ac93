//! Apache Kafka's own Java client (`org.apache.kafka:kafka-clients`), the reference
//! implementation of the protocol, against `hubhost hub`'s Kafka endpoint at its newest 3.x and
//! 4.x ([`KAFKA_JAVA_VERSIONS`]): an idempotent producer with every compression type, keys and
//! headers; a consumer group on the classic protocol whose commits survive `kill -9` of the hub;
//! KIP-848's consumer protocol refused with the client's own clear error; and the admin client
//! describing the topic and the group, listing groups and offsets.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use hubhost_testkit as common;
use hubhost_testkit::{KAFKA_JAVA_VERSIONS, Tool};

use common::{Hub, KEY, free_port, wait_for_port};
use serde_json::Value;

const COMPRESSIONS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

/// `java` running tests/java/KafkaPeer.java with kafka-clients `version`; its JSON.
fn kafka(version: &str, op: &str, bootstrap: &str, password: &str, args: &[&str]) -> Value {
    let mut command = Command::new("java");
    command
        .arg("-cp")
        .arg(format!(
            "{}/*",
            common::java_libraries(&format!("kafka-clients-{version}")).display()
        ))
        .arg(common::repository().join("tests/java/KafkaPeer.java"))
        .args([op, bootstrap, password])
        .args(args);
    let out = common::output_within(&mut command, common::COMMAND_LIMIT);
    common::json_output(&format!("kafka-clients {version} {op}"), &out)
}

/// A hub serving `hubs` with Kafka on a free port, its data in `data` (or memory).
fn start(data: Option<&std::path::Path>, hubs: &[&str], port: u16, kafka_port: u16) -> Hub {
    let hub = Hub::start_serving(port, data, hubs, &["--kafka-port", &kafka_port.to_string()]);
    wait_for_port(kafka_port, "the Kafka endpoint");
    hub
}

#[test]
fn kafka_clients_3_and_4_produce_idempotently_with_every_compression_keys_and_headers() {
    common::require!(Tool::KafkaJava);
    let kafka_port = free_port();
    let hub = start(None, &["readings:4"], free_port(), kafka_port);
    let bootstrap = format!("127.0.0.1:{kafka_port}");
    let password = hub.connection_string(KEY);
    let mut expected = BTreeSet::new();
    let mut partition_of_key: BTreeMap<String, i64> = BTreeMap::new();
    for version in KAFKA_JAVA_VERSIONS {
        assert_eq!(
            kafka(version, "version", &bootstrap, &password, &[])["version"],
            version,
            "the jars in .tools are the version named"
        );
        for compression in COMPRESSIONS {
            let tag = format!("{version}-{compression}");
            let produced = kafka(
                version,
                "produce",
                &bootstrap,
                &password,
                &["readings", "60", &tag, compression],
            );
            for placed in produced["placed"].as_array().unwrap() {
                // One key, one partition, whichever client version and compression sent it.
                let key = placed["key"].as_str().unwrap().to_string();
                let partition = placed["partition"].as_i64().unwrap();
                assert_eq!(
                    *partition_of_key.entry(key.clone()).or_insert(partition),
                    partition,
                    "{tag}: {key}"
                );
                expected.insert(format!("{tag}-{}", placed["i"]));
            }
        }
    }
    // One consumer reads each record once, with its key and headers, in offset order per
    // partition.
    let read = kafka(
        "4.4.0",
        "consume",
        &bootstrap,
        &password,
        &[
            "readings",
            "all",
            "classic",
            &expected.len().to_string(),
            "120",
        ],
    );
    assert!(read["error"].is_null(), "{read}");
    let records = read["records"].as_array().unwrap();
    let values: BTreeSet<String> = records
        .iter()
        .map(|r| r["value"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(records.len(), expected.len(), "each record once");
    assert_eq!(values, expected);
    let mut last: BTreeMap<i64, i64> = BTreeMap::new();
    for record in records {
        let value = record["value"].as_str().unwrap();
        let (tag, i) = value.rsplit_once('-').unwrap();
        assert_eq!(record["headers"]["i"], i, "{record}");
        assert_eq!(record["headers"]["tag"], tag, "{record}");
        let i: i64 = i.parse().unwrap();
        assert_eq!(record["key"], format!("home-{}", i % 50), "{record}");
        let partition = record["partition"].as_i64().unwrap();
        let offset = record["offset"].as_i64().unwrap();
        assert!(
            last.insert(partition, offset)
                .is_none_or(|before| before < offset),
            "{record}"
        );
    }
}

/// The group `group-VERSION` on the classic protocol reading `expect` records of `topic` (or
/// two minutes passing), committing as it goes.
fn consume_classic(
    version: &str,
    bootstrap: &str,
    password: &str,
    topic: &str,
    expect: usize,
) -> Value {
    let group = format!("group-{version}");
    let read = kafka(
        version,
        "consume",
        bootstrap,
        password,
        &[topic, &group, "classic", &expect.to_string(), "120"],
    );
    assert!(read["error"].is_null(), "{version}: {read}");
    read
}

#[test]
fn kafka_clients_3_and_4_groups_keep_their_commits_across_kill_9_of_the_hub() {
    common::require!(Tool::KafkaJava);
    let data = tempfile::tempdir().unwrap();
    let (port, kafka_port) = (free_port(), free_port());
    let bootstrap = format!("127.0.0.1:{kafka_port}");
    let mut hub = start(Some(data.path()), &["orders:3"], port, kafka_port);
    let password = hub.connection_string(KEY);
    for version in KAFKA_JAVA_VERSIONS {
        kafka(
            version,
            "produce",
            &bootstrap,
            &password,
            &["orders", "90", &format!("before-{version}"), "lz4"],
        );
    }
    for version in KAFKA_JAVA_VERSIONS {
        let read = consume_classic(version, &bootstrap, &password, "orders", 180);
        assert_eq!(read["records"].as_array().unwrap().len(), 180, "{version}");
    }

    hub.kill_9();
    let mut hub = start(Some(data.path()), &["orders:3"], port, kafka_port);
    kafka(
        "4.4.0",
        "produce",
        &bootstrap,
        &password,
        &["orders", "30", "after", "zstd"],
    );
    for version in KAFKA_JAVA_VERSIONS {
        let group = format!("group-{version}");
        // Each group goes on from its commits: only the records sent after the restart.
        let read = consume_classic(version, &bootstrap, &password, "orders", 30);
        let values: BTreeSet<&str> = read["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["value"].as_str().unwrap())
            .collect();
        assert_eq!(values.len(), 30, "{version}: {read}");
        assert!(
            values.iter().all(|v| v.starts_with("after-")),
            "{version}: {read}"
        );

        // The admin client: the topic, the groups, the group (empty once its member left), the
        // earliest and latest offsets, and the group's commits at the latest.
        let admin = kafka(version, "admin", &bootstrap, &password, &["orders", &group]);
        assert_eq!(admin["topic"]["name"], "orders", "{admin}");
        assert_eq!(admin["topic"]["partitions"], serde_json::json!([0, 1, 2]));
        let groups: BTreeSet<&str> = admin["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_str().unwrap())
            .collect();
        assert!(
            KAFKA_JAVA_VERSIONS
                .iter()
                .all(|v| groups.contains(format!("group-{v}").as_str())),
            "{admin}"
        );
        assert_eq!(admin["group"]["state"], "Empty", "{admin}");
        assert_eq!(
            admin["earliest"],
            serde_json::json!({"0": 0, "1": 0, "2": 0})
        );
        let latest: i64 = admin["latest"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_i64().unwrap())
            .sum();
        assert_eq!(latest, 210, "{admin}");
        assert_eq!(admin["committed"], admin["latest"], "{admin}");
    }
    hub.kill_9();
}

#[test]
fn kafka_clients_4_consumer_protocol_is_refused_with_the_clients_own_clear_error() {
    common::require!(Tool::KafkaJava);
    let kafka_port = free_port();
    let hub = start(None, &["readings:2"], free_port(), kafka_port);
    let bootstrap = format!("127.0.0.1:{kafka_port}");
    let password = hub.connection_string(KEY);
    // KIP-848's protocol needs ConsumerGroupHeartbeat, which the hub does not list in
    // ApiVersions (nor does Event Hubs): the client says so and names the setting that works.
    let read = kafka(
        "4.4.0",
        "consume",
        &bootstrap,
        &password,
        &["readings", "kip-848", "consumer", "1", "30"],
    );
    let error = read["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("UnsupportedVersionException") && error.contains("group.protocol=classic"),
        "{read}"
    );
    // The hub keeps serving: the classic protocol on the same connection settings works.
    kafka(
        "4.4.0",
        "produce",
        &bootstrap,
        &password,
        &["readings", "1", "classic", "none"],
    );
    let read = kafka(
        "4.4.0",
        "consume",
        &bootstrap,
        &password,
        &["readings", "classic-group", "classic", "1", "60"],
    );
    assert_eq!(read["records"].as_array().unwrap().len(), 1, "{read}");
}

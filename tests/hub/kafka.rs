//! `hubhost hub`'s Kafka endpoint with Kafka clients from PyPI as independent peers:
//! confluent-kafka (librdkafka) and kafka-python produce keyed records with headers that the
//! Event Hubs SDK receives over AMQP with the same partitions, sequence numbers, keys and
//! properties; AMQP-sent events are consumed by a Kafka consumer group of two members that
//! rebalance; the group's commits survive `kill -9` of the hub; refusals come with the client's
//! own error while the hub keeps serving; an idempotent producer's retry after a `kill -9` of
//! the hub gets its first answer instead of a duplicate; a mixed load of idempotent Kafka
//! records and AMQP batches through a `kill -9` of the hub loses no acknowledged record and
//! stores no Kafka record twice.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use common::{Hub, KEY, free_port, wait_for_port};
use serde_json::Value;

/// A hub with Kafka on `kafka` and its admin endpoint on `admin`, its data in `data`.
fn start(port: u16, kafka: u16, admin: u16, data: &std::path::Path) -> Hub {
    let hub = Hub::start_serving(
        port,
        Some(data),
        &["sensors:16", "alarms:4"],
        &[
            "--kafka-port",
            &kafka.to_string(),
            "--admin-port",
            &admin.to_string(),
        ],
    );
    wait_for_port(kafka, "the Kafka endpoint");
    wait_for_port(admin, "the admin endpoint");
    hub
}

/// A hub serving `hub` with Kafka on `kafka`, its data in `data`, once Kafka listens.
fn start_kafka_only(port: u16, kafka: u16, data: &std::path::Path, hub: &str) -> Hub {
    let started = Hub::start_serving(
        port,
        Some(data),
        &[hub],
        &["--kafka-port", &kafka.to_string()],
    );
    wait_for_port(kafka, "the Kafka endpoint");
    started
}

/// The hub's Kafka groups for `hub`, as the admin endpoint (and so the page's explorer) shows;
/// the admin token is the one the hub wrote to its data directory `data`.
fn kafka_groups(admin: u16, data: &std::path::Path, hub: &str) -> Vec<Value> {
    let token = hubhost_hub::admin::read_token(data).expect("the hub wrote its admin token");
    let body = common::http_get_bearer(admin, "/hubs", &token).expect("the admin endpoint answers");
    let hubs: Vec<Value> = serde_json::from_str(&body).unwrap();
    let found = hubs.iter().find(|h| h["name"] == hub).expect("the hub");
    found["kafkaGroups"].as_array().unwrap().clone()
}

fn kafka(op: &str, bootstrap: &str, password: &str, args: &[&str]) -> Value {
    let mut all = vec![op, bootstrap, password];
    all.extend_from_slice(args);
    common::python_json("kafka_peer.py", &all)
}

/// A consumer started in the background, its JSON read when it ends.
fn consumer_in_background(bootstrap: &str, password: &str, args: &[&str]) -> Child {
    let script = common::repository().join("tests/python/kafka_peer.py");
    Command::new(common::python())
        .arg(script)
        .args(["consume", bootstrap, password])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts")
}

fn finished(child: Child) -> Value {
    let out = child.wait_with_output().expect("the consumer ends");
    common::json_output("kafka consumer", &out)
}

#[test]
fn kafka_and_amqp_share_one_log_and_groups_resume_from_commits_after_kill_9() {
    common::require!(Tool::PythonSdk, Tool::KafkaClients);
    let data = tempfile::tempdir().unwrap();
    let (port, kafka_port, admin) = (free_port(), free_port(), free_port());
    let mut hub = start(port, kafka_port, admin, data.path());
    let bootstrap = format!("127.0.0.1:{kafka_port}");
    let cs = hub.connection_string(KEY);

    // Kafka producers: librdkafka with each compression and idempotence, kafka-python plain.
    let mut placed = Vec::new();
    for (client, tag, compression, count) in [
        ("confluent", "gz", "gzip", "60"),
        ("confluent", "sn", "snappy", "60"),
        ("confluent", "l4", "lz4", "60"),
        ("confluent", "zs", "zstd", "60"),
        ("kafka-python", "kp", "none", "40"),
    ] {
        let out = kafka(
            "produce",
            &bootstrap,
            &cs,
            &[client, "sensors", count, tag, compression],
        );
        let records = out["placed"]
            .as_array()
            .unwrap_or_else(|| panic!("{client} {compression}: {out}"));
        assert_eq!(records.len(), count.parse::<usize>().unwrap());
        for r in records {
            placed.push((tag.to_string(), r.clone()));
        }
    }
    let used: BTreeSet<i64> = placed
        .iter()
        .map(|(_, r)| r["partition"].as_i64().unwrap())
        .collect();
    assert!(used.len() > 8, "keys spread over partitions: {used:?}");

    // The Event Hubs SDK receives each one once, where Kafka placed it: partition, sequence
    // number = offset, the Kafka key in x-opt-kafka-key, headers as properties.
    let received = kafka("eh-receive", "-", &cs, &["sensors", "280", "60"]);
    let received = received.as_array().unwrap();
    assert_eq!(received.len(), 280, "every Kafka record, once");
    let by_place: BTreeMap<(i64, i64), &Value> = received
        .iter()
        .map(|e| {
            (
                (
                    e["partition"].as_i64().unwrap(),
                    e["sequence"].as_i64().unwrap(),
                ),
                e,
            )
        })
        .collect();
    for (tag, r) in &placed {
        let place = (
            r["partition"].as_i64().unwrap(),
            r["offset"].as_i64().unwrap(),
        );
        let event = by_place
            .get(&place)
            .unwrap_or_else(|| panic!("{r} not received at {place:?}"));
        assert_eq!(event["kafka_key"], r["key"], "{event}");
        assert_eq!(event["properties"]["tag"], tag.as_str(), "{event}");
        let i = event["properties"]["i"].as_str().unwrap();
        assert_eq!(event["body"], format!("{tag}-{i}"));
    }

    // AMQP producers: 120 events keyed by home, with typed properties i and tag.
    hub.python("send", &["120", "20", "amqp"]);
    let total = 280 + 120;

    // A group of two librdkafka members: the second joins two seconds after the first, and the
    // first gives up half of its partitions; together they read everything once.
    let first = consumer_in_background(
        &bootstrap,
        &cs,
        &["confluent", "sensors", "pair", "100000", "14"],
    );
    std::thread::sleep(std::time::Duration::from_secs(2));
    let second = consumer_in_background(
        &bootstrap,
        &cs,
        &["confluent", "sensors", "pair", "100000", "12"],
    );
    let (first, second) = (finished(first), finished(second));
    let assignments = |v: &Value| -> Vec<Vec<i64>> {
        v["assignments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                a.as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_i64().unwrap())
                    .collect()
            })
            .collect()
    };
    let (a, b) = (assignments(&first), assignments(&second));
    assert!(a.len() >= 2, "the first member rebalanced: {a:?}");
    // While both were members, they held complementary halves.
    let halves = a.iter().any(|held| {
        let mut both: Vec<i64> = held.iter().chain(&b[0]).copied().collect();
        both.sort();
        both == (0..16).collect::<Vec<_>>() && (6..=10).contains(&held.len())
    });
    assert!(halves, "{a:?} {b:?}");
    let mut read: BTreeSet<(i64, i64)> = BTreeSet::new();
    let mut amqp_records = 0;
    for r in first["records"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["records"].as_array().unwrap())
    {
        assert!(r.get("error").is_none(), "{r}");
        read.insert((
            r["partition"].as_i64().unwrap(),
            r["offset"].as_i64().unwrap(),
        ));
        if r["headers"].get("x-opt-partition-key").is_some() {
            amqp_records += 1;
            // The partition key as a header; typed AMQP properties AMQP-encoded (str8: 0xa1).
            let key = r["headers"]["x-opt-partition-key"].as_str().unwrap();
            assert!(key.starts_with("home-"), "{r}");
            assert_eq!(
                r["key"],
                Value::Null,
                "the partition key is not the Kafka key"
            );
            assert_eq!(r["headers"]["tag"], "\u{a1}\u{4}amqp", "{r}");
        }
    }
    assert_eq!(read.len(), total, "the group read every event");
    assert_eq!(amqp_records, 120);
    // The explorer's view: the group committed every partition to its end.
    let groups = kafka_groups(admin, data.path(), "sensors");
    let pair = groups
        .iter()
        .find(|g| g["name"] == "pair")
        .expect("the group");
    // A commit that failed (during the rebalance) was tried again while its member held the
    // partition, or the partition read again by its next owner: the group still ends at the end.
    let failed = (&first["commit_errors"], &second["commit_errors"]);
    assert_eq!(pair["lag"], 0, "{pair}; commits that failed: {failed:?}");
    assert_eq!(pair["partitions"].as_array().unwrap().len(), 16, "{pair}");
    assert_eq!(pair["state"], "Empty", "both members left: {pair}");

    // kill -9 the hub, start it again on the same data: the group's commits are there, so a
    // member (kafka-python this time) reads only what was sent since.
    hub.kill_9();
    let hub = start(port, kafka_port, admin, data.path());
    hub.python("send", &["30", "10", "after"]);
    let before = kafka_groups(admin, data.path(), "sensors");
    let pair = before
        .iter()
        .find(|g| g["name"] == "pair")
        .expect("the commits survived");
    assert_eq!(pair["lag"], 30, "{pair}");
    assert_eq!(
        pair["state"],
        Value::Null,
        "not seen since the restart: {pair}"
    );
    let resumed = kafka(
        "consume",
        &bootstrap,
        &cs,
        &["kafka-python", "sensors", "pair", "30", "30"],
    );
    let records = resumed["records"].as_array().unwrap();
    let tags: Vec<&Value> = records.iter().map(|r| &r["headers"]["tag"]).collect();
    assert_eq!(records.len(), 30, "{tags:?}");
    assert!(
        tags.iter().all(|t| *t == "\u{a1}\u{5}after"),
        "nothing read twice: {tags:?}"
    );
}

#[test]
fn wrong_credentials_scopes_topics_and_sizes_fail_with_the_clients_error() {
    common::require!(Tool::PythonSdk, Tool::KafkaClients);
    let data = tempfile::tempdir().unwrap();
    let (port, kafka_port, admin) = (free_port(), free_port(), free_port());
    let hub = start(port, kafka_port, admin, data.path());
    let bootstrap = format!("127.0.0.1:{kafka_port}");
    let cs = hub.connection_string(KEY);
    let errors = |password: &str, topic: &str, case: &str| -> String {
        let out = kafka("refused", &bootstrap, password, &[topic, case]);
        out["errors"].to_string()
    };

    let wrong = hub.connection_string("guess");
    let e = errors(&wrong, "sensors", "small");
    assert!(
        e.contains("Authentication failed") && e.contains("does not match"),
        "{e}"
    );
    assert!(!e.contains("guess"), "no secret in an error: {e}");

    // A client that skipped SASL hears why on its first metadata request.
    let e = errors(&cs, "sensors", "plaintext");
    assert!(e.contains("SASL Authentication failed"), "{e}");

    let scoped = format!("{cs}EntityPath=alarms");
    let e = errors(&scoped, "sensors", "small");
    assert!(e.to_lowercase().contains("authoriz"), "{e}");

    let e = errors(&cs, "no-such-hub", "small");
    assert!(e.contains("Unknown topic"), "{e}");

    let e = errors(&cs, "sensors", "too-large");
    assert!(e.contains("too large"), "{e}");

    // Still serving: the scoped string writes to its own hub.
    let e = errors(&scoped, "alarms", "small");
    assert_eq!(e, "[null]", "{e}");

    // A hub added while the hub runs is a topic at once.
    let url = format!("http://127.0.0.1:{admin}");
    let data_dir = data.path().to_str().unwrap();
    let (code, _, err) = common::hubhost(
        &[
            "hub",
            "add-hub",
            "orders:3",
            "--admin",
            &url,
            "--data-dir",
            data_dir,
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let e = errors(&cs, "orders", "small");
    assert_eq!(e, "[null]", "{e}");
}

/// The pipeline with a Kafka producer at its head: librdkafka writes the reference app's
/// readings, `hubhost emulate` triggers the app's SensorAggregator from the hub over AMQP, and
/// the window blocks it writes count every reading once.
#[test]
fn a_kafka_producer_feeds_the_reference_app_under_emulate() {
    use hubhost_app::aggregate::WindowAggregate;
    use hubhost_testkit::pool::{AppFolder, EmulatePool};

    common::require!(Tool::KafkaClients);
    const READINGS: u64 = 600;
    let dir = tempfile::tempdir().unwrap();
    let (port, kafka_port, admin) = (free_port(), free_port(), free_port());
    let hub = start(port, kafka_port, admin, &dir.path().join("hub"));
    let bootstrap = format!("127.0.0.1:{kafka_port}");
    let cs = hub.connection_string(KEY);
    let storage = dir.path().join("storage");
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_hubhost"));
    let app = dir.path().join("app");
    AppFolder {
        handler: (&exe, &["serve"]),
        functions: &[(
            "SensorAggregator",
            include_str!("../../function_app/SensorAggregator/function.json"),
        )],
        max_batch: 100,
        prefetch: 300,
        ownership_expiry: None,
        values: &[
            ("AzureWebJobsStorage", storage.display().to_string()),
            ("EventHubConnection", cs.clone()),
            ("EventHubName", "sensors".to_string()),
        ],
    }
    .write(&app)
    .unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut pool = EmulatePool::new(&exe, &app, &logs);
    pool.start("k1", &[]).unwrap();

    let sent = kafka(
        "produce-readings",
        &bootstrap,
        &cs,
        &["sensors", &READINGS.to_string()],
    );
    assert_eq!(sent["sent"], READINGS, "{sent}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let processed = runtime
            .block_on(pool.metrics("k1"))
            .map(|(_, samples)| {
                hubhost_metrics::sum(
                    &samples,
                    "hubhost_events_processed_total",
                    &[("function", "SensorAggregator")],
                )
            })
            .unwrap_or(0.0);
        if processed >= READINGS as f64 {
            assert_eq!(processed, READINGS as f64);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "processed {processed} of {READINGS}:\n{}",
            pool.log("k1")
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }

    // Every window block the app wrote, summed: each reading once, each sensor once.
    let store = hubhost_storage::StorageLocation::Directory(storage)
        .open()
        .unwrap();
    let (events, sensors) = runtime.block_on(async {
        let (mut events, mut sensors) = (0u64, BTreeSet::new());
        for blob in store.list("hubhost", "windows/").await.unwrap() {
            let data = store
                .get("hubhost", &blob.name)
                .await
                .unwrap()
                .unwrap()
                .data;
            let block: WindowAggregate = serde_json::from_slice(&data).unwrap();
            events += block.events;
            for (home, window) in &block.homes {
                for sensor in window.sensors.keys() {
                    assert!(
                        sensors.insert(format!("{home}/{sensor}")),
                        "{home}/{sensor} twice"
                    );
                }
            }
        }
        (events, sensors)
    });
    assert_eq!(events, READINGS, "{}", pool.log("k1"));
    assert_eq!(sensors.len() as u64, READINGS);
    runtime.block_on(pool.stop_all()).unwrap();
}

/// A Produce of one idempotent batch: `count` records of producer `producer` from `sequence`.
fn idempotent_batch(
    producer: i64,
    sequence: i32,
    count: i32,
) -> kafka_protocol::messages::ProduceRequest {
    let records: Vec<_> = (0..count)
        .map(|i| {
            let value = format!("reading {}", sequence + i);
            common::kafka::record(producer, sequence + i, value.into())
        })
        .collect();
    let batch = common::record_batch(&records).unwrap();
    common::kafka::produce_request("sensors", 1, batch)
}

/// Sends `request` on a new connection: the partition's error code and base offset.
async fn produce_once(
    kafka: u16,
    hub: &Hub,
    request: &kafka_protocol::messages::ProduceRequest,
) -> (i16, i64) {
    let address: std::net::SocketAddr = ([127, 0, 0, 1], kafka).into();
    let mut client = common::KafkaConnection::open(address, &hub.connection_string(KEY))
        .await
        .unwrap();
    let response = client.call(request, 9).await.unwrap();
    let partition = &response.responses[0].partition_responses[0];
    (partition.error_code, partition.base_offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_retry_after_kill_9_of_the_hub_is_not_stored_twice() {
    let data = tempfile::tempdir().unwrap();
    let (port, kafka) = (free_port(), free_port());
    let start = || start_kafka_only(port, kafka, data.path(), "sensors:2");
    let producer = 1_700_000_000_123;
    let mut hub = start();
    let (code, first) = produce_once(kafka, &hub, &idempotent_batch(producer, 0, 3)).await;
    assert_eq!((code, first), (0, 0), "the first batch");
    let (code, retried) = produce_once(kafka, &hub, &idempotent_batch(producer, 0, 3)).await;
    assert_eq!((code, retried), (0, 0), "a retry while the hub runs");

    // The hub is killed after acknowledging; the producer, not having heard, retries.
    hub.kill_9();
    let hub = start();
    let (code, retried) = produce_once(kafka, &hub, &idempotent_batch(producer, 0, 3)).await;
    assert_eq!(
        (code, retried),
        (0, 0),
        "a retry after the restart gets the first answer"
    );
    let (code, next) = produce_once(kafka, &hub, &idempotent_batch(producer, 3, 2)).await;
    assert_eq!(
        (code, next),
        (0, 3),
        "the next batch follows the first, stored once"
    );
    let (code, _) = produce_once(kafka, &hub, &idempotent_batch(producer, 9, 1)).await;
    assert_eq!(
        code,
        kafka_protocol::error::ResponseError::OutOfOrderSequenceNumber.code(),
        "a gap in the sequence after the restart"
    );
}

#[test]
fn mixed_load_loses_and_duplicates_no_acknowledged_record_through_kill_9() {
    common::require!(Tool::PythonSdk, Tool::KafkaClients);
    let data = tempfile::tempdir().unwrap();
    let (port, kafka) = (free_port(), free_port());
    let start = || start_kafka_only(port, kafka, data.path(), "mixed:4");
    let mut hub = start();
    let cs = hub.connection_string(KEY);
    let bootstrap = format!("127.0.0.1:{kafka}");
    let acked = format!("{}/acked-", data.path().display());

    // Both producers at full speed for 8 s, each in a process of its own; the hub killed 4 s
    // in, and started again.
    let script = common::repository().join("tests/python/mixed_load_peer.py");
    let loads: Vec<Child> = ["kafka", "amqp"]
        .into_iter()
        .map(|protocol| {
            Command::new(common::python())
                .arg(&script)
                .args([&format!("load-{protocol}"), &cs, &bootstrap, "mixed", "8"])
                .arg(format!("{acked}{protocol}.json"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("python starts")
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_secs(4));
    hub.kill_9();
    let _hub = start();
    for load in loads {
        eprintln!("a producer through kill -9: {}", finished(load));
    }

    let verified = common::python_json(
        "mixed_load_peer.py",
        &["verify", &cs, &bootstrap, "mixed", "4", &acked],
    );
    eprintln!(
        "{} Kafka records and {} AMQP events acknowledged, {} stored",
        verified["kafka_acked"], verified["amqp_acked"], verified["stored"]
    );
    assert_eq!(verified["read_to_the_end"], true, "{verified}");
    assert!(
        verified["kafka_acked"].as_u64().unwrap() > 1_000,
        "{verified}"
    );
    assert!(
        verified["amqp_acked"].as_u64().unwrap() > 1_000,
        "{verified}"
    );
    assert_eq!(verified["kafka_lost"], serde_json::json!([]), "{verified}");
    assert_eq!(verified["amqp_lost"], serde_json::json!([]), "{verified}");
    // Idempotent Kafka: nothing twice. AMQP is at least once, as on Event Hubs: a batch
    // stored just before the kill and retried by the SDK after it is stored twice, at most
    // the one batch in flight (100 events).
    assert_eq!(
        verified["kafka_duplicated"],
        serde_json::json!([]),
        "{verified}"
    );
    let amqp_twice = verified["amqp_duplicated"].as_array().unwrap().len();
    assert!(amqp_twice <= 100, "{verified}");
}

/// ListGroups and DescribeGroups, as the admin clients send them: a group with commits only is
/// `Empty`, an unknown one `Dead`, and a connection string scoped to another hub neither lists
/// nor describes the group (kafka-clients' admin client is tested against them in
/// `tests/clients/kafka_java.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_listed_and_described_only_to_clients_that_reach_their_hubs() {
    use kafka_protocol::messages::{
        DescribeGroupsRequest, GroupId, ListGroupsRequest, OffsetCommitRequest, TopicName,
        offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic},
    };
    use kafka_protocol::protocol::StrBytes;
    let data = tempfile::tempdir().unwrap();
    let (port, kafka) = (free_port(), free_port());
    let hub = Hub::start_serving(
        port,
        Some(data.path()),
        &["sensors:2", "alarms:2"],
        &["--kafka-port", &kafka.to_string()],
    );
    wait_for_port(kafka, "the Kafka endpoint");
    let address: std::net::SocketAddr = ([127, 0, 0, 1], kafka).into();
    let root = hub.connection_string(KEY);
    let mut client = common::KafkaConnection::open(address, &root).await.unwrap();
    // A commit without membership (a consumer that assigns its partitions itself).
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("sensor-readers")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("sensors")))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(0),
                ]),
        ]);
    let committed = client.call(&commit, 8).await.unwrap();
    assert_eq!(committed.topics[0].partitions[0].error_code, 0);

    let listed = client.call(&ListGroupsRequest::default(), 5).await.unwrap();
    assert_eq!(listed.error_code, 0);
    let names: Vec<&str> = listed
        .groups
        .iter()
        .map(|g| g.group_id.0.as_str())
        .collect();
    assert_eq!(names, ["sensor-readers"]);
    assert_eq!(listed.groups[0].group_state.as_str(), "Empty");
    assert_eq!(listed.groups[0].protocol_type.as_str(), "consumer");
    let only_stable =
        ListGroupsRequest::default().with_states_filter(vec![StrBytes::from_static_str("Stable")]);
    assert!(
        client
            .call(&only_stable, 5)
            .await
            .unwrap()
            .groups
            .is_empty()
    );

    let describe = DescribeGroupsRequest::default().with_groups(vec![
        GroupId(StrBytes::from_static_str("sensor-readers")),
        GroupId(StrBytes::from_static_str("never-seen")),
    ]);
    let described = client.call(&describe, 5).await.unwrap();
    assert_eq!(described.groups[0].error_code, 0);
    assert_eq!(described.groups[0].group_state.as_str(), "Empty");
    assert!(described.groups[0].members.is_empty());
    assert_eq!(described.groups[1].error_code, 0);
    assert_eq!(described.groups[1].group_state.as_str(), "Dead");

    // A connection string for the alarms hub only: the sensors group is none of its business.
    let scoped = format!("{root}EntityPath=alarms");
    let mut other = common::KafkaConnection::open(address, &scoped)
        .await
        .unwrap();
    let listed = other.call(&ListGroupsRequest::default(), 5).await.unwrap();
    assert!(listed.groups.is_empty(), "{listed:?}");
    let described = other.call(&describe, 5).await.unwrap();
    assert_eq!(
        described.groups[0].error_code,
        kafka_protocol::error::ResponseError::GroupAuthorizationFailed.code()
    );
}

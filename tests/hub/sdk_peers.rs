//! `hubhost hub` against the official SDKs, as real peers over AMQP: the Python `azure-eventhub`
//! package (producer, consumer, checkpointed consumer, owner levels, wrong key) and the Rust
//! `azure_messaging_eventhubs` client, plus a `kill -9` of the hub between send and receive.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use common::{Hub, KEY};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use azure_messaging_eventhubs::{
    ConsumerClient, OpenReceiverOptions, ProducerClient, StartLocation, StartPosition,
};
use futures::StreamExt;
use serde_json::Value;

/// Checks a receive: every sent index exactly once, per partition contiguous sequence numbers from
/// 0 with increasing offsets, one partition per partition key.
fn assert_exactly_once(events: &[Value], sent: u64, tag: &str) {
    let indexes: Vec<u64> = events
        .iter()
        .filter(|e| e["tag"] == tag)
        .map(|e| e["i"].as_u64().expect("i"))
        .collect();
    let unique: BTreeSet<u64> = indexes.iter().copied().collect();
    assert_eq!(indexes.len(), unique.len(), "duplicates");
    assert_eq!(unique, (0..sent).collect(), "missing events");
    assert_partitions_contiguous(events);
}

/// Per partition, contiguous sequence numbers from 0 with increasing offsets; one partition per
/// partition key.
fn assert_partitions_contiguous(events: &[Value]) {
    let mut by_partition: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    let mut key_partition: BTreeMap<String, String> = BTreeMap::new();
    for e in events {
        let partition = e["partition"].as_str().unwrap().to_string();
        let offset: i64 = e["offset"].as_str().unwrap().parse().unwrap();
        by_partition
            .entry(partition.clone())
            .or_default()
            .push((e["sequence"].as_i64().unwrap(), offset));
        if let Some(key) = e["key"].as_str() {
            let first = key_partition
                .entry(key.to_string())
                .or_insert(partition.clone());
            assert_eq!(*first, partition, "key {key} on two partitions");
        }
    }
    for (partition, mut seqs) in by_partition {
        seqs.sort();
        for (i, (seq, offset)) in seqs.iter().enumerate() {
            assert_eq!(*seq, i as i64, "partition {partition} sequence gap");
            if i > 0 {
                assert!(*offset > seqs[i - 1].1, "partition {partition} offsets");
            }
        }
    }
}

#[test]
fn python_producer_and_consumers_get_every_event_once_per_consumer_group() {
    common::require!(Tool::PythonSdk);
    let hub = Hub::start(None);
    let props = hub.python("props", &[]);
    assert_eq!(props["partition_ids"].as_array().unwrap().len(), 16);
    assert!(
        props["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["empty"] == true)
    );

    assert_eq!(hub.python("send", &["600", "25", "py"])["sent"], 600);
    for group in ["$Default", "archive"] {
        let events = hub.python("receive", &[group, "600", "60"]);
        let events = events.as_array().unwrap();
        assert_eq!(events.len(), 600, "group {group}");
        assert_exactly_once(events, 600, "py");
        // Bodies and partition keys round-trip.
        for e in events {
            let body: Value = serde_json::from_str(e["body"].as_str().unwrap()).unwrap();
            assert_eq!(body["i"], e["i"]);
            assert_eq!(body["home"], e["key"]);
        }
    }

    // Partition properties agree with what was received.
    let props = hub.python("props", &[]);
    let total: i64 = props["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["last"].as_i64().unwrap() + 1)
        .sum();
    assert_eq!(total, 600);

    // An unknown consumer group is refused.
    let cs = hub.connection_string(KEY);
    let out = common::python_output(
        "eventhub_peer.py",
        &[&cs, "sensors", "receive", "nosuchgroup", "1", "5"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "[]");
}

#[test]
fn a_wrong_key_is_refused_with_401() {
    common::require!(Tool::PythonSdk);
    let hub = Hub::start(None);
    let cs = hub.connection_string("not-the-key");
    let out = common::python_output("eventhub_peer.py", &[&cs, "sensors", "props"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("401"), "{stderr}");
    assert!(stderr.contains("signature does not match"), "{stderr}");
    assert!(
        !stderr.contains(KEY),
        "the key must not be echoed: {stderr}"
    );
}

/// A connection string carrying a SAS token (as users hand out instead of keys): one that
/// expired is refused at `$cbs` with 401 and the reason; the same token still valid works.
#[test]
fn an_expired_token_is_refused_and_a_valid_one_accepted() {
    common::require!(Tool::PythonSdk);
    let hub = Hub::start(None);
    let key = hubhost_hub::sas::SharedAccessKey::emulator();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let run = |expires_at: i64| {
        let resource = format!("sb://localhost:{}/sensors", hub.port);
        let token = hubhost_hub::sas::sign(&resource, &key, expires_at);
        let cs = format!(
            "Endpoint=sb://localhost:{};SharedAccessSignature={token};EntityPath=sensors;UseDevelopmentEmulator=true;",
            hub.port
        );
        common::python_output("eventhub_peer.py", &[&cs, "sensors", "props"])
    };
    let expired = run(now - 60);
    assert!(!expired.status.success());
    let stderr = String::from_utf8_lossy(&expired.stderr);
    assert!(stderr.contains("401"), "{stderr}");
    assert!(stderr.contains("expired"), "{stderr}");
    let valid = run(now + 3600);
    assert!(
        valid.status.success(),
        "{}",
        String::from_utf8_lossy(&valid.stderr)
    );
    let props: Value = serde_json::from_slice(&valid.stdout).unwrap();
    assert_eq!(props["partition_ids"].as_array().unwrap().len(), 16);
}

#[test]
fn a_higher_owner_level_steals_the_partition() {
    common::require!(Tool::PythonSdk);
    let hub = Hub::start(None);
    hub.python("send-to", &["0", "3", "steal"]);
    let out = hub.python("steal", &["0", "3"]);
    let errors = out["errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e["consumer"] == "first"
            && e["message"].as_str().unwrap().contains("amqp:link:stolen")),
        "{out}"
    );
    assert!(
        errors.iter().all(|e| e["consumer"] != "second"),
        "the newer owner keeps reading: {out}"
    );
    assert_eq!(out["received"]["first"], 3, "{out}");
}

#[test]
fn acknowledged_events_survive_kill_9_of_the_hub() {
    common::require!(Tool::PythonSdk);
    let dir = tempfile::tempdir().unwrap();
    let mut hub = Hub::start(Some(dir.path()));
    assert_eq!(hub.python("send", &["500", "20", "durable"])["sent"], 500);
    let port = hub.port;
    hub.kill_9();
    let hub = Hub::start_on(port, Some(dir.path()));
    let events = hub.python("receive", &["$Default", "500", "60"]);
    assert_exactly_once(events.as_array().unwrap(), 500, "durable");
    // Appends continue after the restart, numbered after the recovered ones.
    hub.python("send-to", &["0", "2", "after"]);
    let props = hub.python("props", &[]);
    let p0 = &props["partitions"][0];
    assert!(p0["last"].as_i64().unwrap() >= 1);
}

#[test]
fn hubs_and_consumer_groups_added_while_the_hub_runs_survive_a_restart() {
    common::require!(Tool::PythonSdk);
    let dir = tempfile::tempdir().unwrap();
    let admin_port = common::free_port().to_string();
    let admin = format!("http://127.0.0.1:{admin_port}");
    let flags = ["--admin-port", admin_port.as_str()];
    let mut hub = Hub::start_serving(common::free_port(), Some(dir.path()), &[], &flags);
    // The CLI finds the hub's admin token in the data directory it is given.
    let data_dir = dir.path().to_str().unwrap();
    let action = |args: &[&str]| {
        let mut all = vec!["hub"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--admin", &admin, "--data-dir", data_dir]);
        common::hubhost(&all, &[])
    };
    let (code, out, err) = action(&["add-hub", "orders:3:team"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        "added orders: 3 partitions, consumer groups $default, team"
    );
    let (code, _, err) = action(&["add-consumer-group", "sensors", "audit"]);
    assert_eq!(code, 0, "{err}");
    // The SDK uses both at once, as if they had been configured.
    let cs = hub.connection_string(common::KEY);
    let peer = |hub_name: &str, args: &[&str]| {
        let mut all = vec![cs.as_str(), hub_name];
        all.extend_from_slice(args);
        common::python_json("eventhub_peer.py", &all)
    };
    assert_eq!(peer("orders", &["send", "30", "5", "added"])["sent"], 30);
    let events = peer("orders", &["receive", "team", "30", "60"]);
    assert_exactly_once(events.as_array().unwrap(), 30, "added");
    assert_eq!(
        peer("orders", &["props"])["partition_ids"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // kill -9, then the same data directory: the additions and their events are there.
    let port = hub.port;
    hub.kill_9();
    let _hub = Hub::start_serving(port, Some(dir.path()), &[], &flags);
    let (code, out, err) = action(&["list", "--json"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let groups_of = |name: &str| -> Vec<String> {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"] == name)
            .unwrap_or_else(|| panic!("no hub {name} after the restart: {listed:#}"))["consumerGroups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(groups_of("orders"), ["$default", "team"]);
    assert_eq!(groups_of("sensors"), ["$default", "archive", "audit"]);
    let events = peer("orders", &["receive", "team", "30", "60"]);
    assert_exactly_once(events.as_array().unwrap(), 30, "added");
    assert_eq!(peer("sensors", &["send", "10", "5", "audited"])["sent"], 10);
    let events = peer("sensors", &["receive", "audit", "10", "60"]);
    assert_exactly_once(events.as_array().unwrap(), 10, "audited");
}

/// The Rust SDK's clients on `hub`, through the custom-endpoint option (the SDK has no
/// development-emulator setting).
async fn rust_producer(hub: &Hub) -> ProducerClient {
    ProducerClient::builder()
        .with_custom_endpoint(format!("amqp://127.0.0.1:{}", hub.port))
        .open_with_connection_string(&hub.connection_string(KEY), Some("sensors"))
        .await
        .expect("producer opens")
}

async fn rust_consumer(hub: &Hub) -> ConsumerClient {
    ConsumerClient::builder()
        .with_custom_endpoint(format!("amqp://127.0.0.1:{}", hub.port))
        .open_with_connection_string(&hub.connection_string(KEY), Some("sensors"))
        .await
        .expect("consumer opens")
}

#[tokio::test]
async fn the_rust_client_sends_and_receives_through_its_custom_endpoint() {
    common::require!(Tool::PythonSdk);
    let hub = Hub::start(None);
    let producer = rust_producer(&hub).await;
    let properties = producer.get_eventhub_properties().await.unwrap();
    assert_eq!(properties.partition_ids.len(), 16);
    let batch = producer
        .create_batch(Some(azure_messaging_eventhubs::EventDataBatchOptions {
            partition_id: Some("7".into()),
            ..Default::default()
        }))
        .await
        .unwrap();
    for i in 0..20 {
        let event = azure_messaging_eventhubs::models::EventData::builder()
            .with_body(format!("rust-{i}").into_bytes())
            .add_property("i".to_string(), i as i64)
            .build();
        assert!(batch.try_add_event_data(event, None).unwrap());
    }
    producer.send_batch(batch, None).await.expect("batch sent");
    let partition = producer.get_partition_properties("7").await.unwrap();
    assert_eq!(partition.last_enqueued_sequence_number, 19);
    assert!(!partition.is_empty);

    let consumer = rust_consumer(&hub).await;
    let receiver = consumer
        .open_receiver_on_partition(
            "7".into(),
            Some(OpenReceiverOptions {
                start_position: Some(StartPosition {
                    location: StartLocation::SequenceNumber(4),
                    inclusive: false,
                }),
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    let mut stream = receiver.stream_events().take(15);
    let mut seen = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .expect("events arrive")
    {
        let event = event.unwrap();
        let body = String::from_utf8(event.event_data().body().unwrap().to_vec()).unwrap();
        seen.push((event.sequence_number().unwrap(), body));
    }
    let expected: Vec<(i64, String)> = (5..20).map(|i| (i, format!("rust-{i}"))).collect();
    assert_eq!(seen, expected);

    // And the Python package reads what the Rust client wrote, properties included.
    let events = hub.python("receive", &["archive", "20", "30"]);
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 20);
    assert!(events.iter().all(|e| e["partition"] == "7"));
    let mut indexes: Vec<i64> = events.iter().map(|e| e["i"].as_i64().unwrap()).collect();
    indexes.sort();
    assert_eq!(indexes, (0..20).collect::<Vec<_>>());
}

/// Events up to the 1 MB limit travel in several frames each way and arrive whole, in both SDKs;
/// a larger one is refused and the hub carries on.
#[tokio::test]
async fn events_up_to_one_megabyte_arrive_whole_and_larger_ones_are_refused() {
    common::require!(Tool::PythonSdk);
    let hub = Hub::start(None);
    let producer = rust_producer(&hub).await;
    // Bodies of distinct bytes, so that a lost, doubled or misplaced frame shows.
    let body = |len: usize, seed: u8| -> Vec<u8> {
        (0..len)
            .map(|i| b'a' + ((i / 7 + seed as usize) % 26) as u8)
            .collect()
    };
    // The first is as large as a send may be, less the SDK's few bytes of envelope: the stamps
    // take it past 1 MiB on its way out, which must not stop the partition.
    let sizes = [1024 * 1024 - 128, 300_000, 70_000, 10];
    for (seed, len) in sizes.iter().enumerate() {
        let event = azure_messaging_eventhubs::models::EventData::builder()
            .with_body(body(*len, seed as u8))
            .add_property("i".to_string(), seed as i64)
            .add_property("tag".to_string(), "big")
            .build();
        producer
            .send_event(
                event,
                Some(azure_messaging_eventhubs::SendEventOptions {
                    partition_id: Some("3".into()),
                }),
            )
            .await
            .unwrap_or_else(|e| panic!("a {len}-byte event is accepted: {e}"));
    }

    let consumer = rust_consumer(&hub).await;
    let receiver = consumer
        .open_receiver_on_partition(
            "3".into(),
            Some(OpenReceiverOptions {
                start_position: Some(StartPosition {
                    location: StartLocation::Earliest,
                    inclusive: true,
                }),
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    let mut stream = receiver.stream_events().take(sizes.len());
    let mut sequence = 0;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .expect("events arrive")
    {
        let event = event.unwrap();
        let seed = sequence as usize;
        assert_eq!(event.sequence_number(), Some(sequence));
        assert!(
            event.event_data().body() == Some(&body(sizes[seed], seed as u8)[..]),
            "event {seed} ({} bytes) arrived whole",
            sizes[seed]
        );
        sequence += 1;
    }
    assert_eq!(sequence, sizes.len() as i64);

    // The Python package reads them whole too.
    let events = hub.python("receive", &["archive", "4", "60"]);
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), sizes.len());
    for e in events {
        let seed = e["i"].as_u64().unwrap() as usize;
        assert_eq!(e["sequence"].as_u64(), Some(seed as u64));
        assert_eq!(
            e["body"].as_str().unwrap().as_bytes(),
            &body(sizes[seed], seed as u8)[..],
            "event {seed} in Python"
        );
    }

    // 1 MiB + 1 byte is refused: the hub detaches the sending link with
    // amqp:link:message-size-exceeded (the Python package reports a failed send), and is still
    // there for the next send.
    let refused = hub.python("oversize", &[]);
    assert_eq!(refused["refused"], true, "{refused}");
    assert_eq!(refused["type"], "EventDataSendError", "{refused}");
    assert_eq!(hub.python("send-to", &["0", "2", "after"])["sent"], 2);
    let partition = producer.get_partition_properties("0").await.unwrap();
    assert_eq!(
        partition.last_enqueued_sequence_number, 1,
        "partition 0 holds the two later events and nothing of the refused one"
    );
}

#[test]
fn python_checkpointed_consumption_resumes_after_its_checkpoints() {
    common::require!(Tool::Azurite, Tool::PythonSdk);
    let hub = Hub::start(None);
    let azurite = common::Azurite::start();
    let storage = azurite.connection_string();
    // The container must exist for the Python store; creating it through hubhost's own client.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let location = hubhost_storage::StorageLocation::parse(&storage).unwrap();
        let store = location.open().unwrap();
        store.ensure_container("checkpoints").await.unwrap();
    });
    hub.python("send", &["200", "20", "first"]);
    let first = hub.python(
        "receive-checkpointed",
        &["$Default", "200", "60", &storage, "checkpoints"],
    );
    assert_exactly_once(first.as_array().unwrap(), 200, "first");
    hub.python("send", &["100", "20", "second"]);
    // A new client with the same store starts after the checkpoints: only the new events.
    let second = hub.python(
        "receive-checkpointed",
        &["$Default", "100", "60", &storage, "checkpoints"],
    );
    let second = second.as_array().unwrap();
    assert!(
        second.iter().all(|e| e["tag"] == "second"),
        "replayed old events"
    );
    let unique: BTreeSet<u64> = second.iter().map(|e| e["i"].as_u64().unwrap()).collect();
    assert_eq!(unique, (0..100).collect());
}

/// Runs `hubhost simulate` against `hub` and returns its JSON summary.
fn simulate(hub: &Hub, args: &[&str]) -> Value {
    let cs = hub.connection_string(KEY);
    let mut all = vec!["simulate", "--connection", &cs, "--json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = common::hubhost(&all, &[]);
    assert_eq!(code, 0, "simulate failed: {stderr}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn simulate_sends_the_fleet_keyed_by_home_and_a_consumer_gets_exactly_those_readings() {
    common::require!(Tool::PythonSdk);
    use hubhost_app::fleet::{Fleet, SENSORS};
    let hub = Hub::start(None);
    let (homes, minutes, start) = (40u32, 2u32, "2026-11-22T10:00:00Z");
    let summary = simulate(
        &hub,
        &[
            "--homes",
            &homes.to_string(),
            "--minutes",
            &minutes.to_string(),
            "--start",
            start,
            "--seed",
            "9",
            "--unthrottled",
        ],
    );
    let expected = u64::from(homes * minutes) * SENSORS.len() as u64;
    assert_eq!(summary["events"], expected);
    assert_eq!(summary["failed"], 0);
    let gained: i64 = summary["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["events"].as_i64().unwrap())
        .sum();
    assert_eq!(gained as u64, expected, "the hub's own counts agree");

    // Regenerate what the fleet sent and compare with what a Python consumer received.
    let fleet = Fleet {
        homes,
        partitions: 16,
        seed: 9,
    };
    let start = chrono::DateTime::parse_from_rfc3339(start)
        .unwrap()
        .with_timezone(&chrono::Utc);
    let mut want: Vec<(String, String)> = Vec::new();
    for minute in 0..minutes {
        for home in 0..homes {
            let id = Fleet::home_id(home);
            for sensor in 0..SENSORS.len() {
                let t = start + chrono::Duration::minutes(i64::from(minute));
                want.push((id.clone(), fleet.reading(&id, sensor, t)));
            }
        }
    }
    let received = hub.python("receive", &["$Default", &expected.to_string(), "60"]);
    let received = received.as_array().unwrap();
    assert_partitions_contiguous(received);
    let mut got: Vec<(String, String)> = received
        .iter()
        .map(|e| {
            let key = e["key"]
                .as_str()
                .expect("every reading has a partition key");
            let body: Value = serde_json::from_str(e["body"].as_str().unwrap()).unwrap();
            assert_eq!(body["homeId"], key, "partition key = home id");
            let partition: usize = e["partition"].as_str().unwrap().parse().unwrap();
            assert_eq!(
                partition,
                hubhost_hub::partition_key::partition_for_key(key, 16),
                "the service's hash places {key}"
            );
            (key.to_string(), e["body"].as_str().unwrap().to_string())
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn simulate_paces_the_fleet_by_its_speed_up() {
    let hub = Hub::start(None);
    // 100 homes report once a simulated minute; at 120× the last report of the minute is due
    // after 59.4 s / 120 = 0.495 s of wall time.
    let summary = simulate(
        &hub,
        &["--homes", "100", "--minutes", "1", "--speed-up", "120"],
    );
    assert_eq!(summary["events"], 800);
    let seconds = summary["seconds"].as_f64().unwrap();
    assert!(seconds >= 0.45, "paced run took only {seconds} s");
}

/// Ctrl-C ends `simulate` in bounded time even when the event hub stops answering (frozen
/// with SIGSTOP while events flow): the events it sent last are reported as unanswered, a
/// warning rather than a failure after an interrupt, and the process exits cleanly. The
/// SDK's flush alone would wait for their answers for as long as the hub is frozen.
#[test]
fn an_interrupted_simulator_ends_even_when_the_hub_stops_answering() {
    let hub = Hub::start(None);
    let cs = hub.connection_string(KEY);
    let mut simulator = std::process::Command::new(common::binary("hubhost"))
        .args(["simulate", "--homes", "500", "--rate", "800", "--json"])
        .args(["--connection", &cs])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let signal = |pid: u32, signal: i32| {
        // SAFETY: kill(2) on a child process this test started and has not reaped.
        assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
    };
    signal(hub.child.id(), libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(1));
    let interrupted = std::time::Instant::now();
    signal(simulator.id(), libc::SIGINT);
    let status = common::wait_within(&mut simulator, Duration::from_secs(60), "the simulator");
    let took = interrupted.elapsed();
    signal(hub.child.id(), libc::SIGCONT);
    let mut stdout = String::new();
    let mut stderr = String::new();
    use std::io::Read;
    simulator
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    simulator
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        took < hubhost_simulate::FLUSH_TIMEOUT + Duration::from_secs(30),
        "the simulator took {took:?} to end after SIGINT"
    );
    let summary: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(summary["events"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["unanswered"].as_u64().unwrap() > 0, "{summary}");
    assert!(stderr.contains("no answer from the event hub"), "{stderr}");
}

#[test]
fn checkpoints_reset_to_end_and_to_a_time_use_the_hubs_own_positions() {
    common::require!(Tool::PythonSdk);
    let hub = Hub::start(None);
    let store = tempfile::tempdir().unwrap();
    hub.python("send-to", &["0", "5", "old"]);
    std::thread::sleep(Duration::from_millis(1100));
    let between = chrono::Utc::now();
    std::thread::sleep(Duration::from_millis(1100));
    hub.python("send-to", &["0", "3", "new"]);
    let events = hub.python("receive", &["$Default", "8", "30"]);
    let offset_of = |seq: i64| {
        events
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["sequence"] == seq)
            .map(|e| e["offset"].as_str().unwrap().to_string())
            .expect("event received")
    };
    let cs = hub.connection_string(KEY);
    let path = store.path().to_str().unwrap().to_string();
    let checkpoints = |args: &[&str]| -> Value {
        let mut all = vec!["checkpoints"];
        all.extend_from_slice(args);
        all.extend([
            "--storage",
            &path,
            "--namespace",
            "localhost",
            "--hub",
            "sensors",
            "--json",
        ]);
        let (code, stdout, stderr) = common::hubhost(&all, &[]);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert!(!stderr.contains(KEY), "the key reached the output");
        serde_json::from_str(&stdout).unwrap()
    };
    let reset = |to: &str| checkpoints(&["reset", "--connection", &cs, "--to", to, "--yes"]);
    let partition = |written: &Value, id: &str| {
        let p = written
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["partitionId"] == id)
            .cloned()
            .unwrap();
        (
            p["sequenceNumber"].as_i64().unwrap(),
            p["offset"].as_str().unwrap().to_string(),
        )
    };

    // End: the last event of each partition; an empty partition starts from its beginning.
    let written = reset("end");
    assert_eq!(
        written.as_array().unwrap().len(),
        16,
        "every partition of the hub"
    );
    assert_eq!(partition(&written, "0"), (7, offset_of(7)));
    assert_eq!(partition(&written, "5"), (-1, "-1".to_string()));

    // A time between the two sends: the last "old" event, so consumers go on with the new ones.
    let written = reset(&between.to_rfc3339());
    assert_eq!(partition(&written, "0"), (4, offset_of(4)));
    // Before every event: the start.
    let written = reset("2020-01-01T00:00:00Z");
    assert_eq!(partition(&written, "0"), (-1, "-1".to_string()));

    // What `list` reads back is the last reset.
    let listed = checkpoints(&["list"]);
    assert_eq!(partition(&listed, "0"), (-1, "-1".to_string()));
}

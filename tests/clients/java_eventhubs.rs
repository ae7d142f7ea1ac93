//! The official Java Event Hubs SDK (`com.azure:azure-messaging-eventhubs` 5.21.5, on Proton-J
//! and Reactor) against `hubhost hub`: a producer by partition id, by partition key and with a
//! batch filled to the size limit; a consumer from every kind of position, with the last
//! enqueued event's properties; the same over AMQPS trusting the hub's authority and over
//! WebSockets; and two `EventProcessorClient`s with the blob checkpoint store
//! (`azure-messaging-eventhubs-checkpointstore-blob` 1.21.5) on Azurite sharing the partitions,
//! one killed with `kill -9` and the other taking its partitions over from the checkpoints,
//! which `hubhost checkpoints list` then reads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use common::{Hub, KEY, free_port, wait_for_port};
use serde_json::{Value, json};

use crate::{
    Background, checkpoint_container, handled, handled_tag, held, listed_checkpoints, wait_until,
};

/// The versions the jars in `.tools/java/eventhubs` are (tests/java/eventhubs-pom.xml).
const SDK: &str = "azure-messaging-eventhubs 5.21.5";

/// `java` running tests/java/EventHubsPeer.java with the SDK's jars, `options` its first
/// argument.
fn java(options: &Value, op: &str, args: &[&str]) -> Command {
    java_with(&[], options, op, args)
}

/// [`java`] with options for the JVM (system properties) before the program.
fn java_with(jvm: &[String], options: &Value, op: &str, args: &[&str]) -> Command {
    let mut command = Command::new("java");
    command
        .args(jvm)
        .arg("-cp")
        .arg(format!(
            "{}/*",
            common::java_libraries("eventhubs").display()
        ))
        .arg(common::repository().join("tests/java/EventHubsPeer.java"))
        .arg(options.to_string())
        .arg(op)
        .args(args);
    command
}

fn java_json(options: &Value, op: &str, args: &[&str]) -> Value {
    let out = common::output_within(&mut java(options, op, args), common::COMMAND_LIMIT);
    common::json_output(&format!("the Java SDK's {op} ({SDK})"), &out)
}

fn emulator_options(hub: &Hub, name: &str) -> Value {
    json!({"connectionString": hub.connection_string(KEY), "hub": name})
}

fn bodies(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["body"].as_str().unwrap().to_string())
        .collect()
}

/// Every event of every partition the Java consumer reads from the start.
fn read_all(options: &Value, properties: &Value) -> BTreeMap<String, Value> {
    let mut all = BTreeMap::new();
    for partition in properties["partitions"].as_array().unwrap() {
        let count = partition["last_sequence"].as_i64().unwrap() + 1;
        if count == 0 {
            continue;
        }
        let id = partition["id"].as_str().unwrap();
        let read = java_json(
            options,
            "receive",
            &[id, "earliest", &count.to_string(), "60"],
        );
        all.insert(id.to_string(), read);
    }
    all
}

#[test]
fn the_java_sdk_sends_by_partition_id_and_key_and_fills_a_batch_to_the_hubs_limit() {
    common::require!(Tool::JavaSdk);
    let hub = Hub::start(None);
    let options = emulator_options(&hub, "sensors");
    let sent = java_json(&options, "produce", &["j"]);
    // The batch's limit is the one the hub advertised on the link (Event Hubs' 1 MB), and the
    // SDK filled it to within one event.
    assert_eq!(sent["max_batch_bytes"], 1024 * 1024, "{sent}");
    let full = sent["full_batch_events"].as_u64().unwrap();
    assert!(
        sent["full_batch_bytes"].as_u64().unwrap() > 1024 * 1024 - 2 * 1100,
        "{sent}"
    );

    let properties = java_json(&options, "properties", &[]);
    assert_eq!(properties["name"], "sensors");
    assert_eq!(
        properties["partition_ids"].as_array().unwrap().len(),
        16,
        "{properties}"
    );
    let all = read_all(&options, &properties);

    // By id: partition 0, in order, properties intact.
    let zero = &all["0"]["events"];
    let by_id: Vec<&Value> = zero
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["body"].as_str().unwrap().starts_with("j-id-"))
        .collect();
    assert_eq!(by_id.len(), 3, "{zero}");
    for (i, event) in by_id.iter().enumerate() {
        assert_eq!(event["body"], format!("j-id-{i}"));
        assert_eq!(event["properties"]["i"], i, "{event}");
        assert_eq!(event["properties"]["tag"], "j", "{event}");
    }
    // By key: all five in one partition, in order, each carrying the key.
    let keyed: Vec<(&String, &Value)> = all
        .iter()
        .flat_map(|(id, read)| {
            read["events"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["partition_key"] == "j-home")
                .map(move |e| (id, e))
        })
        .collect();
    assert_eq!(keyed.len(), 5, "{all:?}");
    assert!(keyed.iter().all(|(id, _)| *id == keyed[0].0), "{keyed:?}");
    let keyed_bodies: Vec<&str> = keyed
        .iter()
        .map(|(_, e)| e["body"].as_str().unwrap())
        .collect();
    assert_eq!(
        keyed_bodies,
        (0..5).map(|i| format!("j-key-{i}")).collect::<Vec<_>>()
    );
    // The full batch: every event whole, in order, on partition 1.
    let one = bodies(&all["1"]["events"]);
    assert_eq!(one.len() as u64, full);
    for (i, body) in one.iter().enumerate() {
        assert!(body.starts_with(&format!("j-full-{i}-")), "{i}");
        assert_eq!(body.len(), format!("j-full-{i}-").len() + 1024);
    }

    // One event over the limit: the SDK refuses it before sending, from the hub's limit.
    let oversized = java_json(&options, "oversized", &[]);
    assert_eq!(oversized["added"], false, "{oversized}");
    assert_eq!(oversized["max_batch_bytes"], 1024 * 1024, "{oversized}");
}

#[test]
fn the_java_sdk_reads_from_every_kind_of_position_with_the_last_enqueued_events_properties() {
    common::require!(Tool::JavaSdk);
    let hub = Hub::start(None);
    let options = emulator_options(&hub, "sensors");
    java_json(&options, "produce", &["p"]);
    let everything = java_json(&options, "receive", &["0", "earliest", "3", "60"]);
    let events = everything["events"].as_array().unwrap();
    assert_eq!(
        bodies(&everything["events"]),
        ["p-id-0", "p-id-1", "p-id-2"]
    );
    let partition = &everything["partition"];
    for event in events {
        let last = &event["last_enqueued"];
        assert_eq!(last["sequence"], partition["last_sequence"], "{event}");
        assert_eq!(last["offset"], partition["last_offset"], "{event}");
        assert_eq!(last["enqueued"], partition["last_enqueued"], "{event}");
        assert!(
            last["retrieved"].as_str().unwrap() >= last["enqueued"].as_str().unwrap(),
            "{event}"
        );
    }
    let first_offset = events[0]["offset"].as_str().unwrap();
    let first_enqueued = events[0]["enqueued"].as_str().unwrap();
    // Each position with what the service gives: a sequence number or an offset excludes its
    // event unless inclusive is asked for; an enqueued time gives the events after it.
    let cases = [
        ("seq:0".to_string(), vec!["p-id-1", "p-id-2"]),
        ("seq-inclusive:1".to_string(), vec!["p-id-1", "p-id-2"]),
        (format!("offset:{first_offset}"), vec!["p-id-1", "p-id-2"]),
        (
            "time:2020-01-01T00:00:00Z".to_string(),
            vec!["p-id-0", "p-id-1", "p-id-2"],
        ),
    ];
    for (position, expected) in cases {
        let read = java_json(
            &options,
            "receive",
            &["0", &position, &expected.len().to_string(), "60"],
        );
        assert_eq!(bodies(&read["events"]), expected, "{position}: {read}");
    }
    // After the newest event's time: nothing older.
    let later = java_json(
        &options,
        "receive",
        &["0", &format!("time:{first_enqueued}"), "0", "5"],
    );
    assert!(later["events"].as_array().unwrap().len() <= 2, "{later}");
    // "latest": only what is sent after the receiver attached.
    let latest = java_json(&options, "latest", &["0", "l"]);
    assert_eq!(
        bodies(&latest["events"]),
        ["l-after-0", "l-after-1"],
        "{latest}"
    );
}

/// A certificate authority and a localhost certificate, generated by the hub's own code, and a
/// PKCS#12 trust store holding the authority for the JVM (`keytool`, from the JDK).
fn tls_material(dir: &Path) -> (PathBuf, PathBuf) {
    let source = hubhost_hub::tls::CertificateSource::Generated {
        dir: dir.to_path_buf(),
    };
    hubhost_hub::tls::Identity::load(&source).expect("a certificate for localhost");
    let trust = dir.join("trust.p12");
    let out = common::output_within(
        Command::new("keytool")
            .args(["-importcert", "-noprompt", "-alias", "hubhost", "-file"])
            .arg(dir.join(hubhost_hub::tls::CA_FILE))
            .arg("-keystore")
            .arg(&trust)
            .args(["-storetype", "PKCS12", "-storepass", "changeit"]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "keytool: {out:?}");
    (dir.to_path_buf(), trust)
}

#[test]
fn the_java_sdk_reaches_the_hub_over_tls_and_websockets_trusting_its_authority() {
    common::require!(Tool::JavaSdk);
    let dir = tempfile::tempdir().unwrap();
    let (certs, trust) = tls_material(dir.path());
    let (tls_port, websocket_port) = (free_port(), free_port());
    let _hub = Hub::start_serving(
        free_port(),
        None,
        &["amqps:2", "wss:2"],
        &[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert",
            certs.join(hubhost_hub::tls::CERT_FILE).to_str().unwrap(),
            "--tls-key",
            certs.join(hubhost_hub::tls::KEY_FILE).to_str().unwrap(),
            "--websocket-port",
            &websocket_port.to_string(),
        ],
    );
    wait_for_port(tls_port, "the hub's AMQPS listener");
    wait_for_port(websocket_port, "the hub's WebSocket listener");
    // Without the emulator setting the SDK uses TLS and checks the certificate.
    let tls_connection = format!(
        "Endpoint=sb://localhost/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY}"
    );
    let trusting = [
        format!("-Djavax.net.ssl.trustStore={}", trust.display()),
        "-Djavax.net.ssl.trustStorePassword=changeit".to_string(),
    ];
    let cases = [
        (
            "amqps",
            json!({"connectionString": tls_connection, "hub": "amqps",
                   "customEndpoint": format!("sb://localhost:{tls_port}")}),
        ),
        (
            "wss",
            json!({"connectionString": tls_connection, "hub": "wss",
                   "customEndpoint": format!("https://localhost:{websocket_port}"),
                   "webSockets": true}),
        ),
    ];
    for (tag, options) in &cases {
        let mut produce = java_with(&trusting, options, "produce", &[tag]);
        let out = common::output_within(&mut produce, common::COMMAND_LIMIT);
        let sent = common::json_output(&format!("{tag}: the Java SDK's produce ({SDK})"), &out);
        assert_eq!(sent["max_batch_bytes"], 1024 * 1024, "{tag}: {sent}");
        let mut receive = java_with(&trusting, options, "receive", &["0", "earliest", "3", "60"]);
        let out = common::output_within(&mut receive, common::COMMAND_LIMIT);
        let read = common::json_output(&format!("{tag}: the Java SDK's receive ({SDK})"), &out);
        assert_eq!(
            bodies(&read["events"]),
            (0..3).map(|i| format!("{tag}-id-{i}")).collect::<Vec<_>>(),
            "{tag}: {read}"
        );
    }
    // Without the authority trusted, the TLS handshake fails: the SDK reports it, nothing is
    // sent.
    let mut untrusting = cases[0].1.clone();
    untrusting["tryTimeoutSeconds"] = json!(15);
    let refused = common::output_within(
        &mut java(&untrusting, "properties", &[]),
        Duration::from_secs(120),
    );
    assert!(!refused.status.success(), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("PKIX") || stderr.contains("certificate") || stderr.contains("SSL"),
        "{stderr}"
    );
}

#[test]
fn two_java_event_processors_share_the_partitions_and_one_takes_over_after_kill_9() {
    common::require!(Tool::JavaSdk, Tool::Azurite);
    let hub = Hub::start(None);
    let azurite = common::Azurite::start();
    let storage = azurite.connection_string();
    let container = "java-checkpoints";
    checkpoint_container(&storage, container);
    let options = emulator_options(&hub, "sensors");
    let logs = tempfile::tempdir().unwrap();
    let processor = |owner: &str| {
        Background::start(
            &mut java(&options, "process", &[owner, &storage, container, "600"]),
            logs.path(),
            owner,
        )
    };
    let per_round = 320u64;
    java_json(&options, "send", &[&per_round.to_string(), "first"]);

    // One processor takes every partition and handles every event.
    let mut a = processor("a");
    wait_until(
        "processor a holds all 16 partitions and handled the first round",
        &[&a],
        Duration::from_secs(120),
        |seen| held(&seen[0]).len() == 16 && handled_tag(seen, "first").len() as u64 == per_round,
    );

    // A second joins: the two settle at eight each, each partition held by one of them.
    let mut b = processor("b");
    wait_until(
        "the two processors hold eight partitions each",
        &[&a, &b],
        Duration::from_secs(120),
        |seen| {
            let (ha, hb) = (held(&seen[0]), held(&seen[1]));
            ha.len() == 8 && hb.len() == 8 && ha.is_disjoint(&hb)
        },
    );
    java_json(&options, "send", &[&per_round.to_string(), "second"]);
    wait_until(
        "the two processors handled the second round between them",
        &[&a, &b],
        Duration::from_secs(120),
        |seen| handled_tag(seen, "second").len() as u64 == per_round,
    );
    let b_held = held(&b.lines());
    let b_second: Vec<u64> = handled(&b.lines())
        .into_iter()
        .filter(|(t, _)| t == "second")
        .map(|(_, i)| i)
        .collect();
    assert!(!b_second.is_empty());

    // kill -9 of b: once its ownership expires, a takes its partitions over from b's
    // checkpoints and handles what is sent next.
    b.kill_9();
    let before_takeover = a.lines().len();
    java_json(&options, "send", &[&per_round.to_string(), "third"]);
    wait_until(
        "processor a took b's partitions over and handled the third round",
        &[&a],
        Duration::from_secs(180),
        |seen| held(&seen[0]).len() == 16 && handled_tag(seen, "third").len() as u64 == per_round,
    );
    // Nothing lost, few duplicates: b checkpointed each event it handled, so a replays at most
    // the one event per partition whose checkpoint was in flight.
    let after: Vec<(String, u64)> = handled(&a.lines()[before_takeover..]);
    let replayed = after.iter().filter(|(t, _)| t == "second").count();
    assert!(
        replayed <= b_held.len(),
        "a replayed {replayed} of b's events over {} partitions",
        b_held.len()
    );
    a.stop(Duration::from_secs(60));

    // What the Java store wrote, `hubhost checkpoints list` reads: every partition at its
    // newest event (the SDK checkpoints by sequence number only; see docs/conformance.md).
    let newest = java_json(&options, "properties", &[]);
    let listed = listed_checkpoints(&storage, container, "localhost", "sensors");
    for partition in newest["partitions"].as_array().unwrap() {
        let id = &partition["id"];
        let row = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|row| &row["partitionId"] == id)
            .unwrap_or_else(|| panic!("partition {id} listed: {listed}"));
        assert_eq!(row["source"], "checkpoint", "{row}");
        assert_eq!(
            row["sequenceNumber"], partition["last_sequence"],
            "partition {id}: {row}"
        );
    }
}

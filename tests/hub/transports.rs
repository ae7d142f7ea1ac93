//! `hubhost hub` the way clients reach Event Hubs beyond plain AMQP: over TLS (AMQPS), over
//! WebSockets (`ws` and `wss`), and with the last enqueued event's properties on each delivery.
//! The official Python package (sync and async clients), the JavaScript package and the Rust SDK
//! are the peers; wrong certificates and wrong keys are refused with the client's own error.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use common::{Hub, KEY, free_port, wait_for_port};
use serde_json::{Value, json};

const HUB: &str = "transports";

/// A certificate authority and a certificate for localhost that every hub of this file serves
/// through `--tls-cert`/`--tls-key` (the user-provided path), made once by the hub's own code.
/// The Rust SDK trusts the platform's roots, so `SSL_CERT_FILE` names this authority for the
/// whole test process (set once, before any TLS client exists).
fn shared_certificate() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let source = hubhost_hub::tls::CertificateSource::Generated { dir: dir.clone() };
        hubhost_hub::tls::Identity::load(&source).expect("a certificate for localhost");
        // SAFETY: set once, under this OnceLock; the test process reads its environment only
        // through std (which locks it) and starts no C code that calls getenv meanwhile.
        unsafe { std::env::set_var("SSL_CERT_FILE", dir.join(hubhost_hub::tls::CA_FILE)) };
        dir
    })
}

fn shared_ca() -> String {
    shared_certificate()
        .join(hubhost_hub::tls::CA_FILE)
        .display()
        .to_string()
}

/// A hub serving AMQP, AMQPS with the shared certificate, and WebSockets (`wss`, since TLS is on).
struct TlsHub {
    hub: Hub,
    tls_port: u16,
    websocket_port: u16,
}

fn start_tls_hub() -> TlsHub {
    let dir = shared_certificate();
    let (tls_port, websocket_port) = (free_port(), free_port());
    let cert = dir.join(hubhost_hub::tls::CERT_FILE).display().to_string();
    let key = dir.join(hubhost_hub::tls::KEY_FILE).display().to_string();
    let hub = Hub::start_serving(
        free_port(),
        None,
        &[&format!("{HUB}:2")],
        &[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--websocket-port",
            &websocket_port.to_string(),
        ],
    );
    wait_for_port(tls_port, "the hub's AMQPS listener");
    wait_for_port(websocket_port, "the hub's WebSocket listener");
    TlsHub {
        hub,
        tls_port,
        websocket_port,
    }
}

/// The connection string of a namespace reached over TLS: no emulator setting, so the SDKs
/// use TLS and check the certificate.
fn tls_connection_string(key: &str) -> String {
    format!(
        "Endpoint=sb://localhost/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={key}"
    )
}

fn peer(cs: &str, options: &Value, op: &str, args: &[&str]) -> Value {
    let options = options.to_string();
    let mut all = vec![cs, HUB, options.as_str(), op];
    all.extend_from_slice(args);
    common::python_json("transports_peer.py", &all)
}

/// Both producers' events reached both consumers, each delivery carrying the partition's
/// newest event.
fn assert_round_trip(result: &Value, tag: &str) {
    let expected = json!([format!("{tag}-sync"), format!("{tag}-async")]);
    assert_eq!(result["sync"], expected, "{result}");
    assert_eq!(result["async"], expected, "{result}");
    let last = result["partition_last"].as_i64().unwrap();
    for seen in result["last_enqueued"].as_array().unwrap() {
        assert_eq!(seen["sequence_number"].as_i64(), Some(last), "{result}");
    }
}

#[test]
fn python_clients_reach_the_hub_over_tls_trusting_its_authority() {
    common::require!(Tool::PythonSdk);
    let tls = start_tls_hub();
    let options = json!({
        "custom_endpoint_address": format!("sb://localhost:{}", tls.tls_port),
        "transport": "amqp",
        "connection_verify": shared_ca(),
    });
    let result = peer(&tls_connection_string(KEY), &options, "roundtrip", &["tls"]);
    assert_round_trip(&result, "tls");

    let wrong_key = peer(
        &tls_connection_string("not-the-key"),
        &options,
        "refused",
        &[],
    );
    let error = wrong_key["error"].as_str().expect("refused");
    assert!(error.contains("401"), "{error}");

    // A hub with a certificate from another authority (its own, made in --tls-dir): the
    // client trusting only the shared authority refuses it.
    let other_dir = tempfile::tempdir().unwrap();
    let other_port = free_port();
    let _other = Hub::start_serving(
        free_port(),
        None,
        &[&format!("{HUB}:2")],
        &[
            "--tls-port",
            &other_port.to_string(),
            "--tls-dir",
            &other_dir.path().display().to_string(),
        ],
    );
    wait_for_port(other_port, "the other hub's AMQPS listener");
    assert!(
        other_dir.path().join("ca.pem").is_file(),
        "the hub made its authority"
    );
    let untrusted = json!({
        "custom_endpoint_address": format!("sb://localhost:{other_port}"),
        "transport": "amqp",
        "connection_verify": shared_ca(),
    });
    let refused = peer(&tls_connection_string(KEY), &untrusted, "refused", &[]);
    let error = refused["error"].as_str().expect("refused");
    assert!(error.contains("CERTIFICATE_VERIFY_FAILED"), "{error}");
}

#[test]
fn python_clients_reach_the_hub_over_websockets_plain_and_tls() {
    common::require!(Tool::PythonSdk);
    // ws: the emulator's connection string, plain WebSockets.
    let ws_port = free_port();
    let plain = Hub::start_serving(
        free_port(),
        None,
        &[&format!("{HUB}:2")],
        &["--websocket-port", &ws_port.to_string()],
    );
    wait_for_port(ws_port, "the hub's WebSocket listener");
    let options = json!({
        "custom_endpoint_address": format!("sb://localhost:{ws_port}"),
        "transport": "websocket",
    });
    let cs = plain.connection_string(KEY);
    assert_round_trip(&peer(&cs, &options, "roundtrip", &["ws"]), "ws");
    let wrong_key = peer(
        &plain.connection_string("not-the-key"),
        &options,
        "refused",
        &[],
    );
    let error = wrong_key["error"].as_str().expect("refused");
    assert!(error.contains("401"), "{error}");

    // wss: TLS on, the certificate checked.
    let tls = start_tls_hub();
    let options = json!({
        "custom_endpoint_address": format!("sb://localhost:{}", tls.websocket_port),
        "transport": "websocket",
        "connection_verify": shared_ca(),
    });
    let result = peer(&tls_connection_string(KEY), &options, "roundtrip", &["wss"]);
    assert_round_trip(&result, "wss");
    drop(tls.hub);
}

#[test]
fn a_receiver_tracking_the_last_enqueued_event_gets_the_partitions_newest() {
    common::require!(Tool::PythonSdk);
    let hub = Hub::start_serving_hubs(&[&format!("{HUB}:2")]);
    let cs = hub.connection_string(KEY);
    let options = json!({});
    let tracked = peer(&cs, &options, "track", &["5", "true"]);
    let partition = &tracked["partition"];
    let events = tracked["events"].as_array().unwrap();
    assert_eq!(events.len(), 5, "{tracked}");
    for (i, event) in events.iter().enumerate() {
        let seen = &event["last_enqueued"];
        assert_eq!(
            seen["sequence_number"], partition["last_enqueued_sequence_number"],
            "{tracked}"
        );
        // The sender's own delivery annotations arrive beside the hub's.
        assert_eq!(event["sender_note"], format!("note-{i}"), "{tracked}");
        assert_eq!(
            seen["offset"], partition["last_enqueued_offset"],
            "{tracked}"
        );
        assert_eq!(
            seen["enqueued_time"], partition["last_enqueued_time"],
            "{tracked}"
        );
        let retrieved = seen["retrieval_time"].as_i64().unwrap();
        assert!(
            retrieved >= seen["enqueued_time"].as_i64().unwrap(),
            "looked up after the newest event was enqueued: {tracked}"
        );
    }

    // Without asking, a receiver gets none.
    let untracked = peer(&cs, &options, "track", &["5", "false"]);
    let events = untracked["events"].as_array().unwrap();
    assert_eq!(events.len(), 5, "{untracked}");
    // (The Python package reports a properties object of nulls for an event that carries any
    // delivery annotation at all, here the sender's own: none of the hub's keys is there.)
    assert!(
        events
            .iter()
            .all(|e| e["last_enqueued"]["sequence_number"].is_null()
                && e["last_enqueued"]["retrieval_time"].is_null()),
        "{untracked}"
    );
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["sender_note"], format!("note-{i}"), "{untracked}");
    }
}

/// Runs the JavaScript peer (tests/js/eventhubs_peer.cjs), trusting `ca` when given; its JSON.
fn js_peer(cs: &str, options: &Value, op: &str, args: &[&str], ca: Option<&str>) -> Value {
    let script = common::repository().join("tests/js/eventhubs_peer.cjs");
    let mut command = std::process::Command::new("node");
    command
        .arg(script)
        .args([cs, HUB, &options.to_string(), op])
        .args(args)
        .env("NODE_PATH", common::js_sdk_node_modules());
    if let Some(ca) = ca {
        command.env("NODE_EXTRA_CA_CERTS", ca);
    }
    let out = common::output_within(&mut command, common::COMMAND_LIMIT);
    common::json_output(&format!("the JavaScript peer {op}"), &out)
}

/// The JavaScript package over plain AMQP, TLS and WebSockets (always `wss` there), tracking the
/// last enqueued event's properties; without the authority trusted, TLS is refused.
#[test]
fn the_js_sdk_reaches_the_hub_over_amqp_tls_and_websockets_tracking_the_last_event() {
    common::require!(Tool::JsSdk);
    let tls = start_tls_hub();
    let ca = shared_ca();
    let cases = [
        (tls.hub.connection_string(KEY), json!({}), "amqp"),
        (
            tls_connection_string(KEY),
            json!({"customEndpointAddress": format!("sb://localhost:{}", tls.tls_port)}),
            "amqps",
        ),
        (
            tls_connection_string(KEY),
            json!({
                "customEndpointAddress": format!("sb://localhost:{}", tls.websocket_port),
                "websocket": true,
            }),
            "wss",
        ),
    ];
    for (cs, options, tag) in &cases {
        let result = js_peer(cs, options, "roundtrip", &[tag], Some(&ca));
        assert_eq!(result["body"], format!("{tag}-js"), "{result}");
        let seen = &result["last_enqueued"];
        assert_eq!(
            seen["sequence_number"], result["partition_last"],
            "{tag}: {result}"
        );
        assert_eq!(
            seen["offset"], result["partition_last_offset"],
            "{tag}: {result}"
        );
        assert!(seen["retrieval_time"].as_i64() >= seen["enqueued_time"].as_i64());
    }
    let (cs, options, _) = &cases[2];
    let refused = js_peer(cs, options, "refused", &[], None);
    let error = refused["error"]
        .as_str()
        .expect("refused without the authority");
    assert!(error.contains("self-signed certificate"), "{error}");
    let wrong_key = js_peer(
        &tls_connection_string("not-the-key"),
        options,
        "refused",
        &[],
        Some(&ca),
    );
    let error = wrong_key["error"]
        .as_str()
        .expect("refused with a wrong key");
    assert!(
        error.contains("401") || error.contains("nauthorized"),
        "{error}"
    );
}

/// A producer that sends, sits idle for 250 s and sends again keeps working, sync and async (as
/// against Event Hubs, where the SDKs reconnect). Four minutes of waiting: run on demand with
/// `cargo test --test hub transports:: -- --ignored`.
#[test]
#[ignore = "250 s idle; run on demand"]
fn a_producer_idle_for_250_seconds_sends_again() {
    common::require!(Tool::PythonSdk);
    let hub = Hub::start_serving_hubs(&[&format!("{HUB}:2")]);
    let result = peer(&hub.connection_string(KEY), &json!({}), "idle", &["250"]);
    for client in ["sync", "async"] {
        let after = &result[client][1];
        assert!(after["error"].is_null(), "{client}: {result}");
        eprintln!("{client}: {result}");
    }
}

/// The Rust SDK over TLS (its custom endpoint as `amqps://`) and over WebSockets (always `wss`
/// in that SDK), trusting the shared authority through the platform's roots (`SSL_CERT_FILE`).
#[tokio::test]
async fn the_rust_sdk_reaches_the_hub_over_tls_and_websockets() {
    use azure_core_amqp::AmqpTransport;
    use azure_messaging_eventhubs::models::EventData;
    use azure_messaging_eventhubs::{
        ConsumerClient, OpenReceiverOptions, ProducerClient, SendEventOptions, StartLocation,
        StartPosition,
    };
    use futures::StreamExt;

    let tls = start_tls_hub();
    let cs = tls_connection_string(KEY);
    for (transport, port, tag) in [
        (AmqpTransport::Tcp, tls.tls_port, "amqps"),
        (AmqpTransport::WebSocket, tls.websocket_port, "wss"),
    ] {
        let endpoint = format!("amqps://localhost:{port}");
        let producer = ProducerClient::builder()
            .with_custom_endpoint(endpoint.clone())
            .with_transport(transport)
            .open_with_connection_string(&cs, Some(HUB))
            .await
            .unwrap_or_else(|e| panic!("{tag}: the producer opens: {e:?}"));
        producer
            .send_event(
                EventData::builder()
                    .with_body(format!("rust-{tag}").into_bytes())
                    .build(),
                Some(SendEventOptions {
                    partition_id: Some("1".into()),
                }),
            )
            .await
            .unwrap_or_else(|e| panic!("{tag}: the event is sent: {e:?}"));
        let consumer = ConsumerClient::builder()
            .with_custom_endpoint(endpoint)
            .with_transport(transport)
            .open_with_connection_string(&cs, Some(HUB))
            .await
            .unwrap_or_else(|e| panic!("{tag}: the consumer opens: {e:?}"));
        let receiver = consumer
            .open_receiver_on_partition(
                "1".into(),
                Some(OpenReceiverOptions {
                    start_position: Some(StartPosition {
                        location: StartLocation::Earliest,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            )
            .await
            .unwrap();
        let mut stream = receiver.stream_events();
        let mut bodies = Vec::new();
        while bodies.last().map(String::as_str) != Some(format!("rust-{tag}").as_str()) {
            let event = tokio::time::timeout(std::time::Duration::from_secs(30), stream.next())
                .await
                .unwrap_or_else(|_| panic!("{tag}: no event within 30 s; got {bodies:?}"))
                .expect("the stream goes on")
                .expect("an event");
            let body = event.event_data().body().unwrap_or_default();
            bodies.push(String::from_utf8_lossy(body).into_owned());
        }
        drop(stream);
        let _ = consumer.close().await;
        let _ = producer.close().await;
    }
}

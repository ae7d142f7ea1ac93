//! `hubhost serve` as the Functions host sees it: real processes, real HTTP, real storage.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::path::Path;

use common::{Azurite, Server};
use hubhost_app::aggregate::WindowAggregate;
use hubhost_app::fleet::{Fleet, PartitionFeed};
use hubhost_app::handler::builtin_functions;
use hubhost_functions::batch::EventRecord;
use hubhost_storage::{BlobStore, StorageLocation};
use hubhost_testkit::host_request;
use serde_json::{Value, json};

const AGGREGATOR: &str = "SensorAggregator";

fn fleet() -> Fleet {
    Fleet {
        homes: 64,
        partitions: 4,
        seed: 11,
    }
}

fn start_minute() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z")
        .unwrap()
        .into()
}

fn aggregator_request(partition: u32, events: &[EventRecord]) -> Vec<u8> {
    let spec = builtin_functions().remove(0);
    host_request(
        &spec.name,
        spec.event_hub_trigger().unwrap(),
        partition,
        events,
    )
}

/// Sum of events over all window blocks stored under `dir`.
async fn stored_events(store: &dyn BlobStore) -> u64 {
    let mut total = 0;
    for w in store.list("hubhost", "windows/").await.unwrap() {
        let blob = store.get("hubhost", &w.name).await.unwrap().unwrap();
        total += serde_json::from_slice::<WindowAggregate>(&blob.data)
            .unwrap()
            .events;
    }
    total
}

fn local(dir: &Path) -> std::sync::Arc<dyn BlobStore> {
    StorageLocation::Directory(dir.to_path_buf())
        .open()
        .unwrap()
}

#[tokio::test]
async fn a_batch_is_aggregated_and_answered_in_the_host_format() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(&["--storage", data.path().to_str().unwrap()], &[]);
    let probe = reqwest::get(format!("{}/", server.url())).await.unwrap();
    assert_eq!(probe.status(), 200);
    // `hubhost` (every subcommand) pages its memory in 4 KiB pages, whatever the machine's
    // huge-page setting, so that its resident size says what it holds.
    if let Some(huge) = common::transparent_huge_pages(server.child.id()) {
        assert!(!huge, "hubhost serve runs with transparent huge pages off");
    }

    let events = PartitionFeed::new(&fleet(), 1, start_minute()).next_batch(100);
    let (status, body) = server
        .post(AGGREGATOR, aggregator_request(1, &events))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["Outputs"].is_object(), "{body}");
    assert!(
        body["Logs"][0].as_str().unwrap().contains("partition 1"),
        "{body}"
    );
    assert_eq!(body["ReturnValue"]["events"], 100);
    assert_eq!(body["ReturnValue"]["applied"], 100);
    assert_eq!(stored_events(local(data.path()).as_ref()).await, 100);
    // The home directory, written behind the batches, soon points each home at partition 1.
    let store = local(data.path());
    let home = serde_json::from_slice::<EventBody>(&events[0].body)
        .unwrap()
        .home_id;
    let bucket = hubhost_app::layout::home_directory_blob(
        "sensors",
        hubhost_app::layout::home_bucket(&home),
        "1",
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let dir: Value = loop {
        if let Some(blob) = store.get("hubhost", &bucket).await.unwrap() {
            break serde_json::from_slice(&blob.data).unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{bucket} never written"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(dir["homes"][&home], "1");
}

#[derive(serde::Deserialize)]
struct EventBody {
    #[serde(rename = "homeId")]
    home_id: String,
}

#[tokio::test]
async fn a_request_with_only_trigger_partition_context_is_processed() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(&["--storage", data.path().to_str().unwrap()], &[]);
    let reading = r#"{"homeId":"home-1","sensorId":"front-door","type":"door","state":"open","ts":"2026-11-22T10:00:01Z"}"#;
    let body = json!({
        "Data": {"events": serde_json::to_string(&[reading, reading]).unwrap()},
        "Metadata": {"TriggerPartitionContext": {"FullyQualifiedNamespace": "ns", "EventHubName": "sensors", "ConsumerGroup": "$Default", "PartitionId": "2"}}
    });
    let (status, answer) = server.post(AGGREGATOR, body.to_string()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["ReturnValue"]["applied"], 2);
    assert_eq!(answer["ReturnValue"]["withoutSequenceNumber"], 2);
    assert_eq!(stored_events(local(data.path()).as_ref()).await, 2);
}

#[tokio::test]
async fn bad_requests_get_a_4xx_json_error_and_the_process_stays_up() {
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start(
        &[
            "--storage",
            data.path().to_str().unwrap(),
            "--max-body-bytes",
            "20000",
        ],
        &[],
    );
    let ctx = json!({"EventHubName": "sensors", "ConsumerGroup": "$Default", "PartitionId": "0"});
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (AGGREGATOR, "{\"Data\": ".into(), 400, "malformed_json"),
        (AGGREGATOR, json!({"Metadata": {"PartitionContext": ctx}}).to_string(), 400, "missing_data"),
        ("NoSuchFunction", json!({"Data": {}}).to_string(), 404, "unknown_function"),
        (AGGREGATOR, json!({"Data": {"messages": "[]"}, "Metadata": {"PartitionContext": ctx}}).to_string(), 400, "missing_binding"),
        (
            AGGREGATOR,
            json!({"Data": {"events": "[\"a\",\"b\"]"}, "Metadata": {"PartitionContext": ctx, "SequenceNumberArray": "[1,2,3]"}}).to_string(),
            400,
            "metadata_length_mismatch",
        ),
        (AGGREGATOR, json!({"Data": {"events": "[\"a\"]"}, "Metadata": {}}).to_string(), 400, "missing_partition_context"),
        (
            AGGREGATOR,
            json!({"Data": {"events": "[\"{}\"]"}, "Metadata": {"PartitionContext": {"EventHubName": "sensors", "PartitionId": "../../etc"}}}).to_string(),
            400,
            "invalid_name",
        ),
        (AGGREGATOR, format!("{{\"Data\":{{\"events\":\"{}\"}}}}", "x".repeat(30_000)), 413, "body_too_large"),
    ];
    for (function, body, want_status, want_code) in cases {
        let (status, answer) = server.post(function, body).await;
        assert_eq!(status, want_status, "{want_code}: {answer}");
        assert_eq!(answer["error"]["code"], want_code, "{answer}");
        assert!(!answer["error"]["message"].as_str().unwrap().is_empty());
        assert!(
            answer["Logs"].is_array() && answer["Outputs"].is_object(),
            "host format: {answer}"
        );
        assert!(server.is_running(), "the handler died on {want_code}");
    }
    // Still serving, and a good batch after all that is processed in full.
    let events = PartitionFeed::new(&fleet(), 0, start_minute()).next_batch(20);
    let (status, _) = server
        .post(AGGREGATOR, aggregator_request(0, &events))
        .await;
    assert_eq!(status, 200);
    assert_eq!(stored_events(local(data.path()).as_ref()).await, 20);
}

#[tokio::test]
async fn invalid_base64_is_refused_for_a_binary_trigger() {
    let app = tempfile::tempdir().unwrap();
    std::fs::write(app.path().join("host.json"), r#"{"version":"2.0"}"#).unwrap();
    std::fs::create_dir(app.path().join(AGGREGATOR)).unwrap();
    std::fs::write(
        app.path().join(AGGREGATOR).join("function.json"),
        r#"{"bindings":[{"type":"eventHubTrigger","name":"events","direction":"in","eventHubName":"sensors","cardinality":"many","dataType":"binary"}]}"#,
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(
        &[
            "--storage",
            data.path().to_str().unwrap(),
            "--app",
            app.path().to_str().unwrap(),
        ],
        &[],
    );
    let ctx = json!({"EventHubName": "sensors", "PartitionId": "0"});
    let (status, answer) = server
        .post(
            AGGREGATOR,
            json!({"Data": {"events": "[\"not base64!\"]"}, "Metadata": {"PartitionContext": ctx}})
                .to_string(),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("invalid_base64")),
        "{answer}"
    );
    // The same handler takes well-formed binary batches.
    use base64::Engine;
    let reading = r#"{"homeId":"h","sensorId":"s","type":"smoke","state":"alarm","ts":"2026-11-22T10:00:00Z"}"#;
    let b64 = base64::engine::general_purpose::STANDARD.encode(reading);
    let (status, answer) = server
        .post(AGGREGATOR, json!({"Data": {"events": format!("[\"{b64}\"]")}, "Metadata": {"PartitionContext": ctx, "SequenceNumberArray": "[0]"}}).to_string())
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["ReturnValue"]["applied"], 1);
}

#[tokio::test]
async fn poison_events_are_set_aside_with_their_reason_and_the_rest_processed() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(&["--storage", data.path().to_str().unwrap()], &[]);
    let mut events = PartitionFeed::new(&fleet(), 3, start_minute()).next_batch(3);
    for (i, body) in [
        "{\"homeId\": 42",
        r#"{"homeId":"h","sensorId":"s","type":"door","state":"ajar","ts":"2026-11-22T10:00:00Z"}"#,
    ]
    .iter()
    .enumerate()
    {
        events.push(EventRecord {
            body: bytes::Bytes::from(body.to_string()),
            sequence_number: Some(3 + i as i64),
            offset: Some("9".into()),
            enqueued_time: None,
            partition_key: None,
            properties: Default::default(),
            system_properties: Default::default(),
        });
    }
    let (status, answer) = server
        .post(AGGREGATOR, aggregator_request(3, &events))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["ReturnValue"]["deadLettered"], 2);
    assert_eq!(answer["ReturnValue"]["applied"], 3);
    assert!(
        answer["Logs"][0]
            .as_str()
            .unwrap()
            .contains("2 dead-lettered")
    );
    let store = local(data.path());
    let letters = store
        .list("hubhost", "deadletter/sensors/$default/p3/")
        .await
        .unwrap();
    assert_eq!(letters.len(), 2);
    let first: Value = serde_json::from_slice(
        &store
            .get("hubhost", &letters[0].name)
            .await
            .unwrap()
            .unwrap()
            .data,
    )
    .unwrap();
    assert_eq!(first["partitionId"], "3");
    assert_eq!(first["sequenceNumber"], 3);
    assert_eq!(first["body"], "{\"homeId\": 42");
    assert!(
        first["reason"].as_str().unwrap().contains("not valid JSON"),
        "{first}"
    );
    let second: Value = serde_json::from_slice(
        &store
            .get("hubhost", &letters[1].name)
            .await
            .unwrap()
            .unwrap()
            .data,
    )
    .unwrap();
    assert!(
        second["reason"].as_str().unwrap().contains("state"),
        "{second}"
    );
    // A replay of the batch neither adds dead letters nor counts twice.
    let (_, again) = server
        .post(AGGREGATOR, aggregator_request(3, &events))
        .await;
    assert_eq!(again["ReturnValue"]["replayed"], 3);
    assert_eq!(store.list("hubhost", "deadletter/").await.unwrap().len(), 2);
    assert_eq!(stored_events(store.as_ref()).await, 3);
}

#[tokio::test]
async fn a_panic_fails_the_invocation_not_the_process() {
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start(
        &["--storage", data.path().to_str().unwrap()],
        &[("HUBHOST_FAULT_PANIC_HOME", "home-000007")],
    );
    let reading = |home: &str| {
        format!(
            r#"{{"homeId":"{home}","sensorId":"s","type":"door","state":"open","ts":"2026-11-22T10:00:00Z"}}"#
        )
    };
    let body = |home: &str| {
        json!({"Data": {"events": serde_json::to_string(&[reading(home)]).unwrap()},
               "Metadata": {"PartitionContext": {"EventHubName": "sensors", "PartitionId": "0"}, "SequenceNumberArray": "[0]"}})
        .to_string()
    };
    let (status, answer) = server.post(AGGREGATOR, body("home-000007")).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (500, Some("handler_panic")),
        "{answer}"
    );
    assert!(server.is_running());
    // The host retries it: the page's Operations view shows the partition retrying, with what
    // the last attempt failed with, until a batch of it succeeds.
    let retry = |home: &str| {
        let mut request: Value = serde_json::from_str(&body(home)).unwrap();
        request["Metadata"]["RetryContext"] = json!({"RetryCount": 1, "MaxRetryCount": -1,
            "Exception": {"ClassName": "Microsoft.Azure.WebJobs.Host.FunctionInvocationException",
                "Message": "Exception while executing function: Functions.SensorAggregator",
                "InnerException": {"ClassName": "System.Net.Http.HttpRequestException",
                    "Message": "the handler answered 500: handler_panic"}}});
        request.to_string()
    };
    let (status, _) = server.post(AGGREGATOR, retry("home-000007")).await;
    assert_eq!(status, 500);
    let operations = || async {
        let url = format!("{}/api/dashboard/operations.json", server.url());
        let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
        let view: Value = serde_json::from_str(&text).unwrap();
        view["retrying"].clone()
    };
    let retrying = operations().await;
    assert_eq!(retrying.as_array().map(Vec::len), Some(1), "{retrying}");
    assert_eq!(retrying[0]["function"], "SensorAggregator", "{retrying}");
    assert_eq!(retrying[0]["partition"], "0", "{retrying}");
    assert_eq!(retrying[0]["failedAttempts"], 2, "{retrying}");
    assert!(
        retrying[0]["lastError"].as_str().unwrap().contains("panic"),
        "{retrying}"
    );
    let (status, _) = server.post(AGGREGATOR, body("home-000001")).await;
    assert_eq!(status, 200);
    assert_eq!(operations().await, json!([]));
}

/// Storage goes down mid-stream: the handler answers 500 (so the host retries the batch), and
/// after storage returns the retried batch is applied once — nothing acknowledged is lost.
/// Also: the connection string's key never reaches the log.
#[tokio::test]
async fn a_storage_outage_answers_500_and_the_retry_loses_nothing() {
    common::require!(Tool::Azurite);
    let mut azurite = Azurite::start();
    let connection = azurite.connection_string();
    let mut server = Server::start(&[], &[("HUBHOST_STORAGE", connection.as_str())]);
    let mut feed = PartitionFeed::new(&fleet(), 0, start_minute());
    let first = feed.next_batch(50);
    let second = feed.next_batch(50);
    let (status, answer) = server.post(AGGREGATOR, aggregator_request(0, &first)).await;
    assert_eq!(status, 200, "{answer}");

    let (port, location) = (azurite.port, azurite.location.clone());
    azurite.stop();
    let (status, answer) = server
        .post(AGGREGATOR, aggregator_request(0, &second))
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (500, Some("storage_unavailable")),
        "{answer}"
    );
    assert!(server.is_running());

    let _azurite = Azurite::start_at(&location, port);
    let (status, answer) = server
        .post(AGGREGATOR, aggregator_request(0, &second))
        .await;
    assert_eq!(status, 200, "{answer}");
    let store = StorageLocation::parse(&connection).unwrap().open().unwrap();
    assert_eq!(stored_events(store.as_ref()).await, 100);

    let log = server.stderr();
    assert!(log.contains("storage"), "the outage is logged: {log}");
    assert!(
        !log.contains(hubhost_storage::connection::DEV_KEY),
        "the account key leaked into the log"
    );
    assert!(
        !log.contains("AccountKey"),
        "the connection string leaked into the log"
    );
}

/// The handler's `/metrics` page parses as Prometheus text and its counters match what was sent:
/// events, first applications, replays, poison events, outcomes, and one latency observation per
/// request that reached the function.
#[tokio::test]
async fn metrics_count_what_the_handler_processed() {
    use hubhost_metrics::{self as metrics, sum};
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(&["--storage", data.path().to_str().unwrap()], &[]);
    let mut feed = PartitionFeed::new(&fleet(), 1, start_minute());
    let batches: Vec<_> = (0..3).map(|_| feed.next_batch(50)).collect();
    for batch in batches.iter().chain([&batches[0]]) {
        let (status, body) = server.post(AGGREGATOR, aggregator_request(1, batch)).await;
        assert_eq!(status, 200, "{body}");
    }
    let good = r#"{"homeId":"home-1","sensorId":"front-door","type":"door","state":"open","ts":"2026-11-22T10:00:01Z"}"#;
    let poison = r#"{"homeId":"home-1","sensorId":"front-door","type":"toaster","state":"on","ts":"2026-11-22T10:00:02Z"}"#;
    let mixed = json!({
        "Data": {"events": serde_json::to_string(&[good, poison]).unwrap()},
        "Metadata": {"TriggerPartitionContext": {"FullyQualifiedNamespace": "ns", "EventHubName": "sensors", "ConsumerGroup": "$Default", "PartitionId": "2"}}
    });
    let (status, body) = server.post(AGGREGATOR, mixed.to_string()).await;
    assert_eq!(
        (status, &body["ReturnValue"]["deadLettered"]),
        (200, &json!(1))
    );
    let (status, _) = server.post(AGGREGATOR, "{}").await;
    assert_eq!(status, 400);

    let response = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        metrics::CONTENT_TYPE
    );
    let samples = metrics::parse(&response.text().await.unwrap()).unwrap();
    let f = ("function", AGGREGATOR);
    let value = |name: &str| sum(&samples, name, &[f]);
    assert_eq!(value("hubhost_handler_events_total"), 202.0);
    assert_eq!(value("hubhost_handler_events_applied_total"), 151.0);
    assert_eq!(value("hubhost_handler_events_replayed_total"), 50.0);
    assert_eq!(value("hubhost_poison_events_total"), 1.0);
    assert_eq!(value("hubhost_handler_storage_errors_total"), 0.0);
    let outcome = |o: &str| {
        sum(
            &samples,
            "hubhost_handler_batches_total",
            &[f, ("outcome", o)],
        )
    };
    assert_eq!((outcome("ok"), outcome("bad_request")), (5.0, 1.0));
    assert_eq!(value("hubhost_handler_batch_seconds_count"), 6.0);
    assert_eq!(
        sum(
            &samples,
            "hubhost_handler_batch_seconds_bucket",
            &[f, ("le", "+Inf")]
        ),
        6.0
    );
    assert!(value("hubhost_handler_batch_seconds_sum") > 0.0);
    // The other function is listed, at zero.
    assert_eq!(
        sum(
            &samples,
            "hubhost_handler_events_total",
            &[("function", "RawArchive")]
        ),
        0.0
    );
}

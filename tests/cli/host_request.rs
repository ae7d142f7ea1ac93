//! The request `hubhost invoke` sends, read by a plain recording server — raw TCP, not
//! hubhost-functions — and checked key by key against the Functions host's rules
//! (docs/host-contract.md §2: the host's `ScriptInvocationContextExtensions`,
//! `Utility.ApplyBindingData`, the Event Hubs extension's `EventHubTriggerBindingStrategy`);
//! and its answer read as the host reads it (`DefaultHttpWorkerService`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use hubhost_functions::contract::decode::decode_request;
use hubhost_functions::function_app::{Cardinality, DataType, EventHubTrigger};
use hubhost_testkit as kit;
use serde_json::{Value, json};

/// One request as it came off the wire.
struct Recorded {
    path: String,
    /// Header names lowercased.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A handler that records each request and answers by its path: `/Empty` with an empty 200,
/// `/Plain` with `text/plain`, any other with `{}` as JSON.
fn recording_handler() -> (String, Arc<Mutex<Vec<Recorded>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let record = record.clone();
            std::thread::spawn(move || serve(stream, &record));
        }
    });
    (base, seen)
}

fn serve(stream: std::net::TcpStream, record: &Mutex<Vec<Recorded>>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap();
            headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
        }
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                let mut size = String::new();
                reader.read_line(&mut size).unwrap();
                let size = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut chunk = vec![0; size + 2];
                reader.read_exact(&mut chunk).unwrap();
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else if let Some(length) = find("content-length") {
            body.resize(length.parse().unwrap(), 0);
            reader.read_exact(&mut body).unwrap();
        }
        let (content_type, answer): (&str, &[u8]) = match path.as_str() {
            "/Empty" => ("application/json", b""),
            "/Plain" => ("text/plain", b"{}"),
            _ => ("application/json; charset=utf-8", b"{}"),
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        if line.starts_with("POST") {
            record.lock().unwrap().push(Recorded {
                path,
                headers,
                body,
            });
        }
        writer.write_all(head.as_bytes()).unwrap();
        writer.write_all(answer).unwrap();
    }
}

/// An app of four functions on one event hub: `One` and `Many` (cardinality one and many,
/// no dataType, a retry policy of 2), and `Empty` and `Plain`, whose answers the host refuses.
fn write_app(app: &Path) {
    let write = |path: &str, value: Value| {
        let path = app.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
    };
    write(
        "host.json",
        json!({"version": "2.0", "customHandler": {"description": {"defaultExecutablePath": "handler"}}}),
    );
    write(
        "local.settings.json",
        json!({"IsEncrypted": false, "Values": {
            "AzureWebJobsStorage": "UseDevelopmentStorage=true",
            "FUNCTIONS_WORKER_RUNTIME": "custom",
            "Hub": "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"}}),
    );
    for (name, cardinality) in [
        ("One", "one"),
        ("Many", "many"),
        ("Empty", "many"),
        ("Plain", "many"),
    ] {
        write(
            &format!("{name}/function.json"),
            json!({"bindings": [{"type": "eventHubTrigger", "direction": "in", "name": "ev",
                "eventHubName": "sensors", "connection": "Hub", "cardinality": cardinality}],
                "retry": {"strategy": "fixedDelay", "maxRetryCount": 2, "delayInterval": "00:00:01"}}),
        );
    }
}

/// The trigger every function of [`write_app`] has, with `cardinality`.
fn trigger(cardinality: Cardinality) -> EventHubTrigger {
    EventHubTrigger {
        binding_name: "ev".into(),
        event_hub_name: "sensors".into(),
        consumer_group: "$Default".into(),
        cardinality,
        data_type: DataType::Unset,
        connection: Some("Hub".into()),
    }
}

fn invoke(dir: &Path, function: &str, base: &str) -> (i32, Value, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hubhost"));
    kit::without_test_run_env(&mut command)
        .args([
            "invoke",
            function,
            "--app",
            "app",
            "--events",
            "events.json",
        ])
        .args(["--url", base, "--show-request"])
        .current_dir(dir);
    let out = kit::output_within(&mut command, kit::COMMAND_LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let answer = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
    (out.status.code().unwrap_or(-1), answer, stderr)
}

/// A metadata value the host writes as JSON text inside a string, read once more.
fn text(value: &Value) -> Value {
    serde_json::from_str(
        value
            .as_str()
            .unwrap_or_else(|| panic!("not JSON text: {value}")),
    )
    .unwrap()
}

fn is_iso_without_zone(value: &Value, fraction: bool) -> bool {
    let s = value.as_str().unwrap_or("");
    let (seconds, rest) = s.split_at(s.len().min(19));
    seconds.len() == 19
        && seconds.as_bytes()[10] == b'T'
        && chrono::NaiveDateTime::parse_from_str(seconds, "%Y-%m-%dT%H:%M:%S").is_ok()
        && (rest.is_empty()
            || (fraction && rest.starts_with('.') && rest[1..].bytes().all(|b| b.is_ascii_digit())))
}

#[test]
fn invoke_sends_what_the_functions_host_sends_and_reads_the_answer_as_it_does() {
    let dir = tempfile::tempdir().unwrap();
    write_app(&dir.path().join("app"));
    // Written as text: the bodies' members in this order.
    std::fs::write(
        dir.path().join("events.json"),
        r#"[
  {"body": {"z": 1, "a": "x"}, "partitionKey": "k", "offset": "g1:0:12",
   "properties": {"p": 1},
   "systemProperties": {"message-id": "m-1", "iothub-connection-device-id": "dev-1"}},
  {"body": {"count": 42, "flag": true, "ratio": 1.5, "offset": "x", "myTrigger": "t",
            "nested": {"b": 1}, "list": [1], "nothing": null},
   "enqueuedTime": "-30m", "sequenceNumber": 41}
]"#,
    )
    .unwrap();
    let (base, seen) = recording_handler();

    // Cardinality one: an invocation per event.
    let (code, answer, shown) = invoke(dir.path(), "One", &base);
    assert_eq!(code, 0, "{answer}{shown}");
    let requests: Vec<Recorded> = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.path, "/One");
        // The host's body is an ObjectContent: chunked, with no length.
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        assert_eq!(r.header("content-length"), None);
        assert_eq!(
            r.header("content-type"),
            Some("application/json; charset=utf-8")
        );
        assert!(
            r.header("user-agent")
                .unwrap()
                .starts_with("Azure-Functions-Host/")
        );
        assert!(r.header("x-azure-functions-hostversion").is_some());
        let id = r.header("x-azure-functions-invocationid").unwrap();
        assert!(
            id.len() == 36 && id.split('-').map(str::len).eq([8, 4, 4, 4, 12]),
            "a GUID: {id}"
        );
        // --show-request writes the same bytes.
        assert!(
            shown.contains(&format!("x-azure-functions-invocationid: {id}")),
            "{shown}"
        );
        assert!(
            shown.contains(std::str::from_utf8(&r.body).unwrap()),
            "--show-request writes the body as sent"
        );
    }
    let first: Value = serde_json::from_slice(&requests[0].body).unwrap();
    let m = &first["Metadata"];
    // A string is JSON text inside a string; a number is its text; a date is written once.
    assert_eq!(text(&first["Data"]["ev"]), json!(r#"{"z":1,"a":"x"}"#));
    assert_eq!(m["PartitionKey"], json!("\"k\""));
    assert_eq!(m["Offset"], json!("\"-1\""), "a non-numeric offset is -1");
    assert_eq!(m["OffsetString"], json!("\"g1:0:12\""));
    assert_eq!(m["SequenceNumber"], json!("0"));
    assert!(
        is_iso_without_zone(&m["EnqueuedTimeUtc"], false),
        "{}",
        m["EnqueuedTimeUtc"]
    );
    assert_eq!(m["Properties"], json!({"p": 1}));
    let system = &m["SystemProperties"];
    assert_eq!(system["message-id"], "m-1");
    assert_eq!(system["iothub-connection-device-id"], "dev-1");
    assert_eq!(
        system["x-opt-offset"], "g1:0:12",
        "the service's own annotation, a string"
    );
    assert_eq!(system["x-opt-partition-key"], "k");
    assert_eq!(system["x-opt-sequence-number"], 0);
    assert!(
        system["x-opt-enqueued-time"]
            .as_str()
            .unwrap()
            .ends_with("+00:00")
    );
    assert_eq!(system["Offset"], -1);
    assert_eq!(system["OffsetString"], "g1:0:12");
    assert_eq!(system["SequenceNumber"], 0);
    assert_eq!(system["PartitionKey"], "k");
    assert!(is_iso_without_zone(&system["EnqueuedTimeUtc"], true));
    assert_eq!(
        m["RetryContext"],
        json!({"RetryCount": 0, "MaxRetryCount": 2, "Exception": null, "Instance": null, "State": {}})
    );
    let context = json!({"IsCheckpointingAfterInvocation": true,
        "FullyQualifiedNamespace": "localhost", "EventHubName": "sensors",
        "ConsumerGroup": "$Default", "PartitionId": "0"});
    assert_eq!(m["TriggerPartitionContext"], context);
    assert_eq!(m["PartitionContext"], context);
    assert_eq!(m["sys"]["MethodName"], "One");
    assert!(m["sys"]["UtcNow"].as_str().unwrap().ends_with('Z'));
    // The body's fields, as the host's ApplyBindingData adds them.
    assert_eq!(m["z"], json!("\"1\""));
    assert_eq!(m["a"], json!("\"x\""));

    let second: Value = serde_json::from_slice(&requests[1].body).unwrap();
    let m = second["Metadata"].as_object().unwrap();
    assert_eq!(m["count"], json!("\"42\""));
    assert_eq!(m["flag"], json!("\"True\""));
    assert_eq!(m["ratio"], json!("\"1.5\""));
    assert_eq!(m["nested"], json!({"b": 1}));
    assert_eq!(
        m["Offset"],
        json!("\"x\""),
        "binding data names ignore case: the body's wins"
    );
    for absent in ["offset", "myTrigger", "list", "nothing"] {
        assert!(!m.contains_key(absent), "{absent}: {m:?}");
    }

    // hubhost-functions reads the host's exact forms back: the date written once, the
    // geo-replicated offset, the message's system properties, the retry context.
    let batch = decode_request("One", &trigger(Cardinality::One), &requests[0].body).unwrap();
    let event = &batch.events[0];
    assert_eq!(event.offset.as_deref(), Some("g1:0:12"));
    assert_eq!(event.partition_key.as_deref(), Some("k"));
    assert_eq!(event.sequence_number, Some(0));
    assert!(
        event.enqueued_time.is_some(),
        "EnqueuedTimeUtc read as a plain date"
    );
    assert_eq!(&event.body[..], br#"{"z":1,"a":"x"}"#);
    let system = batch.system_properties.of(0).unwrap().unwrap();
    assert_eq!(system["iothub-connection-device-id"], "dev-1");
    let retry = batch.retry.unwrap();
    assert_eq!((retry.retry_count, retry.max_retry_count), (0, 2));
    assert_eq!(retry.last_error(), None);

    // Cardinality many: one invocation; bodies parsed and written again in their own order.
    let (code, answer, _) = invoke(dir.path(), "Many", &base);
    assert_eq!(code, 0, "{answer}");
    let requests: Vec<Recorded> = std::mem::take(&mut *seen.lock().unwrap());
    let [request] = &requests[..] else {
        panic!("{} requests", requests.len())
    };
    let many: Value = serde_json::from_slice(&request.body).unwrap();
    let m = &many["Metadata"];
    assert_eq!(
        many["Data"]["ev"],
        json!(
            r#"[{"z":1,"a":"x"},{"count":42,"flag":true,"ratio":1.5,"offset":"x","myTrigger":"t","nested":{"b":1},"list":[1],"nothing":null}]"#
        )
    );
    assert_eq!(text(&m["OffsetArray"])[0], "-1");
    assert_eq!(text(&m["OffsetStringArray"])[0], "g1:0:12");
    assert_eq!(
        text(&m["SequenceNumberArray"]),
        json!([0, 41]),
        "the events file's sequenceNumber"
    );
    assert_eq!(text(&m["PartitionKeyArray"]), json!(["k", null]));
    let times = text(&m["EnqueuedTimeUtcArray"]);
    assert!(
        times
            .as_array()
            .unwrap()
            .iter()
            .all(|t| is_iso_without_zone(t, true)),
        "{times}"
    );
    assert_eq!(text(&m["SystemPropertiesArray"])[0]["message-id"], "m-1");
    assert!(
        m.get("count").is_none(),
        "a batch's bodies add no binding data"
    );
    let batch = decode_request("Many", &trigger(Cardinality::Many), &request.body).unwrap();
    assert_eq!(batch.events.len(), 2);
    // The events file's `"enqueuedTime": "-30m"`: half an hour before the invocation.
    let now = chrono::Utc::now();
    let age = now - batch.events[1].enqueued_time.unwrap();
    assert!(
        age > chrono::Duration::minutes(29) && age < chrono::Duration::minutes(31),
        "enqueued {age} ago"
    );
    let first_age = now - batch.events[0].enqueued_time.unwrap();
    assert!(first_age < chrono::Duration::minutes(1), "{first_age}");
    assert_eq!(batch.events[0].offset.as_deref(), Some("g1:0:12"));
    assert_eq!(
        &batch.events[1].body[..],
        br#"{"count":42,"flag":true,"ratio":1.5,"offset":"x","myTrigger":"t","nested":{"b":1},"list":[1],"nothing":null}"#
    );

    // Answers the host refuses: an empty body and a text/plain one.
    let (code, answer, _) = invoke(dir.path(), "Empty", &base);
    assert_ne!(code, 0);
    assert_eq!(answer["succeeded"], false);
    assert!(
        answer["hostError"]
            .as_str()
            .unwrap()
            .contains("functionTimeout"),
        "{answer}"
    );
    let (code, answer, _) = invoke(dir.path(), "Plain", &base);
    assert_ne!(code, 0);
    assert!(
        answer["hostError"]
            .as_str()
            .unwrap()
            .starts_with("Invalid HttpResponseMessage"),
        "{answer}"
    );
}

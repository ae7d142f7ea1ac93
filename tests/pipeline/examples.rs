//! The examples, end to end with real processes: a `hubhost hub`, `hubhost emulate` running each
//! example's handler (its binary, built from `examples/`), and the official Python SDK as the
//! independent producer and consumer. They show a user's own function on the framework, its
//! `blob` and `eventHub` outputs carried out by the emulated host, and bindings the emulated
//! host cannot carry out refused at start-up.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{Hub, KEY};
use hubhost_storage::StorageLocation;
use hubhost_testkit::pool::EmulatePool;

/// Builds the examples and returns the directory their binaries are in: beside this build of
/// `hubhost`.
fn build_examples() -> PathBuf {
    common::build_examples(&["count-readings", "forward-alarms"])
}

/// A copy of `examples/{name}/function_app` in `dir`, its executable path made absolute (the
/// checked-in one is relative to the repository's `target/`, checked here too).
fn app_copy(name: &str, dir: &Path, bin_dir: &Path) -> PathBuf {
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/{name}/function_app"));
    let app = dir.join("app");
    common::copy_dir(&source, &app);
    let host_path = app.join("host.json");
    let mut host: Value =
        serde_json::from_str(&std::fs::read_to_string(&host_path).unwrap()).unwrap();
    let executable = bin_dir.join(name);
    if std::env::var_os("CARGO_TARGET_DIR").is_none() {
        let relative = host["customHandler"]["description"]["defaultExecutablePath"]
            .as_str()
            .unwrap();
        assert_eq!(
            source.join(relative).canonicalize().unwrap(),
            executable.canonicalize().unwrap(),
            "examples/{name}: host.json names the example's binary"
        );
    }
    host["customHandler"]["description"]["defaultExecutablePath"] =
        Value::from(executable.to_str().unwrap());
    std::fs::write(&host_path, host.to_string()).unwrap();
    app
}

/// `hubhost emulate` on `app`, its checkpoints and blobs in `storage`: one instance of the
/// pool harness the pool tests and `bench pool` use, killed on drop.
struct Emulate {
    pool: EmulatePool,
    runtime: tokio::runtime::Runtime,
}

impl Emulate {
    const NAME: &str = "emulate";

    fn start(app: &Path, hub: &Hub, storage: &Path, dir: &Path) -> Emulate {
        let mut pool = EmulatePool::new(Path::new(env!("CARGO_BIN_EXE_hubhost")), app, dir);
        pool.start(
            Self::NAME,
            &[
                ("EventHubConnection", hub.connection_string(KEY)),
                ("AzureWebJobsStorage", storage.display().to_string()),
            ],
        )
        .expect("hubhost emulate starts");
        Emulate {
            pool,
            runtime: tokio::runtime::Runtime::new().unwrap(),
        }
    }

    fn log(&self) -> String {
        self.pool.log(Self::NAME)
    }

    /// `hubhost_events_processed_total` of `function`, from the instance's `/metrics`.
    fn events_processed(&mut self, function: &str) -> Option<f64> {
        let (_, samples) = self.runtime.block_on(self.pool.metrics(Self::NAME)).ok()?;
        Some(hubhost_metrics::sum(
            &samples,
            "hubhost_events_processed_total",
            &[("function", function)],
        ))
    }

    fn wait_processed(&mut self, function: &str, events: f64) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let seen = self.events_processed(function);
            if seen == Some(events) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{function} processed {seen:?} of {events} events:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn reading(home: &str, sensor: &str, state: &str) -> String {
    json!({"homeId": home, "sensorId": sensor, "type": "smoke", "state": state,
           "ts": "2026-11-23T10:00:00Z"})
    .to_string()
}

/// Sends `bodies` to the `sensors` hub with the Python SDK, keyed by `key`.
fn send(hub: &Hub, key: &str, bodies: &[String]) {
    let mut args = vec![key];
    args.extend(bodies.iter().map(String::as_str));
    let sent = hub.python("send-keyed", &args);
    assert_eq!(sent["sent"], bodies.len());
}

#[test]
fn count_readings_counts_every_reading_into_blobs_under_emulate() {
    common::require!(Tool::PythonSdk);
    let bin_dir = build_examples();
    let dir = tempfile::tempdir().unwrap();
    let app = app_copy("count-readings", dir.path(), &bin_dir);
    let storage = dir.path().join("storage");
    let hub = Hub::start(None);
    let mut sent = std::collections::BTreeMap::<String, u64>::new();
    for key in ["a", "b", "c"] {
        let bodies: Vec<String> = (0..12)
            .map(|i| {
                let home = format!("home-{key}{}", i % 4);
                *sent.entry(home.clone()).or_default() += 1;
                reading(&home, &format!("s{i}"), "ok")
            })
            .collect();
        send(&hub, key, &bodies);
    }
    // Not a reading: skipped by the function, the rest of its batch counted.
    send(&hub, "a", &["not json".to_string()]);

    let mut emulate = Emulate::start(&app, &hub, &storage, dir.path());
    emulate.wait_processed("CountReadings", 37.0);

    // Each batch's counts are one blob at the output's path; together they count every reading.
    let store = StorageLocation::Directory(storage).open().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let counted = runtime.block_on(async {
        let mut counted = std::collections::BTreeMap::<String, u64>::new();
        let blobs = store.list("counts", "").await.unwrap();
        assert!(!blobs.is_empty(), "no blob written:\n{}", emulate.log());
        for blob in blobs {
            assert!(blob.name.ends_with(".json"), "{}", blob.name);
            let content = store.get("counts", &blob.name).await.unwrap().unwrap();
            let counts: std::collections::BTreeMap<String, u64> =
                serde_json::from_slice(&content.data).unwrap();
            for (home, n) in counts {
                *counted.entry(home).or_default() += n;
            }
        }
        counted
    });
    assert_eq!(counted, sent, "{}", emulate.log());
}

#[test]
fn forward_alarms_sends_each_alarm_to_the_alarms_hub() {
    common::require!(Tool::PythonSdk);
    let bin_dir = build_examples();
    let dir = tempfile::tempdir().unwrap();
    let app = app_copy("forward-alarms", dir.path(), &bin_dir);
    let hub = Hub::start(None);
    let mut bodies: Vec<String> = (0..20)
        .map(|i| reading(&format!("home-{i}"), "smoke", "ok"))
        .collect();
    bodies[3] = reading("home-3", "smoke", "alarm");
    bodies[11] = reading("home-11", "glass", "break");
    bodies[17] = reading("home-17", "co", "alarm");
    bodies.push("not json".into());
    send(&hub, "k", &bodies);

    let storage = dir.path().join("storage");
    let mut emulate = Emulate::start(&app, &hub, &storage, dir.path());
    emulate.wait_processed("ForwardAlarms", 21.0);

    // The event that is not a reading was set aside through the `poison` blob output.
    let store = StorageLocation::Directory(storage).open().unwrap();
    let poison: Vec<Value> = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut records = Vec::new();
        for blob in store.list("deadletter", "").await.unwrap() {
            let content = store.get("deadletter", &blob.name).await.unwrap().unwrap();
            records.extend(serde_json::from_slice::<Vec<Value>>(&content.data).unwrap());
        }
        records
    });
    assert_eq!(poison.len(), 1, "{poison:?}\n{}", emulate.log());
    assert_eq!(poison[0]["body"], "not json");
    assert!(
        poison[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("not a reading"),
        "{poison:?}"
    );
    assert!(poison[0]["sequenceNumber"].is_i64(), "{poison:?}");

    // Read back with the Python SDK, an independent consumer of the `alarms` hub.
    let received = common::python_json(
        "eventhub_peer.py",
        &[
            &hub.connection_string(KEY),
            "alarms",
            "receive",
            "$Default",
            "3",
            "60",
        ],
    );
    let mut alarms: Vec<(String, String, String)> = received
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let body: Value = serde_json::from_str(e["body"].as_str().unwrap()).unwrap();
            assert!(body["sequenceNumber"].is_i64(), "{body}");
            let text = |k: &str| body[k].as_str().unwrap().to_string();
            (text("homeId"), text("sensorId"), text("state"))
        })
        .collect();
    alarms.sort();
    let expected = [
        ("home-11", "glass", "break"),
        ("home-17", "co", "alarm"),
        ("home-3", "smoke", "alarm"),
    ]
    .map(|(h, s, st)| (h.to_string(), s.to_string(), st.to_string()));
    assert_eq!(alarms, expected, "{}", emulate.log());
}

/// What `hubhost emulate` (with `args`) says about `binding` added to the forward-alarms app:
/// it must exit with an error before connecting to anything.
fn refusal_of(binding: Value, args: &[&str]) -> String {
    let bin_dir = build_examples();
    let dir = tempfile::tempdir().unwrap();
    let app = app_copy("forward-alarms", dir.path(), &bin_dir);
    let path = app.join("ForwardAlarms/function.json");
    let mut function: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    function["bindings"].as_array_mut().unwrap().push(binding);
    std::fs::write(&path, function.to_string()).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_hubhost"));
    command
        .args(["emulate", "--app"])
        .arg(&app)
        .args(["--storage"])
        .arg(dir.path().join("storage"))
        .args(args)
        .env(
            "EventHubConnection",
            "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true",
        )
        .stdin(Stdio::null());
    let output = common::output_within(&mut command, Duration::from_secs(60));
    assert!(!output.status.success(), "emulate accepted the app");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn bindings_emulate_can_neither_carry_out_nor_keep_are_refused_at_start_up_by_name() {
    // An output kept in the outbox by default, refused when the user asks to be told.
    let queue = refusal_of(
        json!({"type": "queue", "direction": "out", "name": "audit", "queueName": "audit"}),
        &["--strict-bindings"],
    );
    assert!(
        queue.contains("ForwardAlarms") && queue.contains("'audit' (queue)"),
        "{queue}"
    );
    assert!(
        queue.contains("does not carry out this binding type")
            && queue.contains("--strict-bindings"),
        "{queue}"
    );

    // An input no local service reads (blob inputs are read).
    let input = refusal_of(
        json!({"type": "cosmosDB", "direction": "in", "name": "config",
        "databaseName": "app", "containerName": "config", "id": "{deviceId}"}),
        &[],
    );
    assert!(
        input.contains("'config' (cosmosDB)")
            && input.contains("does not read this input binding type"),
        "{input}"
    );

    let expression = refusal_of(
        json!({"type": "blob", "direction": "out", "name": "report",
        "path": "reports/{PartitionContext.PartitionId}.json"}),
        &[],
    );
    assert!(
        expression.contains("{PartitionContext.PartitionId}"),
        "{expression}"
    );
}

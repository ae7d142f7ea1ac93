//! The examples, end to end with real processes: a `hubhost hub`, `hubhost emulate` running each
//! example's handler (its binary, built from `examples/`), and the official Python SDK as the
//! independent producer and consumer. They show a user's own function on the framework, its
//! `blob` and `eventHub` outputs carried out by the emulated host, an app's HTTP and timer
//! functions beside its Event Hubs function with the blob inputs the host reads for each, and
//! bindings the emulated host cannot carry out refused at start-up.

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
    common::build_examples(&["count-readings", "forward-alarms", "home-limits"])
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

/// `hubhost emulate` on `app` with `--storage` (as `HUBHOST_STORAGE`) naming `storage`, which
/// stands for the app's storage: its checkpoints, what its `blob` outputs write and its `blob`
/// inputs read are there. One instance of the pool harness the pool tests and `bench pool`
/// use, killed on drop.
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
                ("HUBHOST_STORAGE", storage.display().to_string()),
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
        self.metric("hubhost_events_processed_total", function)
    }

    /// The sum of the family `name`'s samples for `function`, from the instance's `/metrics`.
    fn metric(&mut self, name: &str, function: &str) -> Option<f64> {
        let (_, samples) = self.runtime.block_on(self.pool.metrics(Self::NAME)).ok()?;
        Some(hubhost_metrics::sum(
            &samples,
            name,
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

    // The event that is not a reading was set aside through the `poison` blob output, in the
    // folder --storage names, its file exactly the blob's bytes: JSON, as any tool reads it.
    let folder = storage.join("deadletter");
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    let [file] = &files[..] else {
        panic!("{files:?} in {}", folder.display())
    };
    let records: Vec<Value> = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    assert_eq!(records[0]["body"], "not json", "{records:?}");
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

/// The blobs of `container` in `storage`, each as JSON.
fn json_blobs(storage: &Path, container: &str) -> Vec<Value> {
    let store = StorageLocation::Directory(storage.to_path_buf())
        .open()
        .unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut blobs = Vec::new();
        for blob in store.list(container, "").await.unwrap_or_default() {
            let content = store.get(container, &blob.name).await.unwrap().unwrap();
            blobs.push(serde_json::from_slice(&content.data).unwrap());
        }
        blobs
    })
}

#[test]
fn home_limits_runs_its_event_hubs_http_and_timer_functions_each_with_its_blob_input() {
    common::require!(Tool::PythonSdk);
    let bin_dir = build_examples();
    let dir = tempfile::tempdir().unwrap();
    let app = app_copy("home-limits", dir.path(), &bin_dir);
    let storage = dir.path().join("storage");
    // home-1's limits, where the blob inputs read them; home-2 has none.
    let limits = r#"{"maxCoPpm": 30}"#;
    let store = StorageLocation::Directory(storage.clone()).open().unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        store.ensure_container("limits").await.unwrap();
        store
            .put(
                "limits",
                "home-1.json",
                limits.as_bytes().to_vec().into(),
                &hubhost_storage::Metadata::new(),
                &hubhost_storage::Condition::Always,
            )
            .await
            .unwrap();
    });
    let hub = Hub::start(None);
    let co = |home: &str, ppm: f64| {
        json!({"homeId": home, "sensorId": "co-1", "type": "co", "value": ppm}).to_string()
    };
    send(
        &hub,
        "k",
        &[
            co("home-1", 35.5),
            co("home-1", 20.0),
            reading("home-1", "smoke", "ok"),
            co("home-2", 90.0),
            "not json".to_string(),
        ],
    );

    let mut emulate = Emulate::start(&app, &hub, &storage, dir.path());
    emulate.wait_processed("CheckLimits", 4.0);
    // The body that is not JSON has no `homeId` for the input's path: the host fails that
    // invocation before calling the function (no retry policy, so it moves on).
    let deadline = Instant::now() + Duration::from_secs(30);
    while emulate.metric("hubhost_batches_failed_total", "CheckLimits") != Some(1.0) {
        assert!(Instant::now() < deadline, "{}", emulate.log());
        std::thread::sleep(Duration::from_millis(250));
    }
    // Only home-1's first CO level is over its limits: home-2 has none, so passes anything.
    let over = json_blobs(&storage, "over-limit");
    assert_eq!(over.len(), 1, "{over:?}\n{}", emulate.log());
    assert_eq!(over[0]["homeId"], "home-1");
    assert_eq!(over[0]["coPpm"], 35.5);
    assert_eq!(over[0]["maxCoPpm"], 30.0);
    assert!(over[0]["sequenceNumber"].is_i64(), "{over:?}");

    // The HTTP function, at the URL emulate printed, reads the blob its route names.
    let out = std::fs::read_to_string(dir.path().join(format!("{}.out", Emulate::NAME)))
        .unwrap_or_default();
    let url = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Limits ← HTTP GET "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no URL for Limits in:\n{out}"));
    let base = url
        .strip_suffix("/api/limits/{home}")
        .unwrap_or_else(|| panic!("{url}"));
    let get = |url: String| {
        let (status, _, body) = common::http_request(&url, "GET", "", "");
        (status, body)
    };
    assert_eq!(
        get(format!("{base}/api/limits/home-1")),
        (200, limits.to_string())
    );
    assert_eq!(
        get(format!("{base}/api/limits/home-2")),
        (404, "no limits for home-2".to_string())
    );

    // The timer function fires every 5 s (its schedule is a setting of the app's).
    let deadline = Instant::now() + Duration::from_secs(30);
    let beats = loop {
        let beats = json_blobs(&storage, "heartbeats");
        if !beats.is_empty() || Instant::now() > deadline {
            break beats;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        !beats.is_empty(),
        "no heartbeat in 30 s:\n{out}\n{}",
        emulate.log()
    );
    assert_eq!(beats[0]["pastDue"], false, "{beats:?}");
    assert!(beats[0]["next"].is_string(), "{beats:?}");
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

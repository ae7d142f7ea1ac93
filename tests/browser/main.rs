//! The dashboard against a running `hubhost demo` (its own hub, pool, handler and store): the
//! test sends readings for homes of its own through the official Python SDK and finds them in
//! the page's views — a chart's minutes, the alarm, the fleet's active alarms — sees the pool in
//! the operations view, gets a home id made of HTML back as plain data, and then drives the page
//! itself in headless Chromium (tests/browser/dashboard.cjs), which saves a screenshot of each
//! view under target/screenshots/. A second demo is the explorer's: a hub added while it runs,
//! events from the Python and Rust SDKs in it, peeked and sent through the page (as JSON and in
//! Chromium, tests/browser/explorer.cjs), and a real event hub's read-only view.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A `hubhost demo` running in real time, stopped with SIGINT on drop.
struct Demo {
    child: Child,
    url: String,
    hub_port: u16,
    /// The hub's admin endpoint.
    admin: String,
    /// The hub's data directory, where it wrote its admin token.
    hub_dir: std::path::PathBuf,
    /// The hub's Kafka endpoint (`host:port`).
    kafka: String,
    /// The demo's trace collector (OTLP/HTTP).
    traces: String,
}

impl Demo {
    fn start(storage: &Path) -> Demo {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hubhost"))
            .args(["demo", "--homes", "50", "--speed-up", "1", "--port", "0"])
            .arg("--storage")
            .arg(storage)
            .env_remove("HUBHOST_STORAGE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("hubhost demo starts");
        let (lines, received) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        let (mut url, mut hub_port, mut admin, mut kafka, mut traces) =
            (None, None, None, None, None);
        let deadline = Instant::now() + Duration::from_secs(60);
        while url.is_none()
            || hub_port.is_none()
            || admin.is_none()
            || kafka.is_none()
            || traces.is_none()
        {
            let line = received
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("the demo prints its hub and its page's URL");
            if let Some(rest) = line.strip_prefix("event hub: amqp://127.0.0.1:") {
                hub_port = rest.split_whitespace().next().and_then(|p| p.parse().ok());
            }
            if let Some(rest) = line.strip_prefix("hub admin: ") {
                admin = rest.split_whitespace().next().map(str::to_string);
            }
            if let Some(rest) = line.strip_prefix("kafka: ") {
                kafka = rest.split_whitespace().next().map(str::to_string);
            }
            if let Some(rest) = line.strip_prefix("traces: ") {
                traces = rest.split_whitespace().next().map(str::to_string);
            }
            if line.starts_with("http://127.0.0.1:") {
                url = Some(line.trim_end_matches('/').to_string());
            }
        }
        Demo {
            child,
            url: url.unwrap(),
            hub_port: hub_port.unwrap(),
            admin: admin.unwrap(),
            hub_dir: storage.join("hub"),
            kafka: kafka.unwrap(),
            traces: traces.unwrap(),
        }
    }

    fn connection_string(&self) -> String {
        format!(
            "Endpoint=sb://localhost:{};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={};UseDevelopmentEmulator=true;",
            self.hub_port,
            common::KEY
        )
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.request(reqwest::Method::GET, path, None)
    }

    fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.request(reqwest::Method::POST, path, Some(body))
    }

    /// One request to the page's server: the status and the JSON answer (null if none).
    fn request(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let url = format!("{}{path}", self.url);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut request = reqwest::Client::new().request(method, &url);
            if let Some(body) = body {
                request = request
                    .header("content-type", "application/json")
                    .body(body.to_string());
            }
            let resp = request.send().await.unwrap();
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap_or_default();
            (status, serde_json::from_str(&text).unwrap_or(Value::Null))
        })
    }

    /// Polls `path` until `ready` holds (then returns the view), or fails after 30 s.
    fn wait_for(&self, path: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, view) = self.get(path);
            if status == 200 && ready(&view) {
                return view;
            }
            assert!(
                Instant::now() < deadline,
                "{path} never got there: {view:#}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Readings of one home, now: a motion, an open door and a glass break (an alarm).
fn readings(home: &str) -> Vec<String> {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    [
        ("hall-motion", "motion", "motion"),
        ("front-door", "door", "open"),
        ("living-glass", "glass_break", "break"),
    ]
    .iter()
    .map(|(sensor, kind, state)| {
        serde_json::json!({"homeId": home, "sensorId": sensor, "type": kind, "state": state, "ts": now})
            .to_string()
    })
    .collect()
}

fn send(demo: &Demo, home: &str) {
    let cs = demo.connection_string();
    let bodies = readings(home);
    let mut args = vec![cs.as_str(), "sensors", "send-keyed", home];
    args.extend(bodies.iter().map(String::as_str));
    let sent = common::python_json("eventhub_peer.py", &args);
    assert_eq!(sent["sent"], 3);
}

#[test]
fn the_dashboard_shows_what_was_sent_live() {
    common::require!(Tool::PythonSdk, Tool::Browser);
    let storage = tempfile::tempdir().unwrap();
    let demo = Demo::start(storage.path());
    let home = "test-home-dashboard";
    let html_home = r#"<img src=x onerror="document.title='pwned'">"#;
    let sent_at = Instant::now();
    send(&demo, home);
    send(&demo, html_home);

    // The home view: its minute with the three readings, per sensor type, and the alarm.
    let view = demo.wait_for(&format!("/api/dashboard/home.json?id={home}"), |v| {
        v["minutes"].as_array().is_some_and(|m| !m.is_empty())
    });
    let latency = sent_at.elapsed();
    let minutes = view["minutes"].as_array().unwrap();
    let events: u64 = minutes.iter().map(|m| m["events"].as_u64().unwrap()).sum();
    assert_eq!(events, 3, "{view:#}");
    assert_eq!(minutes[0]["counts"]["glass_break"], 1);
    assert_eq!(view["alarms"][0]["kind"], "glass_break");
    assert_eq!(view["alarms"][0]["sensorId"], "living-glass");
    assert_eq!(view["sensors"]["front-door"]["state"], "open");
    eprintln!("send → home view: {:.2} s", latency.as_secs_f64());

    // The HTML home id is data: the same characters come back, as a JSON string.
    let view = demo.wait_for(
        &format!(
            "/api/dashboard/home.json?id={}",
            percent_encoding::utf8_percent_encode(html_home, percent_encoding::NON_ALPHANUMERIC)
        ),
        |v| v["alarms"].as_array().is_some_and(|a| !a.is_empty()),
    );
    assert_eq!(view["home"], html_home);

    // The fleet view counts both homes' alarms as active.
    let fleet = demo.wait_for("/api/dashboard/fleet.json", |v| {
        v["activeAlarms"].as_array().is_some_and(|a| {
            a.iter()
                .filter(|x| x["home"] == home || x["home"] == html_home)
                .count()
                == 2
        })
    });
    assert!(fleet["eventsLastHour"].as_u64().unwrap() >= 6, "{fleet:#}");
    assert!(fleet["alarmsByType"]["glass_break"].as_u64().unwrap() >= 2);

    // Operations: the demo's two instances own all 16 partitions, eight each.
    let ops = demo.wait_for("/api/dashboard/operations.json", |v| {
        v["instances"].as_array().is_some_and(|i| {
            i.len() == 2
                && i.iter()
                    .all(|x| x["partitions"].as_array().unwrap().len() == 8)
        })
    });
    let partitions = ops["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 16);
    assert!(
        partitions.iter().all(|p| p["lastEnqueued"].is_i64()),
        "{ops:#}"
    );
    assert!(
        partitions.iter().all(|p| p["lag"].as_i64().unwrap() >= 0),
        "{ops:#}"
    );
    // One moment per view: while the fleet sends, no poll shows a checkpoint past its
    // partition's last enqueued event (the ends are read after the checkpoints).
    for _ in 0..12 {
        let (status, ops) = demo.get("/api/dashboard/operations.json");
        assert_eq!(status, 200);
        for p in ops["partitions"].as_array().unwrap() {
            if let (Some(checkpoint), Some(last)) =
                (p["checkpoint"].as_i64(), p["lastEnqueued"].as_i64())
            {
                assert!(checkpoint <= last, "checkpoint ahead of the hub: {p:#}");
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    assert!(ops["history"].as_array().is_some_and(|h| !h.is_empty()));
    assert_eq!(
        ops["scale"],
        serde_json::json!([]),
        "no scale controller runs"
    );

    // Bad input: a 400 naming the problem.
    let (status, body) = demo.get("/api/dashboard/home.json");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("missing_home_id"))
    );
    let (status, _) = demo.get(&format!("/api/dashboard/home.json?id={}", "x".repeat(65)));
    assert_eq!(status, 400);

    // An alarm's trace: a glass break sent by the Python SDK with tracing on, exporting to the
    // demo's own collector, appears on the Traces view from its reading to its enqueue.
    let traced_home = "test-home-traced";
    let reading = serde_json::json!({
        "homeId": traced_home, "sensorId": "hall-glass", "type": "glass_break", "state": "break",
        "ts": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    });
    let out = common::output_within(
        Command::new(common::python())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/traced_peer.py"))
            .args([
                demo.connection_string().as_str(),
                "sensors",
                "send",
                &reading.to_string(),
            ])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &demo.traces)
            .env("OTEL_SERVICE_NAME", "sensor-gateway"),
        common::COMMAND_LIMIT,
    );
    let sent = common::json_output("traced_peer.py send", &out);
    // The alarm shows as soon as the hub has it; the spans of its hops reach the demo's
    // collector in batches, up to a batch delay later. Wait for the last of each kind.
    let hops_expected = [
        "reading sent",
        "process sensors: delivered to SensorAggregator",
        "invoke SensorAggregator: request to the handler",
        "function SensorAggregator",
        "send alarms (output)",
        "alarm enqueued",
    ];
    let traces = demo.wait_for("/api/dashboard/traces.json", |v| {
        v.as_array().is_some_and(|alarms| {
            alarms.iter().any(|a| {
                a["home"] == traced_home
                    && hops_expected.iter().all(|expected| {
                        a["hops"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|h| h["label"] == *expected)
                    })
            })
        })
    });
    let alarm = traces
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["home"] == traced_home)
        .unwrap();
    let hops = alarm["hops"].as_array().unwrap();
    let labels: Vec<&str> = hops.iter().map(|h| h["label"].as_str().unwrap()).collect();
    assert_eq!(labels.first(), Some(&"reading sent"), "{alarm:#}");
    assert_eq!(hops[0]["service"], "sensor-gateway");
    for expected in [
        "process sensors: delivered to SensorAggregator",
        "invoke SensorAggregator: request to the handler",
        "function SensorAggregator",
        "send alarms (output)",
    ] {
        assert!(labels.contains(&expected), "{expected} in {labels:?}");
    }
    assert_eq!(labels.last(), Some(&"alarm enqueued"));
    let starts: Vec<f64> = hops
        .iter()
        .map(|h| h["startMs"].as_f64().unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
    // The reading is the producer's own span, found through the invocation's links (its trace
    // is the invocation's too when the batch held only events of that trace).
    assert!(sent["trace_id"].as_str().is_some_and(|t| t.len() == 32));
    let (status, body) = demo.get("/api/dashboard/traces.json?x=1");
    assert_eq!(status, 200, "{body}");

    // The page in a browser, starting with a home sent just now (send → page, browser start
    // included).
    let latency_home = "test-home-latency";
    send(&demo, latency_home);
    let sent_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/dashboard.cjs");
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    // An earlier run's screenshots must not pass for this run's.
    for view in ["fleet", "home", "home-html-id", "operations", "traces"] {
        let _ = std::fs::remove_file(shots.join(format!("{view}.png")));
    }
    let out = common::output_within(
        Command::new("node")
            .arg(&script)
            .args([
                demo.url.as_str(),
                home,
                html_home,
                latency_home,
                &sent_at_ms,
            ])
            .arg(&shots)
            .arg(traced_home)
            .env("NODE_PATH", common::node_modules()),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the browser test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    for view in ["fleet", "home", "operations", "traces"] {
        assert!(
            shots.join(format!("{view}.png")).exists(),
            "no screenshot of {view}"
        );
    }
}

/// `hubhost hub <action>` against the demo hub's admin endpoint, with the token it wrote to its
/// data directory: (exit code, stdout, stderr).
fn hub_action(demo: &Demo, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["hub"];
    all.extend_from_slice(args);
    let data_dir = demo.hub_dir.to_str().unwrap();
    all.extend_from_slice(&["--admin", &demo.admin, "--data-dir", data_dir]);
    common::hubhost(&all, &[])
}

#[test]
fn the_explorer_shows_the_hub_peeks_and_sends() {
    common::require!(Tool::PythonSdk, Tool::Browser, Tool::KafkaClients);
    let storage = tempfile::tempdir().unwrap();
    let demo = Demo::start(storage.path());

    // A hub and a consumer group added while the hub runs, as a user would add them.
    let (code, out, err) = hub_action(&demo, &["add-hub", "explorer-test:2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("explorer-test: 2 partitions"), "{out}");
    let (code, _, err) = hub_action(&demo, &["add-consumer-group", "explorer-test", "audit"]);
    assert_eq!(code, 0, "{err}");
    // What the official emulator's Config.json would refuse is refused, naming why.
    for (args, reason) in [
        (vec!["add-hub", "explorer-test:2"], "exists"),
        (vec!["add-hub", "too-many:64"], "1 to 32"),
        (vec!["add-hub", "bad!name:2"], "cannot name an event hub"),
        (
            vec!["add-consumer-group", "explorer-test", "$audit"],
            "cannot name a consumer group",
        ),
        (
            vec!["add-consumer-group", "explorer-test", "audit"],
            "exists",
        ),
        (
            vec!["add-consumer-group", "nowhere", "audit"],
            "no event hub nowhere",
        ),
    ] {
        let (code, _, err) = hub_action(&demo, &args);
        assert_eq!(code, 1, "{args:?}");
        assert!(err.contains(reason), "{args:?}: {err}");
    }

    // Events from both SDKs: the Python one's varied bodies on partition 0, readings from the
    // Rust one (`hubhost simulate`), and the added consumer group reads them all.
    let cs = demo.connection_string();
    let sent = common::python_json(
        "eventhub_peer.py",
        &[&cs, "explorer-test", "send-varied", "0"],
    );
    assert_eq!(sent["sent"], 4);
    let (code, _, err) = common::hubhost(
        &[
            "simulate",
            "--connection",
            &cs,
            "--hub",
            "explorer-test",
            "--events",
            "24",
            "--homes",
            "3",
            "--unthrottled",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let received = common::python_json(
        "eventhub_peer.py",
        &[&cs, "explorer-test", "receive", "audit", "28", "30"],
    );
    assert_eq!(received.as_array().unwrap().len(), 28);
    // And a Kafka consumer group, committing as it reads.
    let consumed = common::python_json(
        "kafka_peer.py",
        &[
            "consume",
            &demo.kafka,
            &cs,
            "confluent",
            "explorer-test",
            "kafka-audit",
            "28",
            "30",
        ],
    );
    assert_eq!(
        consumed["records"].as_array().unwrap().len(),
        28,
        "{consumed}"
    );

    // The explorer: every hub, the added one with its consumer groups; the sensors hub's
    // consumer groups with their owners (the demo's two instances) and lag.
    let view = demo.wait_for("/api/dashboard/explorer.json", |v| {
        v["hubs"].as_array().is_some_and(|hubs| {
            hubs.iter().any(|h| {
                h["name"] == "sensors"
                    && h["consumerGroups"].as_array().unwrap().iter().any(|g| {
                        g["name"] == "$default"
                            && g["checkpointed"] == true
                            && g["partitions"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .all(|p| p["owner"].is_string())
                    })
            })
        })
    });
    assert!(
        view["source"].as_str().unwrap().contains("hubhost hub"),
        "{view:#}"
    );
    assert_eq!(view["canPeek"], true);
    assert_eq!(view["canSend"], true);
    assert_eq!(
        view["opensOn"], "sensors",
        "the hub the functions are triggered by"
    );
    let hub = |name: &str| -> Value {
        view["hubs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no hub {name}: {view:#}"))
    };
    let added = hub("explorer-test");
    let groups: Vec<&str> = added["consumerGroups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["$default", "audit"]);
    let kafka = &added["kafkaGroups"][0];
    assert_eq!(kafka["name"], "kafka-audit", "{added:#}");
    assert_eq!(kafka["lag"], 0, "{added:#}");
    let events_in: i64 = added["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["lastSequenceNumber"].as_i64().unwrap() + 1)
        .sum();
    assert_eq!(events_in, 28);
    assert!(added["partitions"][0]["retainedBytes"].as_u64().unwrap() > 900_000);
    let sensors = hub("sensors");
    for group in sensors["consumerGroups"].as_array().unwrap() {
        assert!(
            group["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["lag"].as_i64().unwrap() >= 0),
            "{group:#}"
        );
    }

    // Peek: partition 0 from the start holds the four varied events first, each shown as it
    // is — bytes as hex, JSON pretty, HTML as text, the large one in part with its size.
    let (status, events) = demo.get(
        "/api/dashboard/explorer/events.json?hub=explorer-test&partition=0&from=earliest&count=4",
    );
    assert_eq!(status, 200, "{events:#}");
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 4);
    assert_eq!(events[0]["body"]["kind"], "hex");
    assert!(
        events[0]["body"]["shown"]
            .as_str()
            .unwrap()
            .starts_with("00 01 02 03")
    );
    assert_eq!(events[1]["body"]["kind"], "json");
    assert!(
        events[1]["body"]["shown"]
            .as_str()
            .unwrap()
            .contains("\"n\": 7")
    );
    assert_eq!(events[1]["properties"]["n"], 7);
    assert_eq!(events[1]["properties"]["flag"], true);
    assert_eq!(
        events[1]["systemProperties"]["content-type"],
        "application/json"
    );
    assert_eq!(events[2]["body"]["kind"], "text");
    assert_eq!(
        events[2]["body"]["shown"],
        "<b>bold</b> & <script>alert(1)</script>"
    );
    assert_eq!(events[3]["body"]["bytes"], 900_000);
    assert_eq!(events[3]["body"]["truncated"], true);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequenceNumber"], i as i64);
    }
    // The next page starts after the last one shown; the Rust SDK's readings carry their key.
    let (_, page) = demo
        .get("/api/dashboard/explorer/events.json?hub=explorer-test&partition=0&from=4&count=100");
    for e in page.as_array().unwrap() {
        assert!(e["sequenceNumber"].as_i64().unwrap() >= 4);
        assert!(
            e["partitionKey"].as_str().unwrap().starts_with("home-"),
            "{e:#}"
        );
        assert_eq!(e["body"]["kind"], "json");
    }
    // Peeking disturbed nobody: it took no receiver, so the audit group still reads everything.
    let again = common::python_json(
        "eventhub_peer.py",
        &[&cs, "explorer-test", "receive", "audit", "28", "30"],
    );
    assert_eq!(again.as_array().unwrap().len(), 28);

    // Send from the page: to a partition, with a property; bad sends are 400s naming why.
    let (status, receipt) = demo.post(
        "/api/dashboard/explorer/send",
        serde_json::json!({"hub": "explorer-test", "body": "from the page", "partitionId": "1",
                           "properties": {"source": "page"}}),
    );
    assert_eq!(status, 200, "{receipt:#}");
    let (_, latest) = demo.get(
        "/api/dashboard/explorer/events.json?hub=explorer-test&partition=1&from=latest&count=1",
    );
    assert_eq!(latest[0]["body"]["shown"], "from the page", "{latest:#}");
    assert_eq!(latest[0]["properties"]["source"], "page");
    for (body, reason) in [
        (
            serde_json::json!({"hub": "explorer-test", "body": "x", "partitionId": "1", "partitionKey": "k"}),
            "not both",
        ),
        (
            serde_json::json!({"hub": "nowhere", "body": "x"}),
            "no event hub",
        ),
        (
            serde_json::json!({"hub": "explorer-test", "body": "x", "partitionId": "9"}),
            "no partition",
        ),
        (serde_json::json!({"hub": "explorer-test"}), "bad_send"),
    ] {
        let (status, answer) = demo.post("/api/dashboard/explorer/send", body.clone());
        assert_eq!(status, 400, "{body}: {answer:#}");
        assert!(answer.to_string().contains(reason), "{body}: {answer:#}");
    }
    let (status, answer) = demo
        .get("/api/dashboard/explorer/events.json?hub=explorer-test&partition=0&from=yesterday");
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );

    // The page in Chromium: the explorer view, a peek with its next page, a send.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/explorer.cjs");
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    for view in ["explorer", "explorer-peek"] {
        let _ = std::fs::remove_file(shots.join(format!("{view}.png")));
    }
    let out = common::output_within(
        Command::new("node")
            .arg(&script)
            .args([demo.url.as_str(), "explorer-test"])
            .arg(&shots)
            .env("NODE_PATH", common::node_modules()),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "the explorer's browser test failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for view in ["explorer", "explorer-peek"] {
        assert!(
            shots.join(format!("{view}.png")).exists(),
            "no screenshot of {view}"
        );
    }
    let (_, latest) = demo.get(
        "/api/dashboard/explorer/events.json?hub=explorer-test&partition=1&from=latest&count=1",
    );
    assert_eq!(
        latest[0]["body"]["shown"], "sent from Chromium",
        "{latest:#}"
    );

    // A real event hub through the same settings, without a hub's admin endpoint: read-only
    // (its partitions; no peek), and no sending from a page the Functions host would serve.
    let store = storage.path().display().to_string();
    let handler = common::Server::start(
        &["--storage", &store],
        &[
            ("EventHubConnection", cs.as_str()),
            ("EventHubName", "sensors"),
            ("AzureWebJobsStorage", &store),
            // As under the Functions host, which would serve the page to anyone.
            ("FUNCTIONS_CUSTOMHANDLER_PORT", "7072"),
        ],
    );
    let url = handler.url();
    let get = |path: &str| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let resp = reqwest::get(format!("{url}{path}")).await.unwrap();
            let status = resp.status().as_u16();
            (
                status,
                serde_json::from_str::<Value>(&resp.text().await.unwrap()).unwrap(),
            )
        })
    };
    let (status, view) = get("/api/dashboard/explorer.json");
    assert_eq!(status, 200, "{view:#}");
    assert!(
        view["source"].as_str().unwrap().contains("read-only"),
        "{view:#}"
    );
    assert_eq!(
        (view["canPeek"].as_bool(), view["canSend"].as_bool()),
        (Some(false), Some(false))
    );
    assert_eq!(view["hubs"].as_array().unwrap().len(), 1);
    assert_eq!(view["hubs"][0]["partitions"].as_array().unwrap().len(), 16);
    let (status, answer) = get("/api/dashboard/explorer/events.json?hub=sensors&partition=0");
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (501, Some("unavailable"))
    );
}

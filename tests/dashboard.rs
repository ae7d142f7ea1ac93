//! The dashboard against a running `hubhost demo` (its own hub, pool, handler and store): the
//! test sends readings for homes of its own through the official Python SDK and finds them in
//! the page's views — a chart's minutes, the alarm, the fleet's active alarms — sees the pool in
//! the operations view, gets a home id made of HTML back as plain data, and then drives the page
//! itself in headless Chromium (tests/browser/dashboard.cjs), which saves a screenshot of each
//! view under target/screenshots/.

mod common;

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
        let (mut url, mut hub_port) = (None, None);
        let deadline = Instant::now() + Duration::from_secs(60);
        while url.is_none() || hub_port.is_none() {
            let line = received
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("the demo prints its hub and its page's URL");
            if let Some(rest) = line.strip_prefix("event hub: amqp://127.0.0.1:") {
                hub_port = rest.split_whitespace().next().and_then(|p| p.parse().ok());
            }
            if line.starts_with("http://127.0.0.1:") {
                url = Some(line.trim_end_matches('/').to_string());
            }
        }
        Demo {
            child,
            url: url.unwrap(),
            hub_port: hub_port.unwrap(),
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
        let url = format!("{}{path}", self.url);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let resp = reqwest::get(&url).await.unwrap();
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
    // Never a negative lag, though the checkpoints are read after the partition ends.
    assert!(
        partitions.iter().all(|p| p["lag"].as_i64().unwrap() >= 0),
        "{ops:#}"
    );
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
    for view in ["fleet", "home", "home-html-id", "operations"] {
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
    for view in ["fleet", "home", "operations"] {
        assert!(
            shots.join(format!("{view}.png")).exists(),
            "no screenshot of {view}"
        );
    }
}

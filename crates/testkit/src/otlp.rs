//! An OTLP receiver as a child process: `tests/python/otlp_receiver.py`, built on
//! OpenTelemetry's own protobuf definitions, listening over HTTP and gRPC on ports it picks,
//! and what it received, one JSON value per span or metric data point.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running receiver; killed on drop.
pub struct OtlpReceiver {
    child: Child,
    // Held open: the receiver exits when its stdin closes, so it never outlives the test.
    _stdin: ChildStdin,
    /// Its OTLP/HTTP port (`http://127.0.0.1:{http}` is an `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub http: u16,
    /// Its OTLP/gRPC port.
    pub grpc: u16,
    records: Arc<Mutex<Vec<Value>>>,
}

impl OtlpReceiver {
    /// Starts one (it needs [`crate::Tool::OpenTelemetry`]).
    pub fn start() -> OtlpReceiver {
        let mut child = Command::new(crate::python())
            .arg(crate::repository().join("tests/python/otlp_receiver.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the OTLP receiver starts");
        let stdin = child.stdin.take().expect("piped");
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let first = lines
            .next()
            .and_then(Result::ok)
            .expect("the receiver prints its ports");
        let ports: Value = serde_json::from_str(&first).expect("its ports as JSON");
        let records = Arc::new(Mutex::new(Vec::new()));
        let into = records.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Ok(record) = serde_json::from_str(&line) {
                    into.lock().expect("records lock").push(record);
                }
            }
        });
        let port = |name: &str| ports[name].as_u64().expect("a port") as u16;
        OtlpReceiver {
            http: port("http"),
            grpc: port("grpc"),
            child,
            _stdin: stdin,
            records,
        }
    }

    /// The `OTEL_EXPORTER_OTLP_ENDPOINT` of its HTTP side.
    pub fn http_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.http)
    }

    /// Everything received so far.
    pub fn records(&self) -> Vec<Value> {
        self.records.lock().expect("records lock").clone()
    }

    /// Waits up to 90 s until `found` finds what it looks for in the records so far; panics
    /// naming `what` and listing the records otherwise.
    pub fn wait_for<T>(&self, what: &str, found: impl Fn(&[Value]) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(value) = found(&self.records()) {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "the receiver got no {what}; it got: {:#}",
                Value::Array(self.records())
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The spans received from service `service`.
    pub fn spans<'a>(records: &'a [Value], service: &'a str) -> impl Iterator<Item = &'a Value> {
        records
            .iter()
            .filter(move |r| r["type"] == "span" && r["service"] == service)
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

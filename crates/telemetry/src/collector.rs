//! A small OTLP/HTTP receiver for spans, so that a local run shows its traces without a
//! tracing backend: `hubhost demo` exports to one in-process and its page reads traces from
//! it; the benchmarks count what was exported.
//!
//! It accepts `POST /v1/traces` (protobuf, as every OTLP/HTTP exporter sends by default) and
//! keeps the newest spans, up to a capacity, oldest dropped first; `POST /v1/metrics` and
//! `/v1/logs` are accepted and dropped. It listens on loopback only and assumes a hostile
//! client all the same: at most [`MAX_CONNECTIONS`] connections, a request's header within
//! [`READ_DEADLINE`], its body within [`READ_DEADLINE`] and [`MAX_BODY_BYTES`]; anything else
//! is answered with a JSON error naming the problem.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde::Serialize;
use serde_json::Value;

/// At most this many connections at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 64;
/// A request's header, and then its body, must arrive within this.
pub const READ_DEADLINE: Duration = Duration::from_secs(10);
/// The largest export request accepted (the SDKs send 512 spans per request by default).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// One span as received.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectedSpan {
    /// The resource's `service.name`.
    pub service: String,
    /// The span's name.
    pub name: String,
    /// OTLP's span kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i32,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits, or `None` for a root span.
    pub parent_span_id: Option<String>,
    /// `(trace id, span id)` of each linked span.
    pub links: Vec<(String, String)>,
    /// Unix time in nanoseconds.
    pub start_unix_nanos: u64,
    /// Unix time in nanoseconds.
    pub end_unix_nanos: u64,
    /// Its attributes, as JSON values.
    pub attributes: BTreeMap<String, Value>,
    /// Whether its status is an error.
    pub error: bool,
}

#[derive(Debug, Default)]
struct Spans {
    newest: VecDeque<CollectedSpan>,
    capacity: usize,
    /// The number of the newest span kept (spans are numbered from 1 as they arrive).
    last: u64,
}

/// A running receiver; it stops when dropped.
#[derive(Debug)]
pub struct Collector {
    endpoint: String,
    spans: Arc<Mutex<Spans>>,
    received: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    /// Listens on `127.0.0.1:port` (0: any free port), keeping the newest `capacity` spans.
    pub async fn start(port: u16, capacity: usize) -> std::io::Result<Collector> {
        Self::start_with_deadline(port, capacity, READ_DEADLINE).await
    }

    async fn start_with_deadline(
        port: u16,
        capacity: usize,
        deadline: Duration,
    ) -> std::io::Result<Collector> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let address = listener.local_addr()?;
        let spans = Arc::new(Mutex::new(Spans {
            newest: VecDeque::new(),
            capacity,
            last: 0,
        }));
        let received = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(serve(listener, spans.clone(), received.clone(), deadline));
        Ok(Collector {
            endpoint: format!("http://{address}"),
            spans,
            received,
            task,
        })
    }

    /// What `OTEL_EXPORTER_OTLP_ENDPOINT` is set to for exporting here.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Spans received since the start (including those since dropped for capacity).
    pub fn spans_received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// The spans kept of one trace, by start time.
    pub fn trace(&self, trace_id: &str) -> Vec<CollectedSpan> {
        let spans = self.spans.lock().expect("spans lock");
        let mut found: Vec<CollectedSpan> = spans
            .newest
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect();
        found.sort_by_key(|s| s.start_unix_nanos);
        found
    }

    /// The spans kept that arrived after span number `after` (0: all kept), and the number of
    /// the newest: pass it next time to get only what came since.
    pub fn since(&self, after: u64) -> (Vec<CollectedSpan>, u64) {
        let spans = self.spans.lock().expect("spans lock");
        let new = spans.last.saturating_sub(after) as usize;
        let kept = spans.newest.len();
        let found = spans
            .newest
            .iter()
            .skip(kept.saturating_sub(new))
            .cloned()
            .collect();
        (found, spans.last)
    }

    /// The span kept with these ids, if any.
    pub fn span(&self, trace_id: &str, span_id: &str) -> Option<CollectedSpan> {
        let spans = self.spans.lock().expect("spans lock");
        spans
            .newest
            .iter()
            .find(|s| s.trace_id == trace_id && s.span_id == span_id)
            .cloned()
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    spans: Arc<Mutex<Spans>>,
    received: Arc<AtomicU64>,
    deadline: Duration,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors, say: transient, never fatal.
                tracing::debug!(%error, "the trace collector could not accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (spans, received) = (spans.clone(), received.clone());
        let service = hyper::service::service_fn(move |request| {
            let (spans, received) = (spans.clone(), received.clone());
            async move { Ok::<_, Infallible>(answer(request, &spans, &received, deadline).await) }
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(deadline)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
            drop(slot);
        });
    }
}

async fn answer(
    request: Request<hyper::body::Incoming>,
    spans: &Mutex<Spans>,
    received: &AtomicU64,
    deadline: Duration,
) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_string();
    if request.method() != hyper::Method::POST {
        return error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "OTLP is sent with POST",
        );
    }
    if !["/v1/traces", "/v1/metrics", "/v1/logs"].contains(&path.as_str()) {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            "the receiver takes /v1/traces, /v1/metrics and /v1/logs",
        );
    }
    let body = Limited::new(request.into_body(), MAX_BODY_BYTES).collect();
    let bytes = match tokio::time::timeout(deadline, body).await {
        Err(_) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                "body_too_slow",
                "the body did not arrive in time",
            );
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                &format!("an export request is at most {MAX_BODY_BYTES} bytes"),
            );
        }
        Ok(Err(e)) => return error(StatusCode::BAD_REQUEST, "unreadable_body", &e.to_string()),
        Ok(Ok(body)) => body.to_bytes(),
    };
    if path != "/v1/traces" {
        return protobuf_ok();
    }
    let export = match ExportTraceServiceRequest::decode(bytes) {
        Ok(export) => export,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "not_otlp",
                &format!("the body is not an OTLP ExportTraceServiceRequest in protobuf: {e}"),
            );
        }
    };
    let collected = collect(export);
    received.fetch_add(collected.len() as u64, Ordering::Relaxed);
    let mut spans = spans.lock().expect("spans lock");
    for span in collected {
        spans.last += 1;
        if spans.newest.len() >= spans.capacity {
            spans.newest.pop_front();
        }
        if spans.capacity > 0 {
            spans.newest.push_back(span);
        }
    }
    protobuf_ok()
}

/// The spans of an export request, flattened.
fn collect(export: ExportTraceServiceRequest) -> Vec<CollectedSpan> {
    let mut out = Vec::new();
    for resource_spans in export.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref())
            .map(|v| match json_value(v) {
                Value::String(s) => s,
                other => other.to_string(),
            })
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                out.push(CollectedSpan {
                    service: service.clone(),
                    name: span.name,
                    kind: span.kind,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: (!span.parent_span_id.is_empty())
                        .then(|| hex(&span.parent_span_id)),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                        .collect(),
                    start_unix_nanos: span.start_time_unix_nano,
                    end_unix_nanos: span.end_time_unix_nano,
                    attributes: attributes(&span.attributes),
                    // STATUS_CODE_ERROR
                    error: span.status.is_some_and(|s| s.code == 2),
                });
            }
        }
    }
    out
}

fn attributes(pairs: &[KeyValue]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|kv| {
            let value = kv.value.as_ref().map_or(Value::Null, json_value);
            (kv.key.clone(), value)
        })
        .collect()
}

fn json_value(value: &AnyValue) -> Value {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => Value::from(s.as_str()),
        Some(any_value::Value::BoolValue(b)) => Value::from(*b),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::DoubleValue(d)) => Value::from(*d),
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(json_value).collect())
        }
        Some(any_value::Value::KvlistValue(kv)) => {
            Value::Object(attributes(&kv.values).into_iter().collect())
        }
        Some(any_value::Value::BytesValue(b)) => Value::from(hex(b)),
        _ => Value::Null,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn protobuf_ok() -> Response<Full<Bytes>> {
    // An empty message is a valid (empty) Export…ServiceResponse.
    Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", "application/x-protobuf")
        .body(Full::new(Bytes::new()))
        .expect("a response")
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({"error": code, "message": message}).to_string();
    Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a response")
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, span};

    fn export(service: &str, spans: Vec<Span>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue(service.into())),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn span(trace: u8, id: u8, parent: Option<u8>, start: u64) -> Span {
        Span {
            trace_id: vec![trace; 16],
            span_id: vec![id; 8],
            parent_span_id: parent.map(|p| vec![p; 8]).unwrap_or_default(),
            name: format!("span {id}"),
            kind: 5,
            start_time_unix_nano: start,
            end_time_unix_nano: start + 10,
            links: vec![span::Link {
                trace_id: vec![9; 16],
                span_id: vec![9; 8],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    async fn post(endpoint: &str, path: &str, body: Vec<u8>) -> (u16, String) {
        let response = reqwest::Client::new()
            .post(format!("{endpoint}{path}"))
            .header("Content-Type", "application/x-protobuf")
            .body(body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    #[tokio::test]
    async fn spans_are_kept_by_trace_newest_within_capacity_and_bad_bodies_are_named() {
        let collector = Collector::start(0, 3).await.unwrap();
        let endpoint = collector.endpoint().to_string();
        let first = export("app", vec![span(1, 2, Some(1), 200), span(1, 1, None, 100)]);
        assert_eq!(
            post(&endpoint, "/v1/traces", first.encode_to_vec()).await.0,
            200
        );
        let trace = collector.trace(&"01".repeat(16));
        assert_eq!(trace.len(), 2);
        assert_eq!(trace[0].span_id, "01".repeat(8), "by start time");
        assert_eq!(trace[0].parent_span_id, None);
        assert_eq!(trace[1].parent_span_id, Some("01".repeat(8)));
        assert_eq!(trace[1].service, "app");
        assert_eq!(trace[1].links, vec![("09".repeat(16), "09".repeat(8))]);

        let more = export("app", vec![span(2, 3, None, 300), span(2, 4, None, 400)]);
        post(&endpoint, "/v1/traces", more.encode_to_vec()).await;
        assert_eq!(collector.spans_received(), 4);
        assert_eq!(collector.trace(&"01".repeat(16)).len(), 1, "oldest dropped");
        let (new, last) = collector.since(2);
        assert_eq!(last, 4);
        assert_eq!(new.len(), 2, "the two that came after the second");
        assert_eq!(collector.since(last).0.len(), 0);
        assert_eq!(collector.since(0).0.len(), 3, "all that is kept");
        assert!(collector.span(&"02".repeat(16), &"04".repeat(8)).is_some());

        let (status, body) = post(&endpoint, "/v1/traces", b"\xff\xff not protobuf".to_vec()).await;
        assert_eq!(status, 400);
        assert!(body.contains("not_otlp"), "{body}");
        let (status, _) = post(&endpoint, "/v1/metrics", Vec::new()).await;
        assert_eq!(status, 200);
        let (status, body) = post(&endpoint, "/v2/other", Vec::new()).await;
        assert_eq!((status, body.contains("not_found")), (404, true));
        let (status, body) = post(&endpoint, "/v1/traces", vec![0; MAX_BODY_BYTES + 1]).await;
        assert_eq!((status, body.contains("body_too_large")), (413, true));
        assert_eq!(
            collector.spans_received(),
            4,
            "nothing kept from bad requests"
        );
    }

    #[tokio::test]
    async fn a_client_that_never_sends_its_header_or_body_is_cut_off_and_others_are_served() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let deadline = Duration::from_millis(300);
        let collector = Collector::start_with_deadline(0, 10, deadline)
            .await
            .unwrap();
        let address = collector
            .endpoint()
            .trim_start_matches("http://")
            .to_string();
        let mut silent = tokio::net::TcpStream::connect(&address).await.unwrap();
        let mut slow = tokio::net::TcpStream::connect(&address).await.unwrap();
        slow.write_all(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
            .await
            .unwrap();
        let mut buffer = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut buffer))
            .await
            .expect("the silent connection is closed");
        // Closed (or reset) without an answer: the connection's slot is free again.
        assert!(closed.map_or(true, |_| buffer.is_empty()), "{buffer:?}");
        let mut answer = vec![0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut answer))
            .await
            .expect("the slow body is answered")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("body_too_slow"), "{answer}");
        let ok = post(collector.endpoint(), "/v1/logs", Vec::new()).await;
        assert_eq!(ok.0, 200);
    }
}

#[cfg(test)]
mod with_the_sdk {
    use super::*;
    use opentelemetry::trace::{Tracer, TracerProvider};

    /// The OpenTelemetry SDK's own OTLP/HTTP exporter, as every hubhost process exports.
    #[tokio::test(flavor = "multi_thread")]
    async fn what_the_sdk_exports_arrives() {
        let collector = Collector::start(0, 100).await.unwrap();
        let endpoint = format!("{}/v1/traces", collector.endpoint());
        let provider = tokio::task::spawn_blocking(move || {
            use opentelemetry_otlp::WithExportConfig;
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(endpoint)
                .build()
                .unwrap();
            let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .build();
            let tracer = provider.tracer("test");
            tracer.in_span("one", |_| tracer.in_span("two", |_| {}));
            provider.force_flush().unwrap();
            provider
        })
        .await
        .unwrap();
        assert_eq!(collector.spans_received(), 2);
        let two = collector.trace(&collector_any_trace(&collector));
        assert_eq!(two.len(), 2);
        assert_eq!(
            two[1].parent_span_id.as_deref(),
            Some(two[0].span_id.as_str())
        );
        drop(provider);
    }

    fn collector_any_trace(collector: &Collector) -> String {
        let spans = collector.spans.lock().unwrap();
        spans.newest.front().unwrap().trace_id.clone()
    }
}

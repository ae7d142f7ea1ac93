//! Output bindings, carried out as the host does once the handler answered 2xx: the value under
//! each declared output's name in `Outputs` (`ReturnValue` for `$return`) is sent to an event
//! hub (`eventHub`) or written as a blob (`blob`). Any other binding type is refused when the
//! app is loaded ([`OutputPlan::resolve`]), so an output is never dropped without a word.
//!
//! How the host reads a value (docs/host-contract.md §6):
//! - unless the binding says `dataType: binary`, a *string* that is valid base64 becomes bytes
//!   ([`binding_value`]);
//! - an `eventHub` output sends one event per element of a JSON array (also of a string holding
//!   a JSON array), else one event ([`event_bodies`]); strings go as their text, other JSON as
//!   its text;
//! - a `blob` output writes bytes as they are, a string as its text, other JSON as its text.
//!
//! Failing to carry out an output fails the invocation, as in the host: the function's retry
//! policy delivers the batch again (so outputs are at-least-once, like the events).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use azure_messaging_eventhubs::ProducerClient;
use azure_messaging_eventhubs::models::EventData;
use base64::Engine;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::settings::AppSettings;
use super::{DEFAULT_CONNECTION_SETTING, EmulateError, SettingProblem};
use hubhost_eventhubs::{EventHubTarget, close_quietly};
use hubhost_functions::function_app::{BindingSpec, Direction, FunctionSpec};
use hubhost_storage::settings::{STORAGE_SETTING_VAR, SettingsError, resolve_storage};
use hubhost_storage::{Condition, Metadata, SharedStore, StoreError};

/// The binding types this emulation carries out.
pub const SUPPORTED: &str = "eventHub and blob outputs";

/// How long one output's blob write may take before the invocation counts as failed.
const OUTPUT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one output's send may take. Shorter than a write: after the hub restarts, the
/// SDK's producer can wait for an answer that never comes (seen in `bench chaos`), and a
/// fresh producer then sends at once; every invocation of the partition waits meanwhile.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Why one of an answer's outputs was not carried out. The invocation then fails, as in the
/// host, and the function's retry policy delivers the batch again.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// An `eventHub` output's events were not sent.
    #[error("output '{output}': {source}")]
    Send { output: String, source: SendError },
    /// A `blob` output's write got no answer within its time limit.
    #[error("output '{output}': no answer from storage")]
    StorageTimeout { output: String },
    /// A `blob` output's write failed.
    #[error("output '{output}': writing {blob}: {source}")]
    Write {
        output: String,
        /// `container/name`.
        blob: String,
        source: StoreError,
    },
    /// A failure a fault plan injected (`hubhost rehearse`, `emulate --faults`).
    #[error("output '{output}': injected failure (the service answered 503 Server Busy)")]
    Injected { output: String },
}

/// Why events for an `eventHub` output were not sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The sending thread is gone (the emulated host is stopping).
    #[error("the output sender stopped")]
    SenderStopped,
    /// The event hub gave no answer in time; the next send starts on a new connection.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// One event is larger than a message may be.
    #[error("an event of {bytes} bytes does not fit one message")]
    TooLarge { bytes: usize },
    /// The producer could not be opened.
    #[error(transparent)]
    Open(#[from] hubhost_eventhubs::EventHubsError),
    /// The event hub refused or failed a batch.
    #[error(transparent)]
    Service(#[from] azure_messaging_eventhubs::EventHubsError),
}

/// Why a `blob` output's `path` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BlobPathError {
    #[error("path \"{path}\" is not container/name")]
    NotContainerAndName { path: String },
    #[error("path \"{path}\": the container cannot hold binding expressions")]
    ExpressionInContainer { path: String },
    #[error("path \"{path}\" has an unclosed '{{'")]
    UnclosedExpression { path: String },
    #[error(
        "path \"{path}\" uses {{{expression}}}, which hubhost emulate does not resolve (it resolves {{rand-guid}}, {{sys.randguid}}, {{DateTime}}, {{sys.utcnow}} and %Setting%)"
    )]
    UnresolvedExpression { path: String, expression: String },
    /// The container, or a name the path renders, is not a valid blob storage name.
    #[error("path \"{path}\": {source}")]
    InvalidName { path: String, source: StoreError },
}

/// Why an output binding of a function.json cannot be carried out by `hubhost emulate`.
#[derive(Debug, thiserror::Error)]
pub enum BindingProblem {
    /// Input bindings (a blob read before the call, …) are the host's, not carried out here.
    #[error("input bindings are not carried out by hubhost emulate (it carries out {SUPPORTED})")]
    Input,
    /// A type other than `eventHub` and `blob`.
    #[error(
        "hubhost emulate does not implement this binding type (it carries out {SUPPORTED}); remove it or run the app under the Functions host"
    )]
    Unsupported,
    #[error("no \"eventHubName\"")]
    NoEventHubName,
    #[error("no \"path\"")]
    NoPath,
    /// An unset `%Setting%`, or a `connection` setting that says no way to an event hub.
    #[error(transparent)]
    Setting(#[from] SettingProblem),
    #[error(transparent)]
    Path(#[from] BlobPathError),
    #[error(transparent)]
    Store(#[from] BlobStoreError),
}

/// Why a `blob` output's storage cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum BlobStoreError {
    /// The `connection` setting names no usable storage.
    #[error(transparent)]
    Setting(#[from] SettingsError),
    /// The storage it names cannot be opened.
    #[error(transparent)]
    Open(#[from] StoreError),
}

/// What one function's answer is turned into.
#[derive(Default)]
pub struct OutputPlan {
    outputs: Vec<PlannedOutput>,
}

struct PlannedOutput {
    name: String,
    binary: bool,
    action: OutputAction,
}

impl PlannedOutput {
    /// The value an answer gives this output (`ReturnValue` for `$return`), as the host reads
    /// it; `None` when the answer sets none.
    fn value_in(&self, answer: &Value) -> Option<OutputValue> {
        let value = if self.name == "$return" {
            answer.get("ReturnValue")
        } else {
            answer.get("Outputs").and_then(|o| o.get(&self.name))
        };
        let value = value.filter(|v| !v.is_null())?;
        Some(binding_value(self.binary, value.clone()))
    }
}

enum OutputAction {
    EventHub {
        target: EventHubTarget,
        sender: EventSender,
    },
    Blob {
        store: SharedStore,
        path: BlobPath,
    },
}

/// What carrying out one answer's outputs did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OutputsDone {
    pub events_sent: usize,
    pub blobs_written: usize,
}

impl OutputPlan {
    /// Every binding of `spec` but its trigger, checked and resolved against the settings: a
    /// binding this emulation does not carry out is an error naming it.
    pub fn resolve(
        spec: &FunctionSpec,
        settings: &AppSettings,
        sender: &EventSender,
    ) -> Result<Self, EmulateError> {
        let mut outputs = Vec::new();
        for binding in &spec.bindings {
            let bad = |problem: BindingProblem| EmulateError::Binding {
                function: spec.name.clone(),
                binding: binding.name.clone(),
                kind: binding.kind.clone(),
                problem: Box::new(problem),
            };
            if binding.direction == Direction::In {
                return Err(bad(BindingProblem::Input));
            }
            let expand = |text: &str| {
                settings
                    .expand(text)
                    .map_err(|e| bad(SettingProblem::Expand(e).into()))
            };
            let action = if binding.is("eventHub") {
                let hub = binding
                    .event_hub_name()
                    .ok_or_else(|| bad(BindingProblem::NoEventHubName))?;
                let hub = expand(hub)?;
                // `connection` may be `%Setting%` too; EntityPath wins over eventHubName.
                let setting = expand(
                    binding
                        .setting("connection")
                        .unwrap_or(DEFAULT_CONNECTION_SETTING),
                )?;
                let setting = setting.as_str();
                let target = EventHubTarget::from_settings(setting, &hub, |k| settings.get(k))
                    .map_err(|source| {
                        bad(SettingProblem::Connection {
                            setting: setting.to_string(),
                            source,
                        }
                        .into())
                    })?;
                OutputAction::EventHub {
                    target,
                    sender: sender.clone(),
                }
            } else if binding.is("blob") {
                let path = binding
                    .setting("path")
                    .ok_or_else(|| bad(BindingProblem::NoPath))?;
                let path =
                    BlobPath::parse(&expand(path)?).map_err(|e| bad(BindingProblem::Path(e)))?;
                let store =
                    blob_store(binding, settings).map_err(|e| bad(BindingProblem::Store(e)))?;
                OutputAction::Blob { store, path }
            } else {
                return Err(bad(BindingProblem::Unsupported));
            };
            outputs.push(PlannedOutput {
                name: binding.name.clone(),
                binary: binding.is_binary(),
                action,
            });
        }
        Ok(OutputPlan { outputs })
    }

    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }

    /// What carrying out the outputs of one 2xx answer would do, without doing it: per output
    /// the answer set, its type, where it would go and what (`hubhost invoke` prints it). Bodies
    /// are text when they are UTF-8, else `{"base64": …}`.
    pub fn describe(&self, answer: &Value) -> serde_json::Map<String, Value> {
        let mut described = serde_json::Map::new();
        for output in &self.outputs {
            let Some(value) = output.value_in(answer) else {
                continue;
            };
            let entry = match &output.action {
                OutputAction::EventHub { target, .. } => serde_json::json!({
                    "type": "eventHub",
                    "eventHub": target.hub,
                    "namespace": target.namespace,
                    "events": event_bodies(value).iter().map(|b| body_json(b)).collect::<Vec<_>>(),
                }),
                OutputAction::Blob { path, .. } => {
                    let (container, name) = path.render(Utc::now(), uuid::Uuid::new_v4());
                    serde_json::json!({
                        "type": "blob",
                        "blob": format!("{container}/{name}"),
                        "content": body_json(&blob_content(value)),
                    })
                }
            };
            described.insert(output.name.clone(), entry);
        }
        described
    }

    /// Carries out the outputs of one 2xx answer (its JSON body). Events sent carry
    /// `trace_context` (the handler's invocation span, from its `traceresponse` header) as
    /// `Diagnostic-Id` and `traceparent`, as the Azure SDKs stamp the events they send, so that
    /// the next consumer continues the trace.
    pub async fn carry_out(
        &self,
        answer: &Value,
        trace_context: Option<&str>,
        faults: Option<&super::faults::FaultSwitch>,
    ) -> Result<OutputsDone, OutputError> {
        let mut done = OutputsDone::default();
        for output in &self.outputs {
            let Some(value) = output.value_in(answer) else {
                continue;
            };
            if faults.is_some_and(|f| f.output_failing(&output.name)) {
                return Err(OutputError::Injected {
                    output: output.name.clone(),
                });
            }
            match &output.action {
                OutputAction::EventHub { target, sender } => {
                    let bodies = event_bodies(value);
                    let count = bodies.len();
                    let (span, stamp) = send_span(&target.hub, count, trace_context);
                    sender
                        .send(target.clone(), bodies, stamp.as_deref())
                        .instrument(span)
                        .await
                        .map_err(|source| OutputError::Send {
                            output: output.name.clone(),
                            source,
                        })?;
                    done.events_sent += count;
                }
                OutputAction::Blob { store, path } => {
                    let (container, name) = path.render(Utc::now(), uuid::Uuid::new_v4());
                    let content = bytes::Bytes::from(blob_content(value));
                    let write = async {
                        store.ensure_container(&container).await?;
                        store
                            .put(
                                &container,
                                &name,
                                content,
                                &Metadata::new(),
                                &Condition::Always,
                            )
                            .await
                    };
                    tokio::time::timeout(OUTPUT_TIMEOUT, write)
                        .await
                        .map_err(|_| OutputError::StorageTimeout {
                            output: output.name.clone(),
                        })?
                        .map_err(|source| OutputError::Write {
                            output: output.name.clone(),
                            blob: format!("{container}/{name}"),
                            source,
                        })?;
                    done.blobs_written += 1;
                }
            }
        }
        Ok(done)
    }
}

/// The span of sending an `eventHub` output's events, as the Azure SDKs trace a send, and the
/// context the events are stamped with: the send span's when the emulated host exports spans
/// (a child of the handler's invocation span, given by its `traceresponse`), else the
/// handler's own.
fn send_span(hub: &str, count: usize, handler: Option<&str>) -> (tracing::Span, Option<String>) {
    if !hubhost_telemetry::exporting_traces() {
        return (tracing::Span::none(), handler.map(str::to_string));
    }
    let span = tracing::info_span!(
        "send",
        "otel.name" = format!("send {hub}"),
        "otel.kind" = "producer",
        "messaging.system" = "eventhubs",
        "messaging.operation.type" = "send",
        "messaging.destination.name" = hub,
        "messaging.batch.message_count" = count as i64,
    );
    let parent = handler.and_then(hubhost_telemetry::TraceParent::parse);
    hubhost_telemetry::connect(&span, parent, &[]);
    let stamp = hubhost_telemetry::traceparent_of(&span)
        .map(|context| context.to_string())
        .or_else(|| handler.map(str::to_string));
    (span, stamp)
}

/// The storage a `blob` binding's `connection` names (default `AzureWebJobsStorage`, as in the
/// host), read the same way as the app's own storage setting.
fn blob_store(
    binding: &BindingSpec,
    settings: &AppSettings,
) -> Result<SharedStore, BlobStoreError> {
    let setting = binding
        .setting("connection")
        .unwrap_or(hubhost_storage::settings::DEFAULT_STORAGE_SETTING)
        .to_string();
    let location = resolve_storage(None, |key| {
        if key == STORAGE_SETTING_VAR {
            Some(setting.clone())
        } else {
            settings.get(key)
        }
    })?;
    Ok(location.open()?)
}

/// An output value once the host has read it: bytes, or JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputValue {
    Bytes(Vec<u8>),
    Json(Value),
}

/// The host's reading of an output value: unless the binding is `binary`, a string that .NET's
/// `Convert.FromBase64String` accepts becomes the bytes it encodes (whitespace ignored, padding
/// required) — so `"abcd"` is three bytes, and `""` none.
pub fn binding_value(binary: bool, value: Value) -> OutputValue {
    if !binary && let Value::String(text) = &value {
        let compact: String = text
            .chars()
            .filter(|c| !matches!(c, ' ' | '\t' | '\r' | '\n'))
            .collect();
        let engine = base64::engine::GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            base64::engine::GeneralPurposeConfig::new()
                .with_decode_allow_trailing_bits(true)
                .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireCanonical),
        );
        if compact.len().is_multiple_of(4)
            && let Ok(bytes) = engine.decode(compact.as_bytes())
        {
            return OutputValue::Bytes(bytes);
        }
    }
    OutputValue::Json(value)
}

/// The events an `eventHub` output value sends: one per element of an array (or of a string
/// holding a JSON array), else one.
pub fn event_bodies(value: OutputValue) -> Vec<Vec<u8>> {
    let elements = match value {
        OutputValue::Bytes(bytes) => return vec![bytes],
        OutputValue::Json(Value::Array(items)) => items,
        OutputValue::Json(Value::String(text)) if looks_like_json(&text) => {
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Array(items)) => items,
                Ok(other) => vec![other],
                Err(_) => vec![Value::String(text)],
            }
        }
        OutputValue::Json(other) => vec![other],
    };
    elements.into_iter().map(text_of).collect()
}

/// A `blob` output value's content.
pub fn blob_content(value: OutputValue) -> Vec<u8> {
    match value {
        OutputValue::Bytes(bytes) => bytes,
        OutputValue::Json(v) => text_of(v),
    }
}

/// A string as its text, anything else as JSON text (the host indents objects; compact here).
/// A body as JSON for people: its text when it is UTF-8, else `{"base64": …}`.
fn body_json(body: &[u8]) -> Value {
    match std::str::from_utf8(body) {
        Ok(text) => Value::from(text),
        Err(_) => {
            serde_json::json!({"base64": base64::engine::general_purpose::STANDARD.encode(body)})
        }
    }
}

fn text_of(value: Value) -> Vec<u8> {
    match value {
        Value::String(s) => s.into_bytes(),
        other => other.to_string().into_bytes(),
    }
}

/// The host's test for "this string is JSON": an object or an array by its first and last
/// characters.
fn looks_like_json(text: &str) -> bool {
    let t = text.trim();
    (t.starts_with('{') && t.ends_with('}')) || (t.starts_with('[') && t.ends_with(']'))
}

/// A blob output's `path`: `container/name`, where the name may hold the binding expressions
/// that need no trigger data: `{rand-guid}` and `{sys.randguid}` (a new GUID each time),
/// `{DateTime}` (`yyyy-MM-ddTHH-mm-ssZ`) and `{sys.utcnow}` (RFC 3339). Others are refused.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobPath {
    container: String,
    parts: Vec<PathPart>,
}

#[derive(Debug, Clone, PartialEq)]
enum PathPart {
    Text(String),
    Guid,
    DateTime,
    UtcNow,
}

impl BlobPath {
    pub fn parse(path: &str) -> Result<Self, BlobPathError> {
        let path_text = || path.to_string();
        let (container, name) = path
            .split_once('/')
            .filter(|(c, n)| !c.is_empty() && !n.is_empty())
            .ok_or_else(|| BlobPathError::NotContainerAndName { path: path_text() })?;
        if container.contains('{') {
            return Err(BlobPathError::ExpressionInContainer { path: path_text() });
        }
        let invalid = |source| BlobPathError::InvalidName {
            path: path_text(),
            source,
        };
        hubhost_storage::validate_container_name(container).map_err(invalid)?;
        let mut parts = Vec::new();
        let mut rest = name;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(PathPart::Text(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| BlobPathError::UnclosedExpression { path: path_text() })?;
            let expression = &rest[open + 1..open + close];
            parts.push(match expression.to_ascii_lowercase().as_str() {
                "rand-guid" | "sys.randguid" => PathPart::Guid,
                "datetime" => PathPart::DateTime,
                "sys.utcnow" => PathPart::UtcNow,
                _ => {
                    return Err(BlobPathError::UnresolvedExpression {
                        path: path_text(),
                        expression: expression.to_string(),
                    });
                }
            });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(PathPart::Text(rest.to_string()));
        }
        let parsed = BlobPath {
            container: container.to_string(),
            parts,
        };
        let (_, sample) = parsed.render(Utc::now(), uuid::Uuid::nil());
        hubhost_storage::validate_blob_name(&sample).map_err(invalid)?;
        Ok(parsed)
    }

    /// The container and blob name for one write.
    pub fn render(&self, now: DateTime<Utc>, guid: uuid::Uuid) -> (String, String) {
        let mut name = String::new();
        for part in &self.parts {
            match part {
                PathPart::Text(t) => name.push_str(t),
                PathPart::Guid => name.push_str(&guid.hyphenated().to_string()),
                PathPart::DateTime => name.push_str(&now.format("%Y-%m-%dT%H-%M-%SZ").to_string()),
                PathPart::UtcNow => {
                    name.push_str(&now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                }
            }
        }
        (self.container.clone(), name)
    }
}

/// Sends events for `eventHub` outputs, on a thread of its own: the SDK's sends must run on a
/// single-threaded runtime ([`hubhost_eventhubs::on_sending_thread`] says why), and
/// one long-lived thread keeps one producer per event hub open between invocations.
#[derive(Clone)]
pub struct EventSender {
    requests: mpsc::UnboundedSender<SendRequest>,
}

struct SendRequest {
    target: EventHubTarget,
    bodies: Vec<Vec<u8>>,
    trace_context: Option<String>,
    done: oneshot::Sender<Result<(), SendError>>,
}

impl EventSender {
    /// Starts the sending thread; it ends when the last clone is dropped.
    pub fn start() -> Self {
        let (requests, mut incoming) = mpsc::unbounded_channel::<SendRequest>();
        std::thread::Builder::new()
            .name("hubhost-outputs".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread tokio runtime");
                runtime.block_on(async move {
                    let mut producers: HashMap<String, Arc<ProducerClient>> = HashMap::new();
                    while let Some(request) = incoming.recv().await {
                        let key = format!("{}/{}", request.target.namespace, request.target.hub);
                        let outcome = tokio::time::timeout(
                            SEND_TIMEOUT,
                            send_all(
                                &mut producers,
                                &key,
                                &request.target,
                                &request.bodies,
                                request.trace_context.as_deref(),
                            ),
                        )
                        .await
                        .unwrap_or(Err(SendError::Timeout(SEND_TIMEOUT)));
                        if outcome.is_err() {
                            // Start over on a new connection next time.
                            if let Some(stale) = producers.remove(&key)
                                && let Ok(stale) = Arc::try_unwrap(stale)
                            {
                                close_quietly("output producer", stale.close()).await;
                            }
                        }
                        let _ = request.done.send(outcome);
                    }
                    for (_, producer) in producers {
                        if let Ok(producer) = Arc::try_unwrap(producer) {
                            close_quietly("output producer", producer.close()).await;
                        }
                    }
                });
            })
            .expect("a thread for outputs");
        EventSender { requests }
    }

    /// Sends `bodies` to `target`'s event hub, in order, in as few batches as fit, each event
    /// stamped with `trace_context` when there is one.
    pub async fn send(
        &self,
        target: EventHubTarget,
        bodies: Vec<Vec<u8>>,
        trace_context: Option<&str>,
    ) -> Result<(), SendError> {
        if bodies.is_empty() {
            return Ok(());
        }
        let (done, outcome) = oneshot::channel();
        self.requests
            .send(SendRequest {
                target,
                bodies,
                trace_context: trace_context.map(str::to_string),
                done,
            })
            .map_err(|_| SendError::SenderStopped)?;
        outcome.await.map_err(|_| SendError::SenderStopped)?
    }
}

async fn send_all(
    producers: &mut HashMap<String, Arc<ProducerClient>>,
    key: &str,
    target: &EventHubTarget,
    bodies: &[Vec<u8>],
    trace_context: Option<&str>,
) -> Result<(), SendError> {
    let producer = match producers.get(key) {
        Some(p) => p.clone(),
        None => {
            let p = Arc::new(target.producer().await?);
            producers.insert(key.to_string(), p.clone());
            p
        }
    };
    let mut batch = producer.create_batch(None).await?;
    for body in bodies {
        let event = || {
            let mut event = EventData::builder().with_body(body.clone());
            if let Some(context) = trace_context {
                for property in hubhost_telemetry::trace_context::EVENT_PROPERTIES {
                    event = event.add_property(property.to_string(), context.to_string());
                }
            }
            event.build()
        };
        if batch.try_add_event_data(event(), None)? {
            continue;
        }
        if batch.is_empty() {
            return Err(SendError::TooLarge { bytes: body.len() });
        }
        producer.send_batch(batch, None).await?;
        batch = producer.create_batch(None).await?;
        if !batch.try_add_event_data(event(), None)? {
            return Err(SendError::TooLarge { bytes: body.len() });
        }
    }
    if !batch.is_empty() {
        producer.send_batch(batch, None).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulate::ExpandError;
    use serde_json::json;

    #[test]
    fn strings_that_are_base64_become_bytes_unless_the_binding_is_binary() {
        assert_eq!(
            binding_value(false, json!("aGk=")),
            OutputValue::Bytes(b"hi".to_vec())
        );
        // The host's quirk: a short word can be valid base64.
        assert_eq!(
            binding_value(false, json!("abcd")),
            OutputValue::Bytes(vec![0x69, 0xb7, 0x1d])
        );
        assert_eq!(binding_value(false, json!("")), OutputValue::Bytes(vec![]));
        assert_eq!(
            binding_value(false, json!("hello")),
            OutputValue::Json(json!("hello"))
        );
        assert_eq!(
            binding_value(true, json!("aGk=")),
            OutputValue::Json(json!("aGk="))
        );
        assert_eq!(
            binding_value(false, json!(["aGk="])),
            OutputValue::Json(json!(["aGk="]))
        );
    }

    #[test]
    fn event_hub_values_become_one_event_per_array_element() {
        let bodies = |v: Value| -> Vec<String> {
            event_bodies(binding_value(false, v))
                .into_iter()
                .map(|b| String::from_utf8(b).unwrap())
                .collect()
        };
        assert_eq!(
            bodies(json!(["a", "{\"x\":1}", {"y": 2}])),
            ["a", "{\"x\":1}", "{\"y\":2}"]
        );
        assert_eq!(bodies(json!("[\"a\",\"b\"]")), ["a", "b"]);
        assert_eq!(bodies(json!("{\"k\": 1}")), ["{\"k\":1}"]);
        assert_eq!(bodies(json!("plain text")), ["plain text"]);
        assert_eq!(bodies(json!({"o": true})), ["{\"o\":true}"]);
        assert_eq!(bodies(json!(7)), ["7"]);
        assert_eq!(
            event_bodies(binding_value(false, json!("aGk="))),
            [b"hi".to_vec()]
        );
    }

    #[test]
    fn what_the_framework_sends_arrives_exactly() {
        let mut output = hubhost_functions::output::FunctionOutput::default();
        output
            .send_event_text("e", "abcd")
            .send_event_text("e", "[1]");
        output.write_blob("b", [0u8, 255, 10]);
        let events = event_bodies(binding_value(false, output.outputs["e"].clone()));
        assert_eq!(events, [b"abcd".to_vec(), b"[1]".to_vec()]);
        assert_eq!(
            blob_content(binding_value(false, output.outputs["b"].clone())),
            [0u8, 255, 10]
        );
    }

    #[test]
    fn bindings_emulation_cannot_carry_out_are_refused_saying_why() {
        let settings = AppSettings::from_pairs([("Container", "out")]);
        let sender = EventSender::start();
        let problem = |binding: Value| {
            let trigger = json!({"type": "eventHubTrigger", "name": "ev", "eventHubName": "h"});
            let spec =
                FunctionSpec::from_json("f", &json!({ "bindings": [trigger, binding] })).unwrap();
            match OutputPlan::resolve(&spec, &settings, &sender) {
                Err(EmulateError::Binding {
                    function, problem, ..
                }) if function == "f" => *problem,
                other => panic!("not a binding error: {:?}", other.map(|_| ())),
            }
        };
        let blob =
            |path: &str| json!({"type": "blob", "direction": "out", "name": "b", "path": path});
        assert!(matches!(
            problem(json!({"type": "blob", "direction": "in", "name": "b", "path": "c/n"})),
            BindingProblem::Input
        ));
        assert!(matches!(
            problem(json!({"type": "queue", "direction": "out", "name": "q"})),
            BindingProblem::Unsupported
        ));
        assert!(matches!(
            problem(json!({"type": "blob", "direction": "out", "name": "b"})),
            BindingProblem::NoPath
        ));
        assert!(matches!(
            problem(blob("%Missing%/x")),
            BindingProblem::Setting(SettingProblem::Expand(ExpandError::Unset { name }))
                if name == "Missing"
        ));
        assert!(matches!(
            problem(blob("%Container%")),
            BindingProblem::Path(BlobPathError::NotContainerAndName { path }) if path == "out"
        ));
        assert!(matches!(
            problem(json!({"type": "eventHub", "direction": "out", "name": "e"})),
            BindingProblem::NoEventHubName
        ));
    }

    #[test]
    fn blob_paths_resolve_expressions_or_name_the_one_they_cannot() {
        let path = BlobPath::parse("reports/{DateTime}/{rand-guid}.json").unwrap();
        let now = DateTime::parse_from_rfc3339("2026-11-23T21:05:09Z")
            .unwrap()
            .with_timezone(&Utc);
        let guid = uuid::Uuid::from_u128(1);
        assert_eq!(
            path.render(now, guid),
            (
                "reports".to_string(),
                "2026-11-23T21-05-09Z/00000000-0000-0000-0000-000000000001.json".to_string()
            )
        );
        let e = BlobPath::parse("reports/{PartitionContext.PartitionId}.json").unwrap_err();
        assert!(
            matches!(&e, BlobPathError::UnresolvedExpression { expression, .. } if expression == "PartitionContext.PartitionId"),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("{PartitionContext.PartitionId}"),
            "{e}"
        );
        assert!(matches!(
            BlobPath::parse("noslash"),
            Err(BlobPathError::NotContainerAndName { .. })
        ));
        assert!(matches!(
            BlobPath::parse("{x}/name"),
            Err(BlobPathError::ExpressionInContainer { .. })
        ));
        assert!(matches!(
            BlobPath::parse("reports/{unclosed"),
            Err(BlobPathError::UnclosedExpression { .. })
        ));
        assert!(matches!(
            BlobPath::parse("reports/../up"),
            Err(BlobPathError::InvalidName { .. })
        ));
    }
}

//! Output bindings, carried out as the host does once the handler answered 2xx: the value under
//! each declared output's name in `Outputs` (`ReturnValue` for `$return`) goes where its type
//! says. Each type has a room of its own:
//! - `event_hub`: `eventHub` outputs, sent as events;
//! - `blob`: `blob` outputs, written as blobs;
//! - `queue` and `table`: Storage queue messages and table entities, on the account the
//!   binding's `connection` names (Azurite locally);
//! - `outbox`: every other type (cosmosDB, serviceBus, sql, …), which no local service carries
//!   out here, kept as JSON lines in a local outbox, and queue and table outputs whose
//!   connection names no storage account (the embedded default, a local folder). The emulated
//!   host says so at start for each such binding, and `--strict-bindings` refuses the app
//!   instead.
//!
//! How the host reads a value (docs/host-contract.md §6):
//! - unless the binding says `dataType: binary`, a *string* that is valid base64 becomes bytes
//!   ([`binding_value`]);
//! - a collector output (`eventHub`, and the outbox's types) takes one item per element of a
//!   JSON array, also of a string holding a JSON array, else the value as one item
//!   ([`collector_items`], the host's `FunctionBinding.ReadAsEnumerable`);
//! - a `blob` output writes bytes as they are, a string as its text, other JSON as its text.
//!
//! Failing to carry out an output fails the invocation, as in the host: the function's retry
//! policy delivers the batch again (so outputs are at-least-once, like the events).
//!
//! The next binding type is one more room and one more arm in [`OutputPlan::resolve`].

mod blob;
mod event_hub;
mod outbox;
mod queue;
mod table;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use serde_json::Value;
use tracing::Instrument;

use super::settings::AppSettings;
use super::{DEFAULT_CONNECTION_SETTING, EmulateError, SettingProblem};
use hubhost_eventhubs::EventHubTarget;
use hubhost_functions::function_app::{Direction, FunctionSpec};
use hubhost_storage::queue::QueueService;
use hubhost_storage::settings::{STORAGE_SETTING_VAR, SettingsError, resolve_storage};
use hubhost_storage::table::TableService;
use hubhost_storage::{SharedStore, StorageLocation, StoreError};

pub(crate) use blob::blob_store;
pub use blob::{BlobPath, BlobPathError, BlobStoreError, blob_content};
pub use event_hub::{EventSender, SendError, event_bodies};
pub use outbox::{Outbox, OutboxError, OutboxNameError};
pub use queue::{MessageEncoding, MessageEncodingError, item_bytes};

/// The binding types carried out against a service.
pub const CARRIED_OUT: &str = "eventHub, blob, queue and table outputs";

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
    /// A `queue` output's message was not put.
    #[error("output '{output}': putting a message on queue {queue}: {source}")]
    Queue {
        output: String,
        queue: String,
        source: StoreError,
    },
    /// A `table` output's entity was refused, or not written.
    #[error("output '{output}': writing to table {table}: {source}")]
    Table {
        output: String,
        table: String,
        source: StoreError,
    },
    /// A `table` output's value is not an entity the Tables extension would write.
    #[error("output '{output}': {problem}")]
    NotAnEntity { output: String, problem: String },
    /// An output kept in the outbox could not be written there.
    #[error("output '{output}': {source}")]
    Outbox { output: String, source: OutboxError },
    /// A failure a fault plan injected (`hubhost rehearse`, `emulate --faults`).
    #[error("output '{output}': injected failure (the service answered 503 Server Busy)")]
    Injected { output: String },
}

/// Why an output binding of a function.json cannot be carried out by `hubhost emulate`.
#[derive(Debug, thiserror::Error)]
pub enum BindingProblem {
    /// An input binding of a type no local service reads here.
    #[error(
        "hubhost emulate does not read this input binding type (it reads blob inputs; it carries out {CARRIED_OUT}, and keeps other outputs in its outbox); remove it or run the app under the Functions host"
    )]
    Input,
    /// A blob input's `dataType` other than `string` or `binary`.
    #[error(
        "dataType \"{data_type}\": hubhost emulate reads blob inputs as string (the default) or binary"
    )]
    InputDataType { data_type: String },
    /// `--strict-bindings`: a type that would be kept in the outbox.
    #[error(
        "hubhost emulate does not carry out this binding type (it carries out {CARRIED_OUT}), and --strict-bindings refuses to keep its values in the outbox; remove the flag, remove the binding, or run the app under the Functions host"
    )]
    NotCarriedOut,
    #[error("no \"eventHubName\"")]
    NoEventHubName,
    #[error("no \"path\"")]
    NoPath,
    #[error("no \"queueName\"")]
    NoQueueName,
    #[error("no \"tableName\"")]
    NoTableName,
    /// A queue's or a table's name, or a table's key, that cannot be used.
    #[error("{setting} \"{value}\": {problem}")]
    BadName {
        setting: &'static str,
        value: String,
        problem: String,
    },
    /// The `connection` setting names no usable storage.
    #[error(transparent)]
    Storage(#[from] SettingsError),
    #[error(transparent)]
    MessageEncoding(#[from] MessageEncodingError),
    /// An unset `%Setting%`, or a `connection` setting that says no way to an event hub.
    #[error(transparent)]
    Setting(#[from] SettingProblem),
    #[error(transparent)]
    Path(#[from] BlobPathError),
    #[error(transparent)]
    Store(#[from] BlobStoreError),
    /// The function's or the binding's name cannot name an outbox file.
    #[error(transparent)]
    OutboxName(#[from] OutboxNameError),
}

/// Where outputs go that are not carried out in the answer's own process: events through the
/// sending thread, the types no local service carries out into the outbox (`None`: such a
/// binding is refused, `--strict-bindings`).
#[derive(Clone)]
pub struct OutputSinks {
    pub sender: EventSender,
    pub outbox: Option<Outbox>,
    /// host.json's `extensions`, which say how queue messages are encoded.
    pub host_json: Value,
    /// A simulation's blob store, which every `blob` output writes to whatever its
    /// connection; `None`: the account its connection names.
    pub blobs: Option<SharedStore>,
}

impl OutputSinks {
    /// A new sending thread, and the outbox in `outbox` (`None`: strict), for the app whose
    /// host.json is `host_json`.
    pub fn start(outbox: Option<PathBuf>, host_json: &Value) -> Self {
        OutputSinks {
            sender: EventSender::start(),
            outbox: outbox.map(Outbox::new),
            host_json: host_json.clone(),
            blobs: None,
        }
    }
}

/// The invocation whose answer is carried out: what each outbox line says it came from.
#[derive(Debug, Clone, Copy)]
pub struct InvocationOrigin<'a> {
    pub function: &'a str,
    pub invocation_id: &'a str,
    pub partition_id: &'a str,
    /// The batch's first and last sequence numbers (none for an empty batch).
    pub sequence_numbers: Option<(i64, i64)>,
}

impl<'a> InvocationOrigin<'a> {
    /// An invocation of a trigger without events (HTTP, timer): no partition, no sequence
    /// numbers.
    pub fn without_events(function: &'a str, invocation_id: &'a str) -> Self {
        InvocationOrigin {
            function,
            invocation_id,
            partition_id: "",
            sequence_numbers: None,
        }
    }
}

/// What one function's answer is turned into.
#[derive(Default)]
pub struct OutputPlan {
    /// The function's name, for what is said of it.
    function: String,
    outputs: Vec<PlannedOutput>,
    /// Every output function.json declares, by name: the planned ones and an HTTP function's
    /// `http` response, which its trigger carries out.
    declared: Vec<String>,
    /// Successful answers that set an output function.json does not declare: the host drops
    /// it and counts a success.
    undeclared: AtomicU64,
}

struct PlannedOutput {
    name: String,
    /// Its `type` in function.json.
    kind: String,
    binary: bool,
    action: OutputAction,
    /// Items carried out or kept so far (events sent, blobs written, outbox lines).
    items: AtomicU64,
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
    Queue {
        service: Arc<QueueService>,
        queue: String,
        encoding: MessageEncoding,
    },
    Table {
        service: Arc<TableService>,
        table: String,
        keys: table::BindingKeys,
    },
    /// Kept in the outbox, one line per item.
    Outbox {
        kind: String,
        outbox: Outbox,
        file: PathBuf,
        /// Why it is kept rather than carried out (said at start).
        reason: &'static str,
    },
}

/// Why a queue or table output goes to the outbox: its connection names no account.
const NO_ACCOUNT: &str = "its connection names no storage account with this service (to carry it out, set it, e.g. AzureWebJobsStorage=UseDevelopmentStorage=true with Azurite running)";
/// Why other outputs go to the outbox.
const NO_SERVICE: &str = "no local service carries out this type";

/// What carrying out one answer's outputs did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OutputsDone {
    pub events_sent: usize,
    pub blobs_written: usize,
    pub messages_put: usize,
    pub entities_written: usize,
    /// Items written to the outbox.
    pub values_kept: usize,
}

/// An output binding whose values go to the outbox (said at start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptOutput {
    pub binding: String,
    /// Its `type` in function.json.
    pub kind: String,
    pub file: PathBuf,
    /// Why it is not carried out.
    pub reason: &'static str,
}

impl OutputPlan {
    /// Every binding of `spec` but its trigger, checked and resolved against the settings: a
    /// binding this emulation cannot carry out or keep is an error naming it.
    pub fn resolve(
        spec: &FunctionSpec,
        settings: &AppSettings,
        sinks: &OutputSinks,
    ) -> Result<Self, EmulateError> {
        let mut outputs = Vec::new();
        for binding in &spec.bindings {
            let bad = |problem: BindingProblem| EmulateError::Binding {
                function: spec.name.clone(),
                binding: binding.name.clone(),
                kind: binding.kind.clone(),
                problem: Box::new(problem),
            };
            if binding.is("http") {
                // An HTTP function's response: its trigger takes it (`triggers::http`).
                continue;
            }
            if binding.direction == Direction::In {
                // Read before the call (`inputs`).
                continue;
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
                    sender: sinks.sender.clone(),
                }
            } else if binding.is("blob") {
                let path = binding
                    .setting("path")
                    .ok_or_else(|| bad(BindingProblem::NoPath))?;
                let path =
                    BlobPath::parse(&expand(path)?).map_err(|e| bad(BindingProblem::Path(e)))?;
                let store = match &sinks.blobs {
                    Some(simulated) => simulated.clone(),
                    None => blob::blob_store(binding, settings)
                        .map_err(|e| bad(BindingProblem::Store(e)))?,
                };
                OutputAction::Blob { store, path }
            } else {
                let storage = || {
                    storage_location(binding, settings).map_err(|e| bad(BindingProblem::Storage(e)))
                };
                let carried = if binding.is("queue") {
                    let queue = binding
                        .setting("queueName")
                        .ok_or_else(|| bad(BindingProblem::NoQueueName))?;
                    // Lowercased, as the extension does.
                    let queue = fixed_name(&expand(queue)?, "queueName")
                        .map_err(&bad)?
                        .to_ascii_lowercase();
                    hubhost_storage::queue::validate_queue_name(&queue)
                        .map_err(|e| bad(name_problem("queueName", &queue, e)))?;
                    let encoding = MessageEncoding::from_host_json(&sinks.host_json)
                        .map_err(|e| bad(e.into()))?;
                    match storage()? {
                        StorageLocation::Azure(connection) => QueueService::new(&connection)
                            .map_err(|e| bad(BindingProblem::Store(e.into())))?
                            .map(|service| OutputAction::Queue {
                                service: Arc::new(service),
                                queue,
                                encoding,
                            }),
                        _ => None,
                    }
                } else if binding.is("table") {
                    let table = binding
                        .setting("tableName")
                        .ok_or_else(|| bad(BindingProblem::NoTableName))?;
                    let table = fixed_name(&expand(table)?, "tableName").map_err(&bad)?;
                    hubhost_storage::table::validate_table_name(&table)
                        .map_err(|e| bad(name_problem("tableName", &table, e)))?;
                    let key = |setting: &'static str| -> Result<_, EmulateError> {
                        binding
                            .setting(setting)
                            .map(|text| {
                                let text = expand(text)?;
                                crate::emulate::template::Template::parse(&text).map_err(|e| {
                                    bad(BindingProblem::BadName {
                                        setting,
                                        value: text.clone(),
                                        problem: e.to_string(),
                                    })
                                })
                            })
                            .transpose()
                    };
                    let keys = table::BindingKeys {
                        partition_key: key("partitionKey")?,
                        row_key: key("rowKey")?,
                    };
                    match storage()? {
                        StorageLocation::Azure(connection) => TableService::new(&connection)
                            .map_err(|e| bad(BindingProblem::Store(e.into())))?
                            .map(|service| OutputAction::Table {
                                service: Arc::new(service),
                                table,
                                keys,
                            }),
                        _ => None,
                    }
                } else {
                    None
                };
                match carried {
                    Some(action) => action,
                    None => {
                        let outbox = sinks
                            .outbox
                            .as_ref()
                            .ok_or_else(|| bad(BindingProblem::NotCarriedOut))?;
                        let file = outbox
                            .file_for(&spec.name, &binding.name)
                            .map_err(|e| bad(BindingProblem::OutboxName(e)))?;
                        let storage_type = binding.is("queue") || binding.is("table");
                        OutputAction::Outbox {
                            kind: binding.kind.clone(),
                            outbox: outbox.clone(),
                            file,
                            reason: if storage_type { NO_ACCOUNT } else { NO_SERVICE },
                        }
                    }
                }
            };
            outputs.push(PlannedOutput {
                name: binding.name.clone(),
                kind: binding.kind.clone(),
                binary: binding.is_binary(),
                action,
                items: AtomicU64::new(0),
            });
        }
        Ok(OutputPlan {
            function: spec.name.clone(),
            outputs,
            declared: spec.outputs().map(|b| b.name.clone()).collect(),
            undeclared: AtomicU64::new(0),
        })
    }

    /// Answers that set outputs the function does not declare, so far (`/metrics`).
    pub fn undeclared_count(&self) -> u64 {
        self.undeclared.load(Ordering::Relaxed)
    }

    /// The outputs `answer` sets that are not declared: dropped, as the host drops them, and
    /// said as an error (the user's bug: data lost without a sign on Azure), and counted; the
    /// message, when there are any.
    fn check_declared(&self, answer: &Value) -> Option<String> {
        let undeclared: Vec<String> = answer
            .get("Outputs")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|outputs| outputs.keys())
            .filter(|name| !self.declared.contains(name))
            .cloned()
            .collect();
        if undeclared.is_empty() {
            return None;
        }
        self.undeclared.fetch_add(1, Ordering::Relaxed);
        let declared: Vec<&str> = self.declared.iter().map(String::as_str).collect();
        let message =
            hubhost_functions::testing::undeclared_message(&self.function, &undeclared, &declared);
        tracing::error!(function = %self.function, "{message}");
        Some(message)
    }

    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }

    /// Each output's binding name, type and the items carried out or kept so far (`/metrics`).
    pub fn item_counts(&self) -> Vec<(&str, &str, u64)> {
        self.outputs
            .iter()
            .map(|o| {
                (
                    o.name.as_str(),
                    o.kind.as_str(),
                    o.items.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// The outputs whose values go to the outbox.
    pub fn kept(&self) -> Vec<KeptOutput> {
        self.outputs
            .iter()
            .filter_map(|output| match &output.action {
                OutputAction::Outbox {
                    kind, file, reason, ..
                } => Some(KeptOutput {
                    binding: output.name.clone(),
                    kind: kind.clone(),
                    file: file.clone(),
                    reason,
                }),
                _ => None,
            })
            .collect()
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
                    let (container, name) =
                        path.render(hubhost_clock::now(), hubhost_clock::uuid());
                    serde_json::json!({
                        "type": "blob",
                        "blob": format!("{container}/{name}"),
                        "content": body_json(&blob_content(value)),
                    })
                }
                OutputAction::Queue {
                    queue, encoding, ..
                } => serde_json::json!({
                    "type": "queue",
                    "queue": queue,
                    "messages": collector_items(value)
                        .into_iter()
                        .map(|item| encoding.message_text(&item_bytes(item)))
                        .collect::<Vec<_>>(),
                }),
                OutputAction::Table { table, keys, .. } => {
                    let entities =
                        table::entities(value, keys, hubhost_clock::now(), hubhost_clock::uuid());
                    serde_json::json!({
                        "type": "table",
                        "table": table,
                        "entities": match entities {
                            Ok(entities) => Value::from(
                                entities.into_iter().map(|e| Value::Object(e.properties)).collect::<Vec<_>>(),
                            ),
                            Err(problem) => serde_json::json!({"refused": problem}),
                        },
                    })
                }
                OutputAction::Outbox { kind, file, .. } => serde_json::json!({
                    "type": kind,
                    "outbox": file.display().to_string(),
                    "values": collector_items(value).iter().map(outbox::item_json).collect::<Vec<_>>(),
                }),
            };
            described.insert(output.name.clone(), entry);
        }
        described
    }

    /// Carries out the outputs of one 2xx answer (its JSON body) of `origin`. Events sent carry
    /// `trace_context` (the handler's invocation span, from its `traceresponse` header) as
    /// `Diagnostic-Id` and `traceparent`, as the Azure SDKs stamp the events they send, so that
    /// the next consumer continues the trace.
    pub async fn carry_out(
        &self,
        answer: &Value,
        origin: &InvocationOrigin<'_>,
        trace_context: Option<&str>,
        faults: Option<&super::faults::FaultSwitch>,
    ) -> Result<OutputsDone, OutputError> {
        if let Some(message) = self.check_declared(answer)
            && let Some(faults) = faults
        {
            faults.undeclared_output(message);
        }
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
                    let (span, stamp) = event_hub::send_span(&target.hub, count, trace_context);
                    sender
                        .send(target.clone(), bodies, stamp.as_deref())
                        .instrument(span)
                        .await
                        .map_err(|source| OutputError::Send {
                            output: output.name.clone(),
                            source,
                        })?;
                    done.events_sent += count;
                    output.items.fetch_add(count as u64, Ordering::Relaxed);
                }
                OutputAction::Blob { store, path } => {
                    blob::write(store, path, value, &output.name).await?;
                    done.blobs_written += 1;
                    output.items.fetch_add(1, Ordering::Relaxed);
                }
                OutputAction::Queue {
                    service,
                    queue,
                    encoding,
                } => {
                    let items = collector_items(value);
                    let count = items.len();
                    queue::put(service, queue, *encoding, items, &output.name).await?;
                    done.messages_put += count;
                    output.items.fetch_add(count as u64, Ordering::Relaxed);
                }
                OutputAction::Table {
                    service,
                    table,
                    keys,
                } => {
                    let entities =
                        table::entities(value, keys, hubhost_clock::now(), hubhost_clock::uuid())
                            .map_err(|problem| OutputError::NotAnEntity {
                            output: output.name.clone(),
                            problem,
                        })?;
                    let count = entities.len();
                    table::write(service, table, entities, &output.name).await?;
                    done.entities_written += count;
                    output.items.fetch_add(count as u64, Ordering::Relaxed);
                }
                OutputAction::Outbox {
                    kind, outbox, file, ..
                } => {
                    let items = collector_items(value);
                    let lines =
                        outbox::lines(origin, &output.name, kind, &items, hubhost_clock::now());
                    outbox
                        .append(file, lines)
                        .await
                        .map_err(|source| OutputError::Outbox {
                            output: output.name.clone(),
                            source,
                        })?;
                    done.values_kept += items.len();
                    output
                        .items
                        .fetch_add(items.len() as u64, Ordering::Relaxed);
                }
            }
        }
        Ok(done)
    }
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

/// What a collector output (`IAsyncCollector`: `eventHub`, queue, cosmosDB, …) is handed for
/// one value, as the host's `FunctionBinding.ReadAsEnumerable` reads it: each element of an
/// array, also of a string holding a JSON array; a string holding other JSON as that JSON; else
/// the value itself.
pub fn collector_items(value: OutputValue) -> Vec<OutputValue> {
    let elements = match value {
        OutputValue::Bytes(bytes) => return vec![OutputValue::Bytes(bytes)],
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
    elements.into_iter().map(OutputValue::Json).collect()
}

/// A body as JSON for people: its text when it is UTF-8, else `{"base64": …}`.
fn body_json(body: &[u8]) -> Value {
    match std::str::from_utf8(body) {
        Ok(text) => Value::from(text),
        Err(_) => {
            serde_json::json!({"base64": base64::engine::general_purpose::STANDARD.encode(body)})
        }
    }
}

/// A string as its text, anything else as JSON text (the host indents objects; compact here).
fn text_of(value: Value) -> Vec<u8> {
    match value {
        Value::String(s) => s.into_bytes(),
        other => other.to_string().into_bytes(),
    }
}

/// How long one output's storage writes (a blob, a queue's messages, a table's entities) may
/// take before the invocation counts as failed.
const STORAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `write` within [`STORAGE_TIMEOUT`]: its error made an [`OutputError`] by `failed`, or a
/// timeout of `output`.
async fn within_storage_timeout(
    output: &str,
    write: impl std::future::Future<Output = Result<(), StoreError>>,
    failed: impl FnOnce(StoreError) -> OutputError,
) -> Result<(), OutputError> {
    tokio::time::timeout(STORAGE_TIMEOUT, write)
        .await
        .map_err(|_| OutputError::StorageTimeout {
            output: output.to_string(),
        })?
        .map_err(failed)
}

/// The storage a binding's `connection` names (default `AzureWebJobsStorage`, as in the host),
/// read the same way as the app's own storage setting.
fn storage_location(
    binding: &hubhost_functions::function_app::BindingSpec,
    settings: &AppSettings,
) -> Result<StorageLocation, SettingsError> {
    let setting = binding
        .setting("connection")
        .unwrap_or(hubhost_storage::settings::DEFAULT_STORAGE_SETTING)
        .to_string();
    resolve_storage(None, |key| {
        if key == STORAGE_SETTING_VAR {
            Some(setting.clone())
        } else {
            settings.get(key)
        }
    })
}

/// A queue's or a table's name: binding expressions there are resolved from trigger data,
/// which the emulated host does not do.
fn fixed_name(name: &str, setting: &'static str) -> Result<String, BindingProblem> {
    if name.contains('{') {
        return Err(BindingProblem::BadName {
            setting,
            value: name.to_string(),
            problem: "binding expressions in a queue's or a table's name are not resolved by hubhost emulate".into(),
        });
    }
    Ok(name.to_string())
}

fn name_problem(setting: &'static str, value: &str, error: StoreError) -> BindingProblem {
    BindingProblem::BadName {
        setting,
        value: value.to_string(),
        problem: match error {
            StoreError::InvalidName { reason, .. } => reason,
            other => other.to_string(),
        },
    }
}

/// The host's test for "this string is JSON": an object or an array by its first and last
/// characters.
fn looks_like_json(text: &str) -> bool {
    let t = text.trim();
    (t.starts_with('{') && t.ends_with('}')) || (t.starts_with('[') && t.ends_with(']'))
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
        let strict = OutputSinks::start(None, &json!({}));
        let problem = |binding: Value| {
            let trigger = json!({"type": "eventHubTrigger", "name": "ev", "eventHubName": "h"});
            let spec =
                FunctionSpec::from_json("f", &json!({ "bindings": [trigger, binding] })).unwrap();
            match OutputPlan::resolve(&spec, &settings, &strict) {
                Err(EmulateError::Binding {
                    function, problem, ..
                }) if function == "f" => *problem,
                other => panic!("not a binding error: {:?}", other.map(|_| ())),
            }
        };
        let blob =
            |path: &str| json!({"type": "blob", "direction": "out", "name": "b", "path": path});
        assert!(matches!(
            problem(json!({"type": "cosmosDB", "direction": "out", "name": "docs"})),
            BindingProblem::NotCarriedOut
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
        assert!(matches!(
            problem(json!({"type": "queue", "direction": "out", "name": "q"})),
            BindingProblem::NoQueueName
        ));
        assert!(matches!(
            problem(
                json!({"type": "queue", "direction": "out", "name": "q", "queueName": "{PartitionKey}"})
            ),
            BindingProblem::BadName {
                setting: "queueName",
                ..
            }
        ));
        assert!(matches!(
            problem(
                json!({"type": "table", "direction": "out", "name": "t", "tableName": "no-dash"})
            ),
            BindingProblem::BadName {
                setting: "tableName",
                ..
            }
        ));
        // Without --strict-bindings, a queue output whose connection names no account goes to
        // the outbox, saying why.
        let dir = tempfile::tempdir().unwrap();
        let sinks = OutputSinks::start(Some(dir.path().to_path_buf()), &json!({}));
        let spec = FunctionSpec::from_json(
            "f",
            &json!({ "bindings": [
                {"type": "eventHubTrigger", "name": "ev", "eventHubName": "h"},
                {"type": "queue", "direction": "out", "name": "q", "queueName": "work"},
            ]}),
        )
        .unwrap();
        let kept = OutputPlan::resolve(&spec, &settings, &sinks)
            .unwrap()
            .kept();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].reason, NO_ACCOUNT);
    }

    #[tokio::test]
    async fn outputs_no_service_carries_out_are_kept_in_the_outbox_each_item_once() {
        let dir = tempfile::tempdir().unwrap();
        let sinks = OutputSinks::start(Some(dir.path().to_path_buf()), &json!({}));
        let spec = FunctionSpec::from_json(
            "Fan",
            &json!({ "bindings": [
                {"type": "eventHubTrigger", "name": "ev", "eventHubName": "h"},
                {"type": "cosmosDB", "direction": "out", "name": "docs"},
                {"type": "serviceBus", "direction": "out", "name": "$return"},
            ]}),
        )
        .unwrap();
        let plan = OutputPlan::resolve(&spec, &AppSettings::from_pairs([]), &sinks).unwrap();
        let kept = plan.kept();
        assert_eq!(
            kept.iter()
                .map(|k| (k.binding.as_str(), k.kind.as_str()))
                .collect::<Vec<_>>(),
            [("docs", "cosmosDB"), ("$return", "serviceBus")]
        );
        let answer = json!({
            "Outputs": {"docs": [{"id": "1"}, {"id": "2"}]},
            "ReturnValue": "{\"order\": 7}",
        });
        let origin = InvocationOrigin {
            function: "Fan",
            invocation_id: "i",
            partition_id: "0",
            sequence_numbers: Some((5, 6)),
        };
        let done = plan.carry_out(&answer, &origin, None, None).await.unwrap();
        assert_eq!(done.values_kept, 3);
        let read = |file: &std::path::Path| -> Vec<Value> {
            std::fs::read_to_string(file)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let docs = read(&kept[0].file);
        assert_eq!(
            docs.iter().map(|l| l["value"].clone()).collect::<Vec<_>>(),
            [json!({"id": "1"}), json!({"id": "2"})]
        );
        // A string holding JSON is handed over as that JSON, as the host's collector is.
        assert_eq!(read(&kept[1].file)[0]["value"], json!({"order": 7}));
        // invoke shows the same, without writing.
        let shown = plan.describe(&answer);
        assert_eq!(shown["docs"]["type"], "cosmosDB");
        assert_eq!(shown["docs"]["values"], json!([{"id": "1"}, {"id": "2"}]));
        assert_eq!(read(&kept[0].file).len(), 2);
        assert_eq!(plan.undeclared_count(), 0);

        // An output the declaration lacks: dropped, as the host drops it, and counted.
        let typo = json!({"Outputs": {"docs": [{"id": "3"}], "doc": [{"id": "4"}]}});
        let done = plan.carry_out(&typo, &origin, None, None).await.unwrap();
        assert_eq!(done.values_kept, 1);
        assert_eq!(plan.undeclared_count(), 1);
        assert_eq!(read(&kept[0].file).len(), 3);
    }

    /// An HTTP function's `http` output is its response, which the trigger carries out: an
    /// answer setting it sets nothing undeclared.
    #[tokio::test]
    async fn an_http_functions_response_is_a_declared_output() {
        let sinks = OutputSinks::start(None, &json!({}));
        let spec = FunctionSpec::from_json(
            "Hello",
            &json!({ "bindings": [
                {"type": "httpTrigger", "direction": "in", "name": "req"},
                {"type": "http", "direction": "out", "name": "res"},
            ]}),
        )
        .unwrap();
        let plan = OutputPlan::resolve(&spec, &AppSettings::from_pairs([]), &sinks).unwrap();
        let origin = InvocationOrigin {
            function: "Hello",
            invocation_id: "i",
            partition_id: "",
            sequence_numbers: None,
        };
        let answer = json!({"Outputs": {"res": {"statusCode": 200, "body": "hi"}}});
        plan.carry_out(&answer, &origin, None, None).await.unwrap();
        assert_eq!(plan.undeclared_count(), 0);
        let typo = json!({"Outputs": {"resp": {"statusCode": 200}}});
        plan.carry_out(&typo, &origin, None, None).await.unwrap();
        assert_eq!(plan.undeclared_count(), 1);
    }
}

//! `hubhost invoke`: one batch to one function, exactly as the Functions host would send it,
//! and the answer as the host reads it — without a hub, a pool or a checkpoint store.
//!
//! The events come from a file ([`parse_events`]: a JSON array or NDJSON, each event a body —
//! text or JSON — with an optional partition key and properties) or are one sample event. The
//! handler is started as `emulate` starts it (host.json's `customHandler`, the port in its
//! environment, `GET /` until it answers), or is the one already running at a URL. The answer
//! is shown as the host sees it ([`host_view`]): the status, each output with what the host
//! (and `emulate`) would do with it, the logs and the return value. A function of cardinality
//! `one` gets one invocation per event, as from the host. An HTTP function gets one request,
//! wrapped as `emulate`'s HTTP trigger wraps it (`triggers::http`), and a timer function one
//! firing (`triggers::timer`): the same requests `emulate` sends, not a second model of them.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::handler_process::start_on_free_port;
use super::triggers::{http, timer};
use super::{
    AppSettings, EmulateError, InputError, InputPlan, OutputPlan, OutputSinks, resolve_trigger,
};
use crate::invoker::{Invocation, InvokeError, Invoker, within_function_timeout};
use hubhost_functions::contract::encode::{
    HostInvocation, MetadataFlavor, encode_request, expression_data,
};
use hubhost_functions::contract::newtonsoft::OrderedJson;
use hubhost_functions::function_app::{
    Cardinality, EventHubTrigger, FunctionApp, FunctionSpec, Trigger,
};
use hubhost_trigger::batch::TriggerBatch;

/// What `hubhost invoke` was asked to do.
#[derive(Debug, Clone)]
pub struct InvokeOptions {
    /// The function app folder (host.json, function folders, local.settings.json).
    pub app: PathBuf,
    /// The function to invoke.
    pub function: String,
    /// The events file [default: one sample event].
    pub events: Option<PathBuf>,
    /// The partition the batch claims to come from.
    pub partition: String,
    /// A handler already running there, instead of starting the app's.
    pub url: Option<String>,
    /// Write each request to stderr as it goes on the wire (line, headers, body).
    pub show_request: bool,
    /// An HTTP function's request: its method [default: the first it lists, else GET], its
    /// path and query under the route prefix [default: its route], its body.
    pub method: Option<String>,
    pub path: Option<String>,
    pub body: Option<String>,
    /// Where `emulate` would keep the outputs no local service carries out (`None`:
    /// `--strict-bindings`, such a function is refused). invoke writes nothing there: its
    /// answer says what would be kept.
    pub outbox: Option<PathBuf>,
}

/// Why an invocation could not be made (a failed *answer* is not an error: it is shown).
#[derive(Debug, thiserror::Error)]
pub enum InvokeCommandError {
    #[error(transparent)]
    App(#[from] EmulateError),
    #[error("{path}: {problem}")]
    Events { path: PathBuf, problem: String },
    #[error("the app has no function named {function} (it has: {available})")]
    UnknownFunction { function: String, available: String },
    #[error(
        "{function} has a {trigger}; hubhost invoke calls Event Hubs, HTTP and timer functions"
    )]
    NotInvokable { function: String, trigger: String },
    /// A flag that does not apply to the function's trigger.
    #[error("{flag} does not apply to {function}, {kind}")]
    Flag {
        flag: String,
        function: String,
        kind: String,
    },
    #[error(transparent)]
    Http(#[from] http::HttpInvokeError),
    #[error("the handler gave no answer: {0}")]
    NoAnswer(#[from] InvokeError),
    /// An input binding could not be read (the host would fail the invocation before calling).
    #[error(transparent)]
    Input(#[from] InputError),
}

/// One event of an events file.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    /// The body: a JSON string is the text itself, any other JSON value its compact text, its
    /// objects' members in the order the file gives them.
    pub body: OrderedJson,
    pub partition_key: Option<String>,
    pub properties: Map<String, Value>,
    /// The service's offset, when the file gives one (a geo-replicated namespace's is not a
    /// number) [default: counted from 0, as a new partition's].
    pub offset: Option<String>,
    /// System properties the message carries (`message-id`, `content-type`,
    /// `iothub-connection-device-id`, …), as the host passes them.
    pub system_properties: Map<String, Value>,
    /// When the service enqueued it, when the file says [default: a millisecond after the event
    /// before it; the first, now].
    pub enqueued_time: Option<EnqueuedTime>,
    /// Its sequence number, when the file gives one [default: one after the event before it;
    /// the first, 0].
    pub sequence_number: Option<i64>,
}

/// An events file's `enqueuedTime`: a moment, or an age at the time of the invocation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EnqueuedTime {
    /// An RFC 3339 time, e.g. `2026-12-07T09:30:00Z`.
    At(DateTime<Utc>),
    /// So long before the invocation, e.g. `-30m` (`s`, `m`, `h` or `d`).
    Ago(chrono::Duration),
}

impl EnqueuedTime {
    /// Reads `2026-12-07T09:30:00Z` or `-30m` (also `-45s`, `-2h`, `-1d`).
    ///
    /// ```
    /// use hubhost_host::emulate::invoke::EnqueuedTime;
    ///
    /// assert_eq!(EnqueuedTime::parse("-30m"), Ok(EnqueuedTime::Ago(chrono::Duration::minutes(30))));
    /// assert!(matches!(EnqueuedTime::parse("2026-12-07T09:30:00Z"), Ok(EnqueuedTime::At(_))));
    /// assert!(EnqueuedTime::parse("yesterday").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, EnqueuedTimeError> {
        if let Some(age) = text.strip_prefix('-') {
            let unit = age.chars().last().unwrap_or(' ');
            let amount: i64 = age[..age.len() - unit.len_utf8().min(age.len())]
                .parse()
                .map_err(|_| age_error(text))?;
            let age = match unit {
                's' => chrono::Duration::seconds(amount),
                'm' => chrono::Duration::minutes(amount),
                'h' => chrono::Duration::hours(amount),
                'd' => chrono::Duration::days(amount),
                _ => return Err(age_error(text)),
            };
            return Ok(EnqueuedTime::Ago(age));
        }
        DateTime::parse_from_rfc3339(text)
            .map(|t| EnqueuedTime::At(t.with_timezone(&Utc)))
            .map_err(|_| age_error(text))
    }

    /// The moment, for an invocation made at `now`.
    pub fn at(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            EnqueuedTime::At(time) => time,
            EnqueuedTime::Ago(age) => now - age,
        }
    }
}

fn age_error(text: &str) -> EnqueuedTimeError {
    EnqueuedTimeError(text.to_string())
}

/// An `enqueuedTime` that is neither a time nor an age.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "enqueuedTime {0:?} is neither an RFC 3339 time (2026-12-07T09:30:00Z) nor an age (-30m, -45s, -2h, -1d)"
)]
pub struct EnqueuedTimeError(pub String);

/// Why an events file gave no events.
#[derive(Debug, thiserror::Error)]
pub enum EventsFileError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {problem}")]
    Parse { path: PathBuf, problem: String },
}

impl EventSpec {
    /// The body's bytes: a JSON string's text, any other JSON value's compact text.
    pub fn body_bytes(&self) -> Vec<u8> {
        match &self.body {
            OrderedJson::String(text) => text.clone().into_bytes(),
            other => serde_json::to_vec(other).expect("JSON serializes"),
        }
    }

    /// An event with `body` and nothing else.
    pub fn body(body: OrderedJson) -> Self {
        EventSpec {
            body,
            partition_key: None,
            properties: Map::new(),
            offset: None,
            system_properties: Map::new(),
            enqueued_time: None,
            sequence_number: None,
        }
    }
}

/// The events of an events file: a JSON array (or a single JSON value), or NDJSON (one JSON
/// value per line). Each value is an event: an object with `body` and optional
/// `partitionKey`, `properties`, `offset`, `systemProperties`, `enqueuedTime` (an RFC 3339
/// time or an age such as `-30m`) and `sequenceNumber`, or else itself the body.
///
/// ```
/// use hubhost_host::emulate::invoke::parse_events;
/// use hubhost_functions::contract::newtonsoft::OrderedJson;
///
/// let events = parse_events(r#"[{"body": {"t": 21}, "partitionKey": "d-1"}, "plain text"]"#)?;
/// assert_eq!(events.len(), 2);
/// assert_eq!(events[0].partition_key.as_deref(), Some("d-1"));
/// assert_eq!(events[1].body, OrderedJson::String("plain text".into()));
/// assert_eq!(events[0].body_bytes(), br#"{"t":21}"#);
/// assert_eq!(events[1].body_bytes(), b"plain text");
/// assert_eq!(parse_events("{\"a\":1}\n{\"a\":2}\n")?.len(), 2);
/// # Ok::<(), String>(())
/// ```
pub fn parse_events(text: &str) -> Result<Vec<EventSpec>, String> {
    let values = match serde_json::from_str::<OrderedJson>(text) {
        Ok(OrderedJson::Array(values)) => values,
        Ok(value) => vec![value],
        Err(whole) => text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(i, line)| {
                serde_json::from_str(line).map_err(|e| {
                    format!(
                        "neither one JSON document ({whole}) nor NDJSON: line {}: {e}",
                        i + 1
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    if values.is_empty() {
        return Err("no events".into());
    }
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| event_spec(value).map_err(|e| format!("event {}: {e}", i + 1)))
        .collect()
}

/// The bodies of the events in `file` (read by [`parse_events`]), e.g. a project's
/// `events.json`: what `hubhost rehearse --events` sends and a test's rehearsal makes its inputs
/// from.
pub fn read_event_bodies(file: &std::path::Path) -> Result<Vec<Vec<u8>>, EventsFileError> {
    let text = std::fs::read_to_string(file).map_err(|source| EventsFileError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    let events = parse_events(&text).map_err(|problem| EventsFileError::Parse {
        path: file.to_path_buf(),
        problem,
    })?;
    Ok(events.iter().map(EventSpec::body_bytes).collect())
}

fn event_spec(value: OrderedJson) -> Result<EventSpec, String> {
    let OrderedJson::Object(members) = value else {
        return Ok(EventSpec::body(value));
    };
    let Some(at) = members.iter().position(|(name, _)| name == "body") else {
        return Ok(EventSpec::body(OrderedJson::Object(members)));
    };
    let mut members = members;
    let (_, body) = members.remove(at);
    // The other fields' order does not matter.
    let mut fields: Map<String, Value> = members
        .into_iter()
        .map(|(name, value)| (name, serde_json::to_value(value).expect("JSON serializes")))
        .collect();
    let partition_key = optional_string(&mut fields, "partitionKey")?;
    let properties = optional_object(&mut fields, "properties")?;
    let offset = optional_string(&mut fields, "offset")?;
    let system_properties = optional_object(&mut fields, "systemProperties")?;
    let enqueued_time = optional_string(&mut fields, "enqueuedTime")?
        .map(|text| EnqueuedTime::parse(&text))
        .transpose()
        .map_err(|e| e.to_string())?;
    let sequence_number = match fields.remove("sequenceNumber") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_i64().is_some_and(|n| n >= 0) => n.as_i64(),
        Some(other) => {
            return Err(format!(
                "sequenceNumber must be a whole number of at least 0, not {other}"
            ));
        }
    };
    if let Some(unknown) = fields.keys().next() {
        return Err(format!(
            "unknown field {unknown:?} (an event has body, partitionKey, properties, offset, systemProperties, enqueuedTime and sequenceNumber)"
        ));
    }
    Ok(EventSpec {
        body,
        partition_key,
        properties,
        offset,
        system_properties,
        enqueued_time,
        sequence_number,
    })
}

/// The event field `name`, a string if present.
fn optional_string(fields: &mut Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match fields.remove(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(format!("{name} must be a string, not {other}")),
    }
}

/// The event field `name`, an object if present (empty if not).
fn optional_object(
    fields: &mut Map<String, Value>,
    name: &str,
) -> Result<Map<String, Value>, String> {
    match fields.remove(name) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(object)) => Ok(object),
        Some(other) => Err(format!("{name} must be an object, not {other}")),
    }
}

/// The event sent when no events file is given.
pub fn sample_events() -> Vec<EventSpec> {
    vec![EventSpec::body(OrderedJson::Object(vec![(
        "message".into(),
        OrderedJson::String("hello from hubhost invoke".into()),
    )]))]
}

/// The batches the host would deliver for `events` to `spec`, whose trigger (its `%Setting%`
/// names expanded) reads `namespace`: one for cardinality `many`, one per event for `one`; with
/// the first attempt's retry context when the function has a policy.
pub fn batches(
    spec: &FunctionSpec,
    trigger: &EventHubTrigger,
    namespace: &str,
    partition: &str,
    events: &[EventSpec],
) -> Vec<TriggerBatch> {
    let groups: Vec<&[EventSpec]> = if trigger.cardinality == Cardinality::One {
        events.chunks(1).collect()
    } else {
        vec![events]
    };
    let now = hubhost_clock::now();
    let mut first_sequence_number = 0;
    let mut next_enqueued_time = now;
    groups
        .into_iter()
        .map(|group| {
            let mut builder = TriggerBatch::builder(&spec.name)
                .namespace(namespace)
                .hub(&trigger.event_hub_name)
                .consumer_group(&trigger.consumer_group)
                .partition(partition)
                .first_sequence_number(first_sequence_number)
                .enqueued_from(next_enqueued_time);
            if let Some(policy) = &spec.retry {
                builder = builder.retry(0, policy.max_retry_count);
            }
            for event in group {
                builder = match &event.body {
                    OrderedJson::String(text) => builder.text(text.clone()),
                    other => builder.json(other),
                };
                if let Some(key) = &event.partition_key {
                    builder = builder.partition_key(key);
                }
                for (name, value) in &event.properties {
                    builder = builder.property(name, value.clone());
                }
                if let Some(offset) = &event.offset {
                    builder = builder.offset(offset);
                }
                for (name, value) in &event.system_properties {
                    builder = builder.system_property(name, value.clone());
                }
                if let Some(time) = event.enqueued_time {
                    builder = builder.enqueued_time(time.at(now));
                }
                if let Some(sequence_number) = event.sequence_number {
                    builder = builder.sequence_number(sequence_number);
                }
            }
            let batch = builder.build();
            // A one-event-per-invocation function's next invocation follows on from this one.
            if let Some(last) = batch.events.last() {
                first_sequence_number = last.sequence_number.unwrap_or(0) + 1;
                next_enqueued_time =
                    last.enqueued_time.unwrap_or(now) + chrono::Duration::milliseconds(1);
            }
            batch
        })
        .collect()
}

/// An invocation that outlived host.json's `functionTimeout`: failed, with no answer.
fn timed_out_view(limit: std::time::Duration, function: &str) -> Value {
    json!({
        "status": Value::Null,
        "succeeded": false,
        "outputs": {},
        "logs": [],
        "returnValue": Value::Null,
        "hostError": crate::invoker::HostFailure::timeout(limit, function).message,
    })
}

/// An answer as the host reads it: `status`, `succeeded`, `outputs` (per output binding, what
/// the host would do with it), `logs`, `returnValue`, and the handler's `error` if it gave one.
///
/// A failed answer shows `hostError`, the host's reason in the words it logs, and nothing
/// of its body but the handler's own `error`: the host reads neither its outputs nor its logs.
pub fn host_view(answer: &Invocation, outputs: &OutputPlan) -> Value {
    let body = &answer.body;
    let succeeded = answer.succeeded();
    let mut view = json!({
        "status": answer.status,
        "succeeded": succeeded,
        // The host carries out outputs only for a successful invocation.
        "outputs": if succeeded { Value::Object(outputs.describe(body)) } else { json!({}) },
        "logs": if succeeded { body.get("Logs").cloned().unwrap_or(json!([])) } else { json!([]) },
        "returnValue": if succeeded { body.get("ReturnValue").cloned().unwrap_or(Value::Null) } else { Value::Null },
    });
    if let Some(reason) = &answer.refused {
        view["hostError"] = Value::String(reason.message.clone());
    }
    if let Some(error) = body.get("error") {
        view["error"] = error.clone();
    }
    view
}

/// The outputs a successful answer sets that the function's declaration lacks: the host looks
/// up only declared names, so it drops these.
fn undeclared_outputs(answer: &Invocation, spec: &FunctionSpec) -> Vec<String> {
    if !answer.succeeded() {
        return Vec::new();
    }
    spec.undeclared_outputs(
        answer
            .body
            .get("Outputs")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|outputs| outputs.keys()),
    )
}

/// Invokes the function, starting its handler unless `url` names one; the host's view of each
/// answer, in order. An Event Hubs function gets the events (one invocation per event for
/// cardinality `one`); an HTTP function one request (`--method`, `--path`, `--body`), and its
/// view adds the `response` the client would get; a timer function one firing, as the host's
/// admin API fires it.
pub async fn run(opts: &InvokeOptions) -> Result<Vec<Value>, InvokeCommandError> {
    let settings = AppSettings::load(&opts.app)?;
    let app = FunctionApp::load_with_settings(&opts.app, settings.values())
        .map_err(EmulateError::from)?;
    let spec = app
        .function(&opts.function)
        .ok_or_else(|| InvokeCommandError::UnknownFunction {
            function: opts.function.clone(),
            available: app
                .functions
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    if let Some(setting) = app.disabled_by(&spec.name) {
        // The host's admin endpoint runs a disabled function too; only its listener is off.
        eprintln!(
            "hubhost invoke: {} is disabled by the app setting {setting}; invoked anyway, as the host's admin API invokes it",
            spec.name
        );
    }
    let sinks = OutputSinks::start(opts.outbox.clone(), &app.host_json);
    let prepared = prepare(opts, &app, spec, &settings, &sinks).await?;
    let function_timeout = super::function_timeout(&app)?;

    let (invoker, mut handler) = match &opts.url {
        Some(url) => (Invoker::new(url.trim_end_matches('/')), None),
        None => {
            // stdout is the answer's: the handler's own output goes to stderr.
            let (process, invoker, child, _) = start_on_free_port(&app, &settings, true).await?;
            (invoker, Some((process, child)))
        }
    };
    let mut views = Vec::new();
    let mut outcome = Ok(());
    for request in prepared {
        let invocation_id = uuid::Uuid::new_v4().to_string();
        if opts.show_request {
            // The line and headers, then the body as one chunk would carry it.
            let mut shown = invoker
                .request_head(&spec.name, &invocation_id)
                .into_bytes();
            shown.extend_from_slice(&request.body);
            shown.push(b'\n');
            std::io::Write::write_all(&mut std::io::stderr(), &shown)
                .map_err(|e| InvokeCommandError::NoAnswer(InvokeError::NoAnswer(e.to_string())))?;
        }
        let invocation = invoker.invoke_as(&spec.name, &invocation_id, request.body, None);
        let answered = match within_function_timeout(function_timeout, invocation).await {
            Ok(answered) => answered,
            Err(limit) => {
                // As the host: the invocation has failed, whatever the handler does next.
                views.push(timed_out_view(limit, &spec.name));
                continue;
            }
        };
        match answered {
            Ok(answer) => {
                let mut view = host_view(&answer, &request.outputs);
                let undeclared = undeclared_outputs(&answer, spec);
                if !undeclared.is_empty() {
                    // The host drops them and counts a success: the user's bug, said here.
                    let declared: Vec<&str> = spec.outputs().map(|b| b.name.as_str()).collect();
                    view["undeclaredOutputs"] = json!(undeclared);
                    view["hostDrops"] =
                        Value::String(hubhost_functions::testing::undeclared_message(
                            &spec.name,
                            &undeclared,
                            &declared,
                        ));
                }
                if !request.inputs.is_empty() {
                    // What the host read for the call, as it sent it.
                    view["inputs"] = Value::Object(request.inputs.into_iter().collect());
                }
                if let Some(binding) = &request.http_response
                    && answer.succeeded()
                {
                    let value = http::response_value(&answer.body, binding);
                    match http::response_view(value).await {
                        Ok(response) => view["response"] = response,
                        Err(reason) => {
                            // The host fails the invocation, and the client gets a 500.
                            view["succeeded"] = Value::Bool(false);
                            view["hostError"] = Value::String(reason);
                        }
                    }
                }
                views.push(view);
            }
            Err(e) => {
                outcome = Err(e.into());
                break;
            }
        }
    }
    if let Some((process, child)) = &mut handler {
        process.stop(child).await;
    }
    outcome.map(|()| views)
}

/// One request `hubhost invoke` sends, with what reading its answer needs.
struct Prepared {
    body: Vec<u8>,
    /// The input bindings' values in it, as sent.
    inputs: Vec<(String, Value)>,
    outputs: Arc<OutputPlan>,
    /// An HTTP function's `http` output, whose value is the response.
    http_response: Option<String>,
}

/// The requests the host would send `spec` for this invocation, each with its inputs read.
async fn prepare(
    opts: &InvokeOptions,
    app: &FunctionApp,
    spec: &FunctionSpec,
    settings: &AppSettings,
    sinks: &OutputSinks,
) -> Result<Vec<Prepared>, InvokeCommandError> {
    let not_for = |flag: &str, kind: &str| InvokeCommandError::Flag {
        flag: flag.to_string(),
        function: spec.name.clone(),
        kind: kind.to_string(),
    };
    let http_flags = [
        ("--method", opts.method.is_some()),
        ("--path", opts.path.is_some()),
        ("--body", opts.body.is_some()),
    ];
    let refuse_http_flags = |kind: &str| match http_flags.iter().find(|(_, set)| *set) {
        Some((flag, _)) => Err(not_for(flag, kind)),
        None => Ok(()),
    };
    if let Some((trigger, target)) = resolve_trigger(spec, settings)? {
        refuse_http_flags("an Event Hubs function")?;
        return prepare_batches(opts, spec, settings, sinks, &trigger, &target.namespace).await;
    }
    let one = std::slice::from_ref(spec);
    if matches!(spec.trigger, Trigger::Http { .. }) {
        if opts.events.is_some() {
            return Err(not_for("--events", "an HTTP function"));
        }
        let http = http::HttpTriggers::resolve(app, one, settings, sinks)?;
        let body = bytes::Bytes::from(opts.body.clone().unwrap_or_default());
        let request = http
            .invocation_for(
                &spec.name,
                opts.method.as_deref(),
                opts.path.as_deref(),
                body,
            )
            .await?;
        return Ok(vec![Prepared {
            inputs: request.inputs,
            body: request.body,
            outputs: request.outputs,
            http_response: request.response,
        }]);
    }
    let timers = timer::TimerTriggers::resolve(one, settings, sinks)?;
    if let Some(firing) = timers.firing_now(&spec.name).await {
        if opts.events.is_some() {
            return Err(not_for("--events", "a timer function"));
        }
        refuse_http_flags("a timer function")?;
        let firing = firing?;
        return Ok(vec![Prepared {
            body: firing.body,
            inputs: firing.inputs,
            outputs: firing.outputs,
            http_response: None,
        }]);
    }
    Err(InvokeCommandError::NotInvokable {
        function: spec.name.clone(),
        trigger: match &spec.trigger {
            Trigger::Other { kind, .. } => kind.clone(),
            Trigger::EventHub(_) => "eventHubTrigger".into(),
            Trigger::Http { .. } => "httpTrigger".into(),
        },
    })
}

/// The batches for an Event Hubs function, encoded as the host encodes them.
async fn prepare_batches(
    opts: &InvokeOptions,
    spec: &FunctionSpec,
    settings: &AppSettings,
    sinks: &OutputSinks,
    trigger: &EventHubTrigger,
    namespace: &str,
) -> Result<Vec<Prepared>, InvokeCommandError> {
    let events = match &opts.events {
        Some(path) => {
            let problem = |problem: String| InvokeCommandError::Events {
                path: path.clone(),
                problem,
            };
            let text = std::fs::read_to_string(path).map_err(|e| problem(e.to_string()))?;
            parse_events(&text).map_err(problem)?
        }
        None => sample_events(),
    };
    let inputs = InputPlan::resolve(spec, settings)?;
    // Refuses, as emulate does, an output it would neither carry out nor keep.
    let outputs = Arc::new(OutputPlan::resolve(spec, settings, sinks)?);
    let mut prepared = Vec::new();
    for batch in batches(spec, trigger, namespace, &opts.partition, &events) {
        let mut invocation = HostInvocation {
            function: &spec.name,
            trigger,
            partition: &batch.partition,
            events: &batch.events,
            retry: batch.retry.as_ref(),
            flavor: MetadataFlavor::Current,
            now: Utc::now(),
            inputs: &[],
        };
        // Read as emulate reads them, before the call.
        let values = inputs
            .read(&expression_data(&invocation), invocation.now)
            .await?;
        invocation.inputs = &values;
        let body = encode_request(&invocation).map_err(|e| InvokeCommandError::Events {
            path: opts.events.clone().unwrap_or_default(),
            problem: e.to_string(),
        })?;
        prepared.push(Prepared {
            body,
            inputs: values,
            outputs: outputs.clone(),
            http_response: None,
        });
    }
    Ok(prepared)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hubhost_functions::function_app::FunctionSpec;

    fn spec(cardinality: &str, retry: bool) -> FunctionSpec {
        let mut json = json!({"bindings": [{"type": "eventHubTrigger", "name": "events", "direction": "in",
            "eventHubName": "orders", "cardinality": cardinality, "dataType": "string"}]});
        if retry {
            json["retry"] =
                json!({"strategy": "fixedDelay", "maxRetryCount": 4, "delayInterval": "00:00:01"});
        }
        FunctionSpec::from_json("F", &json).unwrap()
    }

    #[test]
    fn events_files_take_every_documented_shape_and_name_what_is_wrong() {
        let events = parse_events(
            r#"[{"body": "a", "partitionKey": "k", "properties": {"n": 1}}, {"x": 1}, 7]"#,
        )
        .unwrap();
        let text = |e: &EventSpec| serde_json::to_string(&e.body).unwrap();
        assert_eq!(text(&events[0]), r#""a""#);
        assert_eq!(events[0].properties["n"], 1);
        assert_eq!(
            text(&events[1]),
            r#"{"x":1}"#,
            "an object without body is the body"
        );
        assert_eq!(text(&events[2]), "7");
        let ordered = parse_events(r#"[{"body": {"z": 1, "a": 2}, "offset": "g:1"}]"#).unwrap();
        assert_eq!(
            text(&ordered[0]),
            r#"{"z":1,"a":2}"#,
            "members keep their order"
        );
        assert_eq!(ordered[0].offset.as_deref(), Some("g:1"));
        assert_eq!(parse_events("\"one\"").unwrap().len(), 1);
        assert!(parse_events("[]").unwrap_err().contains("no events"));
        assert!(
            parse_events(r#"[{"body": 1, "partitionkey": "k"}]"#)
                .unwrap_err()
                .contains("event 1: unknown field \"partitionkey\"")
        );
        assert!(
            parse_events("{\"a\":1}\nnot json")
                .unwrap_err()
                .contains("line 2")
        );
    }

    #[test]
    fn the_host_delivers_a_batch_or_one_invocation_per_event() {
        let events = parse_events(r#"["a", {"body": {"b": 2}, "partitionKey": "k"}]"#).unwrap();
        let spec_many = spec("many", true);
        let trigger = spec_many.event_hub_trigger().unwrap();
        let many = batches(&spec_many, trigger, "localhost", "3", &events);
        assert_eq!(many.len(), 1);
        assert_eq!(many[0].events.len(), 2);
        assert_eq!(many[0].partition.partition_id, "3");
        assert_eq!(many[0].partition.event_hub_name.as_deref(), Some("orders"));
        assert_eq!(&many[0].events[1].body[..], br#"{"b":2}"#);
        assert_eq!(many[0].events[1].partition_key.as_deref(), Some("k"));
        let retry = many[0].retry.as_ref().unwrap();
        assert_eq!((retry.retry_count, retry.max_retry_count), (0, 4));

        let spec_one = spec("one", false);
        let one = batches(
            &spec_one,
            spec_one.event_hub_trigger().unwrap(),
            "localhost",
            "0",
            &events,
        );
        assert_eq!(one.len(), 2);
        assert!(one.iter().all(|b| b.events.len() == 1 && b.retry.is_none()));
        assert_eq!(one[1].events[0].sequence_number, Some(1));
    }

    #[test]
    fn a_failed_answer_carries_out_no_output() {
        let body = br#"{"Outputs": {"x": [1]}, "Logs": ["l"], "ReturnValue": null, "error": {"code": "c", "message": "m"}}"#;
        let (body, refused) = crate::invoker::read_answer(500, Some("application/json"), body);
        let answer = Invocation {
            status: 500,
            body,
            refused,
            trace_context: None,
        };
        let view = host_view(&answer, &OutputPlan::default());
        assert_eq!(view["succeeded"], false);
        assert_eq!(view["outputs"], json!({}));
        assert_eq!(
            view["logs"],
            json!([]),
            "the host reads no logs from a failed answer"
        );
        assert_eq!(
            view["hostError"],
            "Response status code does not indicate success: 500 (Internal Server Error)."
        );
        assert_eq!(view["error"]["code"], "c");
    }
}

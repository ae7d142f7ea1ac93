//! [`TriggerBatch`](crate::batch::TriggerBatch)-like parts → the exact request the Functions host sends to a custom handler.
//!
//! This is the host's side of the contract (docs/host-contract.md §2: the value rules, the
//! metadata keys), so that hubhost's demo, tests, benchmark and emulated host invoke a
//! handler exactly as `func start` and Azure do. Three metadata flavours: the current v5/v6
//! extension (bundle v4), early v5 (no `TriggerPartitionContext`/`OffsetString*`) and the legacy
//! v3/v4 extension (`PartitionContext` of EventProcessorHost).

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::json_text::{write_as_text, write_strings_as_text};
use super::newtonsoft::{OrderedJson, dotnet_string};
use crate::batch::{EventRecord, PartitionContext, RetryContext};
use crate::function_app::{Cardinality, DataType, EventHubTrigger};
use hubhost_trigger::time::{dotnet_datetime, dotnet_utc_now};

/// Which generation of the Event Hubs extension's metadata to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataFlavor {
    /// Event Hubs extension 6.x, what extension bundle `[4.*, 5.0.0)` gives today.
    Current,
    /// Early 5.x releases.
    EarlyV5,
    /// The legacy 3.x/4.x extension (EventProcessorHost).
    LegacyV4,
}

/// Everything the host puts in one request.
pub struct HostInvocation<'a> {
    /// The function's name (the request goes to `POST /{function}`).
    pub function: &'a str,
    /// The trigger binding, which decides the encoding.
    pub trigger: &'a EventHubTrigger,
    /// Where the events come from.
    pub partition: &'a PartitionContext,
    /// The events.
    pub events: &'a [EventRecord],
    /// Present when the function has a retry policy (the host then sends it on every attempt).
    pub retry: Option<&'a RetryContext>,
    /// Which extension's metadata.
    pub flavor: MetadataFlavor,
    /// The time the host stamps on the request.
    pub now: DateTime<Utc>,
    /// The function's input bindings' values, each as the host writes it into `Data` beside
    /// the trigger's (see `hubhost_trigger::inputs`).
    pub inputs: &'a [(String, Value)],
}

/// Why a request cannot be built.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EncodeError {
    /// An event the host could not bind as JSON.
    #[error(
        "event {index} is not JSON, and the trigger has cardinality many without dataType: the host fails to bind such a batch (set dataType to string or binary)"
    )]
    BodyNotJson {
        /// The event's index in the batch.
        index: usize,
    },
    /// A cardinality-one request with another number of events.
    #[error("a cardinality-one invocation carries exactly one event, not {0}")]
    NotOneEvent(usize),
}

/// Rule 4 of the host's value conversion: strings, numbers and arrays become JSON text in a string.
fn as_json_text(v: &Value) -> Value {
    Value::String(v.to_string())
}

/// `Offset` as the extension gives it: the service's offset when it is a whole number, else
/// `-1` — a geo-replicated namespace's offsets are not numbers (`long.TryParse` fails, and the
/// extension falls back to the start of the stream). Its text is .NET's `ToString()` of it.
fn offset_as_long(offset: Option<&str>) -> i64 {
    offset
        .map(str::trim)
        .and_then(|o| o.parse().ok())
        .unwrap_or(-1)
}

/// One of the values the extension adds to an event's `SystemProperties`.
enum Standard<'a> {
    Text(&'a str),
    /// Written even when null.
    Nullable(Option<&'a str>),
    Long(i64),
    /// A `DateTimeOffset` at UTC, from [`dotnet_datetime`]'s text.
    At(&'a str),
}

impl Serialize for Standard<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Standard::Text(t) => serializer.serialize_str(t),
            Standard::Nullable(t) => t.serialize(serializer),
            Standard::Long(n) => serializer.serialize_i64(*n),
            Standard::At(t) => serializer.collect_str(&format_args!("{t}+00:00")),
        }
    }
}

/// An event's `SystemProperties`: the message's own system properties (the record's
/// `system_properties`: properties section and other annotations) with the extension's
/// values over them (`GetSystemPropertiesForBinding`: the annotations the service sets,
/// then `SequenceNumber`, `Offset`, `OffsetString`, `PartitionKey`, `EnqueuedTimeUtc`).
/// Written in the byte order of the names, the order serde_json's sorted maps give the
/// host's other objects here.
struct SystemProperties<'a> {
    extra: &'a Map<String, Value>,
    /// Sorted by name; `None` where the event has no such value.
    standard: [(&'static str, Option<Standard<'a>>); 9],
}

impl Serialize for SystemProperties<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        let mut extra = self.extra.iter().peekable();
        for (name, value) in self
            .standard
            .iter()
            .filter_map(|(n, v)| Some((n, v.as_ref()?)))
        {
            while let Some((extra_name, extra_value)) = extra.next_if(|(n, _)| n.as_str() <= *name)
            {
                // The extension's own value replaces a same-named one from the message.
                if extra_name != name {
                    map.serialize_entry(extra_name, extra_value)?;
                }
            }
            map.serialize_entry(name, value)?;
        }
        for (name, value) in extra {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// An event's system properties; `enqueued` is its enqueued time as [`dotnet_datetime`]
/// writes it (formatted once per event for the three places it appears).
fn system_properties<'a>(
    e: &'a EventRecord,
    enqueued: Option<&'a str>,
    flavor: MetadataFlavor,
) -> SystemProperties<'a> {
    let offset = e.offset.as_deref();
    let key = e.partition_key.as_deref();
    let current = flavor == MetadataFlavor::Current;
    let standard = [
        ("EnqueuedTimeUtc", enqueued.map(Standard::Text)),
        ("Offset", Some(Standard::Long(offset_as_long(offset)))),
        (
            "OffsetString",
            current.then_some(Standard::Nullable(offset)),
        ),
        ("PartitionKey", Some(Standard::Nullable(key))),
        ("SequenceNumber", e.sequence_number.map(Standard::Long)),
        ("x-opt-enqueued-time", enqueued.map(Standard::At)),
        // The service's own annotation, a string (the .NET SDK passes it on as it came).
        ("x-opt-offset", offset.map(Standard::Text)),
        ("x-opt-partition-key", key.map(Standard::Text)),
        (
            "x-opt-sequence-number",
            e.sequence_number.map(Standard::Long),
        ),
    ];
    SystemProperties {
        extra: &e.system_properties,
        standard,
    }
}

fn partition_context(inv: &HostInvocation) -> Value {
    let p = inv.partition;
    match inv.flavor {
        MetadataFlavor::Current => json!({
            "IsCheckpointingAfterInvocation": p.is_checkpointing_after_invocation.unwrap_or(true),
            "FullyQualifiedNamespace": p.fully_qualified_namespace,
            "EventHubName": p.event_hub_name,
            "ConsumerGroup": p.consumer_group,
            "PartitionId": p.partition_id,
        }),
        MetadataFlavor::EarlyV5 => json!({
            "FullyQualifiedNamespace": p.fully_qualified_namespace,
            "EventHubName": p.event_hub_name,
            "ConsumerGroup": p.consumer_group,
            "PartitionId": p.partition_id,
        }),
        MetadataFlavor::LegacyV4 => {
            let last = inv.events.last();
            json!({
                "CancellationToken": {"IsCancellationRequested": false, "CanBeCanceled": true, "WaitHandle": {"Handle": {"value": 1}, "SafeWaitHandle": {"IsInvalid": false, "IsClosed": false}}},
                "ConsumerGroupName": p.consumer_group,
                "EventHubPath": p.event_hub_name,
                "PartitionId": p.partition_id,
                "Owner": "00000000-0000-0000-0000-000000000000",
                "RuntimeInformation": {
                    "PartitionId": p.partition_id,
                    "LastSequenceNumber": last.and_then(|e| e.sequence_number).unwrap_or(0),
                    "LastEnqueuedTimeUtc": last.and_then(|e| e.enqueued_time.as_ref()).map(dotnet_datetime).unwrap_or_else(|| "0001-01-01T00:00:00".into()),
                    "LastEnqueuedOffset": last.and_then(|e| e.offset.clone()),
                    "RetrievalTime": "0001-01-01T00:00:00"
                }
            })
        }
    }
}

fn body_text(e: &EventRecord) -> String {
    body_str(e).into_owned()
}

/// The body as the host reads it into a string (invalid UTF-8 replaced), borrowed when valid.
fn body_str(e: &EventRecord) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(&e.body) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(&e.body),
    }
}

fn base64_body(e: &EventRecord) -> String {
    base64::engine::general_purpose::STANDARD.encode(&e.body)
}

/// A sequence serialized from an iterator, without collecting it first.
struct Seq<I>(I);

impl<I> Serialize for Seq<I>
where
    I: Iterator + Clone,
    I::Item: Serialize,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.clone())
    }
}

/// Builds the request body the host POSTs to `/{function}`.
pub fn encode_request(inv: &HostInvocation) -> Result<Vec<u8>, EncodeError> {
    match inv.trigger.cardinality {
        Cardinality::Many => encode_many(inv),
        Cardinality::One => encode_one(inv),
    }
}

/// A batch, written straight into the body: each JSON-text-in-a-string value is serialized
/// through an escaping writer (no `Value`, no intermediate string), each enqueued time
/// formatted once. The members are written in the order serde_json's sorted maps give them,
/// so the bytes are those of [`encode_one`]'s way for the same batch (a test checks this).
fn encode_many(inv: &HostInvocation) -> Result<Vec<u8>, EncodeError> {
    let events = inv.events;
    // Parsed, as the host parses them (its text is re-serialized, not copied).
    // Each object keeps its members' order, as Newtonsoft's `JToken` does.
    let parsed_bodies = match inv.trigger.data_type {
        DataType::Unset => Some(
            events
                .iter()
                .enumerate()
                .map(|(index, e)| {
                    serde_json::from_slice::<OrderedJson>(&e.body)
                        .map_err(|_| EncodeError::BodyNotJson { index })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        DataType::String | DataType::Binary => None,
    };
    let times: Vec<Option<String>> = events
        .iter()
        .map(|e| e.enqueued_time.as_ref().map(dotnet_datetime))
        .collect();
    let bodies: usize = events.iter().map(|e| e.body.len()).sum();
    let mut out = Vec::with_capacity(2 * bodies + 600 * events.len() + 1024);

    out.extend_from_slice(b"{\"Data\":{");
    write_json(&mut out, &inv.trigger.binding_name);
    out.push(b':');
    match (&parsed_bodies, inv.trigger.data_type) {
        (Some(parsed), _) => write_as_text(&mut out, parsed),
        (None, DataType::Binary) => write_as_text(&mut out, &Seq(events.iter().map(base64_body))),
        (None, _) => write_strings_as_text(&mut out, events.iter().map(body_str)),
    }
    for (name, value) in inv.inputs {
        member(&mut out, name, false);
        write_json(&mut out, value);
    }
    out.extend_from_slice(b"},\"Metadata\":{");
    let context = partition_context(inv);
    member(&mut out, "EnqueuedTimeUtcArray", true);
    write_as_text(&mut out, &times);
    member(&mut out, "OffsetArray", false);
    write_as_text(
        &mut out,
        &Seq(events
            .iter()
            .map(|e| offset_as_long(e.offset.as_deref()).to_string())),
    );
    if inv.flavor == MetadataFlavor::Current {
        member(&mut out, "OffsetStringArray", false);
        write_as_text(&mut out, &Seq(events.iter().map(|e| e.offset.as_deref())));
    }
    member(&mut out, "PartitionContext", false);
    write_json(&mut out, &context);
    member(&mut out, "PartitionKeyArray", false);
    write_as_text(
        &mut out,
        &Seq(events.iter().map(|e| e.partition_key.as_deref())),
    );
    member(&mut out, "PropertiesArray", false);
    write_as_text(&mut out, &Seq(events.iter().map(|e| &e.properties)));
    if let Some(retry) = inv.retry {
        member(&mut out, "RetryContext", false);
        write_json(&mut out, &retry_context_value(retry));
    }
    member(&mut out, "SequenceNumberArray", false);
    write_as_text(&mut out, &Seq(events.iter().map(|e| e.sequence_number)));
    member(&mut out, "SystemPropertiesArray", false);
    write_as_text(
        &mut out,
        &Seq(events
            .iter()
            .zip(&times)
            .map(|(e, t)| system_properties(e, t.as_deref(), inv.flavor))),
    );
    if inv.flavor == MetadataFlavor::Current {
        member(&mut out, "TriggerPartitionContext", false);
        write_json(&mut out, &context);
    }
    member(&mut out, "sys", false);
    write_json(&mut out, &sys(inv));
    out.extend_from_slice(b"}}");
    Ok(out)
}

/// `"name":`, after a comma unless it is the object's first member.
fn member(out: &mut Vec<u8>, name: &str, first: bool) {
    if !first {
        out.push(b',');
    }
    write_json(out, name);
    out.push(b':');
}

fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    serde_json::to_writer(out, value).expect("a value serializes to a Vec, which cannot fail");
}

/// The WebJobs SDK's `RetryContext` as Newtonsoft writes it into `Metadata` (for every trigger
/// of a function with a retry policy): the host sets the counts and the exception, and leaves
/// `Instance` null and `State` empty.
pub fn retry_context_value(r: &RetryContext) -> Value {
    json!({
        "RetryCount": r.retry_count,
        "MaxRetryCount": r.max_retry_count,
        "Exception": r.exception,
        "Instance": null,
        "State": {},
    })
}

fn sys(inv: &HostInvocation) -> Value {
    sys_binding_data(inv.function, &inv.now)
}

/// The host's `sys` binding data of an invocation of `function` at `now`, which every trigger
/// carries in `Metadata` (the emulated host's HTTP and timer triggers too).
pub fn sys_binding_data(function: &str, now: &DateTime<Utc>) -> Value {
    json!({
        "MethodName": function,
        "UtcNow": dotnet_utc_now(now),
        "RandGuid": hubhost_clock::uuid().to_string(),
    })
}

/// The host's binding data for one invocation: names compared as .NET's
/// `StringComparer.OrdinalIgnoreCase` compares them, so that a later value under another
/// casing replaces the earlier one and keeps its name.
///
/// Two forms are built from it: the request's `Metadata` (each value as the host writes it,
/// most as JSON text in a string) and, by [`expression_data`], the values that other
/// bindings' expressions (`{PartitionKey}` in a blob input's path) are resolved from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BindingData(Vec<(String, Value)>);

impl BindingData {
    /// Sets `name`, replacing a value under any casing of it.
    pub fn set(&mut self, name: &str, value: Value) {
        let folded = name.to_uppercase();
        match self.0.iter_mut().find(|(n, _)| n.to_uppercase() == folded) {
            Some(entry) => entry.1 = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    /// The value of `name`, in any casing.
    pub fn get(&self, name: &str) -> Option<&Value> {
        let folded = name.to_uppercase();
        self.0
            .iter()
            .find(|(n, _)| n.to_uppercase() == folded)
            .map(|(_, v)| v)
    }

    /// The names it holds, in the order they were first set.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| n.as_str())
    }

    /// The host's `ToHttpScriptInvocationContext`: each non-null value, except those whose
    /// names end in "trigger" (the trigger's own value, which `Data` carries).
    fn into_metadata(self) -> Map<String, Value> {
        self.0
            .into_iter()
            .filter(|(name, value)| {
                !value.is_null() && !name.to_ascii_lowercase().ends_with("trigger")
            })
            .collect()
    }
}

/// The host's `Utility.ApplyBindingData`: a JSON object body's top-level members become
/// binding data, over the extension's. Null and array members are skipped; an object stays an
/// object; any other value becomes its .NET text (`(string)JToken`: `42` → `"42"`, `true` →
/// `"True"`), then JSON text like every string (`"\"42\""`). "A JSON object" is as the host's
/// `Utility.IsJson` sees it: trimmed text between `{` and `}`.
fn apply_body_fields(binding: &mut BindingData, body: &str) {
    for (name, field) in body_fields(body) {
        let value = match field {
            BodyField::Object(object) => object,
            BodyField::Text(text) => as_json_text(&Value::String(text)),
        };
        binding.set(&name, value);
    }
}

/// A JSON body's top-level member as the host puts it in binding data.
enum BodyField {
    Object(Value),
    /// A scalar's .NET text.
    Text(String),
}

/// The members of a JSON object body that `Utility.ApplyBindingData` copies into binding data.
fn body_fields(body: &str) -> Vec<(String, BodyField)> {
    let trimmed = body.trim();
    if !(trimmed.starts_with('{') && trimmed.ends_with('}')) {
        return Vec::new();
    }
    let Ok(OrderedJson::Object(members)) = serde_json::from_str::<OrderedJson>(trimmed) else {
        return Vec::new();
    };
    let mut fields = Vec::new();
    for (name, member) in members {
        let field = match member {
            OrderedJson::Null | OrderedJson::Array(_) => continue,
            object @ OrderedJson::Object(_) => {
                BodyField::Object(serde_json::to_value(&object).expect("a parsed value serializes"))
            }
            scalar => {
                let value = serde_json::to_value(&scalar).expect("a parsed value serializes");
                match dotnet_string(&value) {
                    Some(text) => BodyField::Text(text),
                    None => continue,
                }
            }
        };
        fields.push((name, field));
    }
    fields
}

/// A `DateTime` as a binding expression writes it without a format
/// (`yyyy-MM-ddTHH-mm-ssK`, the WebJobs SDK's `BindingDataPathHelper`): `2026-12-02T21-05-09Z`.
pub fn expression_datetime(time: &DateTime<Utc>) -> String {
    time.format("%Y-%m-%dT%H-%M-%SZ").to_string()
}

/// The `sys` object as binding expressions see it (`{sys.MethodName}`, `{sys.UtcNow}`,
/// `{sys.RandGuid}`).
pub fn sys_expression_data(function: &str, now: &DateTime<Utc>) -> Value {
    json!({
        "MethodName": function,
        "UtcNow": expression_datetime(now),
        "RandGuid": hubhost_clock::uuid().to_string(),
    })
}

/// The trigger's binding data as the expressions of the function's other bindings see it (a
/// blob input's `path: "refs/{PartitionKey}.json"`): the Event Hubs extension's values as
/// their own types, not as the request's JSON text — strings as strings, numbers as numbers,
/// times already in the form an expression writes them ([`expression_datetime`]), objects as
/// objects (`{PartitionContext.PartitionId}`). With cardinality `one`, a JSON object body's
/// members too (`{deviceId}`), as the host copies them. With cardinality `many` the
/// per-event values are arrays (`PartitionKeyArray`, …), which no path can use.
pub fn expression_data(inv: &HostInvocation) -> BindingData {
    let mut binding = BindingData::default();
    let context = partition_context(inv);
    if inv.flavor == MetadataFlavor::Current {
        binding.set("TriggerPartitionContext", context.clone());
    }
    binding.set("PartitionContext", context);
    match inv.trigger.cardinality {
        Cardinality::Many => {
            let events = inv.events;
            let array =
                |f: &dyn Fn(&EventRecord) -> Value| Value::Array(events.iter().map(f).collect());
            binding.set("PartitionKeyArray", array(&|e| json!(e.partition_key)));
            binding.set(
                "OffsetArray",
                array(&|e| json!(offset_as_long(e.offset.as_deref()).to_string())),
            );
            binding.set("SequenceNumberArray", array(&|e| json!(e.sequence_number)));
            binding.set(
                "EnqueuedTimeUtcArray",
                array(&|e| json!(e.enqueued_time.as_ref().map(expression_datetime))),
            );
            binding.set(
                "PropertiesArray",
                array(&|e| Value::Object(e.properties.clone())),
            );
        }
        Cardinality::One => {
            if let Some(e) = inv.events.first() {
                if let Some(key) = &e.partition_key {
                    binding.set("PartitionKey", json!(key));
                }
                binding.set(
                    "Offset",
                    json!(offset_as_long(e.offset.as_deref()).to_string()),
                );
                if let (MetadataFlavor::Current, Some(o)) = (inv.flavor, &e.offset) {
                    binding.set("OffsetString", json!(o));
                }
                if let Some(seq) = e.sequence_number {
                    binding.set("SequenceNumber", json!(seq));
                }
                if let Some(t) = &e.enqueued_time {
                    binding.set("EnqueuedTimeUtc", json!(expression_datetime(t)));
                }
                binding.set("Properties", Value::Object(e.properties.clone()));
            }
        }
    }
    binding.set("sys", sys_expression_data(inv.function, &inv.now));
    if inv.trigger.cardinality == Cardinality::One
        && inv.trigger.data_type != DataType::Binary
        && let Some(e) = inv.events.first()
    {
        for (name, field) in body_fields(&body_text(e)) {
            let value = match field {
                BodyField::Object(object) => object,
                BodyField::Text(text) => Value::String(text),
            };
            binding.set(&name, value);
        }
    }
    binding
}

/// One event (cardinality one), its metadata built as the host builds its binding data:
/// the extension's values (`EventHubTriggerBindingStrategy`), `sys`, then the body's fields;
/// then the retry context, which the host adds to the request's metadata itself.
fn encode_one(inv: &HostInvocation) -> Result<Vec<u8>, EncodeError> {
    let [e] = inv.events else {
        return Err(EncodeError::NotOneEvent(inv.events.len()));
    };
    let mut binding = BindingData::default();
    let context = partition_context(inv);
    if inv.flavor == MetadataFlavor::Current {
        binding.set("TriggerPartitionContext", context.clone());
    }
    binding.set("PartitionContext", context);
    if let Some(k) = &e.partition_key {
        binding.set("PartitionKey", as_json_text(&json!(k)));
    }
    let offset = offset_as_long(e.offset.as_deref());
    let offset = match inv.flavor {
        // Early 5.x releases bound the offset as a number.
        MetadataFlavor::EarlyV5 => as_json_text(&json!(offset)),
        MetadataFlavor::Current | MetadataFlavor::LegacyV4 => {
            as_json_text(&json!(offset.to_string()))
        }
    };
    binding.set("Offset", offset);
    if let (MetadataFlavor::Current, Some(o)) = (inv.flavor, &e.offset) {
        binding.set("OffsetString", as_json_text(&json!(o)));
    }
    if let Some(seq) = e.sequence_number {
        binding.set("SequenceNumber", as_json_text(&json!(seq)));
    }
    if let Some(t) = &e.enqueued_time {
        // A `DateTime` is re-parsed from its `ToString()`, which has no fraction, and then
        // written once, as a date: not JSON text inside a string.
        binding.set(
            "EnqueuedTimeUtc",
            Value::String(t.format("%Y-%m-%dT%H:%M:%S").to_string()),
        );
    }
    binding.set("Properties", Value::Object(e.properties.clone()));
    let enqueued = e.enqueued_time.as_ref().map(dotnet_datetime);
    binding.set(
        "SystemProperties",
        serde_json::to_value(system_properties(e, enqueued.as_deref(), inv.flavor))
            .expect("metadata serializes"),
    );
    binding.set("sys", sys(inv));
    let data_value = match inv.trigger.data_type {
        DataType::Binary => Value::String(base64_body(e)),
        DataType::String | DataType::Unset => {
            let body = body_text(e);
            apply_body_fields(&mut binding, &body);
            as_json_text(&Value::String(body))
        }
    };
    let mut metadata = binding.into_metadata();
    if let Some(r) = inv.retry {
        metadata.insert("RetryContext".into(), retry_context_value(r));
    }
    let mut data = Map::new();
    data.insert(inv.trigger.binding_name.clone(), data_value);
    for (name, value) in inv.inputs {
        data.insert(name.clone(), value.clone());
    }
    let request = json!({"Data": data, "Metadata": metadata});
    Ok(serde_json::to_vec(&request).expect("a JSON value always serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use chrono::TimeZone;
    use hubhost_trigger::time::dotnet_datetime_offset;

    /// Rule 4 for arrays: JSON text in a string.
    fn json_text<T: Serialize + ?Sized>(v: &T) -> Value {
        Value::String(serde_json::to_string(v).unwrap())
    }

    /// A batch as `Value`s, the plain way (what this module did before writing batches
    /// straight into the body): the oracle the fast writer must match byte for byte.
    fn many_as_values(inv: &HostInvocation) -> Vec<u8> {
        let events = inv.events;
        let mut metadata = Map::new();
        let data_value = match inv.trigger.data_type {
            DataType::String => json_text(
                &events
                    .iter()
                    .map(|e| String::from_utf8_lossy(&e.body))
                    .collect::<Vec<_>>(),
            ),
            DataType::Binary => json_text(&events.iter().map(base64_body).collect::<Vec<_>>()),
            DataType::Unset => json_text(
                &events
                    .iter()
                    .map(|e| serde_json::from_slice::<OrderedJson>(&e.body).unwrap())
                    .collect::<Vec<_>>(),
            ),
        };
        let offsets = json_text(
            &events
                .iter()
                .map(|e| e.offset.as_deref())
                .collect::<Vec<_>>(),
        );
        let numeric_offsets = json_text(
            &events
                .iter()
                .map(|e| offset_as_long(e.offset.as_deref()).to_string())
                .collect::<Vec<_>>(),
        );
        let times: Vec<Option<String>> = events
            .iter()
            .map(|e| e.enqueued_time.as_ref().map(dotnet_datetime))
            .collect();
        metadata.insert(
            "PartitionKeyArray".into(),
            json_text(
                &events
                    .iter()
                    .map(|e| e.partition_key.as_deref())
                    .collect::<Vec<_>>(),
            ),
        );
        if inv.flavor == MetadataFlavor::Current {
            metadata.insert("OffsetStringArray".into(), offsets);
        }
        metadata.insert("OffsetArray".into(), numeric_offsets);
        metadata.insert(
            "SequenceNumberArray".into(),
            json_text(&events.iter().map(|e| e.sequence_number).collect::<Vec<_>>()),
        );
        metadata.insert("EnqueuedTimeUtcArray".into(), json_text(&times));
        metadata.insert(
            "PropertiesArray".into(),
            json_text(&events.iter().map(|e| &e.properties).collect::<Vec<_>>()),
        );
        metadata.insert(
            "SystemPropertiesArray".into(),
            json_text(
                &events
                    .iter()
                    .zip(&times)
                    .map(|(e, t)| {
                        let mut p =
                            serde_json::to_value(system_properties(e, t.as_deref(), inv.flavor))
                                .unwrap();
                        if let Some(t) = t {
                            assert_eq!(
                                p["x-opt-enqueued-time"],
                                dotnet_datetime_offset(&e.enqueued_time.unwrap())
                            );
                            p["x-opt-enqueued-time"] = Value::from(format!("{t}+00:00"));
                        }
                        p
                    })
                    .collect::<Vec<_>>(),
            ),
        );
        let context = partition_context(inv);
        if inv.flavor == MetadataFlavor::Current {
            metadata.insert("TriggerPartitionContext".into(), context.clone());
        }
        metadata.insert("PartitionContext".into(), context);
        if let Some(r) = inv.retry {
            metadata.insert("RetryContext".into(), retry_context_value(r));
        }
        metadata.insert("sys".into(), sys(inv));
        let mut data = Map::new();
        data.insert(inv.trigger.binding_name.clone(), data_value);
        serde_json::to_vec(&json!({"Data": data, "Metadata": metadata})).unwrap()
    }

    /// The request with its random `RandGuid` blanked, to compare two encodings.
    fn without_guid(request: Vec<u8>) -> String {
        let text = String::from_utf8(request).unwrap();
        let at = text.find("\"RandGuid\":\"").unwrap() + 12;
        format!("{}{}", &text[..at], &text[at + 36..])
    }

    fn odd_events() -> Vec<EventRecord> {
        let t = Utc.timestamp_opt(1_700_000_000, 123_456_700).unwrap();
        let bodies: Vec<Bytes> = vec![
            Bytes::from_static(br#"{"homeId":"h1","t":21.5,"s":"q\"uote\\"}"#),
            Bytes::from_static("\"é😀\" \u{1}\t\n\u{7f}".as_bytes()),
            Bytes::from_static(b"[1,2,{\"a\":null}]"),
            Bytes::from_static(b"42"),
        ];
        bodies
            .into_iter()
            .enumerate()
            .map(|(i, body)| {
                let mut e = EventRecord::new(body);
                if i != 1 {
                    e.sequence_number = Some(i as i64 * 7);
                    e.offset = Some(format!("{}", i * 300));
                    e.enqueued_time = Some(t + chrono::Duration::milliseconds(i as i64));
                    e.partition_key = Some(format!("key \"{i}\"\u{2}"));
                }
                if i == 2 {
                    e.properties
                        .insert("nested".into(), json!({"b": [1, "x\"y"], "a": true}));
                    e.properties.insert("A".into(), json!("\u{0}"));
                    e.system_properties
                        .insert("message-id".into(), json!("m\"1"));
                    e.system_properties
                        .insert("Offset".into(), json!("shadowed"));
                    e.system_properties.insert("zz-last".into(), json!([1]));
                }
                e
            })
            .collect()
    }

    #[test]
    fn a_batch_is_written_byte_for_byte_as_its_values_serialize() {
        let events = odd_events();
        let partition = PartitionContext {
            fully_qualified_namespace: Some("ns.servicebus.windows.net".into()),
            event_hub_name: Some("sensors".into()),
            consumer_group: Some("$Default".into()),
            partition_id: "3".into(),
            is_checkpointing_after_invocation: None,
        };
        let retry = RetryContext {
            retry_count: 1,
            max_retry_count: 3,
            exception: Some(RetryContext::exception_from(
                "F",
                "System.Exception",
                "boom \"x\"",
            )),
        };
        for data_type in [DataType::String, DataType::Binary, DataType::Unset] {
            // Without a dataType the host binds only JSON bodies.
            let events: Vec<EventRecord> = events
                .iter()
                .filter(|e| {
                    data_type != DataType::Unset || serde_json::from_slice::<Value>(&e.body).is_ok()
                })
                .cloned()
                .collect();
            for flavor in [
                MetadataFlavor::Current,
                MetadataFlavor::EarlyV5,
                MetadataFlavor::LegacyV4,
            ] {
                for retry in [None, Some(&retry)] {
                    for events in [&events[..], &events[..1], &[]] {
                        let trigger = EventHubTrigger {
                            binding_name: "ev\"ents".into(),
                            event_hub_name: "sensors".into(),
                            consumer_group: "$Default".into(),
                            cardinality: Cardinality::Many,
                            data_type,
                            connection: None,
                        };
                        let inv = HostInvocation {
                            function: "F",
                            trigger: &trigger,
                            partition: &partition,
                            events,
                            retry,
                            flavor,
                            now: Utc.timestamp_opt(1_700_000_100, 5).unwrap(),
                            inputs: &[],
                        };
                        let written = without_guid(encode_request(&inv).unwrap());
                        let oracle = without_guid(many_as_values(&inv));
                        assert_eq!(
                            written,
                            oracle,
                            "{data_type:?} {flavor:?} {} events",
                            events.len()
                        );
                    }
                }
            }
        }
    }

    /// The host's rules for one event, key by key: body members over the extension's values
    /// ignoring case (the extension's name kept), `…trigger` names and nulls left out, the
    /// retry context added after.
    #[test]
    fn one_events_binding_data_is_built_as_the_host_builds_it() {
        let mut event = EventRecord::new(
            r#" {"OFFSET": 7, "SYS": "s", "RetryContext": "mine", "retrycontext": 1,
                "queueTrigger": "q", "when": "2024-05-01T12:00:00Z", "big": 1e21,
                "none": null} "#,
        );
        event.offset = Some("12".into());
        event.sequence_number = Some(3);
        event.enqueued_time = Some(Utc.timestamp_opt(1_714_564_800, 500_000_000).unwrap());
        let trigger = EventHubTrigger {
            binding_name: "ev".into(),
            event_hub_name: "sensors".into(),
            consumer_group: "$Default".into(),
            cardinality: Cardinality::One,
            data_type: DataType::Unset,
            connection: None,
        };
        let retry = RetryContext {
            retry_count: 1,
            max_retry_count: 2,
            exception: Some(RetryContext::exception_from("F", "System.Exception", "x")),
        };
        let request = encode_request(&HostInvocation {
            function: "F",
            trigger: &trigger,
            partition: &PartitionContext::default(),
            events: std::slice::from_ref(&event),
            retry: Some(&retry),
            flavor: MetadataFlavor::Current,
            now: Utc::now(),
            inputs: &[],
        })
        .unwrap();
        let request: Value = serde_json::from_slice(&request).unwrap();
        let m = request["Metadata"].as_object().unwrap();
        assert_eq!(
            m["Offset"], "\"7\"",
            "the body's OFFSET, under the extension's name"
        );
        assert_eq!(m["OffsetString"], "\"12\"");
        assert_eq!(m["sys"], "\"s\"");
        assert_eq!(m["EnqueuedTimeUtc"], "2024-05-01T12:00:00");
        assert_eq!(m["when"], "\"05/01/2024 12:00:00\"");
        assert_eq!(m["big"], "\"1E+21\"");
        assert_eq!(m["RetryContext"]["RetryCount"], 1);
        assert_eq!(m["RetryContext"]["State"], json!({}));
        assert_eq!(
            m["RetryContext"]["Exception"]["InnerException"]["Message"],
            "x"
        );
        // The body's two casings are one binding data entry, which the host's own retry
        // context then replaces.
        for absent in ["OFFSET", "SYS", "retrycontext", "queueTrigger", "none"] {
            assert!(!m.contains_key(absent), "{absent}");
        }
        assert_eq!(m["SystemProperties"]["x-opt-offset"], "12");
        assert_eq!(m["SystemProperties"]["Offset"], 12);
    }
}

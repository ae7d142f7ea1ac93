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

fn offset_as_long(offset: Option<&str>) -> i64 {
    offset.and_then(|o| o.parse().ok()).unwrap_or(-1)
}

/// An event's `SystemProperties`. The fields are declared in the byte order of their names,
/// which is the order serde_json's (sorted) maps give the host's other objects here.
#[derive(Serialize)]
struct SystemProperties<'a> {
    #[serde(rename = "EnqueuedTimeUtc", skip_serializing_if = "Option::is_none")]
    enqueued_time_utc: Option<&'a str>,
    #[serde(rename = "Offset")]
    offset: i64,
    /// Only in the current flavour, where it may be null.
    #[serde(rename = "OffsetString", skip_serializing_if = "Option::is_none")]
    offset_string: Option<Option<&'a str>>,
    #[serde(rename = "PartitionKey")]
    partition_key: Option<&'a str>,
    #[serde(rename = "SequenceNumber", skip_serializing_if = "Option::is_none")]
    sequence_number: Option<i64>,
    #[serde(
        rename = "x-opt-enqueued-time",
        skip_serializing_if = "Option::is_none"
    )]
    x_opt_enqueued_time: Option<AtUtc<'a>>,
    #[serde(rename = "x-opt-offset")]
    x_opt_offset: i64,
    #[serde(
        rename = "x-opt-partition-key",
        skip_serializing_if = "Option::is_none"
    )]
    x_opt_partition_key: Option<&'a str>,
    #[serde(
        rename = "x-opt-sequence-number",
        skip_serializing_if = "Option::is_none"
    )]
    x_opt_sequence_number: Option<i64>,
}

/// A `DateTime` as [`dotnet_datetime`] wrote it, as a `DateTimeOffset` at UTC (`…+00:00`,
/// what `dotnet_datetime_offset` writes) without formatting the time again.
struct AtUtc<'a>(&'a str);

impl Serialize for AtUtc<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{}+00:00", self.0))
    }
}

/// An event's system properties; `enqueued` is its enqueued time as [`dotnet_datetime`]
/// writes it (formatted once per event for the three places it appears).
fn system_properties<'a>(
    e: &'a EventRecord,
    enqueued: Option<&'a str>,
    flavor: MetadataFlavor,
) -> SystemProperties<'a> {
    let offset = offset_as_long(e.offset.as_deref());
    SystemProperties {
        enqueued_time_utc: enqueued,
        offset,
        offset_string: (flavor == MetadataFlavor::Current).then_some(e.offset.as_deref()),
        partition_key: e.partition_key.as_deref(),
        sequence_number: e.sequence_number,
        x_opt_enqueued_time: enqueued.map(AtUtc),
        x_opt_offset: offset,
        x_opt_partition_key: e.partition_key.as_deref(),
        x_opt_sequence_number: e.sequence_number,
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
    let parsed_bodies = match inv.trigger.data_type {
        DataType::Unset => Some(
            events
                .iter()
                .enumerate()
                .map(|(index, e)| {
                    serde_json::from_slice::<Value>(&e.body)
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
    out.extend_from_slice(b"},\"Metadata\":{");
    let context = partition_context(inv);
    let offsets = Seq(events.iter().map(|e| e.offset.as_deref()));
    member(&mut out, "EnqueuedTimeUtcArray", true);
    write_as_text(&mut out, &times);
    member(&mut out, "OffsetArray", false);
    write_as_text(&mut out, &offsets);
    if inv.flavor == MetadataFlavor::Current {
        member(&mut out, "OffsetStringArray", false);
        write_as_text(&mut out, &offsets);
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
        write_json(&mut out, &retry_context(retry));
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

fn retry_context(r: &RetryContext) -> Value {
    json!({"RetryCount": r.retry_count, "MaxRetryCount": r.max_retry_count, "Exception": r.exception})
}

fn sys(inv: &HostInvocation) -> Value {
    json!({
        "MethodName": inv.function,
        "UtcNow": dotnet_utc_now(&inv.now),
        "RandGuid": uuid::Uuid::new_v4().to_string(),
    })
}

/// One event, built as `Value`s (cardinality one: it also carries the binding data the host
/// takes from a JSON object body, which may name any metadata key).
fn encode_one(inv: &HostInvocation) -> Result<Vec<u8>, EncodeError> {
    let [e] = inv.events else {
        return Err(EncodeError::NotOneEvent(inv.events.len()));
    };
    let mut metadata = Map::new();
    // Binding data the host derives from a JSON object body; it wins over every other key.
    let mut from_body = Map::new();
    // The host omits null values (here: no partition key).
    if let Some(k) = &e.partition_key {
        metadata.insert("PartitionKey".into(), as_json_text(&json!(k)));
    }
    metadata.insert("Offset".into(), as_json_text(&json!(e.offset)));
    if inv.flavor == MetadataFlavor::Current {
        metadata.insert("OffsetString".into(), as_json_text(&json!(e.offset)));
    }
    if let Some(seq) = e.sequence_number {
        metadata.insert("SequenceNumber".into(), as_json_text(&json!(seq)));
    }
    if let Some(t) = &e.enqueued_time {
        // DateTime values go through DateTime.Parse(ToString()): sub-second precision is lost.
        let whole_seconds = t.format("%Y-%m-%dT%H:%M:%S").to_string();
        metadata.insert(
            "EnqueuedTimeUtc".into(),
            as_json_text(&json!(whole_seconds)),
        );
    }
    metadata.insert("Properties".into(), Value::Object(e.properties.clone()));
    let enqueued = e.enqueued_time.as_ref().map(dotnet_datetime);
    metadata.insert(
        "SystemProperties".into(),
        serde_json::to_value(system_properties(e, enqueued.as_deref(), inv.flavor))
            .expect("metadata serializes"),
    );
    let data_value = match inv.trigger.data_type {
        DataType::Binary => Value::String(base64_body(e)),
        DataType::String | DataType::Unset => {
            let body = body_text(e);
            // The host copies a JSON object body's top-level non-array properties into
            // the binding data, overwriting same-named keys (Utility.ApplyBindingData).
            if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(&body) {
                for (k, v) in fields {
                    match v {
                        Value::Array(_) | Value::Null => {}
                        Value::Object(_) => {
                            from_body.insert(k, v);
                        }
                        other => {
                            from_body.insert(k, as_json_text(&other));
                        }
                    }
                }
            }
            as_json_text(&Value::String(body))
        }
    };
    Ok(request_from_values(inv, metadata, data_value, from_body))
}

/// The request from its event metadata and binding value as `Value`s: adds the partition
/// context, the retry context and `sys`, then `from_body` over everything.
fn request_from_values(
    inv: &HostInvocation,
    mut metadata: Map<String, Value>,
    data_value: Value,
    from_body: Map<String, Value>,
) -> Vec<u8> {
    let context = partition_context(inv);
    if inv.flavor == MetadataFlavor::Current {
        metadata.insert("TriggerPartitionContext".into(), context.clone());
    }
    metadata.insert("PartitionContext".into(), context);
    if let Some(r) = inv.retry {
        metadata.insert("RetryContext".into(), retry_context(r));
    }
    metadata.insert("sys".into(), sys(inv));
    metadata.extend(from_body);
    let mut data = Map::new();
    data.insert(inv.trigger.binding_name.clone(), data_value);
    let request = json!({"Data": data, "Metadata": metadata});
    serde_json::to_vec(&request).expect("a JSON value always serializes")
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
            DataType::Unset => as_json_text(&Value::Array(
                events
                    .iter()
                    .map(|e| serde_json::from_slice(&e.body).unwrap())
                    .collect(),
            )),
        };
        let offsets = json_text(
            &events
                .iter()
                .map(|e| e.offset.as_deref())
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
            metadata.insert("OffsetStringArray".into(), offsets.clone());
        }
        metadata.insert("OffsetArray".into(), offsets);
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
        request_from_values(inv, metadata, data_value, Map::new())
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
            exception: Some(RetryContext::exception_from("boom \"x\"")),
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
}

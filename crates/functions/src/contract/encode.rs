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

use crate::batch::{EventRecord, PartitionContext, RetryContext};
use crate::function_app::{Cardinality, DataType, EventHubTrigger};
use hubhost_trigger::time::{dotnet_datetime, dotnet_datetime_offset, dotnet_utc_now};

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

/// Rule 4 for arrays built from typed values: written straight to JSON text, without building
/// a `Value` per element first (the emulated host does this for every event of every batch).
fn json_text<T: Serialize + ?Sized>(v: &T) -> Value {
    Value::String(serde_json::to_string(v).expect("metadata serializes"))
}

/// An event's `SystemProperties`. The fields are declared in the byte order of their names,
/// which is the order serde_json's (sorted) maps give the host's other objects here.
#[derive(Serialize)]
struct SystemProperties<'a> {
    #[serde(rename = "EnqueuedTimeUtc", skip_serializing_if = "Option::is_none")]
    enqueued_time_utc: Option<String>,
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
    x_opt_enqueued_time: Option<String>,
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

fn system_properties(e: &EventRecord, flavor: MetadataFlavor) -> SystemProperties<'_> {
    let offset = offset_as_long(e.offset.as_deref());
    SystemProperties {
        enqueued_time_utc: e.enqueued_time.as_ref().map(dotnet_datetime),
        offset,
        offset_string: (flavor == MetadataFlavor::Current).then_some(e.offset.as_deref()),
        partition_key: e.partition_key.as_deref(),
        sequence_number: e.sequence_number,
        x_opt_enqueued_time: e.enqueued_time.as_ref().map(dotnet_datetime_offset),
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
    String::from_utf8_lossy(&e.body).into_owned()
}

fn base64_body(e: &EventRecord) -> String {
    base64::engine::general_purpose::STANDARD.encode(&e.body)
}

/// Builds the request body the host POSTs to `/{function}`.
pub fn encode_request(inv: &HostInvocation) -> Result<Vec<u8>, EncodeError> {
    let trigger = inv.trigger;
    let events = inv.events;
    let mut metadata = Map::new();
    // Binding data the host derives from a JSON object body; it wins over every other key.
    let mut from_body = Map::new();
    let data_value = match trigger.cardinality {
        Cardinality::Many => {
            let data_text = match trigger.data_type {
                DataType::String => json_text(
                    &events
                        .iter()
                        .map(|e| String::from_utf8_lossy(&e.body))
                        .collect::<Vec<_>>(),
                ),
                DataType::Binary => json_text(&events.iter().map(base64_body).collect::<Vec<_>>()),
                // Parsed, as the host parses them (its text is re-serialized, not copied).
                DataType::Unset => as_json_text(&Value::Array(
                    events
                        .iter()
                        .enumerate()
                        .map(|(index, e)| {
                            serde_json::from_slice(&e.body)
                                .map_err(|_| EncodeError::BodyNotJson { index })
                        })
                        .collect::<Result<_, _>>()?,
                )),
            };
            let offsets = json_text(
                &events
                    .iter()
                    .map(|e| e.offset.as_deref())
                    .collect::<Vec<_>>(),
            );
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
            metadata.insert(
                "EnqueuedTimeUtcArray".into(),
                json_text(
                    &events
                        .iter()
                        .map(|e| e.enqueued_time.as_ref().map(dotnet_datetime))
                        .collect::<Vec<_>>(),
                ),
            );
            metadata.insert(
                "PropertiesArray".into(),
                json_text(&events.iter().map(|e| &e.properties).collect::<Vec<_>>()),
            );
            metadata.insert(
                "SystemPropertiesArray".into(),
                json_text(
                    &events
                        .iter()
                        .map(|e| system_properties(e, inv.flavor))
                        .collect::<Vec<_>>(),
                ),
            );
            data_text
        }
        Cardinality::One => {
            let [e] = events else {
                return Err(EncodeError::NotOneEvent(events.len()));
            };
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
            metadata.insert(
                "SystemProperties".into(),
                serde_json::to_value(system_properties(e, inv.flavor))
                    .expect("metadata serializes"),
            );
            match trigger.data_type {
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
            }
        }
    };

    let context = partition_context(inv);
    if inv.flavor == MetadataFlavor::Current {
        metadata.insert("TriggerPartitionContext".into(), context.clone());
    }
    metadata.insert("PartitionContext".into(), context);
    if let Some(r) = inv.retry {
        metadata.insert(
            "RetryContext".into(),
            json!({"RetryCount": r.retry_count, "MaxRetryCount": r.max_retry_count, "Exception": r.exception}),
        );
    }
    metadata.insert(
        "sys".into(),
        json!({
            "MethodName": inv.function,
            "UtcNow": dotnet_utc_now(&inv.now),
            "RandGuid": uuid::Uuid::new_v4().to_string(),
        }),
    );
    metadata.extend(from_body);
    let mut data = Map::new();
    data.insert(trigger.binding_name.clone(), data_value);
    let request = json!({"Data": data, "Metadata": metadata});
    Ok(serde_json::to_vec(&request).expect("a JSON value always serializes"))
}

//! Request → [`TriggerBatch`]: every shape the Functions host sends for an `eventHubTrigger`.
//!
//! Rules (docs/host-contract.md §2):
//! - `Data.<binding>` is JSON text inside a JSON string. With cardinality `many` the text is an
//!   array: of strings (dataType `string`), of base64 strings (`binary`) or of the bodies parsed
//!   as JSON (no dataType). With cardinality `one` it is the body itself, once more
//!   JSON-encoded (`string`/unset) or base64 (`binary`).
//! - Metadata values are JSON objects (partition context, `sys`, `RetryContext`) or JSON text
//!   inside strings (`"[10,11]"`, `"\"k\""`). Any optional key may be missing; a value the
//!   current extension puts in `SequenceNumberArray` etc. is also looked for in
//!   `SystemPropertiesArray`, which older extensions send.
//! - The partition context comes from `TriggerPartitionContext` (current), `PartitionContext`
//!   (all versions; the legacy v3/v4 one names its fields `EventHubPath`/`ConsumerGroupName`).

use std::borrow::Cow;
use std::collections::HashMap;

use base64::Engine;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::ContractError;
use super::json_text::{self, Member, ObjectReader};
use crate::batch::{EventRecord, PartitionContext, RetryContext, SystemProperties, TriggerBatch};
use crate::function_app::{Cardinality, DataType, EventHubTrigger};
use hubhost_trigger::time::parse_host_time;

/// The request's `Data` and `Metadata` members, each value as read.
struct Envelope<'a> {
    data: Option<Members<'a>>,
    metadata: Option<Members<'a>>,
}

type Members<'a> = Vec<(Cow<'a, str>, Member<'a>)>;

impl<'a> Envelope<'a> {
    /// The envelope in one pass: strings unescaped as they are read (the batch's events and
    /// most metadata are JSON text inside strings), the system properties left as text for
    /// [`SystemProperties`] to read when asked. Whatever this does not read — not JSON, or
    /// not the envelope's shape — [`Envelope::parse`] reads or refuses with serde_json's message.
    fn read(text: &'a str) -> Result<Self, json_text::TextError> {
        let mut top = ObjectReader::new(text, 0)?;
        let mut envelope = Envelope {
            data: None,
            metadata: None,
        };
        let (mut seen_data, mut seen_metadata) = (false, false);
        while let Some(key) = top.next_key()? {
            let (slot, seen) = match &*key {
                "Data" | "data" => (&mut envelope.data, &mut seen_data),
                "Metadata" | "metadata" => (&mut envelope.metadata, &mut seen_metadata),
                _ => {
                    top.raw()?;
                    continue;
                }
            };
            if std::mem::replace(seen, true) {
                // serde_json names the duplicate.
                return Err(json_text::TextError::NotAnObject);
            }
            if let Some(mut object) = top.object()? {
                let mut members = Vec::new();
                while let Some(key) = object.next_key()? {
                    let value = if is_system_properties(&key) {
                        Member::Raw(object.raw()?)
                    } else {
                        object.value()?
                    };
                    members.push((key, value));
                }
                top.resume(&object);
                *slot = Some(members);
            }
        }
        if !top.at_end() {
            return Err(json_text::TextError::TrailingCharacters);
        }
        Ok(envelope)
    }

    /// The envelope through serde_json: every value kept as its JSON text.
    fn parse(body: &'a [u8]) -> Result<Self, ContractError> {
        #[derive(Deserialize)]
        struct Parsed<'a> {
            #[serde(rename = "Data", alias = "data", borrow, default)]
            data: Option<HashMap<String, &'a RawValue>>,
            #[serde(rename = "Metadata", alias = "metadata", borrow, default)]
            metadata: Option<HashMap<String, &'a RawValue>>,
        }
        let parsed: Parsed = serde_json::from_slice(body)
            .map_err(|e| ContractError::MalformedJson(e.to_string()))?;
        let members = |map: HashMap<String, &'a RawValue>| {
            map.into_iter()
                .map(|(k, v)| (Cow::Owned(k), Member::Raw(v.get())))
                .collect()
        };
        Ok(Envelope {
            data: parsed.data.map(members),
            metadata: parsed.metadata.map(members),
        })
    }
}

fn is_system_properties(key: &str) -> bool {
    key.eq_ignore_ascii_case("SystemPropertiesArray")
        || key.eq_ignore_ascii_case("SystemProperties")
}

/// A member by name: the exact key first (what the host sends; the last one when repeated),
/// then case-insensitive (hand-written requests).
fn member<'m, 'a>(members: &'m Members<'a>, key: &str) -> Option<&'m Member<'a>> {
    members
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .or_else(|| members.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)))
        .map(|(_, v)| v)
}

/// A member's JSON text as the host meant it: a string's content (JSON text inside a string),
/// or the value itself.
fn json_inside<'m>(value: &'m Member<'_>) -> Result<Cow<'m, str>, json_text::TextError> {
    match value {
        Member::Text(text) => Ok(Cow::Borrowed(text)),
        Member::Raw(text) if text.starts_with('"') => json_text::unescape(text),
        Member::Raw(text) => Ok(Cow::Borrowed(text)),
    }
}

struct Metadata<'a>(Members<'a>);

impl<'a> Metadata<'a> {
    fn get(&self, key: &str) -> Option<&Member<'a>> {
        member(&self.0, key)
    }

    /// A value that may be JSON text wrapped in a string (`"[10,11]"`) or plain JSON.
    fn parse<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, ContractError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let bad = |problem: String| ContractError::BadMetadata {
            key: key.to_string(),
            problem,
        };
        match value {
            Member::Raw("null") => Ok(None),
            Member::Raw(text) if !text.starts_with('"') => serde_json::from_str(text)
                .map(Some)
                .map_err(|e| bad(e.to_string())),
            string => {
                let inner = json_inside(string).map_err(|e| bad(e.to_string()))?;
                match serde_json::from_str(&inner) {
                    Ok(v) => Ok(Some(v)),
                    // Some values are plain strings that were not JSON-encoded a second time.
                    Err(e) => serde_json::from_value(Value::String(inner.into_owned()))
                        .map(Some)
                        .map_err(|_| bad(e.to_string())),
                }
            }
        }
    }

    /// An array-valued key of a `many` batch, checked against the number of events.
    fn array<T: DeserializeOwned>(
        &self,
        key: &str,
        binding: &str,
        events: usize,
    ) -> Result<Option<Vec<T>>, ContractError> {
        let Some(values) = self.parse::<Vec<T>>(key)? else {
            return Ok(None);
        };
        if values.len() != events {
            return Err(ContractError::LengthMismatch {
                binding: binding.to_string(),
                key: key.to_string(),
                events,
                len: values.len(),
            });
        }
        Ok(Some(values))
    }
}

/// A JSON scalar that the host may write as a number or as a string (offsets, sequence numbers).
#[derive(Clone)]
enum Scalar {
    Int(i64),
    Text(String),
    Float(f64),
}

/// By the JSON type read (serde's untagged enums buffer every value first).
impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl serde::de::Visitor<'_> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(i64::try_from(v).map_or(Scalar::Float(v as f64), Scalar::Int))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar::Text(v))
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// A metadata date: parsed when it is a string in one of the host's forms, nothing otherwise.
struct HostTime(Option<DateTime<Utc>>);

impl HostTime {
    fn of(value: &Value) -> Self {
        HostTime(value.as_str().and_then(parse_host_time))
    }
}

impl<'de> Deserialize<'de> for HostTime {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TimeVisitor;
        impl<'de> serde::de::Visitor<'de> for TimeVisitor {
            type Value = HostTime;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a date")
            }
            fn visit_str<E>(self, v: &str) -> Result<HostTime, E> {
                Ok(HostTime(parse_host_time(v)))
            }
            fn visit_bool<E>(self, _: bool) -> Result<HostTime, E> {
                Ok(HostTime(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<HostTime, E> {
                Ok(HostTime(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<HostTime, E> {
                Ok(HostTime(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<HostTime, E> {
                Ok(HostTime(None))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<HostTime, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(HostTime(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<HostTime, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(HostTime(None))
            }
        }
        deserializer.deserialize_any(TimeVisitor)
    }
}

impl Scalar {
    fn as_i64(&self) -> Option<i64> {
        match self {
            Scalar::Int(i) => Some(*i),
            Scalar::Text(s) => s.parse().ok(),
            Scalar::Float(f) => Some(*f as i64),
        }
    }
    fn into_string(self) -> String {
        match self {
            Scalar::Int(i) => i.to_string(),
            Scalar::Text(s) => s,
            Scalar::Float(f) => f.to_string(),
        }
    }
}

/// Per-event annotations from whichever metadata keys are present.
#[derive(Default)]
struct Annotations {
    sequence_number: Option<i64>,
    offset: Option<String>,
    /// `Some` when the host sent a value, even one that is not a date.
    enqueued_time: Option<HostTime>,
    partition_key: Option<String>,
    properties: Map<String, Value>,
}

/// Decodes one invocation request for `function`, whose trigger is `trigger`.
///
/// ```
/// use hubhost_functions::batch::{EventRecord, PartitionContext};
/// use hubhost_functions::contract::decode::decode_request;
/// use hubhost_functions::contract::encode::{HostInvocation, MetadataFlavor, encode_request};
/// use hubhost_functions::function_app::{Cardinality, DataType, EventHubTrigger};
///
/// let trigger = EventHubTrigger {
///     binding_name: "events".into(),
///     event_hub_name: "sensors".into(),
///     consumer_group: "$Default".into(),
///     cardinality: Cardinality::Many,
///     data_type: DataType::String,
///     connection: None,
/// };
/// let partition = PartitionContext { partition_id: "3".into(), ..Default::default() };
/// let mut event = EventRecord::new(r#"{"homeId":"h1"}"#);
/// event.sequence_number = Some(41);
/// // The request the host would send …
/// let body = encode_request(&HostInvocation {
///     function: "F",
///     trigger: &trigger,
///     partition: &partition,
///     events: &[event],
///     retry: None,
///     flavor: MetadataFlavor::Current,
///     now: chrono::Utc::now(),
///     inputs: &[],
/// })?;
/// // … decoded into the typed batch a function gets.
/// let batch = decode_request("F", &trigger, &body)?;
/// assert_eq!(batch.partition.partition_id, "3");
/// assert_eq!(batch.events[0].sequence_number, Some(41));
/// assert_eq!(batch.events[0].text(), Ok(r#"{"homeId":"h1"}"#));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn decode_request(
    function: &str,
    trigger: &EventHubTrigger,
    body: &[u8],
) -> Result<TriggerBatch, ContractError> {
    let read = std::str::from_utf8(body)
        .ok()
        .and_then(|text| Envelope::read(text).ok());
    let envelope = match read {
        Some(envelope) => envelope,
        None => Envelope::parse(body)?,
    };
    let data = envelope.data.ok_or(ContractError::MissingData)?;
    let metadata = Metadata(envelope.metadata.unwrap_or_default());
    let binding = trigger.binding_name.as_str();
    let raw = member(&data, binding).ok_or_else(|| {
        let mut found: Vec<String> = data.iter().map(|(k, _)| k.to_string()).collect();
        found.sort();
        found.dedup();
        ContractError::MissingBinding {
            function: function.to_string(),
            expected: binding.to_string(),
            found,
        }
    })?;

    let bodies = match trigger.cardinality {
        Cardinality::Many => decode_many(binding, trigger.data_type, raw)?,
        Cardinality::One => vec![decode_one(binding, trigger.data_type, raw)?],
    };
    let annotations = match trigger.cardinality {
        Cardinality::Many => annotations_many(&metadata, binding, bodies.len())?,
        Cardinality::One => vec![annotations_one(&metadata)?],
    };
    let partition = partition_context(&metadata)?;
    let retry = metadata
        .parse::<Value>("RetryContext")?
        .map(|v| retry_context_of(&v));

    let events = bodies
        .into_iter()
        .zip(annotations)
        .map(|(body, a)| EventRecord {
            body,
            sequence_number: a.sequence_number,
            offset: a.offset,
            enqueued_time: a.enqueued_time.and_then(|t| t.0),
            partition_key: a.partition_key,
            properties: a.properties,
            // Read when asked, from the batch's `system_properties`: most functions never do.
            system_properties: Map::new(),
        })
        .collect();
    let system_properties = match trigger.cardinality {
        Cardinality::Many => metadata
            .get("SystemPropertiesArray")
            .map(|value| SystemProperties::from_json(member_text(value))),
        Cardinality::One => metadata
            .get("SystemProperties")
            .map(|value| SystemProperties::from_single_json(member_text(value))),
    }
    .unwrap_or_default();
    // Every other member of `Data` is an input binding's value (a blob read before the call).
    let inputs = data
        .iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case(binding))
        .map(|(name, value)| {
            let value = match value {
                Member::Text(text) => Value::String(text.to_string()),
                Member::Raw(text) => {
                    serde_json::from_str(text).map_err(|e| ContractError::BadData {
                        binding: name.to_string(),
                        problem: e.to_string(),
                    })?
                }
            };
            Ok((name.to_string(), value))
        })
        .collect::<Result<Vec<_>, ContractError>>()?;
    Ok(TriggerBatch {
        function: function.to_string(),
        partition,
        events,
        retry,
        system_properties,
        inputs: hubhost_trigger::inputs::InputValues::from_wire(inputs),
    })
}

/// The host's `RetryContext` object (`Metadata.RetryContext`) as the typed retry context.
pub fn retry_context_of(value: &Value) -> RetryContext {
    RetryContext {
        retry_count: value.get("RetryCount").and_then(Value::as_i64).unwrap_or(0),
        max_retry_count: value
            .get("MaxRetryCount")
            .and_then(Value::as_i64)
            .unwrap_or(0),
        exception: value.get("Exception").filter(|e| !e.is_null()).cloned(),
    }
}

/// A member's text for [`SystemProperties`], which reads both forms.
fn member_text<'m>(value: &'m Member<'_>) -> &'m str {
    match value {
        Member::Text(text) => text,
        Member::Raw(text) => text,
    }
}

/// The JSON text inside `Data.<binding>`: unwraps the host's string encoding, and accepts a
/// plain JSON value from hand-written requests.
fn unwrap_string_encoded<'m>(
    binding: &str,
    raw: &'m Member<'_>,
) -> Result<Cow<'m, str>, ContractError> {
    json_inside(raw).map_err(|e| ContractError::BadData {
        binding: binding.to_string(),
        problem: e.to_string(),
    })
}

fn decode_many(
    binding: &str,
    data_type: DataType,
    raw: &Member,
) -> Result<Vec<Bytes>, ContractError> {
    let text = unwrap_string_encoded(binding, raw)?;
    // Fast path for the usual shape of dataType string: an array of strings, in one pass.
    if data_type == DataType::String
        && let Some(bodies) = json_text::string_array(&text)
    {
        return Ok(bodies.into_iter().map(Bytes::from).collect());
    }
    let elements: Vec<&RawValue> =
        serde_json::from_str(&text).map_err(|e| ContractError::BadData {
            binding: binding.to_string(),
            problem: format!(
                "expected a JSON array of events (cardinality many), encoded as a string: {e}"
            ),
        })?;
    elements
        .into_iter()
        .enumerate()
        .map(|(index, element)| {
            let text = element.get();
            match data_type {
                DataType::Unset => Ok(Bytes::copy_from_slice(text.as_bytes())),
                DataType::String => Ok(if text.starts_with('"') {
                    let s: String =
                        serde_json::from_str(text).map_err(|e| ContractError::BadData {
                            binding: binding.to_string(),
                            problem: format!("element {index}: {e}"),
                        })?;
                    Bytes::from(s)
                } else {
                    Bytes::copy_from_slice(text.as_bytes())
                }),
                DataType::Binary => {
                    let s: String =
                        serde_json::from_str(text).map_err(|_| ContractError::InvalidBase64 {
                            binding: binding.to_string(),
                            index,
                        })?;
                    base64::engine::general_purpose::STANDARD
                        .decode(s)
                        .map(Bytes::from)
                        .map_err(|_| ContractError::InvalidBase64 {
                            binding: binding.to_string(),
                            index,
                        })
                }
            }
        })
        .collect()
}

fn decode_one(binding: &str, data_type: DataType, raw: &Member) -> Result<Bytes, ContractError> {
    let once = unwrap_string_encoded(binding, raw)?;
    match data_type {
        DataType::Binary => base64::engine::general_purpose::STANDARD
            .decode(once.as_bytes())
            .map(Bytes::from)
            .map_err(|_| ContractError::InvalidBase64 {
                binding: binding.to_string(),
                index: 0,
            }),
        // string or unset: the body string was JSON-encoded once more.
        DataType::String | DataType::Unset => Ok(match serde_json::from_str::<String>(&once) {
            Ok(body) => Bytes::from(body),
            Err(_) => Bytes::copy_from_slice(once.as_bytes()),
        }),
    }
}

fn annotations_many(
    meta: &Metadata,
    binding: &str,
    n: usize,
) -> Result<Vec<Annotations>, ContractError> {
    let seqs = meta.array::<Option<i64>>("SequenceNumberArray", binding, n)?;
    let offsets = match meta.array::<Option<Scalar>>("OffsetStringArray", binding, n)? {
        Some(o) => Some(o),
        None => meta.array::<Option<Scalar>>("OffsetArray", binding, n)?,
    };
    let times = meta.array::<Option<HostTime>>("EnqueuedTimeUtcArray", binding, n)?;
    let keys = meta.array::<Option<String>>("PartitionKeyArray", binding, n)?;
    let props = meta.array::<Option<Map<String, Value>>>("PropertiesArray", binding, n)?;
    // Only needed when the current keys are missing (older extensions): parse it lazily.
    let needs_system = seqs.is_none() || offsets.is_none() || times.is_none() || keys.is_none();
    let system = if needs_system {
        meta.array::<Option<Map<String, Value>>>("SystemPropertiesArray", binding, n)?
    } else {
        None
    };
    // Each array yields its entries in order, or nothing when the host did not send it.
    fn entries<T>(array: Option<Vec<Option<T>>>, n: usize) -> impl Iterator<Item = Option<T>> {
        let missing = if array.is_some() { 0 } else { n };
        array
            .into_iter()
            .flatten()
            .chain(std::iter::repeat_with(|| None).take(missing))
    }
    let mut system = entries(system, n);
    Ok(entries(seqs, n)
        .zip(entries(offsets, n))
        .zip(entries(times, n))
        .zip(entries(keys, n))
        .zip(entries(props, n))
        .map(|((((sequence_number, offset), time), key), properties)| {
            let mut a = Annotations {
                sequence_number,
                offset: offset.map(Scalar::into_string),
                enqueued_time: time,
                partition_key: key,
                properties: properties.unwrap_or_default(),
            };
            if let Some(sys) = system.next().flatten() {
                fill_from_system_properties(&mut a, &sys);
            }
            a
        })
        .collect())
}

fn annotations_one(meta: &Metadata) -> Result<Annotations, ContractError> {
    let mut a = Annotations {
        sequence_number: meta
            .parse::<Scalar>("SequenceNumber")?
            .and_then(|s| s.as_i64()),
        offset: match meta.parse::<Scalar>("OffsetString")? {
            Some(o) => Some(o.into_string()),
            None => meta.parse::<Scalar>("Offset")?.map(Scalar::into_string),
        },
        enqueued_time: meta.parse::<HostTime>("EnqueuedTimeUtc")?,
        partition_key: meta.parse::<String>("PartitionKey")?,
        properties: meta
            .parse::<Map<String, Value>>("Properties")?
            .unwrap_or_default(),
    };
    if let Some(sys) = meta.parse::<Map<String, Value>>("SystemProperties")? {
        fill_from_system_properties(&mut a, &sys);
    }
    Ok(a)
}

/// Fills what is still missing from the system properties dictionary (AMQP annotations plus
/// the keys the extension adds).
fn fill_from_system_properties(a: &mut Annotations, sys: &Map<String, Value>) {
    let get = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| sys.get(*k).filter(|v| !v.is_null()))
    };
    if a.sequence_number.is_none() {
        a.sequence_number =
            get(&["SequenceNumber", "x-opt-sequence-number"]).and_then(|v| match v {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => s.parse().ok(),
                _ => None,
            });
    }
    if a.offset.is_none() {
        a.offset = get(&["OffsetString", "Offset", "x-opt-offset"]).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    if a.enqueued_time.is_none() {
        a.enqueued_time = get(&["EnqueuedTimeUtc", "x-opt-enqueued-time"]).map(HostTime::of);
    }
    if a.partition_key.is_none() {
        a.partition_key = get(&["PartitionKey", "x-opt-partition-key"])
            .and_then(Value::as_str)
            .map(str::to_string);
    }
}

fn partition_context(meta: &Metadata) -> Result<PartitionContext, ContractError> {
    let context = match meta.parse::<Map<String, Value>>("TriggerPartitionContext")? {
        Some(c) => Some(c),
        None => meta.parse::<Map<String, Value>>("PartitionContext")?,
    };
    let context = context.ok_or(ContractError::MissingPartitionContext)?;
    let text = |keys: &[&str]| {
        keys.iter().find_map(|k| {
            context
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(k))
                .and_then(|(_, v)| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
        })
    };
    let partition_id = text(&["PartitionId"])
        .filter(|p| !p.is_empty())
        .ok_or(ContractError::MissingPartitionContext)?;
    Ok(PartitionContext {
        fully_qualified_namespace: text(&["FullyQualifiedNamespace"]),
        event_hub_name: text(&["EventHubName", "EventHubPath"]),
        consumer_group: text(&["ConsumerGroup", "ConsumerGroupName"]),
        partition_id,
        is_checkpointing_after_invocation: context
            .get("IsCheckpointingAfterInvocation")
            .and_then(Value::as_bool),
    })
}

//! AMQP values as the Functions host writes them in trigger metadata.
//!
//! The host's Event Hubs extension reads events with the .NET SDK, which turns AMQP values
//! into .NET ones (a timestamp into a UTC `DateTime`, a symbol into a string, binary into a
//! byte array), and the host writes those with Newtonsoft.Json: a `DateTime` as
//! `2024-05-01T12:00:00.123Z`, a `DateTimeOffset` as `…+00:00`, bytes as base64, a GUID as its
//! text. `EventData.SystemProperties` is the message's properties section (the fields that are
//! set) followed by its message annotations. Pure functions; the pump calls them per event.

use azure_core_amqp::AmqpMessage;
use azure_core_amqp::message::{AmqpAnnotationKey, AmqpMessageId};
use azure_core_amqp::{AmqpSimpleValue, AmqpTimestamp, AmqpValue};
use base64::Engine;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use hubhost_trigger::time::{dotnet_datetime_offset, dotnet_utc_now};

/// The annotations the trigger's own fields carry (sequence number, offset, enqueued time,
/// partition key): the host's encoder writes them from those fields.
const CARRIED_BY_FIELDS: [&str; 4] = [
    "x-opt-sequence-number",
    "x-opt-offset",
    "x-opt-enqueued-time",
    "x-opt-partition-key",
];

/// The JSON of a scalar of either AMQP value type (`AmqpSimpleValue` and `AmqpValue` name
/// their scalars alike); `None` for the others.
macro_rules! scalar_json {
    ($value:expr, $T:ident) => {
        match $value {
            $T::Null => Some(Value::Null),
            $T::Boolean(b) => Some(Value::Bool(*b)),
            $T::UByte(n) => Some((*n).into()),
            $T::Byte(n) => Some((*n).into()),
            $T::UShort(n) => Some((*n).into()),
            $T::Short(n) => Some((*n).into()),
            $T::UInt(n) => Some((*n).into()),
            $T::Int(n) => Some((*n).into()),
            $T::ULong(n) => Some((*n).into()),
            $T::Long(n) => Some((*n).into()),
            $T::Float(n) => Some(single(*n)),
            $T::Double(n) => Some(double(*n)),
            $T::Char(c) => Some(Value::String(c.to_string())),
            $T::String(s) => Some(Value::String(s.clone())),
            $T::Symbol(s) => Some(Value::String(s.0.clone())),
            $T::Uuid(u) => Some(Value::String(u.to_string())),
            $T::Binary(b) => Some(base64(b)),
            $T::TimeStamp(t) => Some(timestamp(t)),
            _ => None,
        }
    };
}

/// An application property's value.
pub fn application_property(v: &AmqpSimpleValue) -> Value {
    if let Some(scalar) = scalar_json!(v, AmqpSimpleValue) {
        return scalar;
    }
    match v {
        AmqpSimpleValue::Decimal32(b) => decimal(&b[..], 101),
        AmqpSimpleValue::Decimal64(b) => decimal(&b[..], 398),
        AmqpSimpleValue::Decimal128(b) => decimal(&b[..], 6176),
        other => Value::String(format!("{other:?}")),
    }
}

/// An AMQP decimal (IEEE 754-2008, binary integer decimal, big-endian; `bias` 101, 398 or
/// 6176 for 32, 64 and 128 bits) as a JSON number: .NET reads it as a `decimal`, which
/// Newtonsoft writes as a number. Infinities and NaN, which a .NET `decimal` cannot hold, are
/// null; so is a value past a double's range.
fn decimal(bytes: &[u8], bias: i32) -> Value {
    let bits = bytes.len() * 8;
    let raw = bytes
        .iter()
        .fold(0u128, |acc, b| (acc << 8) | u128::from(*b));
    let exponent_bits = match bits {
        32 => 8,
        64 => 10,
        _ => 14,
    };
    let negative = raw >> (bits - 1) & 1 == 1;
    let top_two = raw >> (bits - 3) & 0b11;
    let (exponent, coefficient) = if top_two == 0b11 {
        if raw >> (bits - 5) & 0b11 == 0b11 {
            return Value::Null; // infinity or NaN
        }
        let exponent = raw >> (bits - 3 - exponent_bits) & ((1 << exponent_bits) - 1);
        let rest = bits - 3 - exponent_bits;
        (
            exponent,
            (0b100 << (rest - 2)) | (raw & ((1 << (rest - 2)) - 1)),
        )
    } else {
        let exponent = raw >> (bits - 1 - exponent_bits) & ((1 << exponent_bits) - 1);
        let rest = bits - 1 - exponent_bits;
        (exponent, raw & ((1 << rest) - 1))
    };
    let text = format!(
        "{}{coefficient}e{}",
        if negative { "-" } else { "" },
        exponent as i32 - bias
    );
    text.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map_or(Value::Null, double)
}

/// Any AMQP value (a message annotation's): the scalars as [`application_property`] writes
/// them; a list, map or array as JSON arrays and objects.
pub fn value(v: &AmqpValue) -> Value {
    if let Some(scalar) = scalar_json!(v, AmqpValue) {
        return scalar;
    }
    match v {
        AmqpValue::List(items) => Value::Array(items.iter().map(value).collect()),
        AmqpValue::Array(items) => Value::Array(items.iter().map(value).collect()),
        AmqpValue::Map(map) => {
            Value::Object(map.iter().map(|(k, v)| (key_text(k), value(v))).collect())
        }
        other => Value::String(format!("{other:?}")),
    }
}

/// The message's system properties other than the four the trigger's fields carry: the
/// properties section's fields that are set, in the .NET SDK's order, then the message
/// annotations.
pub fn system_properties(message: &AmqpMessage) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(p) = &message.properties {
        let mut put = |name: &str, v: Option<Value>| {
            if let Some(v) = v {
                out.insert(name.to_string(), v);
            }
        };
        put("message-id", p.message_id.as_ref().map(message_id));
        put("user-id", p.user_id.as_deref().map(base64));
        put("to", p.to.clone().map(Value::String));
        put("subject", p.subject.clone().map(Value::String));
        put("reply-to", p.reply_to.clone().map(Value::String));
        put("correlation-id", p.correlation_id.as_ref().map(message_id));
        put(
            "content-type",
            p.content_type.as_ref().map(|s| s.0.clone().into()),
        );
        put(
            "content-encoding",
            p.content_encoding.as_ref().map(|s| s.0.clone().into()),
        );
        // The .NET SDK's properties section holds these as `DateTimeOffset`s.
        put(
            "absolute-expiry-time",
            p.absolute_expiry_time.as_ref().and_then(offset_time),
        );
        put(
            "creation-time",
            p.creation_time.as_ref().and_then(offset_time),
        );
        put("group-id", p.group_id.clone().map(Value::String));
        put("group-sequence", p.group_sequence.map(Value::from));
        put(
            "reply-to-group-id",
            p.reply_to_group_id.clone().map(Value::String),
        );
    }
    if let Some(annotations) = &message.message_annotations {
        for (key, v) in annotations.0.iter() {
            let name = match key {
                AmqpAnnotationKey::Symbol(s) => s.0.clone(),
                AmqpAnnotationKey::Ulong(n) => n.to_string(),
            };
            if !CARRIED_BY_FIELDS.contains(&name.as_str()) {
                out.insert(name, value(v));
            }
        }
    }
    out
}

/// A message id as the .NET SDK's `ToString()` gives it.
fn message_id(id: &AmqpMessageId) -> Value {
    Value::String(match id {
        AmqpMessageId::String(s) => s.clone(),
        AmqpMessageId::Uuid(u) => u.to_string(),
        AmqpMessageId::Ulong(n) => n.to_string(),
        AmqpMessageId::Binary(b) => b.iter().map(|byte| format!("{byte:02X}")).collect(),
    })
}

fn key_text(k: &AmqpValue) -> String {
    match value(k) {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

fn utc(t: &AmqpTimestamp) -> Option<DateTime<Utc>> {
    t.0.map(DateTime::<Utc>::from)
}

/// A timestamp as a UTC `DateTime` (`…Z`), what the .NET AMQP library reads it as.
fn timestamp(t: &AmqpTimestamp) -> Value {
    utc(t).map_or(Value::Null, |t| Value::String(dotnet_utc_now(&t)))
}

fn offset_time(t: &AmqpTimestamp) -> Option<Value> {
    utc(t).map(|t| Value::String(dotnet_datetime_offset(&t)))
}

fn base64(b: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(b))
}

/// A `float` as .NET writes it: its own shortest text (1.1, not 1.100000023841858).
fn single(n: f32) -> Value {
    n.to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

fn double(n: f64) -> Value {
    serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use azure_core_amqp::AmqpSymbol;
    use azure_core_amqp::message::{AmqpAnnotations, AmqpMessageProperties};
    use std::time::{Duration, SystemTime};

    fn at(ms: u64) -> AmqpTimestamp {
        AmqpTimestamp(Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms)))
    }

    #[test]
    fn every_amqp_type_a_sender_can_set_is_written_as_the_host_writes_it() {
        let cases: Vec<(AmqpSimpleValue, Value)> = vec![
            (
                AmqpSimpleValue::TimeStamp(at(1_714_564_800_123)),
                "2024-05-01T12:00:00.123Z".into(),
            ),
            (
                AmqpSimpleValue::TimeStamp(at(1_714_564_800_000)),
                "2024-05-01T12:00:00Z".into(),
            ),
            (
                AmqpSimpleValue::Symbol(AmqpSymbol("sym".into())),
                "sym".into(),
            ),
            (AmqpSimpleValue::Char('é'), "é".into()),
            (AmqpSimpleValue::Binary(vec![1, 2, 3]), "AQID".into()),
            (AmqpSimpleValue::Float(1.1), serde_json::json!(1.1)),
            (
                AmqpSimpleValue::ULong(u64::MAX),
                serde_json::json!(u64::MAX),
            ),
            (AmqpSimpleValue::Boolean(true), Value::Bool(true)),
        ];
        // Decimals, big-endian BID: 1.5 (15 × 10^-1) and -250 (−25 × 10^1).
        let decimal32 = |negative: u32, exponent: u32, coefficient: u32| {
            (negative << 31 | exponent << 23 | coefficient).to_be_bytes()
        };
        let decimal64 =
            |exponent: u64, coefficient: u64| (exponent << 53 | coefficient).to_be_bytes();
        let cases = cases.into_iter().chain([
            (
                AmqpSimpleValue::Decimal32(decimal32(0, 100, 15)),
                serde_json::json!(1.5),
            ),
            (
                AmqpSimpleValue::Decimal32(decimal32(1, 102, 25)),
                serde_json::json!(-250.0),
            ),
            (
                AmqpSimpleValue::Decimal64(decimal64(396, 12345)),
                serde_json::json!(123.45),
            ),
            (
                AmqpSimpleValue::Decimal128((6174u128 << 113 | 7).to_be_bytes()),
                serde_json::json!(0.07),
            ),
            (
                AmqpSimpleValue::Decimal32((0b0_11110u32 << 26).to_be_bytes()),
                Value::Null,
            ),
        ]);
        for (amqp, json) in cases {
            assert_eq!(application_property(&amqp), json, "{amqp:?}");
        }
        let uuid = "0a0b0c0d-0000-4000-8000-000000000001".parse().unwrap();
        assert_eq!(
            application_property(&AmqpSimpleValue::Uuid(uuid)),
            "0a0b0c0d-0000-4000-8000-000000000001"
        );
    }

    #[test]
    fn system_properties_are_the_properties_section_and_the_other_annotations() {
        let properties = Some(AmqpMessageProperties {
            message_id: Some(AmqpMessageId::String("m-1".into())),
            correlation_id: Some(AmqpMessageId::Ulong(7)),
            content_type: Some(AmqpSymbol("application/json".into())),
            creation_time: Some(at(1_714_564_800_000)),
            ..Default::default()
        });
        let mut annotations = AmqpAnnotations::new();
        annotations.insert(
            AmqpSymbol::from("x-opt-offset"),
            AmqpValue::String("12".into()),
        );
        annotations.insert(
            AmqpSymbol::from("iothub-connection-device-id"),
            AmqpValue::String("dev-1".into()),
        );
        annotations.insert(
            AmqpSymbol::from("iothub-enqueuedtime"),
            AmqpValue::TimeStamp(at(1_714_564_800_500)),
        );
        let message = AmqpMessage {
            properties,
            message_annotations: Some(annotations),
            ..Default::default()
        };
        let system = system_properties(&message);
        assert_eq!(
            Value::Object(system),
            serde_json::json!({
                "message-id": "m-1",
                "correlation-id": "7",
                "content-type": "application/json",
                "creation-time": "2024-05-01T12:00:00+00:00",
                "iothub-connection-device-id": "dev-1",
                "iothub-enqueuedtime": "2024-05-01T12:00:00.5Z",
            })
        );
    }
}

//! One event, two protocols: a Kafka record becomes the AMQP message the hub stores, and a
//! stored message becomes the record a Kafka consumer fetches. The mapping is Event Hubs' own
//! (see docs/kafka.md):
//!
//! - The value is the body: one data section; a fetched body is the data sections' bytes, a
//!   string or binary value's bytes, or any other value AMQP-encoded.
//! - The key is **not** the partition key (Event Hubs does not promote either into the other,
//!   since each protocol hashes keys to partitions its own way): a Kafka key is kept in the
//!   message annotation `x-opt-kafka-key`, and an AMQP partition key reaches Kafka consumers as
//!   the header `x-opt-partition-key`.
//! - Headers are application properties with binary values; an AMQP producer's properties reach
//!   Kafka consumers AMQP-encoded (type information included), except binary values, which are
//!   their bytes — so a Kafka header makes the round trip unchanged.

use bytes::Bytes;
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::message::__private::{Deserializable, Serializable};
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Data, Message, MessageAnnotations,
};
use fe2o3_amqp::types::primitives::{Binary, OrderedMap, SimpleValue, Value};

use crate::AmqpMessage;

/// The message annotation holding a Kafka record's key.
pub const KAFKA_KEY: &str = "x-opt-kafka-key";
/// The Kafka header carrying an AMQP event's partition key.
pub const PARTITION_KEY_HEADER: &str = "x-opt-partition-key";
const PARTITION_KEY: &str = "x-opt-partition-key";

/// What a record carries, protocol aside.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// The AMQP message stored for a produced record.
pub fn to_amqp(event: &Event) -> Vec<u8> {
    let message_annotations = event.key.as_ref().map(|key| {
        let mut map = OrderedMap::new();
        map.insert(
            OwnedKey::from(KAFKA_KEY),
            Value::Binary(Binary::from(key.to_vec())),
        );
        MessageAnnotations(map)
    });
    let application_properties = (!event.headers.is_empty()).then(|| {
        let mut map = OrderedMap::new();
        for (name, value) in &event.headers {
            let value = match value {
                Some(bytes) => SimpleValue::Binary(Binary::from(bytes.to_vec())),
                None => SimpleValue::Null,
            };
            map.insert(name.clone(), value);
        }
        ApplicationProperties(map)
    });
    let body = event.value.as_deref().unwrap_or_default().to_vec();
    let message: AmqpMessage = Message {
        header: None,
        delivery_annotations: None,
        message_annotations,
        properties: None,
        application_properties,
        body: Body::Data(std::iter::once(Data(Binary::from(body))).collect()),
        footer: None,
    };
    serde_amqp::to_vec(&Serializable(&message)).expect("a message of bytes encodes")
}

/// The record a Kafka consumer gets for a stored message; `None` if the bytes are not a message.
pub fn from_amqp(payload: &[u8]) -> Option<Event> {
    let Deserializable(message): Deserializable<AmqpMessage> =
        serde_amqp::from_slice(payload).ok()?;
    let value = match &message.body {
        Body::Data(batch) => batch.iter().flat_map(|d| d.0.iter().copied()).collect(),
        Body::Value(v) => match &v.0 {
            Value::String(s) => s.as_bytes().to_vec(),
            Value::Binary(b) => b.to_vec(),
            other => serde_amqp::to_vec(other).ok()?,
        },
        Body::Sequence(s) => serde_amqp::to_vec(&s).ok()?,
        Body::Empty => Vec::new(),
    };
    let mut event = Event {
        key: None,
        value: Some(Bytes::from(value)),
        headers: Vec::new(),
    };
    if let Some(annotations) = &message.message_annotations {
        for (k, v) in annotations.0.iter() {
            let OwnedKey::Symbol(name) = k else { continue };
            match (name.0.as_str(), v) {
                (KAFKA_KEY, Value::Binary(b)) => event.key = Some(Bytes::from(b.to_vec())),
                (KAFKA_KEY, Value::String(s)) => event.key = Some(Bytes::from(s.clone())),
                (PARTITION_KEY, Value::String(s)) => event
                    .headers
                    .push((PARTITION_KEY_HEADER.into(), Some(Bytes::from(s.clone())))),
                _ => {}
            }
        }
    }
    if let Some(properties) = &message.application_properties {
        for (name, value) in properties.0.iter() {
            let bytes = match value {
                SimpleValue::Null => None,
                SimpleValue::Binary(b) => Some(Bytes::from(b.to_vec())),
                other => Some(Bytes::from(serde_amqp::to_vec(other).ok()?)),
            };
            event.headers.push((name.clone(), bytes));
        }
    }
    Some(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::messaging::AmqpValue;

    #[test]
    fn a_kafka_record_makes_the_round_trip_unchanged() {
        let event = Event {
            key: Some(Bytes::from_static(b"home-42")),
            value: Some(Bytes::from_static(b"{\"kw\":1.5}")),
            headers: vec![
                ("unit".into(), Some(Bytes::from_static(b"kWh"))),
                ("raw".into(), Some(Bytes::from_static(&[0, 1, 2, 255]))),
                ("empty".into(), None),
            ],
        };
        assert_eq!(from_amqp(&to_amqp(&event)), Some(event));
    }

    #[test]
    fn amqp_producers_partition_key_and_typed_properties_reach_kafka_as_headers() {
        let mut annotations = OrderedMap::new();
        annotations.insert(
            OwnedKey::from(PARTITION_KEY),
            Value::String("home-7".into()),
        );
        let mut properties = OrderedMap::new();
        properties.insert("unit".to_string(), SimpleValue::String("kWh".into()));
        properties.insert("count".to_string(), SimpleValue::Int(1234));
        let message: AmqpMessage = Message {
            header: None,
            delivery_annotations: None,
            message_annotations: Some(MessageAnnotations(annotations)),
            properties: None,
            application_properties: Some(ApplicationProperties(properties)),
            body: Body::Value(AmqpValue(Value::String("hello".into()))),
            footer: None,
        };
        let event = from_amqp(&serde_amqp::to_vec(&Serializable(&message)).unwrap()).unwrap();
        assert_eq!(event.key, None, "the partition key is not the Kafka key");
        assert_eq!(event.value.as_deref(), Some(&b"hello"[..]));
        assert_eq!(
            event.headers,
            vec![
                (
                    PARTITION_KEY_HEADER.into(),
                    Some(Bytes::from_static(b"home-7"))
                ),
                // AMQP str8-utf8 (0xa1), length, bytes; int (0x71), big-endian.
                ("unit".into(), Some(Bytes::from_static(b"\xa1\x03kWh"))),
                (
                    "count".into(),
                    Some(Bytes::from_static(&[0x71, 0, 0, 0x04, 0xd2]))
                ),
            ]
        );
    }

    #[test]
    fn bytes_that_are_not_a_message_are_none() {
        assert_eq!(from_amqp(b"\xff\x01"), None);
        assert_eq!(from_amqp(b"\x00\x53\x75\xb0\xff\xff\xff\xff"), None);
    }
}

//! The bytes of the message a consumer receives, built from a stored event without decoding it.
//!
//! A consumer gets each event as it was sent plus three annotations the service stamps
//! (`x-opt-sequence-number`, `x-opt-offset`, `x-opt-enqueued-time`). Decoding every stored message
//! into typed sections and encoding it again cost the hub nearly half of its CPU while streaming
//! events; here the stored sections are copied byte for byte and only the message-annotations
//! section is written anew: its stored entries followed by the three stamps. Anything unusual
//! (a section described by a symbol, a stamp the producer already set, bytes that do not parse)
//! returns `None`, and the caller takes the typed path (`links::to_received`), which handles every
//! message fe2o3 can decode.
//!
//! A receiver that asked for the partition's runtime metric (`RUNTIME_METRIC` among its link's
//! desired capabilities: the SDKs' "track last enqueued event properties") also gets, in each
//! delivery's delivery-annotations section, the partition's newest event at the time of the
//! delivery and when that was looked up (`LastEnqueued`), as Event Hubs sends them.

use super::encoding::{self, CompoundKind, value_len};

/// Section descriptors (AMQP 1.0 §3.2), in the order a message carries them: header (0x70),
/// delivery annotations (0x71), message annotations, then the bare message up to the footer (0x78).
const HEADER: u8 = 0x70;
const DELIVERY_ANNOTATIONS: u8 = 0x71;
const MESSAGE_ANNOTATIONS: u8 = 0x72;
const DATA: u8 = 0x75;
const SEQUENCE: u8 = 0x76;
const VALUE: u8 = 0x77;
const FOOTER: u8 = 0x78;

pub const SEQUENCE_NUMBER: &str = "x-opt-sequence-number";
pub const OFFSET: &str = "x-opt-offset";
pub const ENQUEUED_TIME: &str = "x-opt-enqueued-time";

/// The link capability a receiver desires to get `LastEnqueued` with every delivery.
pub const RUNTIME_METRIC: &str = "com.microsoft:enable-receiver-runtime-metric";
pub const LAST_ENQUEUED_SEQUENCE_NUMBER: &str = "last_enqueued_sequence_number";
pub const LAST_ENQUEUED_OFFSET: &str = "last_enqueued_offset";
pub const LAST_ENQUEUED_TIME: &str = "last_enqueued_time_utc";
pub const RETRIEVAL_TIME: &str = "runtime_info_retrieval_time_utc";

/// A partition's newest event when a delivery was made, and when that was looked up: what a
/// receiver tracking the last enqueued event's properties gets with each delivery. For an empty
/// partition, Event Hubs' values for "none": sequence number and offset -1, time 0.
/// It is encoded once, when made: every delivery of a chunk read carries the same one.
#[derive(Debug, Clone)]
pub struct LastEnqueued {
    pub sequence: i64,
    pub offset: i64,
    pub enqueued_ms: i64,
    pub retrieved_ms: i64,
    /// The delivery-annotations section carrying it (`None` if it could not be encoded).
    section: Option<Vec<u8>>,
}

impl LastEnqueued {
    pub fn new(sequence: i64, offset: i64, enqueued_ms: i64, retrieved_ms: i64) -> Self {
        let mut last = LastEnqueued {
            sequence,
            offset,
            enqueued_ms,
            retrieved_ms,
            section: None,
        };
        last.section = last.encode();
        last
    }

    /// The delivery-annotations section carrying it: symbol keys, a long, the offset as a
    /// string, and two timestamps.
    fn encode(&self) -> Option<Vec<u8>> {
        let mut entries = Vec::with_capacity(160);
        symbol(&mut entries, LAST_ENQUEUED_SEQUENCE_NUMBER);
        entries.push(0x81);
        entries.extend_from_slice(&self.sequence.to_be_bytes());
        symbol(&mut entries, LAST_ENQUEUED_OFFSET);
        string(&mut entries, &self.offset.to_string());
        symbol(&mut entries, LAST_ENQUEUED_TIME);
        entries.push(0x83);
        entries.extend_from_slice(&self.enqueued_ms.to_be_bytes());
        symbol(&mut entries, RETRIEVAL_TIME);
        entries.push(0x83);
        entries.extend_from_slice(&self.retrieved_ms.to_be_bytes());
        let mut section = vec![0x00, 0x53, DELIVERY_ANNOTATIONS];
        encoding::write_compound_header(&mut section, CompoundKind::Map, 8, entries.len())?;
        section.extend_from_slice(&entries);
        Some(section)
    }
}

/// The stored message `payload` as a consumer receives it, stamped with its sequence number,
/// offset and enqueued time, and with `last` in its delivery annotations when the receiver
/// asked for it; `None` when the bytes are not a message this fast path handles.
pub fn received_bytes(
    payload: &[u8],
    sequence: i64,
    offset: i64,
    enqueued_ms: i64,
    last: Option<&LastEnqueued>,
) -> Option<Vec<u8>> {
    let stamps = stamps(sequence, offset, enqueued_ms);
    let mut delivery_annotations: Option<&[u8]> = match last {
        Some(last) => Some(last.section.as_deref()?),
        None => None,
    };
    let mut out = Vec::with_capacity(payload.len() + stamps.len() + 16);
    let mut stamped = false;
    let mut previous: Option<u8> = None;
    let mut at = 0;
    while at < payload.len() {
        let rest = &payload[at..];
        let len = value_len(rest)?;
        let (code, value_at) = section(rest)?;
        // Sections in the order the spec gives, each once, except that a body may be several
        // data or several sequence sections (never a mix, never two values). Anything else is
        // left to the typed path, whose decoder picks one reading; splicing would hand the
        // consumer another (found by the received_message fuzz target).
        if let Some(before) = previous
            && (code < before || (code == before && !matches!(code, DATA | SEQUENCE)))
        {
            return None;
        }
        if matches!(previous, Some(DATA | SEQUENCE | VALUE))
            && matches!(code, DATA | SEQUENCE | VALUE)
            && previous != Some(code)
        {
            return None;
        }
        previous = Some(code);
        if code >= DELIVERY_ANNOTATIONS
            && let Some(section) = delivery_annotations.take()
        {
            if code == DELIVERY_ANNOTATIONS {
                // The producer's own delivery annotations: the typed path merges them with
                // `last`'s.
                return None;
            }
            out.extend_from_slice(section);
        }
        if !stamped && code >= MESSAGE_ANNOTATIONS {
            let stored = if code == MESSAGE_ANNOTATIONS {
                Some(map_items(&rest[value_at..len])?)
            } else {
                None
            };
            write_annotations(&mut out, stored, &stamps)?;
            stamped = true;
            if code == MESSAGE_ANNOTATIONS {
                at += len;
                continue;
            }
        } else if stamped && code <= MESSAGE_ANNOTATIONS {
            // A second annotations section, or one out of order: not for the fast path.
            return None;
        }
        out.extend_from_slice(&rest[..len]);
        at += len;
    }
    if !stamped {
        // A message without a body section (header or annotations only).
        if let Some(section) = delivery_annotations.take() {
            out.extend_from_slice(section);
        }
        write_annotations(&mut out, None, &stamps)?;
    }
    Some(out)
}

/// The three stamps as encoded map entries: symbol keys, a long, a string and a timestamp.
fn stamps(sequence: i64, offset: i64, enqueued_ms: i64) -> Vec<u8> {
    let mut entries = Vec::with_capacity(96);
    symbol(&mut entries, SEQUENCE_NUMBER);
    entries.push(0x81);
    entries.extend_from_slice(&sequence.to_be_bytes());
    symbol(&mut entries, OFFSET);
    string(&mut entries, &offset.to_string());
    symbol(&mut entries, ENQUEUED_TIME);
    entries.push(0x83);
    entries.extend_from_slice(&enqueued_ms.to_be_bytes());
    entries
}

/// A short string (a number's digits: always under 256 bytes).
fn string(out: &mut Vec<u8>, text: &str) {
    out.push(0xa1);
    out.push(text.len() as u8);
    out.extend_from_slice(text.as_bytes());
}

fn symbol(out: &mut Vec<u8>, name: &str) {
    out.push(0xa3);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
}

/// The stored annotations: how many entries (keys plus values) and their encoded bytes.
struct MapItems<'a> {
    count: usize,
    items: &'a [u8],
}

/// The entries of an encoded map, refusing one that already has a stamp (the typed path
/// overwrites it, as the service does).
fn map_items(map: &[u8]) -> Option<MapItems<'_>> {
    let map = encoding::compound(map)?;
    if map.kind != CompoundKind::Map || !map.rest.is_empty() {
        return None;
    }
    let mut at = 0;
    for index in 0..map.count {
        let len = value_len(&map.items[at..])?;
        if index % 2 == 0 {
            let key = &map.items[at..at + len];
            let name = match key[0] {
                0xa3 => &key[2..],
                0xb3 => &key[5..],
                _ => &[][..], // a ulong key: not one of the stamps
            };
            if [SEQUENCE_NUMBER, OFFSET, ENQUEUED_TIME]
                .iter()
                .any(|s| name == s.as_bytes())
            {
                return None;
            }
        }
        at += len;
    }
    (at == map.items.len()).then_some(MapItems {
        count: map.count,
        items: map.items,
    })
}

/// A message-annotations section: the stored entries, then the stamps.
fn write_annotations(out: &mut Vec<u8>, stored: Option<MapItems>, stamps: &[u8]) -> Option<()> {
    let (count, items) = stored.map_or((0, &[][..]), |s| (s.count, s.items));
    out.extend_from_slice(&[0x00, 0x53, MESSAGE_ANNOTATIONS]);
    encoding::write_compound_header(
        out,
        CompoundKind::Map,
        count + 6,
        items.len() + stamps.len(),
    )?;
    out.extend_from_slice(items);
    out.extend_from_slice(stamps);
    Some(())
}

/// The section at the start of `bytes`: its descriptor code, which must name a message section,
/// and where its value starts.
fn section(bytes: &[u8]) -> Option<(u8, usize)> {
    let (code, value_at) = encoding::descriptor(bytes)?;
    let code = u8::try_from(code).ok()?;
    (HEADER..=FOOTER)
        .contains(&code)
        .then_some((code, value_at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AmqpMessage;
    use crate::links::to_received;
    use crate::log::StoredEvent;
    use bytes::Bytes;
    use fe2o3_amqp::types::messaging::message::__private::{Deserializable, Serializable};
    use fe2o3_amqp::types::messaging::{
        AmqpValue, ApplicationProperties, Body, DeliveryAnnotations, Footer, Header,
        MessageAnnotations, Properties,
    };
    use fe2o3_amqp::types::primitives::{Binary, Value};

    fn encode(message: &AmqpMessage) -> Vec<u8> {
        serde_amqp::to_vec(&Serializable(message)).unwrap()
    }

    fn decode(bytes: &[u8]) -> AmqpMessage {
        let decoded: Deserializable<AmqpMessage> = serde_amqp::from_slice(bytes).unwrap();
        decoded.0
    }

    fn stored(message: &AmqpMessage) -> StoredEvent {
        StoredEvent {
            sequence: 4_000_000_123,
            offset: 98_765_432_100,
            enqueued_ms: 1_763_900_000_123,
            payload: Bytes::from(encode(message)),
        }
    }

    fn annotations(entries: &[(&str, Value)]) -> MessageAnnotations {
        let mut map = MessageAnnotations::default();
        for (k, v) in entries {
            map.0.insert((*k).into(), v.clone());
        }
        map
    }

    fn message(body: Body<Value>) -> AmqpMessage {
        AmqpMessage {
            header: None,
            delivery_annotations: None,
            message_annotations: None,
            properties: None,
            application_properties: None,
            body,
            footer: None,
        }
    }

    /// Every shape of message a producer may send, each with a different mix of sections.
    fn shapes() -> Vec<AmqpMessage> {
        let data = || Body::Data(vec![Binary::from(b"{\"home\":7}".to_vec()).into()].into());
        let mut shapes = vec![message(data()), message(Body::Empty)];
        let mut sdk = message(data());
        sdk.properties = Some(
            Properties::builder()
                .message_id(String::from("id-1"))
                .content_type("application/json")
                .build(),
        );
        sdk.application_properties = Some(
            ApplicationProperties::builder()
                .insert("source", "hubhost-simulator")
                .insert("count", 3i64)
                .build(),
        );
        shapes.push(sdk.clone());
        let mut keyed = sdk.clone();
        keyed.message_annotations = Some(annotations(&[(
            "x-opt-partition-key",
            Value::String("home-42".into()),
        )]));
        shapes.push(keyed.clone());
        let mut everything = keyed.clone();
        everything.header = Some(Header {
            durable: true,
            priority: 4.into(),
            ttl: Some(60_000),
            first_acquirer: false,
            delivery_count: 0,
        });
        let mut delivery = DeliveryAnnotations::default();
        delivery.0.insert("x-opt-lock".into(), Value::Long(1));
        everything.delivery_annotations = Some(delivery);
        let mut footer = Footer::default();
        footer.0.insert("x-opt-crc".into(), Value::Uint(7));
        everything.footer = Some(footer);
        shapes.push(everything);
        let mut value_body = message(Body::Value(AmqpValue(Value::String("plain".into()))));
        value_body.header = Some(Header::default());
        shapes.push(value_body);
        let mut big_annotations = keyed.clone();
        big_annotations.message_annotations = Some(annotations(&[
            ("x-opt-partition-key", Value::String("k".repeat(300))),
            (
                "x-opt-custom",
                Value::Binary(Binary::from(vec![9u8; 70_000])),
            ),
        ]));
        shapes.push(big_annotations);
        shapes
    }

    #[test]
    fn splicing_gives_the_message_the_typed_path_gives() {
        for shape in shapes() {
            let event = stored(&shape);
            let spliced = received_bytes(
                &event.payload,
                event.sequence,
                event.offset,
                event.enqueued_ms,
                None,
            )
            .unwrap_or_else(|| panic!("the fast path refused {shape:?}"));
            assert_eq!(
                decode(&spliced),
                to_received(&event, None).unwrap(),
                "{shape:?}"
            );
            // The stored sections are kept byte for byte, around the annotations.
            let body = encode(&message(shape.body.clone()));
            assert!(spliced.ends_with(&body) || shape.footer.is_some());
        }
    }

    #[test]
    fn a_section_with_a_full_ulong_descriptor_is_spliced_too() {
        let keyed = encode(&shapes()[3]);
        let at = keyed
            .windows(3)
            .position(|w| w == [0x00, 0x53, MESSAGE_ANNOTATIONS])
            .unwrap();
        let mut full = keyed[..at].to_vec();
        full.extend_from_slice(&[0x00, 0x80]);
        full.extend_from_slice(&(MESSAGE_ANNOTATIONS as u64).to_be_bytes());
        full.extend_from_slice(&keyed[at + 3..]);
        let event = StoredEvent {
            payload: Bytes::from(full),
            ..stored(&shapes()[3])
        };
        let spliced = received_bytes(
            &event.payload,
            event.sequence,
            event.offset,
            event.enqueued_ms,
            None,
        )
        .expect("the fast path takes it");
        assert_eq!(decode(&spliced), to_received(&event, None).unwrap());
    }

    #[test]
    fn a_producer_set_stamp_or_odd_bytes_take_the_typed_path() {
        let mut stamped = message(Body::Empty);
        stamped.message_annotations = Some(annotations(&[(OFFSET, Value::String("1".into()))]));
        let event = stored(&stamped);
        assert_eq!(received_bytes(&event.payload, 1, 2, 3, None), None);
        // The typed path overwrites the producer's stamp with the hub's.
        let typed = to_received(&event, None).unwrap();
        let offset = typed
            .message_annotations
            .unwrap()
            .0
            .get(&OFFSET as &dyn fe2o3_amqp::types::messaging::annotations::AnnotationKey)
            .cloned();
        assert_eq!(offset, Some(Value::String(event.offset.to_string())));

        // The same stamp with its key written as a 32-bit symbol.
        let mut sym32 = vec![0x00, 0x53, MESSAGE_ANNOTATIONS, 0xc1, 0, 2];
        sym32.push(0xb3);
        sym32.extend_from_slice(&(OFFSET.len() as u32).to_be_bytes());
        sym32.extend_from_slice(OFFSET.as_bytes());
        sym32.extend_from_slice(&[0xa1, 1, b'1']);
        sym32[4] = (sym32.len() - 5) as u8;
        assert_eq!(
            received_bytes(&sym32, 1, 2, 3, None),
            None,
            "32-bit symbol key"
        );

        let good = encode(&shapes()[2]);
        assert_eq!(
            received_bytes(&good[..good.len() - 1], 1, 2, 3, None),
            None,
            "truncated"
        );
        assert_eq!(
            received_bytes(&[0x00, 0xa3, 0x01, b'x', 0x40], 1, 2, 3, None),
            None,
            "symbol descriptor"
        );
        assert_eq!(
            received_bytes(&[0x41, 0x41], 1, 2, 3, None),
            None,
            "not a section"
        );
        let mut twice = good.clone();
        twice.extend_from_slice(&encode(&shapes()[3])); // annotations after a body
        assert_eq!(received_bytes(&twice, 1, 2, 3, None), None);
        assert_eq!(
            received_bytes(&[0x00; 64], 1, 2, 3, None),
            None,
            "nested descriptors"
        );
    }

    #[test]
    fn a_receiver_tracking_the_last_enqueued_event_gets_it_in_the_delivery_annotations() {
        use fe2o3_amqp::types::messaging::annotations::AnnotationKey;
        use fe2o3_amqp::types::primitives::Timestamp;
        let last = LastEnqueued::new(
            4_000_000_999,
            98_765_999_000,
            1_763_900_100_000,
            1_763_900_100_500,
        );
        for shape in shapes() {
            let event = stored(&shape);
            let typed = to_received(&event, Some(&last)).unwrap();
            let annotations = typed.delivery_annotations.clone().unwrap().0;
            let get = |key: &str| annotations.get(&key as &dyn AnnotationKey).cloned();
            // The producer's own delivery annotations are kept beside the four.
            let sent = shape.delivery_annotations.clone().unwrap_or_default().0;
            assert_eq!(annotations.len(), 4 + sent.len(), "{shape:?}");
            for (key, value) in &sent {
                assert_eq!(annotations.get(key), Some(value), "{shape:?}");
            }
            assert_eq!(
                get(LAST_ENQUEUED_SEQUENCE_NUMBER),
                Some(Value::Long(last.sequence))
            );
            assert_eq!(
                get(LAST_ENQUEUED_OFFSET),
                Some(Value::String(last.offset.to_string()))
            );
            assert_eq!(
                get(LAST_ENQUEUED_TIME),
                Some(Value::Timestamp(Timestamp::from_milliseconds(
                    last.enqueued_ms
                )))
            );
            assert_eq!(
                get(RETRIEVAL_TIME),
                Some(Value::Timestamp(Timestamp::from_milliseconds(
                    last.retrieved_ms
                )))
            );
            match received_bytes(
                &event.payload,
                event.sequence,
                event.offset,
                event.enqueued_ms,
                Some(&last),
            ) {
                Some(spliced) => assert_eq!(decode(&spliced), typed, "{shape:?}"),
                // Only a message that carries its producer's delivery annotations is left to
                // the typed path, which merges them.
                None => assert!(shape.delivery_annotations.is_some(), "refused {shape:?}"),
            }
            // Without the capability nothing is added.
            assert_eq!(
                to_received(&event, None).unwrap().delivery_annotations,
                shape.delivery_annotations
            );
        }
    }
}

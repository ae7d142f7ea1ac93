//! Entry points for the fuzz targets (crates/fuzz-targets) into the hub's internal parsers,
//! which nothing else outside this crate may call. Not part of the hub's API.

use bytes::Bytes;
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::message::__private::{Deserializable, Serializable};
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Body, Data, Header, Message, MessageAnnotations,
};
use fe2o3_amqp::types::primitives::{Binary, OrderedMap, SimpleValue, Value};

use crate::log::StoredEvent;
use crate::requests::AmqpMessage;

/// The stored message `payload` as a consumer receives it, both ways: for every payload the
/// hub can store (one that decodes), the fast path that splices bytes (`received`) must give
/// exactly the message of the typed path that decodes and encodes (`links::to_received`), or
/// leave the message to it; both for a receiver that tracks the partition's last enqueued event
/// and for one that does not. Panics when they disagree.
pub fn received_paths_agree(payload: &[u8], sequence: i64, offset: i64, enqueued_ms: i64) {
    let event = StoredEvent {
        sequence,
        offset,
        enqueued_ms,
        payload: Bytes::copy_from_slice(payload),
    };
    // Only messages that decode are ever stored: a producer's delivery (and every event of a
    // batch) is decoded before it is appended. Bytes that do not decode never reach either path.
    let last = crate::received::LastEnqueued::new(
        sequence.wrapping_add(7),
        offset.wrapping_add(1000),
        enqueued_ms.wrapping_add(5),
        enqueued_ms.wrapping_add(9),
    );
    for last in [None, Some(&last)] {
        let Some(typed) = crate::links::to_received(&event, last) else {
            return;
        };
        let Some(fast) =
            crate::received::received_bytes(payload, sequence, offset, enqueued_ms, last)
        else {
            continue;
        };
        let decoded: Deserializable<AmqpMessage> = serde_amqp::from_slice(&fast)
            .unwrap_or_else(|e| panic!("the fast path's bytes do not decode ({e}): {fast:02x?}"));
        assert_eq!(decoded.0, typed, "the two paths disagree on {payload:02x?}");
    }
}

/// An encoded AMQP message made from `data`: its body (data or a string value), application
/// properties, message annotations and header chosen by the bytes, so that a fuzzer's bytes
/// become messages producers could send.
pub fn message_from(data: &[u8]) -> Vec<u8> {
    let (shape, rest) = data.split_first().unwrap_or((&0, &[]));
    let body: Body<Value> = if shape & 1 == 0 {
        Body::Data(std::iter::once(Data(Binary::from(rest.to_vec()))).collect())
    } else {
        Body::Value(AmqpValue(Value::String(
            String::from_utf8_lossy(rest).into_owned(),
        )))
    };
    let mut message: AmqpMessage = Message {
        header: None,
        delivery_annotations: None,
        message_annotations: None,
        properties: None,
        application_properties: None,
        body,
        footer: None,
    };
    if shape & 2 != 0 {
        let mut properties = OrderedMap::new();
        for (i, chunk) in rest.chunks(7).take(6).enumerate() {
            properties.insert(
                format!("p{i}"),
                SimpleValue::String(String::from_utf8_lossy(chunk).into_owned()),
            );
        }
        message.application_properties = Some(ApplicationProperties(properties));
    }
    if shape & 4 != 0 {
        let mut annotations = OrderedMap::new();
        annotations.insert(
            OwnedKey::from("x-opt-partition-key"),
            Value::String(format!("home-{}", rest.len())),
        );
        if shape & 16 != 0 {
            // A stamp the producer set itself: the fast path must leave such a message alone.
            annotations.insert(
                OwnedKey::from(crate::received::SEQUENCE_NUMBER),
                Value::Long(-7),
            );
        }
        message.message_annotations = Some(MessageAnnotations(annotations));
    }
    if shape & 8 != 0 {
        message.header = Some(Header {
            durable: true,
            ..Header::default()
        });
    }
    serde_amqp::to_vec(&Serializable(message)).expect("a message encodes")
}

/// The input guard reads a connection's bytes as they arrive: fed `input` in two pieces (cut at
/// `cut`), as a socket may deliver it, it must admit exactly what it admits of the whole, or
/// refuse it for the same reason; and what it admits is whole frames within the input.
pub fn frame_guard_agrees(input: &[u8], cut: usize) {
    use crate::inbound::FrameGuard;
    let guard = || FrameGuard::new(4096, 8192);
    let whole = guard().admit(input);
    if let Ok(n) = whole {
        assert!(n <= input.len(), "admitted {n} of {} bytes", input.len());
    }
    let cut = cut % (input.len() + 1);
    let mut stepwise = guard();
    let pieces = stepwise
        .admit(&input[..cut])
        .and_then(|first| stepwise.admit(&input[first..]).map(|second| first + second));
    assert_eq!(pieces, whole, "cut at {cut}: {input:02x?}");
}

/// A Kafka request frame (without its size prefix), any bytes: the frame checks, the array guard
/// and the decoder answer or refuse, never panic, and never reserve memory from a count the
/// bytes cannot hold (a run under a memory limit catches one that does).
pub fn kafka_request(frame: &[u8]) {
    let _ = crate::kafka::decode(Bytes::copy_from_slice(frame));
}

/// A produce request's record batches, any bytes: decoded or refused, never a panic; what
/// decodes is fetched back (encoded as the hub returns it) with the same keys, values and
/// headers.
pub fn kafka_record_batches(records: &[u8]) {
    use crate::kafka::batch;
    let Ok(batches) = batch::decode(Bytes::copy_from_slice(records)) else {
        return;
    };
    let events: Vec<_> = batches.into_iter().flat_map(|b| b.events).collect();
    if events.is_empty() {
        return;
    }
    let fetched: Vec<batch::Fetched> = events
        .iter()
        .enumerate()
        .map(|(i, event)| batch::Fetched {
            sequence: i as i64,
            enqueued_ms: 0,
            event: event.clone(),
        })
        .collect();
    let again = batch::decode(batch::encode(&fetched)).expect("what the hub encodes decodes");
    let round: Vec<_> = again.into_iter().flat_map(|b| b.events).collect();
    assert_eq!(
        round, events,
        "a fetched batch differs from the produced one"
    );
}

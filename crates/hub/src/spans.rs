//! The hub's own spans, when `HubConfig::traces` asks for them (`hubhost hub --traces`) and
//! something exports them: `enqueue <hub>` for each send the hub accepts and `deliver <hub>`
//! for each chunk of events a receiver link is sent. Each links to the producer contexts its
//! events carry (`Diagnostic-Id`, `traceparent`) and continues their trace when all share one,
//! so a local run shows where an event waited between its producer and its consumer.
//!
//! Event Hubs itself gives a client no spans of its own; these are the hub's, named for what
//! it did. Reading an event's context decodes the event, so none of this runs unless asked.

use bytes::Bytes;
use hubhost_telemetry::trace_context::{Producers, TraceParent};
use tracing::Span;
use tracing::field::Empty;

use super::log::StoredEvent;

/// Whether a hub asked to trace builds its spans now: only while an exporter is installed.
pub fn active(traces: bool) -> bool {
    traces && hubhost_telemetry::exporting_traces()
}

/// The span of one accepted send to `hub`'s partition: its events' producers, and the
/// sequence numbers they were given (recorded by [`placed`]).
pub fn enqueue(hub: &str, partition: &str, payloads: &[Bytes]) -> Span {
    let producers = Producers::of_contexts(payloads.iter().map(|p| trace_context(p)));
    let span = tracing::info_span!(
        "enqueue",
        "otel.name" = format!("enqueue {hub}"),
        "otel.kind" = "server",
        "otel.status_code" = Empty,
        "messaging.system" = "eventhubs",
        "messaging.operation.name" = "enqueue",
        "messaging.destination.name" = hub,
        "messaging.destination.partition.id" = partition,
        "messaging.batch.message_count" = payloads.len() as i64,
        "hubhost.sequence_number.first" = Empty,
        "hubhost.sequence_number.last" = Empty,
    );
    hubhost_telemetry::connect(&span, producers.common_parent, &producers.links);
    span
}

/// Records the sequence numbers a send's events were given (first and last).
pub fn placed(span: &Span, placed: &[(i64, i64)]) {
    if let (Some(first), Some(last)) = (placed.first(), placed.last()) {
        span.record("hubhost.sequence_number.first", first.0);
        span.record("hubhost.sequence_number.last", last.0);
    }
}

/// The span of one chunk of `events` sent to a receiver of `consumer_group`.
pub fn deliver(hub: &str, consumer_group: &str, partition: &str, events: &[StoredEvent]) -> Span {
    let producers = Producers::of_contexts(events.iter().map(|e| trace_context(&e.payload)));
    let span = tracing::info_span!(
        "deliver",
        "otel.name" = format!("deliver {hub}"),
        "otel.kind" = "server",
        "messaging.system" = "eventhubs",
        "messaging.operation.name" = "deliver",
        "messaging.destination.name" = hub,
        "messaging.consumer.group.name" = consumer_group,
        "messaging.destination.partition.id" = partition,
        "messaging.batch.message_count" = events.len() as i64,
        "hubhost.sequence_number.first" = events.first().map(|e| e.sequence),
        "hubhost.sequence_number.last" = events.last().map(|e| e.sequence),
    );
    hubhost_telemetry::connect(&span, producers.common_parent, &producers.links);
    span
}

/// The producer context an encoded event carries in its application properties, if any.
pub fn trace_context(payload: &[u8]) -> Option<TraceParent> {
    let message = super::encoding::decode_message(payload).ok()?;
    let properties = message.application_properties?;
    TraceParent::of_properties(properties.0.iter().map(|(key, value)| {
        let text = match value {
            fe2o3_amqp::types::primitives::SimpleValue::String(text) => Some(text.as_str()),
            _ => None,
        };
        (key.as_str(), text)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::messaging::message::__private::Serializable;
    use fe2o3_amqp::types::messaging::{ApplicationProperties, Message};
    use fe2o3_amqp::types::primitives::SimpleValue;

    const STAMP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn encoded(properties: &[(&str, SimpleValue)]) -> Vec<u8> {
        let mut builder = ApplicationProperties::builder();
        for (name, value) in properties {
            builder = builder.insert(*name, value.clone());
        }
        let message = Message::builder()
            .application_properties(builder.build())
            .data(Binary::from(b"{}".to_vec()))
            .build();
        serde_amqp::to_vec(&Serializable(message)).unwrap()
    }

    use fe2o3_amqp::types::primitives::Binary;

    #[test]
    fn reads_the_producer_context_from_an_encoded_event() {
        let stamped = encoded(&[("Diagnostic-Id", SimpleValue::String(STAMP.into()))]);
        assert_eq!(trace_context(&stamped).unwrap().to_string(), STAMP);
        let w3c = encoded(&[("traceparent", SimpleValue::String(STAMP.into()))]);
        assert_eq!(trace_context(&w3c).unwrap().to_string(), STAMP);
        // Not a string, not a context, no properties, not a message: none.
        assert_eq!(
            trace_context(&encoded(&[("Diagnostic-Id", SimpleValue::Int(7))])),
            None
        );
        assert_eq!(
            trace_context(&encoded(&[(
                "Diagnostic-Id",
                SimpleValue::String("|abc.1.".into())
            )])),
            None
        );
        assert_eq!(trace_context(&encoded(&[])), None);
        assert_eq!(trace_context(b"\x00\x53"), None);
    }

    #[test]
    fn builds_nothing_unless_asked_and_exporting() {
        assert!(!active(false));
        // No exporter is installed in unit tests.
        assert!(!active(true));
    }
}

//! The two kinds of entity links: a producer's link, whose messages are appended to a partition
//! and accepted only once written; and a consumer's link on
//! `{hub}/ConsumerGroups/{group}/Partitions/{id}`, which streams a partition's events from the
//! filter's start, within the credit the client grants, until the client detaches or a newer
//! owner (higher owner level) steals the partition.

use std::sync::Arc;

use bytes::Bytes;
use fe2o3_amqp::link::delivery::Delivery;
use fe2o3_amqp::link::delivery::Sendable;
use fe2o3_amqp::link::{Receiver, Sender};
use fe2o3_amqp::types::definitions::{self, AmqpError, LinkError};
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::message::__private::Serializable;
use fe2o3_amqp::types::messaging::{Body, DeliveryAnnotations, Message, MessageAnnotations};
use fe2o3_amqp::types::primitives::{Binary, Timestamp, Value};

use super::filter::StartFilter;
use super::log::{Seek, StoredEvent};
use super::received::{self, LastEnqueued};
use super::spans;
use super::wire::PRE_ENCODED;
use super::{Hub, MAX_MESSAGE_BYTES, Partition, ReceiverLease};
use crate::AmqpMessage;

/// The message format of a batch: its body is Data sections, each one encoded message.
pub const BATCH_FORMAT: u32 = 0x8001_3700;
const PARTITION_KEY: &str = "x-opt-partition-key";
const READ_CHUNK: usize = 256;

/// What a link address names, with the scheme and host stripped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// `$cbs` or `$management`.
    Node(String),
    /// `{hub}` or `{hub}/Partitions/{id}`: where producers send.
    Send {
        hub: String,
        partition: Option<String>,
    },
    /// `{hub}/ConsumerGroups/{group}/Partitions/{id}`: where consumers read.
    Receive {
        hub: String,
        consumer_group: String,
        partition: String,
    },
}

pub fn parse_address(address: &str) -> Option<Address> {
    let path = match address.split_once("://") {
        Some((_, rest)) => rest.split_once('/').map(|(_, p)| p).unwrap_or(""),
        None => address,
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let is = |part: &str, word: &str| part.eq_ignore_ascii_case(word);
    match parts.as_slice() {
        [node] if node.starts_with('$') => Some(Address::Node(node.to_ascii_lowercase())),
        [hub] if !hub.is_empty() => Some(Address::Send {
            hub: hub.to_string(),
            partition: None,
        }),
        [hub, p, id] if is(p, "Partitions") => Some(Address::Send {
            hub: hub.to_string(),
            partition: Some(id.to_string()),
        }),
        [hub, c, group, p, id] if is(c, "ConsumerGroups") && is(p, "Partitions") => {
            Some(Address::Receive {
                hub: hub.to_string(),
                consumer_group: group.to_string(),
                partition: id.to_string(),
            })
        }
        _ => None,
    }
}

/// Serves a producer's link: every delivery is unpacked (a batch into its events), appended to
/// its partition, and only then accepted — so an acknowledged send is in the log.
pub async fn ingest(
    mut receiver: Receiver,
    hub: Arc<Hub>,
    partition: Option<Arc<Partition>>,
    traces: bool,
) {
    loop {
        let delivery: Delivery<Body<Value>> = match receiver.recv().await {
            Ok(d) => d,
            // Answered, as the service does, so the sender does not wait for it forever.
            Err(fe2o3_amqp::link::RecvError::MessageDecode(e)) => {
                tracing::info!(error = %e.source, "a sent message could not be decoded");
                let error = definitions::Error::new(
                    AmqpError::DecodeError,
                    format!("the message is not an AMQP message: {}", e.source),
                    None,
                );
                if receiver.reject(e.info, error).await.is_err() {
                    break;
                }
                continue;
            }
            // fe2o3 has already detached the link with amqp:link:message-size-exceeded, which
            // is what the service does with a message over the limit it advertised.
            Err(fe2o3_amqp::link::RecvError::MessageSizeExceeded(e)) => {
                tracing::warn!(
                    size = e.size,
                    limit = e.max_size,
                    "refused a sent message larger than the limit (amqp:link:message-size-exceeded)"
                );
                break;
            }
            Err(e) => {
                tracing::debug!(error = %e, "producer link ended");
                break;
            }
        };
        let format = delivery.message_format().unwrap_or(0);
        let mut span = tracing::Span::none();
        let outcome = unpack(format, delivery.message()).and_then(|(key, payloads)| {
            let target = partition
                .clone()
                .unwrap_or_else(|| hub.route(key.as_deref()).clone());
            let count = payloads.len();
            if spans::active(traces) {
                span = spans::enqueue(&hub.name, &target.id, &payloads);
            }
            target
                .append(payloads)
                .inspect(|placed| spans::placed(&span, placed))
                .map(|placed| (target.id.clone(), count, placed))
                .map_err(|e| {
                    tracing::error!(error = %e, "append failed");
                    definitions::Error::new(
                        AmqpError::InternalError,
                        format!("the event could not be stored: {e}"),
                        None,
                    )
                })
        });
        // The span (when traced) covers the append and the answer; it ends with this pass.
        let result = match outcome {
            Ok((partition_id, count, placed)) => {
                if let (Some(first), Some(last)) = (placed.first(), placed.last()) {
                    tracing::trace!(
                        hub = %hub.name,
                        partition = %partition_id,
                        events = count,
                        sequence_from = first.0,
                        sequence_to = last.0,
                        "appended"
                    );
                }
                receiver.accept(&delivery).await
            }
            Err(error) => {
                span.record("otel.status_code", "ERROR");
                receiver.reject(&delivery, error).await
            }
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "could not settle a send");
            break;
        }
    }
    let _ = receiver.close().await;
}

/// Splits a sent message into stored events: a batch into its inner messages (each given the
/// batch's partition key, as the service does), anything else as one event.
fn unpack(
    format: u32,
    message: &AmqpMessage,
) -> Result<(Option<String>, Vec<Bytes>), definitions::Error> {
    let key = partition_key(message);
    let mut payloads = Vec::new();
    if format == BATCH_FORMAT {
        let Body::Data(sections) = &message.body else {
            return Err(definitions::Error::new(
                AmqpError::DecodeError,
                "a batch message must carry its events as Data sections".to_string(),
                None,
            ));
        };
        for section in sections.iter() {
            let mut inner = super::encoding::decode_message(&section.0).map_err(|e| {
                definitions::Error::new(
                    AmqpError::DecodeError,
                    format!("an event in the batch is not an AMQP message: {e}"),
                    None,
                )
            })?;
            if let Some(key) = &key
                && partition_key(&inner).is_none()
            {
                inner
                    .message_annotations
                    .get_or_insert_with(MessageAnnotations::default)
                    .0
                    .insert(OwnedKey::from(PARTITION_KEY), Value::String(key.clone()));
                payloads.push(encode(&inner)?);
            } else {
                payloads.push(Bytes::copy_from_slice(&section.0));
            }
        }
    } else {
        payloads.push(encode(message)?);
    }
    let size: usize = payloads.iter().map(|p| p.len()).sum();
    if size as u64 > MAX_MESSAGE_BYTES {
        return Err(definitions::Error::new(
            LinkError::MessageSizeExceeded,
            format!(
                "The received message (size {size} bytes) exceeds the limit ({MAX_MESSAGE_BYTES} bytes) currently allowed on the link."
            ),
            None,
        ));
    }
    Ok((key, payloads))
}

fn partition_key(message: &AmqpMessage) -> Option<String> {
    match message
        .message_annotations
        .as_ref()?
        .0
        .get(&PARTITION_KEY as &dyn fe2o3_amqp::types::messaging::annotations::AnnotationKey)?
    {
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

fn encode(message: &AmqpMessage) -> Result<Bytes, definitions::Error> {
    serde_amqp::to_vec(&Serializable(message))
        .map(Bytes::from)
        .map_err(|e| {
            definitions::Error::new(
                AmqpError::DecodeError,
                format!("the message cannot be re-encoded: {e}"),
                None,
            )
        })
}

/// The encoded message a consumer receives for `event`: spliced without decoding where
/// `received` can, else decoded, stamped and encoded again.
fn received_bytes(event: &StoredEvent, last: Option<&LastEnqueued>) -> Option<Vec<u8>> {
    received::received_bytes(
        &event.payload,
        event.sequence,
        event.offset,
        event.enqueued_ms,
        last,
    )
    .or_else(|| serde_amqp::to_vec(&Serializable(to_received(event, last)?)).ok())
}

/// The stored event as the message a consumer receives: as sent, plus the annotations the
/// service stamps (sequence number, offset as a string, enqueued time), and `last` added to its
/// delivery annotations when the receiver asked for it. The producer's own delivery annotations
/// are kept beside `last`'s keys, as Event Hubs keeps them (a key of both takes `last`'s value).
pub fn to_received(event: &StoredEvent, last: Option<&LastEnqueued>) -> Option<AmqpMessage> {
    let mut message = super::encoding::decode_message(&event.payload).ok()?;
    if let Some(last) = last {
        let entries = &mut message
            .delivery_annotations
            .get_or_insert_with(DeliveryAnnotations::default)
            .0;
        entries.insert(
            OwnedKey::from(received::LAST_ENQUEUED_SEQUENCE_NUMBER),
            Value::Long(last.sequence),
        );
        entries.insert(
            OwnedKey::from(received::LAST_ENQUEUED_OFFSET),
            Value::String(last.offset.to_string()),
        );
        entries.insert(
            OwnedKey::from(received::LAST_ENQUEUED_TIME),
            Value::Timestamp(Timestamp::from_milliseconds(last.enqueued_ms)),
        );
        entries.insert(
            OwnedKey::from(received::RETRIEVAL_TIME),
            Value::Timestamp(Timestamp::from_milliseconds(last.retrieved_ms)),
        );
    }
    let annotations = &mut message
        .message_annotations
        .get_or_insert_with(MessageAnnotations::default)
        .0;
    annotations.insert(
        OwnedKey::from(received::SEQUENCE_NUMBER),
        Value::Long(event.sequence),
    );
    annotations.insert(
        OwnedKey::from(received::OFFSET),
        Value::String(event.offset.to_string()),
    );
    annotations.insert(
        OwnedKey::from(received::ENQUEUED_TIME),
        Value::Timestamp(Timestamp::from_milliseconds(event.enqueued_ms)),
    );
    Some(message)
}

/// The first sequence number a receiver with `filter` gets.
pub fn start_sequence(
    partition: &Partition,
    filter: StartFilter,
) -> Result<i64, super::log::LogError> {
    let summary = partition.summary();
    // Event Hubs refuses a start past the partition's end ("The supplied sequence number … is
    // invalid. The last sequence number in the system is …"), what a recreated event hub does
    // to its consumers' checkpoints; this hub starts at the end instead, and says so.
    let (last_sequence, last_offset) = summary.last.map_or((-1, -1), |(s, o, _)| (s, o));
    let past_end = match filter {
        StartFilter::SequenceNumber {
            sequence,
            inclusive,
        } => (if inclusive { sequence - 1 } else { sequence }) > last_sequence,
        StartFilter::Offset {
            offset,
            inclusive: false,
        } => offset > last_offset,
        _ => false,
    };
    if past_end {
        tracing::warn!(
            partition = %partition.id,
            ?filter,
            last_sequence,
            last_offset,
            "a receiver asked to start past the partition's end; Event Hubs refuses it (com.microsoft:argument-out-of-range: the position is invalid) until the partition reaches it, then skips the events before; this hub starts it at the end"
        );
    }
    match filter {
        StartFilter::Earliest => Ok(summary.begin_sequence),
        StartFilter::Latest => Ok(summary.next_sequence),
        StartFilter::Offset { offset, inclusive } => {
            partition.resolve(Seek::Offset(if inclusive { offset } else { offset + 1 }))
        }
        StartFilter::SequenceNumber {
            sequence,
            inclusive,
        } => partition.resolve(Seek::Sequence(if inclusive {
            sequence
        } else {
            sequence + 1
        })),
        StartFilter::EnqueuedTime { millis, inclusive } => {
            partition.resolve(Seek::Time(if inclusive { millis } else { millis + 1 }))
        }
    }
}

/// The partition's newest event now, as a receiver tracking it gets it.
fn last_enqueued(partition: &Partition) -> LastEnqueued {
    let (sequence, offset, enqueued_ms) = partition.summary().last.unwrap_or((-1, -1, 0));
    let retrieved_ms = chrono::Utc::now().timestamp_millis();
    LastEnqueued::new(sequence, offset, enqueued_ms, retrieved_ms)
}

/// The condition Event Hubs closes a link with when it is busy.
const SERVER_BUSY: &str = "com.microsoft:server-busy";

/// Serves a consumer's link from sequence number `next` on; with `track_last_enqueued`, each
/// delivery carries the partition's newest event (looked up once per chunk read).
pub async fn deliver(
    mut sender: Sender,
    partition: Arc<Partition>,
    mut next: i64,
    mut lease: ReceiverLease,
    track_last_enqueued: bool,
    traced: Option<(String, String)>,
) {
    let mut appended = partition.subscribe();
    let stolen = loop {
        appended.borrow_and_update();
        let events = match partition.read(next, READ_CHUNK) {
            Ok(events) => events,
            Err(e) => {
                tracing::error!(error = %e, partition = %partition.id, "read failed");
                let error = definitions::Error::new(AmqpError::InternalError, e.to_string(), None);
                let _ = sender.close_with_error(error).await;
                return;
            }
        };
        if events.is_empty() {
            tokio::select! {
                changed = appended.changed() => if changed.is_err() { break None },
                _ = lease.stopped.changed() => break lease.stopped.borrow().clone(),
                _ = sender.on_detach() => return,
            }
            continue;
        }
        let mut stop = None;
        let last = track_last_enqueued.then(|| last_enqueued(&partition));
        // Ends once the chunk is sent (at the end of this pass of the loop).
        let _span = match &traced {
            Some((hub, consumer_group)) if spans::active(true) => {
                spans::deliver(hub, consumer_group, &partition.id, &events)
            }
            _ => tracing::Span::none(),
        };
        for event in &events {
            next = event.sequence + 1;
            let Some(bytes) = received_bytes(event, last.as_ref()) else {
                tracing::warn!(partition = %partition.id, sequence = event.sequence, "skipping an undecodable stored event");
                continue;
            };
            // Wrapped for fe2o3, which sends only typed messages; `wire` unwraps it.
            let sendable = Sendable::builder()
                .message(Message::builder().value(Binary::from(bytes)).build())
                .message_format(PRE_ENCODED)
                .settled(true)
                .build();
            tokio::select! {
                sent = sender.send_batchable(sendable) => if let Err(e) = sent {
                    tracing::debug!(error = %e, "consumer link ended");
                    return;
                },
                _ = lease.stopped.changed() => {
                    stop = lease.stopped.borrow().clone();
                    break;
                }
            }
        }
        if stop.is_some() {
            break stop;
        }
    };
    if let Some(detach) = stolen {
        tracing::info!(partition = %partition.id, server_busy = detach.server_busy, "receiver link ended by the hub");
        let error = if detach.server_busy {
            definitions::Error::new(
                definitions::ErrorCondition::Custom(SERVER_BUSY.into()),
                detach.description,
                None,
            )
        } else {
            definitions::Error::new(LinkError::Stolen, detach.description, None)
        };
        let _ = sender.close_with_error(error).await;
    } else {
        let _ = sender.close().await;
    }
    drop(lease);
}

/// Refuses a link the client attached: it is accepted at the AMQP level only to be closed at once
/// with the error, which is how the service answers too.
pub async fn refuse_sender(
    sender: Sender,
    condition: impl Into<definitions::ErrorCondition>,
    description: String,
) {
    let _ = sender
        .close_with_error(definitions::Error::new(condition, description, None))
        .await;
}

pub async fn refuse_receiver(
    receiver: Receiver,
    condition: impl Into<definitions::ErrorCondition>,
    description: String,
) {
    let _ = receiver
        .close_with_error(definitions::Error::new(condition, description, None))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_addresses_the_sdks_use() {
        assert_eq!(
            parse_address("amqps://localhost/sensors"),
            Some(Address::Send {
                hub: "sensors".into(),
                partition: None
            })
        );
        assert_eq!(
            parse_address("amqp://127.0.0.1:5672/sensors/Partitions/3"),
            Some(Address::Send {
                hub: "sensors".into(),
                partition: Some("3".into())
            })
        );
        assert_eq!(
            parse_address("amqps://localhost/sensors/ConsumerGroups/$Default/Partitions/15"),
            Some(Address::Receive {
                hub: "sensors".into(),
                consumer_group: "$Default".into(),
                partition: "15".into()
            })
        );
        assert_eq!(parse_address("$cbs"), Some(Address::Node("$cbs".into())));
        assert_eq!(
            parse_address("$management"),
            Some(Address::Node("$management".into()))
        );
        assert_eq!(parse_address("amqps://localhost/"), None);
        assert_eq!(parse_address("sensors/Nope/1"), None);
    }
}

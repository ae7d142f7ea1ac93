//! Produce: record batches in (`batch` decodes them, `convert` makes each record an AMQP
//! message, the partition appends), with idempotent producers' retries answered from the
//! batches they remember.

use super::*;

use super::producers::{self, Placement, Recent, Sequenced};

impl Kafka {
    pub(super) fn init_producer_id(&self, r: InitProducerIdRequest, version: i16) -> Outcome {
        if r.transactional_id.is_some() {
            return respond(
                &InitProducerIdResponse::default()
                    .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
                    .with_producer_id(ProducerId(-1)),
                version,
            );
        }
        // Random, so that no client can write under another's id (`producers`).
        let id = self.producers.new_id();
        respond(
            &InitProducerIdResponse::default()
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(0),
            version,
        )
    }
    pub(super) fn produce(&self, session: &Session, r: ProduceRequest, version: i16) -> Outcome {
        let mut responses = Vec::new();
        // One decompression budget for the whole request (`batch`).
        let budget = std::cell::Cell::new(batch::MAX_DECOMPRESSED_BYTES);
        for topic in r.topic_data {
            let name = topic.name.0.to_string();
            let hub = self.topic(session, &name, Some(Right::Send));
            let mut partitions = Vec::new();
            for data in topic.partition_data {
                let (code, base_offset, message) = match &hub {
                    Err(code) => (*code, -1, None),
                    Ok(hub) => self.produce_partition(hub, data.index, data.records, &budget),
                };
                partitions.push(
                    produce_response::PartitionProduceResponse::default()
                        .with_index(data.index)
                        .with_error_code(code)
                        .with_base_offset(base_offset)
                        .with_log_append_time_ms(-1)
                        .with_error_message(
                            message.filter(|_| version >= 8).map(|m: String| text(&m)),
                        ),
                );
            }
            responses.push(
                produce_response::TopicProduceResponse::default()
                    .with_name(TopicName(text(&name)))
                    .with_partition_responses(partitions),
            );
        }
        if r.acks == 0 {
            return Outcome {
                response: None,
                header_version: 0,
                close: None,
            };
        }
        respond(
            &ProduceResponse::default().with_responses(responses),
            version,
        )
    }
    /// Appends one partition's batches, decompressing them from the request's `budget`:
    /// (error code, base offset, message).
    pub(super) fn produce_partition(
        &self,
        hub: &crate::Hub,
        index: i32,
        records: Option<Bytes>,
        budget: &std::cell::Cell<usize>,
    ) -> (i16, i64, Option<String>) {
        let Some(partition) = usize::try_from(index)
            .ok()
            .and_then(|i| hub.partitions.get(i))
        else {
            return (ResponseError::UnknownTopicOrPartition.code(), -1, None);
        };
        let batches = match batch::decode(records.unwrap_or_default(), budget) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(hub = %hub.name, partition = index, "Kafka produce refused: {e}");
                let code = match e {
                    batch::BatchError::Decompressed => ResponseError::MessageTooLarge,
                    _ => ResponseError::CorruptMessage,
                };
                return (code.code(), -1, Some(e.to_string()));
            }
        };
        for b in &batches {
            for event in &b.events {
                let size = event.key.as_ref().map_or(0, |k| k.len())
                    + event.value.as_ref().map_or(0, |v| v.len())
                    + event
                        .headers
                        .iter()
                        .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
                        .sum::<usize>();
                if size as u64 > MAX_MESSAGE_BYTES {
                    return (
                        ResponseError::MessageTooLarge.code(),
                        -1,
                        Some(format!(
                            "an event of {size} bytes is larger than the {MAX_MESSAGE_BYTES} bytes Event Hubs accepts"
                        )),
                    );
                }
            }
        }
        let mut base_offset = None;
        for b in batches {
            if b.events.is_empty() {
                continue;
            }
            let key = (b.producer_id, hub.name.to_ascii_lowercase(), index);
            let sequenced = Sequenced {
                epoch: b.producer_epoch,
                first_sequence: b.base_sequence,
                last_sequence: producers::increment(b.base_sequence, b.events.len() as i32 - 1),
            };
            if b.producer_id >= 0 {
                match self.producers.place(&key, sequenced) {
                    Placement::Append => {}
                    Placement::Duplicate { base_offset: first } => {
                        // A retry of a batch already appended: its first answer again.
                        base_offset.get_or_insert(first);
                        continue;
                    }
                    Placement::Refuse(error, message) => {
                        tracing::info!(hub = %hub.name, partition = index, producer = b.producer_id, "Kafka produce refused: {message}");
                        return (error.code(), -1, Some(message));
                    }
                }
            }
            let payloads = b
                .events
                .iter()
                .map(|e| Bytes::from(convert::to_amqp(e)))
                .collect();
            let idempotent = b.producer_id >= 0;
            let recent = |base_offset| Recent {
                first_sequence: sequenced.first_sequence,
                last_sequence: sequenced.last_sequence,
                base_offset,
            };
            // An idempotent batch is journaled before the log has it (`announce`).
            let placed = match partition.append_announced(payloads, |next| {
                if idempotent {
                    self.producers
                        .announce(&key, sequenced.epoch, &recent(next));
                }
            }) {
                Ok(p) => p,
                Err(e) => {
                    if idempotent {
                        self.producers.withdraw(&key, sequenced.first_sequence);
                    }
                    tracing::error!(hub = %hub.name, partition = index, "Kafka produce failed: {e}");
                    return (
                        ResponseError::KafkaStorageError.code(),
                        -1,
                        Some(e.to_string()),
                    );
                }
            };
            let first = placed.first().map(|(seq, _)| *seq).unwrap_or(-1);
            base_offset.get_or_insert(first);
            if idempotent {
                self.producers.record(key, sequenced.epoch, recent(first));
            }
        }
        (0, base_offset.unwrap_or(-1), None)
    }
}

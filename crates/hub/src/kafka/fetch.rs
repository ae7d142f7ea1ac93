//! Fetch and ListOffsets: a partition's events read out as record batches, waiting up to the
//! client's `max_wait_ms` for new ones, and the offsets a client may start from.

use super::*;

/// The most one fetch response holds, whatever the client asks (it fetches again for more).
pub const MAX_FETCH_BYTES: usize = 8 * 1024 * 1024;

/// What one fetch reads from a partition at a time, in events.
pub(super) const READ_CHUNK: usize = 500;

impl Kafka {
    pub(super) async fn fetch(&self, session: &Session, r: FetchRequest, version: i16) -> Outcome {
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(r.max_wait_ms.max(0) as u64);
        loop {
            let mut watchers = Vec::new();
            let mut total = 0usize;
            // What one response may hold: the client's own limit, within the endpoint's.
            let mut budget = usize::try_from(r.max_bytes)
                .unwrap_or(0)
                .clamp(1, MAX_FETCH_BYTES);
            let mut responses = Vec::new();
            for topic in &r.topics {
                let name = topic.topic.0.to_string();
                let hub = self.topic(session, &name, Some(Right::Listen));
                let mut partitions = Vec::new();
                for p in &topic.partitions {
                    let data = fetch_response::PartitionData::default()
                        .with_partition_index(p.partition)
                        .with_aborted_transactions(Some(Vec::new()));
                    let data = match &hub {
                        Err(code) => data.with_error_code(*code),
                        Ok(hub) => match usize::try_from(p.partition)
                            .ok()
                            .and_then(|i| hub.partitions.get(i))
                        {
                            None => {
                                data.with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            }
                            Some(partition) => {
                                let summary = partition.summary();
                                let data = data
                                    .with_high_watermark(summary.next_sequence)
                                    .with_last_stable_offset(summary.next_sequence)
                                    .with_log_start_offset(if version >= 5 {
                                        summary.begin_sequence
                                    } else {
                                        -1
                                    });
                                if p.fetch_offset < summary.begin_sequence
                                    || p.fetch_offset > summary.next_sequence
                                {
                                    data.with_error_code(ResponseError::OffsetOutOfRange.code())
                                } else {
                                    watchers.push(partition.subscribe());
                                    let limit = (p.partition_max_bytes.max(0) as usize).min(budget);
                                    let records =
                                        read_records(partition, p.fetch_offset, limit, total == 0);
                                    match records {
                                        Ok(Some(bytes)) => {
                                            total += bytes.len();
                                            budget = budget.saturating_sub(bytes.len());
                                            data.with_records(Some(bytes))
                                        }
                                        Ok(None) => data.with_records(Some(Bytes::new())),
                                        Err(e) => {
                                            tracing::error!(hub = %hub.name, partition = p.partition, "Kafka fetch failed: {e}");
                                            data.with_error_code(
                                                ResponseError::KafkaStorageError.code(),
                                            )
                                        }
                                    }
                                }
                            }
                        },
                    };
                    partitions.push(data);
                }
                responses.push(
                    fetch_response::FetchableTopicResponse::default()
                        .with_topic(TopicName(text(&name)))
                        .with_partitions(partitions),
                );
            }
            let enough = total >= r.min_bytes.max(1) as usize;
            if enough || watchers.is_empty() || tokio::time::Instant::now() >= deadline {
                return respond(&FetchResponse::default().with_responses(responses), version);
            }
            // Nothing yet: wait for an append to any fetched partition, or the deadline.
            let changed = futures_util::future::select_all(
                watchers
                    .iter_mut()
                    .map(|w| Box::pin(w.changed()))
                    .collect::<Vec<_>>(),
            );
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                continue;
            }
        }
    }
    pub(super) fn list_offsets(
        &self,
        session: &Session,
        r: ListOffsetsRequest,
        version: i16,
    ) -> Outcome {
        let topics = r
            .topics
            .into_iter()
            .map(|topic| {
                let name = topic.name.0.to_string();
                let hub = self.topic(session, &name, Some(Right::Listen));
                let partitions = topic
                    .partitions
                    .into_iter()
                    .map(|p| {
                        let answer = list_offsets_response::ListOffsetsPartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_timestamp(-1);
                        let partition = match &hub {
                            Err(code) => return answer.with_error_code(*code),
                            Ok(hub) => usize::try_from(p.partition_index)
                                .ok()
                                .and_then(|i| hub.partitions.get(i)),
                        };
                        let Some(partition) = partition else {
                            return answer
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code());
                        };
                        let summary = partition.summary();
                        let offset = match p.timestamp {
                            -1 => Ok(summary.next_sequence),
                            -2 => Ok(summary.begin_sequence),
                            -3 => Ok(summary.last.map(|l| l.0).unwrap_or(-1)),
                            ms => partition.resolve(crate::log::Seek::Time(ms)),
                        };
                        match offset {
                            Ok(offset) => answer.with_offset(offset),
                            Err(_) => {
                                answer.with_error_code(ResponseError::KafkaStorageError.code())
                            }
                        }
                    })
                    .collect();
                list_offsets_response::ListOffsetsTopicResponse::default()
                    .with_name(TopicName(text(&name)))
                    .with_partitions(partitions)
            })
            .collect();
        respond(&ListOffsetsResponse::default().with_topics(topics), version)
    }
}

/// Reads a partition from `from` as one record batch of at most `limit` bytes of events (at
/// least one event when `first`, as Kafka returns one oversized batch rather than none).
pub(super) fn read_records(
    partition: &crate::Partition,
    from: i64,
    limit: usize,
    first: bool,
) -> Result<Option<Bytes>, crate::log::LogError> {
    let mut fetched = Vec::new();
    let mut bytes = 0usize;
    let mut next = from;
    'reading: loop {
        let events = partition.read(next, READ_CHUNK)?;
        if events.is_empty() {
            break;
        }
        for stored in events {
            let size = stored.payload.len() + 32;
            if bytes + size > limit && !(first && fetched.is_empty()) {
                break 'reading;
            }
            next = stored.sequence + 1;
            bytes += size;
            // An event that is not an AMQP message (none the hub stores) is skipped.
            if let Some(event) = convert::from_amqp(&stored.payload) {
                fetched.push(batch::Fetched {
                    sequence: stored.sequence,
                    enqueued_ms: stored.enqueued_ms,
                    event,
                });
            }
        }
    }
    Ok((!fetched.is_empty()).then(|| batch::encode(&fetched)))
}

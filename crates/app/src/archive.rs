//! The `RawArchive` function, on its own consumer group: keeps every raw event, by partition and
//! enqueued-time window, so that routing (the aggregator) and storage don't slow each other down
//! (the design documents' advice: two consumer groups, two processors).
//!
//! Events are grouped in blocks of [`SEQUENCE_BLOCK`](super::aggregate::SEQUENCE_BLOCK) sequence numbers and keyed by
//! sequence number inside a block, so archiving a replayed batch adds nothing.

use std::collections::BTreeMap;

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::aggregate::{block_of, window_start};
use super::versioned::VersionedDocs;
use super::{AppError, BatchReport, layout};
use hubhost_functions::batch::{EventRecord, TriggerBatch};
use hubhost_storage::SharedStore;

pub const ARCHIVE_SCHEMA: &str = "hubhost.archive.v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchivedEvent {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub offset: Option<String>,
    #[serde(
        rename = "enqueuedTime",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub enqueued_time: Option<DateTime<Utc>>,
    #[serde(
        rename = "partitionKey",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub partition_key: Option<String>,
    #[serde(skip_serializing_if = "Map::is_empty", default)]
    pub properties: Map<String, Value>,
    /// The body as text when it is UTF-8 …
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub body: Option<String>,
    /// … else as base64.
    #[serde(
        rename = "bodyBase64",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub body_base64: Option<String>,
}

impl ArchivedEvent {
    fn from_record(e: &EventRecord) -> Self {
        let (body, body_base64) = match std::str::from_utf8(&e.body) {
            Ok(text) => (Some(text.to_string()), None),
            Err(_) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(&e.body)),
            ),
        };
        ArchivedEvent {
            offset: e.offset.clone(),
            enqueued_time: e.enqueued_time,
            partition_key: e.partition_key.clone(),
            properties: e.properties.clone(),
            body,
            body_base64,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchiveChunk {
    pub schema: String,
    pub hub: String,
    #[serde(rename = "consumerGroup")]
    pub consumer_group: String,
    pub partition: String,
    #[serde(rename = "windowStart")]
    pub window_start: DateTime<Utc>,
    /// Sequence number → event. Events without one are kept under negative keys, never merged.
    pub events: BTreeMap<i64, ArchivedEvent>,
}

/// A chunk blob's window start and block name.
type ChunkKey = (DateTime<Utc>, String);

pub struct Archiver {
    window_seconds: u32,
    chunks: VersionedDocs<ArchiveChunk>,
}

impl Archiver {
    pub fn new(store: SharedStore, container: &str, window_seconds: u32) -> Self {
        Archiver {
            window_seconds,
            chunks: VersionedDocs::new(store, container, 64),
        }
    }

    pub async fn process(&self, batch: &TriggerBatch) -> Result<BatchReport, AppError> {
        let hub = layout::segment("event hub name", batch.hub_name())?;
        let group = layout::segment("consumer group", batch.consumer_group())?;
        let partition = layout::segment("partition id", &batch.partition.partition_id)?;
        let received = Utc::now();
        let mut chunks: BTreeMap<ChunkKey, Vec<(i64, &EventRecord)>> = BTreeMap::new();
        let unsequenced = format!("noseq-{}", uuid::Uuid::new_v4().simple());
        for (i, e) in batch.events.iter().enumerate() {
            let window = window_start(e.enqueued_time.unwrap_or(received), self.window_seconds);
            let (block, key) = match e.sequence_number {
                Some(seq) => (block_of(Some(seq)), seq),
                None => (unsequenced.clone(), -1 - i as i64),
            };
            chunks.entry((window, block)).or_default().push((key, e));
        }
        let writes = chunks.iter().map(|((window, block), events)| {
            let name = layout::archive_blob(&hub, &group, *window, &partition, block);
            self.archive_chunk(name, &hub, &group, &partition, *window, events)
        });
        let counts = futures::future::try_join_all(writes).await?;
        let mut report = BatchReport {
            events: batch.events.len() as u64,
            windows: chunks
                .keys()
                .map(|(w, _)| *w)
                .collect::<std::collections::BTreeSet<_>>()
                .len() as u64,
            without_sequence_number: batch
                .events
                .iter()
                .filter(|e| e.sequence_number.is_none())
                .count() as u64,
            ..Default::default()
        };
        for (added, replayed) in counts {
            report.applied += added;
            report.replayed += replayed;
        }
        Ok(report)
    }

    async fn archive_chunk(
        &self,
        name: String,
        hub: &str,
        group: &str,
        partition: &str,
        window: DateTime<Utc>,
        events: &[(i64, &EventRecord)],
    ) -> Result<(u64, u64), AppError> {
        self.chunks
            .update(
                &name,
                || ArchiveChunk {
                    schema: ARCHIVE_SCHEMA.to_string(),
                    hub: hub.to_string(),
                    consumer_group: group.to_string(),
                    partition: partition.to_string(),
                    window_start: window,
                    events: BTreeMap::new(),
                },
                |chunk| {
                    let mut added = 0;
                    for (key, e) in events {
                        if !chunk.events.contains_key(key) {
                            chunk.events.insert(*key, ArchivedEvent::from_record(e));
                            added += 1;
                        }
                    }
                    let replayed = events.len() as u64 - added;
                    ((added, replayed), added > 0)
                },
            )
            .await
    }
}

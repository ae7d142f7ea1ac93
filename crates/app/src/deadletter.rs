//! Poison events, set aside with their reason instead of being dropped or retried forever.
//!
//! One blob per event, named by partition and sequence number, so writing it again on a replay
//! changes nothing. A dead letter keeps everything needed to inspect or re-send the event.

use base64::Engine;
use bytes::Bytes;
use chrono::Utc;
use serde_json::{Value, json};

use super::{AppError, layout};
use hubhost_functions::batch::{EventRecord, TriggerBatch};
use hubhost_storage::{Condition, Metadata, SharedStore};

pub struct DeadLetters {
    store: SharedStore,
    container: String,
}

impl DeadLetters {
    pub fn new(store: SharedStore, container: &str) -> Self {
        DeadLetters {
            store,
            container: container.to_string(),
        }
    }

    pub async fn put(
        &self,
        batch: &TriggerBatch,
        event: &EventRecord,
        reason: &str,
    ) -> Result<(), AppError> {
        let hub = layout::segment("event hub name", batch.hub_name())?;
        let group = layout::segment("consumer group", batch.consumer_group())?;
        let partition = layout::segment("partition id", &batch.partition.partition_id)?;
        let id = match event.sequence_number {
            Some(seq) => format!("{seq:020}"),
            None => format!("noseq-{}", uuid::Uuid::new_v4().simple()),
        };
        let body = match std::str::from_utf8(&event.body) {
            Ok(text) => json!({"body": text}),
            Err(_) => {
                json!({"bodyBase64": base64::engine::general_purpose::STANDARD.encode(&event.body)})
            }
        };
        let mut letter = json!({
            "function": batch.function,
            "eventHub": batch.hub_name(),
            "consumerGroup": batch.consumer_group(),
            "partitionId": batch.partition.partition_id,
            "sequenceNumber": event.sequence_number,
            "offset": event.offset,
            "enqueuedTime": event.enqueued_time,
            "partitionKey": event.partition_key,
            "properties": event.properties,
            "reason": reason,
            "deadLetteredAt": Utc::now(),
        });
        if let (Value::Object(letter), Value::Object(body)) = (&mut letter, body) {
            letter.extend(body);
        }
        let name = layout::deadletter_blob(&hub, &group, &partition, &id);
        let data = Bytes::from(serde_json::to_vec_pretty(&letter).expect("JSON serializes"));
        self.store
            .put(
                &self.container,
                &name,
                data,
                &Metadata::new(),
                &Condition::Always,
            )
            .await?;
        tracing::warn!(
            partition = %batch.partition.partition_id,
            sequence_number = ?event.sequence_number,
            blob = %name,
            %reason,
            "poison event set aside"
        );
        Ok(())
    }
}

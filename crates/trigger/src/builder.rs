//! Batches built by hand, for tests and for tools that invoke a function with events of their
//! own (`hubhost invoke`): [`BatchBuilder`], from [`TriggerBatch::builder`].
//!
//! Every event gets what the service would have given it — a sequence number one above the
//! previous, an offset past the previous body, an enqueued time a millisecond after the
//! previous — and the system properties the host sends with them, so a function under test
//! sees a batch shaped like a real one. Each of these can be set, for the batch (where it
//! starts, whatever the order of the calls) or for one event (the last one added; the events
//! after it follow on from it).

use bytes::Bytes;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Map, Value, json};

use crate::batch::{EventRecord, PartitionContext, RetryContext, SystemProperties, TriggerBatch};
use crate::inputs::InputValues;

/// Builds a [`TriggerBatch`] event by event.
///
/// ```
/// use hubhost_trigger::batch::TriggerBatch;
///
/// let batch = TriggerBatch::builder("SensorAggregator")
///     .hub("sensors")
///     .partition("7")
///     .first_sequence_number(100)
///     .json(&serde_json::json!({"homeId": "home-1", "type": "motion"}))
///     .partition_key("home-1")
///     .property("source", "test")
///     .text("not json")
///     .bytes(vec![0xff, 0xfe])
///     .build();
///
/// assert_eq!(batch.events.len(), 3);
/// assert_eq!(batch.partition.partition_id, "7");
/// assert_eq!(batch.events[0].sequence_number, Some(100));
/// assert_eq!(batch.events[2].sequence_number, Some(102));
/// assert_eq!(batch.events[0].partition_key.as_deref(), Some("home-1"));
/// assert_eq!(batch.events[1].offset.as_deref(), Some("35")); // past the first body
/// assert_eq!(batch.events[0].properties["source"], "test");
/// assert_eq!(batch.events[1].text(), Ok("not json"));
/// let system = batch.system_properties.of(0)?.unwrap();
/// assert_eq!(system["x-opt-sequence-number"], 100);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    function: String,
    partition: PartitionContext,
    first_sequence_number: i64,
    first_enqueued_time: DateTime<Utc>,
    events: Vec<DraftEvent>,
    retry: Option<RetryContext>,
    inputs: InputValues,
}

impl TriggerBatch {
    /// Starts a batch for `function`: hub `sensors`, consumer group `$Default`, partition `0`,
    /// sequence numbers from 0, enqueued times from now.
    pub fn builder(function: &str) -> BatchBuilder {
        BatchBuilder {
            function: function.to_string(),
            partition: PartitionContext {
                fully_qualified_namespace: Some("localhost".into()),
                event_hub_name: Some("sensors".into()),
                consumer_group: Some("$Default".into()),
                partition_id: "0".into(),
                is_checkpointing_after_invocation: Some(true),
            },
            first_sequence_number: 0,
            first_enqueued_time: Utc::now(),
            events: Vec::new(),
            retry: None,
            inputs: InputValues::default(),
        }
    }
}

impl BatchBuilder {
    /// The event hub the batch was read from.
    pub fn hub(mut self, name: &str) -> Self {
        self.partition.event_hub_name = Some(name.into());
        self
    }

    /// The consumer group it was read with.
    pub fn consumer_group(mut self, name: &str) -> Self {
        self.partition.consumer_group = Some(name.into());
        self
    }

    /// The namespace, e.g. `myns.servicebus.windows.net`.
    pub fn namespace(mut self, host: &str) -> Self {
        self.partition.fully_qualified_namespace = Some(host.into());
        self
    }

    /// The partition, `"0"` to `"31"`.
    pub fn partition(mut self, id: &str) -> Self {
        self.partition.partition_id = id.into();
        self
    }

    /// The first event's sequence number; the others follow it by one [default: 0]. It applies
    /// to the events added before the call as well as after.
    pub fn first_sequence_number(mut self, sequence_number: i64) -> Self {
        self.first_sequence_number = sequence_number;
        self
    }

    /// The first event's enqueued time; the others follow it by a millisecond [default: when
    /// the builder was made]. It applies to the events added before the call as well as after.
    ///
    /// ```
    /// use chrono::{Duration, Utc};
    /// use hubhost_trigger::batch::TriggerBatch;
    ///
    /// let half_an_hour_ago = Utc::now() - Duration::minutes(30);
    /// let batch = TriggerBatch::builder("Lag")
    ///     .text("old")
    ///     .enqueued_from(half_an_hour_ago)
    ///     .text("older by a millisecond less")
    ///     .build();
    /// assert_eq!(batch.events[0].enqueued_time, Some(half_an_hour_ago));
    /// assert_eq!(
    ///     batch.events[1].enqueued_time,
    ///     Some(half_an_hour_ago + Duration::milliseconds(1))
    /// );
    /// ```
    pub fn enqueued_from(mut self, time: DateTime<Utc>) -> Self {
        self.first_enqueued_time = time;
        self
    }

    /// The host's retry context: which attempt this is of how many.
    pub fn retry(mut self, retry_count: i64, max_retry_count: i64) -> Self {
        self.retry = Some(RetryContext {
            retry_count,
            max_retry_count,
            exception: None,
        });
        self
    }

    /// With [`retry`](Self::retry): the previous attempt failed with `message`.
    pub fn last_error(mut self, message: &str) -> Self {
        let retry = self.retry.get_or_insert(RetryContext {
            retry_count: 1,
            max_retry_count: 1,
            exception: None,
        });
        retry.exception = Some(RetryContext::exception_from(
            &self.function,
            "System.Exception",
            message,
        ));
        self
    }

    /// An event whose body is `text` (UTF-8).
    pub fn text(self, text: impl Into<String>) -> Self {
        self.bytes(text.into().into_bytes())
    }

    /// An event whose body is `value` as compact JSON.
    pub fn json<T: serde::Serialize + ?Sized>(self, value: &T) -> Self {
        let body = serde_json::to_vec(value).expect("a value that serializes to JSON");
        self.bytes(body)
    }

    /// An event whose body is `body`, as it is.
    pub fn bytes(mut self, body: impl Into<Bytes>) -> Self {
        self.events.push(DraftEvent {
            record: EventRecord::new(body),
            sequence_number: None,
            offset: None,
            enqueued_time: None,
        });
        self
    }

    /// The last event's partition key.
    pub fn partition_key(mut self, key: &str) -> Self {
        self.last("partition_key").record.partition_key = Some(key.into());
        self
    }

    /// The last event's offset, as the service gives it (a geo-replicated namespace's offsets
    /// are not numbers). The events after it keep counting from the bytes before them.
    pub fn offset(mut self, offset: &str) -> Self {
        self.last("offset").offset = Some(offset.into());
        self
    }

    /// The last event's sequence number; the events after it follow it by one.
    pub fn sequence_number(mut self, sequence_number: i64) -> Self {
        self.last("sequence_number").sequence_number = Some(sequence_number);
        self
    }

    /// The last event's enqueued time; the events after it follow it by a millisecond.
    ///
    /// ```
    /// use chrono::{Duration, Utc};
    /// use hubhost_trigger::batch::TriggerBatch;
    ///
    /// let now = Utc::now();
    /// let batch = TriggerBatch::builder("Lag")
    ///     .text("fresh")
    ///     .enqueued_time(now)
    ///     .text("stale")
    ///     .enqueued_time(now - Duration::minutes(30))
    ///     .sequence_number(41)
    ///     .build();
    /// assert_eq!(batch.events[1].enqueued_time, Some(now - Duration::minutes(30)));
    /// assert_eq!(batch.events[1].sequence_number, Some(41));
    /// let system = batch.system_properties.of(1)?.unwrap();
    /// assert_eq!(system["x-opt-sequence-number"], 41);
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn enqueued_time(mut self, time: DateTime<Utc>) -> Self {
        self.last("enqueued_time").enqueued_time = Some(time);
        self
    }

    /// An application property of the last event.
    pub fn property(mut self, name: &str, value: impl Into<Value>) -> Self {
        let event = &mut self.last("property").record;
        event.properties.insert(name.into(), value.into());
        self
    }

    /// A system property of the last event (`message-id`, `content-type`, `correlation-id`, …),
    /// as the host passes it in `SystemPropertiesArray`.
    pub fn system_property(mut self, name: &str, value: impl Into<Value>) -> Self {
        let event = &mut self.last("system_property").record;
        event.system_properties.insert(name.into(), value.into());
        self
    }

    /// An input binding of `dataType: string` (the default) with `text` as its value, as the
    /// host reads it before the call (`None`: no value, as for a blob that does not exist).
    pub fn input_text(mut self, binding: &str, text: Option<&str>) -> Self {
        self.inputs.set_text(binding, text);
        self
    }

    /// An input binding of `dataType: binary` with `bytes` as its value (`None`: no value).
    pub fn input_bytes(mut self, binding: &str, bytes: Option<&[u8]>) -> Self {
        self.inputs.set_bytes(binding, bytes);
        self
    }

    /// The batch: each event's sequence number, offset and enqueued time — its own if set,
    /// else following the event before it — and the system properties the host sends for it.
    pub fn build(self) -> TriggerBatch {
        let mut next_sequence_number = self.first_sequence_number;
        let mut next_offset: u64 = 0;
        let mut next_enqueued_time = self.first_enqueued_time;
        let mut events = Vec::with_capacity(self.events.len());
        let mut system = Vec::with_capacity(self.events.len());
        for draft in self.events {
            let mut event = draft.record;
            let sequence_number = draft.sequence_number.unwrap_or(next_sequence_number);
            let offset = draft.offset.unwrap_or_else(|| next_offset.to_string());
            let enqueued_time = draft.enqueued_time.unwrap_or(next_enqueued_time);
            next_sequence_number = sequence_number + 1;
            next_offset += event.body.len().max(1) as u64;
            next_enqueued_time = enqueued_time + Duration::milliseconds(1);
            let mut annotations = Map::new();
            annotations.insert("x-opt-sequence-number".into(), json!(sequence_number));
            annotations.insert("x-opt-offset".into(), json!(offset));
            annotations.insert(
                "x-opt-enqueued-time".into(),
                json!(crate::time::dotnet_datetime_offset(&enqueued_time)),
            );
            if let Some(key) = &event.partition_key {
                annotations.insert("x-opt-partition-key".into(), json!(key));
            }
            for (name, value) in &event.system_properties {
                annotations.insert(name.clone(), value.clone());
            }
            system.push(Value::Object(annotations));
            event.sequence_number = Some(sequence_number);
            event.offset = Some(offset);
            event.enqueued_time = Some(enqueued_time);
            events.push(event);
        }
        TriggerBatch {
            function: self.function,
            partition: self.partition,
            events,
            retry: self.retry,
            system_properties: SystemProperties::from_json(&Value::Array(system).to_string()),
            inputs: self.inputs,
        }
    }

    fn last(&mut self, what: &str) -> &mut DraftEvent {
        match self.events.last_mut() {
            Some(event) => event,
            None => panic!("BatchBuilder::{what} sets the last event's; add an event first"),
        }
    }
}

/// An event as added: what was set of it; the rest is filled in by [`BatchBuilder::build`].
#[derive(Debug, Clone)]
struct DraftEvent {
    record: EventRecord,
    sequence_number: Option<i64>,
    offset: Option<String>,
    enqueued_time: Option<DateTime<Utc>>,
}

//! The typed form of one Event Hubs trigger invocation: where the events came from and the
//! events themselves. The contract decoder produces it from the host's JSON; the reference app
//! consumes it; the emulated host produces the host's JSON from it.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

/// Which partition of which event hub and consumer group a batch was read from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PartitionContext {
    /// e.g. `myns.servicebus.windows.net`; absent in the legacy v3/v4 extension's context.
    pub fully_qualified_namespace: Option<String>,
    /// The event hub's name.
    pub event_hub_name: Option<String>,
    /// The consumer group the events were read with.
    pub consumer_group: Option<String>,
    /// The partition, `"0"` to `"31"`.
    pub partition_id: String,
    /// Whether the host checkpoints after this invocation (the current extension says so).
    pub is_checkpointing_after_invocation: Option<bool>,
}

/// One event, with the service's annotations.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    /// The event's body, as the producer sent it.
    pub body: Bytes,
    /// Its position in the partition (increasing by one per event).
    pub sequence_number: Option<i64>,
    /// Its offset in the partition, as the service gives it.
    pub offset: Option<String>,
    /// When the service accepted the event.
    pub enqueued_time: Option<DateTime<Utc>>,
    /// The key the producer chose the partition by, if any.
    pub partition_key: Option<String>,
    /// Application properties set by the producer.
    pub properties: Map<String, Value>,
    /// The AMQP message's other system properties, in the JSON form the host writes them:
    /// the properties section (`message-id`, `correlation-id`, `content-type`, …) and the
    /// message annotations (`iothub-connection-device-id`, …) other than the four the fields
    /// above already carry (`x-opt-sequence-number`, `x-opt-offset`, `x-opt-enqueued-time`,
    /// `x-opt-partition-key`). What the emulated host sends; a handler reads the whole set,
    /// as the host sent it, from [`TriggerBatch::system_properties`].
    pub system_properties: Map<String, Value>,
}

impl EventRecord {
    /// The body as text, if it is UTF-8.
    ///
    /// ```
    /// # use hubhost_trigger::batch::EventRecord;
    /// let event = EventRecord::new("hello");
    /// assert_eq!(event.text(), Ok("hello"));
    /// ```
    pub fn text(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.body)
    }

    /// The body deserialized from JSON into `T`. An event that fails is usually poison: set it
    /// aside and go on with the rest of the batch.
    ///
    /// ```
    /// # use hubhost_trigger::batch::EventRecord;
    /// #[derive(serde::Deserialize)]
    /// struct Reading { home: u32 }
    ///
    /// let reading: Reading = EventRecord::new(r#"{"home": 42}"#).json()?;
    /// assert_eq!(reading.home, 42);
    /// assert!(EventRecord::new("not json").json::<Reading>().is_err());
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// An event with `body` and nothing else (for tests and examples).
    pub fn new(body: impl Into<Bytes>) -> Self {
        EventRecord {
            body: body.into(),
            sequence_number: None,
            offset: None,
            enqueued_time: None,
            partition_key: None,
            properties: Map::new(),
            system_properties: Map::new(),
        }
    }
}

/// The host's retry bookkeeping, present when the function has a retry policy.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RetryContext {
    /// Retries of this batch so far (0 on the first delivery).
    pub retry_count: i64,
    /// The policy's `maxRetryCount` (-1: forever).
    pub max_retry_count: i64,
    /// Why the previous attempt failed, as the host serializes a .NET exception (an object
    /// with `ClassName`, `Message`, …); `None` on the first delivery.
    pub exception: Option<Value>,
}

impl RetryContext {
    /// The exception the host passes after a failed attempt of `function`, as Newtonsoft.Json
    /// writes a .NET exception (its `ISerializable` members): the WebJobs SDK's
    /// `FunctionInvocationException` ("Exception while executing function: Functions.NAME"),
    /// with the failure itself as its `InnerException` — of class `inner_class` (for a custom
    /// handler's non-2xx answer, `System.Net.Http.HttpRequestException`) and `message`.
    ///
    /// ```
    /// use hubhost_trigger::batch::RetryContext;
    ///
    /// let e = RetryContext::exception_from("Enrich", "System.Exception", "storage down");
    /// assert_eq!(e["Message"], "Exception while executing function: Functions.Enrich");
    /// assert_eq!(e["InnerException"]["Message"], "storage down");
    /// ```
    pub fn exception_from(function: &str, inner_class: &str, message: &str) -> Value {
        let inner = dotnet_exception(inner_class, message, Value::Null);
        let mut outer = Map::new();
        outer.insert("InstanceId".into(), uuid::Uuid::new_v4().to_string().into());
        outer.insert("MethodName".into(), format!("Functions.{function}").into());
        outer.insert("Handled".into(), false.into());
        if let Value::Object(base) = dotnet_exception(
            "Microsoft.Azure.WebJobs.Host.FunctionInvocationException",
            &format!("Exception while executing function: Functions.{function}"),
            inner,
        ) {
            outer.extend(base);
        }
        Value::Object(outer)
    }

    /// The previous attempt's failure message, if any: the failure inside the host's
    /// wrapping exception (its `InnerException`'s `Message`), else the exception's own.
    ///
    /// ```
    /// use hubhost_trigger::batch::RetryContext;
    ///
    /// let retry = RetryContext {
    ///     retry_count: 1,
    ///     max_retry_count: 3,
    ///     exception: Some(RetryContext::exception_from("F", "System.Exception", "storage down")),
    /// };
    /// assert_eq!(retry.last_error(), Some("storage down"));
    /// assert!(!retry.is_last_attempt());
    /// ```
    pub fn last_error(&self) -> Option<&str> {
        let exception = self.exception.as_ref()?;
        exception
            .get("InnerException")
            .and_then(|inner| inner.get("Message"))
            .and_then(Value::as_str)
            .or_else(|| exception.get("Message")?.as_str())
    }

    /// Whether the host gives up after this attempt if it fails too (never, for -1).
    pub fn is_last_attempt(&self) -> bool {
        self.max_retry_count >= 0 && self.retry_count >= self.max_retry_count
    }
}

/// A .NET `System.Exception`'s members as Newtonsoft.Json writes them through
/// `ISerializable` (`Exception.GetObjectData`), in that order; no stack trace or source,
/// which a .NET process would have.
fn dotnet_exception(class: &str, message: &str, inner: Value) -> Value {
    let hresult: i64 = match class {
        "System.InvalidOperationException" => -2146233079,
        _ => -2146233088,
    };
    let mut e = Map::new();
    e.insert("ClassName".into(), class.into());
    e.insert("Message".into(), message.into());
    e.insert("Data".into(), Value::Null);
    e.insert("InnerException".into(), inner);
    e.insert("HelpURL".into(), Value::Null);
    e.insert("StackTraceString".into(), Value::Null);
    e.insert("RemoteStackTraceString".into(), Value::Null);
    e.insert("RemoteStackIndex".into(), 0.into());
    e.insert("ExceptionMethod".into(), Value::Null);
    e.insert("HResult".into(), hresult.into());
    e.insert("Source".into(), Value::Null);
    e.insert("WatsonBuckets".into(), Value::Null);
    Value::Object(e)
}

/// One invocation of an Event Hubs-triggered function: a batch of one partition, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerBatch {
    /// The function's name.
    pub function: String,
    /// Where the events were read from.
    pub partition: PartitionContext,
    /// The events, in partition order (one for cardinality `one`).
    pub events: Vec<EventRecord>,
    /// Present when the function has a retry policy.
    pub retry: Option<RetryContext>,
    /// Every system property of every event, as the host sent them (read on demand).
    pub system_properties: SystemProperties,
    /// The values of the function's input bindings (a blob read before the call), as the host
    /// sent them beside the events.
    pub inputs: crate::inputs::InputValues,
}

/// The system properties the host sends for each event — the service's annotations
/// (`x-opt-sequence-number`, `x-opt-offset`, `x-opt-enqueued-time`, `x-opt-partition-key`, …)
/// and the AMQP message properties (`message-id`, `correlation-id`, `content-type`, `user-id`,
/// `to`, `subject`, …), plus what the extension adds. They are kept as the JSON text of the
/// request and parsed only when asked for, so a function that does not look pays nothing.
///
/// ```
/// use hubhost_trigger::batch::SystemProperties;
///
/// let sent = SystemProperties::from_json(r#"[{"message-id":"m1","content-type":"application/json"},{}]"#);
/// assert_eq!(sent.of(0)?.unwrap()["message-id"], "m1");
/// assert!(sent.of(1)?.unwrap().is_empty());
/// assert_eq!(sent.of(2)?, None);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SystemProperties {
    /// `SystemPropertiesArray` (cardinality many) or `[SystemProperties]` (one), as JSON text
    /// (possibly string-encoded, as the host writes metadata).
    json: Option<std::sync::Arc<str>>,
    /// Cardinality one: the text is a single object.
    single: bool,
}

impl SystemProperties {
    /// From a `SystemPropertiesArray` value (JSON text of an array of objects).
    pub fn from_json(array: &str) -> Self {
        SystemProperties {
            json: Some(array.into()),
            single: false,
        }
    }

    /// From a cardinality-one request's `SystemProperties` object.
    pub fn from_single_json(object: &str) -> Self {
        SystemProperties {
            json: Some(object.into()),
            single: true,
        }
    }

    /// Event `index`'s system properties; `None` if the host sent none for it.
    pub fn of(&self, index: usize) -> Result<Option<Map<String, Value>>, serde_json::Error> {
        Ok(self.all()?.into_iter().nth(index).flatten())
    }

    /// Every event's system properties, in batch order.
    pub fn all(&self) -> Result<Vec<Option<Map<String, Value>>>, serde_json::Error> {
        let Some(text) = self.json.as_deref().filter(|t| *t != "null") else {
            return Ok(Vec::new());
        };
        // The host writes metadata values as JSON text inside a string.
        let unwrapped: std::borrow::Cow<str> = if text.starts_with('"') {
            std::borrow::Cow::Owned(serde_json::from_str::<String>(text)?)
        } else {
            std::borrow::Cow::Borrowed(text)
        };
        if self.single {
            Ok(vec![serde_json::from_str(&unwrapped)?])
        } else {
            serde_json::from_str(&unwrapped)
        }
    }
}

impl TriggerBatch {
    /// First and last sequence numbers of the batch, for log lines.
    pub fn sequence_range(&self) -> Option<(i64, i64)> {
        let mut seqs = self.events.iter().filter_map(|e| e.sequence_number);
        let first = seqs.next()?;
        let (lo, hi) = seqs.fold((first, first), |(lo, hi), s| (lo.min(s), hi.max(s)));
        Some((lo, hi))
    }

    /// `first..=last` of the batch's sequence numbers (`-` without any), for log lines.
    pub fn sequence_label(&self) -> String {
        self.sequence_range()
            .map(|(a, b)| format!("{a}..={b}"))
            .unwrap_or_else(|| "-".into())
    }

    /// The event hub name, or `unknown-hub` when the host did not say (old extensions).
    pub fn hub_name(&self) -> &str {
        self.partition
            .event_hub_name
            .as_deref()
            .filter(|h| !h.is_empty())
            .unwrap_or("unknown-hub")
    }

    /// The consumer group, `$Default` when the host did not say.
    pub fn consumer_group(&self) -> &str {
        self.partition
            .consumer_group
            .as_deref()
            .filter(|c| !c.is_empty())
            .unwrap_or("$Default")
    }
}

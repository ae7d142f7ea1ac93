//! The `eventHub` output: each value sent as events (one per item of an array, as the host's
//! collector adds them), through one long-lived sending thread that keeps a producer per event
//! hub, each event stamped with the invocation's trace context.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use azure_messaging_eventhubs::ProducerClient;
use azure_messaging_eventhubs::models::EventData;
use tokio::sync::{mpsc, oneshot};

use super::{OutputValue, collector_items, text_of};
use hubhost_eventhubs::{EventHubTarget, close_quietly};
use hubhost_processor::source::EventHubs;

/// How long one output's send may take. Shorter than a write: after the hub restarts, the
/// SDK's producer can wait for an answer that never comes (seen in `bench chaos`), and a
/// fresh producer then sends at once; every invocation of the partition waits meanwhile.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Why events for an `eventHub` output were not sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The sending thread is gone (the emulated host is stopping).
    #[error("the output sender stopped")]
    SenderStopped,
    /// The event hub gave no answer in time; the next send starts on a new connection.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// One event is larger than a message may be.
    #[error("an event of {bytes} bytes does not fit one message")]
    TooLarge { bytes: usize },
    /// The producer could not be opened.
    #[error(transparent)]
    Open(#[from] hubhost_eventhubs::EventHubsError),
    /// The event hub refused or failed a batch.
    #[error(transparent)]
    Service(#[from] azure_messaging_eventhubs::EventHubsError),
    /// A simulation's event hub refused the events.
    #[error("{0}")]
    Simulated(String),
}

/// The events an `eventHub` output value sends: one per element of an array (or of a string
/// holding a JSON array), else one.
pub fn event_bodies(value: OutputValue) -> Vec<Vec<u8>> {
    collector_items(value)
        .into_iter()
        .map(|item| match item {
            OutputValue::Bytes(bytes) => bytes,
            OutputValue::Json(json) => text_of(json),
        })
        .collect()
}

/// The span of sending an `eventHub` output's events, as the Azure SDKs trace a send, and the
/// context the events are stamped with: the send span's when the emulated host exports spans
/// (a child of the handler's invocation span, given by its `traceresponse`), else the
/// handler's own.
pub(super) fn send_span(
    hub: &str,
    count: usize,
    handler: Option<&str>,
) -> (tracing::Span, Option<String>) {
    if !hubhost_telemetry::exporting_traces() {
        return (tracing::Span::none(), handler.map(str::to_string));
    }
    let span = tracing::info_span!(
        "send",
        "otel.name" = format!("send {hub}"),
        "otel.kind" = "producer",
        "messaging.system" = "eventhubs",
        "messaging.operation.type" = "send",
        "messaging.destination.name" = hub,
        "messaging.batch.message_count" = count as i64,
    );
    let parent = handler.and_then(hubhost_telemetry::TraceParent::parse);
    hubhost_telemetry::connect(&span, parent, &[]);
    let stamp = hubhost_telemetry::traceparent_of(&span)
        .map(|context| context.to_string())
        .or_else(|| handler.map(str::to_string));
    (span, stamp)
}

/// Sends events for `eventHub` outputs, on a thread of its own: the SDK's sends must run on a
/// single-threaded runtime ([`hubhost_eventhubs::on_sending_thread`] says why), and
/// one long-lived thread keeps one producer per event hub open between invocations.
#[derive(Clone)]
pub struct EventSender {
    sending: Sending,
}

#[derive(Clone)]
enum Sending {
    /// To the sending thread.
    Thread(mpsc::UnboundedSender<SendRequest>),
    /// Into a simulation's event hubs.
    Simulated(Arc<dyn EventHubs>),
}

struct SendRequest {
    target: EventHubTarget,
    bodies: Vec<Vec<u8>>,
    trace_context: Option<String>,
    done: oneshot::Sender<Result<(), SendError>>,
}

impl EventSender {
    /// Starts the sending thread; it ends when the last clone is dropped.
    pub fn start() -> Self {
        let (requests, mut incoming) = mpsc::unbounded_channel::<SendRequest>();
        std::thread::Builder::new()
            .name("hubhost-outputs".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread tokio runtime");
                runtime.block_on(async move {
                    let mut producers: HashMap<String, Arc<ProducerClient>> = HashMap::new();
                    while let Some(request) = incoming.recv().await {
                        let key = format!("{}/{}", request.target.namespace, request.target.hub);
                        let outcome = tokio::time::timeout(
                            SEND_TIMEOUT,
                            send_all(
                                &mut producers,
                                &key,
                                &request.target,
                                &request.bodies,
                                request.trace_context.as_deref(),
                            ),
                        )
                        .await
                        .unwrap_or(Err(SendError::Timeout(SEND_TIMEOUT)));
                        if outcome.is_err() {
                            // Start over on a new connection next time.
                            if let Some(stale) = producers.remove(&key)
                                && let Ok(stale) = Arc::try_unwrap(stale)
                            {
                                close_quietly("output producer", stale.close()).await;
                            }
                        }
                        let _ = request.done.send(outcome);
                    }
                    for (_, producer) in producers {
                        if let Ok(producer) = Arc::try_unwrap(producer) {
                            close_quietly("output producer", producer.close()).await;
                        }
                    }
                });
            })
            .expect("a thread for outputs");
        EventSender {
            sending: Sending::Thread(requests),
        }
    }

    /// Sends into a simulation's event hubs instead (no thread, no SDK).
    pub fn simulated(hubs: Arc<dyn EventHubs>) -> Self {
        EventSender {
            sending: Sending::Simulated(hubs),
        }
    }

    /// Sends `bodies` to `target`'s event hub, in order, in as few batches as fit, each event
    /// stamped with `trace_context` when there is one.
    pub async fn send(
        &self,
        target: EventHubTarget,
        bodies: Vec<Vec<u8>>,
        trace_context: Option<&str>,
    ) -> Result<(), SendError> {
        if bodies.is_empty() {
            return Ok(());
        }
        let requests = match &self.sending {
            Sending::Thread(requests) => requests,
            Sending::Simulated(hubs) => {
                let properties: Vec<(String, String)> = trace_context
                    .map(|context| {
                        hubhost_telemetry::trace_context::EVENT_PROPERTIES
                            .iter()
                            .map(|p| (p.to_string(), context.to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                return hubs
                    .send(&target, bodies, &properties)
                    .await
                    .map_err(SendError::Simulated);
            }
        };
        let (done, outcome) = oneshot::channel();
        requests
            .send(SendRequest {
                target,
                bodies,
                trace_context: trace_context.map(str::to_string),
                done,
            })
            .map_err(|_| SendError::SenderStopped)?;
        outcome.await.map_err(|_| SendError::SenderStopped)?
    }
}

async fn send_all(
    producers: &mut HashMap<String, Arc<ProducerClient>>,
    key: &str,
    target: &EventHubTarget,
    bodies: &[Vec<u8>],
    trace_context: Option<&str>,
) -> Result<(), SendError> {
    let producer = match producers.get(key) {
        Some(p) => p.clone(),
        None => {
            let p = Arc::new(target.producer().await?);
            producers.insert(key.to_string(), p.clone());
            p
        }
    };
    let mut batch = producer.create_batch(None).await?;
    for body in bodies {
        let event = || {
            let mut event = EventData::builder().with_body(body.clone());
            if let Some(context) = trace_context {
                for property in hubhost_telemetry::trace_context::EVENT_PROPERTIES {
                    event = event.add_property(property.to_string(), context.to_string());
                }
            }
            event.build()
        };
        if batch.try_add_event_data(event(), None)? {
            continue;
        }
        if batch.is_empty() {
            return Err(SendError::TooLarge { bytes: body.len() });
        }
        producer.send_batch(batch, None).await?;
        batch = producer.create_batch(None).await?;
        if !batch.try_add_event_data(event(), None)? {
            return Err(SendError::TooLarge { bytes: body.len() });
        }
    }
    if !batch.is_empty() {
        producer.send_batch(batch, None).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulate::outputs::binding_value;
    use serde_json::{Value, json};

    #[test]
    fn event_hub_values_become_one_event_per_array_element() {
        let bodies = |v: Value| -> Vec<String> {
            event_bodies(binding_value(false, v))
                .into_iter()
                .map(|b| String::from_utf8(b).unwrap())
                .collect()
        };
        assert_eq!(
            bodies(json!(["a", "{\"x\":1}", {"y": 2}])),
            ["a", "{\"x\":1}", "{\"y\":2}"]
        );
        assert_eq!(bodies(json!("[\"a\",\"b\"]")), ["a", "b"]);
        assert_eq!(bodies(json!("{\"k\": 1}")), ["{\"k\":1}"]);
        assert_eq!(bodies(json!("plain text")), ["plain text"]);
        assert_eq!(bodies(json!({"o": true})), ["{\"o\":true}"]);
        assert_eq!(bodies(json!(7)), ["7"]);
        assert_eq!(
            event_bodies(binding_value(false, json!("aGk="))),
            [b"hi".to_vec()]
        );
    }
}

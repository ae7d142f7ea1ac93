//! Where a pump's events come from: an event hub reached through the Azure SDK over AMQP
//! ([`AmqpSource`], what `emulate` and the Functions host use), or a simulation's hub (the
//! deterministic rehearsal's, in memory). The pump, the balancer and their checkpoint rules
//! are the same code over either: this is the seam, and only the partition log is behind it.

use std::time::Duration;

use async_trait::async_trait;
use azure_messaging_eventhubs::error::ErrorKind;
use azure_messaging_eventhubs::{
    ConsumerClient, EventReceiver, OpenReceiverOptions, StartLocation,
    StartPosition as SdkStartPosition,
};
use futures::StreamExt;
use futures::stream::BoxStream;

use hubhost_checkpoints::StartPosition;
use hubhost_eventhubs::{
    EventHubTarget, EventHubsError, PartitionEnd, PartitionEndsCache, close_quietly,
};
use hubhost_trigger::batch::EventRecord;

/// Opening a receiver (connection, `$cbs`, attach) gets this long before it is retried.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a receiver stopped delivering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiveError {
    /// Another reader opened the partition with an owner level at least ours
    /// (`amqp:link:stolen`): the partition is someone else's now.
    Stolen(String),
    /// Anything else (a dropped connection, a link the service ended as busy): reopen.
    Broken(String),
}

impl std::fmt::Display for ReceiveError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            ReceiveError::Stolen(why) | ReceiveError::Broken(why) => f.write_str(why),
        }
    }
}

/// One event hub's partitions, as a processor reads them.
#[async_trait]
pub trait EventSource: Send + Sync + 'static {
    /// A receiver on `partition` for `consumer_group`, with owner level 0 (as the Functions
    /// host opens one), reading after `position`, with credit for `prefetch` events.
    async fn open(
        &self,
        consumer_group: &str,
        partition: &str,
        position: &StartPosition,
        prefetch: u32,
    ) -> Result<Box<dyn PartitionReceiver>, String>;

    /// The hub's partitions and where each ends; an answer at most `max_age` old will do.
    async fn partition_ends(&self, max_age: Duration) -> Result<Vec<PartitionEnd>, EventHubsError>;
}

/// An open receiver.
#[async_trait]
pub trait PartitionReceiver: Send + Sync {
    /// The events, in order; an error ends the stream.
    fn events(&self) -> BoxStream<'_, Result<EventRecord, ReceiveError>>;

    /// Closes the link (and its connection), quietly.
    async fn close(self: Box<Self>);
}

/// Event hubs reached without the SDK: a simulation's, in memory. The emulated host reads its
/// triggers' partitions ([`EventSource`]) and sends its `eventHub` outputs' events through it.
#[async_trait]
pub trait EventHubs: Send + Sync + 'static {
    /// The partitions of `target`'s event hub.
    fn source(&self, target: &EventHubTarget) -> std::sync::Arc<dyn EventSource>;

    /// Appends `bodies` to `target`'s event hub (round-robin across its partitions, as a
    /// send without a partition key is spread), each with `properties`.
    async fn send(
        &self,
        target: &EventHubTarget,
        bodies: Vec<Vec<u8>>,
        properties: &[(String, String)],
    ) -> Result<(), String>;
}

/// An event hub reached through `azure_messaging_eventhubs`.
pub struct AmqpSource {
    target: EventHubTarget,
    /// Shared by the pumps of one consumer: when many ask at once (every idle partition checks
    /// whether its receiver stalled), one read answers them all.
    ends: PartitionEndsCache,
}

impl AmqpSource {
    pub fn new(target: EventHubTarget) -> Self {
        AmqpSource {
            target,
            ends: PartitionEndsCache::default(),
        }
    }
}

#[async_trait]
impl EventSource for AmqpSource {
    async fn open(
        &self,
        consumer_group: &str,
        partition: &str,
        position: &StartPosition,
        prefetch: u32,
    ) -> Result<Box<dyn PartitionReceiver>, String> {
        let client = tokio::time::timeout(OPEN_TIMEOUT, self.target.consumer(consumer_group))
            .await
            .map_err(|_| format!("no connection within {OPEN_TIMEOUT:?}"))?
            .map_err(|e| e.to_string())?;
        let options = OpenReceiverOptions {
            owner_level: Some(0),
            prefetch: Some(prefetch),
            start_position: Some(sdk_position(position)),
            receive_timeout: None,
        };
        let opened = tokio::time::timeout(
            OPEN_TIMEOUT,
            client.open_receiver_on_partition(partition.to_string(), Some(options)),
        )
        .await;
        match opened {
            Ok(Ok(receiver)) => Ok(Box::new(AmqpReceiver { client, receiver })),
            Ok(Err(e)) => {
                close_quietly("consumer", client.close()).await;
                Err(e.to_string())
            }
            Err(_) => {
                close_quietly("consumer", client.close()).await;
                Err(format!("the receiver did not open within {OPEN_TIMEOUT:?}"))
            }
        }
    }

    async fn partition_ends(&self, max_age: Duration) -> Result<Vec<PartitionEnd>, EventHubsError> {
        if max_age.is_zero() {
            return self.target.partition_ends().await;
        }
        self.ends
            .get(&self.target, max_age)
            .await
            .ok_or_else(|| EventHubsError::Properties {
                hub: self.target.hub.clone(),
                namespace: self.target.namespace.clone(),
                message: "no answer".into(),
            })
    }
}

struct AmqpReceiver {
    client: ConsumerClient,
    receiver: EventReceiver,
}

#[async_trait]
impl PartitionReceiver for AmqpReceiver {
    fn events(&self) -> BoxStream<'_, Result<EventRecord, ReceiveError>> {
        self.receiver
            .stream_events()
            .map(|next| match next {
                Ok(event) => Ok(crate::pump::to_record(&event)),
                Err(e) if matches!(e.kind, ErrorKind::ConsumerDisconnected(_)) => {
                    Err(ReceiveError::Stolen(e.to_string()))
                }
                Err(e) => Err(ReceiveError::Broken(e.to_string())),
            })
            .boxed()
    }

    async fn close(self: Box<Self>) {
        let AmqpReceiver { client, receiver } = *self;
        close_quietly("receiver", receiver.close()).await;
        close_quietly("consumer", client.close()).await;
    }
}

fn sdk_position(position: &StartPosition) -> SdkStartPosition {
    let (location, inclusive) = match position {
        StartPosition::Earliest => (StartLocation::Earliest, false),
        StartPosition::Latest => (StartLocation::Latest, false),
        StartPosition::EnqueuedTime(t) => (StartLocation::EnqueuedTime((*t).into()), false),
        StartPosition::AfterOffset(o) => (StartLocation::Offset(o.clone()), false),
        StartPosition::AfterSequenceNumber(s) => (StartLocation::SequenceNumber(*s), false),
    };
    SdkStartPosition {
        location,
        inclusive,
    }
}

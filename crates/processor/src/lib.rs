//! The event processor: how a pool of instances shares an event hub's partitions and reads them.
//!
//! - `balancer` decides, as a pure function, which partitions this instance should own each
//!   cycle (tested by deterministic simulation in `tests/balancer_simulation.rs`);
//! - `instance` is one instance's loop: read the ownerships, ask the balancer, claim under
//!   ETags, start a pump for each partition won, stop the pump of each partition lost, and on
//!   shutdown checkpoint and relinquish;
//! - `pump` reads one partition and hands its batches to a [`BatchHandler`] (the emulated
//!   Functions host invokes the custom handler with them);
//! - `source` is where a pump's events come from: the event hub through
//!   `azure_messaging_eventhubs` ([`source::AmqpSource`]), or a simulation's hub;
//! - `options` reads host.json's `extensions.eventHubs`.
//!
//! Reaching the event hub (receivers, partition ends) is `hubhost-eventhubs`'; the ownership
//! and checkpoint blobs, and the requests that read and write them, are `hubhost-checkpoints`'.
//!
//! Every instance of a pool runs the same code against the same event hub and checkpoint store;
//! nothing else connects them, which is why hubhost instances, the Functions host and the SDKs'
//! processors can share one consumer group.

pub mod amqp_json;
pub mod balancer;
pub(crate) mod instance;
pub(crate) mod options;
pub(crate) mod pump;
pub mod source;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use instance::{EventProcessor, ProcessorError};
pub use options::{OptionsError, ProcessorOptions};
pub use pump::{BatchHandler, BatchOutcome, PartitionPump, PumpControl, PumpExit, to_record};

use hubhost_checkpoints::{CheckpointStore, ConsumerGroupKey};
use hubhost_eventhubs::EventHubTarget;
use hubhost_metrics::{Exposition, Kind};
use hubhost_trigger::batch::{EventRecord, PartitionContext};

/// One batch of one partition, as the trigger delivers it.
#[derive(Debug, Clone)]
pub struct PartitionBatch {
    pub context: PartitionContext,
    pub events: Vec<EventRecord>,
}

/// Counters of one processor (one consumer group in one instance).
#[derive(Debug, Default)]
pub struct ProcessorStats {
    pub events: AtomicU64,
    pub batches: AtomicU64,
    pub failed_batches: AtomicU64,
    /// Deliveries the handler gave no answer to (each is delivered again, never checkpointed).
    pub undelivered_batches: AtomicU64,
    pub checkpoints: AtomicU64,
    pub storage_errors: AtomicU64,
    pub ownership_claims_lost: AtomicU64,
    pub pumps_running: AtomicU64,
    /// Receivers reopened because they delivered nothing while the hub held newer events.
    pub stalled_receivers: AtomicU64,
    /// The last sequence number handed to the function, per partition this instance reads.
    pub progress: std::sync::Mutex<std::collections::BTreeMap<String, i64>>,
}

/// What every pump of a processor shares: where to read, where ownership and checkpoints live,
/// how to read, and who processes the batches.
pub struct Consumer {
    /// The function this consumer feeds (named in logs and metrics).
    pub function: String,
    /// The app setting its connection comes from (named in errors).
    pub connection: String,
    pub target: EventHubTarget,
    pub key: ConsumerGroupKey,
    pub store: CheckpointStore,
    pub options: ProcessorOptions,
    /// A cardinality-one function gets one event per invocation.
    pub single_event: bool,
    pub handler: Arc<dyn BatchHandler>,
    pub stats: Arc<ProcessorStats>,
    /// Where the partitions' events come from (the event hub over AMQP, or a simulation's),
    /// and their ends, for pumps that check whether their receiver stalled.
    pub events: Arc<dyn source::EventSource>,
}

/// The processors' counters as Prometheus families, one sample per consumer.
pub fn write_metrics(page: &mut Exposition, consumers: &[Arc<Consumer>]) {
    type Read = fn(&ProcessorStats) -> &AtomicU64;
    let families: [(&str, Kind, &str, Read); 9] = [
        (
            "hubhost_events_processed_total",
            Kind::Counter,
            "Events handed to the function (a retried batch counts once).",
            |s| &s.events,
        ),
        (
            "hubhost_batches_processed_total",
            Kind::Counter,
            "Batches handed to the function.",
            |s| &s.batches,
        ),
        (
            "hubhost_batches_failed_total",
            Kind::Counter,
            "Batches whose invocation failed after the function's retries.",
            |s| &s.failed_batches,
        ),
        (
            "hubhost_batches_not_processed_total",
            Kind::Counter,
            "Deliveries the handler gave no answer to (down or restarting); delivered again, never checkpointed.",
            |s| &s.undelivered_batches,
        ),
        (
            "hubhost_checkpoints_written_total",
            Kind::Counter,
            "Checkpoints written.",
            |s| &s.checkpoints,
        ),
        (
            "hubhost_storage_errors_total",
            Kind::Counter,
            "Failed checkpoint store operations (ownership or checkpoints).",
            |s| &s.storage_errors,
        ),
        (
            "hubhost_ownership_claims_lost_total",
            Kind::Counter,
            "Ownership claims another instance won (HTTP 412).",
            |s| &s.ownership_claims_lost,
        ),
        (
            "hubhost_receivers_stalled_total",
            Kind::Counter,
            "Receivers reopened because they delivered nothing while the hub held newer events.",
            |s| &s.stalled_receivers,
        ),
        (
            "hubhost_owned_partitions",
            Kind::Gauge,
            "Partitions this instance reads now.",
            |s| &s.pumps_running,
        ),
    ];
    for (name, kind, help, read) in families {
        page.family(
            name,
            kind,
            help,
            consumers.iter().map(|c| {
                (
                    vec![
                        ("function", c.function.as_str()),
                        ("eventhub", c.key.event_hub.as_str()),
                        ("consumer_group", c.consumer_group()),
                    ],
                    read(&c.stats).load(Ordering::Relaxed) as f64,
                )
            }),
        );
    }
}

impl Consumer {
    pub fn consumer_group(&self) -> &str {
        &self.key.consumer_group
    }

    pub fn max_batch_size(&self) -> usize {
        if self.single_event {
            1
        } else {
            self.options.max_batch_size.max(1)
        }
    }
}

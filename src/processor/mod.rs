//! The event processor: how a pool of instances shares an event hub's partitions and reads them.
//!
//! - `balancer` decides, as a pure function, which partitions this instance should own each
//!   cycle (tested by deterministic simulation in `tests/balancer_simulation.rs`);
//! - `instance` is one instance's loop: read the ownerships, ask the balancer, claim under
//!   ETags, start a pump for each partition won, stop the pump of each partition lost, and on
//!   shutdown checkpoint and relinquish;
//! - `pump` reads one partition through `azure_messaging_eventhubs` and hands its batches to a
//!   [`BatchHandler`] (the emulated Functions host invokes the custom handler with them);
//! - `options` reads host.json's `extensions.eventHubs`.
//!
//! Every instance of a pool runs the same code against the same event hub and checkpoint store;
//! nothing else connects them, which is why hubhost instances, the Functions host and the SDKs'
//! processors can share one consumer group.

pub mod balancer;
pub mod instance;
pub mod options;
pub mod pump;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

pub use instance::{EventProcessor, ProcessorError};
pub use options::ProcessorOptions;
pub use pump::{BatchHandler, BatchOutcome, PartitionPump, PumpControl, PumpExit};

use crate::batch::{EventRecord, PartitionContext};
use crate::checkpoint::{CheckpointStore, ConsumerGroupKey};
use crate::eventhubs::EventHubTarget;

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
    pub checkpoints: AtomicU64,
    pub storage_errors: AtomicU64,
    pub ownership_claims_lost: AtomicU64,
    pub pumps_running: AtomicU64,
}

/// What every pump of a processor shares: where to read, where ownership and checkpoints live,
/// how to read, and who processes the batches.
pub struct Consumer {
    pub target: EventHubTarget,
    pub key: ConsumerGroupKey,
    pub store: CheckpointStore,
    pub options: ProcessorOptions,
    /// A cardinality-one function gets one event per invocation.
    pub single_event: bool,
    pub handler: Arc<dyn BatchHandler>,
    pub stats: Arc<ProcessorStats>,
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

//! What a rehearsal runs an app on: real processes over the local hub ([`crate::LocalApp`]) or
//! the deterministic simulation ([`crate::simulation`]). The plan, the driver that fires its
//! faults, and the audit of the outputs are one code over both; a stage only carries out what
//! it is asked and says what the services hold afterwards.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::local_app::LocalAppError;
use hubhost_checkpoints::ConsumerGroupKey;
use hubhost_functions::function_app::FunctionApp;
use hubhost_host::emulate::AppSettings;
use hubhost_host::emulate::faults::{FaultSwitch, GivenUp};
use hubhost_hub::admin::EventView;

#[async_trait]
pub(crate) trait Stage: Send + Sync {
    /// The app as its instances read it, and its settings.
    fn app(&self) -> Result<(FunctionApp, AppSettings), LocalAppError>;

    /// The owner ids of the running instances, the first started first.
    fn instance_ids(&self) -> Vec<String>;

    /// Instance `id`'s fault switches.
    fn faults_of(&self, id: &str) -> Option<Arc<FaultSwitch>>;

    /// One more instance (a scale-out), running once this returns.
    async fn start_instance(&mut self, id: &str) -> Result<(), LocalAppError>;

    /// Stops instance `id` as Azure scales one in.
    async fn stop_instance(&mut self, id: &str) -> Result<(), LocalAppError>;

    /// Stops every instance as Azure stops them.
    async fn stop_instances(&mut self) -> Result<(), LocalAppError>;

    /// The hub ends every receive link of `hub` (server busy, or a link it moves).
    fn detach(&self, hub: &str, server_busy: bool);

    /// Events handed to the function so far, by every instance (the plan's clock).
    fn events_handed_out(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Whether `function` has answered every partition's batches through `last[partition]`.
    fn answered_through(&self, function: &str, last: &[i64]) -> bool;

    /// Sends `bodies` to `hub`, `per_tick` every `tick`, body `i` to partition `i` modulo the
    /// hub's partition count when it is sent.
    fn send_paced(
        &self,
        hub: &str,
        bodies: Vec<Vec<u8>>,
        per_tick: usize,
        tick: Duration,
    ) -> BoxFuture<'static, Result<Sent, LocalAppError>>;

    /// Adds `added` partitions to `hub` while it runs (simulated only).
    fn add_partitions(&self, hub: &str, added: u32) -> Result<usize, LocalAppError>;

    /// Deletes `hub` and creates it again, empty, with its partition count (simulated only).
    fn recreate_hub(&self, hub: &str) -> Result<(), LocalAppError>;

    /// The checkpoints of `key` past their partition's end: what a recreated hub leaves.
    async fn checkpoints_past_end(
        &self,
        key: &ConsumerGroupKey,
    ) -> Result<Vec<CheckpointPastEnd>, LocalAppError>;

    /// Every event `hub` holds, with its partition.
    async fn held_events(&self, hub: &str) -> Result<Vec<(String, EventView)>, LocalAppError>;

    /// Every blob of `container`, by name.
    async fn held_blobs(&self, container: &str)
    -> Result<BTreeMap<String, Vec<u8>>, LocalAppError>;

    /// What output `binding` of `function` was handed, kept in the outbox.
    fn kept(&self, function: &str, binding: &str) -> Result<Vec<Value>, LocalAppError>;

    /// The batches given up after their failures (lost on Azure).
    fn given_up(&self) -> Vec<GivenUp>;

    /// What the instances said of answers that set outputs function.json does not declare.
    fn undeclared_outputs(&self) -> Vec<String>;
}

/// Where a rehearsal's inputs went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Per input, the partition it was sent to.
    pub partitions: Vec<u32>,
    /// Per partition (by number), the sequence number of the last input sent to it, in the
    /// hub as it is now; -1 where none went.
    pub last_sequence: Vec<i64>,
}

impl Sent {
    /// `inputs` sent round-robin over `partitions` partitions of a hub that held none before.
    pub fn round_robin(inputs: usize, partitions: u32) -> Sent {
        let mut sent = Sent {
            partitions: Vec::with_capacity(inputs),
            last_sequence: vec![-1; partitions as usize],
        };
        for i in 0..inputs {
            let partition = i as u32 % partitions;
            sent.record(partition, sent.last_sequence[partition as usize] + 1);
        }
        sent
    }

    /// The next input went to `partition`, at `sequence`.
    pub fn record(&mut self, partition: u32, sequence: i64) {
        let at = partition as usize;
        if self.last_sequence.len() <= at {
            self.last_sequence.resize(at + 1, -1);
        }
        self.last_sequence[at] = sequence;
        self.partitions.push(partition);
    }
}

/// A checkpoint ahead of its partition's last event: the event hub was recreated (or its
/// checkpoints copied from another). The service refuses to read from it ("The supplied
/// sequence number … is invalid"), until the partition passes it; then the events up to it are
/// skipped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointPastEnd {
    pub partition: String,
    pub checkpoint_sequence: i64,
    /// The partition's last sequence number (-1: empty).
    pub last_sequence: i64,
}

impl CheckpointPastEnd {
    pub fn describe(&self) -> String {
        format!(
            "partition {}: its checkpoint (sequence {}) is past its last event ({}), as a recreated event hub leaves it; on Azure the trigger fails to read the partition until it reaches sequence {}, then skips events 0 to {}; `hubhost checkpoints reset --to start` moves the checkpoints back",
            self.partition,
            self.checkpoint_sequence,
            self.last_sequence,
            self.checkpoint_sequence,
            self.checkpoint_sequence
        )
    }
}

//! One instance of a pool: the load-balancing loop around the pure [`balancer::plan`].
//!
//! Each cycle: list the consumer group's ownerships, plan, send every claim (renewals, takes,
//! steals) under the ETags seen, then make the running pumps match what was won — a pump for
//! each partition won, and a stop (without checkpoint) for each partition no longer ours. When
//! the store cannot be read or written, pumps keep running only while their last renewal is
//! younger than the ownership expiry: after that another instance may own them.
//!
//! Shutdown is graceful: every pump finishes its batch and checkpoints, then the instance
//! relinquishes its ownerships (owner cleared under the ETag it holds), so the others take the
//! partitions on their next cycle instead of after the expiry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Consumer;
use super::balancer;
use super::pump::{PartitionPump, PumpControl, PumpExit};
use hubhost_checkpoints::PartitionOwnership;
use hubhost_eventhubs::EventHubsError;

/// Jitter for the cycle's wait: splitmix64, seeded per instance, so that instances that start
/// together drift apart. Nothing here needs more than that.
struct Jitter(u64);

impl Jitter {
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// How long shutdown waits for pumps to finish their batch before relinquishing anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// How often the event hub's partition ids are read again while running: partitions can be
/// added to a Premium or Dedicated event hub, and the SDK processors the host runs list them
/// every load-balancing cycle (the .NET `EventProcessor`'s `RunProcessingAsync`). Read beside
/// the cycle rather than in it, so that a slow answer never delays the renewals; at most this
/// often, since each read is a connection and a management request per partition.
const PARTITION_IDS_REFRESH: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ProcessorError {
    #[error(transparent)]
    EventHub(#[from] EventHubsError),
}

struct RunningPump {
    control: PumpControl,
    task: JoinHandle<PumpExit>,
    ownership: PartitionOwnership,
    renewed: Instant,
    stopping: bool,
}

/// The partition ids read again every [`PARTITION_IDS_REFRESH`], in a task of its own.
struct PartitionIdsRefresh {
    reading: Option<JoinHandle<Option<Vec<String>>>>,
    next: Instant,
}

impl PartitionIdsRefresh {
    fn new() -> Self {
        PartitionIdsRefresh {
            reading: None,
            next: Instant::now() + PARTITION_IDS_REFRESH,
        }
    }

    /// The ids of a read that has finished (`None` while none has, or when it failed: the
    /// known ids stand until the next read); starts the next read when one is due.
    fn poll(&mut self, consumer: &Consumer) -> Option<Vec<String>> {
        let mut read = None;
        if self.reading.as_ref().is_some_and(|r| r.is_finished()) {
            let finished = self.reading.take().expect("checked above");
            read = futures::FutureExt::now_or_never(finished)
                .and_then(Result::ok)
                .flatten();
        }
        if self.reading.is_none() && Instant::now() >= self.next {
            self.next = Instant::now() + PARTITION_IDS_REFRESH;
            let events = consumer.events.clone();
            self.reading = Some(tokio::spawn(async move {
                match events.partition_ends(PARTITION_IDS_REFRESH).await {
                    Ok(ends) => Some(ends.into_iter().map(|e| e.partition_id).collect()),
                    Err(error) => {
                        tracing::debug!(%error, "reading the partition ids again failed; keeping the known ones");
                        None
                    }
                }
            }));
        }
        read
    }
}

impl Drop for PartitionIdsRefresh {
    fn drop(&mut self) {
        if let Some(reading) = self.reading.take() {
            reading.abort();
        }
    }
}

/// The same partitions, in whatever order each read listed them.
fn same_ids(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().collect::<BTreeSet<_>>() == b.iter().collect::<BTreeSet<_>>()
}

pub struct EventProcessor {
    consumer: Arc<Consumer>,
    owner_id: String,
}

impl EventProcessor {
    pub fn new(consumer: Arc<Consumer>, owner_id: impl Into<String>) -> Self {
        EventProcessor {
            consumer,
            owner_id: owner_id.into(),
        }
    }

    pub fn owner_id(&self) -> &str {
        &self.owner_id
    }

    /// Runs until `stop` fires, then shuts down gracefully.
    pub async fn run(self, stop: CancellationToken) -> Result<(), ProcessorError> {
        let partitions = tokio::select! {
            biased;
            _ = stop.cancelled() => return Ok(()),
            ids = self.partition_ids() => ids?,
        };
        let settings = self.consumer.options.balancer.clone();
        let mut jitter = Jitter(
            self.owner_id
                .bytes()
                .fold(hubhost_clock::now().timestamp_micros() as u64, |h, b| {
                    h.rotate_left(5) ^ u64::from(b)
                }),
        );
        let mut partitions = partitions;
        let mut pumps: BTreeMap<String, RunningPump> = BTreeMap::new();
        let mut refresh = PartitionIdsRefresh::new();
        tracing::info!(owner = %self.owner_id, hub = %self.consumer.target.hub, consumer_group = %self.consumer.consumer_group(), partitions = partitions.len(), "processor started");
        loop {
            if let Some(ids) = refresh.poll(&self.consumer)
                && !same_ids(&ids, &partitions)
            {
                tracing::warn!(owner = %self.owner_id, hub = %self.consumer.target.hub, was = partitions.len(), now = ids.len(), "the event hub's partitions changed; balancing across them (a partition without a checkpoint starts at the initial offset)");
                partitions = ids;
            }
            pumps.retain(|partition, pump| {
                let finished = pump.task.is_finished();
                if finished {
                    tracing::debug!(%partition, "pump finished");
                }
                !finished
            });
            let balanced = self.cycle(&partitions, &mut pumps).await;
            // Pumps we could not renew for a whole expiry may belong to someone else now.
            for (partition, pump) in pumps.iter_mut() {
                if !pump.stopping && pump.renewed.elapsed() >= settings.ownership_expiry {
                    tracing::warn!(%partition, "ownership could not be renewed before it expired; stopping the pump");
                    pump.control.ownership_lost();
                    pump.stopping = true;
                }
            }
            let wait = settings.next_wait(balanced, jitter.unit());
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        self.shutdown(pumps).await;
        Ok(())
    }

    /// The event hub's partition ids, retried until the hub answers (it may still be starting).
    async fn partition_ids(&self) -> Result<Vec<String>, ProcessorError> {
        let mut wait = Duration::from_millis(500);
        // The same failure is said once (a wrong key fails every attempt alike), then again
        // only when it changes; the retries go on meanwhile.
        let mut said = None::<String>;
        loop {
            match self.consumer.events.partition_ends(Duration::ZERO).await {
                Ok(ends) => {
                    if said.is_some() {
                        tracing::info!(function = %self.consumer.function, "the event hub answers now");
                    }
                    return Ok(ends.into_iter().map(|e| e.partition_id).collect());
                }
                Err(e @ EventHubsError::BadConnectionString(_)) => return Err(e.into()),
                Err(e) => {
                    let error = e.to_string();
                    if said.as_ref() != Some(&error) {
                        tracing::warn!(
                            function = %self.consumer.function,
                            connection = %self.consumer.connection,
                            %error,
                            "cannot read the event hub's partitions; retrying until it answers (this is said again only if the error changes)"
                        );
                        said = Some(error);
                    } else {
                        tracing::debug!(function = %self.consumer.function, retry_in = ?wait, "the event hub still does not answer");
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// One load-balancing cycle; returns whether this instance is balanced.
    async fn cycle(
        &self,
        partitions: &[String],
        pumps: &mut BTreeMap<String, RunningPump>,
    ) -> bool {
        let consumer = &self.consumer;
        let ownerships = match consumer.store.list_ownership(&consumer.key).await {
            Ok(o) => o,
            Err(e) => return self.storage_failed("listing ownerships", &e),
        };
        let plan = balancer::plan(
            &ownerships,
            partitions,
            &self.owner_id,
            hubhost_clock::now(),
            &consumer.options.balancer,
        );
        let outcome = consumer
            .store
            .try_claim_ownership(&consumer.key, &plan.claims)
            .await;
        if !plan.claims.is_empty() && outcome.failed.len() == plan.claims.len() {
            return self.storage_failed("claiming ownership", &outcome.failed[0].1);
        }
        if let Some((_, e)) = outcome.failed.first() {
            // Some blobs did not answer (one shard of a local store locked by a stopped
            // process, say): those partitions are neither won nor lost this cycle. A pump
            // keeps running until its ownership goes unrenewed for a whole expiry (above).
            consumer
                .stats
                .storage_errors
                .fetch_add(1, Ordering::Relaxed);
            let partitions: Vec<&str> = outcome.failed.iter().map(|(p, _)| p.as_str()).collect();
            tracing::warn!(owner = %self.owner_id, ?partitions, error = %e, "some ownership claims failed; retrying next cycle");
        }
        let won = outcome.won;
        let lost_claims = outcome.lost.len();
        consumer
            .stats
            .ownership_claims_lost
            .fetch_add(lost_claims as u64, Ordering::Relaxed);
        if !plan.take.is_empty() || !plan.steal.is_empty() || lost_claims > 0 {
            tracing::info!(owner = %self.owner_id, took = ?plan.take, stole = ?plan.steal, claims_lost = lost_claims, share = ?(plan.min, plan.max), "ownership changing");
        }
        let undecided: BTreeSet<&str> = outcome.failed.iter().map(|(p, _)| p.as_str()).collect();
        let won_ids: BTreeSet<&str> = won.iter().map(|o| o.partition_id.as_str()).collect();
        for (partition, pump) in pumps.iter_mut() {
            if !pump.stopping
                && !won_ids.contains(partition.as_str())
                && !undecided.contains(partition.as_str())
            {
                tracing::info!(%partition, "ownership lost; stopping the pump without a checkpoint");
                pump.control.ownership_lost();
                pump.stopping = true;
            }
        }
        for ownership in won {
            match pumps.get_mut(&ownership.partition_id) {
                Some(pump) if !pump.stopping => {
                    pump.ownership = ownership;
                    pump.renewed = Instant::now();
                }
                // Still draining after a loss: started again next cycle, once it has ended.
                Some(_) => {}
                None => {
                    let control = PumpControl::default();
                    let pump = PartitionPump::new(
                        consumer.clone(),
                        ownership.partition_id.clone(),
                        control.clone(),
                    );
                    let task = tokio::spawn(pump.run());
                    pumps.insert(
                        ownership.partition_id.clone(),
                        RunningPump {
                            control,
                            task,
                            ownership,
                            renewed: Instant::now(),
                            stopping: false,
                        },
                    );
                }
            }
        }
        plan.balanced && lost_claims == 0 && outcome.failed.is_empty()
    }

    /// Counts and logs a failed store call; the cycle then counts as unbalanced (retried soon).
    fn storage_failed(&self, what: &str, error: &hubhost_checkpoints::CheckpointError) -> bool {
        self.consumer
            .stats
            .storage_errors
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%error, "{what} failed");
        false
    }

    async fn shutdown(&self, pumps: BTreeMap<String, RunningPump>) {
        tracing::info!(owner = %self.owner_id, partitions = pumps.len(), "stopping: finishing batches, checkpointing, relinquishing");
        for pump in pumps.values() {
            if !pump.stopping {
                pump.control.stop();
            }
        }
        let mut relinquish = Vec::new();
        for (partition, pump) in pumps {
            let ended = tokio::time::timeout(SHUTDOWN_GRACE, pump.task).await;
            if ended.is_err() {
                tracing::warn!(%partition, "the pump did not stop within {SHUTDOWN_GRACE:?}");
            }
            if !pump.stopping {
                relinquish.push(pump.ownership);
            }
        }
        let key = &self.consumer.key;
        let results = futures::future::join_all(
            relinquish
                .iter()
                .map(|o| self.consumer.store.relinquish(key, o)),
        )
        .await;
        let released = results.iter().filter(|r| matches!(r, Ok(true))).count();
        for (o, r) in relinquish.iter().zip(&results) {
            if let Err(e) = r {
                tracing::warn!(partition = %o.partition_id, error = %e, "relinquishing failed; the partition moves once the ownership expires");
            }
        }
        tracing::info!(owner = %self.owner_id, released, "processor stopped");
    }
}

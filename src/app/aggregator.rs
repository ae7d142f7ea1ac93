//! The `SensorAggregator` function: folds a batch of sensor readings into the per-partition,
//! per-window aggregates, keeps the home directory current, and sets poison events aside.
//!
//! Every write is idempotent, so a batch that fails half-way (storage down) can simply be
//! retried whole by the host, and a batch replayed after a crash or rebalance changes nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::aggregate::{AppliedRanges, FoldOutcome, WindowAggregate, window_start};
use super::deadletter::DeadLetters;
use super::layout;
use super::sensor::{Reading, parse_reading};
use super::versioned::VersionedDocs;
use super::{AppError, BatchReport};
use crate::batch::TriggerBatch;
use crate::storage::SharedStore;

/// Storage writes of one batch that may run at once (different blobs).
const WRITE_CONCURRENCY: usize = 8;
/// Bound on the known-homes memo (about 100 bytes each).
const MAX_KNOWN_HOMES: usize = 1_000_000;

/// A bucket of the home directory: home id → partition id.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HomeDirectory {
    pub homes: BTreeMap<String, String>,
}

pub struct Aggregator {
    window_seconds: u32,
    windows: VersionedDocs<WindowAggregate>,
    directory: VersionedDocs<HomeDirectory>,
    /// (home, partition) pairs known to be in the stored directory: skips directory writes.
    known_homes: Mutex<HashSet<(String, String)>>,
    dead_letters: DeadLetters,
}

impl Aggregator {
    pub fn new(store: SharedStore, container: &str, window_seconds: u32) -> Self {
        Aggregator {
            window_seconds,
            windows: VersionedDocs::new(store.clone(), container, 64),
            directory: VersionedDocs::new(store.clone(), container, 512),
            known_homes: Mutex::new(HashSet::new()),
            dead_letters: DeadLetters::new(store, container),
        }
    }

    pub async fn process(&self, batch: &TriggerBatch) -> Result<BatchReport, AppError> {
        let hub = layout::segment("event hub name", batch.hub_name())?;
        let partition = layout::segment("partition id", &batch.partition.partition_id)?;
        let mut report = BatchReport {
            events: batch.events.len() as u64,
            ..Default::default()
        };

        // Parse; poison events go to the dead-letter store, the rest are grouped by window.
        let mut by_window: BTreeMap<DateTime<Utc>, Vec<(Option<i64>, Reading)>> = BTreeMap::new();
        for event in &batch.events {
            match parse_reading(&event.body, event.enqueued_time) {
                Ok(reading) => by_window
                    .entry(window_start(reading.time, self.window_seconds))
                    .or_default()
                    .push((event.sequence_number, reading)),
                Err(reason) => {
                    self.dead_letters
                        .put(batch, event, &reason.to_string())
                        .await?;
                    report.dead_lettered += 1;
                }
            }
        }
        let runs = AppliedRanges::runs_of(batch.events.iter().filter_map(|e| e.sequence_number));
        report.without_sequence_number = batch
            .events
            .iter()
            .filter(|e| e.sequence_number.is_none())
            .count() as u64;

        let folds = by_window
            .iter()
            .map(|(start, readings)| self.fold_window(&hub, &partition, *start, readings, &runs));
        let outcomes = futures::future::try_join_all(folds).await?;
        for o in outcomes {
            report.applied += o.applied;
            report.replayed += o.replayed;
        }
        report.windows = by_window.len() as u64;

        let homes: HashSet<&str> = by_window
            .values()
            .flatten()
            .map(|(_, r)| r.home_id.as_str())
            .collect();
        report.homes = homes.len() as u64;
        self.index_homes(&hub, &partition, homes).await?;
        Ok(report)
    }

    /// Records home → partition for homes not yet known to be in the stored directory.
    async fn index_homes(
        &self,
        hub: &str,
        partition: &str,
        homes: HashSet<&str>,
    ) -> Result<(), AppError> {
        let mut by_bucket: HashMap<u64, Vec<String>> = HashMap::new();
        {
            let known = self.known_homes.lock().expect("known homes lock");
            for home in homes {
                if !known.contains(&(home.to_string(), partition.to_string())) {
                    by_bucket
                        .entry(layout::home_bucket(home))
                        .or_default()
                        .push(home.to_string());
                }
            }
        }
        let by_bucket: Vec<(u64, Vec<String>)> = by_bucket.into_iter().collect();
        for chunk in by_bucket.chunks(WRITE_CONCURRENCY) {
            let writes = chunk
                .iter()
                .map(|(bucket, homes)| self.index_bucket(hub, partition, *bucket, homes));
            futures::future::try_join_all(writes).await?;
        }
        Ok(())
    }

    async fn fold_window(
        &self,
        hub: &str,
        partition: &str,
        start: DateTime<Utc>,
        readings: &[(Option<i64>, Reading)],
        runs: &[(i64, i64)],
    ) -> Result<FoldOutcome, AppError> {
        let name = layout::window_blob(hub, start, partition);
        let refs: Vec<(Option<i64>, &Reading)> = readings.iter().map(|(s, r)| (*s, r)).collect();
        self.windows
            .update(
                &name,
                || WindowAggregate::new(hub, partition, start, self.window_seconds),
                |agg| {
                    let before = agg.applied.clone();
                    let outcome = agg.fold(runs, &refs);
                    // Recording new runs is a change even if every reading was a replay.
                    let changed = outcome.applied > 0 || agg.applied != before;
                    (outcome, changed)
                },
            )
            .await
    }

    async fn index_bucket(
        &self,
        hub: &str,
        partition: &str,
        bucket: u64,
        homes: &[String],
    ) -> Result<(), AppError> {
        let name = layout::home_directory_blob(hub, bucket);
        self.directory
            .update(&name, HomeDirectory::default, |dir| {
                let mut changed = false;
                for home in homes {
                    if dir.homes.get(home).map(String::as_str) != Some(partition) {
                        dir.homes.insert(home.clone(), partition.to_string());
                        changed = true;
                    }
                }
                ((), changed)
            })
            .await?;
        let mut known = self.known_homes.lock().expect("known homes lock");
        if known.len() > MAX_KNOWN_HOMES {
            known.clear();
        }
        known.extend(homes.iter().map(|h| (h.clone(), partition.to_string())));
        Ok(())
    }
}

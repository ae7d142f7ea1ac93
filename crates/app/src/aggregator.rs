//! The `SensorAggregator` function: folds a batch of sensor readings into the per-partition
//! window blocks, notes which partition each home reports on, and sets poison events aside.
//!
//! Every write is idempotent, so a batch that fails half-way (storage down) can simply be
//! retried whole by the host, and a batch replayed after a crash or rebalance changes nothing.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::aggregate::{
    AppliedRanges, FoldOutcome, WindowAggregate, block_of, runs_in_block, window_start,
};
use super::deadletter::DeadLetters;
use super::directory::Directory;
use super::layout;
use super::sensor::{Reading, parse_reading};
use super::versioned::VersionedDocs;
use super::{AlarmEvent, AppError, BatchReport};
use hubhost_functions::batch::TriggerBatch;
use hubhost_storage::SharedStore;

/// A window block blob's window start and block name.
type BlockKey = (DateTime<Utc>, String);

pub struct Aggregator {
    window_seconds: u32,
    blocks: VersionedDocs<WindowAggregate>,
    directory: Arc<Directory>,
    dead_letters: DeadLetters,
}

impl Aggregator {
    pub fn new(store: SharedStore, container: &str, window_seconds: u32) -> Self {
        Aggregator {
            window_seconds,
            // The working set is one or two blocks per owned partition.
            blocks: VersionedDocs::new(store.clone(), container, 256),
            directory: Directory::new(store.clone(), container),
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

        // Parse; poison events go to the dead-letter store, the rest are grouped by block.
        let mut by_block: BTreeMap<BlockKey, Vec<(Option<i64>, Reading)>> = BTreeMap::new();
        for event in &batch.events {
            match parse_reading(&event.body, event.enqueued_time) {
                Ok(reading) => {
                    if let Some(kind) = reading.alarm() {
                        report.alarms.push(AlarmEvent {
                            home_id: reading.home_id.clone(),
                            sensor_id: reading.sensor_id.clone(),
                            kind,
                            ts: reading.time,
                            partition_id: batch.partition.partition_id.clone(),
                            sequence_number: event.sequence_number,
                            enqueued: event.enqueued_time,
                        });
                    }
                    let window = window_start(reading.time, self.window_seconds);
                    by_block
                        .entry((window, block_of(event.sequence_number)))
                        .or_default()
                        .push((event.sequence_number, reading))
                }
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

        let folds = by_block.iter().map(|((start, block), readings)| {
            self.fold_block(&hub, &partition, *start, block, readings, &runs)
        });
        let outcomes = futures::future::try_join_all(folds).await?;
        for (o, enqueued) in outcomes {
            report.applied += o.applied;
            report.replayed += o.replayed;
            report.applied_enqueued.extend(enqueued);
        }
        report.windows = by_block
            .keys()
            .map(|(w, _)| *w)
            .collect::<HashSet<_>>()
            .len() as u64;

        let homes: HashSet<&str> = by_block
            .values()
            .flatten()
            .map(|(_, r)| r.home_id.as_str())
            .collect();
        report.homes = homes.len() as u64;
        self.directory.note(&hub, &partition, homes);
        Ok(report)
    }

    /// Writes the home directory entries noted so far (when the handler stops).
    pub async fn flush(&self) -> Result<(), AppError> {
        self.directory.flush().await
    }

    async fn fold_block(
        &self,
        hub: &str,
        partition: &str,
        start: DateTime<Utc>,
        block: &str,
        readings: &[(Option<i64>, Reading)],
        runs: &[(i64, i64)],
    ) -> Result<(FoldOutcome, Vec<DateTime<Utc>>), AppError> {
        let name = layout::window_block_blob(hub, start, partition, block);
        let refs: Vec<(Option<i64>, &Reading)> = readings.iter().map(|(s, r)| (*s, r)).collect();
        let runs = runs_in_block(runs, block);
        self.blocks
            .update(
                &name,
                || WindowAggregate::new(hub, partition, start, self.window_seconds, block),
                |agg| {
                    // The enqueued times of the readings this fold applies (not the replays).
                    let fresh: Vec<DateTime<Utc>> = refs
                        .iter()
                        .filter(|(seq, _)| seq.is_none_or(|s| !agg.applied.contains(s)))
                        .filter_map(|(_, r)| r.enqueued)
                        .collect();
                    let before = agg.applied.clone();
                    let outcome = agg.fold(&runs, &refs);
                    // Recording new runs is a change even if every reading was a replay.
                    let changed = outcome.applied > 0 || agg.applied != before;
                    ((outcome, fresh), changed)
                },
            )
            .await
    }
}

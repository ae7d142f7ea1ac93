//! The batches this handler's functions are failing now, per function and partition: what the
//! page's Operations view shows as retrying. Kept from what each invocation says — its
//! `RetryContext` and its own outcome — so it works the same under `hubhost emulate` and on
//! Azure, where the host's own state is out of reach. Per handler process: each instance's page
//! shows its own.

use std::collections::BTreeMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// How many retrying partitions are kept at most (a partition's entry goes when its batch
/// succeeds; a partition that moved to another instance while failing leaves one behind).
const KEPT: usize = 256;

/// A partition whose batch failed and is being retried.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryingBatch {
    pub function: String,
    pub partition: String,
    /// Attempts that failed so far.
    pub failed_attempts: i64,
    /// When its first failure was seen here.
    pub since: DateTime<Utc>,
    /// What the last attempt failed with.
    pub last_error: String,
}

#[derive(Debug, Default)]
pub struct RetryBoard {
    failing: Mutex<BTreeMap<(String, String), RetryingBatch>>,
}

impl RetryBoard {
    /// Attempt `retry_count` (0: the first) of `function`'s batch on `partition` failed with
    /// `error`.
    pub fn failed(
        &self,
        function: &str,
        partition: &str,
        retry_count: i64,
        error: &str,
        now: DateTime<Utc>,
    ) {
        let mut failing = self.failing.lock().expect("retry board lock");
        let key = (function.to_string(), partition.to_string());
        if !failing.contains_key(&key) && failing.len() >= KEPT {
            // The longest-failing stay: they are the ones worth seeing.
            let newest = failing
                .iter()
                .max_by_key(|(_, r)| r.since)
                .map(|(k, _)| k.clone());
            if let Some(newest) = newest {
                failing.remove(&newest);
            }
        }
        let entry = failing.entry(key).or_insert_with(|| RetryingBatch {
            function: function.to_string(),
            partition: partition.to_string(),
            failed_attempts: 0,
            since: now,
            last_error: String::new(),
        });
        entry.failed_attempts = entry.failed_attempts.max(retry_count + 1);
        entry.last_error = error.chars().take(300).collect();
    }

    /// `function`'s batch on `partition` succeeded: nothing is being retried there.
    pub fn succeeded(&self, function: &str, partition: &str) {
        self.failing
            .lock()
            .expect("retry board lock")
            .remove(&(function.to_string(), partition.to_string()));
    }

    /// Every batch being retried, the longest-failing first.
    pub fn retrying(&self) -> Vec<RetryingBatch> {
        let mut all: Vec<RetryingBatch> = self
            .failing
            .lock()
            .expect("retry board lock")
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.since.cmp(&b.since).then(a.partition.cmp(&b.partition)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_batch_is_shown_until_it_succeeds() {
        let board = RetryBoard::default();
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        board.failed("F", "3", 0, "storage unavailable", t0);
        board.failed(
            "F",
            "3",
            4,
            "still unavailable",
            t0 + chrono::Duration::seconds(9),
        );
        let shown = board.retrying();
        assert_eq!(shown.len(), 1);
        assert_eq!(
            (
                shown[0].failed_attempts,
                shown[0].since,
                shown[0].last_error.as_str()
            ),
            (5, t0, "still unavailable")
        );
        board.succeeded("F", "3");
        assert!(board.retrying().is_empty());
    }

    #[test]
    fn the_board_is_bounded_and_keeps_the_longest_failing() {
        let board = RetryBoard::default();
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        for p in 0..(KEPT as i64 + 10) {
            board.failed(
                "F",
                &p.to_string(),
                0,
                "x",
                t0 + chrono::Duration::seconds(p),
            );
        }
        let shown = board.retrying();
        assert_eq!(shown.len(), KEPT);
        assert_eq!(shown[0].partition, "0");
    }
}

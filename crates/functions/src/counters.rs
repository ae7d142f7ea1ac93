//! What a function counts: the Prometheus counters ([`CounterFamily`]) and latency histograms
//! ([`HistogramFamily`]) the server declares, and their values per function ([`Counters`]),
//! which a function adds to through its context and `/metrics` reports.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use hubhost_metrics::{self as metrics, Histogram};

/// A counter a function declares: one Prometheus family, one sample per function.
#[derive(Debug, Clone, Copy)]
pub struct CounterFamily {
    /// The name a function counts by ([`FunctionContext::count`](crate::context::FunctionContext::count)).
    pub key: &'static str,
    /// The Prometheus family name, e.g. `myapp_events_rejected_total`.
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
}

/// A latency a function declares: one Prometheus histogram family, one series per function,
/// with buckets fine enough to read p99.9 from ([`metrics::fine_latency_buckets`]).
#[derive(Debug, Clone, Copy)]
pub struct HistogramFamily {
    /// The name a function observes by ([`FunctionContext::observe`](crate::context::FunctionContext::observe)).
    pub key: &'static str,
    /// The Prometheus family name, e.g. `myapp_event_age_seconds`.
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
}

/// The declared counters and histograms of one function.
pub struct Counters {
    values: BTreeMap<&'static str, AtomicU64>,
    pub(crate) histograms: BTreeMap<&'static str, Histogram>,
}

impl Counters {
    pub(crate) fn new(families: &[CounterFamily], histograms: &[HistogramFamily]) -> Self {
        Counters {
            values: families
                .iter()
                .map(|f| (f.key, AtomicU64::new(0)))
                .collect(),
            histograms: histograms
                .iter()
                .map(|h| (h.key, Histogram::new(metrics::fine_latency_buckets())))
                .collect(),
        }
    }

    /// Adds `n` to the counter declared with `key`; an undeclared key is ignored.
    pub fn add(&self, key: &str, n: u64) {
        if let Some(c) = self.values.get(key) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts one observation in the histogram declared with `key`; an undeclared key is
    /// ignored.
    pub fn observe(&self, key: &str, elapsed: std::time::Duration) {
        if let Some(h) = self.histograms.get(key) {
            h.observe(elapsed);
        }
    }

    /// What the counter declared with `key` has counted (0 if undeclared).
    pub fn get(&self, key: &str) -> u64 {
        self.values
            .get(key)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

//! What a function counts: the Prometheus counters ([`CounterFamily`]) and latency histograms
//! ([`HistogramFamily`]) the server declares, and their values per function ([`Counters`]),
//! which a function adds to through its context and `/metrics` reports.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::OnceLock;

use hubhost_metrics::{self as metrics, Histogram};
use hubhost_telemetry::opentelemetry::KeyValue;
use hubhost_telemetry::opentelemetry::metrics as otel;

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
    /// The histograms as OpenTelemetry instruments too, once metrics are exported
    /// ([`Counters::export_histograms`]); counters are read when the exporter collects.
    exported: OnceLock<ExportedHistograms>,
}

/// A function's declared histograms as OpenTelemetry instruments, with its `faas.name`.
struct ExportedHistograms {
    instruments: BTreeMap<&'static str, otel::Histogram<f64>>,
    function: [KeyValue; 1],
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
            exported: OnceLock::new(),
        }
    }

    /// From now on, every observation is recorded in an OpenTelemetry histogram too, one per
    /// family (named as in [`otel_name`], in seconds), labelled with `function`'s
    /// `faas.name`.
    pub(crate) fn export_histograms(&self, function: &str, families: &[HistogramFamily]) {
        let meter = hubhost_telemetry::meter("hubhost-functions");
        let instruments = families
            .iter()
            .map(|family| {
                let instrument = meter
                    .f64_histogram(otel_name(family.name))
                    .with_unit("s")
                    .with_description(family.help)
                    .build();
                (family.key, instrument)
            })
            .collect();
        let _ = self.exported.set(ExportedHistograms {
            instruments,
            function: [KeyValue::new("faas.name", function.to_string())],
        });
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
        if let Some(exported) = self.exported.get()
            && let Some(instrument) = exported.instruments.get(key)
        {
            instrument.record(elapsed.as_secs_f64(), &exported.function);
        }
    }

    /// What the counter declared with `key` has counted (0 if undeclared).
    pub fn get(&self, key: &str) -> u64 {
        self.values
            .get(key)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// A declared family's name as an OpenTelemetry metric: the Prometheus name without the
/// `_total` that Prometheus exporters add back to counters.
pub(crate) fn otel_name(prometheus_name: &str) -> &str {
    prometheus_name
        .strip_suffix("_total")
        .unwrap_or(prometheus_name)
}

/// Exports the declared counters as OpenTelemetry counters, read from each function's
/// [`Counters`] whenever the exporter collects (one series per function, by `faas.name`).
pub(crate) fn export_counters(
    families: &[CounterFamily],
    functions: Vec<(String, std::sync::Arc<Counters>)>,
) {
    let meter = hubhost_telemetry::meter("hubhost-functions");
    let functions = std::sync::Arc::new(functions);
    for family in families {
        let functions = functions.clone();
        let key = family.key;
        let _registered = meter
            .u64_observable_counter(otel_name(family.name))
            .with_description(family.help)
            .with_callback(move |observer| {
                for (function, counters) in functions.iter() {
                    observer.observe(
                        counters.get(key),
                        &[KeyValue::new("faas.name", function.clone())],
                    );
                }
            })
            .build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otel_names_drop_only_the_counter_suffix() {
        assert_eq!(
            otel_name("myapp_events_rejected_total"),
            "myapp_events_rejected"
        );
        assert_eq!(
            otel_name("myapp_event_age_seconds"),
            "myapp_event_age_seconds"
        );
        assert_eq!(otel_name("total"), "total");
    }

    #[test]
    fn undeclared_keys_are_ignored_and_exporting_keeps_the_prometheus_values() {
        let counters = Counters::new(
            &[CounterFamily {
                key: "seen",
                name: "t_seen_total",
                help: "h",
            }],
            &[HistogramFamily {
                key: "age",
                name: "t_age_seconds",
                help: "h",
            }],
        );
        counters.export_histograms("F", &[]);
        counters.add("seen", 2);
        counters.add("other", 5);
        counters.observe("age", std::time::Duration::from_millis(3));
        counters.observe("other", std::time::Duration::from_millis(3));
        assert_eq!((counters.get("seen"), counters.get("other")), (2, 0));
        assert_eq!(counters.histograms["age"].count(), 1);
    }
}

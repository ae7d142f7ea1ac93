//! What a function is, to the server that runs it: an [`EventHubFunction`] takes one batch of
//! one partition and its [`FunctionContext`], and returns what the host reads back, or a
//! [`FunctionError`] saying what the host must do; [`Counters`] are the Prometheus counters
//! and histograms it declares (counted through the context).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::batch::TriggerBatch;
use crate::context::FunctionContext;
use crate::output::FunctionOutput;
use hubhost_metrics::{self as metrics, Histogram};

/// Why a function did not process a batch, by what the host must do about it.
#[derive(Debug, thiserror::Error)]
pub enum FunctionError {
    /// The request itself is unusable (e.g. a name that cannot be stored): 400, and delivering
    /// it again would not help.
    #[error("{message}")]
    BadRequest {
        /// A stable, machine-readable code, e.g. `invalid_name`.
        code: &'static str,
        /// What is wrong, in words.
        message: String,
    },
    /// The batch could not be processed now (e.g. storage unreachable): 500, so that the host's
    /// retry policy delivers it again.
    #[error("{message}")]
    Failed {
        /// A stable, machine-readable code, e.g. `storage_unavailable`.
        code: &'static str,
        /// What went wrong, in words.
        message: String,
    },
}

/// A counter a function declares: one Prometheus family, one sample per function.
#[derive(Debug, Clone, Copy)]
pub struct CounterFamily {
    /// The name a function counts by ([`FunctionContext::count`]).
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
    /// The name a function observes by ([`FunctionContext::observe`]).
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

/// An Event Hubs-triggered function: one batch of one partition in, an answer out.
///
/// The host sends a partition's batches one at a time, in order; batches of different
/// partitions arrive concurrently. A function is registered under its name and found by
/// `POST /{name}`:
///
/// ```
/// use hubhost_functions::prelude::*;
/// use hubhost_functions::function_app::{Cardinality, DataType, EventHubTrigger, FunctionSpec, Trigger};
///
/// struct Echo;
///
/// #[async_trait]
/// impl EventHubFunction for Echo {
///     async fn run(&self, batch: TriggerBatch, context: &FunctionContext) -> Result<FunctionOutput, FunctionError> {
///         context.log(format!("{} events from partition {}", batch.events.len(), context.partition().partition_id));
///         let mut output = FunctionOutput::default();
///         for event in &batch.events {
///             let text = event.text().map_err(|e| FunctionError::BadRequest {
///                 code: "not_text",
///                 message: e.to_string(),
///             })?;
///             output.send_event_text("copies", text);
///         }
///         Ok(output)
///     }
/// }
///
/// // Without an app folder, the function's declaration is given here.
/// let declaration = FunctionSpec {
///     name: "Echo".into(),
///     trigger: Trigger::EventHub(EventHubTrigger {
///         binding_name: "events".into(),
///         event_hub_name: "sensors".into(),
///         consumer_group: "$Default".into(),
///         cardinality: Cardinality::Many,
///         data_type: DataType::String,
///         connection: None,
///     }),
///     retry: None,
///     bindings: Vec::new(),
/// };
/// let server = FunctionServer::builder().event_hub_function(declaration, Echo).build(None)?;
/// assert_eq!(server.function_names(), ["Echo"]);
/// # Ok::<(), hubhost_functions::function_app::FunctionAppError>(())
/// ```
#[async_trait::async_trait]
pub trait EventHubFunction: Send + Sync + 'static {
    /// Processes `batch`. `context` says which invocation this is (its id, the partition, the
    /// host's retry context), takes log lines for the answer's `Logs`, and counts what the
    /// function declared, success or not.
    async fn run(
        &self,
        batch: TriggerBatch,
        context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError>;
}

//! What a function is told about one invocation, and where it reports: [`FunctionContext`].
//!
//! The server builds one per request — the function's name, the host's invocation id, the
//! partition, the host's retry context — and hands it to the function beside the batch. Lines
//! logged through it reach the answer's `Logs` (which the host writes to its own log as the
//! function's) and this process's tracing output; counts reach `/metrics`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::batch::{PartitionContext, RetryContext, TriggerBatch};
use crate::counters::{CounterFamily, Counters, HistogramFamily};

/// One invocation of a function, as the function sees it.
///
/// ```
/// use hubhost_functions::prelude::*;
///
/// let batch = TriggerBatch::builder("CountReadings").partition("3").text("hello").build();
/// let context = FunctionContext::for_batch(&batch);
/// context.log("1 reading");
/// assert_eq!(context.function_name(), "CountReadings");
/// assert_eq!(context.partition().partition_id, "3");
/// assert_eq!(context.logs(), ["1 reading"]);
/// ```
pub struct FunctionContext {
    function: String,
    invocation_id: String,
    partition: PartitionContext,
    retry: Option<RetryContext>,
    counters: Arc<Counters>,
    logs: Mutex<Vec<String>>,
}

impl FunctionContext {
    /// The context the server builds for one request.
    pub(crate) fn new(
        invocation_id: String,
        batch: &TriggerBatch,
        counters: Arc<Counters>,
    ) -> Self {
        FunctionContext {
            function: batch.function.clone(),
            invocation_id,
            partition: batch.partition.clone(),
            retry: batch.retry.clone(),
            counters,
            logs: Mutex::new(Vec::new()),
        }
    }

    /// A context for calling a function directly with `batch` (in a test): a fresh invocation
    /// id, the batch's partition and retry context, no declared counters.
    pub fn for_batch(batch: &TriggerBatch) -> Self {
        Self::for_batch_counting(batch, &[], &[])
    }

    /// Like [`for_batch`](Self::for_batch), with the counters and histograms the function
    /// declares, so that [`count`](Self::count) and [`counted`](Self::counted) work.
    pub fn for_batch_counting(
        batch: &TriggerBatch,
        counters: &[CounterFamily],
        histograms: &[HistogramFamily],
    ) -> Self {
        Self::new(
            uuid::Uuid::new_v4().to_string(),
            batch,
            Arc::new(Counters::new(counters, histograms)),
        )
    }

    /// The function's name (its folder in the function app).
    pub fn function_name(&self) -> &str {
        &self.function
    }

    /// The host's id for this invocation (`X-Azure-Functions-InvocationId`), the one its own
    /// logs and Application Insights name.
    pub fn invocation_id(&self) -> &str {
        &self.invocation_id
    }

    /// Where the batch was read from.
    pub fn partition(&self) -> &PartitionContext {
        &self.partition
    }

    /// The host's retry bookkeeping (which attempt this is, and why the last one failed), when
    /// the function has a retry policy.
    pub fn retry(&self) -> Option<&RetryContext> {
        self.retry.as_ref()
    }

    /// Logs `line` for this invocation: it goes into the answer's `Logs`, which the host
    /// writes to its log as the function's, and to this process's log (tracing, at info).
    pub fn log(&self, line: impl Into<String>) {
        let line = line.into();
        // Inside the server the invocation's span names the function and the invocation on the
        // line; a context made by hand (a direct call in a test) names them itself.
        let in_invocation = tracing::Span::current()
            .metadata()
            .is_some_and(|span| span.name() == "invocation");
        if in_invocation {
            tracing::info!(target: "hubhost::function", "{line}");
        } else {
            tracing::info!(target: "hubhost::function", function = %self.function, invocation_id = %self.invocation_id, "{line}");
        }
        self.logs.lock().expect("not poisoned").push(line);
    }

    /// The lines logged so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().expect("not poisoned").clone()
    }

    /// Adds `n` to the counter the function declared with `key` (an undeclared key is
    /// ignored).
    pub fn count(&self, key: &str, n: u64) {
        self.counters.add(key, n);
    }

    /// Counts one observation in the histogram the function declared with `key` (an undeclared
    /// key is ignored).
    pub fn observe(&self, key: &str, elapsed: Duration) {
        self.counters.observe(key, elapsed);
    }

    /// What the counter declared with `key` has counted, over every invocation that shares
    /// these counters (0 if undeclared).
    pub fn counted(&self, key: &str) -> u64 {
        self.counters.get(key)
    }

    /// The logged lines, taken out (the server moves them into the answer).
    pub(crate) fn take_logs(&self) -> Vec<String> {
        std::mem::take(&mut *self.logs.lock().expect("not poisoned"))
    }
}

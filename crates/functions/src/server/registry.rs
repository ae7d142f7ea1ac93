//! Which functions the server runs: each registered function matched with its declaration,
//! and what `/metrics` reports for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::StatusCode;

use crate::counters::{CounterFamily, Counters, HistogramFamily};
use crate::function::{EventHubFunction, FunctionError};
use crate::function_app::{EventHubTrigger, FunctionSpec};
use crate::http::HttpFunction;
use crate::output::FunctionOutput;
use crate::timer::TimerFunction;
use hubhost_metrics::{Histogram, LATENCY_BUCKETS};

/// A function matched with its declaration.
pub(super) enum Bound {
    EventHub {
        trigger: EventHubTrigger,
        function: Arc<dyn EventHubFunction>,
    },
    Http {
        /// The trigger binding: the request is `Data.<binding>`.
        binding: String,
        /// The `http` output binding's name (`$return`: the answer's `ReturnValue`).
        response: String,
        function: Arc<dyn HttpFunction>,
    },
    Timer {
        /// The trigger binding: the `TimerInfo` is `Data.<binding>`.
        binding: String,
        function: Arc<dyn TimerFunction>,
    },
}

pub(super) struct Registered {
    pub(super) spec: FunctionSpec,
    pub(super) bound: Bound,
    pub(super) stats: FunctionStats,
    /// Whether an output the function set but did not declare was logged already.
    pub(super) warned_undeclared: std::sync::atomic::AtomicBool,
}

impl Registered {
    /// The host looks up only the outputs function.json declares, so a value under any other
    /// name would vanish without a word: say so, once per function.
    pub(super) fn warn_undeclared(&self, output: &FunctionOutput) {
        let undeclared = self.spec.undeclared_outputs(output.outputs.keys());
        if !undeclared.is_empty() && !self.warned_undeclared.swap(true, Ordering::Relaxed) {
            tracing::warn!(function = %self.spec.name, outputs = ?undeclared, "the function set outputs its function.json does not declare; the host ignores them");
        }
    }
}

/// What `/metrics` reports for one function.
pub(super) struct FunctionStats {
    /// Events in batches the function processed (answered 200).
    pub(super) events: AtomicU64,
    /// Requests by outcome: answered 200, refused (4xx), failed (5xx), panicked.
    pub(super) ok: AtomicU64,
    pub(super) bad_request: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) panicked: AtomicU64,
    /// From the request's arrival to the answer, for every request that reached the function.
    pub(super) latency: Histogram,
    pub(super) declared: Arc<Counters>,
}

impl FunctionStats {
    pub(super) fn new(families: &[CounterFamily], histograms: &[HistogramFamily]) -> Self {
        FunctionStats {
            events: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            bad_request: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            panicked: AtomicU64::new(0),
            latency: Histogram::new(LATENCY_BUCKETS),
            declared: Arc::new(Counters::new(families, histograms)),
        }
    }

    pub(super) fn count(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a function's failure by its kind; the status and code the host is answered.
    pub(super) fn count_failure(&self, e: &FunctionError) -> (StatusCode, &'static str) {
        match e {
            FunctionError::BadRequest { code, .. } => {
                Self::count(&self.bad_request, 1);
                (StatusCode::BAD_REQUEST, *code)
            }
            FunctionError::Failed { code, .. } => {
                Self::count(&self.failed, 1);
                (StatusCode::INTERNAL_SERVER_ERROR, *code)
            }
        }
    }
}

//! Telemetry for hubhost's processes: W3C trace context as Event Hubs events carry it, and
//! OpenTelemetry export of spans and metrics over OTLP, configured by the standard
//! `OTEL_*` environment variables and off when they are unset.
//!
//! - [`trace_context`] (pure): the `traceparent` / `Diagnostic-Id` an event's producer stamped,
//!   and a batch's links and parent.
//! - [`install`]: logging to stderr plus, when asked, the OpenTelemetry pipeline; a
//!   [`tracing`] span then becomes an exported span (fields named by OpenTelemetry's semantic
//!   conventions become its attributes). [`exporting_traces`] lets a caller skip building spans
//!   when nothing would receive them.
//! - [`collector`]: a small OTLP/HTTP receiver keeping the newest spans, for a local run's own
//!   view of its traces (the demo's page, the benchmarks).
//! - Metrics are recorded through [`opentelemetry::global::meter`], which the installed
//!   pipeline exports ([`meter`] is a shorthand).
//!
//! This crate knows nothing of functions, hubs or checkpoints: callers name their spans.

#![deny(missing_docs)]

pub mod collector;
mod export;
pub mod trace_context;

pub use export::{
    ExportSettings, Logging, Protocol, Telemetry, TelemetryError, exporting_metrics,
    exporting_traces, install, shutdown,
};
pub use opentelemetry;
pub use trace_context::TraceParent;

/// The meter hubhost's instruments are created on (a no-op until [`install`] exports metrics).
pub fn meter(scope: &'static str) -> opentelemetry::metrics::Meter {
    opentelemetry::global::meter(scope)
}

/// The span context of `span` as a `traceparent` value, when it is exported (an invalid
/// context, as when nothing is exported, gives `None`).
pub fn traceparent_of(span: &tracing::Span) -> Option<TraceParent> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if span.is_none() {
        return None;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    if !span_context.is_valid() {
        return None;
    }
    Some(TraceParent {
        trace_id: span_context.trace_id().to_bytes(),
        span_id: span_context.span_id().to_bytes(),
        flags: span_context.trace_flags().to_u8(),
    })
}

/// Makes `span` a child of `parent` (a remote context, such as an event's producer) and links
/// it to each of `links`.
pub fn connect(span: &tracing::Span, parent: Option<TraceParent>, links: &[TraceParent]) {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if let Some(parent) = parent {
        let context = opentelemetry::Context::new().with_remote_span_context(remote(parent));
        let _ = span.set_parent(context);
    }
    for link in links {
        span.add_link(remote(*link));
    }
}

fn remote(parent: TraceParent) -> opentelemetry::trace::SpanContext {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.span_id),
        TraceFlags::new(parent.flags),
        true,
        TraceState::default(),
    )
}

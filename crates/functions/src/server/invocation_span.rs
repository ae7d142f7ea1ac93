//! What an Event Hubs invocation tells OpenTelemetry, when the process exports it
//! (`hubhost_telemetry::install` with the standard `OTEL_*` variables set): one span per
//! invocation, named and attributed by OpenTelemetry's semantic conventions for FaaS and
//! messaging, linked to each event's producer, and the FaaS and messaging metrics.
//!
//! The Functions host hands a custom handler no trace context of its own, so the producers'
//! contexts are read from the events (`Diagnostic-Id` / `traceparent`). The span continues the
//! producer's trace when every event of the batch belongs to that one trace (always so for a
//! batch of one), and is a new trace linked to them otherwise; a `traceparent` header on the
//! request, should a host send one, is the parent instead. The answer carries the span's
//! context in a `traceresponse` header, which `hubhost emulate` stamps on the events an
//! `eventHub` output sends, so that the next consumer continues the trace.
//!
//! Either way the span carries `function` and `invocation_id`, so every log line written inside
//! an invocation — the framework's and the function's own `tracing` lines — names the
//! invocation it belongs to, as the host's own log lines do. When nothing is exported the span
//! has only those two fields ([`log_span`]) and no metric is recorded.

use std::sync::OnceLock;
use std::time::Duration;

use hubhost_telemetry::opentelemetry::KeyValue;
use hubhost_telemetry::opentelemetry::metrics::{Counter, Histogram};
use hubhost_telemetry::trace_context::Producers;
use hubhost_telemetry::{TraceParent, exporting_metrics, exporting_traces};
use tracing::Span;
use tracing::field::Empty;

use crate::batch::TriggerBatch;
use crate::function::FunctionError;

/// The span of one invocation of an Event Hubs-triggered function (`Span::none()` when spans
/// are not exported).
pub(super) fn event_hub_span(
    function: &str,
    invocation_id: &str,
    incoming: Option<TraceParent>,
    batch: &TriggerBatch,
) -> Span {
    if !exporting_traces() {
        return log_span(function, invocation_id);
    }
    let hub = batch.hub_name();
    let producers = Producers::of_events(batch.events.iter().map(|e| &e.properties));
    let (first, last) = batch.sequence_range().unwrap_or((-1, -1));
    let span = tracing::info_span!(
        "invocation",
        // FaaS convention: the span is named after the function.
        "otel.name" = function,
        "otel.kind" = "consumer",
        "otel.status_code" = Empty,
        "otel.status_description" = Empty,
        "faas.trigger" = "pubsub",
        "faas.name" = function,
        "faas.invocation_id" = invocation_id,
        "messaging.system" = "eventhubs",
        "messaging.operation.type" = "process",
        "messaging.operation.name" = "process",
        "messaging.destination.name" = hub,
        "messaging.consumer.group.name" = batch.consumer_group(),
        "messaging.destination.partition.id" = batch.partition.partition_id.as_str(),
        "messaging.batch.message_count" = batch.events.len() as i64,
        "hubhost.sequence_number.first" = first,
        "hubhost.sequence_number.last" = last,
        "hubhost.retry_count" = batch.retry.as_ref().map_or(0, |r| r.retry_count),
        "hubhost.links_dropped" = producers.dropped as i64,
        "error.type" = Empty,
        // Shown on the log lines written inside it (the attributes above are not).
        function = %function,
        invocation_id = %invocation_id,
        trace_id = Empty,
    );
    hubhost_telemetry::connect(
        &span,
        incoming.or(producers.common_parent),
        &producers.links,
    );
    if let Some(context) = hubhost_telemetry::traceparent_of(&span) {
        // Log lines written inside the span carry its trace, for finding them beside it.
        span.record("trace_id", context.trace_id_hex());
    }
    span
}

/// The span of an invocation whose spans are not exported: the function and the invocation id
/// on each line logged inside it. At `error` level, so that the lines of any level a filter lets
/// through carry it.
pub(super) fn log_span(function: &str, invocation_id: &str) -> Span {
    tracing::error_span!("invocation", function = %function, invocation_id = %invocation_id)
}

/// Marks the span as failed by `error` (a success leaves the status unset, as the conventions
/// ask of spans whose outcome is not an error).
pub(super) fn record_failure(span: &Span, error: &FunctionError) {
    record_error(span, error.code(), &error.to_string());
}

/// Marks the span failed with `code` (its `error.type`) and `description`.
pub(super) fn record_error(span: &Span, code: &str, description: &str) {
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", description);
    span.record("error.type", code);
}

/// The attributes an invocation's metrics are recorded with.
#[derive(Clone)]
pub(super) struct MetricLabels {
    function: String,
    hub: String,
    consumer_group: String,
    partition: String,
}

impl MetricLabels {
    pub(super) fn of(function: &str, batch: &TriggerBatch) -> Option<Self> {
        exporting_metrics().then(|| MetricLabels {
            function: function.to_string(),
            hub: batch.hub_name().to_string(),
            consumer_group: batch.consumer_group().to_string(),
            partition: batch.partition.partition_id.clone(),
        })
    }
}

struct Instruments {
    invocations: Counter<u64>,
    errors: Counter<u64>,
    invoke_duration: Histogram<f64>,
    consumed: Counter<u64>,
    process_duration: Histogram<f64>,
}

fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = hubhost_telemetry::meter("hubhost-functions");
        Instruments {
            invocations: meter
                .u64_counter("faas.invocations")
                .with_description("Invocations of the function")
                .build(),
            errors: meter
                .u64_counter("faas.errors")
                .with_description("Invocations that failed")
                .build(),
            invoke_duration: meter
                .f64_histogram("faas.invoke_duration")
                .with_unit("s")
                .with_description("How long an invocation took")
                .build(),
            consumed: meter
                .u64_counter("messaging.client.consumed.messages")
                .with_description("Events handed to the function")
                .build(),
            process_duration: meter
                .f64_histogram("messaging.process.duration")
                .with_unit("s")
                .with_description("How long processing a batch took")
                .build(),
        }
    })
}

/// Records one finished invocation: `error` is the failure's code, if it failed.
pub(super) fn record_metrics(
    labels: &MetricLabels,
    events: u64,
    elapsed: Duration,
    error: Option<&str>,
) {
    let instruments = instruments();
    let faas = [
        KeyValue::new("faas.trigger", "pubsub"),
        KeyValue::new("faas.name", labels.function.clone()),
    ];
    let messaging = [
        KeyValue::new("messaging.system", "eventhubs"),
        KeyValue::new("messaging.operation.name", "process"),
        KeyValue::new("messaging.destination.name", labels.hub.clone()),
        KeyValue::new(
            "messaging.consumer.group.name",
            labels.consumer_group.clone(),
        ),
        KeyValue::new(
            "messaging.destination.partition.id",
            labels.partition.clone(),
        ),
    ];
    let seconds = elapsed.as_secs_f64();
    instruments.invocations.add(1, &faas);
    instruments.invoke_duration.record(seconds, &faas);
    instruments.consumed.add(events, &messaging);
    match error {
        Some(code) => {
            let mut failed = faas.to_vec();
            failed.push(KeyValue::new("error.type", code.to_string()));
            instruments.errors.add(1, &failed);
            let mut messaging = messaging.to_vec();
            messaging.push(KeyValue::new("error.type", code.to_string()));
            instruments.process_duration.record(seconds, &messaging);
        }
        None => instruments.process_duration.record(seconds, &messaging),
    }
}

//! `GET /metrics`: every function's batches, events and handling time, and the counters the
//! functions declare, in Prometheus text.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::FunctionServer;
use super::registry::{FunctionStats, Registered};
use hubhost_metrics::{self as metrics, Exposition, Kind};

pub(super) async fn metrics_page(State(server): State<Arc<FunctionServer>>) -> Response {
    type Read = fn(&FunctionStats) -> &AtomicU64;
    let mut page = Exposition::new();
    fn label(f: &Registered) -> Vec<(&'static str, &str)> {
        vec![("function", f.spec.name.as_str())]
    }
    page.family(
        "hubhost_handler_events_total",
        Kind::Counter,
        "Events in batches the function processed (answered 200).",
        server
            .functions
            .iter()
            .map(|f| (label(f), f.stats.events.load(Ordering::Relaxed) as f64)),
    );
    for family in &server.counters {
        page.family(
            family.name,
            Kind::Counter,
            family.help,
            server
                .functions
                .iter()
                .map(|f| (label(f), f.stats.declared.get(family.key) as f64)),
        );
    }
    for family in &server.histograms {
        page.histogram(
            family.name,
            family.help,
            server.functions.iter().filter_map(|f| {
                let h = f.stats.declared.histograms.get(family.key)?;
                Some((label(f), h))
            }),
        );
    }
    let outcomes: [(&str, Read); 4] = [
        ("ok", |s| &s.ok),
        ("bad_request", |s| &s.bad_request),
        ("failed", |s| &s.failed),
        ("panicked", |s| &s.panicked),
    ];
    page.family(
        "hubhost_handler_batches_total",
        Kind::Counter,
        "Invocations by outcome: ok (200), bad_request (4xx), failed (5xx), panicked (500).",
        server.functions.iter().flat_map(|f| {
            outcomes.iter().map(move |(outcome, read)| {
                (
                    vec![("function", f.spec.name.as_str()), ("outcome", *outcome)],
                    read(&f.stats).load(Ordering::Relaxed) as f64,
                )
            })
        }),
    );
    page.histogram(
        "hubhost_handler_batch_seconds",
        "Time from a request's arrival to its answer.",
        server
            .functions
            .iter()
            .map(|f| (label(f), &f.stats.latency)),
    );
    for write in &server.extra_metrics {
        write(&mut page);
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        page.finish(),
    )
        .into_response()
}

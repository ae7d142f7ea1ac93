//! `GET /metrics` of an emulate instance: the processors' counters, each owned partition's lag
//! against the hub's ends (read every 5 s), and the checkpoint store's traffic.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use hubhost_eventhubs::EventHubTarget;
use hubhost_metrics::{self as metrics, Exposition, Kind};
use hubhost_processor::Consumer;
use hubhost_storage::counting::{self, OperationCounts, RequestCounts};

/// What `GET /metrics` shows: the processors' counters and the checkpoint store traffic.
#[derive(Clone)]
pub(super) struct MetricsPage {
    pub(super) consumers: Vec<Arc<Consumer>>,
    pub(super) storage_operations: Arc<OperationCounts>,
    pub(super) storage_requests: Arc<RequestCounts>,
    pub(super) last_enqueued: Arc<LastEnqueued>,
    /// Each function's outputs, by function name.
    pub(super) outputs: Vec<(String, Arc<super::OutputPlan>)>,
    /// Each Event Hubs function's invocation attempts.
    pub(super) attempts: Vec<Arc<super::dispatch::AttemptStats>>,
}

/// The invocation attempts as OpenTelemetry metrics, beside `/metrics`, when the environment
/// asks for metrics export: `hubhost.invocation.attempts` by `faas.name` and `outcome`,
/// `hubhost.invocation.retries` by `faas.name`, and `hubhost.retrying_batch.age` (seconds) by
/// `faas.name` and `messaging.destination.partition.id`, read from the same counters whenever
/// the exporter collects.
pub(super) fn export_attempts(attempts: &[Arc<super::dispatch::AttemptStats>]) {
    use hubhost_telemetry::opentelemetry::KeyValue;
    if !hubhost_telemetry::exporting_metrics() || attempts.is_empty() {
        return;
    }
    let meter = hubhost_telemetry::meter("hubhost-emulate");
    let all = Arc::new(attempts.to_vec());
    let of = all.clone();
    let _attempts = meter
        .u64_observable_counter("hubhost.invocation.attempts")
        .with_description("Invocation attempts by outcome: succeeded, failed, no_answer, panicked.")
        .with_callback(move |observer| {
            for a in of.iter() {
                for (outcome, count) in a.by_outcome() {
                    observer.observe(
                        count,
                        &[
                            KeyValue::new("faas.name", a.function.clone()),
                            KeyValue::new("outcome", outcome),
                        ],
                    );
                }
            }
        })
        .build();
    let of = all.clone();
    let _retries = meter
        .u64_observable_counter("hubhost.invocation.retries")
        .with_description("Retries the functions' retry policies made.")
        .with_callback(move |observer| {
            for a in of.iter() {
                observer.observe(
                    a.retries.load(Ordering::Relaxed),
                    &[KeyValue::new("faas.name", a.function.clone())],
                );
            }
        })
        .build();
    let _age = meter
        .f64_observable_gauge("hubhost.retrying_batch.age")
        .with_unit("s")
        .with_description(
            "Per partition whose batch is being retried, the time since its first attempt.",
        )
        .with_callback(move |observer| {
            for a in all.iter() {
                for (partition, retrying) in a.retrying() {
                    observer.observe(
                        retrying.since.elapsed().as_secs_f64(),
                        &[
                            KeyValue::new("faas.name", a.function.clone()),
                            KeyValue::new("messaging.destination.partition.id", partition),
                        ],
                    );
                }
            }
        })
        .build();
}

/// How often `/metrics` learns the hubs' last enqueued sequence numbers (for the lag).
const LAG_REFRESH: Duration = Duration::from_secs(5);

/// Each hub's partitions' last enqueued sequence numbers, as last read.
#[derive(Default)]
pub(super) struct LastEnqueued {
    /// hub → partition → last enqueued sequence number.
    by_hub: std::sync::Mutex<BTreeMap<String, BTreeMap<String, i64>>>,
}

impl LastEnqueued {
    /// Reads every target's partition ends every [`LAG_REFRESH`] until `stop`.
    pub(super) async fn refresh(
        self: Arc<Self>,
        mut targets: Vec<EventHubTarget>,
        stop: CancellationToken,
    ) {
        // One reading per hub, however many functions read it.
        targets.sort_by(|a, b| (&a.namespace, &a.hub).cmp(&(&b.namespace, &b.hub)));
        targets.dedup_by(|a, b| a.hub == b.hub && a.namespace == b.namespace);
        loop {
            for target in &targets {
                if let Ok(last) = target.last_enqueued().await {
                    self.by_hub
                        .lock()
                        .expect("lag lock")
                        .insert(target.hub.clone(), last);
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(LAG_REFRESH) => {}
            }
        }
    }
}

impl MetricsPage {
    fn render(&self) -> String {
        let mut page = Exposition::new();
        hubhost_processor::write_metrics(&mut page, &self.consumers);
        let ops = &self.storage_operations;
        page.family(
            "hubhost_storage_operations_total",
            Kind::Counter,
            "Requests this instance made to the checkpoint store.",
            [
                ("list", &ops.lists),
                ("read", &ops.reads),
                ("write", &ops.writes),
                ("delete", &ops.deletes),
            ]
            .map(|(op, n)| (vec![("operation", op)], n.load(Ordering::Relaxed) as f64)),
        );
        page.family(
            counting::REQUESTS_METRIC,
            Kind::Counter,
            counting::REQUESTS_HELP,
            self.storage_requests.samples(),
        );
        let last_enqueued = self.last_enqueued.by_hub.lock().expect("lag lock").clone();
        let mut lag = Vec::new();
        for c in &self.consumers {
            let progress = c.stats.progress.lock().expect("progress lock").clone();
            for (partition, processed) in progress {
                if let Some(last) = last_enqueued
                    .get(&c.target.hub)
                    .and_then(|p| p.get(&partition))
                {
                    lag.push((c, partition, (last - processed).max(0)));
                }
            }
        }
        page.family(
            "hubhost_partition_lag",
            Kind::Gauge,
            "Events enqueued after the last one handed to the function, per owned partition (hub state read every 5 s).",
            lag.iter().map(|(c, partition, lag)| {
                (
                    vec![
                        ("function", c.function.as_str()),
                        ("eventhub", c.key.event_hub.as_str()),
                        ("consumer_group", c.consumer_group()),
                        ("partition", partition.as_str()),
                    ],
                    *lag as f64,
                )
            }),
        );
        self.render_attempts(&mut page);
        let mut items = Vec::new();
        for (function, plan) in &self.outputs {
            for (binding, kind, count) in plan.item_counts() {
                items.push((function.as_str(), binding, kind, count));
            }
        }
        page.family(
            "hubhost_output_items_total",
            Kind::Counter,
            "Items each output binding was handed and carried out (events sent, blobs written) or kept in the outbox, retries included.",
            items.iter().map(|(function, binding, kind, count)| {
                (
                    vec![
                        ("function", *function),
                        ("binding", *binding),
                        ("type", *kind),
                    ],
                    *count as f64,
                )
            }),
        );
        page.family(
            "hubhost_undeclared_outputs_total",
            Kind::Counter,
            "Successful answers that set an output function.json does not declare: the Functions host drops it and counts a success.",
            self.outputs.iter().map(|(function, plan)| {
                (
                    vec![("function", function.as_str())],
                    plan.undeclared_count() as f64,
                )
            }),
        );
        page.finish()
    }

    /// Attempts by outcome, retries, and the age of each batch being retried: a function that
    /// fails every attempt under a policy that never gives up fails no batch.
    fn render_attempts(&self, page: &mut Exposition) {
        let mut attempts = Vec::new();
        for a in &self.attempts {
            for (outcome, count) in a.by_outcome() {
                attempts.push((a.function.as_str(), outcome, count));
            }
        }
        page.family(
            "hubhost_invocation_attempts_total",
            Kind::Counter,
            "Invocation attempts by outcome: succeeded, failed (an error answer, a failed binding, a timeout), no_answer (the handler down or restarting), panicked.",
            attempts.iter().map(|(function, outcome, n)| {
                (vec![("function", *function), ("outcome", *outcome)], *n as f64)
            }),
        );
        page.family(
            "hubhost_invocation_retries_total",
            Kind::Counter,
            "Retries the functions' retry policies made.",
            self.attempts.iter().map(|a| {
                (
                    vec![("function", a.function.as_str())],
                    a.retries.load(Ordering::Relaxed) as f64,
                )
            }),
        );
        let retrying: Vec<(&str, String, f64)> = self
            .attempts
            .iter()
            .flat_map(|a| {
                a.retrying().into_iter().map(|(partition, r)| {
                    (
                        a.function.as_str(),
                        partition,
                        r.since.elapsed().as_secs_f64(),
                    )
                })
            })
            .collect();
        page.family(
            "hubhost_retrying_batch_age_seconds",
            Kind::Gauge,
            "Per partition whose batch is being retried now, the time since its first attempt.",
            retrying.iter().map(|(function, partition, age)| {
                (
                    vec![("function", *function), ("partition", partition.as_str())],
                    *age,
                )
            }),
        );
    }

    pub(super) async fn serve(self, listener: tokio::net::TcpListener, stop: CancellationToken) {
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let page = self.render();
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
                        page,
                    )
                }
            }),
        );
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the metrics endpoint stopped");
        }
    }
}

//! `hubhost serve`: the reference app's custom handler, built on the functions framework
//! ([`hubhost_functions::server`]), which owns the host contract: the probe, decoding, the
//! answer format, the body limit, panic isolation, `/metrics`.
//!
//! What the app adds:
//! - its two Event Hubs functions, `SensorAggregator` and `RawArchive` ([`crate::App`]), with
//!   the counters they report (events applied, replayed, dead-lettered as poison, storage
//!   errors);
//! - the dashboard: `GET /api/dashboard/…` (under the Functions host, the HTTP-triggered
//!   function `Dashboard`, forwarded as it came) and the page a browser gets at `/`;
//! - how its failures map onto what the host must do: storage unreachable → 500
//!   `storage_unavailable`, so that the host's retry policy retries the whole batch
//!   (processing is idempotent, so nothing is lost and nothing double counted); a name that
//!   cannot be stored → 400 `invalid_name`.
//!
//! Request bodies and connection strings are never logged.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::retrying::RetryBoard;
use hubhost_functions::batch::TriggerBatch;
use hubhost_functions::context::FunctionContext;
use hubhost_functions::counters::{CounterFamily, HistogramFamily};
use hubhost_functions::function::{EventHubFunction, FunctionError};
use hubhost_functions::function_app::{
    BindingSpec, Cardinality, DataType, EventHubTrigger, FunctionSpec, Trigger,
};
use hubhost_functions::once::Once;
use hubhost_functions::output::FunctionOutput;
use hubhost_functions::server::FunctionServer;
use hubhost_metrics::Kind;
use hubhost_storage::counting::{self, CountingStore};
use hubhost_storage::{SharedStore, StorageLocation, StoreError};

use crate::dashboard::{self, Dashboard, DashboardSources};
use crate::{AGGREGATOR_FUNCTION, ARCHIVE_FUNCTION, App, AppError, AppFunction, layout};

pub use hubhost_functions::server::DEFAULT_MAX_BODY_BYTES;

/// The `eventHub` output of `SensorAggregator` that alarms are forwarded through.
pub const ALARMS_OUTPUT: &str = "alarms";
/// The event hub it sends to: in the local hub by default (`hubhost hub`, `hubhost demo`).
pub const ALARMS_HUB: &str = "alarms";

/// The HTTP-triggered function that serves the dashboard (`function_app/Dashboard`).
pub const DASHBOARD_FUNCTION: &str = "Dashboard";

#[derive(Debug, Clone)]
pub struct HandlerConfig {
    pub listen: SocketAddr,
    /// The function app folder (script root). `None`: the built-in definitions of the app's
    /// two functions, identical to `function_app/`.
    pub app_root: Option<PathBuf>,
    pub storage: StorageLocation,
    pub container: String,
    pub window_seconds: u32,
    pub max_body_bytes: usize,
    /// What the dashboard reads besides the app's blobs.
    pub dashboard: DashboardSources,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    FunctionApp(#[from] hubhost_functions::function_app::FunctionAppError),
    #[error("cannot open storage: {0}")]
    Storage(#[from] StoreError),
    #[error(transparent)]
    Serve(#[from] hubhost_functions::server::ServeError),
}

/// The two functions as `function_app/*/function.json` declares them.
pub fn builtin_functions() -> Vec<FunctionSpec> {
    let trigger = |consumer_group: &str| {
        Trigger::EventHub(EventHubTrigger {
            binding_name: "events".into(),
            event_hub_name: "sensors".into(),
            consumer_group: consumer_group.into(),
            cardinality: Cardinality::Many,
            data_type: DataType::String,
            connection: Some("EventHubConnection".into()),
        })
    };
    vec![
        FunctionSpec {
            name: AGGREGATOR_FUNCTION.into(),
            trigger: trigger("$Default"),
            retry: None,
            bindings: vec![BindingSpec::event_hub_output(
                ALARMS_OUTPUT,
                ALARMS_HUB,
                "EventHubConnection",
            )],
        },
        FunctionSpec {
            name: ARCHIVE_FUNCTION.into(),
            trigger: trigger("archive"),
            retry: None,
            bindings: Vec::new(),
        },
    ]
}

/// What the app's functions count, beside the framework's events, outcomes and timings.
const COUNTERS: [CounterFamily; 4] = [
    CounterFamily {
        key: "applied",
        name: "hubhost_handler_events_applied_total",
        help: "Events folded in or archived for the first time.",
    },
    CounterFamily {
        key: "replayed",
        name: "hubhost_handler_events_replayed_total",
        help: "Events an earlier delivery had already applied (at-least-once replays).",
    },
    CounterFamily {
        key: "poison",
        name: "hubhost_poison_events_total",
        help: "Events set aside as poison (dead-lettered with their reason).",
    },
    CounterFamily {
        key: "storage_errors",
        name: "hubhost_handler_storage_errors_total",
        help: "Invocations that failed on storage (answered 500; the host retries).",
    },
];

/// What the app's functions time: how old a reading is when `SensorAggregator` has applied it,
/// from the event hub's enqueued time (the hub's clock) to the moment its window block is
/// written (this machine's clock). The first delivery only: replays are not counted.
const HISTOGRAMS: [HistogramFamily; 1] = [HistogramFamily {
    key: "applied_age",
    name: "hubhost_handler_applied_age_seconds",
    help: "Time from a reading's enqueue in the event hub to its window block written (first delivery).",
}];

/// One of the app's functions, as the framework runs it.
struct SensorFunction {
    app: Arc<App>,
    which: AppFunction,
    /// Which alarms are still owed (`SensorAggregator`'s): each reading's alarm goes out once
    /// under redelivery, partition moves and frozen owners. `None`: every alarm of every
    /// delivery (at least once; `HUBHOST_ALARMS_AT_LEAST_ONCE=1`, for comparing the cost).
    once: Option<Once>,
    /// Fault injection for tests and drills: a batch with an event of this home panics.
    panic_home: Option<String>,
    /// The batches failing now, for the page.
    retries: Arc<RetryBoard>,
}

#[async_trait::async_trait]
impl EventHubFunction for SensorFunction {
    async fn run(
        &self,
        batch: TriggerBatch,
        context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let function = batch.function.clone();
        let partition = batch.partition.partition_id.clone();
        let retry = context.retry();
        let retry_count = retry.map_or(0, |r| r.retry_count);
        // A retry says the attempt before failed, even when it failed in another process (a
        // killed handler, another instance) and this one has not seen it.
        if retry_count > 0 {
            let why = retry
                .and_then(|r| r.last_error())
                .unwrap_or("the previous attempt failed");
            let now = chrono::Utc::now();
            self.retries
                .failed(&function, &partition, retry_count - 1, why, now);
        }
        // A panic counts as a failed attempt too, then goes on to fail the invocation.
        let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
            self.run_batch(batch, context),
        ))
        .await;
        let failure = match &outcome {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("the function panicked".to_string()),
        };
        match failure {
            None => self.retries.succeeded(&function, &partition),
            Some(why) => {
                let now = chrono::Utc::now();
                self.retries
                    .failed(&function, &partition, retry_count, &why, now)
            }
        }
        outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

impl SensorFunction {
    async fn run_batch(
        &self,
        batch: TriggerBatch,
        context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        if let Some(home) = &self.panic_home
            && batch
                .events
                .iter()
                .any(|e| e.body.windows(home.len()).any(|w| w == home.as_bytes()))
        {
            panic!("fault injection: HUBHOST_FAULT_PANIC_HOME matched an event");
        }
        let report = match self.app.process(self.which, &batch).await {
            Ok(report) => report,
            Err(e) => {
                if matches!(e, AppError::Storage(_)) {
                    context.count("storage_errors", 1);
                }
                let message = e.to_string();
                return Err(match &e {
                    AppError::BadName(_) => FunctionError::BadRequest {
                        code: "invalid_name",
                        message,
                    },
                    AppError::Storage(s) if s.is_transient() => FunctionError::Failed {
                        code: "storage_unavailable",
                        message,
                    },
                    AppError::Storage(_) => FunctionError::Failed {
                        code: "storage_error",
                        message,
                    },
                    AppError::CorruptState { .. } => FunctionError::Failed {
                        code: "corrupt_state",
                        message,
                    },
                    AppError::Contention { .. } => FunctionError::Failed {
                        code: "contention",
                        message,
                    },
                });
            }
        };
        let now = chrono::Utc::now();
        for enqueued in &report.applied_enqueued {
            // A clock behind the hub's counts as no age rather than as none observed.
            context.observe(
                "applied_age",
                (now - *enqueued).to_std().unwrap_or_default(),
            );
        }
        context.count("applied", report.applied);
        context.count("replayed", report.replayed);
        context.count("poison", report.dead_lettered);
        let log = format!(
            "{}: partition {}, sequence numbers {}: {} events, {} applied, {} replayed, {} dead-lettered",
            batch.function,
            batch.partition.partition_id,
            batch.sequence_label(),
            report.events,
            report.applied,
            report.replayed,
            report.dead_lettered
        );
        // The alarms still owed. Not the aggregates' replays: if sending the alarms failed
        // last time, the host ran the function again and the aggregates saw these readings as
        // replays, yet the alarms must go out — `Once` owes a retried batch's alarms again.
        let owed: Option<std::collections::HashSet<i64>> = match &self.once {
            Some(once) if !report.alarms.is_empty() => {
                let owed = once.claim(&batch, context).await.inspect_err(|_| {
                    context.count("storage_errors", 1);
                })?;
                Some(owed.iter().filter_map(|e| e.sequence_number).collect())
            }
            _ => None,
        };
        let mut output = FunctionOutput::default();
        output.log(log);
        let is_owed = |alarm: &&crate::AlarmEvent| match (&owed, alarm.sequence_number) {
            (Some(owed), Some(sequence)) => owed.contains(&sequence),
            _ => true,
        };
        for alarm in report.alarms.iter().filter(is_owed) {
            output
                .send_event_json(ALARMS_OUTPUT, alarm)
                .expect("alarms serialize");
        }
        output.return_value = serde_json::to_value(&report).expect("reports serialize");
        Ok(output)
    }
}

/// The app's functions and the dashboard on the framework's server.
pub async fn build(config: &HandlerConfig) -> Result<FunctionServer, ServeError> {
    let store: SharedStore = config.storage.open()?;
    store.ensure_container(&config.container).await?;
    tracing::info!(storage = %store.describe(), container = %config.container, "storage ready");
    // What the functions and the page ask of the store, counted apart (`/metrics`).
    let functions_store = CountingStore::with_kinds(store.clone(), layout::blob_kind);
    let page_store = CountingStore::with_kinds(store, layout::page_blob_kind);
    let requests = [
        functions_store.requests.clone(),
        page_store.requests.clone(),
    ];
    let functions_store: SharedStore = Arc::new(functions_store);
    let app = Arc::new(App::new(
        functions_store.clone(),
        &config.container,
        config.window_seconds,
    ));
    let retries = Arc::new(RetryBoard::default());
    let dashboard = Arc::new(
        Dashboard::new(
            Arc::new(page_store),
            &config.container,
            config.window_seconds,
            config.dashboard.clone(),
        )
        .showing_retries(retries.clone()),
    );
    let alarms_once =
        std::env::var("HUBHOST_ALARMS_AT_LEAST_ONCE").map_or(true, |v| v.is_empty() || v == "0");
    let once = Once::new(functions_store);
    let panic_home = std::env::var("HUBHOST_FAULT_PANIC_HOME")
        .ok()
        .filter(|h| !h.is_empty());
    let mut builder = FunctionServer::builder()
        .counters(&COUNTERS)
        .histograms(&HISTOGRAMS)
        .metrics(move |page| {
            page.family(
                counting::REQUESTS_METRIC,
                Kind::Counter,
                counting::REQUESTS_HELP,
                requests.iter().flat_map(|r| r.samples()),
            );
        })
        .routes(dashboard::router(dashboard))
        .browser_page(dashboard::index)
        .served_elsewhere(DASHBOARD_FUNCTION)
        .max_body_bytes(config.max_body_bytes);
    for spec in builtin_functions() {
        let which = AppFunction::for_name(&spec.name).expect("a built-in function");
        builder = builder.event_hub_function(
            spec,
            SensorFunction {
                app: app.clone(),
                which,
                once: (alarms_once && which == AppFunction::Aggregate).then(|| once.clone()),
                panic_home: panic_home.clone(),
                retries: retries.clone(),
            },
        );
    }
    let flushed = app.clone();
    let server = builder
        .on_shutdown(move || async move {
            if let Err(e) = flushed.flush().await {
                tracing::warn!(error = %e, "could not write the home directory's last entries; the homes' next reports add them");
            }
        })
        .build(config.app_root.as_deref())?;
    Ok(server)
}

/// Runs the handler until `shutdown` resolves.
pub async fn serve(
    config: HandlerConfig,
    on_listening: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let server = build(&config).await?;
    server.serve(config.listen, on_listening, shutdown).await?;
    Ok(())
}

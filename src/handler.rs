//! `hubhost serve`: the custom handler the Functions host starts and calls.
//!
//! - `GET /` answers the host's start-up probe (any answer means "ready"); a browser (which
//!   asks for HTML) gets the dashboard page instead.
//! - `GET /api/dashboard/…` is the page residents and operators watch (see `dashboard`); under
//!   the Functions host it is the HTTP-triggered function `Dashboard`, forwarded as it came.
//! - `POST /{FunctionName}` takes one invocation: decode (contract) → process (app) → answer.
//! - `GET /metrics` is the handler's Prometheus page: per function, batches by outcome, events
//!   (applied, replayed, dead-lettered as poison), storage errors, and a handling-time histogram.
//!
//! Failure policy, in the order a request meets it:
//! - body over the limit → 413; unknown function → 404; undecodable request → 400: a JSON error
//!   naming the problem, nothing processed;
//! - storage unreachable → 500 `storage_unavailable`, so that the host's retry policy retries the
//!   whole batch (processing is idempotent, so nothing is lost and nothing double counted);
//! - a panic while processing → 500 `handler_panic`; the process stays up.
//!
//! Request bodies and connection strings are never logged.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::app::{AGGREGATOR_FUNCTION, ARCHIVE_FUNCTION, App, AppError, AppFunction};
use crate::contract::ContractError;
use crate::contract::decode::decode_request;
use crate::contract::response::InvocationResponse;
use crate::dashboard::{self, Dashboard, DashboardSources};
use crate::function_app::{
    Cardinality, DataType, EventHubTrigger, FunctionApp, FunctionSpec, Trigger,
};
use crate::metrics::{self, Exposition, Histogram, Kind, LATENCY_BUCKETS};
use crate::storage::{SharedStore, StorageLocation, StoreError};

pub const DEFAULT_MAX_BODY_BYTES: usize = 128 * 1024 * 1024;
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
    FunctionApp(#[from] crate::function_app::FunctionAppError),
    #[error("cannot open storage: {0}")]
    Storage(#[from] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("server failed: {0}")]
    Server(std::io::Error),
}

struct Registered {
    spec: FunctionSpec,
    trigger: EventHubTrigger,
    logic: AppFunction,
    stats: FunctionStats,
}

/// What `/metrics` reports for one function.
struct FunctionStats {
    events: AtomicU64,
    applied: AtomicU64,
    replayed: AtomicU64,
    dead_lettered: AtomicU64,
    storage_errors: AtomicU64,
    /// Requests by outcome: answered 200, refused as malformed (4xx), failed (5xx), panicked.
    ok: AtomicU64,
    bad_request: AtomicU64,
    failed: AtomicU64,
    panicked: AtomicU64,
    /// From the request's arrival to the answer, for every request that reached the function.
    latency: Histogram,
}

impl FunctionStats {
    fn new() -> Self {
        FunctionStats {
            events: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            storage_errors: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            bad_request: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            panicked: AtomicU64::new(0),
            latency: Histogram::new(LATENCY_BUCKETS),
        }
    }

    fn count(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

pub struct HandlerState {
    functions: Vec<Registered>,
    app: Arc<App>,
    dashboard: Arc<Dashboard>,
    max_body_bytes: usize,
    /// Fault injection for tests and drills: a batch with an event of this home panics.
    panic_home: Option<String>,
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
        },
        FunctionSpec {
            name: ARCHIVE_FUNCTION.into(),
            trigger: trigger("archive"),
            retry: None,
        },
    ]
}

impl HandlerState {
    pub async fn new(config: &HandlerConfig) -> Result<Self, ServeError> {
        let specs = match &config.app_root {
            Some(root) => FunctionApp::load(root)?.functions,
            None => builtin_functions(),
        };
        let mut functions = Vec::new();
        for spec in specs {
            if spec.name.eq_ignore_ascii_case(DASHBOARD_FUNCTION)
                && matches!(spec.trigger, Trigger::Http { .. })
            {
                continue; // served by the dashboard's own routes
            }
            let (Some(trigger), Some(logic)) = (
                spec.event_hub_trigger().cloned(),
                AppFunction::for_name(&spec.name),
            ) else {
                tracing::warn!(function = %spec.name, "function.json declares a function hubhost does not implement; requests for it get 404");
                continue;
            };
            functions.push(Registered {
                spec,
                trigger,
                logic,
                stats: FunctionStats::new(),
            });
        }
        let store: SharedStore = config.storage.open()?;
        store.ensure_container(&config.container).await?;
        tracing::info!(storage = %store.describe(), container = %config.container, "storage ready");
        let dashboard = Dashboard::new(
            store.clone(),
            &config.container,
            config.window_seconds,
            config.dashboard.clone(),
        );
        Ok(HandlerState {
            functions,
            app: Arc::new(App::new(store, &config.container, config.window_seconds)),
            dashboard: Arc::new(dashboard),
            max_body_bytes: config.max_body_bytes,
            panic_home: std::env::var("HUBHOST_FAULT_PANIC_HOME")
                .ok()
                .filter(|h| !h.is_empty()),
        })
    }

    fn function(&self, name: &str) -> Option<&Registered> {
        self.functions
            .iter()
            .find(|f| f.spec.name.eq_ignore_ascii_case(name))
    }

    pub fn function_names(&self) -> Vec<String> {
        self.functions.iter().map(|f| f.spec.name.clone()).collect()
    }
}

pub fn router(state: Arc<HandlerState>) -> Router {
    Router::new()
        .route("/", get(probe))
        .route("/metrics", get(metrics_page))
        .route("/{function}", post(invoke))
        .fallback(not_found)
        .with_state(state.clone())
        .merge(dashboard::router(state.dashboard.clone()))
}

/// Runs the handler until `shutdown` resolves.
pub async fn serve(
    config: HandlerConfig,
    on_listening: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let state = Arc::new(HandlerState::new(&config).await?);
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(ServeError::Server)?;
    tracing::info!(%addr, functions = ?state.function_names(), "custom handler listening");
    on_listening(addr);
    axum::serve(listener, router(state.clone()))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(ServeError::Server)?;
    if let Err(e) = state.app.flush().await {
        tracing::warn!(error = %e, "could not write the home directory's last entries; the homes' next reports add them");
    }
    Ok(())
}

fn reply(status: StatusCode, body: &InvocationResponse) -> Response {
    let bytes = serde_json::to_vec(body).expect("responses serialize");
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    reply(status, &InvocationResponse::error(code, message))
}

async fn probe(State(state): State<Arc<HandlerState>>, headers: HeaderMap) -> Response {
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"));
    if wants_html {
        return dashboard::index().await;
    }
    let body = json!({"status": "ready", "functions": state.function_names()});
    (StatusCode::OK, axum::Json(body)).into_response()
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route: the host calls GET / and POST /{FunctionName}; the dashboard is at /api/dashboard/",
    )
}

enum Failure {
    Contract(ContractError),
    App {
        error: AppError,
        partition: String,
        sequence_numbers: String,
    },
}

/// `first..=last` of a batch's sequence numbers, for logs.
fn sequence_numbers(range: Option<(i64, i64)>) -> String {
    range
        .map(|(a, b)| format!("{a}..={b}"))
        .unwrap_or_else(|| "-".into())
}

async fn metrics_page(State(state): State<Arc<HandlerState>>) -> Response {
    type Read = fn(&FunctionStats) -> &AtomicU64;
    let mut page = Exposition::new();
    let counters: [(&str, &str, Read); 5] = [
        (
            "hubhost_handler_events_total",
            "Events in batches the function processed (answered 200).",
            |s| &s.events,
        ),
        (
            "hubhost_handler_events_applied_total",
            "Events folded in or archived for the first time.",
            |s| &s.applied,
        ),
        (
            "hubhost_handler_events_replayed_total",
            "Events an earlier delivery had already applied (at-least-once replays).",
            |s| &s.replayed,
        ),
        (
            "hubhost_poison_events_total",
            "Events set aside as poison (dead-lettered with their reason).",
            |s| &s.dead_lettered,
        ),
        (
            "hubhost_handler_storage_errors_total",
            "Invocations that failed on storage (answered 500; the host retries).",
            |s| &s.storage_errors,
        ),
    ];
    for (name, help, read) in counters {
        page.family(
            name,
            Kind::Counter,
            help,
            state.functions.iter().map(|f| {
                (
                    vec![("function", f.spec.name.as_str())],
                    read(&f.stats).load(Ordering::Relaxed) as f64,
                )
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
        state.functions.iter().flat_map(|f| {
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
        state
            .functions
            .iter()
            .map(|f| (vec![("function", f.spec.name.as_str())], &f.stats.latency)),
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        page.finish(),
    )
        .into_response()
}

async fn invoke(
    State(state): State<Arc<HandlerState>>,
    Path(function): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let invocation_id = headers
        .get("x-azure-functions-invocationid")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    let Some(registered) = state.function(&function) else {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_function",
            format!(
                "no function named '{}' (this handler serves: {})",
                function.chars().take(100).collect::<String>(),
                state.function_names().join(", ")
            ),
        );
    };
    let declared_len = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!(
                "the request body is over the {} byte limit (--max-body-bytes)",
                state.max_body_bytes
            ),
        )
    };
    if declared_len.is_some_and(|n| n > state.max_body_bytes) {
        return too_large();
    }
    let bytes = match axum::body::to_bytes(body, state.max_body_bytes).await {
        Ok(b) => b,
        Err(e) => {
            let over = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            return if over {
                too_large()
            } else {
                error(
                    StatusCode::BAD_REQUEST,
                    "unreadable_body",
                    format!("cannot read the request body: {e}"),
                )
            };
        }
    };

    let name = registered.spec.name.clone();
    let trigger = registered.trigger.clone();
    let logic = registered.logic;
    let app = state.app.clone();
    let panic_home = state.panic_home.clone();
    // Decoding and processing run in their own task: a panic there fails this invocation only.
    let task = tokio::spawn(async move {
        let batch = decode_request(&name, &trigger, &bytes).map_err(Failure::Contract)?;
        if let Some(home) = &panic_home
            && batch
                .events
                .iter()
                .any(|e| e.body.windows(home.len()).any(|w| w == home.as_bytes()))
        {
            panic!("fault injection: HUBHOST_FAULT_PANIC_HOME matched an event");
        }
        let report = app
            .process(logic, &batch)
            .await
            .map_err(|error| Failure::App {
                error,
                partition: batch.partition.partition_id.clone(),
                sequence_numbers: sequence_numbers(batch.sequence_range()),
            })?;
        Ok::<_, Failure>((
            batch.partition.partition_id.clone(),
            batch.sequence_range(),
            report,
        ))
    });
    let function = registered.spec.name.as_str();
    let stats = &registered.stats;
    let outcome = task.await;
    stats.latency.observe(started.elapsed());
    match outcome {
        Ok(Ok((partition, range, report))) => {
            let seqs = sequence_numbers(range);
            FunctionStats::count(&stats.ok, 1);
            FunctionStats::count(&stats.events, report.events);
            FunctionStats::count(&stats.applied, report.applied);
            FunctionStats::count(&stats.replayed, report.replayed);
            FunctionStats::count(&stats.dead_lettered, report.dead_lettered);
            tracing::info!(
                function, partition = %partition, sequence_numbers = %seqs, events = report.events,
                applied = report.applied, replayed = report.replayed, dead_lettered = report.dead_lettered,
                elapsed_ms = started.elapsed().as_millis() as u64, invocation_id = %invocation_id,
                "batch processed"
            );
            let log = format!(
                "{function}: partition {partition}, sequence numbers {seqs}: {} events, {} applied, {} replayed, {} dead-lettered",
                report.events, report.applied, report.replayed, report.dead_lettered
            );
            let value = serde_json::to_value(&report).expect("reports serialize");
            reply(StatusCode::OK, &InvocationResponse::ok(vec![log], value))
        }
        Ok(Err(Failure::Contract(e))) => {
            FunctionStats::count(&stats.bad_request, 1);
            tracing::warn!(function, invocation_id = %invocation_id, code = e.code(), "bad request: {e}");
            error(StatusCode::BAD_REQUEST, e.code(), e.to_string())
        }
        Ok(Err(Failure::App {
            error: e,
            partition,
            sequence_numbers,
        })) => {
            let (status, code) = match &e {
                AppError::BadName(_) => (StatusCode::BAD_REQUEST, "invalid_name"),
                AppError::Storage(s) if s.is_transient() => {
                    (StatusCode::INTERNAL_SERVER_ERROR, "storage_unavailable")
                }
                AppError::Storage(_) => (StatusCode::INTERNAL_SERVER_ERROR, "storage_error"),
                AppError::CorruptState { .. } => {
                    (StatusCode::INTERNAL_SERVER_ERROR, "corrupt_state")
                }
                AppError::Contention { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "contention"),
            };
            if matches!(e, AppError::Storage(_)) {
                FunctionStats::count(&stats.storage_errors, 1);
            }
            if status.is_client_error() {
                FunctionStats::count(&stats.bad_request, 1);
            } else {
                FunctionStats::count(&stats.failed, 1);
            }
            tracing::error!(function, partition = %partition, sequence_numbers = %sequence_numbers, invocation_id = %invocation_id, code, "invocation failed: {e}");
            error(status, code, e.to_string())
        }
        Err(join) => {
            FunctionStats::count(&stats.panicked, 1);
            tracing::error!(function, invocation_id = %invocation_id, "invocation panicked: {join}");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "handler_panic",
                "processing this batch panicked; the handler is still running and the host may retry",
            )
        }
    }
}

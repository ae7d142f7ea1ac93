//! The HTTP server the Functions host calls: register your functions, then serve.
//!
//! What it owns, so that a function is only its logic:
//! - `GET /` answers the host's start-up probe (any answer means "ready"); a browser's request
//!   (it asks for HTML) can be given a page of yours instead ([`ServerBuilder::browser_page`]);
//! - `POST /{FunctionName}`: the body limit, decoding every shape of `eventHubTrigger` request
//!   ([`crate::contract::decode`]), running the function in its own task (a panic fails that
//!   invocation only), and the `{"Outputs","Logs","ReturnValue"}` answer;
//! - `GET /metrics`: Prometheus text — per function, batches by outcome, events, handling time,
//!   and the counters your functions declare;
//! - which functions exist: the app folder's `*/function.json` files when there is one (a
//!   declared function you did not register is reported and answered 404), else the
//!   declarations you registered them with;
//! - graceful shutdown, and your clean-up after it.
//!
//! Failures are answered by what the host must do: a request that cannot be decoded, or a
//! [`FunctionError::BadRequest`], gets a 4xx JSON error naming the problem; a
//! [`FunctionError::Failed`] gets a 500, so that the host's retry policy delivers the batch
//! again; a panic gets a 500 `handler_panic` and the process stays up. Request bodies are never
//! logged.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path as FsPath;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::batch::TriggerBatch;
use crate::contract::decode::decode_request;
use crate::contract::response::InvocationResponse;
use crate::function_app::{EventHubTrigger, FunctionApp, FunctionAppError, FunctionSpec, Trigger};
use crate::http::{HttpFunction, HttpRequest};
use crate::metrics::{self, Exposition, Histogram, Kind, LATENCY_BUCKETS};
pub use crate::output::FunctionOutput;

/// The default limit on a request body: the host sends batches of up to `maxEventBatchSize`
/// events of up to 1 MB each.
pub const DEFAULT_MAX_BODY_BYTES: usize = 128 * 1024 * 1024;

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
    /// The name a function counts by ([`Counters::add`]).
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
    /// The name a function observes by ([`Counters::observe`]).
    pub key: &'static str,
    /// The Prometheus family name, e.g. `myapp_event_age_seconds`.
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
}

/// The declared counters and histograms of one function.
pub struct Counters {
    values: BTreeMap<&'static str, AtomicU64>,
    histograms: BTreeMap<&'static str, Histogram>,
}

impl Counters {
    fn new(families: &[CounterFamily], histograms: &[HistogramFamily]) -> Self {
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

    fn get(&self, key: &str) -> u64 {
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
///     async fn run(&self, batch: TriggerBatch, _: &Counters) -> Result<FunctionOutput, FunctionError> {
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
    /// Processes `batch`. Count what the function declared in `counters`, success or not.
    async fn run(
        &self,
        batch: TriggerBatch,
        counters: &Counters,
    ) -> Result<FunctionOutput, FunctionError>;
}

/// The port a handler listens on when `FUNCTIONS_CUSTOMHANDLER_PORT` is not set (started by
/// hand rather than by the host).
pub const DEFAULT_PORT: u16 = 7072;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// `FUNCTIONS_CUSTOMHANDLER_PORT` is not a port number.
    #[error("FUNCTIONS_CUSTOMHANDLER_PORT is {0:?}, not a port number")]
    Port(String),
    /// The app folder or the registrations are unusable.
    #[error(transparent)]
    FunctionApp(#[from] FunctionAppError),
    /// The port is taken or not allowed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("server failed: {0}")]
    Server(std::io::Error),
}

/// A registered function, by trigger.
#[derive(Clone)]
enum Implementation {
    EventHub(Arc<dyn EventHubFunction>),
    Http(Arc<dyn HttpFunction>),
}

type Cleanup = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;
type Page = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Response> + Send>> + Send + Sync>;

/// Registers functions and routes; [`build`](Self::build) matches them with the app folder.
#[derive(Default)]
pub struct ServerBuilder {
    functions: Vec<(FunctionSpec, Implementation)>,
    counters: Vec<CounterFamily>,
    histograms: Vec<HistogramFamily>,
    routes: Option<Router>,
    browser_page: Option<Page>,
    ignored: Vec<String>,
    max_body_bytes: Option<usize>,
    on_shutdown: Option<Cleanup>,
    extra_metrics: Vec<MetricsWriter>,
}

/// Writes families of the app's own onto the `/metrics` page (e.g. its storage traffic).
pub type MetricsWriter = Arc<dyn Fn(&mut Exposition) + Send + Sync>;

impl ServerBuilder {
    /// An Event Hubs function, with the declaration it has when there is no app folder.
    pub fn event_hub_function(
        mut self,
        declaration: FunctionSpec,
        function: impl EventHubFunction,
    ) -> Self {
        self.functions
            .push((declaration, Implementation::EventHub(Arc::new(function))));
        self
    }

    /// An HTTP-triggered function (requests the host wraps, see [`crate::http`]), with the
    /// declaration `func new` gives one when there is no app folder: trigger binding `req`,
    /// `http` output `res`.
    pub fn http_function(mut self, name: &str, function: impl HttpFunction) -> Self {
        let declaration = FunctionSpec {
            name: name.to_string(),
            trigger: Trigger::Http {
                binding_name: "req".into(),
            },
            retry: None,
            bindings: vec![
                crate::function_app::BindingSpec::from_json(
                    &json!({"type": "http", "direction": "out", "name": "res"}),
                )
                .expect("a well-formed binding"),
            ],
        };
        self.functions
            .push((declaration, Implementation::Http(Arc::new(function))));
        self
    }

    /// An Event Hubs function declared only by the app folder's `{name}/function.json` (the
    /// usual case: the host and `hubhost emulate` read the same file). Without an app folder,
    /// [`build`](Self::build) refuses it; use [`event_hub_function`](Self::event_hub_function).
    pub fn function(self, name: &str, function: impl EventHubFunction) -> Self {
        self.event_hub_function(
            FunctionSpec {
                name: name.to_string(),
                trigger: crate::function_app::Trigger::Other {
                    kind: "declared by function.json".into(),
                },
                retry: None,
                bindings: Vec::new(),
            },
            function,
        )
    }

    /// Counters every function may add to (one family each, labelled by function).
    pub fn counters(mut self, families: &[CounterFamily]) -> Self {
        self.counters.extend_from_slice(families);
        self
    }

    /// Latency histograms every function may observe into (one family each, labelled by
    /// function).
    pub fn histograms(mut self, families: &[HistogramFamily]) -> Self {
        self.histograms.extend_from_slice(families);
        self
    }

    /// Families of yours on `/metrics`, written after the framework's on every scrape.
    pub fn metrics(mut self, write: impl Fn(&mut Exposition) + Send + Sync + 'static) -> Self {
        self.extra_metrics.push(Arc::new(write));
        self
    }

    /// Routes of yours, served beside the host's: e.g. an HTTP function the host forwards as
    /// it came (`enableForwardingHttpRequest`). Merged; they must not take `/`, `/metrics` or
    /// `POST /{name}`.
    pub fn routes(mut self, routes: Router) -> Self {
        self.routes = Some(match self.routes.take() {
            Some(r) => r.merge(routes),
            None => routes,
        });
        self
    }

    /// The answer to `GET /` from a browser (a request that accepts HTML); the host's probe
    /// still gets JSON.
    pub fn browser_page<F, Fut>(mut self, page: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response> + Send + 'static,
    {
        self.browser_page = Some(Arc::new(move || Box::pin(page())));
        self
    }

    /// Functions of the app folder that are served by [`routes`](Self::routes), not here.
    pub fn served_elsewhere(mut self, function: &str) -> Self {
        self.ignored.push(function.to_string());
        self
    }

    /// The largest request body accepted (413 above it) [default: [`DEFAULT_MAX_BODY_BYTES`]].
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = Some(bytes);
        self
    }

    /// Runs after the server stopped taking requests (e.g. to flush what was written behind).
    pub fn on_shutdown<F, Fut>(mut self, cleanup: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.on_shutdown = Some(Box::new(move || Box::pin(cleanup())));
        self
    }

    /// Serves as the host expects of a custom handler, until SIGTERM or Ctrl-C: on
    /// `127.0.0.1:$FUNCTIONS_CUSTOMHANDLER_PORT` ([`DEFAULT_PORT`] without it), with the
    /// functions declared in the working directory when it holds host.json (the host starts the
    /// handler in the script root), and logs to stderr ([`init_logging`]).
    pub async fn run(self) -> Result<(), ServeError> {
        init_logging();
        let port = match std::env::var("FUNCTIONS_CUSTOMHANDLER_PORT") {
            Ok(p) => p.trim().parse::<u16>().map_err(|_| ServeError::Port(p))?,
            Err(_) => DEFAULT_PORT,
        };
        let here = std::env::current_dir().map_err(ServeError::Server)?;
        let app_root = here.join("host.json").is_file().then_some(here);
        let server = self.build(app_root.as_deref())?;
        server
            .serve(([127, 0, 0, 1], port).into(), |_| {}, shutdown_signal())
            .await
    }

    /// Matches the registered functions with the app folder's declarations (`app_root`), or
    /// takes their own declarations when there is no folder.
    pub fn build(self, app_root: Option<&FsPath>) -> Result<FunctionServer, FunctionAppError> {
        let declared = match app_root {
            Some(root) => FunctionApp::load(root)?.functions,
            None if let Some((spec, _)) = self
                .functions
                .iter()
                .find(|(s, _)| matches!(s.trigger, crate::function_app::Trigger::Other { .. })) =>
            {
                return Err(FunctionAppError::Invalid {
                    path: format!("{}/function.json", spec.name).into(),
                    problem: format!(
                        "function {} is declared only by its function.json, and there is no app folder (run the handler in the script root, or register it with event_hub_function)",
                        spec.name
                    ),
                });
            }
            None => self
                .functions
                .iter()
                .map(|(spec, _)| spec.clone())
                .collect(),
        };
        let mut functions = Vec::new();
        for spec in declared {
            if self
                .ignored
                .iter()
                .any(|i| i.eq_ignore_ascii_case(&spec.name))
            {
                continue;
            }
            let implementation = self
                .functions
                .iter()
                .find(|(s, _)| s.name.eq_ignore_ascii_case(&spec.name))
                .map(|(_, f)| f.clone());
            let bound = match (&spec.trigger, implementation) {
                (Trigger::EventHub(trigger), Some(Implementation::EventHub(function))) => {
                    Bound::EventHub {
                        trigger: trigger.clone(),
                        function,
                    }
                }
                (Trigger::Http { binding_name }, Some(Implementation::Http(function))) => {
                    Bound::Http {
                        binding: binding_name.clone(),
                        response: spec
                            .outputs()
                            .find(|b| b.is("http"))
                            .map_or_else(|| "$return".to_string(), |b| b.name.clone()),
                        function,
                    }
                }
                _ => {
                    tracing::warn!(function = %spec.name, "function.json declares a function this handler does not implement (or with another trigger); requests for it get 404");
                    continue;
                }
            };
            if let Some(blob) = spec.outputs().find(|b| b.is("blob") && b.is_binary()) {
                return Err(FunctionAppError::Invalid {
                    path: app_root
                        .map(|r| r.join(&spec.name).join("function.json"))
                        .unwrap_or_else(|| spec.name.clone().into()),
                    problem: format!(
                        "the blob output '{}' declares dataType binary: the host would then store the base64 text FunctionOutput::write_blob sends; leave dataType out",
                        blob.name
                    ),
                });
            }
            functions.push(Registered {
                spec,
                bound,
                stats: FunctionStats::new(&self.counters, &self.histograms),
                warned_undeclared: std::sync::atomic::AtomicBool::new(false),
            });
        }
        Ok(FunctionServer {
            functions,
            counters: self.counters,
            histograms: self.histograms,
            extra_metrics: self.extra_metrics,
            routes: self.routes,
            browser_page: self.browser_page,
            max_body_bytes: self.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES),
            on_shutdown: std::sync::Mutex::new(self.on_shutdown),
        })
    }
}

/// A function matched with its declaration.
enum Bound {
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
}

struct Registered {
    spec: FunctionSpec,
    bound: Bound,
    stats: FunctionStats,
    /// Whether an output the function set but did not declare was logged already.
    warned_undeclared: std::sync::atomic::AtomicBool,
}

impl Registered {
    /// The host looks up only the outputs function.json declares, so a value under any other
    /// name would vanish without a word: say so, once per function.
    fn warn_undeclared(&self, output: &FunctionOutput) {
        let undeclared: Vec<&String> = output
            .outputs
            .keys()
            .filter(|name| !self.spec.outputs().any(|b| &b.name == *name))
            .collect();
        if !undeclared.is_empty() && !self.warned_undeclared.swap(true, Ordering::Relaxed) {
            tracing::warn!(function = %self.spec.name, outputs = ?undeclared, "the function set outputs its function.json does not declare; the host ignores them");
        }
    }
}

/// What `/metrics` reports for one function.
struct FunctionStats {
    /// Events in batches the function processed (answered 200).
    events: AtomicU64,
    /// Requests by outcome: answered 200, refused (4xx), failed (5xx), panicked.
    ok: AtomicU64,
    bad_request: AtomicU64,
    failed: AtomicU64,
    panicked: AtomicU64,
    /// From the request's arrival to the answer, for every request that reached the function.
    latency: Histogram,
    declared: Arc<Counters>,
}

impl FunctionStats {
    fn new(families: &[CounterFamily], histograms: &[HistogramFamily]) -> Self {
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

    fn count(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a function's failure by its kind; the status and code the host is answered.
    fn count_failure(&self, e: &FunctionError) -> (StatusCode, &'static str) {
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

/// The functions of one app, served over HTTP as the host expects.
pub struct FunctionServer {
    functions: Vec<Registered>,
    counters: Vec<CounterFamily>,
    histograms: Vec<HistogramFamily>,
    extra_metrics: Vec<MetricsWriter>,
    routes: Option<Router>,
    browser_page: Option<Page>,
    max_body_bytes: usize,
    on_shutdown: std::sync::Mutex<Option<Cleanup>>,
}

impl FunctionServer {
    /// Starts registering functions.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// The names of the functions served at `POST /{name}`.
    pub fn function_names(&self) -> Vec<String> {
        self.functions.iter().map(|f| f.spec.name.clone()).collect()
    }

    fn function(&self, name: &str) -> Option<&Registered> {
        self.functions
            .iter()
            .find(|f| f.spec.name.eq_ignore_ascii_case(name))
    }

    /// Every route: the host's, `/metrics`, and yours.
    pub fn router(self: &Arc<Self>) -> Router {
        let host = Router::new()
            .route("/", get(probe))
            .route("/metrics", get(metrics_page))
            .route("/{function}", post(invoke))
            .fallback(not_found)
            .with_state(self.clone());
        match &self.routes {
            Some(routes) => host.merge(routes.clone()),
            None => host,
        }
    }

    /// Serves on `listen` until `shutdown` resolves, then runs the clean-up.
    pub async fn serve(
        self,
        listen: SocketAddr,
        on_listening: impl FnOnce(SocketAddr),
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let server = Arc::new(self);
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| ServeError::Bind {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(ServeError::Server)?;
        tracing::info!(%addr, functions = ?server.function_names(), "custom handler listening");
        on_listening(addr);
        axum::serve(listener, server.router())
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(ServeError::Server)?;
        let cleanup = server.on_shutdown.lock().expect("cleanup lock").take();
        if let Some(cleanup) = cleanup {
            cleanup().await;
        }
        Ok(())
    }
}

/// Logs to stderr, at the level `RUST_LOG` says (default `info`), as one line per event; the
/// host collects a handler's output. Does nothing if a logger is already set.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal: a log written to a file or a pipe carries no escape codes.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Resolves at SIGTERM (how the host stops a handler) or Ctrl-C.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async {
                match term.as_mut() {
                    Some(t) => { t.recv().await; }
                    None => std::future::pending::<()>().await,
                }
            } => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn reply(status: StatusCode, body: &InvocationResponse) -> Response {
    let bytes = serde_json::to_vec(body).expect("responses serialize");
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    reply(status, &InvocationResponse::error(code, message))
}

async fn probe(State(server): State<Arc<FunctionServer>>, headers: HeaderMap) -> Response {
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"));
    if wants_html && let Some(page) = &server.browser_page {
        return page().await;
    }
    let body = json!({"status": "ready", "functions": server.function_names()});
    (StatusCode::OK, axum::Json(body)).into_response()
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route: the host calls GET / and POST /{FunctionName}",
    )
}

async fn metrics_page(State(server): State<Arc<FunctionServer>>) -> Response {
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

async fn invoke(
    State(server): State<Arc<FunctionServer>>,
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
    let Some(registered) = server.function(&function) else {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_function",
            format!(
                "no function named '{}' (this handler serves: {})",
                function.chars().take(100).collect::<String>(),
                server.function_names().join(", ")
            ),
        );
    };
    let limit = server.max_body_bytes;
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is over the {limit} byte limit (--max-body-bytes)"),
        )
    };
    let declared_len = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared_len.is_some_and(|n| n > limit) {
        return too_large();
    }
    let bytes = match axum::body::to_bytes(body, limit).await {
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

    let (trigger, implementation) = match &registered.bound {
        Bound::EventHub { trigger, function } => (trigger.clone(), function.clone()),
        Bound::Http {
            binding,
            response,
            function,
        } => {
            return invoke_http(
                registered,
                binding,
                response,
                function.clone(),
                bytes,
                started,
                &invocation_id,
            )
            .await;
        }
    };
    let name = registered.spec.name.clone();
    let counters = registered.stats.declared.clone();
    // Decoding and processing run in their own task: a panic there fails this invocation only.
    let task = tokio::spawn(async move {
        let batch = decode_request(&name, &trigger, &bytes).map_err(Failure::Contract)?;
        let partition = batch.partition.partition_id.clone();
        let sequence_numbers = batch.sequence_label();
        let events = batch.events.len() as u64;
        match implementation.run(batch, &counters).await {
            Ok(output) => Ok((partition, sequence_numbers, events, output)),
            Err(error) => Err(Failure::Function {
                error,
                partition,
                sequence_numbers,
            }),
        }
    });
    let function = registered.spec.name.as_str();
    let stats = &registered.stats;
    let outcome = task.await;
    stats.latency.observe(started.elapsed());
    match outcome {
        Ok(Ok((partition, sequence_numbers, events, output))) => {
            FunctionStats::count(&stats.ok, 1);
            registered.warn_undeclared(&output);
            FunctionStats::count(&stats.events, events);
            tracing::info!(
                function, partition = %partition, sequence_numbers = %sequence_numbers, events,
                elapsed_ms = started.elapsed().as_millis() as u64, invocation_id = %invocation_id,
                "batch processed"
            );
            reply(
                StatusCode::OK,
                &InvocationResponse::ok(output.outputs, output.logs, output.return_value),
            )
        }
        Ok(Err(Failure::Contract(e))) => {
            FunctionStats::count(&stats.bad_request, 1);
            tracing::warn!(function, invocation_id = %invocation_id, code = e.code(), "bad request: {e}");
            error(StatusCode::BAD_REQUEST, e.code(), e.to_string())
        }
        Ok(Err(Failure::Function {
            error: e,
            partition,
            sequence_numbers,
        })) => {
            let (status, code) = stats.count_failure(&e);
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

/// One invocation of an HTTP-triggered function: the request from `Data.<binding>`, the
/// response into `Outputs.<response>` (or `ReturnValue`).
async fn invoke_http(
    registered: &Registered,
    binding: &str,
    response_binding: &str,
    function: Arc<dyn HttpFunction>,
    bytes: bytes::Bytes,
    started: Instant,
    invocation_id: &str,
) -> Response {
    let name = registered.spec.name.as_str();
    let stats = &registered.stats;
    let request = match HttpRequest::from_invocation(&bytes, binding) {
        Ok(r) => r,
        Err(e) => {
            FunctionStats::count(&stats.bad_request, 1);
            tracing::warn!(function = name, invocation_id, "bad request: {e}");
            return error(StatusCode::BAD_REQUEST, "bad_http_request", e.to_string());
        }
    };
    let (method, url) = (request.method.clone(), request.url.clone());
    let outcome = tokio::spawn(async move { function.call(request).await }).await;
    stats.latency.observe(started.elapsed());
    match outcome {
        Ok(Ok(response)) => {
            FunctionStats::count(&stats.ok, 1);
            tracing::info!(function = name, %method, status = response.status, elapsed_ms = started.elapsed().as_millis() as u64, invocation_id, "request answered");
            let value = response.to_binding_value();
            let mut answer = InvocationResponse::ok(Default::default(), Vec::new(), Value::Null);
            if response_binding == "$return" {
                answer.return_value = value;
            } else {
                answer.outputs.insert(response_binding.to_string(), value);
            }
            reply(StatusCode::OK, &answer)
        }
        Ok(Err(e)) => {
            let (status, code) = stats.count_failure(&e);
            tracing::error!(function = name, %method, url = %url, invocation_id, code, "invocation failed: {e}");
            error(status, code, e.to_string())
        }
        Err(join) => {
            FunctionStats::count(&stats.panicked, 1);
            tracing::error!(
                function = name,
                invocation_id,
                "invocation panicked: {join}"
            );
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "handler_panic",
                "this request's function panicked; the handler is still running",
            )
        }
    }
}

enum Failure {
    Contract(crate::contract::ContractError),
    Function {
        error: FunctionError,
        partition: String,
        sequence_numbers: String,
    },
}

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
//! - an OpenTelemetry span per invocation, linked to the events' producers, and FaaS and
//!   messaging metrics, when the standard `OTEL_*` variables ask for export;
//! - graceful shutdown, and your clean-up after it.
//!
//! Failures are answered by what the host must do: a request that cannot be decoded, or a
//! [`FunctionError::BadRequest`], gets a 4xx JSON error naming the problem; a
//! [`FunctionError::Failed`] gets a 500, so that the host's retry policy delivers the batch
//! again; a panic gets a 500 `handler_panic` and the process stays up. Request bodies are never
//! logged.
//!
//! [`FunctionError::BadRequest`]: crate::function::FunctionError::BadRequest
//! [`FunctionError::Failed`]: crate::function::FunctionError::Failed

mod invocation_span;
mod lifecycle;
mod metrics_page;
mod registry;
mod routes;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path as FsPath;
use std::pin::Pin;
use std::sync::Arc;

use axum::Router;
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::json;

use crate::function_app::{DeclarationError, FunctionApp, FunctionAppError, FunctionSpec, Trigger};
use crate::http::HttpFunction;
use crate::timer::TimerFunction;
use hubhost_metrics::Exposition;

use crate::counters::{CounterFamily, HistogramFamily};
use crate::function::EventHubFunction;
pub use lifecycle::{init_logging, shutdown_signal};
use registry::{Bound, FunctionStats, Registered};

/// The default limit on a request body: the host sends batches of up to `maxEventBatchSize`
/// events of up to 1 MB each.
pub const DEFAULT_MAX_BODY_BYTES: usize = 128 * 1024 * 1024;

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
    /// A function's [`Once`](crate::once::Once) could not be set up (the app's storage
    /// setting), so that `main` can use `?` on `Once::from_environment()`.
    #[cfg(feature = "once")]
    #[error(transparent)]
    Once(#[from] crate::once::OnceError),
}

/// The trigger kind of a function registered by [`ServerBuilder::function`], whose declaration
/// only the app folder gives.
const DECLARED_BY_FOLDER: &str = "declared by function.json";

/// A timer trigger's binding type.
const TIMER_TRIGGER: &str = "timerTrigger";

/// A registered function, by trigger.
#[derive(Clone)]
enum Implementation {
    EventHub(Arc<dyn EventHubFunction>),
    Http(Arc<dyn HttpFunction>),
    Timer(Arc<dyn TimerFunction>),
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
                route: None,
                methods: Vec::new(),
                auth_level: None,
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

    /// A timer-triggered function (see [`crate::timer`]), with the declaration `func new` gives
    /// one when there is no app folder: trigger binding `myTimer`. Its `schedule` is the
    /// host's business, read from function.json; the handler only answers the firings.
    pub fn timer_function(mut self, name: &str, function: impl TimerFunction) -> Self {
        let declaration = FunctionSpec {
            name: name.to_string(),
            trigger: Trigger::Other {
                kind: TIMER_TRIGGER.into(),
                settings: json!({"type": TIMER_TRIGGER, "direction": "in", "name": "myTimer"})
                    .as_object()
                    .cloned()
                    .expect("an object"),
            },
            retry: None,
            bindings: Vec::new(),
        };
        self.functions
            .push((declaration, Implementation::Timer(Arc::new(function))));
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
                    kind: DECLARED_BY_FOLDER.into(),
                    settings: Default::default(),
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
            None if let Some((spec, _)) = self.functions.iter().find(|(s, _)| {
                matches!(&s.trigger, Trigger::Other { kind, .. } if kind == DECLARED_BY_FOLDER)
            }) =>
            {
                return Err(FunctionAppError::Invalid {
                    path: format!("{}/function.json", spec.name).into(),
                    problem: DeclarationError::NoAppFolder {
                        function: spec.name.clone(),
                    },
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
                (Trigger::Http { binding_name, .. }, Some(Implementation::Http(function))) => {
                    Bound::Http {
                        binding: binding_name.clone(),
                        response: spec
                            .outputs()
                            .find(|b| b.is("http"))
                            .map_or_else(|| "$return".to_string(), |b| b.name.clone()),
                        function,
                    }
                }
                (Trigger::Other { kind, settings }, Some(Implementation::Timer(function)))
                    if kind.eq_ignore_ascii_case(TIMER_TRIGGER) =>
                {
                    Bound::Timer {
                        binding: settings
                            .get("name")
                            .and_then(|n| n.as_str())
                            .unwrap_or("myTimer")
                            .to_string(),
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
                    problem: DeclarationError::BinaryBlobOutput {
                        binding: blob.name.clone(),
                    },
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

    /// The declaration of the function served as `name` (matched as the host matches, ignoring
    /// case).
    pub fn declaration(&self, name: &str) -> Option<&FunctionSpec> {
        self.function(name).map(|f| &f.spec)
    }

    fn function(&self, name: &str) -> Option<&Registered> {
        self.functions
            .iter()
            .find(|f| f.spec.name.eq_ignore_ascii_case(name))
    }

    /// Every route: the host's, `/metrics`, and yours.
    pub fn router(self: &Arc<Self>) -> Router {
        let host = Router::new()
            .route("/", get(routes::probe))
            .route("/metrics", get(metrics_page::metrics_page))
            .route("/{function}", post(routes::invoke))
            .fallback(routes::not_found)
            .with_state(self.clone());
        match &self.routes {
            Some(routes) => host.merge(routes.clone()),
            None => host,
        }
    }

    /// The counters and histograms the functions declared, exported as OpenTelemetry metrics
    /// beside `/metrics` (`faas.name` for the function's label).
    fn export_declared_metrics(&self) {
        let functions = self
            .functions
            .iter()
            .map(|f| (f.spec.name.clone(), f.stats.declared.clone()))
            .collect();
        crate::counters::export_counters(&self.counters, functions);
        for f in &self.functions {
            f.stats
                .declared
                .export_histograms(&f.spec.name, &self.histograms);
        }
    }

    /// Serves on `listen` until `shutdown` resolves, then runs the clean-up.
    pub async fn serve(
        self,
        listen: SocketAddr,
        on_listening: impl FnOnce(SocketAddr),
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        if hubhost_telemetry::exporting_metrics() {
            self.export_declared_metrics();
        }
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
        // The last spans and metrics, sent before the process ends.
        hubhost_telemetry::shutdown();
        Ok(())
    }
}

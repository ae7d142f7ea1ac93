//! `hubhost emulate --app <folder>`: the Functions host's Event Hubs trigger, run locally.
//!
//! It does what `func start` does for a custom-handler app with Event Hubs triggers
//! (docs/host-contract.md): reads host.json, every function.json and
//! local.settings.json; starts the custom handler with `FUNCTIONS_CUSTOMHANDLER_PORT` and waits
//! for any answer to `GET /`; then, for each `eventHubTrigger` function, runs an
//! [`EventProcessor`] on the function's event hub and consumer group, and invokes
//! `POST /{FunctionName}` with the exact request the host builds (`contract::encode`), applying
//! the function's retry policy with `RetryContext`. Several `hubhost emulate` processes on the
//! same event hub and checkpoint store form one pool, as Functions instances do.
//!
//! Settings: local.settings.json `Values`, overridden by the process environment (so a test or
//! a shell can point one instance elsewhere); `%Name%` in function.json is expanded from them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::Utc;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::invoker::{InvokeError, Invoker};
use hubhost_functions::batch::RetryContext;
use hubhost_functions::contract::encode::{HostInvocation, MetadataFlavor, encode_request};
use hubhost_functions::function_app::{
    EventHubTrigger, FunctionApp, FunctionSpec, RetryPolicy, RetryStrategy,
};
use hubhost_functions::metrics::{self, Exposition, Kind};
use hubhost_processor::checkpoint::{CheckpointStore, ConsumerGroupKey, DEFAULT_CONTAINER};
use hubhost_processor::eventhubs::EventHubTarget;
use hubhost_processor::{
    BatchHandler, BatchOutcome, Consumer, EventProcessor, PartitionBatch, ProcessorOptions,
    ProcessorStats,
};
use hubhost_storage::counting::{CountingStore, OperationCounts};

/// The setting a trigger without `connection` uses.
pub const DEFAULT_CONNECTION_SETTING: &str = "EventHubConnection";
/// The host's `customHandler.initializationTimeout` default.
const HANDLER_START_TIMEOUT: Duration = Duration::from_secs(30);
/// The host gives up after this many handler restarts (`ErrorEventsThreshold`).
const HANDLER_RESTARTS: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    #[error(transparent)]
    App(#[from] hubhost_functions::function_app::FunctionAppError),
    #[error("{path}: {problem}")]
    Settings { path: PathBuf, problem: String },
    #[error("host.json: {0}")]
    HostJson(String),
    #[error("function {function}: {problem}")]
    Function { function: String, problem: String },
    #[error("the app has no function with an eventHubTrigger; nothing to run")]
    NoEventHubFunctions,
    #[error("the custom handler ({command}) could not start: {problem}")]
    HandlerStart { command: String, problem: String },
    #[error("the custom handler exited {0} times; giving up as the Functions host does")]
    HandlerCrashed(u32),
    #[error(transparent)]
    Storage(#[from] hubhost_storage::settings::SettingsError),
    #[error(transparent)]
    Store(#[from] hubhost_storage::StoreError),
    #[error(transparent)]
    Checkpoint(#[from] hubhost_processor::checkpoint::CheckpointError),
    #[error(transparent)]
    Processor(#[from] hubhost_processor::ProcessorError),
    #[error("metrics endpoint: {0}")]
    Metrics(String),
}

#[derive(Debug, Clone)]
pub struct EmulateOptions {
    pub app: PathBuf,
    /// Checkpoint store: a connection string or directory [default: AzureWebJobsStorage, else
    /// the local directory].
    pub storage: Option<String>,
    pub checkpoint_on_success: bool,
    /// This instance's owner id in the checkpoint store [default: unique per process].
    pub instance_id: Option<String>,
    /// How long a foreign owner's ownership stays active without renewal [default: the
    /// balancer's `FOREIGN_OWNERSHIP_EXPIRY`, or hubhost's own expiry if that is longer].
    pub foreign_ownership_expiry: Option<Duration>,
    /// Where to serve Prometheus `/metrics` (none: no endpoint).
    pub metrics: Option<std::net::SocketAddr>,
}

/// App settings: local.settings.json `Values`, the process environment winning.
#[derive(Debug, Clone, Default)]
pub struct AppSettings {
    values: BTreeMap<String, String>,
}

impl AppSettings {
    pub fn load(app_root: &Path) -> Result<Self, EmulateError> {
        let path = app_root.join("local.settings.json");
        let mut values = BTreeMap::new();
        if path.is_file() {
            let problem = |problem: String| EmulateError::Settings {
                path: path.clone(),
                problem,
            };
            let text = std::fs::read_to_string(&path).map_err(|e| problem(e.to_string()))?;
            let json: Value =
                serde_json::from_str(&text).map_err(|e| problem(format!("not valid JSON: {e}")))?;
            if let Some(map) = json.get("Values").and_then(Value::as_object) {
                for (k, v) in map {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        Value::Null => continue,
                        other => other.to_string(),
                    };
                    values.insert(k.clone(), v);
                }
            }
        }
        for (k, v) in std::env::vars() {
            values.insert(k, v);
        }
        Ok(AppSettings { values })
    }

    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        AppSettings {
            values: pairs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<String> {
        self.values.get(name).cloned()
    }

    /// `%Name%` → the setting's value, as the host resolves binding expressions.
    pub fn expand(&self, text: &str) -> Result<String, String> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find('%') {
            out.push_str(&rest[..start]);
            let after = &rest[start + 1..];
            let end = after
                .find('%')
                .ok_or(format!("unclosed %…% in \"{text}\""))?;
            let name = &after[..end];
            let value = self.get(name).ok_or(format!(
                "the app setting {name} (used as %{name}%) is not set"
            ))?;
            out.push_str(&value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// Invokes one function for each batch, with the function's retry policy.
pub struct FunctionDispatch {
    pub invoker: Invoker,
    pub function: String,
    /// With `%…%` expanded.
    pub trigger: EventHubTrigger,
    pub retry: Option<RetryPolicy>,
}

/// Why one invocation did not succeed.
enum InvocationFailure {
    /// The function ran and failed (a non-2xx answer, or one that is not JSON): the retry
    /// policy applies, and after it the host's rule (checkpoint anyway).
    Function(String),
    /// The handler gave no answer (down, restarting, died mid-request): the function may
    /// never have seen the batch, so it is neither a failure nor a success.
    NoAnswer(String),
}

impl FunctionDispatch {
    async fn invoke_once(
        &self,
        batch: &PartitionBatch,
        retry: Option<&RetryContext>,
    ) -> Result<(), InvocationFailure> {
        let body = encode_request(&HostInvocation {
            function: &self.function,
            trigger: &self.trigger,
            partition: &batch.context,
            events: &batch.events,
            retry,
            flavor: MetadataFlavor::Current,
            now: Utc::now(),
        })
        .map_err(|e| InvocationFailure::Function(e.to_string()))?;
        let answer = match self.invoker.invoke(&self.function, body).await {
            Ok(answer) => answer,
            Err(e @ InvokeError::NoAnswer(_)) => {
                return Err(InvocationFailure::NoAnswer(e.to_string()));
            }
            Err(e) => return Err(InvocationFailure::Function(e.to_string())),
        };
        if answer.succeeded() {
            Ok(())
        } else {
            Err(InvocationFailure::Function(format!(
                "the handler answered {}: {}",
                answer.status, answer.body
            )))
        }
    }
}

/// The wait before retry number `retry` (1-based) of a policy.
pub fn retry_delay(policy: &RetryPolicy, retry: u32) -> Duration {
    match &policy.strategy {
        RetryStrategy::FixedDelay { delay } => *delay,
        RetryStrategy::ExponentialBackoff { minimum, maximum } => minimum
            .saturating_mul(1u32 << retry.saturating_sub(1).min(20))
            .min(*maximum),
    }
}

#[async_trait::async_trait]
impl BatchHandler for FunctionDispatch {
    /// One delivery of the batch with the function's retry policy. A handler that gives no
    /// answer ends it at once as [`BatchOutcome::NotProcessed`] (the pump delivers the batch
    /// again once the handler is back); so does a stop during the retries, because the host
    /// (Event Hubs extension 6.2.0 and later) writes no checkpoint while its listener stops
    /// and the next owner starts the batch over.
    async fn handle(&self, batch: &PartitionBatch, stop: &CancellationToken) -> BatchOutcome {
        let mut attempt: u32 = 0;
        loop {
            let context = self.retry.as_ref().map(|p| RetryContext {
                retry_count: i64::from(attempt),
                max_retry_count: p.max_retry_count,
            });
            let error = match self.invoke_once(batch, context.as_ref()).await {
                Ok(()) => return BatchOutcome::Succeeded,
                Err(InvocationFailure::NoAnswer(e)) => return BatchOutcome::NotProcessed(e),
                Err(InvocationFailure::Function(e)) => e,
            };
            let Some(policy) = &self.retry else {
                return BatchOutcome::Failed(error);
            };
            if policy.max_retry_count >= 0 && i64::from(attempt) >= policy.max_retry_count {
                return BatchOutcome::Failed(format!("{error} (after {attempt} retries)"));
            }
            attempt += 1;
            let delay = retry_delay(policy, attempt);
            tracing::warn!(
                function = %self.function, partition = %batch.context.partition_id,
                first_sequence = ?batch.events.first().and_then(|e| e.sequence_number),
                last_sequence = ?batch.events.last().and_then(|e| e.sequence_number),
                attempt, ?delay, %error, "invocation failed; retrying"
            );
            tokio::select! {
                _ = stop.cancelled() => return BatchOutcome::NotProcessed(format!("{error} (stopping; retries abandoned)")),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}

/// One Event Hubs function, resolved against the settings.
pub struct FunctionTarget {
    pub spec: FunctionSpec,
    pub trigger: EventHubTrigger,
    pub target: EventHubTarget,
}

/// Every `eventHubTrigger` function of the app with its event hub resolved.
pub fn event_hub_functions(
    app_functions: &[FunctionSpec],
    settings: &AppSettings,
) -> Result<Vec<FunctionTarget>, EmulateError> {
    let mut out = Vec::new();
    for spec in app_functions {
        let Some(trigger) = spec.event_hub_trigger() else {
            continue;
        };
        let bad = |problem: String| EmulateError::Function {
            function: spec.name.clone(),
            problem,
        };
        let mut trigger = trigger.clone();
        trigger.event_hub_name = settings.expand(&trigger.event_hub_name).map_err(bad)?;
        trigger.consumer_group = settings.expand(&trigger.consumer_group).map_err(bad)?;
        let setting = trigger
            .connection
            .clone()
            .unwrap_or_else(|| DEFAULT_CONNECTION_SETTING.to_string());
        let connection = settings.get(&setting).ok_or(bad(format!(
                "the connection setting {setting} is not set (local.settings.json Values or the environment)"
            )))?;
        let target = EventHubTarget::parse(&connection, Some(&trigger.event_hub_name))
            .map_err(|e| bad(format!("{setting}: {e}")))?;
        out.push(FunctionTarget {
            spec: spec.clone(),
            trigger,
            target,
        });
    }
    if out.is_empty() {
        return Err(EmulateError::NoEventHubFunctions);
    }
    Ok(out)
}

/// One processor per function, all calling the handler at `invoker`.
pub fn consumers(
    functions: &[FunctionTarget],
    store: &CheckpointStore,
    options: &ProcessorOptions,
    invoker: &Invoker,
) -> Result<Vec<Arc<Consumer>>, EmulateError> {
    functions
        .iter()
        .map(|f| {
            let key = ConsumerGroupKey::new(
                f.target.namespace.clone(),
                f.target.hub.clone(),
                f.trigger.consumer_group.clone(),
            )?;
            Ok(Arc::new(Consumer {
                function: f.spec.name.clone(),
                target: f.target.clone(),
                key,
                store: store.clone(),
                options: options.clone(),
                single_event: f.trigger.cardinality
                    == hubhost_functions::function_app::Cardinality::One,
                handler: Arc::new(FunctionDispatch {
                    invoker: invoker.clone(),
                    function: f.spec.name.clone(),
                    trigger: f.trigger.clone(),
                    retry: f.spec.retry.clone(),
                }),
                stats: Arc::new(ProcessorStats::default()),
            }))
        })
        .collect()
}

/// A unique owner id for this process, readable in `checkpoints list`.
pub fn default_instance_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "hubhost".into());
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &id[..8])
}

/// The custom handler process, started and restarted the way the host does.
struct HandlerProcess {
    program: PathBuf,
    arguments: Vec<String>,
    working_directory: PathBuf,
    env: Vec<(String, String)>,
}

impl HandlerProcess {
    /// From host.json `customHandler.description` (or the older `httpWorker`).
    fn from_app(
        app: &FunctionApp,
        settings: &AppSettings,
        port: u16,
    ) -> Result<Self, EmulateError> {
        let section = app
            .host_json
            .get("customHandler")
            .or_else(|| app.host_json.get("httpWorker"))
            .ok_or(EmulateError::HostJson(
                "no customHandler section: hubhost emulate runs custom-handler apps".into(),
            ))?;
        let description = section
            .get("description")
            .ok_or(EmulateError::HostJson("Missing worker Description.".into()))?;
        let text = |key: &str| description.get(key).and_then(Value::as_str);
        let executable = text("defaultExecutablePath")
            .filter(|p| !p.is_empty())
            .ok_or(EmulateError::HostJson(
                "WorkerDescription DefaultExecutablePath cannot be empty".into(),
            ))?;
        let expand = |s: &str| settings.expand(s).map_err(EmulateError::HostJson);
        let executable = expand(executable)?;
        // As the host: relative to the app root if that file exists, else a command on PATH.
        let in_app = app.root.join(&executable);
        let program = if in_app.is_file() {
            in_app
        } else {
            PathBuf::from(&executable)
        };
        let mut arguments = Vec::new();
        for a in description
            .get("arguments")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            arguments.push(expand(a)?);
        }
        let working_directory = match text("workingDirectory").filter(|d| !d.is_empty()) {
            Some(d) => app.root.join(expand(d)?),
            None => app.root.clone(),
        };
        let mut env: Vec<(String, String)> = settings
            .values
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // `hubhost` in host.json finds this very build first.
        if let Ok(me) = std::env::current_exe()
            && let Some(dir) = me.parent()
        {
            let path = settings.get("PATH").unwrap_or_default();
            env.push(("PATH".into(), format!("{}:{path}", dir.display())));
        }
        let worker_id = uuid::Uuid::new_v4().to_string();
        for (k, v) in [
            ("FUNCTIONS_CUSTOMHANDLER_PORT", port.to_string()),
            ("FUNCTIONS_HTTPWORKER_PORT", port.to_string()),
            ("FUNCTIONS_CUSTOMHANDLER_WORKER_ID", worker_id.clone()),
            ("FUNCTIONS_HTTPWORKER_ID", worker_id),
            ("FUNCTIONS_APP_ROOT_PATH", app.root.display().to_string()),
        ] {
            env.push((k.into(), v));
        }
        Ok(HandlerProcess {
            program,
            arguments,
            working_directory,
            env,
        })
    }

    fn describe(&self) -> String {
        format!("{} {}", self.program.display(), self.arguments.join(" "))
    }

    fn spawn(&self) -> Result<tokio::process::Child, EmulateError> {
        // The host's worker does not outlive the host, even after `kill -9`.
        let mut cmd = crate::child::command(&self.program);
        cmd.args(&self.arguments)
            .current_dir(&self.working_directory)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null());
        cmd.spawn().map_err(|e| EmulateError::HandlerStart {
            command: self.describe(),
            problem: e.to_string(),
        })
    }
}

/// Starts the handler and waits until it answers, as the host does before any invocation.
async fn start_handler(
    process: &HandlerProcess,
    invoker: &Invoker,
) -> Result<tokio::process::Child, EmulateError> {
    let mut child = process.spawn()?;
    tokio::select! {
        ready = invoker.wait_ready(HANDLER_START_TIMEOUT) => {
            ready.map_err(|e| EmulateError::HandlerStart { command: process.describe(), problem: e.to_string() })?;
        }
        status = child.wait() => {
            return Err(EmulateError::HandlerStart {
                command: process.describe(),
                problem: format!("it exited ({}) before answering GET /", status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string())),
            });
        }
    }
    Ok(child)
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub async fn run(
    opts: EmulateOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), EmulateError> {
    let app = FunctionApp::load(&opts.app)?;
    let settings = AppSettings::load(&opts.app)?;
    let mut options =
        ProcessorOptions::from_host_json(&app.host_json).map_err(EmulateError::HostJson)?;
    options.checkpoint_on_success = opts.checkpoint_on_success;
    if let Some(foreign) = opts.foreign_ownership_expiry {
        options.balancer.foreign_ownership_expiry = foreign;
        options
            .balancer
            .validate()
            .map_err(|e| EmulateError::HostJson(format!("--foreign-ownership-expiry: {e}")))?;
    }
    let functions = event_hub_functions(&app.functions, &settings)?;

    let storage =
        hubhost_storage::settings::resolve_storage(opts.storage.as_deref(), |k| settings.get(k))?;
    let counting = CountingStore::new(storage.open()?);
    let storage_operations = counting.counts.clone();
    let store = CheckpointStore::new(Arc::new(counting), DEFAULT_CONTAINER);
    store.ensure_container().await?;

    let port = free_port().map_err(|e| EmulateError::HandlerStart {
        command: "-".into(),
        problem: format!("no free port: {e}"),
    })?;
    let process = HandlerProcess::from_app(&app, &settings, port)?;
    let invoker = Invoker::new(&format!("http://127.0.0.1:{port}"));
    let mut child = start_handler(&process, &invoker).await?;

    let instance_id = opts.instance_id.clone().unwrap_or_else(default_instance_id);
    let consumers = consumers(&functions, &store, &options, &invoker)?;
    println!(
        "hubhost emulate: instance {instance_id}, handler `{}` on port {port}, checkpoints in {}",
        process.describe(),
        store.describe()
    );
    for f in &functions {
        println!(
            "  {} ← {:?}, consumer group {}",
            f.spec.name, f.target, f.trigger.consumer_group
        );
    }
    let stop = CancellationToken::new();
    let metrics = match opts.metrics {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| EmulateError::Metrics(format!("cannot listen on {addr}: {e}")))?;
            let local = listener
                .local_addr()
                .map_err(|e| EmulateError::Metrics(e.to_string()))?;
            println!("  metrics: http://{local}/metrics");
            let last_enqueued = Arc::new(LastEnqueued::default());
            tokio::spawn(last_enqueued.clone().refresh(
                consumers.iter().map(|c| c.target.clone()).collect(),
                stop.child_token(),
            ));
            let page = MetricsPage {
                consumers: consumers.clone(),
                storage_operations,
                last_enqueued,
            };
            Some(tokio::spawn(page.serve(listener, stop.child_token())))
        }
        None => None,
    };
    let mut processors = tokio::task::JoinSet::new();
    for consumer in &consumers {
        let processor = EventProcessor::new(consumer.clone(), instance_id.clone());
        processors.spawn(processor.run(stop.child_token()));
    }
    let progress = {
        let consumers = consumers.clone();
        crate::progress::Progress::spawn(move || {
            let parts: Vec<String> = consumers
                .iter()
                .map(|c| {
                    format!(
                        "{}: {} partitions, {} events, {} batches ({} failed)",
                        c.consumer_group(),
                        c.stats.pumps_running.load(Ordering::Relaxed),
                        c.stats.events.load(Ordering::Relaxed),
                        c.stats.batches.load(Ordering::Relaxed),
                        c.stats.failed_batches.load(Ordering::Relaxed),
                    )
                })
                .collect();
            parts.join(" | ")
        })
    };

    tokio::pin!(shutdown);
    let mut restarts = 0;
    let outcome = loop {
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            Some(ended) = processors.join_next() => {
                // A processor ends early only on a configuration error.
                match ended {
                    Ok(Err(e)) => break Err(e.into()),
                    Ok(Ok(())) => continue,
                    Err(e) => break Err(EmulateError::HostJson(format!("a processor panicked: {e}"))),
                }
            }
            status = child.wait() => {
                restarts += 1;
                tracing::error!(status = ?status.ok(), restarts, "the custom handler exited; restarting it");
                if restarts > HANDLER_RESTARTS {
                    break Err(EmulateError::HandlerCrashed(restarts));
                }
                child = match start_handler(&process, &invoker).await {
                    Ok(c) => c,
                    Err(e) => break Err(e),
                };
            }
        }
    };
    drop(progress);
    // Pumps finish their batches (the handler is still up), checkpoint and relinquish.
    stop.cancel();
    while processors.join_next().await.is_some() {}
    if let Some(server) = metrics {
        let _ = server.await;
    }
    stop_child(&mut child).await;
    println!("hubhost emulate: instance {instance_id} stopped");
    outcome
}

/// What `GET /metrics` shows: the processors' counters and the checkpoint store traffic.
#[derive(Clone)]
struct MetricsPage {
    consumers: Vec<Arc<Consumer>>,
    storage_operations: Arc<OperationCounts>,
    last_enqueued: Arc<LastEnqueued>,
}

/// How often `/metrics` learns the hubs' last enqueued sequence numbers (for the lag).
const LAG_REFRESH: Duration = Duration::from_secs(5);

/// Each hub's partitions' last enqueued sequence numbers, as last read.
#[derive(Default)]
struct LastEnqueued {
    /// hub → partition → last enqueued sequence number.
    by_hub: std::sync::Mutex<BTreeMap<String, BTreeMap<String, i64>>>,
}

impl LastEnqueued {
    /// Reads every target's partition ends every [`LAG_REFRESH`] until `stop`.
    async fn refresh(self: Arc<Self>, mut targets: Vec<EventHubTarget>, stop: CancellationToken) {
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
        page.finish()
    }

    async fn serve(self, listener: tokio::net::TcpListener, stop: CancellationToken) {
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

/// SIGTERM, a moment to finish, then SIGKILL.
async fn stop_child(child: &mut tokio::process::Child) {
    #[cfg(unix)]
    if let Some(pid) = child.id() {
        // SAFETY: sending a signal to our own child's pid.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
        if tokio::time::timeout(Duration::from_secs(3), child.wait())
            .await
            .is_ok()
        {
            return;
        }
    }
    let _ = child.kill().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_expand_like_the_host() {
        let s = AppSettings::from_pairs([("EventHubName", "sensors"), ("X", "y")]);
        assert_eq!(s.expand("%EventHubName%").unwrap(), "sensors");
        assert_eq!(s.expand("a-%X%-%X%").unwrap(), "a-y-y");
        assert_eq!(s.expand("plain").unwrap(), "plain");
        assert!(s.expand("%Missing%").unwrap_err().contains("Missing"));
        assert!(s.expand("%open").unwrap_err().contains("unclosed"));
    }

    /// A handler on a real socket that answers 500 to its first `failures` requests, then 200,
    /// recording each request's `RetryContext.RetryCount`.
    async fn flaky_handler(failures: usize) -> (Invoker, Arc<std::sync::Mutex<Vec<i64>>>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = axum::Router::new().route(
            "/{function}",
            axum::routing::post(move |body: axum::body::Bytes| {
                let record = record.clone();
                async move {
                    let request: Value = serde_json::from_slice(&body).unwrap();
                    let retry: Value = match &request["Metadata"]["RetryContext"] {
                        Value::String(text) => serde_json::from_str(text).unwrap(),
                        other => other.clone(),
                    };
                    let mut seen = record.lock().unwrap();
                    seen.push(retry["RetryCount"].as_i64().unwrap());
                    let status = if seen.len() <= failures {
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        axum::http::StatusCode::OK
                    };
                    (
                        status,
                        axum::Json(serde_json::json!({"Outputs": {}, "Logs": []})),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (Invoker::new(&base), seen)
    }

    fn dispatch(invoker: Invoker, max_retry_count: i64) -> FunctionDispatch {
        FunctionDispatch {
            invoker,
            function: "F".into(),
            trigger: EventHubTrigger {
                binding_name: "events".into(),
                event_hub_name: "sensors".into(),
                consumer_group: "$Default".into(),
                cardinality: hubhost_functions::function_app::Cardinality::Many,
                data_type: hubhost_functions::function_app::DataType::String,
                connection: None,
            },
            retry: Some(RetryPolicy {
                strategy: RetryStrategy::FixedDelay {
                    delay: Duration::from_millis(1),
                },
                max_retry_count,
            }),
        }
    }

    fn one_event_batch() -> PartitionBatch {
        PartitionBatch {
            context: hubhost_functions::batch::PartitionContext {
                partition_id: "0".into(),
                ..Default::default()
            },
            events: vec![hubhost_functions::batch::EventRecord {
                body: bytes::Bytes::from_static(b"{}"),
                sequence_number: Some(7),
                offset: Some("700".into()),
                enqueued_time: Some(Utc::now()),
                partition_key: None,
                properties: Default::default(),
            }],
        }
    }

    #[tokio::test]
    async fn retrying_forever_outlasts_any_number_of_failures() {
        // maxRetryCount -1, the reference app's policy: a storage outage answered with 500
        // is retried until it is over, never given up and checkpointed.
        let (invoker, seen) = flaky_handler(25).await;
        let outcome = dispatch(invoker, -1)
            .handle(&one_event_batch(), &CancellationToken::new())
            .await;
        assert_eq!(outcome, BatchOutcome::Succeeded);
        assert_eq!(*seen.lock().unwrap(), (0..=25).collect::<Vec<i64>>());
    }

    #[tokio::test]
    async fn a_finite_policy_fails_the_batch_after_its_retries() {
        let (invoker, seen) = flaky_handler(25).await;
        let outcome = dispatch(invoker, 3)
            .handle(&one_event_batch(), &CancellationToken::new())
            .await;
        assert!(
            matches!(&outcome, BatchOutcome::Failed(e) if e.contains("after 3 retries")),
            "{outcome:?}"
        );
        assert_eq!(*seen.lock().unwrap(), [0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn no_answer_or_a_stop_is_not_a_function_failure() {
        // Nothing listens on the port: the handler is down.
        let port = free_port().unwrap();
        let down = Invoker::new(&format!("http://127.0.0.1:{port}"));
        let outcome = dispatch(down, -1)
            .handle(&one_event_batch(), &CancellationToken::new())
            .await;
        assert!(
            matches!(&outcome, BatchOutcome::NotProcessed(e) if e.contains("no answer")),
            "{outcome:?}"
        );
        // A stop during the retries abandons them without a verdict (no checkpoint follows).
        let (invoker, _) = flaky_handler(usize::MAX).await;
        let stop = CancellationToken::new();
        let stopper = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            stopper.cancel();
        });
        let outcome = dispatch(invoker, -1)
            .handle(&one_event_batch(), &stop)
            .await;
        assert!(
            matches!(&outcome, BatchOutcome::NotProcessed(e) if e.contains("stopping")),
            "{outcome:?}"
        );
    }

    #[test]
    fn retry_delays_follow_the_policy() {
        let exp = RetryPolicy {
            strategy: RetryStrategy::ExponentialBackoff {
                minimum: Duration::from_secs(2),
                maximum: Duration::from_secs(30),
            },
            max_retry_count: 5,
        };
        let delays: Vec<u64> = (1..=5).map(|r| retry_delay(&exp, r).as_secs()).collect();
        assert_eq!(delays, [2, 4, 8, 16, 30]);
        let fixed = RetryPolicy {
            strategy: RetryStrategy::FixedDelay {
                delay: Duration::from_secs(3),
            },
            max_retry_count: -1,
        };
        assert_eq!(retry_delay(&fixed, 40), Duration::from_secs(3));
    }
}

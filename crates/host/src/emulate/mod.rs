//! `hubhost emulate --app <folder>`: the Functions host's Event Hubs trigger, run locally.
//!
//! It does what `func start` does for a custom-handler app with Event Hubs triggers
//! (docs/host-contract.md): reads host.json, every function.json and local.settings.json
//! (`settings`); starts the custom handler with `FUNCTIONS_CUSTOMHANDLER_PORT` and waits for
//! any answer to `GET /` (`handler_process`); then, for each `eventHubTrigger` function, runs an
//! [`EventProcessor`] on the function's event hub and consumer group, and delivers each batch
//! as `POST /{FunctionName}` with the exact request the host builds and the function's retry
//! policy (`dispatch`). Several `hubhost emulate` processes on the same event hub and
//! checkpoint store form one pool, as Functions instances do. `/metrics` is `metrics`.
//!
//! This file is the run loop: it wires those parts together and restarts the handler when it
//! exits, three times, as the host does.

mod dispatch;
mod handler_process;
mod identity;
mod metrics;
mod outputs;
mod settings;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::invoker::Invoker;
use hubhost_eventhubs::EventHubTarget;
use hubhost_functions::function_app::{EventHubTrigger, FunctionApp, FunctionSpec};
use hubhost_processor::checkpoint::{CheckpointStore, ConsumerGroupKey, DEFAULT_CONTAINER};
use hubhost_processor::{Consumer, EventProcessor, ProcessorOptions, ProcessorStats};
use hubhost_storage::counting::CountingStore;

pub use dispatch::{FunctionDispatch, retry_delay};
pub use identity::{IdentityError, IdentitySource, InstanceIdentity};
pub use outputs::{EventSender, OutputPlan, OutputsDone};
pub use settings::AppSettings;

use handler_process::{HandlerProcess, start_handler, stop_child};
use metrics::{LastEnqueued, MetricsPage};

/// The setting a trigger without `connection` uses.
pub const DEFAULT_CONNECTION_SETTING: &str = "EventHubConnection";
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
    #[error("function {function}: binding '{binding}' ({kind}): {problem}")]
    Binding {
        function: String,
        binding: String,
        kind: String,
        problem: String,
    },
    #[error("the app has no function with an eventHubTrigger; nothing to run")]
    NoEventHubFunctions,
    #[error("the custom handler ({command}) could not start: {problem}")]
    HandlerStart { command: String, problem: String },
    #[error("the custom handler exited {0} times; giving up as the Functions host does")]
    HandlerCrashed(u32),
    /// A bug in hubhost, not in the app: the message and a log with RUST_BACKTRACE=1 belong in
    /// an issue.
    #[error("a partition processor panicked (a hubhost bug; please report it): {0}")]
    ProcessorPanicked(String),
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
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

#[derive(Debug, Clone)]
pub struct EmulateOptions {
    pub app: PathBuf,
    /// Checkpoint store: a connection string or directory [default: AzureWebJobsStorage, else
    /// the local directory].
    pub storage: Option<String>,
    pub checkpoint_on_success: bool,
    /// This instance's owner id in the checkpoint store [default: a stable id, see
    /// [`claim_identity`]].
    pub instance_id: Option<String>,
    /// How long a foreign owner's ownership stays active without renewal [default: the
    /// balancer's `FOREIGN_OWNERSHIP_EXPIRY`, or hubhost's own expiry if that is longer].
    pub foreign_ownership_expiry: Option<Duration>,
    /// Where to serve Prometheus `/metrics` (none: no endpoint).
    pub metrics: Option<std::net::SocketAddr>,
}

/// One Event Hubs function, resolved against the settings.
pub struct FunctionTarget {
    pub spec: FunctionSpec,
    pub trigger: EventHubTrigger,
    pub target: EventHubTarget,
    /// Its output bindings, resolved; the app is refused if one cannot be carried out.
    pub outputs: Arc<OutputPlan>,
}

/// A function's `eventHubTrigger` with its `%Setting%` names expanded and its connection
/// resolved; `None` for a function with another trigger.
pub fn resolve_trigger(
    spec: &FunctionSpec,
    settings: &AppSettings,
) -> Result<Option<(EventHubTrigger, EventHubTarget)>, EmulateError> {
    let Some(trigger) = spec.event_hub_trigger() else {
        return Ok(None);
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
    // A connection string in the setting, else an identity-based connection, as in the host;
    // both read from local.settings.json Values or the environment.
    let target =
        EventHubTarget::from_settings(&setting, &trigger.event_hub_name, |k| settings.get(k))
            .map_err(|e| bad(format!("{setting}: {e}")))?;
    Ok(Some((trigger, target)))
}

/// Every `eventHubTrigger` function of the app with its event hub and its outputs resolved;
/// `eventHub` outputs send through `sender`.
pub fn event_hub_functions(
    app_functions: &[FunctionSpec],
    settings: &AppSettings,
    sender: &EventSender,
) -> Result<Vec<FunctionTarget>, EmulateError> {
    let mut out = Vec::new();
    for spec in app_functions {
        let Some((trigger, target)) = resolve_trigger(spec, settings)? else {
            continue;
        };
        let outputs = Arc::new(OutputPlan::resolve(spec, settings, sender)?);
        out.push(FunctionTarget {
            spec: spec.clone(),
            trigger,
            target,
            outputs,
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
                    outputs: f.outputs.clone(),
                }),
                stats: Arc::new(ProcessorStats::default()),
                ends: Default::default(),
            }))
        })
        .collect()
}

/// Claims this instance's owner id for every consumer group of `functions` in `store`:
/// `explicit` (`--instance-id`) if given, else the platform's instance id, else the host
/// name's lowest free slot; a stable id, so a restarted instance reclaims its partitions at
/// once (module `identity`). Refused if another process on this machine holds the id.
pub fn claim_identity(
    explicit: Option<&str>,
    functions: &[FunctionTarget],
    store: &CheckpointStore,
) -> Result<InstanceIdentity, IdentityError> {
    let candidates =
        identity::candidates(explicit, |k| std::env::var(k).ok(), identity::hostname());
    let scopes: Vec<String> = functions
        .iter()
        .map(|f| {
            format!(
                "{}|{}/{}/{}",
                store.describe(),
                f.target.namespace.to_lowercase(),
                f.target.hub.to_lowercase(),
                f.trigger.consumer_group.to_lowercase()
            )
        })
        .collect();
    identity::claim(&candidates, &scopes, &identity::lock_folder())
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
    let functions = event_hub_functions(&app.functions, &settings, &EventSender::start())?;

    let storage =
        hubhost_storage::settings::resolve_storage(opts.storage.as_deref(), |k| settings.get(k))?;
    let counting = CountingStore::with_kinds(
        storage.open()?,
        hubhost_processor::checkpoint::names::blob_kind,
    );
    let storage_operations = counting.counts.clone();
    let storage_requests = counting.requests.clone();
    let store = CheckpointStore::new(Arc::new(counting), DEFAULT_CONTAINER);
    store.ensure_container().await?;
    let identity = claim_identity(opts.instance_id.as_deref(), &functions, &store)?;
    let instance_id = identity.id.clone();

    let port = crate::child::free_listen_port().map_err(|e| EmulateError::HandlerStart {
        command: "-".into(),
        problem: format!("no free port: {e}"),
    })?;
    let process = HandlerProcess::from_app(&app, &settings, port)?;
    let invoker = Invoker::new(&format!("http://127.0.0.1:{port}"));
    let mut child = start_handler(&process, &invoker).await?;

    let consumers = consumers(&functions, &store, &options, &invoker)?;
    println!(
        "hubhost emulate: instance {instance_id} ({}), handler `{}` on port {port}, checkpoints in {}",
        match identity.source {
            IdentitySource::Flag => "--instance-id".to_string(),
            IdentitySource::Platform(variable) => variable.to_string(),
            IdentitySource::HostSlot => "host name and free slot".to_string(),
        },
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
                storage_requests,
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
                    Err(e) => break Err(EmulateError::ProcessorPanicked(e.to_string())),
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
    drop(identity);
    outcome
}

//! `hubhost emulate --app <folder>`: the Functions host's Event Hubs trigger, run locally.
//!
//! It does what `func start` does for a custom-handler app with Event Hubs triggers
//! (docs/host-contract.md): reads host.json, every function.json and local.settings.json
//! (`settings`); starts the custom handler with `FUNCTIONS_CUSTOMHANDLER_PORT` and waits for
//! any answer to `GET /` (`handler_process`); then, for each `eventHubTrigger` function, runs an
//! [`EventProcessor`](hubhost_processor::EventProcessor) on the function's event hub and consumer group, and delivers each batch
//! as `POST /{FunctionName}` with the exact request the host builds and the function's retry
//! policy (`dispatch`). Several `hubhost emulate` processes on the same event hub and
//! checkpoint store form one pool, as Functions instances do. `/metrics` is `metrics`.
//!
//! This file is the run loop: it wires those parts together and restarts the handler when it
//! exits, three times, as the host does.

pub mod build;
mod dispatch;
mod executable;
pub mod faults;
mod handler_process;
mod inputs;
pub use inputs::{InputError, InputPlan};
pub mod invoke;
mod metrics;
mod outputs;
mod owner_id;
mod settings;
mod template;
pub mod trace_summary;
mod triggers;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use hubhost_checkpoints::{CheckpointStore, DEFAULT_CONTAINER};
use hubhost_eventhubs::EventHubTarget;
use hubhost_functions::function_app::{EventHubTrigger, FunctionApp, FunctionSpec};
use hubhost_processor::ProcessorOptions;
use hubhost_storage::counting::CountingStore;

pub use dispatch::{AttemptStats, DRAIN, FunctionDispatch, NoAnswerRule, Retrying, retry_delay};
pub use outputs::{
    BindingProblem, BlobPathError, BlobStoreError, EventSender, InvocationOrigin, KeptOutput,
    Outbox, OutboxError, OutputError, OutputPlan, OutputSinks, OutputsDone, SendError,
};
pub use owner_id::{IdentityError, IdentitySource, InstanceIdentity};
pub use settings::{AppSettings, ExpandError};
pub use triggers::{Delivery, InstanceTriggers, TriggerCounts};

use handler_process::{HandlerProcess, restart_handler, start_handler, start_on_free_port};
pub use handler_process::{HeldProcess, handler_executable};
use metrics::{LastEnqueued, MetricsPage};

/// The setting a trigger without `connection` uses.
pub const DEFAULT_CONNECTION_SETTING: &str = "EventHubConnection";
/// The host gives up after this many handler restarts (`ErrorEventsThreshold`).
const HANDLER_RESTARTS: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    #[error(transparent)]
    App(#[from] hubhost_functions::function_app::FunctionAppError),
    #[error("{}: {problem}", path.display())]
    Settings {
        path: PathBuf,
        problem: LocalSettingsProblem,
    },
    #[error("{}: cannot create the instance log folder: {source}", path.display())]
    LogFolder {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("host.json: {0}")]
    HostJson(HostJsonProblem),
    /// `extensions.eventHubs`, whose messages name host.json themselves.
    #[error(transparent)]
    Options(#[from] hubhost_processor::OptionsError),
    #[error("--foreign-ownership-expiry: {0}")]
    ForeignExpiry(hubhost_processor::balancer::SettingsError),
    #[error("function {function}: {problem}")]
    Function {
        function: String,
        problem: Box<SettingProblem>,
    },
    #[error("function {function}: binding '{binding}' ({kind}): {problem}")]
    Binding {
        function: String,
        binding: String,
        kind: String,
        problem: Box<BindingProblem>,
    },
    #[error("the app's HTTP functions cannot be served on port {port}: {source}")]
    HttpListen { port: u16, source: std::io::Error },
    #[error("the app has no enabled function with an eventHubTrigger; nothing to run")]
    NoEventHubFunctions,
    #[error(
        "the app has no enabled function emulate runs (an eventHubTrigger, httpTrigger or timerTrigger); nothing to run"
    )]
    NothingToRun,
    #[error("the custom handler ({command}) could not start: {problem}")]
    HandlerStart {
        command: String,
        problem: HandlerStartProblem,
    },
    #[error(
        "host.json's defaultExecutablePath `{declared}` is not built: {} does not exist{}",
        path.display(),
        match build { Some(command) => format!("; build it with `{command}`"), None => String::new() }
    )]
    HandlerMissing {
        /// As host.json says it, expanded.
        declared: String,
        /// The file it names.
        path: PathBuf,
        /// The command that builds it, when the path lies in a Cargo target folder.
        build: Option<String>,
    },
    #[error(
        "host.json's defaultExecutablePath `{declared}` is neither in the app folder nor a command on PATH (looked in {}){}",
        looked_in.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
        match build { Some(how) => format!("; {how}"), None => String::new() }
    )]
    HandlerNotFound {
        /// As host.json says it, expanded.
        declared: String,
        /// The app folder, then each folder on the handler's PATH.
        looked_in: Vec<PathBuf>,
        /// How to make it, in words, when it is a binary of the Cargo project holding the app.
        build: Option<String>,
    },
    #[error(
        "--watch builds a handler that Cargo builds, and {0} is not in a Cargo target folder (…/target/debug/NAME)"
    )]
    NotACargoBuild(PathBuf),
    #[error("the handler's first build failed: {0}")]
    Build(String),
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
    Checkpoint(#[from] hubhost_checkpoints::CheckpointError),
    #[error(transparent)]
    Processor(#[from] hubhost_processor::ProcessorError),
    #[error("metrics endpoint: cannot listen on {addr}: {source}")]
    Metrics {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

/// What host.json lacks for `hubhost emulate` to start the app's custom handler or scale it.
#[derive(Debug, thiserror::Error)]
pub enum HostJsonProblem {
    #[error("no customHandler section: hubhost emulate runs custom-handler apps")]
    NoCustomHandler,
    /// The host's own words.
    #[error("Missing worker Description.")]
    NoDescription,
    /// The host's own words.
    #[error("WorkerDescription DefaultExecutablePath cannot be empty")]
    NoExecutablePath,
    /// A `%Setting%` in the handler's description that the settings do not resolve.
    #[error(transparent)]
    Expand(#[from] ExpandError),
    #[error("extensions.eventHubs: the concurrency for scaling must be at least 1")]
    NoScalingConcurrency,
    #[error("customHandler.port must be a port number (0 or none: a free one), not {0}")]
    BadPort(String),
    #[error("customHandler.initializationTimeout is not a time span like 00:00:30: {0}")]
    BadInitializationTimeout(String),
}

/// Why local.settings.json cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LocalSettingsProblem {
    #[error("{0}")]
    Read(std::io::Error),
    #[error("not valid JSON: {0}")]
    NotJson(#[from] serde_json::Error),
}

/// Why the custom handler did not come up.
#[derive(Debug, thiserror::Error)]
pub enum HandlerStartProblem {
    #[error("{0}")]
    Spawn(std::io::Error),
    #[error("{0}")]
    NotReady(crate::invoker::InvokeError),
    #[error("it exited ({0}) before answering GET /")]
    Exited(String),
    #[error("no free port: {0}")]
    NoFreePort(std::io::Error),
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
    /// `hubhost_checkpoints::FOREIGN_OWNERSHIP_EXPIRY`, or hubhost's own expiry if that is longer].
    pub foreign_ownership_expiry: Option<Duration>,
    /// Where to serve Prometheus `/metrics` (none: no endpoint); port 0 picks a free one.
    pub metrics: Option<std::net::SocketAddr>,
    /// Told the address `/metrics` listens on once it is bound, so a caller that gave port 0
    /// learns it without reading stdout (a port picked beforehand can be taken meanwhile).
    pub metrics_bound: Option<Arc<std::sync::OnceLock<std::net::SocketAddr>>>,
    /// Build the handler (host.json's executable, in a Cargo target folder) before starting,
    /// and again, restarting only the handler, when its sources change.
    pub watch: bool,
    /// A rehearsal's switches: faults injected into this instance on demand (none: none).
    pub faults: Option<Arc<faults::FaultSwitch>>,
    /// How long a stopping instance lets a batch under retry go on [default: [`DRAIN`]].
    pub drain: Option<Duration>,
    /// Settings given to the handler over the app's own (e.g. `--traces`: where to export).
    pub handler_settings: Vec<(String, String)>,
    /// Where outputs of the types no local service carries out are kept (`None`:
    /// `--strict-bindings`, such an app is refused).
    pub outbox: Option<PathBuf>,
    /// The port the app's HTTP functions are served on (0: any free one) [default: 7071, as
    /// `func start`, or a free one when 7071 is taken].
    pub http_port: Option<u16>,
    /// What a delivery the handler gave no answer to counts as (`--azure-rules`: as on Azure).
    pub no_answer: NoAnswerRule,
    /// Where the lines that say how the instance runs go, and the handler's stdout with them.
    pub start_lines: StartLines,
}

/// Where `emulate`'s start-up lines go: stdout for a person at a terminal; the log (and the
/// handler's stdout to stderr) when the caller's stdout carries a result of its own, as
/// `hubhost rehearse`'s JSON report does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartLines {
    #[default]
    Stdout,
    Log,
}

impl StartLines {
    /// Says `line` where these lines go.
    pub fn say(self, line: &str) {
        match self {
            StartLines::Stdout => println!("{line}"),
            StartLines::Log => tracing::info!(target: "hubhost::emulate", "{line}"),
        }
    }
}

/// One Event Hubs function, resolved against the settings.
pub struct FunctionTarget {
    pub spec: FunctionSpec,
    pub trigger: EventHubTrigger,
    pub target: EventHubTarget,
    /// Its input bindings, resolved; the app is refused if one cannot be read.
    pub inputs: Arc<InputPlan>,
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
    let bad = |problem: SettingProblem| EmulateError::Function {
        function: spec.name.clone(),
        problem: Box::new(problem),
    };
    let expand = |text: &str| {
        settings
            .expand(text)
            .map_err(|e| bad(SettingProblem::Expand(e)))
    };
    let mut trigger = trigger.clone();
    trigger.event_hub_name = expand(&trigger.event_hub_name)?;
    trigger.consumer_group = expand(&trigger.consumer_group)?;
    // `connection` may itself be `%Setting%`, which the extension resolves first.
    let setting = match &trigger.connection {
        Some(name) => expand(name)?,
        None => DEFAULT_CONNECTION_SETTING.to_string(),
    };
    // A connection string in the setting, else an identity-based connection, as in the host;
    // both read from local.settings.json Values or the environment.
    let target =
        EventHubTarget::from_settings(&setting, &trigger.event_hub_name, |k| settings.get(k))
            .map_err(|source| {
                bad(SettingProblem::Connection {
                    setting: setting.clone(),
                    source,
                })
            })?;
    // The connection string's EntityPath wins over eventHubName: the hub read is the one the
    // function is told of.
    trigger.event_hub_name = target.hub.clone();
    trigger.connection = Some(setting);
    Ok(Some((trigger, target)))
}

/// Why a binding's settings (a trigger's or an output's) do not resolve against the app's.
#[derive(Debug, thiserror::Error)]
pub enum SettingProblem {
    /// A name in the binding (`eventHubName`, `consumerGroup`, `path`) uses a `%Setting%` that
    /// is not set.
    #[error(transparent)]
    Expand(#[from] ExpandError),
    /// An HTTP function's `route` cannot be served.
    #[error(transparent)]
    Route(#[from] triggers::http::RouteError),
    /// A timer function's `schedule` cannot be run.
    #[error(transparent)]
    Schedule(#[from] triggers::timer::ScheduleError),
    /// The `connection` setting does not say how to reach the event hub.
    #[error("{setting}: {source}")]
    Connection {
        setting: String,
        source: hubhost_eventhubs::EventHubsError,
    },
}

/// Every `eventHubTrigger` function of the app with its event hub and its outputs resolved
/// (none, for an app of HTTP and timer functions); outputs go through `sinks`.
pub fn event_hub_functions(
    app_functions: &[FunctionSpec],
    settings: &AppSettings,
    sinks: &OutputSinks,
) -> Result<Vec<FunctionTarget>, EmulateError> {
    let mut out = Vec::new();
    for spec in app_functions {
        let Some((trigger, target)) = resolve_trigger(spec, settings)? else {
            continue;
        };
        let inputs = Arc::new(InputPlan::resolve(spec, settings)?);
        let outputs = Arc::new(OutputPlan::resolve(spec, settings, sinks)?);
        out.push(FunctionTarget {
            spec: spec.clone(),
            trigger,
            target,
            inputs,
            outputs,
        });
    }
    Ok(out)
}

/// The owner id function `index` of `functions` claims partitions under: the instance's
/// `owner`, or, for a function whose event hub and consumer group an earlier function of the
/// app shares, `owner+Function`. Two such functions are two processors in one consumer group
/// on Azure (each listener its own), competing for the partitions; under one owner id each
/// would take every partition for its own, and both read them.
pub fn processor_owner(functions: &[FunctionTarget], index: usize, owner: &str) -> String {
    format!("{owner}{}", owner_suffix(functions, index))
}

/// `+Function` for a function whose event hub and consumer group an earlier function of the
/// app shares; empty for the others.
fn owner_suffix(functions: &[FunctionTarget], index: usize) -> String {
    let f = &functions[index];
    let shares = functions[..index]
        .iter()
        .any(|earlier| consumer_group_of(earlier) == consumer_group_of(f));
    if shares {
        format!("+{}", f.spec.name)
    } else {
        String::new()
    }
}

/// A function's event hub and consumer group, as the store names them (lowercased).
fn consumer_group_of(f: &FunctionTarget) -> (String, String, String) {
    (
        f.target.namespace.to_lowercase(),
        f.target.hub.to_lowercase(),
        f.trigger.consumer_group.to_lowercase(),
    )
}

/// Functions of the app that share an event hub and consumer group: each group of two or more,
/// by name, with the hub and the group. On Azure they compete for the partitions, and each
/// sees only part of the events; the host says nothing (azure-webjobs-sdk issue 1171 asks it
/// to), `emulate` warns.
pub fn shared_consumer_groups(functions: &[FunctionTarget]) -> Vec<(Vec<String>, String, String)> {
    // Each group with the first function on it, whose names the warning uses.
    let mut groups: Vec<(&FunctionTarget, Vec<String>)> = Vec::new();
    for f in functions {
        match groups
            .iter_mut()
            .find(|(first, _)| consumer_group_of(first) == consumer_group_of(f))
        {
            Some((_, names)) => names.push(f.spec.name.clone()),
            None => groups.push((f, vec![f.spec.name.clone()])),
        }
    }
    groups
        .into_iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|(first, names)| {
            let group = first.trigger.consumer_group.clone();
            (names, first.target.hub.clone(), group)
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
        owner_id::candidates(explicit, |k| std::env::var(k).ok(), owner_id::hostname());
    // One lock per owner id a processor claims under: two functions sharing a consumer group
    // claim under two.
    let scopes: Vec<String> = functions
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (namespace, hub, group) = consumer_group_of(f);
            let suffix = owner_suffix(functions, i);
            format!("{}|{namespace}/{hub}/{group}{suffix}", store.describe())
        })
        .collect();
    owner_id::claim(&candidates, &scopes, &owner_id::lock_folder())
}

/// Resolves when a rehearsal asks for the handler to be killed; never without one.
async fn kill_requested(faults: Option<&faults::FaultSwitch>) {
    match faults {
        Some(faults) => faults.kill_requested().await,
        None => std::future::pending().await,
    }
}

/// Resolves when `--watch` sees the sources change; never without `--watch`.
async fn sources_changed(rebuilder: &mut Option<build::Rebuilder>) {
    match rebuilder {
        Some(rebuilder) => rebuilder.changed().await,
        None => std::future::pending().await,
    }
}

/// host.json's `functionTimeout` (`None`: no limit), or what is wrong with it.
pub(crate) fn function_timeout(app: &FunctionApp) -> Result<Option<Duration>, EmulateError> {
    app.function_timeout().map_err(|problem| {
        EmulateError::App(hubhost_functions::function_app::FunctionAppError::Invalid {
            path: app.root.join("host.json"),
            problem,
        })
    })
}

/// Prints what of the app's settings changes how it runs: host.json overrides, disabled
/// functions, and what the host ignores though the files say it.
pub fn report_app_reading(app: &FunctionApp, lines: StartLines) {
    for name in &app.overrides {
        lines.say(&format!(
            "hubhost emulate: host.json overridden by the app setting {name}"
        ));
    }
    for (function, setting) in &app.disabled {
        lines.say(&format!(
            "hubhost emulate: {function} is disabled by the app setting {setting}: it receives nothing"
        ));
    }
    for line in &app.ignored {
        eprintln!("hubhost emulate: warning: {line}");
    }
}

/// Says at start what runs differently here than on Azure: each output kept in the outbox (not
/// carried out), and each function whose trigger the emulated host does not run (it runs
/// `eventHubTrigger` and `httpTrigger` functions).
pub fn report_bindings(app_functions: &[FunctionSpec], kept: &[(String, KeptOutput)]) {
    for (function, kept) in kept {
        eprintln!(
            "hubhost emulate: warning: {function}'s output '{}' ({}) is not carried out here, as {}: each value is kept as a line in {} (--strict-bindings refuses the app instead)",
            kept.binding,
            kept.kind,
            kept.reason,
            kept.file.display()
        );
    }
    for spec in app_functions {
        let trigger = match &spec.trigger {
            hubhost_functions::function_app::Trigger::Other { kind, .. }
                if kind.eq_ignore_ascii_case("timerTrigger") =>
            {
                continue;
            }
            hubhost_functions::function_app::Trigger::Other { kind, .. } => kind.as_str(),
            // Served by `triggers::http`, run by `triggers::event_hub`.
            hubhost_functions::function_app::Trigger::Http { .. }
            | hubhost_functions::function_app::Trigger::EventHub(_) => continue,
        };
        eprintln!(
            "hubhost emulate: warning: {} ({trigger}) is not run: hubhost emulate runs eventHubTrigger, httpTrigger and timerTrigger functions",
            spec.name
        );
    }
}

/// `--storage` stands for the app's storage setting (`AzureWebJobsStorage`, or the one
/// `HUBHOST_STORAGE_SETTING` names), as a deployed app's setting would: the checkpoints, the
/// `blob` outputs and inputs on that connection, and the handler (`Once`'s marks) all use it.
/// A folder is given as an absolute path, so that the handler, which runs in the app folder,
/// finds the same one.
fn storage_is_the_apps(settings: &mut AppSettings, storage: &str) -> Result<(), EmulateError> {
    if storage.trim().is_empty() {
        return Ok(());
    }
    let location = hubhost_storage::StorageLocation::parse(storage).map_err(|error| {
        hubhost_storage::settings::SettingsError::Storage {
            source_name: "--storage / HUBHOST_STORAGE".into(),
            error,
        }
    })?;
    let value = match location {
        hubhost_storage::StorageLocation::Directory(dir) => std::path::absolute(&dir)
            .unwrap_or(dir)
            .display()
            .to_string(),
        _ => storage.to_string(),
    };
    let setting = settings
        .get(hubhost_storage::settings::STORAGE_SETTING_VAR)
        .or_else(|| std::env::var(hubhost_storage::settings::STORAGE_SETTING_VAR).ok())
        .unwrap_or_else(|| hubhost_storage::settings::DEFAULT_STORAGE_SETTING.to_string());
    // Keys are read in any case: the one the files spell, replaced.
    settings
        .values
        .retain(|name, _| !name.eq_ignore_ascii_case(&setting));
    settings.set(&setting, &value);
    Ok(())
}

pub async fn run(
    opts: EmulateOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), EmulateError> {
    // The settings are read once: the app is loaded with them.
    let mut settings = AppSettings::load(&opts.app)?;
    let app = FunctionApp::load_with_settings(&opts.app, settings.values())?;
    for (name, value) in &opts.handler_settings {
        settings.values.insert(name.clone(), value.clone());
    }
    if let Some(storage) = &opts.storage {
        storage_is_the_apps(&mut settings, storage)?;
    }
    let mut options = ProcessorOptions::from_host_json(&app.host_json)?;
    options.checkpoint_on_success = opts.checkpoint_on_success;
    if let Some(foreign) = opts.foreign_ownership_expiry {
        options.balancer.foreign_ownership_expiry = foreign;
        options
            .balancer
            .validate()
            .map_err(EmulateError::ForeignExpiry)?;
    }
    let lines = opts.start_lines;
    report_app_reading(&app, lines);
    let enabled: Vec<FunctionSpec> = app
        .functions
        .iter()
        .filter(|f| app.disabled_by(&f.name).is_none())
        .cloned()
        .collect();
    let sinks = OutputSinks::start(opts.outbox.clone(), &app.host_json);
    let functions = event_hub_functions(&enabled, &settings, &sinks)?;
    let http_functions = Arc::new(triggers::http::HttpTriggers::resolve(
        &app, &enabled, &settings, &sinks,
    )?);
    let timers = triggers::timer::TimerTriggers::resolve(&enabled, &settings, &sinks)?;
    if functions.is_empty() && http_functions.is_empty() && timers.is_empty() {
        return Err(EmulateError::NothingToRun);
    }
    // Every function's kept outputs, whatever its trigger.
    let kept: Vec<(String, KeptOutput)> = functions
        .iter()
        .flat_map(|f| {
            f.outputs
                .kept()
                .into_iter()
                .map(|k| (f.spec.name.clone(), k))
        })
        .chain(http_functions.kept())
        .chain(timers.kept())
        .collect();
    report_bindings(&enabled, &kept);

    let storage =
        hubhost_storage::settings::resolve_storage(opts.storage.as_deref(), |k| settings.get(k))?;
    let mut opened = storage.open()?;
    if let Some(faults) = &opts.faults {
        opened = faults::FaultyStore::wrap(opened, faults.clone());
    }
    let counting = CountingStore::with_kinds(opened, hubhost_checkpoints::names::blob_kind);
    let storage_operations = counting.counts.clone();
    let storage_requests = counting.requests.clone();
    let store = CheckpointStore::new(Arc::new(counting), DEFAULT_CONTAINER);
    store.ensure_container().await?;
    let identity = claim_identity(opts.instance_id.as_deref(), &functions, &store)?;
    let instance_id = identity.id.clone();
    // The handler sees the instance it runs on as on Azure (`WEBSITE_INSTANCE_ID`): the owner
    // id, which is the platform's own id where there is one, else the emulated instance's.
    settings
        .values
        .insert("WEBSITE_INSTANCE_ID".into(), instance_id.clone());

    let mut rebuilder = if opts.watch {
        let executable = app
            .root
            .join(HandlerProcess::declared_executable(&app, &settings)?);
        let build = build::CargoBuild::find(&executable, &app.root)
            .ok_or(EmulateError::NotACargoBuild(executable))?;
        let mut rebuilder = build::Rebuilder::new(build);
        lines.say(&format!(
            "hubhost emulate: building the handler: {}",
            rebuilder.describe()
        ));
        rebuilder.build().await.map_err(EmulateError::Build)?;
        Some(rebuilder)
    } else {
        None
    };

    let (mut process, invoker, mut child, port) =
        start_on_free_port(&app, &settings, lines == StartLines::Log).await?;

    let function_timeout = function_timeout(&app)?;
    let timed_out = Arc::new(tokio::sync::Notify::new());
    let stop = CancellationToken::new();
    let mut triggers = InstanceTriggers::start(
        &functions,
        &store,
        &options,
        &invoker,
        &instance_id,
        &stop,
        &Delivery {
            drain: opts.drain.unwrap_or(DRAIN),
            faults: opts.faults.clone(),
            function_timeout,
            timed_out: timed_out.clone(),
            no_answer: opts.no_answer,
            hubs: None,
        },
    )?;
    let counts = triggers.counts().clone();
    let consumers = counts.consumers().to_vec();
    lines.say(&format!(
        "hubhost emulate: instance {instance_id} ({}), handler `{}` on port {port}, checkpoints in {}",
        match identity.source {
            IdentitySource::Flag => "--instance-id".to_string(),
            IdentitySource::Platform(variable) => variable.to_string(),
            IdentitySource::HostSlot => "host name and free slot".to_string(),
        },
        process.describe(),
        store.describe()
    ));
    for f in &functions {
        lines.say(&format!(
            "  {} ← {:?}, consumer group {}",
            f.spec.name, f.target, f.trigger.consumer_group
        ));
    }
    for (names, hub, group) in shared_consumer_groups(&functions) {
        let warning = format!(
            "{} are {} triggered by event hub {hub}, consumer group {group}: as on Azure, they compete for its partitions, and each sees only part of the events; give each function its own consumerGroup in its function.json (and create the group on the event hub) for each to see every event",
            match names.split_last() {
                Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
                None => String::new(),
            },
            if names.len() == 2 { "both" } else { "all" }
        );
        tracing::warn!(functions = ?names, %hub, consumer_group = %group, "{warning}");
        if lines == StartLines::Stdout {
            lines.say(&format!("  warning: {warning}"));
        }
    }
    if !functions.is_empty() && opts.no_answer == NoAnswerRule::Redeliver {
        lines.say("  kinder than Azure: a batch the handler gives no answer to (it died, or restarts) is delivered again, where Azure counts a failed attempt and, once the retry policy is spent, moves past it; --azure-rules for Azure's rule");
    }
    let http_server = if http_functions.is_empty() {
        None
    } else {
        let listener = triggers::http::listen(opts.http_port).await?;
        let addr = listener
            .local_addr()
            .map_err(|source| EmulateError::HttpListen {
                port: opts.http_port.unwrap_or(triggers::http::DEFAULT_HTTP_PORT),
                source,
            })?;
        for line in http_functions.describe(addr) {
            lines.say(&line);
        }
        Some(tokio::spawn(http_functions.clone().serve(
            listener,
            invoker.clone(),
            stop.child_token(),
        )))
    };
    let timer_task = if timers.is_empty() {
        None
    } else {
        for line in timers.describe(chrono::Utc::now()) {
            lines.say(&line);
        }
        // Instances of this app (its folder) share each timer's lock.
        let app_key = {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(app.root.to_string_lossy().as_bytes());
            digest[..6]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let delivery = triggers::timer::TimerDelivery {
            invoker: invoker.clone(),
            function_timeout,
            timed_out: timed_out.clone(),
        };
        Some(tokio::spawn(timers.run(
            app_key,
            delivery,
            stop.child_token(),
        )))
    };
    let metrics = match opts.metrics {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| EmulateError::Metrics { addr, source })?;
            let local = listener
                .local_addr()
                .map_err(|source| EmulateError::Metrics { addr, source })?;
            lines.say(&format!("  metrics: http://{local}/metrics"));
            if let Some(bound) = &opts.metrics_bound {
                let _ = bound.set(local);
            }
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
                outputs: functions
                    .iter()
                    .map(|f| (f.spec.name.clone(), f.outputs.clone()))
                    .collect(),
                attempts: counts.attempts().to_vec(),
            };
            Some(tokio::spawn(page.serve(listener, stop.child_token())))
        }
        None => None,
    };
    metrics::export_attempts(counts.attempts());
    let progress = hubhost_process::progress::Progress::spawn(move || counts.progress_line());

    tokio::pin!(shutdown);
    let mut restarts = 0;
    let mut watching_handler = true;
    let outcome = loop {
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            failure = triggers.failure() => break Err(failure),
            () = kill_requested(opts.faults.as_deref()) => {
                // A rehearsal's kill: not the handler's own crash, so not one of its restarts.
                tracing::warn!("rehearsal: killing the custom handler (SIGKILL)");
                let _ = child.kill().await;
                child = match start_handler(&process, &invoker).await {
                    Ok(c) => c,
                    Err(e) => break Err(e),
                };
                watching_handler = true;
            }
            () = timed_out.notified() => {
                // The host restarts the worker after a function timeout; the other batches it
                // was running fail with it and are delivered again.
                tracing::error!(?function_timeout, "an invocation exceeded functionTimeout; restarting the custom handler, as the host does");
                // New invocations (the timed-out batch's retry among them) wait for the new
                // handler, as the host's wait for its new worker.
                invoker.hold();
                process.stop(&mut child).await;
                let started = start_handler(&process, &invoker).await;
                invoker.accept();
                child = match started {
                    Ok(c) => c,
                    Err(e) => break Err(e),
                };
                watching_handler = true;
            }
            () = sources_changed(&mut rebuilder) => {
                let rebuilder = rebuilder.as_mut().expect("changes come from a rebuilder");
                lines.say(&format!("hubhost emulate: sources changed; building: {}", rebuilder.describe()));
                match rebuilder.build().await {
                    Ok(()) => {
                        // Only the handler restarts: the processors keep their partitions, and a
                        // batch in flight is delivered again to the new handler.
                        process.stop(&mut child).await;
                        child = match start_handler(&process, &invoker).await {
                            Ok(c) => c,
                            Err(e) => break Err(e),
                        };
                        lines.say("hubhost emulate: handler rebuilt and restarted");
                    }
                    Err(e) => eprintln!("hubhost emulate: {e}; the running handler stays until the next change"),
                }
            }
            status = child.wait(), if watching_handler => {
                // A first process that exited 0 while its port answers (a wrapper that started
                // the server) is not restarted, as the host does not restart a worker that
                // exits 0; its process group is stopped with the instance.
                if status.as_ref().is_ok_and(|s| s.success())
                    && invoker.wait_ready(Duration::from_millis(500)).await.is_ok()
                {
                    tracing::warn!("the custom handler's process exited 0 and its port still answers: not restarted, as the host does not restart it");
                    watching_handler = false;
                    continue;
                }
                restarts += 1;
                tracing::error!(status = ?status.ok(), restarts, "the custom handler exited; restarting it");
                if restarts > HANDLER_RESTARTS {
                    break Err(EmulateError::HandlerCrashed(restarts));
                }
                child = match restart_handler(&mut process, &invoker).await {
                    Ok(c) => c,
                    Err(e) => break Err(e),
                };
            }
        }
    };
    drop(progress);
    // Pumps finish their batches (the handler is still up), checkpoint and relinquish.
    stop.cancel();
    // An error after the stop (a relinquish that failed) is logged where it happened; the
    // outcome is what ended the run.
    let _ = triggers.finish().await;
    if let Some(server) = metrics {
        let _ = server.await;
    }
    if let Some(server) = http_server {
        let _ = server.await;
    }
    if let Some(mut timers) = timer_task {
        // A firing under way may finish, as executions do in the host's drain; one the
        // handler never answers does not hold the stop.
        if tokio::time::timeout(DRAIN, &mut timers).await.is_err() {
            timers.abort();
        }
    }
    process.stop(&mut child).await;
    lines.say(&format!("hubhost emulate: instance {instance_id} stopped"));
    drop(identity);
    outcome
}

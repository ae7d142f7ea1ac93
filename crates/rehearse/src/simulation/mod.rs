//! The deterministic rehearsal: the app's Event Hubs functions under the emulated host's own
//! code — the balancer, the pumps and their checkpoint rules, dispatch with retry policies and
//! `functionTimeout`, output bindings, the fault switches — on one thread, in virtual time,
//! over an in-memory hub ([`hub::SimulatedHubs`]) and store, with the function called in-process
//! through the framework's routes (the host's exact requests, its reading of the answers).
//!
//! Time is tokio's paused clock on a current-thread runtime, and [`hubhost_clock::now`] reads
//! it: when every task waits, the clock jumps to the next timer, so ownership expiry, retry
//! intervals and `maxWaitTime` cost nothing, and what runs next is decided by the order tasks
//! were woken in, not by the machine. A seed therefore gives the same run, byte for byte, on
//! any machine — for a function that is itself deterministic (no wall clock, no randomness, no
//! I/O of its own outside the simulation's store).
//!
//! What differs from the real-process rehearsal is only at the edges: no socket, no process
//! (a killed handler is a new instance of the function's server, its memory gone), and the
//! hub and the store in memory. The plan, the fault driver and the audit are the same code
//! (the crate's `Stage`).

pub mod hub;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::local_app::{LocalAppError, PARTITIONS, Timings, answered_through, read_outbox};
use crate::rehearsal::{Rehearsal, Report, Shrunk};
use crate::stage::{CheckpointPastEnd, Sent, Stage};
use hub::SimulatedHubs;
use hubhost_checkpoints::{CheckpointStore, ConsumerGroupKey, DEFAULT_CONTAINER};
use hubhost_functions::function_app::{FunctionApp, FunctionSpec};
use hubhost_functions::server::FunctionServer;
use hubhost_host::emulate::HeldProcess;
use hubhost_host::emulate::faults::{Answered, FaultSwitch, FaultyStore, GivenUp, Verdicts};
use hubhost_host::emulate::{
    self, AppSettings, Delivery, EventSender, FunctionTarget, InstanceTriggers, NoAnswerRule,
    Outbox, OutputSinks,
};
use hubhost_host::invoker::{DirectHandler, Invoker, Routes};
use hubhost_hub::admin::EventView;
use hubhost_processor::ProcessorOptions;
use hubhost_storage::SharedStore;

/// When a simulation starts, as [`hubhost_clock::now`] reads it: the same for every run, so
/// that enqueued times and checkpoints' timestamps are too.
pub const EPOCH: &str = "2026-01-01T00:00:00Z";

/// The connection every Event Hubs setting of a simulated app is given: it names the
/// simulation's hubs, which no socket reaches.
const CONNECTION: &str = "Endpoint=sb://simulated.localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;";

/// The owner id of the instance a simulation starts with.
const FIRST_INSTANCE: &str = "rehearsal-1";

/// What a function's server is built with in a simulation.
pub struct SimulatedHandler<'a> {
    /// The simulation's storage account, in memory: where the function keeps state of its own
    /// (`Once::for_instance(handler.store.clone(), handler.instance)`), as it would in
    /// `AzureWebJobsStorage`. Its state, like the hub's, starts empty with each seed.
    pub store: SharedStore,
    /// The instance it runs on (`WEBSITE_INSTANCE_ID` on Azure).
    pub instance: &'a str,
    /// The app folder, for `ServerBuilder::build(Some(app_folder))`.
    pub app_folder: &'a Path,
}

/// Builds the function's server, once per instance and again for each restart of its handler.
pub type MakeHandler = Arc<dyn Fn(&SimulatedHandler) -> FunctionServer + Send + Sync>;

/// What answers the simulation's invocations.
#[derive(Clone)]
pub(crate) enum HandlerKind {
    /// The function's server, in this process (the test kit's form).
    InProcess(MakeHandler),
    /// The app's built handler, a process per instance, each request holding the clock (the
    /// command line's form: `hubhost` cannot link the user's code). Its requests and starts run
    /// on `io`.
    Process {
        executable: PathBuf,
        io: tokio::runtime::Handle,
    },
}

/// The app as every seed runs it: read once.
pub(crate) struct PreparedApp {
    folder: PathBuf,
    app: FunctionApp,
    settings: AppSettings,
    options: ProcessorOptions,
    function_timeout: Option<Duration>,
    drain: Duration,
}

impl PreparedApp {
    /// Reads the app in `folder` as a rehearsal runs it (`timings`), with every Event Hubs
    /// connection naming the simulation's hubs.
    pub(crate) fn read(folder: &Path, timings: Timings) -> Result<Self, LocalAppError> {
        let mut settings = AppSettings::load(folder)?;
        let mut app = FunctionApp::load_with_settings(folder, settings.values())?;
        timings.apply(&mut app.host_json);
        let mut connections = vec![emulate::DEFAULT_CONNECTION_SETTING.to_string()];
        for function in &app.functions {
            if let Some(trigger) = function.event_hub_trigger() {
                connections.extend(trigger.connection.clone());
            }
            for output in function.outputs().filter(|b| b.is("eventHub")) {
                connections.extend(output.setting("connection").map(str::to_string));
            }
        }
        for setting in connections {
            let setting = settings.expand(&setting)?;
            settings.set(&setting, CONNECTION);
        }
        let mut options = ProcessorOptions::from_host_json(&app.host_json)
            .map_err(|e| LocalAppError::Emulate(e.into()))?;
        // Azure's rule: a failed batch is checkpointed past once its retry policy is spent.
        options.checkpoint_on_success = false;
        if let Some(foreign) = timings.foreign_ownership_expiry {
            options.balancer.foreign_ownership_expiry = foreign;
        }
        let function_timeout = app
            .function_timeout()
            .map_err(|e| LocalAppError::Io(e.to_string()))?;
        Ok(PreparedApp {
            folder: folder.to_path_buf(),
            app,
            settings,
            options,
            function_timeout,
            drain: timings.drain.unwrap_or(emulate::DRAIN),
        })
    }

    /// The functions a simulation runs: the enabled Event Hubs functions (HTTP and timer
    /// functions have no part in a rehearsal of a trigger).
    fn enabled(&self) -> Vec<FunctionSpec> {
        self.app
            .functions
            .iter()
            .filter(|f| f.event_hub_trigger().is_some() && self.app.disabled_by(&f.name).is_none())
            .cloned()
            .collect()
    }
}

/// Runs `rehearsal` on `prepared` in a simulation, on this thread (which must not be running a
/// tokio runtime); with `trace`, the log of the run in virtual time too.
pub(crate) fn run(
    rehearsal: &Rehearsal,
    prepared: &Arc<PreparedApp>,
    handler: &HandlerKind,
    trace: bool,
) -> Result<(Report, Option<String>), LocalAppError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| LocalAppError::Io(format!("a runtime for the simulation: {e}")))?;
    let simulate = || {
        runtime.block_on(async {
            let epoch = chrono::DateTime::parse_from_rfc3339(EPOCH)
                .expect("a valid epoch")
                .with_timezone(&chrono::Utc);
            let _clock = hubhost_clock::Simulated::enter(epoch);
            let mut stage = SimulatedApp::new(prepared.clone(), handler.clone())?;
            stage.start_instance(FIRST_INSTANCE).await?;
            rehearsal.run_on_stage(&mut stage).await
        })
    };
    if !trace {
        // The host's own log lines are the trace: without one asked for, none is formatted.
        let report =
            tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::new(), simulate)?;
        return Ok((report, None));
    }
    let lines = trace::Lines::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(lines.clone())
        .with_timer(trace::VirtualTime)
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let report = tracing::subscriber::with_default(subscriber, simulate)?;
    Ok((report, Some(lines.text())))
}

/// The trace of a simulated run: the host's log lines, stamped with virtual time.
mod trace {
    use std::sync::{Arc, Mutex};

    /// Seconds since the simulation's start.
    pub struct VirtualTime;

    impl tracing_subscriber::fmt::time::FormatTime for VirtualTime {
        fn format_time(
            &self,
            w: &mut tracing_subscriber::fmt::format::Writer<'_>,
        ) -> std::fmt::Result {
            let epoch = chrono::DateTime::parse_from_rfc3339(super::EPOCH)
                .expect("a valid epoch")
                .with_timezone(&chrono::Utc);
            let elapsed = (hubhost_clock::now() - epoch).num_milliseconds();
            write!(w, "{:>5}.{:03}s", elapsed / 1000, elapsed % 1000)
        }
    }

    /// Where the lines go.
    #[derive(Clone, Default)]
    pub struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Lines {
        pub fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().expect("trace lock")).into_owned()
        }
    }

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("trace lock").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Lines {
        type Writer = Lines;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }
}

/// The app's instances in a simulation, and the services they share.
struct SimulatedApp {
    prepared: Arc<PreparedApp>,
    handler: HandlerKind,
    /// The settings as the instances read them (storage in the run's own folder).
    settings: AppSettings,
    hubs: Arc<SimulatedHubs>,
    /// The storage account: checkpoints, `blob` outputs, the function's own state.
    store: SharedStore,
    /// Outputs no service of the simulation carries out (queue, table, …) are kept here.
    outbox: tempfile::TempDir,
    functions: Vec<FunctionTarget>,
    instances: Vec<SimulatedInstance>,
    handed_out: Arc<tokio::sync::watch::Sender<u64>>,
    answered: Answered,
    verdicts: Verdicts,
}

struct SimulatedInstance {
    id: String,
    faults: Arc<FaultSwitch>,
    stop: CancellationToken,
    triggers: InstanceTriggers,
    /// Restarts the handler when it is killed or outlives `functionTimeout`.
    supervisor: tokio::task::JoinHandle<()>,
}

impl SimulatedApp {
    fn new(prepared: Arc<PreparedApp>, handler: HandlerKind) -> Result<Self, LocalAppError> {
        let hubs = SimulatedHubs::new(PARTITIONS);
        let store: SharedStore = Arc::new(hubhost_storage::memory::MemoryStore::default());
        let outbox = tempfile::tempdir().map_err(|e| LocalAppError::Io(e.to_string()))?;
        let mut settings = prepared.settings.clone();
        // Queue and table outputs name no account of a service here: they are kept in the
        // outbox, as in the real-process rehearsal.
        settings.set(
            hubhost_storage::settings::DEFAULT_STORAGE_SETTING,
            &outbox.path().join("storage").display().to_string(),
        );
        for binding in prepared.app.functions.iter().flat_map(|f| &f.bindings) {
            if (binding.is("queue") || binding.is("table"))
                && let Some(setting) = binding.setting("connection")
            {
                let setting = settings.expand(setting)?;
                settings.set(
                    &setting,
                    &outbox.path().join("storage").display().to_string(),
                );
            }
        }
        let sinks = OutputSinks {
            sender: EventSender::simulated(hubs.clone()),
            outbox: Some(Outbox::new(outbox.path().join("outbox"))),
            host_json: prepared.app.host_json.clone(),
            blobs: Some(store.clone()),
        };
        let functions = emulate::event_hub_functions(&prepared.enabled(), &settings, &sinks)?;
        // The trigger hubs exist before anything reads them.
        for f in &functions {
            hubs.hub(&f.target.hub);
        }
        Ok(SimulatedApp {
            prepared,
            handler,
            settings,
            hubs,
            store,
            outbox,
            functions,
            instances: Vec::new(),
            handed_out: Arc::new(tokio::sync::watch::channel(0).0),
            answered: Default::default(),
            verdicts: Default::default(),
        })
    }

    /// The handler of instance `id`: its own server, or its own process.
    fn handler_of(&self, id: &str) -> Result<Arc<dyn DirectHandler>, LocalAppError> {
        Ok(match &self.handler {
            HandlerKind::InProcess(make) => {
                let (make, store, folder, id) = (
                    make.clone(),
                    self.store.clone(),
                    self.prepared.folder.clone(),
                    id.to_string(),
                );
                Arc::new(Routes::new(move || {
                    let built = make(&SimulatedHandler {
                        store: store.clone(),
                        instance: &id,
                        app_folder: &folder,
                    });
                    Arc::new(built).router()
                }))
            }
            HandlerKind::Process { executable, io } => {
                let mut app = self.prepared.app.clone();
                app.host_json["customHandler"]["description"]["defaultExecutablePath"] =
                    Value::from(executable.display().to_string());
                let mut settings = self.settings.clone();
                // The instance it runs on, as on Azure.
                settings.set("WEBSITE_INSTANCE_ID", id);
                // Its per-batch lines would bury the summary under thousands of runs; what it
                // warns of still shows. RUST_LOG set for the app says otherwise.
                if settings.get("RUST_LOG").is_none() {
                    settings.set("RUST_LOG", "warn");
                }
                Arc::new(HeldProcess::start(&app, &settings, io.clone())?)
            }
        })
    }
}

#[async_trait]
impl Stage for SimulatedApp {
    fn app(&self) -> Result<(FunctionApp, AppSettings), LocalAppError> {
        Ok((self.prepared.app.clone(), self.prepared.settings.clone()))
    }

    fn instance_ids(&self) -> Vec<String> {
        self.instances.iter().map(|i| i.id.clone()).collect()
    }

    fn faults_of(&self, id: &str) -> Option<Arc<FaultSwitch>> {
        self.instances
            .iter()
            .find(|i| i.id == id)
            .map(|i| i.faults.clone())
    }

    async fn start_instance(&mut self, id: &str) -> Result<(), LocalAppError> {
        let faults = FaultSwitch::new(
            self.handed_out.clone(),
            self.answered.clone(),
            self.verdicts.clone(),
        );
        let store = CheckpointStore::new(
            FaultyStore::wrap(self.store.clone(), faults.clone()),
            DEFAULT_CONTAINER,
        );
        store
            .ensure_container()
            .await
            .map_err(|e| LocalAppError::Io(e.to_string()))?;
        let invoker = Invoker::direct(self.handler_of(id)?);
        let timed_out = Arc::new(tokio::sync::Notify::new());
        let stop = CancellationToken::new();
        let delivery = Delivery {
            drain: self.prepared.drain,
            faults: Some(faults.clone()),
            function_timeout: self.prepared.function_timeout,
            timed_out: timed_out.clone(),
            no_answer: NoAnswerRule::AsAzure,
            hubs: Some(self.hubs.clone()),
        };
        let triggers = InstanceTriggers::start(
            &self.functions,
            &store,
            &self.prepared.options,
            &invoker,
            id,
            &stop,
            &delivery,
        )?;
        // What `emulate` does with the handler's process: a kill or a timeout ends what it
        // was doing and starts a fresh one.
        let supervisor = tokio::spawn({
            let (faults, stop) = (faults.clone(), stop.clone());
            async move {
                loop {
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => return,
                        () = faults.kill_requested() => {
                            tracing::warn!("rehearsal: killing the custom handler");
                        }
                        () = timed_out.notified() => {
                            tracing::error!("an invocation exceeded functionTimeout; restarting the custom handler, as the host does");
                        }
                    }
                    invoker.kill_direct();
                }
            }
        });
        self.instances.push(SimulatedInstance {
            id: id.to_string(),
            faults,
            stop,
            triggers,
            supervisor,
        });
        Ok(())
    }

    async fn stop_instance(&mut self, id: &str) -> Result<(), LocalAppError> {
        let Some(at) = self.instances.iter().position(|i| i.id == id) else {
            return Err(LocalAppError::Io(format!("no instance {id}")));
        };
        self.instances.remove(at).stop().await
    }

    async fn stop_instances(&mut self) -> Result<(), LocalAppError> {
        let mut first = Ok(());
        for instance in std::mem::take(&mut self.instances) {
            let stopped = instance.stop().await;
            if first.is_ok() {
                first = stopped;
            }
        }
        first
    }

    fn detach(&self, hub: &str, server_busy: bool) {
        self.hubs.hub(hub).detach_receivers(server_busy);
    }

    fn events_handed_out(&self) -> tokio::sync::watch::Receiver<u64> {
        self.handed_out.subscribe()
    }

    fn answered_through(&self, function: &str, last: &[i64]) -> bool {
        answered_through(&self.answered, function, last)
    }

    fn send_paced(
        &self,
        hub: &str,
        bodies: Vec<Vec<u8>>,
        per_tick: usize,
        tick: Duration,
    ) -> BoxFuture<'static, Result<Sent, LocalAppError>> {
        let hub = self.hubs.hub(hub);
        Box::pin(async move {
            let per_tick = per_tick.max(1);
            let mut ticks = tokio::time::interval(tick);
            let mut sent = Sent {
                partitions: Vec::with_capacity(bodies.len()),
                last_sequence: Vec::new(),
            };
            for (group, chunk) in bodies.chunks(per_tick).enumerate() {
                ticks.tick().await;
                for (j, body) in chunk.iter().enumerate() {
                    // Over the partitions there are now: added ones get their share.
                    let (partition, sequence) =
                        hub.append(group * per_tick + j, vec![body.clone()], &[]);
                    sent.record(partition.parse().expect("numbered partitions"), sequence);
                }
            }
            Ok(sent)
        })
    }

    fn add_partitions(&self, hub: &str, added: u32) -> Result<usize, LocalAppError> {
        let hub = self.hubs.hub(hub);
        // An event hub has at most 100 partitions (Premium, per event hub), or 1,024 in a
        // Dedicated cluster: the rehearsal keeps to the first.
        let count = (hub.partition_count() + added as usize).min(100);
        Ok(hub.add_partitions(count))
    }

    fn recreate_hub(&self, hub: &str) -> Result<(), LocalAppError> {
        self.hubs.hub(hub).recreate();
        Ok(())
    }

    async fn checkpoints_past_end(
        &self,
        key: &ConsumerGroupKey,
    ) -> Result<Vec<CheckpointPastEnd>, LocalAppError> {
        let checkpoints = CheckpointStore::new(self.store.clone(), DEFAULT_CONTAINER)
            .list_checkpoints(key)
            .await
            .map_err(|e| LocalAppError::Io(e.to_string()))?
            .items;
        let hub = self.hubs.hub(&key.event_hub);
        Ok(hub
            .partitions()
            .iter()
            .filter_map(|partition| {
                let checkpoint = checkpoints
                    .iter()
                    .find(|c| c.partition_id == partition.id)?
                    .sequence_number?;
                let last = partition.last_sequence_number();
                (checkpoint > last).then(|| CheckpointPastEnd {
                    partition: partition.id.clone(),
                    checkpoint_sequence: checkpoint,
                    last_sequence: last,
                })
            })
            .collect())
    }

    async fn held_events(&self, hub: &str) -> Result<Vec<(String, EventView)>, LocalAppError> {
        let hub = self.hubs.hub(hub);
        Ok(hub
            .partitions()
            .iter()
            .flat_map(|p| {
                p.events().into_iter().map(|e| {
                    (
                        p.id.clone(),
                        EventView {
                            sequence_number: e.sequence_number.unwrap_or_default(),
                            offset: e.offset.clone().unwrap_or_default(),
                            enqueued_time: e.enqueued_time,
                            partition_key: e.partition_key.clone(),
                            body_base64: base64::Engine::encode(
                                &base64::engine::general_purpose::STANDARD,
                                &e.body,
                            ),
                            properties: e.properties.clone().into_iter().collect(),
                            system_properties: BTreeMap::new(),
                        },
                    )
                })
            })
            .collect())
    }

    async fn held_blobs(
        &self,
        container: &str,
    ) -> Result<BTreeMap<String, Vec<u8>>, LocalAppError> {
        let io = |e: hubhost_storage::StoreError| LocalAppError::Io(e.to_string());
        let mut blobs = BTreeMap::new();
        for properties in self.store.list(container, "").await.map_err(io)? {
            if let Some(blob) = self
                .store
                .get(container, &properties.name)
                .await
                .map_err(io)?
            {
                blobs.insert(properties.name.clone(), blob.data.to_vec());
            }
        }
        Ok(blobs)
    }

    fn kept(&self, function: &str, binding: &str) -> Result<Vec<Value>, LocalAppError> {
        read_outbox(self.outbox.path().join("outbox"), function, binding)
    }

    fn given_up(&self) -> Vec<GivenUp> {
        self.verdicts
            .given_up
            .lock()
            .expect("given-up lock")
            .clone()
    }

    fn undeclared_outputs(&self) -> Vec<String> {
        self.verdicts
            .undeclared_outputs
            .lock()
            .expect("undeclared lock")
            .clone()
    }
}

impl SimulatedInstance {
    /// Stops the instance as Azure stops one: batches finish, checkpoints, partitions let go.
    async fn stop(self) -> Result<(), LocalAppError> {
        self.stop.cancel();
        let finished = self.triggers.finish().await;
        self.supervisor.abort();
        Ok(finished?)
    }
}

/// A rehearsal to run simulated: the app read once, the function's server built in-process for
/// each instance. From [`Rehearsal::simulated`].
///
/// ```no_run
/// # fn example() -> Result<(), hubhost_rehearse::LocalAppError> {
/// use hubhost_functions::prelude::*;
/// use hubhost_rehearse::Rehearsal;
/// # struct Forward;
/// # #[async_trait]
/// # impl EventHubFunction for Forward {
/// #     async fn run(&self, _: TriggerBatch, _: &FunctionContext) -> Result<FunctionOutput, FunctionError> { Ok(FunctionOutput::default()) }
/// # }
///
/// let app = std::path::Path::new("function_app");
/// let simulation = Rehearsal::new(7).count(300).simulated(app, |handler| {
///     FunctionServer::builder()
///         .function("Forward", Forward)
///         .build(Some(handler.app_folder))
///         .expect("the app's declarations")
/// })?;
/// let seeds = simulation.seeds(0..200)?;
/// assert!(seeds.failing.is_empty(), "{}", seeds.summary());
/// # Ok(()) }
/// ```
pub struct Simulation {
    rehearsal: Rehearsal,
    prepared: Arc<PreparedApp>,
    handler: HandlerKind,
    /// For a handler process: the runtime its requests run on.
    _io: Option<tokio::runtime::Runtime>,
}

/// What many seeds found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Seeds {
    /// How many seeds ran.
    pub runs: usize,
    /// The reports of the seeds that failed, by seed.
    pub failing: Vec<Report>,
    /// Virtual seconds simulated, across every seed.
    pub virtual_seconds: f64,
    /// Wall-clock seconds the seeds took (shrinking the failing ones not counted).
    pub wall_seconds: f64,
}

impl Seeds {
    /// A few lines: the count, the rate, and each failing seed's summary.
    pub fn summary(&self) -> String {
        let mut text = format!(
            "{} seeds simulated: {} passed, {} failed; {:.0} seeds a minute, {:.0} virtual seconds per wall second",
            self.runs,
            self.runs - self.failing.len(),
            self.failing.len(),
            self.runs as f64 * 60.0 / self.wall_seconds.max(1e-9),
            self.virtual_seconds / self.wall_seconds.max(1e-9),
        );
        for report in &self.failing {
            text.push('\n');
            text.push_str(&report.summary());
        }
        text
    }
}

impl Rehearsal {
    /// This rehearsal, simulated: the app in `function_app` with the function served by the
    /// server `handler` builds (called for each instance, and again when its handler is killed
    /// or restarted after a timeout: nothing the old one held in memory survives).
    pub fn simulated(
        &self,
        function_app: &Path,
        handler: impl Fn(&SimulatedHandler) -> FunctionServer + Send + Sync + 'static,
    ) -> Result<Simulation, LocalAppError> {
        Ok(Simulation {
            rehearsal: self.clone(),
            prepared: Arc::new(PreparedApp::read(
                function_app,
                crate::rehearsal::timings(function_app),
            )?),
            handler: HandlerKind::InProcess(Arc::new(handler)),
            _io: None,
        })
    }

    /// This rehearsal, simulated, with the app's built `handler` executable as its custom
    /// handler: a process per instance, each request made while the simulation waits, so that
    /// its clock stands still however long the handler takes (`hubhost rehearse --simulate`).
    /// Deterministic as far as the handler is; its own state (a `Once` in
    /// `AzureWebJobsStorage`) lives in a folder of each run's own.
    pub fn simulated_process(
        &self,
        function_app: &Path,
        handler: &Path,
    ) -> Result<Simulation, LocalAppError> {
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| LocalAppError::Io(format!("a runtime for the handler: {e}")))?;
        let executable =
            std::path::absolute(handler).map_err(|e| LocalAppError::Io(e.to_string()))?;
        Ok(Simulation {
            rehearsal: self.clone(),
            prepared: Arc::new(PreparedApp::read(
                function_app,
                crate::rehearsal::timings(function_app),
            )?),
            handler: HandlerKind::Process {
                executable,
                io: io.handle().clone(),
            },
            _io: Some(io),
        })
    }
}

impl Simulation {
    /// The rehearsal's seed, simulated.
    pub fn run(&self) -> Result<Report, LocalAppError> {
        Ok(self.run_one(&self.rehearsal, false)?.0)
    }

    /// [`Self::run`] with its trace: the emulated host's log of the run (deliveries, faults,
    /// ownership changes, checkpoints), each line at its virtual time.
    pub fn trace(&self) -> Result<(Report, String), LocalAppError> {
        let (report, trace) = self.run_one(&self.rehearsal, true)?;
        Ok((report, trace.unwrap_or_default()))
    }

    /// The rehearsal with each of `seeds`, on every core; the failing ones shrunk.
    pub fn seeds(&self, seeds: std::ops::Range<u64>) -> Result<Seeds, LocalAppError> {
        let started = std::time::Instant::now();
        let all: Vec<u64> = seeds.collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results = std::sync::Mutex::new(Vec::new());
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(all.len().max(1));
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&seed) = all.get(i) else { return };
                        let outcome = self
                            .simulate(&self.rehearsal.with_seed(seed), false)
                            .map(|(report, _)| report);
                        results.lock().expect("results lock").push((seed, outcome));
                    }
                });
            }
        });
        let mut results = results.into_inner().expect("results lock");
        results.sort_by_key(|(seed, _)| *seed);
        let mut failing = Vec::new();
        let mut virtual_seconds = 0.0;
        for (_, outcome) in results {
            let report = outcome?;
            virtual_seconds += report.seconds;
            if !report.passed {
                failing.push(report);
            }
        }
        // The seeds' own time: shrinking the failing ones comes after.
        let wall_seconds = started.elapsed().as_secs_f64();
        for report in &mut failing {
            report.shrunk = self.shrink(report)?;
        }
        Ok(Seeds {
            runs: all.len(),
            failing,
            virtual_seconds,
            wall_seconds,
        })
    }

    /// A failing seed's run reduced to the fewest faults of its plan, then the fewest inputs,
    /// that still fail (each removal kept only if the run still fails; proptest's and
    /// QuickCheck's way, one fault or a share of the inputs at a time). `None` for a report that
    /// passed.
    pub fn shrink(&self, failing: &Report) -> Result<Option<Shrunk>, LocalAppError> {
        if failing.passed {
            return Ok(None);
        }
        let base = self.rehearsal.with_seed(failing.seed);
        let from_faults = failing.faults.len();
        let from_inputs = failing.inputs;
        let fails = |faults: &[usize], inputs: usize| -> Result<Option<Report>, LocalAppError> {
            let candidate = base.clone().only_faults(faults).first_inputs(inputs);
            let (report, _) = self.run_one(&candidate, false)?;
            Ok((!report.passed).then_some(report))
        };
        let mut faults: Vec<usize> = (0..from_faults).collect();
        let mut inputs = from_inputs;
        let mut last = failing.clone();
        for _round in 0..2 {
            let mut i = 0;
            while i < faults.len() {
                let mut fewer = faults.clone();
                fewer.remove(i);
                match fails(&fewer, inputs)? {
                    Some(report) => {
                        faults = fewer;
                        last = report;
                    }
                    None => i += 1,
                }
            }
            // Fewer inputs: a third fewer at a time while it still fails.
            while inputs > 1 {
                let fewer = (inputs * 2 / 3).max(1);
                match fails(&faults, fewer)? {
                    Some(report) => {
                        inputs = fewer;
                        last = report;
                    }
                    None => break,
                }
            }
        }
        let plan = last.faults.iter().map(|f| f.scheduled.clone()).collect();
        Ok(Some(Shrunk {
            replay: format!(
                "Rehearsal::new({})….only_faults(&{faults:?}).first_inputs({inputs})",
                failing.seed
            ),
            faults,
            plan,
            inputs,
            from_faults,
            from_inputs,
            missing: last.missing.len(),
            duplicated: last.duplicated.len(),
            lost_on_azure: last.lost_on_azure.len(),
        }))
    }

    /// One run on a thread of its own (the caller may be running a runtime).
    fn run_one(
        &self,
        rehearsal: &Rehearsal,
        trace: bool,
    ) -> Result<(Report, Option<String>), LocalAppError> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| self.simulate(rehearsal, trace))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    fn simulate(
        &self,
        rehearsal: &Rehearsal,
        trace: bool,
    ) -> Result<(Report, Option<String>), LocalAppError> {
        run(rehearsal, &self.prepared, &self.handler, trace)
    }
}

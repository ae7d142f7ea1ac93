//! A function app run as Azure runs it, from an integration test: [`LocalApp`].
//!
//! Everything but the function runs inside the test — the local event hub ([`InProcessHub`],
//! serving every hub the app's functions read or write) and the emulated Functions host
//! (`hubhost_host::emulate`, the same code as `hubhost emulate`: ownership, checkpoints, the
//! host's exact requests, retries, output bindings). The function is what it is in Azure: its
//! own executable, started as the custom handler. Checkpoints and blob outputs go to a
//! temporary folder, and queue, table and every other output to its outbox
//! ([`LocalApp::outbox`]). Nothing needs installing and no service needs starting: a plain
//! `cargo test` runs it.
//!
//! ```no_run
//! # async fn example() -> Result<(), hubhost_rehearse::LocalAppError> {
//! use std::time::Duration;
//! use hubhost_rehearse::LocalApp;
//!
//! let app = LocalApp::start(
//!     std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/function_app")),
//!     // Your package's executable; in its integration tests, env!("CARGO_BIN_EXE_<name>").
//!     std::path::Path::new("target/debug/my-function"),
//! )
//! .await?;
//! app.send_texts("sensors", ["hello", "world"]).await?;
//! app.wait_processed("ProcessEvents", 2, Duration::from_secs(60)).await?;
//! let forwarded = app.events_in("alarms").await?; // what an eventHub output sent
//! let written = app.blobs("deadletter").await?;   // what a blob output wrote
//! let queued = app.outbox("ProcessEvents", "queue")?; // what a queue output was handed
//! app.stop().await?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;

use crate::in_process_hub::InProcessHub;
use hubhost_functions::function_app::FunctionApp;
use hubhost_host::emulate::faults::FaultSwitch;
use hubhost_host::emulate::{self, AppSettings, EmulateError, EmulateOptions};
use hubhost_hub::HubSpec;
use hubhost_hub::admin::{EventView, HubView};
use hubhost_storage::StorageLocation;

/// Partitions of each hub a [`LocalApp`] serves.
pub const PARTITIONS: u32 = 4;

/// How long one send of [`LocalApp::send_paced`] may take before it starts over on a new
/// producer, and how many times it tries.
const SEND_LIMIT: Duration = Duration::from_secs(10);
const SEND_ATTEMPTS: u32 = 3;

/// Why a [`LocalApp`] could not start, or a step of the test failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalAppError {
    /// The function app folder is unusable (host.json, function.json, local.settings.json).
    #[error(transparent)]
    App(#[from] hubhost_functions::function_app::FunctionAppError),
    /// The emulated host refused the app or stopped with an error.
    #[error(transparent)]
    Emulate(#[from] EmulateError),
    /// The local hub could not start.
    #[error(transparent)]
    Hub(#[from] hubhost_hub::HubError),
    /// A `%Setting%` the app's bindings or host.json use is not set.
    #[error(transparent)]
    Setting(#[from] hubhost_host::emulate::ExpandError),
    /// Reading or writing the app's temporary copy, or its storage.
    #[error("{0}")]
    Io(String),
    /// The function set an output its function.json does not declare (the message names it and
    /// the declared ones): the Functions host drops it without a sign.
    #[error("{0}")]
    UndeclaredOutput(String),
    /// Sending to, or reading from, the hub.
    #[error("event hub: {0}")]
    EventHub(String),
    /// A wait ran out.
    #[error("{0}")]
    Timeout(String),
}

/// A function app under the emulated host, on an in-process hub; stopped on drop.
pub struct LocalApp {
    /// The local event hub the app reads and writes.
    pub hub: InProcessHub,
    folder: tempfile::TempDir,
    /// The app's copy the instances run.
    root: PathBuf,
    /// The running instances, the first one started with the app.
    instances: Vec<Instance>,
    /// Events handed to the function, across every instance (the clock of a rehearsal's faults).
    events_handed_out: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
    /// Per `Function/partition`, the last sequence number answered, across every instance.
    answered: hubhost_host::emulate::faults::Answered,
    /// The batches given up after their failures and the answers setting undeclared outputs,
    /// across every instance (on Azure, lost).
    verdicts: hubhost_host::emulate::faults::Verdicts,
    /// Set for a rehearsal: instances see each other's ownership expire within seconds.
    foreign_ownership_expiry: Option<Duration>,
    /// How long a stopping instance drains a batch under retry (a rehearsal: the function
    /// timeout, as the platform's drain mode).
    drain: Option<Duration>,
    http: reqwest::Client,
}

/// One emulated Functions instance of a [`LocalApp`].
struct Instance {
    id: String,
    /// Where its `/metrics` listens, once bound (it binds port 0: a port picked beforehand
    /// could be taken by another process before the instance binds it).
    metrics: std::sync::Arc<std::sync::OnceLock<SocketAddr>>,
    faults: std::sync::Arc<FaultSwitch>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    emulate: tokio::task::JoinHandle<Result<(), EmulateError>>,
}

/// How a [`LocalApp`] runs beyond the app's own files.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timings {
    /// host.json's `extensions.eventHubs` values to set (e.g. a rehearsal's short ownership).
    pub host_json_event_hubs: Vec<(&'static str, Value)>,
    pub foreign_ownership_expiry: Option<Duration>,
    pub drain: Option<Duration>,
}

impl Timings {
    /// Sets `host_json`'s `extensions.eventHubs` values as these timings say.
    pub(crate) fn apply(&self, host_json: &mut Value) {
        for (name, value) in &self.host_json_event_hubs {
            if !host_json["extensions"].is_object() {
                host_json["extensions"] = serde_json::json!({});
            }
            if !host_json["extensions"]["eventHubs"].is_object() {
                host_json["extensions"]["eventHubs"] = serde_json::json!({});
            }
            host_json["extensions"]["eventHubs"][*name] = value.clone();
        }
    }
}

/// Whether `function` has answered every partition's batches through `last[partition]`
/// (a negative entry: nothing to wait for), as the instances sharing `answered` recorded.
pub(crate) fn answered_through(
    answered: &hubhost_host::emulate::faults::Answered,
    function: &str,
    last: &[i64],
) -> bool {
    let answered = answered.lock().expect("answered lock");
    last.iter().enumerate().all(|(partition, last)| {
        *last < 0
            || answered
                .get(&format!("{function}/{partition}"))
                .is_some_and(|a| a >= last)
    })
}

impl LocalApp {
    /// Runs the app in `function_app` (host.json, one folder per function, local.settings.json)
    /// with `handler` as its custom handler (in a test of the package that builds it:
    /// `env!("CARGO_BIN_EXE_<name>")`), and waits until the host has started it.
    ///
    /// Every event hub a function is triggered by or sends to is served with [`PARTITIONS`]
    /// partitions and the consumer groups the triggers name; every Event Hubs connection setting
    /// the app uses points at it.
    pub async fn start(function_app: &Path, handler: &Path) -> Result<Self, LocalAppError> {
        Self::start_with(function_app, handler, Timings::default()).await
    }

    pub(crate) async fn start_with(
        function_app: &Path,
        handler: &Path,
        timings: Timings,
    ) -> Result<Self, LocalAppError> {
        let settings = AppSettings::load(function_app)?;
        let app = FunctionApp::load_with_settings(function_app, settings.values())?;
        let expand = |s: &str| settings.expand(s).map_err(LocalAppError::Setting);

        let mut hubs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut connections = vec![emulate::DEFAULT_CONNECTION_SETTING.to_string()];
        // The storage settings of blob inputs and of blob, queue and table outputs: the test's
        // own folder, so that nothing leaves it (queue and table outputs are then kept in the
        // outbox, and blob inputs read what `put_blob` put there).
        let mut storage_settings =
            vec![hubhost_storage::settings::DEFAULT_STORAGE_SETTING.to_string()];
        for function in &app.functions {
            if let Some(trigger) = function.event_hub_trigger() {
                let groups = hubs.entry(expand(&trigger.event_hub_name)?).or_default();
                groups.push(expand(&trigger.consumer_group)?);
                connections.extend(trigger.connection.clone());
            }
            for output in function.outputs().filter(|b| b.is("eventHub")) {
                if let Some(hub) = output.event_hub_name() {
                    hubs.entry(expand(hub)?).or_default();
                }
                connections.extend(output.setting("connection").map(str::to_string));
            }
            for binding in function
                .bindings
                .iter()
                .filter(|b| b.is("blob") || b.is("queue") || b.is("table"))
            {
                if let Some(setting) = binding.setting("connection") {
                    storage_settings.push(expand(setting)?);
                }
            }
        }
        let specs = hubs
            .into_iter()
            .map(|(name, mut groups)| {
                groups.push("$Default".into());
                groups.sort_by_key(|g| g.to_lowercase());
                groups.dedup_by_key(|g| g.to_lowercase());
                HubSpec {
                    name,
                    partitions: PARTITIONS,
                    consumer_groups: groups,
                }
            })
            .collect();
        let hub = InProcessHub::start(specs).await?;

        // The app as the test runs it: a copy whose host.json starts `handler` and whose
        // settings point at the local hub and the temporary storage.
        let folder = tempfile::tempdir().map_err(|e| LocalAppError::Io(e.to_string()))?;
        let root = folder.path().join("function_app");
        let storage = folder.path().join("storage");
        copy_tree(function_app, &root, Some("hubhost-data"))?;
        let handler = std::path::absolute(handler).map_err(|e| LocalAppError::Io(e.to_string()))?;
        let mut host_json = app.host_json.clone();
        let description = &mut host_json["customHandler"]["description"];
        description["defaultExecutablePath"] = Value::from(handler.display().to_string());
        timings.apply(&mut host_json);
        write_json(&root.join("host.json"), &host_json)?;
        // The app's own values (not the environment's, which the host reads anyway).
        let settings_file = function_app.join("local.settings.json");
        let own = match std::fs::read_to_string(&settings_file) {
            Ok(text) => AppSettings::parse_values(&text).map_err(|e| {
                LocalAppError::Io(format!("{}: not valid JSON: {e}", settings_file.display()))
            })?,
            Err(_) => BTreeMap::new(),
        };
        let mut values: serde_json::Map<String, Value> =
            own.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
        for setting in connections {
            values.insert(setting, Value::from(hub.connection_string()));
        }
        for setting in storage_settings {
            values.insert(setting, Value::from(storage.display().to_string()));
        }
        write_json(
            &root.join("local.settings.json"),
            &serde_json::json!({"IsEncrypted": false, "Values": values}),
        )?;

        let mut local = LocalApp {
            hub,
            folder,
            root,
            instances: Vec::new(),
            events_handed_out: std::sync::Arc::new(tokio::sync::watch::channel(0).0),
            answered: Default::default(),
            verdicts: Default::default(),
            foreign_ownership_expiry: timings.foreign_ownership_expiry,
            drain: timings.drain,
            http: reqwest::Client::new(),
        };
        // Claims are per checkpoint store, and this one is the test's own.
        local.start_instance("local-app").await?;
        Ok(local)
    }

    /// Starts one more instance of the app under owner id `id` (a scale-out: it takes its share
    /// of the partitions, its own handler process), and waits until it runs.
    pub async fn start_instance(&mut self, id: &str) -> Result<(), LocalAppError> {
        let metrics = std::sync::Arc::new(std::sync::OnceLock::new());
        let faults = FaultSwitch::new(
            self.events_handed_out.clone(),
            self.answered.clone(),
            self.verdicts.clone(),
        );
        let options = EmulateOptions {
            handler_settings: Vec::new(),
            app: self.root.clone(),
            storage: Some(self.storage_folder().display().to_string()),
            // Azure's rules: a failed batch is checkpointed past once its retry policy is spent,
            // and a batch the handler gave no answer to is a failed attempt.
            checkpoint_on_success: false,
            instance_id: Some(id.into()),
            foreign_ownership_expiry: self.foreign_ownership_expiry,
            metrics: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            metrics_bound: Some(metrics.clone()),
            watch: false,
            faults: Some(faults.clone()),
            drain: self.drain,
            outbox: Some(self.outbox_folder()),
            // Beside other tests and instances: a free port, never 7071.
            http_port: Some(0),
            no_answer: emulate::NoAnswerRule::AsAzure,
            // A test's (or `hubhost rehearse`'s) stdout is its own.
            start_lines: emulate::StartLines::Log,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let emulate = tokio::spawn(emulate::run(options, async move {
            let _ = stopped.await;
        }));
        let mut instance = Instance {
            id: id.to_string(),
            metrics,
            faults,
            stop: Some(stop),
            emulate,
        };
        self.wait_started(&mut instance, Duration::from_secs(60))
            .await?;
        self.instances.push(instance);
        Ok(())
    }

    /// Stops instance `id` as Azure scales one in (its batches finish, its partitions are let go).
    pub async fn stop_instance(&mut self, id: &str) -> Result<(), LocalAppError> {
        let Some(at) = self.instances.iter().position(|i| i.id == id) else {
            return Err(LocalAppError::Io(format!("no instance {id}")));
        };
        let instance = self.instances.remove(at);
        instance.stop().await
    }

    /// The owner ids of the running instances, the first started first.
    pub fn instance_ids(&self) -> Vec<String> {
        self.instances.iter().map(|i| i.id.clone()).collect()
    }

    /// Instance `id`'s fault switches (a rehearsal turns them).
    pub(crate) fn faults_of(&self, id: &str) -> Option<std::sync::Arc<FaultSwitch>> {
        self.instances
            .iter()
            .find(|i| i.id == id)
            .map(|i| i.faults.clone())
    }

    /// Events handed to the function so far, by every instance (redeliveries too).
    pub(crate) fn events_handed_out(&self) -> tokio::sync::watch::Receiver<u64> {
        self.events_handed_out.subscribe()
    }

    /// Whether `function` has answered every partition's batches through `last[partition]`
    /// (a negative entry: nothing to wait for).
    pub(crate) fn answered_through(&self, function: &str, last: &[i64]) -> bool {
        answered_through(&self.answered, function, last)
    }

    /// The batches the instances gave up after their failures, the retry policy spent (or
    /// none): what Azure moves past, its events lost.
    pub fn given_up(&self) -> Vec<hubhost_host::emulate::faults::GivenUp> {
        self.verdicts
            .given_up
            .lock()
            .expect("given-up lock")
            .clone()
    }

    /// What the instances said of answers that set outputs their function.json does not
    /// declare (each names them and the declared ones): on Azure the host drops those outputs
    /// without a sign. [`wait_processed`](Self::wait_processed) fails on the first.
    pub fn undeclared_outputs(&self) -> Vec<String> {
        self.verdicts
            .undeclared_outputs
            .lock()
            .expect("undeclared lock")
            .clone()
    }

    /// The app's copy the instances run (host.json, function folders, local.settings.json).
    pub fn app_folder(&self) -> &Path {
        &self.root
    }

    /// Where checkpoints and `blob` outputs go.
    pub fn storage_folder(&self) -> PathBuf {
        self.folder.path().join("storage")
    }

    /// Until the instance's `/metrics` answers (the handler is up and the processors run), or
    /// it stops.
    async fn wait_started(
        &self,
        instance: &mut Instance,
        within: Duration,
    ) -> Result<(), LocalAppError> {
        let deadline = Instant::now() + within;
        loop {
            let bound = instance.metrics.get().copied();
            if let Some(metrics) = bound
                && self.metrics_page(metrics).await.is_ok()
            {
                return Ok(());
            }
            if instance.emulate.is_finished() {
                return Err(match (&mut instance.emulate).await {
                    Ok(Err(e)) => e.into(),
                    Ok(Ok(())) => LocalAppError::Io("the emulated host stopped at once".into()),
                    Err(panic) => LocalAppError::Io(format!("the emulated host panicked: {panic}")),
                });
            }
            if Instant::now() > deadline {
                return Err(LocalAppError::Timeout(format!(
                    "the emulated host did not start within {within:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends one event per body (UTF-8 text) to `hub`, spread over its partitions.
    pub async fn send_texts<I, S>(&self, hub: &str, bodies: I) -> Result<(), LocalAppError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.send(hub, bodies.into_iter().map(|b| b.into().into_bytes()))
            .await
    }

    /// Sends one event per value, as compact JSON, to `hub`.
    pub async fn send_json<T: serde::Serialize>(
        &self,
        hub: &str,
        values: &[T],
    ) -> Result<(), LocalAppError> {
        let bodies = values
            .iter()
            .map(serde_json::to_vec)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| LocalAppError::EventHub(e.to_string()))?;
        self.send(hub, bodies).await
    }

    /// Sends one event per body to `hub` with the Rust Event Hubs SDK, spread over its
    /// partitions (body `i` to partition `i % PARTITIONS`).
    pub async fn send(
        &self,
        hub: &str,
        bodies: impl IntoIterator<Item = Vec<u8>>,
    ) -> Result<(), LocalAppError> {
        let bodies: Vec<Vec<u8>> = bodies.into_iter().collect();
        self.send_paced(hub, bodies, usize::MAX, Duration::from_millis(1))
            .await
    }

    /// [`send`](Self::send), the events stamped enqueued at `enqueued` (then on, as the clock
    /// runs): for a test of what a function does with old events. The local hub's clock for
    /// `hub` is set back (or on) for the send, then right again.
    ///
    /// A partition's enqueued times never go backwards, on Event Hubs as here: an event is
    /// stamped no earlier than the one before it on its partition. Send old events before
    /// new ones.
    ///
    /// ```no_run
    /// # async fn example(app: &hubhost_rehearse::LocalApp) -> Result<(), hubhost_rehearse::LocalAppError> {
    /// let half_an_hour_ago = chrono::Utc::now() - chrono::Duration::minutes(30);
    /// app.send_enqueued_at("sensors", [b"late".to_vec()], half_an_hour_ago).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_enqueued_at(
        &self,
        hub: &str,
        bodies: impl IntoIterator<Item = Vec<u8>>,
        enqueued: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), LocalAppError> {
        let partitions = self
            .hub
            .namespace
            .hub(hub)
            .ok_or_else(|| LocalAppError::EventHub(format!("no event hub {hub}")))?;
        partitions.set_clock_offset(enqueued - chrono::Utc::now());
        let sent = self.send(hub, bodies).await;
        partitions.set_clock_offset(chrono::Duration::zero());
        sent
    }

    /// Events `function` has been handed and answered for by the running instances (a retried
    /// batch counts once per instance).
    pub async fn processed(&self, function: &str) -> Result<u64, LocalAppError> {
        let mut total = 0;
        for instance in &self.instances {
            let metrics = instance.metrics.get().copied().ok_or_else(|| {
                LocalAppError::Io(format!("instance {} has no metrics endpoint", instance.id))
            })?;
            let samples = self.metrics_page(metrics).await?;
            total += hubhost_metrics::sum(
                &samples,
                "hubhost_events_processed_total",
                &[("function", function)],
            ) as u64;
        }
        Ok(total)
    }

    /// Waits until `function` has processed at least `count` events.
    pub async fn wait_processed(
        &self,
        function: &str,
        count: u64,
        within: Duration,
    ) -> Result<(), LocalAppError> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(first) = self.undeclared_outputs().into_iter().next() {
                return Err(LocalAppError::UndeclaredOutput(first));
            }
            let done = self.processed(function).await?;
            if done >= count {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(LocalAppError::Timeout(format!(
                    "{function} processed {done} of {count} events within {within:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends `bodies` to `hub` `per_tick` at a time (spread over the partitions: body `i` to
    /// partition `i % PARTITIONS`), one group every `tick`, with one producer; the future does
    /// not borrow the app.
    ///
    /// Each send is bounded (10 s, three tries). The SDK's producer can wait forever for an
    /// answer a loaded machine lost (a link's attach or its authorization); a rehearsal that
    /// waited out its time would then report inputs its handler was never given as missing.
    /// A stalled send starts over on a new producer, unless the partition shows the event
    /// arrived (it then only lacked its acknowledgement).
    pub fn send_paced(
        &self,
        hub: &str,
        bodies: Vec<Vec<u8>>,
        per_tick: usize,
        tick: Duration,
    ) -> impl std::future::Future<Output = Result<(), LocalAppError>> + Send + 'static {
        use azure_messaging_eventhubs::models::EventData;
        use azure_messaging_eventhubs::{ProducerClient, SendEventOptions};
        let target =
            hubhost_eventhubs::EventHubTarget::parse(&self.hub.connection_string(), Some(hub));
        let partitions = self.hub.namespace.hub(hub);
        let hub = hub.to_string();
        async move {
            let target = target.map_err(|e| LocalAppError::EventHub(e.to_string()))?;
            let partitions =
                partitions.ok_or_else(|| LocalAppError::EventHub(format!("no event hub {hub}")))?;
            let sent = hubhost_eventhubs::on_sending_thread(move || async move {
                let open = async || match tokio::time::timeout(SEND_LIMIT, target.producer()).await
                {
                    Ok(producer) => producer.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no producer for {hub} within {SEND_LIMIT:?}")),
                };
                let mut producer = open().await?;
                let mut ticks = tokio::time::interval(tick);
                for (group, chunk) in bodies.chunks(per_tick.max(1)).enumerate() {
                    ticks.tick().await;
                    for (j, body) in chunk.iter().enumerate() {
                        let i = group * per_tick.max(1) + j;
                        let id = (i as u32 % PARTITIONS).to_string();
                        let partition = partitions
                            .partition(&id)
                            .ok_or_else(|| format!("{hub} has no partition {id}"))?;
                        let before = partition.summary().next_sequence;
                        let send = async |producer: &ProducerClient| {
                            let event = EventData::builder().with_body(body.clone()).build();
                            let options = SendEventOptions {
                                partition_id: Some(id.clone()),
                            };
                            producer
                                .send_event(event, Some(options))
                                .await
                                .map_err(|e| e.to_string())
                        };
                        let arrived = || partition.summary().next_sequence > before;
                        send_through(&mut producer, send, &open, arrived, SEND_LIMIT)
                            .await
                            .map_err(|e| format!("input {i} to partition {id} of {hub}: {e}"))?;
                    }
                }
                hubhost_eventhubs::close_quietly("producer", producer.close()).await;
                Ok::<(), String>(())
            })
            .await;
            match sent {
                Some(result) => result.map_err(LocalAppError::EventHub),
                None => Err(LocalAppError::EventHub("the sender panicked".into())),
            }
        }
    }

    /// Every event `hub` holds, partition by partition (what an `eventHub` output sent there).
    pub async fn events_in(&self, hub: &str) -> Result<Vec<EventView>, LocalAppError> {
        Ok(self
            .events_by_partition(hub)
            .await?
            .into_iter()
            .map(|(_, e)| e)
            .collect())
    }

    /// Every event `hub` holds, with its partition.
    pub async fn events_by_partition(
        &self,
        hub: &str,
    ) -> Result<Vec<(String, EventView)>, LocalAppError> {
        let admin = self
            .hub
            .admin
            .ok_or_else(|| LocalAppError::EventHub("the hub has no admin endpoint".into()))?;
        let get = |url: String| async move {
            let text = self.get_text(&url).await.map_err(LocalAppError::EventHub)?;
            serde_json::from_str::<Value>(&text)
                .map_err(|e| LocalAppError::EventHub(format!("{url}: {e}")))
        };
        let hubs: Vec<HubView> = serde_json::from_value(get(format!("http://{admin}/hubs")).await?)
            .map_err(|e| LocalAppError::EventHub(e.to_string()))?;
        let found = hubs
            .into_iter()
            .find(|h| h.name.eq_ignore_ascii_case(hub))
            .ok_or_else(|| LocalAppError::EventHub(format!("no event hub {hub}")))?;
        let mut events = Vec::new();
        for partition in found.partitions {
            let mut from = partition.beginning_sequence_number;
            while from <= partition.last_sequence_number {
                let url = format!(
                    "http://{admin}/hubs/{hub}/partitions/{}/events?from={from}&count={}",
                    partition.id,
                    hubhost_hub::admin::MAX_EVENTS
                );
                let page: Vec<EventView> = serde_json::from_value(get(url).await?)
                    .map_err(|e| LocalAppError::EventHub(e.to_string()))?;
                let Some(last) = page.last() else { break };
                from = last.sequence_number + 1;
                events.extend(page.into_iter().map(|e| (partition.id.clone(), e)));
            }
        }
        Ok(events)
    }

    /// The bodies of every event in `hub`, as text (lossy for bytes that are not UTF-8).
    pub async fn texts_in(&self, hub: &str) -> Result<Vec<String>, LocalAppError> {
        let decode = |e: &EventView| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&e.body_base64)
                .unwrap_or_default();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        Ok(self.events_in(hub).await?.iter().map(decode).collect())
    }

    /// Every blob in `container` of the app's storage (what `blob` outputs wrote), by name.
    pub async fn blobs(&self, container: &str) -> Result<BTreeMap<String, Vec<u8>>, LocalAppError> {
        let io = |e: hubhost_storage::StoreError| LocalAppError::Io(e.to_string());
        let store = StorageLocation::Directory(self.storage_folder())
            .open()
            .map_err(io)?;
        let mut blobs = BTreeMap::new();
        let listed = match store.list(container, "").await {
            Ok(listed) => listed,
            // Nothing was written there.
            Err(hubhost_storage::StoreError::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(io(e)),
        };
        for item in listed {
            if let Some(blob) = store.get(container, &item.name).await.map_err(io)? {
                blobs.insert(item.name, blob.data.to_vec());
            }
        }
        Ok(blobs)
    }

    /// Puts a blob in the app's storage, for a blob input to read (`refs/{PartitionKey}.json`).
    pub async fn put_blob(
        &self,
        container: &str,
        name: &str,
        content: impl Into<bytes::Bytes>,
    ) -> Result<(), LocalAppError> {
        let io = |e: hubhost_storage::StoreError| LocalAppError::Io(e.to_string());
        let store = StorageLocation::Directory(self.storage_folder())
            .open()
            .map_err(io)?;
        store.ensure_container(container).await.map_err(io)?;
        store
            .put(
                container,
                name,
                content.into(),
                &hubhost_storage::Metadata::new(),
                &hubhost_storage::Condition::Always,
            )
            .await
            .map_err(io)?;
        Ok(())
    }

    /// The values `function`'s output `binding` kept in the outbox, in order: the lines of
    /// what a queue, table, cosmosDB or any other output not carried out here was handed
    /// (each with its invocation, partition and sequence numbers, and `value` or `bytes`).
    pub fn outbox(&self, function: &str, binding: &str) -> Result<Vec<Value>, LocalAppError> {
        read_outbox(self.outbox_folder(), function, binding)
    }

    /// Where outputs no local service carries out are kept.
    pub fn outbox_folder(&self) -> PathBuf {
        self.folder.path().join("outbox")
    }

    /// Stops the host as Azure stops an instance (the function finishes its batches, the
    /// processors checkpoint and let go of their partitions), then the hub.
    pub async fn stop(mut self) -> Result<(), LocalAppError> {
        self.stop_instances().await
    }

    /// Stops every instance as Azure stops them (batches finish, partitions are let go); the
    /// hub and the storage stay for reading what the outputs did.
    pub async fn stop_instances(&mut self) -> Result<(), LocalAppError> {
        let mut first = Ok(());
        for instance in std::mem::take(&mut self.instances) {
            let stopped = instance.stop().await;
            if first.is_ok() {
                first = stopped;
            }
        }
        first
    }

    async fn metrics_page(
        &self,
        metrics: SocketAddr,
    ) -> Result<Vec<hubhost_metrics::Sample>, LocalAppError> {
        let url = format!("http://{metrics}/metrics");
        let text = self.get_text(&url).await.map_err(LocalAppError::Io)?;
        hubhost_metrics::parse(&text).map_err(|e| LocalAppError::Io(format!("{url}: {e}")))
    }

    /// `GET url`'s body, or why not (naming the URL).
    async fn get_text(&self, url: &str) -> Result<String, String> {
        let response = self
            .http
            .get(url)
            .bearer_auth(&self.hub.admin_token)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("{url}: {e}"))?;
        response.text().await.map_err(|e| format!("{url}: {e}"))
    }
}

/// Sends one event with `send` on `producer`, each try bounded by `limit`. A try that stalls
/// leaves its producer (abandoned: closing it could stall too) for a new one from `open`, and
/// the event is sent again unless `arrived` says the stalled try got through (it then lacked
/// only its acknowledgement). Gives up after [`SEND_ATTEMPTS`] stalls; a send that fails
/// outright fails at once. Returns how many tries it took.
async fn send_through<P>(
    producer: &mut P,
    send: impl AsyncFn(&P) -> Result<(), String>,
    open: impl AsyncFn() -> Result<P, String>,
    arrived: impl Fn() -> bool,
    limit: Duration,
) -> Result<u32, String> {
    for attempt in 1..=SEND_ATTEMPTS {
        if let Ok(sent) = tokio::time::timeout(limit, send(producer)).await {
            return sent.map(|()| attempt);
        }
        tracing::warn!(target: "hubhost::rehearse", attempt, "a send stalled; starting over on a new producer");
        *producer = open().await?;
        if arrived() {
            return Ok(attempt);
        }
    }
    Err(format!(
        "not sent in {SEND_ATTEMPTS} tries of {limit:?} each"
    ))
}

impl Instance {
    /// Stops the instance as Azure stops one, and waits until it has.
    async fn stop(mut self) -> Result<(), LocalAppError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.emulate).await {
            Ok(result) => Ok(result?),
            Err(panic) => Err(LocalAppError::Io(format!(
                "the emulated host panicked: {panic}"
            ))),
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // The handler process is killed with the task that owns it.
        self.emulate.abort();
    }
}

/// The lines an outbox in `folder` kept for `function`'s output `binding`, in order.
pub(crate) fn read_outbox(
    folder: PathBuf,
    function: &str,
    binding: &str,
) -> Result<Vec<Value>, LocalAppError> {
    let file = emulate::Outbox::new(folder)
        .file_for(function, binding)
        .map_err(|e| LocalAppError::Io(e.to_string()))?;
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(LocalAppError::Io(format!("{}: {e}", file.display()))),
    };
    text.lines()
        .map(|line| {
            serde_json::from_str(line)
                .map_err(|e| LocalAppError::Io(format!("{}: {e}", file.display())))
        })
        .collect()
}

/// Copies the folder `from` into `to`, leaving out every entry named `leave_out` (for the app
/// folder, what the emulator and the handler wrote into it: `hubhost-data`).
pub(crate) fn copy_tree(
    from: &Path,
    to: &Path,
    leave_out: Option<&str>,
) -> Result<(), LocalAppError> {
    let io = |path: &Path, e: std::io::Error| LocalAppError::Io(format!("{}: {e}", path.display()));
    std::fs::create_dir_all(to).map_err(|e| io(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| io(from, e))? {
        let entry = entry.map_err(|e| io(from, e))?;
        let path: PathBuf = entry.path();
        let name = entry.file_name();
        if leave_out.is_some_and(|l| name == l) {
            continue;
        }
        let target = to.join(&name);
        if path.is_dir() {
            copy_tree(&path, &target, leave_out)?;
        } else {
            std::fs::copy(&path, &target).map_err(|e| io(&path, e))?;
        }
    }
    Ok(())
}

fn write_json(path: &Path, value: &Value) -> Result<(), LocalAppError> {
    let text = serde_json::to_string_pretty(value).expect("JSON");
    std::fs::write(path, text).map_err(|e| LocalAppError::Io(format!("{}: {e}", path.display())))
}

#[async_trait::async_trait]
impl crate::stage::Stage for LocalApp {
    fn app(&self) -> Result<(FunctionApp, AppSettings), LocalAppError> {
        let settings = AppSettings::load(self.app_folder())?;
        let app = FunctionApp::load_with_settings(self.app_folder(), settings.values())?;
        Ok((app, settings))
    }

    fn instance_ids(&self) -> Vec<String> {
        LocalApp::instance_ids(self)
    }

    fn faults_of(&self, id: &str) -> Option<std::sync::Arc<FaultSwitch>> {
        LocalApp::faults_of(self, id)
    }

    async fn start_instance(&mut self, id: &str) -> Result<(), LocalAppError> {
        LocalApp::start_instance(self, id).await
    }

    async fn stop_instance(&mut self, id: &str) -> Result<(), LocalAppError> {
        LocalApp::stop_instance(self, id).await
    }

    async fn stop_instances(&mut self) -> Result<(), LocalAppError> {
        LocalApp::stop_instances(self).await
    }

    fn detach(&self, hub: &str, server_busy: bool) {
        if let Some(hub) = self.hub.namespace.hub(hub) {
            for partition in &hub.partitions {
                partition.detach_receivers(server_busy, "rehearsal: the hub ended the link");
            }
        }
    }

    fn events_handed_out(&self) -> tokio::sync::watch::Receiver<u64> {
        LocalApp::events_handed_out(self)
    }

    fn answered_through(&self, function: &str, last: &[i64]) -> bool {
        LocalApp::answered_through(self, function, last)
    }

    fn send_paced(
        &self,
        hub: &str,
        bodies: Vec<Vec<u8>>,
        per_tick: usize,
        tick: Duration,
    ) -> futures::future::BoxFuture<'static, Result<crate::stage::Sent, LocalAppError>> {
        let inputs = bodies.len();
        let sending = LocalApp::send_paced(self, hub, bodies, per_tick, tick);
        Box::pin(async move {
            sending.await?;
            Ok(crate::stage::Sent::round_robin(inputs, PARTITIONS))
        })
    }

    fn add_partitions(&self, hub: &str, _added: u32) -> Result<usize, LocalAppError> {
        Err(simulated_only(hub, "add partitions to"))
    }

    fn recreate_hub(&self, hub: &str) -> Result<(), LocalAppError> {
        Err(simulated_only(hub, "recreate"))
    }

    /// None: the local hub is never recreated under a rehearsal.
    async fn checkpoints_past_end(
        &self,
        _key: &hubhost_checkpoints::ConsumerGroupKey,
    ) -> Result<Vec<crate::stage::CheckpointPastEnd>, LocalAppError> {
        Ok(Vec::new())
    }

    async fn held_events(&self, hub: &str) -> Result<Vec<(String, EventView)>, LocalAppError> {
        self.events_by_partition(hub).await
    }

    async fn held_blobs(
        &self,
        container: &str,
    ) -> Result<BTreeMap<String, Vec<u8>>, LocalAppError> {
        self.blobs(container).await
    }

    fn kept(&self, function: &str, binding: &str) -> Result<Vec<Value>, LocalAppError> {
        self.outbox(function, binding)
    }

    fn given_up(&self) -> Vec<hubhost_host::emulate::faults::GivenUp> {
        LocalApp::given_up(self)
    }

    fn undeclared_outputs(&self) -> Vec<String> {
        LocalApp::undeclared_outputs(self)
    }
}

fn simulated_only(hub: &str, what: &str) -> LocalAppError {
    LocalAppError::Io(format!(
        "the local hub cannot {what} a running event hub ({hub}); only the simulated rehearsal can"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A producer of the fakes below: the `number`th opened.
    struct Producer {
        number: u32,
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_send_starts_over_on_a_new_producer_without_sending_twice() {
        let (opened, sends) = (Cell::new(1), Cell::new(0));
        let open = async || {
            opened.set(opened.get() + 1);
            Ok(Producer {
                number: opened.get(),
            })
        };
        // The first producer's send never ends; the next one's goes through.
        let first_stalls = async |p: &Producer| {
            sends.set(sends.get() + 1);
            if p.number == 1 {
                std::future::pending::<()>().await;
            }
            Ok(())
        };
        let mut producer = Producer { number: 1 };
        let tries = send_through(&mut producer, &first_stalls, &open, || false, SEND_LIMIT).await;
        assert_eq!(tries, Ok(2));
        assert_eq!((producer.number, sends.get()), (2, 2));

        // The stalled try got through (the partition holds the event): it is not sent again.
        let mut producer = Producer { number: 1 };
        sends.set(0);
        let tries = send_through(&mut producer, &first_stalls, &open, || true, SEND_LIMIT).await;
        assert_eq!((tries, sends.get()), (Ok(1), 1));

        // Every producer stalls: it gives up after its tries, saying so.
        let stalls = async |_: &Producer| std::future::pending::<Result<(), String>>().await;
        let given_up = send_through(&mut producer, stalls, &open, || false, SEND_LIMIT).await;
        assert_eq!(
            given_up,
            Err(format!(
                "not sent in {SEND_ATTEMPTS} tries of {SEND_LIMIT:?} each"
            ))
        );

        // A send the hub refuses fails at once, on the same producer.
        let before = opened.get();
        let refused = async |_: &Producer| Err::<(), _>("refused".to_string());
        let failed = send_through(&mut producer, refused, &open, || false, SEND_LIMIT).await;
        assert_eq!((failed, opened.get()), (Err("refused".to_string()), before));
    }
}

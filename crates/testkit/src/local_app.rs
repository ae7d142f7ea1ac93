//! A function app run as Azure runs it, from an integration test: [`LocalApp`].
//!
//! Everything but the function runs inside the test — the local event hub ([`InProcessHub`],
//! serving every hub the app's functions read or write) and the emulated Functions host
//! (`hubhost_host::emulate`, the same code as `hubhost emulate`: ownership, checkpoints, the
//! host's exact requests, retries, output bindings). The function is what it is in Azure: its
//! own executable, started as the custom handler. Checkpoints and blob outputs go to a
//! temporary folder. Nothing needs installing and no service needs starting: a plain
//! `cargo test` runs it.
//!
//! ```no_run
//! # async fn example() -> Result<(), hubhost_testkit::LocalAppError> {
//! use std::time::Duration;
//! use hubhost_testkit::LocalApp;
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
//! app.stop().await?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;

use crate::hub::InProcessHub;
use hubhost_functions::function_app::FunctionApp;
use hubhost_host::emulate::{self, AppSettings, EmulateError, EmulateOptions};
use hubhost_hub::HubSpec;
use hubhost_hub::admin::{EventView, HubView};
use hubhost_storage::StorageLocation;

/// Partitions of each hub a [`LocalApp`] serves.
pub const PARTITIONS: u32 = 4;

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
    /// Reading or writing the app's temporary copy, or its storage.
    #[error("{0}")]
    Io(String),
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
    metrics: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    emulate: tokio::task::JoinHandle<Result<(), EmulateError>>,
    http: reqwest::Client,
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
        let app = FunctionApp::load(function_app)?;
        let settings = AppSettings::load(function_app)?;
        let expand = |s: &str| settings.expand(s).map_err(LocalAppError::Io);

        let mut hubs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut connections = vec![emulate::DEFAULT_CONNECTION_SETTING.to_string()];
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
        copy_app(function_app, &root)?;
        let handler = std::path::absolute(handler).map_err(|e| LocalAppError::Io(e.to_string()))?;
        let mut host_json = app.host_json.clone();
        let description = &mut host_json["customHandler"]["description"];
        description["defaultExecutablePath"] = Value::from(handler.display().to_string());
        write_json(&root.join("host.json"), &host_json)?;
        // The app's own values (not the environment's, which the host reads anyway).
        let settings_file = function_app.join("local.settings.json");
        let own = match std::fs::read_to_string(&settings_file) {
            Ok(text) => AppSettings::parse_values(&text)
                .map_err(|e| LocalAppError::Io(format!("{}: {e}", settings_file.display())))?,
            Err(_) => BTreeMap::new(),
        };
        let mut values: serde_json::Map<String, Value> =
            own.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
        for setting in connections {
            values.insert(setting, Value::from(hub.connection_string()));
        }
        values.insert(
            hubhost_storage::settings::DEFAULT_STORAGE_SETTING.into(),
            Value::from(storage.display().to_string()),
        );
        write_json(
            &root.join("local.settings.json"),
            &serde_json::json!({"IsEncrypted": false, "Values": values}),
        )?;

        let metrics = SocketAddr::from(([127, 0, 0, 1], crate::process::free_port()));
        let options = EmulateOptions {
            app: root,
            storage: Some(storage.display().to_string()),
            checkpoint_on_success: true,
            // Claims are per checkpoint store, and this one is the test's own.
            instance_id: Some("local-app".into()),
            foreign_ownership_expiry: None,
            metrics: Some(metrics),
            watch: false,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let emulate = tokio::spawn(emulate::run(options, async move {
            let _ = stopped.await;
        }));
        let local = LocalApp {
            hub,
            folder,
            metrics,
            stop: Some(stop),
            emulate,
            http: reqwest::Client::new(),
        };
        local.wait_started(Duration::from_secs(60)).await
    }

    /// Until `/metrics` answers (the handler is up and the processors run), or emulate stops.
    async fn wait_started(mut self, within: Duration) -> Result<Self, LocalAppError> {
        let deadline = Instant::now() + within;
        loop {
            if self.metrics_page().await.is_ok() {
                return Ok(self);
            }
            if self.emulate.is_finished() {
                return Err(match (&mut self.emulate).await {
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
    /// partitions.
    pub async fn send(
        &self,
        hub: &str,
        bodies: impl IntoIterator<Item = Vec<u8>>,
    ) -> Result<(), LocalAppError> {
        use azure_messaging_eventhubs::SendEventOptions;
        use azure_messaging_eventhubs::models::EventData;
        let target =
            hubhost_eventhubs::EventHubTarget::parse(&self.hub.connection_string(), Some(hub))
                .map_err(|e| LocalAppError::EventHub(e.to_string()))?;
        let bodies: Vec<Vec<u8>> = bodies.into_iter().collect();
        // The SDK sends from a runtime of its own (see hubhost_eventhubs::on_sending_thread).
        let sent = hubhost_eventhubs::on_sending_thread(move || async move {
            let producer = target.producer().await.map_err(|e| e.to_string())?;
            for (i, body) in bodies.into_iter().enumerate() {
                let event = EventData::builder().with_body(body).build();
                let partition = (i as u32 % PARTITIONS).to_string();
                let options = SendEventOptions {
                    partition_id: Some(partition),
                };
                producer
                    .send_event(event, Some(options))
                    .await
                    .map_err(|e| e.to_string())?;
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

    /// Events `function` has been handed and answered for (a retried batch counts once).
    pub async fn processed(&self, function: &str) -> Result<u64, LocalAppError> {
        let samples = self.metrics_page().await?;
        Ok(hubhost_metrics::sum(
            &samples,
            "hubhost_events_processed_total",
            &[("function", function)],
        ) as u64)
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

    /// Every event `hub` holds, partition by partition (what an `eventHub` output sent there).
    pub async fn events_in(&self, hub: &str) -> Result<Vec<EventView>, LocalAppError> {
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
                events.extend(page);
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
        let store = StorageLocation::Directory(self.folder.path().join("storage"))
            .open()
            .map_err(io)?;
        let mut blobs = BTreeMap::new();
        for item in store.list(container, "").await.map_err(io)? {
            if let Some(blob) = store.get(container, &item.name).await.map_err(io)? {
                blobs.insert(item.name, blob.data.to_vec());
            }
        }
        Ok(blobs)
    }

    /// Stops the host as Azure stops an instance (the function finishes its batches, the
    /// processors checkpoint and let go of their partitions), then the hub.
    pub async fn stop(mut self) -> Result<(), LocalAppError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.emulate).await {
            Ok(result) => result?,
            Err(panic) => {
                return Err(LocalAppError::Io(format!(
                    "the emulated host panicked: {panic}"
                )));
            }
        }
        Ok(())
    }

    async fn metrics_page(&self) -> Result<Vec<hubhost_metrics::Sample>, LocalAppError> {
        let url = format!("http://{}/metrics", self.metrics);
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

impl Drop for LocalApp {
    fn drop(&mut self) {
        // The handler process is killed with the task that owns it.
        self.emulate.abort();
    }
}

/// Copies the app folder, leaving out what the emulator and the handler wrote into it.
fn copy_app(from: &Path, to: &Path) -> Result<(), LocalAppError> {
    let io = |path: &Path, e: std::io::Error| LocalAppError::Io(format!("{}: {e}", path.display()));
    std::fs::create_dir_all(to).map_err(|e| io(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| io(from, e))? {
        let entry = entry.map_err(|e| io(from, e))?;
        let path: PathBuf = entry.path();
        let name = entry.file_name();
        if name == "hubhost-data" {
            continue;
        }
        let target = to.join(&name);
        if path.is_dir() {
            copy_app(&path, &target)?;
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

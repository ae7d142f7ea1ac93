//! The local event hub the benchmarks run on: a `hubhost hub` child process serving the
//! reference app's hubs and consumer groups, and the bare SDK receiver every baseline reads with.
//! `hub`, `latency`, `load` and `pool` all start from here.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use azure_messaging_eventhubs::{
    ConsumerClient, EventReceiver, OpenReceiverOptions, StartPosition,
};
use hubhost_eventhubs::EventHubTarget;

/// The event hub the reference app reads.
pub(crate) const HUB: &str = "sensors";
/// The official emulator's well-known key, which `hubhost hub` accepts by default.
pub(crate) const KEY: &str = "SAS_KEY_VALUE";
/// The consumer group the baselines read on, beside the app's.
pub(crate) const BASELINE_GROUP: &str = "bench";

#[derive(Debug, thiserror::Error)]
pub enum LocalHubError {
    #[error("the benchmark's hub could not start: {0}")]
    Start(String),
    #[error(transparent)]
    Connect(#[from] hubhost_eventhubs::EventHubsError),
}

/// A `hubhost hub` child process, killed on drop.
pub(crate) struct HubProcess {
    child: Child,
    pub(crate) connection_string: String,
    pub(crate) target: EventHubTarget,
}

impl HubProcess {
    pub(crate) fn start(data_dir: &Path, partitions: u32) -> Result<Self, LocalHubError> {
        Self::start_with(data_dir, partitions, &[])
    }

    /// [`HubProcess::start`] with more `hubhost hub` arguments.
    pub(crate) fn start_with(
        data_dir: &Path,
        partitions: u32,
        args: &[String],
    ) -> Result<Self, LocalHubError> {
        let port =
            hubhost_testkit::try_free_port().map_err(|e| LocalHubError::Start(e.to_string()))?;
        let exe = crate::hubhost_exe().map_err(|e| LocalHubError::Start(e.to_string()))?;
        let child = hubhost_process::child::std_command(exe)
            .args(["hub", "--port", &port.to_string(), "--hub"])
            // The reference app's archive reads its own consumer group, and so does
            // `bench latency`'s baseline.
            .arg(format!("{HUB}:{partitions}:archive,{}", BASELINE_GROUP))
            // Where the reference app's SensorAggregator forwards alarms, and its page reads
            // them as they come.
            .args(["--hub", "alarms:4:dashboard"])
            .arg("--data-dir")
            .arg(data_dir)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| LocalHubError::Start(e.to_string()))?;
        let connection_string = format!(
            "Endpoint=sb://localhost:{port};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY};UseDevelopmentEmulator=true"
        );
        let mut hub = HubProcess {
            child,
            target: EventHubTarget::parse(&connection_string, Some(HUB))?,
            connection_string,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = hub.child.try_wait() {
                return Err(LocalHubError::Start(format!("it exited: {status}")));
            }
            if Instant::now() > deadline {
                return Err(LocalHubError::Start("it did not listen within 30 s".into()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(hub)
    }
}

impl HubProcess {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for HubProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bare SDK receiver every benchmark's baseline reads with: no owner level, no
/// checkpoints, `prefetch` credit, from `start` on.
pub(crate) async fn open_bare_receiver(
    consumer: &ConsumerClient,
    partition: u32,
    start: StartPosition,
    prefetch: u32,
) -> Result<EventReceiver, azure_messaging_eventhubs::EventHubsError> {
    consumer
        .open_receiver_on_partition(
            partition.to_string(),
            Some(OpenReceiverOptions {
                start_position: Some(start),
                prefetch: Some(prefetch),
                ..Default::default()
            }),
        )
        .await
}

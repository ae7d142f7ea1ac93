//! `hubhost hub`, the local Event Hubs namespace, as a child process on a free port.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::process::{binary, free_port, wait_for_port};
use crate::python::python_json;

/// The well-known key of the official emulator, which `hubhost hub` accepts by default.
pub const KEY: &str = "SAS_KEY_VALUE";

/// A `hubhost hub` child process on a free port, killed on drop.
pub struct Hub {
    pub child: Child,
    pub port: u16,
}

impl Hub {
    pub fn start(data_dir: Option<&Path>) -> Hub {
        Self::start_on(free_port(), data_dir)
    }

    pub fn start_on(port: u16, data_dir: Option<&Path>) -> Hub {
        Self::start_serving(port, data_dir, &[], &[])
    }

    /// In memory, on a free port, serving `hubs` (`name:partitions`) instead of the default.
    pub fn start_serving_hubs(hubs: &[&str]) -> Hub {
        Self::start_serving(free_port(), None, hubs, &[])
    }

    /// In memory, on a free port, the default hubs, with more `hubhost hub` flags.
    pub fn start_with_flags(flags: &[&str]) -> Hub {
        Self::start_serving(free_port(), None, &[], flags)
    }

    /// On `port`, its data in `data_dir` (or memory), serving `hubs` (or the default), with more
    /// `hubhost hub` flags.
    pub fn start_serving(port: u16, data_dir: Option<&Path>, hubs: &[&str], flags: &[&str]) -> Hub {
        let mut cmd = Command::new(binary("hubhost"));
        cmd.args(["hub", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("HUBHOST_TEST_HUB_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        match data_dir {
            Some(dir) => cmd.arg("--data-dir").arg(dir),
            None => cmd.arg("--in-memory"),
        };
        for hub in hubs {
            cmd.args(["--hub", hub]);
        }
        cmd.args(flags);
        let child = cmd.spawn().expect("hubhost starts");
        wait_for_port(port, "hubhost hub");
        Hub { child, port }
    }

    /// The connection string users write for the official emulator, with this hub's port.
    pub fn connection_string(&self, key: &str) -> String {
        format!(
            "Endpoint=sb://localhost:{};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={key};UseDevelopmentEmulator=true;",
            self.port
        )
    }

    pub fn python(&self, op: &str, args: &[&str]) -> Value {
        let cs = self.connection_string(KEY);
        let mut all = vec![cs.as_str(), "sensors", op];
        all.extend_from_slice(args);
        python_json("eventhub_peer.py", &all)
    }

    pub fn kill_9(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.kill_9();
    }
}

/// A hub served by the test's own process on a free loopback port: nothing to build or find,
/// listening within milliseconds, gone when dropped. For `#[tokio::test]`s that need an event
/// hub but not a separate process to kill (for crash tests, use [`Hub`]).
///
/// ```no_run
/// # async fn example() {
/// use hubhost_testkit::InProcessHub;
///
/// let hub = InProcessHub::start(vec![hubhost_hub::HubSpec::sensors()]).await.unwrap();
/// let connection = hub.connection_string(); // as users write it for the official emulator
/// # }
/// ```
pub struct InProcessHub {
    /// The AMQP port (the connection string's).
    pub port: u16,
    /// The admin endpoint (`hubhost hub add-hub …`, the page's explorer), on loopback.
    pub admin: Option<std::net::SocketAddr>,
    /// The token the admin endpoint requires (`Authorization: Bearer …`).
    pub admin_token: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), hubhost_hub::HubError>>,
}

impl InProcessHub {
    /// Serves `hubs` in memory, with the official emulator's key, on the current runtime.
    pub async fn start(hubs: Vec<hubhost_hub::HubSpec>) -> Result<Self, hubhost_hub::HubError> {
        let mut config = hubhost_hub::HubConfig::new(([127, 0, 0, 1], 0).into(), hubs, None);
        config.admin_port = Some(0);
        let (listening_tx, listening_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(hubhost_hub::serve(
            config,
            move |_, _, listening| {
                let _ = listening_tx.send(listening);
            },
            async move {
                let _ = stop_rx.await;
            },
        ));
        match listening_rx.await {
            Ok(listening) => Ok(InProcessHub {
                port: listening.amqp.port(),
                admin: listening.admin,
                admin_token: listening.admin_token.unwrap_or_default(),
                stop: Some(stop_tx),
                task,
            }),
            // The hub stopped before listening: its error says why.
            Err(_) => match task.await {
                Ok(Err(e)) => Err(e),
                Ok(Ok(())) => panic!("the in-process hub stopped before listening"),
                Err(panic) => std::panic::resume_unwind(panic.into_panic()),
            },
        }
    }

    /// The connection string users write for the official emulator, with this hub's port.
    pub fn connection_string(&self) -> String {
        format!(
            "Endpoint=sb://localhost:{};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY};UseDevelopmentEmulator=true;",
            self.port
        )
    }

    /// Stops the hub and waits until it has closed its connections and listener.
    pub async fn stop(mut self) -> Result<(), hubhost_hub::HubError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic.into_panic()),
        }
    }
}

impl Drop for InProcessHub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

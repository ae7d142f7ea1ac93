//! The local event hub served inside the calling process: what [`crate::LocalApp`] and the
//! rehearsals run an app against, and what tests that need an event hub but not a process to
//! kill use.

/// The official emulator's key, which the hub accepts.
pub const KEY: &str = "SAS_KEY_VALUE";

/// A hub served by the test's own process on a free loopback port: nothing to build or find,
/// listening within milliseconds, gone when dropped. For `#[tokio::test]`s that need an event
/// hub but not a separate process to kill (for crash tests, use the test kit's `Hub`, a `hubhost hub` process).
///
/// ```no_run
/// # async fn example() {
/// use hubhost_rehearse::InProcessHub;
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
    /// The hub's model, for faults a test injects (e.g. [`hubhost_hub::Partition::detach_receivers`]).
    pub namespace: std::sync::Arc<hubhost_hub::Namespace>,
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
            move |_, namespace, listening| {
                let _ = listening_tx.send((namespace.clone(), listening));
            },
            async move {
                let _ = stop_rx.await;
            },
        ));
        match listening_rx.await {
            Ok((namespace, listening)) => Ok(InProcessHub {
                namespace,
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

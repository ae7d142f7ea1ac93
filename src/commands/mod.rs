//! One module per command: its flags (`Args`, or a subcommand enum) and its `run`, which
//! parses what clap cannot, hands over to the library module that does the work, and prints.

pub mod add;
pub mod bench;
pub mod checkpoints;
pub mod demo;
pub mod docs;
pub mod emulate;
pub mod hub;
pub mod invoke;
pub mod new;
pub mod package;
pub mod rehearse;
pub mod simulate;

/// How a command reaches an event hub: a connection string, or an identity-based connection,
/// from flags or from the app settings the Functions host would read.
#[derive(clap::Args, Clone, Default)]
pub struct EventHubConnectionArgs {
    /// Event Hubs connection string [default: EventHubConnection].
    #[arg(long, env = "EventHubConnection", hide_env_values = true)]
    pub connection: Option<String>,
    /// An identity-based connection instead: the namespace, e.g. myns.servicebus.windows.net
    /// (localhost:PORT for a local hub), signed in with Entra ID as the
    /// EventHubConnection__credential / __clientId / __tenantId / __clientSecret settings choose
    /// [default: EventHubConnection__fullyQualifiedNamespace].
    #[arg(
        long,
        env = "EventHubConnection__fullyQualifiedNamespace",
        conflicts_with = "connection"
    )]
    pub fully_qualified_namespace: Option<String>,
}

impl EventHubConnectionArgs {
    /// Whether either way of connecting was given.
    pub fn is_given(&self) -> bool {
        self.connection.is_some() || self.fully_qualified_namespace.is_some()
    }

    /// The event hub `hub` through the connection given, read the way the host reads the
    /// EventHubConnection settings.
    pub fn target(&self, hub: &str) -> Result<hubhost_eventhubs::EventHubTarget, String> {
        let setting = hubhost_eventhubs::EVENTHUB_CONNECTION_SETTING;
        let namespace_setting = format!("{setting}__fullyQualifiedNamespace");
        hubhost_eventhubs::EventHubTarget::from_settings(setting, hub, |name| {
            if name == setting {
                self.connection.clone()
            } else if name == namespace_setting {
                self.fully_qualified_namespace.clone()
            } else {
                std::env::var(name).ok()
            }
        })
        .map_err(|e| e.to_string())
    }
}

pub use hubhost_process::positive_seconds;

/// What the emulated host does with output bindings no local service carries out (cosmosDB,
/// serviceBus, sql, queue, table, …).
#[derive(clap::Args, Clone)]
pub struct OutboxArgs {
    /// Folder where the values of such outputs are kept, one JSON line per value in
    /// {function}/{binding}.jsonl.
    #[arg(long, default_value = "hubhost-data/outbox")]
    pub outbox: std::path::PathBuf,
    /// Refuse an app with such an output instead of keeping its values in the outbox.
    #[arg(long, conflicts_with = "outbox")]
    pub strict_bindings: bool,
}

impl OutboxArgs {
    /// The outbox folder, or `None` under --strict-bindings.
    pub fn folder(&self) -> Option<std::path::PathBuf> {
        (!self.strict_bindings).then(|| self.outbox.clone())
    }
}

/// Ctrl-C or SIGTERM (what the host and `func` send on stop).
pub use hubhost_functions::server::shutdown_signal;

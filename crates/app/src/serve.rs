//! The reference app's custom handler as a command: its flags and settings, read the way the
//! Functions host passes them. Both `hubhost-app` (what a deployment runs) and `hubhost serve`
//! (the same handler from the command line) start here.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::handler::{self, HandlerConfig};

/// Run the custom handler the Functions host calls (what host.json starts).
#[derive(clap::Args)]
pub struct Args {
    /// Port to listen on [default: FUNCTIONS_CUSTOMHANDLER_PORT, else 7072].
    #[arg(long)]
    pub port: Option<u16>,
    /// Address to listen on. The host always calls 127.0.0.1.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Function app folder (script root) [default: FUNCTIONS_APP_ROOT_PATH, else built-in definitions].
    #[arg(long)]
    pub app: Option<PathBuf>,
    /// Storage for the app's data: a connection string, a directory or `memory:`
    /// [default: the setting named by HUBHOST_STORAGE_SETTING (AzureWebJobsStorage), else ./hubhost-data].
    #[arg(long, env = "HUBHOST_STORAGE", hide_env_values = true)]
    pub storage: Option<String>,
    /// Blob container for the app's data.
    #[arg(long, env = "HUBHOST_CONTAINER", default_value = "hubhost")]
    pub container: String,
    /// Aggregation window in seconds.
    #[arg(long, env = "HUBHOST_WINDOW_SECONDS", default_value_t = 60)]
    pub window_seconds: u32,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "HUBHOST_MAX_BODY_BYTES", default_value_t = handler::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Let the page's explorer send events. Without it, sending is allowed only when the page
    /// is served on loopback and not under the Functions host (which would expose it).
    #[arg(long, env = "HUBHOST_ALLOW_SEND")]
    pub allow_send: bool,
}

pub async fn run(args: Args) -> Result<(), String> {
    let Args {
        port,
        bind,
        app,
        storage,
        container,
        window_seconds,
        max_body_bytes,
        allow_send,
    } = args;
    let env = |k: &str| std::env::var(k).ok();
    let port = port
        .or_else(|| env("FUNCTIONS_CUSTOMHANDLER_PORT").and_then(|p| p.parse().ok()))
        .unwrap_or(7072);
    let app_root = app.or_else(|| env("FUNCTIONS_APP_ROOT_PATH").map(PathBuf::from));
    let storage = hubhost_storage::settings::resolve_storage(storage.as_deref(), env)
        .map_err(|e| e.to_string())?;
    let config = HandlerConfig {
        listen: (bind, port).into(),
        app_root,
        storage,
        container,
        window_seconds,
        max_body_bytes,
        dashboard: crate::dashboard::DashboardSources::from_app_settings(env)
            .with_explorer_on_any_host(
                env("HUBHOST_HUB_ADMIN"),
                env("HUBHOST_HUB_ADMIN_TOKEN"),
                allow_send || (bind.is_loopback() && env("FUNCTIONS_CUSTOMHANDLER_PORT").is_none()),
                allow_send,
            ),
    };
    handler::serve(config, |_| {}, hubhost_functions::server::shutdown_signal())
        .await
        .map_err(|e| e.to_string())
}

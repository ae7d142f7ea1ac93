//! `hubhost emulate`: the Functions host's Event Hubs trigger, locally (see `hubhost::emulate`).

use std::net::IpAddr;
use std::path::PathBuf;

use super::{positive_seconds, shutdown_signal};

/// The Functions host's Event Hubs trigger, locally: start the app's custom handler and feed it
/// the trigger's batches; several instances on one event hub and store form a pool.
#[derive(clap::Args)]
pub struct Args {
    /// Function app folder (host.json, */function.json, local.settings.json).
    #[arg(long, default_value = "function_app")]
    pub app: PathBuf,
    /// Checkpoint store: a connection string or a directory
    /// [default: the AzureWebJobsStorage setting, else ./hubhost-data].
    #[arg(long, env = "HUBHOST_STORAGE", hide_env_values = true)]
    pub storage: Option<String>,
    /// Checkpoint a batch only when its invocation succeeded, delivering a failed batch again
    /// (the Functions host checkpoints either way).
    #[arg(long)]
    pub checkpoint_on_success: bool,
    /// This instance's owner id in the checkpoint store [default: WEBSITE_INSTANCE_ID, else
    /// CONTAINER_NAME, else the host name and the lowest slot free on this machine, e.g.
    /// myhost-0]. A restart under the same id reclaims its partitions at once; an id another
    /// process on this machine holds is refused.
    #[arg(long)]
    pub instance_id: Option<String>,
    /// Seconds an ownership of a foreign owner (the Functions host, an SDK processor: one
    /// that writes no hubhost expiry) stays active without renewal [default: 180, the
    /// longest SDK default; never below hubhost's own expiry].
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
    pub foreign_ownership_expiry: Option<std::time::Duration>,
    /// Serve Prometheus metrics on this port at /metrics (0: any free port; the URL is
    /// printed) [default: no endpoint].
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// Address of the metrics endpoint.
    #[arg(long, default_value = "127.0.0.1")]
    pub metrics_bind: IpAddr,
}

pub async fn run(args: Args) -> Result<(), String> {
    let Args {
        app,
        storage,
        checkpoint_on_success,
        instance_id,
        foreign_ownership_expiry,
        metrics_port,
        metrics_bind,
    } = args;
    hubhost::emulate::run(
        hubhost::emulate::EmulateOptions {
            app,
            storage,
            checkpoint_on_success,
            instance_id,
            foreign_ownership_expiry,
            metrics: metrics_port.map(|port| (metrics_bind, port).into()),
        },
        shutdown_signal(),
    )
    .await
    .map_err(|e| e.to_string())
}

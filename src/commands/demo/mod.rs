//! `hubhost demo`: the main job on the embedded default. The flags are here; the pipeline it
//! runs in one process is `pipeline`.

mod pipeline;

use pipeline as demo;
pub use pipeline::TRACE_SPANS_KEPT;

use super::shutdown_signal;

/// The main job: hub, fleet, a pool of instances and the page.
///
/// The main job on the embedded default: the local event hub, the fleet simulator, a pool of
/// instances and the custom handler, in one process, until Ctrl-C.
#[derive(clap::Args)]
pub struct Args {
    /// Homes in the simulated fleet (each reports 8 sensors per simulated minute).
    #[arg(long, default_value_t = 10_000)]
    pub homes: u32,
    /// Simulated minutes per wall-clock minute.
    #[arg(long, default_value_t = 1.0)]
    pub speed_up: f64,
    /// Instances in the pool (each runs one processor per function).
    #[arg(long, default_value_t = 2)]
    pub instances: u32,
    #[arg(long, default_value_t = 16)]
    pub partitions: u32,
    /// Storage for checkpoints, aggregates and the hub's events: a directory or a connection
    /// string (then the hub keeps its events in memory).
    #[arg(
        long,
        env = "HUBHOST_STORAGE",
        hide_env_values = true,
        default_value = "hubhost-data"
    )]
    pub storage: String,
    /// Port of the handler and its web page (0: any free port).
    #[arg(long, default_value_t = 7071)]
    pub port: u16,
    /// Stop sending after this many seconds, let the pool catch up, and stop [default: at Ctrl-C].
    #[arg(long)]
    pub duration: Option<f64>,
}

/// `collector`: where this process's spans go, read back for the page's trace view.
pub async fn run(
    args: Args,
    collector: Option<std::sync::Arc<hubhost_telemetry::collector::Collector>>,
) -> Result<(), String> {
    let Args {
        homes,
        speed_up,
        instances,
        partitions,
        storage,
        port,
        duration,
    } = args;
    let storage = hubhost_storage::StorageLocation::parse(&storage).map_err(|e| e.to_string())?;
    if !(speed_up.is_finite() && speed_up > 0.0) {
        return Err("--speed-up must be a positive number".into());
    }
    if instances == 0 || !(1..=32).contains(&partitions) {
        return Err("--instances must be at least 1 and --partitions 1 to 32".into());
    }
    let duration = duration
        .map(|d| {
            std::time::Duration::try_from_secs_f64(d)
                .map_err(|_| "--duration must be a number of seconds".to_string())
        })
        .transpose()?;
    demo::run(
        demo::DemoOptions {
            homes,
            speed_up,
            instances,
            partitions,
            storage,
            port,
            duration,
            collector,
        },
        shutdown_signal(),
    )
    .await
    .map_err(|e| e.to_string())
}

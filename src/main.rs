//! The `hubhost` command line: one subcommand per job. Each parses its flags, sets up logging and
//! hands over to the library module that does the work.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use hubhost::handler::{self, HandlerConfig};
use hubhost::{bench, demo, settings};

#[derive(Parser)]
#[command(
    name = "hubhost",
    version,
    about = "Azure Event Hubs consumers as an Azure Functions custom handler, with a local emulation mode"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "HUBHOST_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the custom handler the Functions host calls (what host.json starts).
    Serve {
        /// Port to listen on [default: FUNCTIONS_CUSTOMHANDLER_PORT, else 7072].
        #[arg(long)]
        port: Option<u16>,
        /// Address to listen on. The host always calls 127.0.0.1.
        #[arg(long, default_value = "127.0.0.1")]
        bind: IpAddr,
        /// Function app folder (script root) [default: FUNCTIONS_APP_ROOT_PATH, else built-in definitions].
        #[arg(long)]
        app: Option<PathBuf>,
        /// Storage for the app's data: a connection string, a directory or `memory:`
        /// [default: the setting named by HUBHOST_STORAGE_SETTING (AzureWebJobsStorage), else ./hubhost-data].
        #[arg(long, env = "HUBHOST_STORAGE", hide_env_values = true)]
        storage: Option<String>,
        /// Blob container for the app's data.
        #[arg(long, env = "HUBHOST_CONTAINER", default_value = "hubhost")]
        container: String,
        /// Aggregation window in seconds.
        #[arg(long, env = "HUBHOST_WINDOW_SECONDS", default_value_t = 60)]
        window_seconds: u32,
        /// Largest request body accepted, in bytes.
        #[arg(long, env = "HUBHOST_MAX_BODY_BYTES", default_value_t = handler::DEFAULT_MAX_BODY_BYTES)]
        max_body_bytes: usize,
    },
    /// The main job on the embedded default: serve the handler and replay the simulated fleet through it.
    Demo {
        #[arg(long, default_value_t = 2000)]
        homes: u32,
        #[arg(long, default_value_t = 3)]
        minutes: u32,
        #[arg(long, default_value_t = 16)]
        partitions: u32,
        #[arg(long, default_value_t = 100)]
        batch_size: usize,
        /// Storage: a directory or a connection string.
        #[arg(
            long,
            env = "HUBHOST_STORAGE",
            hide_env_values = true,
            default_value = "hubhost-data"
        )]
        storage: String,
        /// Port for the handler (0: any free port).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Keep serving after the replay, until Ctrl-C.
        #[arg(long)]
        keep_serving: bool,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Drive `hubhost serve` over loopback HTTP with Event Hubs batches; baseline: plain JSON parse.
    Handler {
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        batch_sizes: Vec<usize>,
        /// Events per batch size.
        #[arg(long, default_value_t = 320_000)]
        events: usize,
        #[arg(long, default_value_t = 16)]
        partitions: u32,
        #[arg(long, default_value_t = 100_000)]
        homes: u32,
        /// Storage for the handler (default: a fresh temporary directory per run).
        #[arg(long)]
        storage: Option<String>,
    },
}

fn init_logging(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo and benchmarks print their own progress; the handler's per-batch lines would drown it.
    let default_level = match cli.command {
        Command::Serve { .. } => "info",
        _ => "warn",
    };
    init_logging(cli.log_format, default_level);
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result: Result<(), String> = runtime.block_on(async move {
        match cli.command {
            Command::Serve {
                port,
                bind,
                app,
                storage,
                container,
                window_seconds,
                max_body_bytes,
            } => {
                let env = |k: &str| std::env::var(k).ok();
                let port = port
                    .or_else(|| env("FUNCTIONS_CUSTOMHANDLER_PORT").and_then(|p| p.parse().ok()))
                    .unwrap_or(7072);
                let app_root = app.or_else(|| env("FUNCTIONS_APP_ROOT_PATH").map(PathBuf::from));
                let storage = settings::resolve_storage(storage.as_deref(), env)
                    .map_err(|e| e.to_string())?;
                let config = HandlerConfig {
                    listen: (bind, port).into(),
                    app_root,
                    storage,
                    container,
                    window_seconds,
                    max_body_bytes,
                };
                handler::serve(config, |_| {}, shutdown_signal())
                    .await
                    .map_err(|e| e.to_string())
            }
            Command::Demo {
                homes,
                minutes,
                partitions,
                batch_size,
                storage,
                port,
                keep_serving,
            } => {
                let storage = hubhost::storage::StorageLocation::parse(&storage)
                    .map_err(|e| e.to_string())?;
                demo::run(demo::DemoOptions {
                    homes,
                    minutes,
                    partitions,
                    batch_size,
                    storage,
                    keep_serving,
                    port,
                })
                .await
                .map_err(|e| e.to_string())
            }
            Command::Bench {
                which:
                    BenchCommand::Handler {
                        batch_sizes,
                        events,
                        partitions,
                        homes,
                        storage,
                    },
            } => bench::run(bench::BenchOptions {
                batch_sizes,
                events,
                partitions,
                homes,
                storage,
            })
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("hubhost: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Ctrl-C or SIGTERM (what the host and `func` send on stop).
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
}

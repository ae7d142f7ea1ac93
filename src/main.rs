//! The `hubhost` command line: one subcommand per job. Each parses its flags, sets up logging and
//! hands over to the library module that does the work.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use hubhost::handler::{self, HandlerConfig};
use hubhost::{bench, checkpoint, demo, simulate};

/// glibc's allocator spent a fifth of `emulate`'s time in malloc and free (and in consolidating
/// its fragmented free lists) when `bench pool` profiled it: every event is a handful of short-lived
/// buffers across two threads. mimalloc's thread-local pages take that cost down for every command.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// The main job on the embedded default: the local event hub, the fleet simulator, a pool of
    /// instances and the custom handler, in one process, until Ctrl-C.
    Demo {
        /// Homes in the simulated fleet (each reports 8 sensors per simulated minute).
        #[arg(long, default_value_t = 10_000)]
        homes: u32,
        /// Simulated minutes per wall-clock minute.
        #[arg(long, default_value_t = 1.0)]
        speed_up: f64,
        /// Instances in the pool (each runs one processor per function).
        #[arg(long, default_value_t = 2)]
        instances: u32,
        #[arg(long, default_value_t = 16)]
        partitions: u32,
        /// Storage for checkpoints, aggregates and the hub's events: a directory or a connection
        /// string (then the hub keeps its events in memory).
        #[arg(
            long,
            env = "HUBHOST_STORAGE",
            hide_env_values = true,
            default_value = "hubhost-data"
        )]
        storage: String,
        /// Port of the handler and its web page (0: any free port).
        #[arg(long, default_value_t = 7071)]
        port: u16,
        /// Stop sending after this many seconds, let the pool catch up, and stop [default: at Ctrl-C].
        #[arg(long)]
        duration: Option<f64>,
    },
    /// The Functions host's Event Hubs trigger, locally: start the app's custom handler and feed it
    /// the trigger's batches; several instances on one event hub and store form a pool.
    Emulate {
        /// Function app folder (host.json, */function.json, local.settings.json).
        #[arg(long, default_value = "function_app")]
        app: PathBuf,
        /// Checkpoint store: a connection string or a directory
        /// [default: the AzureWebJobsStorage setting, else ./hubhost-data].
        #[arg(long, env = "HUBHOST_STORAGE", hide_env_values = true)]
        storage: Option<String>,
        /// Checkpoint a batch only when its invocation succeeded, delivering a failed batch again
        /// (the Functions host checkpoints either way).
        #[arg(long)]
        checkpoint_on_success: bool,
        /// This instance's owner id in the checkpoint store [default: host-pid-random].
        #[arg(long)]
        instance_id: Option<String>,
        /// Seconds an ownership of a foreign owner (the Functions host, an SDK processor: one
        /// that writes no hubhost expiry) stays active without renewal [default: 180, the
        /// longest SDK default; never below hubhost's own expiry].
        #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
        foreign_ownership_expiry: Option<std::time::Duration>,
        /// Serve Prometheus metrics on this port at /metrics (0: any free port; the URL is
        /// printed) [default: no endpoint].
        #[arg(long)]
        metrics_port: Option<u16>,
        /// Address of the metrics endpoint.
        #[arg(long, default_value = "127.0.0.1")]
        metrics_bind: IpAddr,
    },
    /// Inspect, reset and migrate checkpoints and ownership (the Functions host's blob format).
    Checkpoints {
        #[command(subcommand)]
        action: CheckpointsCommand,
    },
    /// A local Event Hubs namespace the official SDKs connect to (AMQP on 127.0.0.1:5672).
    Hub {
        /// Port to listen on (5672, as the official emulator; 0: any free port).
        #[arg(long, default_value_t = 5672)]
        port: u16,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        bind: IpAddr,
        /// A hub as `name:partitions[:group1,group2]` ($Default is always there); repeatable
        /// [default: sensors:16:archive and alarms:4].
        #[arg(long = "hub")]
        hubs: Vec<String>,
        /// Hubs from a JSON file: hubhost's ({"hubs": [...]}) or the official emulator's Config.json.
        #[arg(long, conflicts_with = "hubs")]
        config: Option<PathBuf>,
        /// Where partitions' segment files live.
        #[arg(long, default_value = "hubhost-data/hub")]
        data_dir: PathBuf,
        /// Keep events in memory only (lost on exit).
        #[arg(long)]
        in_memory: bool,
        /// Hours an event is kept at least (whole segments are deleted after it).
        #[arg(long, default_value_t = 24.0)]
        retention_hours: f64,
        /// Flush every acknowledged send to disk (survives power loss, not only kill -9).
        #[arg(long)]
        fsync: bool,
        /// Shared access key as `name=key`, replacing the emulator's well-known
        /// RootManageSharedAccessKey=SAS_KEY_VALUE; repeatable.
        #[arg(long = "key", env = "HUBHOST_HUB_KEY", hide_env_values = true)]
        keys: Vec<String>,
    },
    /// The home-security fleet as an Event Hubs producer (partition key = home id).
    Simulate {
        /// Event Hubs connection string [default: EventHubConnection, else the local emulator's].
        #[arg(long, env = "EventHubConnection", hide_env_values = true)]
        connection: Option<String>,
        /// Event hub name [default: EventHubName, else the connection string's EntityPath, else sensors].
        #[arg(long, env = "EventHubName")]
        hub: Option<String>,
        #[arg(long, default_value_t = 100_000)]
        homes: u32,
        /// Simulated minutes per wall-clock minute (1 = real time: homes × 8 sensors per minute).
        #[arg(long, default_value_t = 1.0, conflicts_with_all = ["rate", "unthrottled"])]
        speed_up: f64,
        /// Events per second to send (sets the speed-up for the fleet's size).
        #[arg(long, conflicts_with = "unthrottled")]
        rate: Option<f64>,
        /// Send as fast as the event hub accepts.
        #[arg(long)]
        unthrottled: bool,
        /// Stop after this many events.
        #[arg(long)]
        events: Option<u64>,
        /// Stop after this many simulated minutes.
        #[arg(long)]
        minutes: Option<u32>,
        /// Stop after this many wall-clock seconds.
        #[arg(long)]
        duration: Option<f64>,
        /// First simulated minute (RFC 3339) [default: the current minute].
        #[arg(long)]
        start: Option<String>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print the summary as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
    /// The trivial function `bench handler` compares the reference app with (the framework's
    /// own cost).
    #[command(hide = true)]
    BenchTrivialHandler {
        #[arg(long)]
        port: u16,
    },
    /// A new Rust function app with one Event Hubs function, on hubhost-functions (as `func init`
    /// and `func new` for other languages): the Cargo project, its function_app/, a README, and
    /// a test that runs it under `hubhost emulate` on `hubhost hub`.
    New {
        /// The folder to create (its name is the package's).
        dir: PathBuf,
        /// The function's name (its folder in function_app/ and its Rust type).
        #[arg(long, default_value = "ProcessEvents")]
        function: String,
        /// The event hub the trigger reads.
        #[arg(long = "event-hub", default_value = "sensors")]
        event_hub: String,
        #[arg(long, default_value = "$Default")]
        consumer_group: String,
        /// The trigger's cardinality: a batch (`many`) or one event per invocation.
        #[arg(long, value_enum, default_value = "many")]
        cardinality: hubhost::scaffold::Cardinality,
        /// The trigger's dataType: how the host encodes event bodies.
        #[arg(long, value_enum, default_value = "string")]
        data_type: hubhost::scaffold::DataType,
        /// Where hubhost-functions comes from: a folder (e.g. a checkout's crates/functions) or a
        /// version [default: this build's checkout, if present, else its version].
        #[arg(long)]
        framework: Option<String>,
    },
}

/// Where `checkpoints reset` moves partitions.
#[derive(Clone, Copy)]
enum ResetTo {
    Start,
    End,
    Time(chrono::DateTime<chrono::Utc>),
}

/// Which checkpoint store and consumer group a `checkpoints` command works on.
#[derive(clap::Args)]
struct ScopeArgs {
    /// Storage: a connection string or a directory
    /// [default: HUBHOST_STORAGE, else the AzureWebJobsStorage setting, else ./hubhost-data].
    #[arg(long, env = "HUBHOST_STORAGE", hide_env_values = true)]
    storage: Option<String>,
    /// Blob container of the checkpoint store.
    #[arg(long, default_value = hubhost::checkpoint::DEFAULT_CONTAINER)]
    container: String,
    /// Fully qualified Event Hubs namespace, e.g. myns.servicebus.windows.net
    /// [default: the Endpoint of the EventHubConnection setting].
    #[arg(long)]
    namespace: Option<String>,
    /// Event hub name.
    #[arg(long, env = "EventHubName")]
    hub: String,
    #[arg(long, default_value = "$Default")]
    consumer_group: String,
    /// Machine-readable output (JSON on stdout).
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum CheckpointsCommand {
    /// Every partition's owner and checkpoint (current format, else legacy).
    List {
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Move partitions' checkpoints: `--to start` (the oldest retained event), `--to end` (only
    /// events sent from now on), or `--to <RFC 3339 time>` (events enqueued from then on).
    Reset {
        #[command(flatten)]
        scope: ScopeArgs,
        /// `start`, `end`, or an RFC 3339 enqueued time.
        #[arg(long)]
        to: String,
        /// Event Hubs connection string, for `end` and a time (the event hub is asked where each
        /// partition ends) [default: EventHubConnection].
        #[arg(long, env = "EventHubConnection", hide_env_values = true)]
        connection: Option<String>,
        /// Partitions to reset (comma-separated) [default: every partition the store knows].
        #[arg(long, value_delimiter = ',')]
        partitions: Vec<String>,
        /// Reset partitions 0..N-1 (for a hub whose partitions the store does not know yet).
        #[arg(long, conflicts_with = "partitions")]
        partition_count: Option<u32>,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Write current-format checkpoints from legacy (extension v3/v4) ones; legacy blobs stay.
    Migrate {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Show what would be written without writing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Claim one partition (for tests and repairs): prints whether the claim won.
    #[command(hide = true)]
    Claim {
        #[command(flatten)]
        scope: ScopeArgs,
        #[arg(long)]
        partition: String,
        #[arg(long)]
        owner: String,
        /// The ETag the claim presents; none claims a partition without an ownership blob.
        #[arg(long)]
        etag: Option<String>,
        /// Wait until this Unix time (milliseconds) before claiming, to line up racing claims.
        #[arg(long)]
        at_unix_ms: Option<i64>,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// A pool of `hubhost emulate` processes on real hubs: crash takeover, graceful handoff,
    /// scale-out balance, steady ownership, end-to-end throughput with 1 and 4 instances, and
    /// checkpoint store operations per instance; baseline: the bare SDK consumer.
    Pool {
        /// Events prefilled for the throughput phase.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Homes of the simulated fleet (100,000: the reference scenario).
        #[arg(long, default_value_t = 100_000)]
        homes: u32,
        /// Events per second the simulator sends during the membership scenarios.
        #[arg(long, default_value_t = 2_000)]
        rate: u32,
        /// Seconds of steady membership (ownership changes, storage operations).
        #[arg(long, default_value_t = 600)]
        steady_seconds: u64,
        #[arg(long, default_value_t = 16)]
        partitions: u32,
        /// host.json maxEventBatchSize of the instances (the function app's value).
        #[arg(long, default_value_t = 100)]
        max_batch: u32,
        /// host.json prefetchCount of the instances (the function app's value).
        #[arg(long, default_value_t = 300)]
        prefetch: u32,
        /// Print the figures as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Ingest and read through `hubhost hub` with the Rust and Python SDKs; baseline: raw
    /// segment-file appends.
    Hub {
        /// Events per phase.
        #[arg(long, default_value_t = 800_000)]
        events: u64,
        /// Events the Python producer sends.
        #[arg(long, default_value_t = 100_000)]
        python_events: u64,
        #[arg(long, default_value_t = 500)]
        batch_size: usize,
        #[arg(long, default_value_t = 16)]
        partitions: u32,
        /// Python with azure-eventhub [default: .tools/venv/bin/python when present].
        #[arg(long, env = "HUBHOST_PYTHON")]
        python: Option<PathBuf>,
    },
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
        /// Runs of each handler (the reference app and a trivial function) per batch size.
        #[arg(long, default_value_t = 3)]
        repetitions: usize,
        /// Storage for the handler (default: a fresh temporary directory per run).
        #[arg(long)]
        storage: Option<String>,
    },
    /// Claims/s and checkpoint updates/s per storage backend, and storage operations per minute;
    /// baseline: plain blob writes on the same backend.
    Checkpoints {
        /// Storages to measure (repeat): directories, connection strings (e.g. Azurite's), `memory:`
        /// [default: a fresh temporary directory].
        #[arg(long)]
        storage: Vec<String>,
        /// Duration of each timed phase.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        #[arg(long, default_value_t = 16)]
        partitions: u32,
    },
}

/// A flag given in seconds (fractions allowed), more than zero.
fn positive_seconds(text: &str) -> Result<std::time::Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0)
        .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
        .ok_or(format!("{text:?} is not a positive number of seconds"))
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
        Command::Serve { .. } | Command::Hub { .. } => "info",
        Command::Emulate { .. } => {
            "info,azure_messaging_eventhubs=warn,azure_core_amqp=error,fe2o3_amqp=error"
        }
        // The SDK warns about connection recovery it then completes; failed sends are reported.
        Command::Simulate { .. } | Command::Bench { .. } | Command::Demo { .. } => {
            "warn,azure_messaging_eventhubs=error,azure_core_amqp=error"
        }
        _ => "warn",
    };
    init_logging(cli.log_format, default_level);
    // `simulate` sends through the SDK, whose sends can hang on a multi-threaded runtime
    // (see `eventhubs::on_sending_thread`); one thread is also all it needs.
    let runtime = match cli.command {
        Command::Simulate { .. } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Runtime::new(),
    }
    .expect("tokio runtime");
    let result: Result<(), String> = runtime.block_on(async move {
        match cli.command {
            Command::BenchTrivialHandler { port } => bench::handler::serve_trivial(port)
                .await
                .map_err(|e| e.to_string()),
            Command::New {
                dir,
                function,
                event_hub,
                consumer_group,
                cardinality,
                data_type,
                framework,
            } => {
                let mut scaffold = hubhost::scaffold::Scaffold::for_dir(&dir);
                scaffold.function = function;
                scaffold.event_hub = event_hub;
                scaffold.consumer_group = consumer_group;
                scaffold.cardinality = cardinality;
                scaffold.data_type = data_type;
                if let Some(f) = framework {
                    scaffold.framework = hubhost::scaffold::Framework::parse(&f);
                }
                let files = scaffold.write(&dir).map_err(|e| e.to_string())?;
                println!("created {} ({} files):", dir.display(), files.len());
                for f in files {
                    println!("  {}", f.display());
                }
                println!(
                    "next: cd {} && cargo build && hubhost emulate --app function_app   (with `hubhost hub` running)",
                    dir.display()
                );
                Ok(())
            }
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
                let storage = hubhost::storage::settings::resolve_storage(storage.as_deref(), env)
                    .map_err(|e| e.to_string())?;
                let config = HandlerConfig {
                    listen: (bind, port).into(),
                    app_root,
                    storage,
                    container,
                    window_seconds,
                    max_body_bytes,
                    dashboard: hubhost::dashboard::DashboardSources::from_app_settings(env),
                };
                handler::serve(config, |_| {}, shutdown_signal())
                    .await
                    .map_err(|e| e.to_string())
            }
            Command::Demo {
                homes,
                speed_up,
                instances,
                partitions,
                storage,
                port,
                duration,
            } => {
                let storage = hubhost::storage::StorageLocation::parse(&storage)
                    .map_err(|e| e.to_string())?;
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
                    },
                    shutdown_signal(),
                )
                .await
                .map_err(|e| e.to_string())
            }
            Command::Emulate {
                app,
                storage,
                checkpoint_on_success,
                instance_id,
                foreign_ownership_expiry,
                metrics_port,
                metrics_bind,
            } => hubhost::emulate::run(
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
            .map_err(|e| e.to_string()),
            Command::Checkpoints { action } => checkpoints_command(action).await,
            Command::Hub {
                port,
                bind,
                hubs,
                config,
                data_dir,
                in_memory,
                retention_hours,
                fsync,
                keys,
            } => {
                let specs = match (&config, hubs.is_empty()) {
                    (Some(path), _) => {
                        hubhost::hub::config::hubs_from_file(path).map_err(|e| e.to_string())?
                    }
                    (None, true) => hubhost::hub::HubSpec::reference(),
                    (None, false) => hubs
                        .iter()
                        .map(|h| hubhost::hub::HubSpec::parse_flag(h))
                        .collect::<Result<_, _>>()
                        .map_err(|e| e.to_string())?,
                };
                let data_dir = (!in_memory).then_some(data_dir);
                let mut config = hubhost::hub::HubConfig::new((bind, port).into(), specs, data_dir);
                if retention_hours.is_nan() || retention_hours <= 0.0 {
                    return Err("--retention-hours must be positive".into());
                }
                config.retention = std::time::Duration::from_secs_f64(retention_hours * 3600.0);
                config.fsync = fsync;
                if !keys.is_empty() {
                    config.keys = keys
                        .iter()
                        .map(|k| {
                            k.split_once('=')
                                .filter(|(n, v)| !n.is_empty() && !v.is_empty())
                                .map(|(n, v)| hubhost::hub::sas::SharedAccessKey {
                                    name: n.into(),
                                    key: v.into(),
                                })
                                .ok_or_else(|| "--key takes name=key".to_string())
                        })
                        .collect::<Result<_, _>>()?;
                }
                hubhost::hub::run(config).await.map_err(|e| e.to_string())
            }
            Command::Simulate {
                connection,
                hub,
                homes,
                speed_up,
                rate,
                unthrottled,
                events,
                minutes,
                duration,
                start,
                seed,
                json,
            } => {
                let connection =
                    connection.unwrap_or_else(|| hubhost::eventhubs::EMULATOR_CONNECTION.into());
                let hub = hub.or_else(|| {
                    (!connection.to_ascii_lowercase().contains("entitypath="))
                        .then(|| "sensors".to_string())
                });
                let target = hubhost::eventhubs::EventHubTarget::parse(&connection, hub.as_deref())
                    .map_err(|e| e.to_string())?;
                let pace = match (unthrottled, rate) {
                    (true, _) => simulate::Pace::Unthrottled,
                    (false, Some(rate)) => simulate::Pace::SpeedUp(
                        rate * 60.0
                            / (f64::from(homes.max(1)) * hubhost::fleet::SENSORS.len() as f64),
                    ),
                    (false, None) => simulate::Pace::SpeedUp(speed_up),
                };
                let start = match start {
                    Some(text) => chrono::DateTime::parse_from_rfc3339(&text)
                        .map_err(|e| format!("--start {text:?} is not an RFC 3339 time: {e}"))?
                        .with_timezone(&chrono::Utc),
                    None => {
                        let now = chrono::Utc::now();
                        now - chrono::Duration::seconds(now.timestamp().rem_euclid(60))
                            - chrono::Duration::nanoseconds(i64::from(now.timestamp_subsec_nanos()))
                    }
                };
                let duration = match duration {
                    Some(d) if !(d.is_finite() && d > 0.0) => {
                        return Err("--duration must be a positive number of seconds".into());
                    }
                    d => d.map(std::time::Duration::from_secs_f64),
                };
                let options = simulate::SimulateOptions {
                    homes,
                    seed,
                    start,
                    pace,
                    stop: simulate::StopAfter {
                        events,
                        minutes,
                        duration,
                    },
                    progress: true,
                };
                let summary = simulate::run(&target, options, shutdown_signal())
                    .await
                    .map_err(|e| e.to_string())?;
                if json {
                    println!(
                        "{}",
                        serde_json::to_string(&summary).expect("summary is JSON")
                    );
                } else {
                    summary.print();
                }
                Ok(())
            }
            Command::Bench {
                which:
                    BenchCommand::Checkpoints {
                        storage,
                        seconds,
                        partitions,
                    },
            } => {
                in_bench_dir(|temp| {
                    let storages = if storage.is_empty() {
                        vec![temp.to_string_lossy().into_owned()]
                    } else {
                        storage
                    };
                    bench::checkpoints::run(bench::checkpoints::CheckpointBenchOptions {
                        storages,
                        seconds,
                        partitions,
                    })
                })
                .await
            }
            Command::Bench {
                which:
                    BenchCommand::Hub {
                        events,
                        python_events,
                        batch_size,
                        partitions,
                        python,
                    },
            } => {
                if partitions == 0 || batch_size == 0 {
                    return Err("--partitions and --batch-size must be at least 1".into());
                }
                let python = python.or_else(|| {
                    let venv = PathBuf::from(".tools/venv/bin/python");
                    venv.exists().then_some(venv)
                });
                in_bench_dir(|work_dir| {
                    bench::hub::run(bench::hub::HubBenchOptions {
                        events,
                        python_events,
                        batch_size,
                        partitions,
                        python,
                        work_dir,
                    })
                })
                .await
            }
            Command::Bench {
                which:
                    BenchCommand::Pool {
                        events,
                        homes,
                        rate,
                        steady_seconds,
                        partitions,
                        max_batch,
                        prefetch,
                        json,
                    },
            } => {
                if partitions == 0 || max_batch == 0 || events < u64::from(partitions) {
                    return Err(
                        "--partitions and --max-batch must be at least 1, --events at least --partitions"
                            .into(),
                    );
                }
                in_bench_dir(|work_dir| {
                    bench::pool::run(bench::pool::PoolBenchOptions {
                        partitions,
                        events,
                        homes,
                        rate,
                        steady: std::time::Duration::from_secs(steady_seconds),
                        max_batch,
                        prefetch,
                        json,
                        work_dir,
                    })
                })
                .await
            }
            Command::Bench {
                which:
                    BenchCommand::Handler {
                        batch_sizes,
                        events,
                        partitions,
                        homes,
                        repetitions,
                        storage,
                    },
            } => bench::run(bench::BenchOptions {
                batch_sizes,
                events,
                partitions,
                homes,
                repetitions,
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

fn open_scope(
    scope: &ScopeArgs,
) -> Result<(checkpoint::CheckpointStore, checkpoint::ConsumerGroupKey), String> {
    let env = |k: &str| std::env::var(k).ok();
    let location = hubhost::storage::settings::resolve_storage(scope.storage.as_deref(), env)
        .map_err(|e| e.to_string())?;
    let blobs = location.open().map_err(|e| e.to_string())?;
    let namespace = match &scope.namespace {
        Some(ns) => ns.clone(),
        None => hubhost::eventhubs::eventhub_namespace(env).ok_or(
            "name the Event Hubs namespace with --namespace (e.g. myns.servicebus.windows.net), \
             or set EventHubConnection to the hub's connection string",
        )?,
    };
    let key = checkpoint::ConsumerGroupKey::new(namespace, &scope.hub, &scope.consumer_group)
        .map_err(|e| e.to_string())?;
    Ok((
        checkpoint::CheckpointStore::new(blobs, &scope.container),
        key,
    ))
}

fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serializable")
    );
}

async fn checkpoints_command(action: CheckpointsCommand) -> Result<(), String> {
    use checkpoint::admin;
    let fmt_err = |e: checkpoint::CheckpointError| e.to_string();
    match action {
        CheckpointsCommand::List { scope } => {
            let (store, key) = open_scope(&scope)?;
            let rows = admin::status(&store, &key).await.map_err(fmt_err)?;
            if scope.json {
                print_json(&rows);
            } else {
                println!("{key} in {}", store.describe());
                if rows.is_empty() {
                    println!("no ownership or checkpoint yet");
                }
                let dash = || "-".to_string();
                for r in &rows {
                    println!(
                        "partition {:>3}  owner {:<38} offset {:>14}  seq {:>10}  at {:<20} {}{}",
                        r.partition_id,
                        r.owner_id.clone().unwrap_or_else(dash),
                        r.offset.clone().unwrap_or_else(dash),
                        r.sequence_number
                            .map(|s| s.to_string())
                            .unwrap_or_else(dash),
                        r.last_modified
                            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                            .unwrap_or_else(dash),
                        r.source.unwrap_or("no checkpoint"),
                        r.problem
                            .as_ref()
                            .map(|p| format!("\n    problem: {p}"))
                            .unwrap_or_default(),
                    );
                }
            }
            Ok(())
        }
        CheckpointsCommand::Reset {
            scope,
            to,
            connection,
            partitions,
            partition_count,
            yes,
        } => {
            let target_position = match to.as_str() {
                "start" => ResetTo::Start,
                "end" => ResetTo::End,
                time => ResetTo::Time(
                    chrono::DateTime::parse_from_rfc3339(time)
                        .map_err(|e| {
                            format!("--to {time:?}: expected start, end or an RFC 3339 time ({e})")
                        })?
                        .with_timezone(&chrono::Utc),
                ),
            };
            // The end of each partition, for `end` and a time, from the event hub itself.
            let ends = match target_position {
                ResetTo::Start => None,
                _ => {
                    let connection = connection.as_deref().ok_or(
                        "--to end or a time asks the event hub where its partitions end: give \
                         --connection or set EventHubConnection",
                    )?;
                    let target =
                        hubhost::eventhubs::EventHubTarget::parse(connection, Some(&scope.hub))
                            .map_err(|e| e.to_string())?;
                    let ends = target.partition_ends().await.map_err(|e| e.to_string())?;
                    Some((target, ends))
                }
            };
            let (store, key) = open_scope(&scope)?;
            let selection = if !partitions.is_empty() {
                admin::PartitionSelection::Named(partitions)
            } else if let Some(n) = partition_count {
                admin::PartitionSelection::Count(n)
            } else if let Some((_, ends)) = &ends {
                admin::PartitionSelection::Named(
                    ends.iter().map(|e| e.partition_id.clone()).collect(),
                )
            } else {
                admin::PartitionSelection::Known
            };
            let ids = admin::select_partitions(&store, &key, selection)
                .await
                .map_err(fmt_err)?;
            if ids.is_empty() {
                return Err(
                    "the store knows no partition of this consumer group: name them with \
                     --partitions or --partition-count"
                        .into(),
                );
            }
            let ownerships = store.list_ownership(&key).await.map_err(fmt_err)?;
            let active = admin::active_owners(
                &ownerships,
                &ids,
                chrono::Utc::now(),
                hubhost::processor::balancer::FOREIGN_OWNERSHIP_EXPIRY,
            );
            if !active.is_empty() {
                eprintln!(
                    "warning: {} of these partitions are owned by a running consumer; stop it \
                     first, or its next checkpoint will overwrite the reset",
                    active.len()
                );
            }
            let described = match target_position {
                ResetTo::Start => "the start of the event hub".to_string(),
                ResetTo::End => "the end of the event hub (only new events)".to_string(),
                ResetTo::Time(t) => format!("the first event enqueued at or after {t}"),
            };
            if !yes {
                confirm(&format!(
                    "Reset partitions {} of {key} to {described}?",
                    ids.join(",")
                ))?;
            }
            let written = match ends {
                None => admin::reset_to_start(&store, &key, &ids)
                    .await
                    .map_err(fmt_err)?,
                Some((target, ends)) => {
                    let mut checkpoints = Vec::new();
                    for id in &ids {
                        let end = ends.iter().find(|e| &e.partition_id == id).ok_or_else(|| {
                            format!("the event hub {} has no partition {id}", target.hub)
                        })?;
                        checkpoints.push(match target_position {
                            ResetTo::Time(t) => target
                                .checkpoint_before(&key.consumer_group, end, t)
                                .await
                                .map_err(|e| e.to_string())?,
                            _ if end.is_empty => hubhost::checkpoint::Checkpoint::at_start(id),
                            _ => hubhost::checkpoint::Checkpoint::new(
                                id.clone(),
                                Some(end.last_offset.clone()),
                                end.last_sequence_number,
                            ),
                        });
                    }
                    admin::write_checkpoints(&store, &key, &checkpoints)
                        .await
                        .map_err(fmt_err)?;
                    checkpoints
                }
            };
            if scope.json {
                print_json(
                    &written
                        .iter()
                        .map(|c| {
                            serde_json::json!({"partitionId": c.partition_id, "offset": c.offset, "sequenceNumber": c.sequence_number})
                        })
                        .collect::<Vec<_>>(),
                );
            } else {
                println!("reset {} partitions of {key} to {described}", written.len());
            }
            Ok(())
        }
        CheckpointsCommand::Migrate { scope, dry_run } => {
            let (store, key) = open_scope(&scope)?;
            store.ensure_container().await.map_err(fmt_err)?;
            let report = admin::migrate(&store, &key, dry_run)
                .await
                .map_err(fmt_err)?;
            if scope.json {
                print_json(&report);
            } else {
                for s in &report.steps {
                    println!(
                        "partition {:>3}  offset {:>14}  seq {:>10}  {}",
                        s.partition_id,
                        s.offset,
                        s.sequence_number,
                        if dry_run && s.action == "migrated" {
                            "would migrate"
                        } else {
                            s.action
                        }
                    );
                }
                for p in &report.problems {
                    println!("problem: {p}");
                }
                let migrated = report
                    .steps
                    .iter()
                    .filter(|s| s.action == "migrated")
                    .count();
                println!(
                    "{migrated} legacy checkpoints {}, {} kept (a current checkpoint exists), {} unreadable",
                    if dry_run { "to migrate" } else { "migrated" },
                    report.steps.len() - migrated,
                    report.problems.len()
                );
            }
            Ok(())
        }
        CheckpointsCommand::Claim {
            scope,
            partition,
            owner,
            etag,
            at_unix_ms,
        } => {
            let (store, key) = open_scope(&scope)?;
            store.ensure_container().await.map_err(fmt_err)?;
            if let Some(at) = at_unix_ms {
                let wait = at - chrono::Utc::now().timestamp_millis();
                if wait > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(wait as u64)).await;
                }
            }
            let claim = checkpoint::OwnershipClaim {
                partition_id: partition,
                owner_id: owner,
                etag: etag.map(hubhost::storage::ETag::new),
                vouched_expiry: None,
            };
            let won = store
                .claim_ownership(&key, std::slice::from_ref(&claim))
                .await
                .map_err(fmt_err)?;
            print_json(&serde_json::json!({
                "won": !won.is_empty(),
                "etag": won.first().map(|o| o.etag.to_string()),
            }));
            Ok(())
        }
    }
}

/// A fresh directory under the system's temporary directory.
/// Runs a benchmark in a fresh temporary directory of its own, removed afterwards whatever the
/// outcome; the benchmark prints its own figures.
async fn in_bench_dir<T, E, F>(run: impl FnOnce(PathBuf) -> F) -> Result<(), String>
where
    E: std::fmt::Display,
    F: std::future::Future<Output = Result<T, E>>,
{
    let dir = std::env::temp_dir().join(format!(
        "hubhost-bench-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_millis()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = run(dir.clone()).await;
    let _ = std::fs::remove_dir_all(&dir);
    result.map(|_| ()).map_err(|e| e.to_string())
}

/// Asks on the terminal; refuses when nobody can answer (stdin is not a terminal).
fn confirm(question: &str) -> Result<(), String> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return Err(format!(
            "{question} Refusing without confirmation: pass --yes"
        ));
    }
    print!("{question} [y/N] ");
    std::io::stdout().flush().ok();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| e.to_string())?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err("not confirmed; nothing changed".into())
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

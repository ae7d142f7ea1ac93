//! The benchmarks' flags (`hubhost-bench …`, also reached as `hubhost bench …`); the work is
//! the library's.

use std::path::PathBuf;

use clap::Subcommand;
use hubhost_bench as bench;
use hubhost_process::positive_seconds;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// A pool of `hubhost emulate` processes on real hubs: crash takeover, restart reclaim,
    /// graceful handoff, scale-out balance, steady ownership, end-to-end throughput with 1, 4
    /// and 16 instances, the backlog drained by `emulate --scale`, and checkpoint store
    /// operations per instance; baseline: the bare SDK consumer.
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
        /// Seconds between the scale controller's decisions in the drain phase.
        #[arg(long, default_value = "5", value_parser = positive_seconds)]
        scale_interval: std::time::Duration,
        /// Pool sizes of the throughput phase, one after the other.
        #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
        pools: Vec<usize>,
        /// Repetitions of the throughput phase (baseline and every pool each time); the
        /// table shows the median and range.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// Run only the throughput phase (no drain by the scale controller, no membership).
        #[arg(long)]
        throughput_only: bool,
        /// Also run each pool of the throughput phase with tracing on: the readings stamped
        /// as a traced producer stamps them, the instances and their handlers exporting spans
        /// and metrics to a collector in this process (the runs without tracing read the
        /// same stamped readings).
        #[arg(long)]
        tracing: bool,
        /// Print the figures as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// A handler executable's cold start as the platform starts one: size, exec → `GET /`
    /// answered, idle resident memory; every executable given is started alternately.
    Startup {
        /// `LABEL=PATH [ARGS]`, once per executable [default: the reference app's deployed
        /// handler `hubhost-app`, against `hubhost serve`, both beside this program].
        #[arg(long = "executable")]
        executables: Vec<String>,
        /// Starts of each executable (after one uncounted start each).
        #[arg(long, default_value_t = 20)]
        starts: usize,
        /// Print the figures as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// A pool of `hubhost emulate` instances running the reference app on a persistent
    /// `hubhost hub` while seeded random faults hit it (instances and handlers killed,
    /// instances frozen past their expiry, the hub killed, the store taken away, graceful
    /// restarts); checked from outside: every reading counted once, every event archived, only
    /// poison dead-lettered, no checkpoint moved back, no partition left without an owner for
    /// longer than expiry + one cycle. Fails if anything was found.
    Chaos {
        /// Faults per store.
        #[arg(long, default_value_t = 100)]
        faults: usize,
        /// Seed of the fault schedule (the same seed, the same faults).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Stores to run on, in turn: `directory`, `azurite`.
        #[arg(long, value_delimiter = ',', default_value = "directory,azurite")]
        stores: Vec<String>,
        /// Instances in the pool.
        #[arg(long, default_value_t = 3)]
        instances: usize,
        /// Events per second the producer sends.
        #[arg(long, default_value_t = 400)]
        rate: u32,
        /// Shortest and longest storage outage, in seconds.
        #[arg(long, value_delimiter = ',', default_value = "10,60")]
        outage: Vec<f64>,
        /// Fault kinds to draw from [default: all]: kill-instance, kill-handler, freeze,
        /// kill-hub, storage-outage, graceful-restart.
        #[arg(long, value_delimiter = ',')]
        kinds: Vec<String>,
        /// Azurite's azurite-blob [default: .tools/node_modules/.bin/azurite-blob when present].
        #[arg(long, env = "HUBHOST_AZURITE_BIN")]
        azurite: Option<PathBuf>,
        /// Keep the run's files (logs of every instance) in this directory instead of a
        /// temporary one.
        #[arg(long)]
        work_dir: Option<PathBuf>,
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
    /// The hub's Kafka endpoint against its AMQP path on the same hub and data: produce and
    /// fetch throughput, median and range over repetitions; baseline: the Rust SDK over AMQP.
    Kafka {
        /// Events each producer phase sends.
        #[arg(long, default_value_t = 400_000)]
        events: u64,
        #[arg(long, default_value_t = 500)]
        batch_size: usize,
        #[arg(long, default_value_t = 16)]
        partitions: u32,
        #[arg(long, default_value_t = 5)]
        repetitions: usize,
        /// Print the figures as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// The blob storage requests of the reference app at the reference load in real time, by
    /// who makes them and kind of blob, per 1,000,000 events and per month, priced at Azure's
    /// list prices per transaction class; for the host's load-balancing timings, hubhost's
    /// defaults and `emulate --scale`, with one page open on the fleet view.
    Cost {
        #[command(flatten)]
        workload: WorkloadArgs,
        /// Configurations, in turn: `host` (30 s / 2 min), `hubhost`, `scale`.
        #[arg(long, value_delimiter = ',', default_value = "host,hubhost,scale")]
        configs: Vec<String>,
        /// Instances of the fixed pools (`host`, `hubhost`).
        #[arg(long, default_value_t = 4)]
        instances: usize,
        /// Seconds measured per configuration.
        #[arg(long, default_value = "120", value_parser = positive_seconds)]
        duration: std::time::Duration,
        /// Seconds before measuring: the first minute over (every home is new then, and the home
        /// directory is written).
        #[arg(long, default_value = "90", value_parser = positive_seconds)]
        warmup: std::time::Duration,
        /// Seconds between the scale controller's decisions (`scale`).
        #[arg(long, default_value = "10", value_parser = positive_seconds)]
        scale_interval: std::time::Duration,
        /// US dollars per 10,000 write requests (Put Blob; hot tier, LRS).
        #[arg(long, default_value_t = 0.065)]
        price_write: f64,
        /// US dollars per 10,000 list requests (List Blobs, Create Container).
        #[arg(long, default_value_t = 0.065)]
        price_list: f64,
        /// US dollars per 10,000 read requests (Get Blob).
        #[arg(long, default_value_t = 0.005)]
        price_read: f64,
        /// US dollars per 10,000 other requests (Set Blob Metadata, Get Blob Properties).
        #[arg(long, default_value_t = 0.005)]
        price_other: f64,
        /// Print the figures as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// The reference load in real time (`--homes` homes at 1× speed) through a pool of
    /// `hubhost emulate` instances: each reading's age when applied to its window block, each
    /// alarm's age (intrusions aside) when the fleet view first lists it; p50, p99, p99.9, max and the
    /// p99 per interval; baseline: the bare SDK consumer's enqueued → received.
    Latency {
        #[command(flatten)]
        workload: WorkloadArgs,
        /// Pool sizes to run, one after the other.
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        instances: Vec<usize>,
        /// Seconds measured per pool.
        #[arg(long, default_value = "300", value_parser = positive_seconds)]
        duration: std::time::Duration,
        /// Seconds before measuring: partitions claimed, and the first minute over (every home is
        /// new then, and the home directory is written).
        #[arg(long, default_value = "90", value_parser = positive_seconds)]
        warmup: std::time::Duration,
        /// Seconds per repetition (p99 per interval).
        #[arg(long, default_value = "60", value_parser = positive_seconds)]
        interval: std::time::Duration,
        /// Print the figures as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// The reference load for a long time through a pool of `hubhost emulate` instances, with
    /// the page polled: per window, the applied and page p99, events sent and applied per
    /// second, each process's memory and open files, the hub's and the store's disk; then
    /// whether anything grew (memory, files, disk beyond retention, p99 beyond 2× the first
    /// window's).
    Soak {
        #[command(flatten)]
        workload: WorkloadArgs,
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=32))]
        instances: u64,
        /// Seconds measured, after the warm-up.
        #[arg(long, default_value = "3600", value_parser = positive_seconds)]
        duration: std::time::Duration,
        /// Seconds per window.
        #[arg(long, default_value = "600", value_parser = positive_seconds)]
        window: std::time::Duration,
        /// Seconds before measuring (partitions claimed, every home seen once).
        #[arg(long, default_value = "90", value_parser = positive_seconds)]
        warmup: std::time::Duration,
        /// The hub's retention in seconds: short, so that it deletes segments during the run.
        #[arg(long, default_value = "600", value_parser = positive_seconds)]
        retention: std::time::Duration,
        /// The hub's segment size in MiB.
        #[arg(long, default_value_t = 16)]
        segment_mb: u64,
        /// Print the figures as JSON on stdout.
        #[arg(long)]
        json: bool,
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
        /// The reference app's handler as an executable of its own, such as the `hubhost-app`
        /// that `hubhost package` built [default: `hubhost serve`].
        #[arg(long)]
        reference_handler: Option<std::path::PathBuf>,
    },
    /// How fast a rehearsal runs: examples/forward-events' forward-once simulated in-process,
    /// simulated with its handler as a process, and rehearsed with real processes (the
    /// baseline), the same plans each; seeds a minute and virtual seconds per wall second.
    Rehearse {
        /// Seeds of each simulated form per repetition.
        #[arg(long, default_value_t = 400)]
        seeds: u64,
        /// Seeds of the real-process rehearsal per repetition.
        #[arg(long, default_value_t = 1)]
        real_seeds: u64,
        /// Inputs a seed.
        #[arg(long, default_value_t = 300)]
        inputs: usize,
        /// Faults a seed (at least).
        #[arg(long, default_value_t = 10)]
        faults: usize,
        #[arg(long, default_value_t = 3)]
        repetitions: usize,
        /// The built forward-once [default: beside this program].
        #[arg(long)]
        handler: Option<std::path::PathBuf>,
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

/// Runs one benchmark; `collector` is the trace collector of `bench pool --tracing`.
pub async fn run(
    which: BenchCommand,
    collector: Option<std::sync::Arc<hubhost_telemetry::collector::Collector>>,
) -> Result<(), String> {
    match which {
        BenchCommand::Rehearse {
            seeds,
            real_seeds,
            inputs,
            faults,
            repetitions,
            handler,
        } => {
            let handler = match handler {
                Some(handler) => handler,
                None => hubhost_testkit::process::find_binary("forward-once").ok_or(
                    "forward-once is not built: cargo build --release --workspace".to_string(),
                )?,
            };
            let options = bench::rehearse::RehearseBenchOptions {
                seeds,
                real_seeds,
                inputs,
                faults,
                repetitions: repetitions.max(1),
                app: bench::rehearse::default_app(),
                handler,
            };
            tokio::task::spawn_blocking(move || bench::rehearse::run(&options))
                .await
                .map_err(|e| e.to_string())?
        }
        BenchCommand::Checkpoints {
            storage,
            seconds,
            partitions,
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
        BenchCommand::Startup {
            executables,
            starts,
            json,
        } => {
            let candidates = if executables.is_empty() {
                let beside = |name: &str| {
                    hubhost_testkit::process::find_binary(name).ok_or(format!(
                        "{name} is not built: cargo build --release --workspace"
                    ))
                };
                vec![
                    bench::startup::Candidate {
                        label: "hubhost-app".into(),
                        program: beside("hubhost-app")?,
                        args: Vec::new(),
                    },
                    bench::startup::Candidate {
                        label: "hubhost serve".into(),
                        program: beside("hubhost")?,
                        args: vec!["serve".into()],
                    },
                ]
            } else {
                executables
                    .iter()
                    .map(|e| bench::startup::Candidate::parse(e))
                    .collect::<Result<_, _>>()?
            };
            let figures =
                tokio::task::spawn_blocking(move || bench::startup::run(&candidates, starts))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
            let table = bench::startup::table(&figures, starts);
            if json {
                eprint!("{table}");
                println!(
                    "{}",
                    serde_json::to_string_pretty(&figures).map_err(|e| e.to_string())?
                );
            } else {
                print!("{table}");
            }
            Ok(())
        }
        BenchCommand::Chaos {
            faults,
            seed,
            stores,
            instances,
            rate,
            outage,
            kinds,
            azurite,
            work_dir,
            json,
        } => {
            use bench::chaos::{ChaosOptions, StoreChoice, faults::FaultKind};
            let stores = stores
                .iter()
                .map(|s| match s.as_str() {
                    "directory" => Ok(StoreChoice::Directory),
                    "azurite" => Ok(StoreChoice::Azurite),
                    other => Err(format!(
                        "--stores: unknown store {other:?} (directory, azurite)"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let kinds = kinds
                .iter()
                .map(|k| {
                    FaultKind::parse(k).ok_or(format!(
                        "--kinds: unknown fault {k:?} (kill-instance, kill-handler, freeze, kill-hub, storage-outage, graceful-restart)"
                    ))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let [lo, hi] = outage[..] else {
                return Err("--outage takes two numbers of seconds: shortest,longest".into());
            };
            if !(lo >= 0.0 && hi >= lo && hi < 3600.0) || instances < 2 || faults == 0 || rate == 0
            {
                return Err(
                    "--outage must be 0 ≤ shortest ≤ longest < 3600, --instances at least 2, --faults and --rate at least 1"
                        .into(),
                );
            }
            let azurite = azurite.or_else(|| {
                let local = PathBuf::from(".tools/node_modules/.bin/azurite-blob");
                local
                    .exists()
                    .then(|| local.canonicalize().unwrap_or(local))
            });
            let options = |work_dir| ChaosOptions {
                faults,
                seed,
                stores,
                instances,
                rate,
                outage: (
                    std::time::Duration::from_secs_f64(lo),
                    std::time::Duration::from_secs_f64(hi),
                ),
                kinds,
                json,
                work_dir,
                azurite,
            };
            match work_dir {
                Some(dir) => bench::chaos::run(options(dir))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                None => in_bench_dir(|dir| bench::chaos::run(options(dir))).await,
            }
        }
        BenchCommand::Hub {
            events,
            python_events,
            batch_size,
            partitions,
            python,
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
        BenchCommand::Kafka {
            events,
            batch_size,
            partitions,
            repetitions,
            json,
        } => {
            if partitions == 0 || batch_size == 0 || repetitions == 0 {
                return Err(
                    "--partitions, --batch-size and --repetitions must be at least 1".into(),
                );
            }
            in_bench_dir(|work_dir| {
                bench::kafka::run(bench::kafka::KafkaBenchOptions {
                    events,
                    batch_size,
                    partitions,
                    repetitions,
                    work_dir,
                    json,
                })
            })
            .await
        }
        BenchCommand::Pool {
            events,
            homes,
            rate,
            steady_seconds,
            partitions,
            max_batch,
            prefetch,
            scale_interval,
            pools,
            repeat,
            throughput_only,
            tracing,
            json,
        } => {
            if pools.contains(&0) || repeat == 0 {
                return Err(
                    "--pools must name at least 1 instance each, --repeat at least 1".into(),
                );
            }
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
                    scale_interval,
                    pools,
                    repeat,
                    throughput_only,
                    tracing: collector.filter(|_| tracing),
                    json,
                    work_dir,
                })
            })
            .await
        }
        BenchCommand::Cost {
            workload,
            configs,
            instances,
            duration,
            warmup,
            scale_interval,
            price_write,
            price_list,
            price_read,
            price_other,
            json,
        } => {
            let configs = configs
                .iter()
                .map(|c| bench::cost::CostConfig::parse(c))
                .collect::<Result<Vec<_>, _>>()?;
            if instances == 0 {
                return Err("--instances must be at least 1".into());
            }
            in_bench_dir(|work_dir| {
                bench::cost::run(bench::cost::CostOptions {
                    workload: workload.into_workload(),
                    instances,
                    configs,
                    duration,
                    warmup,
                    scale_interval,
                    prices: bench::cost::Prices {
                        write: price_write,
                        list: price_list,
                        read: price_read,
                        other: price_other,
                    },
                    json,
                    work_dir,
                })
            })
            .await
        }
        BenchCommand::Latency {
            workload,
            instances,
            duration,
            warmup,
            interval,
            json,
        } => {
            if instances.contains(&0) {
                return Err("each of --instances must be at least 1".into());
            }
            in_bench_dir(|work_dir| {
                bench::latency::run(bench::latency::LatencyOptions {
                    workload: workload.into_workload(),
                    instances,
                    duration,
                    warmup,
                    interval,
                    page_poll: std::time::Duration::from_millis(250),
                    json,
                    work_dir,
                })
            })
            .await
        }
        BenchCommand::Soak {
            workload,
            instances,
            duration,
            window,
            warmup,
            retention,
            segment_mb,
            json,
        } => {
            in_bench_dir(|work_dir| {
                bench::soak::run(bench::soak::SoakOptions {
                    workload: workload.into_workload(),
                    instances: instances as usize,
                    duration,
                    window,
                    warmup,
                    retention,
                    segment_mb,
                    page_poll: std::time::Duration::from_secs(1),
                    json,
                    work_dir,
                })
            })
            .await
        }
        BenchCommand::Handler {
            batch_sizes,
            events,
            partitions,
            homes,
            repetitions,
            storage,
            reference_handler,
        } => bench::run(bench::BenchOptions {
            batch_sizes,
            events,
            partitions,
            homes,
            repetitions,
            storage,
            reference_handler,
        })
        .await
        .map(|_| ())
        .map_err(|e| e.to_string()),
    }
}

/// The reference load `bench latency` and `bench cost` run: the fleet and the instances' batch
/// settings.
#[derive(clap::Args)]
pub struct WorkloadArgs {
    /// Homes of the simulated fleet, reporting once a minute in real time (100,000: the
    /// reference scenario, 13,333 events/s).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..))]
    homes: u32,
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=32))]
    partitions: u32,
    /// host.json maxEventBatchSize of the instances.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    max_batch: u32,
    /// host.json prefetchCount of the instances.
    #[arg(long, default_value_t = 300)]
    prefetch: u32,
    /// host.json minEventBatchSize of the instances (1: the host's default).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    min_batch: u32,
    /// host.json maxWaitTime of the instances, in seconds: how long a batch below --min-batch
    /// waits for more.
    #[arg(long, default_value = "60", value_parser = positive_seconds)]
    max_wait: std::time::Duration,
}

impl WorkloadArgs {
    fn into_workload(self) -> bench::load::Workload {
        bench::load::Workload {
            homes: self.homes,
            partitions: self.partitions,
            max_batch: self.max_batch,
            prefetch: self.prefetch,
            min_batch: self.min_batch,
            max_wait: self.max_wait,
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

//! `hubhost bench pool`: the pool scenarios on real processes — how fast a pool of
//! `hubhost emulate` instances takes over, hands off, rebalances and processes, and what it
//! costs the checkpoint store.
//!
//! Everything is a child process of this command, as in a deployment: a `hubhost hub`, the
//! instances (`hubhost emulate` on an app whose function is the real `SensorAggregator`,
//! handled by `hubhost serve` writing aggregates to blob storage) and, for the membership
//! scenarios, the fleet simulator. The figures come from outside the instances: the checkpoint
//! store (who owns what, how far each partition is checkpointed) and each instance's
//! `/metrics`. A partition counts as *processed by its new owner* when its checkpoint moves past
//! where the old owner left it: the new owner has then read a batch, had the handler aggregate
//! it and checkpointed it.
//!
//! Phases:
//! 1. throughput: a hub prefilled with `events` readings, read end to end by one and then by
//!    four instances (each on a fresh checkpoint store); baseline: the same events read by the
//!    bare SDK consumer, no handler, no checkpoints;
//! 2. membership, on a second hub with the simulator producing at `rate`: one instance, grown
//!    to two and to four (time to ±1 balance, partitions moved vs the minimum), `steady`
//!    seconds of steady membership (ownership changes, storage operations per minute per
//!    instance), a graceful stop (SIGTERM), a `kill -9`, and a restart: `kill -9` of an
//!    instance started again at once under the same id, which reclaims its own partitions;
//! 3. the backlog drained by the scale controller (`hubhost emulate --scale`) beside the fixed
//!    pools of phase 1: time to drain, and instance-seconds spent until then (what a
//!    Consumption plan bills).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cpu::{self, CpuMeter};
use super::hub::{HubBenchError, contract_floor, rust_consumer};
use crate::local_hub::{HubProcess, LocalHubError};
use hubhost_checkpoints::{CheckpointStore, ConsumerGroupKey, DEFAULT_CONTAINER};
use hubhost_metrics as metrics;
use hubhost_simulate::{self as simulate, Pace, SimulateOptions, StopAfter};
use hubhost_storage::StorageLocation;
use hubhost_testkit::pool::{AppFolder, EmulatePool, PoolError, live_owners};
use hubhost_testkit::stats::median_and_range;

const HUB: &str = "sensors";
/// The real app's aggregation function, as the repository's function_app declares it.
const AGGREGATOR_FUNCTION_JSON: &str =
    include_str!("../../../function_app/SensorAggregator/function.json");
/// hubhost's default ownership expiry: an instance that stopped renewing for this long is gone.
const EXPIRY: Duration = Duration::from_secs(6);
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct PoolBenchOptions {
    pub partitions: u32,
    /// Events prefilled for the throughput phase, from `homes` homes.
    pub events: u64,
    pub homes: u32,
    /// Events per second the simulator sends during the membership scenarios.
    pub rate: u32,
    /// Steady membership lasts this long.
    pub steady: Duration,
    /// Print the figures as JSON on stdout instead of the table.
    pub json: bool,
    /// host.json `maxEventBatchSize` and `prefetchCount`.
    pub max_batch: u32,
    pub prefetch: u32,
    /// `--scale-interval` of the scale controller in the drain phase.
    pub scale_interval: Duration,
    /// Pool sizes of the throughput phase.
    pub pools: Vec<usize>,
    /// Repetitions of the throughput phase.
    pub repeat: usize,
    /// Only the throughput phase.
    pub throughput_only: bool,
    /// Each pool of the throughput phase run a second time with tracing on, exporting to this
    /// collector (this process exports to it too, so the prefilled readings are stamped).
    pub tracing: Option<Arc<hubhost_telemetry::collector::Collector>>,
    pub work_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum PoolBenchError {
    #[error(transparent)]
    Hub(#[from] HubBenchError),
    #[error(transparent)]
    LocalHub(#[from] LocalHubError),
    #[error("{0}")]
    Io(String),
    #[error(transparent)]
    Checkpoint(#[from] hubhost_checkpoints::CheckpointError),
    #[error(transparent)]
    EventHub(#[from] hubhost_eventhubs::EventHubsError),
    #[error("prefilling the hub: {0}")]
    Simulate(#[from] simulate::SimulateError),
    #[error("{what} did not happen within {within:?}{detail}")]
    Timeout {
        what: String,
        within: Duration,
        detail: String,
    },
    #[error(transparent)]
    Instance(#[from] PoolError),
}

fn io(context: &str) -> impl FnOnce(std::io::Error) -> PoolBenchError + '_ {
    move |e| PoolBenchError::Io(format!("{context}: {e}"))
}

/// The OpenTelemetry settings of a traced run (exporting to `endpoint` over OTLP/HTTP), and
/// none otherwise; the batch delays are the SDK's defaults, as a deployment would have them.
fn otel_settings(endpoint: Option<&str>) -> Vec<(&'static str, String)> {
    match endpoint {
        Some(endpoint) => vec![("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_string())],
        None => Vec::new(),
    }
}

/// The fewest partitions that must change hands to go from `shares` (partitions per current
/// owner) to a ±1 balance among `live` instances (the current owners among them). Owners that
/// are not live keep nothing; the larger quotas go to the owners holding the most.
pub fn minimum_moves(shares: &[usize], live: usize, partitions: usize) -> usize {
    if live == 0 {
        return 0;
    }
    let mut held: Vec<usize> = shares.to_vec();
    held.sort_unstable_by(|a, b| b.cmp(a));
    held.resize(live, 0);
    let (base, extra) = (partitions / live, partitions % live);
    let stay: usize = held
        .iter()
        .enumerate()
        .map(|(i, h)| (*h).min(base + usize::from(i < extra)))
        .sum();
    partitions - stay
}

/// What the checkpoint store shows at one moment.
#[derive(Debug, Default)]
struct Snapshot {
    /// Partition → owner, active ownerships only.
    owners: BTreeMap<String, String>,
    /// Partition → checkpointed sequence number.
    checkpoints: BTreeMap<String, i64>,
}

impl Snapshot {
    fn owned_by(&self, owner: &str) -> BTreeSet<String> {
        self.owners
            .iter()
            .filter(|(_, o)| *o == owner)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Every partition owned by a live instance, shares within one of each other.
    fn balanced(&self, live: &BTreeSet<String>, partitions: usize) -> bool {
        let mut shares: BTreeMap<&str, usize> = live.iter().map(|i| (i.as_str(), 0)).collect();
        for owner in self.owners.values() {
            match shares.get_mut(owner.as_str()) {
                Some(n) => *n += 1,
                None => return false,
            }
        }
        let lo = shares.values().min().copied().unwrap_or(0);
        let hi = shares.values().max().copied().unwrap_or(0);
        self.owners.len() == partitions && hi - lo <= 1
    }

    fn shares(&self) -> Vec<usize> {
        let mut shares: BTreeMap<&str, usize> = BTreeMap::new();
        for owner in self.owners.values() {
            *shares.entry(owner).or_default() += 1;
        }
        shares.into_values().collect()
    }

    fn processed(&self) -> u64 {
        self.checkpoints.values().map(|s| (s + 1) as u64).sum()
    }
}

/// Reads the pool's state from its checkpoint store, as an operator would.
struct Observer {
    store: CheckpointStore,
    key: ConsumerGroupKey,
}

impl Observer {
    fn new(store_dir: &Path, namespace: &str) -> Result<Self, PoolBenchError> {
        let blobs = StorageLocation::Directory(store_dir.to_path_buf())
            .open()
            .map_err(|e| PoolBenchError::Io(e.to_string()))?;
        Ok(Observer {
            store: CheckpointStore::new(blobs, DEFAULT_CONTAINER),
            key: ConsumerGroupKey::new(namespace, HUB, "$Default")?,
        })
    }

    async fn snapshot(&self) -> Result<Snapshot, PoolBenchError> {
        let owners = live_owners(&self.store, &self.key).await?;
        let checkpoints = self
            .store
            .list_checkpoints(&self.key)
            .await?
            .items
            .into_iter()
            .filter_map(|c| Some((c.partition_id, c.sequence_number?)))
            .collect();
        Ok(Snapshot {
            owners,
            checkpoints,
        })
    }

    /// Polls until `done` holds; counts every change of owner seen on the way.
    async fn wait_for(
        &self,
        what: &str,
        within: Duration,
        mut done: impl FnMut(&Snapshot) -> bool,
    ) -> Result<(Duration, usize), PoolBenchError> {
        let started = Instant::now();
        let mut owners = OwnerHistory::default();
        owners.observe(&self.snapshot().await?);
        let mut moves = 0;
        loop {
            let now = self.snapshot().await?;
            moves += owners.observe(&now);
            if done(&now) {
                return Ok((started.elapsed(), moves));
            }
            if started.elapsed() > within {
                return Err(PoolBenchError::Timeout {
                    what: what.into(),
                    within,
                    detail: format!(": owners {:?}", now.owners),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Each partition's last owner seen, kept while the partition has no active owner, so that a
/// move through a moment without one (A → none → B) still counts once, when B shows.
#[derive(Debug, Default)]
struct OwnerHistory {
    last: BTreeMap<String, String>,
}

impl OwnerHistory {
    /// Records `now`; returns how many partitions have an owner other than their last one.
    fn observe(&mut self, now: &Snapshot) -> usize {
        let mut moved = 0;
        for (partition, owner) in &now.owners {
            match self.last.insert(partition.clone(), owner.clone()) {
                Some(previous) if previous != *owner => moved += 1,
                _ => {}
            }
        }
        moved
    }
}

/// The app the instances run, in its own directory with its own checkpoint store, and the
/// instances themselves (the harness `bench pool` shares with the pool tests).
struct PoolApp {
    dir: PathBuf,
    store_dir: PathBuf,
    observer: Observer,
    pool: EmulatePool,
    partitions: usize,
}

impl PoolApp {
    fn create(
        dir: PathBuf,
        hub: &HubProcess,
        opts: &PoolBenchOptions,
        traced: Option<&str>,
    ) -> Result<Self, PoolBenchError> {
        let exe = crate::hubhost_exe().map_err(io("this executable"))?;
        let store_dir = dir.join("store");
        std::fs::create_dir_all(&store_dir).map_err(io("the store directory"))?;
        AppFolder {
            handler: (&exe, &["serve"]),
            functions: &[("SensorAggregator", AGGREGATOR_FUNCTION_JSON)],
            max_batch: opts.max_batch,
            prefetch: opts.prefetch,
            ownership_expiry: None,
            values: &[
                &[
                    ("AzureWebJobsStorage", store_dir.display().to_string()),
                    ("EventHubConnection", hub.connection_string.clone()),
                    ("EventHubName", HUB.to_string()),
                ],
                // The handlers get their settings from here, as on Azure.
                &otel_settings(traced)[..],
            ]
            .concat(),
        }
        .write(&dir)?;
        Ok(PoolApp {
            observer: Observer::new(&store_dir, &hub.target.namespace)?,
            pool: EmulatePool::new(&exe, &dir, &dir),
            dir,
            store_dir,
            partitions: opts.partitions as usize,
        })
    }

    fn live(&self) -> BTreeSet<String> {
        self.pool.live()
    }

    fn start(&mut self, name: &str) -> Result<(), PoolBenchError> {
        Ok(self.pool.start(name, &[("RUST_LOG", "warn".to_string())])?)
    }

    /// Starts an instance of a pool of `instances` sharing this machine's cores, as the
    /// scale controller starts them (see `child::worker_threads_per_instance`).
    fn start_sharing(
        &mut self,
        name: &str,
        instances: usize,
        traced: Option<&str>,
    ) -> Result<(), PoolBenchError> {
        let mut env = vec![("RUST_LOG", "warn".to_string())];
        env.extend(otel_settings(traced));
        if let Some(threads) = hubhost_process::child::worker_threads_setting(instances) {
            env.push((hubhost_process::child::WORKER_THREADS_ENV, threads));
        }
        Ok(self.pool.start(name, &env)?)
    }

    /// SIGTERM, as the platform stops an instance; returns once it has exited.
    async fn stop(&mut self, name: &str) -> Result<(), PoolBenchError> {
        Ok(self.pool.stop(name).await?)
    }

    async fn kill_9(&mut self, name: &str) -> Result<(), PoolBenchError> {
        self.pool.kill_9(name)?;
        Ok(())
    }

    async fn stop_all(&mut self) -> Result<(), PoolBenchError> {
        Ok(self.pool.stop_all().await?)
    }

    /// Each instance's `/metrics`, summed per metric (and per `operation` for the store).
    async fn scrape(&mut self) -> Result<BTreeMap<String, MetricTotals>, PoolBenchError> {
        let mut out = BTreeMap::new();
        for name in self.live() {
            let (_, samples) = self.pool.metrics(&name).await?;
            out.insert(
                name.clone(),
                MetricTotals {
                    events: metrics::sum(&samples, "hubhost_events_processed_total", &[]),
                    storage_operations: metrics::sum(
                        &samples,
                        "hubhost_storage_operations_total",
                        &[],
                    ),
                    checkpoints: metrics::sum(&samples, "hubhost_checkpoints_written_total", &[]),
                },
            );
        }
        Ok(out)
    }

    /// Waits until every instance answers on its metrics endpoint (started and configured).
    async fn wait_started(&mut self) -> Result<(), PoolBenchError> {
        Ok(self.pool.wait_started(Duration::from_secs(30)).await?)
    }
}

impl Drop for PoolApp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.store_dir);
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct MetricTotals {
    events: f64,
    storage_operations: f64,
    checkpoints: f64,
}

/// The figures the command prints.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PoolFigures {
    /// The median of the baseline's repetitions.
    pub baseline_events_per_s: f64,
    /// One entry per pool size, in the order run.
    pub throughput: Vec<Throughput>,
    pub scale_out: Vec<ScaleOut>,
    pub steady_seconds: f64,
    pub steady_changes: usize,
    /// Storage operations per minute per instance during the steady phase: (mean, max).
    pub storage_ops_per_min: (f64, f64),
    /// Of those, checkpoint writes (the rest is the balancer: listings and renewals).
    pub checkpoint_writes_per_min: f64,
    pub handoff_seconds: f64,
    pub takeover_seconds: f64,
    /// `kill -9` and an immediate restart under the same id → every partition it owned
    /// processed again by it.
    pub restart_reclaim_seconds: f64,
    pub restart_partitions: usize,
    /// The prefilled backlog drained by each pool, the scale controller's last.
    pub drain: Vec<Drain>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Drain {
    /// "1 instance", "16 instances", "--scale".
    pub pool: String,
    /// From starting the pool to every event checkpointed.
    pub seconds: f64,
    /// Σ over instances of their running time until then.
    pub instance_seconds: f64,
    /// The most instances running at once.
    pub max_instances: usize,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Throughput {
    pub instances: usize,
    /// The median of `runs`' rates.
    pub events_per_s: f64,
    /// One per repetition.
    pub runs: Vec<ThroughputRun>,
    /// With `--tracing`, one per repetition: the same pool with tracing on.
    pub traced_runs: Vec<TracedRun>,
}

/// A throughput run with tracing on, beside the run without it in the same repetition.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TracedRun {
    pub events_per_s: f64,
    pub cpu: PipelineCpu,
    /// Spans the collector received during the run.
    pub spans: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ThroughputRun {
    /// From the first checkpoint to the last event checkpointed.
    pub events_per_s: f64,
    /// The bare SDK consumer's rate in the same repetition.
    pub baseline_events_per_s: f64,
    /// From starting the processes to the first checkpoint.
    pub startup_seconds: f64,
    /// Events the handlers were given more than once (start-up rebalancing).
    pub duplicates: u64,
    /// CPU per event over the same window as the rate.
    pub cpu: PipelineCpu,
    /// The baseline's CPU per event in the same repetition (`instances`: the SDK consumer;
    /// no handlers).
    pub baseline_cpu: PipelineCpu,
    /// The contract floor's rate in the same repetition: the SDK consumer plus, per batch of
    /// 100, the host's encode and the handler's decode.
    pub floor_events_per_s: f64,
    /// Its CPU per event (`instances`: the consumer and the contract, in one process).
    pub floor_cpu: PipelineCpu,
}

/// Microseconds of CPU per event spent by each part of the pipeline.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PipelineCpu {
    /// The `hubhost hub` process.
    pub hub: f64,
    /// The `hubhost emulate` processes (the Functions host's part), or the bare consumer.
    pub instances: f64,
    /// Their custom handlers (`hubhost serve`).
    pub handlers: f64,
}

impl PipelineCpu {
    pub fn total(&self) -> f64 {
        self.hub + self.instances + self.handlers
    }
}

impl ThroughputRun {
    /// This run's rate as a fraction of the baseline's in the same repetition.
    pub fn efficiency(&self) -> f64 {
        self.events_per_s / self.baseline_events_per_s.max(1e-9)
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ScaleOut {
    pub from: usize,
    pub to: usize,
    /// From starting the new instances to a ±1 balance.
    pub seconds: f64,
    pub moved: usize,
    pub minimum: usize,
}

/// A baseline's rate, and its CPU per event over `events`: the hub's process (`hub_pid`) and
/// this one, where the baseline's consumer runs (no handlers).
async fn in_this_process(
    hub_pid: u32,
    events: u64,
    baseline: impl std::future::Future<Output = Result<super::hub::Figure, HubBenchError>>,
) -> Result<(f64, PipelineCpu), HubBenchError> {
    let (hub, own) = (CpuMeter::start([hub_pid]), cpu::own_cpu());
    let rate = baseline.await?.events_per_s();
    let cpu = PipelineCpu {
        hub: cpu::micros_per_event(hub.spent(), events),
        instances: cpu::micros_per_event(cpu::own_cpu().saturating_sub(own), events),
        handlers: 0.0,
    };
    Ok((rate, cpu))
}

/// The reference app's aggregator trigger, whose requests the contract floor encodes.
fn reference_trigger() -> hubhost_functions::function_app::EventHubTrigger {
    hubhost_app::handler::builtin_functions()
        .iter()
        .find(|f| f.name == hubhost_app::AGGREGATOR_FUNCTION)
        .and_then(|f| f.event_hub_trigger().cloned())
        .expect("the reference app declares its aggregator with an Event Hubs trigger")
}

fn note(line: impl AsRef<str>) {
    eprintln!("bench pool: {}", line.as_ref());
}

/// What one pool of phase 1 did.
struct PoolRun {
    events_per_s: f64,
    startup_seconds: f64,
    duplicates: u64,
    /// From starting the processes to every event checkpointed.
    drained_seconds: f64,
    cpu: PipelineCpu,
}

/// CPU meters on the hub, the instances and their handlers.
struct PipelineMeters {
    hub: CpuMeter,
    instances: CpuMeter,
    handlers: CpuMeter,
}

impl PipelineMeters {
    fn start(hub: &HubProcess, app: &PoolApp) -> Self {
        let names = app.live();
        PipelineMeters {
            hub: CpuMeter::start([hub.pid()]),
            instances: CpuMeter::start(names.iter().filter_map(|n| app.pool.pid(n))),
            handlers: CpuMeter::start(
                names
                    .iter()
                    .filter_map(|n| app.pool.handler_pid(n, "serve")),
            ),
        }
    }

    fn per_event(&self, events: u64) -> PipelineCpu {
        PipelineCpu {
            hub: cpu::micros_per_event(self.hub.spent(), events),
            instances: cpu::micros_per_event(self.instances.spent(), events),
            handlers: cpu::micros_per_event(self.handlers.spent(), events),
        }
    }
}

/// Phase 1 for `count` instances: how fast they read the prefilled hub end to end.
/// One pool of `count` instances reading the prefilled hub to its end; with `traced`, the
/// instances and their handlers export spans and metrics to that OTLP/HTTP endpoint.
/// With `--tracing`, one throughput run of `count` instances exporting to the benchmark's
/// collector; `None` without.
async fn traced_throughput(
    hub: &HubProcess,
    opts: &PoolBenchOptions,
    count: usize,
    total: u64,
) -> Result<Option<TracedRun>, PoolBenchError> {
    let Some(collector) = &opts.tracing else {
        return Ok(None);
    };
    let spans_before = collector.spans_received();
    let run = throughput(hub, opts, count, total, Some(collector.endpoint())).await?;
    let spans = collector.spans_received() - spans_before;
    note(format!(
        "{count} instance(s), tracing on: {:.0} events/s end to end, {spans} spans",
        run.events_per_s
    ));
    Ok(Some(TracedRun {
        events_per_s: run.events_per_s,
        cpu: run.cpu,
        spans,
    }))
}

async fn throughput(
    hub: &HubProcess,
    opts: &PoolBenchOptions,
    count: usize,
    total: u64,
    traced: Option<&str>,
) -> Result<PoolRun, PoolBenchError> {
    let dir = match traced {
        Some(_) => format!("throughput-{count}-traced"),
        None => format!("throughput-{count}"),
    };
    let mut app = PoolApp::create(opts.work_dir.join(dir), hub, opts, traced)?;
    let started = Instant::now();
    for i in 1..=count {
        app.start_sharing(&format!("t{i}"), count, traced)?;
    }
    app.wait_started().await?;
    let progress = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let _line = {
        let progress = progress.clone();
        hubhost_process::progress::Progress::spawn(move || {
            format!(
                "bench pool: {count} instance(s): {} of {total} events checkpointed",
                progress.load(std::sync::atomic::Ordering::Relaxed)
            )
        })
    };
    let within = Duration::from_secs(60 + total / 2_000);
    // Set at the first checkpoint: its time, the events checkpointed then, and the meters.
    let mut first: Option<(Duration, u64, PipelineMeters)> = None;
    let mut polls = 0u64;
    loop {
        let snapshot = app.observer.snapshot().await?;
        let processed = snapshot.processed();
        progress.store(processed, std::sync::atomic::Ordering::Relaxed);
        if processed > 0 && first.is_none() {
            first = Some((
                started.elapsed(),
                processed,
                PipelineMeters::start(hub, &app),
            ));
        }
        if processed >= total {
            break;
        }
        if started.elapsed() > within {
            return Err(PoolBenchError::Timeout {
                what: format!("{count} instance(s) processing {total} events"),
                within,
                detail: format!(" ({processed} checkpointed)"),
            });
        }
        polls += 1;
        if polls.is_multiple_of(10) {
            // Only to notice an instance that died.
            app.scrape().await?;
        }
        tokio::time::sleep(POLL).await;
    }
    let done = started.elapsed();
    let cpu = first
        .as_ref()
        .map(|(_, at_first, meters)| meters.per_event(total.saturating_sub(*at_first)))
        .unwrap_or_default();
    let events: f64 = app.scrape().await?.values().map(|m| m.events).sum();
    app.stop_all().await?;
    let first = first.map_or(done, |(at, _, _)| at);
    // The first checkpoint lands after the first batch; its events are not in the window.
    Ok(PoolRun {
        events_per_s: total as f64 / (done - first).as_secs_f64().max(1e-3),
        startup_seconds: first.as_secs_f64(),
        duplicates: (events as u64).saturating_sub(total),
        drained_seconds: done.as_secs_f64(),
        cpu,
    })
}

/// Phase 3: the scale controller drains the prefilled hub; returns the drain figures.
async fn scale_drain(
    hub: &HubProcess,
    opts: &PoolBenchOptions,
    total: u64,
) -> Result<Drain, PoolBenchError> {
    let app = PoolApp::create(opts.work_dir.join("scale"), hub, opts, None)?;
    let exe = crate::hubhost_exe().map_err(io("this executable"))?;
    let out_path = app.dir.join("scale.out");
    let out = std::fs::File::create(&out_path).map_err(io("scale.out"))?;
    let mut command = hubhost_process::child::command(exe);
    command
        .args(["emulate", "--scale", "--http-port", "0", "--app"])
        .arg(&app.dir)
        .args([
            "--scale-interval",
            &opts.scale_interval.as_secs_f64().to_string(),
        ])
        .arg("--scale-logs")
        .arg(app.dir.join("instances"))
        .env("HUBHOST_INSTANCE_LOCKS", app.dir.join("locks"))
        .env("RUST_LOG", "warn")
        .stdout(out)
        .stderr(std::fs::File::create(app.dir.join("scale.log")).map_err(io("scale.log"))?);
    // The instances inherit the supervisor's environment: the same isolation as the pool's.
    for variable in hubhost_testkit::pool::NOT_INHERITED {
        command.env_remove(variable);
    }
    let mut supervisor = command.spawn().map_err(io("hubhost emulate --scale"))?;
    let started = Instant::now();
    let within = Duration::from_secs(120 + total / 2_000);
    let (mut instance_seconds, mut max_instances) = (0.0, 0usize);
    let mut last_poll = Instant::now();
    loop {
        // Instances running: started minus stopped, from the supervisor's own lines.
        let text = std::fs::read_to_string(&out_path).unwrap_or_default();
        let running = text
            .lines()
            .filter(|l| l.starts_with("scale: started"))
            .count()
            - text
                .lines()
                .filter(|l| l.starts_with("scale: stopping"))
                .count();
        let now = Instant::now();
        instance_seconds += running as f64 * (now - last_poll).as_secs_f64();
        last_poll = now;
        max_instances = max_instances.max(running);
        if app.observer.snapshot().await?.processed() >= total {
            break;
        }
        if let Ok(Some(status)) = supervisor.try_wait() {
            return Err(PoolBenchError::Io(format!(
                "hubhost emulate --scale exited with {status}"
            )));
        }
        if started.elapsed() > within {
            return Err(PoolBenchError::Timeout {
                what: format!("--scale draining {total} events"),
                within,
                detail: String::new(),
            });
        }
        tokio::time::sleep(POLL).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(pid) = supervisor.id() {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
    let _ = tokio::time::timeout(Duration::from_secs(90), supervisor.wait()).await;
    Ok(Drain {
        pool: "--scale".into(),
        seconds,
        instance_seconds,
        max_instances,
    })
}

/// `kill -9` of `name` and a restart under the same id at once: seconds until every partition
/// it owned is processed again by it (owned by it, and checkpointed past where it died).
async fn restart(app: &mut PoolApp, name: &str) -> Result<(usize, f64), PoolBenchError> {
    let mine = app.observer.snapshot().await?.owned_by(name);
    let started = Instant::now();
    app.kill_9(name).await?;
    let left = app.observer.snapshot().await?;
    app.start(name)?;
    app.observer
        .wait_for(
            &format!("{name} reclaiming its partitions after a restart"),
            Duration::from_secs(120),
            |s| {
                mine.iter().all(|p| {
                    s.owners.get(p).is_some_and(|o| o == name)
                        && s.checkpoints.get(p).copied().unwrap_or(-1)
                            > left.checkpoints.get(p).copied().unwrap_or(-1)
                })
            },
        )
        .await?;
    Ok((mine.len(), started.elapsed().as_secs_f64()))
}

/// The fleet simulator as a child process, killed when dropped (what it sent is in the hub).
struct Producer {
    _child: tokio::process::Child,
}

impl Producer {
    fn start(hub: &HubProcess, rate: u32) -> Result<Self, PoolBenchError> {
        let exe = crate::hubhost_exe().map_err(io("this executable"))?;
        let child = hubhost_process::child::command(exe)
            .args(["simulate", "--homes", "10000", "--rate", &rate.to_string()])
            .arg("--connection")
            .arg(&hub.connection_string)
            .args(["--hub", HUB])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(io("hubhost simulate"))?;
        Ok(Producer { _child: child })
    }
}

/// Waits until the pool is balanced among its live instances; returns the time and the moves.
async fn settle(app: &PoolApp, what: &str) -> Result<(Duration, usize), PoolBenchError> {
    let live = app.live();
    app.observer
        .wait_for(what, Duration::from_secs(60), |s| {
            s.balanced(&live, app.partitions)
        })
        .await
}

/// Waits until every partition in `orphans` is owned by a live instance and checkpointed past
/// where `left` shows it: the new owner has processed a batch of it.
async fn resumed(
    app: &PoolApp,
    what: &str,
    orphans: &BTreeSet<String>,
    left: &Snapshot,
) -> Result<(), PoolBenchError> {
    let live = app.live();
    app.observer
        .wait_for(what, Duration::from_secs(120), |s| {
            orphans.iter().all(|p| {
                s.owners.get(p).is_some_and(|o| live.contains(o))
                    && s.checkpoints.get(p).copied().unwrap_or(-1)
                        > left.checkpoints.get(p).copied().unwrap_or(-1)
            })
        })
        .await?;
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Departure {
    /// SIGTERM: the instance finishes its batches, checkpoints and relinquishes.
    Graceful,
    /// `kill -9`.
    Crash,
}

/// Removes `name` from the pool; returns how many partitions it held and the seconds from the
/// signal until the others had processed a batch of every one of them, then waits for balance.
async fn departure(
    app: &mut PoolApp,
    name: &str,
    how: Departure,
) -> Result<(usize, f64), PoolBenchError> {
    let orphans = app.observer.snapshot().await?.owned_by(name);
    let started = Instant::now();
    match how {
        Departure::Graceful => app.stop(name).await?,
        Departure::Crash => app.kill_9(name).await?,
    }
    // Taken once the instance is gone: its own last checkpoints do not count as a takeover.
    let left = app.observer.snapshot().await?;
    resumed(
        app,
        &format!("{name}'s partitions processed again ({how:?})"),
        &orphans,
        &left,
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    settle(app, &format!("a ±1 balance after {name} left ({how:?})")).await?;
    Ok((orphans.len(), seconds))
}

/// Phase 2: membership changes on a hub the simulator keeps feeding.
async fn membership(
    hub: &HubProcess,
    opts: &PoolBenchOptions,
    figures: &mut PoolFigures,
) -> Result<(), PoolBenchError> {
    let _producer = Producer::start(hub, opts.rate)?;
    let mut app = PoolApp::create(opts.work_dir.join("membership"), hub, opts, None)?;
    app.start("i1")?;
    app.wait_started().await?;
    let (took, _) = settle(&app, "one instance owning every partition").await?;
    note(format!(
        "one instance owns every partition after {took:.1?}"
    ));

    for (from, names) in [(1, &["i2"][..]), (2, &["i3", "i4"][..])] {
        let before = app.observer.snapshot().await?;
        for name in names {
            app.start(name)?;
        }
        let minimum = minimum_moves(&before.shares(), app.live().len(), app.partitions);
        let to = app.live().len();
        let (took, moved) = settle(&app, &format!("a ±1 balance after growing to {to}")).await?;
        note(format!(
            "{from} → {to} instances: balanced after {took:.1?}, {moved} partitions moved (minimum {minimum})"
        ));
        figures.scale_out.push(ScaleOut {
            from,
            to,
            seconds: took.as_secs_f64(),
            moved,
            minimum,
        });
    }

    // Steady membership: nothing should change hands; the store traffic is the renewals,
    // listings and checkpoints of a settled pool.
    let steady = opts.steady;
    note(format!(
        "{} instances, steady for {steady:?}",
        app.live().len()
    ));
    let before = app.scrape().await?;
    let started = Instant::now();
    let changed_hands = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let progress_line = {
        let changes = changed_hands.clone();
        hubhost_process::progress::Progress::spawn(move || {
            format!(
                "bench pool: steady {:.0} of {:.0} s, {} ownership changes",
                started.elapsed().as_secs_f64(),
                steady.as_secs_f64(),
                changes.load(std::sync::atomic::Ordering::Relaxed)
            )
        })
    };
    let mut last = app.observer.snapshot().await?;
    let mut owners = OwnerHistory::default();
    owners.observe(&last);
    while started.elapsed() < steady {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = app.observer.snapshot().await?;
        // A partition that changed hands, or lost its owner for a moment (a lapse in renewal).
        let lapsed = last
            .owners
            .keys()
            .filter(|p| !now.owners.contains_key(*p))
            .count();
        let changed = owners.observe(&now) + lapsed;
        changed_hands.fetch_add(changed, std::sync::atomic::Ordering::Relaxed);
        last = now;
    }
    let after = app.scrape().await?;
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let per_instance: Vec<f64> = after
        .iter()
        .map(|(name, m)| {
            (m.storage_operations - before.get(name).map_or(0.0, |b| b.storage_operations))
                / minutes
        })
        .collect();
    figures.steady_seconds = started.elapsed().as_secs_f64();
    figures.steady_changes = changed_hands.load(std::sync::atomic::Ordering::Relaxed);
    let checkpoints: f64 = after
        .iter()
        .map(|(name, m)| m.checkpoints - before.get(name).map_or(0.0, |b| b.checkpoints))
        .sum();
    figures.checkpoint_writes_per_min = checkpoints / minutes / after.len().max(1) as f64;
    figures.storage_ops_per_min = (
        per_instance.iter().sum::<f64>() / per_instance.len().max(1) as f64,
        per_instance.iter().copied().fold(0.0, f64::max),
    );
    drop(progress_line);
    note(format!(
        "steady: {} ownership changes in {:.0} s; {:.0} storage operations per minute per instance",
        figures.steady_changes, figures.steady_seconds, figures.storage_ops_per_min.0
    ));

    // Graceful stop: the instance checkpoints and relinquishes; the others take over at once.
    let (moved, seconds) = departure(&mut app, "i4", Departure::Graceful).await?;
    figures.handoff_seconds = seconds;
    note(format!(
        "graceful stop: {moved} partitions processed by the others {seconds:.2} s after SIGTERM"
    ));
    // Crash: the survivors wait for the dead owner's records to expire, then take over from
    // its last checkpoints.
    let (moved, seconds) = departure(&mut app, "i3", Departure::Crash).await?;
    figures.takeover_seconds = seconds;
    note(format!(
        "kill -9: {moved} partitions processed by the survivors {seconds:.2} s later"
    ));
    // Restart: the same id finds its ownerships live and renews them in its first cycle.
    let (mine, seconds) = restart(&mut app, "i1").await?;
    figures.restart_reclaim_seconds = seconds;
    figures.restart_partitions = mine;
    note(format!(
        "restart: kill -9 and start under the same id; its {mine} partitions processed by it again {seconds:.2} s later (expiry {} s)",
        EXPIRY.as_secs()
    ));
    app.stop_all().await
}

pub async fn run(opts: PoolBenchOptions) -> Result<PoolFigures, PoolBenchError> {
    eprintln!(
        "bench pool: {} partitions; host.json maxEventBatchSize {}, prefetchCount {}; hubhost's balancer defaults (cycle 1.5 s, expiry {} s)",
        opts.partitions,
        opts.max_batch,
        opts.prefetch,
        EXPIRY.as_secs()
    );
    let mut figures = PoolFigures::default();

    let hub = HubProcess::start(&opts.work_dir.join("hub-throughput"), opts.partitions)?;
    note(format!(
        "prefilling the hub with {} readings of {} homes (the simulator, unthrottled)",
        opts.events, opts.homes
    ));
    let sent = simulate::run(
        &hub.target,
        SimulateOptions {
            homes: opts.homes,
            seed: 1,
            start: chrono::Utc::now() - chrono::Duration::hours(1),
            pace: Pace::Unthrottled,
            stop: StopAfter {
                events: Some(opts.events),
                ..Default::default()
            },
            progress: true,
        },
        std::future::pending(),
    )
    .await?;
    let ends = hub.target.partition_ends().await?;
    let mut expected = vec![0u64; opts.partitions as usize];
    for end in &ends {
        if let Some(slot) = end
            .partition_id
            .parse::<usize>()
            .ok()
            .and_then(|p| expected.get_mut(p))
        {
            *slot = (end.last_sequence_number + 1).max(0) as u64;
        }
    }
    let total: u64 = expected.iter().sum();
    note(format!(
        "{total} events in the hub ({} simulated minutes)",
        sent.minutes
    ));
    let mut baselines = Vec::new();
    figures.throughput = opts
        .pools
        .iter()
        .map(|&instances| Throughput {
            instances,
            events_per_s: 0.0,
            runs: Vec::new(),
            traced_runs: Vec::new(),
        })
        .collect();
    for repetition in 1..=opts.repeat {
        let (baseline, baseline_cpu) = in_this_process(hub.pid(), total, async {
            rust_consumer(&hub.target, &expected, opts.prefetch).await
        })
        .await?;
        baselines.push(baseline);
        note(format!(
            "repetition {repetition} of {}: baseline: the SDK consumer alone reads {baseline:.0} events/s",
            opts.repeat
        ));
        let (floor, floor_cpu) = in_this_process(hub.pid(), total, async {
            contract_floor(&hub.target, &expected, opts.prefetch, reference_trigger()).await
        })
        .await?;
        note(format!(
            "contract floor: the SDK consumer with the host's encode and the handler's decode reads {floor:.0} events/s"
        ));
        // With tracing, the traced run goes first in odd repetitions and second in even ones,
        // so neither side always gets the warmer machine.
        let traced_first = repetition % 2 == 1;
        for entry in &mut figures.throughput {
            let count = entry.instances;
            if traced_first
                && let Some(traced) = traced_throughput(&hub, &opts, count, total).await?
            {
                entry.traced_runs.push(traced);
            }
            let run = throughput(&hub, &opts, count, total, None).await?;
            let (rate, startup, duplicates) =
                (run.events_per_s, run.startup_seconds, run.duplicates);
            note(format!(
                "{count} instance(s): {rate:.0} events/s end to end, {:.2}× the baseline ({startup:.1} s to the first checkpoint, {duplicates} duplicates)",
                rate / baseline.max(1e-9)
            ));
            entry.runs.push(ThroughputRun {
                events_per_s: rate,
                baseline_events_per_s: baseline,
                startup_seconds: startup,
                duplicates,
                cpu: run.cpu,
                baseline_cpu,
                floor_events_per_s: floor,
                floor_cpu,
            });
            if !traced_first
                && let Some(traced) = traced_throughput(&hub, &opts, count, total).await?
            {
                entry.traced_runs.push(traced);
            }
            if repetition == 1 && count != 4 {
                figures.drain.push(Drain {
                    pool: format!("{count} instance{}", if count == 1 { "" } else { "s" }),
                    seconds: run.drained_seconds,
                    instance_seconds: run.drained_seconds * count as f64,
                    max_instances: count,
                });
            }
        }
    }
    figures.baseline_events_per_s = median_and_range(baselines).0;
    for entry in &mut figures.throughput {
        entry.events_per_s = median_and_range(entry.runs.iter().map(|r| r.events_per_s)).0;
    }
    if !opts.throughput_only {
        let drain = scale_drain(&hub, &opts, total).await?;
        note(format!(
            "--scale: drained {total} events in {:.1} s, {:.0} instance-seconds, at most {} instances",
            drain.seconds, drain.instance_seconds, drain.max_instances
        ));
        figures.drain.push(drain);
    }
    drop(hub);
    if !opts.throughput_only {
        let hub = HubProcess::start(&opts.work_dir.join("hub-membership"), opts.partitions)?;
        membership(&hub, &opts, &mut figures).await?;
    }
    if opts.json {
        println!(
            "{}",
            serde_json::to_string(&figures).expect("figures are JSON")
        );
    } else if opts.throughput_only {
        print_throughput(&figures, &opts);
    } else {
        print(&figures, &opts);
    }
    Ok(figures)
}

/// The throughput rows: per pool, the median rate, and the median and range of its
/// efficiency (its rate over the baseline's in the same repetition).
fn print_throughput(f: &PoolFigures, opts: &PoolBenchOptions) {
    println!(
        "  {:<56} {:>12}  {:>24}",
        format!("end to end ({} repetition(s))", opts.repeat),
        "median ev/s",
        "efficiency median (range)"
    );
    for t in &f.throughput {
        let (median, low, high) = median_and_range(t.runs.iter().map(ThroughputRun::efficiency));
        let startup = median_and_range(t.runs.iter().map(|r| r.startup_seconds)).0;
        let duplicates = median_and_range(t.runs.iter().map(|r| r.duplicates as f64)).0;
        println!(
            "  {:<56} {:>12.0}  {:>24}",
            format!(
                "{} instance(s) (start-up {startup:.1} s, {duplicates:.0} dups)",
                t.instances
            ),
            t.events_per_s,
            format!("{median:.2}× ({low:.2}–{high:.2})")
        );
    }
    let (median, low, high) = median_and_range(
        f.throughput
            .first()
            .into_iter()
            .flat_map(|t| t.runs.iter().map(|r| r.baseline_events_per_s)),
    );
    println!(
        "  {:<56} {:>12.0}  {:>24}",
        "baseline: the SDK consumer alone, no handler",
        median,
        format!("1.00× ({low:.0}–{high:.0} ev/s)")
    );
    if let Some(t) = f.throughput.first() {
        let floor = median_and_range(t.runs.iter().map(|r| r.floor_events_per_s)).0;
        let (median, low, high) = median_and_range(
            t.runs
                .iter()
                .map(|r| r.floor_events_per_s / r.baseline_events_per_s.max(1e-9)),
        );
        println!(
            "  {:<56} {:>12.0}  {:>24}",
            "contract floor: the consumer + the host's encode + decode",
            floor,
            format!("{median:.2}× ({low:.2}–{high:.2})")
        );
    }
    println!();
    println!(
        "  {:<56} {:>8} {:>10} {:>9} {:>7}",
        "CPU µs per event (medians)", "hub", "instances", "handlers", "total"
    );
    let cpu_row = |what: String, runs: &[PipelineCpu]| {
        let median = |f: fn(&PipelineCpu) -> f64| median_and_range(runs.iter().map(f)).0;
        println!(
            "  {what:<56} {:>8.1} {:>10.1} {:>9.1} {:>7.1}",
            median(|c| c.hub),
            median(|c| c.instances),
            median(|c| c.handlers),
            median(PipelineCpu::total)
        );
    };
    for t in &f.throughput {
        let runs: Vec<PipelineCpu> = t.runs.iter().map(|r| r.cpu).collect();
        cpu_row(format!("{} instance(s)", t.instances), &runs);
        if !t.traced_runs.is_empty() {
            let runs: Vec<PipelineCpu> = t.traced_runs.iter().map(|r| r.cpu).collect();
            cpu_row(format!("{} instance(s), tracing on", t.instances), &runs);
        }
    }
    if let Some(t) = f.throughput.first() {
        let runs: Vec<PipelineCpu> = t.runs.iter().map(|r| r.baseline_cpu).collect();
        cpu_row("baseline (instances: the SDK consumer)".into(), &runs);
        let runs: Vec<PipelineCpu> = t.runs.iter().map(|r| r.floor_cpu).collect();
        cpu_row(
            "contract floor (instances: consumer + encode + decode)".into(),
            &runs,
        );
    }
    print_tracing(f);
}

/// With `--tracing`: per pool, the rate with tracing on against the rate without it in the
/// same repetition, and the CPU tracing adds per event.
fn print_tracing(f: &PoolFigures) {
    if f.throughput.iter().all(|t| t.traced_runs.is_empty()) {
        return;
    }
    println!();
    println!(
        "  {:<56} {:>12}  {:>24} {:>14} {:>8}",
        "tracing on (stamped readings both ways)",
        "median ev/s",
        "of off, median (range)",
        "CPU µs/event",
        "spans"
    );
    for t in &f.throughput {
        let pairs = t.traced_runs.iter().zip(&t.runs);
        let (median, low, high) = median_and_range(
            pairs
                .clone()
                .map(|(on, off)| on.events_per_s / off.events_per_s),
        );
        let added = median_and_range(pairs.map(|(on, off)| on.cpu.total() - off.cpu.total())).0;
        let rate = median_and_range(t.traced_runs.iter().map(|r| r.events_per_s)).0;
        let spans = median_and_range(t.traced_runs.iter().map(|r| r.spans as f64)).0;
        println!(
            "  {:<56} {:>12.0}  {:>24} {:>14} {:>8.0}",
            format!("{} instance(s)", t.instances),
            rate,
            format!(
                "{:.0}% ({:.0}–{:.0}%)",
                median * 100.0,
                low * 100.0,
                high * 100.0
            ),
            format!("+{added:.1}"),
            spans
        );
    }
}

fn print(f: &PoolFigures, opts: &PoolBenchOptions) {
    let row = |what: &str, figure: String, goal: &str, sdks: &str| {
        println!("  {what:<56} {figure:>22}  {goal:<9} {sdks}");
    };
    println!();
    row(
        "scenario",
        "hubhost".into(),
        "goal",
        "SDK defaults (derived)",
    );
    row(
        "crash takeover: kill -9 → every orphan processed",
        format!("{:.1} s", f.takeover_seconds),
        "≤ 10 s",
        ".NET/Java ≈150 s, Go/Python ≈72 s",
    );
    row(
        "restart: kill -9 + start, same id → its partitions processed",
        format!(
            "{:.1} s ({} partitions)",
            f.restart_reclaim_seconds, f.restart_partitions
        ),
        "< expiry",
        "new id each start: expiry + cycle, host ≈150 s",
    );
    row(
        "graceful handoff: SIGTERM → every partition processed",
        format!("{:.2} s", f.handoff_seconds),
        "≤ 2 s",
        "one interval: .NET/Java 30 s, Go/Python 10 s",
    );
    for ScaleOut {
        from,
        to,
        seconds,
        moved,
        minimum,
    } in &f.scale_out
    {
        row(
            &format!("scale-out {from} → {to}: time to ±1 balance"),
            format!("{seconds:.1} s"),
            "",
            "",
        );
        row(
            &format!("scale-out {from} → {to}: partitions moved (minimum)"),
            format!("{moved} ({minimum})"),
            "minimum",
            "",
        );
    }
    row(
        &format!(
            "ownership changes, {:.0} s steady membership",
            f.steady_seconds
        ),
        f.steady_changes.to_string(),
        "0",
        "",
    );
    print_throughput(f, opts);
    row(
        "checkpoint store operations / min / instance",
        format!(
            "{:.0} (max {:.0})",
            f.storage_ops_per_min.0, f.storage_ops_per_min.1
        ),
        "",
        "",
    );
    row(
        "  of which the balancer (lists, renewals, claims)",
        format!(
            "{:.0}",
            f.storage_ops_per_min.0 - f.checkpoint_writes_per_min
        ),
        "",
        "SDKs: 1 list + 1 renewal per owned partition per cycle",
    );
    let one = f
        .drain
        .first()
        .map(|d| (d.seconds, d.instance_seconds))
        .unwrap_or((1.0, 1.0));
    for d in &f.drain {
        row(
            &format!(
                "backlog of {} drained: {} (max {} running)",
                opts.events, d.pool, d.max_instances
            ),
            format!(
                "{:.1} s, {:.0} inst·s ({:.2}×, {:.2}×)",
                d.seconds,
                d.instance_seconds,
                d.seconds / one.0.max(1e-9),
                d.instance_seconds / one.1.max(1e-9)
            ),
            "",
            "",
        );
    }
    println!(
        "  ({} events prefilled; membership scenarios at {} events/s from the simulator; --scale decides every {:?}; drain ratios are against 1 instance)",
        opts.events, opts.rate, opts.scale_interval
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(owners: &[(&str, &str)]) -> Snapshot {
        Snapshot {
            owners: owners
                .iter()
                .map(|(p, o)| (p.to_string(), o.to_string()))
                .collect(),
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_move_counts_once_even_through_a_moment_without_owner() {
        let mut history = OwnerHistory::default();
        assert_eq!(history.observe(&snapshot(&[("0", "a"), ("1", "a")])), 0);
        // Partition 0 relinquished (no active owner), then claimed by b; 1 stolen directly.
        assert_eq!(history.observe(&snapshot(&[("1", "b")])), 1);
        assert_eq!(history.observe(&snapshot(&[("0", "b"), ("1", "b")])), 1);
        // Back to its last owner after a lapse: not a move.
        assert_eq!(history.observe(&snapshot(&[("1", "b")])), 0);
        assert_eq!(history.observe(&snapshot(&[("0", "b"), ("1", "b")])), 0);
    }

    #[test]
    fn minimum_moves_counts_only_what_balance_requires() {
        // Growing 1 → 2 and 2 → 4 over 16 partitions.
        assert_eq!(minimum_moves(&[16], 2, 16), 8);
        assert_eq!(minimum_moves(&[8, 8], 4, 16), 8);
        // Already balanced: nothing moves.
        assert_eq!(minimum_moves(&[4, 4, 4, 4], 4, 16), 0);
        assert_eq!(minimum_moves(&[6, 5, 5], 3, 16), 0);
        // 3 → 2 after a crash: the dead owner's five partitions (its share is gone).
        assert_eq!(minimum_moves(&[6, 5], 2, 16), 5);
        // Uneven: the holder of 7 keeps 6 (one of the larger quotas), 1 moves; orphans move.
        assert_eq!(minimum_moves(&[7, 5, 4], 3, 16), 1);
        assert_eq!(minimum_moves(&[], 3, 16), 16);
    }
}

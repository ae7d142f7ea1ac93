//! `hubhost bench chaos`: a pool of `hubhost emulate` instances running the reference app
//! (`SensorAggregator` and `RawArchive`, handled by `hubhost serve`) on a persistent
//! `hubhost hub`, with a producer feeding it, while seeded random faults hit every part:
//! instances and handlers killed, instances frozen past their ownership expiry, the hub killed,
//! the store taken away, graceful restarts (`faults.rs`). Everything is a real process.
//!
//! Watched from outside while it runs (a poll of the store every 250 ms): every checkpoint
//! value (none may move back) and how long each partition goes without a running owner. After
//! each fault, the time until every partition of both consumer groups has a running owner
//! and has been checkpointed past where it stood. At the end, with the pool drained: the hub's
//! events against the app's aggregates, archive and dead letters, and the deliveries the
//! instances logged (`audit.rs`). Any violation fails the command after the report.

pub mod audit;
pub mod faults;
mod parts;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use audit::{AggregatedHomes, AppState, CheckpointLog, Coverage, DataVerdict, Deliveries};
use faults::{Fault, FaultBounds, FaultKind};
use parts::{HUB, HubProcess, Producer, Store};

use hubhost_app::aggregate::WindowAggregate;
use hubhost_app::archive::ArchiveChunk;
use hubhost_checkpoints::{CheckpointStore, ConsumerGroupKey, DEFAULT_CONTAINER};
use hubhost_storage::{SharedStore, StorageLocation};
use hubhost_testkit::pool::{AppFolder, EmulatePool, PoolError};

const AGGREGATOR_FUNCTION_JSON: &str =
    include_str!("../../../../function_app/SensorAggregator/function.json");
const ARCHIVE_FUNCTION_JSON: &str =
    include_str!("../../../../function_app/RawArchive/function.json");
const CONSUMER_GROUPS: [&str; 2] = ["$Default", "archive"];
/// hubhost's default ownership expiry and the longest balancer cycle (1.5 s + 30% jitter).
const EXPIRY: Duration = Duration::from_secs(6);
const CYCLE: Duration = Duration::from_millis(1_950);
/// What observing adds to an interval without owner: one poll, and a listing's own time.
const OBSERVATION_SLACK: Duration = Duration::from_millis(1_000);
const POLL: Duration = Duration::from_millis(250);
/// A fault not recovered from within this long counts as a failure.
const RECOVERY_LIMIT: Duration = Duration::from_secs(120);
const WINDOW_SECONDS: u32 = 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreChoice {
    Directory,
    Azurite,
}

#[derive(Debug, Clone)]
pub struct ChaosOptions {
    /// Faults per store.
    pub faults: usize,
    pub seed: u64,
    pub stores: Vec<StoreChoice>,
    pub instances: usize,
    /// Events per second the producer sends.
    pub rate: u32,
    /// Storage outages last between these.
    pub outage: (Duration, Duration),
    /// The kinds to draw (all when empty).
    pub kinds: Vec<FaultKind>,
    pub json: bool,
    pub work_dir: PathBuf,
    /// Azurite's `azurite-blob` (needed for the Azurite store).
    pub azurite: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// A part of the run (hub, store, producer) could not be started, broken or mended.
    #[error("{0}")]
    Part(String),
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Checkpoint(#[from] hubhost_checkpoints::CheckpointError),
    #[error(transparent)]
    Store(#[from] hubhost_storage::StoreError),
    /// The run finished and found violations (listed in its report).
    #[error("the chaos run found {0} problem(s); see the report above")]
    Violations(usize),
}

/// One fault as it happened.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FaultRecord {
    pub fault: Fault,
    /// Seconds into the run.
    pub at: f64,
    /// Seconds from the fault (for the hub and the store: from their return) until every
    /// partition had a running owner and progressed; `None`: not within the limit.
    pub recovery: Option<f64>,
    /// When not recovered: the partitions that were not, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stuck: Vec<String>,
    /// A frozen instance held these partitions' ownership blob locks (local directory store):
    /// nobody could claim them until it resumed, so their time without an owner counts from
    /// then (see `crates/storage/src/local.rs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked_by_frozen_lock: Vec<String>,
}

/// The figures of one store's run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ChaosFigures {
    pub store: String,
    pub seed: u64,
    pub seconds: f64,
    pub faults: Vec<FaultRecord>,
    /// Instances that exited on their own (a handler that kept dying) and were started again,
    /// as the platform replaces an instance.
    pub replaced_instances: usize,
    pub checkpoint_changes_seen: u64,
    pub checkpoints_moved_back: Vec<audit::Backwards>,
    /// The longest time a partition had no running owner, and the limit (expiry + one cycle).
    pub longest_unowned: f64,
    pub unowned_limit: f64,
    pub unowned_over_limit: usize,
    pub acknowledged: u64,
    pub failed_sends: u64,
    pub data: DataVerdict,
    /// Events delivered (answered) by the functions, and of those delivered again.
    pub delivered: u64,
    pub delivered_again: u64,
    /// The pool had processed every event at the end.
    pub drained: bool,
    /// Polls of the store that failed (while it was away, as a rule).
    pub failed_polls: u64,
    pub problems: Vec<String>,
}

/// What the watcher sees of the pool, and what the driver tells it.
#[derive(Default)]
struct Watch {
    /// Instances alive and not frozen (set by the driver).
    running: BTreeSet<String>,
    /// The store is taken away now (set by the driver).
    store_down: bool,
    /// Partitions whose ownership blob's lock a frozen instance holds (set by the driver).
    lock_blocked: BTreeSet<audit::PartitionKey>,
    checkpoints: CheckpointLog,
    coverage: Coverage,
    /// Per (consumer group, partition): its active owner.
    owners: BTreeMap<audit::PartitionKey, String>,
    failed_polls: u64,
}

impl Watch {
    fn served(&self, key: &audit::PartitionKey) -> bool {
        self.owners
            .get(key)
            .is_some_and(|o| self.running.contains(o))
    }
}

fn keys(partitions: usize) -> Vec<audit::PartitionKey> {
    CONSUMER_GROUPS
        .iter()
        .flat_map(|cg| (0..partitions).map(move |p| (cg.to_lowercase(), p.to_string())))
        .collect()
}

/// The partitions of both groups whose ownership blob's lock the process `pid` holds in the
/// local directory store at `root` (an `flock` on a lock file: `/proc/locks`).
fn frozen_locks(root: &Path, pid: u32, partitions: usize) -> BTreeSet<audit::PartitionKey> {
    use std::os::unix::fs::MetadataExt;
    let held = audit::flocked_inodes(
        &std::fs::read_to_string("/proc/locks").unwrap_or_default(),
        pid,
    );
    keys(partitions)
        .into_iter()
        .filter(|(cg, p)| {
            ConsumerGroupKey::new("localhost", HUB, cg.as_str())
                .and_then(|k| k.ownership_blob(p))
                .ok()
                .map(|blob| hubhost_storage::local::lock_file(root, DEFAULT_CONTAINER, &blob))
                .and_then(|lock| std::fs::metadata(lock).ok())
                .is_some_and(|m| held.contains(&m.ino()))
        })
        .collect()
}

fn note(line: impl AsRef<str>) {
    eprintln!("bench chaos: {}", line.as_ref());
}

/// Polls the store until `stop`: owners and checkpoints of both consumer groups.
async fn watch(
    store: CheckpointStore,
    watch: Arc<Mutex<Watch>>,
    started: Instant,
    partitions: usize,
    stop: tokio_util::sync::CancellationToken,
) {
    let limit = (EXPIRY + CYCLE + OBSERVATION_SLACK).as_secs_f64();
    let groups: Vec<ConsumerGroupKey> = CONSUMER_GROUPS
        .iter()
        .map(|cg| ConsumerGroupKey::new("localhost", HUB, *cg).expect("valid names"))
        .collect();
    while !stop.is_cancelled() {
        let mut seen = Vec::new();
        let mut ok = true;
        for key in &groups {
            let owners = hubhost_testkit::pool::live_owners(&store, key).await;
            let checkpoints = store.list_checkpoints(key).await;
            match (owners, checkpoints) {
                (Ok(o), Ok(c)) => seen.push((key.consumer_group.to_lowercase(), o, c.items)),
                _ => ok = false,
            }
        }
        let at = started.elapsed().as_secs_f64();
        {
            let mut w = watch.lock().expect("watch lock");
            if ok {
                w.owners.clear();
                for (cg, owners, checkpoints) in seen {
                    for (p, o) in owners {
                        w.owners.insert((cg.clone(), p), o);
                    }
                    for c in checkpoints {
                        if let Some(seq) = c.sequence_number {
                            w.checkpoints
                                .observe(&(cg.clone(), c.partition_id), seq, at);
                        }
                    }
                }
                let down = w.store_down;
                for key in keys(partitions) {
                    let served = w.served(&key);
                    let excused = down || w.lock_blocked.contains(&key);
                    w.coverage.observe(&key, served, excused, at, limit);
                }
            } else {
                w.failed_polls += 1;
                if w.store_down {
                    // Nothing can be renewed while the store is away: the clock starts after.
                    for key in keys(partitions) {
                        w.coverage.observe(&key, false, true, at, limit);
                    }
                }
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The pool under test and the parts around it.
struct Rig {
    hub: HubProcess,
    store: Store,
    pool: EmulatePool,
    logs: PathBuf,
    names: Vec<String>,
    /// Incarnations per instance name (to keep each one's log).
    starts: BTreeMap<String, usize>,
    watch: Arc<Mutex<Watch>>,
    started: Instant,
    partitions: usize,
    replaced: usize,
}

impl Rig {
    fn start_instance(&mut self, name: &str) -> Result<(), ChaosError> {
        let n = self.starts.entry(name.to_string()).or_default();
        if *n > 0 {
            for ext in ["log", "out"] {
                let _ = std::fs::rename(
                    self.logs.join(format!("{name}.{ext}")),
                    self.logs.join(format!("{name}.{n}.{ext}")),
                );
            }
        }
        *n += 1;
        self.pool.start(
            name,
            &[
                // The function logs are how deliveries are counted; more (e.g.
                // `hubhost_processor=debug`, to follow a pump) with HUBHOST_CHAOS_LOG.
                (
                    "RUST_LOG",
                    match std::env::var("HUBHOST_CHAOS_LOG") {
                        Ok(more) => format!("warn,hubhost::function=debug,{more}"),
                        Err(_) => "warn,hubhost::function=debug".to_string(),
                    },
                ),
                (
                    "HUBHOST_INSTANCE_LOCKS",
                    self.logs.join("locks").display().to_string(),
                ),
            ],
        )?;
        self.set_running(name, true);
        Ok(())
    }

    fn set_running(&self, name: &str, running: bool) {
        let mut w = self.watch.lock().expect("watch lock");
        if running {
            w.running.insert(name.to_string());
        } else {
            w.running.remove(name);
        }
    }

    /// An instance that exited on its own (its handler kept dying: the emulated host gives up
    /// as the real one does) is started again, as the platform replaces an instance.
    fn replace_exited(&mut self) -> Result<(), ChaosError> {
        for name in self.pool.live() {
            if let Some(status) = self.pool.exited(&name) {
                note(format!(
                    "{name} exited on its own ({status}); starting it again"
                ));
                self.pool.take(&name);
                self.set_running(&name, false);
                self.replaced += 1;
                self.start_instance(&name)?;
            }
        }
        Ok(())
    }

    fn checkpoints_now(&self) -> BTreeMap<audit::PartitionKey, Option<i64>> {
        let w = self.watch.lock().expect("watch lock");
        keys(self.partitions)
            .into_iter()
            .map(|k| {
                let v = w.checkpoints.get(&k);
                (k, v)
            })
            .collect()
    }

    /// Every partition of both groups has a running owner and is checkpointed past `since`.
    fn recovered(&self, since: &BTreeMap<audit::PartitionKey, Option<i64>>) -> bool {
        let w = self.watch.lock().expect("watch lock");
        since.iter().all(|(k, before)| {
            w.served(k)
                && w.checkpoints
                    .get(k)
                    .is_some_and(|now| before.is_none_or(|b| now > b))
        })
    }

    /// The partitions not recovered since `since`, each with what held it back.
    fn stuck(&self, since: &BTreeMap<audit::PartitionKey, Option<i64>>) -> Vec<String> {
        let w = self.watch.lock().expect("watch lock");
        since
            .iter()
            .filter_map(|(k, before)| {
                let owner = w.owners.get(k);
                let now = w.checkpoints.get(k);
                let why = if !w.served(k) {
                    format!("no running owner (owner in the store: {owner:?})")
                } else if now.is_none_or(|n| before.is_some_and(|b| n <= b)) {
                    format!(
                        "owned by {} but its checkpoint stayed at {now:?}",
                        owner.map(String::as_str).unwrap_or("?")
                    )
                } else {
                    return None;
                };
                Some(format!("{} partition {}: {why}", k.0, k.1))
            })
            .collect()
    }

    /// How many intervals without owner have gone past the limit so far.
    fn over_limit_count(&self) -> usize {
        self.watch
            .lock()
            .expect("watch lock")
            .coverage
            .over_limit
            .len()
    }

    /// Prints the last warnings and errors of every instance: what a run nobody watched (CI)
    /// leaves to go by when a fault was not recovered from or left a partition without owner.
    fn tell_what_the_instances_said(&self) {
        for name in &self.names {
            let log =
                std::fs::read_to_string(self.logs.join(format!("{name}.log"))).unwrap_or_default();
            let said: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .collect();
            for line in &said[said.len().saturating_sub(8)..] {
                note(format!("{name} said: {line}"));
            }
        }
    }

    /// The handler process an instance started, once it has one.
    async fn handler_pid(&self, name: &str) -> Option<u32> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(pid) = self.pool.handler_pid(name, "serve") {
                return Some(pid);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn inject(&mut self, fault: &Fault) -> Result<FaultRecord, ChaosError> {
        let at = self.started.elapsed().as_secs_f64();
        let name = self.names[fault.instance % self.names.len()].clone();
        let began = Instant::now();
        // What ends the fault, and when.
        let mut mend_at: Option<Instant> = None;
        let mut frozen: Vec<i32> = Vec::new();
        let mut blocked = BTreeSet::new();
        match fault.kind {
            FaultKind::KillInstance => {
                self.set_running(&name, false);
                if self.pool.pid(&name).is_some() {
                    self.pool.kill_9(&name)?;
                }
                mend_at = Some(began + fault.hold);
            }
            FaultKind::KillHandler => {
                if let Some(pid) = self.handler_pid(&name).await {
                    // SAFETY: kill(2) has no memory-safety preconditions.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                } else {
                    note(format!("{name} had no handler to kill"));
                }
            }
            FaultKind::Freeze => {
                self.set_running(&name, false);
                let handler = self.pool.handler_pid(&name, "serve");
                frozen = self
                    .pool
                    .pid(&name)
                    .into_iter()
                    .chain(handler)
                    .map(|p| p as i32)
                    .collect();
                for pid in &frozen {
                    // SAFETY: as above.
                    unsafe { libc::kill(*pid, libc::SIGSTOP) };
                }
                if let (Store::Directory { path, .. }, Some(instance)) =
                    (&self.store, frozen.first())
                {
                    blocked = frozen_locks(path, *instance as u32, self.partitions);
                    if !blocked.is_empty() {
                        note(format!(
                            "{name} was frozen holding the ownership lock of {blocked:?}: nobody can claim them until it resumes"
                        ));
                    }
                    self.watch.lock().expect("watch lock").lock_blocked = blocked.clone();
                }
                mend_at = Some(began + fault.hold);
            }
            FaultKind::GracefulRestart => {
                self.set_running(&name, false);
                if self.pool.pid(&name).is_some() {
                    self.pool.stop(&name).await?;
                }
                mend_at = Some(began + fault.hold);
            }
            FaultKind::KillHub => {
                self.hub.kill_9();
                tokio::time::sleep(fault.hold).await;
                self.hub.restart()?;
            }
            FaultKind::StorageOutage => {
                self.watch.lock().expect("watch lock").store_down = true;
                self.store.break_it()?;
                tokio::time::sleep(fault.hold).await;
                self.store.restore()?;
                let back = self.started.elapsed().as_secs_f64();
                let mut w = self.watch.lock().expect("watch lock");
                w.store_down = false;
                w.coverage.store_back(back);
            }
        }
        let over_limit_before = self.over_limit_count();
        let ready = match fault.kind {
            FaultKind::KillHub | FaultKind::StorageOutage => Instant::now(),
            _ => began,
        };
        let since = self.checkpoints_now();
        let mut recovery = None;
        loop {
            if mend_at.is_some_and(|t| Instant::now() >= t) {
                mend_at = None;
                match fault.kind {
                    FaultKind::Freeze => {
                        for pid in frozen.iter().rev() {
                            // SAFETY: as above.
                            unsafe { libc::kill(*pid, libc::SIGCONT) };
                        }
                        self.set_running(&name, true);
                        let resumed = self.started.elapsed().as_secs_f64();
                        let mut w = self.watch.lock().expect("watch lock");
                        let keys = std::mem::take(&mut w.lock_blocked);
                        w.coverage.unblocked(&keys, resumed);
                    }
                    _ => self.start_instance(&name)?,
                }
            }
            self.replace_exited()?;
            if recovery.is_none() && self.recovered(&since) {
                recovery = Some(ready.elapsed().as_secs_f64());
            }
            if mend_at.is_none() && recovery.is_some() {
                break;
            }
            if ready.elapsed() > RECOVERY_LIMIT && mend_at.is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let stuck = if recovery.is_none() {
            self.stuck(&since)
        } else {
            Vec::new()
        };
        if !stuck.is_empty() || self.over_limit_count() > over_limit_before {
            self.tell_what_the_instances_said();
        }
        tokio::time::sleep(fault.pause).await;
        Ok(FaultRecord {
            fault: fault.clone(),
            at,
            recovery,
            stuck,
            blocked_by_frozen_lock: blocked
                .iter()
                .map(|(cg, p)| format!("{cg} partition {p}"))
                .collect(),
        })
    }
}

/// Runs the chaos benchmark on every store asked for; prints a report per store.
pub async fn run(opts: ChaosOptions) -> Result<Vec<ChaosFigures>, ChaosError> {
    let mut all = Vec::new();
    for (i, choice) in opts.stores.iter().enumerate() {
        let dir = opts.work_dir.join(format!("run-{i}"));
        let figures = run_one(&opts, *choice, &dir).await?;
        if !opts.json {
            print(&figures);
        }
        all.push(figures);
    }
    if opts.json {
        println!("{}", serde_json::to_string(&all).expect("figures are JSON"));
    }
    let problems: usize = all.iter().map(|f| f.problems.len()).sum();
    if problems > 0 {
        return Err(ChaosError::Violations(problems));
    }
    Ok(all)
}

async fn run_one(
    opts: &ChaosOptions,
    choice: StoreChoice,
    dir: &Path,
) -> Result<ChaosFigures, ChaosError> {
    let io = |e: std::io::Error| ChaosError::Part(e.to_string());
    std::fs::create_dir_all(dir).map_err(io)?;
    let store = match choice {
        StoreChoice::Directory => {
            parts::can_break_a_directory(&dir.join("probe"))?;
            Store::directory(&dir.join("store"))?
        }
        StoreChoice::Azurite => {
            let program = opts.azurite.as_deref().ok_or_else(|| {
                ChaosError::Part(
                    "the Azurite store needs Azurite: --azurite or HUBHOST_AZURITE_BIN".into(),
                )
            })?;
            Store::azurite(program, &dir.join("azurite"))?
        }
    };
    let hub = HubProcess::start(&dir.join("hub"))?;
    let partitions = 16;
    let schedule = faults::schedule(
        opts.seed,
        opts.faults,
        &FaultBounds {
            instances: opts.instances,
            expiry: EXPIRY,
            outage: opts.outage,
            kinds: opts.kinds.clone(),
        },
    );
    note(format!(
        "{} store: {} instances, {} faults (seed {}), the producer at {} events/s",
        store.name(),
        opts.instances,
        schedule.len(),
        opts.seed,
        opts.rate
    ));
    let exe = crate::hubhost_exe().map_err(io)?;
    let app = dir.join("app");
    AppFolder {
        handler: (&exe, &["serve"]),
        functions: &[
            ("SensorAggregator", AGGREGATOR_FUNCTION_JSON),
            ("RawArchive", ARCHIVE_FUNCTION_JSON),
        ],
        max_batch: 100,
        prefetch: 300,
        ownership_expiry: None,
        values: &[
            ("AzureWebJobsStorage", store.setting()),
            ("EventHubConnection", hub.connection_string.clone()),
            ("EventHubName", HUB.to_string()),
        ],
    }
    .write(&app)?;
    let logs = dir.join("instances");
    std::fs::create_dir_all(&logs).map_err(io)?;
    let blobs = StorageLocation::parse(&store.setting())
        .map_err(|e| ChaosError::Part(e.to_string()))?
        .open()?;
    let checkpoints = CheckpointStore::new(blobs.clone(), DEFAULT_CONTAINER);
    let started = Instant::now();
    let shared = Arc::new(Mutex::new(Watch::default()));
    let stop_watching = tokio_util::sync::CancellationToken::new();
    let watcher = tokio::spawn(watch(
        checkpoints,
        shared.clone(),
        started,
        partitions,
        stop_watching.clone(),
    ));
    let mut rig = Rig {
        pool: EmulatePool::new(&exe, &app, &logs),
        hub,
        store,
        logs,
        names: (1..=opts.instances).map(|i| format!("c{i}")).collect(),
        starts: BTreeMap::new(),
        watch: shared.clone(),
        started,
        partitions,
        replaced: 0,
    };
    let producer = Producer::start(rig.hub.target()?, opts.rate, opts.seed);
    for name in rig.names.clone() {
        rig.start_instance(&name)?;
    }
    // Warm-up: every partition of both groups owned and checkpointed once.
    let none: BTreeMap<_, _> = keys(partitions).into_iter().map(|k| (k, None)).collect();
    let warm = Instant::now();
    while !rig.recovered(&none) {
        rig.replace_exited()?;
        if warm.elapsed() > Duration::from_secs(120) {
            return Err(ChaosError::Part(
                "the pool did not start processing every partition within 120 s".into(),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
    note(format!(
        "every partition processed after {:.1} s; injecting faults",
        warm.elapsed().as_secs_f64()
    ));

    let mut records = Vec::new();
    for (i, fault) in schedule.iter().enumerate() {
        let record = rig.inject(fault).await?;
        note(format!(
            "fault {}/{}: {} {} (hold {:.1} s): {}",
            i + 1,
            schedule.len(),
            fault.kind.name(),
            if fault.kind.hits_an_instance() {
                rig.names[fault.instance % rig.names.len()].as_str()
            } else {
                ""
            },
            fault.hold.as_secs_f64(),
            record
                .recovery
                .map(|s| format!("recovered in {s:.1} s"))
                .unwrap_or_else(|| "NOT RECOVERED".into())
        ));
        records.push(record);
    }

    // The end: stop producing, let the pool drain, then read everything back.
    let tally = producer.stop().await;
    let target = rig.hub.target()?;
    let drained = drain(&mut rig, &target).await;
    note(if drained {
        "drained: every partition of both groups checkpointed at its last event"
    } else {
        "NOT drained within 180 s"
    });
    stop_watching.cancel();
    let _ = watcher.await;
    let mut problems = Vec::new();
    if let Err(e) = rig.pool.stop_all().await {
        problems.push(format!("a graceful stop at the end failed: {e}"));
    }
    let events = parts::read_hub(&target).await?;
    let state = read_app(&blobs).await?;
    let acknowledged = tally.acknowledged.lock().expect("tally lock").clone();
    let data = audit::judge_data(&events, &acknowledged, &state, WINDOW_SECONDS);
    let mut deliveries = Deliveries::default();
    for entry in std::fs::read_dir(&rig.logs).map_err(io)?.flatten() {
        if entry.path().extension().is_some_and(|e| e == "log") {
            deliveries.add_log(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    let (delivered, delivered_again) = deliveries.counts();
    let limit = (EXPIRY + CYCLE + OBSERVATION_SLACK).as_secs_f64();
    let mut w = shared.lock().expect("watch lock");
    let at = started.elapsed().as_secs_f64();
    w.coverage.finish(at, limit);

    problems.extend(data.problems());
    if !drained {
        problems.push("the pool did not process every event within 180 s of the last".into());
    }
    for b in &w.checkpoints.backwards {
        problems.push(format!(
            "checkpoint of {} partition {} moved back from {} to {} at {:.1} s",
            b.consumer_group, b.partition, b.from, b.to, b.at
        ));
    }
    for ((cg, p), seconds, at) in &w.coverage.over_limit {
        problems.push(format!(
            "{cg} partition {p} had no running owner for {seconds:.1} s (until {at:.1} s; limit {limit:.1} s)"
        ));
    }
    for r in records.iter().filter(|r| r.recovery.is_none()) {
        problems.push(format!(
            "{} at {:.1} s: not recovered within {} s: {}",
            r.fault.kind.name(),
            r.at,
            RECOVERY_LIMIT.as_secs(),
            r.stuck.join("; ")
        ));
    }
    if data.poison == 0 || data.readings == 0 {
        problems.push("the hub holds no readings or no poison events: nothing was tested".into());
    }
    Ok(ChaosFigures {
        store: rig.store.name().to_string(),
        seed: opts.seed,
        seconds: at,
        faults: records,
        replaced_instances: rig.replaced,
        checkpoint_changes_seen: w.checkpoints.writes,
        checkpoints_moved_back: w.checkpoints.backwards.clone(),
        longest_unowned: w.coverage.longest,
        unowned_limit: limit,
        unowned_over_limit: w.coverage.over_limit.len(),
        acknowledged: tally
            .acknowledged_events
            .load(std::sync::atomic::Ordering::Relaxed),
        failed_sends: tally
            .failed_events
            .load(std::sync::atomic::Ordering::Relaxed),
        data,
        delivered,
        delivered_again,
        drained,
        failed_polls: w.failed_polls,
        problems,
    })
}

/// Waits until every partition of both groups is checkpointed at the hub's last event.
async fn drain(rig: &mut Rig, target: &hubhost_eventhubs::EventHubTarget) -> bool {
    let deadline = Instant::now() + Duration::from_secs(180);
    let Ok(ends) = target.partition_ends().await else {
        return false;
    };
    while Instant::now() < deadline {
        if rig.replace_exited().is_err() {
            return false;
        }
        let now = rig.checkpoints_now();
        let done = ends.iter().all(|end| {
            CONSUMER_GROUPS.iter().all(|cg| {
                end.last_sequence_number < 0
                    || now
                        .get(&(cg.to_lowercase(), end.partition_id.clone()))
                        .copied()
                        .flatten()
                        .is_some_and(|c| c >= end.last_sequence_number)
            })
        });
        if done {
            return true;
        }
        tokio::time::sleep(POLL).await;
    }
    false
}

/// The app's blobs: window blocks, archive chunks, dead letters.
async fn read_app(blobs: &SharedStore) -> Result<AppState, ChaosError> {
    let container = hubhost_app::layout::DEFAULT_CONTAINER;
    let mut state = AppState::default();
    for item in blobs.list(container, &format!("windows/{HUB}/")).await? {
        let Some(blob) = blobs.get(container, &item.name).await? else {
            continue;
        };
        let block: WindowAggregate = serde_json::from_slice(&blob.data)
            .map_err(|e| ChaosError::Part(format!("{}: {e}", item.name)))?;
        state.aggregates.push(AggregatedHomes {
            partition: block.partition.clone(),
            window: block.window_start,
            homes: block
                .homes
                .iter()
                .map(|(h, w)| (h.clone(), w.events))
                .collect(),
        });
    }
    for item in blobs
        .list(container, &format!("archive/{HUB}/archive/"))
        .await?
    {
        let Some(blob) = blobs.get(container, &item.name).await? else {
            continue;
        };
        let chunk: ArchiveChunk = serde_json::from_slice(&blob.data)
            .map_err(|e| ChaosError::Part(format!("{}: {e}", item.name)))?;
        state
            .archived
            .entry(chunk.partition.clone())
            .or_default()
            .extend(chunk.events.keys().copied());
    }
    for item in blobs
        .list(container, &format!("deadletter/{HUB}/$default/"))
        .await?
    {
        // deadletter/{hub}/{group}/p{partition}/{sequence}.json
        let mut parts = item.name.rsplit('/');
        let sequence = parts.next().and_then(|f| f.strip_suffix(".json"));
        let partition = parts.next().and_then(|p| p.strip_prefix('p'));
        if let (Some(s), Some(p)) = (sequence.and_then(|s| s.parse().ok()), partition) {
            state.dead_letters.insert((p.to_string(), s));
        }
    }
    Ok(state)
}

fn print(f: &ChaosFigures) {
    println!();
    println!(
        "chaos, {} store, seed {}: {} faults in {:.0} s",
        f.store,
        f.seed,
        f.faults.len(),
        f.seconds
    );
    println!(
        "  {:<18} {:>6} {:>14} {:>14} {:>12}",
        "fault", "count", "recovery p50", "recovery max", "unrecovered"
    );
    for kind in FaultKind::ALL {
        let of_kind: Vec<&FaultRecord> = f.faults.iter().filter(|r| r.fault.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let times: Vec<f64> = of_kind.iter().filter_map(|r| r.recovery).collect();
        let (p50, max) = audit::median_and_max(&times);
        println!(
            "  {:<18} {:>6} {:>12.1} s {:>12.1} s {:>12}",
            kind.name(),
            of_kind.len(),
            p50,
            max,
            of_kind.len() - times.len()
        );
    }
    let d = &f.data;
    println!(
        "  events in the hub: {} ({} readings, {} poison); acknowledged to the producer: {} ({} sends failed)",
        d.events, d.readings, d.poison, f.acknowledged, f.failed_sends
    );
    println!(
        "  delivered to the functions: {} events, {} of them more than once; readings applied more than once: {}",
        f.delivered, f.delivered_again, d.readings_applied_twice
    );
    println!(
        "  readings missing from the aggregates: {}; events missing from the archive: {}; poison without a dead letter: {}; dead letters of good readings: {}; acknowledged but not stored: {}",
        d.readings_not_applied,
        d.archive_missing,
        d.poison_not_dead_lettered,
        d.dead_letters_not_poison,
        d.acknowledged_not_stored
    );
    let blocked: usize = f
        .faults
        .iter()
        .map(|r| r.blocked_by_frozen_lock.len())
        .sum();
    if blocked > 0 {
        println!(
            "  partitions a frozen instance kept from being claimed (it held their ownership blob's lock; counted from its resumption): {blocked}"
        );
    }
    println!(
        "  checkpoint changes observed: {}, moved back: {}; longest without a running owner: {:.1} s (limit {:.1} s); instances replaced: {}",
        f.checkpoint_changes_seen,
        f.checkpoints_moved_back.len(),
        f.longest_unowned,
        f.unowned_limit,
        f.replaced_instances
    );
    if f.problems.is_empty() {
        println!("  no problem found");
    } else {
        for p in &f.problems {
            println!("  PROBLEM: {p}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process holding the lock of an ownership blob (here `flock(1)`, as a frozen instance
    /// would hold it) is found through `/proc/locks`, and only that partition.
    #[test]
    fn the_ownership_locks_a_process_holds_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let blob = ConsumerGroupKey::new("localhost", HUB, "$default")
            .unwrap()
            .ownership_blob("3")
            .unwrap();
        let lock = hubhost_storage::local::lock_file(dir.path(), DEFAULT_CONTAINER, &blob);
        std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
        let mut holder = std::process::Command::new("flock")
            .arg(&lock)
            .args(["sleep", "30"])
            .spawn()
            .expect("flock(1) runs");
        let pid = holder.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        let found = loop {
            let found = frozen_locks(dir.path(), pid, 16);
            if !found.is_empty() || Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = holder.kill();
        let _ = holder.wait();
        assert_eq!(
            found,
            BTreeSet::from([("$default".to_string(), "3".to_string())])
        );
        assert!(frozen_locks(dir.path(), pid + 100_000, 16).is_empty());
    }
}

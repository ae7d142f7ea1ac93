//! `hubhost emulate --scale`: the Functions scale controller for Event Hubs, on one machine.
//!
//! In Azure nobody starts instances by hand: the scale controller reads each Event Hubs
//! function's backlog (the events enqueued after its checkpoints), asks the extension how many
//! instances that needs, and adds or removes instances of the app. This supervisor does the
//! same with real processes: every `interval` it reads the partition ends from the event hub
//! and the checkpoints from the store, counts the backlog as the extension does
//! (`hubhost_checkpoints::backlog`), decides with the pure rules of `decide`, and starts or
//! stops `hubhost emulate` instances (SIGTERM, so they checkpoint and hand their partitions
//! over). Each decision is printed with its inputs and recorded in the checkpoint store
//! (`scale_history`), where the operations view draws it.
//!
//! The instances are ordinary pool members: they know nothing of the supervisor and balance
//! among themselves through the store. An instance that dies is replaced at the next decision,
//! as the platform replaces a failed worker.

pub mod decide;

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hubhost_checkpoints::backlog::total_unprocessed;
use hubhost_checkpoints::{CheckpointStore, ConsumerGroupKey, DEFAULT_CONTAINER, names};
use hubhost_eventhubs::EventHubTarget;
use hubhost_functions::function_app::FunctionApp;
use hubhost_processor::ProcessorOptions;
use hubhost_storage::counting::{CountingStore, RequestCounts};

use crate::emulate::{AppSettings, EmulateError, HostJsonProblem, resolve_trigger};
use decide::{MonitorSample, TargetScaler, Vote};

/// How many decisions the scale history keeps (at one per 10 s: the last 20 minutes).
pub const SCALE_HISTORY_LENGTH: usize = 120;

/// One decision of the emulated scale controller for one consumer group, as it records it in
/// the checkpoint store (`CheckpointStore::write_scale_history`, which keeps the records as JSON
/// without knowing their fields) for the page's operations view.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScalePoint {
    pub at: chrono::DateTime<chrono::Utc>,
    /// The backlog the decision was made on.
    pub unprocessed_events: i64,
    pub partitions: u32,
    /// What this consumer group's function asked for.
    pub target: u32,
    /// The app's instance count after the decision.
    pub instances: u32,
    /// Why, in words (e.g. "scale-in held for 180 s after the last scale-up").
    pub reason: String,
}

/// How many samples the incremental model keeps.
const MONITOR_WINDOW: usize = 10;
/// How long a stopping instance may take before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(60);

/// How to start one instance: this program with these arguments (`hubhost emulate --app …`).
#[derive(Debug, Clone)]
pub struct InstanceCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

#[derive(Debug, Clone)]
pub struct ScaleOptions {
    pub app: PathBuf,
    /// Checkpoint store, as `hubhost emulate --storage` (the instances get the same).
    pub storage: Option<String>,
    pub instance: InstanceCommand,
    /// The app's instance limit (`functionAppScaleLimit`, Flex `maximumInstanceCount`).
    pub max_instances: u32,
    /// Time between decisions.
    pub interval: Duration,
    /// The extension's scale-in hold after a scale-up ([`decide::SCALE_IN_HOLD`]).
    pub scale_in_hold: Duration,
    /// The older incremental model: the scale monitor's votes, one instance at a time.
    pub incremental: bool,
    /// Each instance writes its output to `instance-{n}.log` here.
    pub logs: PathBuf,
}

/// One Event Hubs function as the scale controller sees it.
struct ScaledFunction {
    name: String,
    target: EventHubTarget,
    key: ConsumerGroupKey,
    concurrency: u32,
    scaler: TargetScaler,
    samples: VecDeque<MonitorSample>,
    history: Vec<ScalePoint>,
}

struct Instance {
    number: u64,
    child: tokio::process::Child,
}

/// The app's functions, their concurrency and the checkpoint store, resolved as the
/// instances will resolve them.
/// The functions to scale, the checkpoint store and the count of the requests made to it.
type Loaded = (Vec<ScaledFunction>, CheckpointStore, Arc<RequestCounts>);

fn load(opts: &ScaleOptions) -> Result<Loaded, EmulateError> {
    let settings = AppSettings::load(&opts.app)?;
    let app = FunctionApp::load_with_settings(&opts.app, settings.values())?;
    let options = ProcessorOptions::from_host_json(&app.host_json)?;
    let concurrency = decide::desired_concurrency(
        None,
        options.target_unprocessed_event_threshold,
        options.max_batch_size as u32,
    )
    .ok_or(EmulateError::HostJson(
        HostJsonProblem::NoScalingConcurrency,
    ))?;
    let mut functions = Vec::new();
    for spec in &app.functions {
        if app.disabled_by(&spec.name).is_some() {
            continue;
        }
        let Some((trigger, target)) = resolve_trigger(spec, &settings)? else {
            continue;
        };
        let key = ConsumerGroupKey::new(
            target.namespace.clone(),
            target.hub.clone(),
            trigger.consumer_group.clone(),
        )?;
        functions.push(ScaledFunction {
            name: spec.name.clone(),
            target,
            key,
            concurrency,
            scaler: TargetScaler::new(concurrency, opts.scale_in_hold),
            samples: VecDeque::new(),
            history: Vec::new(),
        });
    }
    if functions.is_empty() {
        return Err(EmulateError::NoEventHubFunctions);
    }
    let storage =
        hubhost_storage::settings::resolve_storage(opts.storage.as_deref(), |k| settings.get(k))?;
    let counting = CountingStore::with_kinds(storage.open()?, names::blob_kind);
    let requests = counting.requests.clone();
    let store = CheckpointStore::new(Arc::new(counting), DEFAULT_CONTAINER);
    Ok((functions, store, requests))
}

/// Backlog and partition count of one function, read now.
async fn measure(f: &ScaledFunction, store: &CheckpointStore) -> Result<(i64, u32), String> {
    let ends = f.target.partition_ends().await.map_err(|e| e.to_string())?;
    let checkpoints = store
        .list_checkpoints(&f.key)
        .await
        .map_err(|e| e.to_string())?
        .items;
    Ok((total_unprocessed(&ends, &checkpoints), ends.len() as u32))
}

pub async fn run(
    opts: ScaleOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), EmulateError> {
    let (mut functions, store, requests) = load(&opts)?;
    store.ensure_container().await?;
    std::fs::create_dir_all(&opts.logs).map_err(|source| EmulateError::LogFolder {
        path: opts.logs.clone(),
        source,
    })?;
    println!(
        "hubhost emulate --scale: {} model, a decision every {:?}, scale-in hold {:?}, at most {} instances; instance logs in {}",
        if opts.incremental {
            "incremental (scale monitor votes)"
        } else {
            "target-based"
        },
        opts.interval,
        opts.scale_in_hold,
        opts.max_instances,
        opts.logs.display()
    );
    for f in &functions {
        println!(
            "  {} ← {:?}, consumer group {}, {} unprocessed events per instance",
            f.name, f.target, f.key.consumer_group, f.concurrency
        );
    }
    let started = Instant::now();
    let mut running: Vec<Instance> = Vec::new();
    let mut stopping: Vec<Instance> = Vec::new();
    let mut next_number = 1u64;
    let mut ticker = tokio::time::interval(opts.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = ticker.tick() => {}
        }
        reap(&mut running, &mut stopping);
        let current = running.len() as u32;
        // Each function's decision, by its index, as the point its history will record once
        // the platform has decided the instance count.
        let mut decisions: Vec<(usize, ScalePoint)> = Vec::new();
        for (index, f) in functions.iter_mut().enumerate() {
            let (unprocessed, partitions) = match measure(f, &store).await {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(function = %f.name, error = %e, "no scale decision: the backlog could not be read");
                    continue;
                }
            };
            // The decision's time, taken after the measurement (whose reads take a varying
            // while) and together with the time its point records, so that the history shows
            // the times the hold was judged by.
            let now = started.elapsed();
            let at = chrono::Utc::now();
            let (target, reason) = if opts.incremental {
                f.samples.push_back(MonitorSample {
                    unprocessed_events: unprocessed,
                    partitions,
                });
                while f.samples.len() > MONITOR_WINDOW {
                    f.samples.pop_front();
                }
                let samples: Vec<MonitorSample> = f.samples.iter().copied().collect();
                let (vote, why) = decide::scale_monitor_vote(current, &samples);
                let vote_name = match vote {
                    Vote::ScaleOut => "scale out",
                    Vote::ScaleIn => "scale in",
                    Vote::None => "no change",
                };
                (
                    decide::incremental_step(current, vote),
                    format!("{vote_name}: {why}"),
                )
            } else {
                let d = f.scaler.decide(now, unprocessed, partitions);
                let reason = if d.held() {
                    format!(
                        "wants {}, held: scale-in waits {:?} after a scale-up",
                        d.wanted, opts.scale_in_hold
                    )
                } else {
                    format!(
                        "⌈{unprocessed} ÷ {}⌉ = {} → {} spreads {partitions} partitions evenly",
                        f.concurrency, d.desired, d.target
                    )
                };
                (d.target, reason)
            };
            let point = ScalePoint {
                at,
                unprocessed_events: unprocessed,
                partitions,
                target,
                instances: current,
                reason,
            };
            decisions.push((index, point));
        }
        if decisions.is_empty() {
            continue;
        }
        let targets: Vec<u32> = decisions.iter().map(|(_, p)| p.target).collect();
        let next = decide::platform_step(current, &targets, opts.max_instances);
        // The most instances there can be: an Event Hubs target never exceeds the partitions.
        let most_instances = decisions
            .iter()
            .map(|(_, p)| p.partitions)
            .max()
            .unwrap_or(1)
            .clamp(1, opts.max_instances);
        for (index, mut point) in decisions {
            let f = &mut functions[index];
            point.instances = next;
            println!(
                "scale {}: {} unprocessed on {} partitions; target {} ({}); instances {current} → {next}",
                f.name, point.unprocessed_events, point.partitions, point.target, point.reason
            );
            f.history.push(point);
            if f.history.len() > SCALE_HISTORY_LENGTH {
                f.history.remove(0);
            }
            if let Err(e) = store.write_scale_history(&f.key, &f.history).await {
                tracing::warn!(function = %f.name, error = %e, "the scale history could not be written");
            }
        }
        while (running.len() as u32) < next {
            match start_instance(&opts, next_number, most_instances) {
                Ok(instance) => running.push(instance),
                Err(e) => {
                    tracing::error!(error = %e, "an instance could not be started");
                    break;
                }
            }
            next_number += 1;
        }
        while (running.len() as u32) > next {
            // The newest goes first, so the longest-lived instances keep their partitions.
            let mut instance = running.pop().expect("more running than wanted");
            terminate(&mut instance);
            stopping.push(instance);
        }
    }
    // Stop everything gracefully: each instance checkpoints and relinquishes.
    for instance in running.iter_mut() {
        terminate(instance);
    }
    stopping.append(&mut running);
    let deadline = Instant::now() + STOP_LIMIT;
    for mut instance in stopping {
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, instance.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(instance = instance.number, "did not stop in time; killed");
            let _ = instance.child.kill().await;
        }
    }
    // What the controller itself asked of the store (`bench cost` reads these lines).
    for (kind, class, n) in requests.snapshot() {
        println!("scale: storage requests {kind} {} {n}", class.as_str());
    }
    println!("scale: ran {:.1} s", started.elapsed().as_secs_f64());
    println!("hubhost emulate --scale: stopped");
    Ok(())
}

/// Starts instance `number`, one of up to `most_instances` sharing this machine's cores.
fn start_instance(
    opts: &ScaleOptions,
    number: u64,
    most_instances: u32,
) -> std::io::Result<Instance> {
    let log = std::fs::File::create(opts.logs.join(format!("instance-{number}.log")))?;
    let mut command = hubhost_process::child::command(&opts.instance.program);
    if let Some(threads) = hubhost_process::child::worker_threads_setting(most_instances as usize) {
        command.env(hubhost_process::child::WORKER_THREADS_ENV, threads);
    }
    let child = command
        .args(&opts.instance.args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    println!(
        "scale: started instance-{number} (pid {})",
        child.id().unwrap_or_default()
    );
    Ok(Instance { number, child })
}

/// SIGTERM, as the platform stops an instance it no longer needs.
fn terminate(instance: &mut Instance) {
    if let Some(pid) = instance.child.id() {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        println!("scale: stopping instance-{} (pid {pid})", instance.number);
    }
}

/// Forgets instances that have exited: stopped ones quietly, running ones as failures the next
/// decision replaces.
fn reap(running: &mut Vec<Instance>, stopping: &mut Vec<Instance>) {
    running.retain_mut(|i| match i.child.try_wait() {
        Ok(Some(status)) => {
            tracing::warn!(instance = i.number, %status, "an instance exited; the next decision replaces it");
            false
        }
        _ => true,
    });
    stopping.retain_mut(|i| !matches!(i.child.try_wait(), Ok(Some(_))));
}

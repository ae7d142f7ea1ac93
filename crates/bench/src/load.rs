//! The reference load in real time on a pool — what `bench latency` and `bench cost` measure:
//! a `hubhost hub`, the simulator sending `homes` homes at 1× speed, and either a fixed pool of
//! `hubhost emulate` instances or one `hubhost emulate --scale` that starts and stops them.
//! Each instance runs the app folder's functions with `hubhost serve` as its handler; the
//! harness finds every instance's `/metrics` and handler from the lines they print.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::local_hub::{HubProcess, LocalHubError};
use hubhost_eventhubs::EventHubTarget;
use hubhost_simulate::{self as simulate, Pace, SimulateOptions, SimulateSummary, StopAfter};
use hubhost_testkit::pool::{AppFolder, EmulatePool, NOT_INHERITED, PoolError};

pub(crate) const HUB: &str = "sensors";
pub(crate) const AGGREGATOR: (&str, &str) = (
    "SensorAggregator",
    include_str!("../../../function_app/SensorAggregator/function.json"),
);
pub(crate) const ARCHIVE: (&str, &str) = (
    "RawArchive",
    include_str!("../../../function_app/RawArchive/function.json"),
);

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Hub(#[from] LocalHubError),
    #[error(transparent)]
    Instance(#[from] PoolError),
    #[error(transparent)]
    EventHub(#[from] hubhost_eventhubs::EventHubsError),
    #[error("the simulator: {0}")]
    Simulate(#[from] simulate::SimulateError),
    #[error("{0}")]
    Other(String),
}

/// How the pool is run.
#[derive(Debug, Clone)]
pub enum Pool {
    /// This many instances, started at once.
    Fixed(usize),
    /// `hubhost emulate --scale` deciding every `interval`.
    Scaled { interval: Duration },
}

/// The fleet and the batch settings of a run.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Homes of the simulated fleet, reporting once a minute in real time.
    pub homes: u32,
    pub partitions: u32,
    /// host.json `maxEventBatchSize`, `prefetchCount`, `minEventBatchSize` and `maxWaitTime`.
    pub max_batch: u32,
    pub prefetch: u32,
    pub min_batch: u32,
    pub max_wait: Duration,
}

pub struct LoadOptions<'a> {
    pub workload: &'a Workload,
    pub pool: Pool,
    pub functions: &'a [(&'a str, &'a str)],
    /// Other host.json `extensions.eventHubs` keys (the host's load-balancing timings, for
    /// instance).
    pub event_hubs: &'a [(&'a str, Value)],
    /// More `hubhost hub` arguments (its retention, for instance).
    pub hub_args: &'a [String],
}

/// One instance as the harness reaches it.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoints {
    /// The emulated host's `/metrics`.
    pub metrics: String,
    /// The handler's base URL (its `/metrics`, the dashboard).
    pub handler: String,
}

/// A running load; dropping it kills every process.
pub struct RunningLoad {
    hub: HubProcess,
    dir: PathBuf,
    pool: Option<EmulatePool>,
    supervisor: Option<tokio::process::Child>,
    stop: CancellationToken,
    simulator: tokio::task::JoinHandle<Result<SimulateSummary, simulate::SimulateError>>,
}

impl RunningLoad {
    pub async fn start(dir: &Path, opts: &LoadOptions<'_>) -> Result<Self, LoadError> {
        let workload = opts.workload;
        let io = |e: std::io::Error| LoadError::Other(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir.join("store")).map_err(io)?;
        let hub = HubProcess::start_with(&dir.join("hub"), workload.partitions, opts.hub_args)?;
        let exe = crate::hubhost_exe().map_err(io)?;
        AppFolder {
            handler: (&exe, &["serve"]),
            functions: opts.functions,
            max_batch: workload.max_batch,
            prefetch: workload.prefetch,
            ownership_expiry: None,
            values: &[
                (
                    "AzureWebJobsStorage",
                    dir.join("store").display().to_string(),
                ),
                ("EventHubConnection", hub.connection_string.clone()),
                ("EventHubName", HUB.to_string()),
            ],
        }
        .write(dir)?;
        let path = dir.join("host.json");
        let mut host: Value = serde_json::from_str(&std::fs::read_to_string(&path).map_err(io)?)
            .map_err(|e| LoadError::Other(e.to_string()))?;
        let section = &mut host["extensions"]["eventHubs"];
        section["minEventBatchSize"] = Value::from(workload.min_batch);
        section["maxWaitTime"] = Value::from(timespan(workload.max_wait));
        for (key, value) in opts.event_hubs {
            section[*key] = value.clone();
        }
        std::fs::write(&path, host.to_string()).map_err(io)?;
        let (mut pool, mut supervisor) = (None, None);
        match opts.pool {
            Pool::Fixed(count) => {
                let mut fixed = EmulatePool::new(&exe, dir, dir);
                for i in 1..=count {
                    fixed.start(&format!("i{i}"), &[("RUST_LOG", "warn".to_string())])?;
                }
                fixed.wait_started(Duration::from_secs(30)).await?;
                pool = Some(fixed);
            }
            Pool::Scaled { interval } => {
                let mut command = hubhost_process::child::command(&exe);
                command
                    .args([
                        "emulate",
                        "--scale",
                        "--metrics-port",
                        "0",
                        "--http-port",
                        "0",
                        "--app",
                    ])
                    .arg(dir)
                    .args(["--scale-interval", &interval.as_secs_f64().to_string()])
                    .arg("--scale-logs")
                    .arg(dir.join("instances"))
                    .env("HUBHOST_INSTANCE_LOCKS", dir.join("locks"))
                    .env("RUST_LOG", "warn")
                    .stdout(std::fs::File::create(dir.join("scale.out")).map_err(io)?)
                    .stderr(std::fs::File::create(dir.join("scale.log")).map_err(io)?);
                for variable in NOT_INHERITED {
                    command.env_remove(variable);
                }
                supervisor = Some(command.spawn().map_err(io)?);
            }
        }
        let stop = CancellationToken::new();
        let simulator = {
            let (target, stop) = (hub.target.clone(), stop.clone());
            let options = SimulateOptions {
                homes: workload.homes,
                seed: 1,
                start: chrono::Utc::now(),
                pace: Pace::SpeedUp(1.0),
                stop: StopAfter::default(),
                progress: false,
            };
            tokio::spawn(async move {
                simulate::run(&target, options, async move { stop.cancelled().await }).await
            })
        };
        Ok(RunningLoad {
            hub,
            dir: dir.to_path_buf(),
            pool,
            supervisor,
            stop,
            simulator,
        })
    }

    /// The processes of the load by name: `hub`, each instance, and each instance's handler
    /// (`NAME handler`) once it has one; the pid with each.
    pub fn processes(&self) -> Vec<(String, u32)> {
        let mut processes = vec![("hub".to_string(), self.hub.pid())];
        if let Some(pool) = &self.pool {
            for name in pool.live() {
                if let Some(pid) = pool.pid(&name) {
                    processes.push((name.clone(), pid));
                }
                if let Some(pid) = pool.handler_pid(&name, "serve") {
                    processes.push((format!("{name} handler"), pid));
                }
            }
        }
        processes
    }

    pub fn target(&self) -> &EventHubTarget {
        &self.hub.target
    }

    /// The instances running now, each with its endpoints once it has printed them.
    pub fn instances(&mut self) -> Result<Vec<Endpoints>, LoadError> {
        let outputs: Vec<PathBuf> = match &mut self.pool {
            Some(pool) => {
                let names: Vec<String> = pool.live().into_iter().collect();
                for name in &names {
                    if let Some(status) = pool.exited(name) {
                        return Err(LoadError::Other(format!(
                            "instance {name} exited with {status}:\n{}",
                            pool.log(name)
                        )));
                    }
                }
                names
                    .iter()
                    .map(|n| self.dir.join(format!("{n}.out")))
                    .collect()
            }
            None => {
                if let Some(status) = self
                    .supervisor
                    .as_mut()
                    .and_then(|s| s.try_wait().ok().flatten())
                {
                    return Err(LoadError::Other(format!(
                        "hubhost emulate --scale exited with {status}"
                    )));
                }
                let supervisor =
                    std::fs::read_to_string(self.dir.join("scale.out")).unwrap_or_default();
                running_instances(&supervisor)
                    .into_iter()
                    .map(|n| self.dir.join("instances").join(format!("{n}.log")))
                    .collect()
            }
        };
        Ok(outputs
            .iter()
            .filter_map(|path| endpoints(&std::fs::read_to_string(path).unwrap_or_default()))
            .collect())
    }

    /// Events the hub holds across its partitions (every one was sent in this run).
    pub async fn sent(&self) -> Result<u64, LoadError> {
        Ok(self
            .hub
            .target
            .last_enqueued()
            .await?
            .values()
            .map(|last| (last + 1).max(0) as u64)
            .sum())
    }

    /// Stops the simulator, then the pool (gracefully); returns the simulator's summary and,
    /// for a scaled pool, what the scale controller printed.
    pub async fn finish(mut self) -> Result<(SimulateSummary, String), LoadError> {
        self.stop.cancel();
        let summary = (&mut self.simulator)
            .await
            .map_err(|e| LoadError::Other(e.to_string()))??;
        if let Some(pool) = &mut self.pool {
            pool.stop_all().await?;
        }
        if let Some(supervisor) = &mut self.supervisor {
            if let Some(pid) = supervisor.id() {
                // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
                unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            }
            let _ = tokio::time::timeout(Duration::from_secs(90), supervisor.wait()).await;
        }
        let printed = std::fs::read_to_string(self.dir.join("scale.out")).unwrap_or_default();
        Ok((summary, printed))
    }
}

impl Drop for RunningLoad {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(supervisor) = &mut self.supervisor {
            let _ = supervisor.start_kill();
        }
    }
}

/// The body of `GET url`, or why not (naming the URL).
pub(crate) async fn fetch_text(http: &reqwest::Client, url: &str) -> Result<String, String> {
    async { http.get(url).send().await?.error_for_status()?.text().await }
        .await
        .map_err(|e| format!("{url}: {e}"))
}

/// Prints a benchmark's runs: as JSON on stdout, or as its table.
pub(crate) fn print_runs<T: serde::Serialize>(
    runs: &[T],
    json: bool,
    table: impl FnOnce(),
) -> Result<(), String> {
    if json {
        let text = serde_json::to_string_pretty(runs).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        table();
    }
    Ok(())
}

/// A host.json time span, as .NET writes one.
fn timespan(d: Duration) -> String {
    hubhost_trigger::time::dotnet_timespan(d)
}

/// The instances the scale controller started and has not stopped, from its lines
/// `scale: started instance-N (pid …)` and `scale: stopping instance-N (pid …)`.
fn running_instances(supervisor_output: &str) -> Vec<String> {
    let mut running: Vec<String> = Vec::new();
    for line in supervisor_output.lines() {
        let instance = |prefix: &str| {
            line.strip_prefix(prefix)
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_string)
        };
        if let Some(started) = instance("scale: started ") {
            running.push(started);
        } else if let Some(stopping) = instance("scale: stopping ") {
            running.retain(|r| *r != stopping);
        }
    }
    running
}

/// An instance's endpoints from what `hubhost emulate` printed: `handler `…` on port N` and
/// `metrics: URL`.
fn endpoints(output: &str) -> Option<Endpoints> {
    let handler = output.lines().find_map(|l| {
        let (_, after) = l.split_once("` on port ")?;
        let port: u16 = after.split(',').next()?.trim().parse().ok()?;
        Some(format!("http://127.0.0.1:{port}"))
    })?;
    let metrics = output
        .lines()
        .find_map(|l| l.trim().strip_prefix("metrics: "))?
        .to_string();
    Some(Endpoints { metrics, handler })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_is_reached_through_the_lines_emulate_prints() {
        let out = "hubhost emulate: instance vm-0 (host name and free slot), handler `hubhost serve` on port 40123, checkpoints in x\n  SensorAggregator ← …\n  metrics: http://127.0.0.1:40999/metrics\n";
        assert_eq!(
            endpoints(out),
            Some(Endpoints {
                metrics: "http://127.0.0.1:40999/metrics".into(),
                handler: "http://127.0.0.1:40123".into(),
            })
        );
        // Not started yet: no metrics line.
        assert_eq!(endpoints(out.lines().next().unwrap()), None);
    }

    #[test]
    fn time_spans_are_written_as_host_json_reads_them() {
        for d in [Duration::from_millis(1500), Duration::from_secs(3723)] {
            assert_eq!(hubhost_trigger::time::parse_timespan(&timespan(d)), Some(d));
        }
        assert_eq!(timespan(Duration::from_millis(250)), "00:00:00.2500000");
    }

    #[test]
    fn the_scaled_pool_is_what_the_controller_started_and_did_not_stop() {
        let printed = "hubhost emulate --scale: …\nscale: started instance-1 (pid 10)\nscale: started instance-2 (pid 11)\nscale: started instance-3 (pid 12)\nscale: stopping instance-2 (pid 11)\n";
        assert_eq!(running_instances(printed), ["instance-1", "instance-3"]);
    }
}

//! A pool of `hubhost emulate` processes on one function app folder, driven from outside as a
//! platform drives Functions instances: started with an instance id, stopped with SIGTERM,
//! killed with `kill -9`, watched through their logs, their `/metrics` and the checkpoint
//! store. `bench pool` and the pool tests (`tests/pool.rs`) share it, so both measure and
//! assert the same things the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use hubhost_checkpoints::FOREIGN_OWNERSHIP_EXPIRY;
use hubhost_checkpoints::{CheckpointError, CheckpointStore, ConsumerGroupKey};
use hubhost_metrics::{self as metrics, Sample};

/// Variables of the environment running the pool that its instances must not see: the app's
/// settings come from its local.settings.json only, and each instance stands for one
/// Functions instance, so the platform's instance ids of this machine are not theirs.
pub const NOT_INHERITED: [&str; 6] = [
    "HUBHOST_STORAGE",
    "AzureWebJobsStorage",
    "EventHubConnection",
    "EventHubName",
    "WEBSITE_INSTANCE_ID",
    "CONTAINER_NAME",
];

/// How long a graceful stop may take before it counts as failed.
pub const STOP_LIMIT: Duration = Duration::from_secs(60);

/// What went wrong with an instance, with the end of its log.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// An instance could not be started, stopped or read.
    #[error("instance {name}: {problem}")]
    Instance { name: String, problem: String },
    /// A file of the pool's folder.
    #[error("{0}")]
    Io(String),
}

/// The app folder the instances run: host.json starting `handler` with the Event Hubs
/// settings of a pool, its functions (name, function.json), and local.settings.json `values`.
pub struct AppFolder<'a> {
    /// The handler's program and arguments (host.json `customHandler.description`).
    pub handler: (&'a Path, &'a [&'a str]),
    pub functions: &'a [(&'a str, &'a str)],
    pub max_batch: u32,
    pub prefetch: u32,
    /// host.json `partitionOwnershipExpirationInterval` [default: hubhost's own expiry].
    pub ownership_expiry: Option<Duration>,
    /// App settings (`AzureWebJobsStorage`, `EventHubConnection`, …).
    pub values: &'a [(&'a str, String)],
}

impl AppFolder<'_> {
    /// Writes the app into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), PoolError> {
        let io = |e: std::io::Error| PoolError::Io(format!("{}: {e}", dir.display()));
        for (name, function_json) in self.functions {
            let function_dir = dir.join(name);
            std::fs::create_dir_all(&function_dir).map_err(io)?;
            std::fs::write(function_dir.join("function.json"), function_json).map_err(io)?;
        }
        let mut event_hubs = json!({
            "maxEventBatchSize": self.max_batch,
            "prefetchCount": self.prefetch,
            "batchCheckpointFrequency": 1,
            "initialOffsetOptions": {"type": "fromStart"},
        });
        if let Some(expiry) = self.ownership_expiry {
            let s = expiry.as_secs();
            event_hubs["partitionOwnershipExpirationInterval"] =
                Value::from(format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60));
        }
        let host = json!({
            "version": "2.0",
            "customHandler": {"description": {
                "defaultExecutablePath": self.handler.0,
                "arguments": self.handler.1,
            }},
            "extensions": {"eventHubs": event_hubs},
        });
        let mut values = serde_json::Map::new();
        values.insert("FUNCTIONS_WORKER_RUNTIME".into(), Value::from("custom"));
        for (k, v) in self.values {
            values.insert(k.to_string(), Value::from(v.as_str()));
        }
        let settings = json!({"IsEncrypted": false, "Values": values});
        for (path, text) in [
            (dir.join("host.json"), host.to_string()),
            (dir.join("local.settings.json"), settings.to_string()),
        ] {
            std::fs::write(&path, text).map_err(io)?;
        }
        Ok(())
    }
}

struct Instance {
    child: Child,
    /// Its `/metrics` URL once it has printed it: it picks its own port (`--metrics-port 0`),
    /// because a port picked here could be taken by another process before it binds it.
    metrics: Option<String>,
}

/// The instances of one app folder; each writes `{name}.out` (its stdout, with the metrics
/// URL) and `{name}.log` (its stderr) into the log folder. Dropping the pool kills them.
pub struct EmulatePool {
    exe: PathBuf,
    app: PathBuf,
    logs: PathBuf,
    instances: BTreeMap<String, Instance>,
    http: reqwest::Client,
}

impl EmulatePool {
    /// Instances of `hubhost` binary `exe` on the app folder `app`, logging into `logs`.
    pub fn new(exe: &Path, app: &Path, logs: &Path) -> Self {
        EmulatePool {
            exe: exe.to_path_buf(),
            app: app.to_path_buf(),
            logs: logs.to_path_buf(),
            instances: BTreeMap::new(),
            http: reqwest::Client::new(),
        }
    }

    fn file(&self, name: &str, extension: &str) -> PathBuf {
        self.logs.join(format!("{name}.{extension}"))
    }

    /// Starts instance `name` (its owner id) with `env` added; the app's settings come from
    /// its local.settings.json only (the caller's environment does not leak in).
    pub fn start(&mut self, name: &str, env: &[(&str, String)]) -> Result<(), PoolError> {
        self.spawn(name, Some(name), env)
    }

    /// Starts an instance known here as `name` without `--instance-id`: it takes its default,
    /// stable identity (read it with [`EmulatePool::owner_id`]).
    pub fn start_default_identity(
        &mut self,
        name: &str,
        env: &[(&str, String)],
    ) -> Result<(), PoolError> {
        self.spawn(name, None, env)
    }

    /// The owner id an instance announced on its first line, once it has.
    pub fn owner_id(&self, name: &str) -> Option<String> {
        let out = std::fs::read_to_string(self.file(name, "out")).ok()?;
        let rest = out
            .lines()
            .next()?
            .strip_prefix("hubhost emulate: instance ")?;
        Some(
            rest.split_whitespace()
                .next()?
                .trim_end_matches(',')
                .to_string(),
        )
    }

    fn spawn(
        &mut self,
        name: &str,
        instance_id: Option<&str>,
        env: &[(&str, String)],
    ) -> Result<(), PoolError> {
        let io = |e: std::io::Error| PoolError::Instance {
            name: name.into(),
            problem: e.to_string(),
        };
        let out = std::fs::File::create(self.file(name, "out")).map_err(io)?;
        let log = std::fs::File::create(self.file(name, "log")).map_err(io)?;
        let mut command = hubhost_process::child::std_command(&self.exe);
        command
            .args(["emulate", "--app"])
            .arg(&self.app)
            .args(["--metrics-port", "0"])
            // Pools run beside other tests: the app's HTTP functions (if any) on a free port.
            .args(["--http-port", "0"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(log);
        for variable in NOT_INHERITED {
            command.env_remove(variable);
        }
        if let Some(id) = instance_id {
            command.args(["--instance-id", id]);
        }
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command.spawn().map_err(io)?;
        self.instances.insert(
            name.to_string(),
            Instance {
                child,
                metrics: None,
            },
        );
        Ok(())
    }

    /// The running instances' names.
    pub fn live(&self) -> BTreeSet<String> {
        self.instances.keys().cloned().collect()
    }

    /// An instance's process id.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.instances.get(name).map(|i| i.child.id())
    }

    /// The exit status of an instance that has exited on its own (still listed until taken).
    pub fn exited(&mut self, name: &str) -> Option<ExitStatus> {
        self.instances
            .get_mut(name)?
            .child
            .try_wait()
            .ok()
            .flatten()
    }

    /// The pid of the custom handler an instance started: its child process whose command
    /// line contains `marker`, if it has one now.
    pub fn handler_pid(&self, name: &str, marker: &str) -> Option<u32> {
        let pid = self.pid(name)?;
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
            .flat_map(|c| {
                c.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok())
                    .collect::<Vec<_>>()
            })
            .find(|child| {
                std::fs::read(format!("/proc/{child}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
            })
    }

    /// An instance's stderr so far.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name, "log")).unwrap_or_default()
    }

    fn error(&self, name: &str, problem: String) -> PoolError {
        let log = self.log(name);
        let tail: Vec<&str> = log.lines().rev().take(8).collect();
        PoolError::Instance {
            name: name.into(),
            problem: format!(
                "{problem}; its log ends:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ),
        }
    }

    /// SIGTERM, as the platform stops an instance; returns once it has exited, with an error if
    /// it failed or took longer than [`STOP_LIMIT`].
    pub async fn stop(&mut self, name: &str) -> Result<(), PoolError> {
        let mut child = self.take(name).expect("a running instance");
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_LIMIT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => return Err(self.error(name, format!("exited with {status}"))),
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(self.error(name, format!("did not stop within {STOP_LIMIT:?}")));
                }
                Err(e) => return Err(self.error(name, e.to_string())),
            }
        }
    }

    /// `kill -9` of an instance (its handler dies with it).
    pub fn kill_9(&mut self, name: &str) -> Result<ExitStatus, PoolError> {
        let mut child = self.take(name).expect("a running instance");
        let killed = child.kill();
        let waited = child.wait();
        killed.map_err(|e| self.error(name, e.to_string()))?;
        waited.map_err(|e| self.error(name, e.to_string()))
    }

    /// Hands an instance's process over (e.g. to wait for it to exit on its own).
    pub fn take(&mut self, name: &str) -> Option<Child> {
        self.instances.remove(name).map(|i| i.child)
    }

    /// Stops every instance gracefully.
    pub async fn stop_all(&mut self) -> Result<(), PoolError> {
        for name in self.live() {
            self.stop(&name).await?;
        }
        Ok(())
    }

    /// An instance's `/metrics`: its content type and samples. Fails if the instance exited
    /// or has no endpoint yet.
    pub async fn metrics(&mut self, name: &str) -> Result<(String, Vec<Sample>), PoolError> {
        let Some(instance) = self.instances.get_mut(name) else {
            return Err(self.error(name, "not running".into()));
        };
        if let Ok(Some(status)) = instance.child.try_wait() {
            return Err(self.error(name, format!("exited with {status}")));
        }
        if instance.metrics.is_none() {
            let out =
                std::fs::read_to_string(self.logs.join(format!("{name}.out"))).unwrap_or_default();
            instance.metrics = out
                .lines()
                .find_map(|l| l.trim().strip_prefix("metrics: "))
                .map(str::to_string);
        }
        let Some(url) = instance.metrics.clone() else {
            return Err(self.error(name, "no metrics endpoint yet".into()));
        };
        let response = match self.http.get(&url).send().await {
            Ok(r) => r,
            Err(e) => return Err(self.error(name, format!("{url}: {e}"))),
        };
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let page = response.text().await.unwrap_or_default();
        let samples = metrics::parse(&page).map_err(|e| self.error(name, format!("{url}: {e}")))?;
        Ok((content_type, samples))
    }

    /// Waits until every instance answers on its metrics endpoint (started and configured).
    pub async fn wait_started(&mut self, within: Duration) -> Result<(), PoolError> {
        let deadline = Instant::now() + within;
        for name in self.live() {
            loop {
                match self.metrics(&name).await {
                    Ok(_) => break,
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
        Ok(())
    }
}

impl Drop for EmulatePool {
    fn drop(&mut self) {
        for instance in self.instances.values_mut() {
            let _ = instance.child.kill();
            let _ = instance.child.wait();
        }
    }
}

/// Partition → owner of the active ownerships only: the owner is set and renewed within the
/// expiry it vouched for (or, for an SDK processor, the foreign expiry).
pub async fn live_owners(
    store: &CheckpointStore,
    key: &ConsumerGroupKey,
) -> Result<BTreeMap<String, String>, CheckpointError> {
    let now = chrono::Utc::now();
    Ok(store
        .list_ownership(key)
        .await?
        .into_iter()
        .filter(|o| o.is_live(now, FOREIGN_OWNERSHIP_EXPIRY))
        .map(|o| (o.partition_id, o.owner_id))
        .collect())
}

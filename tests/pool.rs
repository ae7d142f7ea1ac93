//! A pool of `hubhost emulate` processes sharing one event hub (a real `hubhost hub`), one
//! checkpoint store (a local directory) and one consumer group, each starting its own custom
//! handler (tests/python/recording_handler.py, which records every batch it is given). The
//! fleet simulator produces throughout. The pool grows, shrinks gracefully and loses a member
//! to `kill -9`; after each change the ownership settles to a ±1 balance among the live
//! instances, and at the end the handlers' own records hold every sequence number the hub
//! stored, with duplicates only where a partition changed hands.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::Hub;
use hubhost::checkpoint::{CheckpointStore, ConsumerGroupKey, DEFAULT_CONTAINER};
use hubhost::eventhubs::EventHubTarget;
use hubhost::storage::StorageLocation;
use serde_json::{Value, json};

/// The pool tests each start a hub, a producer and up to five processes with their handlers;
/// on two cores they run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const PARTITIONS: usize = 16;
const MAX_BATCH: u64 = 50;
const PREFETCH: u64 = 100;
/// hubhost's defaults: 6 s expiry, cycles of 1.5 s (±30%), 0.25 s while unbalanced.
const SETTLE: Duration = Duration::from_secs(30);

struct Pool {
    hub: Hub,
    dir: tempfile::TempDir,
    storage: String,
    instances: BTreeMap<String, Child>,
    producer: Option<Child>,
    runtime: tokio::runtime::Runtime,
}

impl Pool {
    fn new() -> Pool {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store").display().to_string();
        Pool::with_storage(dir, &store)
    }

    /// `storage`: the checkpoint store (AzureWebJobsStorage): a directory or a connection string.
    fn with_storage(dir: tempfile::TempDir, storage: &str) -> Pool {
        Pool::on_hub(Hub::start(None), dir, storage)
    }

    fn on_hub(hub: Hub, dir: tempfile::TempDir, storage: &str) -> Pool {
        let app = dir.path().join("app");
        std::fs::create_dir_all(app.join("Recorder")).unwrap();
        std::fs::create_dir_all(dir.path().join("records")).unwrap();
        let handler =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/recording_handler.py");
        let host = json!({
            "version": "2.0",
            "customHandler": {"description": {
                "defaultExecutablePath": common::python(),
                "arguments": [handler],
            }},
            "extensions": {"eventHubs": {
                "maxEventBatchSize": MAX_BATCH,
                "prefetchCount": PREFETCH,
                "batchCheckpointFrequency": 1,
                "initialOffsetOptions": {"type": "fromStart"},
            }},
        });
        std::fs::write(app.join("host.json"), host.to_string()).unwrap();
        let function = json!({"bindings": [{
            "type": "eventHubTrigger", "name": "events", "direction": "in",
            "eventHubName": "%EventHubName%", "consumerGroup": "$Default",
            "connection": "EventHubConnection", "cardinality": "many", "dataType": "string",
        }]});
        std::fs::write(app.join("Recorder/function.json"), function.to_string()).unwrap();
        let settings = json!({"IsEncrypted": false, "Values": {
            "FUNCTIONS_WORKER_RUNTIME": "custom",
            "AzureWebJobsStorage": storage,
            "EventHubConnection": hub.connection_string(common::KEY),
            "EventHubName": "sensors",
        }});
        std::fs::write(app.join("local.settings.json"), settings.to_string()).unwrap();
        Pool {
            hub,
            dir,
            storage: storage.to_string(),
            instances: BTreeMap::new(),
            producer: None,
            runtime: tokio::runtime::Runtime::new().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start(&mut self, name: &str) {
        let log = std::fs::File::create(self.path(&format!("{name}.log"))).unwrap();
        // `--metrics-port 0`: the instance picks its port and prints the URL (a port picked
        // here could be taken by another process before the instance binds it).
        let out = std::fs::File::create(self.path(&format!("{name}.out"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_hubhost"))
            .args(["emulate", "--app"])
            .arg(self.path("app"))
            .args(["--instance-id", name, "--metrics-port", "0"])
            .env("RECORD_FILE", self.path(&format!("records/{name}.jsonl")))
            .env("RECORD_INSTANCE", name)
            .env_remove("HUBHOST_STORAGE")
            .env_remove("AzureWebJobsStorage")
            .env_remove("EventHubConnection")
            .env_remove("EventHubName")
            .stdout(out)
            .stderr(log)
            .spawn()
            .expect("hubhost emulate starts");
        self.instances.insert(name.to_string(), child);
    }

    /// Polls the dashboard's operations view until its instances (owner → partitions)
    /// satisfy `ready`, and checks every row against the checkpoint store and the hub.
    fn wait_for_operations(
        &self,
        dashboard: &common::Server,
        ready: impl Fn(&BTreeMap<String, Vec<String>>) -> bool,
    ) -> BTreeMap<String, Vec<String>> {
        let url = format!("{}/api/dashboard/operations.json", dashboard.url());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let view: serde_json::Value = self.runtime.block_on(async {
                let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
                serde_json::from_str(&text).unwrap()
            });
            let owners: BTreeMap<String, Vec<String>> = view["instances"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| {
                    let partitions = i["partitions"].as_array().unwrap();
                    (
                        i["owner"].as_str().unwrap().to_string(),
                        partitions
                            .iter()
                            .map(|p| p.as_str().unwrap().to_string())
                            .collect(),
                    )
                })
                .collect();
            let rows = view["partitions"].as_array().unwrap();
            if ready(&owners) && rows.len() == 16 && rows.iter().all(|r| r["lastEnqueued"].is_i64())
            {
                return owners;
            }
            assert!(
                Instant::now() < deadline,
                "the operations view never got there: {view:#}\n{}",
                dashboard.stderr()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// An instance's `/metrics`, parsed as Prometheus text.
    fn metrics(&self, name: &str) -> Vec<hubhost::metrics::Sample> {
        let out = std::fs::read_to_string(self.path(&format!("{name}.out"))).unwrap();
        let url = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("metrics: "))
            .unwrap_or_else(|| panic!("{name} printed no metrics URL:\n{out}"))
            .to_string();
        let (content_type, page) = self.runtime.block_on(async {
            let resp = reqwest::get(&url)
                .await
                .expect("the metrics endpoint answers");
            assert!(resp.status().is_success(), "{url}: {}", resp.status());
            let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
            (content_type, resp.text().await.unwrap())
        });
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        hubhost::metrics::parse(&page).unwrap_or_else(|e| panic!("{url}: {e}\n{page}"))
    }

    /// Each live instance's owned-partitions gauge agrees with the checkpoint store, and every
    /// instance counted the events it processed and the store requests it made.
    fn assert_metrics_match_the_store(&self) {
        let owners = self.owners();
        for name in self.instances.keys() {
            let samples = self.metrics(name);
            let owned = hubhost::metrics::sum(&samples, "hubhost_owned_partitions", &[]);
            let in_store = owners.values().filter(|o| *o == name).count();
            assert_eq!(
                owned as usize, in_store,
                "{name}: gauge {owned}, store {owners:?}"
            );
            let events = hubhost::metrics::sum(
                &samples,
                "hubhost_events_processed_total",
                &[("function", "Recorder"), ("consumer_group", "$Default")],
            );
            assert!(events > 0.0, "{name} processed no events by its metrics");
            let ops = hubhost::metrics::sum(&samples, "hubhost_storage_operations_total", &[]);
            assert!(ops > 0.0, "{name} counted no store operations");
            // Lag per partition it reads: only partitions the store says it owns, never negative.
            let lag: Vec<&hubhost::metrics::Sample> = samples
                .iter()
                .filter(|s| s.name == "hubhost_partition_lag")
                .collect();
            assert!(!lag.is_empty(), "{name} reports no partition lag");
            for s in lag {
                let partition = s.label("partition").unwrap();
                assert_eq!(
                    owners.get(partition),
                    Some(name),
                    "{name} reports lag of {partition}"
                );
                assert!(
                    s.value >= 0.0 && s.value < 100_000.0,
                    "{name}: lag {}",
                    s.value
                );
            }
        }
    }

    /// SIGTERM, as the host's platform stops an instance; waits for it to exit.
    fn stop(&mut self, name: &str) {
        let mut child = self.instances.remove(name).unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "{name} exited with {status}: {}",
                    self.log(name)
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not stop: {}",
                self.log(name)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of the custom handler an instance started (its child running the recording
    /// handler), if it has one now.
    fn handler_pid(&self, name: &str) -> Option<u32> {
        let pid = self.instances[name].id();
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
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("recording_handler.py"))
            })
    }

    /// Waits for an instance to exit on its own; returns its status.
    fn wait_exit(&mut self, name: &str, limit: Duration) -> std::process::ExitStatus {
        let mut child = self.instances.remove(name).unwrap();
        common::wait_within(&mut child, limit, name)
    }

    fn kill_9(&mut self, name: &str) {
        let mut child = self.instances.remove(name).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(&format!("{name}.log"))).unwrap_or_default()
    }

    /// The fleet simulator at a steady rate until `stop_producing`.
    fn produce(&mut self, rate: u32) {
        let child = Command::new(env!("CARGO_BIN_EXE_hubhost"))
            .args([
                "simulate",
                "--homes",
                "500",
                "--rate",
                &rate.to_string(),
                "--connection",
            ])
            .arg(self.hub.connection_string(common::KEY))
            .args(["--hub", "sensors"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.producer = Some(child);
    }

    fn stop_producing(&mut self) {
        let mut child = self.producer.take().unwrap();
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        let status = common::wait_within(&mut child, Duration::from_secs(60), "the simulator");
        assert!(status.success(), "the simulator failed: {status}");
    }

    fn store(&self) -> (CheckpointStore, ConsumerGroupKey) {
        let blobs = StorageLocation::parse(&self.storage)
            .unwrap()
            .open()
            .unwrap();
        (
            CheckpointStore::new(blobs, DEFAULT_CONTAINER),
            ConsumerGroupKey::new("localhost", "sensors", "$Default").unwrap(),
        )
    }

    /// Partition → owner, active ownerships only (owner set, renewed within the expiry).
    fn owners(&self) -> BTreeMap<String, String> {
        let (store, key) = self.store();
        let listed = self
            .runtime
            .block_on(store.list_ownership(&key))
            .expect("the ownerships can be listed");
        let now = chrono::Utc::now();
        listed
            .into_iter()
            .filter(|o| o.is_active(now, Duration::from_secs(6)))
            .map(|o| (o.partition_id, o.owner_id))
            .collect()
    }

    /// Waits until every partition is owned by a live instance and their shares differ by at
    /// most one; returns how long that took.
    fn wait_balanced(&self, what: &str) -> Duration {
        let started = Instant::now();
        let live: BTreeSet<&str> = self.instances.keys().map(String::as_str).collect();
        loop {
            let owners = self.owners();
            let mut shares: BTreeMap<&str, usize> = live.iter().map(|i| (*i, 0)).collect();
            let mut foreign = false;
            for owner in owners.values() {
                match shares.get_mut(owner.as_str()) {
                    Some(n) => *n += 1,
                    None => foreign = true,
                }
            }
            let (lo, hi) = (
                shares.values().min().copied().unwrap_or(0),
                shares.values().max().copied().unwrap_or(0),
            );
            if owners.len() == PARTITIONS && !foreign && hi - lo <= 1 {
                let took = started.elapsed();
                eprintln!("{what}: balanced {shares:?} after {took:?}");
                return took;
            }
            assert!(
                started.elapsed() < SETTLE,
                "{what}: not balanced after {SETTLE:?}: {owners:?}\n{}",
                self.instances
                    .keys()
                    .map(|n| format!("--- {n}\n{}", self.log(n)))
                    .collect::<String>()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Each partition's last sequence number, from the hub itself.
    fn hub_ends(&self) -> BTreeMap<String, i64> {
        let target =
            EventHubTarget::parse(&self.hub.connection_string(common::KEY), Some("sensors"))
                .unwrap();
        let ends = self.runtime.block_on(target.partition_ends()).unwrap();
        ends.into_iter()
            .map(|e| (e.partition_id, e.last_sequence_number))
            .collect()
    }

    /// Every batch the handlers recorded, in each instance's order.
    fn records(&self) -> Vec<Value> {
        let mut all = Vec::new();
        for entry in std::fs::read_dir(self.path("records")).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            // A kill -9 can cut the last line short; a torn line was never answered.
            all.extend(
                text.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok()),
            );
        }
        all
    }

    /// Waits until the handlers have seen every stored event; then checks nothing is missing
    /// and duplicates stay within one batch plus the prefetch per change of hands.
    fn assert_complete(&self, what: &str) {
        self.assert_complete_allowing(what, 0);
    }

    /// As `assert_complete`, allowing `redelivered` more duplicates per partition: batches a
    /// handler recorded but died before answering are delivered again.
    fn assert_complete_allowing(&self, what: &str, redelivered: u64) {
        let ends = self.hub_ends();
        let total: i64 = ends.values().map(|last| last + 1).sum();
        assert!(
            total > 1000,
            "{what}: the producer sent only {total} events"
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        let (counts, handoffs) = loop {
            let mut counts: BTreeMap<String, BTreeMap<i64, u32>> = BTreeMap::new();
            let mut holders: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for r in self.records() {
                let p = r["partition"].as_str().unwrap().to_string();
                let seqs = counts.entry(p.clone()).or_default();
                for s in r["seqs"].as_array().unwrap() {
                    *seqs.entry(s.as_i64().unwrap()).or_default() += 1;
                }
                let who = r["instance"].as_str().unwrap().to_string();
                let list = holders.entry(p).or_default();
                if !list.contains(&who) {
                    list.push(who);
                }
            }
            let done = ends.iter().all(|(p, last)| {
                *last < 0
                    || counts
                        .get(p)
                        .is_some_and(|c| (0..=*last).all(|s| c.contains_key(&s)))
            });
            if done || Instant::now() > deadline {
                break (counts, holders);
            }
            std::thread::sleep(Duration::from_millis(250));
        };
        let mut duplicates = 0u64;
        for (p, last) in &ends {
            let seen = counts.get(p).cloned().unwrap_or_default();
            let missing: Vec<i64> = (0..=*last).filter(|s| !seen.contains_key(s)).collect();
            assert!(
                missing.is_empty(),
                "{what}: partition {p} lost {} of {} events, first {:?}",
                missing.len(),
                last + 1,
                &missing[..missing.len().min(10)]
            );
            let dup: u64 = seen.values().map(|n| u64::from(n - 1)).sum();
            let moves = handoffs.get(p).map_or(0, |h| h.len().saturating_sub(1)) as u64;
            assert!(
                dup <= moves * (MAX_BATCH + PREFETCH) + redelivered,
                "{what}: partition {p} has {dup} duplicates with {moves} changes of hands"
            );
            duplicates += dup;
        }
        eprintln!("{what}: {total} events, all processed, {duplicates} duplicates");
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for child in self.instances.values_mut().chain(self.producer.as_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn the_pool_grows_and_shrinks_gracefully_without_losing_events() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut pool = Pool::new();
    pool.produce(600);
    pool.start("i1");
    pool.wait_balanced("one instance");
    pool.start("i2");
    pool.wait_balanced("grown to two");
    pool.start("i3");
    pool.start("i4");
    pool.wait_balanced("grown to four");
    // A graceful stop relinquishes: the others take over within a cycle or two, not an expiry.
    pool.stop("i4");
    let handoff = pool.wait_balanced("i4 stopped");
    // Settled: every survivor renewed its claims, its pumps are the ones the store lists.
    std::thread::sleep(Duration::from_secs(2));
    pool.assert_metrics_match_the_store();
    assert!(
        handoff < Duration::from_secs(5),
        "graceful handoff took {handoff:?}"
    );
    pool.stop("i3");
    pool.wait_balanced("i3 stopped");
    pool.stop_producing();
    pool.assert_complete("grow and shrink");
}

#[test]
fn a_killed_instance_is_replaced_from_its_checkpoints() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut pool = Pool::new();
    pool.produce(600);
    for name in ["i1", "i2", "i3"] {
        pool.start(name);
    }
    pool.wait_balanced("three instances");
    // The dashboard's operations view, served by a handler pointed at the pool's hub and
    // checkpoint store as the Functions host's app settings would point it.
    let appdata = pool.path("appdata").display().to_string();
    let hub_connection = pool.hub.connection_string(common::KEY);
    let dashboard = common::Server::start(
        &["--storage", &appdata],
        &[
            ("AzureWebJobsStorage", pool.storage.as_str()),
            ("EventHubConnection", hub_connection.as_str()),
            ("EventHubName", "sensors"),
        ],
    );
    let before = pool.wait_for_operations(&dashboard, |owners| owners.len() == 3);
    std::thread::sleep(Duration::from_secs(2));
    let orphaned: Vec<String> = pool
        .owners()
        .into_iter()
        .filter(|(_, o)| o == "i2")
        .map(|(p, _)| p)
        .collect();
    pool.kill_9("i2");
    let takeover = pool.wait_balanced("i2 killed");
    // Expiry (6 s) plus one cycle.
    assert!(
        takeover < Duration::from_secs(10),
        "takeover took {takeover:?}"
    );
    assert!(!orphaned.is_empty());
    // The operations view shows the failover: i2 is gone and its partitions have new owners.
    let after = pool.wait_for_operations(&dashboard, |owners| {
        owners.keys().all(|o| o != "i2") && owners.values().map(Vec::len).sum::<usize>() == 16
    });
    assert_eq!(before.keys().collect::<Vec<_>>(), ["i1", "i2", "i3"]);
    assert_eq!(after.keys().collect::<Vec<_>>(), ["i1", "i3"]);
    std::thread::sleep(Duration::from_secs(2));
    pool.stop_producing();
    pool.assert_complete("kill -9");
}

/// A custom handler that dies is not a function failure. The handler of one instance is
/// killed (`kill -9`) five times, 2 s apart, while readings flow: the instance restarts it
/// three times, then gives up as the Functions host does, and the other instance takes its
/// partitions over. Every stored event reaches a handler: no batch the handler never answered
/// was checkpointed, neither while it was restarting nor when the instance gave up.
#[test]
fn a_handler_that_keeps_dying_loses_no_event() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut pool = Pool::new();
    pool.produce(600);
    pool.start("i1");
    pool.start("i2");
    pool.wait_balanced("two instances");
    let mut kills = 0;
    for _ in 0..5 {
        let Some(pid) = pool.handler_pid("i1") else {
            break;
        };
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        kills += 1;
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(kills >= 4, "i1's handler was killed only {kills} times");
    let status = pool.wait_exit("i1", Duration::from_secs(60));
    let log = pool.log("i1");
    assert!(
        !status.success() && log.contains("the custom handler exited 4 times"),
        "i1 should give up after the handler's fourth exit ({status}):\n{log}"
    );
    pool.wait_balanced("i1 gave up");
    std::thread::sleep(Duration::from_secs(2));
    pool.stop_producing();
    // A killed handler may have recorded a batch it never answered: one batch per death.
    pool.assert_complete_allowing("handler killed", kills * MAX_BATCH);
}

/// The official Python processor and hubhost instances share one consumer group through the
/// same blobs on Azurite: they divide the partitions ±1, keep them steady (no thrashing
/// between two load balancers), and between them process every event.
#[test]
fn python_and_hubhost_instances_share_one_consumer_group() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let azurite = common::Azurite::start();
    let dir = tempfile::tempdir().unwrap();
    // The Python SDK names the checkpoint blobs after `host:port` when the endpoint has a port,
    // where the .NET host and hubhost use the host alone; on the emulator's default port the
    // connection string has none and every peer writes `localhost/…`.
    let hub = Hub::start_on(5672, None);
    let mut pool = Pool::on_hub(hub, dir, &azurite.connection_string());
    pool.produce(400);
    pool.start("h1");
    pool.start("h2");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/pool_member.py");
    let mut python = Command::new(common::python())
        .arg(script)
        .arg(hubhost::eventhubs::EMULATOR_CONNECTION)
        .arg("sensors")
        .arg(azurite.connection_string())
        .arg(pool.path("records/python.jsonl"))
        .arg("30")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(pool.path("python.log")).unwrap())
        .spawn()
        .unwrap();
    // Balanced among three owners, one of them the Python client.
    let started = Instant::now();
    let settled = loop {
        let owners = pool.owners();
        let mut shares: BTreeMap<String, usize> = BTreeMap::new();
        for o in owners.values() {
            *shares.entry(o.clone()).or_default() += 1;
        }
        let (lo, hi) = (
            shares.values().min().copied().unwrap_or(0),
            shares.values().max().copied().unwrap_or(0),
        );
        if owners.len() == PARTITIONS && shares.len() == 3 && hi - lo <= 1 {
            eprintln!(
                "mixed pool: balanced {shares:?} after {:?}",
                started.elapsed()
            );
            break owners;
        }
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "the mixed pool did not balance: {shares:?}\n{}",
            std::fs::read_to_string(pool.path("python.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(settled.values().any(|o| o == "h1") && settled.values().any(|o| o == "h2"));
    // Steady membership: nobody takes anything from anybody.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(
        pool.owners(),
        settled,
        "ownership changed with steady membership"
    );
    // The Python client stops after its 30 s; the hubhost instances take its partitions over.
    let status = common::wait_within(&mut python, Duration::from_secs(120), "the Python client");
    assert!(
        status.success(),
        "the Python client failed: {}",
        std::fs::read_to_string(pool.path("python.log")).unwrap_or_default()
    );
    pool.wait_balanced("python left");
    pool.stop_producing();
    pool.assert_complete("mixed pool");
}

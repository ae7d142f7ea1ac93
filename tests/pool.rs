//! A pool of `hubhost emulate` processes sharing one event hub (a real `hubhost hub`), one
//! checkpoint store (a local directory) and one consumer group, each starting its own custom
//! handler (tests/python/recording_handler.py, which records every batch it is given). The
//! fleet simulator produces throughout. The pool grows, shrinks gracefully and loses a member
//! to `kill -9`; after each change the ownership settles to a ±1 balance among the live
//! instances, and at the end the handlers' own records hold every sequence number the hub
//! stored, with duplicates only where a partition changed hands.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::Hub;
use hubhost_checkpoints::{CheckpointStore, ConsumerGroupKey, DEFAULT_CONTAINER};
use hubhost_eventhubs::EventHubTarget;
use hubhost_storage::StorageLocation;
use hubhost_testkit::pool::{AppFolder, EmulatePool, live_owners};
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
    /// The instances: the harness `bench pool` uses too.
    emulate: EmulatePool,
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
        Pool::configured(hub, dir, storage, None)
    }

    /// As `on_hub`, with host.json's ownership expiry set to `ownership_expiry`.
    fn configured(
        hub: Hub,
        dir: tempfile::TempDir,
        storage: &str,
        ownership_expiry: Option<Duration>,
    ) -> Pool {
        let app = dir.path().join("app");
        std::fs::create_dir_all(dir.path().join("records")).unwrap();
        let handler =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/recording_handler.py");
        let function = json!({"bindings": [{
            "type": "eventHubTrigger", "name": "events", "direction": "in",
            "eventHubName": "%EventHubName%", "consumerGroup": "$Default",
            "connection": "EventHubConnection", "cardinality": "many", "dataType": "string",
        }]});
        AppFolder {
            handler: (&common::python(), &[handler.to_str().unwrap()]),
            functions: &[("Recorder", &function.to_string())],
            max_batch: MAX_BATCH as u32,
            prefetch: PREFETCH as u32,
            ownership_expiry,
            values: &[
                ("AzureWebJobsStorage", storage.to_string()),
                ("EventHubConnection", hub.connection_string(common::KEY)),
                ("EventHubName", "sensors".to_string()),
            ],
        }
        .write(&app)
        .unwrap();
        let emulate = EmulatePool::new(Path::new(env!("CARGO_BIN_EXE_hubhost")), &app, dir.path());
        Pool {
            hub,
            dir,
            storage: storage.to_string(),
            emulate,
            producer: None,
            runtime: tokio::runtime::Runtime::new().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start(&mut self, name: &str) {
        let record = self.path(&format!("records/{name}.jsonl"));
        self.emulate
            .start(
                name,
                &[
                    ("RECORD_FILE", record.display().to_string()),
                    ("RECORD_INSTANCE", name.to_string()),
                ],
            )
            .expect("hubhost emulate starts");
    }

    /// Starts an instance known here as `name` with its default identity (host name and free
    /// slot), claimed in the lock folder `locks`; returns the owner id it took.
    fn start_default_identity(&mut self, name: &str, locks: &Path) -> String {
        let record = self.path(&format!("records/{name}.jsonl"));
        self.emulate
            .start_default_identity(
                name,
                &[
                    ("RECORD_FILE", record.display().to_string()),
                    ("RECORD_INSTANCE", name.to_string()),
                    ("HUBHOST_INSTANCE_LOCKS", locks.display().to_string()),
                ],
            )
            .expect("hubhost emulate starts");
        let started = Instant::now();
        loop {
            if let Some(id) = self.emulate.owner_id(name) {
                return id;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{name} announced no instance id: {}",
                self.log(name)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
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
    fn metrics(&mut self, name: &str) -> Vec<hubhost_metrics::Sample> {
        let (content_type, samples) = self
            .runtime
            .block_on(self.emulate.metrics(name))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        samples
    }

    /// Each live instance's owned-partitions gauge agrees with the checkpoint store, and every
    /// instance counted the events it processed and the store requests it made.
    fn assert_metrics_match_the_store(&mut self) {
        let owners = self.owners();
        for name in &self.emulate.live() {
            let samples = self.metrics(name);
            let owned = hubhost_metrics::sum(&samples, "hubhost_owned_partitions", &[]);
            let in_store = owners.values().filter(|o| *o == name).count();
            assert_eq!(
                owned as usize, in_store,
                "{name}: gauge {owned}, store {owners:?}"
            );
            let events = hubhost_metrics::sum(
                &samples,
                "hubhost_events_processed_total",
                &[("function", "Recorder"), ("consumer_group", "$Default")],
            );
            assert!(events > 0.0, "{name} processed no events by its metrics");
            let ops = hubhost_metrics::sum(&samples, "hubhost_storage_operations_total", &[]);
            assert!(ops > 0.0, "{name} counted no store operations");
            // Lag per partition it reads: only partitions the store says it owns, never negative.
            let lag: Vec<&hubhost_metrics::Sample> = samples
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
        let stopped = self.runtime.block_on(self.emulate.stop(name));
        if let Err(e) = stopped {
            panic!("{e}");
        }
    }

    /// The pid of the custom handler an instance started (its child running the recording
    /// handler), if it has one now.
    fn handler_pid(&self, name: &str) -> Option<u32> {
        self.emulate.handler_pid(name, "recording_handler.py")
    }

    /// Waits for an instance to exit on its own; returns its status.
    fn wait_exit(&mut self, name: &str, limit: Duration) -> std::process::ExitStatus {
        let mut child = self.emulate.take(name).unwrap();
        common::wait_within(&mut child, limit, name)
    }

    fn kill_9(&mut self, name: &str) {
        self.emulate.kill_9(name).unwrap();
    }

    /// How many times any instance, live or stopped, started a pump for `partition`.
    fn pump_starts(&self, partition: &str) -> u64 {
        let field = format!("partition={partition}");
        let mut starts = 0;
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                starts += text
                    .lines()
                    .filter(|l| {
                        l.contains("pump starting") && l.split_whitespace().any(|w| w == field)
                    })
                    .count() as u64;
            }
        }
        starts
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(&format!("{name}.log"))).unwrap_or_default()
    }

    /// The fleet simulator at a steady rate until `stop_producing`; its log (appended to by
    /// every simulator of the test, debug level for hubhost's own crates) is in
    /// `simulator.log`, shown when one fails.
    fn produce(&mut self, rate: u32) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("simulator.log"))
            .unwrap();
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
            .env(
                "RUST_LOG",
                "warn,hubhost=debug,hubhost_simulate=debug,hubhost_eventhubs=debug",
            )
            .stdout(Stdio::null())
            .stderr(log)
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
        let limit = Duration::from_secs(60);
        let Some(status) = common::try_wait_within(&mut child, limit) else {
            panic!(
                "the simulator did not exit within {limit:?} of SIGINT and was killed; its log:\n{}",
                self.log("simulator")
            );
        };
        assert!(
            status.success(),
            "the simulator failed: {status}; its log:\n{}",
            self.log("simulator")
        );
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

    /// Partition → owner, active ownerships only (owner set, renewed within the expiry its
    /// owner vouched for, or within the foreign expiry for an SDK processor).
    fn owners(&self) -> BTreeMap<String, String> {
        let (store, key) = self.store();
        self.runtime
            .block_on(live_owners(&store, &key))
            .expect("the ownerships can be listed")
    }

    /// The official Python processor as a pool member named `name`, at the SDK's default
    /// load-balancing timings or at `(interval, expiry)` seconds.
    fn python_member(&self, name: &str, timings: Option<(u32, u32)>) -> common::KilledOnDrop {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/pool_member.py");
        let mut cmd = Command::new(common::python());
        cmd.arg(script)
            .arg(hubhost_eventhubs::EMULATOR_CONNECTION)
            .arg("sensors")
            .arg(&self.storage)
            .arg(self.path(&format!("records/{name}.jsonl")))
            .arg("3600")
            .arg(name);
        if let Some((interval, expiry)) = timings {
            cmd.arg(interval.to_string()).arg(expiry.to_string());
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.path(&format!("{name}.log"))).unwrap())
            .spawn()
            .unwrap();
        common::KilledOnDrop(child)
    }

    /// Waits (up to `limit`) until all partitions are owned by exactly `members`, ±1.
    fn wait_shared(
        &self,
        members: &[&str],
        limit: Duration,
        what: &str,
    ) -> BTreeMap<String, String> {
        let started = Instant::now();
        loop {
            let owners = self.owners();
            let mut shares: BTreeMap<&str, usize> = members.iter().map(|m| (*m, 0)).collect();
            let mut strangers = BTreeSet::new();
            for owner in owners.values() {
                match shares.get_mut(owner.as_str()) {
                    Some(n) => *n += 1,
                    None => {
                        strangers.insert(owner.clone());
                    }
                }
            }
            let (lo, hi) = (
                shares.values().min().copied().unwrap_or(0),
                shares.values().max().copied().unwrap_or(0),
            );
            if owners.len() == PARTITIONS && strangers.is_empty() && hi - lo <= 1 {
                eprintln!("{what}: shared {shares:?} after {:?}", started.elapsed());
                return owners;
            }
            assert!(
                started.elapsed() < limit,
                "{what}: not shared among {members:?} after {limit:?}: {shares:?}, others {strangers:?}\n{}",
                members
                    .iter()
                    .map(|n| format!("--- {n}\n{}", self.log(n)))
                    .collect::<String>()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every partition is owned by a live instance and their shares differ by at
    /// most one; returns how long that took.
    fn wait_balanced(&self, what: &str) -> Duration {
        let started = Instant::now();
        let live = self.emulate.live();
        let live: Vec<&str> = live.iter().map(String::as_str).collect();
        self.wait_shared(&live, SETTLE, what);
        started.elapsed()
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
    /// and duplicates stay within one batch plus the prefetch per change of hands. A change of
    /// hands is a change of the recording instance along the partition's batches in sequence
    /// order, so a partition that went back and forth counts every move — or, when more, a
    /// pump started again as the instances' logs say: an instance that took a partition and
    /// gave it back before its first batch records nothing, yet the owner before it starts
    /// again from its checkpoint.
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
        let (counts, batches) = loop {
            let mut counts: BTreeMap<String, BTreeMap<i64, u32>> = BTreeMap::new();
            // partition → (first sequence number, instance) of every batch recorded.
            let mut batches: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
            for r in self.records() {
                let p = r["partition"].as_str().unwrap().to_string();
                let seqs = counts.entry(p.clone()).or_default();
                let numbers: Vec<i64> = r["seqs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_i64().unwrap())
                    .collect();
                for s in &numbers {
                    *seqs.entry(*s).or_default() += 1;
                }
                let who = r["instance"].as_str().unwrap().to_string();
                if let Some(first) = numbers.first() {
                    batches.entry(p).or_default().push((*first, who));
                }
            }
            let done = ends.iter().all(|(p, last)| {
                *last < 0
                    || counts
                        .get(p)
                        .is_some_and(|c| (0..=*last).all(|s| c.contains_key(&s)))
            });
            if done || Instant::now() > deadline {
                break (counts, batches);
            }
            std::thread::sleep(Duration::from_millis(250));
        };
        let mut duplicates = 0u64;
        let mut pumps_started_again = 0u64;
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
            let mut order = batches.get(p).cloned().unwrap_or_default();
            order.sort();
            let moves = order.windows(2).filter(|w| w[0].1 != w[1].1).count() as u64;
            let restarts = self.pump_starts(p).saturating_sub(1);
            let hands = moves.max(restarts);
            pumps_started_again += restarts;
            assert!(
                dup <= hands * (MAX_BATCH + PREFETCH) + redelivered,
                "{what}: partition {p} has {dup} duplicates with {moves} changes of recording \
                 instance and {restarts} pumps started again"
            );
            duplicates += dup;
        }
        eprintln!(
            "{what}: {total} events, all processed, {duplicates} duplicates, \
             {pumps_started_again} pumps started again"
        );
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // The instances die with `emulate`.
        if let Some(child) = self.producer.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn the_pool_grows_and_shrinks_gracefully_without_losing_events() {
    common::require!(Tool::PythonSdk);
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
    common::require!(Tool::PythonSdk);
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

/// A restarted instance reclaims its own partitions at once, where the Functions host leaves
/// them orphaned for the whole ownership expiry. Two instances take their default identity
/// (the host name and the lowest free slot, claimed in a lock folder of this test); host.json
/// sets a 40 s expiry so that reclaiming is told apart from waiting for the expiry. One is
/// killed with `kill -9` and started again: it comes back under the same id, owns the same
/// partitions and processes every one of them again within 15 s, while the other instance
/// never takes them; nothing is lost. A process asking for an id in use is refused.
#[test]
fn a_restarted_instance_reclaims_its_partitions_at_once() {
    common::require!(Tool::PythonSdk);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let expiry = Duration::from_secs(40);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store").display().to_string();
    let mut pool = Pool::configured(Hub::start(None), dir, &store, Some(expiry));
    pool.produce(400);
    let locks = pool.path("instance-locks");
    let first = pool.start_default_identity("a", &locks);
    let second = pool.start_default_identity("b", &locks);
    let host = first.rsplit_once('-').map(|(h, _)| h.to_string()).unwrap();
    assert_eq!(
        (first.as_str(), second.as_str()),
        (format!("{host}-0").as_str(), format!("{host}-1").as_str()),
        "slots are taken lowest first"
    );
    let settled = pool.wait_shared(&[&first, &second], SETTLE, "two instances");
    let mine: BTreeSet<String> = settled
        .iter()
        .filter(|(_, o)| **o == first)
        .map(|(p, _)| p.clone())
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    pool.emulate.kill_9("a").unwrap();
    let killed = Instant::now();
    let again = pool.start_default_identity("a-restarted", &locks);
    assert_eq!(again, first, "the restart takes its id back");
    // Every partition it owned is processed again by the restarted process, and the other
    // instance never owns one of them meanwhile.
    let reclaimed = loop {
        let owners = pool.owners();
        let stolen: Vec<&String> = mine
            .iter()
            .filter(|p| owners.get(*p) == Some(&second))
            .collect();
        assert!(
            stolen.is_empty(),
            "{second} took {stolen:?} during the restart"
        );
        let processed: BTreeSet<String> = pool
            .records()
            .iter()
            .filter(|r| r["instance"] == "a-restarted")
            .map(|r| r["partition"].as_str().unwrap().to_string())
            .collect();
        if mine.is_subset(&processed) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "after {:?} the restarted instance processed only {processed:?} of {mine:?}\n{}",
            killed.elapsed(),
            pool.log("a-restarted")
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "restart reclaim: {} partitions processed again {reclaimed:?} after kill -9 (expiry {expiry:?})",
        mine.len()
    );
    assert_eq!(
        pool.wait_shared(&[&first, &second], SETTLE, "restarted"),
        settled,
        "the restart changed the ownership"
    );

    // A second process asking for an id that a live one holds is refused, naming it.
    pool.emulate
        .start(
            &second,
            &[
                (
                    "RECORD_FILE",
                    pool.path("records/dup.jsonl").display().to_string(),
                ),
                ("HUBHOST_INSTANCE_LOCKS", locks.display().to_string()),
            ],
        )
        .unwrap();
    let status = pool.wait_exit(&second, Duration::from_secs(30));
    assert!(!status.success());
    let refusal = pool.log(&second);
    assert!(
        refusal.contains(&format!(
            "instance id {second} is in use by another process"
        )),
        "{refusal}"
    );
    pool.stop_producing();
    pool.assert_complete("restart");
}

/// `kill -9` of the event hub under a reading instance, while events flow, started again on
/// the same port and data: every pump goes on after the last event it handed out, and no checkpoint moves back.
/// The SDK's receiver reattaches with the position it was opened at, not after what it has
/// delivered; before the pump skipped what it had already handed out, a hub restart delivered
/// partitions again from where their pumps had started and moved their checkpoints back
/// (`bench chaos` found it: 48..=440 delivered twice, a checkpoint from 440 to 77).
#[test]
fn a_restarted_hub_delivers_nothing_twice_and_moves_no_checkpoint_back() {
    common::require!(Tool::PythonSdk);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("hub-data");
    let port = common::free_port();
    let store = dir.path().join("store").display().to_string();
    let mut pool = Pool::on_hub(Hub::start_on(port, Some(&data)), dir, &store);
    pool.produce(800);
    pool.start("i1");
    pool.wait_balanced("one instance");
    std::thread::sleep(Duration::from_secs(5));
    let (store, key) = pool.store();
    let checkpoints = |runtime: &tokio::runtime::Runtime| -> BTreeMap<String, i64> {
        runtime
            .block_on(store.list_checkpoints(&key))
            .unwrap()
            .items
            .into_iter()
            .filter_map(|c| Some((c.partition_id, c.sequence_number?)))
            .collect()
    };
    let mut highest = checkpoints(&pool.runtime);
    // The hub dies while events flow and is back at once, within the SDK's own reconnect
    // budget; the simulator does not outlive it (its sends fail), so a new one produces.
    if let Some(mut producer) = pool.producer.take() {
        let _ = producer.kill();
        let _ = producer.wait();
    }
    pool.hub.kill_9();
    pool.hub = Hub::start_on(port, Some(&data));
    pool.produce(800);
    // Watch every checkpoint while the pumps reconnect and the producer sends again.
    let watching = Instant::now();
    while watching.elapsed() < Duration::from_secs(15) {
        for (p, seq) in checkpoints(&pool.runtime) {
            let before = highest.insert(p.clone(), seq).unwrap_or(-1);
            assert!(
                seq >= before,
                "partition {p}'s checkpoint moved back from {before} to {seq}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    pool.stop_producing();
    // One instance, never a change of hands: not a single event may be delivered twice.
    pool.assert_complete("hub restarted");
}

/// A custom handler that dies is not a function failure. The handler of one instance is
/// killed (`kill -9`) five times, 2 s apart, while readings flow: the instance restarts it
/// three times, then gives up as the Functions host does, and the other instance takes its
/// partitions over. Every stored event reaches a handler: no batch the handler never answered
/// was checkpointed, neither while it was restarting nor when the instance gave up.
#[test]
fn a_handler_that_keeps_dying_loses_no_event() {
    common::require!(Tool::PythonSdk);
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

/// Two hubhost instances share one consumer group (one Azurite container) with the official
/// Python processor at the SDK's default timings (30 s cycles, 180 s expiry) and with one that
/// keeps the Functions host's timings (30 s, 2 min; both greedy). hubhost judges their records
/// by the foreign expiry, not its own 6 s: the pool settles with every owner keeping a share,
/// then changes nothing while the SDK peers renew only every half minute. A killed hubhost
/// instance is replaced within 10 s; a killed SDK peer keeps its partitions for its peers'
/// expiry (minutes), not hubhost's. Between them the members process every event.
#[test]
fn hubhost_shares_a_consumer_group_with_sdk_processors_at_their_default_timings() {
    common::require!(Tool::Azurite, Tool::PythonSdk);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // 5672 is a documented port too: the docs' scenarios (another test binary) take turns on it.
    let _port = common::hold_fixed_ports(&[5672]);
    let azurite = common::Azurite::start();
    let dir = tempfile::tempdir().unwrap();
    // The Python SDK names the checkpoint blobs after `host:port` when the endpoint has a port,
    // where the .NET host and hubhost use the host alone; on the emulator's default port the
    // connection string has none and every peer writes `localhost/…`.
    let hub = Hub::start_on(5672, None);
    let mut pool = Pool::on_hub(hub, dir, &azurite.connection_string());
    pool.produce(400);
    // The Python SDK does not create the container (the Functions host and hubhost do).
    let (store, _) = pool.store();
    pool.runtime.block_on(store.ensure_container()).unwrap();
    let mut host_like = pool.python_member("host", Some((30, 120)));
    let started = Instant::now();
    while !pool.owners().values().any(|o| o == "host") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the host-like peer claimed nothing"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    pool.start("h1");
    pool.start("h2");
    let mut python = pool.python_member("python", None);
    // The Python peer takes its share one steal per 30 s cycle.
    let members = ["h1", "h2", "host", "python"];
    let settled = pool.wait_shared(&members, Duration::from_secs(300), "mixed pool");
    // Steady: three of the SDK peers' cycles (HUBHOST_MIXED_STEADY_SECONDS for a longer
    // watch), and nobody takes anything from anybody, not even for a moment: the owners are
    // compared every 2 s.
    let steady = std::env::var("HUBHOST_MIXED_STEADY_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(100), Duration::from_secs);
    let watch = Instant::now();
    let mut last = settled.clone();
    let mut changes = 0;
    while watch.elapsed() < steady {
        std::thread::sleep(Duration::from_secs(2));
        let now = pool.owners();
        changes += (0..PARTITIONS)
            .filter(|p| last.get(&p.to_string()) != now.get(&p.to_string()))
            .count();
        last = now;
    }
    eprintln!(
        "mixed pool at the SDKs' default timings: {changes} ownership changes in {:.0} s ({:.1} per 10 minutes)",
        watch.elapsed().as_secs_f64(),
        changes as f64 * 600.0 / watch.elapsed().as_secs_f64()
    );
    assert_eq!(changes, 0, "ownership changed with steady membership");
    assert_eq!(pool.owners(), settled);

    // A hubhost instance dies: the survivor takes its partitions in one cycle after its 6 s
    // expiry, though the SDK peers will not see them free for minutes.
    let orphaned: Vec<String> = settled
        .iter()
        .filter(|(_, o)| *o == "h1")
        .map(|(p, _)| p.clone())
        .collect();
    pool.kill_9("h1");
    let killed = Instant::now();
    loop {
        let owners = pool.owners();
        if orphaned
            .iter()
            .all(|p| owners.get(p).is_some_and(|o| o != "h1"))
        {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "h1's partitions {orphaned:?} not taken within 10 s: {owners:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "mixed pool: h1's partitions taken {:?} after kill -9",
        killed.elapsed()
    );
    // The SDK peers then take their share back from h2 by stealing.
    let survivors = pool.wait_shared(
        &["h2", "host", "python"],
        Duration::from_secs(200),
        "h1 killed",
    );
    pool.stop_producing();
    pool.assert_complete("mixed pool");

    // The Python peer dies: its partitions stay its own for minutes (its peers' expiry), where
    // hubhost's own expiry would have freed them after 6 s.
    let held: Vec<String> = survivors
        .iter()
        .filter(|(_, o)| *o == "python")
        .map(|(p, _)| p.clone())
        .collect();
    assert!(!held.is_empty());
    python.stop();
    std::thread::sleep(Duration::from_secs(30));
    let owners = pool.owners();
    for p in &held {
        assert_eq!(
            owners.get(p).map(String::as_str),
            Some("python"),
            "{p} moved: {owners:?}"
        );
    }
    host_like.stop();
}

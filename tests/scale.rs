//! `hubhost emulate --scale`: the scale controller, with real processes. A backlog waits on an
//! 8-partition event hub (a real `hubhost hub`); the supervisor reads it with the checkpoints,
//! starts instances four at a time up to an even spread of the partitions, replaces one killed
//! with `kill -9`, drains the backlog, holds its instances for the scale-in hold after the last
//! scale-up, then stops them all. The handlers' records hold every event, and the decisions
//! are in the checkpoint store for the operations view.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hubhost_checkpoints::{CheckpointStore, ConsumerGroupKey, DEFAULT_CONTAINER};
use hubhost_eventhubs::EventHubTarget;
use hubhost_host::scale::ScalePoint;
use hubhost_storage::StorageLocation;
use hubhost_testkit::pool::AppFolder;
use serde_json::{Value, json};

const BACKLOG: u64 = 40_000;
const HOLD_SECONDS: u64 = 25;

struct Supervisor {
    child: Child,
    out: std::path::PathBuf,
}

impl Supervisor {
    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits until a line of the output satisfies `found`; returns it.
    fn wait_line(&self, what: &str, limit: Duration, found: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            if let Some(line) = self.output().lines().find(|l| found(l)) {
                return line.to_string();
            }
            assert!(
                started.elapsed() < limit,
                "no {what} within {limit:?}; output:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `(from, to)` of every decision line ("… instances 4 → 8").
fn instance_changes(output: &str) -> Vec<(u32, u32)> {
    output
        .lines()
        .filter(|l| l.starts_with("scale Recorder:"))
        .filter_map(|l| {
            let (_, counts) = l.rsplit_once("instances ")?;
            let (from, to) = counts.split_once(" → ")?;
            Some((from.trim().parse().ok()?, to.trim().parse().ok()?))
        })
        .collect()
}

/// The pids of the instances the supervisor started, by name.
fn started_instances(output: &str) -> BTreeMap<String, u32> {
    output
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("scale: started ")?;
            let (name, pid) = rest.split_once(" (pid ")?;
            Some((name.to_string(), pid.trim_end_matches(')').parse().ok()?))
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    // A zombie is dead for this purpose: it no longer runs anything.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn the_scale_controller_drains_a_backlog_and_scales_to_zero() {
    common::require!(Tool::PythonSdk);
    let dir = tempfile::tempdir().unwrap();
    let hub = common::Hub::start_serving_hubs(&["sensors:8"]);
    let connection = hub.connection_string(common::KEY);
    let sent = Command::new(env!("CARGO_BIN_EXE_hubhost"))
        .args(["simulate", "--homes", "2000", "--unthrottled"])
        .args(["--events", &BACKLOG.to_string(), "--hub", "sensors"])
        .args(["--connection", &connection])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(sent.success());

    let app = dir.path().join("app");
    let store_dir = dir.path().join("store");
    let records = dir.path().join("records.jsonl");
    let handler = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/recording_handler.py");
    let function = json!({"bindings": [{
        "type": "eventHubTrigger", "name": "events", "direction": "in",
        "eventHubName": "sensors", "consumerGroup": "$Default",
        "connection": "EventHubConnection", "cardinality": "many", "dataType": "string",
    }]});
    AppFolder {
        handler: (&common::python(), &[handler.to_str().unwrap()]),
        functions: &[("Recorder", &function.to_string())],
        max_batch: 100,
        prefetch: 300,
        ownership_expiry: None,
        values: &[
            ("AzureWebJobsStorage", store_dir.display().to_string()),
            ("EventHubConnection", connection.clone()),
            ("RECORD_FILE", records.display().to_string()),
        ],
    }
    .write(&app)
    .unwrap();

    let out = dir.path().join("scale.out");
    let child = Command::new(env!("CARGO_BIN_EXE_hubhost"))
        .args(["emulate", "--scale", "--app"])
        .arg(&app)
        .args(["--scale-interval", "1"])
        .args(["--scale-in-hold", &HOLD_SECONDS.to_string()])
        .arg("--scale-logs")
        .arg(dir.path().join("instances"))
        .env("HUBHOST_INSTANCE_LOCKS", dir.path().join("locks"))
        .env_remove("WEBSITE_INSTANCE_ID")
        .env_remove("CONTAINER_NAME")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(dir.path().join("scale.log")).unwrap())
        .spawn()
        .unwrap();
    let mut supervisor = Supervisor { child, out };

    // The first decision: 40,000 events ÷ 100 per instance = 400 wanted, 8 spreads the 8
    // partitions, and the platform adds four.
    let first = supervisor.wait_line("first decision", Duration::from_secs(30), |l| {
        l.starts_with("scale Recorder:")
    });
    assert!(
        first.contains("target 8") && first.ends_with("instances 0 → 4"),
        "{first}"
    );
    supervisor.wait_line("the scale-up to 8", Duration::from_secs(30), |l| {
        l.ends_with("instances 4 → 8")
    });
    let started = supervisor.wait_line("instance-8", Duration::from_secs(10), |l| {
        l.starts_with("scale: started instance-8 ")
    });
    assert!(!started.is_empty());
    // A worker dies: the next decision replaces it.
    let victim = started_instances(&supervisor.output())["instance-3"];
    // SAFETY: kill(2) with a pid and a signal number has no memory-safety preconditions.
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    supervisor.wait_line("a replacement", Duration::from_secs(10), |l| {
        l.starts_with("scale: started instance-9 ")
    });

    // Drained, held, then down to zero.
    supervisor.wait_line("the scale-in to zero", Duration::from_secs(120), |l| {
        l.starts_with("scale Recorder:") && l.ends_with(" → 0")
    });
    let output = supervisor.output();
    let changes = instance_changes(&output);
    for (from, to) in &changes {
        assert!(
            *to <= 8 && to.saturating_sub(*from) <= 4,
            "{from} → {to}\n{output}"
        );
    }
    // The scale-in waited for the hold after the last scale-up.
    let decisions: Vec<&str> = output
        .lines()
        .filter(|l| l.starts_with("scale Recorder:"))
        .collect();
    let held = decisions.iter().filter(|l| l.contains("held")).count();
    assert!(
        held >= 3,
        "only {held} decisions held the scale-in:\n{output}"
    );
    // Every instance stops (gracefully) once the count is zero.
    let pids = started_instances(&output);
    let deadline = Instant::now() + Duration::from_secs(60);
    while pids.values().any(|p| alive(*p)) {
        assert!(
            Instant::now() < deadline,
            "instances still running after the scale-in: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Every event reached a handler.
    let target = EventHubTarget::parse(&connection, Some("sensors")).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ends = runtime.block_on(target.partition_ends()).unwrap();
    let text = std::fs::read_to_string(&records).unwrap();
    let mut seen: BTreeMap<String, std::collections::BTreeSet<i64>> = BTreeMap::new();
    for line in text.lines() {
        let Ok(r) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let partition = r["partition"].as_str().unwrap().to_string();
        let seqs = r["seqs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_i64().unwrap());
        seen.entry(partition).or_default().extend(seqs);
    }
    let total: i64 = ends.iter().map(|e| e.last_sequence_number + 1).sum();
    assert_eq!(total as u64, BACKLOG);
    for end in &ends {
        let got = seen.get(&end.partition_id).map(|s| s.len()).unwrap_or(0) as i64;
        assert_eq!(
            got,
            end.last_sequence_number + 1,
            "partition {} is missing events",
            end.partition_id
        );
    }

    // The decisions are recorded where the operations view reads them.
    let blobs = StorageLocation::parse(&store_dir.display().to_string())
        .unwrap()
        .open()
        .unwrap();
    let store = CheckpointStore::new(blobs, DEFAULT_CONTAINER);
    let key = ConsumerGroupKey::new("localhost", "sensors", "$Default").unwrap();
    let history: Vec<ScalePoint> = runtime.block_on(store.scale_history(&key)).unwrap();
    assert!(history.len() >= changes.len().min(120));
    assert_eq!(
        history.first().map(|p| (p.target, p.instances)),
        Some((8, 4))
    );
    assert_eq!(history.last().map(|p| p.instances), Some(0));
    assert!(history.iter().any(|p| p.unprocessed_events >= 30_000));
    // The target went up at the first decision; nothing scaled in before the hold had passed.
    let first_in = history.iter().find(|p| p.instances == 0).unwrap();
    let waited = first_in.at - history[0].at;
    // (The points' times are wall-clock stamps of decisions judged by the monotonic clock:
    // a millisecond of slack for the two clocks.)
    assert!(
        waited
            >= chrono::Duration::seconds(HOLD_SECONDS as i64) - chrono::Duration::milliseconds(1),
        "scaled in after {waited}"
    );

    // SIGTERM stops the supervisor cleanly.
    // SAFETY: as above.
    unsafe { libc::kill(supervisor.child.id() as i32, libc::SIGTERM) };
    let status = common::wait_within(&mut supervisor.child, Duration::from_secs(30), "supervisor");
    assert!(status.success(), "{status}");
}

//! `hubhost hub` with the official clients of the other languages Azure users write in, each an
//! independent peer in a process of its own: the Java Event Hubs SDK with its blob checkpoint
//! store (`java_eventhubs`), Apache Kafka's own Java client at its newest 3.x and 4.x
//! (`kafka_java`), and the Go Event Hubs SDK with its blob checkpoint store (`go_eventhubs`).
//! Each peer program lives in `tests/java/` or `tests/go/`, does one thing a user's program
//! does, and prints what its client saw as JSON; the tests check that against what the hub, the
//! other SDKs and `hubhost checkpoints` see. `side_by_side` runs the short form of
//! `scripts/bench-brokers.sh`, the hub beside Apache Kafka's broker and ActiveMQ Artemis.

mod go_eventhubs;
mod java_eventhubs;
mod kafka_java;
mod side_by_side;

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hubhost_testkit as common;
use serde_json::Value;

/// A peer that runs beside the test (a processor), its lines of JSON written to a file the test
/// reads while it runs; killed on drop.
pub struct Background {
    pub child: common::KilledOnDrop,
    pub lines: PathBuf,
    pub stderr: PathBuf,
}

impl Background {
    /// Starts `command` with stdin piped (closing it asks the peer to stop), its stdout and
    /// stderr in files named `name` under `dir`.
    pub fn start(command: &mut Command, dir: &Path, name: &str) -> Background {
        let lines = dir.join(format!("{name}.jsonl"));
        let stderr = dir.join(format!("{name}.stderr"));
        let child = command
            .stdin(Stdio::piped())
            .stdout(File::create(&lines).unwrap())
            .stderr(File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{command:?} does not start: {e}"));
        Background {
            child: common::KilledOnDrop(child),
            lines,
            stderr,
        }
    }

    /// Every whole line of JSON the peer printed so far.
    pub fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.lines).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// What it printed on stderr, for a failure's message.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Closes its stdin, its signal to stop, and waits for it to exit within `limit`.
    pub fn stop(&mut self, limit: Duration) {
        drop(self.child.0.stdin.take());
        common::wait_within(&mut self.child.0, limit, "the peer stopping");
    }

    /// `kill -9`.
    pub fn kill_9(&mut self) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
    }
}

/// Waits until `done` holds of what `peers` printed, polling twice a second; fails after
/// `limit` with every peer's lines and stderr.
pub fn wait_until(
    what: &str,
    peers: &[&Background],
    limit: Duration,
    done: impl Fn(&[Vec<Value>]) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        let seen: Vec<Vec<Value>> = peers.iter().map(|peer| peer.lines()).collect();
        if done(&seen) {
            return;
        }
        if Instant::now() > deadline {
            let mut report = String::new();
            for (peer, lines) in peers.iter().zip(&seen) {
                let tail: Vec<String> = lines.iter().rev().take(20).map(Value::to_string).collect();
                report.push_str(&format!(
                    "\n{}: {} lines, the last: {tail:#?}\nstderr (tail): {}",
                    peer.lines.display(),
                    lines.len(),
                    tail_of(&peer.stderr(), 3000)
                ));
            }
            panic!("{what}: not within {limit:?}{report}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn tail_of(text: &str, chars: usize) -> &str {
    let start = text.len().saturating_sub(chars);
    let start = (start..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    &text[start..]
}

/// The partitions a processor holds now, from its `opened` and `closed` lines.
pub fn held(lines: &[Value]) -> BTreeSet<String> {
    let mut held = BTreeSet::new();
    for line in lines {
        if let Some(id) = line["opened"].as_str() {
            held.insert(id.to_string());
        }
        if let Some(id) = line["closed"].as_str() {
            held.remove(id);
        }
    }
    held
}

/// The events a processor handled, as (tag, i) from their JSON bodies `{"tag", "i"}`.
pub fn handled(lines: &[Value]) -> Vec<(String, u64)> {
    lines
        .iter()
        .filter_map(|line| line["body"].as_str())
        .map(|body| {
            let body: Value = serde_json::from_str(body).unwrap();
            (
                body["tag"].as_str().unwrap().to_string(),
                body["i"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The `i` of every event with `tag` that any of the processors handled.
pub fn handled_tag(seen: &[Vec<Value>], tag: &str) -> BTreeSet<u64> {
    seen.iter()
        .flat_map(|lines| handled(lines))
        .filter(|(t, _)| t == tag)
        .map(|(_, i)| i)
        .collect()
}

/// Makes the blob container `name` on the storage account `storage` (the SDKs' checkpoint
/// stores expect it to exist), with hubhost's own storage client.
pub fn checkpoint_container(storage: &str, name: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let location = hubhost_storage::StorageLocation::parse(storage).unwrap();
        let store = location.open().unwrap();
        store.ensure_container(name).await.unwrap();
    });
}

/// What `hubhost checkpoints list --json` reads in `container` for the consumer group
/// `$Default` of `hub` in `namespace`.
pub fn listed_checkpoints(storage: &str, container: &str, namespace: &str, hub: &str) -> Value {
    let (code, stdout, stderr) = common::hubhost(
        &[
            "checkpoints",
            "list",
            "--storage",
            storage,
            "--container",
            container,
            "--namespace",
            namespace,
            "--hub",
            hub,
            "--json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

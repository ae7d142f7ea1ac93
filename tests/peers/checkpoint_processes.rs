//! The checkpoint store with real processes: racing claims from several `hubhost checkpoints
//! claim` processes (a local directory, Azurite) with exactly one winner per round, and `kill
//! -9` of a process writing claims and checkpoints, which must leave no torn blob.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use hubhost_checkpoints::{CheckpointStore, ConsumerGroupKey, OwnershipClaim};
use hubhost_storage::{SharedStore, StorageLocation};

const CONTAINER: &str = "azure-webjobs-eventhub";

fn claim(p: &str, owner: &str, etag: Option<&hubhost_storage::ETag>) -> OwnershipClaim {
    OwnershipClaim {
        partition_id: p.into(),
        owner_id: owner.into(),
        etag: etag.cloned(),
        vouched_expiry: None,
    }
}

/// Rounds of claims on one partition by several `hubhost` processes released at the same
/// instant, all presenting the ETag of the previous round: exactly one wins each round, and
/// the store names that winner.
fn racing_processes(storage: &str) {
    let scope = [
        "--storage",
        storage,
        "--namespace",
        "race.servicebus.windows.net",
        "--hub",
        "sensors",
    ];
    let blobs = StorageLocation::parse(storage).unwrap().open().unwrap();
    let store = CheckpointStore::new(blobs, CONTAINER);
    let key = ConsumerGroupKey::new("race.servicebus.windows.net", "sensors", "$Default").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(store.ensure_container()).unwrap();
    for round in 0..4 {
        let etag = rt
            .block_on(store.list_ownership(&key))
            .unwrap()
            .first()
            .map(|o| o.etag.to_string());
        let at = (Utc::now().timestamp_millis() + 700).to_string();
        let children: Vec<_> = (0..6)
            .map(|i| {
                let owner = format!("round{round}-proc{i}");
                let mut args: Vec<String> = ["checkpoints", "claim"]
                    .iter()
                    .chain(scope.iter())
                    .map(|s| s.to_string())
                    .collect();
                args.extend(
                    ["--partition", "0", "--owner", &owner, "--at-unix-ms", &at].map(String::from),
                );
                if let Some(e) = &etag {
                    args.extend(["--etag".to_string(), e.clone()]);
                }
                let child = std::process::Command::new(env!("CARGO_BIN_EXE_hubhost"))
                    .args(&args)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                (owner, child)
            })
            .collect();
        let mut winners = Vec::new();
        for (owner, child) in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if v["won"] == true {
                winners.push(owner);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let owners = rt.block_on(store.list_ownership(&key)).unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].owner_id, winners[0], "round {round}");
    }
}

#[test]
fn racing_processes_on_a_local_directory_have_one_winner_per_round() {
    let dir = tempfile::tempdir().unwrap();
    racing_processes(dir.path().to_str().unwrap());
}

#[test]
fn racing_processes_on_azurite_have_one_winner_per_round() {
    common::require!(Tool::Azurite);
    let azurite = common::Azurite::start();
    racing_processes(&azurite.connection_string());
}

/// A process writing claims and checkpoints as fast as it can is killed with SIGKILL, many
/// times; every blob stays readable and the store stays usable.
#[test]
fn kill_9_during_writes_leaves_no_torn_state() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().to_str().unwrap().to_string();
    for round in 0..5 {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hubhost"))
            .args([
                "bench",
                "checkpoints",
                "--storage",
                &storage,
                "--seconds",
                "0.25",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(400 + 150 * round));
        // SIGKILL, in whichever phase (claims, checkpoints, raw writes) the run has reached;
        // a run that already finished is fine too.
        let _ = child.kill();
        child.wait().unwrap();
    }
    let blobs: SharedStore =
        Arc::new(hubhost_storage::local::LocalDirStore::open(dir.path()).unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let listed = blobs.list(CONTAINER, "").await.unwrap();
        assert!(
            !listed.is_empty(),
            "the benchmark wrote nothing before it was killed"
        );
        for b in &listed {
            blobs
                .get(CONTAINER, &b.name)
                .await
                .unwrap_or_else(|e| panic!("{} is torn: {e}", b.name))
                .unwrap();
        }
        // And the store is usable at once: a claim presenting the listed ETag wins.
        let store = CheckpointStore::new(blobs.clone(), CONTAINER);
        let key = hubhost_bench::checkpoint_bench_key();
        let owned = store.list_ownership(&key).await.unwrap();
        assert!(!owned.is_empty());
        let o = &owned[0];
        let won = store
            .claim_ownership(&key, &[claim(&o.partition_id, "survivor", Some(&o.etag))])
            .await
            .unwrap();
        assert_eq!(won.len(), 1);
        let listing = store.list_checkpoints(&key).await.unwrap();
        assert!(listing.problems.is_empty(), "{:?}", listing.problems);
    });
}

//! `hubhost checkpoints list|reset|migrate` as a user runs them: on a local directory and on
//! Azurite, with bad state, bad names, confirmation, and storage that is down or throttling.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use hubhost_checkpoints::{Checkpoint, CheckpointStore, ConsumerGroupKey, OwnershipClaim};
use hubhost_storage::{Condition, Metadata, SharedStore, StorageLocation};
use serde_json::Value;

const CONTAINER: &str = "azure-webjobs-eventhub";
const NS: &str = "cli.servicebus.windows.net";
const LEGACY_SAMPLE: &str =
    include_str!("../../crates/checkpoints/src/testdata/legacy_eph_checkpoint_blob_body.json");

fn key() -> ConsumerGroupKey {
    ConsumerGroupKey::new(NS, "sensors", "$Default").unwrap()
}

/// Partitions 0–1 owned with checkpoints, 2 with a legacy checkpoint only, 3 with a bad one.
async fn seed(blobs: &SharedStore) {
    let store = CheckpointStore::new(blobs.clone(), CONTAINER);
    store.ensure_container().await.unwrap();
    let claims: Vec<_> = ["0", "1"]
        .iter()
        .map(|p| OwnershipClaim {
            partition_id: p.to_string(),
            owner_id: "instance-a".into(),
            etag: None,
            vouched_expiry: None,
        })
        .collect();
    assert_eq!(
        store.claim_ownership(&key(), &claims).await.unwrap().len(),
        2
    );
    store
        .update_checkpoint(&key(), &Checkpoint::new("0", Some("4096".into()), 40))
        .await
        .unwrap();
    store
        .update_checkpoint(&key(), &Checkpoint::new("1", Some("8192".into()), 80))
        .await
        .unwrap();
    let put = |name: &str, body: &[u8], m: Metadata| {
        let blobs = blobs.clone();
        let (name, body) = (name.to_string(), Bytes::copy_from_slice(body));
        async move {
            blobs
                .put(CONTAINER, &name, body, &m, &Condition::Always)
                .await
                .unwrap()
        }
    };
    put(
        &format!("{NS}/sensors/$Default/2"),
        LEGACY_SAMPLE.replace("\"0\"", "\"2\"").as_bytes(),
        Metadata::new(),
    )
    .await;
    let mut m = Metadata::new();
    m.insert("offset".into(), "12".into());
    m.insert("sequencenumber".into(), "twelve".into());
    put(&format!("{NS}/sensors/$default/checkpoint/3"), b"", m).await;
}

fn scope(storage: &str) -> Vec<&str> {
    vec!["--storage", storage, "--namespace", NS, "--hub", "sensors"]
}

fn run(args: &[&str]) -> (i32, String, String) {
    common::hubhost(args, &[])
}

/// `hubhost checkpoints {args} --storage … --namespace … --hub sensors`.
fn checkpoints(storage: &str, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["checkpoints"];
    all.extend_from_slice(args);
    all.extend(scope(storage));
    run(&all)
}

fn list_json(storage: &str) -> Vec<Value> {
    let (code, out, err) = checkpoints(storage, &["list", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn row<'a>(rows: &'a [Value], p: &str) -> &'a Value {
    rows.iter().find(|r| r["partitionId"] == p).unwrap()
}

#[tokio::test]
async fn list_reset_and_migrate_on_a_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().to_str().unwrap().to_string();
    let blobs = StorageLocation::Directory(dir.path().into())
        .open()
        .unwrap();
    seed(&blobs).await;

    // list --json: the documented fields, exact values, numeric partition order.
    let rows = list_json(&storage);
    let ids: Vec<_> = rows
        .iter()
        .map(|r| r["partitionId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["0", "1", "2", "3"]);
    let r0 = row(&rows, "0");
    assert_eq!(r0["ownerId"], "instance-a");
    assert_eq!(r0["offset"], "4096");
    assert_eq!(r0["sequenceNumber"], 40);
    assert!(r0["lastModified"].as_str().unwrap().starts_with("20"));
    let r2 = row(&rows, "2");
    assert_eq!(r2["ownerId"], Value::Null);
    assert_eq!(r2["offset"], "8591964920");
    assert_eq!(r2["source"], "legacy");
    let r3 = row(&rows, "3");
    let problem = r3["problem"].as_str().unwrap();
    assert!(
        problem.contains(&format!("{NS}/sensors/$default/checkpoint/3"))
            && problem.contains("\"twelve\" is not a number"),
        "{problem}"
    );

    // The text form shows the same, problem included.
    let (code, out, _) = checkpoints(&storage, &["list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("instance-a") && out.contains("problem:"),
        "{out}"
    );

    // reset without --yes and without a terminal: refused, nothing changed.
    let (code, _, err) = checkpoints(&storage, &["reset", "--to", "start"]);
    assert_eq!(code, 1);
    assert!(err.contains("pass --yes"), "{err}");
    assert!(err.contains("owned by a running consumer"), "{err}");
    assert_eq!(list_json(&storage), rows);

    // The end and a time need the event hub (tests/hub/sdk_peers.rs resets against one); without a
    // connection, or with a target that is none of the three, the error says what to give.
    let (code, _, err) = checkpoints(&storage, &["reset", "--to", "end", "--yes"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("give --connection or --fully-qualified-namespace")
            && err.contains("set EventHubConnection"),
        "{err}"
    );
    let (code, _, err) = checkpoints(&storage, &["reset", "--to", "yesterday", "--yes"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("expected start, end or an RFC 3339 time"),
        "{err}"
    );
    assert_eq!(list_json(&storage), rows, "nothing written");

    // reset --to start of named partitions: those move to offset -1, the others stay.
    let (code, out, err) = checkpoints(
        &storage,
        &[
            "reset",
            "--to",
            "start",
            "--yes",
            "--partitions",
            "1,3",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let after = list_json(&storage);
    assert_eq!(row(&after, "0")["offset"], "4096");
    assert_eq!(row(&after, "1")["offset"], "-1");
    assert_eq!(row(&after, "1")["sequenceNumber"], -1);
    assert_eq!(
        row(&after, "3")["offset"],
        "-1",
        "a reset repairs a bad checkpoint"
    );
    assert_eq!(row(&after, "3")["problem"], Value::Null);

    // migrate: partition 2's legacy checkpoint becomes current; the legacy blob stays.
    let (code, out, _) = checkpoints(&storage, &["migrate", "--json", "--dry-run"]);
    assert_eq!(code, 0);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["steps"][0]["partitionId"], "2");
    assert_eq!(
        row(&list_json(&storage), "2")["source"],
        "legacy",
        "dry run wrote"
    );
    let (code, out, _) = checkpoints(&storage, &["migrate"]);
    assert_eq!(code, 0);
    assert!(out.contains("1 legacy checkpoints migrated"), "{out}");
    let r2 = row(&list_json(&storage), "2").clone();
    assert_eq!(
        (r2["source"].as_str(), r2["offset"].as_str()),
        (Some("checkpoint"), Some("8591964920"))
    );
    assert!(
        dir.path()
            .join(format!("{CONTAINER}/{NS}/sensors/$Default/2"))
            .exists()
    );

    // reset with nothing known and no partitions named: a clear error.
    let empty = tempfile::tempdir().unwrap();
    let empty_path = empty.path().to_str().unwrap().to_string();
    let (code, _, err) = checkpoints(&empty_path, &["reset", "--to", "start", "--yes"]);
    assert_eq!(code, 1);
    assert!(err.contains("--partition-count"), "{err}");
    let (code, _, err) = checkpoints(
        &empty_path,
        &["reset", "--to", "start", "--yes", "--partition-count", "16"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(list_json(&empty_path).len(), 16);
}

#[test]
fn bad_names_are_refused_with_the_reason_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().to_str().unwrap();
    for (hub, group) in [
        ("..", "$Default"),
        ("a/b", "$Default"),
        ("sensors", "..\\x"),
    ] {
        let (code, _, err) = run(&[
            "checkpoints",
            "reset",
            "--to",
            "start",
            "--yes",
            "--partition-count",
            "2",
            "--storage",
            storage,
            "--namespace",
            NS,
            "--hub",
            hub,
            "--consumer-group",
            group,
        ]);
        assert_eq!(code, 1);
        assert!(
            err.contains("cannot be used in a checkpoint blob name"),
            "{err}"
        );
    }
    let (code, _, err) = run(&[
        "checkpoints",
        "reset",
        "--to",
        "start",
        "--yes",
        "--partitions",
        "../../x",
        "--storage",
        storage,
        "--namespace",
        NS,
        "--hub",
        "sensors",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("partition id"), "{err}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "something was written"
    );
}

#[test]
fn the_namespace_comes_from_the_eventhub_connection_setting() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().to_str().unwrap();
    let (code, _, err) = common::hubhost(
        &[
            "checkpoints",
            "reset",
            "--to",
            "start",
            "--yes",
            "--partition-count",
            "1",
            "--storage",
            storage,
        ],
        &[
            ("EventHubName", "sensors"),
            (
                "EventHubConnection",
                "Endpoint=sb://fromsetting.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0",
            ),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("c2VjcmV0"));
    assert!(dir
        .path()
        .join("azure-webjobs-eventhub/fromsetting.servicebus.windows.net/sensors/$default/checkpoint/0")
        .exists());
    let (code, _, err) = run(&[
        "checkpoints",
        "list",
        "--storage",
        storage,
        "--hub",
        "sensors",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("--namespace"), "{err}");
}

#[tokio::test]
async fn the_cli_works_on_azurite_and_never_prints_the_key() {
    common::require!(Tool::Azurite);
    let azurite = common::Azurite::start();
    let conn = azurite.connection_string();
    let blobs = StorageLocation::parse(&conn).unwrap().open().unwrap();
    seed(&blobs).await;
    let rows = list_json(&conn);
    assert_eq!(row(&rows, "1")["sequenceNumber"], 80);
    let (code, out, err) = checkpoints(
        &conn,
        &["reset", "--to", "start", "--yes", "--partitions", "0"],
    );
    assert_eq!(code, 0, "{err}");
    let rows = list_json(&conn);
    assert_eq!(row(&rows, "0")["offset"], "-1");
    let key_text = hubhost_storage::connection::DEV_KEY;
    assert!(!out.contains(key_text) && !err.contains(key_text));
}

/// A minimal HTTP server standing in for a storage account that misbehaves: answers the first
/// `failures` requests with `status`, then every request with an empty blob listing.
fn misbehaving_storage(status: u16, failures: usize) -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let (code, text, body) = if n < failures {
                (status, "Busy", "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>ServerBusy</Code><Message>The server is busy.</Message></Error>".to_string())
            } else {
                (200, "OK", "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults ContainerName=\"azure-webjobs-eventhub\"><Blobs /><NextMarker /></EnumerationResults>".to_string())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {code} {text}\r\nContent-Type: application/xml\r\nx-ms-error-code: ServerBusy\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, seen)
}

fn conn_to(port: u16) -> String {
    format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={};BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;",
        hubhost_storage::connection::DEV_KEY
    )
}

#[test]
fn throttling_is_retried_with_backoff() {
    let (port, seen) = misbehaving_storage(429, 2);
    let conn = conn_to(port);
    let (code, out, err) = checkpoints(&conn, &["list", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "[]");
    // Two refusals, the retry that succeeded, then the two other listings (checkpoints, legacy).
    assert_eq!(seen.load(Ordering::SeqCst), 5);
}

#[test]
fn storage_that_stays_down_gets_a_clear_error_after_retries() {
    let (port, seen) = misbehaving_storage(503, usize::MAX);
    let conn = conn_to(port);
    let (code, out, err) = checkpoints(&conn, &["list"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("storage is unavailable") && err.contains("503"),
        "{err}"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 4, "one try and three retries");
    let key_text = hubhost_storage::connection::DEV_KEY;
    assert!(!out.contains(key_text) && !err.contains(key_text));

    // Nobody listening at all.
    let closed = common::free_port();
    let conn = conn_to(closed);
    let (code, _, err) = checkpoints(&conn, &["list"]);
    assert_eq!(code, 1);
    assert!(err.contains("storage is unavailable"), "{err}");
}

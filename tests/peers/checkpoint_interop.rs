//! hubhost's checkpoint store and the official Python one (`azure-eventhub-checkpointstoreblob`)
//! on one Azurite container: each reads exactly what the other wrote, and a claim with a stale
//! ETag loses whichever side makes it.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::collections::BTreeMap;

use hubhost_checkpoints::{Checkpoint, CheckpointStore, ConsumerGroupKey, OwnershipClaim};
use hubhost_storage::{ETag, StorageLocation};
use serde_json::Value;

const CONTAINER: &str = "azure-webjobs-eventhub";
// Mixed case on purpose: both sides must lowercase the same way.
const NS: &str = "Interop.servicebus.windows.net";
const HUB: &str = "Sensors";
const CG: &str = "$Default";

struct Peer {
    conn: String,
}

impl Peer {
    fn run(&self, op: &str, args: &[&str]) -> Value {
        let mut all = vec![self.conn.as_str(), CONTAINER, NS, HUB, CG, op];
        all.extend_from_slice(args);
        common::python_json("checkpoint_peer.py", &all)
    }
}

fn quoted(etag: &ETag) -> String {
    format!("\"{etag}\"")
}

fn unquoted(v: &Value) -> String {
    v.as_str().unwrap().trim_matches('"').to_string()
}

#[tokio::test]
async fn python_and_hubhost_read_each_others_ownership_and_checkpoints() {
    common::require!(Tool::Azurite, Tool::PythonSdk);
    let azurite = common::Azurite::start();
    let conn = azurite.connection_string();
    let blobs = StorageLocation::parse(&conn).unwrap().open().unwrap();
    let store = CheckpointStore::new(blobs.clone(), CONTAINER);
    store.ensure_container().await.unwrap();
    let key = ConsumerGroupKey::new(NS, HUB, CG).unwrap();
    let py = Peer { conn };

    // Python claims 0..3 and checkpoints partition 0; hubhost reads exactly that.
    let claimed = py.run("claim", &["owner-python", "0", "1", "2", "3"]);
    assert_eq!(claimed.as_array().unwrap().len(), 4, "{claimed}");
    py.run("checkpoint", &["0", "1234", "56"]);
    let ours = store.list_ownership(&key).await.unwrap();
    assert_eq!(ours.len(), 4);
    let theirs: BTreeMap<String, &Value> = claimed
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["partition_id"].as_str().unwrap().to_string(), o))
        .collect();
    for o in &ours {
        let t = theirs[&o.partition_id];
        assert_eq!(o.owner_id, "owner-python");
        assert_eq!(o.etag.as_str(), unquoted(&t["etag"]));
        assert_eq!(
            o.last_modified.timestamp(),
            t["last_modified_time"].as_f64().unwrap() as i64
        );
    }
    let cp = store.get_checkpoint(&key, "0").await.unwrap().unwrap();
    assert_eq!(
        (cp.offset.as_deref(), cp.sequence_number),
        (Some("1234"), Some(56))
    );

    // The blobs are the ones the host and Python use, byte for byte: lowercased, empty.
    let names: Vec<String> = blobs
        .list(CONTAINER, "")
        .await
        .unwrap()
        .iter()
        .map(|b| {
            assert_eq!(b.size, 0, "{} is not empty", b.name);
            b.name.clone()
        })
        .collect();
    assert!(
        names.contains(&"interop.servicebus.windows.net/sensors/$default/checkpoint/0".to_string()),
        "{names:?}"
    );

    // hubhost claims 4..7 (vouching for its 6 s expiry in an extra metadata key, as its
    // instances do) and checkpoints partition 5; Python reads exactly that.
    let vouched = Some(std::time::Duration::from_secs(6));
    let claims: Vec<OwnershipClaim> = (4..8)
        .map(|p| OwnershipClaim {
            partition_id: p.to_string(),
            owner_id: "owner-hubhost".into(),
            etag: None,
            vouched_expiry: vouched,
        })
        .collect();
    let won = store.claim_ownership(&key, &claims).await.unwrap();
    assert_eq!(won.len(), 4);
    let listed_here = store.list_ownership(&key).await.unwrap();
    for p in ["4", "5", "6", "7"] {
        let o = listed_here.iter().find(|o| o.partition_id == p).unwrap();
        assert_eq!(o.vouched_expiry, vouched, "partition {p}");
    }
    assert!(
        listed_here
            .iter()
            .filter(|o| o.owner_id == "owner-python")
            .all(|o| o.vouched_expiry.is_none()),
        "Python's records vouch for nothing"
    );
    store
        .update_checkpoint(
            &key,
            &Checkpoint::new("5", Some("8591964920".into()), 960180),
        )
        .await
        .unwrap();
    let listed = py.run("list-ownership", &[]);
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 8);
    for o in &won {
        let t = listed
            .iter()
            .find(|t| t["partition_id"] == o.partition_id.as_str())
            .unwrap();
        assert_eq!(t["owner_id"], "owner-hubhost");
        assert_eq!(unquoted(&t["etag"]), o.etag.as_str());
    }
    let cps = py.run("list-checkpoints", &[]);
    let p5 = cps
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["partition_id"] == "5")
        .expect("Python sees hubhost's checkpoint");
    assert_eq!(p5["offset"], "8591964920");
    assert_eq!(p5["sequence_number"], 960180);

    // hubhost renews partition 0 with the current ETag: Python's old ETag is now stale and loses.
    let p0 = ours.iter().find(|o| o.partition_id == "0").unwrap();
    let stale_for_python = p0.etag.clone();
    let renewed = store
        .claim_ownership(
            &key,
            &[OwnershipClaim {
                partition_id: "0".into(),
                owner_id: "owner-hubhost".into(),
                etag: Some(p0.etag.clone()),
                vouched_expiry: vouched,
            }],
        )
        .await
        .unwrap();
    assert_eq!(renewed.len(), 1);
    let lost = py.run(
        "claim",
        &["owner-python", &format!("0:{}", quoted(&stale_for_python))],
    );
    assert_eq!(lost, Value::Array(vec![]), "Python's stale claim must lose");

    // And the reverse: Python renews partition 4 with the current ETag, hubhost's is stale.
    let p4 = won.iter().find(|o| o.partition_id == "4").unwrap();
    let took = py.run(
        "claim",
        &["owner-python", &format!("4:{}", quoted(&p4.etag))],
    );
    assert_eq!(took.as_array().unwrap().len(), 1, "{took}");
    let lost = store
        .claim_ownership(
            &key,
            &[OwnershipClaim {
                partition_id: "4".into(),
                owner_id: "owner-hubhost".into(),
                etag: Some(p4.etag.clone()),
                vouched_expiry: vouched,
            }],
        )
        .await
        .unwrap();
    assert!(lost.is_empty(), "hubhost's stale claim must lose");
    let now: BTreeMap<String, (String, Option<std::time::Duration>)> = store
        .list_ownership(&key)
        .await
        .unwrap()
        .into_iter()
        .map(|o| (o.partition_id, (o.owner_id, o.vouched_expiry)))
        .collect();
    assert_eq!(now["0"], ("owner-hubhost".to_string(), vouched));
    // Python's claim replaced the whole metadata: partition 4 now has a foreign owner, judged
    // by the foreign expiry, not by the 6 s hubhost vouched for.
    assert_eq!(now["4"], ("owner-python".to_string(), None));

    // A graceful hubhost shutdown relinquishes: Python sees the partition without owner.
    let p5 = store
        .list_ownership(&key)
        .await
        .unwrap()
        .into_iter()
        .find(|o| o.partition_id == "5")
        .unwrap();
    assert!(store.relinquish(&key, &p5).await.unwrap());
    let listed = py.run("list-ownership", &[]);
    let p5 = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["partition_id"] == "5")
        .unwrap();
    // An empty metadata value comes back from a listing as an empty XML element, which
    // Python's parser turns into None; either way nobody owns it.
    assert!(p5["owner_id"] == "" || p5["owner_id"].is_null(), "{p5}");
}

#[tokio::test]
async fn the_rust_sdks_case_preserving_names_are_not_what_the_host_reads() {
    common::require!(Tool::Azurite, Tool::PythonSdk);
    // The reference finding in one assertion: a store that does not lowercase writes
    // `…/$Default/…`, which Python (and the Functions host) never list. Ours does lowercase.
    let azurite = common::Azurite::start();
    let conn = azurite.connection_string();
    let blobs = StorageLocation::parse(&conn).unwrap().open().unwrap();
    blobs.ensure_container(CONTAINER).await.unwrap();
    let mut meta = hubhost_storage::Metadata::new();
    meta.insert("offset".into(), "1".into());
    meta.insert("sequencenumber".into(), "1".into());
    blobs
        .put(
            CONTAINER,
            "Interop.servicebus.windows.net/Sensors/$Default/checkpoint/9",
            bytes::Bytes::new(),
            &meta,
            &hubhost_storage::Condition::Always,
        )
        .await
        .unwrap();
    let py = Peer { conn };
    assert_eq!(py.run("list-checkpoints", &[]), Value::Array(vec![]));
    let store = CheckpointStore::new(blobs, CONTAINER);
    let key = ConsumerGroupKey::new(NS, HUB, CG).unwrap();
    assert!(store.get_checkpoint(&key, "9").await.unwrap().is_none());
}

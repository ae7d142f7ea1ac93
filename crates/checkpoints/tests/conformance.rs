//! The checkpoint store's conformance suite, run on all three backends (memory, a local
//! directory, Azurite): claims, renewals, races, relinquishing, checkpoints, legacy blobs, bad
//! state and bad names. (Racing claims from several OS processes, and `kill -9` during writes,
//! run with the `hubhost` executable in the workspace's `peers` tests.)

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use hubhost_checkpoints::maintenance;
use hubhost_checkpoints::{
    Checkpoint, CheckpointAdvance, CheckpointError, CheckpointStore, ConsumerGroupKey,
    InitialPosition, OwnershipClaim, PositionSource, Start, StartPosition,
};
use hubhost_storage::{Condition, Metadata, SharedStore, StorageLocation};

const CONTAINER: &str = "azure-webjobs-eventhub";
const LEGACY_SAMPLE: &str = include_str!("../src/testdata/legacy_eph_checkpoint_blob_body.json");

fn key() -> ConsumerGroupKey {
    ConsumerGroupKey::new("MyNs.servicebus.windows.net", "Sensors", "$Default").unwrap()
}

fn claim(p: &str, owner: &str, etag: Option<&hubhost_storage::ETag>) -> OwnershipClaim {
    OwnershipClaim {
        partition_id: p.into(),
        owner_id: owner.into(),
        etag: etag.cloned(),
        vouched_expiry: None,
    }
}

fn meta(pairs: &[(&str, &str)]) -> Metadata {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn put_raw(blobs: &SharedStore, name: &str, body: &[u8], metadata: Metadata) {
    blobs
        .put(
            CONTAINER,
            name,
            Bytes::copy_from_slice(body),
            &metadata,
            &Condition::Always,
        )
        .await
        .unwrap();
}

async fn conformance(blobs: SharedStore) {
    let store = CheckpointStore::new(blobs.clone(), CONTAINER);
    store.ensure_container().await.unwrap();
    let key = key();
    assert!(store.list_ownership(&key).await.unwrap().is_empty());
    assert!(store.list_checkpoints(&key).await.unwrap().items.is_empty());

    // New claims: created once; a second creator of the same partition loses.
    let before = Utc::now() - chrono::Duration::seconds(2);
    let claims: Vec<_> = (0..4).map(|p| claim(&p.to_string(), "a", None)).collect();
    let won = store.claim_ownership(&key, &claims).await.unwrap();
    assert_eq!(won.len(), 4);
    let lost = store
        .claim_ownership(&key, &[claim("0", "b", None)])
        .await
        .unwrap();
    assert!(lost.is_empty());

    // Listing returns owner, ETag and last-modified time as written.
    let listed = store.list_ownership(&key).await.unwrap();
    assert_eq!(listed.len(), 4);
    for o in &listed {
        let w = won
            .iter()
            .find(|w| w.partition_id == o.partition_id)
            .unwrap();
        assert_eq!((o.owner_id.as_str(), &o.etag), ("a", &w.etag));
        assert!(
            o.last_modified >= before
                && o.last_modified <= Utc::now() + chrono::Duration::seconds(2)
        );
        assert!(o.is_active(Utc::now(), Duration::from_secs(120)));
        assert!(!o.is_active(
            Utc::now() + chrono::Duration::seconds(130),
            Duration::from_secs(120)
        ));
    }

    // The exact blobs: lowercased names, zero bytes, metadata `ownerid`.
    let raw = blobs
        .get(
            CONTAINER,
            "myns.servicebus.windows.net/sensors/$default/ownership/2",
        )
        .await
        .unwrap()
        .expect("ownership blob under the lowercased name");
    assert_eq!(raw.data.len(), 0);
    assert_eq!(raw.properties.metadata, meta(&[("ownerid", "a")]));

    // Renewal with the current ETag wins and changes the ETag; the old ETag is then stale.
    let p0 = &won[0];
    let renewed = store
        .claim_ownership(&key, &[claim(&p0.partition_id, "a", Some(&p0.etag))])
        .await
        .unwrap();
    assert_eq!(renewed.len(), 1);
    assert_ne!(renewed[0].etag, p0.etag);
    let stale = store
        .claim_ownership(&key, &[claim(&p0.partition_id, "thief", Some(&p0.etag))])
        .await
        .unwrap();
    assert!(stale.is_empty());

    // Racing claimants with the same ETag: exactly one wins.
    let p1 = listed
        .iter()
        .find(|o| o.partition_id == "1")
        .unwrap()
        .clone();
    let mut racers = tokio::task::JoinSet::new();
    for i in 0..8 {
        let (store, key, etag) = (store.clone(), key.clone(), p1.etag.clone());
        racers.spawn(async move {
            let owner = format!("racer-{i}");
            let won = store
                .claim_ownership(&key, &[claim("1", &owner, Some(&etag))])
                .await
                .unwrap();
            (!won.is_empty()).then_some(owner)
        });
    }
    let mut winners = Vec::new();
    while let Some(r) = racers.join_next().await {
        winners.extend(r.unwrap());
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let now: BTreeMap<_, _> = store
        .list_ownership(&key)
        .await
        .unwrap()
        .into_iter()
        .map(|o| (o.partition_id.clone(), o))
        .collect();
    assert_eq!(now["1"].owner_id, winners[0]);

    // Relinquish under the current ETag clears the owner; with a stale one it does nothing.
    assert!(store.relinquish(&key, &now["3"]).await.unwrap());
    assert!(!store.relinquish(&key, &now["3"]).await.unwrap());
    let p3 = store
        .list_ownership(&key)
        .await
        .unwrap()
        .into_iter()
        .find(|o| o.partition_id == "3")
        .unwrap();
    assert_eq!(p3.owner_id, "");
    assert!(!p3.is_active(Utc::now(), Duration::from_secs(120)));
    // …and a relinquished partition is claimable with its ETag.
    let taken = store
        .claim_ownership(&key, &[claim("3", "b", Some(&p3.etag))])
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);

    // Checkpoints: create, overwrite, read back exactly; the blob is zero bytes with metadata.
    store
        .update_checkpoint(&key, &Checkpoint::new("0", Some("100".into()), 10))
        .await
        .unwrap();
    store
        .update_checkpoint(&key, &Checkpoint::new("0", Some("250".into()), 25))
        .await
        .unwrap();
    store
        .update_checkpoint(
            &key,
            &Checkpoint {
                partition_id: "1".into(),
                offset: None,
                sequence_number: Some(7),
                last_modified: None,
            },
        )
        .await
        .unwrap();
    let cp0 = store.get_checkpoint(&key, "0").await.unwrap().unwrap();
    assert_eq!(
        (cp0.offset.as_deref(), cp0.sequence_number),
        (Some("250"), Some(25))
    );
    let raw = blobs
        .get(
            CONTAINER,
            "myns.servicebus.windows.net/sensors/$default/checkpoint/1",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(raw.data.len(), 0);
    assert_eq!(
        raw.properties.metadata,
        meta(&[("offset", ""), ("sequencenumber", "7")])
    );
    let listing = store.list_checkpoints(&key).await.unwrap();
    assert_eq!(listing.items.len(), 2);
    assert!(listing.problems.is_empty());
    assert!(matches!(
        store
            .update_checkpoint(
                &key,
                &Checkpoint {
                    partition_id: "2".into(),
                    offset: None,
                    sequence_number: None,
                    last_modified: None
                }
            )
            .await,
        Err(CheckpointError::EmptyCheckpoint { .. })
    ));

    // Pumps advance checkpoints, never back: a stale writer cannot undo a newer owner's
    // position, whether it knows no version, or an outdated one. (A consumer group of its
    // own, so the listings below stay as they are.)
    {
        let key =
            ConsumerGroupKey::new("MyNs.servicebus.windows.net", "Sensors", "advancing").unwrap();
        let at = |seq: i64| Checkpoint::new("5", Some((seq * 10).to_string()), seq);
        let stored = |store: &CheckpointStore| {
            let (store, key) = (store.clone(), key.clone());
            async move {
                store
                    .get_checkpoint(&key, "5")
                    .await
                    .unwrap()
                    .unwrap()
                    .sequence_number
            }
        };
        let Ok(CheckpointAdvance::Written(new_owner)) =
            store.advance_checkpoint(&key, &at(10), None).await
        else {
            panic!("the first checkpoint is written")
        };
        assert_eq!(
            store.advance_checkpoint(&key, &at(5), None).await.unwrap(),
            CheckpointAdvance::Behind { stored: 10 }
        );
        let Ok(CheckpointAdvance::Written(new_owner)) = store
            .advance_checkpoint(&key, &at(20), Some(&new_owner))
            .await
        else {
            panic!("the writer's own version is replaced")
        };
        assert_eq!(stored(&store).await, Some(20));
        let Ok(CheckpointAdvance::Written(stale)) =
            store.advance_checkpoint(&key, &at(21), None).await
        else {
            panic!("a position past the stored one is written by anyone")
        };
        // The first writer's ETag is outdated now; its older position stays out.
        assert_eq!(
            store
                .advance_checkpoint(&key, &at(15), Some(&new_owner))
                .await
                .unwrap(),
            CheckpointAdvance::Behind { stored: 21 }
        );
        assert!(matches!(
            store
                .advance_checkpoint(&key, &at(30), Some(&new_owner))
                .await,
            Ok(CheckpointAdvance::Written(_))
        ));
        assert_eq!(
            store
                .advance_checkpoint(&key, &at(25), Some(&stale))
                .await
                .unwrap(),
            CheckpointAdvance::Behind { stored: 30 }
        );
        assert_eq!(stored(&store).await, Some(30));
        // Racing writers end at the furthest position, whatever the order.
        let racers = (0..8).map(|i| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move { store.advance_checkpoint(&key, &at(31 + i), None).await })
        });
        for r in futures::future::join_all(racers).await {
            r.unwrap().unwrap();
        }
        assert_eq!(stored(&store).await, Some(38));
        // A reset may move a checkpoint back on purpose: that stays the unconditional write.
        store.update_checkpoint(&key, &at(3)).await.unwrap();
        assert_eq!(stored(&store).await, Some(3));
        store.update_checkpoint(&key, &at(38)).await.unwrap();
    }

    // Start positions: current checkpoint (offset preferred), else sequence number.
    assert_eq!(
        store
            .start_position(&key, "0", InitialPosition::Latest)
            .await
            .unwrap(),
        Start {
            position: StartPosition::AfterOffset("250".into()),
            source: PositionSource::Checkpoint,
            after_sequence_number: Some(25),
        }
    );
    assert_eq!(
        store
            .start_position(&key, "1", InitialPosition::Latest)
            .await
            .unwrap()
            .position,
        StartPosition::AfterSequenceNumber(7)
    );

    // Bad state: non-numeric or missing metadata is reported with the blob's name, never
    // silently turned into "no checkpoint".
    let bad7 = "myns.servicebus.windows.net/sensors/$default/checkpoint/7";
    put_raw(
        &blobs,
        bad7,
        b"",
        meta(&[("offset", "12"), ("sequencenumber", "abc")]),
    )
    .await;
    let bad8 = "myns.servicebus.windows.net/sensors/$default/checkpoint/8";
    put_raw(&blobs, bad8, b"", meta(&[])).await;
    let listing = store.list_checkpoints(&key).await.unwrap();
    assert_eq!(listing.items.len(), 2);
    let problems: Vec<String> = listing.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems
            .iter()
            .any(|p| p.contains(bad7) && p.contains("\"abc\" is not a number"))
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains(bad8) && p.contains("neither"))
    );
    let err = store
        .start_position(&key, "7", InitialPosition::Earliest)
        .await
        .unwrap_err();
    assert!(
        matches!(err, CheckpointError::BadCheckpoint { .. }),
        "{err}"
    );

    // Legacy: with no current checkpoint, the v3/v4 JSON blob decides the start position.
    let legacy_name = "myns.servicebus.windows.net/sensors/$Default/0";
    put_raw(
        &blobs,
        legacy_name,
        LEGACY_SAMPLE.as_bytes(),
        Metadata::new(),
    )
    .await;
    let p9 = "myns.servicebus.windows.net/sensors/$Default/9";
    put_raw(
        &blobs,
        p9,
        LEGACY_SAMPLE.replace("\"0\"", "\"9\"").as_bytes(),
        Metadata::new(),
    )
    .await;
    let p10 = "myns.servicebus.windows.net/sensors/$Default/10";
    put_raw(&blobs, p10, b"<lease/>", Metadata::new()).await;
    assert_eq!(
        store
            .start_position(&key, "9", InitialPosition::Latest)
            .await
            .unwrap(),
        Start {
            position: StartPosition::AfterOffset("8591964920".into()),
            source: PositionSource::LegacyCheckpoint,
            after_sequence_number: Some(960180),
        }
    );
    let err = store
        .start_position(&key, "10", InitialPosition::Latest)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(p10) && err.contains("not a legacy lease JSON"),
        "{err}"
    );
    assert_eq!(
        store
            .start_position(&key, "11", InitialPosition::Latest)
            .await
            .unwrap(),
        Start {
            position: StartPosition::Latest,
            source: PositionSource::Initial,
            after_sequence_number: None,
        }
    );
    let legacy = store.list_legacy(&key).await.unwrap();
    let ids: Vec<_> = legacy
        .items
        .iter()
        .map(|l| l.partition_id.as_str())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.contains(&"0") && ids.contains(&"9"));
    assert_eq!(legacy.problems.len(), 1);

    // Migration writes current checkpoints where none exist and leaves legacy blobs alone.
    let before_legacy = blobs.get(CONTAINER, p9).await.unwrap().unwrap();
    let report = maintenance::migrate(&store, &key, false).await.unwrap();
    let actions: BTreeMap<_, _> = report
        .steps
        .iter()
        .map(|s| (s.partition_id.as_str(), s.action))
        .collect();
    assert_eq!(actions["0"], "kept"); // partition 0 already had a current checkpoint
    assert_eq!(actions["9"], "migrated");
    assert_eq!(report.problems.len(), 1);
    let cp9 = store.get_checkpoint(&key, "9").await.unwrap().unwrap();
    assert_eq!(
        (cp9.offset.as_deref(), cp9.sequence_number),
        (Some("8591964920"), Some(960180))
    );
    let after_legacy = blobs.get(CONTAINER, p9).await.unwrap().unwrap();
    assert_eq!(after_legacy.data, before_legacy.data);
    assert_eq!(after_legacy.properties.etag, before_legacy.properties.etag);
    assert_eq!(
        store
            .get_checkpoint(&key, "0")
            .await
            .unwrap()
            .unwrap()
            .offset
            .as_deref(),
        Some("250"),
        "migration must not overwrite a current checkpoint"
    );

    // Names that would escape the store are refused before anything is written.
    let count = blobs.list(CONTAINER, "").await.unwrap().len();
    for bad in ["..", "../../etc", "a\\b", ""] {
        assert!(matches!(
            store.claim_ownership(&key, &[claim(bad, "a", None)]).await,
            Err(CheckpointError::InvalidName { .. })
        ));
        assert!(matches!(
            store
                .update_checkpoint(&key, &Checkpoint::new(bad, None, 1))
                .await,
            Err(CheckpointError::InvalidName { .. })
        ));
    }
    assert_eq!(blobs.list(CONTAINER, "").await.unwrap().len(), count);

    // Another consumer group of the same hub is independent.
    let other = ConsumerGroupKey::new("MyNs.servicebus.windows.net", "Sensors", "archive").unwrap();
    assert!(store.list_ownership(&other).await.unwrap().is_empty());
    assert!(
        store
            .list_checkpoints(&other)
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn memory_backend_conforms() {
    conformance(StorageLocation::Memory.open().unwrap()).await;
}

#[tokio::test]
async fn local_directory_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    conformance(
        StorageLocation::Directory(dir.path().into())
            .open()
            .unwrap(),
    )
    .await;
    // The directory mirrors the blob layout.
    assert!(
        dir.path()
            .join(
                "azure-webjobs-eventhub/myns.servicebus.windows.net/sensors/$default/checkpoint/0"
            )
            .exists()
    );
}

#[tokio::test]
async fn azure_backend_conforms_against_azurite() {
    common::require!(Tool::Azurite);
    let azurite = common::Azurite::start();
    conformance(
        StorageLocation::parse(&azurite.connection_string())
            .unwrap()
            .open()
            .unwrap(),
    )
    .await;
}

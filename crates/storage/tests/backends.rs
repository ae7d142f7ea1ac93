//! One conformance suite, three backends: memory, a local directory, and Azure Blob Storage
//! (a real Azurite). They must agree on ETags, conditional writes, metadata and listings.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::sync::Arc;

use bytes::Bytes;
use hubhost_storage::{Condition, ETag, Metadata, SharedStore, StorageLocation, StoreError};

const C: &str = "conformance";

fn meta(pairs: &[(&str, &str)]) -> Metadata {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn conformance(store: SharedStore) {
    store.ensure_container(C).await.unwrap();
    store.ensure_container(C).await.unwrap(); // idempotent
    let name = "ns.servicebus.windows.net/hub/$default/ownership/0";
    assert!(store.get(C, name).await.unwrap().is_none());

    // Create-only: exactly once.
    let created = store
        .put(
            C,
            name,
            Bytes::new(),
            &meta(&[("ownerid", "a")]),
            &Condition::IfNotExists,
        )
        .await
        .unwrap();
    let again = store
        .put(
            C,
            name,
            Bytes::new(),
            &meta(&[("ownerid", "b")]),
            &Condition::IfNotExists,
        )
        .await;
    assert!(
        matches!(again, Err(StoreError::AlreadyExists { .. })),
        "{again:?}"
    );

    // Replace-if-unchanged: the current ETag wins, a stale one loses.
    let replaced = store
        .put(
            C,
            name,
            Bytes::from_static(b"v2"),
            &meta(&[("ownerid", "b")]),
            &Condition::IfMatch(created.etag.clone()),
        )
        .await
        .unwrap();
    assert_ne!(replaced.etag, created.etag);
    let stale = store
        .put(
            C,
            name,
            Bytes::from_static(b"v3"),
            &Metadata::new(),
            &Condition::IfMatch(created.etag.clone()),
        )
        .await;
    assert!(
        matches!(stale, Err(StoreError::ConditionNotMet { .. })),
        "{stale:?}"
    );
    let blob = store.get(C, name).await.unwrap().unwrap();
    assert_eq!(&blob.data[..], b"v2");
    assert_eq!(blob.properties.etag, replaced.etag);
    assert_eq!(blob.properties.metadata, meta(&[("ownerid", "b")]));

    // Metadata-only updates keep the content and change the ETag.
    let stale_meta = store
        .set_metadata(
            C,
            name,
            &meta(&[("ownerid", "c")]),
            &Condition::IfMatch(created.etag.clone()),
        )
        .await;
    assert!(
        matches!(stale_meta, Err(StoreError::ConditionNotMet { .. })),
        "{stale_meta:?}"
    );
    let updated = store
        .set_metadata(
            C,
            name,
            &meta(&[("ownerid", "c")]),
            &Condition::IfMatch(replaced.etag.clone()),
        )
        .await
        .unwrap();
    assert_ne!(updated.etag, replaced.etag);
    let blob = store.get(C, name).await.unwrap().unwrap();
    assert_eq!(
        (&blob.data[..], blob.properties.metadata["ownerid"].as_str()),
        (&b"v2"[..], "c")
    );
    let missing = store
        .set_metadata(C, "no/such/blob", &Metadata::new(), &Condition::Always)
        .await;
    assert!(
        matches!(missing, Err(StoreError::NotFound { .. })),
        "{missing:?}"
    );
    let missing = store
        .put(
            C,
            "no/such/blob",
            Bytes::new(),
            &Metadata::new(),
            &Condition::IfMatch(ETag::new("0x1")),
        )
        .await;
    assert!(
        matches!(missing, Err(StoreError::ConditionNotMet { .. })),
        "{missing:?}"
    );

    // Listings: by prefix, in name order, with metadata and the current ETag.
    for p in ["1", "10", "2"] {
        store
            .put(
                C,
                &format!("ns.servicebus.windows.net/hub/$default/checkpoint/{p}"),
                Bytes::new(),
                &meta(&[("offset", p), ("sequencenumber", "7")]),
                &Condition::Always,
            )
            .await
            .unwrap();
    }
    store
        .put(
            C,
            "other/blob",
            Bytes::from_static(b"x"),
            &Metadata::new(),
            &Condition::Always,
        )
        .await
        .unwrap();
    let listed = store
        .list(C, "ns.servicebus.windows.net/hub/$default/checkpoint/")
        .await
        .unwrap();
    let names: Vec<&str> = listed
        .iter()
        .map(|b| b.name.rsplit('/').next().unwrap())
        .collect();
    assert_eq!(names, ["1", "10", "2"]);
    assert_eq!(
        listed[1].metadata,
        meta(&[("offset", "10"), ("sequencenumber", "7")])
    );
    let owned = store
        .list(C, "ns.servicebus.windows.net/hub/$default/own")
        .await
        .unwrap();
    assert_eq!(owned.len(), 1);
    assert_eq!(owned[0].etag, updated.etag);
    assert_eq!(store.list(C, "").await.unwrap().len(), 5);

    // Delete, also of what is not there.
    store.delete(C, "other/blob").await.unwrap();
    store.delete(C, "other/blob").await.unwrap();
    assert!(store.get(C, "other/blob").await.unwrap().is_none());

    // Names that would escape a directory are refused everywhere.
    for bad in ["../escape", "a/../../b", "a//b"] {
        let r = store
            .put(C, bad, Bytes::new(), &Metadata::new(), &Condition::Always)
            .await;
        assert!(
            matches!(r, Err(StoreError::InvalidName { .. })),
            "{bad}: {r:?}"
        );
    }
}

/// Many writers incrementing one counter with read-modify-write under ETags: no lost update.
async fn racing_writers(store: SharedStore) {
    store.ensure_container(C).await.unwrap();
    let name = "race/counter";
    let writers = 6;
    let increments = 8;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..writers {
        let store = store.clone();
        tasks.spawn(async move {
            let mut lost = 0;
            for _ in 0..increments {
                loop {
                    let current = store.get(C, name).await.unwrap();
                    let (value, condition) = match &current {
                        Some(b) => (
                            std::str::from_utf8(&b.data)
                                .unwrap()
                                .parse::<u64>()
                                .unwrap(),
                            Condition::IfMatch(b.properties.etag.clone()),
                        ),
                        None => (0, Condition::IfNotExists),
                    };
                    match store
                        .put(
                            C,
                            name,
                            Bytes::from((value + 1).to_string()),
                            &Metadata::new(),
                            &condition,
                        )
                        .await
                    {
                        Ok(_) => break,
                        Err(
                            StoreError::ConditionNotMet { .. } | StoreError::AlreadyExists { .. },
                        ) => lost += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            lost
        });
    }
    let mut lost_races = 0;
    while let Some(r) = tasks.join_next().await {
        lost_races += r.unwrap();
    }
    let blob = store.get(C, name).await.unwrap().unwrap();
    assert_eq!(
        std::str::from_utf8(&blob.data).unwrap(),
        (writers * increments).to_string()
    );
    eprintln!("{}: {lost_races} lost races, all retried", store.describe());
}

#[tokio::test]
async fn memory_store_conforms() {
    let store: SharedStore = Arc::new(hubhost_storage::memory::MemoryStore::default());
    conformance(store.clone()).await;
    racing_writers(store).await;
}

#[tokio::test]
async fn local_directory_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = StorageLocation::Directory(dir.path().to_path_buf())
        .open()
        .unwrap();
    conformance(store.clone()).await;
    racing_writers(store).await;
    // The blob layout is the directory layout.
    assert!(
        dir.path()
            .join(C)
            .join("ns.servicebus.windows.net/hub/$default/checkpoint/10")
            .is_file()
    );
}

#[tokio::test]
async fn azure_store_conforms_against_azurite() {
    common::require!(Tool::Azurite);
    let azurite = common::Azurite::start();
    let store = StorageLocation::parse(&azurite.connection_string())
        .unwrap()
        .open()
        .unwrap();
    conformance(store.clone()).await;
    racing_writers(store).await;
}

/// `UseDevelopmentStorage=true` means Azurite's default endpoint; a wrong key is refused with a
/// clear, permanent error (not retried as if storage were down).
#[tokio::test]
async fn azure_auth_failures_are_permanent_errors() {
    common::require!(Tool::Azurite);
    let azurite = common::Azurite::start();
    let wrong = azurite.connection_string().replace(
        hubhost_storage::connection::DEV_KEY,
        "d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXkgd3Jvbmcga2V5IHdyb25nIGtleQ==",
    );
    let store = StorageLocation::parse(&wrong).unwrap().open().unwrap();
    let err = store.ensure_container(C).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Rejected { status: 403, .. }),
        "{err:?}"
    );
    assert!(!err.is_transient());
}

/// Rewriting a local blob trades places with its spare instead of allocating a new file each
/// time (see `storage/local.rs` for why), the spare is never listed, and a delete removes both.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn local_rewrites_reuse_two_inodes_and_hide_the_spare() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let store = StorageLocation::Directory(dir.path().to_path_buf())
        .open()
        .unwrap();
    store.ensure_container(C).await.unwrap();
    let file = dir.path().join(C).join("a/b.json");
    let mut inodes = std::collections::BTreeSet::new();
    for i in 0..8u8 {
        let data = Bytes::from(vec![b'x'; 10 + usize::from(i)]);
        let written = store
            .put(
                C,
                "a/b.json",
                data.clone(),
                &Metadata::new(),
                &Condition::Always,
            )
            .await
            .unwrap();
        let blob = store.get(C, "a/b.json").await.unwrap().unwrap();
        assert_eq!((blob.data, blob.properties.etag), (data, written.etag));
        if i > 0 {
            inodes.insert(std::fs::metadata(&file).unwrap().ino());
        }
    }
    assert_eq!(inodes.len(), 2, "seven rewrites used inodes {inodes:?}");
    let listed: Vec<String> = store
        .list(C, "")
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert_eq!(listed, vec!["a/b.json".to_string()]);
    store.delete(C, "a/b.json").await.unwrap();
    assert_eq!(
        std::fs::read_dir(file.parent().unwrap()).unwrap().count(),
        0
    );
}

/// A reader does not lock, so the file it opened can become the spare and be rewritten while
/// it reads. Every read, listing and conditional write racing a stream of rewrites must still
/// see one whole version: all bytes of one value, the length written, no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_reads_racing_rewrites_see_whole_versions() {
    let dir = tempfile::tempdir().unwrap();
    let store = StorageLocation::Directory(dir.path().to_path_buf())
        .open()
        .unwrap();
    store.ensure_container(C).await.unwrap();
    const SIZE: usize = 256 * 1024;
    let version = |v: u8| Bytes::from(vec![v; SIZE]);
    store
        .put(C, "hot", version(0), &Metadata::new(), &Condition::Always)
        .await
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let (store, stop) = (store.clone(), stop.clone());
        readers.spawn(async move {
            let mut reads = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let blob = store.get(C, "hot").await.unwrap().unwrap();
                let first = blob.data[0];
                assert!(
                    blob.data.len() == SIZE && blob.data.iter().all(|&b| b == first),
                    "a read saw a torn version ({} bytes)",
                    blob.data.len()
                );
                let listed = store.list(C, "").await.unwrap();
                assert_eq!(listed.len(), 1);
                assert_eq!(listed[0].size, SIZE as u64);
                reads += 1;
            }
            reads
        });
    }
    for v in 1..=200u8 {
        store
            .put(C, "hot", version(v), &Metadata::new(), &Condition::Always)
            .await
            .unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut reads = 0;
    while let Some(r) = readers.join_next().await {
        reads += r.unwrap();
    }
    assert!(reads > 0);
    let last = store.get(C, "hot").await.unwrap().unwrap();
    assert_eq!(last.data, version(200));
}

/// A local blob's file holds exactly its bytes, for any tool to read; its properties are in
/// the head file beside it, which no listing shows. A file put there by hand is a blob too,
/// with an ETag that changes when the file does, and a file an earlier hubhost wrote (its
/// header inside) reads as it did.
#[tokio::test]
async fn a_local_blob_file_holds_its_bytes_and_files_put_there_by_hand_are_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let store = StorageLocation::Directory(dir.path().to_path_buf())
        .open()
        .unwrap();
    store.ensure_container(C).await.unwrap();
    let content = br#"{"homeId":"home-1","count":3}"#;
    let written = store
        .put(
            C,
            "windows/home-1.json",
            Bytes::from_static(content),
            &meta(&[("kind", "window")]),
            &Condition::Always,
        )
        .await
        .unwrap();
    let folder = dir.path().join(C).join("windows");
    assert_eq!(std::fs::read(folder.join("home-1.json")).unwrap(), content);
    let head = std::fs::read_to_string(folder.join(".hubhost-head-home-1.json")).unwrap();
    assert!(
        head.starts_with("hubhost-head 1\n") && head.contains(written.etag.as_str()),
        "{head}"
    );
    let blob = store.get(C, "windows/home-1.json").await.unwrap().unwrap();
    assert_eq!(blob.properties.metadata, meta(&[("kind", "window")]));

    // By hand: read as it is; its ETag holds until the file changes.
    std::fs::write(folder.join("by-hand.json"), b"{\"limit\": 30}").unwrap();
    let first = store.get(C, "windows/by-hand.json").await.unwrap().unwrap();
    assert_eq!(&first.data[..], b"{\"limit\": 30}");
    let again = store.get(C, "windows/by-hand.json").await.unwrap().unwrap();
    assert_eq!(first.properties.etag, again.properties.etag);
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(folder.join("by-hand.json"), b"{\"limit\": 40}").unwrap();
    let changed = store.get(C, "windows/by-hand.json").await.unwrap().unwrap();
    assert_ne!(changed.properties.etag, first.properties.etag);
    // A conditional write on the hand-made file's ETag takes it over.
    store
        .put(
            C,
            "windows/by-hand.json",
            Bytes::from_static(b"{\"limit\": 50}"),
            &Metadata::new(),
            &Condition::IfMatch(changed.properties.etag.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(folder.join("by-hand.json")).unwrap(),
        b"{\"limit\": 50}"
    );

    // An earlier hubhost's file: the header inside, then the content.
    std::fs::write(
        folder.join("old.json"),
        "hubhost-blob 1\n{\"etag\":\"0xOLD\",\"lastModified\":\"2026-11-01T00:00:00Z\",\"metadata\":{\"a\":\"b\"},\"length\":2}\n{}",
    )
    .unwrap();
    let old = store.get(C, "windows/old.json").await.unwrap().unwrap();
    assert_eq!(
        (&old.data[..], old.properties.etag.as_str()),
        (&b"{}"[..], "0xOLD")
    );
    assert_eq!(old.properties.metadata, meta(&[("a", "b")]));

    let listed: Vec<(String, u64)> = store
        .list(C, "windows/")
        .await
        .unwrap()
        .into_iter()
        .map(|b| (b.name, b.size))
        .collect();
    assert_eq!(
        listed,
        [
            ("windows/by-hand.json".to_string(), 13),
            ("windows/home-1.json".to_string(), content.len() as u64),
            ("windows/old.json".to_string(), 2),
        ]
    );
}

/// A writer killed between trading a blob's new content into place and its new head leaves
/// the new content beside the old head, the new head in the head's spare. The next read holds
/// the lock, finds the spare matching the content, and finishes the write: the new version,
/// whole, with the ETag its writer was about to return.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_local_write_cut_between_content_and_head_is_finished_by_the_next_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = StorageLocation::Directory(dir.path().to_path_buf())
        .open()
        .unwrap();
    store.ensure_container(C).await.unwrap();
    let put = |data: &'static [u8]| {
        let store = store.clone();
        async move {
            store
                .put(
                    C,
                    "owner",
                    Bytes::from_static(data),
                    &Metadata::new(),
                    &Condition::Always,
                )
                .await
                .unwrap()
        }
    };
    put(b"version 1").await;
    let second = put(b"version 2, longer").await;
    // Undo the last trade: the old head back in place, the new one in the spare.
    let folder = dir.path().join(C);
    let (head, spare, aside) = (
        folder.join(".hubhost-head-owner"),
        folder.join(".hubhost-spare-.hubhost-head-owner"),
        folder.join("aside"),
    );
    std::fs::rename(&head, &aside).unwrap();
    std::fs::rename(&spare, &head).unwrap();
    std::fs::rename(&aside, &spare).unwrap();
    assert!(
        std::fs::read_to_string(&head)
            .unwrap()
            .contains("\"length\":9"),
        "the old head is in place"
    );

    let blob = store.get(C, "owner").await.unwrap().unwrap();
    assert_eq!(&blob.data[..], b"version 2, longer");
    assert_eq!(blob.properties.etag, second.etag);
    // Finished for good: the next conditional write on that ETag succeeds.
    store
        .put(
            C,
            "owner",
            Bytes::from_static(b"version 3"),
            &Metadata::new(),
            &Condition::IfMatch(second.etag.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        &store.get(C, "owner").await.unwrap().unwrap().data[..],
        b"version 3"
    );
}

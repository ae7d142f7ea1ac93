//! At-least-once delivery must not double count: replays and overlapping deliveries to two
//! handler processes leave exactly the aggregates of every event applied once.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::collections::BTreeMap;

use common::{Azurite, Server};
use hubhost_app::aggregate::{AppliedRanges, WindowAggregate, window_start};
use hubhost_app::archive::ArchiveChunk;
use hubhost_app::fleet::{Fleet, PartitionFeed};
use hubhost_app::handler::builtin_functions;
use hubhost_app::layout;
use hubhost_app::sensor::parse_reading;
use hubhost_functions::batch::EventRecord;
use hubhost_storage::{SharedStore, StorageLocation};
use hubhost_testkit::host_request;

const PARTITION: u32 = 2;

fn feed_batches(count: usize, size: usize) -> Vec<Vec<EventRecord>> {
    let fleet = Fleet {
        homes: 200,
        partitions: 4,
        seed: 5,
    };
    let start = chrono::DateTime::parse_from_rfc3339("2026-11-22T09:00:00Z")
        .unwrap()
        .into();
    let mut feed = PartitionFeed::new(&fleet, PARTITION, start);
    (0..count).map(|_| feed.next_batch(size)).collect()
}

fn request(function_index: usize, events: &[EventRecord]) -> Vec<u8> {
    let spec = builtin_functions().remove(function_index);
    host_request(
        &spec.name,
        spec.event_hub_trigger().unwrap(),
        PARTITION,
        events,
    )
}

/// A window as readers see it, whatever blocks it was written in: the record of applied
/// sequence numbers is the writers' business (its split follows the blocks).
fn readers_view(mut window: WindowAggregate) -> WindowAggregate {
    window.block.clear();
    window.applied = AppliedRanges::default();
    window
}

/// The windows that folding every event exactly once, in order, gives.
fn expected_windows(batches: &[Vec<EventRecord>]) -> BTreeMap<String, WindowAggregate> {
    let mut windows: BTreeMap<String, WindowAggregate> = BTreeMap::new();
    for batch in batches {
        let runs = AppliedRanges::runs_of(batch.iter().filter_map(|e| e.sequence_number));
        let readings: Vec<_> = batch
            .iter()
            .map(|e| {
                (
                    e.sequence_number,
                    parse_reading(&e.body, e.enqueued_time).unwrap(),
                )
            })
            .collect();
        let mut by_window: BTreeMap<_, Vec<_>> = BTreeMap::new();
        for (seq, r) in &readings {
            by_window
                .entry(window_start(r.time, 60))
                .or_default()
                .push((*seq, r));
        }
        for (start, rs) in by_window {
            windows
                .entry(layout::window_prefix("sensors", start))
                .or_insert_with(|| {
                    WindowAggregate::new("sensors", &PARTITION.to_string(), start, 60, "")
                })
                .fold(&runs, &rs);
        }
    }
    windows
        .into_iter()
        .map(|(k, w)| (k, readers_view(w)))
        .collect()
}

/// The stored blocks merged into windows. Also checks that every block records as applied the
/// sequence numbers of the readings it holds.
async fn stored_windows(store: &SharedStore) -> BTreeMap<String, WindowAggregate> {
    let mut out: BTreeMap<String, WindowAggregate> = BTreeMap::new();
    for w in store.list("hubhost", "windows/").await.unwrap() {
        let blob = store.get("hubhost", &w.name).await.unwrap().unwrap();
        let block: WindowAggregate = serde_json::from_slice(&blob.data).unwrap();
        assert_eq!(
            w.name,
            layout::window_block_blob(
                "sensors",
                block.window_start,
                &block.partition,
                &block.block
            )
        );
        for home in block.homes.values() {
            for s in home.sensors.values().filter_map(|s| s.seq) {
                assert!(block.applied.contains(s), "{s} not recorded in {}", w.name);
            }
        }
        let key = layout::window_prefix("sensors", block.window_start);
        match out.get_mut(&key) {
            Some(window) => window.merge(&block),
            None => {
                out.insert(key, block);
            }
        }
    }
    out.into_iter().map(|(k, w)| (k, readers_view(w))).collect()
}

async fn archived_sequence_numbers(store: &SharedStore) -> Vec<i64> {
    let mut seqs = Vec::new();
    for c in store.list("hubhost", "archive/").await.unwrap() {
        let blob = store.get("hubhost", &c.name).await.unwrap().unwrap();
        let chunk: ArchiveChunk = serde_json::from_slice(&blob.data).unwrap();
        seqs.extend(chunk.events.keys());
    }
    seqs.sort();
    seqs
}

#[tokio::test]
async fn the_same_batch_twice_counts_once() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(&["--storage", data.path().to_str().unwrap()], &[]);
    let batches = feed_batches(1, 200);
    let store = StorageLocation::Directory(data.path().to_path_buf())
        .open()
        .unwrap();

    let (status, first) = server
        .post("SensorAggregator", request(0, &batches[0]))
        .await;
    assert_eq!(status, 200, "{first}");
    let after_first = stored_windows(&store).await;
    let (status, second) = server
        .post("SensorAggregator", request(0, &batches[0]))
        .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(
        (
            first["ReturnValue"]["applied"].as_u64(),
            first["ReturnValue"]["replayed"].as_u64()
        ),
        (Some(200), Some(0))
    );
    assert_eq!(
        (
            second["ReturnValue"]["applied"].as_u64(),
            second["ReturnValue"]["replayed"].as_u64()
        ),
        (Some(0), Some(200))
    );
    assert_eq!(stored_windows(&store).await, after_first);
    assert_eq!(after_first, expected_windows(&batches));

    for _ in 0..2 {
        let (status, _) = server.post("RawArchive", request(1, &batches[0])).await;
        assert_eq!(status, 200);
    }
    assert_eq!(
        archived_sequence_numbers(&store).await,
        (0..200).collect::<Vec<i64>>()
    );
}

/// Posts each (aggregate, archive) request pair to both functions in order; returns the events
/// applied, replayed and archived, as the handler reports them.
async fn deliver(server: &Server, bodies: Vec<(Vec<u8>, Vec<u8>)>) -> (u64, u64, u64) {
    let (mut applied, mut replayed, mut archived) = (0, 0, 0);
    for (aggregate, archive) in bodies {
        let (_, answer) = server.post("SensorAggregator", aggregate).await;
        applied += answer["ReturnValue"]["applied"]
            .as_u64()
            .expect("batch succeeded");
        replayed += answer["ReturnValue"]["replayed"].as_u64().unwrap();
        let (_, answer) = server.post("RawArchive", archive).await;
        archived += answer["ReturnValue"]["applied"]
            .as_u64()
            .expect("archive succeeded");
    }
    (applied, replayed, archived)
}

/// Two handler processes on the same storage get overlapping runs of one partition's batches at
/// the same time, as happens when ownership moves between instances: instance A is still
/// working through batches 0..16 while B starts over from an older checkpoint at batch 8.
async fn overlapping_deliveries(storage: &str) {
    let batches = feed_batches(24, 50);
    let a = Server::start(&[], &[("HUBHOST_STORAGE", storage)]);
    let b = Server::start(&[], &[("HUBHOST_STORAGE", storage)]);
    let bodies = |range: std::ops::Range<usize>| -> Vec<(Vec<u8>, Vec<u8>)> {
        batches[range]
            .iter()
            .map(|b| (request(0, b), request(1, b)))
            .collect()
    };
    let ((applied_a, replayed_a, archived_a), (applied_b, replayed_b, archived_b)) =
        tokio::join!(deliver(&a, bodies(0..16)), deliver(&b, bodies(8..24)));
    let events = 24 * 50;
    assert_eq!(
        applied_a + applied_b,
        events,
        "every event applied exactly once"
    );
    assert_eq!(
        replayed_a + replayed_b,
        8 * 50,
        "every overlapping event recognised as a replay once"
    );
    assert_eq!(archived_a + archived_b, events);

    let store = StorageLocation::parse(storage).unwrap().open().unwrap();
    let stored = stored_windows(&store).await;
    assert_eq!(
        stored,
        expected_windows(&batches),
        "aggregates equal a single in-order pass"
    );
    assert_eq!(
        archived_sequence_numbers(&store).await,
        (0..events as i64).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn overlapping_batches_to_two_handler_processes_on_a_local_directory() {
    let data = tempfile::tempdir().unwrap();
    overlapping_deliveries(data.path().to_str().unwrap()).await;
}

#[tokio::test]
async fn overlapping_batches_to_two_handler_processes_on_azurite() {
    common::require!(Tool::Azurite);
    let azurite = Azurite::start();
    overlapping_deliveries(&azurite.connection_string()).await;
}

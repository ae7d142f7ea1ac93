//! `hubhost demo`: the main job on the embedded default, in one command.
//!
//! Starts the custom handler on local-directory storage, then plays the Functions host: the
//! simulated fleet's events, partition by partition (one batch in flight per partition,
//! partitions in parallel), go to both functions exactly as the host would send them. A few
//! poison events are mixed in. At the end it reads the results back from storage and prints
//! what the app wrote. (Once hubhost has its own event hub and processor, this becomes the full
//! local pipeline.)

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{Duration as ChronoDuration, Utc};

use crate::app::aggregate::{WindowAggregate, window_start};
use crate::app::layout::DEFAULT_CONTAINER;
use crate::app::{AGGREGATOR_FUNCTION, ARCHIVE_FUNCTION};
use crate::batch::{EventRecord, PartitionContext};
use crate::contract::encode::{HostInvocation, MetadataFlavor, encode_request};
use crate::fleet::{Fleet, PartitionFeed};
use crate::function_app::EventHubTrigger;
use crate::handler::{self, HandlerConfig, builtin_functions};
use crate::invoker::Invoker;
use crate::storage::{SharedStore, StorageLocation};

pub const DEMO_NAMESPACE: &str = "hubhost.localhost";
pub const DEMO_HUB: &str = "sensors";

#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub homes: u32,
    pub minutes: u32,
    pub partitions: u32,
    pub batch_size: usize,
    pub storage: StorageLocation,
    pub keep_serving: bool,
    pub port: u16,
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Serve(#[from] handler::ServeError),
    #[error(transparent)]
    Invoke(#[from] crate::invoker::InvokeError),
    #[error(transparent)]
    Store(#[from] crate::storage::StoreError),
    #[error("{function} failed on partition {partition}: HTTP {status}: {body}")]
    Invocation {
        function: String,
        partition: u32,
        status: u16,
        body: String,
    },
}

/// The partition context the host would send for a demo partition.
pub fn partition_context(partition: u32, consumer_group: &str) -> PartitionContext {
    PartitionContext {
        fully_qualified_namespace: Some(DEMO_NAMESPACE.into()),
        event_hub_name: Some(DEMO_HUB.into()),
        consumer_group: Some(consumer_group.into()),
        partition_id: partition.to_string(),
        is_checkpointing_after_invocation: Some(true),
    }
}

/// The request the host sends for `events` of `partition` to the function with `trigger`.
pub fn host_request(
    function: &str,
    trigger: &EventHubTrigger,
    partition: u32,
    events: &[EventRecord],
) -> Vec<u8> {
    let context = partition_context(partition, &trigger.consumer_group);
    encode_request(&HostInvocation {
        function,
        trigger,
        partition: &context,
        events,
        retry: None,
        flavor: MetadataFlavor::Current,
        now: Utc::now(),
    })
    .expect("the demo's events are JSON")
}

/// Poison events mixed into partition 0, with the reason each will be set aside for.
fn poison(seq: i64) -> EventRecord {
    let bodies = [
        "this is not json",
        r#"{"homeId":"home-000000","sensorId":"attic","type":"laser","state":"on","ts":"2026-11-22T13:00:00Z"}"#,
    ];
    EventRecord {
        body: bytes::Bytes::from_static(bodies[(seq % 2) as usize].as_bytes()),
        sequence_number: Some(seq),
        offset: Some((seq * 512).to_string()),
        enqueued_time: Some(Utc::now()),
        partition_key: None,
        properties: Default::default(),
    }
}

pub async fn run(opts: DemoOptions) -> Result<(), DemoError> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let config = HandlerConfig {
        listen: ([127, 0, 0, 1], opts.port).into(),
        app_root: None,
        storage: opts.storage.clone(),
        container: DEFAULT_CONTAINER.into(),
        window_seconds: 60,
        max_body_bytes: handler::DEFAULT_MAX_BODY_BYTES,
    };
    let server = tokio::spawn(handler::serve(
        config,
        move |addr| {
            let _ = addr_tx.send(addr);
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    let addr = match addr_rx.await {
        Ok(addr) => addr,
        Err(_) => {
            return match server.await {
                Ok(Err(e)) => Err(e.into()),
                _ => Err(DemoError::Serve(handler::ServeError::Server(
                    std::io::Error::other("the handler stopped during start-up"),
                ))),
            };
        }
    };
    let invoker = Invoker::new(&format!("http://{addr}"));
    invoker.wait_ready(Duration::from_secs(30)).await?;
    println!(
        "custom handler listening on http://{addr}  (storage: {:?})",
        opts.storage
    );

    let fleet = Fleet {
        homes: opts.homes,
        partitions: opts.partitions,
        seed: 2026,
    };
    let now = Utc::now();
    let start = window_start(now, 60) - ChronoDuration::minutes(i64::from(opts.minutes));
    let total: u64 = (0..opts.partitions)
        .map(|p| {
            PartitionFeed::new(&fleet, p, start).events_per_minute() as u64
                * u64::from(opts.minutes)
        })
        .sum();
    println!(
        "replaying {} minutes of {} homes x {} sensors = {total} events over {} partitions, batches of {}, to {AGGREGATOR_FUNCTION} and {ARCHIVE_FUNCTION}",
        opts.minutes,
        opts.homes,
        crate::fleet::SENSORS.len(),
        opts.partitions,
        opts.batch_size
    );

    let specs = builtin_functions();
    let sent = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for partition in 0..opts.partitions {
        let (invoker, specs, fleet, sent) =
            (invoker.clone(), specs.clone(), fleet.clone(), sent.clone());
        let per_partition = PartitionFeed::new(&fleet, partition, start).events_per_minute()
            * opts.minutes as usize;
        let batch_size = opts.batch_size;
        tasks.spawn(async move {
            let mut feed = PartitionFeed::new(&fleet, partition, start);
            let mut left = per_partition;
            let mut first = true;
            while left > 0 {
                let mut events = feed.next_batch(batch_size.min(left));
                left -= events.len();
                if partition == 0 && first {
                    // Two poison events in the first batch of partition 0, after the real ones.
                    let next = events.last().and_then(|e| e.sequence_number).unwrap_or(-1) + 1;
                    events.push(poison(next));
                    events.push(poison(next + 1));
                    feed.advance_sequence(2);
                }
                first = false;
                for spec in &specs {
                    let trigger = spec
                        .event_hub_trigger()
                        .expect("built-in functions are Event Hubs triggered");
                    let body = host_request(&spec.name, trigger, partition, &events);
                    let answer = invoker.invoke(&spec.name, body).await?;
                    if !answer.succeeded() {
                        return Err(DemoError::Invocation {
                            function: spec.name.clone(),
                            partition,
                            status: answer.status,
                            body: answer.body.to_string(),
                        });
                    }
                }
                sent.fetch_add(events.len() as u64, Ordering::Relaxed);
            }
            Ok::<_, DemoError>(())
        });
    }
    let progress = {
        let sent = sent.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let n = sent.load(Ordering::Relaxed);
                println!(
                    "  {n:>9} / {total} events ({:.0}%)",
                    100.0 * n as f64 / total.max(1) as f64
                );
            }
        })
    };
    while let Some(result) = tasks.join_next().await {
        result.expect("demo partition task")?;
    }
    progress.abort();
    let elapsed = started.elapsed();
    let n = sent.load(Ordering::Relaxed);
    println!(
        "delivered {n} events (each to both functions) in {:.1} s: {:.0} events/s",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64()
    );

    let store = opts.storage.open()?;
    summarize(&store).await?;

    if opts.keep_serving {
        println!("handler still serving at http://{addr}; Ctrl-C to stop");
        let _ = tokio::signal::ctrl_c().await;
    }
    let _ = stop_tx.send(());
    let _ = server.await;
    Ok(())
}

/// Reads back what the app wrote and prints it.
pub async fn summarize(store: &SharedStore) -> Result<(), DemoError> {
    let container = DEFAULT_CONTAINER;
    let windows = store
        .list(container, &format!("windows/{DEMO_HUB}/"))
        .await?;
    let mut events = 0u64;
    let mut alarms: BTreeMap<String, u64> = BTreeMap::new();
    let mut example: Option<(String, WindowAggregate)> = None;
    for w in &windows {
        let Some(blob) = store.get(container, &w.name).await? else {
            continue;
        };
        let Ok(agg) = serde_json::from_slice::<WindowAggregate>(&blob.data) else {
            continue;
        };
        events += agg.events;
        for home in agg.homes.values() {
            for a in &home.alarms {
                *alarms.entry(format!("{:?}", a.kind)).or_default() += 1;
            }
        }
        if example.is_none() {
            example = Some((w.name.clone(), agg));
        }
    }
    let homes = store
        .list(container, &format!("homes/{DEMO_HUB}/"))
        .await?
        .len();
    let dead = store
        .list(container, &format!("deadletter/{DEMO_HUB}/"))
        .await?;
    let archive = store
        .list(container, &format!("archive/{DEMO_HUB}/"))
        .await?;
    println!(
        "results in storage (container '{container}', {}):",
        store.describe()
    );
    println!(
        "  {} window aggregates holding {events} readings",
        windows.len()
    );
    println!(
        "  {homes} home-directory buckets, {} archive chunks",
        archive.len()
    );
    println!("  alarms kept: {alarms:?}");
    println!("  {} dead letters:", dead.len());
    for d in dead.iter().take(5) {
        if let Some(blob) = store.get(container, &d.name).await?
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&blob.data)
        {
            println!("    {}: {}", d.name, v["reason"].as_str().unwrap_or("?"));
        }
    }
    if let Some((name, agg)) = example
        && let Some((home, activity)) = agg.homes.iter().next()
    {
        println!("  example: {home} in {name}:");
        println!(
            "    {}",
            serde_json::to_string(activity).unwrap_or_default()
        );
    }
    Ok(())
}

/// The default data directory of the embedded default.
pub fn default_data_dir() -> PathBuf {
    PathBuf::from("hubhost-data")
}

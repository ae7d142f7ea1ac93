//! `hubhost demo`: the main job on the embedded default, in one command.
//!
//! Everything runs in this process, on the same code as the separate commands: the local event
//! hub (`hub`), the custom handler with the home-security app (`handler`), a pool of instances
//! each running one processor per function (`processor`, invoking the handler exactly as the
//! Functions host does), and the fleet simulator (`simulate`) sending through the Rust SDK. Two
//! poison events show the dead-letter path. Checkpoints, aggregates and the hub's segments live
//! under one directory (`./hubhost-data`), so a second run resumes where the first stopped. It
//! runs until Ctrl-C (or `--duration`, after which the pool catches up), then prints what the
//! app wrote.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use azure_messaging_eventhubs::SendEventOptions;
use azure_messaging_eventhubs::models::EventData;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use hubhost_app::aggregate::WindowAggregate;
use hubhost_app::dashboard::DashboardSources;
use hubhost_app::handler::{self, ALARMS_HUB, HandlerConfig, builtin_functions};
use hubhost_app::layout::DEFAULT_CONTAINER;
use hubhost_app::{AGGREGATOR_FUNCTION, ARCHIVE_FUNCTION};
use hubhost_checkpoints::{CheckpointStore, ConsumerGroupKey};
use hubhost_eventhubs::{EventHubTarget, PartitionEnd, on_sending_thread};
use hubhost_host::emulate::{self, AppSettings, InstanceTriggers, TriggerCounts};
use hubhost_host::invoker::Invoker;
use hubhost_hub::{HubConfig, HubSpec};
use hubhost_process::progress::Progress;
use hubhost_processor::ProcessorOptions;
use hubhost_simulate::{self as simulate, Pace, SimulateOptions, StopAfter};
use hubhost_storage::{SharedStore, StorageLocation};

pub const DEMO_HUB: &str = "sensors";

#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub homes: u32,
    /// Simulated minutes per wall-clock minute.
    pub speed_up: f64,
    pub instances: u32,
    pub partitions: u32,
    pub storage: StorageLocation,
    /// The handler's (and the web page's) port; 0: any free port.
    pub port: u16,
    /// Stop sending after this long, let the pool catch up, and stop [default: at Ctrl-C].
    pub duration: Option<Duration>,
    /// The collector this process's spans are exported to: the page shows an alarm's trace
    /// from it.
    pub collector: Option<std::sync::Arc<hubhost_telemetry::collector::Collector>>,
}

/// Spans the demo's collector keeps (the newest; at the reference fleet's pace, the last
/// half minute or so).
pub const TRACE_SPANS_KEPT: usize = 50_000;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Serve(#[from] handler::ServeError),
    #[error(transparent)]
    Hub(#[from] hubhost_hub::HubError),
    #[error(transparent)]
    Invoke(#[from] hubhost_host::invoker::InvokeError),
    #[error(transparent)]
    Store(#[from] hubhost_storage::StoreError),
    #[error(transparent)]
    Checkpoint(#[from] hubhost_checkpoints::CheckpointError),
    #[error(transparent)]
    Emulate(#[from] emulate::EmulateError),
    #[error(transparent)]
    EventHub(#[from] hubhost_eventhubs::EventHubsError),
    #[error(transparent)]
    Simulate(#[from] simulate::SimulateError),
    #[error("sending the poison events failed: {0}")]
    Send(String),
    #[error("{0} stopped during start-up")]
    Stopped(&'static str),
    #[error("{0} panicked (its message is above)")]
    Panicked(&'static str),
}

/// Two poison events the demo sends beside the fleet, so the dead-letter path shows too.
const POISON: [&str; 2] = [
    "this is not json",
    r#"{"homeId":"home-000000","sensorId":"attic","type":"laser","state":"on","ts":"2026-11-22T13:00:00Z"}"#,
];

/// Everything the demo runs, in one process: the local event hub, the custom handler, a pool
/// of `instances` processors per function, and the fleet simulator.
pub async fn run(
    opts: DemoOptions,
    interrupted: impl std::future::Future<Output = ()>,
) -> Result<(), DemoError> {
    let stop = CancellationToken::new();

    // 1. The event hub, beside the checkpoints and aggregates when those are in a directory.
    let hub_dir = match &opts.storage {
        StorageLocation::Directory(dir) => Some(dir.join("hub")),
        _ => None,
    };
    let mut spec = HubSpec::sensors();
    spec.partitions = opts.partitions;
    let mut hub_config = HubConfig::new(
        ([127, 0, 0, 1], 0).into(),
        vec![spec, HubSpec::alarms()],
        hub_dir,
    );
    // The page's explorer reads the hub through its admin endpoint (loopback, any free port).
    hub_config.admin_port = Some(0);
    // Kafka clients too, on any free port: the explorer shows their consumer groups.
    hub_config.kafka = Some(([127, 0, 0, 1], 0).into());
    let (hub_tx, hub_rx) = tokio::sync::oneshot::channel();
    // The hub outlives the pool: the alarms the pool forwarded are counted after it stopped.
    let hub_stop = CancellationToken::new();
    let mut hub = tokio::spawn(hubhost_hub::serve(
        hub_config,
        move |_, _, listening| {
            let _ = hub_tx.send(listening);
        },
        hub_stop.clone().cancelled_owned(),
    ));
    let listening = address_of(hub_rx, &mut hub, "the event hub").await?;
    let hub_addr = listening.amqp;
    let connection = format!(
        "Endpoint=sb://localhost:{};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;",
        hub_addr.port()
    );

    // 2. The custom handler, on the port the page is served from.
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let config = HandlerConfig {
        listen: ([127, 0, 0, 1], opts.port).into(),
        app_root: None,
        storage: opts.storage.clone(),
        container: DEFAULT_CONTAINER.into(),
        window_seconds: 60,
        max_body_bytes: handler::DEFAULT_MAX_BODY_BYTES,
        dashboard: {
            let mut sources = DashboardSources::new(DEMO_HUB);
            sources.event_hub = Some(EventHubTarget::parse(&connection, Some(DEMO_HUB))?);
            sources.alarms = Some(hubhost_app::dashboard::live::AlarmSource {
                target: EventHubTarget::parse(&connection, Some(ALARMS_HUB))?,
                consumer_group: hubhost_app::dashboard::live::DEFAULT_CONSUMER_GROUP.into(),
            });
            let key = ConsumerGroupKey::new("localhost", DEMO_HUB, &sources.consumer_group)?;
            sources.checkpoints = Some((
                CheckpointStore::new(opts.storage.open()?, hubhost_checkpoints::DEFAULT_CONTAINER),
                key,
            ));
            sources.traces =
                opts.collector
                    .clone()
                    .map(|collector| hubhost_app::dashboard::TraceSources {
                        collector,
                        alarms_hub: ALARMS_HUB.to_string(),
                    });
            // The page is the demo's own, on loopback: its explorer may send.
            sources.with_explorer(
                listening.admin.map(|a| format!("http://{a}")),
                listening.admin_token.clone(),
                true,
            )
        },
    };
    let mut server = tokio::spawn(handler::serve(
        config,
        move |addr| {
            let _ = addr_tx.send(addr);
        },
        stop.clone().cancelled_owned(),
    ));
    let addr = address_of(addr_rx, &mut server, "the custom handler").await?;
    let invoker = Invoker::new(&format!("http://{addr}"));
    invoker.wait_ready(Duration::from_secs(30)).await?;

    // 3. The pool: each instance runs one processor per function, as Functions instances do.
    let settings = AppSettings::from_pairs([
        ("EventHubConnection", connection.as_str()),
        ("EventHubName", DEMO_HUB),
    ]);
    let functions = emulate::event_hub_functions(
        &builtin_functions(),
        &settings,
        // The built-in app has eventHub and blob outputs only: nothing to keep in an outbox.
        &emulate::OutputSinks::start(None, &serde_json::json!({})),
    )?;
    let store = CheckpointStore::new(opts.storage.open()?, hubhost_checkpoints::DEFAULT_CONTAINER);
    store.ensure_container().await?;
    let options = ProcessorOptions::default();
    let pool: Vec<InstanceTriggers> = (1..=opts.instances)
        .map(|i| {
            let owner = format!("demo-{i}");
            InstanceTriggers::start(
                &functions,
                &store,
                &options,
                &invoker,
                &owner,
                &stop,
                &hubhost_host::emulate::Delivery::default(),
            )
        })
        .collect::<Result<_, _>>()?;
    let counts: Vec<TriggerCounts> = pool.iter().map(|i| i.counts().clone()).collect();
    let target = functions[0].target.clone();

    println!(
        "event hub: amqp://{hub_addr} (hub {DEMO_HUB}, {} partitions)",
        opts.partitions
    );
    if let Some(admin) = listening.admin {
        // The admin token is the user's secret: shown on their terminal (or where it is kept),
        // never logged.
        match (&listening.admin_token_file, &listening.admin_token) {
            (Some(file), _) => println!(
                "hub admin: http://{admin} (hubhost hub add-hub/add-consumer-group --admin … --data-dir {})",
                file.parent()
                    .and_then(std::path::Path::parent)
                    .map(|d| d.display().to_string())
                    .unwrap_or_default()
            ),
            (None, Some(token)) => println!(
                "hub admin: http://{admin} (hubhost hub add-hub/add-consumer-group --admin … --admin-token {token})"
            ),
            (None, None) => println!("hub admin: http://{admin}"),
        }
    }
    if let Some(kafka) = listening.kafka {
        println!(
            "kafka: {kafka} (SASL_PLAINTEXT, PLAIN: user $ConnectionString, password the connection string)"
        );
    }
    println!("storage: {}", store.describe());
    if let Some(collector) = &opts.collector {
        println!(
            "traces: {} (OTLP/HTTP: producers of your own export here with OTEL_EXPORTER_OTLP_ENDPOINT; the page's Traces tab shows them)",
            collector.endpoint()
        );
    }
    println!(
        "pool: {} instances x {} functions; fleet: {} homes x {} sensors every simulated minute, {}x real time",
        opts.instances,
        functions.len(),
        opts.homes,
        hubhost_app::fleet::SENSORS.len(),
        opts.speed_up
    );
    println!("web page:");
    println!("http://{addr}/");

    // 4. Two poison events, then the fleet, sent from a thread of their own (see
    //    `eventhubs::on_sending_thread`).
    {
        let target = target.clone();
        on_sending_thread(move || async move { send_poison(&target).await })
            .await
            .ok_or(DemoError::Panicked("the poison sender"))??;
    }
    let simulation = {
        let target = target.clone();
        let options = SimulateOptions {
            homes: opts.homes,
            seed: 2026,
            start: Utc::now(),
            pace: Pace::SpeedUp(opts.speed_up),
            stop: StopAfter {
                duration: opts.duration,
                ..Default::default()
            },
            progress: false,
        };
        let stop = stop.clone();
        on_sending_thread(move || async move {
            simulate::run(&target, options, stop.cancelled_owned()).await
        })
    };
    let progress = {
        let counts = counts.clone();
        Progress::spawn(move || progress_line(&counts))
    };

    tokio::pin!(interrupted);
    tokio::pin!(simulation);
    let summary = tokio::select! {
        _ = &mut interrupted => { stop.cancel(); (&mut simulation).await }
        done = &mut simulation => done,
    };
    let summary = match summary {
        Some(Ok(summary)) => summary,
        Some(Err(e)) => return Err(e.into()),
        None => return Err(DemoError::Panicked("the simulator")),
    };
    // A bounded run lets the pool catch up with what was sent before stopping: every function
    // has been handed each partition's last event. (Counting processed events would not do:
    // a partition that changed owners is partly read twice, so the count can reach what was
    // sent while another partition still lags.)
    let expected = summary.events + POISON.len() as u64;
    if !stop.is_cancelled() {
        let ends = target.partition_ends().await.ok();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !caught_up(&counts, ends.as_deref(), expected) && Instant::now() < deadline {
            tokio::select! {
                _ = &mut interrupted => break,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }
    drop(progress);
    stop.cancel();
    let (aggregated, archived) = (
        processed(&counts, AGGREGATOR_FUNCTION),
        processed(&counts, ARCHIVE_FUNCTION),
    );
    for instance in pool {
        instance.finish().await?;
    }
    let _ = server.await;
    let forwarded = forwarded_alarms(&connection).await;
    hub_stop.cancel();
    let _ = hub.await;
    summary.print();
    println!(
        "processed: {aggregated} events by {AGGREGATOR_FUNCTION}, {archived} by {ARCHIVE_FUNCTION} ({expected} sent, poison included)"
    );
    match forwarded {
        Some(n) => println!("alarms forwarded to the '{ALARMS_HUB}' hub: {n} events"),
        None => println!(
            "alarms forwarded to the '{ALARMS_HUB}' hub: unknown (its ends could not be read)"
        ),
    }
    summarize(&opts.storage.open()?).await
}

/// How many events the `alarms` hub holds (the demo's hub starts empty when it keeps no data,
/// and a second run on the same directory counts the first run's too).
async fn forwarded_alarms(connection: &str) -> Option<i64> {
    let target = EventHubTarget::parse(connection, Some(ALARMS_HUB)).ok()?;
    let ends = target.partition_ends().await.ok()?;
    Some(
        ends.iter()
            .filter(|e| !e.is_empty)
            .map(|e| e.last_sequence_number - e.beginning_sequence_number + 1)
            .sum(),
    )
}

/// The address a server task reports once it listens; its error if it stops before.
async fn address_of<A, E: Into<DemoError>>(
    listening: tokio::sync::oneshot::Receiver<A>,
    task: &mut tokio::task::JoinHandle<Result<(), E>>,
    what: &'static str,
) -> Result<A, DemoError> {
    match listening.await {
        Ok(addr) => Ok(addr),
        Err(_) => Err(match task.await {
            Ok(Err(e)) => e.into(),
            _ => DemoError::Stopped(what),
        }),
    }
}

/// Whether both functions have been handed every partition's last event; without the
/// partitions' ends, whether the aggregator has processed as many events as were sent.
fn caught_up(pool: &[TriggerCounts], ends: Option<&[PartitionEnd]>, expected: u64) -> bool {
    let Some(ends) = ends else {
        return processed(pool, AGGREGATOR_FUNCTION) >= expected;
    };
    [AGGREGATOR_FUNCTION, ARCHIVE_FUNCTION]
        .iter()
        .all(|function| {
            let positions: Vec<_> = pool.iter().map(|i| i.positions(function)).collect();
            ends.iter().filter(|end| !end.is_empty).all(|end| {
                positions.iter().any(|instance| {
                    instance
                        .get(&end.partition_id)
                        .is_some_and(|&at| at >= end.last_sequence_number)
                })
            })
        })
}

/// Events processed by every instance's processor of `function`.
fn processed(pool: &[TriggerCounts], function: &str) -> u64 {
    pool.iter().map(|i| i.processed(function)).sum()
}

fn progress_line(pool: &[TriggerCounts]) -> String {
    let owned: Vec<String> = pool
        .iter()
        .map(|i| format!("{}:{}", i.owner(), i.partitions_owned(AGGREGATOR_FUNCTION)))
        .collect();
    format!(
        "demo: {} events aggregated, {} archived; partitions owned {}",
        processed(pool, AGGREGATOR_FUNCTION),
        processed(pool, ARCHIVE_FUNCTION),
        owned.join(" ")
    )
}

async fn send_poison(target: &EventHubTarget) -> Result<(), DemoError> {
    let producer = target.producer().await?;
    for body in POISON {
        let event = EventData::builder()
            .with_body(body.as_bytes().to_vec())
            .build();
        producer
            .send_event(
                event,
                Some(SendEventOptions {
                    partition_id: Some("0".into()),
                }),
            )
            .await
            .map_err(|e| DemoError::Send(e.to_string()))?;
    }
    hubhost_eventhubs::close_quietly("producer", producer.close()).await;
    Ok(())
}

/// Reads back what the app wrote and prints it.
pub async fn summarize(store: &SharedStore) -> Result<(), DemoError> {
    let container = DEFAULT_CONTAINER;
    let windows = store
        .list(container, &format!("windows/{DEMO_HUB}/"))
        .await?;
    // Blocks of one window merge into the window (see `app::aggregate`).
    let mut merged: BTreeMap<DateTime<Utc>, WindowAggregate> = BTreeMap::new();
    for w in &windows {
        let Some(blob) = store.get(container, &w.name).await? else {
            continue;
        };
        let Ok(block) = serde_json::from_slice::<WindowAggregate>(&blob.data) else {
            continue;
        };
        match merged.entry(block.window_start) {
            std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().merge(&block),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(block);
            }
        }
    }
    let events: u64 = merged.values().map(|w| w.events).sum();
    let mut alarms: BTreeMap<String, u64> = BTreeMap::new();
    let mut alarm_count = 0;
    for home in merged.values().flat_map(|w| w.homes.values()) {
        alarm_count += home.alarm_count;
        for a in &home.alarms {
            *alarms.entry(format!("{:?}", a.kind)).or_default() += 1;
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
        "  {} window blocks of {} windows holding {events} readings",
        windows.len(),
        merged.len()
    );
    println!(
        "  {homes} home-directory buckets, {} archive chunks",
        archive.len()
    );
    println!("  {alarm_count} alarms; the latest kept per home: {alarms:?}");
    println!("  {} dead letters:", dead.len());
    for d in dead.iter().take(5) {
        if let Some(blob) = store.get(container, &d.name).await?
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&blob.data)
        {
            println!("    {}: {}", d.name, v["reason"].as_str().unwrap_or("?"));
        }
    }
    if let Some((start, agg)) = merged.iter().next()
        && let Some((home, activity)) = agg.homes.iter().next()
    {
        println!("  example: {home} in the window starting {start}:");
        println!(
            "    {}",
            serde_json::to_string(activity).unwrap_or_default()
        );
    }
    Ok(())
}

//! `hubhost bench hub`: the local event hub's ingest and read throughput through real clients,
//! beside the raw append speed of its segment files measured in the same run.
//!
//! Phases, each on a fresh `hubhost hub` child process (its own data directory, 16 partitions):
//! 1. baseline — `PartitionLog::append` in this process, the same encoded ~250-byte events in
//!    the same batch size, no network: the ceiling the hub's storage sets;
//! 2. Rust producer — `ProducerClient`, one task per partition sending batches to it;
//! 3. Rust consumer — `ConsumerClient`, one receiver per partition from the earliest event,
//!    until every event of phase 2 arrived;
//! 4. Rust buffered producer with partition keys (home ids) — what `hubhost simulate` uses;
//! 5. one Python `azure-eventhub` producer sending batches (when its virtualenv is there).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use azure_messaging_eventhubs::models::EventData;
use azure_messaging_eventhubs::{
    EnqueueEventOptions, EventDataBatchOptions, StartLocation, StartPosition,
};
use bytes::Bytes;
use futures::StreamExt;

use hubhost_app::fleet::{Fleet, SENSORS};
use hubhost_eventhubs::{EventHubTarget, SendOutcomes, on_sending_thread};
use hubhost_functions::contract::decode::decode_request;
use hubhost_functions::contract::encode::{HostInvocation, MetadataFlavor, encode_request};
use hubhost_functions::function_app::EventHubTrigger;
use hubhost_hub::log::{LogOptions, PartitionLog};
use hubhost_trigger::batch::{EventRecord, PartitionContext};

use crate::local_hub::{HUB, HubProcess, LocalHubError, open_bare_receiver};

const PYTHON_PRODUCER: &str = include_str!("python_producer.py");
/// Credit each receiver grants (the SDK's default is 300).
const PREFETCH: u32 = 1000;
/// Partitions read over one consumer connection.
const CONSUMER_SHARE: u32 = 4;

#[derive(Debug, Clone)]
pub struct HubBenchOptions {
    /// Events per phase (the Python phase sends `python_events`).
    pub events: u64,
    pub python_events: u64,
    pub batch_size: usize,
    pub partitions: u32,
    /// The Python interpreter with `azure-eventhub` (None: phase 5 is skipped).
    pub python: Option<PathBuf>,
    /// Where the baseline's and the hubs' data go (a fresh temporary directory).
    pub work_dir: PathBuf,
}

/// A phase's figure once its tasks (each reporting the events it moved) have all finished.
pub(crate) async fn figure(
    phase: &'static str,
    mut tasks: tokio::task::JoinSet<Result<u64, HubBenchError>>,
    bytes: &AtomicU64,
    started: Instant,
) -> Result<Figure, HubBenchError> {
    let mut events = 0;
    while let Some(result) = tasks.join_next().await {
        events += result.expect("benchmark task")?;
    }
    Ok(Figure {
        phase,
        events,
        bytes: bytes.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[derive(Debug, Clone)]
pub struct Figure {
    pub phase: &'static str,
    pub events: u64,
    pub bytes: u64,
    pub seconds: f64,
}

impl Figure {
    pub fn events_per_s(&self) -> f64 {
        self.events as f64 / self.seconds.max(1e-9)
    }
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HubBenchError {
    #[error(transparent)]
    Hub(#[from] LocalHubError),
    #[error("segment files: {0}")]
    Log(#[from] hubhost_hub::log::LogError),
    #[error(transparent)]
    Connect(#[from] hubhost_eventhubs::EventHubsError),
    #[error("{phase}: {source}")]
    Client {
        phase: &'static str,
        #[source]
        source: Box<azure_messaging_eventhubs::EventHubsError>,
    },
    #[error("{phase}: {message}")]
    Phase {
        phase: &'static str,
        message: String,
    },
}

fn sender_panicked() -> HubBenchError {
    HubBenchError::Phase {
        phase: "Rust producer",
        message: "the sending thread panicked (its message is above)".into(),
    }
}

fn client_error(
    phase: &'static str,
) -> impl FnOnce(azure_messaging_eventhubs::EventHubsError) -> HubBenchError {
    move |source| HubBenchError::Client {
        phase,
        source: Box::new(source),
    }
}

/// Distinct fleet readings (about 250 bytes each) the phases send in turn.
pub(crate) fn readings() -> Vec<(String, String)> {
    let fleet = Fleet {
        homes: 100_000,
        partitions: 16,
        seed: 3,
    };
    let minute = chrono::DateTime::parse_from_rfc3339("2026-11-22T12:00:00Z")
        .expect("fixed time")
        .with_timezone(&chrono::Utc);
    (0..512u32)
        .flat_map(|h| {
            let home = Fleet::home_id(h * 97);
            let fleet = &fleet;
            (0..SENSORS.len()).map(move |s| (home.clone(), fleet.reading(&home, s, minute)))
        })
        .collect()
}

/// Phase 1: the hub's storage alone — encoded events appended in batches, round-robin over the
/// partitions, one thread.
fn baseline(
    opts: &HubBenchOptions,
    readings: &[(String, String)],
) -> Result<Figure, HubBenchError> {
    let encoded: Vec<Bytes> = readings
        .iter()
        .map(|(_, body)| encode_event(body.as_bytes()))
        .collect();
    let dir = opts.work_dir.join("baseline");
    let mut logs = (0..opts.partitions)
        .map(|p| {
            PartitionLog::open(LogOptions {
                dir: Some(dir.join(p.to_string())),
                segment_bytes: 64 << 20,
                cache_bytes: 8 << 20,
                fsync: false,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let started = Instant::now();
    let (mut events, mut bytes, mut next) = (0u64, 0u64, 0usize);
    let mut partition = 0usize;
    while events < opts.events {
        let n = (opts.batch_size as u64).min(opts.events - events) as usize;
        let now = chrono::Utc::now().timestamp_millis();
        let batch: Vec<(Bytes, i64)> = (0..n)
            .map(|i| {
                let e = encoded[(next + i) % encoded.len()].clone();
                (e, now)
            })
            .collect();
        bytes += (0..n)
            .map(|i| readings[(next + i) % readings.len()].1.len() as u64)
            .sum::<u64>();
        next += n;
        logs[partition].append(batch)?;
        partition = (partition + 1) % logs.len();
        events += n as u64;
    }
    Ok(Figure {
        phase: "baseline: raw segment appends (no network)",
        events,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The event as the hub stores it: an AMQP message with a Data body and one property.
fn encode_event(body: &[u8]) -> Bytes {
    use fe2o3_amqp::types::messaging::message::__private::Serializable;
    use fe2o3_amqp::types::messaging::{ApplicationProperties, Message};
    use fe2o3_amqp::types::primitives::Binary;
    let message = Message::builder()
        .application_properties(
            ApplicationProperties::builder()
                .insert("source", "hubhost-bench")
                .build(),
        )
        .data(Binary::from(body.to_vec()))
        .build();
    Bytes::from(serde_amqp::to_vec(&Serializable(message)).expect("a message encodes"))
}

fn event(body: &str) -> EventData {
    EventData::builder()
        .with_body(body.as_bytes().to_vec())
        .add_property("source".into(), "hubhost-bench")
        .build()
}

/// Phase 2: one task per partition, each with its own `ProducerClient` (connection), sends
/// batches of `batch_size` to its partition; connections open before the clock starts.
async fn rust_producer(
    target: &EventHubTarget,
    per_partition: u64,
    partitions: u32,
    batch_size: usize,
    readings: Arc<Vec<(String, String)>>,
) -> Result<Figure, HubBenchError> {
    const PHASE: &str = "Rust ProducerClient, batches to each partition";
    let bytes = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(tokio::sync::Barrier::new(partitions as usize + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..partitions {
        let (target, readings, bytes, ready) = (
            target.clone(),
            readings.clone(),
            bytes.clone(),
            ready.clone(),
        );
        let batch_size = batch_size as u64;
        tasks.spawn(async move {
            let producer = PartitionProducer::open(&target, p).await;
            ready.wait().await;
            let mut producer = producer?;
            let mut sent = 0u64;
            let mut next = p as usize * 31;
            while sent < per_partition {
                let n = batch_size.min(per_partition - sent);
                let bodies: Vec<&str> = (0..n)
                    .map(|i| readings[(next + i as usize) % readings.len()].1.as_str())
                    .collect();
                next += n as usize;
                producer.send(&bodies).await?;
                bytes.fetch_add(
                    bodies.iter().map(|b| b.len() as u64).sum(),
                    Ordering::Relaxed,
                );
                sent += n;
            }
            producer.close().await;
            Ok::<_, HubBenchError>(sent)
        });
    }
    ready.wait().await;
    figure(PHASE, tasks, &bytes, Instant::now()).await
}

/// [`rust_producer`] on a thread of its own, as every producer phase sends (see
/// `on_sending_thread`).
pub(crate) async fn rust_producer_on_its_thread(
    target: &EventHubTarget,
    per_partition: u64,
    partitions: u32,
    batch_size: usize,
    readings: &Arc<Vec<(String, String)>>,
) -> Result<Figure, HubBenchError> {
    let (target, readings) = (target.clone(), readings.clone());
    on_sending_thread(move || async move {
        rust_producer(&target, per_partition, partitions, batch_size, readings).await
    })
    .await
    .ok_or_else(sender_panicked)?
}

/// A producer for one partition that opens a new connection when its batch cannot be created:
/// the SDK's `create_batch`, unlike its sends, does not recover a dropped connection (see
/// `EventHubTarget::partition_ends` for why connections drop against a loopback hub).
struct PartitionProducer<'t> {
    target: &'t EventHubTarget,
    partition: u32,
    client: azure_messaging_eventhubs::ProducerClient,
}

impl<'t> PartitionProducer<'t> {
    const PHASE: &'static str = "Rust ProducerClient";
    const ATTEMPTS: u32 = 4;

    async fn open(target: &'t EventHubTarget, partition: u32) -> Result<Self, HubBenchError> {
        let mut producer = PartitionProducer {
            target,
            partition,
            client: target.producer().await?,
        };
        // Attach the partition's link now.
        producer.send(&[]).await?;
        Ok(producer)
    }

    /// Sends `bodies` as one batch (an empty list only attaches the link).
    async fn send(&mut self, bodies: &[&str]) -> Result<(), HubBenchError> {
        let mut attempt = 1;
        let batch = loop {
            let options = EventDataBatchOptions {
                partition_id: Some(self.partition.to_string()),
                ..Default::default()
            };
            match self.client.create_batch(Some(options)).await {
                Ok(batch) => break batch,
                Err(e) if attempt < Self::ATTEMPTS => {
                    tracing::debug!(partition = self.partition, error = %e, "reconnecting");
                    attempt += 1;
                    self.client = self.target.producer().await?;
                }
                Err(e) => return Err(client_error(Self::PHASE)(e)),
            }
        };
        if bodies.is_empty() {
            return Ok(());
        }
        for body in bodies {
            if !batch
                .try_add_event_data(event(body), None)
                .map_err(client_error(Self::PHASE))?
            {
                return Err(HubBenchError::Phase {
                    phase: Self::PHASE,
                    message: format!(
                        "a batch of {} events does not fit one message",
                        bodies.len()
                    ),
                });
            }
        }
        self.client
            .send_batch(batch, None)
            .await
            .map_err(client_error(Self::PHASE))
    }

    async fn close(self) {
        hubhost_eventhubs::close_quietly("producer", self.client.close()).await;
    }
}

/// Phase 3: one receiver per partition from the earliest event until `expected[p]` events of
/// partition `p` arrived, `prefetch` credit per receiver.
pub(crate) async fn rust_consumer(
    target: &EventHubTarget,
    expected: &[u64],
    prefetch: u32,
) -> Result<Figure, HubBenchError> {
    read_partitions(target, expected, prefetch, None).await
}

/// What the host contract costs on top of reading: the same reads as [`rust_consumer`], each
/// partition's events taken in batches of `BATCH` (the host's `maxEventBatchSize`), every batch
/// turned into the trigger's records, encoded exactly as the Functions host encodes it for
/// `trigger`, and decoded exactly as the handler decodes it — nothing else.
pub(crate) async fn contract_floor(
    target: &EventHubTarget,
    expected: &[u64],
    prefetch: u32,
    trigger: EventHubTrigger,
) -> Result<Figure, HubBenchError> {
    read_partitions(target, expected, prefetch, Some(Arc::new(trigger))).await
}

/// The host's default `maxEventBatchSize`.
const BATCH: usize = 100;

async fn read_partitions(
    target: &EventHubTarget,
    expected: &[u64],
    prefetch: u32,
    contract: Option<Arc<EventHubTrigger>>,
) -> Result<Figure, HubBenchError> {
    let partitions = expected.len() as u32;
    let phase: &'static str = match contract {
        None => "Rust ConsumerClient, a receiver per partition",
        Some(_) => "Rust ConsumerClient + the host contract's encode and decode",
    };
    // One connection per CONSUMER_SHARE partitions: a connection's frames are decoded by one
    // task in the SDK, so a single connection caps the read rate at what one core decodes.
    let mut consumers = Vec::new();
    for _ in 0..partitions.div_ceil(CONSUMER_SHARE) {
        consumers.push(Arc::new(target.consumer("$Default").await?));
    }
    let bytes = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..partitions {
        let consumer = consumers[(p / CONSUMER_SHARE) as usize].clone();
        let bytes = bytes.clone();
        let per_partition = expected[p as usize];
        let contract = contract.clone();
        let context = PartitionContext {
            fully_qualified_namespace: Some(target.namespace.clone()),
            event_hub_name: Some(target.hub.clone()),
            consumer_group: Some("$Default".into()),
            partition_id: p.to_string(),
            is_checkpointing_after_invocation: Some(true),
        };
        tasks.spawn(async move {
            let earliest = StartPosition {
                location: StartLocation::Earliest,
                inclusive: true,
            };
            let receiver = open_bare_receiver(&consumer, p, earliest, prefetch)
                .await
                .map_err(client_error(phase))?;
            let mut got = 0u64;
            let mut batch = Vec::with_capacity(BATCH);
            let mut stream = Box::pin(receiver.stream_events());
            while got < per_partition {
                let next = tokio::time::timeout(Duration::from_secs(30), stream.next()).await;
                let Ok(Some(event)) = next else {
                    return Err(HubBenchError::Phase {
                        phase,
                        message: format!(
                            "partition {p}: {got} of {per_partition} events within 30 s of the last"
                        ),
                    });
                };
                let event = event.map_err(client_error(phase))?;
                got += 1;
                let Some(trigger) = &contract else {
                    let body = event.event_data().body().map_or(0, |b| b.len());
                    bytes.fetch_add(body as u64, Ordering::Relaxed);
                    continue;
                };
                batch.push(hubhost_processor::to_record(&event));
                if batch.len() == BATCH || got == per_partition {
                    let decoded = through_contract(trigger, &context, &batch)
                        .map_err(|message| HubBenchError::Phase { phase, message })?;
                    bytes.fetch_add(decoded, Ordering::Relaxed);
                    batch.clear();
                }
            }
            Ok::<_, HubBenchError>(got)
        });
    }
    figure(phase, tasks, &bytes, started).await
}

/// One batch through the contract: the host's request, then the handler's decoding of it; the
/// body bytes decoded (so that nothing can be skipped).
fn through_contract(
    trigger: &EventHubTrigger,
    partition: &PartitionContext,
    events: &[EventRecord],
) -> Result<u64, String> {
    let request = encode_request(&HostInvocation {
        function: "Floor",
        trigger,
        partition,
        events,
        retry: None,
        flavor: MetadataFlavor::Current,
        now: chrono::Utc::now(),
        inputs: &[],
    })
    .map_err(|e| e.to_string())?;
    let batch = decode_request("Floor", trigger, &request).map_err(|e| e.to_string())?;
    Ok(batch.events.iter().map(|e| e.body.len() as u64).sum())
}

/// Phase 4: the buffered producer with a partition key per event (the simulator's path).
async fn rust_buffered_keyed(
    target: &EventHubTarget,
    opts: &HubBenchOptions,
    readings: &[(String, String)],
) -> Result<Figure, HubBenchError> {
    const PHASE: &str = "Rust BufferedProducerClient, partition key = home";
    let outcomes = Arc::new(SendOutcomes::default());
    let producer = target
        .buffered_producer(Duration::from_millis(100), outcomes.clone())
        .await?;
    let started = Instant::now();
    let mut bytes = 0u64;
    for i in 0..opts.events {
        let (home, body) = &readings[i as usize % readings.len()];
        bytes += body.len() as u64;
        producer
            .enqueue_event(
                event(body),
                Some(EnqueueEventOptions {
                    partition_key: Some(home.clone()),
                    ..Default::default()
                }),
            )
            .await
            .map_err(client_error(PHASE))?;
    }
    producer.flush().await.map_err(client_error(PHASE))?;
    let seconds = started.elapsed().as_secs_f64();
    hubhost_eventhubs::close_quietly("producer", producer.close()).await;
    if let Some(message) = outcomes.first_error() {
        return Err(HubBenchError::Phase {
            phase: PHASE,
            message,
        });
    }
    Ok(Figure {
        phase: PHASE,
        events: outcomes.sent.load(Ordering::Relaxed),
        bytes,
        seconds,
    })
}

/// Phase 5: one Python producer; the script times its own sends (start-up excluded).
fn python_producer(
    python: &Path,
    hub: &HubProcess,
    opts: &HubBenchOptions,
    readings: &[(String, String)],
) -> Result<Figure, HubBenchError> {
    const PHASE: &str = "Python EventHubProducerClient, batches to each partition";
    let sample = &readings[0].1;
    let out = Command::new(python)
        .arg("-c")
        .arg(PYTHON_PRODUCER)
        .arg(&hub.connection_string)
        .arg(HUB)
        .arg(opts.python_events.to_string())
        .arg(opts.batch_size.to_string())
        .arg(opts.partitions.to_string())
        .arg(sample)
        .output()
        .map_err(|e| HubBenchError::Phase {
            phase: PHASE,
            message: format!("{}: {e}", python.display()),
        })?;
    if !out.status.success() {
        return Err(HubBenchError::Phase {
            phase: PHASE,
            message: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    let result: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| HubBenchError::Phase {
            phase: PHASE,
            message: format!("no JSON from the script: {e}"),
        })?;
    Ok(Figure {
        phase: PHASE,
        events: result["events"].as_u64().unwrap_or(0),
        bytes: result["bytes"].as_u64().unwrap_or(0),
        seconds: result["seconds"].as_f64().unwrap_or(f64::NAN),
    })
}

fn print(figure: &Figure, baseline: &Figure) {
    println!(
        "  {:<58} {:>9} events {:>7.2} s {:>10.0} events/s {:>7.1} MB/s  {:>5.2}× baseline",
        figure.phase,
        figure.events,
        figure.seconds,
        figure.events_per_s(),
        figure.mb_per_s(),
        figure.events_per_s() / baseline.events_per_s()
    );
}

pub async fn run(opts: HubBenchOptions) -> Result<Vec<Figure>, HubBenchError> {
    let readings = Arc::new(readings());
    let average =
        readings.iter().map(|(_, b)| b.len()).sum::<usize>() as f64 / readings.len() as f64;
    println!(
        "bench hub: {} events of {average:.0} bytes (body) per phase, {} partitions, batches of {}",
        opts.events, opts.partitions, opts.batch_size
    );
    let base = {
        let (opts, readings) = (opts.clone(), readings.clone());
        tokio::task::spawn_blocking(move || baseline(&opts, &readings))
            .await
            .expect("baseline task")?
    };
    print(&base, &base);
    let mut figures = vec![base.clone()];

    let hub = HubProcess::start(&opts.work_dir.join("hub-rust"), opts.partitions)?;
    let per_partition = opts.events / u64::from(opts.partitions);
    let produced = rust_producer_on_its_thread(
        &hub.target,
        per_partition,
        opts.partitions,
        opts.batch_size,
        &readings,
    )
    .await?;
    print(&produced, &base);
    let expected = vec![per_partition; opts.partitions as usize];
    let consumed = rust_consumer(&hub.target, &expected, PREFETCH).await?;
    print(&consumed, &base);
    drop(hub);
    figures.extend([produced, consumed]);

    let hub = HubProcess::start(&opts.work_dir.join("hub-keyed"), opts.partitions)?;
    let keyed = {
        let (target, opts, readings) = (hub.target.clone(), opts.clone(), readings.clone());
        on_sending_thread(
            move || async move { rust_buffered_keyed(&target, &opts, &readings).await },
        )
        .await
        .ok_or_else(sender_panicked)??
    };
    print(&keyed, &base);
    drop(hub);
    figures.push(keyed);

    match &opts.python {
        Some(python) => {
            let hub = HubProcess::start(&opts.work_dir.join("hub-python"), opts.partitions)?;
            let figure = {
                let (python, opts, readings) = (python.clone(), opts.clone(), readings.clone());
                tokio::task::spawn_blocking(move || {
                    python_producer(&python, &hub, &opts, &readings)
                })
                .await
                .expect("python task")?
            };
            print(&figure, &base);
            figures.push(figure);
        }
        None => println!(
            "  (Python producer skipped: no virtualenv with azure-eventhub; run scripts/test.sh once, or pass --python)"
        ),
    }
    Ok(figures)
}

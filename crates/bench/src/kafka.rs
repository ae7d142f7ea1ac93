//! `hubhost bench kafka`: the hub's Kafka endpoint against its AMQP path, on the same hub and
//! the same data, in the same run. Each repetition starts a fresh `hubhost hub` (16 partitions,
//! its own data directory) and measures, one task and one connection per partition:
//! 1. AMQP produce (the baseline) — the Rust `ProducerClient`, batches to each partition;
//! 2. Kafka produce — `Produce` v9 requests of one uncompressed record batch each (`acks=1`),
//!    the same readings in the same batch size;
//! 3. AMQP read (the baseline) — the Rust `ConsumerClient` from the earliest event, every event
//!    of both producers;
//! 4. Kafka fetch — `Fetch` v12 from offset 0 until every event of both producers arrived.
//!
//! The Kafka client is a minimal one written on the wire-format crate the hub itself uses
//! (`kafka-protocol`): SASL PLAIN, then produce or fetch requests one at a time per connection,
//! decoding every record it receives — what a client's I/O costs, without a client library's
//! own buffering choices.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Record, RecordBatchDecoder, TimestampType};

use hubhost_testkit::KafkaConnection as Connection;
use hubhost_testkit::stats::median_and_range;

use crate::cpu;
use crate::hub::{
    Figure, HubBenchError, figure, readings, rust_consumer, rust_producer_on_its_thread,
};
use crate::local_hub::{HUB, HubProcess};

#[derive(Debug, Clone)]
pub struct KafkaBenchOptions {
    /// Events each producer phase sends.
    pub events: u64,
    pub batch_size: usize,
    pub partitions: u32,
    pub repetitions: usize,
    pub work_dir: std::path::PathBuf,
    /// The figures as JSON on stdout instead of the table.
    pub json: bool,
}

/// One phase over the repetitions: events/s of each.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PhaseFigures {
    pub phase: &'static str,
    pub events: u64,
    pub events_per_s: Vec<f64>,
    /// CPU the hub process spent per event in the phase (the clients differ; the hub's own
    /// cost per protocol is this).
    pub hub_cpu_us_per_event: Vec<f64>,
}

const AMQP_PRODUCE: &str = "AMQP produce: Rust ProducerClient (baseline)";
const KAFKA_PRODUCE: &str = "Kafka produce: Produce v9, one batch per request";
const AMQP_READ: &str = "AMQP read: Rust ConsumerClient (baseline)";
const KAFKA_FETCH: &str = "Kafka fetch: Fetch v12, 1 MiB per partition per request";

fn phase_error<E: Into<anyhow::Error>>(phase: &'static str) -> impl Fn(E) -> HubBenchError {
    move |e| HubBenchError::Phase {
        phase,
        message: format!("{:#}", e.into()),
    }
}

pub async fn run(opts: KafkaBenchOptions) -> Result<Vec<PhaseFigures>, HubBenchError> {
    let readings = Arc::new(readings());
    let per_partition = opts.events / u64::from(opts.partitions);
    eprintln!(
        "bench kafka: {} events per producer phase, {} partitions, batches of {}, {} repetitions",
        per_partition * u64::from(opts.partitions),
        opts.partitions,
        opts.batch_size,
        opts.repetitions
    );
    let mut phases: Vec<PhaseFigures> = [AMQP_PRODUCE, KAFKA_PRODUCE, AMQP_READ, KAFKA_FETCH]
        .into_iter()
        .map(|phase| PhaseFigures {
            phase,
            events: 0,
            events_per_s: Vec::new(),
            hub_cpu_us_per_event: Vec::new(),
        })
        .collect();
    for repetition in 0..opts.repetitions {
        let kafka_port = hubhost_testkit::try_free_port()
            .map_err(|e| phase_error(KAFKA_PRODUCE)(anyhow::anyhow!("{e}")))?;
        let hub = HubProcess::start_with(
            &opts.work_dir.join(format!("hub-{repetition}")),
            opts.partitions,
            &["--kafka-port".into(), kafka_port.to_string()],
        )?;
        let kafka: SocketAddr = ([127, 0, 0, 1], kafka_port).into();
        let password = hub.connection_string.clone();

        let hub_cpu = || cpu::process_cpu(hub.pid()).unwrap_or_default();
        let mut spent = Vec::new();
        let before = hub_cpu();
        let amqp = rust_producer_on_its_thread(
            &hub.target,
            per_partition,
            opts.partitions,
            opts.batch_size,
            &readings,
        )
        .await?;
        spent.push(hub_cpu() - before);
        let before = hub_cpu();
        let produced = kafka_produce(kafka, &password, per_partition, &opts, &readings).await?;
        spent.push(hub_cpu() - before);
        let expected = vec![2 * per_partition; opts.partitions as usize];
        let before = hub_cpu();
        let read = rust_consumer(&hub.target, &expected, 1000).await?;
        spent.push(hub_cpu() - before);
        let before = hub_cpu();
        let fetched = kafka_fetch(kafka, &password, 2 * per_partition, opts.partitions).await?;
        spent.push(hub_cpu() - before);
        for ((figures, figure), cpu) in phases
            .iter_mut()
            .zip([&amqp, &produced, &read, &fetched])
            .zip(spent)
        {
            figures.events = figure.events;
            figures.events_per_s.push(figure.events_per_s());
            figures
                .hub_cpu_us_per_event
                .push(cpu::micros_per_event(cpu, figure.events));
        }
        eprintln!(
            "bench kafka: repetition {}: AMQP produce {:.0}/s, Kafka produce {:.0}/s, AMQP read {:.0}/s, Kafka fetch {:.0}/s",
            repetition + 1,
            amqp.events_per_s(),
            produced.events_per_s(),
            read.events_per_s(),
            fetched.events_per_s()
        );
    }
    crate::load::print_runs(&phases, opts.json, || print(&phases)).map_err(|message| {
        HubBenchError::Phase {
            phase: "report",
            message,
        }
    })?;
    Ok(phases)
}

fn print(phases: &[PhaseFigures]) {
    let median = |p: &PhaseFigures| median_and_range(p.events_per_s.iter().copied()).0;
    println!(
        "  {:<58} {:>10} {:>12} {:>23} {:>12} {:>16}",
        "phase", "events", "median/s", "range/s", "vs baseline", "hub CPU µs/event"
    );
    for (i, p) in phases.iter().enumerate() {
        let (mid, low, high) = median_and_range(p.events_per_s.iter().copied());
        let (cpu, _, _) = median_and_range(p.hub_cpu_us_per_event.iter().copied());
        // Produce against AMQP produce, fetch against AMQP read.
        let baseline = median(&phases[i - i % 2]);
        println!(
            "  {:<58} {:>10} {:>12.0} {:>10.0} – {:>10.0} {:>11.2}× {:>16.2}",
            p.phase,
            p.events,
            mid,
            low,
            high,
            mid / baseline,
            cpu
        );
    }
}

/// Phase 2: one connection per partition, each sending its share in batches, one request at a
/// time; connections open before the clock starts.
async fn kafka_produce(
    address: SocketAddr,
    password: &str,
    per_partition: u64,
    opts: &KafkaBenchOptions,
    readings: &Arc<Vec<(String, String)>>,
) -> Result<Figure, HubBenchError> {
    let bytes = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(tokio::sync::Barrier::new(opts.partitions as usize + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..opts.partitions {
        let (password, readings, bytes, ready) = (
            password.to_string(),
            readings.clone(),
            bytes.clone(),
            ready.clone(),
        );
        let batch_size = opts.batch_size as u64;
        tasks.spawn(async move {
            let connection = Connection::open(address, &password).await;
            ready.wait().await;
            let mut connection = connection.map_err(phase_error(KAFKA_PRODUCE))?;
            let (mut sent, mut next) = (0u64, p as usize * 31);
            while sent < per_partition {
                let n = batch_size.min(per_partition - sent) as usize;
                let records: Vec<Record> = (0..n)
                    .map(|i| {
                        let body = &readings[(next + i) % readings.len()].1;
                        record(i as i64, Bytes::copy_from_slice(body.as_bytes()))
                    })
                    .collect();
                next += n;
                bytes.fetch_add(
                    records
                        .iter()
                        .map(|r| r.value.as_ref().map_or(0, |v| v.len()) as u64)
                        .sum(),
                    Ordering::Relaxed,
                );
                let batch =
                    hubhost_testkit::record_batch(&records).map_err(phase_error(KAFKA_PRODUCE))?;
                let request = ProduceRequest::default()
                    .with_acks(1)
                    .with_timeout_ms(30_000)
                    .with_topic_data(vec![
                        produce_request::TopicProduceData::default()
                            .with_name(TopicName(StrBytes::from_static_str(HUB)))
                            .with_partition_data(vec![
                                produce_request::PartitionProduceData::default()
                                    .with_index(p as i32)
                                    .with_records(Some(batch)),
                            ]),
                    ]);
                let response = connection
                    .call(&request, 9)
                    .await
                    .map_err(phase_error(KAFKA_PRODUCE))?;
                let code = response.responses[0].partition_responses[0].error_code;
                if code != 0 {
                    return Err(phase_error(KAFKA_PRODUCE)(anyhow::anyhow!(
                        "partition {p}: error {code}"
                    )));
                }
                sent += n as u64;
            }
            Ok::<_, HubBenchError>(sent)
        });
    }
    ready.wait().await;
    figure(KAFKA_PRODUCE, tasks, &bytes, Instant::now()).await
}

fn record(offset: i64, value: Bytes) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: -1,
        timestamp: chrono::Utc::now().timestamp_millis(),
        key: None,
        value: Some(value),
        headers: Default::default(),
    }
}

/// Phase 4: one connection per partition fetching from offset 0 until `per_partition` events
/// arrived, every record decoded.
async fn kafka_fetch(
    address: SocketAddr,
    password: &str,
    per_partition: u64,
    partitions: u32,
) -> Result<Figure, HubBenchError> {
    let bytes = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(tokio::sync::Barrier::new(partitions as usize + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..partitions {
        let (password, bytes, ready) = (password.to_string(), bytes.clone(), ready.clone());
        tasks.spawn(async move {
            let connection = Connection::open(address, &password).await;
            ready.wait().await;
            let mut connection = connection.map_err(phase_error(KAFKA_FETCH))?;
            let (mut got, mut offset) = (0u64, 0i64);
            let deadline = Instant::now() + Duration::from_secs(120);
            while got < per_partition {
                if Instant::now() > deadline {
                    return Err(phase_error(KAFKA_FETCH)(anyhow::anyhow!(
                        "partition {p}: {got} of {per_partition} within 120 s"
                    )));
                }
                let request = FetchRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_max_wait_ms(500)
                    .with_min_bytes(1)
                    .with_max_bytes(8 << 20)
                    .with_topics(vec![
                        fetch_request::FetchTopic::default()
                            .with_topic(TopicName(StrBytes::from_static_str(HUB)))
                            .with_partitions(vec![
                                fetch_request::FetchPartition::default()
                                    .with_partition(p as i32)
                                    .with_fetch_offset(offset)
                                    .with_partition_max_bytes(1 << 20),
                            ]),
                    ]);
                let response = connection
                    .call(&request, 12)
                    .await
                    .map_err(phase_error(KAFKA_FETCH))?;
                let data = &response.responses[0].partitions[0];
                if data.error_code != 0 {
                    return Err(phase_error(KAFKA_FETCH)(anyhow::anyhow!(
                        "partition {p}: error {}",
                        data.error_code
                    )));
                }
                let mut records = data.records.clone().unwrap_or_default();
                while records.has_remaining() {
                    let set = RecordBatchDecoder::decode(&mut records)
                        .map_err(phase_error(KAFKA_FETCH))?;
                    for r in set.records {
                        got += 1;
                        offset = r.offset + 1;
                        bytes.fetch_add(r.value.map_or(0, |v| v.len()) as u64, Ordering::Relaxed);
                    }
                }
            }
            Ok::<_, HubBenchError>(got)
        });
    }
    ready.wait().await;
    figure(KAFKA_FETCH, tasks, &bytes, Instant::now()).await
}

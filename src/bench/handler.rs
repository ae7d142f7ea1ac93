//! `hubhost bench handler`: the custom handler's throughput over loopback HTTP, with a baseline.
//!
//! For each batch size, a fresh `hubhost serve` child process (own storage directory) is driven
//! the way the host drives it: one batch in flight per partition, all partitions in parallel,
//! cardinality many, dataType string, ~250-byte sensor readings. Requests are built before the
//! clock starts. Reported: events/s and MB/s end to end (decode → aggregate → blob writes →
//! answer), p50/p99 batch latency, and — measured in the same run on the same requests — the
//! cost of decoding a request against a plain `serde_json` parse of the same bytes.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use chrono::Utc;

use crate::app::aggregate::window_start;
use crate::contract::decode::decode_request;
use crate::demo::host_request;
use crate::fleet::{Fleet, PartitionFeed};
use crate::handler::builtin_functions;
use crate::invoker::Invoker;

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub batch_sizes: Vec<usize>,
    pub events: usize,
    pub partitions: u32,
    pub homes: u32,
    /// Storage for the handler under test: a directory (default: a fresh temporary one per run)
    /// or a connection string.
    pub storage: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot start the handler: {0}")]
    Spawn(std::io::Error),
    #[error(transparent)]
    Invoke(#[from] crate::invoker::InvokeError),
    #[error("the handler answered HTTP {0} during the benchmark: {1}")]
    Failed(u16, String),
}

pub struct RunFigures {
    pub batch_size: usize,
    pub events: usize,
    pub bytes: usize,
    pub seconds: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub decode_us: f64,
    pub plain_parse_us: f64,
    /// Untimed warm-up: one reading per home, so that every home is in the directory.
    pub warm_up_seconds: f64,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(17071)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub async fn run(opts: BenchOptions) -> Result<Vec<RunFigures>, BenchError> {
    let mut all = Vec::new();
    println!(
        "handler benchmark: {} partitions, {} homes, {} events per run, loopback HTTP, function SensorAggregator",
        opts.partitions, opts.homes, opts.events
    );
    println!(
        "{:>6} {:>9} {:>8} {:>10} {:>7} {:>8} {:>8} | {:>11} {:>11} {:>6}",
        "batch",
        "events",
        "seconds",
        "events/s",
        "MB/s",
        "p50 ms",
        "p99 ms",
        "decode µs",
        "parse µs",
        "ratio"
    );
    for &batch_size in &opts.batch_sizes {
        let figures = run_one(&opts, batch_size).await?;
        println!(
            "{:>6} {:>9} {:>8.2} {:>10.0} {:>7.1} {:>8.2} {:>8.2} | {:>11.0} {:>11.0} {:>6.2}",
            figures.batch_size,
            figures.events,
            figures.seconds,
            figures.events as f64 / figures.seconds,
            figures.bytes as f64 / figures.seconds / 1e6,
            figures.p50_ms,
            figures.p99_ms,
            figures.decode_us,
            figures.plain_parse_us,
            figures.decode_us / figures.plain_parse_us
        );
        all.push(figures);
    }
    for f in &all {
        println!(
            "warm-up (batch {}): {} homes indexed in {:.1} s, untimed",
            f.batch_size, opts.homes, f.warm_up_seconds
        );
    }
    println!(
        "decode = hubhost's request decoding (contract → typed batch); parse = serde_json::from_slice::<Value> of the same bytes"
    );
    Ok(all)
}

async fn run_one(opts: &BenchOptions, batch_size: usize) -> Result<RunFigures, BenchError> {
    let spec = builtin_functions().remove(0);
    let trigger = spec.event_hub_trigger().expect("event hub trigger").clone();
    let fleet = Fleet {
        homes: opts.homes,
        partitions: opts.partitions,
        seed: 99,
    };
    let start = window_start(Utc::now(), 60);
    let per_partition = opts.events / opts.partitions as usize;
    let requests: Vec<(u32, Vec<Vec<u8>>)> = (0..opts.partitions)
        .map(|p| {
            let mut feed = PartitionFeed::new(&fleet, p, start);
            let mut left = per_partition;
            let mut batches = Vec::new();
            while left > 0 {
                let events = feed.next_batch(batch_size.min(left));
                if events.is_empty() {
                    break;
                }
                left -= events.len();
                batches.push(host_request(&spec.name, &trigger, p, &events));
            }
            (p, batches)
        })
        .collect();
    let events: usize = per_partition * opts.partitions as usize;
    let bytes: usize = requests.iter().flat_map(|(_, b)| b).map(Vec::len).sum();

    // Baseline, same bytes: decoding vs a plain parse, on a sample, best of 3.
    let sample: Vec<&Vec<u8>> = requests.iter().flat_map(|(_, b)| b).take(40).collect();
    let time = |f: &dyn Fn(&[u8])| {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                for r in &sample {
                    f(r);
                }
                t.elapsed().as_secs_f64() * 1e6 / sample.len() as f64
            })
            .fold(f64::INFINITY, f64::min)
    };
    let plain_parse_us = time(&|r| {
        std::hint::black_box(serde_json::from_slice::<serde_json::Value>(r).expect("valid JSON"));
    });
    let decode_us = time(&|r| {
        std::hint::black_box(decode_request(&spec.name, &trigger, r).expect("decodes"));
    });

    // The handler under test, in its own process with its own storage.
    let scratch = tempdir_path(batch_size);
    let storage = opts
        .storage
        .clone()
        .unwrap_or_else(|| scratch.display().to_string());
    let port = free_port();
    let mut child = crate::child::command(std::env::current_exe().map_err(BenchError::Spawn)?)
        .args(["serve", "--port", &port.to_string()])
        .env("HUBHOST_STORAGE", &storage)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(BenchError::Spawn)?;
    let invoker = Invoker::new(&format!("http://127.0.0.1:{port}"));
    invoker.wait_ready(Duration::from_secs(30)).await?;

    // Warm-up, untimed: one reading of every home in the minute before, so that the home
    // directory knows every home — the steady state of a running fleet, where a batch writes
    // its window aggregate and nothing else.
    let warm_started = Instant::now();
    let mut warm = tokio::task::JoinSet::new();
    for p in 0..opts.partitions {
        let homes = fleet.homes_in(p);
        let minute = start - chrono::Duration::minutes(1);
        let bodies: Vec<Vec<u8>> = homes
            .chunks(batch_size.max(1))
            .enumerate()
            .map(|(i, chunk)| {
                let events: Vec<_> = chunk
                    .iter()
                    .enumerate()
                    .map(|(j, home)| crate::batch::EventRecord {
                        body: bytes::Bytes::from(fleet.reading(home, 0, minute)),
                        sequence_number: Some((i * batch_size + j) as i64),
                        offset: None,
                        enqueued_time: Some(minute),
                        partition_key: Some(home.clone()),
                        properties: Default::default(),
                    })
                    .collect();
                host_request(&spec.name, &trigger, p, &events)
            })
            .collect();
        let (invoker, name) = (invoker.clone(), spec.name.clone());
        warm.spawn(async move {
            for body in bodies {
                let answer = invoker.invoke(&name, body).await?;
                if !answer.succeeded() {
                    return Err(BenchError::Failed(answer.status, answer.body.to_string()));
                }
            }
            Ok(())
        });
    }
    while let Some(result) = warm.join_next().await {
        result.expect("warm-up task")?;
    }
    let warm_up_seconds = warm_started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (_, batches) in requests {
        let (invoker, name) = (invoker.clone(), spec.name.clone());
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(batches.len());
            for body in batches {
                let t = Instant::now();
                let answer = invoker.invoke(&name, body).await?;
                if !answer.succeeded() {
                    return Err(BenchError::Failed(answer.status, answer.body.to_string()));
                }
                latencies.push(t.elapsed().as_secs_f64() * 1e3);
            }
            Ok(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(result) = tasks.join_next().await {
        latencies.extend(result.expect("bench task")?);
    }
    let seconds = started.elapsed().as_secs_f64();
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&scratch);
    latencies.sort_by(f64::total_cmp);
    Ok(RunFigures {
        batch_size,
        events,
        bytes,
        seconds,
        p50_ms: percentile(&latencies, 0.50),
        p99_ms: percentile(&latencies, 0.99),
        decode_us,
        plain_parse_us,
        warm_up_seconds,
    })
}

fn tempdir_path(tag: usize) -> PathBuf {
    std::env::temp_dir().join(format!("hubhost-bench-{}-{tag}", std::process::id()))
}

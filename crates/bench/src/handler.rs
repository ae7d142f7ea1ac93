//! `hubhost bench handler`: the custom handler's throughput over loopback HTTP, with baselines.
//!
//! For each batch size, fresh handler processes are driven the way the host drives them: one
//! batch in flight per partition, all partitions in parallel, cardinality many, dataType
//! string, ~250-byte sensor readings; requests are built before the clock starts. Two handlers,
//! alternating, `repetitions` times each: the reference app (`hubhost serve`, own storage
//! directory: decode → aggregate → blob writes → answer) and a trivial function on the same
//! framework that only counts the events (`hubhost-bench trivial-handler`: the framework's own
//! cost — HTTP, body limit, decoding, task, answer); and the reference app again with its
//! alarms at least once, without `Once`'s claim, for what outputs once costs. Reported per handler: median events/s with
//! the range over repetitions, MB/s, p50/p99 batch latency; and, on the same requests, decoding
//! against a plain `serde_json` parse of the same bytes — and the host's side, encoding batches
//! like them against serializing the same request as a `serde_json::Value`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use chrono::Utc;

use hubhost_app::aggregate::window_start;
use hubhost_app::fleet::{Fleet, PartitionFeed};
use hubhost_app::handler::builtin_functions;
use hubhost_functions::contract::decode::decode_request;
use hubhost_functions::prelude::*;
use hubhost_host::invoker::Invoker;
use hubhost_testkit::host_request;
use hubhost_testkit::stats::{median_and_range, percentile};

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub batch_sizes: Vec<usize>,
    pub events: usize,
    pub partitions: u32,
    pub homes: u32,
    /// Runs of each handler per batch size (median and range reported).
    pub repetitions: usize,
    /// Storage for the handler under test: a directory (default: a fresh temporary one per run)
    /// or a connection string.
    pub storage: Option<String>,
    /// The reference app's handler as an executable of its own (a packaged `hubhost-app`, which
    /// takes `--port` itself) in place of `hubhost serve`.
    pub reference_handler: Option<std::path::PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot start the handler: {0}")]
    Spawn(std::io::Error),
    #[error(transparent)]
    Invoke(#[from] hubhost_host::invoker::InvokeError),
    #[error("the handler answered HTTP {0} during the benchmark: {1}")]
    Failed(u16, String),
}

/// Which handler a run drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerKind {
    /// The reference app's `SensorAggregator` (`hubhost serve`).
    ReferenceApp,
    /// The same with its alarms at least once, without `Once`'s claim
    /// (`HUBHOST_ALARMS_AT_LEAST_ONCE=1`): what outputs once costs.
    ReferenceAppWithoutOnce,
    /// A function that only counts its events, on the same framework.
    Trivial,
    /// The trivial function on events a traced producer stamped (`Diagnostic-Id`), tracing
    /// off: the baseline of [`HandlerKind::TrivialTracing`].
    TrivialStampedEvents,
    /// The same with the handler exporting a span per invocation, linked to every event's
    /// producer, and its metrics, over OTLP/HTTP to a collector in the benchmark's process.
    TrivialTracing,
}

impl HandlerKind {
    fn label(self) -> &'static str {
        match self {
            HandlerKind::ReferenceApp => "reference app",
            HandlerKind::ReferenceAppWithoutOnce => "  without Once",
            HandlerKind::Trivial => "trivial function",
            HandlerKind::TrivialStampedEvents => "  stamped events",
            HandlerKind::TrivialTracing => "  tracing on",
        }
    }
}

/// One timed run of one handler.
#[derive(Debug, Clone)]
pub struct Run {
    pub seconds: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Every run of one batch size.
pub struct RunFigures {
    pub batch_size: usize,
    pub events: usize,
    pub bytes: usize,
    pub decode_us: f64,
    pub plain_parse_us: f64,
    pub encode_us: f64,
    pub plain_serialize_us: f64,
    pub reference: Vec<Run>,
    pub reference_without_once: Vec<Run>,
    pub trivial: Vec<Run>,
    pub trivial_stamped: Vec<Run>,
    pub trivial_tracing: Vec<Run>,
    /// Spans the collector received over the tracing runs, and invocations those runs made.
    pub spans_exported: u64,
    pub traced_invocations: u64,
}

impl RunFigures {
    /// Median and range of events/s over the runs.
    pub fn events_per_second(&self, kind: HandlerKind) -> (f64, f64, f64) {
        let runs = self.runs(kind);
        let mut rates: Vec<f64> = runs
            .iter()
            .map(|r| self.events as f64 / r.seconds)
            .collect();
        rates.sort_by(f64::total_cmp);
        (
            percentile(&rates, 0.5),
            rates.first().copied().unwrap_or(0.0),
            rates.last().copied().unwrap_or(0.0),
        )
    }
}

impl RunFigures {
    /// Every run of one handler.
    pub fn runs(&self, kind: HandlerKind) -> &[Run] {
        match kind {
            HandlerKind::ReferenceApp => &self.reference,
            HandlerKind::ReferenceAppWithoutOnce => &self.reference_without_once,
            HandlerKind::Trivial => &self.trivial,
            HandlerKind::TrivialStampedEvents => &self.trivial_stamped,
            HandlerKind::TrivialTracing => &self.trivial_tracing,
        }
    }

    /// What tracing costs per event: the median time per event with it on, less the median
    /// with it off, on the same stamped events, in microseconds of wall time (all partitions
    /// in parallel).
    pub fn tracing_cost_us_per_event(&self) -> f64 {
        let (on, _, _) = self.events_per_second(HandlerKind::TrivialTracing);
        let (off, _, _) = self.events_per_second(HandlerKind::TrivialStampedEvents);
        1e6 / on - 1e6 / off
    }
}

/// The trivial function: counts the events and answers.
struct CountOnly;

#[async_trait]
impl EventHubFunction for CountOnly {
    async fn run(
        &self,
        batch: TriggerBatch,
        _: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        Ok(FunctionOutput {
            return_value: batch.events.len().into(),
            ..Default::default()
        })
    }
}

/// `hubhost-bench trivial-handler`: the trivial function under the reference app's function
/// name, on `port`, until SIGTERM.
pub async fn serve_trivial(port: u16) -> Result<(), ServeError> {
    let spec = builtin_functions().remove(0);
    FunctionServer::builder()
        .event_hub_function(spec, CountOnly)
        .build(None)?
        .serve(
            ([127, 0, 0, 1], port).into(),
            |_| {},
            hubhost_functions::server::shutdown_signal(),
        )
        .await
}

pub async fn run(opts: BenchOptions) -> Result<Vec<RunFigures>, BenchError> {
    let mut all = Vec::new();
    println!(
        "handler benchmark: {} partitions, {} homes, {} events per run, {} repetitions of each handler, loopback HTTP",
        opts.partitions, opts.homes, opts.events, opts.repetitions
    );
    for &batch_size in &opts.batch_sizes {
        let prepared = prepare(&opts, batch_size);
        let mut figures = RunFigures {
            batch_size,
            events: prepared.events,
            bytes: prepared.bytes,
            decode_us: prepared.decode_us,
            plain_parse_us: prepared.plain_parse_us,
            encode_us: prepared.encode_us,
            plain_serialize_us: prepared.plain_serialize_us,
            reference: Vec::new(),
            reference_without_once: Vec::new(),
            trivial: Vec::new(),
            trivial_stamped: Vec::new(),
            trivial_tracing: Vec::new(),
            spans_exported: 0,
            traced_invocations: 0,
        };
        let collector = hubhost_telemetry::collector::Collector::start(0, 0)
            .await
            .map_err(BenchError::Spawn)?;
        // Alternating, so that drift of a noisy machine spreads over both.
        for _ in 0..opts.repetitions.max(1) {
            figures
                .reference
                .push(measure(&opts, &prepared, HandlerKind::ReferenceApp, None).await?);
            figures
                .reference_without_once
                .push(measure(&opts, &prepared, HandlerKind::ReferenceAppWithoutOnce, None).await?);
            figures
                .trivial
                .push(measure(&opts, &prepared, HandlerKind::Trivial, None).await?);
            figures
                .trivial_stamped
                .push(measure(&opts, &prepared, HandlerKind::TrivialStampedEvents, None).await?);
            figures.trivial_tracing.push(
                measure(
                    &opts,
                    &prepared,
                    HandlerKind::TrivialTracing,
                    Some(collector.endpoint()),
                )
                .await?,
            );
            figures.traced_invocations += prepared.invocations() as u64;
        }
        figures.spans_exported = collector.spans_received();
        print_figures(&figures);
        all.push(figures);
    }
    println!(
        "decode = hubhost's request decoding (contract → typed batch), best of 3 on 40 requests; parse = serde_json::from_slice::<Value> of the same bytes; encode = the emulated host's request encoding (events → contract), best of 3 on 40 batches; serialize = serde_json::to_vec of the same request as a Value"
    );
    Ok(all)
}

fn print_figures(f: &RunFigures) {
    print_handler_table(f);
    println!(
        "  tracing costs {:.2} µs per event ({} spans exported for {} invocations)",
        f.tracing_cost_us_per_event(),
        f.spans_exported,
        f.traced_invocations
    );
}

fn print_handler_table(f: &RunFigures) {
    println!(
        "batch {}: {} events, {:.1} MB per run; decode {:.0} µs vs plain parse {:.0} µs per request = {:.2}×",
        f.batch_size,
        f.events,
        f.bytes as f64 / 1e6,
        f.decode_us,
        f.plain_parse_us,
        f.decode_us / f.plain_parse_us
    );
    println!(
        "  the host's side: encode {:.0} µs vs plain serialize {:.0} µs per request = {:.2}×",
        f.encode_us,
        f.plain_serialize_us,
        f.encode_us / f.plain_serialize_us
    );
    println!(
        "  {:<17} {:>10} {:>21} {:>7} {:>8} {:>8}",
        "handler", "events/s", "range", "MB/s", "p50 ms", "p99 ms"
    );
    for (kind, runs) in [
        (HandlerKind::ReferenceApp, &f.reference),
        (
            HandlerKind::ReferenceAppWithoutOnce,
            &f.reference_without_once,
        ),
        (HandlerKind::Trivial, &f.trivial),
        (HandlerKind::TrivialStampedEvents, &f.trivial_stamped),
        (HandlerKind::TrivialTracing, &f.trivial_tracing),
    ] {
        let (mid, lo, hi) = f.events_per_second(kind);
        println!(
            "  {:<17} {:>10.0} {:>21} {:>7.1} {:>8.2} {:>8.2}",
            kind.label(),
            mid,
            format!("{lo:.0}–{hi:.0}"),
            mid * f.bytes as f64 / f.events as f64 / 1e6,
            median_and_range(runs.iter().map(|r| r.p50_ms)).0,
            median_and_range(runs.iter().map(|r| r.p99_ms)).0,
        );
    }
}

/// A batch size's requests, built once, with the decoding baseline.
struct Prepared {
    batch_size: usize,
    fleet: Fleet,
    start: chrono::DateTime<Utc>,
    requests: Vec<(u32, Vec<Vec<u8>>)>,
    /// The same events, each stamped with a `Diagnostic-Id` as a traced producer stamps them.
    stamped: Vec<(u32, Vec<Vec<u8>>)>,
    events: usize,
    bytes: usize,
    decode_us: f64,
    plain_parse_us: f64,
    encode_us: f64,
    plain_serialize_us: f64,
}

fn prepare(opts: &BenchOptions, batch_size: usize) -> Prepared {
    let spec = builtin_functions().remove(0);
    let trigger = spec.event_hub_trigger().expect("event hub trigger").clone();
    let fleet = Fleet {
        homes: opts.homes,
        partitions: opts.partitions,
        seed: 99,
    };
    let start = window_start(Utc::now(), 60);
    let per_partition = opts.events / opts.partitions as usize;
    let mut stamped = Vec::new();
    let requests: Vec<(u32, Vec<Vec<u8>>)> = (0..opts.partitions)
        .map(|p| {
            let mut feed = PartitionFeed::new(&fleet, p, start);
            let mut left = per_partition;
            let mut batches = Vec::new();
            let mut stamped_batches = Vec::new();
            while left > 0 {
                let mut events = feed.next_batch(batch_size.min(left));
                if events.is_empty() {
                    break;
                }
                left -= events.len();
                batches.push(host_request(&spec.name, &trigger, p, &events));
                stamp(&mut events, p, stamped_batches.len());
                stamped_batches.push(host_request(&spec.name, &trigger, p, &events));
            }
            stamped.push((p, stamped_batches));
            (p, batches)
        })
        .collect();
    let events: usize = per_partition * opts.partitions as usize;
    let bytes: usize = requests.iter().flat_map(|(_, b)| b).map(Vec::len).sum();

    // Baseline, same bytes: decoding vs a plain parse, on a sample, best of 3.
    let sample: Vec<&Vec<u8>> = requests.iter().flat_map(|(_, b)| b).take(40).collect();
    let plain_parse_us = best_of_3_per_item(sample.len(), &|i| {
        std::hint::black_box(
            serde_json::from_slice::<serde_json::Value>(sample[i]).expect("valid JSON"),
        );
    });
    let decode_us = best_of_3_per_item(sample.len(), &|i| {
        std::hint::black_box(decode_request(&spec.name, &trigger, sample[i]).expect("decodes"));
    });
    // The emulated host's side, on 40 batches like them: encoding the events as the host does
    // against serializing the same request's JSON value.
    let mut feed = PartitionFeed::new(&fleet, 0, start);
    let batches: Vec<Vec<EventRecord>> = (0..40).map(|_| feed.next_batch(batch_size)).collect();
    let values: Vec<serde_json::Value> = batches
        .iter()
        .map(|events| {
            serde_json::from_slice(&host_request(&spec.name, &trigger, 0, events))
                .expect("valid JSON")
        })
        .collect();
    let encode_us = best_of_3_per_item(batches.len(), &|i| {
        std::hint::black_box(host_request(&spec.name, &trigger, 0, &batches[i]));
    });
    let plain_serialize_us = best_of_3_per_item(batches.len(), &|i| {
        std::hint::black_box(serde_json::to_vec(&values[i]).expect("serializes"));
    });

    Prepared {
        batch_size,
        fleet,
        start,
        requests,
        stamped,
        events,
        bytes,
        decode_us,
        plain_parse_us,
        encode_us,
        plain_serialize_us,
    }
}

/// Stamps each event with a `Diagnostic-Id` as a traced producer does: one trace per batch
/// sent, one span per event.
fn stamp(events: &mut [EventRecord], partition: u32, batch: usize) {
    for (i, event) in events.iter_mut().enumerate() {
        let context = hubhost_telemetry::TraceParent {
            trace_id: [
                &(partition as u64 + 1).to_be_bytes()[..],
                &(batch as u64 + 1).to_be_bytes()[..],
            ]
            .concat()
            .try_into()
            .expect("16 bytes"),
            span_id: (i as u64 + 1).to_be_bytes(),
            flags: 1,
        };
        event
            .properties
            .insert("Diagnostic-Id".into(), context.to_string().into());
    }
}

impl Prepared {
    /// Invocations one run makes.
    fn invocations(&self) -> usize {
        self.requests.iter().map(|(_, batches)| batches.len()).sum()
    }
}

/// Microseconds per item of `f` over items `0..n`, the best of 3 passes.
fn best_of_3_per_item(n: usize, f: &dyn Fn(usize)) -> f64 {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            for i in 0..n {
                f(i);
            }
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// One timed run of a fresh handler process of `kind` on the prepared requests.
async fn measure(
    opts: &BenchOptions,
    prepared: &Prepared,
    kind: HandlerKind,
    otlp_endpoint: Option<&str>,
) -> Result<Run, BenchError> {
    let Prepared {
        batch_size,
        fleet,
        start,
        ..
    } = prepared;
    let (batch_size, start) = (*batch_size, *start);
    let spec = builtin_functions().remove(0);
    let trigger = spec.event_hub_trigger().expect("event hub trigger").clone();
    // The handler under test, in its own process (the reference app with its own storage).
    let scratch = tempdir_path(batch_size);
    let storage = opts
        .storage
        .clone()
        .unwrap_or_else(|| scratch.display().to_string());
    let port = hubhost_process::child::free_listen_port().map_err(BenchError::Spawn)?;
    let exe = match (kind, &opts.reference_handler) {
        (HandlerKind::ReferenceApp | HandlerKind::ReferenceAppWithoutOnce, Some(exe)) => {
            Ok(exe.clone())
        }
        (HandlerKind::ReferenceApp | HandlerKind::ReferenceAppWithoutOnce, None) => {
            crate::hubhost_exe()
        }
        (
            HandlerKind::Trivial | HandlerKind::TrivialStampedEvents | HandlerKind::TrivialTracing,
            _,
        ) => std::env::current_exe(),
    };
    let mut command = hubhost_process::child::command(exe.map_err(BenchError::Spawn)?);
    if opts.reference_handler.is_none() {
        // `hubhost serve`; a handler of its own is the command.
        if matches!(
            kind,
            HandlerKind::ReferenceApp | HandlerKind::ReferenceAppWithoutOnce
        ) {
            command.arg("serve");
        }
    }
    match kind {
        HandlerKind::ReferenceApp => command
            .args(["--port", &port.to_string()])
            .env("HUBHOST_STORAGE", &storage),
        HandlerKind::ReferenceAppWithoutOnce => command
            .args(["--port", &port.to_string()])
            .env("HUBHOST_STORAGE", &storage)
            .env("HUBHOST_ALARMS_AT_LEAST_ONCE", "1"),
        HandlerKind::Trivial | HandlerKind::TrivialStampedEvents | HandlerKind::TrivialTracing => {
            command.args(["trivial-handler", "--port", &port.to_string()])
        }
    };
    // Nothing exported but where asked: a shell's OTEL_* variables must not leak in.
    for variable in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    ] {
        command.env_remove(variable);
    }
    if let Some(endpoint) = otlp_endpoint {
        command
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .env("OTEL_METRIC_EXPORT_INTERVAL", "1000");
    }
    let mut child = command
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(BenchError::Spawn)?;
    let invoker = Invoker::new(&format!("http://127.0.0.1:{port}"));
    invoker.wait_ready(Duration::from_secs(30)).await?;

    if matches!(
        kind,
        HandlerKind::ReferenceApp | HandlerKind::ReferenceAppWithoutOnce
    ) {
        // Warm-up, untimed: one reading of every home in the minute before, so that the home
        // directory knows every home — the steady state of a running fleet, where a batch writes
        // its window aggregate and nothing else.
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
                        .map(|(j, home)| hubhost_functions::batch::EventRecord {
                            body: bytes::Bytes::from(fleet.reading(home, 0, minute)),
                            sequence_number: Some((i * batch_size + j) as i64),
                            offset: None,
                            enqueued_time: Some(minute),
                            partition_key: Some(home.clone()),
                            properties: Default::default(),
                            system_properties: Default::default(),
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
    }

    // Copied before the clock starts: each run sends its own copy of the requests.
    let requests = match kind {
        HandlerKind::TrivialStampedEvents | HandlerKind::TrivialTracing => prepared.stamped.clone(),
        _ => prepared.requests.clone(),
    };
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
    // Stopped as the host stops a handler (SIGTERM), outside the clock: a tracing handler
    // sends its last spans on the way out.
    if let Some(pid) = child.id() {
        // SAFETY: signalling a child process this function started and has not reaped.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    latencies.sort_by(f64::total_cmp);
    Ok(Run {
        seconds,
        p50_ms: percentile(&latencies, 0.50),
        p99_ms: percentile(&latencies, 0.99),
    })
}

fn tempdir_path(tag: usize) -> PathBuf {
    std::env::temp_dir().join(format!("hubhost-bench-{}-{tag}", std::process::id()))
}

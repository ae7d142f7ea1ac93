//! `hubhost bench latency`: how old a reading is when the reference app has applied it, and an
//! alarm when the page can show it, at the reference load in real time.
//!
//! Everything runs as in `bench pool`, as child processes: a `hubhost hub`, a pool of `hubhost
//! emulate` instances running the real `SensorAggregator` (each with its `hubhost serve`
//! handler), and the fleet simulator sending `homes` homes at 1× speed (100,000 homes: 13,333
//! events/s). Three clocks are read for the same events:
//! - **baseline**: a bare SDK consumer on its own consumer group of the same hub, enqueued time
//!   → received (no handler, no storage): what any consumer pays on this machine;
//! - **applied**: each handler's `hubhost_handler_applied_age_seconds` histogram, enqueued time
//!   → window block written, recorded by the app for every reading it applies the first time;
//! - **pushed**: the page's stream of alarms (`/api/dashboard/alarms` of an instance's handler,
//!   server-sent events read from the alarms hub); every alarm counts from its reading's
//!   enqueued time to the moment its event arrives, as the page shows it;
//! - **page**: the fleet view's JSON (`/api/dashboard/fleet.json` of an instance's handler)
//!   polled every `page_poll`, as a browser that cannot keep the stream open sees alarms; an
//!   alarm counts from its enqueued time to the first poll that lists it. Intrusions (about 130 a second at the reference load) are left out: the view
//!   lists 50 alarms, most urgent first, so a poll shows only a sample of them and which ones
//!   would bias the figure. At the reference load the 50 rows hold smoke and CO alarms (about
//!   200 active at a time), so those are what is timed.
//!
//! Each run is cut into intervals (a minute by default); an interval's p99 is one repetition,
//! whose median and range the table shows beside the p50, p99, p99.9 and max of the whole run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use azure_messaging_eventhubs::{StartLocation, StartPosition};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::load::{
    AGGREGATOR, LoadError, LoadOptions, Pool, RunningLoad, Workload, fetch_text, print_runs,
};
use crate::local_hub::{BASELINE_GROUP, open_bare_receiver};
use hubhost_eventhubs::EventHubTarget;
use hubhost_metrics::{self as metrics, Buckets, Histogram};

/// The consumer group the baseline reads (the hub `bench` starts has it).
pub(crate) const APPLIED: &str = "hubhost_handler_applied_age_seconds";

#[derive(Debug, Clone)]
pub struct LatencyOptions {
    pub workload: Workload,
    /// Pool sizes, one run each.
    pub instances: Vec<usize>,
    /// Measured time per run, after `warmup`.
    pub duration: Duration,
    /// Time for the pool to claim its partitions and the pipeline to fill, not measured.
    pub warmup: Duration,
    /// Length of one repetition (percentiles per interval).
    pub interval: Duration,
    pub page_poll: Duration,
    pub json: bool,
    pub work_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum LatencyBenchError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    EventHub(#[from] hubhost_eventhubs::EventHubsError),
    #[error("{0}")]
    Other(String),
}

/// Percentiles of one latency over a whole run, in seconds (each the upper bound of the
/// histogram bucket holding it, 9% wide), and the p99 per interval.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub max: Option<f64>,
    /// p99 of each interval with at least 20 observations.
    pub p99_per_interval: Vec<f64>,
}

impl Latency {
    fn of(whole: &Buckets, intervals: &[Buckets]) -> Self {
        Latency {
            count: whole.count(),
            p50: whole.quantile(0.5),
            p99: whole.quantile(0.99),
            p999: whole.quantile(0.999),
            max: whole.max(),
            p99_per_interval: intervals
                .iter()
                .filter(|b| b.count() >= 20)
                .filter_map(|b| b.quantile(0.99))
                .collect(),
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct LatencyRun {
    pub instances: usize,
    pub seconds: f64,
    /// Events the hub acknowledged to the simulator during the measured time, per second.
    pub sent_per_s: f64,
    pub baseline: Latency,
    pub applied: Latency,
    /// Alarms pushed to the page.
    pub pushed: Latency,
    /// Smoke and CO alarms as a polling page sees them.
    pub page: Latency,
}

/// Runs the benchmark and prints the table (or the JSON).
pub async fn run(opts: LatencyOptions) -> Result<Vec<LatencyRun>, LatencyBenchError> {
    let mut runs = Vec::new();
    for &count in &opts.instances {
        runs.push(one_run(&opts, count).await?);
    }
    print_runs(&runs, opts.json, || print(&runs, &opts)).map_err(LatencyBenchError::Other)?;
    Ok(runs)
}

fn note(line: impl AsRef<str>) {
    eprintln!("bench latency: {}", line.as_ref());
}

async fn one_run(opts: &LatencyOptions, count: usize) -> Result<LatencyRun, LatencyBenchError> {
    let mut load = RunningLoad::start(
        &opts.work_dir.join(format!("latency-{count}")),
        &LoadOptions {
            workload: &opts.workload,
            pool: Pool::Fixed(count),
            functions: &[AGGREGATOR],
            event_hubs: &[],
            hub_args: &[],
        },
    )
    .await?;
    let handlers: Vec<String> = load.instances()?.into_iter().map(|e| e.handler).collect();
    if handlers.len() != count {
        return Err(LatencyBenchError::Other(format!(
            "{} of {count} instances named their handler",
            handlers.len()
        )));
    }
    let stop = CancellationToken::new();
    let baseline = Arc::new(Histogram::new(metrics::fine_latency_buckets()));
    let baseline_task = tokio::spawn(baseline_consumer(
        load.target().clone(),
        opts.workload.partitions,
        baseline.clone(),
        stop.clone(),
    ));
    let (page, page_task) = open_page(&handlers[0], opts.page_poll, &stop);
    let pushed = Arc::new(Histogram::new(metrics::fine_latency_buckets()));
    let stream_task = tokio::spawn(watch_stream(
        format!("{}/api/dashboard/alarms", handlers[0]),
        pushed.clone(),
        stop.clone(),
    ));

    note(format!(
        "{count} instance(s), {} homes in real time: {} s to warm up, then {} s measured",
        opts.workload.homes,
        opts.warmup.as_secs(),
        opts.duration.as_secs()
    ));
    tokio::time::sleep(opts.warmup).await;
    let http = reqwest::Client::new();
    let sent_at_start = load.sent().await?;
    let mut readings = vec![Readings::take(&http, &handlers, &baseline, &pushed, &page).await?];
    let started = Instant::now();
    while started.elapsed() < opts.duration {
        let left = opts.duration.saturating_sub(started.elapsed());
        tokio::time::sleep(opts.interval.min(left)).await;
        readings.push(Readings::take(&http, &handlers, &baseline, &pushed, &page).await?);
        note(format!(
            "{count} instance(s): {:.0} of {} s",
            started.elapsed().as_secs_f64(),
            opts.duration.as_secs()
        ));
    }
    let seconds = started.elapsed().as_secs_f64();
    let sent_at_end = load.sent().await?;
    stop.cancel();
    baseline_task
        .await
        .map_err(|e| LatencyBenchError::Other(e.to_string()))??;
    let _ = page_task.await;
    let _ = stream_task.await;
    let (summary, _) = load.finish().await?;
    if summary.failed > 0 {
        note(format!("the simulator saw {} sends fail", summary.failed));
    }

    let series = |pick: fn(&Readings) -> &Buckets| {
        let whole = pick(&readings[readings.len() - 1]).since(pick(&readings[0]));
        let intervals: Vec<Buckets> = readings
            .windows(2)
            .map(|w| pick(&w[1]).since(pick(&w[0])))
            .collect();
        Latency::of(&whole, &intervals)
    };
    Ok(LatencyRun {
        instances: count,
        seconds,
        sent_per_s: (sent_at_end - sent_at_start) as f64 / seconds,
        baseline: series(|r| &r.baseline),
        applied: series(|r| &r.applied),
        pushed: series(|r| &r.pushed),
        page: series(|r| &r.page),
    })
}

/// The histograms at one moment.
struct Readings {
    baseline: Buckets,
    applied: Buckets,
    pushed: Buckets,
    page: Buckets,
}

impl Readings {
    async fn take(
        http: &reqwest::Client,
        handlers: &[String],
        baseline: &Histogram,
        pushed: &Histogram,
        page: &Histogram,
    ) -> Result<Self, LatencyBenchError> {
        let mut applied = Buckets::default();
        for handler in handlers {
            let url = format!("{handler}/metrics");
            let text = fetch_text(http, &url)
                .await
                .map_err(LatencyBenchError::Other)?;
            let samples = metrics::parse(&text)
                .map_err(|e| LatencyBenchError::Other(format!("{url}: {e}")))?;
            applied.add(&Buckets::scrape(&samples, APPLIED, &[]));
        }
        Ok(Readings {
            baseline: baseline.buckets(),
            applied,
            pushed: pushed.buckets(),
            page: page.buckets(),
        })
    }
}

/// The bare SDK consumer: a receiver per partition from the latest event on, each event's
/// age when received recorded.
async fn baseline_consumer(
    target: EventHubTarget,
    partitions: u32,
    ages: Arc<Histogram>,
    stop: CancellationToken,
) -> Result<(), LatencyBenchError> {
    let consumer = Arc::new(target.consumer(BASELINE_GROUP).await?);
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..partitions {
        let (consumer, ages, stop) = (consumer.clone(), ages.clone(), stop.clone());
        tasks.spawn(async move {
            let latest = StartPosition {
                location: StartLocation::Latest,
                inclusive: false,
            };
            // The host's default prefetch, as the instances use.
            let receiver = open_bare_receiver(&consumer, p, latest, 300)
                .await
                .map_err(|e| LatencyBenchError::Other(format!("baseline partition {p}: {e}")))?;
            let mut stream = Box::pin(receiver.stream_events());
            loop {
                let event = tokio::select! {
                    _ = stop.cancelled() => break,
                    next = stream.next() => next,
                };
                let Some(Ok(event)) = event else { break };
                if let Some(enqueued) = event.enqueued_time() {
                    let age = std::time::SystemTime::now()
                        .duration_since(enqueued)
                        .unwrap_or_default();
                    ages.observe(age);
                }
            }
            Ok::<_, LatencyBenchError>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| LatencyBenchError::Other(e.to_string()))??;
    }
    if let Ok(consumer) = Arc::try_unwrap(consumer) {
        consumer.close().await.ok();
    }
    Ok(())
}

/// The page open on `handler`'s fleet view, polled every `every` until `stop`: the histogram
/// of alarms' ages when first listed, and the polling task.
pub(crate) fn open_page(
    handler: &str,
    every: Duration,
    stop: &CancellationToken,
) -> (Arc<Histogram>, tokio::task::JoinHandle<()>) {
    let page = Arc::new(Histogram::new(metrics::fine_latency_buckets()));
    let task = tokio::spawn(watch_page(
        format!("{handler}/api/dashboard/fleet.json"),
        every,
        page.clone(),
        stop.clone(),
    ));
    (page, task)
}

/// Polls the fleet view; each alarm but an intrusion counts once, from its enqueued time to the first
/// poll that lists it. Alarms listed by the first poll are older than the watch and skipped.
async fn watch_page(url: String, every: Duration, ages: Arc<Histogram>, stop: CancellationToken) {
    let http = reqwest::Client::new();
    let mut seen: BTreeSet<(String, String, String)> = BTreeSet::new();
    let mut first = true;
    let mut failures = BTreeMap::<String, u32>::new();
    while !stop.is_cancelled() {
        let polled = fetch_text(&http, &url).await.and_then(|text| {
            serde_json::from_str::<serde_json::Value>(&text).map_err(|e| e.to_string())
        });
        let now = chrono::Utc::now();
        match polled {
            Ok(view) => {
                for alarm in view["activeAlarms"].as_array().into_iter().flatten() {
                    let kind = alarm["kind"].as_str().unwrap_or_default();
                    let Some(enqueued) = alarm["enqueued"]
                        .as_str()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    else {
                        continue;
                    };
                    let key = (
                        alarm["home"].as_str().unwrap_or_default().to_string(),
                        alarm["sensorId"].as_str().unwrap_or_default().to_string(),
                        enqueued.to_rfc3339(),
                    );
                    if kind == "intrusion" || !seen.insert(key) || first {
                        continue;
                    }
                    let age = now.signed_duration_since(enqueued.to_utc());
                    ages.observe(age.to_std().unwrap_or_default());
                }
                first = false;
            }
            Err(e) => *failures.entry(e).or_default() += 1,
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
    }
    for (failure, times) in failures {
        note(format!("the fleet view failed {times} time(s): {failure}"));
    }
}

/// Reads the page's stream of alarms as a browser does, reconnecting as `EventSource` does;
/// each alarm counts from its reading's enqueued time to its arrival.
async fn watch_stream(url: String, ages: Arc<Histogram>, stop: CancellationToken) {
    let http = reqwest::Client::new();
    let mut failures = BTreeMap::<String, u32>::new();
    while !stop.is_cancelled() {
        let read = async {
            let mut response = http.get(&url).send().await.map_err(|e| e.to_string())?;
            if !response.status().is_success() {
                return Err(format!("{url} answered {}", response.status()));
            }
            let mut pending = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
                let arrived = chrono::Utc::now();
                pending.extend_from_slice(&chunk);
                // An event ends with a blank line; its `data:` line holds the alarm's row.
                while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
                    let event: Vec<u8> = pending.drain(..end + 2).collect();
                    if let Some(age) = pushed_age(&event, arrived) {
                        ages.observe(age);
                    }
                }
            }
            Ok(())
        };
        let ended = tokio::select! {
            _ = stop.cancelled() => break,
            ended = read => ended,
        };
        if let Err(e) = ended {
            *failures.entry(e).or_default() += 1;
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    for (failure, times) in failures {
        note(format!(
            "the page's alarm stream failed {times} time(s): {failure}"
        ));
    }
}

/// How old the alarm of one server-sent event (`event: alarm`, `data: {row}`) was when it
/// arrived; `None` for any other event.
fn pushed_age(event: &[u8], arrived: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let text = std::str::from_utf8(event).ok()?;
    let mut lines = text.lines();
    if !lines.clone().any(|l| l == "event: alarm") {
        return None;
    }
    let data = lines.find_map(|l| l.strip_prefix("data:"))?;
    let row: serde_json::Value = serde_json::from_str(data.trim()).ok()?;
    let enqueued = chrono::DateTime::parse_from_rfc3339(row["enqueued"].as_str()?).ok()?;
    arrived
        .signed_duration_since(enqueued.to_utc())
        .to_std()
        .ok()
        .or(Some(Duration::ZERO))
}

fn ms(seconds: Option<f64>) -> String {
    match seconds {
        Some(s) if s.is_infinite() => "> 128 s".into(),
        Some(s) => format!("{:.0} ms", s * 1000.0),
        None => "–".into(),
    }
}

/// Median and range of the per-interval p99s.
fn spread(values: &[f64]) -> String {
    if values.is_empty() {
        return "–".into();
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    format!(
        "{} ({}–{}, n={})",
        ms(Some(sorted[sorted.len() / 2])),
        ms(Some(sorted[0])),
        ms(Some(sorted[sorted.len() - 1])),
        sorted.len()
    )
}

fn print(runs: &[LatencyRun], opts: &LatencyOptions) {
    println!(
        "bench latency: {} homes in real time, maxEventBatchSize {}, minEventBatchSize {} (maxWaitTime {:.1} s), prefetchCount {}, {} s per pool after {} s of warm-up",
        opts.workload.homes,
        opts.workload.max_batch,
        opts.workload.min_batch,
        opts.workload.max_wait.as_secs_f64(),
        opts.workload.prefetch,
        opts.duration.as_secs(),
        opts.warmup.as_secs()
    );
    println!(
        "{:<10} {:<26} {:>9} {:>8} {:>8} {:>8} {:>8}   p99 per {} s: median (range)",
        "instances",
        "latency",
        "count",
        "p50",
        "p99",
        "p99.9",
        "max",
        opts.interval.as_secs()
    );
    for run in runs {
        println!("{:<10} sent {:.0} events/s", run.instances, run.sent_per_s);
        for (what, l) in [
            ("baseline: SDK received", &run.baseline),
            ("applied to window block", &run.applied),
            ("alarm pushed to page", &run.pushed),
            ("smoke/CO alarm, page polls", &run.page),
        ] {
            println!(
                "{:<10} {:<26} {:>9} {:>8} {:>8} {:>8} {:>8}   {}",
                "",
                what,
                l.count,
                ms(l.p50),
                ms(l.p99),
                ms(l.p999),
                ms(l.max),
                spread(&l.p99_per_interval)
            );
        }
    }
    println!(
        "(each figure is the upper bound of its histogram bucket, at most 9% above the true value; the page is polled every {} ms)",
        opts.page_poll.as_millis()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_is_the_median_and_range_of_the_interval_p99s() {
        assert_eq!(spread(&[0.3, 0.1, 0.2]), "200 ms (100 ms–300 ms, n=3)");
        assert_eq!(spread(&[]), "–");
    }
}

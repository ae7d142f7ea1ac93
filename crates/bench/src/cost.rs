//! `hubhost bench cost`: the blob storage requests the reference fleet makes, and what a month
//! of them costs at Azure's list prices.
//!
//! The reference load runs in real time (`homes` homes at 1×, as in `bench latency`) through
//! the whole reference app — `SensorAggregator` and `RawArchive` — once per configuration:
//! the Functions host's load-balancing timings (30 s, ownership expiring after 2 min),
//! hubhost's defaults, and `hubhost emulate --scale` choosing the pool. One web page is open on
//! the fleet view, polling it every second as the page does. Every request is counted where
//! it is made, by the store decorator each process wraps its store in
//! (`storage::counting`), by transaction class (how Azure bills it) and kind of blob:
//! - an instance's `/metrics`: the checkpoint store (ownership, checkpoints, scale history);
//! - its handler's `/metrics`: the app's blobs (window blocks, home directory, archive, dead
//!   letters) and, apart, what the page reads;
//! - the scale controller prints its own on exit (prorated to the measured time).
//!
//! Per 1,000,000 events is per event sent during the measured time; per month is the measured
//! rate over 30 days; the price is per 10,000 requests of each class.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::load::{
    AGGREGATOR, ARCHIVE, Endpoints, LoadError, LoadOptions, Pool, RunningLoad, Workload,
    fetch_text, print_runs,
};
use hubhost_metrics as metrics;
use hubhost_storage::counting::{REQUESTS_METRIC, TransactionClass};

/// How often the instances' counts are read during the measured time.
const SCRAPE_EVERY: Duration = Duration::from_secs(5);
/// Seconds in the month the figures are scaled to (30 days).
const MONTH_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

/// What the pool runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostConfig {
    /// `loadBalancingUpdateInterval` 30 s, `partitionOwnershipExpirationInterval` 2 min.
    HostTimings,
    /// hubhost's own timings (host.json without them).
    HubhostDefaults,
    /// hubhost's timings, the pool chosen by `emulate --scale`.
    Scale,
}

impl CostConfig {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "host" => Ok(CostConfig::HostTimings),
            "hubhost" => Ok(CostConfig::HubhostDefaults),
            "scale" => Ok(CostConfig::Scale),
            other => Err(format!(
                "unknown configuration {other:?}: host, hubhost or scale"
            )),
        }
    }

    fn label(self) -> &'static str {
        match self {
            CostConfig::HostTimings => "host timings (30 s / 2 min)",
            CostConfig::HubhostDefaults => "hubhost defaults",
            CostConfig::Scale => "--scale",
        }
    }
}

/// US dollars per 10,000 requests of each class.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Prices {
    pub write: f64,
    pub list: f64,
    pub read: f64,
    pub other: f64,
}

impl Prices {
    fn of(&self, class: TransactionClass) -> f64 {
        match class {
            TransactionClass::Write => self.write,
            TransactionClass::List => self.list,
            TransactionClass::Read => self.read,
            TransactionClass::Other => self.other,
            TransactionClass::Free => 0.0,
        }
    }
}

#[derive(Debug, Clone)]
pub struct CostOptions {
    pub workload: Workload,
    /// Instances of the fixed pools.
    pub instances: usize,
    pub configs: Vec<CostConfig>,
    pub duration: Duration,
    pub warmup: Duration,
    pub scale_interval: Duration,
    pub prices: Prices,
    pub json: bool,
    pub work_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum CostBenchError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("{0}")]
    Other(String),
}

/// One line of the bill: who asked, for what kind of blob, in which class.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CostLine {
    /// `checkpoint store`, `app`, `page` or `scale controller`.
    pub source: String,
    pub kind: String,
    pub class: &'static str,
    pub requests: f64,
    pub per_million_events: f64,
    pub per_month: f64,
    pub usd_per_month: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct CostRun {
    pub config: &'static str,
    /// Instances at the end of the measured time, and the most at once.
    pub instances: usize,
    pub most_instances: usize,
    pub seconds: f64,
    pub events: u64,
    pub lines: Vec<CostLine>,
    pub per_million_events: f64,
    pub usd_per_month: f64,
    /// Of that, the page's share.
    pub page_usd_per_month: f64,
}

fn note(line: impl AsRef<str>) {
    eprintln!("bench cost: {}", line.as_ref());
}

pub async fn run(opts: CostOptions) -> Result<Vec<CostRun>, CostBenchError> {
    let mut runs = Vec::new();
    for &config in &opts.configs {
        runs.push(one_run(&opts, config).await?);
    }
    print_runs(&runs, opts.json, || print(&runs, &opts)).map_err(CostBenchError::Other)?;
    Ok(runs)
}

/// A kind of blob and a transaction class.
type KindAndClass = (String, TransactionClass);

/// (source, kind, class) → requests, summed over instances.
type Counts = BTreeMap<(String, String, TransactionClass), f64>;

async fn one_run(opts: &CostOptions, config: CostConfig) -> Result<CostRun, CostBenchError> {
    let host_timings = [
        ("loadBalancingUpdateInterval", Value::from("00:00:30")),
        (
            "partitionOwnershipExpirationInterval",
            Value::from("00:02:00"),
        ),
    ];
    let pool = match config {
        CostConfig::Scale => Pool::Scaled {
            interval: opts.scale_interval,
        },
        _ => Pool::Fixed(opts.instances),
    };
    let dir = opts.work_dir.join(format!("cost-{}", runs_dir(config)));
    let mut load = RunningLoad::start(
        &dir,
        &LoadOptions {
            workload: &opts.workload,
            pool,
            functions: &[AGGREGATOR, ARCHIVE],
            event_hubs: if config == CostConfig::HostTimings {
                &host_timings
            } else {
                &[]
            },
            hub_args: &[],
        },
    )
    .await?;
    note(format!(
        "{}: {} homes in real time, {} s to warm up, then {} s measured",
        config.label(),
        opts.workload.homes,
        opts.warmup.as_secs(),
        opts.duration.as_secs()
    ));
    let http = reqwest::Client::new();
    let stop = CancellationToken::new();
    let page = tokio::spawn(open_page(
        http.clone(),
        load_page_url(&mut load, opts).await?,
        stop.clone(),
    ));
    tokio::time::sleep(opts.warmup).await;

    let at_start = scrape(&http, &load.instances()?).await;
    let sent_at_start = load.sent().await?;
    let started = Instant::now();
    // Scraped every few seconds, so that an instance the scale controller stops during the
    // measured time still counts, up to its last scrape.
    let mut last = at_start.clone();
    let mut instances = 0;
    let mut most = 0;
    while started.elapsed() < opts.duration {
        let left = opts.duration.saturating_sub(started.elapsed());
        tokio::time::sleep(SCRAPE_EVERY.min(left)).await;
        let now = load.instances()?;
        instances = now.len();
        most = most.max(instances);
        last.extend(scrape(&http, &now).await);
    }
    let seconds = started.elapsed().as_secs_f64();
    let events = load.sent().await? - sent_at_start;
    stop.cancel();
    let _ = page.await;
    let (_, printed) = load.finish().await?;
    if last.is_empty() {
        return Err(CostBenchError::Other(
            "no instance answered on /metrics".into(),
        ));
    }

    let mut counts: Counts = BTreeMap::new();
    for (instance, end) in &last {
        let start = at_start.get(instance);
        for (key, n) in end {
            let before = start.and_then(|s| s.get(key)).copied().unwrap_or(0.0);
            *counts.entry(key.clone()).or_default() += (n - before).max(0.0);
        }
    }
    if config == CostConfig::Scale {
        let (controller, lifetime) = controller_requests(&printed);
        // Its counts cover its whole run; its requests come at a steady pace (one round per
        // decision), so the measured time's share is prorated.
        let share = if lifetime > 0.0 {
            seconds / lifetime
        } else {
            0.0
        };
        for ((kind, class), n) in controller {
            *counts
                .entry(("scale controller".into(), kind, class))
                .or_default() += n * share;
        }
    }
    let mut run = bill(config, instances, seconds, events, &counts, &opts.prices);
    run.most_instances = most;
    Ok(run)
}

fn runs_dir(config: CostConfig) -> &'static str {
    match config {
        CostConfig::HostTimings => "host",
        CostConfig::HubhostDefaults => "hubhost",
        CostConfig::Scale => "scale",
    }
}

/// The fleet view of the first instance that has a handler (the scaled pool's first one may
/// take a while to start).
async fn load_page_url(
    load: &mut RunningLoad,
    opts: &CostOptions,
) -> Result<String, CostBenchError> {
    let deadline = Instant::now() + Duration::from_secs(60) + opts.scale_interval;
    loop {
        if let Some(first) = load.instances()?.first() {
            return Ok(format!("{}/api/dashboard/fleet.json", first.handler));
        }
        if Instant::now() > deadline {
            return Err(CostBenchError::Other(
                "no instance started within a minute".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A browser showing the fleet view: one request a second (the page's own pace).
async fn open_page(http: reqwest::Client, url: String, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if let Ok(response) = http.get(&url).send().await {
            let _ = response.bytes().await;
        }
    }
}

/// Every instance's request counts: (source, kind, class) → requests, keyed by its metrics URL.
/// An instance that does not answer (stopping) is left out.
async fn scrape(http: &reqwest::Client, instances: &[Endpoints]) -> BTreeMap<String, Counts> {
    let mut out = BTreeMap::new();
    for instance in instances {
        if let Ok(counts) = scrape_one(http, instance).await {
            out.insert(instance.metrics.clone(), counts);
        }
    }
    out
}

/// One instance's counts, from its host's and its handler's `/metrics`.
async fn scrape_one(
    http: &reqwest::Client,
    instance: &Endpoints,
) -> Result<Counts, CostBenchError> {
    let mut counts = Counts::new();
    for url in [
        instance.metrics.clone(),
        format!("{}/metrics", instance.handler),
    ] {
        let text = fetch_text(http, &url)
            .await
            .map_err(CostBenchError::Other)?;
        let samples =
            metrics::parse(&text).map_err(|e| CostBenchError::Other(format!("{url}: {e}")))?;
        let from_handler = url != instance.metrics;
        for s in samples.iter().filter(|s| s.name == REQUESTS_METRIC) {
            let (Some(kind), Some(class)) = (s.label("kind"), s.label("class")) else {
                continue;
            };
            let Some(class) = TransactionClass::ALL
                .into_iter()
                .find(|c| c.as_str() == class)
            else {
                continue;
            };
            let (source, kind) = match (from_handler, kind.strip_prefix("page: ")) {
                (false, _) => ("checkpoint store", kind),
                (true, Some(page_kind)) => ("page", page_kind),
                (true, None) => ("app", kind),
            };
            *counts
                .entry((source.to_string(), kind.to_string(), class))
                .or_default() += s.value;
        }
    }
    Ok(counts)
}

/// What the scale controller printed on exit: `scale: storage requests {kind} {class} {n}`
/// lines, and its lifetime from `scale: ran {seconds} s`.
fn controller_requests(printed: &str) -> (Vec<(KindAndClass, f64)>, f64) {
    let mut requests = Vec::new();
    let mut lifetime = 0.0;
    for line in printed.lines() {
        if let Some(rest) = line.strip_prefix("scale: storage requests ") {
            // The kind may hold spaces; the class and the count are the last two words.
            let mut words: Vec<&str> = rest.split(' ').collect();
            let (Some(n), Some(class)) = (words.pop(), words.pop()) else {
                continue;
            };
            let (Ok(n), Some(class)) = (
                n.parse::<f64>(),
                TransactionClass::ALL
                    .into_iter()
                    .find(|c| c.as_str() == class),
            ) else {
                continue;
            };
            requests.push(((words.join(" "), class), n));
        } else if let Some(rest) = line.strip_prefix("scale: ran ") {
            lifetime = rest.trim_end_matches(" s").parse().unwrap_or(0.0);
        }
    }
    (requests, lifetime)
}

/// The bill of one run: each line per 1M events, per month and in dollars, totals.
fn bill(
    config: CostConfig,
    instances: usize,
    seconds: f64,
    events: u64,
    counts: &Counts,
    prices: &Prices,
) -> CostRun {
    let per_million = |n: f64| {
        if events == 0 {
            0.0
        } else {
            n * 1e6 / events as f64
        }
    };
    let lines: Vec<CostLine> = counts
        .iter()
        .filter(|(_, n)| **n > 0.0)
        .map(|((source, kind, class), &n)| {
            let per_month = n / seconds.max(1e-9) * MONTH_SECONDS;
            CostLine {
                source: source.clone(),
                kind: kind.clone(),
                class: class.as_str(),
                requests: n,
                per_million_events: per_million(n),
                per_month,
                usd_per_month: per_month / 10_000.0 * prices.of(*class),
            }
        })
        .collect();
    CostRun {
        config: config.label(),
        instances,
        most_instances: instances,
        seconds,
        events,
        per_million_events: lines.iter().map(|l| l.per_million_events).sum(),
        usd_per_month: lines.iter().map(|l| l.usd_per_month).sum(),
        page_usd_per_month: lines
            .iter()
            .filter(|l| l.source == "page")
            .map(|l| l.usd_per_month)
            .sum(),
        lines,
    }
}

fn print(runs: &[CostRun], opts: &CostOptions) {
    println!(
        "bench cost: {} homes in real time, {} s measured per configuration after {} s; maxEventBatchSize {}, minEventBatchSize {} (maxWaitTime {:.1} s); prices per 10,000 requests: write ${}, list ${}, read ${}, other ${}",
        opts.workload.homes,
        opts.duration.as_secs(),
        opts.warmup.as_secs(),
        opts.workload.max_batch,
        opts.workload.min_batch,
        opts.workload.max_wait.as_secs_f64(),
        opts.prices.write,
        opts.prices.list,
        opts.prices.read,
        opts.prices.other
    );
    for run in runs {
        println!(
            "\n{} — {} instance(s) at the end, at most {}; {} events in {:.0} s ({:.0}/s)",
            run.config,
            run.instances,
            run.most_instances,
            run.events,
            run.seconds,
            run.events as f64 / run.seconds.max(1e-9)
        );
        println!(
            "  {:<18} {:<16} {:<6} {:>14} {:>16} {:>12}",
            "source", "blob", "class", "per 1M events", "per month", "$ per month"
        );
        for l in &run.lines {
            println!(
                "  {:<18} {:<16} {:<6} {:>14.0} {:>16.0} {:>12.2}",
                l.source, l.kind, l.class, l.per_million_events, l.per_month, l.usd_per_month
            );
        }
        println!(
            "  {:<42} {:>14.0} {:>16} {:>12.2}   (the open page: ${:.2})",
            "total", run.per_million_events, "", run.usd_per_month, run.page_usd_per_month
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRICES: Prices = Prices {
        write: 0.065,
        list: 0.065,
        read: 0.005,
        other: 0.005,
    };

    #[test]
    fn a_bill_scales_the_measured_requests_to_a_million_events_and_a_month() {
        let mut counts = Counts::new();
        counts.insert(
            ("app".into(), "window block".into(), TransactionClass::Write),
            1_000.0,
        );
        counts.insert(
            (
                "checkpoint store".into(),
                "checkpoint".into(),
                TransactionClass::Other,
            ),
            500.0,
        );
        counts.insert(
            ("app".into(), "dead letter".into(), TransactionClass::Free),
            7.0,
        );
        counts.insert(
            ("page".into(), "window block".into(), TransactionClass::List),
            0.0,
        );
        // 100 s, 200,000 events.
        let run = bill(
            CostConfig::HubhostDefaults,
            2,
            100.0,
            200_000,
            &counts,
            &PRICES,
        );
        assert_eq!(run.lines.len(), 3, "lines without requests are left out");
        let write = run.lines.iter().find(|l| l.class == "write").unwrap();
        assert_eq!(write.kind, "window block");
        assert_eq!(write.per_million_events, 5_000.0);
        // 10 a second for 30 days: 25,920,000, at $0.065 per 10,000.
        assert_eq!(write.per_month, 25_920_000.0);
        assert!((write.usd_per_month - 168.48).abs() < 1e-9);
        let free = run.lines.iter().find(|l| l.class == "free").unwrap();
        assert_eq!(free.usd_per_month, 0.0);
        assert!((run.usd_per_month - (168.48 + 12_960_000.0 / 10_000.0 * 0.005)).abs() < 1e-9);
        assert_eq!(run.page_usd_per_month, 0.0);
    }

    #[test]
    fn the_controller_s_lines_give_its_requests_and_lifetime() {
        let printed = "scale: started instance-1 (pid 3)\nscale: storage requests checkpoint list 30\nscale: storage requests scale history write 30\nscale: ran 300.5 s\n";
        let (requests, lifetime) = controller_requests(printed);
        assert_eq!(
            requests,
            vec![
                (("checkpoint".to_string(), TransactionClass::List), 30.0),
                (("scale history".to_string(), TransactionClass::Write), 30.0),
            ]
        );
        assert_eq!(lifetime, 300.5);
    }

    #[test]
    fn configurations_are_named_as_the_flag_takes_them() {
        assert_eq!(CostConfig::parse("host"), Ok(CostConfig::HostTimings));
        assert_eq!(CostConfig::parse("scale"), Ok(CostConfig::Scale));
        assert!(
            CostConfig::parse("azure")
                .unwrap_err()
                .contains("host, hubhost or scale")
        );
    }
}

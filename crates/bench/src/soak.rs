//! `hubhost bench soak`: the reference load for a long time, watched for anything that grows.
//!
//! The same processes as `bench latency` — a `hubhost hub` (with a short retention and small
//! segments, so that retention has segments to delete within the run), a fixed pool of
//! `hubhost emulate` instances each with its `hubhost serve` handler, the fleet simulator at 1×
//! speed, and the fleet view polled as an open page polls it — sampled at the end of every
//! window: the applied latency's and the page's p99 in that window, events sent and applied per
//! second, each process's resident memory (median and peak) and peak open files (read every
//! 2 s), the hub's and the store's bytes on disk. The verdicts compare windows with each other
//! (the run is its own baseline): memory flat after warm-up (the last window's median within
//! 10% of the second's; a process of 50 MiB swings by a quarter within seconds, so a window's
//! peak says more about when it was read than about growth, and is reported beside), open files
//! flat, the hub's disk bounded (segments deleted, the last window no larger than the largest
//! before it plus one segment per partition), p99 within 2× of the first window's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::latency::{APPLIED, open_page};
use super::load::{AGGREGATOR, LoadError, LoadOptions, Pool, RunningLoad, Workload, fetch_text};
use hubhost_metrics::{self as metrics, Buckets, Histogram};
use hubhost_testkit::stats::median_and_range;

#[derive(Debug, Clone)]
pub struct SoakOptions {
    pub workload: Workload,
    pub instances: usize,
    /// Measured time, after `warmup`, cut into windows of `window`.
    pub duration: Duration,
    pub window: Duration,
    pub warmup: Duration,
    /// The hub's retention (events older than this are deleted a whole segment at a time).
    pub retention: Duration,
    /// The size at which the hub closes a partition's segment and starts the next.
    pub segment_mb: u64,
    pub page_poll: Duration,
    pub json: bool,
    pub work_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("{0}")]
    Other(String),
}

/// One process over a window: its resident memory and open files, read every 2 s.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcessSample {
    /// `hub`, the instance's name, or the instance's name and ` handler`.
    pub name: String,
    /// The median of the window's readings: the level the process holds.
    pub rss_median_kib: u64,
    /// The highest reading.
    pub rss_kib: u64,
    /// The highest reading.
    pub open_files: usize,
    /// The highest reading of its threads (a thread that allocates keeps pages of its own in
    /// the allocator, so a step in threads is a step in memory).
    pub threads: usize,
}

/// One window of the run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Window {
    /// Seconds from the start of the measured time to the end of this window.
    pub end_s: f64,
    pub sent_per_s: f64,
    /// Readings applied to window blocks for the first time, per second.
    pub applied_per_s: f64,
    pub applied_p99_s: Option<f64>,
    pub page_p99_s: Option<f64>,
    pub processes: Vec<ProcessSample>,
    pub hub_bytes: u64,
    pub hub_files: usize,
    /// The hub's files present at the previous window's end and gone at this one's (segments
    /// retention deleted).
    pub hub_files_deleted: usize,
    pub store_bytes: u64,
}

/// What the windows say about growth.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdicts {
    /// Each process's median RSS in the last window over its median in the second.
    pub rss_growth: Vec<(String, f64)>,
    /// Every `rss_growth` at most 1.10.
    pub rss_flat: bool,
    /// Each process's peak RSS in the last window over its peak in the second (reported, not
    /// judged: see the module's note).
    pub rss_peak_growth: Vec<(String, f64)>,
    /// Each process's open files in the last window minus those in the second.
    pub open_files_growth: Vec<(String, i64)>,
    pub open_files_flat: bool,
    /// Retention deleted segments during the run, and the hub's bytes in the last window are at
    /// most the largest of the windows before plus one segment per partition.
    pub hub_disk_bounded: bool,
    /// Every window's applied p99 within twice the first window's.
    pub p99_within_2x: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct SoakReport {
    pub instances: usize,
    pub homes: u32,
    pub window_s: f64,
    pub retention_s: f64,
    pub segment_mb: u64,
    pub windows: Vec<Window>,
    pub verdicts: Verdicts,
    /// Sends the simulator saw fail.
    pub failed_sends: u64,
}

/// How often each process's memory and open files are read.
const SAMPLE_EVERY: Duration = Duration::from_secs(2);

fn note(line: impl AsRef<str>) {
    eprintln!("bench soak: {}", line.as_ref());
}

/// Runs the soak and prints its table (or the JSON).
pub async fn run(opts: SoakOptions) -> Result<SoakReport, SoakError> {
    let dir = opts.work_dir.join("soak");
    let hub_args = [
        "--retention-hours".to_string(),
        format!("{}", opts.retention.as_secs_f64() / 3600.0),
        "--segment-mb".to_string(),
        opts.segment_mb.to_string(),
    ];
    let mut load = RunningLoad::start(
        &dir,
        &LoadOptions {
            workload: &opts.workload,
            pool: Pool::Fixed(opts.instances),
            functions: &[AGGREGATOR],
            event_hubs: &[],
            hub_args: &hub_args,
        },
    )
    .await?;
    let handlers: Vec<String> = load.instances()?.into_iter().map(|e| e.handler).collect();
    if handlers.len() != opts.instances {
        return Err(SoakError::Other(format!(
            "{} of {} instances named their handler",
            handlers.len(),
            opts.instances
        )));
    }
    let stop = CancellationToken::new();
    let (page, page_task) = open_page(&handlers[0], opts.page_poll, &stop);
    note(format!(
        "{} instance(s), {} homes in real time: {} s to warm up, then {} s in windows of {} s",
        opts.instances,
        opts.workload.homes,
        opts.warmup.as_secs(),
        opts.duration.as_secs(),
        opts.window.as_secs()
    ));
    tokio::time::sleep(opts.warmup).await;

    let http = reqwest::Client::new();
    let mut previous = Mark::take(&http, &load, &handlers, &page).await?;
    let mut hub_listing = files_under(&dir.join("hub"));
    let started = Instant::now();
    let mut windows = Vec::new();
    while started.elapsed() < opts.duration {
        let window_end = started.elapsed() + opts.window.min(opts.duration - started.elapsed());
        // Memory and descriptors rise and fall with the app's minute windows: each window
        // keeps every reading taken every SAMPLE_EVERY, not one moment's value.
        let mut readings: Vec<(String, Vec<u64>, usize, usize)> = Vec::new();
        loop {
            for (name, rss_kib, open_files, threads) in load.processes().iter().map(read_process) {
                match readings.iter_mut().find(|r| r.0 == name) {
                    Some(r) => {
                        r.1.push(rss_kib);
                        r.2 = r.2.max(open_files);
                        r.3 = r.3.max(threads);
                    }
                    None => readings.push((name, vec![rss_kib], open_files, threads)),
                }
            }
            let left = window_end.saturating_sub(started.elapsed());
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(SAMPLE_EVERY.min(left)).await;
        }
        let mark = Mark::take(&http, &load, &handlers, &page).await?;
        let seconds = mark.at.duration_since(previous.at).as_secs_f64();
        let applied = mark.applied.since(&previous.applied);
        let listing = files_under(&dir.join("hub"));
        let hub_files_deleted = hub_listing
            .keys()
            .filter(|f| !listing.contains_key(*f))
            .count();
        hub_listing = listing;
        windows.push(Window {
            end_s: started.elapsed().as_secs_f64(),
            sent_per_s: (mark.sent - previous.sent) as f64 / seconds,
            applied_per_s: applied.count() as f64 / seconds,
            applied_p99_s: applied.quantile(0.99),
            page_p99_s: mark.page.since(&previous.page).quantile(0.99),
            processes: readings
                .into_iter()
                .map(|(name, rss, open_files, threads)| {
                    ProcessSample::of(name, rss, open_files, threads)
                })
                .collect(),
            hub_bytes: hub_listing.values().sum(),
            hub_files: hub_listing.len(),
            hub_files_deleted,
            store_bytes: files_under(&dir.join("store")).values().sum(),
        });
        note(format!(
            "{:.0} of {} s",
            started.elapsed().as_secs_f64(),
            opts.duration.as_secs()
        ));
        previous = mark;
    }
    stop.cancel();
    let _ = page_task.await;
    let (summary, _) = load.finish().await?;
    let report = SoakReport {
        instances: opts.instances,
        homes: opts.workload.homes,
        window_s: opts.window.as_secs_f64(),
        retention_s: opts.retention.as_secs_f64(),
        segment_mb: opts.segment_mb,
        verdicts: verdicts(&windows, opts.workload.partitions, opts.segment_mb),
        windows,
        failed_sends: summary.failed,
    };
    super::load::print_runs(std::slice::from_ref(&report), opts.json, || print(&report))
        .map_err(SoakError::Other)?;
    Ok(report)
}

/// The counters at one moment.
struct Mark {
    at: Instant,
    sent: u64,
    applied: Buckets,
    page: Buckets,
}

impl Mark {
    async fn take(
        http: &reqwest::Client,
        load: &RunningLoad,
        handlers: &[String],
        page: &Histogram,
    ) -> Result<Self, SoakError> {
        let mut applied = Buckets::default();
        for handler in handlers {
            let url = format!("{handler}/metrics");
            let text = fetch_text(http, &url).await.map_err(SoakError::Other)?;
            let samples =
                metrics::parse(&text).map_err(|e| SoakError::Other(format!("{url}: {e}")))?;
            applied.add(&Buckets::scrape(&samples, APPLIED, &[]));
        }
        Ok(Mark {
            at: Instant::now(),
            sent: load.sent().await?,
            applied,
            page: page.buckets(),
        })
    }
}

/// A process's name, resident KiB, open files and threads now.
fn read_process((name, pid): &(String, u32)) -> (String, u64, usize, usize) {
    use hubhost_testkit::status_number;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    (
        name.clone(),
        status_number(&status, "VmRSS").unwrap_or(0),
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0),
        status_number(&status, "Threads").unwrap_or(0) as usize,
    )
}

impl ProcessSample {
    /// A window's summary of one process's readings.
    fn of(name: String, rss_kib: Vec<u64>, open_files: usize, threads: usize) -> Self {
        let (median, _, peak) = median_and_range(rss_kib.into_iter().map(|kib| kib as f64));
        ProcessSample {
            name,
            rss_median_kib: median as u64,
            rss_kib: peak as u64,
            open_files,
            threads,
        }
    }
}

/// The files under `dir`, each with its size in bytes.
fn files_under(dir: &Path) -> std::collections::BTreeMap<PathBuf, u64> {
    let mut files = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        match entry.metadata() {
            Ok(m) if m.is_dir() => files.extend(files_under(&entry.path())),
            Ok(m) => {
                files.insert(entry.path(), m.len());
            }
            Err(_) => {}
        }
    }
    files
}

/// The verdicts from the windows (pure: the run's figures in, the judgement out).
pub fn verdicts(windows: &[Window], partitions: u32, segment_mb: u64) -> Verdicts {
    let Some(last) = windows.last() else {
        return Verdicts {
            rss_growth: Vec::new(),
            rss_flat: false,
            rss_peak_growth: Vec::new(),
            open_files_growth: Vec::new(),
            open_files_flat: false,
            hub_disk_bounded: false,
            p99_within_2x: false,
        };
    };
    // The first window may still be warming up; growth counts from the second.
    let second = windows.get(1).unwrap_or(last);
    let find = |w: &Window, name: &str| w.processes.iter().find(|p| p.name == name).cloned();
    let pairs: Vec<(ProcessSample, ProcessSample)> = last
        .processes
        .iter()
        .filter_map(|p| Some((find(second, &p.name)?, p.clone())))
        .collect();
    let growth = |kib: fn(&ProcessSample) -> u64| -> Vec<(String, f64)> {
        pairs
            .iter()
            .map(|(a, b)| (b.name.clone(), kib(b) as f64 / kib(a).max(1) as f64))
            .collect()
    };
    let rss_growth = growth(|p| p.rss_median_kib);
    let rss_peak_growth = growth(|p| p.rss_kib);
    let open_files_growth: Vec<(String, i64)> = pairs
        .iter()
        .map(|(a, b)| (b.name.clone(), b.open_files as i64 - a.open_files as i64))
        .collect();
    let segment_bytes = segment_mb * 1024 * 1024;
    let before_last = &windows[..windows.len() - 1];
    let largest_before = before_last.iter().map(|w| w.hub_bytes).max().unwrap_or(0);
    let deleted = windows.iter().any(|w| w.hub_files_deleted > 0);
    let first_p99 = windows[0].applied_p99_s;
    Verdicts {
        rss_flat: !rss_growth.is_empty() && rss_growth.iter().all(|(_, g)| *g <= 1.10),
        rss_growth,
        rss_peak_growth,
        // A few descriptors come and go (connections, files being written).
        open_files_flat: !open_files_growth.is_empty()
            && open_files_growth.iter().all(|(_, g)| *g <= 8),
        open_files_growth,
        hub_disk_bounded: deleted
            && (before_last.is_empty()
                || last.hub_bytes <= largest_before + partitions as u64 * segment_bytes),
        p99_within_2x: match first_p99 {
            Some(first) => windows
                .iter()
                .all(|w| w.applied_p99_s.is_none_or(|p| p <= 2.0 * first)),
            None => false,
        },
    }
}

fn ms(seconds: Option<f64>) -> String {
    match seconds {
        Some(s) if s.is_infinite() => "> 128 s".into(),
        Some(s) => format!("{:.0} ms", s * 1000.0),
        None => "–".into(),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

fn print(report: &SoakReport) {
    println!(
        "bench soak: {} homes in real time through {} instance(s); windows of {:.0} s; hub retention {:.0} s, segments of {} MB",
        report.homes, report.instances, report.window_s, report.retention_s, report.segment_mb
    );
    let names: Vec<String> = report
        .windows
        .first()
        .map(|w| w.processes.iter().map(|p| p.name.clone()).collect())
        .unwrap_or_default();
    println!(
        "{:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>13} {:>9}   RSS MiB median (peak) / open files / threads: {}",
        "end s",
        "sent/s",
        "applied/s",
        "p99",
        "page p99",
        "hub MiB",
        "hub files (−)",
        "store MiB",
        names.join(", ")
    );
    for w in &report.windows {
        let processes: Vec<String> = w
            .processes
            .iter()
            .map(|p| {
                format!(
                    "{:.1} ({:.1})/{}/{}",
                    p.rss_median_kib as f64 / 1024.0,
                    p.rss_kib as f64 / 1024.0,
                    p.open_files,
                    p.threads
                )
            })
            .collect();
        println!(
            "{:>7.0} {:>9.0} {:>9.0} {:>9} {:>9} {:>9} {:>13} {:>9}   {}",
            w.end_s,
            w.sent_per_s,
            w.applied_per_s,
            ms(w.applied_p99_s),
            ms(w.page_p99_s),
            mib(w.hub_bytes),
            format!("{} (−{})", w.hub_files, w.hub_files_deleted),
            mib(w.store_bytes),
            processes.join("  ")
        );
    }
    let v = &report.verdicts;
    let worst = |growth: &[(String, f64)]| {
        growth
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(n, g)| format!("{n} {:+.1}%", (g - 1.0) * 100.0))
            .unwrap_or_else(|| "–".into())
    };
    let worst_files = v
        .open_files_growth
        .iter()
        .max_by_key(|(_, g)| *g)
        .map(|(n, g)| format!("{n} {g:+}"))
        .unwrap_or_else(|| "–".into());
    let yes = |b: bool| if b { "yes" } else { "NO" };
    println!(
        "RSS flat (last window's median ≤ second's + 10%): {} (largest change: {}; of the peaks: {}); open files flat: {} (largest change: {worst_files}); hub disk bounded by retention: {}; p99 within 2× of the first window's: {}; failed sends: {}",
        yes(v.rss_flat),
        worst(&v.rss_growth),
        worst(&v.rss_peak_growth),
        yes(v.open_files_flat),
        yes(v.hub_disk_bounded),
        yes(v.p99_within_2x),
        report.failed_sends
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(rss: u64, files: usize, hub_bytes: u64, deleted: usize, p99: f64) -> Window {
        Window {
            end_s: 0.0,
            sent_per_s: 1.0,
            applied_per_s: 1.0,
            applied_p99_s: Some(p99),
            page_p99_s: None,
            processes: vec![ProcessSample {
                name: "hub".into(),
                rss_median_kib: rss,
                rss_kib: rss + 30,
                open_files: files,
                threads: 4,
            }],
            hub_bytes,
            hub_files: 10,
            hub_files_deleted: deleted,
            store_bytes: 0,
        }
    }

    #[test]
    fn a_window_keeps_the_median_and_the_peak_of_its_readings() {
        let p = ProcessSample::of("hub".into(), vec![50, 61, 47, 48, 49], 7, 5);
        assert_eq!(
            (p.rss_median_kib, p.rss_kib, p.open_files, p.threads),
            (49, 61, 7, 5)
        );
    }

    #[test]
    fn growth_is_judged_between_windows() {
        const MB: u64 = 1024 * 1024;
        let steady = [
            window(100, 20, 10 * MB, 0, 0.5),
            window(200, 30, 20 * MB, 0, 0.6),
            window(210, 31, 20 * MB, 5, 0.9),
            window(215, 32, 21 * MB, 3, 0.7),
        ];
        let v = verdicts(&steady, 2, 1);
        assert!(v.rss_flat && v.open_files_flat && v.hub_disk_bounded && v.p99_within_2x);
        assert_eq!(v.rss_growth, vec![("hub".to_string(), 1.075)]);
        assert_eq!(v.rss_peak_growth, vec![("hub".to_string(), 245.0 / 230.0)]);

        // A peak read at a bad moment is reported, not judged; the level is.
        let mut swinging = steady.clone();
        swinging[3].processes[0].rss_kib = 300;
        let v = verdicts(&swinging, 2, 1);
        assert!(v.rss_flat);
        assert_eq!(v.rss_peak_growth, vec![("hub".to_string(), 300.0 / 230.0)]);

        let mut leaking = steady.clone();
        leaking[3] = window(260, 60, 40 * MB, 3, 1.1);
        let v = verdicts(&leaking, 2, 1);
        assert!(!v.rss_flat && !v.open_files_flat && !v.hub_disk_bounded && !v.p99_within_2x);

        // Nothing deleted: the disk is not shown bounded, however flat it looks.
        let mut kept = steady.clone();
        kept[2].hub_files_deleted = 0;
        kept[3].hub_files_deleted = 0;
        assert!(!verdicts(&kept, 2, 1).hub_disk_bounded);
    }
}

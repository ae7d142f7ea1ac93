//! Prometheus text exposition (format 0.0.4): what the `/metrics` endpoints write, and a small
//! reader of the same format for the benchmarks and tests that scrape them.
//!
//! Writing by hand keeps the dependency list short; the format is a few lines per family
//! (`# HELP`, `# TYPE`, then `name{label="value"} number`), with label values escaped.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// The content type Prometheus expects for this format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// A latency histogram with fixed buckets, updated without locks.
#[derive(Debug)]
pub struct Histogram {
    /// Upper bounds in seconds, ascending; `+Inf` is implied.
    bounds: &'static [f64],
    /// Observations at or below each bound (not cumulative), then the ones above every bound.
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
}

/// Bounds for request handling times: 1 ms to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets per doubling of [`fine_latency_buckets`]: each bound is 2^(1/8) ≈ 9% above the last,
/// so a percentile read from them is within 9% of the true value.
const FINE_STEPS_PER_DOUBLING: i32 = 8;

/// Bounds fine enough to read percentiles from (p99, p99.9): 2^(1/8) apart from 1/1024 s
/// (~1 ms) to 128 s, 137 buckets. For end-to-end latencies, where the tail is the question.
pub fn fine_latency_buckets() -> &'static [f64] {
    static BOUNDS: std::sync::LazyLock<Vec<f64>> = std::sync::LazyLock::new(|| {
        let (lowest, highest) = (-10 * FINE_STEPS_PER_DOUBLING, 7 * FINE_STEPS_PER_DOUBLING);
        (lowest..=highest)
            .map(|step| 2f64.powf(f64::from(step) / f64::from(FINE_STEPS_PER_DOUBLING)))
            .collect()
    });
    &BOUNDS
}

impl Histogram {
    /// An empty histogram with these bucket bounds (seconds).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Counts one observation.
    pub fn observe(&self, elapsed: std::time::Duration) {
        let seconds = elapsed.as_secs_f64();
        let bucket = self.bounds.partition_point(|&b| b < seconds);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The counts so far, cumulative per upper bound, as a scrape of the page would read them.
    pub fn buckets(&self) -> Buckets {
        let mut cumulative = 0.0;
        let bounds = self.bounds.iter().copied().chain([f64::INFINITY]);
        Buckets(
            bounds
                .zip(&self.counts)
                .map(|(bound, count)| {
                    cumulative += count.load(Ordering::Relaxed) as f64;
                    (bound, cumulative)
                })
                .collect(),
        )
    }
}

/// A histogram's cumulative bucket counts — scraped from one or more pages, or read from a
/// [`Histogram`] — from which percentiles are read. Subtracting an earlier reading leaves what
/// was observed in between.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets(
    /// (upper bound, observations at or below it), ascending; the last bound is `+Inf`.
    pub Vec<(f64, f64)>,
);

impl Buckets {
    /// The `{name}_bucket` samples whose labels include every pair in `matching`, summed per
    /// bound: several series (functions, instances) read as one histogram.
    pub fn scrape(samples: &[Sample], name: &str, matching: &[(&str, &str)]) -> Buckets {
        let bucket = format!("{name}_bucket");
        let mut by_bound: Vec<(f64, f64)> = Vec::new();
        for s in samples
            .iter()
            .filter(|s| s.name == bucket && matching.iter().all(|(l, v)| s.label(l) == Some(*v)))
        {
            let Some(bound) = s.label("le").and_then(|le| match le {
                "+Inf" => Some(f64::INFINITY),
                le => le.parse::<f64>().ok(),
            }) else {
                continue;
            };
            match by_bound.iter_mut().find(|(b, _)| *b == bound) {
                Some((_, n)) => *n += s.value,
                None => by_bound.push((bound, s.value)),
            }
        }
        by_bound.sort_by(|a, b| a.0.total_cmp(&b.0));
        Buckets(by_bound)
    }

    /// Adds another reading with the same bounds (another instance's page).
    pub fn add(&mut self, other: &Buckets) {
        if self.0.is_empty() {
            self.0 = other.0.clone();
            return;
        }
        for ((_, n), (_, theirs)) in self.0.iter_mut().zip(&other.0) {
            *n += theirs;
        }
    }

    /// What was observed after `earlier` (a reading of the same series).
    pub fn since(&self, earlier: &Buckets) -> Buckets {
        Buckets(
            self.0
                .iter()
                .map(|&(bound, n)| {
                    let before = earlier
                        .0
                        .iter()
                        .find(|(b, _)| *b == bound)
                        .map_or(0.0, |(_, n)| *n);
                    (bound, (n - before).max(0.0))
                })
                .collect(),
        )
    }

    /// Observations counted.
    pub fn count(&self) -> u64 {
        self.0.last().map_or(0, |(_, n)| *n as u64)
    }

    /// The upper bound of the bucket holding the `q`-quantile (0 < q ≤ 1) — the true value is
    /// at most that, and above the bucket's lower bound; `None` without observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The rank of the q-quantile among `total` sorted observations (1-based, nearest rank).
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total) as f64;
        self.0.iter().find(|(_, n)| *n >= rank).map(|(b, _)| *b)
    }

    /// The upper bound of the highest bucket with an observation.
    pub fn max(&self) -> Option<f64> {
        self.quantile(1.0)
    }
}

/// A metrics page under construction; families are written one after the other.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// An empty page.
    pub fn new() -> Self {
        Self::default()
    }

    /// One family: its help line, its type, and one sample per label set.
    pub fn family<'a>(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        samples: impl IntoIterator<Item = (Vec<(&'a str, &'a str)>, f64)>,
    ) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        self.header(name, help, kind);
        for (labels, value) in samples {
            self.sample(name, &labels, value);
        }
    }

    /// One histogram family: per label set, cumulative `_bucket{le=…}` samples, `_sum` and
    /// `_count`.
    pub fn histogram<'a>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (Vec<(&'a str, &'a str)>, &'a Histogram)>,
    ) {
        self.header(name, help, "histogram");
        for (labels, histogram) in series {
            let mut cumulative = 0;
            let bounds = histogram.bounds.iter().map(|b| b.to_string());
            for (bound, count) in bounds.chain(["+Inf".to_string()]).zip(&histogram.counts) {
                cumulative += count.load(Ordering::Relaxed);
                let mut with_le = labels.clone();
                with_le.push(("le", bound.as_str()));
                self.sample(&format!("{name}_bucket"), &with_le, cumulative as f64);
            }
            let sum = histogram.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
            self.sample(&format!("{name}_sum"), &labels, sum);
            self.sample(&format!("{name}_count"), &labels, cumulative as f64);
        }
    }

    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.text, "# HELP {name} {}", help.replace('\n', " "));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{label}=\"{}\"", escape(value));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    /// The page's text.
    pub fn finish(self) -> String {
        self.text
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One sample line of a scraped page.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The family's name.
    pub name: String,
    /// Its labels, in order.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(l, _)| l == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Where a page stops being Prometheus text.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {problem}: {text:?}")]
pub struct ParseError {
    /// The line (1-based).
    pub line: usize,
    /// What is wrong.
    pub problem: &'static str,
    /// The line's text.
    pub text: String,
}

/// Reads a page in the text format: every sample, comments skipped. Strict enough to catch a
/// malformed page (unterminated labels, a value that is not a number).
pub fn parse(page: &str) -> Result<Vec<Sample>, ParseError> {
    let mut samples = Vec::new();
    for (i, line) in page.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |problem| ParseError {
            line: i + 1,
            problem,
            text: line.to_string(),
        };
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .ok_or_else(|| bad("no value"))?;
        let name = &line[..name_end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            return Err(bad("bad metric name"));
        }
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(inner) = rest.strip_prefix('{') {
            let (parsed, after) = parse_labels(inner).ok_or_else(|| bad("bad labels"))?;
            labels = parsed;
            rest = after;
        }
        let mut fields = rest.split_whitespace();
        let value = fields.next().ok_or_else(|| bad("no value"))?;
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| bad("the value is not a number"))?,
        };
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(samples)
}

/// `a="x",b="y"}` → the labels and what follows the closing brace.
fn parse_labels(mut text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start();
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = text.find('=')?;
        let label = text[..eq].trim().to_string();
        let mut chars = text[eq + 1..].trim_start().char_indices();
        let start = text.len() - chars.as_str().len();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => {
                    end = Some(start + i + 1);
                    break;
                }
                other => value.push(other),
            }
        }
        labels.push((label, value));
        text = text[end?..].trim_start();
        text = text.strip_prefix(',').unwrap_or(text);
    }
}

/// The sum of a metric's samples whose labels include every pair in `matching`.
pub fn sum(samples: &[Sample], name: &str, matching: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && matching.iter().all(|(l, v)| s.label(l) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_count_every_observation() {
        let h = Histogram::new(&[0.01, 0.1]);
        for ms in [1, 5, 50, 500] {
            h.observe(std::time::Duration::from_millis(ms));
        }
        let mut page = Exposition::new();
        page.histogram("lat_seconds", "Latency.", [(vec![("function", "F")], &h)]);
        let samples = parse(&page.finish()).unwrap();
        let bucket = |le: &str| sum(&samples, "lat_seconds_bucket", &[("le", le)]);
        assert_eq!(
            (bucket("0.01"), bucket("0.1"), bucket("+Inf")),
            (2.0, 3.0, 4.0)
        );
        assert_eq!(
            sum(&samples, "lat_seconds_count", &[("function", "F")]),
            4.0
        );
        assert!((sum(&samples, "lat_seconds_sum", &[]) - 0.556).abs() < 1e-9);
        assert_eq!(h.count(), 4);
    }

    #[test]
    fn fine_buckets_are_ascending_and_9_percent_apart() {
        let bounds = fine_latency_buckets();
        assert_eq!(bounds.len(), 137);
        assert!((bounds[0] - 1.0 / 1024.0).abs() < 1e-12);
        assert!((bounds[bounds.len() - 1] - 128.0).abs() < 1e-9);
        for pair in bounds.windows(2) {
            let ratio = pair[1] / pair[0];
            assert!((ratio - 2f64.powf(0.125)).abs() < 1e-9, "{pair:?}");
        }
    }

    #[test]
    fn percentiles_come_from_the_bucket_holding_their_rank() {
        let h = Histogram::new(&[0.1, 0.2, 0.5, 1.0]);
        // 90 fast, 9 at 150 ms, one at 700 ms.
        for _ in 0..90 {
            h.observe(std::time::Duration::from_millis(50));
        }
        for _ in 0..9 {
            h.observe(std::time::Duration::from_millis(150));
        }
        h.observe(std::time::Duration::from_millis(700));
        let b = h.buckets();
        assert_eq!(b.count(), 100);
        assert_eq!(b.quantile(0.5), Some(0.1));
        assert_eq!(b.quantile(0.9), Some(0.1));
        assert_eq!(b.quantile(0.91), Some(0.2));
        assert_eq!(b.quantile(0.99), Some(0.2));
        assert_eq!(b.quantile(0.999), Some(1.0));
        assert_eq!(b.max(), Some(1.0));
        assert_eq!(Buckets::default().quantile(0.5), None);
        // Beyond every bound: +Inf, not a made-up number.
        h.observe(std::time::Duration::from_secs(5));
        assert_eq!(h.buckets().max(), Some(f64::INFINITY));
    }

    #[test]
    fn scraped_buckets_sum_over_series_and_subtract_an_earlier_scrape() {
        let (a, b) = (Histogram::new(&[0.1, 1.0]), Histogram::new(&[0.1, 1.0]));
        a.observe(std::time::Duration::from_millis(20));
        let page_of = |a: &Histogram, b: &Histogram| {
            let mut page = Exposition::new();
            page.histogram(
                "lat_seconds",
                "Latency.",
                [(vec![("function", "A")], a), (vec![("function", "B")], b)],
            );
            parse(&page.finish()).unwrap()
        };
        let before = Buckets::scrape(&page_of(&a, &b), "lat_seconds", &[]);
        assert_eq!(before.count(), 1);
        b.observe(std::time::Duration::from_millis(500));
        b.observe(std::time::Duration::from_millis(2000));
        let after = Buckets::scrape(&page_of(&a, &b), "lat_seconds", &[]);
        assert_eq!(
            after,
            Buckets(vec![(0.1, 1.0), (1.0, 2.0), (f64::INFINITY, 3.0)])
        );
        let between = after.since(&before);
        assert_eq!(between.count(), 2);
        assert_eq!(between.quantile(0.5), Some(1.0));
        let only_b = Buckets::scrape(&page_of(&a, &b), "lat_seconds", &[("function", "B")]);
        assert_eq!(only_b.count(), 2);
        let mut summed = before.clone();
        summed.add(&only_b);
        assert_eq!(summed.count(), 3);
    }

    #[test]
    fn a_written_page_reads_back_with_escaped_labels() {
        let mut page = Exposition::new();
        page.family(
            "hubhost_events_processed_total",
            Kind::Counter,
            "Events handed to the handler.",
            [
                (vec![("function", "A"), ("group", "$Default")], 12.0),
                (vec![("function", "say \"hi\"\\\n"), ("group", "g")], 3.0),
            ],
        );
        page.family("hubhost_up", Kind::Gauge, "Up.", [(vec![], 1.0)]);
        let text = page.finish();
        assert!(text.contains("# TYPE hubhost_events_processed_total counter\n"));
        let samples = parse(&text).unwrap();
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[1].label("function"), Some("say \"hi\"\\\n"));
        assert_eq!(sum(&samples, "hubhost_events_processed_total", &[]), 15.0);
        assert_eq!(
            sum(
                &samples,
                "hubhost_events_processed_total",
                &[("group", "$Default")]
            ),
            12.0
        );
        assert_eq!(sum(&samples, "hubhost_up", &[]), 1.0);
    }

    #[test]
    fn a_malformed_page_is_an_error_naming_the_line() {
        for (page, line) in [
            ("ok 1\nbroken{a=\"x\" 2\n", 2),
            ("x{a=\"1\"} one\n", 1),
            ("# c\n\nbad-name 1\n", 3),
            ("lonely\n", 1),
        ] {
            let err = parse(page).unwrap_err();
            assert_eq!(err.line, line, "{page:?}: {err}");
        }
    }
}

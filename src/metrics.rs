//! Prometheus text exposition (format 0.0.4): what the `/metrics` endpoints write, and a small
//! reader of the same format for the benchmarks and tests that scrape them.
//!
//! Writing by hand keeps the dependency list short; the format is a few lines per family
//! (`# HELP`, `# TYPE`, then `name{label="value"} number`), with label values escaped.

use std::fmt::Write;

/// The content type Prometheus expects for this format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// A metrics page under construction; families are written one after the other.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
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
        let _ = writeln!(self.text, "# HELP {name} {}", help.replace('\n', " "));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
        for (labels, value) in samples {
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
    }

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
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(l, _)| l == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("line {line}: {problem}: {text:?}")]
pub struct ParseError {
    pub line: usize,
    pub problem: &'static str,
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

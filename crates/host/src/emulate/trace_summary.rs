//! `hubhost emulate --traces`: what the spans of the last few seconds say, in a line per
//! function — invocations, failures, the median and slowest invocation with its trace — so that
//! a local run shows its traces without a tracing backend. Pure: spans in, lines out.

use std::collections::BTreeMap;

use hubhost_telemetry::collector::CollectedSpan;

/// One function's invocations in a window.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionSummary {
    pub function: String,
    pub invocations: usize,
    pub failed: usize,
    pub median_ms: f64,
    pub slowest_ms: f64,
    /// The slowest invocation's trace.
    pub slowest_trace: String,
}

/// The functions' invocation spans among `spans` (a span named after the function it carries
/// in `faas.name`, as the framework names them), by function.
pub fn summarize(spans: &[CollectedSpan]) -> Vec<FunctionSummary> {
    let mut by_function: BTreeMap<&str, Vec<&CollectedSpan>> = BTreeMap::new();
    for span in spans {
        let function = span.attributes.get("faas.name").and_then(|v| v.as_str());
        if function == Some(span.name.as_str()) {
            by_function
                .entry(span.name.as_str())
                .or_default()
                .push(span);
        }
    }
    by_function
        .into_iter()
        .map(|(function, spans)| {
            let ms = |s: &CollectedSpan| {
                s.end_unix_nanos.saturating_sub(s.start_unix_nanos) as f64 / 1e6
            };
            let mut durations: Vec<f64> = spans.iter().map(|s| ms(s)).collect();
            durations.sort_by(f64::total_cmp);
            let slowest = spans
                .iter()
                .max_by(|a, b| ms(a).total_cmp(&ms(b)))
                .expect("at least one span");
            FunctionSummary {
                function: function.to_string(),
                invocations: spans.len(),
                failed: spans.iter().filter(|s| s.error).count(),
                median_ms: durations[durations.len() / 2],
                slowest_ms: ms(slowest),
                slowest_trace: slowest.trace_id.clone(),
            }
        })
        .collect()
}

/// The line printed for a window.
pub fn line(summaries: &[FunctionSummary], window_seconds: u64) -> String {
    if summaries.is_empty() {
        return format!("traces (last {window_seconds} s): no invocation");
    }
    let parts: Vec<String> = summaries
        .iter()
        .map(|s| {
            format!(
                "{} {} invocations, {} failed, median {:.1} ms, slowest {:.1} ms (trace {})",
                s.function, s.invocations, s.failed, s.median_ms, s.slowest_ms, s.slowest_trace
            )
        })
        .collect();
    format!("traces (last {window_seconds} s): {}", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(
        name: &str,
        function: Option<&str>,
        ms: u64,
        error: bool,
        trace: &str,
    ) -> CollectedSpan {
        CollectedSpan {
            service: "app".into(),
            name: name.into(),
            kind: 5,
            trace_id: trace.into(),
            span_id: "01".repeat(8),
            parent_span_id: None,
            links: Vec::new(),
            start_unix_nanos: 1_000_000,
            end_unix_nanos: 1_000_000 + ms * 1_000_000,
            attributes: function
                .map(|f| [("faas.name".to_string(), serde_json::Value::from(f))].into())
                .unwrap_or_default(),
            error,
        }
    }

    #[test]
    fn a_line_per_function_from_its_own_spans_only() {
        let spans = [
            span("Aggregate", Some("Aggregate"), 4, false, "a"),
            span("Aggregate", Some("Aggregate"), 10, true, "b"),
            span("Aggregate", Some("Aggregate"), 6, false, "c"),
            // The host's spans name the function too, but are not the function's.
            span("process sensors", Some("Aggregate"), 50, false, "d"),
            span("create sensors", None, 1, false, "e"),
        ];
        let summaries = summarize(&spans);
        assert_eq!(
            summaries,
            [FunctionSummary {
                function: "Aggregate".into(),
                invocations: 3,
                failed: 1,
                median_ms: 6.0,
                slowest_ms: 10.0,
                slowest_trace: "b".into(),
            }]
        );
        assert_eq!(
            line(&summaries, 10),
            "traces (last 10 s): Aggregate 3 invocations, 1 failed, median 6.0 ms, slowest 10.0 ms (trace b)"
        );
        assert_eq!(line(&[], 10), "traces (last 10 s): no invocation");
    }
}

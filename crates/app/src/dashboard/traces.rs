//! The page's trace view, where spans are at hand (`hubhost demo` exports its own to a
//! collector in its process): for each recent alarm, the trace that produced it — the reading
//! that raised it, the host's delivery, the function, the alarm's send and enqueue — as hops
//! with their start and duration, for a small waterfall.
//!
//! [`alarm_trace`] builds one alarm's view from spans and is pure; [`recent`] reads the alarms
//! hub through the explorer and the spans from the collector.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;

use hubhost_telemetry::TraceParent;
use hubhost_telemetry::collector::{CollectedSpan, Collector};

use super::explorer::{EventShown, Explorer, ExplorerError};

/// Alarms shown, newest first.
pub const ALARMS_SHOWN: usize = 8;

/// Where the trace view reads.
#[derive(Debug, Clone)]
pub struct TraceSources {
    /// The spans of this process (the demo's).
    pub collector: Arc<Collector>,
    /// The hub the alarms are forwarded to.
    pub alarms_hub: String,
}

/// One alarm and the trace that produced it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AlarmTrace {
    pub home: String,
    pub kind: String,
    pub trace_id: String,
    /// When the reading was sent, as Unix milliseconds: every hop's start counts from it.
    pub origin_unix_ms: f64,
    pub hops: Vec<Hop>,
}

/// One step from the reading's send to the alarm's enqueue.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hop {
    /// What happened, in words.
    pub label: String,
    /// Who did it (the span's `service.name`; `event hub` for an enqueue).
    pub service: String,
    /// Milliseconds after the origin.
    pub start_ms: f64,
    pub duration_ms: f64,
}

/// An alarm event as read from the alarms hub.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmEvent {
    pub home: String,
    pub kind: String,
    /// Its `Diagnostic-Id`: the span that sent it.
    pub sent_by: TraceParent,
    pub enqueued: Option<DateTime<Utc>>,
}

impl AlarmEvent {
    /// The alarm in an event of the alarms hub, when it carries a trace context.
    pub fn of(event: &EventShown) -> Option<AlarmEvent> {
        let sent_by = TraceParent::of_event(&event.properties)?;
        let body: serde_json::Value = serde_json::from_str(&event.body.shown).ok()?;
        Some(AlarmEvent {
            home: body["homeId"].as_str()?.to_string(),
            kind: body["kind"].as_str().unwrap_or("alarm").to_string(),
            sent_by,
            enqueued: event.enqueued_time,
        })
    }
}

/// What one of the host's or the function's spans did, in the page's words.
fn label(span: &CollectedSpan) -> String {
    let function = span.attributes.get("faas.name").and_then(|v| v.as_str());
    match (span.kind, span.name.as_str(), function) {
        (4, name, _) => format!("{name} (output)"),
        (5, name, Some(function)) if name == function => format!("function {name}"),
        (5, name, function) => format!("{name}: delivered to {}", function.unwrap_or("?")),
        (3, name, _) => format!("{name}: request to the handler"),
        (_, name, _) => name.to_string(),
    }
}

/// Whether a span is one of the hops hubhost makes: the host's delivery and request, the
/// function's invocation (each names the function), or an output's send.
fn is_hop(span: &CollectedSpan) -> bool {
    span.attributes.contains_key("faas.name")
        || span
            .attributes
            .get("messaging.operation.type")
            .and_then(|v| v.as_str())
            == Some("send")
}

/// The hops that led to the alarm: from the span that sent it (its `Diagnostic-Id`) up
/// through its parents — the function, the host's request and delivery — leaving out other
/// functions that processed the same events in the same trace. When the sending span is not
/// among them (the handler stamped the alarm itself), every hop of the trace.
fn chain_to<'a>(alarm: &AlarmEvent, trace: &'a [CollectedSpan]) -> Vec<&'a CollectedSpan> {
    let by_id: std::collections::HashMap<&str, &CollectedSpan> = trace
        .iter()
        .filter(|s| is_hop(s))
        .map(|s| (s.span_id.as_str(), s))
        .collect();
    let mut chain = Vec::new();
    let mut next = by_id.get(alarm.sent_by.span_id_hex().as_str()).copied();
    while let Some(span) = next {
        if chain.len() > by_id.len() {
            break; // a parent loop in hostile data
        }
        chain.push(span);
        next = span
            .parent_span_id
            .as_deref()
            .and_then(|parent| by_id.get(parent).copied());
    }
    if chain.is_empty() {
        chain = by_id.into_values().collect();
    }
    chain
}

/// One alarm's view: `trace` is every span of the trace its `Diagnostic-Id` names, `linked`
/// the spans the trace's spans link to (the producers of the events they processed). The
/// reading shown is the linked producer span of the alarm's home (`hubhost.home_id`), else
/// the first linked one; a producer's own spans beside it (its application's, its SDK's send)
/// are left out. `None` when none of the trace's spans is known (yet, or any more).
pub fn alarm_trace(
    alarm: &AlarmEvent,
    trace: &[CollectedSpan],
    linked: &[CollectedSpan],
) -> Option<AlarmTrace> {
    let hops = chain_to(alarm, trace);
    if hops.is_empty() {
        return None;
    }
    let targets: std::collections::HashSet<(&str, &str)> = hops
        .iter()
        .flat_map(|s| &s.links)
        .map(|(t, s)| (t.as_str(), s.as_str()))
        .collect();
    let producers: Vec<&CollectedSpan> = trace
        .iter()
        .chain(linked)
        .filter(|s| targets.contains(&(s.trace_id.as_str(), s.span_id.as_str())))
        .collect();
    let reading = producers
        .iter()
        .find(|s| {
            s.attributes.get("hubhost.home_id").and_then(|v| v.as_str())
                == Some(alarm.home.as_str())
        })
        .or_else(|| producers.first())
        .copied();
    let mut spans: Vec<(&CollectedSpan, String)> = hops.iter().map(|s| (*s, label(s))).collect();
    spans.extend(reading.map(|r| (r, "reading sent".to_string())));
    spans.sort_by_key(|(s, _)| s.start_unix_nanos);
    let origin = spans[0].0.start_unix_nanos as f64 / 1e6;
    let ms = |nanos: u64| nanos as f64 / 1e6 - origin;
    let mut hops: Vec<Hop> = spans
        .into_iter()
        .map(|(s, label)| Hop {
            label,
            service: s.service.clone(),
            start_ms: ms(s.start_unix_nanos),
            duration_ms: s.end_unix_nanos.saturating_sub(s.start_unix_nanos) as f64 / 1e6,
        })
        .collect();
    if let Some(enqueued) = alarm.enqueued {
        hops.push(Hop {
            label: "alarm enqueued".into(),
            service: "event hub".into(),
            start_ms: enqueued.timestamp_millis() as f64 - origin,
            duration_ms: 0.0,
        });
    }
    Some(AlarmTrace {
        home: alarm.home.clone(),
        kind: alarm.kind.clone(),
        trace_id: alarm.sent_by.trace_id_hex(),
        origin_unix_ms: origin,
        hops,
    })
}

/// The newest alarms of the alarms hub that carry a trace, with their traces.
pub async fn recent(
    sources: &TraceSources,
    explorer: &Explorer,
) -> Result<Vec<AlarmTrace>, ExplorerError> {
    let view = explorer.view(Utc::now()).await?;
    let Some(hub) = view.hubs.iter().find(|h| h.name == sources.alarms_hub) else {
        return Ok(Vec::new());
    };
    let mut alarms = Vec::new();
    for partition in &hub.partitions {
        let events = explorer
            .events(&hub.name, &partition.id, "latest", ALARMS_SHOWN)
            .await?;
        alarms.extend(events.iter().filter_map(AlarmEvent::of));
    }
    alarms.sort_by_key(|alarm| std::cmp::Reverse(alarm.enqueued));
    let collector = &sources.collector;
    Ok(alarms
        .iter()
        .filter_map(|alarm| {
            let trace = collector.trace(&alarm.sent_by.trace_id_hex());
            let linked: Vec<CollectedSpan> = trace
                .iter()
                .flat_map(|s| &s.links)
                .filter_map(|(trace_id, span_id)| collector.span(trace_id, span_id))
                .collect();
            alarm_trace(alarm, &trace, &linked)
        })
        .take(ALARMS_SHOWN)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn span(name: &str, service: &str, kind: i32, start_ms: u64, end_ms: u64) -> CollectedSpan {
        CollectedSpan {
            service: service.into(),
            name: name.into(),
            kind,
            trace_id: "aa".repeat(16),
            span_id: format!("{start_ms:016x}"),
            parent_span_id: None,
            links: Vec::new(),
            start_unix_nanos: start_ms * 1_000_000,
            end_unix_nanos: end_ms * 1_000_000,
            attributes: BTreeMap::new(),
            error: false,
        }
    }

    /// An alarm sent by the span that started at `sent_by_ms`.
    fn alarm(enqueued_ms: i64, sent_by_ms: u64) -> AlarmEvent {
        AlarmEvent {
            home: "home-00042".into(),
            kind: "smoke".into(),
            sent_by: TraceParent::parse(&format!(
                "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-{sent_by_ms:016x}-01"
            ))
            .unwrap(),
            enqueued: DateTime::from_timestamp_millis(enqueued_ms),
        }
    }

    fn child_of(mut span: CollectedSpan, parent: &CollectedSpan) -> CollectedSpan {
        span.parent_span_id = Some(parent.span_id.clone());
        span
    }

    #[test]
    fn hops_run_from_the_home_s_reading_to_the_alarm_s_enqueue() {
        let mut function = span("SensorAggregator", "hubhost-demo", 5, 1_020, 1_030);
        function
            .attributes
            .insert("faas.name".into(), "SensorAggregator".into());
        let mut other_home = span("create sensors", "simulator", 4, 900, 901);
        other_home
            .attributes
            .insert("hubhost.home_id".into(), "home-00001".into());
        let mut home = span("create sensors", "simulator", 4, 1_000, 1_002);
        home.attributes
            .insert("hubhost.home_id".into(), "home-00042".into());
        let mut delivery = span("process sensors", "hubhost-demo", 5, 1_010, 1_040);
        delivery
            .attributes
            .insert("faas.name".into(), "SensorAggregator".into());
        delivery.links = [&other_home, &home]
            .iter()
            .map(|s| (s.trace_id.clone(), s.span_id.clone()))
            .collect();
        let mut invoke = span("invoke SensorAggregator", "hubhost-demo", 3, 1_015, 1_035);
        invoke
            .attributes
            .insert("faas.name".into(), "SensorAggregator".into());
        let invoke = child_of(invoke, &delivery);
        let function = child_of(function, &invoke);
        let mut send = span("send alarms", "hubhost-demo", 4, 1_031, 1_038);
        send.attributes
            .insert("messaging.operation.type".into(), "send".into());
        let send = child_of(send, &function);
        // Neither a producer's own span in the same trace nor another function on the same
        // events is a hop of this alarm.
        let unrelated = span("send readings", "sensor-gateway", 1, 990, 1_003);
        let mut archive = span("process sensors", "hubhost-demo", 5, 1_011, 1_020);
        archive
            .attributes
            .insert("faas.name".into(), "RawArchive".into());
        let trace = vec![unrelated, delivery, archive, invoke, function, send];
        let view = alarm_trace(&alarm(1_039, 1_031), &trace, &[other_home, home]).unwrap();
        let labels: Vec<&str> = view.hops.iter().map(|h| h.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "reading sent",
                "process sensors: delivered to SensorAggregator",
                "invoke SensorAggregator: request to the handler",
                "function SensorAggregator",
                "send alarms (output)",
                "alarm enqueued",
            ]
        );
        assert_eq!(view.origin_unix_ms, 1_000.0);
        let starts: Vec<f64> = view.hops.iter().map(|h| h.start_ms).collect();
        assert_eq!(starts, [0.0, 10.0, 15.0, 20.0, 31.0, 39.0]);
        assert_eq!(view.hops[1].duration_ms, 30.0);
        assert_eq!(view.trace_id, "aa".repeat(16));
    }

    #[test]
    fn an_alarm_whose_spans_are_gone_has_no_view_and_a_lone_trace_starts_at_itself() {
        assert_eq!(alarm_trace(&alarm(5, 50), &[], &[]), None);
        let mut send = span("send alarms", "hubhost-demo", 4, 50, 60);
        send.attributes
            .insert("messaging.operation.type".into(), "send".into());
        assert_eq!(
            alarm_trace(&alarm(5, 1), &[span("x", "other", 1, 1, 2)], &[]),
            None,
            "no hop of ours"
        );
        let only = [send];
        // Sent by a span not kept: every hop of the trace.
        let view = alarm_trace(&alarm(61, 7), &only, &[]).unwrap();
        assert_eq!(view.hops.len(), 2);
        assert_eq!(view.hops[1].start_ms, 11.0);
    }
}

//! `hubhost simulate`: the design documents' home-security fleet as an Event Hubs producer.
//!
//! Every home reports all its sensors once per simulated minute, homes spread evenly over the
//! minute. Each reading is sent with the home id as partition key through the Rust SDK's
//! buffered producer (which hashes keys the way the service does, batches per partition and
//! keeps the key on every event), so the same command feeds `hubhost hub` and a real event hub.
//! The schedule is a pure function of the report index; readings are [`Fleet::reading`], so a
//! test can regenerate exactly what was sent from the seed and the start time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use azure_messaging_eventhubs::{EnqueueEventOptions, models::EventData};
use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use hubhost_app::fleet::{Fleet, SENSORS};
use hubhost_eventhubs::{EventHubTarget, EventHubsError, SendOutcomes};
use hubhost_process::progress::Progress;

#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Connect(#[from] EventHubsError),
    #[error("the producer refused an event: {0}")]
    Enqueue(azure_messaging_eventhubs::EventHubsError),
    #[error("{failed} events were not accepted by the event hub (first error: {first_error})")]
    NotAccepted { failed: u64, first_error: String },
    #[error(
        "{events} events had no answer from the event hub within {waited:?} of the last send; \
         they may or may not be stored"
    )]
    Unanswered { events: u64, waited: Duration },
    #[error("bad option: {0}")]
    Option(&'static str),
}

/// How fast simulated time runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Simulated seconds per wall-clock second (1 = real time).
    SpeedUp(f64),
    /// As fast as the event hub accepts.
    Unthrottled,
}

/// When to stop (the first reached wins; none: at Ctrl-C).
#[derive(Debug, Clone, Copy, Default)]
pub struct StopAfter {
    pub events: Option<u64>,
    pub minutes: Option<u32>,
    pub duration: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct SimulateOptions {
    pub homes: u32,
    pub seed: u64,
    /// The first simulated minute.
    pub start: DateTime<Utc>,
    pub pace: Pace,
    pub stop: StopAfter,
    /// Print a progress line (off when a caller such as the demo shows its own).
    pub progress: bool,
}

/// The order and timing of home reports: report `i` is home `i % homes` in simulated minute
/// `i / homes`, due `i / homes` minutes after the start in simulated time.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub homes: u32,
}

impl Schedule {
    pub fn report(&self, index: u64) -> (u32, u32) {
        let homes = u64::from(self.homes.max(1));
        ((index / homes) as u32, (index % homes) as u32)
    }

    /// Wall-clock time after the start at which report `index` is due.
    pub fn due(&self, index: u64, pace: Pace) -> Duration {
        match pace {
            Pace::Unthrottled => Duration::ZERO,
            Pace::SpeedUp(speed_up) => {
                let simulated = index as f64 * 60.0 / f64::from(self.homes.max(1));
                Duration::from_secs_f64(simulated / speed_up)
            }
        }
    }

    /// Events of the reports before `index`.
    pub fn events_before(index: u64) -> u64 {
        index * SENSORS.len() as u64
    }
}

/// What a run sent, printed at the end (`--json` prints it as JSON).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SimulateSummary {
    pub namespace: String,
    pub event_hub: String,
    pub homes: u32,
    pub seed: u64,
    pub start: DateTime<Utc>,
    /// Events the event hub acknowledged.
    pub events: u64,
    pub bytes: u64,
    /// Simulated minutes begun.
    pub minutes: u32,
    pub failed: u64,
    /// Events still without an answer (accepted or refused) [`FLUSH_TIMEOUT`] after sending
    /// stopped: an error for a run that ended by itself, only a warning after an interrupt.
    pub unanswered: u64,
    pub seconds: f64,
    pub events_per_second: f64,
    pub megabytes_per_second: f64,
    /// Events each partition gained during the run (from its last enqueued sequence number),
    /// in the event hub's partition order; empty when the hub could not be read at the end.
    pub partitions: Vec<PartitionGain>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionGain {
    pub partition_id: String,
    pub events: i64,
}

impl SimulateSummary {
    pub fn print(&self) {
        println!(
            "sent {} events ({:.1} MB) from {} homes, {} simulated minute(s) from {}, to {} on {} in {:.1} s: {:.0} events/s, {:.2} MB/s{}",
            self.events,
            self.bytes as f64 / 1e6,
            self.homes,
            self.minutes,
            self.start.format("%Y-%m-%dT%H:%MZ"),
            self.event_hub,
            self.namespace,
            self.seconds,
            self.events_per_second,
            self.megabytes_per_second,
            match (self.failed, self.unanswered) {
                (0, 0) => String::new(),
                (failed, 0) => format!(", {failed} FAILED"),
                (failed, unanswered) =>
                    format!(", {failed} FAILED, {unanswered} without an answer"),
            }
        );
        let per_partition: Vec<String> = self
            .partitions
            .iter()
            .map(|p| format!("{}:{}", p.partition_id, p.events))
            .collect();
        println!("per partition: {}", per_partition.join(" "));
    }
}

/// How long the end of a run waits for the answers to the last events sent. A flush normally
/// takes well under a second; this bound is for a send whose answer never comes.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the summary's last read of the partitions may take (it is optional: without it
/// the summary has totals only).
const SUMMARY_READ_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs the fleet against `target` until a stop condition or `interrupted` resolves. After an
/// interrupt it ends within about 40 s however the event hub answers
/// ([`FLUSH_TIMEOUT`], the producer's close, the summary's read).
pub async fn run(
    target: &EventHubTarget,
    options: SimulateOptions,
    interrupted: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<SimulateSummary, SimulateError> {
    if options.homes == 0 {
        return Err(SimulateError::Option("--homes must be at least 1"));
    }
    if let Pace::SpeedUp(s) = options.pace
        && !(s.is_finite() && s > 0.0)
    {
        return Err(SimulateError::Option(
            "--speed-up must be a positive number",
        ));
    }
    let before = target.partition_ends().await?;

    let outcomes = Arc::new(SendOutcomes::default());
    let producer = target
        .buffered_producer(Duration::from_millis(100), outcomes.clone())
        .await?;

    let stop = CancellationToken::new();
    let ctrl_c = {
        let stop = stop.clone();
        tokio::spawn(async move {
            interrupted.await;
            tracing::debug!("interrupted; sending stops");
            stop.cancel();
        })
    };
    let fleet = Fleet {
        homes: options.homes,
        partitions: 1,
        seed: options.seed,
    };
    let schedule = Schedule {
        homes: options.homes,
    };
    let enqueued = Arc::new(AtomicU64::new(0));
    let simulated_now = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let progress = options.progress.then(|| {
        let (outcomes, enqueued, simulated_now) =
            (outcomes.clone(), enqueued.clone(), simulated_now.clone());
        let start = options.start;
        Progress::spawn(move || {
            let sent = outcomes.sent.load(Ordering::Relaxed);
            let secs = started.elapsed().as_secs_f64();
            let minute = simulated_now.load(Ordering::Relaxed);
            format!(
                "simulate: {sent} events acknowledged ({:.0}/s), {} enqueued, simulated {}",
                sent as f64 / secs.max(1e-9),
                enqueued.load(Ordering::Relaxed),
                (start + chrono::Duration::minutes(minute as i64)).format("%H:%M")
            )
        })
    });

    let mut bytes = 0u64;
    let mut index = 0u64;
    let mut minutes = 0u32;
    'reports: loop {
        let (minute, home) = schedule.report(index);
        if options.stop.minutes.is_some_and(|m| minute >= m) {
            break;
        }
        let due = schedule.due(index, options.pace);
        let elapsed = started.elapsed();
        if options.stop.duration.is_some_and(|d| elapsed >= d) {
            break;
        }
        // Sleeping per report would cost more than it paces; a few milliseconds ahead is fine.
        if due > elapsed + Duration::from_millis(5) {
            tokio::select! {
                _ = tokio::time::sleep(due - elapsed) => {}
                _ = stop.cancelled() => break,
            }
        }
        if stop.is_cancelled() {
            break;
        }
        minutes = minutes.max(minute + 1);
        simulated_now.store(u64::from(minute), Ordering::Relaxed);
        let home_id = Fleet::home_id(home);
        let minute_start = options.start + chrono::Duration::minutes(i64::from(minute));
        // A traced producer's context for the home's report, stamped on its events as the Azure
        // SDKs stamp theirs, when this process exports spans (the demo does, to its page).
        let report_context = report_span(&target.hub, &home_id);
        for sensor in 0..SENSORS.len() {
            if options
                .stop
                .events
                .is_some_and(|n| enqueued.load(Ordering::Relaxed) >= n)
            {
                break 'reports;
            }
            let body = fleet.reading(&home_id, sensor, minute_start);
            bytes += body.len() as u64;
            let mut event = EventData::builder()
                .with_body(body.into_bytes())
                .with_content_type("application/json".into())
                .add_property("source".into(), "hubhost-simulator");
            if let Some(context) = &report_context {
                for property in hubhost_telemetry::trace_context::EVENT_PROPERTIES {
                    event = event.add_property(property.to_string(), context.clone());
                }
            }
            let event = event.build();
            let options = EnqueueEventOptions {
                partition_key: Some(home_id.clone()),
                ..Default::default()
            };
            // A full buffer makes enqueueing wait for sends; an interrupt does not wait with it.
            tokio::select! {
                accepted = producer.enqueue_event(event, Some(options)) => {
                    accepted.map_err(SimulateError::Enqueue)?;
                }
                _ = stop.cancelled() => break 'reports,
            }
            enqueued.fetch_add(1, Ordering::Relaxed);
        }
        index += 1;
    }
    // The way out is bounded and each step is logged: the SDK's flush waits for every send's
    // answer, and a send can wait forever for one (see `hubhost_eventhubs::on_sending_thread`).
    let interrupted = stop.is_cancelled();
    tracing::debug!(
        buffered = producer.total_buffered_event_count(),
        interrupted,
        "sending stopped; flushing"
    );
    let flushed = tokio::time::timeout(FLUSH_TIMEOUT, producer.flush()).await;
    let unanswered = match &flushed {
        Ok(_) => 0,
        Err(_) => {
            let unanswered = producer.total_buffered_event_count() as u64;
            tracing::warn!(
                unanswered,
                "events had no answer from the event hub within {FLUSH_TIMEOUT:?} of the last send; they may or may not be stored"
            );
            unanswered
        }
    };
    tracing::debug!(unanswered, "flush ended; closing the producer");
    hubhost_eventhubs::close_quietly("producer", producer.close()).await;
    tracing::debug!("producer closed; reading the partitions' ends");
    drop(progress);
    ctrl_c.abort();
    if let Ok(Err(e)) = flushed {
        return Err(SimulateError::Enqueue(e));
    }
    let seconds = started.elapsed().as_secs_f64();

    // What was sent is known from the acknowledgements; the per-partition gains are extra and
    // need the hub once more, which may be stopping (the demo stops its parts in turn), so a
    // failure here leaves them out instead of losing the whole summary.
    let before: BTreeMap<String, i64> = before
        .into_iter()
        .map(|p| (p.partition_id, p.last_sequence_number))
        .collect();
    let ends = tokio::time::timeout(SUMMARY_READ_TIMEOUT, target.partition_ends())
        .await
        .unwrap_or_else(|_| {
            Err(EventHubsError::Properties {
                hub: target.hub.clone(),
                namespace: target.namespace.clone(),
                message: format!("no answer within {SUMMARY_READ_TIMEOUT:?}"),
            })
        });
    let partitions = match ends {
        Ok(after) => after
            .into_iter()
            .map(|p| PartitionGain {
                events: p.last_sequence_number - before.get(&p.partition_id).copied().unwrap_or(-1),
                partition_id: p.partition_id,
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "the partitions could not be read after sending; the summary has totals only");
            Vec::new()
        }
    };
    let sent = outcomes.sent.load(Ordering::Relaxed);
    let failed = outcomes.failed.load(Ordering::Relaxed);
    let summary = SimulateSummary {
        namespace: target.namespace.clone(),
        event_hub: target.hub.clone(),
        homes: options.homes,
        seed: options.seed,
        start: options.start,
        events: sent,
        bytes,
        minutes,
        failed,
        unanswered,
        seconds,
        events_per_second: sent as f64 / seconds.max(1e-9),
        megabytes_per_second: bytes as f64 / 1e6 / seconds.max(1e-9),
        partitions,
    };
    if failed > 0 {
        summary.print();
        let first_error = outcomes.first_error().unwrap_or_default();
        return Err(SimulateError::NotAccepted {
            failed,
            first_error,
        });
    }
    if unanswered > 0 && !interrupted {
        summary.print();
        return Err(SimulateError::Unanswered {
            events: unanswered,
            waited: FLUSH_TIMEOUT,
        });
    }
    Ok(summary)
}

/// The span of one home's report (its events' creation context, OpenTelemetry's `create`
/// operation), as a `traceparent` value; `None` when spans are not exported.
fn report_span(hub: &str, home_id: &str) -> Option<String> {
    if !hubhost_telemetry::exporting_traces() {
        return None;
    }
    let span = tracing::info_span!(
        "report",
        "otel.name" = format!("create {hub}"),
        "otel.kind" = "producer",
        "messaging.system" = "eventhubs",
        "messaging.operation.type" = "create",
        "messaging.destination.name" = hub,
        "hubhost.home_id" = home_id,
    );
    hubhost_telemetry::traceparent_of(&span).map(|context| context.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_go_home_by_home_then_minute_by_minute() {
        let s = Schedule { homes: 3 };
        let order: Vec<(u32, u32)> = (0..7).map(|i| s.report(i)).collect();
        assert_eq!(
            order,
            [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0)]
        );
        assert_eq!(Schedule::events_before(3), 3 * SENSORS.len() as u64);
    }

    #[test]
    fn homes_are_spread_over_the_minute_and_speed_up_divides_wall_time() {
        let s = Schedule { homes: 4 };
        let real = Pace::SpeedUp(1.0);
        assert_eq!(s.due(0, real), Duration::ZERO);
        assert_eq!(s.due(1, real), Duration::from_secs(15));
        assert_eq!(s.due(4, real), Duration::from_secs(60));
        assert_eq!(s.due(4, Pace::SpeedUp(60.0)), Duration::from_secs(1));
        assert_eq!(s.due(1_000, Pace::Unthrottled), Duration::ZERO);
        // Monotone, so the sender never waits for an earlier report after a later one.
        let big = Schedule { homes: 100_000 };
        let mut last = Duration::ZERO;
        for i in (0..1_000_000).step_by(997) {
            let d = big.due(i, Pace::SpeedUp(7.0));
            assert!(d >= last);
            last = d;
        }
    }
}

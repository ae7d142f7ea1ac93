//! One delivery of a batch to the custom handler, as the host makes it: the exact request
//! (`contract::encode`), the function's retry policy with `RetryContext`, and the verdict the
//! pump acts on — succeeded, failed by the function (checkpointed, the host's rule), or not
//! processed because the handler gave no answer (without a retry policy) or the pump is
//! stopping (never checkpointed).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hubhost_telemetry::trace_context::Producers;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::faults::{FaultSwitch, GivenUp};
use super::inputs::InputPlan;
use super::outputs::{InvocationOrigin, OutputPlan};
use crate::invoker::{HostFailure, InvokeError, Invoker, within_function_timeout};
use hubhost_functions::contract::encode::{
    HostInvocation, MetadataFlavor, encode_request, expression_data,
};
use hubhost_functions::function_app::{EventHubTrigger, RetryPolicy, RetryStrategy};
use hubhost_processor::{BatchHandler, BatchOutcome, PartitionBatch};
use hubhost_trigger::batch::RetryContext;

/// How long an instance that stops lets the retries of a batch under way go on: the host's drain
/// mode lets executions under way finish rather than leave their batch to the next owner.
pub const DRAIN: Duration = Duration::from_secs(30);

/// What a delivery the handler gave no answer to (not listening, restarting, died
/// mid-request) counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoAnswerRule {
    /// hubhost's rule for local development, kinder than Azure's: not the function's verdict.
    /// The batch is delivered again (with a retry policy, as a retry that does not count
    /// towards its maximum) and never checkpointed past, so nothing is lost to a crashed
    /// handler.
    #[default]
    Redeliver,
    /// The Functions host's rule: a failed invocation. It counts towards the retry policy's
    /// maximum and, once the policy gives up (or at once, without one), the batch is
    /// checkpointed past like any failed batch: on Azure its events are lost.
    AsAzure,
}

/// One function's invocation attempts, for `/metrics` and the progress line: by outcome, the
/// retries, and each partition whose batch is being retried now — a function that fails every
/// attempt under a policy that never gives up fails no batch, and is seen only here.
#[derive(Debug, Default)]
pub struct AttemptStats {
    pub function: String,
    /// Attempts the function answered with success (and whose outputs were carried out).
    pub succeeded: AtomicU64,
    /// Attempts that failed: an error answer, an output or input binding that failed, a
    /// timeout.
    pub failed: AtomicU64,
    /// Attempts the handler gave no answer to (down, restarting, died mid-request).
    pub no_answer: AtomicU64,
    /// Attempts the function panicked in (the framework answers 500 `handler_panic`).
    pub panicked: AtomicU64,
    /// Retries the policy made.
    pub retries: AtomicU64,
    /// Per partition, the batch being retried now.
    retrying: Mutex<BTreeMap<String, Retrying>>,
}

/// A batch whose attempts failed and that is being retried.
#[derive(Debug, Clone)]
pub struct Retrying {
    /// When its first attempt started.
    pub since: tokio::time::Instant,
    /// Attempts so far.
    pub attempts: u32,
    /// What the last one failed with.
    pub last_error: String,
}

impl AttemptStats {
    pub fn new(function: &str) -> Self {
        AttemptStats {
            function: function.to_string(),
            ..AttemptStats::default()
        }
    }

    /// Attempts so far by outcome, under the names `/metrics` and OpenTelemetry give them.
    pub fn by_outcome(&self) -> [(&'static str, u64); 4] {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("succeeded", n(&self.succeeded)),
            ("failed", n(&self.failed)),
            ("no_answer", n(&self.no_answer)),
            ("panicked", n(&self.panicked)),
        ]
    }

    /// The partitions whose batch is being retried now.
    pub fn retrying(&self) -> BTreeMap<String, Retrying> {
        self.retrying.lock().expect("retrying lock").clone()
    }

    /// A retry of `partition`'s batch, after `attempts` attempts, the last failed with `error`.
    fn retry(&self, partition: &str, since: tokio::time::Instant, attempts: u32, error: &str) {
        self.retries.fetch_add(1, Ordering::Relaxed);
        let last_error = error.chars().take(300).collect();
        self.retrying.lock().expect("retrying lock").insert(
            partition.to_string(),
            Retrying {
                since,
                attempts,
                last_error,
            },
        );
    }

    fn count(&self, outcome: &Result<(), InvocationFailure>) {
        let counter = match outcome {
            Ok(()) => &self.succeeded,
            Err(InvocationFailure::NoAnswer(_)) => &self.no_answer,
            Err(InvocationFailure::Function(e)) if e.message.contains(PANICKED) => &self.panicked,
            Err(InvocationFailure::Function(_)) => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The error code the framework answers a panicked invocation with.
const PANICKED: &str = "handler_panic";

/// Forgets a partition's retrying batch when its delivery ends, however it ends.
struct RetryingEntry<'a> {
    stats: &'a AttemptStats,
    partition: &'a str,
}

impl Drop for RetryingEntry<'_> {
    fn drop(&mut self) {
        self.stats
            .retrying
            .lock()
            .expect("retrying lock")
            .remove(self.partition);
    }
}

/// Invokes one function for each batch, with the function's retry policy.
pub struct FunctionDispatch {
    pub invoker: Invoker,
    pub function: String,
    /// With `%…%` expanded.
    pub trigger: EventHubTrigger,
    pub retry: Option<RetryPolicy>,
    /// What to read into the request beside the batch (a blob named by `{PartitionKey}`).
    pub inputs: Arc<InputPlan>,
    /// What to do with the answer's `Outputs` (carried out before the batch counts as done).
    pub outputs: Arc<OutputPlan>,
    /// A rehearsal's switches, when one runs.
    pub faults: Option<Arc<FaultSwitch>>,
    /// How long a batch's retries go on once the instance stops ([`DRAIN`]).
    pub drain: Duration,
    /// host.json's `functionTimeout`: an invocation still running then has failed.
    pub function_timeout: Option<Duration>,
    /// Told of each invocation that timed out, so the instance restarts the handler.
    pub timed_out: Arc<tokio::sync::Notify>,
    /// What a delivery the handler gave no answer to counts as.
    pub no_answer: NoAnswerRule,
    /// Its attempts, counted.
    pub attempts: Arc<AttemptStats>,
}

/// Why one invocation did not succeed.
enum InvocationFailure {
    /// The function ran and failed (a non-2xx answer, or one the host cannot read; or an
    /// output that could not be carried out): the retry policy applies, and after it the
    /// host's rule (checkpoint anyway).
    Function(HostFailure),
    /// The handler gave no answer (down, restarting, died mid-request): the function may
    /// never have seen the batch, so it is neither a failure nor a success.
    NoAnswer(String),
}

impl FunctionDispatch {
    /// A batch whose invocations failed `attempts` times, the retry policy spent (or none):
    /// the pump checkpoints past it as the host does, so it is not delivered again. Said in
    /// the log, and told to a rehearsal, which reports its events as lost on Azure.
    fn gave_up(&self, batch: &PartitionBatch, attempts: u32, error: &HostFailure) {
        let first_sequence = batch.events.first().and_then(|e| e.sequence_number);
        let last_sequence = batch.events.last().and_then(|e| e.sequence_number);
        tracing::error!(
            function = %self.function, partition = %batch.context.partition_id,
            ?first_sequence, ?last_sequence, events = batch.events.len(), attempts,
            max_retry_count = ?self.retry.as_ref().map(|p| p.max_retry_count),
            %error, "the function failed the batch and its retry policy is spent (or it has none): the host moves past it"
        );
        if let Some(faults) = &self.faults {
            faults.batch_given_up(GivenUp {
                function: self.function.clone(),
                partition: batch.context.partition_id.clone(),
                first_sequence,
                last_sequence,
                events: batch.events.len(),
                attempts,
                max_retry_count: self.retry.as_ref().map(|p| p.max_retry_count),
                error: error.message.clone(),
            });
        }
    }

    async fn invoke_once(
        &self,
        batch: &PartitionBatch,
        retry: Option<&RetryContext>,
        span: &Span,
    ) -> Result<(), InvocationFailure> {
        let geo_events = match &self.faults {
            Some(faults) => {
                faults.invocation_starts(batch.events.len()).await;
                faults.offsets_for_function(&batch.events)
            }
            None => None,
        };
        let mut invocation = HostInvocation {
            function: &self.function,
            trigger: &self.trigger,
            partition: &batch.context,
            events: geo_events.as_deref().unwrap_or(&batch.events),
            retry,
            flavor: MetadataFlavor::Current,
            now: hubhost_clock::now(),
            inputs: &[],
        };
        // The inputs are read before the call, their paths from the trigger's binding data;
        // one that cannot be read fails the invocation, as in the host.
        let inputs = if self.inputs.is_empty() {
            Vec::new()
        } else {
            self.inputs
                .read(&expression_data(&invocation), invocation.now)
                .await
                .map_err(|e| {
                    InvocationFailure::Function(HostFailure::other(format!(
                        "input binding failed: {e}"
                    )))
                })?
        };
        invocation.inputs = &inputs;
        let body = encode_request(&invocation)
            .map_err(|e| InvocationFailure::Function(HostFailure::other(e.to_string())))?;
        let parent = hubhost_telemetry::traceparent_of(span);
        let invocation_id = hubhost_clock::uuid().to_string();
        // Not while the handler restarts after a timeout: the wait is not the function's time.
        self.invoker.accepting().await;
        let invocation = self
            .invoker
            .invoke_as(&self.function, &invocation_id, body, parent);
        let answered = match within_function_timeout(self.function_timeout, invocation).await {
            Ok(answered) => answered,
            Err(limit) => {
                // The host's rule: the invocation fails with FunctionTimeoutException, and the
                // host restarts the worker (`WebScriptHostExceptionHandler`).
                self.timed_out.notify_one();
                return Err(InvocationFailure::Function(HostFailure::timeout(
                    limit,
                    &self.function,
                )));
            }
        };
        let answer = match answered {
            Ok(answer) => answer,
            Err(e @ InvokeError::NoAnswer(_)) => {
                return Err(InvocationFailure::NoAnswer(e.to_string()));
            }
            Err(e) => {
                return Err(InvocationFailure::Function(HostFailure::other(
                    e.to_string(),
                )));
            }
        };
        if answer.succeeded() {
            // As in the host, an output that cannot be carried out fails the invocation.
            if let Some(faults) = &self.faults {
                faults.wait_while_frozen().await;
            }
            self.outputs
                .carry_out(
                    &answer.body,
                    &InvocationOrigin {
                        function: &self.function,
                        invocation_id: &invocation_id,
                        partition_id: &batch.context.partition_id,
                        sequence_numbers: batch
                            .events
                            .first()
                            .and_then(|e| e.sequence_number)
                            .zip(batch.events.last().and_then(|e| e.sequence_number)),
                    },
                    answer.trace_context.as_deref(),
                    self.faults.as_deref(),
                )
                .await
                .map_err(|e| {
                    InvocationFailure::Function(HostFailure::other(format!(
                        "output binding failed: {e}"
                    )))
                })?;
            // The host writes a handler's `Logs` to its own log as the function's; here at
            // debug level (target `hubhost::function`), one line per batch being too many for
            // a terminal. `bench chaos` counts deliveries from them.
            for line in answer.body["Logs"].as_array().into_iter().flatten() {
                if let Some(line) = line.as_str() {
                    tracing::debug!(target: "hubhost::function", function = %self.function, "{line}");
                }
            }
            Ok(())
        } else {
            Err(InvocationFailure::Function(answer.refused.unwrap_or_else(
                || HostFailure::other(format!("the handler answered {}", answer.status)),
            )))
        }
    }
}

/// The `RetryContext` the host sends with attempt `attempt` (0: the first) of an invocation of
/// `function` under `policy`, with the previous attempt's failure; `None` without a policy, as
/// the host sends none then. Any trigger's retries carry it (Event Hubs batches, timer firings).
pub fn retry_context(
    function: &str,
    policy: Option<&RetryPolicy>,
    attempt: u32,
    last_error: Option<&HostFailure>,
) -> Option<RetryContext> {
    policy.map(|policy| RetryContext {
        retry_count: i64::from(attempt),
        max_retry_count: policy.max_retry_count,
        // The host passes the previous attempt's exception.
        exception: last_error
            .map(|e| RetryContext::exception_from(function, e.exception_class, &e.message)),
    })
}

/// The wait before retry number `retry` (1-based) of a policy.
pub fn retry_delay(policy: &RetryPolicy, retry: u32) -> Duration {
    match &policy.strategy {
        RetryStrategy::FixedDelay { delay } => *delay,
        RetryStrategy::ExponentialBackoff { minimum, maximum } => minimum
            .saturating_mul(1u32 << retry.saturating_sub(1).min(20))
            .min(*maximum),
    }
}

#[async_trait::async_trait]
impl BatchHandler for FunctionDispatch {
    /// One delivery of the batch with the function's retry policy. A handler that gives no
    /// answer is retried like a function that failed, without counting towards the policy's
    /// maximum; without a policy it ends the delivery at once as
    /// [`BatchOutcome::NotProcessed`] (the pump delivers the batch again once the handler is
    /// back). A stop lets the retries go on for the drain, then gives the batch up as
    /// `NotProcessed`, because the host (Event Hubs extension 6.2.0 and later) writes no
    /// checkpoint while its listener stops and the next owner starts the batch over.
    async fn handle(&self, batch: &PartitionBatch, stop: &CancellationToken) -> BatchOutcome {
        // The pump runs this inside `span` below: the delivery's span, which its checkpoint
        // joins.
        let span = Span::current();
        let outcome = self.deliver(batch, stop).await;
        let failure = match &outcome {
            // A redelivery that succeeds after one the handler did not answer (same span).
            BatchOutcome::Succeeded => {
                span.record("otel.status_code", "OK");
                None
            }
            BatchOutcome::Failed(e) => Some(("function_failed", e)),
            BatchOutcome::NotProcessed(e) => Some(("not_processed", e)),
        };
        if let Some((kind, description)) = failure {
            span.record("otel.status_code", "ERROR");
            span.record("otel.status_description", description.as_str());
            span.record("error.type", kind);
        }
        outcome
    }

    fn span(&self, batch: &PartitionBatch) -> Span {
        self.delivery_span(batch)
    }
}

impl FunctionDispatch {
    /// The emulated host's span for one delivery of a batch, retries included, as the Functions
    /// host traces an execution in its OpenTelemetry mode: linked to each event's producer,
    /// continuing the producer's trace when the whole batch belongs to one. `Span::none()` when
    /// nothing is exported.
    fn delivery_span(&self, batch: &PartitionBatch) -> Span {
        if !hubhost_telemetry::exporting_traces() {
            return Span::none();
        }
        let producers = Producers::of_events(batch.events.iter().map(|e| &e.properties));
        let hub = self.trigger.event_hub_name.as_str();
        let span = tracing::info_span!(
            "delivery",
            "otel.name" = format!("process {hub}"),
            "otel.kind" = "consumer",
            "otel.status_code" = Empty,
            "otel.status_description" = Empty,
            "faas.trigger" = "pubsub",
            "faas.name" = self.function.as_str(),
            "messaging.system" = "eventhubs",
            "messaging.operation.type" = "process",
            "messaging.destination.name" = hub,
            "messaging.consumer.group.name" = self.trigger.consumer_group.as_str(),
            "messaging.destination.partition.id" = batch.context.partition_id.as_str(),
            "messaging.batch.message_count" = batch.events.len() as i64,
            "error.type" = Empty,
        );
        hubhost_telemetry::connect(&span, producers.common_parent, &producers.links);
        span
    }

    /// The span of one attempt (the HTTP request to the handler), inside the delivery's.
    fn attempt_span(&self, retry: Option<&RetryContext>) -> Span {
        if !hubhost_telemetry::exporting_traces() {
            return Span::none();
        }
        tracing::info_span!(
            "attempt",
            "otel.name" = format!("invoke {}", self.function),
            "otel.kind" = "client",
            "otel.status_code" = Empty,
            "faas.name" = self.function.as_str(),
            "hubhost.retry_count" = retry.map_or(0, |r| r.retry_count),
            "error.type" = Empty,
        )
    }

    async fn deliver(&self, batch: &PartitionBatch, stop: &CancellationToken) -> BatchOutcome {
        let last = batch.events.last().and_then(|e| e.sequence_number);
        let partition = &batch.context.partition_id;
        // When the stop came, once it has (`Some(None)`: not stopping when first asked).
        let mut draining: Option<Option<tokio::time::Instant>> = None;
        let (mut attempt, mut last_error) = (0, None::<HostFailure>);
        // Attempts the function answered with a failure: the ones the policy's maximum counts.
        let mut verdicts: i64 = 0;
        let started = tokio::time::Instant::now();
        let _retrying = RetryingEntry {
            stats: &self.attempts,
            partition,
        };
        loop {
            let context = retry_context(
                &self.function,
                self.retry.as_ref(),
                attempt,
                last_error.as_ref(),
            );
            let attempt_span = self.attempt_span(context.as_ref());
            let outcome = self
                .invoke_once(batch, context.as_ref(), &attempt_span)
                .instrument(attempt_span.clone())
                .await;
            self.attempts.count(&outcome);
            if outcome.is_err() {
                attempt_span.record("otel.status_code", "ERROR");
                attempt_span.record("error.type", "invocation_failed");
            }
            let error = match outcome {
                Ok(()) => {
                    if let Some(faults) = &self.faults {
                        faults.batch_succeeded(&self.function, partition, last);
                    }
                    return BatchOutcome::Succeeded;
                }
                // hubhost's rule, without a retry policy: the pump delivers the batch again
                // once the handler is back (never a verdict, so never checkpointed).
                Err(InvocationFailure::NoAnswer(e))
                    if self.retry.is_none() && self.no_answer == NoAnswerRule::Redeliver =>
                {
                    return BatchOutcome::NotProcessed(e);
                }
                // With one, a handler that died mid-invocation failed that invocation, as to
                // the host: delivered again here with `RetryContext`, through a stop's drain
                // too, so that the outputs `Once` claimed on the attempt before are given by
                // this instance's retry. Under hubhost's rule not a verdict on the function,
                // so not counted towards the policy's maximum; under Azure's, counted.
                Err(InvocationFailure::NoAnswer(e)) => {
                    if self.no_answer == NoAnswerRule::AsAzure {
                        verdicts += 1;
                    }
                    HostFailure::other(e)
                }
                Err(InvocationFailure::Function(e)) => {
                    verdicts += 1;
                    e
                }
            };
            let Some(policy) = &self.retry else {
                self.gave_up(batch, attempt + 1, &error);
                return BatchOutcome::Failed(error.message);
            };
            if policy.max_retry_count >= 0 && verdicts > policy.max_retry_count {
                self.gave_up(batch, attempt + 1, &error);
                return BatchOutcome::Failed(format!("{error} (after {attempt} retries)"));
            }
            attempt += 1;
            self.attempts
                .retry(partition, started, attempt, &error.message);
            last_error = Some(error.clone());
            let delay = retry_delay(policy, attempt);
            tracing::warn!(
                function = %self.function, partition = %batch.context.partition_id,
                first_sequence = ?batch.events.first().and_then(|e| e.sequence_number),
                last_sequence = ?batch.events.last().and_then(|e| e.sequence_number),
                attempt, ?delay, %error, "invocation failed; retrying"
            );
            // Stopping, the instance drains: the retries of a batch under way go on for up to
            // `drain` (as the host's drain mode lets executions under way finish), then stop.
            let stopping = *draining
                .get_or_insert_with(|| stop.is_cancelled().then(tokio::time::Instant::now));
            let drain_ends = stopping.map(|since| since + self.drain);
            if drain_ends.is_some_and(|end| tokio::time::Instant::now() + delay > end) {
                return BatchOutcome::NotProcessed(format!(
                    "{error} (stopping; retries abandoned after draining {:?})",
                    self.drain
                ));
            }
            tokio::select! {
                biased;
                _ = stop.cancelled(), if stopping.is_none() => {
                    draining = Some(Some(tokio::time::Instant::now()));
                    if self.drain.is_zero() {
                        return BatchOutcome::NotProcessed(format!("{error} (stopping; retries abandoned)"));
                    }
                    tokio::time::sleep(delay.min(self.drain)).await;
                }
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The body of `request` (headers and what followed them) once it has all arrived:
    /// `Content-Length` bytes, or the chunks up to the last, empty one.
    fn whole_body(request: &[u8]) -> Option<Vec<u8>> {
        let end = request.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
        let mut rest = &request[end + 4..];
        if head.contains("transfer-encoding: chunked") {
            let mut body = Vec::new();
            loop {
                let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
                let size =
                    usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).ok()?, 16).ok()?;
                rest = &rest[line_end + 2..];
                if size == 0 {
                    return Some(body);
                }
                body.extend_from_slice(rest.get(..size)?);
                rest = rest.get(size + 2..)?;
            }
        }
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok())
            .unwrap_or(0);
        rest.get(..length).map(<[u8]>::to_vec)
    }

    /// The `RetryContext.RetryCount` of an invocation request's body (the host sends the
    /// context as a JSON string).
    fn retry_count_of(body: &[u8]) -> i64 {
        let request: Value = serde_json::from_slice(body).unwrap();
        let retry: Value = match &request["Metadata"]["RetryContext"] {
            Value::String(text) => serde_json::from_str(text).unwrap(),
            other => other.clone(),
        };
        retry["RetryCount"].as_i64().unwrap()
    }

    /// A handler on a real socket that answers 500 to its first `failures` requests, then 200,
    /// recording each request's `RetryContext.RetryCount`.
    async fn flaky_handler(failures: usize) -> (Invoker, Arc<std::sync::Mutex<Vec<i64>>>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = axum::Router::new().route(
            "/{function}",
            axum::routing::post(move |body: axum::body::Bytes| {
                let record = record.clone();
                async move {
                    let mut seen = record.lock().unwrap();
                    seen.push(retry_count_of(&body));
                    let status = if seen.len() <= failures {
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        axum::http::StatusCode::OK
                    };
                    (
                        status,
                        axum::Json(serde_json::json!({"Outputs": {}, "Logs": []})),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (Invoker::new(&base), seen)
    }

    fn dispatch(invoker: Invoker, max_retry_count: i64) -> FunctionDispatch {
        FunctionDispatch {
            invoker,
            function: "F".into(),
            trigger: EventHubTrigger {
                binding_name: "events".into(),
                event_hub_name: "sensors".into(),
                consumer_group: "$Default".into(),
                cardinality: hubhost_functions::function_app::Cardinality::Many,
                data_type: hubhost_functions::function_app::DataType::String,
                connection: None,
            },
            retry: Some(RetryPolicy {
                strategy: RetryStrategy::FixedDelay {
                    delay: Duration::from_millis(1),
                },
                max_retry_count,
            }),
            inputs: Arc::default(),
            outputs: Arc::default(),
            faults: None,
            function_timeout: None,
            attempts: Arc::new(AttemptStats::new("F")),
            no_answer: NoAnswerRule::Redeliver,
            timed_out: Default::default(),
            drain: Duration::ZERO,
        }
    }

    fn one_event_batch() -> PartitionBatch {
        PartitionBatch {
            context: hubhost_trigger::batch::PartitionContext {
                partition_id: "0".into(),
                ..Default::default()
            },
            events: vec![hubhost_trigger::batch::EventRecord {
                body: bytes::Bytes::from_static(b"{}"),
                sequence_number: Some(7),
                offset: Some("700".into()),
                enqueued_time: Some(chrono::Utc::now()),
                partition_key: None,
                properties: Default::default(),
                system_properties: Default::default(),
            }],
        }
    }

    #[tokio::test]
    async fn retrying_forever_outlasts_any_number_of_failures() {
        // maxRetryCount -1, the reference app's policy: a storage outage answered with 500
        // is retried until it is over, never given up and checkpointed.
        let (invoker, seen) = flaky_handler(25).await;
        let outcome = dispatch(invoker, -1)
            .handle(&one_event_batch(), &CancellationToken::new())
            .await;
        assert_eq!(outcome, BatchOutcome::Succeeded);
        assert_eq!(*seen.lock().unwrap(), (0..=25).collect::<Vec<i64>>());
    }

    #[tokio::test]
    async fn a_finite_policy_fails_the_batch_after_its_retries() {
        let (invoker, seen) = flaky_handler(25).await;
        let outcome = dispatch(invoker, 3)
            .handle(&one_event_batch(), &CancellationToken::new())
            .await;
        assert!(
            matches!(&outcome, BatchOutcome::Failed(e) if e.contains("after 3 retries")),
            "{outcome:?}"
        );
        assert_eq!(*seen.lock().unwrap(), [0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn no_answer_or_a_stop_is_not_a_function_failure() {
        // Nothing listens on the port: the handler is down.
        // Without a retry policy, the pump delivers the batch again.
        let port = hubhost_process::child::free_listen_port().unwrap();
        let down = Invoker::new(&format!("http://127.0.0.1:{port}"));
        let mut without_policy = dispatch(down, -1);
        without_policy.retry = None;
        let outcome = without_policy
            .handle(&one_event_batch(), &CancellationToken::new())
            .await;
        assert!(
            matches!(&outcome, BatchOutcome::NotProcessed(e) if e.contains("no answer")),
            "{outcome:?}"
        );
        // A stop during the retries abandons them without a verdict (no checkpoint follows).
        let (invoker, _) = flaky_handler(usize::MAX).await;
        let stop = CancellationToken::new();
        let stopper = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            stopper.cancel();
        });
        let outcome = dispatch(invoker, -1)
            .handle(&one_event_batch(), &stop)
            .await;
        assert!(
            matches!(&outcome, BatchOutcome::NotProcessed(e) if e.contains("stopping")),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn a_stopping_instance_drains_a_batch_under_retry_then_gives_up() {
        // Three failures, then success: the stop after the first does not abandon it.
        let (invoker, seen) = flaky_handler(3).await;
        let mut draining = dispatch(invoker, -1);
        draining.drain = Duration::from_secs(20);
        let stop = CancellationToken::new();
        stop.cancel();
        let outcome = draining.handle(&one_event_batch(), &stop).await;
        assert_eq!(outcome, BatchOutcome::Succeeded);
        assert_eq!(*seen.lock().unwrap(), [0, 1, 2, 3]);
        // A batch that keeps failing is given up once the drain is over.
        let (invoker, _) = flaky_handler(usize::MAX).await;
        let mut draining = dispatch(invoker, -1);
        draining.drain = Duration::from_millis(50);
        let outcome = draining.handle(&one_event_batch(), &stop).await;
        assert!(
            matches!(&outcome, BatchOutcome::NotProcessed(e) if e.contains("draining")),
            "{outcome:?}"
        );
    }

    /// A handler that dies with its first `deaths` requests unanswered (the connection closed
    /// without a response, as when the process is killed mid-request), then answers 200; each
    /// request's `RetryContext.RetryCount` recorded.
    async fn dying_handler(deaths: usize) -> (Invoker, Arc<std::sync::Mutex<Vec<i64>>>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let record = record.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // Headers, then the body: chunked, as the host sends it.
                    let body = loop {
                        let n = socket.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        request.extend_from_slice(&chunk[..n]);
                        if let Some(body) = whole_body(&request) {
                            break body;
                        }
                    };
                    let dies = {
                        let mut seen = record.lock().unwrap();
                        seen.push(retry_count_of(&body));
                        seen.len() <= deaths
                    };
                    if dies {
                        return; // dropped: no answer
                    }
                    let answer = br#"{"Outputs":{},"Logs":[]}"#;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        answer.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(answer).await;
                });
            }
        });
        (Invoker::new(&base), seen)
    }

    #[tokio::test]
    async fn a_batch_its_dead_handler_did_not_answer_is_retried_through_a_stop() {
        // A handler that died failed the invocation, as to the host: the retry carries
        // `RetryContext`, so `Once` gives again the outputs this instance claimed; deaths are
        // not the function's failures, so a policy of one retry still gets there.
        let (invoker, seen) = dying_handler(2).await;
        let outcome = dispatch(invoker, 1)
            .handle(&one_event_batch(), &CancellationToken::new())
            .await;
        assert_eq!(outcome, BatchOutcome::Succeeded);
        assert_eq!(*seen.lock().unwrap(), [0, 1, 2]);
        // Stopping, or having lost the partition, nobody else here delivers the batch again:
        // the retries go on while the drain lasts.
        let (invoker, seen) = dying_handler(2).await;
        let mut draining = dispatch(invoker, 1);
        draining.drain = Duration::from_secs(20);
        let stop = CancellationToken::new();
        stop.cancel();
        let outcome = draining.handle(&one_event_batch(), &stop).await;
        assert_eq!(outcome, BatchOutcome::Succeeded);
        assert_eq!(*seen.lock().unwrap(), [0, 1, 2]);
    }

    #[tokio::test]
    async fn under_azure_rules_a_dead_handler_is_a_failed_attempt_and_a_spent_policy_gives_up() {
        // The same two deaths as above: under Azure's rule each counts, so a policy of one
        // retry is spent by the second, and the batch is given up, told to the rehearsal.
        let (invoker, seen) = dying_handler(2).await;
        let mut as_azure = dispatch(invoker, 1);
        as_azure.no_answer = NoAnswerRule::AsAzure;
        let switch = FaultSwitch::new(
            Arc::new(tokio::sync::watch::channel(0).0),
            Default::default(),
            Default::default(),
        );
        as_azure.faults = Some(switch.clone());
        let outcome = as_azure
            .handle(&one_event_batch(), &CancellationToken::new())
            .await;
        assert!(matches!(&outcome, BatchOutcome::Failed(_)), "{outcome:?}");
        assert_eq!(*seen.lock().unwrap(), [0, 1]);
        let given_up = switch.given_up();
        assert_eq!(given_up.len(), 1, "{given_up:?}");
        assert_eq!(
            (given_up[0].attempts, given_up[0].max_retry_count),
            (2, Some(1))
        );
        assert!(
            given_up[0].describe().starts_with(
                "lost on Azure: 1 input after 2 failed attempts; policy maxRetryCount 1"
            ),
            "{}",
            given_up[0].describe()
        );
        // Without a retry policy, a handler that is down fails the batch at once: no
        // redelivery, as the host moves past it.
        let port = hubhost_process::child::free_listen_port().unwrap();
        let mut without_policy = dispatch(Invoker::new(&format!("http://127.0.0.1:{port}")), -1);
        without_policy.retry = None;
        without_policy.no_answer = NoAnswerRule::AsAzure;
        let outcome = without_policy
            .handle(&one_event_batch(), &CancellationToken::new())
            .await;
        assert!(matches!(&outcome, BatchOutcome::Failed(_)), "{outcome:?}");
    }

    #[test]
    fn retry_delays_follow_the_policy() {
        let exp = RetryPolicy {
            strategy: RetryStrategy::ExponentialBackoff {
                minimum: Duration::from_secs(2),
                maximum: Duration::from_secs(30),
            },
            max_retry_count: 5,
        };
        let delays: Vec<u64> = (1..=5).map(|r| retry_delay(&exp, r).as_secs()).collect();
        assert_eq!(delays, [2, 4, 8, 16, 30]);
        let fixed = RetryPolicy {
            strategy: RetryStrategy::FixedDelay {
                delay: Duration::from_secs(3),
            },
            max_retry_count: -1,
        };
        assert_eq!(retry_delay(&fixed, 40), Duration::from_secs(3));
    }
}

//! The routes the host calls: `GET /` (the start-up probe), `POST /{FunctionName}` (an
//! invocation: decode, run the function in its own task, answer) and the answers themselves.

use std::sync::Arc;
// tokio's clock: a simulation's virtual time, the wall clock otherwise.
use tokio::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use hubhost_telemetry::TraceParent;
use tracing::Instrument;

use super::FunctionServer;
use super::invocation_span::{self, MetricLabels};
use super::registry::{Bound, FunctionStats, Registered};
use crate::context::FunctionContext;
use crate::contract::decode::decode_request;
use crate::contract::response::InvocationResponse;
use crate::function::FunctionError;
use crate::http::{HttpFunction, HttpRequest};
use crate::timer::{TimerFunction, TimerInfo};

pub(super) fn reply(status: StatusCode, body: &InvocationResponse) -> Response {
    let bytes = serde_json::to_vec(body).expect("responses serialize");
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

pub(super) fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    reply(status, &InvocationResponse::error(code, message))
}

pub(super) async fn probe(
    State(server): State<Arc<FunctionServer>>,
    headers: HeaderMap,
) -> Response {
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"));
    if wants_html && let Some(page) = &server.browser_page {
        return page().await;
    }
    let body = json!({"status": "ready", "functions": server.function_names()});
    (StatusCode::OK, axum::Json(body)).into_response()
}

pub(super) async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route: the host calls GET / and POST /{FunctionName}",
    )
}

pub(super) async fn invoke(
    State(server): State<Arc<FunctionServer>>,
    Path(function): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let invocation_id = headers
        .get("x-azure-functions-invocationid")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        // The host always sends one; a request by hand gets one of its own.
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let Some(registered) = server.function(&function) else {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_function",
            format!(
                "no function named '{}' (this handler serves: {})",
                function.chars().take(100).collect::<String>(),
                server.function_names().join(", ")
            ),
        );
    };
    let limit = server.max_body_bytes;
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is over the {limit} byte limit (--max-body-bytes)"),
        )
    };
    let declared_len = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared_len.is_some_and(|n| n > limit) {
        return too_large();
    }
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(e) => {
            let over = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            return if over {
                too_large()
            } else {
                error(
                    StatusCode::BAD_REQUEST,
                    "unreadable_body",
                    format!("cannot read the request body: {e}"),
                )
            };
        }
    };

    let (trigger, implementation) = match &registered.bound {
        Bound::EventHub { trigger, function } => (trigger.clone(), function.clone()),
        Bound::Http {
            binding,
            response,
            function,
        } => {
            return invoke_http(
                registered,
                binding,
                response,
                function.clone(),
                bytes,
                started,
                &invocation_id,
            )
            .await;
        }
        Bound::Timer { binding, function } => {
            return invoke_timer(
                registered,
                binding,
                function.clone(),
                bytes,
                started,
                &invocation_id,
            )
            .await;
        }
    };
    let name = registered.spec.name.clone();
    let counters = registered.stats.declared.clone();
    let id = invocation_id.clone();
    // A host that sends trace context (none does yet for custom handlers) is the parent.
    let incoming = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(TraceParent::parse);
    // What a panicking invocation's span and metrics are finished with, outside its task;
    // only kept when something exports them.
    let on_panic: Option<Arc<std::sync::OnceLock<Traced>>> =
        (hubhost_telemetry::exporting_traces() || hubhost_telemetry::exporting_metrics())
            .then(Default::default);
    let traced_if_panics = on_panic.clone();
    // Decoding and processing run in their own task: a panic there fails this invocation only.
    let task = tokio::spawn(async move {
        let batch = decode_request(&name, &trigger, &bytes).map_err(Failure::Contract)?;
        let span = invocation_span::event_hub_span(&name, &id, incoming, &batch);
        let labels = MetricLabels::of(&name, &batch);
        let partition = batch.partition.partition_id.clone();
        let sequence_numbers = batch.sequence_label();
        let events = batch.events.len() as u64;
        let context = FunctionContext::new(id, &batch, counters);
        let traced = Traced {
            span: span.clone(),
            labels,
            events,
        };
        if let Some(slot) = &traced_if_panics {
            let _ = slot.set(traced.clone());
        }
        // The function's own spans and log lines nest inside the invocation's span.
        match implementation.run(batch, &context).instrument(span).await {
            Ok(mut output) => {
                // Lines logged through the context come first: they were written during the run.
                let mut logs = context.take_logs();
                logs.append(&mut output.logs);
                output.logs = logs;
                Ok((partition, sequence_numbers, output, traced))
            }
            Err(error) => {
                invocation_span::record_failure(&traced.span, &error);
                Err(Failure::Function {
                    error,
                    partition,
                    sequence_numbers,
                    traced,
                })
            }
        }
    });
    let function = registered.spec.name.as_str();
    let stats = &registered.stats;
    let outcome = task.await;
    stats.latency.observe(started.elapsed());
    match outcome {
        Ok(Ok((partition, sequence_numbers, output, traced))) => {
            FunctionStats::count(&stats.ok, 1);
            registered.warn_undeclared(&output);
            FunctionStats::count(&stats.events, traced.events);
            traced.span.in_scope(|| {
                // The span names the function and the invocation.
                tracing::info!(
                    partition = %partition, sequence_numbers = %sequence_numbers,
                    events = traced.events, elapsed_ms = started.elapsed().as_millis() as u64,
                    "batch processed"
                )
            });
            let mut answer = reply(
                StatusCode::OK,
                &InvocationResponse::ok(output.outputs, output.logs, output.return_value),
            );
            traced.finish(started, None, &mut answer);
            answer
        }
        Ok(Err(Failure::Contract(e))) => {
            FunctionStats::count(&stats.bad_request, 1);
            tracing::warn!(function, invocation_id = %invocation_id, code = e.code(), "bad request: {e}");
            error(StatusCode::BAD_REQUEST, e.code(), e.to_string())
        }
        Ok(Err(Failure::Function {
            error: e,
            partition,
            sequence_numbers,
            traced,
        })) => {
            let (status, code) = stats.count_failure(&e);
            traced.span.in_scope(|| {
                tracing::error!(function, partition = %partition, sequence_numbers = %sequence_numbers, invocation_id = %invocation_id, code, "invocation failed: {e}")
            });
            let mut answer = error(status, code, e.to_string());
            traced.finish(started, Some(code), &mut answer);
            answer
        }
        Err(join) => {
            FunctionStats::count(&stats.panicked, 1);
            tracing::error!(function, invocation_id = %invocation_id, "invocation panicked: {join}");
            let mut answer = error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "handler_panic",
                "processing this batch panicked; the handler is still running and the host may retry",
            );
            if let Some(traced) = on_panic.and_then(|slot| slot.get().cloned()) {
                invocation_span::record_error(&traced.span, "handler_panic", &join.to_string());
                traced.finish(started, Some("handler_panic"), &mut answer);
            }
            answer
        }
    }
}

/// An invocation's span and metric labels, carried out of its task to be finished with the
/// answer.
#[derive(Clone)]
pub(super) struct Traced {
    span: tracing::Span,
    labels: Option<MetricLabels>,
    events: u64,
}

impl Traced {
    /// Records the metrics and puts the span's context on the answer as `traceresponse` (read
    /// by `hubhost emulate` to stamp the events the outputs send; ignored by the host).
    fn finish(self, started: Instant, error: Option<&str>, answer: &mut Response) {
        if let Some(labels) = &self.labels {
            invocation_span::record_metrics(labels, self.events, started.elapsed(), error);
        }
        if let Some(context) = hubhost_telemetry::traceparent_of(&self.span)
            && let Ok(value) = header::HeaderValue::from_str(&context.to_string())
        {
            answer.headers_mut().insert("traceresponse", value);
        }
    }
}

/// One invocation of an HTTP-triggered function: the request from `Data.<binding>`, the
/// response into `Outputs.<response>` (or `ReturnValue`).
pub(super) async fn invoke_http(
    registered: &Registered,
    binding: &str,
    response_binding: &str,
    function: Arc<dyn HttpFunction>,
    bytes: bytes::Bytes,
    started: Instant,
    invocation_id: &str,
) -> Response {
    let name = registered.spec.name.as_str();
    let stats = &registered.stats;
    let request = match HttpRequest::from_invocation(&bytes, binding) {
        Ok(r) => r,
        Err(e) => return refused(registered, invocation_id, "bad_http_request", &e),
    };
    let (method, url) = (request.method.clone(), request.url.clone());
    let span = invocation_span::log_span(name, invocation_id);
    let outcome = tokio::spawn(async move { function.call(request).await }.instrument(span)).await;
    stats.latency.observe(started.elapsed());
    match outcome {
        Ok(Ok(response)) => {
            FunctionStats::count(&stats.ok, 1);
            tracing::info!(function = name, %method, status = response.status, elapsed_ms = started.elapsed().as_millis() as u64, invocation_id, "request answered");
            let value = response.to_binding_value();
            let mut answer = InvocationResponse::ok(Default::default(), Vec::new(), Value::Null);
            if response_binding == "$return" {
                answer.return_value = value;
            } else {
                answer.outputs.insert(response_binding.to_string(), value);
            }
            reply(StatusCode::OK, &answer)
        }
        Ok(Err(e)) => {
            let (status, code) = stats.count_failure(&e);
            tracing::error!(function = name, %method, url = %url, invocation_id, code, "invocation failed: {e}");
            error(status, code, e.to_string())
        }
        Err(join) => panicked(registered, invocation_id, &join, "request"),
    }
}

/// One firing of a timer-triggered function: the `TimerInfo` from `Data.<binding>`, the
/// function's outputs and logs in the answer.
pub(super) async fn invoke_timer(
    registered: &Registered,
    binding: &str,
    function: Arc<dyn TimerFunction>,
    bytes: bytes::Bytes,
    started: Instant,
    invocation_id: &str,
) -> Response {
    let name = registered.spec.name.as_str();
    let stats = &registered.stats;
    let timer = match TimerInfo::from_invocation(&bytes, binding) {
        Ok(timer) => timer,
        Err(e) => return refused(registered, invocation_id, "bad_timer_request", &e),
    };
    let past_due = timer.is_past_due;
    let span = invocation_span::log_span(name, invocation_id);
    let outcome = tokio::spawn(async move { function.run(timer).await }.instrument(span)).await;
    stats.latency.observe(started.elapsed());
    match outcome {
        Ok(Ok(output)) => {
            FunctionStats::count(&stats.ok, 1);
            registered.warn_undeclared(&output);
            tracing::info!(
                function = name,
                past_due,
                elapsed_ms = started.elapsed().as_millis() as u64,
                invocation_id,
                "timer fired"
            );
            reply(
                StatusCode::OK,
                &InvocationResponse::ok(output.outputs, output.logs, output.return_value),
            )
        }
        Ok(Err(e)) => {
            let (status, code) = stats.count_failure(&e);
            tracing::error!(
                function = name,
                invocation_id,
                code,
                "invocation failed: {e}"
            );
            error(status, code, e.to_string())
        }
        Err(join) => panicked(registered, invocation_id, &join, "firing"),
    }
}

/// A request that does not carry what the function's trigger promises: 400 with `code`,
/// counted as a bad request.
fn refused(
    registered: &Registered,
    invocation_id: &str,
    code: &'static str,
    problem: &dyn std::fmt::Display,
) -> Response {
    FunctionStats::count(&registered.stats.bad_request, 1);
    tracing::warn!(function = %registered.spec.name, invocation_id, "bad request: {problem}");
    error(StatusCode::BAD_REQUEST, code, problem.to_string())
}

/// A function that panicked on one `what` (a request, a firing): 500 `handler_panic`, counted;
/// the process stays up.
fn panicked(
    registered: &Registered,
    invocation_id: &str,
    join: &tokio::task::JoinError,
    what: &str,
) -> Response {
    FunctionStats::count(&registered.stats.panicked, 1);
    tracing::error!(function = %registered.spec.name, invocation_id, "invocation panicked: {join}");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "handler_panic",
        format!("this {what}'s function panicked; the handler is still running"),
    )
}

pub(super) enum Failure {
    Contract(crate::contract::ContractError),
    Function {
        error: FunctionError,
        partition: String,
        sequence_numbers: String,
        traced: Traced,
    },
}

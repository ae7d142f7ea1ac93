//! The app's HTTP functions (`httpTrigger`), served on one local port as `func start` serves
//! them: at `/{routePrefix}/{route}` (host.json's `extensions.http.routePrefix`, default `api`;
//! the function's `route`, default its name), for the `methods` it lists (all when none).
//!
//! Each request reaches the handler as the Functions host sends it (`DefaultHttpWorkerService`):
//! - with host.json's `customHandler.enableForwardingHttpRequest`, as it came, at its own path,
//!   with the host's headers added and redirects not followed, and the handler's response goes
//!   back as it is;
//! - otherwise as an invocation, `POST /{FunctionName}`, with the request in `Data.<trigger>`
//!   shaped as the host's `HttpRequestExtensions.GetRequestAsJObject` shapes it, and the
//!   response read from the `http` output's value (`Outputs.<name>`, or `ReturnValue` for
//!   `$return`) as `HttpBinding.CreateResult` reads it: `statusCode` (or `status`), `headers`
//!   and `body`, names in any case. The function's other outputs are carried out as for any
//!   trigger, before the response is sent.
//!
//! Like Core Tools locally, no key is asked for, whatever the function's `authLevel`: the start-up
//! lines say which functions need one on Azure. A failed invocation is answered 500 with no
//! body, as the host answers it. The listener assumes a hostile client: at most
//! [`MAX_CONNECTIONS`] at once, a request's header and then its body each within
//! [`READ_DEADLINE`], a body of at most [`MAX_BODY_BYTES`] (Azure takes up to 100 MB); anything
//! else is answered with a JSON error naming the problem.
//!
//! `route` finds the function a path names, `request` builds what the handler gets, and
//! `response` what the client gets; this file listens, forwards and invokes.

mod request;
mod response;
mod route;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response, StatusCode};
use serde_json::Value;

use request::received;
use response::{empty, error, http_response, not_found};
use route::{RouteTemplate, percent_decode, strip_prefix};
use tokio_util::sync::CancellationToken;

use crate::emulate::inputs::InputPlan;
use crate::emulate::outputs::{InvocationOrigin, OutputPlan, OutputSinks};
use crate::emulate::{AppSettings, EmulateError};
use crate::invoker::Invoker;
use hubhost_functions::function_app::{FunctionApp, FunctionSpec, Trigger};

/// The port `func start` serves HTTP functions on.
pub const DEFAULT_HTTP_PORT: u16 = 7071;
/// At most this many connections at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 64;
/// A request's header, and then its body, must arrive within this.
pub const READ_DEADLINE: Duration = Duration::from_secs(10);
/// The largest request body taken.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// How long a handler may take to answer an HTTP function (the host's default
/// `functionTimeout` is longer; a client waits no longer here).
const ANSWER_WAIT: Duration = Duration::from_secs(230);

/// Why an HTTP function cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("route \"{route}\": {problem}")]
    Template { route: String, problem: String },
}

/// The app's HTTP functions, resolved.
pub struct HttpTriggers {
    functions: Vec<HttpFunction>,
    route_prefix: String,
    forwarding: bool,
}

struct HttpFunction {
    name: String,
    /// The trigger binding's name: `Data.<binding>` holds the request.
    binding: String,
    route: RouteTemplate,
    /// Upper-cased; empty: every method.
    methods: Vec<String>,
    auth_level: String,
    /// The `http` output's name, if any.
    response: Option<String>,
    inputs: Arc<InputPlan>,
    outputs: Arc<OutputPlan>,
}

/// One request for an HTTP function, as `hubhost invoke` sends it.
pub struct HttpInvocation {
    /// The invocation request's body.
    pub body: Vec<u8>,
    /// The input bindings' values in it, as sent.
    pub inputs: Vec<(String, Value)>,
    pub outputs: Arc<OutputPlan>,
    /// The `http` output's name, whose value is the response.
    pub response: Option<String>,
}

/// Why a request for an HTTP function cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpInvokeError {
    #[error("{0} has no httpTrigger")]
    NotHttp(String),
    #[error(
        "host.json forwards HTTP requests as they came (enableForwardingHttpRequest or enableProxyingHttpRequest): the handler serves the route itself; call it, or run hubhost emulate and call http://127.0.0.1:7071"
    )]
    Forwarding,
    #[error("the function takes {methods}, not {method}")]
    Method { method: String, methods: String },
    #[error("--path \"{0}\" is not a URL path")]
    Path(String),
    #[error("--path \"{path}\" is not the function's route ({route}; give its parameters' values)")]
    NotItsRoute { path: String, route: String },
    #[error(transparent)]
    Input(crate::emulate::InputError),
}

/// The `http` output `binding`'s value in an answer: `Outputs.<binding>`, or `ReturnValue` for
/// `$return`.
pub fn response_value(answer: &Value, binding: &str) -> Option<Value> {
    if binding == "$return" {
        answer.get("ReturnValue").cloned()
    } else {
        answer.get("Outputs").and_then(|o| o.get(binding)).cloned()
    }
}

/// The HTTP response the host would give the client for the `http` output's `value`:
/// `{"status", "headers", "body"}` (the body as text when it is UTF-8), or the host's reason
/// for failing the invocation instead.
pub async fn response_view(value: Option<Value>) -> Result<Value, String> {
    let response = http_response(value)?;
    let status = response.status().as_u16();
    let headers: serde_json::Map<String, Value> = response
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                Value::from(String::from_utf8_lossy(v.as_bytes()).into_owned()),
            )
        })
        .collect();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Ok(serde_json::json!({
        "status": status,
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    }))
}

impl HttpFunction {
    /// The invocation request the host sends for one HTTP request (`parts`, `body`, the route's
    /// `params`) when it does not forward it: wrapped, its inputs read from the request's
    /// binding data; and those inputs' values.
    async fn wrap(
        &self,
        parts: &hyper::http::request::Parts,
        body: Bytes,
        params: std::collections::BTreeMap<String, String>,
    ) -> Result<(Vec<u8>, Vec<(String, Value)>), crate::emulate::InputError> {
        let host_request = received(parts, body, params);
        let now = chrono::Utc::now();
        let inputs = self
            .inputs
            .read(&host_request.binding_data(&self.name, &now), now)
            .await?;
        let invocation = host_request.encode(&self.name, &self.binding, &inputs, &now);
        Ok((invocation, inputs))
    }
}

impl HttpTriggers {
    /// Each HTTP function's outputs kept in the outbox, with the function's name.
    pub fn kept(&self) -> Vec<(String, crate::emulate::KeptOutput)> {
        self.functions
            .iter()
            .flat_map(|f| f.outputs.kept().into_iter().map(|k| (f.name.clone(), k)))
            .collect()
    }

    /// Every `httpTrigger` function of `specs`, with host.json's route prefix and forwarding.
    pub fn resolve(
        app: &FunctionApp,
        specs: &[FunctionSpec],
        settings: &AppSettings,
        sinks: &OutputSinks,
    ) -> Result<Self, EmulateError> {
        let mut functions = Vec::new();
        for spec in specs {
            let Trigger::Http {
                binding_name,
                route,
                methods,
                auth_level,
            } = &spec.trigger
            else {
                continue;
            };
            let template = route.clone().unwrap_or_else(|| spec.name.clone());
            let route =
                RouteTemplate::parse(&template).map_err(|problem| EmulateError::Function {
                    function: spec.name.clone(),
                    problem: Box::new(super::super::SettingProblem::Route(problem)),
                })?;
            functions.push(HttpFunction {
                name: spec.name.clone(),
                binding: binding_name.clone(),
                route,
                methods: methods.clone(),
                auth_level: auth_level.clone().unwrap_or_else(|| "function".into()),
                response: spec
                    .bindings
                    .iter()
                    .find(|b| b.is("http"))
                    .map(|b| b.name.clone()),
                inputs: Arc::new(InputPlan::resolve(spec, settings)?),
                outputs: Arc::new(OutputPlan::resolve(spec, settings, sinks)?),
            });
        }
        // More literal segments first, as ASP.NET's routing prefers them.
        functions.sort_by_key(|f| std::cmp::Reverse(f.route.literals()));
        let host = &app.host_json;
        let route_prefix = host
            .pointer("/extensions/http/routePrefix")
            .and_then(Value::as_str)
            .unwrap_or("api")
            .trim_matches('/')
            .to_string();
        let handler = host.get("customHandler");
        let forwarding = ["enableForwardingHttpRequest", "enableProxyingHttpRequest"]
            .iter()
            .any(|key| {
                handler
                    .and_then(|h| h.get(*key))
                    .is_some_and(super::flag_is_on)
            });
        let proxying = handler
            .and_then(|h| h.get("enableProxyingHttpRequest"))
            .is_some_and(super::flag_is_on);
        if proxying && !functions.is_empty() {
            // The one way hubhost answers differently here: said once, at start.
            tracing::warn!(
                "host.json proxies HTTP requests (enableProxyingHttpRequest): the Functions host streams the handler's response as it is written (server-sent events reach the browser live); hubhost emulate passes a response on once it is complete"
            );
        }
        Ok(HttpTriggers {
            functions,
            route_prefix,
            forwarding,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }

    /// What the host sends `function` for a request `method path_and_query` with `body` (the
    /// path under the route prefix, e.g. `/api/items/5?x=1`; default the function's route,
    /// which then has no parameters), wrapped as the host wraps it, its inputs read: what
    /// `hubhost invoke` sends. Forwarded requests are not built here: with forwarding on, the
    /// handler serves the route itself.
    pub async fn invocation_for(
        &self,
        function: &str,
        method: Option<&str>,
        path_and_query: Option<&str>,
        body: Bytes,
    ) -> Result<HttpInvocation, HttpInvokeError> {
        let f = self
            .functions
            .iter()
            .find(|f| f.name == function)
            .ok_or_else(|| HttpInvokeError::NotHttp(function.to_string()))?;
        if self.forwarding {
            return Err(HttpInvokeError::Forwarding);
        }
        let method = method
            .map(str::to_ascii_uppercase)
            .or_else(|| f.methods.first().cloned())
            .unwrap_or_else(|| "GET".into());
        if !f.methods.is_empty() && !f.methods.contains(&method) {
            return Err(HttpInvokeError::Method {
                method,
                methods: f.methods.join(","),
            });
        }
        let target = match path_and_query {
            Some(p) => format!("/{}", p.trim_start_matches('/')),
            None => format!("/{}", self.path_of(&f.route)),
        };
        let uri: hyper::Uri = format!("http://localhost:7071{target}")
            .parse()
            .map_err(|_| HttpInvokeError::Path(target.clone()))?;
        let route_path = strip_prefix(uri.path(), &self.route_prefix)
            .ok_or_else(|| HttpInvokeError::Path(target.clone()))?;
        let segments: Vec<String> = route_path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect();
        let params = f
            .route
            .matches(&segments)
            .ok_or_else(|| HttpInvokeError::NotItsRoute {
                path: target.clone(),
                route: self.path_of(&f.route),
            })?;
        let (parts, ()) = Request::builder()
            .method(method.as_str())
            .uri(uri)
            .header(hyper::header::HOST, "localhost:7071")
            .body(())
            .map_err(|_| HttpInvokeError::Path(target.clone()))?
            .into_parts();
        let (body, inputs) = f
            .wrap(&parts, body, params)
            .await
            .map_err(HttpInvokeError::Input)?;
        Ok(HttpInvocation {
            body,
            inputs,
            outputs: f.outputs.clone(),
            response: f.response.clone(),
        })
    }

    /// One line per function: its methods and URL at `addr`, and what differs from Azure.
    pub fn describe(&self, addr: SocketAddr) -> Vec<String> {
        self.functions
            .iter()
            .map(|f| {
                let methods = if f.methods.is_empty() {
                    "any method".to_string()
                } else {
                    f.methods.join(",")
                };
                let mut line = format!(
                    "  {} ← HTTP {methods} http://{addr}/{}",
                    f.name,
                    self.path_of(&f.route)
                );
                if !f.auth_level.eq_ignore_ascii_case("anonymous") {
                    line.push_str(&format!(
                        " (authLevel {}: no key asked locally, as with func start; Azure asks for one)",
                        f.auth_level
                    ));
                }
                line
            })
            .collect()
    }

    fn path_of(&self, route: &RouteTemplate) -> String {
        match (self.route_prefix.as_str(), route.text.as_str()) {
            ("", route) => route.to_string(),
            (prefix, route) => format!("{prefix}/{route}"),
        }
    }

    /// Serves the functions on `listener` until `stop`.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        invoker: Invoker,
        stop: CancellationToken,
    ) {
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        loop {
            let slot = tokio::select! {
                slot = slots.clone().acquire_owned() => match slot { Ok(s) => s, Err(_) => return },
                () = stop.cancelled() => return,
            };
            let stream = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        // Out of descriptors, say: transient, never fatal.
                        tracing::debug!(%error, "the HTTP functions' listener could not accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = stop.cancelled() => return,
            };
            let (triggers, invoker) = (self.clone(), invoker.clone());
            let service = hyper::service::service_fn(move |request| {
                let (triggers, invoker) = (triggers.clone(), invoker.clone());
                async move { Ok::<_, Infallible>(triggers.answer(request, &invoker).await) }
            });
            let stop = stop.clone();
            tokio::spawn(async move {
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(READ_DEADLINE)
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                tokio::select! {
                    _ = connection => {}
                    () = stop.cancelled() => {}
                }
                drop(slot);
            });
        }
    }

    async fn answer(
        &self,
        request: Request<hyper::body::Incoming>,
        invoker: &Invoker,
    ) -> Response<Full<Bytes>> {
        let path = request.uri().path().to_string();
        let method = request.method().as_str().to_ascii_uppercase();
        let Some(route_path) = strip_prefix(&path, &self.route_prefix) else {
            return not_found(&path);
        };
        let segments: Vec<String> = route_path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect();
        let found = self.functions.iter().find_map(|f| {
            let params = f.route.matches(&segments)?;
            (f.methods.is_empty() || f.methods.contains(&method)).then_some((f, params))
        });
        let Some((function, params)) = found else {
            return not_found(&path);
        };
        let (parts, body) = request.into_parts();
        let body =
            match tokio::time::timeout(READ_DEADLINE, Limited::new(body, MAX_BODY_BYTES).collect())
                .await
            {
                Err(_) => {
                    return error(
                        StatusCode::REQUEST_TIMEOUT,
                        "body_too_slow",
                        "the request body did not arrive in time",
                    );
                }
                Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
                    return error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "body_too_large",
                        &format!("a request body is at most {MAX_BODY_BYTES} bytes here"),
                    );
                }
                Ok(Err(e)) => {
                    return error(StatusCode::BAD_REQUEST, "unreadable_body", &e.to_string());
                }
                Ok(Ok(body)) => body.to_bytes(),
            };
        let invocation_id = uuid::Uuid::new_v4().to_string();
        if self.forwarding {
            return forward(invoker, &invocation_id, &parts, body, &function.name).await;
        }
        let invocation = match function.wrap(&parts, body, params).await {
            Ok((invocation, _)) => invocation,
            Err(e) => {
                tracing::error!(function = %function.name, error = %e, "an input of the HTTP function failed");
                return empty(StatusCode::INTERNAL_SERVER_ERROR);
            }
        };
        let answered = tokio::time::timeout(
            ANSWER_WAIT,
            invoker.invoke_as(&function.name, &invocation_id, invocation, None),
        )
        .await;
        let answer = match answered {
            Ok(Ok(answer)) if answer.succeeded() => answer,
            Ok(Ok(answer)) => {
                let reason = answer.refused.map(|r| r.message).unwrap_or_default();
                tracing::error!(function = %function.name, %reason, "the HTTP function failed");
                return empty(StatusCode::INTERNAL_SERVER_ERROR);
            }
            Ok(Err(e)) => {
                tracing::error!(function = %function.name, error = %e, "the HTTP function got no answer from the handler");
                return empty(StatusCode::INTERNAL_SERVER_ERROR);
            }
            Err(_) => {
                tracing::error!(function = %function.name, wait = ?ANSWER_WAIT, "the handler did not answer the HTTP function in time");
                return empty(StatusCode::INTERNAL_SERVER_ERROR);
            }
        };
        let origin = InvocationOrigin::without_events(&function.name, &invocation_id);
        if let Err(e) = function
            .outputs
            .carry_out(&answer.body, &origin, answer.trace_context.as_deref(), None)
            .await
        {
            tracing::error!(function = %function.name, error = %e, "an output of the HTTP function failed");
            return empty(StatusCode::INTERNAL_SERVER_ERROR);
        }
        let value = function
            .response
            .as_deref()
            .and_then(|name| response_value(&answer.body, name));
        match http_response(value) {
            Ok(response) => response,
            Err(problem) => {
                tracing::error!(function = %function.name, %problem, "the HTTP function's response cannot be read");
                empty(StatusCode::INTERNAL_SERVER_ERROR)
            }
        }
    }
}

/// The listener for the app's HTTP functions: on `port` (0: any free one), else on 7071 as
/// `func start`, or on a free port when 7071 is taken (another instance of the app, say),
/// with a warning.
pub async fn listen(port: Option<u16>) -> Result<tokio::net::TcpListener, EmulateError> {
    let bind = |port: u16| tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)));
    match port {
        Some(port) => bind(port)
            .await
            .map_err(|source| EmulateError::HttpListen { port, source }),
        None => match bind(DEFAULT_HTTP_PORT).await {
            Ok(listener) => Ok(listener),
            Err(e) => {
                eprintln!(
                    "hubhost emulate: warning: port {DEFAULT_HTTP_PORT} is taken ({e}): the HTTP functions are served on another port (--http-port chooses)"
                );
                bind(0)
                    .await
                    .map_err(|source| EmulateError::HttpListen { port: 0, source })
            }
        },
    }
}

/// The request sent on as it came, and the handler's response back as it is.
async fn forward(
    invoker: &Invoker,
    invocation_id: &str,
    parts: &hyper::http::request::Parts,
    body: Bytes,
    function: &str,
) -> Response<Full<Bytes>> {
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &parts.headers {
        if name != hyper::header::HOST && name != hyper::header::CONTENT_LENGTH {
            headers.append(name.clone(), value.clone());
        }
    }
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let method = parts.method.clone();
    let answered = tokio::time::timeout(
        ANSWER_WAIT,
        invoker.forward(invocation_id, method, path_and_query, headers, body),
    )
    .await;
    let response = match answered {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => {
            tracing::error!(%function, error = %e, "the HTTP function got no answer from the handler");
            return empty(StatusCode::INTERNAL_SERVER_ERROR);
        }
        Err(_) => {
            tracing::error!(%function, wait = ?ANSWER_WAIT, "the handler did not answer the HTTP function in time");
            return empty(StatusCode::INTERNAL_SERVER_ERROR);
        }
    };
    let mut out = Response::builder().status(response.status());
    for (name, value) in response.headers() {
        if name != hyper::header::CONTENT_LENGTH && name != hyper::header::TRANSFER_ENCODING {
            out = out.header(name, value);
        }
    }
    match response.bytes().await {
        Ok(bytes) => out
            .body(Full::new(bytes))
            .unwrap_or_else(|_| empty(StatusCode::INTERNAL_SERVER_ERROR)),
        Err(e) => {
            tracing::error!(%function, error = %e, "the handler's response ended early");
            empty(StatusCode::INTERNAL_SERVER_ERROR)
        }
    }
}

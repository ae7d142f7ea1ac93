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

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response, StatusCode};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

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
    outputs: Arc<OutputPlan>,
}

impl HttpTriggers {
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
            .any(|key| handler.and_then(|h| h.get(*key)).is_some_and(truthy));
        Ok(HttpTriggers {
            functions,
            route_prefix,
            forwarding,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
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
        let received = ReceivedRequest::new(&parts, body, params);
        let invocation = received.invocation(&function.name, &function.binding);
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
        let origin = InvocationOrigin {
            function: &function.name,
            invocation_id: &invocation_id,
            partition_id: "",
            sequence_numbers: None,
        };
        if let Err(e) = function
            .outputs
            .carry_out(&answer.body, &origin, answer.trace_context.as_deref(), None)
            .await
        {
            tracing::error!(function = %function.name, error = %e, "an output of the HTTP function failed");
            return empty(StatusCode::INTERNAL_SERVER_ERROR);
        }
        let value = function.response.as_deref().and_then(|name| {
            if name == "$return" {
                answer.body.get("ReturnValue").cloned()
            } else {
                answer
                    .body
                    .get("Outputs")
                    .and_then(|o| o.get(name))
                    .cloned()
            }
        });
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

/// A host.json flag as the configuration binder reads it: `true`, or the text `"true"`.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Bool(b) => *b,
        Value::String(s) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

/// The rest of `path` after `/{prefix}` (a whole segment), or `None` outside it.
fn strip_prefix<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let path = path.trim_start_matches('/');
    if prefix.is_empty() {
        return Some(path);
    }
    let (first, rest) = path.split_once('/').unwrap_or((path, ""));
    first.eq_ignore_ascii_case(prefix).then_some(rest)
}

fn percent_decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

/// A route template: literal segments and `{name}` parameters (`{name:constraint}`,
/// `{name?}` last, `{*name}` catching the rest), matched as ASP.NET matches them, literals in
/// any case.
#[derive(Debug, Clone, PartialEq)]
struct RouteTemplate {
    text: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Literal(String),
    Parameter {
        name: String,
        constraint: Option<String>,
        optional: bool,
        catch_all: bool,
    },
}

impl RouteTemplate {
    fn parse(template: &str) -> Result<Self, RouteError> {
        let text = template.trim_matches('/').to_string();
        let bad = |problem: &str| RouteError::Template {
            route: template.to_string(),
            problem: problem.to_string(),
        };
        let mut segments = Vec::new();
        let parts: Vec<&str> = text.split('/').filter(|s| !s.is_empty()).collect();
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let segment = match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Some(inner) => {
                    let (catch_all, inner) = match inner.strip_prefix('*') {
                        Some(rest) => (true, rest.trim_start_matches('*')),
                        None => (false, inner),
                    };
                    let (name, constraint) = match inner.split_once(':') {
                        Some((n, c)) => (n, Some(c.to_ascii_lowercase())),
                        None => (inner, None),
                    };
                    let (name, optional) = match name.strip_suffix('?') {
                        Some(n) => (n, true),
                        None => (name, false),
                    };
                    if name.is_empty() {
                        return Err(bad("a parameter without a name"));
                    }
                    if (optional || catch_all) && !last {
                        return Err(bad(
                            "an optional or catch-all parameter must be the last segment",
                        ));
                    }
                    Segment::Parameter {
                        name: name.to_string(),
                        constraint,
                        optional: optional || catch_all,
                        catch_all,
                    }
                }
                None if part.contains('{') || part.contains('}') => {
                    return Err(bad("a parameter must be a whole segment here"));
                }
                None => Segment::Literal(part.to_string()),
            };
            segments.push(segment);
        }
        Ok(RouteTemplate { text, segments })
    }

    fn literals(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| matches!(s, Segment::Literal(_)))
            .count()
    }

    /// The route's parameters when `path` (decoded segments) matches it.
    fn matches(&self, path: &[String]) -> Option<BTreeMap<String, String>> {
        let mut params = BTreeMap::new();
        for (i, segment) in self.segments.iter().enumerate() {
            match segment {
                Segment::Literal(text) => {
                    if !path.get(i)?.eq_ignore_ascii_case(text) {
                        return None;
                    }
                }
                Segment::Parameter {
                    name,
                    constraint,
                    optional,
                    catch_all,
                } => {
                    let value = if *catch_all {
                        path.get(i..).map(|rest| rest.join("/")).unwrap_or_default()
                    } else {
                        match path.get(i) {
                            Some(v) => v.clone(),
                            None if *optional => continue,
                            None => return None,
                        }
                    };
                    if !value.is_empty() && !satisfies(constraint.as_deref(), &value) {
                        return None;
                    }
                    if !value.is_empty() {
                        params.insert(name.clone(), value);
                    }
                    if *catch_all {
                        return Some(params);
                    }
                }
            }
        }
        (path.len() <= self.segments.len()).then_some(params)
    }
}

/// ASP.NET's common route constraints; others are not checked.
fn satisfies(constraint: Option<&str>, value: &str) -> bool {
    match constraint {
        Some("int") => value.parse::<i32>().is_ok(),
        Some("long") => value.parse::<i64>().is_ok(),
        Some("bool") => value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false"),
        Some("alpha") => value.chars().all(|c| c.is_ascii_alphabetic()),
        Some("guid") => uuid::Uuid::parse_str(value).is_ok(),
        Some("double") | Some("float") | Some("decimal") => value.parse::<f64>().is_ok(),
        _ => true,
    }
}

/// One request as the host reads it before it invokes the function.
struct ReceivedRequest {
    url: String,
    method: String,
    /// The last value of each name is not what the host keeps: it joins repeats with `,`.
    query: Map<String, Value>,
    /// Each header with its values, named as Kestrel names the common ones.
    headers: Map<String, Value>,
    params: BTreeMap<String, String>,
    body: Option<Value>,
}

impl ReceivedRequest {
    fn new(
        parts: &hyper::http::request::Parts,
        body: Bytes,
        params: BTreeMap<String, String>,
    ) -> Self {
        let host = parts
            .headers
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut query: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in form_pairs(parts.uri.query().unwrap_or("")) {
            query.entry(name).or_default().push(value);
        }
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in &parts.headers {
            headers
                .entry(kestrel_name(name.as_str()))
                .or_default()
                .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
        }
        let content_type = parts
            .headers
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        // The host reads a body only when there is one; octet-stream and multipart bodies as
        // bytes (Newtonsoft writes those in base64), any other as text.
        let body = (!body.is_empty()).then(|| {
            if content_type.starts_with("application/octet-stream")
                || content_type.starts_with("multipart/")
            {
                use base64::Engine;
                Value::from(base64::engine::general_purpose::STANDARD.encode(&body))
            } else {
                Value::from(String::from_utf8_lossy(&body).into_owned())
            }
        });
        ReceivedRequest {
            url: format!("http://{host}{path_and_query}"),
            method: parts.method.as_str().to_string(),
            query: query
                .into_iter()
                .map(|(k, v)| (k, Value::from(v.join(","))))
                .collect(),
            headers: headers
                .into_iter()
                .map(|(k, v)| (k, Value::from(v)))
                .collect(),
            params,
            body,
        }
    }

    /// The invocation request: `Data.<binding>` the request, `Metadata` its binding data
    /// (each query parameter and route parameter, `Query`, `Headers`, `sys`), strings in
    /// `Metadata` written as JSON text, as the host writes every non-object value there.
    fn invocation(&self, function: &str, binding: &str) -> Vec<u8> {
        let params: Map<String, Value> = self
            .params
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.clone())))
            .collect();
        let mut request = json!({
            "Url": self.url,
            "Method": self.method,
            "Query": self.query,
            "Headers": self.headers,
            "Params": params,
            "Identities": [],
        });
        if let Some(body) = &self.body {
            request["Body"] = body.clone();
        }
        let joined_headers: Map<String, Value> = self
            .headers
            .iter()
            .map(|(k, v)| {
                let values: Vec<&str> = v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                (k.clone(), Value::from(values.join(",")))
            })
            .collect();
        let mut metadata = Map::new();
        // Query parameters, then route parameters (which win), each under its own name.
        for (name, value) in self.query.iter().chain(params.iter()) {
            metadata.insert(name.clone(), Value::from(value.to_string()));
        }
        metadata.insert("Query".into(), Value::Object(self.query.clone()));
        metadata.insert("Headers".into(), Value::Object(joined_headers));
        metadata.insert(
            "sys".into(),
            json!({
                "MethodName": function,
                "UtcNow": hubhost_trigger::time::dotnet_utc_now(&Utc::now()),
                "RandGuid": uuid::Uuid::new_v4().to_string(),
            }),
        );
        let mut data = Map::new();
        data.insert(binding.to_string(), request);
        serde_json::to_vec(&json!({"Data": data, "Metadata": metadata})).expect("JSON")
    }
}

/// `a=1&b=x+y` as pairs, `+` and `%XX` decoded as a form is.
fn form_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| percent_decode(&s.replace('+', " "));
            (decode(name), decode(value))
        })
        .collect()
}

/// A header name as Kestrel gives it: hyper lowers every name, Kestrel keeps the common ones
/// in their usual case (`Content-Type`, `User-Agent`), approximated here for all.
fn kestrel_name(lower: &str) -> String {
    lower
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// The HTTP response from the `http` output's value, as the host builds it
/// (`HttpScriptInvocationResultExtensions.GetHttpOutputBindingResponse`, then
/// `HttpBinding.CreateResult` and `RawScriptResult`): `statusCode` or `status` (a number, or
/// text holding one; 200 otherwise), `headers` (each value as its text; `content-type` sets the
/// type) and `body` (text as it is, other JSON as its text). No value answers 200 with `{}`.
fn http_response(value: Option<Value>) -> Result<Response<Full<Bytes>>, String> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(with_body(
            StatusCode::OK,
            "application/json; charset=utf-8",
            b"{}".to_vec(),
            &[],
        ));
    };
    // The host deserializes the value's text into its response type: a value that is not an
    // object (or text holding one) fails the invocation.
    let object = match value {
        Value::Object(o) => o,
        Value::String(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(o)) => o,
            _ => {
                return Err(
                    "the http output is not an object with statusCode, headers and body".into(),
                );
            }
        },
        _ => {
            return Err(
                "the http output is not an object with statusCode, headers and body".into(),
            );
        }
    };
    let get = |key: &str| {
        object
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
            .filter(|v| !v.is_null())
    };
    let status = get("statusCode")
        .or_else(|| get("status"))
        .and_then(|s| match s {
            Value::Number(n) => n.as_u64(),
            Value::String(t) => t.trim().parse().ok(),
            _ => None,
        })
        .map_or(Ok(StatusCode::OK), |code| {
            u16::try_from(code)
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .ok_or_else(|| format!("status code {code} is not an HTTP status"))
        })?;
    let mut headers = Vec::new();
    let mut content_type = None;
    if let Some(Value::Object(given)) = get("headers") {
        for (name, value) in given {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Null => {
                    if name.eq_ignore_ascii_case("content-type") {
                        return Err("content-type header cannot be null".into());
                    }
                    String::new()
                }
                other => other.to_string(),
            };
            if name.eq_ignore_ascii_case("content-type") {
                content_type = Some(text);
            } else {
                headers.push((name.clone(), text));
            }
        }
    }
    let (default_type, body) = match get("body") {
        None => ("text/plain; charset=utf-8", Vec::new()),
        Some(Value::String(text)) => ("text/plain; charset=utf-8", text.clone().into_bytes()),
        Some(other) => (
            "application/json; charset=utf-8",
            other.to_string().into_bytes(),
        ),
    };
    let content_type = content_type.unwrap_or_else(|| default_type.to_string());
    Ok(with_body(status, &content_type, body, &headers))
}

fn with_body(
    status: StatusCode,
    content_type: &str,
    body: Vec<u8>,
    headers: &[(String, String)],
) -> Response<Full<Bytes>> {
    let mut response = Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, content_type);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            hyper::header::HeaderValue::from_str(value),
        ) {
            response = response.header(name, value);
        }
    }
    response
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| empty(StatusCode::INTERNAL_SERVER_ERROR))
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

fn not_found(path: &str) -> Response<Full<Bytes>> {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("no HTTP function of the app serves {path} for this method"),
    )
}

fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    let body = json!({"error": code, "message": message}).to_string();
    with_body(status, "application/json", body.into_bytes(), &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(path: &str) -> Vec<String> {
        path.split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn routes_match_as_aspnet_matches_them() {
        let route = RouteTemplate::parse("items/{id:int}/{part?}").unwrap();
        let params = route.matches(&segments("Items/7/tail")).unwrap();
        assert_eq!(params["id"], "7");
        assert_eq!(params["part"], "tail");
        assert!(route.matches(&segments("items/7")).is_some());
        assert!(
            route.matches(&segments("items/x")).is_none(),
            "int constraint"
        );
        assert!(route.matches(&segments("items")).is_none());
        assert!(route.matches(&segments("items/7/a/b")).is_none());
        let all = RouteTemplate::parse("dashboard/{*path}").unwrap();
        assert_eq!(
            all.matches(&segments("dashboard/a/b.js")).unwrap()["path"],
            "a/b.js"
        );
        assert!(all.matches(&segments("dashboard")).unwrap().is_empty());
        assert!(RouteTemplate::parse("a/{*rest}/b").is_err());
        assert!(RouteTemplate::parse("a/x{y}").is_err());
        assert_eq!(strip_prefix("/api/Health", "api"), Some("Health"));
        assert_eq!(strip_prefix("/apis/Health", "api"), None);
        assert_eq!(strip_prefix("/Health", ""), Some("Health"));
    }

    #[test]
    fn the_response_is_read_as_the_host_reads_it() {
        let read = |v: Value| {
            let r = http_response(Some(v)).unwrap();
            let ct = r.headers()[hyper::header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .to_string();
            (r.status().as_u16(), ct)
        };
        assert_eq!(
            read(json!({"statusCode": "201", "body": "made"})),
            (201, "text/plain; charset=utf-8".into())
        );
        assert_eq!(
            read(json!({"StatusCode": 404, "Body": {"a": 1}})),
            (404, "application/json; charset=utf-8".into())
        );
        assert_eq!(
            read(json!({"body": "x", "headers": {"Content-Type": "text/html"}})).1,
            "text/html"
        );
        // Text holding the object is read the same way; anything else fails the invocation.
        assert_eq!(read(json!("{\"status\": 202, \"body\": \"\"}")).0, 202);
        assert!(http_response(Some(json!("plain text"))).is_err());
        assert!(http_response(Some(json!([1]))).is_err());
        assert_eq!(http_response(None).unwrap().status(), StatusCode::OK);
    }

    #[test]
    fn queries_and_headers_are_named_as_the_host_names_them() {
        assert_eq!(
            form_pairs("name=Ada+L&x=%2F&flag"),
            [
                ("name".to_string(), "Ada L".to_string()),
                ("x".into(), "/".into()),
                ("flag".into(), "".into())
            ]
        );
        assert_eq!(kestrel_name("content-type"), "Content-Type");
        assert_eq!(kestrel_name("x-ms-client"), "X-Ms-Client");
    }
}

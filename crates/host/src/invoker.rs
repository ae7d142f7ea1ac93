//! Calls a custom handler the way the Functions host does (docs/host-contract.md §1–3):
//! poll `GET /` every 25 ms until anything answers, then `POST /{FunctionName}` with the host's
//! headers and JSON body, sent chunked as .NET sends an `ObjectContent`; and reads the answer
//! as the host reads it ([`read_answer`]). Used by the emulated host (`emulate`), `invoke`,
//! the demo, the benchmark and the tests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The host version we present ourselves as (a 2024 Functions v4 host).
pub const HOST_VERSION: &str = "4.1037.0.0";

#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("the custom handler at {0} did not start within {1:?}")]
    NotReady(String, Duration),
    /// No answer: the handler refused the connection, or the connection ended before a whole
    /// response came back (the process died or is restarting). The function's outcome is
    /// unknown, so this is not a function failure: the caller delivers the batch again.
    #[error("the custom handler gave no answer: {0}")]
    NoAnswer(String),
}

#[derive(Debug, Clone)]
pub struct Invocation {
    pub status: u16,
    /// The answer's body as JSON (its `Outputs`, `Logs` and `ReturnValue` under those names,
    /// however the handler cased them); `null` when it is not a JSON object.
    pub body: Value,
    /// Why the host fails this invocation; `None` when it succeeded.
    pub refused: Option<HostFailure>,
    /// The handler's `traceresponse` header: its invocation span's context (W3C
    /// `traceparent` form), when it exports traces. The host ignores it; the emulated host
    /// stamps the events an `eventHub` output sends with it.
    pub trace_context: Option<String>,
}

impl Invocation {
    /// Whether the host takes the answer: a 2xx status with a body it can read.
    pub fn succeeded(&self) -> bool {
        self.refused.is_none()
    }
}

/// Why the host fails an invocation: the exception it raises (its .NET class) and its
/// message, the words it logs. The next attempt's `RetryContext` carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostFailure {
    /// For an answer: `System.Net.Http.HttpRequestException` for a non-2xx status, else
    /// `System.InvalidOperationException`; `System.Exception` for any other failure.
    pub exception_class: &'static str,
    pub message: String,
}

impl HostFailure {
    fn new(exception_class: &'static str, message: String) -> Self {
        HostFailure {
            exception_class,
            message,
        }
    }

    /// A failure that is not about the answer (an output the host could not carry out, a
    /// batch it could not bind).
    pub fn other(message: String) -> Self {
        HostFailure::new("System.Exception", message)
    }

    /// An invocation that outlived host.json's `functionTimeout`, in the WebJobs SDK's words
    /// (`FunctionExecutor.TryHandleTimeoutAsync`).
    pub fn timeout(limit: std::time::Duration, function: &str) -> Self {
        HostFailure::new(
            "Microsoft.Azure.WebJobs.Host.FunctionTimeoutException",
            format!(
                "Timeout value of {} was exceeded by function: Functions.{function}",
                hubhost_trigger::time::dotnet_timespan(limit)
            ),
        )
    }
}

/// `invocation`'s outcome, or the `functionTimeout` it outlived (`Err`); without a limit it
/// may take as long as it takes.
pub async fn within_function_timeout<T>(
    limit: Option<Duration>,
    invocation: impl std::future::Future<Output = T>,
) -> Result<T, Duration> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, invocation)
            .await
            .map_err(|_| limit),
        None => Ok(invocation.await),
    }
}

impl std::fmt::Display for HostFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The members of the host's `HttpScriptInvocationResult`, which Newtonsoft matches however
/// they are cased.
const RESULT_MEMBERS: [&str; 3] = ["Outputs", "Logs", "ReturnValue"];

/// An answer as the host's `DefaultHttpWorkerService` reads it (pure): a status outside 2xx
/// fails the invocation, its body unread (`EnsureSuccessStatusCode`); a 2xx body is read by
/// the JSON formatter, which takes only `application/json` and `text/json` and needs an
/// object; anything else fails with "Invalid HttpResponseMessage" and the body. An empty body
/// or `null` gives the host no result at all: on Azure the invocation then waits until
/// `functionTimeout`; here it fails at once, saying so.
///
/// ```
/// use hubhost_host::invoker::read_answer;
///
/// let (body, refused) = read_answer(200, Some("application/json"), br#"{"outputs":{"o":1}}"#);
/// assert_eq!((body["Outputs"]["o"].as_i64(), refused), (Some(1), None));
/// let (_, refused) = read_answer(200, Some("text/plain"), b"{}");
/// assert!(refused.unwrap().message.starts_with("Invalid HttpResponseMessage"));
/// let refused = read_answer(500, Some("application/json"), b"{}").1.unwrap();
/// assert_eq!(refused.message, "Response status code does not indicate success: 500 (Internal Server Error).");
/// assert_eq!(refused.exception_class, "System.Net.Http.HttpRequestException");
/// ```
pub fn read_answer(
    status: u16,
    content_type: Option<&str>,
    bytes: &[u8],
) -> (Value, Option<HostFailure>) {
    let parsed = serde_json::from_slice::<Value>(bytes).ok();
    let body = match parsed {
        Some(Value::Object(members)) => Value::Object(with_result_names(members)),
        _ => Value::Null,
    };
    if !(200..300).contains(&status) {
        let reason = reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        return (
            body,
            Some(HostFailure::new(
                "System.Net.Http.HttpRequestException",
                format!("Response status code does not indicate success: {status} ({reason})."),
            )),
        );
    }
    let media_type = content_type
        .and_then(|c| c.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase());
    let readable = matches!(
        media_type.as_deref(),
        Some("application/json" | "text/json")
    );
    let text = String::from_utf8_lossy(bytes);
    if readable && (text.trim().is_empty() || text.trim() == "null") {
        return (
            body,
            Some(HostFailure::new(
                INVALID,
                format!(
                    "the handler answered {status} with {}: the Functions host gets no result from it and waits for the invocation until functionTimeout, then fails it and restarts the handler; hubhost fails it now. Answer a JSON object, even {{}}",
                    if text.trim().is_empty() {
                        "an empty body"
                    } else {
                        "null"
                    }
                ),
            )),
        );
    }
    if !readable || !body.is_object() {
        let shown = match media_type.as_deref() {
            Some(m) => format!("Content-Type: {m}"),
            None => "no Content-Type".to_string(),
        };
        return (
            body,
            Some(HostFailure::new(
                INVALID,
                format!("Invalid HttpResponseMessage:\nStatusCode: {status}, {shown}\n {text}"),
            )),
        );
    }
    (body, None)
}

/// The exception of an answer the host cannot take a result from.
const INVALID: &str = "System.InvalidOperationException";

/// `members` with `Outputs`, `Logs` and `ReturnValue` under those names, as Newtonsoft binds
/// them: a member matching one ignoring case sets it, and a later one sets it again.
fn with_result_names(members: serde_json::Map<String, Value>) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    for (name, value) in members {
        match RESULT_MEMBERS
            .iter()
            .find(|m| m.eq_ignore_ascii_case(&name))
        {
            Some(member) => out.insert(member.to_string(), value),
            None => out.insert(name, value),
        };
    }
    out
}

/// The headers the host sends with an invocation, besides its framing.
fn host_headers(invocation_id: &str) -> [(&'static str, String); 4] {
    [
        ("Content-Type", "application/json; charset=utf-8".into()),
        ("X-Azure-Functions-HostVersion", HOST_VERSION.into()),
        ("X-Azure-Functions-InvocationId", invocation_id.into()),
        ("User-Agent", format!("Azure-Functions-Host/{HOST_VERSION}")),
    ]
}

/// Clones share one handler address: [`Invoker::retarget`] moves every clone to a handler
/// restarted on another port.
#[derive(Clone)]
pub struct Invoker {
    /// A handler in this process (a simulation's): its routes called without a socket.
    direct: Option<InProcess>,
    /// Made on first use: building a client reads the system's root certificates, which a
    /// simulation's invoker — one per instance and seed, never on a socket — would pay for
    /// thousands of times.
    http: Arc<std::sync::OnceLock<reqwest::Client>>,
    /// For HTTP requests forwarded as they came: the host turns redirects off then
    /// (`AllowAutoRedirect = !EnableForwardingHttpRequest`), so the client gets the handler's.
    forwarding: Arc<std::sync::OnceLock<reqwest::Client>>,
    base: std::sync::Arc<std::sync::RwLock<String>>,
    /// Whether invocations go out now (false while the host restarts the handler): shared by
    /// every clone.
    accepting: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Invoker {
    /// `base` is like `http://127.0.0.1:7071`.
    pub fn new(base: &str) -> Self {
        Invoker {
            direct: None,
            http: Arc::default(),
            forwarding: Arc::default(),
            base: std::sync::Arc::new(std::sync::RwLock::new(
                base.trim_end_matches('/').to_string(),
            )),
            accepting: Arc::new(tokio::sync::watch::channel(true).0),
        }
    }

    /// Holds the invocations that wait in [`Invoker::accepting`] until [`Invoker::accept`]:
    /// while the host restarts the handler after a function timeout, an invocation (a retry,
    /// another partition's batch) waits for the new handler, as the Functions host waits for its
    /// new worker, instead of failing against a handler that is not listening yet.
    pub fn hold(&self) {
        self.accepting.send_replace(false);
    }

    /// Lets held invocations go (see [`Invoker::hold`]).
    pub fn accept(&self) {
        self.accepting.send_replace(true);
    }

    /// Returns once invocations go out (at once unless [`Invoker::hold`] holds them).
    pub async fn accepting(&self) {
        let mut open = self.accepting.subscribe();
        // The sender lives as long as this invoker: the wait ends with `accept`.
        let _ = open.wait_for(|accepting| *accepting).await;
    }

    fn http(&self) -> &reqwest::Client {
        self.http.get_or_init(|| {
            reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("HTTP client builds")
        })
    }

    fn forwarding(&self) -> &reqwest::Client {
        self.forwarding.get_or_init(|| {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("HTTP client builds")
        })
    }

    /// A handler called directly rather than over a socket this invoker opens: a framework
    /// server's routes in this process ([`Routes`]), or a simulation's handler process whose
    /// every request holds the simulation's clock. The same encoding, the same reading of the
    /// answer.
    pub fn direct(handler: Arc<dyn DirectHandler>) -> Self {
        let mut invoker = Invoker::new("http://in-process");
        invoker.direct = Some(InProcess {
            handler,
            kills: Arc::new(tokio::sync::watch::channel(0).0),
            in_flight: Arc::default(),
            kill_next: Arc::default(),
        });
        invoker
    }

    /// Kills a direct handler as a process is killed, and starts it again (a new process:
    /// nothing the old one held in memory). Every invocation under way ends with no answer
    /// ([`InvokeError::NoAnswer`]). With none under way — a simulation's invocation takes no
    /// virtual time, so a kill would never find one — the next invocation runs and its answer
    /// is lost: the process died after the function's work, before the host read the answer,
    /// the case that costs most.
    pub fn kill_direct(&self) {
        if let Some(direct) = &self.direct {
            direct.handler.restart();
            if direct.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                direct.kills.send_modify(|kills| *kills += 1);
            } else {
                direct
                    .kill_next
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    /// The handler's address, like `http://127.0.0.1:7071`.
    pub fn base(&self) -> String {
        self.base.read().expect("invoker base lock").clone()
    }

    /// `path` at the handler's address, formatted under the lock (no copy of the address).
    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base.read().expect("invoker base lock"))
    }

    /// An HTTP function's request sent to the handler as it came (host.json's
    /// `enableForwardingHttpRequest`): its method, `path_and_query`, headers and body, with
    /// the host's own headers added, as `DefaultHttpWorkerService` forwards it.
    pub async fn forward(
        &self,
        invocation_id: &str,
        method: reqwest::Method,
        path_and_query: &str,
        headers: reqwest::header::HeaderMap,
        body: bytes::Bytes,
    ) -> Result<reqwest::Response, InvokeError> {
        let url = self.url(path_and_query.trim_start_matches('/'));
        let mut request = self.forwarding().request(method, url).headers(headers);
        for (name, value) in host_headers(invocation_id) {
            // The request keeps its own type; the host adds its version, the invocation id and
            // its agent.
            if name != "Content-Type" {
                request = request.header(name, value);
            }
        }
        request
            .body(body)
            .send()
            .await
            .map_err(|e| InvokeError::NoAnswer(e.without_url().to_string()))
    }

    /// Sends this invoker and all its clones to `base` from now on.
    pub fn retarget(&self, base: &str) {
        *self.base.write().expect("invoker base lock") = base.trim_end_matches('/').to_string();
    }

    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), InvokeError> {
        if self.direct.is_some() {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        loop {
            // Any HTTP answer means ready; only a refused connection means "keep waiting".
            if self.http().get(self.url("")).send().await.is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(InvokeError::NotReady(self.base(), timeout));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn invoke(&self, function: &str, body: Vec<u8>) -> Result<Invocation, InvokeError> {
        self.invoke_traced(function, body, None).await
    }

    /// [`Invoker::invoke`] with a `traceparent` header: the handler's invocation span becomes a
    /// child of `parent` (the emulated host's span for the attempt). The Functions host sends
    /// no such header to custom handlers; the emulated host does when it exports its own spans.
    pub async fn invoke_traced(
        &self,
        function: &str,
        body: Vec<u8>,
        parent: Option<hubhost_telemetry::TraceParent>,
    ) -> Result<Invocation, InvokeError> {
        let invocation_id = hubhost_clock::uuid().to_string();
        self.invoke_as(function, &invocation_id, body, parent).await
    }

    /// The request's line and headers as the host sends them (`--show-request`), for the
    /// handler at this invoker's address.
    pub fn request_head(&self, function: &str, invocation_id: &str) -> String {
        let base = self.base();
        let host = base.split("://").nth(1).unwrap_or(&base);
        let mut head = format!("POST /{function} HTTP/1.1\r\nhost: {host}\r\n");
        for (name, value) in host_headers(invocation_id) {
            head.push_str(&format!("{}: {value}\r\n", name.to_ascii_lowercase()));
        }
        head.push_str("transfer-encoding: chunked\r\n\r\n");
        head
    }

    /// [`Invoker::invoke_traced`] with the invocation id given.
    pub async fn invoke_as(
        &self,
        function: &str,
        invocation_id: &str,
        body: Vec<u8>,
        parent: Option<hubhost_telemetry::TraceParent>,
    ) -> Result<Invocation, InvokeError> {
        if let Some(handler) = &self.direct {
            return handler.invoke(function, invocation_id, body).await;
        }
        let mut request = self.http().post(self.url(function));
        if let Some(parent) = parent {
            request = request.header("traceparent", parent.to_string());
        }
        for (name, value) in host_headers(invocation_id) {
            request = request.header(name, value);
        }
        let resp = request
            // The host's body is an `ObjectContent`, whose length is not computed beforehand:
            // .NET sends it chunked, with no Content-Length.
            .body(reqwest::Body::wrap_stream(futures::stream::once(
                async move { Ok::<_, std::io::Error>(body) },
            )))
            .send()
            .await
            .map_err(|e| InvokeError::NoAnswer(e.without_url().to_string()))?;
        let status = resp.status().as_u16();
        let trace_context = resp
            .headers()
            .get("traceresponse")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| InvokeError::NoAnswer(e.without_url().to_string()))?;
        let (body, refused) = read_answer(status, content_type.as_deref(), &bytes);
        Ok(Invocation {
            status,
            body,
            refused,
            trace_context,
        })
    }
}

/// A handler an [`Invoker::direct`] calls.
#[async_trait::async_trait]
pub trait DirectHandler: Send + Sync + 'static {
    /// `POST /{function}` with the host's headers and `body`; the answer as the host reads it.
    async fn call(
        &self,
        function: &str,
        invocation_id: &str,
        body: Vec<u8>,
    ) -> Result<Invocation, InvokeError>;

    /// Starts afresh, as a killed process is started again.
    fn restart(&self);
}

/// A framework server's routes, called without a socket; `make` builds them again for a
/// restart.
pub struct Routes {
    current: std::sync::Mutex<axum::Router>,
    make: Box<dyn Fn() -> axum::Router + Send + Sync>,
}

impl Routes {
    pub fn new(make: impl Fn() -> axum::Router + Send + Sync + 'static) -> Self {
        Routes {
            current: std::sync::Mutex::new(make()),
            make: Box::new(make),
        }
    }
}

#[async_trait::async_trait]
impl DirectHandler for Routes {
    async fn call(
        &self,
        function: &str,
        invocation_id: &str,
        body: Vec<u8>,
    ) -> Result<Invocation, InvokeError> {
        use tower::ServiceExt;
        let mut request = axum::http::Request::post(format!("/{function}"));
        for (name, value) in host_headers(invocation_id) {
            request = request.header(name, value);
        }
        let request = request
            .body(axum::body::Body::from(body))
            .map_err(|e| InvokeError::NoAnswer(e.to_string()))?;
        let routes = self.current.lock().expect("routes lock").clone();
        let response = routes
            .oneshot(request)
            .await
            .map_err(|e| InvokeError::NoAnswer(e.to_string()))?;
        let status = response.status().as_u16();
        let (parts, answer_body) = response.into_parts();
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let (trace_context, content_type) = (header("traceresponse"), header("content-type"));
        let bytes = axum::body::to_bytes(answer_body, usize::MAX)
            .await
            .map_err(|e| InvokeError::NoAnswer(e.to_string()))?;
        let (body, refused) = read_answer(status, content_type.as_deref(), &bytes);
        Ok(Invocation {
            status,
            body,
            refused,
            trace_context,
        })
    }

    fn restart(&self) {
        *self.current.lock().expect("routes lock") = (self.make)();
    }
}

/// A direct handler and its kills.
#[derive(Clone)]
struct InProcess {
    handler: Arc<dyn DirectHandler>,
    /// Counts kills: an invocation under way when it moves has no answer.
    kills: Arc<tokio::sync::watch::Sender<u64>>,
    /// Invocations under way.
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    /// A kill that found none under way: the next one's answer is lost.
    kill_next: Arc<std::sync::atomic::AtomicBool>,
}

/// Counts a direct invocation under way while it lives.
struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

impl InFlight {
    fn start(count: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlight(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl InProcess {
    async fn invoke(
        &self,
        function: &str,
        invocation_id: &str,
        body: Vec<u8>,
    ) -> Result<Invocation, InvokeError> {
        let mut kills = self.kills.subscribe();
        let _under_way = InFlight::start(&self.in_flight);
        let killed = || InvokeError::NoAnswer("the handler was killed mid-invocation".into());
        tokio::select! {
            biased;
            _ = kills.changed() => Err(killed()),
            answer = self.handler.call(function, invocation_id, body) => {
                if self.kill_next.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    return Err(killed());
                }
                answer
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn held_invocations_wait_for_accept_on_every_clone() {
        let invoker = Invoker::new("http://127.0.0.1:1");
        let clone = invoker.clone();
        // Open: no wait.
        tokio::time::timeout(Duration::from_millis(100), clone.accepting())
            .await
            .expect("accepting at first");
        invoker.hold();
        let waiting = tokio::spawn(async move { clone.accepting().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "a held invocation waits");
        invoker.accept();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("released by accept")
            .unwrap();
    }
}

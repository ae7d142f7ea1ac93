//! Calls a custom handler the way the Functions host does (docs/host-contract.md §1–3):
//! poll `GET /` every 25 ms until anything answers, then `POST /{FunctionName}` with the host's
//! headers and JSON body. Used by the emulated host (`emulate`), the demo, the benchmark and
//! the tests.

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
    #[error("the custom handler answered {status} with a body that is not JSON")]
    NotJson { status: u16 },
}

#[derive(Debug, Clone)]
pub struct Invocation {
    pub status: u16,
    pub body: Value,
    /// The handler's `traceresponse` header: its invocation span's context (W3C
    /// `traceparent` form), when it exports traces. The host ignores it; the emulated host
    /// stamps the events an `eventHub` output sends with it.
    pub trace_context: Option<String>,
}

impl Invocation {
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Clones share one handler address: [`Invoker::retarget`] moves every clone to a handler
/// restarted on another port.
#[derive(Clone)]
pub struct Invoker {
    http: reqwest::Client,
    base: std::sync::Arc<std::sync::RwLock<String>>,
}

impl Invoker {
    /// `base` is like `http://127.0.0.1:7071`.
    pub fn new(base: &str) -> Self {
        Invoker {
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("HTTP client builds"),
            base: std::sync::Arc::new(std::sync::RwLock::new(
                base.trim_end_matches('/').to_string(),
            )),
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

    /// Sends this invoker and all its clones to `base` from now on.
    pub fn retarget(&self, base: &str) {
        *self.base.write().expect("invoker base lock") = base.trim_end_matches('/').to_string();
    }

    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), InvokeError> {
        let deadline = Instant::now() + timeout;
        loop {
            // Any HTTP answer means ready; only a refused connection means "keep waiting".
            if self.http.get(self.url("")).send().await.is_ok() {
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
        let mut request = self.http.post(self.url(function));
        if let Some(parent) = parent {
            request = request.header("traceparent", parent.to_string());
        }
        let resp = request
            .header("Content-Type", "application/json; charset=utf-8")
            .header("X-Azure-Functions-HostVersion", HOST_VERSION)
            .header(
                "X-Azure-Functions-InvocationId",
                uuid::Uuid::new_v4().to_string(),
            )
            .header("User-Agent", format!("Azure-Functions-Host/{HOST_VERSION}"))
            .body(body)
            .send()
            .await
            .map_err(|e| InvokeError::NoAnswer(e.without_url().to_string()))?;
        let status = resp.status().as_u16();
        let trace_context = resp
            .headers()
            .get("traceresponse")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| InvokeError::NoAnswer(e.without_url().to_string()))?;
        let body = serde_json::from_slice(&bytes).map_err(|_| InvokeError::NotJson { status })?;
        Ok(Invocation {
            status,
            body,
            trace_context,
        })
    }
}

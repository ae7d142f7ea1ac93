//! HTTP-triggered functions, as the host sends them when host.json does not forward HTTP
//! requests as they came (`enableForwardingHttpRequest` false, the default): the request
//! arrives as `POST /{FunctionName}` with the HTTP request in `Data.<trigger binding>`, and the
//! answer carries the HTTP response in `Outputs.<http output binding>` (or `ReturnValue` for
//! `$return`). With forwarding on, serve the routes yourself instead
//! ([`crate::server::ServerBuilder::routes`]). docs/host-contract.md §8 has the shapes.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::function::FunctionError;
use crate::inputs::InputValues;

/// The HTTP request of one invocation.
///
/// ```
/// use hubhost_functions::http::HttpRequest;
///
/// let body = br#"{"Data":{"req":{"Url":"http://localhost:7071/api/hello?name=Ada","Method":"GET",
///     "Query":{"name":"Ada"},"Headers":{"Accept":["text/plain"]},"Params":{},"Body":""}},"Metadata":{}}"#;
/// let request = HttpRequest::from_invocation(body, "req")?;
/// assert_eq!(request.method, "GET");
/// assert_eq!(request.query["name"], "Ada");
/// assert_eq!(request.header("accept"), Some("text/plain"));
/// # Ok::<(), hubhost_functions::http::HttpRequestError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HttpRequest {
    /// e.g. `GET`.
    pub method: String,
    /// The URL the client called, e.g. `http://myapp.azurewebsites.net/api/hello?name=Ada`.
    pub url: String,
    /// Query parameters (the last value when one is repeated).
    pub query: BTreeMap<String, String>,
    /// Headers, each with its values.
    pub headers: BTreeMap<String, Vec<String>>,
    /// Route parameters, from function.json's `route` (e.g. `{id}`).
    pub params: BTreeMap<String, String>,
    /// The request body.
    pub body: Bytes,
    /// The values of the function's input bindings, read before the call (a blob named by a
    /// route parameter, say).
    pub inputs: InputValues,
}

/// Why an invocation's HTTP request cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HttpRequestError {
    /// The invocation body is not JSON.
    #[error("the request body is not valid JSON: {0}")]
    MalformedJson(String),
    /// `Data` lacks the trigger's binding.
    #[error("\"Data\" has no HTTP request named '{0}' (the httpTrigger binding's name)")]
    MissingRequest(String),
}

impl HttpRequest {
    /// Reads the request from an invocation body, under the trigger binding `binding`.
    pub fn from_invocation(body: &[u8], binding: &str) -> Result<Self, HttpRequestError> {
        let json: Value = serde_json::from_slice(body)
            .map_err(|e| HttpRequestError::MalformedJson(e.to_string()))?;
        let data = json.get("Data").and_then(Value::as_object);
        let request = data
            .and_then(|d| d.get(binding))
            .and_then(Value::as_object)
            .ok_or_else(|| HttpRequestError::MissingRequest(binding.to_string()))?;
        // The host's member names vary in case between versions: look up case-insensitively.
        let member = |name: &str| {
            request
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        };
        let text = |name: &str| member(name).and_then(Value::as_str).unwrap_or_default();
        Ok(HttpRequest {
            method: text("Method").to_ascii_uppercase(),
            url: text("Url").to_string(),
            query: string_map(member("Query")),
            headers: object_of(member("Headers"))
                .into_iter()
                .map(|(k, v)| {
                    let values = match v {
                        Value::Array(items) => items.iter().map(value_text).collect(),
                        other => vec![value_text(&other)],
                    };
                    (k, values)
                })
                .collect(),
            params: string_map(member("Params")),
            body: match member("Body") {
                None | Some(Value::Null) => Bytes::new(),
                Some(v) => Bytes::from(value_text(v)),
            },
            inputs: InputValues::from_data(data, binding),
        })
    }

    /// A header's first value; names are case-insensitive.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.first())
            .map(String::as_str)
    }
}

/// An object, or a string holding one (the host has sent `Query` both ways).
fn object_of(value: Option<&Value>) -> Map<String, Value> {
    match value {
        Some(Value::Object(m)) => m.clone(),
        Some(Value::String(s)) => serde_json::from_str::<Map<String, Value>>(s).unwrap_or_default(),
        _ => Map::new(),
    }
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    object_of(value)
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Value::Array(items) => items.last().map(value_text).unwrap_or_default(),
                other => value_text(&other),
            };
            (k, v)
        })
        .collect()
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The HTTP response a function answers.
///
/// ```
/// use hubhost_functions::http::HttpResponse;
///
/// let response = HttpResponse::text(200, "hello").with_header("Cache-Control", "no-store");
/// assert_eq!(response.status, 200);
/// assert_eq!(response.headers["Content-Type"], "text/plain; charset=utf-8");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Response headers.
    pub headers: BTreeMap<String, String>,
    /// The body, as text (the host's HTTP output takes a string).
    pub body: String,
}

impl HttpResponse {
    /// A text response.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        HttpResponse {
            status,
            headers: BTreeMap::from([(
                "Content-Type".to_string(),
                "text/plain; charset=utf-8".to_string(),
            )]),
            body: body.into(),
        }
    }

    /// A JSON response.
    pub fn json<T: serde::Serialize + ?Sized>(
        status: u16,
        body: &T,
    ) -> Result<Self, serde_json::Error> {
        Ok(HttpResponse {
            status,
            headers: BTreeMap::from([("Content-Type".to_string(), "application/json".to_string())]),
            body: serde_json::to_string(body)?,
        })
    }

    /// Adds or replaces a header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.insert(name.to_string(), value.to_string());
        self
    }

    /// The value the host's `http` output binding reads: `statusCode`, `headers`, `body`.
    pub fn to_binding_value(&self) -> Value {
        json!({"statusCode": self.status, "headers": self.headers, "body": self.body})
    }
}

/// An HTTP-triggered function: one request in, one response out.
#[async_trait::async_trait]
pub trait HttpFunction: Send + Sync + 'static {
    /// Answers `request`. An `Err` fails the invocation (the host answers the client 500).
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, FunctionError>;
}

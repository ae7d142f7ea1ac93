//! An HTTP request as the Functions host hands it to a custom handler that does not forward it
//! (`enableForwardingHttpRequest` off): `Data.<trigger>` shaped as the host's
//! `HttpRequestExtensions.GetRequestAsJObject` shapes it, its binding data in `Metadata`, and
//! the input bindings' values beside it. `hubhost emulate`'s HTTP trigger, `hubhost invoke` and
//! the test kit's harness all build their requests here.

use std::collections::BTreeMap;

use base64::Engine;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::encode::{BindingData, sys_binding_data, sys_expression_data};

/// One HTTP request as the host reads it before it invokes the function.
///
/// ```
/// use hubhost_functions::contract::http_request::HostHttpRequest;
///
/// let request = HostHttpRequest::new(
///     "GET",
///     "http://localhost:7071/api/items/5?tag=a&tag=b".into(),
///     hubhost_functions::contract::http_request::query_pairs("tag=a&tag=b"),
///     [("accept".to_string(), "text/plain".to_string())],
///     [("id".to_string(), "5".to_string())].into(),
///     bytes::Bytes::new(),
/// );
/// let body: serde_json::Value =
///     serde_json::from_slice(&request.encode("Items", "req", &[], &chrono::Utc::now())).unwrap();
/// assert_eq!(body["Data"]["req"]["Query"]["tag"], "a,b");
/// assert_eq!(body["Data"]["req"]["Headers"]["Accept"][0], "text/plain");
/// assert_eq!(body["Metadata"]["id"], "\"5\"");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct HostHttpRequest {
    url: String,
    method: String,
    /// Each query name once: the host joins a repeated name's values with `,`.
    query: Map<String, Value>,
    /// Each header with its values, named as Kestrel names the common ones.
    headers: Map<String, Value>,
    params: BTreeMap<String, String>,
    /// `None` for an empty body, which the host leaves out.
    body: Option<Value>,
}

impl HostHttpRequest {
    /// The request `method url` with its query parameters (in order, repeats kept), its
    /// headers (names in any case, a repeated name once per value), its route parameters and
    /// its body.
    pub fn new(
        method: &str,
        url: String,
        query: impl IntoIterator<Item = (String, String)>,
        headers: impl IntoIterator<Item = (String, String)>,
        params: BTreeMap<String, String>,
        body: Bytes,
    ) -> Self {
        let mut joined: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in query {
            joined.entry(name).or_default().push(value);
        }
        let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in headers {
            by_name
                .entry(kestrel_name(&name.to_ascii_lowercase()))
                .or_default()
                .push(value);
        }
        let content_type = by_name
            .get("Content-Type")
            .and_then(|v| v.first())
            .map(|v| v.to_ascii_lowercase())
            .unwrap_or_default();
        // The host reads a body only when there is one; octet-stream and multipart bodies as
        // bytes (Newtonsoft writes those in base64), any other as text.
        let body = (!body.is_empty()).then(|| {
            if content_type.starts_with("application/octet-stream")
                || content_type.starts_with("multipart/")
            {
                Value::from(base64::engine::general_purpose::STANDARD.encode(&body))
            } else {
                Value::from(String::from_utf8_lossy(&body).into_owned())
            }
        });
        HostHttpRequest {
            url,
            method: method.to_ascii_uppercase(),
            query: joined
                .into_iter()
                .map(|(k, v)| (k, Value::from(v.join(","))))
                .collect(),
            headers: by_name
                .into_iter()
                .map(|(k, v)| (k, Value::from(v)))
                .collect(),
            params,
            body,
        }
    }

    /// The binding data its inputs' paths are resolved from: each query parameter, then each
    /// route parameter (which wins), as text; `Query` and `Headers`; `sys`.
    pub fn binding_data(&self, function: &str, now: &DateTime<Utc>) -> BindingData {
        let mut data = BindingData::default();
        for (name, value) in &self.query {
            data.set(name, value.clone());
        }
        for (name, value) in &self.params {
            data.set(name, Value::from(value.clone()));
        }
        data.set("Query", Value::Object(self.query.clone()));
        data.set("Headers", Value::Object(self.headers.clone()));
        data.set("sys", sys_expression_data(function, now));
        data
    }

    /// The invocation request for `function`, whose trigger binding is `binding`: `Data` the
    /// request and the `inputs`' values, `Metadata` its binding data (each query and route
    /// parameter, `Query`, `Headers`, `sys`), strings in `Metadata` written as JSON text, as
    /// the host writes every non-object value there.
    pub fn encode(
        &self,
        function: &str,
        binding: &str,
        inputs: &[(String, Value)],
        now: &DateTime<Utc>,
    ) -> Vec<u8> {
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
        metadata.insert("sys".into(), sys_binding_data(function, now));
        let mut data = Map::new();
        data.insert(binding.to_string(), request);
        data.extend(inputs.iter().cloned());
        serde_json::to_vec(&json!({"Data": data, "Metadata": metadata})).expect("JSON")
    }
}

/// A query string (`a=1&b=x+y`) as pairs, `+` and `%XX` decoded as a form is.
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_and_headers_are_named_as_the_host_names_them() {
        assert_eq!(
            query_pairs("name=Ada+L&x=%2F&flag"),
            [
                ("name".to_string(), "Ada L".to_string()),
                ("x".into(), "/".into()),
                ("flag".into(), "".into())
            ]
        );
        assert_eq!(kestrel_name("content-type"), "Content-Type");
        assert_eq!(kestrel_name("x-ms-client"), "X-Ms-Client");
    }

    #[test]
    fn a_body_is_text_or_base64_by_its_content_type_and_an_empty_one_is_left_out() {
        let encoded = |content_type: &str, body: &'static [u8]| {
            let request = HostHttpRequest::new(
                "post",
                "http://localhost:7071/api/f".into(),
                [],
                [("CONTENT-TYPE".to_string(), content_type.to_string())],
                BTreeMap::new(),
                Bytes::from_static(body),
            );
            let body: Value =
                serde_json::from_slice(&request.encode("f", "req", &[], &Utc::now())).unwrap();
            body["Data"]["req"].clone()
        };
        assert_eq!(encoded("text/plain", b"hi")["Body"], "hi");
        assert_eq!(encoded("application/octet-stream", b"hi")["Body"], "aGk=");
        assert_eq!(encoded("text/plain", b"")["Body"], Value::Null);
        assert_eq!(encoded("text/plain", b"")["Method"], "POST");
    }
}

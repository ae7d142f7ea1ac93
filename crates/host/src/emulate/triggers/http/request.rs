//! An HTTP request as the Functions host hands it to a custom handler that does not forward it:
//! `Data.<trigger>` shaped as `HttpRequestExtensions.GetRequestAsJObject` shapes it, and its
//! binding data in `Metadata`.

use std::collections::BTreeMap;

use bytes::Bytes;
use chrono::Utc;
use serde_json::{Map, Value, json};

use super::route::percent_decode;
use hubhost_functions::contract::encode::{BindingData, sys_binding_data, sys_expression_data};

/// One request as the host reads it before it invokes the function.
pub(super) struct ReceivedRequest {
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
    pub(super) fn new(
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

    /// The binding data its inputs' paths are resolved from: each query parameter, then each
    /// route parameter (which wins), as text; `Query` and `Headers`; `sys`.
    pub(super) fn binding_data(&self, function: &str, now: &chrono::DateTime<Utc>) -> BindingData {
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

    /// The invocation request: `Data.<binding>` the request, `Metadata` its binding data
    /// (each query parameter and route parameter, `Query`, `Headers`, `sys`), strings in
    /// `Metadata` written as JSON text, as the host writes every non-object value there.
    pub(super) fn invocation(
        &self,
        function: &str,
        binding: &str,
        inputs: &[(String, Value)],
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
        metadata.insert("sys".into(), sys_binding_data(function, &Utc::now()));
        let mut data = Map::new();
        data.insert(binding.to_string(), request);
        data.extend(inputs.iter().cloned());
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

#[cfg(test)]
mod tests {
    use super::*;

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

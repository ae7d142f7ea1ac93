//! An HTTP request as it reached `emulate`'s listener, read into the request the host hands a
//! custom handler ([`HostHttpRequest`], in the contract, where `hubhost invoke` and the test
//! kit build theirs too).

use std::collections::BTreeMap;

use bytes::Bytes;

use hubhost_functions::contract::http_request::{HostHttpRequest, query_pairs};

/// The request of `parts` and `body`, with the route's `params`, as the host reads it.
pub(super) fn received(
    parts: &hyper::http::request::Parts,
    body: Bytes,
    params: BTreeMap<String, String>,
) -> HostHttpRequest {
    let host = parts
        .headers
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    HostHttpRequest::new(
        parts.method.as_str(),
        format!("http://{host}{path_and_query}"),
        query_pairs(parts.uri.query().unwrap_or("")),
        parts.headers.iter().map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        }),
        params,
        body,
    )
}

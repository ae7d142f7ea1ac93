//! The HTTP response a client gets: read from the `http` output as the Functions host reads
//! it, and the JSON errors of the listener itself.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

/// The HTTP response from the `http` output's value, as the host builds it
/// (`HttpScriptInvocationResultExtensions.GetHttpOutputBindingResponse`, then
/// `HttpBinding.CreateResult` and `RawScriptResult`): `statusCode` or `status` (a number, or
/// text holding one; 200 otherwise), `headers` (each value as its text; `content-type` sets the
/// type) and `body` (text as it is, other JSON as its text). No value answers 200 with `{}`.
pub(super) fn http_response(value: Option<Value>) -> Result<Response<Full<Bytes>>, String> {
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

pub(super) fn with_body(
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

pub(super) fn not_found(path: &str) -> Response<Full<Bytes>> {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("no HTTP function of the app serves {path} for this method"),
    )
}

pub(super) fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}

pub(super) fn error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    let body = json!({"error": code, "message": message}).to_string();
    with_body(status, "application/json", body.into_bytes(), &[])
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

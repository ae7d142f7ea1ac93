//! One Azure Storage service's REST endpoint (blob, queue or table), as the three clients here
//! share it: the request signed with Shared Key (or carrying a SAS, or an Entra ID token), the
//! date and version headers, and transient failures (connection errors, timeouts, throttling
//! 429, 500/502/503/504) retried with exponential backoff.
//!
//! Blob and queue sign the same string (Shared Key's full form); the table service signs a
//! shorter one (verb, Content-MD5, Content-Type, date, resource). Both are Microsoft's
//! "Authorize with Shared Key" (learn.microsoft.com/rest/api/storageservices/authorize-with-shared-key).
//!
//! Secrets: the account key only feeds the HMAC; a SAS is only appended to request URLs, and
//! `reqwest` errors are stripped of their URL before they become messages.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use chrono::Utc;
use hmac::{Hmac, Mac};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Method, StatusCode};
use sha2::Sha256;

use super::StoreError;
use super::connection::Credential;
use hubhost_identity::STORAGE_SCOPE;

/// Service version we speak: supported by Azure and by Azurite 3.35 (which accepts up to 2025-11-05).
const API_VERSION: &str = "2023-11-03";
const ATTEMPTS: u32 = 4;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// What a query value may keep unencoded.
const QUERY_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Which string a service signs with Shared Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// Blob and queue: every standard header, the `x-ms-` headers, the resource and its query.
    Full,
    /// Table: verb, Content-MD5, Content-Type, date and the resource (with `comp` only).
    Table,
}

/// One request, relative to the endpoint: `path` starts with `/` and is already encoded.
pub(crate) struct RestRequest<'a> {
    pub method: Method,
    pub path: &'a str,
    pub query: Vec<(&'static str, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

/// A storage service's endpoint and the credential that signs its requests.
pub(crate) struct ServiceEndpoint {
    http: reqwest::Client,
    /// Scheme and authority of the endpoint, e.g. `http://127.0.0.1:10000`.
    origin: String,
    /// Path of the endpoint (empty for real Azure, `/devstoreaccount1` for Azurite).
    base_path: String,
    credential: Credential,
    key: Option<Vec<u8>>,
    /// Entra ID tokens, for `Credential::EntraId` (cached by the credential).
    tokens: Option<Arc<dyn azure_core::credentials::TokenCredential>>,
    dialect: Dialect,
}

impl ServiceEndpoint {
    pub fn new(
        endpoint: &str,
        credential: &Credential,
        dialect: Dialect,
    ) -> Result<Self, StoreError> {
        let url = reqwest::Url::parse(endpoint).map_err(|e| StoreError::InvalidName {
            name: endpoint.to_string(),
            reason: format!("the service endpoint is not a URL: {e}"),
        })?;
        let origin = url.origin().ascii_serialization();
        let base_path = url.path().trim_end_matches('/').to_string();
        let key = match credential {
            Credential::SharedKey { key, .. } => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(key)
                    .map_err(|_| StoreError::Rejected {
                        status: 0,
                        code: "BadAccountKey".into(),
                        message: "the account key is not valid base64".into(),
                    })?,
            ),
            Credential::Sas(_) | Credential::EntraId(_) => None,
        };
        let tokens = match credential {
            Credential::EntraId(identity) => Some(
                identity
                    .credential()
                    .map_err(|e| StoreError::Unavailable(e.to_string()))?,
            ),
            _ => None,
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(32)
            .build()
            .map_err(|e| StoreError::Unavailable(format!("cannot build HTTP client: {e}")))?;
        Ok(ServiceEndpoint {
            http,
            origin,
            base_path,
            credential: credential.clone(),
            key,
            tokens,
            dialect,
        })
    }

    /// The endpoint of one of `connection`'s services, if it has that service.
    pub fn of(
        endpoint: Option<&str>,
        connection: &super::StorageConnection,
        dialect: Dialect,
    ) -> Result<Option<Self>, StoreError> {
        endpoint
            .map(|endpoint| ServiceEndpoint::new(endpoint, &connection.credential, dialect))
            .transpose()
    }

    /// Scheme and authority, for messages (never a secret).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The endpoint's own path before `relative` (already encoded).
    pub fn full_path(&self, relative: &str) -> String {
        format!("{}{relative}", self.base_path)
    }

    /// Sends one request, retrying transient failures; returns the response of the last attempt.
    pub async fn send(&self, req: &RestRequest<'_>) -> Result<reqwest::Response, StoreError> {
        let path = self.full_path(req.path);
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            let outcome = self.send_once(req, &path).await;
            let retry = match &outcome {
                Ok(resp) => matches!(
                    resp.status(),
                    StatusCode::TOO_MANY_REQUESTS
                        | StatusCode::INTERNAL_SERVER_ERROR
                        | StatusCode::BAD_GATEWAY
                        | StatusCode::SERVICE_UNAVAILABLE
                        | StatusCode::GATEWAY_TIMEOUT
                ),
                Err(e) => e.is_transient(),
            };
            if !retry || attempt >= ATTEMPTS {
                return outcome;
            }
            tracing::debug!(attempt, path = %path, "transient storage failure; retrying");
            tokio::time::sleep(backoff).await;
            backoff *= 4;
            attempt += 1;
        }
    }

    async fn send_once(
        &self,
        req: &RestRequest<'_>,
        path: &str,
    ) -> Result<reqwest::Response, StoreError> {
        let mut headers = req.headers.clone();
        headers.push((
            "x-ms-date".into(),
            Utc::now().format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
        ));
        headers.push(("x-ms-version".into(), API_VERSION.into()));
        let mut query: Vec<String> = req
            .query
            .iter()
            .map(|(k, v)| format!("{k}={}", utf8_percent_encode(v, QUERY_KEEP)))
            .collect();
        match &self.credential {
            Credential::SharedKey { account, .. } => {
                let key = self.key.as_deref().unwrap_or_default();
                let signed = match self.dialect {
                    Dialect::Full => full_string_to_sign(account, req, path, &headers),
                    Dialect::Table => table_string_to_sign(account, req, path, &headers),
                };
                let mut mac =
                    Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
                mac.update(signed.as_bytes());
                let signature =
                    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
                headers.push((
                    "Authorization".into(),
                    format!("SharedKey {account}:{signature}"),
                ));
            }
            Credential::Sas(sas) => query.push(sas.clone()),
            Credential::EntraId(identity) => {
                let tokens = self
                    .tokens
                    .as_ref()
                    .expect("Entra ID endpoints have tokens");
                let token = tokens
                    .get_token(&[STORAGE_SCOPE], None)
                    .await
                    .map_err(|e| {
                        StoreError::Unavailable(format!(
                            "Entra ID sign-in as {} failed: {e}",
                            identity.describe()
                        ))
                    })?;
                headers.push((
                    "Authorization".into(),
                    format!("Bearer {}", token.token.secret()),
                ));
            }
        }
        let mut url = format!("{}{}", self.origin, path);
        if !query.is_empty() {
            url.push('?');
            url.push_str(&query.join("&"));
        }
        let mut builder = self.http.request(req.method.clone(), url);
        for (k, v) in &headers {
            builder = builder.header(k, v);
        }
        if req.method == Method::PUT || req.method == Method::POST {
            // hyper omits Content-Length for an empty body; Azure's PUTs require it.
            builder = builder
                .header("Content-Length", req.body.len().to_string())
                .body(req.body.clone());
        }
        builder.send().await.map_err(|e| {
            // Never let a URL (which may carry a SAS) into a message.
            StoreError::Unavailable(format!(
                "{} is unreachable: {}",
                self.origin,
                e.without_url()
            ))
        })
    }
}

/// What a storage service said when it refused a request.
pub(crate) struct Rejection {
    pub status: StatusCode,
    /// The `x-ms-error-code` header.
    pub code: String,
    /// From an XML or a JSON error body.
    pub message: String,
}

impl Rejection {
    /// The error every service's refusal is, past the codes its client reads itself: a lost
    /// condition, a missing resource (`container`, `name`), a transient failure, else refused.
    pub fn into_error(self, origin: &str, container: &str, name: &str) -> StoreError {
        let Rejection {
            status,
            code,
            message,
        } = self;
        let (container, name) = (container.to_string(), name.to_string());
        match status.as_u16() {
            412 => StoreError::ConditionNotMet { container, name },
            404 => StoreError::NotFound { container, name },
            429 | 500..=599 => {
                StoreError::Unavailable(format!("{origin} answered {status} {code}: {message}"))
            }
            _ => StoreError::Rejected {
                status: status.as_u16(),
                code,
                message,
            },
        }
    }
}

/// Reads a refusal's status, code and message.
pub(crate) async fn rejection(resp: reqwest::Response) -> Rejection {
    let status = resp.status();
    let code = resp
        .headers()
        .get("x-ms-error-code")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.text().await.unwrap_or_default();
    let json_message = || {
        let value: serde_json::Value = serde_json::from_str(&body).ok()?;
        let error = value.get("odata.error")?;
        let message = error.get("message")?;
        message
            .get("value")
            .unwrap_or(message)
            .as_str()
            .map(str::to_string)
    };
    let message = json_message()
        .or_else(|| super::azure::xml_element(&body, "Message"))
        .unwrap_or_else(|| {
            let body: String = body.chars().take(300).collect();
            if body.trim().is_empty() {
                status.to_string()
            } else {
                body
            }
        });
    Rejection {
        status,
        code,
        message,
    }
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> &'h str {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

/// Shared Key's string for blob and queue.
fn full_string_to_sign(
    account: &str,
    req: &RestRequest<'_>,
    path: &str,
    headers: &[(String, String)],
) -> String {
    let content_length = if req.body.is_empty() {
        String::new()
    } else {
        req.body.len().to_string()
    };
    let mut ms_headers: Vec<(String, &str)> = headers
        .iter()
        .filter(|(k, _)| k.to_ascii_lowercase().starts_with("x-ms-"))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim()))
        .collect();
    ms_headers.sort();
    let mut canonical = format!(
        "{}\n\n\n{}\n\n{}\n\n\n{}\n{}\n\n\n",
        req.method.as_str(),
        content_length,
        header(headers, "content-type"),
        header(headers, "if-match"),
        header(headers, "if-none-match"),
    );
    for (k, v) in &ms_headers {
        canonical.push_str(&format!("{k}:{v}\n"));
    }
    canonical.push_str(&format!("/{account}{path}"));
    let mut query: Vec<(String, &str)> = req
        .query
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str()))
        .collect();
    query.sort();
    for (k, v) in query {
        canonical.push_str(&format!("\n{k}:{v}"));
    }
    canonical
}

/// Shared Key's string for the table service.
fn table_string_to_sign(
    account: &str,
    req: &RestRequest<'_>,
    path: &str,
    headers: &[(String, String)],
) -> String {
    let mut resource = format!("/{account}{path}");
    if let Some((_, comp)) = req.query.iter().find(|(k, _)| *k == "comp") {
        resource.push_str(&format!("?comp={comp}"));
    }
    format!(
        "{}\n{}\n{}\n{}\n{resource}",
        req.method.as_str(),
        header(headers, "content-md5"),
        header(headers, "content-type"),
        header(headers, "x-ms-date"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_service_signs_its_shorter_string() {
        let req = RestRequest {
            method: Method::POST,
            path: "/Tables",
            query: vec![],
            headers: vec![],
            body: Bytes::from_static(b"{}"),
        };
        let headers = [
            ("Content-Type".to_string(), "application/json".to_string()),
            (
                "x-ms-date".to_string(),
                "Tue, 01 Dec 2026 00:00:00 GMT".to_string(),
            ),
        ];
        assert_eq!(
            table_string_to_sign("acct", &req, "/acct/Tables", &headers),
            "POST\n\napplication/json\nTue, 01 Dec 2026 00:00:00 GMT\n/acct/acct/Tables"
        );
    }
}

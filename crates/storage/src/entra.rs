//! Entra ID (Azure AD) sign-in to Blob Storage: bearer tokens for `https://storage.azure.com/`,
//! from where an Azure Functions app finds its identity.
//!
//! - **Managed identity** on App Service / Functions: the platform sets `IDENTITY_ENDPOINT` and
//!   `IDENTITY_HEADER`; a `GET {endpoint}?resource=…&api-version=2019-08-01` with the header
//!   `X-IDENTITY-HEADER` returns the token (`AZURE_CLIENT_ID` picks a user-assigned identity).
//! - **A service principal** for local development and CI: `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`,
//!   `AZURE_CLIENT_SECRET` (and `AZURE_AUTHORITY_HOST` for sovereign clouds), client-credentials
//!   grant against `{authority}/{tenant}/oauth2/v2.0/token`.
//!
//! Tokens are cached and renewed five minutes before they expire. The client secret, the
//! identity header and the tokens are secrets: `Debug` shows none of them and no error message
//! carries them.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::StoreError;

/// The resource (audience) Blob Storage tokens are for.
pub const STORAGE_RESOURCE: &str = "https://storage.azure.com/";
const MANAGED_IDENTITY_API: &str = "2019-08-01";
const DEFAULT_AUTHORITY: &str = "https://login.microsoftonline.com";
/// A token this close to its expiry is renewed before use.
const RENEW_BEFORE: Duration = Duration::from_secs(300);

/// Where tokens come from.
#[derive(Clone, PartialEq)]
pub enum TokenSource {
    ManagedIdentity {
        endpoint: String,
        header: String,
        client_id: Option<String>,
    },
    ClientSecret {
        authority: String,
        tenant: String,
        client_id: String,
        secret: String,
    },
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::ManagedIdentity { endpoint, .. } => {
                write!(f, "managed identity at {endpoint}")
            }
            TokenSource::ClientSecret {
                tenant, client_id, ..
            } => write!(f, "service principal {client_id} of tenant {tenant}"),
        }
    }
}

impl TokenSource {
    /// The identity the environment offers: a service principal's secret wins over the
    /// platform's managed identity (as in the Azure SDKs' default chain, environment first).
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Self, StoreError> {
        let get = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        if let (Some(tenant), Some(client_id), Some(secret)) = (
            get("AZURE_TENANT_ID"),
            get("AZURE_CLIENT_ID"),
            get("AZURE_CLIENT_SECRET"),
        ) {
            let authority = get("AZURE_AUTHORITY_HOST").unwrap_or_else(|| DEFAULT_AUTHORITY.into());
            return Ok(TokenSource::ClientSecret {
                authority: authority.trim_end_matches('/').to_string(),
                tenant,
                client_id,
                secret,
            });
        }
        if let (Some(endpoint), Some(header)) = (get("IDENTITY_ENDPOINT"), get("IDENTITY_HEADER")) {
            return Ok(TokenSource::ManagedIdentity {
                endpoint,
                header,
                client_id: get("AZURE_CLIENT_ID"),
            });
        }
        Err(StoreError::Unavailable(
            "Entra ID sign-in to storage needs an identity: a managed identity (IDENTITY_ENDPOINT \
             and IDENTITY_HEADER, set by App Service and Functions) or a service principal \
             (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET)"
                .into(),
        ))
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    /// Managed identity: seconds since the epoch, as a string.
    #[serde(default)]
    expires_on: Option<serde_json::Value>,
    /// Client credentials: seconds from now.
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
}

/// `k=v&k=v`, percent-encoded (a query string or a form body).
fn encode_pairs(pairs: &[(&str, &str)]) -> String {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    pairs
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                utf8_percent_encode(k, NON_ALPHANUMERIC),
                utf8_percent_encode(v, NON_ALPHANUMERIC)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn seconds(v: &Option<serde_json::Value>) -> Option<i64> {
    match v.as_ref()? {
        serde_json::Value::Number(n) => n.as_i64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A token source with its current token.
pub struct Tokens {
    source: TokenSource,
    http: reqwest::Client,
    current: tokio::sync::Mutex<Option<(String, DateTime<Utc>)>>,
}

impl Tokens {
    pub fn new(source: TokenSource, http: reqwest::Client) -> Self {
        Tokens {
            source,
            http,
            current: tokio::sync::Mutex::new(None),
        }
    }

    pub fn describe(&self) -> String {
        format!("{:?}", self.source)
    }

    /// A token valid for at least a few minutes more.
    pub async fn token(&self) -> Result<String, StoreError> {
        let mut current = self.current.lock().await;
        let renew_at = Utc::now() + chrono::Duration::from_std(RENEW_BEFORE).unwrap_or_default();
        if let Some((token, expires)) = current.as_ref()
            && *expires > renew_at
        {
            return Ok(token.clone());
        }
        let (token, expires) = self.request().await?;
        *current = Some((token.clone(), expires));
        Ok(token)
    }

    async fn request(&self) -> Result<(String, DateTime<Utc>), StoreError> {
        let request = match &self.source {
            TokenSource::ManagedIdentity {
                endpoint,
                header,
                client_id,
            } => {
                let mut query = vec![
                    ("resource", STORAGE_RESOURCE),
                    ("api-version", MANAGED_IDENTITY_API),
                ];
                if let Some(id) = client_id {
                    query.push(("client_id", id.as_str()));
                }
                let separator = if endpoint.contains('?') { '&' } else { '?' };
                self.http
                    .get(format!("{endpoint}{separator}{}", encode_pairs(&query)))
                    .header("X-IDENTITY-HEADER", header)
            }
            TokenSource::ClientSecret {
                authority,
                tenant,
                client_id,
                secret,
            } => self
                .http
                .post(format!("{authority}/{tenant}/oauth2/v2.0/token"))
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(encode_pairs(&[
                    ("grant_type", "client_credentials"),
                    ("client_id", client_id.as_str()),
                    ("client_secret", secret.as_str()),
                    ("scope", &format!("{STORAGE_RESOURCE}.default")),
                ])),
        };
        let failed = |why: String| {
            StoreError::Unavailable(format!(
                "Entra ID sign-in ({:?}) failed: {why}",
                self.source
            ))
        };
        let response = request
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| failed(e.to_string()))?;
        if !status.is_success() {
            // The identity service's error (code and description) names the problem; it
            // carries no secret of ours.
            let detail: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let code = detail["error"].as_str().unwrap_or_default();
            let message = detail["error_description"]
                .as_str()
                .or(detail["message"].as_str())
                .unwrap_or_default();
            return Err(StoreError::Rejected {
                status: status.as_u16(),
                code: if code.is_empty() {
                    "TokenRequestFailed".into()
                } else {
                    code.into()
                },
                message: format!(
                    "Entra ID sign-in ({:?}) was refused: {}",
                    self.source,
                    message.chars().take(300).collect::<String>()
                ),
            });
        }
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|e| failed(format!("the answer is not a token: {e}")))?;
        let now = Utc::now();
        let expires = seconds(&answer.expires_on)
            .and_then(|at| DateTime::from_timestamp(at, 0))
            .or_else(|| seconds(&answer.expires_in).map(|s| now + chrono::Duration::seconds(s)))
            .unwrap_or(now + chrono::Duration::minutes(10));
        Ok((answer.access_token, expires))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::tests::env_of;

    #[test]
    fn the_environment_names_the_identity_and_debug_hides_secrets() {
        let sp = TokenSource::from_env(env_of(&[
            ("AZURE_TENANT_ID", "t1"),
            ("AZURE_CLIENT_ID", "c1"),
            ("AZURE_CLIENT_SECRET", "s3cr3t"),
            ("IDENTITY_ENDPOINT", "http://127.0.0.1:1/msi"),
            ("IDENTITY_HEADER", "h3ad3r"),
        ]))
        .unwrap();
        assert!(
            matches!(sp, TokenSource::ClientSecret { ref authority, .. } if authority == DEFAULT_AUTHORITY)
        );
        assert!(!format!("{sp:?}").contains("s3cr3t"));
        let mi = TokenSource::from_env(env_of(&[
            ("IDENTITY_ENDPOINT", "http://127.0.0.1:1/msi"),
            ("IDENTITY_HEADER", "h3ad3r"),
        ]))
        .unwrap();
        assert!(matches!(
            mi,
            TokenSource::ManagedIdentity {
                client_id: None,
                ..
            }
        ));
        assert!(!format!("{mi:?}").contains("h3ad3r"));
        let none = TokenSource::from_env(env_of(&[])).unwrap_err().to_string();
        assert!(
            none.contains("IDENTITY_ENDPOINT") && none.contains("AZURE_CLIENT_SECRET"),
            "{none}"
        );
    }
}

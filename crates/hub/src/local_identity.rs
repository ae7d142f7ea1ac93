//! A local managed identity: the endpoint App Service and Azure Functions give an app for its
//! managed identity (`IDENTITY_ENDPOINT`, checked with the `IDENTITY_HEADER` secret), served
//! by the hub, issuing access tokens that this hub, and only this hub, accepts.
//!
//! An app with an identity-based connection (`EventHubConnection__fullyQualifiedNamespace`)
//! then signs in to the local hub through the same code path as on Azure: `azure_identity`'s
//! managed identity credential asks the endpoint for a token for `https://eventhubs.azure.net`,
//! and puts it on `$cbs` as a `jwt`. The signing key is made when the hub starts and never
//! leaves its memory; the hub trusts the key's public half as its issuer ([`TrustedIssuer`]).
//!
//! Protocol (App Service's, `api-version=2019-08-01`): `GET /msi/token?resource=R` with header
//! `X-IDENTITY-HEADER`; the answer `{"access_token", "expires_on", "resource", "token_type"}`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use base64::Engine;

use crate::entra::TrustedIssuer;

/// The issuer the local tokens name (`iss`).
pub const ISSUER: &str = "https://hubhost.local/identity/";
/// The path of the token endpoint, as on App Service.
pub const TOKEN_PATH: &str = "/msi/token";
/// How long a token is valid (as Entra ID's are, about an hour).
const LIFETIME_SECONDS: i64 = 3600;
/// The key id the tokens' header names.
const KID: &str = "hubhost-local";

/// Why no local identity could be made.
#[derive(Debug, thiserror::Error)]
pub enum LocalIdentityError {
    /// No RSA key could be generated.
    #[error("cannot make a signing key: {0}")]
    Generate(rcgen::Error),
    /// The key made could not be read back for signing.
    #[error("cannot read the signing key made: {0}")]
    Read(ring::error::KeyRejected),
}

/// The signing key and the secret a caller shows.
pub struct LocalIdentity {
    key: ring::rsa::KeyPair,
    header: String,
}

impl std::fmt::Debug for LocalIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalIdentity { .. }")
    }
}

impl LocalIdentity {
    /// A new RSA key (2048 bits) and a new header secret.
    pub fn generate() -> Result<Self, LocalIdentityError> {
        let generated = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256)
            .map_err(LocalIdentityError::Generate)?;
        let key = ring::rsa::KeyPair::from_pkcs8(&generated.serialize_der())
            .map_err(LocalIdentityError::Read)?;
        Ok(LocalIdentity {
            key,
            header: crate::admin::new_token(),
        })
    }

    /// The `X-IDENTITY-HEADER` value callers must show (`IDENTITY_HEADER` for the app).
    pub fn header_secret(&self) -> &str {
        &self.header
    }

    /// The issuer the hub trusts for these tokens.
    pub fn trusted_issuer(&self) -> TrustedIssuer {
        let public: ring::rsa::PublicKeyComponents<Vec<u8>> = self.key.public().into();
        let enc = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let jwks = serde_json::json!({"keys": [{
            "kty": "RSA", "use": "sig", "kid": KID, "n": enc(&public.n), "e": enc(&public.e),
        }]});
        TrustedIssuer::from_jwks(ISSUER, &jwks.to_string()).expect("a JWKS of one RSA key")
    }

    /// A token for `audience`, issued at `now` (Unix seconds), and when it expires.
    pub fn token(&self, audience: &str, now: i64) -> (String, i64) {
        let enc = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": KID});
        let expires = now + LIFETIME_SECONDS;
        let claims = serde_json::json!({
            "aud": audience, "iss": ISSUER, "iat": now, "nbf": now, "exp": expires,
            "oid": "00000000-0000-0000-0000-00000000cafe", "sub": "hubhost-local-identity",
        });
        let signed = format!(
            "{}.{}",
            enc(header.to_string().as_bytes()),
            enc(claims.to_string().as_bytes())
        );
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                signed.as_bytes(),
                &mut signature,
            )
            .expect("signing with our own key");
        (format!("{signed}.{}", enc(&signature)), expires)
    }

    /// The endpoint's routes.
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route(TOKEN_PATH, get(token_route))
            .with_state(self)
    }
}

#[derive(serde::Deserialize)]
struct TokenQuery {
    resource: Option<String>,
}

fn refuse(status: StatusCode, error: &str, description: &str) -> Response {
    (
        status,
        Json(serde_json::json!({"error": error, "error_description": description})),
    )
        .into_response()
}

async fn token_route(
    State(identity): State<Arc<LocalIdentity>>,
    headers: HeaderMap,
    Query(query): Query<TokenQuery>,
) -> Response {
    let shown = headers
        .get("x-identity-header")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    // Compared in constant time: the header is the endpoint's only secret.
    if !crate::sas::constant_time_eq(shown.as_bytes(), identity.header.as_bytes()) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "X-IDENTITY-HEADER is missing or wrong: set IDENTITY_HEADER to the value hubhost hub printed",
        );
    }
    let Some(resource) = query.resource.filter(|r| !r.is_empty()) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the query needs resource=…",
        );
    };
    let now = chrono::Utc::now().timestamp();
    let (access_token, expires_on) = identity.token(&resource, now);
    Json(serde_json::json!({
        "access_token": access_token,
        "expires_on": expires_on.to_string(),
        "expires_in": LIFETIME_SECONDS.to_string(),
        "resource": resource,
        "token_type": "Bearer",
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_tokens_are_accepted_by_the_issuer_it_makes_trusted_and_by_no_other() {
        let identity = LocalIdentity::generate().unwrap();
        let now = 1_800_000_000;
        let (token, expires) = identity.token("https://eventhubs.azure.net", now);
        assert_eq!(expires, now + LIFETIME_SECONDS);
        assert_eq!(identity.trusted_issuer().validate(&token, now), Ok(expires));
        let other = LocalIdentity::generate().unwrap();
        assert!(other.trusted_issuer().validate(&token, now).is_err());
        let (storage, _) = identity.token("https://storage.azure.com", now);
        assert!(identity.trusted_issuer().validate(&storage, now).is_err());
        assert!(!format!("{identity:?}").contains(identity.header_secret()));
    }
}

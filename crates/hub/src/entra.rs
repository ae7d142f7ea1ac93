//! Entra ID tokens on `$cbs`: what a client signed in with a token credential puts instead of a
//! SAS — a put-token of type `jwt` whose body is an access token (a JWT signed with RS256) for
//! the audience `https://eventhubs.azure.net/`.
//!
//! A local hub has no Entra ID of its own: it trusts one issuer it is told of (its `iss` and
//! its signing keys as a JWKS document, the format Entra ID publishes its keys in), and checks
//! what the service checks of a token itself — the signature with the key the header names,
//! the issuer, the audience, and the lifetime (five minutes' clock skew, as Entra ID's
//! validators allow). Which roles a principal holds is Azure RBAC, not part of the token: any
//! principal of the trusted issuer may send and receive. Pure; tokens never reach a log.

use base64::Engine;
use serde::Deserialize;

/// The audiences an Event Hubs access token carries (v1 tokens keep the resource's slash).
const AUDIENCES: [&str; 2] = [
    "https://eventhubs.azure.net/",
    "https://eventhubs.azure.net",
];
/// Clock skew allowed around `nbf` and `exp`, in seconds.
const SKEW: i64 = 300;

/// The issuer a hub accepts tokens from, with its public signing keys.
#[derive(Clone)]
pub struct TrustedIssuer {
    pub issuer: String,
    keys: Vec<SigningKey>,
}

impl std::fmt::Debug for TrustedIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TrustedIssuer {{ issuer: {:?}, keys: {} }}",
            self.issuer,
            self.keys.len()
        )
    }
}

#[derive(Clone)]
struct SigningKey {
    kid: Option<String>,
    /// RSA modulus and exponent, big-endian.
    n: Vec<u8>,
    e: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("the token is not a JWT: {0}")]
    Malformed(&'static str),
    #[error("the token is signed with {0}; this hub checks RS256")]
    Algorithm(String),
    #[error("the token names the signing key {0:?}, which the trusted issuer does not have")]
    UnknownKey(String),
    #[error("the token's signature does not verify with the trusted issuer's key")]
    BadSignature,
    #[error("the token was issued by {0:?}, not by the issuer this hub trusts")]
    WrongIssuer(String),
    #[error("the token is for {0:?}, not for https://eventhubs.azure.net/")]
    WrongAudience(String),
    #[error("the token expired at {expired_at} (now {now})")]
    Expired { expired_at: i64, now: i64 },
    #[error("the token is not valid before {not_before} (now {now})")]
    NotYetValid { not_before: i64, now: i64 },
}

/// What a JWKS document says, as far as RSA signing keys go.
#[derive(Deserialize)]
struct Jwks {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    n: Option<String>,
    e: Option<String>,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
}

#[derive(Deserialize)]
struct Claims {
    iss: Option<String>,
    aud: Option<Audience>,
    exp: Option<i64>,
    nbf: Option<i64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

fn b64url(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .ok()
}

impl TrustedIssuer {
    /// The issuer `issuer` with the RSA keys of a JWKS document (other key types are skipped;
    /// none at all is an error).
    pub fn from_jwks(issuer: &str, jwks: &str) -> Result<Self, String> {
        let doc: Jwks =
            serde_json::from_str(jwks).map_err(|e| format!("not a JWKS document: {e}"))?;
        let keys: Vec<SigningKey> = doc
            .keys
            .into_iter()
            .filter(|k| k.kty == "RSA")
            .filter_map(|k| {
                Some(SigningKey {
                    kid: k.kid,
                    n: b64url(k.n.as_deref()?)?,
                    e: b64url(k.e.as_deref()?)?,
                })
            })
            .collect();
        if keys.is_empty() {
            return Err("the JWKS document has no RSA key (kty RSA with n and e)".into());
        }
        if issuer.trim().is_empty() {
            return Err("the trusted issuer needs a name (the tokens' iss)".into());
        }
        Ok(TrustedIssuer {
            issuer: issuer.trim().to_string(),
            keys,
        })
    }

    /// Checks `token` at `now` (Unix seconds); returns when it expires.
    pub fn validate(&self, token: &str, now: i64) -> Result<i64, JwtError> {
        let mut parts = token.trim().split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JwtError::Malformed("it does not have three parts"));
        };
        let header: Header = b64url(header)
            .and_then(|h| serde_json::from_slice(&h).ok())
            .ok_or(JwtError::Malformed("its header is not base64url JSON"))?;
        if header.alg != "RS256" {
            return Err(JwtError::Algorithm(header.alg.chars().take(20).collect()));
        }
        let signature =
            b64url(signature).ok_or(JwtError::Malformed("its signature is not base64url"))?;
        let key = match &header.kid {
            Some(kid) => self
                .keys
                .iter()
                .find(|k| k.kid.as_deref() == Some(kid.as_str()))
                .ok_or_else(|| JwtError::UnknownKey(kid.chars().take(80).collect()))?,
            None if self.keys.len() == 1 => &self.keys[0],
            None => return Err(JwtError::UnknownKey(String::new())),
        };
        let signed = &token.trim()[..header_and_payload_len(token.trim())];
        ring::signature::RsaPublicKeyComponents {
            n: &key.n,
            e: &key.e,
        }
        .verify(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            signed.as_bytes(),
            &signature,
        )
        .map_err(|_| JwtError::BadSignature)?;
        let claims: Claims = b64url(payload)
            .and_then(|p| serde_json::from_slice(&p).ok())
            .ok_or(JwtError::Malformed("its claims are not base64url JSON"))?;
        let iss = claims.iss.unwrap_or_default();
        if iss != self.issuer {
            return Err(JwtError::WrongIssuer(iss.chars().take(200).collect()));
        }
        let audiences = match claims.aud {
            Some(Audience::One(a)) => vec![a],
            Some(Audience::Many(a)) => a,
            None => Vec::new(),
        };
        if !audiences.iter().any(|a| AUDIENCES.contains(&a.as_str())) {
            return Err(JwtError::WrongAudience(
                audiences.join(", ").chars().take(200).collect(),
            ));
        }
        let expires_at = claims.exp.ok_or(JwtError::Malformed("it has no exp"))?;
        if expires_at + SKEW <= now {
            return Err(JwtError::Expired {
                expired_at: expires_at,
                now,
            });
        }
        if let Some(not_before) = claims.nbf
            && not_before - SKEW > now
        {
            return Err(JwtError::NotYetValid { not_before, now });
        }
        Ok(expires_at)
    }
}

/// The length of `header.payload`, the part a JWT's signature covers.
fn header_and_payload_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2048-bit test key pair made for these tests (PKCS#8, then its JWKS parts).
    const PKCS8: &str = include_str!("testdata/jwt-test-key.pk8.b64");
    const ISSUER: &str = "https://sts.windows.net/hubhost-test/";

    fn keypair() -> ring::rsa::KeyPair {
        let der = base64::engine::general_purpose::STANDARD
            .decode(PKCS8.split_whitespace().collect::<String>())
            .unwrap();
        ring::rsa::KeyPair::from_pkcs8(&der).unwrap()
    }

    fn jwks(kid: &str) -> String {
        let pair = keypair();
        let public: ring::rsa::PublicKeyComponents<Vec<u8>> = pair.public().into();
        let enc = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        format!(
            r#"{{"keys":[{{"kty":"EC","kid":"x"}},{{"kty":"RSA","use":"sig","kid":"{kid}","n":"{}","e":"{}"}}]}}"#,
            enc(&public.n),
            enc(&public.e)
        )
    }

    fn sign(header: &str, claims: &str) -> String {
        let enc = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let signed = format!("{}.{}", enc(header.as_bytes()), enc(claims.as_bytes()));
        let pair = keypair();
        let mut signature = vec![0; pair.public().modulus_len()];
        pair.sign(
            &ring::signature::RSA_PKCS1_SHA256,
            &ring::rand::SystemRandom::new(),
            signed.as_bytes(),
            &mut signature,
        )
        .unwrap();
        format!("{signed}.{}", enc(&signature))
    }

    fn claims(iss: &str, aud: &str, nbf: i64, exp: i64) -> String {
        format!(r#"{{"iss":"{iss}","aud":{aud},"nbf":{nbf},"exp":{exp},"oid":"o-1"}}"#)
    }

    const NOW: i64 = 1_800_000_000;
    const HEADER: &str = r#"{"alg":"RS256","typ":"JWT","kid":"k1"}"#;

    #[test]
    fn a_token_of_the_trusted_issuer_for_event_hubs_is_accepted_until_it_expires() {
        let trusted = TrustedIssuer::from_jwks(ISSUER, &jwks("k1")).unwrap();
        for aud in [
            r#""https://eventhubs.azure.net/""#,
            r#""https://eventhubs.azure.net""#,
            r#"["api://other","https://eventhubs.azure.net/"]"#,
        ] {
            let token = sign(HEADER, &claims(ISSUER, aud, NOW - 60, NOW + 3600));
            assert_eq!(trusted.validate(&token, NOW), Ok(NOW + 3600), "{aud}");
        }
        let token = sign(
            HEADER,
            &claims(
                ISSUER,
                r#""https://eventhubs.azure.net/""#,
                NOW - 60,
                NOW + 60,
            ),
        );
        assert!(trusted.validate(&token, NOW + 60 + SKEW - 1).is_ok());
        assert!(matches!(
            trusted.validate(&token, NOW + 60 + SKEW),
            Err(JwtError::Expired { .. })
        ));
    }

    #[test]
    fn every_other_token_is_refused_with_its_reason() {
        let trusted = TrustedIssuer::from_jwks(ISSUER, &jwks("k1")).unwrap();
        let eh = r#""https://eventhubs.azure.net/""#;
        let good = claims(ISSUER, eh, NOW - 60, NOW + 3600);
        let check = |token: &str| trusted.validate(token, NOW);
        assert_eq!(
            check(&sign(HEADER, &claims("https://evil/", eh, NOW, NOW + 60))),
            Err(JwtError::WrongIssuer("https://evil/".into()))
        );
        assert_eq!(
            check(&sign(
                HEADER,
                &claims(ISSUER, r#""https://storage.azure.com/""#, NOW, NOW + 60)
            )),
            Err(JwtError::WrongAudience("https://storage.azure.com/".into()))
        );
        assert!(matches!(
            check(&sign(HEADER, &claims(ISSUER, eh, NOW + 3600, NOW + 7200))),
            Err(JwtError::NotYetValid { .. })
        ));
        assert_eq!(
            check(&sign(r#"{"alg":"RS256","kid":"k9"}"#, &good)),
            Err(JwtError::UnknownKey("k9".into()))
        );
        assert_eq!(
            check(&sign(r#"{"alg":"HS256","kid":"k1"}"#, &good)),
            Err(JwtError::Algorithm("HS256".into()))
        );
        // A claim changed after signing.
        let token = sign(HEADER, &good);
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims(
            ISSUER,
            eh,
            NOW - 60,
            NOW + 99_999,
        ));
        parts[1] = &forged;
        assert_eq!(check(&parts.join(".")), Err(JwtError::BadSignature));
        // The signature of another key (the same claims, "signed" by nobody).
        assert_eq!(
            check(&format!("{}.{}.c2lnbmF0dXJl", parts[0], parts[1])),
            Err(JwtError::BadSignature)
        );
        for junk in [
            "",
            "a.b",
            "a.b.c.d",
            "!!.e30.e30",
            "SharedAccessSignature sr=x",
        ] {
            assert!(matches!(check(junk), Err(JwtError::Malformed(_))), "{junk}");
        }
    }

    #[test]
    fn a_jwks_without_an_rsa_key_or_an_issuer_is_refused() {
        assert!(TrustedIssuer::from_jwks(ISSUER, r#"{"keys":[{"kty":"EC"}]}"#).is_err());
        assert!(TrustedIssuer::from_jwks(ISSUER, "not json").is_err());
        assert!(TrustedIssuer::from_jwks(" ", &jwks("k1")).is_err());
    }
}

//! Who a Kafka client is: SASL PLAIN with Event Hubs' convention (user `$ConnectionString`, the
//! connection string as the password) or OAUTHBEARER with an Entra ID token, checked against the
//! same keys and trusted issuer as AMQP. What a client may touch is an `Access`: every hub, or
//! the one its connection string names (`EntityPath`, or a shared access signature for one hub).
//! Beside it an [`Authenticated`] client has a principal (what the hub's per-client caps count
//! by: its key and scope) and, for a token, when its credential expires.

use crate::entra::TrustedIssuer;
use crate::sas::{self, Right, Rights, SharedAccessKey};

pub const PLAIN: &str = "PLAIN";
pub const OAUTHBEARER: &str = "OAUTHBEARER";
pub const MECHANISMS: [&str; 2] = [PLAIN, OAUTHBEARER];
/// The user name Event Hubs expects with PLAIN.
pub const CONNECTION_STRING_USER: &str = "$ConnectionString";

/// What an authenticated client may read and write: every hub or one, with the rights of the
/// key its credentials were made with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The one hub (lowercased), or `None` for every hub.
    pub hub: Option<String>,
    pub rights: Rights,
}

/// An authenticated client: what it may touch, who it counts as, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub access: Access,
    /// The key its credentials were made with (`key:NAME`, the same for every token that key
    /// signs) or `entra` for an Entra ID token, with its scope (`@hub`, or `@*` for every hub).
    pub principal: String,
    /// When its credential expires (Unix seconds): a shared access signature's or an Entra ID
    /// token's expiry; `None` for a key, which does not.
    pub expires_at: Option<i64>,
}

impl Authenticated {
    fn new(access: Access, who: &str, expires_at: Option<i64>) -> Self {
        let principal = format!("{who}@{}", access.hub.as_deref().unwrap_or("*"));
        Authenticated {
            access,
            principal,
            expires_at,
        }
    }
}

impl Access {
    pub fn all_hubs(rights: Rights) -> Self {
        Access { hub: None, rights }
    }

    pub fn hub(name: &str, rights: Rights) -> Self {
        Access {
            hub: Some(name.to_ascii_lowercase()),
            rights,
        }
    }

    /// Whether the client may see `hub` at all.
    pub fn covers(&self, hub: &str) -> bool {
        self.hub
            .as_deref()
            .is_none_or(|name| name.eq_ignore_ascii_case(hub))
    }

    /// Whether the client may do what needs `right` on `hub`.
    pub fn allows(&self, hub: &str, right: Right) -> bool {
        self.covers(hub) && self.rights.allows(right)
    }
}

/// Why authentication failed, in words the client shows its user (no secret in any of them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("PLAIN credentials are `authzid NUL user NUL password`; these are not")]
    PlainFormat,
    #[error(
        "the user name must be `$ConnectionString` (with the connection string as the password), not {0:?}"
    )]
    User(String),
    #[error("the password is not a connection string: it lacks {0}")]
    ConnectionString(&'static str),
    #[error("the connection string names the key {0:?}, which this hub does not have")]
    UnknownKey(String),
    #[error("the connection string's key does not match the key {0:?}")]
    WrongKey(String),
    #[error("the connection string's shared access signature is refused: {0}")]
    Signature(sas::SasError),
    #[error("OAUTHBEARER credentials are `n,,\\x01auth=Bearer <token>\\x01\\x01`; these are not")]
    BearerFormat,
    #[error(
        "this hub accepts no Entra ID tokens (start it with --entra-issuer and --entra-jwks), use PLAIN"
    )]
    NoIssuer,
    #[error("the Entra ID token is refused: {0}")]
    Token(crate::entra::JwtError),
}

/// Checks PLAIN credentials; `now` in Unix seconds.
pub fn plain(auth: &[u8], keys: &[SharedAccessKey], now: i64) -> Result<Authenticated, AuthError> {
    let text = std::str::from_utf8(auth).map_err(|_| AuthError::PlainFormat)?;
    let mut parts = text.split('\0');
    let (Some(_authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::PlainFormat);
    };
    if user != CONNECTION_STRING_USER {
        return Err(AuthError::User(user.chars().take(64).collect()));
    }
    connection_string(password, keys, now)
}

/// What a connection string grants: its key checked against the hub's keys, or its shared access
/// signature validated; `EntityPath` narrows it to one hub.
pub fn connection_string(
    text: &str,
    keys: &[SharedAccessKey],
    now: i64,
) -> Result<Authenticated, AuthError> {
    let mut endpoint = None;
    let mut key_name = None;
    let mut key = None;
    let mut signature = None;
    let mut entity = None;
    for pair in text.split(';') {
        let Some((name, value)) = pair.split_once('=') else {
            continue;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "endpoint" => endpoint = Some(value.trim()),
            "sharedaccesskeyname" => key_name = Some(value.trim()),
            "sharedaccesskey" => key = Some(value.trim()),
            "sharedaccesssignature" => signature = Some(value.trim()),
            "entitypath" => entity = Some(value.trim().to_ascii_lowercase()),
            _ => {}
        }
    }
    endpoint.ok_or(AuthError::ConnectionString("Endpoint="))?;
    let (access, who, expires_at) = match (signature, key_name, key) {
        (Some(token), _, _) => {
            let grant = sas::validate(token, keys, now).map_err(AuthError::Signature)?;
            let access = match sas::granted_hub(&grant) {
                None => Access::all_hubs(grant.rights),
                Some(hub) => Access::hub(hub, grant.rights),
            };
            // Every token a key signs counts as that key: a client cannot make itself many
            // principals by signing many tokens.
            let signer = token
                .split(['&', ' '])
                .find_map(|field| field.strip_prefix("skn="))
                .unwrap_or("");
            (access, format!("key:{signer}"), Some(grant.expires_at))
        }
        (None, Some(name), Some(presented)) => {
            let known = keys
                .iter()
                .find(|k| k.name == name)
                .ok_or_else(|| AuthError::UnknownKey(name.chars().take(64).collect()))?;
            if !sas::constant_time_eq(known.key.as_bytes(), presented.as_bytes()) {
                return Err(AuthError::WrongKey(known.name.clone()));
            }
            (
                Access::all_hubs(known.rights),
                format!("key:{}", known.name),
                None,
            )
        }
        (None, None, _) => return Err(AuthError::ConnectionString("SharedAccessKeyName=")),
        (None, Some(_), None) => return Err(AuthError::ConnectionString("SharedAccessKey=")),
    };
    let access = match (access, entity) {
        (Access { hub: None, rights }, Some(hub)) => Access::hub(&hub, rights),
        (access, _) => access,
    };
    Ok(Authenticated::new(access, &who, expires_at))
}

/// Checks OAUTHBEARER credentials (RFC 7628's client first message); returns the access and
/// when the token expires (Unix seconds).
pub fn oauthbearer(
    auth: &[u8],
    issuer: Option<&TrustedIssuer>,
    now: i64,
) -> Result<Authenticated, AuthError> {
    let text = std::str::from_utf8(auth).map_err(|_| AuthError::BearerFormat)?;
    let token = text
        .split('\x01')
        .find_map(|field| field.strip_prefix("auth="))
        .and_then(|auth| {
            auth.strip_prefix("Bearer ")
                .or_else(|| auth.strip_prefix("bearer "))
        })
        .ok_or(AuthError::BearerFormat)?;
    let issuer = issuer.ok_or(AuthError::NoIssuer)?;
    let expires = issuer.validate(token, now).map_err(AuthError::Token)?;
    // Event Hubs decides an identity's rights by its role assignments, which a local hub does
    // not have: a trusted issuer's token may do everything.
    Ok(Authenticated::new(
        Access::all_hubs(Rights::ALL),
        "entra",
        Some(expires),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What PLAIN credentials give access to.
    fn plain_access(auth: &[u8], keys: &[SharedAccessKey], now: i64) -> Result<Access, AuthError> {
        plain(auth, keys, now).map(|a| a.access)
    }

    fn keys() -> Vec<SharedAccessKey> {
        vec![SharedAccessKey::emulator()]
    }

    fn credentials(user: &str, password: &str) -> Vec<u8> {
        format!("\0{user}\0{password}").into_bytes()
    }

    const EMULATOR: &str = "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;";

    #[test]
    fn the_emulators_connection_string_grants_every_hub_and_entity_path_one() {
        assert_eq!(
            plain_access(&credentials("$ConnectionString", EMULATOR), &keys(), 0),
            Ok(Access::all_hubs(Rights::ALL))
        );
        let scoped = format!("{EMULATOR}EntityPath=Sensors");
        let access = plain_access(&credentials("$ConnectionString", &scoped), &keys(), 0).unwrap();
        assert_eq!(access, Access::hub("sensors", Rights::ALL));
        assert!(access.covers("SENSORS") && !access.covers("alarms"));
    }

    #[test]
    fn a_signature_for_one_hub_grants_that_hub() {
        let token = sas::sign("sb://localhost/alarms", &keys()[0], 2_000_000_000);
        let text = format!("Endpoint=sb://localhost;SharedAccessSignature={token}");
        assert_eq!(
            plain_access(&credentials("$ConnectionString", &text), &keys(), 0),
            Ok(Access::hub("alarms", Rights::ALL))
        );
        assert!(matches!(
            plain_access(
                &credentials("$ConnectionString", &text),
                &keys(),
                2_000_000_001
            ),
            Err(AuthError::Signature(sas::SasError::Expired { .. }))
        ));
    }

    #[test]
    fn wrong_credentials_are_refused_by_name_without_the_secret() {
        let wrong = EMULATOR.replace("SAS_KEY_VALUE", "guess");
        let error =
            plain_access(&credentials("$ConnectionString", &wrong), &keys(), 0).unwrap_err();
        assert_eq!(
            error,
            AuthError::WrongKey("RootManageSharedAccessKey".into())
        );
        assert!(!error.to_string().contains("guess"));
        assert!(matches!(
            plain_access(&credentials("alice", EMULATOR), &keys(), 0),
            Err(AuthError::User(_))
        ));
        assert_eq!(
            plain_access(b"no separators", &keys(), 0),
            Err(AuthError::PlainFormat)
        );
        assert!(matches!(
            plain_access(
                &credentials("$ConnectionString", "SharedAccessKeyName=x"),
                &keys(),
                0
            ),
            Err(AuthError::ConnectionString(_))
        ));
        let other = EMULATOR.replace("RootManageSharedAccessKey", "Listen");
        assert_eq!(
            plain_access(&credentials("$ConnectionString", &other), &keys(), 0),
            Err(AuthError::UnknownKey("Listen".into()))
        );
    }

    #[test]
    fn a_key_s_rights_come_with_its_credentials() {
        let keys = vec![SharedAccessKey::parse("SendOnly=c2VjcmV0:Send").unwrap()];
        let text = "Endpoint=sb://localhost;SharedAccessKeyName=SendOnly;SharedAccessKey=c2VjcmV0;EntityPath=sensors";
        let access = plain_access(&credentials("$ConnectionString", text), &keys, 0).unwrap();
        assert!(access.allows("sensors", Right::Send));
        assert!(!access.allows("sensors", Right::Listen));
        assert!(!access.allows("alarms", Right::Send));
    }

    #[test]
    fn oauthbearer_needs_a_trusted_issuer() {
        assert_eq!(
            oauthbearer(b"n,,\x01auth=Bearer abc\x01\x01", None, 0),
            Err(AuthError::NoIssuer)
        );
        assert_eq!(
            oauthbearer(b"n,,\x01\x01", None, 0),
            Err(AuthError::BearerFormat)
        );
    }

    #[test]
    fn a_client_counts_as_its_key_and_scope_and_a_token_carries_its_expiry() {
        let root = plain(&credentials("$ConnectionString", EMULATOR), &keys(), 0).unwrap();
        assert_eq!(root.principal, "key:RootManageSharedAccessKey@*");
        assert_eq!(root.expires_at, None);
        let scoped = format!("{EMULATOR}EntityPath=alarms");
        let scoped = plain(&credentials("$ConnectionString", &scoped), &keys(), 0).unwrap();
        assert_eq!(scoped.principal, "key:RootManageSharedAccessKey@alarms");
        // Two tokens of one key are one principal.
        let principals: Vec<_> = [2_000_000_000, 2_000_000_100]
            .into_iter()
            .map(|expiry| {
                let token = sas::sign("sb://localhost/alarms", &keys()[0], expiry);
                let text = format!("Endpoint=sb://localhost;SharedAccessSignature={token}");
                let client = plain(&credentials("$ConnectionString", &text), &keys(), 0).unwrap();
                assert_eq!(client.expires_at, Some(expiry));
                client.principal
            })
            .collect();
        assert_eq!(principals[0], principals[1]);
        assert_eq!(principals[0], "key:RootManageSharedAccessKey@alarms");
    }
}

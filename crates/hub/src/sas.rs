//! Shared access signatures, as Event Hubs issues and checks them: the token a client presents in
//! a `$cbs` put-token (or a management request), signed with one of the namespace's keys.
//!
//! A token is `SharedAccessSignature sr=<resource>&sig=<signature>&se=<expiry>&skn=<key name>`, where
//! the signature is `base64(HMAC-SHA256(key, "<resource as it appears in the token>\n<expiry>"))`.
//! SDKs differ in how they percent-encode the resource, so the check signs the exact text the
//! client put in `sr`, which is also what the client signed.

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The key name and key of the official Event Hubs emulator, which users' connection strings
/// (`SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE`) carry.
pub const EMULATOR_KEY_NAME: &str = "RootManageSharedAccessKey";
pub const EMULATOR_KEY: &str = "SAS_KEY_VALUE";

/// A key the hub accepts signatures from, and what its holders may do.
#[derive(Clone)]
pub struct SharedAccessKey {
    pub name: String,
    pub key: String,
    pub rights: Rights,
}

impl SharedAccessKey {
    /// The official emulator's key, with every right.
    pub fn emulator() -> Self {
        SharedAccessKey {
            name: EMULATOR_KEY_NAME.into(),
            key: EMULATOR_KEY.into(),
            rights: Rights::ALL,
        }
    }

    /// `name=key`, or `name=key:Send,Listen` with the rights (claims) it grants — `Send`,
    /// `Listen`, `Manage` (which includes the other two, as Event Hubs requires) — as
    /// `hubhost hub --key` takes it; without rights, all three. Pure.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (name, rest) = text
            .split_once('=')
            .filter(|(n, v)| !n.is_empty() && !v.is_empty())
            .ok_or("--key takes name=key or name=key:Send,Listen,Manage")?;
        // A key is base64 (no `:`); what follows the last `:` is rights when it reads as rights.
        let (key, rights) = match rest.rsplit_once(':') {
            Some((key, rights)) if !key.is_empty() => (key, Rights::parse(rights)?),
            _ => (rest, Rights::ALL),
        };
        Ok(SharedAccessKey {
            name: name.into(),
            key: key.into(),
            rights,
        })
    }
}

/// One of the claims of Event Hubs' shared access policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// Sending events.
    Send,
    /// Receiving events, and a consumer's group and offsets.
    Listen,
    /// Changing the namespace (and, as on Event Hubs, sending and receiving).
    Manage,
}

/// The rights a key (and every token signed with it) grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rights {
    pub send: bool,
    pub listen: bool,
    pub manage: bool,
}

impl Rights {
    pub const ALL: Rights = Rights {
        send: true,
        listen: true,
        manage: true,
    };

    /// `Send,Listen`, `Manage`, … (case-insensitive; `Manage` includes the others). Pure.
    pub fn parse(text: &str) -> Result<Rights, String> {
        let mut rights = Rights {
            send: false,
            listen: false,
            manage: false,
        };
        for claim in text.split(',').map(str::trim) {
            match claim.to_ascii_lowercase().as_str() {
                "send" => rights.send = true,
                "listen" => rights.listen = true,
                "manage" => rights = Rights::ALL,
                _ => {
                    return Err(format!(
                        "a key's rights are Send, Listen and Manage, comma-separated; not {claim:?}"
                    ));
                }
            }
        }
        Ok(rights)
    }

    pub fn allows(self, right: Right) -> bool {
        match right {
            Right::Send => self.send,
            Right::Listen => self.listen,
            Right::Manage => self.manage,
        }
    }
}

impl std::fmt::Debug for SharedAccessKey {
    // Keys never reach a log, even through a Debug print of the configuration.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SharedAccessKey {{ name: {:?}, key: <redacted>, rights: {:?} }}",
            self.name, self.rights
        )
    }
}

/// What a valid token grants: access to `resource` (a URI without scheme, lowercased) until
/// `expires_at` (Unix seconds), with the rights of the key that signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub resource: String,
    pub expires_at: i64,
    pub rights: Rights,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SasError {
    #[error("the token is not a SharedAccessSignature")]
    NotSas,
    #[error("the token lacks the field `{0}`")]
    MissingField(&'static str),
    #[error("the token's expiry `{0}` is not a Unix time")]
    BadExpiry(String),
    #[error("the token expired at {expired_at} (now {now})")]
    Expired { expired_at: i64, now: i64 },
    #[error("the token names the key `{0}`, which this hub does not have")]
    UnknownKey(String),
    #[error("the token's signature does not match the key `{0}`")]
    BadSignature(String),
    #[error(
        "the token's resource `{0}` names no namespace host (as sb://HOST/HUB or HOST/HUB), so it matches no namespace"
    )]
    NoHost(String),
}

/// Signs a token for `resource`, valid until `expires_at`: what clients do.
pub fn sign(resource: &str, key: &SharedAccessKey, expires_at: i64) -> String {
    let encoded: String = percent_encoding::utf8_percent_encode(resource, URI_COMPONENT).collect();
    let signature = signature(&key.key, &encoded, expires_at);
    let signature: String =
        percent_encoding::utf8_percent_encode(&signature, URI_COMPONENT).collect();
    format!(
        "SharedAccessSignature sr={encoded}&sig={signature}&se={expires_at}&skn={}",
        key.name
    )
}

/// Checks a token against the hub's keys at time `now` (Unix seconds).
pub fn validate(token: &str, keys: &[SharedAccessKey], now: i64) -> Result<Grant, SasError> {
    let fields = token
        .trim()
        .strip_prefix("SharedAccessSignature ")
        .ok_or(SasError::NotSas)?;
    let mut resource = None;
    let mut sig = None;
    let mut expiry = None;
    let mut key_name = None;
    for pair in fields.split('&') {
        match pair.split_once('=') {
            Some(("sr", v)) => resource = Some(v),
            Some(("sig", v)) => sig = Some(v),
            Some(("se", v)) => expiry = Some(v),
            Some(("skn", v)) => key_name = Some(v),
            _ => {}
        }
    }
    let resource = resource.ok_or(SasError::MissingField("sr"))?;
    let sig = sig.ok_or(SasError::MissingField("sig"))?;
    let expiry_text = expiry.ok_or(SasError::MissingField("se"))?;
    let key_name = key_name.ok_or(SasError::MissingField("skn"))?;
    let expires_at: i64 = expiry_text
        .parse()
        .map_err(|_| SasError::BadExpiry(expiry_text.to_string()))?;
    let key = keys
        .iter()
        .find(|k| k.name == key_name)
        .ok_or_else(|| SasError::UnknownKey(key_name.to_string()))?;
    let presented = percent_decode(sig);
    let expected = signature(&key.key, resource, expires_at);
    if !constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
        return Err(SasError::BadSignature(key_name.to_string()));
    }
    if expires_at <= now {
        return Err(SasError::Expired {
            expired_at: expires_at,
            now,
        });
    }
    let decoded = percent_decode(resource);
    if !names_a_host(&decoded) {
        return Err(SasError::NoHost(decoded.chars().take(256).collect()));
    }
    Ok(Grant {
        resource: normalize_resource(&decoded),
        expires_at,
        rights: key.rights,
    })
}

/// True when a grant covers hub `hub`: a namespace-wide token (no path) covers every hub, a
/// token for a hub or for anything under it covers that hub. Hosts are not compared: a local hub
/// answers to whatever name the client dialled (localhost, 127.0.0.1, or a namespace's name).
pub fn grants_hub(grant: &Grant, hub: &str) -> bool {
    granted_hub(grant).is_none_or(|granted| granted.eq_ignore_ascii_case(hub))
}

/// The one hub a grant is for (the first segment of its resource's path), or `None` for a
/// namespace-wide grant.
pub fn granted_hub(grant: &Grant) -> Option<&str> {
    let path = grant.resource.split_once('/').map(|(_, p)| p).unwrap_or("");
    Some(path.split('/').next().unwrap_or("")).filter(|first| !first.is_empty())
}

/// Whether a token's resource starts with a namespace's host, as Event Hubs reads every `sr`
/// (`sb://HOST/PATH`, or without the scheme `HOST/PATH`): with a scheme, whatever follows it;
/// without one, a first segment that a client could have dialled — `localhost`, a name with a
/// dot, a port or an IPv6 literal. A bare `sensors` is a host on Event Hubs too, one no
/// namespace has: read as this hub's namespace, it would grant every hub. Pure.
pub fn names_a_host(resource: &str) -> bool {
    if let Some((_, rest)) = resource.split_once("://") {
        return !rest.is_empty() && !rest.starts_with('/');
    }
    let host = resource.split('/').next().unwrap_or("");
    host.eq_ignore_ascii_case("localhost")
        || host.contains('.')
        || host.contains(':')
        || host.starts_with('[')
}

/// `amqps://Host/Hub/` → `host/hub`: scheme and trailing slashes dropped, lowercased.
pub fn normalize_resource(resource: &str) -> String {
    let without_scheme = resource
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or(resource);
    without_scheme.trim_end_matches('/').to_ascii_lowercase()
}

fn signature(key: &str, encoded_resource: &str, expires_at: i64) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key");
    mac.update(format!("{encoded_resource}\n{expires_at}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// Compares secrets in time that does not depend on where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What JavaScript's encodeURIComponent leaves alone, which is what the SDKs use for `sr`.
const URI_COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SharedAccessKey {
        SharedAccessKey::emulator()
    }

    #[test]
    fn a_signed_token_validates_and_grants_its_resource() {
        let token = sign("sb://localhost/sensors", &key(), 2_000);
        let grant = validate(&token, &[key()], 1_000).unwrap();
        assert_eq!(grant.resource, "localhost/sensors");
        assert_eq!(grant.expires_at, 2_000);
        assert!(grants_hub(&grant, "sensors"));
        assert!(grants_hub(&grant, "SENSORS"));
        assert!(!grants_hub(&grant, "sensors2"));
        assert!(!grants_hub(&grant, "other"));
    }

    #[test]
    fn wrong_key_expired_and_malformed_tokens_are_refused() {
        let wrong = SharedAccessKey {
            key: "not-the-key".into(),
            ..key()
        };
        let token = sign("sb://localhost/sensors", &wrong, 2_000);
        assert_eq!(
            validate(&token, &[key()], 1_000),
            Err(SasError::BadSignature(EMULATOR_KEY_NAME.into()))
        );
        let token = sign("sb://localhost/sensors", &key(), 900);
        assert!(matches!(
            validate(&token, &[key()], 1_000),
            Err(SasError::Expired { .. })
        ));
        let other = SharedAccessKey {
            name: "listen".into(),
            ..key()
        };
        let token = sign("sb://localhost/sensors", &other, 2_000);
        assert_eq!(
            validate(&token, &[key()], 1_000),
            Err(SasError::UnknownKey("listen".into()))
        );
        assert_eq!(validate("Bearer abc", &[key()], 0), Err(SasError::NotSas));
        assert_eq!(
            validate("SharedAccessSignature sr=a&se=1&skn=k", &[key()], 0),
            Err(SasError::MissingField("sig"))
        );
    }

    #[test]
    fn a_namespace_token_covers_every_hub_and_a_partition_token_its_hub() {
        let grant = |resource: &str| Grant {
            resource: normalize_resource(resource),
            expires_at: 0,
            rights: Rights::ALL,
        };
        assert!(grants_hub(&grant("sb://localhost/"), "sensors"));
        assert!(grants_hub(
            &grant("amqps://ns/sensors/Partitions/0"),
            "sensors"
        ));
        assert!(!grants_hub(
            &grant("amqps://ns/orders/Partitions/0"),
            "sensors"
        ));
    }

    #[test]
    fn a_key_carries_the_rights_it_was_given_and_its_tokens_too() {
        let send_only = SharedAccessKey::parse("SendOnly=c2VjcmV0:Send").unwrap();
        assert_eq!(
            (send_only.name.as_str(), send_only.key.as_str()),
            ("SendOnly", "c2VjcmV0")
        );
        assert!(send_only.rights.allows(Right::Send));
        assert!(!send_only.rights.allows(Right::Listen) && !send_only.rights.allows(Right::Manage));
        let token = sign("sb://localhost/sensors", &send_only, 2_000);
        let grant = validate(&token, &[send_only], 1_000).unwrap();
        assert!(grant.rights.send && !grant.rights.listen);

        let plain = SharedAccessKey::parse("k=secret").unwrap();
        assert_eq!((plain.key.as_str(), plain.rights), ("secret", Rights::ALL));
        assert_eq!(
            SharedAccessKey::parse("k=s:manage").unwrap().rights,
            Rights::ALL
        );
        let both = SharedAccessKey::parse("k=s:Send, Listen").unwrap().rights;
        assert!(both.send && both.listen && !both.manage);
        assert!(
            SharedAccessKey::parse("k=s:Read")
                .unwrap_err()
                .contains("\"Read\"")
        );
        assert!(SharedAccessKey::parse("=s").is_err());
        assert!(SharedAccessKey::parse("k=").is_err());
    }

    #[test]
    fn a_resource_is_matched_from_its_host_as_event_hubs_matches_it() {
        // Hosts as clients write them, with or without a scheme: each names its hub.
        for resource in [
            "sb://localhost:5672/sensors",
            "amqps://MyNs.servicebus.windows.net/Sensors",
            "localhost/sensors",
            "myns.servicebus.windows.net/sensors",
            "127.0.0.1:5672/sensors",
            "[::1]:5672/sensors",
        ] {
            let grant = validate(&sign(resource, &key(), 2_000), &[key()], 1_000).unwrap();
            assert_eq!(granted_hub(&grant), Some("sensors"), "{resource}");
        }
        // A resource without a host matches no namespace: not a grant of every hub.
        for resource in ["sensors", "sensors/partitions/0", "sb:///sensors", ""] {
            assert!(
                matches!(
                    validate(&sign(resource, &key(), 2_000), &[key()], 1_000),
                    Err(SasError::NoHost(_))
                ),
                "{resource:?}"
            );
        }
        let namespace = validate(&sign("sb://localhost/", &key(), 2_000), &[key()], 1_000).unwrap();
        assert_eq!(granted_hub(&namespace), None);
    }

    #[test]
    fn the_debug_print_of_a_key_hides_it() {
        assert!(!format!("{:?}", key()).contains(EMULATOR_KEY));
    }
}

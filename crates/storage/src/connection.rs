//! Azure Storage connection strings, as users write them in `AzureWebJobsStorage`.
//!
//! Supports `UseDevelopmentStorage=true` (Azurite's well-known account), account-key strings
//! (`AccountName=…;AccountKey=…`, with `DefaultEndpointsProtocol`, `EndpointSuffix` or an explicit
//! `BlobEndpoint`, `QueueEndpoint` and `TableEndpoint`) and SAS strings (`BlobEndpoint=…;SharedAccessSignature=…`). The key and the
//! SAS are secrets: `Debug` shows neither, and nothing here formats them into a message.
//! Without a secret, a blob service URL (`https://acct.blob.core.windows.net`) signs in with
//! Entra ID, as identity-based connections of Functions apps do.

use std::fmt;

use hubhost_identity::IdentityChoice;

/// Azurite's fixed development account (public, documented by Microsoft).
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
pub const DEV_BLOB_ENDPOINT: &str = "http://127.0.0.1:10000/devstoreaccount1";
pub const DEV_QUEUE_ENDPOINT: &str = "http://127.0.0.1:10001/devstoreaccount1";
pub const DEV_TABLE_ENDPOINT: &str = "http://127.0.0.1:10002/devstoreaccount1";

#[derive(Clone, PartialEq)]
pub enum Credential {
    SharedKey {
        account: String,
        key: String,
    },
    /// A SAS token (query string without the leading `?`).
    Sas(String),
    /// Entra ID bearer tokens for an identity (see the `hubhost-identity` crate).
    EntraId(IdentityChoice),
}

#[derive(Clone, PartialEq)]
pub struct StorageConnection {
    /// Blob service endpoint without a trailing slash, e.g. `https://acct.blob.core.windows.net`
    /// or `http://127.0.0.1:10000/devstoreaccount1`.
    pub blob_endpoint: String,
    /// The queue and table services of the same account (queue and table outputs), where the
    /// string names or implies them: `QueueEndpoint` / `TableEndpoint`, else derived from
    /// `AccountName` as the Azure SDKs derive them.
    pub queue_endpoint: Option<String>,
    pub table_endpoint: Option<String>,
    pub credential: Credential,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConnectionStringError {
    #[error(
        "the storage connection string has no credential: give AccountName and AccountKey, \
         or SharedAccessSignature, or use UseDevelopmentStorage=true"
    )]
    NoCredential,
    #[error(
        "the storage connection string has no blob endpoint: give BlobEndpoint, or AccountName \
         (with optional EndpointSuffix and DefaultEndpointsProtocol)"
    )]
    NoEndpoint,
    #[error(
        "the storage connection string has a part without '=' (parts are Key=Value, separated by ';')"
    )]
    Malformed,
    #[error("the AccountKey in the storage connection string is not valid base64")]
    BadKey,
    #[error(
        "a blob service signed in to with Entra ID must be an https:// URL, e.g. \
         https://myaccount.blob.core.windows.net"
    )]
    NotHttps,
}

impl StorageConnection {
    /// A blob service signed in to with Entra ID as `identity`. Only `https`: bearer tokens
    /// never travel in clear text.
    pub fn entra_id(
        blob_endpoint: &str,
        identity: IdentityChoice,
    ) -> Result<Self, ConnectionStringError> {
        let endpoint = blob_endpoint.trim().trim_end_matches('/');
        if !endpoint.starts_with("https://") || endpoint.len() <= "https://".len() {
            return Err(ConnectionStringError::NotHttps);
        }
        // The account's other services, where the blob endpoint is Azure's own form.
        let sibling = |service: &str| {
            endpoint
                .contains(".blob.")
                .then(|| endpoint.replacen(".blob.", &format!(".{service}."), 1))
        };
        Ok(StorageConnection {
            blob_endpoint: endpoint.to_string(),
            queue_endpoint: sibling("queue"),
            table_endpoint: sibling("table"),
            credential: Credential::EntraId(identity),
        })
    }

    pub fn development() -> Self {
        StorageConnection {
            blob_endpoint: DEV_BLOB_ENDPOINT.to_string(),
            queue_endpoint: Some(DEV_QUEUE_ENDPOINT.to_string()),
            table_endpoint: Some(DEV_TABLE_ENDPOINT.to_string()),
            credential: Credential::SharedKey {
                account: DEV_ACCOUNT.to_string(),
                key: DEV_KEY.to_string(),
            },
        }
    }

    pub fn parse(s: &str) -> Result<Self, ConnectionStringError> {
        use base64::Engine;
        let parts: Vec<(String, String)> = connection_string_parts(s)
            .map(|part| {
                part.map(|(k, v)| (k, v.to_string()))
                    .ok_or(ConnectionStringError::Malformed)
            })
            .collect::<Result<_, _>>()?;
        let get = |key: &str| parts.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());

        if get("usedevelopmentstorage").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            let mut conn = StorageConnection::development();
            if let Some(proxy) = get("developmentstorageproxyuri") {
                let proxy = proxy.trim_end_matches('/');
                conn.blob_endpoint = format!("{proxy}:10000/{DEV_ACCOUNT}");
                conn.queue_endpoint = Some(format!("{proxy}:10001/{DEV_ACCOUNT}"));
                conn.table_endpoint = Some(format!("{proxy}:10002/{DEV_ACCOUNT}"));
            }
            return Ok(conn);
        }

        let account = get("accountname");
        // An explicit `{Service}Endpoint`, else the account's public one.
        let endpoint_of = |service: &str| match get(&format!("{service}endpoint")) {
            Some(e) => Some(e.trim_end_matches('/').to_string()),
            None => {
                let account = account.clone()?;
                let protocol = get("defaultendpointsprotocol").unwrap_or_else(|| "https".into());
                let suffix = get("endpointsuffix").unwrap_or_else(|| "core.windows.net".into());
                Some(format!("{protocol}://{account}.{service}.{suffix}"))
            }
        };
        let endpoint = endpoint_of("blob").ok_or(ConnectionStringError::NoEndpoint)?;
        let (queue_endpoint, table_endpoint) = (endpoint_of("queue"), endpoint_of("table"));
        let credential = if let (Some(account), Some(key)) = (account, get("accountkey")) {
            base64::engine::general_purpose::STANDARD
                .decode(&key)
                .map_err(|_| ConnectionStringError::BadKey)?;
            Credential::SharedKey { account, key }
        } else if let Some(sas) = get("sharedaccesssignature") {
            Credential::Sas(sas.trim_start_matches('?').to_string())
        } else {
            return Err(ConnectionStringError::NoCredential);
        };
        Ok(StorageConnection {
            blob_endpoint: endpoint,
            queue_endpoint,
            table_endpoint,
            credential,
        })
    }
}

/// The `key=value` parts of a connection string (storage or Event Hubs): `;`-separated, keys
/// lowercased, both sides trimmed; `None` for a part without `=`.
pub fn connection_string_parts(s: &str) -> impl Iterator<Item = Option<(String, &str)>> {
    s.split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|part| {
            part.split_once('=')
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim()))
        })
}

impl fmt::Debug for StorageConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.credential {
            Credential::SharedKey { account, .. } => format!("shared key of account {account}"),
            Credential::Sas(_) => "SAS".to_string(),
            Credential::EntraId(identity) => format!("Entra ID as {}", identity.describe()),
        };
        write!(f, "Azure Blob Storage at {} ({auth})", self.blob_endpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn development_storage_points_at_azurite() {
        let c = StorageConnection::parse("UseDevelopmentStorage=true").unwrap();
        assert_eq!(c.blob_endpoint, "http://127.0.0.1:10000/devstoreaccount1");
        assert!(
            matches!(c.credential, Credential::SharedKey { ref account, .. } if account == DEV_ACCOUNT)
        );
    }

    #[test]
    fn account_key_strings_build_the_public_endpoint() {
        let c = StorageConnection::parse(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
        )
        .unwrap();
        assert_eq!(c.blob_endpoint, "https://acct.blob.core.windows.net");
        assert_eq!(
            c.queue_endpoint.as_deref(),
            Some("https://acct.queue.core.windows.net")
        );
        assert_eq!(
            c.table_endpoint.as_deref(),
            Some("https://acct.table.core.windows.net")
        );
    }

    #[test]
    fn queue_and_table_endpoints_are_named_or_implied() {
        let c = StorageConnection::parse(&format!(
            "AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};BlobEndpoint=http://127.0.0.1:1/a;QueueEndpoint=http://127.0.0.1:2/a/"
        ))
        .unwrap();
        assert_eq!(c.queue_endpoint.as_deref(), Some("http://127.0.0.1:2/a"));
        let dev = StorageConnection::parse("UseDevelopmentStorage=true").unwrap();
        assert_eq!(dev.table_endpoint.as_deref(), Some(DEV_TABLE_ENDPOINT));
        // A SAS for the blob service alone names no queue.
        let sas = StorageConnection::parse(
            "BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=sv=1",
        )
        .unwrap();
        assert_eq!(sas.queue_endpoint, None);
        let entra = StorageConnection::entra_id(
            "https://acct.blob.core.windows.net/",
            IdentityChoice::Default,
        )
        .unwrap();
        assert_eq!(
            entra.table_endpoint.as_deref(),
            Some("https://acct.table.core.windows.net")
        );
    }

    #[test]
    fn explicit_blob_endpoint_wins() {
        let c = StorageConnection::parse(&format!(
            "DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1/;"
        ))
        .unwrap();
        assert_eq!(c.blob_endpoint, DEV_BLOB_ENDPOINT);
    }

    #[test]
    fn sas_strings_are_accepted() {
        let c = StorageConnection::parse(
            "BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=?sv=2022&sig=abc",
        )
        .unwrap();
        assert!(matches!(c.credential, Credential::Sas(ref s) if s == "sv=2022&sig=abc"));
    }

    #[test]
    fn errors_name_the_problem_and_debug_hides_secrets() {
        assert_eq!(
            StorageConnection::parse("AccountName=acct").unwrap_err(),
            ConnectionStringError::NoCredential
        );
        assert_eq!(
            StorageConnection::parse("AccountName=a;AccountKey=***").unwrap_err(),
            ConnectionStringError::BadKey
        );
        let c =
            StorageConnection::parse(&format!("AccountName=acct;AccountKey={DEV_KEY}")).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains(DEV_KEY), "{shown}");
        assert!(shown.contains("acct"));
    }
}

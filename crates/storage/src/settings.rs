//! Which storage an app uses: a command-line flag first, then the app settings in the
//! environment — which is how the Functions host hands app settings (local.settings.json
//! `Values`, or the function app's configuration in Azure) to a custom handler.

use std::path::PathBuf;

use hubhost_identity::IdentityChoice;

use crate::connection::ConnectionStringError;
use crate::{StorageConnection, StorageLocation};

/// The app setting that names the storage connection setting to use (default below).
pub const STORAGE_SETTING_VAR: &str = "HUBHOST_STORAGE_SETTING";
pub const DEFAULT_STORAGE_SETTING: &str = "AzureWebJobsStorage";

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("the storage given by {source_name} is not usable: {error}")]
    Storage {
        source_name: String,
        error: ConnectionStringError,
    },
    #[error(transparent)]
    Identity(#[from] hubhost_identity::IdentityError),
}

/// The storage for the app's data:
/// 1. `--storage` / `HUBHOST_STORAGE` (a connection string, a directory, or `memory:`);
/// 2. the app setting named by `HUBHOST_STORAGE_SETTING` (default `AzureWebJobsStorage`);
/// 3. the local directory `hubhost-data` (the embedded default).
pub fn resolve_storage(
    flag: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<StorageLocation, SettingsError> {
    let parse = |value: &str, source_name: &str| {
        StorageLocation::parse(value).map_err(|error| SettingsError::Storage {
            source_name: source_name.to_string(),
            error,
        })
    };
    if let Some(value) = flag.map(str::to_string).filter(|v| !v.trim().is_empty()) {
        return parse(&value, "--storage / HUBHOST_STORAGE");
    }
    let setting = env(STORAGE_SETTING_VAR).unwrap_or_else(|| DEFAULT_STORAGE_SETTING.to_string());
    if let Some(value) = env(&setting).filter(|v| !v.trim().is_empty()) {
        return parse(&value, &format!("app setting {setting}"));
    }
    // An identity-based connection, as Functions apps write it: no secret in the settings,
    // the app's identity (chosen by the connection's own settings) signs in with Entra ID.
    let identity =
        |suffix: &str| env(&format!("{setting}__{suffix}")).filter(|v| !v.trim().is_empty());
    let endpoint = match (identity("blobServiceUri"), identity("accountName")) {
        (Some(uri), _) => Some((uri, "blobServiceUri")),
        (None, Some(account)) => Some((
            format!("https://{}.blob.core.windows.net", account.trim()),
            "accountName",
        )),
        (None, None) => None,
    };
    if let Some((endpoint, property)) = endpoint {
        let chosen = IdentityChoice::from_settings(&setting, &env)?;
        let mut connection = StorageConnection::entra_id(&endpoint, chosen).map_err(|error| {
            SettingsError::Storage {
                source_name: format!("app setting {setting}__{property}"),
                error,
            }
        })?;
        // The queue and table outputs' services, where the connection names them.
        for (property, endpoint) in [
            ("queueServiceUri", &mut connection.queue_endpoint),
            ("tableServiceUri", &mut connection.table_endpoint),
        ] {
            if let Some(uri) = identity(property) {
                let uri = uri.trim().trim_end_matches('/');
                if !uri.starts_with("https://") {
                    return Err(SettingsError::Storage {
                        source_name: format!("app setting {setting}__{property}"),
                        error: ConnectionStringError::NotHttps,
                    });
                }
                *endpoint = Some(uri.to_string());
            }
        }
        return Ok(StorageLocation::Azure(connection));
    }
    Ok(StorageLocation::Directory(default_data_dir()))
}

/// The embedded default: the directory `hubhost-data` under the working directory.
pub fn default_data_dir() -> PathBuf {
    PathBuf::from("hubhost-data")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An environment of fixed pairs, for tests of code that reads settings.
    pub(crate) fn env_of(
        pairs: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn flag_wins_then_named_setting_then_local_directory() {
        let env = env_of(&[
            ("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
            ("Mine", "/tmp/x"),
        ]);
        assert!(
            matches!(resolve_storage(Some("/data"), &env).unwrap(), StorageLocation::Directory(d) if d.ends_with("data"))
        );
        assert!(matches!(
            resolve_storage(None, &env).unwrap(),
            StorageLocation::Azure(_)
        ));
        let env = env_of(&[("HUBHOST_STORAGE_SETTING", "Mine"), ("Mine", "/tmp/x")]);
        assert!(
            matches!(resolve_storage(None, &env).unwrap(), StorageLocation::Directory(d) if d.ends_with("x"))
        );
        let env = env_of(&[]);
        assert!(
            matches!(resolve_storage(None, &env).unwrap(), StorageLocation::Directory(d) if d.ends_with("hubhost-data"))
        );
    }

    #[test]
    fn identity_based_connections_sign_in_with_entra_id() {
        use crate::connection::Credential;
        fn entra(env: impl Fn(&str) -> Option<String>) -> String {
            match resolve_storage(None, env).unwrap() {
                StorageLocation::Azure(c)
                    if c.credential == Credential::EntraId(IdentityChoice::Default) =>
                {
                    c.blob_endpoint
                }
                other => panic!("not Entra ID as the default identity: {other:?}"),
            }
        }
        assert_eq!(
            entra(env_of(&[("AzureWebJobsStorage__accountName", "acct")])),
            "https://acct.blob.core.windows.net"
        );
        assert_eq!(
            entra(env_of(&[(
                "AzureWebJobsStorage__blobServiceUri",
                "https://acct.blob.core.chinacloudapi.cn/"
            )])),
            "https://acct.blob.core.chinacloudapi.cn"
        );
        // The connection's own identity settings choose the identity, as in the host.
        let env = env_of(&[
            ("AzureWebJobsStorage__accountName", "acct"),
            ("AzureWebJobsStorage__credential", "managedidentity"),
            ("AzureWebJobsStorage__clientId", "client-7"),
        ]);
        match resolve_storage(None, env).unwrap() {
            StorageLocation::Azure(c) => assert!(
                c.credential
                    == Credential::EntraId(IdentityChoice::ManagedIdentity {
                        client_id: Some("client-7".into())
                    }),
                "{c:?}"
            ),
            other => panic!("{other:?}"),
        }
        let env = env_of(&[
            ("AzureWebJobsStorage__accountName", "acct"),
            ("AzureWebJobsStorage__credential", "certificate"),
        ]);
        let message = resolve_storage(None, env).unwrap_err().to_string();
        assert!(
            message.contains("AzureWebJobsStorage__credential"),
            "{message}"
        );
        // Bearer tokens only over TLS.
        let message = resolve_storage(Some("http://127.0.0.1:10000/acct"), env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(message.contains("https://"), "{message}");
    }

    #[test]
    fn a_bad_connection_string_is_a_clear_error_without_the_secret() {
        let env = env_of(&[("AzureWebJobsStorage", "AccountName=a;AccountKey=not*base64")]);
        let message = resolve_storage(None, &env).unwrap_err().to_string();
        assert!(message.contains("AzureWebJobsStorage"), "{message}");
        assert!(!message.contains("not*base64"), "{message}");
    }
}

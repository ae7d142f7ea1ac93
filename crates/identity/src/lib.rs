//! Entra ID sign-in: which identity a connection uses, and an `azure_identity` credential for it.
//!
//! In Azure Functions an identity-based connection is a group of app settings under one prefix
//! (the binding's `connection`, e.g. `EventHubConnection__fullyQualifiedNamespace` or
//! `AzureWebJobsStorage__accountName`). Besides where the service is, the host reads the same
//! identity properties for every service (`Microsoft.Extensions.Azure`'s
//! `ClientFactory.CreateCredential`), and [`IdentityChoice::from_settings`] reads them the same
//! way, in the same order:
//!
//! 1. `{prefix}__credential` = `managedidentity`: the platform's managed identity, the
//!    system-assigned one unless `{prefix}__clientId` names a user-assigned one;
//! 2. `{prefix}__tenantId`, `{prefix}__clientId` and `{prefix}__clientSecret`: a service principal;
//! 3. nothing of these: the default chain ([`DefaultChain`]), which is what the host falls back
//!    to — managed identity when it runs in Azure, the developer's own sign-in on a laptop.
//!
//! A token is asked for per service scope ([`STORAGE_SCOPE`], [`EVENT_HUBS_SCOPE`]); the
//! credentials cache tokens until shortly before they expire. Client secrets and tokens are
//! `azure_core` `Secret`s: no `Debug`, log line or error of this crate shows them.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use azure_core::credentials::{AccessToken, Secret, TokenCredential, TokenRequestOptions};
use azure_identity::{
    ClientSecretCredential, DeveloperToolsCredential, ManagedIdentityCredential,
    ManagedIdentityCredentialOptions, UserAssignedId, WorkloadIdentityCredential,
};

/// The scope of tokens for Azure Blob Storage.
pub const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";
/// The scope of tokens for Azure Event Hubs (what the Event Hubs client asks for itself).
pub const EVENT_HUBS_SCOPE: &str = "https://eventhubs.azure.net/.default";

/// How long the default chain waits for the VM metadata endpoint (IMDS) the first time: off
/// Azure nothing answers there, and the developer's own sign-in comes next. The Azure SDKs
/// probe it the same way.
const IMDS_PROBE: Duration = Duration::from_secs(2);

/// What went wrong choosing or building a credential.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The settings ask for something this cannot do, or are incomplete.
    #[error("app setting {setting}: {problem}")]
    Settings { setting: String, problem: String },
    /// `azure_identity` refused to build the credential (e.g. a malformed tenant id).
    #[error("cannot set up {identity}: {reason}")]
    Credential { identity: String, reason: String },
}

/// The identity a connection signs in with, as its settings say.
#[derive(Clone)]
pub enum IdentityChoice {
    /// The platform's managed identity (App Service and Functions through `IDENTITY_ENDPOINT`,
    /// VMs and AKS nodes through IMDS); `client_id` picks a user-assigned one.
    ManagedIdentity { client_id: Option<String> },
    /// A service principal and its client secret.
    ClientSecret {
        tenant_id: String,
        client_id: String,
        secret: Secret,
    },
    /// No identity settings: the default chain.
    Default,
}

impl fmt::Debug for IdentityChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl PartialEq for IdentityChoice {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (
                IdentityChoice::ManagedIdentity { client_id: a },
                IdentityChoice::ManagedIdentity { client_id: b },
            ) => a == b,
            (
                IdentityChoice::ClientSecret {
                    tenant_id: t1,
                    client_id: c1,
                    secret: s1,
                },
                IdentityChoice::ClientSecret {
                    tenant_id: t2,
                    client_id: c2,
                    secret: s2,
                },
            ) => t1 == t2 && c1 == c2 && s1.secret() == s2.secret(),
            (IdentityChoice::Default, IdentityChoice::Default) => true,
            _ => false,
        }
    }
}

impl IdentityChoice {
    /// The identity the settings under `prefix` ask for. `setting` looks an app setting up by
    /// its full name (`{prefix}__credential`, …); empty values count as absent.
    pub fn from_settings(
        prefix: &str,
        setting: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, IdentityError> {
        let name = |property: &str| format!("{prefix}__{property}");
        let get = |property: &str| {
            setting(&name(property))
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let client_id = get("clientId");
        if let Some(credential) = get("credential") {
            if credential.eq_ignore_ascii_case("managedidentity") {
                return Ok(IdentityChoice::ManagedIdentity { client_id });
            }
            return Err(IdentityError::Settings {
                setting: name("credential"),
                problem: format!(
                    "{credential:?} is not a credential type; the Functions host knows \
                     \"managedidentity\" (leave it out for a service principal or the default)"
                ),
            });
        }
        let tenant_id = get("tenantId");
        if let Some(secret) = get("clientSecret") {
            let (Some(tenant_id), Some(client_id)) = (tenant_id, client_id) else {
                return Err(IdentityError::Settings {
                    setting: name("clientSecret"),
                    problem: format!(
                        "a client secret needs {} and {} as well",
                        name("tenantId"),
                        name("clientId")
                    ),
                });
            };
            return Ok(IdentityChoice::ClientSecret {
                tenant_id,
                client_id,
                secret: Secret::new(secret),
            });
        }
        Ok(IdentityChoice::Default)
    }

    /// What a log line may say about this identity (never a secret).
    pub fn describe(&self) -> String {
        match self {
            IdentityChoice::ManagedIdentity { client_id: None } => {
                "the system-assigned managed identity".into()
            }
            IdentityChoice::ManagedIdentity {
                client_id: Some(id),
            } => {
                format!("the user-assigned managed identity {id}")
            }
            IdentityChoice::ClientSecret {
                tenant_id,
                client_id,
                ..
            } => format!("service principal {client_id} of tenant {tenant_id}"),
            IdentityChoice::Default => "the default identity (environment, workload identity, \
                 managed identity, then developer tools)"
                .into(),
        }
    }

    /// The credential for this identity.
    pub fn credential(&self) -> Result<Arc<dyn TokenCredential>, IdentityError> {
        let failed = |e: azure_core::Error| IdentityError::Credential {
            identity: self.describe(),
            reason: e.to_string(),
        };
        Ok(match self {
            IdentityChoice::ManagedIdentity { client_id } => {
                managed_identity(client_id.clone()).map_err(failed)?
            }
            IdentityChoice::ClientSecret {
                tenant_id,
                client_id,
                secret,
            } => ClientSecretCredential::new(tenant_id, client_id.clone(), secret.clone(), None)
                .map_err(failed)?,
            IdentityChoice::Default => Arc::new(DefaultChain::from_env(|k| std::env::var(k).ok())),
        })
    }
}

fn managed_identity(client_id: Option<String>) -> azure_core::Result<Arc<dyn TokenCredential>> {
    let options = ManagedIdentityCredentialOptions {
        user_assigned_id: client_id.map(UserAssignedId::ClientId),
        ..Default::default()
    };
    Ok(ManagedIdentityCredential::new(Some(options))?)
}

/// One place the default chain may get a token from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainSource {
    /// `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`.
    EnvironmentServicePrincipal,
    /// `AZURE_FEDERATED_TOKEN_FILE` (with `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`): AKS.
    WorkloadIdentity,
    /// `IDENTITY_ENDPOINT` (App Service, Functions), else IMDS; `AZURE_CLIENT_ID` picks a
    /// user-assigned identity.
    ManagedIdentity,
    /// The Azure CLI, then the Azure Developer CLI, signed in on this machine.
    DeveloperTools,
}

/// The sources the default chain tries, in order, for an environment: what is configured of
/// the first two, then managed identity and developer tools always. Pure.
pub fn chain_sources(env: impl Fn(&str) -> Option<String>) -> Vec<ChainSource> {
    let set = |k: &str| env(k).is_some_and(|v| !v.trim().is_empty());
    let mut sources = Vec::new();
    if set("AZURE_TENANT_ID") && set("AZURE_CLIENT_ID") && set("AZURE_CLIENT_SECRET") {
        sources.push(ChainSource::EnvironmentServicePrincipal);
    }
    if set("AZURE_FEDERATED_TOKEN_FILE") && set("AZURE_TENANT_ID") && set("AZURE_CLIENT_ID") {
        sources.push(ChainSource::WorkloadIdentity);
    }
    sources.push(ChainSource::ManagedIdentity);
    sources.push(ChainSource::DeveloperTools);
    sources
}

/// A source's credential, or why it could not be set up.
type BuiltCredential = Result<Arc<dyn TokenCredential>, String>;

/// The default identity when a connection's settings name none, in the order of the Azure
/// SDKs' `DefaultAzureCredential` as far as `azure_identity` offers it (it has no such chain
/// itself): the environment's service principal, workload identity, managed identity, then
/// developer tools. The first source that gives a token is used from then on; a source that
/// fails is passed over with its reason kept for the error if none succeeds.
pub struct DefaultChain {
    sources: Vec<(ChainSource, BuiltCredential)>,
    /// Whether managed identity goes through IMDS (no `IDENTITY_ENDPOINT`): then its first
    /// answer is awaited only [`IMDS_PROBE`].
    imds: bool,
    chosen: AtomicUsize,
}

impl fmt::Debug for DefaultChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sources: Vec<ChainSource> = self.sources.iter().map(|(s, _)| *s).collect();
        f.debug_struct("DefaultChain")
            .field("sources", &sources)
            .finish_non_exhaustive()
    }
}

impl DefaultChain {
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let sources = chain_sources(&env)
            .into_iter()
            .map(|source| {
                let built: azure_core::Result<Arc<dyn TokenCredential>> =
                    match source {
                        ChainSource::EnvironmentServicePrincipal => ClientSecretCredential::new(
                            &get("AZURE_TENANT_ID").unwrap_or_default(),
                            get("AZURE_CLIENT_ID").unwrap_or_default(),
                            Secret::new(get("AZURE_CLIENT_SECRET").unwrap_or_default()),
                            None,
                        )
                        .map(|c| c as Arc<dyn TokenCredential>),
                        ChainSource::WorkloadIdentity => WorkloadIdentityCredential::new(None)
                            .map(|c| c as Arc<dyn TokenCredential>),
                        ChainSource::ManagedIdentity => managed_identity(get("AZURE_CLIENT_ID")),
                        ChainSource::DeveloperTools => DeveloperToolsCredential::new(None)
                            .map(|c| c as Arc<dyn TokenCredential>),
                    };
                (source, built.map_err(|e| e.to_string()))
            })
            .collect();
        DefaultChain {
            sources,
            imds: get("IDENTITY_ENDPOINT").is_none(),
            chosen: AtomicUsize::new(usize::MAX),
        }
    }

    /// The source that gave the first token, once one has.
    pub fn chosen(&self) -> Option<ChainSource> {
        self.sources
            .get(self.chosen.load(Ordering::Relaxed))
            .map(|(s, _)| *s)
    }
}

#[async_trait::async_trait]
impl TokenCredential for DefaultChain {
    async fn get_token(
        &self,
        scopes: &[&str],
        options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        let chosen = self.chosen.load(Ordering::Relaxed);
        if let Some((_, Ok(credential))) = self.sources.get(chosen) {
            return credential.get_token(scopes, options).await;
        }
        let mut reasons = Vec::new();
        for (i, (source, credential)) in self.sources.iter().enumerate() {
            let credential = match credential {
                Ok(c) => c,
                Err(reason) => {
                    reasons.push(format!("{source:?}: {reason}"));
                    continue;
                }
            };
            let attempt = credential.get_token(scopes, options.clone());
            let answer = if *source == ChainSource::ManagedIdentity && self.imds {
                match tokio::time::timeout(IMDS_PROBE, attempt).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        reasons.push(format!(
                            "{source:?}: no managed identity endpoint answered within {IMDS_PROBE:?}"
                        ));
                        continue;
                    }
                }
            } else {
                attempt.await
            };
            match answer {
                Ok(token) => {
                    self.chosen.store(i, Ordering::Relaxed);
                    tracing::info!(?source, "signed in to Entra ID");
                    return Ok(token);
                }
                Err(e) => reasons.push(format!("{source:?}: {e}")),
            }
        }
        Err(azure_core::Error::with_message(
            azure_core::error::ErrorKind::Credential,
            format!(
                "no identity of the default chain gave a token ({}). Name one in the \
                 connection's settings (__credential=managedidentity with __clientId, or \
                 __tenantId, __clientId and __clientSecret), set AZURE_TENANT_ID, \
                 AZURE_CLIENT_ID and AZURE_CLIENT_SECRET, or sign in with `az login`",
                reasons.join("; ")
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_settings_choose_as_the_functions_host_does() {
        let choose = |pairs| IdentityChoice::from_settings("EventHubConnection", settings(pairs));
        assert_eq!(choose(&[]).unwrap(), IdentityChoice::Default);
        assert_eq!(
            choose(&[("EventHubConnection__credential", "ManagedIdentity")]).unwrap(),
            IdentityChoice::ManagedIdentity { client_id: None }
        );
        assert_eq!(
            choose(&[
                ("EventHubConnection__credential", "managedidentity"),
                ("EventHubConnection__clientId", "c-1"),
                // Beside `credential`, a secret is not used (the host checks `credential` first).
                ("EventHubConnection__clientSecret", "s"),
            ])
            .unwrap(),
            IdentityChoice::ManagedIdentity {
                client_id: Some("c-1".into())
            }
        );
        assert_eq!(
            choose(&[
                ("EventHubConnection__tenantId", "t-1"),
                ("EventHubConnection__clientId", "c-1"),
                ("EventHubConnection__clientSecret", "s-1"),
            ])
            .unwrap(),
            IdentityChoice::ClientSecret {
                tenant_id: "t-1".into(),
                client_id: "c-1".into(),
                secret: Secret::new("s-1"),
            }
        );
        // A client id alone (without `credential`) changes nothing, as in the host.
        assert_eq!(
            choose(&[("EventHubConnection__clientId", "c-1")]).unwrap(),
            IdentityChoice::Default
        );
        // Other prefixes are not read.
        assert_eq!(
            choose(&[("AzureWebJobsStorage__credential", "managedidentity")]).unwrap(),
            IdentityChoice::Default
        );
    }

    #[test]
    fn settings_it_cannot_follow_are_named_and_the_secret_never_shown() {
        let err = IdentityChoice::from_settings(
            "AzureWebJobsStorage",
            settings(&[("AzureWebJobsStorage__credential", "certificate")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("AzureWebJobsStorage__credential"), "{err}");
        let err = IdentityChoice::from_settings(
            "AzureWebJobsStorage",
            settings(&[("AzureWebJobsStorage__clientSecret", "hush-123")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("AzureWebJobsStorage__tenantId"), "{err}");
        assert!(!err.contains("hush-123"), "{err}");
        let chosen = IdentityChoice::from_settings(
            "C",
            settings(&[
                ("C__tenantId", "t"),
                ("C__clientId", "c"),
                ("C__clientSecret", "hush-123"),
            ]),
        )
        .unwrap();
        assert!(!format!("{chosen:?}").contains("hush-123"));
        assert!(!chosen.describe().contains("hush-123"));
    }

    #[test]
    fn the_default_chain_tries_what_the_environment_configures() {
        use ChainSource::*;
        assert_eq!(
            chain_sources(settings(&[])),
            vec![ManagedIdentity, DeveloperTools]
        );
        assert_eq!(
            chain_sources(settings(&[
                ("AZURE_TENANT_ID", "t"),
                ("AZURE_CLIENT_ID", "c"),
                ("AZURE_CLIENT_SECRET", "s"),
            ])),
            vec![EnvironmentServicePrincipal, ManagedIdentity, DeveloperTools]
        );
        assert_eq!(
            chain_sources(settings(&[
                ("AZURE_TENANT_ID", "t"),
                ("AZURE_CLIENT_ID", "c"),
                ("AZURE_FEDERATED_TOKEN_FILE", "/var/run/token"),
            ])),
            vec![WorkloadIdentity, ManagedIdentity, DeveloperTools]
        );
        // Incomplete: a client id alone only picks the managed identity.
        assert_eq!(
            chain_sources(settings(&[("AZURE_CLIENT_ID", "c")])),
            vec![ManagedIdentity, DeveloperTools]
        );
    }
}

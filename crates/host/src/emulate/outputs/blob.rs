//! The `blob` output: each value written as one blob on the storage account its `connection`
//! names, at its `path` with the expressions that need no trigger data resolved.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{OutputError, OutputValue, text_of};
use crate::emulate::settings::AppSettings;
use hubhost_functions::function_app::BindingSpec;
use hubhost_storage::settings::{STORAGE_SETTING_VAR, SettingsError, resolve_storage};
use hubhost_storage::{Condition, Metadata, SharedStore, StoreError};

/// How long one output's blob write may take before the invocation counts as failed.
const OUTPUT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a `blob` output's `path` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BlobPathError {
    #[error("path \"{path}\" is not container/name")]
    NotContainerAndName { path: String },
    #[error("path \"{path}\": the container cannot hold binding expressions")]
    ExpressionInContainer { path: String },
    #[error("path \"{path}\" has an unclosed '{{'")]
    UnclosedExpression { path: String },
    #[error(
        "path \"{path}\" uses {{{expression}}}, which hubhost emulate does not resolve (it resolves {{rand-guid}}, {{sys.randguid}}, {{DateTime}}, {{sys.utcnow}} and %Setting%)"
    )]
    UnresolvedExpression { path: String, expression: String },
    /// The container, or a name the path renders, is not a valid blob storage name.
    #[error("path \"{path}\": {source}")]
    InvalidName { path: String, source: StoreError },
}

/// Why a `blob` output's storage cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum BlobStoreError {
    /// The `connection` setting names no usable storage.
    #[error(transparent)]
    Setting(#[from] SettingsError),
    /// The storage it names cannot be opened.
    #[error(transparent)]
    Open(#[from] StoreError),
}

/// The storage a `blob` binding's `connection` names (default `AzureWebJobsStorage`, as in the
/// host), read the same way as the app's own storage setting.
pub(super) fn blob_store(
    binding: &BindingSpec,
    settings: &AppSettings,
) -> Result<SharedStore, BlobStoreError> {
    let setting = binding
        .setting("connection")
        .unwrap_or(hubhost_storage::settings::DEFAULT_STORAGE_SETTING)
        .to_string();
    let location = resolve_storage(None, |key| {
        if key == STORAGE_SETTING_VAR {
            Some(setting.clone())
        } else {
            settings.get(key)
        }
    })?;
    Ok(location.open()?)
}

/// Writes one `blob` output's value at `path` (its container created if missing), within
/// [`OUTPUT_TIMEOUT`].
pub(super) async fn write(
    store: &SharedStore,
    path: &BlobPath,
    value: OutputValue,
    output: &str,
) -> Result<(), OutputError> {
    let (container, name) = path.render(Utc::now(), uuid::Uuid::new_v4());
    let content = bytes::Bytes::from(blob_content(value));
    let write = async {
        store.ensure_container(&container).await?;
        store
            .put(
                &container,
                &name,
                content,
                &Metadata::new(),
                &Condition::Always,
            )
            .await
    };
    tokio::time::timeout(OUTPUT_TIMEOUT, write)
        .await
        .map_err(|_| OutputError::StorageTimeout {
            output: output.to_string(),
        })?
        .map_err(|source| OutputError::Write {
            output: output.to_string(),
            blob: format!("{container}/{name}"),
            source,
        })?;
    Ok(())
}

/// A `blob` output value's content.
pub fn blob_content(value: OutputValue) -> Vec<u8> {
    match value {
        OutputValue::Bytes(bytes) => bytes,
        OutputValue::Json(v) => text_of(v),
    }
}

/// A blob output's `path`: `container/name`, where the name may hold the binding expressions
/// that need no trigger data: `{rand-guid}` and `{sys.randguid}` (a new GUID each time),
/// `{DateTime}` (`yyyy-MM-ddTHH-mm-ssZ`) and `{sys.utcnow}` (RFC 3339). Others are refused.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobPath {
    container: String,
    parts: Vec<PathPart>,
}

#[derive(Debug, Clone, PartialEq)]
enum PathPart {
    Text(String),
    Guid,
    DateTime,
    UtcNow,
}

impl BlobPath {
    pub fn parse(path: &str) -> Result<Self, BlobPathError> {
        let path_text = || path.to_string();
        let (container, name) = path
            .split_once('/')
            .filter(|(c, n)| !c.is_empty() && !n.is_empty())
            .ok_or_else(|| BlobPathError::NotContainerAndName { path: path_text() })?;
        if container.contains('{') {
            return Err(BlobPathError::ExpressionInContainer { path: path_text() });
        }
        let invalid = |source| BlobPathError::InvalidName {
            path: path_text(),
            source,
        };
        hubhost_storage::validate_container_name(container).map_err(invalid)?;
        let mut parts = Vec::new();
        let mut rest = name;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(PathPart::Text(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| BlobPathError::UnclosedExpression { path: path_text() })?;
            let expression = &rest[open + 1..open + close];
            parts.push(match expression.to_ascii_lowercase().as_str() {
                "rand-guid" | "sys.randguid" => PathPart::Guid,
                "datetime" => PathPart::DateTime,
                "sys.utcnow" => PathPart::UtcNow,
                _ => {
                    return Err(BlobPathError::UnresolvedExpression {
                        path: path_text(),
                        expression: expression.to_string(),
                    });
                }
            });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(PathPart::Text(rest.to_string()));
        }
        let parsed = BlobPath {
            container: container.to_string(),
            parts,
        };
        let (_, sample) = parsed.render(Utc::now(), uuid::Uuid::nil());
        hubhost_storage::validate_blob_name(&sample).map_err(invalid)?;
        Ok(parsed)
    }

    /// The container and blob name for one write.
    pub fn render(&self, now: DateTime<Utc>, guid: uuid::Uuid) -> (String, String) {
        let mut name = String::new();
        for part in &self.parts {
            match part {
                PathPart::Text(t) => name.push_str(t),
                PathPart::Guid => name.push_str(&guid.hyphenated().to_string()),
                PathPart::DateTime => name.push_str(&now.format("%Y-%m-%dT%H-%M-%SZ").to_string()),
                PathPart::UtcNow => {
                    name.push_str(&now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                }
            }
        }
        (self.container.clone(), name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_paths_resolve_expressions_or_name_the_one_they_cannot() {
        let path = BlobPath::parse("reports/{DateTime}/{rand-guid}.json").unwrap();
        let now = DateTime::parse_from_rfc3339("2026-11-23T21:05:09Z")
            .unwrap()
            .with_timezone(&Utc);
        let guid = uuid::Uuid::from_u128(1);
        assert_eq!(
            path.render(now, guid),
            (
                "reports".to_string(),
                "2026-11-23T21-05-09Z/00000000-0000-0000-0000-000000000001.json".to_string()
            )
        );
        let e = BlobPath::parse("reports/{PartitionContext.PartitionId}.json").unwrap_err();
        assert!(
            matches!(&e, BlobPathError::UnresolvedExpression { expression, .. } if expression == "PartitionContext.PartitionId"),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("{PartitionContext.PartitionId}"),
            "{e}"
        );
        assert!(matches!(
            BlobPath::parse("noslash"),
            Err(BlobPathError::NotContainerAndName { .. })
        ));
        assert!(matches!(
            BlobPath::parse("{x}/name"),
            Err(BlobPathError::ExpressionInContainer { .. })
        ));
        assert!(matches!(
            BlobPath::parse("reports/{unclosed"),
            Err(BlobPathError::UnclosedExpression { .. })
        ));
        assert!(matches!(
            BlobPath::parse("reports/../up"),
            Err(BlobPathError::InvalidName { .. })
        ));
    }
}

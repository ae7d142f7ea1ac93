//! The `blob` output: each value written as one blob on the storage account its `connection`
//! names, at its `path` with the expressions that need no trigger data resolved.

use chrono::{DateTime, Utc};

use super::{OutputError, OutputValue, text_of};
use crate::emulate::settings::AppSettings;
use crate::emulate::template::{Template, TemplateError};
use hubhost_functions::function_app::BindingSpec;
use hubhost_storage::settings::SettingsError;
use hubhost_storage::{Condition, Metadata, SharedStore, StoreError};

/// Why a `blob` output's `path` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BlobPathError {
    #[error("path \"{path}\" is not container/name")]
    NotContainerAndName { path: String },
    #[error("path \"{path}\": the container cannot hold binding expressions")]
    ExpressionInContainer { path: String },
    /// An unclosed `{`, or an expression not resolved here.
    #[error("path \"{path}\" uses {source}")]
    Expression { path: String, source: TemplateError },
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
pub(crate) fn blob_store(
    binding: &BindingSpec,
    settings: &AppSettings,
) -> Result<SharedStore, BlobStoreError> {
    Ok(super::storage_location(binding, settings)?.open()?)
}

/// Writes one `blob` output's value at `path` (its container created if missing), within
/// the storage time limit.
pub(super) async fn write(
    store: &SharedStore,
    path: &BlobPath,
    value: OutputValue,
    output: &str,
) -> Result<(), OutputError> {
    let (container, name) = path.render(hubhost_clock::now(), hubhost_clock::uuid());
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
            .map(|_| ())
    };
    super::within_storage_timeout(output, write, |source| OutputError::Write {
        output: output.to_string(),
        blob: format!("{container}/{name}"),
        source,
    })
    .await
}

/// A `blob` output value's content.
pub fn blob_content(value: OutputValue) -> Vec<u8> {
    match value {
        OutputValue::Bytes(bytes) => bytes,
        OutputValue::Json(v) => text_of(v),
    }
}

/// A blob output's `path`: `container/name`, where the name may hold the binding expressions
/// that need no trigger data ([`Template`]). Others are refused.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobPath {
    container: String,
    name: Template,
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
        let name = Template::parse(name).map_err(|source| BlobPathError::Expression {
            path: path_text(),
            source,
        })?;
        hubhost_storage::validate_blob_name(&name.render(Utc::now(), uuid::Uuid::nil()))
            .map_err(invalid)?;
        Ok(BlobPath {
            container: container.to_string(),
            name,
        })
    }

    /// The container and blob name for one write.
    pub fn render(&self, now: DateTime<Utc>, guid: uuid::Uuid) -> (String, String) {
        (self.container.clone(), self.name.render(now, guid))
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
            matches!(&e, BlobPathError::Expression { source: TemplateError::Unresolved { expression }, .. } if expression == "PartitionContext.PartitionId"),
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
            Err(BlobPathError::Expression {
                source: TemplateError::Unclosed,
                ..
            })
        ));
        assert!(matches!(
            BlobPath::parse("reports/../up"),
            Err(BlobPathError::InvalidName { .. })
        ));
    }
}

//! The `blob` input: one blob read before each call, from the account the binding's
//! `connection` names, at its `path` rendered from the trigger's binding data.

use std::future::Future;

use base64::Engine;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::InputError;
use crate::emulate::outputs::{BindingProblem, BlobPathError, BlobStoreError};
use crate::emulate::settings::AppSettings;
use crate::emulate::template::Template;
use hubhost_functions::contract::encode::BindingData;
use hubhost_functions::function_app::BindingSpec;
use hubhost_storage::SharedStore;

/// How long reading one input may take before the invocation counts as failed (the same
/// limit as an output's write).
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The text `JsonConvert.SerializeObject(null)` writes: the value of an input that has none.
const NO_VALUE: &str = "null";

pub(super) struct BlobInput {
    name: String,
    /// `dataType: binary`: the bytes as base64; otherwise (`string`, the default) the text.
    binary: bool,
    /// With `%Setting%` expanded.
    path_text: String,
    path: Template,
    store: SharedStore,
}

impl BlobInput {
    /// The input `binding`, whose `path` is `path_text` with `%Setting%` expanded.
    pub(super) fn resolve(
        binding: &BindingSpec,
        settings: &AppSettings,
        path_text: String,
    ) -> Result<Self, BindingProblem> {
        let path = Template::parse_with_trigger_data(&path_text).map_err(|source| {
            BindingProblem::Path(BlobPathError::Expression {
                path: path_text.clone(),
                source,
            })
        })?;
        if !path_text.contains('/') {
            return Err(BindingProblem::Path(BlobPathError::NotContainerAndName {
                path: path_text,
            }));
        }
        let binary = match binding.setting("dataType").map(str::to_ascii_lowercase) {
            None => false,
            Some(t) if t == "string" => false,
            Some(t) if t == "binary" => true,
            Some(other) => return Err(BindingProblem::InputDataType { data_type: other }),
        };
        let store = crate::emulate::outputs::blob_store(binding, settings)
            .map_err(|e: BlobStoreError| BindingProblem::Store(e))?;
        Ok(BlobInput {
            name: binding.name.clone(),
            binary,
            path_text,
            path,
            store,
        })
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The blob for one invocation, as the host writes it into `Data`.
    pub(super) async fn read(
        &self,
        data: &BindingData,
        now: DateTime<Utc>,
    ) -> Result<Value, InputError> {
        let rendered = self
            .path
            .render_with(now, hubhost_clock::uuid(), data)
            .map_err(|source| InputError::Expression {
                input: self.name.clone(),
                path: self.path_text.clone(),
                source,
            })?;
        let (container, name) = rendered
            .split_once('/')
            .filter(|(c, n)| {
                hubhost_storage::validate_container_name(c).is_ok()
                    && hubhost_storage::validate_blob_name(n).is_ok()
            })
            .ok_or_else(|| InputError::NotABlob {
                input: self.name.clone(),
                path: self.path_text.clone(),
                rendered: rendered.clone(),
            })?;
        let blob = within_read_timeout(&self.name, self.store.get(container, name))
            .await?
            .map_err(|source| InputError::Read {
                input: self.name.clone(),
                blob: rendered.clone(),
                source,
            })?;
        Ok(match blob {
            None => Value::String(NO_VALUE.into()),
            Some(blob) if self.binary => {
                Value::String(base64::engine::general_purpose::STANDARD.encode(&blob.data))
            }
            Some(blob) => Value::String(Value::String(blob_text(&blob.data)).to_string()),
        })
    }
}

/// A blob's content as .NET's `StreamReader` reads it: UTF-8, a byte-order mark dropped,
/// invalid bytes replaced.
fn blob_text(content: &[u8]) -> String {
    let content = content.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(content);
    String::from_utf8_lossy(content).into_owned()
}

async fn within_read_timeout<T>(
    input: &str,
    read: impl Future<Output = T>,
) -> Result<T, InputError> {
    tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .map_err(|_| InputError::StorageTimeout {
            input: input.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_read_as_a_stream_reader_reads_it() {
        assert_eq!(blob_text(b"\xEF\xBB\xBF{\"a\":1}"), "{\"a\":1}");
        assert_eq!(blob_text(b"a\xFFb"), "a\u{FFFD}b");
    }
}

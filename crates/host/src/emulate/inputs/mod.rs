//! Input bindings, read as the host reads them before it calls the function: each value goes
//! into the request's `Data` under the binding's name, beside the trigger's. Each type has a
//! room of its own:
//! - `blob`: a blob read from the account its `connection` names, at its `path` with binding
//!   expressions resolved from the trigger's binding data (`{PartitionKey}`, a JSON body's
//!   fields).
//!
//! Other input types (a Cosmos DB document, a table entity, …) are refused at start, naming
//! the binding: no local service reads them here.
//!
//! How the host hands a value over (`GetHttpScriptInvocationContextValue`, the binding's
//! `dataType`, default `string`): a string input is the text read, as JSON text in a string;
//! a `binary` one is base64; no value (a blob that does not exist) is the text `null`. Failing
//! to read an input fails the invocation, as in the host, and the retry policy applies.
//!
//! The next input type is one more room and one more arm in [`InputPlan::resolve`].

mod blob;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::settings::AppSettings;
use super::template::TemplateError;
use super::{EmulateError, SettingProblem};
use crate::emulate::outputs::BindingProblem;
use hubhost_functions::contract::encode::BindingData;
use hubhost_functions::function_app::{Direction, FunctionSpec};
use hubhost_storage::StoreError;

/// Why an input could not be read for one invocation (the invocation then fails).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The binding's `path` names a value the trigger's data does not have.
    #[error("input '{input}': path \"{path}\": {source}")]
    Expression {
        input: String,
        path: String,
        source: TemplateError,
    },
    /// The path it renders is not `container/name`, or not valid names.
    #[error(
        "input '{input}': path \"{path}\" gives \"{rendered}\", which is not a blob's container/name"
    )]
    NotABlob {
        input: String,
        path: String,
        rendered: String,
    },
    #[error("input '{input}': reading {blob}: {source}")]
    Read {
        input: String,
        blob: String,
        source: StoreError,
    },
    #[error("input '{input}': no answer from storage")]
    StorageTimeout { input: String },
}

/// What one function's input bindings are read from.
#[derive(Default)]
pub struct InputPlan {
    inputs: Vec<blob::BlobInput>,
}

impl InputPlan {
    /// Every input binding of `spec` (its trigger aside), checked and resolved against the
    /// settings: an input this emulation cannot read is an error naming it.
    pub fn resolve(spec: &FunctionSpec, settings: &AppSettings) -> Result<Self, EmulateError> {
        let mut inputs = Vec::new();
        for binding in &spec.bindings {
            if binding.direction != Direction::In || binding.is("httpTrigger") {
                continue;
            }
            let bad = |problem: BindingProblem| EmulateError::Binding {
                function: spec.name.clone(),
                binding: binding.name.clone(),
                kind: binding.kind.clone(),
                problem: Box::new(problem),
            };
            if !binding.is("blob") {
                return Err(bad(BindingProblem::Input));
            }
            let path = binding
                .setting("path")
                .ok_or_else(|| bad(BindingProblem::NoPath))?;
            let path = settings
                .expand(path)
                .map_err(|e| bad(SettingProblem::Expand(e).into()))?;
            inputs.push(blob::BlobInput::resolve(binding, settings, path).map_err(bad)?);
        }
        Ok(InputPlan { inputs })
    }

    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// The inputs' values for one invocation whose trigger gave `data`, each as the host
    /// writes it into `Data`, in the order function.json declares them.
    pub async fn read(
        &self,
        data: &BindingData,
        now: DateTime<Utc>,
    ) -> Result<Vec<(String, Value)>, InputError> {
        let mut values = Vec::with_capacity(self.inputs.len());
        for input in &self.inputs {
            values.push((input.name().to_string(), input.read(data, now).await?));
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulate::outputs::BlobPathError;
    use crate::emulate::template::TemplateError;
    use serde_json::json;

    fn plan(binding: Value) -> Result<InputPlan, BindingProblem> {
        let settings = AppSettings::from_pairs([("Refs", "refs")]);
        let trigger = json!({"type": "eventHubTrigger", "name": "ev", "eventHubName": "h"});
        let spec =
            FunctionSpec::from_json("f", &json!({ "bindings": [trigger, binding] })).unwrap();
        match InputPlan::resolve(&spec, &settings) {
            Ok(plan) => Ok(plan),
            Err(EmulateError::Binding {
                function, problem, ..
            }) if function == "f" => Err(*problem),
            Err(other) => panic!("not a binding error: {other}"),
        }
    }

    #[test]
    fn inputs_emulation_cannot_read_are_refused_at_start_saying_why() {
        let blob = |extra: Value| {
            let mut b = json!({"type": "blob", "direction": "in", "name": "ref"});
            b.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            plan(b)
        };
        let plan_ok = blob(json!({"path": "%Refs%/{PartitionKey}.json"})).unwrap();
        assert!(!plan_ok.is_empty());
        assert!(blob(json!({"path": "refs/x", "dataType": "binary"})).is_ok());
        assert!(matches!(
            plan(json!({"type": "cosmosDB", "direction": "in", "name": "doc"})),
            Err(BindingProblem::Input)
        ));
        assert!(matches!(blob(json!({})), Err(BindingProblem::NoPath)));
        assert!(matches!(
            blob(json!({"path": "refs/x", "dataType": "stream"})),
            Err(BindingProblem::InputDataType { data_type }) if data_type == "stream"
        ));
        assert!(matches!(
            blob(json!({"path": "refs/{DateTime:yyyy}"})),
            Err(BindingProblem::Path(BlobPathError::Expression {
                source: TemplateError::Format { .. },
                ..
            }))
        ));
        assert!(matches!(
            blob(json!({"path": "noslash"})),
            Err(BindingProblem::Path(
                BlobPathError::NotContainerAndName { .. }
            ))
        ));
        let e = blob(json!({"path": "%Missing%/x"})).err().unwrap();
        assert!(e.to_string().contains("Missing"), "{e}");
    }

    #[tokio::test]
    async fn a_path_is_rendered_from_the_trigger_data_and_a_missing_blob_is_null() {
        let folder = tempfile::tempdir().unwrap();
        let store = hubhost_storage::StorageLocation::Directory(folder.path().to_path_buf())
            .open()
            .unwrap();
        store.ensure_container("refs").await.unwrap();
        store
            .put(
                "refs",
                "home-1.json",
                bytes::Bytes::from_static(b"{\"limit\":30}"),
                &hubhost_storage::Metadata::new(),
                &hubhost_storage::Condition::Always,
            )
            .await
            .unwrap();
        let settings =
            AppSettings::from_pairs([("AzureWebJobsStorage", folder.path().to_str().unwrap())]);
        let trigger = json!({"type": "eventHubTrigger", "name": "ev", "eventHubName": "h"});
        let spec = FunctionSpec::from_json(
            "f",
            &json!({"bindings": [trigger,
                {"type": "blob", "direction": "in", "name": "ref", "path": "refs/{PartitionKey}.json"},
                {"type": "blob", "direction": "in", "name": "raw", "path": "refs/{PartitionKey}.json", "dataType": "binary"}]}),
        )
        .unwrap();
        let plan = InputPlan::resolve(&spec, &settings).unwrap();
        let mut data = BindingData::default();
        data.set("PartitionKey", json!("home-1"));
        let values = plan.read(&data, Utc::now()).await.unwrap();
        assert_eq!(
            values,
            [
                ("ref".to_string(), json!("\"{\\\"limit\\\":30}\"")),
                ("raw".to_string(), json!("eyJsaW1pdCI6MzB9")),
            ]
        );
        data.set("partitionkey", json!("home-9"));
        let values = plan.read(&data, Utc::now()).await.unwrap();
        assert_eq!(values[0].1, json!("null"));
        let e = plan
            .read(&BindingData::default(), Utc::now())
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 'ref': path \"refs/{PartitionKey}.json\": No value for named parameter 'PartitionKey'."
        );
        data.set("PartitionKey", json!("../up"));
        assert!(matches!(
            plan.read(&data, Utc::now()).await,
            Err(InputError::NotABlob { .. })
        ));
    }
}

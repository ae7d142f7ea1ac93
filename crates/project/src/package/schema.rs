//! host.json and function.json against the official schemas that editors and the Functions
//! tooling use (SchemaStore's, kept unchanged in `crates/project/schemas/`, compiled in).
//!
//! Validated as draft 7, as the editors that consume these schemas do: SchemaStore's
//! function.json schema says draft-04 but uses `const` (draft-06) in its `sqlBinding` branch;
//! a strict draft-04 validator ignores `const`, so that branch then matches every binding and
//! the `oneOf` rejects any eventHubTrigger. Neither schema uses a draft-04 construct that
//! draft 7 reads differently (no boolean exclusiveMinimum/Maximum, no `id`-based references).

use std::sync::OnceLock;

use serde_json::Value;

use super::PackageError;

const HOST_SCHEMA: &str = include_str!("../../schemas/host.schema.json");
const FUNCTION_SCHEMA: &str = include_str!("../../schemas/function.schema.json");

fn validator(
    cell: &'static OnceLock<jsonschema::Validator>,
    schema: &str,
) -> &'static jsonschema::Validator {
    cell.get_or_init(|| {
        let schema: Value = serde_json::from_str(schema).expect("a bundled schema is JSON");
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft7)
            .build(&schema)
            .expect("a bundled schema compiles")
    })
}

fn problems(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect()
}

/// What the host.json schema finds wrong with `host` (nothing: empty).
pub fn host_json_problems(host: &Value) -> Vec<String> {
    static HOST: OnceLock<jsonschema::Validator> = OnceLock::new();
    problems(validator(&HOST, HOST_SCHEMA), host)
}

/// What the function.json schema finds wrong with `function` (nothing: empty).
pub fn function_json_problems(function: &Value) -> Vec<String> {
    static FUNCTION: OnceLock<jsonschema::Validator> = OnceLock::new();
    problems(validator(&FUNCTION, FUNCTION_SCHEMA), function)
}

/// A function.json's text checked against the schema; `path` names it in the error.
pub fn check_function_json(text: &str, path: &str) -> Result<(), PackageError> {
    let function: Value = serde_json::from_str(text).map_err(|e| PackageError::Invalid {
        path: path.to_string(),
        problem: e.to_string(),
    })?;
    let found = function_json_problems(&function);
    if found.is_empty() {
        Ok(())
    } else {
        Err(PackageError::Invalid {
            path: path.to_string(),
            problem: found.join("; "),
        })
    }
}

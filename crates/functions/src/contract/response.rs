//! The handler's answer: always a JSON object `{"Outputs":…,"Logs":[…],"ReturnValue":…}`.
//!
//! The host deserializes it on 2xx (an empty body would leave the invocation hanging until the
//! function timeout) and treats any non-2xx as a failed invocation. Errors add an `error`
//! member `{code, message}` that the host ignores and people and tests read.

use serde::Serialize;
use serde_json::{Map, Value};

/// The answer's JSON object.
#[derive(Debug, Serialize, Default)]
pub struct InvocationResponse {
    /// Values for the output bindings, by binding name.
    #[serde(rename = "Outputs")]
    pub outputs: Map<String, Value>,
    /// Lines the host logs.
    #[serde(rename = "Logs")]
    pub logs: Vec<String>,
    /// The value a `$return` binding takes.
    #[serde(rename = "ReturnValue")]
    pub return_value: Value,
    /// Why the invocation failed, for people and tests (the host ignores it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// A failure's machine-readable code and its message.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct ErrorBody {
    /// e.g. `body_too_large`.
    pub code: String,
    /// What went wrong, in words.
    pub message: String,
}

impl InvocationResponse {
    /// A 2xx answer.
    pub fn ok(outputs: Map<String, Value>, logs: Vec<String>, return_value: Value) -> Self {
        InvocationResponse {
            outputs,
            logs,
            return_value,
            error: None,
        }
    }

    /// A failure answer: no outputs, the message logged, `error` set.
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        InvocationResponse {
            logs: vec![format!("error: {message}")],
            error: Some(ErrorBody {
                code: code.to_string(),
                message,
            }),
            ..Default::default()
        }
    }
}

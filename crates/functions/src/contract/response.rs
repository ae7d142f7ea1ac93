//! The handler's answer: always a JSON object `{"Outputs":…,"Logs":[…],"ReturnValue":…}`.
//!
//! The host deserializes it on 2xx (an empty body would leave the invocation hanging until the
//! function timeout) and treats any non-2xx as a failed invocation. Errors add an `error`
//! member `{code, message}` that the host ignores and people and tests read.

use serde::Serialize;
use serde_json::{Map, Value};

#[derive(Debug, Serialize, Default)]
pub struct InvocationResponse {
    #[serde(rename = "Outputs")]
    pub outputs: Map<String, Value>,
    #[serde(rename = "Logs")]
    pub logs: Vec<String>,
    #[serde(rename = "ReturnValue")]
    pub return_value: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
}

impl InvocationResponse {
    pub fn ok(outputs: Map<String, Value>, logs: Vec<String>, return_value: Value) -> Self {
        InvocationResponse {
            outputs,
            logs,
            return_value,
            error: None,
        }
    }

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

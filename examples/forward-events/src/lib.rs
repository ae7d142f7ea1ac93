//! One function written three ways, to rehearse what Azure does to it (`hubhost rehearse`):
//! each forwards every event of hub `incoming` to hub `forwarded` through its `eventHub`
//! output, one output event per input event, keeping the input's `id`.
//!
//! - `forward-naive`: as most first versions are. Redelivery, a partition move or a frozen
//!   owner sends some events twice.
//! - `forward-once`: the same, with [`hubhost_functions::once::Once`] deciding which events
//!   still owe their output: each is forwarded once.
//! - `forward-by-offset`: builds its output from the event's offset read as a number, as custom
//!   handlers did before geo-replicated namespaces made offsets opaque strings.

use hubhost_functions::prelude::*;

/// The `eventHub` output's name in function.json.
pub const FORWARDED: &str = "forwarded";

/// The output event for one input: its `id` (or its text) and where it came from.
pub fn forwarded(event: &EventRecord, by: &str) -> Result<serde_json::Value, FunctionError> {
    let text = event.text().map_err(|e| FunctionError::BadRequest {
        code: "not_text",
        message: e.to_string(),
    })?;
    let id = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or_else(|| serde_json::Value::from(text));
    Ok(serde_json::json!({"id": id, "sequenceNumber": event.sequence_number, "by": by}))
}

/// Adds `value` to the `forwarded` output.
pub fn forward(
    output: &mut FunctionOutput,
    value: &serde_json::Value,
) -> Result<(), FunctionError> {
    output
        .send_event_json(FORWARDED, value)
        .map(|_| ())
        .map_err(|e| FunctionError::Failed {
            code: "encode",
            message: e.to_string(),
        })
}

/// Serves `function` as `Forward`, the app's one function.
pub async fn serve(function: impl EventHubFunction) -> Result<(), ServeError> {
    FunctionServer::builder()
        .function("Forward", function)
        .run()
        .await
}

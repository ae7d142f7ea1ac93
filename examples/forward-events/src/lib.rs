//! One function written three ways, to rehearse what Azure does to it (`hubhost rehearse`):
//! each forwards every event of hub `incoming` to hub `forwarded` through its `eventHub`
//! output, one output event per input event, keeping the input's `id`.
//!
//! The three are [`Naive`], [`ForwardOnce`] and [`ByOffset`]; each executable serves one.
//!
//! - `forward-naive`: as most first versions are. Redelivery, a partition move or a frozen
//!   owner sends some events twice.
//! - `forward-once`: the same, with [`hubhost_functions::once::Once`] deciding which events
//!   still owe their output: each is forwarded once.
//! - `forward-by-offset`: builds its output from the event's offset read as a number, as custom
//!   handlers did before geo-replicated namespaces made offsets opaque strings.

use hubhost_functions::once::Once;
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

/// Forwards every event, every time it is delivered.
pub struct Naive;

#[async_trait]
impl EventHubFunction for Naive {
    async fn run(
        &self,
        batch: TriggerBatch,
        _context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let mut output = FunctionOutput::default();
        for event in &batch.events {
            forward(&mut output, &forwarded(event, "naive")?)?;
        }
        Ok(output)
    }
}

/// Forwards each event once: [`Once::claim`] says which events still owe their output.
pub struct ForwardOnce {
    pub once: Once,
}

#[async_trait]
impl EventHubFunction for ForwardOnce {
    async fn run(
        &self,
        batch: TriggerBatch,
        context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let mut output = FunctionOutput::default();
        for event in self.once.claim(&batch, context).await? {
            forward(&mut output, &forwarded(event, "once")?)?;
        }
        Ok(output)
    }
}

/// Forwards every event with its offset as a number — which a geo-replicated namespace's
/// offsets are not.
pub struct ByOffset;

#[async_trait]
impl EventHubFunction for ByOffset {
    async fn run(
        &self,
        batch: TriggerBatch,
        _context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let mut output = FunctionOutput::default();
        for event in &batch.events {
            let offset: u64 = event
                .offset
                .as_deref()
                .unwrap_or_default()
                .parse()
                .map_err(|e| FunctionError::Failed {
                    code: "offset",
                    message: format!("offset {:?} is not a number: {e}", event.offset),
                })?;
            let mut value = forwarded(event, "offset")?;
            value["offset"] = offset.into();
            forward(&mut output, &value)?;
        }
        Ok(output)
    }
}

/// The app's server with `function` as `Forward`, matched with the declarations in
/// `app_folder` (what a simulated rehearsal calls in-process).
pub fn server(
    function: impl EventHubFunction,
    app_folder: &std::path::Path,
) -> Result<FunctionServer, hubhost_functions::function_app::FunctionAppError> {
    FunctionServer::builder()
        .function("Forward", function)
        .build(Some(app_folder))
}

/// Serves `function` as `Forward`, the app's one function.
pub async fn serve(function: impl EventHubFunction) -> Result<(), ServeError> {
    FunctionServer::builder()
        .function("Forward", function)
        .run()
        .await
}

//! Forwards every event with its offset as a number — which a geo-replicated namespace's
//! offsets are not.
use forward_events::{forward, forwarded, serve};
use hubhost_functions::prelude::*;

struct ByOffset;

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

#[tokio::main]
async fn main() -> Result<(), ServeError> {
    serve(ByOffset).await
}

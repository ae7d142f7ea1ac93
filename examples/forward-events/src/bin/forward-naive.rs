//! Forwards every event, every time it is delivered.
use forward_events::{forward, forwarded, serve};
use hubhost_functions::prelude::*;

struct Naive;

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

#[tokio::main]
async fn main() -> Result<(), ServeError> {
    serve(Naive).await
}

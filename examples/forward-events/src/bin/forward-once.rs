//! Forwards each event once: `Once::claim` says which events still owe their output.
use forward_events::{forward, forwarded, serve};
use hubhost_functions::once::Once;
use hubhost_functions::prelude::*;

struct ForwardOnce {
    once: Once,
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

#[tokio::main]
async fn main() -> Result<(), ServeError> {
    let once = Once::from_environment().expect("the app's storage setting");
    serve(ForwardOnce { once }).await
}

//! Forwards every event with its offset as a number — which a geo-replicated namespace's
//! offsets are not.
use forward_events::{ByOffset, serve};
use hubhost_functions::prelude::*;

#[tokio::main]
async fn main() -> Result<(), ServeError> {
    serve(ByOffset).await
}

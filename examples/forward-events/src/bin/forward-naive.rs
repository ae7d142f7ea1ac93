//! Forwards every event, every time it is delivered.
use forward_events::{Naive, serve};
use hubhost_functions::prelude::*;

#[tokio::main]
async fn main() -> Result<(), ServeError> {
    serve(Naive).await
}

//! Forwards each event once: `Once::claim` says which events still owe their output.
use forward_events::{ForwardOnce, serve};
use hubhost_functions::once::Once;
use hubhost_functions::prelude::*;

#[tokio::main]
async fn main() -> Result<(), ServeError> {
    let once = Once::from_environment().expect("the app's storage setting");
    serve(ForwardOnce { once }).await
}

//! hubhost: Azure Event Hubs consumers as an Azure Functions custom handler, with a local
//! emulation mode. This crate is the command line; the work is done by the workspace's crates,
//! re-exported here under the names the rest of the code and the tests use. See
//! ARCHITECTURE.md for the map of the code.

pub use hubhost_app as app;
pub use hubhost_app::{dashboard, fleet, handler};
pub use hubhost_functions::{batch, contract, function_app, metrics};
pub use hubhost_host::{child, emulate, invoker, progress, scale};
pub use hubhost_hub as hub;
pub use hubhost_processor as processor;
pub use hubhost_processor::{checkpoint, eventhubs};
pub use hubhost_storage as storage;

pub mod bench;
pub mod demo;
pub mod package;
pub mod scaffold;
pub mod simulate;

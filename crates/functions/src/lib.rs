//! Azure Functions custom handlers in Rust: everything the Functions host's contract demands,
//! so that a function is only its own logic.
//!
//! - [`contract`]: the host ⇄ handler wire format — [`contract::decode`] turns every request
//!   shape the host sends for an `eventHubTrigger` into a typed [`batch::TriggerBatch`];
//!   [`contract::encode`] builds the request the host would send (for emulation and tests);
//!   [`contract::response`] is the `{"Outputs","Logs","ReturnValue"}` answer.
//! - [`function_app`]: host.json and `*/function.json` discovery, trigger and retry settings.
//! - [`function`]: what a function is ([`function::EventHubFunction`]), how it fails and what it
//!   counts; [`server`]: the HTTP server the host calls, hosting the functions you register;
//!   [`output`]: what a function answers, output bindings included; [`http`]: HTTP-triggered
//!   functions.
//! - [`metrics`]: Prometheus text exposition (and a strict reader of it, for tests).
//!
//! What the host sends and expects is described in the repository's `docs/host-contract.md`.

#![deny(missing_docs)]

pub mod batch;
pub mod contract;
pub mod function;
pub mod function_app;
pub mod http;
pub mod metrics;
pub mod output;
pub mod server;

/// What a function needs, in one import: `use hubhost_functions::prelude::*;`.
pub mod prelude {
    pub use crate::batch::{EventRecord, PartitionContext, TriggerBatch};
    pub use crate::function::{
        CounterFamily, Counters, EventHubFunction, FunctionError, HistogramFamily,
    };
    pub use crate::http::{HttpFunction, HttpRequest, HttpResponse};
    pub use crate::output::FunctionOutput;
    pub use crate::server::{FunctionServer, ServeError};
    pub use async_trait::async_trait;
}

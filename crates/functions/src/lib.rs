//! Azure Functions custom handlers in Rust: everything the Functions host's contract demands,
//! so that a function is only its own logic.
//!
//! - [`contract`]: the host ⇄ handler wire format — [`contract::decode`] turns every request
//!   shape the host sends for an `eventHubTrigger` into a typed [`batch::TriggerBatch`];
//!   [`contract::encode`] builds the request the host would send (for emulation and tests);
//!   [`contract::response`] is the `{"Outputs","Logs","ReturnValue"}` answer.
//! - [`function_app`]: host.json and `*/function.json` discovery, trigger and retry settings;
//!   [`app_config`]: the app's files and settings read as the host reads them (comments,
//!   `AzureFunctionsJobHost__` overrides, keys in any case, disabled functions).
//! - [`function`]: what a function is ([`function::EventHubFunction`]) and how it fails;
//!   [`context`]: what it is told about an invocation and where it logs; [`counters`]: what it
//!   counts; [`server`]: the HTTP server the host calls, hosting the functions you register;
//!   [`output`]: what a function answers, output bindings included; [`http`] and [`timer`]:
//!   HTTP- and timer-triggered functions; [`inputs`]: the input bindings' values.
//! - `once` (feature `once`): outputs once under redelivery, partition moves and frozen owners —
//!   a per-partition mark in the app's storage, claimed before the function answers.
//! - [`testing`]: a function called in-process, directly or exactly as the host calls it.
//! - [`batch`]: the typed batch a function receives — owned by `hubhost-trigger` (shared with
//!   the event processor) and re-exported here so a function needs only this crate.
//!
//! `/metrics` pages are written with `hubhost-metrics`.
//!
//! What the host sends and expects is described in the repository's `docs/host-contract.md`.

#![deny(missing_docs)]

pub use hubhost_trigger::batch;
pub use hubhost_trigger::inputs;
pub mod app_config;
pub mod context;
pub mod contract;
pub mod counters;
pub mod function;
pub mod function_app;
pub mod http;
#[cfg(feature = "once")]
pub mod once;
pub mod output;
pub mod server;
pub mod testing;
pub mod timer;

/// What a function, its `main` and its tests need, in one import:
/// `use hubhost_functions::prelude::*;`.
pub mod prelude {
    pub use crate::batch::{EventRecord, PartitionContext, RetryContext, TriggerBatch};
    pub use crate::context::FunctionContext;
    pub use crate::counters::{CounterFamily, Counters, HistogramFamily};
    pub use crate::function::{EventHubFunction, FunctionError};
    pub use crate::http::{HttpFunction, HttpRequest, HttpResponse};
    pub use crate::output::FunctionOutput;
    pub use crate::server::{FunctionServer, ServeError, ServerBuilder};
    pub use crate::testing::{HostAnswer, HostHarness};
    pub use crate::timer::{TimerFunction, TimerInfo};
    pub use async_trait::async_trait;
}

//! The Functions host's Event Hubs trigger, run locally (`hubhost emulate`).
//!
//! - [`emulate`]: reads a custom-handler function app (host.json, function.json files,
//!   local.settings.json), starts its handler the way the host does and feeds every
//!   `eventHubTrigger` function the batches of a [`hubhost_processor`] event processor, with
//!   the function's retry policy; several processes form a pool.
//! - [`scale`]: `hubhost emulate --scale`, the Functions scale controller: starts and stops
//!   `emulate` instances on the backlog as target-based scaling does (rules in `scale::decide`).
//! - [`invoker`]: calls a handler as the host does (readiness probe, headers, request).
//!
//! The handler and the instances are child processes that die with it
//! ([`hubhost_process::child`]).

pub mod emulate;
pub mod invoker;
pub mod scale;

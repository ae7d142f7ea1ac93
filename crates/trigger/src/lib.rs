//! What an Event Hubs trigger hands a function, independent of how it got there.
//!
//! - [`batch`]: one invocation — the partition it came from and its events, in order;
//! - [`inputs`]: the values of the function's input bindings (a blob read before the call),
//!   as the host sends them beside the events;
//! - [`builder`]: a batch built by hand, event by event, shaped like one the host sends (for
//!   tests, and for invoking a function with events of your own);
//! - [`time`]: the text forms of times and durations the Functions host writes (.NET dates in
//!   trigger metadata, `TimeSpan` in host.json and function.json).
//!
//! Both the HTTP framework (`hubhost-functions`, which decodes the host's requests into a
//! batch) and the event processor (`hubhost-processor`, which reads batches from the hub
//! itself) build on these types; neither depends on the other.

#![deny(missing_docs)]

pub mod batch;
pub mod builder;
pub mod inputs;
pub mod time;

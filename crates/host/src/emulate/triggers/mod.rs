//! The triggers the emulated host runs, a room each: `event_hub` (the Event Hubs trigger:
//! ownership, batches, checkpoints, one processor per function) and `http` (the app's HTTP
//! functions, served on one local port as `func start` serves them).

mod event_hub;
pub mod http;

pub use event_hub::{Delivery, InstanceTriggers, TriggerCounts};

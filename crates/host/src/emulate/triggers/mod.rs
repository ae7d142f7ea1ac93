//! The triggers the emulated host runs, a room each: `event_hub` (the Event Hubs trigger:
//! ownership, batches, checkpoints, one processor per function), `http` (the app's HTTP
//! functions, served on one local port as `func start` serves them) and `timer` (the app's
//! timer functions, fired on their NCRONTAB schedules by one instance of the app).

mod event_hub;
pub mod http;
pub mod timer;

pub use event_hub::{Delivery, InstanceTriggers, TriggerCounts};

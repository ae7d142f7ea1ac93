//! The triggers the emulated host runs, a room each: `event_hub` (the Event Hubs trigger:
//! ownership, batches, checkpoints, one processor per function), `http` (the app's HTTP
//! functions, served on one local port as `func start` serves them) and `timer` (the app's
//! timer functions, fired on their NCRONTAB schedules by one instance of the app).

mod event_hub;
pub mod http;
pub mod timer;

pub use event_hub::{Delivery, InstanceTriggers, TriggerCounts};

/// A flag in host.json or a binding as the configuration binder reads it: `true`, or the text
/// `"true"` in any case.
fn flag_is_on(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Bool(b) => *b,
        serde_json::Value::String(s) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

//! A timer's firing as the Functions host hands it to a custom handler: `Data.<trigger>` the
//! Timers extension's `TimerInfo` and the input bindings' values, `Metadata` only `sys` (a
//! timer has no other binding data). `hubhost emulate`'s timers, `hubhost invoke` and the test
//! kit's harness all build their requests here.

use chrono::{DateTime, Utc};
use serde_json::{Map, json};

use super::encode::{retry_context_value, sys_binding_data};
use crate::timer::TimerInfo;

/// The invocation request of one firing of `function`, whose trigger binding is `binding`:
/// `timer` and its inputs' values in `Data`; `sys` and, with a retry policy, the timer's
/// `RetryContext` in `Metadata`.
///
/// ```
/// use hubhost_functions::contract::timer_request::encode_timer_request;
/// use hubhost_functions::timer::TimerInfo;
///
/// let mut timer = TimerInfo { is_past_due: true, ..TimerInfo::default() };
/// timer.inputs.set_text("previous", None);
/// let body = encode_timer_request("Tick", "myTimer", &timer, &chrono::Utc::now());
/// assert_eq!(TimerInfo::from_invocation(&body, "myTimer").unwrap(), timer);
/// ```
pub fn encode_timer_request(
    function: &str,
    binding: &str,
    timer: &TimerInfo,
    now: &DateTime<Utc>,
) -> Vec<u8> {
    let mut data = Map::new();
    data.insert(binding.to_string(), timer.to_binding_value());
    data.extend(timer.inputs.wire().iter().cloned());
    let mut metadata = Map::new();
    if let Some(retry) = &timer.retry {
        metadata.insert("RetryContext".into(), retry_context_value(retry));
    }
    metadata.insert("sys".into(), sys_binding_data(function, now));
    let body = json!({"Data": data, "Metadata": metadata});
    serde_json::to_vec(&body).expect("a JSON value always serializes")
}

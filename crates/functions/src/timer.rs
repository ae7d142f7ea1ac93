//! Timer-triggered functions (`timerTrigger`), as the host calls them: each firing arrives as
//! `POST /{FunctionName}` with the Timers extension's `TimerInfo` in `Data.<trigger binding>`
//! (`Schedule`, `ScheduleStatus` with `Last`, `Next` and `LastUpdated`, `IsPastDue`) and any
//! input binding's value beside it; the answer carries the function's outputs and logs, as for
//! any trigger. docs/host-contract.md §8 has the shapes.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use crate::batch::RetryContext;
use crate::contract::decode::retry_context_of;
use crate::function::FunctionError;
use crate::inputs::InputValues;
use crate::output::FunctionOutput;
use hubhost_trigger::time::{dotnet_datetime_offset, parse_host_time};

/// One firing of a timer, as the function sees it.
///
/// ```
/// use hubhost_functions::timer::TimerInfo;
///
/// let body = br#"{"Data":{"myTimer":{"Schedule":{"AdjustForDST":true},
///     "ScheduleStatus":{"Last":"2026-12-02T21:05:00+00:00","Next":"2026-12-02T21:05:05+00:00",
///     "LastUpdated":"2026-12-02T21:05:00.0125+00:00"},"IsPastDue":false}},"Metadata":{}}"#;
/// let timer = TimerInfo::from_invocation(body, "myTimer")?;
/// assert!(!timer.is_past_due);
/// let status = timer.schedule_status.unwrap();
/// assert_eq!((status.next.unwrap() - status.last).num_seconds(), 5);
/// # Ok::<(), hubhost_functions::timer::TimerInfoError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TimerInfo {
    /// The firing comes later than its occurrence: the last one overran, or (on Azure) the
    /// app was not running when it was due.
    pub is_past_due: bool,
    /// The schedule's status the extension keeps; `None` when it sent none.
    pub schedule_status: Option<ScheduleStatus>,
    /// The values of the function's input bindings, read before the call.
    pub inputs: InputValues,
    /// The host's retry bookkeeping (which attempt this is, and why the last one failed), when
    /// the function has a retry policy: `Metadata.RetryContext`, as for any trigger.
    pub retry: Option<RetryContext>,
}

/// Where the schedule stands at a firing (`ScheduleStatus` of the Timers extension).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleStatus {
    /// The occurrence fired before this one (this one's, for the first firing).
    pub last: DateTime<Utc>,
    /// The occurrence after this one; `None` for a schedule with no more.
    pub next: Option<DateTime<Utc>>,
    /// When the extension last wrote the status.
    pub last_updated: DateTime<Utc>,
}

/// Why an invocation's `TimerInfo` cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TimerInfoError {
    /// The invocation body is not JSON.
    #[error("the request body is not valid JSON: {0}")]
    MalformedJson(String),
    /// `Data` lacks the trigger's binding.
    #[error("\"Data\" has no TimerInfo named '{0}' (the timerTrigger binding's name)")]
    MissingTimer(String),
}

impl TimerInfo {
    /// Reads the firing from an invocation body, under the trigger binding `binding`; every
    /// other member of `Data` is an input's value.
    pub fn from_invocation(body: &[u8], binding: &str) -> Result<Self, TimerInfoError> {
        let json: Value = serde_json::from_slice(body)
            .map_err(|e| TimerInfoError::MalformedJson(e.to_string()))?;
        let data = json.get("Data").and_then(Value::as_object);
        let info = data
            .and_then(|d| d.get(binding))
            .and_then(Value::as_object)
            .ok_or_else(|| TimerInfoError::MissingTimer(binding.to_string()))?;
        let member = |object: &Map<String, Value>, name: &str| {
            object
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let time = |object: &Map<String, Value>, name: &str| {
            member(object, name).and_then(|v| parse_host_time(v.as_str()?))
        };
        let schedule_status = member(info, "ScheduleStatus")
            .and_then(|s| s.as_object().cloned())
            .and_then(|status| {
                Some(ScheduleStatus {
                    last: time(&status, "Last")?,
                    next: time(&status, "Next"),
                    last_updated: time(&status, "LastUpdated")?,
                })
            });
        Ok(TimerInfo {
            is_past_due: member(info, "IsPastDue")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            schedule_status,
            inputs: InputValues::from_data(data, binding),
            retry: json
                .get("Metadata")
                .and_then(|m| m.get("RetryContext"))
                .filter(|r| r.is_object())
                .map(retry_context_of),
        })
    }

    /// The `TimerInfo` as the host writes it into `Data` (dates as Newtonsoft writes them); the
    /// inputs and the retry context go beside it.
    pub fn to_binding_value(&self) -> Value {
        let date = |t: &DateTime<Utc>| Value::String(dotnet_datetime_offset(t));
        let status = self.schedule_status.as_ref().map(|s| {
            json!({
                "Last": date(&s.last),
                "Next": s.next.as_ref().map_or(Value::Null, date),
                "LastUpdated": date(&s.last_updated),
            })
        });
        json!({
            "Schedule": {"AdjustForDST": true},
            "ScheduleStatus": status,
            "IsPastDue": self.is_past_due,
        })
    }
}

/// A timer-triggered function: one firing in, the outputs it sets out.
///
/// ```
/// use hubhost_functions::prelude::*;
///
/// struct Tick;
///
/// #[async_trait]
/// impl TimerFunction for Tick {
///     async fn run(&self, timer: TimerInfo) -> Result<FunctionOutput, FunctionError> {
///         let mut output = FunctionOutput::default();
///         output.log(format!("past due: {}", timer.is_past_due));
///         output.put_queue_message("reports", "hourly report due");
///         Ok(output)
///     }
/// }
///
/// let server = FunctionServer::builder().timer_function("Tick", Tick).build(None)?;
/// assert_eq!(server.function_names(), ["Tick"]);
/// # Ok::<(), hubhost_functions::function_app::FunctionAppError>(())
/// ```
#[async_trait::async_trait]
pub trait TimerFunction: Send + Sync + 'static {
    /// Runs one firing. An `Err` fails the invocation: the host logs it, tries it again as the
    /// function's `retry` policy says (timers take one on Azure), and the timer fires again at
    /// its next occurrence either way.
    async fn run(&self, timer: TimerInfo) -> Result<FunctionOutput, FunctionError>;
}

//! The app's timer functions (`timerTrigger`), fired on their schedule as the Timers extension
//! fires them: `schedule` an NCRONTAB expression of six fields (second, minute, hour, day,
//! month, day of week), `%Setting%` resolved, times in UTC; `runOnStartup` fires once at
//! start too. Each firing is `POST /{FunctionName}` with `Data.<trigger>` the `TimerInfo` the
//! extension builds (`Schedule`, `ScheduleStatus` with `Last`, `Next` and `LastUpdated`,
//! `IsPastDue`), and the answer's outputs carried out as for any trigger. As on Azure, a firing
//! that fails (an error answered, an input or output that fails, no answer, or host.json's
//! `functionTimeout` outlived, which also restarts the handler) is tried again as the function's
//! `retry` policy says, with `RetryContext`.
//!
//! As on Azure, one instance of the app runs each timer: the first to take the function's lock
//! file (in the same folder as the owner ids, so instances on this machine share it) fires it,
//! and the others try again every [`LOCK_RETRY`]. Firings never overlap: one that is due while
//! the last still runs starts when it ends, with `IsPastDue` true. Unlike Azure, the schedule's
//! status is not kept between runs (the extension keeps it in the storage account, and fires a
//! missed occurrence at start, past due); times are UTC (`WEBSITE_TIME_ZONE` is not read), and
//! a 5-field expression or a `TimeSpan` schedule is refused at start.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Datelike, Duration as ChronoDuration, TimeZone, Timelike, Utc};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::emulate::dispatch::{retry_context, retry_delay};
use crate::emulate::inputs::InputPlan;
use crate::emulate::outputs::{InvocationOrigin, OutputPlan, OutputSinks};
use crate::emulate::{AppSettings, EmulateError, SettingProblem};
use crate::invoker::{HostFailure, Invoker, within_function_timeout};
use hubhost_functions::contract::encode::{BindingData, sys_expression_data};
use hubhost_functions::contract::timer_request::encode_timer_request;
use hubhost_functions::function_app::{FunctionSpec, RetryPolicy, Trigger};
use hubhost_functions::inputs::InputValues;
use hubhost_functions::timer::{ScheduleStatus, TimerInfo};
use hubhost_trigger::batch::RetryContext;

/// How often an instance that does not hold a timer's lock tries to take it.
pub const LOCK_RETRY: Duration = Duration::from_secs(5);

/// Why a `schedule` cannot be run.
#[derive(Debug, thiserror::Error)]
#[error("schedule \"{schedule}\": {problem}")]
pub struct ScheduleError {
    pub schedule: String,
    pub problem: String,
}

/// How firings reach the handler: through `invoker`, within host.json's `functionTimeout`,
/// `timed_out` told of a firing that outlived it (the instance then restarts the handler, as
/// the host does).
#[derive(Clone)]
pub struct TimerDelivery {
    pub invoker: Invoker,
    pub function_timeout: Option<Duration>,
    pub timed_out: Arc<tokio::sync::Notify>,
}

/// One firing's request, as `hubhost invoke` sends it.
pub struct TimerInvocation {
    /// The invocation request's body.
    pub body: Vec<u8>,
    /// The input bindings' values in it, as sent.
    pub inputs: Vec<(String, Value)>,
    pub outputs: Arc<OutputPlan>,
}

/// The app's timer functions, resolved.
pub struct TimerTriggers {
    timers: Vec<TimerFunction>,
}

struct TimerFunction {
    name: String,
    binding: String,
    schedule: Schedule,
    run_on_startup: bool,
    /// The function's `retry` policy: on Azure a timer function's failed firing is tried
    /// again as it says, as an Event Hubs function's batch is.
    retry: Option<RetryPolicy>,
    inputs: Arc<InputPlan>,
    outputs: Arc<OutputPlan>,
}

impl TimerTriggers {
    /// Each timer function's outputs kept in the outbox, with the function's name.
    pub fn kept(&self) -> Vec<(String, crate::emulate::KeptOutput)> {
        self.timers
            .iter()
            .flat_map(|t| t.outputs.kept().into_iter().map(|k| (t.name.clone(), k)))
            .collect()
    }

    pub fn resolve(
        specs: &[FunctionSpec],
        settings: &AppSettings,
        sinks: &OutputSinks,
    ) -> Result<Self, EmulateError> {
        let mut timers = Vec::new();
        for spec in specs {
            let Trigger::Other {
                kind,
                settings: trigger,
            } = &spec.trigger
            else {
                continue;
            };
            if !kind.eq_ignore_ascii_case("timerTrigger") {
                continue;
            }
            let bad = |problem: SettingProblem| EmulateError::Function {
                function: spec.name.clone(),
                problem: Box::new(problem),
            };
            let text = |key: &str| trigger.get(key).and_then(Value::as_str).unwrap_or("");
            let schedule = settings
                .expand(text("schedule"))
                .map_err(|e| bad(SettingProblem::Expand(e)))?;
            let schedule =
                Schedule::parse(&schedule).map_err(|e| bad(SettingProblem::Schedule(e)))?;
            let run_on_startup = trigger.get("runOnStartup").is_some_and(super::flag_is_on);
            timers.push(TimerFunction {
                name: spec.name.clone(),
                binding: text("name").to_string(),
                schedule,
                run_on_startup,
                retry: spec.retry.clone(),
                inputs: Arc::new(InputPlan::resolve(spec, settings)?),
                outputs: Arc::new(OutputPlan::resolve(spec, settings, sinks)?),
            });
        }
        Ok(TimerTriggers { timers })
    }

    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }

    /// The request the host sends `function` for one firing now, as the host's admin API
    /// (`POST /admin/functions/{name}`) fires a timer (`hubhost invoke`), its inputs read; and
    /// the function's outputs. `None` when `function` is not one of these timers.
    pub async fn firing_now(
        &self,
        function: &str,
    ) -> Option<Result<TimerInvocation, crate::emulate::InputError>> {
        let timer = self.timers.iter().find(|t| t.name == function)?;
        let now = Utc::now();
        let inputs = match read_inputs(timer, now).await {
            Ok(inputs) => inputs,
            Err(e) => return Some(Err(e)),
        };
        let firing = Firing {
            scheduled: now,
            last: None,
            next: timer.schedule.next_after(now),
            past_due: false,
        };
        Some(Ok(TimerInvocation {
            body: invocation(
                timer,
                &firing,
                retry_context(&timer.name, timer.retry.as_ref(), 0, None),
                inputs.clone(),
            ),
            inputs,
            outputs: timer.outputs.clone(),
        }))
    }

    /// One line per timer: its schedule and next occurrence.
    pub fn describe(&self, now: DateTime<Utc>) -> Vec<String> {
        self.timers
            .iter()
            .map(|t| {
                format!(
                    "  {} ← timer \"{}\" (UTC), next at {}{}",
                    t.name,
                    t.schedule.text,
                    t.schedule
                        .next_after(now)
                        .map_or("never".into(), |n| n.to_rfc3339()),
                    if t.run_on_startup {
                        ", and once now (runOnStartup)"
                    } else {
                        ""
                    }
                )
            })
            .collect()
    }

    /// Fires every timer whose lock this instance takes, until `stop`. `app_key` names the app
    /// in the lock files (instances of one app share them).
    pub async fn run(self, app_key: String, delivery: TimerDelivery, stop: CancellationToken) {
        let mut tasks = Vec::new();
        for timer in self.timers {
            let lock = crate::emulate::owner_id::lock_folder().join(format!(
                "timer-{}-{}.lock",
                app_key,
                timer.name.to_ascii_lowercase()
            ));
            tasks.push(tokio::spawn(fire_while_held(
                timer,
                lock,
                delivery.clone(),
                stop.clone(),
            )));
        }
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// Waits for the timer's lock, then fires it on its schedule until `stop`.
async fn fire_while_held(
    timer: TimerFunction,
    lock: std::path::PathBuf,
    delivery: TimerDelivery,
    stop: CancellationToken,
) {
    let held = loop {
        match take_lock(&lock) {
            Some(file) => break file,
            None => {
                tokio::select! {
                    biased;
                    () = tokio::time::sleep(LOCK_RETRY) => continue,
                    () = stop.cancelled() => return,
                }
            }
        }
    };
    tracing::info!(function = %timer.name, "this instance runs the timer");
    let mut last: Option<DateTime<Utc>> = None;
    if timer.run_on_startup {
        fire(&timer, &delivery, Utc::now(), &mut last, &stop).await;
    }
    // The occurrence after the last one fired, but not one long gone: a firing that overran
    // is followed by one occurrence at once, not by every one it missed.
    let after = |last: Option<DateTime<Utc>>| {
        let recent = Utc::now() - ChronoDuration::seconds(1);
        last.map_or(recent, |l| l.max(recent))
    };
    while let Some(next) = timer.schedule.next_after(after(last)) {
        let wait = (next - Utc::now()).to_std().unwrap_or_default();
        tokio::select! {
            biased;
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => break,
        }
        fire(&timer, &delivery, next, &mut last, &stop).await;
    }
    drop(held);
}

/// The lock file, locked by this process; `None` when another holds it (or it cannot be made).
fn take_lock(path: &std::path::Path) -> Option<std::fs::File> {
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder).ok()?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()?;
    file.try_lock().ok()?;
    Some(file)
}

async fn fire(
    timer: &TimerFunction,
    delivery: &TimerDelivery,
    scheduled: DateTime<Utc>,
    last: &mut Option<DateTime<Utc>>,
    stop: &CancellationToken,
) {
    let next = timer.schedule.next_after(scheduled);
    // Past due when the occurrence after this one has come too (the last firing overran).
    let past_due = next.is_some_and(|after| after <= Utc::now());
    let previous = last.replace(scheduled);
    let firing = Firing {
        scheduled,
        last: previous,
        next,
        past_due,
    };
    // The function's retry policy, as the host applies it to any trigger: each failure tried
    // again after the policy's delay, with `RetryContext`, until the policy's maximum. A stop
    // ends the retries.
    let mut last_error: Option<HostFailure> = None;
    let mut attempt: u32 = 0;
    loop {
        let retry = retry_context(
            &timer.name,
            timer.retry.as_ref(),
            attempt,
            last_error.as_ref(),
        );
        let error = match fire_once(timer, delivery, &firing, retry).await {
            Ok(()) => return,
            Err(error) => error,
        };
        let Some(policy) = &timer.retry else {
            tracing::error!(function = %timer.name, error = %error.message, "the timer function failed");
            return;
        };
        if policy.max_retry_count >= 0 && i64::from(attempt) >= policy.max_retry_count {
            tracing::error!(function = %timer.name, error = %error.message, retries = attempt, "the timer function failed; no retries left");
            return;
        }
        attempt += 1;
        let delay = retry_delay(policy, attempt);
        tracing::warn!(function = %timer.name, attempt, ?delay, error = %error.message, "the timer function failed; retrying");
        last_error = Some(error);
        tokio::select! {
            biased;
            () = tokio::time::sleep(delay) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// The timer's inputs for a firing at `now`. A timer's binding data is `sys` alone: its
/// inputs' paths can name nothing else.
async fn read_inputs(
    timer: &TimerFunction,
    now: DateTime<Utc>,
) -> Result<Vec<(String, Value)>, crate::emulate::InputError> {
    let mut data = BindingData::default();
    data.set("sys", sys_expression_data(&timer.name, &now));
    timer.inputs.read(&data, now).await
}

/// One occurrence of a timer, as its firings' `TimerInfo` says it.
struct Firing {
    scheduled: DateTime<Utc>,
    last: Option<DateTime<Utc>>,
    next: Option<DateTime<Utc>>,
    past_due: bool,
}

/// One attempt at a firing: its inputs read, the request sent, its outputs carried out. Any
/// of them failing fails the invocation, as in the host.
async fn fire_once(
    timer: &TimerFunction,
    delivery: &TimerDelivery,
    firing: &Firing,
    retry: Option<RetryContext>,
) -> Result<(), HostFailure> {
    let inputs = read_inputs(timer, Utc::now())
        .await
        .map_err(|e| HostFailure::other(format!("input binding failed: {e}")))?;
    let body = invocation(timer, firing, retry, inputs);
    let invocation_id = uuid::Uuid::new_v4().to_string();
    let invocation = delivery
        .invoker
        .invoke_as(&timer.name, &invocation_id, body, None);
    let Ok(answered) = within_function_timeout(delivery.function_timeout, invocation).await else {
        // The host's rule: the invocation fails with FunctionTimeoutException, and the host
        // restarts the worker.
        delivery.timed_out.notify_one();
        let limit = delivery.function_timeout.unwrap_or_default();
        return Err(HostFailure::timeout(limit, &timer.name));
    };
    let answer = match answered {
        Ok(answer) if answer.succeeded() => answer,
        Ok(answer) => {
            return Err(answer.refused.unwrap_or_else(|| {
                HostFailure::other(format!("the handler answered {}", answer.status))
            }));
        }
        Err(e) => return Err(HostFailure::other(e.to_string())),
    };
    let origin = InvocationOrigin::without_events(&timer.name, &invocation_id);
    timer
        .outputs
        .carry_out(&answer.body, &origin, answer.trace_context.as_deref(), None)
        .await
        .map(|_| ())
        .map_err(|e| HostFailure::other(format!("output binding failed: {e}")))
}

/// The invocation request: `Data.<trigger>` the `TimerInfo` (dates as Newtonsoft writes a
/// local `DateTime` on a host whose zone is UTC), `Metadata` `sys` and the `RetryContext`.
fn invocation(
    timer: &TimerFunction,
    firing: &Firing,
    retry: Option<RetryContext>,
    inputs: Vec<(String, Value)>,
) -> Vec<u8> {
    let now = Utc::now();
    let info = TimerInfo {
        is_past_due: firing.past_due,
        schedule_status: Some(ScheduleStatus {
            last: firing.last.unwrap_or(firing.scheduled),
            next: firing.next,
            last_updated: now,
        }),
        inputs: InputValues::from_wire(inputs),
        retry,
    };
    encode_timer_request(&timer.name, &timer.binding, &info, &now)
}

/// An NCRONTAB schedule with seconds: each field the set of values it allows.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    text: String,
    seconds: Vec<u32>,
    minutes: Vec<u32>,
    hours: Vec<u32>,
    days: Vec<u32>,
    months: Vec<u32>,
    /// 0 is Sunday (7 is read as Sunday too).
    weekdays: Vec<u32>,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Schedule {
    pub fn parse(text: &str) -> Result<Self, ScheduleError> {
        let bad = |problem: String| ScheduleError {
            schedule: text.to_string(),
            problem,
        };
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != 6 {
            return Err(bad(format!(
                "{} fields; the Functions host's NCRONTAB takes six: second minute hour day month day-of-week (a TimeSpan schedule is not run by hubhost)",
                fields.len()
            )));
        }
        let field = |i: usize, min: u32, max: u32, names: &[&str]| {
            parse_field(fields[i], min, max, names)
                .map_err(|p| bad(format!("field {}: {p}", i + 1)))
        };
        let mut weekdays = field(5, 0, 7, &WEEKDAYS)?;
        if weekdays.contains(&7) {
            weekdays.retain(|d| *d != 7);
            if !weekdays.contains(&0) {
                weekdays.insert(0, 0);
            }
        }
        Ok(Schedule {
            text: text.to_string(),
            seconds: field(0, 0, 59, &[])?,
            minutes: field(1, 0, 59, &[])?,
            hours: field(2, 0, 23, &[])?,
            days: field(3, 1, 31, &[])?,
            months: field(4, 1, 12, &MONTHS)?,
            weekdays,
        })
    }

    /// The first occurrence strictly after `t` (within five years), to the second.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let start = t.with_nanosecond(0)? + ChronoDuration::seconds(1);
        let mut day = start.date_naive();
        for _ in 0..(366 * 5) {
            let day_matches = self.months.contains(&day.month())
                && self.days.contains(&day.day())
                && self
                    .weekdays
                    .contains(&day.weekday().num_days_from_sunday());
            if day_matches {
                for &h in &self.hours {
                    for &m in &self.minutes {
                        for &s in &self.seconds {
                            let at = Utc
                                .with_ymd_and_hms(day.year(), day.month(), day.day(), h, m, s)
                                .single()?;
                            if at >= start {
                                return Some(at);
                            }
                        }
                    }
                }
            }
            day = day.succ_opt()?;
        }
        None
    }
}

/// One field: `*`, `n`, `a-b`, either with `/step`, or a comma list of those; names for months
/// and weekdays. The values it allows, ascending.
fn parse_field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<Vec<u32>, String> {
    let value = |v: &str| -> Result<u32, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(v)) {
            return Ok(i as u32 + if min == 1 { 1 } else { 0 });
        }
        let n: u32 = v.parse().map_err(|_| format!("\"{v}\" is not a number"))?;
        if n < min || n > max {
            return Err(format!("{n} is outside {min}–{max}"));
        }
        Ok(n)
    };
    let mut allowed = Vec::new();
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| format!("step \"{s}\" is not a number"))?;
                if step == 0 {
                    return Err("a step of 0".into());
                }
                (r, step)
            }
            None => (part, 1),
        };
        let (from, to) = match range {
            "*" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                None if step > 1 => (value(r)?, max),
                None => (value(r)?, value(r)?),
            },
        };
        if from > to {
            return Err(format!("the range {from}-{to} is empty"));
        }
        allowed.extend((from..=to).step_by(step as usize));
    }
    allowed.sort_unstable();
    allowed.dedup();
    Ok(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn schedules_fire_as_ncrontab_says() {
        let every_five = Schedule::parse("*/5 * * * * *").unwrap();
        assert_eq!(
            every_five.next_after(at("2026-12-02T10:00:03Z")),
            Some(at("2026-12-02T10:00:05Z"))
        );
        assert_eq!(
            every_five.next_after(at("2026-12-02T10:00:05Z")),
            Some(at("2026-12-02T10:00:10Z")),
            "strictly after"
        );
        let weekday_mornings = Schedule::parse("0 30 9 * * Mon-Fri").unwrap();
        // 2026-12-05 is a Saturday.
        assert_eq!(
            weekday_mornings.next_after(at("2026-12-04T10:00:00Z")),
            Some(at("2026-12-07T09:30:00Z"))
        );
        let yearly = Schedule::parse("0 0 0 1 Jan *").unwrap();
        assert_eq!(
            yearly.next_after(at("2026-12-02T00:00:00Z")),
            Some(at("2027-01-01T00:00:00Z"))
        );
        let sundays = Schedule::parse("0 0 12 * * 7").unwrap();
        assert_eq!(
            sundays.next_after(at("2026-12-02T00:00:00Z")),
            Some(at("2026-12-06T12:00:00Z"))
        );
        let listed = Schedule::parse("0 0,15,45 * * * *").unwrap();
        assert_eq!(
            listed.next_after(at("2026-12-02T10:16:00Z")),
            Some(at("2026-12-02T10:45:00Z"))
        );
        assert!(Schedule::parse("0 0 31 2 *").is_err(), "five fields");
        assert!(
            Schedule::parse("0 0 0 31 2 *")
                .unwrap()
                .next_after(at("2026-01-01T00:00:00Z"))
                .is_none()
        );
        for bad in [
            "60 * * * * *",
            "* * * * * x",
            "*/0 * * * * *",
            "5-1 * * * * *",
            "00:05:00",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }
}

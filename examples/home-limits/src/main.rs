//! An app of the three triggers hubhost runs, each function reading a blob input the host
//! reads for it before the call:
//! - `CheckLimits` (Event Hubs, one reading per invocation): the home's limits are the blob
//!   `limits/{homeId}.json`, named by the reading's own `homeId` (`{"maxCoPpm": 30}`); a carbon
//!   monoxide reading over its home's `maxCoPpm` is written to the `overLimit` blob output. A
//!   home without limits, and a reading that is not a CO level, pass.
//! - `Limits` (HTTP, `GET /api/limits/{home}`): the same blob, named by the route, or 404.
//! - `Heartbeat` (timer, on the schedule the `HeartbeatSchedule` setting gives): one blob per
//!   firing, saying whether it came late and when the next is due.
//!
//! Run (with `hubhost hub` running):
//! `cargo build -p home-limits && hubhost emulate --app examples/home-limits/function_app`
use hubhost_functions::prelude::*;
use serde::{Deserialize, Serialize};

/// The part of a sensor's reading this app reads (`hubhost simulate` sends them).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reading {
    home_id: String,
    sensor_id: String,
    #[serde(rename = "type")]
    kind: String,
    /// The CO level in ppm, for a `co` sensor.
    value: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HomeLimits {
    max_co_ppm: f64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OverLimit<'a> {
    home_id: &'a str,
    sensor_id: &'a str,
    co_ppm: f64,
    max_co_ppm: f64,
    sequence_number: Option<i64>,
}

/// The blob input every function here declares as `limits`.
const LIMITS: &str = "limits";

fn bad_input(e: hubhost_functions::inputs::InputError) -> FunctionError {
    FunctionError::BadRequest {
        code: "bad_limits",
        message: e.to_string(),
    }
}

struct CheckLimits;

#[async_trait]
impl EventHubFunction for CheckLimits {
    async fn run(
        &self,
        batch: TriggerBatch,
        context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let mut output = FunctionOutput::default();
        // Cardinality one: the batch is one reading.
        let Some(event) = batch.events.first() else {
            return Ok(output);
        };
        let reading = match event.json::<Reading>() {
            Ok(reading) => reading,
            Err(e) => {
                context.log(format!("not a reading, skipped: {e}"));
                return Ok(output);
            }
        };
        let Some(limits) = batch.inputs.json::<HomeLimits>(LIMITS).map_err(bad_input)? else {
            return Ok(output);
        };
        if let ("co", Some(ppm)) = (reading.kind.as_str(), reading.value)
            && ppm > limits.max_co_ppm
        {
            let over = OverLimit {
                home_id: &reading.home_id,
                sensor_id: &reading.sensor_id,
                co_ppm: ppm,
                max_co_ppm: limits.max_co_ppm,
                sequence_number: event.sequence_number,
            };
            output.write_blob("overLimit", serde_json::to_vec(&over).expect("JSON"));
        }
        Ok(output)
    }
}

struct Limits;

#[async_trait]
impl HttpFunction for Limits {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, FunctionError> {
        let home = request.params.get("home").map_or("", String::as_str);
        Ok(match request.inputs.text(LIMITS).map_err(bad_input)? {
            Some(limits) => {
                HttpResponse::text(200, limits).with_header("Content-Type", "application/json")
            }
            None => HttpResponse::text(404, format!("no limits for {home}")),
        })
    }
}

struct Heartbeat;

#[async_trait]
impl TimerFunction for Heartbeat {
    async fn run(&self, timer: TimerInfo) -> Result<FunctionOutput, FunctionError> {
        let next = timer.schedule_status.as_ref().and_then(|s| s.next);
        let beat = serde_json::json!({
            "pastDue": timer.is_past_due,
            "next": next.map(|t| t.to_rfc3339()),
        });
        let mut output = FunctionOutput::default();
        output.write_blob("beat", beat.to_string());
        Ok(output)
    }
}

#[tokio::main]
async fn main() -> Result<(), ServeError> {
    FunctionServer::builder()
        .function("CheckLimits", CheckLimits)
        .http_function("Limits", Limits)
        .timer_function("Heartbeat", Heartbeat)
        .run()
        .await
}

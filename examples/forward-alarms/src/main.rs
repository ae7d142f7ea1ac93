//! An Event Hubs function with an `eventHub` output: reads sensor readings from `sensors` and
//! forwards every alarm (a reading whose state is `alarm` or `break`) to the `alarms` hub, as
//! `{"homeId", "sensorId", "state", "sequenceNumber", "enqueuedTime"}` (the reading's, RFC 3339). An event that is not a reading is set
//! aside with its reason through the `blob` output `poison` (and counted); the rest of the
//! batch goes on.
//!
//! Run (with `hubhost hub` running, which serves both hubs):
//! `cargo build -p forward-alarms && hubhost emulate --app examples/forward-alarms/function_app`
use hubhost_functions::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reading {
    home_id: String,
    sensor_id: String,
    state: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Alarm<'a> {
    home_id: &'a str,
    sensor_id: &'a str,
    state: &'a str,
    sequence_number: Option<i64>,
    /// When the reading reached the event hub: how late an alarm is.
    enqueued_time: Option<String>,
}

/// The `eventHub` output's `name` in function.json.
const ALARMS: &str = "alarms";
/// The `blob` output that poison events are set aside in.
const POISON: &str = "poison";

const UNREADABLE: CounterFamily = CounterFamily {
    key: "unreadable",
    name: "forward_alarms_unreadable_total",
    help: "Events that are not readings (set aside).",
};

struct ForwardAlarms;

#[async_trait]
impl EventHubFunction for ForwardAlarms {
    async fn run(
        &self,
        batch: TriggerBatch,
        context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let mut output = FunctionOutput::default();
        let mut forwarded = 0;
        for event in &batch.events {
            let reading = match event.json::<Reading>() {
                Ok(reading) => reading,
                Err(e) => {
                    context.count("unreadable", 1);
                    let reason = format!("not a reading: {e}");
                    output.dead_letter(POISON, &batch.partition, event, reason);
                    continue;
                }
            };
            if reading.state == "alarm" || reading.state == "break" {
                let alarm = Alarm {
                    home_id: &reading.home_id,
                    sensor_id: &reading.sensor_id,
                    state: &reading.state,
                    sequence_number: event.sequence_number,
                    enqueued_time: event.enqueued_time.map(|t| t.to_rfc3339()),
                };
                output
                    .send_event_json(ALARMS, &alarm)
                    .map_err(|e| FunctionError::Failed {
                        code: "encode",
                        message: e.to_string(),
                    })?;
                forwarded += 1;
            }
        }
        output.log(format!(
            "partition {}: {} readings, {forwarded} alarms forwarded",
            batch.partition.partition_id,
            batch.events.len()
        ));
        Ok(output)
    }
}

#[tokio::main]
async fn main() -> Result<(), ServeError> {
    FunctionServer::builder()
        .counters(&[UNREADABLE])
        .function("ForwardAlarms", ForwardAlarms)
        .run()
        .await
}

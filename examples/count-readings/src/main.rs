//! The smallest Event Hubs function: counts each batch's readings per home, into a blob.
//! Run: `cargo build -p count-readings && hubhost emulate --app examples/count-readings/function_app`
use std::collections::BTreeMap;

use hubhost_functions::prelude::*;

#[derive(serde::Deserialize)]
struct Reading {
    #[serde(rename = "homeId")]
    home_id: String,
}

struct CountReadings;

#[async_trait]
impl EventHubFunction for CountReadings {
    async fn run(
        &self,
        batch: TriggerBatch,
        _: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let mut per_home = BTreeMap::<String, u64>::new();
        // An event that is not a reading is skipped; the rest of the batch goes on.
        for reading in batch.events.iter().filter_map(|e| e.json::<Reading>().ok()) {
            *per_home.entry(reading.home_id).or_default() += 1;
        }
        let partition = &batch.partition.partition_id;
        let mut output = FunctionOutput::default();
        output.log(format!("partition {partition}: {} homes", per_home.len()));
        output.write_blob("counts", serde_json::to_vec(&per_home).expect("JSON"));
        Ok(output)
    }
}

#[tokio::main]
async fn main() -> Result<(), ServeError> {
    let server = FunctionServer::builder().function("CountReadings", CountReadings);
    server.run().await
}

//! The test kit's `LocalApp` runs a user's function app as Azure runs it, from a plain
//! `#[tokio::test]`: the forward-alarms example under the emulated host on an in-process hub,
//! events sent with the Rust SDK, what its `eventHub` and `blob` outputs wrote read back.

use std::time::Duration;

use hubhost_testkit::{LocalApp, build_examples};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_app_runs_from_a_test_and_its_outputs_are_read_back() {
    let app_folder = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/forward-alarms/function_app"
    );
    let handler = build_examples(&["forward-alarms"]).join("forward-alarms");
    let app = LocalApp::start(app_folder.as_ref(), &handler)
        .await
        .expect("the app starts");

    let readings = [
        json!({"homeId": "home-1", "sensorId": "door", "state": "alarm"}),
        json!({"homeId": "home-2", "sensorId": "window", "state": "closed"}),
        json!({"homeId": "home-3", "sensorId": "glass", "state": "break"}),
    ];
    app.send_json("sensors", &readings).await.unwrap();
    app.send_texts("sensors", ["not a reading"]).await.unwrap();
    app.wait_processed("ForwardAlarms", 4, Duration::from_secs(60))
        .await
        .unwrap();

    // The eventHub output: the two alarms, in the `alarms` hub.
    let mut alarms: Vec<String> = app
        .texts_in("alarms")
        .await
        .unwrap()
        .iter()
        .map(|t| serde_json::from_str::<Value>(t).unwrap()["homeId"].to_string())
        .collect();
    alarms.sort();
    assert_eq!(alarms, [r#""home-1""#, r#""home-3""#]);

    // The blob output: the poison event set aside with its reason.
    let blobs = app.blobs("deadletter").await.unwrap();
    let records: Vec<Value> = blobs
        .values()
        .flat_map(|b| serde_json::from_slice::<Vec<Value>>(b).unwrap())
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["body"], "not a reading");
    assert!(
        records[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("not a reading")
    );

    // What a blob input would read: put in the app's own storage, beside what outputs wrote.
    app.put_blob("refs", "home-1.json", br#"{"limit":30}"#.to_vec())
        .await
        .unwrap();
    let refs = app.blobs("refs").await.unwrap();
    assert_eq!(refs["home-1.json"], br#"{"limit":30}"#);

    app.stop().await.expect("the host stops cleanly");
}

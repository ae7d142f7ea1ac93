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

    // A reading enqueued half an hour ago (the local hub's clock set back for the send): the
    // function sees the time it was enqueued, as it would an old event on Azure.
    let half_an_hour_ago = chrono::Utc::now() - chrono::Duration::minutes(30);
    let late = json!({"homeId": "home-0", "sensorId": "door", "state": "alarm"});
    app.send_enqueued_at("sensors", [late.to_string().into_bytes()], half_an_hour_ago)
        .await
        .unwrap();
    let readings = [
        json!({"homeId": "home-1", "sensorId": "door", "state": "alarm"}),
        json!({"homeId": "home-2", "sensorId": "window", "state": "closed"}),
        json!({"homeId": "home-3", "sensorId": "glass", "state": "break"}),
    ];
    app.send_json("sensors", &readings).await.unwrap();
    app.send_texts("sensors", ["not a reading"]).await.unwrap();
    app.wait_processed("ForwardAlarms", 5, Duration::from_secs(60))
        .await
        .unwrap();

    // The eventHub output: the three alarms, in the `alarms` hub, each with the time its
    // reading was enqueued.
    let mut alarms: Vec<Value> = app
        .texts_in("alarms")
        .await
        .unwrap()
        .iter()
        .map(|t| serde_json::from_str::<Value>(t).unwrap())
        .collect();
    alarms.sort_by_key(|a| a["homeId"].to_string());
    let homes: Vec<&str> = alarms
        .iter()
        .map(|a| a["homeId"].as_str().unwrap())
        .collect();
    assert_eq!(homes, ["home-0", "home-1", "home-3"]);
    let age = |alarm: &Value| {
        let enqueued = alarm["enqueuedTime"].as_str().unwrap();
        chrono::Utc::now()
            - chrono::DateTime::parse_from_rfc3339(enqueued)
                .unwrap()
                .to_utc()
    };
    let late_age = age(&alarms[0]);
    assert!(
        late_age > chrono::Duration::minutes(29) && late_age < chrono::Duration::minutes(31),
        "the late reading was enqueued {late_age} ago"
    );
    assert!(
        age(&alarms[1]) < chrono::Duration::minutes(1),
        "{}",
        alarms[1]
    );

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

/// The forward-alarms handler under a function.json whose `eventHub` output is named `alarmz`:
/// the handler sets `alarms`, which the Functions host would drop without a sign. Waiting for
/// the events fails, naming the output and the declared ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_function_json_does_not_declare_fails_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let app_folder = dir.path().join("function_app");
    hubhost_testkit::copy_dir(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/forward-alarms/function_app"
        )
        .as_ref(),
        &app_folder,
    );
    let function_json = app_folder.join("ForwardAlarms/function.json");
    let text = std::fs::read_to_string(&function_json).unwrap();
    assert!(text.contains(r#""name": "alarms""#), "{text}");
    std::fs::write(
        &function_json,
        text.replace(r#""name": "alarms""#, r#""name": "alarmz""#),
    )
    .unwrap();
    let handler = build_examples(&["forward-alarms"]).join("forward-alarms");
    let app = LocalApp::start(&app_folder, &handler).await.unwrap();
    let alarm = json!({"homeId": "home-1", "sensorId": "door", "state": "alarm"});
    app.send_json("sensors", &[alarm]).await.unwrap();
    let waited = app
        .wait_processed("ForwardAlarms", 1, Duration::from_secs(60))
        .await;
    let Err(hubhost_testkit::LocalAppError::UndeclaredOutput(said)) = waited else {
        panic!("{waited:?}")
    };
    assert!(
        said.contains(r#"set output "alarms""#) && said.contains("(declared: alarmz, poison)"),
        "{said}"
    );
    app.stop().await.unwrap();
}

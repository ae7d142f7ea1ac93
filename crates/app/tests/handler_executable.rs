//! `hubhost-app`, the executable a deployment runs, started as the Functions host starts it:
//! no arguments, the port in FUNCTIONS_CUSTOMHANDLER_PORT, stopped with SIGTERM.

use std::process::{Command, Stdio};
use std::time::Duration;

use hubhost_app::fleet::{Fleet, PartitionFeed};
use hubhost_app::handler::builtin_functions;
use hubhost_testkit::{
    free_port, host_request, transparent_huge_pages, wait_for_port, wait_within,
};

#[tokio::test]
async fn the_deployed_handler_serves_the_host_contract_and_stops_on_sigterm() {
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hubhost-app"))
        .env("FUNCTIONS_CUSTOMHANDLER_PORT", port.to_string())
        .env("HUBHOST_STORAGE", data.path())
        .env_remove("AzureWebJobsStorage")
        .env_remove("FUNCTIONS_APP_ROOT_PATH")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_port(port, "hubhost-app");
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}");

    // The host's start-up probe.
    let probe = http.get(&url).send().await.unwrap();
    assert!(probe.status().is_success(), "{}", probe.status());

    // Its memory is paged in 4 KiB pages whatever the machine's huge-page setting, so that
    // its resident size says what it holds (`hubhost_process::allocator`).
    if let Some(huge) = transparent_huge_pages(child.id()) {
        assert!(!huge, "hubhost-app runs with transparent huge pages off");
    }

    // A malformed request is refused with a JSON error naming the problem; the process stays up.
    let refused = http
        .post(format!("{url}/SensorAggregator"))
        .header("Content-Type", "application/json")
        .body("{\"Data\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    let error: serde_json::Value = serde_json::from_slice(&refused.bytes().await.unwrap()).unwrap();
    assert!(
        error.to_string().to_lowercase().contains("json"),
        "the error names the problem: {error}"
    );
    assert!(child.try_wait().unwrap().is_none(), "it stays up");

    // A real batch, encoded as the host encodes it, is applied and answered.
    let fleet = Fleet {
        homes: 16,
        partitions: 4,
        seed: 5,
    };
    let start = chrono::DateTime::parse_from_rfc3339("2026-11-25T10:00:00Z")
        .unwrap()
        .into();
    let events = PartitionFeed::new(&fleet, 1, start).next_batch(20);
    let spec = builtin_functions().remove(0);
    let request = host_request(&spec.name, spec.event_hub_trigger().unwrap(), 1, &events);
    let answer = http
        .post(format!("{url}/{}", spec.name))
        .header("Content-Type", "application/json")
        .body(request)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let answer: serde_json::Value = serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap();
    assert_eq!(answer["ReturnValue"]["applied"], 20, "{answer}");

    // SIGTERM, as the host stops its worker: a clean exit.
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = wait_within(&mut child, Duration::from_secs(10), "hubhost-app");
    assert!(status.success(), "{status}");
}

//! A user's app with outputs no local service carries out (cosmosDB, serviceBus), an HTTP
//! function and a function with a trigger emulate does not run, under `hubhost emulate`
//! against `hubhost hub` and under `hubhost invoke`: each output value kept once in the
//! outbox, each such binding and the function that is not run named at start, the HTTP
//! function served at /api/{name} as the host serves it, and `--strict-bindings` refusing the
//! app instead.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hubhost_testkit::{self as kit, Hub, KEY};
use serde_json::{Value, json};

use super::app_reading::{
    Emulate, app, events_of, function, local_settings, records, wait_records,
};

/// The lines of one outbox file so far.
fn outbox_lines(root: &Path, function: &str, binding: &str) -> Vec<Value> {
    let file = root
        .join("hubhost-data/outbox")
        .join(function)
        .join(format!("{binding}.jsonl"));
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// How many times each item id is in `lines`.
fn ids(lines: &[Value]) -> BTreeMap<String, usize> {
    let mut counted = BTreeMap::new();
    for line in lines {
        let id = line["value"]["id"].as_str().unwrap().to_string();
        *counted.entry(id).or_insert(0) += 1;
    }
    counted
}

/// The URL emulate printed for the HTTP function `name`.
fn served_at(output: &str, name: &str) -> String {
    let prefix = format!("{name} ← HTTP ");
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no URL for {name} in:\n{output}"))
        .to_string()
}

/// The page at the `/metrics` address emulate printed.
fn metrics_page(output: &str) -> String {
    let url = output
        .lines()
        .find_map(|l| l.trim().strip_prefix("metrics: "))
        .unwrap_or_else(|| panic!("no metrics address in:\n{output}"));
    let port: u16 = url
        .trim_end_matches("/metrics")
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"));
    kit::http_get(port, "/metrics").expect("/metrics answers")
}

#[test]
fn outputs_no_local_service_carries_out_are_kept_in_the_outbox_once_each() {
    let hub = Hub::start_serving_hubs(&["sensors:2"]);
    let sent = hub.python("send-to", &["1", "10", "doc"]);
    assert_eq!(sent["sent"], 10, "{sent}");

    let mut fan = function("sensors", "HubConnection", "many");
    let bindings = fan["bindings"].as_array_mut().unwrap();
    bindings.push(
        json!({"type": "cosmosDB", "direction": "out", "name": "docs",
        "databaseName": "homes", "containerName": "readings", "connection": "CosmosDB"}),
    );
    bindings.push(
        json!({"type": "serviceBus", "direction": "out", "name": "$return",
        "queueName": "orders", "connection": "ServiceBus"}),
    );
    let health = json!({"bindings": [
        {"type": "httpTrigger", "direction": "in", "name": "req", "authLevel": "anonymous",
         "methods": ["get"]},
        {"type": "http", "direction": "out", "name": "res"}]});
    let tick = json!({"bindings": [
        {"type": "timerTrigger", "direction": "in", "name": "timer", "schedule": "%TickSchedule%"},
        {"type": "serviceBus", "direction": "out", "name": "audit", "queueName": "audit"}]});
    let queued = json!({"bindings": [
        {"type": "queueTrigger", "direction": "in", "name": "item", "queueName": "work"}]});
    let dir = app(
        "",
        "",
        &[
            ("Fan", fan),
            ("Health", health),
            ("Tick", tick),
            ("Work", queued),
        ],
    );
    let root = dir.path();
    local_settings(
        root,
        json!({
            "HubConnection": format!("{}EntityPath=sensors", hub.connection_string(KEY)),
            "TickSchedule": "* * * * * *",
        }),
    );

    // invoke shows what would be kept, and keeps nothing.
    let invoked = Command::new(env!("CARGO_BIN_EXE_hubhost"))
        .args(["invoke", "Fan", "--app", "."])
        .current_dir(root)
        .env("OUTPUT_PER_EVENT", "docs,$return")
        .output()
        .unwrap();
    let answer: Value = serde_json::from_slice(&invoked.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&invoked.stdout),
            String::from_utf8_lossy(&invoked.stderr)
        )
    });
    assert!(invoked.status.success(), "{answer}");
    assert_eq!(answer["outputs"]["docs"]["type"], "cosmosDB", "{answer}");
    assert_eq!(
        answer["outputs"]["docs"]["values"].as_array().map(Vec::len),
        Some(1),
        "one item for invoke's one sample event: {answer}"
    );
    assert_eq!(
        answer["outputs"]["$return"]["type"], "serviceBus",
        "{answer}"
    );
    assert!(
        outbox_lines(root, "Fan", "docs").is_empty(),
        "invoke writes nothing to the outbox"
    );
    // invoke calls the HTTP function as the host wraps its request, and shows the response the
    // client would get; and fires the timer once, as the host's admin API does.
    let invoke = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hubhost"))
            .args(["invoke"])
            .args(args)
            .args(["--app", "."])
            .current_dir(root)
            .output()
            .unwrap();
        let view: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (
            out.status.success(),
            view,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, view, said) = invoke(&["Health", "--path", "/api/Health?name=Ada"]);
    assert!(ok, "{view}\n{said}");
    assert_eq!(view["response"]["status"], 201, "{view}");
    assert_eq!(
        view["response"]["headers"]["x-function"], "Health",
        "{view}"
    );
    let echoed: Value = serde_json::from_str(view["response"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["method"], "GET", "{echoed}");
    assert_eq!(echoed["query"]["name"], "Ada", "{echoed}");
    let (ok, view, said) = invoke(&["Health", "--method", "POST"]);
    assert!(
        !ok && said.contains("takes GET, not POST"),
        "{view}\n{said}"
    );
    let (ok, view, said) = invoke(&["Tick"]);
    assert!(ok, "{view}\n{said}");
    assert_eq!(view["succeeded"], true, "{view}");
    let fired = records(root)
        .into_iter()
        .find(|r| r["function"] == "Tick")
        .unwrap_or_else(|| panic!("Tick was not invoked: {view}"));
    assert_eq!(fired["timer"]["IsPastDue"], false, "{fired}");
    assert!(
        fired["timer"]["ScheduleStatus"]["Next"].is_string(),
        "{fired}"
    );
    let (ok, _, said) = invoke(&["Work"]);
    assert!(!ok && said.contains("queueTrigger"), "{said}");

    // The handler's record of those invocations, which are not the hub's.
    std::fs::remove_file(root.join("record")).unwrap();

    let mut emulate = Emulate::start_with(
        root,
        &["--metrics-port", "0", "--http-port", "0"],
        &[("OUTPUT_PER_EVENT", "docs,$return")],
    );
    wait_records(root, &emulate, "Fan gets the 10 events", |r| {
        events_of(r, "Fan") >= 10
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while outbox_lines(root, "Fan", "$return").len() < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    // The HTTP function, as the host calls it: the request in Data.req, the answer's `res`.
    let base = served_at(&emulate.output(), "Health");
    let (status, headers, body) = kit::http_request(&base, "GET", "?name=Ada+L&name=B", "");
    assert_eq!(status, 201, "{headers}\n{body}");
    assert!(
        headers.to_ascii_lowercase().contains("x-function: health"),
        "{headers}"
    );
    let echoed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echoed["method"], "GET", "{echoed}");
    assert_eq!(echoed["query"]["name"], "Ada L,B", "{echoed}");
    assert_eq!(echoed["metadataQuery"]["name"], "Ada L,B", "{echoed}");
    assert!(
        echoed["url"]
            .as_str()
            .unwrap()
            .ends_with("/api/Health?name=Ada+L&name=B"),
        "{echoed}"
    );
    // Not a method it lists: no function serves it.
    let (status, _, body) = kit::http_request(&base, "POST", "", "{}");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("\"error\""), "{body}");

    // The timer function, every second, with the TimerInfo the extension builds.
    wait_records(root, &emulate, "Tick fires twice", |r| {
        r.iter().filter(|r| r["function"] == "Tick").count() >= 2
    });
    let ticks: Vec<Value> = records(root)
        .into_iter()
        .filter(|r| r["function"] == "Tick")
        .collect();
    let timer = &ticks[0]["timer"];
    assert_eq!(timer["Schedule"]["AdjustForDST"], true, "{timer}");
    assert_eq!(timer["IsPastDue"], false, "{timer}");
    assert!(timer["ScheduleStatus"]["Next"].is_string(), "{timer}");
    // A second instance of the app: as on Azure, the timer still fires on one instance only.
    let mut second = Emulate::start_writing(
        "second.out",
        root,
        &["--http-port", "0"],
        &[("OUTPUT_PER_EVENT", "docs,$return")],
    );
    let before = ticks.len();
    wait_records(root, &second, "Tick fires three more times", |r| {
        r.iter().filter(|r| r["function"] == "Tick").count() >= before + 3
    });
    let pids: std::collections::BTreeSet<i64> = records(root)
        .iter()
        .filter(|r| r["function"] == "Tick")
        .map(|r| r["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(pids.len(), 1, "one handler fires the timer: {pids:?}");
    let status = second.terminate();
    assert!(status.success(), "{status}\n{}", second.output());

    // /metrics counts the items of each output binding.
    let page = metrics_page(&emulate.output());
    let samples = hubhost_metrics::parse(&page).unwrap();
    for binding in ["docs", "$return"] {
        let kept = hubhost_metrics::sum(
            &samples,
            "hubhost_output_items_total",
            &[("function", "Fan"), ("binding", binding)],
        );
        assert_eq!(kept, 10.0, "{binding}:\n{page}");
    }
    let status = emulate.terminate();
    assert!(status.success(), "{status}\n{}", emulate.output());

    let expected: BTreeMap<String, usize> = (0..10).map(|seq| (format!("1-{seq}"), 1)).collect();
    let docs = outbox_lines(root, "Fan", "docs");
    assert_eq!(ids(&docs), expected, "each document once: {docs:?}");
    let orders = outbox_lines(root, "Fan", "$return");
    assert_eq!(ids(&orders), expected, "each message once: {orders:?}");
    for line in docs.iter().chain(&orders) {
        assert_eq!(line["function"], "Fan");
        assert_eq!(line["partitionId"], "1");
        let seq = line["value"]["seq"].as_i64().unwrap();
        let (first, last) = (
            line["firstSequenceNumber"].as_i64().unwrap(),
            line["lastSequenceNumber"].as_i64().unwrap(),
        );
        assert!(first <= seq && seq <= last, "{line}");
        assert!(!line["invocationId"].as_str().unwrap().is_empty(), "{line}");
    }
    assert_eq!(docs[0]["type"], "cosmosDB");
    assert_eq!(orders[0]["type"], "serviceBus");

    let output = emulate.output();
    for said in [
        "Fan's output 'docs' (cosmosDB) is not carried out here",
        "hubhost-data/outbox/Fan/docs.jsonl",
        "Fan's output '$return' (serviceBus) is not carried out here",
        "Tick ← timer \"* * * * * *\" (UTC)",
        // A timer function's kept output is named too, not only an Event Hubs function's.
        "Tick's output 'audit' (serviceBus) is not carried out here",
        "Work (queueTrigger) is not run",
        // Where it is kinder than Azure, and the flag for Azure's rule.
        "kinder than Azure: a batch the handler gives no answer to",
        "--azure-rules for Azure's rule",
    ] {
        assert!(output.contains(said), "{said:?} not in:\n{output}");
    }

    // --strict-bindings: the app is refused, naming the binding.
    let refused = kit::without_test_run_env(&mut Command::new(env!("CARGO_BIN_EXE_hubhost")))
        .args([
            "emulate",
            "--app",
            ".",
            "--storage",
            "storage",
            "--strict-bindings",
        ])
        .current_dir(root)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("function Fan: binding 'docs' (cosmosDB)")
            && said.contains("--strict-bindings"),
        "{said}"
    );
}

/// What the official Python Storage SDKs read back: `queue` messages (decoded from base64) or
/// `table` entities.
fn read_back(what: &str, connection: &str, name: &str) -> Vec<Value> {
    let read = kit::python_json("storage_peer.py", &[what, connection, name]);
    let key = if what == "queue" {
        "messages"
    } else {
        "entities"
    };
    read[key].as_array().cloned().unwrap_or_default()
}

#[test]
fn queue_and_table_outputs_are_carried_out_on_azurite_and_read_back_by_the_sdks() {
    kit::require!(kit::Tool::Azurite, kit::Tool::PythonSdk);
    let hub = Hub::start_serving_hubs(&["sensors:2"]);
    let sent = hub.python("send-to", &["0", "10", "reading"]);
    assert_eq!(sent["sent"], 10, "{sent}");
    let azurite = kit::Azurite::start_all();
    let storage = azurite.connection_string();

    let mut fan = function("sensors", "HubConnection", "many");
    let bindings = fan["bindings"].as_array_mut().unwrap();
    // The queue's name is lowercased, as the extension does; the table's keys: the binding's
    // partition key, each item's own RowKey.
    bindings.push(json!({"type": "queue", "direction": "out", "name": "q",
        "queueName": "%QueueName%", "connection": "AzureWebJobsStorage"}));
    bindings.push(json!({"type": "table", "direction": "out", "name": "t",
        "tableName": "readings", "partitionKey": "homes"}));
    bindings.push(
        json!({"type": "cosmosDB", "direction": "out", "name": "docs",
        "databaseName": "homes", "containerName": "readings", "connection": "CosmosDB"}),
    );
    let dir = app("", "", &[("Fan", fan)]);
    let root = dir.path();
    local_settings(
        root,
        json!({
            "HubConnection": format!("{}EntityPath=sensors", hub.connection_string(KEY)),
            "AzureWebJobsStorage": storage,
            "QueueName": "Readings-Out",
        }),
    );
    let env = [("OUTPUT_PER_EVENT", "q,t,docs"), ("OUTPUT_ROW_KEY", "1")];
    // The app's storage is Azurite: its checkpoints, queues and tables there.
    let mut emulate = Emulate::start_on_the_apps_storage(
        root,
        &["--metrics-port", "0", "--http-port", "0"],
        &env,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while outbox_lines(root, "Fan", "docs").len() < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let page = metrics_page(&emulate.output());
    let samples = hubhost_metrics::parse(&page).unwrap();
    for binding in ["q", "t", "docs"] {
        let items = hubhost_metrics::sum(
            &samples,
            "hubhost_output_items_total",
            &[("function", "Fan"), ("binding", binding)],
        );
        assert_eq!(items, 10.0, "{binding}:\n{page}");
    }
    let status = emulate.terminate();
    let output = emulate.output();
    assert!(status.success(), "{status}\n{output}");

    let expected: BTreeMap<String, usize> = (0..10).map(|seq| (format!("0-{seq}"), 1)).collect();
    let count = |values: &[Value]| -> BTreeMap<String, usize> {
        let mut counted = BTreeMap::new();
        for value in values {
            let id = value["id"].as_str().unwrap_or_else(|| panic!("{value}"));
            *counted.entry(id.to_string()).or_insert(0) += 1;
        }
        counted
    };
    // Each message once, in base64 of the item's JSON as Newtonsoft indents it.
    let texts = read_back("queue", &storage, "readings-out");
    let messages: Vec<Value> = texts
        .iter()
        .map(|t| {
            let text = t.as_str().unwrap();
            assert!(
                text.starts_with("{\n  \""),
                "indented as the host writes it: {text:?}"
            );
            serde_json::from_str(text).unwrap()
        })
        .collect();
    assert_eq!(count(&messages), expected, "{messages:?}");
    // Each entity once, under the binding's partition key, its integers as Edm.Int64.
    let entities = read_back("table", &storage, "readings");
    for entity in &entities {
        assert_eq!(entity["PartitionKey"], "homes", "{entity}");
        assert_eq!(entity["RowKey"], entity["id"], "{entity}");
        assert!(
            entity["seq"].get("int64").is_some(),
            "an integer is an Edm.Int64, as the extension writes it: {entity}"
        );
    }
    assert_eq!(count(&entities), expected, "{entities:?}");
    // And the cosmosDB documents in the outbox, each once.
    assert_eq!(ids(&outbox_lines(root, "Fan", "docs")), expected);

    assert!(
        output.contains("Fan's output 'docs' (cosmosDB) is not carried out here"),
        "{output}"
    );
    for carried in ["'q' (queue)", "'t' (table)"] {
        assert!(
            !output.contains(&format!("output {carried} is not carried out")),
            "{carried} is carried out:\n{output}"
        );
    }
}

#[test]
fn queue_and_table_outputs_without_a_storage_account_go_to_the_outbox_saying_why() {
    let hub = Hub::start_serving_hubs(&["sensors:2"]);
    let sent = hub.python("send-to", &["1", "4", "reading"]);
    assert_eq!(sent["sent"], 4, "{sent}");
    let mut fan = function("sensors", "HubConnection", "many");
    let bindings = fan["bindings"].as_array_mut().unwrap();
    bindings.push(json!({"type": "queue", "direction": "out", "name": "q", "queueName": "out"}));
    let dir = app("", "", &[("Fan", fan)]);
    let root = dir.path();
    local_settings(
        root,
        json!({"HubConnection": format!("{}EntityPath=sensors", hub.connection_string(KEY))}),
    );
    let mut emulate =
        Emulate::start_with(root, &["--http-port", "0"], &[("OUTPUT_PER_EVENT", "q")]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while outbox_lines(root, "Fan", "q").len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = emulate.terminate();
    let output = emulate.output();
    assert!(status.success(), "{status}\n{output}");
    let expected: BTreeMap<String, usize> = (0..4).map(|seq| (format!("1-{seq}"), 1)).collect();
    assert_eq!(ids(&outbox_lines(root, "Fan", "q")), expected);
    assert!(
        output.contains("Fan's output 'q' (queue) is not carried out here, as its connection names no storage account"),
        "{output}"
    );
}

#[test]
fn a_blob_input_named_by_the_partition_key_gives_each_invocation_that_blobs_content() {
    kit::require!(kit::Tool::Azurite, kit::Tool::PythonSdk);
    let hub = Hub::start_serving_hubs(&["sensors:2"]);
    let azurite = kit::Azurite::start();
    let storage = azurite.connection_string();
    // The reference blobs, written by the official SDK: one JSON, one text; home-3 has none.
    let limits = r#"{"home": "home-1", "limit": 30}"#;
    for (name, text) in [("home-1.json", limits), ("home-2.json", "plain \"text\" é")] {
        let put = kit::python_json(
            "storage_peer.py",
            &["blob-put", &storage, "refs", name, text],
        );
        assert_eq!(put["written"], format!("refs/{name}"), "{put}");
    }
    for (key, bodies) in [
        ("home-1", &["a", "b"][..]),
        ("home-2", &["c"]),
        ("home-3", &["d"]),
    ] {
        let mut args = vec![key];
        args.extend_from_slice(bodies);
        let sent = hub.python("send-keyed", &args);
        assert_eq!(sent["sent"], bodies.len(), "{sent}");
    }

    let mut look = function("sensors", "HubConnection", "one");
    let bindings = look["bindings"].as_array_mut().unwrap();
    bindings.push(json!({"type": "blob", "direction": "in", "name": "ref",
        "path": "%RefContainer%/{PartitionKey}.json", "connection": "AzureWebJobsStorage"}));
    bindings.push(json!({"type": "blob", "direction": "in", "name": "raw",
        "path": "refs/{partitionKey}.json", "dataType": "binary"}));
    let dir = app("", "", &[("Look", look)]);
    let root = dir.path();
    local_settings(
        root,
        json!({
            "HubConnection": format!("{}EntityPath=sensors", hub.connection_string(KEY)),
            "AzureWebJobsStorage": storage,
            "RefContainer": "refs",
        }),
    );

    // invoke reads the input as emulate does, and shows what the host sent.
    std::fs::write(
        root.join("events.json"),
        r#"[{"body": "x", "partitionKey": "home-1"}]"#,
    )
    .unwrap();
    let invoked = Command::new(env!("CARGO_BIN_EXE_hubhost"))
        .args(["invoke", "Look", "--app", ".", "--events", "events.json"])
        .current_dir(root)
        .output()
        .unwrap();
    let answer: Value = serde_json::from_slice(&invoked.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&invoked.stderr)));
    assert!(invoked.status.success(), "{answer}");
    let answer = if answer.is_array() {
        answer[0].clone()
    } else {
        answer
    };
    assert_eq!(
        answer["inputs"]["ref"],
        Value::String(Value::String(limits.into()).to_string()),
        "a string input is JSON text in a string, as the host writes it: {answer}"
    );
    std::fs::remove_file(root.join("record")).unwrap();

    let mut emulate = Emulate::start_on_the_apps_storage(root, &["--http-port", "0"], &[]);
    wait_records(root, &emulate, "Look gets the 4 events", |r| {
        events_of(r, "Look") >= 4
    });
    let status = emulate.terminate();
    assert!(status.success(), "{status}\n{}", emulate.output());
    let b64 = |text: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(text)
    };
    let as_sent = |text: &str| Value::String(Value::String(text.into()).to_string());
    let mut seen = BTreeMap::new();
    for record in records(root).iter().filter(|r| r["function"] == "Look") {
        let key = record["key"].as_str().unwrap_or_else(|| panic!("{record}"));
        let inputs = &record["inputs"];
        let (text, binary) = match key {
            "home-1" => (as_sent(limits), json!(b64(limits))),
            "home-2" => (as_sent("plain \"text\" é"), json!(b64("plain \"text\" é"))),
            // No blob: the host's text for a value it does not have.
            _ => (json!("null"), json!("null")),
        };
        assert_eq!(inputs["ref"], text, "{key}: {record}");
        assert_eq!(inputs["raw"], binary, "{key}: {record}");
        *seen.entry(key.to_string()).or_insert(0) += 1;
    }
    assert_eq!(
        seen,
        BTreeMap::from([
            ("home-1".to_string(), 2),
            ("home-2".to_string(), 1),
            ("home-3".to_string(), 1)
        ])
    );
}

#[test]
fn a_failing_timer_firing_is_retried_as_its_retry_policy_says_then_given_up() {
    kit::require!(kit::Tool::PythonSdk);
    // Fires once at start (and next on the hour); its retry policy allows two retries, a
    // second apart. On Azure a timer function's retry policy applies as an Event Hubs
    // function's does.
    let flaky = json!({
        "bindings": [{"type": "timerTrigger", "direction": "in", "name": "timer",
            "schedule": "0 0 * * * *", "runOnStartup": true}],
        "retry": {"strategy": "fixedDelay", "maxRetryCount": 2, "delayInterval": "00:00:01"}});
    let dir = app("", "", &[("Flaky", flaky)]);
    let root = dir.path();
    local_settings(root, json!({}));
    // invoke fires it once as the host's admin API does: the first attempt of a function with
    // a retry policy carries its RetryContext.
    let invoked = Command::new(env!("CARGO_BIN_EXE_hubhost"))
        .args(["invoke", "Flaky", "--app", "."])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        invoked.status.success(),
        "{}",
        String::from_utf8_lossy(&invoked.stderr)
    );
    let first = records(root);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0]["retry"]["RetryCount"], 0, "{first:?}");
    assert_eq!(first[0]["retry"]["MaxRetryCount"], 2, "{first:?}");
    std::fs::remove_file(root.join("record")).unwrap();
    let mut emulate =
        Emulate::start_with(root, &["--http-port", "0"], &[("FAIL_FUNCTION", "Flaky")]);
    let attempts = |r: &[Value]| r.iter().filter(|r| r["function"] == "Flaky").count();
    wait_records(root, &emulate, "the firing and its two retries", |r| {
        attempts(r) >= 3
    });
    // The policy is spent: no fourth attempt comes after the next delay.
    std::thread::sleep(Duration::from_millis(2500));
    let status = emulate.terminate();
    assert!(status.success(), "{status}\n{}", emulate.output());
    let fired: Vec<Value> = records(root)
        .into_iter()
        .filter(|r| r["function"] == "Flaky")
        .collect();
    assert_eq!(fired.len(), 3, "{fired:#?}\n{}", emulate.output());
    for (n, attempt) in fired.iter().enumerate() {
        let retry = &attempt["retry"];
        assert_eq!(retry["RetryCount"], n, "{attempt}");
        assert_eq!(retry["MaxRetryCount"], 2, "{attempt}");
        // The host passes the previous attempt's failure to the next.
        assert_eq!(retry["Exception"].is_null(), n == 0, "{attempt}");
    }
    let output = emulate.output();
    assert!(output.contains("no retries left"), "{output}");
}

#[test]
fn a_timer_firing_past_function_timeout_fails_restarts_the_handler_and_is_retried() {
    kit::require!(kit::Tool::PythonSdk);
    // Its first firing outlives host.json's functionTimeout: as on Azure, that attempt fails
    // with the host's timeout, the handler is restarted, and the retry policy tries again.
    let slow = json!({
        "bindings": [{"type": "timerTrigger", "direction": "in", "name": "timer",
            "schedule": "0 0 * * * *", "runOnStartup": true}],
        "retry": {"strategy": "fixedDelay", "maxRetryCount": 1, "delayInterval": "00:00:01"}});
    let dir = app(r#""functionTimeout": "00:00:02","#, "", &[("Slow", slow)]);
    let root = dir.path();
    local_settings(root, json!({}));
    let mut emulate = Emulate::start_with(
        root,
        &["--http-port", "0"],
        &[("SLOW_FUNCTION", "Slow"), ("SLOW_SECONDS", "30")],
    );
    wait_records(root, &emulate, "the retry after the timeout", |r| {
        r.iter().any(|r| r["function"] == "Slow")
    });
    let status = emulate.terminate();
    assert!(status.success(), "{status}\n{}", emulate.output());
    let fired: Vec<Value> = records(root)
        .into_iter()
        .filter(|r| r["function"] == "Slow")
        .collect();
    // The first attempt never answered (its handler was stopped): only the retry recorded.
    assert_eq!(fired.len(), 1, "{fired:#?}\n{}", emulate.output());
    assert_eq!(fired[0]["retry"]["RetryCount"], 1, "{fired:?}");
    let exception = fired[0]["retry"]["Exception"].to_string();
    assert!(
        exception.contains("Timeout value of 00:00:02 was exceeded by function: Functions.Slow"),
        "{exception}"
    );
    let output = emulate.output();
    assert!(output.contains("restarting the custom handler"), "{output}");
    // Two handler processes: the first, stopped at the timeout, and its replacement.
    let pids = std::fs::read_to_string(root.join("pids")).unwrap();
    assert_eq!(pids.lines().count(), 2, "{pids}\n{output}");
}

/// A function that fails every attempt under a policy that never gives up fails no batch: its
/// attempts on `/metrics` and the progress line say what is happening, within seconds.
#[test]
fn a_function_failing_every_attempt_shows_on_metrics_and_the_progress_line() {
    kit::require!(kit::Tool::PythonSdk);
    let hub = Hub::start_serving_hubs(&["sensors:2"]);
    let mut stuck = function("sensors", "HubConnection", "many");
    stuck["retry"] = json!({"strategy": "fixedDelay", "maxRetryCount": -1,
        "delayInterval": "00:00:01"});
    let dir = app("", "", &[("Stuck", stuck)]);
    let root = dir.path();
    local_settings(root, json!({"HubConnection": hub.connection_string(KEY)}));
    let sent = hub.python("send-to", &["1", "3", "poison"]);
    assert_eq!(sent["sent"], 3, "{sent}");
    let emulate = Emulate::start_with(
        root,
        &["--metrics-port", "0"],
        &[("FAIL_FUNCTION", "Stuck")],
    );
    wait_records(root, &emulate, "three attempts", |r| r.len() >= 3);
    let started = Instant::now();
    let sample = |page: &str, name: &str, labels: &[(&str, &str)]| {
        hubhost_metrics::parse(page)
            .unwrap()
            .into_iter()
            .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
            .map(|s| s.value)
    };
    let page = metrics_page(&emulate.output());
    assert!(
        sample(
            &page,
            "hubhost_invocation_attempts_total",
            &[("function", "Stuck"), ("outcome", "failed")]
        )
        .is_some_and(|n| n >= 3.0),
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            "hubhost_invocation_attempts_total",
            &[("function", "Stuck"), ("outcome", "succeeded")]
        ),
        Some(0.0),
        "{page}"
    );
    assert!(
        sample(
            &page,
            "hubhost_invocation_retries_total",
            &[("function", "Stuck")]
        )
        .is_some_and(|n| n >= 2.0),
        "{page}"
    );
    assert!(
        sample(
            &page,
            "hubhost_retrying_batch_age_seconds",
            &[("function", "Stuck"), ("partition", "1")]
        )
        .is_some_and(|age| age > 0.0),
        "{page}"
    );
    // The batch fails no batch: the old counters alone would show nothing wrong.
    assert_eq!(
        sample(
            &page,
            "hubhost_batches_failed_total",
            &[("function", "Stuck")]
        ),
        Some(0.0),
        "{page}"
    );
    // The progress line (every 5 s without a terminal) names the partition and the error.
    loop {
        let output = emulate.output();
        if output.contains("Stuck retrying partition 1 for") {
            assert!(output.contains("500"), "{output}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "{output}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

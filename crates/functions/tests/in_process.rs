//! A function tested in-process: called directly with a hand-built batch and its context, and
//! through the host contract with `HostHarness` (encoded as the host encodes it for the
//! declaration, through the server's routes, the answer read as the host reads it).

use std::sync::atomic::{AtomicUsize, Ordering};

use hubhost_functions::counters::CounterFamily;
use hubhost_functions::function_app::{
    BindingSpec, Cardinality, DataType, EventHubTrigger, FunctionSpec, Trigger,
};
use hubhost_functions::prelude::*;
use hubhost_functions::testing::HostHarness;
use hubhost_functions::timer::ScheduleStatus;
use serde_json::json;

const REJECTED: CounterFamily = CounterFamily {
    key: "rejected",
    name: "test_rejected_total",
    help: "events set aside",
};

/// Forwards readings of type `alarm`, sets aside what is not JSON, and fails as told by the
/// event's `fail` property; it logs what it saw of the invocation through the context.
struct Triage {
    panics: AtomicUsize,
}

#[async_trait]
impl EventHubFunction for Triage {
    async fn run(
        &self,
        batch: TriggerBatch,
        context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        context.log(format!(
            "invocation {} of {} on partition {}",
            context.invocation_id(),
            context.function_name(),
            context.partition().partition_id
        ));
        if let Some(retry) = context.retry() {
            context.log(format!(
                "retry {} of {}, after: {}",
                retry.retry_count,
                retry.max_retry_count,
                retry.last_error().unwrap_or("-")
            ));
        }
        let mut output = FunctionOutput::default();
        for event in &batch.events {
            match event.properties.get("fail").and_then(|v| v.as_str()) {
                Some("bad") => {
                    return Err(FunctionError::BadRequest {
                        code: "told_to_refuse",
                        message: "the event asked for it".into(),
                    });
                }
                Some("later") => {
                    return Err(FunctionError::Failed {
                        code: "storage_unavailable",
                        message: "try again".into(),
                    });
                }
                Some("panic") => {
                    self.panics.fetch_add(1, Ordering::Relaxed);
                    panic!("the event asked for a panic");
                }
                _ => {}
            }
            match event.json::<serde_json::Value>() {
                Ok(reading) if reading["type"] == "alarm" => {
                    output.send_event_json("alarms", &reading).unwrap();
                }
                Ok(_) => {}
                Err(e) => {
                    context.count("rejected", 1);
                    output.dead_letter("poison", &batch.partition, event, e.to_string());
                }
            }
        }
        Ok(output)
    }
}

fn triage() -> Triage {
    Triage {
        panics: AtomicUsize::new(0),
    }
}

fn declaration(cardinality: Cardinality, data_type: DataType) -> FunctionSpec {
    FunctionSpec {
        name: "Triage".into(),
        trigger: Trigger::EventHub(EventHubTrigger {
            binding_name: "readings".into(),
            event_hub_name: "sensors".into(),
            consumer_group: "$Default".into(),
            cardinality,
            data_type,
            connection: None,
        }),
        retry: None,
        bindings: vec![
            BindingSpec::event_hub_output("alarms", "alarms", "EventHubConnection"),
            BindingSpec::blob_output("poison", "deadletter/{rand-guid}.json", None),
        ],
    }
}

fn harness(cardinality: Cardinality, data_type: DataType) -> HostHarness {
    let server = FunctionServer::builder()
        .counters(&[REJECTED])
        .event_hub_function(declaration(cardinality, data_type), triage())
        .build(None)
        .unwrap();
    HostHarness::new(server)
}

#[tokio::test]
async fn a_direct_call_sees_the_batch_and_its_context() {
    let batch = TriggerBatch::builder("Triage")
        .partition("5")
        .retry(2, 3)
        .last_error("storage down")
        .json(&json!({"type": "alarm", "home": 1}))
        .text("not json")
        .build();
    let context = FunctionContext::for_batch_counting(&batch, &[REJECTED], &[]);
    let output = triage().run(batch, &context).await.unwrap();

    assert_eq!(
        output.outputs["alarms"],
        json!([r#"{"home":1,"type":"alarm"}"#])
    );
    let poison = FunctionOutput::dead_letters(&output.outputs["poison"]);
    assert_eq!(poison.len(), 1);
    assert_eq!(poison[0]["body"], "not json");
    assert_eq!(poison[0]["partitionId"], "5");
    assert_eq!(context.counted("rejected"), 1);
    let logs = context.logs();
    assert!(logs[0].ends_with("of Triage on partition 5"), "{logs:?}");
    assert_eq!(logs[1], "retry 2 of 3, after: storage down");
}

#[tokio::test]
async fn through_the_host_contract_outputs_logs_and_failures_read_as_the_host_reads_them() {
    let harness = harness(Cardinality::Many, DataType::String);
    let batch = TriggerBatch::builder("Triage")
        .partition("2")
        .json(&json!({"type": "alarm", "home": 7}))
        .json(&json!({"type": "motion", "home": 7}))
        .text("{broken")
        .build();
    let answer = harness.invoke(&batch).await;
    assert!(answer.succeeded(), "{answer:?}");
    assert_eq!(
        answer.events_sent("alarms"),
        [r#"{"home":7,"type":"alarm"}"#]
    );
    let poison = answer.dead_letters("poison");
    assert_eq!(poison.len(), 1, "{poison:?}");
    assert_eq!(poison[0]["body"], "{broken");
    assert_eq!(poison[0]["sequenceNumber"], 2);
    // The invocation id the host sent reached the function, and its log line the answer.
    assert_eq!(answer.logs.len(), 1, "{:?}", answer.logs);
    let id = answer.logs[0]
        .strip_prefix("invocation ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap();
    assert!(uuid_like(id), "{id}");
    assert!(answer.logs[0].ends_with("of Triage on partition 2"));

    // Each failure as the host sees it: its status and code.
    for (fail, status, code) in [
        ("bad", 400, "told_to_refuse"),
        ("later", 500, "storage_unavailable"),
        ("panic", 500, "handler_panic"),
    ] {
        let batch = TriggerBatch::builder("Triage")
            .text("{}")
            .property("fail", fail)
            .build();
        let answer = harness.invoke(&batch).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (status, Some(code)),
            "{fail}: {answer:?}"
        );
        assert!(
            answer.outputs.is_empty(),
            "a failed invocation sends nothing"
        );
    }
    // The handler is still up after the panic.
    let batch = TriggerBatch::builder("Triage").text("{}").build();
    assert!(harness.invoke(&batch).await.succeeded());
}

#[tokio::test]
async fn the_declaration_decides_what_the_function_receives() {
    let body = vec![0xff, b'{', 0xfe];
    // dataType binary: the bytes arrive as they were sent, and are set aside as bytes.
    let binary = harness(Cardinality::Many, DataType::Binary);
    let batch = TriggerBatch::builder("Triage").bytes(body.clone()).build();
    let answer = binary.invoke(&batch).await;
    assert!(answer.succeeded(), "{answer:?}");
    let poison = answer.dead_letters("poison");
    assert_eq!(poison[0]["bodyBase64"], "/3v+");

    // Cardinality one: one event per invocation, with its retry context.
    let one = harness(Cardinality::One, DataType::String);
    let batch = TriggerBatch::builder("Triage")
        .retry(1, 5)
        .last_error("the handler answered 500")
        .json(&json!({"type": "alarm"}))
        .build();
    let answer = one.invoke(&batch).await;
    assert!(answer.succeeded(), "{answer:?}");
    assert_eq!(answer.events_sent("alarms"), [r#"{"type":"alarm"}"#]);
    assert_eq!(
        answer.logs[1],
        "retry 1 of 5, after: the handler answered 500"
    );
}

#[tokio::test]
async fn a_request_the_host_would_not_send_gets_a_named_error() {
    let harness = harness(Cardinality::Many, DataType::String);
    let answer = harness
        .post("Triage", br#"{"Metadata": {}}"#.to_vec())
        .await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.error_code(), Some("missing_data"), "{answer:?}");
    let answer = harness.post("Nobody", b"{}".to_vec()).await;
    assert_eq!(
        (answer.status, answer.error_code()),
        (404, Some("unknown_function"))
    );
}

fn uuid_like(id: &str) -> bool {
    id.len() == 36 && id.chars().filter(|c| *c == '-').count() == 4
}

/// Caps each reading at the limit a blob input gives (`refs/{PartitionKey}.json`), and says
/// when the blob is missing.
struct Capped;

#[async_trait]
impl EventHubFunction for Capped {
    async fn run(
        &self,
        batch: TriggerBatch,
        context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let bad = |e: hubhost_functions::inputs::InputError| FunctionError::BadRequest {
            code: "bad_input",
            message: e.to_string(),
        };
        let limits: Option<serde_json::Value> = batch.inputs.json("limits").map_err(bad)?;
        let Some(limits) = limits else {
            context.log("no limits for this home");
            return Ok(FunctionOutput::default());
        };
        context.log(format!("limit {}", limits["limit"]));
        Ok(FunctionOutput::default())
    }
}

#[tokio::test]
async fn the_harness_hands_a_function_its_inputs_as_the_host_does() {
    let harness = HostHarness::for_function("Capped", Capped, &[]);
    let with = TriggerBatch::builder("Capped")
        .text("21")
        .input_text("limits", Some(r#"{"limit": 30}"#))
        .build();
    let answer = harness.invoke(&with).await;
    assert!(answer.succeeded(), "{answer:?}");
    assert_eq!(answer.logs, ["limit 30"]);
    let without = TriggerBatch::builder("Capped")
        .text("21")
        .input_text("limits", None)
        .build();
    assert_eq!(
        harness.invoke(&without).await.logs,
        ["no limits for this home"]
    );
    // A binary input read as text is the function's error, named.
    let binary = TriggerBatch::builder("Capped")
        .text("21")
        .input_bytes("limits", Some(&[0, 255]))
        .build();
    let answer = harness.invoke(&binary).await;
    assert_eq!(answer.status, 400, "{answer:?}");
}

/// A periodic report: the report blob it is given (a blob input), and one queue message saying
/// whether the firing was late.
struct Report;

#[async_trait]
impl TimerFunction for Report {
    async fn run(&self, timer: TimerInfo) -> Result<FunctionOutput, FunctionError> {
        let last = timer
            .inputs
            .text("previous")
            .map_err(|e| FunctionError::BadRequest {
                code: "bad_input",
                message: e.to_string(),
            })?;
        let status = timer.schedule_status.as_ref().map_or(0, |s| {
            s.next.map_or(0, |next| (next - s.last).num_seconds())
        });
        let mut output = FunctionOutput::default();
        output.log(format!(
            "previous report: {}",
            last.as_deref().unwrap_or("none")
        ));
        output.put_queue_message(
            "reports",
            format!("past due {}, every {status} s", timer.is_past_due),
        );
        Ok(output)
    }
}

/// Answers with the item a blob input read for the route's `{id}`.
struct Item;

#[async_trait]
impl HttpFunction for Item {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, FunctionError> {
        match request.inputs.text("item") {
            Ok(Some(item)) => Ok(HttpResponse::text(200, item)),
            Ok(None) => Ok(HttpResponse::text(
                404,
                format!("no item {}", request.params["id"]),
            )),
            Err(e) => Err(FunctionError::BadRequest {
                code: "bad_input",
                message: e.to_string(),
            }),
        }
    }
}

#[tokio::test]
async fn timer_and_http_functions_declared_by_the_app_folder_run_as_the_host_calls_them() {
    let app = tempfile::tempdir().unwrap();
    std::fs::write(app.path().join("host.json"), r#"{"version": "2.0"}"#).unwrap();
    let declare = |name: &str, function: serde_json::Value| {
        std::fs::create_dir(app.path().join(name)).unwrap();
        std::fs::write(
            app.path().join(name).join("function.json"),
            function.to_string(),
        )
        .unwrap();
    };
    declare(
        "Report",
        json!({"bindings": [
            {"type": "timerTrigger", "direction": "in", "name": "tick", "schedule": "0 */5 * * * *"},
            {"type": "blob", "direction": "in", "name": "previous", "path": "reports/last.txt"},
            {"type": "queue", "direction": "out", "name": "reports", "queueName": "reports"}]}),
    );
    declare(
        "Item",
        json!({"bindings": [
            {"type": "httpTrigger", "direction": "in", "name": "request", "route": "items/{id}"},
            {"type": "blob", "direction": "in", "name": "item", "path": "items/{id}.json"},
            {"type": "http", "direction": "out", "name": "response"}]}),
    );
    let server = FunctionServer::builder()
        .timer_function("Report", Report)
        .http_function("Item", Item)
        .build(Some(app.path()))
        .unwrap();
    let harness = HostHarness::new(server);

    // The timer's binding is `tick` here, not the default `myTimer`: the harness sends it
    // under the declared name, with the schedule's status and the input beside it.
    let now = chrono::Utc::now();
    let mut late = TimerInfo {
        is_past_due: true,
        schedule_status: Some(ScheduleStatus {
            last: now,
            next: Some(now + chrono::Duration::minutes(5)),
            last_updated: now,
        }),
        ..TimerInfo::default()
    };
    late.inputs.set_text("previous", Some("Monday's"));
    let answer = harness.invoke_timer("Report", &late).await;
    assert!(answer.succeeded(), "{answer:?}");
    assert_eq!(answer.logs, ["previous report: Monday's"]);
    assert_eq!(
        answer.queue_messages("reports"),
        ["past due true, every 300 s"]
    );
    // A first report has none before it: the input has no value.
    let mut first = TimerInfo::default();
    first.inputs.set_text("previous", None);
    let answer = harness.invoke_timer("Report", &first).await;
    assert!(answer.succeeded(), "{answer:?}");
    assert_eq!(answer.logs, ["previous report: none"]);

    // The HTTP function's request under its declared binding, with the route's parameter and
    // the blob input the host read for it.
    let mut request = HttpRequest {
        method: "GET".into(),
        ..HttpRequest::default()
    };
    request.params.insert("id".into(), "7".into());
    request.inputs.set_text("item", Some(r#"{"id": 7}"#));
    let answer = harness.invoke_http("Item", &request).await;
    let response = answer.http_response("response").expect("a response");
    assert_eq!(
        (response.status, response.body.as_str()),
        (200, r#"{"id": 7}"#)
    );
    request.inputs.set_text("item", None);
    let answer = harness.invoke_http("Item", &request).await;
    let response = answer.http_response("response").expect("a response");
    assert_eq!(
        (response.status, response.body.as_str()),
        (404, "no item 7")
    );
}

/// Writes its summary under a name that is one letter off the declared one.
struct Typo;

#[async_trait]
impl EventHubFunction for Typo {
    async fn run(
        &self,
        batch: TriggerBatch,
        _context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let mut output = FunctionOutput::default();
        output.send_event_text("summary", format!("{} events", batch.events.len()));
        output.send_event_text("summry", "lost on Azure");
        Ok(output)
    }
}

#[tokio::test]
async fn an_output_the_declaration_lacks_fails_the_invocation_naming_the_declared_ones() {
    let harness = HostHarness::for_function("Typo", Typo, &["summary"]);
    let batch = TriggerBatch::builder("Typo").text("a").text("b").build();
    let answer = harness.invoke(&batch).await;
    // The handler answered 200, as the host sees it; the harness fails it.
    assert_eq!(answer.status, 200);
    assert!(!answer.succeeded(), "{answer:?}");
    assert_eq!(answer.undeclared_outputs, ["summry"]);
    assert_eq!(answer.error_code(), Some("undeclared_output"));
    let (_, message) = answer.error.as_ref().unwrap();
    assert!(
        message.contains("\"summry\"") && message.contains("declared: summary"),
        "{message}"
    );
    // What the host does with the answer: the declared output, and nothing of the other.
    assert_eq!(answer.events_sent("summary"), ["2 events"]);
    assert!(answer.events_sent("summry").is_empty());
}

/// Where a test's `tracing` subscriber writes: a buffer the test reads back.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Logs through `tracing` rather than the context, and its invocation id through the context.
/// Only the test below calls it: a callsite another test hit first, on another thread with no
/// subscriber, could keep that test's view of it.
struct Chatty;

#[async_trait]
impl EventHubFunction for Chatty {
    async fn run(
        &self,
        batch: TriggerBatch,
        context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        context.log(format!("invocation {}", context.invocation_id()));
        tracing::info!(events = batch.events.len(), "chatty looking");
        Ok(FunctionOutput::default())
    }
}

#[tokio::test]
async fn a_functions_own_log_lines_name_the_function_and_its_invocation() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    // The test's runtime runs on this thread, the invocation's task too.
    let _default = tracing::subscriber::set_default(subscriber);
    let mut declaration = declaration(Cardinality::Many, DataType::String);
    declaration.name = "Chatty".into();
    let server = FunctionServer::builder()
        .event_hub_function(declaration, Chatty)
        .build(None)
        .unwrap();
    let batch = TriggerBatch::builder("Chatty").text("{}").build();
    let answer = HostHarness::new(server).invoke(&batch).await;
    assert!(answer.succeeded(), "{answer:?}");
    // The function logged its invocation id through the context too: the one the host sent.
    let id = answer.logs[0]
        .strip_prefix("invocation ")
        .unwrap()
        .to_string();
    assert!(uuid_like(&id), "{id}");
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("chatty looking"))
        .unwrap_or_else(|| panic!("no line of the function's: {text}"));
    assert!(
        line.contains("function=Chatty") && line.contains(&format!("invocation_id={id}")),
        "{line}"
    );
}

//! Traces from producer to outputs, with real peers: the official Python SDK with tracing on
//! (`azure-core-tracing-opentelemetry`) as the producer of readings and as the consumer of the
//! alarms they raise, the reference app under `hubhost emulate` exporting by the standard
//! `OTEL_*` settings, and an OTLP receiver built on OpenTelemetry's own protobuf definitions.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hubhost_testkit::{self as kit, Hub, KEY, KilledOnDrop, Tool};
use serde_json::{Value, json};

type Receiver = kit::OtlpReceiver;

fn spans<'a>(records: &'a [Value], service: &'a str) -> impl Iterator<Item = &'a Value> {
    Receiver::spans(records, service)
}

/// `tests/python/traced_peer.py` with tracing exported to `receiver` as `service`.
fn traced_peer(receiver: &Receiver, service: &str, hub: &Hub, args: &[&str]) -> Value {
    let out = kit::output_within(
        Command::new(kit::python())
            .arg(kit::repository().join("tests/python/traced_peer.py"))
            .arg(hub.connection_string(KEY))
            .args(args)
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{}", receiver.http),
            )
            .env("OTEL_SERVICE_NAME", service),
        kit::COMMAND_LIMIT,
    );
    kit::json_output(&format!("traced_peer.py {args:?}"), &out)
}

/// A copy of the reference app in `project/function_app`, with `values` added to its settings.
fn reference_app(project: &Path, values: &[(&str, String)]) {
    let app = project.join("function_app");
    kit::copy_dir(&kit::repository().join("function_app"), &app);
    let mut settings = json!({
        "FUNCTIONS_WORKER_RUNTIME": "custom",
        "EventHubName": "sensors",
        "AzureWebJobsStorage": "storage",
        "HUBHOST_CONTAINER": "hubhost",
        "HUBHOST_WINDOW_SECONDS": "60",
    });
    for (name, value) in values {
        settings[*name] = Value::from(value.as_str());
    }
    std::fs::write(
        app.join("local.settings.json"),
        json!({"IsEncrypted": false, "Values": settings}).to_string(),
    )
    .unwrap();
}

/// `PATH` with the workspace's executables first: the app's host.json names `hubhost-app`.
fn path_with_executables() -> String {
    let bin = kit::binary("hubhost-app");
    format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn reading(home: &str, state: &str) -> String {
    json!({
        "homeId": home,
        "sensorId": "smoke-1",
        "type": "smoke",
        "state": state,
        "ts": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
    .to_string()
}

/// A smoke alarm reading sent by the Python SDK with tracing on, the reference app's
/// invocation that raises the alarm, and the Python consumer that reads the alarm: one trace at
/// the receiver, the invocation linked to the reading's producer span, the alarm event stamped
/// so that the consumer continues the trace, and the app's metrics beside it. The handler
/// exports as on Azure (its settings name the endpoint); the emulated host exports only here.
#[test]
fn a_traced_reading_its_invocation_and_the_alarm_downstream_are_one_trace() {
    kit::require!(Tool::PythonSdk, Tool::OpenTelemetry);
    let chain = Chain::run(false);
    let invocation = &chain.invocation;
    assert_eq!(
        invocation["parent_span_id"], chain.message["span_id"],
        "a batch of one continues its producer's trace"
    );
    assert_eq!(
        chain.alarm_stamp,
        format!(
            "00-{}-{}-03",
            chain.trace_id,
            invocation["span_id"].as_str().unwrap()
        ),
        "the alarm carries the invocation's context"
    );
    assert_eq!(chain.downstream["parent_span_id"], invocation["span_id"]);
    assert_eq!(
        spans(&chain.receiver.records(), "hubhost-emulate").count(),
        0,
        "the emulated host exports only when its own environment says so"
    );
}

/// The same with the emulated host exporting too, as the Functions host does in its
/// OpenTelemetry mode: producer → the host's delivery → its request to the handler → the
/// function → the host's send of the alarm → the consumer, one trace.
#[test]
fn with_the_emulated_host_tracing_too_every_hop_is_one_trace() {
    kit::require!(Tool::PythonSdk, Tool::OpenTelemetry);
    let chain = Chain::run(true);
    let records = chain.receiver.records();
    let host: Vec<&Value> = spans(&records, "hubhost-emulate")
        .filter(|s| s["trace_id"] == chain.trace_id.as_str())
        .collect();
    // RawArchive reads the same reading: its spans share the trace.
    let named = |name: &str| {
        host.iter()
            .find(|s| {
                s["name"] == name
                    && (s["attributes"]["faas.name"].is_null()
                        || s["attributes"]["faas.name"] == "SensorAggregator")
            })
            .unwrap_or_else(|| panic!("no {name} span among {host:#?}"))
    };
    let delivery = named("process sensors");
    let attempt = named("invoke SensorAggregator");
    let send = named("send alarms");
    assert_eq!(delivery["parent_span_id"], chain.message["span_id"]);
    assert_eq!(delivery["attributes"]["faas.name"], "SensorAggregator");
    assert_eq!(attempt["parent_span_id"], delivery["span_id"]);
    assert_eq!(attempt["attributes"]["hubhost.retry_count"], 0);
    assert_eq!(chain.invocation["parent_span_id"], attempt["span_id"]);
    assert_eq!(send["parent_span_id"], chain.invocation["span_id"]);
    assert_eq!(send["kind"], 4, "SPAN_KIND_PRODUCER");
    assert!(
        chain
            .alarm_stamp
            .contains(send["span_id"].as_str().unwrap())
    );
    assert_eq!(chain.downstream["parent_span_id"], send["span_id"]);
    // The trigger's checkpoint after the batch, inside the delivery.
    let checkpoint = chain.receiver.wait_for("checkpoint span", |records| {
        spans(records, "hubhost-emulate")
            .find(|s| {
                s["name"] == "checkpoint sensors" && s["parent_span_id"] == delivery["span_id"]
            })
            .cloned()
    });
    assert_eq!(checkpoint["trace_id"], chain.trace_id.as_str());
    assert_eq!(checkpoint["attributes"]["hubhost.checkpoint.written"], true);
    assert_eq!(
        checkpoint["attributes"]["messaging.destination.partition.id"],
        delivery["attributes"]["messaging.destination.partition.id"]
    );

    // The hub's own spans: the reading enqueued and delivered (children of its producer's
    // span, as it is the only event), the alarm enqueued (a child of the send).
    let hub_span = |name: &'static str, parent: Value| {
        chain.receiver.wait_for(name, |records| {
            spans(records, "hubhost-hub")
                .find(|s| s["name"] == name && s["parent_span_id"] == parent)
                .cloned()
        })
    };
    let enqueued = hub_span("enqueue sensors", chain.message["span_id"].clone());
    assert_eq!(enqueued["trace_id"], chain.trace_id.as_str());
    assert_eq!(enqueued["kind"], 2, "SPAN_KIND_SERVER");
    assert_eq!(enqueued["attributes"]["messaging.batch.message_count"], 1);
    assert_eq!(
        enqueued["attributes"]["messaging.destination.partition.id"],
        delivery["attributes"]["messaging.destination.partition.id"]
    );
    assert!(enqueued["attributes"]["hubhost.sequence_number.first"].is_number());
    assert_eq!(enqueued["links"][0]["span_id"], chain.message["span_id"]);
    let delivered = hub_span("deliver sensors", chain.message["span_id"].clone());
    assert!(delivered["attributes"]["messaging.consumer.group.name"].is_string());
    let alarm_enqueued = hub_span("enqueue alarms", send["span_id"].clone());
    assert_eq!(alarm_enqueued["trace_id"], chain.trace_id.as_str());
    // And the downstream consumer's read of the alarm.
    hub_span("deliver alarms", send["span_id"].clone());
}

/// One run of the chain, and what the receiver got.
struct Chain {
    receiver: Receiver,
    trace_id: String,
    /// The producer's span for the reading (its id is the event's `Diagnostic-Id`).
    message: Value,
    /// The handler's span for the SensorAggregator invocation.
    invocation: Value,
    /// The alarm event's `Diagnostic-Id`.
    alarm_stamp: String,
    /// The downstream consumer's process span.
    downstream: Value,
}

impl Chain {
    fn run(emulate_exports: bool) -> Chain {
        let receiver = Receiver::start();
        let endpoint = format!("http://127.0.0.1:{}", receiver.http);
        // With every hop tracing, the hub does too (`hubhost hub --traces`).
        let hub = if emulate_exports {
            Hub::start_traced(&endpoint)
        } else {
            Hub::start(None)
        };
        let project = tempfile::tempdir().unwrap();
        reference_app(
            project.path(),
            &[
                ("EventHubConnection", hub.connection_string(KEY)),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
                ("OTEL_SERVICE_NAME", "reference-app".into()),
                ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
                ("OTEL_METRIC_EXPORT_INTERVAL", "500".into()),
            ],
        );
        let metrics_port = kit::free_port().to_string();
        let mut command = Command::new(kit::binary("hubhost"));
        command
            // The reference app's page on a free port: 7071 is other tests' to hold.
            .args([
                "emulate",
                "--app",
                "function_app",
                "--http-port",
                "0",
                "--metrics-port",
            ])
            .arg(&metrics_port)
            .current_dir(project.path())
            .env("PATH", path_with_executables())
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_SERVICE_NAME")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(project.path().join("emulate.log")).unwrap());
        if emulate_exports {
            command
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
                .env("OTEL_BSP_SCHEDULE_DELAY", "100")
                .env("OTEL_METRIC_EXPORT_INTERVAL", "500");
        }
        let mut emulate = KilledOnDrop(command.spawn().unwrap());

        let sent = traced_peer(
            &receiver,
            "producer",
            &hub,
            &["sensors", "send", &reading("home-00042", "alarm")],
        );
        let trace_id = sent["trace_id"].as_str().unwrap().to_string();
        let message = receiver.wait_for("producer message span", |records| {
            spans(records, "producer")
                .find(|s| s["name"] == "EventHubs.message" && s["trace_id"] == trace_id)
                .cloned()
        });
        let invocation = receiver.wait_for("SensorAggregator invocation span", |records| {
            spans(records, "reference-app")
                .find(|s| {
                    s["attributes"]["faas.name"] == "SensorAggregator" && s["trace_id"] == trace_id
                })
                .cloned()
        });
        let attributes = &invocation["attributes"];
        assert_eq!(invocation["name"], "SensorAggregator");
        assert_eq!(invocation["kind"], 5, "SPAN_KIND_CONSUMER");
        assert_eq!(
            invocation["links"],
            json!([{"trace_id": trace_id, "span_id": message["span_id"]}]),
            "linked to each producer"
        );
        for (name, value) in [
            ("faas.trigger", json!("pubsub")),
            ("messaging.system", json!("eventhubs")),
            ("messaging.operation.type", json!("process")),
            ("messaging.destination.name", json!("sensors")),
            ("messaging.consumer.group.name", json!("$Default")),
            ("messaging.batch.message_count", json!(1)),
            ("hubhost.retry_count", json!(0)),
        ] {
            assert_eq!(attributes[name], value, "{name}: {attributes:#}");
        }
        assert!(attributes["faas.invocation_id"].as_str().unwrap().len() >= 32);
        assert!(attributes["messaging.destination.partition.id"].is_string());
        assert!(attributes["hubhost.sequence_number.first"].is_number());

        // The alarm downstream, read by the Python SDK with tracing on.
        let alarms = traced_peer(
            &receiver,
            "downstream",
            &hub,
            &["alarms", "receive", "$Default", "1", "60"],
        );
        let alarm = &alarms[0];
        assert!(alarm["body"].as_str().unwrap().contains("home-00042"));
        let alarm_stamp = alarm["properties"]["Diagnostic-Id"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(alarm_stamp.starts_with(&format!("00-{trace_id}-")));
        assert_eq!(alarm["properties"]["traceparent"], alarm_stamp.as_str());
        let downstream = receiver.wait_for("downstream process span", |records| {
            spans(records, "downstream")
                .find(|s| s["name"] == "EventHubs.process")
                .cloned()
        });
        assert_eq!(downstream["trace_id"], trace_id.as_str());

        // The metrics, beside /metrics.
        let invocations = receiver.wait_for("faas.invocations", |records| {
            records
                .iter()
                .find(|r| {
                    r["type"] == "metric"
                        && r["service"] == "reference-app"
                        && r["name"] == "faas.invocations"
                        && r["attributes"]["faas.name"] == "SensorAggregator"
                })
                .cloned()
        });
        assert!(invocations["value"].as_i64().unwrap() >= 1);
        receiver.wait_for("messaging.client.consumed.messages", |records| {
            records
                .iter()
                .find(|r| {
                    r["name"] == "messaging.client.consumed.messages"
                        && r["attributes"]["messaging.consumer.group.name"] == "archive"
                })
                .cloned()
        });
        // The counters and histograms the app declares, as OpenTelemetry metrics too.
        let declared = |name: &'static str| {
            receiver.wait_for(name, |records| {
                records
                    .iter()
                    .find(|r| {
                        r["type"] == "metric"
                            && r["name"] == name
                            && r["attributes"]["faas.name"] == "SensorAggregator"
                            && r["value"].as_f64().is_some_and(|v| v >= 1.0)
                    })
                    .cloned()
            })
        };
        assert_eq!(declared("hubhost_handler_events_applied")["kind"], "sum");
        if emulate_exports {
            // The emulated host's invocation attempts by outcome, as on its /metrics.
            let attempts = receiver.wait_for("hubhost.invocation.attempts", |records| {
                records
                    .iter()
                    .find(|r| {
                        r["type"] == "metric"
                            && r["service"] == "hubhost-emulate"
                            && r["name"] == "hubhost.invocation.attempts"
                            && r["attributes"]["faas.name"] == "SensorAggregator"
                            && r["attributes"]["outcome"] == "succeeded"
                            && r["value"].as_i64().is_some_and(|v| v >= 1)
                    })
                    .cloned()
            });
            assert_eq!(attempts["kind"], "sum");
        }
        let age = declared("hubhost_handler_applied_age_seconds");
        assert_eq!(
            (age["kind"].as_str(), age["unit"].as_str()),
            (Some("histogram"), Some("s"))
        );

        // Log lines carry the trace, not the attributes.
        emulate.stop();
        let log = std::fs::read_to_string(project.path().join("emulate.log")).unwrap();
        let line = log
            .lines()
            .find(|l| l.contains("batch processed") && l.contains("SensorAggregator"))
            .unwrap_or_else(|| panic!("{log}"));
        assert!(
            line.contains("invocation{function=SensorAggregator invocation_id=")
                && line.contains(&format!("trace_id=\"{trace_id}\"}}")),
            "{line}"
        );
        assert!(!line.contains("messaging.system"), "{line}");
        Chain {
            receiver,
            trace_id,
            message,
            invocation,
            alarm_stamp,
            downstream,
        }
    }
}

/// OTLP over gRPC by `OTEL_EXPORTER_OTLP_PROTOCOL`, from the environment `hubhost invoke`
/// runs in; and without the variables, no span is made at all.
#[test]
fn grpc_when_asked_and_nothing_when_unset() {
    kit::require!(Tool::PythonSdk, Tool::OpenTelemetry);
    let receiver = Receiver::start();
    let project = tempfile::tempdir().unwrap();
    reference_app(
        project.path(),
        // Never dialled: invoke shows what the outputs would do without carrying them out.
        &[(
            "EventHubConnection",
            "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;".into(),
        )],
    );
    let producer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut events = std::fs::File::create(project.path().join("events.json")).unwrap();
    let events_json = json!([
        {"body": reading("home-00007", "ok"), "properties": {"Diagnostic-Id": producer}},
        {"body": reading("home-00008", "ok"), "properties": {"Diagnostic-Id": producer}},
    ]);
    events
        .write_all(events_json.to_string().as_bytes())
        .unwrap();
    let invoke = |log: &str, env: &[(&str, String)]| {
        let mut command = Command::new(kit::binary("hubhost"));
        command
            .args([
                "invoke",
                "RawArchive",
                "--app",
                "function_app",
                "--events",
                "events.json",
            ])
            .current_dir(project.path())
            .env("PATH", path_with_executables())
            .env("RUST_LOG", log)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        for (name, value) in env {
            command.env(name, value);
        }
        let out = kit::output_within(&mut command, kit::COMMAND_LIMIT);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    let quiet = invoke("info", &[]);
    assert!(!quiet.contains("exporting OpenTelemetry"), "{quiet}");
    assert!(
        !quiet.contains("trace_id"),
        "no span without export: {quiet}"
    );

    // Logging only warnings leaves what is exported alone.
    let loud = invoke(
        "warn",
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{}", receiver.grpc),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
            ("OTEL_SERVICE_NAME", "invoked".into()),
        ],
    );
    assert!(
        !loud.contains("trace_id"),
        "only warnings are logged: {loud}"
    );
    let span = receiver.wait_for("the invocation span over gRPC", |records| {
        spans(records, "invoked").next().cloned()
    });
    assert_eq!(span["transport"], "grpc");
    assert_eq!(span["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(span["parent_span_id"], "00f067aa0ba902b7");
    assert_eq!(span["attributes"]["faas.name"], "RawArchive");
    assert_eq!(span["attributes"]["messaging.batch.message_count"], 2);
    assert_eq!(
        span["links"].as_array().unwrap().len(),
        1,
        "one link per distinct producer span"
    );

    // A function that panics still ends its span, failed, and counts as an error.
    let mut panicking = Command::new(kit::binary("hubhost"));
    panicking
        .args(["invoke", "SensorAggregator", "--app", "function_app"])
        .args(["--events", "events.json"])
        .current_dir(project.path())
        .env("PATH", path_with_executables())
        .env("HUBHOST_FAULT_PANIC_HOME", "home-00007")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", receiver.grpc),
        )
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_SERVICE_NAME", "invoked");
    let out = kit::output_within(&mut panicking, kit::COMMAND_LIMIT);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("handler_panic"),
        "{out:?}"
    );
    let failed = receiver.wait_for("the panicked invocation's span", |records| {
        spans(records, "invoked")
            .find(|s| s["attributes"]["faas.name"] == "SensorAggregator")
            .cloned()
    });
    assert_eq!(failed["attributes"]["error.type"], "handler_panic");
    assert_eq!(failed["status"], 2, "STATUS_CODE_ERROR");
    receiver.wait_for("faas.errors for the panic", |records| {
        records
            .iter()
            .find(|r| {
                r["name"] == "faas.errors"
                    && r["attributes"]["faas.name"] == "SensorAggregator"
                    && r["attributes"]["error.type"] == "handler_panic"
            })
            .cloned()
    });
}

/// `hubhost emulate --traces`: no backend, no variables; the emulated host and the handler
/// export to a collector in the process, and a line per function says what the spans say.
#[test]
fn emulate_traces_prints_what_the_spans_say() {
    kit::require!(Tool::PythonSdk);
    let hub = Hub::start(None);
    let project = tempfile::tempdir().unwrap();
    reference_app(
        project.path(),
        &[("EventHubConnection", hub.connection_string(KEY))],
    );
    let log = project.path().join("emulate.log");
    let mut emulate = KilledOnDrop(
        Command::new(kit::binary("hubhost"))
            .args(["emulate", "--traces", "--http-port", "0", "--metrics-port"])
            .arg(kit::free_port().to_string())
            .current_dir(project.path())
            .env("PATH", path_with_executables())
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    hub.python("send", &["40", "10", "traced"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let line = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text
            .lines()
            .find(|l| l.starts_with("traces (last 10 s): ") && l.contains("SensorAggregator"))
        {
            break line.to_string();
        }
        assert!(Instant::now() < deadline, "no summary line: {text}");
        std::thread::sleep(Duration::from_millis(250));
    };
    emulate.stop();
    assert!(line.contains("RawArchive"), "{line}");
    assert!(line.contains(" 0 failed"), "{line}");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("traces: http://127.0.0.1:"), "{log}");
}

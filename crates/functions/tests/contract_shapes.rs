//! Every request shape the Functions host sends for an eventHubTrigger, decoded.
//!
//! The payloads are written out by hand from the contract (docs/host-contract.md §2), not
//! produced by hubhost's own encoder, so that encoder and decoder cannot agree on a mistake. A second group checks that the encoder reproduces the host's encoding rules.

use hubhost_functions::contract::ContractError;
use hubhost_functions::contract::decode::decode_request;
use hubhost_functions::contract::encode::{HostInvocation, MetadataFlavor, encode_request};
use hubhost_functions::function_app::{Cardinality, DataType, EventHubTrigger};
use serde_json::{Value, json};

fn trigger(cardinality: Cardinality, data_type: DataType) -> EventHubTrigger {
    EventHubTrigger {
        binding_name: "events".into(),
        event_hub_name: "myhub".into(),
        consumer_group: "$Default".into(),
        cardinality,
        data_type,
        connection: None,
    }
}

fn decode(
    t: &EventHubTrigger,
    body: &Value,
) -> Result<hubhost_functions::batch::TriggerBatch, ContractError> {
    decode_request("SensorAggregator", t, body.to_string().as_bytes())
}

/// §2.4's example, cardinality many, dataType string, current extension.
#[test]
fn current_extension_many_string() {
    let body = json!({
      "Data": { "events": "[\"{\\\"id\\\":1}\",\"hello\"]" },
      "Metadata": {
        "TriggerPartitionContext": {"IsCheckpointingAfterInvocation": true, "FullyQualifiedNamespace": "myns.servicebus.windows.net",
                                    "EventHubName": "myhub", "ConsumerGroup": "$Default", "PartitionId": "0"},
        "PartitionContext": {"IsCheckpointingAfterInvocation": true, "FullyQualifiedNamespace": "myns.servicebus.windows.net",
                             "EventHubName": "myhub", "ConsumerGroup": "$Default", "PartitionId": "0"},
        "PartitionKeyArray": "[null,\"k2\"]",
        "OffsetArray": "[\"4294967296\",\"4294967400\"]",
        "OffsetStringArray": "[\"4294967296\",\"4294967400\"]",
        "SequenceNumberArray": "[10,11]",
        "EnqueuedTimeUtcArray": "[\"2024-05-01T12:00:00.123\",\"2024-05-01T12:00:00.456\"]",
        "PropertiesArray": "[{},{\"myProp\":\"x\"}]",
        "SystemPropertiesArray": "[{\"x-opt-sequence-number\":10},{\"x-opt-sequence-number\":11}]",
        "sys": {"MethodName": "SensorAggregator", "UtcNow": "2024-05-01T12:00:01.0000000Z", "RandGuid": "0f8fad5b-d9cb-469f-a165-70867728950e"}
      }
    });
    let batch = decode(&trigger(Cardinality::Many, DataType::String), &body).unwrap();
    assert_eq!(batch.partition.partition_id, "0");
    assert_eq!(
        batch.partition.fully_qualified_namespace.as_deref(),
        Some("myns.servicebus.windows.net")
    );
    assert_eq!(batch.partition.event_hub_name.as_deref(), Some("myhub"));
    assert_eq!(batch.partition.consumer_group.as_deref(), Some("$Default"));
    assert_eq!(
        batch.partition.is_checkpointing_after_invocation,
        Some(true)
    );
    assert_eq!(batch.events.len(), 2);
    assert_eq!(&batch.events[0].body[..], br#"{"id":1}"#);
    assert_eq!(&batch.events[1].body[..], b"hello");
    assert_eq!(batch.events[0].sequence_number, Some(10));
    assert_eq!(batch.events[1].offset.as_deref(), Some("4294967400"));
    assert_eq!(batch.events[0].partition_key, None);
    assert_eq!(batch.events[1].partition_key.as_deref(), Some("k2"));
    assert_eq!(
        batch.events[1].enqueued_time.unwrap().to_rfc3339(),
        "2024-05-01T12:00:00.456+00:00"
    );
    assert_eq!(batch.events[1].properties["myProp"], "x");
    assert_eq!(batch.sequence_range(), Some((10, 11)));
    assert_eq!(batch.retry, None);
    // Every system property, as sent, per event.
    let system = batch.system_properties.all().unwrap();
    assert_eq!(system.len(), 2);
    assert_eq!(
        batch.system_properties.of(1).unwrap().unwrap()["x-opt-sequence-number"],
        11
    );
}

/// The issue's minimal case: Metadata holds only TriggerPartitionContext.
#[test]
fn only_trigger_partition_context() {
    let body = json!({
      "Data": {"events": "[\"{\\\"a\\\":1}\"]"},
      "Metadata": {"TriggerPartitionContext": {"FullyQualifiedNamespace": "ns", "EventHubName": "h", "ConsumerGroup": "cg", "PartitionId": "7"}}
    });
    let batch = decode(&trigger(Cardinality::Many, DataType::String), &body).unwrap();
    assert_eq!(batch.partition.partition_id, "7");
    assert_eq!(batch.events.len(), 1);
    let e = &batch.events[0];
    assert_eq!(
        (
            e.sequence_number,
            e.offset.as_deref(),
            e.enqueued_time,
            e.partition_key.as_deref()
        ),
        (None, None, None, None)
    );
    assert!(e.properties.is_empty());
}

/// Legacy v3/v4 extension: EventProcessorHost's PartitionContext, values only in
/// SystemPropertiesArray, no dataType (bodies JSON-parsed by the host), numeric offsets.
#[test]
fn legacy_extension_many_unset_with_only_system_properties() {
    let body = json!({
      "Data": {"events": "[{\"homeId\":\"h1\"},42]"},
      "Metadata": {
        "PartitionContext": {"CancellationToken": {"IsCancellationRequested": false}, "ConsumerGroupName": "$Default",
                             "EventHubPath": "legacyhub", "PartitionId": "3", "Owner": "681d365b",
                             "RuntimeInformation": {"PartitionId": "3", "LastSequenceNumber": 960181}},
        "SystemPropertiesArray": "[{\"SequenceNumber\":960180,\"Offset\":\"8591964920\",\"PartitionKey\":\"h1\",\"EnqueuedTimeUtc\":\"2024-05-01T12:00:00\"},{\"x-opt-sequence-number\":960181,\"x-opt-offset\":8591965000,\"x-opt-enqueued-time\":\"2024-05-01T12:00:01.5+00:00\"}]",
        "sys": {"MethodName": "SensorAggregator", "UtcNow": "2024-05-01T12:00:01Z", "RandGuid": "x"}
      }
    });
    let batch = decode(&trigger(Cardinality::Many, DataType::Unset), &body).unwrap();
    assert_eq!(batch.partition.partition_id, "3");
    assert_eq!(batch.partition.event_hub_name.as_deref(), Some("legacyhub"));
    assert_eq!(batch.partition.consumer_group.as_deref(), Some("$Default"));
    assert_eq!(batch.partition.fully_qualified_namespace, None);
    assert_eq!(&batch.events[0].body[..], br#"{"homeId":"h1"}"#);
    assert_eq!(&batch.events[1].body[..], b"42");
    assert_eq!(batch.events[0].sequence_number, Some(960180));
    assert_eq!(batch.events[0].offset.as_deref(), Some("8591964920"));
    assert_eq!(batch.events[0].partition_key.as_deref(), Some("h1"));
    assert_eq!(batch.events[1].sequence_number, Some(960181));
    assert_eq!(batch.events[1].offset.as_deref(), Some("8591965000"));
    assert_eq!(
        batch.events[1].enqueued_time.unwrap().to_rfc3339(),
        "2024-05-01T12:00:01.500+00:00"
    );
}

/// Early v5: PartitionContext without IsCheckpointingAfterInvocation, no OffsetStringArray;
/// dataType binary (a base64 array).
#[test]
fn early_v5_many_binary() {
    let body = json!({
      "Data": {"events": "[\"eyJhIjoxfQ==\",\"aGVsbG8=\",\"AP8=\"]"},
      "Metadata": {
        "PartitionContext": {"FullyQualifiedNamespace": "ns", "EventHubName": "h", "ConsumerGroup": "$Default", "PartitionId": "1"},
        "SequenceNumberArray": "[5,6,7]",
        "OffsetArray": "[\"100\",\"200\",\"300\"]",
        "EnqueuedTimeUtcArray": "[\"2023-03-13T01:25:02.25\",\"2023-03-13T01:25:02.25\",\"2023-03-13T01:25:03\"]"
      }
    });
    let batch = decode(&trigger(Cardinality::Many, DataType::Binary), &body).unwrap();
    assert_eq!(&batch.events[0].body[..], br#"{"a":1}"#);
    assert_eq!(&batch.events[1].body[..], b"hello");
    assert_eq!(&batch.events[2].body[..], &[0u8, 255]);
    assert_eq!(batch.events[2].offset.as_deref(), Some("300"));
    assert_eq!(batch.partition.is_checkpointing_after_invocation, None);
}

/// Cardinality one, dataType string: the body string encoded twice, single-valued metadata
/// keys, and the host's copy of the body's top-level properties into Metadata.
#[test]
fn cardinality_one_string() {
    let body = json!({
      "Data": {"events": "\"{\\\"homeId\\\":\\\"h9\\\",\\\"state\\\":\\\"open\\\"}\""},
      "Metadata": {
        "TriggerPartitionContext": {"FullyQualifiedNamespace": "ns", "EventHubName": "h", "ConsumerGroup": "$Default", "PartitionId": "2"},
        "PartitionKey": "\"h9\"",
        "Offset": "\"4096\"",
        "SequenceNumber": "59",
        "EnqueuedTimeUtc": "\"2024-05-01T12:00:00\"",
        "Properties": {"p": 1},
        "SystemProperties": {"x-opt-sequence-number": 59},
        "homeId": "\"h9\"",
        "state": "\"open\""
      }
    });
    for data_type in [DataType::String, DataType::Unset] {
        let batch = decode(&trigger(Cardinality::One, data_type), &body).unwrap();
        assert_eq!(batch.events.len(), 1);
        let e = &batch.events[0];
        assert_eq!(&e.body[..], br#"{"homeId":"h9","state":"open"}"#);
        assert_eq!(e.sequence_number, Some(59));
        assert_eq!(e.offset.as_deref(), Some("4096"));
        assert_eq!(e.partition_key.as_deref(), Some("h9"));
        assert_eq!(e.properties["p"], 1);
        assert_eq!(
            e.enqueued_time.unwrap().to_rfc3339(),
            "2024-05-01T12:00:00+00:00"
        );
        assert_eq!(
            batch.system_properties.of(0).unwrap().unwrap()["x-opt-sequence-number"],
            59
        );
    }
}

#[test]
fn cardinality_one_binary_and_retry_context() {
    let body = json!({
      "Data": {"events": "aGVsbG8="},
      "Metadata": {
        "PartitionContext": {"EventHubName": "h", "ConsumerGroup": "$Default", "PartitionId": "4"},
        "RetryContext": {"RetryCount": 2, "MaxRetryCount": 5, "Exception": null}
      }
    });
    let batch = decode(&trigger(Cardinality::One, DataType::Binary), &body).unwrap();
    assert_eq!(&batch.events[0].body[..], b"hello");
    assert_eq!(
        batch
            .retry
            .as_ref()
            .map(|r| (r.retry_count, r.max_retry_count)),
        Some((2, 5))
    );
}

#[test]
fn bad_requests_name_the_problem() {
    let many = trigger(Cardinality::Many, DataType::String);
    let ctx = json!({"PartitionId": "0", "EventHubName": "h"});
    let err = |body: &[u8], t: &EventHubTrigger| decode_request("F", t, body).unwrap_err();

    assert_eq!(err(b"{not json", &many).code(), "malformed_json");
    assert_eq!(
        err(br#"{"Metadata":{}}"#, &many),
        ContractError::MissingData
    );
    let e = err(
        json!({"Data": {"evnts": "[]"}, "Metadata": {"PartitionContext": ctx}})
            .to_string()
            .as_bytes(),
        &many,
    );
    assert!(
        matches!(&e, ContractError::MissingBinding { expected, found, .. } if expected == "events" && found == &vec!["evnts".to_string()]),
        "{e}"
    );
    assert!(e.to_string().contains("evnts"));
    let e = err(
        json!({"Data": {"events": "[\"a\",\"b\"]"}, "Metadata": {"PartitionContext": ctx, "SequenceNumberArray": "[1]"}}).to_string().as_bytes(),
        &many,
    );
    assert_eq!(
        e,
        ContractError::LengthMismatch {
            binding: "events".into(),
            key: "SequenceNumberArray".into(),
            events: 2,
            len: 1
        }
    );
    let binary = trigger(Cardinality::Many, DataType::Binary);
    let e = err(json!({"Data": {"events": "[\"aGVsbG8=\",\"%%%\"]"}, "Metadata": {"PartitionContext": ctx}}).to_string().as_bytes(), &binary);
    assert_eq!(
        e,
        ContractError::InvalidBase64 {
            binding: "events".into(),
            index: 1
        }
    );
    let e = err(json!({"Data": {"events": "{\"not\":\"an array\"}"}, "Metadata": {"PartitionContext": ctx}}).to_string().as_bytes(), &many);
    assert_eq!(e.code(), "bad_data");
    let e = err(
        json!({"Data": {"events": "[\"x\"]"}, "Metadata": {}})
            .to_string()
            .as_bytes(),
        &many,
    );
    assert_eq!(e, ContractError::MissingPartitionContext);
    let e = err(
        json!({"Data": {"events": "[\"x\"]"}, "Metadata": {"PartitionContext": ctx, "SequenceNumberArray": "[\"ten\"]"}}).to_string().as_bytes(),
        &many,
    );
    assert_eq!(e.code(), "bad_metadata");
}

/// The encoder (what the emulated host sends) follows the same rules the hand-written payloads
/// above follow, and every flavour and shape decodes back to the same events.
#[test]
fn encoder_follows_the_host_rules_and_round_trips() {
    use hubhost_functions::batch::{EventRecord, PartitionContext};
    let events: Vec<EventRecord> = (0..3)
        .map(|i| EventRecord {
            body: bytes::Bytes::from(format!(r#"{{"homeId":"h{i}","n":{i}}}"#)),
            sequence_number: Some(100 + i),
            offset: Some(format!("{}", 4096 * i)),
            enqueued_time: Some(
                chrono::DateTime::parse_from_rfc3339("2024-05-01T12:00:00.25Z")
                    .unwrap()
                    .into(),
            ),
            partition_key: (i != 1).then(|| format!("h{i}")),
            properties: serde_json::Map::from_iter([("k".to_string(), json!(i))]),
            system_properties: Default::default(),
        })
        .collect();
    let partition = PartitionContext {
        fully_qualified_namespace: Some("ns.servicebus.windows.net".into()),
        event_hub_name: Some("hub".into()),
        consumer_group: Some("$Default".into()),
        partition_id: "5".into(),
        is_checkpointing_after_invocation: Some(true),
    };
    for flavor in [
        MetadataFlavor::Current,
        MetadataFlavor::EarlyV5,
        MetadataFlavor::LegacyV4,
    ] {
        for data_type in [DataType::String, DataType::Binary, DataType::Unset] {
            let t = trigger(Cardinality::Many, data_type);
            let bytes = encode_request(&HostInvocation {
                function: "F",
                trigger: &t,
                partition: &partition,
                events: &events,
                retry: None,
                flavor,
                now: chrono::Utc::now(),
                inputs: &[],
            })
            .unwrap();
            let request: Value = serde_json::from_slice(&bytes).unwrap();
            // The batch and the array metadata are JSON text inside strings.
            assert!(request["Data"]["events"].is_string());
            assert!(request["Metadata"]["SequenceNumberArray"].as_str() == Some("[100,101,102]"));
            assert!(request["Metadata"]["PartitionContext"].is_object());
            assert_eq!(
                request["Metadata"]["TriggerPartitionContext"].is_object(),
                flavor == MetadataFlavor::Current
            );
            assert_eq!(
                request["Metadata"]["EnqueuedTimeUtcArray"],
                "[\"2024-05-01T12:00:00.25\",\"2024-05-01T12:00:00.25\",\"2024-05-01T12:00:00.25\"]"
            );
            let batch = decode_request("F", &t, &bytes).unwrap();
            assert_eq!(batch.partition.partition_id, "5");
            for (sent, got) in events.iter().zip(&batch.events) {
                let same_json = serde_json::from_slice::<Value>(&sent.body).unwrap()
                    == serde_json::from_slice::<Value>(&got.body).unwrap();
                assert!(same_json, "{flavor:?} {data_type:?}");
                assert_eq!(sent.sequence_number, got.sequence_number);
                assert_eq!(sent.offset, got.offset);
                assert_eq!(sent.partition_key, got.partition_key);
                assert_eq!(sent.enqueued_time, got.enqueued_time);
                assert_eq!(sent.properties, got.properties);
            }
        }
    }
    // Cardinality one: the string is encoded twice, metadata values singly, binary as base64.
    let one = trigger(Cardinality::One, DataType::String);
    let bytes = encode_request(&HostInvocation {
        function: "F",
        trigger: &one,
        partition: &partition,
        events: &events[..1],
        retry: Some(&hubhost_functions::batch::RetryContext {
            retry_count: 1,
            max_retry_count: 3,
            exception: Some(
                json!({"ClassName": "System.Exception", "Message": "the handler answered 500"}),
            ),
        }),
        flavor: MetadataFlavor::Current,
        now: chrono::Utc::now(),
        inputs: &[],
    })
    .unwrap();
    let request: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        request["Data"]["events"],
        json!("\"{\\\"homeId\\\":\\\"h0\\\",\\\"n\\\":0}\"")
    );
    assert_eq!(request["Metadata"]["SequenceNumber"], "100");
    assert_eq!(request["Metadata"]["PartitionKey"], "\"h0\"");
    assert_eq!(
        request["Metadata"]["homeId"], "\"h0\"",
        "body properties are copied into Metadata"
    );
    assert_eq!(request["Metadata"]["RetryContext"]["MaxRetryCount"], 3);
    let batch = decode_request("F", &one, &bytes).unwrap();
    assert_eq!(&batch.events[0].body[..], br#"{"homeId":"h0","n":0}"#);
    let retry = batch
        .retry
        .expect("the retry context survives the round trip");
    assert_eq!((retry.retry_count, retry.max_retry_count), (1, 3));
    assert_eq!(retry.last_error(), Some("the handler answered 500"));
}

/// Input bindings' values beside the trigger's, as the host writes them
/// (`GetHttpScriptInvocationContextValue`): a string input as JSON text in a string, a binary
/// one as base64, one without a value as `null` text.
#[test]
fn input_bindings_beside_the_trigger_are_read_as_the_host_wrote_them() {
    let body = json!({
      "Data": {
        "events": "\"{\\\"homeId\\\":\\\"h9\\\"}\"",
        "limits": "\"{\\\"limit\\\":30}\"",
        "image": "AP8=",
        "missing": "null"
      },
      "Metadata": {
        "PartitionContext": {"FullyQualifiedNamespace": "ns", "EventHubName": "h", "ConsumerGroup": "$Default", "PartitionId": "2"},
        "SequenceNumber": "59"
      }
    });
    let batch = decode(&trigger(Cardinality::One, DataType::String), &body).unwrap();
    assert_eq!(&batch.events[0].body[..], br#"{"homeId":"h9"}"#);
    let mut names: Vec<&str> = batch.inputs.names().collect();
    names.sort();
    assert_eq!(names, ["image", "limits", "missing"]);
    assert_eq!(
        batch.inputs.text("limits").unwrap().as_deref(),
        Some(r#"{"limit":30}"#)
    );
    let limits: Value = batch.inputs.json("limits").unwrap().unwrap();
    assert_eq!(limits["limit"], 30);
    assert_eq!(batch.inputs.bytes("image").unwrap(), Some(vec![0, 255]));
    assert_eq!(batch.inputs.text("missing").unwrap(), None);
}

/// The encoder writes the inputs beside the trigger's value in both cardinalities, and the
/// values other bindings' expressions see are the trigger's as their own types.
#[test]
fn the_encoder_writes_inputs_and_gives_the_data_expressions_resolve_from() {
    use hubhost_functions::batch::{EventRecord, PartitionContext};
    use hubhost_functions::contract::encode::expression_data;
    let partition = PartitionContext {
        partition_id: "5".into(),
        ..PartitionContext::default()
    };
    let mut event = EventRecord::new(r#"{"deviceId":"d-7","n":5,"on":true,"at":{"room":"k"}}"#);
    event.partition_key = Some("home-1".into());
    event.sequence_number = Some(41);
    event.enqueued_time = Some(
        chrono::DateTime::parse_from_rfc3339("2026-12-02T21:05:09.5Z")
            .unwrap()
            .into(),
    );
    let inputs = [("ref".to_string(), json!("\"text\""))];
    for cardinality in [Cardinality::One, Cardinality::Many] {
        let t = trigger(cardinality, DataType::String);
        let invocation = HostInvocation {
            function: "F",
            trigger: &t,
            partition: &partition,
            events: std::slice::from_ref(&event),
            retry: None,
            flavor: MetadataFlavor::Current,
            now: chrono::Utc::now(),
            inputs: &inputs,
        };
        let bytes = encode_request(&invocation).unwrap();
        let batch = decode_request("F", &t, &bytes).unwrap();
        assert_eq!(batch.inputs.text("ref").unwrap().as_deref(), Some("text"));
        assert_eq!(batch.events.len(), 1);

        let data = expression_data(&invocation);
        assert_eq!(data.get("PartitionContext").unwrap()["PartitionId"], "5");
        assert_eq!(data.get("sys").unwrap()["MethodName"], "F");
        if cardinality == Cardinality::One {
            assert_eq!(data.get("partitionkey"), Some(&json!("home-1")));
            assert_eq!(data.get("SequenceNumber"), Some(&json!(41)));
            assert_eq!(
                data.get("EnqueuedTimeUtc"),
                Some(&json!("2026-12-02T21-05-09Z"))
            );
            // The body's members, as the host copies them: scalars as their .NET text.
            assert_eq!(data.get("deviceId"), Some(&json!("d-7")));
            assert_eq!(data.get("n"), Some(&json!("5")));
            assert_eq!(data.get("on"), Some(&json!("True")));
            assert_eq!(data.get("at").unwrap()["room"], "k");
        } else {
            // Per-event values are arrays; the body's members are not copied.
            assert_eq!(data.get("PartitionKey"), None);
            assert_eq!(data.get("PartitionKeyArray"), Some(&json!(["home-1"])));
            assert_eq!(data.get("deviceId"), None);
        }
    }
}

//! `hubhost invoke`: one batch to one function, exactly as the Functions host would send it,
//! and the answer as the host reads it — without a hub, a pool or a checkpoint store.
//!
//! The events come from a file ([`parse_events`]: a JSON array or NDJSON, each event a body —
//! text or JSON — with an optional partition key and properties) or are one sample event. The
//! handler is started as `emulate` starts it (host.json's `customHandler`, the port in its
//! environment, `GET /` until it answers), or is the one already running at a URL. The answer
//! is shown as the host sees it ([`host_view`]): the status, each output with what the host
//! (and `emulate`) would do with it, the logs and the return value. A function of cardinality
//! `one` gets one invocation per event, as from the host.

use std::path::PathBuf;

use chrono::Utc;
use serde_json::{Map, Value, json};

use super::handler_process::{start_on_free_port, stop_child};
use super::{AppSettings, EmulateError, EventSender, OutputPlan, resolve_trigger};
use crate::invoker::{InvokeError, Invoker};
use hubhost_functions::contract::encode::{HostInvocation, MetadataFlavor, encode_request};
use hubhost_functions::function_app::{Cardinality, EventHubTrigger, FunctionApp, FunctionSpec};
use hubhost_trigger::batch::TriggerBatch;

/// What `hubhost invoke` was asked to do.
#[derive(Debug, Clone)]
pub struct InvokeOptions {
    /// The function app folder (host.json, function folders, local.settings.json).
    pub app: PathBuf,
    /// The function to invoke.
    pub function: String,
    /// The events file [default: one sample event].
    pub events: Option<PathBuf>,
    /// The partition the batch claims to come from.
    pub partition: String,
    /// A handler already running there, instead of starting the app's.
    pub url: Option<String>,
}

/// Why an invocation could not be made (a failed *answer* is not an error: it is shown).
#[derive(Debug, thiserror::Error)]
pub enum InvokeCommandError {
    #[error(transparent)]
    App(#[from] EmulateError),
    #[error("{path}: {problem}")]
    Events { path: PathBuf, problem: String },
    #[error("the app has no function named {function} (it has: {available})")]
    UnknownFunction { function: String, available: String },
    #[error(
        "{function} is not triggered by an event hub ({trigger}); hubhost invoke sends Event Hubs batches"
    )]
    NotEventHub { function: String, trigger: String },
    #[error("the handler gave no answer: {0}")]
    NoAnswer(#[from] InvokeError),
}

/// One event of an events file.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    /// The body: a JSON string is the text itself, any other JSON value its compact text.
    pub body: Value,
    pub partition_key: Option<String>,
    pub properties: Map<String, Value>,
}

/// The events of an events file: a JSON array (or a single JSON value), or NDJSON (one JSON
/// value per line). Each value is an event: an object with `body` and optional
/// `partitionKey` and `properties`, or else itself the body.
///
/// ```
/// use hubhost_host::emulate::invoke::parse_events;
///
/// let events = parse_events(r#"[{"body": {"t": 21}, "partitionKey": "d-1"}, "plain text"]"#)?;
/// assert_eq!(events.len(), 2);
/// assert_eq!(events[0].partition_key.as_deref(), Some("d-1"));
/// assert_eq!(events[1].body, "plain text");
/// assert_eq!(parse_events("{\"a\":1}\n{\"a\":2}\n")?.len(), 2);
/// # Ok::<(), String>(())
/// ```
pub fn parse_events(text: &str) -> Result<Vec<EventSpec>, String> {
    let values = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(values)) => values,
        Ok(value) => vec![value],
        Err(whole) => text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(i, line)| {
                serde_json::from_str(line).map_err(|e| {
                    format!(
                        "neither one JSON document ({whole}) nor NDJSON: line {}: {e}",
                        i + 1
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    if values.is_empty() {
        return Err("no events".into());
    }
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| event_spec(value).map_err(|e| format!("event {}: {e}", i + 1)))
        .collect()
}

fn event_spec(value: Value) -> Result<EventSpec, String> {
    let Value::Object(mut fields) = value else {
        return Ok(EventSpec {
            body: value,
            partition_key: None,
            properties: Map::new(),
        });
    };
    let Some(body) = fields.remove("body") else {
        return Ok(EventSpec {
            body: Value::Object(fields),
            partition_key: None,
            properties: Map::new(),
        });
    };
    let partition_key = match fields.remove("partitionKey") {
        None | Some(Value::Null) => None,
        Some(Value::String(key)) => Some(key),
        Some(other) => return Err(format!("partitionKey must be a string, not {other}")),
    };
    let properties = match fields.remove("properties") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(properties)) => properties,
        Some(other) => return Err(format!("properties must be an object, not {other}")),
    };
    if let Some(unknown) = fields.keys().next() {
        return Err(format!(
            "unknown field {unknown:?} (an event has body, partitionKey and properties)"
        ));
    }
    Ok(EventSpec {
        body,
        partition_key,
        properties,
    })
}

/// The event sent when no events file is given.
pub fn sample_events() -> Vec<EventSpec> {
    vec![EventSpec {
        body: json!({"message": "hello from hubhost invoke"}),
        partition_key: None,
        properties: Map::new(),
    }]
}

/// The batches the host would deliver for `events` to `spec`, whose trigger (its `%Setting%`
/// names expanded) reads `namespace`: one for cardinality `many`, one per event for `one`; with
/// the first attempt's retry context when the function has a policy.
pub fn batches(
    spec: &FunctionSpec,
    trigger: &EventHubTrigger,
    namespace: &str,
    partition: &str,
    events: &[EventSpec],
) -> Vec<TriggerBatch> {
    let groups: Vec<&[EventSpec]> = if trigger.cardinality == Cardinality::One {
        events.chunks(1).collect()
    } else {
        vec![events]
    };
    let mut first_sequence_number = 0;
    groups
        .into_iter()
        .map(|group| {
            let mut builder = TriggerBatch::builder(&spec.name)
                .namespace(namespace)
                .hub(&trigger.event_hub_name)
                .consumer_group(&trigger.consumer_group)
                .partition(partition)
                .first_sequence_number(first_sequence_number);
            first_sequence_number += group.len() as i64;
            if let Some(policy) = &spec.retry {
                builder = builder.retry(0, policy.max_retry_count);
            }
            for event in group {
                builder = match &event.body {
                    Value::String(text) => builder.text(text.clone()),
                    other => builder.json(other),
                };
                if let Some(key) = &event.partition_key {
                    builder = builder.partition_key(key);
                }
                for (name, value) in &event.properties {
                    builder = builder.property(name, value.clone());
                }
            }
            builder.build()
        })
        .collect()
}

/// An answer as the host reads it: `status`, `succeeded`, `outputs` (per output binding, what
/// the host would do with it), `logs`, `returnValue`, and the handler's `error` if it gave one.
pub fn host_view(status: u16, answer: &Value, outputs: &OutputPlan) -> Value {
    let succeeded = (200..300).contains(&status);
    let mut view = json!({
        "status": status,
        "succeeded": succeeded,
        // The host carries out outputs only for a successful invocation.
        "outputs": if succeeded { Value::Object(outputs.describe(answer)) } else { json!({}) },
        "logs": answer.get("Logs").cloned().unwrap_or(json!([])),
        "returnValue": answer.get("ReturnValue").cloned().unwrap_or(Value::Null),
    });
    if let Some(error) = answer.get("error") {
        view["error"] = error.clone();
    }
    view
}

/// Invokes the function with the events, starting its handler unless `url` names one; the host's
/// view of each answer, in order.
pub async fn run(opts: &InvokeOptions) -> Result<Vec<Value>, InvokeCommandError> {
    let app = FunctionApp::load(&opts.app).map_err(EmulateError::from)?;
    let settings = AppSettings::load(&opts.app)?;
    let spec = app
        .function(&opts.function)
        .ok_or_else(|| InvokeCommandError::UnknownFunction {
            function: opts.function.clone(),
            available: app
                .functions
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let Some((trigger, target)) = resolve_trigger(spec, &settings)? else {
        return Err(InvokeCommandError::NotEventHub {
            function: spec.name.clone(),
            trigger: format!("{:?}", spec.trigger),
        });
    };
    let events = match &opts.events {
        Some(path) => {
            let problem = |problem: String| InvokeCommandError::Events {
                path: path.clone(),
                problem,
            };
            let text = std::fs::read_to_string(path).map_err(|e| problem(e.to_string()))?;
            parse_events(&text).map_err(problem)?
        }
        None => sample_events(),
    };
    // Refuses, as emulate does, an output it would not carry out.
    let outputs = OutputPlan::resolve(spec, &settings, &EventSender::start())?;

    let (invoker, mut child) = match &opts.url {
        Some(url) => (Invoker::new(url.trim_end_matches('/')), None),
        None => {
            // stdout is the answer's: the handler's own output goes to stderr.
            let (_, invoker, child, _) = start_on_free_port(&app, &settings, true).await?;
            (invoker, Some(child))
        }
    };
    let mut views = Vec::new();
    let mut outcome = Ok(());
    for batch in batches(spec, &trigger, &target.namespace, &opts.partition, &events) {
        let body = encode_request(&HostInvocation {
            function: &spec.name,
            trigger: &trigger,
            partition: &batch.partition,
            events: &batch.events,
            retry: batch.retry.as_ref(),
            flavor: MetadataFlavor::Current,
            now: Utc::now(),
        })
        .map_err(|e| InvokeCommandError::Events {
            path: opts.events.clone().unwrap_or_default(),
            problem: e.to_string(),
        })?;
        match invoker.invoke(&spec.name, body).await {
            Ok(answer) => views.push(host_view(answer.status, &answer.body, &outputs)),
            Err(e) => {
                outcome = Err(e.into());
                break;
            }
        }
    }
    if let Some(child) = &mut child {
        stop_child(child).await;
    }
    outcome.map(|()| views)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hubhost_functions::function_app::FunctionSpec;

    fn spec(cardinality: &str, retry: bool) -> FunctionSpec {
        let mut json = json!({"bindings": [{"type": "eventHubTrigger", "name": "events", "direction": "in",
            "eventHubName": "orders", "cardinality": cardinality, "dataType": "string"}]});
        if retry {
            json["retry"] =
                json!({"strategy": "fixedDelay", "maxRetryCount": 4, "delayInterval": "00:00:01"});
        }
        FunctionSpec::from_json("F", &json).unwrap()
    }

    #[test]
    fn events_files_take_every_documented_shape_and_name_what_is_wrong() {
        let events = parse_events(
            r#"[{"body": "a", "partitionKey": "k", "properties": {"n": 1}}, {"x": 1}, 7]"#,
        )
        .unwrap();
        assert_eq!(events[0].body, "a");
        assert_eq!(events[0].properties["n"], 1);
        assert_eq!(
            events[1].body,
            json!({"x": 1}),
            "an object without body is the body"
        );
        assert_eq!(events[2].body, 7);
        assert_eq!(parse_events("\"one\"").unwrap().len(), 1);
        assert!(parse_events("[]").unwrap_err().contains("no events"));
        assert!(
            parse_events(r#"[{"body": 1, "partitionkey": "k"}]"#)
                .unwrap_err()
                .contains("event 1: unknown field \"partitionkey\"")
        );
        assert!(
            parse_events("{\"a\":1}\nnot json")
                .unwrap_err()
                .contains("line 2")
        );
    }

    #[test]
    fn the_host_delivers_a_batch_or_one_invocation_per_event() {
        let events = parse_events(r#"["a", {"body": {"b": 2}, "partitionKey": "k"}]"#).unwrap();
        let spec_many = spec("many", true);
        let trigger = spec_many.event_hub_trigger().unwrap();
        let many = batches(&spec_many, trigger, "localhost", "3", &events);
        assert_eq!(many.len(), 1);
        assert_eq!(many[0].events.len(), 2);
        assert_eq!(many[0].partition.partition_id, "3");
        assert_eq!(many[0].partition.event_hub_name.as_deref(), Some("orders"));
        assert_eq!(&many[0].events[1].body[..], br#"{"b":2}"#);
        assert_eq!(many[0].events[1].partition_key.as_deref(), Some("k"));
        let retry = many[0].retry.as_ref().unwrap();
        assert_eq!((retry.retry_count, retry.max_retry_count), (0, 4));

        let spec_one = spec("one", false);
        let one = batches(
            &spec_one,
            spec_one.event_hub_trigger().unwrap(),
            "localhost",
            "0",
            &events,
        );
        assert_eq!(one.len(), 2);
        assert!(one.iter().all(|b| b.events.len() == 1 && b.retry.is_none()));
        assert_eq!(one[1].events[0].sequence_number, Some(1));
    }

    #[test]
    fn a_failed_answer_carries_out_no_output() {
        let answer = json!({"Outputs": {"x": [1]}, "Logs": ["l"], "ReturnValue": null, "error": {"code": "c", "message": "m"}});
        let view = host_view(500, &answer, &OutputPlan::default());
        assert_eq!(view["succeeded"], false);
        assert_eq!(view["outputs"], json!({}));
        assert_eq!(view["logs"], json!(["l"]));
        assert_eq!(view["error"]["code"], "c");
    }
}

//! Testing a function in-process, with plain `cargo test`: no host, no socket, no service.
//!
//! Two depths:
//! - **Call it directly**: build a batch ([`TriggerBatch::builder`]), a context
//!   ([`FunctionContext::for_batch`]), and `function.run(batch, &context).await` — what the
//!   function returned, what it logged and counted.
//! - **Call it as the host does** with [`HostHarness`]: the batch is encoded exactly as the
//!   Functions host encodes it for the function's declaration (cardinality, dataType), goes
//!   through the server's own routes (decoding, the function's task, the answer), and the answer
//!   is read back as the host reads it ([`HostAnswer`]: status, outputs by binding, logs, return
//!   value, the error's code) — so what passes here is what the host will see.
//!
//! ```
//! use hubhost_functions::prelude::*;
//! use hubhost_functions::testing::HostHarness;
//!
//! struct Shout;
//!
//! #[async_trait]
//! impl EventHubFunction for Shout {
//!     async fn run(&self, batch: TriggerBatch, context: &FunctionContext) -> Result<FunctionOutput, FunctionError> {
//!         let mut output = FunctionOutput::default();
//!         for event in &batch.events {
//!             let text = event.text().map_err(|e| FunctionError::BadRequest {
//!                 code: "not_text",
//!                 message: e.to_string(),
//!             })?;
//!             output.send_event_text("loud", text.to_uppercase());
//!         }
//!         context.log(format!("{} events shouted", batch.events.len()));
//!         Ok(output)
//!     }
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let harness = HostHarness::for_function("Shout", Shout, &["loud"]);
//! let batch = TriggerBatch::builder("Shout").text("hi").text("there").build();
//! let answer = harness.invoke(&batch).await;
//! assert!(answer.succeeded(), "{answer:?}");
//! assert_eq!(answer.events_sent("loud"), ["HI", "THERE"]);
//! assert_eq!(answer.logs, ["2 events shouted"]);
//! # });
//! ```
//!
//! [`TriggerBatch::builder`]: crate::batch::TriggerBatch::builder
//! [`FunctionContext::for_batch`]: crate::context::FunctionContext::for_batch

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, header};
use base64::Engine;
use serde_json::{Map, Value};
use tower::ServiceExt;

use crate::batch::TriggerBatch;
use crate::contract::encode::{HostInvocation, MetadataFlavor, encode_request};
use crate::contract::http_request::HostHttpRequest;
use crate::contract::timer_request::encode_timer_request;
use crate::function::EventHubFunction;
use crate::function_app::{
    BindingSpec, Cardinality, DataType, EventHubTrigger, FunctionSpec, Trigger,
};
use crate::http::{HttpRequest, HttpResponse};
use crate::output::FunctionOutput;
use crate::server::FunctionServer;
use crate::timer::TimerInfo;

/// A [`FunctionServer`] called as the Functions host calls it, without a socket.
pub struct HostHarness {
    server: Arc<FunctionServer>,
}

impl HostHarness {
    /// Serves the functions `server` was built with (from an app folder, or from the
    /// declarations they were registered with).
    pub fn new(server: FunctionServer) -> Self {
        HostHarness {
            server: Arc::new(server),
        }
    }

    /// One function, declared as `hubhost new` declares one: trigger binding `events` on hub
    /// `sensors`, cardinality many, dataType string, and an `eventHub` output for each name in
    /// `event_outputs`. For another declaration (blob outputs, cardinality one, binary), build
    /// the server from the app folder or a [`FunctionSpec`] and use [`new`](Self::new).
    pub fn for_function(
        name: &str,
        function: impl EventHubFunction,
        event_outputs: &[&str],
    ) -> Self {
        let declaration = FunctionSpec {
            name: name.into(),
            trigger: Trigger::EventHub(EventHubTrigger {
                binding_name: "events".into(),
                event_hub_name: "sensors".into(),
                consumer_group: "$Default".into(),
                cardinality: Cardinality::Many,
                data_type: DataType::String,
                connection: None,
            }),
            retry: None,
            bindings: event_outputs
                .iter()
                .map(|output| BindingSpec::event_hub_output(output, output, "EventHubConnection"))
                .collect(),
        };
        let server = FunctionServer::builder()
            .event_hub_function(declaration, function)
            .build(None)
            .expect("a well-formed declaration");
        Self::new(server)
    }

    /// Sends `batch` to its function (`batch.function`) as the host would: encoded for the
    /// function's trigger declaration, `POST /{function}` through the server's routes, with an
    /// invocation id. A function of cardinality `one` takes one event per invocation; give it
    /// batches of one.
    pub async fn invoke(&self, batch: &TriggerBatch) -> HostAnswer {
        let trigger = self.trigger_of(&batch.function);
        assert!(
            trigger.cardinality == Cardinality::Many || batch.events.len() == 1,
            "{} has cardinality one: the host sends one event per invocation (this batch has {})",
            batch.function,
            batch.events.len()
        );
        let body = encode_request(&HostInvocation {
            function: &batch.function,
            trigger: &trigger,
            partition: &batch.partition,
            events: &batch.events,
            retry: batch.retry.as_ref(),
            flavor: MetadataFlavor::Current,
            now: chrono::Utc::now(),
            inputs: batch.inputs.wire(),
        })
        .expect("a batch the host could send");
        self.post(&batch.function, body).await
    }

    /// Sends `request` to the HTTP function `function` as the host sends it when it does not
    /// forward requests: `POST /{function}` with the request in `Data.<trigger binding>`
    /// (`Url`, `Method`, `Query`, `Headers`, `Params`, `Body`) and its query and route
    /// parameters in `Metadata`. The answer's response: [`HostAnswer::http_response`].
    ///
    /// ```
    /// use hubhost_functions::prelude::*;
    /// use hubhost_functions::testing::HostHarness;
    ///
    /// struct Hello;
    ///
    /// #[async_trait]
    /// impl HttpFunction for Hello {
    ///     async fn call(&self, request: HttpRequest) -> Result<HttpResponse, FunctionError> {
    ///         let name = request.query.get("name").map_or("world", String::as_str);
    ///         Ok(HttpResponse::text(200, format!("hello {name}")))
    ///     }
    /// }
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let server = FunctionServer::builder().http_function("Hello", Hello).build(None).unwrap();
    /// let harness = HostHarness::new(server);
    /// let mut request = HttpRequest::default();
    /// request.method = "GET".into();
    /// request.query.insert("name".into(), "Ada".into());
    /// let answer = harness.invoke_http("Hello", &request).await;
    /// let response = answer.http_response("res").expect("a response");
    /// assert_eq!((response.status, response.body.as_str()), (200, "hello Ada"));
    /// # });
    /// ```
    pub async fn invoke_http(&self, function: &str, request: &HttpRequest) -> HostAnswer {
        let binding = match self.server.declaration(function).map(|s| &s.trigger) {
            Some(Trigger::Http { binding_name, .. }) => binding_name.clone(),
            _ => panic!(
                "no HTTP function named {function:?} here (served: {})",
                self.server.function_names().join(", ")
            ),
        };
        let url = if request.url.is_empty() {
            format!("http://localhost:7071/api/{function}")
        } else {
            request.url.clone()
        };
        let method = if request.method.is_empty() {
            "GET"
        } else {
            request.method.as_str()
        };
        let headers = request
            .headers
            .iter()
            .flat_map(|(name, values)| values.iter().map(|v| (name.clone(), v.clone())));
        let host_request = HostHttpRequest::new(
            method,
            url,
            request.query.clone(),
            headers,
            request.params.clone(),
            request.body.clone(),
        );
        let body = host_request.encode(
            function,
            &binding,
            request.inputs.wire(),
            &chrono::Utc::now(),
        );
        self.post(function, body).await
    }

    /// Fires the timer function `function` once, as the host fires it, with `timer` (and its
    /// inputs) in `Data.<trigger binding>`. What it answered: [`HostAnswer`]'s outputs and logs.
    ///
    /// ```
    /// use hubhost_functions::prelude::*;
    /// use hubhost_functions::testing::HostHarness;
    ///
    /// struct Tick;
    ///
    /// #[async_trait]
    /// impl TimerFunction for Tick {
    ///     async fn run(&self, timer: TimerInfo) -> Result<FunctionOutput, FunctionError> {
    ///         let mut output = FunctionOutput::default();
    ///         output.log(if timer.is_past_due { "late" } else { "on time" });
    ///         Ok(output)
    ///     }
    /// }
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let server = FunctionServer::builder().timer_function("Tick", Tick).build(None).unwrap();
    /// let harness = HostHarness::new(server);
    /// let late = TimerInfo { is_past_due: true, ..TimerInfo::default() };
    /// let answer = harness.invoke_timer("Tick", &late).await;
    /// assert!(answer.succeeded());
    /// assert_eq!(answer.logs, ["late"]);
    /// # });
    /// ```
    pub async fn invoke_timer(&self, function: &str, timer: &TimerInfo) -> HostAnswer {
        let binding = match self.server.declaration(function).map(|s| &s.trigger) {
            Some(Trigger::Other { kind, settings })
                if kind.eq_ignore_ascii_case("timerTrigger") =>
            {
                settings
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("myTimer")
                    .to_string()
            }
            _ => panic!(
                "no timer function named {function:?} here (served: {})",
                self.server.function_names().join(", ")
            ),
        };
        let body = encode_timer_request(function, &binding, timer, &chrono::Utc::now());
        self.post(function, body).await
    }

    /// Sends `body` as it is to `POST /{function}`: for requests the host would not build
    /// (a malformed one, to see the error a function's caller gets).
    pub async fn post(&self, function: &str, body: Vec<u8>) -> HostAnswer {
        let request = Request::post(format!("/{function}"))
            .header(header::CONTENT_TYPE, "application/json")
            .header(
                "x-azure-functions-invocationid",
                uuid::Uuid::new_v4().to_string(),
            )
            .body(Body::from(body))
            .expect("a well-formed request");
        let response = self
            .server
            .router()
            .oneshot(request)
            .await
            .expect("the router always answers");
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("an answer in memory");
        let mut answer = HostAnswer::read(status, &bytes);
        if let Some(spec) = self.server.declaration(function) {
            answer.drop_undeclared(function, spec);
        }
        answer
    }

    fn trigger_of(&self, function: &str) -> EventHubTrigger {
        self.server
            .declaration(function)
            .and_then(|spec| spec.event_hub_trigger().cloned())
            .unwrap_or_else(|| {
                panic!(
                    "no Event Hubs function named {function:?} here (served: {})",
                    self.server.function_names().join(", ")
                )
            })
    }
}

/// Why an answer fails for outputs its function does not declare: which, and the declared ones.
pub fn undeclared_message(function: &str, undeclared: &[String], declared: &[&str]) -> String {
    format!(
        "{function} set output{} {} that its function.json does not declare; the Functions host \
         drops {} without a word (declared: {})",
        if undeclared.len() == 1 { "" } else { "s" },
        undeclared
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", "),
        if undeclared.len() == 1 { "it" } else { "them" },
        if declared.is_empty() {
            "none".to_string()
        } else {
            declared.join(", ")
        }
    )
}

/// A handler's answer as the host reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostAnswer {
    /// The HTTP status: 2xx is success, anything else a failed invocation.
    pub status: u16,
    /// `Outputs`: one value per output binding.
    pub outputs: Map<String, Value>,
    /// `Logs`: lines the host writes to its log as the function's.
    pub logs: Vec<String>,
    /// `ReturnValue`.
    pub return_value: Value,
    /// On failure, the error's code and message (the host ignores them; people read them).
    pub error: Option<(String, String)>,
    /// Outputs the function set that its function.json does not declare: the host looks up
    /// only the declared ones, so these are dropped (and not in `outputs`).
    pub undeclared_outputs: Vec<String>,
}

impl HostAnswer {
    fn read(status: u16, body: &[u8]) -> Self {
        let answer: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
            panic!(
                "the handler answered {status} with a body that is not JSON ({e}): {}",
                String::from_utf8_lossy(body)
            )
        });
        HostAnswer {
            status,
            outputs: answer["Outputs"].as_object().cloned().unwrap_or_default(),
            logs: answer["Logs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l.as_str().map(str::to_string))
                .collect(),
            return_value: answer["ReturnValue"].clone(),
            error: answer.get("error").map(|e| {
                let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (text("code"), text("message"))
            }),
            undeclared_outputs: Vec::new(),
        }
    }

    /// Takes out the outputs `spec` does not declare, as the host ignores them, and fails the
    /// answer naming them and the declared ones: on Azure the invocation succeeds and the
    /// values are lost without a sign, which a test should not let pass.
    fn drop_undeclared(&mut self, function: &str, spec: &FunctionSpec) {
        let declared: Vec<&str> = spec.outputs().map(|b| b.name.as_str()).collect();
        let undeclared = spec.undeclared_outputs(self.outputs.keys());
        if undeclared.is_empty() {
            return;
        }
        for name in &undeclared {
            self.outputs.remove(name);
        }
        if self.error.is_none() {
            self.error = Some((
                "undeclared_output".into(),
                undeclared_message(function, &undeclared, &declared),
            ));
        }
        self.undeclared_outputs = undeclared;
    }

    /// Whether the invocation succeeded: the host counts it so (2xx), and the function set no
    /// output its function.json does not declare. The host counts an invocation with such an
    /// output a success, and drops the output; here it fails, since that is data lost.
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.status) && self.undeclared_outputs.is_empty()
    }

    /// The failure's machine-readable code (e.g. `bad_request`), if it failed.
    pub fn error_code(&self) -> Option<&str> {
        self.error.as_ref().map(|(code, _)| code.as_str())
    }

    /// The bodies of the events the `eventHub` output `binding` sends, as text, in order: an
    /// array sends one event per element (a string as it is, anything else as its JSON).
    pub fn events_sent(&self, binding: &str) -> Vec<String> {
        match self.outputs.get(binding) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(events)) => events.iter().map(event_text).collect(),
            Some(one) => vec![event_text(one)],
        }
    }

    /// The texts of the messages the `queue` output `binding` puts, in order: an array puts
    /// one message per element. A string is its own text; other JSON is the text the host
    /// makes of it (Newtonsoft's, objects indented).
    pub fn queue_messages(&self, binding: &str) -> Vec<String> {
        let text = |value: &Value| match value {
            Value::String(text) => text.clone(),
            Value::Object(_) | Value::Array(_) => {
                serde_json::to_string_pretty(value).unwrap_or_default()
            }
            other => other.to_string(),
        };
        match self.outputs.get(binding) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(messages)) => messages.iter().map(text).collect(),
            Some(one) => vec![text(one)],
        }
    }

    /// The entities the `table` output `binding` writes (JSON objects), in order.
    pub fn table_entities(&self, binding: &str) -> Vec<Value> {
        match self.outputs.get(binding) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(entities)) => entities.clone(),
            Some(one) => vec![one.clone()],
        }
    }

    /// The bytes the `blob` output `binding` writes (the host decodes the base64 value
    /// [`FunctionOutput::write_blob`] sends), if the function set it.
    pub fn blob_written(&self, binding: &str) -> Option<Vec<u8>> {
        let value = self.outputs.get(binding)?.as_str()?;
        Some(
            base64::engine::general_purpose::STANDARD
                .decode(value)
                .unwrap_or_else(|_| value.as_bytes().to_vec()),
        )
    }

    /// The HTTP response an HTTP function answered through its `http` output `binding` (`res`
    /// by convention; `$return` for the return value), as the host reads it.
    pub fn http_response(&self, binding: &str) -> Option<HttpResponse> {
        let value = if binding == "$return" {
            &self.return_value
        } else {
            self.outputs.get(binding)?
        };
        let object = value.as_object()?;
        let member = |name: &str| {
            object
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        };
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let status = member("statusCode")
            .or_else(|| member("status"))
            .and_then(|s| s.as_u64().or_else(|| s.as_str()?.parse().ok()))
            .unwrap_or(200) as u16;
        Some(HttpResponse {
            status,
            headers: member("headers")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), text(v)))
                .collect(),
            body: member("body").map(text).unwrap_or_default(),
        })
    }

    /// The poison events set aside through the `blob` output `binding`
    /// ([`FunctionOutput::dead_letter`]), each with its reason.
    pub fn dead_letters(&self, binding: &str) -> Vec<Value> {
        self.outputs
            .get(binding)
            .map(FunctionOutput::dead_letters)
            .unwrap_or_default()
    }
}

fn event_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

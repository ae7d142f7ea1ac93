//! The framework seen from the host's side, over a real socket: an HTTP-triggered function
//! gets the request the host wraps in `Data.req` and its response goes back in the `http`
//! output binding (or `ReturnValue` for `$return`), failures map to what the host must do, and
//! an Event Hubs function's outputs reach the answer's `Outputs`.

use std::net::SocketAddr;

use hubhost_functions::prelude::*;
use serde_json::{Value, json};

struct Greet;

#[async_trait]
impl HttpFunction for Greet {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, FunctionError> {
        let Some(name) = request.query.get("name") else {
            return Err(FunctionError::BadRequest {
                code: "no_name",
                message: "say ?name=".into(),
            });
        };
        if name == "boom" {
            panic!("boom");
        }
        let body = json!({
            "hello": name,
            "method": request.method,
            "agent": request.header("user-agent"),
            "id": request.params.get("id"),
            "body": String::from_utf8_lossy(&request.body),
        });
        Ok(HttpResponse::json(201, &body)
            .unwrap()
            .with_header("X-Seen", "yes"))
    }
}

struct Forward;

#[async_trait]
impl EventHubFunction for Forward {
    async fn run(
        &self,
        batch: TriggerBatch,
        _: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let mut output = FunctionOutput::default();
        for event in &batch.events {
            output.send_event_text("copies", event.text().unwrap_or("?"));
        }
        Ok(output)
    }
}

/// Serves `server` on a free loopback port until the test ends.
async fn serve(server: FunctionServer) -> SocketAddr {
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(server.serve(
        ([127, 0, 0, 1], 0).into(),
        move |addr| {
            let _ = tx.send(addr);
        },
        std::future::pending(),
    ));
    rx.await.unwrap()
}

async fn post(addr: SocketAddr, function: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/{function}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn http_invocation(binding: &str, query: Value) -> Value {
    json!({"Data": {binding: {
        "Url": "http://localhost:7071/api/greet/7?name=x",
        "Method": "post",
        "Query": query,
        "Headers": {"User-Agent": ["curl/8"], "Content-Type": ["text/plain"]},
        "Params": {"id": "7"},
        "Body": "hi there",
    }}, "Metadata": {}})
}

#[tokio::test]
async fn an_http_function_answers_through_its_http_output() {
    let server = FunctionServer::builder()
        .http_function("Greet", Greet)
        .build(None)
        .unwrap();
    let addr = serve(server).await;

    let (status, answer) = post(
        addr,
        "Greet",
        &http_invocation("req", json!({"name": "Ada"})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let res = &answer["Outputs"]["res"];
    assert_eq!(res["statusCode"], 201, "{answer}");
    assert_eq!(res["headers"]["X-Seen"], "yes");
    assert_eq!(res["headers"]["Content-Type"], "application/json");
    let body: Value = serde_json::from_str(res["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        body,
        json!({"hello": "Ada", "method": "POST", "agent": "curl/8", "id": "7", "body": "hi there"})
    );

    // A query the host sent as a JSON string reads the same.
    let (_, answer) = post(
        addr,
        "Greet",
        &http_invocation("req", json!("{\"name\":\"Bo\"}")),
    )
    .await;
    assert!(
        answer["Outputs"]["res"]["body"]
            .as_str()
            .unwrap()
            .contains("\"Bo\""),
        "{answer}"
    );

    // The function's refusal is a 4xx for the host; a panic a 500, the server still up.
    let (status, answer) = post(addr, "Greet", &http_invocation("req", json!({}))).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("no_name"))
    );
    let (status, answer) = post(
        addr,
        "Greet",
        &http_invocation("req", json!({"name": "boom"})),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (500, Some("handler_panic"))
    );
    // A request without the trigger's binding names what is missing.
    let (status, answer) = post(addr, "Greet", &http_invocation("request", json!({}))).await;
    assert_eq!(status, 400);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'req'"),
        "{answer}"
    );
    let (status, _) = post(
        addr,
        "Greet",
        &http_invocation("req", json!({"name": "Ada"})),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_app_folder_decides_bindings_return_values_and_what_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path();
    std::fs::write(app.join("host.json"), r#"{"version":"2.0"}"#).unwrap();
    let function = |name: &str, bindings: Value| {
        std::fs::create_dir_all(app.join(name)).unwrap();
        std::fs::write(
            app.join(name).join("function.json"),
            json!({"bindings": bindings}).to_string(),
        )
        .unwrap();
    };
    function(
        "Greet",
        json!([
        {"type": "httpTrigger", "direction": "in", "name": "request", "methods": ["post"]},
        {"type": "http", "direction": "out", "name": "$return"}]),
    );
    function(
        "Forward",
        json!([
        {"type": "eventHubTrigger", "direction": "in", "name": "events", "eventHubName": "h", "cardinality": "many", "dataType": "string"},
        {"type": "eventHub", "direction": "out", "name": "copies", "eventHubName": "c"}]),
    );
    function(
        "Missing",
        json!([{"type": "httpTrigger", "direction": "in", "name": "req"}]),
    );
    let server = FunctionServer::builder()
        .http_function("Greet", Greet)
        .function("Forward", Forward)
        .build(Some(app))
        .unwrap();
    assert_eq!(server.function_names(), ["Forward", "Greet"]);
    let addr = serve(server).await;

    let (status, answer) = post(
        addr,
        "Greet",
        &http_invocation("request", json!({"name": "Cy"})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["ReturnValue"]["statusCode"], 201, "{answer}");
    assert!(
        answer["Outputs"].as_object().unwrap().is_empty(),
        "{answer}"
    );

    let request = json!({"Data": {"events": ["a", "b"]}, "Metadata": {
        "PartitionContext": {"PartitionId": "0", "EventHubName": "h", "ConsumerGroup": "$Default"},
        "SequenceNumberArray": [1, 2]}});
    let (status, answer) = post(addr, "Forward", &request).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["Outputs"]["copies"], json!(["a", "b"]));

    let (status, _) = post(addr, "Missing", &http_invocation("req", json!({}))).await;
    assert_eq!(status, 404);
}

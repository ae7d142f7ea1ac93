//! `hubhost invoke`: one batch to one function, as the host sends it, and the answer as the
//! host reads it, on stdout (see `hubhost_host::emulate::invoke`).

use std::path::PathBuf;

use hubhost_host::emulate::invoke::{self, InvokeOptions};

/// Send one batch, HTTP request or timer firing to one function.
///
/// Send one batch (or one HTTP request, or one timer firing) to one function exactly as the
/// Functions host would, and print the host's view of the answer as JSON: status, each output
/// with what the host would do with it, logs, return value, an HTTP function's response. Exits non-zero unless the host would take every answer (a 2xx JSON object).
#[derive(clap::Args)]
pub struct Args {
    /// The function to invoke (a folder of the app with an eventHubTrigger, an httpTrigger or
    /// a timerTrigger).
    pub function: String,
    /// Function app folder (host.json, */function.json, local.settings.json).
    #[arg(long, default_value = "function_app")]
    pub app: PathBuf,
    /// Events to send: a JSON array or NDJSON, each event a body (text or JSON) or an object
    /// {"body", "partitionKey"?, "properties"?, "offset"?, "systemProperties"?} [default: one
    /// sample event].
    #[arg(long)]
    pub events: Option<PathBuf>,
    /// The partition the batch comes from.
    #[arg(long, default_value = "0")]
    pub partition: String,
    /// Call the handler running at this URL (e.g. http://127.0.0.1:7072) instead of starting
    /// the app's.
    #[arg(long)]
    pub url: Option<String>,
    /// Also write each request to stderr as the host sends it: its line, its headers and its
    /// body, byte for byte (the body goes chunked on the wire).
    #[arg(long)]
    pub show_request: bool,
    /// An HTTP function's method [default: the first its function.json lists, else GET].
    #[arg(long)]
    pub method: Option<String>,
    /// An HTTP function's path and query, under the route prefix (e.g. /api/items/5?x=1)
    /// [default: its route].
    #[arg(long)]
    pub path: Option<String>,
    /// An HTTP function's request body.
    #[arg(long)]
    pub body: Option<String>,
    #[command(flatten)]
    pub outputs: super::OutboxArgs,
}

pub async fn run(args: Args) -> Result<(), String> {
    let options = InvokeOptions {
        app: args.app,
        function: args.function,
        events: args.events,
        partition: args.partition,
        url: args.url,
        show_request: args.show_request,
        method: args.method,
        path: args.path,
        body: args.body,
        outbox: args.outputs.folder(),
    };
    let views = invoke::run(&options).await.map_err(|e| e.to_string())?;
    // One invocation (cardinality many) prints its answer; one per event (cardinality one)
    // prints them in order, as an array.
    let shown = match views.as_slice() {
        [one] => one.clone(),
        all => serde_json::Value::Array(all.to_vec()),
    };
    println!("{}", serde_json::to_string_pretty(&shown).expect("JSON"));
    // Outputs the host would drop: it counts a success, but the values are lost.
    let dropped: Vec<&str> = views
        .iter()
        .filter_map(|v| v["hostDrops"].as_str())
        .collect();
    if let Some(first) = dropped.first() {
        return Err(format!(
            "{first}{}",
            if dropped.len() > 1 {
                format!(" ({} invocations)", dropped.len())
            } else {
                String::new()
            }
        ));
    }
    let failed: Vec<String> = views
        .iter()
        .filter(|v| v["succeeded"] != true)
        .map(
            |v| match (v["error"]["message"].as_str(), v["hostError"].as_str()) {
                (Some(message), _) => format!("{} ({message})", v["status"]),
                (None, Some(host)) => format!("{} ({host})", v["status"]),
                (None, None) => v["status"].to_string(),
            },
        )
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {} invocations failed: the handler answered {}",
            failed.len(),
            views.len(),
            failed.join(", ")
        ))
    }
}

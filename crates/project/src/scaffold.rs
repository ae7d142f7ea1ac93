//! `hubhost new <dir>`: a new Rust custom-handler function app, as `func init
//! --worker-runtime custom` and `func new` make one for other languages — a Cargo project on
//! `hubhost-functions` with one Event Hubs function, its script root (`function_app/`: host.json
//! starting the binary, the function's function.json, local.settings.json for the local hub), a
//! README, sample events for `hubhost invoke`, the `Cargo.lock` this build of hubhost was tested
//! with ([`crate::lockfile`]), and tests in two tiers: a unit test calling the
//! function as the host does, in-process (`hubhost_functions::testing`), and an integration test
//! running the app under the emulated host on a local hub (`hubhost_testkit::LocalApp`) — both
//! with plain `cargo test`, nothing installed or running.
//!
//! The plan ([`Scaffold::files`]) is pure; [`Scaffold::write`] puts it on disk.

use std::path::{Path, PathBuf};

/// The trigger's `cardinality`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Cardinality {
    One,
    Many,
}

/// The trigger's `dataType` (`unset`: no `dataType`, so the host JSON-parses `many` bodies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DataType {
    String,
    Binary,
    Unset,
}

/// Where the new project gets `hubhost-functions` from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framework {
    /// A checkout's `crates/functions`.
    Path(PathBuf),
    /// A registry version requirement, e.g. `0.1`.
    Version(String),
}

impl Framework {
    /// This build's own checkout when it still exists (`cargo run -- new …` from a clone), else
    /// the version of this build.
    pub fn default_for_this_build() -> Self {
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../functions");
        if checkout.join("Cargo.toml").is_file() {
            Framework::Path(checkout.canonicalize().unwrap_or(checkout))
        } else {
            Framework::Version(env!("CARGO_PKG_VERSION").to_string())
        }
    }

    /// `path` when it names a folder, else a version requirement.
    pub fn parse(value: &str) -> Self {
        let path = Path::new(value);
        if path.is_dir() {
            Framework::Path(path.canonicalize().unwrap_or_else(|_| path.to_path_buf()))
        } else {
            Framework::Version(value.to_string())
        }
    }

    fn dependency(&self) -> String {
        self.dependency_with(&[])
    }

    /// The dependency with these features turned on.
    fn dependency_with(&self, features: &[&str]) -> String {
        let features = if features.is_empty() {
            String::new()
        } else {
            format!(", features = {features:?}")
        };
        match self {
            Framework::Path(p) => format!("{{ path = {:?}{features} }}", p.display().to_string()),
            Framework::Version(v) if features.is_empty() => format!("{v:?}"),
            Framework::Version(v) => format!("{{ version = {v:?}{features} }}"),
        }
    }

    /// The test kit, from the same place: the checkout's `crates/testkit`, or the same version.
    fn testkit_dependency(&self) -> String {
        match self {
            Framework::Path(p) => Framework::Path(p.with_file_name("testkit")).dependency(),
            Framework::Version(_) => self.dependency(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Scaffold {
    /// The Cargo package and binary name.
    pub package: String,
    /// The function's name (its folder in `function_app/`, its route, its Rust type).
    pub function: String,
    pub event_hub: String,
    pub consumer_group: String,
    pub cardinality: Cardinality,
    pub data_type: DataType,
    /// A Storage queue the function puts one message on per event (a `queue` output named
    /// `queue`), or none.
    pub queue_output: Option<String>,
    /// An event hub the function forwards each event to (an `eventHub` output named `out`),
    /// or none. At most one of the two outputs.
    pub event_hub_output: Option<String>,
    pub framework: Framework,
}

/// The new function's output, if it has one.
enum Output<'a> {
    Queue(&'a str),
    EventHub(&'a str),
}

#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error(
        "`{0}` cannot name a Cargo package: use letters, digits, `-` and `_`, starting with a letter"
    )]
    PackageName(String),
    #[error(
        "`{0}` cannot name a function: use letters, digits and `_`, starting with a letter (it is also the Rust type)"
    )]
    FunctionName(String),
    #[error(
        "`{0}` is not a valid event hub or consumer group name (Event Hubs' rule: letters, digits, `.`, `-` and `_`, starting and ending with a letter or a digit; at most 256 characters for a hub, 50 for a consumer group, which may also be `$Default`)"
    )]
    EntityName(String),
    #[error(
        "`{0}` is not a valid queue name (Azure's rule: 3 to 63 lowercase letters, digits and single hyphens, starting and ending with a letter or a digit)"
    )]
    QueueName(String),
    #[error("a new function has one output: a queue output or an event hub output, not both")]
    TwoOutputs,
    #[error("{0} exists and is not empty: pick a new folder")]
    NotEmpty(PathBuf),
    /// The lock compiled into this build cannot be read (a bug in hubhost's build).
    #[error("this build's Cargo.lock: {0}")]
    Lock(#[from] crate::lockfile::LockError),
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Scaffold {
    /// The defaults for `dir`: the package is named after the folder.
    pub fn for_dir(dir: &Path) -> Self {
        let package = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("my-function")
            .to_string();
        Scaffold {
            package,
            function: "ProcessEvents".into(),
            event_hub: "sensors".into(),
            consumer_group: "$Default".into(),
            cardinality: Cardinality::Many,
            data_type: DataType::String,
            queue_output: None,
            event_hub_output: None,
            framework: Framework::default_for_this_build(),
        }
    }

    /// The unit test's batch: two events, or one for a single-event trigger.
    fn test_events(&self) -> &'static str {
        match self.cardinality {
            Cardinality::Many => r#".text("hello").text("world")"#,
            Cardinality::One => r#".text("hello")"#,
        }
    }

    /// What the function logs for [`test_events`](Self::test_events) on partition 3.
    fn test_log(&self) -> &'static str {
        match self.cardinality {
            Cardinality::Many => "partition 3, sequence numbers 0..=1: 10 bytes",
            Cardinality::One => "partition 3, sequence numbers 0..=0: 5 bytes",
        }
    }

    fn output(&self) -> Option<Output<'_>> {
        match (&self.queue_output, &self.event_hub_output) {
            (Some(queue), _) => Some(Output::Queue(queue)),
            (None, Some(hub)) => Some(Output::EventHub(hub)),
            (None, None) => None,
        }
    }

    /// hubhost-functions, with `once` for a function with an output.
    fn framework_dependency(&self) -> String {
        match self.output() {
            None => self.framework.dependency(),
            Some(_) => self.framework.dependency_with(&["once"]),
        }
    }

    fn imports(&self) -> &'static str {
        match self.output() {
            None => "",
            Some(_) => "use hubhost_functions::once::Once;",
        }
    }

    /// The function's type: a unit struct, or one holding its `Once`.
    fn struct_definition(&self) -> String {
        match self.output() {
            None => format!("/// The function.\npub struct {};", self.function),
            Some(_) => format!(
                "/// The function. Its outputs once under redelivery: `once` says which events still\n/// owe theirs.\npub struct {} {{\n    pub once: Once,\n}}",
                self.function
            ),
        }
    }

    /// The function's value, with `once` for its `Once`.
    fn value(&self, once: &str) -> String {
        match self.output() {
            None => self.function.clone(),
            Some(_) => format!("{} {{ once: {once} }}", self.function),
        }
    }

    /// What the function answers: nothing but its log, or one output per event.
    fn answer(&self) -> &'static str {
        match self.output() {
            None => "Ok(FunctionOutput::default())",
            Some(Output::Queue(_)) => {
                "// One message per event, its body as text, through the `queue` output; an event
        // delivered again (Event Hubs delivers at least once) owes none.
        let mut output = FunctionOutput::default();
        for event in self.once.claim(&batch, context).await? {
            output.put_queue_message(\"queue\", String::from_utf8_lossy(&event.body));
        }
        Ok(output)"
            }
            Some(Output::EventHub(_)) => {
                "// Each event forwarded, its body as text, through the `out` output; an event
        // delivered again (Event Hubs delivers at least once) owes none.
        let mut output = FunctionOutput::default();
        for event in self.once.claim(&batch, context).await? {
            output.send_event_text(\"out\", String::from_utf8_lossy(&event.body));
        }
        Ok(output)"
            }
        }
    }

    /// What the README says of the output.
    fn output_note(&self) -> String {
        match self.output() {
            None => String::new(),
            Some(Output::Queue(queue)) => format!(
                "\n- The function puts one message per event on the queue `{queue}` (its `queue`\n  output): on the storage `AzureWebJobsStorage` names (Azurite's queue service for\n  `UseDevelopmentStorage=true`); with it unset, `hubhost emulate` keeps the messages in\n  `hubhost-data/outbox/{}/queue.jsonl` and says so at start.",
                self.function
            ),
            Some(Output::EventHub(hub)) => format!(
                "\n- The function forwards each event to the event hub `{hub}` (its `eventHub` output\n  `out`), on the same connection as its trigger; `hubhost hub` serves both."
            ),
        }
    }

    /// The unit test's check of the outputs.
    fn test_outputs(&self) -> &'static str {
        match (self.output(), self.cardinality) {
            (None, _) => "",
            (Some(Output::Queue(_)), Cardinality::Many) => {
                r#"assert_eq!(answer.queue_messages("queue"), ["hello", "world"]);"#
            }
            (Some(Output::Queue(_)), Cardinality::One) => {
                r#"assert_eq!(answer.queue_messages("queue"), ["hello"]);"#
            }
            (Some(Output::EventHub(_)), Cardinality::Many) => {
                r#"assert_eq!(answer.events_sent("out"), ["hello", "world"]);"#
            }
            (Some(Output::EventHub(_)), Cardinality::One) => {
                r#"assert_eq!(answer.events_sent("out"), ["hello"]);"#
            }
        }
    }

    fn validate(&self) -> Result<(), ScaffoldError> {
        let starts_with_letter =
            |s: &str| s.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
        if !starts_with_letter(&self.package)
            || !self
                .package
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(ScaffoldError::PackageName(self.package.clone()));
        }
        if !starts_with_letter(&self.function)
            || !self
                .function
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(ScaffoldError::FunctionName(self.function.clone()));
        }
        // Event Hubs' rules, which `hubhost hub` applies: the new project's test serves these
        // names there.
        if !hubhost_hub::config::is_valid_hub_name(&self.event_hub) {
            return Err(ScaffoldError::EntityName(self.event_hub.clone()));
        }
        if !hubhost_hub::config::is_valid_consumer_group_name(&self.consumer_group) {
            return Err(ScaffoldError::EntityName(self.consumer_group.clone()));
        }
        if let Some(queue) = &self.queue_output
            && hubhost_storage::queue::validate_queue_name(queue).is_err()
        {
            return Err(ScaffoldError::QueueName(queue.clone()));
        }
        if let Some(hub) = &self.event_hub_output {
            if self.queue_output.is_some() {
                return Err(ScaffoldError::TwoOutputs);
            }
            if !hubhost_hub::config::is_valid_hub_name(hub) {
                return Err(ScaffoldError::EntityName(hub.clone()));
            }
        }
        Ok(())
    }

    /// Every file of the new project, relative to its folder, with its content.
    pub fn files(&self) -> Result<Vec<(PathBuf, String)>, ScaffoldError> {
        self.validate()?;
        let fill = |template: &str| {
            template
                .replace("{{package}}", &self.package)
                .replace("{{crate}}", &self.package.replace('-', "_"))
                .replace("{{function}}", &self.function)
                .replace("{{hub}}", &self.event_hub)
                .replace("{{group}}", &self.consumer_group)
                .replace("{{framework}}", &self.framework_dependency())
                .replace("{{imports}}", self.imports())
                .replace("{{struct}}", &self.struct_definition())
                .replace("{{value}}", &self.value("Once::from_environment()?"))
                .replace("{{test_value}}", &self.value("Once::in_memory()"))
                .replace(
                    "{{simulated_value}}",
                    &self.value("Once::for_instance(handler.store.clone(), handler.instance)"),
                )
                .replace("{{testkit}}", &self.framework.testkit_dependency())
                .replace("{{test_events}}", self.test_events())
                .replace("{{test_log}}", self.test_log())
                .replace("{{answer}}", self.answer())
                .replace("{{output_note}}", &self.output_note())
                .replace("{{test_outputs}}", self.test_outputs())
                .replace("{{version}}", env!("CARGO_PKG_VERSION"))
        };
        let mut trigger = serde_json::json!({
            "type": "eventHubTrigger",
            "name": "events",
            "direction": "in",
            "eventHubName": self.event_hub,
            "consumerGroup": self.consumer_group,
            "connection": "EventHubConnection",
            "cardinality": match self.cardinality { Cardinality::One => "one", Cardinality::Many => "many" },
        });
        match self.data_type {
            DataType::String => trigger["dataType"] = "string".into(),
            DataType::Binary => trigger["dataType"] = "binary".into(),
            DataType::Unset => {}
        }
        let mut bindings = vec![trigger];
        match self.output() {
            None => {}
            Some(Output::Queue(queue)) => bindings.push(serde_json::json!({
                "type": "queue",
                "name": "queue",
                "direction": "out",
                "queueName": queue,
                "connection": "AzureWebJobsStorage",
            })),
            Some(Output::EventHub(hub)) => bindings.push(serde_json::json!({
                "type": "eventHub",
                "name": "out",
                "direction": "out",
                "eventHubName": hub,
                "connection": "EventHubConnection",
            })),
        }
        let function_json = serde_json::json!({
            "bindings": bindings,
            "retry": {
                "strategy": "exponentialBackoff",
                "maxRetryCount": -1,
                "minimumInterval": "00:00:01",
                "maximumInterval": "00:00:15"
            }
        });
        let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).expect("JSON") + "\n";
        let lock = crate::lockfile::limit_to(crate::lockfile::WORKSPACE_LOCK, DEPENDENCIES)?;
        Ok(vec![
            ("Cargo.toml".into(), fill(CARGO_TOML)),
            ("Cargo.lock".into(), lock),
            ("src/lib.rs".into(), fill(LIB_RS)),
            ("src/main.rs".into(), fill(MAIN_RS)),
            ("tests/local_app.rs".into(), fill(LOCAL_APP_TEST_RS)),
            ("tests/simulation.rs".into(), fill(SIMULATION_TEST_RS)),
            ("events.json".into(), fill(EVENTS_JSON)),
            ("function_app/host.json".into(), fill(HOST_JSON)),
            (
                PathBuf::from("function_app")
                    .join(&self.function)
                    .join("function.json"),
                pretty(&function_json),
            ),
            (
                "function_app/local.settings.json".into(),
                fill(LOCAL_SETTINGS_JSON),
            ),
            ("README.md".into(), fill(README_MD)),
            (
                ".gitignore".into(),
                "/target\n/hubhost-data\n/function_app/hubhost-data\n".into(),
            ),
        ])
    }

    /// Writes the project into `dir`, which must not exist or be empty.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, ScaffoldError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ScaffoldError::Io { path, source }
        };
        let files = self.files()?;
        if dir.exists() && std::fs::read_dir(dir).map_err(io(dir))?.next().is_some() {
            return Err(ScaffoldError::NotEmpty(dir.to_path_buf()));
        }
        let mut written = Vec::new();
        for (relative, content) in files {
            let path = dir.join(&relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::write(&path, content).map_err(io(&path))?;
            written.push(relative);
        }
        // The templates hold names of any length; leave the code as rustfmt would (best effort:
        // a machine without rustfmt gets it unformatted).
        let _ = std::process::Command::new("rustfmt")
            .args(["--edition", "2024"])
            .arg(dir.join("src/lib.rs"))
            .arg(dir.join("src/main.rs"))
            .arg(dir.join("tests/local_app.rs"))
            .arg(dir.join("tests/simulation.rs"))
            .stderr(std::process::Stdio::null())
            .status();
        Ok(written)
    }
}

/// Every package the new project's Cargo.toml names: the roots of its Cargo.lock.
const DEPENDENCIES: &[&str] = &[
    "hubhost-functions",
    "serde",
    "serde_json",
    "tokio",
    "hubhost-testkit",
];

const CARGO_TOML: &str = r#"[package]
name = "{{package}}"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
hubhost-functions = {{framework}}
serde = { version = "1", features = ["derive"] }
serde_json = "1"
tokio = { version = "1", features = ["macros", "rt-multi-thread", "signal"] }

[dev-dependencies]
hubhost-testkit = {{testkit}}

# Its own workspace, wherever the folder is.
[workspace]
"#;

const LIB_RS: &str = r#"//! {{function}}: an Event Hubs function (event hub `{{hub}}`, consumer group `{{group}}`) on
//! hubhost-functions, run by the Functions host as a custom handler (`src/main.rs`). Made by
//! `hubhost new`.
use hubhost_functions::prelude::*;
{{imports}}

{{struct}}

#[async_trait]
impl EventHubFunction for {{function}} {
    /// One batch of one partition, in order; the next batch of that partition waits for the
    /// answer. `Err(FunctionError::Failed { .. })` makes the host's retry policy deliver the
    /// batch again.
    async fn run(
        &self,
        batch: TriggerBatch,
        context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let bytes: usize = batch.events.iter().map(|e| e.body.len()).sum();
        // Your logic: event.text(), event.json::<T>(), event.sequence_number, event.properties…
        context.log(format!(
            "partition {}, sequence numbers {}: {bytes} bytes",
            context.partition().partition_id,
            batch.sequence_label()
        ));
        {{answer}}
    }
}

/// The function called as the host calls it, declared by its function.json — in-process.
#[cfg(test)]
mod tests {
    use super::*;
    use hubhost_functions::testing::HostHarness;

    fn harness() -> HostHarness {
        let app = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("function_app");
        let server = FunctionServer::builder()
            .function("{{function}}", {{test_value}})
            .build(Some(&app))
            .expect("function_app declares {{function}}");
        HostHarness::new(server)
    }

    #[tokio::test]
    async fn a_batch_is_answered_with_its_summary() {
        let batch = TriggerBatch::builder("{{function}}")
            .partition("3")
            {{test_events}}
            .build();
        let answer = harness().invoke(&batch).await;
        assert!(answer.succeeded(), "{answer:?}");
        assert_eq!(answer.logs, ["{{test_log}}"]);
        {{test_outputs}}
    }
}
"#;

const MAIN_RS: &str = r#"//! {{function}}'s custom handler: the executable host.json starts, serving the function on
//! the port the Functions host gives it.
use hubhost_functions::prelude::*;
{{imports}}
use {{crate}}::{{function}};

#[tokio::main]
async fn main() -> Result<(), ServeError> {
    FunctionServer::builder()
        .function("{{function}}", {{value}})
        .run()
        .await
}
"#;

const SIMULATION_TEST_RS: &str = r#"//! {{function}} under a thousand Azures: what Azure does to a function (redelivery, partition
//! moves, a frozen owner, a killed handler, retries, outages), seeded, in virtual time, the
//! emulated Functions host's own code around the function called in-process. A seed gives the
//! same run every time; a failing one is shrunk to the fewest faults that still fail it, and
//! the summary says how to replay it.

use std::path::Path;

use hubhost_functions::prelude::*;
{{imports}}
use hubhost_testkit::{Rehearsal, read_event_bodies};
use {{crate}}::{{function}};

/// The inputs are made from events.json's samples, each with a `deviceId` of its own; each
/// output is matched to its input by that member, so what the function writes must carry it.
#[test]
fn two_hundred_seeds_of_what_azure_does_to_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let samples = read_event_bodies(&root.join("events.json")).unwrap();
    let simulation = Rehearsal::new(0)
        .function("{{function}}")
        .key("deviceId")
        .inputs_like(samples, 100)
        .simulated(&root.join("function_app"), |handler| {
            FunctionServer::builder()
                .function("{{function}}", {{simulated_value}})
                .build(Some(handler.app_folder))
                .expect("function_app declares {{function}}")
        })
        .unwrap();
    let seeds = simulation.seeds(0..200).unwrap();
    assert!(seeds.failing.is_empty(), "{}", seeds.summary());
}
"#;

const HOST_JSON: &str = r#"{
  "version": "2.0",
  "extensionBundle": {
    "id": "Microsoft.Azure.Functions.ExtensionBundle",
    "version": "[4.*, 5.0.0)"
  },
  "customHandler": {
    "description": {
      "defaultExecutablePath": "../target/debug/{{package}}"
    }
  },
  "extensions": {
    "eventHubs": {
      "maxEventBatchSize": 100,
      "batchCheckpointFrequency": 1,
      "prefetchCount": 300,
      "initialOffsetOptions": { "type": "fromStart" }
    }
  }
}
"#;

const LOCAL_SETTINGS_JSON: &str = r#"{
  "IsEncrypted": false,
  "Values": {
    "FUNCTIONS_WORKER_RUNTIME": "custom",
    "EventHubConnection": "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
  }
}
"#;

const README_MD: &str = r#"# {{package}}

An Azure Functions custom handler in Rust with one Event Hubs function, `{{function}}` (event
hub `{{hub}}`, consumer group `{{group}}`), made by `hubhost new` ({{version}}).

- `src/lib.rs`: the function, on `hubhost-functions` (the host contract, the server);
  `src/main.rs`: its custom handler, the executable host.json starts.
- `function_app/`: the script root the Functions host reads: `host.json` (starts the binary),
  `{{function}}/function.json` (the trigger and its retry policy), `local.settings.json` (the
  local event hub's connection; checkpoints go to `./hubhost-data` unless `AzureWebJobsStorage`
  is set, e.g. to `UseDevelopmentStorage=true` for Azurite).{{output_note}}

## Test it

`cargo test` runs three tiers, with nothing installed or running:

- `src/lib.rs`'s unit test calls the function exactly as the Functions host does — the request
  encoded for its function.json, the answer read back as the host reads it — in-process
  (`hubhost_functions::testing`);
- `tests/local_app.rs` runs the app as Azure runs it: the emulated host and a local event hub
  inside the test (`hubhost_testkit::LocalApp`), this package's executable as the handler; it
  sends events and waits until the function has processed every one. Its second test rehearses
  what Azure does to a function (`hubhost_testkit::Rehearsal`: redelivery, partition moves, a
  frozen owner, retries, outages) and checks every event is processed and each output comes
  out once; `hubhost rehearse` does the same from this folder;
- `tests/simulation.rs` rehearses the same over 200 seeds in a few seconds: the emulated host's
  own code in virtual time around the function called in-process, each seed the same run every
  time, a failing one shrunk to the fewest faults that fail it (`hubhost rehearse --simulate
  --seeds 200` does it with the built handler).

Both rehearsals make their inputs from `events.json`'s samples, each with a `deviceId` of its
own, and match each output to its input by that member: give the samples your function's own
events, and keep the member in what the function writes (or name another with `.key(…)`).

`hubhost docs --open` documents the hubhost crates this project uses, the test kit included.
`Cargo.lock` holds the dependency versions this release of hubhost was tested with; `cargo
update` moves to newer ones when you choose to.

## Run it locally

From this folder; `hubhost hub` and `hubhost emulate` each in a terminal of their own:

```bash
hubhost invoke {{function}} --events events.json          # one batch, the answer as the host reads it
hubhost hub                                             # a local Event Hubs on 127.0.0.1:5672
hubhost emulate --app function_app --watch              # rebuilds and restarts the handler as you edit
hubhost simulate --hub {{hub}} --homes 100 --duration 20   # something to read (or send your own events)
```

## Deploy it

```bash
hubhost package --app function_app --out app.zip   # needs cargo-zigbuild and ziglang (pip)
az functionapp deployment source config-zip -g RG -n NAME --src app.zip
```

`hubhost package` builds `{{package}}` for the Functions Linux images (glibc 2.28), puts it
beside host.json (the packaged host.json names it there), and checks the zip: host.json and
function.json against the official schemas, the executable runnable, no local.settings.json.
Deploy to a Flex Consumption app with the `custom` runtime; give it
`EventHubConnection__fullyQualifiedNamespace` and `AzureWebJobsStorage__accountName` so it signs
in with its managed identity (hubhost's docs/deploy.md and docs/identity.md).
"#;

const LOCAL_APP_TEST_RS: &str = r#"//! {{function}} as Azure runs it: the emulated Functions host and a local event hub inside
//! this test (hubhost-testkit), this package's executable as the custom handler.

use std::path::Path;
use std::time::Duration;

use hubhost_testkit::{LocalApp, Rehearsal, read_event_bodies};

#[tokio::test(flavor = "multi_thread")]
async fn every_event_sent_is_processed() {
    let app = LocalApp::start(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/function_app")),
        Path::new(env!("CARGO_BIN_EXE_{{package}}")),
    )
    .await
    .unwrap();
    let events: Vec<String> = (0..100).map(|i| format!("event {i}")).collect();
    app.send_texts("{{hub}}", events).await.unwrap();
    app.wait_processed("{{function}}", 100, Duration::from_secs(60))
        .await
        .unwrap();
    app.stop().await.unwrap();
}

/// {{function}} while what Azure does to a function happens to it, from a seeded plan: the
/// handler killed mid-batch, a second instance joining and leaving, an owner frozen past its
/// ownership, output bindings failing, links detached, the checkpoint store down. Every event
/// must be processed; once the function has outputs (events, blobs, queue messages, any other
/// binding's values), each input's outputs must come out once (`hubhost_functions::once::Once`
/// keeps them so). The inputs are made from events.json's samples, each with a `deviceId` of
/// its own, and an output names its input by that member. A failure prints the seed that
/// reproduces it, and per missing input what was sent and what the outputs held.
#[tokio::test(flavor = "multi_thread")]
async fn rehearsal_of_what_azure_does_to_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let samples = read_event_bodies(&root.join("events.json")).unwrap();
    let report = Rehearsal::new(1)
        .function("{{function}}")
        .key("deviceId")
        .inputs_like(samples, 100)
        .run(
            &root.join("function_app"),
            Path::new(env!("CARGO_BIN_EXE_{{package}}")),
        )
        .await
        .unwrap();
    assert!(report.passed, "{}", report.summary());
}
"#;

const EVENTS_JSON: &str = r#"[
  { "body": { "deviceId": "d-1", "temperature": 21.5 }, "partitionKey": "d-1", "properties": { "source": "sample" } },
  { "body": "a plain text event" }
]
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// The content of the new project's file `name`.
    fn file_in(files: &[(PathBuf, String)], name: &str) -> String {
        files
            .iter()
            .find(|(p, _)| p == Path::new(name))
            .map(|(_, c)| c.clone())
            .unwrap_or_else(|| panic!("no {name}"))
    }

    /// The binding of type `kind` the new project's function.json declares, read as the host
    /// reads it.
    fn declared_output(
        files: &[(PathBuf, String)],
        kind: &str,
    ) -> hubhost_functions::function_app::BindingSpec {
        let function: serde_json::Value =
            serde_json::from_str(&file_in(files, "function_app/ProcessEvents/function.json"))
                .unwrap();
        let spec =
            hubhost_functions::function_app::FunctionSpec::from_json("ProcessEvents", &function)
                .unwrap();
        spec.bindings.into_iter().find(|b| b.is(kind)).unwrap()
    }

    fn scaffold() -> Scaffold {
        let mut s = Scaffold::for_dir(Path::new("/tmp/orders-counter"));
        s.framework = Framework::Version("0.1".into());
        s
    }

    #[test]
    fn the_project_names_its_package_function_and_trigger() {
        let mut s = scaffold();
        s.function = "CountOrders".into();
        s.event_hub = "orders".into();
        s.cardinality = Cardinality::One;
        s.data_type = DataType::Binary;
        let files = s.files().unwrap();
        let file = |name: &str| file_in(&files, name);
        assert!(file("Cargo.toml").contains("name = \"orders-counter\""));
        assert!(file("Cargo.toml").contains("hubhost-functions = \"0.1\""));
        assert!(file("src/main.rs").contains(".function(\"CountOrders\", CountOrders)"));
        assert!(file("src/main.rs").contains("use orders_counter::CountOrders;"));
        assert!(!file("src/lib.rs").contains("Once"));
        // A single-event trigger's unit test sends one event per invocation.
        assert!(file("src/lib.rs").contains(r#".text("hello")"#));
        assert!(!file("src/lib.rs").contains(r#".text("world")"#));
        let simulation = file("tests/simulation.rs");
        assert!(simulation.contains(".function(\"CountOrders\", CountOrders)"));
        assert!(simulation.contains(".seeds(0..200)"));
        assert!(file("Cargo.toml").contains("hubhost-testkit = \"0.1\""));
        assert!(file("tests/local_app.rs").contains("CARGO_BIN_EXE_orders-counter"));
        let events: serde_json::Value = serde_json::from_str(&file("events.json")).unwrap();
        assert!(events.as_array().is_some_and(|a| !a.is_empty()));
        assert!(file("function_app/host.json").contains("../target/debug/orders-counter"));
        let function: serde_json::Value =
            serde_json::from_str(&file("function_app/CountOrders/function.json")).unwrap();
        let spec =
            hubhost_functions::function_app::FunctionSpec::from_json("CountOrders", &function)
                .unwrap();
        let trigger = spec.event_hub_trigger().unwrap();
        assert_eq!(trigger.event_hub_name, "orders");
        assert_eq!(
            trigger.cardinality,
            hubhost_functions::function_app::Cardinality::One
        );
        assert_eq!(
            trigger.data_type,
            hubhost_functions::function_app::DataType::Binary
        );
        assert!(!files.iter().any(|(_, c)| c.contains("{{")));
    }

    #[test]
    fn the_lock_holds_this_builds_versions_of_every_dependency_the_manifest_names() {
        let files = scaffold().files().unwrap();
        let file = |name: &str| file_in(&files, name);
        let manifest = file("Cargo.toml");
        let named: Vec<&str> = manifest
            .lines()
            .filter_map(|line| line.split_once(" = ").map(|(name, _)| name))
            .filter(|name| !["name", "version", "edition", "publish"].contains(name))
            .collect();
        assert_eq!(named, DEPENDENCIES);
        let lock = file("Cargo.lock");
        let workspace = crate::lockfile::WORKSPACE_LOCK;
        for name in DEPENDENCIES {
            let entry = format!("[[package]]\nname = \"{name}\"\nversion = ");
            let version = |lock: &str| {
                let at = lock.find(&entry)? + entry.len();
                lock[at..].lines().next().map(str::to_string)
            };
            assert!(version(&lock).is_some(), "{name} is not in the lock");
            assert_eq!(version(&lock), version(workspace), "{name}");
        }
    }

    #[test]
    fn names_that_cannot_work_are_refused() {
        let mut s = scaffold();
        s.function = "Count Orders".into();
        assert!(matches!(s.files(), Err(ScaffoldError::FunctionName(_))));
        let mut s = scaffold();
        s.package = "9lives".into();
        assert!(matches!(s.files(), Err(ScaffoldError::PackageName(_))));
        let mut s = scaffold();
        s.event_hub = "a/b".into();
        assert!(matches!(s.files(), Err(ScaffoldError::EntityName(_))));
        let mut s = scaffold();
        s.queue_output = Some("Work".into());
        assert!(matches!(s.files(), Err(ScaffoldError::QueueName(_))));
        let mut s = scaffold();
        (s.queue_output, s.event_hub_output) = (Some("work".into()), Some("out".into()));
        assert!(matches!(s.files(), Err(ScaffoldError::TwoOutputs)));
    }

    #[test]
    fn an_event_hub_output_forwards_each_event_once_and_the_rehearsals_key_by_the_samples_member() {
        let mut s = scaffold();
        s.event_hub_output = Some("forwarded".into());
        let files = s.files().unwrap();
        let file = |name: &str| file_in(&files, name);
        let out = declared_output(&files, "eventHub");
        assert_eq!(out.name, "out");
        assert_eq!(out.event_hub_name(), Some("forwarded"));
        assert!(file("src/lib.rs").contains(r#"output.send_event_text("out""#));
        assert!(file("src/lib.rs").contains(r#"answer.events_sent("out")"#));
        assert!(file("src/lib.rs").contains("self.once.claim(&batch, context)"));
        // Both rehearsals make their inputs from events.json and match on its samples' member.
        let samples = file("events.json");
        assert!(samples.contains(r#""deviceId""#), "{samples}");
        for test in ["tests/simulation.rs", "tests/local_app.rs"] {
            let text = file(test);
            assert!(text.contains(r#".key("deviceId")"#), "{test}");
            assert!(text.contains(r#"root.join("events.json")"#), "{test}");
        }
    }

    #[test]
    fn a_queue_output_is_declared_and_given_one_message_per_event() {
        let mut s = scaffold();
        s.queue_output = Some("work-items".into());
        let files = s.files().unwrap();
        let file = |name: &str| file_in(&files, name);
        let queue = declared_output(&files, "queue");
        assert_eq!(queue.name, "queue");
        assert_eq!(queue.setting("queueName"), Some("work-items"));
        assert!(file("src/lib.rs").contains(r#"output.put_queue_message("queue""#));
        assert!(file("src/lib.rs").contains(r#"answer.queue_messages("queue")"#));
        assert!(file("src/lib.rs").contains("self.once.claim(&batch, context)"));
        assert!(
            file("tests/simulation.rs")
                .contains("Once::for_instance(handler.store.clone(), handler.instance)")
        );
        assert!(
            file("Cargo.toml")
                .contains(r#"hubhost-functions = { version = "0.1", features = ["once"] }"#)
        );
        assert!(!file("src/main.rs").contains("{{"));
        // Without the flag, no output.
        assert!(
            !scaffold()
                .files()
                .unwrap()
                .iter()
                .any(|(_, c)| c.contains("put_queue_message"))
        );
    }
}

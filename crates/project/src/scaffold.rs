//! `hubhost new <dir>`: a new Rust custom-handler function app, as `func init
//! --worker-runtime custom` and `func new` make one for other languages — a Cargo project on
//! `hubhost-functions` with one Event Hubs function, its script root (`function_app/`: host.json
//! starting the binary, the function's function.json, local.settings.json for the local hub), a
//! README, and a test that runs it under `hubhost emulate` on `hubhost hub`.
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
        match self {
            Framework::Path(p) => format!("{{ path = {:?} }}", p.display().to_string()),
            Framework::Version(v) => format!("{v:?}"),
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
    pub framework: Framework,
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
        "`{0}` is not a valid event hub or consumer group name (letters, digits, `.`, `-`, `_`, `$`; starting with a letter, a digit or `$`)"
    )]
    EntityName(String),
    #[error("{0} exists and is not empty: pick a new folder")]
    NotEmpty(PathBuf),
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
            framework: Framework::default_for_this_build(),
        }
    }

    /// `hubhost hub --hub` for the trigger's event hub and consumer group.
    fn hub_flag(&self) -> String {
        if self.consumer_group.eq_ignore_ascii_case("$Default") {
            format!("{}:4", self.event_hub)
        } else {
            format!("{}:4:{}", self.event_hub, self.consumer_group)
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
        // The rule `hubhost hub` applies: the new project's test serves these names there.
        for name in [&self.event_hub, &self.consumer_group] {
            if !hubhost_hub::config::is_valid_name(name) {
                return Err(ScaffoldError::EntityName(name.clone()));
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
                .replace("{{function}}", &self.function)
                .replace("{{hub}}", &self.event_hub)
                .replace("{{group}}", &self.consumer_group)
                .replace("{{hub_flag}}", &self.hub_flag())
                .replace("{{framework}}", &self.framework.dependency())
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
        let function_json = serde_json::json!({
            "bindings": [trigger],
            "retry": {
                "strategy": "exponentialBackoff",
                "maxRetryCount": -1,
                "minimumInterval": "00:00:01",
                "maximumInterval": "00:00:15"
            }
        });
        let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).expect("JSON") + "\n";
        Ok(vec![
            ("Cargo.toml".into(), fill(CARGO_TOML)),
            ("src/main.rs".into(), fill(MAIN_RS)),
            ("tests/emulate.rs".into(), fill(EMULATE_TEST_RS)),
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
            .arg(dir.join("src/main.rs"))
            .arg(dir.join("tests/emulate.rs"))
            .stderr(std::process::Stdio::null())
            .status();
        Ok(written)
    }
}

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

# Its own workspace, wherever the folder is.
[workspace]
"#;

const MAIN_RS: &str = r#"//! {{function}}: an Event Hubs function (event hub `{{hub}}`, consumer group `{{group}}`) on
//! hubhost-functions, run by the Functions host as a custom handler. Made by `hubhost new`.
use hubhost_functions::prelude::*;

struct {{function}};

#[async_trait]
impl EventHubFunction for {{function}} {
    /// One batch of one partition, in order; the next batch of that partition waits for the
    /// answer. `Err(FunctionError::Failed { .. })` makes the host's retry policy deliver the
    /// batch again.
    async fn run(
        &self,
        batch: TriggerBatch,
        _context: &FunctionContext,
    ) -> Result<FunctionOutput, FunctionError> {
        let bytes: usize = batch.events.iter().map(|e| e.body.len()).sum();
        // Your logic: event.text(), event.json::<T>(), event.sequence_number, event.properties…
        let mut output = FunctionOutput::default();
        output.log(format!(
            "partition {}: {} events ({bytes} bytes), sequence numbers {}",
            batch.partition.partition_id,
            batch.events.len(),
            batch.sequence_label()
        ));
        Ok(output)
    }
}

#[tokio::main]
async fn main() -> Result<(), ServeError> {
    FunctionServer::builder()
        .function("{{function}}", {{function}})
        .run()
        .await
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

- `src/main.rs`: the function, on `hubhost-functions` (the host contract, the server).
- `function_app/`: the script root the Functions host reads: `host.json` (starts the binary),
  `{{function}}/function.json` (the trigger and its retry policy), `local.settings.json` (the
  local event hub's connection; checkpoints go to `./hubhost-data` unless `AzureWebJobsStorage`
  is set, e.g. to `UseDevelopmentStorage=true` for Azurite).

## Run it locally

```bash
hubhost hub &                                    # a local Event Hubs on 127.0.0.1:5672
hubhost simulate --homes 100 --duration 30 &     # something to read (or send your own events)
cargo build && hubhost emulate --app function_app
```

## Test it

`cargo test` runs the function under `hubhost emulate` on a `hubhost hub` it starts, sends
events and waits until the function has processed every one. It needs `hubhost` on `PATH` (or
its path in `HUBHOST`).

## Deploy it

```bash
hubhost package --app function_app --out app.zip   # needs cargo-zigbuild and `pip install ziglang`
az functionapp deployment source config-zip -g RG -n NAME --src app.zip
```

`hubhost package` builds `{{package}}` for the Functions Linux images (glibc 2.28), puts it
beside host.json (the packaged host.json names it there), and checks the zip: host.json and
function.json against the official schemas, the executable runnable, no local.settings.json.
Deploy to a Flex Consumption app with the `custom` runtime; give it
`EventHubConnection__fullyQualifiedNamespace` and `AzureWebJobsStorage__accountName` so it signs
in with its managed identity (hubhost's docs/deploy.md and docs/identity.md).
"#;

const EMULATE_TEST_RS: &str = r#"//! The function under `hubhost emulate` on a `hubhost hub`, as it runs in Azure: events sent
//! to the hub are each processed by the function. Needs `hubhost` on PATH (or `HUBHOST`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FUNCTION: &str = "{{function}}";
const EVENTS: u64 = 120;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn hubhost() -> Command {
    Command::new(std::env::var_os("HUBHOST").unwrap_or_else(|| "hubhost".into()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A copy of `function_app` that starts this build's binary.
fn app_copy(dir: &Path) -> PathBuf {
    let app = dir.join("function_app");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("function_app");
    let function = app.join(FUNCTION);
    std::fs::create_dir_all(&function).unwrap();
    std::fs::copy(source.join(FUNCTION).join("function.json"), function.join("function.json")).unwrap();
    let mut host: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("host.json")).unwrap()).unwrap();
    host["customHandler"]["description"]["defaultExecutablePath"] =
        env!("CARGO_BIN_EXE_{{package}}").into();
    std::fs::write(app.join("host.json"), host.to_string()).unwrap();
    app
}

/// `hubhost_events_processed_total` of the function, from emulate's `/metrics`.
fn processed(out: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(out).ok()?;
    let url = text.lines().find_map(|l| l.trim().strip_prefix("metrics: http://"))?;
    let (authority, path) = url.split_once('/')?;
    let mut stream = std::net::TcpStream::connect(authority).ok()?;
    write!(stream, "GET /{path} HTTP/1.0\r\nHost: {authority}\r\n\r\n").ok()?;
    let mut page = String::new();
    stream.read_to_string(&mut page).ok()?;
    let label = format!("function=\"{FUNCTION}\"");
    Some(
        page.lines()
            .filter(|l| l.starts_with("hubhost_events_processed_total{") && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

#[test]
fn every_event_sent_is_processed_under_emulate() {
    let dir = std::env::temp_dir().join(format!("{{package}}-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let connection = format!(
        "Endpoint=sb://localhost:{port};SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
    );
    let _hub = Killed(
        hubhost()
            .args(["hub", "--in-memory", "--port", &port.to_string(), "--hub", "{{hub_flag}}"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("hubhost runs (put it on PATH, or its path in HUBHOST)"),
    );
    let sent = hubhost()
        .args(["simulate", "--homes", "10", "--unthrottled", "--events", &EVENTS.to_string()])
        .args(["--connection", &connection, "--hub", "{{hub}}"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(sent.success(), "hubhost simulate failed");

    let out = dir.join("emulate.out");
    let _emulate = Killed(
        hubhost()
            .args(["emulate", "--app"])
            .arg(app_copy(&dir))
            .args(["--metrics-port", "0", "--storage"])
            .arg(dir.join("storage"))
            .env("EventHubConnection", &connection)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(dir.join("emulate.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while processed(&out) != Some(EVENTS as f64) {
        assert!(
            Instant::now() < deadline,
            "processed {:?} of {EVENTS} events; emulate's log:\n{}",
            processed(&out),
            std::fs::read_to_string(dir.join("emulate.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

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
        let file = |name: &str| {
            files
                .iter()
                .find(|(p, _)| p == Path::new(name))
                .map(|(_, c)| c.clone())
                .unwrap_or_else(|| panic!("no {name}"))
        };
        assert!(file("Cargo.toml").contains("name = \"orders-counter\""));
        assert!(file("Cargo.toml").contains("hubhost-functions = \"0.1\""));
        assert!(file("src/main.rs").contains(".function(\"CountOrders\", CountOrders)"));
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
    }
}

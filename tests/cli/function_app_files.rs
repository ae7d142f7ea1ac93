//! The function app as `func start` and Azure load it: host.json and every function.json are
//! valid against the official schemas (SchemaStore, kept in crates/project/schemas/), the host's discovery finds
//! the functions, and `hubhost serve --app function_app` serves exactly them.

use hubhost_testkit as common;

use std::path::{Path, PathBuf};

use hubhost_functions::function_app::{Cardinality, DataType, FunctionApp};
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The schema's findings for `instance` (`hubhost package` validates with the same code).
fn errors(schema: &str, instance: &Value) -> Vec<String> {
    match schema {
        "host.schema.json" => hubhost_project::package::schema::host_json_problems(instance),
        "function.schema.json" => {
            hubhost_project::package::schema::function_json_problems(instance)
        }
        other => panic!("no schema {other}"),
    }
}

#[test]
fn host_json_is_valid_and_configures_the_custom_handler() {
    let host = json(&repo().join("host.json"));
    assert_eq!(errors("host.schema.json", &host), Vec::<String>::new());
    assert_eq!(host["version"], "2.0");
    assert_eq!(host["extensionBundle"]["version"], "[4.*, 5.0.0)");
    assert_eq!(
        host["customHandler"]["description"]["defaultExecutablePath"], "hubhost-app",
        "the reference app's own executable, the handler and nothing else"
    );
    assert_eq!(
        host["customHandler"]["description"]["arguments"],
        Value::Null
    );
    let event_hubs = &host["extensions"]["eventHubs"];
    let (max, min) = (
        event_hubs["maxEventBatchSize"].as_u64().unwrap(),
        event_hubs["minEventBatchSize"].as_u64().unwrap(),
    );
    // The extension's rule: the minimum must be less than the maximum.
    assert!(
        min < max,
        "minEventBatchSize {min}, maxEventBatchSize {max}"
    );
    // The script root's host.json is the same file.
    assert_eq!(json(&repo().join("function_app/host.json")), host);
}

#[test]
fn every_function_json_is_valid() {
    let mut seen = 0;
    for entry in std::fs::read_dir(repo().join("function_app")).unwrap() {
        let path = entry.unwrap().path().join("function.json");
        if path.exists() {
            assert_eq!(
                errors("function.schema.json", &json(&path)),
                Vec::<String>::new(),
                "{}",
                path.display()
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 3);
}

/// The validation is real: a wrong binding fails it.
#[test]
fn the_schema_rejects_a_broken_function_json() {
    let broken = serde_json::json!({"bindings": [{"type": "eventHubTrigger", "name": "events", "direction": "in", "cardinality": "several"}]});
    assert!(!errors("function.schema.json", &broken).is_empty());
    let broken_host = serde_json::json!({"version": "2.0", "functionTimeout": "forever"});
    assert!(!errors("host.schema.json", &broken_host).is_empty());
}

#[test]
fn the_host_discovers_the_functions_and_their_triggers() {
    let app = FunctionApp::load(&repo().join("function_app")).unwrap();
    let names: Vec<&str> = app.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["Dashboard", "RawArchive", "SensorAggregator"]);
    // The page is an HTTP-only function, so the host forwards its requests as they came.
    let dashboard = app.function("Dashboard").unwrap();
    assert!(matches!(
        dashboard.trigger,
        hubhost_functions::function_app::Trigger::Http { .. }
    ));
    let host = json(&repo().join("host.json"));
    assert_eq!(host["customHandler"]["enableForwardingHttpRequest"], true);
    for (name, group) in [("SensorAggregator", "$Default"), ("RawArchive", "archive")] {
        let f = app.function(name).unwrap();
        let t = f.event_hub_trigger().unwrap();
        assert_eq!(
            (t.cardinality, t.data_type),
            (Cardinality::Many, DataType::String)
        );
        assert_eq!(t.consumer_group, group);
        assert_eq!(t.binding_name, "events");
        // Retry forever (the host's -1): a batch whose retries ran out is checkpointed and
        // skipped, so a storage outage must never exhaust them.
        assert!(f.retry.as_ref().is_some_and(|r| r.max_retry_count == -1));
    }
    let settings = json(&repo().join("local.settings.json.example"));
    assert_eq!(settings["Values"]["FUNCTIONS_WORKER_RUNTIME"], "custom");
    for t in app.functions.iter().filter_map(|f| f.event_hub_trigger()) {
        let connection = t.connection.clone().unwrap();
        assert!(
            settings["Values"][&connection].is_string(),
            "local.settings.json.example defines {connection}"
        );
    }
}

#[tokio::test]
async fn serve_loads_the_function_app_folder() {
    let data = tempfile::tempdir().unwrap();
    let app = repo().join("function_app");
    let server = common::Server::start(
        &["--storage", data.path().to_str().unwrap()],
        &[("FUNCTIONS_APP_ROOT_PATH", app.to_str().unwrap())],
    );
    let probe: Value = serde_json::from_slice(
        &reqwest::get(format!("{}/", server.url()))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    let mut functions: Vec<&str> = probe["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    functions.sort();
    assert_eq!(functions, ["RawArchive", "SensorAggregator"]);
}

/// The script root is self-contained: its host.json and local.settings.json.example are files,
/// not links (a `cp -r`, a Windows checkout or a zip tool that stores links would leave them
/// dangling), and they are the top-level files the design asks for, byte for byte.
#[test]
fn the_script_root_holds_real_copies_of_the_top_level_files() {
    for name in ["host.json", "local.settings.json.example"] {
        let inside = repo().join("function_app").join(name);
        let meta = std::fs::symlink_metadata(&inside).unwrap();
        assert!(meta.is_file(), "function_app/{name} must be a plain file");
        assert_eq!(
            std::fs::read(&inside).unwrap(),
            std::fs::read(repo().join(name)).unwrap(),
            "function_app/{name} differs from the top-level {name}: edit both"
        );
    }
    // A plain copy of the folder is a working app.
    let copy = tempfile::tempdir().unwrap();
    common::copy_dir(&repo().join("function_app"), copy.path());
    let app = FunctionApp::load(copy.path()).expect("a copied script root loads");
    assert!(app.function("SensorAggregator").is_some());
}

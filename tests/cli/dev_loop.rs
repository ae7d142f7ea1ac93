//! The development loop on a project `hubhost new` made, with real processes, from the project
//! folder with relative paths, and with a target folder shared between projects
//! (`CARGO_TARGET_DIR`, common on developers' machines; here one beside this workspace's):
//! host.json says `../target/debug/NAME` as `hubhost new` wrote it, and Cargo builds elsewhere.
//! `hubhost invoke` names the build a missing handler needs, then shows one batch's answer as
//! the host reads it; `hubhost emulate --watch` builds the handler where Cargo puts it, runs it
//! from there, rebuilds and restarts it when the source changes — the partitions stay owned by
//! the same instance — and keeps the running handler when a build fails; a failing answer makes
//! `hubhost invoke` exit non-zero. (The same loop with the project's own target folder is the
//! README's, run by tests/docs.rs.)

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hubhost_testkit::{self as kit, Hub, KEY, http_get};
use serde_json::Value;

const PACKAGE: &str = "dev-loop-fn";
const FUNCTION: &str = "CountEvents";
/// How long a build of the project may take: in the target folder the tests' new projects share
/// it may first wait for Cargo's lock while another test's project compiles its dependencies
/// there, minutes on a busy machine. A bound on liveness, not on speed.
const BUILD_LIMIT: Duration = Duration::from_secs(900);

/// A `hubhost emulate --watch` process, killed on drop, its output in files.
struct Emulate {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    metrics: u16,
}

impl Emulate {
    fn output(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
            + &std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits until `done` holds of the output, or fails showing it.
    fn wait_output(&self, what: &str, within: Duration, done: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + within;
        while !done(&self.output()) {
            assert!(
                Instant::now() < deadline,
                "{what} within {within:?}; emulate's output:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A metric of the function's consumer, summed.
    fn metric(&self, name: &str) -> Option<f64> {
        let page = http_get(self.metrics, "/metrics")?;
        let samples = hubhost_metrics::parse(&page).ok()?;
        Some(hubhost_metrics::sum(
            &samples,
            name,
            &[("function", FUNCTION)],
        ))
    }

    fn wait_processed(&self, events: f64) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.metric("hubhost_events_processed_total") < Some(events) {
            assert!(
                Instant::now() < deadline,
                "processed {:?} of {events}; emulate's output:\n{}",
                self.metric("hubhost_events_processed_total"),
                self.output()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Emulate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `hubhost ARGS` run in `dir` (a user's shell in the project folder), its exit code and output.
fn hubhost_in(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hubhost"));
    kit::without_test_run_env(&mut command)
        .args(args)
        .current_dir(dir);
    for (key, value) in env {
        command.env(key, value);
    }
    let out = kit::output_within(&mut command, kit::COMMAND_LIMIT);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Sends `events` readings to the hub's `sensors` with `hubhost simulate`.
fn send(hub: &Hub, events: u32) {
    let connection = hub.connection_string(KEY);
    let (code, stdout, stderr) = kit::hubhost(
        &[
            "simulate",
            "--homes",
            "10",
            "--unthrottled",
            "--events",
            &events.to_string(),
            "--connection",
            &connection,
            "--hub",
            "sensors",
        ],
        &[],
    );
    assert_eq!(code, 0, "hubhost simulate: {stdout}{stderr}");
}

fn edit(file: &Path, from: &str, to: &str) {
    let source = std::fs::read_to_string(file).unwrap();
    assert!(
        source.contains(from),
        "{from:?} is not in {}",
        file.display()
    );
    std::fs::write(file, source.replacen(from, to, 1)).unwrap();
}

#[test]
fn invoke_and_emulate_watch_follow_the_edits_of_a_new_project() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join(PACKAGE);
    let framework = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/functions");
    let (code, stdout, stderr) = kit::hubhost(
        &[
            "new",
            project.to_str().unwrap(),
            "--framework",
            framework,
            "--function",
            FUNCTION,
        ],
        &[],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    // The handler builds into a CARGO_TARGET_DIR shared between projects; host.json still names
    // the project's own target/.
    let hubhost = Path::new(env!("CARGO_BIN_EXE_hubhost"));
    let target = super::shared_target();
    let target = target.as_path();
    let executable = target.join("debug").join(PACKAGE);
    let _ = std::fs::remove_file(&executable);
    let host_json = std::fs::read_to_string(project.join("function_app/host.json")).unwrap();
    assert!(
        host_json.contains(&format!("\"../target/debug/{PACKAGE}\"")),
        "{host_json}"
    );
    let shared = [("CARGO_TARGET_DIR", target)];
    let app = "function_app";

    // Not built yet: invoke says so, where it looked, and how to build it (from here).
    let (code, stdout, stderr) = hubhost_in(&project, &["invoke", FUNCTION], &shared);
    assert_ne!(code, 0, "{stdout}");
    assert!(stderr.contains("is not built"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}/target/debug/{PACKAGE} does not exist",
            project.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("build it with `cargo build --bin {PACKAGE}`")),
        "{stderr}"
    );

    // emulate --watch builds it, then runs the app.
    let hub = Hub::start_serving_hubs(&["sensors:4"]);
    let metrics = kit::free_port();
    let stdout = dir.path().join("emulate.out");
    let stderr = dir.path().join("emulate.err");
    let child = kit::without_test_run_env(&mut Command::new(hubhost))
        .args(["emulate", "--watch", "--app", app])
        .args([
            "--metrics-port",
            &metrics.to_string(),
            "--storage",
            "storage",
        ])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", target)
        .env("EventHubConnection", hub.connection_string(KEY))
        .env("RUST_LOG", "info,hubhost::function=debug")
        .env_remove("AzureWebJobsStorage")
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let emulate = Emulate {
        child,
        stdout,
        stderr,
        metrics,
    };
    emulate.wait_output(
        "the first build and start",
        BUILD_LIMIT + Duration::from_secs(300),
        |out| out.contains(&format!("metrics: http://127.0.0.1:{metrics}")),
    );
    send(&hub, 20);
    emulate.wait_processed(20.0);
    assert_eq!(emulate.metric("hubhost_owned_partitions"), Some(4.0));

    // Built now: invoke shows the host's view of one batch.
    let events = dir.path().join("events.json");
    std::fs::write(
        &events,
        r#"["hello", {"body": {"n": 1}, "partitionKey": "k"}]"#,
    )
    .unwrap();
    let (code, out, err) = hubhost_in(
        &project,
        &[
            "invoke",
            FUNCTION,
            "--app",
            app,
            "--events",
            "../events.json",
            "--partition",
            "2",
        ],
        &shared,
    );
    assert_eq!(code, 0, "{out}{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["status"], 200);
    assert_eq!(
        answer["logs"],
        serde_json::json!(["partition 2, sequence numbers 0..=1: 12 bytes"])
    );

    // An edit: rebuilt, only the handler restarted, the partitions still owned.
    // The function lives in src/lib.rs (src/main.rs serves it).
    let function = project.join("src/lib.rs");
    edit(&function, "{bytes} bytes", "{bytes} bytes (v2)");
    emulate.wait_output("the rebuild", BUILD_LIMIT, |out| {
        out.contains("handler rebuilt and restarted")
    });
    send(&hub, 20);
    emulate.wait_processed(40.0);
    emulate.wait_output(
        "a batch logged by the new handler",
        Duration::from_secs(60),
        |out| out.contains("bytes (v2)"),
    );
    assert_eq!(emulate.metric("hubhost_owned_partitions"), Some(4.0));
    assert_eq!(
        emulate.metric("hubhost_ownership_claims_lost_total"),
        Some(0.0)
    );

    // A broken edit: the build's errors are shown and the running handler stays.
    edit(
        &function,
        "struct CountEvents;",
        "struct CountEvents; this is not rust",
    );
    emulate.wait_output("the failed build", BUILD_LIMIT, |out| {
        out.contains("the running handler stays")
    });
    assert!(
        emulate.output().contains("error"),
        "cargo's errors are shown"
    );
    send(&hub, 10);
    emulate.wait_processed(50.0);
    drop(emulate);

    // A function that fails: invoke prints the answer and exits non-zero.
    edit(&function, " this is not rust", "");
    edit(
        &function,
        "Ok(FunctionOutput::default())",
        "Err(FunctionError::Failed { code: \"on_purpose\", message: \"failing on purpose\".into() })",
    );
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    kit::without_test_run_env(&mut build)
        .args(["build", "--bin", PACKAGE])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", target);
    let built = kit::output_within(&mut build, BUILD_LIMIT);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let (code, out, err) = hubhost_in(&project, &["invoke", FUNCTION], &shared);
    assert_ne!(code, 0, "{out}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["status"], 500);
    assert_eq!(answer["error"]["code"], "on_purpose");
    assert!(err.contains("failing on purpose"), "{err}");
}

#[test]
fn invoke_shows_what_the_host_would_do_with_each_output() {
    // The forward-alarms example, its host.json naming the executable this workspace built.
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path().join("function_app");
    kit::copy_dir(
        Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/forward-alarms/function_app"
        )),
        &app,
    );
    let host_json = app.join("host.json");
    let mut host: Value =
        serde_json::from_str(&std::fs::read_to_string(&host_json).unwrap()).unwrap();
    host["customHandler"]["description"]["defaultExecutablePath"] =
        kit::build_examples(&["forward-alarms"])
            .join("forward-alarms")
            .display()
            .to_string()
            .into();
    std::fs::write(&host_json, host.to_string()).unwrap();
    let events = dir.path().join("events.ndjson");
    std::fs::write(
        &events,
        "{\"body\": {\"homeId\": \"h1\", \"sensorId\": \"door\", \"state\": \"alarm\"}, \"partitionKey\": \"h1\", \"enqueuedTime\": \"2026-12-07T09:30:00Z\"}\n\"not a reading\"\n",
    )
    .unwrap();

    let invoke = || {
        kit::hubhost(
            &[
                "invoke",
                "ForwardAlarms",
                "--app",
                app.to_str().unwrap(),
                "--events",
                events.to_str().unwrap(),
            ],
            &[],
        )
    };
    let (code, out, err) = invoke();
    assert_eq!(code, 0, "{out}{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["status"], 200);
    let alarms = &answer["outputs"]["alarms"];
    assert_eq!(alarms["type"], "eventHub");
    assert_eq!(alarms["eventHub"], "alarms");
    let sent: Value = serde_json::from_str(alarms["events"][0].as_str().unwrap()).unwrap();
    assert_eq!(
        (sent["homeId"].as_str(), sent["sequenceNumber"].as_i64()),
        (Some("h1"), Some(0))
    );
    assert_eq!(
        sent["enqueuedTime"], "2026-12-07T09:30:00+00:00",
        "the events file's enqueuedTime reaches the function"
    );
    let poison = &answer["outputs"]["poison"];
    assert_eq!(poison["type"], "blob");
    assert!(
        poison["blob"].as_str().unwrap().starts_with("deadletter/"),
        "{poison}"
    );
    let records: Value = serde_json::from_str(poison["content"].as_str().unwrap()).unwrap();
    assert_eq!(records[0]["body"], "not a reading");
    assert_eq!(
        answer["logs"],
        serde_json::json!(["partition 0: 2 readings, 1 alarms forwarded"])
    );

    // Another function name, or a handler that is not there, is refused by name.
    let (code, _, err) = kit::hubhost(&["invoke", "Nobody", "--app", app.to_str().unwrap()], &[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("no function named Nobody (it has: ForwardAlarms)"),
        "{err}"
    );
    let (code, _, err) = kit::hubhost(
        &[
            "invoke",
            "ForwardAlarms",
            "--app",
            app.to_str().unwrap(),
            "--url",
            &format!("http://127.0.0.1:{}", kit::free_port()),
        ],
        &[],
    );
    assert_ne!(code, 0);
    assert!(err.contains("the handler gave no answer"), "{err}");

    // An output the code sets under a name function.json does not declare (here the
    // declaration has the typo): the host drops it and counts a success; invoke says so and
    // fails, naming the declared outputs.
    let function_json = app.join("ForwardAlarms/function.json");
    let declared = std::fs::read_to_string(&function_json).unwrap();
    std::fs::write(
        &function_json,
        declared.replace("\"name\": \"alarms\"", "\"name\": \"alarm\""),
    )
    .unwrap();
    let (code, out, err) = invoke();
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("ForwardAlarms set output \"alarms\" that its function.json does not declare")
            && err.contains("(declared: alarm, poison)"),
        "{err}"
    );
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["undeclaredOutputs"], serde_json::json!(["alarms"]));
    assert!(answer["outputs"].get("alarms").is_none(), "{answer:#}");
}

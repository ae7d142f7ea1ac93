//! `hubhost emulate` reads a user's app as the Functions host reads it, each rule shown on a
//! real run against `hubhost hub` with a Python handler started through a `sh` wrapper that
//! does not `exec` it (so the handler is a grandchild of `emulate`):
//! - comments in host.json, function.json and local.settings.json; host.json keys in another
//!   case and values as text (`"MaxEventBatchSize": "10"`);
//! - `AzureFunctionsJobHost__extensions__eventHubs__maxEventBatchSize` overriding host.json;
//! - `AzureWebJobs.{name}.Disabled`; the connection string's `EntityPath` over `eventHubName`;
//!   `%Setting%` in `connection`;
//! - the handler's arguments with `%FUNCTIONS_CUSTOMHANDLER_PORT%` and an unset `%X%` dropped;
//!   `initializationTimeout`;
//! - `functionTimeout`: the invocation fails with the host's message, is retried as the policy
//!   says, and the handler is restarted;
//! - no process of the handler's tree is left once `emulate` stops, by SIGTERM or `kill -9`,
//!   and a wrapper that starts the server and exits 0 runs on, as the host lets it;
//! - a wrong key said once, with its reason, the function and the setting.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hubhost_testkit::{self as kit, Hub, KEY};
use serde_json::{Value, json};

/// An app folder: `run.sh` (the wrapper, no `exec`, of tests/python/recording_handler.py, which
/// records each invocation in `record` and its pid in `pids`), host.json with `handler_extra` in
/// its `customHandler` and `host_extra` at its top, and the functions given as (name,
/// function.json).
pub(crate) fn app(
    host_extra: &str,
    handler_extra: &str,
    functions: &[(&str, Value)],
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let handler = kit::repository().join("tests/python/recording_handler.py");
    std::fs::write(
        root.join("run.sh"),
        format!(
            "#!/bin/sh\n# no exec: the handler is this shell's child\nRECORD_FILE=record PID_FILE=pids {} {} \"$@\"\necho wrapper done\n",
            kit::python().display(),
            handler.display()
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("host.json"),
        format!(
            r#"{{
  // Comments, as the host reads them (Newtonsoft).
  "version": "2.0",
  /* keys in another case, values as text */
  "Extensions": {{ "EventHubs": {{ "MaxEventBatchSize": "10", "PrefetchCount": 0, }} }},
  {host_extra}
  "customHandler": {{
    "description": {{ "defaultExecutablePath": "/bin/sh",
      "arguments": ["run.sh", "%FUNCTIONS_CUSTOMHANDLER_PORT%", "%NOT_SET_ANYWHERE%"] }}
    {handler_extra}
  }}
}}"#
        ),
    )
    .unwrap();
    for (name, function) in functions {
        std::fs::create_dir(root.join(name)).unwrap();
        std::fs::write(
            root.join(name).join("function.json"),
            format!(
                "// {name}\n{}",
                serde_json::to_string_pretty(function).unwrap()
            ),
        )
        .unwrap();
    }
    dir
}

pub(crate) fn function(hub: &str, connection: &str, cardinality: &str) -> Value {
    json!({"bindings": [{"type": "eventHubTrigger", "direction": "in", "name": "events",
        "eventHubName": hub, "connection": connection, "cardinality": cardinality,
        "dataType": "string"}]})
}

/// local.settings.json with these values, and a comment.
pub(crate) fn local_settings(app: &Path, values: Value) {
    std::fs::write(
        app.join("local.settings.json"),
        format!(
            "{{\n  // as Core Tools reads it\n  \"IsEncrypted\": false,\n  \"Values\": {values}\n}}"
        ),
    )
    .unwrap();
}

/// `hubhost emulate` on the app, its output in files, killed on drop.
pub(crate) struct Emulate {
    child: Child,
    out: PathBuf,
}

impl Emulate {
    pub(crate) fn start(app: &Path, env: &[(&str, &str)]) -> Emulate {
        Emulate::start_with(app, &[], env)
    }

    /// [`Emulate::start`] with more arguments.
    pub(crate) fn start_with(app: &Path, args: &[&str], env: &[(&str, &str)]) -> Emulate {
        Emulate::start_writing("emulate.out", app, args, env)
    }

    /// [`Emulate::start_with`] on the storage the app's own `AzureWebJobsStorage` names (no
    /// `--storage`, which would stand for it): its bindings and checkpoints there.
    pub(crate) fn start_on_the_apps_storage(
        app: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Emulate {
        Emulate::start_writing_on("emulate.out", None, app, args, env)
    }

    /// [`Emulate::start_with`], its output in `out` in the app folder (one per instance).
    pub(crate) fn start_writing(
        out: &str,
        app: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Emulate {
        Emulate::start_writing_on(out, Some("storage"), app, args, env)
    }

    /// `hubhost emulate` with `--storage` naming `storage`, if any.
    fn start_writing_on(
        out: &str,
        storage: Option<&str>,
        app: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Emulate {
        let out = app.join(out);
        // One file for both streams, written at one offset.
        let file = std::fs::File::create(&out).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_hubhost"));
        kit::without_test_run_env(&mut command).args(["emulate", "--app", "."]);
        if let Some(storage) = storage {
            command.args(["--storage", storage]);
        }
        command
            .args(args)
            .current_dir(app)
            .env_remove("AzureWebJobsStorage")
            // What a user sees: hubhost's own default log levels.
            .env_remove("RUST_LOG")
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null());
        for (k, v) in env {
            command.env(k, v);
        }
        Emulate {
            child: command.spawn().unwrap(),
            out,
        }
    }

    pub(crate) fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Stops it as a user's Ctrl-C or a platform's stop does (SIGTERM) and waits for its exit.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        kit::wait_within(&mut self.child, Duration::from_secs(60), "emulate")
    }
}

impl Drop for Emulate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The handler's records so far.
pub(crate) fn records(app: &Path) -> Vec<Value> {
    std::fs::read_to_string(app.join("record"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The events a record's batch held.
fn batch_size(record: &Value) -> u64 {
    record["seqs"].as_array().map_or(0, |s| s.len() as u64)
}

pub(crate) fn events_of(records: &[Value], function: &str) -> u64 {
    records
        .iter()
        .filter(|r| r["function"] == function)
        .map(batch_size)
        .sum()
}

/// Waits until `done` holds of the records, or fails showing them and emulate's output.
pub(crate) fn wait_records(
    app: &Path,
    emulate: &Emulate,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now = records(app);
        if done(&now) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}; records: {now:?}\nemulate's output:\n{}",
            emulate.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pids(app: &Path) -> Vec<i32> {
    std::fs::read_to_string(app.join("pids"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

fn alive(pid: i32) -> bool {
    // Signal 0 only asks whether the process exists (a zombie has exited).
    let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !status.is_empty() && !status.contains(") Z ")
}

fn wait_gone(pid: i32, after: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the handler (pid {pid}), a grandchild of emulate, still runs 10 s after {after}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One app read as the host reads it, stopped with SIGTERM; the same with an override of
/// host.json, stopped with `kill -9`.
#[test]
fn emulate_reads_the_app_as_the_host_reads_it_and_stops_the_handlers_whole_tree() {
    let hub = Hub::start_serving_hubs(&["sensors:2"]);
    let connection = format!("{}EntityPath=sensors", hub.connection_string(KEY));
    // Alpha names a hub that does not exist: the connection string's EntityPath wins.
    let functions = [
        (
            "Alpha",
            function("not-this-hub", "%ConnectionName%", "many"),
        ),
        ("Beta", function("sensors", "%ConnectionName%", "many")),
    ];
    let sent = hub.python("send-to", &["0", "30", "first"]);
    assert_eq!(sent["sent"], 30, "{sent}");

    for (stop, override_batch) in [("SIGTERM", None), ("kill -9", Some("2"))] {
        let dir = app("", "", &functions);
        let root = dir.path();
        let mut values = json!({
            "ConnectionName": "HubConnection",
            "HubConnection": connection,
            "AzureWebJobs.Beta.Disabled": "true",
        });
        if let Some(size) = override_batch {
            values["AzureFunctionsJobHost__extensions__eventHubs__maxEventBatchSize"] = json!(size);
        }
        local_settings(root, values);
        let mut emulate = Emulate::start(root, &[]);
        wait_records(root, &emulate, "Alpha gets the 30 events", |r| {
            events_of(r, "Alpha") >= 30
        });
        let all = records(root);
        let largest = all.iter().map(batch_size).max();
        let expected = override_batch.map_or(10, |s| s.parse().unwrap());
        assert_eq!(
            largest,
            Some(expected),
            "batches of at most {expected} (the events were there before the start): {all:?}"
        );
        assert!(all.iter().all(|r| r["hub"] == "sensors"), "{all:?}");
        assert_eq!(events_of(&all, "Beta"), 0, "Beta is disabled: {all:?}");
        let output = emulate.output();
        assert!(
            output.contains("Beta is disabled by the app setting AzureWebJobs.Beta.Disabled"),
            "{output}"
        );
        if override_batch.is_some() {
            assert!(
                output.contains("host.json overridden by the app setting AzureFunctionsJobHost__extensions__eventHubs__maxEventBatchSize"),
                "{output}"
            );
        }
        let handler = *pids(root).last().expect("the handler wrote its pid");
        assert!(alive(handler));
        match stop {
            "SIGTERM" => {
                let status = emulate.terminate();
                assert!(status.success(), "{status}: {}", emulate.output());
            }
            _ => {
                let _ = emulate.child.kill();
                let _ = emulate.child.wait();
            }
        }
        wait_gone(handler, stop);
    }
}

/// `functionTimeout` fails an invocation with the host's message; the retry policy delivers
/// the batch again (its RetryContext says why) to a restarted handler.
#[test]
fn an_invocation_slower_than_function_timeout_fails_and_is_retried_by_a_restarted_handler() {
    let hub = Hub::start_serving_hubs(&["sensors:2"]);
    let mut slow = function("sensors", "HubConnection", "many");
    slow["retry"] =
        json!({"strategy": "fixedDelay", "maxRetryCount": 2, "delayInterval": "00:00:01"});
    let dir = app(r#""functionTimeout": "00:00:02","#, "", &[("Slow", slow)]);
    let root = dir.path();
    local_settings(root, json!({"HubConnection": hub.connection_string(KEY)}));
    let sent = hub.python("send-to", &["1", "3", "slow"]);
    assert_eq!(sent["sent"], 3, "{sent}");
    let emulate = Emulate::start(root, &[("SLOW_FUNCTION", "Slow"), ("SLOW_SECONDS", "20")]);
    wait_records(
        root,
        &emulate,
        "the batch is retried after the timeout",
        |r| events_of(r, "Slow") >= 3,
    );
    let all = records(root);
    let retried = all
        .iter()
        .find(|r| r["retry"]["RetryCount"].as_i64() > Some(0))
        .unwrap_or_else(|| panic!("no retry recorded: {all:?}"));
    let exception = retried["retry"]["Exception"].to_string();
    assert!(
        exception.contains("Timeout value of 00:00:02 was exceeded by function: Functions.Slow"),
        "{exception}"
    );
    let started = pids(root);
    assert!(
        started.len() >= 2,
        "the handler is restarted after the timeout: {started:?}\n{}",
        emulate.output()
    );
}

/// `initializationTimeout` is how long the handler may take to answer its first `GET /`.
#[test]
fn a_handler_slower_than_its_initialization_timeout_is_not_waited_for_longer() {
    let dir = app(
        "",
        r#", "initializationTimeout": "00:00:02""#,
        &[("Alpha", function("sensors", "HubConnection", "one"))],
    );
    let root = dir.path();
    let hub = Hub::start_serving_hubs(&["sensors:2"]);
    local_settings(root, json!({"HubConnection": hub.connection_string(KEY)}));
    let started = Instant::now();
    let mut emulate = Emulate::start(root, &[("START_DELAY", "40")]);
    let status = kit::wait_within(&mut emulate.child, Duration::from_secs(30), "emulate");
    assert!(!status.success(), "{}", emulate.output());
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "gave up after {:?}, not after the 2 s it was given (the default is 30 s)",
        started.elapsed()
    );
    let output = emulate.output();
    assert!(output.contains("could not start"), "{output}");
    let handler = *pids(root).last().expect("the handler wrote its pid");
    wait_gone(handler, "emulate gave up on it");
}

/// A wrong key is said once, with the service's reason, the function and its setting: not as
/// the SDK's retries log it, many lines a second.
#[test]
fn a_wrong_key_is_reported_once_naming_the_function_and_its_setting() {
    let hub = Hub::start_serving_hubs(&["sensors:2"]);
    let dir = app(
        "",
        "",
        &[("Alpha", function("sensors", "HubConnection", "many"))],
    );
    let root = dir.path();
    let wrong = hub.connection_string("bm90LXRoZS1rZXk=");
    local_settings(root, json!({"HubConnection": wrong}));
    let mut emulate = Emulate::start(root, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !emulate
        .output()
        .contains("cannot read the event hub's partitions")
    {
        assert!(Instant::now() < deadline, "{}", emulate.output());
        std::thread::sleep(Duration::from_millis(200));
    }
    // Several retries' worth (0.5 s, 1 s, 2 s, …).
    std::thread::sleep(Duration::from_secs(5));
    emulate.terminate();
    let output = emulate.output();
    let lines: Vec<&str> = output.lines().filter(|l| l.contains("401")).collect();
    assert_eq!(lines.len(), 1, "one line for the failure:\n{output}");
    assert!(!output.contains("azure_messaging_eventhubs"), "{output}");
    for part in ["function=Alpha", "connection=HubConnection", "401"] {
        assert!(lines[0].contains(part), "{part} in {}", lines[0]);
    }
    assert!(
        !output.contains("bm90LXRoZS1rZXk="),
        "the key never reaches the log"
    );
}

/// A wrapper that starts the server in the background and exits 0: the host does not restart a
/// worker that exits 0 and keeps polling its port, so `emulate` runs on with the server that
/// answers, and stops it with the instance.
#[test]
fn a_wrapper_that_starts_the_server_and_exits_0_runs_on_and_leaves_nothing() {
    let hub = Hub::start_serving_hubs(&["sensors:2"]);
    let dir = app(
        "",
        "",
        &[("Alpha", function("sensors", "HubConnection", "many"))],
    );
    let root = dir.path();
    let wrapper = std::fs::read_to_string(root.join("run.sh")).unwrap();
    let backgrounded = wrapper.replace("\"$@\"\n", "\"$@\" &\nexit 0\n");
    assert_ne!(wrapper, backgrounded);
    std::fs::write(root.join("run.sh"), backgrounded).unwrap();
    local_settings(root, json!({"HubConnection": hub.connection_string(KEY)}));
    let sent = hub.python("send-to", &["0", "5", "background"]);
    assert_eq!(sent["sent"], 5, "{sent}");
    let mut emulate = Emulate::start(root, &[]);
    wait_records(root, &emulate, "Alpha gets the 5 events", |r| {
        events_of(r, "Alpha") >= 5
    });
    let started = pids(root);
    assert_eq!(started.len(), 1, "started once, not restarted: {started:?}");
    assert!(
        emulate.output().contains("exited 0"),
        "{}",
        emulate.output()
    );
    let status = emulate.terminate();
    assert!(status.success(), "{status}: {}", emulate.output());
    wait_gone(started[0], "emulate stopped");
}

/// `hubhost invoke` fails an invocation that outlives `functionTimeout` as the host does.
#[test]
fn invoke_fails_an_invocation_slower_than_function_timeout() {
    let dir = app(
        r#""functionTimeout": "00:00:02","#,
        "",
        &[("Slow", function("sensors", "HubConnection", "many"))],
    );
    let root = dir.path();
    local_settings(
        root,
        json!({"HubConnection": "Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=a2V5;UseDevelopmentEmulator=true"}),
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_hubhost"));
    kit::without_test_run_env(&mut command)
        .args(["invoke", "Slow", "--app", "."])
        .current_dir(root)
        .env("SLOW_FUNCTION", "Slow")
        .env("SLOW_SECONDS", "30");
    let started = Instant::now();
    let out = kit::output_within(&mut command, kit::COMMAND_LIMIT);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "not after the handler's 30 s"
    );
    assert!(
        stdout.contains("Timeout value of 00:00:02 was exceeded by function: Functions.Slow"),
        "{stdout}{stderr}"
    );
}

/// Two functions on one event hub and consumer group run as the host runs them: a processor
/// each, competing for the partitions, so that every event goes to one of the two. `emulate`
/// says so at start, naming both and the group. (It once waited on its own owner-id lock,
/// silent, and started nothing.)
#[test]
fn two_functions_on_one_consumer_group_share_its_events_and_are_named_in_a_warning() {
    let hub = Hub::start_serving_hubs(&["sensors:4"]);
    let functions = [
        ("Alpha", function("sensors", "HubConnection", "many")),
        ("Beta", function("sensors", "HubConnection", "many")),
    ];
    let dir = app("", "", &functions);
    let root = dir.path();
    local_settings(root, json!({"HubConnection": hub.connection_string(KEY)}));
    let emulate = Emulate::start(root, &[]);
    let delivered = |records: &[Value]| {
        let mut by_event: std::collections::BTreeMap<(String, i64), Vec<String>> =
            Default::default();
        for r in records {
            for seq in r["seqs"].as_array().into_iter().flatten() {
                by_event
                    .entry((r["partition"].to_string(), seq.as_i64().unwrap()))
                    .or_default()
                    .push(r["function"].as_str().unwrap().to_string());
            }
        }
        by_event
    };
    // The first wave while the two balance the partitions between them: a partition that
    // moves before its checkpoint is delivered again, to the other function, as on Azure.
    let sent = hub.python("send", &["40", "1", "first"]);
    assert_eq!(sent["sent"], 40, "{sent}");
    wait_records(root, &emulate, "the first 40 events delivered", |r| {
        delivered(r).len() >= 40
    });
    std::thread::sleep(Duration::from_secs(4));
    let first: std::collections::BTreeSet<(String, i64)> =
        delivered(&records(root)).into_keys().collect();
    // Balanced: each event of the second wave goes to one of the two, and both get some.
    let sent = hub.python("send", &["40", "1", "second"]);
    assert_eq!(sent["sent"], 40, "{sent}");
    wait_records(root, &emulate, "all 80 events delivered", |r| {
        delivered(r).len() >= 80
    });
    std::thread::sleep(Duration::from_secs(1));
    let records = records(root);
    let second: Vec<_> = delivered(&records)
        .into_iter()
        .filter(|(event, _)| !first.contains(event))
        .collect();
    assert_eq!(second.len(), 40);
    for (event, functions) in &second {
        assert_eq!(
            functions.len(),
            1,
            "event {event:?} went to {functions:?}: {records:?}"
        );
    }
    let to = |name: &str| second.iter().filter(|(_, f)| f[0] == name).count();
    assert!(
        to("Alpha") > 0 && to("Beta") > 0,
        "the two compete for the partitions: {records:?}"
    );
    let output = emulate.output();
    assert!(
        output.contains(
            "Alpha and Beta are both triggered by event hub sensors, consumer group $Default"
        ) && output.contains("its own consumerGroup"),
        "{output}"
    );
}

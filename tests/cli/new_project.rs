//! `hubhost new` with the options the README's path does not take: a single-event trigger with
//! binary data on a consumer group of its own, putting one message per event on a queue (once,
//! through `Once`; its rehearsal audits the queue output), then a second function beside it
//! (`hubhost add`). The project it makes is formatted, keeps the versions hubhost was tested
//! with (its Cargo.lock), and its own tests pass with plain `cargo test` — the unit tests calling
//! each function as the host does, and the integration test running the app under the emulated
//! host on a local hub, every event processed — with no `hubhost` on PATH and no service
//! running. (The README's own path, `hubhost new` with a batch trigger through `cargo test` from
//! an empty target folder, runs in tests/docs.rs.)

use hubhost_testkit as common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Scaffolds with `args` into a new folder, then runs `cargo fmt --check` and `cargo test` there
/// (with the lock `hubhost new` wrote, in the target folder the tests' new projects share, so the
/// dependencies are compiled once).
fn scaffold_and_test(args: &[&str]) {
    let (_dir, project) = scaffold("my-function", args);
    // A second function, as `func new` adds one: on a consumer group of its own, registered
    // beside the first; the project's tests below run both.
    let (code, stdout, stderr) = common::hubhost(
        &["add", "Second", "--project", project.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 0, "hubhost add failed: {stdout}{stderr}");
    assert!(stdout.contains("consumer group second"), "{stdout}");
    let second: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("function_app/Second/function.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(second["bindings"][0]["consumerGroup"], "second");
    check_formatted(&project);
    cargo_test_passes(
        &project,
        &[
            "second::tests::a_batch_is_answered_with_its_summary",
            "a_batch_is_answered_with_its_summary",
            "every_event_sent_is_processed",
            "rehearsal_of_what_azure_does_to_it",
            "two_hundred_seeds_of_what_azure_does_to_it",
        ],
    );
}

/// `cargo test` in `project` passes, and each of `tests` is among the tests that passed.
fn cargo_test_passes(project: &Path, tests: &[&str]) {
    let out = cargo_test(project, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the new project's tests failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for test in tests {
        assert!(stdout.contains(&format!("{test} ... ok")), "{stdout}");
    }
}

/// `hubhost new` with `args` into a new folder named `package`: the folder holding it (removed
/// on drop) and the project. Each test's package has a name of its own: the projects share a
/// target folder, where two packages of one name would build over each other.
fn scaffold(package: &str, args: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join(package);
    let framework = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/functions");
    let mut all = vec!["new", project.to_str().unwrap(), "--framework", framework];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = common::hubhost(&all, &[]);
    assert_eq!(code, 0, "hubhost new failed: {stdout}{stderr}");
    assert!(stdout.contains("function_app/host.json"), "{stdout}");
    let lock = std::fs::read_to_string(project.join("Cargo.lock")).expect("a Cargo.lock");
    let tested =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock")).unwrap();
    for package in lock.split("\n[[package]]\n").skip(1) {
        let name_and_version: String = package.lines().take(2).collect::<Vec<_>>().join("\n");
        assert!(
            tested.contains(&name_and_version),
            "not a version hubhost was tested with:\n{name_and_version}"
        );
    }
    // Writing into a folder that is not empty is refused.
    let (code, _, stderr) = common::hubhost(&["new", project.to_str().unwrap()], &[]);
    assert_ne!(code, 0);
    assert!(stderr.contains("not empty"), "{stderr}");
    (dir, project)
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn check_formatted(project: &Path) {
    let mut fmt = Command::new(cargo());
    fmt.args(["fmt", "--check"]).current_dir(project);
    let out = common::output_within(&mut fmt, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "the new project is not formatted:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `cargo test ARGS` in `project`, in the target folder the tests' new projects share, with no
/// hubhost on PATH and no service: the tests need nothing but cargo.
fn cargo_test(project: &Path, args: &[&str]) -> std::process::Output {
    let hubhost = Path::new(env!("CARGO_BIN_EXE_hubhost"));
    let mut test = Command::new(cargo());
    common::without_test_run_env(&mut test)
        .arg("test")
        .args(args)
        .current_dir(project)
        .env("CARGO_TARGET_DIR", super::shared_target())
        .env(
            "PATH",
            std::env::var("PATH")
                .unwrap_or_default()
                .replace(hubhost.parent().unwrap().to_str().unwrap(), "/nonexistent"),
        );
    // The dependencies compile here, or are waited for while another test's project compiles
    // them in the shared folder: minutes on a busy machine.
    common::output_within(&mut test, Duration::from_secs(1200))
}

#[test]
fn new_says_what_it_makes() {
    let (code, help, stderr) = common::hubhost(&["new", "--help"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let help = help.replace('\n', " ");
    assert!(
        help.contains("Cargo.lock hubhost was tested with"),
        "{help}"
    );
    assert!(help.contains("all inside `cargo test`"), "{help}");
    // The tests it makes run in-process, not under a `hubhost emulate` of their own.
    assert!(
        !help.contains("under `hubhost emulate` on `hubhost hub`"),
        "{help}"
    );
}

#[test]
fn a_new_project_with_a_single_event_binary_trigger_on_its_own_consumer_group_and_a_queue_output_passes_both_test_tiers()
 {
    scaffold_and_test(&[
        "--function",
        "Audit",
        "--event-hub",
        "orders",
        "--consumer-group",
        "audit",
        "--cardinality",
        "one",
        "--data-type",
        "binary",
        "--queue-output",
        "audit-log",
    ]);
}

/// A forwarder to an event hub, kept once by `Once`: both rehearsals pass, their inputs made from
/// the project's own events.json and matched on its `deviceId`. Without `Once` the simulated one
/// fails, naming each duplicated input; with outputs that lose the key, each missing input, what
/// was sent and what the output held instead. `hubhost docs` documents the test kit and the
/// rehearsals, which `cargo doc` cannot (they are dev-dependencies).
#[test]
fn a_new_forwarder_rehearses_its_own_events_once_and_says_per_input_what_went_wrong_without_once() {
    let (_dir, project) = scaffold("my-forwarder", &["--event-hub-output", "forwarded"]);
    check_formatted(&project);
    cargo_test_passes(
        &project,
        &[
            "rehearsal_of_what_azure_does_to_it",
            "two_hundred_seeds_of_what_azure_does_to_it",
        ],
    );

    let edit = |file: &str, from: &str, to: &str| {
        let path = project.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file} has no {from:?}");
        std::fs::write(&path, text.replace(from, to)).unwrap();
    };
    // Twenty seeds are plenty to fail, and each failing one is shrunk.
    edit("tests/simulation.rs", "seeds(0..200)", "seeds(0..20)");
    edit(
        "src/lib.rs",
        "for event in self.once.claim(&batch, context).await? {",
        "for event in &batch.events {",
    );
    let out = cargo_test(&project, &["--test", "simulation"]);
    let told = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "passed without Once:\n{told}");
    assert!(
        told.lines()
            .any(|l| l.trim_start().starts_with("duplicated: d-1-") && l.contains("through 'out'")),
        "{told}"
    );
    assert!(told.contains("replay it: Rehearsal::new("), "{told}");

    edit(
        "src/lib.rs",
        "String::from_utf8_lossy(&event.body)",
        r#"format!("{{\"seen\":{}}}", event.sequence_number.unwrap_or(0))"#,
    );
    let out = cargo_test(&project, &["--test", "simulation"]);
    let told = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "passed without the key:\n{told}");
    let missing = told
        .lines()
        .find(|l| l.trim_start().starts_with("missing: d-1-"))
        .unwrap_or_else(|| panic!("no missing input named:\n{told}"));
    assert!(
        missing.contains(r#"sent {"deviceId":"d-1-"#)
            && missing.contains("no effect names it by the member `deviceId`"),
        "{missing}"
    );
    assert!(
        told.contains(r#"through 'out': {"seen":"#) && told.contains("(its key: none)"),
        "{told}"
    );

    // Every dependency checked for rustdoc: minutes on a busy machine.
    let mut docs = Command::new(env!("CARGO_BIN_EXE_hubhost"));
    common::without_test_run_env(&mut docs)
        .arg("docs")
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", super::shared_target());
    let out = common::output_within(&mut docs, Duration::from_secs(1200));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for krate in ["hubhost_functions", "hubhost_testkit", "hubhost_rehearse"] {
        let index = super::shared_target()
            .join("doc")
            .join(krate)
            .join("index.html");
        assert!(index.is_file(), "{} is missing: {stdout}", index.display());
    }
    assert!(stdout.contains("hubhost_functions/index.html"), "{stdout}");
}

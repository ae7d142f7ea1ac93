//! `hubhost new`, as a user runs it: the project it makes builds against this workspace's
//! `hubhost-functions`, is formatted, and its own test passes — the function under `hubhost
//! emulate` on a `hubhost hub`, every event processed — for both trigger cardinalities.

use hubhost_testkit as common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Scaffolds with `args` into a new folder, then runs `cargo fmt --check` and `cargo test` there
/// (offline, with this workspace's lock file and target folder, so nothing is downloaded and
/// the framework is compiled once).
fn scaffold_and_test(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("my-function");
    let framework = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/functions");
    let mut all = vec!["new", project.to_str().unwrap(), "--framework", framework];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = common::hubhost(&all, &[]);
    assert_eq!(code, 0, "hubhost new failed: {stdout}{stderr}");
    assert!(stdout.contains("function_app/host.json"), "{stdout}");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock"),
        project.join("Cargo.lock"),
    )
    .unwrap();
    // Writing into a folder that is not empty is refused.
    let (code, _, stderr) = common::hubhost(&["new", project.to_str().unwrap()], &[]);
    assert_ne!(code, 0);
    assert!(stderr.contains("not empty"), "{stderr}");

    let hubhost = Path::new(env!("CARGO_BIN_EXE_hubhost"));
    let target = hubhost.parent().and_then(Path::parent).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut fmt = Command::new(&cargo);
    fmt.args(["fmt", "--check"]).current_dir(&project);
    let out = common::output_within(&mut fmt, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "the new project is not formatted:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut test = Command::new(&cargo);
    test.args(["test", "--offline"])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", target)
        .env("HUBHOST", hubhost);
    let out = common::output_within(&mut test, Duration::from_secs(600));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the new project's tests failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("every_event_sent_is_processed_under_emulate ... ok"),
        "{stdout}"
    );
}

#[test]
fn a_new_project_with_a_batch_trigger_runs_under_emulate() {
    scaffold_and_test(&["--function", "CountEvents"]);
}

#[test]
fn a_new_project_with_a_single_event_binary_trigger_on_its_own_consumer_group_runs_under_emulate() {
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
    ]);
}

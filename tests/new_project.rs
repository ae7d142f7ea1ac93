//! `hubhost new`, as a user runs it: the project it makes builds against this workspace's
//! `hubhost-functions` and `hubhost-testkit`, is formatted, and its own tests pass with plain
//! `cargo test` — the unit test calling the function as the host does, and the integration
//! test running the app under the emulated host on a local hub, every event processed — for
//! both trigger cardinalities; and the unit test fails once the function is broken.

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
    // No hubhost on PATH, no service: the tests need nothing but cargo.
    let cargo_test = |extra: &[&str]| {
        let mut test = Command::new(&cargo);
        test.args(["test", "--offline"])
            .args(extra)
            .current_dir(&project)
            .env("CARGO_TARGET_DIR", target)
            .env(
                "PATH",
                std::env::var("PATH")
                    .unwrap_or_default()
                    .replace(hubhost.parent().unwrap().to_str().unwrap(), "/nonexistent"),
            );
        common::output_within(&mut test, Duration::from_secs(600))
    };
    let out = cargo_test(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the new project's tests failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for test in [
        "a_batch_is_answered_with_its_summary ... ok",
        "every_event_sent_is_processed ... ok",
    ] {
        assert!(stdout.contains(test), "{stdout}");
    }

    // A broken function fails its unit test.
    let main = project.join("src/main.rs");
    let source = std::fs::read_to_string(&main).unwrap();
    let broken = source.replace("{bytes} bytes", "{bytes} octets");
    assert_ne!(source, broken);
    std::fs::write(&main, broken).unwrap();
    let out = cargo_test(&["--bins"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("a_batch_is_answered_with_its_summary ... FAILED"),
        "{stdout}"
    );
}

#[test]
fn a_new_project_with_a_batch_trigger_passes_both_test_tiers() {
    scaffold_and_test(&["--function", "CountEvents"]);
}

#[test]
fn a_new_project_with_a_single_event_binary_trigger_on_its_own_consumer_group_passes_both_test_tiers()
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
    ]);
}

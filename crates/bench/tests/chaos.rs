//! The chaos benchmark's short form: `hubhost bench chaos` with 12 seeded faults on each store
//! (a local directory, then Azurite) — two of every kind: instances and handlers killed,
//! instances frozen past their expiry, the hub killed, the store taken away, graceful
//! restarts. The command checks everything from outside and exits non-zero on any violation
//! (its checks have unit tests in `bench::chaos::audit`); this test runs it as a user would and
//! checks its report says what was exercised. The full run (100 faults per store, outages up
//! to 60 s) is in docs/benchmarks.md.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

#[test]
fn a_pool_under_two_dozen_faults_loses_nothing_doubles_nothing_and_never_goes_back() {
    common::require!(Tool::Azurite);
    let dir = tempfile::tempdir().unwrap();
    let out = common::output_within(
        Command::new(env!("CARGO_BIN_EXE_hubhost-bench"))
            .args([
                "chaos",
                "--faults",
                "12",
                "--seed",
                "20261124",
                "--stores",
                "directory,azurite",
                "--outage",
                "10,15",
                "--json",
                "--azurite",
            ])
            .arg(common::azurite_bin())
            .arg("--work-dir")
            .arg(dir.path()),
        Duration::from_secs(1200),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench chaos failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let runs: Vec<Value> = serde_json::from_str(stdout.trim()).expect("the figures are JSON");
    assert_eq!(runs.len(), 2);
    for (run, store) in runs.iter().zip(["directory", "Azurite"]) {
        assert_eq!(run["store"], store);
        let faults = run["faults"].as_array().unwrap();
        assert_eq!(faults.len(), 12, "{store}");
        for kind in [
            "KillInstance",
            "KillHandler",
            "Freeze",
            "KillHub",
            "StorageOutage",
            "GracefulRestart",
        ] {
            let of_kind: Vec<&Value> = faults
                .iter()
                .filter(|f| f["fault"]["kind"] == kind)
                .collect();
            assert_eq!(of_kind.len(), 2, "{store}: {kind}");
            assert!(
                of_kind.iter().all(|f| f["recovery"].is_f64()),
                "{store}: {kind} not recovered: {of_kind:?}"
            );
        }
        let data = &run["data"];
        assert!(
            data["readings"].as_u64().unwrap() > 10_000,
            "{store}: {data}"
        );
        assert!(data["poison"].as_u64().unwrap() > 0, "{store}: {data}");
        for zero in [
            "acknowledged_not_stored",
            "readings_not_applied",
            "readings_applied_twice",
            "archive_missing",
            "poison_not_dead_lettered",
            "dead_letters_not_poison",
        ] {
            assert_eq!(data[zero], 0, "{store}: {zero}");
        }
        assert!(run["checkpoints_moved_back"].as_array().unwrap().is_empty());
        assert!(run["drained"].as_bool().unwrap());
        // Faults make the functions see some events again; the aggregates count them once.
        assert!(run["delivered"].as_u64().unwrap() >= data["events"].as_u64().unwrap() * 2);
        assert!(run["longest_unowned"].as_f64().unwrap() <= run["unowned_limit"].as_f64().unwrap());
    }
    eprintln!("{stderr}");
}

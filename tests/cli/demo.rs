//! `hubhost demo`, the README's first command, as a user runs it: everything in one process on
//! a local directory. A bounded run must print the page's URL on a line of its own, aggregate
//! exactly the readings the simulator sent, set the two poison events aside, and a second run on
//! the same directory must resume from the checkpoints instead of reading everything again.
//! Alarms go out to the `alarms` hub through the aggregator's `eventHub` output.

use hubhost_testkit as common;

use std::process::Command;

fn demo(storage: &std::path::Path) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hubhost"));
    command
        .args([
            "demo",
            "--homes",
            "200",
            "--speed-up",
            "60",
            "--duration",
            "3",
            "--port",
            "0",
        ])
        .arg("--storage")
        .arg(storage)
        .env_remove("HUBHOST_STORAGE");
    // A bounded demo takes seconds; minutes mean it hangs.
    let out = common::output_within(&mut command, common::COMMAND_LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The number just before `suffix` in the line that contains it, e.g. `sent 4808 events`.
fn number(text: &str, prefix: &str, suffix: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.contains(prefix) && l.contains(suffix))
        .unwrap_or_else(|| panic!("no line with {prefix:?} … {suffix:?} in:\n{text}"));
    let start = line.find(prefix).unwrap() + prefix.len();
    let rest = &line[start..];
    rest[..rest.find(suffix).unwrap()].trim().parse().unwrap()
}

#[test]
fn the_demo_aggregates_what_it_sent_and_resumes_from_its_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let first = demo(dir.path());
    assert!(
        first.lines().any(|l| {
            l.strip_prefix("http://127.0.0.1:")
                .and_then(|rest| rest.strip_suffix('/'))
                .is_some_and(|port| port.parse::<u16>().is_ok())
        }),
        "no URL line:\n{first}"
    );
    let sent = number(&first, "sent ", " events");
    assert!(sent > 500, "{first}");
    assert_eq!(number(&first, "holding ", " readings"), sent, "{first}");
    assert!(first.contains("  2 dead letters:"), "{first}");
    assert!(first.contains("unknown sensor type 'laser'"), "{first}");
    // Every alarm the aggregates hold went out through SensorAggregator's `eventHub` output,
    // at least once (a batch read twice during rebalancing forwards its alarms twice).
    let alarms = number(&first, "  ", " alarms; the latest kept");
    assert!(alarms > 0, "{first}");
    let forwarded = number(&first, "alarms forwarded to the 'alarms' hub: ", " events");
    assert!(forwarded >= alarms, "{first}");

    let second = demo(dir.path());
    let sent_again = number(&second, "sent ", " events");
    assert_eq!(
        number(&second, "holding ", " readings"),
        sent + sent_again,
        "{second}"
    );
    // Resumed from the checkpoints: the second run processes its own events (and the
    // duplicates of its start-up rebalancing), not the first run's again.
    let processed = number(&second, "processed: ", " events by SensorAggregator");
    assert!(
        processed < sent + sent_again,
        "processed {processed} after sending {sent_again} (first run {sent}):\n{second}"
    );
    assert!(processed >= sent_again + 2, "{second}");
    // The hub kept the first run's alarms; the aggregates count both runs'.
    let alarms = number(&second, "  ", " alarms; the latest kept");
    let forwarded = number(&second, "alarms forwarded to the 'alarms' hub: ", " events");
    assert!(forwarded >= alarms, "{second}");
}

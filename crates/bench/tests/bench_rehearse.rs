//! `hubhost bench rehearse`, short form: the simulated rehearsal, in-process and with its
//! handler as a process, beside the real-process rehearsal of the same plans (the baseline),
//! each a median with its range over the repetitions.

use hubhost_testkit as common;

/// The numbers of the row that starts with `label`: seeds a minute (median, low, high),
/// virtual seconds per wall second (median, low, high), failing seeds.
fn row(stdout: &str, label: &str) -> Vec<f64> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label} row in:\n{stdout}"));
    line[label.len()..]
        .split(|c: char| c.is_whitespace() || "()–".contains(c))
        .filter(|t| !t.is_empty())
        .map(|t| t.parse().unwrap_or_else(|_| panic!("{t:?} in {line:?}")))
        .collect()
}

#[test]
fn the_rehearsal_benchmark_reports_both_simulations_beside_real_processes() {
    let handler =
        common::build_examples(&["count-readings", "forward-events"]).join("forward-once");
    let (code, stdout, stderr) = common::hubhost(
        &[
            "bench",
            "rehearse",
            "--seeds",
            "6",
            "--real-seeds",
            "1",
            "--inputs",
            "40",
            "--faults",
            "3",
            "--repetitions",
            "2",
            "--handler",
            handler.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let mut seeds_a_minute = Vec::new();
    for label in [
        "simulated, in-process",
        "simulated, handler process",
        "real processes (baseline)",
    ] {
        let figures = row(&stdout, label);
        assert_eq!(figures.len(), 7, "{label}: {figures:?}\n{stdout}");
        let (median, low, high) = (figures[0], figures[1], figures[2]);
        assert!(
            low > 0.0 && low <= median && median <= high,
            "{label}: {figures:?}"
        );
        assert_eq!(
            figures[6], 0.0,
            "{label}: forward-once failed a seed\n{stdout}"
        );
        seeds_a_minute.push(median);
    }
    // Virtual time is what makes the simulation worth having: faster than real processes.
    assert!(seeds_a_minute[0] > seeds_a_minute[2], "{stdout}");
    assert!(stdout.contains("× the real-process rehearsal"), "{stdout}");
}

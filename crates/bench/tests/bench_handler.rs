//! `hubhost bench handler`, short form: the benchmark runs end to end and reports, for the same
//! requests, the reference app and the trivial function on the same framework, each as a
//! median with its range over the repetitions, beside the decoding baseline.

use hubhost_testkit as common;

/// The numbers of the row that starts with `label`: events/s, low, high, MB/s, p50, p99.
fn row(stdout: &str, label: &str) -> Vec<f64> {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label} row in:\n{stdout}"));
    line.trim_start()[label.len()..]
        .split(|c: char| c.is_whitespace() || c == '–')
        .filter(|t| !t.is_empty())
        .map(|t| t.parse().unwrap_or_else(|_| panic!("{t:?} in {line:?}")))
        .collect()
}

#[test]
fn the_handler_benchmark_reports_the_app_and_the_framework_alone_with_ranges() {
    let (code, stdout, stderr) = common::hubhost(
        &[
            "bench",
            "handler",
            "--events",
            "3200",
            "--homes",
            "500",
            "--partitions",
            "4",
            "--batch-sizes",
            "50",
            "--repetitions",
            "2",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("batch 50: 3200 events"), "{stdout}");
    assert!(stdout.contains("vs plain parse"), "{stdout}");
    for label in ["reference app", "trivial function"] {
        let figures = row(&stdout, label);
        assert_eq!(figures.len(), 6, "{label}: {figures:?}\n{stdout}");
        let (median, low, high) = (figures[0], figures[1], figures[2]);
        assert!(
            low > 0.0 && low <= median && median <= high,
            "{label}: {figures:?}"
        );
        assert!(
            figures[4] > 0.0 && figures[4] <= figures[5],
            "{label} p50 ≤ p99: {figures:?}"
        );
    }
}

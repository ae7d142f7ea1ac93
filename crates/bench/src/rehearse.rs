//! `hubhost bench rehearse`: how fast a rehearsal runs — `examples/forward-events`' forward-once
//! under the same seeded plans three ways: simulated with the function in-process (the test
//! kit's `Rehearsal::simulated`), simulated with its built handler as a process
//! (`hubhost rehearse --simulate`), and the real-process rehearsal (`hubhost rehearse`), the
//! baseline, measured in the same run. Each repetition runs all three; the table gives seeds a
//! minute and virtual seconds per wall second as the median and range of the repetitions.

use std::path::{Path, PathBuf};
use std::time::Instant;

use forward_events::{ForwardOnce, server};
use hubhost_functions::once::Once;
use hubhost_testkit::Rehearsal;
use hubhost_testkit::stats::median_and_range;

/// What to run.
#[derive(Debug, Clone)]
pub struct RehearseBenchOptions {
    /// Seeds of each simulated form per repetition.
    pub seeds: u64,
    /// Seeds of the real-process rehearsal per repetition.
    pub real_seeds: u64,
    pub inputs: usize,
    pub faults: usize,
    pub repetitions: usize,
    /// The app folder (`examples/forward-events/function_app`).
    pub app: PathBuf,
    /// The built `forward-once`.
    pub handler: PathBuf,
}

/// One form's rate in one repetition.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
struct Rate {
    seeds_a_minute: f64,
    virtual_per_wall: f64,
    failing: usize,
}

pub fn run(options: &RehearseBenchOptions) -> Result<(), String> {
    let rehearsal = Rehearsal::new(0)
        .count(options.inputs)
        .fault_count(options.faults)
        .key("id");
    let mut rates: [Vec<Rate>; 3] = Default::default();
    println!(
        "rehearsal of forward-once: {} inputs, {} faults a seed; {} seeds simulated and {} real per form and repetition, {} repetitions",
        options.inputs, options.faults, options.seeds, options.real_seeds, options.repetitions
    );
    for repetition in 1..=options.repetitions {
        let first = (repetition as u64 - 1) * options.seeds;
        let in_process = rehearsal
            .simulated(&options.app, |h| {
                server(
                    ForwardOnce {
                        once: Once::for_instance(h.store.clone(), h.instance),
                    },
                    h.app_folder,
                )
                .expect("the app declares Forward")
            })
            .map_err(|e| e.to_string())?;
        rates[0].push(simulated(&in_process, first..first + options.seeds)?);
        let process = rehearsal
            .simulated_process(&options.app, &options.handler)
            .map_err(|e| e.to_string())?;
        rates[1].push(simulated(&process, first..first + options.seeds)?);
        rates[2].push(real(&rehearsal, options, first)?);
        eprintln!("repetition {repetition} of {} done", options.repetitions);
    }
    let labels = [
        "simulated, in-process",
        "simulated, handler process",
        "real processes (baseline)",
    ];
    println!(
        "{:<28} {:>22} {:>28} {:>8}",
        "", "seeds a minute", "virtual s per wall s", "failing"
    );
    let mut medians = [0.0; 3];
    for (i, label) in labels.iter().enumerate() {
        let (seeds, low, high) = median_and_range(rates[i].iter().map(|r| r.seeds_a_minute));
        let (speed, speed_low, speed_high) =
            median_and_range(rates[i].iter().map(|r| r.virtual_per_wall));
        let failing: usize = rates[i].iter().map(|r| r.failing).sum();
        medians[i] = seeds;
        println!(
            "{label:<28} {seeds:>9.1} ({low:>6.1}–{high:>6.1}) {speed:>13.1} ({speed_low:>6.1}–{speed_high:>6.1}) {failing:>8}"
        );
    }
    println!(
        "simulated in-process: {:.0}× the real-process rehearsal; with the handler as a process: {:.0}×",
        medians[0] / medians[2].max(f64::MIN_POSITIVE),
        medians[1] / medians[2].max(f64::MIN_POSITIVE)
    );
    Ok(())
}

fn simulated(
    simulation: &hubhost_testkit::rehearse::Simulation,
    seeds: std::ops::Range<u64>,
) -> Result<Rate, String> {
    let outcome = simulation.seeds(seeds).map_err(|e| e.to_string())?;
    Ok(Rate {
        seeds_a_minute: outcome.runs as f64 * 60.0 / outcome.wall_seconds.max(1e-9),
        virtual_per_wall: outcome.virtual_seconds / outcome.wall_seconds.max(1e-9),
        failing: outcome.failing.len(),
    })
}

/// The real-process rehearsal of `real_seeds` seeds from `first`, one after the other (each
/// runs its own hub, host and handlers).
fn real(rehearsal: &Rehearsal, options: &RehearseBenchOptions, first: u64) -> Result<Rate, String> {
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut virtual_seconds = 0.0;
    let mut failing = 0;
    for seed in first..first + options.real_seeds {
        let report = runtime
            .block_on(
                rehearsal
                    .with_seed(seed)
                    .run(&options.app, &options.handler),
            )
            .map_err(|e| e.to_string())?;
        virtual_seconds += report.seconds;
        failing += usize::from(!report.passed);
    }
    let wall = started.elapsed().as_secs_f64();
    Ok(Rate {
        seeds_a_minute: options.real_seeds as f64 * 60.0 / wall.max(1e-9),
        // The real run's own time is wall time: one second a second.
        virtual_per_wall: virtual_seconds / wall.max(1e-9),
        failing,
    })
}

/// `examples/forward-events/function_app` in the source tree this program was built from.
pub fn default_app() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/forward-events/function_app")
}

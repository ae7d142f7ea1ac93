//! `hubhost rehearse`: the app under a seeded plan of the faults Azure brings, and the audit of
//! what its outputs did with each input (see `hubhost_rehearse`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hubhost_host::emulate::handler_executable;
use hubhost_host::emulate::invoke::read_event_bodies;
use hubhost_rehearse::{FaultKind, Rehearsal, Semantics};

/// Run the app under Azure's faults and audit its outputs.
///
/// Run the app as Azure runs it while the faults Azure brings happen to it — the handler killed
/// mid-batch, a second instance joining and leaving, an owner frozen past its ownership, an
/// output failing, the hub detaching links, the checkpoint store down, geo-replication offsets
/// — then match every event the eventHub outputs sent and every blob the blob outputs wrote to
/// the inputs. Prints a JSON report (inputs, missing, duplicated, faults, seed) on stdout and a
/// summary on stderr; exits non-zero when an effect is missing, or duplicated under exactly once.
///
/// With --simulate the same run is simulated: virtual time, the hub and the store in memory,
/// the emulated host's own code, the handler a process asked one request at a time while the
/// clock stands still. The same seed gives the same report, byte for byte; a failing seed is
/// shrunk to the fewest faults and inputs that still fail, and the command that replays them.
#[derive(clap::Args)]
pub struct Args {
    /// Function app folder (host.json, */function.json, local.settings.json); its handler is
    /// host.json's defaultExecutablePath, found as `hubhost emulate` finds it.
    #[arg(long, default_value = "function_app")]
    pub app: PathBuf,
    /// The handler executable [default: host.json's defaultExecutablePath, found as `hubhost
    /// emulate` finds it].
    #[arg(long)]
    pub handler: Option<PathBuf>,
    /// The function whose trigger gets the inputs [default: the first Event Hubs function].
    #[arg(long)]
    pub function: Option<String>,
    /// Inputs: an events file as `hubhost invoke` reads one (a JSON array or NDJSON; an object
    /// with `body` is an event, any other value the body itself: a string as its text, anything
    /// else as JSON); only the bodies are sent. With --count, that many inputs made from its
    /// bodies in turn, each with its own --key member ("d-1" becomes "d-1-00001", …).
    #[arg(long)]
    pub events: Option<PathBuf>,
    /// How many inputs: generated ones {"id":"input-00001","n":1}…, or made from --events
    /// [default: 200, or the events file's own].
    #[arg(long)]
    pub count: Option<usize>,
    /// The plan's seed: the same seed, the same faults at the same points.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Faults to draw from, comma-separated: kill-handler, scale-out, freeze, output-failure,
    /// detach, store-outage, geo-offsets, and under --simulate add-partitions and recreate-hub;
    /// or default (the first six), all.
    #[arg(long, default_value = "default")]
    pub faults: String,
    /// How many faults at least (the kinds in turn).
    #[arg(long, default_value_t = 0)]
    pub fault_count: usize,
    /// The JSON member that names an input, in inputs and in outputs.
    #[arg(long, default_value = "id")]
    pub key: String,
    /// Accept duplicates (report them, fail only on missing effects).
    #[arg(long)]
    pub at_least_once: bool,
    /// How long the run may take before what is unprocessed counts as missing, in seconds
    /// (virtual seconds under --simulate).
    #[arg(long, default_value_t = 180)]
    pub within: u64,
    /// Simulate the run: deterministic, in virtual time, faster than real time.
    #[arg(long)]
    pub simulate: bool,
    /// Simulate this many seeds, from --seed on, and report the failing ones (shrunk).
    #[arg(long, requires = "simulate")]
    pub seeds: Option<u64>,
    /// Print the simulated run's trace on stderr: the emulated host's log at virtual times.
    #[arg(long, requires = "simulate", conflicts_with = "seeds")]
    pub trace: bool,
    /// Only these faults of the seed's plan, by index from 0, comma-separated (what a shrunk
    /// plan keeps).
    #[arg(long, value_delimiter = ',')]
    pub only_faults: Option<Vec<usize>>,
    /// Only the first N inputs are sent; the seed's plan stays the one for all of them.
    #[arg(long)]
    pub first_inputs: Option<usize>,
}

pub async fn run(args: Args) -> Result<(), String> {
    let mut kinds = FaultKind::parse_list(&args.faults)?;
    if !args.simulate {
        // `all` means every kind this run can carry out; one named outright is refused.
        let named = |kind: &FaultKind| args.faults.split(',').any(|n| n.trim() == kind.name());
        if let Some(kind) = kinds.iter().find(|k| k.simulated_only() && named(k)) {
            return Err(format!(
                "--faults {}: only the simulated rehearsal can do it (the local hub neither adds partitions to a running event hub nor deletes one); add --simulate",
                kind.name()
            ));
        }
        kinds.retain(|k| !k.simulated_only());
    }
    let mut rehearsal = Rehearsal::new(args.seed)
        .faults(&kinds)
        .fault_count(args.fault_count)
        .key(&args.key)
        .within(Duration::from_secs(args.within))
        .semantics(if args.at_least_once {
            Semantics::AtLeastOnce
        } else {
            Semantics::ExactlyOnce
        });
    rehearsal = match (&args.events, args.count) {
        (Some(file), Some(n)) => {
            rehearsal.inputs_like(read_event_bodies(file).map_err(|e| e.to_string())?, n)
        }
        (Some(file), None) => rehearsal.inputs(read_event_bodies(file).map_err(|e| e.to_string())?),
        (None, Some(n)) => rehearsal.count(n),
        (None, None) => rehearsal,
    };
    if let Some(function) = &args.function {
        rehearsal = rehearsal.function(function);
    }
    let handler = match &args.handler {
        Some(handler) => handler.clone(),
        // Found as `emulate` finds it: the app folder, `PATH` (this build's folder first), or
        // where Cargo built it.
        None => handler_executable(&args.app).map_err(|e| e.to_string())?,
    };
    if let Some(kept) = &args.only_faults {
        rehearsal = rehearsal.only_faults(kept);
    }
    if let Some(n) = args.first_inputs {
        rehearsal = rehearsal.first_inputs(n);
    }
    let report = if args.simulate {
        let (app, handler) = (args.app.clone(), handler.clone());
        let simulated =
            tokio::task::spawn_blocking(move || simulate(&args, rehearsal, &app, &handler))
                .await
                .map_err(|e| e.to_string())?;
        match simulated? {
            Some(report) => report,
            None => return Ok(()),
        }
    } else {
        // The emulated instances say how they run in the log (stderr): stdout is the report's.
        rehearsal
            .run(&args.app, &handler)
            .await
            .map_err(|e| e.to_string())?
    };
    println!("{}", serde_json::to_string_pretty(&report).expect("JSON"));
    eprintln!("{}", report.summary());
    if report.passed {
        Ok(())
    } else {
        Err(format!(
            "the rehearsal failed (seed {}): {} missing, {} duplicated",
            report.seed,
            report.missing.len(),
            report.duplicated.len()
        ))
    }
}

/// The simulated rehearsal: one seed (shrunk when it fails), or `--seeds` of them (their
/// verdicts printed here; `None` then). A shrunk plan's replay is given as this command.
fn simulate(
    args: &Args,
    rehearsal: Rehearsal,
    app: &Path,
    handler: &Path,
) -> Result<Option<hubhost_rehearse::Report>, String> {
    let simulation = rehearsal
        .simulated_process(app, handler)
        .map_err(|e| e.to_string())?;
    let replay = |seed: u64, shrunk: &hubhost_rehearse::Shrunk| {
        replay_command(args, seed, &shrunk.faults, shrunk.inputs)
    };
    if let Some(n) = args.seeds {
        let mut seeds = simulation
            .seeds(args.seed..args.seed + n)
            .map_err(|e| e.to_string())?;
        for report in &mut seeds.failing {
            if let Some(shrunk) = &mut report.shrunk {
                shrunk.replay = replay(report.seed, shrunk);
            }
        }
        println!("{}", serde_json::to_string_pretty(&seeds).expect("JSON"));
        eprintln!("{}", seeds.summary());
        return if seeds.failing.is_empty() {
            Ok(None)
        } else {
            Err(format!(
                "{} of {} seeds failed: {}",
                seeds.failing.len(),
                seeds.runs,
                seeds
                    .failing
                    .iter()
                    .map(|r| r.seed.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        };
    }
    let (mut report, trace) = if args.trace {
        let (report, trace) = simulation.trace().map_err(|e| e.to_string())?;
        (report, Some(trace))
    } else {
        (simulation.run().map_err(|e| e.to_string())?, None)
    };
    if let Some(trace) = trace {
        eprint!("{trace}");
    }
    // A plan already cut down is what the user asked to see, not one to shrink again.
    if args.only_faults.is_none() && args.first_inputs.is_none() {
        report.shrunk = simulation.shrink(&report).map_err(|e| e.to_string())?;
        if let Some(shrunk) = &mut report.shrunk {
            shrunk.replay = replay(report.seed, shrunk);
        }
    }
    Ok(Some(report))
}

/// This command as typed, for `seed` with only the faults `kept` and the first `inputs` inputs.
fn replay_command(args: &Args, seed: u64, kept: &[usize], inputs: usize) -> String {
    let mut command = format!("hubhost rehearse --simulate --app {}", args.app.display());
    if let Some(handler) = &args.handler {
        command.push_str(&format!(" --handler {}", handler.display()));
    }
    if let Some(function) = &args.function {
        command.push_str(&format!(" --function {function}"));
    }
    match (&args.events, args.count) {
        (Some(file), _) => command.push_str(&format!(" --events {}", file.display())),
        (None, Some(n)) => command.push_str(&format!(" --count {n}")),
        (None, None) => {}
    }
    command.push_str(&format!(" --faults {}", args.faults));
    if args.fault_count > 0 {
        command.push_str(&format!(" --fault-count {}", args.fault_count));
    }
    if args.key != "id" {
        command.push_str(&format!(" --key {}", args.key));
    }
    if args.at_least_once {
        command.push_str(" --at-least-once");
    }
    let kept: Vec<String> = kept.iter().map(usize::to_string).collect();
    command.push_str(&format!(
        " --seed {seed} --only-faults {} --first-inputs {inputs}",
        kept.join(",")
    ));
    command
}

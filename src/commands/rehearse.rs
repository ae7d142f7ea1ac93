//! `hubhost rehearse`: the app under a seeded plan of the faults Azure brings, and the audit of
//! what its outputs did with each input (see `hubhost_rehearse`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hubhost_host::emulate::handler_executable;
use hubhost_host::emulate::invoke::{EventSpec, parse_events};
use hubhost_rehearse::{FaultKind, Rehearsal, Semantics};

/// Run the app as Azure runs it while the faults Azure brings happen to it — the handler killed
/// mid-batch, a second instance joining and leaving, an owner frozen past its ownership, an
/// output failing, the hub detaching links, the checkpoint store down, geo-replication offsets
/// — then match every event the eventHub outputs sent and every blob the blob outputs wrote to
/// the inputs. Prints a JSON report (inputs, missing, duplicated, faults, seed) on stdout and a
/// summary on stderr; exits non-zero when an effect is missing, or duplicated under exactly once.
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
    /// else as JSON); only the bodies are sent.
    #[arg(long, conflicts_with = "count")]
    pub events: Option<PathBuf>,
    /// Generated inputs {"id":"input-00001","n":1}… [default: 200].
    #[arg(long)]
    pub count: Option<usize>,
    /// The plan's seed: the same seed, the same faults at the same points.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Faults to draw from, comma-separated: kill-handler, scale-out, freeze, output-failure,
    /// detach, store-outage, geo-offsets; or default (all but geo-offsets), all.
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
    /// How long the run may take before what is unprocessed counts as missing, in seconds.
    #[arg(long, default_value_t = 180)]
    pub within: u64,
}

pub async fn run(args: Args) -> Result<(), String> {
    let kinds = FaultKind::parse_list(&args.faults)?;
    let mut rehearsal = Rehearsal::new(args.seed)
        .faults(&kinds)
        .fault_count(args.fault_count)
        .key_field(&args.key)
        .within(Duration::from_secs(args.within))
        .semantics(if args.at_least_once {
            Semantics::AtLeastOnce
        } else {
            Semantics::ExactlyOnce
        });
    rehearsal = match (&args.events, args.count) {
        (Some(file), _) => rehearsal.inputs(read_events(file)?),
        (None, Some(n)) => rehearsal.count(n),
        (None, None) => rehearsal,
    };
    if let Some(function) = &args.function {
        rehearsal = rehearsal.function(function);
    }
    let handler = match args.handler {
        Some(handler) => handler,
        // Found as `emulate` finds it: the app folder, `PATH` (this build's folder first), or
        // where Cargo built it.
        None => handler_executable(&args.app).map_err(|e| e.to_string())?,
    };
    // The emulated instances print their start-up lines; stdout is the report's alone.
    let stdout = StdoutToStderr::begin();
    let report = rehearsal.run(&args.app, &handler).await;
    drop(stdout);
    let report = report.map_err(|e| e.to_string())?;
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

/// The events file's bodies, read as `hubhost invoke` reads an events file (a JSON array, or
/// NDJSON; an object with `body` is an event, any other value the body itself): the rehearsal
/// sends the bodies and spreads them over the partitions itself.
fn read_events(file: &Path) -> Result<Vec<Vec<u8>>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let events = parse_events(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(events.iter().map(EventSpec::body_bytes).collect())
}

/// While alive, what is written to stdout goes to stderr.
struct StdoutToStderr {
    saved: libc::c_int,
}

impl StdoutToStderr {
    fn begin() -> Self {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // SAFETY: duplicating and replacing this process's own standard descriptors.
        let saved = unsafe { libc::dup(1) };
        if saved >= 0 {
            unsafe { libc::dup2(2, 1) };
        }
        StdoutToStderr { saved }
    }
}

impl Drop for StdoutToStderr {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        if self.saved >= 0 {
            // SAFETY: restoring the descriptor saved in `begin`.
            unsafe {
                libc::dup2(self.saved, 1);
                libc::close(self.saved);
            }
        }
    }
}

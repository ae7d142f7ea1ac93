//! `hubhost new`: a new Rust function app (see `hubhost_project::scaffold`).

use std::path::PathBuf;

/// Create a Rust function app with one Event Hubs function.
///
/// A new Rust function app with one Event Hubs function, on hubhost-functions (as `func init`
/// and `func new` for other languages): the Cargo project with the Cargo.lock hubhost was
/// tested with, its function_app/, sample events, a README, and tests that need nothing
/// running: a unit test calling the function as the host does, an integration test running
/// the whole app under the emulated host on a local event hub, and a simulated rehearsal of
/// 200 seeds of Azure's faults in virtual time, all inside `cargo test`.
#[derive(clap::Args)]
pub struct Args {
    /// The folder to create (its name is the package's).
    pub dir: PathBuf,
    /// The function's name (its folder in function_app/ and its Rust type).
    #[arg(long, default_value = "ProcessEvents")]
    pub function: String,
    /// The event hub the trigger reads.
    #[arg(long = "event-hub", default_value = "sensors")]
    pub event_hub: String,
    #[arg(long, default_value = "$Default")]
    pub consumer_group: String,
    /// The trigger's cardinality: a batch (`many`) or one event per invocation.
    #[arg(long, value_enum, default_value = "many")]
    pub cardinality: hubhost_project::scaffold::Cardinality,
    /// The trigger's dataType: how the host encodes event bodies.
    #[arg(long, value_enum, default_value = "string")]
    pub data_type: hubhost_project::scaffold::DataType,
    /// A Storage queue the function puts one message on per event: a `queue` output on the
    /// app's storage (`AzureWebJobsStorage`; with it unset, `hubhost emulate` keeps the
    /// messages in its outbox).
    #[arg(long = "queue-output", value_name = "QUEUE")]
    pub queue_output: Option<String>,
    /// An event hub the function forwards each event to: an `eventHub` output on the trigger's
    /// connection (`hubhost hub` serves it).
    #[arg(
        long = "event-hub-output",
        value_name = "HUB",
        conflicts_with = "queue_output"
    )]
    pub event_hub_output: Option<String>,
    /// Where hubhost-functions comes from: a folder (e.g. a checkout's crates/functions) or a
    /// version [default: this build's checkout, if present, else its version].
    #[arg(long)]
    pub framework: Option<String>,
}

pub async fn run(args: Args) -> Result<(), String> {
    let Args {
        dir,
        function,
        event_hub,
        consumer_group,
        cardinality,
        data_type,
        queue_output,
        event_hub_output,
        framework,
    } = args;
    let mut scaffold = hubhost_project::scaffold::Scaffold::for_dir(&dir);
    scaffold.function = function;
    scaffold.event_hub = event_hub;
    scaffold.consumer_group = consumer_group;
    scaffold.cardinality = cardinality;
    scaffold.data_type = data_type;
    scaffold.queue_output = queue_output;
    scaffold.event_hub_output = event_hub_output;
    if let Some(f) = framework {
        scaffold.framework = hubhost_project::scaffold::Framework::parse(&f);
    }
    let framework = scaffold.framework.clone();
    let files = scaffold.write(&dir).map_err(|e| e.to_string())?;
    println!("created {} ({} files):", dir.display(), files.len());
    for f in files {
        println!("  {}", f.display());
    }
    match framework {
        hubhost_project::scaffold::Framework::Version(v) => println!(
            "hubhost-functions: version {v:?} from crates.io; to build against a local checkout instead, \
             pass --framework PATH/TO/hubhost/crates/functions (or set hubhost-functions = {{ path = \"…\" }} in Cargo.toml)"
        ),
        hubhost_project::scaffold::Framework::Path(p) => println!(
            "hubhost-functions: the checkout at {} (--framework VERSION depends on a published release instead)",
            p.display()
        ),
    }
    println!(
        "next: cd {} && cargo test; then hubhost invoke {} --events events.json, and hubhost emulate --app function_app --watch (with `hubhost hub` running)",
        dir.display(),
        scaffold.function
    );
    Ok(())
}

//! `hubhost new`: a new Rust function app (see `hubhost::scaffold`).

use std::path::PathBuf;

/// A new Rust function app with one Event Hubs function, on hubhost-functions (as `func init`
/// and `func new` for other languages): the Cargo project, its function_app/, a README, and
/// a test that runs it under `hubhost emulate` on `hubhost hub`.
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
    pub cardinality: hubhost::scaffold::Cardinality,
    /// The trigger's dataType: how the host encodes event bodies.
    #[arg(long, value_enum, default_value = "string")]
    pub data_type: hubhost::scaffold::DataType,
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
        framework,
    } = args;
    let mut scaffold = hubhost::scaffold::Scaffold::for_dir(&dir);
    scaffold.function = function;
    scaffold.event_hub = event_hub;
    scaffold.consumer_group = consumer_group;
    scaffold.cardinality = cardinality;
    scaffold.data_type = data_type;
    if let Some(f) = framework {
        scaffold.framework = hubhost::scaffold::Framework::parse(&f);
    }
    let files = scaffold.write(&dir).map_err(|e| e.to_string())?;
    println!("created {} ({} files):", dir.display(), files.len());
    for f in files {
        println!("  {}", f.display());
    }
    println!(
        "next: cd {} && cargo build && hubhost emulate --app function_app   (with `hubhost hub` running)",
        dir.display()
    );
    Ok(())
}

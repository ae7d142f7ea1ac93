//! `hubhost add`: one more Event Hubs function in a project `hubhost new` made (see
//! `hubhost_project::add`).

use std::path::PathBuf;

use hubhost_project::add::{AddFunction, add_function};
use hubhost_project::scaffold::{Cardinality, DataType};

/// Add an Event Hubs function to a project `hubhost new` made.
///
/// As `func new` adds one to an app: its folder in function_app/ on a consumer group of its
/// own (two functions on one group compete for its events, each seeing only part of them), its
/// type in a module of its own (src/NAME.rs), and its registration beside the first
/// function's in src/main.rs and tests/simulation.rs, so that `cargo test` still passes.
#[derive(clap::Args)]
pub struct Args {
    /// The function's name (its folder in function_app/ and its Rust type).
    pub function: String,
    /// The project's folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// The event hub the trigger reads [default: the first function's].
    #[arg(long = "event-hub")]
    pub event_hub: Option<String>,
    /// Its consumer group [default: the function's name, lowercased].
    #[arg(long)]
    pub consumer_group: Option<String>,
    /// The trigger's cardinality: a batch (`many`) or one event per invocation.
    #[arg(long, value_enum, default_value = "many")]
    pub cardinality: Cardinality,
    /// The trigger's dataType: how the host encodes event bodies.
    #[arg(long, value_enum, default_value = "string")]
    pub data_type: DataType,
}

pub async fn run(args: Args) -> Result<(), String> {
    let add = AddFunction {
        function: args.function.clone(),
        event_hub: args.event_hub,
        consumer_group: args.consumer_group,
        cardinality: args.cardinality,
        data_type: args.data_type,
    };
    let added = add_function(&args.project, &add).map_err(|e| e.to_string())?;
    println!(
        "added {} (event hub {}, consumer group {}):",
        args.function, added.event_hub, added.consumer_group
    );
    for f in &added.created {
        println!("  created {}", f.display());
    }
    for f in &added.changed {
        println!("  changed {}", f.display());
    }
    for f in &added.register_by_hand {
        println!(
            "  {}: no place found for its registration; add `.function(\"{}\", …)` to its FunctionServer::builder() yourself",
            f.display(),
            args.function
        );
    }
    println!(
        "the consumer group {} must exist on the event hub: `hubhost hub add-consumer-group {} {}` locally (the tests create it), or in Azure",
        added.consumer_group, added.event_hub, added.consumer_group
    );
    Ok(())
}

//! `hubhost docs`: the API docs of the hubhost crates a project uses (see
//! `hubhost_project::docs`).

use std::path::PathBuf;

/// Build the API docs of the hubhost crates a project uses
///
/// Every hubhost crate the project depends on, as a dependency or a dev-dependency, documented
/// into its target/doc with the versions its Cargo.lock holds. `cargo doc -p hubhost-testkit`
/// cannot: Cargo does not document a dev-dependency (it panics, rust-lang/cargo#11105).
#[derive(clap::Args)]
pub struct Args {
    /// The project's folder.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    /// Open the docs in a browser, as `cargo doc --open` does.
    #[arg(long)]
    pub open: bool,
}

pub async fn run(args: Args) -> Result<(), String> {
    let documented = tokio::task::spawn_blocking(move || {
        hubhost_project::docs::document(&args.project, args.open)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    println!(
        "documented {}: {}",
        documented.crates.join(", "),
        documented.index.display()
    );
    Ok(())
}

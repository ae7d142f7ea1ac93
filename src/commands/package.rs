//! `hubhost package`: the deployment zip (see `hubhost_project::package`).

use std::path::PathBuf;

/// Build the handler for Azure's Linux images and zip the app.
///
/// Builds the custom handler for the Functions Linux images (glibc 2.28, with cargo zigbuild)
/// and zips the script root with it: host.json, the function folders, the executable with its
/// run bit, no local.settings.json, no links. Then reads the zip back and checks it: host.json
/// and every function.json against the official schemas, the executable there, runnable, and
/// needing nothing newer than glibc 2.28.
#[derive(clap::Args)]
pub struct Args {
    /// The script root.
    #[arg(long, default_value = "function_app")]
    pub app: PathBuf,
    #[arg(long, default_value = "app.zip")]
    pub out: PathBuf,
    /// Package this executable instead of building one (it is checked all the same).
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// The Cargo.toml of the package to build [default: cargo's, from here].
    #[arg(long, conflicts_with = "binary")]
    pub manifest_path: Option<PathBuf>,
    /// The Rust target to build for (zigbuild's glibc suffix sets the glibc).
    #[arg(long, default_value = hubhost_project::package::DEFAULT_TARGET, conflicts_with = "binary")]
    pub target: String,
    /// Only check an existing zip (the one --out names).
    #[arg(long, conflicts_with_all = ["binary", "manifest_path"])]
    pub check: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: Args) -> Result<(), String> {
    let Args {
        app,
        out,
        binary,
        manifest_path,
        target,
        check,
        json,
    } = args;
    let report = if check {
        hubhost_project::package::check_zip(&out)
    } else {
        hubhost_project::package::package(&hubhost_project::package::PackageOptions {
            app,
            out,
            binary,
            manifest_path,
            target,
        })
    }
    .map_err(|e| e.to_string())?;
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("the report is JSON")
        );
        return Ok(());
    }
    println!("{}: valid", report.zip);
    println!(
        "  executable {} ({} bytes), needs {} and glibc {}",
        report.executable,
        report.files.get(&report.executable).copied().unwrap_or(0),
        report.libraries.join(", "),
        report.newest_glibc.as_deref().unwrap_or("nothing")
    );
    println!("  functions: {}", report.functions.join(", "));
    for (name, bytes) in &report.files {
        println!("  {bytes:>10}  {name}");
    }
    Ok(())
}

//! `hubhost bench …`: the benchmarks and the chaos rig live in their own executable,
//! `hubhost-bench`, so that none of them is linked into what a deployment runs; this command
//! hands it the rest of the command line.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

/// Benchmarks and the chaos rig (`hubhost bench --help` lists them).
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
pub struct Args {
    /// The benchmark and its flags, as `hubhost-bench` takes them.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// Replaces this process with `hubhost-bench` (beside this executable, else on PATH).
pub fn forward(args: Args) -> ExitCode {
    let Some(program) = bench_executable() else {
        eprintln!(
            "hubhost: hubhost-bench is not installed beside hubhost nor on PATH: build it with \
             `cargo build --release --workspace` in a checkout (it builds both), or `cargo install --path crates/bench`"
        );
        return ExitCode::FAILURE;
    };
    let error = std::process::Command::new(&program).args(args.args).exec();
    eprintln!("hubhost: {}: {error}", program.display());
    ExitCode::FAILURE
}

fn bench_executable() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|me| Some(me.parent()?.join("hubhost-bench")))
        .filter(|path| path.is_file());
    beside.or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join("hubhost-bench"))
            .find(|path| path.is_file())
    })
}

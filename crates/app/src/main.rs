//! `hubhost-app`: the reference app's custom handler and nothing else — the executable a
//! deployment runs. host.json starts it; the Functions host passes the port in
//! FUNCTIONS_CUSTOMHANDLER_PORT. It links the app, the framework, storage and the
//! checkpoint reader the page uses; not the local hub, the emulated host or the benchmarks.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

/// The handler's per-event buffers are short-lived and cross threads; glibc's allocator spent a
/// fifth of the pipeline's time on them when profiled, mimalloc's thread-local pages much less.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "hubhost-app",
    version,
    about = "The reference app's Azure Functions custom handler (SensorAggregator, RawArchive, Dashboard)"
)]
struct Cli {
    #[command(flatten)]
    serve: hubhost_app::serve::Args,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    match runtime.block_on(hubhost_app::serve::run(cli.serve)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("hubhost-app: {message}");
            ExitCode::FAILURE
        }
    }
}

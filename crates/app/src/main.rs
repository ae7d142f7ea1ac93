//! `hubhost-app`: the reference app's custom handler and nothing else — the executable a
//! deployment runs. host.json starts it; the Functions host passes the port in
//! FUNCTIONS_CUSTOMHANDLER_PORT. It links the app, the framework, storage and the
//! checkpoint reader the page uses; not the local hub, the emulated host or the benchmarks.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc, without transparent huge pages: see `hubhost_process::allocator`.
#[global_allocator]
static ALLOCATOR: hubhost_process::allocator::Allocator = hubhost_process::allocator::Allocator;

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
    hubhost_process::allocator::disable_transparent_huge_pages();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    // Inside the runtime: OTLP over gRPC, when asked for, runs its connection on it.
    let _runtime = runtime.enter();
    hubhost_functions::server::init_logging();
    match runtime.block_on(hubhost_app::serve::run(cli.serve)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("hubhost-app: {message}");
            ExitCode::FAILURE
        }
    }
}

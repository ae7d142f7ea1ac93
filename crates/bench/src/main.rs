//! `hubhost-bench`: the benchmarks and the chaos rig, a binary of their own so that none of it
//! is linked into what Azure runs. `hubhost bench …` forwards here. It drives the `hubhost`
//! executable found beside it (or on PATH) as child processes: hubs, emulated hosts, handlers.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// As in `hubhost`: the pipeline measured runs on mimalloc without transparent huge pages, and
/// so does what measures it.
#[global_allocator]
static ALLOCATOR: hubhost_process::allocator::Allocator = hubhost_process::allocator::Allocator;

#[derive(Parser)]
#[command(
    name = "hubhost-bench",
    version,
    about = "hubhost's benchmarks and chaos rig, each printing a baseline measured in the same run"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Bench(cli::BenchCommand),
    /// The trivial function `bench handler` compares the reference app with (the framework's
    /// own cost).
    #[command(hide = true)]
    TrivialHandler {
        #[arg(long)]
        port: u16,
    },
}

fn main() -> ExitCode {
    hubhost_process::allocator::disable_transparent_huge_pages();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let _entered = runtime.enter();
    // The benchmarks print their own progress; the SDK warns about connection recovery it
    // then completes, and failed sends are reported. The trivial handler exports traces when
    // `bench handler` measures tracing's cost (by the standard OTEL_* variables).
    // `bench pool --tracing` keeps the pipeline's spans in a collector of its own, and its
    // simulator stamps the readings as a traced producer would (this process exports to it).
    let collector = match &cli.command {
        Command::Bench(cli::BenchCommand::Pool { tracing: true, .. }) => Some(std::sync::Arc::new(
            runtime
                .block_on(hubhost_telemetry::collector::Collector::start(0, 0))
                .expect("a loopback port for the trace collector"),
        )),
        _ => None,
    };
    hubhost_telemetry::Logging {
        service_name: match &cli.command {
            Command::TrivialHandler { .. } => "hubhost-bench-trivial-handler",
            Command::Bench(_) => "hubhost-bench",
        },
        default_level: "warn,azure_messaging_eventhubs=error,azure_core_amqp=error",
        json: false,
        export: matches!(cli.command, Command::TrivialHandler { .. }),
        local_collector: collector.as_ref().map(|c| c.endpoint()),
    }
    .install();
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Bench(which) => cli::run(which, collector).await,
            Command::TrivialHandler { port } => hubhost_bench::handler::serve_trivial(port)
                .await
                .map_err(|e| e.to_string()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("hubhost-bench: {message}");
            ExitCode::FAILURE
        }
    }
}

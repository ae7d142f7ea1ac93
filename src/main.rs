//! The `hubhost` command line: one subcommand per job. Each parses its flags, sets up logging and
//! hands over to the library module that does the work.

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// mimalloc, without transparent huge pages, as in the deployed handler: why in
/// `hubhost_process::allocator`.
#[global_allocator]
static ALLOCATOR: hubhost_process::allocator::Allocator = hubhost_process::allocator::Allocator;

#[derive(Parser)]
#[command(
    name = "hubhost",
    version,
    about = "Azure Event Hubs consumers as an Azure Functions custom handler, with a local emulation mode"
)]
struct Cli {
    /// Log format on stderr: text (default) or json.
    #[arg(
        long,
        value_enum,
        value_name = "FORMAT",
        default_value_t = LogFormat::Text,
        hide_default_value = true,
        hide_possible_values = true,
        global = true,
        env = "HUBHOST_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// The commands; each one's flags and documentation live in its module under `commands/`.
#[derive(Subcommand)]
enum Command {
    /// Run the reference app's handler (what hubhost-app runs).
    ///
    /// The reference app's custom handler, as `hubhost-app`, the deployed executable, runs it.
    Serve(hubhost_app::serve::Args),
    Demo(commands::demo::Args),
    Emulate(commands::emulate::Args),
    Invoke(commands::invoke::Args),
    Rehearse(commands::rehearse::Args),
    /// Inspect, reset and migrate checkpoints and ownership.
    ///
    /// Checkpoints and ownership in the Functions host's blob format (current and legacy).
    Checkpoints {
        #[command(subcommand)]
        action: commands::checkpoints::CheckpointsCommand,
    },
    Hub(Box<commands::hub::Args>),
    Simulate(commands::simulate::Args),
    Bench(commands::bench::Args),
    New(commands::new::Args),
    Add(commands::add::Args),
    Docs(commands::docs::Args),
    Package(commands::package::Args),
}

fn main() -> ExitCode {
    hubhost_process::allocator::disable_transparent_huge_pages();
    let cli = Cli::parse();
    // The demo and benchmarks print their own progress; the handler's per-batch lines would drown it.
    let default_level = match cli.command {
        Command::Serve { .. } | Command::Hub { .. } => "info",
        // The SDK logs each failed attempt of its own retries (a wrong key: twenty lines a
        // second); hubhost says what failed once, naming the function and its setting.
        Command::Emulate { .. } => {
            "info,azure_messaging_eventhubs=off,azure_core_amqp=off,fe2o3_amqp=off"
        }
        // The SDK warns about connection recovery it then completes; failed sends are reported.
        Command::Simulate { .. } | Command::Demo { .. } => {
            "warn,azure_messaging_eventhubs=error,azure_core_amqp=error"
        }
        _ => "warn",
    };
    // `bench` hands the whole command line to hubhost-bench, which sets up its own logging.
    if let Command::Bench(args) = cli.command {
        return commands::bench::forward(args);
    }
    // The commands that run functions trace them when the standard `OTEL_*` variables ask.
    let export = match &cli.command {
        Command::Serve { .. } | Command::Emulate { .. } | Command::Invoke { .. } => true,
        Command::Hub(args) => args.traces,
        _ => false,
    };
    let service_name = match &cli.command {
        Command::Serve(_) => "hubhost-app",
        Command::Hub(_) => "hubhost-hub",
        _ => "hubhost-emulate",
    };
    // `simulate` sends through the SDK, whose sends can hang on a multi-threaded runtime
    // (see `eventhubs::on_sending_thread`); one thread is also all it needs.
    let runtime = match cli.command {
        Command::Simulate { .. } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => hubhost_process::allocator::runtime(),
    }
    .expect("tokio runtime");
    // Inside the runtime: OTLP over gRPC, when asked for, runs its connection on it.
    let _entered = runtime.enter();
    // The demo (for its page) and `emulate --traces` keep their own traces: spans go to a
    // collector in this process.
    let keeps_traces = match &cli.command {
        Command::Demo(_) => true,
        Command::Emulate(args) => args.traces,
        _ => false,
    };
    let collector = keeps_traces.then(|| {
        std::sync::Arc::new(
            runtime
                .block_on(hubhost_telemetry::collector::Collector::start(
                    0,
                    commands::demo::TRACE_SPANS_KEPT,
                ))
                .expect("a loopback port for the trace collector"),
        )
    });
    hubhost_telemetry::Logging {
        service_name: match &cli.command {
            Command::Demo(_) => "hubhost-demo",
            _ => service_name,
        },
        default_level,
        json: matches!(cli.log_format, LogFormat::Json),
        export,
        local_collector: collector.as_ref().map(|c| c.endpoint()),
    }
    .install();
    let result: Result<(), String> = runtime.block_on(async move {
        let result = match cli.command {
            Command::Serve(args) => hubhost_app::serve::run(args).await,
            Command::Demo(args) => commands::demo::run(args, collector).await,
            Command::Emulate(args) => commands::emulate::run(args, collector).await,
            Command::Invoke(args) => commands::invoke::run(args).await,
            Command::Rehearse(args) => commands::rehearse::run(args).await,
            Command::Checkpoints { action } => commands::checkpoints::run(action).await,
            Command::Hub(args) => commands::hub::run(*args).await,
            Command::Simulate(args) => commands::simulate::run(args).await,
            Command::Bench(_) => unreachable!("forwarded above"),
            Command::New(args) => commands::new::run(args).await,
            Command::Add(args) => commands::add::run(args).await,
            Command::Docs(args) => commands::docs::run(args).await,
            Command::Package(args) => commands::package::run(args).await,
        };
        // The last spans and metrics (an emulated host's stop, say) leave before the process
        // does; off the runtime's threads, as the exporters' clients block.
        let _ = tokio::task::spawn_blocking(hubhost_telemetry::shutdown).await;
        result
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("hubhost: {message}");
            ExitCode::FAILURE
        }
    }
}

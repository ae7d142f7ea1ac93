//! `hubhost emulate`: the Functions host's Event Hubs trigger, locally (see `hubhost_host::emulate`).

use std::net::IpAddr;
use std::path::PathBuf;

use super::{positive_seconds, shutdown_signal};

/// Run an app locally, its handler fed by the Event Hubs trigger.
///
/// The Functions host's Event Hubs trigger, locally: start the app's custom handler and feed it
/// the trigger's batches; several instances on one event hub and store form a pool.
#[derive(clap::Args)]
pub struct Args {
    /// Function app folder (host.json, */function.json, local.settings.json).
    #[arg(long, default_value = "function_app")]
    pub app: PathBuf,
    /// The app's storage, in place of its AzureWebJobsStorage setting: a connection string or
    /// a directory, for the checkpoints, the blob outputs and inputs on that connection, and
    /// the handler [default: the AzureWebJobsStorage setting, else ./hubhost-data].
    #[arg(long, env = "HUBHOST_STORAGE", hide_env_values = true)]
    pub storage: Option<String>,
    /// Checkpoint a batch only when its invocation succeeded, delivering a failed batch again
    /// (the Functions host checkpoints either way).
    #[arg(long)]
    pub checkpoint_on_success: bool,
    /// Azure's rule for a batch the handler gives no answer to (it died, or restarts): a failed
    /// attempt, counted towards the retry policy, and once the policy is spent (or without one)
    /// moved past, its events lost, as the Functions host does. By default such a batch is
    /// delivered again, so that nothing is lost to a crashed handler while you develop.
    #[arg(long)]
    pub azure_rules: bool,
    /// Run as the Functions scale controller instead of as one instance: start and stop
    /// instances of the app (each a `hubhost emulate` process) on the event hub's backlog, as
    /// target-based scaling does in Azure.
    #[arg(long, conflicts_with = "instance_id")]
    pub scale: bool,
    /// With --scale: the app's instance limit (functionAppScaleLimit; Flex Consumption's
    /// maximumInstanceCount defaults to 100). Event Hubs targets never exceed the partitions.
    #[arg(long, default_value_t = 100, requires = "scale", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_instances: u32,
    /// With --scale: seconds between decisions.
    #[arg(long, value_name = "SECONDS", default_value = "10", requires = "scale", value_parser = positive_seconds)]
    pub scale_interval: std::time::Duration,
    /// With --scale: seconds a scale-in waits after the last scale-up (the extension's 180;
    /// shorten it to watch a whole cycle).
    #[arg(long, value_name = "SECONDS", default_value = "180", requires = "scale", value_parser = positive_seconds)]
    pub scale_in_hold: std::time::Duration,
    /// With --scale: the older incremental model (the scale monitor's votes, one instance at
    /// a time; TARGET_BASED_SCALING_ENABLED=0 in Azure).
    #[arg(long, requires = "scale")]
    pub scale_monitor: bool,
    /// With --scale: folder for each instance's output (instance-N.log)
    /// [default: a new folder in the temporary directory].
    #[arg(long, requires = "scale")]
    pub scale_logs: Option<PathBuf>,
    /// This instance's owner id in the checkpoint store [default: WEBSITE_INSTANCE_ID, else
    /// CONTAINER_NAME, else the host name and the lowest slot free on this machine, e.g.
    /// myhost-0]. A restart under the same id reclaims its partitions at once; an id another
    /// process on this machine holds is refused.
    #[arg(long)]
    pub instance_id: Option<String>,
    /// Seconds an ownership of a foreign owner (the Functions host, an SDK processor: one
    /// that writes no hubhost expiry) stays active without renewal [default: 180, the
    /// longest SDK default; never below hubhost's own expiry].
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
    pub foreign_ownership_expiry: Option<std::time::Duration>,
    /// Serve Prometheus metrics on this port at /metrics (0: any free port; the URL is
    /// printed) [default: no endpoint].
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// Address of the metrics endpoint.
    #[arg(long, default_value = "127.0.0.1")]
    pub metrics_bind: IpAddr,
    /// Build the handler before starting (host.json's executable must lie in a Cargo target
    /// folder: `cargo build` for target/debug, `--release` for target/release), and again when
    /// its sources change, restarting only the handler: the partitions stay owned. A build that
    /// fails prints its errors and leaves the running handler in place.
    #[arg(long, conflicts_with = "scale")]
    pub watch: bool,
    /// Keep this run's traces without a tracing backend: the emulated host and the handler
    /// export to a collector in this process, and a line per function every 10 s says what the
    /// spans say (invocations, failures, the median and slowest, with its trace).
    #[arg(long, conflicts_with = "scale")]
    pub traces: bool,
    /// Rehearse faults on this instance, comma-separated: kill-handler, freeze, output-failure,
    /// store-outage, geo-offsets (scale-out and detach need `hubhost rehearse`). Each is logged
    /// with when and what; the same --seed gives the same faults at the same points.
    #[arg(long, conflicts_with = "scale")]
    pub faults: Option<String>,
    /// The fault plan's seed.
    #[arg(long, default_value_t = 1, requires = "faults")]
    pub seed: u64,
    /// How many faults at least (the kinds in turn).
    #[arg(long, default_value_t = 0, requires = "faults")]
    pub fault_count: usize,
    /// The events the faults spread over: their points fall between 5% and 60% of this many
    /// events handed to the function.
    #[arg(long, default_value_t = 1000, requires = "faults")]
    pub fault_span: usize,
    #[command(flatten)]
    pub outputs: super::OutboxArgs,
    /// Serve the app's HTTP functions on this port, at /api/{route} as func start does (0: any
    /// free port; with --scale, 0 only) [default: 7071, or a free port when 7071 is taken].
    #[arg(long)]
    pub http_port: Option<u16>,
}

/// How often `--traces` prints what the spans say.
const TRACE_SUMMARY_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// `collector`: where this process's spans go (`--traces`), the handler's too.
pub async fn run(
    args: Args,
    collector: Option<std::sync::Arc<hubhost_telemetry::collector::Collector>>,
) -> Result<(), String> {
    if args.scale {
        return scale(args).await;
    }
    let Args {
        app,
        storage,
        checkpoint_on_success,
        azure_rules,
        instance_id,
        foreign_ownership_expiry,
        metrics_port,
        metrics_bind,
        watch,
        faults,
        seed,
        fault_count,
        fault_span,
        outputs,
        http_port,
        ..
    } = args;
    let mut handler_settings = Vec::new();
    let summaries = collector.map(|collector| {
        // The handler exports where this process does, often, and no metrics (the collector
        // keeps spans only).
        for (name, value) in [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ] {
            handler_settings.push((name.to_string(), value.to_string()));
        }
        eprintln!("traces: {} (OTLP/HTTP)", collector.endpoint());
        tokio::spawn(async move {
            let mut seen = 0;
            let mut every = tokio::time::interval(TRACE_SUMMARY_EVERY);
            every.tick().await;
            loop {
                every.tick().await;
                let (spans, last) = collector.since(seen);
                seen = last;
                let summaries = hubhost_host::emulate::trace_summary::summarize(&spans);
                eprintln!(
                    "{}",
                    hubhost_host::emulate::trace_summary::line(
                        &summaries,
                        TRACE_SUMMARY_EVERY.as_secs()
                    )
                );
            }
        })
    });
    let faults = match faults {
        Some(list) => Some(fault_plan(&app, &list, seed, fault_count, fault_span)?),
        None => None,
    };
    let result = hubhost_host::emulate::run(
        hubhost_host::emulate::EmulateOptions {
            app,
            storage,
            checkpoint_on_success,
            instance_id,
            foreign_ownership_expiry,
            metrics: metrics_port.map(|port| (metrics_bind, port).into()),
            metrics_bound: None,
            watch,
            faults,
            drain: None,
            handler_settings,
            outbox: outputs.folder(),
            http_port,
            no_answer: if azure_rules {
                hubhost_host::emulate::NoAnswerRule::AsAzure
            } else {
                hubhost_host::emulate::NoAnswerRule::Redeliver
            },
            start_lines: hubhost_host::emulate::StartLines::Stdout,
        },
        shutdown_signal(),
    )
    .await
    .map_err(|e| e.to_string());
    if let Some(summaries) = summaries {
        summaries.abort();
    }
    result
}

/// `--scale`: the scale controller, starting this executable's `emulate` with the same app,
/// store and options for each instance.
async fn scale(args: Args) -> Result<(), String> {
    let program = std::env::current_exe().map_err(|e| format!("this executable: {e}"))?;
    let mut instance: Vec<std::ffi::OsString> = vec!["emulate".into(), "--app".into()];
    instance.push(args.app.clone().into());
    if let Some(storage) = &args.storage {
        instance.extend(["--storage".into(), storage.into()]);
    }
    if args.azure_rules {
        instance.push("--azure-rules".into());
    }
    if args.checkpoint_on_success {
        instance.push("--checkpoint-on-success".into());
    }
    match args.http_port {
        // Each instance its own free port; by default the first takes 7071 and the others
        // free ones.
        Some(0) => instance.extend(["--http-port".into(), "0".into()]),
        Some(port) => {
            return Err(format!(
                "--http-port {port} with --scale: the instances cannot share one port; give 0 (each a free port) or leave it out (the first takes 7071)"
            ));
        }
        None => {}
    }
    if args.outputs.strict_bindings {
        instance.push("--strict-bindings".into());
    } else {
        instance.extend(["--outbox".into(), args.outputs.outbox.clone().into()]);
    }
    if let Some(expiry) = args.foreign_ownership_expiry {
        instance.extend([
            "--foreign-ownership-expiry".into(),
            expiry.as_secs_f64().to_string().into(),
        ]);
    }
    if args.metrics_port.is_some() {
        // One port cannot serve them all: each picks its own and prints it in its log.
        instance.extend(["--metrics-port".into(), "0".into()]);
        instance.extend([
            "--metrics-bind".into(),
            args.metrics_bind.to_string().into(),
        ]);
    }
    let logs = match args.scale_logs {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("hubhost-scale-{}", std::process::id())),
    };
    hubhost_host::scale::run(
        hubhost_host::scale::ScaleOptions {
            app: args.app,
            storage: args.storage,
            instance: hubhost_host::scale::InstanceCommand {
                program,
                args: instance,
            },
            max_instances: args.max_instances,
            interval: args.scale_interval,
            scale_in_hold: args.scale_in_hold,
            incremental: args.scale_monitor,
            logs,
        },
        shutdown_signal(),
    )
    .await
    .map_err(|e| e.to_string())
}

/// The switches of this instance and the task that turns them by a seeded plan.
fn fault_plan(
    app: &std::path::Path,
    list: &str,
    seed: u64,
    count: usize,
    span: usize,
) -> Result<std::sync::Arc<hubhost_host::emulate::faults::FaultSwitch>, String> {
    use hubhost_rehearse::FaultKind;
    let kinds = FaultKind::parse_list(list)?;
    if let Some(kind) = kinds.iter().find(|k| !k.on_one_instance()) {
        return Err(if kind.simulated_only() {
            format!(
                "--faults {}: only the simulated rehearsal can do it (`hubhost rehearse --simulate`)",
                kind.name()
            )
        } else {
            format!(
                "--faults {}: one instance cannot do it; `hubhost rehearse` runs a second instance and the hub",
                kind.name()
            )
        });
    }
    let app = hubhost_functions::function_app::FunctionApp::load(app).map_err(|e| e.to_string())?;
    let outputs: Vec<String> = app
        .functions
        .iter()
        .flat_map(|f| f.outputs().map(|b| b.name.clone()))
        .collect();
    let plan = hubhost_rehearse::plan::schedule(seed, &kinds, count, span, &outputs);
    let handed_out = std::sync::Arc::new(tokio::sync::watch::channel(0).0);
    let switch = hubhost_host::emulate::faults::FaultSwitch::new(
        handed_out.clone(),
        Default::default(),
        Default::default(),
    );
    eprintln!(
        "hubhost emulate: rehearsing {} faults (seed {seed}): {}",
        plan.len(),
        serde_json::to_string(&plan).expect("JSON")
    );
    tokio::spawn(hubhost_rehearse::drive_instance(
        switch.clone(),
        handed_out.subscribe(),
        plan,
    ));
    Ok(switch)
}

//! Logging, and OpenTelemetry export configured the way every OpenTelemetry SDK is: by the
//! standard environment variables, and nothing exported when they are unset.
//!
//! - Traces are exported when `OTEL_EXPORTER_OTLP_ENDPOINT` or
//!   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_TRACES_EXPORTER` is not `none`);
//!   metrics likewise with `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` / `OTEL_METRICS_EXPORTER`.
//!   `OTEL_SDK_DISABLED=true` turns both off.
//! - The protocol is `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `grpc`
//!   when built with this crate's `grpc` feature: tonic and its HTTP/2 stack add about 2.5 MB,
//!   which a deployed handler would carry on every cold start, so it speaks HTTP only);
//!   `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER(_ARG)`,
//!   `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_EXPORTER_OTLP_HEADERS` are
//!   read by the OpenTelemetry SDK itself.
//! - Log lines go to stderr as before; inside a traced span they carry its `trace_id`.
//!
//! Which variables say what is decided by [`ExportSettings::from_lookup`], a pure function; the
//! rest builds the SDK's pipeline from it. An exporter that cannot be built is reported and
//! left out: a process never fails to start because telemetry is misconfigured.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;

use tracing::field::{Field, Visit};
use tracing::span::Record;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::FormattedFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Whether spans are being exported: when not, callers skip building spans at all, so that
/// tracing off costs nothing.
static EXPORTING_TRACES: AtomicBool = AtomicBool::new(false);
static EXPORTING_METRICS: AtomicBool = AtomicBool::new(false);
static INSTALLED: OnceLock<Telemetry> = OnceLock::new();

/// The wire protocol OTLP is sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP over HTTP with protobuf bodies (`http/protobuf`, port 4318 by convention).
    HttpProtobuf,
    /// OTLP over gRPC (`grpc`, port 4317 by convention).
    Grpc,
}

/// What the environment asks to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSettings {
    /// Export spans.
    pub traces: bool,
    /// Export metrics.
    pub metrics: bool,
    /// With which protocol.
    pub protocol: Protocol,
    /// `OTEL_SERVICE_NAME` is unset: the caller's default name is used.
    pub default_service_name: bool,
}

/// Why the environment's telemetry settings cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TelemetryError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names a protocol this build does not speak.
    #[error(
        "{variable} is {value:?}: hubhost exports OTLP as \"http/protobuf\" or \"grpc\" (\"http/json\" is not built in)"
    )]
    Protocol {
        /// Which variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` is `grpc` in an executable built without the `grpc`
    /// feature.
    #[error(
        "OTEL_EXPORTER_OTLP_PROTOCOL is \"grpc\", but this executable is built without OTLP over gRPC: \
         set it to \"http/protobuf\" and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port \
         (4318 by convention), or build with the `grpc` feature of hubhost-functions"
    )]
    GrpcNotBuilt,
    /// The SDK could not build an exporter from the settings (a malformed endpoint, say).
    #[error("cannot build the OTLP {signal} exporter: {reason}")]
    Exporter {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// The SDK's words.
        reason: String,
    },
}

impl ExportSettings {
    /// Reads the settings through `lookup` (the process environment in
    /// [`ExportSettings::from_environment`]); an empty value counts as unset, as the
    /// specification asks.
    ///
    /// ```
    /// use hubhost_telemetry::{ExportSettings, Protocol};
    ///
    /// let env = |pairs: &'static [(&'static str, &'static str)]| {
    ///     move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    /// };
    /// let off = ExportSettings::from_lookup(env(&[]))?;
    /// assert!(!off.traces && !off.metrics);
    /// let on = ExportSettings::from_lookup(env(&[
    ///     ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
    ///     ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    /// ]))?;
    /// assert!(on.traces && on.metrics);
    /// assert_eq!(on.protocol, Protocol::Grpc);
    /// # Ok::<(), hubhost_telemetry::TelemetryError>(())
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, TelemetryError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let disabled = get("OTEL_SDK_DISABLED").is_some_and(|v| v.trim() == "true");
        let endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        let wanted = |signal_endpoint: &str, exporter: &str| {
            !disabled
                && (endpoint || get(signal_endpoint).is_some())
                && get(exporter).is_none_or(|v| v.trim() != "none")
        };
        let traces = wanted("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER");
        let metrics = wanted(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "OTEL_METRICS_EXPORTER",
        );
        let variable = "OTEL_EXPORTER_OTLP_PROTOCOL";
        let protocol = match get(variable).as_deref().map(str::trim) {
            None | Some("http/protobuf") => Protocol::HttpProtobuf,
            Some("grpc") => Protocol::Grpc,
            Some(other) if traces || metrics => {
                return Err(TelemetryError::Protocol {
                    variable,
                    value: other.to_string(),
                });
            }
            Some(_) => Protocol::HttpProtobuf,
        };
        Ok(ExportSettings {
            traces,
            metrics,
            protocol,
            default_service_name: get("OTEL_SERVICE_NAME").is_none(),
        })
    }

    /// Reads the settings from the process environment.
    pub fn from_environment() -> Result<Self, TelemetryError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Export nothing, whatever the environment says.
    pub fn nothing() -> Self {
        ExportSettings {
            traces: false,
            metrics: false,
            protocol: Protocol::HttpProtobuf,
            default_service_name: true,
        }
    }

    /// Spans only, over HTTP: what a process sends to a collector of its own.
    pub fn spans_only() -> Self {
        ExportSettings {
            traces: true,
            ..Self::nothing()
        }
    }
}

/// The installed pipeline: keep it until the process ends and call
/// [`Telemetry::shutdown`] then, so that the last spans and metrics are sent.
#[derive(Debug)]
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
}

impl Telemetry {
    /// Sends what is buffered and stops exporting. Safe to call more than once.
    pub fn shutdown(&self) {
        if let Some(provider) = &self.tracer_provider {
            let _ = provider.force_flush();
            let _ = provider.shutdown();
        }
        if let Some(provider) = &self.meter_provider {
            let _ = provider.force_flush();
            let _ = provider.shutdown();
        }
        EXPORTING_TRACES.store(false, Ordering::Relaxed);
        EXPORTING_METRICS.store(false, Ordering::Relaxed);
    }
}

/// Whether spans are being exported (see [`install`]).
pub fn exporting_traces() -> bool {
    EXPORTING_TRACES.load(Ordering::Relaxed)
}

/// Whether metrics are being exported (see [`install`]).
pub fn exporting_metrics() -> bool {
    EXPORTING_METRICS.load(Ordering::Relaxed)
}

/// Sends what the installed pipeline buffered and stops it (no-op when none is installed).
pub fn shutdown() {
    if let Some(telemetry) = INSTALLED.get() {
        telemetry.shutdown();
    }
}

/// How a process logs, and whether it may export OpenTelemetry.
#[derive(Debug, Clone)]
pub struct Logging<'a> {
    /// `service.name` unless `OTEL_SERVICE_NAME` says otherwise.
    pub service_name: &'a str,
    /// The level when `RUST_LOG` is unset (an `EnvFilter` directive, e.g. `info`).
    pub default_level: &'a str,
    /// One JSON object per line instead of text.
    pub json: bool,
    /// Whether the `OTEL_*` variables are honoured; `false` only logs.
    pub export: bool,
    /// Export spans to this local collector (`http://127.0.0.1:…`, see
    /// [`crate::collector`]) instead, whatever the environment says: a local run's own view of
    /// its traces.
    pub local_collector: Option<&'a str>,
}

impl Logging<'_> {
    /// Text lines at `default_level`, exporting when the environment asks.
    pub fn new<'a>(service_name: &'a str, default_level: &'a str) -> Logging<'a> {
        Logging {
            service_name,
            default_level,
            json: false,
            export: true,
            local_collector: None,
        }
    }

    /// Installs it: see [`install`].
    pub fn install(&self) {
        install_logging(self)
    }
}

/// Installs logging to stderr at the level `RUST_LOG` says (default `default_level`) and,
/// when the environment asks for it, OpenTelemetry export of spans and metrics, with
/// `service_name` as `service.name` unless `OTEL_SERVICE_NAME` says otherwise.
///
/// Must be called inside a Tokio runtime when the protocol is `grpc`. Does nothing if a logger
/// is already set. Unusable settings are logged as a warning and nothing is exported.
pub fn install(service_name: &str, default_level: &str) {
    Logging::new(service_name, default_level).install()
}

fn install_logging(logging: &Logging<'_>) {
    let settings = if logging.local_collector.is_some() {
        Ok(ExportSettings::spans_only())
    } else if logging.export {
        ExportSettings::from_environment()
    } else {
        Ok(ExportSettings::nothing())
    };
    let service_name = logging.service_name;
    let (telemetry, problem) = match &settings {
        Ok(settings) => build(settings, service_name, logging.local_collector),
        Err(e) => (
            Telemetry {
                tracer_provider: None,
                meter_provider: None,
            },
            Some(e.clone()),
        ),
    };
    // `RUST_LOG` says what is logged, not what is exported: a span at `info` is traced even
    // when the log shows only warnings.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(logging.default_level));
    // Colour only on a terminal: a log written to a file or a pipe carries no escape codes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (text, json) = if logging.json {
        let json = tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_filter(filter);
        (None, Some(json))
    } else {
        let text = tracing_subscriber::fmt::layer()
            .fmt_fields(LineFields)
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .with_filter(filter);
        (Some(text), None)
    };
    let otel = telemetry.tracer_provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("hubhost"))
            .with_filter(tracing_subscriber::filter::filter_fn(exported))
    });
    let installed = tracing_subscriber::registry()
        .with(text)
        .with(json)
        .with(otel)
        .try_init()
        .is_ok();
    if !installed {
        telemetry.shutdown();
        return;
    }
    if let Some(problem) = problem {
        tracing::warn!("OpenTelemetry export is off: {problem}");
    }
    if let Some(provider) = &telemetry.meter_provider {
        opentelemetry::global::set_meter_provider(provider.clone());
        EXPORTING_METRICS.store(true, Ordering::Relaxed);
    }
    if telemetry.tracer_provider.is_some() {
        EXPORTING_TRACES.store(true, Ordering::Relaxed);
    }
    if let Ok(settings) = &settings
        && (telemetry.tracer_provider.is_some() || telemetry.meter_provider.is_some())
    {
        tracing::info!(
            traces = settings.traces,
            metrics = settings.metrics,
            protocol = ?settings.protocol,
            "exporting OpenTelemetry over OTLP"
        );
    }
    let _ = INSTALLED.set(telemetry);
}

/// Which spans and events become OpenTelemetry's: `info` and above, but never those of the
/// exporter's own HTTP and gRPC clients (which would trace their own requests).
fn exported(meta: &tracing::Metadata<'_>) -> bool {
    *meta.level() <= tracing::Level::INFO
        && !["opentelemetry", "hyper", "h2", "tonic", "reqwest", "tower"]
            .iter()
            .any(|prefix| meta.target().starts_with(prefix))
}

/// Span fields named by OpenTelemetry's conventions (`faas.*`, `messaging.*`, `otel.*`, …) are
/// attributes for the exporter; on a log line they would bury the message, so a line shows
/// only the others: the span's `trace_id`, the function's own fields.
struct LineFields;

/// Whether a field is an exported attribute only.
fn attribute_only(name: &str) -> bool {
    [
        "otel.",
        "faas.",
        "messaging.",
        "hubhost.",
        "error.",
        "server.",
        "network.",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

impl<'writer> FormatFields<'writer> for LineFields {
    fn format_fields<R: RecordFields>(
        &self,
        writer: Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        let mut line = LineVisitor {
            writer,
            empty: true,
            result: Ok(()),
        };
        fields.record(&mut line);
        line.result
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &Record<'_>,
    ) -> std::fmt::Result {
        // Format apart first: a record of attributes only adds nothing, not even a space.
        let mut more = String::new();
        self.format_fields(Writer::new(&mut more), fields)?;
        if more.is_empty() {
            return Ok(());
        }
        if !current.fields.is_empty() {
            current.fields.push(' ');
        }
        current.fields.push_str(&more);
        Ok(())
    }
}

struct LineVisitor<'writer> {
    writer: Writer<'writer>,
    empty: bool,
    result: std::fmt::Result,
}

impl Visit for LineVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if self.result.is_err() || attribute_only(field.name()) {
            return;
        }
        let separator = if self.empty { "" } else { " " };
        self.empty = false;
        self.result = if field.name() == "message" {
            write!(self.writer, "{separator}{value:?}")
        } else {
            write!(self.writer, "{separator}{}={value:?}", field.name())
        };
    }
}

fn build(
    settings: &ExportSettings,
    service_name: &str,
    local_collector: Option<&str>,
) -> (Telemetry, Option<TelemetryError>) {
    let mut problem = None;
    let mut resource = Resource::builder();
    if settings.default_service_name {
        resource = resource.with_service_name(service_name.to_string());
    }
    // The Functions platform names the instance; spans from several instances stay apart.
    if let Ok(instance) = std::env::var("WEBSITE_INSTANCE_ID")
        && !instance.is_empty()
    {
        resource = resource.with_attribute(opentelemetry::KeyValue::new("faas.instance", instance));
    }
    let resource = resource.build();
    let tracer_provider = if settings.traces {
        match span_exporter(settings.protocol, local_collector) {
            Ok(exporter) if local_collector.is_some() => {
                // A local run's spans come thick and are read at once: sent often, queued deep.
                let config = opentelemetry_sdk::trace::BatchConfigBuilder::default()
                    .with_scheduled_delay(std::time::Duration::from_millis(200))
                    .with_max_queue_size(65_536)
                    .with_max_export_batch_size(4096)
                    .build();
                let processor = opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter)
                    .with_batch_config(config)
                    .build();
                Some(
                    SdkTracerProvider::builder()
                        .with_resource(resource.clone())
                        .with_span_processor(processor)
                        .build(),
                )
            }
            Ok(exporter) => Some(
                SdkTracerProvider::builder()
                    .with_resource(resource.clone())
                    .with_batch_exporter(exporter)
                    .build(),
            ),
            Err(e) => {
                problem = Some(e);
                None
            }
        }
    } else {
        None
    };
    let meter_provider = if settings.metrics {
        match metric_exporter(settings.protocol) {
            Ok(exporter) => Some(
                SdkMeterProvider::builder()
                    .with_resource(resource)
                    .with_periodic_exporter(exporter)
                    .build(),
            ),
            Err(e) => {
                problem = Some(e);
                None
            }
        }
    } else {
        None
    };
    (
        Telemetry {
            tracer_provider,
            meter_provider,
        },
        problem,
    )
}

fn span_exporter(
    protocol: Protocol,
    local_collector: Option<&str>,
) -> Result<opentelemetry_otlp::SpanExporter, TelemetryError> {
    use opentelemetry_otlp::WithExportConfig;
    let builder = opentelemetry_otlp::SpanExporter::builder();
    let built = match (protocol, local_collector) {
        (_, Some(collector)) => builder
            .with_http()
            .with_endpoint(format!("{collector}/v1/traces"))
            .build(),
        (Protocol::HttpProtobuf, None) => builder.with_http().build(),
        #[cfg(feature = "grpc")]
        (Protocol::Grpc, None) => builder.with_tonic().build(),
        #[cfg(not(feature = "grpc"))]
        (Protocol::Grpc, None) => return Err(TelemetryError::GrpcNotBuilt),
    };
    built.map_err(|e| TelemetryError::Exporter {
        signal: "traces",
        reason: e.to_string(),
    })
}

fn metric_exporter(
    protocol: Protocol,
) -> Result<opentelemetry_otlp::MetricExporter, TelemetryError> {
    let builder = opentelemetry_otlp::MetricExporter::builder();
    let built = match protocol {
        Protocol::HttpProtobuf => builder.with_http().build(),
        #[cfg(feature = "grpc")]
        Protocol::Grpc => builder.with_tonic().build(),
        #[cfg(not(feature = "grpc"))]
        Protocol::Grpc => return Err(TelemetryError::GrpcNotBuilt),
    };
    built.map_err(|e| TelemetryError::Exporter {
        signal: "metrics",
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Result<ExportSettings, TelemetryError> {
        ExportSettings::from_lookup(|name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn log_lines_leave_exported_attributes_out() {
        use tracing_subscriber::fmt::MakeWriter;
        #[derive(Clone, Default)]
        struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        impl<'a> MakeWriter<'a> for Lines {
            type Writer = Lines;
            fn make_writer(&'a self) -> Lines {
                self.clone()
            }
        }
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(LineFields)
            .with_ansi(false)
            .with_writer(lines.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "invocation",
                "faas.name" = "F",
                "messaging.system" = "eventhubs",
                trace_id = tracing::field::Empty
            );
            span.record("trace_id", "abc");
            span.record("otel.status_code", "ERROR");
            span.in_scope(|| tracing::info!(events = 3, "batch processed"));
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains(r#"invocation{trace_id="abc"}: "#), "{text}");
        assert!(text.contains("batch processed events=3"), "{text}");
        assert!(
            !text.contains("faas") && !text.contains("eventhubs"),
            "{text}"
        );
    }

    #[test]
    fn nothing_is_exported_unless_an_endpoint_is_set() {
        let off = settings(&[("OTEL_SERVICE_NAME", "x")]).unwrap();
        assert!(!off.traces && !off.metrics && !off.default_service_name);
        let empty = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).unwrap();
        assert!(!empty.traces, "an empty value is unset");
        // A protocol nobody uses is no error while nothing is exported.
        assert!(settings(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]).is_ok());
    }

    #[test]
    fn each_signal_follows_its_own_endpoint_and_exporter_variables() {
        let traces_only =
            settings(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h/v1/traces")]).unwrap();
        assert!(traces_only.traces && !traces_only.metrics);
        let no_metrics = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ])
        .unwrap();
        assert!(no_metrics.traces && !no_metrics.metrics);
        let disabled = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ])
        .unwrap();
        assert!(!disabled.traces && !disabled.metrics);
    }

    #[test]
    fn the_protocol_is_http_protobuf_unless_grpc_is_asked_and_others_are_named() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318");
        assert_eq!(
            settings(&[endpoint]).unwrap().protocol,
            Protocol::HttpProtobuf
        );
        let grpc = settings(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap();
        assert_eq!(grpc.protocol, Protocol::Grpc);
        let json = settings(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        assert!(
            matches!(json, Err(TelemetryError::Protocol { ref value, .. }) if value == "http/json")
        );
    }
}

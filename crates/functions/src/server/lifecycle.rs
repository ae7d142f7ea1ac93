//! Around the server: logging (and OpenTelemetry export) as a handler process logs, and the
//! stop signal the host sends.

/// Logs to stderr, at the level `RUST_LOG` says (default `info`), as one line per event; the
/// host collects a handler's output. When the standard OpenTelemetry variables ask for it
/// (`OTEL_EXPORTER_OTLP_ENDPOINT`, …), spans and metrics are exported over OTLP too, under the
/// service name `OTEL_SERVICE_NAME`, else the function app's (`WEBSITE_SITE_NAME`), else the
/// executable's. Does nothing if a logger is already set.
pub fn init_logging() {
    let service = std::env::var("WEBSITE_SITE_NAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        })
        .unwrap_or_else(|| "hubhost-handler".to_string());
    hubhost_telemetry::install(&service, "info");
}

/// Resolves at SIGTERM (how the host stops a handler) or Ctrl-C.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async {
                match term.as_mut() {
                    Some(t) => { t.recv().await; }
                    None => std::future::pending::<()>().await,
                }
            } => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

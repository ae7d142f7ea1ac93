//! One module per command: its flags (`Args`, or a subcommand enum) and its `run`, which
//! parses what clap cannot, hands over to the library module that does the work, and prints.

pub mod bench;
pub mod checkpoints;
pub mod demo;
pub mod emulate;
pub mod hub;
pub mod new;
pub mod serve;
pub mod simulate;

/// A flag given in seconds (fractions allowed), more than zero.
pub fn positive_seconds(text: &str) -> Result<std::time::Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0)
        .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
        .ok_or(format!("{text:?} is not a positive number of seconds"))
}

/// Ctrl-C or SIGTERM (what the host and `func` send on stop).
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
}

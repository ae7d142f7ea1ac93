//! `hubhost simulate`: the home-security fleet as an Event Hubs producer.

use hubhost_simulate as simulate;

use super::{EventHubConnectionArgs, shutdown_signal};

/// Send the home-security fleet's readings to an event hub.
///
/// The home-security fleet as an Event Hubs producer (partition key = home id).
#[derive(clap::Args)]
pub struct Args {
    /// [default: the local emulator's connection string]
    #[command(flatten)]
    pub event_hub: EventHubConnectionArgs,
    /// Event hub name [default: EventHubName, else the connection string's EntityPath, else sensors].
    #[arg(long, env = "EventHubName")]
    pub hub: Option<String>,
    #[arg(long, default_value_t = 100_000)]
    pub homes: u32,
    /// Simulated minutes per wall-clock minute (1 = real time: homes × 8 sensors per minute).
    #[arg(long, default_value_t = 1.0, conflicts_with_all = ["rate", "unthrottled"])]
    pub speed_up: f64,
    /// Events per second to send (sets the speed-up for the fleet's size).
    #[arg(long, conflicts_with = "unthrottled")]
    pub rate: Option<f64>,
    /// Send as fast as the event hub accepts.
    #[arg(long)]
    pub unthrottled: bool,
    /// Stop after this many events.
    #[arg(long)]
    pub events: Option<u64>,
    /// Stop after this many simulated minutes.
    #[arg(long)]
    pub minutes: Option<u32>,
    /// Stop after this many wall-clock seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// First simulated minute (RFC 3339) [default: the current minute].
    #[arg(long)]
    pub start: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: Args) -> Result<(), String> {
    let Args {
        event_hub,
        hub,
        homes,
        speed_up,
        rate,
        unthrottled,
        events,
        minutes,
        duration,
        start,
        seed,
        json,
    } = args;
    let target = match (&event_hub.connection, event_hub.is_given()) {
        // A connection string may name the hub itself (EntityPath).
        (Some(connection), _) => {
            let hub = hub.or_else(|| {
                (!connection.to_ascii_lowercase().contains("entitypath="))
                    .then(|| "sensors".to_string())
            });
            hubhost_eventhubs::EventHubTarget::parse(connection, hub.as_deref())
                .map_err(|e| e.to_string())?
        }
        (None, true) => event_hub.target(hub.as_deref().unwrap_or("sensors"))?,
        (None, false) => hubhost_eventhubs::EventHubTarget::parse(
            hubhost_eventhubs::EMULATOR_CONNECTION,
            Some(hub.as_deref().unwrap_or("sensors")),
        )
        .map_err(|e| e.to_string())?,
    };
    let pace = match (unthrottled, rate) {
        (true, _) => simulate::Pace::Unthrottled,
        (false, Some(rate)) => simulate::Pace::SpeedUp(
            rate * 60.0 / (f64::from(homes.max(1)) * hubhost_app::fleet::SENSORS.len() as f64),
        ),
        (false, None) => simulate::Pace::SpeedUp(speed_up),
    };
    let start = match start {
        Some(text) => chrono::DateTime::parse_from_rfc3339(&text)
            .map_err(|e| format!("--start {text:?} is not an RFC 3339 time: {e}"))?
            .with_timezone(&chrono::Utc),
        None => {
            let now = chrono::Utc::now();
            now - chrono::Duration::seconds(now.timestamp().rem_euclid(60))
                - chrono::Duration::nanoseconds(i64::from(now.timestamp_subsec_nanos()))
        }
    };
    let duration = match duration {
        Some(d) if !(d.is_finite() && d > 0.0) => {
            return Err("--duration must be a positive number of seconds".into());
        }
        d => d.map(std::time::Duration::from_secs_f64),
    };
    let options = simulate::SimulateOptions {
        homes,
        seed,
        start,
        pace,
        stop: simulate::StopAfter {
            events,
            minutes,
            duration,
        },
        progress: true,
    };
    let summary = simulate::run(&target, options, shutdown_signal())
        .await
        .map_err(|e| e.to_string())?;
    if json {
        println!(
            "{}",
            serde_json::to_string(&summary).expect("summary is JSON")
        );
    } else {
        summary.print();
    }
    Ok(())
}

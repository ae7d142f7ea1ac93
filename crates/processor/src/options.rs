//! How a processor reads: the `extensions.eventHubs` section of host.json, with the Functions
//! extension's defaults (docs/host-contract.md §5), plus hubhost's load-balancing
//! timings. Pure: host.json in, settings or an [`OptionsError`] naming the bad key out.

use std::time::Duration;

use serde_json::Value;

use super::balancer::{BalancerSettings, SettingsError};
use hubhost_checkpoints::InitialPosition;
use hubhost_trigger::time::parse_timespan;

#[derive(Debug, Clone, PartialEq)]
pub struct ProcessorOptions {
    /// `maxEventBatchSize` (100 since extension 6.0). Cardinality one forces 1.
    pub max_batch_size: usize,
    /// `minEventBatchSize` (1): wait for this many events, at most `max_wait_time`.
    pub min_batch_size: usize,
    /// `maxWaitTime` (1 min): how long a batch below `min_batch_size` waits for more.
    pub max_wait_time: Duration,
    /// `batchCheckpointFrequency` (1): checkpoint after every N-th batch.
    pub batch_checkpoint_frequency: u32,
    /// `prefetchCount` (300): credit the receiver keeps open (0: none beyond the batch).
    pub prefetch: u32,
    /// `enableCheckpointing` (true): with `false` no checkpoint is written, and a partition
    /// starts again from its last checkpoint (or `initialOffsetOptions`) whenever it moves.
    pub enable_checkpointing: bool,
    /// `initialOffsetOptions`: where a partition without any checkpoint starts.
    pub initial_position: InitialPosition,
    /// Skip the checkpoint of a batch whose invocation failed and deliver it again
    /// (`--checkpoint-on-success`); the host's default checkpoints either way.
    pub checkpoint_on_success: bool,
    /// `targetUnprocessedEventThreshold`: the unprocessed events one instance should carry,
    /// for target-based scaling [default: `maxEventBatchSize`].
    pub target_unprocessed_event_threshold: Option<u32>,
    pub balancer: BalancerSettings,
}

impl Default for ProcessorOptions {
    fn default() -> Self {
        ProcessorOptions {
            max_batch_size: 100,
            min_batch_size: 1,
            max_wait_time: Duration::from_secs(60),
            batch_checkpoint_frequency: 1,
            prefetch: 300,
            enable_checkpointing: true,
            initial_position: InitialPosition::Earliest,
            checkpoint_on_success: false,
            target_unprocessed_event_threshold: None,
            balancer: BalancerSettings::default(),
        }
    }
}

/// What is wrong with host.json's `extensions.eventHubs`: the key, and what it holds instead.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OptionsError {
    #[error(
        "host.json extensions.eventHubs.{key} must be a whole number of at least {least}, not {value}"
    )]
    NotACount {
        key: String,
        value: Value,
        least: u64,
    },
    #[error("host.json extensions.eventHubs.{key} must be true or false, not {value}")]
    NotASwitch { key: String, value: Value },
    #[error("host.json extensions.eventHubs.{key} is not a time span like 00:00:05: {text}")]
    BadTimeSpan { key: String, text: String },
    #[error(
        "host.json extensions.eventHubs.{key} must be a time span string like \"00:00:05\", not {value}"
    )]
    NotATimeSpan { key: String, value: Value },
    #[error("host.json: {0}")]
    Balancer(#[from] SettingsError),
    #[error(
        "host.json extensions.eventHubs.minEventBatchSize ({min}) is larger than maxEventBatchSize ({max})"
    )]
    MinAboveMax { min: usize, max: usize },
    #[error("host.json initialOffsetOptions.type fromEnqueuedTime needs enqueuedTimeUtc")]
    NoEnqueuedTime,
    #[error(
        "host.json initialOffsetOptions.enqueuedTimeUtc is not a time like 2026-11-22T13:00:00Z: {0}"
    )]
    BadEnqueuedTime(String),
    /// The extension's own words for an unknown type.
    #[error(
        "An unsupported value was supplied for initialOffsetOptions.type: {0} (use fromStart, fromEnd or fromEnqueuedTime)"
    )]
    UnknownInitialOffset(String),
}

impl ProcessorOptions {
    /// Reads `extensions.eventHubs` of a host.json document; keys it does not have keep their
    /// defaults. `partitionOwnershipExpirationInterval` and `loadBalancingUpdateInterval` are
    /// honoured when given (the SDK defaults of 2 min and 30 s are what make takeover slow, so
    /// hubhost's own defaults apply otherwise).
    pub fn from_host_json(host: &Value) -> Result<Self, OptionsError> {
        let mut options = ProcessorOptions::default();
        let Some(section) = host.pointer("/extensions/eventHubs") else {
            return Ok(options);
        };
        // Values as .NET's configuration binder reads them: text, so `10` and `"10"` alike.
        let number = |key: &str, least: u64| -> Result<Option<u64>, OptionsError> {
            let refused = |v: &Value| OptionsError::NotACount {
                key: key.into(),
                value: v.clone(),
                least,
            };
            match section.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
                Some(v @ Value::String(s)) => s
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n >= least)
                    .map(Some)
                    .ok_or_else(|| refused(v)),
                Some(v) => v
                    .as_u64()
                    .filter(|n| *n >= least)
                    .map(Some)
                    .ok_or_else(|| refused(v)),
            }
        };
        let count = |key: &str| number(key, 1);
        let switch = |key: &str| -> Result<Option<bool>, OptionsError> {
            match section.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(*b)),
                Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("true") => Ok(Some(true)),
                Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("false") => Ok(Some(false)),
                Some(v) => Err(OptionsError::NotASwitch {
                    key: key.into(),
                    value: v.clone(),
                }),
            }
        };
        let span = |key: &str| -> Result<Option<Duration>, OptionsError> {
            match section.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.is_empty() => Ok(None),
                Some(Value::String(s)) => {
                    parse_timespan(s)
                        .map(Some)
                        .ok_or_else(|| OptionsError::BadTimeSpan {
                            key: key.into(),
                            text: s.clone(),
                        })
                }
                Some(v) => Err(OptionsError::NotATimeSpan {
                    key: key.into(),
                    value: v.clone(),
                }),
            }
        };
        if let Some(n) = count("maxEventBatchSize")? {
            options.max_batch_size = n as usize;
        }
        if let Some(n) = count("minEventBatchSize")? {
            options.min_batch_size = n as usize;
        }
        if let Some(d) = span("maxWaitTime")? {
            options.max_wait_time = d;
        }
        if let Some(n) = count("batchCheckpointFrequency")? {
            options.batch_checkpoint_frequency = u32::try_from(n).unwrap_or(u32::MAX);
        }
        // 0 is the SDK's "no prefetch": credit only for the batch being read.
        if let Some(n) = number("prefetchCount", 0)? {
            options.prefetch = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(on) = switch("enableCheckpointing")? {
            options.enable_checkpointing = on;
        }
        if let Some(n) = count("targetUnprocessedEventThreshold")? {
            options.target_unprocessed_event_threshold = Some(u32::try_from(n).unwrap_or(u32::MAX));
        }
        if let Some(d) = span("loadBalancingUpdateInterval")? {
            options.balancer.update_interval = d;
        }
        if let Some(d) = span("partitionOwnershipExpirationInterval")? {
            options.balancer.ownership_expiry = d;
            // Foreign owners never get less time than hubhost's own instances.
            options.balancer.foreign_ownership_expiry =
                options.balancer.foreign_ownership_expiry.max(d);
        }
        options.balancer.validate()?;
        if options.min_batch_size > options.max_batch_size {
            return Err(OptionsError::MinAboveMax {
                min: options.min_batch_size,
                max: options.max_batch_size,
            });
        }
        if let Some(initial) = section.get("initialOffsetOptions") {
            options.initial_position = initial_position(initial)?;
        }
        Ok(options)
    }
}

/// `initialOffsetOptions`, with the extension's own error for an unknown type.
fn initial_position(section: &Value) -> Result<InitialPosition, OptionsError> {
    let kind = section
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("fromStart");
    match kind.to_ascii_lowercase().as_str() {
        "fromstart" => Ok(InitialPosition::Earliest),
        "fromend" => Ok(InitialPosition::Latest),
        "fromenqueuedtime" => {
            let text = section
                .get("enqueuedTimeUtc")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .ok_or(OptionsError::NoEnqueuedTime)?;
            hubhost_trigger::time::parse_host_time(text)
                .map(InitialPosition::EnqueuedTime)
                .ok_or_else(|| OptionsError::BadEnqueuedTime(text.into()))
        }
        _ => Err(OptionsError::UnknownInitialOffset(kind.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_are_the_extensions() {
        let o = ProcessorOptions::from_host_json(&json!({"version": "2.0"})).unwrap();
        assert_eq!(o, ProcessorOptions::default());
        assert_eq!(o.max_batch_size, 100);
        assert_eq!(o.batch_checkpoint_frequency, 1);
    }

    #[test]
    fn every_key_is_read() {
        let o = ProcessorOptions::from_host_json(&json!({"extensions": {"eventHubs": {
            "maxEventBatchSize": 50, "minEventBatchSize": 10, "maxWaitTime": "00:00:05",
            "batchCheckpointFrequency": 3, "prefetchCount": 500,
            "targetUnprocessedEventThreshold": 250,
            "initialOffsetOptions": {"type": "fromEnqueuedTime", "enqueuedTimeUtc": "2026-11-22T13:00:00Z"}
        }}}))
        .unwrap();
        assert_eq!((o.max_batch_size, o.min_batch_size), (50, 10));
        assert_eq!(o.max_wait_time, Duration::from_secs(5));
        assert_eq!((o.batch_checkpoint_frequency, o.prefetch), (3, 500));
        assert_eq!(o.target_unprocessed_event_threshold, Some(250));
        assert_eq!(
            o.initial_position,
            InitialPosition::EnqueuedTime("2026-11-22T13:00:00Z".parse().unwrap())
        );
        let end = ProcessorOptions::from_host_json(
            &json!({"extensions": {"eventHubs": {"initialOffsetOptions": {"type": "FromEnd"}}}}),
        )
        .unwrap();
        assert_eq!(end.initial_position, InitialPosition::Latest);
    }

    /// .NET's binder reads values as text: numbers and switches written as strings are read
    /// like the others, and `prefetchCount` 0 (no prefetch) is a value.
    #[test]
    fn values_are_read_as_text_as_the_configuration_binder_reads_them() {
        let o = ProcessorOptions::from_host_json(&json!({"extensions": {"eventHubs": {
            "maxEventBatchSize": "10", "prefetchCount": 0, "maxWaitTime": "00:01",
            "enableCheckpointing": "false"
        }}}))
        .unwrap();
        assert_eq!((o.max_batch_size, o.prefetch), (10, 0));
        assert_eq!(o.max_wait_time, Duration::from_secs(60));
        assert!(!o.enable_checkpointing);
        let e = ProcessorOptions::from_host_json(
            &json!({"extensions": {"eventHubs": {"enableCheckpointing": "perhaps"}}}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("enableCheckpointing"), "{e}");
        let e = ProcessorOptions::from_host_json(
            &json!({"extensions": {"eventHubs": {"maxEventBatchSize": "0"}}}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
    }

    #[test]
    fn bad_values_name_the_key() {
        for (host, key) in [
            (json!({"maxEventBatchSize": 0}), "maxEventBatchSize"),
            (
                json!({"targetUnprocessedEventThreshold": -5}),
                "targetUnprocessedEventThreshold",
            ),
            (json!({"maxWaitTime": "five"}), "maxWaitTime"),
            (
                json!({"batchCheckpointFrequency": "one"}),
                "batchCheckpointFrequency",
            ),
            (
                json!({"initialOffsetOptions": {"type": "fromMiddle"}}),
                "initialOffsetOptions",
            ),
            (
                json!({"initialOffsetOptions": {"type": "fromEnqueuedTime"}}),
                "enqueuedTimeUtc",
            ),
            (json!({"minEventBatchSize": 200}), "minEventBatchSize"),
            (
                json!({"partitionOwnershipExpirationInterval": "00:00:01"}),
                "ownership expiry",
            ),
        ] {
            let e = ProcessorOptions::from_host_json(&json!({"extensions": {"eventHubs": host}}))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{e}");
        }
    }
}

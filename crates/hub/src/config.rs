//! What `hubhost hub` serves: hubs, their partition counts and consumer groups, the keys it
//! accepts, where and how long it keeps events. From flags, from hubhost's own JSON file, or
//! from the official emulator's `Config.json` (so users can point both at the same file).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::sas::SharedAccessKey;

#[derive(Debug, Clone)]
pub struct HubConfig {
    pub listen: SocketAddr,
    pub hubs: Vec<HubSpec>,
    /// `None`: keep events in memory only.
    pub data_dir: Option<PathBuf>,
    pub retention: Duration,
    pub keys: Vec<SharedAccessKey>,
    /// An Entra ID issuer whose tokens (`$cbs` type `jwt`) the hub accepts besides SAS.
    pub trusted_issuer: Option<crate::entra::TrustedIssuer>,
    /// A local managed identity endpoint on 127.0.0.1 whose tokens the hub accepts (its
    /// issuer is then the trusted one); `None`: none.
    pub local_identity: Option<std::sync::Arc<crate::local_identity::LocalIdentity>>,
    /// Its port (`0` or `None`: any free one).
    pub identity_port: Option<u16>,
    /// The admin endpoint's port on 127.0.0.1 (`0`: any free one); `None`: no endpoint.
    pub admin_port: Option<u16>,
    /// The token the admin endpoint requires (`Authorization: Bearer …`); `None`: a random one,
    /// made at start.
    pub admin_token: Option<String>,
    pub segment_bytes: u64,
    pub cache_bytes: usize,
    pub fsync: bool,
    pub limits: ClientLimits,
    /// AMQP over TLS too, and the certificate served there and to `wss` clients.
    pub tls: Option<TlsSettings>,
    /// AMQP over WebSockets too, on this address: `wss` when `tls` is set, else `ws`.
    pub websocket: Option<SocketAddr>,
    /// The Kafka endpoint, on this address (SASL_PLAINTEXT); `None`: no Kafka.
    pub kafka: Option<SocketAddr>,
    /// How long a Kafka consumer group without members keeps its committed offsets (Kafka's
    /// `offsets.retention.minutes`).
    pub kafka_offsets_retention: Duration,
    /// Trace sends and receives as spans (`spans`), when something exports them.
    pub traces: bool,
}

/// Where the hub serves AMQPS, and with which certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub listen: SocketAddr,
    pub certificate: crate::tls::CertificateSource,
}

/// How much of the hub one client can hold, so that a misbehaving or hostile client cannot
/// exhaust it: what each limit bounds is in its field's comment; what the hub does when one is
/// reached is in `server`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Open connections over every listener (`crate::connections`): when all are taken, the
    /// oldest unauthenticated one is closed to make room, else the new one, before the protocol
    /// header.
    pub max_connections: usize,
    /// Sessions per connection (the `channel-max` the hub announces, plus one).
    pub max_sessions_per_connection: u16,
    /// Links per connection, over all its sessions; one more is refused with
    /// `amqp:resource-limit-exceeded`.
    pub max_links_per_connection: usize,
    /// Time from the TCP connection to a completed AMQP open (protocol headers, SASL, open);
    /// a connection still short of it is closed.
    pub open_timeout: Duration,
    /// The largest frame the hub accepts (`max-frame-size` in its open); a larger one closes the
    /// connection.
    pub max_frame_bytes: u32,
    /// Bytes of deliveries whose last frame has not arrived, over all of a connection's links
    /// (each is also held to the message limit); past it the connection is closed.
    pub max_unfinished_bytes: usize,
    /// Bytes that connections which have not authenticated yet may hold together, over every
    /// listener (unfinished frames, WebSocket messages, Kafka requests before SASL); past it the
    /// oldest of them are closed (`crate::connections`).
    pub max_unauthenticated_bytes: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            max_connections: 1000,
            max_sessions_per_connection: 256,
            max_links_per_connection: 500,
            open_timeout: Duration::from_secs(30),
            max_frame_bytes: 256 * 1024,
            max_unfinished_bytes: 16 * 1024 * 1024,
            max_unauthenticated_bytes: 16 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSpec {
    pub name: String,
    pub partitions: u32,
    pub consumer_groups: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the hub configuration {path}: {message}")]
    Read { path: String, message: String },
    #[error(
        "the hub configuration {path} is neither hubhost's format ({{\"hubs\": [...]}}) nor the official emulator's ({{\"UserConfig\": ...}}): {message}"
    )]
    Format { path: String, message: String },
    #[error("hub `{hub}` has {partitions} partitions; Event Hubs allows 1 to 32")]
    PartitionCount { hub: String, partitions: u32 },
    #[error(
        "`{0}` cannot name an event hub: use 1 to 255 letters, digits, `.`, `-` and `_`, starting and ending with a letter or a digit (Event Hubs' rule, which allows 256; the hub keeps each hub in a folder of its name, and a file name has at most 255 bytes)"
    )]
    HubName(String),
    #[error(
        "`{0}` cannot name a consumer group: use 1 to 50 letters, digits, `.`, `-` and `_`, starting and ending with a letter or a digit, or `$Default` (Event Hubs' rule)"
    )]
    ConsumerGroupName(String),
    #[error("no hub is configured")]
    NoHubs,
}

impl HubSpec {
    /// The default: the reference scenario's hub.
    pub fn sensors() -> Self {
        HubSpec {
            name: "sensors".into(),
            partitions: 16,
            consumer_groups: vec!["$Default".into(), "archive".into()],
        }
    }

    /// The reference app's second hub: `SensorAggregator` forwards alarms to it through its
    /// `eventHub` output, and its page reads them as they come in consumer group `dashboard`.
    pub fn alarms() -> Self {
        HubSpec {
            name: "alarms".into(),
            partitions: 4,
            consumer_groups: vec!["$Default".into(), "dashboard".into()],
        }
    }

    /// What `hubhost hub` serves without `--hub` or `--config`: `sensors` and `alarms`.
    pub fn reference() -> Vec<Self> {
        vec![HubSpec::sensors(), HubSpec::alarms()]
    }

    /// `name:partitions[:cg1,cg2]`, as `--hub` takes it; `$Default` is always there.
    pub fn parse_flag(text: &str) -> Result<Self, ConfigError> {
        let mut parts = text.splitn(3, ':');
        let name = parts.next().unwrap_or_default().to_string();
        let partitions = match parts.next() {
            Some(p) => p.parse().map_err(|_| ConfigError::PartitionCount {
                hub: name.clone(),
                partitions: 0,
            })?,
            None => 16,
        };
        let mut consumer_groups = vec!["$Default".to_string()];
        if let Some(groups) = parts.next() {
            consumer_groups.extend(
                groups
                    .split(',')
                    .filter(|g| !g.is_empty())
                    .map(String::from),
            );
        }
        let spec = HubSpec {
            name,
            partitions,
            consumer_groups,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// The official emulator's limits: 1 to 32 partitions, valid names.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=32).contains(&self.partitions) {
            return Err(ConfigError::PartitionCount {
                hub: self.name.clone(),
                partitions: self.partitions,
            });
        }
        if !is_valid_hub_name(&self.name) {
            return Err(ConfigError::HubName(self.name.clone()));
        }
        for group in &self.consumer_groups {
            if !is_valid_consumer_group_name(group) {
                return Err(ConfigError::ConsumerGroupName(group.clone()));
            }
        }
        Ok(())
    }
}

/// Whether `name` can name an event hub, by Event Hubs' resource rules: letters, digits, `.`,
/// `-` and `_`, starting and ending with a letter or a digit. (So no hub name is a dot file:
/// the hub keeps its own files under `.hubhost/` in its data directory.) At most
/// [`MAX_HUB_NAME_BYTES`], one fewer than Event Hubs allows.
pub fn is_valid_hub_name(name: &str) -> bool {
    is_entity_name(name, MAX_HUB_NAME_BYTES)
}

/// The longest hub name: a hub's events are kept in a folder of its name, and a file name has
/// at most 255 bytes on Linux, macOS and Windows alike (Event Hubs allows 256 characters).
pub const MAX_HUB_NAME_BYTES: usize = 255;

/// Whether `name` can name a consumer group: the same characters as a hub, 1 to 50 of them, or
/// the built-in `$Default` (in any case).
pub fn is_valid_consumer_group_name(name: &str) -> bool {
    name.eq_ignore_ascii_case("$Default") || is_entity_name(name, 50)
}

fn is_entity_name(name: &str, longest: usize) -> bool {
    let bytes = name.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= longest
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'))
        }
        _ => false,
    }
}

/// hubhost's own file: `{"hubs": [{"name": "sensors", "partitions": 16, "consumerGroups": ["archive"]}]}`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OwnFile {
    hubs: Vec<OwnHub>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OwnHub {
    name: String,
    partitions: u32,
    #[serde(default)]
    consumer_groups: Vec<String>,
}

/// The official emulator's `Config.json` (only the parts that describe entities).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EmulatorFile {
    user_config: EmulatorUserConfig,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EmulatorUserConfig {
    namespace_config: Vec<EmulatorNamespace>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EmulatorNamespace {
    entities: Vec<EmulatorEntity>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EmulatorEntity {
    name: String,
    partition_count: StringOrNumber,
    #[serde(default)]
    consumer_groups: Vec<EmulatorConsumerGroup>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum StringOrNumber {
    Number(u32),
    Text(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EmulatorConsumerGroup {
    name: String,
}

/// Reads the hubs from a configuration file in either format.
pub fn hubs_from_file(path: &Path) -> Result<Vec<HubSpec>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    hubs_from_json(&text).map_err(|e| match e {
        ConfigError::Format { message, .. } => ConfigError::Format {
            path: path.display().to_string(),
            message,
        },
        other => other,
    })
}

/// Reads the hubs from the text of a configuration file in either format.
pub fn hubs_from_json(text: &str) -> Result<Vec<HubSpec>, ConfigError> {
    let format = |message: String| ConfigError::Format {
        path: String::new(),
        message,
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format(e.to_string()))?;
    let with_default = |groups: Vec<String>| {
        let mut all = vec!["$Default".to_string()];
        for g in groups {
            if !all.iter().any(|a| a.eq_ignore_ascii_case(&g)) {
                all.push(g);
            }
        }
        all
    };
    let specs: Vec<HubSpec> = if value.get("UserConfig").is_some() {
        let file: EmulatorFile =
            serde_json::from_value(value).map_err(|e| format(e.to_string()))?;
        let mut specs = Vec::new();
        for entity in file
            .user_config
            .namespace_config
            .into_iter()
            .flat_map(|n| n.entities)
        {
            let partitions = match entity.partition_count {
                StringOrNumber::Number(n) => n,
                StringOrNumber::Text(t) => t.trim().parse().map_err(|_| {
                    format(format!(
                        "PartitionCount `{t}` of `{}` is not a number",
                        entity.name
                    ))
                })?,
            };
            specs.push(HubSpec {
                name: entity.name,
                partitions,
                consumer_groups: with_default(
                    entity.consumer_groups.into_iter().map(|c| c.name).collect(),
                ),
            });
        }
        specs
    } else {
        let file: OwnFile = serde_json::from_value(value).map_err(|e| format(e.to_string()))?;
        file.hubs
            .into_iter()
            .map(|h| HubSpec {
                name: h.name,
                partitions: h.partitions,
                consumer_groups: with_default(h.consumer_groups),
            })
            .collect()
    };
    if specs.is_empty() {
        return Err(ConfigError::NoHubs);
    }
    for spec in &specs {
        spec.validate()?;
    }
    Ok(specs)
}

impl HubConfig {
    pub fn new(listen: SocketAddr, hubs: Vec<HubSpec>, data_dir: Option<PathBuf>) -> Self {
        HubConfig {
            listen,
            hubs,
            data_dir,
            retention: Duration::from_secs(24 * 3600),
            keys: vec![SharedAccessKey::emulator()],
            trusted_issuer: None,
            local_identity: None,
            identity_port: None,
            admin_port: None,
            admin_token: None,
            segment_bytes: 64 * 1024 * 1024,
            cache_bytes: 8 * 1024 * 1024,
            fsync: false,
            limits: ClientLimits::default(),
            tls: None,
            websocket: None,
            kafka: None,
            kafka_offsets_retention: crate::kafka::DEFAULT_OFFSETS_RETENTION,
            traces: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_official_emulator_config() {
        let text = r#"{"UserConfig":{"NamespaceConfig":[{"Type":"EventHub","Name":"emulatorNs1",
            "Entities":[{"Name":"eh1","PartitionCount":"2","ConsumerGroups":[{"Name":"cg1"}]}]}],
            "LoggingConfig":{"Type":"File"}}}"#;
        assert_eq!(
            hubs_from_json(text).unwrap(),
            vec![HubSpec {
                name: "eh1".into(),
                partitions: 2,
                consumer_groups: vec!["$Default".into(), "cg1".into()],
            }]
        );
    }

    #[test]
    fn reads_hubhosts_own_config_and_flags() {
        let text = r#"{"hubs":[{"name":"sensors","partitions":16,"consumerGroups":["archive","$default"]}]}"#;
        assert_eq!(hubs_from_json(text).unwrap(), vec![HubSpec::sensors()]);
        assert_eq!(
            HubSpec::parse_flag("sensors:16:archive").unwrap(),
            HubSpec::sensors()
        );
        assert_eq!(HubSpec::parse_flag("orders").unwrap().partitions, 16);
    }

    #[test]
    fn refuses_bad_counts_and_names() {
        assert_eq!(
            HubSpec::parse_flag("big:33"),
            Err(ConfigError::PartitionCount {
                hub: "big".into(),
                partitions: 33
            })
        );
        assert!(matches!(
            HubSpec::parse_flag("../etc:2"),
            Err(ConfigError::HubName(_))
        ));
        assert!(matches!(
            HubSpec::parse_flag("orders:2:$audit"),
            Err(ConfigError::ConsumerGroupName(_))
        ));
    }

    #[test]
    fn names_follow_event_hubs_rules() {
        for good in ["sensors", "a", "orders.v2", "my-hub_1", &"x".repeat(255)] {
            assert!(is_valid_hub_name(good), "{good}");
        }
        // The longest name is a folder the hub can make.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("x".repeat(MAX_HUB_NAME_BYTES))).unwrap();
        for bad in [
            "",
            ".hubhost",
            "-orders",
            "orders-",
            "$cbs",
            "$management",
            "a/b",
            "a b",
            &"x".repeat(256),
        ] {
            assert!(!is_valid_hub_name(bad), "{bad:?}");
        }
        for good in ["$Default", "$default", "audit", "g.1-2_3", &"g".repeat(50)] {
            assert!(is_valid_consumer_group_name(good), "{good}");
        }
        for bad in ["", "$audit", "_audit", &"g".repeat(51), "a\\b"] {
            assert!(!is_valid_consumer_group_name(bad), "{bad:?}");
        }
        assert!(matches!(
            hubs_from_json(r#"{"hubs":[]}"#),
            Err(ConfigError::NoHubs)
        ));
        assert!(matches!(
            hubs_from_json(r#"{"hub":[]}"#),
            Err(ConfigError::Format { .. })
        ));
    }
}

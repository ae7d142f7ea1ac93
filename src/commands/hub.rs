//! `hubhost hub`: a local Event Hubs namespace (see `hubhost_hub`).

use std::net::IpAddr;
use std::path::PathBuf;

use hubhost_hub::ClientLimits;

/// The admin endpoint's port when the hub listens on the official emulator's port.
pub const DEFAULT_ADMIN_PORT: u16 = 5380;
/// AMQPS, as on Event Hubs.
const DEFAULT_TLS_PORT: u16 = 5671;
/// Event Hubs serves WebSockets on 443, which needs privileges here; 5443 echoes it.
const DEFAULT_WEBSOCKET_PORT: u16 = 5443;
const DEFAULT_ADMIN: &str = "http://127.0.0.1:5380";
/// The Kafka endpoint, on the official emulator's port.
const DEFAULT_KAFKA_PORT: u16 = 9092;

/// The limits no flag sets, as `hubhost hub --help` lists them after the flags (a test checks
/// the admin endpoint's and Kafka's against the hub's constants).
const FIXED_LIMITS: &str = "\
Limits no flag sets (docs/hub.md: each attack, its limit, what the client sees):
  Kafka request before SASL             16 KiB, due within --open-timeout
  AMQP tokens per connection            64 (the oldest forgotten)
  Kafka consumer groups                 1000 at once a client (key and scope), 10000 in all;
                                        idle ones forgotten
  Kafka groups with offsets             1000 a client, 10000 in all; given up after
                                        --kafka-offsets-retention-minutes without members
  Kafka produce request                 4 MiB, decompressed too (all its batches together)
  Kafka idempotent producers            100000 (producer, partition) states; the least
                                        recently used forgotten
  Kafka members per group               1000
  Kafka ids, subscription, assignments  255 bytes, 64 KiB per member, 1 MiB per sync
  Kafka commit metadata                 4096 bytes
  admin endpoint                        the hub's token; loopback Host and Origin;
                                        32 connections, 4 requests at once;
                                        a request's header within 10 s;
                                        1 MiB of events per read, whole events
A key's rights: --key name=key:Send,Listen (Send, Listen, Manage; all three by default).";

/// A local Event Hubs namespace for the SDKs and Kafka clients.
///
/// A local Event Hubs namespace the official SDKs connect to (AMQP on 127.0.0.1:5672) and Kafka
/// clients too (127.0.0.1:9092, SASL_PLAINTEXT), with an admin endpoint on loopback
/// (http://127.0.0.1:5380) that adds hubs and consumer groups while it runs.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, after_long_help = FIXED_LIMITS)]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<HubAction>,
    /// Port to listen on (5672, as the official emulator; 0: any free port).
    #[arg(long, default_value_t = 5672)]
    pub port: u16,
    /// The admin endpoint's port, always on 127.0.0.1 (0: any free one) [default: 5380 when
    /// --port is 5672, else none].
    #[arg(long)]
    pub admin_port: Option<u16>,
    /// The token the admin endpoint requires [default: a random one, written to
    /// DATA_DIR/.hubhost/admin-token (readable by you only), or printed at start with
    /// --in-memory].
    #[arg(long, env = "HUBHOST_HUB_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// A hub as `name:partitions[:group1,group2]` ($Default is always there); repeatable
    /// [default: sensors:16:archive and alarms:4:dashboard].
    #[arg(long = "hub")]
    pub hubs: Vec<String>,
    /// Hubs from a JSON file: hubhost's ({"hubs": [...]}) or the official emulator's Config.json.
    #[arg(long, conflicts_with = "hubs")]
    pub config: Option<PathBuf>,
    /// Where partitions' segment files live.
    #[arg(long, default_value = "hubhost-data/hub")]
    pub data_dir: PathBuf,
    /// Keep events in memory only (lost on exit).
    #[arg(long)]
    pub in_memory: bool,
    /// Hours an event is kept at least (whole segments are deleted after it).
    #[arg(long, default_value_t = 24.0)]
    pub retention_hours: f64,
    /// Size in MiB at which a partition's segment file is closed and the next begun: retention
    /// deletes whole segments, so smaller ones free space sooner.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub segment_mb: u64,
    /// Flush every acknowledged send to disk (survives power loss, not only kill -9).
    #[arg(long)]
    pub fsync: bool,
    /// Shared access key as `name=key`, or `name=key:Send,Listen` with its rights (`Send`,
    /// `Listen`, `Manage`; all three when none is given), replacing the emulator's well-known
    /// RootManageSharedAccessKey=SAS_KEY_VALUE (which has all three); repeatable.
    #[arg(long = "key", env = "HUBHOST_HUB_KEY", hide_env_values = true)]
    pub keys: Vec<String>,
    /// Also accept Entra ID tokens (identity-based connections) issued by this issuer (the
    /// tokens' `iss`), checked with the signing keys of --entra-jwks.
    #[arg(long, requires = "entra_jwks")]
    pub entra_issuer: Option<String>,
    /// The trusted issuer's signing keys: a JWKS file, the format Entra ID publishes.
    #[arg(long, requires = "entra_issuer")]
    pub entra_jwks: Option<std::path::PathBuf>,
    /// Serve a local managed identity endpoint on 127.0.0.1:PORT (0: any free port) whose
    /// tokens this hub accepts: an app signs in with an identity-based connection as on Azure
    /// (`{conn}__fullyQualifiedNamespace`), given the IDENTITY_ENDPOINT and IDENTITY_HEADER the
    /// hub prints at start (docs/identity.md).
    #[arg(long, value_name = "PORT", conflicts_with = "entra_issuer")]
    pub identity_port: Option<u16>,
    /// Trace each send and each chunk delivered to a receiver as spans (`enqueue <hub>`,
    /// `deliver <hub>`), linked to the producers' contexts the events carry, and export them
    /// by the standard OpenTelemetry variables (OTEL_EXPORTER_OTLP_ENDPOINT, …).
    #[arg(long)]
    pub traces: bool,
    #[command(flatten)]
    pub transports: TransportArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// AMQP over TLS and over WebSockets, beside plain AMQP (README: "Connecting over TLS or
/// WebSockets").
#[derive(clap::Args)]
pub struct TransportArgs {
    /// Also serve AMQP over TLS (AMQPS), as Event Hubs does, on --tls-port.
    #[arg(long)]
    pub tls: bool,
    /// The AMQPS port (implies --tls; 0: any free one) [default: 5671].
    #[arg(long)]
    pub tls_port: Option<u16>,
    /// The certificate chain (PEM) to serve instead of the hub's own (implies --tls).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Where the hub keeps the certificate it makes for localhost when given none: clients
    /// trust `ca.pem` there.
    #[arg(long, default_value = "hubhost-data/tls")]
    pub tls_dir: PathBuf,
    /// Also serve AMQP over WebSockets (path /$servicebus/websocket), on --websocket-port:
    /// `wss` with --tls, else `ws`.
    #[arg(long)]
    pub websocket: bool,
    /// The WebSocket port (implies --websocket; 0: any free one) [default: 5443].
    #[arg(long)]
    pub websocket_port: Option<u16>,
    /// The Kafka endpoint's port (SASL_PLAINTEXT; 0: any free one) [default: 9092 when --port
    /// is 5672, else none].
    #[arg(long, conflicts_with = "no_kafka")]
    pub kafka_port: Option<u16>,
    /// No Kafka endpoint.
    #[arg(long)]
    pub no_kafka: bool,
    /// Minutes a Kafka consumer group without members keeps its committed offsets (Kafka's
    /// offsets.retention.minutes) [default: 10080, 7 days].
    #[arg(long)]
    pub kafka_offsets_retention_minutes: Option<f64>,
}

impl TransportArgs {
    fn apply(
        self,
        bind: IpAddr,
        amqp_port: u16,
        config: &mut hubhost_hub::HubConfig,
    ) -> Result<(), String> {
        if let Some(minutes) = self.kafka_offsets_retention_minutes {
            if !(minutes.is_finite() && minutes > 0.0) {
                return Err("--kafka-offsets-retention-minutes must be a positive number".into());
            }
            config.kafka_offsets_retention = std::time::Duration::from_secs_f64(minutes * 60.0);
        }
        // Kafka beside AMQP on the official emulator's ports; on other ports only when asked, so
        // that hubs started side by side (tests, several projects) do not contend for 9092.
        let kafka_port = self
            .kafka_port
            .or((amqp_port == 5672).then_some(DEFAULT_KAFKA_PORT));
        if !self.no_kafka
            && let Some(port) = kafka_port
        {
            config.kafka = Some((bind, port).into());
        }
        let tls = self.tls || self.tls_port.is_some() || self.tls_cert.is_some();
        if tls {
            let certificate = match (self.tls_cert, self.tls_key) {
                (Some(cert), Some(key)) => hubhost_hub::tls::CertificateSource::Files { cert, key },
                _ => hubhost_hub::tls::CertificateSource::Generated { dir: self.tls_dir },
            };
            config.tls = Some(hubhost_hub::TlsSettings {
                listen: (bind, self.tls_port.unwrap_or(DEFAULT_TLS_PORT)).into(),
                certificate,
            });
        }
        if self.websocket || self.websocket_port.is_some() {
            let port = self.websocket_port.unwrap_or(DEFAULT_WEBSOCKET_PORT);
            config.websocket = Some((bind, port).into());
        }
        Ok(())
    }
}

/// What one client can hold of the hub (see the README's limits table).
#[derive(clap::Args)]
pub struct LimitArgs {
    /// Open connections over every listener; when all are taken, the oldest that has not
    /// authenticated yet is closed to make room, else the new one is closed at once.
    #[arg(long, default_value_t = ClientLimits::default().max_connections)]
    pub max_connections: usize,
    /// Sessions per connection.
    #[arg(long, default_value_t = ClientLimits::default().max_sessions_per_connection)]
    pub max_sessions: u16,
    /// Links per connection; one more is refused with amqp:resource-limit-exceeded.
    #[arg(long, default_value_t = ClientLimits::default().max_links_per_connection)]
    pub max_links: usize,
    /// Seconds a connection has to authenticate: AMQP's headers, SASL, open and a valid token;
    /// Kafka's SASL exchange (every read before it is due by then).
    #[arg(long, default_value_t = ClientLimits::default().open_timeout.as_secs_f64())]
    pub open_timeout: f64,
    /// The largest frame accepted, in bytes (at least 512).
    #[arg(long, default_value_t = ClientLimits::default().max_frame_bytes)]
    pub max_frame_size: u32,
    /// Bytes of deliveries still being transferred, per connection; past it the connection is
    /// closed.
    #[arg(long, default_value_t = ClientLimits::default().max_unfinished_bytes)]
    pub max_unfinished_bytes: usize,
    /// Bytes that connections not yet authenticated may hold together, over every listener
    /// (unfinished frames, WebSocket messages, Kafka requests before SASL); past it the oldest
    /// of them are closed.
    #[arg(long, default_value_t = ClientLimits::default().max_unauthenticated_bytes)]
    pub max_unauthenticated_bytes: usize,
}

impl LimitArgs {
    fn limits(&self) -> Result<ClientLimits, String> {
        if !(self.open_timeout.is_finite() && self.open_timeout > 0.0) {
            return Err("--open-timeout must be a positive number of seconds".into());
        }
        if self.max_connections == 0 || self.max_sessions == 0 || self.max_links == 0 {
            return Err(
                "--max-connections, --max-sessions and --max-links must be at least 1".into(),
            );
        }
        if self.max_frame_size < 512 {
            return Err("--max-frame-size must be at least 512 (AMQP's smallest)".into());
        }
        Ok(ClientLimits {
            max_connections: self.max_connections,
            max_sessions_per_connection: self.max_sessions,
            max_links_per_connection: self.max_links,
            open_timeout: std::time::Duration::from_secs_f64(self.open_timeout),
            max_frame_bytes: self.max_frame_size,
            max_unfinished_bytes: self.max_unfinished_bytes,
            max_unauthenticated_bytes: self.max_unauthenticated_bytes,
        })
    }
}

/// Which running hub an action is for, and its admin token.
#[derive(clap::Args)]
pub struct AdminArgs {
    /// The running hub's admin endpoint.
    #[arg(long, env = "HUBHOST_HUB_ADMIN", default_value = DEFAULT_ADMIN)]
    admin: String,
    /// The admin endpoint's token [default: the one in DATA_DIR/.hubhost/admin-token].
    #[arg(long, env = "HUBHOST_HUB_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// The running hub's --data-dir, where it wrote its admin token.
    #[arg(long, default_value = "hubhost-data/hub")]
    data_dir: PathBuf,
}

impl AdminArgs {
    fn token(&self) -> Result<String, String> {
        if let Some(token) = &self.admin_token {
            return Ok(token.clone());
        }
        hubhost_hub::admin::read_token(&self.data_dir).ok_or_else(|| {
            format!(
                "the admin endpoint needs the hub's token, and {} has none: pass the hub's --data-dir, or --admin-token with the token an in-memory hub printed at start",
                hubhost_hub::own_files(&self.data_dir)
                    .join(hubhost_hub::admin::TOKEN_FILE)
                    .display()
            )
        })
    }
}

/// What can be done to a running hub, through its admin endpoint.
#[derive(clap::Subcommand)]
pub enum HubAction {
    /// Add an event hub while the hub runs.
    ///
    /// The hub as `name:partitions[:group1,group2]`, as --hub takes it.
    AddHub {
        hub: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Add a consumer group to an event hub while the hub runs.
    AddConsumerGroup {
        hub: String,
        consumer_group: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List the running hub's event hubs and consumer groups.
    List {
        #[command(flatten)]
        admin: AdminArgs,
        #[arg(long)]
        json: bool,
    },
}

/// Sends one request to a running hub's admin endpoint; its JSON answer, or its error message.
async fn admin_request(
    target: &AdminArgs,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<serde_json::Value, String> {
    let admin = &target.admin;
    let token = target.token()?;
    let url = format!("{}{path}", admin.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let mut request = client.request(method, &url).bearer_auth(token);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.map_err(|e| {
        format!("no hub answers at {admin} ({e}); is `hubhost hub` running, with --admin-port?")
    })?;
    let status = response.status();
    let answer: serde_json::Value = response
        .bytes()
        .await
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    if status.is_success() {
        Ok(answer)
    } else {
        Err(answer["error"]["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{url}: {status}")))
    }
}

fn describe(hub: &serde_json::Value) -> String {
    let groups: Vec<&str> = hub["consumerGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str())
        .collect();
    format!(
        "{}: {} partitions, consumer groups {}",
        hub["name"].as_str().unwrap_or("?"),
        hub["partitions"].as_array().map_or(0, Vec::len),
        groups.join(", ")
    )
}

async fn act(action: HubAction) -> Result<(), String> {
    match action {
        HubAction::AddHub { hub, admin } => {
            let spec = hubhost_hub::HubSpec::parse_flag(&hub).map_err(|e| e.to_string())?;
            let groups: Vec<&String> = spec.consumer_groups.iter().skip(1).collect();
            let added = admin_request(
                &admin,
                reqwest::Method::POST,
                "/hubs",
                Some(serde_json::json!({
                    "name": spec.name, "partitions": spec.partitions, "consumerGroups": groups,
                })),
            )
            .await?;
            println!("added {}", describe(&added));
        }
        HubAction::AddConsumerGroup {
            hub,
            consumer_group,
            admin,
        } => {
            let path = format!("/hubs/{}/consumergroups", encode(&hub));
            let changed = admin_request(
                &admin,
                reqwest::Method::POST,
                &path,
                Some(serde_json::json!({ "name": consumer_group })),
            )
            .await?;
            println!("added {consumer_group}: {}", describe(&changed));
        }
        HubAction::List { admin, json } => {
            let hubs = admin_request(&admin, reqwest::Method::GET, "/hubs", None).await?;
            if json {
                println!("{hubs}");
            } else {
                for hub in hubs.as_array().into_iter().flatten() {
                    println!("{}", describe(hub));
                }
            }
        }
    }
    Ok(())
}

/// A path segment with what a URL would read otherwise (`$Default`'s `$` is fine; `/` is not).
fn encode(segment: &str) -> String {
    percent_encoding::utf8_percent_encode(segment, percent_encoding::NON_ALPHANUMERIC).to_string()
}

pub async fn run(args: Args) -> Result<(), String> {
    let Args {
        action,
        port,
        admin_port,
        admin_token,
        bind,
        hubs,
        config,
        data_dir,
        in_memory,
        retention_hours,
        segment_mb,
        fsync,
        keys,
        entra_issuer,
        entra_jwks,
        identity_port,
        traces,
        transports,
        limits,
    } = args;
    if let Some(action) = action {
        return act(action).await;
    }
    let specs = match (&config, hubs.is_empty()) {
        (Some(path), _) => hubhost_hub::config::hubs_from_file(path).map_err(|e| e.to_string())?,
        (None, true) => hubhost_hub::HubSpec::reference(),
        (None, false) => hubs
            .iter()
            .map(|h| hubhost_hub::HubSpec::parse_flag(h))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?,
    };
    let data_dir = (!in_memory).then_some(data_dir);
    let mut config = hubhost_hub::HubConfig::new((bind, port).into(), specs, data_dir);
    config.admin_port = admin_port.or((port == 5672).then_some(DEFAULT_ADMIN_PORT));
    config.admin_token = admin_token;
    if retention_hours.is_nan() || retention_hours <= 0.0 {
        return Err("--retention-hours must be positive".into());
    }
    config.retention = std::time::Duration::from_secs_f64(retention_hours * 3600.0);
    config.segment_bytes = segment_mb * 1024 * 1024;
    config.fsync = fsync;
    config.limits = limits.limits()?;
    config.traces = traces;
    if traces && !hubhost_telemetry::exporting_traces() {
        tracing::warn!(
            "--traces: no spans are exported; set OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)"
        );
    }
    transports.apply(bind, port, &mut config)?;
    if !keys.is_empty() {
        config.keys = keys
            .iter()
            .map(|k| hubhost_hub::sas::SharedAccessKey::parse(k))
            .collect::<Result<_, _>>()?;
    }
    if let Some(port) = identity_port {
        let identity = hubhost_hub::local_identity::LocalIdentity::generate()
            .map_err(|e| format!("--identity-port: {e}"))?;
        config.trusted_issuer = Some(identity.trusted_issuer());
        config.local_identity = Some(std::sync::Arc::new(identity));
        config.identity_port = Some(port);
    }
    if let (Some(issuer), Some(jwks)) = (entra_issuer, entra_jwks) {
        let text = std::fs::read_to_string(&jwks)
            .map_err(|e| format!("--entra-jwks {}: {e}", jwks.display()))?;
        config.trusted_issuer = Some(
            hubhost_hub::entra::TrustedIssuer::from_jwks(&issuer, &text)
                .map_err(|e| format!("--entra-jwks {}: {e}", jwks.display()))?,
        );
    }
    hubhost_hub::run(config).await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::FIXED_LIMITS;
    use hubhost_hub::{admin, kafka};

    #[test]
    fn the_fixed_limits_in_help_are_the_hubs() {
        let kib = |bytes: usize| format!("{} KiB", bytes / 1024);
        let mib = |bytes: usize| format!("{} MiB", bytes / (1024 * 1024));
        for expected in [
            kib(kafka::MAX_UNAUTHENTICATED_REQUEST_BYTES),
            format!("{} connections", admin::MAX_CONNECTIONS),
            format!("{} requests at once", admin::MAX_CONCURRENT_REQUESTS),
            format!("within {} s", admin::HEADER_READ_TIMEOUT.as_secs()),
            format!(
                "{} of events per read",
                mib(admin::MAX_RESPONSE_EVENT_BYTES)
            ),
            format!("{} at once a client", kafka::MAX_GROUPS_PER_CLIENT),
            format!("{} in all", kafka::MAX_GROUPS),
            format!(
                "{} MiB, decompressed too",
                kafka::MAX_DECOMPRESSED_BYTES / (1024 * 1024)
            ),
            format!(
                "{} (producer, partition) states",
                kafka::MAX_PRODUCER_STATES
            ),
        ] {
            assert!(FIXED_LIMITS.contains(&expected), "{expected}");
        }
    }
}

//! The hub's admin endpoint: a small HTTP API, on loopback only, for what the AMQP side of
//! Event Hubs does not offer — the explorer's view of the namespace, adding a hub or a consumer
//! group while the hub runs (the official emulator must be restarted for either), and reading
//! a partition's events without a receiver. `hubhost hub add-hub` / `add-consumer-group` and
//! the dashboard's explorer are its clients.
//!
//! | route | what |
//! |---|---|
//! | `GET /hubs` | every hub: partitions (first and last sequence numbers, last offset and enqueued time, bytes retained), consumer groups |
//! | `POST /hubs` `{"name","partitions","consumerGroups"?}` | adds a hub: 201, or 400 (a name or count the official emulator's Config.json would refuse), 409 (it exists) |
//! | `POST /hubs/{hub}/consumergroups` `{"name"}` | adds a consumer group: 201, 400, 404 (no such hub), 409 |
//! | `GET /hubs/{hub}/partitions/{id}/events?from=…&count=…` | up to `count` (≤ 100) stored events from `earliest`, `latest` (the last `count`), a sequence number or an RFC 3339 enqueued time, as consumers would receive them |
//!
//! Reading events here takes no receiver, so it holds no consumer group, owner level or
//! checkpoint: no consumer can notice it. Additions are remembered in the data directory
//! (`Additions`), so a restart keeps them; an in-memory hub forgets them with its events.
//! Errors are `{"error": {"code", "message"}}`.
//!
//! Only its user reaches it (`guard`): it listens on loopback, answers only requests whose
//! `Host` (and `Origin`, when a browser sends one) is a loopback name — so a web page the user
//! visits cannot reach it through a rebound DNS name — and requires the hub's token
//! (`Authorization: Bearer …`), which the hub writes to its data directory (readable by its
//! owner only) or, in memory, prints at start. At most [`MAX_CONCURRENT_REQUESTS`] requests are
//! served at once, and a read returns at most [`MAX_RESPONSE_EVENT_BYTES`] of stored events,
//! bodies, properties and annotations together (the next read goes on from there).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::config::{ConfigError, HubSpec};
use super::{Namespace, log};

/// The file among the hub's own files (`crate::own_files`) that remembers additions.
pub(crate) const ADDITIONS_FILE: &str = "additions.json";
/// The most events one read returns.
pub const MAX_EVENTS: usize = 100;
/// The most bytes of stored events one read returns, each counted whole — body, properties and
/// annotations — (at least one event, whatever its size): a read of 100 events of 1 MB each
/// would otherwise answer 134 MB of JSON.
pub const MAX_RESPONSE_EVENT_BYTES: usize = 1024 * 1024;
/// Events read from a partition's log at once while a read fills its budget.
const READ_CHUNK: usize = 4;
/// The most requests the endpoint serves at once; more wait for a turn.
pub const MAX_CONCURRENT_REQUESTS: usize = 4;
/// The most connections the endpoint holds at once.
pub const MAX_CONNECTIONS: usize = 32;
/// How long a connection may take to send a request's header (and, between requests, the
/// next one's), before it is closed.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a request waits for its turn before it is answered 503.
const TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// The file among the hub's own files (`crate::own_files`) that holds the admin token.
pub const TOKEN_FILE: &str = "admin-token";

/// Why an addition was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    #[error("{0}")]
    Exists(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("the data directory could not be written: {0}")]
    Storage(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("the admin endpoint is serving {MAX_CONCURRENT_REQUESTS} requests; try again")]
    Busy,
    #[error("{0}")]
    MethodNotAllowed(String),
}

impl AdminError {
    fn status(&self) -> (StatusCode, &'static str) {
        match self {
            AdminError::Invalid(_) | AdminError::BadRequest(_) => {
                (StatusCode::BAD_REQUEST, "BadRequest")
            }
            AdminError::Exists(_) => (StatusCode::CONFLICT, "Conflict"),
            AdminError::NotFound(_) => (StatusCode::NOT_FOUND, "NotFound"),
            AdminError::Storage(_) => (StatusCode::INTERNAL_SERVER_ERROR, "Storage"),
            AdminError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            AdminError::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden"),
            AdminError::Busy => (StatusCode::SERVICE_UNAVAILABLE, "Busy"),
            AdminError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        }
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let (status, code) = self.status();
        (
            status,
            Json(json!({"error": {"code": code, "message": self.to_string()}})),
        )
            .into_response()
    }
}

/// What was added while the hub ran, remembered beside the partitions: the hubs the
/// configuration did not have, and consumer groups added to any hub.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Additions {
    /// The whole namespace as it stood after the last addition.
    pub hubs: Vec<RememberedHub>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RememberedHub {
    pub name: String,
    pub partitions: u32,
    pub consumer_groups: Vec<String>,
}

impl Additions {
    /// What the data directory `dir` remembers (nothing when it has no file yet).
    pub fn load(dir: &Path) -> Result<Self, String> {
        let path = crate::own_files(dir).join(ADDITIONS_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Additions::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Remembers the namespace `hubs` in the data directory `dir` (written whole, then renamed
    /// over the old file).
    pub fn remember(dir: &Path, hubs: &[HubSpec]) -> Result<(), String> {
        let additions = Additions {
            hubs: hubs
                .iter()
                .map(|h| RememberedHub {
                    name: h.name.clone(),
                    partitions: h.partitions,
                    consumer_groups: h.consumer_groups.clone(),
                })
                .collect(),
        };
        let dir = crate::own_files(dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(ADDITIONS_FILE);
        let temporary = dir.join(format!(".{ADDITIONS_FILE}.tmp"));
        let text = serde_json::to_vec_pretty(&additions).expect("JSON serializes");
        std::fs::write(&temporary, text)
            .and_then(|()| std::fs::rename(&temporary, &path))
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The configured hubs with what is remembered: remembered hubs the configuration lacks
    /// are added, and every remembered consumer group joins its hub. A hub keeps the partition
    /// count its data was written with. Pure.
    pub fn apply_to(&self, mut configured: Vec<HubSpec>) -> Vec<HubSpec> {
        for remembered in &self.hubs {
            match configured
                .iter_mut()
                .find(|c| c.name.eq_ignore_ascii_case(&remembered.name))
            {
                Some(spec) => {
                    if spec.partitions != remembered.partitions {
                        tracing::warn!(hub = %spec.name, configured = spec.partitions, kept = remembered.partitions, "the data directory holds this hub with another partition count; keeping it");
                        spec.partitions = remembered.partitions;
                    }
                    for group in &remembered.consumer_groups {
                        if !spec
                            .consumer_groups
                            .iter()
                            .any(|g| g.eq_ignore_ascii_case(group))
                        {
                            spec.consumer_groups.push(group.clone());
                        }
                    }
                }
                None => configured.push(HubSpec {
                    name: remembered.name.clone(),
                    partitions: remembered.partitions,
                    consumer_groups: remembered.consumer_groups.clone(),
                }),
            }
        }
        configured
    }
}

/// One hub as the explorer shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HubView {
    pub name: String,
    pub partitions: Vec<PartitionView>,
    pub consumer_groups: Vec<String>,
    /// Kafka consumer groups with offsets committed for this hub (the Kafka endpoint's).
    #[serde(default)]
    pub kafka_groups: Vec<super::kafka::KafkaGroupView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionView {
    pub id: String,
    /// The first retained event's sequence number (the next one's when empty).
    pub beginning_sequence_number: i64,
    /// -1 when the partition never had an event.
    pub last_sequence_number: i64,
    pub last_offset: Option<String>,
    pub last_enqueued_time: Option<chrono::DateTime<chrono::Utc>>,
    pub retained_bytes: u64,
}

/// One stored event as a consumer receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub sequence_number: i64,
    pub offset: String,
    pub enqueued_time: Option<chrono::DateTime<chrono::Utc>>,
    pub partition_key: Option<String>,
    /// The body's bytes (data sections joined, or an AMQP string's UTF-8, or an AMQP binary).
    pub body_base64: String,
    /// Application properties; values are JSON (strings, numbers, booleans, or text for others).
    pub properties: BTreeMap<String, serde_json::Value>,
    /// Message annotations (`x-opt-…`) and message properties (`message-id`, `content-type`, …).
    pub system_properties: BTreeMap<String, serde_json::Value>,
}

fn hub_view(hub: &super::Hub, kafka: Option<&super::kafka::Kafka>) -> HubView {
    HubView {
        kafka_groups: kafka.map(|k| k.groups_of(hub)).unwrap_or_default(),
        name: hub.name.clone(),
        partitions: hub
            .partitions
            .iter()
            .map(|p| {
                let summary = p.summary();
                PartitionView {
                    id: p.id.clone(),
                    beginning_sequence_number: summary.begin_sequence,
                    last_sequence_number: summary.last.map_or(-1, |(seq, _, _)| seq),
                    last_offset: summary.last.map(|(_, offset, _)| offset.to_string()),
                    last_enqueued_time: summary
                        .last
                        .and_then(|(_, _, ms)| chrono::DateTime::from_timestamp_millis(ms)),
                    retained_bytes: p.retained_bytes(),
                }
            })
            .collect(),
        consumer_groups: hub.consumer_groups(),
    }
}

/// A UUID as text (`8-4-4-4-12` hex digits).
fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// A message id or correlation id as JSON: text, a number, a UUID's text, or base64 bytes.
fn message_id_json(id: &fe2o3_amqp::types::messaging::MessageId) -> serde_json::Value {
    use fe2o3_amqp::types::messaging::MessageId;
    match id {
        MessageId::String(s) => json!(s),
        MessageId::Ulong(n) => json!(n),
        MessageId::Uuid(u) => json!(uuid_text(u.as_inner())),
        MessageId::Binary(b) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
    }
}

/// A simple AMQP value as JSON.
fn json_of(value: &Value) -> serde_json::Value {
    match value {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => json!(b),
        Value::String(s) | Value::Symbol(fe2o3_amqp::types::primitives::Symbol(s)) => json!(s),
        Value::Ubyte(n) => json!(n),
        Value::Ushort(n) => json!(n),
        Value::Uint(n) => json!(n),
        Value::Ulong(n) => json!(n),
        Value::Byte(n) => json!(n),
        Value::Short(n) => json!(n),
        Value::Int(n) => json!(n),
        Value::Long(n) => json!(n),
        Value::Float(f) => json!(f64::from(f32::from(*f))),
        Value::Double(f) => json!(f64::from(*f)),
        Value::Timestamp(t) => chrono::DateTime::from_timestamp_millis(t.milliseconds())
            .map_or(serde_json::Value::Null, |t| json!(t.to_rfc3339())),
        Value::Uuid(u) => json!(uuid_text(u.as_inner())),
        Value::Binary(b) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        other => json!(format!("{other:?}")),
    }
}

fn simple_json(value: &SimpleValue) -> serde_json::Value {
    json_of(&Value::from(value.clone()))
}

/// A stored event as the explorer shows it.
pub fn event_view(event: &log::StoredEvent) -> Option<EventView> {
    let message = super::links::to_received(event, None)?;
    let body = match &message.body {
        Body::Data(batch) => batch.iter().flat_map(|d| d.0.iter().copied()).collect(),
        Body::Value(v) => match &v.0 {
            Value::String(s) => s.as_bytes().to_vec(),
            Value::Binary(b) => b.to_vec(),
            other => format!("{other:?}").into_bytes(),
        },
        other => format!("{other:?}").into_bytes(),
    };
    let mut properties = BTreeMap::new();
    if let Some(ap) = &message.application_properties {
        for (k, v) in ap.0.iter() {
            properties.insert(k.clone(), simple_json(v));
        }
    }
    let mut system_properties = BTreeMap::new();
    let mut partition_key = None;
    if let Some(annotations) = &message.message_annotations {
        for (k, v) in annotations.0.iter() {
            let key = match k {
                fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(s) => s.0.clone(),
                fe2o3_amqp::types::messaging::annotations::OwnedKey::Ulong(n) => n.to_string(),
            };
            let value = json_of(v);
            if key == "x-opt-partition-key" {
                partition_key = value.as_str().map(str::to_string);
            }
            system_properties.insert(key, value);
        }
    }
    if let Some(p) = &message.properties {
        if let Some(id) = &p.message_id {
            system_properties.insert("message-id".into(), message_id_json(id));
        }
        if let Some(t) = &p.content_type {
            system_properties.insert("content-type".into(), json!(t.0));
        }
        if let Some(c) = &p.correlation_id {
            system_properties.insert("correlation-id".into(), message_id_json(c));
        }
        if let Some(s) = &p.subject {
            system_properties.insert("subject".into(), json!(s));
        }
    }
    Some(EventView {
        sequence_number: event.sequence,
        offset: event.offset.to_string(),
        enqueued_time: chrono::DateTime::from_timestamp_millis(event.enqueued_ms),
        partition_key,
        body_base64: base64::engine::general_purpose::STANDARD.encode(body),
        properties,
        system_properties,
    })
}

/// Where a read starts, as the explorer asks: `earliest`, `latest` (the last `count` events),
/// a sequence number, or an RFC 3339 enqueued time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    Earliest,
    Latest,
    Sequence(i64),
    Time(i64),
}

impl ReadFrom {
    pub fn parse(text: &str) -> Result<Self, AdminError> {
        let text = text.trim();
        match text {
            "" | "earliest" => Ok(ReadFrom::Earliest),
            "latest" => Ok(ReadFrom::Latest),
            _ => {
                if let Ok(n) = text.parse::<i64>() {
                    return Ok(ReadFrom::Sequence(n.max(0)));
                }
                chrono::DateTime::parse_from_rfc3339(text)
                    .map(|t| ReadFrom::Time(t.timestamp_millis()))
                    .map_err(|_| {
                        AdminError::BadRequest(format!(
                            "from {text:?} is not earliest, latest, a sequence number or an RFC 3339 time"
                        ))
                    })
            }
        }
    }

    /// The first sequence number to read, given the partition's span. Pure.
    pub fn first(
        self,
        summary: &log::LogSummary,
        count: usize,
        resolve_time: impl Fn(i64) -> i64,
    ) -> i64 {
        match self {
            ReadFrom::Earliest => summary.begin_sequence,
            ReadFrom::Latest => (summary.next_sequence - count as i64).max(summary.begin_sequence),
            ReadFrom::Sequence(n) => n.max(summary.begin_sequence),
            ReadFrom::Time(ms) => resolve_time(ms),
        }
    }
}

#[derive(Deserialize)]
struct NewHub {
    name: String,
    partitions: u32,
    #[serde(default, rename = "consumerGroups")]
    consumer_groups: Vec<String>,
}

#[derive(Deserialize)]
struct NewConsumerGroup {
    name: String,
}

#[derive(Deserialize)]
struct ReadQuery {
    from: Option<String>,
    count: Option<usize>,
}

/// What the admin routes read: the namespace, and the Kafka endpoint's groups when it runs;
/// and what they check.
#[derive(Clone)]
pub struct AdminState {
    pub namespace: Arc<Namespace>,
    pub kafka: Option<Arc<super::kafka::Kafka>>,
    /// The token every request must present.
    pub token: Arc<str>,
    /// Turns for [`MAX_CONCURRENT_REQUESTS`] requests at once.
    pub turns: Arc<tokio::sync::Semaphore>,
}

impl AdminState {
    pub fn new(
        namespace: Arc<Namespace>,
        kafka: Option<Arc<super::kafka::Kafka>>,
        token: &str,
    ) -> Self {
        AdminState {
            namespace,
            kafka,
            token: token.into(),
            turns: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_REQUESTS)),
        }
    }
}

/// The admin routes over a namespace, behind `guard`.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/hubs", get(list_hubs).post(add_hub))
        .route("/hubs/{hub}/consumergroups", post(add_consumer_group))
        .route(
            "/hubs/{hub}/partitions/{partition}/events",
            get(read_events),
        )
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .method_not_allowed_fallback(|method: axum::http::Method, uri: axum::http::Uri| async move {
            AdminError::MethodNotAllowed(format!("{} does not take {method}", uri.path()))
        })
        .fallback(|uri: axum::http::Uri| async move {
            AdminError::NotFound(format!(
                "the admin endpoint has no {}: its routes are /hubs, /hubs/{{hub}}/consumergroups and /hubs/{{hub}}/partitions/{{id}}/events",
                uri.path()
            ))
        })
        .with_state(state)
}

/// A new admin token: 32 random bytes, as hex.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    bytes[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes the admin token where the CLI finds it: `.hubhost/admin-token` in the data
/// directory, readable and writable by its owner only. Returns its path.
pub fn write_token(data_dir: &Path, token: &str) -> std::io::Result<std::path::PathBuf> {
    let dir = crate::own_files(data_dir);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(TOKEN_FILE);
    let temporary = dir.join(format!(".{TOKEN_FILE}.tmp"));
    let _ = std::fs::remove_file(&temporary);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&temporary)?;
    std::io::Write::write_all(&mut file, token.as_bytes())?;
    drop(file);
    std::fs::rename(&temporary, &path)?;
    Ok(path)
}

/// The admin token a hub with data directory `data_dir` wrote, if there is one.
pub fn read_token(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(crate::own_files(data_dir).join(TOKEN_FILE)).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// Whether `host` (a `Host` header's value, or an `Origin`'s host and port) names this
/// machine's loopback: `127.0.0.1`, `localhost` or `[::1]`, with or without a port. Pure.
pub fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(name, _)| name),
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    name.eq_ignore_ascii_case("localhost") || name == "127.0.0.1" || name == "::1"
}

/// Every request, before its route: a loopback `Host` and `Origin`, the token, and a turn.
async fn guard(
    State(state): State<AdminState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match admit(&state, request.headers()) {
        Ok(()) => {
            // The connection proved the token: it keeps its slot from now on.
            if let Some(AdminConnection(slot)) = request.extensions().get::<AdminConnection>() {
                slot.authenticated();
            }
        }
        Err(refused) => {
            tracing::warn!(reason = %refused, "admin request refused");
            return refused.into_response();
        }
    }
    let turn = match tokio::time::timeout(TURN_WAIT, state.turns.clone().acquire_owned()).await {
        Ok(Ok(turn)) => turn,
        _ => return AdminError::Busy.into_response(),
    };
    let response = next.run(request).await;
    drop(turn);
    response
}

/// Whether a request's headers let it in. Pure.
fn admit(state: &AdminState, headers: &axum::http::HeaderMap) -> Result<(), AdminError> {
    let text = |name: axum::http::header::HeaderName| {
        headers
            .get(name)
            .map(|v| v.to_str().unwrap_or("").to_string())
    };
    let host = text(axum::http::header::HOST).unwrap_or_default();
    if !is_loopback_host(&host) {
        return Err(AdminError::Forbidden(format!(
            "the admin endpoint answers requests for 127.0.0.1, localhost or [::1] only, not for {host:?}"
        )));
    }
    if let Some(origin) = text(axum::http::header::ORIGIN) {
        let origin_host = origin
            .split_once("://")
            .map_or("", |(_, rest)| rest.trim_end_matches('/'));
        if !is_loopback_host(origin_host) {
            return Err(AdminError::Forbidden(format!(
                "the admin endpoint answers pages served from this machine's loopback only, not from {origin:?}"
            )));
        }
    }
    let presented = text(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.strip_prefix("Bearer ").map(str::to_string));
    match presented {
        Some(token) if crate::sas::constant_time_eq(token.as_bytes(), state.token.as_bytes()) => {
            Ok(())
        }
        Some(_) => Err(AdminError::Unauthorized(
            "the admin token is not this hub's".into(),
        )),
        None => Err(AdminError::Unauthorized(
            "the admin endpoint needs the hub's token (Authorization: Bearer …): the hub writes it to .hubhost/admin-token in its data directory, or prints it at start when in memory".into(),
        )),
    }
}

async fn list_hubs(State(state): State<AdminState>) -> Json<Vec<HubView>> {
    let kafka = state.kafka.as_deref();
    Json(
        state
            .namespace
            .hubs()
            .iter()
            .map(|h| hub_view(h, kafka))
            .collect(),
    )
}

async fn add_hub(
    State(AdminState { namespace, .. }): State<AdminState>,
    body: Result<Json<NewHub>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<HubView>), AdminError> {
    let Json(new) = body.map_err(|e| AdminError::BadRequest(e.body_text()))?;
    let mut consumer_groups = vec!["$Default".to_string()];
    consumer_groups.extend(new.consumer_groups);
    let spec = HubSpec {
        name: new.name,
        partitions: new.partitions,
        consumer_groups,
    };
    for group in &spec.consumer_groups {
        if !super::config::is_valid_consumer_group_name(group) {
            return Err(ConfigError::ConsumerGroupName(group.clone()).into());
        }
    }
    let hub = namespace.add_hub(&spec)?;
    tracing::info!(hub = %hub.name, partitions = hub.partitions.len(), "event hub added");
    Ok((StatusCode::CREATED, Json(hub_view(&hub, None))))
}

async fn add_consumer_group(
    State(AdminState { namespace, .. }): State<AdminState>,
    UrlPath(hub): UrlPath<String>,
    body: Result<Json<NewConsumerGroup>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<HubView>), AdminError> {
    let Json(new) = body.map_err(|e| AdminError::BadRequest(e.body_text()))?;
    namespace.add_consumer_group(&hub, &new.name)?;
    tracing::info!(%hub, consumer_group = %new.name, "consumer group added");
    let found = namespace
        .hub(&hub)
        .ok_or_else(|| AdminError::NotFound(format!("no event hub {hub}")))?;
    Ok((StatusCode::CREATED, Json(hub_view(&found, None))))
}

async fn read_events(
    State(AdminState { namespace, .. }): State<AdminState>,
    UrlPath((hub, partition)): UrlPath<(String, String)>,
    query: Result<Query<ReadQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<EventView>>, AdminError> {
    let Query(query) = query.map_err(|e| {
        AdminError::BadRequest(format!(
            "a read takes ?from=earliest|latest|SEQUENCE|TIME&count=1..{MAX_EVENTS}: {}",
            e.body_text()
        ))
    })?;
    let found = namespace
        .hub(&hub)
        .ok_or_else(|| AdminError::NotFound(format!("no event hub {hub}")))?;
    let partition = found
        .partition(&partition)
        .cloned()
        .ok_or_else(|| AdminError::NotFound(format!("{hub} has no partition {partition}")))?;
    let count = query.count.unwrap_or(20).clamp(1, MAX_EVENTS);
    let from = ReadFrom::parse(query.from.as_deref().unwrap_or("earliest"))?;
    let summary = partition.summary();
    let storage_error = |e: log::LogError| AdminError::Storage(e.to_string());
    let first = match from {
        ReadFrom::Time(ms) => partition
            .resolve(log::Seek::Time(ms))
            .map_err(storage_error)?,
        other => other.first(&summary, count, |_| summary.next_sequence),
    };
    // Read a few events at a time and stop at the response's budget, so that a read of large
    // events holds about the budget, not `count` events; the explorer's next read goes on from
    // the last one shown.
    let mut budget = MAX_RESPONSE_EVENT_BYTES;
    let mut shown = Vec::new();
    let mut next = first;
    'reading: while shown.len() < count {
        let events = partition
            .read(next, READ_CHUNK.min(count - shown.len()))
            .map_err(storage_error)?;
        let Some(last) = events.last() else { break };
        next = last.sequence + 1;
        for event in &events {
            // The whole stored event: body, properties and annotations (what its view is made
            // of), measured before the view is.
            let size = event.payload.len();
            if !shown.is_empty() && size > budget {
                break 'reading;
            }
            let Some(view) = event_view(event) else {
                continue;
            };
            budget = budget.saturating_sub(size);
            shown.push(view);
        }
    }
    Ok(Json(shown))
}

/// The slot of the connection a request came on (a request extension), so that a request
/// with the token keeps its connection's slot.
#[derive(Clone)]
struct AdminConnection(Arc<super::connections::Slot>);

/// Serves the admin routes on `listener` until the task is dropped: at most
/// [`MAX_CONNECTIONS`] connections at once, a new one taking the slot of the oldest that has
/// not yet presented the token (as on the hub's other listeners), and each closed when a
/// request's header has not arrived within [`HEADER_READ_TIMEOUT`] (axum's own `serve` waits
/// for it forever): stalled sockets hold neither descriptors nor the endpoint.
pub async fn serve(listener: tokio::net::TcpListener, state: AdminState) {
    serve_routes(listener, router(state), "admin", |request, slot| {
        request.extensions_mut().insert(AdminConnection(slot));
    })
    .await
}

/// Serves `routes` on `listener` as [`serve`] describes, `mark` giving each request its
/// connection's slot (a route that authenticates the client keeps the slot).
pub(crate) async fn serve_routes(
    listener: tokio::net::TcpListener,
    routes: Router,
    what: &'static str,
    mark: impl Fn(&mut hyper::Request<hyper::body::Incoming>, Arc<super::connections::Slot>)
    + Clone
    + Send
    + Sync
    + 'static,
) {
    use tower::ServiceExt;
    // Its requests' sizes are bounded by the HTTP server; only the slots are counted here.
    let slots = super::connections::Slots::new(MAX_CONNECTIONS, usize::MAX);
    loop {
        let (stream, _) = super::connections::accept(&listener, what, &slots).await;
        let Some((slot, _)) = slots.take() else {
            continue; // every slot is held by a client that presented the token: closed
        };
        let slot = Arc::new(slot);
        let evicted = slot.evicted();
        let routes = routes.clone();
        let connection_slot = slot.clone();
        let mark = mark.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
            mark(&mut request, connection_slot.clone());
            routes.clone().oneshot(request.map(axum::body::Body::new))
        });
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::select! {
                result = connection => {
                    if let Err(error) = result {
                        tracing::debug!(%error, what, "a connection ended");
                    }
                }
                () = evicted => tracing::debug!(what, "a connection made way for a newer one"),
            }
            drop(slot);
        });
    }
}

/// Binds the admin endpoint: loopback only, whatever the AMQP side binds to.
pub async fn listen(port: u16) -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, partitions: u32, groups: &[&str]) -> HubSpec {
        HubSpec {
            name: name.into(),
            partitions,
            consumer_groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn what_was_added_joins_the_configuration_and_the_data_decides_partition_counts() {
        let remembered = Additions {
            hubs: vec![
                RememberedHub {
                    name: "sensors".into(),
                    partitions: 16,
                    consumer_groups: vec!["$default".into(), "archive".into(), "audit".into()],
                },
                RememberedHub {
                    name: "orders".into(),
                    partitions: 4,
                    consumer_groups: vec!["$default".into()],
                },
            ],
        };
        let merged = remembered.apply_to(vec![spec("Sensors", 8, &["$Default", "archive"])]);
        assert_eq!(
            merged,
            vec![
                spec("Sensors", 16, &["$Default", "archive", "audit"]),
                spec("orders", 4, &["$default"]),
            ]
        );
        assert_eq!(Additions::default().apply_to(vec![]), vec![]);
    }

    #[test]
    fn only_loopback_names_reach_the_endpoint() {
        for host in [
            "127.0.0.1",
            "127.0.0.1:5380",
            "localhost",
            "LOCALHOST:5380",
            "[::1]:5380",
            "[::1]",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "",
            "evil.example",
            "evil.example:5380",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "10.0.0.1:5380",
            "[::2]:5380",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[tokio::test]
    async fn a_request_needs_the_token_a_loopback_host_and_origin() {
        use axum::http::{HeaderMap, HeaderValue, header};
        let dir = tempfile::tempdir().unwrap();
        let config = crate::HubConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            vec![HubSpec::sensors()],
            None,
        );
        let namespace = Arc::new(Namespace::open(&config).unwrap());
        let state = AdminState::new(namespace, None, "right");
        let headers = |pairs: &[(header::HeaderName, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(name.clone(), HeaderValue::from_str(value).unwrap());
            }
            map
        };
        let good = [
            (header::HOST, "127.0.0.1:5380"),
            (header::AUTHORIZATION, "Bearer right"),
        ];
        assert!(admit(&state, &headers(&good)).is_ok());
        let status = |pairs: &[(header::HeaderName, &str)]| {
            admit(&state, &headers(pairs)).unwrap_err().status().0
        };
        assert_eq!(status(&good[..1]), StatusCode::UNAUTHORIZED);
        assert_eq!(
            status(&[good[0].clone(), (header::AUTHORIZATION, "Bearer wrong")]),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            status(&[(header::HOST, "evil.example:5380"), good[1].clone()]),
            StatusCode::FORBIDDEN
        );
        let from_a_page = |origin| [good[0].clone(), good[1].clone(), (header::ORIGIN, origin)];
        assert_eq!(
            status(&from_a_page("http://evil.example")),
            StatusCode::FORBIDDEN
        );
        assert!(admit(&state, &headers(&from_a_page("http://localhost:7071"))).is_ok());
        // The token file is its owner's alone.
        let path = write_token(dir.path(), "right").unwrap();
        assert_eq!(read_token(dir.path()).as_deref(), Some("right"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(new_token().len(), 64);
        assert_ne!(new_token(), new_token());
    }

    #[test]
    fn a_read_starts_where_the_explorer_asks() {
        let summary = log::LogSummary {
            begin_sequence: 10,
            next_sequence: 50,
            last: Some((49, 4900, 0)),
        };
        let never = |_| unreachable!();
        assert_eq!(
            ReadFrom::parse("earliest")
                .unwrap()
                .first(&summary, 20, never),
            10
        );
        assert_eq!(
            ReadFrom::parse("latest")
                .unwrap()
                .first(&summary, 20, never),
            30
        );
        assert_eq!(
            ReadFrom::parse("latest")
                .unwrap()
                .first(&summary, 100, never),
            10
        );
        assert_eq!(
            ReadFrom::parse("42").unwrap().first(&summary, 20, never),
            42
        );
        assert_eq!(ReadFrom::parse("3").unwrap().first(&summary, 20, never), 10);
        assert_eq!(
            ReadFrom::parse("2026-11-25T10:00:00Z").unwrap(),
            ReadFrom::Time(1_795_600_800_000)
        );
        assert!(ReadFrom::parse("yesterday").is_err());
    }
}

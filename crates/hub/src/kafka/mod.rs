//! The hub's Kafka endpoint: Event Hubs' Kafka surface on 127.0.0.1:9092 (as the official
//! emulator), over the same hubs and partitions as AMQP. A topic is an event hub, a Kafka
//! partition is its partition, and a Kafka offset is an event's sequence number, so one log is
//! written and read by both protocols.
//!
//! The data flows: a connection → a request frame, its size checked before it is read →
//! `guard` checks its arrays' declared counts → `kafka-protocol` decodes it → SASL first (`sasl`: PLAIN with a connection string, or
//! OAUTHBEARER) → the request's handler here: Produce (`batch` decodes, `convert` makes the AMQP
//! message, the partition appends), Fetch (the partition reads, `convert` and `batch` make the
//! records, waiting up to the client's `max_wait_ms` for new events), Metadata, ListOffsets,
//! the group APIs (`coordinator` over the pure `groups`), and committed offsets (`offsets`).
//! One request at a time per connection, answered in order, as Kafka brokers do.

pub(crate) mod batch;
pub mod convert;
mod coordinator;
mod groups;
mod guard;
mod offsets;
pub mod sasl;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::config::ClientLimits;
use crate::connections::{Slot, Slots, Taken};
use crate::sas::Right;
use crate::{MAX_MESSAGE_BYTES, Namespace};
pub use coordinator::GroupView;
use groups::{JoinOutcome, JoinRequest, SyncOutcome};
use sasl::Access;

/// The largest request the endpoint reads; a larger one closes the connection (Kafka brokers'
/// `socket.request.max.bytes` does the same). Above the 1 MB event limit, so that a producer
/// that raised its own limit hears `MESSAGE_TOO_LARGE` rather than a closed connection.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// The largest request read before the client authenticated: the SASL exchange, ApiVersions and
/// a Metadata request are a few hundred bytes, an Entra ID token a few KiB. (Kafka brokers bound
/// this too: `sasl.server.max.receive.size`.)
pub const MAX_UNAUTHENTICATED_REQUEST_BYTES: usize = 16 * 1024;
/// The most one fetch response holds, whatever the client asks (it fetches again for more).
pub const MAX_FETCH_BYTES: usize = 8 * 1024 * 1024;
/// The folder among the hub's own files (`crate::own_files`) that keeps groups' commits.
pub(crate) const OFFSETS_FOLDER: &str = "kafka-offsets";
/// The broker id the endpoint answers as: one broker leads every partition.
const NODE_ID: i32 = 0;
/// What one fetch reads from a partition at a time, in events.
const READ_CHUNK: usize = 500;

/// The API versions the endpoint serves: what current clients (librdkafka 2, kafka-python,
/// the Java client 3) negotiate, below the versions that name topics by id.
const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::InitProducerId, 0, 4),
];

fn supported(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (*min, *max))
}

/// What a request frame cannot be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a request declares {declared} bytes; the endpoint reads at most {limit} here")]
    TooLarge { declared: i64, limit: usize },
    #[error("a request is shorter than its header")]
    Short,
    #[error("API key {0} is not one this endpoint serves")]
    UnknownApi(i16),
    #[error("{api:?} version {version} is not served (versions {min} to {max} are)")]
    Version {
        api: ApiKey,
        version: i16,
        min: i16,
        max: i16,
    },
    #[error("the request cannot be read: {0}")]
    Malformed(String),
    #[error("{api:?} v{version}: {error}")]
    Refused {
        api: ApiKey,
        version: i16,
        error: guard::GuardError,
    },
}

/// A decoded request with its header.
#[derive(Debug)]
pub struct Decoded {
    pub header: RequestHeader,
    pub api: ApiKey,
    pub request: RequestKind,
}

/// Checks a frame's declared size (the 4 bytes before it), `authenticated` or not yet.
pub fn check_size(declared: i32, authenticated: bool) -> Result<usize, FrameError> {
    let limit = if authenticated {
        MAX_REQUEST_BYTES
    } else {
        MAX_UNAUTHENTICATED_REQUEST_BYTES
    };
    if declared < 8 || declared as usize > limit {
        return Err(FrameError::TooLarge {
            declared: declared as i64,
            limit,
        });
    }
    Ok(declared as usize)
}

/// Decodes one request frame (without its size). Never panics on any bytes.
pub fn decode(mut frame: Bytes) -> Result<Decoded, FrameError> {
    if frame.len() < 8 {
        return Err(FrameError::Short);
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let api = ApiKey::try_from(key).map_err(|_| FrameError::UnknownApi(key))?;
    let (min, max) = supported(api).ok_or(FrameError::UnknownApi(key))?;
    // ApiVersions of any version is answered (with UNSUPPORTED_VERSION when too new), as
    // clients expect; its body is not read then.
    if api != ApiKey::ApiVersions && !(min..=max).contains(&version) {
        return Err(FrameError::Version {
            api,
            version,
            min,
            max,
        });
    }
    let header_version = api.request_header_version(version.min(max));
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|e| FrameError::Malformed(format!("header: {e:#}")))?;
    let request = if api == ApiKey::ApiVersions && version > max {
        RequestKind::ApiVersions(ApiVersionsRequest::default())
    } else {
        guard::check(api, version, &frame).map_err(|error| FrameError::Refused {
            api,
            version,
            error,
        })?;
        RequestKind::decode(api, &mut frame, version)
            .map_err(|e| FrameError::Malformed(format!("{api:?} v{version}: {e:#}")))?
    };
    Ok(Decoded {
        header,
        api,
        request,
    })
}

/// The endpoint's shared state.
pub struct Kafka {
    namespace: Arc<Namespace>,
    coordinator: coordinator::Coordinator,
    offsets: offsets::OffsetStore,
    next_producer_id: AtomicI64,
    /// Idempotent producers' recent batches per partition, to answer a retried batch with the
    /// offset it got the first time instead of appending it again.
    producers: Mutex<HashMap<(i64, String, i32), Vec<Recent>>>,
}

#[derive(Debug, Clone, Copy)]
struct Recent {
    first_sequence: i32,
    last_sequence: i32,
    base_offset: i64,
}

/// Batches remembered per producer and partition (Kafka's `max.in.flight` is at most 5 for
/// idempotence).
const RECENT_BATCHES: usize = 5;
/// (Producer, partition) pairs whose recent batches are remembered at most.
const MAX_PRODUCER_STATES: usize = 100_000;

impl Kafka {
    pub fn open(namespace: Arc<Namespace>) -> std::io::Result<Arc<Self>> {
        let offsets = offsets::OffsetStore::open(namespace.data_dir())?;
        Ok(Arc::new(Kafka {
            namespace,
            coordinator: coordinator::Coordinator::default(),
            offsets,
            next_producer_id: AtomicI64::new(chrono::Utc::now().timestamp_millis()),
            producers: Mutex::new(HashMap::new()),
        }))
    }

    /// The Kafka consumer groups that committed offsets for `hub`, with their lag, for the
    /// explorer.
    pub fn groups_of(&self, hub: &crate::Hub) -> Vec<KafkaGroupView> {
        let live: HashMap<String, GroupView> = self.coordinator.views().into_iter().collect();
        let key = hub.name.to_ascii_lowercase();
        self.offsets
            .all()
            .into_iter()
            .filter_map(|(name, topics)| {
                let committed = topics.get(&key)?;
                let partitions: Vec<KafkaPartitionLag> = committed
                    .iter()
                    .map(|(partition, offset)| {
                        let end = usize::try_from(*partition)
                            .ok()
                            .and_then(|i| hub.partitions.get(i))
                            .map_or(*offset, |p| p.summary().next_sequence);
                        KafkaPartitionLag {
                            partition: *partition,
                            committed: *offset,
                            lag: (end - offset).max(0),
                        }
                    })
                    .collect();
                let group = live.get(&name);
                Some(KafkaGroupView {
                    lag: partitions.iter().map(|p| p.lag).sum(),
                    state: group.map(|g| g.state.clone()),
                    generation: group.map(|g| g.generation),
                    members: group.map(|g| g.members.clone()).unwrap_or_default(),
                    name,
                    partitions,
                })
            })
            .collect()
    }
}

/// A Kafka consumer group as the explorer shows it, for one hub.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaGroupView {
    pub name: String,
    /// `Empty`, `PreparingRebalance`, `CompletingRebalance` or `Stable`; none when no member
    /// joined since the hub started (its commits are from an earlier run).
    pub state: Option<String>,
    pub generation: Option<i32>,
    pub members: Vec<String>,
    pub partitions: Vec<KafkaPartitionLag>,
    /// Events after the committed offsets, over every partition it committed.
    pub lag: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaPartitionLag {
    pub partition: i32,
    pub committed: i64,
    pub lag: i64,
}

/// Accepts Kafka connections, each in a slot of the hub's (`crate::connections`).
pub async fn serve(
    listener: TcpListener,
    kafka: Arc<Kafka>,
    limits: ClientLimits,
    slots: Arc<Slots>,
) {
    let ticker = {
        let kafka = kafka.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                kafka.coordinator.tick();
            }
        })
    };
    let _stop_ticker = AbortOnDrop(ticker);
    loop {
        let (stream, peer) = crate::connections::accept(&listener, "kafka", &slots).await;
        let Some((slot, taken)) = slots.take() else {
            tracing::warn!(%peer, limit = limits.max_connections, "Kafka connection refused: the hub has as many authenticated connections as --max-connections allows");
            continue;
        };
        if taken == Taken::FromUnauthenticated {
            tracing::info!(%peer, "the hub is full: its oldest unauthenticated connection makes way for this one");
        }
        let _ = stream.set_nodelay(true);
        let kafka = kafka.clone();
        tokio::spawn(async move {
            let evicted = slot.evicted();
            tokio::select! {
                result = connection(stream, kafka, limits, &slot) => {
                    if let Err(reason) = result {
                        tracing::warn!(%peer, "Kafka connection closed: {reason}");
                    }
                }
                () = evicted => tracing::info!(%peer, "Kafka connection closed: not authenticated, and a newer connection took its slot"),
            }
        });
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What one connection has established.
struct Session {
    /// The address the client dialled: what Metadata and FindCoordinator advertise.
    local: SocketAddr,
    mechanism: Option<String>,
    access: Option<Access>,
    client_id: String,
}

/// Serves one connection; `Err` says why it closed early. Until the client authenticated, every
/// read is due by the open timeout and a request may hold at most
/// [`MAX_UNAUTHENTICATED_REQUEST_BYTES`].
async fn connection(
    mut stream: TcpStream,
    kafka: Arc<Kafka>,
    limits: ClientLimits,
    slot: &Slot,
) -> Result<(), String> {
    let local = stream.local_addr().map_err(|e| e.to_string())?;
    let mut session = Session {
        local,
        mechanism: None,
        access: None,
        client_id: String::new(),
    };
    let authentication_deadline = tokio::time::Instant::now() + limits.open_timeout;
    loop {
        let authenticated = session.access.is_some();
        let read = read_request(&mut stream, authenticated);
        let frame = if authenticated {
            read.await?
        } else {
            tokio::time::timeout_at(authentication_deadline, read)
                .await
                .map_err(|_| "not authenticated within the open timeout".to_string())??
        };
        let Some(frame) = frame else {
            return Ok(());
        };
        // Before authentication only the SASL exchange is read, and Metadata, the request a
        // client that skipped SASL sends first, to tell it why (`unauthenticated`).
        if session.access.is_none() {
            let key = i16::from_be_bytes([frame[0], frame[1]]);
            let sasl = [
                ApiKey::ApiVersions,
                ApiKey::SaslHandshake,
                ApiKey::SaslAuthenticate,
                ApiKey::Metadata,
            ];
            if !sasl.iter().any(|k| *k as i16 == key) {
                return Err(format!("API key {key}: {SASL_REQUIRED}"));
            }
        }
        let decoded = decode(frame.freeze()).map_err(|e| e.to_string())?;
        let correlation_id = decoded.header.correlation_id;
        if let Some(client) = &decoded.header.client_id {
            session.client_id = client.chars().take(100).collect();
        }
        let outcome = kafka.handle(&mut session, decoded).await;
        if !authenticated && session.access.is_some() {
            slot.authenticated();
        }
        if let Some(body) = outcome.response {
            let mut out = BytesMut::with_capacity(body.len() + 16);
            out.put_i32(0);
            let header = ResponseHeader::default().with_correlation_id(correlation_id);
            header
                .encode(&mut out, outcome.header_version)
                .map_err(|e| e.to_string())?;
            out.extend_from_slice(&body);
            let len = (out.len() - 4) as i32;
            out[..4].copy_from_slice(&len.to_be_bytes());
            stream
                .write_all(&out)
                .await
                .map_err(|e| format!("writing a response: {e}"))?;
        }
        if let Some(reason) = outcome.close {
            return Err(reason);
        }
    }
}

/// The next request frame, its declared size checked before it is read; `None` at the end of
/// the stream.
async fn read_request(
    stream: &mut TcpStream,
    authenticated: bool,
) -> Result<Option<BytesMut>, String> {
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let len = check_size(i32::from_be_bytes(size), authenticated).map_err(|e| e.to_string())?;
    let mut frame = BytesMut::zeroed(len);
    stream
        .read_exact(&mut frame)
        .await
        .map_err(|e| format!("a request was cut short: {e}"))?;
    Ok(Some(frame))
}

/// A handler's answer: the encoded response body (none for `acks=0`) and whether to close.
struct Outcome {
    response: Option<Bytes>,
    header_version: i16,
    close: Option<String>,
}

fn respond<R: Encodable + HeaderVersion>(response: &R, version: i16) -> Outcome {
    let mut body = BytesMut::new();
    match response.encode(&mut body, version) {
        Ok(()) => Outcome {
            response: Some(body.freeze()),
            header_version: R::header_version(version),
            close: None,
        },
        // A field the version cannot carry: a fault here, reported rather than sent wrong.
        Err(e) => {
            tracing::error!("a Kafka response (version {version}) cannot be encoded: {e:#}");
            Outcome {
                response: None,
                header_version: 0,
                close: Some(format!("a response could not be encoded: {e:#}")),
            }
        }
    }
}

/// A client that skipped SASL asked for metadata: every topic it named is answered with
/// `SASL_AUTHENTICATION_FAILED`, so that the client reports why it cannot produce or consume
/// (librdkafka: "Broker: SASL Authentication failed"); the open timeout closes the connection.
fn unauthenticated(r: &MetadataRequest, version: i16) -> Outcome {
    let topics = r
        .topics
        .iter()
        .flatten()
        .map(|t| {
            metadata_response::MetadataResponseTopic::default()
                .with_name(t.name.clone())
                .with_error_code(ResponseError::SaslAuthenticationFailed.code())
        })
        .collect();
    tracing::warn!("Kafka metadata refused: {SASL_REQUIRED}");
    respond(&MetadataResponse::default().with_topics(topics), version)
}

const SASL_REQUIRED: &str = "a request before SASL authentication (the endpoint is SASL_PLAINTEXT: set security.protocol=SASL_PLAINTEXT, sasl.mechanism=PLAIN, user $ConnectionString and the connection string as the password)";

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

impl Kafka {
    async fn handle(&self, session: &mut Session, decoded: Decoded) -> Outcome {
        let version = decoded.header.request_api_version;
        if session.access.is_none()
            && let RequestKind::Metadata(r) = &decoded.request
        {
            return unauthenticated(r, version);
        }
        match decoded.request {
            RequestKind::ApiVersions(_) => self.api_versions(version),
            RequestKind::SaslHandshake(r) => Self::sasl_handshake(session, r, version),
            RequestKind::SaslAuthenticate(r) => self.sasl_authenticate(session, r, version),
            RequestKind::Metadata(r) => self.metadata(session, r, version),
            RequestKind::Produce(r) => self.produce(session, r, version),
            RequestKind::Fetch(r) => self.fetch(session, r, version).await,
            RequestKind::ListOffsets(r) => self.list_offsets(session, r, version),
            RequestKind::FindCoordinator(r) => Self::find_coordinator(session, r, version),
            RequestKind::InitProducerId(r) => self.init_producer_id(r, version),
            RequestKind::JoinGroup(r) => self.join_group(session, r, version).await,
            RequestKind::SyncGroup(r) => self.sync_group(r, version).await,
            RequestKind::Heartbeat(r) => respond(
                &HeartbeatResponse::default().with_error_code(self.coordinator.heartbeat(
                    &r.group_id.0,
                    &r.member_id,
                    r.generation_id,
                )),
                version,
            ),
            RequestKind::LeaveGroup(r) => self.leave_group(r, version),
            RequestKind::OffsetCommit(r) => self.offset_commit(session, r, version),
            RequestKind::OffsetFetch(r) => self.offset_fetch(session, r, version),
            other => Outcome {
                response: None,
                header_version: 0,
                close: Some(format!("unexpected request {other:?}")),
            },
        }
    }

    fn api_versions(&self, version: i16) -> Outcome {
        let (_, max) = supported(ApiKey::ApiVersions).expect("served");
        let keys = SUPPORTED
            .iter()
            .map(|(k, min, max)| {
                api_versions_response::ApiVersion::default()
                    .with_api_key(*k as i16)
                    .with_min_version(*min)
                    .with_max_version(*max)
            })
            .collect();
        if version > max {
            // Answered in version 0, as brokers do, so the client can pick one it shares.
            return respond(
                &ApiVersionsResponse::default()
                    .with_error_code(ResponseError::UnsupportedVersion.code())
                    .with_api_keys(keys),
                0,
            );
        }
        respond(&ApiVersionsResponse::default().with_api_keys(keys), version)
    }

    fn sasl_handshake(session: &mut Session, r: SaslHandshakeRequest, version: i16) -> Outcome {
        let mechanisms = sasl::MECHANISMS.iter().map(|m| text(m)).collect();
        let response = SaslHandshakeResponse::default().with_mechanisms(mechanisms);
        if sasl::MECHANISMS.contains(&r.mechanism.as_str()) {
            session.mechanism = Some(r.mechanism.to_string());
            respond(&response, version)
        } else {
            let mut outcome = respond(
                &response.with_error_code(ResponseError::UnsupportedSaslMechanism.code()),
                version,
            );
            outcome.close = Some(format!(
                "SASL mechanism {:?} is not served (PLAIN and OAUTHBEARER are)",
                r.mechanism.chars().take(40).collect::<String>()
            ));
            outcome
        }
    }

    fn sasl_authenticate(
        &self,
        session: &mut Session,
        r: SaslAuthenticateRequest,
        version: i16,
    ) -> Outcome {
        let result = match session.mechanism.as_deref() {
            Some(sasl::PLAIN) => {
                sasl::plain(&r.auth_bytes, &self.namespace.keys, now_secs()).map(|a| (a, 0))
            }
            Some(sasl::OAUTHBEARER) => sasl::oauthbearer(
                &r.auth_bytes,
                self.namespace.trusted_issuer.as_ref(),
                now_secs(),
            )
            .map(|(access, expires)| (access, (expires - now_secs()).max(0) * 1000)),
            _ => {
                let mut outcome = respond(
                    &SaslAuthenticateResponse::default()
                        .with_error_code(ResponseError::IllegalSaslState.code())
                        .with_error_message(Some(text("SaslAuthenticate before SaslHandshake"))),
                    version,
                );
                outcome.close = Some("SaslAuthenticate before SaslHandshake".into());
                return outcome;
            }
        };
        match result {
            Ok((access, lifetime_ms)) => {
                tracing::debug!(client = %session.client_id, ?access, "Kafka client authenticated");
                session.access = Some(access);
                respond(
                    &SaslAuthenticateResponse::default()
                        .with_session_lifetime_ms(if version >= 1 { lifetime_ms } else { 0 }),
                    version,
                )
            }
            Err(error) => {
                let message = format!("Authentication failed: {error}");
                let mut outcome = respond(
                    &SaslAuthenticateResponse::default()
                        .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                        .with_error_message(Some(text(&message))),
                    version,
                );
                outcome.close = Some(message);
                outcome
            }
        }
    }

    fn access(session: &Session) -> &Access {
        session
            .access
            .as_ref()
            .expect("authenticated before any other request")
    }

    /// The hub for a topic, or the error a client gets for it: the client's credentials must
    /// cover the hub, with `right` when one is needed (Send to produce, Listen to consume).
    fn topic(
        &self,
        session: &Session,
        name: &str,
        right: Option<Right>,
    ) -> Result<Arc<crate::Hub>, i16> {
        let hub = self
            .namespace
            .hub(name)
            .ok_or(ResponseError::UnknownTopicOrPartition.code())?;
        let access = Self::access(session);
        let allowed = match right {
            Some(right) => access.allows(&hub.name, right),
            None => access.covers(&hub.name),
        };
        if !allowed {
            return Err(ResponseError::TopicAuthorizationFailed.code());
        }
        Ok(hub)
    }

    fn broker(session: &Session) -> metadata_response::MetadataResponseBroker {
        metadata_response::MetadataResponseBroker::default()
            .with_node_id(BrokerId(NODE_ID))
            .with_host(text(&session.local.ip().to_string()))
            .with_port(session.local.port() as i32)
    }

    fn metadata(&self, session: &Session, r: MetadataRequest, version: i16) -> Outcome {
        let names: Vec<String> = match &r.topics {
            Some(topics) => topics
                .iter()
                .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
                .collect(),
            // All topics: the hubs this client may see.
            None => self
                .namespace
                .hubs()
                .into_iter()
                .filter(|h| Self::access(session).covers(&h.name))
                .map(|h| h.name.clone())
                .collect(),
        };
        let topics = names
            .into_iter()
            .map(|name| {
                let topic = metadata_response::MetadataResponseTopic::default()
                    .with_name(Some(TopicName(text(&name))));
                match self.topic(session, &name, None) {
                    Err(code) => topic.with_error_code(code),
                    Ok(hub) => topic.with_partitions(
                        (0..hub.partitions.len() as i32)
                            .map(|p| {
                                metadata_response::MetadataResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_leader_id(BrokerId(NODE_ID))
                                    .with_replica_nodes(vec![BrokerId(NODE_ID)])
                                    .with_isr_nodes(vec![BrokerId(NODE_ID)])
                            })
                            .collect(),
                    ),
                }
            })
            .collect();
        respond(
            &MetadataResponse::default()
                .with_brokers(vec![Self::broker(session)])
                .with_cluster_id((version >= 2).then(|| text("hubhost")))
                .with_controller_id(BrokerId(if version >= 1 { NODE_ID } else { -1 }))
                .with_topics(topics),
            version,
        )
    }

    fn find_coordinator(session: &Session, r: FindCoordinatorRequest, version: i16) -> Outcome {
        let host = text(&session.local.ip().to_string());
        let port = session.local.port() as i32;
        // Groups only (key type 0): transactions are not served.
        let (code, message) = if r.key_type == 0 {
            (0, None)
        } else {
            (
                ResponseError::CoordinatorNotAvailable.code(),
                Some(text("transactions are not supported by this hub")),
            )
        };
        let mut response = FindCoordinatorResponse::default();
        if version < 4 {
            response = response
                .with_error_code(code)
                .with_error_message(if version >= 1 { message.clone() } else { None })
                .with_node_id(BrokerId(NODE_ID))
                .with_host(host.clone())
                .with_port(port);
        } else {
            response.coordinators = r
                .coordinator_keys
                .iter()
                .map(|key| {
                    find_coordinator_response::Coordinator::default()
                        .with_key(key.clone())
                        .with_node_id(BrokerId(NODE_ID))
                        .with_host(host.clone())
                        .with_port(port)
                        .with_error_code(code)
                        .with_error_message(message.clone())
                })
                .collect();
        }
        respond(&response, version)
    }

    fn init_producer_id(&self, r: InitProducerIdRequest, version: i16) -> Outcome {
        if r.transactional_id.is_some() {
            return respond(
                &InitProducerIdResponse::default()
                    .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
                    .with_producer_id(ProducerId(-1)),
                version,
            );
        }
        let id = self
            .next_producer_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        respond(
            &InitProducerIdResponse::default()
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(0),
            version,
        )
    }

    fn produce(&self, session: &Session, r: ProduceRequest, version: i16) -> Outcome {
        let mut responses = Vec::new();
        for topic in r.topic_data {
            let name = topic.name.0.to_string();
            let hub = self.topic(session, &name, Some(Right::Send));
            let mut partitions = Vec::new();
            for data in topic.partition_data {
                let (code, base_offset, message) = match &hub {
                    Err(code) => (*code, -1, None),
                    Ok(hub) => self.produce_partition(hub, data.index, data.records),
                };
                partitions.push(
                    produce_response::PartitionProduceResponse::default()
                        .with_index(data.index)
                        .with_error_code(code)
                        .with_base_offset(base_offset)
                        .with_log_append_time_ms(-1)
                        .with_error_message(
                            message.filter(|_| version >= 8).map(|m: String| text(&m)),
                        ),
                );
            }
            responses.push(
                produce_response::TopicProduceResponse::default()
                    .with_name(TopicName(text(&name)))
                    .with_partition_responses(partitions),
            );
        }
        if r.acks == 0 {
            return Outcome {
                response: None,
                header_version: 0,
                close: None,
            };
        }
        respond(
            &ProduceResponse::default().with_responses(responses),
            version,
        )
    }

    /// Appends one partition's batches: (error code, base offset, message).
    fn produce_partition(
        &self,
        hub: &crate::Hub,
        index: i32,
        records: Option<Bytes>,
    ) -> (i16, i64, Option<String>) {
        let Some(partition) = usize::try_from(index)
            .ok()
            .and_then(|i| hub.partitions.get(i))
        else {
            return (ResponseError::UnknownTopicOrPartition.code(), -1, None);
        };
        let batches = match batch::decode(records.unwrap_or_default()) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(hub = %hub.name, partition = index, "Kafka produce refused: {e}");
                return (
                    ResponseError::CorruptMessage.code(),
                    -1,
                    Some(e.to_string()),
                );
            }
        };
        for b in &batches {
            for event in &b.events {
                let size = event.key.as_ref().map_or(0, |k| k.len())
                    + event.value.as_ref().map_or(0, |v| v.len())
                    + event
                        .headers
                        .iter()
                        .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
                        .sum::<usize>();
                if size as u64 > MAX_MESSAGE_BYTES {
                    return (
                        ResponseError::MessageTooLarge.code(),
                        -1,
                        Some(format!(
                            "an event of {size} bytes is larger than the {MAX_MESSAGE_BYTES} bytes Event Hubs accepts"
                        )),
                    );
                }
            }
        }
        let mut base_offset = None;
        for b in batches {
            if b.events.is_empty() {
                continue;
            }
            let last_sequence = b.base_sequence.wrapping_add(b.events.len() as i32 - 1);
            let key = (b.producer_id, hub.name.to_ascii_lowercase(), index);
            if b.producer_id >= 0 {
                let producers = self.producers.lock().expect("producers lock");
                if let Some(recent) = producers.get(&key) {
                    if let Some(done) = recent.iter().find(|r| r.first_sequence == b.base_sequence)
                    {
                        // A retry of a batch already appended: its first answer again.
                        base_offset.get_or_insert(done.base_offset);
                        continue;
                    }
                    let last = recent.last().expect("kept non-empty");
                    if b.base_sequence != last.last_sequence.wrapping_add(1) {
                        return (
                            ResponseError::OutOfOrderSequenceNumber.code(),
                            -1,
                            Some(format!(
                                "sequence {} follows {}",
                                b.base_sequence, last.last_sequence
                            )),
                        );
                    }
                }
            }
            let payloads = b
                .events
                .iter()
                .map(|e| Bytes::from(convert::to_amqp(e)))
                .collect();
            let placed = match partition.append(payloads) {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(hub = %hub.name, partition = index, "Kafka produce failed: {e}");
                    return (
                        ResponseError::KafkaStorageError.code(),
                        -1,
                        Some(e.to_string()),
                    );
                }
            };
            let first = placed.first().map(|(seq, _)| *seq).unwrap_or(-1);
            base_offset.get_or_insert(first);
            if b.producer_id >= 0 {
                let mut producers = self.producers.lock().expect("producers lock");
                if producers.len() >= MAX_PRODUCER_STATES && !producers.contains_key(&key) {
                    // Bounded: producers come and go (each restart takes a new id); the ones
                    // forgotten are treated as new, as Kafka treats an expired producer id.
                    producers.clear();
                    tracing::info!(
                        "forgot the idempotent producers' recent batches ({MAX_PRODUCER_STATES} kept at most)"
                    );
                }
                let recent = producers.entry(key).or_default();
                recent.push(Recent {
                    first_sequence: b.base_sequence,
                    last_sequence,
                    base_offset: first,
                });
                if recent.len() > RECENT_BATCHES {
                    recent.remove(0);
                }
            }
        }
        (0, base_offset.unwrap_or(-1), None)
    }

    async fn fetch(&self, session: &Session, r: FetchRequest, version: i16) -> Outcome {
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(r.max_wait_ms.max(0) as u64);
        loop {
            let mut watchers = Vec::new();
            let mut total = 0usize;
            // What one response may hold: the client's own limit, within the endpoint's.
            let mut budget = usize::try_from(r.max_bytes)
                .unwrap_or(0)
                .clamp(1, MAX_FETCH_BYTES);
            let mut responses = Vec::new();
            for topic in &r.topics {
                let name = topic.topic.0.to_string();
                let hub = self.topic(session, &name, Some(Right::Listen));
                let mut partitions = Vec::new();
                for p in &topic.partitions {
                    let data = fetch_response::PartitionData::default()
                        .with_partition_index(p.partition)
                        .with_aborted_transactions(Some(Vec::new()));
                    let data = match &hub {
                        Err(code) => data.with_error_code(*code),
                        Ok(hub) => match usize::try_from(p.partition)
                            .ok()
                            .and_then(|i| hub.partitions.get(i))
                        {
                            None => {
                                data.with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            }
                            Some(partition) => {
                                let summary = partition.summary();
                                let data = data
                                    .with_high_watermark(summary.next_sequence)
                                    .with_last_stable_offset(summary.next_sequence)
                                    .with_log_start_offset(if version >= 5 {
                                        summary.begin_sequence
                                    } else {
                                        -1
                                    });
                                if p.fetch_offset < summary.begin_sequence
                                    || p.fetch_offset > summary.next_sequence
                                {
                                    data.with_error_code(ResponseError::OffsetOutOfRange.code())
                                } else {
                                    watchers.push(partition.subscribe());
                                    let limit = (p.partition_max_bytes.max(0) as usize).min(budget);
                                    let records =
                                        read_records(partition, p.fetch_offset, limit, total == 0);
                                    match records {
                                        Ok(Some(bytes)) => {
                                            total += bytes.len();
                                            budget = budget.saturating_sub(bytes.len());
                                            data.with_records(Some(bytes))
                                        }
                                        Ok(None) => data.with_records(Some(Bytes::new())),
                                        Err(e) => {
                                            tracing::error!(hub = %hub.name, partition = p.partition, "Kafka fetch failed: {e}");
                                            data.with_error_code(
                                                ResponseError::KafkaStorageError.code(),
                                            )
                                        }
                                    }
                                }
                            }
                        },
                    };
                    partitions.push(data);
                }
                responses.push(
                    fetch_response::FetchableTopicResponse::default()
                        .with_topic(TopicName(text(&name)))
                        .with_partitions(partitions),
                );
            }
            let enough = total >= r.min_bytes.max(1) as usize;
            if enough || watchers.is_empty() || tokio::time::Instant::now() >= deadline {
                return respond(&FetchResponse::default().with_responses(responses), version);
            }
            // Nothing yet: wait for an append to any fetched partition, or the deadline.
            let changed = futures_util::future::select_all(
                watchers
                    .iter_mut()
                    .map(|w| Box::pin(w.changed()))
                    .collect::<Vec<_>>(),
            );
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                continue;
            }
        }
    }

    fn list_offsets(&self, session: &Session, r: ListOffsetsRequest, version: i16) -> Outcome {
        let topics = r
            .topics
            .into_iter()
            .map(|topic| {
                let name = topic.name.0.to_string();
                let hub = self.topic(session, &name, Some(Right::Listen));
                let partitions = topic
                    .partitions
                    .into_iter()
                    .map(|p| {
                        let answer = list_offsets_response::ListOffsetsPartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_timestamp(-1);
                        let partition = match &hub {
                            Err(code) => return answer.with_error_code(*code),
                            Ok(hub) => usize::try_from(p.partition_index)
                                .ok()
                                .and_then(|i| hub.partitions.get(i)),
                        };
                        let Some(partition) = partition else {
                            return answer
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code());
                        };
                        let summary = partition.summary();
                        let offset = match p.timestamp {
                            -1 => Ok(summary.next_sequence),
                            -2 => Ok(summary.begin_sequence),
                            -3 => Ok(summary.last.map(|l| l.0).unwrap_or(-1)),
                            ms => partition.resolve(crate::log::Seek::Time(ms)),
                        };
                        match offset {
                            Ok(offset) => answer.with_offset(offset),
                            Err(_) => {
                                answer.with_error_code(ResponseError::KafkaStorageError.code())
                            }
                        }
                    })
                    .collect();
                list_offsets_response::ListOffsetsTopicResponse::default()
                    .with_name(TopicName(text(&name)))
                    .with_partitions(partitions)
            })
            .collect();
        respond(&ListOffsetsResponse::default().with_topics(topics), version)
    }

    async fn join_group(&self, session: &Session, r: JoinGroupRequest, version: i16) -> Outcome {
        // A group is tied to the hubs it consumes: its members' subscriptions and its commits.
        // A client joins only when it may Listen on all of them, so that a client scoped to
        // one hub cannot take another hub's partitions from the group consuming it.
        let refused = |code: i16| {
            let response = JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1)
                .with_protocol_name((version < 7).then(|| text("")))
                .with_member_id(r.member_id.clone());
            respond(&response, version)
        };
        let subscribed =
            match subscribed_hubs(&r.protocol_type, r.protocols.iter().map(|p| &p.metadata)) {
                Ok(hubs) => hubs,
                Err(code) => return refused(code),
            };
        let access = Self::access(session);
        let tied = subscribed
            .into_iter()
            .chain(self.offsets.hubs_of(&r.group_id.0));
        let mut allowed = access.rights.allows(Right::Listen);
        for hub in tied {
            allowed &= access.allows(&hub, Right::Listen);
        }
        if !allowed {
            return refused(ResponseError::GroupAuthorizationFailed.code());
        }
        let request = JoinRequest {
            member_id: r.member_id.to_string(),
            client_id: if session.client_id.is_empty() {
                "consumer".into()
            } else {
                session.client_id.clone()
            },
            session_timeout_ms: r.session_timeout_ms.max(0) as u64,
            rebalance_timeout_ms: if version >= 1 {
                r.rebalance_timeout_ms.max(0) as u64
            } else {
                r.session_timeout_ms.max(0) as u64
            },
            protocol_type: r.protocol_type.to_string(),
            protocols: r
                .protocols
                .into_iter()
                .map(|p| (p.name.to_string(), p.metadata))
                .collect(),
            require_known_member_id: version >= 4,
        };
        let response = match self.coordinator.join(&r.group_id.0, request).await {
            JoinOutcome::Joined(j) => JoinGroupResponse::default()
                .with_generation_id(j.generation)
                .with_protocol_type((version >= 7).then(|| text(&j.protocol_type)))
                .with_protocol_name(Some(text(&j.protocol)))
                .with_leader(text(&j.leader))
                .with_member_id(text(&j.member_id))
                .with_members(
                    j.members
                        .into_iter()
                        .map(|(id, metadata)| {
                            join_group_response::JoinGroupResponseMember::default()
                                .with_member_id(text(&id))
                                .with_metadata(metadata)
                        })
                        .collect(),
                ),
            JoinOutcome::Failed { code, member_id } => JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1)
                .with_protocol_name((version < 7).then(|| text("")))
                .with_member_id(text(&member_id)),
        };
        respond(&response, version)
    }

    async fn sync_group(&self, r: SyncGroupRequest, version: i16) -> Outcome {
        let assignments = r
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect();
        let response = match self
            .coordinator
            .sync(&r.group_id.0, &r.member_id, r.generation_id, assignments)
            .await
        {
            SyncOutcome::Assigned {
                protocol_type,
                protocol,
                assignment,
            } => SyncGroupResponse::default()
                .with_protocol_type((version >= 5).then(|| text(&protocol_type)))
                .with_protocol_name((version >= 5).then(|| text(&protocol)))
                .with_assignment(assignment),
            SyncOutcome::Failed(code) => SyncGroupResponse::default().with_error_code(code),
        };
        respond(&response, version)
    }

    fn leave_group(&self, r: LeaveGroupRequest, version: i16) -> Outcome {
        let group = r.group_id.0.to_string();
        if version < 3 {
            let code = self.coordinator.leave(&group, &r.member_id);
            return respond(
                &LeaveGroupResponse::default().with_error_code(code),
                version,
            );
        }
        let members = r
            .members
            .into_iter()
            .map(|m| {
                leave_group_response::MemberResponse::default()
                    .with_error_code(self.coordinator.leave(&group, &m.member_id))
                    .with_member_id(m.member_id)
                    .with_group_instance_id(m.group_instance_id)
            })
            .collect();
        respond(
            &LeaveGroupResponse::default().with_members(members),
            version,
        )
    }

    fn offset_commit(&self, session: &Session, r: OffsetCommitRequest, version: i16) -> Outcome {
        let group = r.group_id.0.to_string();
        let allowed =
            self.coordinator
                .may_commit(&group, &r.member_id, r.generation_id_or_member_epoch);
        let mut commits = Vec::new();
        let topics: Vec<_> = r
            .topics
            .into_iter()
            .map(|topic| {
                let name = topic.name.0.to_string();
                let hub = self.topic(session, &name, Some(Right::Listen));
                let partitions = topic
                    .partitions
                    .into_iter()
                    .map(|p| {
                        let code = match &hub {
                            Err(code) => *code,
                            Ok(_) if allowed != 0 => allowed,
                            Ok(hub)
                                if p.partition_index < 0
                                    || p.partition_index as usize >= hub.partitions.len() =>
                            {
                                ResponseError::UnknownTopicOrPartition.code()
                            }
                            Ok(_)
                                if p.committed_metadata
                                    .as_ref()
                                    .is_some_and(|m| m.len() > offsets::MAX_METADATA_BYTES) =>
                            {
                                ResponseError::OffsetMetadataTooLarge.code()
                            }
                            Ok(hub) => {
                                commits.push((
                                    hub.name.clone(),
                                    p.partition_index,
                                    offsets::Committed {
                                        offset: p.committed_offset,
                                        metadata: p.committed_metadata.map(|m| m.to_string()),
                                    },
                                ));
                                0
                            }
                        };
                        offset_commit_response::OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect();
                offset_commit_response::OffsetCommitResponseTopic::default()
                    .with_name(TopicName(text(&name)))
                    .with_partitions(partitions)
            })
            .collect();
        let mut topics = topics;
        if !commits.is_empty()
            && let Err(e) = self.offsets.commit(&group, commits)
        {
            let code = match &e {
                offsets::CommitError::TooManyGroups => {
                    tracing::warn!(group, "Kafka offsets refused: {e}");
                    ResponseError::PolicyViolation.code()
                }
                offsets::CommitError::Io(_) => {
                    tracing::error!(group, "Kafka offsets not written: {e}");
                    ResponseError::KafkaStorageError.code()
                }
            };
            for t in &mut topics {
                for p in &mut t.partitions {
                    if p.error_code == 0 {
                        p.error_code = code;
                    }
                }
            }
        }
        respond(
            &OffsetCommitResponse::default().with_topics(topics),
            version,
        )
    }

    /// Committed positions for `topics` (every topic the group committed for when `None`):
    /// per topic, (partition, error code, offset or -1, metadata).
    fn committed(
        &self,
        session: &Session,
        group: &str,
        topics: Option<Vec<(String, Vec<i32>)>>,
    ) -> Vec<(String, Vec<Position>)> {
        let topics = topics.unwrap_or_else(|| {
            self.offsets
                .all()
                .remove(group)
                .unwrap_or_default()
                .into_iter()
                .map(|(hub, parts)| (hub, parts.into_keys().collect()))
                .collect()
        });
        topics
            .into_iter()
            .map(|(name, partitions)| {
                let hub = self.topic(session, &name, Some(Right::Listen));
                let positions = partitions
                    .into_iter()
                    .map(|p| match &hub {
                        Err(code) => (p, *code, -1, None),
                        Ok(hub) => match self.offsets.committed(group, &hub.name, p) {
                            Some(c) => (p, 0, c.offset, c.metadata),
                            None => (p, 0, -1, None),
                        },
                    })
                    .collect();
                (name, positions)
            })
            .collect()
    }

    fn offset_fetch(&self, session: &Session, r: OffsetFetchRequest, version: i16) -> Outcome {
        // OffsetFetch has two shapes of the same answer: one group (up to v7), several (v8).
        macro_rules! partitions {
            ($ty:ty, $positions:expr) => {
                $positions
                    .into_iter()
                    .map(|(p, code, offset, metadata): Position| {
                        <$ty>::default()
                            .with_partition_index(p)
                            .with_committed_offset(offset)
                            .with_committed_leader_epoch(-1)
                            .with_metadata(metadata.map(|m| text(&m)))
                            .with_error_code(code)
                    })
                    .collect()
            };
        }
        let named = |topics: Vec<(TopicName, Vec<i32>)>| {
            topics
                .into_iter()
                .map(|(name, parts)| (name.0.to_string(), parts))
                .collect::<Vec<_>>()
        };
        if version >= 8 {
            let groups = r
                .groups
                .into_iter()
                .map(|g| {
                    let topics = g.topics.map(|ts| {
                        named(
                            ts.into_iter()
                                .map(|t| (t.name, t.partition_indexes))
                                .collect(),
                        )
                    });
                    let topics = self
                        .committed(session, &g.group_id.0, topics)
                        .into_iter()
                        .map(|(name, positions)| {
                            offset_fetch_response::OffsetFetchResponseTopics::default()
                                .with_name(TopicName(text(&name)))
                                .with_partitions(partitions!(
                                    offset_fetch_response::OffsetFetchResponsePartitions,
                                    positions
                                ))
                        })
                        .collect();
                    offset_fetch_response::OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_topics(topics)
                })
                .collect();
            return respond(&OffsetFetchResponse::default().with_groups(groups), version);
        }
        let topics = r.topics.map(|ts| {
            named(
                ts.into_iter()
                    .map(|t| (t.name, t.partition_indexes))
                    .collect(),
            )
        });
        let topics = self
            .committed(session, &r.group_id.0, topics)
            .into_iter()
            .map(|(name, positions)| {
                offset_fetch_response::OffsetFetchResponseTopic::default()
                    .with_name(TopicName(text(&name)))
                    .with_partitions(partitions!(
                        offset_fetch_response::OffsetFetchResponsePartition,
                        positions
                    ))
            })
            .collect();
        respond(&OffsetFetchResponse::default().with_topics(topics), version)
    }
}

/// A committed position as OffsetFetch reports it: partition, error code, offset (-1: none),
/// metadata.
type Position = (i32, i16, i64, Option<String>);

/// Reads a partition from `from` as one record batch of at most `limit` bytes of events (at
/// least one event when `first`, as Kafka returns one oversized batch rather than none).
fn read_records(
    partition: &crate::Partition,
    from: i64,
    limit: usize,
    first: bool,
) -> Result<Option<Bytes>, crate::log::LogError> {
    let mut fetched = Vec::new();
    let mut bytes = 0usize;
    let mut next = from;
    'reading: loop {
        let events = partition.read(next, READ_CHUNK)?;
        if events.is_empty() {
            break;
        }
        for stored in events {
            let size = stored.payload.len() + 32;
            if bytes + size > limit && !(first && fetched.is_empty()) {
                break 'reading;
            }
            next = stored.sequence + 1;
            bytes += size;
            // An event that is not an AMQP message (none the hub stores) is skipped.
            if let Some(event) = convert::from_amqp(&stored.payload) {
                fetched.push(batch::Fetched {
                    sequence: stored.sequence,
                    enqueued_ms: stored.enqueued_ms,
                    event,
                });
            }
        }
    }
    Ok((!fetched.is_empty()).then(|| batch::encode(&fetched)))
}

/// The hubs a JoinGroup's consumer protocols subscribe to (lowercased), each protocol's
/// metadata being Kafka's `ConsumerProtocolSubscription` (a version, then its fields). Another
/// protocol type names no hubs. Pure.
fn subscribed_hubs<'a>(
    protocol_type: &str,
    metadata: impl IntoIterator<Item = &'a Bytes>,
) -> Result<Vec<String>, i16> {
    if protocol_type != "consumer" {
        return Ok(Vec::new());
    }
    let mut hubs = Vec::new();
    for bytes in metadata {
        let mut buf = bytes.clone();
        if buf.len() < 2 {
            return Err(ResponseError::InconsistentGroupProtocol.code());
        }
        let version = i16::from_be_bytes([buf[0], buf[1]]).clamp(0, 3);
        let _ = bytes::Buf::get_i16(&mut buf);
        let subscription = ConsumerProtocolSubscription::decode(&mut buf, version)
            .map_err(|_| ResponseError::InconsistentGroupProtocol.code())?;
        hubs.extend(
            subscription
                .topics
                .iter()
                .map(|t| t.to_string().to_ascii_lowercase()),
        );
    }
    hubs.sort();
    hubs.dedup();
    Ok(hubs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_names_the_hubs_its_consumer_protocols_subscribe_to() {
        let subscription = |version: i16, topics: &[&str]| {
            let mut buf = BytesMut::new();
            buf.put_i16(version);
            ConsumerProtocolSubscription::default()
                .with_topics(
                    topics
                        .iter()
                        .map(|t| StrBytes::from(t.to_string()))
                        .collect(),
                )
                .encode(&mut buf, version)
                .unwrap();
            buf.freeze()
        };
        let range = subscription(1, &["Sensors", "alarms"]);
        let roundrobin = subscription(3, &["sensors"]);
        assert_eq!(
            subscribed_hubs("consumer", [&range, &roundrobin]),
            Ok(vec!["alarms".to_string(), "sensors".to_string()])
        );
        assert_eq!(subscribed_hubs("connect", [&range]), Ok(vec![]));
        let garbage = Bytes::from_static(&[0, 1, 0xff, 0xff, 0xff]);
        assert_eq!(
            subscribed_hubs("consumer", [&garbage]),
            Err(ResponseError::InconsistentGroupProtocol.code())
        );
    }

    #[test]
    fn declared_sizes_and_versions_are_checked_before_decoding() {
        let too_large = |declared: i64, limit| FrameError::TooLarge { declared, limit };
        assert_eq!(check_size(-1, true), Err(too_large(-1, MAX_REQUEST_BYTES)));
        assert_eq!(
            check_size(i32::MAX, true),
            Err(too_large(i32::MAX as i64, MAX_REQUEST_BYTES))
        );
        assert_eq!(check_size(100, true), Ok(100));
        // Before authentication, only what the SASL exchange needs.
        assert_eq!(check_size(16 * 1024, false), Ok(16 * 1024));
        assert_eq!(
            check_size(100_000, false),
            Err(too_large(100_000, MAX_UNAUTHENTICATED_REQUEST_BYTES))
        );
        assert_eq!(check_size(100_000, true), Ok(100_000));
        assert_eq!(
            decode(Bytes::from_static(b"\x00\x03")).unwrap_err(),
            FrameError::Short
        );
        // Produce v13 names topics by id: not served.
        let frame = Bytes::from_static(b"\x00\x00\x00\x0d\x00\x00\x00\x01\x00\x00");
        assert!(matches!(decode(frame), Err(FrameError::Version { .. })));
        let frame = Bytes::from_static(b"\x7f\x00\x00\x00\x00\x00\x00\x01\x00\x00");
        assert!(matches!(decode(frame), Err(FrameError::UnknownApi(_))));
    }

    #[test]
    fn a_too_new_api_versions_request_is_answered() {
        // ApiVersions v9, correlation id 7, client id "c".
        let frame = Bytes::from_static(b"\x00\x12\x00\x09\x00\x00\x00\x07\x00\x01c\x00");
        let decoded = decode(frame).unwrap();
        assert_eq!(decoded.api, ApiKey::ApiVersions);
        assert_eq!(decoded.header.correlation_id, 7);
    }
}

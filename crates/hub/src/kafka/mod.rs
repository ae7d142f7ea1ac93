//! The hub's Kafka endpoint: Event Hubs' Kafka surface on 127.0.0.1:9092 (as the official
//! emulator), over the same hubs and partitions as AMQP. A topic is an event hub, a Kafka
//! partition is its partition, and a Kafka offset is an event's sequence number, so one log is
//! written and read by both protocols.
//!
//! The data flows: a connection (`connection`: the frame's size checked before it is read,
//! `guard` checks its arrays' declared counts, `kafka-protocol` decodes it) → SASL first
//! (`versions`: ApiVersions, the SASL exchange over `sasl` — PLAIN with a connection string, or
//! OAUTHBEARER —, Metadata, and the access check every other API makes) → the request's handler:
//! `produce` (`batch` decodes, `convert` makes the AMQP message, the partition appends),
//! `fetch` (the partition reads, `convert` and `batch` make the records, waiting up to the
//! client's `max_wait_ms`; ListOffsets), `group_requests` (the group APIs over `coordinator` and
//! the pure `groups`, and committed offsets over `offsets`). This module holds the endpoint's
//! shared state and dispatches a decoded request to its handler. One request at a time per
//! connection, answered in order, as Kafka brokers do.

pub(crate) mod batch;
mod connection;
pub mod convert;
mod coordinator;
mod fetch;
mod group_requests;
mod groups;
mod guard;
mod offsets;
mod produce;
mod producers;
pub mod sasl;
mod versions;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
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
pub use batch::MAX_DECOMPRESSED_BYTES;
use connection::SASL_REQUIRED;
pub use connection::{Decoded, FrameError, check_size, decode, serve};
pub use coordinator::GroupView;
pub use coordinator::{MAX_GROUPS, MAX_GROUPS_PER_CLIENT};
pub use fetch::MAX_FETCH_BYTES;
use groups::{JoinOutcome, JoinRequest, SyncOutcome};
pub use offsets::DEFAULT_RETENTION as DEFAULT_OFFSETS_RETENTION;
pub use producers::MAX_PRODUCER_STATES;
use sasl::Access;
use versions::{supported, unauthenticated};

/// The largest request the endpoint reads; a larger one closes the connection (Kafka brokers'
/// `socket.request.max.bytes` does the same). Above the 1 MB event limit, so that a producer
/// that raised its own limit hears `MESSAGE_TOO_LARGE` rather than a closed connection.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The largest request read before the client authenticated: the SASL exchange, ApiVersions and
/// a Metadata request are a few hundred bytes, an Entra ID token a few KiB. (Kafka brokers bound
/// this too: `sasl.server.max.receive.size`.)
pub const MAX_UNAUTHENTICATED_REQUEST_BYTES: usize = 16 * 1024;

/// The folder among the hub's own files (`crate::own_files`) that keeps groups' commits.
pub(crate) const OFFSETS_FOLDER: &str = "kafka-offsets";

/// The broker id the endpoint answers as: one broker leads every partition.
const NODE_ID: i32 = 0;

/// The endpoint's shared state.
pub struct Kafka {
    namespace: Arc<Namespace>,
    coordinator: coordinator::Coordinator,
    offsets: offsets::OffsetStore,
    offsets_retention: Duration,
    /// Idempotent producers' recent batches per partition, to answer a retried batch with the
    /// offset it got the first time instead of appending it again (across restarts too).
    producers: producers::ProducerStates,
}

impl Kafka {
    /// The endpoint over `namespace`, its groups' offsets kept for `offsets_retention` once
    /// they have no member (Kafka's `offsets.retention.minutes`).
    pub fn open(
        namespace: Arc<Namespace>,
        offsets_retention: Duration,
    ) -> std::io::Result<Arc<Self>> {
        let offsets = offsets::OffsetStore::open(namespace.data_dir())?;
        let producers = producers::ProducerStates::open(namespace.data_dir())?;
        // Batches journaled but never stored (the hub died between the two) are forgotten.
        let dropped = producers.drop_unstored(|hub, partition| {
            let hub = namespace.hub(hub)?;
            let partition = hub.partitions.get(usize::try_from(partition).ok()?)?;
            Some(partition.summary().next_sequence)
        });
        if dropped > 0 {
            tracing::info!(
                dropped,
                "idempotent producers' batches journaled but not stored (the hub stopped between the two) forgotten"
            );
        }
        Ok(Arc::new(Kafka {
            namespace,
            coordinator: coordinator::Coordinator::default(),
            offsets,
            offsets_retention,
            producers,
        }))
    }

    /// Forgets the offsets of groups that have had no member for the retention.
    fn expire_offsets(&self) {
        let expired = self
            .offsets
            .expire(self.offsets_retention, |g| self.coordinator.has_members(g));
        if !expired.is_empty() {
            tracing::info!(
                groups = expired.len(),
                retention = ?self.offsets_retention,
                "Kafka consumer groups without members gave their offsets up"
            );
        }
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

/// What one connection has established.
pub(crate) struct Session {
    /// The address the client dialled: what Metadata and FindCoordinator advertise.
    local: SocketAddr,
    mechanism: Option<String>,
    access: Option<Access>,
    /// Who the client counts as for the per-client caps (`sasl::Authenticated`).
    principal: String,
    /// When its credential expires (Unix seconds): past it, any request but re-authentication
    /// closes the connection, as Kafka brokers do with `connections.max.reauth.ms`.
    expires_at: Option<i64>,
    client_id: String,
}

impl Session {
    /// A new connection's, dialled at `local`: nothing established yet.
    pub(crate) fn new(local: SocketAddr) -> Self {
        Session {
            local,
            mechanism: None,
            access: None,
            principal: String::new(),
            expires_at: None,
            client_id: String::new(),
        }
    }

    pub(crate) fn is_authenticated(&self) -> bool {
        self.access.is_some()
    }
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
        let reauthenticating = matches!(
            decoded.request,
            RequestKind::SaslHandshake(_) | RequestKind::SaslAuthenticate(_)
        );
        if let Some(expired) = session.expires_at.filter(|at| *at <= now_secs())
            && !reauthenticating
        {
            return Outcome {
                response: None,
                header_version: 0,
                close: Some(format!(
                    "the client's credential expired at {expired} (Unix time): a client re-authenticates within the session lifetime SaslAuthenticate gave it (KIP-368), or connects again with a new token"
                )),
            };
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
            RequestKind::DescribeGroups(r) => self.describe_groups(session, r, version),
            RequestKind::ListGroups(r) => self.list_groups(session, r, version),
            other => Outcome {
                response: None,
                header_version: 0,
                close: Some(format!("unexpected request {other:?}")),
            },
        }
    }
}

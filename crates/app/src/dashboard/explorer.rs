//! The explorer view: what is in the event hub, and where each consumer is.
//!
//! - **Hubs and partitions**: from a `hubhost hub`'s admin endpoint (every hub, with bytes
//!   retained), else from the event hub the page's connection names (`$management`: one hub,
//!   read-only — a real Event Hubs namespace lists its hubs only through Azure Resource
//!   Manager).
//! - **Consumer groups**: the hub's own (admin endpoint), and every one that keeps
//!   checkpoints in the store; for those, each partition's owner, checkpoint and lag (the
//!   scale controller's count, `hubhost_checkpoints::backlog`).
//! - **Peek**: a partition's events from a position, read through the admin endpoint, which
//!   reads the partition without a receiver — no consumer group, owner level or checkpoint, so
//!   no consumer notices. Bodies are shown as JSON (pretty), else text, else hex.
//! - **Send**: one event through the SDK, with a partition key or id and properties; only when
//!   the page allows it (see `ExplorerSources::allow_send`).
//!
//! Everything here is data for the page, which puts it in as text (`app.js`). The pure parts
//! (`body_shown`, `consumer_group_view`, `check_send`) are tested below; the rest is I/O.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use hubhost_checkpoints::backlog::unprocessed_events;
use hubhost_checkpoints::{Checkpoint, CheckpointStore, ConsumerGroupKey, PartitionOwnership};
use hubhost_eventhubs::{EventHubTarget, PartitionEnd};

/// The most of a body the page gets (a 1 MB event is shown in part, with its size).
pub const BODY_SHOWN_BYTES: usize = 16 * 1024;
/// The largest body the page may send (the hub's, and Event Hubs Standard's, message limit).
pub const MAX_SEND_BYTES: usize = 1024 * 1024;
/// How long one call to the admin endpoint may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ExplorerError {
    /// The request cannot be served as asked (the page shows the message).
    #[error("{0}")]
    BadRequest(String),
    /// Sending is not allowed from this page.
    #[error(
        "sending is disabled: the page is not served on loopback only (start it with --allow-send to allow it)"
    )]
    SendDisabled,
    /// What the page needs is not configured (e.g. peek without a hubhost hub).
    #[error("{0}")]
    Unavailable(String),
    #[error("the hub: {0}")]
    Hub(String),
    #[error("the checkpoint store: {0}")]
    Checkpoints(#[from] hubhost_checkpoints::CheckpointError),
}

/// Where the explorer reads from.
#[derive(Clone, Default)]
pub struct ExplorerSources {
    /// A `hubhost hub`'s admin endpoint, e.g. `http://127.0.0.1:5380`.
    pub hub_admin: Option<String>,
    /// The token that endpoint requires (`HUBHOST_HUB_ADMIN_TOKEN`).
    pub hub_admin_token: Option<String>,
    /// The page's event hub connection: its namespace, and the hub shown when there is no
    /// admin endpoint; sends go through it (to any hub of the namespace).
    pub event_hub: Option<EventHubTarget>,
    /// The checkpoint store, for consumer groups' owners, checkpoints and lag.
    pub checkpoints: Option<CheckpointStore>,
    /// Whether the page may send: it is served on loopback only, or `--allow-send` said so.
    pub allow_send: bool,
    /// Whether sends may come to another name than loopback's (`--allow-send`, for a page
    /// served beyond loopback on purpose); a send must come from the page itself either way.
    pub any_host: bool,
    /// How long a foreign owner's ownership counts without renewal.
    pub foreign_ownership_expiry: Duration,
    /// The hub the app's functions are triggered by: the one the page opens on.
    pub triggered_hub: Option<String>,
}

/// One partition's span, as the admin endpoint or `$management` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionState {
    pub id: String,
    pub beginning_sequence_number: i64,
    pub last_sequence_number: i64,
    pub last_offset: Option<String>,
    pub last_enqueued_time: Option<DateTime<Utc>>,
    /// Unknown for a real event hub.
    #[serde(default)]
    pub retained_bytes: Option<u64>,
}

impl PartitionState {
    fn end(&self) -> PartitionEnd {
        PartitionEnd {
            partition_id: self.id.clone(),
            beginning_sequence_number: self.beginning_sequence_number,
            last_sequence_number: self.last_sequence_number,
            last_offset: self.last_offset.clone().unwrap_or_default(),
            last_enqueued_time: self.last_enqueued_time,
            is_empty: self.last_sequence_number < 0
                || self.last_sequence_number < self.beginning_sequence_number,
        }
    }
}

/// A hub as the admin endpoint lists it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AdminHub {
    name: String,
    partitions: Vec<PartitionState>,
    consumer_groups: Vec<String>,
    /// The hub's Kafka endpoint's consumer groups (none from an older hub, or without Kafka).
    #[serde(default)]
    kafka_groups: Vec<KafkaGroupShown>,
}

/// A Kafka consumer group, as the hub's admin endpoint reports it: its committed offsets and
/// lag per partition, and its members while it is live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaGroupShown {
    pub name: String,
    pub state: Option<String>,
    pub generation: Option<i32>,
    pub members: Vec<String>,
    pub partitions: Vec<KafkaPartitionShown>,
    pub lag: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaPartitionShown {
    pub partition: i32,
    pub committed: i64,
    pub lag: i64,
}

/// The explorer's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplorerView {
    /// Where the hubs were read from, in words.
    pub source: String,
    /// Whether events can be peeked (a hubhost hub's admin endpoint is there).
    pub can_peek: bool,
    pub can_send: bool,
    pub hubs: Vec<HubShown>,
    /// The hub to show first: the one the functions are triggered by, when it is listed.
    pub opens_on: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HubShown {
    pub name: String,
    pub partitions: Vec<PartitionState>,
    pub consumer_groups: Vec<ConsumerGroupShown>,
    pub kafka_groups: Vec<KafkaGroupShown>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerGroupShown {
    pub name: String,
    /// Whether it keeps checkpoints in the store (else owners and lag are unknown).
    pub checkpointed: bool,
    pub partitions: Vec<PartitionProgress>,
    /// Unprocessed events over every partition.
    pub lag: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionProgress {
    pub id: String,
    /// The active owner, if any.
    pub owner: Option<String>,
    pub checkpoint: Option<i64>,
    pub lag: i64,
}

/// One consumer group of one hub, from its ownerships and checkpoints. Pure.
pub fn consumer_group_view(
    name: &str,
    partitions: &[PartitionState],
    stored: Option<(&[PartitionOwnership], &[Checkpoint])>,
    now: DateTime<Utc>,
    foreign_ownership_expiry: Duration,
) -> ConsumerGroupShown {
    let Some((ownerships, checkpoints)) = stored else {
        return ConsumerGroupShown {
            name: name.to_string(),
            checkpointed: false,
            partitions: Vec::new(),
            lag: 0,
        };
    };
    let progress: Vec<PartitionProgress> = partitions
        .iter()
        .map(|p| {
            let checkpoint = checkpoints.iter().find(|c| c.partition_id == p.id);
            let owner = ownerships
                .iter()
                .find(|o| o.partition_id == p.id && o.is_live(now, foreign_ownership_expiry))
                .map(|o| o.owner_id.clone());
            PartitionProgress {
                id: p.id.clone(),
                owner,
                checkpoint: checkpoint.and_then(|c| c.sequence_number),
                lag: unprocessed_events(&p.end(), checkpoint),
            }
        })
        .collect();
    ConsumerGroupShown {
        name: name.to_string(),
        checkpointed: true,
        lag: progress.iter().map(|p| p.lag).fold(0, i64::saturating_add),
        partitions: progress,
    }
}

/// An event as the page shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventShown {
    pub sequence_number: i64,
    pub offset: String,
    pub enqueued_time: Option<DateTime<Utc>>,
    pub partition_key: Option<String>,
    pub body: BodyShown,
    pub properties: BTreeMap<String, serde_json::Value>,
    pub system_properties: BTreeMap<String, serde_json::Value>,
}

/// A body for reading: JSON pretty-printed when it is JSON, else UTF-8 text, else hex; at most
/// [`BODY_SHOWN_BYTES`] of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BodyShown {
    /// `json`, `text` or `hex`.
    pub kind: &'static str,
    pub shown: String,
    /// The body's whole size in bytes.
    pub bytes: usize,
    /// Whether `shown` is only the start of it.
    pub truncated: bool,
}

/// How a body is shown. Pure.
pub fn body_shown(body: &[u8]) -> BodyShown {
    let bytes = body.len();
    if bytes <= BODY_SHOWN_BYTES
        && let Ok(value) = serde_json::from_slice::<serde_json::Value>(body)
        && (value.is_object() || value.is_array())
    {
        return BodyShown {
            kind: "json",
            shown: serde_json::to_string_pretty(&value).expect("JSON serializes"),
            bytes,
            truncated: false,
        };
    }
    let head = &body[..bytes.min(BODY_SHOWN_BYTES)];
    // Text: valid UTF-8 (a cut in the middle of a character counts) without control
    // characters other than whitespace.
    let text = match std::str::from_utf8(head) {
        Ok(t) => Some(t),
        Err(e) if bytes > BODY_SHOWN_BYTES && e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    match text.filter(|t| !t.chars().any(|c| c.is_control() && !c.is_whitespace())) {
        Some(t) => BodyShown {
            kind: "text",
            shown: t.to_string(),
            bytes,
            truncated: bytes > BODY_SHOWN_BYTES,
        },
        None => {
            let hex_bytes = &body[..bytes.min(BODY_SHOWN_BYTES / 2)];
            BodyShown {
                kind: "hex",
                shown: hex_bytes
                    .chunks(16)
                    .map(|line| {
                        line.iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
                bytes,
                truncated: hex_bytes.len() < bytes,
            }
        }
    }
}

/// An event to send, as the page's form gives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendRequest {
    pub hub: String,
    pub body: String,
    #[serde(default)]
    pub partition_key: Option<String>,
    #[serde(default)]
    pub partition_id: Option<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// What was sent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendReceipt {
    pub hub: String,
    pub bytes: usize,
    pub partition_id: Option<String>,
    pub partition_key: Option<String>,
}

/// Checks a send against the hub it names (its partition ids). Pure.
pub fn check_send(request: &SendRequest, partitions: &[String]) -> Result<(), ExplorerError> {
    let bad = |m: String| Err(ExplorerError::BadRequest(m));
    if request.body.len() > MAX_SEND_BYTES {
        return bad(format!(
            "the body has {} bytes; an event holds at most {MAX_SEND_BYTES}",
            request.body.len()
        ));
    }
    let key = request.partition_key.as_deref().filter(|k| !k.is_empty());
    let id = request.partition_id.as_deref().filter(|p| !p.is_empty());
    if key.is_some() && id.is_some() {
        return bad("give a partition key or a partition id, not both".into());
    }
    if let Some(id) = id
        && !partitions.iter().any(|p| p == id)
    {
        return bad(format!(
            "{} has no partition {id:?} (it has {})",
            request.hub,
            partitions.join(", ")
        ));
    }
    if let Some(key) = key
        && key.len() > 128
    {
        return bad("a partition key is at most 128 characters".into());
    }
    for name in request.properties.keys() {
        if name.is_empty() || name.len() > 256 {
            return bad(format!("property name {name:?} is empty or too long"));
        }
    }
    Ok(())
}

/// What the explorer reads from, with an HTTP client for the admin endpoint.
pub struct Explorer {
    sources: ExplorerSources,
    http: reqwest::Client,
}

impl Explorer {
    pub fn new(sources: ExplorerSources) -> Self {
        let http = reqwest::Client::builder()
            .timeout(ADMIN_TIMEOUT)
            .build()
            .expect("an HTTP client");
        Explorer { sources, http }
    }

    pub fn sources(&self) -> &ExplorerSources {
        &self.sources
    }

    async fn admin_get<T: serde::de::DeserializeOwned>(
        &self,
        admin: &str,
        path: &str,
    ) -> Result<T, ExplorerError> {
        let url = format!("{}{path}", admin.trim_end_matches('/'));
        let mut request = self.http.get(&url);
        if let Some(token) = &self.sources.hub_admin_token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| ExplorerError::Hub(format!("{admin} does not answer: {e}")))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ExplorerError::Hub(format!("{url}: {e}")))?;
        let body: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| ExplorerError::Hub(format!("{url}: {e}")))?;
        if !status.is_success() {
            let message = body["error"]["message"]
                .as_str()
                .unwrap_or("failed")
                .to_string();
            return Err(
                if status == reqwest::StatusCode::BAD_REQUEST
                    || status == reqwest::StatusCode::NOT_FOUND
                {
                    ExplorerError::BadRequest(message)
                } else {
                    ExplorerError::Hub(message)
                },
            );
        }
        serde_json::from_value(body).map_err(|e| ExplorerError::Hub(format!("{url}: {e}")))
    }

    /// The hubs, their partitions and consumer groups (names only), and where they came from.
    async fn hubs(&self) -> Result<(String, Vec<AdminHub>), ExplorerError> {
        if let Some(admin) = &self.sources.hub_admin {
            let hubs: Vec<AdminHub> = self.admin_get(admin, "/hubs").await?;
            return Ok((format!("hubhost hub (admin endpoint {admin})"), hubs));
        }
        let Some(target) = &self.sources.event_hub else {
            return Err(ExplorerError::Unavailable(
                "no event hub is configured (EventHubConnection, or a hubhost hub's admin endpoint)"
                    .into(),
            ));
        };
        let ends = target
            .partition_ends()
            .await
            .map_err(|e| ExplorerError::Hub(e.to_string()))?;
        let partitions = ends
            .into_iter()
            .map(|e| PartitionState {
                id: e.partition_id,
                beginning_sequence_number: e.beginning_sequence_number,
                last_sequence_number: if e.is_empty {
                    -1
                } else {
                    e.last_sequence_number
                },
                last_offset: Some(e.last_offset).filter(|o| !o.is_empty()),
                last_enqueued_time: e.last_enqueued_time,
                retained_bytes: None,
            })
            .collect();
        Ok((
            format!("{target:?} (read-only)"),
            vec![AdminHub {
                name: target.hub.clone(),
                partitions,
                consumer_groups: Vec::new(),
                kafka_groups: Vec::new(),
            }],
        ))
    }

    pub async fn view(&self, now: DateTime<Utc>) -> Result<ExplorerView, ExplorerError> {
        let (source, hubs) = self.hubs().await?;
        let namespace = self.sources.event_hub.as_ref().map(|t| t.namespace.clone());
        let mut shown = Vec::new();
        for hub in hubs {
            // The hub's own consumer groups, and those that keep checkpoints in the store.
            let mut names: Vec<String> = hub.consumer_groups.clone();
            let store = self.sources.checkpoints.as_ref().zip(namespace.as_deref());
            if let Some((store, ns)) = store {
                for group in store.consumer_groups(ns, &hub.name).await? {
                    if !names.iter().any(|n| n.eq_ignore_ascii_case(&group)) {
                        names.push(group);
                    }
                }
            }
            let mut groups = Vec::new();
            for name in names {
                let stored = match store {
                    Some((store, ns)) => {
                        let key = ConsumerGroupKey::new(ns, &hub.name, &name)?;
                        let ownerships = store.list_ownership(&key).await?;
                        let checkpoints = store.list_checkpoints(&key).await?.items;
                        (!ownerships.is_empty() || !checkpoints.is_empty())
                            .then_some((ownerships, checkpoints))
                    }
                    None => None,
                };
                groups.push(consumer_group_view(
                    &name,
                    &hub.partitions,
                    stored.as_ref().map(|(o, c)| (o.as_slice(), c.as_slice())),
                    now,
                    self.sources.foreign_ownership_expiry,
                ));
            }
            shown.push(HubShown {
                name: hub.name,
                partitions: hub.partitions,
                consumer_groups: groups,
                kafka_groups: hub.kafka_groups,
            });
        }
        Ok(ExplorerView {
            source,
            can_peek: self.sources.hub_admin.is_some(),
            can_send: self.sources.allow_send && self.sources.event_hub.is_some(),
            opens_on: self
                .sources
                .triggered_hub
                .clone()
                .filter(|hub| shown.iter().any(|h| &h.name == hub)),
            hubs: shown,
        })
    }

    /// Up to `count` events of a partition from `from` (`earliest`, `latest`, a sequence
    /// number, an RFC 3339 time), through the admin endpoint.
    pub async fn events(
        &self,
        hub: &str,
        partition: &str,
        from: &str,
        count: usize,
    ) -> Result<Vec<EventShown>, ExplorerError> {
        let Some(admin) = &self.sources.hub_admin else {
            return Err(ExplorerError::Unavailable(
                "peeking reads a hubhost hub's partitions through its admin endpoint; a real \
                 event hub is shown read-only, without its events"
                    .into(),
            ));
        };
        let segment = |s: &str| {
            s.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-._$".contains(&b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
        };
        let path = format!(
            "/hubs/{}/partitions/{}/events?from={}&count={count}",
            segment(hub),
            segment(partition),
            segment(from)
        );
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Stored {
            sequence_number: i64,
            offset: String,
            enqueued_time: Option<DateTime<Utc>>,
            partition_key: Option<String>,
            body_base64: String,
            properties: BTreeMap<String, serde_json::Value>,
            system_properties: BTreeMap<String, serde_json::Value>,
        }
        let stored: Vec<Stored> = self.admin_get(admin, &path).await?;
        Ok(stored
            .into_iter()
            .map(|e| EventShown {
                sequence_number: e.sequence_number,
                offset: e.offset,
                enqueued_time: e.enqueued_time,
                partition_key: e.partition_key,
                body: body_shown(
                    &base64::engine::general_purpose::STANDARD
                        .decode(&e.body_base64)
                        .unwrap_or_default(),
                ),
                properties: e.properties,
                system_properties: e.system_properties,
            })
            .collect())
    }

    /// Sends one event to `request.hub` of the page's namespace.
    pub async fn send(&self, request: SendRequest) -> Result<SendReceipt, ExplorerError> {
        if !self.sources.allow_send {
            return Err(ExplorerError::SendDisabled);
        }
        let Some(target) = &self.sources.event_hub else {
            return Err(ExplorerError::Unavailable(
                "no event hub connection to send through".into(),
            ));
        };
        let (_, hubs) = self.hubs().await?;
        let hub = hubs
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(&request.hub))
            .ok_or_else(|| ExplorerError::BadRequest(format!("no event hub {:?}", request.hub)))?;
        let ids: Vec<String> = hub.partitions.iter().map(|p| p.id.clone()).collect();
        check_send(&request, &ids)?;
        let target = target.for_hub(&hub.name);
        let receipt = SendReceipt {
            hub: hub.name.clone(),
            bytes: request.body.len(),
            partition_id: request.partition_id.clone().filter(|p| !p.is_empty()),
            partition_key: request.partition_key.clone().filter(|k| !k.is_empty()),
        };
        let (key, id) = (receipt.partition_key.clone(), receipt.partition_id.clone());
        let sent = hubhost_eventhubs::on_sending_thread(move || async move {
            tokio::time::timeout(Duration::from_secs(20), async move {
                use azure_messaging_eventhubs::EventDataBatchOptions;
                use azure_messaging_eventhubs::models::EventData;
                let producer = target.producer().await.map_err(|e| e.to_string())?;
                let mut event = EventData::builder().with_body(request.body.into_bytes());
                for (name, value) in request.properties {
                    event = event.add_property(name, value);
                }
                let outcome = async {
                    let batch = producer
                        .create_batch(Some(EventDataBatchOptions {
                            partition_key: key,
                            partition_id: id,
                            ..Default::default()
                        }))
                        .await?;
                    batch.try_add_event_data(event.build(), None)?;
                    producer.send_batch(batch, None).await
                }
                .await
                .map_err(|e| e.to_string());
                hubhost_eventhubs::close_quietly("explorer producer", producer.close()).await;
                outcome
            })
            .await
            .unwrap_or_else(|_| Err("the hub did not answer within 20 s".into()))
        })
        .await
        .unwrap_or_else(|| Err("the sending thread failed".into()));
        sent.map(|()| receipt).map_err(ExplorerError::Hub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_shown_as_json_text_or_hex() {
        let json = body_shown(br#"{"homeId":"h1","values":[1,2]}"#);
        assert_eq!(json.kind, "json");
        assert!(
            json.shown.contains("\n  \"homeId\": \"h1\""),
            "{}",
            json.shown
        );
        let text = body_shown("plain <b>text</b> ünïcode".as_bytes());
        assert_eq!(
            (text.kind, text.shown.as_str()),
            ("text", "plain <b>text</b> ünïcode")
        );
        // A JSON scalar is text as it is.
        assert_eq!(body_shown(b"42").kind, "text");
        let binary = body_shown(&[0, 1, 2, 0xff, 0xfe]);
        assert_eq!(
            (binary.kind, binary.shown.as_str()),
            ("hex", "00 01 02 ff fe")
        );
        // A large body: its start, its size, and that it was cut.
        let large = vec![b'a'; 1024 * 1024];
        let shown = body_shown(&large);
        assert_eq!(
            (shown.kind, shown.shown.len(), shown.bytes, shown.truncated),
            ("text", BODY_SHOWN_BYTES, 1024 * 1024, true)
        );
        let mut cut = "é".repeat(BODY_SHOWN_BYTES);
        cut.push('x');
        let shown = body_shown(cut.as_bytes());
        assert_eq!((shown.kind, shown.truncated), ("text", true));
        let large_binary = vec![0u8; 100_000];
        let shown = body_shown(&large_binary);
        assert_eq!((shown.kind, shown.truncated), ("hex", true));
    }

    fn partition(id: &str, beginning: i64, last: i64) -> PartitionState {
        PartitionState {
            id: id.into(),
            beginning_sequence_number: beginning,
            last_sequence_number: last,
            last_offset: None,
            last_enqueued_time: None,
            retained_bytes: Some(0),
        }
    }

    #[test]
    fn a_consumer_group_shows_live_owners_checkpoints_and_lag_never_below_zero() {
        let now = Utc::now();
        let partitions = [
            partition("0", 0, 99),
            partition("1", 0, 9),
            partition("2", 0, -1),
        ];
        let ownerships = vec![
            PartitionOwnership {
                partition_id: "0".into(),
                owner_id: "vm-0".into(),
                etag: hubhost_storage::ETag::new("e0"),
                last_modified: now,
                vouched_expiry: Some(Duration::from_secs(6)),
            },
            PartitionOwnership {
                partition_id: "1".into(),
                owner_id: "gone".into(),
                etag: hubhost_storage::ETag::new("e1"),
                last_modified: now - chrono::Duration::minutes(10),
                vouched_expiry: Some(Duration::from_secs(6)),
            },
        ];
        let checkpoints = vec![
            Checkpoint::new("0", None, 89),
            // Ahead of the end read a moment earlier: nothing left, not -5.
            Checkpoint::new("1", None, 14),
        ];
        let group = consumer_group_view(
            "$default",
            &partitions,
            Some((&ownerships, &checkpoints)),
            now,
            Duration::from_secs(180),
        );
        let lags: Vec<(Option<&str>, Option<i64>, i64)> = group
            .partitions
            .iter()
            .map(|p| (p.owner.as_deref(), p.checkpoint, p.lag))
            .collect();
        assert_eq!(
            lags,
            [
                (Some("vm-0"), Some(89), 10),
                (None, Some(14), 0),
                (None, None, 0)
            ]
        );
        assert_eq!((group.checkpointed, group.lag), (true, 10));
        let unknown = consumer_group_view("audit", &partitions, None, now, Duration::ZERO);
        assert!(!unknown.checkpointed && unknown.partitions.is_empty());
    }

    #[test]
    fn a_send_names_one_existing_partition_at_most_and_fits_one_event() {
        let ids = vec!["0".to_string(), "1".to_string()];
        let request = |key: Option<&str>, id: Option<&str>, body: &str| SendRequest {
            hub: "sensors".into(),
            body: body.into(),
            partition_key: key.map(str::to_string),
            partition_id: id.map(str::to_string),
            properties: BTreeMap::new(),
        };
        assert!(check_send(&request(Some("home-1"), None, "{}"), &ids).is_ok());
        assert!(check_send(&request(None, Some("1"), "{}"), &ids).is_ok());
        assert!(check_send(&request(Some(""), Some(""), "{}"), &ids).is_ok());
        let message = |r| check_send(&r, &ids).unwrap_err().to_string();
        assert!(message(request(Some("k"), Some("0"), "")).contains("not both"));
        assert!(message(request(None, Some("7"), "")).contains("no partition \"7\""));
        assert!(message(request(None, None, &"x".repeat(MAX_SEND_BYTES + 1))).contains("at most"));
    }
}

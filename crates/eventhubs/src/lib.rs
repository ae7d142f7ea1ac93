//! Connecting to an event hub with the Rust SDK (`azure_messaging_eventhubs`), the same way for
//! Azure and for a local hub, from the settings users write for the Functions host:
//!
//! - a connection string in `EventHubConnection` (the binding's `connection` setting). The
//!   Python SDK understands the official emulator's `UseDevelopmentEmulator=true` (plain AMQP on
//!   the endpoint's host and port, 5672 by default); the Rust SDK ignores that key and would
//!   dial TLS on 5671. [`EventHubTarget`] reads it and hands the Rust SDK the matching custom
//!   endpoint, so one connection string works for both SDKs. The key never leaves this module
//!   except inside the connection string given to the SDK, and `Debug` shows no secret.
//! - an identity-based connection: `EventHubConnection__fullyQualifiedNamespace` and the
//!   identity the connection's other settings choose (`hubhost-identity`), signed in with Entra
//!   ID. A namespace `localhost:PORT` (or `127.0.0.1:PORT`) is a local hub, reached over plain
//!   AMQP: `hubhost hub` accepts Entra ID tokens from an issuer it is told to trust.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use azure_core::credentials::TokenCredential;
use azure_messaging_eventhubs::{BufferedProducerClient, ConsumerClient, ProducerClient};

use hubhost_identity::{IdentityChoice, IdentityError};
use hubhost_storage::connection::connection_string_parts;

/// The connection string of the official emulator, which `hubhost hub` accepts by default.
pub const EMULATOR_CONNECTION: &str = "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;";

/// The plain-AMQP port of a development emulator when the endpoint names none.
const EMULATOR_PORT: u16 = 5672;

#[derive(Debug, thiserror::Error)]
pub enum EventHubsError {
    #[error(
        "the Event Hubs connection string is not usable: {0} (expected Endpoint=sb://…;SharedAccessKeyName=…;SharedAccessKey=…)"
    )]
    BadConnectionString(&'static str),
    #[error("reading the partitions of {hub} at {namespace} failed: {message}")]
    Properties {
        hub: String,
        namespace: String,
        message: String,
    },
    #[error(
        "no Event Hubs connection: set {setting} to a connection string, or \
         {setting}__fullyQualifiedNamespace for an identity-based connection"
    )]
    NotConfigured { setting: String },
    #[error(
        "the fully qualified namespace {0:?} is not a host name (e.g. myns.servicebus.windows.net, or localhost:5672 for a local hub)"
    )]
    BadNamespace(String),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("signing in to Entra ID as {identity} failed: {reason}")]
    SignIn { identity: String, reason: String },
    #[error("could not open the event hub {hub} at {namespace}: {source}")]
    Open {
        hub: String,
        namespace: String,
        #[source]
        source: Box<azure_messaging_eventhubs::EventHubsError>,
    },
}

/// What a buffered producer's batches came to: events the event hub accepted, events it did
/// not (after the SDK's retries), and the first error.
#[derive(Debug, Default)]
pub struct SendOutcomes {
    pub sent: AtomicU64,
    pub failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl SendOutcomes {
    fn record_failure(&self, events: usize, error: String) {
        self.failed.fetch_add(events as u64, Ordering::Relaxed);
        let mut first = self.first_error.lock().expect("outcomes lock");
        if first.is_none() {
            tracing::warn!(events, %error, "a batch was not accepted");
            *first = Some(error);
        }
    }

    pub fn first_error(&self) -> Option<String> {
        self.first_error.lock().expect("outcomes lock").clone()
    }
}

/// One partition's end, as `$management` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionEnd {
    pub partition_id: String,
    pub beginning_sequence_number: i64,
    /// -1 for a partition that never had an event.
    pub last_sequence_number: i64,
    pub last_offset: String,
    pub last_enqueued_time: Option<chrono::DateTime<chrono::Utc>>,
    pub is_empty: bool,
}

/// Runs `work` — anything that sends through the SDK — on a tokio runtime of its own with a
/// single thread, and returns what it returned (`None` if it panicked).
///
/// Why: the SDK's AMQP layer (`fe2o3-amqp` 0.16, which `azure_messaging_eventhubs` 0.16 pins)
/// hands a transfer to its session task *before* it records the delivery as awaiting an
/// outcome. On a multi-threaded runtime the session, the connection and a fast peer can settle
/// the delivery in that gap; the settlement finds nothing to complete and the send waits
/// forever (fixed upstream in fe2o3-amqp 0.18.2, which the SDK does not use yet). Against a
/// hub on loopback about one `hubhost demo` in ten hung this way. When the sending task, the
/// session and the connection share one thread, the sending task runs to its next `.await` —
/// past the bookkeeping — before the session can even read the transfer, so the gap is gone.
pub async fn on_sending_thread<F, Fut, T>(work: F) -> Option<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
    T: Send + 'static,
{
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("hubhost-sender".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread tokio runtime");
            let _ = done.send(runtime.block_on(work()));
        })
        .expect("a thread for sending");
    result.await.ok()
}

/// How long closing an SDK client may take. Closing is a courtesy to the service (it would
/// time the link out anyway), and the SDK's close can wait forever for a peer's answer: the
/// demo once hung at start-up in `ProducerClient::close` after its two sends had been
/// acknowledged. So every close is bounded, and a stalled one is abandoned (the client is
/// dropped, which drops its connection).
pub const CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Closes an SDK client within [`CLOSE_TIMEOUT`]; a close that fails or stalls is logged at
/// debug level and otherwise ignored, since nothing waits on it.
pub async fn close_quietly<T, E: fmt::Display>(
    what: &str,
    close: impl std::future::Future<Output = Result<T, E>>,
) {
    match tokio::time::timeout(CLOSE_TIMEOUT, close).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!(client = what, error = %e, "closing failed; dropped"),
        Err(_) => tracing::debug!(client = what, "closing stalled; dropped"),
    }
}

/// Per attempt; the SDK can stall on a fresh connection (see `partition_ends`). Generous
/// because a hub that has just taken a million events answers its first management calls
/// slowly: three 5 s attempts once all ran out right after `bench pool`'s prefill.
const PROPERTIES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(8);
const PROPERTIES_ATTEMPTS: u32 = 5;

/// Opens an SDK client from its builder: the emulator's custom endpoint when there is one,
/// then the connection string or the namespace and credential, and the hub. A macro because
/// the SDK's three builders share no trait (the consumer's takes the hub's name by value: the
/// `owned` form).
macro_rules! open_client {
    ($target:expr, $builder:expr) => {
        open_client!(@open $target, $builder, as_str)
    };
    (owned $target:expr, $builder:expr) => {
        open_client!(@open $target, $builder, clone)
    };
    (@open $target:expr, $builder:expr, $hub:ident) => {{
        let target = $target;
        let mut builder = $builder;
        if let Some(endpoint) = &target.custom_endpoint {
            builder = builder.with_custom_endpoint(endpoint.clone());
        }
        match &target.auth {
            Auth::ConnectionString(connection_string) => {
                builder
                    .open_with_connection_string(connection_string, Some(&target.hub))
                    .await
            }
            Auth::Identity {
                credential,
                identity,
            } => {
                // Sign in first: the SDK reports a failed sign-in only as "Error authorizing",
                // without the identity service's reason. The credential caches the token, so
                // the SDK's own request for it costs nothing more.
                credential
                    .get_token(&[hubhost_identity::EVENT_HUBS_SCOPE], None)
                    .await
                    .map_err(|e| EventHubsError::SignIn {
                        identity: identity.describe(),
                        reason: e.to_string(),
                    })?;
                builder
                    .open(&target.namespace, target.hub.$hub(), credential.clone())
                    .await
            }
        }
        .map_err(|e| target.open_error(e))
    }};
}

/// How a target signs in.
#[derive(Clone)]
enum Auth {
    /// A connection string with a key or a SAS.
    ConnectionString(String),
    /// Entra ID tokens for `identity`.
    Identity {
        identity: IdentityChoice,
        credential: Arc<dyn TokenCredential>,
    },
}

/// Where an event hub is and how to reach it.
#[derive(Clone)]
pub struct EventHubTarget {
    auth: Auth,
    /// `myns.servicebus.windows.net`, or `localhost` for an emulator.
    pub namespace: String,
    pub hub: String,
    /// `amqp://host:port` for a development emulator; `None` for Azure.
    pub custom_endpoint: Option<String>,
}

impl fmt::Debug for EventHubTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "event hub {} at {}", self.hub, self.namespace)?;
        if let Some(endpoint) = &self.custom_endpoint {
            write!(f, " (emulator, {endpoint})")?;
        }
        if let Auth::Identity { identity, .. } = &self.auth {
            write!(f, " as {}", identity.describe())?;
        }
        Ok(())
    }
}

impl EventHubTarget {
    /// Reads `Endpoint` (and `UseDevelopmentEmulator`) of a connection string. The hub name is
    /// the connection string's `EntityPath` when it has one, whatever `hub` says: the
    /// extension's rule (`NormalizeEventHubName`), which Microsoft's binding reference states as
    /// "that value overrides this property at runtime".
    pub fn parse(connection_string: &str, hub: Option<&str>) -> Result<Self, EventHubsError> {
        let mut endpoint = None;
        let mut emulator = false;
        let mut entity_path = None;
        let mut has_key = false;
        for part in connection_string_parts(connection_string) {
            let (key, value) =
                part.ok_or(EventHubsError::BadConnectionString("a part has no '='"))?;
            match key.as_str() {
                "endpoint" => endpoint = Some(value),
                "usedevelopmentemulator" => emulator = value.eq_ignore_ascii_case("true"),
                "entitypath" => entity_path = Some(value),
                "sharedaccesskey" | "sharedaccesssignature" => has_key = !value.is_empty(),
                _ => {}
            }
        }
        let endpoint = endpoint.ok_or(EventHubsError::BadConnectionString("no Endpoint"))?;
        if !has_key {
            return Err(EventHubsError::BadConnectionString(
                "no SharedAccessKey or SharedAccessSignature",
            ));
        }
        let authority = endpoint
            .split_once("://")
            .map_or(endpoint, |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default();
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (
                host,
                Some(
                    port.parse::<u16>()
                        .map_err(|_| EventHubsError::BadConnectionString("bad Endpoint port"))?,
                ),
            ),
            None => (authority, None),
        };
        if host.is_empty() {
            return Err(EventHubsError::BadConnectionString("Endpoint has no host"));
        }
        let hub = entity_path
            .filter(|h| !h.is_empty())
            .or(hub)
            .filter(|h| !h.is_empty())
            .ok_or(EventHubsError::BadConnectionString(
                "no event hub name (give one, or EntityPath)",
            ))?;
        // `localhost` may resolve to ::1 first, where a hub bound to 127.0.0.1 is not.
        let dial_host = if host.eq_ignore_ascii_case("localhost") {
            "127.0.0.1"
        } else {
            host
        };
        Ok(EventHubTarget {
            auth: Auth::ConnectionString(connection_string.to_string()),
            namespace: host.to_ascii_lowercase(),
            hub: hub.to_string(),
            custom_endpoint: emulator
                .then(|| format!("amqp://{dial_host}:{}", port.unwrap_or(EMULATOR_PORT))),
        })
    }

    /// An identity-based connection to `fully_qualified_namespace` (the host's
    /// `__fullyQualifiedNamespace` setting), signed in as `identity`. `localhost:PORT` or
    /// `127.0.0.1:PORT` is a local hub over plain AMQP (5672 without a port); any other name is
    /// a namespace in Azure, over TLS.
    pub fn with_identity(
        fully_qualified_namespace: &str,
        hub: &str,
        identity: IdentityChoice,
    ) -> Result<Self, EventHubsError> {
        let name = fully_qualified_namespace.trim();
        let authority = name
            .split_once("://")
            .map_or(name, |(_, rest)| rest)
            .trim_end_matches('/');
        let bad = || EventHubsError::BadNamespace(name.to_string());
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port.parse::<u16>().map_err(|_| bad())?)),
            None => (authority, None),
        };
        if host.is_empty() || host.contains(['/', '?', '#', '@', ';', ' ']) {
            return Err(bad());
        }
        if hub.trim().is_empty() {
            return Err(EventHubsError::BadConnectionString("no event hub name"));
        }
        let local = host.eq_ignore_ascii_case("localhost") || host == "127.0.0.1";
        let credential = identity.credential()?;
        Ok(EventHubTarget {
            auth: Auth::Identity {
                identity,
                credential,
            },
            namespace: if local {
                "localhost".into()
            } else {
                host.to_ascii_lowercase()
            },
            hub: hub.to_string(),
            custom_endpoint: local
                .then(|| format!("amqp://127.0.0.1:{}", port.unwrap_or(EMULATOR_PORT))),
        })
    }

    /// The event hub `hub` through the connection the Functions host would use for the
    /// binding setting `setting`: `{setting}` holding a connection string, else
    /// `{setting}__fullyQualifiedNamespace` with the identity the connection's settings choose.
    /// `get` looks an app setting up by name.
    pub fn from_settings(
        setting: &str,
        hub: &str,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, EventHubsError> {
        let get = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        if let Some(connection_string) = get(setting) {
            return EventHubTarget::parse(&connection_string, Some(hub));
        }
        match get(&format!("{setting}__fullyQualifiedNamespace")) {
            Some(namespace) => EventHubTarget::with_identity(
                &namespace,
                hub,
                IdentityChoice::from_settings(setting, get)?,
            ),
            None => Err(EventHubsError::NotConfigured {
                setting: setting.to_string(),
            }),
        }
    }

    /// Another hub of the same namespace, reached the same way.
    pub fn for_hub(&self, hub: &str) -> EventHubTarget {
        EventHubTarget {
            hub: hub.to_string(),
            ..self.clone()
        }
    }

    fn open_error(&self, source: azure_messaging_eventhubs::EventHubsError) -> EventHubsError {
        EventHubsError::Open {
            hub: self.hub.clone(),
            namespace: self.namespace.clone(),
            source: Box::new(source),
        }
    }

    pub async fn producer(&self) -> Result<ProducerClient, EventHubsError> {
        open_client!(self, ProducerClient::builder())
    }

    /// A producer that batches per partition in the background (hashing partition keys the
    /// way the service does, and keeping the key on each event); every batch's outcome is
    /// counted in `outcomes`. Opening reads the hub's partitions over `$management` on a fresh
    /// connection, so it is bounded and retried like [`EventHubTarget::partition_ends`].
    pub async fn buffered_producer(
        &self,
        max_wait: std::time::Duration,
        outcomes: Arc<SendOutcomes>,
    ) -> Result<BufferedProducerClient, EventHubsError> {
        let mut last_error = String::new();
        for attempt in 1..=PROPERTIES_ATTEMPTS {
            let opened = tokio::time::timeout(
                PROPERTIES_TIMEOUT,
                self.open_buffered_producer(max_wait, outcomes.clone()),
            )
            .await;
            match opened {
                Ok(Ok(producer)) => return Ok(producer),
                Ok(Err(e @ EventHubsError::BadConnectionString(_))) => return Err(e),
                Ok(Err(e)) => last_error = e.to_string(),
                Err(_) => {
                    last_error = format!("no answer within {PROPERTIES_TIMEOUT:?}");
                    tracing::debug!(attempt, hub = %self.hub, "opening the buffered producer stalled; retrying on a new connection");
                }
            }
        }
        Err(EventHubsError::Properties {
            hub: self.hub.clone(),
            namespace: self.namespace.clone(),
            message: last_error,
        })
    }

    async fn open_buffered_producer(
        &self,
        max_wait: std::time::Duration,
        outcomes: Arc<SendOutcomes>,
    ) -> Result<BufferedProducerClient, EventHubsError> {
        let failures = outcomes.clone();
        let builder = BufferedProducerClient::builder()
            .with_application_id("hubhost".into())
            .with_max_wait_time(
                azure_core::time::Duration::try_from(max_wait)
                    .unwrap_or(azure_core::time::Duration::seconds(1)),
            )
            .with_on_send_succeeded(move |context| {
                outcomes
                    .sent
                    .fetch_add(context.events.len() as u64, Ordering::Relaxed);
                async {}
            })
            .with_on_send_failed(move |context| {
                failures.record_failure(context.events.len(), context.error.to_string());
                async {}
            });
        open_client!(self, builder)
    }

    /// Every partition's end (last enqueued sequence number, offset, time), on a connection of
    /// its own. Each attempt runs on a sending thread ([`on_sending_thread`]: management calls
    /// send through the SDK) and is bounded in time there, then retried on a new connection:
    /// the Rust SDK (0.16, over fe2o3-amqp 0.16) drops its `$cbs` links without waiting for the
    /// peer's detach, and when the reply comes back quickly (a loopback hub) the client's
    /// session fails with `unattached-handle`; it recovers, but now and then a management call
    /// then never returns — on the multi-threaded runtime five attempts in a row once did.
    pub async fn partition_ends(&self) -> Result<Vec<PartitionEnd>, EventHubsError> {
        let mut last_error = String::new();
        for attempt in 1..=PROPERTIES_ATTEMPTS {
            let target = self.clone();
            let outcome = on_sending_thread(move || async move {
                tokio::time::timeout(PROPERTIES_TIMEOUT, target.read_partition_ends()).await
            })
            .await;
            match outcome {
                Some(Ok(Ok(ends))) => return Ok(ends),
                Some(Ok(Err(e))) => last_error = e,
                Some(Err(_)) => {
                    last_error = format!("no answer within {PROPERTIES_TIMEOUT:?}");
                    tracing::debug!(attempt, hub = %self.hub, "partition properties stalled; retrying on a new connection");
                }
                None => last_error = "the reading thread panicked".into(),
            }
        }
        Err(EventHubsError::Properties {
            hub: self.hub.clone(),
            namespace: self.namespace.clone(),
            message: last_error,
        })
    }

    /// Each partition's last enqueued sequence number (-1: none yet), for lag figures.
    pub async fn last_enqueued(
        &self,
    ) -> Result<std::collections::BTreeMap<String, i64>, EventHubsError> {
        Ok(self
            .partition_ends()
            .await?
            .into_iter()
            .map(|e| (e.partition_id, e.last_sequence_number))
            .collect())
    }

    async fn read_partition_ends(&self) -> Result<Vec<PartitionEnd>, String> {
        let producer = self.producer().await.map_err(|e| e.to_string())?;
        let hub = producer
            .get_eventhub_properties()
            .await
            .map_err(|e| error_chain(&e))?;
        let mut ends = Vec::with_capacity(hub.partition_ids.len());
        for id in hub.partition_ids {
            let p = producer
                .get_partition_properties(&id)
                .await
                .map_err(|e| e.to_string())?;
            ends.push(PartitionEnd {
                partition_id: id,
                beginning_sequence_number: p.beginning_sequence_number,
                last_sequence_number: p.last_enqueued_sequence_number,
                last_offset: p.last_enqueued_offset,
                last_enqueued_time: p.last_enqueued_time_utc.map(chrono::DateTime::from),
                is_empty: p.is_empty,
            });
        }
        close_quietly("producer", producer.close()).await;
        Ok(ends)
    }

    /// (sequence number, offset) of the first event at `location` (inclusive), if one arrives
    /// within a few seconds. Each attempt uses a connection of its own, for the reason given
    /// at [`EventHubTarget::partition_ends`] (opening a receiver does not recover either).
    pub async fn first_event(
        &self,
        consumer_group: &str,
        partition: &str,
        location: azure_messaging_eventhubs::StartLocation,
    ) -> Result<Option<(i64, String)>, EventHubsError> {
        use futures::StreamExt;
        let mut last_error = String::new();
        for _ in 0..PROPERTIES_ATTEMPTS {
            let consumer = self.consumer(consumer_group).await?;
            let options = azure_messaging_eventhubs::OpenReceiverOptions {
                start_position: Some(azure_messaging_eventhubs::StartPosition {
                    location: location.clone(),
                    inclusive: true,
                }),
                prefetch: Some(1),
                ..Default::default()
            };
            let receiver = match consumer
                .open_receiver_on_partition(partition.to_string(), Some(options))
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    last_error = e.to_string();
                    close_quietly("consumer", consumer.close()).await;
                    continue;
                }
            };
            let first = {
                let mut stream = Box::pin(receiver.stream_events());
                match tokio::time::timeout(PROPERTIES_TIMEOUT, stream.next()).await {
                    Ok(Some(Ok(event))) => Ok(Some((
                        event.sequence_number().unwrap_or(-1),
                        event.offset().clone().unwrap_or_default(),
                    ))),
                    Ok(Some(Err(e))) => Err(e.to_string()),
                    Ok(None) | Err(_) => Ok(None),
                }
            };
            close_quietly("receiver", receiver.close()).await;
            close_quietly("consumer", consumer.close()).await;
            match first {
                Ok(first) => return Ok(first),
                Err(e) => last_error = e,
            }
        }
        Err(EventHubsError::Properties {
            hub: self.hub.clone(),
            namespace: self.namespace.clone(),
            message: format!("partition {partition}: {last_error}"),
        })
    }

    pub async fn consumer(&self, consumer_group: &str) -> Result<ConsumerClient, EventHubsError> {
        open_client!(
            owned self,
            ConsumerClient::builder()
                .with_application_id("hubhost".into())
                .with_consumer_group(consumer_group.to_string())
        )
    }
}

/// The app setting holding the Event Hubs connection string (function.json `connection`).
pub const EVENTHUB_CONNECTION_SETTING: &str = "EventHubConnection";

/// An error with the messages of its sources that say more than it does: the SDK wraps the
/// service's reason (a 401's "the token's signature does not match the key …") in errors
/// whose own text only says "Error authorizing management path".
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let message = inner.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = inner.source();
    }
    text
}

/// The fully qualified namespace of the Event Hubs connection setting: the host of its
/// `Endpoint=sb://…/`, or of `EventHubConnection__fullyQualifiedNamespace` (`localhost` for a
/// local hub). Only the host is taken; the key never leaves this function.
pub fn eventhub_namespace(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let endpoint = match env(EVENTHUB_CONNECTION_SETTING) {
        Some(conn) => connection_string_parts(&conn)
            .flatten()
            .find_map(|(k, v)| (k == "endpoint").then(|| v.to_string()))?,
        None => env(&format!(
            "{EVENTHUB_CONNECTION_SETTING}__fullyQualifiedNamespace"
        ))?,
    };
    let host = endpoint
        .split_once("://")
        .map_or(endpoint.as_str(), |(_, rest)| rest)
        .split(['/', ':'])
        .next()?;
    match host {
        "" => None,
        "127.0.0.1" => Some("localhost".into()),
        host => Some(host.to_string()),
    }
}

/// The event hub's partition ends, shared by the pumps of one consumer: when many pumps ask at
/// once (every idle partition checks whether its receiver stalled), one read answers them all.
#[derive(Default)]
pub struct PartitionEndsCache(tokio::sync::Mutex<Option<(std::time::Instant, Vec<PartitionEnd>)>>);

impl PartitionEndsCache {
    /// The ends read within `max_age`, else read now; `None` if the hub did not answer.
    pub async fn get(
        &self,
        target: &EventHubTarget,
        max_age: std::time::Duration,
    ) -> Option<Vec<PartitionEnd>> {
        let mut cached = self.0.lock().await;
        if let Some((at, ends)) = cached.as_ref()
            && at.elapsed() <= max_age
        {
            return Some(ends.clone());
        }
        match target.partition_ends().await {
            Ok(ends) => {
                *cached = Some((std::time::Instant::now(), ends.clone()));
                Some(ends)
            }
            Err(e) => {
                tracing::debug!(error = %e, "partition ends unavailable");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_emulator_string_becomes_a_plain_amqp_custom_endpoint() {
        let t = EventHubTarget::parse(EMULATOR_CONNECTION, Some("sensors")).unwrap();
        assert_eq!(t.namespace, "localhost");
        assert_eq!(t.hub, "sensors");
        assert_eq!(t.custom_endpoint.as_deref(), Some("amqp://127.0.0.1:5672"));
        let t = EventHubTarget::parse(
            "Endpoint=sb://localhost:6000;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true",
            Some("h"),
        )
        .unwrap();
        assert_eq!(t.custom_endpoint.as_deref(), Some("amqp://127.0.0.1:6000"));
    }

    #[test]
    fn an_azure_string_keeps_the_sdk_defaults_and_its_entity_path() {
        let t = EventHubTarget::parse(
            "Endpoint=sb://MyNs.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=secret;EntityPath=orders",
            None,
        )
        .unwrap();
        assert_eq!(t.namespace, "myns.servicebus.windows.net");
        assert_eq!(t.hub, "orders");
        assert_eq!(t.custom_endpoint, None);
        assert!(!format!("{t:?}").contains("secret"));
        // The extension's rule: EntityPath overrides the binding's eventHubName.
        let t = EventHubTarget::parse(
            "Endpoint=sb://MyNs.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=secret;EntityPath=orders",
            Some("other"),
        )
        .unwrap();
        assert_eq!(t.hub, "orders");
    }

    #[test]
    fn unusable_strings_are_named_without_the_key() {
        for (text, hub) in [
            ("SharedAccessKeyName=k;SharedAccessKey=topsecret", Some("h")),
            ("Endpoint=sb://x;SharedAccessKeyName=k", Some("h")),
            ("Endpoint=sb://x;SharedAccessKey=topsecret", None),
            ("Endpoint=sb://x:port;SharedAccessKey=topsecret", Some("h")),
            ("Endpoint=sb://x;topsecret", Some("h")),
        ] {
            let e = EventHubTarget::parse(text, hub).unwrap_err().to_string();
            assert!(e.contains("not usable"), "{e}");
            assert!(!e.contains("topsecret"), "{e}");
        }
    }
    #[test]
    fn the_namespace_is_the_host_of_the_eventhub_endpoint() {
        let env = env_of(&[(
            "EventHubConnection",
            "Endpoint=sb://MyNs.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=secret",
        )]);
        assert_eq!(
            eventhub_namespace(&env).as_deref(),
            Some("MyNs.servicebus.windows.net")
        );
        let env = env_of(&[(
            "EventHubConnection",
            "Endpoint=sb://localhost:5672;UseDevelopmentEmulator=true",
        )]);
        assert_eq!(eventhub_namespace(&env).as_deref(), Some("localhost"));
        assert_eq!(eventhub_namespace(env_of(&[])), None);
    }

    #[test]
    fn an_identity_based_connection_is_its_namespace_and_the_connections_identity() {
        let t = EventHubTarget::from_settings(
            "EventHubConnection",
            "sensors",
            env_of(&[
                (
                    "EventHubConnection__fullyQualifiedNamespace",
                    "MyNs.servicebus.windows.net",
                ),
                ("EventHubConnection__credential", "managedidentity"),
                ("EventHubConnection__clientId", "client-7"),
            ]),
        )
        .unwrap();
        assert_eq!(t.namespace, "myns.servicebus.windows.net");
        assert_eq!(t.custom_endpoint, None);
        let shown = format!("{t:?}");
        assert!(
            shown.contains("user-assigned managed identity client-7"),
            "{shown}"
        );
        // A local hub: plain AMQP on its port.
        let t = EventHubTarget::with_identity("localhost:6001", "sensors", IdentityChoice::Default)
            .unwrap();
        assert_eq!(t.namespace, "localhost");
        assert_eq!(t.custom_endpoint.as_deref(), Some("amqp://127.0.0.1:6001"));
        // A connection string wins over the namespace, as in the host.
        let t = EventHubTarget::from_settings(
            "EventHubConnection",
            "sensors",
            env_of(&[
                ("EventHubConnection", EMULATOR_CONNECTION),
                (
                    "EventHubConnection__fullyQualifiedNamespace",
                    "myns.servicebus.windows.net",
                ),
            ]),
        )
        .unwrap();
        assert_eq!(t.namespace, "localhost");
        assert!(!format!("{t:?}").contains(" as "));
    }

    #[test]
    fn a_missing_or_malformed_identity_connection_is_named() {
        let e = EventHubTarget::from_settings("Orders", "o", env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Orders__fullyQualifiedNamespace"), "{e}");
        for bad in ["myns/x", "myns:port", ":5672", "a b"] {
            let e = EventHubTarget::with_identity(bad, "h", IdentityChoice::Default)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a host name"), "{bad}: {e}");
        }
        let e = EventHubTarget::from_settings(
            "EventHubConnection",
            "h",
            env_of(&[
                (
                    "EventHubConnection__fullyQualifiedNamespace",
                    "myns.servicebus.windows.net",
                ),
                ("EventHubConnection__credential", "password"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("EventHubConnection__credential"), "{e}");
        assert_eq!(
            eventhub_namespace(env_of(&[(
                "EventHubConnection__fullyQualifiedNamespace",
                "127.0.0.1:5672"
            )]))
            .as_deref(),
            Some("localhost")
        );
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }
}

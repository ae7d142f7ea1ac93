//! `hubhost hub`: a local Event Hubs namespace that the official SDKs connect to unchanged, over
//! plain AMQP 1.0 on 127.0.0.1:5672, as the official (Docker-only) emulator does.
//!
//! The data flows: a TCP connection → `server` (SASL, sessions, links) → either `requests`
//! (`$cbs` put-token, `$management` reads) or `links` (a producer's link appends to a
//! `Partition`; a consumer's link reads from one) → `log` (segment files or memory). This module
//! holds the namespace's configuration and its shared state: hubs, partitions, and which
//! receivers hold a partition (owner levels).

pub mod config;
pub(crate) mod encoding;
pub mod entra;
pub mod filter;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod inbound;
pub(crate) mod links;
pub mod log;
pub mod partition_key;
pub(crate) mod received;
pub(crate) mod requests;
pub mod sas;
pub(crate) mod server;
pub(crate) mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

pub use config::{ClientLimits, HubConfig, HubSpec};
use log::{LogError, LogOptions, PartitionLog};
use sas::SharedAccessKey;

/// The largest event (or batch) a send may carry, as on Event Hubs Standard.
pub const MAX_MESSAGE_BYTES: u64 = 1024 * 1024;

/// The namespace: every hub, by lowercased name (Event Hubs names are case-insensitive).
pub struct Namespace {
    pub hubs: HashMap<String, Arc<Hub>>,
    pub keys: Vec<SharedAccessKey>,
    pub trusted_issuer: Option<entra::TrustedIssuer>,
    pub retention: Duration,
}

pub struct Hub {
    pub name: String,
    pub created_ms: i64,
    pub partitions: Vec<Arc<Partition>>,
    /// Lowercased consumer group names.
    pub consumer_groups: Vec<String>,
    round_robin: AtomicUsize,
}

pub struct Partition {
    pub id: String,
    log: Mutex<PartitionLog>,
    /// The next sequence number to be assigned; readers wait on it.
    appended: watch::Sender<i64>,
    receivers: Mutex<HashMap<String, Vec<ActiveReceiver>>>,
}

/// A receiver link reading a partition for a consumer group.
struct ActiveReceiver {
    id: u64,
    owner_level: Option<i64>,
    stop: watch::Sender<Option<String>>,
}

/// Why a receiver may not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiverRefused {
    #[error(
        "a receiver with owner level {existing} holds partition {partition} of consumer group {consumer_group}; owner level {requested:?} may not take it"
    )]
    HigherOwnerLevel {
        partition: String,
        consumer_group: String,
        existing: i64,
        requested: Option<i64>,
    },
}

/// A receiver's registration; dropping it removes the receiver.
pub struct ReceiverLease {
    partition: Arc<Partition>,
    consumer_group: String,
    id: u64,
    /// Set with the reason when a newer owner takes the partition.
    pub stopped: watch::Receiver<Option<String>>,
}

impl Drop for ReceiverLease {
    fn drop(&mut self) {
        let mut receivers = self.partition.receivers.lock().expect("receivers lock");
        if let Some(list) = receivers.get_mut(&self.consumer_group) {
            list.retain(|r| r.id != self.id);
        }
    }
}

static NEXT_RECEIVER_ID: AtomicU64 = AtomicU64::new(1);

impl Namespace {
    /// Opens every partition's log (recovering torn tails) under the configured data directory.
    pub fn open(config: &HubConfig) -> Result<Self, LogError> {
        let created_ms = chrono::Utc::now().timestamp_millis();
        let mut hubs = HashMap::new();
        for spec in &config.hubs {
            let mut partitions = Vec::new();
            for p in 0..spec.partitions {
                let dir = config
                    .data_dir
                    .as_ref()
                    .map(|d| d.join(spec.name.to_ascii_lowercase()).join(p.to_string()));
                let log = PartitionLog::open(LogOptions {
                    dir,
                    segment_bytes: config.segment_bytes,
                    cache_bytes: config.cache_bytes,
                    fsync: config.fsync,
                })?;
                let next = log.summary().next_sequence;
                partitions.push(Arc::new(Partition {
                    id: p.to_string(),
                    log: Mutex::new(log),
                    appended: watch::Sender::new(next),
                    receivers: Mutex::new(HashMap::new()),
                }));
            }
            let hub = Hub {
                name: spec.name.clone(),
                created_ms,
                partitions,
                consumer_groups: spec
                    .consumer_groups
                    .iter()
                    .map(|c| c.to_ascii_lowercase())
                    .collect(),
                round_robin: AtomicUsize::new(0),
            };
            hubs.insert(spec.name.to_ascii_lowercase(), Arc::new(hub));
        }
        Ok(Namespace {
            hubs,
            keys: config.keys.clone(),
            trusted_issuer: config.trusted_issuer.clone(),
            retention: config.retention,
        })
    }

    pub fn hub(&self, name: &str) -> Option<&Arc<Hub>> {
        self.hubs.get(&name.to_ascii_lowercase())
    }

    /// Deletes what has outlived the retention period, in every partition.
    pub fn enforce_retention(&self) -> Result<u64, LogError> {
        let cutoff = chrono::Utc::now().timestamp_millis() - self.retention.as_millis() as i64;
        let mut dropped = 0;
        for hub in self.hubs.values() {
            for partition in &hub.partitions {
                dropped += partition
                    .log
                    .lock()
                    .expect("log lock")
                    .enforce_retention(cutoff)?;
            }
        }
        Ok(dropped)
    }
}

impl Hub {
    pub fn partition(&self, id: &str) -> Option<&Arc<Partition>> {
        self.partitions.iter().find(|p| p.id == id)
    }

    pub fn has_consumer_group(&self, name: &str) -> bool {
        self.consumer_groups.contains(&name.to_ascii_lowercase())
    }

    /// Where a send without a partition goes: by partition key when it has one (the same key
    /// always lands on the same partition), else round-robin.
    pub fn route(&self, partition_key: Option<&str>) -> &Arc<Partition> {
        let index = match partition_key {
            Some(key) => partition_key::partition_for_key(key, self.partitions.len()),
            None => self.round_robin.fetch_add(1, Ordering::Relaxed) % self.partitions.len(),
        };
        &self.partitions[index]
    }
}

impl Partition {
    /// Appends encoded messages, enqueued now; returns each one's (sequence, offset).
    pub fn append(&self, payloads: Vec<Bytes>) -> Result<Vec<(i64, i64)>, LogError> {
        let now = chrono::Utc::now().timestamp_millis();
        let mut log = self.log.lock().expect("log lock");
        let placed = log.append(payloads.into_iter().map(|p| (p, now)).collect())?;
        self.appended.send_replace(log.summary().next_sequence);
        Ok(placed)
    }

    pub fn summary(&self) -> log::LogSummary {
        self.log.lock().expect("log lock").summary()
    }

    pub fn resolve(&self, seek: log::Seek) -> Result<i64, LogError> {
        self.log.lock().expect("log lock").resolve(seek)
    }

    pub fn read(&self, from: i64, max: usize) -> Result<Vec<log::StoredEvent>, LogError> {
        self.log.lock().expect("log lock").read(from, max)
    }

    /// Watches the next sequence number to be assigned.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.appended.subscribe()
    }

    /// Registers a receiver, as Event Hubs does for owner levels (epochs): a receiver with an
    /// owner level displaces every receiver with an equal or lower level and every receiver
    /// without one; it is refused while a higher level holds the partition; a receiver without an
    /// owner level is refused while any owner-level receiver holds it.
    pub fn open_receiver(
        self: &Arc<Self>,
        consumer_group: &str,
        owner_level: Option<i64>,
        name: &str,
    ) -> Result<ReceiverLease, ReceiverRefused> {
        let consumer_group = consumer_group.to_ascii_lowercase();
        let mut receivers = self.receivers.lock().expect("receivers lock");
        let list = receivers.entry(consumer_group.clone()).or_default();
        let highest = list.iter().filter_map(|r| r.owner_level).max();
        if let Some(existing) = highest {
            let allowed = owner_level.is_some_and(|level| level >= existing);
            if !allowed {
                return Err(ReceiverRefused::HigherOwnerLevel {
                    partition: self.id.clone(),
                    consumer_group,
                    existing,
                    requested: owner_level,
                });
            }
        }
        if let Some(level) = owner_level {
            for displaced in list.drain(..) {
                displaced.stop.send_replace(Some(format!(
                    "New receiver '{name}' with higher epoch of '{level}' is created hence current receiver with epoch '{}' is getting disconnected.",
                    displaced
                        .owner_level
                        .map(|l| l.to_string())
                        .unwrap_or_else(|| "none".into())
                )));
            }
        }
        let id = NEXT_RECEIVER_ID.fetch_add(1, Ordering::Relaxed);
        let (stop, stopped) = watch::channel(None);
        list.push(ActiveReceiver {
            id,
            owner_level,
            stop,
        });
        Ok(ReceiverLease {
            partition: self.clone(),
            consumer_group,
            id,
            stopped,
        })
    }
}

/// Runs the hub until Ctrl-C: opens the logs, listens, and enforces retention every minute.
pub async fn run(config: HubConfig) -> Result<(), HubError> {
    serve(config, print_connection, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}

/// What `hubhost hub` prints once it listens: where, and the connection string to use.
fn print_connection(config: &HubConfig, namespace: &Namespace, local: SocketAddr) {
    println!(
        "hubhost hub listening on amqp://{local} (storage: {})",
        config
            .data_dir
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|| "memory".into())
    );
    println!(
        "connection string: Endpoint=sb://{}:{};SharedAccessKeyName={};SharedAccessKey=<key>;UseDevelopmentEmulator=true;",
        local.ip(),
        local.port(),
        namespace
            .keys
            .first()
            .map(|k| k.name.as_str())
            .unwrap_or("-")
    );
}

/// Runs the hub until `shutdown` resolves; `on_listening` is told the address it listens on.
pub async fn serve(
    config: HubConfig,
    on_listening: impl FnOnce(&HubConfig, &Namespace, SocketAddr),
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), HubError> {
    let namespace = Arc::new(Namespace::open(&config)?);
    let listener = wire::listen(config.listen).map_err(|source| HubError::Listen {
        address: config.listen.to_string(),
        source,
    })?;
    let local = listener.local_addr().map_err(|source| HubError::Listen {
        address: config.listen.to_string(),
        source,
    })?;
    for hub in namespace.hubs.values() {
        tracing::info!(
            hub = %hub.name,
            partitions = hub.partitions.len(),
            consumer_groups = ?hub.consumer_groups,
            "hub ready"
        );
    }
    on_listening(&config, &namespace, local);
    let retention = {
        let namespace = namespace.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                match namespace.enforce_retention() {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(events = n, "retention deleted old segments"),
                    Err(e) => tracing::warn!(error = %e, "retention failed"),
                }
            }
        })
    };
    tokio::select! {
        result = server::serve(listener, namespace, config.limits) => result.map_err(HubError::Accept)?,
        _ = shutdown => tracing::info!("stopping"),
    }
    retention.abort();
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(
        "cannot listen on {address}: {source} (is another hub or the official emulator running? use --port)"
    )]
    Listen {
        address: String,
        source: std::io::Error,
    },
    #[error("accepting connections failed: {0}")]
    Accept(std::io::Error),
}

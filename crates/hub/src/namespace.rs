//! The namespace's model: its hubs, their partitions and consumer groups, and which receivers
//! hold a partition (owner levels). Both protocols' servers (`server` for AMQP, `kafka`) and the
//! admin endpoint work on this model and on nothing of each other's; the data directory's
//! layout (a folder per hub, the hub's own files under `.hubhost/`) is decided here.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use fe2o3_amqp::types::messaging::{Body, Message};
use fe2o3_amqp::types::primitives::Value;
use tokio::sync::watch;

use crate::config::{HubConfig, HubSpec};
use crate::log::{LogError, LogOptions, PartitionLog};
use crate::sas::SharedAccessKey;
use crate::{HubError, admin, config, entra, kafka, log, partition_key};

/// An event as the hub stores it and both protocols see it: an AMQP message (a Kafka record is
/// converted to one on the way in, and back on the way out).
pub type AmqpMessage = Message<Body<Value>>;

/// The namespace: every hub, by lowercased name (Event Hubs names are case-insensitive). Hubs
/// and consumer groups can be added while the hub runs (`admin`); none is ever removed.
pub struct Namespace {
    hubs: RwLock<BTreeMap<String, Arc<Hub>>>,
    pub keys: Vec<SharedAccessKey>,
    pub trusted_issuer: Option<entra::TrustedIssuer>,
    pub retention: Duration,
    /// Whether sends and receives are traced (`HubConfig::traces`).
    pub traces: bool,
    /// How a new hub's partitions are kept, and where additions are remembered.
    storage: Storage,
}

/// Where and how partition logs live.
struct Storage {
    data_dir: Option<PathBuf>,
    segment_bytes: u64,
    cache_bytes: usize,
    fsync: bool,
}

pub struct Hub {
    pub name: String,
    pub created_ms: i64,
    pub partitions: Vec<Arc<Partition>>,
    /// Lowercased consumer group names, `$default` first.
    consumer_groups: RwLock<Vec<String>>,
    round_robin: AtomicUsize,
    /// Milliseconds added to the wall clock when its partitions stamp an event enqueued
    /// ([`Hub::set_clock_offset`]), shared with each of them.
    clock_offset_ms: Arc<AtomicI64>,
}

pub struct Partition {
    pub id: String,
    /// Its hub's clock offset.
    clock_offset_ms: Arc<AtomicI64>,
    log: Mutex<PartitionLog>,
    /// The next sequence number to be assigned; readers wait on it.
    appended: watch::Sender<i64>,
    receivers: Mutex<HashMap<String, Vec<ActiveReceiver>>>,
}

/// A receiver link reading a partition for a consumer group.
struct ActiveReceiver {
    id: u64,
    owner_level: Option<i64>,
    stop: watch::Sender<Option<Detach>>,
}

/// Why the hub ends a receiver's link, as the service says it in the link's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detach {
    /// `com.microsoft:server-busy` rather than `amqp:link:stolen`.
    pub server_busy: bool,
    pub description: String,
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
    pub stopped: watch::Receiver<Option<Detach>>,
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

/// Where the hub keeps its own files in a data directory (what was added while it ran, Kafka
/// groups' commits): a folder no hub can be named (a hub's name starts with a letter or a digit),
/// beside one folder per hub.
pub fn own_files(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join(".hubhost")
}

/// Moves the hub's own files from where earlier versions kept them — beside the hubs' folders,
/// where a hub of the same name collided with them — into [`own_files`].
fn move_own_files(data_dir: &std::path::Path) -> std::io::Result<()> {
    let own = own_files(data_dir);
    let moves = [
        (
            data_dir.join("hubhost-additions.json"),
            own.join(admin::ADDITIONS_FILE),
            false,
        ),
        (
            data_dir.join("kafka-offsets"),
            own.join(kafka::OFFSETS_FOLDER),
            true,
        ),
    ];
    for (old, new, folder) in moves {
        let is_old_layout = if folder {
            // A folder of the old layout holds a group's offsets as JSON files; a hub's, its
            // partitions' folders.
            std::fs::read_dir(&old).is_ok_and(|entries| {
                entries
                    .flatten()
                    .any(|e| e.path().extension().is_some_and(|x| x == "json"))
            })
        } else {
            old.is_file()
        };
        if is_old_layout && !new.exists() {
            std::fs::create_dir_all(&own)?;
            std::fs::rename(&old, &new)?;
            tracing::info!(from = %old.display(), to = %new.display(), "moved the hub's own file");
        }
    }
    Ok(())
}

impl Namespace {
    /// Opens every partition's log (recovering torn tails) under the configured data directory:
    /// the configured hubs, and what was added to them while an earlier run of the hub ran
    /// (remembered in the data directory, see `admin`).
    pub fn open(config: &HubConfig) -> Result<Self, HubError> {
        let storage = Storage {
            data_dir: config.data_dir.clone(),
            segment_bytes: config.segment_bytes,
            cache_bytes: config.cache_bytes,
            fsync: config.fsync,
        };
        let added = match &config.data_dir {
            Some(dir) => {
                move_own_files(dir).map_err(|e| {
                    HubError::Additions(format!("moving into {}: {e}", own_files(dir).display()))
                })?;
                admin::Additions::load(dir).map_err(HubError::Additions)?
            }
            None => admin::Additions::default(),
        };
        let specs = added.apply_to(config.hubs.clone());
        let created_ms = chrono::Utc::now().timestamp_millis();
        let mut hubs = BTreeMap::new();
        for spec in &specs {
            hubs.insert(
                spec.name.to_ascii_lowercase(),
                Arc::new(storage.open_hub(spec, created_ms)?),
            );
        }
        Ok(Namespace {
            hubs: RwLock::new(hubs),
            keys: config.keys.clone(),
            trusted_issuer: config.trusted_issuer.clone(),
            retention: config.retention,
            traces: config.traces,
            storage,
        })
    }

    /// Where partitions and what else the hub keeps live; `None` for a hub in memory.
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        self.storage.data_dir.as_deref()
    }

    pub fn hub(&self, name: &str) -> Option<Arc<Hub>> {
        self.hubs
            .read()
            .expect("hubs lock")
            .get(&name.to_ascii_lowercase())
            .cloned()
    }

    /// Every hub, by name.
    pub fn hubs(&self) -> Vec<Arc<Hub>> {
        self.hubs
            .read()
            .expect("hubs lock")
            .values()
            .cloned()
            .collect()
    }

    /// Adds a hub while the hub runs (its partitions empty, `$Default` and `spec`'s consumer
    /// groups), remembered in the data directory.
    pub fn add_hub(&self, spec: &HubSpec) -> Result<Arc<Hub>, admin::AdminError> {
        spec.validate().map_err(admin::AdminError::Invalid)?;
        let mut hubs = self.hubs.write().expect("hubs lock");
        let key = spec.name.to_ascii_lowercase();
        if hubs.contains_key(&key) {
            return Err(admin::AdminError::Exists(format!(
                "the event hub {} exists",
                spec.name
            )));
        }
        let hub = Arc::new(
            self.storage
                .open_hub(spec, chrono::Utc::now().timestamp_millis())
                .map_err(|e| admin::AdminError::Storage(e.to_string()))?,
        );
        hubs.insert(key, hub.clone());
        self.remember(&hubs)?;
        Ok(hub)
    }

    /// Adds a consumer group to a hub while the hub runs, remembered in the data directory.
    pub fn add_consumer_group(&self, hub: &str, name: &str) -> Result<(), admin::AdminError> {
        if !config::is_valid_consumer_group_name(name) {
            return Err(admin::AdminError::Invalid(
                config::ConfigError::ConsumerGroupName(name.to_string()),
            ));
        }
        let hubs = self.hubs.write().expect("hubs lock");
        let found = hubs
            .get(&hub.to_ascii_lowercase())
            .ok_or_else(|| admin::AdminError::NotFound(format!("no event hub {hub}")))?;
        {
            let mut groups = found.consumer_groups.write().expect("groups lock");
            let key = name.to_ascii_lowercase();
            if groups.contains(&key) {
                return Err(admin::AdminError::Exists(format!(
                    "the consumer group {name} of {hub} exists"
                )));
            }
            groups.push(key);
        }
        self.remember(&hubs)
    }

    /// Writes what differs from the configuration to the data directory (nothing in memory).
    fn remember(&self, hubs: &BTreeMap<String, Arc<Hub>>) -> Result<(), admin::AdminError> {
        let Some(dir) = &self.storage.data_dir else {
            return Ok(());
        };
        let specs: Vec<HubSpec> = hubs.values().map(|h| h.spec()).collect();
        admin::Additions::remember(dir, &specs).map_err(admin::AdminError::Storage)
    }

    /// Deletes what has outlived the retention period, in every partition.
    pub fn enforce_retention(&self) -> Result<u64, LogError> {
        let cutoff = chrono::Utc::now().timestamp_millis() - self.retention.as_millis() as i64;
        let mut dropped = 0;
        for hub in self.hubs() {
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

impl Storage {
    /// A hub's partitions, their logs opened (recovering torn tails) or created.
    fn open_hub(&self, spec: &HubSpec, created_ms: i64) -> Result<Hub, LogError> {
        let clock_offset_ms = Arc::new(AtomicI64::new(0));
        let mut partitions = Vec::new();
        for p in 0..spec.partitions {
            let dir = self
                .data_dir
                .as_ref()
                .map(|d| d.join(spec.name.to_ascii_lowercase()).join(p.to_string()));
            let log = PartitionLog::open(LogOptions {
                dir,
                segment_bytes: self.segment_bytes,
                cache_bytes: self.cache_bytes,
                fsync: self.fsync,
            })?;
            let next = log.summary().next_sequence;
            partitions.push(Arc::new(Partition {
                id: p.to_string(),
                clock_offset_ms: clock_offset_ms.clone(),
                log: Mutex::new(log),
                appended: watch::Sender::new(next),
                receivers: Mutex::new(HashMap::new()),
            }));
        }
        let mut consumer_groups = vec!["$default".to_string()];
        for group in &spec.consumer_groups {
            let group = group.to_ascii_lowercase();
            if !consumer_groups.contains(&group) {
                consumer_groups.push(group);
            }
        }
        Ok(Hub {
            name: spec.name.clone(),
            created_ms,
            partitions,
            consumer_groups: RwLock::new(consumer_groups),
            round_robin: AtomicUsize::new(0),
            clock_offset_ms,
        })
    }
}

impl Hub {
    pub fn partition(&self, id: &str) -> Option<&Arc<Partition>> {
        self.partitions.iter().find(|p| p.id == id)
    }

    pub fn has_consumer_group(&self, name: &str) -> bool {
        self.consumer_groups
            .read()
            .expect("groups lock")
            .contains(&name.to_ascii_lowercase())
    }

    /// Its consumer groups (lowercased), `$default` first.
    pub fn consumer_groups(&self) -> Vec<String> {
        self.consumer_groups.read().expect("groups lock").clone()
    }

    /// What it is, as the configuration would say it.
    pub fn spec(&self) -> HubSpec {
        HubSpec {
            name: self.name.clone(),
            partitions: self.partitions.len() as u32,
            consumer_groups: self.consumer_groups(),
        }
    }

    /// From now on, events sent to this hub are stamped enqueued at the wall clock plus `offset`
    /// (negative: a clock running behind), for a test of what a function does with old events.
    /// A partition's enqueued times still never go backwards, as on Event Hubs: an event is
    /// stamped no earlier than the one before it on its partition.
    pub fn set_clock_offset(&self, offset: chrono::Duration) {
        self.clock_offset_ms
            .store(offset.num_milliseconds(), Ordering::Relaxed);
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
        self.append_announced(payloads, |_| {})
    }

    /// [`Partition::append`], telling `announce` the first sequence number the events get
    /// before they are written (under the log's lock, so no other append comes between).
    pub fn append_announced(
        &self,
        payloads: Vec<Bytes>,
        announce: impl FnOnce(i64),
    ) -> Result<Vec<(i64, i64)>, LogError> {
        let now =
            chrono::Utc::now().timestamp_millis() + self.clock_offset_ms.load(Ordering::Relaxed);
        let mut log = self.log.lock().expect("log lock");
        announce(log.summary().next_sequence);
        let placed = log.append(payloads.into_iter().map(|p| (p, now)).collect())?;
        self.appended.send_replace(log.summary().next_sequence);
        Ok(placed)
    }

    pub fn summary(&self) -> log::LogSummary {
        self.log.lock().expect("log lock").summary()
    }

    /// Bytes its retained events take (files, or memory for an in-memory hub).
    pub fn retained_bytes(&self) -> u64 {
        self.log.lock().expect("log lock").retained_bytes()
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
                displaced.stop.send_replace(Some(Detach { server_busy: false, description: format!(
                    "New receiver '{name}' with higher epoch of '{level}' is created hence current receiver with epoch '{}' is getting disconnected.",
                    displaced
                        .owner_level
                        .map(|l| l.to_string())
                        .unwrap_or_else(|| "none".into())
                ) }));
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

    /// Ends every receiver's link on this partition as the service does when it is busy or
    /// moves the partition (`server_busy`), else as when a link is stolen; clients reconnect.
    /// How many links were ended.
    pub fn detach_receivers(&self, server_busy: bool, description: &str) -> usize {
        let receivers = self.receivers.lock().expect("receivers lock");
        let mut ended = 0;
        for receiver in receivers.values().flatten() {
            receiver.stop.send_replace(Some(Detach {
                server_busy,
                description: description.to_string(),
            }));
            ended += 1;
        }
        ended
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A hub's configuration for tests: `hubs` as the command line names them, data in `dir`.
    pub(crate) fn config(dir: &std::path::Path, hubs: &[&str]) -> HubConfig {
        let specs = hubs
            .iter()
            .map(|h| HubSpec::parse_flag(h).unwrap())
            .collect();
        HubConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            specs,
            Some(dir.to_path_buf()),
        )
    }

    /// Hubs named as the hub's files were named beside them: each is a hub like any other, and
    /// what the hub remembers of additions is read back.
    #[test]
    fn no_hub_name_reaches_the_hubs_own_files() {
        let dir = tempfile::tempdir().unwrap();
        let namespace = Namespace::open(&config(dir.path(), &["sensors:2"])).unwrap();
        for name in ["hubhost-additions.json", "kafka-offsets", "additions.json"] {
            namespace
                .add_hub(&HubSpec::parse_flag(&format!("{name}:2")).unwrap())
                .unwrap();
        }
        namespace.add_consumer_group("sensors", "audit").unwrap();
        for name in [".hubhost", "$cbs", "$management"] {
            let spec = HubSpec {
                name: name.into(),
                partitions: 1,
                consumer_groups: Vec::new(),
            };
            assert!(namespace.add_hub(&spec).is_err(), "{name}");
        }
        drop(namespace);
        let again = Namespace::open(&config(dir.path(), &["sensors:2"])).unwrap();
        let names: Vec<String> = again.hubs().iter().map(|h| h.name.clone()).collect();
        assert_eq!(
            names,
            [
                "additions.json",
                "hubhost-additions.json",
                "kafka-offsets",
                "sensors"
            ]
        );
        assert!(again.hub("sensors").unwrap().has_consumer_group("audit"));
        assert!(own_files(dir.path()).join(admin::ADDITIONS_FILE).is_file());
    }

    /// A data directory of an earlier version keeps its additions and its groups' commits.
    #[test]
    fn the_earlier_layout_is_moved_into_the_hubs_own_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("hubhost-additions.json"),
            r#"{"hubs":[{"name":"orders","partitions":3,"consumerGroups":["$default"]}]}"#,
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("kafka-offsets")).unwrap();
        std::fs::write(dir.path().join("kafka-offsets/ab12.json"), "{}").unwrap();
        let namespace = Namespace::open(&config(dir.path(), &["sensors:2"])).unwrap();
        assert_eq!(namespace.hub("orders").unwrap().partitions.len(), 3);
        let own = own_files(dir.path());
        assert!(own.join(admin::ADDITIONS_FILE).is_file());
        assert!(own.join(kafka::OFFSETS_FOLDER).join("ab12.json").is_file());
        assert!(!dir.path().join("hubhost-additions.json").exists());
        assert!(!dir.path().join("kafka-offsets").exists());
    }
}

//! The home directory: which partition each home's events arrive on, so that a page showing one
//! home knows where to look. Stored in [`layout::HOME_BUCKETS`] buckets by a hash of the home id,
//! each bucket one blob per partition: the entries of a partition are written by its owner only.
//! With one blob per bucket, every instance rewrote every bucket while a fleet was new (each
//! instance sees homes of every bucket), and their conditional writes raced: `bench pool`
//! measured the handlers of four instances spending 23 µs of CPU per event against 13 µs with
//! the directory left out, and four instances slower than one.
//!
//! The directory is an index, not data: every reading is in its window block before the batch is
//! answered, and a home's entry can always be learnt again from its next report. So entries are
//! written *behind* the batches — noted in memory, flushed by a background task every
//! [`FLUSH_INTERVAL`] and when the handler stops — instead of on every batch's path, where a
//! fleet of new homes (the first minute of a deployment) made each batch of 100 readings rewrite a
//! dozen buckets. A crash loses at most one interval of new entries, until those homes report
//! again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::versioned::VersionedDocs;
use super::{AppError, layout};
use hubhost_storage::{SharedStore, StoreError};

pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Bucket writes of one flush that may run at once.
const WRITE_CONCURRENCY: usize = 8;
/// Bound on the memo of entries known to be stored (about 100 bytes each).
const MAX_KNOWN_HOMES: usize = 1_000_000;

/// A bucket of the home directory: home id → partition id.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HomeDirectory {
    pub homes: BTreeMap<String, String>,
}

/// A part of the directory: (bucket, partition).
type PartKey = (u64, String);

/// Home → partition entries waiting to be written, and those known to be stored.
#[derive(Default)]
struct Entries {
    pending: HashMap<String, String>,
    /// (home, partition) pairs known to be in the stored directory: noting them again is free.
    known: HashSet<(String, String)>,
}

pub struct Directory {
    hub_buckets: VersionedDocs<HomeDirectory>,
    entries: Mutex<BTreeMap<String, Entries>>,
    /// One flush at a time, so two flushes never race on a bucket's ETag.
    flushing: tokio::sync::Mutex<()>,
}

impl Directory {
    /// Creates the directory and, inside a tokio runtime, its background flusher (which ends
    /// when the directory is dropped).
    pub fn new(store: SharedStore, container: &str) -> Arc<Self> {
        let directory = Arc::new(Directory {
            hub_buckets: VersionedDocs::new(store, container, 512),
            entries: Mutex::new(BTreeMap::new()),
            flushing: tokio::sync::Mutex::new(()),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(flush_periodically(Arc::downgrade(&directory)));
        }
        directory
    }

    /// Records that `homes` report on `partition` of `hub`; written by the next flush.
    pub fn note<'a>(&self, hub: &str, partition: &str, homes: impl IntoIterator<Item = &'a str>) {
        let mut entries = self.entries.lock().expect("directory lock");
        let entries = entries.entry(hub.to_string()).or_default();
        for home in homes {
            if !entries
                .known
                .contains(&(home.to_string(), partition.to_string()))
            {
                entries
                    .pending
                    .insert(home.to_string(), partition.to_string());
            }
        }
    }

    /// Writes every pending entry. Entries whose bucket could not be written stay pending.
    pub async fn flush(&self) -> Result<(), AppError> {
        let _one_at_a_time = self.flushing.lock().await;
        let taken: Vec<(String, HashMap<String, String>)> = {
            let mut entries = self.entries.lock().expect("directory lock");
            entries
                .iter_mut()
                .filter(|(_, e)| !e.pending.is_empty())
                .map(|(hub, e)| (hub.clone(), std::mem::take(&mut e.pending)))
                .collect()
        };
        let mut first_error = None;
        for (hub, pending) in taken {
            let mut by_part: BTreeMap<PartKey, Vec<(String, String)>> = BTreeMap::new();
            for (home, partition) in pending {
                by_part
                    .entry((layout::home_bucket(&home), partition.clone()))
                    .or_default()
                    .push((home, partition));
            }
            let parts: Vec<(PartKey, Vec<(String, String)>)> = by_part.into_iter().collect();
            for chunk in parts.chunks(WRITE_CONCURRENCY) {
                let writes = chunk.iter().map(|((bucket, partition), homes)| {
                    self.write_part(&hub, *bucket, partition, homes)
                });
                let results = futures::future::join_all(writes).await;
                for ((_, homes), result) in chunk.iter().zip(results) {
                    self.settle(&hub, homes, result.is_ok());
                    if let Err(e) = result {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Writes `homes` (all reporting on `partition`) into their bucket's part for `partition`.
    async fn write_part(
        &self,
        hub: &str,
        bucket: u64,
        partition: &str,
        homes: &[(String, String)],
    ) -> Result<(), AppError> {
        let name = layout::home_directory_blob(hub, bucket, partition);
        self.hub_buckets
            .update(&name, HomeDirectory::default, |dir| {
                let mut changed = false;
                for (home, partition) in homes {
                    if dir.homes.get(home) != Some(partition) {
                        dir.homes.insert(home.clone(), partition.clone());
                        changed = true;
                    }
                }
                ((), changed)
            })
            .await
    }

    /// After a bucket write: remember its entries as stored, or put them back to retry — unless
    /// a batch noted a newer partition for the home meanwhile.
    fn settle(&self, hub: &str, homes: &[(String, String)], written: bool) {
        let mut entries = self.entries.lock().expect("directory lock");
        let entries = entries.entry(hub.to_string()).or_default();
        if written {
            if entries.known.len() > MAX_KNOWN_HOMES {
                entries.known.clear();
            }
            entries.known.extend(homes.iter().cloned());
        } else {
            for (home, partition) in homes {
                entries
                    .pending
                    .entry(home.clone())
                    .or_insert_with(|| partition.clone());
            }
        }
    }
}

/// The partition `home` reports on, as the directory in `store` has it: its bucket is listed and
/// every partition's part read. A home in two parts (it moved: the hub's partition count
/// changed) is where the newer part says.
pub async fn lookup(
    store: &SharedStore,
    container: &str,
    hub: &str,
    home: &str,
) -> Result<Option<String>, StoreError> {
    let prefix = layout::home_bucket_prefix(hub, layout::home_bucket(home));
    let mut found: Option<(chrono::DateTime<chrono::Utc>, String)> = None;
    for part in store.list(container, &prefix).await? {
        let Some(blob) = store.get(container, &part.name).await? else {
            continue;
        };
        // A part the app cannot have written is no evidence either way.
        let Ok(part) = serde_json::from_slice::<HomeDirectory>(&blob.data) else {
            continue;
        };
        if let Some(partition) = part.homes.get(home)
            && found
                .as_ref()
                .is_none_or(|(at, _)| *at < blob.properties.last_modified)
        {
            found = Some((blob.properties.last_modified, partition.clone()));
        }
    }
    Ok(found.map(|(_, partition)| partition))
}

async fn flush_periodically(directory: Weak<Directory>) {
    let mut tick = tokio::time::interval(FLUSH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(directory) = directory.upgrade() else {
            return;
        };
        if let Err(e) = directory.flush().await {
            tracing::warn!(error = %e, "home directory flush failed; its entries stay pending and are retried");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hubhost_storage::memory::MemoryStore;

    async fn stored(store: &SharedStore, home: &str) -> Option<String> {
        lookup(store, "app", "sensors", home).await.unwrap()
    }

    /// Homes of `bucket`: `count` ids that hash into it.
    fn homes_in_bucket(bucket: u64, count: usize) -> Vec<String> {
        (0..)
            .map(|i| format!("home-{i}"))
            .filter(|h| layout::home_bucket(h) == bucket)
            .take(count)
            .collect()
    }

    #[tokio::test]
    async fn each_partition_s_entries_go_to_a_part_of_their_own() {
        let store: SharedStore = Arc::new(MemoryStore::default());
        store.ensure_container("app").await.unwrap();
        // Two instances, each owning one partition, with homes of the same bucket.
        let homes = homes_in_bucket(5, 2);
        let (one, two) = (
            Directory::new(store.clone(), "app"),
            Directory::new(store.clone(), "app"),
        );
        one.note("sensors", "0", [homes[0].as_str()]);
        two.note("sensors", "1", [homes[1].as_str()]);
        one.flush().await.unwrap();
        let first = store
            .get("app", &layout::home_directory_blob("sensors", 5, "0"))
            .await
            .unwrap()
            .unwrap();
        two.flush().await.unwrap();
        // The second instance did not rewrite the first one's part.
        let after = store
            .get("app", &layout::home_directory_blob("sensors", 5, "0"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.properties.etag, after.properties.etag);
        let listed = store
            .list("app", &layout::home_bucket_prefix("sensors", 5))
            .await
            .unwrap();
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert_eq!(stored(&store, &homes[0]).await.as_deref(), Some("0"));
        assert_eq!(stored(&store, &homes[1]).await.as_deref(), Some("1"));
        assert_eq!(stored(&store, &homes_in_bucket(5, 3)[2]).await, None);
    }

    #[tokio::test]
    async fn noted_homes_are_written_by_a_flush_and_a_move_is_written_again() {
        let store: SharedStore = Arc::new(MemoryStore::default());
        store.ensure_container("app").await.unwrap();
        let directory = Directory::new(store.clone(), "app");
        directory.note("sensors", "3", ["home-1", "home-2"]);
        directory.flush().await.unwrap();
        assert_eq!(stored(&store, "home-1").await.as_deref(), Some("3"));
        assert_eq!(stored(&store, "home-2").await.as_deref(), Some("3"));

        // Known entries are not pending again; a home that moves is.
        directory.note("sensors", "3", ["home-1"]);
        directory.note("sensors", "5", ["home-2"]);
        let pending: usize = directory
            .entries
            .lock()
            .unwrap()
            .values()
            .map(|e| e.pending.len())
            .sum();
        assert_eq!(pending, 1);
        // The newer part wins (last-modified times are to the clock's resolution).
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        directory.flush().await.unwrap();
        assert_eq!(stored(&store, "home-2").await.as_deref(), Some("5"));
    }

    #[tokio::test]
    async fn entries_a_failed_flush_could_not_write_stay_pending() {
        let memory = Arc::new(MemoryStore::default());
        let store: SharedStore = memory.clone();
        store.ensure_container("app").await.unwrap();
        let directory = Directory::new(store.clone(), "app");
        directory.note("sensors", "1", ["home-4"]);
        memory.set_unavailable(true);
        assert!(directory.flush().await.is_err());
        memory.set_unavailable(false);
        directory.flush().await.unwrap();
        assert_eq!(stored(&store, "home-4").await.as_deref(), Some("1"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_background_task_flushes_without_being_asked() {
        let store: SharedStore = Arc::new(MemoryStore::default());
        store.ensure_container("app").await.unwrap();
        let directory = Directory::new(store.clone(), "app");
        directory.note("sensors", "0", ["home-9"]);
        assert_eq!(stored(&store, "home-9").await, None);
        tokio::time::sleep(FLUSH_INTERVAL * 2).await;
        assert_eq!(stored(&store, "home-9").await.as_deref(), Some("0"));
    }
}

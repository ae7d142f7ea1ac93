//! Committed offsets of Kafka consumer groups, kept across restarts of the hub: one JSON file per
//! group under `<data dir>/.hubhost/kafka-offsets/` (among the hub's own files), replaced whole on each commit (written beside it,
//! then renamed over it), so a `kill -9` leaves the previous commit or the new one, never half.
//! A hub without a data directory keeps them in memory.
//!
//! A commit changes the group in memory under the store's lock, then writes the group's file
//! under that group's own lock only: a commit waiting for its disk holds up no other group.
//! At most [`MAX_GROUPS`] groups have offsets, each commit's metadata at most
//! [`MAX_METADATA_BYTES`] (Kafka's `offset.metadata.max.bytes`).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The most groups with committed offsets a hub keeps (a file each).
pub const MAX_GROUPS: usize = 1000;
/// The most bytes of metadata a commit may carry, as Kafka's default bounds it.
pub const MAX_METADATA_BYTES: usize = 4096;

/// Why a commit was not kept.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("the hub keeps offsets for at most {MAX_GROUPS} consumer groups")]
    TooManyGroups,
    #[error("the offsets could not be written: {0}")]
    Io(#[from] std::io::Error),
}

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A partition's committed position: the next offset (sequence number) the group reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    pub offset: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct GroupFile {
    group: String,
    /// Hub (lowercased) → partition → committed.
    topics: BTreeMap<String, BTreeMap<i32, Committed>>,
}

pub struct OffsetStore {
    dir: Option<PathBuf>,
    groups: Mutex<HashMap<String, GroupFile>>,
    /// Each group's file lock: held while its file is written, by that group's commits only.
    writing: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl OffsetStore {
    /// Opens the store, reading every group's file.
    pub fn open(data_dir: Option<&Path>) -> std::io::Result<Self> {
        let dir = data_dir.map(|d| crate::own_files(d).join(super::OFFSETS_FOLDER));
        let mut groups = HashMap::new();
        if let Some(dir) = &dir {
            std::fs::create_dir_all(dir)?;
            for entry in std::fs::read_dir(dir)? {
                let path = entry?.path();
                if path.extension().is_some_and(|e| e == "json") {
                    match std::fs::read(&path)
                        .ok()
                        .and_then(|b| serde_json::from_slice::<GroupFile>(&b).ok())
                    {
                        Some(file) => {
                            groups.insert(file.group.clone(), file);
                        }
                        None => {
                            tracing::warn!(path = %path.display(), "an offsets file cannot be read; ignored")
                        }
                    }
                }
            }
        }
        Ok(OffsetStore {
            dir,
            groups: Mutex::new(groups),
            writing: Mutex::new(HashMap::new()),
        })
    }

    /// Records commits for a group, then writes its file.
    pub fn commit(
        &self,
        group: &str,
        commits: impl IntoIterator<Item = (String, i32, Committed)>,
    ) -> Result<(), CommitError> {
        {
            let mut groups = self.groups.lock().expect("offsets lock");
            if !groups.contains_key(group) && groups.len() >= MAX_GROUPS {
                return Err(CommitError::TooManyGroups);
            }
            let file = groups
                .entry(group.to_string())
                .or_insert_with(|| GroupFile {
                    group: group.to_string(),
                    topics: BTreeMap::new(),
                });
            for (hub, partition, committed) in commits {
                file.topics
                    .entry(hub.to_ascii_lowercase())
                    .or_default()
                    .insert(partition, committed);
            }
        }
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let lock = self
            .writing
            .lock()
            .expect("offsets writers lock")
            .entry(group.to_string())
            .or_default()
            .clone();
        let _writing = lock.lock().expect("group file lock");
        // Taken under the group's file lock, so the last writer writes the newest commits.
        let bytes = {
            let groups = self.groups.lock().expect("offsets lock");
            serde_json::to_vec(&groups[group]).expect("offsets serialize")
        };
        let path = dir.join(file_name(group));
        let temporary = path.with_extension("json.tmp");
        let mut out = std::fs::File::create(&temporary)?;
        out.write_all(&bytes)?;
        out.sync_data()?;
        std::fs::rename(&temporary, &path)?;
        Ok(())
    }

    pub fn committed(&self, group: &str, hub: &str, partition: i32) -> Option<Committed> {
        self.groups
            .lock()
            .expect("offsets lock")
            .get(group)?
            .topics
            .get(&hub.to_ascii_lowercase())?
            .get(&partition)
            .cloned()
    }

    /// The hubs a group has committed offsets for (lowercased).
    pub fn hubs_of(&self, group: &str) -> Vec<String> {
        self.groups
            .lock()
            .expect("offsets lock")
            .get(group)
            .map(|g| g.topics.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every group with its commits: group → hub → partition → offset.
    pub fn all(&self) -> BTreeMap<String, BTreeMap<String, BTreeMap<i32, i64>>> {
        self.groups
            .lock()
            .expect("offsets lock")
            .values()
            .map(|g| {
                let topics = g
                    .topics
                    .iter()
                    .map(|(hub, parts)| {
                        (
                            hub.clone(),
                            parts.iter().map(|(p, c)| (*p, c.offset)).collect(),
                        )
                    })
                    .collect();
                (g.group.clone(), topics)
            })
            .collect()
    }
}

/// A group id may hold any character; its file is named by a digest of it.
fn file_name(group: &str) -> String {
    let digest = Sha256::digest(group.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_waits_for_no_other_group_s_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(Some(dir.path())).unwrap();
        let committed = || Committed {
            offset: 1,
            metadata: None,
        };
        // Another group's file being written (its lock held, as during its fsync)...
        let other = store
            .writing
            .lock()
            .unwrap()
            .entry("other".into())
            .or_default()
            .clone();
        let _writing = other.lock().unwrap();
        // ...holds up neither this group's commit nor a read of the other's offsets.
        store
            .commit("mine", [("sensors".to_string(), 0, committed())])
            .unwrap();
        assert_eq!(store.committed("mine", "sensors", 0), Some(committed()));
        assert_eq!(store.committed("other", "sensors", 0), None);
    }

    #[test]
    fn a_hub_keeps_offsets_for_a_bounded_number_of_groups() {
        let store = OffsetStore::open(None).unwrap();
        let commit = |group: &str| {
            let committed = Committed {
                offset: 1,
                metadata: None,
            };
            store.commit(group, [("sensors".to_string(), 0, committed)])
        };
        for i in 0..MAX_GROUPS {
            commit(&format!("group-{i}")).unwrap();
        }
        assert!(matches!(
            commit("one-too-many"),
            Err(CommitError::TooManyGroups)
        ));
        commit("group-0").unwrap();
    }

    #[test]
    fn commits_survive_reopening_and_any_group_name_is_a_safe_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(Some(dir.path())).unwrap();
        let group = "../etc/passwd ✓";
        store
            .commit(
                group,
                [
                    (
                        "Sensors".to_string(),
                        3,
                        Committed {
                            offset: 42,
                            metadata: None,
                        },
                    ),
                    (
                        "sensors".to_string(),
                        4,
                        Committed {
                            offset: 7,
                            metadata: Some("m".into()),
                        },
                    ),
                ],
            )
            .unwrap();
        store
            .commit(
                group,
                [(
                    "sensors".to_string(),
                    3,
                    Committed {
                        offset: 50,
                        metadata: None,
                    },
                )],
            )
            .unwrap();
        drop(store);
        let reopened = OffsetStore::open(Some(dir.path())).unwrap();
        assert_eq!(reopened.committed(group, "SENSORS", 3).unwrap().offset, 50);
        assert_eq!(
            reopened
                .committed(group, "sensors", 4)
                .unwrap()
                .metadata
                .as_deref(),
            Some("m")
        );
        assert_eq!(reopened.committed(group, "sensors", 5), None);
        let files: Vec<_> =
            std::fs::read_dir(crate::own_files(dir.path()).join(crate::kafka::OFFSETS_FOLDER))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
        assert_eq!(files.len(), 1);
        assert!(files[0].ends_with(".json") && !files[0].contains('/'));
    }
}

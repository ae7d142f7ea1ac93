//! Committed offsets of Kafka consumer groups, kept across restarts of the hub: one JSON file per
//! group under `<data dir>/.hubhost/kafka-offsets/` (among the hub's own files), replaced whole on each commit (written beside it,
//! then renamed over it), so a `kill -9` leaves the previous commit or the new one, never half.
//! A hub without a data directory keeps them in memory.
//!
//! A commit changes the group in memory under the store's lock, then writes the group's file
//! under that group's own lock only: a commit waiting for its disk holds up no other group.
//! What a client can make the store hold is bounded: each commit's metadata at most
//! [`MAX_METADATA_BYTES`] (Kafka's `offset.metadata.max.bytes`); at most
//! [`MAX_GROUPS_PER_CLIENT`] groups first committed by one client (its key and scope), and
//! [`MAX_GROUPS`] in all; and a group's offsets expire once it has had no member for the
//! retention (Kafka's `offsets.retention.minutes`, 7 days by default), counted from when the
//! hub last saw it with members or a commit, or from the hub's start ([`OffsetStore::expire`]).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The most groups with committed offsets that one client (`sasl::Authenticated::principal`)
/// may have opened with its first commit.
pub const MAX_GROUPS_PER_CLIENT: usize = 1000;
/// The most groups with committed offsets a hub keeps (a file each), over every client.
pub const MAX_GROUPS: usize = 10 * MAX_GROUPS_PER_CLIENT;
/// How long a group without members keeps its offsets by default: Kafka's
/// `offsets.retention.minutes` (10,080).
pub const DEFAULT_RETENTION: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);
/// The most bytes of metadata a commit may carry, as Kafka's default bounds it.
pub const MAX_METADATA_BYTES: usize = 4096;

/// Why a commit was not kept.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error(
        "the hub keeps offsets for at most {MAX_GROUPS_PER_CLIENT} consumer groups a client (its key and scope), {MAX_GROUPS} in all; a group without members gives its offsets up after the offsets retention"
    )]
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

#[derive(Debug, Serialize, Deserialize)]
struct GroupFile {
    group: String,
    /// The client whose commit opened it, counted against its cap (none in files written
    /// before clients were counted: those count only in the total).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    opened_by: Option<String>,
    /// Hub (lowercased) → partition → committed.
    topics: BTreeMap<String, BTreeMap<i32, Committed>>,
    /// When the hub last saw the group with members or a commit; its retention counts from
    /// there (from the hub's start, for what was read at start).
    #[serde(skip, default = "std::time::Instant::now")]
    active: std::time::Instant,
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

    /// Records commits for a group by client `principal` (who opens the group if it is new),
    /// then writes its file.
    pub fn commit(
        &self,
        group: &str,
        principal: &str,
        commits: impl IntoIterator<Item = (String, i32, Committed)>,
    ) -> Result<(), CommitError> {
        {
            let mut groups = self.groups.lock().expect("offsets lock");
            if !groups.contains_key(group) {
                let by_client = groups
                    .values()
                    .filter(|g| g.opened_by.as_deref() == Some(principal))
                    .count();
                if by_client >= MAX_GROUPS_PER_CLIENT || groups.len() >= MAX_GROUPS {
                    return Err(CommitError::TooManyGroups);
                }
            }
            let file = groups
                .entry(group.to_string())
                .or_insert_with(|| GroupFile {
                    group: group.to_string(),
                    opened_by: Some(principal.to_string()),
                    topics: BTreeMap::new(),
                    active: std::time::Instant::now(),
                });
            file.active = std::time::Instant::now();
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
        let lock = self.file_lock(group);
        let _writing = lock.lock().expect("group file lock");
        // Taken under the group's file lock, so the last writer writes the newest commits.
        let bytes = {
            let groups = self.groups.lock().expect("offsets lock");
            match groups.get(group) {
                Some(file) => serde_json::to_vec(file).expect("offsets serialize"),
                // Expired since (`expire`), which removes its file.
                None => return Ok(()),
            }
        };
        let path = dir.join(file_name(group));
        let temporary = path.with_extension("json.tmp");
        let mut out = std::fs::File::create(&temporary)?;
        out.write_all(&bytes)?;
        out.sync_data()?;
        std::fs::rename(&temporary, &path)?;
        Ok(())
    }

    /// The lock held while `group`'s file is written or removed.
    fn file_lock(&self, group: &str) -> Arc<Mutex<()>> {
        self.writing
            .lock()
            .expect("offsets writers lock")
            .entry(group.to_string())
            .or_default()
            .clone()
    }

    /// Forgets the offsets of every group that has had no member (`has_members`) and no commit
    /// for `retention`, file and all; a group with members counts as active now. The groups
    /// forgotten.
    pub fn expire(
        &self,
        retention: std::time::Duration,
        has_members: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let now = std::time::Instant::now();
        let expired: Vec<String> = {
            let mut groups = self.groups.lock().expect("offsets lock");
            for (name, file) in groups.iter_mut() {
                if has_members(name) {
                    file.active = now;
                }
            }
            let expired: Vec<String> = groups
                .values()
                .filter(|g| now.duration_since(g.active) >= retention)
                .map(|g| g.group.clone())
                .collect();
            for name in &expired {
                groups.remove(name);
            }
            expired
        };
        if let Some(dir) = &self.dir {
            for name in &expired {
                // Under the group's file lock, so that no write of it is under way; a commit
                // that comes after writes the file again.
                let lock = self.file_lock(name);
                let _writing = lock.lock().expect("group file lock");
                if self.groups.lock().expect("offsets lock").contains_key(name) {
                    // Committed again meanwhile: kept.
                    continue;
                }
                if let Err(e) = std::fs::remove_file(dir.join(file_name(name)))
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(group = %name, "an expired group's offsets file could not be removed: {e}");
                }
                self.writing
                    .lock()
                    .expect("offsets writers lock")
                    .remove(name);
            }
        }
        expired
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
        let other = store.file_lock("other");
        let _writing = other.lock().unwrap();
        // ...holds up neither this group's commit nor a read of the other's offsets.
        store
            .commit("mine", "key:a@*", [("sensors".to_string(), 0, committed())])
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
            store.commit(group, "key:a@*", [("sensors".to_string(), 0, committed)])
        };
        for i in 0..MAX_GROUPS_PER_CLIENT {
            commit(&format!("group-{i}")).unwrap();
        }
        assert!(matches!(
            commit("one-too-many"),
            Err(CommitError::TooManyGroups)
        ));
        commit("group-0").unwrap();
        // Another client's groups are its own to count.
        let other = store.commit(
            "theirs",
            "key:b@*",
            [(
                "sensors".to_string(),
                0,
                Committed {
                    offset: 1,
                    metadata: None,
                },
            )],
        );
        assert!(other.is_ok(), "{other:?}");
    }

    #[test]
    fn a_group_without_members_gives_its_offsets_up_after_the_retention() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(Some(dir.path())).unwrap();
        let committed = Committed {
            offset: 3,
            metadata: None,
        };
        for group in ["idle", "busy"] {
            store
                .commit(
                    group,
                    "key:a@*",
                    [("sensors".to_string(), 0, committed.clone())],
                )
                .unwrap();
        }
        let folder = crate::own_files(dir.path()).join(crate::kafka::OFFSETS_FOLDER);
        let files = || std::fs::read_dir(&folder).unwrap().count();
        assert_eq!(files(), 2);
        let long = std::time::Duration::from_secs(3600);
        assert!(
            store.expire(long, |_| false).is_empty(),
            "within the retention"
        );
        std::thread::sleep(std::time::Duration::from_millis(30));
        let expired = store.expire(std::time::Duration::from_millis(20), |g| g == "busy");
        assert_eq!(expired, ["idle"]);
        assert_eq!(store.committed("idle", "sensors", 0), None);
        assert_eq!(store.committed("busy", "sensors", 0), Some(committed));
        assert_eq!(files(), 1);
        drop(store);
        let reopened = OffsetStore::open(Some(dir.path())).unwrap();
        assert_eq!(reopened.committed("idle", "sensors", 0), None);
    }

    #[test]
    fn commits_survive_reopening_and_any_group_name_is_a_safe_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(Some(dir.path())).unwrap();
        let group = "../etc/passwd ✓";
        store
            .commit(
                group,
                "key:a@*",
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
                "key:a@*",
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

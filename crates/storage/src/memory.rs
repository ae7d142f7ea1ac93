//! The in-memory blob store: same semantics as the others, for fast tests of pure logic.
//! It can be told to fail, so that tests can exercise the "storage unreachable" path.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    Blob, BlobProperties, BlobStore, Condition, ETag, Metadata, StoreError, WriteOutcome,
    validate_blob_name, validate_container_name, validate_metadata,
};

#[derive(Default)]
pub struct MemoryStore {
    blobs: Mutex<BTreeMap<(String, String), Blob>>,
    version: AtomicU64,
    unavailable: AtomicBool,
}

impl MemoryStore {
    /// While set, every operation fails with [`StoreError::Unavailable`].
    pub fn set_unavailable(&self, down: bool) {
        self.unavailable.store(down, Ordering::SeqCst);
    }

    fn up(&self) -> Result<(), StoreError> {
        if self.unavailable.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable(
                "memory store is switched off".into(),
            ))
        } else {
            Ok(())
        }
    }

    fn write(
        &self,
        container: &str,
        name: &str,
        data: Bytes,
        metadata: &Metadata,
        condition: &Condition,
        keep_data: bool,
    ) -> Result<WriteOutcome, StoreError> {
        self.up()?;
        validate_container_name(container)?;
        validate_blob_name(name)?;
        validate_metadata(metadata)?;
        let key = (container.to_string(), name.to_string());
        let mut blobs = self.blobs.lock().expect("memory store lock");
        let current = blobs.get(&key);
        let (c, n) = (container.to_string(), name.to_string());
        match (condition, current) {
            (Condition::IfNotExists, Some(_)) => {
                return Err(StoreError::AlreadyExists {
                    container: c,
                    name: n,
                });
            }
            (Condition::IfMatch(want), Some(b)) if &b.properties.etag != want => {
                return Err(StoreError::ConditionNotMet {
                    container: c,
                    name: n,
                });
            }
            (Condition::IfMatch(_), None) if !keep_data => {
                return Err(StoreError::ConditionNotMet {
                    container: c,
                    name: n,
                });
            }
            _ => {}
        }
        let data = if keep_data {
            match current {
                Some(b) => b.data.clone(),
                None => {
                    return Err(StoreError::NotFound {
                        container: c,
                        name: n,
                    });
                }
            }
        } else {
            data
        };
        let outcome = WriteOutcome {
            etag: ETag::new(format!(
                "0x{:X}",
                self.version.fetch_add(1, Ordering::SeqCst) + 1
            )),
            last_modified: hubhost_clock::now(),
        };
        blobs.insert(
            key,
            Blob {
                properties: BlobProperties {
                    name: name.to_string(),
                    etag: outcome.etag.clone(),
                    last_modified: outcome.last_modified,
                    metadata: metadata.clone(),
                    size: data.len() as u64,
                },
                data,
            },
        );
        Ok(outcome)
    }
}

#[async_trait]
impl BlobStore for MemoryStore {
    fn describe(&self) -> String {
        "in-memory store".to_string()
    }

    async fn ensure_container(&self, container: &str) -> Result<(), StoreError> {
        self.up()?;
        validate_container_name(container)
    }

    async fn get(&self, container: &str, name: &str) -> Result<Option<Blob>, StoreError> {
        self.up()?;
        validate_blob_name(name)?;
        let blobs = self.blobs.lock().expect("memory store lock");
        Ok(blobs
            .get(&(container.to_string(), name.to_string()))
            .cloned())
    }

    async fn put(
        &self,
        container: &str,
        name: &str,
        data: Bytes,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError> {
        self.write(container, name, data, metadata, condition, false)
    }

    async fn set_metadata(
        &self,
        container: &str,
        name: &str,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError> {
        self.write(container, name, Bytes::new(), metadata, condition, true)
    }

    async fn list(&self, container: &str, prefix: &str) -> Result<Vec<BlobProperties>, StoreError> {
        self.up()?;
        let blobs = self.blobs.lock().expect("memory store lock");
        Ok(blobs
            .iter()
            .filter(|((c, n), _)| c == container && n.starts_with(prefix))
            .map(|(_, b)| b.properties.clone())
            .collect())
    }

    async fn delete(&self, container: &str, name: &str) -> Result<(), StoreError> {
        self.up()?;
        let mut blobs = self.blobs.lock().expect("memory store lock");
        blobs.remove(&(container.to_string(), name.to_string()));
        Ok(())
    }
}

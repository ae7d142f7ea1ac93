//! JSON documents in blobs, changed by read-modify-write under the blob's ETag.
//!
//! This is how the app keeps its state in storage rather than in process memory and still lets
//! two instances write the same blob: a writer reads the document and its ETag, applies its
//! change, and writes back only if the ETag is unchanged; otherwise it reads the newer version
//! and applies the change again. Changes must therefore be idempotent folds (see
//! `aggregate.rs`). A small write-through cache of (ETag, document) saves the read and the parse
//! when this process was the last writer, which is the normal case: a partition has one owner.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::AppError;
use hubhost_storage::{Condition, ETag, Metadata, SharedStore, StoreError};

/// Writers racing on one blob give up after this many lost races (each is a full re-read).
const MAX_ATTEMPTS: u32 = 32;

pub struct VersionedDocs<T> {
    store: SharedStore,
    container: String,
    capacity: usize,
    cache: Mutex<HashMap<String, (ETag, T)>>,
}

impl<T: Serialize + DeserializeOwned + Send + 'static> VersionedDocs<T> {
    pub fn new(store: SharedStore, container: &str, capacity: usize) -> Self {
        VersionedDocs {
            store,
            container: container.to_string(),
            capacity,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Reads the current version from storage.
    pub async fn load(&self, name: &str) -> Result<Option<(ETag, T)>, AppError> {
        let Some(blob) = self.store.get(&self.container, name).await? else {
            return Ok(None);
        };
        let doc = serde_json::from_slice(&blob.data).map_err(|e| AppError::CorruptState {
            name: format!("{}/{name}", self.container),
            reason: e.to_string(),
        })?;
        Ok(Some((blob.properties.etag, doc)))
    }

    /// Applies `change` to the document `name` (created by `init` if absent) and stores the
    /// result. `change` returns its result and whether it changed anything; it may run several
    /// times, each time on the latest stored version.
    pub async fn update<R>(
        &self,
        name: &str,
        init: impl Fn() -> T,
        mut change: impl FnMut(&mut T) -> (R, bool),
    ) -> Result<R, AppError> {
        for _ in 0..MAX_ATTEMPTS {
            let cached = self.cache.lock().expect("cache lock").remove(name);
            let (etag, mut doc) = match cached {
                Some((etag, doc)) => (Some(etag), doc),
                None => match self.load(name).await? {
                    Some((etag, doc)) => (Some(etag), doc),
                    None => (None, init()),
                },
            };
            let (result, changed) = change(&mut doc);
            if !changed && let Some(etag) = etag {
                self.remember(name, etag, doc);
                return Ok(result);
            }
            let data = Bytes::from(serde_json::to_vec(&doc).expect("documents serialize"));
            let condition = match &etag {
                Some(e) => Condition::IfMatch(e.clone()),
                None => Condition::IfNotExists,
            };
            match self
                .store
                .put(&self.container, name, data, &Metadata::new(), &condition)
                .await
            {
                Ok(written) => {
                    self.remember(name, written.etag, doc);
                    return Ok(result);
                }
                // Someone else wrote first: start again from their version.
                Err(StoreError::ConditionNotMet { .. } | StoreError::AlreadyExists { .. }) => {
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(AppError::Contention {
            name: format!("{}/{name}", self.container),
            attempts: MAX_ATTEMPTS,
        })
    }

    fn remember(&self, name: &str, etag: ETag, doc: T) {
        let mut cache = self.cache.lock().expect("cache lock");
        if cache.len() >= self.capacity {
            // Simple and good enough: the working set (a few windows per owned partition) is
            // rebuilt from storage on the next batches.
            cache.clear();
        }
        cache.insert(name.to_string(), (etag, doc));
    }
}

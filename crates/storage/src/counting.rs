//! A [`BlobStore`] decorator that counts the operations passing through it — how the
//! checkpoint benchmark measures the storage traffic of one instance (list, write, read).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    Blob, BlobProperties, BlobStore, Condition, Metadata, SharedStore, StoreError, WriteOutcome,
};

#[derive(Debug, Default)]
pub struct OperationCounts {
    pub lists: AtomicU64,
    pub reads: AtomicU64,
    /// Puts and metadata updates (each one storage request).
    pub writes: AtomicU64,
    pub deletes: AtomicU64,
}

impl OperationCounts {
    pub fn total(&self) -> u64 {
        self.lists.load(Ordering::Relaxed)
            + self.reads.load(Ordering::Relaxed)
            + self.writes.load(Ordering::Relaxed)
            + self.deletes.load(Ordering::Relaxed)
    }
}

pub struct CountingStore {
    inner: SharedStore,
    pub counts: Arc<OperationCounts>,
}

impl CountingStore {
    pub fn new(inner: SharedStore) -> Self {
        CountingStore {
            inner,
            counts: Arc::default(),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[async_trait]
impl BlobStore for CountingStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    async fn ensure_container(&self, container: &str) -> Result<(), StoreError> {
        self.inner.ensure_container(container).await
    }

    async fn get(&self, container: &str, name: &str) -> Result<Option<Blob>, StoreError> {
        bump(&self.counts.reads);
        self.inner.get(container, name).await
    }

    async fn put(
        &self,
        container: &str,
        name: &str,
        data: Bytes,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError> {
        bump(&self.counts.writes);
        self.inner
            .put(container, name, data, metadata, condition)
            .await
    }

    async fn set_metadata(
        &self,
        container: &str,
        name: &str,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError> {
        bump(&self.counts.writes);
        self.inner
            .set_metadata(container, name, metadata, condition)
            .await
    }

    async fn list(&self, container: &str, prefix: &str) -> Result<Vec<BlobProperties>, StoreError> {
        bump(&self.counts.lists);
        self.inner.list(container, prefix).await
    }

    async fn delete(&self, container: &str, name: &str) -> Result<(), StoreError> {
        bump(&self.counts.deletes);
        self.inner.delete(container, name).await
    }
}

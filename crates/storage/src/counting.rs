//! A [`BlobStore`] decorator that counts the operations passing through it — how the
//! benchmarks measure the storage traffic of one instance (list, write, read) — and the
//! requests Azure Blob Storage would bill for them, by transaction class and by what the blob
//! is (a kind the caller names from the blob's name: the store knows no layout).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

/// How Azure Blob Storage bills a request (general-purpose v2 accounts; the operations map to
/// these classes in "Map each REST operation to a price", learn.microsoft.com).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TransactionClass {
    /// Put Blob, Put Block, Put Block List.
    Write,
    /// List Blobs (one per page of up to 5,000 names) and Create Container.
    List,
    /// Get Blob.
    Read,
    /// Set Blob Metadata, Get Blob Properties and the rest.
    Other,
    /// Delete Blob: not billed.
    Free,
}

impl TransactionClass {
    pub const ALL: [TransactionClass; 5] = [
        TransactionClass::Write,
        TransactionClass::List,
        TransactionClass::Read,
        TransactionClass::Other,
        TransactionClass::Free,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TransactionClass::Write => "write",
            TransactionClass::List => "list",
            TransactionClass::Read => "read",
            TransactionClass::Other => "other",
            TransactionClass::Free => "free",
        }
    }
}

/// Names the kind of a blob from its name (`"ownership"`, `"window block"`, …); a kind is a
/// label of the counts, so the set of values must stay small.
pub type BlobKind = fn(&str) -> &'static str;

/// Blobs named in one List Blobs page (the service's maximum `maxresults`).
pub const LIST_PAGE: usize = 5_000;

/// The metric under which instances and handlers show their [`RequestCounts`].
pub const REQUESTS_METRIC: &str = "hubhost_storage_requests_total";
pub const REQUESTS_HELP: &str = "Blob storage requests as Azure bills them: by transaction class (write, list, read, other, free) and kind of blob.";

/// Requests by (kind, class), as Azure would bill them.
#[derive(Debug, Default)]
pub struct RequestCounts {
    counts: Mutex<BTreeMap<(&'static str, TransactionClass), u64>>,
}

impl RequestCounts {
    fn add(&self, kind: &'static str, class: TransactionClass, n: u64) {
        *self
            .counts
            .lock()
            .expect("request counts lock")
            .entry((kind, class))
            .or_default() += n;
    }

    /// The counts as metric samples: labels `kind` and `class`, the requests.
    pub fn samples(&self) -> Vec<(Vec<(&'static str, &'static str)>, f64)> {
        self.snapshot()
            .into_iter()
            .map(|(kind, class, n)| (vec![("kind", kind), ("class", class.as_str())], n as f64))
            .collect()
    }

    /// The counts so far: (kind, class, requests).
    pub fn snapshot(&self) -> Vec<(&'static str, TransactionClass, u64)> {
        self.counts
            .lock()
            .expect("request counts lock")
            .iter()
            .map(|((kind, class), n)| (*kind, *class, *n))
            .collect()
    }
}

pub struct CountingStore {
    inner: SharedStore,
    pub counts: Arc<OperationCounts>,
    pub requests: Arc<RequestCounts>,
    kind: BlobKind,
}

impl CountingStore {
    /// Counts every blob as kind `"blob"`.
    pub fn new(inner: SharedStore) -> Self {
        Self::with_kinds(inner, |_| "blob")
    }

    /// Counts requests per kind of blob, as `kind` names them.
    pub fn with_kinds(inner: SharedStore, kind: BlobKind) -> Self {
        CountingStore {
            inner,
            counts: Arc::default(),
            requests: Arc::default(),
            kind,
        }
    }

    fn bill(&self, name: &str, class: TransactionClass) {
        self.requests.add((self.kind)(name), class, 1);
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
        self.requests.add("container", TransactionClass::List, 1);
        self.inner.ensure_container(container).await
    }

    async fn get(&self, container: &str, name: &str) -> Result<Option<Blob>, StoreError> {
        bump(&self.counts.reads);
        self.bill(name, TransactionClass::Read);
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
        self.bill(name, TransactionClass::Write);
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
        self.bill(name, TransactionClass::Other);
        self.inner
            .set_metadata(container, name, metadata, condition)
            .await
    }

    async fn list(&self, container: &str, prefix: &str) -> Result<Vec<BlobProperties>, StoreError> {
        bump(&self.counts.lists);
        let listed = self.inner.list(container, prefix).await;
        // The service pages a listing: one billed request per 5,000 names, at least one.
        let pages = listed
            .as_ref()
            .map_or(1, |l| l.len().div_ceil(LIST_PAGE).max(1));
        self.requests
            .add((self.kind)(prefix), TransactionClass::List, pages as u64);
        listed
    }

    async fn delete(&self, container: &str, name: &str) -> Result<(), StoreError> {
        bump(&self.counts.deletes);
        self.bill(name, TransactionClass::Free);
        self.inner.delete(container, name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;

    fn kind(name: &str) -> &'static str {
        if name.starts_with("a/") { "a" } else { "b" }
    }

    #[tokio::test]
    async fn requests_are_billed_by_class_and_kind_and_listings_by_page() {
        let store = CountingStore::with_kinds(Arc::new(MemoryStore::default()), kind);
        store.ensure_container("box").await.unwrap();
        let none = Metadata::new();
        for i in 0..(LIST_PAGE + 1) {
            let name = format!("a/{i:05}");
            store
                .put("box", &name, Bytes::new(), &none, &Condition::Always)
                .await
                .unwrap();
        }
        store
            .set_metadata("box", "a/00000", &none, &Condition::Always)
            .await
            .unwrap();
        store.get("box", "b/missing").await.unwrap();
        assert_eq!(store.list("box", "a/").await.unwrap().len(), LIST_PAGE + 1);
        store.list("box", "b/").await.unwrap();
        store.delete("box", "a/00001").await.unwrap();
        use TransactionClass::*;
        assert_eq!(
            store.requests.snapshot(),
            vec![
                ("a", Write, LIST_PAGE as u64 + 1),
                ("a", List, 2),
                ("a", Other, 1),
                ("a", Free, 1),
                ("b", List, 1),
                ("b", Read, 1),
                ("container", List, 1),
            ]
        );
        assert_eq!(store.counts.total(), LIST_PAGE as u64 + 1 + 1 + 1 + 2 + 1);
    }
}

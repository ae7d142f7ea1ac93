//! Blob storage behind one trait, and the queue and table services of the same accounts.
//!
//! Everything hubhost persists — aggregates, archives, dead letters, and later checkpoints and
//! ownership — goes through [`BlobStore`]. Three backends implement it: a local directory (the
//! embedded default, no account needed), Azure Blob Storage (real Azure or Azurite), and memory
//! (for fast tests of pure logic). The trait speaks Azure's vocabulary on purpose: ETags,
//! conditional writes (`If-Match`, `If-None-Match: *`), user metadata and prefix listings, so
//! that code written against it behaves the same against the cloud and against a folder.
//!
//! [`queue::QueueService`] and [`table::TableService`] are the queue and table services of an
//! Azure account (or Azurite), with only what the emulated host's queue and table outputs need.

pub(crate) mod azure;
pub mod connection;
pub mod counting;
pub mod local;
pub mod memory;
pub mod queue;
mod rest;
pub mod settings;
pub mod table;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};

pub use connection::StorageConnection;

/// An opaque version stamp of one blob; it changes on every write.
///
/// Stored without the surrounding quotes Azure puts on ETags in response headers, so that values
/// from listings and from write responses compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ETag(String);

impl ETag {
    pub fn new(value: impl Into<String>) -> Self {
        let value = value.into();
        ETag(value.trim_matches('"').to_string())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// User metadata of a blob. Keys are lowercase by convention (Azure and the checkpoint formats
/// require it), values are ASCII.
pub type Metadata = BTreeMap<String, String>;

/// What a listing or a read tells about a blob besides its content.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobProperties {
    pub name: String,
    pub etag: ETag,
    pub last_modified: DateTime<Utc>,
    pub metadata: Metadata,
    pub size: u64,
}

#[derive(Debug, Clone)]
pub struct Blob {
    pub properties: BlobProperties,
    pub data: Bytes,
}

/// The result of a successful write.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteOutcome {
    pub etag: ETag,
    pub last_modified: DateTime<Utc>,
}

/// Optimistic-concurrency precondition of a write.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// Write whatever is there.
    Always,
    /// Create only: fails with [`StoreError::AlreadyExists`] if the blob exists.
    IfNotExists,
    /// Replace only the version we saw: fails with [`StoreError::ConditionNotMet`] otherwise
    /// (also when the blob no longer exists).
    IfMatch(ETag),
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("blob '{container}/{name}' was changed by another writer (its ETag no longer matches)")]
    ConditionNotMet { container: String, name: String },
    #[error("blob '{container}/{name}' already exists")]
    AlreadyExists { container: String, name: String },
    #[error("blob '{container}/{name}' does not exist")]
    NotFound { container: String, name: String },
    #[error("invalid blob or container name '{name}': {reason}")]
    InvalidName { name: String, reason: String },
    #[error("blob '{container}/{name}' is unreadable: {reason}")]
    Corrupt {
        container: String,
        name: String,
        reason: String,
    },
    /// Temporary: the store is unreachable, overloaded or throttling. Retrying later can work.
    #[error("storage is unavailable: {0}")]
    Unavailable(String),
    /// Permanent refusal (authentication, authorization, bad request): retrying will not help.
    #[error("storage refused the request ({status} {code}): {message}")]
    Rejected {
        status: u16,
        code: String,
        message: String,
    },
}

impl StoreError {
    /// Whether retrying the same operation later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// A description for logs and error messages. Never contains a secret.
    fn describe(&self) -> String;

    /// Creates the container if it does not exist yet.
    async fn ensure_container(&self, container: &str) -> Result<(), StoreError>;

    /// Reads a blob; `None` if it does not exist.
    async fn get(&self, container: &str, name: &str) -> Result<Option<Blob>, StoreError>;

    /// Writes a whole blob with its metadata, under `condition`.
    async fn put(
        &self,
        container: &str,
        name: &str,
        data: Bytes,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError>;

    /// Replaces the metadata of an existing blob (content unchanged, new ETag).
    /// Fails with [`StoreError::NotFound`] if the blob does not exist.
    async fn set_metadata(
        &self,
        container: &str,
        name: &str,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<WriteOutcome, StoreError>;

    /// Lists the blobs whose names start with `prefix`, with their metadata, in name order.
    async fn list(&self, container: &str, prefix: &str) -> Result<Vec<BlobProperties>, StoreError>;

    /// Deletes a blob. Deleting a blob that does not exist is not an error.
    async fn delete(&self, container: &str, name: &str) -> Result<(), StoreError>;
}

pub type SharedStore = Arc<dyn BlobStore>;

/// Where blobs live, as a user names it: a connection string or a directory.
#[derive(Clone)]
pub enum StorageLocation {
    Directory(PathBuf),
    Azure(StorageConnection),
    Memory,
}

impl StorageLocation {
    /// Interprets a user-supplied value: anything with `=` is a connection string, an
    /// `https://` URL a blob service signed in to with Entra ID, `memory:` the in-memory store,
    /// anything else a directory.
    pub fn parse(value: &str) -> Result<Self, connection::ConnectionStringError> {
        let value = value.trim();
        if value == "memory:" {
            Ok(StorageLocation::Memory)
        } else if value.contains('=') {
            Ok(StorageLocation::Azure(StorageConnection::parse(value)?))
        } else if value.starts_with("https://") || value.starts_with("http://") {
            // Without settings to say which identity: the default chain.
            Ok(StorageLocation::Azure(StorageConnection::entra_id(
                value,
                hubhost_identity::IdentityChoice::Default,
            )?))
        } else {
            Ok(StorageLocation::Directory(PathBuf::from(value)))
        }
    }

    pub fn open(&self) -> Result<SharedStore, StoreError> {
        Ok(match self {
            StorageLocation::Directory(dir) => Arc::new(local::LocalDirStore::open(dir)?),
            StorageLocation::Azure(conn) => Arc::new(azure::AzureBlobStore::new(conn.clone())?),
            StorageLocation::Memory => Arc::new(memory::MemoryStore::default()),
        })
    }
}

impl fmt::Debug for StorageLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageLocation::Directory(d) => write!(f, "directory {}", d.display()),
            StorageLocation::Azure(c) => write!(f, "{c:?}"),
            StorageLocation::Memory => f.write_str("memory"),
        }
    }
}

/// Checks a blob name against the rules all backends share. The rules are stricter than
/// Azure's so that every name is also a safe relative path: no empty, `.` or `..` segments, no
/// backslashes, no control characters, at most 1024 characters.
pub fn validate_blob_name(name: &str) -> Result<(), StoreError> {
    let invalid = |reason: &str| StoreError::InvalidName {
        name: name.chars().take(200).collect(),
        reason: reason.to_string(),
    };
    if name.is_empty() {
        return Err(invalid("a blob name cannot be empty"));
    }
    if name.len() > 1024 {
        return Err(invalid("a blob name is at most 1024 characters"));
    }
    if name.contains('\\') {
        return Err(invalid("a blob name cannot contain a backslash"));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err(invalid("a blob name cannot contain control characters"));
    }
    for segment in name.split('/') {
        match segment {
            "" => return Err(invalid("a blob name cannot have empty path segments")),
            "." | ".." => return Err(invalid("a blob name cannot contain '.' or '..' segments")),
            s if s.starts_with(".hubhost") => {
                return Err(invalid(
                    "a blob name segment cannot start with '.hubhost' (reserved)",
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Azure's rule for container and queue names: 3–63 characters, lowercase letters, digits and
/// single hyphens, starting and ending with a letter or digit.
pub(crate) fn is_lowercase_dns_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// Azure's container naming rules: 3–63 characters, lowercase letters, digits and single
/// hyphens, starting and ending with a letter or digit.
pub fn validate_container_name(name: &str) -> Result<(), StoreError> {
    if is_lowercase_dns_name(name) {
        Ok(())
    } else {
        Err(StoreError::InvalidName {
            name: name.to_string(),
            reason: "a container name has 3-63 lowercase letters, digits or single hyphens, \
                     and starts and ends with a letter or digit"
                .to_string(),
        })
    }
}

/// Same keys rule as Azure: metadata names are C# identifiers; we also require lowercase
/// because the checkpoint formats and Azure's SDKs do.
pub fn validate_metadata(metadata: &Metadata) -> Result<(), StoreError> {
    for (key, value) in metadata {
        let key_ok = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !key.as_bytes()[0].is_ascii_digit();
        if !key_ok {
            return Err(StoreError::InvalidName {
                name: key.clone(),
                reason:
                    "metadata keys are lowercase letters, digits and '_', not starting with a digit"
                        .to_string(),
            });
        }
        if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(StoreError::InvalidName {
                name: key.clone(),
                reason: "metadata values must be printable ASCII".to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_names_that_escape_a_directory_are_refused() {
        for bad in [
            "", "../x", "a/../b", "a//b", "/a", "a/", "a\\b", "./a", "a\u{0}b",
        ] {
            assert!(
                validate_blob_name(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
        for good in [
            "ns.servicebus.windows.net/hub/$default/checkpoint/0",
            "windows/sensors/2026-11-22/1330/p3.json",
            "a..b/c",
        ] {
            validate_blob_name(good).unwrap();
        }
    }

    #[test]
    fn container_names_follow_azure_rules() {
        validate_container_name("azure-webjobs-eventhub").unwrap();
        for bad in ["ab", "Abc", "a--b", "-ab", "ab-", "a_b"] {
            assert!(validate_container_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn metadata_keys_are_lowercase_identifiers() {
        let mut m = Metadata::new();
        m.insert("sequencenumber".into(), "12".into());
        validate_metadata(&m).unwrap();
        m.insert("OwnerId".into(), "x".into());
        assert!(validate_metadata(&m).is_err());
    }
}

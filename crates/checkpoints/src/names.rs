//! Blob names of the checkpoint store, exactly as the Functions host and the Azure SDKs spell
//! them (docs/checkpoint-blobs.md):
//!
//! - current: `{namespace}/{hub}/{consumergroup}/ownership/{partition}` and
//!   `…/checkpoint/{partition}`, the whole prefix lowercased (the .NET store and the Python SDK
//!   call `ToLowerInvariant()` / `.lower()`; the Rust SDK does not, and so cannot read what the
//!   host wrote for `$Default` — we follow the host);
//! - legacy (EventProcessorHost, extension v3/v4): `{namespace}/{hub}/{consumerGroup}/{partition}`,
//!   namespace and hub escaped by `EscapeBlobPath` (lowercased), the consumer group as is.
//!
//! Every part is checked before it becomes a name: a hub or partition such as `..` or `a/b`
//! would otherwise address blobs (or, on the local backend, files) outside the store.

use crate::CheckpointError;

/// Which event hub and consumer group a set of ownerships and checkpoints belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConsumerGroupKey {
    /// Fully qualified namespace, e.g. `myns.servicebus.windows.net`.
    pub namespace: String,
    pub event_hub: String,
    pub consumer_group: String,
}

impl ConsumerGroupKey {
    /// Checks the three parts; see [`validate_part`].
    pub fn new(
        namespace: impl Into<String>,
        event_hub: impl Into<String>,
        consumer_group: impl Into<String>,
    ) -> Result<Self, CheckpointError> {
        let key = ConsumerGroupKey {
            namespace: namespace.into(),
            event_hub: event_hub.into(),
            consumer_group: consumer_group.into(),
        };
        validate_part("namespace", &key.namespace)?;
        validate_part("event hub", &key.event_hub)?;
        validate_part("consumer group", &key.consumer_group)?;
        Ok(key)
    }

    /// `{namespace}/{hub}/{consumergroup}/`, lowercased: the prefix of the current format.
    pub fn prefix(&self) -> String {
        format!(
            "{}/{}/{}/",
            self.namespace, self.event_hub, self.consumer_group
        )
        .to_lowercase()
    }

    pub fn ownership_prefix(&self) -> String {
        format!("{}ownership/", self.prefix())
    }

    pub fn checkpoint_prefix(&self) -> String {
        format!("{}checkpoint/", self.prefix())
    }

    /// hubhost's scale controller's recent decisions, under a folder of hubhost's own
    /// ([`HUBHOST_RECORDS`]), outside every layout the host and the SDKs read: beside the
    /// current format's folders it sat where the legacy layout keeps a partition's checkpoint
    /// (`{namespace}/{hub}/{group}/{partition}`), and readers of that layout took it for one.
    pub fn scale_history_blob(&self) -> String {
        format!(
            "{HUBHOST_RECORDS}scale-history/{}/{}/{}.json",
            self.namespace, self.event_hub, self.consumer_group
        )
        .to_lowercase()
    }

    /// The partition id is not lowercased: the SDKs lowercase the whole name, but partition
    /// ids are digits, and a listing reports the name as stored.
    pub fn ownership_blob(&self, partition: &str) -> Result<String, CheckpointError> {
        validate_part("partition id", partition)?;
        Ok(format!(
            "{}{}",
            self.ownership_prefix(),
            partition.to_lowercase()
        ))
    }

    pub fn checkpoint_blob(&self, partition: &str) -> Result<String, CheckpointError> {
        validate_part("partition id", partition)?;
        Ok(format!(
            "{}{}",
            self.checkpoint_prefix(),
            partition.to_lowercase()
        ))
    }

    /// The directory of EventProcessorHost's lease blobs for this consumer group.
    pub fn legacy_prefix(&self) -> String {
        format!(
            "{}/{}/{}/",
            escape_blob_path(&self.namespace),
            escape_blob_path(&self.event_hub),
            self.consumer_group
        )
    }

    /// Where the v5 extension looks for a legacy blob when it reads one (`"{0}/{1}/{2}/"`
    /// without lowercasing). Differs from [`Self::legacy_prefix`] only for names with
    /// uppercase or unusual characters; we read both.
    pub fn legacy_prefix_as_given(&self) -> String {
        format!(
            "{}/{}/{}/",
            self.namespace, self.event_hub, self.consumer_group
        )
    }

    pub fn legacy_blob(&self, partition: &str) -> Result<String, CheckpointError> {
        validate_part("partition id", partition)?;
        Ok(format!("{}{}", self.legacy_prefix(), partition))
    }
}

impl std::fmt::Display for ConsumerGroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} consumer group {}",
            self.namespace, self.event_hub, self.consumer_group
        )
    }
}

/// A namespace, hub, consumer group or partition id must be one path segment: not empty, not
/// `.` or `..`, no `/`, `\` or control characters, at most 256 characters.
pub fn validate_part(what: &'static str, value: &str) -> Result<(), CheckpointError> {
    let invalid = |reason: &'static str| CheckpointError::InvalidName {
        what,
        value: value.chars().take(100).collect(),
        reason,
    };
    if value.is_empty() {
        return Err(invalid("it is empty"));
    }
    if value.len() > 256 {
        return Err(invalid("it is longer than 256 characters"));
    }
    if value == "." || value == ".." {
        return Err(invalid("'.' and '..' would address another directory"));
    }
    if value.contains('/') || value.contains('\\') {
        return Err(invalid("it contains '/' or '\\'"));
    }
    if value.chars().any(char::is_control) {
        return Err(invalid("it contains control characters"));
    }
    Ok(())
}

/// The Functions extension's `EscapeBlobPath`: lowercase letters, digits, `-`, `_` and `.` are
/// kept, uppercase letters lowercased, anything else written as `:xx` (or `::xxxx` beyond
/// U+00FF).
pub fn escape_blob_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            'a'..='z' | '0'..='9' | '-' | '_' | '.' => out.push(c),
            'A'..='Z' => out.push(c.to_ascii_lowercase()),
            c if (c as u32) <= 0xff => out.push_str(&format!(":{:02x}", c as u32)),
            c => out.push_str(&format!("::{:04x}", c as u32)),
        }
    }
    out
}

/// The folder of the checkpoint container that holds hubhost's own records. Names there start
/// with no namespace (a namespace has a dot or is `localhost`), so no SDK or host layout
/// lists them.
pub const HUBHOST_RECORDS: &str = "hubhost/";

/// The partition id of a blob name: the text after the last `/`, as every SDK does.
pub fn partition_of(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// What a blob of the checkpoint store is, from its name (a label of the storage request
/// counts): `ownership`, `checkpoint`, `scale history` or `other` (e.g. the legacy layouts).
pub fn blob_kind(name: &str) -> &'static str {
    if name.contains("/ownership/") || name.ends_with("/ownership") {
        "ownership"
    } else if name.contains("/checkpoint/") || name.ends_with("/checkpoint") {
        "checkpoint"
    } else if name.starts_with(HUBHOST_RECORDS) && name.contains("/scale-history/") {
        "scale history"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ConsumerGroupKey {
        ConsumerGroupKey::new("MyNs.servicebus.windows.net", "Sensors", "$Default").unwrap()
    }

    #[test]
    fn each_blob_of_the_store_has_its_kind() {
        let k = key();
        assert_eq!(blob_kind(&k.ownership_blob("3").unwrap()), "ownership");
        assert_eq!(blob_kind(&k.ownership_prefix()), "ownership");
        assert_eq!(blob_kind(&k.checkpoint_blob("3").unwrap()), "checkpoint");
        assert_eq!(blob_kind(&k.scale_history_blob()), "scale history");
        assert_eq!(blob_kind("myns/sensors/$Default/3"), "other");
    }

    #[test]
    fn hubhosts_own_records_are_outside_the_sdk_and_legacy_layouts() {
        let k = key();
        let history = k.scale_history_blob();
        for layout in [k.prefix(), k.legacy_prefix()] {
            assert!(
                !history.to_lowercase().starts_with(&layout.to_lowercase()),
                "{history} is under {layout}"
            );
        }
        assert!(history.starts_with(HUBHOST_RECORDS), "{history}");
    }

    #[test]
    fn current_names_are_lowercased_like_the_host_and_python() {
        let k = key();
        assert_eq!(
            k.ownership_blob("3").unwrap(),
            "myns.servicebus.windows.net/sensors/$default/ownership/3"
        );
        assert_eq!(
            k.checkpoint_blob("15").unwrap(),
            "myns.servicebus.windows.net/sensors/$default/checkpoint/15"
        );
    }

    #[test]
    fn legacy_names_escape_namespace_and_hub_but_keep_the_consumer_group() {
        let k = key();
        assert_eq!(
            k.legacy_blob("0").unwrap(),
            "myns.servicebus.windows.net/sensors/$Default/0"
        );
        assert_eq!(escape_blob_path("a b$É€"), "a:20b:24:c9::20ac");
    }

    #[test]
    fn parts_that_would_escape_the_store_are_refused_with_the_reason() {
        for (ns, hub, cg) in [
            ("..", "h", "c"),
            ("n", "a/b", "c"),
            ("n", "h", "a\\b"),
            ("n", "", "c"),
            ("n", "h", "x\ny"),
        ] {
            let err = ConsumerGroupKey::new(ns, hub, cg).unwrap_err();
            assert!(err.to_string().contains("cannot be used"), "{err}");
        }
        for p in ["..", ".", "1/2", "", "a\\b"] {
            assert!(key().checkpoint_blob(p).is_err(), "{p:?}");
            assert!(key().ownership_blob(p).is_err(), "{p:?}");
        }
    }

    #[test]
    fn partition_is_the_last_segment() {
        assert_eq!(partition_of("ns/hub/$default/ownership/12"), "12");
    }
}

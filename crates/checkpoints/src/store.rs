//! `CheckpointStore`: ownership claims under ETags, checkpoints written forward only, legacy
//! checkpoints read, and the scale controller's records — every request the processor, the
//! scale controller and `hubhost checkpoints` make to the blobs, on any `BlobStore` backend.

use chrono::{DateTime, Utc};
use futures::future::join_all;

use hubhost_storage::{BlobStore, Condition, ETag, Metadata, SharedStore, StoreError};

use crate::legacy::{self, LegacyCheckpoint};
use crate::names::{self, ConsumerGroupKey};
use crate::position::{self, InitialPosition, Start};

/// The Functions host's default container (`EventHubOptions.LeaseContainerName`).
pub const DEFAULT_CONTAINER: &str = "azure-webjobs-eventhub";
const OWNER_ID: &str = "ownerid";
/// hubhost's own key on an ownership blob: the expiry, in milliseconds, its owner vouches to
/// renew within. The host and the SDKs read only `ownerid` and replace the whole metadata when
/// they claim, so a record without it is a foreign owner's (see `processor::balancer`).
const VOUCHED_EXPIRY_MS: &str = "hubhostexpiryms";
const OFFSET: &str = "offset";
const SEQUENCE_NUMBER: &str = "sequencenumber";

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("the {what} {value:?} cannot be used in a checkpoint blob name: {reason}")]
    InvalidName {
        what: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error(
        "checkpoint blob '{blob}' is unusable: {problem}; fix or reset it (hubhost checkpoints reset)"
    )]
    BadCheckpoint { blob: String, problem: String },
    #[error("legacy checkpoint blob '{blob}' is unusable: {problem}")]
    BadLegacyCheckpoint { blob: String, problem: String },
    #[error("a checkpoint needs an offset or a sequence number (partition {partition_id})")]
    EmptyCheckpoint { partition_id: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl CheckpointError {
    pub fn is_transient(&self) -> bool {
        matches!(self, CheckpointError::Store(e) if e.is_transient())
    }
}

/// One partition's ownership record as read from the store.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionOwnership {
    pub partition_id: String,
    /// Empty when the last owner relinquished the partition (graceful shutdown).
    pub owner_id: String,
    /// The version a claim of this partition must present.
    pub etag: ETag,
    pub last_modified: DateTime<Utc>,
    /// The expiry its owner vouched for (hubhost instances write theirs); `None` for owners
    /// that do not (the Functions host, the SDK processors) or an unreadable value.
    pub vouched_expiry: Option<std::time::Duration>,
}

/// How long an ownership whose owner vouched for no expiry stays active without renewal, by
/// default: the longest default among the peers that may share a consumer group — the Python
/// SDK's 180 s (6 × its 30 s interval); the Functions host, .NET and Java use 2 minutes, Go,
/// JavaScript and Rust 60 s. The balancer waits this long before taking such a partition, and
/// the page and `hubhost checkpoints` show such an owner as active for as long.
pub const FOREIGN_OWNERSHIP_EXPIRY: std::time::Duration = std::time::Duration::from_secs(180);

/// A vouched expiry below this is read as this: a record claiming to expire at once would let
/// every instance take it every cycle.
const MIN_VOUCHED_EXPIRY: std::time::Duration = std::time::Duration::from_secs(1);

impl PartitionOwnership {
    /// Whether `owner_id` still holds the partition at `now`: the owner is set and has renewed
    /// within `expiry`.
    pub fn is_active(&self, now: DateTime<Utc>, expiry: std::time::Duration) -> bool {
        !self.owner_id.is_empty()
            && now.signed_duration_since(self.last_modified)
                < chrono::Duration::from_std(expiry).unwrap_or(chrono::Duration::MAX)
    }

    /// How long this record stays active without renewal: what its owner vouched for (at
    /// least a second), else `foreign_expiry` — the owner is the Functions host or an SDK
    /// processor, judged by the longest expiry its protocol may use.
    pub fn expiry(&self, foreign_expiry: std::time::Duration) -> std::time::Duration {
        self.vouched_expiry
            .map_or(foreign_expiry, |v| v.max(MIN_VOUCHED_EXPIRY))
    }

    /// [`is_active`](Self::is_active) by the record's own [`expiry`](Self::expiry).
    pub fn is_live(&self, now: DateTime<Utc>, foreign_expiry: std::time::Duration) -> bool {
        self.is_active(now, self.expiry(foreign_expiry))
    }
}

/// A request to own a partition (or to renew, or, with an empty owner, to let it go).
#[derive(Debug, Clone, PartialEq)]
pub struct OwnershipClaim {
    pub partition_id: String,
    pub owner_id: String,
    /// The ETag the claimant last saw; `None` claims a partition that has no ownership blob yet.
    pub etag: Option<ETag>,
    /// The expiry the claimant vouches to renew within, written beside `ownerid` so that
    /// other hubhost instances may judge it by that instead of the foreign default.
    pub vouched_expiry: Option<std::time::Duration>,
}

/// What became of a batch of ownership claims, partition by partition.
#[derive(Debug, Default)]
pub struct ClaimOutcome {
    /// Claims written, with the ETags they now hold.
    pub won: Vec<PartitionOwnership>,
    /// Claims another writer beat (a stale ETag, or created first).
    pub lost: Vec<String>,
    /// Claims the store could not decide; the partition's ownership is unknown this cycle.
    pub failed: Vec<(String, CheckpointError)>,
}

/// Where a partition's processing stopped: the last event processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub partition_id: String,
    pub offset: Option<String>,
    pub sequence_number: Option<i64>,
    /// When it was written (known for checkpoints read from the store).
    pub last_modified: Option<DateTime<Utc>>,
}

impl Checkpoint {
    pub fn new(
        partition_id: impl Into<String>,
        offset: Option<String>,
        sequence_number: i64,
    ) -> Self {
        Checkpoint {
            partition_id: partition_id.into(),
            offset,
            sequence_number: Some(sequence_number),
            last_modified: None,
        }
    }

    /// The position before the first event: the service reads "after offset -1" as the start
    /// of the partition, and so do the Functions host and the SDKs reading this checkpoint.
    pub fn at_start(partition_id: impl Into<String>) -> Self {
        Checkpoint::new(partition_id, Some("-1".to_string()), -1)
    }
}

/// Checkpoints that could be read, and the problems with the ones that could not.
#[derive(Debug)]
pub struct Listing<T> {
    pub items: Vec<T>,
    pub problems: Vec<CheckpointError>,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Listing {
            items: Vec::new(),
            problems: Vec::new(),
        }
    }
}

#[derive(Clone)]
pub struct CheckpointStore {
    blobs: SharedStore,
    container: String,
}

impl CheckpointStore {
    pub fn new(blobs: SharedStore, container: impl Into<String>) -> Self {
        CheckpointStore {
            blobs,
            container: container.into(),
        }
    }

    pub fn describe(&self) -> String {
        format!("{} container {}", self.blobs.describe(), self.container)
    }

    pub fn blobs(&self) -> &dyn BlobStore {
        &*self.blobs
    }

    pub async fn ensure_container(&self) -> Result<(), CheckpointError> {
        Ok(self.blobs.ensure_container(&self.container).await?)
    }

    /// The scale controller's recent decisions for the consumer group, oldest first (empty when
    /// it never ran, or the record cannot be read: it is for display only). The records are the
    /// controller's (`hubhost_host::scale::ScalePoint`); the store reads them as `P`.
    pub async fn scale_history<P: serde::de::DeserializeOwned>(
        &self,
        key: &ConsumerGroupKey,
    ) -> Result<Vec<P>, CheckpointError> {
        let blob = self
            .blobs
            .get(&self.container, &key.scale_history_blob())
            .await?;
        Ok(blob
            .and_then(|b| serde_json::from_slice(&b.data).ok())
            .unwrap_or_default())
    }

    /// Replaces the scale history with `points` (the caller keeps the last few).
    pub async fn write_scale_history<P: serde::Serialize>(
        &self,
        key: &ConsumerGroupKey,
        points: &[P],
    ) -> Result<(), CheckpointError> {
        let data = serde_json::to_vec(points).expect("scale points serialize");
        self.blobs
            .put(
                &self.container,
                &key.scale_history_blob(),
                data.into(),
                &Metadata::new(),
                &Condition::Always,
            )
            .await?;
        Ok(())
    }

    /// The consumer groups of `hub` that keep ownership or checkpoints in this store, as
    /// their blob names spell them (lowercased).
    pub async fn consumer_groups(
        &self,
        namespace: &str,
        hub: &str,
    ) -> Result<Vec<String>, CheckpointError> {
        let prefix = format!("{namespace}/{hub}/").to_lowercase();
        let mut groups = std::collections::BTreeSet::new();
        for blob in self.blobs.list(&self.container, &prefix).await? {
            let mut parts = blob.name[prefix.len()..].splitn(3, '/');
            if let (Some(group), Some("ownership" | "checkpoint")) = (parts.next(), parts.next()) {
                groups.insert(group.to_string());
            }
        }
        Ok(groups.into_iter().collect())
    }

    /// Every ownership record of the consumer group, relinquished and expired ones included.
    pub async fn list_ownership(
        &self,
        key: &ConsumerGroupKey,
    ) -> Result<Vec<PartitionOwnership>, CheckpointError> {
        let listed = self
            .blobs
            .list(&self.container, &key.ownership_prefix())
            .await?;
        Ok(listed
            .into_iter()
            .map(|b| PartitionOwnership {
                partition_id: names::partition_of(&b.name).to_string(),
                // A blob without `ownerid` (written by hand, or half-migrated) owns nothing.
                owner_id: b.metadata.get(OWNER_ID).cloned().unwrap_or_default(),
                vouched_expiry: b
                    .metadata
                    .get(VOUCHED_EXPIRY_MS)
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .map(std::time::Duration::from_millis),
                etag: b.etag,
                last_modified: b.last_modified,
            })
            .collect())
    }

    /// Tries every claim at once; returns the ownerships won, with their new ETags. A claim
    /// whose ETag is stale (or whose partition someone else created first) is simply absent
    /// from the result. Any other failure is an error.
    pub async fn claim_ownership(
        &self,
        key: &ConsumerGroupKey,
        claims: &[OwnershipClaim],
    ) -> Result<Vec<PartitionOwnership>, CheckpointError> {
        let outcome = self.try_claim_ownership(key, claims).await;
        match outcome.failed.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(outcome.won),
        }
    }

    /// Tries every claim at once and reports each: a claim that failed (the store did not
    /// answer, a blob's lock was held too long) neither wins nor loses its partition, so one
    /// bad blob does not void the renewals of all the others. The load balancer uses this.
    pub async fn try_claim_ownership(
        &self,
        key: &ConsumerGroupKey,
        claims: &[OwnershipClaim],
    ) -> ClaimOutcome {
        let attempts = claims.iter().map(|claim| self.claim_one(key, claim));
        let mut outcome = ClaimOutcome::default();
        for (claim, result) in claims.iter().zip(join_all(attempts).await) {
            match result {
                Ok(Some(ownership)) => outcome.won.push(ownership),
                Ok(None) => outcome.lost.push(claim.partition_id.clone()),
                Err(e) => outcome.failed.push((claim.partition_id.clone(), e)),
            }
        }
        outcome
    }

    async fn claim_one(
        &self,
        key: &ConsumerGroupKey,
        claim: &OwnershipClaim,
    ) -> Result<Option<PartitionOwnership>, CheckpointError> {
        let name = key.ownership_blob(&claim.partition_id)?;
        let mut metadata = Metadata::new();
        metadata.insert(OWNER_ID.to_string(), claim.owner_id.clone());
        if let Some(expiry) = claim.vouched_expiry {
            metadata.insert(
                VOUCHED_EXPIRY_MS.to_string(),
                expiry.as_millis().to_string(),
            );
        }
        let written = match &claim.etag {
            Some(etag) => {
                self.blobs
                    .set_metadata(
                        &self.container,
                        &name,
                        &metadata,
                        &Condition::IfMatch(etag.clone()),
                    )
                    .await
            }
            None => {
                self.blobs
                    .put(
                        &self.container,
                        &name,
                        bytes::Bytes::new(),
                        &metadata,
                        &Condition::IfNotExists,
                    )
                    .await
            }
        };
        match written {
            Ok(outcome) => Ok(Some(PartitionOwnership {
                partition_id: claim.partition_id.clone(),
                owner_id: claim.owner_id.clone(),
                etag: outcome.etag,
                last_modified: outcome.last_modified,
                vouched_expiry: claim.vouched_expiry,
            })),
            Err(
                StoreError::ConditionNotMet { .. }
                | StoreError::AlreadyExists { .. }
                // The blob we saw was deleted: our ETag can no longer match anything.
                | StoreError::NotFound { .. },
            ) => {
                tracing::debug!(partition = %claim.partition_id, owner = %claim.owner_id, "lost an ownership claim");
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Lets a partition go on graceful shutdown, as the SDKs do: the owner is cleared (under
    /// the ETag we hold), so others may claim it at once instead of waiting for it to expire.
    /// Returns whether we still held it.
    pub async fn relinquish(
        &self,
        key: &ConsumerGroupKey,
        ownership: &PartitionOwnership,
    ) -> Result<bool, CheckpointError> {
        let claim = OwnershipClaim {
            partition_id: ownership.partition_id.clone(),
            owner_id: String::new(),
            etag: Some(ownership.etag.clone()),
            vouched_expiry: None,
        };
        Ok(self.claim_one(key, &claim).await?.is_some())
    }

    /// Every current checkpoint of the consumer group; unreadable ones are reported, not fatal.
    pub async fn list_checkpoints(
        &self,
        key: &ConsumerGroupKey,
    ) -> Result<Listing<Checkpoint>, CheckpointError> {
        let listed = self
            .blobs
            .list(&self.container, &key.checkpoint_prefix())
            .await?;
        let mut listing = Listing::default();
        for b in listed {
            let partition = names::partition_of(&b.name).to_string();
            match checkpoint_from_metadata(&b.name, partition, &b.metadata, b.last_modified) {
                Ok(cp) => listing.items.push(cp),
                Err(e) => listing.problems.push(e),
            }
        }
        Ok(listing)
    }

    /// One partition's current checkpoint; an unreadable one is an error naming the blob.
    pub async fn get_checkpoint(
        &self,
        key: &ConsumerGroupKey,
        partition_id: &str,
    ) -> Result<Option<Checkpoint>, CheckpointError> {
        let name = key.checkpoint_blob(partition_id)?;
        match self.blobs.get(&self.container, &name).await? {
            None => Ok(None),
            Some(blob) => checkpoint_from_metadata(
                &name,
                partition_id.to_string(),
                &blob.properties.metadata,
                blob.properties.last_modified,
            )
            .map(Some),
        }
    }

    /// Moves a partition's checkpoint forward to `checkpoint`, never back: what pumps write.
    ///
    /// The SDKs write checkpoints unconditionally, so a stale owner — one frozen past its
    /// expiry, or finishing its batch after the partition was taken — can put an older
    /// position over the new owner's (`bench chaos` saw 802 replaced by 367 when a frozen
    /// instance woke). Here the write is conditional on the ETag of the version it replaces,
    /// and a stored checkpoint at or past ours is left alone ([`CheckpointAdvance::Behind`]).
    /// `known` is the ETag this writer got from its previous write: while nobody else writes,
    /// each checkpoint costs one request, as an unconditional one does; after another writer
    /// it costs a read more. Without a sequence number there is nothing to compare, and the
    /// write is unconditional.
    pub async fn advance_checkpoint(
        &self,
        key: &ConsumerGroupKey,
        checkpoint: &Checkpoint,
        known: Option<&ETag>,
    ) -> Result<CheckpointAdvance, CheckpointError> {
        let Some(ours) = checkpoint.sequence_number else {
            self.update_checkpoint(key, checkpoint).await?;
            return Ok(CheckpointAdvance::Unconditional);
        };
        let name = key.checkpoint_blob(&checkpoint.partition_id)?;
        let metadata = checkpoint_metadata(checkpoint);
        let mut condition = known.map(|e| Condition::IfMatch(e.clone()));
        // Each round either writes or learns of another writer; eight writes are plenty. A
        // writer with no version known spends its first round reading, which is not one of
        // them: otherwise eight writers racing from scratch left the last one seven writes,
        // one short of outlasting the other seven (the conformance test's race saw it).
        let rounds = 8 + usize::from(condition.is_none());
        for _ in 0..rounds {
            let attempt = match &condition {
                Some(c @ Condition::IfMatch(_)) => {
                    self.blobs
                        .set_metadata(&self.container, &name, &metadata, c)
                        .await
                }
                Some(c) => {
                    self.blobs
                        .put(&self.container, &name, bytes::Bytes::new(), &metadata, c)
                        .await
                }
                // No version known yet: read what is stored first.
                None => Err(StoreError::ConditionNotMet {
                    container: self.container.clone(),
                    name: name.clone(),
                }),
            };
            match attempt {
                Ok(written) => return Ok(CheckpointAdvance::Written(written.etag)),
                Err(
                    StoreError::ConditionNotMet { .. }
                    | StoreError::AlreadyExists { .. }
                    | StoreError::NotFound { .. },
                ) => {}
                Err(e) => return Err(e.into()),
            }
            // Someone else wrote (or we never have): compare with what is stored.
            condition = match self.blobs.get(&self.container, &name).await? {
                None => Some(Condition::IfNotExists),
                Some(blob) => {
                    let stored = checkpoint_from_metadata(
                        &name,
                        checkpoint.partition_id.clone(),
                        &blob.properties.metadata,
                        blob.properties.last_modified,
                    )
                    .ok()
                    .and_then(|c| c.sequence_number);
                    if let Some(stored) = stored.filter(|s| *s >= ours) {
                        return Ok(CheckpointAdvance::Behind { stored });
                    }
                    Some(Condition::IfMatch(blob.properties.etag))
                }
            };
        }
        Err(CheckpointError::Store(StoreError::Unavailable(format!(
            "checkpoint {name} kept changing under eight attempts to advance it"
        ))))
    }

    /// Records where a partition's processing stopped, unconditionally, like the SDKs: what
    /// `checkpoints reset` uses, since a reset may move a checkpoint back on purpose. Pumps
    /// use [`CheckpointStore::advance_checkpoint`].
    pub async fn update_checkpoint(
        &self,
        key: &ConsumerGroupKey,
        checkpoint: &Checkpoint,
    ) -> Result<(), CheckpointError> {
        if checkpoint.offset.is_none() && checkpoint.sequence_number.is_none() {
            return Err(CheckpointError::EmptyCheckpoint {
                partition_id: checkpoint.partition_id.clone(),
            });
        }
        let name = key.checkpoint_blob(&checkpoint.partition_id)?;
        let metadata = checkpoint_metadata(checkpoint);
        match self
            .blobs
            .set_metadata(&self.container, &name, &metadata, &Condition::Always)
            .await
        {
            Ok(_) => Ok(()),
            Err(StoreError::NotFound { .. }) => {
                self.blobs
                    .put(
                        &self.container,
                        &name,
                        bytes::Bytes::new(),
                        &metadata,
                        &Condition::Always,
                    )
                    .await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Every legacy (v3/v4) checkpoint of the consumer group that recorded a position.
    pub async fn list_legacy(
        &self,
        key: &ConsumerGroupKey,
    ) -> Result<Listing<LegacyCheckpoint>, CheckpointError> {
        let prefix = key.legacy_prefix();
        let listed = self.blobs.list(&self.container, &prefix).await?;
        let mut listing = Listing::default();
        // Children of the prefix are partitions; deeper names (`ownership/…`, `checkpoint/…`)
        // belong to the current format, which shares the prefix when the names are lowercase.
        for b in listed
            .iter()
            .filter(|b| !b.name[prefix.len()..].contains('/'))
        {
            let partition = names::partition_of(&b.name).to_string();
            match self.read_legacy(&b.name, &partition).await {
                Ok(Some(cp)) => listing.items.push(cp),
                Ok(None) => {}
                Err(e @ CheckpointError::BadLegacyCheckpoint { .. }) => listing.problems.push(e),
                Err(e) => return Err(e),
            }
        }
        Ok(listing)
    }

    /// One partition's legacy checkpoint, looked up under the EventProcessorHost name and, if
    /// different, under the name the v5 extension reads.
    pub async fn get_legacy(
        &self,
        key: &ConsumerGroupKey,
        partition_id: &str,
    ) -> Result<Option<LegacyCheckpoint>, CheckpointError> {
        let primary = key.legacy_blob(partition_id)?;
        if let Some(cp) = self.read_legacy(&primary, partition_id).await? {
            return Ok(Some(cp));
        }
        let as_given = format!("{}{}", key.legacy_prefix_as_given(), partition_id);
        if as_given != primary {
            return self.read_legacy(&as_given, partition_id).await;
        }
        Ok(None)
    }

    async fn read_legacy(
        &self,
        name: &str,
        partition_id: &str,
    ) -> Result<Option<LegacyCheckpoint>, CheckpointError> {
        match self.blobs.get(&self.container, name).await? {
            None => Ok(None),
            Some(blob) => legacy::parse(name, partition_id, &blob.data),
        }
    }

    /// Where a partition's reader starts: current checkpoint, else legacy, else `initial`.
    /// A current checkpoint that cannot be read is an error rather than a silent fallback:
    /// falling back could skip events (initial position "end") or replay a whole retention.
    pub async fn start_position(
        &self,
        key: &ConsumerGroupKey,
        partition_id: &str,
        initial: InitialPosition,
    ) -> Result<Start, CheckpointError> {
        let current = self.get_checkpoint(key, partition_id).await?;
        let legacy = match &current {
            Some(_) => None,
            None => self.get_legacy(key, partition_id).await?,
        };
        Ok(position::start_position(
            current.as_ref(),
            legacy.as_ref(),
            initial,
        ))
    }
}

/// A checkpoint's metadata. Both keys are always written, `""` when unknown: the Functions
/// scale controller tells the formats apart by a missing `offset`.
fn checkpoint_metadata(checkpoint: &Checkpoint) -> Metadata {
    let mut metadata = Metadata::new();
    metadata.insert(OFFSET.into(), checkpoint.offset.clone().unwrap_or_default());
    metadata.insert(
        SEQUENCE_NUMBER.into(),
        checkpoint
            .sequence_number
            .map(|s| s.to_string())
            .unwrap_or_default(),
    );
    metadata
}

/// What [`CheckpointStore::advance_checkpoint`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckpointAdvance {
    /// Written; the ETag to pass as `known` next time.
    Written(ETag),
    /// Not written: the stored checkpoint is already at `stored`, at or past ours (another
    /// owner is ahead; this writer is likely stale).
    Behind { stored: i64 },
    /// Written unconditionally (the checkpoint had no sequence number).
    Unconditional,
}

/// Reads the checkpoint metadata as the .NET store does: `offset` preferred, `""` (or the
/// placeholder "no offset") meaning absent; a value that is not a number is a problem.
pub fn checkpoint_from_metadata(
    blob: &str,
    partition_id: String,
    metadata: &Metadata,
    last_modified: DateTime<Utc>,
) -> Result<Checkpoint, CheckpointError> {
    let bad = |problem: String| CheckpointError::BadCheckpoint {
        blob: blob.to_string(),
        problem,
    };
    let offset = match metadata.get(OFFSET).map(String::as_str) {
        None | Some("") | Some("no offset") => None,
        Some(v) if v.parse::<i64>().is_ok() => Some(v.to_string()),
        Some(v) => return Err(bad(format!("its offset metadata {v:?} is not a number"))),
    };
    let sequence_number = match metadata.get(SEQUENCE_NUMBER).map(String::as_str) {
        None | Some("") => None,
        Some(v) => Some(
            v.parse::<i64>()
                .map_err(|_| bad(format!("its sequencenumber metadata {v:?} is not a number")))?,
        ),
    };
    if offset.is_none() && sequence_number.is_none() {
        return Err(bad(
            "it has neither an offset nor a sequencenumber metadata value".to_string(),
        ));
    }
    Ok(Checkpoint {
        partition_id,
        offset,
        sequence_number,
        last_modified: Some(last_modified),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> Metadata {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn checkpoint_metadata_is_read_like_the_dotnet_store() {
        let t = Utc::now();
        let cp = checkpoint_from_metadata(
            "b",
            "0".into(),
            &meta(&[("offset", "1234"), ("sequencenumber", "56")]),
            t,
        )
        .unwrap();
        assert_eq!(
            (cp.offset.as_deref(), cp.sequence_number),
            (Some("1234"), Some(56))
        );
        let cp = checkpoint_from_metadata(
            "b",
            "0".into(),
            &meta(&[("offset", ""), ("sequencenumber", "56")]),
            t,
        )
        .unwrap();
        assert_eq!((cp.offset, cp.sequence_number), (None, Some(56)));
    }

    #[test]
    fn bad_checkpoint_metadata_names_the_blob_and_the_problem() {
        let t = Utc::now();
        for (m, needle) in [
            (meta(&[]), "neither an offset nor a sequencenumber"),
            (meta(&[("offset", ""), ("sequencenumber", "")]), "neither"),
            (
                meta(&[("offset", "12"), ("sequencenumber", "x")]),
                "sequencenumber metadata \"x\"",
            ),
            (
                meta(&[("offset", "1e9"), ("sequencenumber", "1")]),
                "offset metadata \"1e9\"",
            ),
        ] {
            let err = checkpoint_from_metadata("ns/h/$default/checkpoint/3", "3".into(), &m, t)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("ns/h/$default/checkpoint/3") && err.contains(needle),
                "{err}"
            );
        }
    }

    #[test]
    fn ownership_is_active_only_when_owned_and_fresh() {
        let now = Utc::now();
        let o = |owner: &str, age_s: i64| PartitionOwnership {
            partition_id: "0".into(),
            owner_id: owner.into(),
            etag: ETag::new("x"),
            last_modified: now - chrono::Duration::seconds(age_s),
            vouched_expiry: None,
        };
        let expiry = std::time::Duration::from_secs(120);
        assert!(o("a", 10).is_active(now, expiry));
        assert!(!o("a", 120).is_active(now, expiry));
        assert!(!o("", 1).is_active(now, expiry));
    }
}

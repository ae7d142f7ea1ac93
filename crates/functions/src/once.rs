//! Outputs once under redelivery (feature `once`): [`Once::claim`] says which events of a batch
//! still owe their outputs, and records that they are being given.
//!
//! An Event Hubs trigger delivers at least once: a batch comes again after its instance died
//! before the checkpoint, after its partition moved, or while a frozen owner finishes it late.
//! A function that sends one output per event then sends some twice. `Once` keeps, per
//! function, event hub, consumer group and partition, the highest sequence number whose
//! outputs were given — a small JSON blob in the app's storage (`AzureWebJobsStorage`, as the
//! host's own state), container `hubhost-once`, advanced with a conditional write (ETag) before
//! the function answers. A redelivered event at or below it owes nothing; of two owners racing
//! for the same events, one write wins and the other owes nothing.
//!
//! A mark also keeps when the event at its sequence number was enqueued: an event hub deleted
//! and created again numbers its partitions from 0, and an event at or below the mark enqueued
//! after it is of the new partition, so the mark starts over rather than take the new events
//! for given ones.
//!
//! One exception keeps outputs from being lost: when the host *retries* the very batch that
//! made the last claim (`RetryContext.RetryCount` > 0), the previous attempt failed — the
//! function failed, the handler died before answering, or an output binding failed, and in each
//! case the host did not carry the outputs out (a failed output fails the invocation), so they
//! are given again.
//!
//! What holds, on Azure as under `hubhost emulate`, with a retry policy on the function:
//! no duplicate after redelivery, partition moves, scale-in and out or a frozen owner; no
//! loss after a handler crash or an output failure. What does not: an instance that dies after
//! the claim but before the host carried the outputs out loses them (the next owner sees them
//! claimed), and a batch with two outputs where one was carried out and the other failed gives
//! the first again on the retry. Without a retry policy the host checkpoints past a failed
//! batch, and its outputs are lost with or without `Once`.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::batch::{EventRecord, TriggerBatch};
use crate::context::FunctionContext;
use crate::function::FunctionError;
/// Where marks are kept: any blob store (`Once::for_instance`).
pub use hubhost_storage::SharedStore;
use hubhost_storage::{Condition, Metadata, StoreError};

/// The container the marks are kept in.
pub const CONTAINER: &str = "hubhost-once";
/// Conditional writes lost to another writer before giving up (the host then retries).
const ATTEMPTS: usize = 8;

/// Why [`Once`] could not decide.
#[derive(Debug, thiserror::Error)]
pub enum OnceError {
    /// The app's storage setting is unusable.
    #[error("Once: the app's storage: {0}")]
    Settings(String),
    /// The storage did not answer or refused; the batch should fail and be retried.
    #[error("Once: storage: {0}")]
    Storage(#[from] StoreError),
    /// Another writer kept changing the mark.
    #[error("Once: the mark {0} kept changing under concurrent writers")]
    Contended(String),
}

impl From<OnceError> for FunctionError {
    fn from(e: OnceError) -> Self {
        FunctionError::Failed {
            code: "once_storage",
            message: e.to_string(),
        }
    }
}

/// The per-partition marks of an app's functions.
#[derive(Clone)]
pub struct Once {
    store: SharedStore,
    /// This instance, as the platform names it.
    instance: Option<String>,
}

/// What a partition's mark holds.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mark {
    /// Every event up to this sequence number has had its outputs given (or is being given).
    pub through: i64,
    /// The latest claims, newest last (at most [`RECENT_CLAIMS`]).
    pub recent: Vec<Claim>,
    /// When the event at `through` was enqueued: an event at or below `through` enqueued
    /// later is of a new partition under the same id (the event hub was recreated), which
    /// this mark says nothing about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through_enqueued: Option<chrono::DateTime<chrono::Utc>>,
}

impl Mark {
    /// Whether the mark is of an earlier life of the partition: the event hub was deleted and
    /// created again, its sequence numbers started over, and a batch starting at `first`
    /// (enqueued at `first_enqueued`) is numbered at or below the mark yet enqueued after the
    /// event at the mark. Within one partition a lower sequence number is never enqueued later.
    pub fn is_of_earlier_partition(
        &self,
        first: i64,
        first_enqueued: Option<chrono::DateTime<chrono::Utc>>,
    ) -> bool {
        matches!(
            (self.through_enqueued, first_enqueued),
            (Some(at_mark), Some(enqueued)) if first <= self.through && enqueued > at_mark
        )
    }
}

/// One batch's claim: its first and last sequence numbers, what it owed, and who claimed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    /// The instance that claimed it (`WEBSITE_INSTANCE_ID`, else `CONTAINER_NAME`): a retry is
    /// of the claim its own instance made, never of another owner's claim of the same events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimant: Option<String>,
    /// The batch's first sequence number.
    pub first: i64,
    /// The batch's last sequence number.
    pub last: i64,
    /// Its events above this owed their outputs.
    pub owed_after: i64,
}

/// Claims a mark remembers: enough for the retries of every batch in flight on a partition.
pub const RECENT_CLAIMS: usize = 32;

/// What to do with a batch, given its partition's mark (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Events with a sequence number above this owe their outputs.
    pub owed_after: i64,
    /// The mark to write first, if it changes.
    pub write: Option<Mark>,
}

/// The rule: events above the mark owe their outputs, and the mark moves to the batch's last;
/// a retry of a batch that made a claim owes again what that claim owed (its attempt failed,
/// so the host carried none of its outputs out). A delivery that owes nothing records its claim
/// too, so that its own retry owes nothing: it must not match an earlier claim of the same
/// events, whose outputs were given.
pub fn decide(
    mark: Option<&Mark>,
    first: i64,
    last: i64,
    retry: bool,
    claimant: Option<&str>,
) -> Decision {
    let mark = mark.cloned().unwrap_or(Mark {
        through: first - 1,
        recent: Vec::new(),
        through_enqueued: None,
    });
    if retry
        && let Some(claim) = mark
            .recent
            .iter()
            .rev()
            .find(|c| c.first == first && c.last == last && c.claimant.as_deref() == claimant)
    {
        return Decision {
            owed_after: claim.owed_after,
            write: None,
        };
    }
    let mut recent = mark.recent;
    recent.push(Claim {
        claimant: claimant.map(str::to_string),
        first,
        last,
        owed_after: mark.through,
    });
    forget_oldest(&mut recent);
    Decision {
        owed_after: mark.through,
        write: Some(Mark {
            through: mark.through.max(last),
            recent,
            through_enqueued: mark.through_enqueued,
        }),
    }
}

/// Keeps `recent` to [`RECENT_CLAIMS`], forgetting the oldest claims first, but each
/// claimant's latest claim last: a frozen owner's retry of its batch may come after the next
/// owner made dozens of claims on the partition, and must still find its own (a simulated
/// rehearsal found a retry that did not, and the outputs it owed lost).
fn forget_oldest(recent: &mut Vec<Claim>) {
    while recent.len() > RECENT_CLAIMS {
        let superseded = (0..recent.len()).find(|&i| {
            recent[i + 1..]
                .iter()
                .any(|later| later.claimant == recent[i].claimant)
        });
        recent.remove(superseded.unwrap_or(0));
    }
}

impl Once {
    /// Marks kept in `store`.
    pub fn new(store: SharedStore) -> Self {
        let instance = ["WEBSITE_INSTANCE_ID", "CONTAINER_NAME"]
            .iter()
            .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()));
        Once { store, instance }
    }

    /// Marks kept in memory, for a unit test that calls the function in-process.
    pub fn in_memory() -> Self {
        Once::new(std::sync::Arc::new(
            hubhost_storage::memory::MemoryStore::default(),
        ))
    }

    /// The same, claiming as `instance` (tests; a handler is told by the platform).
    pub fn for_instance(store: SharedStore, instance: &str) -> Self {
        Once {
            store,
            instance: Some(instance.to_string()),
        }
    }

    /// Another instance's `Once` over the same marks: for a test of a partition moving
    /// between instances, or of a frozen owner's late answer.
    ///
    /// ```
    /// use hubhost_functions::once::Once;
    ///
    /// let first = Once::in_memory();
    /// let second = first.as_instance("instance-2"); // the marks `first` keeps
    /// # let _ = second;
    /// ```
    pub fn as_instance(&self, instance: &str) -> Once {
        Once::for_instance(self.store.clone(), instance)
    }

    /// Marks kept in the app's storage, read as the host reads it: `AzureWebJobsStorage` (a
    /// connection string, an identity-based `__accountName`/`__blobServiceUri`, or locally a
    /// directory), from the environment the host gives the handler.
    pub fn from_environment() -> Result<Self, OnceError> {
        let location = hubhost_storage::settings::resolve_storage(None, |k| std::env::var(k).ok())
            .map_err(|e| OnceError::Settings(e.to_string()))?;
        let store = location
            .open()
            .map_err(|e| OnceError::Settings(e.to_string()))?;
        Ok(Once::new(store))
    }

    /// The events of `batch` whose outputs are still owed, after recording that they are being
    /// given: give outputs for these only. Fails when the storage does; let the function fail
    /// then (`?` turns it into [`FunctionError::Failed`]), so that the batch is retried.
    pub async fn claim<'b>(
        &self,
        batch: &'b TriggerBatch,
        context: &FunctionContext,
    ) -> Result<Vec<&'b EventRecord>, OnceError> {
        let numbered: Vec<i64> = batch
            .events
            .iter()
            .filter_map(|e| e.sequence_number)
            .collect();
        let (Some(&first), Some(&last)) = (numbered.iter().min(), numbered.iter().max()) else {
            return Ok(batch.events.iter().collect());
        };
        let enqueued_at = |sequence: i64| {
            batch
                .events
                .iter()
                .find(|e| e.sequence_number == Some(sequence))
                .and_then(|e| e.enqueued_time)
        };
        let retry = context.retry().is_some_and(|r| r.retry_count > 0);
        let name = mark_name(context.function_name(), &batch.partition);
        let mut created = false;
        for _ in 0..ATTEMPTS {
            let current = self.read(&name).await?;
            let mut mark = current.as_ref().map(|(m, _)| m);
            if mark.is_some_and(|m| m.is_of_earlier_partition(first, enqueued_at(first))) {
                tracing::warn!(mark = %name, first, "once: the partition's sequence numbers started over (the event hub was recreated); its mark is of the old partition and starts again");
                mark = None;
            }
            let mut decision = decide(mark, first, last, retry, self.instance.as_deref());
            if let Some(write) = &mut decision.write
                && write.through == last
            {
                write.through_enqueued = enqueued_at(last).or(write.through_enqueued);
            }
            tracing::debug!(mark = %name, claimant = ?self.instance, first, last, retry, owed_after = decision.owed_after, writes = decision.write.is_some(), "once: claim");
            if let Some(mark) = decision.write {
                let data = Bytes::from(serde_json::to_vec(&mark).expect("a mark serializes"));
                let condition = match &current {
                    Some((_, etag)) => Condition::IfMatch(etag.clone()),
                    None => Condition::IfNotExists,
                };
                if !created {
                    self.store.ensure_container(CONTAINER).await?;
                    created = true;
                }
                match self
                    .store
                    .put(CONTAINER, &name, data, &Metadata::new(), &condition)
                    .await
                {
                    Ok(_) => {}
                    Err(StoreError::ConditionNotMet { .. } | StoreError::AlreadyExists { .. }) => {
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(batch
                .events
                .iter()
                .filter(|e| e.sequence_number.is_none_or(|s| s > decision.owed_after))
                .collect());
        }
        Err(OnceError::Contended(name))
    }

    async fn read(&self, name: &str) -> Result<Option<(Mark, hubhost_storage::ETag)>, OnceError> {
        let blob = match self.store.get(CONTAINER, name).await {
            Ok(blob) => blob,
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        Ok(blob.and_then(|b| {
            let mark: Mark = serde_json::from_slice(&b.data).ok()?;
            Some((mark, b.properties.etag))
        }))
    }
}

impl std::fmt::Debug for Once {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Once")
            .field("store", &self.store.describe())
            .finish()
    }
}

/// `{function}/{namespace}/{event hub}/{consumer group}/{partition}`, lowercased where Event
/// Hubs names are case-insensitive; characters a blob name cannot hold are replaced.
fn mark_name(function: &str, partition: &crate::batch::PartitionContext) -> String {
    let part = |s: Option<&str>| {
        s.unwrap_or("-")
            .to_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-._$".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>()
    };
    format!(
        "{}/{}/{}/{}/{}",
        part(Some(function)),
        part(partition.fully_qualified_namespace.as_deref()),
        part(partition.event_hub_name.as_deref()),
        part(partition.consumer_group.as_deref()),
        part(Some(&partition.partition_id)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Option<&str> = Some("instance-a");

    fn claim(first: i64, last: i64, owed_after: i64) -> Claim {
        Claim {
            claimant: A.map(str::to_string),
            first,
            last,
            owed_after,
        }
    }

    #[test]
    fn a_mark_of_a_recreated_partition_is_told_apart_from_a_redelivery() {
        let at = |s: i64| Some(chrono::DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap());
        let mark = Mark {
            through: 40,
            recent: Vec::new(),
            through_enqueued: at(40),
        };
        // Redelivered: numbered at or below the mark, enqueued before it.
        assert!(!mark.is_of_earlier_partition(30, at(30)));
        assert!(!mark.is_of_earlier_partition(40, at(40)));
        // Past the mark: an ordinary new batch.
        assert!(!mark.is_of_earlier_partition(41, at(100)));
        // Numbered 0 again, enqueued after the mark's event: the hub was recreated.
        assert!(mark.is_of_earlier_partition(0, at(100)));
        // A mark written before marks kept the time cannot tell, and is kept.
        let old = Mark {
            through_enqueued: None,
            ..mark
        };
        assert!(!old.is_of_earlier_partition(0, at(100)));
    }

    #[test]
    fn a_first_batch_owes_everything_and_claims_it() {
        let d = decide(None, 0, 9, false, A);
        assert_eq!(d.owed_after, -1);
        let mark = d.write.unwrap();
        assert_eq!(mark.through, 9);
        assert_eq!(mark.recent, [claim(0, 9, -1)]);
    }

    #[test]
    fn a_redelivered_batch_owes_nothing_and_its_retry_nothing_either() {
        let mark = decide(None, 0, 9, false, A).write.unwrap();
        let d = decide(Some(&mark), 0, 9, false, A);
        assert_eq!(d.owed_after, 9);
        // Its claim is recorded: the redelivery's own retry (its handler died) matches it, not
        // the first claim, whose outputs were given (a simulated rehearsal found the retry
        // giving them a second time).
        let again = d.write.unwrap();
        assert_eq!(again.recent.last(), Some(&claim(0, 9, 9)));
        assert_eq!(decide(Some(&again), 0, 9, true, A).owed_after, 9);
        // Redelivered in another split, partly new.
        let d = decide(Some(&mark), 5, 14, false, A);
        assert_eq!(d.owed_after, 9);
        assert_eq!(d.write.unwrap().recent.last(), Some(&claim(5, 14, 9)));
    }

    #[test]
    fn a_retry_owes_what_its_claim_owed_even_after_another_owner_moved_on() {
        let mark = decide(None, 0, 9, false, A).write.unwrap();
        // A frozen owner claimed 0..9; the next owner got 0..14 fresh and owed only 10..14.
        let mark = decide(Some(&mark), 0, 14, false, A).write.unwrap();
        // The frozen owner's outputs failed: its retry owes 0..9 again, not 10..14.
        let d = decide(Some(&mark), 0, 9, true, A);
        assert_eq!((d.owed_after, d.write), (-1, None));
        // The next owner's retry owes 10..14.
        let d = decide(Some(&mark), 0, 14, true, A);
        assert_eq!(d.owed_after, 9);
        // A retry of a batch that never claimed owes what is above the mark: nothing here.
        assert_eq!(decide(Some(&mark), 3, 7, true, A).owed_after, 14);
    }

    #[test]
    fn a_retry_on_another_instance_does_not_owe_what_this_one_claimed() {
        // A frozen owner claimed 0..9 and will give its outputs late; the next owner got 0..9
        // too (owing nothing), failed, and retries: it still owes nothing.
        let mark = decide(None, 0, 9, false, A).write.unwrap();
        let b = decide(Some(&mark), 0, 9, false, Some("instance-b"));
        assert_eq!(b.owed_after, 9);
        let d = decide(Some(&b.write.unwrap()), 0, 9, true, Some("instance-b"));
        assert_eq!((d.owed_after, d.write), (9, None));
    }

    #[test]
    fn a_mark_remembers_a_bounded_number_of_claims() {
        let mut mark = None;
        for first in 0..100 {
            mark = decide(mark.as_ref(), first, first, false, A).write.or(mark);
        }
        let mark = mark.unwrap();
        assert_eq!(mark.recent.len(), RECENT_CLAIMS);
        assert_eq!(mark.through, 99);
    }

    #[test]
    fn a_claimants_latest_claim_outlives_another_owners_many() {
        // A claimed 0..0, its output failed, and it froze; B took the partition and made a
        // hundred claims. A's retry still owes 0 again.
        let mut mark = decide(None, 0, 0, false, A).write;
        for s in 1..=100 {
            mark = decide(mark.as_ref(), s, s, false, Some("instance-b"))
                .write
                .or(mark);
        }
        let mark = mark.unwrap();
        assert_eq!(mark.recent.len(), RECENT_CLAIMS);
        assert_eq!(decide(Some(&mark), 0, 0, true, A).owed_after, -1);
    }

    #[tokio::test]
    async fn after_the_event_hub_is_recreated_its_new_events_owe_their_outputs() {
        let store: SharedStore =
            std::sync::Arc::new(hubhost_storage::memory::MemoryStore::default());
        let once = Once::for_instance(store, "instance-a");
        let t0 = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let batch = |text: &str, enqueued: chrono::DateTime<chrono::Utc>| {
            TriggerBatch::builder("Forward")
                .hub("sensors")
                .partition("3")
                .first_sequence_number(0)
                .enqueued_from(enqueued)
                .text(text)
                .text(text)
                .build()
        };
        let old = batch("old", t0);
        let context = FunctionContext::for_batch(&old);
        assert_eq!(once.claim(&old, &context).await.unwrap().len(), 2);
        // Delivered again: owes nothing.
        assert!(once.claim(&old, &context).await.unwrap().is_empty());
        // The hub recreated: numbered from 0 again, enqueued an hour later.
        let new = batch("new", t0 + chrono::Duration::hours(1));
        let context = FunctionContext::for_batch(&new);
        assert_eq!(once.claim(&new, &context).await.unwrap().len(), 2);
        assert!(once.claim(&new, &context).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn two_owners_racing_for_one_batch_give_its_outputs_once() {
        let store: SharedStore =
            std::sync::Arc::new(hubhost_storage::memory::MemoryStore::default());
        let once = Once::for_instance(store, "instance-a");
        let batch = TriggerBatch::builder("Forward")
            .hub("sensors")
            .partition("3")
            .first_sequence_number(0)
            .text("a")
            .text("b")
            .build();
        let context = FunctionContext::for_batch(&batch);
        let (a, b) = tokio::join!(once.claim(&batch, &context), once.claim(&batch, &context));
        let owed = a.unwrap().len() + b.unwrap().len();
        assert_eq!(owed, 2, "one claim owes both events, the other none");
        assert!(once.claim(&batch, &context).await.unwrap().is_empty());
    }
}
